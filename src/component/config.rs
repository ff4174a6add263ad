//! What the MCA parameters ([`crate::base::params`]) choose: the algorithm of
//! a call before any measurement, and whether ipmc serves it at all.

use crate::base::params::Config;
use crate::engine::algorithm::Algorithm;
use crate::group::groups::{GroupRanges, PortRange};
use crate::net::interfaces::IfList;

/// The algorithm that `coll_ipmc_bcast_algorithm` forces, if any.
fn forced(code: usize) -> Option<Algorithm> {
    match code {
        1 => Some(Algorithm::Linear),
        2 => Some(Algorithm::Chain),
        3 => Some(Algorithm::Multicast),
        4 => Some(Algorithm::Previous),
        5 => Some(Algorithm::Binomial),
        6 => Some(Algorithm::Binary),
        7 => Some(Algorithm::ScatterAllgather),
        8 => Some(Algorithm::SplitBinary),
        _ => None,
    }
}

/// `coll_ipmc_barrier_algorithm` and `coll_ipmc_allgather_algorithm`:
/// measured, the replaced component's (ipmc then serves no such call),
/// ipmc's multicast one.
pub const CHOICE_MEASURED: usize = 0;
pub const CHOICE_REPLACED: usize = 1;
pub const CHOICE_MULTICAST: usize = 2;

/// The thesis's thresholds (§3.5), which apply when a user sets either.
pub const THESIS_CROSSOVER_NODES: usize = 4;
pub const THESIS_CROSSOVER_SIZE: usize = 1 << 20;
/// The automatic rule before measurements: Open MPI's own broadcast for
/// messages up to `coll_ipmc_fixed_crossover_size` bytes (a broadcast of a
/// few datagrams is dominated by the multicast protocol's fixed costs) and
/// for communicators of fewer nodes than this (with two, one point-to-point
/// message is all a broadcast is); multicast for the others.
pub const AUTO_NODES: usize = 3;

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

    /// Multicast on the loopback interface unless the user chose interfaces:
    /// for a communicator on one host whose ranks count as nodes
    /// (`coll_ipmc_ranks_are_nodes`), so that its datagrams stay on the host.
    pub fn multicast_on_loopback_unless_chosen(&mut self) {
        if self.if_include.is_empty() && self.if_exclude.is_empty() {
            self.if_include = crate::net::interfaces::LOOPBACK.to_string();
        }
    }

    /// Whether `coll_ipmc_bcast_algorithm` forces one of ipmc's own algorithms.
    pub fn forces_own_algorithm(&self) -> bool {
        matches!(forced(self.bcast_algorithm), Some(a) if a != Algorithm::Previous)
    }

    /// Whether a communicator whose nodes hold several ranks broadcasts over
    /// two levels ([`crate::component::levels`]): ipmc's algorithms, chosen
    /// or forced, then run among one leader per node. Only a forced broadcast
    /// of Open MPI's runs on the whole communicator.
    pub fn takes_two_levels(&self) -> bool {
        !matches!(
            forced(self.bcast_algorithm),
            Some(
                Algorithm::Previous
                    | Algorithm::Binomial
                    | Algorithm::Binary
                    | Algorithm::SplitBinary
                    | Algorithm::ScatterAllgather
            )
        )
    }

    /// What this process publishes in the modex where ipmc runs: the
    /// [`Config::digest`] of the shared parameters with the versions of
    /// ipmc and of its formats on the wire, so that processes that could not
    /// work together see it before any communicator is set up. Never 0,
    /// which stands for "ipmc does not run here".
    pub fn published_digest(&self) -> u64 {
        let text = format!(
            "ipmc {} datagram {} setup {} {}",
            env!("CARGO_PKG_VERSION"),
            crate::protocol::datagram::VERSION,
            crate::group::setup::VERSION,
            self.digest()
        );
        crate::base::params::fnv1a(text.as_bytes()).max(1)
    }

    /// Whether ipmc chooses by itself: neither threshold of the thesis is
    /// set (0) and no algorithm is forced.
    pub fn is_automatic(&self) -> bool {
        self.crossover_nodes == 0 && self.crossover_size == 0 && self.bcast_algorithm == 0
    }

    /// Whether the automatic choice measures its candidates on the calls
    /// ([`crate::engine::tuning`]).
    pub fn tunes(&self) -> bool {
        self.is_automatic() && self.tune_calls > 0
    }

    /// The algorithm for a broadcast of `bytes` bytes on a communicator that
    /// spans `nodes` nodes, before any measurement: the forced one, the
    /// thesis's rule (§3.5, where each node ran one process) when a threshold
    /// is set, or the automatic rule. Both inputs are equal on every rank
    /// (MPI's rules; [`crate::component::nodes`]), so every rank chooses the same.
    pub fn choose(&self, bytes: usize, nodes: usize) -> Algorithm {
        if let Some(forced) = forced(self.bcast_algorithm) {
            forced
        } else if self.is_automatic() {
            if nodes < AUTO_NODES || bytes <= self.fixed_crossover_size {
                Algorithm::Previous
            } else {
                Algorithm::Multicast
            }
        } else {
            let or = |v: usize, thesis: usize| if v == 0 { thesis } else { v };
            if bytes > or(self.crossover_size, THESIS_CROSSOVER_SIZE) {
                Algorithm::Chain
            } else if nodes < or(self.crossover_nodes, THESIS_CROSSOVER_NODES) {
                Algorithm::Linear
            } else {
                Algorithm::Multicast
            }
        }
    }

    /// Whether some call on a communicator of `nodes` nodes may multicast:
    /// then it needs a group.
    pub fn may_multicast(&self, nodes: usize) -> bool {
        self.barrier_algorithm == CHOICE_MULTICAST
            || self.allgather_algorithm == CHOICE_MULTICAST
            || (0..usize::BITS).any(|k| self.choose(1 << k, nodes) == Algorithm::Multicast)
    }

    /// Whether the automatic choice measures ipmc's barrier against the
    /// replaced one (where the broadcasts are measured too).
    pub fn tunes_barrier(&self) -> bool {
        self.barrier_algorithm == CHOICE_MEASURED && self.tunes()
    }

    /// Whether ipmc's multicast barrier is forced.
    pub fn forces_barrier(&self) -> bool {
        self.barrier_algorithm == CHOICE_MULTICAST
    }

    /// As [`Config::tunes_barrier`], for `MPI_Allgather`.
    pub fn tunes_allgather(&self) -> bool {
        self.allgather_algorithm == CHOICE_MEASURED && self.tunes()
    }

    /// Whether ipmc's multicast allgather is forced.
    pub fn forces_allgather(&self) -> bool {
        self.allgather_algorithm == CHOICE_MULTICAST
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::params::{DatagramPath, PARAMS};

    #[test]
    fn dispatch_follows_the_thesis() {
        let cfg = Config {
            crossover_nodes: 4,
            ..Config::default()
        };
        assert!(!cfg.is_automatic());
        assert_eq!(cfg.choose(1 << 20, 64), Algorithm::Multicast);
        assert_eq!(cfg.choose((1 << 20) + 1, 64), Algorithm::Chain);
        assert_eq!(cfg.choose((1 << 20) + 1, 2), Algorithm::Chain);
        assert_eq!(cfg.choose(100, 3), Algorithm::Linear);
        assert_eq!(cfg.choose(100, 4), Algorithm::Multicast);
        // Either threshold alone brings the thesis's other one.
        let size_only = Config {
            crossover_size: 5000,
            ..Config::default()
        };
        assert_eq!(size_only.choose(100, 3), Algorithm::Linear);
        assert_eq!(size_only.choose(5000, 4), Algorithm::Multicast);
        assert_eq!(size_only.choose(5001, 4), Algorithm::Chain);
    }

    #[test]
    fn the_automatic_rule_leaves_small_cases_to_open_mpi() {
        let cfg = Config::default();
        assert!(cfg.is_automatic() && cfg.tunes());
        assert_eq!(cfg.choose(65536, 2), Algorithm::Previous);
        assert_eq!(cfg.choose(2048, 16), Algorithm::Previous);
        assert_eq!(cfg.choose(2049, 3), Algorithm::Multicast);
        assert_eq!(cfg.choose(1 << 30, 16), Algorithm::Multicast);
        assert!(!cfg.may_multicast(2));
        assert!(cfg.may_multicast(3));
        // The crossover moved: multicast only above it. At its largest
        // value a group is still set up (messages above it multicast), which
        // the measured choice needs to measure multicast at any size.
        let later = Config {
            fixed_crossover_size: 65536,
            ..Config::default()
        };
        assert_eq!(later.choose(65536, 16), Algorithm::Previous);
        assert_eq!(later.choose(65537, 3), Algorithm::Multicast);
        let never = Config {
            fixed_crossover_size: 1 << 40,
            ..Config::default()
        };
        assert_eq!(never.choose(1 << 40, 16), Algorithm::Previous);
        assert!(never.may_multicast(3));
        let untuned = Config {
            tune_calls: 0,
            ..Config::default()
        };
        assert!(untuned.is_automatic() && !untuned.tunes());
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
            inject_loss: 3,
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
                root_wait_time: 1,
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
                barrier_algorithm: 2,
                ..Config::default()
            },
            Config {
                allgather_algorithm: 1,
                ..Config::default()
            },
            Config {
                ranks_are_nodes: true,
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
                tune_calls: 3,
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
    fn the_generated_config_follows_the_table() {
        // The build generates `Config` from the table; what it cannot check
        // by construction: the shared list is the ALL_EQ rows, and every
        // default reads back as the table wrote it.
        let shared: Vec<&str> = PARAMS.iter().filter(|p| p.shared).map(|p| p.name).collect();
        let values = Config::default().shared_values();
        let names: Vec<&str> = values
            .split(' ')
            .map(|kv| kv.split('=').next().unwrap())
            .collect();
        assert_eq!(names, shared);
        for p in PARAMS.iter().filter(|p| p.shared) {
            assert!(
                values.contains(&format!("{}={}", p.name, p.default)),
                "{} default {} in {values}",
                p.name,
                p.default
            );
        }
        assert_eq!(
            Config::default().group_range,
            crate::group::groups::DEFAULT_GROUPS
        );
    }

    /// The text of value `v` in a help that lists values as "0 ..., 1 ...".
    fn option(help: &'static str, v: usize) -> &'static str {
        let start = [format!(": {v} "), format!(", {v} ")]
            .iter()
            .find_map(|p| help.find(p.as_str()).map(|i| i + p.len()))
            .unwrap_or_else(|| panic!("no value {v} in {help:?}"));
        let rest = &help[start..];
        &rest[..rest.find(&format!(", {} ", v + 1)).unwrap_or(rest.len())]
    }

    fn help(name: &str) -> &'static str {
        PARAMS.iter().find(|p| p.name == name).unwrap().help
    }

    #[test]
    fn help_texts_say_what_the_code_does() {
        use crate::group::setup::auth_of;
        use crate::protocol::datagram::{Auth, Key};
        for p in PARAMS {
            let sentences = p.help.matches(". ").count() + 1;
            assert!(sentences <= 2, "{}: {sentences} sentences", p.name);
            assert!(
                !p.help.ends_with('.'),
                "{}: Open MPI appends the period",
                p.name
            );
        }
        // Each `authenticate` value names the primitives it may use.
        let key = Key([1; crate::protocol::datagram::KEY_LEN]);
        for (v, also) in [(0, None), (1, Some(Auth::Polyval(key))), (2, None)] {
            let cfg = Config {
                authenticate: v,
                ..Config::default()
            };
            for auth in std::iter::once(auth_of(&cfg, key)).chain(also) {
                let primitive = auth
                    .describe()
                    .split(' ')
                    .find(|w| w.contains("BLAKE3") || w.contains("AES") || w.contains("CRC"));
                let text = option(help("authenticate"), v);
                match primitive {
                    Some(word) => assert!(text.contains(word), "{v}: {word} in {text:?}"),
                    None => assert!(text.contains("none"), "{v}: {text:?}"),
                }
            }
        }
        // The forced broadcast algorithms, by the names ipmc logs them under.
        for code in 1..=6 {
            let name = match forced(code).unwrap() {
                Algorithm::Previous => "replaced",
                Algorithm::Chain => "chain",
                a => a.name(),
            };
            let text = option(help("bcast_algorithm"), code);
            assert!(text.contains(name), "{code}: {name} in {text:?}");
        }
        for param in ["barrier_algorithm", "allgather_algorithm"] {
            assert!(option(help(param), CHOICE_MEASURED).contains("measuring"));
            assert!(option(help(param), CHOICE_REPLACED).contains("replaced"));
            assert!(option(help(param), CHOICE_MULTICAST).contains("multicast"));
        }
        for (v, path, word) in [
            (1, DatagramPath::Offload, "offload"),
            (2, DatagramPath::Single, "one per system call"),
            (3, DatagramPath::Batched, "sendmmsg"),
        ] {
            let cfg = Config {
                datagram_io: v,
                ..Config::default()
            };
            assert_eq!(cfg.datagram_path(), path);
            assert!(option(help("datagram_io"), v).contains(word), "{v}");
        }
        // The levels of `verbose` are those the logger uses.
        let verbose = help("verbose");
        for (level, word) in [
            (log::Level::Warn, "warnings"),
            (log::Level::Info, "setup"),
            (log::Level::Debug, "algorithm"),
            (log::Level::Trace, "trace"),
        ] {
            let at = crate::component::logging::verbosity_of(level);
            let text = verbose
                .split(", ")
                .find(|t| t.starts_with(&format!("{at} ")))
                .unwrap_or_else(|| panic!("no level {at} in {verbose:?}"));
            assert!(text.contains(word), "{level}: {word} in {text:?}");
        }
        // What the defaults' help says of other components.
        assert!(Config::default().priority > 30, "above tuned's priority");
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
