//! A discrete-event simulator of one broadcast on a switched cluster, in
//! virtual time and deterministic by seed.
//!
//! Every rank runs in one process. ipmc's ranks run the component's own
//! driver ([`ipmc::driver::multicast::Driver`]) and protocol core unchanged, over a
//! simulated multicast socket and simulated point-to-point messages; the
//! peers are models of Open MPI tuned's broadcasts over the same messages.
//! The network ([`network`]): full-duplex host links of one rate and
//! latency to a store-and-forward switch with a finite output queue per port
//! (tail drop), multicast replicated in the switch, loss per receiver
//! (independent or in bursts), point-to-point messages cut into TCP
//! segments with a window and acknowledgements, each connection holding a
//! bounded share of its host's one link queue, eager or rendezvous matching,
//! and a cost per message and per byte on every host. `docs/simulator.md`
//! says what is modelled and what is not.

pub mod allgather;
pub mod auto;
pub mod barrier;
pub mod engine;
pub mod network;
pub mod node;
pub mod p2p;
pub mod programs;
pub mod scenario;
pub mod socket;

/// Virtual time in nanoseconds.
pub type Ns = u64;
