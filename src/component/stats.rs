//! Per-communicator counters, printed at communicator free when
//! `coll_ipmc_print_statistics` is on.

use std::fmt::Write;

use crate::base::counters::{Datagrams, VERDICTS};
use crate::engine::algorithm::Algorithm;

/// Broadcasts and bytes of one algorithm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub calls: u64,
    pub bytes: u64,
}

impl Tally {
    /// One call of `bytes` bytes.
    pub fn record(&mut self, bytes: usize) {
        self.calls += 1;
        self.bytes += bytes as u64;
    }
}

/// What one rank did on one communicator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// Broadcasts of zero bytes, which need no communication.
    pub empty: u64,
    /// Nonblocking broadcasts ipmc served (counted with their algorithm too).
    pub nonblocking: u64,
    /// Times a node's lead moved to an earlier rank, and broadcasts whose
    /// node step went by handover (two levels).
    pub leader_moves: u64,
    pub handovers: u64,
    /// Bytes this rank wrote to or read from its node's shared segment
    /// (two levels).
    pub segment_bytes: u64,
    tallies: [Tally; Algorithm::ALL.len()],
    pub datagrams: Datagrams,
    pub barriers: Barriers,
    /// Allgathers by ipmc's multicast allgather, by Open MPI's ring, by the
    /// replaced one and over two levels (bytes: every rank's block).
    pub allgather_multicast: Tally,
    pub allgather_ring: Tally,
    pub allgather_previous: Tally,
    pub allgather_two_level: Tally,
    /// How the multicast setup ended: `none` (not tried), `ok`, `failed`.
    pub setup: &'static str,
    /// 1 where the communicator took over the multicast group that a freed
    /// one of the same processes left ([`crate::component::parked`]).
    pub taken_over: u64,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            empty: 0,
            nonblocking: 0,
            leader_moves: 0,
            handovers: 0,
            segment_bytes: 0,
            tallies: Default::default(),
            datagrams: Datagrams::default(),
            barriers: Barriers::default(),
            allgather_multicast: Tally::default(),
            allgather_ring: Tally::default(),
            allgather_previous: Tally::default(),
            allgather_two_level: Tally::default(),
            setup: "none",
            taken_over: 0,
        }
    }
}

/// The barriers (`MPI_Barrier`) ipmc served on a communicator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Barriers {
    /// By ipmc's multicast barrier, Open MPI's linear one, the replaced
    /// component's, two levels.
    pub multicast: u64,
    pub linear: u64,
    pub previous: u64,
    pub two_level: u64,
    /// Multicast barriers that released this rank by their datagram, and
    /// point-to-point (the datagram lost or late); rank 0 releases itself.
    pub released_multicast: u64,
    pub released_p2p: u64,
}

impl Barriers {
    /// Counts a barrier that `alg` carried out (one of the four above).
    pub fn record(&mut self, alg: Algorithm) {
        match alg {
            Algorithm::Multicast => self.multicast += 1,
            Algorithm::Linear => self.linear += 1,
            Algorithm::TwoLevel => self.two_level += 1,
            _ => self.previous += 1,
        }
    }

    pub fn total(&self) -> u64 {
        self.multicast + self.linear + self.previous + self.two_level
    }
}

impl Stats {
    /// Counts a broadcast of `bytes` bytes that `alg` carried out.
    pub fn record(&mut self, alg: Algorithm, bytes: usize) {
        let t = &mut self.tallies[alg as usize];
        t.calls += 1;
        t.bytes += bytes as u64;
    }

    /// The tally of one algorithm.
    pub fn tally(&self, alg: Algorithm) -> Tally {
        self.tallies[alg as usize]
    }

    /// All broadcasts, empty ones included.
    pub fn total_calls(&self) -> u64 {
        self.empty + self.tallies.iter().map(|t| t.calls).sum::<u64>()
    }

    /// One line of `key=value` fields, easy to read and to parse:
    /// `ipmc stats: rank=1 size=4 cid=0 bcasts=9 empty=1 linear=3:300B ... comm="MPI_COMM_WORLD"`.
    pub fn report(
        &self,
        rank: usize,
        size: usize,
        nodes: usize,
        cid: u32,
        comm_name: &str,
    ) -> String {
        let mut line = format!(
            "ipmc stats: rank={rank} size={size} nodes={nodes} cid={cid} bcasts={} empty={} \
             ibcasts={} leader_moves={} handovers={} segment_bytes={}",
            self.total_calls(),
            self.empty,
            self.nonblocking,
            self.leader_moves,
            self.handovers,
            self.segment_bytes
        );
        for alg in Algorithm::ALL {
            let t = self.tally(alg);
            let _ = write!(line, " {}={}:{}B", alg.name(), t.calls, t.bytes);
        }
        let d = &self.datagrams;
        let _ = write!(
            line,
            " setup={} taken_over={} sent={} send_full={} send_failed={} flow_stalls={} recv={} \
             injected={} own={}",
            self.setup,
            self.taken_over,
            d.sent,
            d.send_full,
            d.send_failed,
            d.flow_stalls,
            d.received,
            d.injected,
            d.own
        );
        for ((_, key), n) in VERDICTS.iter().zip(d.verdicts) {
            let _ = write!(line, " {key}={n}");
        }
        let _ = write!(
            line,
            " mcast_bytes={} chain_bytes={} comm=\"{comm_name}\"",
            d.bytes_multicast, d.bytes_chain
        );
        line
    }

    /// The barriers and allgathers, if ipmc's own algorithms served any on
    /// the communicator, as a line of its own (mpirun may splice the output
    /// of processes into lines longer than a few hundred bytes, the more so
    /// the more lines come at once): `ipmc collectives: rank=1 size=4 cid=0
    /// barriers=9 ... comm="MPI_COMM_WORLD"`.
    pub fn collectives_report(
        &self,
        rank: usize,
        size: usize,
        cid: u32,
        comm_name: &str,
    ) -> Option<String> {
        let b = &self.barriers;
        let (m, r, p, t) = (
            self.allgather_multicast,
            self.allgather_ring,
            self.allgather_previous,
            self.allgather_two_level,
        );
        let allgathers = m.calls + r.calls + p.calls + t.calls;
        if b.total() - b.previous + allgathers - p.calls == 0 {
            return None;
        }
        let mut line = format!("ipmc collectives: rank={rank} size={size} cid={cid}");
        let _ = write!(
            line,
            " barriers={} barrier_multicast={} barrier_linear={} barrier_previous={} \
             barrier_two_level={} released_mcast={} released_p2p={}",
            b.total(),
            b.multicast,
            b.linear,
            b.previous,
            b.two_level,
            b.released_multicast,
            b.released_p2p
        );
        let _ = write!(
            line,
            " allgathers={allgathers} allgather_multicast={}:{}B allgather_ring={}:{}B \
             allgather_previous={}:{}B allgather_two_level={}:{}B",
            m.calls, m.bytes, r.calls, r.bytes, p.calls, p.bytes, t.calls, t.bytes
        );
        let _ = write!(line, " comm=\"{comm_name}\"");
        Some(line)
    }
}

/// How a performance variable reports its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PvarClass {
    /// A count that only grows (MPI_T_PVAR_CLASS_COUNTER).
    Counter,
    /// One of [`SETUP_STATES`] (MPI_T_PVAR_CLASS_STATE).
    State,
}

/// The values of the `setup` state, in the order of their numbers.
pub const SETUP_STATES: [&str; 3] = ["none", "ok", "failed"];

/// One MPI_T performance variable, `coll_ipmc_<name>`, bound to a communicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pvar {
    pub name: &'static str,
    pub description: &'static str,
    pub class: PvarClass,
    pub value: u64,
}

const fn counter(name: &'static str, description: &'static str, value: u64) -> Pvar {
    Pvar {
        name,
        description,
        class: PvarClass::Counter,
        value,
    }
}

/// Descriptions of the verdict counters, in the order of `VERDICTS`.
const VERDICT_HELP: [&str; VERDICTS.len()] = [
    "Datagrams received that carried bytes this rank still needed",
    "Datagrams received whose bytes this rank already had",
    "The root's own datagrams, looped back to it",
    "Datagrams rejected: another communicator's",
    "Datagrams rejected: of a broadcast already finished",
    "Datagrams rejected: of a broadcast not yet started here",
    "Datagrams rejected: wrong length",
    "Datagrams rejected: not ipmc's (magic number)",
    "Datagrams rejected: checksum mismatch",
    "Datagrams rejected: their authentication tag did not verify (forged, altered, or under another key)",
];

impl Stats {
    /// Every statistic as a performance variable, in a fixed order (the
    /// variables' names and descriptions do not depend on the values).
    pub fn pvars(&self) -> Vec<Pvar> {
        let mut v = vec![
            counter(
                "bcasts",
                "Broadcasts on this communicator, empty ones included",
                self.total_calls(),
            ),
            counter(
                "empty",
                "Broadcasts of zero bytes (no communication)",
                self.empty,
            ),
            counter(
                "ibcasts",
                "Nonblocking broadcasts (MPI_Ibcast, MPI_Start) ipmc served, also by algorithm",
                self.nonblocking,
            ),
        ];
        for alg in Algorithm::ALL {
            let t = self.tally(alg);
            let (calls, bytes) = match alg {
                Algorithm::Linear => (
                    "Broadcasts by the linear algorithm",
                    "Message bytes broadcast by the linear algorithm",
                ),
                Algorithm::Chain => (
                    "Broadcasts by the chain algorithm",
                    "Message bytes broadcast by the chain algorithm",
                ),
                Algorithm::Multicast => (
                    "Broadcasts by multicast with the chain's repair",
                    "Message bytes broadcast by the multicast algorithm",
                ),
                Algorithm::Previous => (
                    "Fallbacks: broadcasts handed to the broadcast ipmc replaced",
                    "Message bytes of the fallbacks to the replaced broadcast",
                ),
                Algorithm::Binomial => (
                    "Broadcasts by Open MPI's binomial tree (coll/base)",
                    "Message bytes broadcast by Open MPI's binomial tree",
                ),
                Algorithm::Binary => (
                    "Broadcasts by Open MPI's binary tree (coll/base)",
                    "Message bytes broadcast by Open MPI's binary tree",
                ),
                Algorithm::TwoLevel => (
                    "Broadcasts over two levels: among node leaders, then inside each node",
                    "Message bytes broadcast over two levels",
                ),
                Algorithm::TwoLevelPipelined => (
                    "Broadcasts over two levels, each node's in segments as its leader gets them",
                    "Message bytes broadcast over two levels, pipelined",
                ),
                Algorithm::ScatterAllgather => (
                    "Broadcasts by Open MPI's scatter and ring allgather (coll/base)",
                    "Message bytes broadcast by Open MPI's scatter and ring allgather",
                ),
                Algorithm::SplitBinary => (
                    "Broadcasts by Open MPI's split binary tree (coll/base)",
                    "Message bytes broadcast by Open MPI's split binary tree",
                ),
                Algorithm::TwoLevelFromLeader => (
                    "Broadcasts over two levels, the node's ranks copying from the leader's memory",
                    "Message bytes broadcast over two levels, copied from the leader's memory",
                ),
                Algorithm::TwoLevelPipelinedFromLeader => (
                    "Broadcasts over two levels, pipelined, copied from the leader's memory",
                    "Message bytes broadcast over two levels, pipelined, copied from the leader",
                ),
            };
            v.push(counter(PVAR_CALLS[alg as usize], calls, t.calls));
            v.push(counter(PVAR_BYTES[alg as usize], bytes, t.bytes));
        }
        v.push(Pvar {
            name: "setup",
            description: "How the multicast setup ended: 0 none (not tried), 1 ok, 2 failed",
            class: PvarClass::State,
            value: SETUP_STATES
                .iter()
                .position(|s| *s == self.setup)
                .unwrap_or(0) as u64,
        });
        v.push(counter(
            "taken_over",
            "1 where the communicator took over the multicast group a freed communicator of \
             the same processes left, and opened no socket of its own",
            self.taken_over,
        ));
        let d = &self.datagrams;
        v.extend([
            counter("sent", "Datagrams this rank multicast as a root", d.sent),
            counter(
                "send_full",
                "Times a datagram waited for room in the send buffer",
                d.send_full,
            ),
            counter(
                "send_failed",
                "Datagrams the kernel refused to send (the chain delivered them)",
                d.send_failed,
            ),
            counter(
                "flow_stalls",
                "Times this root's receivers reported no progress for 50 ms and it sent on without them",
                d.flow_stalls,
            ),
            counter(
                "recv",
                "Datagrams read from the socket, injected losses included",
                d.received,
            ),
            counter(
                "injected",
                "Datagrams dropped on purpose by coll_ipmc_inject_loss",
                d.injected,
            ),
            counter("own", "This rank's own datagrams, looped back", d.own),
        ]);
        for (((_, key), help), n) in VERDICTS.iter().zip(VERDICT_HELP).zip(d.verdicts) {
            v.push(counter(key, help, n));
        }
        v.extend([
            counter(
                "mcast_bytes",
                "Message bytes that first arrived by multicast",
                d.bytes_multicast,
            ),
            counter(
                "chain_bytes",
                "Message bytes of multicast broadcasts that first arrived by the chain",
                d.bytes_chain,
            ),
        ]);
        let b = &self.barriers;
        v.extend([
            counter("barriers", "Barriers (MPI_Barrier) ipmc served", b.total()),
            counter(
                "multicast_barriers",
                "Barriers by ipmc's: arrivals to rank 0, a multicast release",
                b.multicast,
            ),
            counter(
                "linear_barriers",
                "Barriers by Open MPI's linear barrier (coll/base)",
                b.linear,
            ),
            counter(
                "previous_barriers",
                "Barriers handed to the barrier ipmc replaced",
                b.previous,
            ),
            counter(
                "two_level_barriers",
                "Barriers over two levels: each node's, the node leaders', each node's",
                b.two_level,
            ),
            counter(
                "barrier_releases_by_multicast",
                "Multicast barriers that released this rank by their datagram",
                b.released_multicast,
            ),
            counter(
                "barrier_releases_by_p2p",
                "Multicast barriers that released this rank point-to-point (datagram lost or late)",
                b.released_p2p,
            ),
        ]);
        let (m, r, p, t) = (
            self.allgather_multicast,
            self.allgather_ring,
            self.allgather_previous,
            self.allgather_two_level,
        );
        v.extend([
            counter(
                "allgathers",
                "Allgathers (MPI_Allgather and MPI_Allgatherv) ipmc served",
                m.calls + r.calls + p.calls + t.calls,
            ),
            counter(
                "ring_allgathers",
                "Allgathers by Open MPI's ring (coll/base)",
                r.calls,
            ),
            counter(
                "ring_allgather_bytes",
                "Bytes gathered by Open MPI's ring",
                r.bytes,
            ),
            counter(
                "multicast_allgathers",
                "Allgathers by ipmc's: every rank's block multicast in turn",
                m.calls,
            ),
            counter(
                "multicast_allgather_bytes",
                "Bytes gathered (all ranks' blocks) by ipmc's allgather",
                m.bytes,
            ),
            counter(
                "previous_allgathers",
                "Allgathers handed to the allgather ipmc replaced",
                p.calls,
            ),
            counter(
                "previous_allgather_bytes",
                "Bytes gathered by the replaced allgather",
                p.bytes,
            ),
            counter(
                "two_level_allgathers",
                "Allgathers over two levels: to each node's leader, among the leaders, each node's broadcast",
                t.calls,
            ),
            counter(
                "two_level_allgather_bytes",
                "Bytes gathered over two levels",
                t.bytes,
            ),
            counter(
                "leader_moves",
                "Times a node's lead moved to a rank that enters broadcasts earlier (two levels)",
                self.leader_moves,
            ),
            counter(
                "handovers",
                "Broadcasts over two levels whose node step went by handover from a leader that did not wait for a late rank",
                self.handovers,
            ),
            counter(
                "segment_bytes",
                "Bytes written to or read from the node's shared segment (two levels)",
                self.segment_bytes,
            ),
        ]);
        v
    }
}

/// Names of the per-algorithm variables, indexed by `Algorithm as usize`.
const PVAR_CALLS: [&str; Algorithm::ALL.len()] = [
    "linear_bcasts",
    "chain_bcasts",
    "multicast_bcasts",
    "previous_bcasts",
    "binomial_bcasts",
    "binary_bcasts",
    "two_level_bcasts",
    "two_level_pipelined_bcasts",
    "scatter_allgather_bcasts",
    "split_binary_bcasts",
    "two_level_from_leader_bcasts",
    "two_level_pipelined_from_leader_bcasts",
];
const PVAR_BYTES: [&str; Algorithm::ALL.len()] = [
    "linear_bcast_bytes",
    "chain_bcast_bytes",
    "multicast_bcast_bytes",
    "previous_bcast_bytes",
    "binomial_bcast_bytes",
    "binary_bcast_bytes",
    "two_level_bcast_bytes",
    "two_level_pipelined_bcast_bytes",
    "scatter_allgather_bcast_bytes",
    "split_binary_bcast_bytes",
    "two_level_from_leader_bcast_bytes",
    "two_level_pipelined_from_leader_bcast_bytes",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::two_stage::Verdict;

    #[test]
    fn report_counts_every_algorithm() {
        let mut s = Stats::default();
        s.record(Algorithm::Linear, 10);
        s.record(Algorithm::Linear, 5);
        s.record(Algorithm::Chain, 1 << 20);
        s.empty += 1;
        assert_eq!(s.total_calls(), 4);
        assert_eq!(
            s.report(2, 8, 4, 3, "MPI_COMM_WORLD"),
            "ipmc stats: rank=2 size=8 nodes=4 cid=3 bcasts=4 empty=1 ibcasts=0 leader_moves=0 handovers=0 segment_bytes=0 linear=2:15B chain=1:1048576B \
             multicast=0:0B previous=0:0B binomial=0:0B binary=0:0B two_level=0:0B two_level_pipelined=0:0B scatter_allgather=0:0B split_binary=0:0B \
             two_level_from_leader=0:0B two_level_pipelined_from_leader=0:0B setup=none taken_over=0 sent=0 send_full=0 \
             send_failed=0 flow_stalls=0 recv=0 \
             injected=0 own=0 useful=0 dup=0 root_own=0 rej_comm=0 rej_stale=0 rej_future=0 \
             rej_length=0 rej_magic=0 rej_crc=0 rej_auth=0 mcast_bytes=0 chain_bytes=0 \
             comm=\"MPI_COMM_WORLD\""
        );
    }

    #[test]
    fn pvars_cover_every_statistic_with_unique_names() {
        let mut s = Stats::default();
        s.record(Algorithm::Multicast, 100);
        s.record(Algorithm::Previous, 7);
        s.datagrams.bytes_multicast = 90;
        s.datagrams.count(Verdict::BadCrc);
        s.setup = "failed";
        let vars = s.pvars();
        let names: std::collections::HashSet<_> = vars.iter().map(|p| p.name).collect();
        assert_eq!(names.len(), vars.len(), "names are unique");
        assert_eq!(vars.len(), Stats::default().pvars().len());
        let get = |n: &str| vars.iter().find(|p| p.name == n).unwrap().value;
        assert_eq!(get("bcasts"), 2);
        assert_eq!(get("multicast_bcasts"), 1);
        assert_eq!(get("multicast_bcast_bytes"), 100);
        assert_eq!(get("previous_bcasts"), 1);
        assert_eq!(get("mcast_bytes"), 90);
        assert_eq!(get("rej_crc"), 1);
        assert_eq!(get("setup"), 2);
        // Every key of the text report has its variable.
        s.barriers.record(Algorithm::Previous);
        s.allgather_previous.calls += 1;
        assert_eq!(
            s.collectives_report(0, 1, 0, "c"),
            None,
            "only the replaced component's"
        );
        s.barriers.record(Algorithm::Linear);
        let report = s.report(0, 1, 1, 0, "c") + " " + &s.collectives_report(0, 1, 0, "c").unwrap();
        assert!(
            report.contains("barriers=2 barrier_multicast=0 barrier_linear=1"),
            "{report}"
        );
        for field in report.split_whitespace().filter(|f| f.contains('=')) {
            let key = field.split('=').next().unwrap();
            if ["rank", "size", "nodes", "cid", "comm"].contains(&key) {
                continue;
            }
            let barrier = |k: &str| match k
                .strip_prefix("barrier_")
                .map(|a| (a, "barriers"))
                .or_else(|| k.strip_prefix("allgather_").map(|a| (a, "allgathers")))
            {
                Some((alg, what)) => format!("{alg}_{what}"),
                None => k
                    .replace("released_mcast", "barrier_releases_by_multicast")
                    .replace("released_p2p", "barrier_releases_by_p2p"),
            };
            let found = names.contains(key)
                || names.contains(format!("{key}_bcasts").as_str())
                || names.contains(barrier(key).as_str());
            assert!(found, "no variable for {key}");
        }
        assert!(vars.iter().all(|p| !p.description.is_empty()));
    }
}
