//! What each rank states in the agreement on a new communicator's group
//! about the classes of its measured choice, and what every rank states
//! alike: one 16-bit word per class (0: nothing), whose meaning is the
//! measured choice's (`engine::inherited`). The agreement only compares
//! words: a class is kept where every rank states the same one.

/// Classes stated: as many as the measured choice has
/// (`engine::tuning::ALL_CLASSES`, checked there).
pub const STATED_WORDS: usize = 131;

/// Bytes of a [`Stated`] in a message.
pub const STATED_LEN: usize = 2 * STATED_WORDS;

/// One word per class, as a rank (or every rank of a subtree) states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stated([u16; STATED_WORDS]);

impl Stated {
    /// Nothing stated.
    pub const NONE: Stated = Stated([0; STATED_WORDS]);

    /// From class and word pairs; classes beyond [`STATED_WORDS`] state
    /// nothing.
    pub fn of(words: impl IntoIterator<Item = (usize, u16)>) -> Self {
        let mut s = Self::NONE;
        for (k, w) in words {
            if let Some(word) = s.0.get_mut(k) {
                *word = w;
            }
        }
        s
    }

    /// The classes stated, with their words.
    pub fn words(&self) -> impl Iterator<Item = (usize, u16)> + '_ {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, &w)| w != 0)
            .map(|(k, &w)| (k, w))
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        self.0.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    /// From a message's bytes: classes beyond them state nothing.
    pub fn from_bytes(b: &[u8]) -> Self {
        let mut s = Self::NONE;
        for (word, pair) in s.0.iter_mut().zip(b.chunks_exact(2)) {
            *word = u16::from_be_bytes([pair[0], pair[1]]);
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
            if w == u16::MAX - not {
                *word = w;
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_short_bytes_state_nothing() {
        let s = Stated::of([(0, 7), (130, 0x8003), (131, 9)]);
        assert_eq!(s.words().collect::<Vec<_>>(), [(0, 7), (130, 0x8003)]);
        assert_eq!(Stated::from_bytes(&s.to_bytes()), s);
        assert_eq!(Stated::from_bytes(&[0, 7, 1]), Stated::of([(0, 7)]));
        assert_eq!(Stated::from_bytes(&[]), Stated::NONE);
    }

    #[test]
    fn what_every_rank_states_alike_is_kept() {
        let a = Stated::of([(1, 0x8004), (5, 2)]);
        let b = Stated::of([(1, 0x8004), (5, 3)]);
        let c = Stated::of([(1, 0x8004)]);
        let mut kept = a;
        kept.keep_common(&b);
        assert_eq!(kept, c);
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
}
