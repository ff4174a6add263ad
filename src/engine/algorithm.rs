//! The algorithms a call may take: ipmc's and the replaced component's.

/// A broadcast algorithm of ipmc, or the broadcast of the component ipmc replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// The root sends to every rank with non-blocking sends and waits for all.
    Linear,
    /// The message travels in segments along the ring from the root.
    Chain,
    /// Multicast first, then the fragmented chain restores reliability.
    Multicast,
    /// The broadcast of the component ipmc replaced on this communicator.
    Previous,
    /// Open MPI's binomial tree (coll/base, unsegmented): with the binary
    /// tree, the fastest of its fixed algorithms for small messages on a
    /// few to a few dozen nodes, which Open MPI's own choice often passes
    /// over.
    Binomial,
    /// Open MPI's binary tree (coll/base, unsegmented; tuned's algorithm 5).
    Binary,
    /// Two levels, where nodes hold several ranks: among one leader per
    /// node by ipmc, inside each node through its shared segment, or by
    /// Open MPI where it has none (`component::levels`).
    TwoLevel,
    /// The same, pipelined: each node's broadcast in segments, each begun
    /// once its leader has it.
    TwoLevelPipelined,
    /// Open MPI's scatter and ring allgather (coll/base, unsegmented;
    /// tuned's algorithm 9): each rank gets a part of the message from a
    /// binomial scatter, then the parts go round the ring. For large
    /// messages where several ranks share a host, its ring crosses the
    /// network once per host and keeps every core busy.
    ScatterAllgather,
    /// Open MPI's split binary tree (coll/base, unsegmented; tuned's
    /// algorithm 4): each half of the message goes down one of the binary
    /// tree's two subtrees, and the ranks of each subtree then swap halves
    /// with the other's.
    SplitBinary,
    /// [`Algorithm::TwoLevel`] with the ranks of each node that measures
    /// both ways (`coll_ipmc_node_segment 3`) copying the message from the
    /// leader's memory rather than through the segment's slots.
    TwoLevelFromLeader,
    /// [`Algorithm::TwoLevelPipelined`], copying likewise.
    TwoLevelPipelinedFromLeader,
}

impl Algorithm {
    /// Every algorithm, in the order statistics print them.
    pub const ALL: [Algorithm; 12] = [
        Algorithm::Linear,
        Algorithm::Chain,
        Algorithm::Multicast,
        Algorithm::Previous,
        Algorithm::Binomial,
        Algorithm::Binary,
        Algorithm::TwoLevel,
        Algorithm::TwoLevelPipelined,
        Algorithm::ScatterAllgather,
        Algorithm::SplitBinary,
        Algorithm::TwoLevelFromLeader,
        Algorithm::TwoLevelPipelinedFromLeader,
    ];

    /// Its number in messages between ranks: 1 and up ([`Algorithm::ALL`]'s
    /// order), 0 meaning none.
    pub fn code(self) -> u8 {
        let i = Self::ALL.iter().position(|&a| a == self);
        i.map_or(0, |i| i as u8 + 1)
    }

    /// The algorithm of [`Algorithm::code`] `code`, if any.
    pub fn of_code(code: u8) -> Option<Self> {
        Self::ALL.get(usize::from(code).checked_sub(1)?).copied()
    }

    /// Whether a call of it goes with the communicator's queued multicast
    /// work (chains, votes): multicast's (its chain follows theirs) and the
    /// two levels' (they run on communicators of their own). Since the
    /// queue's messages have a tag of their own, a broadcast of any
    /// algorithm may begin alongside that work too
    /// ([`crate::engine::call::Collective::Bcast`]).
    pub fn goes_alongside(self) -> bool {
        self == Algorithm::Multicast || self.over_levels()
    }

    /// Whether it runs over the two levels (`component::levels`).
    pub fn over_levels(self) -> bool {
        matches!(
            self,
            Algorithm::TwoLevel
                | Algorithm::TwoLevelPipelined
                | Algorithm::TwoLevelFromLeader
                | Algorithm::TwoLevelPipelinedFromLeader
        )
    }

    /// Whether a node's ranks that measure both ways copy from the
    /// leader's memory in it.
    pub fn from_leader(self) -> bool {
        matches!(
            self,
            Algorithm::TwoLevelFromLeader | Algorithm::TwoLevelPipelinedFromLeader
        )
    }

    /// The name used in logs and statistics.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Linear => "linear",
            Algorithm::Chain => "chain",
            Algorithm::Multicast => "multicast",
            Algorithm::Previous => "previous",
            Algorithm::Binomial => "binomial",
            Algorithm::Binary => "binary",
            Algorithm::TwoLevel => "two_level",
            Algorithm::TwoLevelPipelined => "two_level_pipelined",
            Algorithm::ScatterAllgather => "scatter_allgather",
            Algorithm::SplitBinary => "split_binary",
            Algorithm::TwoLevelFromLeader => "two_level_from_leader",
            Algorithm::TwoLevelPipelinedFromLeader => "two_level_pipelined_from_leader",
        }
    }
}
