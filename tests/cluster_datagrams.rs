//! How datagrams travel on the emulated cluster (`tests/cluster/cluster.sh`):
//! each fits the smallest MTU of the ranks' interfaces in one IP packet, on
//! IPv4 and IPv6, with jumbo frames and with one host of a smaller MTU (the
//! kernel counts no IP fragment anywhere); each way of passing them to
//! the kernel, forced, carries every byte; flow control keeps a receiver
//! that keeps stopping from losing datagrams to its receive buffer, and one
//! that enters late from making the others lose any; and a send that the
//! sending host refuses leaves segmentation offload on.

mod common;

use common::{print_stats, sum, world_stats, Cluster, Line, Run};

/// `bcast_check` with multicast forced, statistics on, `coll_ipmc_verbose
/// 1`, and `mca` (which may set those otherwise); afterwards each host's IP
/// fragments created, IPv4 and IPv6.
fn run(cluster: &Cluster, mca: &[(&str, &str)]) -> Run {
    let mut all = vec![
        ("coll_ipmc_print_statistics", "1"),
        ("coll_ipmc_bcast_algorithm", "3"),
        ("coll_ipmc_verbose", "1"),
    ];
    all.retain(|(k, _)| mca.iter().all(|(m, _)| m != k));
    all.extend_from_slice(mca);
    let job = common::job_line(&all, "bcast_check", &["--max-bytes", "300000"]);
    cluster.run_script(&format!(
        "timeout --kill-after=10 {} mpirun $CLUSTER_MPIRUN --host \"$CLUSTER_HOSTS\" -np {} {job} \
         && for h in $(echo \"$CLUSTER_HOSTS\" | tr , ' '); do \
              h=${{h%%:*}}; \
              echo \"frags $h $(ip netns exec $h awk '/^Ip: F/ {{for (i = 2; i <= NF; i++) if ($i == \"FragCreates\") c = i}} /^Ip: [0-9]/ {{print $c}}' /proc/net/snmp) \
                $(ip netns exec $h awk '/^Ip6FragCreates/ {{print $2}}' /proc/net/snmp6)\"; \
            done",
        common::JOB_TIMEOUT,
        cluster.ranks()
    ))
}

/// Every byte right, multicast carried data, no IP fragment on any host;
/// the fragment size and path rank 0 reported.
fn check(what: &str, cluster: &Cluster, run: &Run) -> (Vec<Line>, usize, String) {
    let world = world_stats(run, cluster.ranks());
    print_stats(&world);
    for s in &world {
        assert_eq!(s["setup"], "ok", "{what}: {s:?}\n{}", run.output);
    }
    assert!(
        sum(&world, "mcast_bytes") > 0,
        "{what}: no byte by multicast"
    );
    let frags: Vec<&str> = run
        .output
        .lines()
        .filter(|l| l.starts_with("frags "))
        .collect();
    assert_eq!(frags.len(), cluster.hosts, "{what}:\n{}", run.output);
    for line in frags {
        let counts: Vec<&str> = line.split_whitespace().skip(2).collect();
        assert_eq!(counts, ["0", "0"], "{what}: IP fragments created: {line}");
    }
    let told: Vec<&str> = run
        .output
        .lines()
        .filter(|l| l.contains("ipmc: multicast on "))
        .collect();
    assert_eq!(told.len(), 1, "{what}: told once:\n{}", run.output);
    let fragment = told[0]
        .split("fragments of ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{what}: {}", told[0]));
    (world, fragment, told[0].to_string())
}

/// What rank 0 tells of the tag: AES-128 with POLYVAL's where the CPU computes it in
/// hardware, at any datagram size.
fn tag_told() -> &'static str {
    if ipmc::protocol::datagram::polyval_is_fast() {
        "an AES-128-POLYVAL tag on each"
    } else {
        "a keyed BLAKE3 tag on each"
    }
}

#[test]
fn datagrams_fit_an_mtu_of_1500_on_ipv4_and_ipv6() {
    let cluster = Cluster::hosts(3);
    let v4 = run(&cluster, &[]);
    let (_, fragment, told) = check("IPv4", &cluster, &v4);
    // 1500 − 20 (IPv4) − 8 (UDP) − 36 (header) − 16 (tag)
    assert_eq!(fragment, 1420);
    assert!(told.contains(tag_told()), "{told}");
    // Rank 0 runs on this CPU: it tells how the tag's hash is computed.
    let width = ipmc::protocol::datagram::polyval_width()
        .filter(|_| ipmc::protocol::datagram::polyval_is_fast());
    assert_eq!(
        told.contains("(here POLYVAL 16 blocks per reduction"),
        width.is_some(),
        "{told}"
    );
    if let Some(bits) = width {
        assert!(
            told.contains(&format!("reduction, {bits} bits per multiplication)")),
            "{told}"
        );
    }
    let v6 = run(&cluster, &[("coll_ipmc_group_range", "ff12::/96")]);
    let (_, fragment, _) = check("IPv6", &cluster, &v6);
    assert_eq!(fragment, 1400, "40 bytes of IPv6 header");
    // The thesis's CRC-32 trailer leaves 12 bytes more.
    let crc = run(&cluster, &[("coll_ipmc_authenticate", "0")]);
    assert_eq!(check("CRC", &cluster, &crc).1, 1432);
}

#[test]
fn jumbo_frames_carry_larger_datagrams_and_the_smallest_mtu_bounds_all() {
    let jumbo = Cluster {
        mtu: Some(9000),
        ..Cluster::hosts(3)
    };
    let big = [("coll_ipmc_fragment_size", "8192")];
    let (_, fragment, told) = check("jumbo", &jumbo, &run(&jumbo, &big));
    assert_eq!(fragment, 8192, "the parameter bounds what the MTU allows");
    assert!(told.contains(tag_told()), "{told}");
    let (_, fragment, _) = check("jumbo, default", &jumbo, &run(&jumbo, &[]));
    assert_eq!(fragment, 4096);
    // One host of 1,500 bytes: every datagram fits it, or it would lose them.
    let mixed = Cluster {
        mtu_host: vec![(2, 1500)],
        ..jumbo
    };
    let (world, fragment, _) = check("mixed", &mixed, &run(&mixed, &big));
    assert_eq!(fragment, 1420);
    let useful: Vec<&str> = world.iter().map(|s| s["chain_bytes"].as_str()).collect();
    assert!(
        world
            .iter()
            .all(|s| s["mcast_bytes"] != "0" || s["rank"] == "0"),
        "every non-root got bytes by multicast: {useful:?}"
    );
}

#[test]
fn each_way_of_passing_datagrams_carries_every_byte() {
    let cluster = Cluster::hosts(3);
    for (value, path) in [
        ("1", "UDP segmentation and receive offload"),
        ("2", "one datagram per system call"),
        ("3", "sendmmsg and recvmmsg"),
        ("0", "UDP segmentation and receive offload"),
    ] {
        let ran = run(&cluster, &[("coll_ipmc_datagram_io", value)]);
        let (world, _, told) = check(value, &cluster, &ran);
        assert!(
            told.ends_with(path),
            "coll_ipmc_datagram_io {value}: {told}"
        );
        assert_eq!(sum(&world, "send_failed"), 0);
    }
}

/// One sent packet in five dropped on the way out (nftables): the send
/// fails with EPERM, which says nothing of what the path can segment, and
/// loses only what that send carried: one datagram, or a segmented batch
/// (one packet until the kernel cuts it). A `sendmmsg` whose first datagram
/// failed once counted its whole batch of up to 64 as lost (70 % of the
/// datagrams offered), leaving them to the chain.
#[test]
fn a_send_the_host_refuses_loses_what_it_carried_and_keeps_the_offload() {
    let cluster = Cluster {
        send_loss: 20,
        ..Cluster::hosts(3)
    };
    for (io, path) in [
        ("1", "UDP segmentation and receive offload"),
        ("3", "sendmmsg and recvmmsg"),
        ("2", "one datagram per system call"),
    ] {
        let ran = run(
            &cluster,
            &[("coll_ipmc_datagram_io", io), ("coll_ipmc_verbose", "5")],
        );
        let (world, _, told) = check(io, &cluster, &ran);
        assert!(told.ends_with(path), "{told}");
        let (sent, failed) = (sum(&world, "sent"), sum(&world, "send_failed"));
        println!("coll_ipmc_datagram_io {io}: sent {sent}, send_failed {failed}");
        assert!(failed > 0, "{io}: no send failed");
        assert!(
            failed * 100 <= (sent + failed) * 45,
            "{io}: {failed} of {} datagrams counted lost",
            sent + failed
        );
        assert!(
            !ran.output.contains("offload failed"),
            "offload given up:\n{}",
            ran.output
        );
    }
}

/// 4 MiB broadcasts with changing roots at 10 Gbit/s with multicast forced
/// and 1 MiB receive buffers on `cluster`, with `flow_window`; with
/// `stopping`, the ranks on the last host are stopped for 20 ms every 50 ms
/// (their sockets keep receiving). The datagrams the kernel of each host
/// dropped for a full receive buffer, world's statistics, and the roots'
/// flow control stalls on every communicator.
fn receive_buffer_drops(
    cluster: &Cluster,
    flow_window: &str,
    stopping: bool,
) -> (Vec<u64>, Vec<Line>, u64) {
    let mca = [
        ("coll_ipmc_print_statistics", "1"),
        ("coll_ipmc_bcast_algorithm", "3"),
        // A small buffer that a stopped rank fills in a few milliseconds.
        ("coll_ipmc_rcvbuf", "1048576"),
        ("coll_ipmc_flow_window", flow_window),
        // One level where hosts hold several ranks: each rank multicasts.
        ("coll_ipmc_ranks_are_nodes", "1"),
    ];
    let args = [
        "--max-bytes",
        "1024",
        "--burst",
        "24",
        "--burst-bytes",
        "4194304",
        "--intercomm",
        "0",
    ];
    let job = common::job_line(&mca, "bcast_check", &args);
    let stopper = if stopping {
        format!(
            "python3 {} $last bcast_check 20 50 &",
            common::repo().join("tests/cluster/stopper.py").display()
        )
    } else {
        "sleep 1 &".to_string()
    };
    let (run, errors) = counting_drops(cluster, &job, &stopper);
    let world = world_stats(&run, cluster.ranks());
    // Every communicator's: any of their sockets may overflow.
    let all = common::stats_lines(&run.output);
    print_stats(&all);
    let stalls = sum(&all, "flow_stalls");
    if let Some(line) = run.output.lines().find(|l| l.starts_with("stopper:")) {
        eprintln!("{line}");
    }
    (errors, world, stalls)
}

/// Runs `job` (an mpirun job line) on `cluster` beside `beside` (a shell
/// command that ends in `&`; `$last` names the last host); afterwards the
/// datagrams the kernel of each host dropped for a full receive buffer.
fn counting_drops(cluster: &Cluster, job: &str, beside: &str) -> (Run, Vec<u64>) {
    let run = cluster.run_script(&format!(
        "hosts=$(echo \"$CLUSTER_HOSTS\" | tr , ' ' | sed 's/:[0-9]*//g'); \
         last=${{hosts##* }}; \
         {beside} beside=$!; \
         timeout --kill-after=10 {} mpirun $CLUSTER_MPIRUN --host \"$CLUSTER_HOSTS\" -np {} {job}; \
         rc=$?; kill $beside 2>/dev/null; wait $beside 2>/dev/null; \
         for h in $hosts; do \
           echo \"rcvbuf_errors $h $(ip netns exec $h awk '/^Udp: [A-Z]/ {{for (i = 2; i <= NF; i++) if ($i == \"RcvbufErrors\") c = i}} /^Udp: [0-9]/ {{print $c}}' /proc/net/snmp)\"; \
         done; exit $rc",
        common::JOB_TIMEOUT,
        cluster.ranks(),
    ));
    let errors: Vec<u64> = run
        .output
        .lines()
        .filter_map(|l| l.strip_prefix("rcvbuf_errors "))
        .map(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap()
        })
        .collect();
    assert_eq!(errors.len(), cluster.hosts, "{}", run.output);
    (run, errors)
}

fn ten_gigabit(hosts: usize) -> Cluster {
    Cluster {
        rate: Some("10gbit"),
        burst: Some("256kb"),
        ..Cluster::hosts(hosts)
    }
}

/// A run in which some root heard nothing for flow control's stall limit
/// (a stop that came on top of a rank's own lateness, or that a busy
/// machine stretched) may overrun a buffer by design
/// (`docs/flow-control.md`), and the statistics say so: a run that lost
/// datagrams to a buffer after a stall is tried again; one that lost any
/// without a stall fails. Returns the world's statistics of the clean run.
fn no_drops_but_after_a_stall(cluster: &Cluster, stopping: bool) -> Vec<Line> {
    const TRIES: usize = 4;
    let mut stalled = Vec::new();
    loop {
        let (paced, world, stalls) = receive_buffer_drops(cluster, "0", stopping);
        eprintln!("flow control: receive buffer errors per host {paced:?}, roots' stalls {stalls}");
        if paced.iter().all(|&n| n == 0) {
            return world;
        }
        assert!(
            stalls > 0,
            "flow control let a receive buffer overflow without a stall: {paced:?}"
        );
        stalled.push(paced);
        assert!(
            stalled.len() < TRIES,
            "every run overflowed a buffer after a root's stall: the machine is too busy \
             for this test (receive buffer errors per run {stalled:?})"
        );
    }
}

#[test]
fn a_receiver_that_keeps_stopping_loses_nothing_to_its_buffer() {
    let cluster = ten_gigabit(3);
    let world = no_drops_but_after_a_stall(&cluster, true);
    assert!(sum(&world, "mcast_bytes") > 0);
    // Without flow control the same run overflows the stopped rank's buffer:
    // the test sees what it checks.
    let (unpaced, _, _) = receive_buffer_drops(&cluster, "1099511627776", true);
    eprintln!("no flow control: receive buffer errors per host {unpaced:?}");
    assert!(unpaced.iter().sum::<u64>() > 0, "{unpaced:?}");
}

/// Rank 1 enters every 16 MiB broadcast 300 ms late, with multicast forced,
/// links unlimited (the hosts are the limit) and 1 MiB receive buffers: the
/// root, without its reports, goes on at the pace of the others, so the late
/// host alone loses datagrams to its buffer and the others take nothing from
/// the chain. (The root once sent the rest unpaced after its second stall,
/// which overran every receiver here.) A run in which a host on time lost
/// datagrams is tried again, since a receiver descheduled for the stall
/// limit is left out as well.
#[test]
fn a_late_receiver_alone_loses_datagrams() {
    const TRIES: usize = 3;
    let cluster = Cluster::hosts(3);
    let mca = [
        ("coll_ipmc_print_statistics", "1"),
        ("coll_ipmc_bcast_algorithm", "3"),
        ("coll_ipmc_rcvbuf", "1048576"),
    ];
    let args = [
        "--sizes",
        "16777216",
        "--rounds",
        "2",
        "--warmup",
        "0",
        "--late-rank",
        "1",
        "--late-us",
        "300000",
    ];
    let job = common::job_line(&mca, "bcast_bench", &args);
    let mut overran = Vec::new();
    loop {
        let (run, errors) = counting_drops(&cluster, &job, "sleep 1 &");
        assert!(run.ok, "{}", run.output);
        let stats = common::stats_lines(&run.output);
        print_stats(&stats);
        eprintln!("receive buffer errors per host {errors:?}");
        let rank = |r: &str| {
            *common::of_rank(&stats, "MPI_COMM_WORLD", r)
                .first()
                .unwrap_or_else(|| panic!("no statistics of rank {r}:\n{}", run.output))
        };
        // The root's own count, from its MPI_T variables (`bcast_bench`).
        let stalls = run
            .output
            .split_whitespace()
            .find_map(|w| w.strip_prefix("coll_ipmc_flow_stalls="));
        assert!(
            stalls.is_some_and(|n| n != "0"),
            "no stall:\n{}",
            run.output
        );
        assert!(errors[1] > 0, "the late host lost nothing: {errors:?}");
        assert!(common::num(rank("1"), "chain_bytes") > 0);
        if errors[0] == 0 && errors[2] == 0 {
            assert_eq!(common::num(rank("2"), "chain_bytes"), 0);
            return;
        }
        overran.push(errors);
        assert!(
            overran.len() < TRIES,
            "hosts on time lost datagrams in every run: {overran:?}"
        );
    }
}

/// With two ranks on each host, each counted a node of its own (one level),
/// a root's own datagrams come back to its socket (loop-back): read as they
/// come, they never fill it.
#[test]
fn a_roots_own_datagrams_never_fill_its_buffer() {
    let cluster = Cluster {
        slots: 2,
        ..ten_gigabit(2)
    };
    // A stall here is a rank descheduled for 50 ms: 4 ranks share 2 cores.
    let world = no_drops_but_after_a_stall(&cluster, false);
    assert!(sum(&world, "own") > 0, "no own datagram came back");
}
