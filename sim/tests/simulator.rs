//! The simulator's own checks: closed forms, conservation, completion and
//! determinism.

use ipmc_sim::engine::{Engine, Outcome};
use ipmc_sim::network::{self, Network};
use ipmc_sim::programs::{Op, Schedule};
use ipmc_sim::scenario::{Algorithm, Scenario};

/// The emulated cluster without host costs: only the wire counts.
fn wire_only() -> Network {
    Network {
        bucket: 0,
        per_message_ns: 0,
        per_datagram_ns: 0,
        per_byte_ps: 0,
        per_datagram_byte_ps: 0,
        ..Network::emulated()
    }
}

fn scenario(nodes: usize, size: usize, net: Network, algorithm: Algorithm) -> Scenario {
    let mut s = Scenario::new(nodes, size, net);
    s.algorithm = algorithm;
    s
}

/// One message of three full segments from rank 0 to rank 1, and one
/// segment's time on the wire.
fn three_full_segments(net: &Network) -> (Outcome, u64) {
    let len = 3 * net.segment - network::MESSAGE_HEADER;
    let out = scenario(2, len, net.clone(), Algorithm::Binomial)
        .run()
        .unwrap();
    (out, net.serialize(network::segment_wire(net.segment)))
}

#[test]
fn one_message_between_two_hosts_takes_the_closed_form() {
    let net = wire_only();
    // Three full segments: the receiver has the message one segment's time
    // after the sender put the last on its link, plus a latency per link.
    let (out, seg) = three_full_segments(&net);
    assert_eq!(out.returned_ns[0], 3 * seg, "the sender returns when sent");
    assert_eq!(out.returned_ns[1], 4 * seg + 2 * net.latency_ns);
    assert_eq!(out.completion_max_ns(), 4 * seg + 2 * net.latency_ns);
}

/// With a cost per byte the transport's copies overlap the wire: the
/// sender's segments leave at once, and the receiver has the message one
/// segment's copy after the last one arrived (the model charged a message's
/// bytes before it left and after it had arrived, 1.5 to 2 × the measured
/// times at 10 Gbit/s).
#[test]
fn a_messages_copies_overlap_the_wire() {
    let net = Network {
        per_byte_ps: 250,
        ..wire_only()
    };
    let (out, seg) = three_full_segments(&net);
    let copy = net.p2p_byte_cost(net.segment);
    assert!(copy > 0);
    assert_eq!(out.returned_ns[0], 3 * seg, "the sender returns when sent");
    assert_eq!(out.returned_ns[1], 4 * seg + 2 * net.latency_ns + copy);
}

/// A connection's window grows with the link as Linux's does: 64 KiB at
/// 100 Mbit/s, what the link moves in 100 µs at 10 Gbit/s, so that a
/// message of 64 KiB does not wait there for an acknowledgement; a window
/// given explicitly stays.
#[test]
fn the_window_grows_with_the_link() {
    let slow = Network::emulated();
    assert_eq!(slow.window(), 64 << 10);
    let fast = Network {
        rate_bps: 10_000_000_000,
        ..Network::emulated()
    };
    assert_eq!(fast.window(), 125_000);
    let fixed = Network {
        tcp_window_time_ns: 0,
        ..fast
    };
    assert_eq!(fixed.window(), 64 << 10);
}

#[test]
fn one_datagram_reaches_every_host_at_once() {
    let net = wire_only();
    let s = scenario(64, 1000, net.clone(), Algorithm::Ipmc);
    let out = s.run().unwrap();
    let dg = ipmc::protocol::datagram::HEADER_LEN + 1000 + ipmc::protocol::datagram::TAG_LEN;
    let hop = net.serialize(network::datagram_wire(dg, net.mtu)) + net.latency_ns;
    assert_eq!(
        out.returned_ns[0], 0,
        "the root returns once its datagram is sent"
    );
    assert!(
        out.returned_ns[1..].iter().all(|&t| t == 2 * hop),
        "{:?}",
        out.returned_ns
    );
    assert_eq!(out.counters.datagrams_sent, 1);
    assert_eq!(out.counters.datagrams_delivered, 63);
}

/// Two levels of switches: hosts on the root's leaf get a datagram as on
/// one switch; the others one trunk up and one down later, each a store and
/// forward at the trunk's rate and a latency.
#[test]
fn one_datagram_crosses_the_spine_once_per_leaf() {
    let net = Network {
        leaf_hosts: 16,
        trunk_rate_bps: 1_000_000_000,
        ..wire_only()
    };
    let out = scenario(64, 1000, net.clone(), Algorithm::Ipmc)
        .run()
        .unwrap();
    let dg = ipmc::protocol::datagram::HEADER_LEN + 1000 + ipmc::protocol::datagram::TAG_LEN;
    let wire = network::datagram_wire(dg, net.mtu);
    let hop = net.serialize(wire) + net.latency_ns;
    let trunk = net.serialize_trunk(wire) + net.latency_ns;
    assert_eq!(out.returned_ns[0], 0);
    for (rank, &t) in out.returned_ns.iter().enumerate().skip(1) {
        let expected = if rank < 16 {
            2 * hop
        } else {
            2 * hop + 2 * trunk
        };
        assert_eq!(t, expected, "rank {rank}: {:?}", out.returned_ns);
    }
    assert_eq!(out.counters.datagrams_delivered, 63);
    assert_eq!(out.counters.datagram_copies, 63);
}

/// A point-to-point message between leaves passes four links, each a
/// store and forward of every segment: the closed form at equal rates.
#[test]
fn one_message_between_leaves_takes_the_closed_form() {
    let net = Network {
        leaf_hosts: 1,
        trunk_rate_bps: wire_only().rate_bps,
        ..wire_only()
    };
    let (out, seg) = three_full_segments(&net);
    assert_eq!(out.returned_ns[1], 6 * seg + 4 * net.latency_ns);
}

/// Every copy of a datagram is delivered, lost, or dropped by a queue or a
/// socket buffer; every point-to-point message arrives.
#[test]
fn bytes_are_conserved() {
    // Last: two levels of switches whose trunks drop every datagram.
    for (loss, queue, trunk) in [
        (0.0, 2_500_000, None),
        (0.05, 2_500_000, None),
        (0.0, 1_000, None),
        (0.05, 2_500_000, Some(1_000)),
    ] {
        let net = Network {
            loss,
            port_queue: queue,
            leaf_hosts: if trunk.is_some() { 8 } else { 0 },
            trunk_queue: trunk.unwrap_or(2_500_000),
            ..Network::emulated()
        };
        let out = scenario(40, 300_000, net, Algorithm::Ipmc).run().unwrap();
        let c = &out.counters;
        assert_eq!(
            c.datagram_copies,
            c.datagrams_delivered + c.lost + c.queue_drops + c.rcvbuf_drops,
            "{c:?}"
        );
        assert_eq!(c.datagram_copies, c.datagrams_sent * 39);
        assert_eq!(c.messages_sent, c.messages_delivered, "{c:?}");
        if loss > 0.0 {
            assert!(c.lost > 0, "{c:?}");
        }
        if queue < 1_500 || trunk.is_some() {
            assert!(
                c.queue_drops > 0,
                "a queue shorter than a fragment drops: {c:?}"
            );
        }
    }
}

/// A send buffer larger than the host's link queue loses datagrams at the
/// root's own link, without a word, and the chain delivers them; a send
/// buffer below it loses none (the component's socket keeps it so).
#[test]
fn a_send_buffer_beyond_the_link_queue_drops_datagrams() {
    for (sndbuf, drops) in [(512 << 10, false), (8 << 20, true)] {
        let net = Network {
            sndbuf,
            ..Network::emulated()
        };
        let out = scenario(4, 4 << 20, net, Algorithm::Ipmc).run().unwrap();
        let c = &out.counters;
        assert_eq!(
            c.datagram_copies,
            c.datagrams_delivered + c.lost + c.queue_drops + c.rcvbuf_drops,
            "{c:?}"
        );
        assert_eq!(c.queue_drops > 0, drops, "{c:?}");
        let chain: u64 = out.datagrams.iter().map(|d| d.bytes_chain).sum();
        assert_eq!(chain > 0, drops, "{c:?}");
    }
}

/// Under heavy and bursty loss every rank of every algorithm finishes, and
/// ipmc's ranks hold the root's bytes (the run checks them).
#[test]
fn every_rank_completes_under_loss() {
    let net = Network {
        loss: 0.2,
        burst: 4.0,
        ..Network::emulated()
    };
    for algorithm in [Algorithm::Ipmc].into_iter().chain(Algorithm::PEERS) {
        for (nodes, size) in [(2, 10), (5, 70_000), (33, 200_000)] {
            let out = scenario(nodes, size, net.clone(), algorithm)
                .run()
                .unwrap_or_else(|e| panic!("{algorithm:?} {nodes} {size}: {e}"));
            assert_eq!(out.returned_ns.len(), nodes);
            assert!(out.completion_max_ns() > 0);
        }
    }
}

#[test]
fn a_seed_decides_everything() {
    let net = Network {
        loss: 0.05,
        burst: 2.0,
        ..Network::emulated()
    };
    let run = |seed| {
        let mut s = scenario(50, 100_000, net.clone(), Algorithm::Ipmc);
        s.seed = seed;
        s.run().unwrap()
    };
    let (a, b, c) = (run(3), run(3), run(4));
    assert_eq!(a.returned_ns, b.returned_ns);
    assert_eq!(a.counters, b.counters);
    assert_ne!(a.counters.lost, 0);
    assert!(a.returned_ns != c.returned_ns || a.counters != c.counters);
}

/// Multicast does not grow with the number of hosts; a tree does.
#[test]
fn ipmc_stays_flat_while_a_tree_grows() {
    let at = |nodes, algorithm| {
        scenario(nodes, 65536, Network::emulated(), algorithm)
            .run()
            .unwrap()
            .completion_max_ns() as f64
    };
    let (i4, i256) = (at(4, Algorithm::Ipmc), at(256, Algorithm::Ipmc));
    let (b4, b256) = (at(4, Algorithm::Binomial), at(256, Algorithm::Binomial));
    assert!(i256 < 1.1 * i4, "ipmc {i4} → {i256}");
    assert!(b256 > 3.0 * b4, "binomial {b4} → {b256}");
}

/// A communicator's first broadcast, entered by every rank as the
/// communicator is created, runs the agreement on its group first: it costs
/// more than a later one, growing with the depth of the agreement's tree, and
/// still delivers the root's bytes.
#[test]
fn the_first_broadcast_pays_for_the_setup() {
    let setup = |nodes| {
        let at = |algorithm| {
            scenario(nodes, 65536, Network::emulated(), algorithm)
                .run()
                .unwrap()
                .completion_max_ns()
        };
        at(Algorithm::IpmcFirst) - at(Algorithm::Ipmc)
    };
    let (at8, at512) = (setup(8), setup(512));
    assert!(
        at8 > 0 && at512 > at8,
        "setup grows with the nodes: {at8} {at512} ns"
    );
    // The agreement's messages follow a tree: 64 times the nodes cost about
    // 3 times the depth, not 64 times rank 0's messages.
    assert!(
        at512 < 6 * at8,
        "setup at 8 nodes {at8} ns, at 512 {at512} ns"
    );
}

/// The component's driver on 300 random clusters that misbehave: loss in bursts,
/// short queues and socket buffers, duplicated, reordered, truncated,
/// corrupted and garbage datagrams, ranks entering at different times, any
/// root, fragment size, length, protection and root wait, and in a third of
/// them several broadcasts back to back.
/// Every rank must end with the root's bytes (the run checks them).
#[test]
fn the_driver_survives_a_misbehaving_network() {
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    let seeds: u64 = std::env::var("IPMC_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        * 300;
    let base: u64 = std::env::var("IPMC_SIM_SEED_BASE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    for seed in base..base + seeds {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut pick = |n: u64| rng.next_u64() % n;
        let frac = |x: u64| x as f64 / 100.0;
        let net = Network {
            loss: frac(pick(30)),
            burst: 1.0 + pick(5) as f64,
            port_queue: [1_000, 20_000, 2_500_000][pick(3) as usize],
            sndbuf: [1, 10_000, 212_992][pick(3) as usize],
            rcvbuf: [1, 30_000, 4 << 20][pick(3) as usize],
            faults: network::Faults {
                duplicate: frac(pick(20)),
                truncate: frac(pick(10)),
                corrupt: frac(pick(10)),
                garbage: frac(pick(10)),
                foreign: frac(pick(10)),
                jitter_ns: [0, 100_000, 5_000_000][pick(3) as usize],
            },
            ..Network::emulated()
        };
        let nodes = 2 + pick(30) as usize;
        let size = [0, 1, 4095, 4096, 70_000, 300_000][pick(6) as usize];
        let mut s = scenario(nodes, size, net, Algorithm::Ipmc);
        s.root = pick(nodes as u64) as usize;
        s.ipmc.fragment_size = [256, 1000, 4096, 8192][pick(4) as usize];
        // Every protection that detects a changed byte.
        let key = ipmc::protocol::datagram::Key([seed as u8; ipmc::protocol::datagram::KEY_LEN]);
        s.ipmc.auth = [
            ipmc::protocol::datagram::Auth::Tag(key),
            ipmc::protocol::datagram::Auth::Encrypt(key),
            ipmc::protocol::datagram::Auth::crc(true),
        ][pick(3) as usize];
        s.skew_ns = [0, 1_000_000, 50_000_000][pick(3) as usize];
        s.ipmc.root_wait = std::time::Duration::from_micros([0, 500][pick(2) as usize]);
        // Flow control as configured, with the smallest window, or off.
        s.ipmc.flow_window = [0, 1, usize::MAX][pick(3) as usize];
        // A third of the clusters run several broadcasts back to back, with
        // other roots and lengths, some above the background limit.
        if pick(3) == 0 {
            s.calls = (0..2 + pick(3))
                .map(|_| {
                    (
                        pick(nodes as u64) as usize,
                        [0, 4096, 70_000][pick(3) as usize],
                    )
                })
                .collect();
            s.ipmc.background_limit = [0, 65536, 1 << 30][pick(3) as usize];
        }
        s.seed = seed;
        let out = s
            .run()
            .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{s:?}"));
        let c = &out.counters;
        assert_eq!(
            c.datagram_copies,
            c.datagrams_delivered + c.lost + c.queue_drops + c.rcvbuf_drops,
            "seed {seed}: {c:?}"
        );
    }
}

/// A schedule of point-to-point operations per host, run to its end: when
/// each host finished.
fn run_schedules(net: Network, schedules: Vec<Vec<Op>>) -> Vec<u64> {
    let mut engine = Engine::new(net, 1);
    for ops in schedules {
        let io = engine.host_io();
        engine.add_host(io.clone(), Box::new(Schedule::new(&io, ops)));
    }
    engine.run(u64::MAX / 2).unwrap().returned_ns
}

fn send(to: usize, len: usize) -> Op {
    Op::Send {
        to,
        len,
        after: None,
        also: None,
    }
}

fn recv(from: usize) -> Op {
    Op::Recv {
        from,
        after: None,
        also: None,
    }
}

/// Two processes that send each other a rendezvous message at once take as
/// long as the two transfers one after the other, as Open MPI's TCP
/// transport does; eager messages cross at once.
#[test]
fn rendezvous_transfers_between_two_processes_take_turns() {
    let net = wire_only();
    let both = |len| {
        let t = run_schedules(
            net.clone(),
            vec![vec![recv(1), send(1, len)], vec![recv(0), send(0, len)]],
        );
        *t.iter().max().unwrap() as f64
    };
    let one = |len| {
        let t = run_schedules(net.clone(), vec![vec![send(1, len)], vec![recv(0)]]);
        t[1] as f64
    };
    let (big, small) = (512 << 10, 32 << 10);
    assert!(!net.is_eager(big) && net.is_eager(small));
    let ratio = both(big) / one(big);
    assert!((1.9..2.1).contains(&ratio), "rendezvous both ways: {ratio}");
    let ratio = both(small) / one(small);
    assert!((0.95..1.1).contains(&ratio), "eager both ways: {ratio}");
}

/// A short message to one peer waits behind at most `tcp_queue` bytes of a
/// long message to another peer, not behind all of it.
#[test]
fn a_connection_holds_at_most_its_share_of_the_link_queue() {
    let net = Network {
        tcp_queue: 8 << 10,
        ..wire_only()
    };
    let long = 60_000;
    let t = run_schedules(
        net.clone(),
        vec![
            vec![send(1, long), send(2, 100)],
            vec![recv(0)],
            vec![recv(0)],
        ],
    );
    let whole = net.serialize(network::segment_wire(net.segment)) * (long / net.segment) as u64;
    assert!(t[2] < whole / 3, "the short message took {} ns", t[2]);
    assert!(t[1] > whole, "the long message took {} ns", t[1]);
}

/// ipmc's barrier on the simulated cluster: its trees and the component's
/// driver release every rank; one datagram on a clean network, and with
/// every datagram lost the point-to-point releases alone (slower, never
/// stuck). Without host costs, one level of arrivals (17 ranks) costs two
/// hops of an empty message and the release one datagram's hop.
#[test]
fn the_barrier_releases_every_rank_by_datagram_or_point_to_point() {
    for (nodes, loss) in [(17, 0.0), (300, 0.0), (300, 0.5), (300, 1.0)] {
        let net = Network {
            loss,
            ..wire_only()
        };
        let s = scenario(nodes, 1, net, Algorithm::BarrierIpmc);
        let out = s.run().unwrap();
        assert_eq!(out.returned_ns.len(), nodes);
        assert_eq!(out.counters.datagrams_sent, 1, "{nodes} nodes, loss {loss}");
        // 2 (p - 1) empty messages: arrivals and releases.
        assert_eq!(
            out.counters.messages_sent,
            2 * (nodes as u64 - 1),
            "{nodes} nodes, loss {loss}"
        );
        if loss == 1.0 {
            assert_eq!(out.counters.datagrams_delivered, 0);
        }
    }
    let clean = scenario(300, 1, wire_only(), Algorithm::BarrierIpmc)
        .run()
        .unwrap();
    let lossy = scenario(
        300,
        1,
        Network {
            loss: 1.0,
            ..wire_only()
        },
        Algorithm::BarrierIpmc,
    )
    .run()
    .unwrap();
    assert!(
        lossy.completion_max_ns() > clean.completion_max_ns(),
        "a binary tree of point-to-point releases is deeper than one datagram"
    );
}

/// ipmc's allgather (every rank's block a multicast broadcast in turn, the
/// component's driver) delivers every block, with and without loss; without
/// loss it puts about half the ring's bytes on the hosts' links and on the
/// trunks (each block enters the network once instead of p − 1 times:
/// p / (2 (p − 1)) of the ring's, and the headers) and finishes first.
#[test]
fn the_multicast_allgather_puts_half_the_rings_bytes_on_the_network() {
    let block = 65536;
    let two_levels = Network {
        leaf_hosts: 8,
        trunk_rate_bps: 1_000_000_000,
        ..wire_only()
    };
    let nodes = 24;
    let mut repaired = Vec::new();
    for loss in [0.0, 0.3] {
        let net = Network {
            loss,
            ..two_levels.clone()
        };
        let ipmc = scenario(nodes, block, net.clone(), Algorithm::AllgatherIpmc)
            .run()
            .unwrap();
        let ring = scenario(nodes, block, net, Algorithm::AllgatherRing)
            .run()
            .unwrap();
        assert_eq!(ipmc.returned_ns.len(), nodes);
        // Every rank's block: p broadcasts, each datagram sent once by its root.
        let fragment = Scenario::new(2, 1, wire_only()).ipmc.fragment_size;
        assert_eq!(
            ipmc.counters.datagrams_sent,
            (nodes * block.div_ceil(fragment)) as u64,
            "loss {loss}"
        );
        // The ring: p - 1 messages from every rank.
        assert_eq!(ring.counters.messages_sent, (nodes * (nodes - 1)) as u64);
        let (c, r) = (&ipmc.counters, &ring.counters);
        repaired.push(c.host_link_bytes);
        if loss == 0.0 {
            let host = c.host_link_bytes as f64 / r.host_link_bytes as f64;
            let trunk = c.trunk_bytes as f64 / r.trunk_bytes as f64;
            assert!(
                (0.5..0.56).contains(&host),
                "host links: {host:.3} of the ring's"
            );
            assert!(
                (0.5..0.56).contains(&trunk),
                "trunks: {trunk:.3} of the ring's"
            );
            assert!(ipmc.completion_max_ns() < ring.completion_max_ns());
        }
    }
    // With 30 % lost, the chain carries what multicast did not.
    assert!(repaired[1] > repaired[0], "{repaired:?}");
}

/// An allgather over two levels: the leaders' allgather carries a node's
/// blocks each, so it puts on the network what one rank per node with
/// blocks as large would, and the node's steps add their time, never
/// bytes on the links: Open MPI's steps (`shared` off) exactly theirs;
/// ipmc's shared segment its step's and the leaders' copies into it.
#[test]
fn an_allgather_over_two_levels_moves_a_nodes_blocks_among_the_leaders() {
    let (nodes, ranks, block) = (8, 4, 4096);
    for alg in [Algorithm::AllgatherIpmc, Algorithm::AllgatherRing] {
        let mut levels = scenario(nodes, block, wire_only(), alg);
        levels.node.ranks = ranks;
        let with_segment = levels.run().unwrap();
        levels.node.shared = None;
        let levels = levels.run().unwrap();
        let leaders = scenario(nodes, block * ranks, wire_only(), alg)
            .run()
            .unwrap();
        assert_eq!(
            levels.counters.host_link_bytes,
            leaders.counters.host_link_bytes
        );
        assert_eq!(levels.returned_ns.len(), nodes, "one per leader");
        let mut node = Scenario::new(2, 1, wire_only()).node;
        node.ranks = ranks;
        let message = block * ranks * nodes;
        let tree = node.gather_ns(block) + node.tree_ns(message);
        assert!(tree > 0);
        assert_eq!(
            levels.completion_max_ns(),
            leaders.completion_max_ns() + tree,
            "{alg:?}"
        );
        let segment = node.gather_ns(block) + node.fan_out_ns(message, true);
        assert!(segment < tree);
        assert!(
            with_segment.completion_max_ns() > leaders.completion_max_ns() + segment,
            "{alg:?}: the leaders' copies cost them time"
        );
        assert_eq!(
            with_segment.counters.host_link_bytes,
            leaders.counters.host_link_bytes
        );
    }
}

/// A broadcast over pipelined levels: each rank has the message once its
/// leader has the last segment (the leaders' segments simulated back to
/// back) and the node has moved that one, never before the node's
/// broadcast of the whole from the first segment; here the node's step
/// overlaps the network's, so it ends sooner than the whole levels.
#[test]
fn pipelined_levels_overlap_the_nodes_step_with_the_networks() {
    let (nodes, ranks, size, segment) = (8, 64, 1 << 20, 256 << 10);
    let mut whole = scenario(nodes, size, Network::emulated(), Algorithm::Ipmc);
    whole.node.ranks = ranks;
    let mut pipelined = whole.clone();
    pipelined.node.segment = segment;
    let (whole_run, pipelined_run) = (whole.run().unwrap(), pipelined.run().unwrap());
    let mut leaders = scenario(nodes, size, Network::emulated(), Algorithm::Ipmc);
    leaders.calls = vec![(0, segment); size / segment];
    let leaders = leaders.run().unwrap();
    let node = whole.node;
    for (rank, &t) in pipelined_run.returned_ns.iter().enumerate() {
        assert!(
            t >= leaders.returned_ns[rank] + node.fan_out_ns(segment, true),
            "rank {rank}"
        );
        assert!(t >= node.fan_out_ns(size, true), "rank {rank}");
    }
    assert!(
        pipelined_run.completion_max_ns() < whole_run.completion_max_ns(),
        "{} ns pipelined, {} whole",
        pipelined_run.completion_max_ns(),
        whole_run.completion_max_ns()
    );
}

/// The component's automatic choice, run by every simulated rank: on the
/// thesis's network it takes multicast for 64 KiB on 16 nodes; where the
/// network drops most datagrams, the chain delivers, multicast's measured
/// loss rules it out, and the ranks agree on another candidate (Open MPI's
/// split binary tree, there 2.5 times as fast as Open MPI's own choice).
/// Every rank decides alike, or their messages would mismatch and the run
/// fail.
#[test]
fn the_automatic_choice_follows_the_network() {
    let choose = |loss: f64| {
        let mut net = Network::emulated();
        net.loss = loss;
        let mut s = scenario(16, 65536, net, Algorithm::IpmcAuto);
        s.calls = vec![(0, 65536); 30];
        s.run().unwrap().table.expect("rank 0's decision table")
    };
    let clean = choose(0.0);
    assert!(
        clean.contains("32769-65536 bytes: multicast (measured:"),
        "{clean}"
    );
    let lossy = choose(0.9);
    assert!(
        lossy.contains("32769-65536 bytes: split_binary (measured:"),
        "{lossy}"
    );
    assert!(!lossy.contains("multicast loss 0.0%"), "{lossy}");
}

/// The automatic choice measures ipmc's chain at 1 MiB, in segments of
/// 64 KiB, beyond the eager limit: every 16th goes synchronously, and by
/// rendezvous its send completes once its data left (it once waited for
/// the answer an eager one gets, and no rank finished).
#[test]
fn the_chains_synchronous_segments_complete_by_rendezvous_too() {
    let mut s = scenario(5, 1 << 20, Network::emulated(), Algorithm::IpmcAuto);
    assert!(!s.net.is_eager(s.choice.chain_segment_size));
    s.calls = vec![(0, 1 << 20); 12];
    let table = s.run().unwrap().table.expect("rank 0's decision table");
    assert!(table.contains(", chain "), "{table}");
}

/// Short messages: the component's choice times each measured call at its
/// root, until every rank answered (with a tag of its own, so the answers
/// never meet a chain's frames); the answers that come after the root's
/// short wait in the call are taken in later, and the vote waits for them.
/// Every rank must decide, and as the made-up times say; up to 2 KiB Open
/// MPI's binomial and binary trees are candidates too.
#[test]
fn the_automatic_choice_times_short_messages_at_their_root() {
    let cases = [
        (
            4096,
            "2049-4096 bytes",
            "previous 2500 us, multicast 2000 us",
        ),
        (
            1024,
            "513-1024 bytes",
            "previous 4500 us, binomial 4500 us, binary 4500 us, multicast 4000 us",
        ),
    ];
    for (size, class, made_up) in cases {
        for (inject, nodes) in [(true, 5), (false, 16)] {
            let mut s = scenario(nodes, size, Network::emulated(), Algorithm::IpmcAuto);
            s.calls = vec![(0, size); 80];
            s.choice.inject_timing = inject;
            let table = s.run().unwrap().table.expect("rank 0's decision table");
            let decided = format!("{class}: multicast (measured:");
            assert!(table.contains(&decided), "{table}");
            if inject {
                assert!(table.contains(made_up), "{table}");
            }
        }
    }
}

/// Barriers under the component's automatic choice (`barrier-auto`), every
/// rank running the engine's calls: on 8 nodes of the emulated cluster Open
/// MPI's linear barrier is the fastest, as on the emulated cluster itself;
/// from 64 nodes at 10 Gbit/s ipmc's, whose release is one datagram.
#[test]
fn the_automatic_choice_of_barriers_takes_multicast_at_scale() {
    let choose = |nodes: usize, net: Network| {
        let mut s = scenario(nodes, 1, net, Algorithm::BarrierAuto);
        s.calls = vec![(0, 1); 60];
        s.run().unwrap().table.expect("rank 0's decision table")
    };
    let few = choose(8, Network::emulated());
    assert!(few.contains("barrier: linear (measured:"), "{few}");
    let mut fast = Network::emulated();
    fast.rate_bps = 10_000_000_000;
    fast.bucket = 0;
    let many = choose(64, fast);
    assert!(many.contains("barrier: multicast (measured:"), "{many}");
}

/// Allgathers under the component's automatic choice (`allgather-auto`):
/// every rank's block a multicast broadcast through the engine's queue,
/// every block checked on every rank, against the ring. On one switch the
/// ring's model runs close to its bound (each rank receives p − 1 blocks)
/// and is kept; on leaves of 8 hosts, whose trunks the ring crosses with
/// every block, ipmc's is the faster and the ranks take it.
#[test]
fn the_automatic_choice_of_allgathers_follows_the_network() {
    let choose = |net: Network| {
        let mut s = scenario(24, 65536, net, Algorithm::AllgatherAuto);
        s.calls = vec![(0, 65536); 30];
        s.run().unwrap().table.expect("rank 0's decision table")
    };
    let class = "allgather of 32769-65536 bytes per rank";
    let one_switch = choose(Network::emulated());
    assert!(
        one_switch.contains(&format!("{class}: previous (measured:")),
        "{one_switch}"
    );
    let leaves = Network {
        leaf_hosts: 8,
        trunk_rate_bps: 1_000_000_000,
        ..Network::emulated()
    };
    let leaves = choose(leaves);
    assert!(
        leaves.contains(&format!("{class}: multicast (measured:")),
        "{leaves}"
    );
}

/// Jumbo frames: ipmc's datagrams grow to its fragment size (4 KiB, which
/// a 1,500-byte MTU cuts to 1,420 bytes) and still cross as one frame each;
/// a broadcast of 64 KiB sends 16 of them instead of 47, and each host link
/// carries fewer header bytes.
#[test]
fn a_jumbo_mtu_carries_larger_datagrams_unfragmented() {
    let small = scenario(4, 65536, wire_only(), Algorithm::Ipmc);
    let jumbo_net = Network {
        mtu: 9000,
        segment: network::tcp_payload(9000),
        ..wire_only()
    };
    let jumbo = scenario(4, 65536, jumbo_net.clone(), Algorithm::Ipmc);
    assert_eq!(small.ipmc.fragment_size, 1420);
    assert_eq!(jumbo.ipmc.fragment_size, 4096);
    let dg = jumbo.ipmc.fragment_size
        + ipmc::protocol::datagram::HEADER_LEN
        + ipmc::protocol::datagram::TAG_LEN;
    assert_eq!(network::datagram_fragments(dg, jumbo_net.mtu).len(), 1);
    let (a, b) = (small.run().unwrap(), jumbo.run().unwrap());
    assert_eq!(a.counters.datagrams_sent, 47);
    assert_eq!(b.counters.datagrams_sent, 16);
    assert!(b.counters.host_link_bytes < a.counters.host_link_bytes);
    assert!(b.completion_max_ns() < a.completion_max_ns());
}

/// A datagram leaves its host once the system call that sent it is paid
/// for, not the root's whole step: with one datagram per call the receiver
/// works on the first while the root pays for the next, so a broadcast
/// takes about the root's cost, not the root's and then the receiver's. The
/// chain's `END`, sent after them, never overtakes them (which would make
/// the receiver ask the chain for every fragment).
#[test]
fn datagrams_leave_as_their_calls_are_paid_for() {
    let per_datagram = 10_000;
    let net = Network {
        rate_bps: 10_000_000_000,
        call_bytes: 0,
        per_datagram_ns: per_datagram,
        ..wire_only()
    };
    let s = scenario(2, 65536, net, Algorithm::Ipmc);
    let n = 65536_u64.div_ceil(s.ipmc.fragment_size as u64);
    let out = s.run().unwrap();
    assert_eq!(out.counters.datagrams_sent, n);
    assert_eq!(out.counters.messages_sent, 2, "END and NEED, no repair");
    let root = n * per_datagram;
    assert_eq!(out.returned_ns[0], root);
    assert!(
        out.returned_ns[1] < root + 6 * per_datagram,
        "{} ns after the root's {root}",
        out.returned_ns[1]
    );
}
