//! `rxpath exec`: run an unmodified program with its UDP sockets on
//! rxpath (`librxpath_preload.so` through `LD_PRELOAD`), then print the
//! path's accounting as `echo` does.

use crate::preload_flags::PreloadFlags;
use anyhow::{bail, Context};
use clap::Args;
use rxpath_contract::report::{Path as Served, PreloadReport};
use rxpath_contract::{Config, OPTIONS};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The shared object `rxpath exec` preloads.
pub const PRELOAD_LIB: &str = "librxpath_preload.so";

/// `rxpath exec` options.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The preload's options, one flag each.
    #[command(flatten)]
    pub opts: PreloadFlags,
    /// The preload library (default: librxpath_preload.so beside this
    /// binary).
    #[arg(long, value_name = "FILE")]
    pub preload: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    pub program: Vec<String>,
}

/// `librxpath_preload.so` beside the running binary (cargo puts both in
/// `target/<profile>/`), or in its `deps/`.
pub fn find_preload() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating this binary")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    for p in [dir.join(PRELOAD_LIB), dir.join("deps").join(PRELOAD_LIB)] {
        if p.exists() {
            return Ok(p);
        }
    }
    bail!(
        "{PRELOAD_LIB} is not beside {} (build it: cargo build --release -p rxpath-preload, \
         or give --preload FILE)",
        exe.display()
    )
}

/// `rxpath exec`: run the program on rxpath, wait for it, report.
pub fn exec(a: ExecArgs) -> anyhow::Result<ExitCode> {
    let mut config = a.opts.config();
    let iface = config.iface.clone().context("no --iface")?;
    rxpath_runtime::run::check_not_loopback(&iface)?;
    check_config_file(&config)?;
    check_caps_reach_the_program(&iface)?;
    let lib = match &a.preload {
        Some(p) => p.clone(),
        None => find_preload()?,
    };
    let lib = lib
        .canonicalize()
        .with_context(|| format!("{}", lib.display()))?;
    let report = std::env::temp_dir().join(format!("rxpath-exec-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&report);
    config.report = Some(report.clone());
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(old) if !old.is_empty() => format!("{} {old}", lib.display()),
        _ => lib.display().to_string(),
    };
    let (prog, args) = a.program.split_first().context("no program given")?;
    if let Some(path) = on_path(prog).filter(|p| rxpath_os::sched::starts_privileged(p)) {
        eprintln!(
            "rxpath exec: {} is setuid, setgid or has file capabilities: the dynamic linker \
             starts it without LD_PRELOAD, so its sockets stay the kernel's (run it as root \
             without those bits instead)",
            path.display()
        );
    }
    // As `system()` does, the wrapper waits out SIGINT and SIGQUIT (the
    // terminal sends them to the program too) and passes SIGTERM and
    // SIGHUP on, so the report is printed however the program ends.
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGQUIT, SIGTERM, SIGHUP])
        .context("installing signal handlers")?;
    let mut cmd = Command::new(prog);
    // The program gets exec's options and no others (a variable of the
    // caller's own would change what the flags said).
    for o in OPTIONS {
        cmd.env_remove(o.var);
    }
    let mut child = cmd
        .args(args)
        .env("LD_PRELOAD", preload)
        .envs(config.to_vars())
        .spawn()
        .with_context(|| format!("running {prog}"))?;
    let pid = child.id();
    let handle = signals.handle();
    let forward = std::thread::spawn(move || {
        for s in signals.forever() {
            if s == SIGTERM || s == SIGHUP {
                let _ = rxpath_os::sched::signal(pid, s);
            }
        }
    });
    let status = child.wait().with_context(|| format!("waiting for {prog}"));
    handle.close();
    let _ = forward.join();
    let status = status?;
    // The preload removes its control socket at exit; a program killed by
    // a signal never got there, and its pid is gone now: the socket is
    // stale.
    let _ = std::fs::remove_file(rxpath_runtime::ctl::path_of(pid));
    let reports = read_reports(&report);
    let code = status.code().map_or(128 + status_signal(&status), |c| c);
    let Some(v) = reports else {
        if let Some(c) = status.code() {
            // The preload writes its report at exit once a socket made
            // its host start: a program that ended by itself without one
            // served nothing, and its status is its own.
            eprintln!(
                "rxpath exec: {prog} {status}; no socket was served (it bound no UDP socket \
                 rxpath takes, or it never loaded {PRELOAD_LIB}: a static binary?)"
            );
            return Ok(ExitCode::from(c.clamp(0, 255) as u8));
        }
        eprintln!(
            "rxpath exec: {prog} {status}; it left no report (killed before exit, or it never \
             loaded {PRELOAD_LIB}: a static binary?)"
        );
        return Ok(ExitCode::from(code.clamp(1, 255) as u8));
    };
    let r = v?;
    let ok = print_report(prog, &status, &r, a.json);
    Ok(match (code, ok) {
        (0, false) => ExitCode::FAILURE,
        (c, _) => ExitCode::from(c.clamp(0, 255) as u8),
    })
}

/// Where `prog` is: itself if it names a path, else the first match on
/// `PATH`, as `execvp` looks.
fn on_path(prog: &str) -> Option<std::path::PathBuf> {
    if prog.contains('/') {
        return Some(prog.into());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

/// The reports the program's processes left: `path` and `path.PID` (a
/// process it started with `exec` that served sockets too), removed once
/// read, summed into one ([`PreloadReport::merge`]). `None` if there is
/// none.
fn read_reports(path: &std::path::Path) -> Option<anyhow::Result<PreloadReport>> {
    let dir = path.parent()?;
    let name = path.file_name()?.to_string_lossy().into_owned();
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .map(|f| f.to_string_lossy())
                .is_some_and(|f| f == name || f.starts_with(&format!("{name}.")))
        })
        .collect();
    files.sort();
    let mut all = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f);
        let _ = std::fs::remove_file(f);
        // Made when its process's host started, written at its exit: empty
        // if it never exited (killed by a signal).
        if text.as_ref().is_ok_and(|t| t.is_empty()) {
            continue;
        }
        let r = text
            .map_err(anyhow::Error::from)
            .and_then(|t| Ok(serde_json::from_str::<PreloadReport>(&t)?))
            .with_context(|| format!("reading the preload's report {}", f.display()));
        match r {
            Ok(r) => all.push(r),
            Err(e) => return Some(Err(e)),
        }
    }
    PreloadReport::merge(all).map(Ok)
}

/// The program opens the interface (the preload, inside it), so the
/// capabilities must reach it: a child of root keeps root's bounding set;
/// anyone else's program gets only the ambient set (capabilities of this
/// binary, given with `setcap`, stay here).
/// AF_PACKET under exec steers with BPF programs (a tap filter, tcx
/// ingress), so every mode needs what AF_XDP needs.
fn check_caps_reach_the_program(iface: &str) -> anyhow::Result<()> {
    use rxpath_os::sched;
    let reach = match sched::is_root() {
        true => sched::cap_set("CapBnd"),
        false => sched::cap_set("CapAmb"),
    };
    let Some(missing) = rxpath_runtime::run::missing_caps(reach, true) else {
        return Ok(());
    };
    let caps = sched::net_caps()
        .iter()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect::<Vec<_>>()
        .join(",");
    bail!(
        "the program opens {iface} and {missing} in what reaches it: run exec as root, or \
         pass them on as ambient capabilities: `sudo setpriv --reuid $(id -u) --regid $(id -g) \
         --init-groups --inh-caps {caps} --ambient-caps {caps} rxpath exec ...`"
    )
}

/// A `RXPATH_CONFIG` file in exec's environment reaches the program
/// too and fills the options exec's flags leave unset: check it as the
/// preload will read it, before the program starts. The error is one
/// line.
fn check_config_file(config: &Config) -> anyhow::Result<()> {
    let var = rxpath_contract::config::CONFIG_VAR;
    let Some(p) = std::env::var(var).ok().filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    let vars = config.to_vars();
    let env = |k: &str| match k {
        k if k == var => Some(p.clone()),
        k => vars.iter().find(|(v, _)| *v == k).map(|(_, x)| x.clone()),
    };
    let one_line = |e: &str| e.split_whitespace().collect::<Vec<_>>().join(" ");
    Config::from_env_with(env).map_err(|e| {
        anyhow::anyhow!(
            "{} ({var}={p:?} gives the program what exec leaves unset)",
            one_line(&e)
        )
    })?;
    Ok(())
}

fn status_signal(s: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    s.signal().unwrap_or(0)
}

/// Print what the path did; false if the accounting does not hold.
fn print_report(
    prog: &str,
    status: &std::process::ExitStatus,
    r: &PreloadReport,
    json: bool,
) -> bool {
    let held = r
        .accounting
        .as_ref()
        .is_none_or(|a| a.adds_up() && a.frames_home());
    if json {
        println!("{}", serde_json::to_string(r).unwrap_or_default());
        return held;
    }
    let fallbacks = serde_json::to_string(&r.fallbacks).unwrap_or_default();
    let unsupported = serde_json::to_string(&r.unsupported).unwrap_or_default();
    println!(
        "rxpath exec: {prog} {status}; sockets on rxpath {} ({}), left to the kernel {fallbacks}, \
         refused calls {unsupported}; datagrams read from the kernel sockets behind them {}",
        r.accelerated,
        r.backend.as_deref().unwrap_or("no host started"),
        r.kernel_reads,
    );
    if r.processes > 1 {
        println!(
            "processes with a host: {} (their reports summed)",
            r.processes
        );
    }
    for e in &r.link_events {
        println!("interface: {e}");
    }
    if let Some(line) = sockets_line(r) {
        println!("{line}");
    }
    let Some(acc) = &r.accounting else {
        return true;
    };
    let verdict = |b: bool| if b { "ok" } else { "MISMATCH" };
    println!(
        "accounting: received {} = delivered {} + dropped {} {}: {}",
        acc.received,
        acc.delivered,
        acc.dropped,
        serde_json::to_string(&acc.drops).unwrap_or_default(),
        verdict(acc.adds_up()),
    );
    println!(
        "frames: {}/{} back in the pool: {}",
        acc.frames_home,
        acc.frames_total,
        verdict(acc.frames_home()),
    );
    if let Some(d) = r.device {
        println!(
            "{}",
            crate::report::device_line([
                d.offered,
                d.rx_ring,
                d.rx_missed,
                d.rx_no_buffer,
                d.rx_too_long,
            ])
        );
    }
    if let Some(line) = tx_line(r) {
        println!("{line}");
    }
    held
}

/// Which path served the sockets rxpath took, the same ones counted once:
/// `sockets: 198.18.0.1:53 rxpath x2; 0.0.0.0:5353 kernel (a forked child
/// reads it)`. `None` without any.
fn sockets_line(r: &PreloadReport) -> Option<String> {
    if r.sockets.is_empty() {
        return None;
    }
    let mut seen: Vec<(String, usize)> = Vec::new();
    for s in &r.sockets {
        let path = match s.path {
            Served::Rxpath => "rxpath",
            Served::Kernel => "kernel",
        };
        let mut d = format!("{} {path}", s.addr);
        if let Some(w) = &s.why {
            d.push_str(&format!(" ({w})"));
        }
        match seen.iter_mut().find(|(x, _)| *x == d) {
            Some((_, n)) => *n += 1,
            None => seen.push((d, 1)),
        }
    }
    let parts: Vec<String> = seen
        .into_iter()
        .map(|(d, n)| if n > 1 { format!("{d} x{n}") } else { d })
        .collect();
    Some(format!("sockets: {}", parts.join("; ")))
}

/// What the AF_XDP TX ring took and what the device completed: frames
/// posted that never completed (a device gone, or one that stopped
/// completing) are replies that did not leave, not counted in
/// `out_datagrams` but in `tx_unfinished` (by datagram), said here.
/// `None` without a TX ring (AF_PACKET's sends are the kernel's, which
/// took them).
fn tx_line(r: &PreloadReport) -> Option<String> {
    let t = r.tx?;
    let mut l = format!("tx ring: posted={} completed={}", t.posted, t.completed);
    if t.posted > t.completed {
        l.push_str(&format!(
            "; {} frames never completed: {} replies did not leave \
             (tx_unfinished, not in out_datagrams)",
            t.posted - t.completed,
            t.unfinished
        ));
    }
    Some(l)
}

#[cfg(test)]
mod tests {
    use super::tx_line;
    use rxpath_contract::report::{PreloadReport, TxRing};

    #[test]
    fn frames_the_device_never_completed_are_said() {
        let r = |posted, completed, unfinished| PreloadReport {
            tx: Some(TxRing {
                posted,
                completed,
                unfinished,
            }),
            ..PreloadReport::default()
        };
        let l = tx_line(&r(10, 7, 2)).unwrap();
        assert!(
            l.starts_with("tx ring: posted=10 completed=7; 3 frames never completed: 2 replies"),
            "{l}"
        );
        assert_eq!(
            tx_line(&r(5, 5, 0)).as_deref(),
            Some("tx ring: posted=5 completed=5")
        );
        assert_eq!(tx_line(&PreloadReport::default()), None);
    }
}
