//! Per-communicator counters, printed at communicator free when
//! `coll_ipmc_print_statistics` is on.

use std::fmt::Write;

use crate::config::Algorithm;
use crate::two_stage::Verdict;

/// What the multicast algorithm did with datagrams and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Datagrams {
    /// Datagrams this rank multicast as a root.
    pub sent: u64,
    /// Times a datagram waited because the send buffer was full.
    pub send_full: u64,
    /// Datagrams the kernel refused to send (the chain delivers them).
    pub send_failed: u64,
    /// Datagrams read from the socket (injected losses included).
    pub received: u64,
    /// Dropped on purpose by `coll_ipmc_inject_loss`.
    pub injected: u64,
    /// This rank's own datagrams, looped back.
    pub own: u64,
    /// What the protocol said about the rest.
    pub verdicts: [u64; VERDICTS.len()],
    /// Message bytes that first arrived by multicast, and by the chain.
    pub bytes_multicast: u64,
    pub bytes_chain: u64,
}

/// Every verdict, with its key in the report.
const VERDICTS: [(Verdict, &str); 10] = [
    (Verdict::Useful, "useful"),
    (Verdict::Duplicate, "dup"),
    (Verdict::Own, "root_own"),
    (Verdict::WrongComm, "rej_comm"),
    (Verdict::Stale, "rej_stale"),
    (Verdict::Future, "rej_future"),
    (Verdict::BadLength, "rej_length"),
    (Verdict::BadMagic, "rej_magic"),
    (Verdict::BadCrc, "rej_crc"),
    (Verdict::BadAuth, "rej_auth"),
];

impl Datagrams {
    pub fn count(&mut self, v: Verdict) {
        let i = VERDICTS
            .iter()
            .position(|(w, _)| *w == v)
            .expect("every verdict has a counter");
        self.verdicts[i] += 1;
    }
}

/// Broadcasts and bytes of one algorithm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub calls: u64,
    pub bytes: u64,
}

/// What one rank did on one communicator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// Broadcasts of zero bytes, which need no communication.
    pub empty: u64,
    tallies: [Tally; Algorithm::ALL.len()],
    pub datagrams: Datagrams,
    /// How the multicast setup ended: `none` (not tried), `ok`, `failed`.
    pub setup: &'static str,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            empty: 0,
            tallies: Default::default(),
            datagrams: Datagrams::default(),
            setup: "none",
        }
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
            "ipmc stats: rank={rank} size={size} nodes={nodes} cid={cid} bcasts={} empty={}",
            self.total_calls(),
            self.empty
        );
        for alg in Algorithm::ALL {
            let t = self.tally(alg);
            let _ = write!(line, " {}={}:{}B", alg.name(), t.calls, t.bytes);
        }
        let d = &self.datagrams;
        let _ = write!(
            line,
            " setup={} sent={} send_full={} send_failed={} recv={} injected={} own={}",
            self.setup, d.sent, d.send_full, d.send_failed, d.received, d.injected, d.own
        );
        for ((_, key), n) in VERDICTS.iter().zip(d.verdicts) {
            let _ = write!(line, " {key}={n}");
        }
        let _ = write!(
            line,
            " mcast_bytes={} chain_bytes={}",
            d.bytes_multicast, d.bytes_chain
        );
        let _ = write!(line, " comm=\"{comm_name}\"");
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            "ipmc stats: rank=2 size=8 nodes=4 cid=3 bcasts=4 empty=1 linear=2:15B chain=1:1048576B \
             multicast=0:0B previous=0:0B setup=none sent=0 send_full=0 send_failed=0 recv=0 \
             injected=0 own=0 useful=0 dup=0 root_own=0 rej_comm=0 rej_stale=0 rej_future=0 \
             rej_length=0 rej_magic=0 rej_crc=0 rej_auth=0 mcast_bytes=0 chain_bytes=0 \
             comm=\"MPI_COMM_WORLD\""
        );
    }
}
