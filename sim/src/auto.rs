//! ipmc's automatic choice on the simulated cluster (`--only ipmc-auto`):
//! every rank runs the component's calls (`ipmc::engine::call`, with the
//! measured choice of `ipmc::engine::choice` and `ipmc::engine::tuning`)
//! one after another, as a program's loop of `MPI_Bcast` makes them, and
//! does what each says. Its
//! candidates run the component's own code where they are ipmc's (multicast
//! through the engine's queue, the chain and linear broadcasts of
//! `ipmc::algorithms::nonblocking`); the replaced component's broadcast is a
//! model of tuned's ([`Previous`]). Votes go through the engine's queue over
//! the simulated network, and each rank times its calls in virtual time
//! (short messages at their root, until every rank answered, with a tag of
//! their own, as the component does).
//!
//! Open MPI's binomial and binary trees, candidates up to 2 KiB (the
//! binomial one again from 16 to 128 KiB), are models
//! too. With barriers for calls (`--only barrier-auto`), ipmc's barrier runs
//! against models of the linear and Bruck barriers; with allgathers
//! (`--only allgather-auto`), ipmc's (every block a broadcast through the
//! queue) against the model of the ring. Not modelled: two levels.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use ipmc::algorithms::nonblocking::{Message, Shape, Steps};
use ipmc::base::counters::Datagrams;
use ipmc::base::error::Result as IpmcResult;
use ipmc::base::io::Wait;
use ipmc::base::params::Config;
use ipmc::driver::multicast::Ranks;
use ipmc::engine::algorithm::Algorithm;
use ipmc::engine::call::{Action, Call, Collective};
use ipmc::engine::choice::{lost_permille, Ballots, Choice};
use ipmc::engine::queue::{NoWork, Queue, Turn};
use ipmc::engine::tuning::{self, Tuner};

use crate::allgather;
use crate::barrier::{self, BarrierRank};
use crate::engine::HostIo;
use crate::p2p::{P2pState, SimMessages, ALLGATHER, ANSWERS, BARRIER};
use crate::programs::{self, Call as PlannedCall, IpmcParams, Program, Schedule, Status};
use crate::socket::SimSocket;
use crate::Ns;

/// The model of the replaced component's broadcast (Open MPI tuned's), or
/// of one of Open MPI's trees that the choice measures itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Previous {
    Binomial,
    Binary,
    SplitBinary,
    Pipeline,
    ScatterAllgather,
    /// As tuned 4.1.4's fixed rule on communicators of 128 to 2047 ranks
    /// (`ompi_coll_tuned_bcast_intra_dec_fixed`), by the closest model: its
    /// k-nomial tree below 512 KiB as the binomial one, its scatter and
    /// allgather from there.
    Tuned,
}

impl Previous {
    /// The model for a message of `len` bytes.
    fn model(self, len: usize) -> Previous {
        match self {
            Previous::Tuned if len < 512 << 10 => Previous::Binomial,
            Previous::Tuned => Previous::ScatterAllgather,
            model => model,
        }
    }
}

/// The fixed algorithm of a barrier or an allgather: ipmc's where forced,
/// else the replaced component's.
fn forced(ipmc: bool) -> Algorithm {
    if ipmc {
        Algorithm::Multicast
    } else {
        Algorithm::Previous
    }
}

/// What a rank's calls are.
#[derive(Clone)]
pub enum Kind {
    /// Broadcasts: the plan's.
    Bcast,
    /// Barriers, as many as the plan's calls.
    Barrier,
    /// Allgathers, as many as the plan's calls, of these blocks (rank `i`'s
    /// is `blocks[i]`) in each.
    Allgather(Rc<[Rc<[u8]>]>),
}

/// How the rank serves the call in progress.
enum Serving {
    /// By multicast, through the queue: the rank's buffer.
    Multicast(Vec<u8>),
    /// By ipmc's linear or chain broadcast.
    Steps(Box<Steps<SimMessages>>),
    /// By the model of the replaced component's (or of Open MPI's linear
    /// barrier).
    Model(Schedule),
    /// By ipmc's barrier, with the queue's driver.
    Barrier(Box<BarrierRank>),
    /// By ipmc's allgather: every rank's block a multicast broadcast through
    /// the queue, rank 0's first (`Module::run_allgather`); the block of
    /// `root` is under way into `buf`.
    Allgather { root: usize, buf: Vec<u8> },
}

/// What a rank in a call does before it asks the call again.
enum Doing {
    /// Nothing: it asks.
    Ask,
    /// It waits for the queue's work to finish.
    FinishQueue,
    /// It waits for the queue's votes to finish.
    FinishVotes,
    /// It waits for every answer to its measured calls as a root.
    AwaitAnswers,
    Serving(Serving),
    /// The root of a measured call of a short message waits in the call
    /// for every other rank's answer (receives `waiting`) until `until`.
    TimingAtRoot {
        waiting: Vec<usize>,
        until: Ns,
    },
}

/// A measured call of this rank as its root whose answers came after it
/// returned: the choice's ticket, the receives still waiting, its entry.
struct Awaited {
    ticket: u64,
    waiting: Vec<usize>,
    entered: Ns,
}

/// The choice's view of the queue.
struct SimBallots<'a> {
    queue: &'a mut Queue<SimSocket, SimMessages, NoWork>,
    answered: &'a mut Vec<(u64, Duration)>,
    msgs: &'a Rc<RefCell<P2pState>>,
    rank: usize,
    size: usize,
}

impl Ballots for SimBallots<'_> {
    fn vote(&mut self, k: usize, mine: Vec<u32>) {
        let msgs = SimMessages::queued(self.msgs);
        self.queue.push_vote(msgs, self.rank, self.size, k, mine);
    }

    fn take_votes(&mut self) -> Vec<(usize, Vec<u32>)> {
        self.queue.take_votes()
    }

    fn take_answered(&mut self) -> IpmcResult<Vec<(u64, Duration)>> {
        Ok(std::mem::take(self.answered))
    }

    fn only_multicast_queued(&self) -> bool {
        self.queue.holds_only_multicast()
    }
}

/// A rank whose calls ipmc's automatic choice serves.
pub struct AutoRank {
    io: HostIo,
    queue: Queue<SimSocket, SimMessages, NoWork>,
    choice: Choice,
    cfg: Config,
    previous: Previous,
    rank: usize,
    size: usize,
    fragment_size: usize,
    plan: VecDeque<PlannedCall>,
    kind: Kind,
    /// The call in progress, and what the rank does in it; `None` between
    /// calls.
    state: Option<(Call, Doing)>,
    /// A call returned: the next one is entered at the rank's next step,
    /// after the host's work of this one (its answers too), as a program
    /// enters its next call once the last returned.
    next_call_at: Option<Ns>,
    awaited: Vec<Awaited>,
    answered: Vec<(u64, Duration)>,
    tickets: u64,
    stats: Datagrams,
}

impl AutoRank {
    /// Rank `rank` of `size`, whose calls are `plan`'s broadcasts (or as
    /// many calls of another `kind`).
    pub fn new(
        io: &HostIo,
        (rank, size): (usize, usize),
        params: IpmcParams,
        comm_id: u64,
        (plan, kind): (Vec<PlannedCall>, Kind),
        (previous, cfg): (Previous, Config),
    ) -> std::result::Result<Self, String> {
        Ok(AutoRank {
            io: io.clone(),
            queue: params.queue(io, comm_id),
            choice: Choice::new(Tuner::new(cfg.tune_calls, rank, cfg.inject_timing).of_ranks(size)),
            cfg,
            previous,
            rank,
            size,
            fragment_size: params.fragment_size,
            plan: plan.into(),
            kind,
            state: None,
            next_call_at: None,
            awaited: Vec::new(),
            answered: Vec::new(),
            tickets: 0,
            stats: Datagrams::default(),
        })
    }

    fn ballots(&mut self) -> (&mut Choice, SimBallots<'_>) {
        let io = SimBallots {
            queue: &mut self.queue,
            answered: &mut self.answered,
            msgs: &self.io.p2p,
            rank: self.rank,
            size: self.size,
        };
        (&mut self.choice, io)
    }

    /// Begins serving the call in front with `alg`.
    fn serve(&mut self, alg: Algorithm) -> std::result::Result<Serving, String> {
        let (rank, size) = (self.rank, self.size);
        match &self.kind {
            Kind::Bcast => {}
            Kind::Barrier => {
                let tagged = |ops| Schedule::tagged(&self.io, ops, BARRIER);
                return Ok(match alg {
                    Algorithm::Multicast => {
                        Serving::Barrier(Box::new(BarrierRank::new(&self.io, rank, size)))
                    }
                    Algorithm::Linear => Serving::Model(tagged(barrier::linear(rank, size))),
                    // tuned's choice for a barrier of more than 2 ranks that
                    // are no power of 2; as many rounds as its recursive
                    // doubling.
                    _ => Serving::Model(tagged(barrier::bruck(rank, size))),
                });
            }
            Kind::Allgather(blocks) => {
                let block = blocks[0].len();
                return Ok(match alg {
                    Algorithm::Multicast => self.allgather_block(0),
                    // Open MPI's ring (`chain`), and as the replaced one's
                    // model: tuned's choice for large messages, whose
                    // neighbour exchange moves as many bytes per step.
                    _ => Serving::Model(Schedule::tagged(
                        &self.io,
                        allgather::ring(rank, size, block),
                        ALLGATHER,
                    )),
                });
            }
        }
        let call = self.plan.front().expect("a call in progress");
        let (len, root) = (call.message.len(), call.root);
        let root_data = (self.rank == root).then(|| call.message.to_vec());
        let at = (self.rank, self.size, root);
        let msgs = SimMessages::bcast(&self.io.p2p);
        Ok(match alg {
            Algorithm::Multicast => {
                let ranks = Ranks {
                    rank: self.rank,
                    size: self.size,
                    root,
                };
                self.queue
                    .enter_bcast(ranks, len, SimMessages::queued(&self.io.p2p));
                Serving::Multicast(root_data.unwrap_or_else(|| vec![0; len]))
            }
            Algorithm::Linear | Algorithm::Chain => {
                let shape = match alg {
                    Algorithm::Linear => Shape::Linear,
                    _ => Shape::Chain(self.cfg.chain_segment_size),
                };
                let message = match root_data {
                    Some(data) => Message::Root(Arc::from(data)),
                    None => Message::own(len),
                };
                Serving::Steps(Box::new(Steps::new(msgs, shape, at, message)))
            }
            Algorithm::Previous
            | Algorithm::Binomial
            | Algorithm::Binary
            | Algorithm::SplitBinary
            | Algorithm::ScatterAllgather => {
                let vrank = (self.rank + self.size - root) % self.size;
                let real = |v: usize| (v + root) % self.size;
                let model = match alg {
                    Algorithm::Binomial => Previous::Binomial,
                    Algorithm::Binary => Previous::Binary,
                    Algorithm::SplitBinary => Previous::SplitBinary,
                    Algorithm::ScatterAllgather => Previous::ScatterAllgather,
                    _ => self.previous.model(len),
                };
                let ops = match model {
                    Previous::Binomial | Previous::Tuned => {
                        programs::binomial(vrank, self.size, len, real)
                    }
                    Previous::Pipeline => programs::pipeline(vrank, self.size, len, 65536, real),
                    Previous::ScatterAllgather => {
                        programs::scatter_allgather(vrank, self.size, len, real)
                    }
                    Previous::Binary => programs::binary(vrank, self.size, len, real),
                    Previous::SplitBinary => programs::split_binary(vrank, self.size, len, real),
                };
                Serving::Model(Schedule::new(&self.io, ops))
            }
            // Two levels.
            other => return Err(format!("{} is not simulated here", other.name())),
        })
    }

    /// ipmc's allgather from `root`'s block on: that block's broadcast
    /// enters the queue.
    fn allgather_block(&mut self, root: usize) -> Serving {
        let Kind::Allgather(blocks) = &self.kind else {
            unreachable!("an allgather's blocks")
        };
        let block = &blocks[root];
        let buf = if root == self.rank {
            block.to_vec()
        } else {
            vec![0; block.len()]
        };
        let ranks = Ranks {
            rank: self.rank,
            size: self.size,
            root,
        };
        let msgs = SimMessages::queued(&self.io.p2p);
        self.queue.enter_bcast(ranks, block.len(), msgs);
        Serving::Allgather { root, buf }
    }

    /// One turn of the multicast broadcast in the queue into `buf`: whether
    /// it returned.
    fn multicast_turn(&mut self, buf: &mut [u8], now: Ns) -> std::result::Result<bool, String> {
        let t = Duration::from_nanos(now);
        let turn = self
            .queue
            .bcast_turn(Some(buf), t, Wait::Progress, &mut self.stats);
        Ok(turn.map_err(|e| e.to_string())? == Turn::Returned)
    }

    /// One turn of the call being served: whether it returned (blocking
    /// point-to-point calls once all their messages completed, as the
    /// component's and tuned's do).
    fn turn(&mut self, serving: &mut Serving, now: Ns) -> std::result::Result<bool, String> {
        let e = |e: ipmc::base::error::Error| e.to_string();
        let message = self
            .plan
            .front()
            .expect("a call in progress")
            .message
            .clone();
        if matches!(serving, Serving::Steps(_) | Serving::Model(_)) {
            // The queue's work goes on alongside, as from Open MPI's
            // progress engine in the component.
            let t = Duration::from_nanos(now);
            self.queue.turn(t, Wait::Look).map_err(e)?;
        }
        match serving {
            Serving::Multicast(buf) => {
                if !self.multicast_turn(buf, now)? {
                    return Ok(false);
                }
                if buf[..] != message[..] {
                    return Err("a call returned with other bytes than the root's".into());
                }
                Ok(true)
            }
            Serving::Steps(steps) => {
                steps.turn(Wait::Progress).map_err(e)?;
                if !steps.is_done() {
                    return Ok(false);
                }
                if steps.data() != &message[..] {
                    return Err("a call returned with other bytes than the root's".into());
                }
                Ok(true)
            }
            Serving::Model(schedule) => Ok(schedule.step(now)?.done),
            Serving::Barrier(b) => {
                let driver = self.queue.driver().ok_or("no driver for the barrier")?;
                Ok(b.step(driver, now, &mut self.stats).returned)
            }
            Serving::Allgather { .. } => loop {
                let Serving::Allgather { root, buf } = serving else {
                    unreachable!("matched above")
                };
                if !self.multicast_turn(buf, now)? {
                    return Ok(false);
                }
                let Kind::Allgather(blocks) = &self.kind else {
                    unreachable!("an allgather's blocks")
                };
                if buf[..] != blocks[*root][..] {
                    return Err(format!("rank {root}'s block came with other bytes"));
                }
                let next = *root + 1;
                if next == self.size {
                    return Ok(true);
                }
                *serving = self.allgather_block(next);
            },
        }
    }

    /// Notes the measured calls of this rank as a root whose answers all
    /// arrived; whether none is awaited any more.
    fn look_answers(&mut self, now: Ns) -> bool {
        let mut p2p = self.io.p2p.borrow_mut();
        self.awaited.retain_mut(|a| {
            a.waiting.retain(|&id| p2p.test(id).is_none());
            if !a.waiting.is_empty() {
                return true;
            }
            let took = Duration::from_nanos(now - a.entered);
            self.answered.push((a.ticket, took));
            false
        });
        self.awaited.is_empty()
    }

    /// The decision table, as the component prints it at
    /// `coll_ipmc_verbose` 1.
    pub fn table(&self) -> String {
        tuning::table(self.choice.tuner())
    }
}

impl Program for AutoRank {
    fn step(&mut self, now: Ns) -> std::result::Result<Status, String> {
        let e = |e: ipmc::base::error::Error| e.to_string();
        loop {
            let t = Duration::from_nanos(now);
            let (mut call, doing) = match self.state.take() {
                None => {
                    if self.next_call_at.is_some_and(|t| now < t) {
                        break;
                    }
                    self.next_call_at = None;
                    self.queue.turn(t, Wait::Progress).map_err(e)?;
                    self.look_answers(now);
                    let Some(call) = self.plan.front() else {
                        break;
                    };
                    let (rank, cfg) = (self.rank, &self.cfg);
                    let call = match &self.kind {
                        Kind::Bcast => {
                            let len = call.message.len();
                            let what = Collective::Bcast { root: call.root };
                            let class = (tuning::class_of(len), cfg.choose(len, self.size));
                            Call::new(what, rank, class, cfg.tunes(), true, t)
                        }
                        Kind::Barrier => {
                            let fixed = forced(cfg.forces_barrier());
                            let (what, measured) = (Collective::Barrier, cfg.tunes_barrier());
                            Call::new(what, rank, (tuning::BARRIER, fixed), measured, true, t)
                        }
                        Kind::Allgather(blocks) => {
                            let class = tuning::allgather_class(blocks[0].len());
                            let fixed = forced(cfg.forces_allgather());
                            let (what, measured) = (Collective::Allgather, cfg.tunes_allgather());
                            Call::new(what, rank, (class, fixed), measured, true, t)
                        }
                    };
                    self.state = Some((call, Doing::Ask));
                    continue;
                }
                Some(in_call) => in_call,
            };
            let doing = match doing {
                Doing::Ask => {
                    let (choice, mut io) = self.ballots();
                    match call.next(choice, &mut io).map_err(e)? {
                        Action::Decided(_) => Doing::Ask,
                        Action::FinishQueue => Doing::FinishQueue,
                        Action::FinishVotes => Doing::FinishVotes,
                        Action::AwaitAnswers => Doing::AwaitAnswers,
                        Action::Run(alg) => Doing::Serving(self.serve(alg)?),
                        Action::AnswerRoot => {
                            let root = self.plan.front().expect("a call in progress").root;
                            let mut p2p = self.io.p2p.borrow_mut();
                            p2p.send_tagged(root, ANSWERS, 0, Vec::new(), false);
                            Doing::Ask
                        }
                        Action::TimeAtRoot { until } => {
                            let mut p2p = self.io.p2p.borrow_mut();
                            let waiting = (0..self.size)
                                .filter(|&r| r != self.rank)
                                .map(|r| p2p.recv_tagged(r, ANSWERS))
                                .collect();
                            let until = until.as_nanos() as Ns;
                            Doing::TimingAtRoot { waiting, until }
                        }
                        Action::Return => {
                            self.plan.pop_front();
                            // The next call is entered at the next step,
                            // after the host's work of this one.
                            self.next_call_at = Some(now + 1);
                            break;
                        }
                    }
                }
                finish @ (Doing::FinishQueue | Doing::FinishVotes) => {
                    self.queue.turn(t, Wait::Progress).map_err(e)?;
                    let left = match finish {
                        Doing::FinishQueue => self.queue.is_busy(),
                        _ => self.queue.holds_votes(),
                    };
                    if left {
                        self.state = Some((call, finish));
                        break;
                    }
                    Doing::Ask
                }
                Doing::AwaitAnswers => {
                    self.queue.turn(t, Wait::Progress).map_err(e)?;
                    if !self.look_answers(now) {
                        self.state = Some((call, Doing::AwaitAnswers));
                        break;
                    }
                    Doing::Ask
                }
                Doing::Serving(mut serving) => {
                    let before = (self.stats.bytes_multicast, self.stats.bytes_chain);
                    if !self.turn(&mut serving, now)? {
                        self.state = Some((call, Doing::Serving(serving)));
                        break;
                    }
                    let len = self.plan.front().expect("serving").message.len();
                    let lost = matches!(serving, Serving::Multicast(_))
                        .then(|| {
                            let (m, c) = (self.stats.bytes_multicast, self.stats.bytes_chain);
                            lost_permille(len, self.fragment_size, m - before.0, c - before.1)
                        })
                        .flatten();
                    call.ran(t, lost);
                    Doing::Ask
                }
                Doing::TimingAtRoot { mut waiting, until } => {
                    waiting.retain(|&id| self.io.p2p.borrow_mut().test(id).is_none());
                    if waiting.is_empty() {
                        call.answered(&mut self.choice, t);
                    } else if now < until {
                        self.state = Some((call, Doing::TimingAtRoot { waiting, until }));
                        break;
                    } else {
                        // Later answers are noted between calls.
                        let ticket = self.tickets;
                        self.tickets += 1;
                        call.answers_late(&mut self.choice, ticket);
                        let entered = call.entered().as_nanos() as Ns;
                        self.awaited.push(Awaited {
                            ticket,
                            waiting,
                            entered,
                        });
                    }
                    Doing::Ask
                }
            };
            self.state = Some((call, doing));
        }
        let returned = self.plan.is_empty() && self.state.is_none();
        Ok(Status {
            returned,
            done: returned && !self.queue.is_busy() && self.awaited.is_empty(),
        })
    }

    fn wake_at(&self) -> Option<Ns> {
        let model = match &self.state {
            Some((_, Doing::Serving(Serving::Model(s)))) => s.wake_at(),
            Some((_, Doing::TimingAtRoot { until, .. })) => Some(*until),
            _ => None,
        };
        let queue = self.queue.wake_at().map(|d| d.as_nanos() as Ns);
        queue
            .into_iter()
            .chain(model)
            .chain(self.next_call_at)
            .min()
    }

    fn datagrams(&self) -> Option<Datagrams> {
        Some(self.stats)
    }

    fn table(&self) -> Option<String> {
        Some(AutoRank::table(self))
    }
}
