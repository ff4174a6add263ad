//! One call on a communicator, from its entry to its return, in the order
//! every call keeps: take in what came since the last call (answers that
//! time this rank's calls as a root, votes that ended), plan the algorithm
//! with the measured choice (waiting, at most once each, for a vote whose
//! decision the call takes or for the answers this rank's part in a vote
//! needs), finish the queue's work where the algorithm cannot run alongside
//! it (a vote's wait finishes only the votes), run, time the call (short
//! broadcasts at their root), and send this rank's part of a vote when it is
//! due. A nonblocking broadcast is neither
//! measured nor counted: it takes its class's decision (after the vote, if
//! the class's next blocking call would wait for it), and its work joins
//! the queue.
//!
//! A [`Call`] never waits and runs nothing itself: [`Call::next`] answers
//! what the caller is to do ([`Action`]), the caller does it as it can (the
//! component inside the MPI call, the simulator in virtual time) and asks
//! again, until [`Action::Return`].

use std::time::Duration;

use crate::base::error::{Error, Result};
use crate::engine::algorithm::Algorithm;
use crate::engine::choice::{Ballots, Choice, Next, Timed};
use crate::engine::tuning::{Decision, Sample};

/// Which collective a call serves: what its algorithms may run alongside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collective {
    /// A broadcast from `root`: every algorithm may begin alongside the
    /// queue's multicast broadcasts and votes, whose messages have a tag of
    /// their own; the queue's nonblocking broadcasts go first.
    Bcast { root: usize },
    /// A barrier: its multicast form may begin alongside the queue's
    /// multicast broadcasts (its arrivals have a tag of their own; the
    /// component's release finishes the queue's work after them, then takes
    /// the driver alone); its other forms have tags of their own.
    Barrier,
    /// An allgather: its multicast form is a run of multicast broadcasts,
    /// which may begin alongside the queue's multicast broadcasts; its other
    /// forms have tags of their own.
    Allgather,
    /// A nonblocking broadcast: ipmc's forms join the queue after its work,
    /// the replaced component's has a tag of its own.
    Ibcast,
}

/// What a call is to do next; the caller does it and asks again.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// Votes ended with these decisions (class and decision): tell the user
    /// what needs telling.
    Decided(Vec<(usize, Decision)>),
    /// Finish the queue's work, waiting as long as it takes (the votes in it
    /// end with it).
    FinishQueue,
    /// Finish the queue's votes, waiting as long as it takes: the work
    /// before them ends with them, the work after them may go on (a root
    /// that runs ahead needs the chains of broadcasts that another rank
    /// has not entered yet).
    FinishVotes,
    /// Wait until every answer to this rank's measured calls as a root has
    /// arrived.
    AwaitAnswers,
    /// Run this algorithm, then say how it went ([`Call::ran`]).
    Run(Algorithm),
    /// Send the call's root this rank's answer: it has the message.
    AnswerRoot,
    /// Wait for every other rank's answer until `until` (times count from
    /// the origin of the call's entry), then say [`Call::answered`] or
    /// [`Call::answers_late`].
    TimeAtRoot { until: Duration },
    /// The call is over.
    Return,
}

/// Where a call stands.
#[derive(Clone, Copy, Debug)]
enum Stage {
    /// Taking in what came since the last call.
    CatchUp,
    Plan,
    /// The queue finished for a vote: its decision is taken in.
    Settle,
    /// The answers arrived for this rank's part in a vote.
    TakeAnswers,
    /// A nonblocking broadcast whose class awaits its vote: this rank's
    /// part goes (the vote may wait for it), then the queue finishes.
    VoteFirst,
    Chosen(Algorithm, Option<Sample>),
    /// The queue's work is over: the algorithm runs.
    Start(Algorithm, Option<Sample>),
    Running(Option<Sample>),
    /// The algorithm returned after `took`, with this share of its message
    /// lost by multicast.
    Ran {
        sample: Option<Sample>,
        took: Duration,
        lost: Option<u32>,
    },
    TimingAtRoot(Sample),
    AfterCall,
    /// The answers arrived: this rank's part of the vote goes now.
    VoteAfterAnswers,
    Done,
}

/// One call in progress.
#[derive(Debug)]
pub struct Call {
    what: Collective,
    rank: usize,
    class: usize,
    fixed: Algorithm,
    measured: bool,
    multicast_ready: bool,
    entered: Duration,
    stage: Stage,
    /// Each wait of the plan at most once per call: after it, every vote in
    /// the queue ended and every answer arrived, and nothing more is coming.
    waited_vote: bool,
    waited_answers: bool,
    /// This rank's part in a vote waits for its answers at most once: its
    /// vote goes at the same call on every rank.
    waited_for_part: bool,
}

impl Call {
    /// A call of this rank (`rank`) in class `class` entered at `entered`:
    /// `measured` where the automatic choice serves the class and the ranks
    /// may agree on it, else it takes `fixed`; a plan of multicast takes the
    /// replaced component's algorithm where no group is agreed
    /// (`multicast_ready`, alike on every rank).
    pub fn new(
        what: Collective,
        rank: usize,
        (class, fixed): (usize, Algorithm),
        measured: bool,
        multicast_ready: bool,
        entered: Duration,
    ) -> Self {
        Call {
            what,
            rank,
            class,
            fixed,
            measured,
            multicast_ready,
            entered,
            stage: Stage::CatchUp,
            waited_vote: false,
            waited_answers: false,
            waited_for_part: false,
        }
    }

    /// What to do next.
    pub fn next(&mut self, choice: &mut Choice, io: &mut impl Ballots) -> Result<Action> {
        loop {
            match self.stage {
                Stage::CatchUp => {
                    choice.take_answers(io)?;
                    self.stage = Stage::Plan;
                    let decided = choice.settle(io);
                    if !decided.is_empty() {
                        return Ok(Action::Decided(decided));
                    }
                }
                Stage::Plan if !self.measured => self.stage = Stage::Chosen(self.fixed, None),
                Stage::Plan if self.what == Collective::Ibcast => {
                    if !self.waited_vote && choice.tuner().must_await_vote_of(self.class) {
                        self.waited_vote = true;
                        self.stage = Stage::VoteFirst;
                        continue;
                    }
                    let alg = choice.tuner().current_of(self.class);
                    self.stage = Stage::Chosen(alg.unwrap_or(self.fixed), None);
                }
                Stage::VoteFirst => {
                    if !choice.after_call(self.class, io)? && !self.waited_for_part {
                        self.waited_for_part = true;
                        return Ok(Action::AwaitAnswers);
                    }
                    self.stage = Stage::Settle;
                    return Ok(Action::FinishVotes);
                }
                Stage::Plan => match choice.plan(self.class, self.fixed, io)? {
                    Next::Run(alg, sample) => self.stage = Stage::Chosen(alg, sample),
                    Next::AwaitVote if !self.waited_vote => {
                        self.waited_vote = true;
                        self.stage = Stage::Settle;
                        return Ok(Action::FinishVotes);
                    }
                    Next::AwaitAnswers if !self.waited_answers => {
                        self.waited_answers = true;
                        self.stage = Stage::TakeAnswers;
                        return Ok(Action::AwaitAnswers);
                    }
                    Next::AwaitVote | Next::AwaitAnswers => {
                        self.stage = Stage::Chosen(self.fixed, None)
                    }
                },
                Stage::Settle => {
                    self.stage = Stage::Plan;
                    let decided = choice.settle(io);
                    if !decided.is_empty() {
                        return Ok(Action::Decided(decided));
                    }
                }
                Stage::TakeAnswers => {
                    choice.take_answers(io)?;
                    self.stage = Stage::Plan;
                }
                Stage::Chosen(alg, sample) => {
                    let alg = match alg {
                        Algorithm::Multicast if !self.multicast_ready => Algorithm::Previous,
                        alg => alg,
                    };
                    self.stage = Stage::Start(alg, sample);
                    if self.meets_queue(alg, io) {
                        return Ok(Action::FinishQueue);
                    }
                }
                Stage::Start(alg, sample) => {
                    self.stage = Stage::Running(sample);
                    return Ok(Action::Run(alg));
                }
                // The caller did not say how the run went.
                Stage::Running(..) => return Err(Error::Unavailable),
                Stage::Ran { .. } if self.what == Collective::Ibcast => self.stage = Stage::Done,
                Stage::Ran { sample, took, lost } => {
                    self.stage = Stage::AfterCall;
                    match sample {
                        None => {}
                        Some(s) if !s.timed_at_root() => choice.record(s, Timed::Here(took), lost),
                        Some(s) if self.root() == Some(self.rank) => {
                            self.stage = Stage::TimingAtRoot(s);
                            let until = self.entered + s.answer_wait();
                            return Ok(Action::TimeAtRoot { until });
                        }
                        Some(s) => {
                            choice.record(s, Timed::AtRoot, lost);
                            return Ok(Action::AnswerRoot);
                        }
                    }
                }
                // The caller did not say whether the answers came.
                Stage::TimingAtRoot(_) => return Err(Error::Unavailable),
                Stage::AfterCall => {
                    self.stage = Stage::Done;
                    if self.measured && !choice.after_call(self.class, io)? {
                        self.stage = Stage::VoteAfterAnswers;
                        if !self.waited_for_part {
                            self.waited_for_part = true;
                            return Ok(Action::AwaitAnswers);
                        }
                    }
                }
                Stage::VoteAfterAnswers => {
                    // After the wait every answer is in: what still lacks
                    // answers never gets them (an error in the background).
                    choice.take_answers(io)?;
                    choice.after_call(self.class, io)?;
                    self.stage = Stage::Done;
                }
                Stage::Done => return Ok(Action::Return),
            }
        }
    }

    /// The class of the call (a size class, the barrier's or an
    /// allgather's).
    pub fn class(&self) -> usize {
        self.class
    }

    /// When the call was entered.
    pub fn entered(&self) -> Duration {
        self.entered
    }

    /// The algorithm of [`Action::Run`] returned at `now`; `lost_permille`
    /// of its message came by the chain instead of multicast (where that
    /// tells, [`crate::engine::choice::lost_permille`]).
    pub fn ran(&mut self, now: Duration, lost_permille: Option<u32>) {
        if let Stage::Running(sample) = self.stage {
            let took = now.saturating_sub(self.entered);
            self.stage = Stage::Ran {
                sample,
                took,
                lost: lost_permille,
            };
        }
    }

    /// Every other rank answered the root's call by `now`.
    pub fn answered(&mut self, choice: &mut Choice, now: Duration) {
        if let Stage::TimingAtRoot(sample) = self.stage {
            let took = now.saturating_sub(self.entered);
            choice.record(sample, Timed::Here(took), None);
            self.stage = Stage::AfterCall;
        }
    }

    /// Not every answer came in time: the rest is awaited after the call,
    /// under `ticket` ([`Choice::time_at_root`]).
    pub fn answers_late(&mut self, choice: &mut Choice, ticket: u64) {
        if let Stage::TimingAtRoot(sample) = self.stage {
            choice.time_at_root(ticket, sample);
            self.stage = Stage::AfterCall;
        }
    }

    fn root(&self) -> Option<usize> {
        match self.what {
            Collective::Bcast { root } => Some(root),
            Collective::Barrier | Collective::Allgather | Collective::Ibcast => None,
        }
    }

    /// Whether `alg` must wait for the queue's work to finish.
    /// (The queue is asked only where its content decides.)
    fn meets_queue(&self, alg: Algorithm, io: &impl Ballots) -> bool {
        match self.what {
            // Over two levels too: the queue's nonblocking broadcasts over
            // them use the same parts, and go first.
            Collective::Bcast { .. } => !io.only_multicast_queued(),
            Collective::Barrier => alg.goes_alongside() && !io.only_multicast_queued(),
            // The replaced allgather may broadcast on the communicator (Open
            // MPI's basic ones gather, then broadcast), and a collective that
            // Open MPI starts from inside ipmc's call goes to the replaced
            // component (the glue's `in_call`): after the queue's
            // nonblocking broadcasts, as a broadcast.
            Collective::Allgather => {
                (alg.goes_alongside() || alg == Algorithm::Previous) && !io.only_multicast_queued()
            }
            Collective::Ibcast => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::choice::tests::Urn;
    use crate::engine::tuning::{self, Tuner};

    const US: fn(u64) -> Duration = Duration::from_micros;

    /// Runs a call to its end: each run takes `took`, answers come in
    /// time; the actions in order.
    fn run(call: &mut Call, choice: &mut Choice, io: &mut Urn, took: u64) -> Vec<Action> {
        let mut actions = Vec::new();
        loop {
            let action = call.next(choice, io).unwrap();
            match action {
                Action::Run(_) => call.ran(US(took), Some(0)),
                Action::TimeAtRoot { .. } => call.answered(choice, US(took)),
                Action::Return => return actions,
                _ => {}
            }
            actions.push(action);
        }
    }

    #[test]
    fn every_algorithm_goes_alongside_multicast_work_and_after_other_work() {
        let mut choice = Choice::new(Tuner::new(1, 0, false));
        let (previous, multicast) = (Algorithm::Previous, Algorithm::Multicast);
        let (linear, ring) = (Algorithm::Linear, Algorithm::Chain);
        let bcast = Collective::Bcast { root: 0 };
        let (barrier, allgather) = (Collective::Barrier, Collective::Allgather);
        for other_work in [false, true] {
            let mut io = Urn {
                other_work,
                ..Urn::default()
            };
            // `ready`: whether a group is agreed (else multicast's plan
            // takes the replaced component's broadcast).
            let mut call = |what, alg, ready| {
                let mut call = Call::new(what, 0, (0, alg), false, ready, US(0));
                run(&mut call, &mut choice, &mut io, 10)
            };
            let after = |alg| {
                if other_work {
                    vec![Action::FinishQueue, Action::Run(alg)]
                } else {
                    vec![Action::Run(alg)]
                }
            };
            // The queue's chains and votes have a tag of their own: a root
            // that runs ahead is never held by them in a broadcast.
            assert_eq!(call(bcast, linear, true), after(linear));
            assert_eq!(call(bcast, multicast, true), after(multicast));
            assert_eq!(call(bcast, multicast, false), after(previous));
            // A barrier's replaced form has a tag of its own; an allgather's
            // may broadcast, after the queue's nonblocking broadcasts.
            assert_eq!(call(barrier, previous, true), [Action::Run(previous)]);
            assert_eq!(call(barrier, multicast, true), after(multicast));
            assert_eq!(call(allgather, multicast, true), after(multicast));
            assert_eq!(call(allgather, previous, true), after(previous));
            assert_eq!(call(allgather, ring, true), [Action::Run(ring)]);
        }
    }

    #[test]
    fn a_call_over_two_levels_follows_the_nonblocking_broadcasts_queued_before() {
        let mut choice = Choice::new(Tuner::new(1, 0, false));
        let levels = Algorithm::TwoLevel;
        for other_work in [false, true] {
            let mut io = Urn {
                other_work,
                ..Urn::default()
            };
            for what in [
                Collective::Bcast { root: 0 },
                Collective::Barrier,
                Collective::Allgather,
            ] {
                let mut call = Call::new(what, 0, (0, levels), false, false, US(0));
                let actions = run(&mut call, &mut choice, &mut io, 10);
                let want: &[Action] = if other_work {
                    &[Action::FinishQueue, Action::Run(levels)]
                } else {
                    &[Action::Run(levels)]
                };
                assert_eq!(actions, want, "{what:?}, other work {other_work}");
            }
        }
    }

    #[test]
    fn a_short_broadcast_is_timed_at_its_root_and_answered_elsewhere() {
        let k = tuning::class_of(1024);
        let n = tuning::candidates(k).len();
        let bcast = Collective::Bcast { root: 1 };
        let at = |rank| {
            let mut choice = Choice::new(Tuner::new(1, rank, false));
            let mut io = Urn::default();
            let mut all = Vec::new();
            while io.sent.is_empty() {
                assert!(all.len() < 1000, "a vote goes");
                let mut call = Call::new(bcast, rank, (k, Algorithm::Linear), true, true, US(0));
                all.extend(run(&mut call, &mut choice, &mut io, 40));
            }
            (all, io.sent.remove(0).1)
        };
        let (root, root_vote) = at(1);
        let (other, other_vote) = at(0);
        let timed = root
            .iter()
            .filter(|a| matches!(a, Action::TimeAtRoot { until } if *until == tuning::ANSWER_WAIT))
            .count();
        assert!(timed >= n);
        assert!(!root.contains(&Action::AnswerRoot));
        let answers = other.iter().filter(|a| **a == Action::AnswerRoot).count();
        assert_eq!(answers, timed, "the others answer each call the root times");
        // The root's times are in its vote; the others timed none.
        assert_eq!(root_vote[..n], vec![40; n]);
        assert_eq!(other_vote[..n], vec![0; n]);
    }

    #[test]
    fn a_call_waits_for_a_vote_once_then_takes_the_fixed_algorithm() {
        let k = tuning::class_of(65536);
        let mut choice = Choice::new(Tuner::new(1, 0, false));
        let mut io = Urn::default();
        let bcast = Collective::Bcast { root: 0 };
        let mut calls = 0;
        // Measured calls, then calls while the vote runs, until one needs
        // its decision.
        loop {
            let mut call = Call::new(bcast, 0, (k, Algorithm::Chain), true, true, US(0));
            let actions = run(&mut call, &mut choice, &mut io, 50);
            calls += 1;
            if actions.contains(&Action::FinishVotes)
                && actions.last() == Some(&Action::Run(Algorithm::Chain))
            {
                // The vote never ended: after one wait, the fixed one.
                break;
            }
            assert!(calls < 100, "a call waits for the vote");
        }
        assert_eq!(io.sent.len(), 1, "one vote sent");
        // Once it ends, the next call takes its decision.
        io.ended.push((k, io.sent[0].1.clone()));
        let mut call = Call::new(bcast, 0, (k, Algorithm::Chain), true, true, US(0));
        let actions = run(&mut call, &mut choice, &mut io, 50);
        let Action::Decided(decided) = &actions[0] else {
            panic!("the decision first")
        };
        assert_eq!(decided[0].0, k);
        assert_eq!(actions.last(), Some(&Action::Run(decided[0].1.alg)));
    }

    #[test]
    fn a_nonblocking_broadcast_takes_the_decision_without_being_measured() {
        let k = tuning::class_of(65536);
        let mut choice = Choice::new(Tuner::new(1, 0, false));
        let mut io = Urn::default();
        let bcast = Collective::Bcast { root: 0 };
        let ibcast_call = || {
            Call::new(
                Collective::Ibcast,
                0,
                (k, Algorithm::Chain),
                true,
                true,
                US(0),
            )
        };
        let ibcast = |choice: &mut Choice, io: &mut Urn| run(&mut ibcast_call(), choice, io, 0);
        // Before any measurement: the fixed algorithm, nothing measured.
        assert_eq!(
            ibcast(&mut choice, &mut io),
            [Action::Run(Algorithm::Chain)]
        );
        while io.sent.is_empty() {
            let mut call = Call::new(bcast, 0, (k, Algorithm::Chain), true, true, US(0));
            run(&mut call, &mut choice, &mut io, 50);
        }
        // While the vote runs: the interim algorithm, without waiting.
        assert_eq!(
            ibcast(&mut choice, &mut io),
            [Action::Run(Algorithm::Multicast)]
        );
        for _ in 0..tuning::VOTE_CALLS {
            let mut call = Call::new(bcast, 0, (k, Algorithm::Chain), true, true, US(0));
            run(&mut call, &mut choice, &mut io, 50);
        }
        // The next blocking call would need the decision: so does this one,
        // which finishes the queue's votes.
        let mut call = ibcast_call();
        let next = |call: &mut Call, choice: &mut Choice, io: &mut Urn| call.next(choice, io);
        assert_eq!(
            next(&mut call, &mut choice, &mut io),
            Ok(Action::FinishVotes)
        );
        io.ended.push((k, io.sent[0].1.clone()));
        let Ok(Action::Decided(decided)) = next(&mut call, &mut choice, &mut io) else {
            panic!("the decision after the queue")
        };
        let alg = decided[0].1.alg;
        assert_eq!(next(&mut call, &mut choice, &mut io), Ok(Action::Run(alg)));
        assert_eq!(io.sent.len(), 1);
    }
}
