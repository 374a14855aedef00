//! Where the libraries' `log` records go: stderr, one line each, as
//! `rxpath: MESSAGE` (info) or `rxpath: warning: MESSAGE`; debug and trace
//! with `RXPATH_LOG=debug` (or `trace`).

struct Stderr;

impl log::Log for Stderr {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        match r.level() {
            log::Level::Error => eprintln!("rxpath: error: {}", r.args()),
            log::Level::Warn => eprintln!("rxpath: warning: {}", r.args()),
            log::Level::Info => eprintln!("rxpath: {}", r.args()),
            _ => eprintln!("rxpath: {}: {}", r.target(), r.args()),
        }
    }

    fn flush(&self) {}
}

static LOGGER: Stderr = Stderr;

/// Install the logger (once; later calls change nothing).
pub fn init() {
    let level = match std::env::var("RXPATH_LOG").as_deref() {
        Ok("trace") => log::LevelFilter::Trace,
        Ok("debug") => log::LevelFilter::Debug,
        Ok("warn") => log::LevelFilter::Warn,
        Ok("error") => log::LevelFilter::Error,
        Ok("off") => log::LevelFilter::Off,
        _ => log::LevelFilter::Info,
    };
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level);
    }
}
