//! ipmc: `MPI_Bcast` over IP multicast for Open MPI.
//!
//! The crate is linked as a static library into `mca_coll_ipmc.so` together
//! with the thin C glue in `ompi-glue/`. Its folders are its layers, from the
//! ground up; each imports only from the layers before it in this list (a
//! test holds them to it, `tests/layers.rs`; `docs/architecture.md`):
//!
//! - [`cpu`]: the CPU's own instructions where portable code is much
//!   slower, with the `unsafe` they take (POLYVAL for the datagrams' tag);
//! - [`protocol`]: the two-stage multicast broadcast (thesis §3.2) as a pure
//!   state machine ([`protocol::two_stage`]), its flow control, and the
//!   multicast datagram format ([`protocol::datagram`], `docs/datagram.md`);
//! - [`base`]: what the layers above are written against: the parameters,
//!   generated from `mca-params/ipmc_params.def` ([`base::params`]), the I/O
//!   of datagrams and messages ([`base::io`]) and point-to-point operations
//!   ([`base::transport`]) with their errors, and the datagram counters;
//! - [`platform`]: Open MPI ([`platform::ompi`]) and the operating system
//!   ([`platform::os`]) behind those traits, with the `unsafe` it takes;
//! - [`net`]: the interface a communicator multicasts on (and its IPv6 source
//!   address, `docs/ipv6.md`), and its sockets;
//! - [`algorithms`]: the improved linear and the fragmented chain broadcasts
//!   (thesis §1.5.1, §1.5.2), their nonblocking form, the barrier's trees;
//! - [`group`]: the draw of a communicator's multicast group, port and
//!   instance id from a collected seed ([`group::entropy`]) stretched by
//!   Blum-Blum-Shub ([`group::bbs`]) (thesis §3.3, §3.4), and the agreement of
//!   all ranks on it ([`group::setup`]);
//! - [`driver`]: the driver of the two-stage broadcast over real sockets and
//!   Open MPI point-to-point or a simulated network ([`driver::multicast`]);
//! - [`engine`]: what a communicator does around its calls, told the time
//!   and generic over its I/O, which the simulator runs too: the queue of its
//!   broadcasts and the work they leave behind ([`engine::queue`]), the
//!   measured choice of algorithm ([`engine::tuning`], [`engine::choice`]);
//! - [`component`]: what the parameters choose (thesis §3.5,
//!   [`component::config`]),
//!   how ranks spread over nodes, the counters of
//!   `coll_ipmc_print_statistics`, the per-communicator module
//!   ([`component::module`]) and its work finished from Open MPI's progress
//!   engine ([`component::background`]);
//! - [`ffi`]: the entry points C calls, each behind the panic boundary.
//!
//! `unsafe` is denied but in [`platform`], [`ffi`] and [`cpu`]. Tests only:
//! `testing`, an in-memory point-to-point network of threads. The protocol and its
//! driver are also run by the simulator (`sim/`).
#![deny(unsafe_code)]
// Its items are public for the simulator and the tests, not as an API: the
// documentation is read with the private items (`cargo doc
// --document-private-items`), where links to them resolve.
#![allow(rustdoc::private_intra_doc_links)]

pub mod algorithms;
pub mod base;
pub mod component;
pub mod cpu;
pub mod driver;
pub mod engine;
pub mod ffi;
pub mod group;
pub mod net;
pub mod platform;
pub mod protocol;

#[cfg(test)]
mod testing;
