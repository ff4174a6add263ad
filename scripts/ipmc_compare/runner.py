"""Building the component and the benchmark, and running them on the emulated cluster
(tests/cluster/cluster.sh), whose namespaces this program enters again with --inner."""
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import common
from .common import CLUSTER, PROGRAM, REPO, fail


def check_tools():
    for tool in ("mpirun", "mpicc", "ompi_info", "make", "timeout", "ip"):
        if not shutil.which(tool):
            fail(f"{tool} is missing: run scripts/deps (as root) first")
    if os.geteuid() != 0:
        fail("the emulated cluster needs root (network namespaces)")


def build_component(build_dir):
    """Builds mca_coll_ipmc.so with standalone.mk and installs it into build_dir/install."""
    dest = build_dir / "install"
    print(f"== building and installing mca_coll_ipmc.so into {dest}", flush=True)
    subprocess.run(["make", "-s", "-f", "standalone.mk", "install", f"DESTDIR={dest}"], cwd=REPO, check=True)
    return dest


def build_bench(build_dir):
    exe = build_dir / "bin" / f"{common.COLLECTIVE}_bench"
    exe.parent.mkdir(parents=True, exist_ok=True)
    print(f"== compiling bench/{common.COLLECTIVE}_bench.c into {exe}", flush=True)
    subprocess.run(["mpicc", "-O2", "-Wall", "-Wextra", "-o", str(exe),
                    str(REPO / "bench" / f"{common.COLLECTIVE}_bench.c")], check=True)
    return exe


def component_search_path(component_dir):
    """Open MPI's own component directory, then ipmc's."""
    out = subprocess.run(["ompi_info", "--path", "pkglibdir", "--parsable"],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"pkglibdir:(\S+)", out)
    if not m:
        fail("ompi_info does not name its component directory")
    return f"{m.group(1)}:{component_dir}"


def command_output(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, cwd=REPO).stdout.strip()
    except OSError:
        return ""


def machine_metadata():
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ompi = re.search(r"ompi:version:full:(\S+)", command_output(["ompi_info", "--parsable"]))
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "cpu_model": cpu,
        "kernel": platform.release(),
        "open_mpi": ompi.group(1) if ompi else "",
        "git_commit": command_output(["git", "rev-parse", "HEAD"]),
        "git_dirty": bool(command_output(["git", "status", "--porcelain", "--untracked-files=no"])),
    }


def bench_arguments(args, sizes):
    warmup = ["--warmup", str(args.warmup)] if args.warmup is not None else []
    if common.COLLECTIVE == "barrier":
        return ["--rounds", str(args.rounds), *warmup]
    if common.COLLECTIVE == "allgather":
        return ["--sizes", ",".join(map(str, sizes)), "--rounds", str(args.rounds), *warmup]
    return ["--sizes", ",".join(map(str, sizes)), "--rounds", str(args.rounds),
            "--big-rounds", str(args.big_rounds), "--big-from", str(args.big_from), *warmup,
            *(["--call", common.CALL] if common.CALL != "bcast" else [])]


# MCA arguments that only report: which component each communicator got.
# (Which of ipmc's algorithms carried the calls, the benchmark reads through
# MPI_T.)
OBSERVATION = ["--mca", "coll_base_verbose", "10"]


def write_plan(out, p, peers, args, bench, sizes=None, reps=None, tag=""):
    """The jobs of one cluster, for the runner's --inner mode inside cluster.sh:
    every peer at `sizes` (default all) in the turns `reps` (default the
    --repeat first ones). `tag` names a later pass's files."""
    sizes = sizes or args.sizes
    reps = reps or range(args.repeat)
    numbered = args.repeat > 1 or tag
    plan = {
        "p": p,
        "np": p * args.slots,
        "bench": str(bench),
        "jobs": [{"peer": peer["name"], "rep": rep, "sizes": sizes,
                  "mca": peer["mca"] + OBSERVATION,
                  "bench_args": bench_arguments(args, sizes),
                  "timeout": args.timeout,
                  "log": str(out / "raw" / (f"p{p:02d}-{peer['name']}"
                                            + (f"-{rep + 1}" if numbered else "")))}
                 # With several turns, the peers take turns, each turn in
                 # another order, so that no peer always runs first or after
                 # the same one.
                 for rep in reps
                 for peer in peers[rep % len(peers):] + peers[:rep % len(peers)]],
        "record": str(out / "raw" / f"p{p:02d}{tag}-jobs.json"),
    }
    path = out / "raw" / f"p{p:02d}{tag}-plan.json"
    path.write_text(json.dumps(plan, indent=1))
    return path, plan


def run_inner(plan_path):
    """Inside the cluster's launcher namespace: runs every job of a plan, one
    after another, each under `timeout`, and records what happened."""
    plan = json.loads(Path(plan_path).read_text())
    p = plan["p"]
    cluster_words = shlex.split(os.environ["CLUSTER_MPIRUN"])
    records = []
    for job in plan["jobs"]:
        argv = (["timeout", "--kill-after=10", str(job["timeout"]), "mpirun", *cluster_words,
                 "--host", os.environ["CLUSTER_HOSTS"], "-np", str(plan.get("np", p)),
                 "--mca", "mpi_yield_when_idle", "1", "-x", "OMPI_MCA_mca_base_component_path",
                 "--output-filename", f"{job['log']}.ranks",
                 *job["mca"], plan["bench"], *job["bench_args"]])
        log = Path(job["log"])
        dropped_before = rcvbuf_errors()
        started = time.monotonic()
        with open(f"{log}.out", "w") as out, open(f"{log}.err", "w") as err:
            try:
                rc = subprocess.run(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    timeout=job["timeout"] + 60).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        elapsed = time.monotonic() - started
        dropped = sum(rcvbuf_errors().values()) - sum(dropped_before.values())
        drop_lines(Path(f"{log}.err"), ("mca: base: ", "coll:", "disqualifying myself"))
        for path in rank_files(job["log"]):
            drop_lines(path, ("mca: base: ",))
        status = "ok" if rc == 0 else "timeout" if rc in (124, 137) else "failed"
        records.append({"peer": job["peer"], "rep": job.get("rep", 0), "p": p,
                        "np": plan.get("np", p), "sizes": job.get("sizes"), "argv": argv,
                        "command": shlex.join(argv),
                        "rc": rc, "status": status, "elapsed_s": round(elapsed, 1), "log": job["log"],
                        "rcvbuf_errors": dropped})
        Path(plan["record"]).write_text(json.dumps(records, indent=1))
        print(f"   p={p:<2} {job['peer']:<16} {status:<8} {elapsed:7.1f} s"
              f"   datagrams dropped by full receive buffers: {dropped}", flush=True)
    return 0


def rcvbuf_errors():
    """Per emulated host, the UDP datagrams its kernel dropped because a
    socket's receive buffer was full (RcvbufErrors in the host's namespace)."""
    counts = {}
    for host in os.environ["CLUSTER_HOSTS"].split(","):
        host = host.split(":")[0]
        snmp = subprocess.run(["ip", "netns", "exec", host, "cat", "/proc/net/snmp"],
                              capture_output=True, text=True).stdout
        udp = [line.split()[1:] for line in snmp.splitlines() if line.startswith("Udp:")]
        if len(udp) >= 2 and "RcvbufErrors" in udp[0]:
            counts[host] = int(udp[1][udp[0].index("RcvbufErrors")])
    return counts


def drop_lines(path, noise):
    """Keeps a log small: coll_base_verbose also reports every component's
    loading, and mpirun's merged stream repeats what each rank's file holds."""
    lines = path.read_text(errors="replace").splitlines(keepends=True)
    path.write_text("".join(l for l in lines if not any(n in l for n in noise)))


def rank_files(log):
    """Each rank's own output (mpirun --output-filename): whole lines of one
    process, where mpirun's merged stream may cut lines of several apart."""
    return sorted(Path(f"{log}.ranks").glob("*/rank.*/std*"))


def run_cluster(p, plan_path, plan, args):
    """Brings up p emulated hosts, runs the plan's jobs inside, tears them down.
    Returns the job records (jobs that never ran are marked as such)."""
    argv = [str(CLUSTER), "--rate", args.rate, "--burst", args.burst, *cluster_options(args), str(p), "--",
            sys.executable, str(PROGRAM), "--inner", str(plan_path)]
    limit = sum(j["timeout"] + 90 for j in plan["jobs"]) + 300
    print(f"== p = {p}: {len(plan['jobs'])} runs on {p} emulated hosts at {args.rate}", flush=True)
    # A session of its own, so that the whole run can be stopped with one
    # signal while cluster.sh still deletes its namespaces.
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, start_new_session=True)
    interrupted = False
    try:
        _, err = proc.communicate(timeout=limit)
        rc, why = proc.returncode, err.strip()[-2000:]
    except subprocess.TimeoutExpired:
        stop_cluster(proc)
        rc, why = 124, f"the cluster run exceeded its limit of {limit} s"
    except KeyboardInterrupt:
        stop_cluster(proc)
        rc, why, interrupted = 130, "interrupted", True
    if why and rc != 0:
        print(f"   cluster.sh: {why}", file=sys.stderr)
    record = Path(plan["record"])
    records = json.loads(record.read_text()) if record.exists() else []
    done = {(r["peer"], r.get("rep", 0)) for r in records}
    for job in plan["jobs"]:
        if (job["peer"], job.get("rep", 0)) not in done:
            records.append({"peer": job["peer"], "rep": job.get("rep", 0), "p": p,
                            "sizes": job.get("sizes"), "argv": None,
                            "command": shlex.join(argv),
                            "rc": rc, "status": "interrupted" if interrupted else "cluster-failed",
                            "elapsed_s": 0.0, "log": job["log"],
                            "error": f"cluster.sh exited with {rc} before this run ended: {why}"})
            print(f"   p={p:<2} {job['peer']:<16} not finished: cluster.sh exited with {rc}", flush=True)
    return records, interrupted


def cluster_options(args):
    """cluster.sh's options for several ranks per host, multicast loss and
    the links' MTU."""
    words = ["--slots", str(args.slots)] if args.slots > 1 else []
    words += ["--mtu", str(args.mtu)] if args.mtu != 1500 else []
    return words + (["--loss", str(args.loss)] if args.loss > 0 else [])


def stop_cluster(proc):
    """Stops a cluster run: SIGTERM to every process of it (mpirun ends its
    job, cluster.sh deletes the namespaces), then waits for cluster.sh."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        print(f"compare: cluster.sh (process {proc.pid}) does not end; its namespaces may remain "
              "(ip netns list)", file=sys.stderr)
