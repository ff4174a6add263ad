//! Messages in a GPU's memory: ipmc must not touch them from the host (a
//! segmentation fault on a real GPU), but have Open MPI's convertor copy
//! them, as its own broadcast does. Open MPI 5.0 only: the GPU is the test
//! component `tests/mpi5/accelerator_fakegpu.c`, whose memory faults on
//! any direct access, plugged into 5.0's accelerator framework; 4.1 has no
//! such framework, and Debian's is built without CUDA.

mod common;

use common::{
    built_for_openmpi5, into_comm, job_line, levels_tally, openmpi5, stats_with_collectives, tally,
    Cluster, Line,
};

/// `gpu_bcast` of 1 B to 1 MiB on `cluster` with `mca`, the test GPU
/// loaded: every rank's statistics of `MPI_COMM_WORLD`, after asserting
/// that every byte arrived.
fn gpu_bcast(cluster: &Cluster, mca: &[(&str, &str)]) -> Vec<Line> {
    let gpu = built_for_openmpi5();
    let mut mca = mca.to_vec();
    mca.push(("coll_ipmc_print_statistics", "1"));
    let job = job_line(&mca, "gpu_bcast", &["1,1000,65536,1048576"]);
    let run = cluster.run_script(&format!(
        "OMPI_MCA_mca_base_component_path=\"$OMPI_MCA_mca_base_component_path:{}\" \
         exec timeout --kill-after=10 {} mpirun $CLUSTER_MPIRUN --host \"$CLUSTER_HOSTS\" \
         -np {} {job}",
        gpu.display(),
        common::JOB_TIMEOUT,
        cluster.ranks()
    ));
    assert!(
        run.ok && run.output.contains("gpu_bcast: PASS"),
        "{} ({}):\n{}",
        mca.iter()
            .map(|(k, v)| format!("{k}={v} "))
            .collect::<String>(),
        run.status,
        run.output
    );
    let world = into_comm(stats_with_collectives(&run.output), "MPI_COMM_WORLD");
    assert_eq!(world.len(), cluster.ranks(), "{}", run.output);
    world
}

#[test]
fn messages_in_gpu_memory_take_every_algorithm() {
    if !openmpi5() {
        println!("not run with Open MPI 4.1, which has no accelerator framework");
        return;
    }
    let cluster = Cluster::hosts(3);
    for (alg, name) in [("3", "multicast"), ("1", "linear"), ("2", "chain")] {
        let world = gpu_bcast(
            &cluster,
            &[
                ("coll_ipmc_priority", "100"),
                ("coll_ipmc_bcast_algorithm", alg),
                ("coll_ipmc_allgather_algorithm", "2"),
            ],
        );
        for s in &world {
            // 4 sizes from each of 3 roots, and 4 nonblocking ones.
            assert_eq!(tally(s, name).0, 16, "{name}: {s:?}");
            assert_eq!(tally(s, "allgather_multicast").0, 4, "{s:?}");
        }
    }
}

#[test]
fn messages_in_gpu_memory_cross_two_levels() {
    if !openmpi5() {
        println!("not run with Open MPI 4.1, which has no accelerator framework");
        return;
    }
    let cluster = Cluster {
        slots: 2,
        ..Cluster::hosts(3)
    };
    let world = gpu_bcast(&cluster, &[("coll_ipmc_priority", "100")]);
    for s in &world {
        assert!(levels_tally(s).0 > 0, "{s:?}");
        assert_eq!(tally(s, "allgather_two_level").0, 4, "{s:?}");
    }
}
