//! The two-stage multicast broadcast under `mpirun`, several ranks on one
//! host, in a private network namespace whose loopback multicasts: every
//! byte on every rank, that datagrams were sent and used, what injected loss
//! does, and that a rank that cannot multicast makes all ranks fall back.

mod common;

use common::{
    cluster_mpirun, mpirun, mpirun_as_on_a_host, mpirun_to_files, mpirun_wrapped, num, of_comm,
    print_stats, stats_lines, sum, tally, world_stats, Line, LATE_FREES,
};

fn run_with_loss(np: usize, percent: u32, args: &[&str]) -> Vec<Line> {
    let loss = percent.to_string();
    let mca = [
        ("coll_ipmc_print_statistics", "1"),
        ("coll_ipmc_inject_loss", loss.as_str()),
        ("coll_ipmc_inject_seed", "7"),
    ];
    let run = mpirun(np, &mca, "bcast_check", args);
    let world = world_stats(&run, np);
    for s in &world {
        assert_eq!(s["setup"], "ok", "{s:?}");
        assert!(tally(s, "multicast").0 > 0, "multicast never ran: {s:?}");
        for reason in ["rej_comm", "rej_length", "rej_magic", "rej_crc", "root_own"] {
            assert_eq!(num(s, reason), 0, "{reason} on a clean network: {s:?}");
        }
    }
    print_stats(&world);
    world
}

#[test]
fn without_loss_most_bytes_arrive_by_multicast() {
    let world = run_with_loss(8, 0, &["--max-bytes", "1048576"]);
    let (mcast, chain) = (sum(&world, "mcast_bytes"), sum(&world, "chain_bytes"));
    assert!(mcast > 4 * chain, "multicast {mcast} B, chain {chain} B");
    assert_eq!(sum(&world, "injected"), 0);
    assert!(sum(&world, "useful") > 0);
    // With loop-back on, every rank sees its own datagrams and drops them.
    assert!(sum(&world, "own") > 0);
}

/// The README's way to try ipmc on one host: `coll_ipmc_ranks_are_nodes 1`
/// alone multicasts over the loopback (which has no MULTICAST flag on a
/// usual host), and the datagrams carry the bytes.
#[test]
fn ranks_are_nodes_alone_multicasts_over_the_loopback() {
    let np = 4;
    let mca = [
        ("coll_ipmc_ranks_are_nodes", "1"),
        ("coll_ipmc_print_statistics", "1"),
    ];
    let run = mpirun_as_on_a_host(np, &mca, "bcast_check", &["--max-bytes", "300000"]);
    let world = world_stats(&run, np);
    for s in &world {
        assert_eq!(s["setup"], "ok", "{s:?}\n{}", run.output);
        assert!(num(s, "useful") > 0 || num(s, "sent") > 0, "{s:?}");
    }
    assert!(sum(&world, "mcast_bytes") > 0, "{}", run.output);
}

#[test]
fn with_half_the_datagrams_lost_both_stages_deliver() {
    let world = run_with_loss(6, 50, &["--max-bytes", "1048576"]);
    let others = sum(&world, "recv") - sum(&world, "own");
    let injected = sum(&world, "injected");
    assert!(
        injected * 100 > others * 40 && injected * 100 < others * 60,
        "injected {injected} of {others}"
    );
    assert!(sum(&world, "mcast_bytes") > 0);
    assert!(sum(&world, "chain_bytes") > 0);
    assert!(sum(&world, "useful") > 0);
}

#[test]
fn with_every_datagram_lost_the_chain_delivers_everything() {
    let world = run_with_loss(4, 100, &["--max-bytes", "1048576"]);
    assert_eq!(sum(&world, "mcast_bytes"), 0);
    assert_eq!(sum(&world, "useful"), 0);
    assert!(sum(&world, "sent") > 0, "datagrams were still sent");
    assert_eq!(
        sum(&world, "injected"),
        sum(&world, "recv") - sum(&world, "own")
    );
}

#[test]
fn small_communicators_multicast_when_forced() {
    for np in ["2", "3"] {
        let np: usize = np.parse().unwrap();
        let mca = [
            ("coll_ipmc_print_statistics", "1"),
            ("coll_ipmc_bcast_algorithm", "3"),
        ];
        let run = mpirun(np, &mca, "bcast_check", &["--max-bytes", "70000"]);
        let world = world_stats(&run, np);
        assert!(sum(&world, "mcast_bytes") > 0, "{}", run.output);
    }
}

/// Every protection (`authenticate` 1: tag, 2: encrypted, 0: the thesis's
/// CRC on or off) with small and large fragments.
#[test]
fn any_fragment_size_under_every_protection() {
    for (fragment, auth, crc) in [
        ("256", "1", "1"),
        ("65024", "1", "1"),
        ("1000", "2", "1"),
        ("65024", "2", "1"),
        ("256", "0", "1"),
        ("1000", "0", "0"),
        ("65024", "0", "1"),
    ] {
        let mca = [
            ("coll_ipmc_print_statistics", "1"),
            ("coll_ipmc_fragment_size", fragment),
            ("coll_ipmc_authenticate", auth),
            ("coll_ipmc_use_crc_checking", crc),
        ];
        let run = mpirun(4, &mca, "bcast_check", &["--max-bytes", "300000"]);
        let world = world_stats(&run, 4);
        assert!(sum(&world, "mcast_bytes") > 0, "{}", run.output);
        for key in ["rej_auth", "rej_crc"] {
            assert_eq!(sum(&world, key), 0, "{key}: {}", run.output);
        }
    }
}

#[test]
fn a_rank_that_cannot_multicast_makes_all_fall_back() {
    let mca = [("coll_ipmc_print_statistics", "1")];
    let wrapper = [
        "sh",
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mpi/on_rank.sh"),
        "2",
        "OMPI_MCA_coll_ipmc_if_include=nosuch0",
    ];
    let run = mpirun_wrapped(4, &mca, &wrapper, "bcast_check", &["--max-bytes", "70000"]);
    assert!(
        run.ok && run.output.contains("bcast_check: PASS"),
        "{}",
        run.output
    );
    let stats = stats_lines(&run.output);
    let four: Vec<&Line> = stats.iter().filter(|s| s["size"] == "4").collect();
    assert!(!four.is_empty(), "{}", run.output);
    for s in four {
        assert_eq!(s["setup"], "failed", "{s:?}");
        assert_eq!(tally(s, "multicast").0, 0, "{s:?}");
        assert!(tally(s, "previous").0 > 0, "{s:?}");
        assert_eq!(num(s, "sent") + num(s, "recv"), 0, "{s:?}");
    }
    let told = setup_failures_told(&run);
    assert_eq!(told, 1, "told once, by rank 0:\n{}", run.output);
    assert!(
        run.output.contains("for communicator world;")
            && run.output.contains("rank 2 on host ")
            && run.output.contains("nosuch0"),
        "{}",
        run.output
    );
}

/// Every rank fails to set up multicast (the usual case of a host without a
/// multicast interface): one message for the job, naming all of them.
#[test]
fn when_every_rank_cannot_multicast_the_job_is_told_once() {
    let mca = [
        ("coll_ipmc_print_statistics", "1"),
        ("coll_ipmc_if_include", "nosuch0"),
    ];
    let run = mpirun(4, &mca, "bcast_check", &["--max-bytes", "70000"]);
    assert!(
        run.ok && run.output.contains("bcast_check: PASS"),
        "{}",
        run.output
    );
    let told = setup_failures_told(&run);
    assert_eq!(told, 1, "told once for the job:\n{}", run.output);
    assert_eq!(run.output.matches("nosuch0").count(), 1, "{}", run.output);
    assert!(
        run.output.contains("ranks 0, 1, 2, 3 on host "),
        "{}",
        run.output
    );
    for s in stats_lines(&run.output) {
        assert_eq!(tally(&s, "multicast").0, 0, "{s:?}");
    }
}

#[test]
fn ipv6_groups_across_emulated_hosts() {
    let mca = [
        ("coll_ipmc_print_statistics", "1"),
        ("coll_ipmc_group_range", "ff18::/96"),
        ("coll_ipmc_bcast_algorithm", "3"),
        ("coll_ipmc_verbose", "5"),
    ];
    let run = cluster_mpirun(3, &mca, "bcast_check", &["--max-bytes", "70000"]);
    let world = world_stats(&run, 3);
    assert!(
        run.output.contains("with group [ff18::"),
        "no IPv6 group:\n{}",
        run.output
    );
    assert!(sum(&world, "useful") > 0, "{}", run.output);
    assert!(sum(&world, "mcast_bytes") > 0, "{}", run.output);
    // One rank per host: loop-back is off, so no rank sees its own datagrams.
    assert_eq!(sum(&world, "own"), 0, "{}", run.output);
}

#[test]
fn the_benchmark_measures_every_rank() {
    let run = mpirun(
        4,
        &[],
        "bcast_bench",
        &["--sizes", "16,65536", "--rounds", "3"],
    );
    assert!(run.ok, "{}", run.output);
    let rows: Vec<Vec<&str>> = run
        .output
        .lines()
        .filter(|l| l.starts_with("rank,") || l.starts_with("summary,"))
        .map(|l| l.split(',').collect())
        .collect();
    let ranks: Vec<_> = rows.iter().filter(|r| r[0] == "rank").collect();
    let summaries: Vec<_> = rows.iter().filter(|r| r[0] == "summary").collect();
    assert_eq!((ranks.len(), summaries.len()), (6, 2), "{}", run.output);
    // A tiny message's time is within the noise of the subtracted ping-pong;
    // 64 KiB takes clearly longer than nothing.
    for r in ranks.iter().filter(|r| r[2] == "65536") {
        let us: f64 = r[4].parse().unwrap();
        assert!(us > 0.0, "completion time {us} µs: {}", run.output);
    }
    for s in summaries {
        let (max, min): (f64, f64) = (s[5].parse().unwrap(), s[6].parse().unwrap());
        assert!(max >= min, "{}", run.output);
    }
    // Rank 0 reads ipmc's counters through MPI_T (bench/ipmc_counters.h):
    // one line, and on 4 ranks every 64 KiB broadcast multicast.
    let counters: Vec<&str> = run
        .output
        .lines()
        .filter(|l| l.starts_with("ipmc_counters:"))
        .collect();
    assert_eq!(counters.len(), 1, "{}", run.output);
    let counter = |name: &str| -> u64 {
        let key = format!(" {name}=");
        let at = counters[0]
            .find(&key)
            .unwrap_or_else(|| panic!("no {name}: {}", counters[0]));
        let rest = &counters[0][at + key.len()..];
        rest[..rest.find(' ').unwrap_or(rest.len())]
            .parse()
            .unwrap()
    };
    assert!(counter("coll_ipmc_multicast_bcasts") > 0, "{}", counters[0]);
    assert!(counter("coll_ipmc_bcasts") >= counter("coll_ipmc_multicast_bcasts"));
}

/// The root broadcasts and then sends to rank 1, which waits for that message
/// before it enters the broadcast: Open MPI's own broadcast completes this for
/// eager sizes, and ipmc's multicast at every size it serves. The root
/// also overwrites its buffer at once, and communicators are freed while
/// their last broadcast may still be finishing in the background.
#[test]
fn the_root_returns_without_waiting_for_the_others() {
    let mca = [
        ("coll_ipmc_print_statistics", "1"),
        ("coll_ipmc_bcast_algorithm", "3"),
    ];
    early_return(&mca, "1048576", |s| {
        assert!(common::tally(s, "multicast").0 > 0, "{s:?}");
    });
}

/// The same at the sizes Open MPI's own broadcast sends eagerly, with
/// ipmc's automatic choice: measuring its candidates (Open MPI's broadcast
/// among them) and agreeing on them never makes a rank wait for one that
/// has not entered the broadcast.
#[test]
fn the_automatic_choice_waits_for_no_rank_where_open_mpi_does_not() {
    let mca = [("coll_ipmc_print_statistics", "1")];
    early_return(&mca, "1024", |s| {
        assert!(common::tally(s, "previous").0 > 0, "{s:?}");
    });
}

/// A root several broadcasts ahead of rank 1 (`--ahead`), which waits for
/// a token before it enters the first, and then rank 2 as many ahead: Open
/// MPI's own broadcast completes it for the messages it sends eagerly.
#[test]
fn open_mpi_completes_ranks_broadcasts_ahead() {
    ahead(&[("coll", "^ipmc")], "12", |_| {});
}

/// The same with ipmc's multicast: a root's next broadcasts multicast at
/// once and return, and so do another rank's that got their messages by
/// multicast, their chains following the earlier ones' in the background
/// (up to 256 KiB of them, many more than 12 of the sizes Open MPI sends
/// eagerly).
#[test]
fn multicast_completes_ranks_broadcasts_ahead() {
    ahead(&[("coll_ipmc_bcast_algorithm", "3")], "12", |s| {
        assert!(common::tally(s, "multicast").0 >= 2 * 26, "{s:?}");
    });
}

/// The same with the automatic choice, whose first calls of a size class
/// measure Open MPI's broadcast, its binomial and binary trees and
/// multicast, and whose ranks then vote on them in the background while the
/// class multicasts: no rank waits through all of it (12 calls ahead, the
/// root's and then rank 2's: 25 calls of a class, within its 4 × 8 measured
/// calls and its 16 voting calls; a call by Open MPI's broadcast goes
/// alongside the chains of the multicast calls before it, whose messages
/// have a tag of their own).
#[test]
fn the_automatic_choice_completes_ranks_broadcasts_ahead() {
    ahead(&[], "12", |s| {
        assert!(common::tally(s, "previous").0 > 0, "{s:?}");
        assert!(common::tally(s, "multicast").0 > 0, "{s:?}");
    });
}

/// A rank whose predecessor on the ring enters late returns once it owns
/// the message and has served its successor: it does not wait for that
/// predecessor's `END` (`late_predecessor`: rank 1 of 4 enters only once
/// rank 2 returned, or after 10 s). Above `coll_ipmc_background_limit`,
/// where the message lies in the user's buffer (4 MiB), and below it with
/// the limit at 0 (64 KiB). A run where rank 2 lacked a datagram, which only
/// its predecessor can repair, proves nothing and runs again (up to 3).
#[test]
fn a_rank_returns_without_waiting_for_a_late_predecessor() {
    returns_before_a_late_predecessor("0");
}

/// The same with `MPI_Ibcast`: a request whose message lies in the user's
/// buffer completes once the rank will touch it no more.
#[test]
fn an_ibcast_completes_without_waiting_for_a_late_predecessor() {
    returns_before_a_late_predecessor("1");
}

fn returns_before_a_late_predecessor(ibcast: &str) {
    const TRIES: usize = 3;
    for (bytes, limit) in [("4194304", "1048576"), ("65536", "0")] {
        let mca = [
            ("coll_ipmc_print_statistics", "1"),
            ("coll_ipmc_bcast_algorithm", "3"),
            ("coll_ipmc_background_limit", limit),
        ];
        let args = ["--bytes", bytes, "--wait-s", "10", "--ibcast", ibcast];
        for tried in 1.. {
            let run = mpirun(4, &mca, "late_predecessor", &args);
            assert!(
                run.ok && run.output.contains("late_predecessor: PASS"),
                "{}",
                run.output
            );
            let stats = common::stats_lines(&run.output);
            let rank2 = *common::of_rank(&stats, "MPI_COMM_WORLD", "2")
                .first()
                .unwrap_or_else(|| panic!("no statistics of rank 2:\n{}", run.output));
            assert!(common::tally(rank2, "multicast").0 > 0, "{rank2:?}");
            if common::num(rank2, "chain_bytes") == 0 {
                assert!(
                    !run.output.contains("without the token"),
                    "rank 2 waited for rank 1 ({bytes} bytes):\n{}",
                    run.output
                );
                break;
            }
            assert!(
                tried < TRIES,
                "rank 2 lacked datagrams in every run:\n{}",
                run.output
            );
        }
    }
}

/// `early_return --ahead K` on 4 ranks, 4 B and 1 KiB: every byte right,
/// and `each` holds for every rank's statistics of `MPI_COMM_WORLD` (if
/// ipmc ran).
fn ahead(mca: &[(&str, &str)], k: &str, each: impl Fn(&Line)) {
    let mut mca = mca.to_vec();
    mca.push(("coll_ipmc_print_statistics", "1"));
    let run = mpirun(
        4,
        &mca,
        "early_return",
        &["--max-bytes", "1024", "--ahead", k],
    );
    assert!(
        run.ok && run.output.contains("early_return: PASS"),
        "{}",
        run.output
    );
    let stats = common::stats_lines(&run.output);
    let world = of_comm(&stats, "world");
    if mca.iter().any(|&(k, v)| k == "coll" && v == "^ipmc") {
        assert!(world.is_empty(), "{}", run.output);
    } else {
        assert_eq!(world.len(), 4, "{}", run.output);
    }
    world.into_iter().for_each(each);
}

fn early_return(mca: &[(&str, &str)], max_bytes: &str, each: impl Fn(&Line)) {
    let run = mpirun(4, mca, "early_return", &["--max-bytes", max_bytes]);
    assert!(
        run.ok && run.output.contains("early_return: PASS"),
        "run failed:\n{}",
        run.output
    );
    let stats = common::stats_lines(&run.output);
    for comm in ["world", "freed"] {
        let lines = of_comm(&stats, comm);
        assert!(lines.len() >= 4, "{comm}:\n{}", run.output);
        for s in lines {
            each(s);
            assert_eq!(s["setup"], "ok", "{s:?}");
        }
    }
}

/// A port that another program holds: setup draws again (every rank
/// follows rank 0), so every communicator still multicasts. One of the four
/// ports is held for the whole job, so about one setup in four meets it.
/// The communicators live at once, so that each draws a group of its own
/// (a freed one's would be taken over).
#[test]
fn a_taken_port_is_drawn_again() {
    // Holds 0.0.0.0:7000 (without SO_REUSEADDR, so no group can bind that
    // port) while its parent, rank 0, lives.
    let holder = "import os, socket, time\n\
                  s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
                  s.bind(('0.0.0.0', 7000))\n\
                  parent = os.getppid()\n\
                  while os.getppid() == parent:\n    time.sleep(0.2)\n";
    // 400 statistics lines and the setup logs come at once at the end.
    let before = format!(
        "if [ \"$OMPI_COMM_WORLD_RANK\" = 0 ]; then python3 -c \"{holder}\" </dev/null >/dev/null 2>&1 & \
         sleep 1; fi"
    );
    let mca = [
        ("coll_ipmc_print_statistics", "1"),
        ("coll_ipmc_bcast_algorithm", "3"),
        ("coll_ipmc_port_range", "7000-7003"),
        ("coll_ipmc_verbose", "5"),
    ];
    let (run, ranks) = mpirun_to_files(4, &mca, &before, "many_comms", &["100", "4000"]);
    let output = ranks.concat();
    assert!(
        run.ok && output.contains("many_comms: PASS"),
        "{}\n{output}",
        run.output
    );
    let again = output.matches("drawing again").count();
    println!("\"drawing again\" lines (every rank logs each): {again}");
    assert!(again > 0, "no port was drawn again:\n{output}");
    let dups: Vec<Line> = stats_lines(&output)
        .into_iter()
        .filter(|s| s["comm"] != "MPI_COMM_WORLD")
        .collect();
    assert_eq!(
        dups.len(),
        400,
        "one line per rank and communicator:\n{output}"
    );
    for s in dups {
        assert_eq!(s["setup"], "ok", "{s:?}");
        assert!(tally(&s, "multicast").0 > 0, "{s:?}");
    }
}

/// Ranks whose kept groups drifted apart (`tests/mpi/kept_apart.c`): the
/// first 3 of 6 ranks make 6 communicators of their own, which push their
/// group of `MPI_COMM_WORLD`'s duplicates out of the 4 groups each process
/// keeps (`coll_ipmc_keep_freed`), while the other 3 keep theirs and offer
/// it. A group the ranks refused goes back to its place among the kept
/// ones and ages out, so the duplicates after that take a group over again
/// after at most 4 refusals (put back as new, a refused group was offered
/// again and again: 9 to 18 of an epoch's 18 refused in each of 5 runs).
#[test]
fn ranks_whose_kept_groups_drifted_apart_take_over_again() {
    const ROUNDS: usize = 6;
    const EPOCHS: usize = 3;
    let mca = [
        ("coll_ipmc_print_statistics", "1"),
        ("coll_ipmc_bcast_algorithm", "3"),
    ];
    let args = [ROUNDS.to_string(), EPOCHS.to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (run, ranks) = mpirun_to_files(6, &mca, "", "kept_apart", &args);
    assert!(
        run.ok && ranks[0].contains("kept_apart: PASS"),
        "{}\n{}",
        run.output,
        ranks.concat()
    );
    for (rank, output) in ranks.iter().enumerate() {
        // This rank's duplicates of MPI_COMM_WORLD in the order they were
        // freed: 1 where it took a group over.
        let taken: String = stats_lines(output)
            .iter()
            .filter(|s| s["size"] == "6" && s["comm"] != "MPI_COMM_WORLD")
            .map(|s| if s["taken_over"] == "1" { '1' } else { '0' })
            .collect();
        println!("rank {rank}: {taken}");
        assert_eq!(taken.len(), ROUNDS * (1 + 3 * EPOCHS), "rank {rank}");
        let (first, epochs) = taken.split_at(ROUNDS);
        let refused = |t: &[u8]| t.iter().filter(|&&t| t == b'0').count();
        assert!(
            refused(first.as_bytes()) <= 1 + LATE_FREES,
            "rank {rank}: {taken}"
        );
        for epoch in epochs.as_bytes().chunks(3 * ROUNDS) {
            assert!(
                refused(epoch) <= 4 + LATE_FREES,
                "rank {rank}: {} refused in an epoch: {taken}",
                refused(epoch)
            );
        }
    }
}

/// A multicast broadcast beyond `coll_ipmc_background_limit` (1 MiB)
/// finishes before it returns, so its message lies in the user's buffer:
/// the process holds it once, not twice. 3 ranks, 8 MiB from two roots,
/// every byte checked.
#[test]
fn a_large_broadcast_takes_no_second_buffer_of_its_size() {
    assert_no_second_buffer(8, &[], &[]);
}

/// As [`a_large_broadcast_takes_no_second_buffer_of_its_size`], with
/// `MPI_Ibcast`: its request completes when its broadcast is over.
#[test]
fn a_large_nonblocking_broadcast_takes_no_second_buffer_of_its_size() {
    assert_no_second_buffer(8, &["ibcast"], &[]);
}

/// A message beyond 2 GiB (2,200 elements of 1 MiB: 2,306,867,200 bytes,
/// past every 32-bit signed offset), multicast with 2 % of the datagrams
/// lost on arrival, so that the chain repairs fragments all over it: every
/// byte right on every rank, still in the user's buffer. 3 ranks hold 6.4 GiB.
#[test]
fn a_broadcast_beyond_2_gib_is_repaired_in_place() {
    let world = assert_no_second_buffer(BEYOND_2_GIB, &[], LOST_2_PERCENT);
    assert_repaired(&world);
}

/// As [`a_broadcast_beyond_2_gib_is_repaired_in_place`], by `MPI_Ibcast`.
#[test]
fn a_nonblocking_broadcast_beyond_2_gib_is_repaired_in_place() {
    let world = assert_no_second_buffer(BEYOND_2_GIB, &["ibcast"], LOST_2_PERCENT);
    assert_repaired(&world);
}

/// MiB of the broadcasts beyond 2 GiB.
const BEYOND_2_GIB: usize = 2200;

const LOST_2_PERCENT: &[(&str, &str)] = &[
    ("coll_ipmc_inject_loss", "2"),
    ("coll_ipmc_inject_seed", "11"),
];

/// Every rank but a root repaired part of the message through the chain:
/// both broadcasts' roots were rank 0 and 1, so every rank received one.
fn assert_repaired(world: &[Line]) {
    for s in world {
        assert!(num(s, "chain_bytes") > 0, "nothing repaired: {s:?}");
    }
}

/// Runs `large_bcast` of `mib` MiB on 3 ranks, multicast forced, with
/// `mca` besides; asserts every byte on every rank, that every broadcast
/// multicast, and that no rank's peak memory grew by a copy of the
/// message. Returns the ranks' statistics of `MPI_COMM_WORLD`.
fn assert_no_second_buffer(mib: usize, how: &[&str], mca: &[(&str, &str)]) -> Vec<Line> {
    let mut mca = mca.to_vec();
    mca.extend([
        ("coll_ipmc_print_statistics", "1"),
        ("coll_ipmc_bcast_algorithm", "3"),
    ]);
    let count = mib.to_string();
    let args: Vec<&str> = [count.as_str()].iter().chain(how).copied().collect();
    let run = mpirun(3, &mca, "large_bcast", &args);
    let world = common::large_bcast_passed(&run, "MPI_COMM_WORLD", 3);
    let calls = if how.is_empty() { "bcasts" } else { "ibcasts" };
    for s in &world {
        assert_eq!(
            tally(s, "multicast").0,
            3,
            "every broadcast multicast: {s:?}"
        );
        assert!(num(s, calls) >= 2, "{calls}: {s:?}");
    }
    // ipmc's own buffers are bounded whatever the message's size (chain
    // frames in flight, up to 4 MiB of a later broadcast's datagrams kept
    // for it, batches of received datagrams): beyond 2 GiB with loss 2 to
    // 12 MiB were seen, where a copy would take 2.1 GiB.
    let bound_kib = if mib >= 1024 { 32 << 10 } else { 4 << 10 };
    common::assert_no_copy_grew(&run, 3, bound_kib);
    world
}

/// A rank without a free file descriptor (`ulimit -n` just above what
/// `MPI_Init` needs: 4.1.4's fails with 15; with 18, Open MPI 5.0.7 leaves
/// room for the receive sockets of `bcast_check`'s communicators and the one
/// send socket they share) cannot open its sockets: the job is told once,
/// with the reason, in the built-in text (the help file could not be opened
/// there).
#[test]
fn a_rank_without_file_descriptors_is_named_with_its_reason() {
    let script = "if [ \"$OMPI_COMM_WORLD_RANK\" = 2 ]; then ulimit -n 16; fi; exec \"$@\"";
    let wrapper = ["sh", "-c", script, "limit"];
    let mca = [("coll_ipmc_print_statistics", "1")];
    let run = mpirun_wrapped(4, &mca, &wrapper, "bcast_check", &["--max-bytes", "70000"]);
    assert!(
        run.ok && run.output.contains("bcast_check: PASS"),
        "{}",
        run.output
    );
    let told = setup_failures_told(&run);
    assert_eq!(told, 1, "told once:\n{}", run.output);
    assert!(run.output.contains("Too many open files"), "{}", run.output);
}

/// A program that keeps 150 communicators and then opens 250 files of its
/// own, under `ulimit -n` 512 (a cluster's default is 1,024): ipmc's sockets
/// take no more than a quarter of the limit, one receive socket per group and
/// one send socket they share: the groups of 127 communicators; the rest
/// leave their broadcasts to Open MPI, the program opens every file it needs
/// (with no share, ipmc took them all), and the job is told once why.
#[test]
fn many_communicators_leave_the_program_its_files() {
    // Only rank 0's statistics, whose lines no other rank's can split.
    let script =
        "ulimit -n 512; [ \"$OMPI_COMM_WORLD_RANK\" = 0 ] || exec 2>/dev/null; exec \"$@\"";
    let wrapper = ["sh", "-c", script, "limit"];
    let mca = [
        ("coll_ipmc_print_statistics", "1"),
        ("coll_ipmc_bcast_algorithm", "multicast"),
    ];
    let run = mpirun_wrapped(4, &mca, &wrapper, "many_comms", &["150", "4000", "250"]);
    assert!(
        run.ok && run.output.contains("many_comms: PASS"),
        "{}",
        run.output
    );
    assert_eq!(setup_failures_told(&run), 1, "{}", run.output);
    assert!(
        run.output
            .contains("ipmc holds 128 of the 512 files this process may open (ulimit -n)"),
        "{}",
        run.output
    );
    let dups: Vec<Line> = stats_lines(&run.output)
        .into_iter()
        .filter(|s| s.get("rank").map(String::as_str) == Some("0"))
        .filter(|s| s.get("comm").is_some_and(|c| c.contains(" DUP FROM 0")))
        .collect();
    let multicast = |setup: &str| {
        dups.iter()
            .filter(|s| s.get("setup").map(String::as_str) == Some(setup))
            .filter(|s| s.get("multicast").is_some_and(|m| m.starts_with("2:")))
            .count()
    };
    let served = multicast("ok");
    let declined = dups
        .iter()
        .filter(|s| s.get("setup").map(String::as_str) == Some("failed"))
        .count();
    println!("rank 0: {served} communicators multicast, {declined} without a group");
    // More than 64: one send socket serves every group (two sockets each
    // would have let 64 multicast).
    assert!((100..=127).contains(&served), "{served}:\n{}", run.output);
    assert!(declined >= 20, "{declined}:\n{}", run.output);
    assert_eq!(multicast("failed"), 0, "{}", run.output);
}

/// How many times the job was told that multicast could not be set up.
fn setup_failures_told(run: &common::Run) -> usize {
    run.output
        .matches("could not set up IP multicast for communicator")
        .count()
}

/// `ibcast_check` on 4 ranks with `crossover_nodes` (the thesis's rule) for
/// `rounds` rounds: several `MPI_Ibcast`s outstanding at once on two
/// communicators, 1 B … 4 MiB, a strided datatype, an `MPI_Bcast` while one
/// is outstanding, a communicator freed before its request is waited for,
/// and two described from `MPI_BOTTOM`; every byte checked on every rank.
/// The statistics of the world and dup communicators (every rank) and of the
/// freed ones, and the output.
fn ibcast_check(crossover_nodes: &str, rounds: u64) -> (Vec<Line>, Vec<Line>, String) {
    let mca = [
        ("coll_ipmc_print_statistics", "1"),
        ("coll_ipmc_crossover_nodes", crossover_nodes),
    ];
    let args = ["--max-bytes", "4194304", "--rounds", &rounds.to_string()];
    let run = mpirun(4, &mca, "ibcast_check", &args);
    assert!(
        run.ok && run.output.contains("ibcast_check: PASS"),
        "run failed:\n{}",
        run.output
    );
    let stats = stats_lines(&run.output);
    let of = |pick: &dyn Fn(&str) -> bool| -> Vec<Line> {
        stats.iter().filter(|s| pick(&s["comm"])).cloned().collect()
    };
    let main = of(&|c| c == "world" || c == "dup");
    let freed = of(&|c| c == "freed");
    assert_eq!(
        (main.len(), freed.len() as u64),
        (8, 4 * rounds),
        "{}",
        run.output
    );
    // Each round: 16 outstanding (8 sizes, two layouts) in pairs on world
    // and dup, one more on world before a blocking broadcast, and two from
    // MPI_BOTTOM on dup.
    let ibcasts: u64 = main.iter().map(|s| num(s, "ibcasts")).sum();
    assert_eq!(ibcasts, 4 * rounds * 19, "{}", run.output);
    for s in &freed {
        assert_eq!(num(s, "ibcasts"), 1, "{s:?}");
    }
    (main, freed, run.output)
}

/// `ibcast_check` on 6 ranks with every `MPI_Ibcast` handed to the replaced
/// component (libnbc): the algorithm forced to `previous`, or the fixed
/// rule's crossover above every size. Each round frees a communicator
/// whose `MPI_Ibcast` is still pending, which libnbc alone does not survive
/// on 6 ranks or more (it does not keep the communicator, and its next send
/// ends the process: Open MPI 4.1.4 and 5.0.7 alike). ipmc holds the
/// communicator until libnbc's request completes: every byte right, every
/// nonblocking call the replaced component's.
#[test]
fn broadcasts_handed_to_libnbc_outlive_their_freed_communicator() {
    let rounds = 2;
    for handed in [
        ("coll_ipmc_bcast_algorithm", "previous"),
        ("coll_ipmc_fixed_crossover_size", "8388608"),
    ] {
        let mca = [("coll_ipmc_print_statistics", "1"), handed];
        let run = mpirun(6, &mca, "ibcast_check", &["--rounds", &rounds.to_string()]);
        assert!(
            run.ok && run.output.contains("ibcast_check: PASS"),
            "{handed:?}:\n{}",
            run.output
        );
        let stats = stats_lines(&run.output);
        let freed = of_comm(&stats, "freed");
        assert_eq!(
            freed.len() as u64,
            6 * rounds,
            "{handed:?}:\n{}",
            run.output
        );
        // Nothing but nonblocking broadcasts on those and on dup.
        let dup = of_comm(&stats, "dup");
        assert_eq!(dup.len(), 6, "{handed:?}:\n{}", run.output);
        for s in freed.iter().chain(&dup) {
            assert!(num(s, "ibcasts") > 0, "{handed:?}: {s:?}");
            assert_eq!(
                tally(s, "previous").0,
                num(s, "ibcasts"),
                "{handed:?}: {s:?}"
            );
        }
    }
}

/// Calls of an algorithm over statistics lines.
fn calls_by(lines: &[Line], alg: &str) -> u64 {
    lines.iter().map(|s| tally(s, alg).0).sum()
}

/// `MPI_Ibcast` over multicast (the thesis's rule on 4 nodes: multicast up
/// to 1 MiB, ipmc's chain above), none handed to the replaced component.
#[test]
fn nonblocking_broadcasts_multicast() {
    let (main, freed, output) = ibcast_check("4", 3);
    for s in &main {
        assert_eq!(s["setup"], "ok", "{s:?}");
        assert!(tally(s, "multicast").0 > 0, "{s:?}");
        assert!(
            num(s, "mcast_bytes") > 0,
            "no byte came by multicast: {s:?}"
        );
    }
    assert_eq!(
        calls_by(&main, "chain"),
        4 * 3 * 2,
        "the 4 MiB ones: {output}"
    );
    assert_eq!(calls_by(&main, "previous"), 0, "{output}");
    assert_eq!(calls_by(&freed, "multicast"), 4 * 3, "{output}");
    let useful: u64 = freed.iter().map(|s| num(s, "useful")).sum();
    assert!(
        useful > 0,
        "the freed communicators' ibcasts did not multicast"
    );
}

/// `MPI_Ibcast` goes by ipmc's linear and chain algorithms where those are
/// the choice (the thesis's rule on a communicator of fewer nodes than
/// `crossover_nodes`: linear up to `crossover_size`, the chain above), in
/// the communicator's background work: every byte right on every rank,
/// every nonblocking call counted by ipmc and none handed to the replaced
/// component (libnbc), no datagram.
#[test]
fn nonblocking_broadcasts_by_linear_and_chain() {
    let (main, freed, output) = ibcast_check("8", 2);
    assert_eq!(
        calls_by(&main, "chain"),
        4 * 2 * 2,
        "the 4 MiB ones: {output}"
    );
    assert!(calls_by(&main, "linear") >= 4 * 2 * 15, "{output}");
    assert_eq!(
        calls_by(&main, "previous") + calls_by(&main, "multicast"),
        0,
        "{output}"
    );
    for s in &main {
        assert_eq!(num(s, "mcast_bytes"), 0, "{s:?}");
    }
    assert_eq!(calls_by(&freed, "linear"), 4 * 2, "{output}");
}

/// `MPI_Ibcast` under the automatic choice: the blocking broadcasts of
/// `ibcast_check` (one of 64 KiB per round) measure their class, and the
/// nonblocking ones of that class, neither measured nor counted, take its
/// decision: while the vote runs, the interim algorithm, then, once the
/// class's next blocking call would wait for the vote, the decision after
/// it. Every rank must take the same algorithm for every call, or their
/// messages would mismatch (wrong bytes or a hang).
#[test]
fn nonblocking_broadcasts_take_the_measured_choice() {
    let mca = [
        ("coll_ipmc_print_statistics", "1"),
        ("coll_ipmc_inject_timing", "1"),
        ("coll_ipmc_verbose", "1"),
    ];
    let args = ["--max-bytes", "65536", "--rounds", "40"];
    let run = mpirun(4, &mca, "ibcast_check", &args);
    assert!(
        run.ok && run.output.contains("ibcast_check: PASS"),
        "run failed:\n{}",
        run.output
    );
    let rows = common::world_decisions(&run.output);
    assert!(
        rows.iter()
            .any(|r| r.contains("32769-65536 bytes: multicast (measured")),
        "the 64 KiB class was not decided: {rows:?}\n{}",
        run.output
    );
    let stats = stats_lines(&run.output);
    for comm in ["world", "dup"] {
        let lines = of_comm(&stats, comm);
        assert_eq!(lines.len(), 4, "{}", run.output);
        for alg in common::ALGORITHMS {
            let first = tally(lines[0], alg);
            for s in &lines {
                assert_eq!(tally(s, alg), first, "{alg} on {comm}: {lines:?}");
            }
        }
        assert!(lines.iter().all(|s| num(s, "ibcasts") > 0), "{lines:?}");
        assert!(tally(lines[0], "multicast").0 > 0, "{lines:?}");
    }
}

/// A program whose broadcasts are all nonblocking: no call measures, so
/// every size class takes the fixed rule where `coll_ipmc_fixed_crossover_size`
/// places it. 4 KiB multicasts under the default crossover (2 KiB) and goes
/// to the replaced component's `MPI_Ibcast` (libnbc) with the crossover at
/// 4 KiB; a byte more multicasts again. Every rank takes the same way.
#[test]
fn nonblocking_only_classes_take_the_fixed_crossover() {
    let cases = [
        (None, "4096", "multicast"),
        (Some("4096"), "4096", "previous"),
        (Some("4096"), "4097", "multicast"),
    ];
    for (crossover, bytes, alg) in cases {
        let mut mca = vec![("coll_ipmc_print_statistics", "1")];
        if let Some(c) = crossover {
            mca.push(("coll_ipmc_fixed_crossover_size", c));
        }
        let run = mpirun(4, &mca, "short_bcast", &[bytes, bytes, "ibcast"]);
        let case = format!("crossover {crossover:?}, {bytes} bytes");
        assert!(run.ok, "{case}:\n{}", run.output);
        assert_eq!(
            run.output.matches(" rc=0").count(),
            4,
            "{case}:\n{}",
            run.output
        );
        let stats = stats_lines(&run.output);
        let world = of_comm(&stats, "MPI_COMM_WORLD");
        assert_eq!(world.len(), 4, "{case}:\n{}", run.output);
        for s in &world {
            assert_eq!(num(s, "ibcasts"), 1, "{case}: {s:?}");
            assert_eq!(tally(s, alg).0, 1, "{case}: not by {alg}: {s:?}");
            let datagrams = num(s, "sent") + num(s, "useful");
            assert_eq!(datagrams > 0, alg == "multicast", "{case}: datagrams {s:?}");
        }
    }
}

/// `persistent_check` on 4 ranks for `rounds` rounds under
/// `coll_ipmc_bcast_algorithm` `algorithm`: persistent broadcasts made once
/// and started every round (one among an `MPI_Bcast` and an `MPI_Ibcast`, a
/// strided one whose datatype was freed and one whose communicator was
/// freed begun together by `MPI_Startall`, an empty one); every byte checked
/// on every rank. The statistics of world and dup, every rank's.
fn persistent_check(algorithm: &str, rounds: u64) -> (Vec<Line>, Vec<Line>, String) {
    let mca = [
        ("coll_ipmc_print_statistics", "1"),
        ("coll_ipmc_bcast_algorithm", algorithm),
    ];
    persistent_run(&mca, &["--rounds", &rounds.to_string()], rounds)
}

/// Runs `persistent_check args` (of `rounds` rounds) on 4 ranks with `mca`
/// as [`persistent_check`] does.
fn persistent_run(
    mca: &[(&str, &str)],
    args: &[&str],
    rounds: u64,
) -> (Vec<Line>, Vec<Line>, String) {
    let run = mpirun(4, mca, "persistent_check", args);
    assert!(
        run.ok && run.output.contains("persistent_check: PASS"),
        "run failed:\n{}",
        run.output
    );
    let stats = stats_lines(&run.output);
    let of = |comm: &str| -> Vec<Line> { of_comm(&stats, comm).into_iter().cloned().collect() };
    let (world, dup) = (of("world"), of("dup"));
    assert_eq!((world.len(), dup.len()), (4, 4), "{}", run.output);
    // Every start is ipmc's nonblocking broadcast: on world, two persistent
    // ones and an MPI_Ibcast per round (the empty one is counted apart), on
    // dup one persistent one.
    for (lines, ibcasts, empty) in [(&world, 3, 1), (&dup, 1, 0)] {
        for s in lines {
            assert_eq!(num(s, "ibcasts"), ibcasts * rounds, "{s:?}");
            assert_eq!(num(s, "empty"), empty * rounds, "{s:?}");
        }
    }
    (world, dup, run.output)
}

/// Persistent broadcasts (`MPI_Bcast_init`; `MPIX_Bcast_init` in Open MPI
/// 4.1) go by multicast where `MPI_Ibcast` does: each `MPI_Start` is ipmc's
/// nonblocking broadcast, in its place among the communicator's other
/// collectives, whose request completes the persistent one.
#[test]
fn persistent_broadcasts_multicast() {
    let rounds = 3;
    let (world, dup, output) = persistent_check("3", rounds);
    for (lines, calls) in [(&world, 4 * rounds), (&dup, rounds)] {
        for s in lines {
            assert_eq!(tally(s, "multicast").0, calls, "{s:?}");
            assert_eq!(tally(s, "previous").0, 0, "{s:?}");
        }
    }
    // No rank roots all of world's broadcasts: every rank receives some,
    // by multicast.
    for s in &world {
        assert!(num(s, "mcast_bytes") > 0, "{s:?}\n{output}");
    }
}

/// Where ipmc hands a nonblocking broadcast to the replaced component, a
/// persistent one's starts go there too, and its request completes when
/// that component's does.
#[test]
fn persistent_broadcasts_fall_back_with_the_nonblocking_ones() {
    let rounds = 3;
    let (world, dup, _) = persistent_check("4", rounds);
    for (lines, calls) in [(&world, 4 * rounds), (&dup, rounds)] {
        for s in lines {
            assert_eq!(tally(s, "previous").0, calls, "{s:?}");
            assert_eq!(num(s, "sent") + num(s, "recv"), 0, "{s:?}");
        }
    }
}

/// The same program in the form Open MPI's own persistent broadcasts serve
/// (`--keep 1`: its datatype and communicator outlive the requests) passes
/// with ipmc at its defaults, every start ipmc's; and with Open MPI alone,
/// which makes it the reference.
#[test]
fn persistent_broadcasts_serve_what_open_mpi_serves() {
    let rounds = 3;
    let args = ["--rounds", "3", "--keep", "1"];
    persistent_run(&[("coll_ipmc_print_statistics", "1")], &args, rounds);
    let alone = mpirun(4, &[("coll", "^ipmc")], "persistent_check", &args);
    assert!(
        alone.ok && alone.output.contains("persistent_check: PASS"),
        "{}",
        alone.output
    );
}

/// The automatic choice: every rank times its own calls, and the ranks
/// agree in the background. Here every rank is fed made-up times
/// (`coll_ipmc_inject_timing`) by which each rank alone would choose another
/// algorithm; only the vote (each candidate's slowest rank) makes them choose
/// alike, which makes multicast the choice of every size class. Ranks that
/// chose apart would mismatch their messages and the run would fail.
#[test]
fn ranks_fed_different_timings_agree_on_every_decision() {
    let np = 5;
    let mca = [
        ("coll_ipmc_print_statistics", "1"),
        ("coll_ipmc_inject_timing", "1"),
        ("coll_ipmc_verbose", "1"),
    ];
    // A burst of 64 KiB broadcasts, so that a class timed at its root
    // (whose vote waits for the answers) decides too.
    let args = [
        "--max-bytes",
        "1048576",
        "--burst",
        "30",
        "--burst-bytes",
        "65536",
    ];
    let run = mpirun(np, &mca, "bcast_check", &args);
    let world = world_stats(&run, np);
    common::assert_ranks_decide_alike(&stats_lines(&run.output), &common::check_lines(&run.output));
    // 2 calls of each candidate in each size class measured, 8 up to 8 KiB
    // (14 classes; 22 up to 2 MiB: bcast_check's largest messages exceed
    // 1 MiB a little), multicast after.
    let most = 14 * 8 + 8 * 2;
    for s in &world {
        let (previous, multicast) = (tally(s, "previous").0, tally(s, "multicast").0);
        assert!(previous <= most, "{s:?}");
        assert!(tally(s, "binomial").0 <= most, "{s:?}");
        assert!(tally(s, "binary").0 <= most, "{s:?}");
        assert!(multicast > 0, "{s:?}");
    }
    // Rank 0 prints each communicator's table once, at verbose 1.
    let tables: Vec<&str> = run
        .output
        .lines()
        .filter(|l| l.contains("ipmc: the collectives of communicator world "))
        .collect();
    assert_eq!(tables.len(), 1, "{}", run.output);
    let rows = common::world_decisions(&run.output);
    let multicast = rows
        .iter()
        .filter(|row| row.contains(" bytes: multicast (measured:"))
        .count();
    // Above 8 KiB the classes timed at their root vote 8 calls after their
    // last measured one, and above 64 KiB three candidates take 6 measured
    // calls: bcast_check makes fewer in some of those classes. The burst's
    // and at least 2 others decide.
    assert!(multicast >= 3, "{}", run.output);
    assert!(
        rows.iter()
            .any(|row| row.contains("32769-65536 bytes: multicast (measured:")),
        "{}",
        run.output
    );
    // Every class follows the times the vote agreed on, also where a rank
    // read its socket late (5 processes on 2 cores) and the chain overtook
    // its datagrams: the loss rule looks at the best-served rank.
    for row in &rows {
        assert!(row.contains(" bytes: multicast (measured:"), "{row}");
    }
    // The simulator's ranks run the same choice (`ipmc::engine`) on the same
    // made-up times: the same decisions on the same times, votes through
    // the simulated network. (Its loss is its own network's.)
    let np_arg = np.to_string();
    // Classes of three candidates (with Open MPI's split binary tree), of
    // four (the chain above 64 KiB too) and of three (the tree no more).
    let classes = [
        ("32769-65536 bytes", "64K"),
        ("65537-131072 bytes", "128K"),
        ("524289-1048576 bytes", "1M"),
    ];
    for (class, size) in classes {
        let measured = |row: &str| {
            row.split("; multicast loss")
                .next()
                .unwrap()
                .trim()
                .to_string()
        };
        let real = rows
            .iter()
            .find(|r| r.trim_start().starts_with(class))
            .unwrap_or_else(|| panic!("no row of {class}: {}", run.output));
        let simulated = common::simulate(&[
            "--nodes",
            &np_arg,
            "--size",
            size,
            "--calls",
            "30",
            "--only",
            "ipmc-auto",
            "--inject-timing",
        ]);
        let sim_row = simulated
            .lines()
            .find(|l| l.trim_start().starts_with(class))
            .unwrap_or_else(|| panic!("no simulated row of {class}: {simulated}"));
        assert_eq!(measured(sim_row), measured(real), "{simulated}");
    }
}
