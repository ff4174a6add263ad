//! The network interface a communicator multicasts on, and its sockets;
//! and the private-namespace check of the programs that multicast in tests.

pub mod interfaces;
pub mod mcast_socket;
pub mod private_namespace;
