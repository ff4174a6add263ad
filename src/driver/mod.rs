//! Drives the two-stage protocol over real or simulated I/O: the I/O traits,
//! the driver, and the broadcasts finished in the background.

pub mod background;
pub mod io;
pub mod multicast;
