//! The multicast broadcast in production: drives the protocol core
//! ([`crate::two_stage`]) with a communicator's multicast socket and Open
//! MPI point-to-point for the chain.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use log::{debug, warn};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::datagram::{self, Auth};
use crate::ffi::{Messages, MsgId};
use crate::mcast_socket::McastSocket;
use crate::stats::Datagrams;
use crate::transport::{P2pError, P2pResult};
use crate::two_stage::{Broadcast, Params, Verdict};

/// Chain frames a rank keeps in flight in each direction.
const CHAIN_WINDOW: usize = 16;
/// Datagrams read per turn of the progress loop before the chain gets a turn.
const RECV_BURST: usize = 64;
/// Bytes of datagrams of later broadcasts a rank keeps for when it gets
/// there: a root that enters first may run a few broadcasts ahead.
const STASH_LIMIT: usize = 4 << 20;
/// Open MPI's generic error, for a chain frame that cannot be right.
const OMPI_ERROR: i32 = -1;

/// Drops a reproducible share of received datagrams (`coll_ipmc_inject_loss`).
struct LossInjector {
    percent: u32,
    rng: ChaCha8Rng,
}

/// A communicator's joined group and its multicast broadcasts.
pub struct Group {
    socket: McastSocket,
    comm_id: u64,
    next_bcast: u64,
    fragment_size: usize,
    auth: Auth,
    root_wait: Duration,
    inject: Option<LossInjector>,
    recv_buf: Vec<u8>,
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

impl Group {
    /// `inject` is (percent, seed) of `coll_ipmc_inject_loss`; the seed is
    /// already mixed with the rank and communicator.
    pub fn new(
        socket: McastSocket,
        comm_id: u64,
        fragment_size: usize,
        auth: Auth,
        root_wait: Duration,
        inject: (u32, u64),
    ) -> Self {
        let (percent, seed) = inject;
        Group {
            socket,
            comm_id,
            next_bcast: 0,
            fragment_size,
            auth,
            root_wait,
            inject: (percent > 0).then(|| LossInjector {
                percent,
                rng: ChaCha8Rng::seed_from_u64(seed),
            }),
            // One byte more than the longest valid datagram shows overlong ones.
            recv_buf: vec![0; datagram::HEADER_LEN + fragment_size + datagram::TAG_LEN + 1],
            stash: VecDeque::new(),
            stash_bytes: 0,
            told_send_error: false,
        }
    }

    /// One two-stage broadcast of `data` (the root's message; filled in on
    /// the other ranks).
    pub fn bcast(
        &mut self,
        msgs: &mut Messages,
        at: Ranks,
        data: &mut [u8],
        stats: &mut Datagrams,
    ) -> P2pResult<()> {
        let Ranks { rank, size, root } = at;
        let vrank = (rank + size - root) % size;
        let pred = (rank + size - 1) % size;
        let succ = (rank + 1) % size;
        let mut b = Broadcast::new(Params {
            comm_id: self.comm_id,
            bcast: self.next_bcast,
            size,
            vrank,
            message_len: data.len(),
            fragment_size: self.fragment_size,
            auth: self.auth,
            root_wait: self.root_wait,
        });
        self.next_bcast += 1;
        let start = Instant::now();
        if vrank == 0 {
            b.data_mut().copy_from_slice(data);
            b.start_root(Duration::ZERO);
            // The root has nothing else to do before stage 1 (its chain
            // starts after it), so it sleeps rather than spin against
            // ranks that share its cores.
            std::thread::sleep(b.stage1_start().unwrap_or_default());
        }
        self.replay_stash(&mut b, stats);

        let mut datagram = Vec::new();
        let mut recvs: VecDeque<MsgId> = VecDeque::with_capacity(CHAIN_WINDOW);
        let mut sends: VecDeque<MsgId> = VecDeque::with_capacity(CHAIN_WINDOW);
        let mut spare: Vec<Vec<u8>> = Vec::new();
        // The successor's one reply may come as soon as it has our ALL.
        let mut reply_recv = if b.expects_reply() {
            Some(msgs.recv(succ, b.max_reply())?)
        } else {
            None
        };
        let mut reply_send = None;
        loop {
            self.multicast(&mut b, start.elapsed(), &mut datagram, stats);
            if !b.is_complete() {
                self.receive(&mut b, stats);
            }
            while recvs.len() < b.chain_frames_certain() as usize && recvs.len() < CHAIN_WINDOW {
                recvs.push_back(msgs.recv(pred, b.max_chain_frame())?);
            }
            // Frames from one peer complete in the order they were posted.
            while let Some(&id) = recvs.front() {
                let Some(frame) = msgs.test(id)? else { break };
                recvs.pop_front();
                if let Err(e) = b.on_chain(&frame) {
                    warn!("chain frame from rank {pred} refused: {e:?}");
                    return Err(P2pError(OMPI_ERROR));
                }
            }
            if b.reply_due() {
                // The predecessor's ALL is here: ask only for what has not
                // arrived by then, datagrams still queued in the socket included.
                while !b.is_complete() && self.receive(&mut b, stats) {}
                let mut reply = spare.pop().unwrap_or_default();
                b.next_reply(&mut reply);
                reply_send = Some(msgs.send(pred, reply)?);
            }
            if let Some(id) = reply_recv {
                if let Some(reply) = msgs.test(id)? {
                    reply_recv = None;
                    if let Err(e) = b.on_reply(&reply) {
                        warn!("reply from rank {succ} refused: {e:?}");
                        return Err(P2pError(OMPI_ERROR));
                    }
                }
            }
            while sends.len() < CHAIN_WINDOW {
                let mut frame = spare.pop().unwrap_or_default();
                if b.next_chain_send(&mut frame).is_none() {
                    spare.push(frame);
                    break;
                }
                sends.push_back(msgs.send(succ, frame)?);
            }
            while let Some(&id) = sends.front() {
                let Some(buf) = msgs.test(id)? else { break };
                sends.pop_front();
                spare.push(buf);
            }
            if let Some(id) = reply_send {
                if let Some(buf) = msgs.test(id)? {
                    reply_send = None;
                    spare.push(buf);
                }
            }
            if b.is_done() && sends.is_empty() && reply_send.is_none() {
                break;
            }
        }
        if vrank != 0 {
            data.copy_from_slice(b.data());
        }
        stats.bytes_multicast += b.bytes_by_multicast();
        stats.bytes_chain += b.bytes_by_chain();
        debug!(
            "bcast {} of {} bytes done on vrank {vrank}: {} by multicast, {} by chain",
            b.params().bcast,
            data.len(),
            b.bytes_by_multicast(),
            b.bytes_by_chain()
        );
        Ok(())
    }

    /// Stage 1 on the root: as many datagrams as the socket takes now.
    fn multicast(
        &mut self,
        b: &mut Broadcast,
        now: Duration,
        datagram: &mut Vec<u8>,
        stats: &mut Datagrams,
    ) {
        while b.next_multicast(now, datagram).is_some() {
            match self.socket.send(datagram) {
                Ok(true) => stats.sent += 1,
                Ok(false) => {
                    stats.send_full += 1;
                    return;
                }
                Err(e) => {
                    // The chain delivers what the network would not take.
                    stats.send_failed += 1;
                    if !self.told_send_error {
                        warn!("multicast send to {} failed: {e}", self.socket.group());
                        self.told_send_error = true;
                    }
                }
            }
            b.multicast_done();
        }
    }

    /// Reads waiting datagrams, up to a burst, and hands them to the
    /// protocol; whether the burst was used up (more may be waiting).
    fn receive(&mut self, b: &mut Broadcast, stats: &mut Datagrams) -> bool {
        for _ in 0..RECV_BURST {
            let (n, own) = match self.socket.recv(&mut self.recv_buf) {
                Ok(Some(got)) => got,
                Ok(None) => return false,
                Err(e) => {
                    debug!("multicast receive failed: {e}");
                    return false;
                }
            };
            stats.received += 1;
            if own {
                stats.own += 1;
                continue;
            }
            if let Some(inject) = &mut self.inject {
                if inject.rng.next_u32() % 100 < inject.percent {
                    stats.injected += 1;
                    continue;
                }
            }
            let verdict = b.on_datagram(&self.recv_buf[..n]);
            if verdict != Verdict::Future || !self.keep(n) {
                stats.count(verdict);
            }
        }
        true
    }

    /// Stashes the datagram in `recv_buf[..n]` if there is room.
    fn keep(&mut self, n: usize) -> bool {
        if self.stash_bytes + n > STASH_LIMIT {
            return false;
        }
        self.stash.push_back(self.recv_buf[..n].to_vec());
        self.stash_bytes += n;
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
