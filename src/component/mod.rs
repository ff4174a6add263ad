//! The Open MPI component: what its parameters choose, the measured choice,
//! its counters and logging, and the per-communicator module that
//! dispatches each call, with its work that goes on from Open MPI's
//! progress engine.

pub mod background;
pub mod config;
pub mod known;
pub mod levels;
pub(crate) mod logging;
pub mod module;
pub mod node_segment;
pub mod nodes;
pub mod parked;
pub mod stats;
