"""Constants, the collective measured, units and their parsing."""
import argparse
import re
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
# The program itself: the runner starts it again inside the cluster (--inner).
PROGRAM = REPO / "scripts" / "compare"
CLUSTER = REPO / "tests" / "cluster" / "cluster.sh"
KIB, MIB = 1024, 1024 * 1024
FULL_SIZES = [16, 256, 1024, 4096, 8192, 65536, 262144, MIB, 4 * MIB]
QUICK_SIZES = [4096, 65536, MIB]
FULL_HOSTS = list(range(2, 17))
QUICK_HOSTS = [2, 4, 6, 8]
# Besides every unsegmented fixed algorithm: the chain and the pipeline with
# the segment size of ipmc's own fragmented chain, so that large messages meet
# tuned's algorithms at their best.
FULL_PEERS = ["ipmc", "ipmc-mcast", "default", "han", "tuned-*", "tuned-2-seg64k", "tuned-3-seg64k"]
# Strong at 4 KiB .. 1 MiB: binomial tree, pipeline (fragmented chain),
# scatter + ring allgather.
QUICK_PEERS = ["ipmc", "default", "han", "tuned-6", "tuned-3-seg64k", "tuned-9"]
# The peers of --collective barrier and allgather by default.
BARRIER_PEERS = ["ipmc", "ipmc-multicast", "default", "han", "tuned-*"]
ALLGATHER_SIZES = [1024, 4096, 65536]
# The collective measured (--collective): bcast or barrier.
COLLECTIVE = "bcast"
# How the broadcast benchmark makes each broadcast (bcast_bench --call).
CALL = "bcast"
# ipmc at its defaults within this factor of the fastest peer: never slower.
NEVER_SLOWER = 1.05
# Sizes of the per-rank plot (thesis figure 19), when measured.
PER_RANK_SIZES = [4096, 65536, MIB]
# Sizes whose table the summary prints.
SUMMARY_SIZES = [4096, 65536, MIB]
# The component that should serve MPI_Bcast on MPI_COMM_WORLD, per peer kind.
EXPECTED_COMPONENT = {"ipmc": "ipmc", "default": "tuned", "tuned": "tuned", "han": "han"}
# What a han run that created no sub-communicator means (Open MPI's
# coll_han_subcomms.c: han is "not yet optimized for a single process per node
# case" and then gives every collective back to the component below it).
HAN_STEPS_ASIDE = ("han was selected on MPI_COMM_WORLD but created no sub-communicator: with one process "
                   "per node han steps aside at its first collective, so tuned's default broadcast served")
# coll components that do not provide a blocking MPI_Bcast of their own.
NOT_BCAST = {"libnbc", "sync", "monitoring", "inter", "self"}
# The components of Open MPI 4.1 and 5.0 that serve MPI_Ibcast, and
# MPI_Bcast_init (with ipmc, which serves both).
IBCAST = {"ipmc", "libnbc", "adapt", "hcoll", "portals4", "ucc"}
BCAST_INIT = {"ipmc", "libnbc"}


def fail(message):
    print(f"compare: {message}", file=sys.stderr)
    sys.exit(2)


def parse_bytes(text):
    """'4096', '64k', '1M' -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)(?:i?[bB])?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size in bytes: {text!r}")
    return int(m.group(1)) * {"": 1, "k": KIB, "m": MIB, "g": 1024 * MIB}[m.group(2).lower()]


def parse_size_list(text):
    sizes = [parse_bytes(s) for s in text.split(",") if s.strip()]
    if not sizes or min(sizes) < 1 or max(sizes) > 1024 * MIB:
        raise argparse.ArgumentTypeError("sizes must be 1 byte to 1 GiB")
    return sorted(set(sizes))


def parse_host_list(text):
    """'2,4,8', '2-16' or '2..16' (and mixtures) -> sorted host counts."""
    hosts = set()
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:(?:-|\.\.)\s*(\d+)\s*)?", part)
        if not m:
            raise argparse.ArgumentTypeError(f"not a host count or range: {part!r}")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        hosts.update(range(lo, hi + 1))
    if not hosts or min(hosts) < 1 or max(hosts) > 64:
        raise argparse.ArgumentTypeError("host counts must be 1 to 64")
    return sorted(hosts)


def default_burst(rate_bps):
    """tbf's burst for a link of this rate: what it sends in 200 µs, at least
    two full frames (3 kB)."""
    return f"{max(3, round(rate_bps / 8 * 200e-6 / 1000))}kb"


def rate_bits_per_second(rate):
    """A tc rate ('100mbit', '1gbit', '12500kbps') in bits per second."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)(bit|bps)", rate.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a tc rate: {rate!r} (e.g. 100mbit)")
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
    return float(m.group(1)) * scale * (8 if m.group(3) == "bps" else 1)


def human_bytes(n):
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB} MiB"
    if n >= KIB and n % KIB == 0:
        return f"{n // KIB} KiB"
    return f"{n} B"


def human_ms(us):
    """Microseconds as milliseconds with three significant digits."""
    if us is None:
        return "–"
    ms = us / 1000
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.2f}"
    return f"{ms:.3f}"
