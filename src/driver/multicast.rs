//! The driver of the two-stage broadcast: runs the protocol core
//! ([`crate::protocol::two_stage`]) over a communicator's multicast group and
//! point-to-point messages for the chain. It is written against the I/O of
//! [`crate::base::io`] and told the time at every step, so the same driver runs
//! over real sockets and Open MPI and inside a simulated network (which calls
//! [`Driver::step`] whenever something happens to a rank); the order of a
//! communicator's broadcasts is [`crate::engine::queue`]'s.

use std::collections::VecDeque;
use std::time::Duration;

use log::{debug, warn};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::base::counters::Datagrams;
use crate::base::error::{Error, Result};
use crate::base::io::{DatagramIo, MessageIo, Place, Wait};
use crate::platform::ompi::{Comm, Messages};
use crate::protocol::datagram::{self, Auth};
use crate::protocol::flow;
use crate::protocol::two_stage::{self, Broadcast, Lent, Params, Verdict};

use super::spares;

/// One broadcast's chain on this rank: the protocol state and the
/// point-to-point messages it has in flight, which own their buffers, so a
/// run can outlive the call that started it.
pub struct Run<M: MessageIo> {
    b: Broadcast,
    msgs: M,
    root: usize,
    pred: usize,
    succ: usize,
    recvs: VecDeque<M::Id>,
    sends: VecDeque<M::Id>,
    spare: Vec<Vec<u8>>,
    reply_recv: Option<M::Id>,
    reply_send: Option<M::Id>,
    /// Flow control: the receive posted for each child's next report (by
    /// distance from the root), and the reports on their way to the parent.
    report_recvs: Vec<(usize, M::Id)>,
    report_sends: VecDeque<M::Id>,
}

impl<M: MessageIo> Run<M> {
    /// The chain of broadcast `b` (from [`Driver::begin`]) on `rank` of `size`.
    pub fn new(b: Broadcast, msgs: M, rank: usize, size: usize) -> Result<Self> {
        let mut run = Run {
            root: (rank + size - b.params().vrank) % size,
            b,
            msgs,
            pred: (rank + size - 1) % size,
            succ: (rank + 1) % size,
            recvs: VecDeque::with_capacity(CHAIN_WINDOW),
            sends: VecDeque::with_capacity(CHAIN_WINDOW),
            spare: Vec::new(),
            reply_recv: None,
            reply_send: None,
            report_recvs: Vec::new(),
            report_sends: VecDeque::new(),
        };
        // The successor's one NEED and the children's reports may come at
        // any time.
        run.post_reply_recv()?;
        let pending: Vec<usize> = run.b.reports_pending().collect();
        for child in pending {
            let id = run.msgs.recv(run.rank_at(child), flow::REPORT_LEN)?;
            run.report_recvs.push((child, id));
        }
        Ok(run)
    }

    /// The rank at distance `vrank` from the root.
    fn rank_at(&self, vrank: usize) -> usize {
        (self.root + vrank) % self.b.params().size
    }

    fn post_reply_recv(&mut self) -> Result<()> {
        if self.reply_recv.is_none() && self.b.reply_may_come() {
            self.reply_recv = Some(self.msgs.recv(self.succ, self.b.max_reply())?);
        }
        Ok(())
    }

    /// Flow control: the children's reports that came, and this rank's own.
    fn reports(&mut self, wait: Wait) -> Result<()> {
        let mut i = 0;
        while i < self.report_recvs.len() {
            let (child, id) = self.report_recvs[i];
            let Some(report) = self.test(id, wait)? else {
                i += 1;
                continue;
            };
            if let Err(e) = self.b.on_report(child, &report) {
                warn!(
                    "flow report from rank {} refused: {e:?}",
                    self.rank_at(child)
                );
                return Err(Error::Protocol);
            }
            if self.b.reports_pending().any(|c| c == child) {
                self.report_recvs[i].1 = self.msgs.recv(self.rank_at(child), flow::REPORT_LEN)?;
            } else {
                self.report_recvs.swap_remove(i);
            }
        }
        self.post_reply_recv()?;
        let mut report = self.spare.pop().unwrap_or_default();
        match self.b.next_report(&mut report) {
            Some(parent) => {
                let id = self.msgs.send(self.rank_at(parent), report)?;
                self.report_sends.push_back(id);
            }
            None => self.spare.push(report),
        }
        while let Some(&id) = self.report_sends.front() {
            let Some(buf) = self.test(id, wait)? else {
                break;
            };
            self.report_sends.pop_front();
            self.spare.push(buf);
        }
        Ok(())
    }

    fn test(&mut self, id: M::Id, wait: Wait) -> Result<Option<Vec<u8>>> {
        self.msgs.test(id, wait)
    }

    /// One turn of the chain: posts the receives certain to come, hands
    /// what arrived to the protocol, and sends what it offers.
    pub fn turn(&mut self, wait: Wait) -> Result<()> {
        let (pred, succ) = (self.pred, self.succ);
        // Frames from one peer complete in the order they were posted. A
        // frame handed on may leave more frames certain to come (a block
        // the predecessor sends in several), so the receives are topped up
        // after each: the turn ends with one posted while any is to come.
        loop {
            while self.recvs.len() < self.b.chain_frames_certain() as usize
                && self.recvs.len() < CHAIN_WINDOW
            {
                let id = self.msgs.recv(pred, self.b.max_chain_frame())?;
                self.recvs.push_back(id);
            }
            let Some(&id) = self.recvs.front() else {
                break;
            };
            let Some(frame) = self.test(id, wait)? else {
                break;
            };
            self.recvs.pop_front();
            if let Err(e) = self.b.on_chain(&frame) {
                warn!("chain frame from rank {pred} refused: {e:?}");
                return Err(Error::Protocol);
            }
        }
        // A report due now goes before the NEED.
        self.reports(wait)?;
        if self.b.need_due() {
            let mut reply = self.spare.pop().unwrap_or_default();
            self.b.next_reply(&mut reply);
            self.reply_send = Some(self.msgs.send(pred, reply)?);
        }
        if let Some(id) = self.reply_recv {
            if let Some(reply) = self.test(id, wait)? {
                self.reply_recv = None;
                if let Err(e) = self.b.on_reply(&reply) {
                    warn!("NEED from rank {succ} refused: {e:?}");
                    return Err(Error::Protocol);
                }
            }
        }
        // Sends that completed make room for the next ones in this turn: the
        // turn that sees them complete may be the last for a while.
        while let Some(&id) = self.sends.front() {
            let Some(buf) = self.test(id, wait)? else {
                break;
            };
            self.sends.pop_front();
            self.spare.push(buf);
        }
        while self.sends.len() < CHAIN_WINDOW {
            let mut frame = self.spare.pop().unwrap_or_default();
            if self.b.next_chain_send(&mut frame).is_none() {
                self.spare.push(frame);
                break;
            }
            let id = if self.b.owes_more_than(CHAIN_WINDOW) {
                self.msgs.send_matched(succ, frame)?
            } else {
                self.msgs.send(succ, frame)?
            };
            self.sends.push_back(id);
        }
        if let Some(id) = self.reply_send {
            if let Some(buf) = self.test(id, wait)? {
                self.reply_send = None;
                self.spare.push(buf);
            }
        }
        Ok(())
    }

    /// The protocol state.
    pub fn broadcast(&self) -> &Broadcast {
        &self.b
    }

    /// See [`Broadcast::deliver_into`].
    pub fn deliver_into(&mut self, dst: &mut [u8]) {
        self.b.deliver_into(dst);
    }

    /// Whether the call may return without the message, which it would
    /// touch no more ([`Broadcast::message_settled`]): what is left is
    /// the predecessor's `END` and flow reports, which need no buffer.
    pub fn may_return_without_message(&self) -> bool {
        self.may_return() && self.b.message_settled()
    }

    /// See [`Broadcast::give_up_message`].
    pub fn give_up_message(&mut self) {
        self.b.give_up_message();
    }

    /// The protocol state, once the run is over.
    pub fn into_broadcast(self) -> Broadcast {
        self.b
    }

    /// The point-to-point messages.
    pub fn messages(&mut self) -> &mut M {
        &mut self.msgs
    }

    /// Whether this rank's part of the broadcast is over, sends included.
    pub fn is_done(&self) -> bool {
        self.b.is_done()
            && self.sends.is_empty()
            && self.reply_send.is_none()
            && self.report_sends.is_empty()
            && self.report_recvs.is_empty()
    }

    /// Whether the broadcast call may return and leave the rest to the
    /// background: the message is complete (the root: every datagram went to
    /// the socket) and the predecessor has been told what was missing.
    pub fn may_return(&self) -> bool {
        let told =
            self.b.params().vrank == 0 || self.b.fragments() == 0 || self.b.requested().is_some();
        self.b.is_complete() && self.b.stage1_done() && told
    }
}

impl Run<Messages> {
    /// The communicator the broadcast runs on.
    pub fn comm(&self) -> Comm {
        self.msgs.comm()
    }
}

/// Chain frames a rank keeps in flight in each direction. Over TCP Open MPI
/// completes the send of a frame at once (eagerly), and the frames a busy
/// successor has not yet asked for piled up in its memory, up to all it
/// lacked (1.1 to 2.1 GB for 2.3 GB with half the datagrams lost). So while
/// more than this many full frames are still owed, a frame's send completes
/// only once the successor matched it (synchronous mode); the last ones go
/// as before, with no answer to wait for: at most twice this many frames'
/// bytes wait unmatched.
const CHAIN_WINDOW: usize = 16;
/// Receives per turn of the progress loop before the chain gets a turn (each
/// may hold many datagrams, with UDP receive offload).
const RECV_BURST: usize = 64;
/// Bytes of datagrams of later broadcasts a rank keeps for when it gets
/// there: a root that enters first may run a few broadcasts ahead.
const STASH_LIMIT: usize = 4 << 20;

/// Drops a reproducible share of received datagrams (`coll_ipmc_inject_loss`).
struct LossInjector {
    percent: u32,
    rng: ChaCha8Rng,
}

/// A communicator's joined multicast group and its broadcasts.
pub struct Driver<S: DatagramIo> {
    socket: S,
    comm_id: u64,
    next_bcast: u64,
    fragment_size: usize,
    /// Bytes of a datagram of a whole fragment.
    datagram_len: usize,
    auth: Auth,
    root_wait: Duration,
    /// Flow control's window, in datagrams (0: none).
    window: u32,
    inject: Option<LossInjector>,
    recv_buf: Vec<u8>,
    /// Where the datagrams of the last read lie in `recv_buf`.
    places: Vec<Place>,
    send_buf: Vec<u8>,
    /// Datagrams of later broadcasts, oldest first, and their total bytes.
    stash: VecDeque<Vec<u8>>,
    stash_bytes: usize,
    told_send_error: bool,
}

/// One broadcast's place in the communicator.
#[derive(Clone, Copy, Debug)]
pub struct Ranks {
    pub rank: usize,
    pub size: usize,
    pub root: usize,
}

impl<S: DatagramIo> Driver<S> {
    /// `inject` is (percent, seed) of `coll_ipmc_inject_loss`; the seed is
    /// already mixed with the rank and communicator.
    pub fn new(
        socket: S,
        comm_id: u64,
        fragment_size: usize,
        auth: Auth,
        root_wait: Duration,
        window: u32,
        inject: (u32, u64),
    ) -> Self {
        let (percent, seed) = inject;
        let datagram_len = fragment_size + datagram::Protection::new(auth).overhead();
        let recv_len = socket.receive_buffer(datagram_len);
        Driver {
            socket,
            comm_id,
            next_bcast: 0,
            fragment_size,
            datagram_len,
            auth,
            root_wait,
            window,
            inject: (percent > 0).then(|| LossInjector {
                percent,
                rng: ChaCha8Rng::seed_from_u64(seed),
            }),
            recv_buf: vec![0; recv_len],
            places: Vec::new(),
            send_buf: Vec::new(),
            stash: VecDeque::new(),
            stash_bytes: 0,
            told_send_error: false,
        }
    }

    /// How many broadcasts the group carried, which the next numbers on.
    pub fn broadcasts_begun(&self) -> u64 {
        self.next_bcast
    }

    /// The payload of one datagram, as the group agreed.
    pub fn fragment_size(&self) -> usize {
        self.fragment_size
    }

    /// Starts the next broadcast on this rank at time `now`: the root's
    /// message is `root_data`. Datagrams of it that came early are handed in.
    pub fn begin(
        &mut self,
        at: Ranks,
        message_len: usize,
        root_data: Option<&[u8]>,
        now: Duration,
        stats: &mut Datagrams,
    ) -> Broadcast {
        let params = self.next_params(at, message_len);
        let mut b = Broadcast::in_buffer(params, spares::take(message_len));
        if let Some(data) = root_data.filter(|_| params.vrank == 0) {
            b.data_mut().copy_from_slice(data);
            b.start_root(now);
        }
        self.replay_stash(&mut b, stats);
        b
    }

    /// As [`Driver::begin`], the message in `lent`, the caller's memory:
    /// the root's is read from it, every other rank's written into it.
    pub fn begin_in(
        &mut self,
        at: Ranks,
        lent: Box<dyn Lent>,
        now: Duration,
        stats: &mut Datagrams,
    ) -> Broadcast {
        let params = self.next_params(at, lent.len());
        let mut b = Broadcast::in_lent(params, lent);
        if params.vrank == 0 {
            b.start_root(now);
        }
        self.replay_stash(&mut b, stats);
        b
    }

    /// What the communicator's next broadcast is at `at`.
    fn next_params(&mut self, at: Ranks, message_len: usize) -> Params {
        let Ranks { rank, size, root } = at;
        self.next_bcast += 1;
        Params {
            comm_id: self.comm_id,
            bcast: self.next_bcast - 1,
            size,
            vrank: (rank + size - root) % size,
            message_len,
            fragment_size: self.fragment_size,
            auth: self.auth,
            root_wait: self.root_wait,
            window: self.window,
            frame_bytes: two_stage::FRAME_BYTES,
        }
    }

    /// Keeps the message buffer of `b`, a finished broadcast, for a later
    /// one ([`spares`]).
    pub fn recycle(&mut self, b: Broadcast) {
        spares::give(b.into_data());
    }

    /// One step of a broadcast at time `now`: stage 1's datagrams as far as
    /// the socket takes them, the datagrams waiting, and a turn of the chain.
    /// Nothing here waits; the caller steps again when something may have
    /// changed (or at [`Broadcast::wake_at`]).
    pub fn step<M: MessageIo>(
        &mut self,
        run: &mut Run<M>,
        now: Duration,
        wait: Wait,
        stats: &mut Datagrams,
    ) -> Result<()> {
        let b = &mut run.b;
        self.multicast(b, now, stats);
        if self.wants_datagrams(b) {
            self.receive(b, stats);
        }
        if b.need_due() {
            // Ask only for what has not arrived by then, datagrams still
            // queued in the socket included.
            while !b.is_complete() && self.receive(b, stats) {}
        }
        run.turn(wait)?;
        // Reports that came in the turn may let the root send more.
        self.multicast(&mut run.b, now, stats);
        Ok(())
    }

    /// Stage 1 alone, for a broadcast whose chain cannot start yet (the
    /// chains of the broadcasts before it still run): the root's datagrams
    /// as far as the socket takes them, and the datagrams waiting.
    pub fn stage1(&mut self, b: &mut Broadcast, now: Duration, stats: &mut Datagrams) {
        self.multicast(b, now, stats);
        if self.wants_datagrams(b) {
            self.receive(b, stats);
        }
    }
}

impl<S: DatagramIo> Driver<S> {
    /// Whether a step reads the socket: a rank that lacks fragments, and a
    /// root whose own datagrams come back to its socket (loop-back, other
    /// ranks on its host): read and dropped as they come, they never fill
    /// its receive buffer, whose overflow the kernel counts with every other.
    fn wants_datagrams(&self, b: &Broadcast) -> bool {
        !b.is_complete() || (b.params().vrank == 0 && self.socket.loops_back())
    }

    /// Stage 1 on the root: as many datagrams as the socket takes now, in
    /// batches as large as it takes at once.
    fn multicast(&mut self, b: &mut Broadcast, now: Duration, stats: &mut Datagrams) {
        let limit = self.socket.batch_limit();
        loop {
            let stalls = b.flow_stalls();
            let n = b.next_multicasts(now, limit, &mut self.send_buf);
            stats.flow_stalls += u64::from(b.flow_stalls() - stalls);
            if n == 0 {
                return;
            }
            match self.socket.send_batch(&self.send_buf, self.datagram_len) {
                Ok(sent) => {
                    stats.sent += sent as u64;
                    b.multicast_sent(sent);
                    if sent < n {
                        stats.send_full += 1;
                        return;
                    }
                }
                Err(e) => {
                    // The chain delivers what the network would not take;
                    // the rest of the batch is offered again.
                    let lost = self.socket.lost_by_error(n);
                    stats.send_failed += lost as u64;
                    if !self.told_send_error {
                        warn!("multicast send to {} failed: {e}", self.socket.group());
                        self.told_send_error = true;
                    }
                    b.multicast_sent(lost);
                }
            }
        }
    }

    /// Reads waiting datagrams, up to a burst, and hands them to the
    /// protocol; whether the burst was used up (more may be waiting).
    fn receive(&mut self, b: &mut Broadcast, stats: &mut Datagrams) -> bool {
        for _ in 0..RECV_BURST {
            let mut places = std::mem::take(&mut self.places);
            places.clear();
            match self.socket.recv_batch(&mut self.recv_buf, &mut places) {
                Ok(0) => return false,
                Ok(_) => {}
                Err(e) => {
                    debug!("multicast receive failed: {e}");
                    return false;
                }
            }
            for p in places.drain(..) {
                self.one_received(b, p.bytes, p.own, stats);
            }
            self.places = places;
            if b.report_due() {
                break;
            }
        }
        true
    }

    /// Hands the datagram in `recv_buf[range]` to the protocol.
    fn one_received(
        &mut self,
        b: &mut Broadcast,
        range: std::ops::Range<usize>,
        own: bool,
        stats: &mut Datagrams,
    ) {
        stats.received += 1;
        if own {
            stats.own += 1;
            return;
        }
        if let Some(inject) = &mut self.inject {
            if inject.rng.next_u32() % 100 < inject.percent {
                stats.injected += 1;
                return;
            }
        }
        let verdict = b.on_datagram(&self.recv_buf[range.clone()]);
        if verdict != Verdict::Future || !self.keep(range) {
            stats.count(verdict);
        }
    }

    /// Stashes the datagram in `recv_buf[range]` if there is room.
    fn keep(&mut self, range: std::ops::Range<usize>) -> bool {
        if self.stash_bytes + range.len() > STASH_LIMIT {
            return false;
        }
        self.stash_bytes += range.len();
        self.stash.push_back(self.recv_buf[range].to_vec());
        true
    }

    /// Hands the stashed datagrams to a new broadcast; those of still later
    /// broadcasts stay.
    fn replay_stash(&mut self, b: &mut Broadcast, stats: &mut Datagrams) {
        for _ in 0..self.stash.len() {
            let d = self.stash.pop_front().expect("counted");
            match b.on_datagram(&d) {
                Verdict::Future => self.stash.push_back(d),
                verdict => {
                    self.stash_bytes -= d.len();
                    stats.count(verdict);
                }
            }
        }
    }
}
