//! The MCA parameters as the Rust core sees them, and the choice of algorithm.

use crate::groups::{GroupRanges, PortRange};
use crate::interfaces::IfList;

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
    /// `coll_ipmc_authenticate`: 0 off, 1 tag, 2 tag and encryption.
    pub authenticate: i32,
    pub print_statistics: bool,
    pub chain_segment_size: usize,
    pub bcast_algorithm: i32,
    pub verbose: i32,
    pub group_range: String,
    pub port_range: String,
    pub if_include: String,
    pub if_exclude: String,
    pub ttl: u32,
    pub rcvbuf: usize,
    pub inject_loss_percent: u32,
    pub inject_seed: u64,
    pub ranks_are_nodes: bool,
    pub background_limit: usize,
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
            authenticate: 1,
            print_statistics: false,
            chain_segment_size: 65536,
            bcast_algorithm: 0,
            verbose: 0,
            group_range: crate::groups::DEFAULT_GROUPS.into(),
            port_range: "5000-32767".into(),
            if_include: String::new(),
            if_exclude: String::new(),
            ttl: 1,
            rcvbuf: 4 << 20,
            inject_loss_percent: 0,
            inject_seed: 1,
            ranks_are_nodes: false,
            background_limit: 16 << 20,
        }
    }
}

impl Config {
    /// Checks the values whose syntax the parameter table cannot express;
    /// the error says which parameter is wrong and why.
    pub fn validate(&self) -> Result<(), String> {
        let named = |name: &str, e: String| format!("coll_ipmc_{name}: {e}");
        GroupRanges::parse(&self.group_range).map_err(|e| named("group_range", e))?;
        PortRange::parse(&self.port_range).map_err(|e| named("port_range", e))?;
        let include = IfList::parse(&self.if_include).map_err(|e| named("if_include", e))?;
        let exclude = IfList::parse(&self.if_exclude).map_err(|e| named("if_exclude", e))?;
        if !include.is_empty() && !exclude.is_empty() {
            return Err(
                "coll_ipmc_if_include and coll_ipmc_if_exclude are mutually exclusive; set one"
                    .into(),
            );
        }
        Ok(())
    }

    /// Whether `coll_ipmc_bcast_algorithm` forces one of ipmc's own algorithms.
    pub fn forces_own_algorithm(&self) -> bool {
        matches!(
            Algorithm::forced(self.bcast_algorithm),
            Some(Algorithm::Linear | Algorithm::Chain | Algorithm::Multicast)
        )
    }

    /// A digest of every parameter that must be equal on all ranks of a
    /// communicator (scope `ALL_EQ` in the table): whether ipmc is selected
    /// (the priority, compared with other components' on each rank), what
    /// goes on the wire, which algorithm serves a call, how the group is
    /// drawn; and of the datagram format. Never 0, which stands for "ipmc
    /// does not run here" in the modex.
    pub fn digest(&self) -> u64 {
        let text = format!(
            "ipmc {} datagram {} priority={} crossover_nodes={} crossover_size={} fragment_size={} \
             root_wait_time={} use_crc_checking={} authenticate={} chain_segment_size={} \
             bcast_algorithm={} group_range={} port_range={} ttl={} ranks_are_nodes={}",
            env!("CARGO_PKG_VERSION"),
            crate::datagram::VERSION,
            self.priority,
            self.crossover_nodes,
            self.crossover_size,
            self.fragment_size,
            self.root_wait_time_us,
            self.use_crc_checking,
            self.authenticate,
            self.chain_segment_size,
            self.bcast_algorithm,
            self.group_range,
            self.port_range,
            self.ttl,
            self.ranks_are_nodes
        );
        // FNV-1a: stable across builds and processes, unlike std's hasher.
        let h = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        h.max(1)
    }

    /// The algorithm for a broadcast of `bytes` bytes on a communicator that
    /// spans `nodes` nodes (thesis §3.5, where each node ran one process). Both
    /// inputs are equal on every rank (MPI's rules; [`crate::nodes`]), so every
    /// rank chooses the same.
    pub fn choose(&self, bytes: usize, nodes: usize) -> Algorithm {
        if let Some(forced) = Algorithm::forced(self.bcast_algorithm) {
            forced
        } else if bytes > self.crossover_size {
            Algorithm::Chain
        } else if nodes < self.crossover_nodes {
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
    fn defaults_are_valid_and_bad_strings_are_named() {
        assert_eq!(Config::default().validate(), Ok(()));
        let cases = [
            (
                "group_range",
                Config {
                    group_range: "10.0.0.0/8".into(),
                    ..Config::default()
                },
            ),
            (
                "port_range",
                Config {
                    port_range: "9-8".into(),
                    ..Config::default()
                },
            ),
            (
                "if_include",
                Config {
                    if_include: "1.2.3.4".into(),
                    ..Config::default()
                },
            ),
            (
                "exclusive",
                Config {
                    if_include: "lo".into(),
                    if_exclude: "eth0".into(),
                    ..Config::default()
                },
            ),
        ];
        for (what, cfg) in cases {
            let err = cfg.validate().unwrap_err();
            assert!(err.contains(what), "{what}: {err}");
        }
    }

    #[test]
    fn the_digest_tells_every_shared_parameter_apart() {
        let base = Config::default();
        assert_ne!(base.digest(), 0);
        assert_eq!(base.digest(), Config::default().digest());
        let local = Config {
            verbose: 9,
            print_statistics: true,
            if_include: "eth1".into(),
            rcvbuf: 1,
            inject_loss_percent: 3,
            ..Config::default()
        };
        assert_eq!(local.digest(), base.digest(), "local parameters may differ");
        let shared = [
            Config {
                priority: 50,
                ..Config::default()
            },
            Config {
                crossover_nodes: 5,
                ..Config::default()
            },
            Config {
                crossover_size: 5,
                ..Config::default()
            },
            Config {
                fragment_size: 1000,
                ..Config::default()
            },
            Config {
                root_wait_time_us: 1,
                ..Config::default()
            },
            Config {
                use_crc_checking: false,
                ..Config::default()
            },
            Config {
                authenticate: 2,
                ..Config::default()
            },
            Config {
                chain_segment_size: 1 << 20,
                ..Config::default()
            },
            Config {
                bcast_algorithm: 3,
                ..Config::default()
            },
            Config {
                group_range: "239.1.0.0/16".into(),
                ..Config::default()
            },
            Config {
                port_range: "6000".into(),
                ..Config::default()
            },
            Config {
                ttl: 2,
                ..Config::default()
            },
        ];
        for cfg in shared {
            assert_ne!(cfg.digest(), base.digest(), "{cfg:?}");
        }
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
