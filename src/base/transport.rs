//! The point-to-point operations the broadcast algorithms are written against.
//!
//! A transport owns one message buffer; algorithms name parts of it by byte
//! range. Open MPI's PML implements it in production
//! ([`crate::platform::ompi::PmlTransport`]); the tests run the same algorithms
//! over an in-memory network.

use std::ops::Range;

/// A request started by [`Transport::isend`], [`Transport::issend`] or
/// [`Transport::irecv`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReqId(pub usize);

use crate::base::error::Result;

/// Non-blocking point-to-point between the ranks of one communicator, over one
/// message buffer of [`Transport::len`] bytes. Messages between two ranks are
/// matched in the order they were posted, as in MPI.
pub trait Transport {
    /// This rank in the communicator.
    fn rank(&self) -> usize;
    /// Number of ranks in the communicator.
    fn size(&self) -> usize;
    /// Length of the message buffer in bytes.
    fn len(&self) -> usize;
    /// Whether the message is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Starts sending the bytes `range` of the buffer to `peer`.
    fn isend(&mut self, range: Range<usize>, peer: usize) -> Result<ReqId>;
    /// As [`Transport::isend`], but the send completes only once `peer` has
    /// matched it with a receive (`MPI_Issend`), whatever the transport
    /// buffers. By default a plain send, for transports that never complete
    /// a send earlier.
    fn issend(&mut self, range: Range<usize>, peer: usize) -> Result<ReqId> {
        self.isend(range, peer)
    }
    /// Starts receiving from `peer` into the bytes `range` of the buffer.
    fn irecv(&mut self, range: Range<usize>, peer: usize) -> Result<ReqId>;
    /// Waits until every request in `reqs` has completed.
    fn wait_all(&mut self, reqs: &[ReqId]) -> Result<()>;
}
