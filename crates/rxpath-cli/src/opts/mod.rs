//! Command-line options, named as the kernel names the knobs.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod bench;
mod iface;
mod run;

pub use crate::parse::{parse_duration, parse_faults, parse_mac, parse_prefix};

pub use bench::*;
pub use iface::*;
pub use run::*;

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
    Run(Box<RunArgs>),
    /// Benchmarks that print ratios measured in one run.
    Bench(BenchArgs),
    /// Send traffic out of an interface (AF_XDP TX or AF_PACKET).
    Gen(GenArgs),
    /// A UDP echo server on rxpath sockets (AF_XDP by default), with busy
    /// polling and a sockperf mode.
    Echo(Box<EchoArgs>),
    /// A QUIC server (quinn) speaking quinn's perf protocol, on rxpath
    /// sockets or, for comparison, on the kernel's.
    Quic(Box<QuicArgs>),
    /// Build, remove or show the test topology: a veth pair, host end here,
    /// peer end in a network namespace, addresses from 198.18.0.0/15.
    Lab(LabArgs),
    /// Rule sets for the INPUT filter: show a file with its counters,
    /// generate ClassBench-shaped sets and traffic.
    #[command(subcommand)]
    Filter(crate::filter::FilterCmd),
    /// The whole path for a while (GRO, filter, every steering mode, a
    /// worker going offline, sockets with busy-polling and sleeping
    /// readers), invariants checked after every round; one verdict line.
    Soak(crate::soak::SoakArgs),
    /// Show or change a running rxpath's knobs (gro_flush_timeout,
    /// net.core.netdev_budget, net.core.netdev_budget_usecs) while packets
    /// flow, through its control socket.
    Ctl(crate::ctl::CtlArgs),
}

/// As [`exit_on_clap_error`], naming the config file's key when the
/// unknown argument came from it.
pub fn exit_on_clap_error_with(e: clap::Error, config_keys: &[String]) -> ExitCode {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() == ErrorKind::UnknownArgument {
        if let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) {
            let name = arg.trim_start_matches('-');
            if config_keys.iter().any(|k| k == name) {
                eprintln!("rxpath: error: --config: unknown key '{name}' (keys are the subcommand's long flags without dashes)");
                return ExitCode::from(2);
            }
        }
    }
    exit_on_clap_error(e)
}

/// clap prints multi-line errors with usage; ours are one line. Help and
/// version go out as clap renders them.
pub fn exit_on_clap_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        _ => {
            let text = e.render().to_string();
            let first = text
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("bad arguments");
            let first = first.trim_start_matches("error: ");
            eprintln!("rxpath: error: {first} (see rxpath --help)");
            ExitCode::from(2)
        }
    }
}
