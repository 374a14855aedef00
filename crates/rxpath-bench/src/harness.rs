//! What every bench uses: peers (processes whose failure is said),
//! medians and ranges, the rxdrop-shaped run config and its measurement,
//! the list of what could not be measured, and a clean stop on signals.

use anyhow::{Context, Result};
use rxpath_core::napi::BundleMode;
use rxpath_dev::sim::{Mix, SimConfig, TrafficConfig};
use rxpath_dev::sync::lock;
use rxpath_runtime::{Producer, RunConfig, StackKind};
use std::process::Command;
use std::time::Duration;

static UNMEASURED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// What could not be measured so far (taken: the list is emptied).
pub(crate) fn take_unmeasured() -> Vec<String> {
    std::mem::take(&mut *lock(&UNMEASURED))
}

/// SIGINT and SIGTERM stop a bench at once and cleanly: the processes it
/// started (peers, generators: every descendant) are killed, the
/// namespaces and veth pairs it made are removed, and it exits with 128 +
/// the signal (130, 143). XDP programs go with the process (BPF links).
pub(crate) fn stop_cleanly_on_signals(what: &'static str) -> Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .context("installing the SIGINT/SIGTERM handler")?;
    std::thread::Builder::new()
        .name("rxpath-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
                eprintln!("\nrxpath {what}: {name}: stopping, removing what it made");
                let killed = kill_descendants();
                let gone = rxpath_runtime::lab::cleanup_all();
                eprintln!(
                    "rxpath {what}: {killed} process(es) stopped, {} removed; no results (exit {})",
                    if gone.is_empty() {
                        "no namespace".to_string()
                    } else {
                        gone.join(", ")
                    },
                    128 + sig
                );
                std::process::exit(128 + sig);
            }
        })
        .context("starting the signal thread")?;
    Ok(())
}

/// Kill every descendant of this process (children first found, then
/// theirs), from `/proc`. Returns how many.
fn kill_descendants() -> usize {
    let me = std::process::id();
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // pid (comm) state ppid ...: comm may hold spaces and parens.
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut tree = vec![me];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parents.iter().filter(|&&(_, pp)| pp == p).map(|&(c, _)| c));
        i += 1;
    }
    let kids: Vec<String> = tree[1..].iter().map(|p| p.to_string()).collect();
    if !kids.is_empty() {
        let mut args = vec!["-KILL"];
        args.extend(kids.iter().map(|s| s.as_str()));
        let _ = rxpath_runtime::lab::sh("kill", &args);
    }
    kids.len()
}

/// A peer the bench meant to run could not be measured: say so at once,
/// loudly, and again at the end (where `--require-peers` fails the run).
/// Skips the user asked for (`--no-dpdk`) are not reported here.
pub(crate) fn peer_not_measured(peer: &str, why: &str) {
    eprintln!("rxpath bench: PEER NOT MEASURED: {peer}: {why}");
    lock(&UNMEASURED).push(format!("{peer}: {why}"));
}

/// The median of the measured values (the mean of the middle two for an
/// even count); NaN, which every printer shows as "not measured", when
/// there is none. NaN and infinite samples are left out.
/// The median over rounds of `f` of configuration `i` (`results[round][i]`:
/// `None` where it was not run or failed).
pub(crate) fn column_median<M: Copy>(
    results: &[Vec<Option<M>>],
    i: usize,
    f: impl Fn(&M) -> f64,
) -> f64 {
    median(
        results
            .iter()
            .filter_map(|row| row[i])
            .map(|m| f(&m))
            .collect(),
    )
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 0 => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        n => v[n / 2],
    }
}

/// "min–max" of a sample in Mpps.
pub(crate) fn range(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    format!("{:.1}–{:.1}", lo / 1e6, hi / 1e6)
}

pub(crate) fn rxdrop_config(
    bundle: usize,
    split: bool,
    producer: Producer,
    duration: Duration,
) -> RunConfig {
    RunConfig {
        sim: SimConfig {
            queues: 1,
            ring_size: 1024,
            frames_per_queue: 4096,
            ..SimConfig::default()
        },
        traffic: TrafficConfig {
            flows: 64,
            mix: Mix::Udp,
            udp_frame: 60,
            ..TrafficConfig::default()
        },
        bundle: BundleMode {
            size: bundle,
            split_on_hash: split,
        },
        interrupts: false,
        producer,
        stack: StackKind::Rxdrop,
        threads: 1,
        duration,
        tick: duration * 2,
        pin: true,
        ..RunConfig::default()
    }
}

pub(crate) fn measure(cfg: &RunConfig) -> Result<(f64, rxpath_runtime::Report)> {
    let r = rxpath_runtime::run(cfg, |_| {})?;
    anyhow::ensure!(
        r.consistent(),
        "accounting failed in benchmark run: {}",
        rxpath_cli::report::summary(&r)
    );
    Ok((r.rx_pps(), r))
}

/// The CPUs of a request/response bench: the client on the first, the
/// server on the last (`None`, `None` on one CPU: both float).
pub(crate) fn client_server_cpus() -> (Option<usize>, Option<usize>) {
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    if ncpu >= 2 {
        (Some(0), Some(ncpu - 1))
    } else {
        (None, None)
    }
}

/// A CPU for a bench's heading: its number, or `any`.
pub(crate) fn cpu_name(c: Option<usize>) -> String {
    c.map_or("any".into(), |c| c.to_string())
}

/// Start a peer from a thread that may run on every CPU: a child inherits
/// the affinity of the thread that forks it, and a bench thread is often
/// pinned to one core (testpmd's forwarding lcore then never ran).
pub(crate) fn spawn_unpinned(mut cmd: Command) -> std::io::Result<std::process::Child> {
    // A bench started in the background still stops its peers with SIGINT.
    rxpath_os::sched::default_sigint_in_child(&mut cmd);
    std::thread::spawn(move || {
        rxpath_os::sched::unpin_current()?;
        cmd.spawn()
    })
    .join()
    .unwrap_or_else(|_| Err(std::io::Error::other("spawning thread panicked")))
}

/// Start `dpdk-testpmd` in rxonly mode on `vdev` (no hugepages, both CPUs,
/// counters once a second), from a thread allowed on every CPU.
/// `package` names what to install when it is missing.
pub(crate) fn testpmd_rxonly(vdev: &str, package: &str) -> Result<Peer> {
    let bin = which("dpdk-testpmd")
        .with_context(|| format!("dpdk-testpmd not installed (apt-get install {package})"))?;
    let mut cmd = Command::new(bin);
    cmd.args(["--no-huge", "-m", "1024", "--no-pci", "-l", "0-1"])
        .args(["--log-level=error", "--vdev", vdev, "--"])
        .args(["--forward-mode=rxonly", "--total-num-mbufs=16384"])
        .args(["--stats-period", "1"]);
    Peer::spawn("dpdk-testpmd", cmd)
}

/// A peer process a bench runs beside rxpath (testpmd): stdin from /dev/null, stdout
/// piped, stderr kept in a file so that a failure is reported with the
/// peer's own words, and its exit status checked when it stops.
pub(crate) struct Peer {
    name: &'static str,
    child: std::process::Child,
    stderr: std::path::PathBuf,
}

impl Peer {
    /// Start `cmd` (from a thread allowed on every CPU).
    pub(crate) fn spawn(name: &'static str, mut cmd: Command) -> Result<Peer> {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let stderr = std::env::temp_dir().join(format!(
            "rxpath-bench-{name}-{}-{n}.stderr",
            std::process::id()
        ));
        let f = std::fs::File::create(&stderr)
            .with_context(|| format!("creating {}", stderr.display()))?;
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(f);
        let child = spawn_unpinned(cmd).with_context(|| format!("starting {name}"))?;
        Ok(Peer {
            name,
            child,
            stderr,
        })
    }

    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn stdout(&mut self) -> Option<std::process::ChildStdout> {
        self.child.stdout.take()
    }

    /// The last lines the peer wrote to stderr, on one line.
    pub(crate) fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = lines[lines.len().saturating_sub(4)..].join(" | ");
        if tail.is_empty() {
            "nothing on stderr".into()
        } else {
            tail
        }
    }

    /// Wait up to `grace` for a peer that ends by itself (a one-off
    /// server) to exit: whether it did.
    pub(crate) fn wait_exit(&mut self, grace: Duration) -> Result<bool> {
        let until = std::time::Instant::now() + grace;
        loop {
            if self.child.try_wait()?.is_some() {
                return Ok(true);
            }
            if std::time::Instant::now() >= until {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// An error if the peer has already exited (it died while the bench
    /// needed it).
    pub(crate) fn check_alive(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(st) => anyhow::bail!("{} exited early ({st}): {}", self.name, self.stderr_tail()),
        }
    }

    /// Kill a peer that serves until stopped (a sockperf server): an error,
    /// with its stderr, if it had already exited.
    pub(crate) fn kill(mut self) -> Result<()> {
        let early = self.check_alive();
        let _ = self.child.kill();
        let _ = self.child.wait();
        early
    }

    /// Stop the peer as a user would, with SIGINT (testpmd stops its
    /// ports, prints its final counters and exits 0), up to `grace` to
    /// exit, then a kill. An error, with its stderr, if it exited
    /// non-zero (before or after the signal) or had to be killed.
    pub(crate) fn interrupt(mut self, grace: Duration) -> Result<()> {
        if self.child.try_wait()?.is_none() {
            let pid = self.child.id().to_string();
            let _ = Command::new("kill").args(["-INT", &pid]).status();
        }
        let until = std::time::Instant::now() + grace;
        let status = loop {
            if let Some(st) = self.child.try_wait()? {
                break Some(st);
            }
            if std::time::Instant::now() >= until {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let tail = self.stderr_tail();
        let _ = std::fs::remove_file(&self.stderr);
        use std::os::unix::process::ExitStatusExt;
        match status {
            // Gone by the signal itself (no handler) is a clean stop too.
            Some(st) if st.success() || st.signal() == Some(2) => Ok(()),
            Some(st) => anyhow::bail!("{} failed ({st}): {tail}", self.name),
            None => anyhow::bail!(
                "{} did not exit within {:.0} s of SIGINT (killed): {tail}",
                self.name,
                grace.as_secs_f64()
            ),
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // A peer left behind by an early return: killed, its file removed.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.stderr);
    }
}

/// The number after `field` (e.g. `Rx-pps:`) on a line of testpmd's stats.
pub(crate) fn testpmd_field<T: std::str::FromStr>(line: &str, field: &str) -> Option<T> {
    line.trim()
        .strip_prefix(field)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

pub(crate) fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// The machine's CPU time so far from `/proc/stat`'s `cpu` line, in
/// ticks: (stolen by the hypervisor, all). Two readings give the share of
/// a stretch a virtual machine's CPUs were taken away, which a figure
/// measured then carries (`None` where the line cannot be read).
pub(crate) fn steal_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    steal_of(stat.lines().find(|l| l.starts_with("cpu "))?)
}

/// [`steal_ticks`] of one `cpu` line: user nice system idle iowait irq
/// softirq steal (guest time is inside user and nice, not added again).
fn steal_of(line: &str) -> Option<(u64, u64)> {
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    (f.len() == 8).then(|| (f[7], f.iter().sum()))
}

/// The share of CPU time stolen between two [`steal_ticks`] readings, %.
pub(crate) fn steal_pct(before: Option<(u64, u64)>, after: Option<(u64, u64)>) -> Option<f64> {
    let ((s0, t0), (s1, t1)) = (before?, after?);
    (t1 > t0).then(|| s1.saturating_sub(s0) as f64 * 100.0 / (t1 - t0) as f64)
}

/// utime + stime of `pid` and of every descendant alive (the program
/// under `rxpath exec`, `sockperf` under `taskset`, nginx's workers under
/// its master), in seconds.
pub(crate) fn cpu_secs(pid: u32) -> f64 {
    fn one(pid: u32) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The fields after the command (which may hold spaces) in parens.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<u64> = rest
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
        f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() && tree.len() < 4096 {
        let p = tree[i];
        let kids =
            std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")).unwrap_or_default();
        tree.extend(
            kids.split_whitespace()
                .filter_map(|k| k.parse::<u32>().ok()),
        );
        i += 1;
    }
    let ticks: u64 = tree.into_iter().map(one).sum();
    ticks as f64 / rxpath_os::sched::clock_ticks() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn a_peer_that_fails_is_an_error_with_its_own_words() {
        let script = "echo 'EAL: cannot init memory' >&2; exit 1";
        let p = Peer::spawn("fake-testpmd", sh(script)).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let e = p
            .interrupt(Duration::from_secs(10))
            .unwrap_err()
            .to_string();
        assert!(e.contains("fake-testpmd failed"), "{e}");
        assert!(e.contains("EAL: cannot init memory"), "{e}");
    }

    #[test]
    fn a_peer_that_stops_on_sigint_is_fine_and_one_that_hangs_is_not() {
        let clean = "trap 'exit 0' INT; while :; do sleep 0.05; done";
        let p = Peer::spawn("clean", sh(clean)).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        p.interrupt(Duration::from_secs(10)).unwrap();
        let p = Peer::spawn("default", sh("exec sleep 30")).unwrap();
        p.interrupt(Duration::from_secs(10)).unwrap();
        let p = Peer::spawn("deaf", sh("trap '' INT; sleep 30")).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let e = p
            .interrupt(Duration::from_millis(300))
            .unwrap_err()
            .to_string();
        assert!(e.contains("did not exit"), "{e}");
    }

    #[test]
    fn a_peer_that_died_early_is_caught() {
        let mut p = Peer::spawn("early", sh("echo gone >&2; exit 3")).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let e = p.check_alive().unwrap_err().to_string();
        assert!(e.contains("exited early") && e.contains("gone"), "{e}");
    }

    #[test]
    fn the_median_of_nothing_is_not_measured() {
        assert!(median(vec![]).is_nan());
        assert!(median(vec![f64::NAN]).is_nan());
        assert_eq!(median(vec![3.0, f64::NAN, 1.0]), 2.0);
    }

    #[test]
    fn steal_is_read_from_the_eighth_figure_of_the_cpu_line() {
        let l = "cpu  1224422 0 283426 1166381 5122 0 123521 9786 0 0";
        assert_eq!(steal_of(l), Some((9786, 2812658)));
        assert_eq!(steal_of("cpu  1 2 3"), None);
        assert_eq!(steal_pct(Some((10, 1000)), Some((60, 2000))), Some(5.0));
        assert_eq!(steal_pct(Some((10, 1000)), Some((10, 1000))), None);
        assert_eq!(steal_pct(None, Some((10, 1000))), None);
    }
}
