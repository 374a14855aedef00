//! `rxpath`: the command line.

mod bench;
mod bench_gro;
mod opts;
mod report;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match opts::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return opts::exit_on_clap_error(e),
    };
    let result = match cli.cmd {
        opts::Cmd::Run(a) => report::run(a),
        opts::Cmd::Bench(b) => bench::bench(b),
        opts::Cmd::Lab(l) => lab(l),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rxpath: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn lab(a: opts::LabArgs) -> anyhow::Result<ExitCode> {
    use rxpath_runtime::lab::{Topology, HOST_ADDR, PEER_ADDR};
    let t = Topology {
        ns: a.netns,
        host_if: a.host_if,
        peer_if: a.peer_if,
        queues: a.queues,
        gro: a.gro,
        threaded: a.threaded,
    };
    t.validate()?;
    if a.action != opts::LabAction::Status && !rxpath_dev::sys::sched::is_root() {
        anyhow::bail!(
            "lab {:?} needs root (CAP_NET_ADMIN): run it with sudo",
            a.action
        );
    }
    match a.action {
        opts::LabAction::Up => {
            t.up()?;
            println!(
                "lab up: {} ({HOST_ADDR}/24) <-> {} ({PEER_ADDR}/24) in netns {}, {} queues, gro {}, threaded napi {}",
                t.host_if,
                t.peer_if,
                t.ns,
                t.queues,
                if t.gro || t.threaded { "on" } else { "off" },
                if t.threaded { "on" } else { "off" }
            );
        }
        opts::LabAction::Down => {
            t.down()?;
            println!("lab down: {} and netns {} removed", t.host_if, t.ns);
        }
        opts::LabAction::Status => {
            let s = t.status();
            println!(
                "netns {}: {}; {}: {}{}",
                t.ns,
                if s.ns { "present" } else { "absent" },
                t.host_if,
                if s.host_if { "present" } else { "absent" },
                match (s.queues, s.gro, s.threaded) {
                    (Some(q), g, th) => format!(
                        ", {q} rx queues, gro {}, threaded napi {}",
                        g.map_or("?", |g| if g { "on" } else { "off" }),
                        th.map_or("?", |t| if t { "on" } else { "off" })
                    ),
                    _ => String::new(),
                }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
