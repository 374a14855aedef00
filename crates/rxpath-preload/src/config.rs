//! The preload's configuration: the options `rxpath exec` and this library
//! agree on, each defined once in [`rxpath_contract::options`] (its
//! variable, TOML key, default, range and doc; the guide's table comes
//! from there too), read from the environment `exec` sets or a user sets
//! by hand, and from the TOML file `RXPATH_CONFIG` names.

pub use rxpath_contract::config::{Config, Mode};

/// A line on stderr, as Onload's `oo:` lines: the program's own output is
/// not touched.
pub(crate) fn say(msg: &str) {
    eprintln!("rxpath-preload: {msg}");
}
