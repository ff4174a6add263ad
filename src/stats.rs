//! Per-communicator counters, printed at communicator free when
//! `coll_ipmc_print_statistics` is on.

use std::fmt::Write;

use crate::config::Algorithm;

/// Broadcasts and bytes of one algorithm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub calls: u64,
    pub bytes: u64,
}

/// What one rank did on one communicator.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Broadcasts of zero bytes, which need no communication.
    pub empty: u64,
    tallies: [Tally; Algorithm::ALL.len()],
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
    pub fn report(&self, rank: usize, size: usize, cid: u32, comm_name: &str) -> String {
        let mut line = format!(
            "ipmc stats: rank={rank} size={size} cid={cid} bcasts={} empty={}",
            self.total_calls(),
            self.empty
        );
        for alg in Algorithm::ALL {
            let t = self.tally(alg);
            let _ = write!(line, " {}={}:{}B", alg.name(), t.calls, t.bytes);
        }
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
            s.report(2, 8, 3, "MPI_COMM_WORLD"),
            "ipmc stats: rank=2 size=8 cid=3 bcasts=4 empty=1 linear=2:15B chain=1:1048576B \
             multicast=0:0B previous=0:0B comm=\"MPI_COMM_WORLD\""
        );
    }
}
