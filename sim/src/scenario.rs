//! One simulated broadcast: a cluster, a message, an algorithm.

use std::rc::Rc;
use std::time::Duration;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use ipmc::base::params::Config;
use ipmc::group::setup;
use ipmc::protocol::datagram::Key;

use crate::allgather;
use crate::auto::{AutoRank, Kind, Previous};
use crate::barrier::{self, IpmcBarrier};
use crate::engine::{Engine, Outcome};
use crate::network::Network;
use crate::node::Node;
use crate::p2p::{ALLGATHER, BARRIER};
use crate::programs::{
    self, Call, FirstBroadcast, IpmcParams, IpmcRank, Program, Schedule, Status,
};
use crate::Ns;

/// The broadcast a rank runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// ipmc's two-stage multicast broadcast, with the component's driver.
    Ipmc,
    /// ipmc's automatic choice ([`crate::auto`]): the component's measured
    /// choice among its candidates, call after call.
    IpmcAuto,
    /// The same as a communicator's first broadcast: the setup of its group
    /// through rank 0 first.
    IpmcFirst,
    /// Models of Open MPI tuned's broadcasts.
    Binomial,
    Pipeline,
    ScatterAllgather,
    /// `MPI_Barrier` ([`crate::barrier`]): ipmc's, with the component's
    /// trees and driver, and models of tuned's linear and Bruck barriers.
    BarrierIpmc,
    BarrierLinear,
    BarrierBruck,
    /// ipmc's automatic choice of barriers, call after call: ipmc's barrier
    /// against the models of the linear barrier and (as the replaced one)
    /// the Bruck barrier.
    BarrierAuto,
    /// `MPI_Allgather` ([`crate::allgather`]): ipmc's, every rank's block a
    /// multicast broadcast in turn with the component's driver, and a model
    /// of tuned's ring allgather.
    AllgatherIpmc,
    AllgatherRing,
    /// ipmc's automatic choice of allgathers, call after call: ipmc's
    /// against the model of the ring (as Open MPI's ring and as the replaced
    /// one).
    AllgatherAuto,
}

impl Algorithm {
    pub const PEERS: [Algorithm; 3] = [
        Algorithm::Binomial,
        Algorithm::Pipeline,
        Algorithm::ScatterAllgather,
    ];
    pub const BARRIER_PEERS: [Algorithm; 2] = [Algorithm::BarrierLinear, Algorithm::BarrierBruck];
    pub const ALLGATHER_PEERS: [Algorithm; 1] = [Algorithm::AllgatherRing];

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Ipmc => "ipmc",
            Algorithm::IpmcAuto => "ipmc-auto",
            Algorithm::IpmcFirst => "ipmc-first",
            Algorithm::Binomial => "binomial",
            Algorithm::Pipeline => "pipeline",
            Algorithm::ScatterAllgather => "scatter-allgather",
            Algorithm::BarrierIpmc => "barrier-ipmc",
            Algorithm::BarrierLinear => "barrier-linear",
            Algorithm::BarrierBruck => "barrier-bruck",
            Algorithm::BarrierAuto => "barrier-auto",
            Algorithm::AllgatherIpmc => "allgather-ipmc",
            Algorithm::AllgatherRing => "allgather-ring",
            Algorithm::AllgatherAuto => "allgather-auto",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        [
            Algorithm::Ipmc,
            Algorithm::IpmcAuto,
            Algorithm::IpmcFirst,
            Algorithm::BarrierIpmc,
            Algorithm::BarrierAuto,
            Algorithm::AllgatherIpmc,
            Algorithm::AllgatherAuto,
        ]
        .into_iter()
        .chain(Self::PEERS)
        .chain(Self::BARRIER_PEERS)
        .chain(Self::ALLGATHER_PEERS)
        .find(|a| a.name() == name)
    }

    /// ipmc's own algorithms, which the simulator runs with the component's
    /// code (the others are models).
    pub fn is_ipmc(self) -> bool {
        matches!(
            self,
            Algorithm::Ipmc
                | Algorithm::IpmcAuto
                | Algorithm::IpmcFirst
                | Algorithm::BarrierIpmc
                | Algorithm::BarrierAuto
                | Algorithm::AllgatherIpmc
                | Algorithm::AllgatherAuto
        )
    }

    /// Whether it is an allgather (`size` is then each rank's block).
    pub fn is_allgather(self) -> bool {
        matches!(
            self,
            Algorithm::AllgatherIpmc | Algorithm::AllgatherRing | Algorithm::AllgatherAuto
        )
    }

    /// The collective it serves.
    pub fn collective(self) -> &'static str {
        if self.is_barrier() {
            "barrier"
        } else if self.is_allgather() {
            "allgather"
        } else {
            "bcast"
        }
    }

    /// Whether it is a barrier.
    pub fn is_barrier(self) -> bool {
        matches!(
            self,
            Algorithm::BarrierIpmc
                | Algorithm::BarrierLinear
                | Algorithm::BarrierBruck
                | Algorithm::BarrierAuto
        )
    }
}

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub nodes: usize,
    pub size: usize,
    pub root: usize,
    pub net: Network,
    pub algorithm: Algorithm,
    pub ipmc: IpmcParams,
    /// Segment size of the pipelined chain.
    pub pipeline_segment: usize,
    /// Each rank enters the broadcast at a random time up to this (0: all
    /// waiting when it starts).
    pub skew_ns: Ns,
    /// ipmc only: the broadcasts every rank makes one after another, each a
    /// root and a length, as a program's loop of `MPI_Bcast` does; empty:
    /// the one broadcast of `root` and `size`.
    pub calls: Vec<(usize, usize)>,
    /// ipmc's automatic choice: the model of the replaced component's
    /// broadcast, and the component's parameters (`tune_calls`,
    /// `inject_timing`, `chain_segment_size`).
    pub previous: Previous,
    pub choice: Config,
    /// Ranks per node: `nodes` counts the leaders, each node's other ranks
    /// get each message from theirs ([`crate::node`]).
    pub node: Node,
    pub seed: u64,
}

impl Scenario {
    /// ipmc at its default parameters on `net`.
    pub fn new(nodes: usize, size: usize, net: Network) -> Self {
        let cfg = Config::default();
        let auth = setup::auth_of(&cfg, Key([7; ipmc::protocol::datagram::KEY_LEN]));
        // What rank 0 announces on the links' MTU: datagrams that IP does
        // not fragment.
        let fragment_size = setup::fitting_fragment(cfg.fragment_size, net.mtu as u32, false, auth);
        Scenario {
            nodes,
            size,
            root: 0,
            net,
            algorithm: Algorithm::Ipmc,
            ipmc: IpmcParams {
                fragment_size,
                auth,
                root_wait: Duration::from_micros(cfg.root_wait_time as u64),
                background_limit: cfg.background_limit,
                flow_window: cfg.flow_window,
            },
            pipeline_segment: 65536,
            skew_ns: 0,
            calls: Vec::new(),
            previous: Previous::Tuned,
            choice: Config::default(),
            node: Node::default(),
            seed: 1,
        }
    }

    /// Runs it: when every rank returned, and what the network did.
    pub fn run(&self) -> Result<Outcome, String> {
        let n = self.nodes;
        if n < 2 {
            return Err("a broadcast needs 2 nodes at least".into());
        }
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut engine = Engine::new(self.leaders_net(self.algorithm.is_ipmc()), rng.next_u64());
        let multicast = matches!(
            self.algorithm,
            Algorithm::Ipmc
                | Algorithm::IpmcAuto
                | Algorithm::IpmcFirst
                | Algorithm::AllgatherIpmc
                | Algorithm::BarrierAuto
                | Algorithm::AllgatherAuto
        );
        let collective = self.algorithm.collective();
        let auto = matches!(
            self.algorithm,
            Algorithm::BarrierAuto | Algorithm::AllgatherAuto
        );
        let calls_allowed = auto || self.calls.len() <= 1;
        if collective != "bcast" && !calls_allowed {
            return Err(format!("a {collective} is modelled as one call"));
        }
        if self.node.ranks > 1 && collective != "bcast" {
            if collective != "allgather" || auto {
                return Err(format!("a {collective} is modelled with one rank per node"));
            }
            return self.allgather_over_levels();
        }
        if self.node.ranks > 1 && self.node.segment > 0 && self.size > self.node.segment {
            return self.bcast_over_pipelined_levels();
        }
        if self.algorithm == Algorithm::BarrierIpmc {
            engine.protect(self.ipmc.auth, 1);
        }
        let kind = match self.algorithm {
            Algorithm::BarrierAuto => Kind::Barrier,
            Algorithm::AllgatherAuto => Kind::Allgather(
                (0..n)
                    .map(|_| {
                        let mut block = vec![0; self.size];
                        rng.fill_bytes(&mut block);
                        Rc::<[u8]>::from(block)
                    })
                    .collect(),
            ),
            _ => Kind::Bcast,
        };
        let calls = match &self.calls[..] {
            // ipmc's allgather: every rank's block a broadcast, rank 0's first
            // (`Module::run_allgather`).
            [] if self.algorithm == Algorithm::AllgatherIpmc => {
                (0..n).map(|r| (r, self.size)).collect()
            }
            [] => vec![(self.root, self.size)],
            calls => calls.to_vec(),
        };
        if calls.iter().any(|&(r, _)| r >= n) {
            return Err("a call's root is outside the communicator".into());
        }
        let plan: Vec<Call> = if multicast {
            let mut message = |len| {
                let mut m = vec![0; len];
                rng.fill_bytes(&mut m);
                Rc::<[u8]>::from(m)
            };
            calls
                .iter()
                .map(|&(root, len)| Call {
                    root,
                    message: message(len),
                })
                .collect()
        } else {
            Vec::new()
        };
        let comm_id = rng.next_u64();
        if multicast {
            let per_call = if matches!(kind, Kind::Allgather(_)) {
                n
            } else {
                1
            };
            engine.protect(self.ipmc.auth, (calls.len() * per_call) as u64);
        }
        let root = self.root;
        let real = move |v: usize| (v + root) % n;
        for rank in 0..n {
            let io = engine.host_io();
            let vrank = (rank + n - root) % n;
            let program: Box<dyn Program> = match self.algorithm {
                Algorithm::Ipmc | Algorithm::AllgatherIpmc => Box::new(IpmcRank::new(
                    &io,
                    rank,
                    n,
                    self.ipmc,
                    comm_id,
                    plan.clone(),
                )),
                Algorithm::IpmcAuto | Algorithm::BarrierAuto | Algorithm::AllgatherAuto => {
                    Box::new(AutoRank::new(
                        &io,
                        (rank, n),
                        self.ipmc,
                        comm_id,
                        (plan.clone(), kind.clone()),
                        (self.previous, self.choice.clone()),
                    )?)
                }
                Algorithm::IpmcFirst => {
                    let (io2, params, plan) = (io.clone(), self.ipmc, plan.clone());
                    Box::new(FirstBroadcast::new(
                        &io,
                        rank,
                        n,
                        Box::new(move || IpmcRank::new(&io2, rank, n, params, comm_id, plan)),
                    ))
                }
                Algorithm::Binomial => Box::new(Schedule::new(
                    &io,
                    programs::binomial(vrank, n, self.size, real),
                )),
                Algorithm::Pipeline => Box::new(Schedule::new(
                    &io,
                    programs::pipeline(vrank, n, self.size, self.pipeline_segment, real),
                )),
                Algorithm::ScatterAllgather => Box::new(Schedule::new(
                    &io,
                    programs::scatter_allgather(vrank, n, self.size, real),
                )),
                Algorithm::BarrierIpmc => {
                    Box::new(IpmcBarrier::new(&io, rank, n, self.ipmc, comm_id))
                }
                Algorithm::BarrierLinear => {
                    Box::new(Schedule::tagged(&io, barrier::linear(rank, n), BARRIER))
                }
                Algorithm::BarrierBruck => {
                    Box::new(Schedule::tagged(&io, barrier::bruck(rank, n), BARRIER))
                }
                Algorithm::AllgatherRing => Box::new(Schedule::tagged(
                    &io,
                    allgather::ring(rank, n, self.size),
                    ALLGATHER,
                )),
            };
            let program = match self.skew_ns {
                0 => program,
                skew => Box::new(Late {
                    enter: rng.next_u64() % (skew + 1),
                    program,
                }),
            };
            engine.add_host(io, program);
        }
        let mut outcome = engine.run(LIMIT)?;
        if self.node.ranks > 1 {
            if calls.len() > 1 {
                return Err("several calls with several ranks per node are not modelled".into());
            }
            let fan_out = self.node.fan_out_ns(self.size, self.algorithm.is_ipmc());
            for t in &mut outcome.returned_ns {
                *t += fan_out;
            }
        }
        Ok(outcome)
    }

    /// The network and host costs the broadcast runs on: where ipmc gives
    /// the message to a node's ranks through its shared segment, every
    /// leader also copies each byte it moves into the segment, on its own
    /// core ([`crate::node::Shared::leader_ps_per_byte`], added to the
    /// host's cost per byte), unless its ranks copy from its memory.
    fn leaders_net(&self, ipmc: bool) -> crate::network::Network {
        let mut net = self.net.clone();
        if let Some(shared) = self.node.shared.filter(|_| ipmc && self.node.ranks > 1) {
            net.per_byte_ps += shared.leader_ps_per_byte();
            net.per_datagram_byte_ps += shared.leader_ps_per_byte();
        }
        net
    }

    /// One broadcast over pipelined levels: the leaders' broadcasts of the
    /// message's segments back to back (simulated), and each node's
    /// broadcast of them, which takes each segment on as soon as its leader
    /// has it. Modelled: a rank has the message once its leader has the
    /// last segment and the node's broadcast has moved that one
    /// ([`Node::fan_out_ns`] of a segment), and no sooner than the node's
    /// broadcast of the whole message from when its leader had the first
    /// segment (a separate run of that broadcast alone).
    fn bcast_over_pipelined_levels(&self) -> Result<Outcome, String> {
        if self.calls.len() > 1 {
            return Err("several calls with several ranks per node are not modelled".into());
        }
        let segment = self.node.segment;
        let mut leaders = self.clone();
        leaders.net = self.leaders_net(self.algorithm.is_ipmc());
        leaders.node.ranks = 1;
        leaders.size = segment;
        let first = leaders.run()?;
        let segments: Vec<usize> = (0..self.size)
            .step_by(segment)
            .map(|at| segment.min(self.size - at))
            .collect();
        let last = *segments.last().expect("a message of a byte or more");
        leaders.size = self.size;
        leaders.calls = segments.iter().map(|&len| (self.root, len)).collect();
        let mut outcome = leaders.run()?;
        let ipmc = self.algorithm.is_ipmc();
        let (last_ns, whole_ns) = (
            self.node.fan_out_ns(last, ipmc),
            self.node.fan_out_ns(self.size, ipmc),
        );
        for (t, f) in outcome.returned_ns.iter_mut().zip(&first.returned_ns) {
            *t = (*t + last_ns).max(f + whole_ns);
        }
        Ok(outcome)
    }

    /// One allgather over two levels, as ipmc's levels run it: each node's
    /// blocks gathered to its leader ([`Node::gather_ns`]), the leaders'
    /// allgather of one node's blocks each (simulated), and each leader's
    /// fan-out of every block to its node ([`Node::fan_out_ns`]).
    fn allgather_over_levels(&self) -> Result<Outcome, String> {
        let mut leaders = self.clone();
        leaders.net = self.leaders_net(true);
        leaders.node.ranks = 1;
        leaders.size = self.size * self.node.ranks;
        let mut outcome = leaders.run()?;
        let inside =
            self.node.gather_ns(self.size) + self.node.fan_out_ns(leaders.size * self.nodes, true);
        for t in &mut outcome.returned_ns {
            *t += inside;
        }
        Ok(outcome)
    }

    /// The message's bits at the link rate.
    pub fn wire_ns(&self) -> Ns {
        self.net.serialize(self.size)
    }
}

/// A rank that enters the broadcast at `enter`; what arrives before waits
/// for it in its socket and point-to-point layer.
struct Late {
    enter: Ns,
    program: Box<dyn Program>,
}

impl Program for Late {
    fn step(&mut self, now: Ns) -> Result<Status, String> {
        if now < self.enter {
            return Ok(Status {
                returned: false,
                done: false,
            });
        }
        self.program.step(now)
    }

    fn table(&self) -> Option<String> {
        self.program.table()
    }

    fn wake_at(&self) -> Option<Ns> {
        Some(self.enter)
            .filter(|&t| t > 0)
            .max(self.program.wake_at())
    }
}

/// Virtual time after which a run counts as hung.
const LIMIT: Ns = 3_600 * 1_000_000_000;
