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
use crate::group::stated::{Stated, STATED_WORDS};

// The agreement states one word per class.
const _: () = assert!(ALL_CLASSES == STATED_WORDS);

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
    /// Its word in the agreement: `1` to `12` an algorithm
    /// ([`Algorithm::code`]), [`MEASURED`] + n a measurement's n calls; 0
    /// (nothing) where the calls do not fit.
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

/// What a rank holding `held` (class and what) states.
pub fn stated(held: impl IntoIterator<Item = (usize, Held)>) -> Stated {
    Stated::of(held.into_iter().map(|(k, h)| (k, h.word())))
}

/// The classes `s` states, with what; words of no meaning here (from a
/// corrupt message) state nothing.
pub fn held(s: &Stated) -> impl Iterator<Item = (usize, Held)> + '_ {
    s.words().filter_map(|(k, w)| Some((k, Held::of_word(w)?)))
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

    fn decisions(t: &Tuner) -> Vec<(usize, Held)> {
        t.decisions()
            .map(|(k, d)| (k, Held::Decided(d.alg)))
            .collect()
    }

    #[test]
    fn what_all_state_alike_is_kept_and_taken() {
        let old = decided();
        let mine = stated(decisions(&old));
        assert_eq!(held(&mine).count(), 3);
        let mut agreed = mine;
        // Another rank that holds only the barrier's, and one whose 1 MiB
        // decision differs.
        let barrier = (BARRIER, decisions(&old)[2].1);
        let mut other = decisions(&old);
        other[1].1 = Held::Decided(Algorithm::Chain);
        agreed.keep_common(&stated(other));
        assert_eq!(held(&agreed).count(), 2);
        agreed.keep_common(&stated([barrier]));
        assert_eq!(held(&agreed).collect::<Vec<_>>(), [barrier]);

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
        let said = stated([(k, Held::Measured(10))]);
        assert_eq!(held(&said).collect::<Vec<_>>(), [(k, Held::Measured(10))]);

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
    fn unknown_words_state_nothing() {
        let s = Stated::of([
            (0, u16::from(Algorithm::Multicast.code())),
            (1, 200),
            (2, 13),
        ]);
        assert_eq!(
            held(&s).collect::<Vec<_>>(),
            [(0, Held::Decided(Algorithm::Multicast))]
        );
    }
}
