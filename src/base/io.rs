//! The I/O the multicast driver ([`crate::driver::multicast`]) is written against,
//! so that one driver runs over real sockets and Open MPI's point-to-point
//! layer, and over the simulated networks of the tests and the simulator.
//! Time is not I/O here: the driver is told the time at every step.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use crate::base::error::Result;
use crate::protocol::two_stage::Lent;

/// A communicator's multicast group as one non-blocking datagram socket.
pub trait DatagramIo {
    /// Sends one datagram to the group: `Ok(false)` when the send buffer is
    /// full (try again later), an error when it cannot be sent at all.
    fn send(&mut self, datagram: &[u8]) -> std::io::Result<bool>;
    /// Reads one waiting datagram into `buf`: its length and whether this
    /// rank sent it, or `None` when none waits.
    fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<Option<(usize, bool)>>;
    /// Datagrams one [`DatagramIo::send_batch`] may carry.
    fn batch_limit(&self) -> usize {
        1
    }
    /// Sends `batch`, datagrams back to back of `len` bytes each but the last
    /// (which may be shorter): how many the socket took, from the first; 0
    /// when its buffer is full. An error when the first cannot be sent at all.
    fn send_batch(&mut self, batch: &[u8], len: usize) -> std::io::Result<usize> {
        send_one_by_one(self, batch, len)
    }
    /// Datagrams of a batch of `offered` that a failed
    /// [`DatagramIo::send_batch`] lost: its first (the others may still go
    /// in the next batch), or all of them where the kernel takes a batch
    /// whole.
    fn lost_by_error(&self, offered: usize) -> usize {
        offered.min(1)
    }
    /// Bytes of buffer [`DatagramIo::recv_batch`] needs for datagrams of
    /// up to `datagram_len` bytes: one more, so that a longer datagram shows
    /// as such rather than cut to a valid length, or room for a batch.
    fn receive_buffer(&self, datagram_len: usize) -> usize {
        datagram_len + 1
    }
    /// Reads what waits into `buf` (of [`DatagramIo::receive_buffer`]
    /// bytes), several datagrams where the socket gives them at once:
    /// appends where each lies in `buf` to `out`; how many (0: none waits).
    fn recv_batch(&mut self, buf: &mut [u8], out: &mut Vec<Place>) -> std::io::Result<usize> {
        Ok(match self.recv(buf)? {
            Some((n, own)) => {
                out.push(Place { bytes: 0..n, own });
                1
            }
            None => 0,
        })
    }
    /// Whether this rank's own datagrams come back to it (loop-back, when
    /// other ranks share its host).
    fn loops_back(&self) -> bool {
        false
    }
    /// The group, for messages.
    fn group(&self) -> String;
}

/// Where a datagram [`DatagramIo::recv_batch`] read lies in its buffer, and
/// whether this rank sent it (looped back).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    pub bytes: Range<usize>,
    pub own: bool,
}

/// [`DatagramIo::send_batch`] one datagram per [`DatagramIo::send`].
pub fn send_one_by_one<S: DatagramIo + ?Sized>(
    socket: &mut S,
    batch: &[u8],
    len: usize,
) -> std::io::Result<usize> {
    let mut sent = 0;
    for datagram in batch.chunks(len.max(1)) {
        match socket.send(datagram) {
            Ok(true) => sent += 1,
            Ok(false) => break,
            Err(e) if sent == 0 => return Err(e),
            // The next batch starts with it and reports the error.
            Err(_) => break,
        }
    }
    Ok(sent)
}

/// How a driver asks whether a message completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Driving the point-to-point layer's progress: for the broadcast call
    /// itself.
    Progress,
    /// By looking at the message only: from inside Open MPI's progress
    /// engine, which must not be entered again.
    Look,
}

/// Non-blocking point-to-point messages between the ranks of one
/// communicator, whose buffers the messages own (so a broadcast can outlive
/// the call that started it). Messages between two ranks match in the order
/// they were posted, as in MPI.
pub trait MessageIo {
    /// A message in flight.
    type Id: Copy + fmt::Debug;
    /// Starts sending `data` to `peer`.
    fn send(&mut self, peer: usize, data: Vec<u8>) -> Result<Self::Id>;
    /// As [`Self::send`], but the send completes only once `peer` has
    /// matched it with a receive (`MPI_Issend`): a sender that keeps a
    /// bounded number of these in flight leaves the receiver no more than
    /// that many unexpected, whatever the transport buffers. By default a
    /// plain send, for transports that never complete a send earlier.
    fn send_matched(&mut self, peer: usize, data: Vec<u8>) -> Result<Self::Id> {
        self.send(peer, data)
    }
    /// Starts sending the bytes `range` of `data`, which other sends may
    /// share, to `peer`. By default a send of a copy of them.
    fn send_shared(
        &mut self,
        peer: usize,
        data: Arc<[u8]>,
        range: Range<usize>,
    ) -> Result<Self::Id> {
        self.send(peer, data[range].to_vec())
    }
    /// Starts receiving a message of at most `capacity` bytes from `peer`.
    fn recv(&mut self, peer: usize, capacity: usize) -> Result<Self::Id>;
    /// Starts receiving the bytes `range` of `into` from `peer` straight
    /// into its memory, where both allow (`None`: they do not; then
    /// [`Self::recv`] and a copy). [`Self::test`] gives an empty buffer
    /// when it completed, and a message of another length is
    /// [`crate::base::error::Error::Truncated`].
    fn recv_into(
        &mut self,
        peer: usize,
        into: &mut dyn Lent,
        range: Range<usize>,
    ) -> Result<Option<Self::Id>> {
        let _ = (peer, into, range);
        Ok(None)
    }
    /// Starts sending the bytes `range` of `from` to `peer` straight from
    /// its memory, synchronously if `matched` (as [`Self::send_matched`]),
    /// where both allow (`None`: they do not; then a send of a copy). The
    /// lender keeps the memory until the send completed.
    fn send_from(
        &mut self,
        peer: usize,
        from: &mut dyn Lent,
        range: Range<usize>,
        matched: bool,
    ) -> Result<Option<Self::Id>> {
        let _ = (peer, from, range, matched);
        Ok(None)
    }
    /// `Some(buffer)` once the message completed: for a receive the bytes
    /// received, for a send the buffer it sent (for reuse).
    fn test(&mut self, id: Self::Id, wait: Wait) -> Result<Option<Vec<u8>>>;
    /// Waits for the message and returns its buffer as [`Self::test`] does.
    fn wait(&mut self, id: Self::Id) -> Result<Vec<u8>> {
        loop {
            if let Some(buf) = self.test(id, Wait::Progress)? {
                return Ok(buf);
            }
            std::thread::yield_now();
        }
    }
}

/// A borrowed [`MessageIo`] is one too.
impl<M: MessageIo + ?Sized> MessageIo for &mut M {
    type Id = M::Id;

    fn send(&mut self, peer: usize, data: Vec<u8>) -> Result<Self::Id> {
        (**self).send(peer, data)
    }

    fn send_matched(&mut self, peer: usize, data: Vec<u8>) -> Result<Self::Id> {
        (**self).send_matched(peer, data)
    }

    fn send_shared(
        &mut self,
        peer: usize,
        data: Arc<[u8]>,
        range: Range<usize>,
    ) -> Result<Self::Id> {
        (**self).send_shared(peer, data, range)
    }

    fn recv(&mut self, peer: usize, capacity: usize) -> Result<Self::Id> {
        (**self).recv(peer, capacity)
    }

    fn recv_into(
        &mut self,
        peer: usize,
        into: &mut dyn Lent,
        range: Range<usize>,
    ) -> Result<Option<Self::Id>> {
        (**self).recv_into(peer, into, range)
    }

    fn send_from(
        &mut self,
        peer: usize,
        from: &mut dyn Lent,
        range: Range<usize>,
        matched: bool,
    ) -> Result<Option<Self::Id>> {
        (**self).send_from(peer, from, range, matched)
    }

    fn test(&mut self, id: Self::Id, wait: Wait) -> Result<Option<Vec<u8>>> {
        (**self).test(id, wait)
    }

    fn wait(&mut self, id: Self::Id) -> Result<Vec<u8>> {
        (**self).wait(id)
    }
}

/// Tests the messages `waiting` in the order they were posted, each only
/// once those before it completed, appending the buffers of those that
/// completed to `got`; whether all have.
pub fn complete_in_order<M: MessageIo>(
    msgs: &mut M,
    waiting: &[M::Id],
    got: &mut Vec<Vec<u8>>,
    wait: Wait,
) -> Result<bool> {
    while got.len() < waiting.len() {
        match msgs.test(waiting[got.len()], wait)? {
            Some(buf) => got.push(buf),
            None => return Ok(false),
        }
    }
    Ok(true)
}
