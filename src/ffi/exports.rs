//! The entry points C calls: `ipmc_rs_*`, declared in `ompi-glue/ipmc_glue.h`.
//! Every one runs its body under [`guard`]: a panic stops there, never
//! unwinds into C, and the MPI process goes on without ipmc where it hit the
//! error.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::fmt;
use std::panic::{self, AssertUnwindSafe, UnwindSafe};
use std::ptr;

use crate::base::error::{status, Result, OMPI_ERROR, OMPI_ERR_NOT_AVAILABLE, OMPI_SUCCESS};
use crate::base::params::Config;
use crate::component::levels::Layout;
use crate::component::logging::{self, tell_once, Notice};
use crate::component::module::{
    decline_by_creator, decline_node_local, decline_reason, disagreement, Module, Published,
};
use crate::component::nodes::Nodes;
use crate::component::stats::{PvarClass, Stats};
use crate::platform::c_line;
use crate::platform::ompi::{AllgatherCall, BarrierCall, BcastCall, Comm, Request};
use crate::platform::sys::{
    self, ipmc_module, ipmc_rs_module, ompi_communicator_t, ompi_datatype_t, ompi_request_t,
};

/// Fails to compile unless `ours` has exactly the type of the C header's `theirs`.
macro_rules! same_signature {
    ($($theirs:path = $ours:ident),* $(,)?) => {
        $(const _: () = {
            let _: [_; 2] = [$theirs, $ours];
        };)*
    };
}

same_signature!(
    sys::ipmc_rs_init_query = ipmc_rs_init_query,
    sys::ipmc_rs_comm_query = ipmc_rs_comm_query,
    sys::ipmc_rs_config_digest = ipmc_rs_config_digest,
    sys::ipmc_rs_module_enable = ipmc_rs_module_enable,
    sys::ipmc_rs_module_disable = ipmc_rs_module_disable,
    sys::ipmc_rs_module_destroy = ipmc_rs_module_destroy,
    sys::ipmc_rs_bcast = ipmc_rs_bcast,
    sys::ipmc_rs_ibcast = ipmc_rs_ibcast,
    sys::ipmc_rs_progress = ipmc_rs_progress,
    sys::ipmc_rs_finish_all = ipmc_rs_finish_all,
    sys::ipmc_rs_pvar_info = ipmc_rs_pvar_info,
    sys::ipmc_rs_pvar_read = ipmc_rs_pvar_read,
);

/// A panic caught at the boundary: its message and where it was raised.
#[derive(Debug)]
struct Panic {
    message: String,
    at: Option<String>,
}

impl fmt::Display for Panic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One line: `assert_eq!` messages span several.
        let message: Vec<&str> = self.message.lines().map(str::trim).collect();
        write!(f, "{}", message.join("; "))?;
        match &self.at {
            Some(at) => write!(f, " (at {at})"),
            None => Ok(()),
        }
    }
}

thread_local! {
    /// How many guarded entry points run on this thread (progress may run
    /// inside a broadcast).
    static GUARDED: Cell<u32> = const { Cell::new(0) };
    /// Where the last guarded panic on this thread was raised.
    static PANIC_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Chains a panic hook (once per process) that keeps the location of a
/// panic inside [`caught`] for its warning, and leaves Rust's own report of
/// it out when that warning is shown, so a panic is told in one line. Any
/// other panic goes to the hook that was installed before.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if GUARDED.try_with(Cell::get).unwrap_or(0) == 0 {
                return previous(info);
            }
            let at = info.location().map(ToString::to_string);
            let _ = PANIC_AT.try_with(|p| p.replace(at));
            if !log::log_enabled!(log::Level::Warn) {
                previous(info);
            }
        }));
    });
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "a panic without a message"
    }
}

/// Runs `f`, stopping a panic in it (unwinding into C would be undefined
/// behaviour).
fn caught<T>(f: impl FnOnce() -> T + UnwindSafe) -> Result<T, Panic> {
    install_panic_hook();
    GUARDED.with(|g| g.set(g.get() + 1));
    let result = panic::catch_unwind(f);
    GUARDED.with(|g| g.set(g.get() - 1));
    result.map_err(|payload| Panic {
        message: panic_message(&*payload).to_string(),
        at: PANIC_AT.with(RefCell::take),
    })
}

/// The one warning line of a caught panic; `what` says where it happened
/// and how ipmc goes on.
fn report(what: &str, panic: &Panic) {
    log::warn!("hit an internal error {what}: {panic}");
}

/// The body `f` of an entry point: its value, or after a panic (reported
/// with `what`, see [`report`]) `fallback`.
fn guard<T>(what: &str, fallback: T, f: impl FnOnce() -> T + UnwindSafe) -> T {
    caught(f).unwrap_or_else(|panic| {
        report(what, &panic);
        fallback
    })
}

include!(concat!(env!("OUT_DIR"), "/params_from_c.rs"));

/// A string parameter's value; the MCA base stores an unset string as NULL.
fn c_string(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: a non-NULL string parameter points to the MCA base's
    // NUL-terminated copy, which lives while the component is loaded.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// `collm_init_query`: once per process, after the parameters are registered.
///
/// # Safety
/// `cfg` points to the component's parameter storage, `err` to `err_len`
/// writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ipmc_rs_init_query(
    cfg: *const sys::ipmc_config_t,
    err: *mut std::ffi::c_char,
    err_len: usize,
) -> c_int {
    let what = "in init_query and steps aside in this process";
    guard(what, OMPI_ERR_NOT_AVAILABLE, || {
        // SAFETY: the C caller passes its live parameter storage.
        let cfg = Config::from(unsafe { &*cfg });
        logging::init(cfg.verbose);
        match cfg.validate() {
            Ok(()) => OMPI_SUCCESS,
            Err(why) => {
                let why = c_line(&why);
                let bytes = why.as_bytes_with_nul();
                let n = bytes.len().min(err_len);
                if n > 0 {
                    // SAFETY: the caller's buffer has `err_len` writable bytes;
                    // the copy stays within it and ends with a NUL.
                    unsafe {
                        ptr::copy_nonoverlapping(bytes.as_ptr().cast(), err, n);
                        *err.add(n - 1) = 0;
                    }
                }
                OMPI_ERR_NOT_AVAILABLE
            }
        }
    })
}

/// `collm_comm_query`: the per-communicator state, or NULL to decline.
///
/// # Safety
/// `comm` is the communicator being set up, `cfg` the parameter storage and
/// `priority` a valid out-pointer.
#[no_mangle]
pub unsafe extern "C" fn ipmc_rs_comm_query(
    comm: *mut ompi_communicator_t,
    cfg: *const sys::ipmc_config_t,
    priority: *mut c_int,
) -> *mut ipmc_rs_module {
    let what = "in comm_query and declines the communicator";
    // SAFETY: the arguments are as the function's contract says.
    guard(what, ptr::null_mut(), || unsafe {
        comm_query(comm, cfg, priority)
    })
}

/// The body of [`ipmc_rs_comm_query`], with its contract.
unsafe fn comm_query(
    comm: *mut ompi_communicator_t,
    cfg: *const sys::ipmc_config_t,
    priority: *mut c_int,
) -> *mut ipmc_rs_module {
    // SAFETY: the C caller passes its live parameter storage.
    let mut cfg = Config::from(unsafe { &*cfg });
    // SAFETY: `priority` is the selection's out-parameter.
    unsafe { *priority = cfg.priority };
    let comm = Comm(comm);
    let size = comm.size();
    if let Some(reason) = decline_reason(&cfg, comm.is_inter(), size) {
        return decline(comm, reason);
    }
    let han_level = comm.info("ompi_comm_coll_han_topo_level").is_some();
    let preference = comm.info("ompi_comm_coll_preference");
    if let Some(reason) = decline_by_creator(han_level, preference.as_deref()) {
        // han's parts of one rank per node (one part per rank of a node)
        // would otherwise make every rank a multicast receiver, where ipmc's
        // own levels have one per node.
        return decline(comm, reason);
    }
    // Every member reads the same published values, so all decline alike:
    // then the component below ipmc serves the communicator everywhere. This
    // comes first: what follows depends on parameters that may differ.
    let members: Vec<Option<(u64, String)>> = (0..size).map(|r| comm.member_published(r)).collect();
    let published: Vec<Published> = members
        .iter()
        .map(|m| Published::from_modex(m.as_ref().map(|(digest, _)| *digest)))
        .collect();
    if let Some(d) = disagreement(&published) {
        // The first communicator with a disagreement is MPI_COMM_WORLD (it
        // holds every process), where every process sees it: told once per job.
        tell_once(Notice::Disagreement, comm.rank() == d.reference, || {
            d.message(&comm.name(), |r| comm.member_host(r))
        });
        return decline(comm, "its members' ipmc configurations differ");
    }
    if !matches!(published.first(), Some(Published::Digest(_))) {
        // No disagreement and none runs ipmc: this process's own parameters
        // or node did not go out.
        return decline(comm, "ipmc runs on none of its members");
    }
    // The nodes each member published (host name and boot id), not the
    // runtime's host names: those of another job's processes
    // (MPI_Comm_spawn, MPI_Comm_connect) may be known to some members only,
    // and members that count different nodes would run different
    // algorithms. Every member published one here.
    let hosts_of: Vec<String> = members
        .into_iter()
        .flatten()
        .map(|(_, node)| node)
        .collect();
    let hosts = Nodes::from_hosts(hosts_of.iter());
    let nodes = if cfg.ranks_are_nodes {
        if hosts.is_single() {
            cfg.multicast_on_loopback_unless_chosen();
        }
        Nodes::one_per_rank(size)
    } else {
        hosts
    };
    if let Some(reason) = decline_node_local(&cfg, &nodes) {
        return decline(comm, reason);
    }
    let layout = (!cfg.ranks_are_nodes).then(|| Layout::from_hosts(hosts_of.iter()));
    Box::into_raw(Box::new(Module::new(cfg, comm, nodes, layout))).cast()
}

/// Says at verbose level why ipmc leaves `comm` alone; the NULL module.
fn decline(comm: Comm, reason: &str) -> *mut ipmc_rs_module {
    log::info!(
        "declines communicator {} (cid {}): {reason}",
        comm.name(),
        comm.cid()
    );
    ptr::null_mut()
}

/// The configuration this process publishes in the modex: the digest of its
/// shared parameters, or 0 when ipmc will not run here.
///
/// # Safety
/// `cfg` points to the component's parameter storage.
#[no_mangle]
pub unsafe extern "C" fn ipmc_rs_config_digest(cfg: *const sys::ipmc_config_t) -> u64 {
    let what = "in config_digest and publishes that it does not run in this process";
    guard(what, 0, || {
        // SAFETY: the C caller passes its live parameter storage.
        let cfg = Config::from(unsafe { &*cfg });
        if cfg.priority < 0 || cfg.validate().is_err() {
            0
        } else {
            cfg.published_digest()
        }
    })
}

/// `coll_module_enable`.
///
/// # Safety
/// `state` comes from [`ipmc_rs_comm_query`] and is not yet destroyed.
#[no_mangle]
pub unsafe extern "C" fn ipmc_rs_module_enable(
    state: *mut ipmc_rs_module,
    _module: *mut ipmc_module,
    comm: *mut ompi_communicator_t,
) -> c_int {
    let what = "in module_enable and steps aside on the communicator";
    guard(what, OMPI_ERROR, || {
        // SAFETY: see the function's contract; Open MPI serialises calls on one module.
        let module = unsafe { &mut *state.cast::<Module>() };
        match module.enable(Comm(comm)) {
            Ok(()) => OMPI_SUCCESS,
            Err(e) => e.code(),
        }
    })
}

/// `coll_module_disable`: the communicator is being freed.
///
/// # Safety
/// As for [`ipmc_rs_module_enable`].
#[no_mangle]
pub unsafe extern "C" fn ipmc_rs_module_disable(
    state: *mut ipmc_rs_module,
    comm: *mut ompi_communicator_t,
) {
    guard("in module_disable and goes on", (), || {
        // SAFETY: see the function's contract.
        let module = unsafe { &mut *state.cast::<Module>() };
        module.disable(Comm(comm));
    });
}

/// The module's destructor: releases the state. Makes no MPI call; NULL
/// (no state) is nothing to release.
///
/// # Safety
/// `state` is NULL or comes from [`ipmc_rs_comm_query`]; it is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ipmc_rs_module_destroy(state: *mut ipmc_rs_module) {
    if state.is_null() {
        return;
    }
    guard("in module_destroy and goes on", (), || {
        // SAFETY: see the function's contract: this reclaims the Box made in comm_query.
        drop(unsafe { Box::from_raw(state.cast::<Module>()) });
    });
}

/// `coll_ibcast`: `OMPI_SUCCESS` when ipmc serves the call and will complete
/// `req`, `IPMC_PREVIOUS` when the replaced component's nonblocking
/// broadcast is to serve it, or an error code. After a panic the module is
/// poisoned as in [`ipmc_rs_bcast`].
///
/// # Safety
/// As for [`ipmc_rs_bcast`], for a valid `MPI_Ibcast` call; `req` comes from
/// `ipmc_request_new`, whose ipmc reference passes to Rust only when this
/// returns `OMPI_SUCCESS`.
#[no_mangle]
pub unsafe extern "C" fn ipmc_rs_ibcast(
    state: *mut ipmc_rs_module,
    buf: *mut c_void,
    count: c_int,
    dt: *mut ompi_datatype_t,
    root: c_int,
    comm: *mut ompi_communicator_t,
    req: *mut ompi_request_t,
) -> c_int {
    let state = state.cast::<Module>();
    let call = BcastCall {
        buf,
        count,
        dt,
        root,
        comm: Comm(comm),
        module: ptr::null_mut(),
    };
    let taken = Cell::new(false);
    let request = || {
        taken.set(true);
        // SAFETY: see the function's contract: the request is handed over
        // with this, and the call returns OMPI_SUCCESS from here on.
        unsafe { Request::from_raw(req) }
    };
    // SAFETY: as in `ipmc_rs_bcast`.
    let result = caught(AssertUnwindSafe(|| {
        unsafe { &mut *state }.ibcast(&call, request)
    }));
    if taken.get() {
        // The request carries the outcome: its work completes it, or it was
        // completed with an error when a panic dropped it.
        if let Err(panic) = &result {
            let name = call.comm().name();
            report(
                &format!("in MPI_Ibcast on {name}, and the call fails"),
                panic,
            );
        }
        return OMPI_SUCCESS;
    }
    let panic = match result {
        Ok(Ok(_)) => return sys::IPMC_PREVIOUS as c_int,
        Ok(Err(e)) => return e.code(),
        Err(panic) => panic,
    };
    // SAFETY: as above; the reference of the panicked closure is gone.
    let module = unsafe { &mut *state };
    let name = call.comm().name();
    if module.poison() {
        report(
            &format!(
                "in MPI_Ibcast on {name} before any of its messages moved, and the component \
                 it replaced serves this call and every later one there"
            ),
            &panic,
        );
        sys::IPMC_PREVIOUS as c_int
    } else {
        report(
            &format!(
                "in MPI_Ibcast on {name} after messages began to move, so the call fails \
                 (OMPI_ERROR) and the component it replaced serves every later one there"
            ),
            &panic,
        );
        OMPI_ERROR
    }
}

/// `coll_bcast`. After a panic, every later call on the communicator goes to
/// the component ipmc replaced (see [`Module::poison`]).
///
/// # Safety
/// `state` as for [`ipmc_rs_module_enable`]; the other arguments are those of
/// a valid `MPI_Bcast` call on `comm`, which ipmc's module `module` serves.
#[no_mangle]
pub unsafe extern "C" fn ipmc_rs_bcast(
    state: *mut ipmc_rs_module,
    buf: *mut c_void,
    count: c_int,
    dt: *mut ompi_datatype_t,
    root: c_int,
    comm: *mut ompi_communicator_t,
    module: *mut ipmc_module,
) -> c_int {
    let mut call = BcastCall {
        buf,
        count,
        dt,
        root,
        comm: Comm(comm),
        module,
    };
    // SAFETY: as the function's contract says.
    unsafe { serve(state, "MPI_Bcast", Comm(comm), |m| m.bcast(&mut call)) }
}

/// `coll_barrier`, as [`ipmc_rs_bcast`].
///
/// # Safety
/// `state` as for [`ipmc_rs_module_enable`]; `comm` is the call's
/// communicator, whose barrier ipmc's module `module` serves.
#[no_mangle]
pub unsafe extern "C" fn ipmc_rs_barrier(
    state: *mut ipmc_rs_module,
    comm: *mut ompi_communicator_t,
    module: *mut ipmc_module,
) -> c_int {
    let call = BarrierCall {
        comm: Comm(comm),
        module,
    };
    // SAFETY: as the function's contract says.
    unsafe { serve(state, "MPI_Barrier", Comm(comm), |m| m.barrier(&call)) }
}

/// `coll_allgather` and `coll_allgatherv`, as [`ipmc_rs_bcast`].
///
/// # Safety
/// `state` as for [`ipmc_rs_module_enable`]; `args` are those of a valid
/// `MPI_Allgather` or `MPI_Allgatherv` call on `comm`, which ipmc's module `module` serves, and
/// live while it runs.
#[no_mangle]
pub unsafe extern "C" fn ipmc_rs_allgather(
    state: *mut ipmc_rs_module,
    args: *const sys::ipmc_allgather_args_t,
    comm: *mut ompi_communicator_t,
    module: *mut ipmc_module,
) -> c_int {
    let mut call = AllgatherCall {
        args,
        comm: Comm(comm),
        module,
    };
    let what = if call.varies() {
        "MPI_Allgatherv"
    } else {
        "MPI_Allgather"
    };
    // SAFETY: as the function's contract says.
    unsafe { serve(state, what, Comm(comm), |m| m.allgather(&mut call)) }
}

/// One collective call (`what`) on `comm`, served by `call` on the module.
/// A panic in it poisons the module (its multicast state is never used
/// again, see [`Module::poison`]): then the call is handed whole to the
/// component ipmc replaced, if none of its messages moved (a peer could
/// otherwise meet them in the replaced component's), or fails.
///
/// # Safety
/// `state` is the module's state of `comm` (see [`ipmc_rs_module_enable`]);
/// MPI forbids concurrent collectives on one communicator, and the glue
/// hands a collective that Open MPI starts on it from inside one of ipmc's
/// to the replaced component (`in_call`), so this is the only reference.
unsafe fn serve(
    state: *mut ipmc_rs_module,
    what: &str,
    comm: Comm,
    mut call: impl FnMut(&mut Module) -> Result<()>,
) -> c_int {
    let state = state.cast::<Module>();
    // Unwind safety: after a panic the module is poisoned and the call is
    // handed over whole or fails.
    // SAFETY: see the function's contract.
    let first = caught(AssertUnwindSafe(|| call(unsafe { &mut *state })));
    let panic = match first {
        Ok(result) => return status(result),
        Err(panic) => panic,
    };
    // SAFETY: as above; the reference of the panicked closure is gone.
    let module = unsafe { &mut *state };
    let name = comm.name();
    if module.poison() {
        report(
            &format!(
                "in {what} on {name} before any of its messages moved, and the component it \
                 replaced serves this call and every later one there"
            ),
            &panic,
        );
        guard(
            &format!("in {what}'s fallback, and the call fails"),
            OMPI_ERROR,
            AssertUnwindSafe(|| status(call(module))),
        )
    } else {
        // Peers may hold some of this call's messages, which the replaced
        // component's own (same tag) could meet: handing over could deliver
        // wrong data silently, an error cannot.
        report(
            &format!(
                "in {what} on {name} after its messages began to move, so the call fails \
                 (OMPI_ERROR) and the component it replaced serves every later call there"
            ),
            &panic,
        );
        OMPI_ERROR
    }
}

/// Open MPI's progress engine calls this (once registered) on every turn.
#[no_mangle]
pub extern "C" fn ipmc_rs_progress() -> c_int {
    // Open MPI calls this on every turn of its progress loop, mostly with
    // nothing to do: that answer needs no panic boundary.
    if crate::component::background::is_idle() {
        return 0;
    }
    guard("in the background progress and goes on", 0, || {
        c_int::try_from(crate::component::background::progress()).unwrap_or(c_int::MAX)
    })
}

/// `MPI_Finalize` calls this first (see
/// [`register_progress`](crate::platform::ompi::register_progress)).
#[no_mangle]
pub extern "C" fn ipmc_rs_finish_all() {
    let what = "finishing the background broadcasts at MPI_Finalize, and goes on";
    guard(what, (), crate::component::background::finish_all);
    let what = "freeing the levels kept for later communicators at MPI_Finalize, and goes on";
    guard(what, (), crate::component::parked::free_all);
}

/// Copies `text` into the C buffer `buf` of `len` bytes, cut to fit, NUL-terminated.
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes.
unsafe fn copy_c_string(text: &str, buf: *mut c_char, len: usize) {
    if buf.is_null() || len == 0 {
        return;
    }
    let n = text.len().min(len - 1);
    // SAFETY: `n + 1 <= len` bytes of `buf` are written, per the contract.
    unsafe {
        ptr::copy_nonoverlapping(text.as_ptr().cast(), buf, n);
        *buf.add(n) = 0;
    }
}

/// Describes performance variable `i` (see `ipmc_glue.h`).
///
/// # Safety
/// `name` and `desc` are NULL or valid for `name_len` and `desc_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ipmc_rs_pvar_info(
    i: c_int,
    name: *mut c_char,
    name_len: usize,
    desc: *mut c_char,
    desc_len: usize,
) -> c_int {
    let what = "describing a performance variable, which is left out";
    guard(what, -1, || {
        let vars = Stats::default().pvars();
        let Some(var) = usize::try_from(i).ok().and_then(|i| vars.get(i)) else {
            return -1;
        };
        // SAFETY: the buffers are as the contract says.
        unsafe {
            copy_c_string(var.name, name, name_len);
            copy_c_string(var.description, desc, desc_len);
        }
        match var.class {
            PvarClass::Counter => 0,
            PvarClass::State => 1,
        }
    })
}

/// The value of performance variable `i` in a communicator's state; 0 when
/// there is no variable `i`.
///
/// # Safety
/// `state` comes from [`ipmc_rs_comm_query`], is not destroyed, and no call
/// on its communicator runs at the same time.
#[no_mangle]
pub unsafe extern "C" fn ipmc_rs_pvar_read(state: *const ipmc_rs_module, i: c_int) -> u64 {
    guard("reading a performance variable, which reads 0", 0, || {
        // SAFETY: see the function's contract: a shared reference for this read only.
        let module = unsafe { &*state.cast::<Module>() };
        usize::try_from(i)
            .ok()
            .and_then(|i| module.stats().pvars().get(i).map(|v| v.value))
            .unwrap_or(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_stops_at_the_guard_and_gives_the_fallback() {
        assert_eq!(guard("in a test", 7, || 1), 1);
        assert_eq!(guard("in a test", 7, || -> i32 { panic!("boom") }), 7);
        let null: *mut c_void = guard("in a test", ptr::null_mut(), || {
            let v: Vec<u8> = Vec::new();
            let _ = v[3];
            ptr::NonNull::dangling().as_ptr()
        });
        assert!(null.is_null());
    }

    #[test]
    fn a_caught_panic_tells_its_message_and_place_in_one_line() {
        let p = caught(|| panic!("ranks {} and {}", 1, 2)).unwrap_err();
        assert_eq!(p.message, "ranks 1 and 2");
        let at = p.at.as_deref().expect("the hook keeps the place");
        assert!(at.starts_with("src/ffi/exports.rs:"), "{at}");
        let p = caught(|| assert_eq!(1 + 1, 3, "sums")).unwrap_err();
        let line = p.to_string();
        assert!(!line.contains('\n'), "{line}");
        assert!(line.contains("sums") && line.contains("left: 2"), "{line}");
        let p = caught(|| std::panic::panic_any(5u8)).unwrap_err();
        assert_eq!(p.message, "a panic without a message");
    }

    #[test]
    fn a_guard_inside_a_guard_catches_its_own_panic() {
        let outer = guard("outer", 0, || {
            let inner = guard("inner", 2, || -> i32 { panic!("inner") });
            inner + 1
        });
        assert_eq!(outer, 3);
        assert_eq!(GUARDED.with(Cell::get), 0);
        assert!(PANIC_AT.with(|p| p.borrow().is_none()));
    }
}
