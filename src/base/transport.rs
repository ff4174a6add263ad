//! The point-to-point operations the broadcast algorithms are written against.
//!
//! A transport owns one message buffer; algorithms name parts of it by byte
//! range. Open MPI's PML implements it in production
//! ([`crate::platform::ompi::PmlTransport`]); the tests run the same algorithms
//! over an in-memory network.

use std::fmt;
use std::ops::Range;

/// A request started by [`Transport::isend`] or [`Transport::irecv`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReqId(pub usize);

/// Open MPI's generic error code (`OMPI_ERROR`): for a failure that has no
/// code of Open MPI's own, such as a frame that cannot be what a peer sent.
pub const OMPI_ERROR: i32 = -1;

/// A failed point-to-point operation, with Open MPI's error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct P2pError(pub i32);

impl fmt::Display for P2pError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "point-to-point operation failed with Open MPI error {}",
            self.0
        )
    }
}

impl std::error::Error for P2pError {}

pub type P2pResult<T> = Result<T, P2pError>;

/// MPI's error class for a message that does not fit its receive (the
/// ranks' counts or datatypes differ).
pub const MPI_ERR_TRUNCATE: i32 = 15;

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
    fn isend(&mut self, range: Range<usize>, peer: usize) -> P2pResult<ReqId>;
    /// Starts receiving from `peer` into the bytes `range` of the buffer.
    fn irecv(&mut self, range: Range<usize>, peer: usize) -> P2pResult<ReqId>;
    /// Waits until every request in `reqs` has completed.
    fn wait_all(&mut self, reqs: &[ReqId]) -> P2pResult<()>;
}
