//! `MPI_Barrier` on the simulated cluster: ipmc's barrier with the
//! component's own trees ([`ipmc::algorithms::barrier`]) and datagram driver,
//! and models of Open MPI tuned's linear and Bruck (dissemination) barriers
//! as point-to-point schedules (with [`BARRIER`], the barrier tag).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use ipmc::algorithms::barrier::{self, RELEASE_LEN};
use ipmc::base::counters::Datagrams;
use ipmc::driver::multicast::{Driver, Ranks};
use ipmc::protocol::two_stage::Broadcast;

use crate::engine::HostIo;
use crate::p2p::{P2pState, BARRIER};
use crate::programs::{IpmcParams, Op, Program, Status};
use crate::socket::SimSocket;
use crate::Ns;

/// Where a rank of ipmc's barrier stands.
enum Phase {
    /// Waiting for its children's arrivals.
    Arrivals(Vec<usize>),
    /// Arrived; waiting for the release (not rank 0).
    Release(Box<Broadcast>),
    /// Released; its point-to-point messages may still be under way.
    Released,
}

/// A rank's part in ipmc's barrier (`Module::run_barrier`): arrivals up
/// one tree, rank 0's release datagram through the communicator's driver
/// (which the caller lends at every step), and point-to-point releases down
/// the other tree, with the barrier tag.
pub struct BarrierRank {
    p2p: Rc<RefCell<P2pState>>,
    rank: usize,
    size: usize,
    phase: Phase,
    /// The receive of the parent's point-to-point release.
    release: Option<usize>,
    /// Sends of arrivals and releases, until they complete.
    sends: Vec<usize>,
    by_datagram: bool,
}

impl BarrierRank {
    pub fn new(io: &HostIo, rank: usize, size: usize) -> Self {
        let (below, release) = {
            let mut p2p = io.p2p.borrow_mut();
            let release = barrier::releases(rank, size)
                .0
                .map(|from| p2p.recv_tagged(from, BARRIER));
            let below = barrier::arrivals(rank, size)
                .1
                .map(|c| p2p.recv_tagged(c, BARRIER))
                .collect();
            (below, release)
        };
        BarrierRank {
            p2p: io.p2p.clone(),
            rank,
            size,
            phase: Phase::Arrivals(below),
            release,
            sends: Vec::new(),
            by_datagram: false,
        }
    }

    /// Whether the datagram, not the point-to-point release, released this
    /// rank (rank 0 releases itself).
    pub fn by_datagram(&self) -> bool {
        self.by_datagram
    }

    fn send(&mut self, to: usize) {
        let id = self
            .p2p
            .borrow_mut()
            .send_tagged(to, BARRIER, 0, Vec::new(), false);
        self.sends.push(id);
    }

    /// Releases the children of the releases' tree.
    fn released(&mut self) {
        for c in barrier::releases(self.rank, self.size).1 {
            self.send(c);
        }
        self.phase = Phase::Released;
    }

    /// One step at `now` with the communicator's driver.
    pub fn step(
        &mut self,
        driver: &mut Driver<SimSocket>,
        now: Ns,
        stats: &mut Datagrams,
    ) -> Status {
        let at = Duration::from_nanos(now);
        if let Phase::Arrivals(below) = &mut self.phase {
            let mut p2p = self.p2p.borrow_mut();
            below.retain(|&id| p2p.test(id).is_none());
            if below.is_empty() {
                drop(p2p);
                if let Some(up) = barrier::arrivals(self.rank, self.size).0 {
                    self.send(up);
                }
                let ranks = Ranks {
                    rank: self.rank,
                    size: self.size,
                    root: 0,
                };
                let byte = [0u8; RELEASE_LEN];
                let root = (self.rank == 0).then_some(&byte[..]);
                let mut b = driver.begin(ranks, RELEASE_LEN, root, at, stats);
                if self.rank == 0 {
                    while !b.stage1_done() {
                        driver.stage1(&mut b, at, stats);
                    }
                    self.released();
                } else {
                    self.phase = Phase::Release(Box::new(b));
                }
            }
        }
        if let Phase::Release(b) = &mut self.phase {
            driver.stage1(b, at, stats);
            let by_datagram = b.is_complete();
            let by_p2p = self
                .release
                .is_some_and(|id| self.p2p.borrow_mut().test(id).is_some());
            if by_p2p {
                self.release = None;
            }
            if by_datagram || by_p2p {
                self.by_datagram = by_datagram;
                self.released();
            }
        }
        let returned = matches!(self.phase, Phase::Released);
        let mut p2p = self.p2p.borrow_mut();
        if let Some(id) = self.release.filter(|_| returned) {
            if p2p.test(id).is_some() {
                self.release = None;
            }
        }
        self.sends.retain(|&id| p2p.test(id).is_none());
        Status {
            returned,
            done: returned && self.release.is_none() && self.sends.is_empty(),
        }
    }
}

/// ipmc's barrier as the only call of a rank, with a driver of its own.
pub struct IpmcBarrier {
    driver: Driver<SimSocket>,
    rank: BarrierRank,
    stats: Datagrams,
}

impl IpmcBarrier {
    pub fn new(io: &HostIo, rank: usize, size: usize, params: IpmcParams, comm_id: u64) -> Self {
        IpmcBarrier {
            driver: params.driver(io, comm_id, 0),
            rank: BarrierRank::new(io, rank, size),
            stats: Datagrams::default(),
        }
    }

    /// See [`BarrierRank::by_datagram`].
    pub fn by_datagram(&self) -> bool {
        self.rank.by_datagram()
    }
}

impl Program for IpmcBarrier {
    fn step(&mut self, now: Ns) -> Result<Status, String> {
        Ok(self.rank.step(&mut self.driver, now, &mut self.stats))
    }

    fn wake_at(&self) -> Option<Ns> {
        None
    }

    fn datagrams(&self) -> Option<Datagrams> {
        Some(self.stats)
    }
}

/// Open MPI's linear barrier (`ompi_coll_base_barrier_intra_basic_linear`,
/// tuned's 1): every rank sends rank 0 an empty message and waits for one
/// back; rank 0 receives them all, then sends to all.
pub fn linear(rank: usize, size: usize) -> Vec<Op> {
    if rank == 0 {
        let mut ops: Vec<Op> = (1..size)
            .map(|from| Op::Recv {
                from,
                after: None,
                also: None,
            })
            .collect();
        let last = ops.len().checked_sub(1);
        ops.extend((1..size).map(|to| Op::Send {
            to,
            len: 0,
            after: last,
            also: None,
        }));
        ops
    } else {
        vec![
            Op::Send {
                to: 0,
                len: 0,
                after: None,
                also: None,
            },
            Op::Recv {
                from: 0,
                after: None,
                also: None,
            },
        ]
    }
}

/// Open MPI's Bruck barrier (`ompi_coll_base_barrier_intra_bruck`, tuned's
/// 4; a dissemination barrier): in round k every rank sends to the rank
/// 2^k after it and receives from the rank 2^k before it, ⌈log2 p⌉ rounds,
/// each after the last round's receive.
pub fn bruck(rank: usize, size: usize) -> Vec<Op> {
    let mut ops = Vec::new();
    let mut last = None;
    let mut distance = 1;
    while distance < size {
        ops.push(Op::Send {
            to: (rank + distance) % size,
            len: 0,
            after: last,
            also: None,
        });
        ops.push(Op::Recv {
            from: (rank + size - distance) % size,
            after: last,
            also: None,
        });
        last = Some(ops.len() - 1);
        distance *= 2;
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_models_send_what_open_mpi_sends() {
        let sends = |ops: &[Op]| ops.iter().filter(|o| matches!(o, Op::Send { .. })).count();
        assert_eq!(sends(&linear(0, 8)), 7);
        assert_eq!(sends(&linear(5, 8)), 1);
        // ⌈log2 p⌉ rounds.
        assert_eq!(sends(&bruck(3, 8)), 3);
        assert_eq!(sends(&bruck(3, 9)), 4);
        assert_eq!(sends(&bruck(0, 2)), 1);
    }
}
