"""Compare ipmc's MPI_Bcast with Open MPI's own broadcasts on an emulated cluster
(with --collective barrier or allgather, ipmc's MPI_Barrier or MPI_Allgather
with Open MPI's).

For each number of hosts p, the runner brings up one emulated cluster
(tests/cluster/cluster.sh: network namespaces on a bridge, one rank per host,
every link limited to --rate, by default the thesis's Fast Ethernet), runs the
broadcast benchmark (bench/bcast_bench.c, the thesis's method of §4.2.1) once
per peer configuration inside it, and tears the cluster down. A peer is a set
of MCA parameters that chooses who serves MPI_Bcast:

  ipmc              ipmc selected (coll_ipmc_priority 100), its defaults otherwise
                    (the automatic, measured choice of algorithm)
  ipmc-thesis       ipmc with the thesis's fixed thresholds (crossover_nodes 4,
                    crossover_size 1 MiB)
  ipmc-mcast        ipmc with the multicast algorithm at every p (crossover_nodes 2;
                    messages above coll_ipmc_crossover_size still take the chain)
  ipmc-noauth       ipmc with unauthenticated datagrams (coll_ipmc_authenticate 0):
                    what the tag costs
  ipmc-nosegment    ipmc giving each node's ranks the message by Open MPI's broadcast
                    (coll_ipmc_node_segment 0), not its shared segment
  ipmc-slots        ipmc's node's ranks copying the message through its shared
                    segment's slots (coll_ipmc_node_segment 1)
  ipmc-pull         ipmc's node's ranks copying the message straight from their
                    leader's memory (coll_ipmc_node_segment 2); ipmc at its
                    defaults measures both ways and keeps the faster
  ipmc-linear, ipmc-chain, ipmc-multicast
                    ipmc forced to one of its algorithms (coll_ipmc_bcast_algorithm)
  ipmc-chain-segS   ipmc forced to its chain with segments of S bytes
                    (coll_ipmc_chain_segment_size; e.g. ipmc-chain-seg8k)
  ipmc-fixedS       ipmc with the fixed rule's crossover at S bytes
                    (coll_ipmc_fixed_crossover_size; e.g. ipmc-fixed64k): what
                    serves calls no measurement decided, such as MPI_Ibcast alone
  default           Open MPI's own selection (ipmc not loaded)
  han               Open MPI's hierarchical component (coll_han_priority 100)
  tuned-N           tuned with fixed bcast algorithm N (coll_tuned_bcast_algorithm)
  tuned-N-segS      the same with segments of S bytes (e.g. tuned-3-seg64k: the
                    pipeline, i.e. a fragmented chain, with 64 KiB segments)
  tuned-* (tuned-all) every fixed algorithm of tuned, unsegmented

--slots S runs S ranks on each emulated host (--hosts 1 --slots 8 is one node
of 8 ranks, where ipmc leaves MPI_Bcast to Open MPI), and --loss PCT makes every
host drop PCT % of the multicast datagrams it receives (nftables). The time of a
point (peer, p, size) is the benchmark's summary max_us: the slowest rank's
median completion time (with --repeat R, the median of R runs of mpirun, the
peers taking turns). Each point of the table marks ipmc at its defaults
against the fastest peer measured there. The runner writes, into --out
(default build/compare/<UTC time>/, with build/compare/latest pointing there):

  results.csv   one summary row per (peer, p, size) and one row per rank
  results.json  every figure, every mpirun's exact command line, metadata
  table.md      per size, a table over p: ipmc, best fixed tuned algorithm,
                default, han and the ratios peer time / ipmc time
  time_vs_p.png time against p per size, with the wire limit (thesis figs. 18, 20)
  per_rank.png  per-rank completion times at the largest p (thesis fig. 19)
  raw/          each run's output

and prints the tables of a few sizes, the plots' paths and the evaluation of
the project's targets. Run as root (network namespaces):

  scripts/compare                  # full comparison: p = 2..16, nine sizes (hours)
  scripts/compare --quick          # p = 2,4,6,8, three sizes, six peers (minutes)
  scripts/compare --hosts 2,3 --sizes 4096,64k --peers ipmc,default,tuned-6
  scripts/compare --hosts 1 --slots 8 --sizes 64k --peers ipmc,default,tuned-*
  scripts/compare --hosts 16 --loss 5 --sizes 64k,1m
  scripts/compare --report-only build/compare/latest   # redo table, plots, summary
  scripts/compare --collective barrier --hosts 8,16    # MPI_Barrier (bench/barrier_bench.c)

With --collective barrier the benchmark is bench/barrier_bench.c (one point per
p, shown as 0 bytes), tuned-N is tuned's fixed barrier N, ipmc-multicast
forces ipmc's multicast barrier (coll_ipmc_barrier_algorithm 2), and no plot
is drawn. With --collective allgather it is bench/allgather_bench.c, --sizes
are bytes per rank (default 1k,4k,64k), tuned-N is tuned's fixed allgather N,
ipmc-multicast forces ipmc's (coll_ipmc_allgather_algorithm 2).

Every mpirun runs inside the cluster's namespaces under `timeout`; a run that
times out or fails is recorded and reported, and the comparison goes on.
"""
