//! Test-only: an in-memory point-to-point network of threads. The protocol
//! and its driver are tested on the simulator (`sim/`).

pub mod test_net;
