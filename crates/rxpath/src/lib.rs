//! `rxpath`: the command line. The commands are `rxpath-cli`'s, the
//! benches `rxpath-bench`'s; this crate parses the arguments (and
//! `--config`) and hands them to the one they name.

#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use rxpath_cli::opts;
use std::process::ExitCode;

/// The Linux kernel's fast receive path, in user space.
#[derive(Debug, Parser)]
#[command(name = "rxpath", version, about, args_override_self = true)]
pub struct Cli {
    /// Read flags from a TOML file (keys are the long flags without their
    /// dashes); flags given here override it.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Run the receive path (default: simulated 2-queue NIC, mixed flows, 5 s).
    Run(Box<rxpath_cli::run::RunArgs>),
    /// Benchmarks that print ratios measured in one run.
    Bench(rxpath_bench::BenchArgs),
    /// Send traffic out of an interface (AF_XDP TX or AF_PACKET).
    Gen(rxpath_cli::gen::GenArgs),
    /// A UDP echo server on rxpath sockets (AF_XDP by default), with busy
    /// polling and a sockperf mode.
    Echo(Box<rxpath_cli::echo::EchoArgs>),
    /// A QUIC server (quinn) speaking quinn's perf protocol, on rxpath
    /// sockets or, for comparison, on the kernel's.
    Quic(Box<rxpath_cli::quic::QuicArgs>),
    /// Build, remove or show the test topology: a veth pair, host end here,
    /// peer end in a network namespace, addresses from 198.18.0.0/15.
    Lab(rxpath_cli::lab::LabArgs),
    /// Rule sets for the INPUT filter: show a file with its counters,
    /// generate ClassBench-shaped sets and traffic.
    #[command(subcommand)]
    Filter(rxpath_cli::filter::FilterCmd),
    /// The whole path for a while (GRO, filter, every steering mode, a
    /// worker going offline, sockets with busy-polling and sleeping
    /// readers), invariants checked after every round; one verdict line.
    Soak(rxpath_cli::soak::SoakArgs),
    /// Run an unmodified program with its UDP sockets on rxpath
    /// (librxpath_preload.so through LD_PRELOAD); print the path's
    /// accounting when it exits.
    Exec(rxpath_cli::exec::ExecArgs),
    /// Show or change a running rxpath's knobs (gro_flush_timeout,
    /// net.core.netdev_budget, net.core.netdev_budget_usecs) while packets
    /// flow, through its control socket.
    Ctl(rxpath_cli::ctl::CtlArgs),
}

/// The whole program: arguments (and `--config`) in, exit code out.
pub fn main() -> ExitCode {
    rxpath_cli::logger::init();
    let (args, keys) = match rxpath_cli::config::expand(std::env::args_os().collect()) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("rxpath: error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => return opts::exit_on_clap_error_with(e, &keys),
    };
    let result = match cli.cmd {
        Cmd::Run(a) => rxpath_cli::run::run(*a),
        Cmd::Bench(b) => rxpath_bench::bench(b),
        Cmd::Lab(l) => rxpath_cli::lab::lab(l),
        Cmd::Gen(g) => rxpath_cli::gen::gen(g),
        Cmd::Echo(e) => rxpath_cli::echo::echo(*e),
        Cmd::Quic(q) => rxpath_cli::quic::quic(*q),
        Cmd::Filter(f) => rxpath_cli::filter::filter_cmd(f),
        Cmd::Soak(s) => rxpath_cli::soak::soak(s),
        Cmd::Ctl(c) => rxpath_cli::ctl::ctl(c),
        Cmd::Exec(e) => rxpath_cli::exec::exec(e),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rxpath: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
