//! ipmc's `MPI_Barrier` on the emulated cluster (`tests/mpi/barrier_check.c`):
//! no rank leaves a barrier before every rank entered it, the release's
//! datagram is sent and used, lost datagrams are made up point-to-point,
//! the automatic choice measures the barrier and every rank takes the same
//! decision, two levels where hosts hold several ranks, and a killed rank
//! ends the job.

mod common;

use common::{num, Cluster, Line, Run};

/// Barriers per communicator of each job.
const ROUNDS: &str = "150";

/// Runs `barrier_check` with `mca` and ipmc's statistics; asserts that it
/// passed (no rank left any barrier early, every broadcast byte right).
fn checked(cluster: &Cluster, mca: &[(&str, &str)], args: &[&str]) -> (Run, Vec<Line>) {
    common::passing(cluster, mca, "barrier_check", args)
}

/// The statistics of communicator `comm`, one line per rank, in rank order.
fn of(stats: &[Line], comm: &str) -> Vec<Line> {
    common::of_comm(stats, comm).into_iter().cloned().collect()
}

/// Every rank of `comm` ran at least `rounds` multicast barriers; every
/// rank but 0 was released by each of them, by datagram or point-to-point;
/// rank 0 multicast a release per barrier.
fn assert_multicast_barriers(lines: &[Line], ranks: usize, rounds: u64) {
    assert_eq!(lines.len(), ranks, "{lines:?}");
    for s in lines {
        let barriers = num(s, "barrier_multicast");
        assert!(barriers >= rounds, "{s:?}");
        assert_eq!(
            num(s, "barriers"),
            barriers,
            "only multicast barriers: {s:?}"
        );
        let released = num(s, "released_mcast") + num(s, "released_p2p");
        if s["rank"] == "0" {
            assert_eq!(released, 0, "{s:?}");
            assert!(num(s, "sent") >= barriers, "a datagram per release: {s:?}");
        } else {
            assert_eq!(released, barriers, "{s:?}");
        }
    }
}

#[test]
fn the_multicast_barrier_releases_no_rank_early() {
    let cluster = Cluster::hosts(4);
    // The last rank enters one barrier 2 s late: nobody may leave before.
    let (run, stats) = checked(
        &cluster,
        &[("coll_ipmc_barrier_algorithm", "2")],
        &["--rounds", ROUNDS, "--very-late", "2"],
    );
    println!("{}", run.output);
    for comm in ["MPI_COMM_WORLD", "dup"] {
        let lines = of(&stats, comm);
        assert_multicast_barriers(&lines, 4, 150);
        for s in lines.iter().filter(|s| s["rank"] != "0") {
            // A clean network: the datagram releases (a late one may be
            // overtaken by the point-to-point release on a busy core).
            assert!(
                num(s, "released_mcast") * 10 >= num(s, "barrier_multicast") * 8,
                "{s:?}"
            );
            assert_eq!(num(s, "rej_auth") + num(s, "rej_comm"), 0, "{s:?}");
        }
    }
}

#[test]
fn lost_release_datagrams_are_made_up_point_to_point() {
    let cluster = Cluster::hosts(4);
    for (loss, some_by_datagram) in [("100", false), ("50", true)] {
        let (_, stats) = checked(
            &cluster,
            &[
                ("coll_ipmc_barrier_algorithm", "2"),
                ("coll_ipmc_inject_loss", loss),
            ],
            &["--rounds", ROUNDS],
        );
        let world = of(&stats, "MPI_COMM_WORLD");
        assert_multicast_barriers(&world, 4, 150);
        let others: Vec<&Line> = world.iter().filter(|s| s["rank"] != "0").collect();
        for s in &others {
            assert!(num(s, "released_p2p") > 0, "{loss} %: {s:?}");
            assert!(num(s, "injected") > 0, "{loss} %: {s:?}");
        }
        let by_datagram: u64 = others.iter().map(|s| num(s, "released_mcast")).sum();
        assert_eq!(by_datagram > 0, some_by_datagram, "{loss} %: {others:?}");
    }
}

/// The automatic choice measures ipmc's barriers against Open MPI's, and
/// every rank takes the same decision at the same call: the same number of
/// barriers by each algorithm on every rank, and a `barrier` row in rank
/// 0's decision table.
#[test]
fn the_automatic_choice_measures_the_barrier_alike_on_every_rank() {
    let cluster = Cluster::hosts(4);
    let (run, stats) = checked(
        &cluster,
        &[("coll_ipmc_verbose", "1")],
        &["--rounds", "120", "--bcasts", "0"],
    );
    let world = of(&stats, "MPI_COMM_WORLD");
    assert_eq!(world.len(), 4);
    for key in ["barrier_multicast", "barrier_linear", "barrier_previous"] {
        for s in &world {
            assert_eq!(s[key], world[0][key], "{key}: {world:?}");
            // Each candidate served its measured calls.
            assert!(num(s, key) >= 8, "{key}: {s:?}");
        }
    }
    let text = run
        .output
        .lines()
        .skip_while(|l| !l.contains("ipmc: the collectives of communicator MPI_COMM_WORLD "))
        .find(|l| l.starts_with("  barrier: "))
        .unwrap_or_else(|| panic!("no barrier row:\n{}", run.output));
    for alg in ["previous", "linear", "multicast"] {
        assert!(text.contains(&format!("{alg} ")), "{text}");
    }
    println!("{text}");
}

/// Hosts of two ranks: each node's barrier, the leaders' (ipmc's multicast
/// barrier among one rank per host), each node's again.
#[test]
fn hosts_of_several_ranks_take_two_levels() {
    let cluster = Cluster {
        slots: 2,
        ..Cluster::hosts(3)
    };
    let (_, stats) = checked(
        &cluster,
        &[("coll_ipmc_barrier_algorithm", "2")],
        &["--rounds", ROUNDS],
    );
    let world = of(&stats, "MPI_COMM_WORLD");
    assert_eq!(world.len(), 6);
    for s in &world {
        assert!(num(s, "barrier_two_level") >= 150, "{s:?}");
        assert_eq!(num(s, "sent") + num(s, "recv"), 0, "{s:?}");
    }
    let leaders = of(&stats, "ipmc leaders of MPI_COMM_WORLD");
    assert_multicast_barriers(&leaders, 3, 150);
}

/// A rank killed in the middle of a job's barriers (SIGKILL,
/// `tests/mpi/killed.sh`): the job ends, with an error, instead of the
/// others waiting for it forever.
#[test]
fn a_killed_rank_ends_the_job() {
    Cluster::hosts(4).assert_killed_rank_ends_job(
        &[("coll_ipmc_barrier_algorithm", "2")],
        2,
        "barrier_check",
        &["--rounds", "1000000", "--late-us", "0"],
    );
}
