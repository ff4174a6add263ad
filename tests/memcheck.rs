//! ipmc under valgrind's memcheck on the emulated cluster: every rank of a
//! job runs under memcheck, and no error arises in ipmc's code (a read or
//! write out of bounds, a bad free, a decision on uninitialised bytes, a
//! system call given uninitialised bytes). The jobs cover what ipmc's
//! `unsafe` code serves: the user's buffer lent to a broadcast, datagram
//! batches to and from the kernel with their control messages, repairs
//! over Open MPI's point-to-point messages, encryption, and the node's
//! shared segment over two levels.
//!
//! Open MPI's own reports (its TCP transport sends structures with padding)
//! are left to Open MPI: an error counts as ipmc's where the innermost frame
//! outside the C library, the loader and memcheck's replacements lies in
//! `mca_coll_ipmc.so`; a read or write out of bounds or a bad free also
//! where ipmc is anywhere on its stack; and uninitialised bytes also where
//! ipmc allocated the block that holds them (a buffer it gave Open MPI to
//! send). Leaks are not checked: Open MPI unloads the components it does
//! not select, and memcheck then names the library loaded at the same
//! address, often ipmc, for their allocations.

mod common;

use std::collections::BTreeMap;
use std::process::Command;

use common::{num, Cluster, Run};

/// One error that memcheck reported.
#[derive(Debug)]
struct Report {
    /// Memcheck's kind, e.g. `InvalidRead`, `SyscallParam`.
    kind: String,
    what: String,
    /// The object (executable or library) of each frame, innermost first.
    objects: Vec<String>,
    /// Each frame's function where memcheck knows it, else `?`.
    functions: Vec<String>,
    /// The objects of the second stack, where the block the error concerns
    /// was allocated (or freed); empty where there is none (the stack).
    block: Vec<String>,
}

/// The text between the first `open` and the next `close` in `text`.
fn between<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let start = text.find(open)? + open.len();
    let len = text[start..].find(close)?;
    Some(&text[start..start + len])
}

/// Every text between `open` and the next `close` in `text`, in order.
fn all_between<'a>(text: &'a str, open: &str, close: &str) -> Vec<&'a str> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(open).map(|i| i + open.len()) {
        let Some(len) = rest[start..].find(close) else {
            break;
        };
        found.push(&rest[start..start + len]);
        rest = &rest[start + len + close.len()..];
    }
    found
}

/// The frames of a stack, none where there is no stack.
fn frames_of(stack: Option<&str>) -> Vec<&str> {
    all_between(stack.unwrap_or(""), "<frame>", "</frame>")
}

/// The element `tag` of each frame, `?` where a frame has none.
fn field(frames: &[&str], tag: &str) -> Vec<String> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    frames
        .iter()
        .map(|f| between(f, &open, &close).unwrap_or("?").to_string())
        .collect()
}

/// The errors of one rank's XML log (`valgrind --xml=yes`).
fn reports(xml: &str) -> Vec<Report> {
    all_between(xml, "<error>", "</error>")
        .into_iter()
        .map(|error| {
            // The first stack is where the error happened; later ones say
            // where the memory it concerns was allocated or freed.
            let stacks = all_between(error, "<stack>", "</stack>");
            let (error_frames, block_frames) = (
                frames_of(stacks.first().copied()),
                frames_of(stacks.get(1).copied()),
            );
            Report {
                kind: between(error, "<kind>", "</kind>")
                    .unwrap_or("")
                    .to_string(),
                what: between(error, "<what>", "</what>")
                    .unwrap_or("")
                    .to_string(),
                objects: field(&error_frames, "obj"),
                functions: field(&error_frames, "fn"),
                block: field(&block_frames, "obj"),
            }
        })
        .collect()
}

fn in_ipmc(object: &str) -> bool {
    object.ends_with("/mca_coll_ipmc.so")
}

/// The C library, the dynamic loader and memcheck's replacements of
/// `malloc`, `memcpy` and the like: the frames below the code that called them.
fn is_runtime(object: &str) -> bool {
    let name = object.rsplit('/').next().unwrap_or(object);
    name.starts_with("libc.so") || name.starts_with("ld-linux") || name.starts_with("vgpreload_")
}

/// Whether the innermost frame of `objects` outside the runtime is ipmc's.
fn called_from_ipmc(objects: &[String]) -> bool {
    objects
        .iter()
        .find(|o| !is_runtime(o))
        .is_some_and(|o| in_ipmc(o))
}

/// Whether ipmc made the error `r` (the module's documentation says how).
fn made_by_ipmc(r: &Report) -> bool {
    let out_of_bounds =
        r.kind.starts_with("Invalid") || r.kind == "MismatchedFree" || r.kind == "Overlap";
    let uninitialised = r.kind.starts_with("Uninit") || r.kind == "SyscallParam";
    !r.kind.starts_with("Leak_")
        && (called_from_ipmc(&r.objects)
            || out_of_bounds && r.objects.iter().any(|o| in_ipmc(o))
            || uninitialised && called_from_ipmc(&r.block))
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}: {}", self.kind, self.what)?;
        for (object, function) in self.objects.iter().zip(&self.functions) {
            let name = object.rsplit('/').next().unwrap_or(object);
            writeln!(f, "    {function} ({name})")?;
        }
        Ok(())
    }
}

/// Runs `program args` on every slot of `cluster` with `mca`, each rank under
/// memcheck with its log in a directory of its own; asserts that every rank's
/// memcheck ran to its end and that none reported an error of ipmc's, and
/// returns the run. Open MPI's own errors are counted and shown.
fn under_memcheck(cluster: &Cluster, mca: &[(&str, &str)], program: &str, args: &[&str]) -> Run {
    let valgrind = Command::new("valgrind").arg("--version").output();
    assert!(
        valgrind.is_ok_and(|o| o.status.success()),
        "valgrind is missing: scripts/deps installs it"
    );
    let dir = common::job_dir("memcheck");
    // One file per rank, named by its rank: a job that runs again (when
    // mpirun splices its output) writes the same files again.
    let xml_file = format!(
        "--xml-file={}/rank.%q{{OMPI_COMM_WORLD_RANK}}.xml",
        dir.display()
    );
    let wrapper = ["valgrind", "--error-limit=no", "--xml=yes", &xml_file];
    let run = cluster.mpirun_wrapped(mca, &wrapper, program, args);
    let logs: Vec<(usize, String)> = (0..cluster.ranks())
        .map(|r| {
            let path = dir.join(format!("rank.{r}.xml"));
            (r, std::fs::read_to_string(&path).unwrap_or_default())
        })
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    check_logs(&logs, &run);
    run
}

/// What memcheck found in one rank's log: each kind of error but leaks
/// (which memcheck's XML reports whatever `--leak-check` says) with how many
/// times it was reported, or why the log fails the check (cut short, or an
/// error of ipmc's, shown with its stack).
fn findings(xml: &str) -> Result<BTreeMap<String, usize>, String> {
    if !(xml.contains("<state>FINISHED</state>") && xml.contains("</valgrindoutput>")) {
        return Err(format!("memcheck did not run to its end:\n{xml}"));
    }
    let all = reports(xml);
    let ipmcs: Vec<String> = all
        .iter()
        .filter(|r| made_by_ipmc(r))
        .map(Report::to_string)
        .collect();
    if !ipmcs.is_empty() {
        // The first few say where; the rest are often the same again.
        return Err(format!(
            "memcheck found {} errors in ipmc, the first of them:\n{}",
            ipmcs.len(),
            ipmcs[..ipmcs.len().min(5)].join("\n")
        ));
    }
    let mut kinds = BTreeMap::new();
    for r in all.iter().filter(|r| !r.kind.starts_with("Leak_")) {
        *kinds.entry(r.kind.clone()).or_default() += 1;
    }
    Ok(kinds)
}

/// Asserts that each rank's memcheck log is complete and holds no error of
/// ipmc's; shows the others' errors by kind.
fn check_logs(logs: &[(usize, String)], run: &Run) {
    for (rank, xml) in logs {
        match findings(xml) {
            Ok(kinds) => println!("rank {rank}: no error of ipmc's; Open MPI's: {kinds:?}"),
            Err(why) => panic!("rank {rank}: {why}\n({}):\n{}", run.status, run.output),
        }
    }
}

/// Forced multicast of every size and root up to 200 KB on 4 hosts that each
/// drop a fifth of the datagrams they receive, so that the chain repairs:
/// every byte right, datagrams sent and used on every rank, no error.
#[test]
fn multicast_with_repairs_makes_no_memory_error() {
    let cluster = Cluster {
        loss: 20,
        ..Cluster::hosts(4)
    };
    let mca = [
        ("coll_ipmc_priority", "90"),
        ("coll_ipmc_bcast_algorithm", "3"),
        ("coll_ipmc_print_statistics", "1"),
    ];
    let run = under_memcheck(&cluster, &mca, "bcast_check", &["--max-bytes", "200000"]);
    let world = common::world_stats(&run, 4);
    for s in &world {
        // Each rank is a root in turn, and receives from the others.
        assert!(num(s, "sent") > 0 && num(s, "useful") > 0, "{s:?}");
        assert!(num(s, "chain_bytes") > 0, "nothing repaired: {s:?}");
    }
}

/// Every collective ipmc serves, mixed at random with communicators made and
/// freed, on 3 hosts of 2 ranks (two levels, the node's shared segment),
/// encrypted, with a tenth of the datagrams lost: every byte right, ipmc's
/// multicast set up, no error.
#[test]
fn every_collective_over_two_levels_makes_no_memory_error() {
    let cluster = Cluster {
        slots: 2,
        loss: 10,
        ..Cluster::hosts(3)
    };
    let mca = [
        ("coll_ipmc_priority", "90"),
        ("coll_ipmc_authenticate", "2"),
        ("coll_ipmc_verbose", "1"),
    ];
    let run = under_memcheck(&cluster, &mca, "mixed_check", &["11", "300"]);
    assert!(
        run.ok && run.output.contains("mixed_check: PASS (0 wrong)"),
        "mixed_check failed ({}):\n{}",
        run.status,
        run.output
    );
    assert!(
        run.output.contains("ipmc: multicast on ipmc leaders of"),
        "no multicast among the hosts' leaders:\n{}",
        run.output
    );
}

/// A log as memcheck writes it, with one error of `kind` whose stack's
/// frames are in `objects`, innermost first, about a block allocated by
/// frames in `block` (none: memory on a stack).
fn log_of(kind: &str, objects: &[&str], block: &[&str]) -> String {
    let stack = |objects: &[&str]| -> String {
        let frames: String = objects
            .iter()
            .enumerate()
            .map(|(i, o)| format!("<frame><ip>0x{i:x}</ip><obj>{o}</obj><fn>f{i}</fn></frame>\n"))
            .collect();
        format!("<stack>\n{frames}</stack>\n")
    };
    let about = if block.is_empty() {
        "<auxwhat>Address 0x1 is on thread 1's stack</auxwhat>\n".to_string()
    } else {
        format!(
            "<auxwhat>Address 0x1 is 8 bytes inside a block</auxwhat>\n{}",
            stack(block)
        )
    };
    format!(
        "<valgrindoutput>\n<error>\n<unique>0x0</unique>\n<tid>1</tid>\n\
         <kind>{kind}</kind>\n<what>test</what>\n{}{about}</error>\n\
         <status>\n<state>FINISHED</state>\n</status>\n</valgrindoutput>\n",
        stack(objects)
    )
}

const IPMC: &str = "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_coll_ipmc.so";
const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";
const PRELOAD: &str = "/usr/libexec/valgrind/vgpreload_memcheck-amd64-linux.so";
const BTL_TCP: &str = "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_btl_tcp.so";
const OPAL: &str = "/usr/lib/x86_64-linux-gnu/libopen-pal.so.40.30.2";

/// The attribution on logs made to measure, so that the end-to-end tests
/// cannot pass for a parser that finds nothing.
#[test]
fn errors_are_laid_at_the_right_door() {
    let on_block = |kind: &str, objects: &[&str], block: &[&str]| {
        let all = reports(&log_of(kind, objects, block));
        assert_eq!(all.len(), 1, "{all:?}");
        assert_eq!(all[0].objects.len(), objects.len(), "{all:?}");
        assert_eq!(all[0].block.len(), block.len(), "{all:?}");
        made_by_ipmc(&all[0])
    };
    let ipmcs = |kind: &str, objects: &[&str]| on_block(kind, objects, &[PRELOAD, OPAL]);
    // Open MPI's TCP transport, progressed from inside an ipmc call.
    assert!(!ipmcs("SyscallParam", &[LIBC, LIBC, BTL_TCP, OPAL, IPMC]));
    assert!(!ipmcs("UninitCondition", &[OPAL, IPMC, IPMC]));
    // ipmc's own system call, or its decision, on uninitialised bytes.
    assert!(ipmcs("SyscallParam", &[LIBC, IPMC, IPMC]));
    assert!(ipmcs("UninitCondition", &[IPMC]));
    // A copy out of bounds through memcheck's memcpy, or inside Open MPI
    // on a buffer ipmc gave it.
    assert!(ipmcs("InvalidRead", &[PRELOAD, IPMC, OPAL]));
    assert!(ipmcs("InvalidWrite", &[OPAL, OPAL, IPMC]));
    assert!(!ipmcs("InvalidWrite", &[OPAL, BTL_TCP]));
    assert!(!ipmcs("Leak_DefinitelyLost", &[PRELOAD, IPMC]));
    // Uninitialised bytes that Open MPI sends: ipmc's where ipmc allocated
    // them (a buffer it gave Open MPI), not where Open MPI did, even inside
    // an ipmc call, nor on a stack.
    let sent = [LIBC, BTL_TCP, OPAL];
    assert!(on_block("SyscallParam", &sent, &[PRELOAD, IPMC, IPMC]));
    assert!(on_block("UninitCondition", &[OPAL], &[PRELOAD, IPMC]));
    assert!(!on_block("SyscallParam", &sent, &[PRELOAD, OPAL, IPMC]));
    assert!(!on_block("SyscallParam", &sent, &[]));
    assert!(!on_block("InvalidRead", &[OPAL], &[PRELOAD, IPMC]));

    // A complete log of two errors, neither ipmc's, passes with its kinds
    // counted; an error of ipmc's, or a log cut short, fails.
    let two = log_of("SyscallParam", &[LIBC, BTL_TCP], &[]).replace(
        "<status>",
        &format!(
            "{}<status>",
            between(
                &log_of("InvalidRead", &[OPAL], &[]),
                "<valgrindoutput>",
                "<status>"
            )
            .unwrap()
        ),
    );
    let kinds = findings(&two).expect("neither error is ipmc's");
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        [
            ("InvalidRead".to_string(), 1),
            ("SyscallParam".to_string(), 1)
        ]
    );
    let found = findings(&log_of("InvalidRead", &[PRELOAD, IPMC], &[]));
    assert!(
        found
            .as_ref()
            .is_err_and(|why| why.contains("InvalidRead: test")),
        "an error in ipmc must fail the check: {found:?}"
    );
    let cut = findings("<valgrindoutput>\n<error>");
    assert!(cut.is_err(), "a log cut short must fail the check");
}
