//! IPv6 on the emulated cluster (`tests/cluster/cluster.sh`): hosts whose
//! only IPv6 address is the automatic link-local one, with and without
//! duplicate address detection; a cluster without IPv4, where Open MPI's own
//! traffic runs over IPv6 too and ipmc uses its defaults; hosts with and
//! without IPv4 mixed, which agree on IPv6 under the default range; and the
//! cases where some hosts lack the address a chosen group needs, which must
//! fall back on every rank with one message.

mod common;

use common::{num, print_stats, stats_lines, sum, tally, world_stats, Cluster, Line, Run};

/// `bcast_check` on `cluster` with multicast forced and statistics on, plus `mca`.
fn run(cluster: &Cluster, mca: &[(&'static str, &'static str)]) -> Run {
    let mut all = vec![
        ("coll_ipmc_print_statistics", "1"),
        ("coll_ipmc_bcast_algorithm", "3"),
    ];
    all.extend_from_slice(mca);
    cluster.mpirun(&all, "bcast_check", &["--max-bytes", "300000"])
}

/// Every byte right, every rank of `MPI_COMM_WORLD` multicast (`setup=ok`)
/// and multicast carried the data.
fn assert_multicast_carried_the_data(what: &str, cluster: &Cluster, run: &Run) -> Vec<Line> {
    let world = world_stats(run, cluster.ranks());
    print_stats(&world);
    for s in &world {
        assert_eq!(s["setup"], "ok", "{what}: {s:?}\n{}", run.output);
        assert!(tally(s, "multicast").0 > 0, "{what}: {s:?}");
    }
    assert!(sum(&world, "sent") > 0, "{what}: no datagram sent");
    assert!(
        sum(&world, "mcast_bytes") > 0,
        "{what}: no byte arrived by multicast"
    );
    assert!(
        !run.output.contains("could not set up IP multicast"),
        "{what}:\n{}",
        run.output
    );
    world
}

/// The group `MPI_COMM_WORLD` multicast on, from rank 0's verbose line.
fn world_group(run: &Run) -> String {
    let line = run
        .output
        .lines()
        .find(|l| l.contains("rank 0 multicasts on world"))
        .unwrap_or_else(|| panic!("no setup line:\n{}", run.output));
    let (_, rest) = line.split_once("with group ").unwrap();
    rest.split(',').next().unwrap().to_string()
}

/// Every rank fell back, and the reason was told exactly once.
fn assert_agreed_fallback(what: &str, cluster: &Cluster, run: &Run, reason: &[&str]) {
    let world = world_stats(run, cluster.ranks());
    for s in &world {
        assert_eq!(s["setup"], "failed", "{what}: {s:?}");
        assert_eq!(s["multicast"], "0:0B", "{what}: {s:?}");
        assert!(tally(s, "previous").0 > 0, "{what}: {s:?}");
        assert_eq!(num(s, "sent") + num(s, "recv"), 0, "{what}: {s:?}");
    }
    let told = run.output.matches("could not set up IP multicast").count();
    assert_eq!(told, 1, "{what}: told once per job:\n{}", run.output);
    for r in reason {
        assert!(
            run.output.contains(r),
            "{what}: no {r:?} in:\n{}",
            run.output
        );
    }
}

/// Hosts without IPv4 cannot run Open MPI 5.0 here: PRRTE, its launcher,
/// finds no network for its own out-of-band channel on them ("No network
/// interfaces were found for out-of-band communications"), before ipmc is
/// involved. Such tests run with Open MPI 4.1, and say so with 5.0.
fn launcher_needs_ipv4(test: &str) -> bool {
    let skip = common::openmpi5();
    if skip {
        println!("{test}: not run with Open MPI 5.0, whose launcher needs IPv4 on every host");
    }
    skip
}

#[test]
fn link_local_only_hosts_multicast_on_link_local_groups() {
    // Two ranks per host, each a node of its own (one level): loop-back on,
    // each rank must recognise its own datagrams sent from the link-local
    // address.
    let cluster = Cluster {
        no_ula: Some("all"),
        slots: 2,
        ..Cluster::hosts(3)
    };
    let run = run(
        &cluster,
        &[
            ("coll_ipmc_group_range", "ff12::/96"),
            ("coll_ipmc_verbose", "5"),
            ("coll_ipmc_ranks_are_nodes", "1"),
        ],
    );
    let world = assert_multicast_carried_the_data("link-local only, ff12", &cluster, &run);
    assert!(world_group(&run).starts_with("[ff12::"), "{}", run.output);
    assert!(sum(&world, "own") > 0, "loop-back brought no own datagram");
}

#[test]
fn link_local_groups_wait_for_duplicate_address_detection() {
    // Duplicate address detection on, as on real hosts: the job starts while
    // the link-local addresses are still tentative.
    let cluster = Cluster {
        no_ula: Some("all"),
        dad: true,
        ..Cluster::hosts(3)
    };
    let run = run(&cluster, &[("coll_ipmc_group_range", "ff12::/96")]);
    assert_multicast_carried_the_data("tentative link-local, ff12", &cluster, &run);
}

#[test]
fn link_local_only_hosts_refuse_a_site_local_group_once_and_name_what_works() {
    let cluster = Cluster {
        no_ula: Some("all"),
        ..Cluster::hosts(3)
    };
    let run = run(&cluster, &[("coll_ipmc_group_range", "ff15::/96")]);
    assert_agreed_fallback(
        "link-local only, ff15",
        &cluster,
        &run,
        &[
            "has site-local scope",
            "its IPv6 addresses: link-local fe80::",
            "coll_ipmc_group_range=ff12::/96",
        ],
    );
}

#[test]
fn an_ipv6_only_cluster_multicasts_with_the_defaults() {
    if launcher_needs_ipv4("an_ipv6_only_cluster_multicasts_with_the_defaults") {
        return;
    }
    // No IPv4 anywhere: Open MPI's out-of-band channel and btl_tcp run over
    // the unique-local addresses, and ipmc's IPv4 default gives way to ff12::/96.
    let cluster = Cluster {
        no_ipv4: Some("all"),
        ..Cluster::hosts(4)
    };
    let run = run(&cluster, &[("coll_ipmc_verbose", "5")]);
    assert_multicast_carried_the_data("IPv6 only, defaults", &cluster, &run);
    assert!(world_group(&run).starts_with("[ff12::"), "{}", run.output);
}

#[test]
fn an_ipv6_only_cluster_multicasts_on_wider_scopes() {
    if launcher_needs_ipv4("an_ipv6_only_cluster_multicasts_on_wider_scopes") {
        return;
    }
    let cluster = Cluster {
        no_ipv4: Some("all"),
        ..Cluster::hosts(3)
    };
    let run = run(
        &cluster,
        &[
            ("coll_ipmc_group_range", "ff15::/96"),
            ("coll_ipmc_verbose", "5"),
        ],
    );
    assert_multicast_carried_the_data("IPv6 only, ff15", &cluster, &run);
    assert!(world_group(&run).starts_with("[ff15::"), "{}", run.output);
}

#[test]
fn a_host_without_a_site_scope_address_makes_all_fall_back_once() {
    let cluster = Cluster {
        no_ula: Some("2"),
        ..Cluster::hosts(4)
    };
    let run = run(&cluster, &[("coll_ipmc_group_range", "ff18::/96")]);
    assert_agreed_fallback(
        "host 2 link-local only, ff18",
        &cluster,
        &run,
        &[
            "rank 1 on host ",
            "has organization-local scope",
            "coll_ipmc_group_range=ff12::/96",
        ],
    );
}

#[test]
fn a_host_without_ipv4_takes_every_rank_to_ipv6_under_the_default_range() {
    if launcher_needs_ipv4("a_host_without_ipv4_takes_every_rank_to_ipv6_under_the_default_range") {
        return;
    }
    // Rank 0 has IPv4, host 3 has only IPv6: every communicator that holds
    // host 3 agrees on ff12::, whichever rank is its rank 0.
    let cluster = Cluster {
        no_ipv4: Some("3"),
        ..Cluster::hosts(4)
    };
    let run = run(&cluster, &[("coll_ipmc_verbose", "5")]);
    assert_multicast_carried_the_data("host 3 IPv6 only, defaults", &cluster, &run);
    assert!(world_group(&run).starts_with("[ff12::"), "{}", run.output);
    for s in stats_lines(&run.output) {
        assert_ne!(s["setup"], "failed", "{s:?}");
    }
}

#[test]
fn a_host_without_ipv4_under_a_chosen_ipv4_range_makes_all_fall_back_once() {
    if launcher_needs_ipv4("a_host_without_ipv4_under_a_chosen_ipv4_range_makes_all_fall_back_once")
    {
        return;
    }
    let cluster = Cluster {
        no_ipv4: Some("3"),
        ..Cluster::hosts(4)
    };
    let run = run(&cluster, &[("coll_ipmc_group_range", "239.192.0.0/16")]);
    assert_agreed_fallback(
        "host 3 IPv6 only, IPv4 range",
        &cluster,
        &run,
        &[
            "rank 2 on host ",
            "eth0: no IPv4 address",
            "this host has only IPv6",
            "coll_ipmc_group_range=ff12::/96",
        ],
    );
}

#[test]
fn when_rank_0_has_only_ipv6_every_rank_follows_it_to_ipv6() {
    if launcher_needs_ipv4("when_rank_0_has_only_ipv6_every_rank_follows_it_to_ipv6") {
        return;
    }
    // World's rank 0 (host 1) has no IPv4: every communicator that holds it
    // multicasts on ff12::, also those whose rank 0 is a dual-stack host; the
    // dual-stack hosts join on their link-local addresses.
    let cluster = Cluster {
        no_ipv4: Some("1"),
        ..Cluster::hosts(4)
    };
    let run = run(&cluster, &[("coll_ipmc_verbose", "5")]);
    assert_multicast_carried_the_data("rank 0 IPv6 only, defaults", &cluster, &run);
    assert!(world_group(&run).starts_with("[ff12::"), "{}", run.output);
}
