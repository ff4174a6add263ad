//! The fragmented chain broadcast (thesis §1.5.2): the message is cut into
//! segments that travel along the virtual ring starting at the root; a rank
//! forwards a segment to its successor as soon as it has it, so segments
//! pipeline through the chain.

use std::collections::VecDeque;
use std::ops::Range;

use crate::algorithms::transport::{P2pResult, ReqId, Transport};

/// Receives and sends a rank keeps in flight: enough to keep the pipeline full
/// without posting one request per segment of a huge message.
const WINDOW: usize = 8;

/// The ring neighbours of `rank` for a broadcast from `root`: its predecessor
/// (none for the root) and its successor (none for the last rank).
pub fn neighbours(rank: usize, size: usize, root: usize) -> (Option<usize>, Option<usize>) {
    let pred = (rank != root).then(|| (rank + size - 1) % size);
    let succ = Some((rank + 1) % size).filter(|&s| s != root);
    (pred, succ)
}

/// The byte range of segment `index` of a `len`-byte message.
fn segment(index: usize, segment_size: usize, len: usize) -> Range<usize> {
    let start = index * segment_size;
    start..len.min(start + segment_size)
}

/// Broadcasts the transport's buffer from `root` in segments of
/// `segment_size` bytes (the last one may be shorter).
pub fn bcast<T: Transport>(t: &mut T, root: usize, segment_size: usize) -> P2pResult<()> {
    assert!(segment_size > 0, "chain segment size must be positive");
    let len = t.len();
    let segments = len.div_ceil(segment_size);
    let (pred, succ) = neighbours(t.rank(), t.size(), root);
    let seg = |i| segment(i, segment_size, len);

    let mut sends: VecDeque<ReqId> = VecDeque::with_capacity(WINDOW + 1);
    let mut recvs: VecDeque<ReqId> = VecDeque::with_capacity(WINDOW);
    if let Some(pred) = pred {
        for i in 0..segments.min(WINDOW) {
            recvs.push_back(t.irecv(seg(i), pred)?);
        }
    }
    for i in 0..segments {
        if let Some(pred) = pred {
            let req = recvs
                .pop_front()
                .expect("a receive is posted for every segment");
            t.wait_all(&[req])?;
            if i + WINDOW < segments {
                recvs.push_back(t.irecv(seg(i + WINDOW), pred)?);
            }
        }
        if let Some(succ) = succ {
            sends.push_back(t.isend(seg(i), succ)?);
            if sends.len() > WINDOW {
                let oldest = sends.pop_front().expect("sends is not empty");
                t.wait_all(&[oldest])?;
            }
        }
    }
    let pending: Vec<ReqId> = sends.into_iter().collect();
    t.wait_all(&pending)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::test_net::run_bcast;

    #[test]
    fn neighbours_form_a_chain_from_the_root() {
        assert_eq!(neighbours(2, 5, 2), (None, Some(3)));
        assert_eq!(neighbours(4, 5, 2), (Some(3), Some(0)));
        assert_eq!(neighbours(1, 5, 2), (Some(0), None));
        assert_eq!(neighbours(0, 2, 1), (Some(1), None));
    }

    #[test]
    fn segments_cover_the_message_exactly() {
        let len: usize = 10_001;
        let n = len.div_ceil(4096);
        let covered: usize = (0..n).map(|i| segment(i, 4096, len).len()).sum();
        assert_eq!(covered, len);
        assert_eq!(segment(n - 1, 4096, len), 8192..10_001);
    }

    #[test]
    fn every_rank_gets_the_roots_bytes() {
        for size in [2, 3, 4, 7] {
            for root in 0..size {
                for (len, seg) in [(1, 256), (1000, 256), (4096, 4096), (100_003, 1024)] {
                    run_bcast(size, root, len, move |t, root| super::bcast(t, root, seg));
                }
            }
        }
    }

    #[test]
    fn many_more_segments_than_the_window() {
        run_bcast(5, 3, 64 * 1024 + 17, |t, root| super::bcast(t, root, 256));
    }
}
