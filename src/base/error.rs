//! The one error type of ipmc's operations, and the one place that maps it
//! to the codes Open MPI takes ([`Error::code`]).

use std::fmt;

/// Open MPI's codes that ipmc returns itself.
pub const OMPI_SUCCESS: i32 = 0;
pub const OMPI_ERROR: i32 = -1;
pub const OMPI_ERR_NOT_AVAILABLE: i32 = -16;

/// MPI's error class for a message that does not fit its receive.
pub const MPI_ERR_TRUNCATE: i32 = 15;

/// Why an operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// An Open MPI call failed with this code.
    Ompi(i32),
    /// A message does not fit its receive: the ranks' counts or datatypes
    /// differ.
    Truncated,
    /// A peer's frame cannot be what ipmc sends: its length, kind or content
    /// is wrong.
    Protocol,
    /// What this call needs is not there: no multicast group, no two
    /// levels, or an algorithm that cannot run on this transport.
    Unavailable,
    /// A rank, tag or count beyond what Open MPI's `int` arguments hold.
    Range,
}

impl Error {
    /// The code Open MPI gets back: never `OMPI_SUCCESS`.
    pub fn code(self) -> i32 {
        match self {
            Error::Ompi(rc) if rc != OMPI_SUCCESS => rc,
            Error::Truncated => MPI_ERR_TRUNCATE,
            _ => OMPI_ERROR,
        }
    }
}

/// The code Open MPI gets for `result`.
pub fn status(result: Result<()>) -> i32 {
    match result {
        Ok(()) => OMPI_SUCCESS,
        Err(e) => e.code(),
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Ompi(rc) => write!(f, "an Open MPI call failed with error {rc}"),
            Error::Truncated => f.write_str("a message did not fit its receive"),
            Error::Protocol => f.write_str("a peer's frame was not one ipmc sends"),
            Error::Unavailable => f.write_str("what the call needs was not set up"),
            Error::Range => f.write_str("a value beyond an int of Open MPI's"),
        }
    }
}

impl std::error::Error for Error {}

/// The result of ipmc's operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_reaches_open_mpi_as_a_failure() {
        for e in [
            Error::Ompi(0),
            Error::Ompi(-5),
            Error::Truncated,
            Error::Protocol,
            Error::Unavailable,
            Error::Range,
        ] {
            assert_ne!(e.code(), 0, "{e}");
        }
        assert_eq!(Error::Ompi(-5).code(), -5);
        assert_eq!(Error::Truncated.code(), MPI_ERR_TRUNCATE);
    }
}
