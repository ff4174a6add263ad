//! A communicator's multicast work, and what of it goes on outside its
//! broadcast calls, from Open MPI's progress engine, so that no broadcast
//! waits for a rank that has not entered it:
//! - the agreement on the communicator's multicast group ([`Joining`]),
//!   started when the communicator is created, where every rank is;
//! - broadcasts that returned to their caller but still owe their neighbours
//!   chain frames (`END`, the fragments a `NEED` asked for);
//! - nonblocking broadcasts (`MPI_Ibcast`, [`Ibcast`]) by multicast, by
//!   the linear or chain algorithm or over two levels, whose requests
//!   complete once the rank owns the message;
//! - the votes of the automatic choice of algorithm ([`crate::group::vote`]),
//!   which use the chains' tag too;
//! - the answers that time its measured calls of short messages at their
//!   root and came after the root's call returned (their tag is another,
//!   and no other work waits for them).
//!
//! Each communicator has one [`Background`]: its
//! [`Queue`] (the multicast driver and the work
//! in the order the calls came, with the rules of what may run alongside
//! what), the agreement on its group, and the answers to its measured calls.
//!
//! Work in the background holds a reference on its communicator (one for
//! all its queued work): MPI lets a program free a communicator while
//! operations on it are pending, and the communicator (with ipmc's module)
//! must outlive them. The reference is
//! given back with no lock held, since that may destroy the communicator and
//! run the module's `disable`. `MPI_Finalize` begins by finishing all
//! background work ([`finish_all`]), so that no reference of ipmc's is left
//! when it destroys the communicators.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use log::warn;

use crate::algorithms::nonblocking::{Message, Shape, Steps};
use crate::base::counters::Datagrams;
use crate::base::error::{Error, Result};
use crate::base::io::Wait;
use crate::base::params::Config;
use crate::component::levels::LevelsIbcast;
use crate::driver::multicast::{Driver, Ranks, Run};
use crate::engine::queue::{self, Queue, Turn, Work};
use crate::group::setup::{Agreed, Agreement, Announce, Facts};
use crate::net::mcast_socket::{McastSocket, OpenError};
use crate::platform::lent::{lend, Loan};
use crate::platform::ompi;
use crate::platform::ompi::{Answers, Comm, Messages, PartBytes, Request, UserMessage};

/// How a rank opens and joins its socket for an announced group.
pub type Open = Box<dyn FnMut(&Announce) -> Result<McastSocket, OpenError> + Send>;

/// A communicator's agreement on its multicast group, kept with what it
/// agreed once it is over.
pub struct Joining {
    agreement: Agreement<McastSocket, Messages>,
    msgs: Messages,
    open: Open,
    agreed: Option<Agreed<McastSocket>>,
}

impl Joining {
    /// Starts the agreement on this rank of `comm` (it posts its first
    /// messages), which tells rank 0 this rank's `facts`.
    pub fn start(comm: Comm, cfg: Config, facts: Facts, open: Open) -> Result<Self> {
        let mut msgs = Messages::new(comm);
        let (rank, size) = (comm.rank(), comm.size());
        let agreement = Agreement::start(&mut msgs, rank, size, cfg, facts)?;
        Ok(Joining {
            agreement,
            msgs,
            open,
            agreed: None,
        })
    }

    fn turn(&mut self, wait: Wait) -> Result<()> {
        if self.agreed.is_none() {
            self.agreed = self.agreement.poll(&mut self.msgs, wait, &mut self.open)?;
        }
        Ok(())
    }

    /// Runs the agreement to its end, waiting as long as it takes.
    fn finish(&mut self) -> Result<()> {
        if self.agreed.is_none() {
            self.agreed = Some(self.agreement.finish(&mut self.msgs, &mut self.open)?);
        }
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.agreed.is_some()
    }

    fn comm(&self) -> Comm {
        self.msgs.comm()
    }
}

/// One `MPI_Ibcast`: it begins when the work before it is over, and its
/// request completes once this rank owns the message (the multicast root:
/// once every datagram went to the socket; the root of a point-to-point
/// broadcast, which sends from a copy: at once); it stays until it owes its
/// neighbours nothing. One of more than `coll_ipmc_background_limit` bytes
/// of a contiguous datatype works in the user's buffer instead (but the
/// linear root, which reads the message once for its sends to share), and
/// its request completes when it will touch that buffer no more (over two
/// levels: when every part is over).
pub struct Ibcast {
    comm: Comm,
    at: Ranks,
    message: UserMessage,
    /// Declared before the loan, so dropped first: a part of its broadcast
    /// over two levels may work in the lent buffer.
    how: How,
    /// The user's buffer lent to its broadcast, until the request completes
    /// (declared before it, so dropped first).
    loan: Option<Loan>,
    request: Option<Request>,
    /// Whether it may work in the user's buffer.
    in_place: bool,
}

/// How an `MPI_Ibcast` goes.
pub enum Form {
    /// The two-stage multicast broadcast.
    Multicast,
    /// The linear or chain algorithm.
    PointToPoint(Shape),
    /// Over two levels: this rank's parts, each with its root there
    /// ([`crate::component::levels::Levels::bcast_parts`]).
    Levels(Vec<(Comm, usize)>),
}

/// An `MPI_Ibcast`'s algorithm, and its state once begun.
enum How {
    Multicast(Option<Box<Run<Messages>>>),
    PointToPoint(Shape, Option<Box<Steps<Messages>>>),
    Levels(Vec<(Comm, usize)>, Option<Box<LevelsIbcast>>),
}

impl Ibcast {
    /// A nonblocking broadcast of `message` in `form`, which completes
    /// `request`; `background_limit` as `coll_ipmc_background_limit`.
    pub fn new(
        comm: Comm,
        at: Ranks,
        message: UserMessage,
        request: Request,
        form: Form,
        background_limit: usize,
    ) -> Self {
        let in_place = message.bytes() > background_limit;
        let how = match form {
            Form::Multicast => How::Multicast(None),
            Form::PointToPoint(shape) => How::PointToPoint(shape, None),
            Form::Levels(parts) => How::Levels(parts, None),
        };
        Ibcast {
            comm,
            at,
            message,
            loan: None,
            request: Some(request),
            how,
            in_place,
        }
    }
}

impl Work<McastSocket> for Ibcast {
    fn turn(
        &mut self,
        d: Option<&mut Driver<McastSocket>>,
        now: Duration,
        wait: Wait,
        stats: &mut Datagrams,
    ) -> Result<bool> {
        let Ibcast {
            comm,
            at,
            message,
            request,
            how,
            in_place,
            loan,
        } = self;
        let at = *at;
        match how {
            How::Multicast(state) => {
                let d = d.expect("multicast work runs once the group is agreed");
                if state.is_none() {
                    let lent = message.lend().filter(|_| *in_place);
                    let b = match lent {
                        Some((l, lent)) => {
                            *loan = Some(l);
                            d.begin_in(at, Box::new(lent), now, stats)
                        }
                        None => {
                            let data = root_data(message, at)?;
                            d.begin(at, message.bytes(), data.as_deref(), now, stats)
                        }
                    };
                    let run = Run::new(b, Messages::queued(*comm), at.rank, at.size)?;
                    *state = Some(Box::new(run));
                }
                let run = state.as_mut().expect("begun above");
                d.step(run, now, wait, stats)?;
                if loan.is_some() {
                    // The message is in the user's buffer: the request
                    // completes when nothing will touch it again (true of
                    // a run that is over as well).
                    if run.may_return_without_message() {
                        queue::account(run.broadcast(), "ibcast", "completes", stats);
                        run.give_up_message();
                        *loan = None;
                        request.take().expect("completes once").complete(Ok(()));
                    }
                } else if request.is_some() && (run.may_return() || run.is_done()) {
                    let b = run.broadcast();
                    queue::account(b, "ibcast", "completes", stats);
                    complete(request, message, at, b.data())?;
                }
                if !run.is_done() {
                    return Ok(false);
                }
                let run = state.take().expect("begun above");
                d.recycle(run.into_broadcast());
                Ok(true)
            }
            How::PointToPoint(shape, state) => {
                if state.is_none() {
                    let lent = message.lend().filter(|_| *in_place);
                    let data = match lent {
                        Some((l, lent)) => {
                            *loan = Some(l);
                            Message::Lent(Box::new(lent))
                        }
                        None if at.rank == at.root => Message::Root(message.read_shared()?),
                        None => Message::own(message.bytes()),
                    };
                    let rank = (at.rank, at.size, at.root);
                    let msgs = Messages::queued(*comm);
                    *state = Some(Box::new(Steps::new(msgs, *shape, rank, data)));
                }
                let steps = state.as_mut().expect("begun above");
                steps.turn(wait)?;
                if loan.is_some() {
                    // The message is in the user's buffer: the request
                    // completes when nothing will touch it again.
                    if steps.leaves_message() {
                        *loan = None;
                        request.take().expect("completes once").complete(Ok(()));
                    }
                } else if request.is_some() && steps.has_message() {
                    complete(request, message, at, steps.data())?;
                }
                Ok(steps.is_done())
            }
            How::Levels(parts, state) => {
                if state.is_none() {
                    let bytes = match message.lend().filter(|_| *in_place) {
                        Some((l, lent)) => {
                            *loan = Some(l);
                            PartBytes::Lent(lent)
                        }
                        None => PartBytes::Own(match root_data(message, at)? {
                            Some(data) => data,
                            None => vec![0; message.bytes()],
                        }),
                    };
                    let parts = std::mem::take(parts);
                    *state = Some(Box::new(LevelsIbcast::new(parts, bytes)));
                }
                let levels = state.as_mut().expect("begun above");
                levels.turn(wait)?;
                if !levels.is_done() {
                    return Ok(false);
                }
                if loan.take().is_some() {
                    // Every part is over: none touches the user's buffer.
                    request.take().expect("completes once").complete(Ok(()));
                } else {
                    complete(request, message, at, levels.data())?;
                }
                Ok(true)
            }
        }
    }

    /// A nonblocking broadcast's request completes with the error, once
    /// its broadcast no longer touches the user's buffer: dropped first
    /// (a part over two levels working in that buffer is waited for), then
    /// the loan.
    fn fail(mut self, e: Error) {
        let request = self.request.take();
        drop(self);
        if let Some(request) = request {
            request.complete(Err(e));
        }
    }
}

/// The root's message, read when its broadcast begins.
fn root_data(message: &UserMessage, at: Ranks) -> Result<Option<Vec<u8>>> {
    if at.rank == at.root {
        Ok(Some(message.read()?))
    } else {
        Ok(None)
    }
}

/// This rank owns `data`: the request completes, a non-root's message
/// written to the user's buffer first.
fn complete(
    request: &mut Option<Request>,
    message: &mut UserMessage,
    at: Ranks,
    data: &[u8],
) -> Result<()> {
    if at.rank != at.root {
        message.write(data)?;
    }
    request.take().expect("completes once").complete(Ok(()));
    Ok(())
}

/// A communicator's queue over Open MPI.
type OmpiQueue = Queue<McastSocket, Messages, Ibcast>;

/// The answers to one measured call of this rank as its root. It holds a
/// reference on the communicator, as queued work does: the receives hold
/// Open MPI's own, and the last one given back frees the communicator,
/// whose module then takes this slot's lock.
struct Awaited {
    /// `None`: messages that only need to complete (a barrier's
    /// point-to-point releases), not timed.
    ticket: Option<u64>,
    started: Instant,
    answers: Answers,
    comm: Comm,
}

/// One communicator's multicast driver and work.
struct Slot {
    /// The time the queue is told is since this.
    epoch: Instant,
    /// The agreement on the group, kept after it ended until the module
    /// takes what it agreed.
    joining: Option<Joining>,
    queue: OmpiQueue,
    /// The communicator, while the queue holds work (its reference).
    held: Option<Comm>,
    /// Background work failed (and was given up); the next broadcast on the
    /// communicator reports it.
    broken: Option<Error>,
    /// Measured calls whose answers this rank receives as their root.
    awaited: Vec<Awaited>,
    /// Those whose answers all arrived: ticket, and time from the call's
    /// start to the last answer (as this rank saw it arrive).
    answered: Vec<(u64, Duration)>,
    /// The next call's ticket.
    tickets: u64,
}

impl Slot {
    fn new(background_limit: usize) -> Self {
        Slot {
            epoch: Instant::now(),
            joining: None,
            queue: Queue::new(background_limit),
            held: None,
            broken: None,
            awaited: Vec::new(),
            answered: Vec::new(),
            tickets: 0,
        }
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// Holds a reference on `comm` while the queue holds work, and gives it
    /// back (to `ended`) when the queue is empty.
    fn hold(&mut self, comm: Option<Comm>, ended: &mut Vec<Comm>) {
        match (self.queue.is_busy(), self.held, comm) {
            // Work is queued only by calls that name their communicator.
            (true, None, Some(comm)) => {
                comm.retain();
                RUNNING.fetch_add(1, Ordering::Relaxed);
                self.held = Some(comm);
            }
            (false, Some(held), _) => {
                RUNNING.fetch_sub(1, Ordering::Relaxed);
                ended.push(held);
                self.held = None;
            }
            _ => {}
        }
    }

    /// One turn of the slot's work; the communicators of the work that ended
    /// go to `ended`, for their reference to be given back. Whether work is
    /// left.
    fn turn(&mut self, wait: Wait, ended: &mut Vec<Comm>) -> Result<bool> {
        self.look_answers(ended)?;
        if let Some(joining) = self.joining.as_mut().filter(|j| !j.is_done()) {
            joining.turn(wait)?;
            if joining.is_done() {
                RUNNING.fetch_sub(1, Ordering::Relaxed);
                ended.push(joining.comm());
            }
        }
        let turned = self.queue.turn(self.now(), wait);
        self.hold(None, ended);
        turned?;
        Ok(self.busy())
    }

    fn busy(&self) -> bool {
        self.queue.is_busy() || self.joining.as_ref().is_some_and(|j| !j.is_done())
    }

    /// Notes the measured calls whose answers all arrived, with the time;
    /// their communicators go to `ended`.
    fn look_answers(&mut self, ended: &mut Vec<Comm>) -> Result<()> {
        self.test_answers(Wait::Look, ended)
    }

    /// [`Slot::look_answers`], testing the answers as `wait` says.
    fn test_answers(&mut self, wait: Wait, ended: &mut Vec<Comm>) -> Result<()> {
        let mut i = 0;
        while i < self.awaited.len() {
            if self.awaited[i].answers.all_done(wait)? {
                let a = self.awaited.swap_remove(i);
                if let Some(ticket) = a.ticket {
                    self.answered.push((ticket, a.started.elapsed()));
                }
                self.forget(a, ended);
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// Waits for every answer this rank expects. Its queued work moves on
    /// meanwhile (a rank may owe the chain frames that another rank needs
    /// before it can answer) but need not end: a broadcast that some rank
    /// has not entered yet could not. Once no work is queued, the answers
    /// are waited for in Open MPI's progress engine.
    fn await_answers(&mut self, ended: &mut Vec<Comm>) -> Result<()> {
        if let Some(e) = self.broken.take() {
            return Err(e);
        }
        while self.busy() && !self.awaited.is_empty() {
            if let Err(e) = self.turn(Wait::Progress, ended) {
                self.abandon(e, ended);
                return Err(e);
            }
            self.test_answers(Wait::Progress, ended)?;
        }
        self.look_answers(ended)?;
        while let Some(mut a) = self.awaited.pop() {
            let waited = a.answers.wait();
            let done = a.ticket.map(|t| (t, a.started.elapsed()));
            self.forget(a, ended);
            waited?;
            self.answered.extend(done);
        }
        Ok(())
    }

    fn forget(&mut self, a: Awaited, ended: &mut Vec<Comm>) {
        RUNNING.fetch_sub(1, Ordering::Relaxed);
        ended.push(a.comm);
    }

    /// See [`Background::bcast`].
    fn bcast(
        &mut self,
        comm: Comm,
        at: Ranks,
        data: &mut [u8],
        stats: &mut Datagrams,
        ended: &mut Vec<Comm>,
    ) -> Result<()> {
        if let Some(e) = self.broken.take() {
            return Err(e);
        }
        let msgs = Messages::queued(comm);
        // A broadcast that finishes before it returns has its message in
        // the caller's buffer: one copy and one message's memory less.
        let result = if self.queue.holds_to_the_end(data.len()) {
            lend(data, |lent| {
                self.queue.enter_lent_bcast(at, Box::new(lent), msgs);
                self.bcast_turns(None, stats, ended)
            })
        } else {
            self.queue.enter_bcast(at, data.len(), msgs);
            self.bcast_turns(Some(data), stats, ended)
        };
        self.hold(Some(comm), ended);
        result
    }

    /// Turns the blocking broadcast entered until it returns, on `data` as
    /// [`Queue::bcast_turn`]; one that fails is over. A failed job gives up
    /// the queue (the call's own failure leaves the work before it be).
    fn bcast_turns(
        &mut self,
        mut data: Option<&mut [u8]>,
        stats: &mut Datagrams,
        ended: &mut Vec<Comm>,
    ) -> Result<()> {
        loop {
            let now = self.now();
            match self
                .queue
                .bcast_turn(data.as_deref_mut(), now, Wait::Progress, stats)
            {
                Ok(Turn::Returned) => return Ok(()),
                Ok(Turn::Sleep(until)) => std::thread::sleep(until.saturating_sub(now)),
                Ok(Turn::Pending) => {
                    if let Err(e) = self.look_answers(ended) {
                        self.queue.end_call();
                        return Err(e);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Gives up all work after `e`.
    fn abandon(&mut self, e: Error, ended: &mut Vec<Comm>) {
        if self.joining.as_ref().is_some_and(|j| !j.is_done()) {
            let joining = self.joining.take().expect("checked");
            RUNNING.fetch_sub(1, Ordering::Relaxed);
            ended.push(joining.comm());
        }
        self.queue.abandon(e);
        self.hold(None, ended);
        // Their receives are cancelled.
        while let Some(a) = self.awaited.pop() {
            self.forget(a, ended);
        }
    }

    /// Runs every job to its end, waiting as long as it takes.
    fn finish_jobs(&mut self, ended: &mut Vec<Comm>) -> Result<()> {
        self.finish_while(|q| q.is_busy(), ended)
    }

    /// Runs the jobs up to the last vote to their end, waiting as long as it
    /// takes.
    fn finish_votes(&mut self, ended: &mut Vec<Comm>) -> Result<()> {
        self.finish_while(|q| q.holds_votes(), ended)
    }

    /// Turns the work, waiting as long as it takes, while `busy` says so of
    /// the queue; a failure gives it all up.
    fn finish_while(
        &mut self,
        busy: impl Fn(&OmpiQueue) -> bool,
        ended: &mut Vec<Comm>,
    ) -> Result<()> {
        if let Some(e) = self.broken.take() {
            return Err(e);
        }
        while busy(&self.queue) {
            if let Err(e) = self.turn(Wait::Progress, ended) {
                self.abandon(e, ended);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Queues `push`'s work on `comm` and moves the work on at once as far
    /// as it can. After a failure in the background nothing more runs here
    /// until a blocking broadcast reports it: the work fails.
    fn start(&mut self, comm: Comm, push: impl FnOnce(&mut OmpiQueue), ended: &mut Vec<Comm>) {
        push(&mut self.queue);
        self.hold(Some(comm), ended);
        if let Some(e) = self.broken {
            self.queue.abandon(e);
            self.hold(None, ended);
            return;
        }
        if let Err(e) = self.turn(Wait::Look, ended) {
            self.abandon(e, ended);
            self.broken = Some(e);
        }
    }
}

/// Every communicator's slot, for the progress engine.
static SLOTS: Mutex<Vec<Weak<Mutex<Slot>>>> = Mutex::new(Vec::new());
/// Slots made since the progress engine last took them into [`SLOTS`],
/// which it holds while it turns them: a nonblocking broadcast over two
/// levels starts its parts' broadcasts from there, and the first work of a
/// part's communicator makes its slot.
static NEW_SLOTS: Mutex<Vec<Weak<Mutex<Slot>>>> = Mutex::new(Vec::new());

/// Every communicator's slot, the new ones taken in: `SLOTS` locked (then
/// `NEW_SLOTS`, never the other way round).
fn take_in_new(slots: &mut Vec<Weak<Mutex<Slot>>>) {
    slots.append(&mut locked(&NEW_SLOTS));
}
/// Pieces of work in the background now: the progress callback's quick way out.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Whether no communicator has work in the background: then [`progress`]
/// has nothing to do (Open MPI's progress loop asks on every turn).
pub fn is_idle() -> bool {
    RUNNING.load(Ordering::Relaxed) == 0
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic caught at the FFI boundary may poison a lock; the data stays usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Gives back the references of the communicators whose work ended; the
/// caller holds no lock (see the module's summary).
fn release(ended: Vec<Comm>) {
    for comm in ended {
        comm.release();
    }
}

/// A communicator's multicast driver and its work in the background.
pub struct Background {
    background_limit: usize,
    slot: Option<Arc<Mutex<Slot>>>,
}

impl Background {
    /// No work yet; blocking broadcasts of at most `background_limit` bytes
    /// leave what they owe their neighbours here.
    pub fn new(background_limit: usize) -> Self {
        Background {
            background_limit,
            slot: None,
        }
    }

    /// The communicator's slot, locked (made and known to the progress engine
    /// the first time).
    fn slot(&mut self) -> MutexGuard<'_, Slot> {
        let limit = self.background_limit;
        let slot = self.slot.get_or_insert_with(|| {
            let slot = Arc::new(Mutex::new(Slot::new(limit)));
            locked(&NEW_SLOTS).push(Arc::downgrade(&slot));
            ompi::register_progress();
            slot
        });
        locked(slot)
    }

    /// Runs `f` on the slot and gives back the references of the work that
    /// ended, with no lock held. The callers are calls on the communicator
    /// (or its `disable` during `MPI_Finalize`): these are never the last
    /// references.
    fn with_slot<T>(&mut self, f: impl FnOnce(&mut Slot, &mut Vec<Comm>) -> T) -> T {
        let mut ended = Vec::new();
        let out = f(&mut self.slot(), &mut ended);
        release(ended);
        out
    }

    /// Leaves the agreement on the group to the progress engine.
    pub fn join(&mut self, joining: Joining) {
        joining.comm().retain();
        RUNNING.fetch_add(1, Ordering::Relaxed);
        self.slot().joining = Some(joining);
    }

    /// Finishes the agreement on the group, if it was left here, waiting as
    /// long as it takes, and returns what it agreed.
    pub fn finish_joining(&mut self) -> Result<Option<Agreed<McastSocket>>> {
        let Some(mut joining) = self.slot().joining.take() else {
            return Ok(None);
        };
        if !joining.is_done() {
            RUNNING.fetch_sub(1, Ordering::Relaxed);
            let comm = joining.comm();
            let result = joining.finish();
            // As in `finish`: not the last reference.
            comm.release();
            result?;
        }
        Ok(joining.agreed.take())
    }

    /// Multicasts from now on with `driver`.
    pub fn set_driver(&mut self, driver: Driver<McastSocket>) {
        self.slot().queue.set_driver(driver);
    }

    /// Gives the multicast driver up (its work finished), for a later
    /// communicator of the same processes ([`crate::component::parked`]).
    pub fn take_driver(&mut self) -> Option<Driver<McastSocket>> {
        self.slot.as_ref()?;
        self.slot().queue.take_driver()
    }

    /// Finishes all work of the communicator, waiting as long as it takes:
    /// before a blocking broadcast on it (every algorithm uses the broadcast
    /// tag), and when it is freed.
    pub fn finish(&mut self) -> Result<()> {
        if self.slot.is_none() {
            return Ok(());
        }
        self.with_slot(Slot::finish_jobs)
    }

    /// Finishes the communicator's queued votes (and the work before them),
    /// waiting as long as it takes; the work after them goes on.
    pub fn finish_votes(&mut self) -> Result<()> {
        if self.slot.is_none() {
            return Ok(());
        }
        self.with_slot(Slot::finish_votes)
    }

    /// One blocking two-stage broadcast of `data` (the root's message; filled
    /// in on the other ranks), by the rules of [`crate::engine::queue`]: the
    /// caller finished all work before it but multicast broadcasts' chains
    /// and votes, as it must before any other broadcast.
    pub fn bcast(
        &mut self,
        comm: Comm,
        at: Ranks,
        data: &mut [u8],
        stats: &mut Datagrams,
    ) -> Result<()> {
        self.with_slot(|slot, ended| slot.bcast(comm, at, data, stats, ended))
    }

    /// The release of ipmc's barrier ([`crate::algorithms::barrier`]) on
    /// this rank, once every rank arrived: the root (rank 0) multicasts its
    /// one-byte message; every other rank waits until its datagram came
    /// (`Ok(true)`) or `by_p2p` finds that the point-to-point release did
    /// (`Ok(false)`). Only stage 1 runs: the point-to-point releases are the
    /// guarantee, so nothing goes along the chain. All other work finishes
    /// first.
    pub fn release(
        &mut self,
        at: Ranks,
        mut by_p2p: impl FnMut() -> Result<bool>,
        stats: &mut Datagrams,
    ) -> Result<bool> {
        self.finish()?;
        let mut slot = self.slot();
        let d = slot.queue.driver().ok_or(Error::Unavailable)?;
        let byte = [0u8; crate::algorithms::barrier::RELEASE_LEN];
        let mut b = d.begin(at, byte.len(), Some(&byte), Duration::ZERO, stats);
        let started = Instant::now();
        if at.rank == at.root {
            std::thread::sleep(b.stage1_start().unwrap_or_default());
            while !b.stage1_done() {
                d.stage1(&mut b, started.elapsed(), stats);
            }
            return Ok(true);
        }
        loop {
            d.stage1(&mut b, started.elapsed(), stats);
            if b.is_complete() {
                return Ok(true);
            }
            // The progress engine may run here; it leaves a locked slot be.
            if by_p2p()? {
                return Ok(false);
            }
        }
    }

    /// Whether the work in the background is blocking multicast broadcasts'
    /// chains and votes only, which a multicast broadcast may begin
    /// alongside.
    pub fn holds_only_multicast(&self) -> bool {
        match &self.slot {
            Some(s) => locked(s).queue.holds_only_multicast(),
            None => true,
        }
    }

    /// Leaves a nonblocking broadcast to the background, after the work
    /// before it; it moves on at once as far as it can. (A multicast one
    /// only once the group is agreed.)
    pub fn ibcast(&mut self, ib: Ibcast) {
        let comm = ib.comm;
        self.with_slot(|slot, ended| slot.start(comm, |q| q.push_work(ib), ended));
    }

    /// Leaves this rank's part in a vote on size class `class` (its vector
    /// `mine`) to the background, after the work before it.
    pub fn vote(&mut self, comm: Comm, class: usize, mine: Vec<u32>) {
        let (rank, size) = (comm.rank(), comm.size());
        let msgs = Messages::queued(comm);
        self.with_slot(|slot, ended| {
            slot.start(comm, |q| q.push_vote(msgs, rank, size, class, mine), ended)
        });
    }

    /// Leaves the `answers` to this rank's measured call as its root on
    /// `comm`, which began at `started`, to the background, which notes
    /// when the last one arrives (from Open MPI's progress engine, while
    /// the root is in any MPI call); returns the call's ticket for
    /// [`Background::take_answered`].
    pub fn expect_answers(
        &mut self,
        comm: Comm,
        started: Instant,
        answers: Answers,
    ) -> Result<u64> {
        let mut slot = self.slot();
        let ticket = slot.tickets;
        slot.tickets += 1;
        comm.retain();
        RUNNING.fetch_add(1, Ordering::Relaxed);
        slot.awaited.push(Awaited {
            ticket: Some(ticket),
            started,
            answers,
            comm,
        });
        Ok(ticket)
    }

    /// Leaves empty messages of a call on `comm` that has returned (a
    /// barrier's point-to-point releases) to the background, which
    /// completes them: a pending request holds its communicator, which
    /// could otherwise never be freed.
    pub fn complete_later(&mut self, comm: Comm, msgs: Answers) {
        comm.retain();
        RUNNING.fetch_add(1, Ordering::Relaxed);
        self.slot().awaited.push(Awaited {
            ticket: None,
            started: Instant::now(),
            answers: msgs,
            comm,
        });
    }

    /// Waits until every answer to this rank's measured calls as a root
    /// arrived, moving the work in the background on meanwhile: a rank may
    /// owe the chain frames that another rank needs before it can answer,
    /// and while this rank waits it holds its work's lock, which the
    /// progress engine then passes by. That work need not end first: a
    /// broadcast that some rank has not entered yet (it waits for a message
    /// this rank sends after it, as Open MPI's eager broadcasts allow) could
    /// not, while the answers of calls that every rank made can come.
    pub fn await_answers(&mut self) -> Result<()> {
        if self.slot.is_none() {
            return Ok(());
        }
        self.with_slot(Slot::await_answers)
    }

    /// The measured calls whose answers all arrived since the last call:
    /// ticket and time.
    pub fn take_answered(&mut self) -> Result<Vec<(u64, Duration)>> {
        if self.slot.is_none() {
            return Ok(Vec::new());
        }
        self.with_slot(|slot, ended| {
            slot.look_answers(ended)
                .map(|()| std::mem::take(&mut slot.answered))
        })
    }

    /// The votes that ended since the last call: size class and result.
    pub fn take_votes(&mut self) -> Vec<(usize, Vec<u32>)> {
        match &self.slot {
            Some(s) => locked(s).queue.take_votes(),
            None => Vec::new(),
        }
    }

    /// Whether work is left in the background (the agreement or jobs).
    pub fn busy(&self) -> bool {
        self.slot.as_ref().is_some_and(|s| locked(s).busy())
    }

    /// What the work in the background did with datagrams.
    pub fn datagrams(&self) -> Datagrams {
        self.slot
            .as_ref()
            .map(|s| locked(s).queue.datagrams())
            .unwrap_or_default()
    }
}

/// Finishes the background work of every communicator, turning it all in
/// rounds (a rank's work may need a neighbour's messages that come from
/// another of the neighbour's pieces of work); at `MPI_Finalize`.
pub fn finish_all() {
    let slots: Vec<Arc<Mutex<Slot>>> = {
        let mut all = locked(&SLOTS);
        take_in_new(&mut all);
        all.iter().filter_map(Weak::upgrade).collect()
    };
    let mut ended = Vec::new();
    let mut busy = true;
    while busy {
        busy = false;
        for slot in &slots {
            let mut slot = locked(slot);
            if !slot.busy() {
                continue;
            }
            match slot.turn(Wait::Progress, &mut ended) {
                Ok(more) => busy |= more,
                Err(e) => {
                    warn!("background work finishing at MPI_Finalize failed: {e}");
                    slot.abandon(e, &mut ended);
                }
            }
        }
    }
    // Every rank sent its answers within its broadcasts.
    for slot in &slots {
        if let Err(e) = locked(slot).await_answers(&mut ended) {
            warn!("answers to measured broadcasts at MPI_Finalize failed: {e}");
        }
    }
    release(ended);
}

/// One turn of every communicator's background work, from Open MPI's
/// progress engine; returns how many pieces finished. Never waits for a lock:
/// a communicator that is busy (its own call runs, maybe on this very
/// thread, which is how this gets called) is simply left for the next time.
/// Its caller asks [`is_idle`] first.
pub fn progress() -> usize {
    let Ok(mut slots) = SLOTS.try_lock() else {
        return 0;
    };
    take_in_new(&mut slots);
    let mut ended = Vec::new();
    slots.retain(|weak| {
        let Some(slot) = weak.upgrade() else {
            return false;
        };
        let Ok(mut slot) = slot.try_lock() else {
            return true;
        };
        if slot.broken.is_some() || (!slot.busy() && slot.awaited.is_empty()) {
            return true;
        }
        if let Err(e) = slot.turn(Wait::Look, &mut ended) {
            warn!("background work on a communicator failed: {e}");
            slot.abandon(e, &mut ended);
            slot.broken = Some(e);
        }
        true
    });
    drop(slots);
    let n = ended.len();
    release(ended);
    n
}
