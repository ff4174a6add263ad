//! The point-to-point broadcasts (improved linear, fragmented chain) over
//! the [`crate::base::transport::Transport`] trait, their nonblocking form
//! for `MPI_Ibcast`, and the shape of ipmc's barrier.

pub mod barrier;
pub mod chain;
pub mod linear;
pub mod nonblocking;
