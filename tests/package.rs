//! The Debian package as an administrator uses it: `scripts/package` builds
//! it, `apt-get install ./….deb` installs it, Open MPI then finds ipmc with
//! no component path set and a job on the emulated cluster multicasts, and
//! `apt-get remove` leaves Open MPI as it was.
//!
//! It installs a package on this machine, so it runs only when asked:
//! `scripts/test` runs it (`cargo test --test package -- --ignored`), with
//! Debian's Open MPI, for which the package is built.

mod common;

use std::process::Command;

use common::{
    built, openmpi5, repo, run_captured, system_component_dir, world_stats, Cluster, JOB_TIMEOUT,
};

const PACKAGE: &str = "openmpi-coll-ipmc";

/// Runs `cmd` to its end; its output, once it succeeded.
fn run(cmd: &mut Command) -> String {
    let ran = run_captured(cmd);
    assert!(ran.ok, "{cmd:?} ended with {}:\n{}", ran.status, ran.output);
    ran.output
}

fn installed() -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", PACKAGE])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

/// What Open MPI is before and after: its coll components and the files of
/// its component directory.
fn open_mpi_state() -> (Vec<String>, Vec<String>) {
    let info = run(Command::new("ompi_info").env_remove("OMPI_MCA_mca_base_component_path"));
    let colls = info
        .lines()
        .filter(|l| l.contains("MCA coll:"))
        .map(|l| l.trim().to_string())
        .collect();
    let mut files: Vec<String> = std::fs::read_dir(system_component_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    (colls, files)
}

/// Removes the package when the test ends, whatever happened.
struct Removal;

impl Drop for Removal {
    fn drop(&mut self) {
        let _ = Command::new("apt-get")
            .args(["remove", "-y", "-qq", PACKAGE])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status();
    }
}

#[test]
#[ignore = "installs a system package: scripts/test runs it"]
fn the_package_installs_serves_a_job_and_removes_cleanly() {
    assert!(!openmpi5(), "the package is built for Debian's Open MPI");
    assert!(
        !installed(),
        "{PACKAGE} is installed already: remove it first (apt-get remove {PACKAGE})"
    );
    let programs = built().programs.clone();
    let before = open_mpi_state();
    assert!(!before.0.iter().any(|l| l.contains("ipmc")), "{before:?}");

    run(Command::new(repo().join("scripts/package")).current_dir(repo()));
    let deb = std::fs::read_dir(repo().join("build/deb"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with(&format!("{PACKAGE}_")) && name.ends_with(".deb")
        })
        .expect("scripts/package made the .deb");
    let removal = Removal;
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq"])
        .arg(&deb)
        .env("DEBIAN_FRONTEND", "noninteractive"));
    assert!(installed());

    // Open MPI finds it by itself, and its help text is where it looks.
    let info = run(Command::new("ompi_info").env_remove("OMPI_MCA_mca_base_component_path"));
    assert!(info.contains("MCA coll: ipmc"), "{info}");
    run(Command::new("ompi_info")
        .args(["--param", "coll", "ipmc", "--level", "9"])
        .env_remove("OMPI_MCA_mca_base_component_path"));

    // A job on 4 emulated hosts at ipmc's defaults but for the forced
    // multicast: every byte right, and bytes by multicast.
    let job = format!(
        "unset OMPI_MCA_mca_base_component_path; exec timeout --kill-after=10 {JOB_TIMEOUT} \
         mpirun $CLUSTER_MPIRUN --host \"$CLUSTER_HOSTS\" -np 4 --mca mpi_yield_when_idle 1 \
         --mca coll_ipmc_bcast_algorithm 3 --mca coll_ipmc_print_statistics 1 \
         --mca coll_ipmc_if_include \"$CLUSTER_SUBNET\" {} --max-bytes 300000",
        programs.join("bcast_check").display()
    );
    let ran = Cluster::hosts(4).run_script(&job);
    let world = world_stats(&ran, 4);
    for s in &world {
        assert_eq!(s["setup"], "ok", "{s:?}");
    }
    assert!(
        world.iter().any(|s| s["mcast_bytes"] != "0"),
        "no byte by multicast: {world:?}"
    );

    drop(removal);
    assert!(!installed(), "{PACKAGE} is still installed");
    assert_eq!(open_mpi_state(), before, "Open MPI after the removal");
}
