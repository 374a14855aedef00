//! Running a program on the kernel's socket and under `rxpath exec` in a
//! pair's server namespace, and reading what it and exec print.

use super::Pair;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `prog` in the server namespace, under `rxpath exec` with `exec_args`
/// (or on the kernel's socket when `None`); stdout piped.
pub fn server(p: &Pair, exec_args: Option<&[&str]>, prog: &[&str]) -> Child {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &p.srv]);
    if let Some(a) = exec_args {
        c.arg(env!("CARGO_BIN_EXE_rxpath"))
            .args(["exec", "--iface", &p.srv_if])
            .args(a)
            .arg("--");
    }
    // Its own process group: a watchdog can stop it with everything it
    // forked (see the TCP tests' `finish`).
    std::os::unix::process::CommandExt::process_group(&mut c, 0);
    c.args(prog)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("server")
}

/// Wait for the line `ready` on the server's stdout (the lines before it
/// are returned).
pub fn wait_ready(c: &mut Child) -> Vec<String> {
    let out = c.stdout.take().expect("stdout");
    let mut r = BufReader::new(out);
    let mut lines = Vec::new();
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).unwrap_or(0) == 0 {
            panic!("server ended before it was ready: {lines:?}");
        }
        if l.trim() == "ready" {
            // Keep reading the rest (exec's report) on a thread.
            let rest = std::thread::spawn(move || {
                let mut s = String::new();
                let _ = std::io::Read::read_to_string(&mut r, &mut s);
                s
            });
            REST.with(|x| *x.borrow_mut() = Some(rest));
            return lines;
        }
        lines.push(l.trim().to_string());
    }
}

thread_local! {
    static REST: std::cell::RefCell<Option<std::thread::JoinHandle<String>>> = const { std::cell::RefCell::new(None) };
}

/// The server's exit: status, the rest of its stdout, its stderr.
pub fn finish(mut c: Child) -> (std::process::ExitStatus, String, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = c.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = c.kill();
            panic!("the server did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = REST
        .with(|x| x.borrow_mut().take())
        .map(|h| h.join().unwrap())
        .unwrap_or_default();
    let mut err = String::new();
    if let Some(mut e) = c.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    (status, out, err)
}

/// What exec's accounting says rxpath received.
pub fn received(out: &str) -> u64 {
    out.split("accounting: received ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// exec's `device:` line: the figure after `key=` (`offered`, `rx_ring`,
/// `rx_missed`, `rx_no_buffer`, `rx_too_long`); `None` without the line.
pub fn device(out: &str, key: &str) -> Option<u64> {
    let line = out.lines().find(|l| l.starts_with("device: "))?;
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))?
        .parse()
        .ok()
}

/// What exec's report says was read from the kernel sockets behind the
/// served fds.
pub fn kernel_reads(out: &str) -> u64 {
    out.split("datagrams read from the kernel sockets behind them ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// `python3 ARGS` in the client namespace; the JSON line it prints.
pub fn python_client(p: &Pair, args: &[&str]) -> serde_json::Value {
    let out = Command::new("ip")
        .args(["netns", "exec", &p.cli, "python3"])
        .args(args)
        .output()
        .expect("client");
    assert!(
        out.status.success(),
        "client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("client json")
}

/// Under exec: read `c`'s stderr until the preload says its host runs
/// (`through rxpath`), so that what is sent next finds the XDP program
/// taking the port (a datagram that comes before reaches the kernel
/// socket behind the fd, which is right, but not what a test of rxpath's
/// path wants). The rest of stderr is read on a thread.
pub fn wait_host(c: &mut Child) -> std::thread::JoinHandle<String> {
    let err = c.stderr.take().expect("stderr");
    let mut r = BufReader::new(err);
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).unwrap_or(0) == 0 || Instant::now() > deadline {
            panic!("the host never said it runs: {seen}");
        }
        seen.push_str(&l);
        if l.contains("through rxpath") {
            break;
        }
    }
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut r, &mut rest);
        seen + &rest
    })
}
