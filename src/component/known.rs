//! What this process's communicators measured and agreed, kept by their
//! processes, so that a new communicator of the same processes in the same
//! order takes it on instead of measuring anew (`engine::inherited`).

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::engine::inherited::{self, Held};
use crate::engine::tuning::{Decision, Progress};
use crate::group::stated::Stated;

/// Memberships kept, the most recently used first: a program that makes
/// communicators of ever other processes keeps a bounded store.
const KEPT: usize = 32;

/// Who a communicator's ranks are, in rank order (each member's identity
/// in the run), under which parameters its ranks measured, and over which
/// levels: `None` one, `Some(either_way)` two, whose nodes' ranks copy
/// both ways or not (its candidates differ).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    pub digest: u64,
    pub members: Vec<u64>,
    pub levels: Option<bool>,
}

/// What is kept of one class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kept {
    Decided(Decision),
    /// The first measurement of a communicator freed before its vote.
    Measured(Progress),
}

impl Kept {
    /// What a rank states of it in the agreement on a new group.
    pub fn held(&self) -> Held {
        match self {
            Kept::Decided(d) => Held::Decided(d.alg),
            Kept::Measured(p) => Held::Measured(p.calls),
        }
    }
}

/// What this process kept for a new communicator's membership, recalled
/// when the communicator is set up: what its rank states, and what it
/// takes on of what every rank stated alike.
pub struct Recalled {
    pub membership: Membership,
    kept: Vec<(usize, Kept)>,
}

impl Recalled {
    pub fn new(membership: Membership) -> Self {
        let kept = recall(&membership);
        Recalled { membership, kept }
    }

    /// What this rank states in the agreement.
    pub fn stated(&self) -> Stated {
        inherited::stated(self.kept.iter().map(|(k, kept)| (*k, kept.held())))
    }

    /// What it kept of class `k` that it stated as `what`.
    pub fn find(&self, k: usize, what: Held) -> Option<&Kept> {
        self.kept
            .iter()
            .find(|(class, kept)| *class == k && kept.held() == what)
            .map(|(_, kept)| kept)
    }
}

type Store = VecDeque<(Membership, Vec<(usize, Kept)>)>;

static KNOWN: Mutex<Store> = Mutex::new(VecDeque::new());

/// Changes what is kept for `m`, which becomes the most recently used,
/// and returns what `change` does.
fn with<R>(m: &Membership, change: impl FnOnce(&mut Vec<(usize, Kept)>) -> R) -> R {
    let mut store = KNOWN.lock().unwrap_or_else(|p| p.into_inner());
    let at = store.iter().position(|(kept, _)| kept == m);
    let mut entry = match at.and_then(|i| store.remove(i)) {
        Some(entry) => entry,
        None => (m.clone(), Vec::new()),
    };
    let done = change(&mut entry.1);
    if !entry.1.is_empty() {
        store.push_front(entry);
        store.truncate(KEPT);
    }
    done
}

/// Keeps `d`, class `k`'s decision on a communicator of `m`, in place of
/// what was kept of the class.
pub fn remember(m: &Membership, k: usize, d: &Decision) {
    with(m, |kept| {
        kept.retain(|(class, _)| *class != k);
        kept.push((k, Kept::Decided(d.clone())));
    });
}

/// Keeps the measurements a communicator of `m` leaves unfinished, for
/// the classes that have no decision kept.
pub fn remember_progress(m: &Membership, progress: Vec<(usize, Progress)>) {
    if progress.is_empty() {
        return;
    }
    with(m, |kept| {
        for (k, p) in progress {
            match kept.iter_mut().find(|(class, _)| *class == k) {
                Some((_, Kept::Decided(_))) => {}
                Some((_, was)) => *was = Kept::Measured(p),
                None => kept.push((k, Kept::Measured(p))),
            }
        }
    });
}

/// What is kept for `m`.
fn recall(m: &Membership) -> Vec<(usize, Kept)> {
    with(m, |kept| kept.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::tuning::{Tuner, BARRIER};

    fn decision() -> Decision {
        let mut t = Tuner::new(1, 0, false);
        t.settle(BARRIER, &[900, 100, 1001]).clone()
    }

    fn progress() -> Progress {
        let mut t = Tuner::new(1, 0, false);
        let (_, sample) = t.plan_class(BARRIER).unwrap();
        t.record(
            sample.unwrap(),
            Some(std::time::Duration::from_micros(5)),
            None,
        );
        t.progress().remove(0).1
    }

    #[test]
    fn what_is_kept_per_membership_is_bounded() {
        let m = |first: u64| Membership {
            digest: 7,
            members: vec![first, 1, 2],
            levels: None,
        };
        let (d, p) = (decision(), progress());
        remember_progress(&m(1000), vec![(BARRIER, p.clone()), (3, p.clone())]);
        remember(&m(1000), BARRIER, &d);
        // A measurement does not replace a decision.
        remember_progress(&m(1000), vec![(BARRIER, p.clone())]);
        assert_eq!(
            recall(&m(1000)),
            [
                (3, Kept::Measured(p.clone())),
                (BARRIER, Kept::Decided(d.clone()))
            ]
        );
        assert_eq!(recall(&m(1000))[0].1.held(), Held::Measured(1));
        let other_digest = Membership {
            digest: 8,
            ..m(1000)
        };
        assert!(recall(&other_digest).is_empty());
        let over_levels = Membership {
            levels: Some(false),
            ..m(1000)
        };
        assert!(recall(&over_levels).is_empty());
        for first in 2000..2000 + KEPT as u64 {
            remember(&m(first), BARRIER, &d);
        }
        assert!(recall(&m(1000)).is_empty());
        assert_eq!(recall(&m(2000)).len(), 1);
    }
}
