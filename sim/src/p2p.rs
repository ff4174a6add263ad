//! Point-to-point messages in the simulator, matched as MPI matches them:
//! per sender in the order posted. A message up to the eager limit travels
//! at once and waits at the receiver if no receive is posted; a longer one
//! sends a request and travels when the receiver has posted its receive. A
//! synchronous send (`MPI_Issend`) up to the eager limit travels at once
//! too, and completes when the receiver's answer to its match arrives.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use ipmc::base::error::Result;
use ipmc::base::io::{MessageIo, Wait};

/// A message handed to the network: its index in the engine's table.
pub type NetMsg = u32;

/// A message's tag: messages match per sender and tag, as in MPI.
pub type Tag = u8;
/// The broadcasts' messages (the agreement, the point-to-point algorithms,
/// the models' sends).
pub const BCAST: Tag = 0;
/// The answers that time a measured call at its root.
pub const ANSWERS: Tag = 1;
/// The barriers' messages (Open MPI's barrier tag).
pub const BARRIER: Tag = 2;
/// The allgathers' messages (Open MPI's allgather tag).
pub const ALLGATHER: Tag = 3;
/// The messages of a communicator's queued work: chains and votes (the
/// component's queue tag).
pub const QUEUE: Tag = 4;

/// What a rank asked of the network during a step.
pub enum Out {
    /// Start message `id` (a send of this rank) of `len` bytes to `dst`;
    /// `matched`: in synchronous mode.
    Send {
        id: usize,
        dst: usize,
        tag: Tag,
        len: usize,
        data: Vec<u8>,
        matched: bool,
    },
    /// Tell the sender of rendezvous message `msg` to go ahead.
    Clear { msg: NetMsg },
    /// Tell `src` that its synchronous send `send_id` was matched.
    Matched { src: usize, send_id: usize },
}

/// What arrived from one sender and is not matched yet.
enum Arrival {
    /// A whole eager message; `ack`: the sender's id of a synchronous send,
    /// answered when it is matched.
    Eager {
        len: usize,
        data: Vec<u8>,
        ack: Option<usize>,
    },
    /// A rendezvous request.
    Request { msg: NetMsg },
}

struct Slot {
    is_recv: bool,
    /// A synchronous send: done when its match is answered, not when it left.
    matched: bool,
    len: usize,
    data: Vec<u8>,
    done: bool,
}

/// A rank's messages, shared by the rank and the network.
#[derive(Default)]
pub struct P2pState {
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    posted: HashMap<(usize, Tag), VecDeque<usize>>,
    arrived: HashMap<(usize, Tag), VecDeque<Arrival>>,
    /// Receives matched to a rendezvous message whose data is on its way.
    bound: HashMap<NetMsg, usize>,
    pub out: Vec<Out>,
    /// Messages since the host's cost was last charged, and the bytes of
    /// the last segments of those received (the engine charges a sent
    /// message's bytes as it leaves and a received one's other segments as
    /// they arrive: `send_segments` and `at_host`).
    pub messages: u64,
    pub last_segment_bytes: u64,
}

impl P2pState {
    fn slot(&mut self, slot: Slot) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        }
    }

    /// Starts a send of `len` bytes (`data` is empty for the models, which
    /// move no bytes).
    pub fn send(&mut self, dst: usize, len: usize, data: Vec<u8>) -> usize {
        self.send_tagged(dst, BCAST, len, data, false)
    }

    /// Posts a receive from `src`.
    pub fn recv(&mut self, src: usize) -> usize {
        self.recv_tagged(src, BCAST)
    }

    /// Starts a send of `len` bytes with tag `tag`, in synchronous mode if
    /// `matched`.
    pub fn send_tagged(
        &mut self,
        dst: usize,
        tag: Tag,
        len: usize,
        data: Vec<u8>,
        matched: bool,
    ) -> usize {
        self.messages += 1;
        let id = self.slot(Slot {
            is_recv: false,
            matched,
            len,
            data: Vec::new(),
            done: false,
        });
        self.out.push(Out::Send {
            id,
            dst,
            tag,
            len,
            data,
            matched,
        });
        id
    }

    /// Posts a receive from `src` of a message with tag `tag`.
    pub fn recv_tagged(&mut self, src: usize, tag: Tag) -> usize {
        self.messages += 1;
        let id = self.slot(Slot {
            is_recv: true,
            matched: false,
            len: 0,
            data: Vec::new(),
            done: false,
        });
        self.posted.entry((src, tag)).or_default().push_back(id);
        self.matching((src, tag));
        id
    }

    /// Receives posted and not matched, and messages arrived and not
    /// matched: at the end of a run, anything here would have met a later
    /// broadcast's messages.
    pub fn leftovers(&self) -> usize {
        self.posted.values().map(VecDeque::len).sum::<usize>()
            + self.arrived.values().map(VecDeque::len).sum::<usize>()
    }

    /// `Some((len, data))` once message `id` completed; it is then gone.
    pub fn test(&mut self, id: usize) -> Option<(usize, Vec<u8>)> {
        let slot = self.slots[id].as_ref().expect("a live message");
        if !slot.done {
            return None;
        }
        let slot = self.slots[id].take().expect("checked");
        self.free.push(id);
        Some((slot.len, slot.data))
    }

    /// The network: send `id` left this host, `eager` or by rendezvous (a
    /// synchronous one of eager size waits for [`Self::matched`]; by
    /// rendezvous its data left once the receiver matched it).
    pub fn sent(&mut self, id: usize, eager: bool) {
        if let Some(slot) = self.slots[id].as_mut().filter(|s| !(s.matched && eager)) {
            slot.done = true;
        }
    }

    /// The network: the receiver matched synchronous send `id`.
    pub fn matched(&mut self, id: usize) {
        if let Some(slot) = self.slots[id].as_mut() {
            slot.done = true;
        }
    }

    /// The network: a whole eager message from `src` with tag `tag`; `ack`:
    /// the sender's id of a synchronous send.
    pub fn eager(&mut self, src: usize, tag: Tag, len: usize, data: Vec<u8>, ack: Option<usize>) {
        self.arrive((src, tag), Arrival::Eager { len, data, ack });
    }

    /// The network: a rendezvous request from `src` with tag `tag`.
    pub fn request(&mut self, src: usize, tag: Tag, msg: NetMsg) {
        self.arrive((src, tag), Arrival::Request { msg });
    }

    /// The network: the data of rendezvous message `msg`.
    pub fn rendezvous_data(&mut self, msg: NetMsg, len: usize, data: Vec<u8>) {
        let id = self.bound.remove(&msg).expect("data follows a match");
        self.complete(id, len, data);
    }

    fn arrive(&mut self, from: (usize, Tag), a: Arrival) {
        self.arrived.entry(from).or_default().push_back(a);
        self.matching(from);
    }

    fn complete(&mut self, id: usize, len: usize, data: Vec<u8>) {
        let slot = self.slots[id].as_mut().expect("a live receive");
        debug_assert!(slot.is_recv);
        slot.len = len;
        slot.data = data;
        slot.done = true;
    }

    fn matching(&mut self, from: (usize, Tag)) {
        loop {
            let (Some(posted), Some(arrived)) =
                (self.posted.get_mut(&from), self.arrived.get_mut(&from))
            else {
                return;
            };
            if posted.is_empty() || arrived.is_empty() {
                return;
            }
            let id = posted.pop_front().expect("checked");
            match arrived.pop_front().expect("checked") {
                Arrival::Eager { len, data, ack } => {
                    self.complete(id, len, data);
                    if let Some(send_id) = ack {
                        self.out.push(Out::Matched {
                            src: from.0,
                            send_id,
                        });
                    }
                }
                Arrival::Request { msg } => {
                    self.bound.insert(msg, id);
                    self.out.push(Out::Clear { msg });
                }
            }
        }
    }
}

/// The [`MessageIo`] of a simulated ipmc rank, with one tag.
pub struct SimMessages(Rc<RefCell<P2pState>>, Tag);

impl SimMessages {
    /// Messages with the broadcast tag.
    pub fn bcast(p2p: &Rc<RefCell<P2pState>>) -> Self {
        SimMessages(p2p.clone(), BCAST)
    }

    /// Messages of queued work, with the queue's tag.
    pub fn queued(p2p: &Rc<RefCell<P2pState>>) -> Self {
        SimMessages(p2p.clone(), QUEUE)
    }
}

impl MessageIo for SimMessages {
    type Id = usize;

    fn send(&mut self, peer: usize, data: Vec<u8>) -> Result<usize> {
        let len = data.len();
        Ok(self
            .0
            .borrow_mut()
            .send_tagged(peer, self.1, len, data, false))
    }

    fn send_matched(&mut self, peer: usize, data: Vec<u8>) -> Result<usize> {
        let len = data.len();
        Ok(self
            .0
            .borrow_mut()
            .send_tagged(peer, self.1, len, data, true))
    }

    fn recv(&mut self, peer: usize, _capacity: usize) -> Result<usize> {
        Ok(self.0.borrow_mut().recv_tagged(peer, self.1))
    }

    fn test(&mut self, id: usize, _wait: Wait) -> Result<Option<Vec<u8>>> {
        Ok(self.0.borrow_mut().test(id).map(|(_, data)| data))
    }
}
