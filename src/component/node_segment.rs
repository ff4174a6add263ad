//! A node's shared segment (seed 001's shared-memory step): the leader of a
//! node writes the message once into memory its node's ranks share, and
//! every other rank copies it out from there at once, where a broadcast
//! on the node's communicator passes it down a tree, rank to rank.
//!
//! The segment is a ring of [`SLOTS`] slots of [`SLOT_BYTES`]; a message
//! crosses it slot after slot, so that the ranks copy out the first slots
//! while the leader still receives the later ones. Each slot has two
//! counters on cache lines of their own: `seq`, the number of the piece it
//! holds (the leader stores it after the bytes, with release ordering), and
//! `left`, how many ranks have yet to copy it out (each subtracts one once
//! it has); the leader reuses a slot only when `left` is 0. Pieces are
//! numbered alike on every rank of the node, since each takes part in the
//! same broadcasts with the same lengths.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::base::error::{Error, Result};
use crate::platform::ompi::{self, Comm};
use crate::platform::os::{self, SharedMapping};

/// Slots of the ring: enough that the leader rarely waits for the slowest
/// rank to free one while the next piece arrives.
pub const SLOTS: usize = 4;
/// Bytes of a slot: the pipelined levels' segment,
/// so that each segment the leaders broadcast fills one slot.
pub const SLOT_BYTES: usize = super::levels::LEVEL_SEGMENT;
/// Bytes of a slot's counters: `seq` and `left`, each on a cache line.
const COUNTERS: usize = 128;
const LEFT: usize = 64;
/// Bytes of the file's name sent from the leader (NUL-padded).
const NAME_BYTES: usize = 128;

/// Spins before a waiting rank also yields its core.
const SPINS_BEFORE_YIELD: u32 = 64;

/// One rank's view of its node's segment.
pub struct NodeSegment {
    map: SharedMapping,
    /// On the leader, the node's other ranks (who copy out each slot); 0
    /// elsewhere.
    readers: u64,
    /// The number of the next piece this rank writes or reads.
    next: u64,
}

impl NodeSegment {
    /// Bytes of the file: the counters, then the slots.
    pub const BYTES: usize = SLOTS * (COUNTERS + SLOT_BYTES);

    /// Makes the segment of `node` (a node's communicator, its leader rank
    /// 0): collective, every rank of `node` calls it at the same point,
    /// `wanted` or not. `None` where it has a single rank, or where some
    /// rank did not want it or could not map the file (the node then keeps
    /// Open MPI's broadcast); every rank of the node returns alike.
    pub fn attach(node: Comm, wanted: bool) -> Result<Option<Self>> {
        if node.size() < 2 {
            return Ok(None);
        }
        let leads = node.rank() == 0;
        let mut name = [0u8; NAME_BYTES];
        let mut made = None;
        if leads && wanted {
            let path = fresh_path(node);
            match SharedMapping::create(&path, Self::BYTES) {
                Ok(map) => {
                    let text = path.as_os_str().as_encoded_bytes();
                    name[..text.len()].copy_from_slice(text);
                    made = Some((map, path));
                }
                Err(e) => log::info!("no shared segment at {} ({e})", path.display()),
            }
        }
        let shared = node.bcast_bytes(&mut name, 0);
        let opened = match (&shared, leads) {
            (Ok(()), false) if wanted => open_named(&name),
            _ => None,
        };
        let agreed = shared.and_then(|()| {
            let mapped = if leads {
                made.is_some()
            } else {
                opened.is_some()
            };
            let mut failed = [i32::from(!mapped)];
            node.allreduce_max(&mut failed)?;
            Ok(failed[0] == 0)
        });
        // Every rank has mapped the file or given up: it is no longer needed
        // by name, and nothing is left behind should the job die.
        if let Some((_, path)) = &made {
            let _ = std::fs::remove_file(path);
        }
        if !agreed? {
            return Ok(None);
        }
        Ok(if leads {
            made.map(|(map, _)| NodeSegment::new(map, node.size() - 1))
        } else {
            opened.map(|map| NodeSegment::new(map, 0))
        })
    }

    /// From `map`, a fresh mapping of [`Self::BYTES`] shared by the node,
    /// for the leader of `readers` other ranks, or for one of them (0).
    pub fn new(map: SharedMapping, readers: usize) -> Self {
        assert_eq!(map.len(), Self::BYTES);
        NodeSegment {
            map,
            readers: readers as u64,
            next: 0,
        }
    }

    fn seq(&self, slot: usize) -> &AtomicU64 {
        self.map.atomic_u64(slot * COUNTERS)
    }

    fn left(&self, slot: usize) -> &AtomicU64 {
        self.map.atomic_u64(slot * COUNTERS + LEFT)
    }

    fn data(slot: usize) -> usize {
        SLOTS * COUNTERS + slot * SLOT_BYTES
    }

    /// On the leader: gives `bytes` to the node's other ranks, slot by
    /// slot, waiting (`idle`) only for a slot that some rank has not yet
    /// copied out.
    pub fn write(&mut self, bytes: &[u8], mut idle: impl FnMut()) {
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

    /// On another rank: takes `out.len()` bytes from the leader, slot by
    /// slot as it writes them, waiting (`idle`) for each.
    pub fn read(&mut self, out: &mut [u8], mut idle: impl FnMut()) -> Result<()> {
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

    /// Whether this rank writes the segment (its node's leader).
    pub fn writes(&self) -> bool {
        self.readers > 0
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
fn fresh_path(node: Comm) -> PathBuf {
    let mut random = [0u8; 8];
    let _ = os::os_random(&mut random);
    PathBuf::from(format!(
        "/dev/shm/ipmc-{}-{}-{:016x}",
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

    /// One segment's file, mapped once per rank of a node of `ranks`.
    fn node(ranks: usize) -> Vec<NodeSegment> {
        let path = std::env::temp_dir().join(format!(
            "ipmc-test-segment-{}-{ranks}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_file(&path);
        let first = SharedMapping::create(&path, NodeSegment::BYTES).unwrap();
        let mut maps = vec![NodeSegment::new(first, ranks - 1)];
        for _ in 1..ranks {
            let map = SharedMapping::open(&path, NodeSegment::BYTES).unwrap();
            maps.push(NodeSegment::new(map, 0));
        }
        std::fs::remove_file(&path).unwrap();
        maps
    }

    fn message(len: usize, salt: u8) -> Vec<u8> {
        (0..len).map(|i| (i * 31 + salt as usize) as u8).collect()
    }

    #[test]
    fn every_rank_reads_every_message_whole_while_the_ring_turns() {
        let mut ranks = node(4);
        let leader = ranks.remove(0);
        assert!(leader.writes() && !ranks[0].writes());
        // Longer than the ring, shorter than a slot, empty, and many.
        let lens = [5 * SLOTS * SLOT_BYTES + 7, 1, 0, SLOT_BYTES, 3000];
        let rounds = 6;
        std::thread::scope(|s| {
            let readers: Vec<_> = ranks
                .into_iter()
                .enumerate()
                .map(|(r, mut seg)| {
                    s.spawn(move || {
                        for round in 0..rounds {
                            for &len in &lens {
                                let mut out = vec![0u8; len];
                                seg.read(&mut out, std::thread::yield_now).unwrap();
                                assert!(out == message(len, round as u8), "rank {r}, {len} bytes");
                            }
                        }
                    })
                })
                .collect();
            let mut leader = leader;
            for round in 0..rounds {
                for &len in &lens {
                    leader.write(&message(len, round as u8), std::thread::yield_now);
                }
            }
            for r in readers {
                r.join().unwrap();
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
    /// segments), and the rate of 16 MiB from one to the other. `cargo test
    /// --release --lib segment_throughput -- --nocapture` prints it; no timed
    /// assertion.
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
        println!(
            "8 bytes: {:.2} us one way; 16 MiB: {:.2} ms, {:.2} GB/s",
            small.as_secs_f64() * 1e6,
            bulk.as_secs_f64() * 1e3,
            big as f64 / bulk.as_secs_f64() / 1e9
        );
    }
}
