//! The automatic choice of algorithm, measured on the calls themselves (as
//! STAR-MPI does): per size class (powers of two), the first broadcasts of
//! a communicator take each candidate algorithm in turn, every rank times its
//! own calls (short messages: each call's root times it until every rank has
//! the message), and the ranks agree on the fastest in the background
//! ([`crate::group::vote`]): each candidate's time is the slowest rank's
//! best, the same numbers on every rank, so every rank takes the same
//! decision. Decisions change only at calls every rank counts alike (the
//! n-th broadcast of a class), never from a rank's own clock: while the
//! vote runs, the class's next [`VOTE_CALLS`] calls multicast (whose calls
//! may begin while earlier ones' and the vote's messages are under way), and
//! the decision takes effect at the call after them; only a rank that gets
//! there before its vote ended waits for it. So the vote never makes a rank
//! wait for one that has not entered a broadcast, unless it runs that many
//! calls ahead.
//!
//! A class is measured again after 1024 calls, then after twice as many
//! each time, so that a network that changed (multicast that started to be
//! dropped, or stopped) is noticed at a bounded cost.

use std::time::Duration;

use crate::engine::algorithm::Algorithm;

/// Class k holds the messages of 2^(k-1) + 1 … 2^k bytes (class 0: 1 byte).
pub fn class_of(bytes: usize) -> usize {
    if bytes <= 1 {
        0
    } else {
        (usize::BITS - (bytes - 1).leading_zeros()) as usize
    }
}

/// The largest message of class `k`.
pub fn class_max(k: usize) -> usize {
    1usize.checked_shl(k as u32).unwrap_or(usize::MAX)
}

const CLASSES: usize = usize::BITS as usize + 1;

/// Every class a communicator measures: the broadcasts', the barrier's and
/// the allgathers'.
pub const ALL_CLASSES: usize = 2 * CLASSES + 1;

/// The class of `MPI_Barrier`, measured and decided as a size class of
/// broadcasts is, with candidates of its own ([`barrier_candidates`]).
pub const BARRIER: usize = CLASSES;

/// The class of an `MPI_Allgather` of `block` bytes per rank: the
/// allgathers' own size classes follow the barrier's.
pub fn allgather_class(block: usize) -> usize {
    BARRIER + 1 + class_of(block)
}

fn is_allgather(k: usize) -> bool {
    k > BARRIER
}

/// The size class of a class's messages (an allgather's: of its blocks).
fn sized(k: usize) -> usize {
    if is_allgather(k) {
        k - BARRIER - 1
    } else {
        k
    }
}

/// What the decision table and logs call class `k`.
pub fn class_name(k: usize) -> String {
    if k == BARRIER {
        return "barrier".into();
    }
    let s = sized(k);
    let low = if s == 0 { 1 } else { class_max(s - 1) + 1 };
    let bytes = format!("{low}-{} bytes", class_max(s));
    if is_allgather(k) {
        format!("allgather of {bytes} per rank")
    } else {
        bytes
    }
}

/// Calls of a class before it is first measured again.
const RETUNE_AFTER: u64 = 1024;
/// Calls of a class between the end of its measurements and the call at
/// which the ranks' decision takes effect (see the module's summary).
pub const VOTE_CALLS: u64 = 16;
/// How long the root of a measured call of a short message waits in the
/// call for the others' answers (see [`ROOT_TIMED_UP_TO`]); later answers are
/// noted in the background. A call takes well under this where ranks wait
/// for the root.
pub const ANSWER_WAIT: Duration = Duration::from_millis(5);
/// As [`ANSWER_WAIT`] for the classes above [`SHORT_UP_TO`] that are timed
/// at their root: a 64 KiB broadcast takes 5.8 ms by multicast on 16 hosts
/// at 100 Mbit/s and 50 ms by Open MPI's tree, and an answer the root sees
/// after its call, when it next drives the progress engine, makes the
/// candidate look as slow as the root's work until then.
pub const LONG_ANSWER_WAIT: Duration = Duration::from_millis(100);
/// Calls of a short messages' class between its last measured call and its
/// vote (fewer than [`VOTE_CALLS`]): the roots' answers arrive meanwhile, and
/// a root waits for them only if they have not by then.
const ANSWER_CALLS: u64 = 8;
/// Open MPI's own broadcast is kept unless another is faster by more than
/// this (per mille): it needs no datagrams, and measurements are noisy.
pub const PREFER_PREVIOUS_PERMILLE: u64 = 30;
/// Multicast that got more than this share (per mille) of a message to
/// every rank by the chain instead is not chosen, however fast: a network
/// that drops most multicast (a firewall, IGMP snooping without a querier)
/// leaves the chain alone to do the work. The best-served rank counts, not
/// the worst: a rank that reads its socket late (on a busy core) sees the
/// chain overtake datagrams that did arrive, and a rank that multicast does
/// not reach is the times' business (the chain repairs it).
pub const GIVE_UP_LOSS_PERMILLE: u32 = 500;
/// The vote keeps each element's maximum, so a rank votes its loss as the
/// share it got by multicast plus one, and 0 when it measured none (the
/// root, messages of a few datagrams): the maximum is the best-served rank.
const DELIVERED_VOTE: u32 = 1001;
/// The ipmc chain measured against the others above this size, where a
/// message is two or more of its 64 KiB segments (below, its steps cannot
/// pay off against a tree). At 10 Gbit/s on 4 and 8 emulated hosts, from
/// 256 KiB to 16 MiB, it was 1.6 to 2.9 times as fast as Open MPI's own
/// choice and within 15 % of Open MPI's pipeline in 64 KiB segments, the
/// same algorithm; at 100 Mbit/s multicast wins below a few MiB, which the
/// measurement finds.
const CHAIN_FROM: usize = 64 << 10;
/// Short messages: classes up to this size are measured on
/// [`SHORT_FACTOR`] times as many calls: a call takes well under a
/// millisecond there, and the best of more calls comes closer to each
/// candidate's own time, at little cost.
const SHORT_UP_TO: usize = 8192;
const SHORT_FACTOR: usize = 4;
/// Classes up to this size are timed at their root, from the root's entry
/// until every other rank answered that it has the message. A rank's own
/// time, from its entry, is there mostly its wait for the root: how late
/// the root entered, or when a rank got a core, varies by as much as what
/// tells the candidates apart (tens of microseconds between Open MPI's
/// trees at 1 KiB on 16 hosts). At 64 KiB on 2 emulated hosts of 8 ranks at
/// 10 Gbit/s, a run of the benchmark that took the levels spent 0.58 ms per
/// round, one that took Open MPI's broadcast 0.89; each rank's own best of 2
/// calls, which held the 1 ms by which the benchmark's root enters after the
/// others, made them 1.76 and 2.04 ms in the first, 1.85 and 1.88 in the
/// second. Timed at the root: 0.76–1.04 and 1.01–1.39 ms, the levels chosen
/// in 8 runs of 8. The answers cost an empty message per rank and measured
/// call, the same for every candidate.
/// Above [`SHORT_UP_TO`] only on communicators of up to
/// [`ROOT_TIMED_RANKS`] ranks: the root receives an answer from every rank,
/// which on 1,000 simulated nodes at 100 Mbit/s took 20 ms of each call,
/// more than a 64 KiB multicast broadcast. On one level each rank's own
/// time held that 1 ms too: at 64 KiB on 4 and 8 emulated hosts at
/// 10 Gbit/s both candidates measured 1.17 to 1.47 ms, so the 3 % by which
/// Open MPI's broadcast is preferred decided, where multicast was 20 %
/// faster per call (0.113 against 0.141 ms on 4 hosts with jumbo frames);
/// timed at the root they measured 0.17 to 0.54 ms. A host that drops
/// multicast, whose ranks get every message by the chain, does not make
/// multicast look slow from the root: 19.5 to 22.4 ms against Open MPI's
/// tree's 28.1 to 30.0 at 64 KiB on 6 hosts at 100 Mbit/s
/// (`tests/cluster_faults.rs`).
const ROOT_TIMED_UP_TO: usize = 64 << 10;
const ROOT_TIMED_RANKS: usize = 32;
/// Over two levels, the classes of messages from [`LARGE_FROM`] have
/// this many times as many calls per candidate. Their four candidates come
/// within 10 % of each other where processes outnumber cores, and their
/// calls vary by more: on 4 emulated hosts of 4 ranks at 10 Gbit/s, the
/// best of 2 calls of Open MPI's scatter and ring allgather was 18.8 to
/// 21.8 ms at 4 MiB (16.9 and 17.4 when forced on every call), and the
/// levels (19.1 ms when they served) won 4 of 14 decisions at 4 and 16 MiB
/// in 7 runs; with the best of 4 calls 1 of 6, of 6 calls none of 4.
const LARGE_FACTOR: usize = 2;
/// A broadcast class above [`SHORT_UP_TO`] up to [`SPLIT_UP_TO`] whose
/// candidates measured so little that this many times as many calls of
/// each cost at most [`CLOSER_LOOK_BUDGET`] is measured again at once on
/// that many: its first calls vary by more than what tells its candidates
/// apart. At 64 KiB on 4 emulated hosts at 10 Gbit/s the best of 2 calls
/// per candidate, timed at the root, was 293 to 407 µs for Open MPI's own
/// choice and 255 to 686 for its split binary tree, and picked the split
/// tree in 4 runs of 10 (0.144 to 0.154 ms per call then, against 0.19 to
/// 0.38 for Open MPI's choice); the best of 8 was 206 to 220 µs for the
/// split tree, 264 to 297 for Open MPI's choice, and picked the split tree
/// in 4 runs of 4; with this closer look, in 6 runs of 6.
const CLOSER_FACTOR: usize = 4;
/// What a closer look may cost, its candidates' best times summed over its
/// calls: on a network where the first look took several milliseconds
/// (100 Mbit/s, where multicast wins by 3 to 8 times: 78 ms at 16 KiB on 4
/// emulated hosts) it is not taken. It is paid once per class and
/// communicator (later ones of the same processes take the decision on),
/// and only what the slower candidates' calls take beyond the fastest's is
/// lost. With 20 ms, at 64 KiB on 8 emulated hosts at 10 Gbit/s the first
/// look summed 2.6 to 2.8 ms (8 calls each: 21 to 23 ms), took no closer
/// look, and picked the split binary tree in 2 runs of 12 (429 µs per
/// call, the runs' median); with 50 ms, in 8 of 12 (388 µs).
const CLOSER_LOOK_BUDGET: Duration = Duration::from_millis(50);
/// Open MPI's binomial and binary trees measured against the others up to
/// this size: there one tree step costs about a message's latency, and one
/// or the other was the fastest of Open MPI's fixed algorithms at 1 KiB on
/// 3 to 16 emulated hosts (the binomial tree up to 4, the binary one from
/// 8; Open MPI's own choice matched them only at 4). At 4 and 8 KiB
/// multicast or the replaced broadcast won; from 16 to 128 KiB the
/// binomial tree is measured again ([`candidates`]).
const TREES_UP_TO: usize = 2048;

/// The algorithm of a class's calls while the ranks agree on its first
/// measurement, of candidates `cands`: one whose calls need not wait for the
/// vote, or, on a communicator without multicast (`point_to_point`), the
/// replaced broadcast (alongside the vote, as every broadcast goes).
fn meanwhile(cands: &[Algorithm], point_to_point: bool) -> Option<Algorithm> {
    cands
        .iter()
        .copied()
        .find(|a| a.goes_alongside())
        .or(point_to_point.then_some(Algorithm::Previous))
}

/// Whether a rank's part of a vote is due after a call (see [`Tuner::due`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Due {
    No,
    /// Not before the answers of this rank's measured calls as a root.
    Answers,
    /// The size class and this rank's vector for the vote.
    Vote(usize, Vec<u32>),
}

/// What a rank measures for one call of a class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    class: usize,
    candidate: usize,
    at_root: bool,
}

impl Sample {
    /// Whether the call is timed at its root, on the other ranks' answers
    /// (see [`ROOT_TIMED_UP_TO`]): the root passes its time to
    /// [`Tuner::record`], the other ranks none.
    pub fn timed_at_root(&self) -> bool {
        self.at_root
    }

    /// How long the root of a call timed at its root waits in the call for
    /// the answers.
    pub fn answer_wait(&self) -> Duration {
        if class_max(self.class) <= SHORT_UP_TO {
            ANSWER_WAIT
        } else {
            LONG_ANSWER_WAIT
        }
    }
}

/// A size class's agreed choice, with what it was based on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub alg: Algorithm,
    /// Each candidate's time, the slowest rank's best, in microseconds.
    pub times_us: Vec<(Algorithm, u32)>,
    /// The share of a multicast message that even the best-served rank had
    /// to get by the chain instead (per mille), 0 when none was measured.
    pub lost_permille: u32,
    /// Measured calls of each candidate.
    pub calls: usize,
    /// The class's call from which `alg` serves; the calls before it take
    /// `interim`, as during the vote.
    pub from: u64,
    interim: Algorithm,
    /// Measured on an earlier communicator of the same processes, and
    /// taken from it ([`Tuner::inherit`]).
    pub inherited: bool,
}

/// A class's first measurement, none, part or all of it, as a
/// communicator freed before deciding left it on this rank: its calls and
/// measured calls, the same on every rank (on a communicator of the same
/// tuner, the measured ones follow from the calls), and this rank's own
/// best times and loss, which a new communicator of the same processes
/// takes on from ([`Tuner::take_on`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    pub calls: u64,
    taken: usize,
    best: Vec<u32>,
    lost: Option<u32>,
}

/// What the class's measured calls ended with, on every rank alike.
#[derive(Clone, Copy)]
struct Ended {
    /// The class's last measured call.
    at: u64,
    /// The algorithm of the calls until the decision, if any may go ahead
    /// without it.
    interim: Option<Algorithm>,
}

enum Phase {
    /// Candidates take turns; `taken` calls were measured and `recorded`
    /// of them timed (a root's answers may come later), `best` is this
    /// rank's best time per candidate (µs); `ended` once all were taken.
    Explore {
        taken: usize,
        recorded: usize,
        best: Vec<u32>,
        lost: Option<u32>,
        ended: Option<Ended>,
    },
    /// This rank's measurements went to the vote after the class's call
    /// `at` (or [`ANSWER_CALLS`] later); the next calls take `interim` (if
    /// any) until the decision.
    Voting {
        at: u64,
        interim: Option<Algorithm>,
    },
    Decided(Decision),
}

impl Phase {
    /// Class `k`'s measurements from their start.
    fn explore(candidates: usize) -> Self {
        Phase::Explore {
            taken: 0,
            recorded: 0,
            best: vec![u32::MAX; candidates],
            lost: None,
            ended: None,
        }
    }
}

struct Class {
    /// Blocking calls of the class so far, the same count on every rank.
    calls: u64,
    phase: Phase,
    /// The call at which the class is measured again, and the interval.
    retune_at: u64,
    interval: u64,
    /// The last decision, kept while the class is measured again.
    last: Option<Decision>,
    /// To be measured again as soon as every rank has its decision
    /// ([`Tuner::measure_again`] came while it was measured or voted on).
    again: bool,
    /// The class's measurement is, or is about to be, a closer look
    /// ([`CLOSER_FACTOR`]).
    closer: bool,
}

impl Class {
    /// Measures the class again from its next call, as on a new
    /// communicator, if every rank has its decision; `false` if not yet:
    /// each rank settles a vote when it must, by the call from which the
    /// decision serves, so before it some ranks may still be voting.
    fn restart(&mut self, candidates: usize) -> bool {
        if !matches!(&self.phase, Phase::Decided(d) if self.calls >= d.from) {
            return false;
        }
        let Phase::Decided(d) = std::mem::replace(&mut self.phase, Phase::explore(candidates))
        else {
            unreachable!("matched above");
        };
        self.last = Some(d);
        self.calls = 0;
        self.again = false;
        self.closer = false;
        true
    }

    /// The algorithm of the class's next call, unless it is measured or
    /// needs the decision of a vote that has not ended on this rank
    /// (`None` then; before any decision, the last one if there was one).
    fn next_unmeasured(&self) -> Option<Algorithm> {
        let call = self.calls + 1;
        match &self.phase {
            Phase::Decided(d) if call < d.from => Some(d.interim),
            Phase::Decided(d) => Some(d.alg),
            Phase::Voting { at, interim }
            | Phase::Explore {
                ended: Some(Ended { at, interim }),
                ..
            } => interim.filter(|_| call <= at + VOTE_CALLS),
            Phase::Explore { .. } => self.last.as_ref().map(|d| d.alg),
        }
    }
}

/// A communicator's measured choice, the same on every rank.
pub struct Tuner {
    /// Calls per candidate (`coll_ipmc_tune_calls`; [`SHORT_FACTOR`] times
    /// as many up to [`SHORT_UP_TO`] bytes, [`LARGE_FACTOR`] times as many
    /// for large messages over two levels).
    samples: usize,
    rank: usize,
    /// `coll_ipmc_inject_timing`: made-up times for tests.
    inject: bool,
    /// The communicator broadcasts over two levels ([`over_two_levels`]).
    two_levels: bool,
    /// The communicator has no multicast group: its candidates are
    /// point-to-point only ([`point_to_point`]).
    point_to_point: bool,
    /// Over two levels: some node's ranks may copy either way, and the
    /// levels are measured both ways ([`Tuner::offer_from_leader`]).
    from_leader: bool,
    classes: Vec<Class>,
    /// Classes whose vote has not been settled.
    voting: usize,
    /// Broadcasts of up to this many bytes are timed at their root
    /// ([`ROOT_TIMED_UP_TO`]).
    root_timed_up_to: usize,
}

/// The algorithms measured against each other on a communicator of one
/// level in class `k`; Open MPI's own broadcast first. Above
/// [`SHORT_UP_TO`] up to [`SPLIT_UP_TO`] also Open MPI's split binary tree:
/// on 4 emulated hosts at 10 Gbit/s it was the fastest of tuned's fixed
/// algorithms at 64 KiB (0.149 ms, against 0.22 for Open MPI's own choice
/// and 0.19 to 0.38 for ipmc without it; 0.15 to 0.23 with it, 3 runs
/// each); at 100 Mbit/s multicast wins there and the tree costs its
/// measured calls. There also Open MPI's binomial tree, unsegmented: on 4
/// and 8 emulated hosts at 10 Gbit/s it was the fastest of Open MPI's
/// broadcasts at 128 KiB and within 15 % of it at 16 and 32 KiB, and ipmc
/// without it
/// came within 1.05 of the fastest at 3 of 8 points from 16 to 128 KiB
/// (1.15 on the mean, up to 1.42), with it at 6 (0.97, up to 1.14; the
/// median of 8 runs each, `docs/choice.md`). Multicast at every size: a
/// broadcast above
/// `coll_ipmc_background_limit` works in the user's buffer, with no copy of
/// the message of its own (64 MiB on 4 emulated hosts at 10 Gbit/s:
/// multicast 80 ms, the chain 115–127, Open MPI's own 169–174).
pub fn candidates(k: usize) -> &'static [Algorithm] {
    use Algorithm::{Binary, Binomial, Chain, Multicast, Previous, SplitBinary};
    let max = class_max(k);
    if max <= TREES_UP_TO {
        &[Previous, Binomial, Binary, Multicast]
    } else if max > SPLIT_UP_TO {
        &[Previous, Multicast, Chain]
    } else if max > CHAIN_FROM {
        &[Previous, Multicast, Chain, SplitBinary, Binomial]
    } else if max > SHORT_UP_TO {
        &[Previous, Multicast, SplitBinary, Binomial]
    } else {
        &[Previous, Multicast]
    }
}

/// The indices of `cands` in the order their calls are measured: those
/// that go alongside the queued multicast work last.
fn measured_order(cands: &[Algorithm]) -> impl Iterator<Item = usize> + '_ {
    let alongside = |i: &usize| cands[*i].goes_alongside();
    let first = (0..cands.len()).filter(move |i| !alongside(i));
    first.chain((0..cands.len()).filter(alongside))
}

/// The candidates of a communicator that never multicasts (two nodes of
/// one rank each) in class `k`: where one message is all a broadcast is,
/// Open MPI's algorithms still differ in how they cut it (between 2
/// emulated hosts at 10 Gbit/s its split binary tree took 50 µs at 64 KiB
/// against 73 for its own choice, but 44 against 33 at 32 KiB and 168
/// against 101 at 128 KiB). One candidate is no measurement. The barrier
/// and allgather: the replaced component's and Open MPI's linear barrier
/// and ring.
pub fn point_to_point(k: usize) -> &'static [Algorithm] {
    use Algorithm::{Binary, Binomial, Chain, Linear, Previous, SplitBinary};
    if k == BARRIER {
        return &[Previous, Linear];
    }
    if is_allgather(k) {
        return &[Previous, Chain];
    }
    let max = class_max(k);
    if max <= TREES_UP_TO {
        &[Previous, Binomial, Binary]
    } else if max > SPLIT_UP_TO {
        &[Previous, Chain]
    } else if max > CHAIN_FROM {
        &[Previous, Chain, SplitBinary]
    } else if max > SHORT_UP_TO {
        &[Previous, SplitBinary]
    } else {
        &[Previous]
    }
}

/// The candidates of a communicator over two levels in class `k`: the
/// levels (whatever the leaders' communicator chose at that size) against
/// the replaced broadcast on the whole communicator, which may know the
/// nodes too (`han`); for short messages also ipmc's linear broadcast from
/// the root to every rank, one step where the levels take two or three (on
/// 2 to 8 emulated hosts of 16 ranks at 10 Gbit/s, Open MPI's linear one
/// was the fastest of all at 4 KiB, 1.4 times as fast as the levels); up
/// to [`SPLIT_UP_TO`] Open MPI's split binary tree; from the class of 1 MiB
/// also the levels pipelined (1 MiB on 2 emulated hosts
/// of 8 ranks at 100 Mbit/s: 88.4 ms, against 94.7 whole and han's 88.2),
/// and above it Open MPI's scatter and ring allgather on the whole
/// communicator (16 MiB on 8 emulated hosts of 2 ranks at 10 Gbit/s:
/// 77.5 ms, against 121 for ipmc without it and 148 for han).
///
/// Where some node's ranks may copy either way (`from_leader`,
/// `coll_ipmc_node_segment 3`), above short messages the levels are
/// measured both ways: through the segment's slots and from the leader's
/// memory. Which is faster depends on what limits the leader: on the
/// emulated cluster, whose cores each run several ranks, the slots were
/// (`docs/two-levels.md`); where the leader's core is the limit, as with
/// the datagram path's own costs in the simulator at 25 Gbit/s, the copies
/// from its memory (`docs/scale.md`). Short messages keep the slots: a copy
/// of a few KiB costs the leader less than the ranks' system calls.
pub fn over_two_levels(k: usize, from_leader: bool) -> &'static [Algorithm] {
    use Algorithm::{
        Linear, Previous, ScatterAllgather, SplitBinary, TwoLevel, TwoLevelFromLeader,
        TwoLevelPipelined, TwoLevelPipelinedFromLeader,
    };
    let max = class_max(k);
    match from_leader {
        _ if max <= SHORT_UP_TO => &[Previous, TwoLevel, Linear],
        false if max <= SPLIT_UP_TO => &[Previous, TwoLevel, SplitBinary],
        true if max <= SPLIT_UP_TO => &[Previous, TwoLevel, TwoLevelFromLeader, SplitBinary],
        false if max >= LARGE_FROM => &[Previous, TwoLevel, TwoLevelPipelined, ScatterAllgather],
        true if max >= LARGE_FROM => &[
            Previous,
            TwoLevel,
            TwoLevelFromLeader,
            TwoLevelPipelined,
            TwoLevelPipelinedFromLeader,
            ScatterAllgather,
        ],
        false if max >= PIPELINED_FROM => &[Previous, TwoLevel, TwoLevelPipelined],
        true if max >= PIPELINED_FROM => &[
            Previous,
            TwoLevel,
            TwoLevelFromLeader,
            TwoLevelPipelined,
            TwoLevelPipelinedFromLeader,
        ],
        false => &[Previous, TwoLevel],
        true => &[Previous, TwoLevel, TwoLevelFromLeader],
    }
}

/// Open MPI's split binary tree (tuned's algorithm 4), on the whole
/// communicator over one level or two, is a candidate above [`SHORT_UP_TO`]
/// up to this size: at 64 KiB on 8 emulated hosts of 2 ranks at 10 Gbit/s
/// the fastest of tuned's fixed algorithms (0.72 to 0.76 ms, against 0.81
/// to 0.85 for ipmc without it); at 16 and 32 KiB han's broadcast was
/// faster than it, at 128 KiB ipmc's levels (1.01 against 1.87 ms).
pub const SPLIT_UP_TO: usize = 128 << 10;
/// From the class of this largest message on (messages above 512 KiB) the
/// levels pipelined are a candidate too: 3 segments of 256 KiB or more,
/// where the node's step has the network's to overlap.
pub const PIPELINED_FROM: usize = 1 << 20;
/// From the class of this largest message on (messages above 1 MiB) Open
/// MPI's scatter and ring allgather is a candidate over two levels too, and
/// each candidate is measured on more calls ([`LARGE_FACTOR`]).
pub const LARGE_FROM: usize = 2 << 20;

/// The barriers measured against each other: the replaced component's;
/// Open MPI's linear one (coll/base), which Open MPI's own choice passes
/// over, and which was the fastest of tuned's barriers on 8 emulated hosts
/// at 100 Mbit/s (56 µs, against 79 to 143 µs for the others and 86 to
/// 110 µs for tuned's choice); and ipmc's, whose ranks report to rank 0
/// point-to-point and are released by one multicast datagram. Over two
/// levels: the replaced one, the linear one on the whole communicator (on 4
/// and 8 emulated hosts of 4 ranks at 100 Mbit/s, 128 and 296 µs against
/// 233 and 494 µs for the levels), and each node's barrier, the leaders'
/// and each node's again.
pub fn barrier_candidates(two_levels: bool) -> &'static [Algorithm] {
    use Algorithm::{Linear, Multicast, Previous, TwoLevel};
    if two_levels {
        &[Previous, Linear, TwoLevel]
    } else {
        &[Previous, Linear, Multicast]
    }
}

/// The allgathers measured against each other: the replaced component's;
/// Open MPI's ring (coll/base, tuned's 4), shown as `chain`: each block
/// travels the ring (at 4 KiB per rank on 16 emulated hosts at 100 Mbit/s
/// the fastest, 6.2 ms against 7.9 to 8.5 for the others); and ipmc's,
/// which multicasts every rank's block in turn (at 64 KiB 92 ms, against
/// the ring's 140 and Open MPI's own choice's 177). Over two levels,
/// ipmc's is the levels' (each node's blocks gathered to its leader, the
/// leaders' allgather by their own choice, each node's broadcast).
pub fn allgather_candidates(two_levels: bool) -> &'static [Algorithm] {
    use Algorithm::{Chain, Multicast, Previous, TwoLevel};
    if two_levels {
        &[Previous, Chain, TwoLevel]
    } else {
        &[Previous, Chain, Multicast]
    }
}

impl Tuner {
    pub fn new(samples: usize, rank: usize, inject: bool) -> Self {
        Self::with(samples, rank, inject, false)
    }

    /// The measured choice of a communicator that broadcasts over two
    /// levels ([`over_two_levels`]).
    pub fn over_two_levels(samples: usize, rank: usize, inject: bool) -> Self {
        Self::with(samples, rank, inject, true)
    }

    fn with(samples: usize, rank: usize, inject: bool, two_levels: bool) -> Self {
        let mut t = Tuner {
            samples: samples.max(1),
            rank,
            inject,
            two_levels,
            point_to_point: false,
            from_leader: false,
            classes: Vec::new(),
            voting: 0,
            root_timed_up_to: SHORT_UP_TO,
        };
        t.classes = (0..ALL_CLASSES)
            .map(|k| Class {
                calls: 0,
                phase: Phase::explore(t.candidates(k).len()),
                retune_at: 0,
                interval: RETUNE_AFTER,
                last: None,
                again: false,
                closer: false,
            })
            .collect();
        t
    }

    /// The measured choice of a communicator of one level that never
    /// multicasts (two nodes): Open MPI's fixed algorithms and ipmc's
    /// point-to-point ones only ([`point_to_point`]).
    pub fn without_multicast(mut self) -> Self {
        self.point_to_point = !self.two_levels;
        for k in 0..self.classes.len() {
            self.classes[k].phase = Phase::explore(self.candidates(k).len());
        }
        self
    }

    /// Over two levels, before any call: measures the levels both ways
    /// too, as the ranks of some node may copy either way (agreed by every
    /// rank when the levels are first split). Returns whether it does.
    pub fn offer_from_leader(&mut self) -> bool {
        if !self.two_levels || self.classes.iter().any(|c| c.calls > 0) {
            return false;
        }
        self.from_leader = true;
        for k in 0..self.classes.len() {
            self.classes[k].phase = Phase::explore(self.candidates(k).len());
        }
        true
    }

    /// For a communicator of `ranks` ranks: up to [`ROOT_TIMED_RANKS`]
    /// ranks, broadcasts up to [`ROOT_TIMED_UP_TO`] are timed at their root,
    /// elsewhere up to [`SHORT_UP_TO`].
    pub fn of_ranks(mut self, ranks: usize) -> Self {
        if ranks <= ROOT_TIMED_RANKS {
            self.root_timed_up_to = ROOT_TIMED_UP_TO;
        }
        self
    }

    /// Whether the calls of class `k` are timed at their root.
    fn timed_at_root(&self, k: usize) -> bool {
        k < BARRIER && class_max(k) <= self.root_timed_up_to
    }

    /// The candidates of class `k` on this communicator.
    pub fn candidates(&self, k: usize) -> &'static [Algorithm] {
        if self.point_to_point {
            point_to_point(k)
        } else if k == BARRIER {
            barrier_candidates(self.two_levels)
        } else if is_allgather(k) {
            allgather_candidates(self.two_levels)
        } else if self.two_levels {
            over_two_levels(k, self.from_leader)
        } else {
            candidates(k)
        }
    }

    /// For a blocking broadcast of `bytes` bytes (counted here): the
    /// algorithm, and what to measure if the class is being measured;
    /// `None` when this call must take the decision of a vote that has not
    /// ended on this rank (the call is not counted: the caller finishes the
    /// vote, settles it and asks again).
    pub fn plan(&mut self, bytes: usize) -> Option<(Algorithm, Option<Sample>)> {
        self.plan_class(class_of(bytes))
    }

    /// As [`Tuner::plan`], for a call of class `k` (a size class, the
    /// barrier's or an allgather's).
    pub fn plan_class(&mut self, k: usize) -> Option<(Algorithm, Option<Sample>)> {
        let samples = self.samples_of(k);
        let cands = self.candidates(k);
        let first_measured = self.first_measured(k);
        let at_root = self.timed_at_root(k);
        let point_to_point = self.point_to_point;
        let c = &mut self.classes[k];
        if let [only] = cands {
            c.calls += 1;
            return Some((*only, None));
        }
        if c.again {
            c.restart(cands.len());
        }
        let call = c.calls + 1;
        // A decision taken from an earlier communicator was measured with
        // the leaders' decided: it serves at once.
        let inherited = matches!(&c.phase, Phase::Decided(d) if d.inherited);
        if call < first_measured && !inherited {
            c.calls = call;
            return Some((Algorithm::TwoLevel, None));
        }
        if matches!(c.phase, Phase::Decided(_)) && call > c.retune_at {
            let fresh = Phase::explore(cands.len());
            let Phase::Decided(d) = std::mem::replace(&mut c.phase, fresh) else {
                unreachable!("matched above");
            };
            c.last = Some(d);
        }
        let last = c.last.as_ref().map(|d| d.alg);
        let plan = match &mut c.phase {
            Phase::Explore {
                taken,
                ended: ended @ None,
                ..
            } => {
                // Each candidate's calls in a row, not in turns, and those
                // that go with the queued multicast work last: another
                // candidate's calls would run alongside their chains, and
                // pay for them.
                let candidate = measured_order(cands)
                    .nth(*taken / samples)
                    .expect("taken below samples × candidates");
                *taken += 1;
                if *taken == samples * cands.len() {
                    // Meanwhile: the last decision if the class is measured
                    // again.
                    let interim = last.or_else(|| meanwhile(cands, point_to_point));
                    *ended = Some(Ended { at: call, interim });
                }
                Some((
                    cands[candidate],
                    Some(Sample {
                        class: k,
                        candidate,
                        at_root,
                    }),
                ))
            }
            _ => c.next_unmeasured().map(|alg| (alg, None)),
        };
        if plan.is_some() {
            c.calls = call;
        }
        plan
    }

    /// The algorithm for a call that is not measured and not counted (a
    /// nonblocking broadcast), as the class's next blocking call would
    /// take it unless measured: `None` while the class has no decision (the
    /// fixed rule serves). The caller first finishes the vote where
    /// [`Tuner::must_await_vote`] says so.
    pub fn current(&self, bytes: usize) -> Option<Algorithm> {
        self.current_of(class_of(bytes))
    }

    /// As [`Tuner::current`], for class `k`.
    pub fn current_of(&self, k: usize) -> Option<Algorithm> {
        self.classes[k].next_unmeasured()
    }

    /// Whether the class of `bytes` needs its vote's decision before its
    /// next call: the vote has not been settled on this rank, and the calls
    /// it may take meanwhile are over (or there are none).
    pub fn must_await_vote(&self, bytes: usize) -> bool {
        self.must_await_vote_of(class_of(bytes))
    }

    /// As [`Tuner::must_await_vote`], for class `k`.
    pub fn must_await_vote_of(&self, k: usize) -> bool {
        let c = &self.classes[k];
        let waits = matches!(
            c.phase,
            Phase::Voting { .. } | Phase::Explore { ended: Some(_), .. }
        );
        waits && c.next_unmeasured().is_none()
    }

    /// Whether some class waits for its vote: only then are there votes to
    /// take from the background (which costs a lock).
    pub fn awaits_votes(&self) -> bool {
        self.voting > 0
    }

    /// Whether the class of `bytes` waits for its vote.
    #[cfg(test)]
    fn voting(&self, bytes: usize) -> bool {
        matches!(self.classes[class_of(bytes)].phase, Phase::Voting { .. })
    }

    /// Records a measured call that took `elapsed` as this rank timed it
    /// (`None`: a call timed at its root, on another rank) and, if it
    /// multicast to this rank, got `lost_permille` of its message by the
    /// chain instead. A root's time of a short message comes when the
    /// answers did, maybe after later calls.
    pub fn record(&mut self, s: Sample, elapsed: Option<Duration>, lost_permille: Option<u32>) {
        let cands = self.candidates(s.class);
        let us = if self.inject {
            Some(self.made_up(cands[s.candidate], s.candidate, cands.len()))
        } else {
            // At least 1: 0 votes "not timed here".
            elapsed.map(|e| u32::try_from(e.as_micros()).unwrap_or(u32::MAX).max(1))
        };
        let Phase::Explore {
            recorded,
            best,
            lost,
            ..
        } = &mut self.classes[s.class].phase
        else {
            return;
        };
        if let Some(us) = us {
            best[s.candidate] = best[s.candidate].min(us);
        }
        if let Some(l) = lost_permille {
            *lost = Some(lost.map_or(l, |m| m.min(l)));
        }
        *recorded += 1;
    }

    /// After a blocking call of `bytes` bytes: whether this rank's part of
    /// its class's vote is due. It goes out after the class's last measured
    /// call, every rank at the same call: short messages [`ANSWER_CALLS`]
    /// calls later, when the root's answers are in (if they are not yet,
    /// [`Due::Answers`]: the caller waits for them, records them and asks
    /// again). The vector holds each candidate's best time in µs (0 if this
    /// rank timed none of its calls), then its smallest loss: one datagram
    /// overtaken by the chain in a small message is not a network that
    /// drops multicast.
    pub fn due(&mut self, bytes: usize) -> Due {
        self.due_of(class_of(bytes))
    }

    /// As [`Tuner::due`], after a call of class `k` ([`BARRIER`] too).
    pub fn due_of(&mut self, k: usize) -> Due {
        // Every call asks: most find their class decided.
        if !matches!(self.classes[k].phase, Phase::Explore { ended: Some(_), .. }) {
            return Due::No;
        }
        let total = self.measured_calls(k);
        let delay = if self.timed_at_root(k) {
            ANSWER_CALLS
        } else {
            0
        };
        let c = &mut self.classes[k];
        let Phase::Explore {
            recorded,
            best,
            lost,
            ended: Some(ended),
            ..
        } = &mut c.phase
        else {
            return Due::No;
        };
        if c.calls < ended.at + delay {
            return Due::No;
        }
        if *recorded < total {
            return Due::Answers;
        }
        // The vote keeps each element's maximum: a candidate this rank did
        // not time counts as 0, so that the roots' times decide.
        let mut vector: Vec<u32> = std::mem::take(best)
            .into_iter()
            .map(|t| if t == u32::MAX { 0 } else { t })
            .collect();
        vector.push(lost.map_or(0, |l| DELIVERED_VOTE - l.min(1000)));
        c.phase = Phase::Voting {
            at: ended.at,
            interim: ended.interim,
        };
        self.voting += 1;
        Due::Vote(k, vector)
    }

    /// The first call of class `k` that may be measured. Over two levels,
    /// the leaders' communicator measures its own candidates on its first
    /// calls of the class, and each call over two levels is one there: the
    /// levels are measured once the leaders' decision serves (the same call
    /// on every rank, counted as the leaders' tuner counts). The leaders'
    /// allgather has blocks of a node's ranks, of a class as large or
    /// larger, measured in as many calls or fewer.
    fn first_measured(&self, k: usize) -> u64 {
        if self.two_levels {
            let one_level = if k == BARRIER {
                barrier_candidates(false)
            } else if is_allgather(k) {
                allgather_candidates(false)
            } else {
                candidates(k)
            };
            let measured = (self.samples_on(k, false) * one_level.len()) as u64;
            let mut leaders = measured + VOTE_CALLS;
            if Self::may_look_closer(k) {
                // The leaders may look closer: not known here.
                leaders += measured * CLOSER_FACTOR as u64 + VOTE_CALLS;
            }
            leaders + 1
        } else {
            1
        }
    }

    /// Measured calls of class `k` in all: of each candidate, of every one.
    fn measured_calls(&self, k: usize) -> usize {
        self.samples_of(k) * self.candidates(k).len()
    }

    /// Measured calls of each candidate in class `k`.
    fn samples_of(&self, k: usize) -> usize {
        let closer = if self.classes[k].closer {
            CLOSER_FACTOR
        } else {
            1
        };
        self.samples_on(k, self.two_levels) * closer
    }

    /// Whether class `k` may be looked at closer ([`CLOSER_FACTOR`]): the
    /// broadcasts above [`SHORT_UP_TO`] up to [`SPLIT_UP_TO`], where Open
    /// MPI's split binary tree and its own choice come close.
    fn may_look_closer(k: usize) -> bool {
        k < BARRIER && class_max(k) > SHORT_UP_TO && class_max(k) <= SPLIT_UP_TO
    }

    /// Whether a closer look at class `k`, whose candidates measured
    /// `times` (µs) on its first look, is worth taking.
    fn closer_look_pays(&self, k: usize, times: &[u32]) -> bool {
        if !Self::may_look_closer(k) {
            return false;
        }
        let calls = (self.samples_on(k, self.two_levels) * CLOSER_FACTOR) as u64;
        let cost: u64 = times.iter().map(|&t| u64::from(t) * calls).sum();
        cost <= CLOSER_LOOK_BUDGET.as_micros() as u64
    }

    /// Measured calls of each candidate in class `k` on a communicator of
    /// one or two levels.
    fn samples_on(&self, k: usize, two_levels: bool) -> usize {
        if k == BARRIER || class_max(sized(k)) <= SHORT_UP_TO {
            self.samples * SHORT_FACTOR
        } else if two_levels && k < BARRIER && class_max(k) >= LARGE_FROM {
            self.samples * LARGE_FACTOR
        } else {
            self.samples
        }
    }

    /// Times that differ from rank to rank, so that each rank alone would
    /// choose another candidate, while the slowest rank's times make
    /// multicast the agreed choice.
    fn made_up(&self, alg: Algorithm, candidate: usize, n: usize) -> u32 {
        let own = 1000 * (1 + ((self.rank + candidate) % n) as u32);
        own + if alg.goes_alongside() { 0 } else { 500 }
    }

    /// Takes the vote's result for class `k` (the same vector on every
    /// rank) and returns the decision.
    pub fn settle(&mut self, k: usize, result: &[u32]) -> &Decision {
        let cands = self.candidates(k);
        let times: Vec<u32> = (0..cands.len())
            .map(|i| {
                // 0: no rank timed it (not expected: every call has a root).
                result
                    .get(i)
                    .copied()
                    .filter(|&t| t > 0)
                    .unwrap_or(u32::MAX)
            })
            .collect();
        let lost_permille = match result.get(cands.len()).copied() {
            Some(v) if v > 0 => DELIVERED_VOTE - v.min(DELIVERED_VOTE),
            _ => 0,
        };
        let multicast_given_up = lost_permille >= GIVE_UP_LOSS_PERMILLE;
        let usable = |i: &usize| cands[*i] != Algorithm::Multicast || !multicast_given_up;
        let fastest = (0..cands.len())
            .filter(usable)
            .min_by_key(|&i| times[i])
            .expect("Open MPI's broadcast is always usable");
        let previous = u64::from(times[0]) * 1000;
        let margin = u64::from(times[fastest]) * (1000 + PREFER_PREVIOUS_PERMILLE);
        let alg = if previous <= margin {
            Algorithm::Previous
        } else {
            cands[fastest]
        };
        let calls = self.samples_of(k);
        // Not where multicast was given up: it would be measured again on
        // every call of the closer look, its datagrams lost on the way.
        let closer =
            !self.classes[k].closer && !multicast_given_up && self.closer_look_pays(k, &times);
        let c = &mut self.classes[k];
        let (at, interim) = match c.phase {
            Phase::Voting { at, interim } => {
                self.voting -= 1;
                (at, interim)
            }
            _ => (c.calls, None),
        };
        // The decision serves from the call every rank counts alike.
        let from = at + 1 + if interim.is_some() { VOTE_CALLS } else { 0 };
        if closer {
            // Measured again from that call on, the decision serving
            // meanwhile.
            c.retune_at = from - 1;
        } else {
            // Measured again after `interval` calls of the decision.
            c.retune_at = from - 1 + c.interval;
            c.interval *= 2;
        }
        c.closer = closer;
        c.last = None;
        c.phase = Phase::Decided(Decision {
            alg,
            times_us: cands.iter().copied().zip(times).collect(),
            lost_permille,
            calls,
            from,
            interim: interim.unwrap_or(alg),
            inherited: false,
        });
        let Phase::Decided(d) = &c.phase else {
            unreachable!("set above")
        };
        d
    }

    /// Measures every class again, as on a new communicator: the levels
    /// under the decisions changed (a node's lead moved). Its next calls go
    /// over the levels unmeasured while the new leaders' communicator
    /// measures its own, and the last decision serves nonblocking calls
    /// meanwhile. The same call on every rank. A class whose decision not
    /// every rank may have yet (being measured, voted on, or decided for
    /// later calls) is measured again from the first call after its
    /// decision serves on every rank ([`Class::restart`]).
    pub fn measure_again(&mut self) {
        for k in 0..self.classes.len() {
            let candidates = self.candidates(k);
            let c = &mut self.classes[k];
            let untouched = matches!(c.phase, Phase::Explore { taken: 0, .. });
            if !untouched && !c.restart(candidates.len()) {
                c.again = true;
            }
        }
    }

    /// Takes `d`, the decision of class `k` on an earlier communicator of
    /// the same processes that every rank holds alike, before the class's
    /// first call: its calls take it from the first, unmeasured, and the
    /// class is measured again after as many calls as a new decision's.
    /// Over two levels too, where it serves from the first call as well (it
    /// was measured once the leaders' decision served). Returns whether it
    /// did: not for a class that was called, nor for an algorithm that is
    /// not one of its candidates here.
    pub fn inherit(&mut self, k: usize, d: &Decision) -> bool {
        if k >= self.classes.len() {
            return false;
        }
        let cands = self.candidates(k);
        let fits = cands.len() > 1 && cands.contains(&d.alg);
        let c = &mut self.classes[k];
        if !fits || c.calls > 0 || !matches!(c.phase, Phase::Explore { taken: 0, .. }) {
            return false;
        }
        c.retune_at = c.interval;
        c.interval *= 2;
        c.phase = Phase::Decided(Decision {
            from: 1,
            interim: d.alg,
            inherited: true,
            ..d.clone()
        });
        true
    }

    /// The classes whose first measurement began (over two levels, whose
    /// calls began) and was not voted on, as far as every call's time is in
    /// ([`Progress`]): for a communicator about to be freed, after the
    /// answers to its calls as a root.
    pub fn progress(&self) -> Vec<(usize, Progress)> {
        (0..self.classes.len())
            .filter_map(|k| Some((k, self.progress_of(k)?)))
            .collect()
    }

    /// As [`Tuner::progress`], of class `k` alone.
    pub fn progress_of(&self, k: usize) -> Option<Progress> {
        let c = self.classes.get(k)?;
        match &c.phase {
            Phase::Explore {
                taken,
                recorded,
                best,
                lost,
                ended,
            } if c.calls > 0
                && recorded == taken
                && c.last.is_none()
                && !c.closer
                && !c.again
                && (ended.is_none() || *taken == self.measured_calls(k)) =>
            {
                Some(Progress {
                    calls: c.calls,
                    taken: *taken,
                    best: best.clone(),
                    lost: *lost,
                })
            }
            _ => None,
        }
    }

    /// Takes on `p`, class `k`'s measurement on an earlier communicator of
    /// the same processes, which every rank holds as far alike, before the
    /// class's first call: its calls count on from there (over two levels,
    /// the first ones unmeasured), its next calls measure what is left, and
    /// a measurement that was over goes to the vote after [`ANSWER_CALLS`]
    /// calls of the interim algorithm. Returns whether it did (as
    /// [`Tuner::inherit`]).
    pub fn take_on(&mut self, k: usize, p: &Progress) -> bool {
        if k >= self.classes.len() {
            return false;
        }
        let cands = self.candidates(k);
        let total = self.measured_calls(k);
        let interim = meanwhile(cands, self.point_to_point);
        let c = &mut self.classes[k];
        let untouched = matches!(c.phase, Phase::Explore { taken: 0, .. });
        if c.calls > 0
            || !untouched
            || p.taken as u64 > p.calls
            || p.taken > total
            || p.best.len() != cands.len()
        {
            return false;
        }
        // As when the last measured call ends the measurement (`plan_class`).
        let ended = (p.taken == total).then_some(Ended {
            at: p.calls,
            interim,
        });
        c.calls = p.calls;
        c.phase = Phase::Explore {
            taken: p.taken,
            recorded: p.taken,
            best: p.best.clone(),
            lost: p.lost,
            ended,
        };
        true
    }

    /// The classes decided so far, smallest first, for the decision table.
    pub fn decisions(&self) -> impl Iterator<Item = (usize, &Decision)> {
        self.classes
            .iter()
            .enumerate()
            .filter_map(|(k, c)| match &c.phase {
                Phase::Decided(d) => Some((k, d)),
                _ => c.last.as_ref().map(|d| (k, d)),
            })
    }
}

/// The decision table of a communicator, for `coll_ipmc_verbose`.
pub fn table(tuner: &Tuner) -> String {
    let mut out = String::new();
    for (k, d) in tuner.decisions() {
        let times: Vec<String> = d
            .times_us
            .iter()
            .map(|(a, t)| format!("{} {t} us", a.name()))
            .collect();
        let loss = if k < BARRIER && d.times_us.iter().any(|(a, _)| *a == Algorithm::Multicast) {
            format!(
                "; multicast loss {}.{}%",
                d.lost_permille / 10,
                d.lost_permille % 10
            )
        } else {
            String::new()
        };
        let each = if d.calls == 1 { "call" } else { "calls" };
        let when = if d.inherited {
            " on an earlier communicator of the same processes"
        } else {
            ""
        };
        out.push_str(&format!(
            "\n  {}: {} (measured{when}: {}{loss}; {} {each} each)",
            class_name(k),
            d.alg.name(),
            times.join(", "),
            d.calls,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn classes_are_powers_of_two() {
        assert_eq!(class_of(1), 0);
        assert_eq!(class_of(2), 1);
        assert_eq!(class_of(3), 2);
        assert_eq!(class_of(4), 2);
        assert_eq!(class_of(4097), 13);
        assert_eq!(class_max(13), 8192);
        assert_eq!(class_of(usize::MAX), 64);
        assert_eq!(class_max(64), usize::MAX);
        assert_eq!(candidates(class_of(SHORT_UP_TO)).len(), 2);
        assert_eq!(candidates(class_of(CHAIN_FROM)).len(), 4);
        assert_eq!(candidates(class_of(CHAIN_FROM + 1)).len(), 5);
        assert!(candidates(class_of(SPLIT_UP_TO)).contains(&Algorithm::SplitBinary));
        assert!(!candidates(class_of(SPLIT_UP_TO + 1)).contains(&Algorithm::SplitBinary));
        assert!(candidates(class_of(1 << 20)).contains(&Algorithm::Chain));
        assert!(candidates(class_of(1 << 30)).contains(&Algorithm::Multicast));
        assert!(candidates(class_of(TREES_UP_TO)).contains(&Algorithm::Binomial));
        assert!(!candidates(class_of(TREES_UP_TO + 1)).contains(&Algorithm::Binomial));
        assert!(candidates(class_of(SHORT_UP_TO + 1)).contains(&Algorithm::Binomial));
        assert!(candidates(class_of(SPLIT_UP_TO)).contains(&Algorithm::Binomial));
        assert!(!candidates(class_of(SPLIT_UP_TO + 1)).contains(&Algorithm::Binomial));
    }

    /// Two nodes of one rank: no multicast among the candidates; a class
    /// of one candidate is not measured; and the replaced broadcast serves
    /// while the ranks agree, so that the calls go on and the vote comes
    /// (on a root-timed class, `ANSWER_CALLS` after the last measured
    /// call).
    #[test]
    fn two_nodes_measure_point_to_point_algorithms_only() {
        let mut t = Tuner::new(1, 0, false).of_ranks(2).without_multicast();
        for k in 0..=allgather_class(usize::MAX) {
            assert!(!t.candidates(k).contains(&Algorithm::Multicast), "{k}");
            assert_eq!(t.candidates(k)[0], Algorithm::Previous, "{k}");
        }
        assert_eq!(
            t.candidates(class_of(65536)),
            [Algorithm::Previous, Algorithm::SplitBinary]
        );
        for _ in 0..3 {
            assert_eq!(t.plan(4096), Some((Algorithm::Previous, None)));
            assert_eq!(t.due(4096), Due::No);
        }
        // Slow enough that no closer look pays.
        let v = measure(&mut t, 65536, |a| match a {
            Algorithm::SplitBinary => 5500,
            _ => 8000,
        });
        assert_eq!(v, [8000, 5500, 0]);
        assert_eq!(t.settle(class_of(65536), &v).alg, Algorithm::SplitBinary);
        // Timed at the root, the vote came `ANSWER_CALLS` into the calls
        // that may take the interim.
        for _ in 0..VOTE_CALLS - ANSWER_CALLS {
            assert_eq!(t.plan(65536), Some((Algorithm::Previous, None)));
        }
        assert_eq!(t.plan(65536), Some((Algorithm::SplitBinary, None)));
        // Over two levels the flag changes nothing.
        let levels = Tuner::over_two_levels(1, 0, false).without_multicast();
        assert_eq!(
            levels.candidates(class_of(65536)),
            over_two_levels(class_of(65536), false)
        );
    }

    #[test]
    fn cheap_classes_are_measured_on_more_calls() {
        let mut t = Tuner::new(2, 0, false);
        let mut calls = 0;
        measure(&mut t, 8192, |_| {
            calls += 1;
            1
        });
        assert_eq!(calls, 2 * SHORT_FACTOR * 2);
        let mut calls = 0;
        measure(&mut t, 8193, |_| {
            calls += 1;
            1
        });
        assert_eq!(calls, 4 * 2);
    }

    #[test]
    fn small_messages_may_take_open_mpis_trees() {
        for (tree, i) in [(Algorithm::Binomial, 1), (Algorithm::Binary, 2)] {
            let mut t = Tuner::new(1, 0, false);
            let v = measure(&mut t, 1024, |a| match a {
                a if a == tree => 30,
                Algorithm::Previous => 40,
                _ => 60,
            });
            let mut expect = [40, 60, 60, 60, 0];
            expect[i] = 30;
            assert_eq!(v, expect);
            let d = t.settle(class_of(1024), &v);
            assert_eq!(d.alg, tree);
            assert_eq!(d.times_us[i], (tree, 30));
            // Multicast serves while the ranks agree, the tree from the
            // decision on.
            for _ in 0..interim_left(1024) {
                assert_eq!(t.plan(1024), Some((Algorithm::Multicast, None)));
            }
            assert_eq!(t.plan(1024), Some((tree, None)));
        }
    }

    #[test]
    fn short_messages_are_timed_at_their_root() {
        let few = Tuner::over_two_levels(1, 0, false).of_ranks(ROOT_TIMED_RANKS);
        let one_level = Tuner::new(1, 0, false).of_ranks(ROOT_TIMED_RANKS);
        for t in [&few, &one_level] {
            assert!(t.timed_at_root(class_of(ROOT_TIMED_UP_TO)));
            assert!(!t.timed_at_root(class_of(ROOT_TIMED_UP_TO + 1)));
        }
        // On many ranks the root's answers would cost more than the call:
        // each rank's own time serves above 8 KiB.
        let many = Tuner::over_two_levels(1, 0, false).of_ranks(ROOT_TIMED_RANKS + 1);
        let many_one_level = Tuner::new(1, 0, false).of_ranks(ROOT_TIMED_RANKS + 1);
        for t in [many, many_one_level] {
            assert!(t.timed_at_root(class_of(SHORT_UP_TO)));
            assert!(!t.timed_at_root(class_of(SHORT_UP_TO + 1)));
        }
        // The root of a longer call waits longer for the answers in it.
        let mut few = few;
        let sample = std::iter::from_fn(|| few.plan(65536))
            .find_map(|(_, s)| s)
            .expect("measured");
        assert!(sample.timed_at_root());
        assert_eq!(sample.answer_wait(), LONG_ANSWER_WAIT);
        let mut t = Tuner::new(1, 0, false);
        let (_, sample) = t.plan(SHORT_UP_TO).unwrap();
        assert_eq!(sample.unwrap().answer_wait(), ANSWER_WAIT);
        // Rank 0 is the root of every call; rank 1 times none of them and
        // votes 0, so the root's times decide.
        let mut root = Tuner::new(1, 0, false);
        let mut other = Tuner::new(1, 1, false);
        let at_root = measure(&mut root, 1024, |a| match a {
            Algorithm::Binomial => 30,
            Algorithm::Previous => 40,
            _ => 60,
        });
        let elsewhere = loop {
            let (_, s) = other.plan(1024).unwrap();
            if let Some(s) = s {
                other.record(s, None, None);
            }
            if let Due::Vote(_, v) = other.due(1024) {
                break v;
            }
        };
        assert_eq!(elsewhere, [0, 0, 0, 0, 0]);
        let result: Vec<u32> = at_root
            .iter()
            .zip(&elsewhere)
            .map(|(a, b)| *a.max(b))
            .collect();
        assert_eq!(
            other.settle(class_of(1024), &result).alg,
            Algorithm::Binomial
        );
        // A candidate that no rank timed is never the fastest.
        let mut t = Tuner::new(1, 0, false);
        measure(&mut t, 1024, |_| 1);
        let d = t.settle(class_of(1024), &[40, 0, 0, 0, 0]);
        assert_eq!(d.alg, Algorithm::Previous);
    }

    #[test]
    fn a_root_votes_when_its_answers_are_in() {
        let mut t = Tuner::new(1, 0, false);
        let mut samples = Vec::new();
        let mut calls = 0;
        while samples.len() < candidates(class_of(1024)).len() * SHORT_FACTOR {
            samples.extend(t.plan(1024).unwrap().1);
            calls += 1;
            assert_eq!(t.due(1024), Due::No);
        }
        // The answers have not come: the vote is due after ANSWER_CALLS
        // more calls, and waits for them.
        for _ in 1..ANSWER_CALLS {
            assert_eq!(t.plan(1024), Some((Algorithm::Multicast, None)));
            assert_eq!(t.due(1024), Due::No);
        }
        assert_eq!(t.plan(1024), Some((Algorithm::Multicast, None)));
        assert_eq!(t.due(1024), Due::Answers);
        for s in samples {
            t.record(s, Some(us(7)), None);
        }
        assert!(matches!(t.due(1024), Due::Vote(_, v) if v == [7, 7, 7, 7, 0]));
        assert_eq!(calls + ANSWER_CALLS as usize, 4 * 4 + 8);
        // Longer messages vote right after their last measured call.
        measure(&mut t, SHORT_UP_TO + 1, |_| 1);
        assert!(t.voting(SHORT_UP_TO + 1));
        assert_eq!(t.classes[class_of(SHORT_UP_TO + 1)].calls, 4);
    }

    #[test]
    fn barriers_are_a_class_of_their_own_timed_on_every_rank() {
        let mut t = Tuner::new(2, 3, false);
        let cands = barrier_candidates(false);
        let measured = cands.len() * 2 * SHORT_FACTOR;
        for call in 0..measured {
            let (alg, sample) = t.plan_class(BARRIER).unwrap();
            assert_eq!(alg, cands[call / (2 * SHORT_FACTOR)]);
            let sample = sample.expect("measured");
            assert!(!sample.timed_at_root(), "each rank times its own barrier");
            let took = match alg {
                Algorithm::Linear => 50,
                Algorithm::Multicast => 80,
                _ => 120,
            };
            t.record(sample, Some(us(took)), None);
            let due = t.due_of(BARRIER);
            if call + 1 < measured {
                assert_eq!(due, Due::No);
            } else {
                // Right after the last measured call: no answers to await.
                assert_eq!(due, Due::Vote(BARRIER, vec![120, 50, 80, 0]));
            }
        }
        // No broadcast class moved.
        assert!(t.classes[..BARRIER].iter().all(|c| c.calls == 0));
        for _ in 0..VOTE_CALLS {
            assert_eq!(t.plan_class(BARRIER), Some((Algorithm::Multicast, None)));
        }
        assert_eq!(t.plan_class(BARRIER), None, "the decision needs the vote");
        let d = t.settle(BARRIER, &[120, 50, 90, 0]);
        assert_eq!(d.alg, Algorithm::Linear);
        assert_eq!(t.plan_class(BARRIER), Some((Algorithm::Linear, None)));
        let row = table(&t);
        assert_eq!(
            row,
            "\n  barrier: linear (measured: previous 120 us, linear 50 us, multicast 90 us; \
             8 calls each)"
        );
    }

    #[test]
    fn allgathers_have_classes_of_their_own_per_block_size() {
        let mut t = Tuner::new(2, 0, false);
        let k = allgather_class(4096);
        assert!(k > BARRIER && k != allgather_class(4097));
        assert_eq!(class_name(k), "allgather of 2049-4096 bytes per rank");
        assert_eq!(
            class_name(allgather_class(1)),
            "allgather of 1-1 bytes per rank"
        );
        let mut order = Vec::new();
        while let Some((alg, Some(sample))) = t.plan_class(k) {
            assert!(!sample.timed_at_root(), "each rank times its own");
            order.push(alg);
        }
        let each = 2 * SHORT_FACTOR;
        assert_eq!(order.len(), 3 * each);
        assert_eq!(order[0], Algorithm::Previous);
        assert_eq!(order[each], Algorithm::Chain);
        assert_eq!(order[2 * each], Algorithm::Multicast);
        // Above 8 KiB per rank, 2 calls each.
        let big = allgather_class(65536);
        let measured = std::iter::from_fn(|| t.plan_class(big).and_then(|p| p.1)).count();
        assert_eq!(measured, 6);
        assert!(t.classes[..=BARRIER].iter().all(|c| c.calls == 0));
    }

    /// The calls of the class of `bytes` that still take the interim
    /// algorithm after [`measure`]: a short message's vote went out
    /// [`ANSWER_CALLS`] of them later.
    fn interim_left(bytes: usize) -> u64 {
        if class_max(class_of(bytes)) <= SHORT_UP_TO {
            VOTE_CALLS - ANSWER_CALLS
        } else {
            VOTE_CALLS
        }
    }

    /// Runs the calls of one class on one rank, timing the measured ones
    /// with `time(alg)`, until the rank's part of the vote is due.
    fn measure(t: &mut Tuner, bytes: usize, mut time: impl FnMut(Algorithm) -> u64) -> Vec<u32> {
        loop {
            let (alg, sample) = t.plan(bytes).expect("not voting");
            if let Some(sample) = sample {
                t.record(sample, Some(us(time(alg))), None);
            }
            match t.due(bytes) {
                Due::Vote(k, v) => {
                    assert_eq!(k, class_of(bytes));
                    return v;
                }
                Due::Answers => panic!("every call timed"),
                Due::No => {}
            }
        }
    }

    /// The last call of size `bytes` that the choice measures, the calls
    /// taking `us` µs whatever their algorithm (short enough that a closer
    /// look pays where one may be taken), every vote settled as it comes.
    fn last_measured(mut t: Tuner, bytes: usize, us_each: u64) -> u64 {
        let mut last = 0;
        for call in 1..=400 {
            let (_, sample) = t.plan(bytes).expect("settled as it came");
            if let Some(sample) = sample {
                t.record(sample, Some(us(us_each)), None);
                last = call;
            }
            if let Due::Vote(k, v) = t.due(bytes) {
                t.settle(k, &v);
            }
        }
        last
    }

    /// `bench/bcast_bench.c` leaves its first 144 calls of each size up to
    /// 128 KiB unrecorded, 48 above, so that the recorded ones run the
    /// decision: they must cover every measured call, over one level or
    /// two, the levels measured both ways or not.
    #[test]
    fn the_benchmarks_unrecorded_rounds_cover_the_measured_calls() {
        for k in 0..class_of(32 << 20) {
            let bytes = class_max(k);
            let warmup = if bytes <= 128 << 10 { 144 } else { 48 };
            let mut both = Tuner::over_two_levels(2, 0, false).of_ranks(16);
            assert!(both.offer_from_leader());
            let tuners = [
                Tuner::new(2, 0, false).of_ranks(16),
                Tuner::over_two_levels(2, 0, false).of_ranks(16),
                both,
            ];
            for t in tuners {
                let last = last_measured(t, bytes, 10);
                assert!(last <= warmup, "{bytes} bytes: measured until call {last}");
            }
        }
    }

    /// A look that measures again (a lead moved) may find a class's vote
    /// settled on some ranks and not yet on others (each settles it when it
    /// must): every rank then goes on alike, call after call, and measures
    /// the class again once all have the decision.
    #[test]
    fn measuring_again_while_a_vote_settles_keeps_the_ranks_alike() {
        let bytes = 4 << 20;
        let k = class_of(bytes);
        let time = |a| if a == Algorithm::Previous { 500 } else { 1000 };
        let mut early = Tuner::over_two_levels(1, 0, false);
        let mut late = Tuner::over_two_levels(1, 0, false);
        let v = measure(&mut early, bytes, time);
        assert_eq!(measure(&mut late, bytes, time), v);
        early.settle(k, &v);
        let (mut plans_early, mut plans_late) = (Vec::new(), Vec::new());
        for call in 0..300 {
            for (t, out) in [(&mut early, &mut plans_early), (&mut late, &mut plans_late)] {
                if call == 3 {
                    t.measure_again();
                }
                let (alg, sample) = t.plan(bytes).unwrap_or_else(|| {
                    t.settle(k, &v);
                    t.plan(bytes).expect("settled")
                });
                out.push(alg);
                if let Some(s) = sample {
                    t.record(s, Some(us(time(alg))), None);
                }
                if let Due::Vote(k, v) = t.due(bytes) {
                    t.settle(k, &v);
                }
            }
        }
        assert_eq!(plans_early, plans_late);
        // And the class was measured again, once both had the decision.
        assert!(plans_early[4..].contains(&Algorithm::ScatterAllgather));
    }

    /// Large messages over two levels also try the levels pipelined and
    /// Open MPI's scatter and ring allgather; short ones the linear one,
    /// middle ones the split binary tree.
    #[test]
    fn two_levels_try_more_candidates_at_the_ends() {
        use Algorithm::{Linear, ScatterAllgather, SplitBinary, TwoLevelPipelined};
        let large = over_two_levels(class_of(LARGE_FROM), false);
        assert!(large.contains(&ScatterAllgather) && large.contains(&TwoLevelPipelined));
        let middle = over_two_levels(class_of(64 << 10), false);
        assert!(!middle.contains(&ScatterAllgather) && !middle.contains(&Linear));
        assert!(!middle.contains(&TwoLevelPipelined) && middle.contains(&SplitBinary));
        assert!(!over_two_levels(class_of(SHORT_UP_TO), false).contains(&SplitBinary));
        assert!(!over_two_levels(class_of(SPLIT_UP_TO) + 1, false).contains(&SplitBinary));
        let mebibyte = over_two_levels(class_of(PIPELINED_FROM), false);
        assert!(mebibyte.contains(&TwoLevelPipelined) && !mebibyte.contains(&ScatterAllgather));
        assert!(over_two_levels(class_of(SHORT_UP_TO), false).contains(&Linear));
        for k in 0..class_of(64 << 20) {
            assert!(!candidates(k).contains(&ScatterAllgather), "class {k}");
        }
    }

    /// Where some node's ranks may copy either way, the levels are measured
    /// both ways above short messages, whole and pipelined; offered before
    /// any call only, so that every rank has the same candidates.
    #[test]
    fn the_levels_are_measured_both_ways_where_nodes_may_copy_either() {
        use Algorithm::{TwoLevel, TwoLevelFromLeader, TwoLevelPipelinedFromLeader};
        for k in 0..class_of(64 << 20) {
            let (slots, both) = (over_two_levels(k, false), over_two_levels(k, true));
            assert!(!slots.iter().any(|a| a.from_leader()), "class {k}");
            let pulled: Vec<_> = both.iter().filter(|a| a.from_leader()).collect();
            let rest: Vec<_> = both.iter().filter(|a| !a.from_leader()).copied().collect();
            assert_eq!(rest, slots, "class {k}");
            match class_max(k) {
                m if m <= SHORT_UP_TO => assert!(pulled.is_empty(), "class {k}"),
                m if m >= PIPELINED_FROM => {
                    assert_eq!(pulled, [&TwoLevelFromLeader, &TwoLevelPipelinedFromLeader])
                }
                _ => assert_eq!(pulled, [&TwoLevelFromLeader], "class {k}"),
            }
        }
        let bytes = 64 << 10;
        let mut t = Tuner::over_two_levels(1, 0, false);
        assert!(t.offer_from_leader());
        let first = candidates(class_of(bytes)).len() as u64 + VOTE_CALLS;
        for _ in 0..first {
            assert_eq!(t.plan(bytes), Some((TwoLevel, None)));
        }
        let mut seen = Vec::new();
        let v = measure(&mut t, bytes, |alg| {
            seen.push(alg);
            if alg == TwoLevelFromLeader {
                600
            } else {
                900
            }
        });
        assert!(seen.contains(&TwoLevel) && seen.contains(&TwoLevelFromLeader));
        assert_eq!(t.settle(class_of(bytes), &v).alg, TwoLevelFromLeader);
        // Too late once a call was counted; never on one level.
        assert!(!t.offer_from_leader());
        assert!(!Tuner::new(1, 0, false).offer_from_leader());
    }

    #[test]
    fn two_levels_are_measured_once_the_leaders_decided() {
        let mut t = Tuner::over_two_levels(2, 0, false);
        let bytes = 512 << 10;
        let k = class_of(bytes);
        // The leaders' communicator measures its candidates on these calls
        // and decides by the last of them.
        let leaders = 2 * candidates(k).len() as u64 + VOTE_CALLS;
        for _ in 0..leaders {
            assert_eq!(t.plan(bytes), Some((Algorithm::TwoLevel, None)));
            assert_eq!(t.due(bytes), Due::No);
        }
        let mut seen = Vec::new();
        let v = measure(&mut t, bytes, |alg| {
            seen.push(alg);
            if alg == Algorithm::TwoLevel {
                700
            } else {
                1000
            }
        });
        use Algorithm::{Previous, TwoLevel};
        assert_eq!(seen, [Previous, Previous, TwoLevel, TwoLevel]);
        assert_eq!(v, [1000, 700, 0]);
        // While the ranks agree, the levels go on (they need not wait).
        assert_eq!(t.plan(bytes), Some((TwoLevel, None)));
        assert_eq!(t.settle(k, &[1000, 700, 0]).alg, TwoLevel);
        // Open MPI's broadcast (han, which knows the nodes too) is kept
        // where the levels are not faster.
        let mut t = Tuner::over_two_levels(1, 0, false);
        let v = measure(&mut t, 100, |alg| if alg == Previous { 20 } else { 30 });
        assert_eq!(t.settle(class_of(100), &v).alg, Previous);
        // Where the leaders may look closer, after that look too.
        let mut t = Tuner::over_two_levels(2, 0, false);
        let bytes = 64 << 10;
        let first = 2 * candidates(class_of(bytes)).len() as u64;
        for _ in 0..first + VOTE_CALLS + first * CLOSER_FACTOR as u64 + VOTE_CALLS {
            assert_eq!(t.plan(bytes), Some((TwoLevel, None)));
        }
        assert!(t.plan(bytes).unwrap().1.is_some());
    }

    #[test]
    fn large_messages_over_two_levels_are_measured_on_more_calls() {
        let bytes = 2 * LARGE_FROM;
        let k = class_of(bytes);
        let mut t = Tuner::over_two_levels(2, 0, false);
        // The leaders' communicator, of one level, measures on as many
        // calls as it would anywhere.
        for _ in 0..2 * candidates(k).len() as u64 + VOTE_CALLS {
            assert_eq!(t.plan(bytes), Some((Algorithm::TwoLevel, None)));
        }
        let mut seen = Vec::new();
        measure(&mut t, bytes, |alg| {
            seen.push(alg);
            1000
        });
        let each = 2 * LARGE_FACTOR;
        let cands = over_two_levels(k, false);
        assert_eq!(seen.len(), each * cands.len());
        let order: Vec<usize> = measured_order(cands).collect();
        for (i, alg) in seen.iter().enumerate() {
            assert_eq!(*alg, cands[order[i / each]], "call {i}");
        }
        // The levels, which go alongside the queued multicast work, last.
        assert!(seen[seen.len() - 1].over_levels());
        // Below, and on one level, as many as `tune_calls`.
        let mut t = Tuner::over_two_levels(2, 0, false);
        let mut n = 0;
        measure(&mut t, LARGE_FROM / 2, |_| {
            n += 1;
            1000
        });
        assert_eq!(
            n,
            2 * over_two_levels(class_of(LARGE_FROM / 2), false).len()
        );
        let mut t = Tuner::new(2, 0, false);
        let mut n = 0;
        measure(&mut t, bytes, |_| {
            n += 1;
            1000
        });
        assert_eq!(n, 2 * candidates(k).len());
    }

    #[test]
    fn candidates_take_turns_and_the_fastest_wins() {
        let mut t = Tuner::new(2, 0, false);
        let mut seen = Vec::new();
        for _ in 0..8 {
            let (alg, s) = t.plan(65536).unwrap();
            seen.push(alg);
            let took = if alg == Algorithm::Multicast { 50 } else { 100 };
            t.record(s.unwrap(), Some(us(took)), Some(0));
            let v = t.due(65536);
            assert_eq!(matches!(v, Due::Vote(..)), seen.len() == 8);
        }
        use Algorithm::{Binomial, Multicast, Previous, SplitBinary};
        assert_eq!(
            seen,
            [
                Previous,
                Previous,
                SplitBinary,
                SplitBinary,
                Binomial,
                Binomial,
                Multicast,
                Multicast
            ]
        );
        assert!(t.voting(65536) && t.awaits_votes());
        // While the vote runs, the class multicasts.
        assert_eq!(t.plan(65536), Some((Algorithm::Multicast, None)));
        let d = t.settle(class_of(65536), &[100, 50, 80, 90, 0]);
        assert_eq!(d.alg, Algorithm::Multicast);
        assert!(!t.awaits_votes());
        assert_eq!(t.plan(65536), Some((Algorithm::Multicast, None)));
        assert_eq!(t.current(65536), Some(Algorithm::Multicast));
        // Other classes are measured on their own.
        assert_eq!(t.current(1000), None);
        assert!(t.plan(1000).unwrap().1.is_some());
    }

    /// A class whose calls are cheap is measured again at once on more
    /// calls, the first decision serving meanwhile; one whose calls are
    /// not is decided on its first look.
    #[test]
    fn cheap_classes_are_looked_at_closer() {
        use Algorithm::{Multicast, Previous, SplitBinary};
        let bytes = 65536;
        let k = class_of(bytes);
        let mut t = Tuner::new(2, 0, false);
        let mut calls = 0;
        let first = measure(&mut t, bytes, |_| {
            calls += 1;
            300
        });
        assert_eq!(calls, 4 * 2);
        assert_eq!(first, [300, 300, 300, 300, 0]);
        // 4 candidates of 300 µs on 8 calls each: 9.6 ms, a closer look.
        assert_eq!(t.settle(k, &[300, 400, 350, 380, 0]).alg, Previous);
        assert!(table(&t).ends_with("; 2 calls each)"), "{}", table(&t));
        for _ in 0..interim_left(bytes) {
            assert_eq!(t.plan(bytes), Some((Multicast, None)));
        }
        let mut calls = 0;
        let closer = measure(&mut t, bytes, |a| {
            calls += 1;
            if a == SplitBinary {
                200
            } else {
                300
            }
        });
        assert_eq!(calls, 4 * 2 * CLOSER_FACTOR);
        assert_eq!(closer, [300, 300, 200, 300, 0]);
        // Meanwhile the first look's decision serves.
        for _ in 0..interim_left(bytes) {
            assert_eq!(t.plan(bytes), Some((Previous, None)));
        }
        assert_eq!(t.settle(k, &closer).alg, SplitBinary);
        assert!(table(&t).ends_with("; 8 calls each)"), "{}", table(&t));
        // Decided: no third look.
        for _ in 0..100 {
            assert_eq!(t.plan(bytes), Some((SplitBinary, None)));
        }
        // Multicast given up (every datagram lost): Open MPI's fastest
        // serves at once, with no closer look that would multicast again.
        let mut t = Tuner::new(2, 0, false);
        measure(&mut t, bytes, |_| 1);
        assert_eq!(t.settle(k, &[300, 100, 200, 380, 1]).alg, SplitBinary);
        for _ in 0..interim_left(bytes) {
            assert_eq!(t.plan(bytes), Some((Multicast, None)));
        }
        for _ in 0..100 {
            assert_eq!(t.plan(bytes), Some((SplitBinary, None)));
        }
        // Calls that cost more than the budget on a closer look: 6.8 ms a
        // round, 54.4 ms on 8 calls each.
        let mut t = Tuner::new(2, 0, false);
        measure(&mut t, bytes, |_| 1);
        assert_eq!(t.settle(k, &[2000, 1400, 1800, 1600, 0]).alg, Multicast);
        for _ in 0..interim_left(bytes) + 100 {
            assert_eq!(t.plan(bytes), Some((Multicast, None)));
        }
        // Short messages are measured on more calls from the first look.
        let mut t = Tuner::new(2, 0, false);
        measure(&mut t, SHORT_UP_TO, |_| 1);
        t.settle(class_of(SHORT_UP_TO), &[30, 20, 0]);
        for _ in 0..interim_left(SHORT_UP_TO) + 100 {
            assert_eq!(t.plan(SHORT_UP_TO).unwrap().1, None);
        }
    }

    #[test]
    fn the_decision_serves_from_a_call_every_rank_counts_alike() {
        // Two ranks settle the same vote at different calls; both take the
        // decision from the same call on.
        let mut ranks: Vec<Tuner> = (0..2).map(|r| Tuner::new(1, r, false)).collect();
        let mut taken: Vec<Vec<Algorithm>> = vec![Vec::new(); 2];
        for (r, t) in ranks.iter_mut().enumerate() {
            measure(t, 4096, |_| 1);
            // Rank 0's vote ends at once, rank 1's after 5 more calls.
            let settle_after = [0, 5][r];
            for call in 0..40 {
                if call == settle_after {
                    t.settle(class_of(4096), &[100, 500, 0]);
                }
                let (alg, sample) = t.plan(4096).expect("within the vote's calls");
                assert!(sample.is_none());
                taken[r].push(alg);
            }
        }
        assert_eq!(taken[0], taken[1]);
        let switch = interim_left(4096) as usize;
        assert!(taken[0][..switch]
            .iter()
            .all(|&a| a == Algorithm::Multicast));
        assert!(taken[0][switch..].iter().all(|&a| a == Algorithm::Previous));
    }

    #[test]
    fn a_rank_waits_for_its_vote_only_after_the_votes_calls() {
        let mut t = Tuner::new(1, 0, false);
        measure(&mut t, 4096, |_| 1);
        for _ in 0..interim_left(4096) {
            assert!(!t.must_await_vote(4096));
            assert_eq!(t.current(4096), Some(Algorithm::Multicast));
            assert_eq!(t.plan(4096), Some((Algorithm::Multicast, None)));
        }
        // The next call needs the decision: not counted until it is there.
        assert!(t.must_await_vote(4096));
        assert_eq!(t.plan(4096), None);
        assert_eq!(t.plan(4096), None);
        t.settle(class_of(4096), &[100, 500, 0]);
        assert_eq!(t.plan(4096), Some((Algorithm::Previous, None)));
        // Multicast is a candidate at every size, so large classes
        // multicast while they vote too.
        let big = 32 << 20;
        measure(&mut t, big, |_| 1);
        for _ in 0..interim_left(big) {
            assert_eq!(t.plan(big), Some((Algorithm::Multicast, None)));
        }
        assert!(t.must_await_vote(big));
        assert_eq!(t.plan(big), None);
        // Calls too long for a closer look.
        let d = t.settle(class_of(big), &[100_000, 80_000, 50_000, 0]);
        assert_eq!(d.alg, Algorithm::Chain);
        assert_eq!(t.plan(big), Some((Algorithm::Chain, None)));
    }

    #[test]
    fn open_mpi_keeps_near_ties() {
        let mut t = Tuner::new(1, 0, false);
        measure(&mut t, 4096, |_| 1);
        assert_eq!(
            t.settle(class_of(4096), &[1020, 1000, 0]).alg,
            Algorithm::Previous
        );
        let mut t = Tuner::new(1, 0, false);
        measure(&mut t, 4096, |_| 1);
        assert_eq!(
            t.settle(class_of(4096), &[1040, 1000, 0]).alg,
            Algorithm::Multicast
        );
    }

    #[test]
    fn the_vote_decides_not_the_rank() {
        // Every rank alone prefers another candidate; the vote's vector
        // (the maximum over ranks) gives one decision to all.
        let n = candidates(class_of(4 << 20)).len();
        let vectors: Vec<Vec<u32>> = (0..5)
            .map(|rank| measure(&mut Tuner::new(1, rank, true), 4 << 20, |_| 0))
            .collect();
        let own: Vec<usize> = vectors
            .iter()
            .map(|v| (0..n).min_by_key(|&i| v[i]).unwrap())
            .collect();
        assert!(own.iter().any(|&c| c != own[0]), "{own:?}");
        let result: Vec<u32> = (0..=n)
            .map(|i| vectors.iter().map(|v| v[i]).max().unwrap())
            .collect();
        for rank in 0..5 {
            let mut t = Tuner::new(1, rank, true);
            measure(&mut t, 4 << 20, |_| 0);
            assert_eq!(
                t.settle(class_of(4 << 20), &result).alg,
                Algorithm::Multicast
            );
        }
    }

    #[test]
    fn a_rank_reports_its_smallest_loss() {
        let mut t = Tuner::new(2, 0, false);
        let mut vector = None;
        // One per measured call: 4 candidates of 2 calls each.
        let losses = [Some(1000), None, Some(200), Some(900)];
        for lost in losses.into_iter().chain([None; 4]) {
            let (_, s) = t.plan(65536).unwrap();
            t.record(s.unwrap(), Some(us(5)), lost);
            vector = match t.due(65536) {
                Due::Vote(_, v) => Some(v),
                _ => None,
            };
        }
        // Voted as the share delivered by multicast, plus one.
        assert_eq!(vector.unwrap().last(), Some(&801));
    }

    /// The vote's loss element after every rank's own: `None` for the
    /// root, else the rank's smallest loss over its measured calls.
    fn voted_loss(losses: &[Option<u32>]) -> u32 {
        let mut max = 0;
        for (rank, &lost) in losses.iter().enumerate() {
            let mut t = Tuner::new(1, rank, false);
            let mut vector = None;
            while vector.is_none() {
                let (_, s) = t.plan(65536).unwrap();
                t.record(s.unwrap(), Some(us(5)), lost);
                if let Due::Vote(_, v) = t.due(65536) {
                    vector = Some(v);
                }
            }
            max = max.max(*vector.unwrap().last().unwrap());
        }
        max
    }

    #[test]
    fn multicast_that_loses_most_data_is_given_up() {
        let given_up = |losses: &[Option<u32>]| {
            let mut t = Tuner::new(1, 0, false);
            measure(&mut t, 65536, |_| 1);
            let d = t.settle(class_of(65536), &[1000, 10, 2000, 2000, voted_loss(losses)]);
            (d.alg == Algorithm::Previous, d.lost_permille)
        };
        // Every receiver got most of it by the chain: the network drops it.
        let limit = Some(GIVE_UP_LOSS_PERMILLE);
        assert_eq!(given_up(&[None, limit, Some(1000)]), (true, 500));
        // One rank alone (late to read its socket, or cut off): the times
        // decide, and multicast is faster here.
        assert_eq!(given_up(&[None, Some(1000), Some(10), Some(0)]), (false, 0));
        assert_eq!(given_up(&[None, Some(499), Some(1000)]), (false, 499));
        // Nothing measured (the root, messages of a few datagrams): no loss.
        assert_eq!(given_up(&[None, None]), (false, 0));
    }

    #[test]
    fn a_class_is_measured_again_later() {
        let mut t = Tuner::new(1, 0, false);
        measure(
            &mut t,
            100,
            |a| if a == Algorithm::Previous { 10 } else { 90 },
        );
        t.settle(class_of(100), &[10, 90, 90, 0]);
        for _ in 0..interim_left(100) {
            assert_eq!(t.plan(100), Some((Algorithm::Multicast, None)));
        }
        for _ in 0..RETUNE_AFTER {
            assert_eq!(t.plan(100), Some((Algorithm::Previous, None)));
        }
        // Measuring again; meanwhile the last decision serves nonblocking calls.
        assert!(t.plan(100).unwrap().1.is_some());
        assert_eq!(t.current(100), Some(Algorithm::Previous));
        assert_eq!(t.decisions().count(), 1);
    }
}
