//! ipmc: `MPI_Bcast` over IP multicast for Open MPI.
//!
//! The crate is linked as a static library into `mca_coll_ipmc.so` together
//! with the thin C glue in `ompi-glue/`. Its folders are its layers, from the
//! pure core up to the component Open MPI loads:
//!
//! - [`protocol`]: the two-stage multicast broadcast (thesis §3.2) as a pure
//!   state machine ([`protocol::two_stage`]), and the multicast datagram
//!   format ([`protocol::datagram`], `docs/datagram.md`);
//! - [`algorithms`]: the improved linear and the fragmented chain broadcasts
//!   (thesis §1.5.1, §1.5.2), over the point-to-point operations they need as
//!   a trait ([`algorithms::transport`]), so that they run unchanged on Open
//!   MPI's PML and on the in-memory network of the tests;
//! - [`net`]: the interface a communicator multicasts on (and its IPv6 source
//!   address, `docs/ipv6.md`), and its sockets;
//! - [`group`]: the draw of a communicator's multicast group, port and
//!   instance id from a collected seed ([`group::entropy`]) stretched by
//!   Blum-Blum-Shub ([`group::bbs`]) (thesis §3.3, §3.4), and the agreement of
//!   all ranks on it ([`group::setup`]);
//! - [`driver`]: the I/O the multicast driver is written against
//!   ([`driver::io`]), the driver of the two-stage broadcast over real sockets
//!   and Open MPI point-to-point or a simulated network
//!   ([`driver::multicast`]), and broadcasts that returned but still owe
//!   their neighbours frames, finished from Open MPI's progress engine
//!   ([`driver::background`]);
//! - [`component`]: the MCA parameters as Rust sees them and the per-call
//!   choice of algorithm (thesis §3.5, [`component::config`]), how ranks
//!   spread over nodes, the counters of `coll_ipmc_print_statistics`, and the
//!   per-communicator module with the broadcast entry point
//!   ([`component::module`]);
//! - [`ffi`]: the Open MPI boundary, the only place with `unsafe`: the entry
//!   points C calls ([`ffi::exports`]) on top, and below every layer that
//!   does I/O, the calls into Open MPI ([`ffi::ompi`]) and the operating
//!   system ([`ffi::os`]).
//!
//! Each layer builds on the ones before it in this list. The exceptions are
//! shared definitions, not calls back up: the I/O traits of [`driver::io`],
//! which [`net`] implements and [`group::setup`] is written against; the
//! parameters ([`component::config`]), which the setup reads; the counters of
//! [`component::stats`], which the driver fills; and [`ffi::ompi`] and
//! [`ffi::os`], which the layers call, and which import no more of the crate
//! than the traits they implement.
//!
//! Tests only: `testing`, an in-memory point-to-point network of threads. The
//! protocol and its driver are tested on the simulator (`sim/`).

pub mod algorithms;
pub mod component;
pub mod driver;
pub mod ffi;
pub mod group;
pub mod net;
pub mod protocol;

#[cfg(test)]
mod testing;
