//! The two-stage multicast broadcast (thesis §3.2) as a pure state machine.
//!
//! One [`Broadcast`] is one rank's view of one broadcast. It holds no socket
//! and no MPI handle: the driver feeds it received datagrams, chain frames and
//! the time, and asks it what to multicast and what to send along the chain.
//! Production drives it with real sockets and Open MPI point-to-point
//! ([`crate::driver::multicast`]); the simulator (`sim/`) drives it with the
//! same driver over simulated networks.
//!
//! Stage 1: the root, after `root_wait`, multicasts every fragment once, with
//! no preceding synchronisation. Stage 2: a reliable chain along the virtual
//! ring that starts at the root (virtual rank 0) repairs what multicast did
//! not deliver. The thesis sends every fragment along the chain; that doubles
//! the bytes on every link, so here the chain carries data only where it is
//! missing, and a repair never waits for anything but the fragment itself:
//!
//! - `END` says "the root has multicast everything", so what is missing then
//!   will not come by multicast. The root sends it to its successor once stage
//!   1 is over; every other rank as soon as it knows: when `END` came, or the
//!   last fragment's datagram (the root multicasts in order), so without loss
//!   every rank sends it at once and it crosses one hop, not the ring;
//! - every rank but the root sends its predecessor exactly one `NEED` listing
//!   the fragments it lacks, as soon as it knows: when it owns everything (an
//!   empty `NEED`), when the last fragment's datagram arrived (stage 1 is as
//!   good as over), or when `END` came;
//! - a rank sends its successor each fragment that `NEED` lists as soon as it
//!   owns it, whether it came by multicast or by the chain. A fragment that
//!   several consecutive ranks lack travels along them one hop at a time, so a
//!   repair costs as many hops as the run of ranks that lost it: with
//!   independent loss that is about one, whatever the length of the ring.
//!
//! Each rank receives a known number of frames from each neighbour (`END` and
//! the fragments it asked for; one `NEED`), so nothing is left over for a
//! later broadcast. Still no timeouts and no acknowledgement of multicast:
//! `END` travels on the reliable channel, and every fragment a rank asks for
//! reaches its predecessor by the same rule, the root owning everything.
//!
//! A chain frame carries a run of fragments the `NEED` listed, consecutive
//! in the list, within one *block* of [`Params::frame_bytes`]: whatever of
//! the run the sender owns when it sends. A rank that lost a long run (one
//! that entered late, or lost every datagram) is repaired in messages of
//! tens of kilobytes, not one per datagram, and a fragment still goes as
//! soon as the sender owns it. A block with a fragment still to come is
//! certain to send one more frame, so the receiver knows how many receives
//! it may post.
//!
//! Chain frame (predecessor to successor): a little-endian `u32` fragment
//! index and the payloads of that fragment and of the ones the `NEED` listed
//! after it in its block, as many as the frame's length holds; or the index
//! [`END`] alone.
//! Reply (successor to predecessor): [`NEED`] and the missing fragment
//! indices, ascending, each a little-endian `u32` (`docs/datagram.md`).

use std::collections::VecDeque;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::protocol::datagram::{self, Auth, Header, Protection, Reject};
use crate::protocol::flow::{self, Flow, ReportError};

/// Bytes of a chain frame before the fragment's payload.
pub const CHAIN_HEADER_LEN: usize = 4;
/// Payload bytes of a chain frame's block ([`Params::frame_bytes`]) in every
/// broadcast: 43 datagrams of 1,420 bytes or 15 fragments of 4 KiB, one
/// message within Open MPI's TCP eager limit (64 KiB), which goes at once.
pub const FRAME_BYTES: usize = 60 * 1024;
/// The chain frame index that says "the root has multicast every fragment".
pub const END: u32 = u32::MAX;
/// The first word of a reply.
pub const NEED: u32 = u32::MAX - 1;

/// What one broadcast is, identical on every rank but `vrank`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// The communicator instance's id, drawn at setup.
    pub comm_id: u64,
    /// The number of this broadcast on the communicator (counts from 0).
    pub bcast: u64,
    /// Ranks in the communicator.
    pub size: usize,
    /// This rank's distance from the root along the ring: 0 is the root.
    pub vrank: usize,
    /// Bytes of the (packed) message; may be 0.
    pub message_len: usize,
    /// Payload bytes per fragment (the last fragment may be shorter).
    pub fragment_size: usize,
    /// How datagrams are protected: tag (and encryption) under the
    /// communicator's key, or the thesis's CRC-32, or nothing.
    pub auth: Auth,
    /// How long the root waits, from [`Broadcast::start_root`], before it multicasts.
    pub root_wait: Duration,
    /// Flow control's window, in datagrams: how far the root may run ahead
    /// of its slowest receiver (0: no flow control; [`crate::protocol::flow`]).
    pub window: u32,
    /// Payload bytes of a chain frame's block: `frame_bytes /
    /// fragment_size` consecutive fragments, at least one. A frame carries
    /// fragments of one block.
    pub frame_bytes: usize,
}

/// What became of one received datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// It gave this rank a fragment it did not own.
    Useful,
    /// It carried a fragment this rank already owned.
    Duplicate,
    /// It is this broadcast's, but this rank is the root and owns everything.
    Own,
    /// It names another communicator instance (another job or communicator).
    WrongComm,
    /// It belongs to an earlier broadcast of this communicator.
    Stale,
    /// It belongs to a later broadcast of this communicator.
    Future,
    /// Its length, fragment index or message length does not fit this broadcast.
    BadLength,
    /// It is not an ipmc datagram of this version.
    BadMagic,
    /// Its CRC-32 does not match (or its CRC flag disagrees with ours).
    BadCrc,
    /// Its tag does not verify under the communicator's key, or it has none:
    /// forged, altered, or sent without the key.
    BadAuth,
}

/// A chain frame or reply that cannot be what the neighbour sent: the
/// reliable channel delivered something this broadcast does not expect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainError {
    /// Shorter than its header, or its payload length is not its fragments'.
    BadLength,
    /// Its fragment index is beyond the message, not one asked for and not
    /// yet received, or not ascending in a reply.
    BadFragment,
    /// More frames or replies than the protocol sends.
    TooMany,
    /// Nothing of this kind can come from that neighbour now (a frame to the
    /// root, data before this rank's `NEED`, a reply without [`NEED`]).
    Unexpected,
}

/// What [`Broadcast::next_chain_send`] put into the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Fragments the successor asked for, from fragment `k` on.
    Data(u32),
    /// [`END`]: the root has multicast every fragment.
    End,
}

/// A set of fragment indices, one bit each.
#[derive(Clone, Debug, Default)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: u32) -> Self {
        Bits(vec![0; (n as usize).div_ceil(64)])
    }

    fn get(&self, k: u32) -> bool {
        self.0
            .get(k as usize / 64)
            .is_some_and(|w| w & (1 << (k % 64)) != 0)
    }

    fn set(&mut self, k: u32) {
        self.0[k as usize / 64] |= 1 << (k % 64);
    }

    fn clear(&mut self, k: u32) {
        self.0[k as usize / 64] &= !(1 << (k % 64));
    }

    fn fill(&mut self) {
        self.0.fill(u64::MAX);
    }
}

/// Memory the caller lends a broadcast for its message and keeps owning:
/// the user's buffer, which the broadcast fills (or, on the root, reads)
/// where it lies, saving a copy and a second message's memory. It is
/// reached only through these calls, so that the lender can check each use
/// against the end of the loan.
pub trait Lent: Send {
    /// Bytes of the message.
    fn len(&self) -> usize;
    /// Whether the message is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Calls `f` on the message's bytes in `range`.
    fn read(&self, range: Range<usize>, f: &mut dyn FnMut(&[u8]));
    /// Copies `src` into the message from byte `at` on.
    fn write(&mut self, at: usize, src: &[u8]);
    /// The memory itself, where a transport may receive into it or send
    /// from it directly (`None`: only through these calls). Its lender ends
    /// the loan only after such a receive or send completed or was given up.
    fn memory(&mut self) -> Option<(NonNull<u8>, usize)> {
        None
    }
}

/// Memory its lender shares behind a lock and reads after the broadcast
/// (the simulator's ranks, the tests).
impl Lent for Arc<Mutex<Vec<u8>>> {
    fn len(&self) -> usize {
        self.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn read(&self, range: Range<usize>, f: &mut dyn FnMut(&[u8])) {
        f(&self.lock().unwrap_or_else(|p| p.into_inner())[range]);
    }

    fn write(&mut self, at: usize, src: &[u8]) {
        let mut bytes = self.lock().unwrap_or_else(|p| p.into_inner());
        bytes[at..at + src.len()].copy_from_slice(src);
    }
}

/// Where a broadcast's message lies.
enum Message {
    /// In a buffer of the broadcast's own.
    Own(Vec<u8>),
    /// In the caller's.
    Lent(Box<dyn Lent>),
    /// Nowhere: given up once this rank would touch it no more
    /// ([`Broadcast::give_up_message`]).
    GivenUp,
}

impl Message {
    /// `f` of the bytes in `range`.
    fn read<R>(&self, range: Range<usize>, f: impl FnOnce(&[u8]) -> R) -> R {
        match self {
            Message::Own(v) => f(&v[range]),
            Message::Lent(l) => {
                let (mut f, mut out) = (Some(f), None);
                l.read(range, &mut |b| out = f.take().map(|f| f(b)));
                out.expect("a lent read calls back once")
            }
            Message::GivenUp => panic!("{GIVEN_UP}"),
        }
    }

    fn write(&mut self, at: usize, src: &[u8]) {
        match self {
            Message::Own(v) => v[at..at + src.len()].copy_from_slice(src),
            Message::Lent(l) => l.write(at, src),
            Message::GivenUp => panic!("{GIVEN_UP}"),
        }
    }

    fn own(&self) -> &Vec<u8> {
        match self {
            Message::Own(v) => v,
            Message::Lent(_) => panic!("the message lies in the caller's memory"),
            Message::GivenUp => panic!("{GIVEN_UP}"),
        }
    }
}

const GIVEN_UP: &str = "the message was given up: this rank would touch it no more";

/// One rank's state in one two-stage broadcast.
pub struct Broadcast {
    params: Params,
    prot: Protection,
    /// An encrypted datagram is decrypted here, not in place (a datagram of
    /// a later broadcast is kept unchanged).
    scratch: Vec<u8>,
    fragments: u32,
    data: Message,
    /// This rank holds the fragment's bytes.
    owned: Bits,
    owned_count: u32,
    /// Fragments taken since [`Broadcast::deliver_into`] last ran.
    fresh: Vec<u32>,
    /// Root: when the message was in place.
    started: Option<Duration>,
    /// Root: the fragment stage 1 multicasts next; those before it are done.
    next_multicast: u32,
    /// Root: datagrams from `next_multicast` on that were offered and await
    /// `multicast_sent`.
    offered: u32,
    /// The last fragment's datagram came: stage 1 is as good as over.
    last_seen: bool,
    /// Fragments in a chain frame's block.
    block: u32,
    /// From the predecessor: whether its `END` came, what this rank's `NEED`
    /// asked for (once sent), which of those fragments are still to come
    /// (and how many in each block, and in how many blocks), and the data
    /// frames received.
    end_received: bool,
    requested: Option<Vec<u32>>,
    awaited: Bits,
    awaited_in_block: Vec<u32>,
    blocks_awaited: usize,
    frames_received: u32,
    /// To the successor: whether `END` went, whether its `NEED` came and
    /// what it listed, the fragments it asked for that this rank does not
    /// own yet, those not sent yet, and those it owns and has not sent yet
    /// (in the order they became sendable; one already sent in another's
    /// frame is skipped).
    end_sent: bool,
    succ_need_came: bool,
    succ_need: Vec<u32>,
    owed: Bits,
    unsent: Bits,
    unsent_count: usize,
    ready: VecDeque<u32>,
    data_sent: u32,
    bytes_by_multicast: u64,
    bytes_by_chain: u64,
    flow: Flow,
    /// Root: since when it has had datagrams to send and no credit.
    blocked_since: Option<Duration>,
}

impl Broadcast {
    /// A broadcast whose message buffer is zeroed; the root fills it through
    /// [`Broadcast::data_mut`] and then calls [`Broadcast::start_root`].
    ///
    /// # Panics
    /// If `vrank >= size`, if `fragment_size` is 0 or above
    /// [`datagram::MAX_PAYLOAD`], or if the message has [`NEED`] or more
    /// fragments: the driver derives these from checked parameters.
    pub fn new(params: Params) -> Self {
        Self::in_buffer(params, Vec::new())
    }

    /// As [`Broadcast::new`], the message in `buffer`, a finished
    /// broadcast's ([`Broadcast::into_data`]): its bytes are not zeroed
    /// again, since every one is written (the root's message, or a fragment
    /// received) before the broadcast is complete and [`Broadcast::data`]
    /// is read.
    ///
    /// # Panics
    /// As [`Broadcast::new`].
    pub fn in_buffer(params: Params, mut buffer: Vec<u8>) -> Self {
        // A longer buffer is cut to the message; a shorter one gains zeros
        // beyond the bytes it kept.
        buffer.resize(params.message_len, 0);
        Self::in_message(params, Message::Own(buffer))
    }

    /// As [`Broadcast::new`], the message in the caller's memory: the root's
    /// is read from it, every other rank's written into it, fragment by
    /// fragment as they come.
    ///
    /// # Panics
    /// As [`Broadcast::new`], and if `lent` is not as long as the message.
    pub fn in_lent(params: Params, lent: Box<dyn Lent>) -> Self {
        assert_eq!(
            lent.len(),
            params.message_len,
            "lent memory of the message's length"
        );
        Self::in_message(params, Message::Lent(lent))
    }

    fn in_message(params: Params, data: Message) -> Self {
        assert!(params.vrank < params.size, "vrank outside the communicator");
        assert!(
            (1..=datagram::MAX_PAYLOAD).contains(&params.fragment_size),
            "fragment size outside 1..=MAX_PAYLOAD"
        );
        let fragments = u32::try_from(params.message_len.div_ceil(params.fragment_size))
            .ok()
            .filter(|&n| n < NEED)
            .expect("fragment count fits below the chain's markers");
        Broadcast {
            params,
            prot: Protection::new(params.auth),
            scratch: Vec::new(),
            fragments,
            data,
            owned: Bits::new(fragments),
            owned_count: 0,
            fresh: Vec::new(),
            started: None,
            next_multicast: 0,
            offered: 0,
            last_seen: false,
            end_received: false,
            block: u32::try_from(params.frame_bytes / params.fragment_size)
                .unwrap_or(u32::MAX)
                .max(1),
            requested: None,
            awaited: Bits::new(fragments),
            awaited_in_block: Vec::new(),
            blocks_awaited: 0,
            frames_received: 0,
            end_sent: false,
            succ_need_came: false,
            succ_need: Vec::new(),
            owed: Bits::new(fragments),
            unsent: Bits::new(fragments),
            unsent_count: 0,
            ready: VecDeque::new(),
            data_sent: 0,
            bytes_by_multicast: 0,
            bytes_by_chain: 0,
            flow: Flow::new(fragments, params.window, params.size, params.vrank),
            blocked_since: None,
        }
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Number of fragments: `ceil(message_len / fragment_size)`.
    pub fn fragments(&self) -> u32 {
        self.fragments
    }

    /// The message as far as this rank has it.
    ///
    /// # Panics
    /// If it lies in the caller's memory ([`Broadcast::in_lent`]): the
    /// caller has it.
    pub fn data(&self) -> &[u8] {
        self.data.own()
    }

    /// Whether the message lies in the caller's memory ([`Broadcast::in_lent`]).
    pub fn is_lent(&self) -> bool {
        matches!(self.data, Message::Lent(_))
    }

    /// Bytes of the message held in a buffer of the broadcast's own: none
    /// where it lies in lent memory or was given up.
    pub fn held_bytes(&self) -> usize {
        match &self.data {
            Message::Own(v) => v.len(),
            Message::Lent(_) | Message::GivenUp => 0,
        }
    }

    /// Whether this rank will neither write nor read its message again:
    /// it owns every fragment (nothing more is written), the root has
    /// multicast them all, and the successor's `NEED` came and every
    /// fragment it listed went (nothing more is read). What may be left,
    /// the predecessor's `END` and the flow control reports, carries none
    /// of the message.
    pub fn message_settled(&self) -> bool {
        let to_succ = !self.expects_reply() || (self.succ_need_came && self.unsent_count == 0);
        self.is_complete() && self.stage1_done() && to_succ
    }

    /// Lets the message go once [`Broadcast::message_settled`]: the lent
    /// memory goes back to its lender, a buffer of its own is freed, and
    /// the rest of the broadcast runs without either.
    ///
    /// # Panics
    /// If the message is not settled; and any later use of it panics.
    pub fn give_up_message(&mut self) {
        assert!(self.message_settled(), "the message may still be used");
        self.data = Message::GivenUp;
    }

    /// Copies the fragments this rank took since the last call into `dst`,
    /// the caller's buffer of the message: called as datagrams come, it
    /// fills that buffer while the link is busy, rather than all of it
    /// after the last datagram. `dst` must be the same buffer each time.
    /// Nothing to do where the message lies in lent memory.
    ///
    /// # Panics
    /// If `dst` is not as long as the message.
    pub fn deliver_into(&mut self, dst: &mut [u8]) {
        let Message::Own(data) = &self.data else {
            return;
        };
        assert_eq!(dst.len(), data.len(), "a buffer of the message's length");
        let mut fresh = std::mem::take(&mut self.fresh);
        fresh.sort_unstable();
        // Fragments mostly come in order: one copy per run of them.
        let mut runs = fresh.iter().peekable();
        while let Some(&first) = runs.next() {
            let mut last = first;
            while runs.next_if(|&&k| k == last + 1).is_some() {
                last += 1;
            }
            let bytes = self.range(first).start..self.range(last).end;
            dst[bytes.clone()].copy_from_slice(&data[bytes]);
        }
        fresh.clear();
        self.fresh = fresh;
    }

    /// The message buffer, to be used again by a later broadcast (none
    /// where the message lay in lent memory).
    pub fn into_data(self) -> Vec<u8> {
        match self.data {
            Message::Own(v) => v,
            Message::Lent(_) | Message::GivenUp => Vec::new(),
        }
    }

    /// The message buffer, for the root to fill before [`Broadcast::start_root`].
    ///
    /// # Panics
    /// As [`Broadcast::data`].
    pub fn data_mut(&mut self) -> &mut [u8] {
        match &mut self.data {
            Message::Own(v) => v,
            Message::Lent(_) => panic!("the message lies in the caller's memory"),
            Message::GivenUp => panic!("{GIVEN_UP}"),
        }
    }

    /// Root only: the message is in place at time `now`. The root then owns
    /// every fragment; stage 1 may start at `now + root_wait`.
    pub fn start_root(&mut self, now: Duration) {
        if !self.is_root() || self.started.is_some() {
            return;
        }
        self.started = Some(now);
        self.owned.fill();
        self.owned_count = self.fragments;
        // A `NEED` cannot come before the root starts; were it here, all of it is sendable now.
        for k in 0..self.fragments {
            if self.owed.get(k) {
                self.owed.clear(k);
                self.ready.push_back(k);
            }
        }
    }

    /// Root only (tests): the next datagram of stage 1, encoded into `out`, or `None`
    /// while `root_wait` runs and once every fragment has been multicast. The
    /// same fragment is offered again until [`Broadcast::multicast_done`]
    /// confirms it, so a full socket buffer loses nothing.
    #[cfg(test)]
    pub fn next_multicast(&mut self, now: Duration, out: &mut Vec<u8>) -> Option<u32> {
        let k = self.next_multicast;
        (self.next_multicasts(now, 1, out) == 1).then_some(k)
    }

    /// Root only: up to `max` datagrams of stage 1 from the next one on,
    /// encoded back to back into `out` (cleared first), and how many. Every
    /// datagram but the message's last has the same length, so the kernel
    /// can cut `out` into them (UDP GSO). They are offered again until
    /// [`Broadcast::multicast_sent`] confirms them; 0 while `root_wait` runs
    /// and once every fragment has been multicast.
    pub fn next_multicasts(&mut self, now: Duration, max: usize, out: &mut Vec<u8>) -> usize {
        out.clear();
        self.offered = 0;
        if self.next_multicast >= self.fragments || self.stage1_start().is_none_or(|t| now < t) {
            return 0;
        }
        self.flow.count_again(self.next_multicast);
        if self.flow.credit(self.fragments) <= self.next_multicast {
            let since = *self.blocked_since.get_or_insert(now);
            if now.saturating_sub(since) < flow::STALL_LIMIT {
                return 0;
            }
            self.flow.stalled(self.next_multicast);
        }
        self.blocked_since = None;
        let end = self.flow.credit(self.fragments).min(
            self.next_multicast
                .saturating_add(max.try_into().unwrap_or(u32::MAX)),
        );
        for k in self.next_multicast..end {
            let header = Header {
                comm_id: self.params.comm_id,
                bcast: self.params.bcast,
                message_len: self.params.message_len as u64,
                fragment: k,
            };
            let prot = &self.prot;
            self.data.read(self.range(k), |payload| {
                datagram::encode_into(&header, payload, prot, out);
            });
        }
        self.offered = end - self.next_multicast;
        self.offered as usize
    }

    /// Root only (tests): the datagram last returned by `next_multicast`
    /// left (or was dropped for good by the network layer); move on to the
    /// next one.
    #[cfg(test)]
    pub fn multicast_done(&mut self) {
        self.multicast_sent(1);
    }

    /// Root only: the first `n` datagrams last offered left (or were dropped
    /// for good by the network layer); move on past them. Without an offer
    /// outstanding there is nothing to confirm: a stray call skips nothing.
    pub fn multicast_sent(&mut self, n: usize) {
        let n = self.offered.min(n.try_into().unwrap_or(u32::MAX));
        self.offered = 0;
        self.next_multicast += n;
    }

    /// Whether stage 1 is over on this rank (always true on non-roots).
    pub fn stage1_done(&self) -> bool {
        !self.is_root() || (self.started.is_some() && self.next_multicast >= self.fragments)
    }

    /// A datagram received from the group; any bytes at all. A datagram that
    /// names another communicator is rejected as such without the cost of
    /// checking its CRC or tag (it could not verify under this
    /// communicator's key anyway); every other one must verify before its
    /// broadcast number counts. The bytes are left unchanged (decryption
    /// works on a copy), so a datagram of a later broadcast can be kept and
    /// handed in again.
    pub fn on_datagram(&mut self, bytes: &[u8]) -> Verdict {
        let reject = |r| match r {
            Reject::BadLength => Verdict::BadLength,
            Reject::BadMagic => Verdict::BadMagic,
            Reject::BadCrc => Verdict::BadCrc,
            Reject::BadAuth => Verdict::BadAuth,
        };
        match datagram::header(bytes) {
            Err(r) => return reject(r),
            Ok(h) if h.comm_id != self.params.comm_id => return Verdict::WrongComm,
            Ok(_) => {}
        }
        let current = self.params.bcast;
        let judge = |this: &mut Self, d: Result<datagram::Datagram<'_>, Reject>| match d {
            Err(r) => reject(r),
            Ok(d) if d.header.bcast < current => Verdict::Stale,
            Ok(d) if d.header.bcast > current => Verdict::Future,
            Ok(d) => this.on_authentic(d.header, d.payload),
        };
        if !self.prot.encrypts() {
            // Checked where it lies: the tag or CRC reads it once, and only
            // the payload is copied, into the message.
            let checked = datagram::verify(bytes, &self.prot);
            return judge(self, checked);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.extend_from_slice(bytes);
        let verdict = judge(self, datagram::decode(&mut scratch, &self.prot));
        self.scratch = scratch;
        verdict
    }

    /// A datagram of this broadcast that passed its CRC or tag.
    fn on_authentic(&mut self, h: Header, payload: &[u8]) -> Verdict {
        if h.message_len != self.params.message_len as u64
            || h.fragment >= self.fragments
            || payload.len() != self.range(h.fragment).len()
        {
            return Verdict::BadLength;
        }
        if self.is_root() {
            return Verdict::Own;
        }
        self.flow.passed(h.fragment);
        if h.fragment + 1 == self.fragments {
            self.last_seen = true;
        }
        if self.owns(h.fragment) {
            return Verdict::Duplicate;
        }
        self.take(h.fragment, payload);
        self.bytes_by_multicast += payload.len() as u64;
        Verdict::Useful
    }

    /// Frames from the predecessor that are certain to come and have not
    /// been handed to [`Broadcast::on_chain`]: the driver may have that many
    /// receives posted, and no more, since a receive beyond them could match
    /// a frame of the next broadcast. That is `END` until it came, plus one
    /// frame for each block with a fragment this rank's `NEED` asked for
    /// that has not come.
    pub fn chain_frames_certain(&self) -> u32 {
        if !self.has_predecessor() || self.fragments == 0 {
            return 0;
        }
        u32::from(!self.end_received) + self.blocks_awaited as u32
    }

    /// Frames received from the predecessor so far, `END` included.
    pub fn chain_frames_received(&self) -> u32 {
        u32::from(self.end_received) + self.frames_received
    }

    /// Largest chain frame of this broadcast, for sizing receive buffers.
    pub fn max_chain_frame(&self) -> usize {
        let block = self.params.fragment_size * self.block as usize;
        CHAIN_HEADER_LEN + block.min(self.params.message_len)
    }

    /// Whether more than `frames` full chain frames' worth of what the
    /// successor's `NEED` listed is still to be sent to it.
    pub fn owes_more_than(&self, frames: usize) -> bool {
        self.unsent_count > frames * self.block as usize
    }

    /// Largest reply of this broadcast: [`NEED`] and every fragment index.
    pub fn max_reply(&self) -> usize {
        4 + 4 * self.fragments as usize
    }

    /// Whether a reply will come from the successor (receive it from the start).
    pub fn expects_reply(&self) -> bool {
        self.has_successor() && self.fragments > 0
    }

    /// A chain frame received from the predecessor.
    pub fn on_chain(&mut self, frame: &[u8]) -> Result<(), ChainError> {
        if !self.has_predecessor() || self.fragments == 0 {
            return Err(ChainError::Unexpected);
        }
        if frame.len() < CHAIN_HEADER_LEN {
            return Err(ChainError::BadLength);
        }
        let (head, payload) = frame.split_at(CHAIN_HEADER_LEN);
        let k = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        if k == END {
            if !payload.is_empty() {
                return Err(ChainError::BadLength);
            }
            if self.end_received {
                return Err(ChainError::TooMany);
            }
            self.end_received = true;
            return Ok(());
        }
        if k >= self.fragments {
            return Err(ChainError::BadFragment);
        }
        let Some(requested) = &self.requested else {
            return Err(ChainError::Unexpected);
        };
        if !self.awaited.get(k) {
            return Err(ChainError::BadFragment);
        }
        // The fragments the frame carries: k and those listed after it in
        // its block, as far as its length goes.
        let listed = from_in_block(requested, k, self.block);
        let (from, mut to, mut len) = (listed.start, listed.start, 0);
        while len < payload.len() && to < listed.end && self.awaited.get(requested[to]) {
            len += self.range(requested[to]).len();
            to += 1;
        }
        if to == from || len != payload.len() {
            return Err(ChainError::BadLength);
        }
        self.frames_received += 1;
        let mut at = 0;
        for i in from..to {
            let m = self.requested.as_ref().expect("asked")[i];
            let piece = &payload[at..at + self.range(m).len()];
            at += piece.len();
            self.awaited.clear(m);
            let left = &mut self.awaited_in_block[(m / self.block) as usize];
            *left -= 1;
            if *left == 0 {
                self.blocks_awaited -= 1;
            }
            if !self.owns(m) {
                self.take(m, piece);
                self.bytes_by_chain += piece.len() as u64;
            }
        }
        Ok(())
    }

    /// The next chain frame for the successor, encoded into `out`: `END` once
    /// this rank knows stage 1 is over (see `end_due`), and each fragment the successor's `NEED`
    /// asked for once this rank owns it. `None` on the last rank and while
    /// there is nothing to send yet.
    pub fn next_chain_send(&mut self, out: &mut Vec<u8>) -> Option<Frame> {
        if !self.has_successor() || self.fragments == 0 {
            return None;
        }
        if !self.end_sent && self.end_due() {
            self.end_sent = true;
            out.clear();
            out.extend_from_slice(&END.to_le_bytes());
            return Some(Frame::End);
        }
        let k = loop {
            let k = self.ready.pop_front()?;
            if self.unsent.get(k) {
                break k;
            }
        };
        // With k go the fragments listed after it in its block that this
        // rank owns and has not sent, up to the first it lacks.
        let listed = from_in_block(&self.succ_need, k, self.block);
        let (from, mut to) = (listed.start, listed.start + 1);
        while to < listed.end
            && self.owns(self.succ_need[to])
            && self.unsent.get(self.succ_need[to])
        {
            to += 1;
        }
        self.data_sent += 1;
        out.clear();
        out.extend_from_slice(&k.to_le_bytes());
        self.unsent_count -= to - from;
        for i in from..to {
            let m = self.succ_need[i];
            self.unsent.clear(m);
            self.data
                .read(self.range(m), |payload| out.extend_from_slice(payload));
        }
        Some(Frame::Data(k))
    }

    /// Whether this rank should now tell its predecessor what it lacks: it
    /// owns everything, the last fragment's datagram came, or `END` came.
    /// Exactly one `NEED` per broadcast goes from every rank but the root.
    pub fn need_due(&self) -> bool {
        self.has_predecessor()
            && self.fragments > 0
            && self.requested.is_none()
            && (self.is_complete() || self.last_seen || self.end_received)
    }

    /// The `NEED` for the predecessor, encoded into `out`, once it is due
    /// ([`Broadcast::need_due`]): [`NEED`] and the fragments this rank still
    /// lacks; `false` when it is not due. The driver should read waiting
    /// datagrams first, so that it does not ask for what has already arrived.
    pub fn next_reply(&mut self, out: &mut Vec<u8>) -> bool {
        if !self.need_due() {
            return false;
        }
        let missing: Vec<u32> = (0..self.fragments).filter(|&k| !self.owns(k)).collect();
        out.clear();
        out.extend_from_slice(&NEED.to_le_bytes());
        for &k in &missing {
            out.extend_from_slice(&k.to_le_bytes());
            self.awaited.set(k);
        }
        if !missing.is_empty() {
            self.awaited_in_block = vec![0; self.fragments.div_ceil(self.block) as usize];
        }
        for &k in &missing {
            let left = &mut self.awaited_in_block[(k / self.block) as usize];
            self.blocks_awaited += usize::from(*left == 0);
            *left += 1;
        }
        self.requested = Some(missing);
        true
    }

    /// The successor's `NEED`: the fragments to send it, each once this rank
    /// owns it.
    pub fn on_reply(&mut self, reply: &[u8]) -> Result<(), ChainError> {
        if !self.expects_reply() {
            return Err(ChainError::Unexpected);
        }
        if self.succ_need_came {
            return Err(ChainError::TooMany);
        }
        if reply.len() < 4 || reply.len() % 4 != 0 || reply.len() > self.max_reply() {
            return Err(ChainError::BadLength);
        }
        let mut words = reply
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
        if words.next() != Some(NEED) {
            return Err(ChainError::Unexpected);
        }
        let need: Vec<u32> = words.collect();
        let ascending = need.windows(2).all(|w| w[0] < w[1]);
        if !ascending || need.last().is_some_and(|&k| k >= self.fragments) {
            return Err(ChainError::BadFragment);
        }
        self.succ_need_came = true;
        self.unsent_count = need.len();
        for &k in &need {
            self.unsent.set(k);
            if self.owns(k) {
                self.ready.push_back(k);
            } else {
                self.owed.set(k);
            }
        }
        self.succ_need = need;
        Ok(())
    }

    /// Root: when it next needs a step though nothing came: the start of
    /// stage 1, or the end of its wait for reports ([`flow::STALL_LIMIT`]).
    pub fn wake_at(&self) -> Option<Duration> {
        if self.stage1_done() {
            return None;
        }
        match self.blocked_since {
            Some(t) => Some(t.saturating_add(flow::STALL_LIMIT)),
            None => self.stage1_start(),
        }
    }

    /// The flow control report due to the parent now, encoded into `out`,
    /// and the parent (a distance from the root); `None` when none is due.
    /// The last report always goes before this rank's `NEED` (see
    /// [`crate::protocol::flow`]): call this first.
    pub fn next_report(&mut self, out: &mut Vec<u8>) -> Option<usize> {
        let over = self.end_due();
        let checkpoint = self.flow.report_due(over)?;
        self.flow.reported(checkpoint);
        out.clear();
        out.extend_from_slice(&checkpoint.to_le_bytes());
        self.flow.parent()
    }

    /// Whether a flow control report is due: the driver then stops reading
    /// datagrams for a turn of the chain, which sends it, so that the
    /// root's credit does not wait for a whole burst of reads.
    pub fn report_due(&self) -> bool {
        self.flow.report_due(self.end_due()).is_some()
    }

    /// The children (distances from the root) whose reports are still to
    /// come: one receive of [`flow::REPORT_LEN`] bytes stays posted for each.
    pub fn reports_pending(&self) -> impl Iterator<Item = usize> + '_ {
        self.flow.children_pending()
    }

    /// A flow control report from `child` (a distance from the root).
    pub fn on_report(&mut self, child: usize, report: &[u8]) -> Result<(), ReportError> {
        self.flow.on_report(child, report)
    }

    /// Whether the successor's `NEED` is still to be received and may be
    /// now: when the successor is also a child in the reporting tree, its
    /// `NEED` follows its last report.
    pub fn reply_may_come(&self) -> bool {
        self.expects_reply() && !self.succ_need_came && !self.flow.awaits(1)
    }

    /// Root: times its receivers' reports stopped for [`flow::STALL_LIMIT`]
    /// in this broadcast and it sent more without them.
    pub fn flow_stalls(&self) -> u32 {
        self.flow.stalls()
    }

    /// Whether this rank's flow control reports are all sent and received.
    pub fn flow_done(&self) -> bool {
        self.flow.is_done()
    }

    /// Whether this rank owns every fragment (the data is complete).
    pub fn is_complete(&self) -> bool {
        self.owned_count == self.fragments
    }

    /// Whether this rank's part of the broadcast is over: complete, `END`
    /// received and handed on, its `NEED` sent and answered, and the
    /// successor's `NEED` received and served. (The driver still waits for
    /// its sends to finish.)
    pub fn is_done(&self) -> bool {
        if self.fragments == 0 {
            return self.stage1_done();
        }
        let from_pred = !self.has_predecessor()
            || (self.requested.is_some() && self.chain_frames_certain() == 0);
        let end_handed_on = !self.has_successor() || self.end_sent;
        self.message_settled() && from_pred && end_handed_on && self.flow.is_done()
    }

    /// Payload bytes that first arrived by multicast, and by the chain.
    pub fn bytes_by_multicast(&self) -> u64 {
        self.bytes_by_multicast
    }

    pub fn bytes_by_chain(&self) -> u64 {
        self.bytes_by_chain
    }

    /// Whether this rank holds fragment `k` (false for `k >= fragments()`).
    pub fn owns(&self, k: u32) -> bool {
        k < self.fragments && self.owned.get(k)
    }

    /// What this rank's `NEED` asked for, once it was made.
    pub fn requested(&self) -> Option<&[u32]> {
        self.requested.as_deref()
    }

    /// Whether the predecessor's `END` came (always false on the root).
    pub fn end_received(&self) -> bool {
        self.end_received
    }

    /// Root: when stage 1 may start (`start_root`'s `now` plus `root_wait`),
    /// so that the driver knows how long to sleep; `None` before `start_root`
    /// and on non-roots.
    pub fn stage1_start(&self) -> Option<Duration> {
        self.started
            .map(|t| t.saturating_add(self.params.root_wait))
    }

    /// Data frames sent to the successor so far (`END` not counted).
    pub fn chain_frames_sent(&self) -> u32 {
        self.data_sent
    }

    fn is_root(&self) -> bool {
        self.params.vrank == 0
    }

    fn has_predecessor(&self) -> bool {
        !self.is_root()
    }

    fn has_successor(&self) -> bool {
        self.params.vrank + 1 < self.params.size
    }

    /// Whether this rank knows that the root has multicast every fragment: the
    /// root once it has; others once `END` came, or the last fragment's
    /// datagram (the root multicasts in order), or once they are complete
    /// (which, by the chain, needs one of those first). Ranks that got the last
    /// datagram hand `END` on at once, so it rarely travels more than a hop.
    fn end_due(&self) -> bool {
        if self.is_root() {
            self.started.is_some() && self.stage1_done()
        } else {
            self.end_received || self.last_seen || self.is_complete()
        }
    }

    /// The bytes of fragment `k < fragments()` in the message.
    fn range(&self, k: u32) -> Range<usize> {
        let start = k as usize * self.params.fragment_size;
        let end = self
            .params
            .message_len
            .min(start + self.params.fragment_size);
        start..end
    }

    /// Makes fragment `k` (not yet owned) this rank's, and sendable to the
    /// successor if it asked for it.
    fn take(&mut self, k: u32, payload: &[u8]) {
        self.data.write(self.range(k).start, payload);
        self.owned.set(k);
        self.owned_count += 1;
        if !self.is_lent() {
            self.fresh.push(k);
        }
        if self.owed.get(k) {
            self.owed.clear(k);
            self.ready.push_back(k);
        }
    }
}

/// Where fragment `k` and those after it in its block (of `block`
/// fragments) lie in `list`, ascending fragment indices.
fn from_in_block(list: &[u32], k: u32, block: u32) -> Range<usize> {
    let end = (k / block).saturating_mul(block).saturating_add(block);
    list.partition_point(|&m| m < k)..list.partition_point(|&m| m < end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const COMM: u64 = 0xfeed_f00d_0123_4567;
    const BCAST: u64 = 9;

    fn params(vrank: usize, size: usize, message_len: usize, fragment_size: usize) -> Params {
        Params {
            comm_id: COMM,
            bcast: BCAST,
            size,
            vrank,
            message_len,
            fragment_size,
            auth: Auth::crc(true),
            root_wait: Duration::ZERO,
            window: 0,
            frame_bytes: 0,
        }
    }

    /// A started root of a `len`-byte message whose byte `i` is `i as u8`.
    fn root(size: usize, len: usize, fragment_size: usize, wait: Duration) -> Broadcast {
        let mut b = Broadcast::new(Params {
            root_wait: wait,
            ..params(0, size, len, fragment_size)
        });
        for (i, byte) in b.data_mut().iter_mut().enumerate() {
            *byte = i as u8;
        }
        b.start_root(Duration::from_millis(1));
        b
    }

    /// Datagram `fragment` of `p`'s broadcast with header changes `f`.
    fn datagram_of(p: &Params, fragment: u32, payload: &[u8], f: impl Fn(&mut Header)) -> Vec<u8> {
        let mut h = Header {
            comm_id: p.comm_id,
            bcast: p.bcast,
            message_len: p.message_len as u64,
            fragment,
        };
        f(&mut h);
        let mut out = Vec::new();
        datagram::encode(&h, payload, &Protection::new(p.auth), &mut out);
        out
    }

    /// Fragment `k` of `b`'s message, for a fragment size of 256.
    fn piece(b: &Broadcast, k: u32) -> &[u8] {
        let start = k as usize * 256;
        &b.data()[start..b.data().len().min(start + 256)]
    }

    fn frame(k: u32, payload: &[u8]) -> Vec<u8> {
        [&k.to_le_bytes()[..], payload].concat()
    }

    fn end() -> Vec<u8> {
        END.to_le_bytes().to_vec()
    }

    fn need(ks: &[u32]) -> Vec<u8> {
        std::iter::once(NEED)
            .chain(ks.iter().copied())
            .flat_map(u32::to_le_bytes)
            .collect()
    }

    /// Every frame `b` would send its successor now.
    fn drain(b: &mut Broadcast) -> Vec<(Frame, Vec<u8>)> {
        let mut out = Vec::new();
        std::iter::from_fn(|| b.next_chain_send(&mut out).map(|f| (f, out.clone()))).collect()
    }

    #[test]
    fn fragment_counts_and_frame_sizes() {
        for (len, fs, n, max_frame) in [
            (0, 256, 0, 4),
            (1, 256, 1, 5),
            (256, 256, 1, 260),
            (257, 256, 2, 260),
            (1 << 20, 256, 4096, 260),
        ] {
            let b = Broadcast::new(params(1, 3, len, fs));
            assert_eq!(b.fragments(), n, "{len} bytes");
            assert_eq!(b.max_chain_frame(), max_frame, "{len} bytes");
            assert_eq!(b.max_reply(), 4 + 4 * n as usize);
            assert_eq!(b.chain_frames_certain(), u32::from(n > 0), "END will come");
            assert_eq!(b.expects_reply(), n > 0);
            assert_eq!(b.data().len(), len);
        }
        let root = Broadcast::new(params(0, 3, 1000, 256));
        assert_eq!(root.chain_frames_certain(), 0);
        assert!(!Broadcast::new(params(2, 3, 1000, 256)).expects_reply());
    }

    #[test]
    fn root_waits_multicasts_each_fragment_once_then_sends_end() {
        let wait = Duration::from_micros(50);
        let mut b = root(4, 600, 256, wait);
        let t0 = Duration::from_millis(1);
        let mut out = Vec::new();
        assert!(b.is_complete() && !b.stage1_done() && !b.is_done());
        assert_eq!(b.stage1_start(), Some(t0 + wait));
        assert_eq!(b.next_chain_send(&mut out), None, "chain before stage 1");
        assert_eq!(
            b.next_multicast(t0 + wait / 2, &mut out),
            None,
            "during root_wait"
        );
        for k in 0..3u32 {
            // A send that would block gets the same fragment again.
            assert_eq!(b.next_multicast(t0 + wait, &mut out), Some(k));
            let first = out.clone();
            assert_eq!(b.next_multicast(t0 + wait, &mut out), Some(k));
            assert_eq!(out, first);
            let mut copy = out.clone();
            let d = datagram::decode(&mut copy, &Protection::crc(true)).unwrap();
            assert_eq!(d.header.fragment, k);
            assert_eq!(d.header.message_len, 600);
            assert_eq!(d.payload, piece(&b, k));
            assert!(!b.stage1_done());
            assert_eq!(b.next_chain_send(&mut out), None, "no END during stage 1");
            b.multicast_done();
        }
        assert!(b.stage1_done());
        assert_eq!(b.next_multicast(t0 + wait, &mut out), None);
        assert_eq!(drain(&mut b), [(Frame::End, end())]);
        assert!(!b.is_done(), "the successor's NEED is due");
        assert_eq!(b.on_reply(&need(&[0, 2])), Ok(()));
        assert_eq!(
            drain(&mut b),
            [
                (Frame::Data(0), frame(0, piece(&b, 0))),
                (Frame::Data(2), frame(2, piece(&b, 2)))
            ]
        );
        assert!(b.is_done());
        assert_eq!(b.chain_frames_sent(), 2);
        assert_eq!(b.on_reply(&need(&[])), Err(ChainError::TooMany));
        assert_eq!((b.bytes_by_multicast(), b.bytes_by_chain()), (0, 0));
    }

    #[test]
    fn the_root_serves_a_need_that_comes_during_stage_1() {
        let mut b = root(3, 600, 256, Duration::ZERO);
        let mut out = Vec::new();
        let now = Duration::from_millis(1);
        assert_eq!(b.next_multicast(now, &mut out), Some(0));
        b.multicast_done();
        assert_eq!(b.on_reply(&need(&[1])), Ok(()));
        assert_eq!(drain(&mut b), [(Frame::Data(1), frame(1, piece(&b, 1)))]);
        while b.next_multicast(now, &mut out).is_some() {
            b.multicast_done();
        }
        assert_eq!(drain(&mut b), [(Frame::End, end())]);
        assert!(b.is_done());
    }

    #[test]
    fn a_stray_multicast_done_skips_nothing() {
        let mut b = root(2, 300, 256, Duration::from_secs(1));
        let mut out = Vec::new();
        b.multicast_done();
        let late = Duration::from_secs(5);
        assert_eq!(b.next_multicast(late, &mut out), Some(0));
        b.multicast_done();
        b.multicast_done();
        assert_eq!(b.next_multicast(late, &mut out), Some(1));
    }

    /// A batch is the next datagrams back to back, each as `next_multicast`
    /// would give it; only what `multicast_sent` confirms is done, and an
    /// unconfirmed rest is offered again.
    #[test]
    fn batches_of_datagrams_are_offered_until_confirmed() {
        let now = Duration::from_secs(1);
        let mut one = root(3, 1000, 256, Duration::ZERO);
        let mut singles = Vec::new();
        let mut out = Vec::new();
        while one.next_multicast(now, &mut out).is_some() {
            singles.push(out.clone());
            one.multicast_done();
        }
        assert_eq!(singles.len(), 4, "three of 256 bytes and one of 232");
        let mut b = root(3, 1000, 256, Duration::ZERO);
        let mut batch = Vec::new();
        assert_eq!(b.next_multicasts(now, 3, &mut batch), 3);
        assert_eq!(batch, singles[..3].concat());
        b.multicast_sent(2);
        assert_eq!(b.next_multicasts(now, 8, &mut batch), 2);
        assert_eq!(batch, singles[2..].concat(), "the unconfirmed third again");
        b.multicast_sent(5);
        assert!(b.stage1_done());
        assert_eq!(b.next_multicasts(now, 8, &mut batch), 0);
        assert!(batch.is_empty());
    }

    #[test]
    fn nothing_happens_on_a_root_before_start_root() {
        let mut b = Broadcast::new(params(0, 2, 300, 256));
        let mut out = Vec::new();
        assert_eq!(b.next_multicast(Duration::from_secs(9), &mut out), None);
        assert_eq!(b.next_chain_send(&mut out), None);
        assert!(!b.stage1_done() && !b.is_complete() && !b.is_done());
    }

    #[test]
    fn receiver_takes_a_fragment_once_and_the_root_calls_it_own() {
        let mut r = root(3, 600, 256, Duration::ZERO);
        let mut out = Vec::new();
        r.next_multicast(Duration::from_secs(1), &mut out).unwrap();
        let mut b = Broadcast::new(params(1, 3, 600, 256));
        assert_eq!(b.on_datagram(&out), Verdict::Useful);
        assert_eq!(b.on_datagram(&out), Verdict::Duplicate);
        assert_eq!(r.on_datagram(&out), Verdict::Own);
        assert!(b.owns(0) && !b.owns(1) && !b.owns(99));
        assert_eq!(&b.data()[..256], &r.data()[..256]);
        assert!(b.data()[256..].iter().all(|&x| x == 0));
        assert_eq!((b.bytes_by_multicast(), b.bytes_by_chain()), (256, 0));
    }

    /// The caller's buffer gets each fragment once it is taken, whichever
    /// way and order it came, and nothing else.
    #[test]
    fn deliver_into_copies_what_came_since_the_last_call() {
        let r = root(3, 1300, 256, Duration::ZERO);
        let p = params(1, 3, 1300, 256);
        let mut b = Broadcast::new(p);
        let mut user = vec![0xee; 1300];
        for k in [3, 0, 1] {
            assert_eq!(
                b.on_datagram(&datagram_of(&p, k, piece(&r, k), |_| ())),
                Verdict::Useful
            );
        }
        b.deliver_into(&mut user);
        for k in 0..6 {
            let place = &user[k * 256..1300.min(k * 256 + 256)];
            if [0, 1, 3].contains(&k) {
                assert_eq!(place, piece(&r, k as u32), "fragment {k}");
            } else {
                assert!(place.iter().all(|&x| x == 0xee), "fragment {k} untouched");
            }
        }
        user[..256].fill(0xee);
        b.deliver_into(&mut user);
        assert!(user[..256].iter().all(|&x| x == 0xee), "each fragment once");
        for k in [5, 2, 4] {
            assert_eq!(
                b.on_datagram(&datagram_of(&p, k, piece(&r, k), |_| ())),
                Verdict::Useful
            );
        }
        b.deliver_into(&mut user);
        assert_eq!(user[256..], r.data()[256..]);
    }

    /// A finished broadcast's buffer, larger and full of its bytes, holds
    /// the next message exactly once every fragment came.
    #[test]
    fn a_used_buffer_holds_the_next_message_exactly() {
        let mut r = root(3, 600, 256, Duration::ZERO);
        let mut b = Broadcast::in_buffer(params(1, 3, 600, 256), vec![0xee; 5000]);
        assert_eq!(b.data().len(), 600);
        let mut out = Vec::new();
        while r.next_multicast(Duration::from_secs(1), &mut out).is_some() {
            assert_eq!(b.on_datagram(&out), Verdict::Useful);
            r.multicast_sent(1);
        }
        assert!(b.is_complete());
        assert_eq!(b.data(), r.data());
        let again = Broadcast::in_buffer(params(1, 3, 9000, 256), b.into_data());
        assert_eq!(again.data().len(), 9000);
    }

    #[test]
    fn datagrams_of_other_communicators_and_broadcasts_are_classified() {
        for vrank in [0, 1] {
            let mut b = Broadcast::new(params(vrank, 2, 600, 256));
            let p = *b.params();
            let pl = [1u8; 256];
            let cases = [
                (
                    datagram_of(&p, 0, &pl, |h| h.comm_id ^= 1),
                    Verdict::WrongComm,
                ),
                (datagram_of(&p, 0, &pl, |h| h.bcast -= 1), Verdict::Stale),
                (datagram_of(&p, 0, &pl, |h| h.bcast = 0), Verdict::Stale),
                (datagram_of(&p, 0, &pl, |h| h.bcast += 1), Verdict::Future),
                (
                    datagram_of(&p, 0, &pl, |h| h.bcast = u64::MAX),
                    Verdict::Future,
                ),
                // The comm id is checked before the broadcast number.
                (
                    datagram_of(&p, 0, &pl, |h| (h.comm_id, h.bcast) = (0, 0)),
                    Verdict::WrongComm,
                ),
            ];
            for (bytes, want) in cases {
                assert_eq!(b.on_datagram(&bytes), want, "vrank {vrank}");
            }
            assert_eq!(b.bytes_by_multicast(), 0);
        }
    }

    #[test]
    fn datagrams_that_do_not_fit_the_message_are_bad_length() {
        for vrank in [0, 1] {
            let mut b = Broadcast::new(params(vrank, 2, 600, 256));
            let p = *b.params();
            let cases = [
                datagram_of(&p, 0, &[1; 256], |h| h.message_len = 601),
                datagram_of(&p, 0, &[1; 256], |h| h.message_len = 600 + (1 << 32)),
                datagram_of(&p, 3, &[1; 88], |_| {}),
                datagram_of(&p, u32::MAX, &[1; 88], |_| {}),
                datagram_of(&p, 0, &[1; 255], |_| {}),
                datagram_of(&p, 0, &[1; 257], |_| {}),
                datagram_of(&p, 2, &[1; 256], |_| {}),
                datagram_of(&p, 2, &[1; 87], |_| {}),
                datagram_of(&p, 2, &[], |_| {}),
            ];
            for bytes in cases {
                assert_eq!(b.on_datagram(&bytes), Verdict::BadLength, "vrank {vrank}");
            }
            assert!(b.data().iter().all(|&x| x == 0) || vrank == 0);
        }
    }

    #[test]
    fn decoder_rejections_map_to_verdicts() {
        let mut b = Broadcast::new(params(1, 2, 600, 256));
        let p = *b.params();
        let good = datagram_of(&p, 0, &[1; 256], |_| {});
        assert_eq!(b.on_datagram(&good[..20]), Verdict::BadLength);
        assert_eq!(b.on_datagram(&good[..good.len() - 1]), Verdict::BadLength);
        let mut bad = good.clone();
        bad[0] ^= 1;
        assert_eq!(b.on_datagram(&bad), Verdict::BadMagic);
        let mut bad = good.clone();
        bad[100] ^= 1;
        assert_eq!(b.on_datagram(&bad), Verdict::BadCrc);
        let no_crc = datagram_of(
            &Params {
                auth: Auth::crc(false),
                ..p
            },
            0,
            &[1; 256],
            |_| {},
        );
        assert_eq!(b.on_datagram(&no_crc), Verdict::BadCrc);
        assert_eq!(b.on_datagram(&[]), Verdict::BadLength);
        assert!(!b.owns(0));
        assert_eq!(b.on_datagram(&good), Verdict::Useful);
    }

    /// With a key, only the root's datagrams count: forgeries with a valid
    /// CRC or a tag under another key are rejected as such, for this
    /// broadcast and for later ones; the root's are taken (and decrypted).
    #[test]
    fn with_a_key_forgeries_are_rejected_and_the_roots_datagrams_taken() {
        use crate::protocol::datagram::Key;
        for auth in [
            Auth::Tag(Key([1; 32])),
            Auth::Polyval(Key([1; 32])),
            Auth::Encrypt(Key([1; 32])),
        ] {
            let p = Params {
                auth,
                ..params(1, 2, 600, 256)
            };
            let mut r = Broadcast::new(Params { vrank: 0, ..p });
            for (i, byte) in r.data_mut().iter_mut().enumerate() {
                *byte = i as u8;
            }
            r.start_root(Duration::ZERO);
            let mut b = Broadcast::new(p);
            let wrong_key = match auth {
                Auth::Tag(_) => Auth::Tag(Key([2; 32])),
                Auth::Polyval(_) => Auth::Polyval(Key([2; 32])),
                _ => Auth::Encrypt(Key([2; 32])),
            };
            for bcast in [p.bcast, p.bcast + 1] {
                for forger in [Auth::crc(true), Auth::crc(false), wrong_key] {
                    let forged = datagram_of(
                        &Params {
                            auth: forger,
                            bcast,
                            ..p
                        },
                        0,
                        &[0xee; 256],
                        |_| {},
                    );
                    assert_eq!(b.on_datagram(&forged), Verdict::BadAuth, "{forger:?}");
                }
            }
            let mut out = Vec::new();
            let mut k = 0;
            while r.next_multicast(Duration::ZERO, &mut out).is_some() {
                if let Auth::Encrypt(_) = auth {
                    assert_ne!(&out[datagram::HEADER_LEN..][..4], &[0, 1, 2, 3], "in clear");
                } else {
                    assert_eq!(&out[datagram::HEADER_LEN..][..4], &[0, 1, 2, 3], "in clear");
                }
                assert_eq!(b.on_datagram(&out), Verdict::Useful, "fragment {k}");
                r.multicast_done();
                k += 1;
            }
            assert_eq!(k, 3);
            assert!(b.is_complete());
            assert_eq!(b.data(), r.data());
            // A datagram of this communicator under its key, but of a later
            // broadcast, is kept for it: not rejected.
            let later = datagram_of(
                &Params {
                    bcast: p.bcast + 1,
                    ..p
                },
                0,
                &[1; 256],
                |_| {},
            );
            assert_eq!(b.on_datagram(&later), Verdict::Future);
        }
    }

    #[test]
    fn without_crc_the_same_checks_apply() {
        let p = Params {
            auth: Auth::crc(false),
            ..params(1, 2, 600, 256)
        };
        let mut b = Broadcast::new(p);
        assert_eq!(
            b.on_datagram(&datagram_of(&p, 2, &[1; 256], |_| {})),
            Verdict::BadLength
        );
        assert_eq!(
            b.on_datagram(&datagram_of(&p, 2, &[1; 88], |_| {})),
            Verdict::Useful
        );
        assert_eq!(b.bytes_by_multicast(), 88);
    }

    #[test]
    fn chain_frames_are_checked() {
        let mut r = root(3, 600, 256, Duration::ZERO);
        assert_eq!(
            r.on_chain(&frame(0, &[0; 256])),
            Err(ChainError::Unexpected)
        );
        let mut b = Broadcast::new(params(1, 3, 600, 256));
        let p = *b.params();
        assert_eq!(b.on_chain(&[0, 0, 0]), Err(ChainError::BadLength));
        assert_eq!(
            b.on_chain(&frame(3, &[0; 88])),
            Err(ChainError::BadFragment)
        );
        assert_eq!(b.on_chain(&frame(NEED, &[])), Err(ChainError::BadFragment));
        assert_eq!(b.on_chain(&frame(END, &[0])), Err(ChainError::BadLength));
        assert_eq!(
            b.on_chain(&frame(1, &[1; 256])),
            Err(ChainError::Unexpected),
            "data before this rank's NEED"
        );
        assert_eq!(b.chain_frames_received(), 0, "rejected frames do not count");
        assert!(!b.need_due());
        b.on_datagram(&datagram_of(&p, 1, &[1; 256], |_| {}));
        assert_eq!(b.on_chain(&end()), Ok(()));
        assert_eq!(b.on_chain(&end()), Err(ChainError::TooMany));
        assert_eq!(b.chain_frames_certain(), 0, "the NEED is not made yet");
        assert!(b.need_due());
        let mut out = Vec::new();
        assert!(b.next_reply(&mut out));
        assert_eq!(out, need(&[0, 2]));
        assert_eq!(b.requested(), Some(&[0, 2][..]));
        assert!(!b.need_due() && !b.next_reply(&mut out), "one NEED only");
        assert_eq!(b.chain_frames_certain(), 2);
        assert_eq!(b.on_chain(&frame(0, &[0; 255])), Err(ChainError::BadLength));
        assert_eq!(b.on_chain(&frame(0, &[])), Err(ChainError::BadLength));
        assert_eq!(b.on_chain(&frame(2, &[0; 256])), Err(ChainError::BadLength));
        // Only what was asked for, each once, in any order.
        assert_eq!(
            b.on_chain(&frame(1, &[1; 256])),
            Err(ChainError::BadFragment)
        );
        assert_eq!(b.on_chain(&frame(2, &[3; 88])), Ok(()));
        assert!(!b.is_done());
        assert_eq!(
            b.on_chain(&frame(2, &[3; 88])),
            Err(ChainError::BadFragment)
        );
        assert_eq!(b.on_chain(&frame(0, &[2; 256])), Ok(()));
        assert_eq!(b.chain_frames_received(), 3);
        assert_eq!(b.chain_frames_certain(), 0);
        assert!(b.is_complete());
        assert_eq!((b.bytes_by_multicast(), b.bytes_by_chain()), (256, 344));
        assert_eq!(b.data()[255..258], [2, 1, 1]);
    }

    #[test]
    fn the_need_is_due_when_complete_when_the_last_datagram_came_or_at_end() {
        let mut out = Vec::new();
        // Complete by multicast: an empty NEED at once, before END.
        let mut b = Broadcast::new(params(1, 3, 600, 256));
        let p = *b.params();
        for k in 0..3 {
            assert!(!b.need_due());
            let len = if k == 2 { 88 } else { 256 };
            b.on_datagram(&datagram_of(&p, k, &vec![5; len], |_| {}));
        }
        assert!(b.next_reply(&mut out));
        assert_eq!(out, need(&[]));
        assert!(!b.is_done(), "END still to come");
        b.on_chain(&end()).unwrap();
        assert!(b.is_done() || b.expects_reply());
        // The last fragment's datagram came, an earlier one was lost.
        let mut b = Broadcast::new(params(1, 3, 600, 256));
        b.on_datagram(&datagram_of(&p, 2, &[5; 88], |_| {}));
        assert!(b.need_due());
        assert!(b.next_reply(&mut out));
        assert_eq!(out, need(&[0, 1]));
        // Only END tells a rank that lost the last fragment.
        let mut b = Broadcast::new(params(2, 3, 600, 256));
        b.on_datagram(&datagram_of(&p, 0, &[5; 256], |_| {}));
        assert!(!b.need_due());
        b.on_chain(&end()).unwrap();
        assert!(b.next_reply(&mut out));
        assert_eq!(out, need(&[1, 2]));
    }

    #[test]
    fn the_message_is_settled_once_owned_and_served() {
        let mut out = Vec::new();
        let lent = Arc::new(Mutex::new(vec![0u8; 600]));
        let mut b = Broadcast::in_lent(params(1, 3, 600, 256), Box::new(Arc::clone(&lent)));
        let p = *b.params();
        b.on_datagram(&datagram_of(&p, 0, &[5; 256], |_| {}));
        b.on_datagram(&datagram_of(&p, 1, &[6; 256], |_| {}));
        assert!(!b.message_settled(), "fragment 2 still to be written");
        b.on_datagram(&datagram_of(&p, 2, &[7; 88], |_| {}));
        assert!(b.next_reply(&mut out));
        assert!(!b.message_settled(), "the successor's NEED still to come");
        b.on_reply(&need(&[1])).unwrap();
        assert!(!b.message_settled(), "fragment 1 still to be read");
        assert_eq!(b.next_chain_send(&mut out), Some(Frame::End));
        assert_eq!(b.next_chain_send(&mut out), Some(Frame::Data(1)));
        assert!(b.message_settled() && !b.end_received());
        b.give_up_message();
        assert_eq!(b.held_bytes(), 0);
        // The predecessor's END still comes, and touches no message.
        assert_eq!(b.on_chain(&end()), Ok(()));
        assert_eq!(b.chain_frames_certain(), 0);
        assert_eq!(lent.lock().unwrap()[255..258], [5, 6, 6]);
        // A buffer of its own goes too; the last rank owes no one.
        let mut b = Broadcast::new(params(2, 3, 600, 256));
        for (k, len) in [(0, 256), (1, 256), (2, 88)] {
            b.on_datagram(&datagram_of(&p, k, &vec![5; len], |_| {}));
        }
        assert_eq!(b.held_bytes(), 600);
        assert!(b.message_settled());
        b.give_up_message();
        assert_eq!(b.held_bytes(), 0);
    }

    #[test]
    fn what_is_still_owed_counts_in_full_frames() {
        let mut out = Vec::new();
        let p = Params {
            frame_bytes: FRAME_BYTES,
            ..params(1, 3, 1000 * 256, 256)
        };
        let mut b = Broadcast::new(p);
        assert_eq!(b.block, 240, "fragments of 256 bytes to a 60 KiB frame");
        for k in 0..1000 {
            b.on_datagram(&datagram_of(&p, k, &[5; 256], |_| {}));
        }
        assert!(!b.owes_more_than(0), "nothing owed before the NEED");
        b.on_reply(&need(&(0..1000).collect::<Vec<_>>())).unwrap();
        assert!(
            b.owes_more_than(4) && !b.owes_more_than(5),
            "1,000 of 1,200"
        );
        assert_eq!(b.next_chain_send(&mut out), Some(Frame::End));
        assert!(b.owes_more_than(4), "END carries no fragment");
        assert_eq!(b.next_chain_send(&mut out), Some(Frame::Data(0)));
        assert!(b.owes_more_than(3) && !b.owes_more_than(4), "760 of 960");
        while b.next_chain_send(&mut out).is_some() {}
        assert!(!b.owes_more_than(0), "everything sent");
    }

    #[test]
    #[should_panic(expected = "the message may still be used")]
    fn a_message_still_owed_is_not_given_up() {
        let mut b = Broadcast::new(params(1, 3, 600, 256));
        let p = *b.params();
        for (k, len) in [(0, 256), (1, 256), (2, 88)] {
            b.on_datagram(&datagram_of(&p, k, &vec![5; len], |_| {}));
        }
        b.give_up_message();
    }

    #[test]
    #[should_panic(expected = "the message was given up")]
    fn a_message_given_up_is_never_read() {
        let mut b = Broadcast::new(params(0, 1, 600, 256));
        b.start_root(Duration::ZERO);
        let mut out = Vec::new();
        while b.next_multicast(Duration::from_secs(1), &mut out).is_some() {
            b.multicast_done();
        }
        b.give_up_message();
        b.data();
    }

    #[test]
    fn replies_are_checked() {
        let mut b = Broadcast::new(params(1, 3, 600, 256));
        let p = *b.params();
        for k in 0..3 {
            let len = if k == 2 { 88 } else { 256 };
            b.on_datagram(&datagram_of(&p, k, &vec![5; len], |_| {}));
        }
        for (bad, want) in [
            (vec![], ChainError::BadLength),
            (need(&[1])[..6].to_vec(), ChainError::BadLength),
            (need(&[0, 1, 2, 2]), ChainError::BadLength),
            (end(), ChainError::Unexpected),
            (need(&[3]), ChainError::BadFragment),
            (need(&[1, 0]), ChainError::BadFragment),
            (need(&[1, 1]), ChainError::BadFragment),
        ] {
            assert_eq!(b.on_reply(&bad), Err(want), "{bad:?}");
        }
        assert_eq!(b.on_reply(&need(&[0, 1, 2])), Ok(()));
        let sent: Vec<Frame> = drain(&mut b).into_iter().map(|(f, _)| f).collect();
        assert_eq!(
            sent,
            [Frame::End, Frame::Data(0), Frame::Data(1), Frame::Data(2)],
            "the last datagram came: END goes without waiting for the predecessor's"
        );
        assert_eq!(b.on_reply(&need(&[])), Err(ChainError::TooMany));
        assert!(!b.is_done(), "END from the predecessor not yet here");
        b.on_chain(&end()).unwrap();
        assert_eq!(drain(&mut b), []);
        let mut out = Vec::new();
        assert!(b.next_reply(&mut out));
        assert_eq!(out, need(&[]));
        assert!(b.is_done());
    }

    #[test]
    fn an_asked_fragment_that_came_by_multicast_meanwhile_changes_nothing() {
        let mut b = Broadcast::new(params(1, 3, 600, 256));
        let p = *b.params();
        b.on_chain(&end()).unwrap();
        let mut out = Vec::new();
        assert!(b.next_reply(&mut out));
        assert_eq!(out, need(&[0, 1, 2]));
        assert_eq!(
            b.on_datagram(&datagram_of(&p, 1, &[7; 256], |_| {})),
            Verdict::Useful
        );
        b.on_chain(&frame(1, &[9; 256])).unwrap();
        assert_eq!(b.chain_frames_received(), 2);
        assert_eq!(b.chain_frames_certain(), 2);
        assert!(b.data()[256..512].iter().all(|&x| x == 7));
        assert_eq!((b.bytes_by_multicast(), b.bytes_by_chain()), (256, 0));
    }

    #[test]
    fn an_asked_fragment_goes_on_as_soon_as_it_is_owned() {
        let mut b = Broadcast::new(params(1, 3, 1000, 256));
        let p = *b.params();
        b.on_datagram(&datagram_of(&p, 2, &[2; 256], |_| {}));
        // The successor asks before this rank is complete, or even knows END.
        b.on_reply(&need(&[0, 1, 2, 3])).unwrap();
        let sent: Vec<Frame> = drain(&mut b).into_iter().map(|(f, _)| f).collect();
        assert_eq!(sent, [Frame::Data(2)], "what it owns goes at once");
        b.on_chain(&end()).unwrap();
        let mut out = Vec::new();
        assert!(b.next_reply(&mut out));
        assert_eq!(out, need(&[0, 1, 3]));
        b.on_chain(&frame(3, &[3; 232])).unwrap();
        b.on_chain(&frame(0, &[0; 256])).unwrap();
        assert_eq!(
            drain(&mut b),
            [
                (Frame::End, end()),
                (Frame::Data(3), frame(3, &[3; 232])),
                (Frame::Data(0), frame(0, &[0; 256]))
            ],
            "END first, then each fragment as it came"
        );
        assert!(!b.is_done());
        b.on_chain(&frame(1, &[1; 256])).unwrap();
        assert_eq!(drain(&mut b), [(Frame::Data(1), frame(1, &[1; 256]))]);
        assert!(b.is_done());
        assert_eq!(b.chain_frames_sent(), 4);
        assert_eq!((b.bytes_by_multicast(), b.bytes_by_chain()), (256, 744));
    }

    #[test]
    fn the_last_rank_never_sends_on_the_chain() {
        let mut b = Broadcast::new(params(2, 3, 300, 256));
        let p = *b.params();
        let mut out = Vec::new();
        b.on_datagram(&datagram_of(&p, 0, &[1; 256], |_| {}));
        assert_eq!(b.next_chain_send(&mut out), None);
        assert!(!b.expects_reply());
        b.on_chain(&end()).unwrap();
        assert!(!b.is_done(), "the NEED is not made yet");
        assert!(b.next_reply(&mut out));
        assert_eq!(out, need(&[1]));
        assert!(!b.is_done(), "fragment 1 still to come");
        b.on_chain(&frame(1, &[1; 44])).unwrap();
        assert_eq!(b.next_chain_send(&mut out), None);
        assert!(b.is_done());
        assert_eq!(b.on_reply(&need(&[])), Err(ChainError::Unexpected));
    }

    #[test]
    fn a_zero_length_message_is_done_at_once() {
        let mut b = Broadcast::new(params(1, 3, 0, 256));
        let p = *b.params();
        let mut out = Vec::new();
        assert_eq!(b.fragments(), 0);
        assert!(b.is_complete() && b.is_done());
        assert_eq!(b.next_chain_send(&mut out), None);
        assert_eq!(b.on_chain(&end()), Err(ChainError::Unexpected));
        assert_eq!(b.chain_frames_certain(), 0);
        assert!(!b.need_due());
        assert_eq!(
            b.on_datagram(&datagram_of(&p, 0, &[], |_| {})),
            Verdict::BadLength
        );
        let mut r = root(3, 0, 256, Duration::from_secs(1));
        assert!(r.is_done());
        assert_eq!(r.next_multicast(Duration::from_secs(9), &mut out), None);
        assert_eq!(r.next_chain_send(&mut out), None);
    }

    /// Runs the chain of a ring until nothing moves; every frame and reply
    /// is delivered at once.
    fn settle(ranks: &mut [Broadcast]) {
        let mut out = Vec::new();
        loop {
            let mut moved = false;
            for v in 0..ranks.len() {
                while v + 1 < ranks.len() && ranks[v].next_chain_send(&mut out).is_some() {
                    ranks[v + 1].on_chain(&out).unwrap();
                    moved = true;
                }
                if v > 0 && ranks[v].next_reply(&mut out) {
                    ranks[v - 1].on_reply(&out).unwrap();
                    moved = true;
                }
            }
            if !moved {
                return;
            }
        }
    }

    #[test]
    fn a_ring_of_three_completes_by_chain_alone() {
        let mut ranks: Vec<Broadcast> = (0..3)
            .map(|v| Broadcast::new(params(v, 3, 5000, 256)))
            .collect();
        ranks[0].data_mut().fill(0xab);
        ranks[0].start_root(Duration::ZERO);
        let mut out = Vec::new();
        while ranks[0].next_multicast(Duration::ZERO, &mut out).is_some() {
            ranks[0].multicast_done();
        }
        settle(&mut ranks);
        assert!(ranks
            .iter()
            .all(|b| b.is_done() && b.data() == ranks[0].data()));
        assert_eq!(ranks[1].bytes_by_chain(), 5000);
        assert_eq!(ranks[2].bytes_by_chain(), 5000);
        // Each rank asked its predecessor for everything.
        assert_eq!(ranks[0].chain_frames_sent(), 20);
        assert_eq!(ranks[1].chain_frames_sent(), 20);
    }

    /// With blocks of 4 fragments, a frame carries the fragments asked for
    /// in a block that the sender owns: a rank that lost everything is
    /// repaired in one frame per block; fragments the sender receives later
    /// go in frames of their own, as soon as they come.
    #[test]
    fn a_frame_carries_every_fragment_asked_for_in_its_block() {
        let params = |v| Params {
            frame_bytes: 1024,
            ..params(v, 4, 5000, 256)
        };
        let mut ranks: Vec<Broadcast> = (0..4).map(|v| Broadcast::new(params(v))).collect();
        assert_eq!(ranks[1].max_chain_frame(), CHAIN_HEADER_LEN + 1024);
        for (i, byte) in ranks[0].data_mut().iter_mut().enumerate() {
            *byte = (i * 7 % 251) as u8;
        }
        ranks[0].start_root(Duration::ZERO);
        let lost: [&[u32]; 4] = [&[], &[], &[1, 2, 9], &[2, 13]];
        let mut out = Vec::new();
        while let Some(k) = ranks[0].next_multicast(Duration::ZERO, &mut out) {
            ranks[0].multicast_done();
            // Rank 1 enters after stage 1: it has nothing.
            for v in 2..4 {
                if !lost[v].contains(&k) {
                    assert_eq!(ranks[v].on_datagram(&out), Verdict::Useful);
                }
            }
        }
        // Rank 2 asks first; its frame of block 0 must wait for rank 1.
        assert!(ranks[2].next_reply(&mut out));
        ranks[1].on_reply(&out).unwrap();
        assert_eq!(ranks[1].next_chain_send(&mut out), None);
        assert_eq!(ranks[2].chain_frames_certain(), 3, "END, blocks 0 and 2");
        let not_asked = frame(3, &[0; 256]);
        assert_eq!(ranks[2].on_chain(&not_asked), Err(ChainError::BadFragment));
        for (k, len) in [(1, 300), (1, 768), (9, 512)] {
            // Not the fragments listed from k on in k's block.
            let bad = frame(k, &vec![0; len]);
            assert_eq!(ranks[2].on_chain(&bad), Err(ChainError::BadLength), "{k}");
        }
        settle(&mut ranks);
        assert!(ranks
            .iter()
            .all(|b| b.is_done() && b.data() == ranks[0].data()));
        let by_chain: Vec<u64> = ranks.iter().map(Broadcast::bytes_by_chain).collect();
        assert_eq!(by_chain, [0, 5000, 768, 512]);
        let frames: Vec<u32> = ranks.iter().map(Broadcast::chain_frames_sent).collect();
        assert_eq!(frames, [5, 2, 2, 0]);
    }

    /// Rings of 2 to 9 ranks with random message, fragment and block sizes
    /// and loss, datagrams delivered and chain steps taken in random order:
    /// every frame is accepted (its fragments are what the receiver reads
    /// in it), and every rank ends done with the root's bytes.
    #[test]
    fn random_rings_with_blocks_complete() {
        for seed in 0..400 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut draw = |n: u32| (rng.next_u32() % n) as usize;
            let size = 2 + draw(8);
            let (len, fragment) = (1 + draw(20_000), 1 + draw(1_500));
            let (frame_bytes, loss) = (draw(8_000), draw(101));
            let mut ranks: Vec<Broadcast> = (0..size)
                .map(|v| {
                    Broadcast::new(Params {
                        frame_bytes,
                        ..params(v, size, len, fragment)
                    })
                })
                .collect();
            for (i, byte) in ranks[0].data_mut().iter_mut().enumerate() {
                *byte = (i * 13 % 251) as u8;
            }
            ranks[0].start_root(Duration::ZERO);
            let (mut out, mut datagrams) = (Vec::new(), Vec::new());
            while ranks[0].next_multicast(Duration::ZERO, &mut out).is_some() {
                ranks[0].multicast_done();
                datagrams.push(out.clone());
            }
            let mut pending: Vec<(usize, usize)> = (1..size)
                .flat_map(|v| (0..datagrams.len()).map(move |d| (v, d)))
                .collect();
            while !pending.is_empty() {
                if draw(2) == 0 {
                    let (v, d) = pending.swap_remove(draw(pending.len() as u32));
                    if draw(100) >= loss {
                        ranks[v].on_datagram(&datagrams[d]);
                    }
                    continue;
                }
                let v = draw(size as u32);
                if v + 1 < size && ranks[v].next_chain_send(&mut out).is_some() {
                    let taken = ranks[v + 1].on_chain(&out);
                    assert_eq!(taken, Ok(()), "seed {seed}");
                }
                if v > 0 && ranks[v].next_reply(&mut out) {
                    ranks[v - 1].on_reply(&out).unwrap();
                }
            }
            settle(&mut ranks);
            for b in &ranks {
                assert!(b.is_done(), "seed {seed}");
                assert_eq!(b.data(), ranks[0].data(), "seed {seed}");
            }
        }
    }

    #[test]
    fn a_message_in_lent_memory_is_read_and_written_where_it_lies() {
        let bufs: Vec<_> = (0..4u8)
            .map(|v| Arc::new(Mutex::new(vec![v; 5000])))
            .collect();
        let root: Vec<u8> = (0..5000).map(|i| (i * 7 % 251) as u8).collect();
        bufs[0].lock().unwrap().copy_from_slice(&root);
        let mut ranks: Vec<Broadcast> = (0..4)
            .map(|v| Broadcast::in_lent(params(v, 4, 5000, 256), Box::new(Arc::clone(&bufs[v]))))
            .collect();
        assert!(ranks.iter().all(Broadcast::is_lent));
        ranks[0].start_root(Duration::ZERO);
        let mut out = Vec::new();
        let mut k = 0;
        while ranks[0].next_multicast(Duration::ZERO, &mut out).is_some() {
            ranks[0].multicast_done();
            // Rank 1 loses every third datagram, rank 3 every other one.
            for (v, b) in ranks.iter_mut().enumerate().skip(1) {
                if !(v == 1 && k % 3 == 0 || v == 3 && k % 2 == 0) {
                    b.on_datagram(&out);
                }
            }
            k += 1;
        }
        settle(&mut ranks);
        assert!(ranks.iter().all(Broadcast::is_done));
        assert!(ranks[1].bytes_by_chain() > 0 && ranks[3].bytes_by_chain() > 0);
        for buf in &bufs {
            assert!(
                *buf.lock().unwrap() == root,
                "every rank's memory holds the message"
            );
        }
        let mut user = vec![0u8; 5000];
        ranks[2].deliver_into(&mut user);
        assert_eq!(user, [0; 5000], "nothing to deliver from lent memory");
        assert!(ranks.pop().unwrap().into_data().is_empty());
    }

    #[test]
    fn a_ring_with_every_datagram_delivered_moves_no_data_on_the_chain() {
        let mut ranks: Vec<Broadcast> = (0..4)
            .map(|v| Broadcast::new(params(v, 4, 5000, 256)))
            .collect();
        ranks[0].data_mut().fill(0xcd);
        ranks[0].start_root(Duration::ZERO);
        let mut out = Vec::new();
        while ranks[0].next_multicast(Duration::ZERO, &mut out).is_some() {
            for b in &mut ranks[1..] {
                assert_eq!(b.on_datagram(&out), Verdict::Useful);
            }
            ranks[0].multicast_done();
        }
        settle(&mut ranks);
        assert!(ranks
            .iter()
            .all(|b| b.is_done() && b.data() == ranks[0].data() && b.chain_frames_sent() == 0));
    }

    #[test]
    fn a_repair_does_not_wait_for_the_predecessor_to_be_complete() {
        let mut ranks: Vec<Broadcast> = (0..4)
            .map(|v| Broadcast::new(params(v, 4, 1000, 256)))
            .collect();
        ranks[0].data_mut().fill(0x5a);
        ranks[0].start_root(Duration::ZERO);
        let mut out = Vec::new();
        // Rank 1 loses fragment 0, rank 2 loses fragment 1.
        while let Some(k) = ranks[0].next_multicast(Duration::ZERO, &mut out) {
            for (v, b) in ranks.iter_mut().enumerate().skip(1) {
                if (v, k) != (1, 0) && (v, k) != (2, 1) {
                    b.on_datagram(&out);
                }
            }
            ranks[0].multicast_done();
        }
        // Rank 2's NEED reaches rank 1 before rank 1 hears from the root.
        assert!(ranks[2].next_reply(&mut out));
        assert_eq!(out, need(&[1]));
        ranks[1].on_reply(&out).unwrap();
        assert!(!ranks[1].is_complete());
        for (f, bytes) in drain(&mut ranks[1]) {
            assert!(matches!(f, Frame::End | Frame::Data(1)), "{f:?}");
            ranks[2].on_chain(&bytes).unwrap();
        }
        assert!(
            ranks[2].is_complete(),
            "repaired by an incomplete neighbour"
        );
        settle(&mut ranks);
        assert!(ranks
            .iter()
            .all(|b| b.is_done() && b.data() == ranks[0].data()));
    }

    /// Random bytes and damaged datagrams: no panic, nothing taken.
    #[test]
    fn arbitrary_input_never_panics_nor_is_taken() {
        let mut rng = ChaCha8Rng::seed_from_u64(0x2517);
        for with_crc in [true, false] {
            let p = Params {
                auth: Auth::crc(with_crc),
                ..params(1, 3, 700, 256)
            };
            let mut b = Broadcast::new(p);
            let mut input = Vec::new();
            for round in 0..20_000u32 {
                let len = (rng.next_u32() % 320) as usize;
                input.resize(len, 0);
                rng.fill_bytes(&mut input);
                if round % 2 == 0 {
                    let fragment = rng.next_u32() % 4;
                    input = datagram_of(&p, fragment, &input[..len.min(256)], |_| {});
                    let at = rng.next_u32() as usize % input.len();
                    if with_crc {
                        input[at] ^= 1 << (rng.next_u32() % 8);
                    } else {
                        input.truncate(at);
                    }
                    assert!(
                        !matches!(b.on_datagram(&input), Verdict::Useful | Verdict::Duplicate),
                        "took a damaged datagram"
                    );
                } else {
                    b.on_datagram(&input);
                    let _ = b.on_chain(&input);
                    let _ = b.on_reply(&input);
                }
            }
        }
    }
}
