//! `rxpath`: the command line (the binary is `main.rs`; the library
//! exists so that the fuzz targets reach the argument, config file and
//! control socket parsers).

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod config;
pub mod ctl;
pub mod echo;
pub mod echo_tcp;
pub mod exec;
pub mod filter;
pub mod gen;
pub mod lab;
pub mod limits;
pub mod logger;
pub mod opts;
pub mod parse;
pub mod preload_flags;
pub mod quic;
pub mod report;
pub mod run;
pub mod soak;
pub mod sockperf;
pub mod steer;
