//! The shape of ipmc's `MPI_Barrier` (after Chen, Carrasco and Apon, MPI
//! collective operations over IP multicast, 2000): every rank reports its
//! arrival to rank 0 along a tree of empty point-to-point messages, and
//! rank 0 then releases all of them at once by one multicast datagram. The
//! datagram makes the release early; empty point-to-point releases down a
//! second tree guarantee it (a rank whose datagram was lost leaves on its
//! parent's), with no timeout and no acknowledgement. Rank 0 sends the
//! datagram and its releases only once every rank arrived, and a rank
//! forwards a release only once released.
//!
//! The two trees differ: arrivals fan in wide, so that they take few steps;
//! releases fan out by two, so that rank 0 sends two messages, not p − 1,
//! after the datagram (the rest of the guarantee is other ranks' work, off
//! rank 0's way to its next call). Between two ranks, arrivals go only to a
//! lower rank and releases only to a higher one, so the two kinds (both
//! empty, with one tag) never share a direction.

use std::ops::Range;

/// Children per rank in the arrivals' tree: rank 0 hears directly from up
/// to this many ranks, so a communicator of up to 17 ranks reports in one
/// step, one of 273 in two and one of 4,369 in three, and no rank handles
/// more than this many messages.
pub const FAN_IN: usize = 16;

/// Bytes of the release: one, since a broadcast of none would send no
/// datagram.
pub const RELEASE_LEN: usize = 1;

/// Children per rank in the releases' tree.
pub const FAN_OUT: usize = 2;

/// This rank's parent in the arrivals' tree (none for rank 0) and its
/// children, whose arrivals it waits for before it reports its own.
pub fn arrivals(rank: usize, size: usize) -> (Option<usize>, Range<usize>) {
    tree(rank, size, FAN_IN)
}

/// This rank's parent in the releases' tree (none for rank 0), whose
/// point-to-point release it waits for unless the datagram came first, and
/// its children, whom it releases.
pub fn releases(rank: usize, size: usize) -> (Option<usize>, Range<usize>) {
    tree(rank, size, FAN_OUT)
}

/// The tree of `fan` children per rank in rank order (a heap's).
fn tree(rank: usize, size: usize, fan: usize) -> (Option<usize>, Range<usize>) {
    let parent = rank.checked_sub(1).map(|r| r / fan);
    let first = (rank * fan + 1).min(size);
    let last = (rank * fan + fan + 1).min(size);
    (parent, first..last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arrivals_reach_rank_0_from_every_rank_once() {
        for size in [1, 2, 3, 16, 17, 18, 273, 274, 5000] {
            let mut seen = vec![0; size];
            let mut depth = vec![0usize; size];
            for rank in 0..size {
                let (parent, children) = arrivals(rank, size);
                assert_eq!(parent.is_none(), rank == 0);
                assert!(children.len() <= FAN_IN);
                for c in children {
                    assert!(c > rank, "children come after their parent");
                    assert_eq!(arrivals(c, size).0, Some(rank));
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

    #[test]
    fn releases_reach_every_rank_once_and_never_go_where_arrivals_go() {
        for size in [2, 3, 16, 17, 100, 1000] {
            let mut seen = vec![0; size];
            for rank in 0..size {
                let (parent, children) = releases(rank, size);
                assert_eq!(parent.is_none(), rank == 0);
                assert!(children.len() <= FAN_OUT);
                for c in children {
                    assert_eq!(releases(c, size).0, Some(rank));
                    seen[c] += 1;
                    // Releases go up in rank, arrivals down.
                    assert!(c > rank);
                    assert!(arrivals(rank, size).0.is_none_or(|p| p < rank));
                }
            }
            assert!(seen.iter().skip(1).all(|&n| n == 1), "{size}");
        }
    }
}
