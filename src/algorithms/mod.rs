//! The point-to-point broadcasts (improved linear, fragmented chain), the
//! [`transport::Transport`] trait the blocking ones run on, and their
//! nonblocking form for `MPI_Ibcast`.

pub mod chain;
pub mod linear;
pub mod nonblocking;
pub mod transport;
