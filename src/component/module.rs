//! The state ipmc keeps for one communicator, and its broadcast entry point.

use std::ffi::c_int;
use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant, SystemTime};

use log::{debug, info, warn};

use crate::algorithms::nonblocking::Shape;
use crate::algorithms::{barrier, chain, linear};
use crate::base::error::{Error, Result};
use crate::base::params::Config;
use crate::base::transport::Transport;
use crate::component::background::{Background, Form as IbcastForm, Ibcast, Joining, Open};
use crate::component::known::{self, Kept, Membership, Recalled};
use crate::component::levels::{Entry, Layout, Levels, Seen, LEVEL_SEGMENT};
use crate::component::logging::{tell_once, Notice};
use crate::component::node_segment::Wanted;
use crate::component::nodes::Nodes;
use crate::component::parked;
use crate::component::stats::Stats;
use crate::driver::multicast::{Driver, Ranks};
use crate::engine::algorithm::Algorithm;
use crate::engine::call::{Action, Call as EngineCall, Collective};
use crate::engine::choice::{lost_permille, Ballots, Choice};
use crate::engine::inherited;
use crate::engine::tuning::{self, Decision, Tuner};
use crate::group::setup::{self, Announce};
use crate::group::stated::{Stated, STATED_LEN};
use crate::net::interfaces::{self, IfList};
use crate::net::mcast_socket::{self, McastSocket, OpenError};
use crate::platform::ompi::{
    self, AllgatherCall, Answers, BarrierCall, BcastCall, Comm, PmlTransport, Request,
};
use crate::platform::os;
use crate::protocol::datagram;

/// A size class whose measured multicast got this share (per mille) of
/// its message by the chain instead gives multicast up (see
/// [`tuning`]), and the user hears of it.
const LOSS_TO_REPORT: u32 = tuning::GIVE_UP_LOSS_PERMILLE;

/// Why ipmc declines a communicator in `comm_query`; `None` accepts it.
/// Every input is the same on every rank, so all ranks decide alike.
pub fn decline_reason(cfg: &Config, is_inter: bool, size: usize) -> Option<&'static str> {
    if cfg.priority < 0 {
        Some("its priority is negative")
    } else if is_inter {
        Some("it is an intercommunicator")
    } else if size < 2 {
        Some("it has fewer than 2 processes")
    } else {
        None
    }
}

/// Whether a communicator of one level measures point-to-point broadcasts
/// only: the automatic choice never multicasts on its nodes (two), each of
/// one rank.
fn measures_point_to_point(cfg: &Config, nodes: &Nodes) -> bool {
    cfg.tunes() && nodes.max_ranks == 1 && nodes.count > 1 && !cfg.may_multicast(nodes.count)
}

/// Why ipmc declines a communicator whose ranks all share one node: Open
/// MPI's own broadcast moves node-local data through shared memory, and no
/// datagram should leave a node for node-local work. A forced algorithm of
/// ipmc's (`coll_ipmc_bcast_algorithm`) still serves it.
pub fn decline_node_local(cfg: &Config, nodes: &Nodes) -> Option<&'static str> {
    (nodes.is_single() && !cfg.forces_own_algorithm())
        .then_some("its processes share one node, where Open MPI's own broadcast is faster")
}

/// Why ipmc declines a communicator whose creator chose what serves it, from
/// the info keys it was created with (the same on every rank): a level of
/// `han`'s (`ompi_comm_coll_han_topo_level`), or a preference for other
/// components (`ompi_comm_coll_preference`, which `han` sets on its levels
/// too). The preference lists components in order, then `^` and those
/// excluded (as Open MPI reads it); a list that prefers some but not ipmc
/// keeps ipmc off, where Open MPI would have let it serve what the
/// preferred ones lack.
pub fn decline_by_creator(han_level: bool, preference: Option<&str>) -> Option<&'static str> {
    let prefers_others = preference.is_some_and(|p| {
        let preferred: Vec<&str> = p
            .split(',')
            .map(str::trim)
            .take_while(|c| !c.starts_with('^'))
            .filter(|c| !c.is_empty())
            .collect();
        !preferred.is_empty() && !preferred.contains(&"ipmc")
    });
    if han_level {
        Some("it is one level of han's")
    } else if prefers_others {
        Some("its creator prefers other components (ompi_comm_coll_preference)")
    } else {
        None
    }
}

/// One member's ipmc configuration, as it published it in the modex.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Published {
    /// ipmc runs there with parameters of this digest ([`Config::published_digest`]).
    Digest(u64),
    /// ipmc is installed but will not run there (priority -1, or a
    /// parameter out of range or invalid).
    Disabled,
    /// Nothing published: ipmc is not installed or not loaded there.
    Absent,
}

impl Published {
    pub fn from_modex(value: Option<u64>) -> Self {
        match value {
            None => Published::Absent,
            Some(0) => Published::Disabled,
            Some(d) => Published::Digest(d),
        }
    }
}

/// Members of a communicator that do not run ipmc as its other members do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disagreement {
    /// The lowest rank that runs ipmc: its parameters are the reference,
    /// and it alone tells the user.
    pub reference: usize,
    /// Every other member that differs, and how.
    pub members: Vec<(usize, Published)>,
}

/// Whether the members of a communicator (each one's published value, the
/// same list on every member) all run ipmc with one configuration. Every
/// member decides alike, since every member reads the same values.
pub fn disagreement(published: &[Published]) -> Option<Disagreement> {
    let (reference, want) = published
        .iter()
        .enumerate()
        .find(|(_, p)| matches!(p, Published::Digest(_)))
        .map(|(i, p)| (i, *p))?;
    let members: Vec<(usize, Published)> = published
        .iter()
        .enumerate()
        .filter(|(_, p)| **p != want)
        .map(|(i, p)| (i, *p))
        .collect();
    (!members.is_empty()).then_some(Disagreement { reference, members })
}

impl Disagreement {
    /// The message for the user; `host` names a member's host.
    pub fn message(&self, comm: &str, host: impl Fn(usize) -> String) -> String {
        const SHOWN: usize = 8;
        let mut text = format!(
            "ipmc: the processes of communicator {comm} do not share one ipmc configuration, \
             so ipmc steps aside on every communicator with such processes and Open MPI's \
             own broadcast serves them (the job goes on):"
        );
        for &(rank, what) in self.members.iter().take(SHOWN) {
            let why = match what {
                Published::Digest(_) => format!(
                    "its coll_ipmc parameters differ from those of rank {} on host {}",
                    self.reference,
                    host(self.reference)
                ),
                Published::Disabled => "ipmc is disabled there (coll_ipmc_priority -1, or a \
                                        parameter out of range or invalid)"
                    .into(),
                Published::Absent => "ipmc is not installed or not loaded there".into(),
            };
            text.push_str(&format!("\n  rank {rank} on host {}: {why}", host(rank)));
        }
        if self.members.len() > SHOWN {
            text.push_str(&format!(
                "\n  and {} more ranks",
                self.members.len() - SHOWN
            ));
        }
        text.push_str(
            "\nSet the same coll_ipmc_* parameters (ompi_info --param coll ipmc --level 9) \
             and install ipmc on every host, or disable it everywhere.",
        );
        text
    }
}

/// Whether a communicator's broadcasts run over two levels (nodes hold
/// several ranks), and where that stands.
enum TwoLevels {
    /// One level: every rank takes part in ipmc's algorithms itself.
    No,
    /// Two levels, split at the first broadcast.
    Pending(Layout),
    Ready(Box<Levels>),
    /// The split failed: one level from now on.
    Failed,
}

/// What the ranks of a communicator over two levels agreed at its first
/// split ([`Module::agree_over_levels`]).
struct OverLevels {
    /// The levels of an earlier communicator of the same processes, which
    /// every rank offered.
    levels: Option<Box<Levels>>,
    /// What they take on over levels whose nodes' ranks copy one way, and
    /// either way: what every rank stated alike, and what this rank kept.
    one_way: (Stated, Option<Recalled>),
    either_way: (Stated, Option<Recalled>),
}

/// Where a communicator stands with its multicast group.
enum Multicast {
    /// No agreement on a group was started: no call on the communicator
    /// multicasts.
    NotSetUp,
    /// The agreement on the group, started when the communicator was
    /// created, goes on in the background; the next broadcast finishes it.
    Joining,
    /// The group is agreed (`announce`): the background has its driver,
    /// whose datagrams carry `fragment_size` bytes of a message.
    Ready {
        fragment_size: usize,
        announce: Box<Announce>,
    },
    /// Some rank could not join: the replaced component's broadcast serves
    /// the calls that would multicast.
    Failed,
}

/// ipmc's state on one communicator.
pub struct Module {
    cfg: Config,
    rank: usize,
    size: usize,
    nodes: Nodes,
    cid: u32,
    stats: Stats,
    reported: bool,
    multicast: Multicast,
    /// The communicator's work outside its calls: the agreement on the
    /// group, the multicast driver once agreed, and the broadcasts that
    /// returned or are nonblocking.
    background: Background,
    /// A panic was caught in a call on this module (see [`Module::poison`]).
    broken: bool,
    /// The current broadcast call has started to move messages.
    moved: bool,
    /// When this rank last returned from a broadcast here, where two
    /// levels follow late ranks (`follow_late_leaders`).
    left_bcast: Option<Instant>,
    /// The automatic choice's measurements and decisions.
    choice: Choice,
    /// Two levels, where nodes hold several ranks.
    levels: TwoLevels,
    /// Where its ranks agreed on what to take on from earlier
    /// communicators of the same processes (in the agreement on the group,
    /// or when two levels were split): the processes, under which this
    /// process keeps what the communicator measures and decides for later
    /// ones ([`known`]), and what it had kept for them.
    recalled: Option<Recalled>,
    /// Its levels are an earlier communicator's ([`parked`]).
    levels_taken_over: bool,
    /// The group of an earlier communicator of the same processes that
    /// this rank offers in the agreement on the group ([`parked`]).
    offered: Option<parked::Offered<parked::Group>>,
}

impl Module {
    /// The module of `comm`, whose ranks spread over `nodes`; a `layout`
    /// whose nodes hold several ranks makes its broadcasts run over two
    /// levels (unless one of Open MPI's broadcasts is forced).
    pub fn new(cfg: Config, comm: Comm, nodes: Nodes, layout: Option<Layout>) -> Self {
        let mut m = Self::with(cfg, comm.rank(), comm.size(), comm.cid(), nodes);
        if let Some(layout) = layout.filter(|l| m.cfg.takes_two_levels() && l.has_two_levels()) {
            m.levels = TwoLevels::Pending(layout);
            let tuner = Tuner::over_two_levels(m.cfg.tune_calls, m.rank, m.cfg.inject_timing)
                .of_ranks(m.size);
            m.choice = Choice::new(tuner);
        }
        m
    }

    fn with(cfg: Config, rank: usize, size: usize, cid: u32, nodes: Nodes) -> Self {
        let limit = cfg.background_limit;
        let mut tuner = Tuner::new(cfg.tune_calls, rank, cfg.inject_timing).of_ranks(size);
        if measures_point_to_point(&cfg, &nodes) {
            tuner = tuner.without_multicast();
        }
        Module {
            levels: TwoLevels::No,
            choice: Choice::new(tuner),
            cfg,
            rank,
            size,
            nodes,
            cid,
            stats: Stats::default(),
            reported: false,
            multicast: Multicast::NotSetUp,
            background: Background::new(limit),
            broken: false,
            moved: false,
            left_bcast: None,
            recalled: None,
            levels_taken_over: false,
            offered: None,
        }
    }

    /// Called after a panic in a call on this module was caught: every later
    /// broadcast goes to the replaced component's, and the multicast state,
    /// which the panic may have left half-changed, is never used again.
    /// Returns whether the panicked broadcast may be handed over as well:
    /// only if none of its messages moved, which could otherwise meet the
    /// replaced broadcast's (same tag) at a peer, and neither the agreement
    /// on the group nor an earlier multicast broadcast may still have
    /// messages in flight, for the same reason.
    pub fn poison(&mut self) -> bool {
        self.broken = true;
        !self.moved
            && matches!(self.multicast, Multicast::NotSetUp | Multicast::Failed)
            && !self.background.busy()
    }

    /// The algorithm for a broadcast of `bytes` bytes.
    fn choose(&self, bytes: usize) -> Algorithm {
        if self.broken {
            Algorithm::Previous
        } else {
            self.cfg.choose(bytes, self.nodes.count)
        }
    }

    /// What this rank did on the communicator so far.
    pub fn stats(&self) -> Stats {
        let mut stats = self.stats.clone();
        stats.datagrams.merge(&self.background.datagrams());
        stats
    }

    /// Called once ipmc is installed on the communicator, on every rank:
    /// if some call may multicast, the agreement on the group starts here and
    /// goes on in the background, so that no broadcast waits for a rank that
    /// has not entered it.
    pub fn enable(&mut self, comm: Comm) -> Result<()> {
        info!(
            "rank {} of {} enabled on communicator {} (cid {}): {} nodes, at most {} ranks on one",
            self.rank,
            self.size,
            comm.name(),
            self.cid,
            self.nodes.count,
            self.nodes.max_ranks
        );
        if let TwoLevels::Pending(layout) = &self.levels {
            // The leaders' communicator multicasts, this one never does.
            info!(
                "rank {} broadcasts on {} over two levels: {} node leaders, then each node",
                self.rank,
                comm.name(),
                layout.nodes()
            );
            return Ok(());
        }
        if self.cfg.may_multicast(self.nodes.count) {
            self.start_setup(comm)?;
        }
        Ok(())
    }

    /// Called when the communicator is freed: prints the statistics once.
    pub fn disable(&mut self, comm: Comm) {
        if self.cfg.print_statistics && !self.reported {
            let (stats, name) = (self.stats(), comm.name());
            ompi::print_line(&stats.report(
                self.rank,
                self.size,
                self.nodes.count,
                self.cid,
                &name,
            ));
            if let Some(line) = stats.collectives_report(self.rank, self.size, self.cid, &name) {
                ompi::print_line(&line);
            }
        }
        let report_table = self.cfg.verbose >= 1 && self.rank == 0 && !self.reported;
        self.reported = true;
        // An agreement on the group holds a reference on the communicator:
        // it ended before the communicator could be freed, and what it
        // agreed goes unused. The neighbours may still wait for messages of
        // the last broadcasts (unless a panic left their state in doubt).
        let mut settled = false;
        if !self.broken {
            // The last broadcasts' work first (see `take_answered`).
            if let Err(e) = self.background.finish() {
                warn!(
                    "rank {}: the last broadcast on {} failed: {e}",
                    self.rank,
                    comm.name()
                );
            } else if let Err(e) = self.background.await_answers() {
                // Every rank sent its answers within its broadcasts; a
                // receive left behind would meet a later communicator's.
                warn!("rank {}: answers on {} failed: {e}", self.rank, comm.name());
            } else {
                self.keep_for_later(comm);
                settled = true;
            }
        }
        let group = settled.then(|| self.group_to_keep()).flatten();
        if report_table {
            // With the votes the last work finished.
            let table = tuning::table(self.choice.tuner());
            if !table.is_empty() {
                let over = match self.levels_taken_over {
                    true => ", over the levels of an earlier communicator of the same processes",
                    false => "",
                };
                ompi::print_line(&format!(
                    "ipmc: the collectives of communicator {} ({} nodes, at most {} ranks on \
                     one{over}) as measured and agreed:{table}",
                    comm.name(),
                    self.nodes.count,
                    self.nodes.max_ranks
                ));
            }
        }
        // Keeps the group for a later communicator, or leaves it and closes
        // the sockets.
        self.background = Background::new(self.cfg.background_limit);
        self.multicast = Multicast::Failed;
        if let (Some(group), Some(owners)) = (group, self.level_owners(comm)) {
            parked::park_group(owners, group);
        }
        self.offer_back(comm);
        if let TwoLevels::Ready(levels) = std::mem::replace(&mut self.levels, TwoLevels::Failed) {
            self.park_levels(comm, levels, settled);
        }
    }

    /// One `MPI_Bcast` on this communicator; the error is an Open MPI code.
    pub fn bcast(&mut self, call: &mut BcastCall) -> Result<()> {
        // A measured call is timed from its entry: waiting for earlier
        // work (the agreement on the group, the chains of multicast
        // broadcasts before) may make it slower, never faster, and the best
        // of a candidate's calls leaves such a call out. Timed from after
        // the wait, it would look fast, the root having entered meanwhile.
        let entered = Instant::now();
        // Only two levels follow late ranks (`follow_late_leaders`), from
        // when this rank entered and how long it was outside broadcasts.
        let follows = self.cfg.leader_lateness > 0
            && matches!(self.levels, TwoLevels::Pending(_) | TwoLevels::Ready(_));
        let entry = self
            .left_bcast
            .take()
            .filter(|_| follows)
            .map(|left| Entry {
                at: SystemTime::now(),
                outside: entered.saturating_duration_since(left),
            });
        self.moved = false;
        let bytes = call.bytes();
        if bytes == 0 {
            self.stats.empty += 1;
            return Ok(());
        }
        if self.broken {
            self.moved = true;
            call.previous()?;
            self.stats.record(Algorithm::Previous, bytes);
            return Ok(());
        }
        if matches!(self.levels, TwoLevels::Pending(_)) {
            self.moved = true;
            self.split_levels(call.comm(), true)?;
        }
        self.finish_joining(call.comm())?;
        let what = Collective::Bcast { root: call.root() };
        let class = (tuning::class_of(bytes), self.choose_now(bytes));
        let c = self.engine_call(what, class, self.tunes());
        let alg = self.drive(call.comm(), c, entered, |m, part| match part {
            Part::AnswerRoot => call.answer_root().map(|()| None),
            Part::Run(alg) => {
                debug!(
                    "rank {} cid {}: bcast of {bytes} bytes from root {} with {}",
                    m.rank,
                    m.cid,
                    call.root(),
                    alg.name()
                );
                let before = m.bytes_by();
                match alg {
                    Algorithm::Previous => call.previous()?,
                    Algorithm::Binomial => call.binomial(bytes)?,
                    Algorithm::Binary => call.binary(bytes)?,
                    Algorithm::SplitBinary => call.split_binary(bytes)?,
                    Algorithm::ScatterAllgather => call.scatter_allgather(bytes)?,
                    Algorithm::Multicast => m.run_multicast(call, bytes)?,
                    Algorithm::TwoLevel | Algorithm::TwoLevelFromLeader => {
                        m.run_levels(call, bytes, alg.from_leader(), false)?
                    }
                    Algorithm::TwoLevelPipelined | Algorithm::TwoLevelPipelinedFromLeader => {
                        m.run_levels(call, bytes, alg.from_leader(), true)?
                    }
                    _ => m.run(alg, call, bytes)?,
                }
                // What multicast lost, in datagrams of the size the group
                // agreed.
                let (Algorithm::Multicast, Multicast::Ready { fragment_size, .. }) =
                    (alg, &m.multicast)
                else {
                    return Ok(None);
                };
                let (multicast, chain) = (m.bytes_by().0 - before.0, m.bytes_by().1 - before.1);
                Ok(lost_permille(bytes, *fragment_size, multicast, chain))
            }
        })?;
        self.stats.record(alg, bytes);
        self.follow_late_leaders(call.comm(), call.root(), follows, entry)?;
        self.left_bcast = follows.then(Instant::now);
        Ok(())
    }

    /// Mamidala et al.'s dynamic choice of the receiving process over two
    /// levels ([`crate::component::levels::Lookout`]): counts this rank's entry
    /// into this broadcast (`entry`, where `follows`) and, at a look (the same
    /// broadcast on every rank), moves the lead of each node whose leader was
    /// late to its least late rank, splitting the communicator again, and has
    /// the leader of a node with a late rank hand the message over; either
    /// change has the size classes measured again.
    fn follow_late_leaders(
        &mut self,
        comm: Comm,
        root: usize,
        follows: bool,
        entry: Option<Entry>,
    ) -> Result<()> {
        let TwoLevels::Ready(levels) = &mut self.levels else {
            return Ok(());
        };
        if !follows || !levels.arrived(entry, root) {
            return Ok(());
        }
        let lateness = Duration::from_micros(self.cfg.leader_lateness as u64);
        // Nonblocking broadcasts queued on the levels end on them.
        self.background.finish()?;
        let TwoLevels::Ready(levels) = &mut self.levels else {
            unreachable!("matched above");
        };
        let layout = match levels.look(lateness)? {
            Seen::Same => return Ok(()),
            Seen::HandoversChanged(handing) => {
                info!(
                    "rank {} on {}: nodes whose leader hands the message over without waiting \
                     for a late rank: {handing:?}",
                    self.rank,
                    comm.name()
                );
                self.choice.measure_again();
                return Ok(());
            }
            Seen::Moved(layout) => layout,
        };
        info!(
            "rank {} on {}: a node's leader entered broadcasts over {lateness:?} late; \
             the nodes are led by ranks {:?} from now on",
            self.rank,
            comm.name(),
            layout.leaders()
        );
        let TwoLevels::Ready(old) = std::mem::replace(&mut self.levels, TwoLevels::Pending(layout))
        else {
            unreachable!("matched above");
        };
        let lookout = old.lookout.clone();
        old.free();
        self.split_levels(comm, false)?;
        if let TwoLevels::Ready(levels) = &mut self.levels {
            levels.lookout = lookout;
        }
        self.stats.leader_moves += 1;
        self.choice.measure_again();
        Ok(())
    }

    /// One `MPI_Barrier` on this communicator; the error is an Open MPI code.
    /// The automatic choice measures it as a class of its own
    /// ([`tuning::BARRIER`]): each rank times its own calls, from entry to
    /// release, and the slowest rank's best decides.
    pub fn barrier(&mut self, call: &BarrierCall) -> Result<()> {
        let entered = Instant::now();
        self.moved = false;
        let comm = call.comm();
        if self.broken {
            self.moved = true;
            call.previous()?;
            self.stats.barriers.record(Algorithm::Previous);
            return Ok(());
        }
        if matches!(self.levels, TwoLevels::Pending(_)) {
            self.moved = true;
            self.split_levels(comm, true)?;
        }
        self.finish_joining(comm)?;
        let fixed = if !self.cfg.forces_barrier() {
            Algorithm::Previous
        } else if self.over_levels() {
            Algorithm::TwoLevel
        } else {
            Algorithm::Multicast
        };
        // The release is a multicast broadcast, which may begin while the
        // broadcasts before it still run their chains (`Background::release`
        // finishes them after the arrivals); the arrivals and the replaced
        // barrier have a tag of their own.
        let measured = self.cfg.tunes_barrier() && self.votes_here();
        let class = (tuning::BARRIER, fixed);
        let c = self.engine_call(Collective::Barrier, class, measured);
        let alg = self.drive(comm, c, entered, |m, part| {
            let Part::Run(alg) = part else {
                return Ok(None);
            };
            debug!("rank {} cid {}: barrier with {}", m.rank, m.cid, alg.name());
            match alg {
                Algorithm::Multicast => m.run_barrier(comm)?,
                Algorithm::Linear => call.linear()?,
                Algorithm::TwoLevel => match &m.levels {
                    TwoLevels::Ready(levels) => levels.barrier()?,
                    _ => return Err(Error::Unavailable),
                },
                _ => call.previous()?,
            }
            Ok(None)
        })?;
        self.stats.barriers.record(alg);
        Ok(())
    }

    /// One `MPI_Allgather` or `MPI_Allgatherv` on this communicator.
    /// Measured per block size as the barrier is (an allgatherv's by its
    /// mean block); where the group is not agreed and there are no two
    /// levels, or the message is too large for the levels' `int` counts,
    /// the replaced component serves it.
    pub fn allgather(&mut self, call: &mut AllgatherCall) -> Result<()> {
        let entered = Instant::now();
        self.moved = false;
        let comm = call.comm();
        let blocks: Vec<usize> = (0..self.size).map(|i| call.block_bytes(i)).collect();
        let total: usize = blocks.iter().sum();
        let block = total.div_ceil(self.size);
        if self.broken {
            self.moved = true;
            call.previous()?;
            self.stats.allgather_previous.record(total);
            return Ok(());
        }
        if matches!(self.levels, TwoLevels::Pending(_)) {
            self.moved = true;
            self.split_levels(comm, true)?;
        }
        self.finish_joining(comm)?;
        let servable = total > 0 && (!self.over_levels() || c_int::try_from(total).is_ok());
        let fixed = match self.cfg.forces_allgather() && servable {
            false => Algorithm::Previous,
            true if self.over_levels() => Algorithm::TwoLevel,
            true => Algorithm::Multicast,
        };
        let measured = self.cfg.tunes_allgather() && servable && self.votes_here();
        let class = (tuning::allgather_class(block), fixed);
        let c = self.engine_call(Collective::Allgather, class, measured);
        let alg = self.drive(comm, c, entered, |m, part| {
            let Part::Run(alg) = part else {
                return Ok(None);
            };
            debug!(
                "rank {} cid {}: {} of {total} bytes with {}",
                m.rank,
                m.cid,
                if call.varies() {
                    "allgatherv"
                } else {
                    "allgather"
                },
                alg.name()
            );
            match alg {
                Algorithm::Multicast => m.run_allgather(call, &blocks)?,
                Algorithm::Chain => call.ring()?,
                Algorithm::TwoLevel => match &mut m.levels {
                    TwoLevels::Ready(levels) => {
                        levels.allgather(call, &blocks)?;
                        m.stats.segment_bytes += levels.take_segment_bytes();
                    }
                    _ => return Err(Error::Unavailable),
                },
                _ => call.previous()?,
            }
            Ok(None)
        })?;
        let tally = match alg {
            Algorithm::Multicast => &mut self.stats.allgather_multicast,
            Algorithm::Chain => &mut self.stats.allgather_ring,
            Algorithm::TwoLevel => &mut self.stats.allgather_two_level,
            _ => &mut self.stats.allgather_previous,
        };
        tally.record(total);
        Ok(())
    }

    /// The engine's call of this rank for `what` in `class` (and the fixed
    /// algorithm), `measured` or not; its times count from its entry.
    fn engine_call(
        &self,
        what: Collective,
        class: (usize, Algorithm),
        measured: bool,
    ) -> EngineCall {
        let ready = self.multicast_ready();
        EngineCall::new(what, self.rank, class, measured, ready, Duration::ZERO)
    }

    /// Drives the engine's `call` on `comm`, entered at `entered`, to its
    /// end, doing what it says: `part` does the call's own parts (runs an
    /// algorithm, returning the share of the message that multicast lost
    /// where that tells; answers the root). Returns the algorithm that ran.
    /// Not on a broken module, whose background work is left alone (see
    /// `poison`).
    fn drive(
        &mut self,
        comm: Comm,
        mut call: EngineCall,
        entered: Instant,
        mut part: impl FnMut(&mut Self, Part) -> Result<Option<u32>>,
    ) -> Result<Algorithm> {
        let mut ran = Algorithm::Previous;
        loop {
            let (choice, mut io) = self.ballots(comm);
            match call.next(choice, &mut io)? {
                Action::Decided(decided) => self.tell(comm, decided),
                Action::FinishQueue => self.background.finish()?,
                Action::FinishVotes => self.background.finish_votes()?,
                Action::AwaitAnswers => self.background.await_answers()?,
                Action::Run(alg) => {
                    self.moved = true;
                    let lost = part(self, Part::Run(alg))?;
                    call.ran(entered.elapsed(), lost);
                    ran = alg;
                }
                Action::AnswerRoot => {
                    part(self, Part::AnswerRoot)?;
                }
                Action::TimeAtRoot { until } => {
                    self.time_at_root(comm, &mut call, entered, until)?
                }
                Action::Return => {
                    self.keep_progress(call.class());
                    return Ok(ran);
                }
            }
        }
    }

    /// ipmc's allgather: every rank's block (rank `i`'s of `blocks[i]`
    /// bytes) multicast in turn, rank 0's first, each a two-stage broadcast
    /// whose chain repairs what multicast did not deliver; a rank returns
    /// from each broadcast once it owns the block, so a root multicasts its
    /// block as soon as it has the blocks before it. Empty blocks are
    /// skipped, alike on every rank.
    fn run_allgather(&mut self, call: &mut AllgatherCall, blocks: &[usize]) -> Result<()> {
        let comm = call.comm();
        let mut data = Vec::new();
        for (root, &len) in blocks.iter().enumerate() {
            if len == 0 {
                continue;
            }
            data.resize(len, 0);
            if root == self.rank {
                call.own_block(self.rank, &mut data)?;
            }
            let at = Ranks {
                rank: self.rank,
                size: self.size,
                root,
            };
            let before = self.bytes_by();
            self.background
                .bcast(comm, at, &mut data, &mut self.stats.datagrams)?;
            // The blocks' bytes are no broadcast's.
            let d = &mut self.stats.datagrams;
            (d.bytes_multicast, d.bytes_chain) = before;
            if root != self.rank || !call.in_place() {
                call.put_block(root, &data)?;
            }
        }
        Ok(())
    }

    /// ipmc's barrier ([`barrier`]): the arrivals up their tree to rank 0,
    /// then the release, by one datagram from rank 0 and point-to-point down
    /// the releases' tree. A rank that the datagram released sends its children their
    /// point-to-point release at once and receives its own later, in the
    /// background: each comes once its sender was released, which waits for
    /// no rank.
    fn run_barrier(&mut self, comm: Comm) -> Result<()> {
        let (up, below) = barrier::arrivals(self.rank, self.size);
        let (from, to) = barrier::releases(self.rank, self.size);
        let mut release = match from {
            Some(parent) => Some(Answers::from_ranks(comm, [parent])?),
            None => None,
        };
        Answers::from_ranks(comm, below)?.wait()?;
        if let Some(parent) = up {
            comm.send_arrival(parent)?;
        }
        let at = Ranks {
            rank: self.rank,
            size: self.size,
            root: 0,
        };
        let by_datagram = self.background.release(
            at,
            || release.as_mut().map_or(Ok(true), Answers::test),
            &mut self.stats.datagrams,
        )?;
        let mut pending = Answers::send_to(comm, to)?;
        if let Some(release) = release {
            pending.extend(release);
        }
        if !pending.is_empty() {
            self.background.complete_later(comm, pending);
        }
        if from.is_some() {
            let b = &mut self.stats.barriers;
            if by_datagram {
                b.released_multicast += 1;
            } else {
                b.released_p2p += 1;
            }
        }
        Ok(())
    }

    /// Message bytes this rank got by multicast and by the chain so far.
    fn bytes_by(&self) -> (u64, u64) {
        let d = &self.stats.datagrams;
        (d.bytes_multicast, d.bytes_chain)
    }

    /// The measured choice, and its view of this communicator's background.
    fn ballots(&mut self, comm: Comm) -> (&mut Choice, OmpiBallots<'_>) {
        let votes = self.votes_on_bcasts();
        let io = OmpiBallots {
            background: &mut self.background,
            comm,
            votes,
        };
        (&mut self.choice, io)
    }

    /// Whether the automatic choice measures its broadcasts here: where
    /// multicast is one of them, over two levels, or among point-to-point
    /// algorithms where no call multicasts.
    fn tunes(&self) -> bool {
        !self.broken && self.cfg.tunes() && self.votes_on_bcasts()
    }

    /// Whether this communicator's ranks may agree on measurements of
    /// their barriers and allgathers: where the group is agreed, or the
    /// broadcasts run over two levels.
    fn votes_here(&self) -> bool {
        self.multicast_ready() || self.over_levels()
    }

    /// As [`Module::votes_here`], for their broadcasts.
    fn votes_on_bcasts(&self) -> bool {
        self.votes_here()
            || (matches!(self.levels, TwoLevels::No)
                && measures_point_to_point(&self.cfg, &self.nodes))
    }

    fn over_levels(&self) -> bool {
        matches!(self.levels, TwoLevels::Ready(_))
    }

    fn multicast_ready(&self) -> bool {
        matches!(self.multicast, Multicast::Ready { .. })
    }

    /// Times `call`, a measured call of a short message, at its root (this
    /// rank), which entered it at `entered`: until every other rank answered
    /// that it has the message, for at most `until` from the call's entry
    /// ([`tuning::Sample::answer_wait`]). Waiting in the call, the root sees each
    /// answer when it arrives; out of MPI (computing, or sleeping before its
    /// next call) it would see them only when it next drives the progress
    /// engine, which would make a candidate whose root returns early
    /// (multicast's) look slow. Answers that take longer are noted in the
    /// background, so the root never waits long for a rank that has not
    /// entered the call.
    fn time_at_root(
        &mut self,
        comm: Comm,
        call: &mut EngineCall,
        entered: Instant,
        until: Duration,
    ) -> Result<()> {
        let mut answers = Answers::expect(comm, self.rank)?;
        loop {
            if answers.test()? {
                call.answered(&mut self.choice, entered.elapsed());
                return Ok(());
            }
            if entered.elapsed() >= until {
                break;
            }
        }
        let ticket = self.background.expect_answers(comm, entered, answers)?;
        call.answers_late(&mut self.choice, ticket);
        Ok(())
    }

    /// What this process kept for `comm`'s processes over `levels` (see
    /// [`Membership`]); `None` where Open MPI does not know them all here.
    fn recall(&self, comm: Comm, levels: Option<bool>) -> Option<Recalled> {
        let members = comm.members()?;
        Some(Recalled::new(Membership {
            digest: self.cfg.digest(),
            members,
            levels,
        }))
    }

    /// Over two levels, at the first split and before it, what its ranks
    /// take over from earlier communicators of the same processes, in one
    /// allreduce on the communicator (its ranks agree on no group): the
    /// levels one of them left when it was freed ([`parked`]), where every
    /// rank offers the same; and, over either kind of levels, what they
    /// measured and decided, where every rank holds it alike.
    fn agree_over_levels(&self, comm: Comm) -> Result<OverLevels> {
        let owners = self.level_owners(comm);
        let offered = owners.as_ref().and_then(|owners| {
            // The hook that frees kept levels at MPI_Finalize is set up
            // here, inside a call, before any are kept.
            ompi::register_progress();
            parked::take_out(owners)
        });
        let recalled = [false, true].map(|either_way| self.recall(comm, Some(either_way)));
        // Every rank enters the allreduce, one that knows nothing too.
        let mut words = parked::id_words(offered.as_ref().map_or(0, |l| l.id)).to_vec();
        for r in &recalled {
            words.extend(
                r.as_ref()
                    .map_or(Stated::NONE, Recalled::stated)
                    .to_maxima(),
            );
        }
        if let Err(e) = comm.allreduce_max(&mut words) {
            if let Some(levels) = offered {
                levels.into_inner().free();
            }
            return Err(e);
        }
        let same = parked::same_id(&words[..4]);
        let (levels, left) = match offered {
            Some(l) if same == Some(l.id) => (Some(l.into_inner()), None),
            other => (None, other),
        };
        if let (Some(levels), Some(owners)) = (left, owners) {
            parked::park_again(owners, levels, self.cfg.keep_freed);
        }
        // In the order of `recalled`: one way, then either way.
        let mut agreed = words[4..]
            .chunks(STATED_LEN)
            .map(Stated::from_maxima)
            .zip(recalled);
        Ok(OverLevels {
            levels,
            one_way: agreed.next().expect("two kinds of levels"),
            either_way: agreed.next().expect("two kinds of levels"),
        })
    }

    /// Takes on what the ranks agreed at the first split (`agreed`) for
    /// the levels they now have, which copy `either_way` or not.
    fn take_on_over_levels(&mut self, agreed: OverLevels, either_way: bool) {
        let (stated, recalled) = if either_way {
            agreed.either_way
        } else {
            agreed.one_way
        };
        self.recalled = recalled;
        self.inherit(&stated);
    }

    /// Under whom `comm`'s levels are kept and taken over ([`parked`]);
    /// `None` where Open MPI does not know every member here, or for a
    /// session's communicator: kept, its levels would outlive the session,
    /// whose end ipmc does not see.
    fn level_owners(&self, comm: Comm) -> Option<parked::Owners> {
        if !comm.of_world_model() {
            return None;
        }
        Some(parked::Owners {
            digest: self.cfg.digest(),
            members: comm.members()?,
        })
    }

    /// Keeps this communicator's levels, once its last work ended
    /// (`settled`), for a later communicator of the same processes
    /// ([`parked`]); frees them where it did not end well, where they have
    /// no owners to be kept under, or where a handover failed.
    fn park_levels(&self, comm: Comm, mut levels: Box<Levels>, settled: bool) {
        match settled.then(|| self.level_owners(comm)).flatten() {
            Some(owners) if levels.settle() => parked::park(owners, levels, self.cfg.keep_freed),
            _ => levels.free(),
        }
    }

    /// Keeps class `k`'s measurement as far as it went, after a call of the
    /// class: a communicator of the same processes made before this one is
    /// freed (or before Open MPI frees it, which may be later than
    /// `MPI_Comm_free`, while its last work finishes) goes on from there.
    fn keep_progress(&self, k: usize) {
        if let Some(r) = &self.recalled {
            if let Some(p) = self.choice.tuner().progress_of(k) {
                known::remember_progress(&r.membership, vec![(k, p)]);
            }
        }
    }

    /// Keeps what this communicator, about to be freed, measured and
    /// decided, for later ones of the same processes: the votes its last
    /// work finished, and the measurements it leaves unfinished, with the
    /// times of its calls as a root that the answers gave. Every rank keeps
    /// it at the same call.
    fn keep_for_later(&mut self, comm: Comm) {
        if self.recalled.is_none() {
            return;
        }
        let (choice, mut io) = self.ballots(comm);
        if let Err(e) = choice.take_answers(&mut io) {
            info!("rank {}: answers on {} failed: {e}", self.rank, comm.name());
            return;
        }
        let decided = choice.settle(&mut io);
        self.tell(comm, decided);
        if let Some(r) = &self.recalled {
            known::remember_progress(&r.membership, self.choice.tuner().progress());
        }
    }

    /// Takes on what the agreement on the group kept of what the ranks
    /// stated, every rank alike: each is what this rank stated.
    fn inherit(&mut self, agreed: &Stated) {
        let mut taken = 0;
        for (k, what) in inherited::held(agreed) {
            let kept = self.recalled.as_ref().and_then(|r| r.find(k, what));
            let took = match kept {
                Some(Kept::Decided(d)) => self.choice.inherit(k, d),
                Some(Kept::Measured(p)) => self.choice.take_on(k, p),
                None => false,
            };
            if took {
                taken += 1;
            } else {
                // Not expected: every rank's tuner is alike, so each refuses
                // alike.
                info!(
                    "rank {}: cannot take on {} ({what:?}) from an earlier communicator",
                    self.rank,
                    tuning::class_name(k),
                );
            }
        }
        if taken > 0 {
            info!(
                "rank {} cid {}: {taken} classes taken on from earlier communicators of the \
                 same processes",
                self.rank, self.cid
            );
        }
    }

    /// Logs the decisions of votes that ended (class and decision). A class
    /// that gave up multicast because it lost most of its data is the
    /// user's business: the process of rank 0 in `MPI_COMM_WORLD` says so,
    /// once for the job (the communicator's rank 0 logs it at
    /// `coll_ipmc_verbose` 1).
    fn tell(&mut self, comm: Comm, decided: Vec<(usize, Decision)>) {
        for (class, d) in decided {
            // Kept for later communicators of the same processes.
            if let Some(r) = &self.recalled {
                known::remember(&r.membership, class, &d);
            }
            debug!(
                "rank {} cid {}: {}: {} ({:?})",
                self.rank,
                self.cid,
                tuning::class_name(class),
                d.alg.name(),
                d.times_us
            );
            if d.alg == Algorithm::Multicast || d.lost_permille < LOSS_TO_REPORT {
                continue;
            }
            if self.rank == 0 {
                warn!(
                    "multicast on {} delivered at most {}% of any rank's data: broadcasts of up to \
                     {} bytes go to the replaced component",
                    comm.name(),
                    100 - d.lost_permille / 10,
                    tuning::class_max(class)
                );
            }
            tell_once(Notice::MulticastLost, ompi::world_rank() == 0, || {
                format!(
                    "ipmc: on communicator {}, multicast delivered only {}% of a broadcast's \
                     data to any rank, so Open MPI's broadcast serves it for now (ipmc \
                     measures again later). If the network should carry multicast, check \
                     that switches with IGMP snooping have a querier and that firewalls \
                     pass UDP to the groups of coll_ipmc_group_range.",
                    comm.name(),
                    100 - d.lost_permille / 10
                )
            });
        }
    }

    /// One `MPI_Ibcast` on this communicator: `Ok(true)` when ipmc serves
    /// it and completes the request `request()` makes, `Ok(false)` when the
    /// replaced component's nonblocking broadcast is to serve it. The
    /// choice is `MPI_Bcast`'s: ipmc serves the calls that multicast, go by
    /// its linear or chain algorithm or over two levels (once a blocking
    /// collective split them), in the communicator's background work; the
    /// others (Open MPI's binomial tree too) go to the replaced component
    /// (counted as its fallbacks; its messages have a tag of their own, so
    /// they never meet ipmc's).
    pub fn ibcast(&mut self, call: &BcastCall, request: impl FnOnce() -> Request) -> Result<bool> {
        let entered = Instant::now();
        self.moved = false;
        let bytes = call.bytes();
        if bytes == 0 {
            self.stats.empty += 1;
            request().complete(Ok(()));
            return Ok(true);
        }
        self.stats.nonblocking += 1;
        if self.broken {
            self.stats.record(Algorithm::Previous, bytes);
            return Ok(false);
        }
        self.finish_joining(call.comm())?;
        let class = (tuning::class_of(bytes), self.choose_now(bytes));
        let c = self.engine_call(Collective::Ibcast, class, self.tunes());
        let mut request = Some(request);
        let mut served = false;
        let alg = self.drive(call.comm(), c, entered, |m, part| {
            let Part::Run(alg) = part else {
                return Ok(None);
            };
            // Over two levels with their parts' `int` counts; else not on a
            // communicator of two levels: whole, the replaced component's is
            // the one that knows the nodes.
            let form = match (alg, &m.levels) {
                (alg, TwoLevels::Ready(levels))
                    if alg.over_levels() && c_int::try_from(bytes).is_ok() =>
                {
                    Some(IbcastForm::Levels(levels.bcast_parts(call.root())))
                }
                (_, TwoLevels::Pending(_) | TwoLevels::Ready(_)) => None,
                (Algorithm::Multicast, _) => Some(IbcastForm::Multicast),
                (Algorithm::Linear, _) => Some(IbcastForm::PointToPoint(Shape::Linear)),
                (Algorithm::Chain, _) => Some(IbcastForm::PointToPoint(Shape::Chain(
                    m.cfg.chain_segment_size,
                ))),
                _ => None,
            };
            let (Some(form), Some(request)) = (form, request.take()) else {
                m.moved = false;
                return Ok(None);
            };
            debug!(
                "rank {} cid {}: ibcast of {bytes} bytes from root {} with {}",
                m.rank,
                m.cid,
                call.root(),
                alg.name()
            );
            let at = Ranks {
                rank: m.rank,
                size: m.size,
                root: call.root(),
            };
            let (comm, message) = (call.comm(), call.keep_message());
            m.background.ibcast(Ibcast::new(
                comm,
                at,
                message,
                request(),
                form,
                m.cfg.background_limit,
            ));
            served = true;
            Ok(None)
        })?;
        // Nonblocking, the nodes' steps are Open MPI's: no rank copied from
        // its leader's memory.
        let alg = match alg {
            _ if !served => Algorithm::Previous,
            Algorithm::TwoLevelFromLeader => Algorithm::TwoLevel,
            Algorithm::TwoLevelPipelinedFromLeader => Algorithm::TwoLevelPipelined,
            alg => alg,
        };
        self.stats.record(alg, bytes);
        Ok(served)
    }

    /// The algorithm for a broadcast of `bytes` bytes now: multicast only
    /// where the group is agreed; two levels where they are split.
    fn choose_now(&self, bytes: usize) -> Algorithm {
        if !self.broken && self.over_levels() {
            return Algorithm::TwoLevel;
        }
        match self.choose(bytes) {
            Algorithm::Multicast if !self.multicast_ready() => Algorithm::Previous,
            alg => alg,
        }
    }

    /// Finishes the agreement on the group, if it still runs (waiting as
    /// long as it takes), and takes what it agreed.
    fn finish_joining(&mut self, comm: Comm) -> Result<()> {
        if !matches!(self.multicast, Multicast::Joining) {
            return Ok(());
        }
        // Its messages may be in flight.
        self.moved = true;
        let agreed = self.background.finish_joining();
        self.multicast = Multicast::Failed;
        let driver = match agreed {
            Ok(agreed) => self.joined(comm, agreed),
            Err(e) => {
                self.stats.setup = "failed";
                return Err(e);
            }
        };
        if let Some((driver, announce)) = driver {
            let fragment_size = driver.fragment_size();
            self.background.set_driver(driver);
            self.multicast = Multicast::Ready {
                fragment_size,
                announce: Box::new(announce),
            };
        }
        Ok(())
    }

    /// The driver of the group announced in `a`, which `socket` joined.
    fn driver_of(&self, socket: McastSocket, a: &Announce) -> Driver<McastSocket> {
        let cfg = &self.cfg;
        let seed = cfg.inject_seed as u64 ^ ((self.rank as u64) << 32) ^ u64::from(self.cid);
        Driver::new(
            socket,
            a.comm_id,
            a.fragment_size as usize,
            a.auth,
            Duration::from_micros(cfg.root_wait_time as u64),
            a.window,
            (cfg.inject_loss as u32, seed),
        )
    }

    /// At `disable`, the last work over: the group this communicator leaves
    /// for a later one of the same processes ([`parked`]), the one its
    /// broadcasts used, or the one its agreement ended on where no call
    /// came to take it on (quietly: nothing used it).
    fn group_to_keep(&mut self) -> Option<parked::Group> {
        let (driver, announce) = match std::mem::replace(&mut self.multicast, Multicast::Failed) {
            Multicast::Joining => {
                let agreed = self.background.finish_joining().ok().flatten()?;
                match (agreed.joined, agreed.local, agreed.announce) {
                    (setup::Joined::Kept, None, Some(a)) => (self.take_offered(&a)?.driver, a),
                    (setup::Joined::All, Some(Ok(socket)), Some(a)) => {
                        (self.driver_of(socket, &a), a)
                    }
                    _ => return None,
                }
            }
            Multicast::Ready { announce, .. } => (self.background.take_driver()?, *announce),
            Multicast::NotSetUp | Multicast::Failed => return None,
        };
        let cfg = self.cfg.clone();
        Some(parked::Group {
            announce,
            driver,
            cfg,
        })
    }

    /// The group this rank offered, which every rank takes over as `a`
    /// announced it.
    fn take_offered(&mut self, a: &Announce) -> Option<parked::Group> {
        self.offered
            .take()
            .filter(|g| g.kept().id == a.kept)
            .map(parked::Offered::into_inner)
    }

    /// Parks again the group this rank offered, where the ranks did not
    /// take it over.
    fn offer_back(&mut self, comm: Comm) {
        if let (Some(group), Some(owners)) = (self.offered.take(), self.level_owners(comm)) {
            parked::park_group_again(owners, group);
        }
    }

    /// Runs the linear or chain algorithm on the message bytes.
    fn run(&self, alg: Algorithm, call: &mut BcastCall, bytes: usize) -> Result<()> {
        let (comm, root) = (call.comm(), call.root());
        call.on_message_bytes(bytes, self.rank == call.root(), |buf| {
            let mut t = PmlTransport::new(comm, self.rank, self.size, buf);
            self.run_on(alg, &mut t, root)
        })
    }

    fn run_on<T: Transport>(&self, alg: Algorithm, t: &mut T, root: usize) -> Result<()> {
        match alg {
            Algorithm::Linear => linear::bcast(t, root),
            Algorithm::Chain => chain::bcast(t, root, self.cfg.chain_segment_size),
            Algorithm::Multicast
            | Algorithm::Previous
            | Algorithm::Binomial
            | Algorithm::Binary
            | Algorithm::SplitBinary
            | Algorithm::ScatterAllgather
            | Algorithm::TwoLevel
            | Algorithm::TwoLevelPipelined
            | Algorithm::TwoLevelFromLeader
            | Algorithm::TwoLevelPipelinedFromLeader => Err(Error::Unavailable),
        }
    }

    /// Splits the communicator into its two levels, at its first broadcast
    /// (collective: every rank is in that call), where it is the `first`
    /// split taking on what earlier communicators of the same processes
    /// left. A failed split leaves the communicator on one level.
    fn split_levels(&mut self, comm: Comm, first: bool) -> Result<()> {
        let TwoLevels::Pending(layout) = &self.levels else {
            return Ok(());
        };
        let layout = layout.clone();
        let mut agreed = if first {
            match self.agree_over_levels(comm) {
                Ok(agreed) => Some(agreed),
                Err(rc) => {
                    self.levels = TwoLevels::Failed;
                    return Err(rc);
                }
            }
        } else {
            None
        };
        let segment = Wanted::from_param(self.cfg.node_segment);
        let split = match agreed.as_mut().and_then(|a| a.levels.take()) {
            Some(levels) => {
                info!(
                    "rank {} on {}: the levels of an earlier communicator of the same processes \
                     taken over",
                    self.rank,
                    comm.name()
                );
                levels.rename(&comm.name());
                self.levels_taken_over = true;
                Ok(levels)
            }
            None => Levels::split(comm, layout, self.rank, segment).map(Box::new),
        };
        match split {
            Ok(levels) => {
                // At the first split, before any call was measured: the
                // same on every rank.
                if levels.either_way && self.choice.offer_from_leader() {
                    info!(
                        "rank {} on {}: the levels are measured with the nodes' ranks copying \
                         from their leader's memory and through the shared segment",
                        self.rank,
                        comm.name()
                    );
                }
                let either_way = levels.either_way;
                self.levels = TwoLevels::Ready(levels);
                if let Some(agreed) = agreed {
                    self.take_on_over_levels(agreed, either_way);
                }
                Ok(())
            }
            Err(rc) => {
                warn!(
                    "rank {}: splitting {} into node leaders and nodes failed ({rc})",
                    self.rank,
                    comm.name()
                );
                self.levels = TwoLevels::Failed;
                Err(rc)
            }
        }
    }

    /// The broadcast over the two levels on the message's bytes, the nodes
    /// that may copy either way copying `from_leader` or through the slots;
    /// `pipelined` where the parts' counts fit `int`s (a larger message
    /// goes whole).
    fn run_levels(
        &mut self,
        call: &mut BcastCall,
        bytes: usize,
        from_leader: bool,
        pipelined: bool,
    ) -> Result<()> {
        let TwoLevels::Ready(levels) = &mut self.levels else {
            return Err(Error::Unavailable);
        };
        let pipelined = pipelined && c_int::try_from(bytes).is_ok();
        let root = call.root();
        let mut handed = false;
        call.on_message_bytes(bytes, self.rank == root, |buf| {
            handed = if pipelined {
                levels.bcast_pipelined(buf, root, LEVEL_SEGMENT, from_leader)?
            } else {
                levels.bcast(buf, root, from_leader)?
            };
            Ok(())
        })?;
        if handed {
            self.stats.handovers += 1;
        }
        self.stats.segment_bytes += levels.take_segment_bytes();
        Ok(())
    }

    /// The two-stage broadcast on the message bytes.
    fn run_multicast(&mut self, call: &mut BcastCall, bytes: usize) -> Result<()> {
        if !self.multicast_ready() {
            return Err(Error::Unavailable);
        }
        let background = &mut self.background;
        let at = Ranks {
            rank: self.rank,
            size: self.size,
            root: call.root(),
        };
        let comm = call.comm();
        let stats = &mut self.stats.datagrams;
        call.on_message_bytes(bytes, self.rank == call.root(), |buf| {
            background.bcast(comm, at, buf, stats)
        })
    }

    /// Starts the agreement on the communicator's multicast group with every
    /// other rank (see [`setup`]) in the background.
    fn start_setup(&mut self, comm: Comm) -> Result<()> {
        let cfg = self.cfg.clone();
        let loopback = comm.has_local_peer();
        // One listing of the interfaces serves the agreement: the facts told
        // to rank 0 and the sockets opened for its announcements.
        let addrs = os::interface_addresses();
        let mut facts = rank_facts(&self.cfg, addrs.as_deref().ok());
        // What earlier communicators of the same processes measured and
        // decided, which this one takes on where every rank holds it alike.
        self.recalled = self.recall(comm, None);
        if let Some(r) = &self.recalled {
            facts.stated = r.stated();
        }
        // The group an earlier communicator of the same processes left,
        // which every rank takes over where every rank offers the same.
        // One kept under other parameters of this process's closes.
        self.offered = self
            .level_owners(comm)
            .and_then(|owners| parked::take_out_group(&owners))
            .filter(|g| g.cfg == self.cfg);
        facts.kept = self.offered.as_ref().map(|g| g.kept());
        let open: Open = Box::new(move |a: &Announce| open_socket(&cfg, loopback, a, &addrs));
        let joining = Joining::start(comm, self.cfg.clone(), facts, open)?;
        self.background.join(joining);
        self.multicast = Multicast::Joining;
        Ok(())
    }

    /// What the agreement on the group leaves this rank with: the driver of
    /// its group, or none if any rank failed, and the replaced broadcast
    /// serves the calls that would multicast (`agreed` is `None`: the
    /// agreement was lost to an error).
    fn joined(
        &mut self,
        comm: Comm,
        agreed: Option<setup::Agreed<McastSocket>>,
    ) -> Option<(Driver<McastSocket>, Announce)> {
        let Some(setup::Agreed {
            announce,
            local,
            joined,
            failures,
        }) = agreed
        else {
            self.stats.setup = "failed";
            self.recalled = None;
            self.offer_back(comm);
            return None;
        };
        let name = comm.name();
        if let Some(Err(why)) = &local {
            warn!("rank {} cannot multicast on {name}: {why}", self.rank);
        }
        if let setup::Joined::Failed { .. } = joined {
            // Rank 0 heard every rank's reason and tells them all, once: the
            // first failing communicator (usually MPI_COMM_WORLD) holds the
            // reason of most processes, so the others stay silent.
            tell_once(Notice::SetupFailed, self.rank == 0, || {
                setup::failure_message(&name, &failures, |r| comm.member_host(r))
            });
        }
        if joined != setup::Joined::Kept {
            self.offer_back(comm);
        }
        match (joined, local, announce) {
            (setup::Joined::Kept, None, Some(a)) => {
                let group = self.take_offered(&a)?;
                info!(
                    "rank {} multicasts on {name} (cid {}) with group {}, taken over from an \
                     earlier communicator of the same processes",
                    self.rank, self.cid, a.group
                );
                self.stats.setup = "ok";
                self.stats.taken_over = 1;
                self.inherit(&a.inherited);
                Some((group.driver, a))
            }
            (setup::Joined::All, Some(Ok(socket)), Some(a)) => {
                info!(
                    "rank {} multicasts on {name} (cid {}) with group {}, receive buffer {} bytes",
                    self.rank,
                    self.cid,
                    a.group,
                    socket.granted_rcvbuf()
                );
                self.stats.setup = "ok";
                self.inherit(&a.inherited);
                let cfg = &self.cfg;
                // How datagrams move, once per job: by the process of rank 0
                // of MPI_COMM_WORLD, for the first group it joins.
                if cfg.verbose >= 1 {
                    tell_once(Notice::DatagramPath, ompi::world_rank() == 0, || {
                        let wide = datagram::polyval_width()
                            .filter(|_| matches!(a.auth, datagram::Auth::Polyval(_)))
                            .map(|bits| {
                                format!(
                                    " (here POLYVAL 16 blocks per reduction, {bits} bits per \
                                     multiplication)"
                                )
                            });
                        format!(
                            "ipmc: multicast on {name}: fragments of {} bytes (datagrams fit the \
                         smallest MTU of the ranks' interfaces), {} on each{}, {}",
                            a.fragment_size,
                            a.auth.describe(),
                            wide.unwrap_or_default(),
                            socket.path()
                        )
                    });
                }
                Some((self.driver_of(socket, &a), a))
            }
            (joined, _, _) => {
                // Its calls that would multicast go to the replaced
                // broadcast: what it measures is not a group's.
                self.recalled = None;
                let first = match joined {
                    setup::Joined::Failed { first } => first,
                    setup::Joined::All | setup::Joined::Kept => self.rank,
                };
                warn!(
                    "rank {} falls back to the replaced broadcast on {name}: rank {first} \
                     could not set up multicast",
                    self.rank
                );
                self.stats.setup = "failed";
                None
            }
        }
    }
}

/// A part of a call that its own code does for the engine's call.
enum Part {
    Run(Algorithm),
    AnswerRoot,
}

/// The measured choice's view of a communicator's background: votes go
/// there where the ranks may agree, and the answers to this rank's calls as
/// a root come from there.
struct OmpiBallots<'a> {
    background: &'a mut Background,
    comm: Comm,
    /// Whether the ranks may agree here (see `Module::votes_here`).
    votes: bool,
}

impl Ballots for OmpiBallots<'_> {
    fn vote(&mut self, k: usize, mine: Vec<u32>) {
        if self.votes {
            self.background.vote(self.comm, k, mine);
        }
    }

    fn take_votes(&mut self) -> Vec<(usize, Vec<u32>)> {
        self.background.take_votes()
    }

    fn take_answered(&mut self) -> Result<Vec<(u64, Duration)>> {
        self.background.take_answered()
    }

    fn only_multicast_queued(&self) -> bool {
        self.background.holds_only_multicast()
    }
}

/// Opens and joins this rank's socket for the announced group.
/// `loopback`: whether another rank of the communicator runs on this node.
fn open_socket(
    cfg: &Config,
    loopback: bool,
    a: &Announce,
    addrs: &std::io::Result<Vec<os::IfAddr>>,
) -> Result<McastSocket, OpenError> {
    let include = IfList::parse(&cfg.if_include)?;
    let exclude = IfList::parse(&cfg.if_exclude)?;
    let addrs = addrs
        .as_deref()
        .map_err(|e| format!("listing interfaces: {e}"))?;
    let v6 = a.group.is_ipv6();
    let mut iface = interfaces::choose(addrs, &include, &exclude, v6).map_err(|e| {
        if v6 || interfaces::choose(addrs, &include, &exclude, true).is_err() {
            return e;
        }
        // An IPv4 range was set, and this host has only IPv6.
        format!(
            "{e}; the group {} is IPv4, and this host has only IPv6: where every host \
             has IPv6, an IPv6 group range works, for example coll_ipmc_group_range={}",
            a.group.ip(),
            crate::group::groups::IPV6_DEFAULT_GROUPS
        )
    })?;
    if let IpAddr::V6(group) = a.group.ip() {
        iface.addr = IpAddr::V6(ipv6_source(&iface, group)?);
    }
    let opts = mcast_socket::Options {
        ttl: cfg.ttl as u32,
        loopback,
        rcvbuf: cfg.rcvbuf,
        path: cfg.datagram_path(),
        datagram_len: a.fragment_size as usize + datagram::Protection::new(a.auth).overhead(),
    };
    McastSocket::open(a.group, &iface, opts)
}

/// What this rank tells rank 0 before the draw: whether the interface ipmc
/// would choose for IPv4 and for IPv6 groups exists, i.e. has an address of
/// that family; the smallest MTU of those interfaces (`u32::MAX` when none
/// tells); the receive buffer its socket will get.
fn rank_facts(cfg: &Config, addrs: Option<&[os::IfAddr]>) -> setup::Facts {
    let (Ok(include), Ok(exclude), Some(addrs)) = (
        IfList::parse(&cfg.if_include),
        IfList::parse(&cfg.if_exclude),
        addrs,
    ) else {
        return setup::Facts::UNKNOWN; // no say; opening will tell
    };
    let chosen = |v6| interfaces::choose(addrs, &include, &exclude, v6).ok();
    let (v4, v6) = (chosen(false), chosen(true));
    let mtu = [&v4, &v6]
        .into_iter()
        .flatten()
        .filter_map(|c| interfaces::mtu(&c.name))
        .min()
        .unwrap_or(u32::MAX);
    let rcvbuf = mcast_socket::receive_buffer(cfg.rcvbuf)
        .map_or(u32::MAX, |b| u32::try_from(b).unwrap_or(u32::MAX));
    setup::Facts {
        families: (v4.is_some(), v6.is_some()),
        mtu,
        rcvbuf,
        stated: Stated::NONE,
        kept: None,
    }
}

/// How long setup waits for duplicate address detection to clear the
/// address it needs (Linux takes about a second after a link comes up).
const DAD_WAIT: Duration = Duration::from_secs(3);

/// The address to send to an IPv6 group from, waiting for one that is still
/// in duplicate address detection.
fn ipv6_source(iface: &interfaces::Chosen, group: Ipv6Addr) -> Result<Ipv6Addr, String> {
    let started = Instant::now();
    loop {
        // Without IPv6 the file does not exist: no address, and the error says so.
        let text = std::fs::read_to_string("/proc/net/if_inet6").unwrap_or_default();
        match interfaces::ipv6_source(iface, &interfaces::parse_if_inet6(&text), group) {
            Ok(a) => return Ok(a),
            Err(e) if e.pending && started.elapsed() < DAD_WAIT => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e.why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_disagreement_is_found_and_named() {
        use Published::*;
        assert_eq!(disagreement(&[Digest(5), Digest(5), Digest(5)]), None);
        assert_eq!(disagreement(&[Absent, Disabled]), None, "nobody runs ipmc");
        let d = disagreement(&[Absent, Digest(5), Digest(6), Disabled, Digest(5)]).unwrap();
        assert_eq!(d.reference, 1);
        assert_eq!(d.members, vec![(0, Absent), (2, Digest(6)), (3, Disabled)]);
        let text = d.message("MPI_COMM_WORLD", |r| format!("h{r}"));
        assert!(
            text.contains("rank 0 on host h0: ipmc is not installed"),
            "{text}"
        );
        assert!(text.contains("rank 2 on host h2: its coll_ipmc parameters differ from those of rank 1 on host h1"), "{text}");
        assert!(
            text.contains("rank 3 on host h3: ipmc is disabled"),
            "{text}"
        );
        assert!(!text.contains("rank 4"), "{text}");
        let many: Vec<Published> = (0..20)
            .map(|i| if i == 0 { Digest(1) } else { Absent })
            .collect();
        let text = disagreement(&many).unwrap().message("c", |r| r.to_string());
        assert!(text.contains("and 11 more ranks"), "{text}");
        assert_eq!(Published::from_modex(None), Absent);
        assert_eq!(Published::from_modex(Some(0)), Disabled);
        assert_eq!(Published::from_modex(Some(7)), Digest(7));
    }

    #[test]
    fn a_module_broken_by_a_panic_hands_every_broadcast_to_the_replaced_one() {
        // Never dropped: the drop of a multicast group needs the C glue,
        // which unit tests do not link.
        let module = || {
            std::mem::ManuallyDrop::new(Module::with(
                Config::default(),
                0,
                8,
                1,
                Nodes::one_per_rank(8),
            ))
        };
        let mut m = module();
        assert_eq!(m.choose(4096), Algorithm::Multicast);
        assert!(m.poison(), "no message moved: the call may be handed over");
        for bytes in [1, 100, 1 << 20, 1 << 30] {
            assert_eq!(m.choose(bytes), Algorithm::Previous, "{bytes}");
        }
        let mut m = module();
        m.moved = true;
        assert!(!m.poison(), "messages moved: the call fails instead");
        assert_eq!(m.choose(100), Algorithm::Previous);
    }

    #[test]
    fn declines_what_it_cannot_serve() {
        let mut cfg = Config::default();
        assert_eq!(decline_reason(&cfg, false, 2), None);
        assert!(decline_reason(&cfg, true, 8).is_some());
        assert!(decline_reason(&cfg, false, 1).is_some());
        cfg.priority = -1;
        assert!(decline_reason(&cfg, false, 8).is_some());
    }

    #[test]
    fn declines_a_single_node_unless_an_algorithm_of_its_own_is_forced() {
        let mut cfg = Config::default();
        let one = Nodes::from_hosts(["h"; 8]);
        let two = Nodes::from_hosts(["h", "h", "g"]);
        assert!(decline_node_local(&cfg, &one).is_some());
        assert_eq!(decline_node_local(&cfg, &two), None);
        for (code, declined) in [(1, false), (2, false), (3, false), (4, true)] {
            cfg.bcast_algorithm = code;
            assert_eq!(decline_node_local(&cfg, &one).is_some(), declined, "{code}");
        }
    }

    #[test]
    fn leaves_a_communicator_to_the_components_its_creator_chose() {
        let declines = |han, p| decline_by_creator(han, p).is_some();
        assert!(!declines(false, None));
        assert!(declines(true, None), "a level of han's");
        assert!(declines(true, Some("^han")), "han's levels in Open MPI 4.1");
        // han's other parts: one component preferred, han excluded.
        for p in ["tuned,^han", "sm,^han", "libnbc,^han", "adapt,^han", "han"] {
            assert!(declines(false, Some(p)), "{p}");
        }
        for p in [
            "ipmc",
            "tuned, ipmc",
            "^han",
            "^han,tuned",
            "^ipmc",
            "",
            " , ",
        ] {
            assert!(!declines(false, Some(p)), "{p:?}");
        }
    }
}
