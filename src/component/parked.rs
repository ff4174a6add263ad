//! The levels and multicast groups of freed communicators, kept for later
//! communicators of the same processes. Splitting a communicator into its
//! levels is the dearest part of its setup (two splits, Open MPI's
//! selection of components on both parts, the node's shared segment, the
//! leaders' agreement on a multicast group: 17 ms on 4 emulated hosts of 4
//! ranks, `docs/performance.md`); on one level, the agreement on a group
//! takes four rounds over the ranks where taking over a kept one takes two.
//! A program that makes and frees communicators of the same processes step
//! after step pays for them once. A new communicator's ranks take kept
//! levels or a kept group over only where every rank offers the same ones
//! (`Module::split_levels`, [`crate::group::setup`]).

use std::sync::Mutex;

use crate::base::params::{fnv1a, Config};
use crate::component::levels::Levels;
use crate::driver::multicast::Driver;
use crate::group::setup::{Announce, Kept};
use crate::net::mcast_socket::McastSocket;

/// Whose levels they are: the shared parameters' digest and each member's
/// identity in the run, in rank order (the layout follows from them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owners {
    pub digest: u64,
    pub members: Vec<u64>,
}

/// Kept things with an identity that every rank knows alike, oldest first.
struct Store<T> {
    /// Each with its owners, identity and place in the order of keeping.
    kept: Vec<(Owners, u64, u64, T)>,
    /// The place of the next thing kept.
    next: u64,
    /// `MPI_Finalize` began: nothing more is kept.
    closed: bool,
}

/// A kept thing taken out to be offered to a new communicator. What the
/// ranks do not take goes back to its place in the order of keeping
/// ([`park_group_again`], [`park_again`]): put back as new, one that only
/// some ranks still hold (the others let it go for the bound) would
/// outlive every later one and be offered, and refused, again and again.
pub struct Offered<T> {
    item: T,
    place: u64,
}

impl<T> Offered<T> {
    pub fn into_inner(self) -> T {
        self.item
    }
}

impl<T> std::ops::Deref for Offered<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.item
    }
}

impl<T> Store<T> {
    const fn new() -> Self {
        Store {
            kept: Vec::new(),
            next: 0,
            closed: false,
        }
    }

    /// Keeps `t`, identified by `id`, with at most `limit` kept in all;
    /// gives back what is to be freed: `t` itself once closed or where
    /// nothing is kept, else the oldest beyond the limit.
    fn keep(&mut self, owners: Owners, id: u64, t: T, limit: usize) -> Vec<T> {
        let place = self.next;
        self.next += 1;
        self.put(owners, id, Offered { item: t, place }, limit)
    }

    /// Puts `o` back at its place, with at most `limit` kept in all; gives
    /// back what is to be freed, as [`Store::keep`].
    fn put(&mut self, owners: Owners, id: u64, o: Offered<T>, limit: usize) -> Vec<T> {
        if self.closed || limit == 0 {
            return vec![o.item];
        }
        let at = self
            .kept
            .partition_point(|(_, _, place, _)| *place < o.place);
        self.kept.insert(at, (owners, id, o.place, o.item));
        let over = self.kept.len().saturating_sub(limit);
        self.kept.drain(..over).map(|(_, _, _, t)| t).collect()
    }

    /// Takes out what `owners` would be offered: of several, the one of
    /// the smallest identity, so that ranks that kept the same ones in
    /// other orders offer the same.
    fn take_out(&mut self, owners: &Owners) -> Option<(u64, Offered<T>)> {
        let (i, _) = self
            .kept
            .iter()
            .enumerate()
            .filter(|(_, (o, _, _, _))| o == owners)
            .min_by_key(|(_, (_, id, _, _))| *id)?;
        let (_, id, place, item) = self.kept.remove(i);
        Some((id, Offered { item, place }))
    }

    fn close(&mut self) -> Vec<T> {
        self.closed = true;
        self.kept.drain(..).map(|(_, _, _, t)| t).collect()
    }
}

static PARKED: Mutex<Store<Box<Levels>>> = Mutex::new(Store::new());

fn parked() -> std::sync::MutexGuard<'static, Store<Box<Levels>>> {
    PARKED.lock().unwrap_or_else(|p| p.into_inner())
}

/// The multicast group of a freed communicator on one level: its driver
/// (socket, identity, broadcasts' numbering, key), what was announced for
/// it, and this process's parameters it was opened under (a later
/// communicator takes it over only under the same, the socket's own
/// included).
pub struct Group {
    pub announce: Announce,
    pub driver: Driver<McastSocket>,
    pub cfg: Config,
}

impl Group {
    /// What the ranks compare: a digest of the group's communicator
    /// identity and the number of broadcasts it carried, so that ranks
    /// offer the same only for the same group at the same point.
    pub fn kept(&self) -> Kept {
        let at = [self.announce.comm_id, self.driver.broadcasts_begun()];
        Kept {
            id: fnv1a(&at.map(u64::to_be_bytes).concat()) | 1,
            announce: self.announce,
        }
    }
}

static GROUPS: Mutex<Store<Group>> = Mutex::new(Store::new());

fn groups() -> std::sync::MutexGuard<'static, Store<Group>> {
    GROUPS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Keeps the group of a freed communicator of `owners`, up to
/// `coll_ipmc_keep_freed` groups (a socket closes where it is not kept).
pub fn park_group(owners: Owners, group: Group) {
    let (id, limit) = (group.kept().id, group.cfg.keep_freed);
    let left = groups().keep(owners, id, group, limit);
    drop(left);
}

/// Takes out the group this process offers a new communicator of
/// `owners`: the communicator takes it over where every rank offers the
/// same, else it is parked again ([`park_group_again`]).
pub fn take_out_group(owners: &Owners) -> Option<Offered<Group>> {
    groups().take_out(owners).map(|(_, group)| group)
}

/// Parks again, at its place, a group the ranks did not take over.
pub fn park_group_again(owners: Owners, group: Offered<Group>) {
    let (id, limit) = (group.kept().id, group.cfg.keep_freed);
    let left = groups().put(owners, id, group, limit);
    drop(left);
}

/// Keeps the levels of a freed communicator of `owners`, up to `limit`
/// levels (`coll_ipmc_keep_freed`); frees, with no lock held, what is not
/// kept.
pub fn park(owners: Owners, levels: Box<Levels>, limit: usize) {
    let id = levels.id;
    let left = parked().keep(owners, id, levels, limit);
    for levels in left {
        levels.free();
    }
}

/// Takes out the levels this process offers a new communicator of
/// `owners`, so that no other communicator takes them meanwhile: the
/// communicator takes them over where every rank offers the same, else
/// they are parked again ([`park_again`]).
pub fn take_out(owners: &Owners) -> Option<Offered<Box<Levels>>> {
    parked().take_out(owners).map(|(_, levels)| levels)
}

/// Parks again, at their place, levels the ranks did not take over, up to
/// `limit` levels; frees, with no lock held, what is not kept.
pub fn park_again(owners: Owners, levels: Offered<Box<Levels>>, limit: usize) {
    let id = levels.id;
    let left = parked().put(owners, id, levels, limit);
    for levels in left {
        levels.free();
    }
}

/// At `MPI_Finalize`: frees every kept level, and keeps none from then on
/// (the communicators freed later, as `MPI_COMM_WORLD`, free their own).
pub fn free_all() {
    let all = parked().close();
    for levels in all {
        levels.free();
    }
    let groups = groups().close();
    drop(groups);
}

/// The words each rank states of the levels it offers (`id`, 0 for none)
/// in an allreduce of maxima: the identity and its complement.
pub fn id_words(id: u64) -> [i32; 4] {
    let (hi, lo) = ((id >> 31) as i32 & i32::MAX, id as i32 & i32::MAX);
    [hi, lo, i32::MAX - hi, i32::MAX - lo]
}

/// The identity every rank stated, from the maxima of their
/// [`id_words`]; `None` where they differ.
pub fn same_id(maxima: &[i32]) -> Option<u64> {
    let [hi, lo, not_hi, not_lo] = maxima else {
        return None;
    };
    // Each maximum equals the complement of the complements' maximum only
    // where every rank stated the same word.
    (*not_hi == i32::MAX - hi && *not_lo == i32::MAX - lo)
        .then_some((*hi as u64) << 31 | *lo as u64)
}

/// The levels' identity from their ranks' draws, the same on every rank:
/// the maxima of two 31-bit halves (the first never 0, so that no levels
/// are 0, which stands for none).
pub fn draw_words(draw: u64) -> [i32; 2] {
    [
        (draw >> 33) as i32 | 1,
        (draw & u64::from(i32::MAX as u32)) as i32,
    ]
}

/// The identity from the maxima of the ranks' [`draw_words`].
pub fn drawn_id(maxima: [i32; 2]) -> u64 {
    (maxima[0] as u64) << 31 | maxima[1] as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owners(first: u64) -> Owners {
        Owners {
            digest: 1,
            members: vec![first, 2, 3],
        }
    }

    #[test]
    fn a_store_offers_the_smallest_identity_and_keeps_a_bounded_number() {
        const LIMIT: usize = 4;
        let mut s = Store::new();
        let none: Vec<&str> = Vec::new();
        assert_eq!(s.keep(owners(1), 9, "a", LIMIT), none);
        assert_eq!(s.keep(owners(1), 5, "b", LIMIT), none);
        assert_eq!(s.keep(owners(7), 3, "c", LIMIT), none);
        let taken = |s: &mut Store<&'static str>, o| s.take_out(&owners(o)).map(|(id, t)| (id, *t));
        assert_eq!(taken(&mut s, 2), None);
        assert_eq!(taken(&mut s, 1), Some((5, "b")));
        assert_eq!(taken(&mut s, 1), Some((9, "a")));
        assert_eq!(taken(&mut s, 1), None);
        for id in 10..10 + LIMIT as u64 {
            let freed = s.keep(owners(1), id, "d", LIMIT);
            let oldest = id == 10 + LIMIT as u64 - 1;
            assert_eq!(freed, if oldest { vec!["c"] } else { none.clone() });
        }
        // A smaller limit (`coll_ipmc_keep_freed` changed through MPI_T)
        // frees the oldest down to it; 0 keeps nothing more.
        assert_eq!(s.keep(owners(1), 20, "e", 2), vec!["d"; 3]);
        assert_eq!(s.keep(owners(1), 21, "f", 0), vec!["f"]);
        assert_eq!(s.close().len(), 2);
        assert_eq!(s.keep(owners(1), 1, "g", LIMIT), vec!["g"]);
        assert!(s.take_out(&owners(1)).is_none());
    }

    /// One that the ranks refused goes back where it was, and so is the
    /// first to go when the store is full: put back as new, it would
    /// outlive every later one (and be offered, and refused, again).
    #[test]
    fn what_the_ranks_refused_ages_as_it_would_have() {
        const LIMIT: usize = 3;
        let mut s = Store::new();
        let none: Vec<&str> = Vec::new();
        assert_eq!(s.keep(owners(1), 1, "old", LIMIT), none);
        assert_eq!(s.keep(owners(7), 8, "other", LIMIT), none);
        let (id, old) = s.take_out(&owners(1)).unwrap();
        assert_eq!(s.keep(owners(1), 5, "new", LIMIT), none);
        assert_eq!(s.put(owners(1), id, old, LIMIT), none);
        assert_eq!(s.keep(owners(1), 6, "newer", LIMIT), vec!["old"]);
        assert_eq!(s.keep(owners(1), 9, "newest", LIMIT), vec!["other"]);
        let (id, new) = s.take_out(&owners(1)).unwrap();
        assert_eq!((id, *new), (5, "new"));
        assert_eq!(s.put(owners(1), id, new, 2), vec!["new"]);
        assert_eq!(s.close(), vec!["newer", "newest"]);
    }

    #[test]
    fn only_identities_every_rank_stated_are_taken() {
        let maxima = |ids: &[u64]| -> Vec<i32> {
            let words: Vec<[i32; 4]> = ids.iter().map(|&id| id_words(id)).collect();
            (0..4)
                .map(|i| words.iter().map(|w| w[i]).max().unwrap())
                .collect()
        };
        let id = drawn_id([draw_words(u64::MAX)[0], draw_words(u64::MAX)[1]]);
        assert_eq!(id, (1 << 62) - 1);
        assert_eq!(same_id(&maxima(&[id, id, id])), Some(id));
        assert_eq!(same_id(&maxima(&[0, 0])), Some(0));
        assert_eq!(same_id(&maxima(&[id, 0, id])), None);
        assert_eq!(same_id(&maxima(&[5, 6])), None);
        assert_eq!(same_id(&maxima(&[1 << 31, 1])), None);
        let drawn = drawn_id(draw_words(0));
        assert_ne!(drawn, 0);
        assert_eq!(same_id(&id_words(drawn)), Some(drawn));
    }
}
