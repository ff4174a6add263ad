//! The CPU's own instructions where portable code is much slower, with the
//! `unsafe` they take: POLYVAL 16 blocks at a time for the datagrams' tag
//! ([`polyval`]). The ground layer: it imports nothing of the crate, and
//! each of its types works (or says it cannot) whatever the CPU.
#![allow(unsafe_code)]

pub mod polyval;
