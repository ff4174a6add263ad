//! ipmc: `MPI_Bcast` over IP multicast for Open MPI.
//!
//! The crate is linked as a static library into `mca_coll_ipmc.so` together
//! with the thin C glue in `ompi-glue/`. The layout follows one concern per
//! module:
//!
//! - [`config`]: the MCA parameters as Rust sees them, and the per-call choice
//!   of algorithm (thesis §3.5);
//! - [`transport`]: the point-to-point operations the algorithms need, as a
//!   trait, so that the algorithms run unchanged on Open MPI's PML and on the
//!   in-memory network of the tests;
//! - [`linear`] and [`chain`]: the improved linear and the fragmented chain
//!   broadcasts (thesis §1.5.1, §1.5.2);
//! - [`stats`]: per-communicator counters for `coll_ipmc_print_statistics`;
//! - [`datagram`]: the multicast datagram format (`docs/datagram.md`);
//! - [`two_stage`]: the two-stage multicast broadcast (thesis §3.2) as a pure
//!   state machine, tested through a simulated network (`sim_net`);
//! - [`bbs`]: the Blum-Blum-Shub generator that stretches entropy into seeds
//!   for the choice of multicast groups (thesis §3.4);
//! - [`entropy`]: the collector of the seed for that generator (thesis §3.3);
//! - [`groups`]: the configured group and port ranges, and the draw of a
//!   communicator's multicast group, port and instance id;
//! - [`nodes`]: how a communicator's ranks spread over nodes;
//! - [`interfaces`] and [`mcast_socket`]: the interface a communicator
//!   multicasts on (and its IPv6 source address, `docs/ipv6.md`), and its sockets;
//! - [`io`]: the datagram and point-to-point I/O the multicast driver is
//!   written against;
//! - [`setup`]: the setup of a communicator's group, agreed by all ranks;
//! - [`multicast`]: the driver of the two-stage broadcast, over real
//!   sockets and Open MPI point-to-point or a simulated network;
//! - [`background`]: broadcasts that returned but still owe their
//!   neighbours frames, finished from Open MPI's progress engine;
//! - [`module`]: the per-communicator state and the broadcast entry point;
//! - [`ffi`]: the Open MPI boundary, the only place with `unsafe`.

pub mod background;
pub mod bbs;
pub mod chain;
pub mod config;
pub mod datagram;
pub mod entropy;
pub mod ffi;
pub mod groups;
pub mod interfaces;
pub mod io;
pub mod linear;
mod logging;
pub mod mcast_socket;
pub mod module;
pub mod multicast;
pub mod nodes;
pub mod setup;
pub mod stats;
pub mod transport;
pub mod two_stage;

#[cfg(test)]
mod sim_net;
#[cfg(test)]
mod test_net;
