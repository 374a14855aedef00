//! `rxpath lab`: the test topology (a veth pair, the peer end in a network
//! namespace, addresses from 198.18.0.0/15).

use clap::{Args, ValueEnum};
use std::process::ExitCode;

/// What `rxpath lab` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LabAction {
    /// Build it (idempotent).
    Up,
    /// Remove it (idempotent).
    Down,
    /// Show what exists.
    Status,
}

/// `rxpath lab` arguments.
#[derive(Debug, Clone, Args)]
pub struct LabArgs {
    /// up, down or status.
    #[arg(value_enum)]
    pub action: LabAction,
    /// RX/TX queues on each veth end.
    #[arg(long, default_value_t = 2)]
    pub queues: usize,
    /// GRO on the host end.
    #[arg(long)]
    pub gro: bool,
    /// Threaded NAPI on the host end (turns GRO on: veth needs it).
    #[arg(long)]
    pub threaded: bool,
    /// Host-side interface name.
    #[arg(long, default_value = "rxp0")]
    pub host_if: String,
    /// Peer-side interface name.
    #[arg(long, default_value = "rxp1")]
    pub peer_if: String,
    /// Peer namespace name.
    #[arg(long, default_value = "rxp-peer")]
    pub netns: String,
}

/// `rxpath lab`: build, remove or show the test topology.
pub fn lab(a: LabArgs) -> anyhow::Result<ExitCode> {
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
    if a.action != LabAction::Status && !rxpath_os::sched::is_root() {
        anyhow::bail!(
            "lab {:?} needs root (CAP_NET_ADMIN): run it with sudo",
            a.action
        );
    }
    match a.action {
        LabAction::Up => {
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
        LabAction::Down => {
            t.down()?;
            println!("lab down: {} and netns {} removed", t.host_if, t.ns);
        }
        LabAction::Status => {
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
