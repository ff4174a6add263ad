//! The user's buffer lent to a broadcast for as long as the call that lends
//! it runs ([`lend`]), or until the request of an `MPI_Ibcast` completes
//! ([`crate::platform::ompi::UserMessage::lend`]), so that the message lies
//! in one buffer, not two. A lifetime cannot say how long: the broadcast
//! waits in its communicator's queue, which outlives the call. So the loan
//! is checked at each use, under a lock that its end ([`Loan`]) takes too:
//! once it ended, the lent memory is never touched again; a use after it
//! panics rather than reading freed memory, and the end waits for a use in
//! progress on another thread. Open MPI may work in the memory too
//! ([`Lent::memory`]: a receive or send of a nonblocking broadcast, or a
//! part of one over two levels), unchecked: the loan's owner ends the loan
//! only after that message or broadcast completed or was dropped, and a drop
//! cancels or waits for it.

use std::ops::Range;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::protocol::two_stage::Lent;

/// Memory lent by [`lend`] or [`LentBuffer::new`].
pub struct LentBuffer {
    ptr: NonNull<u8>,
    len: usize,
    /// Whether the loan is open.
    open: Arc<Mutex<bool>>,
}

// SAFETY: ipmc reaches the memory only through `read` and `write`, under
// the loan's lock, while the loan is open (both checked there), on whichever
// thread; the loan ends under the same lock. What `memory` hands to Open MPI
// it reads or writes from whichever thread; ipmc does not write those bytes
// meanwhile, nor read the ones Open MPI writes.
unsafe impl Send for LentBuffer {}

impl LentBuffer {
    /// The `len` bytes at `ptr` lent until the [`Loan`] is dropped.
    ///
    /// # Safety
    /// The bytes are valid for reads and writes, and nothing else reaches
    /// them, until the loan is dropped.
    pub(crate) unsafe fn new(ptr: NonNull<u8>, len: usize) -> (Loan, LentBuffer) {
        let loan = Loan(Arc::new(Mutex::new(true)));
        let open = Arc::clone(&loan.0);
        (loan, LentBuffer { ptr, len, open })
    }

    /// The loan's lock, held while the memory is used; panics if the loan
    /// ended.
    fn open(&self) -> MutexGuard<'_, bool> {
        // A panic while it was held (in a reader's `f`) poisons the lock;
        // the flag it guards stays right.
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        assert!(*open, "lent memory used after its loan ended");
        open
    }
}

impl Lent for LentBuffer {
    fn len(&self) -> usize {
        self.len
    }

    fn read(&self, range: Range<usize>, f: &mut dyn FnMut(&[u8])) {
        let _open = self.open();
        assert!(
            range.start <= range.end && range.end <= self.len,
            "{range:?} is lent"
        );
        // SAFETY: the memory is valid while the loan is open (`new`'s
        // contract), held so by the guard, and `range` lies in it. Only the
        // bytes read are borrowed: Open MPI may be receiving into others
        // ([`Lent::memory`]), never into these (its receive completed before
        // they are read); `&self` excludes a write through `&mut self`.
        let bytes =
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(range.start), range.len()) };
        f(bytes);
    }

    fn write(&mut self, at: usize, src: &[u8]) {
        let _open = self.open();
        assert!(
            at <= self.len && src.len() <= self.len - at,
            "the bytes written are lent"
        );
        // SAFETY: as in `read`, for the bytes written, which Open MPI
        // neither receives into nor sends from meanwhile (a segment is sent
        // once written); `&mut self` makes this the only reference.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(at), src.len()) };
        bytes.copy_from_slice(src);
    }

    /// For Open MPI to work in: a receive or send of the nonblocking linear
    /// or chain broadcast, or a part of one over two levels
    /// ([`crate::platform::ompi::Comm::ibcast`]); panics if the loan ended.
    fn memory(&mut self) -> Option<(NonNull<u8>, usize)> {
        drop(self.open());
        Some((self.ptr, self.len))
    }
}

/// A loan of memory, ended when dropped: its [`LentBuffer`] no longer
/// reaches the memory.
pub struct Loan(Arc<Mutex<bool>>);

impl Drop for Loan {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = false;
    }
}

/// Runs `f` with `buf` lent to it as a [`LentBuffer`], usable until `f`
/// returns (or unwinds).
pub fn lend<R>(buf: &mut [u8], f: impl FnOnce(LentBuffer) -> R) -> R {
    // SAFETY: `buf` is borrowed, so valid and reached by nothing else, until
    // this function returns, and `_loan` is dropped then (or on unwinding).
    let (_loan, lent) = unsafe { LentBuffer::new(NonNull::from(&mut *buf).cast(), buf.len()) };
    f(lent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lent_buffer_is_the_callers_memory() {
        let mut buf = vec![1u8, 2, 3];
        lend(&mut buf, |mut lent| {
            let mut seen = Vec::new();
            lent.read(1..3, &mut |b| seen.extend_from_slice(b));
            assert_eq!(seen, [2, 3]);
            lent.write(1, &[9]);
        });
        assert_eq!(buf, [1, 9, 3]);
    }

    #[test]
    #[should_panic(expected = "lent memory used after its loan ended")]
    fn a_use_after_the_loan_panics() {
        let mut buf = vec![0u8; 4];
        let kept = lend(&mut buf, |lent| lent);
        drop(buf);
        kept.read(0..4, &mut |_| {});
    }
}
