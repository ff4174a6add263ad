//! Every collective ipmc serves, mixed at random, on the emulated cluster
//! (`tests/mpi/mixed_check.c`): blocking, nonblocking (several outstanding
//! over three communicators) and persistent broadcasts, barriers and
//! allgathers of 0 B to 3 MB from random roots, while communicators are
//! freed and made again by `MPI_Comm_dup` and `MPI_Comm_split`, one or
//! several ranks per host, with loss. Every run checks every byte on every
//! rank (`mixed_check: PASS`) and, from ipmc's statistics, that multicast
//! served: datagrams were used, and where loss was made, the chain repaired
//! what it took. And communicators of the same processes made while others
//! measure (`tests/mpi/same_processes.c`).

mod common;

use common::{stats_with_collectives, Cluster, Line, LATE_FREES};

/// Steps of each run: about 2 to 5 s on the emulated cluster.
const STEPS: &str = "1000";

/// A field of a statistics line, 0 where the line lacks it (a communicator
/// without barriers or allgathers has no `ipmc collectives:` line); the
/// calls of a `calls:bytes` tally.
fn field(s: &Line, key: &str) -> u64 {
    s.get(key).map_or(0, |v| {
        let calls = v.split_once(':').map_or(v.as_str(), |(c, _)| c);
        calls
            .parse()
            .unwrap_or_else(|_| panic!("{key} is not a count in {s:?}"))
    })
}

fn total(stats: &[Line], key: &str) -> u64 {
    stats.iter().map(|s| field(s, key)).sum()
}

/// Runs `mixed_check` for each of `seeds` on `cluster` with ipmc's
/// statistics and `mca`; asserts that each passed and that multicast
/// delivered datagrams; every run's statistics lines.
fn mixed(label: &str, cluster: &Cluster, mca: &[(&str, &str)], seeds: &[u32]) -> Vec<Line> {
    let mut mca = mca.to_vec();
    mca.push(("coll_ipmc_print_statistics", "1"));
    let mut all = Vec::new();
    for seed in seeds {
        let run = cluster.mpirun(&mca, "mixed_check", &[&seed.to_string(), STEPS]);
        assert!(
            run.ok && run.output.contains("mixed_check: PASS"),
            "{label}, seed {seed} ({}):\n{}",
            run.status,
            run.output
        );
        let stats = stats_with_collectives(&run.output);
        assert!(
            total(&stats, "useful") > 0,
            "{label}, seed {seed}: no multicast datagram was used:\n{}",
            run.output
        );
        println!(
            "{label}, seed {seed}: {} statistics lines, useful={} injected={} chain_bytes={} \
             barriers={} barrier_multicast={} allgathers={} allgather_multicast={}",
            stats.len(),
            total(&stats, "useful"),
            total(&stats, "injected"),
            total(&stats, "chain_bytes"),
            total(&stats, "barriers"),
            total(&stats, "barrier_multicast"),
            total(&stats, "allgathers"),
            total(&stats, "allgather_multicast")
        );
        all.extend(stats);
    }
    all
}

/// Two ranks on each of 4 hosts, ipmc at its defaults: every communicator
/// over two levels, its leaders choosing by measurement.
#[test]
fn a_random_mix_over_two_levels_keeps_every_byte() {
    let cluster = Cluster {
        slots: 2,
        ..Cluster::hosts(4)
    };
    mixed("4 x 2, defaults", &cluster, &[], &[1, 2]);
}

/// Three ranks on each of 3 hosts, 10 % of the multicast datagrams dropped
/// by every host, every collective forced to ipmc's multicast forms: the
/// chain repairs the broadcasts, and barriers and allgathers multicast.
#[test]
fn a_random_mix_forced_to_multicast_under_loss_keeps_every_byte() {
    let cluster = Cluster {
        slots: 3,
        loss: 10,
        ..Cluster::hosts(3)
    };
    let mca = [
        ("coll_ipmc_bcast_algorithm", "multicast"),
        ("coll_ipmc_barrier_algorithm", "multicast"),
        ("coll_ipmc_allgather_algorithm", "multicast"),
    ];
    let stats = mixed("3 x 3, forced, 10 % loss", &cluster, &mca, &[3]);
    assert!(total(&stats, "chain_bytes") > 0, "nothing repaired");
    assert!(
        total(&stats, "barrier_multicast") > 0,
        "no multicast barrier"
    );
    assert!(
        total(&stats, "allgather_multicast") > 0,
        "no multicast allgather"
    );
}

/// One rank on each of 5 hosts, multicast forced and 30 % of the received
/// datagrams dropped by ipmc itself.
#[test]
fn a_random_mix_with_injected_loss_keeps_every_byte() {
    let mca = [
        ("coll_ipmc_bcast_algorithm", "multicast"),
        ("coll_ipmc_inject_loss", "30"),
    ];
    let stats = mixed(
        "5 x 1, forced, 30 % injected",
        &Cluster::hosts(5),
        &mca,
        &[4],
    );
    assert!(total(&stats, "injected") > 0, "nothing dropped");
    assert!(total(&stats, "chain_bytes") > 0, "nothing repaired");
}

/// Communicators of the same processes made while an earlier one measures,
/// votes or finishes, freed in opposite orders on even and odd ranks
/// (`tests/mpi/same_processes.c`), over two levels and one, with 20 % of
/// the datagrams lost on every host: what each takes on from the earlier
/// ones, agreed by every rank, must leave every byte right, and later
/// communicators must have taken decisions on (`coll_ipmc_verbose 1`
/// tables) and, over two levels, the levels the earlier ones left.
#[test]
fn communicators_made_while_others_measure_keep_every_byte() {
    for slots in [2, 1] {
        let cluster = Cluster {
            slots,
            loss: 20,
            ..Cluster::hosts(3)
        };
        let run = cluster.mpirun(&[("coll_ipmc_verbose", "1")], "same_processes", &["25"]);
        assert!(
            run.ok && run.output.contains("same_processes: PASS"),
            "{slots} per host ({}):\n{}",
            run.status,
            run.output
        );
        let taken = run
            .output
            .matches("(measured on an earlier communicator of the same processes: ")
            .count();
        let levels = run
            .output
            .matches("over the levels of an earlier communicator of the same processes")
            .count();
        assert!(
            taken >= 20 && (slots == 1 || levels >= 25),
            "{slots} per host: {taken} taken on, {levels} over earlier levels:\n{}",
            run.output
        );
    }
}

/// Levels whose kept copies drifted apart (`tests/mpi/kept_apart.c` on 3
/// hosts of 2 ranks: communicators of ranks 0 to 2, over two levels too,
/// push the levels of `MPI_COMM_WORLD`'s duplicates out of those ranks' 4
/// kept ones, 6 times in the run, while ranks 3 to 5 keep theirs): levels
/// the ranks refused go back to their place among the kept ones and age
/// out, so that ranks 3 to 5 refuse at most 4 after each drift (and
/// [`LATE_FREES`] more).
#[test]
fn levels_kept_apart_are_taken_over_again() {
    const EPOCHS: usize = 6;
    let cluster = Cluster {
        slots: 2,
        ..Cluster::hosts(3)
    };
    let epochs = EPOCHS.to_string();
    let (run, ranks) = cluster.mpirun_to_files(
        &[("coll_ipmc_verbose", "5")],
        "",
        "kept_apart",
        &["6", &epochs],
    );
    assert!(
        run.ok && ranks[0].contains("kept_apart: PASS"),
        "{}\n{}",
        run.output,
        ranks.concat()
    );
    // Duplicates that follow another: all but the first.
    let following = 6 * (1 + 3 * EPOCHS) - 1;
    for (rank, output) in ranks.iter().enumerate().skip(3) {
        let taken = output
            .matches("the levels of an earlier communicator of the same processes taken over")
            .count();
        println!("rank {rank}: the levels of {taken} of {following} duplicates taken over");
        assert!(
            taken + (4 + LATE_FREES) * EPOCHS >= following && taken <= following,
            "rank {rank}: {taken}:\n{output}"
        );
    }
}
