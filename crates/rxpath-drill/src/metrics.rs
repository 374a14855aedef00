//! `ip tcp_metrics flush` in a script: the kernel forgets the Fast Open
//! cookies it kept (`tcp_metrics`), and rxpath's machine, whose cache is
//! its own, must forget them too. packetdrill runs a script's shell
//! commands as its children, with this library preloaded (`LD_PRELOAD`,
//! which `scripts/packetdrill-suites.sh` sets for `%{ }%` blocks), so the
//! library is loaded into that `ip` too: there it leaves a mark for the
//! packetdrill process above it, which empties the machine's cache at its
//! next call.

use std::path::PathBuf;

/// The mark a flush leaves for packetdrill process `pid`.
fn mark(pid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/rxpath-drill-{pid}.tcp-metrics-flushed"))
}

/// In packetdrill's process: did a script's command flush the metrics
/// since the last look? (The mark is taken away.)
pub fn flushed() -> bool {
    std::fs::remove_file(mark(std::process::id())).is_ok()
}

/// Run as the library loads: in an `ip tcp_metrics flush` (or `ip
/// tcpmetrics flush`, or any abbreviation `ip` takes) under a
/// packetdrill process, leave that process the mark.
pub fn note_flush() {
    let Ok(cmd) = std::fs::read("/proc/self/cmdline") else {
        return;
    };
    if !is_metrics_flush(&cmd) {
        return;
    }
    if let Some(pid) = packetdrill_above(std::process::id()) {
        // A new file only: never through a link someone left there.
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(mark(pid));
    }
}

/// `cmdline` (NUL-separated) is `ip [-options] tcp_metrics flush ...`.
fn is_metrics_flush(cmdline: &[u8]) -> bool {
    let mut args = cmdline
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned());
    let is_ip = args
        .next()
        .is_some_and(|a| a.rsplit('/').next() == Some("ip"));
    let mut words = args.filter(|a| !a.starts_with('-'));
    let object = words.next().unwrap_or_default();
    let verb = words.next().unwrap_or_default();
    is_ip
        && !object.is_empty()
        && ("tcp_metrics".starts_with(&object) || "tcpmetrics".starts_with(&object))
        && object.starts_with("tcp")
        && !verb.is_empty()
        && "flush".starts_with(&verb)
}

/// The nearest process above `pid` named `packetdrill`.
fn packetdrill_above(mut pid: u32) -> Option<u32> {
    for _ in 0..16 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ppid ...`: comm may hold spaces and ')'.
        let ppid: u32 = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        if ppid <= 1 {
            return None;
        }
        let comm = std::fs::read_to_string(format!("/proc/{ppid}/comm")).ok()?;
        if comm.trim_end() == "packetdrill" {
            return Some(ppid);
        }
        pid = ppid;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_a_flush_from_other_commands() {
        let c = |s: &str| s.replace(' ', "\0").into_bytes();
        assert!(is_metrics_flush(&c("ip tcp_metrics flush all")));
        assert!(is_metrics_flush(&c("/sbin/ip -4 tcpmetrics f")));
        assert!(is_metrics_flush(&c("ip tcp_m flush")));
        assert!(!is_metrics_flush(&c("ip tcp_metrics show")));
        assert!(!is_metrics_flush(&c("ip route flush all")));
        assert!(!is_metrics_flush(&c("sysctl -q net.ipv4.tcp_fastopen=1")));
        assert!(!is_metrics_flush(&c("ip")));
    }
}
