"""The results: runs collected into points (peer, p, size), medians of repeats, results.csv."""
import csv
from pathlib import Path

from . import common
from .common import EXPECTED_COMPONENT, HAN_STEPS_ASIDE
from .parse import error_tail, parse_bench_output, parse_ipmc_algorithms, parse_selection
from .runner import rank_files


def collect(records, peers, args):
    """Runs and points from the job records and their output files."""
    runs, points = [], []
    kinds = {peer["name"]: peer["kind"] for peer in peers}
    for rec in records:
        log = rec["log"]
        out = Path(f"{log}.out").read_text(errors="replace") if Path(f"{log}.out").exists() else ""
        measured = parse_bench_output(out)
        ranks = [f.read_text(errors="replace") for f in rank_files(log)]
        run = dict(rec)
        run["serving"], other_comms = parse_selection(ranks)
        run["expected"] = EXPECTED_COMPONENT[kinds[rec["peer"]]]
        if rec["p"] == 1 and rec["peer"] in ("ipmc", "ipmc-mcast", "ipmc-thesis", "ipmc-noauth"):
            # A communicator on one node is Open MPI's unless an algorithm is forced.
            run["expected"] = "tuned"
            run["note"] = "ipmc leaves a communicator on one node to Open MPI's broadcast"
        if common.CALL != "bcast" and run["expected"] != "ipmc":
            # Of Open MPI's components only libnbc serves MPI_Ibcast and
            # MPI_Bcast_init here.
            run["expected"] = "libnbc"
        if kinds[rec["peer"]] == "han" and run["serving"] and other_comms == 0:
            run["note"] = HAN_STEPS_ASIDE
        if kinds[rec["peer"]] == "ipmc":
            run["ipmc_algorithms"] = parse_ipmc_algorithms(ranks)
        if rec["status"] != "ok" and "error" not in rec:
            run["error"] = error_tail(f"{log}.err") or error_tail(f"{log}.out")
        runs.append(run)
        for nbytes in rec.get("sizes") or args.sizes:
            point = {"peer": rec["peer"], "p": rec["p"], "bytes": nbytes}
            if nbytes in measured:
                point.update(status="ok", **measured[nbytes])
            else:
                point.update(status=rec["status"] if rec["status"] != "ok" else "missing")
            points.append(point)
    return runs, median_of_repeats(points)


def median_of_repeats(points):
    """One point per (peer, p, size): with --repeat, the run whose slowest
    rank's time is the median of the runs that measured it (the lower one
    of an even count), with every run's time in `repeats`."""
    groups = {}
    for point in points:
        groups.setdefault((point["peer"], point["p"], point["bytes"]), []).append(point)
    chosen = []
    for group in groups.values():
        ok = sorted((q for q in group if q["status"] == "ok"), key=lambda q: q["max_us"])
        if len(group) == 1:
            chosen.append(group[0])
        elif ok:
            point = dict(ok[(len(ok) - 1) // 2])
            point["repeats"] = [q["max_us"] for q in ok]
            chosen.append(point)
        else:
            chosen.append(group[0])
    return chosen


class Results:
    """Every point, with the look-ups the table, plots and targets need."""

    def __init__(self, data):
        self.data = data
        self.meta = data["metadata"]
        self.peers = data["peers"]
        self.sizes = data["metadata"]["sizes"]
        self.hosts = data["metadata"]["hosts"]
        self.rate = data["metadata"]["rate_bits_per_second"]
        self.points = {(pt["peer"], pt["p"], pt["bytes"]): pt for pt in data["points"]}

    def point(self, peer, p, nbytes):
        return self.points.get((peer, p, nbytes))

    def time(self, peer, p, nbytes):
        """The slowest rank's median completion time in µs, or None."""
        pt = self.point(peer, p, nbytes)
        return pt["max_us"] if pt and pt["status"] == "ok" else None

    def runs(self, peer, p, nbytes):
        """The times of every run of mpirun that measured this point."""
        pt = self.point(peer, p, nbytes)
        if not pt or pt["status"] != "ok":
            return []
        return pt.get("repeats") or [pt["max_us"]]

    def status(self, peer, p, nbytes):
        pt = self.point(peer, p, nbytes)
        return pt["status"] if pt else "not run"

    def has(self, peer):
        return any(peer == p["name"] for p in self.peers)

    def tuned_peers(self):
        return [p["name"] for p in self.peers if p["kind"] == "tuned"]

    def best_tuned(self, p, nbytes):
        """(peer, time) of the fastest fixed tuned algorithm at this point."""
        times = [(self.time(t, p, nbytes), t) for t in self.tuned_peers()]
        times = [(us, t) for us, t in times if us is not None]
        return (min(times)[1], min(times)[0]) if times else (None, None)

    def fastest(self, p, nbytes):
        """(peer, time) of the fastest peer other than ipmc at its defaults."""
        times = [(self.time(q["name"], p, nbytes), q["name"]) for q in self.peers if q["name"] != "ipmc"]
        times = [(us, q) for us, q in times if us is not None]
        return (min(times)[1], min(times)[0]) if times else (None, None)

    def wire_us(self, nbytes):
        """The message's bytes through one link at the rate: no broadcast is faster."""
        return nbytes * 8 / self.rate * 1e6

    def largest_p(self):
        measured = [p for p in self.hosts if any(pt["status"] == "ok" for (_, q, _), pt in self.points.items()
                                                 if q == p)]
        return max(measured) if measured else max(self.hosts)


def write_results_csv(path, data):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kind", "peer", "ranks", "bytes", "target", "median_us", "max_us", "min_us",
                    "max_over_min", "simple_max_us", "status"])
        for pt in data["points"]:
            if pt["status"] != "ok":
                w.writerow(["summary", pt["peer"], pt["p"], pt["bytes"], "", "", "", "", "", "", pt["status"]])
                continue
            w.writerow(["summary", pt["peer"], pt["p"], pt["bytes"], "", "", pt["max_us"], pt["min_us"],
                        pt["max_over_min"], pt["simple_max_us"], "ok"])
            for target, us in sorted(pt["per_rank_us"].items(), key=lambda kv: int(kv[0])):
                w.writerow(["rank", pt["peer"], pt["p"], pt["bytes"], target, us, "", "", "", "", "ok"])


def merge_results(datas):
    """One result set from several runs: peers, runs and points of all of them
    (for a point measured twice, the later run's), the first run's metadata
    with every run's command line."""
    if len(datas) == 1:
        return datas[0]
    peers, points, runs = {}, {}, []
    for data in datas:
        for peer in data["peers"]:
            peers[peer["name"]] = peer
        runs += data["runs"]
        for point in data["points"]:
            key = (point["peer"], point["p"], point["bytes"])
            if point["status"] == "ok" or key not in points:
                points[key] = point
    metadata = dict(datas[0]["metadata"])
    metadata["runner"] = " ; ".join(d["metadata"]["runner"] for d in datas)
    metadata["hosts"] = sorted({p for d in datas for p in d["metadata"]["hosts"]})
    metadata["sizes"] = sorted({s for d in datas for s in d["metadata"]["sizes"]})
    metadata["duration_s"] = sum(d["metadata"]["duration_s"] for d in datas)
    return {"metadata": metadata, "peers": list(peers.values()), "runs": runs,
            "points": sorted(points.values(), key=lambda q: (q["peer"], q["p"], q["bytes"]))}
