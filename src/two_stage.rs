//! The two-stage multicast broadcast (thesis §3.2) as a pure state machine.
//!
//! One [`Broadcast`] is one rank's view of one broadcast. It holds no socket
//! and no MPI handle: the driver feeds it received datagrams, chain frames and
//! the time, and asks it what to multicast and what to send along the chain.
//! The unit tests drive it through a seeded simulated network (`sim_net`);
//! production drives it with real sockets and Open MPI point-to-point.
//!
//! Stage 1: the root, after `root_wait`, multicasts every fragment once, with
//! no preceding synchronisation. Stage 2: a reliable chain along the virtual
//! ring that starts at the root (virtual rank 0) repairs what multicast did
//! not deliver. The thesis sends every fragment along the chain; that doubles
//! the bytes on every link, so here the chain carries data only where it is
//! missing:
//!
//! - once a rank owns every fragment (the root: once stage 1 is over) it sends
//!   its successor `ALL`;
//! - a rank answers its predecessor's `ALL` with exactly one `NEED` listing
//!   the fragments it still lacks (often none), and the predecessor, which
//!   owns everything, sends those;
//! - a rank hands on at once every fragment that reached it by the chain (it
//!   was lost upstream, so it is likely lost downstream too): under total loss
//!   the message streams along the ring as in the thesis.
//!
//! Each rank receives a known number of frames from each neighbour, so
//! nothing is left over for a later broadcast. Still no timeouts and no
//! acknowledgement of multicast: `ALL` travels on the reliable channel behind
//! the data, and every gap is filled by a neighbour that owns everything.
//!
//! Chain frame (predecessor to successor): a little-endian `u32` fragment
//! index and exactly that fragment's payload, or the index [`ALL`] alone.
//! Reply (successor to predecessor): [`NEED`] and the missing fragment
//! indices, ascending, each a little-endian `u32` (`docs/datagram.md`).

use std::collections::VecDeque;
use std::ops::Range;
use std::time::Duration;

use crate::datagram::{self, Auth, Header, Protection, Reject};

/// Bytes of a chain frame before the fragment's payload.
pub const CHAIN_HEADER_LEN: usize = 4;
/// The chain frame index that says "the sender owns every fragment".
pub const ALL: u32 = u32::MAX;
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
    /// Shorter than its header, or its payload length is not the fragment's.
    BadLength,
    /// Its fragment index is beyond the message, not the one asked for, or
    /// not ascending in a reply.
    BadFragment,
    /// More frames or replies than the protocol sends.
    TooMany,
    /// Nothing of this kind can come from that neighbour now (a frame to the
    /// root, a reply before this rank sent `ALL`, a reply without [`NEED`]).
    Unexpected,
}

/// What [`Broadcast::next_chain_send`] put into the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Fragment `k`, handed on because it came by the chain, or asked for.
    Data(u32),
    /// [`ALL`]: this rank owns every fragment.
    All,
}

/// One rank's state in one two-stage broadcast.
pub struct Broadcast {
    params: Params,
    prot: Protection,
    /// A received datagram is checked (and decrypted) here, not in place.
    scratch: Vec<u8>,
    fragments: u32,
    data: Vec<u8>,
    /// One bit per fragment: this rank holds the fragment's bytes.
    owned: Vec<u64>,
    owned_count: u32,
    /// Fragments that came by the chain and go on to the successor before
    /// `ALL`, in the order they arrived.
    to_forward: VecDeque<u32>,
    /// Root: when the message was in place.
    started: Option<Duration>,
    /// Root: the fragment stage 1 multicasts next; those before it are done.
    next_multicast: u32,
    /// Root: `next_multicast` was offered and awaits `multicast_done`.
    offered: bool,
    /// From the predecessor: frames before its `ALL`, whether `ALL` came, what
    /// this rank's reply asked for (once sent) and how much of it arrived.
    pushed_received: u32,
    pred_all: bool,
    requested: Option<Vec<u32>>,
    requested_received: usize,
    /// To the successor: data frames before `ALL`, whether `ALL` went, the
    /// successor's reply and how much of it was sent.
    pushed_sent: u32,
    all_sent: bool,
    succ_need: Option<Vec<u32>>,
    need_sent: usize,
    bytes_by_multicast: u64,
    bytes_by_chain: u64,
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
            data: vec![0; params.message_len],
            owned: vec![0; (fragments as usize).div_ceil(64)],
            owned_count: 0,
            to_forward: VecDeque::new(),
            started: None,
            next_multicast: 0,
            offered: false,
            pushed_received: 0,
            pred_all: false,
            requested: None,
            requested_received: 0,
            pushed_sent: 0,
            all_sent: false,
            succ_need: None,
            need_sent: 0,
            bytes_by_multicast: 0,
            bytes_by_chain: 0,
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
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The message buffer, for the root to fill before [`Broadcast::start_root`].
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }

    /// Root only: the message is in place at time `now`. The root then owns
    /// every fragment; stage 1 may start at `now + root_wait`.
    pub fn start_root(&mut self, now: Duration) {
        if !self.is_root() || self.started.is_some() {
            return;
        }
        self.started = Some(now);
        self.owned.fill(u64::MAX);
        self.owned_count = self.fragments;
    }

    /// Root only: the next datagram of stage 1, encoded into `out`, or `None`
    /// while `root_wait` runs and once every fragment has been multicast. The
    /// same fragment is offered again until [`Broadcast::multicast_done`]
    /// confirms it, so a full socket buffer loses nothing.
    pub fn next_multicast(&mut self, now: Duration, out: &mut Vec<u8>) -> Option<u32> {
        if self.next_multicast >= self.fragments || now < self.stage1_start()? {
            return None;
        }
        let k = self.next_multicast;
        let header = Header {
            comm_id: self.params.comm_id,
            bcast: self.params.bcast,
            message_len: self.params.message_len as u64,
            fragment: k,
        };
        datagram::encode(&header, &self.data[self.range(k)], &self.prot, out);
        self.offered = true;
        Some(k)
    }

    /// Root only: the datagram last returned by `next_multicast` left (or was
    /// dropped for good by the network layer); move on to the next one.
    pub fn multicast_done(&mut self) {
        // Without an offer outstanding there is nothing to confirm: a stray
        // call must not skip a fragment.
        if self.offered {
            self.offered = false;
            self.next_multicast += 1;
        }
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
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.extend_from_slice(bytes);
        let verdict = match datagram::decode(&mut scratch, &self.prot) {
            Err(r) => reject(r),
            Ok(d) if d.header.bcast < self.params.bcast => Verdict::Stale,
            Ok(d) if d.header.bcast > self.params.bcast => Verdict::Future,
            Ok(d) => self.on_authentic(d.header, d.payload),
        };
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
    /// a frame of the next broadcast. Before `ALL` that is 1 (`ALL` itself;
    /// how many frames precede it is unknown), after the reply the frames it
    /// asked for.
    pub fn chain_frames_certain(&self) -> u32 {
        if !self.has_predecessor() || self.fragments == 0 {
            return 0;
        }
        match (&self.requested, self.pred_all) {
            (_, false) => 1,
            (None, true) => 0,
            (Some(asked), true) => (asked.len() - self.requested_received) as u32,
        }
    }

    /// Frames received from the predecessor so far, `ALL` included.
    pub fn chain_frames_received(&self) -> u32 {
        self.pushed_received + u32::from(self.pred_all) + self.requested_received as u32
    }

    /// Largest chain frame of this broadcast, for sizing receive buffers.
    pub fn max_chain_frame(&self) -> usize {
        CHAIN_HEADER_LEN + self.params.fragment_size.min(self.params.message_len)
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
        if k == ALL {
            if !payload.is_empty() {
                return Err(ChainError::BadLength);
            }
            if self.pred_all {
                return Err(ChainError::TooMany);
            }
            self.pred_all = true;
            return Ok(());
        }
        if k >= self.fragments {
            return Err(ChainError::BadFragment);
        }
        if payload.len() != self.range(k).len() {
            return Err(ChainError::BadLength);
        }
        if self.pred_all {
            // After ALL only what the reply asked for, in its order.
            let asked = self.requested.as_deref().unwrap_or(&[]);
            match asked.get(self.requested_received) {
                None => return Err(ChainError::TooMany),
                Some(&want) if want != k => return Err(ChainError::BadFragment),
                Some(_) => self.requested_received += 1,
            }
        } else {
            // The predecessor hands on each fragment at most once.
            if self.pushed_received >= self.fragments {
                return Err(ChainError::TooMany);
            }
            self.pushed_received += 1;
        }
        if !self.owns(k) {
            self.take(k, payload);
            self.bytes_by_chain += payload.len() as u64;
            if self.has_successor() {
                self.to_forward.push_back(k);
            }
        }
        Ok(())
    }

    /// The next chain frame for the successor, encoded into `out`: fragments
    /// that came by the chain, then `ALL` once this rank owns everything (the
    /// root: once stage 1 is over), then what the successor's reply asks for.
    /// `None` on the last rank and while there is nothing to send yet.
    pub fn next_chain_send(&mut self, out: &mut Vec<u8>) -> Option<Frame> {
        if !self.has_successor() || self.fragments == 0 {
            return None;
        }
        if !self.all_sent {
            if let Some(k) = self.to_forward.pop_front() {
                self.pushed_sent += 1;
                self.encode_fragment(k, out);
                return Some(Frame::Data(k));
            }
            if !self.is_complete() || !self.stage1_done() {
                return None;
            }
            self.all_sent = true;
            out.clear();
            out.extend_from_slice(&ALL.to_le_bytes());
            return Some(Frame::All);
        }
        let k = *self.succ_need.as_ref()?.get(self.need_sent)?;
        self.need_sent += 1;
        self.encode_fragment(k, out);
        Some(Frame::Data(k))
    }

    /// Whether the predecessor's `ALL` came and the reply is still to be made.
    pub fn reply_due(&self) -> bool {
        self.pred_all && self.requested.is_none()
    }

    /// The reply for the predecessor, encoded into `out`, once its `ALL` came:
    /// [`NEED`] and the fragments this rank still lacks. Exactly once per
    /// broadcast on every rank but the root; `false` when it is not due.
    /// The driver should read waiting datagrams first, so that it does not
    /// ask for what has already arrived.
    pub fn next_reply(&mut self, out: &mut Vec<u8>) -> bool {
        if !self.pred_all || self.requested.is_some() {
            return false;
        }
        let missing: Vec<u32> = (0..self.fragments).filter(|&k| !self.owns(k)).collect();
        out.clear();
        out.extend_from_slice(&NEED.to_le_bytes());
        for k in &missing {
            out.extend_from_slice(&k.to_le_bytes());
        }
        self.requested = Some(missing);
        true
    }

    /// The successor's reply: the fragments to send it after `ALL`.
    pub fn on_reply(&mut self, reply: &[u8]) -> Result<(), ChainError> {
        if !self.expects_reply() || !self.all_sent {
            return Err(ChainError::Unexpected);
        }
        if self.succ_need.is_some() {
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
        self.succ_need = Some(need);
        Ok(())
    }

    /// Whether this rank owns every fragment (the data is complete).
    pub fn is_complete(&self) -> bool {
        self.owned_count == self.fragments
    }

    /// Whether this rank's part of the broadcast is over: complete, every
    /// frame the predecessor sends received and replied to, and the
    /// successor's reply received and served. (The driver still waits for
    /// its sends to finish.)
    pub fn is_done(&self) -> bool {
        if self.fragments == 0 {
            return self.stage1_done();
        }
        let from_pred = !self.has_predecessor()
            || (self.requested.is_some() && self.chain_frames_certain() == 0);
        let to_succ = !self.has_successor()
            || self
                .succ_need
                .as_ref()
                .is_some_and(|need| self.need_sent == need.len());
        self.is_complete() && self.stage1_done() && from_pred && to_succ
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
        k < self.fragments && self.owned[k as usize / 64] & (1 << (k % 64)) != 0
    }

    /// Root: when stage 1 may start (`start_root`'s `now` plus `root_wait`),
    /// so that the driver knows how long to sleep; `None` before `start_root`
    /// and on non-roots.
    pub fn stage1_start(&self) -> Option<Duration> {
        self.started
            .map(|t| t.saturating_add(self.params.root_wait))
    }

    /// Data frames sent to the successor so far (`ALL` not counted).
    pub fn chain_frames_sent(&self) -> u32 {
        self.pushed_sent + self.need_sent as u32
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

    fn encode_fragment(&self, k: u32, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&k.to_le_bytes());
        out.extend_from_slice(&self.data[self.range(k)]);
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

    /// Makes fragment `k` (not yet owned) this rank's.
    fn take(&mut self, k: u32, payload: &[u8]) {
        let range = self.range(k);
        self.data[range].copy_from_slice(payload);
        self.owned[k as usize / 64] |= 1 << (k % 64);
        self.owned_count += 1;
    }
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

    fn all() -> Vec<u8> {
        ALL.to_le_bytes().to_vec()
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
            assert_eq!(b.chain_frames_certain(), u32::from(n > 0), "ALL will come");
            assert_eq!(b.expects_reply(), n > 0);
            assert_eq!(b.data().len(), len);
        }
        let root = Broadcast::new(params(0, 3, 1000, 256));
        assert_eq!(root.chain_frames_certain(), 0);
        assert!(!Broadcast::new(params(2, 3, 1000, 256)).expects_reply());
    }

    #[test]
    fn root_waits_multicasts_each_fragment_once_then_sends_all() {
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
            assert_eq!(
                b.on_reply(&need(&[])),
                Err(ChainError::Unexpected),
                "reply before ALL"
            );
            b.multicast_done();
        }
        assert!(b.stage1_done());
        assert_eq!(b.next_multicast(t0 + wait, &mut out), None);
        assert_eq!(drain(&mut b), [(Frame::All, all())]);
        assert!(!b.is_done(), "the successor's reply is due");
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
        use crate::datagram::Key;
        for auth in [Auth::Tag(Key([1; 32])), Auth::Encrypt(Key([1; 32]))] {
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
                if auth != Auth::Tag(Key([1; 32])) {
                    assert_ne!(&out[datagram::HEADER_LEN..][..4], &[0, 1, 2, 3], "in clear");
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
        assert_eq!(b.on_chain(&[0, 0, 0]), Err(ChainError::BadLength));
        assert_eq!(
            b.on_chain(&frame(3, &[0; 88])),
            Err(ChainError::BadFragment)
        );
        assert_eq!(b.on_chain(&frame(NEED, &[])), Err(ChainError::BadFragment));
        assert_eq!(b.on_chain(&frame(0, &[0; 255])), Err(ChainError::BadLength));
        assert_eq!(b.on_chain(&frame(2, &[0; 256])), Err(ChainError::BadLength));
        assert_eq!(b.on_chain(&frame(ALL, &[0])), Err(ChainError::BadLength));
        assert_eq!(b.chain_frames_received(), 0, "rejected frames do not count");
        // Handed on before ALL: any fragment, each at most once in all.
        assert_eq!(b.on_chain(&frame(1, &[1; 256])), Ok(()));
        assert_eq!(b.on_chain(&all()), Ok(()));
        assert_eq!(b.on_chain(&all()), Err(ChainError::TooMany));
        assert_eq!(b.chain_frames_certain(), 0, "the reply is not made yet");
        assert!(b.reply_due());
        let mut out = Vec::new();
        assert!(b.next_reply(&mut out));
        assert_eq!(out, need(&[0, 2]));
        assert!(!b.reply_due() && !b.next_reply(&mut out), "one reply only");
        assert_eq!(b.chain_frames_certain(), 2);
        // After ALL only what was asked for, in its order.
        assert_eq!(
            b.on_chain(&frame(2, &[3; 88])),
            Err(ChainError::BadFragment)
        );
        assert_eq!(b.on_chain(&frame(0, &[2; 256])), Ok(()));
        assert!(!b.is_done());
        assert_eq!(b.on_chain(&frame(2, &[3; 88])), Ok(()));
        assert_eq!(b.on_chain(&frame(2, &[3; 88])), Err(ChainError::TooMany));
        assert_eq!(b.chain_frames_received(), 4);
        assert!(b.is_complete());
        assert_eq!((b.bytes_by_multicast(), b.bytes_by_chain()), (0, 600));
        assert_eq!(b.data()[255..258], [2, 1, 1]);
    }

    #[test]
    fn replies_are_checked() {
        let mut b = Broadcast::new(params(1, 3, 600, 256));
        let p = *b.params();
        for k in 0..3 {
            let len = if k == 2 { 88 } else { 256 };
            b.on_datagram(&datagram_of(&p, k, &vec![5; len], |_| {}));
        }
        assert_eq!(b.on_reply(&need(&[])), Err(ChainError::Unexpected));
        assert_eq!(drain(&mut b), [(Frame::All, all())]);
        for (bad, want) in [
            (vec![], ChainError::BadLength),
            (need(&[1])[..6].to_vec(), ChainError::BadLength),
            (need(&[0, 1, 2, 2]), ChainError::BadLength),
            (all(), ChainError::Unexpected),
            (need(&[3]), ChainError::BadFragment),
            (need(&[1, 0]), ChainError::BadFragment),
            (need(&[1, 1]), ChainError::BadFragment),
        ] {
            assert_eq!(b.on_reply(&bad), Err(want), "{bad:?}");
        }
        assert_eq!(b.on_reply(&need(&[0, 1, 2])), Ok(()));
        let sent: Vec<Frame> = drain(&mut b).into_iter().map(|(f, _)| f).collect();
        assert_eq!(sent, [Frame::Data(0), Frame::Data(1), Frame::Data(2)]);
        assert!(!b.is_done(), "ALL from the predecessor not yet here");
        b.on_chain(&all()).unwrap();
        let mut out = Vec::new();
        assert!(b.next_reply(&mut out));
        assert_eq!(out, need(&[]));
        assert!(b.is_done());
    }

    #[test]
    fn a_chain_frame_for_an_owned_fragment_changes_nothing_and_goes_no_further() {
        let mut b = Broadcast::new(params(1, 3, 600, 256));
        let p = *b.params();
        assert_eq!(
            b.on_datagram(&datagram_of(&p, 1, &[7; 256], |_| {})),
            Verdict::Useful
        );
        b.on_chain(&frame(1, &[9; 256])).unwrap();
        assert_eq!(b.chain_frames_received(), 1);
        assert!(b.data()[256..512].iter().all(|&x| x == 7));
        assert_eq!(drain(&mut b), [], "came by multicast: not handed on");
        assert_eq!((b.bytes_by_multicast(), b.bytes_by_chain()), (256, 0));
    }

    #[test]
    fn fragments_that_came_by_the_chain_go_on_in_arrival_order_before_all() {
        let mut b = Broadcast::new(params(1, 3, 1000, 256));
        let p = *b.params();
        b.on_datagram(&datagram_of(&p, 2, &[2; 256], |_| {}));
        b.on_chain(&frame(3, &[3; 232])).unwrap();
        b.on_chain(&frame(0, &[0; 256])).unwrap();
        assert_eq!(
            drain(&mut b),
            [
                (Frame::Data(3), frame(3, &[3; 232])),
                (Frame::Data(0), frame(0, &[0; 256]))
            ],
            "no ALL while fragment 1 is missing"
        );
        b.on_chain(&frame(1, &[1; 256])).unwrap();
        let sent: Vec<Frame> = drain(&mut b).into_iter().map(|(f, _)| f).collect();
        assert_eq!(sent, [Frame::Data(1), Frame::All]);
        b.on_chain(&all()).unwrap();
        let mut out = Vec::new();
        assert!(b.next_reply(&mut out));
        assert_eq!(out, need(&[]));
        assert!(!b.is_done(), "the successor's reply is due");
        b.on_reply(&need(&[])).unwrap();
        assert!(b.is_done());
        assert_eq!(b.chain_frames_sent(), 3);
        assert_eq!((b.bytes_by_multicast(), b.bytes_by_chain()), (256, 744));
    }

    #[test]
    fn the_last_rank_never_sends_on_the_chain() {
        let mut b = Broadcast::new(params(2, 3, 300, 256));
        let p = *b.params();
        let mut out = Vec::new();
        b.on_datagram(&datagram_of(&p, 0, &[1; 256], |_| {}));
        b.on_chain(&frame(1, &[1; 44])).unwrap();
        assert_eq!(b.next_chain_send(&mut out), None);
        assert!(!b.expects_reply());
        assert!(!b.is_done(), "ALL still expected");
        b.on_chain(&all()).unwrap();
        assert!(!b.is_done(), "the reply is not made yet");
        assert!(b.next_reply(&mut out));
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
        assert_eq!(b.on_chain(&all()), Err(ChainError::Unexpected));
        assert_eq!(b.chain_frames_certain(), 0);
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
        // Rank 1 asked the root for everything and handed it all on, so rank
        // 2's reply was empty.
        assert_eq!(ranks[0].chain_frames_sent(), 20);
        assert_eq!(ranks[1].chain_frames_sent(), 20);
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
