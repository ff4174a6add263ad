//! The network interface a communicator multicasts on, and its sockets.

pub mod interfaces;
pub mod mcast_socket;
