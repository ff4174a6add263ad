//! The MCA parameters as the Rust core sees them, and the choice of algorithm.

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
}

impl Algorithm {
    /// Every algorithm, in the order statistics print them.
    pub const ALL: [Algorithm; 4] = [
        Algorithm::Linear,
        Algorithm::Chain,
        Algorithm::Multicast,
        Algorithm::Previous,
    ];

    /// The name used in logs and statistics.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Linear => "linear",
            Algorithm::Chain => "chain",
            Algorithm::Multicast => "multicast",
            Algorithm::Previous => "previous",
        }
    }

    /// The algorithm that `coll_ipmc_bcast_algorithm` forces, if any.
    fn forced(code: i32) -> Option<Algorithm> {
        match code {
            1 => Some(Algorithm::Linear),
            2 => Some(Algorithm::Chain),
            3 => Some(Algorithm::Multicast),
            4 => Some(Algorithm::Previous),
            _ => None,
        }
    }
}

/// The parameters a communicator's module works with, copied when the module
/// is created so that later changes of the MCA storage cannot split ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub priority: i32,
    pub crossover_nodes: usize,
    pub crossover_size: usize,
    pub fragment_size: usize,
    pub root_wait_time_us: u64,
    pub use_crc_checking: bool,
    pub print_statistics: bool,
    pub chain_segment_size: usize,
    pub bcast_algorithm: i32,
    pub verbose: i32,
}

impl Default for Config {
    /// The defaults of the parameter table.
    fn default() -> Self {
        Config {
            priority: 40,
            crossover_nodes: 4,
            crossover_size: 1 << 20,
            fragment_size: 4096,
            root_wait_time_us: 0,
            use_crc_checking: true,
            print_statistics: false,
            chain_segment_size: 65536,
            bcast_algorithm: 0,
            verbose: 0,
        }
    }
}

impl Config {
    /// The algorithm for a broadcast of `bytes` bytes on `comm_size` ranks
    /// (thesis §3.5). Both inputs are equal on every rank by MPI's rules, so
    /// every rank chooses the same.
    pub fn choose(&self, bytes: usize, comm_size: usize) -> Algorithm {
        if let Some(forced) = Algorithm::forced(self.bcast_algorithm) {
            forced
        } else if bytes > self.crossover_size {
            Algorithm::Chain
        } else if comm_size < self.crossover_nodes {
            Algorithm::Linear
        } else {
            Algorithm::Multicast
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatch_follows_the_thesis() {
        let cfg = Config::default();
        assert_eq!(cfg.choose(1 << 20, 64), Algorithm::Multicast);
        assert_eq!(cfg.choose((1 << 20) + 1, 64), Algorithm::Chain);
        assert_eq!(cfg.choose((1 << 20) + 1, 2), Algorithm::Chain);
        assert_eq!(cfg.choose(100, 3), Algorithm::Linear);
        assert_eq!(cfg.choose(100, 4), Algorithm::Multicast);
    }

    #[test]
    fn forced_algorithm_wins() {
        let mut cfg = Config::default();
        for (code, alg) in [
            (1, Algorithm::Linear),
            (2, Algorithm::Chain),
            (3, Algorithm::Multicast),
            (4, Algorithm::Previous),
        ] {
            cfg.bcast_algorithm = code;
            assert_eq!(cfg.choose(1 << 30, 2), alg);
            assert_eq!(cfg.choose(1, 1000), alg);
        }
    }
}
