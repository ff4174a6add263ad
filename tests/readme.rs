//! The README's command blocks that can run here, run as a user would type
//! them: every `sh` block after a `<!-- readme-test -->` line (or
//! `<!-- readme-test 4.1 -->`, `… 5.0 -->` for one series), in order, in one
//! shell, with a fresh home directory, inside a private network namespace.
//! `/some/dir` stands for a scratch directory and a trailing `...` for the
//! rest of a user's command line (`true` here).

mod common;

use common::{openmpi5, openmpi_command, repo, run_captured};

/// The blocks for the series under test, in README order.
fn blocks(readme: &str, series: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        let Some(tag) = line
            .strip_prefix("<!-- readme-test")
            .and_then(|t| t.strip_suffix("-->"))
        else {
            continue;
        };
        let tag = tag.trim();
        let fence = lines.next().unwrap_or_default();
        assert_eq!(
            fence, "```sh",
            "a readme-test mark stands before a sh block"
        );
        let block: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        if tag.is_empty() || tag == series {
            out.push(block.join("\n"));
        }
    }
    out
}

/// A user's command line's "... " (the rest of it) as something that runs.
fn runnable(block: &str, scratch: &str) -> String {
    block
        .lines()
        .map(|l| {
            let l = l.replace("/some/dir", scratch);
            match l.split_once(" ...") {
                Some((cmd, _)) => format!("{cmd} true"),
                None => l,
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_readmes_commands_work_as_written() {
    let series = if openmpi5() { "5.0" } else { "4.1" };
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let blocks = blocks(&readme, series);
    assert!(
        blocks.len() >= 4,
        "few readme-test blocks: {}",
        blocks.len()
    );

    let scratch = repo().join(format!("target/readme-{series}"));
    let _ = std::fs::remove_dir_all(&scratch);
    let home = scratch.join("home");
    let some_dir = scratch.join("some-dir");
    std::fs::create_dir_all(&home).unwrap();
    let body: Vec<String> = blocks
        .iter()
        .map(|b| runnable(b, &some_dir.display().to_string()))
        .collect();
    // The README's mpirun lines assume a core per process; this machine
    // may have fewer.
    let script = format!(
        "set -euo pipefail\nip link set lo up\n{}\n",
        body.join("\n")
    );
    let ran = run_captured(
        openmpi_command("unshare")
            .args(["-n", "bash", "-c", &script])
            .current_dir(repo())
            .env("HOME", &home)
            .env("BUILD", scratch.join("build"))
            .env("OMPI_MCA_mpi_yield_when_idle", "1")
            .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
            .env("PRTE_MCA_rmaps_default_mapping_policy", ":oversubscribe")
            .env_remove("OMPI_MCA_mca_base_component_path"),
    );
    let _ = std::fs::remove_file(repo().join("pvars"));
    let output = ran.output;
    assert!(
        ran.ok,
        "the README's commands ended with {}:\n{script}\n{output}",
        ran.status
    );
    assert!(output.contains("MCA coll: ipmc"), "{output}");
    assert!(output.contains("pvars: PASS"), "{output}");
    // One host, ranks as nodes: bytes arrived by multicast over the loopback.
    let by_multicast = output
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("coll_ipmc_mcast_bytes="))
        .any(|n| n.parse::<u64>().unwrap_or(0) > 0);
    assert!(by_multicast, "no byte arrived by multicast:\n{output}");
    // What Open MPI, PRRTE or a build prints as a warning; not ompi_info's
    // help texts (indented), which may name warnings.
    for line in output.lines().filter(|l| !l.starts_with(' ')) {
        let lower = line.to_lowercase();
        assert!(
            !lower.contains("bad prefix") && !lower.contains("warning"),
            "a warning: {line}\n{output}"
        );
    }
}
