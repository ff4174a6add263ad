//! Two levels for a communicator whose nodes hold several ranks (after
//! Mamidala et al., SMP-aware broadcast over InfiniBand's multicast): the
//! message crosses the network once per node, among one leader per node,
//! and each leader hands it to the ranks of its node.
//!
//! Both levels are communicators of their own, split from this one at its
//! first broadcast (as Open MPI's `han` does), so that each gets the
//! broadcast that serves it best: the leaders' one ipmc's own, one rank per
//! node, multicast among them where its measured choice finds that fastest;
//! a node's one Open MPI's shared-memory broadcast (ipmc leaves node-local
//! communicators alone) or ipmc's own segment of shared memory
//! ([`NodeSegment`]), through which the leader, or a root that does not
//! lead, gives the message to the node.

use std::collections::VecDeque;
use std::ffi::c_int;
use std::ops::Range;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::base::error::{Error, Result};
use crate::base::io::Wait;
use crate::component::node_segment::{self, Copies, Giver, NodeSegment, Wanted};
use crate::component::parked;
use crate::group::entropy;
use crate::platform::ompi::{AllgatherCall, Comm, Fanout, PartBytes, PartIbcast};

/// Bytes of a segment of a pipelined broadcast over the levels: 4 MiB
/// over 4 emulated hosts of 4 ranks at 10 Gbit/s took 24.3 ms in segments
/// of 256 KiB, 43.0 in segments of 64 KiB and 26.1 whole; 1 MiB 6.8, 11.1
/// and 5.6 ms (han: 26.6 and 5.4; multicast among the leaders forced, in a
/// build that pipelined every broadcast at a segment size set by hand).
pub const LEVEL_SEGMENT: usize = 256 << 10;

/// Where each rank of a communicator sits: its node (numbered in the order
/// of each node's first rank) and which rank leads that node (at first its
/// lowest; [`Layout::led_by`] moves a node's lead). Every rank computes the
/// same from the same host names and the same moves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    node: Vec<u32>,
    /// Each rank's rank within its node's communicator: 0 for its leader,
    /// then the others in rank order.
    local: Vec<u32>,
    /// Each node's leader.
    leader: Vec<u32>,
}

impl Layout {
    /// From the host name of every rank, in rank order.
    pub fn from_hosts<S: AsRef<str>>(hosts: impl IntoIterator<Item = S>) -> Self {
        let mut seen: Vec<String> = Vec::new();
        let mut node = Vec::new();
        for host in hosts {
            let host = host.as_ref();
            let i = match seen.iter().position(|h| h == host) {
                Some(i) => i,
                None => {
                    seen.push(host.to_owned());
                    seen.len() - 1
                }
            };
            node.push(i as u32);
        }
        let leader = (0..seen.len())
            .map(|n| node.iter().position(|&m| m as usize == n).unwrap() as u32)
            .collect();
        Self::with(node, leader)
    }

    fn with(node: Vec<u32>, leader: Vec<u32>) -> Self {
        let mut next = vec![1; leader.len()];
        let local = node
            .iter()
            .enumerate()
            .map(|(r, &n)| {
                if leader[n as usize] as usize == r {
                    0
                } else {
                    next[n as usize] += 1;
                    next[n as usize] - 1
                }
            })
            .collect();
        Layout {
            node,
            local,
            leader,
        }
    }

    /// The same nodes, each led by `leaders[node]`; `None` unless each is
    /// a rank of its node.
    pub fn led_by(&self, leaders: &[u32]) -> Option<Self> {
        let fits = leaders.len() == self.nodes()
            && leaders
                .iter()
                .enumerate()
                .all(|(n, &l)| self.node.get(l as usize).is_some_and(|&m| m as usize == n));
        fits.then(|| Self::with(self.node.clone(), leaders.to_vec()))
    }

    /// Each node's leader, by node.
    pub fn leaders(&self) -> &[u32] {
        &self.leader
    }

    /// The ranks of `rank`'s node, in the order of the node's communicator
    /// (its leader first).
    pub fn node_members(&self, rank: usize) -> Vec<usize> {
        let n = self.node[rank];
        let mut members: Vec<usize> = (0..self.node.len())
            .filter(|&r| self.node[r] == n)
            .collect();
        members.sort_by_key(|&r| self.local[r]);
        members
    }

    pub fn nodes(&self) -> usize {
        self.leader.len()
    }

    /// Whether some node holds several ranks and there are several nodes:
    /// then two levels cross the network less than one.
    pub fn has_two_levels(&self) -> bool {
        self.nodes() > 1 && self.local.iter().any(|&l| l > 0)
    }

    pub fn is_leader(&self, rank: usize) -> bool {
        self.local[rank] == 0
    }

    /// `rank`'s node, which is its leader's rank in the leaders'
    /// communicator.
    pub fn node_of(&self, rank: usize) -> usize {
        self.node[rank] as usize
    }

    /// Where an allgather over the levels keeps each rank's block (of
    /// `blocks[rank]` bytes) in the message the levels move: node after
    /// node, each node's blocks in rank order, so that each node's blocks
    /// are one run of bytes. Returns each rank's offset and each node's run.
    pub fn gathered(&self, blocks: &[usize]) -> (Vec<usize>, Vec<Range<usize>>) {
        let mut at = vec![0; blocks.len()];
        let mut runs = Vec::with_capacity(self.nodes());
        let mut end = 0;
        for n in 0..self.nodes() as u32 {
            let start = end;
            for r in (0..blocks.len()).filter(|&r| self.node[r] == n) {
                at[r] = end;
                end += blocks[r];
            }
            runs.push(start..end);
        }
        (at, runs)
    }
}

/// Handovers a leader keeps going before it waits for the oldest.
const MAX_HANDOVERS: usize = 16;

/// Broadcasts on the communicator before the first look at its leaders'
/// lateness; then a look whenever their count doubled, and at least every
/// [`LOOK_AT_MOST_EVERY`]: a program that broadcasts often pays for few.
const FIRST_LOOK_AFTER: u64 = 64;
const LOOK_AT_MOST_EVERY: u64 = 1024;

/// When this rank entered a communicator's broadcast: the wall clock then
/// (which every rank of a node reads alike) and how long it had been
/// outside broadcasts, from its return from the one before.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub at: SystemTime,
    pub outside: Duration,
}

/// This rank's entries since the last look, summed.
#[derive(Clone, Debug, Default)]
struct Arrivals {
    /// The first entry's wall-clock time and the sum of each entry's
    /// distance from it, in ns.
    first: i64,
    at_sum: i64,
    /// The sum of the times outside, in ns.
    outside_sum: i64,
    calls: i64,
}

impl Arrivals {
    fn add(&mut self, e: Entry) {
        let ns = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        let at = ns(e.at.duration_since(UNIX_EPOCH).unwrap_or_default());
        if self.calls == 0 {
            self.first = at;
        }
        self.at_sum = self.at_sum.saturating_add(at.saturating_sub(self.first));
        self.outside_sum = self.outside_sum.saturating_add(ns(e.outside));
        self.calls += 1;
    }

    fn mean(&self) -> Mean {
        let n = self.calls.max(1);
        Mean {
            at: self.first + self.at_sum / n,
            outside: self.outside_sum / n,
        }
    }
}

/// A rank's mean entry since the last look (ns): its wall-clock time and
/// its time outside broadcasts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Mean {
    at: i64,
    outside: i64,
}

impl Mean {
    const BYTES: usize = 16;

    fn to_bytes(self) -> [u8; Self::BYTES] {
        let mut b = [0; Self::BYTES];
        b[..8].copy_from_slice(&self.at.to_le_bytes());
        b[8..].copy_from_slice(&self.outside.to_le_bytes());
        b
    }

    fn from_bytes(b: &[u8]) -> Self {
        let int = |b: &[u8]| i64::from_le_bytes(b.try_into().expect("8 bytes"));
        Mean {
            at: int(&b[..8]),
            outside: int(&b[8..Self::BYTES]),
        }
    }
}

/// Each rank's own lateness (ns) among its node's `means`: how much later
/// it entered than the node's earliest, and how much longer it stayed
/// outside than the node's briefest, whichever is less. A rank late by its
/// own work is late by both. Entry alone would blame a rank that left the
/// broadcast before late because it waited for a late rank elsewhere (in a
/// tree of Open MPI's); time outside alone a rank that left it early (a
/// leader returns from its node's fan-out before the ranks it fed, and then
/// waits longer in whatever synchronizes them next).
fn own_lateness(means: &[Mean]) -> Vec<i64> {
    let earliest = means.iter().map(|m| m.at).min().unwrap_or(0);
    let briefest = means.iter().map(|m| m.outside).min().unwrap_or(0);
    means
        .iter()
        .map(|m| (m.at - earliest).min(m.outside - briefest))
        .collect()
}

/// Mamidala et al.'s dynamic choice of the receiving process, per
/// communicator: a node whose leader enters broadcasts late holds its other
/// ranks back by that much, so every so many broadcasts the ranks of each
/// node compare their entries ([`own_lateness`]), and where the leader was
/// later than another rank by more than `coll_ipmc_leader_lateness` at two
/// looks in a row, the least late rank leads the node from then on (the
/// levels are split again).
#[derive(Clone, Debug)]
pub struct Lookout {
    arrivals: Arrivals,
    calls: u64,
    next_look: u64,
    /// This rank's node's leader was late at the last look.
    late_before: bool,
    /// Which nodes' leaders hand the message over without waiting for
    /// their node's ranks, as every rank learnt at the last look (where a
    /// rank other than the leader entered late).
    handing: Vec<bool>,
}

/// What a look at the leaders' lateness found, alike on every rank.
#[derive(Debug)]
pub enum Seen {
    Same,
    /// Some nodes began or stopped handing the message over: which do now.
    HandoversChanged(Vec<bool>),
    /// Some node's lead moves: the layout from now on.
    Moved(Layout),
}

impl Default for Lookout {
    fn default() -> Self {
        Lookout {
            arrivals: Arrivals::default(),
            calls: 0,
            next_look: FIRST_LOOK_AFTER,
            late_before: false,
            handing: Vec::new(),
        }
    }
}

impl Lookout {
    /// Counts a broadcast, and this rank's entry into it if given; whether
    /// a look is due (at the same call on every rank).
    fn arrived(&mut self, entry: Option<Entry>) -> bool {
        if let Some(entry) = entry {
            self.arrivals.add(entry);
        }
        self.calls += 1;
        self.calls == self.next_look
    }

    /// The leader this rank's node proposes from its ranks' mean entries
    /// (`means`, in the order of the node's communicator, its leader first)
    /// and whether that leader is to hand over; forgets the entries.
    fn propose(&mut self, members: &[usize], means: &[Mean], lateness: Duration) -> (usize, bool) {
        self.arrivals = Arrivals::default();
        self.next_look = self.calls + self.calls.min(LOOK_AT_MOST_EVERY);
        let late_by = own_lateness(means);
        let limit = i64::try_from(lateness.as_nanos()).unwrap_or(i64::MAX);
        let least = (0..late_by.len()).min_by_key(|&i| late_by[i]).unwrap_or(0);
        let late = late_by[0] - late_by[least] > limit;
        let moves = late && self.late_before;
        self.late_before = late && !moves;
        let leader = if moves { least } else { 0 };
        let latest = late_by.iter().copied().max().unwrap_or(0);
        let hand_over = latest - late_by[leader] > limit;
        (members[leader], hand_over)
    }
}

/// The name of `comm`'s node level (statistics show it).
fn node_name(comm: &str) -> String {
    format!("ipmc node of {comm}")
}

/// The name of `comm`'s leaders' level.
fn leaders_name(comm: &str) -> String {
    format!("ipmc leaders of {comm}")
}

/// A communicator's two levels, for one rank: its node's communicator and,
/// on a leader, the leaders'.
pub struct Levels {
    layout: Layout,
    rank: usize,
    node: Comm,
    leaders: Option<Comm>,
    pub lookout: Lookout,
    /// A leader's handovers to its node that its node's ranks have not all
    /// taken yet, oldest first.
    handovers: VecDeque<Fanout>,
    /// The node's shared segment, where the node has one.
    segment: Option<NodeSegment>,
    /// Bytes this rank wrote to or read from the segment since
    /// [`Levels::take_segment_bytes`].
    segment_bytes: u64,
    /// Some node's ranks may copy either way ([`NodeSegment::either`]),
    /// as every rank of the communicator learnt when it split.
    pub either_way: bool,
    /// These levels' identity, the same on every rank: a later
    /// communicator of the same processes takes them over only where every
    /// rank offers the same ([`crate::component::parked`]).
    pub id: u64,
}

impl Levels {
    /// Splits `comm` into its levels: collective, every rank of `comm` calls
    /// it in the same broadcast. Each node of several ranks also makes its
    /// shared segment, as its ranks want (`segment`) and can.
    pub fn split(comm: Comm, layout: Layout, rank: usize, segment: Wanted) -> Result<Self> {
        let name = comm.name();
        // Keyed so that each node's leader is rank 0 of its node's
        // communicator, and node n's leader rank n of the leaders'. A node's
        // part is Open MPI's to serve (its shared-memory broadcast), even
        // where an algorithm of ipmc's is forced: that runs among the leaders.
        let node = comm
            .split(
                Some(layout.node[rank]),
                layout.local[rank] as usize,
                true,
                &node_name(&name),
            )?
            .ok_or(Error::Unavailable)?;
        let leaders = comm.split(
            layout.is_leader(rank).then_some(0),
            layout.node_of(rank),
            false,
            &leaders_name(&name),
        );
        let leaders = match leaders {
            Ok(l) => l,
            Err(e) => {
                node.free();
                return Err(e);
            }
        };
        let free = |e| {
            if let Some(l) = leaders {
                l.free();
            }
            node.free();
            Err(e)
        };
        if layout.is_leader(rank) && leaders.is_none() {
            return free(Error::Unavailable);
        }
        let segment = match NodeSegment::attach(node, segment) {
            Ok(s) => s,
            Err(e) => return free(e),
        };
        let how = match &segment {
            Some(s) if s.either() => {
                "from the leader's memory or through its shared segment, as measured"
            }
            Some(s) if s.copies() != Copies::ThroughSlots => "from the leader's memory",
            Some(_) => "through its shared segment",
            None => "by Open MPI's broadcast",
        };
        log::info!("rank {rank} of {name}: its node's ranks take messages {how}");
        // Whether the measured choice tries both ways (the same on every
        // rank, as its candidates must be), and the levels' identity.
        let [high, low] = parked::draw_words(entropy::collect());
        let either = i32::from(segment.as_ref().is_some_and(NodeSegment::either));
        let mut agreed = [either, high, low];
        if let Err(e) = comm.allreduce_max(&mut agreed) {
            return free(e);
        }
        Ok(Levels {
            either_way: agreed[0] == 1,
            id: parked::drawn_id([agreed[1], agreed[2]]),
            layout,
            rank,
            node,
            leaders,
            lookout: Lookout::default(),
            handovers: VecDeque::new(),
            segment,
            segment_bytes: 0,
        })
    }

    /// Bytes this rank wrote to or read from its node's segment since the
    /// last call.
    pub fn take_segment_bytes(&mut self) -> u64 {
        std::mem::take(&mut self.segment_bytes)
    }

    /// The node's step through the segment of `buf`, which its rank
    /// `giver` (in the node's communicator) has, the node's ranks copying
    /// from the leader's memory where it gives and the call asks for it
    /// (`from_leader`: [`Giver::Leader`]); `false` (nothing done) where the
    /// node has none.
    fn through_segment(&mut self, buf: &mut [u8], giver: usize, from_leader: bool) -> Result<bool> {
        self.segment_step(buf, giver, from_leader, usize::MAX, |_| Ok(()))
    }

    /// The node's step through the segment of `buf` from its rank `giver`
    /// (`from_leader` as in [`Levels::through_segment`]), in chunks of
    /// `chunk` bytes (a multiple of the segment's slots), each of which the
    /// giver first gets by `before` and then gives on, while the others copy
    /// the chunks before; `false` (nothing done) where the node has no
    /// segment.
    fn segment_step(
        &mut self,
        buf: &mut [u8],
        giver: usize,
        from_leader: bool,
        chunk: usize,
        mut before: impl FnMut(&mut [u8]) -> Result<()>,
    ) -> Result<bool> {
        let Some(segment) = self.segment.as_mut() else {
            return Ok(false);
        };
        if self.layout.local[self.rank] as usize == giver {
            segment.begin(buf.as_ptr(), buf.len(), from_leader);
            let mut result = Ok(());
            for c in buf.chunks_mut(chunk.max(1)) {
                result = before(c);
                if result.is_err() {
                    break;
                }
                segment.publish(c, node_segment::waiting());
            }
            // Where the leader failed to get the message, its ranks wait
            // for bytes that never come, and the job ends on the leader's
            // error: the leader must not wait for them.
            result?;
            segment.finish(node_segment::waiting());
        } else {
            let giver = match giver {
                0 => Giver::Leader {
                    from_memory: from_leader,
                },
                _ => Giver::Other,
            };
            segment.take(buf, giver, node_segment::waiting())?;
        }
        self.segment_bytes += buf.len() as u64;
        Ok(true)
    }

    /// Counts this rank's entry into a broadcast from `root` (if known);
    /// whether a look at the leaders' lateness is due ([`Levels::look`]).
    /// Only entries into broadcasts from other nodes count: no rank can
    /// have the message before the root entered, so a root's node waits for
    /// it whoever leads, and its entry is no lateness.
    pub fn arrived(&mut self, entry: Option<Entry>, root: usize) -> bool {
        let timed = self.layout.node_of(root) != self.layout.node_of(self.rank);
        self.lookout.arrived(entry.filter(|_| timed))
    }

    /// A look at the leaders' lateness, every rank at the same broadcast
    /// (when [`Levels::arrived`] says so): the ranks of each node share
    /// their mean entries, each node proposes its leader
    /// and whether it hands the message over, and the leaders share the
    /// proposals with each other and their nodes, so that every rank learns
    /// every node's.
    pub fn look(&mut self, lateness: Duration) -> Result<Seen> {
        let members = self.layout.node_members(self.rank);
        let size = Mean::BYTES;
        let mut bytes = vec![0u8; size * members.len()];
        let mine = size * self.layout.local[self.rank] as usize;
        bytes[mine..mine + size].copy_from_slice(&self.lookout.arrivals.mean().to_bytes());
        let int = |n: usize| c_int::try_from(n).map_err(|_| Error::Range);
        let counts = vec![int(size)?; members.len()];
        let displs = (0..members.len())
            .map(|i| int(size * i))
            .collect::<Result<Vec<_>>>()?;
        self.node.allgatherv_bytes(&mut bytes, &counts, &displs)?;
        let means: Vec<Mean> = bytes.chunks_exact(size).map(Mean::from_bytes).collect();
        let (proposed, hand_over) = self.lookout.propose(&members, &means, lateness);
        // Each node's proposal as 2 × its leader + whether it hands over;
        // -1 where another node's goes.
        let mut nodes = vec![-1i32; self.layout.nodes()];
        nodes[self.layout.node_of(self.rank)] = int(2 * proposed + usize::from(hand_over))?;
        if let Some(comm) = self.leaders {
            comm.allreduce_max(&mut nodes)?;
        }
        let mut map: Vec<u8> = nodes.iter().flat_map(|l| l.to_le_bytes()).collect();
        self.node.bcast_bytes(&mut map, 0)?;
        let nodes: Vec<u32> = map
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes")))
            .map(|l| u32::try_from(l).map_err(|_| Error::Range))
            .collect::<Result<_>>()?;
        let leaders: Vec<u32> = nodes.iter().map(|n| n / 2).collect();
        let handing: Vec<bool> = nodes.iter().map(|n| n % 2 == 1).collect();
        let layout = self.layout.led_by(&leaders).ok_or(Error::Range)?;
        let was = std::mem::replace(&mut self.lookout.handing, handing.clone());
        if leaders != self.layout.leaders() {
            return Ok(Seen::Moved(layout));
        }
        if was != handing && (!was.is_empty() || handing.contains(&true)) {
            return Ok(Seen::HandoversChanged(handing));
        }
        Ok(Seen::Same)
    }

    /// Whether this rank's node's leader hands the message over without
    /// waiting for the node's ranks (see [`Levels::bcast`]).
    fn hands_over(&self) -> bool {
        let handing = &self.lookout.handing;
        handing.get(self.layout.node_of(self.rank)) == Some(&true)
    }

    /// One broadcast over the two levels: among the leaders, the root's
    /// node's one as their root, then inside every node from its leader. A
    /// root that does not lead its node first gives the message to its node
    /// (costing no trip across the network), which then needs no turn after
    /// the leaders.
    ///
    /// Where a rank of the node entered late at the last look, its leader
    /// hands it the message by point-to-point sends from a copy and returns
    /// without waiting for them to be taken (a broadcast inside the node
    /// would hold it until the late rank came, and with it, through the
    /// leaders, every node).
    ///
    /// `buf` is the message's bytes, never the call's count and datatype:
    /// the ranks' datatypes may differ where their type signatures match,
    /// and whatever serves a part (Open MPI's broadcast inside a node) may
    /// cut a message by each rank's own count. `from_leader`: the node's
    /// ranks copy from the leader's memory where they may copy either way
    /// ([`Levels::through_segment`]). Returns whether the node's step went
    /// by handover.
    pub fn bcast(&mut self, buf: &mut [u8], root: usize, from_leader: bool) -> Result<bool> {
        let hand_over = self.hands_over() && !self.node_goes_first(root);
        for (part, part_root) in self.bcast_parts(root) {
            if part == self.node && hand_over {
                self.hand_over_bytes(buf)?;
            } else if part != self.node || !self.through_segment(buf, part_root, from_leader)? {
                part.bcast_bytes(buf, part_root)?;
            }
        }
        Ok(hand_over)
    }

    /// A handover of `buf`: from the leader, which has it, to every other
    /// rank of its node.
    fn hand_over_bytes(&mut self, buf: &mut [u8]) -> Result<()> {
        if self.layout.is_leader(self.rank) {
            self.send_handover(buf.to_vec())
        } else {
            self.node.recv_bytes(buf, 0)
        }
    }

    /// On a leader: hands `data` to the other ranks of its node, keeping at
    /// most [`MAX_HANDOVERS`] going.
    fn send_handover(&mut self, data: Vec<u8>) -> Result<()> {
        let full = self.handovers.len() >= MAX_HANDOVERS;
        if let Some(f) = self.handovers.front_mut().filter(|_| full) {
            f.wait()?;
        }
        while let Some(f) = self.handovers.front_mut() {
            if !f.test()? {
                break;
            }
            self.handovers.pop_front();
        }
        let fanout = self.node.send_all(data, 1..self.node.size())?;
        self.handovers.push_back(fanout);
        Ok(())
    }

    /// One broadcast of `buf` (the message's bytes) over the two levels,
    /// pipelined: each node's broadcast goes in segments of `segment`
    /// bytes, each begun as soon as its leader has it from the leaders'
    /// broadcast of that segment, so that the node's step overlaps the
    /// network's. The root's node, where the root does not lead it, goes
    /// first and whole, as in [`Levels::bcast`]; the leaders' broadcasts
    /// are of segments everywhere.
    /// Where the node's ranks take the message by handover (see
    /// [`Levels::bcast`]), they do so once the leader has all of it; returns
    /// whether they did. `from_leader` as in [`Levels::bcast`].
    pub fn bcast_pipelined(
        &mut self,
        buf: &mut [u8],
        root: usize,
        segment: usize,
        from_leader: bool,
    ) -> Result<bool> {
        let root_node = self.layout.node[root] as usize;
        let leaders = self.leaders;
        let among_leaders = |chunk: &mut [u8]| match leaders {
            Some(leaders) => leaders.bcast_bytes(chunk, root_node),
            None => Ok(()),
        };
        if self.node_goes_first(root) {
            let giver = self.layout.local[root] as usize;
            if !self.through_segment(buf, giver, from_leader)? {
                self.node.bcast_bytes(buf, giver)?;
            }
            buf.chunks_mut(segment.max(1)).try_for_each(among_leaders)?;
            return Ok(false);
        }
        if self.hands_over() {
            buf.chunks_mut(segment.max(1)).try_for_each(among_leaders)?;
            self.hand_over_bytes(buf)?;
            return Ok(true);
        }
        if self.segment_step(buf, 0, from_leader, segment, among_leaders)? {
            return Ok(false);
        }
        self.node.bcast_segments(buf, 0, segment, among_leaders)?;
        Ok(false)
    }

    /// Whether this rank's node gets a broadcast from `root` before the
    /// leaders do: the root's node, where the root does not lead it.
    fn node_goes_first(&self, root: usize) -> bool {
        let l = &self.layout;
        l.node[self.rank] == l.node[root] && !l.is_leader(root)
    }

    /// This rank's broadcasts in one from `root` over the levels, in order:
    /// each part and its root there.
    pub fn bcast_parts(&self, root: usize) -> Vec<(Comm, usize)> {
        let first = self.node_goes_first(root);
        let mut parts = Vec::with_capacity(2);
        if first {
            parts.push((self.node, self.layout.local[root] as usize));
        }
        if let Some(leaders) = self.leaders {
            parts.push((leaders, self.layout.node[root] as usize));
        }
        if !first {
            parts.push((self.node, 0));
        }
        parts
    }

    /// One barrier over the two levels: each node's (every rank of a node
    /// arrived), the leaders' (every node arrived), each node's again (its
    /// leader left the leaders' barrier).
    pub fn barrier(&self) -> Result<()> {
        self.node.barrier()?;
        if let Some(leaders) = self.leaders {
            leaders.barrier()?;
        }
        self.node.barrier()
    }

    /// One allgather over the two levels, `blocks[r]` bytes from rank `r`:
    /// each node's blocks gathered to its leader, the nodes' runs of blocks
    /// gathered among the leaders (ipmc's allgather there, by its own
    /// measured choice), and the whole given to each node by its leader.
    /// In the receive buffer itself where its blocks lie in that order as
    /// bytes (ranks placed node by node, a contiguous datatype); else in a
    /// buffer of packed blocks, which every rank then unpacks. The message
    /// must fit in an `int` of bytes (the caller checks, alike on every
    /// rank).
    pub fn allgather(&mut self, call: &mut AllgatherCall, blocks: &[usize]) -> Result<()> {
        let l = &self.layout;
        let (at, runs) = l.gathered(blocks);
        let total = runs.last().map_or(0, |r| r.end);
        let int = |n: usize| c_int::try_from(n).map_err(|_| Error::Range);
        let mut own = vec![0; blocks[self.rank]];
        call.own_block(self.rank, &mut own)?;
        let (mut counts, mut displs) = (Vec::new(), Vec::new());
        for r in l.node_members(self.rank) {
            counts.push(int(blocks[r])?);
            displs.push(int(at[r])?);
        }
        let run_counts = runs
            .iter()
            .map(|r| int(r.len()))
            .collect::<Result<Vec<_>>>()?;
        let run_displs = runs
            .iter()
            .map(|r| int(r.start))
            .collect::<Result<Vec<_>>>()?;
        let mut levels = |all: &mut [u8]| -> Result<()> {
            self.node.gatherv_bytes(&own, all, &counts, &displs, 0)?;
            if let Some(leaders) = self.leaders {
                leaders.allgatherv_bytes(all, &run_counts, &run_displs)?;
            }
            if self.through_segment(all, 0, false)? {
                return Ok(());
            }
            self.node.bcast_bytes(all, 0)
        };
        if let Some(run) = call.receive_run(&at) {
            return levels(run);
        }
        let mut all = vec![0; total];
        levels(&mut all)?;
        for (r, &len) in blocks.iter().enumerate() {
            if len > 0 && (r != self.rank || !call.in_place()) {
                call.put_block(r, &all[at[r]..at[r] + len])?;
            }
        }
        Ok(())
    }

    /// Names both levels after `name`, the communicator that takes them
    /// over (their statistics show it).
    pub fn rename(&self, name: &str) {
        self.node.rename(&node_name(name));
        if let Some(leaders) = self.leaders {
            leaders.rename(&leaders_name(name));
        }
    }

    /// Waits until the node's ranks took what this rank handed over: then
    /// no message of the communicator's calls is left in flight on the
    /// node's level, and a later communicator may take the levels over.
    /// `false` where a handover failed.
    pub fn settle(&mut self) -> bool {
        let mut settled = true;
        for mut f in self.handovers.drain(..) {
            if let Err(e) = f.wait() {
                log::warn!("rank {}: a handover to its node failed ({e})", self.rank);
                settled = false;
            }
        }
        settled
    }

    /// Frees both levels' communicators, once the node's ranks took what
    /// this rank handed over.
    pub fn free(mut self) {
        self.settle();
        if let Some(leaders) = self.leaders {
            leaders.free();
        }
        self.node.free();
    }
}

/// One rank's part in a nonblocking broadcast over the two levels
/// (`MPI_Ibcast`): the parts of [`Levels::bcast_parts`], each a nonblocking
/// broadcast on its communicator by whatever serves that, begun once the
/// one before completed on this rank. The parts' communicators must outlive
/// it (the parent's module frees them only once its work is over).
pub struct LevelsIbcast {
    parts: VecDeque<(Comm, usize)>,
    /// The part in progress, which holds the message meanwhile.
    now: Option<PartIbcast>,
    /// The message between parts, and at the end.
    bytes: Option<PartBytes>,
}

impl LevelsIbcast {
    /// A broadcast over `parts` in `bytes`: a buffer of its own (on the
    /// root, holding the message) or the user's buffer, lent.
    pub fn new(parts: Vec<(Comm, usize)>, bytes: PartBytes) -> Self {
        LevelsIbcast {
            parts: parts.into(),
            now: None,
            bytes: Some(bytes),
        }
    }

    /// Moves on as far as it can: takes the part that completed and begins
    /// the next.
    pub fn turn(&mut self, wait: Wait) -> Result<()> {
        loop {
            if let Some(part) = &mut self.now {
                if !part.test(wait)? {
                    return Ok(());
                }
                self.bytes = self.now.take().map(PartIbcast::into_bytes);
            }
            let Some((comm, root)) = self.parts.pop_front() else {
                return Ok(());
            };
            let bytes = self.bytes.take().expect("held between parts");
            self.now = Some(comm.ibcast(bytes, root)?);
        }
    }

    /// Whether this rank's parts are over: it has the message.
    pub fn is_done(&self) -> bool {
        self.now.is_none() && self.parts.is_empty()
    }

    /// The message, once done, where it is not in the user's buffer.
    pub fn data(&self) -> &[u8] {
        match self.bytes.as_ref().expect("done") {
            PartBytes::Own(v) => v,
            PartBytes::Lent(_) => panic!("the message lies in the lent buffer"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_numbered_by_their_first_rank_and_led_by_it() {
        let l = Layout::from_hosts(["b", "a", "b", "c", "a", "b"]);
        assert_eq!(l.node, [0, 1, 0, 2, 1, 0]);
        assert_eq!(l.local, [0, 0, 1, 0, 1, 2]);
        assert_eq!(l.nodes(), 3);
        assert!(l.has_two_levels());
        let leaders: Vec<usize> = (0..6).filter(|&r| l.is_leader(r)).collect();
        // Ordered by rank, the leaders' ranks order their nodes.
        assert_eq!(leaders, [0, 1, 3]);
        assert!(!Layout::from_hosts(["a", "b", "c"]).has_two_levels());
        assert!(!Layout::from_hosts(["a", "a", "a"]).has_two_levels());
    }

    #[test]
    fn a_moved_lead_comes_first_in_its_node() {
        let l = Layout::from_hosts(["b", "a", "b", "c", "a", "b"]);
        assert_eq!(l.leaders(), [0, 1, 3]);
        let m = l.led_by(&[5, 1, 3]).unwrap();
        assert_eq!(m.local, [1, 0, 2, 0, 1, 0]);
        assert!(m.is_leader(5) && !m.is_leader(0));
        assert_eq!(m.node_members(2), [5, 0, 2]);
        assert_eq!(m.node_members(4), [1, 4]);
        // Node after node still, whoever leads: the leaders' ranks there.
        assert_eq!((m.node_of(5), m.node_of(1), m.node_of(3)), (0, 1, 2));
        assert_eq!(m.led_by(&[0, 1, 3]), Some(l));
    }

    #[test]
    fn a_lead_stays_in_its_node() {
        let l = Layout::from_hosts(["a", "b", "a", "b"]);
        assert_eq!(l.led_by(&[1, 3]), None);
        assert_eq!(l.led_by(&[0, 9]), None);
        assert_eq!(l.led_by(&[0]), None);
        assert!(l.led_by(&[2, 3]).is_some());
    }

    /// Means of ranks that entered `at` ms after one another's times and
    /// stayed outside as long as they entered late (late by their own work).
    fn own(at: [i64; 3]) -> [Mean; 3] {
        at.map(|ms| Mean {
            at: 1_000_000 * ms,
            outside: 1_000_000 * ms,
        })
    }

    #[test]
    fn a_late_leader_gives_up_its_lead_at_the_second_look_in_a_row() {
        let members = [4, 5, 6];
        let late = Duration::from_millis(1);
        let mut look = Lookout::default();
        let p = |look: &mut Lookout, means: [Mean; 3]| look.propose(&members, &means, late);
        // Late by 3 ms behind rank 6: noted, not yet moved.
        assert_eq!(p(&mut look, own([10, 8, 7])), (4, false));
        // Moved: the old leader is now a late rank the new one hands over to.
        assert_eq!(p(&mut look, own([10, 8, 7])), (6, true));
        // Within the lateness allowed, or late only once: no move.
        let mut look = Lookout::default();
        let mut within = own([10, 9, 10]);
        within[1] = Mean {
            at: within[1].at + 1,
            outside: within[1].outside + 1,
        };
        assert_eq!(p(&mut look, within), (4, false));
        assert_eq!(p(&mut look, within), (4, false));
        assert_eq!(p(&mut look, own([10, 5, 10])), (4, false));
        assert_eq!(p(&mut look, own([10, 10, 10])), (4, false));
        assert_eq!(p(&mut look, own([10, 5, 10])), (4, false));
        // A late rank that does not lead is handed over to at once.
        assert_eq!(p(&mut look, own([10, 12, 10])), (4, true));
    }

    #[test]
    fn lateness_is_a_ranks_own_not_what_it_waited_for() {
        let members = [0, 1, 2];
        let late = Duration::from_millis(1);
        let ms = |at: i64, outside: i64| Mean {
            at: 1_000_000 * at,
            outside: 1_000_000 * outside,
        };
        let mut look = Lookout::default();
        // The leader returned from its node's fan-out 5 ms before the
        // others and entered with them: outside longest, not late.
        let fanout = [ms(10, 9), ms(10, 4), ms(10, 4)];
        for _ in 0..3 {
            assert_eq!(look.propose(&members, &fanout, late), (0, false));
        }
        // Rank 2 left a tree 5 ms late, waiting for a rank elsewhere, and
        // entered as soon as it could: late, but not by its own work.
        let waited = [ms(10, 4), ms(10, 4), ms(15, 4)];
        assert_eq!(look.propose(&members, &waited, late), (0, false));
        // Both at once: rank 1 entered 3 ms late after 3 ms more outside.
        let own_work = [ms(10, 4), ms(13, 7), ms(10, 4)];
        assert_eq!(look.propose(&members, &own_work, late), (0, true));
    }

    #[test]
    fn means_cross_between_ranks_whole() {
        let m = Mean {
            at: 1_800_000_000_123_456_789,
            outside: -5,
        };
        assert_eq!(Mean::from_bytes(&m.to_bytes()), m);
        let mut a = Arrivals::default();
        let t = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        for (ms, out) in [(0, 1), (2, 3), (4, 5)] {
            a.add(Entry {
                at: t + Duration::from_millis(ms),
                outside: Duration::from_millis(out),
            });
        }
        let mean = a.mean();
        assert_eq!(mean.at, 1_800_000_000_002_000_000);
        assert_eq!(mean.outside, 3_000_000);
    }

    #[test]
    fn looks_come_when_the_broadcasts_doubled_then_at_an_interval() {
        let mut look = Lookout::default();
        let mut at = Vec::new();
        for call in 1..=5000u64 {
            let entry = Entry {
                at: SystemTime::now(),
                outside: Duration::from_micros(call),
            };
            if look.arrived(Some(entry)) {
                at.push(call);
                look.propose(&[0, 1], &[Mean::default(); 2], Duration::from_millis(1));
            }
        }
        assert_eq!(at, [64, 128, 256, 512, 1024, 2048, 3072, 4096]);
    }

    #[test]
    fn an_allgathers_blocks_are_kept_node_after_node() {
        // Ranks dealt round-robin over the nodes, as `--map-by node` does.
        let l = Layout::from_hosts(["a", "b", "a", "b", "c"]);
        let (at, runs) = l.gathered(&[10, 20, 30, 0, 5]);
        // Node a: ranks 0 and 2; b: 1 and 3 (empty); c: 4.
        assert_eq!(at, [0, 40, 10, 60, 60]);
        assert_eq!(runs, [0..40, 40..60, 60..65]);
    }
}
