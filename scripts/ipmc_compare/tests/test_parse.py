"""The parsers of what the benchmark, Open MPI and ipmc print, on lines as they
print them, and the units of the command line.

    python3 -m unittest discover -s scripts -p 'test_*.py'
"""
import argparse
import unittest

from ipmc_compare import common
from ipmc_compare.common import parse_bytes, parse_host_list, parse_size_list
from ipmc_compare.peers import make_peer
from ipmc_compare.parse import parse_bench_output, parse_ipmc_algorithms, parse_selection
from ipmc_compare.results import median_of_repeats
from ipmc_compare.runner import cluster_options

BENCH = """\
bcast_bench: 4 ranks, root 0
rank,4,4096,1,216.9,,,,
rank,4,4096,2,196.8,,,,
rank,4,4096,3,183.9,,,,
summary,4,4096,,,216.9,183.9,1.180,356.6
rank,4,65536,1,5568.1,,,,
"""

SELECTION = """\
[h1:101] coll:base:comm_select: new communicator: MPI_COMM_WORLD (cid 0)
[h1:101] coll:base:comm_select: selecting      libnbc, priority  10, Enabled
[h1:101] coll:base:comm_select: selecting       tuned, priority  30, Enabled
[h1:101] coll:base:comm_select: selecting        ipmc, priority 100, Enabled
[h2:102] coll:base:comm_select: new communicator: MPI_COMM_WORLD (cid 0)
[h2:102] coll:base:comm_select: selecting       tuned, priority  30, Enabled
[h2:102] coll:base:comm_select: selecting        ipmc, priority 100, Disabled
[h2:102] coll:base:comm_select: new communicator: han node (cid 3)
"""

COUNTERS = ("ipmc_counters: coll_ipmc_bcasts=136 coll_ipmc_empty=0 coll_ipmc_ibcasts=0 "
            "coll_ipmc_linear_bcasts=0 coll_ipmc_linear_bcast_bytes=0 coll_ipmc_chain_bcasts=2 "
            "coll_ipmc_multicast_bcasts=122 coll_ipmc_previous_bcasts=12 coll_ipmc_binomial_bcasts=0 "
            "coll_ipmc_binary_bcasts=0 coll_ipmc_two_level_bcasts=0 coll_ipmc_sent=22494 "
            "coll_ipmc_barriers=30 coll_ipmc_multicast_barriers=8 coll_ipmc_linear_barriers=20 "
            "coll_ipmc_previous_barriers=2 coll_ipmc_two_level_barriers=0 "
            "coll_ipmc_barrier_releases_by_multicast=8 coll_ipmc_allgathers=5 "
            "coll_ipmc_multicast_allgathers=3 coll_ipmc_multicast_allgather_bytes=3072 "
            "coll_ipmc_ring_allgathers=1 coll_ipmc_previous_allgathers=1")


class Units(unittest.TestCase):
    def test_sizes_take_binary_suffixes(self):
        self.assertEqual(parse_bytes("4096"), 4096)
        self.assertEqual(parse_bytes("64k"), 65536)
        self.assertEqual(parse_bytes("1MiB"), 1 << 20)
        self.assertEqual(parse_size_list("1k, 4k,64K"), [1024, 4096, 65536])
        for bad in ("", "4x", "-1", "1.5k"):
            with self.assertRaises(argparse.ArgumentTypeError):
                parse_bytes(bad)
        with self.assertRaises(argparse.ArgumentTypeError):
            parse_size_list("2G")

    def test_the_cluster_gets_slots_mtu_and_loss_only_where_not_defaults(self):
        args = argparse.Namespace(slots=1, mtu=1500, loss=0)
        self.assertEqual(cluster_options(args), [])
        args = argparse.Namespace(slots=4, mtu=9000, loss=5)
        self.assertEqual(cluster_options(args), ["--slots", "4", "--mtu", "9000", "--loss", "5"])

    def test_host_lists_take_ranges(self):
        self.assertEqual(parse_host_list("2-4,8"), [2, 3, 4, 8])
        with self.assertRaises(argparse.ArgumentTypeError):
            parse_host_list("0")

    def test_segmented_peers_name_their_segment_size(self):
        chain = make_peer("ipmc-chain-seg8k", {})
        self.assertEqual(chain["mca"], ["--mca", "coll_ipmc_priority", "100", "--mca", "coll_ipmc_bcast_algorithm",
                                        "2", "--mca", "coll_ipmc_chain_segment_size", "8192"])
        pipeline = make_peer("tuned-3-seg64k", {3: "pipeline"})
        self.assertEqual(pipeline["mca"][-2:], ["coll_tuned_bcast_algorithm_segmentsize", "65536"])

    def test_a_fixed_crossover_peer_sets_it(self):
        fixed = make_peer("ipmc-fixed64k", {})
        self.assertEqual(fixed["mca"], ["--mca", "coll_ipmc_priority", "100", "--mca",
                                        "coll_ipmc_fixed_crossover_size", "65536"])


class Bench(unittest.TestCase):
    def test_only_sizes_with_a_summary_count(self):
        sizes = parse_bench_output(BENCH)
        self.assertEqual(list(sizes), [4096])
        s = sizes[4096]
        self.assertEqual((s["max_us"], s["min_us"], s["simple_max_us"]), (216.9, 183.9, 356.6))
        self.assertEqual(s["per_rank_us"], {1: 216.9, 2: 196.8, 3: 183.9})


class Selection(unittest.TestCase):
    def test_the_enabled_component_of_highest_priority_serves(self):
        serving, others = parse_selection([SELECTION])
        self.assertEqual(serving, {"ipmc": 1, "tuned": 1})
        self.assertEqual(others, 1, "han's node communicator")

    def test_a_nonblocking_or_persistent_broadcast_goes_to_a_component_that_has_it(self):
        # h2's ipmc is disabled: libnbc, below tuned, serves those there.
        h2_libnbc = "[h2:102] coll:base:comm_select: selecting      libnbc, priority  10, Enabled\n"
        text = SELECTION.replace("[h2:102] coll:base:comm_select: selecting       tuned",
                                 h2_libnbc + "[h2:102] coll:base:comm_select: selecting       tuned")
        try:
            for call in ("ibcast", "persistent"):
                common.CALL = call
                serving, _ = parse_selection([text])
                self.assertEqual(serving, {"ipmc": 1, "libnbc": 1}, call)
        finally:
            common.CALL = "bcast"


class IpmcStatistics(unittest.TestCase):
    def tearDown(self):
        common.COLLECTIVE = "bcast"

    def test_rank_0s_counters_per_algorithm_of_each_collective(self):
        common.COLLECTIVE = "bcast"
        self.assertEqual(parse_ipmc_algorithms(["rank,4,4096,1,216.9,,,,", COUNTERS]),
                         {"linear": 0, "chain": 2, "multicast": 122, "previous": 12,
                          "binomial": 0, "binary": 0, "two_level": 0})
        common.COLLECTIVE = "barrier"
        self.assertEqual(parse_ipmc_algorithms([COUNTERS]),
                         {"multicast": 8, "linear": 20, "previous": 2, "two_level": 0})
        common.COLLECTIVE = "allgather"
        self.assertEqual(parse_ipmc_algorithms([COUNTERS]),
                         {"multicast": 3, "ring": 1, "previous": 1})
        self.assertIsNone(parse_ipmc_algorithms(["nothing of ipmc's"]))


class Repeats(unittest.TestCase):
    def test_the_median_run_of_those_that_measured(self):
        def point(us, status="ok"):
            return {"peer": "ipmc", "p": 4, "bytes": 4096, "max_us": us, "status": status}
        (chosen,) = median_of_repeats([point(3.0), point(1.0), point(None, "timeout"), point(2.0)])
        self.assertEqual(chosen["max_us"], 2.0)
        self.assertEqual(chosen["repeats"], [1.0, 2.0, 3.0])
        (lower,) = median_of_repeats([point(4.0), point(1.0)])
        self.assertEqual(lower["max_us"], 1.0, "the lower of an even count")


if __name__ == "__main__":
    unittest.main()
