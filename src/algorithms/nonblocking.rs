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
//!
//! The message lies in a buffer of the broadcast's own, given to the user
//! once complete, or in the user's buffer lent to it ([`Message`]), which
//! Open MPI receives into and the linear root sends from where it lies; the
//! root's own, read once, is shared by all its sends.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use crate::algorithms::chain::{self, neighbours};
use crate::base::error::{Error, Result};
use crate::base::io::{MessageIo, Wait};
use crate::protocol::two_stage::Lent;

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
/// receives ahead, and every [`chain::MATCH_EVERY`]th send synchronous.
const LINEAR_WINDOW: usize = 8;
const CHAIN_RECV_AHEAD: usize = 2;
const CHAIN_SENDS: usize = 1;

/// Where a rank keeps the message.
pub enum Message {
    /// A buffer of its own, which a rank that receives fills.
    Own(Vec<u8>),
    /// The root's message, which every send of it shares.
    Root(Arc<[u8]>),
    /// The user's buffer lent to the broadcast: a rank receives into it, and
    /// the linear root sends from it, where the transport reaches the
    /// memory ([`MessageIo::recv_into`], [`MessageIo::send_from`]);
    /// otherwise through a buffer of its own and a copy per message (as a
    /// chain rank sends, [`Steps::from_lent`]).
    Lent(Box<dyn Lent>),
}

impl Message {
    /// A buffer of `len` bytes of its own, for a rank that receives.
    pub fn own(len: usize) -> Self {
        Message::Own(vec![0; len])
    }

    fn len(&self) -> usize {
        match self {
            Message::Own(v) => v.len(),
            Message::Root(r) => r.len(),
            Message::Lent(l) => l.len(),
        }
    }

    fn write(&mut self, range: Range<usize>, got: Vec<u8>) {
        match self {
            // The whole message in one (the linear broadcast): kept as it
            // came, not copied.
            Message::Own(v) if range.len() == v.len() => *v = got,
            Message::Own(v) => v[range].copy_from_slice(&got),
            Message::Root(_) => unreachable!("the root receives nothing"),
            Message::Lent(l) => l.write(range.start, &got),
        }
    }

    /// Starts sending the bytes `range` to `target`, synchronously if
    /// `matched`, from the lent buffer itself if `from_lent` and the
    /// transport can; with whether the send reads the lent buffer.
    fn send<M: MessageIo>(
        &mut self,
        msgs: &mut M,
        target: usize,
        range: Range<usize>,
        (matched, from_lent): (bool, bool),
    ) -> Result<(M::Id, bool)> {
        let bytes = match self {
            Message::Root(r) if !matched => {
                return Ok((msgs.send_shared(target, Arc::clone(r), range)?, false));
            }
            Message::Root(r) => r[range].to_vec(),
            Message::Own(v) => v[range].to_vec(),
            Message::Lent(l) => {
                if from_lent {
                    if let Some(id) = msgs.send_from(target, &mut **l, range.clone(), matched)? {
                        return Ok((id, true));
                    }
                }
                let mut bytes = Vec::new();
                l.read(range, &mut |b| bytes = b.to_vec());
                bytes
            }
        };
        let id = if matched {
            msgs.send_matched(target, bytes)?
        } else {
            msgs.send(target, bytes)?
        };
        Ok((id, false))
    }
}

/// One rank's part of a nonblocking linear or chain broadcast.
pub struct Steps<M: MessageIo> {
    msgs: M,
    message: Message,
    segment: usize,
    segments: usize,
    source: Option<usize>,
    targets: Vec<usize>,
    /// Receives posted, oldest first, each with whether it writes straight
    /// into the lent buffer; and the next segment to post one for.
    recvs: VecDeque<(M::Id, bool)>,
    next_recv: usize,
    /// Segments received (the root: all of them).
    have: usize,
    /// Sends in flight, oldest first, each with whether it reads the lent
    /// buffer; and the next (segment, target) to send, as one index:
    /// segment × targets + target.
    sends: VecDeque<(M::Id, bool)>,
    next_send: usize,
    /// At most this many receives posted and sends in flight.
    recv_window: usize,
    send_window: usize,
    /// The chain: the synchronous send in flight ([`chain::is_matched`]),
    /// beside the window; the next one waits for it.
    paced: bool,
    matched: Option<(M::Id, bool)>,
    /// Whether sends go straight from a lent buffer (the linear root), and
    /// so the message is left only once they completed. A chain rank sends
    /// a copy of each segment instead, so that it leaves the message as soon
    /// as its last segment is handed on: at 100 Mbit/s its sends from the
    /// buffer took about 5 % longer for 4 MiB (the medians of 4 and 7 runs).
    from_lent: bool,
}

impl<M: MessageIo> Steps<M> {
    /// Rank `rank` of `size`'s part in a broadcast from `root` of a message
    /// of `message.len()` bytes, which on the root holds it.
    pub fn new(
        msgs: M,
        shape: Shape,
        (rank, size, root): (usize, usize, usize),
        message: Message,
    ) -> Self {
        let len = message.len();
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
        Steps {
            msgs,
            message,
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
            paced: matches!(shape, Shape::Chain(_)),
            matched: None,
            from_lent: shape == Shape::Linear,
        }
    }

    fn range(&self, k: usize) -> Range<usize> {
        let start = k * self.segment;
        start..self.message.len().min(start + self.segment)
    }

    /// One turn: posts the receives and sends the window allows and takes
    /// what completed, in the order posted. A segment of another length
    /// than this rank's is `MPI_ERR_TRUNCATE`.
    pub fn turn(&mut self, wait: Wait) -> Result<()> {
        loop {
            let mut moved = false;
            if let Some(source) = self.source {
                while self.recvs.len() < self.recv_window && self.next_recv < self.segments {
                    let range = self.range(self.next_recv);
                    let direct = match &mut self.message {
                        Message::Lent(l) => self.msgs.recv_into(source, &mut **l, range.clone())?,
                        _ => None,
                    };
                    self.recvs.push_back(match direct {
                        Some(id) => (id, true),
                        None => (self.msgs.recv(source, range.len())?, false),
                    });
                    self.next_recv += 1;
                }
                while let Some(&(id, direct)) = self.recvs.front() {
                    let Some(got) = self.msgs.test(id, wait)? else {
                        break;
                    };
                    self.recvs.pop_front();
                    if direct {
                        // Already where it belongs, its length checked.
                        self.have += 1;
                        moved = true;
                        continue;
                    }
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
                    self.message.write(range, got);
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
                let matched = self.paced && chain::is_matched(k);
                if matched && self.matched.is_some() {
                    break;
                }
                let range = self.range(k);
                let how = (matched, self.from_lent);
                let sent = self.message.send(&mut self.msgs, target, range, how)?;
                if matched {
                    self.matched = Some(sent);
                } else {
                    self.sends.push_back(sent);
                }
                self.next_send += 1;
                moved = true;
            }
            while let Some(&(id, _)) = self.sends.front() {
                if self.msgs.test(id, wait)?.is_none() {
                    break;
                }
                self.sends.pop_front();
                moved = true;
            }
            if let Some((id, _)) = self.matched {
                if self.msgs.test(id, wait)?.is_some() {
                    self.matched = None;
                    moved = true;
                }
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
            && self.matched.is_none()
            && self.next_send == self.segments * self.targets.len()
    }

    /// Whether this rank will read or write its message no more: it has
    /// it, every send is posted, and those still in flight own the bytes
    /// they send (or share the root's), none reads the lent buffer.
    pub fn leaves_message(&self) -> bool {
        let reads_lent = |s: &(M::Id, bool)| s.1;
        self.has_message()
            && self.next_send == self.segments * self.targets.len()
            && !self.sends.iter().any(reads_lent)
            && !self.matched.as_ref().is_some_and(reads_lent)
    }

    /// The message as far as this rank has it, where it is not in a lent
    /// buffer.
    pub fn data(&self) -> &[u8] {
        match &self.message {
            Message::Own(v) => v,
            Message::Root(r) => r,
            Message::Lent(_) => panic!("the message lies in the lent buffer"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::sync::Mutex;

    use super::*;
    use crate::testing::test_net::run_messages;

    fn pattern(i: usize) -> u8 {
        (i.wrapping_mul(31) ^ (i >> 8)) as u8
    }

    /// Every rank ends with the root's bytes, turning its machine (a rank
    /// whose part is not over keeps turning, as the background does); in a
    /// buffer lent to it if `lent`, else in its own (the root's shared).
    fn bcast(size: usize, root: usize, len: usize, shape: Shape, lent: bool) {
        let message: Vec<u8> = (0..len).map(pattern).collect();
        let got = run_messages(size, move |rank, m| {
            let is_root = rank == root;
            let user = Arc::new(Mutex::new(if is_root {
                message.clone()
            } else {
                vec![0; len]
            }));
            let store = match (lent, is_root) {
                (true, _) => Message::Lent(Box::new(Arc::clone(&user))),
                (false, true) => Message::Root(Arc::from(message.clone())),
                (false, false) => Message::own(len),
            };
            let mut s = Steps::new(m, shape, (rank, size, root), store);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while !s.is_done() {
                s.turn(Wait::Progress).unwrap();
                assert!(
                    std::time::Instant::now() < deadline,
                    "rank {rank} never done"
                );
                std::thread::yield_now();
            }
            if lent {
                assert!(s.leaves_message());
                drop(s);
                Arc::try_unwrap(user).unwrap().into_inner().unwrap()
            } else {
                s.data().to_vec()
            }
        });
        for (rank, data) in got.into_iter().enumerate() {
            let wrong = (0..len).filter(|&i| data[i] != pattern(i)).count();
            assert_eq!(
                wrong, 0,
                "{shape:?} rank {rank} of {size} root {root} {len} bytes, lent {lent}"
            );
        }
    }

    #[test]
    fn linear_and_chain_deliver_the_roots_bytes() {
        for size in [2, 3, 5] {
            for root in 0..size {
                for len in [0, 1, 4096, 70_001] {
                    for lent in [false, true] {
                        bcast(size, root, len, Shape::Linear, lent);
                        bcast(size, root, len, Shape::Chain(1000), lent);
                    }
                }
            }
        }
    }

    #[test]
    fn a_long_chain_keeps_its_window() {
        bcast(4, 1, 300_000, Shape::Chain(256), false);
        bcast(4, 1, 300_000, Shape::Chain(256), true);
    }

    /// A root's messages: standard sends complete at once, synchronous ones
    /// only once `matching` is set; none while `held`. Sends go from lent
    /// memory where it is given.
    #[derive(Default)]
    struct Root {
        /// Per send: whether synchronous.
        sends: RefCell<Vec<bool>>,
        matching: Cell<bool>,
        held: Cell<bool>,
    }

    impl Root {
        fn start(&self, matched: bool) -> Result<usize> {
            let mut sends = self.sends.borrow_mut();
            sends.push(matched);
            Ok(sends.len() - 1)
        }

        /// How many segments went, and which synchronously.
        fn sent(&self) -> (usize, Vec<usize>) {
            let sends = self.sends.borrow();
            let matched = (0..sends.len()).filter(|&k| sends[k]).collect();
            (sends.len(), matched)
        }
    }

    impl MessageIo for &Root {
        type Id = usize;
        fn send(&mut self, _: usize, _: Vec<u8>) -> Result<usize> {
            self.start(false)
        }
        fn send_matched(&mut self, _: usize, _: Vec<u8>) -> Result<usize> {
            self.start(true)
        }
        fn send_from(
            &mut self,
            _: usize,
            from: &mut dyn Lent,
            _: Range<usize>,
            matched: bool,
        ) -> Result<Option<usize>> {
            from.memory().map(|_| self.start(matched)).transpose()
        }
        fn recv(&mut self, _: usize, _: usize) -> Result<usize> {
            unreachable!("the root receives nothing")
        }
        fn test(&mut self, id: usize, _: Wait) -> Result<Option<Vec<u8>>> {
            let done = !self.sends.borrow()[id] || self.matching.get();
            Ok((done && !self.held.get()).then(Vec::new))
        }
    }

    /// Memory a transport may send from.
    struct Memory(Vec<u8>);

    impl Lent for Memory {
        fn len(&self) -> usize {
            self.0.len()
        }
        fn read(&self, range: Range<usize>, f: &mut dyn FnMut(&[u8])) {
            f(&self.0[range]);
        }
        fn write(&mut self, at: usize, src: &[u8]) {
            self.0[at..at + src.len()].copy_from_slice(src);
        }
        fn memory(&mut self) -> Option<(std::ptr::NonNull<u8>, usize)> {
            Some((
                std::ptr::NonNull::from(&mut self.0[..]).cast(),
                self.0.len(),
            ))
        }
    }

    /// A send straight from the user's buffer reads it until it completes:
    /// the root leaves the message only then (a send of a copy, at once).
    #[test]
    fn a_root_sending_from_the_lent_buffer_leaves_it_once_the_sends_completed() {
        for direct in [true, false] {
            let root = Root::default();
            root.held.set(true);
            let message: Box<dyn Lent> = if direct {
                Box::new(Memory(vec![7; 1000]))
            } else {
                Box::new(Arc::new(Mutex::new(vec![7; 1000])))
            };
            let mut s = Steps::new(&root, Shape::Linear, (0, 3, 0), Message::Lent(message));
            s.turn(Wait::Progress).unwrap();
            assert_eq!(root.sent(), (2, vec![]));
            assert_eq!(s.leaves_message(), !direct, "direct {direct}");
            assert!(!s.is_done());
            root.held.set(false);
            s.turn(Wait::Progress).unwrap();
            assert!(s.leaves_message() && s.is_done());
        }
    }

    #[test]
    fn the_chain_sends_every_sixteenth_segment_synchronously_one_at_a_time() {
        let root = Root::default();
        let len = 10_001;
        let message = Message::Root(Arc::from(vec![7; len]));
        let mut s = Steps::new(&root, Shape::Chain(100), (0, 4, 0), message);
        s.turn(Wait::Progress).unwrap();
        // Segment 31 waits for the match of segment 15.
        assert_eq!(root.sent(), (31, vec![15]));
        assert!(!s.is_done());
        root.matching.set(true);
        s.turn(Wait::Progress).unwrap();
        assert_eq!(root.sent(), (101, vec![15, 31, 47, 63, 79, 95]));
        assert!(s.is_done());
    }

    #[test]
    fn a_shorter_message_is_truncate() {
        let errs = run_messages(2, |rank, m| {
            let len = if rank == 0 { 10 } else { 20 };
            let message = match rank {
                0 => Message::Root(Arc::from(vec![1; len])),
                _ => Message::own(len),
            };
            let mut s = Steps::new(m, Shape::Linear, (rank, 2, 0), message);
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
