"""The peers: sets of MCA parameters that choose who serves the collective."""
import re
import subprocess

from . import common
from .common import fail, human_bytes, parse_bytes


def tuned_algorithms():
    """Tuned's fixed algorithms of the collective {number: name}, as this Open MPI lists them."""
    out = subprocess.run(["ompi_info", "--param", "coll", "tuned", "--level", "9", "--parsable"],
                         capture_output=True, text=True, check=True).stdout
    algs = {}
    for line in out.splitlines():
        m = re.match(rf"mca:coll:tuned:param:coll_tuned_{common.COLLECTIVE}_algorithm:enumerator:value:(\d+):(\S+)",
                     line)
        if m and int(m.group(1)) > 0:
            algs[int(m.group(1))] = m.group(2)
    if not algs:
        fail(f"ompi_info lists no fixed {common.COLLECTIVE} algorithm of coll tuned")
    return algs


# ipmc selected, with these parameters on top of its defaults, and the label.
IPMC_VARIANTS = {
    "ipmc": ([], "ipmc (its defaults)"),
    "ipmc-thesis": ([("crossover_nodes", "4")], "ipmc, the thesis's fixed thresholds"),
    "ipmc-mcast": ([("crossover_nodes", "2")], "ipmc, multicast at every p"),
    "ipmc-noauth": ([("authenticate", "0")], "ipmc, datagrams without authentication"),
    "ipmc-nosegment": ([("node_segment", "0")], "ipmc, Open MPI's broadcast inside nodes"),
    "ipmc-slots": ([("node_segment", "1")], "ipmc, its ranks copying through the segment's slots"),
    "ipmc-pull": ([("node_segment", "2")], "ipmc, its ranks copying from their leader's memory"),
}


def make_peer(name, algs):
    """A peer's description: its kind, MCA arguments and a label."""
    forced = {"ipmc-linear": 1, "ipmc-chain": 2, "ipmc-multicast": 3}
    if common.COLLECTIVE != "bcast":
        forced = {"ipmc-multicast": 2}
    if name in forced:
        return {"name": name, "kind": "ipmc", "label": f"ipmc forced to {name[5:]}",
                "mca": ["--mca", "coll_ipmc_priority", "100", "--mca", f"coll_ipmc_{common.COLLECTIVE}_algorithm",
                        str(forced[name])]}
    m = re.fullmatch(r"ipmc-chain-seg(\d+[kKmM]?)", name)
    if m and common.COLLECTIVE == "bcast":
        seg = parse_bytes(m.group(1))
        return {"name": name, "kind": "ipmc", "label": f"ipmc forced to chain, {human_bytes(seg)} segments",
                "mca": ["--mca", "coll_ipmc_priority", "100", "--mca", "coll_ipmc_bcast_algorithm", "2",
                        "--mca", "coll_ipmc_chain_segment_size", str(seg)]}
    m = re.fullmatch(r"ipmc-fixed(\d+[kKmM]?)", name)
    if m:
        size = parse_bytes(m.group(1))
        return {"name": name, "kind": "ipmc",
                "label": f"ipmc, the fixed rule's crossover at {human_bytes(size)}",
                "mca": ["--mca", "coll_ipmc_priority", "100", "--mca", "coll_ipmc_fixed_crossover_size", str(size)]}
    if name in IPMC_VARIANTS:
        setting, label = IPMC_VARIANTS[name]
        mca = ["--mca", "coll_ipmc_priority", "100"]
        for key, value in setting:
            mca += ["--mca", f"coll_ipmc_{key}", value]
        return {"name": name, "kind": "ipmc", "mca": mca, "label": label}
    if name == "default":
        return {"name": name, "kind": "default", "mca": ["--mca", "coll", "^ipmc"],
                "label": "Open MPI's default selection"}
    if name == "han":
        return {"name": name, "kind": "han", "mca": ["--mca", "coll", "^ipmc", "--mca", "coll_han_priority", "100"],
                "label": "han (coll_han_priority 100)"}
    m = re.fullmatch(r"tuned-(\d+)(?:-seg(\d+[kKmM]?))?", name)
    if m and int(m.group(1)) in algs:
        n = int(m.group(1))
        mca = ["--mca", "coll", "^ipmc", "--mca", "coll_tuned_use_dynamic_rules", "1",
               "--mca", f"coll_tuned_{common.COLLECTIVE}_algorithm", str(n)]
        label = f"tuned {n}: {algs[n]}"
        if m.group(2) and common.COLLECTIVE == "bcast":
            seg = parse_bytes(m.group(2))
            mca += ["--mca", "coll_tuned_bcast_algorithm_segmentsize", str(seg)]
            label += f", {human_bytes(seg)} segments"
        return {"name": name, "kind": "tuned", "mca": mca, "label": label, "algorithm": n}
    known = ", ".join(f"tuned-{n} ({a})" for n, a in sorted(algs.items()))
    fail(f"unknown peer {name!r}: use ipmc, ipmc-mcast, ipmc-thesis, ipmc-noauth, ipmc-nosegment, ipmc-slots, ipmc-pull, ipmc-linear, ipmc-chain, "
         f"ipmc-chain-segSIZE, ipmc-fixedSIZE, ipmc-multicast, default, han, tuned-* or one of {known}, "
         "optionally with -segSIZE")


def expand_peers(names, algs):
    peers, seen = [], set()
    for name in names:
        # tuned's two_proc barrier serves 2 processes only.
        every = [f"tuned-{n}" for n, a in sorted(algs.items()) if a != "two_proc"]
        for one in (every if name in ("tuned-*", "tuned-all") else [name]):
            if one not in seen:
                seen.add(one)
                peers.append(make_peer(one, algs))
    return peers
