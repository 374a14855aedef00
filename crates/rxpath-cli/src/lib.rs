//! `rxpath`: the command line (the binary is `main.rs`; the library
//! exists so that the fuzz targets reach the argument, config file and
//! control socket parsers).

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod config;
pub mod ctl;
pub mod echo;
pub mod exec;
pub mod filter;
pub mod gen;
pub mod lab;
pub mod limits;
pub mod logger;
pub mod opts;
pub mod parse;
/// The preload's configuration, its own source
/// (`crates/rxpath-preload/src/config.rs`): `--config` is read as
/// `RXPATH_CONFIG` is, and `exec` checks what it hands the program with
/// the parsers the preload will use. Included, not linked: the preload's
/// library interposes the C library's socket calls of any program it is
/// linked into, this one's too.
#[allow(dead_code)]
#[path = "../../rxpath-preload/src/config.rs"]
pub mod preload_config;
pub mod quic;
pub mod report;
pub mod run;
pub mod soak;
pub mod steer;
