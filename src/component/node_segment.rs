//! A node's shared segment (Mamidala et al.'s shared-memory step): the
//! leader of a node gives the message to every other rank of its node at
//! once, where a broadcast on the node's communicator passes it down a
//! tree, rank to rank.
//!
//! The ranks take it in one of two ways ([`Copies`]), the node agreeing
//! when the segment is made on what it can do, and each step's way coming
//! from the algorithm where the node measures both (the default,
//! `coll_ipmc_node_segment 3`):
//!
//! - **Through the segment's slots**: the segment holds
//!   a ring of [`SLOTS`] slots of [`SLOT_BYTES`]; the leader copies the
//!   message in slot after slot, and the ranks copy each out as soon as it
//!   is there. Each slot has two counters on cache lines of their own:
//!   `seq`, the number of the piece it holds (stored after the bytes, with
//!   release ordering), and `left`, how many ranks have yet to copy it out
//!   (each subtracts one once it has); the leader reuses a slot only when
//!   `left` is 0.
//! - **From the leader's memory**. The leader publishes where the message
//!   lies in its own memory and how much of it has arrived (`ready`), and
//!   each rank copies it from there into its own buffer with
//!   `process_vm_readv(2)`, one copy by the kernel, as the leader's bytes
//!   arrive; the leader copies nothing and waits at the end of the step
//!   until every rank has counted itself `done` (its buffer must stay
//!   until then). The kernel allows it where a process may trace the
//!   other (the same user; Yama's `ptrace_scope` 0, or a container that
//!   does not forbid it), which each rank tries when the segment is made;
//!   where one cannot, the node copies through the slots.
//!
//! A root that does not lead its node gives the message to its node
//! (its leader included) through the slots, whichever way the node agreed
//! on: the leader's memory is the only one the ranks tried to read.
//!
//! Steps and pieces are numbered alike on every rank of the node, since
//! each takes part in the same steps with the same lengths.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::base::error::{Error, Result};
use crate::platform::ompi::{self, Comm};
use crate::platform::os::{self, SharedMapping};

/// Slots of the ring: enough that the leader rarely waits for the slowest
/// rank to free one while the next piece arrives.
pub const SLOTS: usize = 4;
/// Bytes of a slot: the pipelined levels' segment, so that each segment
/// the leaders broadcast fills one slot.
pub const SLOT_BYTES: usize = super::levels::LEVEL_SEGMENT;
/// The header's cache lines: the leader's process and a word to try
/// reading it by; the step and where its message lies; how much of it is
/// ready; how many ranks are done with it.
const PROBE: usize = 0;
const STEP: usize = 64;
const READY: usize = 128;
const DONE: usize = 192;
const HEADER: usize = 256;
/// Bytes of a slot's counters: `seq` and `left`, each on a cache line.
const COUNTERS: usize = 128;
const LEFT: usize = 64;
/// Bytes of the file's name sent from the leader (NUL-padded).
const NAME_BYTES: usize = 128;

/// Spins before a waiting rank also yields its core.
const SPINS_BEFORE_YIELD: u32 = 64;

/// How the node's ranks copy the message (see the module's text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Copies {
    /// Straight from the leader's memory, whose process this is.
    FromLeader { pid: i32 },
    /// Through the segment's slots.
    ThroughSlots,
}

/// Who gives a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Giver {
    /// The node's leader; `from_memory`: the call asks for copies from its
    /// memory, heeded where the node measures both ways.
    Leader { from_memory: bool },
    /// Another rank of the node (a root that does not lead): through the
    /// slots.
    Other,
}

/// What a node wants of its segment (`coll_ipmc_node_segment`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// None: Open MPI's broadcast on the node's communicator.
    No,
    /// Copies through the slots.
    Slots,
    /// Copies from the leader's memory where the kernel allows, else
    /// through the slots.
    FromLeader,
    /// Either way, as each call's algorithm says (the measured choice
    /// tries both), where the kernel allows copies from the leader's
    /// memory; else through the slots.
    Either,
}

impl Wanted {
    /// From the parameter's value: 0, 1, 2 or 3 (the default).
    pub fn from_param(v: usize) -> Self {
        match v {
            0 => Wanted::No,
            1 => Wanted::Slots,
            2 => Wanted::FromLeader,
            _ => Wanted::Either,
        }
    }

    fn reads_leader(self) -> bool {
        matches!(self, Wanted::FromLeader | Wanted::Either)
    }
}

/// One rank's view of its node's segment.
pub struct NodeSegment {
    map: SharedMapping,
    /// How the leader's steps may go: from its memory where the node can.
    copies: Copies,
    /// Whether the node measures both ways (every rank wants
    /// [`Wanted::Either`]): then the leader's steps go from its memory only
    /// where the call asks for it ([`Giver::Leader`]).
    either: bool,
    /// On the giver: the way of the step it began.
    giving: Copies,
    /// Whether this rank leads the node.
    leads: bool,
    /// The ranks that take each step: all of the node's but the giver.
    readers: u64,
    /// The number of the next piece this rank writes or reads through the
    /// slots.
    next: u64,
    /// The number of this rank's last step from the leader's memory.
    step: u64,
    /// On the leader during a step: the bytes published so far.
    published: u64,
}

impl NodeSegment {
    /// Bytes of the file: the header, the slots' counters, the slots.
    pub const BYTES: usize = HEADER + SLOTS * (COUNTERS + SLOT_BYTES);

    /// Makes the segment of `node` (a node's communicator, its leader rank
    /// 0): collective, every rank of `node` calls it at the same point,
    /// whatever it wants. `None` where the node has a single rank, or where
    /// some rank wants none or could not map the file (the node then keeps
    /// Open MPI's broadcast); copies from the leader's memory where every
    /// rank wants them (or either way) and can read the leader's memory.
    /// Every rank of the node returns alike.
    pub fn attach(node: Comm, wanted: Wanted) -> Result<Option<Self>> {
        if node.size() < 2 {
            return Ok(None);
        }
        let leads = node.rank() == 0;
        let mut name = [0u8; NAME_BYTES];
        let mut made = None;
        // A word of the leader's memory for the others to read, alive until
        // every rank has tried.
        let mut probe_word = [0u8; 8];
        let _ = os::os_random(&mut probe_word);
        let probe = Box::new(u64::from_le_bytes(probe_word) | 1);
        if leads && wanted != Wanted::No && leaves_room(Path::new(SHM_DIR)) {
            let path = fresh_path(node);
            match SharedMapping::create(&path, Self::BYTES) {
                Ok(map) => {
                    map.atomic_u64(PROBE)
                        .store(u64::from(std::process::id()), Ordering::Relaxed);
                    let at = &*probe as *const u64 as u64;
                    map.atomic_u64(PROBE + 8).store(at, Ordering::Relaxed);
                    map.atomic_u64(PROBE + 16).store(*probe, Ordering::Relaxed);
                    let text = path.as_os_str().as_encoded_bytes();
                    name[..text.len()].copy_from_slice(text);
                    made = Some((map, path));
                }
                Err(e) => log::info!("no shared segment at {} ({e})", path.display()),
            }
        }
        let shared = node.bcast_bytes(&mut name, 0);
        let opened = match (&shared, leads) {
            (Ok(()), false) if wanted != Wanted::No => open_named(&name),
            _ => None,
        };
        let reads_leader = match &opened {
            Some(map) => wanted.reads_leader() && reads_leaders_memory(map),
            None => leads && wanted.reads_leader(),
        };
        let agreed = shared.and_then(|()| {
            let mapped = if leads {
                made.is_some()
            } else {
                opened.is_some()
            };
            let either = wanted == Wanted::Either;
            let mut failed = [
                i32::from(!mapped),
                i32::from(!reads_leader),
                i32::from(!either),
            ];
            node.allreduce_max(&mut failed)?;
            Ok((failed[0] == 0).then_some((failed[1] == 0, failed[2] == 0)))
        });
        drop(probe);
        // Every rank has mapped the file or given up: it is no longer needed
        // by name, and nothing is left behind should the job die.
        if let Some((_, path)) = &made {
            let _ = std::fs::remove_file(path);
        }
        let Some((from_leader, either)) = agreed? else {
            return Ok(None);
        };
        let map = if leads {
            made.map(|(map, _)| map)
        } else {
            opened
        };
        Ok(map.map(|map| {
            let pid = map.atomic_u64(PROBE).load(Ordering::Relaxed) as i32;
            let copies = if from_leader {
                Copies::FromLeader { pid }
            } else {
                Copies::ThroughSlots
            };
            let mut segment = NodeSegment::new(map, node.size(), leads, copies);
            segment.either = either;
            segment
        }))
    }

    /// From `map`, a fresh mapping of [`Self::BYTES`] shared by a node of
    /// `ranks`, for its leader (`leads`) or another of them.
    pub fn new(map: SharedMapping, ranks: usize, leads: bool, copies: Copies) -> Self {
        assert_eq!(map.len(), Self::BYTES);
        NodeSegment {
            map,
            copies,
            either: false,
            giving: Copies::ThroughSlots,
            leads,
            readers: ranks.saturating_sub(1) as u64,
            next: 0,
            step: 0,
            published: 0,
        }
    }

    pub fn copies(&self) -> Copies {
        self.copies
    }

    /// Whether the node's ranks may copy either way, as each call says.
    pub fn either(&self) -> bool {
        self.either && self.copies != Copies::ThroughSlots
    }

    /// How a step goes: as the node agreed and the call asks where its
    /// leader gives it, through the slots from any other rank.
    fn way(&self, giver: Giver) -> Copies {
        match giver {
            Giver::Leader { from_memory } if !self.either || from_memory => self.copies,
            _ => Copies::ThroughSlots,
        }
    }

    fn seq(&self, slot: usize) -> &AtomicU64 {
        self.map.atomic_u64(HEADER + slot * COUNTERS)
    }

    fn left(&self, slot: usize) -> &AtomicU64 {
        self.map.atomic_u64(HEADER + slot * COUNTERS + LEFT)
    }

    fn data(slot: usize) -> usize {
        HEADER + SLOTS * COUNTERS + slot * SLOT_BYTES
    }

    /// On the rank that gives a step (the leader, or a root that does not
    /// lead): begins a step that gives its node `len` bytes at address `at`
    /// of this process, which must hold them unchanged from their
    /// [`Self::publish`] until [`Self::finish`] returns; `from_memory` as in
    /// [`Giver::Leader`].
    pub fn begin(&mut self, at: *const u8, len: usize, from_memory: bool) {
        self.published = 0;
        self.giving = self.way(match self.leads {
            true => Giver::Leader { from_memory },
            false => Giver::Other,
        });
        if let Copies::FromLeader { .. } = self.giving {
            self.step += 1;
            self.map.atomic_u64(DONE).store(0, Ordering::Relaxed);
            self.map.atomic_u64(READY).store(0, Ordering::Relaxed);
            self.map
                .atomic_u64(STEP + 8)
                .store(at as u64, Ordering::Relaxed);
            self.map
                .atomic_u64(STEP + 16)
                .store(len as u64, Ordering::Relaxed);
            self.map
                .atomic_u64(STEP)
                .store(self.step, Ordering::Release);
        }
    }

    /// On the giver: the step's next bytes, which follow those published
    /// before; through the slots, every chunk but the step's last is a
    /// multiple of [`SLOT_BYTES`], as the ranks read the step slot by slot.
    pub fn publish(&mut self, chunk: &[u8], idle: impl FnMut()) {
        self.published += chunk.len() as u64;
        match self.giving {
            Copies::FromLeader { .. } => {
                self.map
                    .atomic_u64(READY)
                    .store(self.published, Ordering::Release);
            }
            Copies::ThroughSlots => self.write(chunk, idle),
        }
    }

    /// On the giver: ends the step once every rank has its bytes.
    pub fn finish(&mut self, mut idle: impl FnMut()) {
        if let Copies::FromLeader { .. } = self.giving {
            while self.map.atomic_u64(DONE).load(Ordering::Acquire) < self.readers {
                idle();
            }
        }
    }

    /// On every other rank: takes a step's `out.len()` bytes from its
    /// `giver`, as it publishes them, waiting (`idle`) meanwhile.
    pub fn take(&mut self, out: &mut [u8], giver: Giver, idle: impl FnMut()) -> Result<()> {
        match self.way(giver) {
            Copies::FromLeader { pid } => {
                let taken = self.copy_from_leader(pid, out, idle);
                // Counted done even where it failed: the leader must not
                // wait for a rank that gave up.
                self.map.atomic_u64(DONE).fetch_add(1, Ordering::Release);
                taken
            }
            Copies::ThroughSlots => self.read(out, idle),
        }
    }

    fn copy_from_leader(&mut self, pid: i32, out: &mut [u8], mut idle: impl FnMut()) -> Result<()> {
        self.step += 1;
        loop {
            match self.map.atomic_u64(STEP).load(Ordering::Acquire) {
                step if step == self.step => break,
                step if step > self.step => return Err(Error::Protocol),
                _ => idle(),
            }
        }
        let at = self.map.atomic_u64(STEP + 8).load(Ordering::Relaxed);
        let len = self.map.atomic_u64(STEP + 16).load(Ordering::Relaxed);
        if len != out.len() as u64 {
            return Err(Error::Truncated);
        }
        let mut have = 0;
        while have < out.len() {
            let ready = self.map.atomic_u64(READY).load(Ordering::Acquire) as usize;
            if ready <= have {
                idle();
                continue;
            }
            let ready = ready.min(out.len());
            os::read_process_memory(pid, at + have as u64, &mut out[have..ready]).map_err(|e| {
                log::warn!("reading the node leader's memory failed ({e})");
                Error::Unavailable
            })?;
            have = ready;
        }
        Ok(())
    }

    /// On the giver, through the slots: gives `bytes` to the node's other
    /// ranks, slot by slot, waiting (`idle`) only for a slot that some rank
    /// has not yet copied out.
    fn write(&mut self, bytes: &[u8], mut idle: impl FnMut()) {
        for piece in bytes.chunks(SLOT_BYTES) {
            let slot = (self.next % SLOTS as u64) as usize;
            while self.left(slot).load(Ordering::Acquire) != 0 {
                idle();
            }
            self.map.copy_in(Self::data(slot), piece);
            self.left(slot).store(self.readers, Ordering::Relaxed);
            self.next += 1;
            self.seq(slot).store(self.next, Ordering::Release);
        }
    }

    /// On a rank that takes a step through the slots: takes `out.len()`
    /// bytes from its giver, slot by slot as it writes them, waiting (`idle`) for each.
    fn read(&mut self, out: &mut [u8], mut idle: impl FnMut()) -> Result<()> {
        for piece in out.chunks_mut(SLOT_BYTES) {
            let slot = (self.next % SLOTS as u64) as usize;
            let want = self.next + 1;
            loop {
                match self.seq(slot).load(Ordering::Acquire) {
                    seq if seq == want => break,
                    // The leader cannot pass a piece this rank has not read:
                    // the ranks disagree on what the node broadcasts.
                    seq if seq > want => return Err(Error::Protocol),
                    _ => idle(),
                }
            }
            self.map.copy_out(Self::data(slot), piece);
            self.left(slot).fetch_sub(1, Ordering::Release);
            self.next = want;
        }
        Ok(())
    }
}

/// Whether this process can read its node leader's memory: the word the
/// leader named in the segment, compared with the value it wrote there.
fn reads_leaders_memory(map: &SharedMapping) -> bool {
    let pid = map.atomic_u64(PROBE).load(Ordering::Relaxed) as i32;
    let at = map.atomic_u64(PROBE + 8).load(Ordering::Relaxed);
    let want = map.atomic_u64(PROBE + 16).load(Ordering::Relaxed);
    let mut word = [0u8; 8];
    match os::read_process_memory(pid, at, &mut word) {
        Ok(()) => u64::from_le_bytes(word) == want,
        Err(e) => {
            log::info!("cannot read the node leader's memory ({e}): copies go through the segment");
            false
        }
    }
}

/// What a rank does while it waits on its node's segment: turns Open MPI's
/// progress engine, so that its other requests move on, and after a while
/// also yields its core to the rank it waits for.
pub fn waiting() -> impl FnMut() {
    let mut spins = 0u32;
    move || {
        ompi::progress();
        spins = spins.saturating_add(1);
        if spins > SPINS_BEFORE_YIELD {
            std::thread::yield_now();
        }
    }
}

/// A name no other segment has: the process, the communicator and random
/// bits, in `/dev/shm` (memory, not disk).
/// Where the segments' files are made.
const SHM_DIR: &str = "/dev/shm";

/// Whether a segment may be made in `dir`: where its file system would
/// still have half its size free after it. Other components (Open MPI's
/// shared-memory transports and windows) and programs need the same space,
/// often small in containers (64 MiB by Docker's default), and a program
/// may keep many communicators alive: ipmc takes at most half, and a node
/// whose leader makes no segment keeps Open MPI's broadcast.
fn leaves_room(dir: &Path) -> bool {
    match os::space(dir) {
        Ok((free, size)) if half_free_after(free, size, NodeSegment::BYTES as u64) => true,
        Ok((free, size)) => {
            log::info!(
                "no shared segment: {} would be more than half full ({free} of {size} bytes free)",
                dir.display()
            );
            false
        }
        Err(e) => {
            log::info!("no shared segment: {} ({e})", dir.display());
            false
        }
    }
}

/// Whether a file system of `size` bytes with `free` free keeps half its
/// size free once `bytes` more are taken.
fn half_free_after(free: u64, size: u64, bytes: u64) -> bool {
    free.checked_sub(bytes).is_some_and(|left| left >= size / 2)
}

fn fresh_path(node: Comm) -> PathBuf {
    let mut random = [0u8; 8];
    let _ = os::os_random(&mut random);
    PathBuf::from(format!(
        "{SHM_DIR}/ipmc-{}-{}-{:016x}",
        std::process::id(),
        node.cid(),
        u64::from_le_bytes(random)
    ))
}

/// Maps the file the leader named (NUL-padded; empty where it made none).
fn open_named(name: &[u8]) -> Option<SharedMapping> {
    let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    if len == 0 {
        return None;
    }
    let path = PathBuf::from(String::from_utf8_lossy(&name[..len]).into_owned());
    match SharedMapping::open(&path, NodeSegment::BYTES) {
        Ok(map) => Some(map),
        Err(e) => {
            log::info!("cannot map the node's segment {} ({e})", path.display());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The leader gives, asking for copies from its memory (which only a
    /// node that agreed on them makes).
    const LEADER: Giver = Giver::Leader { from_memory: true };

    /// One segment's file, mapped once per rank of a node of `ranks`, its
    /// copies through the slots.
    fn node(ranks: usize) -> Vec<NodeSegment> {
        node_copying(ranks, Copies::ThroughSlots)
    }

    fn node_copying(ranks: usize, copies: Copies) -> Vec<NodeSegment> {
        let path = std::env::temp_dir().join(format!(
            "ipmc-test-segment-{}-{ranks}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_file(&path);
        let first = SharedMapping::create(&path, NodeSegment::BYTES).unwrap();
        let mut maps = vec![NodeSegment::new(first, ranks, true, copies)];
        for _ in 1..ranks {
            let map = SharedMapping::open(&path, NodeSegment::BYTES).unwrap();
            maps.push(NodeSegment::new(map, ranks, false, copies));
        }
        std::fs::remove_file(&path).unwrap();
        maps
    }

    /// A wait that yields, and fails the test after 10 s: a thread whose
    /// peer failed must not wait for it for ever.
    fn patient() -> impl FnMut() {
        let start = std::time::Instant::now();
        move || {
            assert!(start.elapsed().as_secs() < 10, "waited 10 s for a peer");
            std::thread::yield_now();
        }
    }

    fn message(len: usize, salt: u8) -> Vec<u8> {
        (0..len).map(|i| (i * 31 + salt as usize) as u8).collect()
    }

    /// A segment is made only where its file system keeps half its size
    /// free after it; the machine's own `/dev/shm` is read as it is.
    #[test]
    fn segments_take_at_most_half_of_their_file_system() {
        let mib = 1 << 20;
        assert!(half_free_after(64 * mib, 64 * mib, mib));
        assert!(half_free_after(33 * mib, 64 * mib, mib));
        assert!(!half_free_after(33 * mib - 1, 64 * mib, mib));
        assert!(!half_free_after(mib / 2, 0, mib));
        let (free, size) = os::space(Path::new(SHM_DIR)).unwrap();
        assert!(free <= size && size > 0, "{free} of {size}");
        assert!(os::space(Path::new("/no/such/dir")).is_err());
    }

    #[test]
    fn every_rank_reads_every_message_whole_while_the_ring_turns() {
        let mut ranks = node(4);
        let leader = ranks.remove(0);
        // Longer than the ring, shorter than a slot, empty, and many.
        let lens = [5 * SLOTS * SLOT_BYTES + 7, 1, 0, SLOT_BYTES, 3000];
        let rounds = 6;
        // The scope joins the readers and passes their panics on.
        std::thread::scope(|s| {
            for (r, mut seg) in ranks.into_iter().enumerate() {
                s.spawn(move || {
                    for round in 0..rounds {
                        for &len in &lens {
                            let mut out = vec![0u8; len];
                            seg.read(&mut out, patient()).unwrap();
                            assert!(out == message(len, round as u8), "rank {r}, {len} bytes");
                        }
                    }
                });
            }
            let mut leader = leader;
            for round in 0..rounds {
                for &len in &lens {
                    leader.write(&message(len, round as u8), patient());
                }
            }
        });
    }

    /// Copies from the leader's memory (this process's own, read as
    /// another's would be): every rank has every step's bytes, taken as the
    /// leader publishes them, and the leader's step ends only once every
    /// rank has them.
    #[test]
    fn every_rank_copies_every_step_from_the_leaders_memory() {
        let pid = std::process::id() as i32;
        let mut ranks = node_copying(4, Copies::FromLeader { pid });
        let mut leader = ranks.remove(0);
        let lens = [3 * SLOT_BYTES + 5, 1, 0, 100_000];
        let rounds = 5;
        std::thread::scope(|s| {
            for (r, mut seg) in ranks.into_iter().enumerate() {
                s.spawn(move || {
                    for round in 0..rounds {
                        for &len in &lens {
                            let mut out = vec![0u8; len];
                            seg.take(&mut out, LEADER, patient()).unwrap();
                            assert!(out == message(len, round as u8), "rank {r}, {len} bytes");
                        }
                    }
                });
            }
            for round in 0..rounds {
                for &len in &lens {
                    let mut msg = vec![0u8; len];
                    leader.begin(msg.as_ptr(), len, true);
                    // Published in three parts, each filled in just before.
                    let full = message(len, round as u8);
                    let cuts = [0, len / 3, len / 2, len];
                    for w in cuts.windows(2) {
                        msg[w[0]..w[1]].copy_from_slice(&full[w[0]..w[1]]);
                        leader.publish(&msg[w[0]..w[1]], || {});
                    }
                    leader.finish(patient());
                    // Every rank is done: the buffer may change.
                    msg.fill(0);
                }
            }
        });
    }

    /// A node that may copy either way copies each step as its call says,
    /// the ranks and the leader alike: from the leader's memory, then
    /// through the slots, in turn.
    #[test]
    fn a_node_that_may_copy_either_way_copies_each_step_as_told() {
        let pid = std::process::id() as i32;
        let mut ranks = node_copying(3, Copies::FromLeader { pid });
        for seg in &mut ranks {
            seg.either = true;
        }
        assert!(ranks.iter().all(NodeSegment::either));
        let mut leader = ranks.remove(0);
        let len = 2 * SLOT_BYTES + 9;
        let rounds = 6;
        let pulled = |round: usize| round % 2 == 0;
        std::thread::scope(|s| {
            for (r, mut seg) in ranks.into_iter().enumerate() {
                s.spawn(move || {
                    for round in 0..rounds {
                        let giver = Giver::Leader {
                            from_memory: pulled(round),
                        };
                        let mut out = vec![0u8; len];
                        seg.take(&mut out, giver, patient()).unwrap();
                        assert!(out == message(len, round as u8), "rank {r}, round {round}");
                    }
                });
            }
            for round in 0..rounds {
                let msg = message(len, round as u8);
                leader.begin(msg.as_ptr(), len, pulled(round));
                for chunk in msg.chunks(SLOT_BYTES) {
                    leader.publish(chunk, patient());
                }
                leader.finish(patient());
            }
        });
        // Three pieces through the slots in each of the 3 rounds that went
        // that way; 3 steps from the leader's memory.
        assert_eq!((leader.next, leader.step), (9, 3));
    }

    #[test]
    fn a_rank_whose_length_differs_is_told_and_frees_the_leader() {
        let pid = std::process::id() as i32;
        let mut ranks = node_copying(2, Copies::FromLeader { pid });
        let (mut leader, mut reader) = (ranks.remove(0), ranks.remove(0));
        let msg = [7u8; 10];
        leader.begin(msg.as_ptr(), msg.len(), true);
        leader.publish(&msg, || {});
        let mut out = [0u8; 9];
        assert_eq!(
            reader.take(&mut out, LEADER, || panic!("published")),
            Err(Error::Truncated)
        );
        leader.finish(|| panic!("the reader counted itself done"));
    }

    /// A node that copies from its leader's memory, and a root that does
    /// not lead it: the root's steps go through the slots, to the leader
    /// too, between the leader's own steps.
    #[test]
    fn a_root_that_does_not_lead_gives_through_the_slots() {
        let pid = std::process::id() as i32;
        let mut ranks = node_copying(3, Copies::FromLeader { pid });
        let mut root = ranks.remove(2);
        let lens = [2 * SLOT_BYTES + 9, 0, 5];
        std::thread::scope(|s| {
            for (r, mut seg) in ranks.into_iter().enumerate() {
                s.spawn(move || {
                    for (i, &len) in lens.iter().enumerate() {
                        let mut out = vec![0u8; len];
                        if r == 0 {
                            // The leader gives a step of its own between.
                            let msg = message(len, 40);
                            seg.begin(msg.as_ptr(), len, true);
                            seg.publish(&msg, || {});
                            seg.finish(patient());
                        } else {
                            seg.take(&mut out, LEADER, patient()).unwrap();
                            assert!(out == message(len, 40), "leader's step {i}");
                        }
                        seg.take(&mut out, Giver::Other, patient()).unwrap();
                        assert!(out == message(len, i as u8), "rank {r}, step {i}");
                    }
                });
            }
            for (i, &len) in lens.iter().enumerate() {
                let mut msg = vec![0u8; len];
                root.take(&mut msg, LEADER, patient()).unwrap();
                let msg = message(len, i as u8);
                root.begin(msg.as_ptr(), len, true);
                root.publish(&msg, patient());
                root.finish(|| panic!("no wait through the slots"));
            }
        });
    }

    #[test]
    fn a_slot_is_not_reused_before_every_rank_took_it() {
        let mut ranks = node(3);
        let mut leader = ranks.remove(0);
        // The ring full: a fifth piece must wait for the slowest rank.
        leader.write(&message(SLOTS * SLOT_BYTES, 1), || {
            panic!("room for a ring")
        });
        let mut out = vec![0u8; SLOT_BYTES];
        ranks[0].read(&mut out, || panic!("written")).unwrap();
        let mut waited = 0;
        let mut slow = ranks.remove(1);
        leader.write(&[9; 10], || {
            waited += 1;
            if waited == 3 {
                let mut first = vec![0u8; SLOT_BYTES];
                slow.read(&mut first, || panic!("written")).unwrap();
            }
        });
        assert_eq!(waited, 3);
    }

    #[test]
    fn a_rank_that_skipped_a_piece_is_told_not_left_waiting() {
        let mut ranks = node(2);
        let mut leader = ranks.remove(0);
        let mut reader = ranks.remove(0);
        let mut out = [0u8; 10];
        for _ in 0..=SLOTS {
            leader.write(&[2; 10], || {});
            reader.read(&mut out, || {}).unwrap();
        }
        // Back at the first piece, the reader finds the ring's fifth in its
        // slot.
        reader.next = 0;
        assert_eq!(
            reader.read(&mut out, || panic!("no wait")),
            Err(Error::Protocol)
        );
    }

    /// What the segment costs between two ranks with a core each (two
    /// threads here; processes share the mapping alike), for the
    /// simulator's model (`docs/simulator.md`, "Ranks per node"): 8 bytes
    /// from a leader's write to a rank's read (half a round trip over two
    /// segments), and the rate of 16 MiB from one to the other, through the
    /// slots and from the leader's memory. `cargo test --release --lib
    /// segment_throughput -- --nocapture` prints it; no timed assertion.
    #[test]
    fn segment_throughput() {
        let (mut there, mut back) = (node(2), node(2));
        let (mut a_lead, mut b_read) = (there.remove(0), there.remove(0));
        let (mut b_lead, mut a_read) = (back.remove(0), back.remove(0));
        let rounds = 20_000;
        let big = 16 << 20;
        let spin = std::hint::spin_loop;
        let (small, bulk) = std::thread::scope(|s| {
            s.spawn(move || {
                let mut out = vec![0u8; big];
                for _ in 0..rounds {
                    b_read.read(&mut out[..8], spin).unwrap();
                    b_lead.write(&out[..8], spin);
                }
                for _ in 0..5 {
                    b_read.read(&mut out, spin).unwrap();
                }
            });
            let msg = message(big, 3);
            let mut echo = [0u8; 8];
            let start = std::time::Instant::now();
            for _ in 0..rounds {
                a_lead.write(&msg[..8], spin);
                a_read.read(&mut echo, spin).unwrap();
            }
            let small = start.elapsed() / (2 * rounds);
            // A round first, in which the reader's buffer is mapped in.
            a_lead.write(&msg, spin);
            let start = std::time::Instant::now();
            for _ in 0..4 {
                a_lead.write(&msg, spin);
            }
            // The last slots are copied out once the reader's thread ends.
            (small, start)
        });
        let bulk = bulk.elapsed() / 4;
        let pid = std::process::id() as i32;
        let mut ranks = node_copying(2, Copies::FromLeader { pid });
        let (mut leader, mut reader) = (ranks.remove(0), ranks.remove(0));
        let pulled = std::thread::scope(|s| {
            s.spawn(move || {
                let mut out = vec![0u8; big];
                for _ in 0..5 {
                    reader.take(&mut out, LEADER, spin).unwrap();
                }
            });
            let msg = message(big, 3);
            let mut step = || {
                leader.begin(msg.as_ptr(), big, true);
                leader.publish(&msg, spin);
                leader.finish(spin);
            };
            step();
            let start = std::time::Instant::now();
            (0..4).for_each(|_| step());
            start.elapsed() / 4
        });
        let gbs = |t: std::time::Duration| big as f64 / t.as_secs_f64() / 1e9;
        println!(
            "8 bytes: {:.2} us one way; 16 MiB: through the slots {:.2} ms, {:.2} GB/s; \
             from the leader's memory {:.2} ms, {:.2} GB/s",
            small.as_secs_f64() * 1e6,
            bulk.as_secs_f64() * 1e3,
            gbs(bulk),
            pulled.as_secs_f64() * 1e3,
            gbs(pulled)
        );
    }
}
