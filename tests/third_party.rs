//! Other people's tests with ipmc serving them: mpi4py's own test suite of
//! collectives and communicators (`scripts/mpi4py-tests`), run by Debian's
//! python3-mpi4py, and MPICH's tests of the collectives
//! (`scripts/mpich-tests`), on emulated hosts with ipmc's multicast forced
//! for every broadcast, barrier and allgather. A program that works with
//! Open MPI's own collectives must work with ipmc's.

mod common;

use std::process::Command;
use std::sync::OnceLock;

use common::{
    into_comm, job_line, num, openmpi_prefix, repo, stats_with_collectives, tally, Cluster,
};

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
        assert!(common::levels_tally(s).0 > 100, "{s:?}");
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
    let world = into_comm(stats_with_collectives(&run.output), "MPI_COMM_WORLD");
    assert_eq!(world.len(), ranks, "{}", run.output);
    world
}

/// The directory of mpi4py's tests, fetched once for the tests that run
/// at once.
fn mpi4py_tree() -> &'static str {
    static TREE: OnceLock<String> = OnceLock::new();
    TREE.get_or_init(|| {
        let script = repo().join("scripts/mpi4py-tests");
        common::run_ok(&mut Command::new(script)).trim().to_string()
    })
}

/// What an MPICH test makes ipmc serve, which its statistics must show.
#[derive(Clone, Copy, Debug)]
enum Serves {
    Bcast,
    Barrier,
    Allgather,
    /// `MPI_Ibcast` as a communicator's first collective: by multicast on
    /// one level; over two levels by the replaced component, since
    /// splitting the communicator would block (`docs/two-levels.md`), but
    /// counted by ipmc (`ibcasts`).
    FirstIbcast,
    /// Persistent broadcasts (`MPI_Bcast_init`, MPI 4.0, which Open MPI 4.1
    /// lacks: run on 5.0 only), every start ipmc's nonblocking broadcast
    /// (`ibcasts`).
    Persistent,
    /// Only Open MPI's collectives, intercommunicators (which ipmc leaves to
    /// coll/inter) or collectives beside ipmc's: ipmc must not break them.
    Others,
}

/// Arguments of MPICH's `coll/bcast` from its `testlist.dtp`: every rank
/// builds its own datatypes of one type signature (`DTP_pool_create`
/// seeded with its rank), with holes, and broadcasts with every root on
/// many communicators.
const DTP_BCAST_1: &str = "-type=MPI_INT -count=512 -seed=4 -testsize=16";
const DTP_BCAST_2: &str = "-type=MPI_INT:4+MPI_DOUBLE:8 -count=512 -seed=6 -testsize=16";

/// MPICH's tests (test/mpi of MPICH 4.0.2) of the collectives ipmc serves,
/// of others beside them and of communicators made, freed and split in
/// many ways, also by several threads at once, each with a number of ranks
/// of its testlist. Left out: `nonblocking2` and `nonblocking3`, whose
/// `MPI_Ialltoallw` crashes Open MPI 4.1.4 without ipmc too; `idup_nb`,
/// which hangs without ipmc too; and the persistent collectives (`p_*`,
/// MPI 4.0, which Open MPI 4.1 lacks) but the broadcast's, which run on 5.0.
const MPICH_TESTS: [(&str, &str, usize, Serves); 45] = [
    ("coll/bcast", DTP_BCAST_1, 4, Serves::Bcast),
    ("coll/bcast", DTP_BCAST_2, 4, Serves::Bcast),
    ("coll/bcasttest", "", 4, Serves::Bcast),
    ("coll/bcasttest", "", 10, Serves::Bcast),
    ("coll/bcastzerotype", "", 5, Serves::Bcast),
    ("coll/bcastzerotype", "", 10, Serves::Bcast),
    ("coll/coll8", "", 4, Serves::Bcast),
    ("coll/coll9", "", 4, Serves::Bcast),
    ("coll/coll10", "", 4, Serves::Bcast),
    ("coll/coll12", "", 4, Serves::Bcast),
    ("coll/p_bcast", "", 4, Serves::Persistent),
    ("coll/p_bcast2", "", 8, Serves::Persistent),
    ("coll/nonblocking", "", 4, Serves::FirstIbcast),
    ("coll/nonblocking", "", 10, Serves::FirstIbcast),
    ("coll/allgatherv4", "", 4, Serves::Barrier),
    ("coll/allgather2", "", 10, Serves::Allgather),
    ("coll/allgather3", "", 10, Serves::Allgather),
    ("coll/allgather_struct", "", 10, Serves::Allgather),
    ("coll/allgatherv2", "", 10, Serves::Allgather),
    ("coll/allgatherv3", "", 10, Serves::Allgather),
    ("coll/coll6", "", 5, Serves::Allgather),
    ("coll/coll7", "", 5, Serves::Allgather),
    ("coll/coll2", "", 5, Serves::Others),
    ("coll/nbcoll2", "", 5, Serves::Others),
    ("coll/coll4", "", 4, Serves::Others),
    ("coll/coll5", "", 4, Serves::Others),
    ("coll/coll13", "", 4, Serves::Others),
    ("coll/icbcast", "", 10, Serves::Others),
    ("coll/icallgather", "", 7, Serves::Others),
    ("coll/icallgatherv", "", 5, Serves::Others),
    ("coll/icbarrier", "", 7, Serves::Others),
    ("comm/cmfree", "", 4, Serves::Others),
    ("comm/cmsplit2", "", 12, Serves::Others),
    ("comm/comm_group_rand", "", 8, Serves::Others),
    ("comm/comm_create_group_idup", "", 4, Serves::Others),
    ("comm/comm_idup_comm2", "", 6, Serves::Others),
    ("comm/dup_with_info", "", 9, Serves::Others),
    ("comm/icsplit", "", 8, Serves::Others),
    ("threads/comm/ctxdup", "", 4, Serves::Barrier),
    ("threads/comm/ctxidup", "", 4, Serves::Barrier),
    ("threads/comm/comm_create_threads", "", 4, Serves::Barrier),
    (
        "threads/comm/comm_create_group_threads",
        "",
        4,
        Serves::Barrier,
    ),
    (
        "threads/comm/comm_create_group_threads2",
        "",
        4,
        Serves::Barrier,
    ),
    ("threads/comm/comm_dup_deadlock", "", 4, Serves::Others),
    ("threads/comm/comm_idup", "", 4, Serves::Others),
];

/// On 4 hosts of 3 ranks, each rank a node of its own (one level): every
/// collective multicasts among all ranks.
#[test]
fn mpich_collective_tests_pass_with_ipmc_serving_them() {
    mpich_tests_on(&[("coll_ipmc_ranks_are_nodes", "1")], "multicast");
}

/// The same over two levels: multicast among the hosts' leaders.
#[test]
fn mpich_collective_tests_pass_over_two_levels() {
    mpich_tests_on(&[], "two_level");
}

/// MPICH's `coll/bcast` of its `testlist.dtp` under ipmc's automatic
/// choice, on 4 hosts of 3 ranks, each rank a node of its own: each rank
/// describes the messages with datatypes of its own, and the choice
/// measures Open MPI's split binary tree among its candidates, which
/// truncated such messages before ipmc gave it the message's bytes.
#[test]
fn mpich_bcast_of_each_ranks_own_datatypes_passes_under_the_automatic_choice() {
    let dir = mpich_tree();
    let cluster = four_hosts_of_three();
    let mca = [
        ("coll_ipmc_ranks_are_nodes", "1"),
        ("coll_ipmc_print_statistics", "1"),
    ];
    let mut split_binary = 0;
    for args in [DTP_BCAST_1, DTP_BCAST_2] {
        let args: Vec<&str> = args.split_whitespace().collect();
        let run = cluster.mpirun(&mca, &format!("{dir}/coll/bcast"), &args);
        assert!(
            run.ok && run.output.contains(" No Errors"),
            "coll/bcast {args:?}:\n{}",
            run.output
        );
        split_binary += stats_with_collectives(&run.output)
            .iter()
            .map(|s| tally(s, "split_binary").0)
            .sum::<u64>();
    }
    assert!(split_binary > 0, "the split binary tree never measured");
}

/// Runs [`MPICH_TESTS`] on 4 hosts of 3 ranks with ipmc's multicast forced
/// and `mca` besides, and asserts that each passed and that ipmc served
/// what it makes ipmc serve by `form` (its statistics' name of the
/// algorithm: "multicast" or "two_level").
fn mpich_tests_on(mca: &[(&str, &str)], form: &str) {
    let dir = mpich_tree();
    let cluster = four_hosts_of_three();
    let mut all_mca = vec![
        ("coll_ipmc_bcast_algorithm", "3"),
        ("coll_ipmc_barrier_algorithm", "2"),
        ("coll_ipmc_allgather_algorithm", "2"),
        ("coll_ipmc_print_statistics", "1"),
    ];
    all_mca.extend_from_slice(mca);
    let tests = mpich_tests();
    let mut script = String::new();
    for (name, args, np, _) in &tests {
        let args: Vec<&str> = args.split_whitespace().collect();
        script.push_str(&format!(
            "echo \"mpich-test: begin {name} {np}\"; \
             timeout --kill-after=10 120 mpirun $CLUSTER_MPIRUN --host \"$CLUSTER_HOSTS\" -np {np} {} 2>&1; \
             echo \"mpich-test: end {name} {np} rc=$?\"; ",
            job_line(&all_mca, &format!("{dir}/{name}"), &args)
        ));
    }
    let run = cluster.run_script(&script);
    let sections: Vec<&str> = run.output.split("mpich-test: begin ").skip(1).collect();
    assert_eq!(sections.len(), tests.len(), "{}", run.output);
    let mut failed = Vec::new();
    for ((name, _, np, serves), out) in tests.iter().zip(sections) {
        let passed = out.contains(&format!("mpich-test: end {name} {np} rc=0"))
            && out.contains(" No Errors");
        // Every statistics line of every communicator; one that mpirun
        // spliced counts what it still shows.
        let stats: Vec<_> = out
            .lines()
            .filter_map(|l| {
                let (_, f) = l
                    .split_once("ipmc stats: ")
                    .or_else(|| l.split_once("ipmc collectives: "))?;
                Some(common::fields(f))
            })
            .collect();
        let calls = |key: &str| -> u64 {
            stats
                .iter()
                .filter_map(|s| s.get(key)?.split(':').next()?.parse::<u64>().ok())
                .sum()
        };
        // Zero bytes (a type of size 0) ipmc completes itself: "empty".
        let served = match serves {
            Serves::Bcast => Some(calls(form) + calls("empty")),
            Serves::Barrier => Some(calls(&format!("barrier_{form}"))),
            Serves::Allgather => Some(calls(&format!("allgather_{form}"))),
            Serves::FirstIbcast if form == "two_level" => Some(calls("ibcasts")),
            Serves::FirstIbcast => Some(calls(form)),
            Serves::Persistent => Some(calls("ibcasts")),
            Serves::Others => None,
        };
        println!(
            "{name} on {np} ranks: passed {passed}, calls ipmc served {served:?} ({serves:?})"
        );
        if !passed || served == Some(0) {
            failed.push(format!("{name} on {np} ranks:\n{out}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The [`MPICH_TESTS`] that the Open MPI under test runs.
fn mpich_tests() -> Vec<(&'static str, &'static str, usize, Serves)> {
    let five = common::openmpi5();
    MPICH_TESTS
        .into_iter()
        .filter(|t| five || !matches!(t.3, Serves::Persistent))
        .collect()
}

/// Where MPICH's tests run: 4 emulated hosts of 3 ranks.
fn four_hosts_of_three() -> Cluster {
    Cluster {
        slots: 3,
        ..Cluster::hosts(4)
    }
}

/// The directory of MPICH's test suite, built once for the Open MPI under
/// test.
fn mpich_tree() -> String {
    let mut cmd = common::openmpi_command(repo().join("scripts/mpich-tests").to_str().unwrap());
    cmd.args(mpich_tests().iter().map(|t| t.0));
    common::run_ok(&mut cmd).trim().to_string()
}
