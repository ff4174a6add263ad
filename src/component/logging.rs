//! Routes the `log` crate into Open MPI's output stream of the component, so
//! that `coll_ipmc_verbose` controls ipmc's messages like any other
//! component's.

use std::sync::atomic::{AtomicBool, Ordering};

use log::{Level, LevelFilter, Log, Metadata, Record};

use crate::platform::ompi;

/// The `coll_ipmc_verbose` level at which a message of `level` is shown.
pub fn verbosity_of(level: Level) -> i32 {
    match level {
        Level::Error | Level::Warn => 1,
        Level::Info => 5,
        Level::Debug => 10,
        Level::Trace => 20,
    }
}

fn filter_for(verbose: usize) -> LevelFilter {
    [
        (Level::Trace, LevelFilter::Trace),
        (Level::Debug, LevelFilter::Debug),
        (Level::Info, LevelFilter::Info),
        (Level::Warn, LevelFilter::Warn),
    ]
    .into_iter()
    .find(|(level, _)| verbose >= verbosity_of(*level) as usize)
    .map_or(LevelFilter::Off, |(_, filter)| filter)
}

struct OmpiLogger;

impl Log for OmpiLogger {
    fn enabled(&self, metadata: &Metadata) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record) {
        if self.enabled(record.metadata()) {
            ompi::log_line(
                verbosity_of(record.level()),
                &format!("ipmc: {}", record.args()),
            );
        }
    }

    fn flush(&self) {}
}

static LOGGER: OmpiLogger = OmpiLogger;

/// Installs the logger (once per process) with the verbosity of `coll_ipmc_verbose`.
pub fn init(verbose: usize) {
    // A second call finds the logger installed already; only the level changes.
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(filter_for(verbose));
}

/// What ipmc tells the user at default verbosity, at most once per process.
/// Each is printed by one rank chosen so that, with the first communicator
/// it concerns (usually `MPI_COMM_WORLD`), it reaches the user once per job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice {
    /// The ranks' ipmc configurations differ.
    Disagreement,
    /// Some rank could not join a communicator's multicast group.
    SetupFailed,
    /// Multicast delivered too little of a broadcast's data.
    MulticastLost,
    /// How datagrams move (shown at `verbose` >= 1).
    DatagramPath,
}

impl Notice {
    const ALL: [Notice; 4] = [
        Notice::Disagreement,
        Notice::SetupFailed,
        Notice::MulticastLost,
        Notice::DatagramPath,
    ];
}

/// Whether `notice` has been told in this process: the first call says no,
/// every later one yes.
fn first_time(notice: Notice) -> bool {
    static TOLD: [AtomicBool; Notice::ALL.len()] = [
        AtomicBool::new(false),
        AtomicBool::new(false),
        AtomicBool::new(false),
        AtomicBool::new(false),
    ];
    let i = Notice::ALL
        .iter()
        .position(|n| *n == notice)
        .expect("every notice is listed");
    !TOLD[i].swap(true, Ordering::Relaxed)
}

/// Tells the user `line()` (one line for Open MPI's output), the first time
/// `notice` comes up in this process, if this process is the one that tells
/// (`teller`). Every process notes the first time, so that none tells it
/// later for another communicator.
pub fn tell_once(notice: Notice, teller: bool, line: impl FnOnce() -> String) {
    if first_time(notice) && teller {
        ompi::print_line(&line());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbose_levels_map_to_filters() {
        assert_eq!(filter_for(0), LevelFilter::Off);
        assert_eq!(filter_for(1), LevelFilter::Warn);
        assert_eq!(filter_for(9), LevelFilter::Info);
        assert_eq!(filter_for(10), LevelFilter::Debug);
        assert_eq!(filter_for(100), LevelFilter::Trace);
    }

    #[test]
    fn a_notice_comes_up_for_the_first_time_once() {
        assert!(first_time(Notice::MulticastLost));
        assert!(!first_time(Notice::MulticastLost));
        assert!(first_time(Notice::DatagramPath), "each notice has its own");
    }
}
