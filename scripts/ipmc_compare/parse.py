"""Parsing what the benchmark and Open MPI print: the benchmark's CSV, which component
served the collective, ipmc's counters (MPI_T)."""
import csv
import re
from pathlib import Path

from . import common
from .common import BCAST_INIT, IBCAST, NOT_BCAST


def parse_bench_output(text):
    """The benchmark's CSV: {bytes: summary} with per-rank medians; only sizes
    whose summary line arrived (a run cut short leaves the rest out)."""
    ranks, sizes = {}, {}
    for row in csv.reader(line for line in text.splitlines() if line.startswith(("rank,", "summary,"))):
        if len(row) != 9:
            continue
        kind, _, nbytes = row[0], int(row[1]), int(row[2])
        if kind == "rank":
            ranks.setdefault(nbytes, {})[int(row[3])] = float(row[4])
        else:
            sizes[nbytes] = {"max_us": float(row[5]), "min_us": float(row[6]),
                             "max_over_min": float(row[7]), "simple_max_us": float(row[8]),
                             "per_rank_us": ranks.get(nbytes, {})}
    return sizes


def parse_selection(texts):
    """From coll_base_verbose: which coll component serves MPI_Bcast on
    MPI_COMM_WORLD ({component: processes}: the enabled one of highest
    priority; with --call, the one that serves MPI_Ibcast or
    MPI_Bcast_init), and how many other communicators were created (the
    benchmark creates none; han creates its sub-communicators when it really
    works)."""
    serves = {"ibcast": IBCAST.__contains__, "persistent": BCAST_INIT.__contains__}.get(
        common.CALL, lambda name: name not in NOT_BCAST)
    comm, enabled, others = {}, {}, 0
    for line in (line for text in texts for line in text.splitlines()):
        m = re.match(r"\[([^\]]+)\] coll:base:comm_select: (.*)", line)
        if not m:
            continue
        proc, what = m.groups()
        new = re.match(r"new communicator: (.*) \(cid \d+\)", what)
        if new:
            comm[proc] = new.group(1)
            others += new.group(1) not in ("MPI_COMM_WORLD", "MPI_COMM_SELF")
            continue
        sel = re.match(r"selecting\s+(\S+), priority\s+(-?\d+), Enabled", what)
        if sel and comm.get(proc) == "MPI_COMM_WORLD" and serves(sel.group(1)):
            enabled.setdefault(proc, []).append((int(sel.group(2)), sel.group(1)))
    serving = {}
    for comps in enabled.values():
        top = max(comps)[1]
        serving[top] = serving.get(top, 0) + 1
    return serving, others


def parse_ipmc_algorithms(texts):
    """ipmc's calls of the collective per algorithm on MPI_COMM_WORLD, as rank 0
    of the benchmark read them through MPI_T (its `ipmc_counters:` line of
    coll_ipmc_ALG_bcasts, _barriers or _allgathers); None without that line."""
    noun = {"barrier": "barriers", "allgather": "allgathers"}.get(common.COLLECTIVE, "bcasts")
    for line in (line for text in texts for line in text.splitlines()):
        if line.startswith("ipmc_counters:"):
            return {alg: int(n) for alg, n in re.findall(rf"\bcoll_ipmc_(\w+?)_{noun}=(\d+)", line)}
    return None


def error_tail(path, lines=6):
    """Why a run failed: the benchmark's own message, or the last lines of its output."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    noise = ("coll:", "ipmc_counters:", "disqualifying myself", "setpgid")
    keep = [l for l in text.splitlines() if l.strip() and not any(n in l for n in noise)]
    own = [l for l in keep if "_bench:" in l]  # the benchmark's own reason comes first
    return "\n".join(own[:lines] if own else keep[-lines:])
