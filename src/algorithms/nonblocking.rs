//! The improved linear and fragmented chain broadcasts for `MPI_Ibcast`:
//! the same algorithms as [`crate::algorithms::linear`] and
//! [`crate::algorithms::chain`], as a machine that moves on in turns over
//! messages that own their buffers ([`MessageIo`]), so that the broadcast
//! outlives the call that started it and runs in a communicator's
//! background work. (The blocking forms move the user's buffer in place.)
//!
//! Both have one shape: a rank receives the message, in segments, from one
//! source (none on the root) and sends each segment, once it has it, to its
//! targets. Linear: the root is every other rank's source and sends the
//! whole message to each. Chain: the ring's predecessor is the source, the
//! successor the one target, in segments of `chain_segment_size`.

use std::collections::VecDeque;
use std::ops::Range;

use crate::algorithms::chain::neighbours;
use crate::base::error::{Error, Result};
use crate::base::io::{MessageIo, Wait};

/// Which point-to-point broadcast.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Linear,
    /// Segments of this many bytes.
    Chain(usize),
}

/// Receives posted ahead and sends in flight: the linear broadcast's root
/// keeps several targets busy; the chain moves as the blocking chain does
/// ([`crate::algorithms::chain::bcast`]), one send at a time and two
/// receives ahead.
const LINEAR_WINDOW: usize = 8;
const CHAIN_RECV_AHEAD: usize = 2;
const CHAIN_SENDS: usize = 1;

/// One rank's part of a nonblocking linear or chain broadcast.
pub struct Steps<M: MessageIo> {
    msgs: M,
    data: Vec<u8>,
    segment: usize,
    segments: usize,
    source: Option<usize>,
    targets: Vec<usize>,
    /// Receives posted, oldest first, and the next segment to post one for.
    recvs: VecDeque<M::Id>,
    next_recv: usize,
    /// Segments received (the root: all of them).
    have: usize,
    /// Sends in flight, oldest first, and the next (segment, target) to send,
    /// as one index: segment × targets + target.
    sends: VecDeque<M::Id>,
    next_send: usize,
    /// At most this many receives posted and sends in flight.
    recv_window: usize,
    send_window: usize,
}

impl<M: MessageIo> Steps<M> {
    /// Rank `rank` of `size`'s part in a broadcast of `len` bytes from
    /// `root`; `root_data` is the message on the root (ignored elsewhere).
    pub fn new(
        msgs: M,
        shape: Shape,
        (rank, size, root): (usize, usize, usize),
        len: usize,
        root_data: Option<Vec<u8>>,
    ) -> Self {
        let (segment, source, targets) = match shape {
            Shape::Linear if rank == root => {
                (len, None, (0..size).filter(|&r| r != root).collect())
            }
            Shape::Linear => (len, Some(root), Vec::new()),
            Shape::Chain(segment) => {
                let (pred, succ) = neighbours(rank, size, root);
                (segment.max(1), pred, succ.into_iter().collect())
            }
        };
        let segments = len.div_ceil(segment.max(1));
        let (recv_window, send_window) = match shape {
            Shape::Linear => (LINEAR_WINDOW, LINEAR_WINDOW),
            Shape::Chain(_) => (CHAIN_RECV_AHEAD, CHAIN_SENDS),
        };
        let is_root = rank == root;
        let data = match root_data {
            Some(d) if is_root => d,
            _ => vec![0; len],
        };
        assert_eq!(
            data.len(),
            len,
            "the root's message has the broadcast's length"
        );
        Steps {
            msgs,
            data,
            segment,
            segments,
            source,
            targets,
            recvs: VecDeque::new(),
            next_recv: 0,
            have: if is_root { segments } else { 0 },
            sends: VecDeque::new(),
            next_send: 0,
            recv_window,
            send_window,
        }
    }

    fn range(&self, k: usize) -> Range<usize> {
        let start = k * self.segment;
        start..self.data.len().min(start + self.segment)
    }

    /// One turn: posts the receives and sends the window allows and takes
    /// what completed, in the order posted. A segment of another length
    /// than this rank's is `MPI_ERR_TRUNCATE`.
    pub fn turn(&mut self, wait: Wait) -> Result<()> {
        loop {
            let mut moved = false;
            if let Some(source) = self.source {
                while self.recvs.len() < self.recv_window && self.next_recv < self.segments {
                    let capacity = self.range(self.next_recv).len();
                    self.recvs.push_back(self.msgs.recv(source, capacity)?);
                    self.next_recv += 1;
                }
                while let Some(&id) = self.recvs.front() {
                    let Some(got) = self.msgs.test(id, wait)? else {
                        break;
                    };
                    self.recvs.pop_front();
                    let range = self.range(self.have);
                    if got.len() != range.len() {
                        log::warn!(
                            "received {} bytes where the broadcast expects {}: the ranks' \\
                             counts or datatypes differ",
                            got.len(),
                            range.len()
                        );
                        return Err(Error::Truncated);
                    }
                    self.data[range].copy_from_slice(&got);
                    self.have += 1;
                    moved = true;
                }
            }
            let per = self.targets.len();
            while self.sends.len() < self.send_window
                && per > 0
                && self.next_send < self.segments * per
                && self.next_send / per < self.have
            {
                let (k, target) = (self.next_send / per, self.targets[self.next_send % per]);
                let bytes = self.data[self.range(k)].to_vec();
                self.sends.push_back(self.msgs.send(target, bytes)?);
                self.next_send += 1;
                moved = true;
            }
            while let Some(&id) = self.sends.front() {
                if self.msgs.test(id, wait)?.is_none() {
                    break;
                }
                self.sends.pop_front();
                moved = true;
            }
            if !moved {
                return Ok(());
            }
        }
    }

    /// Whether this rank has the whole message.
    pub fn has_message(&self) -> bool {
        self.have == self.segments
    }

    /// Whether this rank's part is over: the message is here and every send
    /// completed.
    pub fn is_done(&self) -> bool {
        self.has_message()
            && self.recvs.is_empty()
            && self.sends.is_empty()
            && self.next_send == self.segments * self.targets.len()
    }

    /// The message as far as this rank has it.
    pub fn data(&self) -> &[u8] {
        &self.data
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::test_net::run_messages;

    fn pattern(i: usize) -> u8 {
        (i.wrapping_mul(31) ^ (i >> 8)) as u8
    }

    /// Every rank ends with the root's bytes, turning its machine (a rank
    /// whose part is not over keeps turning, as the background does).
    fn bcast(size: usize, root: usize, len: usize, shape: Shape) {
        let message: Vec<u8> = (0..len).map(pattern).collect();
        let got = run_messages(size, move |rank, m| {
            let data = (rank == root).then(|| message.clone());
            let mut s = Steps::new(m, shape, (rank, size, root), len, data);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while !s.is_done() {
                s.turn(Wait::Progress).unwrap();
                assert!(
                    std::time::Instant::now() < deadline,
                    "rank {rank} never done"
                );
                std::thread::yield_now();
            }
            s.data().to_vec()
        });
        for (rank, data) in got.into_iter().enumerate() {
            let wrong = (0..len).filter(|&i| data[i] != pattern(i)).count();
            assert_eq!(
                wrong, 0,
                "{shape:?} rank {rank} of {size} root {root} {len} bytes"
            );
        }
    }

    #[test]
    fn linear_and_chain_deliver_the_roots_bytes() {
        for size in [2, 3, 5] {
            for root in 0..size {
                for len in [0, 1, 4096, 70_001] {
                    bcast(size, root, len, Shape::Linear);
                    bcast(size, root, len, Shape::Chain(1000));
                }
            }
        }
    }

    #[test]
    fn a_long_chain_keeps_its_window() {
        bcast(4, 1, 300_000, Shape::Chain(256));
    }

    #[test]
    fn a_shorter_message_is_truncate() {
        let errs = run_messages(2, |rank, m| {
            let len = if rank == 0 { 10 } else { 20 };
            let data = (rank == 0).then(|| vec![1; 10]);
            let mut s = Steps::new(m, Shape::Linear, (rank, 2, 0), len, data);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            loop {
                if let Err(e) = s.turn(Wait::Progress) {
                    return Some(e);
                }
                if s.is_done() || std::time::Instant::now() > deadline {
                    return None;
                }
                std::thread::yield_now();
            }
        });
        assert_eq!(errs, [None, Some(Error::Truncated)]);
    }
}
