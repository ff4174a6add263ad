//! The automatic choice of algorithm, measured on the calls themselves (as
//! STAR-MPI does): per size class (powers of two), the first broadcasts of
//! a communicator take each candidate algorithm in turn, every rank times its
//! own calls, and the ranks agree on the fastest in the background
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

use crate::component::config::{Algorithm, AUTO_LARGE};

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

/// Calls of a class before it is first measured again.
const RETUNE_AFTER: u64 = 1024;
/// Calls of a class between the end of its measurements and the call at
/// which the ranks' decision takes effect (see the module's summary).
pub const VOTE_CALLS: u64 = 16;
/// Open MPI's own broadcast is kept unless another is faster by more than
/// this (per mille): it needs no datagrams, and measurements are noisy.
const PREFER_PREVIOUS_PERMILLE: u64 = 30;
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
/// The ipmc chain measured against the others from this size on (below,
/// its per-segment steps cannot pay off against a tree).
const CHAIN_FROM: usize = 1 << 20;
/// Classes of messages up to this size are measured on
/// [`CHEAP_FACTOR`] times as many calls: a call takes well under a
/// millisecond, and how late a rank entered it, or when it got a core, is
/// of the order of what tells the candidates apart; the best of more calls
/// comes closer to each candidate's own time, at little cost.
const CHEAP_UP_TO: usize = 8192;
const CHEAP_FACTOR: usize = 4;
/// Open MPI's binomial tree measured against the others up to this size:
/// there one tree step costs about a message's latency, and the binomial
/// tree, whose depth is log2 of the ranks, was the fastest of Open MPI's
/// fixed algorithms at 1 KiB on 4 to 16 emulated hosts (Open MPI's own
/// choice matched it only at 4). From 4 KiB multicast or the replaced
/// broadcast won.
const BINOMIAL_UP_TO: usize = 2048;

/// What a rank measures for one call of a class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    class: usize,
    candidate: usize,
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
    /// The class's call from which `alg` serves; the calls before it take
    /// `interim`, as during the vote.
    pub from: u64,
    interim: Algorithm,
}

enum Phase {
    /// Candidates take turns; `done` calls were measured, `best` is this
    /// rank's best time per candidate (µs).
    Explore {
        done: usize,
        best: Vec<u32>,
        lost: Option<u32>,
    },
    /// This rank's measurements went to the vote after the class's call
    /// `at`; the next calls take `interim` (if any) until the decision.
    Voting {
        at: u64,
        interim: Option<Algorithm>,
    },
    Decided(Decision),
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
}

impl Class {
    /// The algorithm of the class's next call, unless it is measured or
    /// needs the decision of a vote that has not ended on this rank
    /// (`None` then; before any decision, the last one if there was one).
    fn next_unmeasured(&self) -> Option<Algorithm> {
        let call = self.calls + 1;
        match &self.phase {
            Phase::Decided(d) if call < d.from => Some(d.interim),
            Phase::Decided(d) => Some(d.alg),
            Phase::Voting { at, interim } => interim.filter(|_| call <= at + VOTE_CALLS),
            Phase::Explore { .. } => self.last.as_ref().map(|d| d.alg),
        }
    }
}

/// A communicator's measured choice, the same on every rank.
pub struct Tuner {
    /// Calls per candidate (`coll_ipmc_tune_calls`; [`CHEAP_FACTOR`] times
    /// as many up to [`CHEAP_UP_TO`] bytes).
    samples: usize,
    rank: usize,
    /// `coll_ipmc_inject_timing`: made-up times for tests.
    inject: bool,
    classes: Vec<Class>,
    /// Classes whose vote has not been settled.
    voting: usize,
}

/// The algorithms measured against each other in class `k`; Open MPI's
/// own broadcast first.
pub fn candidates(k: usize) -> &'static [Algorithm] {
    use Algorithm::{Binomial, Chain, Multicast, Previous};
    let max = class_max(k);
    if max <= BINOMIAL_UP_TO {
        &[Previous, Binomial, Multicast]
    } else if max > AUTO_LARGE {
        // Multicast keeps a copy of the message per rank while it runs.
        &[Previous, Chain]
    } else if max > CHAIN_FROM {
        &[Previous, Multicast, Chain]
    } else {
        &[Previous, Multicast]
    }
}

impl Tuner {
    pub fn new(samples: usize, rank: usize, inject: bool) -> Self {
        let classes = (0..CLASSES)
            .map(|k| Class {
                calls: 0,
                phase: Phase::Explore {
                    done: 0,
                    best: vec![u32::MAX; candidates(k).len()],
                    lost: None,
                },
                retune_at: 0,
                interval: RETUNE_AFTER,
                last: None,
            })
            .collect();
        Tuner {
            samples: samples.max(1),
            rank,
            inject,
            classes,
            voting: 0,
        }
    }

    /// For a blocking broadcast of `bytes` bytes (counted here): the
    /// algorithm, and what to measure if the class is being measured;
    /// `None` when this call must take the decision of a vote that has not
    /// ended on this rank (the call is not counted: the caller finishes the
    /// vote, settles it and asks again).
    pub fn plan(&mut self, bytes: usize) -> Option<(Algorithm, Option<Sample>)> {
        let k = class_of(bytes);
        let samples = self.samples_of(k);
        let c = &mut self.classes[k];
        let call = c.calls + 1;
        if matches!(c.phase, Phase::Decided(_)) && call > c.retune_at {
            let Phase::Decided(d) = std::mem::replace(
                &mut c.phase,
                Phase::Explore {
                    done: 0,
                    best: vec![u32::MAX; candidates(k).len()],
                    lost: None,
                },
            ) else {
                unreachable!("matched above");
            };
            c.last = Some(d);
        }
        let plan = match &c.phase {
            Phase::Explore { done, .. } => {
                let cands = candidates(k);
                // Each candidate's calls in a row, not in turns: a call of
                // another algorithm first finishes the multicast calls
                // before it, which would tie a rank that runs ahead to the
                // others at every turn.
                let candidate = (done / samples) % cands.len();
                Some((
                    cands[candidate],
                    Some(Sample {
                        class: k,
                        candidate,
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
        self.classes[class_of(bytes)].next_unmeasured()
    }

    /// Whether the class of `bytes` needs its vote's decision before its
    /// next call: the vote has not been settled on this rank, and the calls
    /// it may take meanwhile are over (or there are none).
    pub fn must_await_vote(&self, bytes: usize) -> bool {
        let c = &self.classes[class_of(bytes)];
        matches!(c.phase, Phase::Voting { .. }) && c.next_unmeasured().is_none()
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

    /// Records a measured call that took `elapsed` on this rank and, if it
    /// multicast to this rank, got `lost_permille` of its message by the
    /// chain instead. When the class's measurements are complete: the class
    /// and this rank's vector for the vote (each candidate's best time in
    /// µs, then its smallest loss: one datagram overtaken by the chain in a
    /// small message is not a network that drops multicast).
    pub fn record(
        &mut self,
        s: Sample,
        elapsed: Duration,
        lost_permille: Option<u32>,
    ) -> Option<(usize, Vec<u32>)> {
        let n = candidates(s.class).len();
        let us = if self.inject {
            self.made_up(candidates(s.class)[s.candidate], s.candidate, n)
        } else {
            u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX)
        };
        let total = self.samples_of(s.class) * n;
        let c = &mut self.classes[s.class];
        let Phase::Explore { done, best, lost } = &mut c.phase else {
            return None;
        };
        best[s.candidate] = best[s.candidate].min(us);
        if let Some(l) = lost_permille {
            *lost = Some(lost.map_or(l, |m| m.min(l)));
        }
        *done += 1;
        if *done < total {
            return None;
        }
        let mut vector = std::mem::take(best);
        vector.push(lost.map_or(0, |l| DELIVERED_VOTE - l.min(1000)));
        // Meanwhile: the last decision if the class is measured again, else
        // multicast, whose calls need not wait for the vote.
        let interim = c.last.as_ref().map(|d| d.alg).or_else(|| {
            candidates(s.class)
                .contains(&Algorithm::Multicast)
                .then_some(Algorithm::Multicast)
        });
        c.phase = Phase::Voting {
            at: c.calls,
            interim,
        };
        self.voting += 1;
        Some((s.class, vector))
    }

    /// Measured calls of each candidate in class `k`.
    fn samples_of(&self, k: usize) -> usize {
        if class_max(k) <= CHEAP_UP_TO {
            self.samples * CHEAP_FACTOR
        } else {
            self.samples
        }
    }

    /// Times that differ from rank to rank, so that each rank alone would
    /// choose another candidate, while the slowest rank's times make
    /// multicast the agreed choice.
    fn made_up(&self, alg: Algorithm, candidate: usize, n: usize) -> u32 {
        let own = 1000 * (1 + ((self.rank + candidate) % n) as u32);
        own + if alg == Algorithm::Multicast { 0 } else { 500 }
    }

    /// Takes the vote's result for class `k` (the same vector on every
    /// rank) and returns the decision.
    pub fn settle(&mut self, k: usize, result: &[u32]) -> &Decision {
        let cands = candidates(k);
        let times: Vec<u32> = (0..cands.len())
            .map(|i| result.get(i).copied().unwrap_or(u32::MAX))
            .collect();
        let lost_permille = match result.get(cands.len()).copied() {
            Some(v) if v > 0 => DELIVERED_VOTE - v.min(DELIVERED_VOTE),
            _ => 0,
        };
        let usable =
            |i: &usize| cands[*i] != Algorithm::Multicast || lost_permille < GIVE_UP_LOSS_PERMILLE;
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
        // Measured again after `interval` calls of the decision.
        c.retune_at = from - 1 + c.interval;
        c.interval *= 2;
        c.last = None;
        c.phase = Phase::Decided(Decision {
            alg,
            times_us: cands.iter().copied().zip(times).collect(),
            lost_permille,
            from,
            interim: interim.unwrap_or(alg),
        });
        let Phase::Decided(d) = &c.phase else {
            unreachable!("set above")
        };
        d
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
        let low = if k == 0 { 1 } else { class_max(k - 1) + 1 };
        let times: Vec<String> = d
            .times_us
            .iter()
            .map(|(a, t)| format!("{} {t} us", a.name()))
            .collect();
        out.push_str(&format!(
            "\n  {low}-{} bytes: {} (measured: {}; multicast loss {}.{}%)",
            class_max(k),
            d.alg.name(),
            times.join(", "),
            d.lost_permille / 10,
            d.lost_permille % 10
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
        assert_eq!(candidates(class_of(1 << 20)).len(), 2);
        assert_eq!(candidates(class_of((1 << 20) + 1)).len(), 3);
        assert!(!candidates(class_of(AUTO_LARGE + 1)).contains(&Algorithm::Multicast));
        assert!(candidates(class_of(BINOMIAL_UP_TO)).contains(&Algorithm::Binomial));
        assert!(!candidates(class_of(BINOMIAL_UP_TO + 1)).contains(&Algorithm::Binomial));
    }

    #[test]
    fn cheap_classes_are_measured_on_more_calls() {
        let mut t = Tuner::new(2, 0, false);
        let mut calls = 0;
        measure(&mut t, 8192, |_| {
            calls += 1;
            1
        });
        assert_eq!(calls, 2 * CHEAP_FACTOR * 2);
        let mut calls = 0;
        measure(&mut t, 8193, |_| {
            calls += 1;
            1
        });
        assert_eq!(calls, 2 * 2);
    }

    #[test]
    fn small_messages_may_take_open_mpis_binomial_tree() {
        let mut t = Tuner::new(1, 0, false);
        let v = measure(&mut t, 1024, |a| match a {
            Algorithm::Binomial => 30,
            Algorithm::Previous => 40,
            _ => 60,
        });
        assert_eq!(v, [40, 30, 60, 0]);
        let d = t.settle(class_of(1024), &v);
        assert_eq!(d.alg, Algorithm::Binomial);
        assert_eq!(d.times_us[1], (Algorithm::Binomial, 30));
        // Multicast serves while the ranks agree, the tree from the decision on.
        for _ in 0..VOTE_CALLS {
            assert_eq!(t.plan(1024), Some((Algorithm::Multicast, None)));
        }
        assert_eq!(t.plan(1024), Some((Algorithm::Binomial, None)));
    }

    /// Runs the measured calls of one class on one rank with `time(alg)`.
    fn measure(t: &mut Tuner, bytes: usize, mut time: impl FnMut(Algorithm) -> u64) -> Vec<u32> {
        loop {
            let (alg, sample) = t.plan(bytes).expect("not voting");
            let sample = sample.expect("measuring");
            if let Some((k, v)) = t.record(sample, us(time(alg)), None) {
                assert_eq!(k, class_of(bytes));
                return v;
            }
        }
    }

    #[test]
    fn candidates_take_turns_and_the_fastest_wins() {
        let mut t = Tuner::new(2, 0, false);
        let mut seen = Vec::new();
        for _ in 0..4 {
            let (alg, s) = t.plan(65536).unwrap();
            seen.push(alg);
            let took = if alg == Algorithm::Multicast { 50 } else { 100 };
            let v = t.record(s.unwrap(), us(took), Some(0));
            assert_eq!(v.is_some(), seen.len() == 4);
        }
        assert_eq!(
            seen,
            [
                Algorithm::Previous,
                Algorithm::Previous,
                Algorithm::Multicast,
                Algorithm::Multicast
            ]
        );
        assert!(t.voting(65536) && t.awaits_votes());
        // While the vote runs, the class multicasts.
        assert_eq!(t.plan(65536), Some((Algorithm::Multicast, None)));
        let d = t.settle(class_of(65536), &[100, 50, 0]);
        assert_eq!(d.alg, Algorithm::Multicast);
        assert!(!t.awaits_votes());
        assert_eq!(t.plan(65536), Some((Algorithm::Multicast, None)));
        assert_eq!(t.current(65536), Some(Algorithm::Multicast));
        // Other classes are measured on their own.
        assert_eq!(t.current(1000), None);
        assert!(t.plan(1000).unwrap().1.is_some());
    }

    #[test]
    fn the_decision_serves_from_a_call_every_rank_counts_alike() {
        // Two ranks settle the same vote at different calls; both take the
        // decision from the same call on.
        let mut ranks: Vec<Tuner> = (0..2).map(|r| Tuner::new(1, r, false)).collect();
        let mut taken: Vec<Vec<Algorithm>> = vec![Vec::new(); 2];
        for (r, t) in ranks.iter_mut().enumerate() {
            measure(t, 4096, |_| 1);
            // Rank 0's vote ends at once, rank 1's after 10 more calls.
            let settle_after = [0, 10][r];
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
        let switch = VOTE_CALLS as usize;
        assert!(taken[0][..switch]
            .iter()
            .all(|&a| a == Algorithm::Multicast));
        assert!(taken[0][switch..].iter().all(|&a| a == Algorithm::Previous));
    }

    #[test]
    fn a_rank_waits_for_its_vote_only_after_the_votes_calls() {
        let mut t = Tuner::new(1, 0, false);
        measure(&mut t, 4096, |_| 1);
        for _ in 0..VOTE_CALLS {
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
        // Without multicast among the candidates, the first call after the
        // measurements needs the decision.
        let big = 32 << 20;
        measure(&mut t, big, |_| 1);
        assert!(t.must_await_vote(big));
        assert_eq!(t.plan(big), None);
        let d = t.settle(class_of(big), &[100, 50, 0]);
        assert_eq!((d.alg, d.from), (Algorithm::Chain, 3));
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
        for lost in [Some(1000), None, Some(200), Some(900)] {
            let (_, s) = t.plan(65536).unwrap();
            vector = t.record(s.unwrap(), us(5), lost);
        }
        // Voted as the share delivered by multicast, plus one.
        assert_eq!(vector.unwrap().1.last(), Some(&801));
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
                vector = t.record(s.unwrap(), us(5), lost);
            }
            max = max.max(*vector.unwrap().1.last().unwrap());
        }
        max
    }

    #[test]
    fn multicast_that_loses_most_data_is_given_up() {
        let given_up = |losses: &[Option<u32>]| {
            let mut t = Tuner::new(1, 0, false);
            measure(&mut t, 65536, |_| 1);
            let d = t.settle(class_of(65536), &[1000, 10, voted_loss(losses)]);
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
        for _ in 0..VOTE_CALLS {
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
