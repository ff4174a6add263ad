//! Two levels for a communicator whose nodes hold several ranks (seed 001,
//! Mamidala et al.): the message crosses the network once per node, among
//! one leader per node, and each leader hands it to the ranks of its node.
//!
//! Both levels are communicators of their own, split from this one at its
//! first broadcast (as Open MPI's `han` does), so that each gets the
//! broadcast that serves it best: the leaders' one ipmc's own, one rank per
//! node, multicast among them where its measured choice finds that fastest;
//! a node's one Open MPI's shared-memory broadcast (ipmc leaves node-local
//! communicators alone).

use std::cell::Cell;
use std::collections::VecDeque;
use std::ffi::c_int;
use std::ops::Range;

use crate::base::error::{Error, Result};
use crate::base::io::Wait;
use crate::platform::ompi::{AllgatherCall, BcastCall, Comm, PartIbcast};

/// Bytes of a segment of a pipelined broadcast over the levels: 4 MiB
/// over 4 emulated hosts of 4 ranks at 10 Gbit/s took 24.3 ms in segments
/// of 256 KiB, 43.0 in segments of 64 KiB and 26.1 whole; 1 MiB 6.8, 11.1
/// and 5.6 ms (han: 26.6 and 5.4; multicast among the leaders forced, in a
/// build that pipelined every broadcast at a segment size set by hand).
pub const LEVEL_SEGMENT: usize = 256 << 10;

thread_local! {
    /// Whether this thread is splitting off a node's part: Open MPI selects
    /// its components inside the split, where ipmc declines the part.
    static MAKING_NODE_PART: Cell<bool> = const { Cell::new(false) };
}

/// Whether the communicator being created is one node's part of ipmc's two
/// levels, which Open MPI's shared-memory broadcast serves (even where an
/// algorithm of ipmc's is forced: it runs among the leaders).
pub fn making_node_part() -> bool {
    MAKING_NODE_PART.with(Cell::get)
}

/// Where each rank of a communicator sits: its node (numbered in the order
/// of each node's first rank) and whether it leads that node (its lowest
/// rank). Every rank computes the same from the same host names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    node: Vec<u32>,
    /// Each node's rank within it: 0 for its leader.
    local: Vec<u32>,
    nodes: u32,
}

impl Layout {
    /// From the host name of every rank, in rank order.
    pub fn from_hosts<S: AsRef<str>>(hosts: impl IntoIterator<Item = S>) -> Self {
        let mut seen: Vec<(String, u32)> = Vec::new();
        let (mut node, mut local) = (Vec::new(), Vec::new());
        for host in hosts {
            let host = host.as_ref();
            let i = match seen.iter().position(|(h, _)| h == host) {
                Some(i) => i,
                None => {
                    seen.push((host.to_owned(), 0));
                    seen.len() - 1
                }
            };
            node.push(i as u32);
            local.push(seen[i].1);
            seen[i].1 += 1;
        }
        Layout {
            node,
            local,
            nodes: seen.len() as u32,
        }
    }

    pub fn nodes(&self) -> usize {
        self.nodes as usize
    }

    /// Whether some node holds several ranks and there are several nodes:
    /// then two levels cross the network less than one.
    pub fn has_two_levels(&self) -> bool {
        self.nodes > 1 && self.local.iter().any(|&l| l > 0)
    }

    pub fn is_leader(&self, rank: usize) -> bool {
        self.local[rank] == 0
    }

    /// Where an allgather over the levels keeps each rank's block (of
    /// `blocks[rank]` bytes) in the message the levels move: node after
    /// node, each node's blocks in rank order, so that each node's blocks
    /// are one run of bytes. Returns each rank's offset and each node's run.
    pub fn gathered(&self, blocks: &[usize]) -> (Vec<usize>, Vec<Range<usize>>) {
        let mut at = vec![0; blocks.len()];
        let mut runs = Vec::with_capacity(self.nodes());
        let mut end = 0;
        for n in 0..self.nodes {
            let start = end;
            for r in (0..blocks.len()).filter(|&r| self.node[r] == n) {
                at[r] = end;
                end += blocks[r];
            }
            runs.push(start..end);
        }
        (at, runs)
    }
}

/// A communicator's two levels, for one rank: its node's communicator and,
/// on a leader, the leaders'.
pub struct Levels {
    layout: Layout,
    rank: usize,
    node: Comm,
    leaders: Option<Comm>,
}

impl Levels {
    /// Splits `comm` into its levels: collective, every rank of `comm` calls
    /// it in the same broadcast.
    pub fn split(comm: Comm, layout: Layout, rank: usize) -> Result<Self> {
        let name = comm.name();
        MAKING_NODE_PART.with(|m| m.set(true));
        let node = comm.split(
            Some(layout.node[rank]),
            rank,
            &format!("ipmc node of {name}"),
        );
        MAKING_NODE_PART.with(|m| m.set(false));
        let node = node?.ok_or(Error::Unavailable)?;
        let leaders = comm.split(
            layout.is_leader(rank).then_some(0),
            rank,
            &format!("ipmc leaders of {name}"),
        );
        let leaders = match leaders {
            Ok(l) => l,
            Err(e) => {
                node.free();
                return Err(e);
            }
        };
        if layout.is_leader(rank) && leaders.is_none() {
            node.free();
            return Err(Error::Unavailable);
        }
        Ok(Levels {
            layout,
            rank,
            node,
            leaders,
        })
    }

    /// One broadcast over the two levels: among the leaders, the root's
    /// node's one as their root, then inside every node from its leader. A
    /// root that does not lead its node first gives the message to its node
    /// (costing no trip across the network), which then needs no turn after
    /// the leaders.
    pub fn bcast(&self, call: &mut BcastCall) -> Result<()> {
        for (part, root) in self.bcast_parts(call.root()) {
            call.on_part(part, root)?;
        }
        Ok(())
    }

    /// One broadcast of `buf` (the message's bytes) over the two levels,
    /// pipelined: each node's broadcast goes in segments of `segment`
    /// bytes, each begun as soon as its leader has it from the leaders'
    /// broadcast of that segment, so that the node's step overlaps the
    /// network's. The root's node, where the root does not lead it, goes
    /// first and whole, as in [`Levels::bcast`]; the leaders' broadcasts
    /// are of segments everywhere.
    pub fn bcast_pipelined(&self, buf: &mut [u8], root: usize, segment: usize) -> Result<()> {
        let root_node = self.layout.node[root] as usize;
        let among_leaders = |chunk: &mut [u8]| match self.leaders {
            Some(leaders) => leaders.bcast_bytes(chunk, root_node),
            None => Ok(()),
        };
        if self.node_goes_first(root) {
            self.node
                .bcast_bytes(buf, self.layout.local[root] as usize)?;
            return buf.chunks_mut(segment.max(1)).try_for_each(among_leaders);
        }
        self.node.bcast_segments(buf, 0, segment, among_leaders)
    }

    /// Whether this rank's node gets a broadcast from `root` before the
    /// leaders do: the root's node, where the root does not lead it.
    fn node_goes_first(&self, root: usize) -> bool {
        let l = &self.layout;
        l.node[self.rank] == l.node[root] && !l.is_leader(root)
    }

    /// This rank's broadcasts in one from `root` over the levels, in order:
    /// each part and its root there.
    pub fn bcast_parts(&self, root: usize) -> Vec<(Comm, usize)> {
        let first = self.node_goes_first(root);
        let mut parts = Vec::with_capacity(2);
        if first {
            parts.push((self.node, self.layout.local[root] as usize));
        }
        if let Some(leaders) = self.leaders {
            // The leaders' communicator orders them by rank, which orders
            // the nodes as their numbers do.
            parts.push((leaders, self.layout.node[root] as usize));
        }
        if !first {
            parts.push((self.node, 0));
        }
        parts
    }

    /// One barrier over the two levels: each node's (every rank of a node
    /// arrived), the leaders' (every node arrived), each node's again (its
    /// leader left the leaders' barrier).
    pub fn barrier(&self) -> Result<()> {
        self.node.barrier()?;
        if let Some(leaders) = self.leaders {
            leaders.barrier()?;
        }
        self.node.barrier()
    }

    /// One allgather over the two levels, `blocks[r]` bytes from rank `r`:
    /// each node's blocks gathered to its leader, the nodes' runs of blocks
    /// gathered among the leaders (ipmc's allgather there, by its own
    /// measured choice), and the whole given to each node by its leader.
    /// In the receive buffer itself where its blocks lie in that order as
    /// bytes (ranks placed node by node, a contiguous datatype); else in a
    /// buffer of packed blocks, which every rank then unpacks. The message
    /// must fit in an `int` of bytes (the caller checks, alike on every
    /// rank).
    pub fn allgather(&self, call: &mut AllgatherCall, blocks: &[usize]) -> Result<()> {
        let l = &self.layout;
        let (at, runs) = l.gathered(blocks);
        let total = runs.last().map_or(0, |r| r.end);
        let int = |n: usize| c_int::try_from(n).map_err(|_| Error::Range);
        let mut own = vec![0; blocks[self.rank]];
        call.own_block(self.rank, &mut own)?;
        let node = l.node[self.rank];
        let (mut counts, mut displs) = (Vec::new(), Vec::new());
        for r in (0..blocks.len()).filter(|&r| l.node[r] == node) {
            counts.push(int(blocks[r])?);
            displs.push(int(at[r])?);
        }
        let run_counts = runs
            .iter()
            .map(|r| int(r.len()))
            .collect::<Result<Vec<_>>>()?;
        let run_displs = runs
            .iter()
            .map(|r| int(r.start))
            .collect::<Result<Vec<_>>>()?;
        let levels = |all: &mut [u8]| -> Result<()> {
            self.node.gatherv_bytes(&own, all, &counts, &displs, 0)?;
            if let Some(leaders) = self.leaders {
                leaders.allgatherv_bytes(all, &run_counts, &run_displs)?;
            }
            self.node.bcast_bytes(all, 0)
        };
        if let Some(run) = call.receive_run(&at) {
            return levels(run);
        }
        let mut all = vec![0; total];
        levels(&mut all)?;
        for (r, &len) in blocks.iter().enumerate() {
            if len > 0 && (r != self.rank || !call.in_place()) {
                call.put_block(r, &all[at[r]..at[r] + len])?;
            }
        }
        Ok(())
    }

    /// Frees both levels' communicators.
    pub fn free(self) {
        if let Some(leaders) = self.leaders {
            leaders.free();
        }
        self.node.free();
    }
}

/// One rank's part in a nonblocking broadcast over the two levels
/// (`MPI_Ibcast`): the parts of [`Levels::bcast_parts`], each a nonblocking
/// broadcast on its communicator by whatever serves that, begun once the
/// one before completed on this rank. The parts' communicators must outlive
/// it (the parent's module frees them only once its work is over).
pub struct LevelsIbcast {
    parts: VecDeque<(Comm, usize)>,
    /// The part in progress, which holds the message meanwhile.
    now: Option<PartIbcast>,
    /// The message between parts, and at the end.
    data: Option<Vec<u8>>,
}

impl LevelsIbcast {
    /// A broadcast of `len` bytes over `parts`; `root_data` is the message
    /// on the root (ignored elsewhere).
    pub fn new(parts: Vec<(Comm, usize)>, len: usize, root_data: Option<Vec<u8>>) -> Self {
        let data = root_data.unwrap_or_else(|| vec![0; len]);
        LevelsIbcast {
            parts: parts.into(),
            now: None,
            data: Some(data),
        }
    }

    /// Moves on as far as it can: takes the part that completed and begins
    /// the next.
    pub fn turn(&mut self, wait: Wait) -> Result<()> {
        loop {
            if let Some(part) = &mut self.now {
                if !part.test(wait)? {
                    return Ok(());
                }
                self.data = self.now.take().map(PartIbcast::into_data);
            }
            let Some((comm, root)) = self.parts.pop_front() else {
                return Ok(());
            };
            let data = self.data.take().expect("held between parts");
            self.now = Some(comm.ibcast_bytes(data, root)?);
        }
    }

    /// Whether this rank's parts are over: it has the message.
    pub fn is_done(&self) -> bool {
        self.now.is_none() && self.parts.is_empty()
    }

    /// The message, once done.
    pub fn data(&self) -> &[u8] {
        self.data.as_deref().expect("done")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_numbered_by_their_first_rank_and_led_by_it() {
        let l = Layout::from_hosts(["b", "a", "b", "c", "a", "b"]);
        assert_eq!(l.node, [0, 1, 0, 2, 1, 0]);
        assert_eq!(l.local, [0, 0, 1, 0, 1, 2]);
        assert_eq!(l.nodes(), 3);
        assert!(l.has_two_levels());
        let leaders: Vec<usize> = (0..6).filter(|&r| l.is_leader(r)).collect();
        // Ordered by rank, the leaders' ranks order their nodes.
        assert_eq!(leaders, [0, 1, 3]);
        assert!(!Layout::from_hosts(["a", "b", "c"]).has_two_levels());
        assert!(!Layout::from_hosts(["a", "a", "a"]).has_two_levels());
    }

    #[test]
    fn an_allgathers_blocks_are_kept_node_after_node() {
        // Ranks dealt round-robin over the nodes, as `--map-by node` does.
        let l = Layout::from_hosts(["a", "b", "a", "b", "c"]);
        let (at, runs) = l.gathered(&[10, 20, 30, 0, 5]);
        // Node a: ranks 0 and 2; b: 1 and 3 (empty); c: 4.
        assert_eq!(at, [0, 40, 10, 60, 60]);
        assert_eq!(runs, [0..40, 40..60, 60..65]);
    }
}
