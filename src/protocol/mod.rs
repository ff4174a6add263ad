//! The protocol core: the multicast datagram format and the two-stage
//! broadcast as a state machine. Pure: no I/O, no clock, no Open MPI.

pub mod datagram;
pub mod flow;
pub mod polyval_mac;
pub mod two_stage;
