//! An in-memory network for the algorithms' tests: one thread per rank, one
//! FIFO channel per ordered pair of ranks, receives matched in posting order
//! per sender as MPI matches them.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread;
use std::time::Duration;

use crate::base::error::Result;
use crate::base::io::{MessageIo, Wait};
use crate::base::transport::{ReqId, Transport};

enum Req {
    Done,
    Recv { range: Range<usize>, src: usize },
}

pub struct MemTransport {
    rank: usize,
    buf: Vec<u8>,
    to: Vec<Sender<Vec<u8>>>,
    from: Vec<Receiver<Vec<u8>>>,
    reqs: Vec<Req>,
    posted: Vec<VecDeque<usize>>,
}

impl MemTransport {
    /// Completes the oldest receive posted for `src` with the next message from it.
    fn match_next(&mut self, src: usize) {
        let id = self.posted[src]
            .pop_front()
            .expect("waiting on a receive that was posted");
        let msg = self.from[src]
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("rank {} waits forever for rank {src}", self.rank));
        let Req::Recv { range, .. } = std::mem::replace(&mut self.reqs[id], Req::Done) else {
            unreachable!("posted lists receives only")
        };
        assert_eq!(
            msg.len(),
            range.len(),
            "message length differs from the posted receive"
        );
        self.buf[range].copy_from_slice(&msg);
    }
}

impl Transport for MemTransport {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.to.len()
    }
    fn len(&self) -> usize {
        self.buf.len()
    }
    fn isend(&mut self, range: Range<usize>, peer: usize) -> Result<ReqId> {
        assert_ne!(peer, self.rank, "send to self");
        self.to[peer]
            .send(self.buf[range].to_vec())
            .expect("peer alive");
        self.reqs.push(Req::Done);
        Ok(ReqId(self.reqs.len() - 1))
    }
    fn irecv(&mut self, range: Range<usize>, peer: usize) -> Result<ReqId> {
        assert_ne!(peer, self.rank, "receive from self");
        assert!(range.end <= self.buf.len());
        self.reqs.push(Req::Recv { range, src: peer });
        let id = self.reqs.len() - 1;
        self.posted[peer].push_back(id);
        Ok(ReqId(id))
    }
    fn wait_all(&mut self, reqs: &[ReqId]) -> Result<()> {
        for &ReqId(id) in reqs {
            while let Req::Recv { src, .. } = self.reqs[id] {
                self.match_next(src);
            }
        }
        Ok(())
    }
}

/// The byte the root holds at `index`.
fn pattern(index: usize) -> u8 {
    (index.wrapping_mul(31) ^ (index >> 8)) as u8
}

/// Runs `algorithm` on `size` ranks for a `len`-byte message from `root` and
/// checks that every rank ends with the root's bytes and nothing is left over.
pub fn run_bcast<F>(size: usize, root: usize, len: usize, algorithm: F)
where
    F: Fn(&mut MemTransport, usize) -> Result<()> + Send + Sync + Copy + 'static,
{
    // senders[src][dst] and receivers[dst][src] are the two ends of one channel.
    let mut senders: Vec<Vec<Option<Sender<Vec<u8>>>>> = (0..size).map(|_| vec![]).collect();
    let mut receivers: Vec<Vec<Option<Receiver<Vec<u8>>>>> = (0..size).map(|_| vec![]).collect();
    for to_dst in senders.iter_mut() {
        for from_src in receivers.iter_mut() {
            let (tx, rx) = channel();
            to_dst.push(Some(tx));
            from_src.push(Some(rx));
        }
    }
    let handles: Vec<_> = (0..size)
        .map(|rank| {
            let to = senders[rank]
                .iter_mut()
                .map(|s| s.take().unwrap())
                .collect();
            let from = receivers[rank]
                .iter_mut()
                .map(|r| r.take().unwrap())
                .collect();
            thread::spawn(move || {
                let buf = (0..len)
                    .map(|i| if rank == root { pattern(i) } else { 0xEE })
                    .collect();
                let mut t = MemTransport {
                    rank,
                    buf,
                    to,
                    from,
                    reqs: Vec::new(),
                    posted: (0..size).map(|_| VecDeque::new()).collect(),
                };
                algorithm(&mut t, root).expect("in-memory transport never fails");
                assert!(
                    t.posted.iter().all(VecDeque::is_empty),
                    "receive left posted"
                );
                for rx in &t.from {
                    assert!(rx.try_recv().is_err(), "message left unreceived");
                }
                t.buf
            })
        })
        .collect();
    for (rank, h) in handles.into_iter().enumerate() {
        let buf = h.join().expect("rank thread panicked");
        let wrong = (0..len).filter(|&i| buf[i] != pattern(i)).count();
        assert_eq!(
            wrong, 0,
            "rank {rank} of {size}, root {root}, {len} bytes: {wrong} wrong bytes"
        );
    }
}

/// Messages that own their buffers ([`MessageIo`]) on the same kind of
/// network, for code written against it (the setup agreement).
pub struct MemMessages {
    to: Vec<Sender<Vec<u8>>>,
    from: Vec<Receiver<Vec<u8>>>,
    /// Per message: the sender and capacity of a receive not yet matched.
    open: Vec<Option<(usize, usize)>>,
    posted: Vec<VecDeque<usize>>,
}

impl MessageIo for MemMessages {
    type Id = usize;

    fn send(&mut self, peer: usize, data: Vec<u8>) -> Result<usize> {
        self.to[peer].send(data).expect("the peer's thread lives");
        self.open.push(None);
        Ok(self.open.len() - 1)
    }

    fn recv(&mut self, peer: usize, capacity: usize) -> Result<usize> {
        self.open.push(Some((peer, capacity)));
        let id = self.open.len() - 1;
        self.posted[peer].push_back(id);
        Ok(id)
    }

    fn test(&mut self, id: usize, _wait: Wait) -> Result<Option<Vec<u8>>> {
        let Some((src, capacity)) = self.open[id] else {
            return Ok(Some(Vec::new()));
        };
        if self.posted[src].front() != Some(&id) {
            return Ok(None);
        }
        let Ok(mut msg) = self.from[src].try_recv() else {
            return Ok(None);
        };
        msg.truncate(capacity);
        self.posted[src].pop_front();
        self.open[id] = None;
        Ok(Some(msg))
    }

    fn wait(&mut self, id: usize) -> Result<Vec<u8>> {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(msg) = self.test(id, Wait::Progress)? {
                return Ok(msg);
            }
            assert!(std::time::Instant::now() < deadline, "waits forever");
            thread::sleep(Duration::from_micros(100));
        }
    }
}

/// Runs `f` on every rank of `size`, one thread each, over [`MemMessages`].
pub fn run_messages<T, F>(size: usize, f: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize, &mut MemMessages) -> T + Send + Sync + 'static,
{
    let mut to: Vec<Vec<Sender<Vec<u8>>>> = (0..size).map(|_| Vec::new()).collect();
    let mut from: Vec<Vec<Receiver<Vec<u8>>>> = (0..size).map(|_| Vec::new()).collect();
    for senders in &mut to {
        for receivers in &mut from {
            let (tx, rx) = channel();
            senders.push(tx);
            receivers.push(rx);
        }
    }
    let f = std::sync::Arc::new(f);
    let handles: Vec<_> = to
        .into_iter()
        .zip(from)
        .enumerate()
        .map(|(rank, (to, from))| {
            let f = f.clone();
            thread::spawn(move || {
                let mut m = MemMessages {
                    to,
                    from,
                    open: Vec::new(),
                    posted: (0..size).map(|_| VecDeque::new()).collect(),
                };
                f(rank, &mut m)
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("a rank panicked"))
        .collect()
}
