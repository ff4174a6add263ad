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
