//! Drives the two-stage protocol over real or simulated I/O (the traits of
//! [`crate::base::io`]): the driver, and the broadcasts finished in the
//! background.

pub mod background;
pub mod multicast;
