//! `rxpath exec`: run an unmodified program with its UDP sockets on
//! rxpath (`librxpath_preload.so` through `LD_PRELOAD`), then print the
//! path's accounting as `echo` does.

use anyhow::{bail, Context};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The shared object `rxpath exec` preloads.
pub const PRELOAD_LIB: &str = "librxpath_preload.so";

/// `rxpath exec` options.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The interface whose UDP sockets rxpath takes (`RXPATH_IFACE`).
    #[arg(long)]
    pub iface: String,
    /// AF_XDP, AF_PACKET, or AF_XDP with AF_PACKET if it cannot be set up.
    #[arg(long, default_value = "auto", value_parser = ["auto", "xdp", "packet"])]
    pub mode: String,
    /// Busy-poll for US µs in every read before sleeping (SO_BUSY_POLL for
    /// every socket; 0 = readers sleep).
    #[arg(long, default_value_t = 0, value_name = "US")]
    pub busy_poll: u32,
    /// Packets one poll of a reading or waiting thread takes from its queue
    /// (SO_BUSY_POLL_BUDGET for every socket unless it sets its own; the
    /// kernel's default is 8).
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub busy_poll_budget: u16,
    /// Prefer busy polling: keep the queue's interrupt masked NS after a
    /// busy poll.
    #[arg(long, default_value_t = 0, value_name = "NS")]
    pub prefer_busy_poll: u64,
    /// IRQ suspension: a thread that waits on a socket (without busy
    /// polling) polls its queue once and keeps the interrupt suspended up
    /// to NS; asleep, it waits on the device itself: one wakeup per burst
    /// instead of the interrupt thread's and then its own. An epoll wait
    /// that hands over events keeps the suspension for NS from then, with
    /// or without busy polling (0 = off).
    #[arg(long, default_value_t = 20_000_000, value_name = "NS")]
    pub irq_suspend_timeout: u64,
    /// NAPI threads.
    #[arg(long, default_value_t = 1)]
    pub napi_threads: usize,
    /// gro_flush_timeout, ns.
    #[arg(long, default_value_t = 0, value_name = "NS")]
    pub gro_flush_timeout: u64,
    /// napi_defer_hard_irqs.
    #[arg(long, default_value_t = 0)]
    pub defer_hard_irqs: u32,
    /// Serve Prometheus metrics on ADDR (host:port) while the program's
    /// host runs (`RXPATH_METRICS`).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Take only UDP sockets bound to these ports (`53,5000-5100`;
    /// `RXPATH_PORTS`); the rest stay the kernel's.
    #[arg(long, value_name = "LIST")]
    pub ports: Option<String>,
    /// Leave sockets on these ports to the kernel (`RXPATH_KERNEL_PORTS`).
    #[arg(long, value_name = "LIST")]
    pub kernel_ports: Option<String>,
    /// Rules by bound address and port, first match wins: `kernel
    /// 198.18.0.1:5000-5100, rxpath *:53` (`RXPATH_RULES`)
    #[arg(long, value_name = "RULES")]
    pub rules: Option<String>,
    /// A tuning profile: `latency` busy-polls 50 µs in every read unless
    /// --busy-poll says otherwise (`RXPATH_PROFILE`)
    #[arg(long, value_parser = ["latency"])]
    pub profile: Option<String>,
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
    rxpath_runtime::run::check_not_loopback(&a.iface)?;
    let vars = preload_vars(&a);
    check_vars(&vars)?;
    check_caps_reach_the_program(&a.iface)?;
    let lib = match &a.preload {
        Some(p) => p.clone(),
        None => find_preload()?,
    };
    let lib = lib
        .canonicalize()
        .with_context(|| format!("{}", lib.display()))?;
    let report = std::env::temp_dir().join(format!("rxpath-exec-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&report);
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(old) if !old.is_empty() => format!("{} {old}", lib.display()),
        _ => lib.display().to_string(),
    };
    let (prog, args) = a.program.split_first().context("no program given")?;
    if let Some(path) = on_path(prog).filter(|p| rxpath_dev::sys::sched::starts_privileged(p)) {
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
    let mut child = Command::new(prog)
        .args(args)
        .env("LD_PRELOAD", preload)
        .envs(vars.iter().map(|(k, _, v)| (k, v)))
        .env("RXPATH_REPORT", &report)
        .spawn()
        .with_context(|| format!("running {prog}"))?;
    let pid = child.id();
    let handle = signals.handle();
    let forward = std::thread::spawn(move || {
        for s in signals.forever() {
            if s == SIGTERM || s == SIGHUP {
                let _ = rxpath_dev::sys::sched::signal(pid, s);
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
    let v = v?;
    let ok = print_report(prog, &status, &v, a.json);
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
/// read, summed into one ([`merge_reports`]). `None` if there is none.
fn read_reports(path: &std::path::Path) -> Option<anyhow::Result<serde_json::Value>> {
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
        let v = text
            .map_err(anyhow::Error::from)
            .and_then(|t| Ok(serde_json::from_str::<serde_json::Value>(&t)?))
            .with_context(|| format!("reading the preload's report {}", f.display()));
        match v {
            Ok(v) => all.push(v),
            Err(e) => return Some(Err(e)),
        }
    }
    (!all.is_empty()).then(|| Ok(merge_reports(all)))
}

/// The reports of several processes as one: counts summed, maps summed key
/// by key, lists joined, the device's queues side by side, and
/// `processes` how many there were.
fn merge_reports(mut all: Vec<serde_json::Value>) -> serde_json::Value {
    use serde_json::Value;
    fn add(a: &mut Value, b: &Value) {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) => {
                if let (Some(x1), Some(y1)) = (x.as_u64(), y.as_u64()) {
                    *x = (x1 + y1).into();
                }
            }
            (Value::Object(x), Value::Object(y)) => {
                for (k, v) in y {
                    match x.get_mut(k) {
                        Some(a) => add(a, v),
                        None => {
                            x.insert(k.clone(), v.clone());
                        }
                    }
                }
            }
            (Value::Array(x), Value::Array(y)) => x.extend(y.iter().cloned()),
            (a @ Value::Null, b) => *a = b.clone(),
            _ => {}
        }
    }
    let n = all.len();
    let mut first = all.remove(0);
    for v in &all {
        for k in [
            "accelerated",
            "fallbacks",
            "unsupported",
            "kernel_reads",
            "accounting",
            "link_events",
            "sockets",
        ] {
            match first.get_mut(k) {
                Some(a) => add(a, &v[k]),
                None => {
                    first[k] = v[k].clone();
                }
            }
        }
        if first["backend"].is_null() {
            first["backend"] = v["backend"].clone();
        }
        match (
            first["host"]["queues"].as_array_mut(),
            v["host"]["queues"].as_array(),
        ) {
            (Some(a), Some(b)) => a.extend(b.iter().cloned()),
            (None, Some(_)) => first["host"] = v["host"].clone(),
            _ => {}
        }
    }
    first["processes"] = n.into();
    first
}

/// The program opens the interface (the preload, inside it), so the
/// capabilities must reach it: a child of root keeps root's bounding set;
/// anyone else's program gets only the ambient set (capabilities of this
/// binary, given with `setcap`, stay here).
/// AF_PACKET under exec steers with BPF programs (a tap filter, tcx
/// ingress), so every mode needs what AF_XDP needs.
fn check_caps_reach_the_program(iface: &str) -> anyhow::Result<()> {
    use rxpath_dev::sys::sched;
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

/// The variables exec hands the preload, each with the flag that gives
/// it (`RXPATH_REPORT` aside).
fn preload_vars(a: &ExecArgs) -> Vec<(&'static str, &'static str, String)> {
    let opt = |o: &Option<String>| o.clone().unwrap_or_default();
    vec![
        ("RXPATH_IFACE", "--iface", a.iface.clone()),
        ("RXPATH_MODE", "--mode", a.mode.clone()),
        ("RXPATH_BUSY_POLL", "--busy-poll", a.busy_poll.to_string()),
        (
            "RXPATH_BUSY_POLL_BUDGET",
            "--busy-poll-budget",
            a.busy_poll_budget.to_string(),
        ),
        (
            "RXPATH_PREFER_BUSY_POLL",
            "--prefer-busy-poll",
            a.prefer_busy_poll.to_string(),
        ),
        (
            "RXPATH_IRQ_SUSPEND_TIMEOUT",
            "--irq-suspend-timeout",
            a.irq_suspend_timeout.to_string(),
        ),
        (
            "RXPATH_NAPI_THREADS",
            "--napi-threads",
            a.napi_threads.to_string(),
        ),
        (
            "RXPATH_GRO_FLUSH_TIMEOUT",
            "--gro-flush-timeout",
            a.gro_flush_timeout.to_string(),
        ),
        (
            "RXPATH_NAPI_DEFER_HARD_IRQS",
            "--defer-hard-irqs",
            a.defer_hard_irqs.to_string(),
        ),
        ("RXPATH_PORTS", "--ports", opt(&a.ports)),
        (
            "RXPATH_KERNEL_PORTS",
            "--kernel-ports",
            opt(&a.kernel_ports),
        ),
        (
            "RXPATH_METRICS",
            "--metrics",
            a.metrics.map(|m| m.to_string()).unwrap_or_default(),
        ),
        ("RXPATH_RULES", "--rules", opt(&a.rules)),
        ("RXPATH_PROFILE", "--profile", opt(&a.profile)),
    ]
}

/// Parse `vars` as the preload will, before the program starts: a value
/// it refuses would leave the program on the kernel's sockets. A
/// `RXPATH_CONFIG` file in the environment fills the variables left
/// empty, so it is read too. The error is one line naming the flag.
fn check_vars(vars: &[(&'static str, &'static str, String)]) -> anyhow::Result<()> {
    use crate::preload_config::Config;
    let one_line = |e: &str| e.split_whitespace().collect::<Vec<_>>().join(" ");
    let get = |k: &str| {
        vars.iter()
            .find(|(v, _, _)| *v == k)
            .map(|(_, _, x)| x.clone())
    };
    Config::from_vars(get).map_err(|e| {
        // The preload names its variable; the user gave a flag.
        let flag = vars
            .iter()
            .find_map(|(v, f, _)| Some((*f, e.strip_prefix(v)?.strip_prefix('=')?)));
        match flag {
            Some((f, rest)) => anyhow::anyhow!("{f} {}", one_line(rest)),
            None => anyhow::anyhow!("{}", one_line(&e)),
        }
    })?;
    if let Some(p) = std::env::var("RXPATH_CONFIG")
        .ok()
        .filter(|p| !p.is_empty())
    {
        let env = |k: &str| match k {
            "RXPATH_CONFIG" => Some(p.clone()),
            k => get(k),
        };
        Config::from_env_with(env).map_err(|e| {
            anyhow::anyhow!(
                "{} (RXPATH_CONFIG={p:?} gives the program what exec leaves unset)",
                one_line(&e)
            )
        })?;
    }
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
    v: &serde_json::Value,
    json: bool,
) -> bool {
    let acc = &v["accounting"];
    let n = |k: &str| acc[k].as_u64().unwrap_or(0);
    let held = acc.is_null()
        || (n("received") == n("delivered") + n("dropped")
            && n("frames_home") == n("frames_total"));
    if json {
        println!("{v}");
        return held;
    }
    println!(
        "rxpath exec: {prog} {status}; sockets on rxpath {} ({}), left to the kernel {}, refused calls {}; \
         datagrams read from the kernel sockets behind them {}",
        v["accelerated"],
        v["backend"].as_str().unwrap_or("no host started"),
        v["fallbacks"],
        v["unsupported"],
        v["kernel_reads"].as_u64().unwrap_or(0),
    );
    if let Some(n) = v["processes"].as_u64().filter(|&n| n > 1) {
        println!("processes with a host: {n} (their reports summed)");
    }
    for e in v["link_events"].as_array().into_iter().flatten() {
        println!("interface: {}", e.as_str().unwrap_or_default());
    }
    if let Some(line) = sockets_line(v) {
        println!("{line}");
    }
    if acc.is_null() {
        return true;
    }
    let verdict = |b: bool| if b { "ok" } else { "MISMATCH" };
    println!(
        "accounting: received {} = delivered {} + dropped {} {}: {}",
        n("received"),
        n("delivered"),
        n("dropped"),
        acc["drops"],
        verdict(n("received") == n("delivered") + n("dropped")),
    );
    println!(
        "frames: {}/{} back in the pool: {}",
        n("frames_home"),
        n("frames_total"),
        verdict(n("frames_home") == n("frames_total")),
    );
    if let Some(line) = device_line(v) {
        println!("{line}");
    }
    if let Some(line) = tx_line(v) {
        println!("{line}");
    }
    held
}

/// Which path served the sockets rxpath took, the same ones counted once:
/// `sockets: 198.18.0.1:53 rxpath x2; 0.0.0.0:5353 kernel (a forked child
/// reads it)`. `None` without any.
fn sockets_line(v: &serde_json::Value) -> Option<String> {
    let list = v["sockets"].as_array().filter(|l| !l.is_empty())?;
    let mut seen: Vec<(String, usize)> = Vec::new();
    for s in list {
        let mut d = format!(
            "{} {}",
            s["addr"].as_str().unwrap_or("?"),
            s["path"].as_str().unwrap_or("?")
        );
        if let Some(w) = s["why"].as_str() {
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

/// What the device itself did with the frames offered to the host's
/// queues, summed over them, in `rxpath run`'s words: a frame the device
/// dropped (its RX ring full, no free frame to fill) never reached the
/// path's accounting above, so it is said here. `None` without a host.
fn device_line(v: &serde_json::Value) -> Option<String> {
    let queues = v["host"]["queues"].as_array()?;
    let sum = |k: &str| -> u64 {
        queues
            .iter()
            .map(|q| q["device"][k].as_u64().unwrap_or(0))
            .sum()
    };
    Some(crate::report::device_line([
        sum("offered"),
        sum("rx_ring"),
        sum("rx_missed"),
        sum("rx_no_buffer"),
        sum("rx_too_long"),
    ]))
}

/// What the AF_XDP TX ring took and what the device completed: frames
/// posted that never completed (a device gone, or one that stopped
/// completing) are replies that did not leave, not counted in
/// `out_datagrams` but in `tx_unfinished` (by datagram), said here.
/// `None` without a TX ring (AF_PACKET's sends are the kernel's, which
/// took them).
fn tx_line(v: &serde_json::Value) -> Option<String> {
    let tx = &v["host"]["tx"];
    let sent = tx["xsk_tx_sent"].as_u64()?;
    let done = tx["xsk_tx_completed"].as_u64().unwrap_or(0);
    let mut l = format!("tx ring: posted={sent} completed={done}");
    if sent > done {
        let lost = v["host"]["sock"]["tx_unfinished"].as_u64().unwrap_or(0);
        l.push_str(&format!(
            "; {} frames never completed: {lost} replies did not leave \
             (tx_unfinished, not in out_datagrams)",
            sent - done
        ));
    }
    Some(l)
}

#[cfg(test)]
mod tests {
    use super::{device_line, tx_line};

    #[test]
    fn frames_the_device_never_completed_are_said() {
        let v = serde_json::json!({"host": {
            "tx": {"xsk_tx_sent": 10, "xsk_tx_completed": 7},
            "sock": {"tx_unfinished": 2},
        }});
        let l = tx_line(&v).unwrap();
        assert!(
            l.starts_with("tx ring: posted=10 completed=7; 3 frames never completed: 2 replies"),
            "{l}"
        );
        let ok = serde_json::json!({"host": {"tx": {"xsk_tx_sent": 5, "xsk_tx_completed": 5}}});
        assert_eq!(
            tx_line(&ok).as_deref(),
            Some("tx ring: posted=5 completed=5")
        );
        assert_eq!(tx_line(&serde_json::json!({"host": {"tx": {}}})), None);
    }

    #[test]
    fn the_device_line_sums_the_drops_of_every_queue() {
        let v = serde_json::json!({"host": {"queues": [
            {"device": {"offered": 100, "rx_ring": 90, "rx_missed": 7, "rx_no_buffer": 3, "rx_too_long": 0}},
            {"device": {"offered": 50, "rx_ring": 49, "rx_missed": 1, "rx_no_buffer": 0, "rx_too_long": 0}},
        ]}});
        assert_eq!(
            device_line(&v).as_deref(),
            Some("device: offered=150 rx_ring=139 rx_missed=8 rx_no_buffer=3 rx_too_long=0")
        );
        assert_eq!(device_line(&serde_json::json!({"accelerated": 0})), None);
    }
}
