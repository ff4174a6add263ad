//! `MPI_Allgather` on the simulated cluster. ipmc's multicast allgather is
//! the component's own: every rank's block a two-stage broadcast with the
//! component's driver, rank 0's first, one call after another as
//! `Module::run_allgather` makes them ([`crate::scenario`] gives ipmc's
//! ranks those calls). Here: the model of Open MPI tuned's ring allgather
//! as a point-to-point schedule.

use crate::programs::Op;

/// Open MPI's ring allgather (`ompi_coll_base_allgather_intra_ring`,
/// tuned's 4): p − 1 steps; in each, every rank sends its right neighbour
/// the block it got last (its own first) and receives the next one from its
/// left neighbour.
pub fn ring(rank: usize, size: usize, block: usize) -> Vec<Op> {
    let (right, left) = ((rank + 1) % size, (rank + size - 1) % size);
    let mut ops = Vec::new();
    let mut last = None;
    for _ in 1..size {
        ops.push(Op::Send {
            to: right,
            len: block,
            after: last,
            also: None,
        });
        ops.push(Op::Recv {
            from: left,
            after: None,
            also: None,
        });
        last = Some(ops.len() - 1);
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_forwards_p_minus_1_blocks_each_after_the_last() {
        let ops = ring(3, 8, 100);
        assert_eq!(ops.len(), 14);
        for (k, pair) in ops.chunks(2).enumerate() {
            assert!(matches!(pair[0], Op::Send { to: 4, len: 100, after, .. }
                if after == k.checked_sub(1).map(|j| 2 * j + 1)));
            assert!(matches!(pair[1], Op::Recv { from: 2, .. }));
        }
        assert!(ring(0, 1, 100).is_empty());
    }
}
