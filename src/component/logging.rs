//! Routes the `log` crate into Open MPI's output stream of the component, so
//! that `coll_ipmc_verbose` controls ipmc's messages like any other
//! component's.

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
}
