//! The measured choice around a communicator's calls ([`crate::engine::tuning`]
//! holds the tuner): which algorithm a call takes, what it measures, when
//! this rank's part of a vote goes, when a vote's decision is taken in. It
//! never waits itself: where a call needs what has not arrived (a vote's
//! result, the answers that time this rank's calls as a root) it says so,
//! and the caller waits as it can (the component in the call, the simulator
//! until the messages came) and asks again.

use std::time::Duration;

use log::debug;

use crate::base::error::Result;
use crate::engine::algorithm::Algorithm;
use crate::engine::tuning::{self, Decision, Due, Progress, Sample, Tuner};

/// Messages of fewer datagrams than this do not measure multicast loss.
const LOSS_FROM_DATAGRAMS: usize = 8;

/// The share (per mille) of a measured multicast call's message of `bytes`
/// bytes in fragments of `fragment_size` that this rank got by the chain
/// (`by_chain` bytes) instead of multicast (`by_multicast`). `None` where it
/// does not tell: nothing to get (the root), or too coarse a sign for
/// messages of a few datagrams, one of which an unscheduled receiver may
/// read after the chain brought it.
pub fn lost_permille(
    bytes: usize,
    fragment_size: usize,
    by_multicast: u64,
    by_chain: u64,
) -> Option<u32> {
    if bytes < LOSS_FROM_DATAGRAMS * fragment_size {
        return None;
    }
    let share = (by_chain * 1000).checked_div(by_multicast + by_chain)?;
    Some(share as u32)
}

/// Where the choice's messages go and come from: the communicator's queue
/// of work (votes take their turn there) and the answers to this rank's
/// measured calls as a root.
pub trait Ballots {
    /// Queues this rank's part (`mine`) in class `k`'s vote.
    fn vote(&mut self, k: usize, mine: Vec<u32>);
    /// The votes that ended since the last call: class and result.
    fn take_votes(&mut self) -> Vec<(usize, Vec<u32>)>;
    /// The measured calls of this rank as a root whose answers all arrived
    /// since the last call: ticket ([`Choice::time_at_root`]) and time.
    fn take_answered(&mut self) -> Result<Vec<(u64, Duration)>>;
    /// Whether the queue holds only multicast broadcasts' chains and votes,
    /// which a multicast call may begin alongside.
    fn only_multicast_queued(&self) -> bool;
}

/// What a call is to do, or what it must wait for first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Run this algorithm, and measure the call if there is a sample.
    Run(Algorithm, Option<Sample>),
    /// The call takes the decision of a vote that has not ended here:
    /// finish the queued votes, [`Choice::settle`], and ask again.
    AwaitVote,
    /// This rank's part in a vote needs the times of its measured calls as
    /// a root: wait for their answers, take them in
    /// ([`Choice::take_answers`]), and ask again.
    AwaitAnswers,
}

/// How a measured call was timed on this rank.
#[derive(Clone, Copy, Debug)]
pub enum Timed {
    /// From its entry to its return, here.
    Here(Duration),
    /// At its root, another rank, when every rank answered.
    AtRoot,
}

/// A communicator's measured choice, the same on every rank.
pub struct Choice {
    tuner: Tuner,
    /// This rank's measured calls as a root whose answers are awaited:
    /// ticket and sample.
    awaited: Vec<(u64, Sample)>,
}

impl Choice {
    pub fn new(tuner: Tuner) -> Self {
        Choice {
            tuner,
            awaited: Vec::new(),
        }
    }

    pub fn tuner(&self) -> &Tuner {
        &self.tuner
    }

    /// See [`Tuner::offer_from_leader`].
    pub fn offer_from_leader(&mut self) -> bool {
        self.tuner.offer_from_leader()
    }

    /// See [`Tuner::inherit`].
    pub fn inherit(&mut self, k: usize, d: &Decision) -> bool {
        self.tuner.inherit(k, d)
    }

    /// See [`Tuner::take_on`].
    pub fn take_on(&mut self, k: usize, p: &Progress) -> bool {
        self.tuner.take_on(k, p)
    }

    /// See [`Tuner::measure_again`].
    pub fn measure_again(&mut self) {
        self.tuner.measure_again();
    }

    /// The algorithm of a call of class `k` and what to measure of it, or
    /// what to wait for first; a class without a decision takes `fixed`.
    pub fn plan(&mut self, k: usize, fixed: Algorithm, io: &mut impl Ballots) -> Result<Next> {
        if let Some((alg, sample)) = self.tuner.plan_class(k) {
            return Ok(Next::Run(alg, sample));
        }
        // This call takes the decision of a vote that has not ended here;
        // this rank's part may not have gone yet.
        if !self.after_call(k, io)? {
            Ok(Next::AwaitAnswers)
        } else if self.tuner.awaits_votes() {
            Ok(Next::AwaitVote)
        } else {
            Ok(Next::Run(fixed, None))
        }
    }

    /// After a call of class `k`: this rank's part of the class's vote goes
    /// to the queue when it is due. `false` when it needs the answers to
    /// this rank's calls as a root first (wait for them, take them in, and
    /// ask again).
    pub fn after_call(&mut self, k: usize, io: &mut impl Ballots) -> Result<bool> {
        let mut due = self.tuner.due_of(k);
        if due == Due::Answers {
            self.take_answers(io)?;
            due = self.tuner.due_of(k);
        }
        match due {
            Due::Answers => Ok(false),
            Due::Vote(class, mine) => {
                debug!("{} measured here: {mine:?}", tuning::class_name(class));
                io.vote(class, mine);
                Ok(true)
            }
            Due::No => Ok(true),
        }
    }

    /// Records a measured call, which got `lost_permille` of its message
    /// by the chain instead of multicast (where that tells).
    pub fn record(&mut self, sample: Sample, timed: Timed, lost_permille: Option<u32>) {
        let elapsed = match timed {
            Timed::Here(d) => Some(d),
            Timed::AtRoot => None,
        };
        self.tuner.record(sample, elapsed, lost_permille);
    }

    /// A measured call of this rank as its root, timed when every other
    /// rank answered: [`Ballots::take_answered`] gives `ticket` back with
    /// the time.
    pub fn time_at_root(&mut self, ticket: u64, sample: Sample) {
        self.awaited.push((ticket, sample));
    }

    /// Whether answers to this rank's calls as a root are awaited.
    pub fn awaits_answers(&self) -> bool {
        !self.awaited.is_empty()
    }

    /// Takes in the times of this rank's calls as a root whose answers
    /// arrived.
    pub fn take_answers(&mut self, io: &mut impl Ballots) -> Result<()> {
        if self.awaited.is_empty() {
            return Ok(());
        }
        for (ticket, took) in io.take_answered()? {
            if let Some(i) = self.awaited.iter().position(|a| a.0 == ticket) {
                let (_, sample) = self.awaited.swap_remove(i);
                // Nothing to get by the chain at the root.
                self.tuner.record(sample, Some(took), None);
            }
        }
        Ok(())
    }

    /// Takes the decisions of the votes that ended, and returns them (class
    /// and decision) for the caller to tell.
    pub fn settle(&mut self, io: &mut impl Ballots) -> Vec<(usize, Decision)> {
        if !self.tuner.awaits_votes() {
            return Vec::new();
        }
        io.take_votes()
            .into_iter()
            .map(|(k, result)| (k, self.tuner.settle(k, &result).clone()))
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Votes that end when the test says; answers that came.
    #[derive(Default)]
    pub(crate) struct Urn {
        pub sent: Vec<(usize, Vec<u32>)>,
        pub ended: Vec<(usize, Vec<u32>)>,
        pub answered: Vec<(u64, Duration)>,
        /// The queue holds other work than multicast chains and votes.
        pub other_work: bool,
    }

    impl Ballots for Urn {
        fn vote(&mut self, k: usize, mine: Vec<u32>) {
            self.sent.push((k, mine));
        }

        fn take_votes(&mut self) -> Vec<(usize, Vec<u32>)> {
            std::mem::take(&mut self.ended)
        }

        fn take_answered(&mut self) -> Result<Vec<(u64, Duration)>> {
            Ok(std::mem::take(&mut self.answered))
        }

        fn only_multicast_queued(&self) -> bool {
            !self.other_work
        }
    }

    #[test]
    fn a_class_is_measured_voted_on_and_decided_at_the_same_call_everywhere() {
        let k = tuning::class_of(65536);
        let mut choice = Choice::new(Tuner::new(1, 0, false));
        let mut io = Urn::default();
        let us = Duration::from_micros;
        // One call of each candidate, measured here (too long for a closer
        // look); multicast's last.
        let turns = [
            (Algorithm::Previous, 10_000),
            (Algorithm::SplitBinary, 8_000),
            (Algorithm::Binomial, 9_000),
            (Algorithm::Multicast, 5_000),
        ];
        for (alg, took) in turns {
            let Next::Run(a, Some(sample)) = choice.plan(k, Algorithm::Chain, &mut io).unwrap()
            else {
                panic!("measured")
            };
            assert_eq!(a, alg);
            choice.record(sample, Timed::Here(us(took)), Some(0));
            assert!(choice.after_call(k, &mut io).unwrap());
        }
        // The vote went after the last measured call: best times, then the
        // loss (as delivered + 1).
        assert_eq!(io.sent, vec![(k, vec![10_000, 5_000, 8_000, 9_000, 1001])]);
        // Meanwhile multicast serves, without waiting for the vote.
        for _ in 0..tuning::VOTE_CALLS {
            let next = choice.plan(k, Algorithm::Chain, &mut io).unwrap();
            assert_eq!(next, Next::Run(Algorithm::Multicast, None));
        }
        // The next call needs the decision: it waits, then takes it.
        assert_eq!(
            choice.plan(k, Algorithm::Chain, &mut io).unwrap(),
            Next::AwaitVote
        );
        io.ended.push((k, vec![10_000, 6_000, 9_000, 9_500, 1001]));
        let decided = choice.settle(&mut io);
        assert_eq!(decided.len(), 1);
        assert_eq!(decided[0].1.alg, Algorithm::Multicast);
        assert_eq!(
            choice.plan(k, Algorithm::Chain, &mut io).unwrap(),
            Next::Run(Algorithm::Multicast, None)
        );
    }

    #[test]
    fn loss_is_measured_only_where_it_tells() {
        assert_eq!(lost_permille(1000, 1400, 0, 1000), None, "one datagram");
        assert_eq!(lost_permille(65536, 1400, 0, 0), None, "nothing to get");
        assert_eq!(lost_permille(65536, 1400, 49152, 16384), Some(250));
    }
}
