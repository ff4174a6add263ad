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
//! - [`bbs`]: the Blum-Blum-Shub generator that stretches entropy into seeds
//!   for the choice of multicast groups (thesis §3.4);
//! - [`module`]: the per-communicator state and the broadcast entry point;
//! - [`ffi`]: the Open MPI boundary, the only place with `unsafe`.

pub mod bbs;
pub mod chain;
pub mod config;
pub mod datagram;
pub mod ffi;
pub mod linear;
mod logging;
pub mod module;
pub mod stats;
pub mod transport;

#[cfg(test)]
mod test_net;
