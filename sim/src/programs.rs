//! What each simulated rank runs: ipmc's own driver, or a model of one of
//! Open MPI tuned's broadcasts.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ipmc::base::counters::Datagrams;
use ipmc::base::io::Wait;
use ipmc::base::params::Config;
use ipmc::driver::multicast::{Driver, Ranks};
use ipmc::engine::queue::{NoWork, Queue, Turn};
use ipmc::group::setup::{self, Agreement, Facts, Joined};
use ipmc::group::stated::Stated;
use ipmc::protocol::datagram::{Auth, Protection};

use crate::engine::HostIo;
use crate::p2p::{P2pState, SimMessages, Tag, BCAST};
use crate::socket::SimSocket;
use crate::Ns;

/// Where a rank's broadcast stands after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    /// The broadcast call has returned.
    pub returned: bool,
    /// Nothing is owed to any neighbour any more.
    pub done: bool,
}

/// One rank's part of a broadcast, stepped by the engine whenever
/// something happened to its host.
pub trait Program {
    fn step(&mut self, now: Ns) -> Result<Status, String>;
    /// When the rank needs a step even if nothing happens.
    fn wake_at(&self) -> Option<Ns>;
    /// ipmc's datagram counters on this rank, if it runs ipmc.
    fn datagrams(&self) -> Option<Datagrams> {
        None
    }
    /// The decision table of ipmc's automatic choice, if it runs it.
    fn table(&self) -> Option<String> {
        None
    }
}

/// How ipmc runs: its parameters that matter on the wire.
#[derive(Clone, Copy, Debug)]
pub struct IpmcParams {
    pub fragment_size: usize,
    pub auth: Auth,
    pub root_wait: Duration,
    /// Bytes of messages whose broadcasts may leave what they still owe
    /// their neighbours to the background (`coll_ipmc_background_limit`); a
    /// larger message lies in the caller's memory and returns once it will
    /// touch it no more, and a call waits for the oldest broadcasts to
    /// finish while the background would hold more.
    pub background_limit: usize,
    /// `coll_ipmc_flow_window`: bytes the root may run ahead of its slowest
    /// receiver; 0 sized from the receive buffer as ipmc sizes it.
    pub flow_window: usize,
}

impl IpmcParams {
    /// A communicator's queue of broadcasts (`ipmc::engine::queue`) with
    /// the component's driver on `io`'s socket, flow control's window sized
    /// as ipmc sizes it.
    pub fn queue(&self, io: &HostIo, comm_id: u64) -> Queue<SimSocket, SimMessages, NoWork> {
        // Linux reports twice the bytes a socket's datagrams may fill.
        let reported = u32::try_from(io.socket.borrow().rcvbuf * 2).unwrap_or(u32::MAX);
        let datagram_len = self.fragment_size + Protection::new(self.auth).overhead();
        let window = setup::flow_window(self.flow_window, reported, datagram_len);
        let mut queue = Queue::new(self.background_limit);
        queue.set_driver(self.driver(io, comm_id, window));
        queue
    }

    /// The component's driver on `io`'s socket, with flow control's window
    /// of `window` datagrams (0: none) and no loss injected.
    pub fn driver(&self, io: &HostIo, comm_id: u64, window: u32) -> Driver<SimSocket> {
        Driver::new(
            SimSocket(io.socket.clone()),
            comm_id,
            self.fragment_size,
            self.auth,
            self.root_wait,
            window,
            (0, 0),
        )
    }
}

/// One broadcast call of a rank: the root and its message.
#[derive(Clone, Debug)]
pub struct Call {
    pub root: usize,
    pub message: Rc<[u8]>,
}

/// A rank running ipmc's broadcasts one call after another, as a program's
/// loop of `MPI_Bcast` makes them, on one communicator: the component's own
/// queue (`ipmc::engine::queue`) with its driver, so that what runs
/// alongside what, when a call returns and what it leaves to the background
/// are the component's rules. The next call comes as soon as one returns.
/// Checked on the way: each call's bytes when it returns and when its chain
/// ends, each `NEED` against what the rank lacks when it goes, the chain's
/// bytes against what was asked for.
pub struct IpmcRank {
    queue: Queue<SimSocket, SimMessages, NoWork>,
    msgs: Rc<RefCell<P2pState>>,
    rank: usize,
    size: usize,
    plan: VecDeque<Call>,
    /// The call in progress and its buffer.
    current: Option<(Call, Buffer)>,
    /// The root's message of each call, by broadcast number.
    messages: Vec<Rc<[u8]>>,
    /// The bytes each broadcast's `NEED` asked for, once it went.
    asked: HashMap<u64, u64>,
    stats: Datagrams,
}

/// A call's buffer: the rank's own, or lent to the broadcast (and read
/// when the call returns).
enum Buffer {
    Own(Vec<u8>),
    Lent(Arc<Mutex<Vec<u8>>>),
}

impl IpmcRank {
    /// The rank's calls, the first entered now (it begins at the next step).
    pub fn new(
        io: &HostIo,
        rank: usize,
        size: usize,
        params: IpmcParams,
        comm_id: u64,
        plan: Vec<Call>,
    ) -> Self {
        let mut queue = params.queue(io, comm_id);
        queue.keep_finished();
        let mut r = IpmcRank {
            queue,
            msgs: io.p2p.clone(),
            rank,
            size,
            messages: plan.iter().map(|c| c.message.clone()).collect(),
            plan: plan.into(),
            current: None,
            asked: HashMap::new(),
            stats: Datagrams::default(),
        };
        r.enter();
        r
    }

    /// Enters the next call, if any.
    fn enter(&mut self) {
        let Some(call) = self.plan.pop_front() else {
            return;
        };
        let at = Ranks {
            rank: self.rank,
            size: self.size,
            root: call.root,
        };
        let buf = if at.rank == at.root {
            call.message.to_vec()
        } else {
            vec![0; call.message.len()]
        };
        let msgs = SimMessages::queued(&self.msgs);
        // As the component: a broadcast that finishes before it returns
        // works in the caller's buffer.
        let buf = if self.queue.holds_to_the_end(buf.len()) {
            let lent = Arc::new(Mutex::new(buf));
            self.queue
                .enter_lent_bcast(at, Box::new(Arc::clone(&lent)), msgs);
            Buffer::Lent(lent)
        } else {
            self.queue.enter_bcast(at, buf.len(), msgs);
            Buffer::Own(buf)
        };
        self.current = Some((call, buf));
    }

    /// Each `NEED` that went since the last look must list exactly what the
    /// rank lacked (it went in the turn just made, after the last datagram
    /// the rank read).
    fn check_needs(&mut self) -> Result<(), String> {
        for b in self.queue.broadcasts() {
            let (Some(asked), false) = (b.requested(), self.asked.contains_key(&b.params().bcast))
            else {
                continue;
            };
            let lacking: Vec<u32> = (0..b.fragments()).filter(|&k| !b.owns(k)).collect();
            if asked != lacking {
                return Err(format!("NEED asked for {asked:?}, lacking {lacking:?}"));
            }
            let fragment = b.params().fragment_size as u64;
            let last = b.params().message_len as u64 - (b.fragments() as u64 - 1) * fragment;
            let bytes = |&k: &u32| {
                if k + 1 == b.fragments() {
                    last
                } else {
                    fragment
                }
            };
            self.asked
                .insert(b.params().bcast, asked.iter().map(bytes).sum());
        }
        Ok(())
    }

    /// The broadcasts whose chains ended: the root's bytes, and nothing by
    /// the chain that was not asked for (a datagram late after the `NEED`
    /// may still bring an asked fragment first).
    fn check_finished(&mut self) -> Result<(), String> {
        for b in self.queue.take_finished() {
            let n = b.params().bcast;
            // A lent message, or one given up, was checked when its call
            // returned.
            if b.held_bytes() > 0 && b.data() != &self.messages[n as usize][..] {
                return Err(format!(
                    "broadcast {n} ended with other bytes than the root's"
                ));
            }
            let asked = self.asked.remove(&n).unwrap_or(0);
            if b.params().vrank != 0 && b.bytes_by_chain() > asked {
                return Err(format!(
                    "{} bytes came by the chain, {asked} were asked for",
                    b.bytes_by_chain()
                ));
            }
        }
        Ok(())
    }

    /// Turns the call in progress and the work behind it: whether a call
    /// returned (the next may come).
    fn turn(&mut self, now: Ns) -> Result<bool, String> {
        let now = Duration::from_nanos(now);
        let Some((call, buf)) = &mut self.current else {
            self.queue
                .turn(now, Wait::Progress)
                .map_err(|e| e.to_string())?;
            return Ok(false);
        };
        let data = match buf {
            Buffer::Own(buf) => Some(&mut buf[..]),
            Buffer::Lent(_) => None,
        };
        let turn = self
            .queue
            .bcast_turn(data, now, Wait::Progress, &mut self.stats)
            .map_err(|e| e.to_string())?;
        if turn != Turn::Returned {
            return Ok(false);
        }
        let same = match buf {
            Buffer::Own(buf) => buf[..] == call.message[..],
            Buffer::Lent(lent) => lent.lock().unwrap()[..] == call.message[..],
        };
        if !same {
            return Err("a call returned with other bytes than the root's".into());
        }
        self.current = None;
        Ok(true)
    }
}

impl Program for IpmcRank {
    fn step(&mut self, now: Ns) -> Result<Status, String> {
        loop {
            if self.current.is_none() {
                self.enter();
            }
            let returned = self.turn(now)?;
            self.check_needs()?;
            self.check_finished()?;
            if !returned {
                break;
            }
        }
        let returned = self.current.is_none() && self.plan.is_empty();
        Ok(Status {
            returned,
            done: returned && !self.queue.is_busy(),
        })
    }

    fn wake_at(&self) -> Option<Ns> {
        self.queue.wake_at().map(|d| d.as_nanos() as Ns)
    }

    fn datagrams(&self) -> Option<Datagrams> {
        let mut d = self.stats;
        d.merge(&self.queue.datagrams());
        Some(d)
    }
}

/// One operation of a point-to-point schedule.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// A receive, posted once operations `after` and `also` (indices into
    /// the schedule) completed.
    Recv {
        from: usize,
        after: Option<usize>,
        also: Option<usize>,
    },
    /// A send of `len` bytes, once operation `after` and every receive
    /// before it completed, and operation `also`.
    Send {
        to: usize,
        len: usize,
        after: Option<usize>,
        also: Option<usize>,
    },
}

impl Op {
    fn recv(from: usize) -> Self {
        Op::Recv {
            from,
            after: None,
            also: None,
        }
    }

    fn send(to: usize, len: usize, after: Option<usize>) -> Self {
        Op::Send {
            to,
            len,
            after,
            also: None,
        }
    }
}

/// Receives a rank keeps posted ahead.
const RECV_WINDOW: usize = 8;

/// A rank of a point-to-point broadcast given as a schedule: receives are
/// posted in order, a few ahead at most; sends start in order, each once
/// what it depends on completed.
pub struct Schedule {
    p2p: Rc<RefCell<P2pState>>,
    tag: Tag,
    ops: Vec<Op>,
    id: Vec<Option<usize>>,
    done: Vec<bool>,
    recvs: Vec<usize>,
    sends: Vec<usize>,
    next_recv: usize,
    next_send: usize,
    active: Vec<usize>,
    open_recvs: usize,
    /// Every receive before this one (an index into `recvs`) completed.
    recvs_done: usize,
    left: usize,
}

impl Schedule {
    /// A broadcast's schedule (the broadcast tag).
    pub fn new(io: &HostIo, ops: Vec<Op>) -> Self {
        Self::tagged(io, ops, BCAST)
    }

    /// A schedule whose messages have `tag`.
    pub fn tagged(io: &HostIo, ops: Vec<Op>, tag: Tag) -> Self {
        let recvs: Vec<usize> = (0..ops.len())
            .filter(|&i| matches!(ops[i], Op::Recv { .. }))
            .collect();
        let sends: Vec<usize> = (0..ops.len())
            .filter(|&i| matches!(ops[i], Op::Send { .. }))
            .collect();
        Schedule {
            p2p: io.p2p.clone(),
            tag,
            id: vec![None; ops.len()],
            done: vec![false; ops.len()],
            left: ops.len(),
            ops,
            recvs,
            sends,
            next_recv: 0,
            next_send: 0,
            active: Vec::new(),
            open_recvs: 0,
            recvs_done: 0,
        }
    }
}

impl Program for Schedule {
    fn step(&mut self, _now: Ns) -> Result<Status, String> {
        let mut p2p = self.p2p.borrow_mut();
        loop {
            let mut moved = false;
            while self.open_recvs < RECV_WINDOW && self.next_recv < self.recvs.len() {
                let i = self.recvs[self.next_recv];
                let Op::Recv { from, after, also } = self.ops[i] else {
                    unreachable!("indexed receives")
                };
                if [after, also].iter().flatten().any(|&a| !self.done[a]) {
                    break;
                }
                self.id[i] = Some(p2p.recv_tagged(from, self.tag));
                self.active.push(i);
                self.open_recvs += 1;
                self.next_recv += 1;
            }
            while self.next_send < self.sends.len() {
                let i = self.sends[self.next_send];
                let Op::Send {
                    to,
                    len,
                    after,
                    also,
                } = self.ops[i]
                else {
                    unreachable!("indexed sends")
                };
                let first_open = self.recvs.get(self.recvs_done).copied();
                if after.is_some_and(|a| !self.done[a] || first_open.is_some_and(|r| r < a))
                    || also.is_some_and(|a| !self.done[a])
                {
                    break;
                }
                self.id[i] = Some(p2p.send_tagged(to, self.tag, len, Vec::new(), false));
                self.active.push(i);
                self.next_send += 1;
            }
            let (ops, id, done) = (&self.ops, &self.id, &mut self.done);
            let (mut finished, mut recvs) = (0, 0);
            self.active.retain(|&i| {
                let complete = p2p.test(id[i].expect("started")).is_some();
                if complete {
                    done[i] = true;
                    finished += 1;
                    recvs += usize::from(matches!(ops[i], Op::Recv { .. }));
                }
                !complete
            });
            self.left -= finished;
            self.open_recvs -= recvs;
            while self.recvs_done < self.recvs.len() && self.done[self.recvs[self.recvs_done]] {
                self.recvs_done += 1;
            }
            moved |= finished > 0;
            if !moved {
                break;
            }
        }
        let done = self.left == 0;
        Ok(Status {
            returned: done,
            done,
        })
    }

    fn wake_at(&self) -> Option<Ns> {
        None
    }
}

/// A rank's place in the binomial tree of Open MPI's scatter
/// (`ompi_coll_base_bcast_intra_scatter_allgather*`) over `size` virtual
/// ranks rooted at 0: its parent clears its lowest set bit; its children, the
/// largest subtree first, each with the end of the virtual ranks its subtree
/// holds.
fn scatter_tree(vrank: usize, size: usize) -> (Option<usize>, Vec<(usize, usize)>) {
    let mut mask = 1;
    let mut parent = None;
    while mask < size {
        if vrank & mask != 0 {
            parent = Some(vrank - mask);
            break;
        }
        mask <<= 1;
    }
    let mut children = Vec::new();
    mask >>= 1;
    while mask > 0 {
        if vrank + mask < size {
            children.push((vrank + mask, (vrank + 2 * mask).min(size)));
        }
        mask >>= 1;
    }
    (parent, children)
}

/// A rank's place in Open MPI's binomial tree of the broadcast
/// (`ompi_coll_base_topo_build_bmtree`) over `size` virtual ranks rooted at
/// 0: its parent clears its highest set bit; its children add each power of
/// two above that bit, the smallest first. For 6 ranks: 0 → 1, 2, 4 and
/// 1 → 3, 5 (the scatter's tree has 0 → 4, 2, 1, 4 → 5 and 2 → 3).
pub fn bmtree(vrank: usize, size: usize) -> (Option<usize>, Vec<usize>) {
    let (parent, mut mask) = match vrank {
        0 => (None, 1),
        v => {
            let high = 1 << (usize::BITS - 1 - v.leading_zeros());
            (Some(v ^ high), high << 1)
        }
    };
    let mut children = Vec::new();
    while vrank + mask < size {
        children.push(vrank + mask);
        mask <<= 1;
    }
    (parent, children)
}

/// Open MPI's binomial broadcast (`ompi_coll_base_bcast_intra_binomial`),
/// unsegmented: a rank receives from its parent, then sends to all its
/// children at once (`isend` each, then wait for all).
pub fn binomial(vrank: usize, size: usize, len: usize, real: impl Fn(usize) -> usize) -> Vec<Op> {
    tree_bcast(bmtree(vrank, size), len, real)
}

/// A rank's place in Open MPI's binary tree (`ompi_coll_base_topo_build_tree`
/// with fanout 2) over `size` virtual ranks rooted at 0: level by level, a
/// rank at level l (2^l of them) has the children `vrank + 2^l` and
/// `vrank + 2^(l+1)`. For 7 ranks: 0 → 1, 2; 1 → 3, 5; 2 → 4, 6.
pub fn bintree(vrank: usize, size: usize) -> (Option<usize>, Vec<usize>) {
    // The level: the nodes of the levels above and of this one exceed vrank.
    let (mut level, mut nodes) = (0, 1);
    while nodes <= vrank {
        level += 1;
        nodes += 1 << level;
    }
    let delta = 1 << level;
    let children = (1..=2)
        .map(|i| vrank + delta * i)
        .filter(|&c| c < size)
        .collect();
    let parent = match vrank {
        0 => None,
        1 | 2 => Some(0),
        v => {
            let (above, mut p) = (delta - 1, v);
            while p >= above {
                p -= delta / 2;
            }
            Some(p)
        }
    };
    (parent, children)
}

/// Open MPI's binary-tree broadcast (`ompi_coll_base_bcast_intra_bintree`,
/// tuned's 5), unsegmented: as the binomial one, on the binary tree.
pub fn binary(vrank: usize, size: usize, len: usize, real: impl Fn(usize) -> usize) -> Vec<Op> {
    tree_bcast(bintree(vrank, size), len, real)
}

/// Open MPI's split binary tree (`ompi_coll_base_bcast_intra_split_bintree`,
/// tuned's 4), unsegmented: the root sends the first half of the message
/// (the larger, if one is) down the binary tree's left subtree (odd virtual
/// ranks) and the second down the right one (even), then each rank swaps
/// halves with its pair in the other subtree (odd `v` with `v + 1`); with
/// an even number of ranks the last one, which has no pair, gets the second
/// half from the root.
pub fn split_binary(
    vrank: usize,
    size: usize,
    len: usize,
    real: impl Fn(usize) -> usize,
) -> Vec<Op> {
    let halves = [len - len / 2, len / 2];
    let (parent, children) = bintree(vrank, size);
    if vrank == 0 {
        let mut ops: Vec<Op> = children
            .iter()
            .map(|&c| Op::send(real(c), halves[(c + 1) % 2], None))
            .collect();
        if size % 2 == 0 {
            ops.push(Op::send(real(size - 1), halves[1], None));
        }
        return ops;
    }
    let own = halves[(vrank + 1) % 2];
    let mut ops = vec![Op::recv(real(parent.expect("a rank below the root")))];
    ops.extend(children.iter().map(|&c| Op::send(real(c), own, Some(0))));
    let pair = if vrank % 2 == 1 { vrank + 1 } else { vrank - 1 };
    if pair < size {
        // The send goes first: a send waits for the receives listed before it.
        ops.push(Op::send(real(pair), own, Some(0)));
        ops.push(Op::recv(real(pair)));
    } else {
        ops.push(Op::recv(real(0)));
    }
    ops
}

/// Open MPI's generic tree broadcast of one segment
/// (`ompi_coll_base_bcast_intra_generic`): a rank receives from its parent,
/// then sends to all its children at once.
fn tree_bcast(
    (parent, children): (Option<usize>, Vec<usize>),
    len: usize,
    real: impl Fn(usize) -> usize,
) -> Vec<Op> {
    let mut ops: Vec<Op> = parent.map(|p| Op::recv(real(p))).into_iter().collect();
    let after = parent.map(|_| 0);
    ops.extend(children.iter().map(|&c| Op::send(real(c), len, after)));
    ops
}

/// Open MPI's pipelined chain (`ompi_coll_base_bcast_intra_pipeline`, the
/// generic tree broadcast on a chain): segments of `segment` bytes flow along
/// the ranks in order. As there, a rank sends one segment at a time and
/// waits for it before the next; an inner rank posts the receive of segment
/// k once it has sent segment k − 2, the last rank once it has received
/// segment k − 2 (two receives in flight).
pub fn pipeline(
    vrank: usize,
    size: usize,
    len: usize,
    segment: usize,
    real: impl Fn(usize) -> usize,
) -> Vec<Op> {
    let segments = len.div_ceil(segment).max(1);
    let bytes = |k: usize| len.saturating_sub(k * segment).min(segment);
    let (has_pred, has_succ) = (vrank > 0, vrank + 1 < size);
    let mut ops = Vec::new();
    let mut recv_at = Vec::new();
    let mut send_at: Vec<usize> = Vec::new();
    for k in 0..segments {
        if has_pred {
            let after = match (k >= 2, has_succ) {
                (false, _) => None,
                (true, true) => Some(send_at[k - 2]),
                (true, false) => Some(recv_at[k - 2]),
            };
            ops.push(Op::Recv {
                from: real(vrank - 1),
                after,
                also: None,
            });
            recv_at.push(ops.len() - 1);
        }
        if has_succ {
            ops.push(Op::Send {
                to: real(vrank + 1),
                len: bytes(k),
                after: recv_at.get(k).copied(),
                also: send_at.last().copied(),
            });
            send_at.push(ops.len() - 1);
        }
    }
    ops
}

/// Open MPI's scatter-allgather with a ring allgather
/// (`ompi_coll_base_bcast_intra_scatter_allgather_ring`): a binomial
/// scatter of `size` blocks with blocking sends, the largest subtree first,
/// then `size - 1` ring steps, each a receive from the left posted, a
/// blocking send to the right of the block received last, and a wait for the
/// receive (`ompi_coll_base_sendrecv`).
pub fn scatter_allgather(
    vrank: usize,
    size: usize,
    len: usize,
    real: impl Fn(usize) -> usize,
) -> Vec<Op> {
    let block = len.div_ceil(size).max(1);
    let bytes = |from: usize, to: usize| len.min(to * block).saturating_sub(from * block);
    let (parent, children) = scatter_tree(vrank, size);
    let mut ops: Vec<Op> = parent.map(|p| Op::recv(real(p))).into_iter().collect();
    let got = parent.map(|_| 0);
    let mut sent = None;
    for &(c, end) in &children {
        ops.push(Op::Send {
            to: real(c),
            len: bytes(c, end),
            after: got,
            also: sent,
        });
        sent = Some(ops.len() - 1);
    }
    let (pred, succ) = ((vrank + size - 1) % size, (vrank + 1) % size);
    let (mut received, mut step_done) = (got, sent);
    for step in 0..size.saturating_sub(1) {
        let send_block = (vrank + size - step) % size;
        ops.push(Op::Recv {
            from: real(pred),
            after: received,
            also: step_done,
        });
        let recv = ops.len() - 1;
        ops.push(Op::Send {
            to: real(succ),
            len: bytes(send_block, send_block + 1),
            after: received,
            also: step_done,
        });
        (received, step_done) = (Some(recv), Some(ops.len() - 1));
    }
    ops
}

/// Makes a rank's broadcasts, once the agreement on the group is over.
pub type Start = Box<dyn FnOnce() -> IpmcRank>;

/// A communicator's first broadcast: ipmc's agreement on the group
/// (`ipmc::group::setup::Agreement`, the component's own code, every rank
/// entering it with the broadcast), then ipmc's broadcast, which starts (and
/// posts its first receive) only once the agreement is over, as in the
/// component. Opening the socket is not modelled: it always succeeds.
pub struct FirstBroadcast {
    msgs: SimMessages,
    rank: usize,
    size: usize,
    setup: Option<Agreement<(), SimMessages>>,
    start: Option<Start>,
    bcast: Option<IpmcRank>,
}

impl FirstBroadcast {
    pub fn new(io: &HostIo, rank: usize, size: usize, start: Start) -> Self {
        FirstBroadcast {
            msgs: SimMessages::bcast(&io.p2p),
            rank,
            size,
            setup: None,
            start: Some(start),
            bcast: None,
        }
    }
}

impl Program for FirstBroadcast {
    fn step(&mut self, now: Ns) -> Result<Status, String> {
        if self.bcast.is_none() {
            let msgs = &mut self.msgs;
            if self.setup.is_none() {
                let cfg = Config::default();
                // The simulated datagrams are as large as the parameter says.
                let facts = Facts {
                    families: (true, false),
                    mtu: u32::MAX,
                    rcvbuf: u32::MAX,
                    stated: Stated::NONE,
                    kept: None,
                };
                let a = Agreement::start(msgs, self.rank, self.size, cfg, facts);
                self.setup = Some(a.map_err(|e| e.to_string())?);
            }
            let setup = self.setup.as_mut().expect("started");
            let Some(agreed) = setup
                .poll(msgs, Wait::Progress, &mut |_| Ok(()))
                .map_err(|e| e.to_string())?
            else {
                return Ok(Status {
                    returned: false,
                    done: false,
                });
            };
            if agreed.joined != Joined::All {
                return Err(format!("the agreement failed: {:?}", agreed.joined));
            }
            let start = self.start.take().expect("started once");
            self.bcast = Some(start());
        }
        self.bcast.as_mut().expect("started").step(now)
    }

    fn wake_at(&self) -> Option<Ns> {
        self.bcast.as_ref()?.wake_at()
    }

    fn datagrams(&self) -> Option<Datagrams> {
        self.bcast.as_ref()?.datagrams()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Open MPI's example (`coll_base_topo.c`: fanout 2, 7 ranks), and a
    /// parent for every child.
    #[test]
    fn bintree_is_open_mpis() {
        let children = |size| (0..size).map(|v| bintree(v, size).1).collect::<Vec<_>>();
        assert_eq!(
            children(7),
            [
                vec![1, 2],
                vec![3, 5],
                vec![4, 6],
                vec![],
                vec![],
                vec![],
                vec![]
            ]
        );
        for size in 1..40 {
            for v in 0..size {
                for c in bintree(v, size).1 {
                    assert_eq!(bintree(c, size).0, Some(v), "{v} -> {c} of {size}");
                }
                if let Some(p) = bintree(v, size).0 {
                    assert!(bintree(p, size).1.contains(&v), "{p} -> {v} of {size}");
                }
            }
        }
    }

    /// Every rank of the split binary tree gets both halves, and every send
    /// has its receive.
    #[test]
    fn split_binary_gives_every_rank_the_whole_message() {
        let len = 1001;
        for size in 2..40 {
            let ops: Vec<Vec<Op>> = (0..size)
                .map(|v| split_binary(v, size, len, |v| v))
                .collect();
            let mut got = vec![0; size];
            let mut recvs = vec![Vec::new(); size];
            for (from, rank_ops) in ops.iter().enumerate() {
                for op in rank_ops {
                    match *op {
                        Op::Send { to, len, .. } => {
                            got[to] += len;
                            recvs[to].push(from);
                        }
                        Op::Recv { .. } => {}
                    }
                }
            }
            for v in 1..size {
                assert_eq!(got[v], len, "rank {v} of {size}");
                let mut posted: Vec<usize> = ops[v]
                    .iter()
                    .filter_map(|op| match *op {
                        Op::Recv { from, .. } => Some(from),
                        Op::Send { .. } => None,
                    })
                    .collect();
                posted.sort_unstable();
                recvs[v].sort_unstable();
                assert_eq!(posted, recvs[v], "rank {v} of {size}");
            }
        }
    }

    /// Open MPI's own examples (`coll_base_topo.c`) and the 6-rank tree.
    #[test]
    fn bmtree_is_open_mpis() {
        let children = |size| (0..size).map(|v| bmtree(v, size).1).collect::<Vec<_>>();
        assert_eq!(children(2), [vec![1], vec![]]);
        assert_eq!(children(4), [vec![1, 2], vec![3], vec![], vec![]]);
        assert_eq!(
            children(8),
            [
                vec![1, 2, 4],
                vec![3, 5],
                vec![6],
                vec![7],
                vec![],
                vec![],
                vec![],
                vec![]
            ]
        );
        assert_eq!(children(6)[..2], [vec![1, 2, 4], vec![3, 5]]);
        for size in 2..70 {
            for v in 0..size {
                let (parent, kids) = bmtree(v, size);
                assert_eq!(parent.is_none(), v == 0);
                if let Some(p) = parent {
                    assert!(bmtree(p, size).1.contains(&v), "{v} of {size}");
                }
                assert!(kids.iter().all(|&k| bmtree(k, size).0 == Some(v)));
            }
        }
    }

    /// The scatter's tree: the largest subtree first, each child with the
    /// end of its subtree's blocks.
    #[test]
    fn the_scatter_sends_the_largest_subtree_first() {
        assert_eq!(scatter_tree(0, 8), (None, vec![(4, 8), (2, 4), (1, 2)]));
        assert_eq!(scatter_tree(4, 6), (Some(0), vec![(5, 6)]));
        assert_eq!(scatter_tree(3, 6), (Some(2), vec![]));
    }
}
