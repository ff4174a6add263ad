//! The state ipmc keeps for one communicator, and its broadcast entry point.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use log::{debug, info, warn};

use crate::config::{Algorithm, Config};
use crate::ffi::{self, BcastCall, Comm, Messages, PmlTransport};
use crate::interfaces::{self, IfList};
use crate::mcast_socket::{self, McastSocket};
use crate::multicast::{Group, Ranks};
use crate::setup::{self, Announce};
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

/// Where a communicator stands with its multicast group.
enum Multicast {
    /// No multicast broadcast has been called yet: the group is set up by
    /// the first one, which every rank reaches at the same call.
    NotSetUp,
    Ready(Box<Group>),
    /// Some rank could not join: the replaced component's broadcast serves
    /// the calls that would multicast.
    Failed,
}

/// ipmc's state on one communicator.
pub struct Module {
    cfg: Config,
    rank: usize,
    size: usize,
    cid: u32,
    stats: Stats,
    reported: bool,
    multicast: Multicast,
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
            multicast: Multicast::NotSetUp,
        }
    }

    /// What this rank did on the communicator so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
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
        // Leaves the group and closes the sockets.
        self.multicast = Multicast::Failed;
    }

    /// One `MPI_Bcast` on this communicator; the error is an Open MPI code.
    pub fn bcast(&mut self, call: &mut BcastCall) -> Result<(), i32> {
        let bytes = call.bytes();
        if bytes == 0 {
            self.stats.empty += 1;
            return Ok(());
        }
        let mut alg = self.cfg.choose(bytes, self.size);
        if alg == Algorithm::Multicast {
            if let Multicast::NotSetUp = self.multicast {
                self.multicast = self.set_up(call.comm())?;
            }
            if let Multicast::Failed = self.multicast {
                alg = Algorithm::Previous;
            }
        }
        debug!(
            "rank {} cid {}: bcast of {bytes} bytes from root {} with {}",
            self.rank,
            self.cid,
            call.root(),
            alg.name()
        );
        match alg {
            Algorithm::Previous => call.previous()?,
            Algorithm::Multicast => self.run_multicast(call, bytes)?,
            _ => self.run(alg, call, bytes)?,
        }
        self.stats.record(alg, bytes);
        Ok(())
    }

    /// Runs the linear or chain algorithm on the message bytes.
    fn run(&self, alg: Algorithm, call: &mut BcastCall, bytes: usize) -> Result<(), i32> {
        let (comm, root) = (call.comm(), call.root());
        on_message_bytes(call, self.rank, bytes, |buf| {
            let mut t = PmlTransport::new(comm, self.rank, self.size, buf);
            self.run_on(alg, &mut t, root)
        })
    }

    fn run_on<T: Transport>(&self, alg: Algorithm, t: &mut T, root: usize) -> Result<(), i32> {
        let result = match alg {
            Algorithm::Linear => linear::bcast(t, root),
            Algorithm::Chain => chain::bcast(t, root, self.cfg.chain_segment_size),
            Algorithm::Multicast | Algorithm::Previous => return Err(OMPI_ERROR),
        };
        result.map_err(|e| e.0)
    }

    /// The two-stage broadcast on the message bytes.
    fn run_multicast(&mut self, call: &mut BcastCall, bytes: usize) -> Result<(), i32> {
        let Multicast::Ready(group) = &mut self.multicast else {
            return Err(OMPI_ERROR);
        };
        let at = Ranks {
            rank: self.rank,
            size: self.size,
            root: call.root(),
        };
        let mut msgs = Messages::new(call.comm());
        let stats = &mut self.stats.datagrams;
        on_message_bytes(call, self.rank, bytes, |buf| {
            group.bcast(&mut msgs, at, buf, stats).map_err(|e| e.0)
        })
    }

    /// Sets up the communicator's multicast group with every other rank
    /// (see [`setup`]); any rank's failure makes all of them fall back.
    fn set_up(&mut self, comm: Comm) -> Result<Multicast, i32> {
        let cfg = &self.cfg;
        let mut msgs = Messages::new(comm);
        let open = |a: &Announce| open_socket(cfg, comm, a);
        let (announce, local, verdict) =
            setup::agree(&mut msgs, self.rank, self.size, cfg, open).map_err(|e| e.0)?;
        let name = comm.name();
        if let Err(why) = &local {
            // Once per process: the reason is usually the same for every communicator.
            static TOLD: AtomicBool = AtomicBool::new(false);
            if !TOLD.swap(true, Ordering::Relaxed) {
                ffi::show_no_multicast(&crate::entropy::hostname(), self.rank, &name, why);
            }
            warn!("rank {} cannot multicast on {name}: {why}", self.rank);
        }
        match (verdict, local, announce) {
            (setup::Verdict::Ready, Ok(socket), Some(a)) => {
                info!(
                    "rank {} multicasts on {name} (cid {}) with group {}, receive buffer {} bytes",
                    self.rank,
                    self.cid,
                    a.group,
                    socket.granted_rcvbuf()
                );
                self.stats.setup = "ok";
                let seed = cfg.inject_seed ^ ((self.rank as u64) << 32) ^ u64::from(self.cid);
                Ok(Multicast::Ready(Box::new(Group::new(
                    socket,
                    a.comm_id,
                    cfg.fragment_size,
                    cfg.use_crc_checking,
                    Duration::from_micros(cfg.root_wait_time_us),
                    (cfg.inject_loss_percent, seed),
                ))))
            }
            (verdict, _, _) => {
                let first = match verdict {
                    setup::Verdict::Failed { first } => first,
                    setup::Verdict::Ready => self.rank,
                };
                warn!(
                    "rank {} falls back to the replaced broadcast on {name}: rank {first} \
                     could not set up multicast",
                    self.rank
                );
                self.stats.setup = "failed";
                Ok(Multicast::Failed)
            }
        }
    }
}

/// Runs `f` on the message's bytes: in the user's buffer when the datatype
/// is contiguous, otherwise on a copy packed before (at the root) and
/// unpacked after (elsewhere).
fn on_message_bytes(
    call: &mut BcastCall,
    rank: usize,
    bytes: usize,
    f: impl FnOnce(&mut [u8]) -> Result<(), i32>,
) -> Result<(), i32> {
    if let Some(buf) = call.contiguous(bytes) {
        return f(buf);
    }
    let root = call.root();
    let mut packed = vec![0u8; bytes];
    if rank == root {
        call.pack(&mut packed)?;
    }
    f(&mut packed)?;
    if rank != root {
        call.unpack(&packed)?;
    }
    Ok(())
}

/// Opens and joins this rank's socket for the announced group.
fn open_socket(cfg: &Config, comm: Comm, a: &Announce) -> Result<McastSocket, String> {
    let include = IfList::parse(&cfg.if_include)?;
    let exclude = IfList::parse(&cfg.if_exclude)?;
    let addrs = ffi::interface_addresses().map_err(|e| format!("listing interfaces: {e}"))?;
    let iface = interfaces::choose(&addrs, &include, &exclude, a.group.is_ipv6())?;
    let opts = mcast_socket::Options {
        ttl: cfg.ttl,
        loopback: comm.has_local_peer(),
        rcvbuf: cfg.rcvbuf,
    };
    McastSocket::open(a.group, &iface, opts)
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
