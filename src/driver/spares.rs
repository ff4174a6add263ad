//! Message buffers of finished broadcasts, kept for the next ones in this
//! process, whichever communicator's. A fresh buffer of several MiB costs a
//! page fault per page and zeroing at every rank: it made the measured
//! choice's first calls of multicast at 16 MiB on 4 emulated hosts at
//! 10 Gbit/s a third slower than the later ones (32.1-35.5 against 23.4 ms).
//! Kept in one pool for the process, so that memory held does not grow with
//! the number of communicators, and only up to [`UP_TO`] bytes each, so that
//! a program that broadcasts a large input once has that memory back.

use std::sync::{Mutex, MutexGuard};

/// Buffers kept: one broadcast running and one still repairing in the
/// background.
const KEPT: usize = 2;

/// Messages below this size are allocated as before: their buffers cost
/// little, and one of them (a barrier's release, whose broadcast is never
/// given back) must not carry a large kept buffer away.
const FROM: usize = 64 << 10;

/// Larger buffers are freed when their broadcast ends: a message of 1 GB
/// kept would hold 1 GB of the process's memory for the rest of the job,
/// as Open MPI's own broadcast does not. A fresh buffer's page faults cost
/// such a broadcast about the share they cost at 16 MiB (a third at
/// 10 Gbit/s; a second broadcast of 1,000 MiB on 3 emulated hosts took
/// 2.0 s instead of 1.25); memory the program expects back weighs more.
/// glibc returns a freed buffer of this size to the kernel at once (it maps
/// every block above 32 MiB on its own).
const UP_TO: usize = 64 << 20;

static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

fn pool() -> MutexGuard<'static, Vec<Vec<u8>>> {
    // A panic caught at the FFI boundary may poison the lock; buffers stay usable.
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The smallest kept buffer that holds `len` bytes without growing, or an
/// empty one (always below [`FROM`] bytes). Its bytes are a finished
/// broadcast's.
pub fn take(len: usize) -> Vec<u8> {
    if len < FROM {
        return Vec::new();
    }
    let mut pool = pool();
    let fits = (0..pool.len())
        .filter(|&i| pool[i].capacity() >= len)
        .min_by_key(|&i| pool[i].capacity());
    fits.map(|i| pool.swap_remove(i)).unwrap_or_default()
}

/// Keeps `buffer` for a later broadcast: the [`KEPT`] largest of
/// [`FROM`] to [`UP_TO`] bytes are kept.
pub fn give(buffer: Vec<u8>) {
    if !(FROM..=UP_TO).contains(&buffer.capacity()) {
        return;
    }
    let mut pool = pool();
    pool.push(buffer);
    if pool.len() > KEPT {
        let smallest = (0..pool.len())
            .min_by_key(|&i| pool[i].capacity())
            .expect("more than KEPT");
        pool.swap_remove(smallest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pool is the process's: one test alone uses it.
    #[test]
    fn the_largest_buffers_are_kept_and_the_smallest_fitting_one_taken() {
        while pool().pop().is_some() {}
        assert_eq!(take(FROM).capacity(), 0, "nothing kept yet");
        for len in [FROM, 5 * FROM, 3 * FROM] {
            give(vec![1; len]);
        }
        assert_eq!(pool().len(), KEPT, "the smallest went");
        assert_eq!(take(1).capacity(), 0, "small messages take none");
        assert_eq!(take(2 * FROM).capacity(), 3 * FROM);
        assert_eq!(take(6 * FROM).capacity(), 0, "none holds it");
        assert_eq!(take(FROM).capacity(), 5 * FROM);
        give(vec![1; FROM - 1]);
        assert!(pool().is_empty(), "a small buffer is not kept");
        give(vec![1; UP_TO]);
        give(vec![1; UP_TO + 1]);
        assert_eq!(pool().len(), 1, "a buffer above UP_TO is not kept");
        assert_eq!(take(UP_TO).capacity(), UP_TO);
    }
}
