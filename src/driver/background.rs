//! Work of a communicator that goes on outside its broadcast calls, from
//! Open MPI's progress engine, so that no broadcast waits for a rank that has
//! not entered it:
//! - broadcasts that returned to their caller but still owe their neighbours
//!   chain frames (`END`, the fragments a `NEED` asked for);
//! - the agreement on the communicator's multicast group ([`Joining`]),
//!   started when the communicator is created, where every rank is.
//!
//! Each communicator keeps at most one piece of such work ([`Pending`]); its
//! next broadcast finishes it first.
//!
//! A broadcast in the background holds a reference on its communicator:
//! MPI lets a program free a communicator while operations on it are
//! pending, and the communicator (with ipmc's module) must outlive them. The
//! reference is given back with no lock held, since that may destroy the
//! communicator and run the module's `disable`. `MPI_Finalize` begins by
//! finishing every broadcast still in the background ([`finish_all`]), so
//! that no reference of ipmc's is left when it destroys the communicators.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use log::warn;

use crate::component::config::Config;
use crate::driver::io::Wait;
use crate::driver::multicast;
use crate::ffi::ompi;
use crate::ffi::ompi::{Comm, Messages};
use crate::group::setup::{Agreed, Agreement, Announce};
use crate::net::mcast_socket::{McastSocket, OpenError};

/// A broadcast over Open MPI.
type Run = multicast::Run<Messages>;
use crate::algorithms::transport::P2pResult;

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
    /// messages); `families` are the address families of this rank's interface.
    pub fn start(comm: Comm, cfg: Config, families: (bool, bool), open: Open) -> P2pResult<Self> {
        let mut msgs = Messages::new(comm);
        let (rank, size) = (comm.rank(), comm.size());
        let agreement = Agreement::start(&mut msgs, rank, size, cfg, families)?;
        Ok(Joining {
            agreement,
            msgs,
            open,
            agreed: None,
        })
    }

    fn turn(&mut self, wait: Wait) -> P2pResult<()> {
        if self.agreed.is_none() {
            self.agreed = self.agreement.poll(&mut self.msgs, wait, &mut self.open)?;
        }
        Ok(())
    }

    /// Runs the agreement to its end, waiting as long as it takes.
    fn finish(&mut self) -> P2pResult<()> {
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

/// One communicator's work in the background, if any: a broadcast, or the
/// agreement on its group (kept after it ended, until the module takes it).
#[derive(Default)]
struct Slot {
    run: Option<Run>,
    joining: Option<Joining>,
    /// The work failed in the background; its error shows when it is finished.
    broken: bool,
}

impl Slot {
    /// One turn of the slot's work; the communicators of the work that ended
    /// go to `ended`, for their reference to be given back. Whether work is
    /// left.
    fn turn(&mut self, wait: Wait, ended: &mut Vec<Comm>) -> P2pResult<bool> {
        if let Some(joining) = self.joining.as_mut().filter(|j| !j.is_done()) {
            joining.turn(wait)?;
            if joining.is_done() {
                RUNNING.fetch_sub(1, Ordering::Relaxed);
                ended.push(joining.comm());
            }
        }
        if let Some(run) = self.run.as_mut() {
            run.turn(wait)?;
            if run.is_done() {
                let run = self.run.take().expect("checked");
                RUNNING.fetch_sub(1, Ordering::Relaxed);
                ended.push(run.comm());
            }
        }
        Ok(self.busy())
    }

    fn busy(&self) -> bool {
        self.run.is_some() || self.joining.as_ref().is_some_and(|j| !j.is_done())
    }

    /// Gives up the work left after an error at `MPI_Finalize`.
    fn abandon(&mut self, ended: &mut Vec<Comm>) {
        let run = self.run.take().map(|r| r.comm());
        let joining = match &self.joining {
            Some(j) if !j.is_done() => self.joining.take().map(|j| j.comm()),
            _ => None,
        };
        for comm in run.into_iter().chain(joining) {
            RUNNING.fetch_sub(1, Ordering::Relaxed);
            ended.push(comm);
        }
    }
}

/// Every communicator's slot, for the progress engine.
static SLOTS: Mutex<Vec<Weak<Mutex<Slot>>>> = Mutex::new(Vec::new());
/// Runs in the background now: the progress callback's quick way out.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic caught at the FFI boundary may poison a lock; the data stays usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A communicator's broadcast that still owes its neighbours frames.
#[derive(Default)]
pub struct Pending {
    slot: Option<Arc<Mutex<Slot>>>,
}

impl Pending {
    /// The communicator's slot, locked, for new work, which it counts as
    /// running.
    fn slot_for_work(&mut self) -> MutexGuard<'_, Slot> {
        let slot = self.slot.get_or_insert_with(|| {
            let slot = Arc::new(Mutex::new(Slot::default()));
            locked(&SLOTS).push(Arc::downgrade(&slot));
            ompi::register_progress();
            slot
        });
        let mut slot = locked(slot);
        debug_assert!(!slot.busy(), "one piece of background work at a time");
        slot.broken = false;
        RUNNING.fetch_add(1, Ordering::Relaxed);
        slot
    }

    /// Leaves `run` to the progress engine.
    pub fn put(&mut self, run: Run) {
        run.comm().retain();
        self.slot_for_work().run = Some(run);
    }

    /// Leaves the agreement on the group to the progress engine.
    pub fn join(&mut self, joining: Joining) {
        joining.comm().retain();
        self.slot_for_work().joining = Some(joining);
    }

    /// Finishes the agreement on the group, if it was left here, waiting as
    /// long as it takes, and returns what it agreed.
    pub fn finish_joining(&mut self) -> P2pResult<Option<Agreed<McastSocket>>> {
        let Some(slot) = &self.slot else {
            return Ok(None);
        };
        let Some(mut joining) = locked(slot).joining.take() else {
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

    /// Finishes the background broadcast, if any, waiting as long as it takes.
    pub fn finish(&mut self) -> P2pResult<()> {
        let Some(slot) = &self.slot else {
            return Ok(());
        };
        let Some(mut run) = locked(slot).run.take() else {
            return Ok(());
        };
        RUNNING.fetch_sub(1, Ordering::Relaxed);
        let comm = run.comm();
        let mut result = Ok(());
        while !run.is_done() {
            if let Err(e) = run.turn(Wait::Progress) {
                result = Err(e);
                break;
            }
        }
        drop(run);
        // The caller is a broadcast on the communicator, or its `disable` during
        // `MPI_Finalize`: either way this is not the last reference.
        comm.release();
        result
    }
}

/// Finishes the background work of every communicator, turning it all in
/// rounds (a rank's work may need a neighbour's messages that come from
/// another of the neighbour's pieces of work); at `MPI_Finalize`.
pub fn finish_all() {
    let slots: Vec<Arc<Mutex<Slot>>> = locked(&SLOTS).iter().filter_map(Weak::upgrade).collect();
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
                    slot.abandon(&mut ended);
                }
            }
        }
    }
    for comm in ended {
        comm.release();
    }
}

/// One turn of every background broadcast, from Open MPI's progress engine;
/// returns how many finished. Never waits for a lock: a broadcast whose
/// communicator is busy (its own call runs, maybe on this very thread, which
/// is how this gets called) is simply left for the next time.
pub fn progress() -> usize {
    if RUNNING.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    let Ok(mut slots) = SLOTS.try_lock() else {
        return 0;
    };
    let mut ended = Vec::new();
    slots.retain(|weak| {
        let Some(slot) = weak.upgrade() else {
            return false;
        };
        let Ok(mut slot) = slot.try_lock() else {
            return true;
        };
        if slot.broken || !slot.busy() {
            return true;
        }
        if let Err(e) = slot.turn(Wait::Look, &mut ended) {
            warn!("background work on a communicator failed: {e}");
            slot.broken = true;
        }
        true
    });
    drop(slots);
    let n = ended.len();
    for comm in ended {
        comm.release();
    }
    n
}
