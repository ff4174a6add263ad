//! Every rank of a communicator agreeing on measurements: each rank brings
//! a vector of numbers and every rank ends with the elementwise maximum over
//! all ranks, the same bytes everywhere, so that a decision computed from it
//! is the same on every rank. The messages follow the setup agreement's
//! binomial tree ([`setup::tree`]): up to rank 0, which combines, and down
//! again. Only point-to-point messages of the communicator, in steps
//! ([`Vote::poll`] never waits), so that it runs in the background.

use crate::base::error::Result;
use crate::base::io::{complete_in_order, MessageIo, Wait};
use crate::group::setup;

/// Where one rank's vote stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Waiting for the children's vectors.
    Up,
    /// Own subtree's vector sent to the parent; waiting for the result.
    Down,
    /// The result sent on to the children.
    Forward,
}

/// One rank's part in a vote.
pub struct Vote<M: MessageIo> {
    parent: Option<usize>,
    children: Vec<usize>,
    values: Vec<u32>,
    step: Step,
    waiting: Vec<M::Id>,
    got: Vec<Vec<u8>>,
}

impl<M: MessageIo> Vote<M> {
    /// Starts this rank's vote with its own `values` (every rank brings as
    /// many); posts the receives from its children.
    pub fn start(msgs: &mut M, rank: usize, size: usize, values: Vec<u32>) -> Result<Self> {
        let (parent, children) = setup::tree(rank, size);
        let capacity = values.len() * 4;
        let waiting = children
            .iter()
            .map(|&c| msgs.recv(c, capacity))
            .collect::<Result<_>>()?;
        Ok(Vote {
            parent,
            children,
            values,
            step: Step::Up,
            waiting,
            got: Vec::new(),
        })
    }

    /// Moves the vote on; `Some(result)` once it is over on this rank.
    pub fn poll(&mut self, msgs: &mut M, wait: Wait) -> Result<Option<Vec<u32>>> {
        loop {
            if !complete_in_order(msgs, &self.waiting, &mut self.got, wait)? {
                return Ok(None);
            }
            self.waiting.clear();
            let got = std::mem::take(&mut self.got);
            match (self.step, self.parent) {
                (Step::Up, parent) => {
                    for child in &got {
                        for (v, w) in self.values.iter_mut().zip(decode(child)) {
                            *v = (*v).max(w);
                        }
                    }
                    match parent {
                        Some(p) => {
                            let capacity = self.values.len() * 4;
                            self.waiting =
                                vec![msgs.send(p, encode(&self.values))?, msgs.recv(p, capacity)?];
                            self.step = Step::Down;
                        }
                        None => self.forward(msgs)?,
                    }
                }
                (Step::Down, _) => {
                    // `got`: the send to the parent, then the result.
                    let result = got.last().map(|b| decode(b)).unwrap_or_default();
                    // A result of another length would split the ranks; it
                    // cannot come from this code, which every rank runs.
                    debug_assert_eq!(result.len(), self.values.len());
                    self.values = result;
                    self.forward(msgs)?;
                }
                (Step::Forward, _) => return Ok(Some(std::mem::take(&mut self.values))),
            }
        }
    }

    fn forward(&mut self, msgs: &mut M) -> Result<()> {
        let bytes = encode(&self.values);
        self.waiting = self
            .children
            .iter()
            .map(|&c| msgs.send(c, bytes.clone()))
            .collect::<Result<_>>()?;
        self.step = Step::Forward;
        Ok(())
    }
}

fn encode(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_be_bytes()).collect()
}

fn decode(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes(c.try_into().expect("4 bytes")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::test_net::run_messages;

    #[test]
    fn every_rank_ends_with_the_maximum_of_all() {
        for size in [2, 3, 5, 8, 13] {
            let results = run_messages(size, move |rank, msgs| {
                let r = rank as u32;
                let mine = vec![r, 100 - r, (r * 7) % 5];
                let mut vote = Vote::start(msgs, rank, size, mine).unwrap();
                loop {
                    if let Some(result) = vote.poll(msgs, Wait::Progress).unwrap() {
                        return result;
                    }
                    std::thread::yield_now();
                }
            });
            let want = vec![
                size as u32 - 1,
                100,
                (0..size as u32).map(|r| (r * 7) % 5).max().unwrap(),
            ];
            for (rank, got) in results.iter().enumerate() {
                assert_eq!(got, &want, "rank {rank} of {size}");
            }
        }
    }
}
