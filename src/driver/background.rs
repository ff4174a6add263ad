//! Broadcasts that returned to their caller but still owe their neighbours
//! chain frames (`END`, the fragments a `NEED` asked for) are finished here,
//! from Open MPI's progress engine, so that no broadcast waits for a rank
//! that has not entered it yet. Each communicator keeps at most one such
//! broadcast ([`Pending`]); its next broadcast finishes it first.
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

use crate::driver::io::Wait;
use crate::driver::multicast;
use crate::ffi::ompi;
use crate::ffi::ompi::Messages;

/// A broadcast over Open MPI.
type Run = multicast::Run<Messages>;
use crate::algorithms::transport::P2pResult;

/// One communicator's broadcast in the background, if any.
#[derive(Default)]
struct Slot {
    run: Option<Run>,
    /// The run failed in the background; its error shows when it is finished.
    broken: bool,
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
    /// Leaves `run` to the progress engine.
    pub fn put(&mut self, run: Run) {
        let slot = self.slot.get_or_insert_with(|| {
            let slot = Arc::new(Mutex::new(Slot::default()));
            locked(&SLOTS).push(Arc::downgrade(&slot));
            ompi::register_progress();
            slot
        });
        let mut slot = locked(slot);
        debug_assert!(slot.run.is_none(), "one background broadcast at a time");
        run.comm().retain();
        slot.run = Some(run);
        slot.broken = false;
        RUNNING.fetch_add(1, Ordering::Relaxed);
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

/// Finishes every broadcast in the background, of every communicator, turning
/// them all in rounds (a rank's run may need a neighbour's frames that come
/// from another of the neighbour's runs); at `MPI_Finalize`.
pub fn finish_all() {
    let mut runs: Vec<Run> = {
        let slots = locked(&SLOTS);
        slots
            .iter()
            .filter_map(Weak::upgrade)
            .filter_map(|slot| locked(&slot).run.take())
            .collect()
    };
    RUNNING.fetch_sub(runs.len(), Ordering::Relaxed);
    let comms: Vec<_> = runs.iter().map(Run::comm).collect();
    while !runs.is_empty() {
        runs.retain_mut(|run| match run.turn(Wait::Progress) {
            Ok(()) => !run.is_done(),
            Err(e) => {
                warn!("a broadcast finishing at MPI_Finalize failed: {e}");
                false
            }
        });
    }
    for comm in comms {
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
    let mut finished = Vec::new();
    slots.retain(|weak| {
        let Some(slot) = weak.upgrade() else {
            return false;
        };
        let Ok(mut slot) = slot.try_lock() else {
            return true;
        };
        if slot.broken {
            return true;
        }
        let Some(run) = slot.run.as_mut() else {
            return true;
        };
        match run.turn(Wait::Look) {
            Ok(()) if run.is_done() => {
                let run = slot.run.take().expect("checked");
                RUNNING.fetch_sub(1, Ordering::Relaxed);
                finished.push(run.comm());
            }
            Ok(()) => {}
            Err(e) => {
                warn!("a broadcast finishing in the background failed: {e}");
                slot.broken = true;
            }
        }
        true
    });
    drop(slots);
    let n = finished.len();
    for comm in finished {
        comm.release();
    }
    n
}
