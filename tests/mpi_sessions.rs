//! MPI sessions (MPI-4, Open MPI 5.0): a program that makes its
//! communicators from a session's process set and never makes
//! `MPI_COMM_WORLD` (`tests/mpi5/sessions.c`).

mod common;

use common::{built_for_openmpi5, num, openmpi5, stats_lines, tally, Cluster};

/// Its broadcasts multicast and every byte arrives, and what ipmc tells once
/// per job it tells once: it asked `MPI_COMM_WORLD`, which such a program
/// never makes, who speaks, and every process answered that it does.
#[test]
fn a_program_of_sessions_multicasts_and_speaks_once() {
    if !openmpi5() {
        println!("not run with Open MPI 4.1, which has no MPI sessions");
        return;
    }
    built_for_openmpi5();
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
