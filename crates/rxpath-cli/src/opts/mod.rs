//! Command-line options, named as the kernel names the knobs.

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::process::ExitCode;
use std::time::Duration;

mod bench;
mod iface;
mod run;

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

/// Parse aa:bb:cc:dd:ee:ff.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split(':').collect();
    let mut m = [0u8; 6];
    if parts.len() != 6 {
        return Err(format!("'{s}' is not a MAC address"));
    }
    for (d, p) in m.iter_mut().zip(parts) {
        *d = u8::from_str_radix(p, 16).map_err(|_| format!("'{s}' is not a MAC address"))?;
    }
    Ok(m)
}

/// `198.19.0.0/16`, `2001:2::/48` or an address (a /32 or /128).
pub fn parse_prefix(s: &str) -> Result<(std::net::IpAddr, u8), String> {
    let (a, l) = s.split_once('/').unwrap_or((s, ""));
    let a: std::net::IpAddr = a
        .parse()
        .map_err(|_| format!("'{s}' is not an address or prefix"))?;
    let max = if a.is_ipv4() { 32 } else { 128 };
    let l = if l.is_empty() {
        max
    } else {
        l.parse::<u8>()
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| format!("'{s}': the prefix length must be 0..={max}"))?
    };
    Ok((a, l))
}

/// Accept 5, 5s, 500ms, 2m.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let err = || format!("'{s}' is not a duration (try 5, 5s, 500ms or 1m)");
    let (num, mul) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| err())?;
    if !v.is_finite() || v <= 0.0 || v * mul > 86_400.0 {
        return Err(err());
    }
    Ok(Duration::from_secs_f64(v * mul))
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

/// `--fault garbage=P,lying=P,starve=MS[,starve-every=MS],stall=MS[,stall-every=MS],seed=N`.
pub(crate) fn parse_faults(s: &str) -> Result<rxpath_dev::sim::Faults, String> {
    const KINDS: &str = "garbage, lying, starve, starve-every, stall, stall-every, seed";
    let mut f = rxpath_dev::sim::Faults {
        starve_every_ms: 100.0,
        stall_every_ms: 100.0,
        ..Default::default()
    };
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?}: want KIND=VALUE ({KINDS})"))?;
        let num = || -> Result<f64, String> {
            let x: f64 = v.parse().map_err(|_| format!("{k}={v}: not a number"))?;
            if !x.is_finite() || x < 0.0 {
                return Err(format!("{k}={v}: not a number of 0 or more"));
            }
            Ok(x)
        };
        let share = || -> Result<f64, String> {
            let p = num()?;
            if p > 1.0 {
                return Err(format!("{k}={v}: a share is 0 to 1"));
            }
            Ok(p)
        };
        let ms = || -> Result<f64, String> {
            let m = num()?;
            if m > 10_000.0 {
                return Err(format!("{k}={v}: at most 10000 ms"));
            }
            Ok(m)
        };
        match k {
            "garbage" => f.garbage = share()?,
            "lying" => f.lying = share()?,
            "starve" => f.starve_ms = ms()?,
            "starve-every" => f.starve_every_ms = ms()?.max(0.01),
            "stall" => f.stall_ms = ms()?,
            "stall-every" => f.stall_every_ms = ms()?.max(0.01),
            "seed" => f.seed = v.parse().map_err(|_| format!("seed={v}: not a number"))?,
            o => return Err(format!("unknown fault {o:?}: {KINDS}")),
        }
    }
    if f.garbage + f.lying > 1.0 {
        return Err("the shares add up to more than 1".into());
    }
    Ok(f)
}
