//! The Open MPI component: its parameters, counters and logging, and the
//! per-communicator module that dispatches each broadcast.

pub mod config;
pub mod levels;
pub(crate) mod logging;
pub mod module;
pub mod nodes;
pub mod stats;
pub mod tuning;
