//! Other people's tests with ipmc serving them: mpi4py's own test suite of
//! collectives and communicators (`scripts/mpi4py-tests`), run by Debian's
//! python3-mpi4py on 4 emulated hosts with ipmc's multicast forced for every
//! broadcast, barrier and allgather. A program that works with Open MPI's own
//! collectives must work with ipmc's.

mod common;

use std::process::Command;
use std::sync::OnceLock;

use common::{num, openmpi_prefix, repo, stats_with_collectives, tally, Cluster};

/// mpi4py's test modules that run collectives and make communicators.
const MODULES: [&str; 6] = [
    "test_cco_buf",
    "test_cco_obj",
    "test_cco_vec",
    "test_cco_nb_buf",
    "test_comm",
    "test_comm_topo",
];

#[test]
fn mpi4py_collective_tests_pass_with_ipmc_serving_them() {
    let world = mpi4py_tests_on(&Cluster::hosts(4));
    // ipmc served them: every rank multicast broadcasts, barriers and
    // allgathers on MPI_COMM_WORLD.
    for s in &world {
        assert_eq!(s["setup"], "ok", "{s:?}");
        assert!(tally(s, "multicast").0 > 100, "{s:?}");
        assert!(num(s, "barrier_multicast") > 100, "{s:?}");
        assert!(tally(s, "allgather_multicast").0 > 10, "{s:?}");
    }
}

/// The same on 2 hosts of 2 ranks, where ipmc's collectives run over two
/// levels (multicast among the hosts' leaders).
#[test]
fn mpi4py_collective_tests_pass_over_two_levels() {
    let world = mpi4py_tests_on(&Cluster {
        slots: 2,
        ..Cluster::hosts(2)
    });
    for s in &world {
        assert!(tally(s, "two_level").0 > 100, "{s:?}");
        assert!(num(s, "barrier_two_level") > 100, "{s:?}");
        assert!(tally(s, "allgather_two_level").0 > 10, "{s:?}");
    }
}

/// Runs mpi4py's tests on `cluster` with ipmc's multicast forced, asserts
/// that every rank's suite passed, and returns the statistics of
/// `MPI_COMM_WORLD`, one line per rank.
fn mpi4py_tests_on(cluster: &Cluster) -> Vec<common::Line> {
    if openmpi_prefix().is_some() {
        // Debian's python3-mpi4py is built for Debian's Open MPI (4.1).
        println!("skipped: Debian's mpi4py runs with Debian's Open MPI only");
        return Vec::new();
    }
    let runner = format!("{}/test/runtests.py", mpi4py_tree());
    let mut args = vec![runner.as_str(), "--no-builddir", "-q"];
    for m in MODULES {
        args.extend(["-i", m]);
    }
    let run = cluster.mpirun(
        &[
            ("coll_ipmc_bcast_algorithm", "3"),
            ("coll_ipmc_barrier_algorithm", "2"),
            ("coll_ipmc_allgather_algorithm", "2"),
            ("coll_ipmc_print_statistics", "1"),
        ],
        "/usr/bin/python3",
        &args,
    );
    let summary: Vec<&str> = run
        .output
        .lines()
        .filter(|l| l.starts_with("Ran ") || l.contains("OK") || l.starts_with("FAILED"))
        .collect();
    println!("{summary:?}");
    assert!(run.ok, "mpi4py's tests failed:\n{}", run.output);
    // The ranks write to one stream, which may join one rank's "OK" with
    // another's line: count the words, not the lines.
    let passed = run.output.matches("OK").count();
    let ranks = cluster.ranks();
    assert_eq!(passed, ranks, "every rank's suite passes:\n{}", run.output);
    assert!(!run.output.contains("FAILED"), "{}", run.output);
    let world: Vec<_> = stats_with_collectives(&run.output)
        .into_iter()
        .filter(|s| s["comm"] == "MPI_COMM_WORLD")
        .collect();
    assert_eq!(world.len(), ranks, "{}", run.output);
    world
}

/// The directory of mpi4py's tests, fetched once for the tests that run
/// at once.
fn mpi4py_tree() -> &'static str {
    static TREE: OnceLock<String> = OnceLock::new();
    TREE.get_or_init(|| {
        let out = Command::new(repo().join("scripts/mpi4py-tests"))
            .output()
            .expect("cannot run scripts/mpi4py-tests");
        assert!(
            out.status.success(),
            "scripts/mpi4py-tests failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    })
}
