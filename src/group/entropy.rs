//! The entropy collector of the thesis (§3.3) in today's terms: a few bits
//! that differ between processes, hosts and calls, compressed to the 64-bit
//! seed of the Blum-Blum-Shub generator ([`crate::group::bbs`]). Every source is
//! optional; the collector never blocks, never fails and never panics.

use std::collections::hash_map::DefaultHasher;
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Counts the calls, so that two calls in one process differ even when the
/// clocks are coarse (the role of `tmpnam()` in the thesis).
static CALLS: AtomicU64 = AtomicU64::new(0);

/// Returns 64 bits collected from the host name, the clocks, `/dev/urandom`,
/// the process and thread identity, a call counter and the stack address.
pub fn collect() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);

    // DefaultHasher (SipHash with fixed keys) only compresses: it adds no
    // secrecy, and the result is as unpredictable as the sources, no more.
    // Keyed hashers (`RandomState`) are avoided because std panics when it
    // cannot get their keys.
    let mut h = DefaultHasher::new();

    // Not random, but distinguishes hosts (MPI_Get_processor_name).
    hostname().hash(&mut h);
    // The high-resolution clocks (MPI_Wtime): the wall clock separates runs,
    // the monotonic one adds the process's own timing jitter.
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos().hash(&mut h),
        Err(e) => e.duration().as_nanos().hash(&mut h),
    }
    start.elapsed().as_nanos().hash(&mut h);
    // The OS's pool, when there is one; never /dev/random, which may block.
    urandom().hash(&mut h);
    // Process and thread identity, and an address that ASLR moves.
    std::process::id().hash(&mut h);
    std::thread::current().id().hash(&mut h);
    CALLS.fetch_add(1, Ordering::Relaxed).hash(&mut h);
    let local = 0u8;
    (std::ptr::addr_of!(local) as usize).hash(&mut h);
    h.finish()
}

/// This host's name, or empty when the system does not say.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default()
}

/// 32 bytes of `/dev/urandom`, or `None` where it cannot be read.
fn urandom() -> Option<[u8; 32]> {
    let mut bytes = [0u8; 32];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .ok()
        .map(|()| bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_calls_differ() {
        let a = collect();
        let b = collect();
        assert_ne!(a, b);
    }

    #[test]
    fn calls_from_threads_differ() {
        let mut all: Vec<u64> = (0..8)
            .map(|_| std::thread::spawn(collect))
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 8);
    }
}
