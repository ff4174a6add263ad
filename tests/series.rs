//! A component built for one Open MPI series and loaded by the other, as
//! after an upgrade with an old `mca_coll_ipmc.so` left in a component
//! directory: no process dies, jobs run with Open MPI's own broadcast, and
//! `ompi_info` works. Needs both series: it runs in the Open MPI 5.0 pass
//! (`IPMC_OPENMPI_PREFIX`), beside Debian's 4.1.

mod common;

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use common::{
    build_for, openmpi5, openmpi_command_of, openmpi_prefix, run_captured, system_component_dir_of,
};

/// The two Open MPIs, or `None` outside the 5.0 pass. The tests take turns:
/// each builds into the other's directories.
fn both_series() -> Option<(std::path::PathBuf, MutexGuard<'static, ()>)> {
    static TURN: Mutex<()> = Mutex::new(());
    let turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let prefix = openmpi_prefix().filter(|_| openmpi5());
    if prefix.is_none() {
        eprintln!("series: needs Open MPI 5.0 beside 4.1 (IPMC_OPENMPI_PREFIX); not run");
    }
    prefix.map(|p| (p, turn))
}

/// Runs the Open MPI of `running` (`None`: Debian's 4.1) with the component
/// that `dso_dir` holds first on its search path: `ompi_info`, then a
/// broadcast job of 3 ranks in a private network namespace that asks for ipmc
/// at priority 90 and `coll_ipmc_verbose 1`. Returns the job's output.
fn load_other_series(running: Option<&Path>, dso_dir: &Path) -> String {
    let search = format!("{}:{}", dso_dir.display(), system_component_dir_of(running));
    let info = run_captured(
        openmpi_command_of(running, "ompi_info")
            .env("OMPI_MCA_mca_base_component_path", &search)
            .env("OMPI_MCA_coll_ipmc_verbose", "1"),
    );
    assert!(
        info.ok,
        "ompi_info ended with {}:\n{}",
        info.status, info.output
    );
    assert!(
        !info.output.contains("MCA coll: ipmc"),
        "ompi_info lists a component of the other series:\n{}",
        info.output
    );
    let programs = build_for(running).programs;
    let oversubscribe = if running.is_some() {
        "--map-by :OVERSUBSCRIBE"
    } else {
        "--oversubscribe"
    };
    let script = format!(
        "ip link set lo up && exec timeout --kill-after=10 120 mpirun {oversubscribe} -np 3 \
         --mca coll_ipmc_priority 90 --mca coll_ipmc_verbose 1 \
         -x OMPI_MCA_mca_base_component_path={search} {} --max-bytes 100000",
        programs.join("bcast_check").display()
    );
    let job =
        run_captured(openmpi_command_of(running, "unshare").args(["-n", "sh", "-c", &script]));
    assert!(
        job.ok && job.output.contains("bcast_check: PASS"),
        "the job ended with {}:\n{}",
        job.status,
        job.output
    );
    job.output
}

#[test]
fn a_component_built_for_4_1_steps_aside_in_5_0() {
    let Some((prefix, _turn)) = both_series() else {
        return;
    };
    let for_41 = build_for(None).component_dir;
    let output = load_other_series(Some(&prefix), &for_41);
    let told = output
        .lines()
        .filter(|l| l.contains("was built for Open MPI 4.1 and was loaded by Open MPI v5.0"))
        .count();
    assert_eq!(told, 1, "told once per job at verbose 1:\n{output}");
}

#[test]
fn a_component_built_for_5_0_leaves_4_1_jobs_running() {
    let Some((prefix, _turn)) = both_series() else {
        return;
    };
    let for_50 = build_for(Some(&prefix)).component_dir;
    // 4.1 cannot even load it (5.0's libraries clash with its own); 4.1 says
    // so itself and leaves it out.
    load_other_series(None, &for_50);
}
