//! Live knobs: a control socket next to a running `rxpath run` or `rxpath
//! echo`, and `rxpath ctl [--pid N] show | get NAME | set NAME VALUE`.
//!
//! The socket is `$XDG_RUNTIME_DIR/rxpath-PID.sock` (else
//! `/tmp/rxpath-PID.sock`), mode 0600, removed when the run ends. One line
//! per request, one answer: `show` lists every knob, `get NAME` its value,
//! `set NAME VALUE` changes it while packets flow (`ok`), and anything else
//! is `error: ...` with nothing changed. Names are the kernel's:
//! `gro_flush_timeout` (ns, every NAPI of the device, as
//! `/sys/class/net/IF/gro_flush_timeout`), `net.core.netdev_budget`,
//! `net.core.netdev_budget_usecs` (and `rps_cpus` with `--steer`, a bitmask
//! of workers; `rps_flow_cnt` with `--steer rfs`, every RX queue's dev flow
//! table, rounded up to a power of two; `filter_reloads` with `--filter`)
//! for `run`; `busy_poll`,
//! `net.core.busy_read`, `prefer_busy_poll`, `gro_flush_timeout` and
//! `napi_defer_hard_irqs` (as `/sys/class/net/IF/napi_defer_hard_irqs`)
//! for `echo`.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use rxpath_runtime::run::RunKnobs;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rxpath_contract::ctl::{Reply, Request, REPLY_MAX};

pub use rxpath_runtime::ctl::{answer, dir, path_of, Control, Knobs};

/// `rxpath run`'s knobs; with `--filter`, also `filter_reloads` (get:
/// reloads done; set 1: reload the rule files now, as SIGHUP does).
pub struct RunKnobSet(
    pub RunKnobs,
    pub Option<(Arc<AtomicBool>, Arc<std::sync::atomic::AtomicU64>)>,
);

impl Knobs for RunKnobSet {
    fn values(&self) -> Vec<(&'static str, u64)> {
        let k = &self.0;
        let mut v = vec![
            ("gro_flush_timeout", k.gro_flush_timeout.get()),
            (
                "net.core.netdev_budget",
                k.netdev_budget.load(Ordering::Relaxed) as u64,
            ),
            (
                "net.core.netdev_budget_usecs",
                k.netdev_budget_usecs.load(Ordering::Relaxed),
            ),
        ];
        if k.workers.load(Ordering::Relaxed) > 0 {
            v.push(("rps_cpus", k.rps_cpus.load(Ordering::Relaxed)));
        }
        let flow_cnt = k.rps_flow_cnt.load(Ordering::Relaxed);
        if flow_cnt > 0 {
            v.push(("rps_flow_cnt", flow_cnt));
        }
        if let Some((_, n)) = &self.1 {
            v.push(("filter_reloads", n.load(Ordering::Acquire)));
        }
        v
    }

    fn set(&self, name: &str, v: u64) -> Result<(), String> {
        let k = &self.0;
        match name {
            "rps_cpus" => {
                let n = k.workers.load(Ordering::Relaxed).min(64);
                if n < 64 && v >> n != 0 {
                    return Err(format!(
                        "{v:#x} names a worker past the {n} of this run (0 turns RPS off)"
                    ));
                }
                k.rps_cpus.store(v, Ordering::Relaxed)
            }
            // Rounded up to a power of two, as the kernel stores it.
            "rps_flow_cnt" if v >= 1 && crate::steer::RPS_FLOW_CNT.contains(&v) => {
                k.rps_flow_cnt.store(
                    v.max(rxpath_core::steer::DEV_FLOW_WAYS as u64)
                        .next_power_of_two(),
                    Ordering::Relaxed,
                )
            }
            "filter_reloads" => match (&self.1, v) {
                (Some((hup, _)), 1) => hup.store(true, Ordering::Release),
                _ => return Err("set 1 to reload the rule files".into()),
            },
            "gro_flush_timeout" if crate::limits::GRO_FLUSH_TIMEOUT_NS.contains(&v) => {
                k.gro_flush_timeout.set(v)
            }
            "net.core.netdev_budget" if crate::limits::NETDEV_BUDGET.contains(&v) => {
                k.netdev_budget.store(v as usize, Ordering::Relaxed)
            }
            "net.core.netdev_budget_usecs" if crate::limits::NETDEV_BUDGET.contains(&v) => {
                k.netdev_budget_usecs.store(v, Ordering::Relaxed)
            }
            _ => return Err(format!("{v} is out of range")),
        }
        Ok(())
    }
}

/// `rxpath ctl`.
#[derive(Debug, Clone, Args)]
pub struct CtlArgs {
    /// The rxpath process (default: the only one running).
    #[arg(long)]
    pub pid: Option<u32>,
    /// What to show or change.
    #[command(subcommand)]
    pub what: CtlCmd,
}

/// `rxpath ctl` verbs.
#[derive(Debug, Clone, Subcommand)]
pub enum CtlCmd {
    /// Every knob and its value.
    Show,
    /// One knob's value.
    Get {
        /// The knob.
        name: String,
    },
    /// Change a knob while packets flow.
    Set {
        /// The knob.
        name: String,
        /// Its new value.
        value: String,
    },
}

/// `rxpath ctl`: ask a running rxpath through its control socket.
pub fn ctl(a: CtlArgs) -> Result<ExitCode> {
    let path = match a.pid {
        Some(p) => path_of(p),
        None => {
            let mut found: Vec<PathBuf> = std::fs::read_dir(dir())?
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    // A process that died without removing its socket
                    // (SIGKILL) is not running: skip its file.
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .and_then(|n| n.strip_prefix("rxpath-")?.strip_suffix(".sock"))
                        .and_then(|pid| pid.parse::<u32>().ok())
                        .is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
                })
                .collect();
            found.sort();
            match found.len() {
                0 => bail!(
                    "no running rxpath has a control socket in {}",
                    dir().display()
                ),
                1 => found.remove(0),
                _ => bail!(
                    "several rxpath processes run ({}): say which with --pid",
                    found
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
    };
    let mut s = UnixStream::connect(&path).with_context(|| format!("{}", path.display()))?;
    // Whatever listens there may never answer, or never stop.
    s.set_read_timeout(Some(REPLY_TIMEOUT))?;
    s.set_write_timeout(Some(REPLY_TIMEOUT))?;
    let req = request(&a.what)?;
    writeln!(s, "{}", req.line()).with_context(|| format!("{}", path.display()))?;
    let mut b = Vec::new();
    std::io::Read::take(s, REPLY_MAX as u64 + 1)
        .read_to_end(&mut b)
        .with_context(|| format!("{}: waiting for the answer", path.display()))?;
    if b.len() > REPLY_MAX {
        bail!(
            "{}: the answer runs past {REPLY_MAX} bytes: not an rxpath control socket",
            path.display()
        );
    }
    let out = String::from_utf8_lossy(&b);
    let out = out.trim_end();
    match Reply::parse(&req, out) {
        Ok(Reply::Error(e)) => bail!("{e}"),
        Ok(_) => println!("{out}"),
        Err(e) => {
            let mut seen: String = out.chars().take(60).collect();
            if seen.len() < out.len() {
                seen.push_str("...");
            }
            bail!(
                "{}: {e}, not an rxpath control socket's: {seen:?}",
                path.display()
            )
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The request `what` asks for (a value that is not a number is said
/// here, as the process would).
fn request(what: &CtlCmd) -> Result<Request> {
    Ok(match what {
        CtlCmd::Show => Request::Show,
        CtlCmd::Get { name } => Request::Get(name.clone()),
        CtlCmd::Set { name, value } => match Request::parse(&format!("set {name} {value}")) {
            Ok(r) => r,
            Err(Reply::Error(e)) => bail!("{e}"),
            Err(_) => bail!("set NAME VALUE"),
        },
    })
}

/// How long `ctl` waits for the answer (a run answers at once).
const REPLY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
