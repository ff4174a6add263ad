//! The event loop: hosts, their links, the switches, and the ranks' steps.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::rc::Rc;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use ipmc::base::counters::Datagrams;
use ipmc::protocol::datagram::{self, Auth, Protection};

use crate::network::{self, Network};
use crate::p2p::{NetMsg, Out, P2pState, Tag};
use crate::programs::Program;
use crate::socket::SocketState;
use crate::Ns;

/// One rank's view of the simulated host it runs on.
#[derive(Clone)]
pub struct HostIo {
    pub socket: Rc<RefCell<SocketState>>,
    pub p2p: Rc<RefCell<P2pState>>,
}

enum Body {
    /// An IP fragment of multicast datagram `datagram`; the last one
    /// carries the datagram, which arrives if no fragment was dropped.
    Fragment {
        datagram: u64,
        whole: Option<Rc<[u8]>>,
    },
    /// A segment of a point-to-point message; the last one completes it.
    Segment {
        msg: NetMsg,
        last: bool,
    },
    Request(NetMsg),
    Clear(NetMsg),
    /// The receiver matched the synchronous send `send_id` of the host the
    /// packet goes to.
    Matched {
        send_id: usize,
    },
    /// A TCP acknowledgement of `bytes` of the connection to its sender.
    Ack {
        bytes: usize,
    },
}

struct Packet {
    src: usize,
    /// `None`: every other host (multicast).
    dst: Option<usize>,
    wire: usize,
    body: Body,
}

impl Packet {
    /// Whether it is data of a point-to-point connection, held to the
    /// connection's window and share of the link queue.
    fn is_stream(&self) -> bool {
        matches!(
            self.body,
            Body::Segment { .. } | Body::Request(_) | Body::Clear(_) | Body::Matched { .. }
        )
    }
}

enum Event {
    UplinkDone(usize),
    /// At the sender's (leaf) switch.
    AtSwitch(Rc<Packet>),
    /// A trunk between leaf `leaf` and the spine, up or down, sent a packet.
    TrunkDone {
        up: bool,
        leaf: usize,
    },
    AtSpine(Rc<Packet>),
    /// At leaf `leaf`, from the spine.
    DownAtLeaf(usize, Rc<Packet>),
    PortDone(usize),
    AtHost(usize, Rc<Packet>),
    Wake(usize),
    /// Host `h`'s datagrams whose system call's cost is paid, and the
    /// point-to-point messages its step sent after them: onto its link.
    Release(usize, Vec<Rc<[u8]>>, Vec<Out>),
}

struct Queued {
    at: Ns,
    seq: u64,
    event: Event,
}

impl PartialEq for Queued {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Queued {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// A point-to-point message on its way.
struct Message {
    src: usize,
    dst: usize,
    tag: Tag,
    send_id: usize,
    len: usize,
    data: Vec<u8>,
    /// Sent in synchronous mode.
    matched: bool,
}

/// One direction of a link: one FIFO queue in front of the wire, shaped as
/// a token bucket (`tbf`) when the network has one. On a host's link each
/// point-to-point connection (a TCP socket) may have at most
/// `Network::tcp_queue` bytes in that queue at once, as Linux's TCP small
/// queues allow, and at most `Network::window` bytes sent and not yet
/// acknowledged; the rest waits in the connection. So a small message goes
/// behind at most that much of another connection's data, long messages to
/// different peers share the link in turns, and a connection whose
/// acknowledgements queue behind the receiver's own data slows down.
/// Datagrams and acknowledgements go straight into the queue.
struct Link {
    rate_bps: u64,
    /// A token bucket's bytes; 0: none.
    bucket: usize,
    fifo: VecDeque<Rc<Packet>>,
    /// Per destination: the connection's packets not yet in the queue, and
    /// its bytes in it.
    conns: HashMap<usize, Conn>,
    on_wire: Option<Rc<Packet>>,
    /// Bytes in the queue and on the wire.
    bytes: usize,
    tokens: f64,
    tokens_at: Ns,
    /// Datagrams of which a fragment was dropped here.
    dropped: HashSet<u64>,
    /// Bytes this link has put on its wire (frames, headers included).
    sent: u64,
}

#[derive(Default)]
struct Conn {
    waiting: VecDeque<Rc<Packet>>,
    queued: usize,
    in_flight: usize,
}

/// How much of a connection's data a host's link lets go at once.
#[derive(Clone, Copy)]
struct Limits {
    queue: usize,
    window: usize,
}

impl Limits {
    const NONE: Limits = Limits {
        queue: usize::MAX,
        window: usize::MAX,
    };

    fn of(net: &Network) -> Self {
        Limits {
            queue: net.tcp_queue,
            window: net.window(),
        }
    }
}

impl Link {
    /// A host's link or a switch's port to a host.
    fn new(net: &Network) -> Self {
        Link::at(net.rate_bps, net.bucket)
    }

    fn at(rate_bps: u64, bucket: usize) -> Self {
        Link {
            rate_bps,
            bucket,
            fifo: VecDeque::new(),
            conns: HashMap::new(),
            on_wire: None,
            bytes: 0,
            tokens: bucket as f64,
            tokens_at: 0,
            dropped: HashSet::new(),
            sent: 0,
        }
    }

    /// Queues a packet: a connection's data within the connection's
    /// limits, anything else straight into the queue.
    fn push(&mut self, p: Rc<Packet>, limits: Limits) {
        match p.dst.filter(|_| p.is_stream()) {
            Some(dst) => {
                self.conns.entry(dst).or_default().waiting.push_back(p);
                self.admit(dst, limits);
            }
            None => {
                self.bytes += p.wire;
                self.fifo.push_back(p);
            }
        }
    }

    /// Moves connection `dst`'s waiting packets into the queue while its
    /// limits allow; a connection with nothing queued and nothing in
    /// flight always gets one in.
    fn admit(&mut self, dst: usize, limits: Limits) {
        let Some(c) = self.conns.get_mut(&dst) else {
            return;
        };
        while let Some(p) = c.waiting.front() {
            if (c.queued > 0 && c.queued + p.wire > limits.queue)
                || (c.in_flight > 0 && c.in_flight + p.wire > limits.window)
            {
                break;
            }
            let p = c.waiting.pop_front().expect("checked");
            c.queued += p.wire;
            c.in_flight += p.wire;
            self.bytes += p.wire;
            self.fifo.push_back(p);
        }
    }

    /// The receiver acknowledged `bytes` of connection `dst`.
    fn acked(&mut self, dst: usize, bytes: usize, limits: Limits) {
        if let Some(c) = self.conns.get_mut(&dst) {
            c.in_flight -= bytes;
            self.admit(dst, limits);
        }
    }

    /// Puts the next packet on the wire, if any: when it has left.
    fn start(&mut self, at: Ns) -> Option<Ns> {
        let p = self.fifo.pop_front()?;
        let wire = p.wire;
        self.sent += wire as u64;
        self.on_wire = Some(p);
        Some(at + self.transmit(at, wire))
    }

    /// Time to send `wire` bytes from `at`: at the rate, or at once while
    /// the bucket holds tokens.
    fn transmit(&mut self, at: Ns, wire: usize) -> Ns {
        if self.bucket == 0 {
            return network::serialize_at(self.rate_bps, wire);
        }
        let per_ns = self.rate_bps as f64 / 8e9;
        let refill = at.saturating_sub(self.tokens_at) as f64 * per_ns;
        self.tokens = (self.tokens + refill).min(self.bucket as f64);
        self.tokens_at = at;
        if self.tokens >= wire as f64 {
            self.tokens -= wire as f64;
            return 0;
        }
        let wait = ((wire as f64 - self.tokens) / per_ns).ceil() as Ns;
        self.tokens = 0.0;
        self.tokens_at = at + wait;
        wait
    }

    /// The packet on the wire has left; its connection may queue more.
    fn finish(&mut self, limits: Limits) -> Rc<Packet> {
        let p = self.on_wire.take().expect("a packet on the wire");
        self.bytes -= p.wire;
        if let Some(dst) = p.dst.filter(|_| p.is_stream()) {
            if let Some(c) = self.conns.get_mut(&dst) {
                c.queued -= p.wire;
            }
            self.admit(dst, limits);
        }
        p
    }
}

struct Host {
    io: HostIo,
    program: Box<dyn Program>,
    uplink: Link,
    busy_until: Ns,
    /// When the host's next step is due, if one is.
    wake_pending: Option<Ns>,
    /// In a burst of losses (Gilbert-Elliott).
    lossy: bool,
    returned_at: Option<Ns>,
    done: bool,
    /// Per sending host: segments and bytes of its connection received and
    /// not yet acknowledged.
    unacked: HashMap<usize, (u32, usize)>,
}

/// Counts of what the network did, for the conservation checks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub datagrams_sent: u64,
    /// Copies of datagrams the switch had to deliver (senders × receivers).
    pub datagram_copies: u64,
    pub datagrams_delivered: u64,
    pub lost: u64,
    pub queue_drops: u64,
    pub rcvbuf_drops: u64,
    /// Duplicated, truncated, corrupted or garbage datagrams the faults
    /// added (not counted as delivered).
    pub faulty: u64,
    pub messages_sent: u64,
    pub messages_delivered: u64,
    pub events: u64,
    /// Bytes on the hosts' links, both ways (each host's uplink and the
    /// switch's port to it), and on the trunks between leaves and spine.
    pub host_link_bytes: u64,
    pub trunk_bytes: u64,
}

/// What one run of the simulator found.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Each rank's return from its broadcast call, from the root's entry.
    pub returned_ns: Vec<Ns>,
    /// When the last event happened: every rank done, late datagrams
    /// delivered.
    pub quiet_ns: Ns,
    /// ipmc's datagram counters per rank (empty for the other algorithms).
    pub datagrams: Vec<Datagrams>,
    /// Rank 0's decision table of ipmc's automatic choice, if it ran it.
    pub table: Option<String>,
    pub counters: Counters,
}

impl Outcome {
    pub fn completion_max_ns(&self) -> Ns {
        self.returned_ns.iter().copied().max().unwrap_or(0)
    }
}

/// The simulation of one broadcast.
pub struct Engine {
    net: Network,
    hosts: Vec<Host>,
    ports: Vec<Link>,
    /// Per leaf switch, its trunk to the spine and the spine's to it (none
    /// on one switch).
    trunks_up: Vec<Link>,
    trunks_down: Vec<Link>,
    messages: Vec<Option<Message>>,
    events: BinaryHeap<Reverse<Queued>>,
    seq: u64,
    next_datagram: u64,
    now: Ns,
    rng: ChaCha8Rng,
    /// Gilbert-Elliott transitions: good to lossy, lossy to good.
    enter_loss: f64,
    leave_loss: f64,
    counters: Counters,
    /// The datagrams' protection, to forge valid foreign ones, and the
    /// first broadcast the ranks never make.
    protection: Option<Protection>,
    unreached: u64,
    /// Pairs of hosts with a rendezvous transfer on its way, and the ones
    /// that wait for it.
    rendezvous: HashMap<(usize, usize), VecDeque<(usize, NetMsg)>>,
}

fn pair_of(a: usize, b: usize) -> (usize, usize) {
    (a.min(b), a.max(b))
}

impl Engine {
    pub fn new(net: Network, seed: u64) -> Self {
        let leave_loss = 1.0 / net.burst.max(1.0);
        let enter_loss = if net.loss >= 1.0 {
            1.0
        } else {
            net.loss * leave_loss / (1.0 - net.loss)
        };
        Engine {
            net,
            hosts: Vec::new(),
            ports: Vec::new(),
            trunks_up: Vec::new(),
            trunks_down: Vec::new(),
            messages: Vec::new(),
            events: BinaryHeap::new(),
            seq: 0,
            next_datagram: 0,
            now: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
            enter_loss,
            leave_loss,
            counters: Counters::default(),
            protection: None,
            unreached: 0,
            rendezvous: HashMap::new(),
        }
    }

    /// The protection of the datagrams on the network, for the `foreign`
    /// fault, which forges datagrams of broadcasts from `unreached` on (the
    /// run's ranks make fewer broadcasts: a valid datagram of a broadcast
    /// they do make would be an insider's forgery, which no protocol tells
    /// from the root's).
    pub fn protect(&mut self, auth: Auth, unreached: u64) {
        self.protection = Some(Protection::new(auth));
        self.unreached = unreached;
    }

    /// A host's I/O, for the program that will run on it.
    pub fn host_io(&self) -> HostIo {
        HostIo {
            socket: Rc::new(RefCell::new(SocketState {
                rcvbuf: self.net.rcvbuf,
                sndbuf: self.net.sndbuf,
                call_bytes: self.net.call_bytes,
                ..SocketState::default()
            })),
            p2p: Rc::new(RefCell::new(P2pState::default())),
        }
    }

    /// Adds the next host (its rank is its index) with its program.
    pub fn add_host(&mut self, io: HostIo, program: Box<dyn Program>) {
        self.hosts.push(Host {
            io,
            program,
            uplink: Link::new(&self.net),
            busy_until: 0,
            wake_pending: None,
            lossy: false,
            returned_at: None,
            done: false,
            unacked: HashMap::new(),
        });
        self.ports.push(Link::new(&self.net));
        let leaves = self.net.leaf_of(self.hosts.len() - 1) + 1;
        if self.net.leaf_hosts > 0 && leaves > self.trunks_up.len() {
            let rate = self.net.trunk_rate_bps;
            self.trunks_up.push(Link::at(rate, 0));
            self.trunks_down.push(Link::at(rate, 0));
        }
    }

    fn at(&mut self, at: Ns, event: Event) {
        self.seq += 1;
        self.events.push(Reverse(Queued {
            at,
            seq: self.seq,
            event,
        }));
    }

    fn wake(&mut self, h: usize) {
        let host = &mut self.hosts[h];
        let at = self.now.max(host.busy_until);
        // A step due later (a timer) is brought forward; that event then
        // finds nothing due.
        if host.done || host.wake_pending.is_some_and(|t| t <= at) {
            return;
        }
        host.wake_pending = Some(at);
        self.at(at, Event::Wake(h));
    }

    /// Runs every rank from time 0 (all waiting in the broadcast) until
    /// nothing more can happen; an error if some rank never finished.
    pub fn run(mut self, limit_ns: Ns) -> Result<Outcome, String> {
        for h in 0..self.hosts.len() {
            self.wake(h);
        }
        while let Some(Reverse(q)) = self.events.pop() {
            if q.at > limit_ns {
                return Err(format!("still running at {} µs", limit_ns / 1000));
            }
            if let Event::Wake(h) = q.event {
                if self.hosts[h].wake_pending != Some(q.at) {
                    continue; // brought forward, already taken
                }
            }
            self.now = q.at;
            self.counters.events += 1;
            match q.event {
                Event::Wake(h) => self.step(h)?,
                Event::UplinkDone(h) => self.uplink_done(h),
                Event::AtSwitch(p) => self.at_switch(p),
                Event::TrunkDone { up, leaf } => self.trunk_done(up, leaf),
                Event::AtSpine(p) => self.at_spine(p),
                Event::DownAtLeaf(leaf, p) => self.down_at_leaf(leaf, p),
                Event::PortDone(port) => self.port_done(port),
                Event::AtHost(h, p) => self.at_host(h, p),
                Event::Release(h, datagrams, outs) => {
                    for d in datagrams {
                        self.send_datagram(h, self.now, d);
                    }
                    for out in outs {
                        self.start_message(h, self.now, out);
                    }
                }
            }
        }
        let stuck: Vec<usize> = (0..self.hosts.len())
            .filter(|&h| !self.hosts[h].done)
            .collect();
        if !stuck.is_empty() {
            return Err(format!(
                "{} of {} ranks never finished (first: {:?})",
                stuck.len(),
                self.hosts.len(),
                &stuck[..stuck.len().min(8)]
            ));
        }
        // Nothing left in flight: a receive still posted or a message not
        // matched would meet the communicator's next broadcast.
        if let Some((h, n)) = (0..self.hosts.len())
            .map(|h| (h, self.hosts[h].io.p2p.borrow().leftovers()))
            .find(|&(_, n)| n > 0)
        {
            return Err(format!(
                "rank {h} ended with {n} receives or messages unmatched"
            ));
        }
        let sent = |links: &[Link]| links.iter().map(|l| l.sent).sum::<u64>();
        self.counters.host_link_bytes =
            self.hosts.iter().map(|h| h.uplink.sent).sum::<u64>() + sent(&self.ports);
        self.counters.trunk_bytes = sent(&self.trunks_up) + sent(&self.trunks_down);
        Ok(Outcome {
            returned_ns: self
                .hosts
                .iter()
                .map(|h| h.returned_at.expect("done ranks returned"))
                .collect(),
            quiet_ns: self.now,
            datagrams: self
                .hosts
                .iter()
                .filter_map(|h| h.program.datagrams())
                .collect(),
            table: self.hosts.first().and_then(|h| h.program.table()),
            counters: self.counters,
        })
    }

    fn step(&mut self, h: usize) -> Result<(), String> {
        let now = self.now;
        if let Some((_, from, lasts)) = self
            .net
            .stall
            .filter(|&(s, from, lasts)| s == h && (from..from + lasts).contains(&now))
        {
            // The rank does not run; its socket still fills.
            let host = &mut self.hosts[h];
            host.busy_until = from + lasts;
            host.wake_pending = Some(from + lasts);
            self.at(from + lasts, Event::Wake(h));
            return Ok(());
        }
        if self.hosts[h].busy_until > now {
            // Bytes paid for since this step was due (a message's segments
            // sent or arriving): it runs once they are.
            let at = self.hosts[h].busy_until;
            self.hosts[h].wake_pending = Some(at);
            self.at(at, Event::Wake(h));
            return Ok(());
        }
        let slow = self.is_slow(h);
        let host = &mut self.hosts[h];
        host.wake_pending = None;
        let status = host
            .program
            .step(now)
            .map_err(|e| format!("rank {h} at {} µs: {e}", now / 1000))?;
        // The host's work this step: what went through its socket and its
        // point-to-point layer.
        let (messages, p2p_bytes, sent_or_read, bytes) = {
            let mut s = host.io.socket.borrow_mut();
            let mut p = host.io.p2p.borrow_mut();
            let m = (p.messages, p.last_segment_bytes, s.messages, s.bytes);
            (s.messages, s.bytes, p.messages, p.last_segment_bytes) = (0, 0, 0, 0);
            m
        };
        let net = &self.net;
        let took = |datagrams: u64, bytes: u64| {
            let cost =
                net.host_cost(messages, datagrams, bytes) + net.p2p_byte_cost(p2p_bytes as usize);
            if slow {
                (cost as f64 * net.slow_factor) as Ns
            } else {
                cost
            }
        };
        let end = now + took(sent_or_read, bytes);
        host.busy_until = end;
        if status.returned && host.returned_at.is_none() {
            host.returned_at = Some(end);
        }
        // Each datagram leaves once the step's work up to the system call
        // that sent it is done, its point-to-point work counted first.
        let mut releases: Vec<(Ns, Vec<Rc<[u8]>>)> = Vec::new();
        for (d, m, b) in std::mem::take(&mut host.io.socket.borrow_mut().tx) {
            let at = (now + took(m, b)).min(end);
            match releases.last_mut() {
                Some((t, ds)) if *t == at => ds.push(d),
                _ => releases.push((at, vec![d])),
            }
        }
        let outs: Vec<Out> = std::mem::take(&mut host.io.p2p.borrow_mut().out);
        let wake_at = host.program.wake_at();
        if status.done {
            host.done = true;
        }
        // The step's messages follow its datagrams, as its calls did: a
        // chain's `END` never overtakes the datagrams it follows.
        let mut outs = Some(outs);
        let last = releases.len();
        for (i, (at, datagrams)) in releases.into_iter().enumerate() {
            let after = if i + 1 == last { outs.take() } else { None };
            self.at(at, Event::Release(h, datagrams, after.unwrap_or_default()));
        }
        for out in outs.into_iter().flatten() {
            self.start_message(h, end, out);
        }
        if status.done {
            return Ok(());
        }
        // A step that did something may have made another one useful, as
        // the component's own loop would turn again.
        if messages > 0 || sent_or_read > 0 || bytes > 0 {
            self.wake(h);
        } else if let Some(t) = wake_at.filter(|&t| t > now) {
            let host = &mut self.hosts[h];
            let at = t.max(host.busy_until);
            if host.wake_pending.is_none_or(|p| p > at) {
                host.wake_pending = Some(at);
                self.at(at, Event::Wake(h));
            }
        }
        Ok(())
    }

    fn start_message(&mut self, h: usize, at: Ns, out: Out) {
        match out {
            Out::Send {
                id,
                dst,
                tag,
                len,
                data,
                matched,
            } => {
                self.counters.messages_sent += 1;
                let msg = self.messages.len() as NetMsg;
                self.messages.push(Some(Message {
                    src: h,
                    dst,
                    tag,
                    send_id: id,
                    len,
                    data,
                    matched,
                }));
                if self.net.is_eager(len) {
                    self.send_segments(h, at, msg);
                } else {
                    let wire = network::segment_wire(network::CONTROL_BYTES);
                    self.send_packet(h, at, Some(dst), wire, Body::Request(msg));
                }
            }
            Out::Clear { msg } => {
                let src = self.message(msg).src;
                let wire = network::segment_wire(network::CONTROL_BYTES);
                self.send_packet(h, at, Some(src), wire, Body::Clear(msg));
            }
            Out::Matched { src, send_id } => {
                let wire = network::segment_wire(network::CONTROL_BYTES);
                self.send_packet(h, at, Some(src), wire, Body::Matched { send_id });
            }
        }
    }

    /// Sends what host `h`'s messages asked for when something arrived
    /// between its steps: the answers of receives already posted.
    fn answer_now(&mut self, h: usize) {
        let outs: Vec<Out> = std::mem::take(&mut self.hosts[h].io.p2p.borrow_mut().out);
        let at = self.now.max(self.hosts[h].busy_until);
        for out in outs {
            self.start_message(h, at, out);
        }
    }

    /// Host `h` may send rendezvous message `msg`'s data. Between two
    /// processes whose connection has carried data before, one such
    /// transfer moves at a time (measured: a 512 KiB exchange takes twice a
    /// one-way transfer, while eager messages cross in both directions at
    /// once; TCP's grown window in one direction fills the queue that the
    /// other direction's acknowledgements wait in), so it waits for the one
    /// between the same pair that is on its way.
    fn start_rendezvous(&mut self, h: usize, at: Ns, msg: NetMsg) {
        let pair = pair_of(h, self.message(msg).dst);
        match self.rendezvous.get_mut(&pair) {
            Some(waiting) => waiting.push_back((h, msg)),
            None => {
                self.rendezvous.insert(pair, VecDeque::new());
                self.send_segments(h, at, msg);
            }
        }
    }

    /// A rendezvous transfer between `a` and `b` arrived: the next one
    /// between them may go.
    fn end_rendezvous(&mut self, a: usize, b: usize) {
        let pair = pair_of(a, b);
        let next = self.rendezvous.get_mut(&pair).and_then(VecDeque::pop_front);
        match next {
            Some((h, msg)) => {
                let at = self.now.max(self.hosts[h].busy_until);
                self.send_segments(h, at, msg);
            }
            None => {
                self.rendezvous.remove(&pair);
            }
        }
    }

    fn message(&self, msg: NetMsg) -> &Message {
        self.messages[msg as usize]
            .as_ref()
            .expect("a message in flight")
    }

    /// Host `h` sends message `msg`'s data from `at`: its segments go onto
    /// the link at once, and their bytes keep the host busy after `at`, as
    /// the transport's copies overlap the wire (the next step waits for
    /// them; this message does not).
    fn send_segments(&mut self, h: usize, at: Ns, msg: NetMsg) {
        let (dst, len) = {
            let m = self.message(msg);
            (m.dst, m.len)
        };
        let total = len + network::MESSAGE_HEADER;
        let n = total.div_ceil(self.net.segment).max(1);
        for i in 0..n {
            let payload = (total - i * self.net.segment).min(self.net.segment);
            let wire = network::segment_wire(payload);
            let last = i + 1 == n;
            self.send_packet(h, at, Some(dst), wire, Body::Segment { msg, last });
        }
        let cost = self.p2p_byte_cost(h, total);
        let host = &mut self.hosts[h];
        host.busy_until = host.busy_until.max(at) + cost;
    }

    /// Whether host `h` is one of `--slow-hosts`, the last ranks.
    fn is_slow(&self, h: usize) -> bool {
        h + self.net.slow_hosts >= self.hosts.len()
    }

    /// Host `h`'s cost of `bytes` of point-to-point messages.
    fn p2p_byte_cost(&self, h: usize, bytes: usize) -> Ns {
        let cost = self.net.p2p_byte_cost(bytes);
        if self.is_slow(h) {
            (cost as f64 * self.net.slow_factor) as Ns
        } else {
            cost
        }
    }

    /// Cuts a datagram into IP fragments and queues them. A fragment that
    /// the host's link queue cannot take is dropped, as the kernel does
    /// without telling a UDP sender.
    fn send_datagram(&mut self, h: usize, at: Ns, d: Rc<[u8]>) {
        self.counters.datagrams_sent += 1;
        let datagram = self.next_datagram;
        self.next_datagram += 1;
        let fragments = network::datagram_fragments(d.len(), self.net.mtu);
        let n = fragments.len();
        let mut whole = Some(d);
        for (i, wire) in fragments.into_iter().enumerate() {
            let whole = if i + 1 == n { whole.take() } else { None };
            if self.hosts[h].uplink.bytes + wire > self.net.host_queue {
                let others: Vec<usize> = (0..self.hosts.len()).filter(|&o| o != h).collect();
                if let Some(d) = &whole {
                    self.counters.datagram_copies += others.len() as u64;
                    self.datagram_left(h, d.len());
                }
                self.drop_fragment(others, datagram, whole.is_some());
                continue;
            }
            self.send_packet(h, at, None, wire, Body::Fragment { datagram, whole });
        }
    }

    /// A datagram of `len` bytes left host `h`'s send buffer (sent or
    /// dropped): a rank that found the buffer full may send again.
    fn datagram_left(&mut self, h: usize, len: usize) {
        let mut s = self.hosts[h].io.socket.borrow_mut();
        s.tx_queued -= len;
        let blocked = std::mem::take(&mut s.blocked);
        drop(s);
        if blocked {
            self.wake(h);
        }
    }

    /// A fragment of `datagram` was dropped on its way to the hosts
    /// `behind`: the datagram is lost to them (counted once its last
    /// fragment is due).
    fn drop_fragment(&mut self, behind: Vec<usize>, datagram: u64, whole: bool) {
        for d in behind {
            if whole {
                self.ports[d].dropped.remove(&datagram);
                self.counters.queue_drops += 1;
            } else {
                self.ports[d].dropped.insert(datagram);
            }
        }
    }

    /// Queues a packet on host `h`'s link, from time `at` (the end of the
    /// host's work that made it).
    fn send_packet(&mut self, h: usize, at: Ns, dst: Option<usize>, wire: usize, body: Body) {
        let packet = Rc::new(Packet {
            src: h,
            dst,
            wire,
            body,
        });
        self.hosts[h].uplink.push(packet, Limits::of(&self.net));
        self.kick_uplink(h, at);
    }

    /// Starts host `h`'s link from `at` if it is idle and has something
    /// to send.
    fn kick_uplink(&mut self, h: usize, at: Ns) {
        let link = &mut self.hosts[h].uplink;
        if link.on_wire.is_none() {
            let at = at.max(self.now);
            if let Some(done) = link.start(at) {
                self.at(done, Event::UplinkDone(h));
            }
        }
    }

    /// Host `h` received `p` of the connection from `p.src`: it
    /// acknowledges every second segment and the end of each message, as
    /// TCP's delayed acknowledgements do.
    fn acknowledge(&mut self, h: usize, p: &Packet) {
        let (segments, bytes) = {
            let u = self.hosts[h].unacked.entry(p.src).or_default();
            u.0 += 1;
            u.1 += p.wire;
            *u
        };
        let ends = !matches!(p.body, Body::Segment { last: false, .. });
        if segments >= 2 || ends {
            self.hosts[h].unacked.remove(&p.src);
            let wire = network::segment_wire(0);
            self.send_packet(h, self.now, Some(p.src), wire, Body::Ack { bytes });
        }
    }

    fn uplink_done(&mut self, h: usize) {
        let link = &mut self.hosts[h].uplink;
        let p = link.finish(Limits::of(&self.net));
        if let Some(done) = link.start(self.now) {
            self.at(done, Event::UplinkDone(h));
        }
        match &p.body {
            Body::Fragment { whole: Some(d), .. } => self.datagram_left(h, d.len()),
            Body::Segment { msg, last: true } => {
                let m = self.message(*msg);
                let (id, eager) = (m.send_id, self.net.is_eager(m.len));
                self.hosts[h].io.p2p.borrow_mut().sent(id, eager);
                self.wake(h);
            }
            _ => {}
        }
        let at = self.now + self.net.latency_ns;
        self.at(at, Event::AtSwitch(p));
    }

    /// The sender's switch: to the hosts on it, and up to the spine what is
    /// for hosts on other leaves (multicast: once).
    fn at_switch(&mut self, p: Rc<Packet>) {
        let leaf = self.net.leaf_of(p.src);
        match p.dst {
            Some(d) if self.net.leaf_of(d) == leaf => self.enqueue_at_port(d, p),
            Some(_) => self.enqueue_on_trunk(true, leaf, p),
            None => {
                if matches!(p.body, Body::Fragment { whole: Some(_), .. }) {
                    self.counters.datagram_copies += self.hosts.len() as u64 - 1;
                }
                for d in self.net.hosts_of(leaf, self.hosts.len()) {
                    if d != p.src {
                        self.enqueue_at_port(d, p.clone());
                    }
                }
                if self.trunks_up.len() > 1 {
                    self.enqueue_on_trunk(true, leaf, p);
                }
            }
        }
    }

    /// The spine: down to the receiver's leaf, or multicast to every leaf
    /// but the sender's.
    fn at_spine(&mut self, p: Rc<Packet>) {
        match p.dst {
            Some(d) => self.enqueue_on_trunk(false, self.net.leaf_of(d), p),
            None => {
                let from = self.net.leaf_of(p.src);
                for leaf in (0..self.trunks_down.len()).filter(|&l| l != from) {
                    self.enqueue_on_trunk(false, leaf, p.clone());
                }
            }
        }
    }

    /// A leaf switch, from the spine: to the receiver, or multicast to
    /// every host on it.
    fn down_at_leaf(&mut self, leaf: usize, p: Rc<Packet>) {
        match p.dst {
            Some(d) => self.enqueue_at_port(d, p),
            None => {
                for d in self.net.hosts_of(leaf, self.hosts.len()) {
                    self.enqueue_at_port(d, p.clone());
                }
            }
        }
    }

    /// Queues `p` on leaf `leaf`'s trunk, up or down. A datagram's fragment
    /// that does not fit is dropped for every host behind the trunk.
    fn enqueue_on_trunk(&mut self, up: bool, leaf: usize, p: Rc<Packet>) {
        let trunk = if up {
            &mut self.trunks_up[leaf]
        } else {
            &mut self.trunks_down[leaf]
        };
        if let Body::Fragment { datagram, whole } = &p.body {
            if trunk.bytes + p.wire > self.net.trunk_queue {
                let n = self.hosts.len();
                let behind: Vec<usize> = if up {
                    (0..n).filter(|&d| self.net.leaf_of(d) != leaf).collect()
                } else {
                    self.net.hosts_of(leaf, n).collect()
                };
                self.drop_fragment(behind, *datagram, whole.is_some());
                return;
            }
        }
        trunk.push(p, Limits::NONE);
        if trunk.on_wire.is_none() {
            if let Some(done) = trunk.start(self.now) {
                self.at(done, Event::TrunkDone { up, leaf });
            }
        }
    }

    fn trunk_done(&mut self, up: bool, leaf: usize) {
        let trunk = if up {
            &mut self.trunks_up[leaf]
        } else {
            &mut self.trunks_down[leaf]
        };
        let p = trunk.finish(Limits::NONE);
        if let Some(done) = trunk.start(self.now) {
            self.at(done, Event::TrunkDone { up, leaf });
        }
        let at = self.now + self.net.latency_ns;
        let event = if up {
            Event::AtSpine(p)
        } else {
            Event::DownAtLeaf(leaf, p)
        };
        self.at(at, event);
    }

    fn enqueue_at_port(&mut self, d: usize, p: Rc<Packet>) {
        let port = &mut self.ports[d];
        // Point-to-point messages ride TCP, which would resend what a queue
        // dropped: only datagrams are dropped here.
        if let Body::Fragment { datagram, whole } = &p.body {
            if port.bytes + p.wire > self.net.port_queue {
                if whole.is_some() {
                    port.dropped.remove(datagram);
                    self.counters.queue_drops += 1;
                } else {
                    port.dropped.insert(*datagram);
                }
                return;
            }
        }
        port.push(p, Limits::NONE);
        if port.on_wire.is_none() {
            if let Some(done) = port.start(self.now) {
                self.at(done, Event::PortDone(d));
            }
        }
    }

    fn port_done(&mut self, d: usize) {
        let port = &mut self.ports[d];
        let p = port.finish(Limits::NONE);
        if let Some(done) = port.start(self.now) {
            self.at(done, Event::PortDone(d));
        }
        let mut at = self.now + self.net.latency_ns;
        let jitter = self.net.faults.jitter_ns;
        if jitter > 0 && matches!(p.body, Body::Fragment { whole: Some(_), .. }) {
            at += self.rng.next_u64() % jitter;
        }
        self.at(at, Event::AtHost(d, p));
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// The copy of datagram `d` that reaches host `h` as the faults make it,
    /// and what else comes along.
    fn misbehave(&mut self, d: &Rc<[u8]>) -> Vec<Rc<[u8]>> {
        let f = self.net.faults;
        let mut copy = d.clone();
        if self.chance(f.truncate) && !d.is_empty() {
            let n = (self.rng.next_u64() % d.len() as u64) as usize;
            copy = d[..n].into();
        }
        if self.chance(f.corrupt) && !copy.is_empty() {
            let mut bytes = copy.to_vec();
            let i = (self.rng.next_u64() % bytes.len() as u64) as usize;
            bytes[i] ^= 1 << (self.rng.next_u32() % 8);
            copy = bytes.into();
        }
        let mut out = vec![copy.clone()];
        if self.chance(f.duplicate) {
            out.push(copy);
        }
        // Ahead of the genuine copy, so that taking it would show.
        if self.chance(f.foreign) {
            if let Some(forged) = self.forge(d) {
                out.insert(0, forged);
            }
        }
        if self.chance(f.garbage) {
            let mut junk = vec![0; (self.rng.next_u64() % 200) as usize];
            self.rng.fill_bytes(&mut junk);
            out.push(junk.into());
        }
        self.counters.faulty += out.len() as u64 - 1;
        out
    }

    /// A valid datagram of another communicator or of a broadcast the ranks
    /// never make, for the fragment of `d`.
    fn forge(&mut self, d: &[u8]) -> Option<Rc<[u8]>> {
        let prot = self.protection.as_ref()?;
        let mut bytes = d.to_vec();
        let dg = datagram::decode(&mut bytes, prot).ok()?;
        let mut header = dg.header;
        match self.rng.next_u32() % 2 {
            0 => header.comm_id ^= 1 + u64::from(self.rng.next_u32()),
            _ => {
                header.bcast =
                    self.unreached.max(header.bcast + 1) + u64::from(self.rng.next_u32() % 3)
            }
        }
        // Other bytes than the genuine fragment's: taking it would show.
        let payload: Vec<u8> = dg.payload.iter().map(|b| !b).collect();
        let mut out = Vec::new();
        datagram::encode(&header, &payload, prot, &mut out);
        Some(out.into())
    }

    /// Whether receiver `h` loses the next datagram.
    fn loses(&mut self, h: usize) -> bool {
        if self.net.loss <= 0.0 {
            return false;
        }
        let draw = |rng: &mut ChaCha8Rng| (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        if self.net.burst <= 1.0 {
            return draw(&mut self.rng) < self.net.loss;
        }
        let host = &mut self.hosts[h];
        let flip = if host.lossy {
            self.leave_loss
        } else {
            self.enter_loss
        };
        if draw(&mut self.rng) < flip {
            host.lossy = !host.lossy;
        }
        host.lossy
    }

    fn at_host(&mut self, h: usize, p: Rc<Packet>) {
        if p.is_stream() {
            self.acknowledge(h, &p);
        }
        if let Body::Segment { last, .. } = p.body {
            // The transport copies a segment's bytes out as it arrives, the
            // last one's in the step that finds the message complete.
            let payload = network::segment_payload(p.wire);
            if last {
                self.hosts[h].io.p2p.borrow_mut().last_segment_bytes += payload as u64;
            } else {
                let cost = self.p2p_byte_cost(h, payload);
                let host = &mut self.hosts[h];
                host.busy_until = host.busy_until.max(self.now) + cost;
            }
        }
        match &p.body {
            Body::Ack { bytes } => {
                let limits = Limits::of(&self.net);
                self.hosts[h].uplink.acked(p.src, *bytes, limits);
                self.kick_uplink(h, self.now);
                return;
            }
            Body::Fragment { whole: None, .. } => return,
            Body::Fragment {
                datagram,
                whole: Some(d),
            } => {
                if self.ports[h].dropped.remove(datagram) {
                    self.counters.queue_drops += 1;
                    return;
                }
                if self.loses(h) {
                    self.counters.lost += 1;
                    return;
                }
                let copies = self.misbehave(d);
                let mut s = self.hosts[h].io.socket.borrow_mut();
                if s.rx_bytes > 0 && s.rx_bytes + d.len() > s.rcvbuf {
                    drop(s);
                    self.counters.rcvbuf_drops += 1;
                    return;
                }
                for c in copies {
                    s.rx_bytes += c.len();
                    s.rx.push_back(c);
                }
                drop(s);
                self.counters.datagrams_delivered += 1;
            }
            Body::Segment { last: false, .. } => return,
            Body::Segment { msg, last: true } => {
                let m = self.messages[*msg as usize].take().expect("delivered once");
                self.counters.messages_delivered += 1;
                let mut p2p = self.hosts[h].io.p2p.borrow_mut();
                if self.net.is_eager(m.len) {
                    let ack = m.matched.then_some(m.send_id);
                    p2p.eager(m.src, m.tag, m.len, m.data, ack);
                    drop(p2p);
                    // A receive already posted answers a synchronous send.
                    self.answer_now(h);
                } else {
                    p2p.rendezvous_data(*msg, m.len, m.data);
                    drop(p2p);
                    self.end_rendezvous(m.src, h);
                }
            }
            Body::Request(msg) => {
                let tag = self.message(*msg).tag;
                self.hosts[h].io.p2p.borrow_mut().request(p.src, tag, *msg);
                // A receive already posted answers at once.
                self.answer_now(h);
            }
            Body::Matched { send_id } => {
                self.hosts[h].io.p2p.borrow_mut().matched(*send_id);
                self.wake(h);
            }
            Body::Clear(msg) => {
                let at = self.now.max(self.hosts[h].busy_until);
                self.start_rendezvous(h, at, *msg);
            }
        }
        self.wake(h);
    }
}
