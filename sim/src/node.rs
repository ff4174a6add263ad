//! Nodes of several ranks (two levels, `docs/two-levels.md`): the
//! simulated broadcast runs among one leader per node, one host each, as
//! ipmc's leaders' communicator does; each leader then gives the message to
//! the other ranks of its node through shared memory, once it has all of
//! it (or segment by segment: `segment`, ipmc's pipelined levels). That
//! last step is a model, not a simulation: the node's ranks have cores of
//! their own and use neither the link nor the leader's host costs, so the
//! step costs the node's shared-memory broadcast, a tree of
//! `ceil(log2 ranks)` hops pipelined in segments, its bytes moving at a
//! measured copy rate; or, for ipmc with its node's shared segment
//! (`coll_ipmc_node_segment`), one copy in by the leader and one copy out
//! by every other rank at once.

use crate::Ns;

/// Segments of the node's pipelined broadcast (Open MPI's shared-memory
/// transport moves large messages in pieces of this order).
const SEGMENT: usize = 64 << 10;

/// The ranks of each node and what the node's shared memory costs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Node {
    /// Ranks per node (1: one level, no step inside the node).
    pub ranks: usize,
    /// One hop of the node's tree: a small message from one rank to another.
    pub hop_ns: Ns,
    /// Bytes per second one hop copies.
    pub copy_bytes_per_s: f64,
    /// Pipelined levels (ipmc's `two_level_pipelined`): the leaders
    /// broadcast segments of this many bytes, each of which the node's
    /// broadcast takes on as soon as its leader has it (0: whole).
    pub segment: usize,
    /// ipmc's node step through its shared segment, where ipmc runs: the
    /// time from the leader's write of a piece to the other ranks' seeing
    /// it, and each rank's copy rate in or out (bytes per second).
    pub shared: Option<Shared>,
}

/// The cost of ipmc's shared segment (`component::node_segment`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shared {
    pub notice_ns: Ns,
    pub copy_bytes_per_s: f64,
    /// The ranks copy straight from the leader's memory
    /// (`coll_ipmc_node_segment 2`), the leader copying nothing; else the
    /// leader copies the message into the segment's slots and they copy it
    /// out.
    pub from_leader: bool,
}

/// ipmc's segment between two threads of this repository's test machine,
/// each with a core (`cargo test --release --lib segment_throughput --
/// --nocapture`; `docs/simulator.md`, "Ranks per node"), through its slots.
pub const SHARED: Shared = Shared {
    notice_ns: SHARED_NOTICE_NS,
    copy_bytes_per_s: SHARED_COPY_BYTES_PER_S,
    from_leader: false,
};
/// The same, the ranks copying from the leader's memory.
pub const FROM_LEADER: Shared = Shared {
    notice_ns: SHARED_NOTICE_NS,
    copy_bytes_per_s: FROM_LEADER_BYTES_PER_S,
    from_leader: true,
};
pub const SHARED_NOTICE_NS: Ns = 100;
pub const SHARED_COPY_BYTES_PER_S: f64 = 6.3e9;
pub const FROM_LEADER_BYTES_PER_S: f64 = 3.6e9;

/// Bytes of a slot of ipmc's segment: a message crosses it in pieces of
/// this size, the leader copying one in while the ranks copy the one
/// before out.
const SHARED_SLOT: usize = 256 << 10;

impl Default for Node {
    /// One rank per node; the copy costs measured on this repository's test
    /// machine (`docs/simulator.md`).
    fn default() -> Self {
        Node {
            ranks: 1,
            hop_ns: HOP_NS,
            copy_bytes_per_s: COPY_BYTES_PER_S,
            segment: 0,
            shared: Some(SHARED),
        }
    }
}

/// Open MPI's broadcast of 8 bytes between the 2 ranks of one emulated host
/// (`docs/simulator.md`, "Ranks per node").
pub const HOP_NS: Ns = 12_000;
/// Open MPI's broadcast of 16 MiB between the 2 ranks of one emulated host:
/// bytes per second (`docs/simulator.md`, "Ranks per node").
pub const COPY_BYTES_PER_S: f64 = 6.6e9;

impl Node {
    /// The time a leader takes to give `size` bytes to the other ranks of
    /// its node, for ipmc (`ipmc`: through its shared segment where it has
    /// one) or Open MPI ([`Node::tree_ns`]).
    pub fn fan_out_ns(&self, size: usize, ipmc: bool) -> Ns {
        match self.shared.filter(|_| ipmc && self.ranks > 1) {
            Some(shared) => shared.fan_out_ns(size),
            None => self.tree_ns(size),
        }
    }

    /// Open MPI's shared-memory broadcast inside the node: every hop of the
    /// tree waits for a segment, then the bytes stream through at the copy
    /// rate.
    pub fn tree_ns(&self, size: usize) -> Ns {
        if self.ranks <= 1 {
            return 0;
        }
        let depth = (usize::BITS - (self.ranks - 1).leading_zeros()) as u64;
        let first = size.min(SEGMENT) as f64 * (depth - 1) as f64;
        let bytes_ns = (size as f64 + first) / self.copy_bytes_per_s * 1e9;
        depth * self.hop_ns + bytes_ns.round() as Ns
    }
}

impl Shared {
    /// Through the slots, the leader copies the message in slot by slot and
    /// every other rank copies each slot out once it is there, all at once:
    /// the leader's copy of the whole, then the notice and the copy out of
    /// the last slot. From the leader's memory, the notice and every rank's
    /// copy of the whole, all at once. The ranks' copies are not slowed by
    /// one another (they read the same bytes, which the node's caches hold).
    pub fn fan_out_ns(&self, size: usize) -> Ns {
        let bytes = match self.from_leader {
            true => size,
            false => size + size.min(SHARED_SLOT),
        };
        self.notice_ns + (bytes as f64 / self.copy_bytes_per_s * 1e9).round() as Ns
    }

    /// Picoseconds of the leader's own core per byte it gives its node: its
    /// copy into the slots, or nothing.
    pub fn leader_ps_per_byte(&self) -> u64 {
        match self.from_leader {
            true => 0,
            false => (1e12 / self.copy_bytes_per_s).round() as u64,
        }
    }
}

impl Node {
    /// The time each rank's `block` takes to reach its node's leader (an
    /// allgather's first step, Open MPI's gather): the tree's hops, and the
    /// other ranks' blocks copied into the leader's buffer.
    pub fn gather_ns(&self, block: usize) -> Ns {
        if self.ranks <= 1 {
            return 0;
        }
        let depth = (usize::BITS - (self.ranks - 1).leading_zeros()) as u64;
        let bytes = (self.ranks - 1) * block;
        depth * self.hop_ns + (bytes as f64 / self.copy_bytes_per_s * 1e9).round() as Ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rank_per_node_costs_nothing_and_more_ranks_cost_more() {
        let node = |ranks| Node {
            ranks,
            hop_ns: 1_000,
            copy_bytes_per_s: 1e9,
            segment: 0,
            shared: None,
        };
        assert_eq!(node(1).fan_out_ns(1 << 20, true), 0);
        // Two ranks: one hop, the message once at 1 GB/s.
        assert_eq!(node(2).fan_out_ns(1_000_000, false), 1_000 + 1_000_000);
        // 64 ranks: 6 hops, and 5 segments more to fill the pipeline.
        let t = node(64).fan_out_ns(1_000_000, true);
        assert_eq!(t, 6_000 + 1_000_000 + 5 * 65_536);
        assert!(node(64).fan_out_ns(100, false) < node(64).fan_out_ns(1 << 20, false));
        // ipmc's segment: the whole in, the last slot out, whatever the
        // ranks; Open MPI's tree for the peers.
        let shared = Shared {
            notice_ns: 500,
            copy_bytes_per_s: 1e9,
            from_leader: false,
        };
        let with = |ranks| Node {
            shared: Some(shared),
            ..node(ranks)
        };
        assert_eq!(
            with(64).fan_out_ns(1 << 20, true),
            500 + (1 << 20) + (256 << 10)
        );
        assert_eq!(with(2).fan_out_ns(1000, true), 500 + 2000);
        assert_eq!(with(64).fan_out_ns(1_000_000, false), t);
        assert_eq!(with(1).fan_out_ns(1 << 20, true), 0);
        let pull = Shared {
            from_leader: true,
            ..shared
        };
        assert_eq!(pull.fan_out_ns(1 << 20), 500 + (1 << 20));
        assert_eq!(
            (shared.leader_ps_per_byte(), pull.leader_ps_per_byte()),
            (1000, 0)
        );
        assert_eq!(node(1).gather_ns(1 << 20), 0);
        // 4 ranks: 2 hops, 3 blocks into the leader's buffer.
        assert_eq!(node(4).gather_ns(1_000), 2_000 + 3_000);
    }
}
