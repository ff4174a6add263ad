//! A communicator's multicast broadcasts in the order its calls made them,
//! and the work they leave behind: a state machine that is told the time and
//! owns no I/O of its own (the driver's socket and each piece of work's
//! messages are generic), so that the component and the simulator run the
//! same rules.
//!
//! The rules:
//! - Broadcasts' chains run one after another (the chain frames of
//!   consecutive broadcasts share a tag and must never cross): the next chain
//!   begins when the work before it owes nothing more.
//! - A blocking broadcast returns once this rank owns the message (the root:
//!   once every datagram went to the socket) and has told its predecessor
//!   what it lacked; what it still owes its neighbours stays here as a
//!   job when the message is at most `background_limit` bytes. A larger
//!   one, whose message may lie in the caller's buffer
//!   ([`Queue::enter_lent_bcast`]), returns once it will touch the message
//!   no more: it owes its successor none of it either. What is left, the
//!   predecessor's `END` and flow reports, stays here without the message,
//!   so a rank after a late one on the ring does not wait for it.
//! - A blocking broadcast may begin while the blocking broadcasts before it
//!   still owe chain frames, up to `background_limit` bytes of messages held
//!   in all (beyond it, the oldest work finishes first; a message in the
//!   caller's buffer, or one given up, is not held): its stage 1 runs
//!   alongside their chains, and a root whose datagrams are out, or a rank
//!   that got the whole message by multicast, returns and leaves its chain to
//!   follow theirs (up to [`AHEAD_LIMIT`] bytes of such broadcasts), so that
//!   no rank waits for one that has not entered an earlier broadcast. Other
//!   work before it (a nonblocking broadcast) finishes first.
//! - Votes of the automatic choice use the chains' tag too: they take
//!   their turn in the queue.
//! - The queue's messages have a tag of their own, not the broadcast tag of
//!   Open MPI's broadcasts and ipmc's point-to-point ones: a blocking
//!   broadcast by those may run while multicast broadcasts' chains and votes
//!   still go on, so that a root that runs ahead of a rank is not held by
//!   them ([`crate::engine::call`]).

use std::collections::VecDeque;
use std::time::Duration;

use log::debug;

use crate::base::counters::Datagrams;
use crate::base::error::{Error, Result};
use crate::base::io::{DatagramIo, MessageIo, Wait};
use crate::driver::multicast::{Driver, Ranks, Run};
use crate::group::vote::Vote;
use crate::protocol::two_stage::{Broadcast, Lent};

/// Bytes of a rank's multicast broadcasts that may return before their
/// chains start: many small broadcasts ahead of a rank that has not entered
/// them, as Open MPI's broadcast of eagerly sent messages allows, and not so
/// many that a root floods its receivers' socket buffers (with 16 MiB, 100
/// broadcasts of 64 KiB back to back on the emulated cluster took 1.8 ×
/// longer). Beyond it a broadcast waits for the chains before.
pub const AHEAD_LIMIT: usize = 256 << 10;

/// Work of the caller's own that takes its turn in the queue (the
/// component's nonblocking broadcasts, which complete Open MPI requests).
pub trait Work<S: DatagramIo> {
    /// One turn at time `now`; whether the work is over. `driver` is the
    /// communicator's multicast driver once its group is agreed.
    fn turn(
        &mut self,
        driver: Option<&mut Driver<S>>,
        now: Duration,
        wait: Wait,
        stats: &mut Datagrams,
    ) -> Result<bool>;
    /// The work is given up after `e`.
    fn fail(self, e: Error);
}

/// No work of the caller's own.
pub enum NoWork {}

impl<S: DatagramIo> Work<S> for NoWork {
    fn turn(
        &mut self,
        _: Option<&mut Driver<S>>,
        _: Duration,
        _: Wait,
        _: &mut Datagrams,
    ) -> Result<bool> {
        match *self {}
    }

    fn fail(self, _: Error) {
        match self {}
    }
}

/// What the blocking broadcast in progress asks of its caller after a turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// The call returns: this rank owns the message, written to its buffer.
    Returned,
    /// A root that has nothing to do before its stage 1 starts at this time
    /// (`coll_ipmc_root_wait_time`): it may sleep until then.
    Sleep(Duration),
    /// Turn again when something may have happened (a message or datagram
    /// came, or [`Queue::wake_at`]).
    Pending,
}

/// A vote of the automatic choice on a class's measurements; its messages
/// are posted when its turn comes, after the work before it.
struct VoteJob<M: MessageIo> {
    msgs: M,
    rank: usize,
    size: usize,
    class: usize,
    mine: Vec<u32>,
    vote: Option<Vote<M>>,
}

impl<M: MessageIo> VoteJob<M> {
    /// One turn; the agreed vector once the vote is over.
    fn turn(&mut self, wait: Wait) -> Result<Option<Vec<u32>>> {
        if self.vote.is_none() {
            let mine = std::mem::take(&mut self.mine);
            let vote = Vote::start(&mut self.msgs, self.rank, self.size, mine)?;
            self.vote = Some(vote);
        }
        let vote = self.vote.as_mut().expect("started above");
        vote.poll(&mut self.msgs, wait)
    }
}

/// A blocking broadcast that returned before its chain could start; its
/// chain starts when its turn comes.
struct Later<M> {
    b: Broadcast,
    msgs: M,
    at: Ranks,
}

/// A piece of a communicator's work.
enum Job<M: MessageIo, W> {
    /// What a blocking broadcast that returned still owes its neighbours.
    Rest(Box<Run<M>>),
    Later(Box<Later<M>>),
    Vote(Box<VoteJob<M>>),
    Work(Box<W>),
}

/// The blocking broadcast in progress.
enum Call<M: MessageIo> {
    /// Entered: it begins when the work before it fits the limit; its
    /// message in the caller's memory where it was lent.
    Entered {
        at: Ranks,
        len: usize,
        msgs: M,
        lent: Option<Box<dyn Lent>>,
    },
    /// Stage 1 alongside the chains before.
    Stage1 {
        b: Box<Broadcast>,
        at: Ranks,
        msgs: M,
    },
    /// Its chain runs.
    Chain(Box<Run<M>>),
}

/// A communicator's multicast driver and its work, in the order the calls
/// came.
pub struct Queue<S: DatagramIo, M: MessageIo, W> {
    driver: Option<Driver<S>>,
    jobs: VecDeque<Job<M, W>>,
    call: Option<Call<M>>,
    /// `coll_ipmc_background_limit`.
    limit: usize,
    /// What the work in the queue did with datagrams.
    datagrams: Datagrams,
    /// Votes that ended: the class and the agreed vector.
    voted: Vec<(usize, Vec<u32>)>,
    /// Blocking broadcasts whose work ended here, kept for a checker (the
    /// simulator's) when asked for.
    finished: Option<Vec<Broadcast>>,
}

impl<S: DatagramIo, M: MessageIo, W: Work<S>> Queue<S, M, W> {
    /// An empty queue whose broadcasts of at most `background_limit` bytes
    /// leave their chains to it.
    pub fn new(background_limit: usize) -> Self {
        Queue {
            driver: None,
            jobs: VecDeque::new(),
            call: None,
            limit: background_limit,
            datagrams: Datagrams::default(),
            voted: Vec::new(),
            finished: None,
        }
    }

    /// Keeps every blocking broadcast whose chain ended (see
    /// [`Queue::take_finished`]).
    pub fn keep_finished(&mut self) {
        self.finished = Some(Vec::new());
    }

    /// Multicasts from now on with `driver`.
    pub fn set_driver(&mut self, driver: Driver<S>) {
        self.driver = Some(driver);
    }

    /// Gives the multicast driver up, once the work is over, for a later
    /// communicator to take over.
    pub fn take_driver(&mut self) -> Option<Driver<S>> {
        self.driver.take()
    }

    /// The multicast driver, once the group is agreed.
    pub fn driver(&mut self) -> Option<&mut Driver<S>> {
        self.driver.as_mut()
    }

    /// Whether work is queued (a blocking call in progress not counted).
    pub fn is_busy(&self) -> bool {
        !self.jobs.is_empty()
    }

    /// Whether a vote is queued.
    pub fn holds_votes(&self) -> bool {
        self.jobs.iter().any(|j| matches!(j, Job::Vote(_)))
    }

    /// Whether the queued work is blocking multicast broadcasts' chains and
    /// votes only, which a multicast broadcast may begin alongside.
    pub fn holds_only_multicast(&self) -> bool {
        self.multicast_bytes().is_some()
    }

    /// Queues `work` after the work before it.
    pub fn push_work(&mut self, work: W) {
        self.jobs.push_back(Job::Work(Box::new(work)));
    }

    /// Queues this rank's part (`mine`, as `rank` of `size`) in a vote on
    /// class `class`, after the work before it.
    pub fn push_vote(&mut self, msgs: M, rank: usize, size: usize, class: usize, mine: Vec<u32>) {
        self.jobs.push_back(Job::Vote(Box::new(VoteJob {
            msgs,
            rank,
            size,
            class,
            mine,
            vote: None,
        })));
    }

    /// The votes that ended since the last call: class and result.
    pub fn take_votes(&mut self) -> Vec<(usize, Vec<u32>)> {
        std::mem::take(&mut self.voted)
    }

    /// The blocking broadcasts whose work ended since the last call, if
    /// [`Queue::keep_finished`] asked for them.
    pub fn take_finished(&mut self) -> Vec<Broadcast> {
        self.finished
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// What the queued work did with datagrams.
    pub fn datagrams(&self) -> Datagrams {
        self.datagrams
    }

    /// The broadcasts in progress here: the blocking call's, then the
    /// queued ones in their order.
    pub fn broadcasts(&self) -> impl Iterator<Item = &Broadcast> {
        let call = self.call.iter().filter_map(|c| match c {
            Call::Entered { .. } => None,
            Call::Stage1 { b, .. } => Some(&**b),
            Call::Chain(run) => Some(run.broadcast()),
        });
        let jobs = self.jobs.iter().filter_map(|j| match j {
            Job::Rest(run) => Some(run.broadcast()),
            Job::Later(later) => Some(&later.b),
            Job::Vote(_) | Job::Work(_) => None,
        });
        call.chain(jobs)
    }

    /// When a broadcast here needs a turn though nothing happens (a root's
    /// start of stage 1, flow control's stall limit).
    pub fn wake_at(&self) -> Option<Duration> {
        self.broadcasts().filter_map(Broadcast::wake_at).min()
    }

    /// One turn of the queued work, oldest first, as far as it goes; how
    /// many pieces ended. After an error the queue is given up
    /// ([`Queue::abandon`]).
    pub fn turn(&mut self, now: Duration, wait: Wait) -> Result<usize> {
        let mut ended = 0;
        while let Some(job) = self.jobs.pop_front() {
            match self.turn_job(job, now, wait) {
                Ok(Some(job)) => {
                    self.jobs.push_front(job);
                    break;
                }
                Ok(None) => ended += 1,
                Err(e) => {
                    self.abandon(e);
                    return Err(e);
                }
            }
        }
        Ok(ended)
    }

    /// One turn of `job`, taken from the front of the queue: the job while
    /// it goes on.
    fn turn_job(&mut self, job: Job<M, W>, now: Duration, wait: Wait) -> Result<Option<Job<M, W>>> {
        let job = match job {
            Job::Later(later) => {
                let Later { b, msgs, at } = *later;
                Job::Rest(Box::new(Run::new(b, msgs, at.rank, at.size)?))
            }
            job => job,
        };
        match job {
            Job::Rest(mut run) => {
                run.turn(wait)?;
                if !run.is_done() {
                    return Ok(Some(Job::Rest(run)));
                }
                self.finish(run.into_broadcast());
            }
            Job::Vote(mut v) => match v.turn(wait)? {
                Some(result) => self.voted.push((v.class, result)),
                None => return Ok(Some(Job::Vote(v))),
            },
            Job::Work(mut w) => {
                match w.turn(self.driver.as_mut(), now, wait, &mut self.datagrams) {
                    Ok(true) => {}
                    Ok(false) => return Ok(Some(Job::Work(w))),
                    Err(e) => {
                        w.fail(e);
                        return Err(e);
                    }
                }
            }
            Job::Later(_) => unreachable!("its chain started above"),
        }
        Ok(None)
    }

    /// Gives up all work after `e`: the blocking call in progress, and
    /// every queued piece (the caller's own fail with `e`).
    pub fn abandon(&mut self, e: Error) {
        self.call = None;
        for job in self.jobs.drain(..) {
            if let Job::Work(w) = job {
                w.fail(e);
            }
        }
    }

    /// The message bytes that the queue's blocking multicast broadcasts
    /// hold, if it holds nothing else but votes.
    fn multicast_bytes(&self) -> Option<usize> {
        self.jobs
            .iter()
            .map(|job| match job {
                Job::Rest(run) => Some(run.broadcast().held_bytes()),
                Job::Later(later) => Some(later.b.held_bytes()),
                // Its messages go when its turn comes, as a chain's do.
                Job::Vote(_) => Some(0),
                Job::Work(_) => None,
            })
            .sum()
    }

    /// The message bytes of the broadcasts that returned before their
    /// chains started.
    fn later_bytes(&self) -> usize {
        self.jobs
            .iter()
            .map(|job| match job {
                Job::Later(later) => later.b.params().message_len,
                _ => 0,
            })
            .sum()
    }

    /// Whether a blocking broadcast of `len` bytes finishes here before it
    /// returns, so that its message may lie in the caller's memory
    /// ([`Queue::enter_lent_bcast`]): it is beyond `background_limit`.
    pub fn holds_to_the_end(&self, len: usize) -> bool {
        len > self.limit
    }

    /// Enters a blocking two-stage broadcast of `len` bytes at `at`, whose
    /// chain will use `msgs`; [`Queue::bcast_turn`] moves it on. The group
    /// must be agreed.
    pub fn enter_bcast(&mut self, at: Ranks, len: usize, msgs: M) {
        debug_assert!(self.call.is_none(), "one blocking call at a time");
        let lent = None;
        self.call = Some(Call::Entered {
            at,
            len,
            msgs,
            lent,
        });
    }

    /// As [`Queue::enter_bcast`], the message in `lent`, the caller's
    /// memory, for a broadcast that [`Queue::holds_to_the_end`]: the root's
    /// is read from it, every other rank's written into it as it comes.
    /// The caller turns it with no buffer of its own and ends it with
    /// [`Queue::end_call`] if it gives up before it returned.
    pub fn enter_lent_bcast(&mut self, at: Ranks, lent: Box<dyn Lent>, msgs: M) {
        debug_assert!(self.call.is_none(), "one blocking call at a time");
        let len = lent.len();
        debug_assert!(self.holds_to_the_end(len), "finishes before it returns");
        let lent = Some(lent);
        self.call = Some(Call::Entered {
            at,
            len,
            msgs,
            lent,
        });
    }

    /// Gives up the blocking broadcast in progress, if any, leaving the
    /// queued work be.
    pub fn end_call(&mut self) {
        self.call = None;
    }

    /// One turn of the blocking broadcast entered last, at time `now`, on
    /// `data` (the root's message, read when it begins; the other ranks'
    /// buffer, written as the message comes), or in the memory it was
    /// entered with (`data` is `None`), with the queued work before it.
    /// After an error the call is over (each path takes it, or gives the
    /// queue up).
    pub fn bcast_turn(
        &mut self,
        mut data: Option<&mut [u8]>,
        now: Duration,
        wait: Wait,
        stats: &mut Datagrams,
    ) -> Result<Turn> {
        let in_background = data.as_ref().is_some_and(|d| d.len() <= self.limit);
        loop {
            match self.call.take().expect("a blocking broadcast was entered") {
                Call::Entered {
                    at,
                    len,
                    msgs,
                    lent,
                } => {
                    // The oldest work finishes first while the queue would
                    // hold more than the limit with this message, which a
                    // lent one adds nothing to (one beyond the limit in a
                    // buffer of its own may not begin alongside at all).
                    let adds = match lent {
                        Some(_) => Some(0),
                        None => Some(len).filter(|_| in_background),
                    };
                    if !self.jobs.is_empty() && !self.fits(adds) {
                        self.call = Some(Call::Entered {
                            at,
                            len,
                            msgs,
                            lent,
                        });
                        self.turn(now, wait)?;
                        if self.jobs.is_empty() || self.fits(adds) {
                            continue;
                        }
                        return Ok(Turn::Pending);
                    }
                    let d = self.driver.as_mut().ok_or(Error::Unavailable)?;
                    let b = match lent {
                        Some(lent) => d.begin_in(at, lent, now, stats),
                        None => d.begin(at, len, data.as_deref(), now, stats),
                    };
                    let start = b.wake_at().filter(|&t| t > now);
                    self.call = Some(Call::Stage1 {
                        b: Box::new(b),
                        at,
                        msgs,
                    });
                    // A root with nothing else to do before stage 1 (its
                    // chain starts after it, no chain before it owes frames)
                    // may sleep rather than spin against ranks that share
                    // its cores.
                    if let Some(t) = start.filter(|_| self.jobs.is_empty()) {
                        return Ok(Turn::Sleep(t));
                    }
                }
                Call::Stage1 { mut b, at, msgs } => {
                    if !self.jobs.is_empty() {
                        let d = self.driver.as_mut().ok_or(Error::Unavailable)?;
                        d.stage1(&mut b, now, stats);
                        if let Some(data) = data.as_deref_mut() {
                            b.deliver_into(data);
                        }
                        // Within the bytes that may return before their
                        // chains, as they stand now.
                        let ahead = self.later_bytes() + b.params().message_len <= AHEAD_LIMIT;
                        if in_background && ahead && b.stage1_done() && b.is_complete() {
                            account(&b, "bcast", "returns before its chain", stats);
                            self.jobs
                                .push_back(Job::Later(Box::new(Later { b: *b, msgs, at })));
                            return Ok(Turn::Returned);
                        }
                        self.call = Some(Call::Stage1 { b, at, msgs });
                        self.turn(now, wait)?;
                        if !self.jobs.is_empty() {
                            return Ok(Turn::Pending);
                        }
                        continue;
                    }
                    let run = Run::new(*b, msgs, at.rank, at.size)?;
                    self.call = Some(Call::Chain(Box::new(run)));
                }
                Call::Chain(mut run) => {
                    let d = self.driver.as_mut().ok_or(Error::Unavailable)?;
                    d.step(&mut run, now, wait, stats)?;
                    if let Some(data) = data.as_deref_mut() {
                        run.deliver_into(data);
                    }
                    let done = run.is_done();
                    // A broadcast beyond the limit returns once it would
                    // touch its message no more, and leaves the rest
                    // without it.
                    let returns = if in_background {
                        run.may_return()
                    } else {
                        run.may_return_without_message()
                    };
                    if !(done || returns) {
                        self.call = Some(Call::Chain(run));
                        return Ok(Turn::Pending);
                    }
                    let how = if done { "done" } else { "returns" };
                    account(run.broadcast(), "bcast", how, stats);
                    if done {
                        self.finish(run.into_broadcast());
                    } else {
                        if !in_background {
                            run.give_up_message();
                        }
                        self.jobs.push_back(Job::Rest(run));
                    }
                    return Ok(Turn::Returned);
                }
            }
        }
    }

    /// `b` is over: kept where [`Queue::keep_finished`] asked for it, its
    /// message buffer otherwise kept for a later broadcast.
    fn finish(&mut self, b: Broadcast) {
        if let Some(f) = &mut self.finished {
            f.push(b);
        } else if let Some(d) = &mut self.driver {
            d.recycle(b);
        }
    }

    /// Whether a broadcast that `adds` bytes to the messages the queue
    /// holds (`None`: it may not begin alongside work) may begin alongside
    /// the queued work.
    fn fits(&self, adds: Option<usize>) -> bool {
        let held = self.multicast_bytes();
        adds.zip(held)
            .is_some_and(|(adds, held)| held + adds <= self.limit)
    }
}

/// A broadcast (`what`: `bcast` or `ibcast`) returns or completes its
/// request: its bytes to the statistics.
pub fn account(b: &Broadcast, what: &str, how: &str, stats: &mut Datagrams) {
    stats.bytes_multicast += b.bytes_by_multicast();
    stats.bytes_chain += b.bytes_by_chain();
    debug!(
        "{what} {} of {} bytes {how} on vrank {}: {} by multicast, {} by chain",
        b.params().bcast,
        b.params().message_len,
        b.params().vrank,
        b.bytes_by_multicast(),
        b.bytes_by_chain()
    );
}
