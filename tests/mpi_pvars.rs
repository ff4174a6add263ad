//! ipmc's statistics as MPI_T performance variables: `tests/mpi/pvars.c`
//! lists the `coll_ipmc_*` variables, starts them on a communicator, runs
//! multicast broadcasts and reads them; the values must count those calls
//! and bytes, and equal the text statistics printed when the communicator
//! is freed.

mod common;

use common::{fields, mpirun, num, stats_lines, Line};

#[test]
fn pvars_count_the_multicast_broadcasts_of_their_communicator() {
    let (np, bcasts, bytes) = (4, 12u64, 100_000u64);
    let mca = [
        ("coll_ipmc_print_statistics", "1"),
        ("coll_ipmc_bcast_algorithm", "3"),
    ];
    // Each rank writes its lines to a file of its own: mpirun may interleave
    // long output of several ranks.
    let dir = std::env::temp_dir().join(format!("ipmc-pvars-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.to_str().unwrap();
    let args = ["--bcasts", "12", "--bytes", "100000", "--out", out];
    let run = mpirun(np, &mca, "pvars", &args);
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let ranks: String = (0..np).map(|r| read(&format!("rank.{r}.txt"))).collect();
    let vars = read("vars.txt");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        run.ok && run.output.contains("pvars: PASS"),
        "run failed:\n{}",
        run.output
    );

    // Listed: one variable per statistic, bound to a communicator, described.
    let listed: Vec<Line> = vars
        .lines()
        .filter_map(|l| l.strip_prefix("pvars: var "))
        .map(fields)
        .collect();
    let text: Vec<Line> = stats_lines(&run.output)
        .into_iter()
        .filter(|s| s.get("comm").is_some_and(|c| c == "pvars"))
        .collect();
    assert_eq!(
        text.len(),
        np,
        "text statistics of every rank:\n{}",
        run.output
    );
    for v in &listed {
        assert_eq!(v["bind"], "comm", "{v:?}");
        assert_eq!(v["readonly"], "1", "{v:?}");
        assert!(v.contains_key("desc"), "{v:?}");
        let state = v["name"] == "coll_ipmc_setup";
        assert_eq!(v["class"], if state { "state" } else { "counter" }, "{v:?}");
        assert_eq!(v["type"], if state { "int" } else { "ull" }, "{v:?}");
    }
    let names: Vec<&str> = listed.iter().map(|v| v["name"].as_str()).collect();
    let readme = std::fs::read_to_string(common::repo().join("README.md")).unwrap();
    for name in &names {
        assert!(readme.contains(&format!("`{name}`")), "README lacks {name}");
    }
    for key in text[0].keys() {
        if ["rank", "size", "nodes", "cid", "comm"].contains(&key.as_str()) {
            continue;
        }
        let (value, calls, _) = variables(key);
        let (plain, calls) = (format!("coll_ipmc_{value}"), format!("coll_ipmc_{calls}"));
        assert!(
            names.contains(&plain.as_str()) || names.contains(&calls.as_str()),
            "no variable for the statistic {key}: {names:?}"
        );
    }

    // Read: every rank's values, after the broadcasts.
    let mut reads: Vec<Line> = ranks
        .lines()
        .filter_map(|l| l.strip_prefix("pvars: rank="))
        .map(|l| fields(&format!("rank={l}")))
        .collect();
    reads.sort_by_key(|r| num(r, "rank"));
    assert_eq!(reads.len(), np, "{ranks}");
    for r in &reads {
        let rank = num(r, "rank");
        let pv = |n: &str| num(r, &format!("coll_ipmc_{n}"));
        assert_eq!(pv("bcasts"), bcasts, "{r:?}");
        assert_eq!(pv("multicast_bcasts"), bcasts, "{r:?}");
        assert_eq!(pv("multicast_bcast_bytes"), bcasts * bytes, "{r:?}");
        assert_eq!(pv("previous_bcasts"), 0, "no fallback: {r:?}");
        assert_eq!(pv("setup"), 1, "setup ok: {r:?}");
        if rank == 0 {
            assert!(pv("sent") > 0, "the root multicast nothing: {r:?}");
        } else {
            assert!(pv("mcast_bytes") > 0, "nothing arrived by multicast: {r:?}");
            assert_eq!(
                pv("mcast_bytes") + pv("chain_bytes"),
                bcasts * bytes,
                "{r:?}"
            );
        }
        // The same figures as the text statistics of this rank.
        let t = text.iter().find(|t| num(t, "rank") == rank).unwrap();
        for (key, value) in t {
            match key.as_str() {
                "rank" | "size" | "nodes" | "cid" | "comm" => {}
                "setup" => assert_eq!(value, "ok"),
                _ => match value.split_once(':') {
                    Some((calls, b)) => {
                        let (_, count, bytes) = variables(key);
                        assert_eq!(pv(&count).to_string(), calls, "{key}");
                        let b = b.trim_end_matches('B');
                        assert_eq!(pv(&bytes).to_string(), b, "{key}");
                    }
                    None => assert_eq!(
                        pv(&variables(key).0).to_string(),
                        *value,
                        "{key} on rank {rank}"
                    ),
                },
            }
        }
    }
    for r in &reads {
        println!("  {}", {
            let mut kv: Vec<_> = r.iter().map(|(k, v)| format!("{k}={v}")).collect();
            kv.sort();
            kv.join(" ")
        });
    }
}

/// The MPI_T variables (without `coll_ipmc_`) of the text statistic `key`:
/// the variable of a plain value, and of `ALG=N:BB` the calls' and the
/// bytes' (broadcasts' `ALG_bcasts`; `barrier_ALG` and `allgather_ALG` are
/// `ALG_barriers` and `ALG_allgathers`; `released_*` are
/// `barrier_releases_by_*`).
fn variables(key: &str) -> (String, String, String) {
    match key.split_once('_') {
        Some((what @ ("barrier" | "allgather"), alg)) => (
            format!("{alg}_{what}s"),
            format!("{alg}_{what}s"),
            format!("{alg}_{what}_bytes"),
        ),
        Some(("released", how)) => {
            let how = if how == "mcast" { "multicast" } else { how };
            let name = format!("barrier_releases_by_{how}");
            (name.clone(), name.clone(), name)
        }
        _ => (
            key.to_string(),
            format!("{key}_bcasts"),
            format!("{key}_bcast_bytes"),
        ),
    }
}
