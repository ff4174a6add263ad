//! A seeded, deterministic simulated network for the two-stage broadcast
//! ([`crate::protocol::two_stage`]): one root and N receivers exchange multicast
//! datagrams over a faulty group, and chain frames and replies over reliable
//! FIFO links between ring neighbours, in discrete steps. Each step the ranks
//! take turns in a random order and each does a bounded amount of work, so
//! the state machines see many interleavings.
//! Every run checks the protocol's properties; a failure names the seed and the
//! configuration, and [`run`] with the two replays it exactly.
//!
//! The tests run a few hundred seeds; `IPMC_SIM_SEEDS=<factor>` multiplies
//! every test's seed count and `IPMC_SIM_SEED_BASE=<n>` shifts them, e.g.
//! `IPMC_SIM_SEEDS=50 IPMC_SIM_SEED_BASE=1000000 cargo test --release --lib sim_net`.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;
use std::rc::Rc;
use std::time::Duration;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::protocol::datagram::{self, Header};
use crate::protocol::two_stage::{Broadcast, Frame, Params, Verdict, END};

/// What the network does to multicast datagrams.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    /// Independent loss per datagram and receiver, in percent.
    pub loss_pct: u32,
    /// Per mille chance per datagram and receiver that a run of drops starts.
    pub burst_start_pm: u32,
    /// Longest run of consecutive drops at one receiver.
    pub burst_len: u32,
    /// Chance that a receiver gets a datagram twice, in percent.
    pub dup_pct: u32,
    /// Extra delay of each copy, uniform in `0..=max_delay` steps (reordering).
    pub max_delay: u64,
    /// Chance that a copy arrives truncated, in percent.
    pub truncate_pct: u32,
    /// Chance that a copy arrives with one bit flipped, in percent; only with
    /// CRC on, since without it a flipped payload bit is undetectable by design.
    pub flip_pct: u32,
    /// Chance per step that a foreign or malformed datagram is multicast, in percent.
    pub junk_pct: u32,
}

/// When the ranks enter the broadcast.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skew {
    /// Everyone at step 0.
    Together,
    /// The root at 0, each receiver at a random step up to `max_skew`.
    RootFirst,
    /// Each receiver at a random step below `max_skew`, the root at `max_skew`.
    RootLast,
    /// Everyone at a random step up to `max_skew`.
    Random,
}

/// One simulated broadcast; with a seed, it determines the run completely.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub receivers: usize,
    pub message_len: usize,
    pub fragment_size: usize,
    pub with_crc: bool,
    pub faults: Faults,
    /// Datagrams a socket receive buffer holds (more are dropped); `None`: unbounded.
    pub queue_cap: Option<usize>,
    pub skew: Skew,
    pub max_skew: u64,
    /// The root's wait, in steps (one step is one microsecond of its clock).
    pub root_wait: u64,
    /// Chance that a multicast send would block, in percent; the root then
    /// stops for the step and must be offered the same fragment again.
    pub block_pct: u32,
    /// A chain frame or reply arrives `2 ..= 2 + chain_delay` steps after it
    /// was sent (at least one step later than a datagram sent at the same time).
    pub chain_delay: u64,
    /// Datagrams, chain frames and sends each rank handles per step, at most.
    pub work: usize,
    /// Whether each rank's work per step is random in `1..=work` (else exactly `work`).
    pub jitter: bool,
}

impl Config {
    /// A perfect network: no faults, no skew, unbounded buffers, fixed work.
    pub fn clean(receivers: usize, message_len: usize, fragment_size: usize) -> Self {
        Config {
            receivers,
            message_len,
            fragment_size,
            with_crc: true,
            faults: Faults::default(),
            queue_cap: None,
            skew: Skew::Together,
            max_skew: 0,
            root_wait: 0,
            block_pct: 0,
            chain_delay: 0,
            work: 4,
            jitter: false,
        }
    }

    /// Whether receivers must get everything by multicast: then they process
    /// datagrams in lockstep with the root, and a datagram always beats the
    /// chain frame for the same fragment (see `chain_delay`).
    fn all_by_multicast(&self) -> bool {
        let f = &self.faults;
        f.loss_pct == 0
            && f.burst_start_pm == 0
            && f.dup_pct == 0
            && f.max_delay == 0
            && f.truncate_pct == 0
            && (f.flip_pct == 0 || !self.with_crc)
            && f.junk_pct == 0
            && self.queue_cap.is_none()
            && self.skew == Skew::Together
            && !self.jitter
    }
}

/// What a run did, to compare runs and to check that a configuration
/// exercised what it claims.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub steps: u64,
    /// Per rank: the step at which it first owned the whole message.
    pub complete_at: Vec<u64>,
    /// Per receiver: bytes by multicast and by chain.
    pub bytes: Vec<(u64, u64)>,
    /// Verdicts over all ranks, indexed by [`verdict_index`].
    pub verdicts: [u64; 10],
    /// Datagram copies dropped because a socket buffer was full.
    pub buffer_drops: u64,
    /// Multicast sends that would have blocked.
    pub blocked: u64,
}

pub fn verdict_index(v: Verdict) -> usize {
    match v {
        Verdict::Useful => 0,
        Verdict::Duplicate => 1,
        Verdict::Own => 2,
        Verdict::WrongComm => 3,
        Verdict::Stale => 4,
        Verdict::Future => 5,
        Verdict::BadLength => 6,
        Verdict::BadMagic => 7,
        Verdict::BadCrc => 8,
        Verdict::BadAuth => 9,
    }
}

/// What the simulator put into a datagram, hence the verdict it must get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Genuine(u32),
    /// A genuine one truncated or with a bit flipped.
    Damaged,
    Stale,
    Future,
    OtherComm,
    /// This broadcast's, but with a message length, fragment index or payload
    /// length that does not fit.
    Misfit,
    /// The CRC flag disagrees with ours.
    CrcFlag,
    Garbage,
}

#[derive(Clone)]
struct Packet {
    bytes: Rc<[u8]>,
    kind: Kind,
}

struct Rank {
    b: Broadcast,
    enter: u64,
    socket: VecDeque<Packet>,
    /// Drops left in the current loss burst.
    burst_left: u32,
    /// Chain frames from the predecessor, with the step they become readable.
    link_in: VecDeque<(u64, Vec<u8>)>,
    /// Replies from the successor, likewise.
    reply_in: VecDeque<(u64, Vec<u8>)>,
    /// The successor's `NEED`, once it was sent: every fragment it lists must
    /// come to the successor once, and nothing else.
    succ_asked: Option<Vec<u32>>,
    useful: u32,
    useful_bytes: u64,
}

struct Sim {
    cfg: Config,
    seed: u64,
    rng: ChaCha8Rng,
    step: u64,
    ranks: Vec<Rank>,
    /// Datagram copies on their way, by the step they reach a socket.
    in_flight: BTreeMap<u64, Vec<(usize, Packet)>>,
    fragments: u32,
    /// Root: fragments confirmed by `multicast_done`.
    multicast_confirmed: u32,
    /// Root: the offer that would have blocked, to compare with the next one.
    pending_offer: Option<(u32, Vec<u8>)>,
    blocked_streak: u32,
    report: Report,
}

/// Fails the run, naming what replays it.
macro_rules! check {
    ($sim:expr, $cond:expr, $($what:tt)+) => {
        if !$cond {
            panic!(
                "sim_net: {} at step {}; replay with run(&{:?}, {})",
                format_args!($($what)+),
                $sim.step,
                $sim.cfg,
                $sim.seed
            );
        }
    };
}

/// Consecutive steps a multicast send may block before it succeeds.
const MAX_BLOCKED_STEPS: u32 = 3;

/// Simulates one broadcast and checks every property; panics with the seed
/// and configuration on any violation.
pub fn run(cfg: &Config, seed: u64) -> Report {
    let mut sim = Sim::new(*cfg, seed);
    let bound = sim.step_bound();
    while !sim.all_done() {
        check!(sim, sim.step < bound, "not done within {bound} steps");
        sim.step();
    }
    let done_at = sim.step;
    let stuck = sim
        .ranks
        .iter()
        .position(|r| !r.link_in.is_empty() || !r.reply_in.is_empty());
    check!(
        sim,
        stuck.is_none(),
        "all done, frames left for rank {stuck:?}"
    );
    // Late datagrams still arrive: nothing may change any more.
    for _ in 0..cfg.faults.max_delay + 3 {
        sim.step();
    }
    sim.finish();
    sim.report.steps = done_at;
    sim.report
}

impl Sim {
    fn new(cfg: Config, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let n = cfg.receivers;
        let base = Params {
            comm_id: rng.next_u64(),
            // Sometimes 0, so that no earlier broadcast exists.
            bcast: if rng.next_u32() % 4 == 0 {
                0
            } else {
                rng.next_u64() >> 8
            },
            size: n + 1,
            vrank: 0,
            message_len: cfg.message_len,
            fragment_size: cfg.fragment_size,
            auth: datagram::Auth::crc(cfg.with_crc),
            root_wait: Duration::from_micros(cfg.root_wait),
        };
        let enter = |vrank: usize, rng: &mut ChaCha8Rng| {
            let any = |rng: &mut ChaCha8Rng, top: u64| rng.next_u64() % (top + 1);
            match cfg.skew {
                Skew::Together => 0,
                Skew::RootFirst if vrank == 0 => 0,
                Skew::RootFirst | Skew::Random => any(rng, cfg.max_skew),
                Skew::RootLast if vrank == 0 => cfg.max_skew,
                Skew::RootLast => any(rng, cfg.max_skew.saturating_sub(1)),
            }
        };
        let ranks: Vec<Rank> = (0..=n)
            .map(|vrank| Rank {
                b: Broadcast::new(Params { vrank, ..base }),
                enter: enter(vrank, &mut rng),
                socket: VecDeque::new(),
                burst_left: 0,
                link_in: VecDeque::new(),
                reply_in: VecDeque::new(),
                succ_asked: None,
                useful: 0,
                useful_bytes: 0,
            })
            .collect();
        let fragments = ranks[0].b.fragments();
        Sim {
            cfg,
            seed,
            rng,
            step: 0,
            ranks,
            in_flight: BTreeMap::new(),
            fragments,
            multicast_confirmed: 0,
            pending_offer: None,
            blocked_streak: 0,
            report: Report {
                complete_at: vec![u64::MAX; n + 1],
                ..Report::default()
            },
        }
    }

    /// A generous bound on the steps until every rank is done: the root
    /// enters, waits and multicasts (at worst one fragment per
    /// `MAX_BLOCKED_STEPS + 1` steps); then along every hop the handed-on
    /// fragments, `END`, the `NEED` and the fragments it asks for each arrive
    /// within the chain's latency and are read and sent at one per step.
    fn step_bound(&self) -> u64 {
        let c = &self.cfg;
        let f = u64::from(self.fragments);
        let stage1 = c.max_skew + c.root_wait + f * u64::from(MAX_BLOCKED_STEPS + 1) + 2;
        let per_hop = 3 * (2 + c.chain_delay) + 4 * f + 6;
        stage1 + f + 2 + c.receivers as u64 * per_hop + 10
    }

    fn chance(&mut self, pct: u32) -> bool {
        self.rng.next_u32() % 100 < pct
    }

    fn below(&mut self, n: u64) -> u64 {
        self.rng.next_u64() % n
    }

    fn budget(&mut self) -> usize {
        if self.cfg.jitter {
            1 + self.below(self.cfg.work as u64) as usize
        } else {
            self.cfg.work
        }
    }

    fn all_done(&self) -> bool {
        self.ranks.iter().all(|r| r.b.is_done())
    }

    fn step(&mut self) {
        // Datagrams due now reach the socket buffers, or are dropped when full.
        while let Some(entry) = self.in_flight.first_entry() {
            if *entry.key() > self.step {
                break;
            }
            for (r, packet) in entry.remove() {
                let socket = &mut self.ranks[r].socket;
                if self.cfg.queue_cap.map_or(true, |cap| socket.len() < cap) {
                    socket.push_back(packet);
                } else {
                    self.report.buffer_drops += 1;
                }
            }
        }
        if self.chance(self.cfg.faults.junk_pct) {
            self.inject_junk();
        }
        let mut order: Vec<usize> = (0..self.ranks.len()).collect();
        self.shuffle(&mut order);
        for r in order {
            if self.step >= self.ranks[r].enter {
                self.turn(r);
            }
        }
        for (r, rank) in self.ranks.iter().enumerate() {
            if rank.b.is_complete() && self.report.complete_at[r] == u64::MAX {
                self.report.complete_at[r] = self.step;
            }
        }
        self.step += 1;
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }

    fn turn(&mut self, r: usize) {
        if r == 0 && self.step == self.ranks[0].enter {
            let mut data = vec![0; self.cfg.message_len];
            self.rng.fill_bytes(&mut data);
            let now = self.now();
            let root = &mut self.ranks[0].b;
            root.data_mut().copy_from_slice(&data);
            root.start_root(now);
        }
        let mut phases = [0, 1, 2, 3, 4, 5];
        self.shuffle(&mut phases);
        for phase in phases {
            match phase {
                0 => self.read_datagrams(r),
                1 => self.read_chain(r),
                2 => self.send_chain(r),
                3 => self.read_reply(r),
                4 => self.send_reply(r),
                _ if r == 0 => self.multicast(),
                _ => {}
            }
        }
    }

    fn now(&self) -> Duration {
        Duration::from_micros(self.step)
    }

    fn multicast(&mut self) {
        let mut out = Vec::new();
        let wait_over = self.step >= self.ranks[0].enter + self.cfg.root_wait;
        for _ in 0..self.budget() {
            let now = self.now();
            let Some(k) = self.ranks[0].b.next_multicast(now, &mut out) else {
                check!(
                    self,
                    !wait_over || self.multicast_confirmed == self.fragments,
                    "next_multicast offered nothing with fragments left"
                );
                return;
            };
            check!(self, wait_over, "multicast during root_wait");
            check!(
                self,
                k == self.multicast_confirmed,
                "offered fragment {k} after {} were confirmed",
                self.multicast_confirmed
            );
            if let Some((was, bytes)) = self.pending_offer.take() {
                check!(self, (was, &bytes) == (k, &out), "re-offer differs");
            }
            if self.blocked_streak < MAX_BLOCKED_STEPS && self.chance(self.cfg.block_pct) {
                self.blocked_streak += 1;
                self.report.blocked += 1;
                self.pending_offer = Some((k, out));
                return;
            }
            self.blocked_streak = 0;
            self.check_genuine(k, &out);
            self.ranks[0].b.multicast_done();
            self.multicast_confirmed += 1;
            self.send_to_group(Rc::from(&out[..]), Kind::Genuine(k));
        }
    }

    fn range(&self, k: u32) -> Range<usize> {
        let start = k as usize * self.cfg.fragment_size;
        start..self.cfg.message_len.min(start + self.cfg.fragment_size)
    }

    /// The root's datagram for fragment `k` says and holds what it must.
    fn check_genuine(&self, k: u32, bytes: &[u8]) {
        let mut copy = bytes.to_vec();
        let d = datagram::decode(&mut copy, &datagram::Protection::crc(self.cfg.with_crc));
        let p = self.ranks[0].b.params();
        let want = Header {
            comm_id: p.comm_id,
            bcast: p.bcast,
            message_len: p.message_len as u64,
            fragment: k,
        };
        let ok = d
            .is_ok_and(|d| d.header == want && d.payload == &self.ranks[0].b.data()[self.range(k)]);
        check!(self, ok, "root's datagram {k} is wrong");
    }

    /// Multicasts one datagram: each rank, the root included (loop-back), gets
    /// zero, one or two copies, each delayed and possibly damaged.
    fn send_to_group(&mut self, bytes: Rc<[u8]>, kind: Kind) {
        let f = self.cfg.faults;
        for r in 0..self.ranks.len() {
            if self.lost(r) {
                continue;
            }
            let copies = if self.chance(f.dup_pct) { 2 } else { 1 };
            for _ in 0..copies {
                let mut packet = Packet {
                    bytes: Rc::clone(&bytes),
                    kind,
                };
                if matches!(kind, Kind::Genuine(_)) {
                    if self.chance(f.truncate_pct) {
                        let cut = self.below(bytes.len() as u64) as usize;
                        packet = Packet {
                            bytes: Rc::from(&bytes[..cut]),
                            kind: Kind::Damaged,
                        };
                    } else if self.cfg.with_crc && self.chance(f.flip_pct) {
                        let bit = self.below(bytes.len() as u64 * 8) as usize;
                        let mut flipped = bytes.to_vec();
                        flipped[bit / 8] ^= 1 << (bit % 8);
                        packet = Packet {
                            bytes: Rc::from(flipped),
                            kind: Kind::Damaged,
                        };
                    }
                }
                let at = self.step + 1 + self.below(f.max_delay + 1);
                self.in_flight.entry(at).or_default().push((r, packet));
            }
        }
    }

    fn lost(&mut self, r: usize) -> bool {
        let f = self.cfg.faults;
        if self.ranks[r].burst_left > 0 {
            self.ranks[r].burst_left -= 1;
            return true;
        }
        if f.burst_len > 0 && self.rng.next_u32() % 1000 < f.burst_start_pm {
            self.ranks[r].burst_left = self.below(u64::from(f.burst_len)) as u32;
            return true;
        }
        self.chance(f.loss_pct)
    }

    /// One datagram that is not a fragment of this broadcast, multicast to all.
    fn inject_junk(&mut self) {
        let p = *self.ranks[0].b.params();
        let mut h = Header {
            comm_id: p.comm_id,
            bcast: p.bcast,
            message_len: p.message_len as u64,
            fragment: self.below(u64::from(self.fragments.max(1))) as u32,
        };
        let mut payload_len = if self.fragments == 0 {
            0
        } else {
            self.range(h.fragment).len()
        };
        let mut with_crc = self.cfg.with_crc;
        let kind = match self.below(6) {
            0 if p.bcast > 0 => {
                h.bcast = self.below(p.bcast);
                Kind::Stale
            }
            0 | 1 => {
                h.bcast = p.bcast + 1 + self.below(1 << 20);
                Kind::Future
            }
            2 => {
                h.comm_id = self.rng.next_u64();
                if h.comm_id == p.comm_id {
                    h.comm_id = !p.comm_id;
                }
                Kind::OtherComm
            }
            3 => {
                match self.below(3) {
                    0 => h.message_len += 1 + self.below(1 << 40),
                    1 => h.fragment = self.fragments + self.below(1000) as u32,
                    _ => {
                        payload_len = if payload_len > 0 && self.chance(50) {
                            payload_len - 1
                        } else {
                            payload_len + 1
                        }
                    }
                }
                Kind::Misfit
            }
            4 => {
                with_crc = !with_crc;
                Kind::CrcFlag
            }
            _ => Kind::Garbage,
        };
        let mut bytes = vec![0; payload_len];
        self.rng.fill_bytes(&mut bytes);
        if kind != Kind::Garbage {
            let payload = std::mem::take(&mut bytes);
            datagram::encode(
                &h,
                &payload,
                &datagram::Protection::crc(with_crc),
                &mut bytes,
            );
        } else if self.chance(50) {
            bytes.truncate(self.below(60) as usize);
        }
        self.send_to_group(Rc::from(bytes), kind);
    }

    fn read_datagrams(&mut self, r: usize) {
        for _ in 0..self.budget() {
            let Some(packet) = self.ranks[r].socket.pop_front() else {
                return;
            };
            let rank = &mut self.ranks[r];
            let owned_before = match packet.kind {
                Kind::Genuine(k) => rank.b.owns(k),
                _ => false,
            };
            let v = rank.b.on_datagram(&packet.bytes);
            self.report.verdicts[verdict_index(v)] += 1;
            let rejected = matches!(v, Verdict::BadLength | Verdict::BadMagic | Verdict::BadCrc);
            let ok = match packet.kind {
                Kind::Genuine(_) if r == 0 => v == Verdict::Own,
                Kind::Genuine(_) if owned_before => v == Verdict::Duplicate,
                Kind::Genuine(_) => v == Verdict::Useful,
                // A flip in the communicator id makes it another's.
                Kind::Damaged => rejected || v == Verdict::WrongComm,
                Kind::Garbage => rejected,
                Kind::Stale => v == Verdict::Stale,
                Kind::Future => v == Verdict::Future,
                Kind::OtherComm => v == Verdict::WrongComm,
                Kind::Misfit => v == Verdict::BadLength,
                Kind::CrcFlag => v == Verdict::BadCrc,
            };
            check!(self, ok, "rank {r}: {:?} datagram got {v:?}", packet.kind);
            if let (Kind::Genuine(k), Verdict::Useful) = (packet.kind, v) {
                let len = self.range(k).len() as u64;
                let rank = &mut self.ranks[r];
                rank.useful += 1;
                rank.useful_bytes += len;
            }
        }
    }

    fn read_chain(&mut self, r: usize) {
        for _ in 0..self.budget() {
            let rank = &mut self.ranks[r];
            match rank.link_in.front() {
                Some(&(ready, _)) if ready <= self.step => {}
                _ => return,
            }
            let (_, frame) = rank.link_in.pop_front().expect("front exists");
            let k = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]);
            let result = rank.b.on_chain(&frame);
            check!(
                self,
                result.is_ok(),
                "rank {r}: chain frame {k}: {result:?}"
            );
        }
    }

    fn send_chain(&mut self, r: usize) {
        let mut out = Vec::new();
        for _ in 0..self.budget() {
            let was_done = self.ranks[r].b.is_done();
            let Some(frame) = self.ranks[r].b.next_chain_send(&mut out) else {
                return;
            };
            check!(
                self,
                r < self.cfg.receivers,
                "the last rank sent on the chain"
            );
            check!(self, !was_done, "rank {r} sent after it was done");
            let b = &self.ranks[r].b;
            match frame {
                Frame::End => {
                    // END says the root multicast everything.
                    let ok = out == END.to_le_bytes() && self.ranks[0].b.stage1_done();
                    check!(self, ok, "rank {r}: END too early or malformed");
                }
                Frame::Data(k) => {
                    let range = self.range(k);
                    let ok = out[..4] == k.to_le_bytes()
                        && b.owns(k)
                        && out[4..] == self.ranks[0].b.data()[range];
                    check!(self, ok, "rank {r}: chain frame {k} is malformed");
                    let asked = self.ranks[r + 1].b.requested();
                    check!(
                        self,
                        asked.is_some_and(|a| a.contains(&k)),
                        "rank {r}: sent fragment {k}, which the successor did not ask for"
                    );
                    let asked = self.ranks[r].succ_asked.as_mut().expect("asked");
                    let at = asked.iter().position(|&x| x == k);
                    check!(self, at.is_some(), "rank {r}: sent fragment {k} twice");
                    asked.swap_remove(at.expect("checked"));
                }
            }
            self.deliver(r, r + 1, std::mem::take(&mut out));
        }
    }

    fn read_reply(&mut self, r: usize) {
        let rank = &mut self.ranks[r];
        match rank.reply_in.front() {
            Some(&(ready, _)) if ready <= self.step => {}
            _ => return,
        }
        let (_, reply) = rank.reply_in.pop_front().expect("front exists");
        let result = rank.b.on_reply(&reply);
        check!(self, result.is_ok(), "rank {r}: reply: {result:?}");
    }

    fn send_reply(&mut self, r: usize) {
        let mut out = Vec::new();
        let b = &self.ranks[r].b;
        let due = b.need_due();
        let (complete, end) = (b.is_complete(), b.end_received());
        if !self.ranks[r].b.next_reply(&mut out) {
            return;
        }
        check!(self, r > 0 && due, "rank {r} replied when no NEED was due");
        let b = &self.ranks[r].b;
        check!(
            self,
            // Before its NEED nothing comes by the chain: owning the last
            // fragment means its datagram came.
            complete || end || b.owns(self.fragments - 1),
            "rank {r}: NEED without cause"
        );
        let missing: Vec<u32> = (0..b.fragments()).filter(|&k| !b.owns(k)).collect();
        let encoded: Vec<u8> = missing.iter().copied().flat_map(u32::to_le_bytes).collect();
        check!(
            self,
            out[..4] == crate::protocol::two_stage::NEED.to_le_bytes() && out[4..] == encoded[..],
            "rank {r}: the reply is not what it lacks"
        );
        self.ranks[r - 1].succ_asked = Some(missing);
        self.deliver(r, r - 1, out);
    }

    /// Puts a frame on the reliable link from `from` to its neighbour `to`:
    /// FIFO, never readable before the one sent ahead of it.
    fn deliver(&mut self, from: usize, to: usize, bytes: Vec<u8>) {
        let delay = 2 + self.below(self.cfg.chain_delay + 1);
        let link = if to == from + 1 {
            &mut self.ranks[to].link_in
        } else {
            &mut self.ranks[to].reply_in
        };
        let earliest = link.back().map_or(0, |&(ready, _)| ready);
        link.push_back((earliest.max(self.step + delay), bytes));
    }

    /// The properties every run must end with.
    fn finish(&mut self) {
        let len = self.cfg.message_len as u64;
        let f = self.fragments;
        let root = &self.ranks[0].b;
        check!(self, self.multicast_confirmed == f, "stage 1 incomplete");
        check!(self, root.is_done(), "root not done");
        check!(
            self,
            (root.bytes_by_multicast(), root.bytes_by_chain()) == (0, 0),
            "root counted bytes"
        );
        let mut out = Vec::new();
        let later = Duration::from_secs(1 << 20);
        check!(
            self,
            self.ranks[0].b.next_multicast(later, &mut out).is_none(),
            "root multicasts after stage 1"
        );
        let all_by_multicast = self.cfg.all_by_multicast();
        let all_by_chain = self.cfg.faults.loss_pct == 100;
        for r in 1..self.ranks.len() {
            let rank = &self.ranks[r];
            let b = &rank.b;
            check!(self, b.is_done(), "rank {r} not done");
            check!(
                self,
                b.data() == self.ranks[0].b.data(),
                "rank {r} has other bytes"
            );
            check!(
                self,
                rank.link_in.is_empty() && rank.reply_in.is_empty(),
                "frames left for rank {r}"
            );
            check!(self, b.end_received() || f == 0, "rank {r}: END never came");
            check!(
                self,
                b.requested().is_some() || f == 0,
                "rank {r}: no NEED made"
            );
            check!(
                self,
                b.chain_frames_received() == 1 + b.requested().map_or(0, |a| a.len() as u32)
                    || f == 0,
                "rank {r}: received {} chain frames for END and {:?}",
                b.chain_frames_received(),
                b.requested()
            );
            check!(
                self,
                self.ranks[r - 1]
                    .succ_asked
                    .as_ref()
                    .is_some_and(Vec::is_empty)
                    || f == 0,
                "rank {r}: asked-for fragments never came: {:?}",
                self.ranks[r - 1].succ_asked
            );
            check!(
                self,
                rank.useful <= f,
                "rank {r}: more useful datagrams than fragments"
            );
            let (mc, ch) = (b.bytes_by_multicast(), b.bytes_by_chain());
            check!(
                self,
                mc == rank.useful_bytes && mc + ch == len,
                "rank {r}: {mc} bytes by multicast, {ch} by chain"
            );
            check!(
                self,
                !all_by_multicast || ch == 0,
                "rank {r}: {ch} bytes by chain"
            );
            check!(
                self,
                !all_by_chain || mc == 0,
                "rank {r}: {mc} bytes by multicast"
            );
            self.report.bytes.push((mc, ch));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: usize = 1024;

    /// Seeds for a test: `n` times the factor in `IPMC_SIM_SEEDS` (default
    /// 1), from `IPMC_SIM_SEED_BASE` (default 0) on.
    fn seeds(n: u64) -> Range<u64> {
        let env = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(default)
        };
        let base = env("IPMC_SIM_SEED_BASE", 0);
        base..base + n * env("IPMC_SIM_SEEDS", 1)
    }

    fn add_verdicts(into: &mut [u64; 10], report: &Report) {
        for (all, v) in into.iter_mut().zip(report.verdicts) {
            *all += v;
        }
    }

    /// Message lengths around the fragment size `fs`.
    fn lengths(fs: usize) -> [usize; 5] {
        [1, fs - 1, fs, fs + 1, 5 * fs + 3]
    }

    fn lossy(receivers: usize, message_len: usize, loss_pct: u32) -> Config {
        Config {
            faults: Faults {
                loss_pct,
                ..Faults::default()
            },
            jitter: true,
            chain_delay: 2,
            ..Config::clean(receivers, message_len, 256)
        }
    }

    /// Faults, skew and limits drawn from `seed`.
    fn random_config(seed: u64) -> Config {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_c0f1);
        let mut pick = |n: u64| rng.next_u64() % n;
        let fragment_size = [256, 300, 1024][pick(3) as usize];
        let message_len = match pick(6) {
            0 => 0,
            1 => 1,
            2 => fragment_size,
            3 => fragment_size + 1,
            4 => 1 + pick(8 * fragment_size as u64) as usize,
            _ => 16 * fragment_size - pick(2) as usize,
        };
        let receivers = [1, 2, 3, 5, 8, 13, 31, 64][pick(8) as usize];
        let loss_pct = [0, 1, 10, 50, 90, 100][pick(6) as usize];
        Config {
            receivers,
            message_len,
            fragment_size,
            with_crc: pick(2) == 0,
            faults: Faults {
                loss_pct,
                burst_start_pm: [0, 0, 5, 50][pick(4) as usize],
                burst_len: 1 + pick(20) as u32,
                dup_pct: [0, 5, 30][pick(3) as usize],
                max_delay: [0, 1, 5, 20][pick(4) as usize],
                truncate_pct: [0, 2, 20][pick(3) as usize],
                flip_pct: [0, 2, 20][pick(3) as usize],
                junk_pct: [0, 10, 50][pick(3) as usize],
            },
            queue_cap: [None, Some(1), Some(4), Some(64)][pick(4) as usize],
            skew: [
                Skew::Together,
                Skew::RootFirst,
                Skew::RootLast,
                Skew::Random,
            ][pick(4) as usize],
            max_skew: pick(40),
            root_wait: [0, 0, 5, 30][pick(4) as usize],
            block_pct: [0, 10, 60][pick(3) as usize],
            chain_delay: pick(6),
            work: 1 + pick(6) as usize,
            jitter: pick(3) != 0,
        }
    }

    #[test]
    fn a_perfect_network_delivers_everything_by_multicast() {
        for receivers in [1, 2, 7, 32] {
            for len in lengths(256).into_iter().chain([64 * 1024]) {
                for with_crc in [true, false] {
                    let fs = if len == 64 * 1024 { KIB } else { 256 };
                    let cfg = Config {
                        with_crc,
                        root_wait: 3,
                        block_pct: 20,
                        chain_delay: 3,
                        ..Config::clean(receivers, len, fs)
                    };
                    for seed in seeds(3) {
                        let report = run(&cfg, seed);
                        assert!(report.bytes.iter().all(|&(mc, _)| mc == len as u64));
                    }
                }
            }
        }
    }

    #[test]
    fn total_loss_delivers_everything_by_the_chain() {
        for receivers in [1, 2, 9, 40] {
            for len in lengths(256) {
                for skew in [
                    Skew::Together,
                    Skew::RootFirst,
                    Skew::RootLast,
                    Skew::Random,
                ] {
                    let cfg = Config {
                        skew,
                        max_skew: 15,
                        ..lossy(receivers, len, 100)
                    };
                    for seed in seeds(3) {
                        run(&cfg, seed);
                    }
                }
            }
        }
    }

    #[test]
    fn every_loss_level_ends_with_the_roots_bytes() {
        for loss in [0, 1, 10, 50, 90, 100] {
            for receivers in [1, 3, 16] {
                for len in lengths(256) {
                    for with_crc in [true, false] {
                        let cfg = Config {
                            with_crc,
                            ..lossy(receivers, len, loss)
                        };
                        for seed in seeds(6) {
                            run(&cfg, seed);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn bursts_duplicates_reordering_and_damage_are_harmless() {
        let mut verdicts = [0u64; 10];
        for with_crc in [true, false] {
            for receivers in [1, 4, 12] {
                let cfg = Config {
                    with_crc,
                    faults: Faults {
                        loss_pct: 5,
                        burst_start_pm: 30,
                        burst_len: 12,
                        dup_pct: 30,
                        max_delay: 8,
                        truncate_pct: 10,
                        flip_pct: 10,
                        junk_pct: 0,
                    },
                    queue_cap: Some(32),
                    jitter: true,
                    chain_delay: 4,
                    ..Config::clean(receivers, 20 * 256 + 7, 256)
                };
                for seed in seeds(16) {
                    add_verdicts(&mut verdicts, &run(&cfg, seed));
                }
            }
        }
        let count = |v| verdicts[verdict_index(v)];
        for v in [
            Verdict::Useful,
            Verdict::Duplicate,
            Verdict::Own,
            Verdict::BadLength,
        ] {
            assert!(
                count(v) > 0,
                "no {v:?} verdicts: the faults were not exercised"
            );
        }
        assert!(count(Verdict::BadCrc) + count(Verdict::BadMagic) > 0);
    }

    #[test]
    fn foreign_and_malformed_datagrams_are_never_taken() {
        let mut verdicts = [0u64; 10];
        for with_crc in [true, false] {
            for (receivers, len) in [(1, 1), (3, 256), (6, 2000), (10, 0)] {
                let cfg = Config {
                    with_crc,
                    faults: Faults {
                        junk_pct: 80,
                        loss_pct: 10,
                        ..Faults::default()
                    },
                    skew: Skew::RootLast,
                    max_skew: 10,
                    jitter: true,
                    ..Config::clean(receivers, len, 256)
                };
                for seed in seeds(20) {
                    add_verdicts(&mut verdicts, &run(&cfg, seed));
                }
            }
        }
        for v in [
            Verdict::WrongComm,
            Verdict::Stale,
            Verdict::Future,
            Verdict::BadLength,
            Verdict::BadMagic,
            Verdict::BadCrc,
        ] {
            assert!(
                verdicts[verdict_index(v)] > 0,
                "no {v:?} junk was exercised"
            );
        }
    }

    #[test]
    fn small_socket_buffers_with_arrival_skew_and_root_wait() {
        for skew in [Skew::RootFirst, Skew::RootLast, Skew::Random] {
            for cap in [1, 3, 16] {
                for root_wait in [0, 20] {
                    let cfg = Config {
                        queue_cap: Some(cap),
                        skew,
                        max_skew: 30,
                        root_wait,
                        block_pct: 30,
                        faults: Faults {
                            junk_pct: 20,
                            dup_pct: 10,
                            ..Faults::default()
                        },
                        jitter: true,
                        chain_delay: 2,
                        ..Config::clean(8, 24 * 256, 256)
                    };
                    let mut drops = 0;
                    for seed in seeds(8) {
                        drops += run(&cfg, seed).buffer_drops;
                    }
                    assert!(drops > 0 || cap == 16, "{cfg:?}: no buffer overflowed");
                }
            }
        }
    }

    #[test]
    fn a_64_kib_message_in_1_kib_fragments() {
        for (loss, receivers) in [(0, 4), (10, 8), (50, 3), (100, 5)] {
            let cfg = Config {
                faults: Faults {
                    loss_pct: loss,
                    dup_pct: 5,
                    max_delay: 3,
                    ..Faults::default()
                },
                queue_cap: Some(48),
                skew: Skew::Random,
                max_skew: 20,
                jitter: true,
                ..Config::clean(receivers, 64 * 1024, KIB)
            };
            for seed in seeds(6) {
                run(&cfg, seed);
            }
        }
    }

    #[test]
    fn an_empty_message_is_done_at_once() {
        for receivers in [1, 2, 17] {
            for seed in seeds(3) {
                // The root enters, and so finishes, in step 0.
                let report = run(&lossy(receivers, 0, 10), seed);
                assert_eq!(report.steps, 1);
            }
        }
    }

    /// The largest communicator: one seed per configuration, since each run
    /// simulates hundreds of thousands of rank turns.
    #[test]
    fn five_hundred_twelve_receivers() {
        let configs = [
            Config::clean(512, 4 * KIB, KIB),
            Config {
                skew: Skew::Random,
                max_skew: 50,
                queue_cap: Some(8),
                ..lossy(512, 3 * 256 + 1, 10)
            },
            lossy(512, 2 * 256, 100),
            Config {
                faults: Faults {
                    loss_pct: 50,
                    dup_pct: 10,
                    max_delay: 4,
                    flip_pct: 5,
                    truncate_pct: 5,
                    junk_pct: 30,
                    ..Faults::default()
                },
                fragment_size: KIB,
                ..lossy(512, 16 * KIB, 50)
            },
        ];
        for (i, cfg) in configs.iter().enumerate() {
            for seed in seeds(1) {
                run(cfg, seed * 16 + i as u64);
            }
        }
    }

    /// Everything drawn at random: hundreds of seeds over all the knobs.
    /// The slowest rank's completion and the step all ranks were done, as
    /// medians over seeds, for `receivers` receivers at `loss_pct` loss.
    fn median_steps(receivers: usize, loss_pct: u32) -> (u64, u64) {
        let cfg = Config {
            chain_delay: 2,
            ..lossy(receivers, 16 * 256, loss_pct)
        };
        let mut complete = Vec::new();
        let mut done = Vec::new();
        for seed in seeds(9) {
            let report = run(&cfg, seed);
            complete.push(*report.complete_at.iter().max().expect("ranks"));
            done.push(report.steps);
        }
        complete.sort_unstable();
        done.sort_unstable();
        (complete[complete.len() / 2], done[done.len() / 2])
    }

    #[test]
    fn repairs_cost_about_the_same_on_a_ring_of_8_or_512() {
        for loss in [1, 5] {
            let (small_complete, small_done) = median_steps(8, loss);
            let (big_complete, big_done) = median_steps(512, loss);
            println!(
                "loss {loss} %: complete {small_complete} -> {big_complete}, done {small_done} -> {big_done} steps"
            );
            // One chain hop is 2..=4 steps here; a ring walk would be thousands.
            assert!(
                big_complete <= small_complete + 40,
                "loss {loss} %: slowest rank complete at {small_complete} steps with 8 \
                 receivers, {big_complete} with 512"
            );
            assert!(
                big_done <= small_done + 60,
                "loss {loss} %: done at {small_done} steps with 8 receivers, {big_done} with 512"
            );
        }
    }

    #[test]
    fn random_configurations() {
        for seed in seeds(2000) {
            run(&random_config(seed), seed);
        }
    }

    #[test]
    fn a_seed_replays_exactly() {
        let cfg = random_config(7);
        let cfg = Config {
            receivers: 6,
            message_len: 3000,
            ..cfg
        };
        assert_eq!(run(&cfg, 42), run(&cfg, 42));
        assert_ne!(run(&cfg, 42), run(&cfg, 43));
    }
}
