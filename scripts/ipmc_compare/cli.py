"""The command line and the order of work."""
import argparse
import datetime
import json
import os
import shlex
import sys
import time
from pathlib import Path

import ipmc_compare

from . import common
from .common import ALLGATHER_SIZES, BARRIER_PEERS, FULL_HOSTS, FULL_PEERS, FULL_SIZES, MIB, QUICK_HOSTS, QUICK_PEERS, QUICK_SIZES, REPO, default_burst, fail, human_bytes, parse_bytes, parse_host_list, parse_size_list, rate_bits_per_second
from .peers import expand_peers, tuned_algorithms
from .report import ensure_matplotlib, report
from .results import Results, collect, merge_results
from .runner import build_bench, build_component, check_tools, cluster_options, component_search_path, machine_metadata, run_cluster, run_inner, write_plan
from .targets import points_to_confirm


def options(argv):
    ap = argparse.ArgumentParser(
        prog="scripts/compare", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=ipmc_compare.__doc__,
        epilog="Full run defaults: --hosts 2-16, sizes 16 B .. 4 MiB, peers "
               + ",".join(FULL_PEERS) + ", --rounds 11 --big-rounds 3 --big-from 1M --timeout 1800.\n"
               "--quick defaults: --hosts " + ",".join(map(str, QUICK_HOSTS)) + ", --sizes 4k,64k,1M, --peers "
               + ",".join(QUICK_PEERS) + ", --rounds 3 --big-rounds 2 --timeout 300.\n"
               "Explicit options override either set. Needs root; every MPI process runs inside\n"
               "network namespaces that the run creates and deletes.")
    ap.add_argument("--collective", choices=("bcast", "barrier", "allgather"), default="bcast",
                    help="what to compare: MPI_Bcast (default), MPI_Barrier or MPI_Allgather")
    ap.add_argument("--quick", action="store_true",
                    help="a short comparison (p = 2,4,6,8; 4 KiB, 64 KiB, 1 MiB; six peers; few rounds)")
    ap.add_argument("--hosts", type=parse_host_list, help="host counts p: list and ranges, e.g. 2,4,8 or 2-16")
    ap.add_argument("--sizes", type=parse_size_list, help="message sizes in bytes (k, M suffixes), e.g. 4k,64k,1M")
    ap.add_argument("--peers", help="comma-separated peer configurations (see below)")
    ap.add_argument("--rounds", type=int, help="benchmark rounds per target and size (median)")
    ap.add_argument("--big-rounds", type=int, help="rounds for sizes of --big-from bytes or more")
    ap.add_argument("--big-from", type=parse_bytes, help="the size from which --big-rounds applies (default 1M)")
    ap.add_argument("--warmup", type=int,
                    help="unrecorded rounds of each size before its rounds (default: the benchmark's, 144 "
                         "up to 128 KiB and 48 above): connections are made and ipmc's "
                         "automatic choice has measured its candidates (by a class's 66th call on one "
                         "level; over two levels by the 72nd up to 8 KiB, 138th up to 128 KiB, 46th above)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="mpirun runs per peer and p, the peers taking turns (default 1); a point is "
                         "the run with the median time: on this testbed two runs of one configuration "
                         "differ by up to 25 %% at 1 and 4 KiB")
    ap.add_argument("--confirm", type=int, default=2,
                    help="more runs of every peer at each point where ipmc missed a target, the peers "
                         "taking turns (default 2): a miss is reported only where it holds across the "
                         "runs, and as noisy where the runs of one configuration spread more than it")
    ap.add_argument("--rate", default="100mbit", help="tc rate of every link, both directions (default 100mbit)")
    ap.add_argument("--burst",
                    help="tc tbf burst of every link (default: what the link sends in 200 µs, at least "
                         "3kb, two full frames: up to 100 Mbit/s even a small message crosses a link at the "
                         "link's rate, as on a real switch port; 25 kB at 1 Gbit/s, 250 kB at 10 Gbit/s, "
                         "which tbf needs to reach such rates on this testbed)")
    ap.add_argument("--call", choices=("bcast", "ibcast", "persistent"), default="bcast",
                    help="how the broadcast benchmark makes each broadcast: MPI_Bcast (default), "
                         "MPI_Ibcast and MPI_Wait, or MPI_Start and MPI_Wait of a persistent "
                         "broadcast (MPI_Bcast_init)")
    ap.add_argument("--slots", type=int, default=1,
                    help="ranks on each emulated host (default 1; --hosts 1 --slots 8: one node of 8 ranks)")
    ap.add_argument("--mtu", type=int, default=1500,
                    help="MTU of every link (default 1500; 9000: jumbo frames)")
    ap.add_argument("--loss", type=int, default=0,
                    help="percent of the multicast datagrams every host drops on receipt (nftables; default 0)")
    ap.add_argument("--timeout", type=int, help="seconds one mpirun may take before it is stopped")
    ap.add_argument("--out", type=Path, help="output directory (default build/compare/<UTC time>)")
    ap.add_argument("--component-dir", type=Path,
                    help="directory holding an installed mca_coll_ipmc.so (default: build and install it "
                         "into build/compare/install)")
    ap.add_argument("--bench", type=Path, help="a compiled bcast_bench (default: compile it into build/compare/bin)")
    ap.add_argument("--no-plots", action="store_true", help="write no PNG (and need no matplotlib)")
    ap.add_argument("--report-only", type=Path, nargs="+", metavar="DIR",
                    help="run nothing: redo table, plots and summary from DIR/results.json; with "
                         "several DIRs, merge their results (a later one's point replaces an "
                         "earlier one's) into --out")
    ap.add_argument("--inner", metavar="PLAN", help="internal: run one cluster's jobs (used inside cluster.sh)")
    args = ap.parse_args(argv)

    common.COLLECTIVE = args.collective
    if args.call != "bcast" and args.collective != "bcast":
        ap.error("--call is for --collective bcast")
    common.CALL = args.call
    quick = args.quick
    args.hosts = args.hosts or (QUICK_HOSTS if quick else FULL_HOSTS)
    default_sizes = ALLGATHER_SIZES if common.COLLECTIVE == "allgather" else QUICK_SIZES if quick else FULL_SIZES
    args.sizes = [0] if common.COLLECTIVE == "barrier" else args.sizes or default_sizes
    args.peer_names = [p.strip() for p in args.peers.split(",") if p.strip()] if args.peers else \
        BARRIER_PEERS if common.COLLECTIVE != "bcast" else QUICK_PEERS if quick else FULL_PEERS
    if common.COLLECTIVE != "bcast":
        args.no_plots = True
        args.rounds = args.rounds or (200 if common.COLLECTIVE == "barrier" else 50)
    args.rounds = args.rounds or (3 if quick else 11)
    args.big_rounds = args.big_rounds or (2 if quick else 3)
    args.big_from = args.big_from if args.big_from is not None else MIB
    args.timeout = args.timeout or (300 if quick else 1800)
    args.rate_bps = rate_bits_per_second(args.rate)
    args.burst = args.burst or default_burst(args.rate_bps)
    if args.rounds < 1 or args.big_rounds < 1 or args.timeout < 10:
        ap.error("rounds must be 1 or more, the timeout 10 s or more")
    if not 1 <= args.repeat <= 50 or not 0 <= args.confirm <= 50:
        ap.error("--repeat must be 1 to 50, --confirm 0 to 50")
    if not 1 <= args.slots <= 64 or not 0 <= args.loss <= 100:
        ap.error("--slots must be 1 to 64, --loss 0 to 100")
    if not 1280 <= args.mtu <= 65535:
        ap.error("--mtu must be 1280 to 65535")
    if min(args.hosts) * args.slots < 2:
        ap.error("a broadcast needs 2 ranks: one host needs --slots 2 or more")
    return args


def output_directory(args):
    if args.out:
        out = args.out
    else:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        out = REPO / "build" / "compare" / stamp
        latest = out.parent / "latest"
        out.mkdir(parents=True, exist_ok=False)
        if latest.is_symlink() or latest.is_file():
            latest.unlink()
        if latest.exists():
            print(f"compare: {latest} is a directory of its own; it stays, and does not point to this run",
                  file=sys.stderr)
        else:
            latest.symlink_to(stamp)
    (out / "raw").mkdir(parents=True, exist_ok=True)
    return out.resolve()


def main(argv):
    args = options(argv)
    if args.inner:
        return run_inner(args.inner)
    if not args.no_plots:
        ensure_matplotlib()
    if args.report_only:
        dirs = [d.resolve() for d in args.report_only]
        if len(dirs) > 1 and not args.out:
            fail("merging several result directories needs --out")
        for d in dirs:
            if not (d / "results.json").exists():
                fail(f"no results.json in {d}: it holds no comparison yet (run scripts/compare first)")
        out = args.out.resolve() if args.out else dirs[0]
        out.mkdir(parents=True, exist_ok=True)
        data = merge_results([json.loads((d / "results.json").read_text()) for d in dirs])
        report(out, data, plots=not args.no_plots)
        return 0

    check_tools()
    started = time.monotonic()
    algs = tuned_algorithms()
    peers = expand_peers(args.peer_names, algs)
    out = output_directory(args)
    build_dir = REPO / "build" / "compare"
    component_dir = (args.component_dir or build_component(build_dir)).resolve()
    if not (component_dir / "mca_coll_ipmc.so").exists():
        fail(f"no mca_coll_ipmc.so in {component_dir}")
    bench = (args.bench or build_bench(build_dir)).resolve()
    search_path = component_search_path(component_dir)
    os.environ.update(OMPI_MCA_mca_base_component_path=search_path,
                      OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")

    print(f"== comparing {', '.join(p['name'] for p in peers)}")
    print(f"   p = {', '.join(map(str, args.hosts))}; sizes {', '.join(human_bytes(s) for s in args.sizes)}; "
          f"rounds {args.rounds} ({args.big_rounds} from {human_bytes(args.big_from)}); links at {args.rate}")
    print(f"   output: {out}", flush=True)

    records, interrupted = [], False
    for p in args.hosts:
        plan_path, plan = write_plan(out, p, peers, args, bench)
        done, interrupted = run_cluster(p, plan_path, plan, args)
        records += done
        if interrupted:
            break
    runs, points = collect(records, peers, args)
    # A point where ipmc missed a target is measured again, every peer, the
    # peers taking turns: a verdict then rests on several runs (`versus`).
    recheck = points_to_confirm(Results({"metadata": {"sizes": args.sizes, "hosts": args.hosts,
                                                      "rate_bits_per_second": args.rate_bps},
                                         "peers": peers, "points": points}))
    for p, sizes in sorted(recheck.items()) if args.confirm and not interrupted else []:
        print(f"== p = {p}: ipmc missed a target at {', '.join(map(human_bytes, sizes))}; "
              f"{args.confirm} more run(s) of every peer there", flush=True)
        plan_path, plan = write_plan(out, p, peers, args, bench, sizes=sizes,
                                     reps=range(args.repeat, args.repeat + args.confirm), tag="-confirm")
        done, interrupted = run_cluster(p, plan_path, plan, args)
        records += done
        if interrupted:
            break
    if interrupted:
        print("compare: interrupted; reporting what was measured", file=sys.stderr)
    runs, points = collect(records, peers, args)

    metadata = machine_metadata()
    metadata.update({
        "runner": shlex.join(["scripts/compare", *argv]), "collective": common.COLLECTIVE,
        "call": common.CALL,
        "rate": args.rate, "rate_bits_per_second": args.rate_bps, "burst": args.burst,
        "rounds": args.rounds, "big_rounds": args.big_rounds, "big_from": args.big_from,
        "warmup": args.warmup, "repeat": args.repeat, "confirm": args.confirm,
        "confirmed": {str(p): sizes for p, sizes in recheck.items()} if args.confirm else {},
        "sizes": args.sizes, "hosts": args.hosts, "timeout_s": args.timeout,
        "slots": args.slots, "loss_percent": args.loss, "mtu": args.mtu,
        "cluster": f"tests/cluster/cluster.sh --rate {args.rate} --burst {args.burst} "
                   f"{' '.join(cluster_options(args))} P -- ({args.slots} rank(s) per host)",
        "component_dir": str(component_dir), "bench": str(bench),
        "environment": {"OMPI_MCA_mca_base_component_path": search_path},
        "duration_s": round(time.monotonic() - started, 1),
    })
    data = {"metadata": metadata, "peers": peers, "runs": runs, "points": points}
    report(out, data, plots=not args.no_plots)
    if interrupted:
        return 130
    print(f"\ncompare: done in {metadata['duration_s']:.0f} s; results in {out}")
    return 0
