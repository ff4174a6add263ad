//! `ipmc-simulate`'s command line as a user meets it.

use std::process::{Command, Output};

fn simulate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ipmc-simulate"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn help_goes_to_standard_output_and_succeeds() {
    let out = simulate(&["--help"]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("usage: simulate"));
    assert!(out.stderr.is_empty(), "{out:?}");
}

#[test]
fn a_broadcast_of_no_bytes_is_refused_with_a_reason() {
    let out = simulate(&["--nodes", "4", "--size", "0"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--size must be 1 or more"), "{err}");
    assert!(out.stdout.is_empty(), "{out:?}");
}

#[test]
fn default_peers_leave_scatter_allgather_out_above_2000_nodes_and_say_so() {
    let out = simulate(&["--nodes", "2001", "--size", "1K"]);
    assert!(out.status.success(), "{out:?}");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(stdout.contains("algorithm=binomial"), "{stdout}");
    assert!(!stdout.contains("algorithm=scatter-allgather"), "{stdout}");
    assert!(stderr.contains("scatter-allgather left out"), "{stderr}");
    let out = simulate(&["--nodes", "100", "--size", "1K"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("algorithm=scatter-allgather"));
}

/// The last line's `completion_max_us` of a run.
fn completion_us(out: &Output) -> f64 {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    last.split_whitespace()
        .find_map(|kv| kv.strip_prefix("completion_max_us="))
        .unwrap_or_else(|| panic!("no completion in {stdout}"))
        .parse()
        .unwrap()
}

#[test]
fn ranks_per_node_add_the_nodes_shared_memory_step() {
    let run = |ranks: &str, segment: &[&str]| {
        let mut args = vec![
            "--nodes",
            "8",
            "--size",
            "1M",
            "--only",
            "ipmc",
            "--ranks-per-node",
            ranks,
            "--node-hop-us",
            "10",
            "--node-copy-gbs",
            "1",
        ];
        args.extend(segment);
        let out = simulate(&args);
        assert!(out.status.success(), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(&format!("ranks_per_node={ranks} ")),
            "{out:?}"
        );
        completion_us(&out)
    };
    // 64 ranks with Open MPI's step: a tree of 6 hops, the message and 5
    // more segments of 64 KiB at 1 GB/s.
    let off = ["--node-segment", "off"];
    let step = 6.0 * 10.0 + (1_048_576.0 + 5.0 * 65_536.0) / 1e3;
    let added = run("64", &off) - run("1", &off);
    assert!((added - step).abs() < 0.2, "{added} µs, not {step}");
    // ipmc's segment: a notice, the message in and the last slot out, and
    // the leaders' copies in slow their own part down.
    let on = ["--segment-notice-us", "10", "--segment-copy-gbs", "1"];
    let step = 10.0 + (1_048_576.0 + 262_144.0) / 1e3;
    let added = run("64", &on) - run("1", &on);
    assert!(added > step + 1.0, "{added} µs, not above {step}");
    // From the leader's memory: a notice and every rank's copy of the
    // whole, the leaders' part as with one rank per node.
    let pull = [
        "--node-segment",
        "from-leader",
        "--segment-notice-us",
        "10",
        "--segment-copy-gbs",
        "1",
    ];
    let step = 10.0 + 1_048_576.0 / 1e3;
    let added = run("64", &pull) - run("1", &pull);
    assert!((added - step).abs() < 0.2, "{added} µs, not {step}");
    let out = simulate(&[
        "--nodes",
        "8",
        "--size",
        "1K",
        "--calls",
        "2",
        "--ranks-per-node",
        "4",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn a_barrier_needs_no_size_and_takes_barrier_peers_only() {
    let out = simulate(&["--collective", "barrier", "--nodes", "16"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for alg in ["barrier-ipmc", "barrier-linear", "barrier-bruck"] {
        assert!(stdout.contains(&format!("algorithm={alg} ")), "{stdout}");
    }
    assert!(completion_us(&out) > 0.0);
    let out = simulate(&[
        "--collective",
        "barrier",
        "--nodes",
        "16",
        "--peer",
        "binomial",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = simulate(&["--nodes", "16", "--size", "1K", "--peer", "barrier-linear"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// `validate` reads a `scripts/compare` results.csv by its column names
/// (`docs/testing.md`), whatever their order, and refuses another file.
#[test]
fn validate_reads_compare_results_by_column_name() {
    let dir = std::env::temp_dir().join(format!("ipmc-sim-validate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let results = dir.join("results.csv");
    std::fs::write(
        &results,
        "status,max_us,bytes,ranks,peer,kind\n\
         ok,1000.0,4096,4,tuned-6,summary\n\
         ok,900.0,4096,4,tuned-6,rank\n\
         ok,5.0,4096,4,no-such-peer,summary\n",
    )
    .unwrap();
    let out = simulate(&["validate", results.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("| tuned-6 | 4 | 4096 | 1000.0 |"),
        "{stdout}"
    );
    assert!(stdout.contains("of 1 points within"), "{stdout}");
    let other = dir.join("other.csv");
    std::fs::write(&other, "a,b\n1,2\n").unwrap();
    let out = simulate(&["validate", other.to_str().unwrap()]);
    assert!(!out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no column kind"));
    std::fs::remove_dir_all(&dir).unwrap();
}
