//! What the simulated cluster is: its links, switches and hosts.

use crate::Ns;

/// Faults of a network that misbehaves, per datagram copy a receiver gets
/// (fractions); for testing the driver, not for predictions.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    /// The copy comes twice.
    pub duplicate: f64,
    /// The copy is cut short.
    pub truncate: f64,
    /// The copy has one byte changed.
    pub corrupt: f64,
    /// Random bytes come along with the copy.
    pub garbage: f64,
    /// A genuine datagram of another communicator or of a broadcast the
    /// ranks never make, valid under the communicator's key, comes along
    /// with the copy (an insider replaying or forging).
    pub foreign: f64,
    /// Each copy is delayed by up to this much more (reordering).
    pub jitter_ns: Ns,
}

/// The cluster's parameters.
#[derive(Clone, Debug)]
pub struct Network {
    /// Every link's rate, bits per second.
    pub rate_bps: u64,
    /// Bytes a link may send at once before its rate applies (a `tbf`
    /// bucket); 0: every packet at the rate.
    pub bucket: usize,
    /// One-way latency of a link, switch processing included.
    pub latency_ns: Ns,
    /// Bytes a switch output port queues before it drops (tail drop).
    pub port_queue: usize,
    /// Bytes a host's link queues (its qdisc) before it drops datagram
    /// fragments; the socket's send buffer must stay below it.
    pub host_queue: usize,
    /// Hosts per leaf switch, the leaves joined by a spine switch; 0: every
    /// host on one switch.
    pub leaf_hosts: usize,
    /// Each way of the trunk between a leaf and the spine: its rate (bits
    /// per second, no bucket) and the bytes its output port queues.
    pub trunk_rate_bps: u64,
    pub trunk_queue: usize,
    /// Fraction of multicast datagrams each receiver loses.
    pub loss: f64,
    /// Mean length of a run of lost datagrams (1: independent losses;
    /// longer: Gilbert-Elliott bursts of that mean length).
    pub burst: f64,
    /// What else the network does to datagrams.
    pub faults: Faults,
    /// A multicast socket's send and receive buffers, bytes.
    pub sndbuf: usize,
    pub rcvbuf: usize,
    /// The links' MTU: IP fragments' size, and what a datagram that IP does
    /// not fragment may carry.
    pub mtu: usize,
    /// Payload bytes of one TCP segment of a point-to-point message.
    pub segment: usize,
    /// Largest point-to-point message sent without a rendezvous.
    pub eager_limit: usize,
    /// Bytes one point-to-point connection may have in its host's link
    /// queue at once (Linux's TCP small queues), and sent but not yet
    /// acknowledged (its window).
    pub tcp_queue: usize,
    pub tcp_window: usize,
    /// Linux grows a connection's window with its link: the window is at
    /// least the bytes the link moves in this time (0: `tcp_window` only).
    /// Fitted at 10 Gbit/s (`docs/simulator.md`); 64 KiB, fitted at
    /// 100 Mbit/s, is the larger up to 5 Gbit/s.
    pub tcp_window_time_ns: Ns,
    /// Bytes of datagrams one system call sends (UDP segmentation, as the
    /// component's socket); 0: one datagram per call.
    pub call_bytes: usize,
    /// Host cost of each point-to-point message sent or received.
    pub per_message_ns: Ns,
    /// Host cost of each multicast datagram sent or received.
    pub per_datagram_ns: Ns,
    /// Host cost of each byte of a point-to-point message sent or
    /// received, picoseconds.
    pub per_byte_ps: u64,
    /// Host cost of each byte of a datagram sent or received, picoseconds
    /// (ipmc's tag and copies besides the kernel's).
    pub per_datagram_byte_ps: u64,
    /// Hosts slower than the others: the last `slow_hosts` ranks' host
    /// costs are `slow_factor` times the others' (a shared core, a slower
    /// machine).
    pub slow_hosts: usize,
    pub slow_factor: f64,
    /// A rank that stops running for a while (host, from, for how long),
    /// its socket still receiving: descheduled, or paging.
    pub stall: Option<(usize, Ns, Ns)>,
}

impl Network {
    /// The repository's emulated cluster (`tests/cluster/cluster.sh`):
    /// 100 Mbit/s links shaped by `tbf` with queues long enough that nothing
    /// is dropped, veth and bridge latency, host costs, and TCP's window and
    /// share of the link queue as measured there (`docs/simulator.md`).
    pub fn emulated() -> Self {
        Network {
            rate_bps: 100_000_000,
            bucket: 3072,
            latency_ns: 15_000,
            port_queue: 2_500_000,
            host_queue: 2_500_000,
            leaf_hosts: 0,
            trunk_rate_bps: 1_000_000_000,
            trunk_queue: 2_500_000,
            loss: 0.0,
            burst: 1.0,
            faults: Faults::default(),
            sndbuf: 212_992,
            rcvbuf: 4 << 20,
            mtu: 1500,
            segment: 1448,
            eager_limit: 65536,
            tcp_queue: 64 << 10,
            tcp_window: 64 << 10,
            tcp_window_time_ns: 100_000,
            call_bytes: 65507,
            per_message_ns: 5_000,
            // Fitted at 10 Gbit/s, where the wire nearly sets the pace; at
            // 25 Gbit/s the same hosts fit 200 ns and 775 ps (500 with the
            // wide POLYVAL), `docs/simulator.md`: these overstate them.
            per_datagram_ns: 350,
            per_byte_ps: 250,
            per_datagram_byte_ps: 1_050,
            slow_hosts: 0,
            slow_factor: 1.0,
            stall: None,
        }
    }

    /// The thesis's CLiC: Fast Ethernet hosts on one Extreme Black Diamond
    /// switch, hosts of 2006.
    pub fn clic() -> Self {
        Network {
            rate_bps: 100_000_000,
            bucket: 0,
            latency_ns: 15_000,
            port_queue: 256 << 10,
            host_queue: 1000 * 1538,
            leaf_hosts: 0,
            trunk_rate_bps: 1_000_000_000,
            trunk_queue: 1 << 20,
            loss: 0.0,
            burst: 1.0,
            faults: Faults::default(),
            sndbuf: 131_072,
            rcvbuf: 1 << 20,
            mtu: 1500,
            segment: 1448,
            eager_limit: 65536,
            tcp_queue: 64 << 10,
            tcp_window: 64 << 10,
            tcp_window_time_ns: 100_000,
            call_bytes: 0,
            per_message_ns: 20_000,
            per_datagram_ns: 20_000,
            per_byte_ps: 2_000,
            per_datagram_byte_ps: 2_000,
            slow_hosts: 0,
            slow_factor: 1.0,
            stall: None,
        }
    }

    /// A connection's window on this network's links (see
    /// `tcp_window_time_ns`).
    pub fn window(&self) -> usize {
        let grown = u128::from(self.rate_bps) * u128::from(self.tcp_window_time_ns) / 8_000_000_000;
        self.tcp_window
            .max(usize::try_from(grown).unwrap_or(usize::MAX))
    }

    /// Time to put `wire` bytes on a host's link.
    pub fn serialize(&self, wire: usize) -> Ns {
        serialize_at(self.rate_bps, wire)
    }

    /// Time to put `wire` bytes on a trunk.
    pub fn serialize_trunk(&self, wire: usize) -> Ns {
        serialize_at(self.trunk_rate_bps, wire)
    }

    /// The leaf switch of host `h`.
    pub fn leaf_of(&self, h: usize) -> usize {
        h.checked_div(self.leaf_hosts).unwrap_or(0)
    }

    /// The hosts on leaf `leaf` of a cluster of `hosts`.
    pub fn hosts_of(&self, leaf: usize, hosts: usize) -> std::ops::Range<usize> {
        match self.leaf_hosts {
            0 => 0..hosts,
            n => (leaf * n).min(hosts)..((leaf + 1) * n).min(hosts),
        }
    }

    /// Whether a message of `len` bytes goes without a rendezvous: its
    /// header counts against the limit, as in Open MPI's TCP transport.
    pub fn is_eager(&self, len: usize) -> bool {
        len + MESSAGE_HEADER <= self.eager_limit
    }

    /// A host's cost of `messages` point-to-point messages and
    /// `datagrams` datagrams of `datagram_bytes` in all.
    pub fn host_cost(&self, messages: u64, datagrams: u64, datagram_bytes: u64) -> Ns {
        messages * self.per_message_ns
            + datagrams * self.per_datagram_ns
            + datagram_bytes * self.per_datagram_byte_ps / 1000
    }

    /// A host's cost of `bytes` of point-to-point messages sent or
    /// received.
    pub fn p2p_byte_cost(&self, bytes: usize) -> Ns {
        bytes as u64 * self.per_byte_ps / 1000
    }
}

/// Time to put `wire` bytes on a link of `rate_bps` bits per second.
pub fn serialize_at(rate_bps: u64, wire: usize) -> Ns {
    (wire as u64 * 8 * 1_000_000_000).div_ceil(rate_bps)
}

/// Bytes on an Ethernet link of MTU `mtu` of a UDP datagram of `len`
/// bytes, IP fragments included: each fragment carries IP and Ethernet
/// framing (preamble, header, FCS, gap).
pub fn datagram_wire(len: usize, mtu: usize) -> usize {
    datagram_fragments(len, mtu).iter().sum()
}

/// The wire bytes of each IP fragment of a UDP datagram of `len` bytes on
/// a link of MTU `mtu` (fragments carry multiples of 8 bytes but the last).
pub fn datagram_fragments(len: usize, mtu: usize) -> Vec<usize> {
    let per_fragment = (mtu - IP_HEADER) / 8 * 8;
    let ip_payload = len + UDP_HEADER;
    let n = ip_payload.div_ceil(per_fragment).max(1);
    (0..n)
        .map(|i| (ip_payload - i * per_fragment).min(per_fragment) + IP_HEADER + ETHERNET)
        .collect()
}

/// Payload bytes of a TCP segment on a link of MTU `mtu` (IP and TCP
/// headers, timestamps included, take the rest).
pub fn tcp_payload(mtu: usize) -> usize {
    mtu - IP_HEADER - TCP_HEADER
}

/// Bytes on the link of one TCP segment of `payload` bytes.
pub fn segment_wire(payload: usize) -> usize {
    payload + IP_HEADER + TCP_HEADER + ETHERNET
}

/// The payload of a TCP segment of `wire` bytes on the wire.
pub fn segment_payload(wire: usize) -> usize {
    wire - (IP_HEADER + TCP_HEADER + ETHERNET)
}

/// Bytes of the point-to-point layer's own header on a message.
pub const MESSAGE_HEADER: usize = 40;
/// A rendezvous request or its answer.
pub const CONTROL_BYTES: usize = 64;

const UDP_HEADER: usize = 8;
const IP_HEADER: usize = 20;
const TCP_HEADER: usize = 32;
const ETHERNET: usize = 38;
