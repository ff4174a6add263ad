//! Test-only networks: the seeded simulated multicast network of the
//! protocol's tests, and an in-memory point-to-point network of threads.

pub mod sim_net;
pub mod test_net;
