//! Calls into Open MPI, through the glue: a communicator ([`Comm`]), the
//! arguments of one `MPI_Bcast` ([`BcastCall`]), `MPI_Barrier`
//! ([`BarrierCall`]) or `MPI_Allgather` ([`AllgatherCall`]) and what an
//! `MPI_Ibcast` keeps ([`UserMessage`], [`Request`]), point-to-point messages on
//! the PML ([`PmlTransport`], [`Messages`]), the component's output, and the
//! registration with the progress engine.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::marker::PhantomData;
use std::ops::Range;
use std::ptr;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

use super::c_line;
use super::lent::{LentBuffer, Loan};
use super::sys::{self, ipmc_module, ompi_communicator_t, ompi_datatype_t, ompi_request_t};
use crate::base::error::OMPI_SUCCESS;
use crate::base::error::{Error, Result};
use crate::base::io::{MessageIo, Wait};
use crate::base::transport::{ReqId, Transport};
use crate::protocol::two_stage::Lent;

/// A line at a verbosity level of the component's output stream.
pub fn log_line(level: i32, line: &str) {
    let line = c_line(line);
    // SAFETY: `line` is a valid NUL-terminated string for the duration of the call.
    unsafe { sys::ipmc_log(level, line.as_ptr()) }
}

/// This process's rank in its job (in `MPI_COMM_WORLD`, where the program
/// made one): who speaks once for the job.
pub fn world_rank() -> usize {
    // SAFETY: Open MPI knows its process from before any component is
    // opened, with or without MPI_COMM_WORLD.
    let r = unsafe { sys::ipmc_world_rank() };
    usize::try_from(r).unwrap_or(usize::MAX)
}

/// A line that is always shown (Open MPI's stream 0, standard error).
pub fn print_line(line: &str) {
    let line = c_line(line);
    // SAFETY: `line` is a valid NUL-terminated string for the duration of the call.
    unsafe { sys::ipmc_print(line.as_ptr()) }
}

/// What members published in the modex, by process ([`Comm::member_published`]).
/// Every communicator's creation asks for each member's values, and each read
/// of the modex is a call into PMIx (in Open MPI 5.0 a handoff to its thread
/// and back); the values do not change while their process runs, so each is
/// read once per process and member. What a member did not publish is not
/// kept: a later read asks again (and the glue remembers a silent process).
static PUBLISHED: Mutex<BTreeMap<u64, (u64, String)>> = Mutex::new(BTreeMap::new());

fn published() -> MutexGuard<'static, BTreeMap<u64, (u64, String)>> {
    PUBLISHED.lock().unwrap_or_else(|p| p.into_inner())
}

/// A communicator handle, valid for as long as Open MPI's call that handed it
/// to ipmc runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Comm(pub(crate) *mut ompi_communicator_t);

// SAFETY: the handle is an address; Open MPI lets any thread use a
// communicator, and ipmc uses one in background work only under the lock
// of that work (see `crate::component::background`).
unsafe impl Send for Comm {}

impl Comm {
    pub fn rank(self) -> usize {
        // SAFETY: the handle is a live communicator (see the type's contract).
        let r = unsafe { sys::ipmc_comm_rank(self.0) };
        usize::try_from(r).expect("ranks are not negative")
    }

    pub fn size(self) -> usize {
        // SAFETY: as in `rank`.
        let s = unsafe { sys::ipmc_comm_size(self.0) };
        usize::try_from(s).expect("sizes are not negative")
    }

    pub fn is_inter(self) -> bool {
        // SAFETY: as in `rank`.
        unsafe { sys::ipmc_comm_is_inter(self.0) != 0 }
    }

    /// The value of the info key `key` its creator gave the communicator
    /// (Open MPI's own keys, such as `ompi_comm_coll_preference`); `None`
    /// where it is unset. Values longer than Open MPI's own limit are cut.
    pub fn info(self, key: &str) -> Option<String> {
        let key = c_line(key);
        let mut value = [0u8; 256];
        let len = c_int::try_from(value.len()).expect("a small buffer");
        // SAFETY: as in `rank`; `key` is NUL-terminated and `value` has the
        // `len` bytes the glue may write, terminator included.
        let whole =
            unsafe { sys::ipmc_comm_info(self.0, key.as_ptr(), value.as_mut_ptr().cast(), len) };
        (whole >= 0).then(|| {
            let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
            String::from_utf8_lossy(&value[..end]).into_owned()
        })
    }

    pub fn cid(self) -> u32 {
        // SAFETY: as in `rank`.
        unsafe { sys::ipmc_comm_cid(self.0) }
    }

    /// What member `rank` published in the modex about its ipmc: its
    /// configuration digest and its node (host name and boot id), read alike
    /// by every member. Read once per process and member (see
    /// [`PUBLISHED`]), then from what this process kept.
    pub fn member_published(self, rank: usize) -> Option<(u64, String)> {
        let id = self.member_id(rank);
        if let Some(kept) = id.and_then(|id| published().get(&id).cloned()) {
            return Some(kept);
        }
        let found = self.read_published(rank)?;
        if let Some(id) = id {
            published().insert(id, found.clone());
        }
        Some(found)
    }

    /// Who its members are, in rank order ([`Comm::member_id`]); `None`
    /// where Open MPI does not know one of them here.
    pub fn members(self) -> Option<Vec<u64>> {
        (0..self.size()).map(|r| self.member_id(r)).collect()
    }

    /// Who member `rank` is in the whole run, alike on every communicator
    /// it belongs to; `None` where Open MPI does not know it here.
    fn member_id(self, rank: usize) -> Option<u64> {
        let rank = c_int::try_from(rank).ok()?;
        // SAFETY: as in `rank`.
        let id = unsafe { sys::ipmc_comm_member_id(self.0, rank) };
        (id != u64::MAX).then_some(id)
    }

    /// [`Comm::member_published`] from the modex itself.
    fn read_published(self, rank: usize) -> Option<(u64, String)> {
        let rank = c_int::try_from(rank).ok()?;
        let mut digest = 0;
        // A host name (at most 255 bytes) and a boot id fit; anything longer
        // is cut the same way on every member.
        let mut node = [0 as c_char; 320];
        // SAFETY: as in `rank`; `digest` and `node` (of the length passed)
        // are valid out-pointers, and the glue terminates what it writes.
        let found = unsafe {
            sys::ipmc_modex_member(self.0, rank, &mut digest, node.as_mut_ptr(), node.len())
        };
        // SAFETY: `node` was zeroed and the glue writes a terminated string
        // within its length, so it holds a NUL.
        let node = unsafe { CStr::from_ptr(node.as_ptr()) };
        (found != 0).then(|| (digest, node.to_string_lossy().into_owned()))
    }

    /// The host name of member `rank` as the runtime knows it here, for
    /// messages (another job's processes may be "unknown").
    pub fn member_host(self, rank: usize) -> String {
        let Ok(rank) = c_int::try_from(rank) else {
            return "unknown".into();
        };
        // SAFETY: as in `rank`; the glue returns a NUL-terminated string that
        // Open MPI keeps for the process's lifetime (or a literal).
        unsafe { CStr::from_ptr(sys::ipmc_comm_member_host(self.0, rank)) }
            .to_string_lossy()
            .into_owned()
    }

    pub fn name(self) -> String {
        // SAFETY: as in `rank`; the glue returns the communicator's own
        // NUL-terminated name array, which lives as long as the communicator.
        unsafe { CStr::from_ptr(sys::ipmc_comm_name(self.0)) }
            .to_string_lossy()
            .into_owned()
    }
}

/// Tests the live request `*req`, driving Open MPI's progress engine
/// (`Wait::Progress`, the glue's `ipmc_test`) or looking only, from inside
/// it (`Wait::Look`, `ipmc_look`): `Some(bytes it moved)` once complete, and
/// then the request is freed and `*req` null.
///
/// # Safety
/// `*req` is a live request.
unsafe fn test_request(req: &mut *mut ompi_request_t, wait: Wait) -> Result<Option<usize>> {
    let done = match wait {
        Wait::Progress => sys::ipmc_test,
        Wait::Look => sys::ipmc_look,
    };
    let (mut is_done, mut count) = (0, 0);
    // SAFETY: the caller's request is live; found complete, the glue freed
    // it, and it is set to null below.
    ok(unsafe { done(req, &mut is_done, &mut count) })?;
    if is_done == 0 {
        return Ok(None);
    }
    *req = ptr::null_mut();
    Ok(Some(count))
}

/// The glue's start of an empty message with the barrier tag
/// (`ipmc_irecv_answer`, `ipmc_isend_empty`).
type EmptyMessage =
    unsafe extern "C" fn(c_int, *mut ompi_communicator_t, *mut *mut ompi_request_t) -> c_int;

/// A broadcast of the glue that takes an `MPI_Bcast` call as it came.
type WholeBcast = unsafe extern "C" fn(
    *mut ipmc_module,
    *mut c_void,
    c_int,
    *mut ompi_datatype_t,
    c_int,
    *mut ompi_communicator_t,
) -> c_int;

/// The arguments of one `MPI_Bcast` call.
pub struct BcastCall {
    // Set by `ipmc_rs_bcast` from C's arguments.
    pub(crate) buf: *mut c_void,
    pub(crate) count: c_int,
    pub(crate) dt: *mut ompi_datatype_t,
    pub(crate) root: c_int,
    pub(crate) comm: Comm,
    pub(crate) module: *mut ipmc_module,
}

impl BcastCall {
    pub fn comm(&self) -> Comm {
        self.comm
    }

    pub fn root(&self) -> usize {
        usize::try_from(self.root).expect("MPI checked the root")
    }

    /// The user's message as MPI handed it over.
    fn layout(&self) -> Layout {
        Layout {
            buf: self.buf,
            count: self.count,
            dt: self.dt,
        }
    }

    /// Size of the message in bytes (the packed size of `count` elements).
    pub fn bytes(&self) -> usize {
        // SAFETY: the call's message is live while the call runs.
        unsafe { self.layout().bytes() }
    }

    /// The message as bytes in the user's buffer, when the datatype lays
    /// `count` elements out contiguously.
    /// `bytes` is [`Self::bytes`], which the caller has already computed.
    pub fn contiguous(&mut self, bytes: usize) -> Option<&mut [u8]> {
        // SAFETY: as in `bytes`.
        let start = unsafe { self.layout().contiguous_start() }.filter(|_| bytes > 0)?;
        // SAFETY: for a contiguous datatype, MPI guarantees that `bytes` bytes
        // from the true lower bound belong to the message; the caller lends
        // them to ipmc until `MPI_Bcast` returns, which outlives the borrow
        // of `self`.
        Some(unsafe { std::slice::from_raw_parts_mut(start, bytes) })
    }

    /// Runs `f` on the message's `bytes` bytes: in the user's buffer when
    /// the datatype is contiguous, otherwise on a copy, packed before where
    /// this rank `has` the message and unpacked after where it has not.
    pub fn on_message_bytes(
        &mut self,
        bytes: usize,
        has: bool,
        f: impl FnOnce(&mut [u8]) -> Result<()>,
    ) -> Result<()> {
        if let Some(buf) = self.contiguous(bytes) {
            return f(buf);
        }
        let mut packed = vec![0u8; bytes];
        if has {
            self.pack(&mut packed)?;
        }
        f(&mut packed)?;
        if !has {
            self.unpack(&packed)?;
        }
        Ok(())
    }

    /// Packs the user's message into `out` (exactly [`Self::bytes`] long).
    pub fn pack(&self, out: &mut [u8]) -> Result<()> {
        // SAFETY: as in `bytes`.
        unsafe { self.layout().pack(out) }
    }

    /// Unpacks `packed` (exactly [`Self::bytes`] long) into the user's buffer.
    pub fn unpack(&mut self, packed: &[u8]) -> Result<()> {
        // SAFETY: as in `bytes`; the buffer is the user's receive buffer.
        unsafe { self.layout().unpack(packed) }
    }

    /// Hands the whole call to the broadcast ipmc replaced.
    pub fn previous(&mut self) -> Result<()> {
        // The module's saved broadcast was retained in `module_enable`.
        self.whole(sys::ipmc_prev_bcast)
    }

    /// Runs the call as Open MPI's binomial tree (coll/base) on ipmc's
    /// module, on the message's `bytes` bytes ([`Self::base_on_bytes`]).
    pub fn binomial(&mut self, bytes: usize) -> Result<()> {
        // The module's `base_data`, where coll/base caches the tree, was
        // made with the module.
        self.base_on_bytes(bytes, sys::ipmc_base_bcast_binomial)
    }

    /// Runs the call as Open MPI's binary tree (coll/base), as `binomial`.
    pub fn binary(&mut self, bytes: usize) -> Result<()> {
        self.base_on_bytes(bytes, sys::ipmc_base_bcast_bintree)
    }

    /// Runs the call as Open MPI's split binary tree (coll/base), as
    /// `binomial`.
    pub fn split_binary(&mut self, bytes: usize) -> Result<()> {
        self.base_on_bytes(bytes, sys::ipmc_base_bcast_split_bintree)
    }

    /// Runs the call as Open MPI's scatter and ring allgather (coll/base),
    /// as `binomial`.
    pub fn scatter_allgather(&mut self, bytes: usize) -> Result<()> {
        self.base_on_bytes(bytes, sys::ipmc_base_bcast_scatter_allgather)
    }

    /// Runs one of Open MPI's algorithms on the message's bytes
    /// (`MPI_BYTE`), so that every rank passes the same count and datatype.
    /// MPI asks only that the ranks' type signatures match (a root may send
    /// one element of a contiguous type of 1,000 ints that the others
    /// receive as 1,000 `MPI_INT`), and the split binary tree and the
    /// scatter-allgather cut a message by each rank's own count: given
    /// the call as it came, such ranks would wait for different parts.
    /// An empty message, or one beyond an `int` of bytes, goes as it came.
    /// `bytes` is [`Self::bytes`], which the caller has already computed.
    fn base_on_bytes(&mut self, bytes: usize, bcast: WholeBcast) -> Result<()> {
        let len = match c_int::try_from(bytes) {
            Ok(len) if len > 0 => len,
            _ => return self.whole(bcast),
        };
        let (module, root, comm) = (self.module, self.root, self.comm);
        let has = comm.rank() == self.root();
        self.on_message_bytes(bytes, has, |buf| {
            // SAFETY: `buf` is the message's `len` bytes, which every rank
            // of the communicator passes alike; the module is ipmc's, as in
            // `whole`.
            ok(unsafe {
                bcast(
                    module,
                    buf.as_mut_ptr().cast(),
                    len,
                    sys::ipmc_dt_byte(),
                    root,
                    comm.0,
                )
            })
        })
    }

    /// Ends a measured call on a rank that is not its root: tells the root
    /// that this rank has the message (see `ipmc_glue.h`).
    pub fn answer_root(&self) -> Result<()> {
        // SAFETY: the call's communicator and root are Open MPI's own.
        ok(unsafe { sys::ipmc_answer_root(self.root, self.comm.0) })
    }

    /// Runs the call, as it came, by one of the glue's broadcasts.
    fn whole(&mut self, bcast: WholeBcast) -> Result<()> {
        // SAFETY: the arguments are the call's own and the module is
        // ipmc's; what each broadcast needs of it is said where it is named.
        let rc = unsafe {
            bcast(
                self.module,
                self.buf,
                self.count,
                self.dt,
                self.root,
                self.comm.0,
            )
        };
        ok(rc)
    }
}

impl BcastCall {
    /// The message of a nonblocking broadcast, kept until it completes.
    pub fn keep_message(&self) -> UserMessage {
        // SAFETY: `dt` is the call's live datatype; the reference taken here
        // is given back when the `UserMessage` is dropped.
        unsafe { sys::ipmc_dt_retain(self.dt) };
        UserMessage {
            layout: self.layout(),
            bytes: self.bytes(),
        }
    }
}

/// A user's message: buffer, count and datatype, as MPI handed them over.
/// Every method requires the message to be live: its call runs, or MPI lends
/// it to ipmc until a request completes.
#[derive(Clone, Copy)]
struct Layout {
    buf: *mut c_void,
    count: c_int,
    dt: *mut ompi_datatype_t,
}

impl Layout {
    /// The packed size of the message.
    ///
    /// # Safety
    /// The message is live (see the type).
    unsafe fn bytes(self) -> usize {
        let size = sys::ipmc_dt_size(self.dt);
        size * usize::try_from(self.count).unwrap_or(0)
    }

    /// Where the message's bytes start in the user's buffer, when the
    /// datatype lays them out contiguously in the host's memory (a GPU's
    /// is packed and unpacked by Open MPI's convertor instead).
    ///
    /// # Safety
    /// As for [`Self::bytes`].
    unsafe fn contiguous_start(self) -> Option<*mut u8> {
        if sys::ipmc_dt_in_place(self.buf, self.dt, self.count) == 0 {
            return None;
        }
        let lb = sys::ipmc_dt_true_lb(self.dt);
        Some(self.buf.cast::<u8>().wrapping_offset(lb))
    }

    /// Packs the message into `out`, exactly its packed size long.
    ///
    /// # Safety
    /// As for [`Self::bytes`].
    unsafe fn pack(self, out: &mut [u8]) -> Result<()> {
        let (ptr, len) = (out.as_mut_ptr().cast(), out.len());
        ok(sys::ipmc_pack(self.buf, self.count, self.dt, ptr, len))
    }

    /// Unpacks `packed`, exactly the packed size long, into the user's buffer.
    ///
    /// # Safety
    /// As for [`Self::bytes`], and the buffer may be written.
    unsafe fn unpack(self, packed: &[u8]) -> Result<()> {
        let (ptr, len) = (packed.as_ptr().cast(), packed.len());
        ok(sys::ipmc_unpack(ptr, len, self.buf, self.count, self.dt))
    }
}

/// The user's message of an `MPI_Ibcast`: MPI lends ipmc the buffer until
/// the request completes, and ipmc holds a reference on the datatype.
pub struct UserMessage {
    layout: Layout,
    bytes: usize,
}

impl UserMessage {
    /// Size of the message in bytes (packed).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The root's message, packed.
    pub fn read(&self) -> Result<Vec<u8>> {
        let mut out = vec![0; self.bytes];
        self.read_into(&mut out)?;
        Ok(out)
    }

    /// The root's message, packed, in memory its sends can share (read
    /// into it, no second copy).
    pub fn read_shared(&self) -> Result<Arc<[u8]>> {
        let mut out: Arc<[u8]> = std::iter::repeat_n(0, self.bytes).collect();
        self.read_into(Arc::get_mut(&mut out).expect("a new Arc is unique"))?;
        Ok(out)
    }

    /// Packs the message into `out`, of [`Self::bytes`] bytes.
    fn read_into(&self, out: &mut [u8]) -> Result<()> {
        // SAFETY: MPI lends the message until the request completes, and the
        // datatype is retained.
        match unsafe { self.layout.contiguous_start() } {
            // SAFETY: as above; for a contiguous datatype `bytes` bytes from
            // the true lower bound are the message.
            Some(start) => {
                out.copy_from_slice(unsafe { std::slice::from_raw_parts(start, self.bytes) })
            }
            // SAFETY: as above.
            None => unsafe { self.layout.pack(out) }?,
        }
        Ok(())
    }

    /// The user's buffer lent to the broadcast, where the datatype is
    /// contiguous: the caller drops the [`Loan`] before the request
    /// completes, as MPI lends the buffer only until then.
    pub fn lend(&self) -> Option<(Loan, LentBuffer)> {
        // SAFETY: as in `read`.
        let start = NonNull::new(unsafe { self.layout.contiguous_start() }?)?;
        // SAFETY: MPI lends these bytes until the request completes, which
        // the caller does only after dropping the loan, and only the
        // broadcast reaches them meanwhile (MPI forbids the user to).
        Some(unsafe { LentBuffer::new(start, self.bytes) })
    }

    /// Writes the packed message into the user's buffer.
    pub fn write(&mut self, packed: &[u8]) -> Result<()> {
        assert_eq!(packed.len(), self.bytes, "the message has its size");
        // SAFETY: as in `read`; the buffer is the user's receive buffer.
        match unsafe { self.layout.contiguous_start() } {
            // SAFETY: as in `read`.
            Some(start) => {
                unsafe { std::slice::from_raw_parts_mut(start, self.bytes) }.copy_from_slice(packed)
            }
            // SAFETY: as above.
            None => unsafe { self.layout.unpack(packed) }?,
        }
        Ok(())
    }
}

impl Drop for UserMessage {
    fn drop(&mut self) {
        // SAFETY: gives back the reference taken in `keep_message`.
        unsafe { sys::ipmc_dt_release(self.layout.dt) }
    }
}

// SAFETY: the buffer and datatype are lent to ipmc for the operation, and
// touched only under the lock of the communicator's background work.
unsafe impl Send for UserMessage {}

/// The request of an `MPI_Ibcast` that ipmc serves: completed exactly once,
/// with an error if it is dropped before (so that no user waits forever).
pub struct Request(*mut ompi_request_t);

impl Request {
    /// # Safety
    /// `req` comes from `ipmc_request_new`, and ipmc's reference on it is
    /// handed to the new `Request`.
    pub(crate) unsafe fn from_raw(req: *mut ompi_request_t) -> Self {
        Request(req)
    }

    /// Completes the request with the broadcast's outcome.
    pub fn complete(mut self, result: Result<()>) {
        let code = crate::base::error::status(result);
        let req = std::mem::replace(&mut self.0, ptr::null_mut());
        // SAFETY: ipmc's reference on a live request, given back once.
        unsafe { sys::ipmc_request_complete(req, code) }
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: as in `complete`.
            unsafe { sys::ipmc_request_complete(self.0, crate::base::error::OMPI_ERROR) }
        }
    }
}

// SAFETY: Open MPI lets any thread complete a request; ipmc touches one only
// under the lock of its communicator's background work.
unsafe impl Send for Request {}

fn ok(rc: c_int) -> Result<()> {
    if rc == OMPI_SUCCESS {
        Ok(())
    } else {
        Err(Error::Ompi(rc))
    }
}

/// [`Transport`] over Open MPI's PML. Every request points into the borrowed
/// buffer, so the transport waits for all of them before it is dropped.
pub struct PmlTransport<'a> {
    comm: Comm,
    rank: usize,
    size: usize,
    base: *mut u8,
    len: usize,
    reqs: Vec<*mut ompi_request_t>,
    /// For each request: the bytes a receive must get (`None` for a send).
    expect: Vec<Option<usize>>,
    _buf: PhantomData<&'a mut [u8]>,
}

impl<'a> PmlTransport<'a> {
    /// `rank` and `size` are the caller's in `comm` (known to the module, so
    /// the broadcast path does not ask Open MPI again).
    pub fn new(comm: Comm, rank: usize, size: usize, buf: &'a mut [u8]) -> Self {
        PmlTransport {
            comm,
            rank,
            size,
            // Every request derives its pointer from this one, so no later
            // reference to the buffer invalidates an outstanding request's.
            base: buf.as_mut_ptr(),
            len: buf.len(),
            reqs: Vec::new(),
            expect: Vec::new(),
            _buf: PhantomData,
        }
    }

    fn part(&self, range: &Range<usize>) -> *mut u8 {
        assert!(
            range.start <= range.end && range.end <= self.len,
            "range {range:?} outside a {}-byte message",
            self.len
        );
        self.base.wrapping_add(range.start)
    }

    fn peer(&self, peer: usize) -> c_int {
        assert!(peer < self.size && peer != self.rank, "bad peer {peer}");
        c_int::try_from(peer).expect("ranks fit in an int")
    }

    fn started(
        &mut self,
        rc: c_int,
        req: *mut ompi_request_t,
        expect: Option<usize>,
    ) -> Result<ReqId> {
        if rc != OMPI_SUCCESS {
            return Err(Error::Ompi(rc));
        }
        self.reqs.push(req);
        self.expect.push(expect);
        Ok(ReqId(self.reqs.len() - 1))
    }
}

/// The glue's `ipmc_isend_bytes` and `ipmc_issend_bytes`: a send in
/// standard or in synchronous mode.
type IsendFn = unsafe extern "C" fn(
    *const c_void,
    usize,
    c_int,
    c_int,
    *mut ompi_communicator_t,
    *mut *mut ompi_request_t,
) -> c_int;

impl PmlTransport<'_> {
    /// Starts sending the bytes `range` to `peer` with the glue's `isend`
    /// (standard or synchronous mode).
    fn send(&mut self, range: Range<usize>, peer: usize, isend: IsendFn) -> Result<ReqId> {
        let (data, peer) = (self.part(&range), self.peer(peer));
        let mut req = ptr::null_mut();
        // SAFETY: `data..data+range.len()` lies inside the borrowed buffer
        // (checked by `part`), which outlives the request (waited for at the
        // latest in `drop`); `req` is a valid out-pointer.
        let rc = unsafe {
            isend(
                data.cast(),
                range.len(),
                peer,
                bcast_tag(),
                self.comm.0,
                &mut req,
            )
        };
        self.started(rc, req, None)
    }
}

impl Transport for PmlTransport<'_> {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn len(&self) -> usize {
        self.len
    }

    fn isend(&mut self, range: Range<usize>, peer: usize) -> Result<ReqId> {
        self.send(range, peer, sys::ipmc_isend_bytes)
    }

    fn issend(&mut self, range: Range<usize>, peer: usize) -> Result<ReqId> {
        self.send(range, peer, sys::ipmc_issend_bytes)
    }

    fn irecv(&mut self, range: Range<usize>, peer: usize) -> Result<ReqId> {
        let (data, peer) = (self.part(&range), self.peer(peer));
        let mut req = ptr::null_mut();
        // SAFETY: as in `isend`; the buffer is borrowed mutably, so nothing
        // else reads it while the receive writes.
        let rc = unsafe {
            sys::ipmc_irecv_bytes(
                data.cast(),
                range.len(),
                peer,
                bcast_tag(),
                self.comm.0,
                &mut req,
            )
        };
        self.started(rc, req, Some(range.len()))
    }

    fn wait_all(&mut self, ids: &[ReqId]) -> Result<()> {
        let (mut pending, expect): (Vec<*mut ompi_request_t>, Vec<Option<usize>>) = ids
            .iter()
            .map(|&ReqId(i)| {
                let req = std::mem::replace(&mut self.reqs[i], ptr::null_mut());
                (req, self.expect[i])
            })
            .filter(|(r, _)| !r.is_null())
            .unzip();
        if pending.is_empty() {
            return Ok(());
        }
        let mut counts = vec![0usize; pending.len()];
        // SAFETY: every entry is a live request started by this transport and
        // not yet waited for; the glue completes and frees all of them and
        // writes one count per request into `counts`, which is as long.
        let rc = unsafe {
            sys::ipmc_wait_all_counts(pending.len(), pending.as_mut_ptr(), counts.as_mut_ptr())
        };
        ok(rc)?;
        check_counts(&expect, &counts)
    }
}

/// Every receive got exactly the bytes it was posted for: a shorter message
/// (a rank that called `MPI_Bcast` with fewer bytes than this one) would
/// otherwise leave the rest of the buffer silently unchanged.
fn check_counts(expect: &[Option<usize>], counts: &[usize]) -> Result<()> {
    for (want, &got) in expect.iter().zip(counts) {
        if let Some(want) = *want {
            if got != want {
                log::warn!(
                    "received {got} bytes where the broadcast expects {want}: the ranks' \
                     counts or datatypes differ"
                );
                return Err(Error::Truncated);
            }
        }
    }
    Ok(())
}

impl Drop for PmlTransport<'_> {
    fn drop(&mut self) {
        // Only an algorithm that stopped on an error leaves requests behind:
        // they must finish before the buffer they point into is released.
        // Receives are cancelled: their messages may never come.
        for (&req, expect) in self.reqs.iter().zip(&self.expect) {
            if !req.is_null() && expect.is_some() {
                // SAFETY: `req` is a live receive of this transport, waited
                // for just below.
                unsafe { sys::ipmc_cancel(req) };
            }
        }
        let ids: Vec<ReqId> = (0..self.reqs.len()).map(ReqId).collect();
        let _ = self.wait_all(&ids);
    }
}

/// Registers [`ipmc_rs_progress`](crate::ffi::exports::ipmc_rs_progress) with Open
/// MPI's progress engine, and
/// [`ipmc_rs_finish_all`](crate::ffi::exports::ipmc_rs_finish_all) with
/// `MPI_Finalize`, once.
pub fn register_progress() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: the glue registers callbacks that live as long as the
    // component's library, which is never unloaded (`-z nodelete`); this runs
    // inside an MPI call, between MPI_Init and MPI_Finalize.
    ONCE.call_once(|| unsafe {
        sys::ipmc_progress_register();
        sys::ipmc_finish_at_finalize();
    });
}

/// One turn of Open MPI's progress engine (which also yields the core when
/// `mpi_yield_when_idle` is set): for a rank that waits on memory it shares
/// with its node, so that its other requests move on meanwhile.
pub fn progress() {
    // SAFETY: called inside an MPI call, between MPI_Init and MPI_Finalize;
    // ipmc's own progress callback, which this may run, takes no state that
    // its caller holds (`component::background`).
    unsafe { sys::ipmc_progress_once() };
}

/// Empty messages with the barrier tag (see `ipmc_glue.h`): the answers
/// that time a measured broadcast at its root (one from every other rank),
/// and a barrier's arrivals and point-to-point releases.
pub struct Answers {
    /// The pending receives; null once complete.
    reqs: Vec<*mut ompi_request_t>,
}

impl Answers {
    /// No message.
    pub fn none() -> Self {
        Answers { reqs: Vec::new() }
    }

    /// Posts the receives of the answers to a call of `root` on `comm`.
    pub fn expect(comm: Comm, root: usize) -> Result<Self> {
        Self::from_ranks(comm, (0..comm.size()).filter(|&r| r != root))
    }

    /// Posts the receives of an empty message with the barrier tag from
    /// each of `ranks` (a barrier's arrivals).
    pub fn from_ranks(comm: Comm, ranks: impl IntoIterator<Item = usize>) -> Result<Self> {
        Self::start(comm, ranks, sys::ipmc_irecv_answer)
    }

    /// Starts sending an empty message to each of `ranks`.
    pub fn send_to(comm: Comm, ranks: impl IntoIterator<Item = usize>) -> Result<Self> {
        Self::start(comm, ranks, sys::ipmc_isend_empty)
    }

    /// Starts an empty message with each of `ranks` by `post`, the glue's
    /// receive or send of one.
    fn start(
        comm: Comm,
        ranks: impl IntoIterator<Item = usize>,
        post: EmptyMessage,
    ) -> Result<Self> {
        let mut messages = Self::none();
        for peer in ranks {
            let peer = c_int::try_from(peer).expect("ranks fit in an int");
            let mut req = ptr::null_mut();
            // SAFETY: the communicator is live; the message is empty, no
            // byte is read or written; `req` is a valid out-pointer.
            ok(unsafe { post(peer, comm.0, &mut req) })?;
            messages.reqs.push(req);
        }
        Ok(messages)
    }

    /// Whether no message is pending.
    pub fn is_empty(&self) -> bool {
        self.reqs.iter().all(|r| r.is_null())
    }

    /// Adds the messages of `other`, those still pending.
    pub fn extend(&mut self, mut other: Answers) {
        let reqs = std::mem::take(&mut other.reqs);
        self.reqs.extend(reqs.into_iter().filter(|r| !r.is_null()));
    }

    /// Whether every answer arrived, driving Open MPI's progress engine
    /// (for use outside it, holding no lock of ipmc's).
    pub fn test(&mut self) -> Result<bool> {
        self.all_done(Wait::Progress)
    }

    /// Whether every answer arrived, looking without entering Open MPI's
    /// progress engine (for use from inside it).
    pub fn arrived(&mut self) -> Result<bool> {
        self.all_done(Wait::Look)
    }

    /// Whether every answer arrived, tested as `wait` says.
    pub fn all_done(&mut self, wait: Wait) -> Result<bool> {
        for req in self.reqs.iter_mut().filter(|r| !r.is_null()) {
            // SAFETY: `req` is a live request of these answers (complete
            // ones are null).
            if unsafe { test_request(req, wait) }?.is_none() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Waits for every answer.
    pub fn wait(&mut self) -> Result<()> {
        for req in self.reqs.iter_mut().filter(|r| !r.is_null()) {
            let mut count = 0;
            // SAFETY: `req` is a live request of these answers; after the
            // wait it is complete and freed.
            let rc = unsafe { sys::ipmc_wait(req, &mut count) };
            *req = ptr::null_mut();
            if rc != OMPI_SUCCESS {
                return Err(Error::Ompi(rc));
            }
        }
        self.reqs.clear();
        Ok(())
    }
}

// SAFETY: the requests are Open MPI's, which lets any thread test or wait for
// a request; ipmc touches `Answers` from its communicator's broadcast call or
// under the lock of the communicator's background work, never from two
// threads at once.
unsafe impl Send for Answers {}

impl Drop for Answers {
    fn drop(&mut self) {
        // Only a communicator given up with answers pending: cancelled.
        for req in self.reqs.iter_mut().filter(|r| !r.is_null()) {
            let mut count = 0;
            // SAFETY: `req` is a live request; after the wait it is freed.
            unsafe {
                sys::ipmc_cancel(*req);
                sys::ipmc_wait(req, &mut count);
            }
        }
    }
}

/// The tag of Open MPI's broadcasts.
fn bcast_tag() -> c_int {
    // SAFETY: returns a constant.
    unsafe { sys::ipmc_bcast_tag() }
}

/// A point-to-point message started by [`Messages`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsgId(usize);

struct Slot {
    bytes: Bytes,
    req: *mut ompi_request_t,
    is_recv: bool,
}

/// The memory a [`Messages`] request reads or writes, which its slot keeps
/// (its heap memory does not move) until the request completes.
enum Bytes {
    /// A buffer of the request's own, given back when it completes.
    Own(Vec<u8>),
    /// Bytes of a message that other sends share.
    Shared(Arc<[u8]>, Range<usize>),
    /// Lent memory ([`Lent::memory`]) a receive writes into or a send
    /// reads: `len` bytes from `start`.
    Lent { start: NonNull<u8>, len: usize },
}

/// What a [`Messages`] request does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Recv,
    Send,
    SendMatched,
}

/// Point-to-point messages on a communicator whose buffers the messages own:
/// a request can never outlive the memory it reads or writes, whatever the
/// caller does (but lent memory, [`Messages::recv_into`] and
/// [`MessageIo::send_from`], which its lender keeps until the request
/// completed or this was dropped).
/// The multicast algorithm's chain and its setup use it, and the
/// nonblocking linear and chain broadcasts.
pub struct Messages {
    comm: Comm,
    tag: c_int,
    slots: Vec<Slot>,
    free: Vec<usize>,
}

impl Messages {
    /// Messages with the broadcast tag: the agreement on the group, which
    /// every call on the communicator finishes first.
    pub fn new(comm: Comm) -> Self {
        Self::tagged(comm, bcast_tag())
    }

    /// Messages of work in the communicator's queue
    /// ([`crate::engine::queue`]), with a tag of their own: Open MPI's
    /// broadcasts and ipmc's point-to-point ones, which use the broadcast
    /// tag, may run while that work goes on.
    pub fn queued(comm: Comm) -> Self {
        // SAFETY: returns a constant.
        Self::tagged(comm, unsafe { sys::ipmc_queue_tag() })
    }

    fn tagged(comm: Comm, tag: c_int) -> Self {
        Messages {
            comm,
            tag,
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    fn start(&mut self, bytes: Bytes, peer: usize, kind: Kind) -> Result<MsgId> {
        let peer = c_int::try_from(peer).expect("ranks fit in an int");
        let mut slot = Slot {
            bytes,
            req: ptr::null_mut(),
            is_recv: kind == Kind::Recv,
        };
        let (data, len) = match &mut slot.bytes {
            Bytes::Own(buf) => (buf.as_mut_ptr(), buf.len()),
            Bytes::Shared(message, range) => {
                assert!(kind != Kind::Recv, "a shared message is only sent");
                let part = &message[range.clone()];
                (part.as_ptr().cast_mut(), part.len())
            }
            Bytes::Lent { start, len } => (start.as_ptr(), *len),
        };
        // SAFETY: `data..data+len` is memory that stays valid until the
        // request completes: a buffer the slot owns, written by a receive; a
        // shared message the slot holds, only read by a send; or lent memory
        // a receive writes or a send reads, whose loan ends only after the
        // request completed or this `Messages` was dropped, which waits for
        // it (a receive cancelled first). `req` is a valid out-pointer.
        let rc = unsafe {
            match kind {
                Kind::Recv => sys::ipmc_irecv_bytes(
                    data.cast(),
                    len,
                    peer,
                    self.tag,
                    self.comm.0,
                    &mut slot.req,
                ),
                Kind::Send | Kind::SendMatched => {
                    let isend: IsendFn = if kind == Kind::Send {
                        sys::ipmc_isend_bytes
                    } else {
                        sys::ipmc_issend_bytes
                    };
                    isend(
                        data.cast_const().cast(),
                        len,
                        peer,
                        self.tag,
                        self.comm.0,
                        &mut slot.req,
                    )
                }
            }
        };
        ok(rc)?;
        Ok(MsgId(match self.free.pop() {
            Some(i) => {
                self.slots[i] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        }))
    }

    /// The communicator the messages travel on.
    pub fn comm(&self) -> Comm {
        self.comm
    }

    /// Starts sending `data` to `peer`.
    pub fn send(&mut self, peer: usize, data: Vec<u8>) -> Result<MsgId> {
        self.start(Bytes::Own(data), peer, Kind::Send)
    }

    /// Starts sending the bytes `range` of `data`, which other sends may
    /// share, to `peer`.
    pub fn send_shared(
        &mut self,
        peer: usize,
        data: Arc<[u8]>,
        range: Range<usize>,
    ) -> Result<MsgId> {
        self.start(Bytes::Shared(data, range), peer, Kind::Send)
    }

    /// Starts sending `data` to `peer` in synchronous mode (`MPI_Issend`).
    pub fn send_matched(&mut self, peer: usize, data: Vec<u8>) -> Result<MsgId> {
        self.start(Bytes::Own(data), peer, Kind::SendMatched)
    }

    /// Starts receiving a message of at most `capacity` bytes from `peer`.
    pub fn recv(&mut self, peer: usize, capacity: usize) -> Result<MsgId> {
        self.start(Bytes::Own(vec![0; capacity]), peer, Kind::Recv)
    }

    /// Starts receiving the bytes `range` of `into` from `peer` where they
    /// lie, if `into` gives its memory ([`MessageIo::recv_into`]).
    pub fn recv_into(
        &mut self,
        peer: usize,
        into: &mut dyn Lent,
        range: Range<usize>,
    ) -> Result<Option<MsgId>> {
        self.start_lent(into, range, peer, Kind::Recv)
    }

    /// Starts `kind` of message with `peer` in the bytes `range` of `lent`'s
    /// memory, if it gives it.
    fn start_lent(
        &mut self,
        lent: &mut dyn Lent,
        range: Range<usize>,
        peer: usize,
        kind: Kind,
    ) -> Result<Option<MsgId>> {
        let Some((memory, len)) = lent.memory() else {
            return Ok(None);
        };
        assert!(
            range.start <= range.end && range.end <= len,
            "{range:?} lies in the {len} bytes lent"
        );
        // In bounds (above), so neither null nor beyond the memory.
        let start = NonNull::new(memory.as_ptr().wrapping_add(range.start)).expect("in bounds");
        let bytes = Bytes::Lent {
            start,
            len: range.len(),
        };
        self.start(bytes, peer, kind).map(Some)
    }

    /// `Some(buffer)` once the message completed: for a receive the bytes
    /// received, for a send the buffer it sent (for reuse).
    pub fn test(&mut self, id: MsgId) -> Result<Option<Vec<u8>>> {
        self.check(id, Wait::Progress)
    }

    /// As [`Self::test`], but only looks at the request, without entering
    /// Open MPI's progress engine: for use from inside it.
    pub fn look(&mut self, id: MsgId) -> Result<Option<Vec<u8>>> {
        self.check(id, Wait::Look)
    }

    fn check(&mut self, id: MsgId, wait: Wait) -> Result<Option<Vec<u8>>> {
        let slot = &mut self.slots[id.0];
        assert!(!slot.req.is_null(), "message {id:?} already completed");
        // SAFETY: `slot.req` is the live request of this slot.
        let count = unsafe { test_request(&mut slot.req, wait) }?;
        count.map(|count| self.finish(id, count)).transpose()
    }

    /// Waits for the message and returns its buffer as [`Self::test`] does.
    pub fn wait(&mut self, id: MsgId) -> Result<Vec<u8>> {
        let slot = &mut self.slots[id.0];
        assert!(!slot.req.is_null(), "message {id:?} already completed");
        let mut count = 0;
        // SAFETY: `slot.req` is the live request of this slot.
        let rc = unsafe { sys::ipmc_wait(&mut slot.req, &mut count) };
        if rc != OMPI_SUCCESS {
            return Err(Error::Ompi(rc));
        }
        self.finish(id, count)
    }

    /// Frees the completed message's slot and gives its buffer back (a
    /// receive's truncated to the `count` bytes received).
    fn finish(&mut self, id: MsgId, count: usize) -> Result<Vec<u8>> {
        let slot = &mut self.slots[id.0];
        slot.req = ptr::null_mut();
        let bytes = std::mem::replace(&mut slot.bytes, Bytes::Own(Vec::new()));
        let is_recv = slot.is_recv;
        self.free.push(id.0);
        Ok(match bytes {
            Bytes::Own(mut buf) => {
                if is_recv {
                    buf.truncate(count);
                }
                buf
            }
            Bytes::Shared(..) => Vec::new(),
            Bytes::Lent { len, .. } if is_recv && count != len => {
                log::warn!(
                    "received {count} bytes where the broadcast expects {len}: the ranks' \
                     counts or datatypes differ"
                );
                return Err(Error::Truncated);
            }
            Bytes::Lent { .. } => Vec::new(),
        })
    }
}

impl MessageIo for Messages {
    type Id = MsgId;

    fn send(&mut self, peer: usize, data: Vec<u8>) -> Result<MsgId> {
        Messages::send(self, peer, data)
    }

    fn send_matched(&mut self, peer: usize, data: Vec<u8>) -> Result<MsgId> {
        Messages::send_matched(self, peer, data)
    }

    fn send_shared(&mut self, peer: usize, data: Arc<[u8]>, range: Range<usize>) -> Result<MsgId> {
        Messages::send_shared(self, peer, data, range)
    }

    fn recv(&mut self, peer: usize, capacity: usize) -> Result<MsgId> {
        Messages::recv(self, peer, capacity)
    }

    fn recv_into(
        &mut self,
        peer: usize,
        into: &mut dyn Lent,
        range: Range<usize>,
    ) -> Result<Option<MsgId>> {
        Messages::recv_into(self, peer, into, range)
    }

    /// Sends from where the bytes lie, if `from` gives its memory.
    fn send_from(
        &mut self,
        peer: usize,
        from: &mut dyn Lent,
        range: Range<usize>,
        matched: bool,
    ) -> Result<Option<MsgId>> {
        let kind = if matched {
            Kind::SendMatched
        } else {
            Kind::Send
        };
        self.start_lent(from, range, peer, kind)
    }

    fn test(&mut self, id: MsgId, wait: Wait) -> Result<Option<Vec<u8>>> {
        self.check(id, wait)
    }

    fn wait(&mut self, id: MsgId) -> Result<Vec<u8>> {
        Messages::wait(self, id)
    }
}

// SAFETY: a `Messages` holds handles of Open MPI requests and a communicator,
// and the buffers they use, which it owns or which are lent to it (lent
// memory is reached only by Open MPI's receives and sends, from whichever
// thread). Open MPI lets any thread test or wait for a request, and ipmc
// touches a `Messages` only under the lock of its broadcast (see
// `crate::component::background`), never from two threads at once.
unsafe impl Send for Messages {}

impl Drop for Messages {
    fn drop(&mut self) {
        // Only a broadcast that stopped on an error leaves messages behind:
        // receives are cancelled, and every request finishes before its
        // buffer is freed.
        for slot in &mut self.slots {
            if slot.req.is_null() {
                continue;
            }
            let mut count = 0;
            // SAFETY: `slot.req` is a live request of this slot; after the
            // wait it is complete and freed.
            unsafe {
                if slot.is_recv {
                    sys::ipmc_cancel(slot.req);
                }
                sys::ipmc_wait(&mut slot.req, &mut count);
            }
        }
    }
}

impl Comm {
    /// Splits the communicator as `MPI_Comm_split` does (collective: every
    /// rank calls it alike), the part named `name` and, if `without_ipmc`,
    /// left to Open MPI's other components; `None` for a rank of no part
    /// (`color` `None`).
    pub fn split(
        self,
        color: Option<u32>,
        key: usize,
        without_ipmc: bool,
        name: &str,
    ) -> Result<Option<Comm>> {
        let color = color.map_or(-1, |c| c_int::try_from(c).unwrap_or(c_int::MAX));
        let key = c_int::try_from(key).map_err(|_| Error::Range)?;
        let name = c_line(name);
        let mut part = ptr::null_mut();
        // SAFETY: `self` is a live communicator; `name` is NUL-terminated
        // and outlives the call; `part` is a valid out-pointer.
        ok(unsafe {
            sys::ipmc_comm_split(
                self.0,
                color,
                key,
                c_int::from(without_ipmc),
                name.as_ptr(),
                &mut part,
            )
        })?;
        Ok((!part.is_null()).then_some(Comm(part)))
    }

    /// Frees a part made by [`Comm::split`].
    pub fn free(self) {
        let mut comm = self.0;
        // SAFETY: a part is freed once, by the module that made it.
        unsafe { sys::ipmc_comm_free(&mut comm) }
    }

    /// Names a part anew (its statistics show the name).
    pub fn rename(self, name: &str) {
        let name = c_line(name);
        // SAFETY: a part ipmc made, live; `name` is NUL-terminated and
        // outlives the call (Open MPI copies it).
        unsafe { sys::ipmc_comm_rename(self.0, name.as_ptr()) }
    }

    /// Takes a reference on the communicator, so that freeing it (which MPI
    /// allows while operations on it are pending) does not destroy it.
    pub fn retain(self) {
        // SAFETY: as in `rank`.
        unsafe { sys::ipmc_comm_retain(self.0) }
    }

    /// Gives back a reference taken by [`Comm::retain`]. The communicator is
    /// destroyed if that was the last one (and with it ipmc's module, whose
    /// `disable` and destructor then run): call this with no lock held and
    /// nothing of the module borrowed.
    pub fn release(self) {
        // SAFETY: the caller holds a reference from `retain`, given back once.
        unsafe { sys::ipmc_comm_release(self.0) }
    }

    /// Whether another rank of the communicator runs on this node.
    pub fn has_local_peer(self) -> bool {
        // SAFETY: as in `rank`.
        unsafe { sys::ipmc_comm_has_local_peer(self.0) != 0 }
    }

    /// Whether it belongs to the world model (`MPI_Init`'s), not to an MPI
    /// session, whose end no hook of ipmc sees.
    pub fn of_world_model(self) -> bool {
        // SAFETY: as in `rank`.
        unsafe { sys::ipmc_comm_of_world_model(self.0) != 0 }
    }

    /// A barrier on a part made by [`Comm::split`], by whatever serves
    /// barriers there.
    pub fn barrier(self) -> Result<()> {
        // SAFETY: as in `rank`; every member of the part enters the same
        // barrier (the caller's levels say so).
        ok(unsafe { sys::ipmc_comm_barrier(self.0) })
    }

    /// Gathers every rank's `own` bytes to `root`, into `out` at the places
    /// `counts` and `displs` give (read on the root only), by whatever
    /// serves gathers on this part ([`Comm::split`]).
    pub fn gatherv_bytes(
        self,
        own: &[u8],
        out: &mut [u8],
        counts: &[c_int],
        displs: &[c_int],
        root: usize,
    ) -> Result<()> {
        let len = c_int::try_from(own.len()).map_err(|_| Error::Range)?;
        let root = c_int::try_from(root).map_err(|_| Error::Range)?;
        assert!(counts.len() == displs.len() && counts.len() <= self.size());
        if self.rank() == root as usize {
            assert_eq!(counts.len(), self.size());
            for (&c, &d) in counts.iter().zip(displs) {
                assert!(c >= 0 && d >= 0 && (c as usize) + (d as usize) <= out.len());
            }
        }
        // SAFETY: `own` is read and `out` written only within the bounds
        // checked above (the root's counts and displacements lie in `out`,
        // one per rank); every member of the part enters the same gather.
        ok(unsafe {
            sys::ipmc_comm_gatherv_bytes(
                self.0,
                own.as_ptr().cast(),
                len,
                out.as_mut_ptr().cast(),
                counts.as_ptr(),
                displs.as_ptr(),
                root,
            )
        })
    }

    /// An allgatherv in place: rank `i`'s `counts[i]` bytes at `displs[i]`
    /// of `buf` reach every rank, by whatever serves allgathers on this part.
    pub fn allgatherv_bytes(
        self,
        buf: &mut [u8],
        counts: &[c_int],
        displs: &[c_int],
    ) -> Result<()> {
        assert!(counts.len() == self.size() && displs.len() == self.size());
        for (&c, &d) in counts.iter().zip(displs) {
            assert!(c >= 0 && d >= 0 && (c as usize) + (d as usize) <= buf.len());
        }
        // SAFETY: every block lies in `buf` (checked above), one per rank;
        // every member of the part enters the same allgatherv.
        ok(unsafe {
            sys::ipmc_comm_allgatherv_bytes(
                self.0,
                buf.as_mut_ptr().cast(),
                counts.as_ptr(),
                displs.as_ptr(),
            )
        })
    }

    /// Broadcasts `buf` from `root` by whatever serves broadcasts on this
    /// part.
    pub fn bcast_bytes(self, buf: &mut [u8], root: usize) -> Result<()> {
        let root = c_int::try_from(root).map_err(|_| Error::Range)?;
        // Beyond an `int` of bytes, in pieces: every member cuts its buffer,
        // as long as the others', alike.
        for piece in buf.chunks_mut(c_int::MAX as usize) {
            let len = c_int::try_from(piece.len()).expect("a piece fits an int");
            // SAFETY: `piece` is `len` bytes; every member of the part enters
            // the same broadcast, with a piece of the same length.
            ok(unsafe {
                sys::ipmc_comm_bcast_bytes(self.0, piece.as_mut_ptr().cast(), len, root)
            })?;
        }
        Ok(())
    }

    /// Starts sending `data` to each of `peers` (ranks of this
    /// communicator, not this one) with ipmc's broadcast tag.
    pub fn send_all(self, data: Vec<u8>, peers: impl IntoIterator<Item = usize>) -> Result<Fanout> {
        let mut fanout = Fanout {
            reqs: Vec::new(),
            data,
        };
        for peer in peers {
            assert!(peer < self.size() && peer != self.rank(), "bad peer {peer}");
            let peer = c_int::try_from(peer).map_err(|_| Error::Range)?;
            let mut req = ptr::null_mut();
            // SAFETY: the buffer is the fanout's own, whose heap memory stays
            // where it is until every send completed (`Drop` leaves it to a
            // send that did not); `req` is a valid out-pointer.
            ok(unsafe {
                sys::ipmc_isend_bytes(
                    fanout.data.as_ptr().cast(),
                    fanout.data.len(),
                    peer,
                    bcast_tag(),
                    self.0,
                    &mut req,
                )
            })?;
            fanout.reqs.push(req);
        }
        Ok(fanout)
    }

    /// Receives exactly `buf.len()` bytes from `peer` with ipmc's broadcast
    /// tag.
    pub fn recv_bytes(self, buf: &mut [u8], peer: usize) -> Result<()> {
        let mut t = PmlTransport::new(self, self.rank(), self.size(), buf);
        let len = t.len();
        let id = t.irecv(0..len, peer)?;
        t.wait_all(&[id])
    }

    /// Replaces each element of `v` by its maximum over the communicator's
    /// ranks, by coll/base's recursive doubling (not the communicator's own
    /// allreduce, which may set up state of its own at its first call).
    pub fn allreduce_max(self, v: &mut [i32]) -> Result<()> {
        let n = c_int::try_from(v.len()).map_err(|_| Error::Range)?;
        // SAFETY: `v` is `n` ints; every member of the part enters the same
        // allreduce with as many.
        ok(unsafe { sys::ipmc_comm_allreduce_max_ints(self.0, v.as_mut_ptr(), n) })
    }

    /// Starts broadcasting `bytes` from `root` by whatever serves
    /// nonblocking broadcasts on this part; the broadcast holds them until
    /// it completes, or until it is dropped.
    pub fn ibcast(self, mut bytes: PartBytes, root: usize) -> Result<PartIbcast> {
        let (start, len) = match &mut bytes {
            PartBytes::Own(v) => (v.as_mut_ptr(), v.len()),
            PartBytes::Lent(l) => {
                let (start, len) = l.memory().expect("a lent buffer gives its memory");
                (start.as_ptr(), len)
            }
        };
        let len = c_int::try_from(len).map_err(|_| Error::Range)?;
        let root = c_int::try_from(root).map_err(|_| Error::Range)?;
        let mut req = ptr::null_mut();
        // SAFETY: `start` is `len` bytes that stay where they are and valid
        // while the broadcast holds them: a `Vec`'s heap (moving the `Vec`
        // moves no byte), or memory whose loan its owner ends only after
        // the `PartIbcast` completed or was dropped (a drop waits for a
        // broadcast in lent memory). Every member of the part enters the
        // same broadcast with a buffer of the same length; `req` is a valid
        // out-pointer.
        let rc = unsafe { sys::ipmc_comm_ibcast_bytes(self.0, start.cast(), len, root, &mut req) };
        ok(rc)?;
        Ok(PartIbcast { req, bytes })
    }

    /// Broadcasts `buf` from `root` on this part in segments of `segment`
    /// bytes, each a nonblocking broadcast by whatever serves this part,
    /// started once `before` returned for it (a leader receives the segment
    /// there), so that the segments before it move on meanwhile; returns
    /// once every segment's broadcast completed.
    pub fn bcast_segments(
        self,
        buf: &mut [u8],
        root: usize,
        segment: usize,
        mut before: impl FnMut(&mut [u8]) -> Result<()>,
    ) -> Result<()> {
        let root = c_int::try_from(root).map_err(|_| Error::Range)?;
        let mut reqs = Vec::with_capacity(buf.len().div_ceil(segment.max(1)));
        let mut result = Ok(());
        for chunk in buf.chunks_mut(segment.max(1)) {
            result = before(chunk).and_then(|()| {
                let len = c_int::try_from(chunk.len()).map_err(|_| Error::Range)?;
                let mut req = ptr::null_mut();
                // SAFETY: `chunk` is `len` bytes of `buf`, which this
                // function borrows until every request it started has
                // completed (below, also after an error); every member of
                // the part starts the same broadcasts, in the same order.
                ok(unsafe {
                    sys::ipmc_comm_ibcast_bytes(
                        self.0,
                        chunk.as_mut_ptr().cast(),
                        len,
                        root,
                        &mut req,
                    )
                })?;
                reqs.push(req);
                Ok(())
            });
            if result.is_err() {
                break;
            }
        }
        let mut counts = vec![0; reqs.len()];
        // SAFETY: `reqs` are the live requests started above; the wait
        // completes and frees them all.
        let waited = ok(unsafe {
            sys::ipmc_wait_all_counts(reqs.len(), reqs.as_mut_ptr(), counts.as_mut_ptr())
        });
        result.and(waited)
    }

    /// Sends `dst` an arrival of ipmc's barrier: an empty message with the
    /// barrier tag (see `ipmc_glue.h`).
    pub fn send_arrival(self, dst: usize) -> Result<()> {
        let dst = c_int::try_from(dst).map_err(|_| Error::Range)?;
        // SAFETY: as in `rank`; the message is empty.
        ok(unsafe { sys::ipmc_answer_root(dst, self.0) })
    }
}

/// The bytes a part of a nonblocking broadcast over two levels works in.
pub enum PartBytes {
    /// A buffer of the broadcast's own.
    Own(Vec<u8>),
    /// The user's buffer, lent (an `MPI_Ibcast` in place).
    Lent(LentBuffer),
}

/// A nonblocking broadcast on a part of two levels ([`Comm::ibcast`]), with
/// its bytes.
pub struct PartIbcast {
    /// Null once complete (and freed).
    req: *mut ompi_request_t,
    bytes: PartBytes,
}

impl PartIbcast {
    /// Whether the broadcast completed: driving Open MPI's progress engine
    /// (`Wait::Progress`), or looking only (from inside it).
    pub fn test(&mut self, wait: Wait) -> Result<bool> {
        if self.req.is_null() {
            return Ok(true);
        }
        // SAFETY: `req` is this broadcast's live request (null once complete).
        Ok(unsafe { test_request(&mut self.req, wait) }?.is_some())
    }

    /// The bytes, once [`PartIbcast::test`] found the broadcast complete.
    pub fn into_bytes(mut self) -> PartBytes {
        assert!(self.req.is_null(), "the broadcast completed");
        std::mem::replace(&mut self.bytes, PartBytes::Own(Vec::new()))
    }
}

// SAFETY: the request is Open MPI's, which lets any thread test or wait for
// it; ipmc touches a `PartIbcast` only under the lock of its communicator's
// background work, never from two threads at once.
unsafe impl Send for PartIbcast {}

impl Drop for PartIbcast {
    fn drop(&mut self) {
        // Only work given up after an error drops one pending. A collective
        // cannot be cancelled: a buffer of its own is left to it, since
        // waiting may never end (another rank failed); the user's is
        // waited for, since its loan (and MPI's) ends next.
        if self.req.is_null() {
            return;
        }
        match &mut self.bytes {
            PartBytes::Own(v) => std::mem::forget(std::mem::take(v)),
            PartBytes::Lent(_) => {
                log::warn!("waiting for a broadcast in the user's buffer that was given up");
                let mut count = 0;
                // SAFETY: `req` is this broadcast's live request; after the
                // wait it is complete and freed.
                unsafe { sys::ipmc_wait(&mut self.req, &mut count) };
                self.req = ptr::null_mut();
            }
        }
    }
}

/// One message sent to several ranks of a communicator from a buffer it
/// owns ([`Comm::send_all`]), so that the sender need not wait for them.
pub struct Fanout {
    /// Null once complete (and freed).
    reqs: Vec<*mut ompi_request_t>,
    data: Vec<u8>,
}

impl Fanout {
    /// Whether every send completed (driving Open MPI's progress engine).
    pub fn test(&mut self) -> Result<bool> {
        for req in self.reqs.iter_mut().filter(|r| !r.is_null()) {
            // SAFETY: `req` is one of this fanout's live sends (null once
            // complete).
            if unsafe { test_request(req, Wait::Progress) }?.is_none() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Waits until every send completed.
    pub fn wait(&mut self) -> Result<()> {
        for req in self.reqs.iter_mut().filter(|r| !r.is_null()) {
            let mut count = 0;
            // SAFETY: as in `test`; the glue frees the request it waited for.
            ok(unsafe { sys::ipmc_wait(req, &mut count) })?;
            *req = ptr::null_mut();
        }
        Ok(())
    }
}

// SAFETY: the requests are Open MPI's, which lets any thread test them; a
// fanout is touched by one thread at a time, that of the module or of the
// store of parked levels that owns it.
unsafe impl Send for Fanout {}

impl Drop for Fanout {
    fn drop(&mut self) {
        // Only a fanout given up after an error is dropped pending: its
        // receivers may still read the buffer, which is left to them.
        if self.reqs.iter().any(|r| !r.is_null()) {
            std::mem::forget(std::mem::take(&mut self.data));
        }
    }
}

/// The arguments of one `MPI_Allgather` or `MPI_Allgatherv` call, as the
/// glue collected them (`ipmc_allgather_args_t`).
pub struct AllgatherCall {
    pub(crate) args: *const sys::ipmc_allgather_args_t,
    pub(crate) comm: Comm,
    pub(crate) module: *mut ipmc_module,
}

impl AllgatherCall {
    pub fn comm(&self) -> Comm {
        self.comm
    }

    fn args(&self) -> &sys::ipmc_allgather_args_t {
        // SAFETY: the glue's arguments live on its stack for the whole call,
        // which outlives `self`.
        unsafe { &*self.args }
    }

    /// Block `i` of the receive buffer; `i` must be a rank of the
    /// communicator.
    fn block(&self, i: usize) -> Layout {
        assert!(i < self.comm().size(), "block {i} is a rank's");
        let a = self.args();
        let count = if a.rcounts.is_null() {
            a.rcount
        } else {
            // SAFETY: an allgatherv's `rcounts` holds one count per rank of
            // the communicator, and `i` is one.
            unsafe { *a.rcounts.add(i) }
        };
        let i = c_int::try_from(i).expect("ranks fit in an int");
        Layout {
            // SAFETY: `i` is a rank of the communicator, whose block MPI
            // guarantees lies in the receive buffer.
            buf: unsafe { sys::ipmc_allgather_block(self.args, i) },
            count,
            dt: a.rdtype,
        }
    }

    /// Bytes of rank `i`'s block (the packed size of its elements), the
    /// same on every rank (MPI's rule on type signatures).
    pub fn block_bytes(&self, i: usize) -> usize {
        // SAFETY: the receive datatype is the call's own, live while it runs.
        unsafe { self.block(i).bytes() }
    }

    /// Whether the call is an `MPI_Allgatherv`.
    pub fn varies(&self) -> bool {
        !self.args().rcounts.is_null()
    }

    /// Whether this rank's block is already in place (`MPI_IN_PLACE`).
    pub fn in_place(&self) -> bool {
        self.args().sbuf.is_null()
    }

    /// Packs this rank's (`rank`) block into `out`, exactly a block long:
    /// from the send buffer, or in place from the receive buffer.
    pub fn own_block(&self, rank: usize, out: &mut [u8]) -> Result<()> {
        let a = self.args();
        let layout = if self.in_place() {
            self.block(rank)
        } else {
            Layout {
                buf: a.sbuf.cast_mut(),
                count: a.scount,
                dt: a.sdtype,
            }
        };
        // SAFETY: the buffer and datatype are the call's own; packing only
        // reads the buffer (a send buffer is not written).
        unsafe { layout.pack(out) }
    }

    /// The receive buffer as one run of bytes in which block `i`'s packed
    /// bytes lie as they are at byte `at[i]` (one offset per rank), if the
    /// datatype lays out each block contiguously and the non-empty blocks
    /// lie in memory one after another, from offset 0, without gap or
    /// overlap: then the blocks can be gathered in place.
    pub fn receive_run(&mut self, at: &[usize]) -> Option<&mut [u8]> {
        if at.len() != self.comm.size() {
            return None;
        }
        let mut base = None;
        let mut spans = Vec::with_capacity(at.len());
        for (i, &offset) in at.iter().enumerate() {
            let len = self.block_bytes(i);
            if len == 0 {
                continue;
            }
            // SAFETY: the receive buffer and datatype are the call's own.
            let start = unsafe { self.block(i).contiguous_start() }?;
            let b = *base.get_or_insert(start.wrapping_sub(offset));
            if start != b.wrapping_add(offset) {
                return None;
            }
            spans.push((offset, len));
        }
        spans.sort_unstable();
        let mut end = 0;
        for (offset, len) in spans {
            if offset != end {
                return None;
            }
            end += len;
        }
        // SAFETY: each non-empty block's bytes lie at `base + at[i]`, inside
        // the receive buffer as MPI guarantees, and those blocks cover
        // `0..end` exactly (both checked above): every byte of the run is
        // one block's. The user lends the buffer to the call, which
        // outlives the borrow of `self`.
        base.map(|b| unsafe { std::slice::from_raw_parts_mut(b, end) })
    }

    /// Unpacks `packed`, a block long, into block `i` of the receive buffer.
    pub fn put_block(&mut self, i: usize, packed: &[u8]) -> Result<()> {
        // SAFETY: the receive buffer is the user's, lent to the call.
        unsafe { self.block(i).unpack(packed) }
    }

    /// Hands the call to the allgather (allgatherv) ipmc replaced.
    pub fn previous(&self) -> Result<()> {
        // SAFETY: the module is ipmc's, whose saved allgather was retained
        // in `module_enable`; the arguments are the call's.
        ok(unsafe { sys::ipmc_prev_allgather(self.module, self.args, self.comm.0) })
    }

    /// Runs the call as Open MPI's ring allgather (coll/base) on ipmc's module.
    pub fn ring(&self) -> Result<()> {
        // SAFETY: the module is ipmc's and the arguments the call's; the
        // ring keeps nothing in the module.
        ok(unsafe { sys::ipmc_base_allgather_ring(self.module, self.args, self.comm.0) })
    }
}

/// The arguments of one `MPI_Barrier` call.
pub struct BarrierCall {
    pub(crate) comm: Comm,
    pub(crate) module: *mut ipmc_module,
}

impl BarrierCall {
    pub fn comm(&self) -> Comm {
        self.comm
    }

    /// Hands the call to the barrier ipmc replaced.
    pub fn previous(&self) -> Result<()> {
        // SAFETY: the module is ipmc's, whose saved barrier was retained in
        // `module_enable` (the glue serves barriers only where it saved
        // one); the communicator is the call's.
        ok(unsafe { sys::ipmc_prev_barrier(self.module, self.comm.0) })
    }

    /// Runs the call as Open MPI's linear barrier (coll/base) on ipmc's module.
    pub fn linear(&self) -> Result<()> {
        // SAFETY: the module is ipmc's and the communicator the call's; the
        // linear barrier keeps nothing in the module.
        ok(unsafe { sys::ipmc_base_barrier_linear(self.module, self.comm.0) })
    }
}
