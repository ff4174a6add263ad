//! ipmc's `MPI_Allgather` and `MPI_Allgatherv` on the emulated cluster
//! (`tests/mpi/allgather_check.c`: every block on every rank, bytes, ints, a
//! strided derived datatype, in place, sizes from 0 to 64 KiB; allgatherv's
//! blocks of a different size on every rank, an empty one, in reverse order
//! with gaps): multicast forced, with 0, 50 and 100 % of the datagrams lost;
//! the automatic choice alike on every rank; over
//! two levels where hosts hold several ranks.

mod common;

use common::{num, of_comm, tally, Cluster, Line, Run};

/// Runs `allgather_check` with `mca` and ipmc's statistics, asserts that it
/// passed, and returns the run and `MPI_COMM_WORLD`'s statistics in rank
/// order.
fn checked(cluster: &Cluster, mca: &[(&str, &str)], args: &[&str]) -> (Run, Vec<Line>) {
    let (run, stats) = common::passing(cluster, mca, "allgather_check", args);
    let world = common::into_comm(stats, "MPI_COMM_WORLD");
    assert_eq!(world.len(), cluster.ranks(), "{}", run.output);
    (run, world)
}

/// Every rank served the same calls by each candidate of the measured
/// choice, and each candidate served some.
fn assert_measured_alike(world: &[Line]) {
    for s in world {
        for key in [
            "allgather_multicast",
            "allgather_ring",
            "allgather_previous",
        ] {
            assert_eq!(s[key], world[0][key], "{key}: {world:?}");
            assert!(tally(s, key).0 > 0, "measured: {s:?}");
        }
    }
}

/// The calls that move bytes: Open MPI returns from an allgather of no
/// bytes before any component sees it.
const CALLS: u64 = 48;

#[test]
fn the_multicast_allgather_delivers_every_block_whatever_is_lost() {
    let cluster = Cluster::hosts(4);
    for loss in ["0", "50", "100"] {
        let (_, world) = checked(
            &cluster,
            &[
                ("coll_ipmc_allgather_algorithm", "2"),
                ("coll_ipmc_inject_loss", loss),
            ],
            &[],
        );
        for s in &world {
            assert_eq!(tally(s, "allgather_multicast").0, CALLS, "{loss} %: {s:?}");
            assert_eq!(num(s, "allgathers"), CALLS, "{loss} %: {s:?}");
            // Every rank multicast its blocks.
            assert!(num(s, "sent") >= CALLS, "{loss} %: {s:?}");
            match loss {
                "0" => assert!(num(s, "useful") > 0 && num(s, "injected") == 0, "{s:?}"),
                "100" => assert_eq!(num(s, "useful"), 0, "{s:?}"),
                _ => assert!(num(s, "useful") > 0 && num(s, "injected") > 0, "{s:?}"),
            }
            // The blocks are no broadcasts of the program's.
            assert_eq!(num(s, "bcasts"), 0, "{s:?}");
            assert_eq!(num(s, "mcast_bytes") + num(s, "chain_bytes"), 0, "{s:?}");
        }
    }
}

/// The automatic choice measures the allgathers of each block size against
/// Open MPI's (its own choice and its ring), and every rank serves the same
/// calls alike.
#[test]
fn the_automatic_choice_measures_allgathers_alike_on_every_rank() {
    let cluster = Cluster::hosts(4);
    // Enough calls of each block size for its measurements and vote.
    let (run, world) = checked(&cluster, &[("coll_ipmc_verbose", "1")], &["--repeat", "40"]);
    assert_measured_alike(&world);
    assert!(
        run.output.contains("  allgather of "),
        "no allgather row in the decision table:\n{}",
        run.output
    );
}

/// `MPI_Allgatherv`: blocks of a different size on every rank, each in its
/// place and nothing between them touched, by multicast with every datagram
/// delivered or lost, and measured alike on every rank.
#[test]
fn the_multicast_allgatherv_delivers_blocks_of_every_size_in_their_places() {
    let cluster = Cluster::hosts(4);
    for loss in ["0", "100"] {
        let (_, world) = checked(
            &cluster,
            &[
                ("coll_ipmc_allgather_algorithm", "2"),
                ("coll_ipmc_inject_loss", loss),
            ],
            &["--v", "1"],
        );
        for s in &world {
            let (calls, bytes) = tally(s, "allgather_multicast");
            assert!(calls >= 20 && bytes > 0, "{loss} %: {s:?}");
            assert_eq!(num(s, "allgathers"), calls, "{loss} %: {s:?}");
            assert_eq!(s["allgather_multicast"], world[0]["allgather_multicast"]);
            match loss {
                "0" => assert!(num(s, "useful") > 0, "{s:?}"),
                _ => assert_eq!(num(s, "useful"), 0, "{s:?}"),
            }
        }
        // Rank 1's blocks are empty: it never multicasts one.
        assert_eq!(num(&world[1], "sent"), 0, "{:?}", world[1]);
        assert!(num(&world[0], "sent") > 0, "{:?}", world[0]);
    }
    let (_, world) = checked(&cluster, &[], &["--v", "1", "--repeat", "40"]);
    assert_measured_alike(&world);
}

/// Uneven hosts of several ranks (3, 1 and 2): every allgather and
/// allgatherv runs over two levels, every block right on every rank (the
/// strided send type too, which Open MPI 5.0.7's `han` gets wrong there;
/// ranks placed host by host, where contiguous blocks are gathered in the
/// receive buffer itself, and round-robin, where they are not), and only
/// the leaders' communicator, one rank per host, moves datagrams: its
/// allgather, multicast when forced, repairs what is lost.
#[test]
fn hosts_of_several_ranks_gather_over_two_levels() {
    let cluster = Cluster {
        slots_host: vec![(1, 3), (2, 1), (3, 2)],
        ..Cluster::hosts(3)
    };
    let round_robin = &["--map-by", "node"][..];
    for (args, loss, placing) in [
        (&[][..], "0", &[][..]),
        (&["--v", "1"], "0", &[]),
        (&[], "100", &[]),
        (&[], "0", round_robin),
        (&["--v", "1"], "100", round_robin),
    ] {
        if common::openmpi5() && !placing.is_empty() {
            // PRRTE 5.0.7's `--map-by node` fails MPI_Init here ("local
            // rank ... Not found").
            continue;
        }
        let what = format!("{args:?} {placing:?} at {loss} % loss");
        let mca = [
            ("coll_ipmc_allgather_algorithm", "2"),
            ("coll_ipmc_inject_loss", loss),
            ("coll_ipmc_print_statistics", "1"),
        ];
        let run = cluster.mpirun_wrapped(&mca, placing, "allgather_check", args);
        assert!(
            run.ok && run.output.contains("allgather_check: PASS"),
            "{what}: {}",
            run.output
        );
        let stats = common::stats_with_collectives(&run.output);
        let world = of_comm(&stats, "MPI_COMM_WORLD");
        assert_eq!(world.len(), 6, "{}", run.output);
        let calls = num(world[0], "allgathers");
        assert!(calls >= 20, "{what}: {:?}", world[0]);
        for s in &world {
            assert_eq!(tally(s, "allgather_two_level").0, calls, "{what}: {s:?}");
            assert_eq!(num(s, "allgathers"), calls, "{what}: {s:?}");
            // The communicator itself joins no group.
            assert_eq!(num(s, "sent") + num(s, "recv"), 0, "{what}: {s:?}");
        }
        // One leader per host, each of whose allgathers was the multicast one.
        let leaders = of_comm(&stats, "ipmc leaders of MPI_COMM_WORLD");
        assert_eq!(leaders.len(), 3, "{what}:\n{}", run.output);
        for s in &leaders {
            assert_eq!(num(s, "size"), 3, "{what}: {s:?}");
            assert_eq!(tally(s, "allgather_multicast").0, calls, "{what}: {s:?}");
            // (An allgatherv's rank 1 has only empty blocks: placed
            // round-robin, it is a host's only rank, whose leader multicasts
            // nothing.)
            assert!(num(s, "sent") > 0 || !args.is_empty(), "{what}: {s:?}");
            match loss {
                "0" => assert!(num(s, "useful") > 0, "{what}: {s:?}"),
                _ => assert_eq!(num(s, "useful"), 0, "{what}: {s:?}"),
            }
        }
        assert!(
            leaders.iter().all(|s| num(s, "recv") > 0),
            "{what}: {leaders:?}"
        );
        // Datagrams reach no other communicator (the node-local ones are
        // Open MPI's).
        for s in &stats {
            if !s["comm"].starts_with("ipmc leaders of ") {
                assert_eq!(num(s, "sent") + num(s, "recv"), 0, "{what}: {s:?}");
            }
        }
    }
}

/// Over two levels, the automatic choice measures the levels against Open
/// MPI's allgather and its ring on the whole communicator, alike on every
/// rank, once the leaders' own choice is made.
#[test]
fn the_automatic_choice_measures_two_levels_of_allgathers_alike() {
    let cluster = Cluster {
        slots: 2,
        ..Cluster::hosts(3)
    };
    let (run, stats) = common::passing(
        &cluster,
        &[("coll_ipmc_verbose", "1"), ("coll_ipmc_tune_calls", "1")],
        "allgather_check",
        &["--max-bytes", "8", "--repeat", "100", "--strided", "0"],
    );
    let world = of_comm(&stats, "MPI_COMM_WORLD");
    assert_eq!(world.len(), 6, "{}", run.output);
    for s in &world {
        for key in [
            "allgather_two_level",
            "allgather_ring",
            "allgather_previous",
        ] {
            assert_eq!(s[key], world[0][key], "{key}: {world:?}");
            assert!(tally(s, key).0 > 0, "measured: {s:?}");
        }
    }
    // The communicator's own decision table, not only its leaders'.
    let table = run
        .output
        .split("as measured and agreed:")
        .zip(run.output.split("as measured and agreed:").skip(1))
        .find(|(before, _)| {
            before.ends_with("communicator MPI_COMM_WORLD (3 nodes, at most 2 ranks on one) ")
        })
        .map(|(_, rows)| {
            rows.lines()
                .take_while(|l| l.starts_with("  ") || l.is_empty())
                .collect::<Vec<_>>()
        });
    let table = table.unwrap_or_else(|| panic!("no decision table of world:\n{}", run.output));
    assert!(
        table
            .iter()
            .any(|row| row.starts_with("  allgather of ") && row.contains("two_level ")),
        "{table:?}"
    );
}

/// A rank that leads no host killed in the middle of a job's allgathers
/// over two levels (SIGKILL, `tests/mpi/killed.sh`): the job ends, with an
/// error, instead of the others waiting for it forever.
#[test]
fn a_killed_rank_ends_a_job_of_two_level_allgathers() {
    let cluster = Cluster {
        slots: 2,
        ..Cluster::hosts(2)
    };
    cluster.assert_killed_rank_ends_job(
        &[("coll_ipmc_allgather_algorithm", "2")],
        3,
        "allgather_check",
        &["--repeat", "1000000", "--max-bytes", "4096"],
    );
}
