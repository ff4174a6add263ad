//! The ground floor the layers above are written against: the parameters
//! ([`params`], generated from `mca-params/ipmc_params.def`), the I/O of
//! datagrams and point-to-point messages ([`io`], [`transport`]) that Open
//! MPI, the sockets, the tests' network and the simulator implement, and the
//! datagram counters the drivers fill ([`counters`]).

pub mod counters;
pub mod error;
pub mod io;
pub mod params;
pub mod transport;
