//! The state ipmc keeps for one communicator, and its broadcast entry point.

use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

use log::{debug, info, warn};

use crate::algorithms::nonblocking::Shape;
use crate::algorithms::{barrier, chain, linear};
use crate::base::error::{Error, Result};
use crate::base::params::Config;
use crate::base::transport::Transport;
use crate::component::background::{Background, Ibcast, Joining, Open};
use crate::component::levels::{Layout, Levels};
use crate::component::logging::{tell_once, Notice};
use crate::component::nodes::Nodes;
use crate::component::stats::Stats;
use crate::driver::multicast::{Driver, Ranks};
use crate::engine::algorithm::Algorithm;
use crate::engine::choice::{lost_permille, Ballots, Choice, Next, Timed};
use crate::engine::tuning::{self, Sample, Tuner};
use crate::group::setup::{self, Announce};
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

/// Why ipmc declines a communicator whose ranks all share one node: Open
/// MPI's own broadcast moves node-local data through shared memory, and no
/// datagram should leave a node for node-local work. A forced algorithm of
/// ipmc's (`coll_ipmc_bcast_algorithm`) still serves it.
pub fn decline_node_local(cfg: &Config, nodes: &Nodes) -> Option<&'static str> {
    (nodes.is_single() && !cfg.forces_own_algorithm())
        .then_some("its processes share one node, where Open MPI's own broadcast is faster")
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
    Ready(Levels),
    /// The split failed: one level from now on.
    Failed,
}

/// Where a communicator stands with its multicast group.
enum Multicast {
    /// No agreement on a group was started: no call on the communicator
    /// multicasts.
    NotSetUp,
    /// The agreement on the group, started when the communicator was
    /// created, goes on in the background; the next broadcast finishes it.
    Joining,
    /// The group is agreed: the background has its driver.
    Ready,
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
    /// The automatic choice's measurements and decisions.
    choice: Choice,
    /// Two levels, where nodes hold several ranks.
    levels: TwoLevels,
}

impl Module {
    /// The module of `comm`, whose ranks spread over `nodes`; a `layout`
    /// whose nodes hold several ranks makes its broadcasts run over two
    /// levels (unless one of Open MPI's broadcasts is forced).
    pub fn new(cfg: Config, comm: Comm, nodes: Nodes, layout: Option<Layout>) -> Self {
        let mut m = Self::with(cfg, comm.rank(), comm.size(), comm.cid(), nodes);
        if let Some(layout) = layout.filter(|l| m.cfg.takes_two_levels() && l.has_two_levels()) {
            m.levels = TwoLevels::Pending(layout);
            let tuner = Tuner::over_two_levels(m.cfg.tune_calls, m.rank, m.cfg.inject_timing);
            m.choice = Choice::new(tuner);
        }
        m
    }

    fn with(cfg: Config, rank: usize, size: usize, cid: u32, nodes: Nodes) -> Self {
        let limit = cfg.background_limit;
        Module {
            levels: TwoLevels::No,
            choice: Choice::new(Tuner::new(cfg.tune_calls, rank, cfg.inject_timing)),
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
        if self.cfg.verbose >= 1 && self.rank == 0 && !self.reported {
            let table = tuning::table(self.choice.tuner());
            if !table.is_empty() {
                ompi::print_line(&format!(
                    "ipmc: the broadcasts and barriers of communicator {} ({} nodes, at most {} ranks on one) \
                     as measured and agreed:{table}",
                    comm.name(),
                    self.nodes.count,
                    self.nodes.max_ranks
                ));
            }
        }
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
        self.reported = true;
        // An agreement on the group holds a reference on the communicator:
        // it ended before the communicator could be freed, and what it
        // agreed goes unused. The neighbours may still wait for messages of
        // the last broadcasts (unless a panic left their state in doubt).
        if !self.broken {
            // The last broadcasts' work first (see `take_answered`).
            if let Err(e) = self.background.finish() {
                warn!(
                    "rank {}: the last broadcast on {} failed: {e}",
                    self.rank,
                    comm.name()
                );
            } else if let Err(e) = self.background.take_answered(true) {
                // Every rank sent its answers within its broadcasts; a
                // receive left behind would meet a later communicator's.
                warn!("rank {}: answers on {} failed: {e}", self.rank, comm.name());
            }
        }
        // Leaves the group and closes the sockets.
        self.background = Background::new(self.cfg.background_limit);
        self.multicast = Multicast::Failed;
        if let TwoLevels::Ready(levels) = std::mem::replace(&mut self.levels, TwoLevels::Failed) {
            levels.free();
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
        self.moved = false;
        let bytes = call.bytes();
        if bytes == 0 {
            self.stats.empty += 1;
            return Ok(());
        }
        if !self.broken && matches!(self.levels, TwoLevels::Pending(_)) {
            self.moved = true;
            self.split_levels(call.comm())?;
        }
        // Every algorithm (and the replaced component's) uses the broadcast
        // tag: the agreement's and the votes' messages, and the frames of the
        // multicast broadcasts before, must not meet this call's, unless it
        // goes alongside them (`Algorithm::goes_alongside`; a nonblocking
        // broadcast in the background leaves multicast no room either).
        self.catch_up(call.comm())?;
        let (alg, sample) = self.plan(call.comm(), bytes)?;
        let queues = alg.goes_alongside()
            && (alg == Algorithm::TwoLevel || self.background.holds_only_multicast());
        if !self.broken && !queues {
            self.background.finish()?;
        }
        debug!(
            "rank {} cid {}: bcast of {bytes} bytes from root {} with {}",
            self.rank,
            self.cid,
            call.root(),
            alg.name()
        );
        self.moved = true;
        // Clock and counters only for a measured call.
        let measuring = sample.map(|sample| (sample, entered, self.bytes_by()));
        match alg {
            Algorithm::Previous => call.previous()?,
            Algorithm::Binomial => call.binomial()?,
            Algorithm::Binary => call.binary()?,
            Algorithm::Multicast => self.run_multicast(call, bytes)?,
            Algorithm::TwoLevel => self.run_levels(call)?,
            _ => self.run(alg, call, bytes)?,
        }
        self.stats.record(alg, bytes);
        if let Some((sample, start, (multicast, chain))) = measuring {
            let (multicast, chain) = (self.bytes_by().0 - multicast, self.bytes_by().1 - chain);
            let lost = lost_permille(bytes, self.cfg.fragment_size, multicast, chain);
            // Short messages are timed at the root, until every rank has
            // the message (see `tuning::SHORT_UP_TO`).
            if !sample.timed_at_root() {
                self.choice
                    .record(sample, Timed::Here(start.elapsed()), lost);
            } else if call.root() == self.rank {
                self.time_at_root(call.comm(), sample, start)?;
            } else {
                call.answer_root()?;
                self.choice.record(sample, Timed::AtRoot, lost);
            }
        }
        if self.tunes() {
            self.vote_if_due(call.comm(), tuning::class_of(bytes))?;
        }
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
        if !self.broken && matches!(self.levels, TwoLevels::Pending(_)) {
            self.moved = true;
            self.split_levels(comm)?;
        }
        self.catch_up(comm)?;
        let fixed = if !self.cfg.forces_barrier() {
            Algorithm::Previous
        } else if self.over_levels() {
            Algorithm::TwoLevel
        } else {
            Algorithm::Multicast
        };
        let tunes = self.cfg.tunes_barrier();
        let (alg, sample) = self.plan_of(comm, tuning::BARRIER, tunes, fixed)?;
        // The release is a multicast broadcast, which may begin while the
        // broadcasts before it still run their chains; the arrivals and the
        // replaced barrier have a tag of their own.
        if alg == Algorithm::Multicast && !self.background.holds_only_multicast() {
            self.background.finish()?;
        }
        debug!(
            "rank {} cid {}: barrier with {}",
            self.rank,
            self.cid,
            alg.name()
        );
        self.moved = true;
        match alg {
            Algorithm::Multicast => self.run_barrier(comm)?,
            Algorithm::Linear => call.linear()?,
            Algorithm::TwoLevel => match &self.levels {
                TwoLevels::Ready(levels) => levels.barrier()?,
                _ => return Err(Error::Unavailable),
            },
            _ => call.previous()?,
        }
        self.stats.barriers.record(alg);
        if let Some(sample) = sample {
            self.choice
                .record(sample, Timed::Here(entered.elapsed()), None);
        }
        if !self.broken && tunes && self.votes_here() {
            self.vote_if_due(comm, tuning::BARRIER)?;
        }
        Ok(())
    }

    /// One `MPI_Allgather` or `MPI_Allgatherv` on this communicator.
    /// Measured per block size as the barrier is (an allgatherv's by its
    /// mean block); over two levels, or where the group is not agreed, the
    /// replaced component serves it.
    pub fn allgather(&mut self, call: &mut AllgatherCall) -> Result<()> {
        let entered = Instant::now();
        self.moved = false;
        let comm = call.comm();
        let blocks: Vec<usize> = (0..self.size).map(|i| call.block_bytes(i)).collect();
        let total: usize = blocks.iter().sum();
        let block = total.div_ceil(self.size);
        self.catch_up(comm)?;
        let class = tuning::allgather_class(block);
        let one_level = matches!(self.levels, TwoLevels::No | TwoLevels::Failed);
        let tunes = self.cfg.tunes_allgather() && one_level && total > 0;
        let fixed = if self.cfg.forces_allgather() && one_level && total > 0 {
            Algorithm::Multicast
        } else {
            Algorithm::Previous
        };
        let (alg, sample) = self.plan_of(comm, class, tunes, fixed)?;
        if alg == Algorithm::Multicast && !self.background.holds_only_multicast() {
            self.background.finish()?;
        }
        debug!(
            "rank {} cid {}: {} of {total} bytes with {}",
            self.rank,
            self.cid,
            if call.varies() {
                "allgatherv"
            } else {
                "allgather"
            },
            alg.name()
        );
        self.moved = true;
        let tally = match alg {
            Algorithm::Multicast => {
                self.run_allgather(call, &blocks)?;
                &mut self.stats.allgather_multicast
            }
            Algorithm::Chain => {
                call.ring()?;
                &mut self.stats.allgather_ring
            }
            _ => {
                call.previous()?;
                &mut self.stats.allgather_previous
            }
        };
        tally.calls += 1;
        tally.bytes += total as u64;
        if let Some(sample) = sample {
            self.choice
                .record(sample, Timed::Here(entered.elapsed()), None);
        }
        if !self.broken && tunes && self.votes_here() {
            self.vote_if_due(comm, class)?;
        }
        Ok(())
    }

    /// What every call takes in first: the agreement on the group finished,
    /// the answers that timed measured calls, the votes that ended. A broken
    /// module's background work is left alone (see `poison`).
    fn catch_up(&mut self, comm: Comm) -> Result<()> {
        if self.broken {
            return Ok(());
        }
        self.finish_joining(comm)?;
        let (choice, mut io) = self.ballots(comm, false);
        choice.take_answers(&mut io)?;
        self.settle_votes(comm);
        Ok(())
    }

    /// The algorithm of a barrier or allgather of class `class`, and what to
    /// measure of it: measured where `tunes` and the ranks can agree, else
    /// `fixed`.
    fn plan_of(
        &mut self,
        comm: Comm,
        class: usize,
        tunes: bool,
        fixed: Algorithm,
    ) -> Result<(Algorithm, Option<Sample>)> {
        if self.broken {
            return Ok((Algorithm::Previous, None));
        }
        if tunes && self.votes_here() {
            let plan = self.measured(comm, class, fixed)?;
            return Ok(self.servable(plan));
        }
        Ok(self.servable((fixed, None)))
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

    /// A plan, or the replaced component where ipmc's multicast cannot run
    /// (no group agreed: every rank knows it alike).
    fn servable(&self, plan: (Algorithm, Option<Sample>)) -> (Algorithm, Option<Sample>) {
        match plan {
            (Algorithm::Multicast, s) if !matches!(self.multicast, Multicast::Ready) => {
                (Algorithm::Previous, s)
            }
            plan => plan,
        }
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

    /// The algorithm for a blocking broadcast of `bytes` bytes, and what to
    /// measure of it when the automatic choice measures its class.
    fn plan(&mut self, comm: Comm, bytes: usize) -> Result<(Algorithm, Option<Sample>)> {
        let fixed = self.choose_now(bytes);
        if self.tunes() {
            return self.measured(comm, tuning::class_of(bytes), fixed);
        }
        Ok((fixed, None))
    }

    /// The measured choice's plan of a call of class `class`, waiting for
    /// what it needs first: the end of a vote whose decision the call takes
    /// (the background's work finished), the answers to this rank's calls as
    /// a root that its part in a vote needs.
    fn measured(
        &mut self,
        comm: Comm,
        class: usize,
        fixed: Algorithm,
    ) -> Result<(Algorithm, Option<Sample>)> {
        // Each wait at most once: after it, every vote in the background
        // ended and every answer arrived, and nothing more is coming.
        let (mut finished, mut answered) = (false, false);
        loop {
            let (choice, mut io) = self.ballots(comm, false);
            match choice.plan(class, fixed, &mut io)? {
                Next::Run(alg, sample) => return Ok((alg, sample)),
                Next::AwaitVote if !finished => {
                    self.background.finish()?;
                    self.settle_votes(comm);
                    finished = true;
                }
                Next::AwaitAnswers if !answered => {
                    let (choice, mut io) = self.ballots(comm, true);
                    choice.take_answers(&mut io)?;
                    answered = true;
                }
                Next::AwaitVote | Next::AwaitAnswers => return Ok((fixed, None)),
            }
        }
    }

    /// The measured choice, and its view of this communicator's background
    /// (`wait`: for every answer to this rank's calls as a root).
    fn ballots(&mut self, comm: Comm, wait: bool) -> (&mut Choice, OmpiBallots<'_>) {
        let votes = self.votes_here();
        let io = OmpiBallots {
            background: &mut self.background,
            comm,
            votes,
            wait,
        };
        (&mut self.choice, io)
    }

    /// Whether the automatic choice measures its candidates here: where
    /// multicast is one of them, or two levels.
    fn tunes(&self) -> bool {
        !self.broken && self.cfg.tunes() && self.votes_here()
    }

    /// Whether this communicator's ranks may agree on measurements: where
    /// the group is agreed, or the broadcasts run over two levels.
    fn votes_here(&self) -> bool {
        matches!(self.multicast, Multicast::Ready) || self.over_levels()
    }

    fn over_levels(&self) -> bool {
        matches!(self.levels, TwoLevels::Ready(_))
    }

    /// Times a measured call of a short message at its root (this rank),
    /// which began at `start`: until every other rank answered that it has
    /// the message, for at most [`tuning::ANSWER_WAIT`] from the call's
    /// start. Waiting in the call, the root sees each answer when it
    /// arrives; out of MPI (computing, or sleeping before its next call) it
    /// would see them only when it next drives the progress engine, which
    /// would make a candidate whose root returns early (multicast's) look
    /// slow. Answers that take longer are noted in the background, so the
    /// root never waits long for a rank that has not entered the call.
    fn time_at_root(&mut self, comm: Comm, sample: Sample, start: Instant) -> Result<()> {
        let mut answers = Answers::expect(comm, self.rank)?;
        loop {
            if answers.test()? {
                self.choice
                    .record(sample, Timed::Here(start.elapsed()), None);
                return Ok(());
            }
            if start.elapsed() >= tuning::ANSWER_WAIT {
                break;
            }
        }
        let ticket = self.background.expect_answers(comm, start, answers)?;
        self.choice.time_at_root(ticket, sample);
        Ok(())
    }

    /// After a call of class `class` (a size class, the barrier's or an
    /// allgather's): this rank's part of its class's vote goes to the
    /// background when it is due, after the call's own work, once this
    /// rank's answers as a root are in.
    fn vote_if_due(&mut self, comm: Comm, class: usize) -> Result<()> {
        let (choice, mut io) = self.ballots(comm, false);
        if !choice.after_call(class, &mut io)? {
            // Every answer arrived after this wait.
            let (choice, mut io) = self.ballots(comm, true);
            choice.take_answers(&mut io)?;
            choice.after_call(class, &mut io)?;
        }
        Ok(())
    }

    /// Takes the decisions of the votes that ended. A class that gave up
    /// multicast because it lost most of its data is the user's business:
    /// the process of rank 0 in `MPI_COMM_WORLD` says so, once for the job
    /// (the communicator's rank 0 logs it at `coll_ipmc_verbose` 1).
    fn settle_votes(&mut self, comm: Comm) {
        if !self.votes_here() {
            return;
        }
        let (choice, mut io) = self.ballots(comm, false);
        for (class, d) in choice.settle(&mut io) {
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
    /// choice is `MPI_Bcast`'s: ipmc serves the calls that multicast or go by
    /// its linear or chain algorithm, in the communicator's background work;
    /// the others (Open MPI's binomial tree too) go to the replaced
    /// component (counted as its fallbacks; its messages have a tag of their
    /// own, so they never meet ipmc's).
    pub fn ibcast(&mut self, call: &BcastCall, request: impl FnOnce() -> Request) -> Result<bool> {
        self.moved = false;
        let bytes = call.bytes();
        if bytes == 0 {
            self.stats.empty += 1;
            request().complete(Ok(()));
            return Ok(true);
        }
        if !self.broken {
            self.finish_joining(call.comm())?;
            // The class's decision is read only where every rank takes it.
            if self.tunes() && self.choice.tuner().must_await_vote(bytes) {
                self.vote_if_due(call.comm(), tuning::class_of(bytes))?;
                self.background.finish()?;
            }
            self.settle_votes(call.comm());
        }
        if matches!(self.levels, TwoLevels::Pending(_) | TwoLevels::Ready(_)) {
            // Not yet over two levels: whole, the replaced component's is
            // the one that knows the nodes.
            self.stats.nonblocking += 1;
            self.stats.record(Algorithm::Previous, bytes);
            return Ok(false);
        }
        let agreed = if self.tunes() {
            self.choice.tuner().current(bytes)
        } else {
            None
        };
        let alg = agreed.unwrap_or_else(|| self.choose_now(bytes));
        self.stats.nonblocking += 1;
        let how = match alg {
            Algorithm::Multicast if matches!(self.multicast, Multicast::Ready) => None,
            Algorithm::Linear => Some(Shape::Linear),
            Algorithm::Chain => Some(Shape::Chain(self.cfg.chain_segment_size)),
            _ => {
                self.stats.record(Algorithm::Previous, bytes);
                return Ok(false);
            }
        };
        debug!(
            "rank {} cid {}: ibcast of {bytes} bytes from root {} with {}",
            self.rank,
            self.cid,
            call.root(),
            alg.name()
        );
        self.moved = true;
        let at = Ranks {
            rank: self.rank,
            size: self.size,
            root: call.root(),
        };
        let (comm, message) = (call.comm(), call.keep_message());
        let ib = match how {
            None => Ibcast::multicast(comm, at, message, request()),
            Some(shape) => Ibcast::point_to_point(comm, at, message, request(), shape),
        };
        self.background.ibcast(ib);
        self.stats.record(alg, bytes);
        Ok(true)
    }

    /// The algorithm for a broadcast of `bytes` bytes now: multicast only
    /// where the group is agreed; two levels where they are split.
    fn choose_now(&self, bytes: usize) -> Algorithm {
        if !self.broken && self.over_levels() {
            return Algorithm::TwoLevel;
        }
        match self.choose(bytes) {
            Algorithm::Multicast if !matches!(self.multicast, Multicast::Ready) => {
                Algorithm::Previous
            }
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
        if let Some(driver) = driver {
            self.background.set_driver(driver);
            self.multicast = Multicast::Ready;
        }
        Ok(())
    }

    /// Runs the linear or chain algorithm on the message bytes.
    fn run(&self, alg: Algorithm, call: &mut BcastCall, bytes: usize) -> Result<()> {
        let (comm, root) = (call.comm(), call.root());
        on_message_bytes(call, self.rank, bytes, |buf| {
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
            | Algorithm::TwoLevel => Err(Error::Unavailable),
        }
    }

    /// Splits the communicator into its two levels, at its first broadcast
    /// (collective: every rank is in that call). A failed split leaves the
    /// communicator on one level.
    fn split_levels(&mut self, comm: Comm) -> Result<()> {
        let TwoLevels::Pending(layout) = &self.levels else {
            return Ok(());
        };
        match Levels::split(comm, layout.clone(), self.rank) {
            Ok(levels) => {
                self.levels = TwoLevels::Ready(levels);
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

    /// The broadcast over the two levels.
    fn run_levels(&self, call: &mut BcastCall) -> Result<()> {
        match &self.levels {
            TwoLevels::Ready(levels) => levels.bcast(call),
            _ => Err(Error::Unavailable),
        }
    }

    /// The two-stage broadcast on the message bytes.
    fn run_multicast(&mut self, call: &mut BcastCall, bytes: usize) -> Result<()> {
        if !matches!(self.multicast, Multicast::Ready) {
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
        on_message_bytes(call, self.rank, bytes, |buf| {
            background.bcast(comm, at, buf, stats)
        })
    }

    /// Starts the agreement on the communicator's multicast group with every
    /// other rank (see [`setup`]) in the background.
    fn start_setup(&mut self, comm: Comm) -> Result<()> {
        let cfg = self.cfg.clone();
        let loopback = comm.has_local_peer();
        let open: Open = Box::new(move |a: &Announce| open_socket(&cfg, loopback, a));
        let facts = rank_facts(&self.cfg);
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
    ) -> Option<Driver<McastSocket>> {
        let cfg = &self.cfg;
        let Some(setup::Agreed {
            announce,
            local,
            joined,
            failures,
        }) = agreed
        else {
            self.stats.setup = "failed";
            return None;
        };
        let name = comm.name();
        if let Err(why) = &local {
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
        match (joined, local, announce) {
            (setup::Joined::All, Ok(socket), Some(a)) => {
                info!(
                    "rank {} multicasts on {name} (cid {}) with group {}, receive buffer {} bytes",
                    self.rank,
                    self.cid,
                    a.group,
                    socket.granted_rcvbuf()
                );
                self.stats.setup = "ok";
                // How datagrams move, once per job: by the process of rank 0
                // of MPI_COMM_WORLD, for the first group it joins.
                if cfg.verbose >= 1 {
                    tell_once(Notice::DatagramPath, ompi::world_rank() == 0, || {
                        format!(
                            "ipmc: multicast on {name}: fragments of {} bytes (datagrams fit the \
                         smallest MTU of the ranks' interfaces), {} on each, {}",
                            a.fragment_size,
                            a.auth.describe(),
                            socket.path()
                        )
                    });
                }
                let seed =
                    cfg.inject_seed as u64 ^ ((self.rank as u64) << 32) ^ u64::from(self.cid);
                Some(Driver::new(
                    socket,
                    a.comm_id,
                    a.fragment_size as usize,
                    a.auth,
                    Duration::from_micros(cfg.root_wait_time as u64),
                    a.window,
                    (cfg.inject_loss as u32, seed),
                ))
            }
            (joined, _, _) => {
                let first = match joined {
                    setup::Joined::Failed { first } => first,
                    setup::Joined::All => self.rank,
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

/// The measured choice's view of a communicator's background: votes go
/// there where the ranks may agree, and the answers to this rank's calls as
/// a root come from there.
struct OmpiBallots<'a> {
    background: &'a mut Background,
    comm: Comm,
    /// Whether the ranks may agree here (see `Module::votes_here`).
    votes: bool,
    /// Waits for every answer.
    wait: bool,
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
        self.background.take_answered(self.wait)
    }
}

/// Runs `f` on the message's bytes: in the user's buffer when the datatype
/// is contiguous, otherwise on a copy packed before (at the root) and
/// unpacked after (elsewhere).
fn on_message_bytes(
    call: &mut BcastCall,
    rank: usize,
    bytes: usize,
    f: impl FnOnce(&mut [u8]) -> Result<()>,
) -> Result<()> {
    if let Some(buf) = call.contiguous(bytes) {
        return f(buf);
    }
    let root = call.root();
    let mut packed = vec![0u8; bytes];
    if rank == root {
        call.pack(&mut packed)?;
    }
    f(&mut packed)?;
    if rank != root {
        call.unpack(&packed)?;
    }
    Ok(())
}

/// Opens and joins this rank's socket for the announced group.
/// `loopback`: whether another rank of the communicator runs on this node.
fn open_socket(cfg: &Config, loopback: bool, a: &Announce) -> Result<McastSocket, OpenError> {
    let include = IfList::parse(&cfg.if_include)?;
    let exclude = IfList::parse(&cfg.if_exclude)?;
    let addrs = os::interface_addresses().map_err(|e| format!("listing interfaces: {e}"))?;
    let v6 = a.group.is_ipv6();
    let mut iface = interfaces::choose(&addrs, &include, &exclude, v6).map_err(|e| {
        if v6 || interfaces::choose(&addrs, &include, &exclude, true).is_err() {
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
fn rank_facts(cfg: &Config) -> setup::Facts {
    let (Ok(include), Ok(exclude), Ok(addrs)) = (
        IfList::parse(&cfg.if_include),
        IfList::parse(&cfg.if_exclude),
        os::interface_addresses(),
    ) else {
        return setup::Facts::UNKNOWN; // no say; opening will tell
    };
    let chosen = |v6| interfaces::choose(&addrs, &include, &exclude, v6).ok();
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
}
