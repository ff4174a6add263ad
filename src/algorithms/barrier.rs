//! The shape of ipmc's `MPI_Barrier` (after seed 000, Chen, Carrasco and
//! Apon): every rank reports its arrival to rank 0 along a tree of empty
//! point-to-point messages, and rank 0 then releases all of them at once by
//! a one-byte two-stage multicast broadcast. Its datagram makes the release
//! early; its chain guarantees it (a rank that lost the datagram gets the
//! byte from its predecessor), with no timeout and no acknowledgement. No
//! rank can own the byte before rank 0 sent it, and rank 0 sends it only
//! once every rank arrived.

use std::ops::Range;

/// Children per rank in the arrivals' tree: rank 0 hears directly from up
/// to this many ranks, so a communicator of up to 17 ranks reports in one
/// step, one of 273 in two and one of 4,369 in three, and no rank handles
/// more than this many messages.
pub const FAN_IN: usize = 16;

/// Bytes of the release: one, since a broadcast of none would send no
/// datagram.
pub const RELEASE_LEN: usize = 1;

/// This rank's parent in the arrivals' tree (none for rank 0) and its
/// children, whose arrivals it waits for before it reports its own.
pub fn tree(rank: usize, size: usize) -> (Option<usize>, Range<usize>) {
    let parent = rank.checked_sub(1).map(|r| r / FAN_IN);
    let first = (rank * FAN_IN + 1).min(size);
    let last = (rank * FAN_IN + FAN_IN + 1).min(size);
    (parent, first..last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_reaches_every_rank_once_from_rank_0() {
        for size in [1, 2, 3, 16, 17, 18, 273, 274, 5000] {
            let mut seen = vec![0; size];
            let mut depth = vec![0usize; size];
            for rank in 0..size {
                let (parent, children) = tree(rank, size);
                assert_eq!(parent.is_none(), rank == 0);
                assert!(children.len() <= FAN_IN);
                for c in children {
                    assert!(c > rank, "children come after their parent");
                    assert_eq!(tree(c, size).0, Some(rank));
                    seen[c] += 1;
                    depth[c] = depth[rank] + 1;
                }
            }
            assert!(seen.iter().skip(1).all(|&n| n == 1), "{size}");
            let deepest = depth.iter().copied().max().unwrap_or(0);
            let want = match size {
                0..=1 => 0,
                2..=17 => 1,
                18..=273 => 2,
                274..=4369 => 3,
                _ => 4,
            };
            assert_eq!(deepest, want, "{size}");
        }
    }
}
