//! The point-to-point broadcasts (improved linear, fragmented chain) and the
//! [`transport::Transport`] trait they run on.

pub mod chain;
pub mod linear;
pub mod transport;
