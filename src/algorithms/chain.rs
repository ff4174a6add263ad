//! The fragmented chain broadcast (thesis §1.5.2): the message is cut into
//! segments that travel along the virtual ring starting at the root; a rank
//! forwards a segment to its successor as soon as it has it, so segments
//! pipeline through the chain.

use std::collections::VecDeque;
use std::ops::Range;

use crate::base::error::Result;
use crate::base::transport::{ReqId, Transport};

/// Receives a rank keeps posted ahead of the segment it waits for, as Open
/// MPI's generic pipeline does (`coll_base_bcast.c`): the next segment
/// finds its receive posted while this one is forwarded.
const RECV_AHEAD: usize = 2;

/// Every this many segments, a send goes in synchronous mode. Between hosts
/// Open MPI completes a send within its eager limit (64 KiB over TCP) at
/// once, so a chain of smaller segments bounded nothing: a successor busy
/// forwarding found the segments it had not yet asked for waiting,
/// unexpected, in Open MPI's memory (a 256 MiB broadcast in segments of
/// 8 KiB grew a rank by 416 MiB). A rank waits for one such send only when it
/// comes to the next, so a successor that keeps up never makes it wait and
/// one that falls behind holds at most about twice this many segments.
pub const MATCH_EVERY: usize = 16;

/// Whether segment `index` goes in synchronous mode ([`MATCH_EVERY`]).
pub fn is_matched(index: usize) -> bool {
    index % MATCH_EVERY == MATCH_EVERY - 1
}

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
///
/// A rank forwards one segment at a time: its send completes before it
/// waits for the next segment. Its link carries both its data to the
/// successor and its acknowledgements and rendezvous answers to the
/// predecessor; with several segments queued ahead of them, those answers
/// wait and the predecessor stalls (on the emulated cluster, 8 sends in
/// flight made 4 MiB on 8 hosts 1.3 × slower than this order, which is
/// Open MPI's pipeline's). Every [`MATCH_EVERY`]th send is synchronous
/// and waited for only at the next one.
pub fn bcast<T: Transport>(t: &mut T, root: usize, segment_size: usize) -> Result<()> {
    assert!(segment_size > 0, "chain segment size must be positive");
    let len = t.len();
    let segments = len.div_ceil(segment_size);
    let (pred, succ) = neighbours(t.rank(), t.size(), root);
    let seg = |i| segment(i, segment_size, len);

    let mut recvs: VecDeque<ReqId> = VecDeque::with_capacity(RECV_AHEAD);
    let mut matched: Option<ReqId> = None;
    if let Some(pred) = pred {
        for i in 0..segments.min(RECV_AHEAD) {
            recvs.push_back(t.irecv(seg(i), pred)?);
        }
    }
    for i in 0..segments {
        if let Some(pred) = pred {
            let req = recvs
                .pop_front()
                .expect("a receive is posted for every segment");
            t.wait_all(&[req])?;
            if i + RECV_AHEAD < segments {
                recvs.push_back(t.irecv(seg(i + RECV_AHEAD), pred)?);
            }
        }
        if let Some(succ) = succ {
            if is_matched(i) {
                if let Some(previous) = matched.take() {
                    t.wait_all(&[previous])?;
                }
                matched = Some(t.issend(seg(i), succ)?);
            } else {
                let send = t.isend(seg(i), succ)?;
                t.wait_all(&[send])?;
            }
        }
    }
    if let Some(last) = matched {
        t.wait_all(&[last])?;
    }
    Ok(())
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

    /// One rank's view: every request completes when waited for; records
    /// what is outstanding whenever the rank waits for a segment.
    #[derive(Default)]
    struct Recorder {
        rank: usize,
        /// Per send: whether it is in flight, whether synchronous.
        sends: Vec<(bool, bool)>,
        recvs: Vec<bool>,
        /// (standard sends in flight, synchronous sends in flight, receives
        /// posted) at each wait for a receive.
        at_recv_wait: Vec<(usize, usize, usize)>,
    }

    impl Recorder {
        fn send(&mut self, matched: bool) -> Result<ReqId> {
            self.sends.push((true, matched));
            Ok(ReqId(2 * (self.sends.len() - 1)))
        }

        fn in_flight(&self, matched: bool) -> usize {
            self.sends.iter().filter(|&&s| s == (true, matched)).count()
        }

        /// The segments sent in synchronous mode.
        fn matched(&self) -> Vec<usize> {
            (0..self.sends.len()).filter(|&i| self.sends[i].1).collect()
        }
    }

    impl Transport for Recorder {
        fn rank(&self) -> usize {
            self.rank
        }
        fn size(&self) -> usize {
            4
        }
        fn len(&self) -> usize {
            10 * 1000 + 1
        }
        fn isend(&mut self, _: Range<usize>, _: usize) -> Result<ReqId> {
            self.send(false)
        }
        fn issend(&mut self, _: Range<usize>, _: usize) -> Result<ReqId> {
            self.send(true)
        }
        fn irecv(&mut self, _: Range<usize>, _: usize) -> Result<ReqId> {
            self.recvs.push(true);
            Ok(ReqId(2 * (self.recvs.len() - 1) + 1))
        }
        fn wait_all(&mut self, reqs: &[ReqId]) -> Result<()> {
            for &ReqId(id) in reqs {
                if id % 2 == 1 {
                    let posted = self.recvs.iter().filter(|&&b| b).count();
                    let at = (self.in_flight(false), self.in_flight(true), posted);
                    self.at_recv_wait.push(at);
                    self.recvs[id / 2] = false;
                } else {
                    self.sends[id / 2].0 = false;
                }
            }
            Ok(())
        }
    }

    #[test]
    fn one_send_at_a_time_and_two_receives_ahead() {
        // Rank 1 of 4 from root 0: a middle rank, 11 segments.
        let mut t = Recorder {
            rank: 1,
            ..Recorder::default()
        };
        bcast(&mut t, 0, 1000).unwrap();
        assert_eq!(t.sends.len(), 11);
        assert_eq!(t.at_recv_wait.len(), 11);
        // Its send completed before it waits for the next segment, whose
        // receive (and the one after) is posted.
        assert!(
            t.at_recv_wait.iter().all(|&(s, m, _)| s + m == 0),
            "{:?}",
            t.at_recv_wait
        );
        assert_eq!(t.at_recv_wait[0].2, 2);
        assert_eq!(t.at_recv_wait[10].2, 1);
        assert!(t.matched().is_empty());
        assert!(!t.sends.iter().any(|s| s.0), "every send completed");
    }

    #[test]
    fn every_sixteenth_send_waits_for_its_match_until_the_next() {
        // Rank 1 of 4 from root 0, 101 segments.
        let mut t = Recorder {
            rank: 1,
            ..Recorder::default()
        };
        bcast(&mut t, 0, 100).unwrap();
        assert_eq!(t.sends.len(), 101);
        assert_eq!(t.matched(), [15, 31, 47, 63, 79, 95]);
        // A synchronous send stays in flight while the rank goes on (the
        // wait for segment 16 finds segment 15's), never two at once.
        assert!(
            t.at_recv_wait.iter().all(|&(s, m, _)| s == 0 && m <= 1),
            "{:?}",
            t.at_recv_wait
        );
        assert_eq!(t.at_recv_wait[16].1, 1);
        assert!(!t.sends.iter().any(|s| s.0), "every send completed");
    }

    #[test]
    fn many_more_segments_than_receives_posted_ahead() {
        run_bcast(5, 3, 64 * 1024 + 17, |t, root| super::bcast(t, root, 256));
    }
}
