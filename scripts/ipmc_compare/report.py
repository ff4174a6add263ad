"""The report: Markdown tables, plots, the summary printed at the end."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

from . import common
from .common import NEVER_SLOWER, PER_RANK_SIZES, PROGRAM, SUMMARY_SIZES, fail, human_bytes, human_ms
from .results import Results, write_results_csv
from .targets import evaluate_targets, spread, versus


def ensure_matplotlib():
    """Imports matplotlib with the Agg backend. scripts/deps --plots installs
    Debian's package, which serves Debian's interpreter: where this one is
    another (a pyenv or a venv), the program continues in Debian's."""
    try:
        import matplotlib
    except ImportError:
        debian_python = Path("/usr/bin/python3")
        has_it = debian_python.exists() and subprocess.run(
            [str(debian_python), "-c", "import matplotlib"], capture_output=True).returncode == 0
        if not has_it or Path(sys.executable).resolve() == debian_python.resolve():
            fail("the plots need matplotlib: run scripts/deps --plots (as root), or compare with --no-plots")
        print(f"compare: continuing with {debian_python}, which has matplotlib", flush=True)
        os.execv(str(debian_python), [str(debian_python), str(PROGRAM), *sys.argv[1:]])
    matplotlib.use("Agg")


def cell(res, peer, p, nbytes):
    us = res.time(peer, p, nbytes)
    return human_ms(us) + spread(res, peer, p, nbytes) if us is not None else res.status(peer, p, nbytes)


def ratio(a, b):
    return f"{a / b:.2f}" if a is not None and b else "–"


def markdown(head, rows):
    """A Markdown table of `head` and `rows` (lists of cells)."""
    lines = [head, ["---"] * len(head)] + rows
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def size_table(res, nbytes):
    """Markdown table over p for one size: times in ms and ratios to ipmc."""
    others = [peer for peer in ("ipmc-mcast", "default", "han") if res.has(peer)]
    tuned = bool(res.tuned_peers())
    head = ["p", "ipmc"] + others + (["best tuned", "(algorithm)"] if tuned else [])
    head += [f"{peer} / ipmc" for peer in others] + (["best tuned / ipmc"] if tuned else [])
    head += ["fastest peer", "ipmc / fastest"]
    rows = []
    for p in res.hosts:
        ipmc = res.time("ipmc", p, nbytes)
        row = [str(p), cell(res, "ipmc", p, nbytes)] + [cell(res, peer, p, nbytes) for peer in others]
        best, best_us = res.best_tuned(p, nbytes)
        if tuned:
            row += [human_ms(best_us), best or "–"]
        row += [ratio(res.time(peer, p, nbytes), ipmc) for peer in others]
        if tuned:
            row += [ratio(best_us, ipmc)]
        fastest, fastest_us = res.fastest(p, nbytes)
        row += [f"{fastest} {human_ms(fastest_us)}" if fastest else "–", mark(res, p, nbytes, fastest)]
        rows.append(row)
    return markdown(head, rows)


def mark(res, p, nbytes, fastest):
    """ipmc at its defaults against the fastest peer: the ratio, marked ✓
    within 1.05, ✗ beyond, ~ noisy (see `versus`)."""
    outcome = versus(res, p, nbytes, fastest, NEVER_SLOWER) if fastest else None
    if outcome is None:
        return "–"
    r = res.time("ipmc", p, nbytes) / res.time(fastest, p, nbytes)
    return f"{r:.2f} {dict(within='✓', beyond='✗', noisy='~')[outcome]}"


def every_peer_table(res, nbytes):
    peers = [p["name"] for p in res.peers]
    rows = [[str(p)] + [cell(res, peer, p, nbytes) for peer in peers] for p in res.hosts]
    return markdown(["p"] + peers, rows)


def write_table_md(path, res, targets):
    m = res.meta
    lines = [
        f"# {collective_name()}: ipmc against Open MPI's "
        + {"barrier": "barriers", "allgather": "allgathers"}.get(common.COLLECTIVE, "broadcasts"),
        "",
        f"{m['date']}, {m['nproc']} cores ({m['cpu_model']}), Linux {m['kernel']}, Open MPI {m['open_mpi']}; "
        f"{m.get('slots', 1)} rank(s) per emulated host, links at {m['rate']}"
        f"{'' if m.get('mtu', 1500) == 1500 else ' with an MTU of ' + str(m['mtu'])}, "
        f"multicast loss {m.get('loss_percent', 0)} %; rounds {m['rounds']} "
        f"({m['big_rounds']} from {human_bytes(m['big_from'])}), after "
        f"{'144 (48 above 128 KiB)' if m.get('warmup', 0) is None else m.get('warmup', 0)} unrecorded "
        "rounds of each size.",
        "",
        ({"barrier": "Times in ms: the slowest rank's median time of one barrier (bench/barrier_bench.c)",
          "allgather": "Times in ms: the slowest rank's median time of one allgather (bench/allgather_bench.c)"}
         .get(common.COLLECTIVE,
              "Times in ms: the slowest rank's median completion time (bench/bcast_bench.c, thesis §4.2.1)"))
        + (f", the median of {m['repeat']} runs of mpirun per peer and p, the peers taking turns. "
           if m.get("repeat", 1) > 1 else ". ") +
        "\"best tuned\" is the fastest of the fixed algorithms of coll tuned at that point; "
        "\"fastest peer\" the fastest of every peer but ipmc at its defaults, and \"ipmc / fastest\" "
        f"is marked ✓ within {NEVER_SLOWER} (never slower), ✗ beyond in every pairing of the runs, "
        "~ noisy: beyond in the medians, but the runs of ipmc and that peer overlap within the margin. "
        + (f"Where ipmc missed a target, every peer ran {m['confirm']} more time(s) at that point, the peers "
           "taking turns; such a cell is the median run, with the range of the runs in brackets. "
           if m.get("confirm") else "") +
        "A cell that is not a time says why the point is missing.",
        "",
        "Peers: " + "; ".join(f"`{p['name']}` = {p['label']}" for p in res.peers) + ".",
    ]
    for nbytes in res.sizes:
        lines += ["", f"## {size_heading(res, nbytes)}", "",
                  size_table(res, nbytes)]
    lines += ["", "## Targets", ""]
    lines += [f"- **{t['name']}**: {t['verdict']}. {t['detail']}" for t in targets]
    lines += ["", "## Every peer", ""]
    for nbytes in res.sizes:
        lines += [f"### {human_bytes(nbytes)}", "", every_peer_table(res, nbytes), ""]
    Path(path).write_text("\n".join(lines) + "\n")


STYLE = {
    "ipmc": dict(color="tab:blue", lw=2.8, marker="o", ms=5, zorder=6),
    "ipmc-mcast": dict(color="tab:purple", lw=1.8, marker="s", ms=4, zorder=5),
    "default": dict(color="tab:green", lw=1.8, marker="^", ms=4, zorder=4),
    "han": dict(color="tab:red", lw=1.5, marker="v", ms=4, zorder=4),
    "best tuned": dict(color="tab:orange", lw=2.2, marker="D", ms=4, zorder=5),
    "tuned": dict(color="0.6", lw=0.8, zorder=2),
}


def plot_time_vs_p(path, res):
    """One subplot per size, log time against p (thesis figures 18 and 20)."""
    import matplotlib.pyplot as plt
    n = len(res.sizes)
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.9 * rows + 0.8), squeeze=False)
    handles = {}
    for ax, nbytes in zip(axes.flat, res.sizes):
        for peer in res.tuned_peers():
            xs, ys = series(res, peer, nbytes)
            if xs:
                handles["tuned, each fixed algorithm"] = ax.plot(xs, ys, **STYLE["tuned"])[0]
        best = [(p, res.best_tuned(p, nbytes)) for p in res.hosts]
        best = [(p, peer, us) for p, (peer, us) in best if us is not None]
        if best:
            handles["best fixed tuned algorithm (its number)"] = ax.plot(
                [b[0] for b in best], [b[2] / 1000 for b in best], **STYLE["best tuned"])[0]
            for p, peer, us in best:
                runs = res.runs(peer, p, nbytes)
                if len(runs) > 1:
                    ax.vlines(p, min(runs) / 1000, max(runs) / 1000, color=STYLE["best tuned"]["color"],
                              lw=STYLE["best tuned"]["lw"] + 2, alpha=0.4, zorder=STYLE["best tuned"]["zorder"])
                ax.annotate(peer.replace("tuned-", "").replace("-seg", "/"), (p, us / 1000), fontsize=6,
                            color="tab:orange", xytext=(0, 5), textcoords="offset points", ha="center")
        for peer in ("han", "default", "ipmc-mcast", "ipmc"):
            xs, ys = series(res, peer, nbytes)
            if xs:
                handles[peer] = ax.plot(xs, ys, **STYLE[peer])[0]
                # The range of a point's runs where it ran more than once.
                for p in xs:
                    runs = res.runs(peer, p, nbytes)
                    if len(runs) > 1:
                        ax.vlines(p, min(runs) / 1000, max(runs) / 1000, color=STYLE[peer]["color"],
                                  lw=STYLE[peer]["lw"] + 2, alpha=0.4, zorder=STYLE[peer]["zorder"])
        handles[f"wire limit (bytes × 8 / {res.meta['rate']})"] = ax.axhline(
            res.wire_us(nbytes) / 1000, color="black", ls="--", lw=1)
        ax.set_yscale("log")
        readable_log_axis(ax)
        ax.set_title(human_bytes(nbytes))
        ax.set_xlabel("processes p (one per host)")
        ax.set_ylabel("time [ms]")
        ax.set_xticks(res.hosts if len(res.hosts) <= 16 else res.hosts[::2])
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.suptitle(f"MPI_Bcast completion time of the slowest rank (median; bars: the range of repeated runs), "
                 f"links at {res.meta['rate']}")
    ncol = min(4, len(handles))
    legend_in = 0.28 * math.ceil(len(handles) / ncol) + 0.2
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=ncol, fontsize=9)
    fig.tight_layout(rect=(0, legend_in / fig.get_figheight(), 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def readable_log_axis(ax):
    """Plain numbers on a log axis (0.05, 2, 300 rather than powers of ten)."""
    from matplotlib.ticker import FuncFormatter, LogLocator
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def series(res, peer, nbytes):
    pts = [(p, res.time(peer, p, nbytes)) for p in res.hosts]
    pts = [(p, us / 1000) for p, us in pts if us is not None]
    return [p for p, _ in pts], [ms for _, ms in pts]


def per_rank_sizes(res):
    chosen = [s for s in PER_RANK_SIZES if s in res.sizes]
    if not chosen:
        step = max(1, len(res.sizes) // 3)
        chosen = res.sizes[::step][:3]
    return chosen


def plot_per_rank(path, res):
    """Per-rank completion times at the largest p (thesis figure 19)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    p = res.largest_p()
    sizes = per_rank_sizes(res)
    fig, axes = plt.subplots(1, len(sizes), figsize=(5.2 * len(sizes), 4.4), squeeze=False)
    for ax, nbytes in zip(axes.flat, sizes):
        best, _ = res.best_tuned(p, nbytes)
        highest = 0.0
        for peer, style in (("default", "default"), (best, "best tuned"), ("ipmc-mcast", "ipmc-mcast"),
                            ("ipmc", "ipmc")):
            pt = res.point(peer, p, nbytes) if peer else None
            if not pt or pt["status"] != "ok":
                continue
            ranks = sorted(pt["per_rank_us"].items(), key=lambda kv: int(kv[0]))
            ys = [us / 1000 for _, us in ranks]
            highest = max([highest] + ys)
            label = f"best tuned ({best})" if style == "best tuned" else peer
            ax.plot([int(r) for r, _ in ranks], ys, label=label, **STYLE[style])
        wire = res.wire_us(nbytes) / 1000
        if wire <= 1.5 * highest:
            ax.axhline(wire, color="black", ls="--", lw=1, label="wire limit")
        ax.set_ylim(bottom=0)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"{human_bytes(nbytes)}, p = {p}")
        ax.set_xlabel("rank")
        ax.set_ylabel("completion time [ms]")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"Per-rank MPI_Bcast completion time (median over rounds), links at {res.meta['rate']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def selection_notes(runs):
    """Which component served MPI_Bcast on MPI_COMM_WORLD in each run, against the expectation."""
    notes, by_peer = [], {}
    for run in runs:
        if run["status"] == "cluster-failed":
            continue
        by_peer.setdefault(run["peer"], []).append(run)
    for peer, rs in by_peer.items():
        expected = rs[0]["expected"]
        wrong = [f"p={r['p']}: {r['serving'] or 'nothing reported'}" for r in rs
                 if set(r["serving"]) != {expected} or sum(r["serving"].values()) != r.get("np", r["p"])]
        line = f"{peer}: {collective_name()} served by {expected} on every rank of MPI_COMM_WORLD in " \
               f"{len(rs) - len(wrong)} of {len(rs)} runs"
        if wrong:
            line += " (otherwise " + "; ".join(wrong) + ")"
        noted = [r for r in rs if r.get("note")]
        if noted:
            line += f"; in {len(noted)} of them {noted[0]['note']}"
        algs = [r.get("ipmc_algorithms") for r in rs if r.get("ipmc_algorithms")]
        if algs:
            total = {}
            for a in algs:
                for k, v in a.items():
                    total[k] = total.get(k, 0) + v
            line += f"; ipmc's algorithms on rank 0 ({common.COLLECTIVE}s): " + \
                    ", ".join(f"{k} {v}" for k, v in total.items() if v)
        notes.append(line)
    return notes


def collective_name():
    calls = {"ibcast": "MPI_Ibcast", "persistent": "MPI_Bcast_init and MPI_Start"}
    return {"barrier": "MPI_Barrier", "allgather": "MPI_Allgather"}.get(
        common.COLLECTIVE, calls.get(common.CALL, "MPI_Bcast"))


def size_heading(res, nbytes):
    """A size's heading: the size and the wire limit (a barrier has neither)."""
    if common.COLLECTIVE == "barrier":
        return "MPI_Barrier"
    if common.COLLECTIVE == "allgather":
        return f"{human_bytes(nbytes)} per rank (one block {human_ms(res.wire_us(nbytes))} ms at the link rate)"
    return f"{human_bytes(nbytes)} (wire limit {human_ms(res.wire_us(nbytes))} ms)"


def report(out, data, plots=True):
    """Writes results.csv, results.json, table.md and the plots; prints the summary."""
    common.COLLECTIVE = data["metadata"].get("collective", "bcast")
    common.CALL = data["metadata"].get("call", "bcast")
    plots = plots and common.COLLECTIVE == "bcast"
    res = Results(data)
    targets = evaluate_targets(res)
    data["targets"] = targets
    data["selection"] = selection_notes(data["runs"])
    write_results_csv(out / "results.csv", data)
    (out / "results.json").write_text(json.dumps(data, indent=1))
    write_table_md(out / "table.md", res, targets)
    pictures = []
    if plots:
        plot_time_vs_p(out / "time_vs_p.png", res)
        plot_per_rank(out / "per_rank.png", res)
        pictures = [out / "time_vs_p.png", out / "per_rank.png"]

    print()
    print(f"== results ({res.meta['rate']}, times in ms: slowest rank's median completion)")
    for nbytes in [s for s in SUMMARY_SIZES if s in res.sizes] or res.sizes[:3]:
        print(f"\n{size_heading(res, nbytes)}\n")
        print(size_table(res, nbytes))
    problems = [r for r in data["runs"] if r["status"] != "ok"]
    if problems:
        print("\n== runs that did not finish")
        for r in problems:
            print(f"  p={r['p']} {r['peer']}: {r['status']} (exit {r['rc']})")
            if r.get("error"):
                print("    " + r["error"].replace("\n", "\n    "))
    print(f"\n== who served {collective_name()} (coll_base_verbose; ipmc's counters through MPI_T)")
    for note in data["selection"]:
        print(f"  {note}")
    print("\n== targets")
    for t in targets:
        print(f"  {t['name']}\n      {t['verdict'].upper()}: {t['detail']}")
    print("\n== files")
    for f in [out / "table.md", out / "results.csv", out / "results.json", *pictures]:
        print(f"  {f}")
