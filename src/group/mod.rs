//! Choosing a communicator's multicast group, port and id, and the agreement
//! of all ranks on them.

pub mod bbs;
pub mod entropy;
pub mod groups;
pub mod setup;
pub mod stated;
pub mod vote;
