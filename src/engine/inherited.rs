//! What a new communicator takes from earlier ones of the same processes,
//! in the same order, instead of measuring anew: the decisions they agreed
//! and the measurements they left unfinished when they were freed. What
//! each rank states it holds, and what the agreement on the group keeps of
//! it.
//!
//! Each rank states, per class, the algorithm its earlier communicators
//! agreed on, or how many calls of the class's first measurement one of
//! them made, or nothing. Ranks may hold different things (one settled a
//! vote that another has yet to take, or a communicator of the same
//! processes measured again), so the agreement keeps a class only where
//! every rank states the same, and every rank takes what rank 0 announces:
//! the same classes, alike, on every rank.

use crate::engine::algorithm::Algorithm;
use crate::engine::tuning::ALL_CLASSES;

/// Bytes of a [`Stated`] in a message: two per class.
pub const STATED_LEN: usize = 2 * ALL_CLASSES;

/// A measurement's calls, the most a rank states (the high bit of a
/// class's word marks them).
const MEASURED: u16 = 0x8000;

/// What a rank holds of one class from earlier communicators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// An agreed decision.
    Decided(Algorithm),
    /// This many calls of a class whose first measurement was not voted on
    /// (over two levels, the first ones unmeasured), and its own times of
    /// the measured ones.
    Measured(u64),
}

impl Held {
    fn word(self) -> u16 {
        match self {
            Held::Decided(alg) => u16::from(alg.code()),
            Held::Measured(calls) => match u16::try_from(calls) {
                Ok(t) if t < MEASURED => MEASURED | t,
                _ => 0,
            },
        }
    }

    fn of_word(word: u16) -> Option<Self> {
        if word & MEASURED != 0 {
            Some(Held::Measured(u64::from(word & !MEASURED)))
        } else {
            u8::try_from(word)
                .ok()
                .and_then(Algorithm::of_code)
                .map(Held::Decided)
        }
    }
}

/// Per class, what a rank (or every rank of a subtree) states it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stated([u16; ALL_CLASSES]);

impl Stated {
    /// Nothing stated: every class is measured.
    pub const NONE: Stated = Stated([0; ALL_CLASSES]);

    /// What a rank holding `held` (class and what) states.
    pub fn of(held: impl IntoIterator<Item = (usize, Held)>) -> Self {
        let mut s = Self::NONE;
        for (k, h) in held {
            if let Some(word) = s.0.get_mut(k) {
                *word = h.word();
            }
        }
        s
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        self.0.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    /// From a message's bytes: classes beyond them, or of an unknown
    /// algorithm, state nothing.
    pub fn from_bytes(b: &[u8]) -> Self {
        let mut s = Self::NONE;
        for (word, pair) in s.0.iter_mut().zip(b.chunks_exact(2)) {
            let w = u16::from_be_bytes([pair[0], pair[1]]);
            *word = Held::of_word(w).map_or(0, |_| w);
        }
        s
    }

    /// Keeps the classes `other` states alike.
    pub fn keep_common(&mut self, other: &Stated) {
        for (mine, theirs) in self.0.iter_mut().zip(other.0) {
            if *mine != theirs {
                *mine = 0;
            }
        }
    }

    /// The classes stated, with what.
    pub fn iter(&self) -> impl Iterator<Item = (usize, Held)> + '_ {
        self.0
            .iter()
            .enumerate()
            .filter_map(|(k, &w)| Some((k, Held::of_word(w)?)))
    }

    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// For an agreement by an allreduce of maxima, where there is no
    /// agreement on a group (two levels): each class's word, and its
    /// complement, whose maxima are equal only where every rank's words are.
    pub fn to_maxima(&self) -> Vec<i32> {
        self.0
            .iter()
            .flat_map(|&w| [i32::from(w), i32::from(u16::MAX - w)])
            .collect()
    }

    /// What every rank stated alike, from the maxima of their
    /// [`Stated::to_maxima`].
    pub fn from_maxima(v: &[i32]) -> Self {
        let mut s = Self::NONE;
        for (word, pair) in s.0.iter_mut().zip(v.chunks_exact(2)) {
            let (Ok(w), Ok(not)) = (u16::try_from(pair[0]), u16::try_from(pair[1])) else {
                continue;
            };
            if w == u16::MAX - not && Held::of_word(w).is_some() {
                *word = w;
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::tuning::{class_of, table, Decision, Due, Tuner, BARRIER};

    #[test]
    fn every_algorithm_has_a_code_of_its_own() {
        for a in Algorithm::ALL {
            assert_ne!(a.code(), 0);
            assert_eq!(Algorithm::of_code(a.code()), Some(a));
            assert_eq!(
                Held::of_word(Held::Decided(a).word()),
                Some(Held::Decided(a))
            );
        }
        assert_eq!(Algorithm::of_code(0), None);
        assert_eq!(Algorithm::of_code(Algorithm::ALL.len() as u8 + 1), None);
        assert_eq!(
            Held::of_word(Held::Measured(9).word()),
            Some(Held::Measured(9))
        );
        assert_eq!(Held::Measured(1 << 20).word(), 0, "too many to state");
    }

    /// A tuner that decided three classes: in each, Open MPI's broadcast
    /// was the slowest.
    fn decided() -> Tuner {
        let mut t = Tuner::new(1, 0, true);
        for k in [class_of(4096), class_of(1 << 20), BARRIER] {
            let mut result = vec![1000; t.candidates(k).len()];
            result[0] = 9000;
            result.push(1001);
            t.settle(k, &result);
        }
        t
    }

    fn held(t: &Tuner) -> Vec<(usize, Held)> {
        t.decisions()
            .map(|(k, d)| (k, Held::Decided(d.alg)))
            .collect()
    }

    #[test]
    fn what_all_state_alike_is_kept_and_taken() {
        let old = decided();
        let mine = Stated::of(held(&old));
        assert_eq!(mine.iter().count(), 3);
        assert_eq!(Stated::from_bytes(&mine.to_bytes()), mine);
        let mut agreed = mine;
        agreed.keep_common(&mine);
        assert_eq!(agreed, mine);
        // Another rank that holds only the barrier's, and one whose 1 MiB
        // decision differs.
        let barrier = (BARRIER, held(&old)[2].1);
        let mut other = held(&old);
        other[1].1 = Held::Decided(Algorithm::Chain);
        agreed.keep_common(&Stated::of(other));
        assert_eq!(agreed.iter().count(), 2);
        agreed.keep_common(&Stated::of([barrier]));
        assert_eq!(agreed.iter().collect::<Vec<_>>(), [barrier]);

        let mut new = Tuner::new(1, 0, true);
        let (k, d): (usize, &Decision) = old.decisions().find(|(k, _)| *k == BARRIER).unwrap();
        assert!(new.inherit(k, d));
        // Served from the first call, unmeasured, and no vote.
        for _ in 0..100 {
            assert_eq!(new.plan_class(BARRIER), Some((d.alg, None)));
            assert_eq!(new.due_of(BARRIER), Due::No);
        }
        let taken = new.decisions().next().unwrap().1;
        assert!(taken.inherited && taken.alg == d.alg);
        assert!(table(&new).contains("earlier communicator"));
        // Not twice, nor for a class already called.
        assert!(!new.inherit(k, d));
        new.plan(4096);
        let (k, d) = old.decisions().next().unwrap();
        assert!(!new.inherit(k, d));
    }

    /// A communicator freed after 10 calls of a class measured in 16 (8
    /// per candidate) leaves 10; the next one measures the other 6, and
    /// then votes as the first would have, on the times of both.
    #[test]
    fn a_measurement_goes_on_where_the_last_communicator_left_it() {
        let k = class_of(4096);
        let us = |n| Some(std::time::Duration::from_micros(n));
        let mut first = Tuner::new(2, 0, false);
        for i in 0..10 {
            let (alg, sample) = first.plan_class(k).unwrap();
            first.record(
                sample.unwrap(),
                us(if i == 0 { 700 } else { 500 + i }),
                None,
            );
            assert_eq!(first.due_of(k), Due::No, "{alg:?}");
        }
        let left = first.progress();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].1.calls, 10);
        let stated = Stated::of([(k, Held::Measured(10))]);
        assert_eq!(Stated::from_bytes(&stated.to_bytes()), stated);

        let mut next = Tuner::new(2, 0, false);
        assert!(next.take_on(k, &left[0].1));
        let cands = next.candidates(k).to_vec();
        let mut ran = Vec::new();
        for _ in 0..6 {
            let (alg, sample) = next.plan_class(k).unwrap();
            ran.push(alg);
            next.record(sample.unwrap(), us(300), None);
        }
        // The rest of the second candidate's calls, as the first would
        // have run them; then the interim algorithm until the answers are
        // in, as on any communicator.
        assert!(ran.iter().all(|a| *a == ran[0]) && ran[0] != cands[0]);
        assert_eq!(next.due_of(k), Due::No);
        for _ in 0..8 {
            assert_eq!(next.plan_class(k), Some((Algorithm::Multicast, None)));
        }
        let Due::Vote(_, vector) = next.due_of(k) else {
            panic!("the vote is due after the last measured call")
        };
        assert_eq!(vector[0], 501, "the first communicator's best");
        assert_eq!(vector[1], 300);
        // Taken on only before the class's first call, and only where it
        // adds up.
        assert!(!next.take_on(k, &left[0].1));
        let mut third = Tuner::new(2, 0, false);
        let mut fewer = left[0].1.clone();
        fewer.calls = 9;
        assert!(!third.take_on(k, &fewer));
    }

    /// Over two levels a class's first calls go unmeasured while the
    /// leaders measure theirs: a communicator freed meanwhile leaves its
    /// count, and the next measures where this one would have.
    #[test]
    fn over_two_levels_the_unmeasured_calls_count_on() {
        let k = class_of(4096);
        let mut first = Tuner::over_two_levels(2, 0, false);
        let mut unmeasured = 0;
        while let Some((Algorithm::TwoLevel, None)) = first.plan_class(k) {
            unmeasured += 1;
        }
        assert!(unmeasured > 10, "{unmeasured}");
        let mut first = Tuner::over_two_levels(2, 0, false);
        for _ in 0..10 {
            first.plan_class(k);
        }
        let left = first.progress();
        assert_eq!(left[0].1.calls, 10);
        let mut next = Tuner::over_two_levels(2, 0, false);
        assert!(next.take_on(k, &left[0].1));
        for _ in 10..unmeasured {
            assert_eq!(next.plan_class(k), Some((Algorithm::TwoLevel, None)));
        }
        assert!(
            next.plan_class(k).unwrap().1.is_some(),
            "measured from here"
        );
    }

    #[test]
    fn maxima_keep_what_every_rank_states_alike() {
        let a = Stated::of([(1, Held::Measured(4)), (5, Held::Decided(Algorithm::Chain))]);
        let b = Stated::of([
            (1, Held::Measured(4)),
            (5, Held::Decided(Algorithm::Linear)),
        ]);
        let c = Stated::of([(1, Held::Measured(4))]);
        let max = |sets: &[Stated]| {
            let mut v = sets[0].to_maxima();
            for s in &sets[1..] {
                for (m, x) in v.iter_mut().zip(s.to_maxima()) {
                    *m = (*m).max(x);
                }
            }
            Stated::from_maxima(&v)
        };
        assert_eq!(max(&[a, a]), a);
        assert_eq!(max(&[a, b]), c);
        assert_eq!(max(&[c, a, a]), c);
        assert_eq!(max(&[Stated::NONE, a]), Stated::NONE);
    }

    #[test]
    fn short_or_unknown_bytes_state_nothing() {
        let s = Stated::from_bytes(&[0, Algorithm::Multicast.code(), 0, 200, 1]);
        assert_eq!(
            s.iter().collect::<Vec<_>>(),
            [(0, Held::Decided(Algorithm::Multicast))]
        );
        assert!(Stated::from_bytes(&[]).is_empty());
    }
}
