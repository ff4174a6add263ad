//! Drives the two-stage protocol over real or simulated I/O (the traits of
//! [`crate::base::io`]).

pub mod multicast;
mod spares;
