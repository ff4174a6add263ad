//! `ipmc-simulate`: one broadcast on a simulated cluster, ipmc against
//! models of Open MPI tuned's broadcasts (`scripts/simulate --help`).

use std::process::ExitCode;
use std::time::Instant;

use ipmc::group::setup;
use ipmc_sim::auto::Previous;
use ipmc_sim::network::{self, Network};
use ipmc_sim::scenario::{Algorithm, Scenario};

const USAGE: &str = "\
usage: simulate --nodes N --size BYTES [--loss PCT] [--burst LEN] [--rate MBITS]
                [--latency-us US] [--queue BYTES] [--bucket BYTES]
                [--tcp-window BYTES] [--tcp-queue BYTES] [--message-us US]
                [--datagram-us US] [--byte-ps PS] [--datagram-byte-ps PS]
                [--leaf-hosts N] [--trunk-rate MBITS]
                [--trunk-queue BYTES] [--mtu BYTES] [--preset emulated|clic]
                [--slow-hosts N] [--slow-factor F]
                [--stall-host H] [--stall-at-us US] [--stall-us US]
                [--peer NAME]... [--only NAME] [--seed S] [--root R]
                [--fragment BYTES] [--flow-window BYTES|off]
                [--calls N] [--per-rank] [--previous MODEL] [--inject-timing]
                [--ranks-per-node R] [--node-hop-us US] [--node-copy-gbs GB]
                [--level-segment BYTES] [--node-segment on|off|from-leader]
                [--segment-notice-us US] [--segment-copy-gbs GB]
       simulate --collective barrier --nodes N [network options] [--peer NAME]...
       simulate --collective allgather --nodes N --size BYTES [--ranks-per-node R]
                [network options] [--peer NAME]...

Simulates one broadcast of BYTES (suffixes K, M: KiB, MiB) from rank R
(default 0) to N nodes, one rank each, on one switch, every rank waiting when
the root enters; with --leaf-hosts, on leaf switches of that many hosts each,
joined by a spine over trunks of --trunk-rate (default 1000 Mbit/s) that
queue --trunk-queue bytes each way. ipmc runs its own driver; each --peer
(binomial, pipeline, scatter-allgather, all, none; default all, but
scatter-allgather above 2000 nodes) runs a model of Open MPI tuned's
broadcast on the same network. Loss is per receiver and datagram, in bursts
of mean length LEN (default 1: independent). The options after --bucket set
a point-to-point connection's window (without it: 64 KiB, or what the link
moves in 100 µs where that is more) and share of its host's link queue and
a host's cost per point-to-point message, per datagram and per byte (of
both; --datagram-byte-ps: of datagrams only); --slow-hosts makes the last N
ranks' host costs F times as large (default 2), --stall-host stops rank H from
--stall-at-us (default 0) for --stall-us (default 10000) while its socket
still receives. --mtu sets the links' MTU (default 1500; 9000: jumbo
frames): IP fragments and TCP segments, and ipmc's datagrams as large as
its fragment_size allows without IP fragmenting them. --flow-window sets
coll_ipmc_flow_window (off: no flow control). The last line reads
  nodes=N ranks_per_node=R size=B loss=P completion_max_us=T wire_us=W
T: when the slowest rank returned, from the root's entry; W: the message's
bits at the link rate. --only NAME (ipmc or a peer) runs that algorithm
alone and reports it on the last line; --only ipmc-first runs a
communicator's first broadcast, the agreement on its group first.
--calls N makes ipmc's ranks broadcast N times back to back (T: when the
slowest rank's last call returned); --per-rank also prints when each rank
returned (returned_us=...). --only ipmc-auto runs ipmc's automatic choice,
the component's own, on those calls: each rank
measures the candidates on the first calls and the ranks vote; rank 0's
decision table follows the result line. --previous (binomial, binary,
split-binary, pipeline, scatter-allgather, tuned; default tuned: binomial below
512 KiB, then scatter-allgather) is the model of Open MPI's broadcast among them;
--inject-timing feeds the choice coll_ipmc_inject_timing's made-up times.
--ranks-per-node R makes every node hold R ranks: the broadcast runs among
one leader per node (N nodes), each of which then gives the message to its
node's other ranks through shared memory, modelled as a pipelined tree of
hops of --node-hop-us (default 12) copying --node-copy-gbs GB/s (default
6.6; docs/simulator.md); ipmc's node step goes through its node's shared
segment instead (coll_ipmc_node_segment; --node-segment off: Open MPI's as
for the peers): the leader copies the message in and every other rank
copies it out at once, slot by slot of 256 KiB, each piece seen
--segment-notice-us (default 0.1) after it was written, copied at
--segment-copy-gbs (default 6.3), the leader's copy in added to its cost
per byte; --node-segment from-leader: every other rank copies the message
straight from the leader's memory (coll_ipmc_node_segment 2), at 3.6 GB/s
unless --segment-copy-gbs follows, the leader copying nothing. --level-segment BYTES pipelines the levels: the
leaders broadcast segments of BYTES back to back, and a rank has the message
once its leader has the last and the node has moved it, no sooner than the
node's broadcast of the whole from the leader's first segment.

--collective barrier simulates one MPI_Barrier instead, every rank entering
at once: ipmc's (arrivals to rank 0 up a tree of 16 children per rank, one
release datagram through the component's driver, point-to-point releases down
a binary tree) against models of tuned's linear and Bruck barriers (--peer
barrier-linear, barrier-bruck); T is when the last rank left it.
--only barrier-auto --calls N runs N barriers under ipmc's automatic choice
(ipmc's barrier, the linear one, and the Bruck one as the replaced
component's), as --only ipmc-auto runs broadcasts; with --collective
allgather, --only allgather-auto --calls N runs N allgathers so (ipmc's
against the ring, Open MPI's and standing for the replaced one).

--collective allgather simulates one MPI_Allgather of BYTES per rank: ipmc's
(every rank's block a multicast broadcast in turn, rank 0's first, with the
component's driver) against a model of tuned's ring allgather (--peer
allgather-ring). Every line also reports the bytes the run put on the hosts'
links (host_link_bytes, both ways) and on the trunks (trunk_bytes). With
--ranks-per-node R, over two levels as ipmc runs it: each node's R blocks
gathered to its leader, the leaders' allgather of R blocks each (ipmc's, or
the ring among the leaders), and every block given to the node's ranks, the
node's steps modelled as the broadcast's.

  simulate validate RESULTS.csv [--preset clic] [network options]
                    [--fragment BYTES]
sets each point of a scripts/compare run the simulator has a model of
against its simulation (ipmc-mcast: ipmc, tuned-6: binomial,
tuned-3-seg64k: pipeline, tuned-9: scatter-allgather); --fragment is the
run's coll_ipmc_fragment_size, fitted to the MTU as the component does.";

struct Args {
    scenario: Scenario,
    /// Only this algorithm, reported on the last line.
    only: Option<Algorithm>,
    peers: Vec<Algorithm>,
    loss_pct: f64,
    /// Print each rank's return.
    per_rank: bool,
}

fn bytes(s: &str) -> Result<usize, String> {
    let (digits, unit) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    digits
        .parse::<usize>()
        .map(|n| n * unit)
        .map_err(|_| format!("not a byte count: {s}"))
}

/// The command line; `None` for `--help`.
fn parse(argv: &[String]) -> Result<Option<Args>, String> {
    let mut nodes = None;
    let mut size = None;
    let mut net = Network::emulated();
    let mut set: Vec<(String, String)> = Vec::new();
    let mut peers: Option<Vec<Algorithm>> = None;
    let mut only = None;
    let (mut seed, mut root, mut fragment, mut calls) = (1, 0, None, 1);
    let mut flow_window = None;
    let mut per_rank = false;
    let mut node = ipmc_sim::node::Node::default();
    let mut collective = "bcast";
    let mut previous = Previous::Tuned;
    let mut inject_timing = false;
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            return Ok(None);
        }
        if flag == "--per-rank" {
            per_rank = true;
            continue;
        }
        if flag == "--inject-timing" {
            inject_timing = true;
            continue;
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value"))?
            .clone();
        let num = |v: &str| {
            v.parse::<f64>()
                .map_err(|_| format!("{flag}: not a number: {v}"))
        };
        match flag.as_str() {
            "--nodes" => nodes = Some(bytes(&value)?),
            "--collective" => {
                collective = match value.as_str() {
                    "bcast" => "bcast",
                    "barrier" => "barrier",
                    "allgather" => "allgather",
                    _ => {
                        return Err(format!(
                            "--collective: bcast, barrier or allgather, not {value}"
                        ))
                    }
                }
            }
            "--size" => size = Some(bytes(&value)?),
            "--preset" => {
                net = match value.as_str() {
                    "emulated" => Network::emulated(),
                    "clic" => Network::clic(),
                    _ => return Err(format!("--preset: emulated or clic, not {value}")),
                }
            }
            f if NET_FLAGS.contains(&f) => set.push((flag.clone(), value)),
            "--peer" => {
                let list = peers.get_or_insert_with(Vec::new);
                match value.as_str() {
                    "all" => list.extend(Algorithm::PEERS),
                    "none" => {}
                    name => list.push(
                        Algorithm::from_name(name)
                            .filter(|a| !a.is_ipmc())
                            .ok_or_else(|| format!("--peer: unknown {name}"))?,
                    ),
                }
            }
            "--only" => {
                only = Some(
                    Algorithm::from_name(&value)
                        .ok_or_else(|| format!("--only: unknown {value}"))?,
                )
            }
            "--seed" => seed = num(&value)? as u64,
            "--root" => root = num(&value)? as usize,
            "--fragment" => fragment = Some(bytes(&value)?),
            "--calls" => calls = num(&value)? as usize,
            "--previous" => {
                previous = match value.as_str() {
                    "binomial" => Previous::Binomial,
                    "binary" => Previous::Binary,
                    "split-binary" => Previous::SplitBinary,
                    "pipeline" => Previous::Pipeline,
                    "scatter-allgather" => Previous::ScatterAllgather,
                    "tuned" => Previous::Tuned,
                    _ => return Err(format!("--previous: unknown {value}")),
                }
            }
            "--ranks-per-node" => match num(&value)? {
                r if r >= 1.0 && r.fract() == 0.0 => node.ranks = r as usize,
                _ => return Err(format!("--ranks-per-node: 1 or more, not {value}")),
            },
            "--node-hop-us" => match num(&value)? {
                v if v >= 0.0 => node.hop_ns = (v * 1e3) as u64,
                _ => return Err(format!("--node-hop-us: out of range: {value}")),
            },
            "--level-segment" => node.segment = bytes(&value)?,
            "--node-segment" => {
                node.shared = match value.as_str() {
                    "on" => Some(ipmc_sim::node::SHARED),
                    "from-leader" => Some(ipmc_sim::node::FROM_LEADER),
                    "off" => None,
                    _ => {
                        return Err(format!(
                            "--node-segment: on, off or from-leader, not {value}"
                        ))
                    }
                }
            }
            "--segment-notice-us" => match (num(&value)?, node.shared.as_mut()) {
                (v, Some(shared)) if v >= 0.0 => shared.notice_ns = (v * 1e3) as u64,
                _ => return Err(format!("--segment-notice-us: out of range: {value}")),
            },
            "--segment-copy-gbs" => match (num(&value)?, node.shared.as_mut()) {
                (v, Some(shared)) if v > 0.0 => shared.copy_bytes_per_s = v * 1e9,
                _ => return Err(format!("--segment-copy-gbs: out of range: {value}")),
            },
            "--node-copy-gbs" => match num(&value)? {
                v if v > 0.0 => node.copy_bytes_per_s = v * 1e9,
                _ => return Err(format!("--node-copy-gbs: out of range: {value}")),
            },
            "--flow-window" => {
                flow_window = Some(match value.as_str() {
                    "off" => usize::MAX,
                    v => bytes(v)?,
                })
            }
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    // Presets first, then what was given on top of them.
    let loss_pct = set_network(&mut net, &set)?;
    let nodes = nodes.ok_or("--nodes is required")?;
    // A barrier moves no message: one byte stands for its release.
    let size = if collective == "barrier" {
        size.unwrap_or(1)
    } else {
        size.ok_or("--size is required")?
    };
    if nodes < 2 || root >= nodes {
        return Err("--nodes must be 2 or more, and --root less than it".into());
    }
    if size == 0 {
        return Err(
            "--size must be 1 or more: MPI returns from a broadcast of 0 bytes at once".into(),
        );
    }
    let mut scenario = Scenario::new(nodes, size, net);
    scenario.seed = seed;
    scenario.root = root;
    if calls > 1 {
        if node.ranks > 1 {
            return Err("--calls and --ranks-per-node cannot be combined".into());
        }
        scenario.calls = vec![(root, size); calls];
    }
    scenario.node = node;
    scenario.previous = previous;
    scenario.choice.inject_timing = inject_timing;
    if let Some(f) = fragment {
        scenario.ipmc.fragment_size = f;
    }
    if let Some(w) = flow_window {
        scenario.ipmc.flow_window = w;
    }
    let peers = match (collective, peers) {
        (_, Some(p)) if p.iter().any(|a| a.collective() != collective) => {
            return Err(format!(
                "--peer: the peers of a {collective}, not of another collective"
            ))
        }
        (_, Some(p)) => p,
        ("barrier", None) => Algorithm::BARRIER_PEERS.to_vec(),
        ("allgather", None) => Algorithm::ALLGATHER_PEERS.to_vec(),
        _ => default_peers(nodes),
    };
    if collective != "bcast" {
        let auto = matches!(
            only,
            Some(Algorithm::BarrierAuto | Algorithm::AllgatherAuto)
        );
        if (node.ranks > 1 && (collective == "barrier" || auto)) || (calls > 1 && !auto) {
            return Err(format!(
                "--collective {collective}: one call (--calls only with --only barrier-auto \
                 or allgather-auto), one rank per node but for one allgather"
            ));
        }
        scenario.algorithm = if collective == "barrier" {
            Algorithm::BarrierIpmc
        } else {
            Algorithm::AllgatherIpmc
        };
    }
    Ok(Some(Args {
        scenario,
        only,
        peers,
        loss_pct,
        per_rank,
    }))
}

/// Nodes above which the default peers leave scatter-allgather out: its
/// allgather's p² messages took 14 s and 0.8 GB at 2,000 nodes, which grows
/// to some 20 GB at 10,000.
const SCATTER_ALLGATHER_NODES: usize = 2000;

/// The peers run when none is named: all, but scatter-allgather on more than
/// [`SCATTER_ALLGATHER_NODES`] nodes, which is then said.
fn default_peers(nodes: usize) -> Vec<Algorithm> {
    let mut peers = Algorithm::PEERS.to_vec();
    if nodes > SCATTER_ALLGATHER_NODES {
        peers.retain(|a| *a != Algorithm::ScatterAllgather);
        eprintln!(
            "simulate: scatter-allgather left out above {SCATTER_ALLGATHER_NODES} nodes \
             (its p² messages; --peer scatter-allgather runs it)"
        );
    }
    peers
}

/// The options that change the network of a preset.
const NET_FLAGS: [&str; 21] = [
    "--loss",
    "--mtu",
    "--burst",
    "--rate",
    "--latency-us",
    "--queue",
    "--bucket",
    "--tcp-window",
    "--tcp-queue",
    "--message-us",
    "--datagram-us",
    "--byte-ps",
    "--datagram-byte-ps",
    "--leaf-hosts",
    "--trunk-rate",
    "--trunk-queue",
    "--slow-hosts",
    "--slow-factor",
    "--stall-host",
    "--stall-at-us",
    "--stall-us",
];

/// The options of [`NET_FLAGS`] that take a byte count.
const BYTE_FLAGS: [&str; 5] = [
    "--queue",
    "--bucket",
    "--tcp-window",
    "--tcp-queue",
    "--trunk-queue",
];

/// Applies network options to `net`; the loss in percent.
fn set_network(net: &mut Network, set: &[(String, String)]) -> Result<f64, String> {
    let mut loss_pct = 0.0;
    for (flag, value) in set {
        let v = if BYTE_FLAGS.contains(&flag.as_str()) {
            bytes(value)? as f64
        } else {
            value
                .parse::<f64>()
                .map_err(|_| format!("{flag}: not a number: {value}"))?
        };
        match flag.as_str() {
            "--loss" if (0.0..100.0).contains(&v) => {
                loss_pct = v;
                net.loss = v / 100.0;
            }
            "--burst" if v >= 1.0 => net.burst = v,
            "--rate" if v > 0.0 => net.rate_bps = (v * 1e6) as u64,
            "--mtu" if (1280.0..=65535.0).contains(&v) && v.fract() == 0.0 => {
                net.mtu = v as usize;
                net.segment = network::tcp_payload(net.mtu);
            }
            "--latency-us" if v >= 0.0 => net.latency_ns = (v * 1e3) as u64,
            "--queue" if v >= 0.0 => net.port_queue = v as usize,
            "--bucket" if v >= 0.0 => net.bucket = v as usize,
            "--tcp-window" if v >= 1.0 => {
                net.tcp_window = v as usize;
                net.tcp_window_time_ns = 0;
            }
            "--tcp-queue" if v >= 1.0 => net.tcp_queue = v as usize,
            "--message-us" if v >= 0.0 => net.per_message_ns = (v * 1e3) as u64,
            "--datagram-us" if v >= 0.0 => net.per_datagram_ns = (v * 1e3) as u64,
            "--byte-ps" if v >= 0.0 => {
                net.per_byte_ps = v as u64;
                net.per_datagram_byte_ps = v as u64;
            }
            "--datagram-byte-ps" if v >= 0.0 => net.per_datagram_byte_ps = v as u64,
            "--leaf-hosts" if v >= 0.0 && v.fract() == 0.0 => net.leaf_hosts = v as usize,
            "--trunk-rate" if v > 0.0 => net.trunk_rate_bps = (v * 1e6) as u64,
            "--trunk-queue" if v >= 0.0 => net.trunk_queue = v as usize,
            "--slow-hosts" if v >= 0.0 && v.fract() == 0.0 => {
                net.slow_hosts = v as usize;
                if net.slow_factor == 1.0 {
                    net.slow_factor = 2.0;
                }
            }
            "--slow-factor" if v >= 1.0 => net.slow_factor = v,
            "--stall-host" | "--stall-at-us" | "--stall-us" if v >= 0.0 => {
                let s = net.stall.get_or_insert((0, 0, 10_000_000));
                match flag.as_str() {
                    "--stall-host" => s.0 = v as usize,
                    "--stall-at-us" => s.1 = (v * 1e3) as u64,
                    _ => s.2 = (v * 1e3) as u64,
                }
            }
            _ => return Err(format!("{flag}: out of range: {value}")),
        }
    }
    Ok(loss_pct)
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The simulator's model of each peer of `scripts/compare` it has one of.
fn model_of(peer: &str) -> Option<Algorithm> {
    match peer {
        "ipmc-mcast" | "ipmc-multicast" => Some(Algorithm::Ipmc),
        "tuned-6" => Some(Algorithm::Binomial),
        "tuned-3-seg64k" => Some(Algorithm::Pipeline),
        "tuned-9" => Some(Algorithm::ScatterAllgather),
        _ => None,
    }
}

/// `validate RESULTS.csv [--preset P]`: every point of a `scripts/compare`
/// run the simulator has a model for, measured against simulated.
fn validate(argv: &[String]) -> Result<(), String> {
    let path = argv
        .first()
        .ok_or("validate: the results.csv of a scripts/compare run")?;
    let mut net = Network::emulated();
    let mut set = Vec::new();
    let mut fragment_bound = None;
    for pair in argv[1..].chunks(2) {
        match pair {
            [flag, p] if flag == "--preset" && p == "clic" => net = Network::clic(),
            [flag, p] if flag == "--preset" && p == "emulated" => {}
            [flag, b] if flag == "--fragment" => fragment_bound = Some(bytes(b)?),
            [flag, v] if NET_FLAGS.contains(&flag.as_str()) => set.push((flag.clone(), v.clone())),
            _ => return Err(format!("validate: unknown options {pair:?}")),
        }
    }
    set_network(&mut net, &set)?;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    // The columns by name (docs/testing.md, "results.csv").
    let header: Vec<&str> = text.lines().next().unwrap_or("").split(',').collect();
    let column = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| format!("{path}: no column {name} (not a scripts/compare results.csv)"))
    };
    let [kind, peer_at, ranks, bytes, max_us] =
        ["kind", "peer", "ranks", "bytes", "max_us"].map(column);
    let (kind, peer_at, ranks, bytes, max_us) = (kind?, peer_at?, ranks?, bytes?, max_us?);
    println!("| peer | p | bytes | measured µs | simulated µs | simulated / measured |");
    println!("|---|---|---|---|---|---|");
    let (mut within, mut all) = (0, 0);
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != header.len() || f[kind] != "summary" {
            continue;
        }
        let (peer, p, size, measured) = (f[peer_at], f[ranks], f[bytes], f[max_us]);
        let Some(model) = model_of(peer) else {
            continue;
        };
        let (Ok(p), Ok(size), Ok(measured)) = (p.parse(), size.parse(), measured.parse::<f64>())
        else {
            continue;
        };
        let mut s = Scenario::new(p, size, net.clone());
        s.algorithm = model;
        if let Some(bound) = fragment_bound {
            // As the component fits coll_ipmc_fragment_size to the MTU.
            s.ipmc.fragment_size =
                setup::fitting_fragment(bound, net.mtu as u32, false, s.ipmc.auth);
        }
        let simulated = us(s.run()?.completion_max_ns());
        let ratio = simulated / measured;
        all += 1;
        within += usize::from((ratio - 1.0).abs() <= 0.15);
        println!("| {peer} | {p} | {size} | {measured:.1} | {simulated:.1} | {ratio:.2} |");
    }
    println!("\n{within} of {all} points within 15 %");
    Ok(())
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("validate") {
        return match validate(&argv[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("simulate: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let args = match parse(&argv) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("simulate: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut s = args.scenario.clone();
    let mut peers = args.peers.clone();
    if let Some(only) = args.only {
        s.algorithm = only;
        peers.clear();
    }
    let s = &s;
    let started = Instant::now();
    let ipmc = match s.run() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("simulate: {}: {e}", s.algorithm.name());
            return ExitCode::FAILURE;
        }
    };
    let ipmc_us = us(ipmc.completion_max_ns());
    let mut sorted = ipmc.returned_ns.clone();
    sorted.sort_unstable();
    let c = &ipmc.counters;
    println!(
        "algorithm={} completion_max_us={ipmc_us:.1} median_us={:.1} min_us={:.1} quiet_us={:.1} \
         datagrams={} lost={} queue_drops={} rcvbuf_drops={} messages={} host_link_bytes={} \
         trunk_bytes={} events={} run_s={:.1}",
        s.algorithm.name(),
        us(sorted[sorted.len() / 2]),
        us(sorted[0]),
        us(ipmc.quiet_ns),
        c.datagrams_sent,
        c.lost,
        c.queue_drops,
        c.rcvbuf_drops,
        c.messages_sent,
        c.host_link_bytes,
        c.trunk_bytes,
        c.events,
        started.elapsed().as_secs_f64()
    );
    if let Some(table) = &ipmc.table {
        println!("decisions:{table}");
    }
    if args.per_rank {
        let ranks: Vec<String> = ipmc
            .returned_ns
            .iter()
            .map(|&t| format!("{:.0}", us(t)))
            .collect();
        println!("returned_us={}", ranks.join(","));
    }
    for &peer in &peers {
        let mut p = s.clone();
        p.algorithm = peer;
        let t = Instant::now();
        match p.run() {
            Ok(o) => {
                let peer_us = us(o.completion_max_ns());
                println!(
                    "algorithm={} completion_max_us={peer_us:.1} ratio_to_ipmc={:.2} messages={} \
                     host_link_bytes={} trunk_bytes={} events={} run_s={:.1}",
                    peer.name(),
                    peer_us / ipmc_us,
                    o.counters.messages_sent,
                    o.counters.host_link_bytes,
                    o.counters.trunk_bytes,
                    o.counters.events,
                    t.elapsed().as_secs_f64()
                );
            }
            Err(e) => eprintln!("simulate: {}: {e}", peer.name()),
        }
    }
    println!(
        "nodes={} ranks_per_node={} size={} loss={} completion_max_us={ipmc_us:.1} wire_us={:.1}",
        s.nodes,
        s.node.ranks,
        s.size,
        args.loss_pct,
        us(s.wire_ns())
    );
    ExitCode::SUCCESS
}
