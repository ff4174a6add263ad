//! The state ipmc keeps for one communicator, and its broadcast entry point.

use log::{debug, info, warn};

use crate::config::{Algorithm, Config};
use crate::ffi::{BcastCall, Comm, PmlTransport};
use crate::stats::Stats;
use crate::transport::Transport;
use crate::{chain, linear};

/// Open MPI's generic error code, for failures that have no code of their own.
const OMPI_ERROR: i32 = -1;

/// Why ipmc declines a communicator in `comm_query`; `None` accepts it.
/// Every input is the same on every rank, so all ranks decide alike.
pub fn decline_reason(cfg: &Config, is_inter: bool, size: usize) -> Option<&'static str> {
    if cfg.priority < 0 {
        Some("its priority is negative")
    } else if is_inter {
        Some("it is an intercommunicator")
    } else if size < 2 {
        Some("it has fewer than 2 processes")
    } else {
        None
    }
}

/// ipmc's state on one communicator.
pub struct Module {
    cfg: Config,
    rank: usize,
    size: usize,
    cid: u32,
    stats: Stats,
    reported: bool,
    told_multicast_pending: bool,
}

impl Module {
    pub fn new(cfg: Config, comm: Comm) -> Self {
        Module {
            cfg,
            rank: comm.rank(),
            size: comm.size(),
            cid: comm.cid(),
            stats: Stats::default(),
            reported: false,
            told_multicast_pending: false,
        }
    }

    /// Called once ipmc is installed on the communicator.
    pub fn enable(&mut self, comm: Comm) {
        info!(
            "rank {} of {} enabled on communicator {} (cid {})",
            self.rank,
            self.size,
            comm.name(),
            self.cid
        );
    }

    /// Called when the communicator is freed: prints the statistics once.
    pub fn disable(&mut self, comm: Comm) {
        if self.cfg.print_statistics && !self.reported {
            crate::ffi::print_line(&self.stats.report(
                self.rank,
                self.size,
                self.cid,
                &comm.name(),
            ));
        }
        self.reported = true;
    }

    /// One `MPI_Bcast` on this communicator; the error is an Open MPI code.
    pub fn bcast(&mut self, call: &mut BcastCall) -> Result<(), i32> {
        let bytes = call.bytes();
        if bytes == 0 {
            self.stats.empty += 1;
            return Ok(());
        }
        let alg = match self.cfg.choose(bytes, self.size) {
            Algorithm::Multicast => {
                if !self.told_multicast_pending {
                    warn!(
                        "rank {} cid {}: the multicast broadcast is not available yet; \
                         the fragmented chain serves its calls",
                        self.rank, self.cid
                    );
                    self.told_multicast_pending = true;
                }
                Algorithm::Chain
            }
            other => other,
        };
        debug!(
            "rank {} cid {}: bcast of {bytes} bytes from root {} with {}",
            self.rank,
            self.cid,
            call.root(),
            alg.name()
        );
        match alg {
            Algorithm::Previous => call.previous()?,
            _ => self.run(alg, call, bytes)?,
        }
        self.stats.record(alg, bytes);
        Ok(())
    }

    /// Runs one of ipmc's own algorithms on the message bytes: in place when
    /// the datatype is contiguous, through a packed copy otherwise.
    fn run(&self, alg: Algorithm, call: &mut BcastCall, bytes: usize) -> Result<(), i32> {
        let comm = call.comm();
        let root = call.root();
        if let Some(buf) = call.contiguous(bytes) {
            let mut t = PmlTransport::new(comm, self.rank, self.size, buf);
            return self.run_on(alg, &mut t, root);
        }
        let mut packed = vec![0u8; bytes];
        if self.rank == root {
            call.pack(&mut packed)?;
        }
        let mut t = PmlTransport::new(comm, self.rank, self.size, &mut packed);
        self.run_on(alg, &mut t, root)?;
        drop(t);
        if self.rank != root {
            call.unpack(&packed)?;
        }
        Ok(())
    }

    fn run_on<T: Transport>(&self, alg: Algorithm, t: &mut T, root: usize) -> Result<(), i32> {
        let result = match alg {
            Algorithm::Linear => linear::bcast(t, root),
            Algorithm::Chain | Algorithm::Multicast => {
                chain::bcast(t, root, self.cfg.chain_segment_size)
            }
            Algorithm::Previous => return Err(OMPI_ERROR),
        };
        result.map_err(|e| e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declines_what_it_cannot_serve() {
        let mut cfg = Config::default();
        assert_eq!(decline_reason(&cfg, false, 2), None);
        assert!(decline_reason(&cfg, true, 8).is_some());
        assert!(decline_reason(&cfg, false, 1).is_some());
        cfg.priority = -1;
        assert!(decline_reason(&cfg, false, 8).is_some());
    }
}
