//! The point-to-point broadcasts (improved linear, fragmented chain), the
//! [`transport::Transport`] trait the blocking ones run on, their
//! nonblocking form for `MPI_Ibcast`, and the shape of ipmc's barrier.

pub mod barrier;
pub mod chain;
pub mod linear;
pub mod nonblocking;
pub mod transport;
