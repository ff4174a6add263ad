//! MPI sessions (MPI-4, Open MPI 5.0): a program that makes its
//! communicators from a session's process set and never makes
//! `MPI_COMM_WORLD` (`tests/mpi5/sessions.c`).

mod common;

use common::{built_for_openmpi5, num, openmpi5, stats_lines, tally, Cluster};

/// Builds the programs of sessions where the Open MPI under test has MPI
/// sessions; whether it has.
fn sessions_built() -> bool {
    if !openmpi5() {
        println!("not run with Open MPI 4.1, which has no MPI sessions");
        return false;
    }
    built_for_openmpi5();
    true
}

/// Its broadcasts multicast and every byte arrives, and what ipmc tells once
/// per job it tells once: it asked `MPI_COMM_WORLD`, which such a program
/// never makes, who speaks, and every process answered that it does.
#[test]
fn a_program_of_sessions_multicasts_and_speaks_once() {
    if !sessions_built() {
        return;
    }
    let mca = [
        ("coll_ipmc_priority", "100"),
        ("coll_ipmc_verbose", "1"),
        ("coll_ipmc_print_statistics", "1"),
    ];
    let run = Cluster::hosts(3).mpirun(&mca, "sessions", &[]);
    assert!(
        run.ok && run.output.contains("sessions: PASS"),
        "{}",
        run.output
    );
    let told = run.output.matches("ipmc: multicast on ").count();
    assert_eq!(told, 1, "told once for the job:\n{}", run.output);
    let measured: Vec<_> = stats_lines(&run.output)
        .into_iter()
        .filter(|s| num(s, "bcasts") == 40)
        .collect();
    assert_eq!(measured.len(), 3, "{}", run.output);
    for s in &measured {
        assert!(tally(s, "multicast").0 > 0, "{s:?}");
    }
}

/// Sessions one after another, each with communicators of the same
/// processes over two levels: every byte arrives, and no communicator keeps
/// its levels for a later one, since a session's levels would outlive the
/// session: each copy has leaders of its own, which carry at most its five
/// broadcasts (fewer where the copy takes on an earlier one's choice).
#[test]
fn sessions_one_after_another_over_two_levels() {
    if !sessions_built() {
        return;
    }
    let cluster = Cluster {
        slots: 2,
        ..Cluster::hosts(3)
    };
    let mca = [
        ("coll_ipmc_priority", "100"),
        ("coll_ipmc_print_statistics", "1"),
    ];
    let run = cluster.mpirun(&mca, "sessions_again", &[]);
    assert!(
        run.ok && run.output.contains("sessions_again: PASS"),
        "{}",
        run.output
    );
    let leaders: Vec<_> = stats_lines(&run.output)
        .into_iter()
        .filter(|s| num(s, "size") == 3)
        .collect();
    // Three sessions of three copies, on each of the three leaders.
    assert_eq!(leaders.len(), 27, "{leaders:?}\n{}", run.output);
    for s in &leaders {
        assert!(num(s, "bcasts") <= 5, "{s:?}");
    }
    let multicast: u64 = leaders.iter().map(|s| tally(s, "multicast").0).sum();
    assert!(multicast > 0, "{leaders:?}");
}
