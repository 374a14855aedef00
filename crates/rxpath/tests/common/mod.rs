//! Helpers shared by the CLI's root tests.

#![allow(dead_code)] // each test file uses a part

pub mod exec;

use rxpath_dev::sync::lock;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Wait for an `rxpath echo --json` child, require a clean exit and every
/// frame back in the pool, and return its report.
pub fn echo_report(child: Child) -> serde_json::Value {
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "echo failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("json ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(v["frames_home"], v["frames_total"], "every frame home: {v}");
    v
}

pub const SRV_MAC: &str = "02:00:00:00:09:06";
pub const CLI_MAC: &str = "02:00:00:00:09:05";
pub const PORT: u16 = 7;

/// Wait (20 s at most, then kill it and fail) for `c` to exit after it
/// was told to; its stdout and stderr.
pub fn wait_out(c: Child, name: &str) -> (String, String) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut c = c;
    while c.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = c.kill();
            panic!("{name} did not stop");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = c.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A new namespace inherits the host's TCP tuning (a CI host's BBR and
/// 32 MiB receive buffers); the tests' namespaces take the kernel's
/// built-in defaults instead, so what a test bounds (bytes still in
/// flight when an iperf3 test ends: the sender's `tcp_wmem` and the
/// receiver's `tcp_rmem` at most) holds on every host.
pub fn kernel_tcp_defaults(ns: &str) {
    for kv in [
        "net.ipv4.tcp_wmem=4096 16384 4194304",
        "net.ipv4.tcp_rmem=4096 131072 6291456",
    ] {
        sh(&["ip", "netns", "exec", ns, "sysctl", "-qw", kv]);
    }
    // CUBIC, the kernel's default, where the host chose another.
    let _ = Command::new("ip")
        .args(["netns", "exec", ns, "sysctl", "-qw"])
        .arg("net.ipv4.tcp_congestion_control=cubic")
        .output();
}

pub fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two namespaces and a veth pair between them; removed on drop.
pub struct Pair {
    pub srv: String,
    pub cli: String,
    pub srv_if: String,
    pub cli_if: String,
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in [&self.srv, &self.cli] {
            // What a failed test left running there (a server that did not
            // exit, its forked workers) goes with the namespace.
            if let Ok(o) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-KILL", pid]).output();
                }
            }
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

impl Pair {
    /// `client_addrs`: give the client end 198.18.9.5/24 and
    /// 2001:2:0:9::5/64 (a plain client); else it has no address and no
    /// IPv6 at all (a raw injector that stays silent), and the server
    /// has static neighbour entries for the client's addresses.
    /// `tools`: what the test runs besides `ip` (each a need, as root is).
    pub fn new(tag: &str, client_addrs: bool, tools: &[&'static str]) -> Option<Pair> {
        let mut needs = vec![rxpath_testkit::Need::Root, rxpath_testkit::Need::Tool("ip")];
        needs.extend(tools.iter().map(|t| rxpath_testkit::Need::Tool(t)));
        if !rxpath_testkit::can_run(&needs) {
            return None;
        }
        static TAGS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
        let mut tags = lock(&TAGS);
        // Two tests of one binary with one tag would delete each other's
        // namespaces.
        assert!(
            !tags.iter().any(|t| t == tag),
            "two tests use the tag {tag}"
        );
        tags.push(tag.to_string());
        drop(tags);
        let id = std::process::id();
        let p = Pair {
            srv: format!("rxp-{tag}s-{id}"),
            cli: format!("rxp-{tag}c-{id}"),
            srv_if: format!("{tag}s{id}"),
            cli_if: format!("{tag}c{id}"),
        };
        for ns in [&p.srv, &p.cli] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
            sh(&["ip", "netns", "add", ns]);
            kernel_tcp_defaults(ns);
        }
        p.make_link(client_addrs);
        std::thread::sleep(Duration::from_millis(300));
        Some(p)
    }

    /// The veth pair between the namespaces, its addresses, up. (Also
    /// to make it again after a test deleted it.)
    pub fn make_link(&self, client_addrs: bool) {
        let p = self;
        sh(&[
            "ip", "link", "add", &p.srv_if, "netns", &p.srv, "address", SRV_MAC, "type", "veth",
            "peer", "name", &p.cli_if, "netns", &p.cli, "address", CLI_MAC,
        ]);
        let s = |a: &[&str]| {
            let mut v = vec!["ip", "netns", "exec", &p.srv];
            v.extend_from_slice(a);
            sh(&v)
        };
        let c = |a: &[&str]| {
            let mut v = vec!["ip", "netns", "exec", &p.cli];
            v.extend_from_slice(a);
            sh(&v)
        };
        let sif = |k: &str| format!("net.ipv6.conf.{}.{k}", p.srv_if);
        s(&["sysctl", "-qw", &format!("{}=1", sif("addr_gen_mode"))]);
        s(&["sysctl", "-qw", &format!("{}=0", sif("accept_dad"))]);
        s(&[
            "sysctl",
            "-qw",
            &format!("{}=0", sif("router_solicitations")),
        ]);
        for kv in [
            "net.ipv4.ipfrag_time=1",
            "net.ipv6.ip6frag_time=1",
            "net.ipv4.conf.all.forwarding=0",
            "net.ipv6.conf.all.forwarding=0",
            "net.ipv4.conf.all.rp_filter=0",
            "net.ipv4.conf.default.rp_filter=0",
            "net.ipv4.conf.all.accept_source_route=0",
        ] {
            s(&["sysctl", "-qw", kv]);
        }
        s(&[
            "sysctl",
            "-qw",
            &format!("net.ipv4.conf.{}.rp_filter=0", p.srv_if),
        ]);
        s(&["ip", "addr", "add", "198.18.9.6/24", "dev", &p.srv_if]);
        s(&[
            "ip",
            "-6",
            "addr",
            "add",
            "2001:2:0:9::6/64",
            "dev",
            &p.srv_if,
            "nodad",
        ]);
        if client_addrs {
            c(&["ip", "addr", "add", "198.18.9.5/24", "dev", &p.cli_if]);
            c(&[
                "ip",
                "-6",
                "addr",
                "add",
                "2001:2:0:9::5/64",
                "dev",
                &p.cli_if,
                "nodad",
            ]);
        } else {
            c(&[
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{}.disable_ipv6=1", p.cli_if),
            ]);
            for a in ["198.18.9.5", "2001:2:0:9::5"] {
                s(&[
                    "ip",
                    "neigh",
                    "replace",
                    a,
                    "lladdr",
                    CLI_MAC,
                    "dev",
                    &p.srv_if,
                    "nud",
                    "permanent",
                ]);
            }
        }
        s(&["ip", "link", "set", &p.srv_if, "up"]);
        c(&["ip", "link", "set", &p.cli_if, "up"]);
        s(&["ip", "link", "set", "lo", "up"]);
    }

    pub fn exec(&self, ns: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).args(args);
        c
    }

    pub fn echo(&self, mode: &str, extra: &[&str], secs: u32) -> Child {
        self.exec(&self.srv, &[env!("CARGO_BIN_EXE_rxpath")])
            .args([
                "echo",
                "--iface",
                &self.srv_if,
                "--bind",
                "::",
                "--port",
                "7",
                "--json",
            ])
            .args(["--mode", mode, "--duration", &secs.to_string()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rxpath echo")
    }
}

/// Sends length-prefixed frames from a file out of an interface (AF_PACKET),
/// 8 per millisecond; prints "sent failed".
pub const SENDER: &str = r#"
import socket, struct, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
data = open(sys.argv[2], 'rb').read()
i = k = bad = 0
while i < len(data):
    n = struct.unpack('>H', data[i:i+2])[0]
    f = data[i+2:i+2+n]
    i += 2 + n
    try:
        s.send(f)
    except OSError:
        bad += 1
    k += 1
    if k % 8 == 0:
        time.sleep(0.001)
print(k, bad)
"#;
