//! Shared helpers of the integration tests: the parameter table, the built
//! component, and `mpirun` inside a private network namespace (rule zero: no
//! test can send to any network but the namespace's own loopback).

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

pub use ipmc::base::params::Param;

pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The rows of the parameter table, as the build read them.
pub fn params() -> &'static [Param] {
    let rows = ipmc::base::params::PARAMS;
    assert!(
        rows.len() >= 7,
        "the table has the thesis's seven parameters at least"
    );
    rows
}

/// The value of a table default as `ompi_info --parsable` prints it: the
/// name of an enumerated parameter's value.
pub fn shown_default(p: &Param) -> String {
    let value = p.default.trim_matches('"');
    let index = value.parse::<i64>().ok().zip(p.min.parse::<i64>().ok());
    match index.and_then(|(v, min)| p.names.get(usize::try_from(v - min).ok()?)) {
        Some(name) => name.to_string(),
        None => value.to_string(),
    }
}

/// The Open MPI the tests run against: the installed prefix named by
/// `IPMC_OPENMPI_PREFIX` (e.g. the one `scripts/openmpi5` builds), else the
/// one on `PATH` (Debian's 4.1).
pub fn openmpi_prefix() -> Option<PathBuf> {
    std::env::var_os("IPMC_OPENMPI_PREFIX")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
}

/// A command of the Open MPI under test: its `bin` first on `PATH`, for the
/// command and everything it starts (mpicc, mpirun, the remote daemons).
pub fn openmpi_command(program: &str) -> Command {
    openmpi_command_of(openmpi_prefix().as_deref(), program)
}

/// A command of the Open MPI installed in `prefix` (`None`: the one on `PATH`).
pub fn openmpi_command_of(prefix: Option<&Path>, program: &str) -> Command {
    let mut cmd = Command::new(program);
    if let Some(prefix) = prefix {
        let mut path = std::ffi::OsString::from(prefix.join("bin"));
        if let Some(old) = std::env::var_os("PATH") {
            path.push(":");
            path.push(old);
        }
        cmd.env("PATH", path);
    }
    cmd
}

/// Whether the Open MPI under test is of the 5.0 series (PRRTE's mpirun).
pub fn openmpi5() -> bool {
    static V5: OnceLock<bool> = OnceLock::new();
    *V5.get_or_init(|| {
        let out = openmpi_command("ompi_info")
            .args(["--version"])
            .output()
            .expect("ompi_info runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Open MPI"), "ompi_info --version: {text}");
        text.contains("Open MPI) 5.") || text.contains("Open MPI v5.")
    })
}

/// The mpirun options of one host's job that differ between ORTE (4.1) and
/// PRRTE (5.0): more ranks than cores, and the shared-memory transport.
fn local_mpirun_options() -> &'static str {
    if openmpi5() {
        "--map-by :OVERSUBSCRIBE --mca btl self,sm"
    } else {
        "--oversubscribe --mca btl self,vader"
    }
}

pub struct Built {
    /// Directory holding mca_coll_ipmc.so.
    pub component_dir: PathBuf,
    /// Directory holding the compiled MPI test programs.
    pub programs: PathBuf,
}

/// Builds the component and the MPI test programs once per test binary.
pub fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| build_for(openmpi_prefix().as_deref()))
}

/// Builds the component and the MPI test programs for the Open MPI installed
/// in `prefix` (`None`: the one on `PATH`).
pub fn build_for(prefix: Option<&Path>) -> Built {
    // One build per Open MPI: the component and programs differ by series.
    let out = match prefix {
        Some(p) => repo().join(format!(
            "target/mpi-tests-{}",
            p.file_name().unwrap().to_string_lossy()
        )),
        None => repo().join("target/mpi-tests"),
    };
    let build = out.join("component");
    run_ok(
        openmpi_command_of(prefix, "make")
            .arg("-s")
            .arg("-f")
            .arg("standalone.mk")
            .arg(format!("BUILD={}", build.display()))
            .current_dir(repo()),
    );
    let programs = out.join("bin");
    std::fs::create_dir_all(&programs).unwrap();
    let sources = ["tests/mpi", "bench"]
        .iter()
        .flat_map(|dir| std::fs::read_dir(repo().join(dir)).unwrap());
    for entry in sources {
        let src = entry.unwrap().path();
        if src.extension().is_some_and(|e| e == "c") {
            let exe = programs.join(src.file_stem().unwrap());
            run_ok(
                openmpi_command_of(prefix, "mpicc")
                    .args(["-O2", "-Wall", "-Werror", "-o"])
                    .arg(&exe)
                    .arg(&src),
            );
        }
    }
    // Libraries that tests preload into their ranks, built beside them.
    for entry in std::fs::read_dir(repo().join("tests/preload")).unwrap() {
        let src = entry.unwrap().path();
        let lib = programs.join(format!(
            "lib{}.so",
            src.file_stem().unwrap().to_string_lossy()
        ));
        run_ok(
            Command::new("cc")
                .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o"])
                .arg(&lib)
                .arg(&src)
                .args(["-lrt", "-ldl"]),
        );
    }
    Built {
        component_dir: build,
        programs,
    }
}

/// Builds, once per test binary, what only Open MPI 5.0 runs (`tests/mpi5`):
/// its MPI programs beside the others (`built().programs`), and the test GPU
/// (`accelerator_fakegpu.c`) in a directory of its own, which it returns, so
/// that no job loads it unless asked.
pub fn built_for_openmpi5() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        assert!(openmpi5(), "tests/mpi5 is for Open MPI 5.0");
        let gpu = built().programs.with_file_name("fakegpu");
        std::fs::create_dir_all(&gpu).unwrap();
        let src = repo().join("tests/mpi5");
        run_ok(
            openmpi_command("mpicc")
                .args(["-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-o"])
                .arg(gpu.join("mca_accelerator_fakegpu.so"))
                .arg(src.join("accelerator_fakegpu.c")),
        );
        for program in ["gpu_bcast", "sessions", "sessions_again"] {
            run_ok(
                openmpi_command("mpicc")
                    .args(["-O2", "-Wall", "-Werror", "-o"])
                    .arg(built().programs.join(program))
                    .arg(src.join(format!("{program}.c")))
                    // The programs call Open MPI's accelerator framework.
                    .arg("-lopen-pal"),
            );
        }
        gpu
    })
}

/// The simulator's output for `args` (`sim/`, built here if need be).
pub fn simulate(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO"))
        .current_dir(repo())
        .args(["run", "--locked", "--quiet", "--release", "-p", "ipmc-sim"])
        .args(["--bin", "ipmc-simulate", "--"])
        .args(args)
        .output()
        .expect("cargo runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "simulate {args:?} failed:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Runs `cmd`, failing the test with its output if it fails; what it printed.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    printed
}

/// Open MPI's own component directory.
pub fn system_component_dir() -> String {
    system_component_dir_of(openmpi_prefix().as_deref())
}

/// The component directory of the Open MPI installed in `prefix`.
pub fn system_component_dir_of(prefix: Option<&Path>) -> String {
    let out = openmpi_command_of(prefix, "ompi_info")
        .args(["--path", "pkglibdir", "--parsable"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            l.split_once("pkglibdir:")
                .map(|(_, d)| d.trim().to_string())
        })
        .expect("ompi_info names its component directory")
}

/// The component search path: the built ipmc, then Open MPI's own directory
/// (the first of two ipmc found wins: an installed one must not).
pub fn component_path() -> String {
    format!(
        "{}:{}",
        built().component_dir.display(),
        system_component_dir()
    )
}

/// `ompi_info` with the built component visible.
pub fn ompi_info(args: &[&str]) -> String {
    let out = openmpi_command("ompi_info")
        .args(args)
        .env("OMPI_MCA_mca_base_component_path", component_path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ompi_info {args:?} ended with {}:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What one `mpirun` printed (standard output and error together) and whether it succeeded.
pub struct Run {
    pub ok: bool,
    /// How it ended ("exit status: 1", "signal: 11 (SIGSEGV)"), for messages.
    pub status: String,
    pub output: String,
}

/// Runs `cmd` (which may start Open MPI as root) to its end, capturing
/// standard output and error together.
pub fn run_captured(cmd: &mut Command) -> Run {
    let out = cmd
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
    output.push_str(&String::from_utf8_lossy(&out.stderr));
    Run {
        ok: out.status.success(),
        status: out.status.to_string(),
        output,
    }
}

/// Seconds one mpirun may take before it is killed.
const MPIRUN_TIMEOUT: u32 = 240;

/// Serialises MPI runs: the machine has two cores.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// The mpirun options and program words common to every run; `wrapper`
/// words (a command that runs the program) come before the program.
fn job_words(mca: &[(&str, &str)], wrapper: &[&str], program: &str, args: &[&str]) -> Vec<String> {
    let mut words: Vec<String> = ["--mca", "mpi_yield_when_idle", "1"]
        .into_iter()
        .chain(["-x", "OMPI_MCA_mca_base_component_path"])
        .map(String::from)
        .collect();
    for (k, v) in mca {
        words.extend(["--mca".into(), (*k).into(), (*v).into()]);
    }
    words.extend(wrapper.iter().map(|w| w.to_string()));
    words.push(built().programs.join(program).display().to_string());
    words.extend(args.iter().map(|a| a.to_string()));
    words
}

/// Runs a command that starts mpirun, with the built component visible.
fn run_job(cmd: &mut Command) -> Run {
    let _guard = one_at_a_time();
    run_captured(cmd.env("OMPI_MCA_mca_base_component_path", component_path()))
}

/// Runs `program args` on `np` ranks of one host inside a private network
/// namespace, with the MCA parameters `mca`. The namespace's loopback can
/// multicast, and ipmc uses it unless `mca` chooses interfaces. Every rank
/// counts as a node of its own (`coll_ipmc_ranks_are_nodes`) unless `mca`
/// says otherwise, so that one host runs the multi-node algorithms.
pub fn mpirun(np: usize, mca: &[(&str, &str)], program: &str, args: &[&str]) -> Run {
    mpirun_wrapped(np, mca, &[], program, args)
}

/// As [`mpirun`], with every rank's program started through `wrapper`.
pub fn mpirun_wrapped(
    np: usize,
    mca: &[(&str, &str)],
    wrapper: &[&str],
    program: &str,
    args: &[&str],
) -> Run {
    let mut mca = mca.to_vec();
    if !mca.iter().any(|(k, _)| k.starts_with("coll_ipmc_if_")) {
        mca.push(("coll_ipmc_if_include", "lo"));
    }
    if !mca.iter().any(|(k, _)| *k == "coll_ipmc_ranks_are_nodes") {
        mca.push(("coll_ipmc_ranks_are_nodes", "1"));
    }
    one_host_job(
        "ip link set lo multicast on && ip route add 224.0.0.0/4 dev lo",
        np,
        &mca,
        wrapper,
        program,
        args,
    )
}

/// As [`mpirun`], each rank's output written to a file of its own instead
/// of mpirun's merged output, which cuts and joins lines when many come at
/// once (hundreds of statistics lines). `before` is shell run first on
/// every rank. Returns the run and each rank's output, in rank order.
pub fn mpirun_to_files(
    np: usize,
    mca: &[(&str, &str)],
    before: &str,
    program: &str,
    args: &[&str],
) -> (Run, Vec<String>) {
    to_files(np, before, |wrapper| {
        mpirun_wrapped(np, mca, wrapper, program, args)
    })
}

/// A new, empty directory for the files of one job's ranks, in the
/// temporary directory, named after `what`, this process and a count.
pub fn job_dir(what: &str) -> PathBuf {
    static JOBS: AtomicUsize = AtomicUsize::new(0);
    let n = JOBS.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("ipmc-{what}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs a job of `np` ranks through `job`, which starts each rank's
/// program through the wrapper it is given: `before`, then the program
/// with its output in a file of the rank's own. Returns the run and each
/// rank's output, in rank order.
fn to_files(np: usize, before: &str, job: impl FnOnce(&[&str]) -> Run) -> (Run, Vec<String>) {
    let dir = job_dir("ranks");
    let script = format!(
        "{before}\nexec \"$@\" >'{}'/rank.$OMPI_COMM_WORLD_RANK 2>&1",
        dir.display()
    );
    let run = job(&["sh", "-c", &script, "to-files"]);
    let ranks = (0..np)
        .map(|r| std::fs::read_to_string(dir.join(format!("rank.{r}"))).unwrap_or_default())
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    (run, ranks)
}

/// Runs `program args` on `np` ranks of one host inside a private network
/// namespace as a user's host has it: the loopback up, without the MULTICAST
/// flag or a multicast route, and only the MCA parameters `mca`.
pub fn mpirun_as_on_a_host(np: usize, mca: &[(&str, &str)], program: &str, args: &[&str]) -> Run {
    one_host_job("true", np, mca, &[], program, args)
}

/// A job of one host in a private network namespace whose loopback is up,
/// after the shell command `prepare` ran in it.
fn one_host_job(
    prepare: &str,
    np: usize,
    mca: &[(&str, &str)],
    wrapper: &[&str],
    program: &str,
    args: &[&str],
) -> Run {
    let script = format!(
        "ip link set lo up && {prepare} && \
         exec timeout --kill-after=10 {MPIRUN_TIMEOUT} mpirun \
         {} -np {np} {}",
        local_mpirun_options(),
        shell_join(&job_words(mca, wrapper, program, args))
    );
    // A private network namespace: only its own loopback exists inside. It
    // disappears with the last process in it, whatever happens to the run.
    let unshare = if is_root() { "-n" } else { "-rn" };
    run_job(openmpi_command("unshare").args([unshare, "sh", "-c", &script]))
}

/// Runs `program args` with one rank on each of `hosts` emulated hosts
/// (`tests/cluster/cluster.sh`: network namespaces on a bridge), over TCP.
pub fn cluster_mpirun(hosts: usize, mca: &[(&str, &str)], program: &str, args: &[&str]) -> Run {
    Cluster::hosts(hosts).mpirun(mca, program, args)
}

/// An emulated cluster's shape and faults (the options of `cluster.sh`).
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    pub hosts: usize,
    /// Ranks per host (1 when 0).
    pub slots: usize,
    /// Per-host ranks instead of `slots`: (host 1..=N, ranks).
    pub slots_host: Vec<(usize, usize)>,
    /// Rate limit of every link, e.g. `100mbit`, and the bytes a link may
    /// send at once above it (`tbf` burst; 10 Gbit/s needs `256kb`).
    pub rate: Option<&'static str>,
    pub burst: Option<&'static str>,
    /// Percent of received multicast datagrams every host drops.
    pub loss: u32,
    /// Per-host loss instead of `loss`: (host 1..=N, percent).
    pub loss_host: Vec<(usize, u32)>,
    /// Percent of sent multicast packets every host drops (the send fails).
    pub send_loss: u32,
    /// A host (1..=N) whose interface cannot multicast.
    pub no_multicast: Option<usize>,
    /// Hosts without an IPv4 address: `"all"` (launcher included) or `"2,3"`.
    pub no_ipv4: Option<&'static str>,
    /// Hosts whose only IPv6 address is link-local, as for `no_ipv4`.
    pub no_ula: Option<&'static str>,
    /// Duplicate address detection on: link-local addresses start tentative.
    pub dad: bool,
    /// The MTU of every link (1,500 when `None`).
    pub mtu: Option<u32>,
    /// Per-host MTU instead of `mtu`: (host 1..=N, bytes).
    pub mtu_host: Vec<(usize, u32)>,
}

impl Cluster {
    pub fn hosts(hosts: usize) -> Self {
        Cluster {
            hosts,
            slots: 1,
            ..Cluster::default()
        }
    }

    /// Ranks in a job that fills every slot.
    pub fn ranks(&self) -> usize {
        (1..=self.hosts)
            .map(|h| {
                let own = self.slots_host.iter().find(|(k, _)| *k == h);
                own.map_or(self.slots.max(1), |(_, s)| *s)
            })
            .sum()
    }

    fn options(&self) -> Vec<String> {
        let mut o = vec!["--slots".to_string(), self.slots.max(1).to_string()];
        for (h, s) in &self.slots_host {
            o.extend(["--slots-host".into(), format!("{h}={s}")]);
        }
        if let Some(rate) = self.rate {
            o.extend(["--rate".into(), rate.into()]);
        }
        if let Some(burst) = self.burst {
            o.extend(["--burst".into(), burst.into()]);
        }
        if self.loss > 0 {
            o.extend(["--loss".into(), self.loss.to_string()]);
        }
        for (h, p) in &self.loss_host {
            o.extend(["--loss-host".into(), format!("{h}={p}")]);
        }
        if self.send_loss > 0 {
            o.extend(["--send-loss".into(), self.send_loss.to_string()]);
        }
        if let Some(h) = self.no_multicast {
            o.extend(["--no-multicast".into(), h.to_string()]);
        }
        if let Some(h) = self.no_ipv4 {
            o.extend(["--no-ipv4".into(), h.into()]);
        }
        if let Some(h) = self.no_ula {
            o.extend(["--no-ula".into(), h.into()]);
        }
        if self.dad {
            o.push("--dad".into());
        }
        if let Some(mtu) = self.mtu {
            o.extend(["--mtu".into(), mtu.to_string()]);
        }
        for (h, m) in &self.mtu_host {
            o.extend(["--mtu-host".into(), format!("{h}={m}")]);
        }
        o
    }

    /// Runs `program args` on every slot of the cluster, over TCP.
    pub fn mpirun(&self, mca: &[(&str, &str)], program: &str, args: &[&str]) -> Run {
        self.mpirun_wrapped(mca, &[], program, args)
    }

    /// As [`Cluster::mpirun`], with every rank's program started through
    /// `wrapper`.
    pub fn mpirun_wrapped(
        &self,
        mca: &[(&str, &str)],
        wrapper: &[&str],
        program: &str,
        args: &[&str],
    ) -> Run {
        self.mpirun_ranks(self.ranks(), mca, wrapper, program, args)
    }

    /// As [`Cluster::mpirun_wrapped`], starting `np` ranks, placed slot
    /// after slot from host 1 (a job that spawns more gets the rest).
    pub fn mpirun_ranks(
        &self,
        np: usize,
        mca: &[(&str, &str)],
        wrapper: &[&str],
        program: &str,
        args: &[&str],
    ) -> Run {
        let job = format!(
            "timeout --kill-after=10 {MPIRUN_TIMEOUT} mpirun $CLUSTER_MPIRUN \
             --host \"$CLUSTER_HOSTS\" -np {np} {}",
            shell_join(&job_words(mca, wrapper, program, args))
        );
        let mut run = self.run_script(&format!("exec {job}"));
        // mpirun forwards a process's output in pieces (PRRTE, Open MPI 5.0:
        // of 256 bytes; ORTE, 4.1, too, seen cutting a statistics line after
        // 290 bytes when many processes print at once) and may splice
        // another process's line into a longer one (ipmc's statistics lines
        // are): such a run is run again.
        for _ in 1..SPLICED_RUNS {
            let Some(line) = spliced(&run.output) else {
                break;
            };
            println!("output lines spliced by mpirun ({line:?}); running the job again");
            run = self.run_script(&format!("exec {job}"));
        }
        run
    }

    /// As [`Cluster::mpirun`], each rank's output in a file of its own
    /// ([`mpirun_to_files`]).
    pub fn mpirun_to_files(
        &self,
        mca: &[(&str, &str)],
        before: &str,
        program: &str,
        args: &[&str],
    ) -> (Run, Vec<String>) {
        to_files(self.ranks(), before, |wrapper| {
            self.mpirun_wrapped(mca, wrapper, program, args)
        })
    }

    /// Runs `program args` with `mca`, rank `rank` killed with SIGKILL
    /// after 2 s (`tests/mpi/killed.sh`), as a node failure or the
    /// out-of-memory killer would, and asserts that the job ends, with an
    /// error, within a minute instead of the others waiting for it forever.
    /// Returns the run.
    pub fn assert_killed_rank_ends_job(
        &self,
        mca: &[(&str, &str)],
        rank: usize,
        program: &str,
        args: &[&str],
    ) -> Run {
        let rank = rank.to_string();
        let wrapper = [
            "sh",
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mpi/killed.sh"),
            &rank,
            "2",
        ];
        let started = std::time::Instant::now();
        let run = self.mpirun_wrapped(mca, &wrapper, program, args);
        let took = started.elapsed().as_secs_f64();
        println!(
            "killed rank {rank}: the job ended after {took:.1} s ({})",
            run.status
        );
        assert!(!run.ok, "the job should fail:\n{}", run.output);
        assert!(
            run.output.contains(&format!("killed rank {rank}")),
            "rank {rank} was not killed:\n{}",
            run.output
        );
        assert!(
            !run.output.contains(&format!("{program}: PASS")),
            "{}",
            run.output
        );
        assert!(
            took < 60.0,
            "the job took {took:.1} s to end:\n{}",
            run.output
        );
        run
    }

    /// Runs a shell script in the cluster's launcher namespace, where
    /// `$CLUSTER_MPIRUN`, `$CLUSTER_HOSTS`, `$CLUSTER_SUBNET` are set.
    pub fn run_script(&self, script: &str) -> Run {
        assert!(is_root(), "the emulated cluster needs root (ip netns)");
        let mut cmd = openmpi_command(repo().join("tests/cluster/cluster.sh").to_str().unwrap());
        cmd.args(self.options())
            .arg(self.hosts.to_string())
            .args(["--", "sh", "-c", script]);
        run_job(&mut cmd)
    }
}

/// The mpirun words of a job (MCA parameters, program and arguments), quoted
/// for a shell, for scripts given to [`Cluster::run_script`].
pub fn job_line(mca: &[(&str, &str)], program: &str, args: &[&str]) -> String {
    shell_join(&job_words(mca, &[], program, args))
}

/// Runs of one job, at most, while its output shows spliced lines.
const SPLICED_RUNS: usize = 8;

/// A statistics line that mpirun's merged output cut, or into which it put
/// another process's line.
fn spliced(output: &str) -> Option<&str> {
    output.lines().find(|l| is_statistics(l) && !is_whole(l))
}

/// The starts of ipmc's statistics lines, and a field each holds once.
const STARTS: [&str; 2] = ["ipmc stats: ", "ipmc collectives: "];
const ONCE: [&str; 2] = [" chain_bytes=", " allgathers="];

fn is_statistics(line: &str) -> bool {
    STARTS.iter().chain(&ONCE).any(|k| line.contains(k))
}

/// Whole, a statistics line holds one of its two starts and its fields
/// once, and ends with its communicator's name.
fn is_whole(line: &str) -> bool {
    let count = |keys: &[&str]| keys.iter().map(|k| line.matches(k).count()).sum::<usize>();
    count(&STARTS) == 1
        && count(&ONCE) == 1
        && line.matches(" comm=\"").count() == 1
        && line.ends_with('"')
}

/// Refusals of kept groups or levels a test allows after a drift beyond
/// the design's bound: a communicator freed while its last work is pending
/// is destroyed from Open MPI's progress when that work ends
/// (`component::background`), on a loaded machine maybe after the next
/// communicator offered what it kept.
pub const LATE_FREES: usize = 2;

/// Seconds one mpirun may take before it is killed.
pub const JOB_TIMEOUT: u32 = MPIRUN_TIMEOUT;

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn shell_join(words: &[String]) -> String {
    words
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `key=value` fields of a line, with a quoted last field `comm="..."`.
pub fn fields(line: &str) -> HashMap<String, String> {
    let (head, comm) = match line.split_once(" comm=\"") {
        Some((h, c)) => (h, Some(c.trim_end_matches('"'))),
        None => (line, None),
    };
    let mut map: HashMap<String, String> = head
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if let Some(c) = comm {
        map.insert("comm".into(), c.into());
    }
    map
}

/// ipmc's statistics lines (`coll_ipmc_print_statistics`).
pub fn stats_lines(output: &str) -> Vec<HashMap<String, String>> {
    output
        .lines()
        .filter_map(|l| l.split_once("ipmc stats: ").map(|(_, s)| fields(s)))
        .collect()
}

/// ipmc's statistics lines with, where the communicator had barriers or
/// allgathers, the fields of its `ipmc collectives:` line.
pub fn stats_with_collectives(output: &str) -> Vec<HashMap<String, String>> {
    let others: Vec<HashMap<String, String>> = output
        .lines()
        .filter_map(|l| l.split_once("ipmc collectives: ").map(|(_, s)| fields(s)))
        .collect();
    let key =
        |s: &HashMap<String, String>| (s["comm"].clone(), s["rank"].clone(), s["cid"].clone());
    let mut lines = stats_lines(output);
    for s in &mut lines {
        if let Some(o) = others.iter().find(|o| key(o) == key(s)) {
            s.extend(o.clone());
        }
    }
    lines
}

/// The test program's per-communicator report lines.
pub fn check_lines(output: &str) -> Vec<HashMap<String, String>> {
    output
        .lines()
        .filter_map(|l| l.strip_prefix("bcast_check: comm="))
        .map(|s| {
            let (name, rest) = s.split_once(' ').unwrap();
            let mut f = fields(rest);
            f.insert("comm".into(), name.into());
            f
        })
        .collect()
}

/// `calls:bytes` of one algorithm in a statistics line.
pub fn tally(stats: &HashMap<String, String>, alg: &str) -> (u64, u64) {
    let v = &stats[alg];
    let (calls, bytes) = v.split_once(':').unwrap();
    (
        calls.parse().unwrap(),
        bytes.trim_end_matches('B').parse().unwrap(),
    )
}

/// The broadcasts over two levels, whichever way the nodes' ranks copied
/// (`two_level`, `two_level_from_leader`) and whole or pipelined.
pub fn levels_tally(stats: &HashMap<String, String>) -> (u64, u64) {
    [
        "two_level",
        "two_level_pipelined",
        "two_level_from_leader",
        "two_level_pipelined_from_leader",
    ]
    .iter()
    .map(|alg| tally(stats, alg))
    .fold((0, 0), |a, t| (a.0 + t.0, a.1 + t.1))
}

/// Asserts that a `large_bcast` run passed; the statistics lines of
/// communicator `comm`, one from each of its `np` ranks.
pub fn large_bcast_passed(run: &Run, comm: &str, np: usize) -> Vec<Line> {
    assert!(
        run.ok && run.output.contains("large_bcast: PASS"),
        "{}",
        run.output
    );
    let lines = into_comm(stats_lines(&run.output), comm);
    assert_eq!(lines.len(), np, "{comm}: {}", run.output);
    lines
}

/// Asserts that each of the `np` ranks of a `large_bcast` run reported how
/// much its peak memory grew in the broadcasts, all less than `bound_kib`.
pub fn assert_no_copy_grew(run: &Run, np: usize, bound_kib: i64) {
    // The peak is read from counters that the kernel syncs lazily, so a
    // rank that took nothing may show a few hundred KiB less.
    let mut grew: Vec<(usize, i64)> = run
        .output
        .lines()
        .filter_map(|l| l.split("large_bcast: rank=").nth(1))
        .map(|l| {
            let parse = |k: Option<&str>| -> i64 {
                let k = k.unwrap_or_else(|| panic!("{l:?}\n{}", run.output));
                k.trim()
                    .parse()
                    .unwrap_or_else(|e| panic!("{e}: {k:?}\n{}", run.output))
            };
            let (rank, kib) = l.split_once(" grew_kib=").unwrap_or((l, ""));
            (
                parse(Some(rank)) as usize,
                parse(Some(kib).filter(|k| !k.is_empty())),
            )
        })
        .collect();
    grew.sort_unstable();
    println!("peak memory grew by (rank, KiB): {grew:?}");
    assert_eq!(grew.len(), np, "{}", run.output);
    assert!(
        grew.iter().all(|&(_, k)| k < bound_kib),
        "a rank took memory for a copy of its message: {grew:?} KiB"
    );
}

pub fn num(f: &HashMap<String, String>, key: &str) -> u64 {
    f[key]
        .parse()
        .unwrap_or_else(|_| panic!("{key} is not a number in {f:?}"))
}

/// Per communicator: the bytes that reached the non-root ranks by multicast
/// or by the chain add up to each multicast broadcast's bytes once per
/// non-root rank. `checks` are the program's report lines, `stats` ipmc's.
pub fn assert_multicast_accounts_for_every_byte(
    stats: &[HashMap<String, String>],
    checks: &[HashMap<String, String>],
) {
    for (comm, lines) in reported_by_every_rank(stats, checks) {
        let size = num(lines[0], "size");
        // Every rank counts each broadcast; the root's copy is not delivered.
        let moved = tally(lines[0], "multicast").1;
        let delivered: u64 = lines
            .iter()
            .map(|s| num(s, "mcast_bytes") + num(s, "chain_bytes"))
            .sum();
        assert_eq!(
            delivered,
            moved * (size - 1),
            "bytes delivered on {comm}: {lines:?}"
        );
        if moved > 0 {
            let sent: u64 = lines.iter().map(|s| num(s, "sent")).sum();
            assert!(sent > 0, "no datagram sent on {comm}: {lines:?}");
        }
    }
}

/// The statistics lines of each communicator of the program's that every
/// one of its ranks reported (not helper communicators, and not names that
/// several communicators share), by name.
fn reported_by_every_rank<'a>(
    stats: &'a [HashMap<String, String>],
    checks: &[HashMap<String, String>],
) -> Vec<(&'a str, Vec<&'a HashMap<String, String>>)> {
    let mut comms: Vec<&str> = stats.iter().map(|s| s["comm"].as_str()).collect();
    comms.sort_unstable();
    comms.dedup();
    comms
        .into_iter()
        .map(|comm| (comm, of_comm(stats, comm)))
        .filter(|(comm, lines)| {
            lines.len() as u64 == num(lines[0], "size") && checks.iter().any(|c| c["comm"] == *comm)
        })
        .collect()
}

/// The algorithms of ipmc's statistics lines (`ALG=N:BB`) on one level.
pub const ALGORITHMS: [&str; 7] = [
    "linear",
    "chain",
    "multicast",
    "previous",
    "binomial",
    "binary",
    "split_binary",
];

/// Asserts that every rank of each communicator that every rank reported
/// took the same algorithm for the same calls: the automatic choice's
/// decisions agree.
pub fn assert_ranks_decide_alike(
    stats: &[HashMap<String, String>],
    checks: &[HashMap<String, String>],
) {
    for (comm, lines) in reported_by_every_rank(stats, checks) {
        for alg in ALGORITHMS {
            let first = tally(lines[0], alg);
            for s in &lines {
                assert_eq!(tally(s, alg), first, "{alg} on {comm}: {lines:?}");
            }
        }
    }
}

/// One statistics or report line as `key -> value`.
pub type Line = HashMap<String, String>;

/// Runs `tests/mpi/mixed_types` (ranks describing one message with
/// different datatypes of one type signature) with `args`: first with
/// Open MPI's own broadcast, which must deliver it for the job to be one
/// that ipmc must not break, then under each of `mcas` with ipmc's
/// statistics; returns those runs' `MPI_COMM_WORLD` statistics lines, after
/// asserting that every run passed and that ipmc served every broadcast on
/// each of the `np` ranks.
pub fn mixed_types_runs(
    run: impl Fn(&[(&str, &str)], &[&str]) -> Run,
    np: usize,
    args: &[&str],
    mcas: &[&[(&str, &str)]],
) -> Vec<Vec<Line>> {
    let passed = |r: &Run| r.ok && r.output.contains("mixed_types: PASS");
    let open_mpi = run(&[("coll_ipmc_priority", "-1")], args);
    assert!(
        passed(&open_mpi),
        "Open MPI's own broadcast:\n{}",
        open_mpi.output
    );
    let bcasts = open_mpi
        .output
        .lines()
        .find_map(|l| l.strip_prefix("mixed_types: PASS bcasts="))
        .and_then(|n| n.trim().parse::<u64>().ok())
        .expect("the count of broadcasts");
    mcas.iter()
        .map(|mca| {
            let mut all = vec![("coll_ipmc_print_statistics", "1")];
            all.extend_from_slice(mca);
            let r = run(&all, args);
            assert!(passed(&r), "with {mca:?}:\n{}", r.output);
            let world = into_comm(stats_lines(&r.output), "MPI_COMM_WORLD");
            assert_eq!(world.len(), np, "with {mca:?}:\n{}", r.output);
            for s in &world {
                assert_eq!(
                    num(s, "bcasts"),
                    bcasts,
                    "served by ipmc with {mca:?}: {s:?}"
                );
            }
            world
        })
        .collect()
}

/// Runs the check `program` of `tests/mpi/` (which ends with
/// "PROGRAM: PASS" when every byte was right) with `mca` and ipmc's
/// statistics, asserts that it passed, and returns the run and the
/// statistics, each rank's two lines merged ([`stats_with_collectives`]).
pub fn passing(
    cluster: &Cluster,
    mca: &[(&str, &str)],
    program: &str,
    args: &[&str],
) -> (Run, Vec<Line>) {
    let mut mca = mca.to_vec();
    mca.push(("coll_ipmc_print_statistics", "1"));
    let run = cluster.mpirun(&mca, program, args);
    assert!(
        run.ok && run.output.contains(&format!("{program}: PASS")),
        "{program} failed ({}):\n{}",
        run.status,
        run.output
    );
    let stats = stats_with_collectives(&run.output);
    (run, stats)
}

/// After checking that a `bcast_check` run passed and that every byte is
/// accounted for, ipmc's statistics of `MPI_COMM_WORLD`, one per rank
/// 0..`np`, in rank order.
pub fn world_stats(run: &Run, np: usize) -> Vec<Line> {
    assert!(
        run.ok && run.output.contains("bcast_check: PASS"),
        "run failed:\n{}",
        run.output
    );
    let stats = stats_lines(&run.output);
    assert_multicast_accounts_for_every_byte(&stats, &check_lines(&run.output));
    let world = into_comm(stats, "world");
    let ranks: Vec<u64> = world.iter().map(|s| num(s, "rank")).collect();
    assert_eq!(
        ranks,
        (0..np as u64).collect::<Vec<_>>(),
        "one statistics line per rank of world:\n{}",
        run.output
    );
    world
}

/// The lines (statistics or a program's reports) of communicator `comm`, in
/// rank order.
pub fn of_comm<'a>(lines: &'a [Line], comm: &str) -> Vec<&'a Line> {
    let mut mine: Vec<&Line> = lines.iter().filter(|s| s["comm"] == comm).collect();
    mine.sort_by_key(|s| num(s, "rank"));
    mine
}

/// [`of_comm`], for lines no longer needed otherwise.
pub fn into_comm(lines: Vec<Line>, comm: &str) -> Vec<Line> {
    let mut mine: Vec<Line> = lines.into_iter().filter(|s| s["comm"] == comm).collect();
    mine.sort_by_key(|s| num(s, "rank"));
    mine
}

/// The lines of communicator `comm` on rank `rank`: one, unless the
/// program gave several communicators that name.
pub fn of_rank<'a>(lines: &'a [Line], comm: &str, rank: &str) -> Vec<&'a Line> {
    lines
        .iter()
        .filter(|s| s["comm"] == comm && s["rank"] == rank)
        .collect()
}

/// The sum of a numeric field over lines (owned or borrowed).
pub fn sum<L: std::borrow::Borrow<Line>>(lines: &[L], key: &str) -> u64 {
    lines.iter().map(|s| num(s.borrow(), key)).sum()
}

/// The rows of the decision table that rank 0 prints for `MPI_COMM_WORLD`
/// at `coll_ipmc_verbose` 1 (one per decided size class).
pub fn world_decisions(output: &str) -> Vec<&str> {
    output
        .lines()
        .skip_while(|l| !l.contains("ipmc: the collectives of communicator world "))
        .skip(1)
        .take_while(|l| l.starts_with("  ") && l.contains(" bytes: "))
        .collect()
}

/// Shows per-rank figures in a test's output (`cargo test -- --nocapture`).
pub fn print_stats(lines: &[Line]) {
    for s in lines {
        println!(
            "  comm={} rank={} multicast={} previous={} setup={} sent={} send_full={} \
             flow_stalls={} recv={} own={} injected={} useful={} dup={} stale={} future={} \
             mcast_bytes={} chain_bytes={}",
            s["comm"],
            s["rank"],
            s["multicast"],
            s["previous"],
            s["setup"],
            s["sent"],
            s["send_full"],
            s["flow_stalls"],
            s["recv"],
            s["own"],
            s["injected"],
            s["useful"],
            s["dup"],
            s["rej_stale"],
            s["rej_future"],
            s["mcast_bytes"],
            s["chain_bytes"]
        );
    }
}

/// The ways one rank can run ipmc differently from the others: the
/// environment setting that `tests/mpi/on_rank.sh` gives it, and the reason
/// the job's one message names.
pub fn other_configurations() -> Vec<(String, &'static str)> {
    vec![
        (
            "OMPI_MCA_coll_ipmc_chain_segment_size=4096".into(),
            "parameters differ",
        ),
        (
            "OMPI_MCA_coll_ipmc_crossover_size=1000".into(),
            "parameters differ",
        ),
        (
            "OMPI_MCA_coll_ipmc_fixed_crossover_size=65536".into(),
            "parameters differ",
        ),
        (
            "OMPI_MCA_coll_ipmc_fragment_size=100".into(),
            "ipmc is disabled there",
        ),
        (
            "OMPI_MCA_coll_ipmc_priority=-1".into(),
            "ipmc is disabled there",
        ),
        (
            format!(
                "OMPI_MCA_mca_base_component_path={}",
                system_component_dir()
            ),
            "ipmc is not installed or not loaded there",
        ),
    ]
}

/// The wrapper that starts world rank 2 with `setting`.
pub fn on_rank_2(setting: &str) -> [&str; 4] {
    [
        "sh",
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mpi/on_rank.sh"),
        "2",
        setting,
    ]
}

/// Checks a `bcast_check` job of 4 ranks in which world rank 2 ran
/// `setting`: every byte right, ipmc on no communicator with rank 2, and one
/// message that names rank 2 (no other) and `why`. Returns the statistics.
pub fn assert_ipmc_stepped_aside_for_rank_2(run: &Run, setting: &str, why: &str) -> Vec<Line> {
    assert!(
        run.ok && run.output.contains("bcast_check: PASS"),
        "{setting}: {}",
        run.output
    );
    let stats = stats_lines(&run.output);
    // "odd" (world ranks 1 and 3) and Open MPI's helpers without rank 2 may
    // still be ipmc's.
    for s in &stats {
        assert!(
            !["world", "dup", "reversed", "even"].contains(&s["comm"].as_str()),
            "{setting}: ipmc ran on {s:?}"
        );
    }
    let told = run
        .output
        .lines()
        .filter(|l| l.contains("do not share one ipmc configuration"))
        .count();
    assert_eq!(told, 1, "{setting}: told once:\n{}", run.output);
    assert!(
        run.output.contains("rank 2 on host ") && run.output.contains(why),
        "{setting}: {}",
        run.output
    );
    assert!(
        !run.output.contains("rank 1 on host") && !run.output.contains("rank 3 on host"),
        "{setting}: only rank 2 differs:\n{}",
        run.output
    );
    stats
}
