//! Unmodified TCP servers under `rxpath exec --protocols udp,tcp` (root
//! only; CI runs it as root): Debian's iperf3 and redis-server, each on
//! the kernel's sockets and then under exec on AF_XDP, with a kernel
//! client in the other namespace. Their listeners and the connections
//! they accept are rxpath's TCP (the XDP program's port map takes the
//! port's segments); what the clients get is compared with the kernel
//! run: every byte counted on both sides, the same answers byte for byte.
//! The accounting of the path holds and every frame comes home.

mod common;

use common::exec::server;
use common::Pair;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};
use std::time::Duration;

const SRV: &str = "198.18.9.6";
/// The most a one-second iperf3 test leaves unread at its end: the
/// receiver's and the sender's socket buffers (`tcp_rmem`, `tcp_wmem`
/// maxima: 6 MB and 4 MB).
/// What may be in flight when an iperf3 test ends: the sender's send
/// buffer and the receiver's unread queue at their largest (`tcp_wmem`
/// and `tcp_rmem`, pinned by `common::kernel_tcp_defaults`).
const IN_FLIGHT: u64 = 4194304 + 6291456;
const EXEC: &[&str] = &["--mode", "xdp", "--protocols", "udp,tcp"];

fn in_client(p: &Pair, args: &[&str]) -> Output {
    in_ns(&p.cli, args)
}

fn in_ns(ns: &str, args: &[&str]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .expect("a client in its namespace")
}

/// The server's exit (killed after 20 s): status, stdout, stderr.
fn finish(mut c: std::process::Child) -> (std::process::ExitStatus, String, String) {
    // The server runs in its own process group (`server`): one that has
    // not ended 20 s on is killed with all it forked, and the test fails
    // on its status rather than hanging on a pipe a child still holds.
    let group = format!("-{}", c.id());
    let (done, stop) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if stop.recv_timeout(Duration::from_secs(20)).is_err() {
            let _ = Command::new("kill").args(["-KILL", "--", &group]).output();
        }
    });
    let _ = c.stdin.take();
    let out = c.wait_with_output().expect("the server's output");
    let _ = done.send(());
    let _ = watchdog.join();
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (out.status, text(&out.stdout), text(&out.stderr))
}

/// What `rxpath exec` printed holds: the server's socket on rxpath, the
/// path's accounting and the frames home.
fn served_cleanly(out: &str) {
    assert!(!out.contains("sockets on rxpath 0 "), "{out}");
    assert!(!out.contains("MISMATCH"), "{out}");
    assert!(out.contains("back in the pool: ok"), "{out}");
    assert!(out.contains(" rxpath\n"), "a socket on rxpath: {out}");
}

/// One iperf3 TCP test (`-R`: the server sends) against `iperf3 -s -1`:
/// the client's JSON, and the server's output once it exited.
fn iperf3_once(p: &Pair, exec: Option<&[&str]>, reverse: bool) -> (serde_json::Value, String) {
    iperf3_once_from(p, &p.cli, exec, reverse)
}

/// [`iperf3_once`] with the client in namespace `ns`.
fn iperf3_once_from(
    p: &Pair,
    ns: &str,
    exec: Option<&[&str]>,
    reverse: bool,
) -> (serde_json::Value, String) {
    let s = server(p, exec, &["iperf3", "-s", "-1", "-B", SRV, "-p", "5320"]);
    let mut args = vec!["iperf3", "-c", SRV, "-p", "5320", "-t", "1", "--json"];
    if reverse {
        args.push("-R");
    }
    let (mut report, mut last) = (None, None);
    for _ in 0..40 {
        let out = in_ns(ns, &args);
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if out.status.success() && j["error"].is_null() {
            report = Some(j);
            break;
        }
        last = Some(out);
        std::thread::sleep(Duration::from_millis(250));
    }
    let (status, out, err) = finish(s);
    assert!(status.success(), "iperf3 -s: {out}\n{err}");
    let Some(report) = report else {
        panic!("{exec:?}: the iperf3 client never ran: {last:?}\n{out}\n{err}")
    };
    (report, out)
}

/// `iperf3 -s -1` (Debian's, unmodified: `select` on its control
/// connection, a second connection for the data) receiving and then
/// sending a one-second TCP test: on the kernel and under exec, what one
/// side sent the other received, short only of what was in flight as
/// the test ended.
#[test]
fn iperf3_tcp_both_directions_count_every_byte() {
    let Some(p) = Pair::new("ti", true, &["iperf3"]) else {
        return;
    };
    let exec_json: Vec<&str> = EXEC.iter().copied().chain(["--json"]).collect();
    for exec in [None, Some(&exec_json[..])] {
        for reverse in [false, true] {
            let (j, out) = iperf3_once(&p, exec, reverse);
            let sent = j["end"]["sum_sent"]["bytes"].as_u64().unwrap_or(0);
            let got = j["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
            // The sender counts what it wrote; the receiver stops reading
            // when the second ends, so what was in flight then (in the
            // socket buffers, a few MB at most) is the only difference.
            assert!(sent > 1_000_000, "{exec:?} -R {reverse}: {}", j["end"]);
            let short = sent.checked_sub(got);
            let ok = short.is_some_and(|d| d < IN_FLIGHT);
            assert!(ok, "{exec:?} -R {reverse}: {}\n{out}", j["end"]);
            if exec.is_some() {
                let rep = report_of(&out);
                let acc = &rep["accounting"];
                assert_eq!(acc["frames_home"], acc["frames_total"], "{rep}");
                assert_eq!(rep["sockets"][0]["path"], "rxpath", "{rep}");
                // The server's TSO packets leave whole, as GSO packets
                // the kernel cuts (or the veth's peer takes whole), as
                // the kernel's own TCP sends them.
                let gso = rep["host"]["tx"]["tcp_gso_tx_packets"]
                    .as_u64()
                    .unwrap_or(0);
                assert_eq!(gso > 0, reverse, "-R {reverse}: {gso} TCP GSO packets");
            }
        }
    }
}

/// The JSON report `rxpath exec --json` printed among its lines.
fn report_of(out: &str) -> serde_json::Value {
    out.lines()
        .find_map(|l| {
            serde_json::from_str(l)
                .ok()
                .filter(|v: &serde_json::Value| v["accounting"].is_object())
        })
        .unwrap_or_else(|| panic!("no JSON report: {out}"))
}

/// Commands for redis-cli: SET, GET, INCR, APPEND, MGET, DEL, LPUSH,
/// LRANGE over a few hundred keys; the answers are the server's.
fn redis_script() -> String {
    let mut s = String::new();
    for i in 0..200 {
        s += &format!("SET key:{i} value-{i}-{}\n", "x".repeat(i * 7));
    }
    for i in 0..200 {
        s += &format!("GET key:{i}\nINCR counter\nAPPEND key:{i} +{i}\n");
    }
    s += "MGET key:0 key:1 key:199 missing\nLPUSH list a b c d\nLRANGE list 0 -1\n";
    s += "DEL key:0 key:1\nGET key:0\nDBSIZE\n";
    s
}

/// Run redis-server in the server namespace (on the kernel, or under
/// exec) with Debian's configuration file, in the foreground on `SRV`;
/// the script's answers, `redis-benchmark`'s SET/GET summary, and the
/// server's output after `SHUTDOWN NOSAVE`.
fn redis_run(p: &Pair, exec: Option<&[&str]>) -> (Vec<u8>, String, String) {
    let dir = format!(
        "/tmp/rxpath-redis-{}-{}",
        std::process::id(),
        exec.is_some()
    );
    let _ = std::fs::create_dir_all(&dir);
    let conf = [
        "/etc/redis/redis.conf",
        "--daemonize",
        "no",
        "--supervised",
        "no",
    ];
    let mut prog = vec!["redis-server"];
    prog.extend(conf);
    let rest = [
        "--bind",
        SRV,
        "--port",
        "6390",
        "--save",
        "",
        "--appendonly",
        "no",
        "--logfile",
        "",
        "--dir",
        &dir,
        "--pidfile",
        "",
        "--protected-mode",
        "no",
    ];
    prog.extend(rest);
    let s = server(p, exec, &prog);
    let cli = ["redis-cli", "-h", SRV, "-p", "6390"];
    let mut up = false;
    let mut last = String::new();
    for _ in 0..100 {
        let mut a = cli.to_vec();
        a.push("PING");
        let o = in_client(p, &a);
        last = format!("{o:?}");
        if String::from_utf8_lossy(&o.stdout).trim() == "PONG" {
            up = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if !up {
        let _ = Command::new("kill").arg(s.id().to_string()).output();
        let (_, out, err) = finish(s);
        panic!("redis-server never answered PING ({last}): {out}\n{err}");
    }
    let script = redis_script();
    let mut c = Command::new("ip")
        .args(["netns", "exec", &p.cli])
        .args(cli)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("redis-cli");
    std::io::Write::write_all(&mut c.stdin.take().unwrap(), script.as_bytes()).unwrap();
    let answers = c.wait_with_output().expect("redis-cli").stdout;
    let bench = in_client(
        p,
        &[
            "redis-benchmark",
            "-h",
            SRV,
            "-p",
            "6390",
            "-t",
            "set,get",
            "-n",
            "20000",
            "-c",
            "8",
            "-q",
        ],
    );
    let bench = String::from_utf8_lossy(&bench.stdout).to_string();
    let mut a = cli.to_vec();
    a.extend(["SHUTDOWN", "NOSAVE"]);
    in_client(p, &a);
    let (status, out, err) = finish(s);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "redis-server: {out}\n{err}");
    (answers, bench, out)
}

/// redis-server (Debian's, with its own configuration file, in the
/// foreground, on the test's address with protected mode off, as a
/// server other hosts reach is configured): a script of
/// SET/GET/INCR/APPEND/MGET/list commands from redis-cli gets the same answers byte for byte under exec as on the
/// kernel, and `redis-benchmark` (eight connections, pipelining off)
/// finishes its SET and GET runs.
#[test]
fn redis_answers_as_on_the_kernel() {
    let Some(p) = Pair::new(
        "tr",
        true,
        &["redis-server", "redis-cli", "redis-benchmark"],
    ) else {
        return;
    };
    let (kernel, kbench, _) = redis_run(&p, None);
    let (rx, bench, out) = redis_run(&p, Some(EXEC));
    assert!(
        kernel.len() > 10_000,
        "{}",
        String::from_utf8_lossy(&kernel)
    );
    assert!(
        rx == kernel,
        "under exec:\n{}",
        String::from_utf8_lossy(&rx)
    );
    for b in [&kbench, &bench] {
        assert!(b.contains("SET: ") && b.contains("GET: "), "{b}");
    }
    served_cleanly(&out);
}

/// A server that writes 4 MB to a connection and exits at once
/// (`os._exit`, no `close`): the kernel keeps the connection until the
/// data is delivered; under exec the exiting process's connections are
/// shut for writing and the host runs until they are acknowledged. The
/// client reads every byte, then the end of the stream, on both.
#[test]
fn data_written_before_exit_is_delivered() {
    let Some(p) = Pair::new("tx", true, &["python3"]) else {
        return;
    };
    const N: usize = 4 << 20;
    let srv = format!(
        "import socket, os, sys\n\
         l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         l.bind(('{SRV}', 5330)); l.listen(8); print('ready', flush=True)\n\
         c, _ = l.accept(); c.sendall(bytes(range(256)) * ({N} // 256))\n\
         os._exit(0)\n"
    );
    let cli = format!(
        "import socket, time, hashlib\n\
         for i in range(100):\n\
         \x20   try:\n\
         \x20       s = socket.create_connection(('{SRV}', 5330)); break\n\
         \x20   except OSError: time.sleep(0.1)\n\
         h = hashlib.sha256(); n = 0\n\
         while True:\n\
         \x20   b = s.recv(65536)\n\
         \x20   if not b: break\n\
         \x20   n += len(b); h.update(b)\n\
         print(n, h.hexdigest())\n"
    );
    let mut seen = Vec::new();
    for exec in [None, Some(EXEC)] {
        let mut s = server(&p, exec, &["python3", "-c", &srv]);
        common::exec::wait_ready(&mut s);
        let out = in_client(&p, &["timeout", "30", "python3", "-c", &cli]);
        let got = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let (status, _, err) = finish(s);
        assert!(status.success(), "{exec:?}: {err}");
        assert!(got.starts_with(&format!("{N} ")), "{exec:?}: {got} {err}");
        seen.push(got);
    }
    assert_eq!(seen[0], seen[1], "the same bytes on both");
}

/// `GET`s from the client namespace: each status and body's sha256.
fn http_gets(p: &Pair, paths: &[&str]) -> String {
    let mut script = String::from(
        "import urllib.request, urllib.error, hashlib, time\n\
         def get(u):\n\
         \x20   try:\n\
         \x20       r = urllib.request.urlopen(u, timeout=5); return r.status, r.read()\n\
         \x20   except urllib.error.HTTPError as e:\n\
         \x20       return e.code, e.read()\n",
    );
    script += &format!(
        "for i in range(100):\n\
         \x20   try:\n\
         \x20       get('http://{SRV}/'); break\n\
         \x20   except OSError: time.sleep(0.1)\n"
    );
    for path in paths {
        script += &format!(
            "s, b = get('http://{SRV}{path}'); print('{path}', s, len(b), hashlib.sha256(b).hexdigest())\n"
        );
    }
    let out = in_client(p, &["python3", "-c", &script]);
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// nginx as Debian ships it (its `nginx.conf`, the default site on port
/// 80 of both families, a master and a worker per core, in the
/// foreground): the same statuses and bodies under exec as on the
/// kernel. Its master listens and forks its workers before a connection
/// comes: at the fork rxpath hands the listeners to the kernel socket
/// behind them, where the workers accept (no connection lost; said in
/// the report).
#[test]
fn nginx_prefork_serves_as_on_the_kernel() {
    let Some(p) = Pair::new("tn", true, &["nginx", "python3"]) else {
        return;
    };
    let paths = ["/", "/index.nginx-debian.html", "/missing", "/", "/"];
    let mut seen = Vec::new();
    for exec in [None, Some(EXEC)] {
        let s = server(&p, exec, &["nginx", "-g", "daemon off;"]);
        let got = http_gets(&p, &paths);
        in_client(&p, &["true"]);
        let _ = Command::new("ip")
            .args(["netns", "exec", &p.srv, "nginx", "-s", "quit"])
            .output();
        let (status, out, err) = finish(s);
        assert!(status.success(), "{exec:?}: {out}\n{err}");
        assert_eq!(got.lines().count(), paths.len(), "{exec:?}: {got}\n{err}");
        if exec.is_some() {
            assert!(
                out.contains("handed to the kernel at a fork"),
                "{out}\n{err}"
            );
            assert!(out.contains("back in the pool: ok"), "{out}");
        }
        seen.push(got);
    }
    assert_eq!(seen[0], seen[1]);
    assert!(
        seen[0].contains("/ 200 ") && seen[0].contains("/missing 404 "),
        "{}",
        seen[0]
    );
}

/// memcached as Debian's `memcached.conf` runs it (`-u memcache -m 64`,
/// its worker threads; on the test's address): a text-protocol script
/// of set/get/append/incr/delete over one connection gets the same bytes
/// under exec as on the kernel.
#[test]
fn memcached_answers_as_on_the_kernel() {
    let Some(p) = Pair::new("tm", true, &["memcached", "python3"]) else {
        return;
    };
    let cli = format!(
        "import socket, time\n\
         for i in range(100):\n\
         \x20   try:\n\
         \x20       s = socket.create_connection(('{SRV}', 11311)); break\n\
         \x20   except OSError: time.sleep(0.1)\n\
         for i in range(300):\n\
         \x20   v = b'v' * (i * 37)\n\
         \x20   s.sendall(b'set k%d 0 0 %d\\r\\n%s\\r\\n' % (i, len(v), v))\n\
         for i in range(300):\n\
         \x20   s.sendall(b'get k%d\\r\\nappend k%d 0 0 2\\r\\n+%d\\r\\n' % (i, i, i % 10))\n\
         s.sendall(b'set n 0 0 1\\r\\n5\\r\\nincr n 37\\r\\ndelete k0\\r\\nget k0 k1 k299\\r\\nquit\\r\\n')\n\
         out = b''\n\
         while True:\n\
         \x20   b = s.recv(65536)\n\
         \x20   if not b: break\n\
         \x20   out += b\n\
         import sys; sys.stdout.buffer.write(out)\n"
    );
    let mut seen = Vec::new();
    for exec in [None, Some(EXEC)] {
        let prog = [
            "memcached",
            "-u",
            "memcache",
            "-m",
            "64",
            "-l",
            SRV,
            "-p",
            "11311",
        ];
        let s = server(&p, exec, &prog);
        let got = in_client(&p, &["python3", "-c", &cli]).stdout;
        let _ = Command::new("kill").arg(s.id().to_string()).output();
        let (_, out, err) = finish(s);
        assert!(got.len() > 100_000, "{exec:?}: {}\n{err}", got.len());
        if exec.is_some() {
            served_cleanly(&out);
        }
        seen.push(got);
    }
    assert!(seen[0] == seen[1], "the same bytes under exec");
}

/// `iperf3 -c` (Debian's) under exec, connecting out to a kernel
/// `iperf3 -s` in the client namespace: its control and data connections
/// are rxpath's (`connect()` from a port the kernel gives and holds; the
/// neighbour from the kernel's table, resolved as its connect would), a
/// test each way counts every byte as the same client on the kernel does.
/// Both to the peer on the link and to an address behind it (on the
/// client namespace's `lo`, reached through the kernel's route via the
/// peer: the gateway's neighbour, as the kernel's connect takes it).
#[test]
fn iperf3_client_connects_out_through_rxpath() {
    let Some(p) = Pair::new("tc", true, &["iperf3"]) else {
        return;
    };
    const ROUTED: &str = "198.18.99.5";
    let sh = |ns: &str, args: &[&str]| {
        let o = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .output();
        assert!(o.is_ok_and(|o| o.status.success()), "{ns}: {args:?}");
    };
    sh(
        &p.cli,
        &["ip", "addr", "add", &format!("{ROUTED}/32"), "dev", "lo"],
    );
    sh(
        &p.srv,
        &["ip", "route", "add", "198.18.99.0/24", "via", "198.18.9.5"],
    );
    for (peer, exec, reverse) in [
        ("198.18.9.5", None, false),
        ("198.18.9.5", None, true),
        ("198.18.9.5", Some(EXEC), false),
        ("198.18.9.5", Some(EXEC), true),
        (ROUTED, None, false),
        (ROUTED, Some(EXEC), false),
        (ROUTED, Some(EXEC), true),
    ] {
        {
            let srv = Command::new("ip")
                .args([
                    "netns", "exec", &p.cli, "iperf3", "-s", "-1", "-B", peer, "-p", "5322",
                ])
                .stdout(std::process::Stdio::null())
                .process_group(0)
                .spawn()
                .expect("iperf3 -s");
            let _ = Command::new("ip")
                .args(["netns", "exec", &p.srv, "ip", "neigh", "flush", "all"])
                .output();
            let mut args = vec!["iperf3", "-c", peer, "-p", "5322", "-t", "1", "--json"];
            if reverse {
                args.push("-R");
            }
            let what = format!("{peer} {exec:?} -R {reverse}");
            iperf3_client_counts_every_byte(&p, exec, &args, srv, &what);
        }
    }
}

/// Run `iperf3 -c` (`args`) in the server namespace, under exec or not,
/// until it ran against `srv` (an `iperf3 -s -1`, killed if the client
/// never ran): what it sent, the server received, short only of what was
/// in flight at the end; under exec the path's accounting holds.
fn iperf3_client_counts_every_byte(
    p: &Pair,
    exec: Option<&[&str]>,
    args: &[&str],
    mut srv: std::process::Child,
    what: &str,
) -> serde_json::Value {
    let mut c = None;
    for _ in 0..40 {
        // A client that hangs is stopped after 20 s.
        let (status, out, _) = finish(server(p, exec, args));
        // iperf3's JSON first, then exec's report.
        let mut it = serde_json::Deserializer::from_str(&out).into_iter();
        let j: serde_json::Value = it.next().and_then(Result::ok).unwrap_or_default();
        if status.success() && j["error"].is_null() && j["end"]["sum_sent"].is_object() {
            c = Some((j, out));
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    if c.is_none() {
        let _ = srv.kill();
    }
    let _ = finish(srv);
    let (j, out) = c.expect("the iperf3 client never ran");
    let sent = j["end"]["sum_sent"]["bytes"].as_u64().unwrap_or(0);
    let got = j["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    assert!(sent > 1_000_000, "{what}: {}\n{out}", j["end"]);
    let ok = sent.checked_sub(got).is_some_and(|d| d < IN_FLIGHT);
    assert!(ok, "{what}: {}\n{out}", j["end"]);
    if exec.is_some() {
        assert!(!out.contains("sockets on rxpath 0 "), "{out}");
        assert!(out.contains("back in the pool: ok"), "{out}");
        assert!(!out.contains("MISMATCH"), "{out}");
    }
    j
}

const REUSEPORT_SERVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/apps/reuseport_server.py"
);
const MANY_CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps/many_client.py");

/// A listener per thread with `SO_REUSEPORT` (four, on one address):
/// under exec all four are rxpath's group, each of 32 connections is
/// accepted by one of them and echoed as on the kernel, and the group
/// shares them out as the kernel's does.
#[test]
fn reuseport_listeners_per_thread_share_their_connections() {
    let Some(p) = Pair::new("tu", true, &["python3"]) else {
        return;
    };
    let mut seen = Vec::new();
    for exec in [None, Some(EXEC)] {
        let s = server(
            &p,
            exec,
            &["python3", REUSEPORT_SERVER, SRV, "5370", "4", "32"],
        );
        let c = in_client(
            &p,
            &["timeout", "60", "python3", MANY_CLIENT, SRV, "5370", "32"],
        );
        let got = String::from_utf8_lossy(&c.stdout).to_string();
        let (status, out, err) = finish(s);
        assert!(status.success(), "{exec:?}: {out}\n{err}");
        assert_eq!(got.lines().count(), 32, "{exec:?}: {got}\n{out}\n{err}");
        assert!(out.contains("served 32"), "{exec:?}: {out}");
        let used = out
            .lines()
            .filter(|l| l.starts_with("listener ") && !l.ends_with(": 0"))
            .count();
        assert!(used >= 2, "{exec:?}: one listener took them all: {out}");
        if exec.is_some() {
            assert!(out.contains("sockets on rxpath 4 "), "{out}");
            assert!(out.contains(":5370 rxpath x4\n"), "{out}");
            assert!(!out.contains("MISMATCH"), "{out}");
            assert!(out.contains("back in the pool: ok"), "{out}");
        }
        seen.push(got);
    }
    assert_eq!(seen[0], seen[1]);
}

/// A TCP echo server that reads with `recvmmsg` (`MSG_WAITFORONE`) and
/// writes with `sendmmsg` (`tests/apps/tcp_mmsg_echo.c`, built here):
/// under exec the client gets its 2 MB back as on the kernel, and the
/// server counted them all.
#[test]
fn recvmmsg_and_sendmmsg_on_a_connection_answer_as_on_the_kernel() {
    let Some(p) = Pair::new("tv", true, &["cc", "python3"]) else {
        return;
    };
    let bin = std::env::temp_dir().join(format!("rxpath-tcp-mmsg-{}", std::process::id()));
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps/tcp_mmsg_echo.c");
    let st = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(src)
        .status();
    assert!(st.is_ok_and(|s| s.success()), "compiling {src}");
    let bin = bin.to_string_lossy().to_string();
    let client = "import hashlib, socket, sys, threading, time\n\
        d = bytes(i % 253 for i in range(2_000_000))\n\
        for _ in range(100):\n\
        \x20   try:\n\
        \x20       s = socket.create_connection((sys.argv[1], 5380), timeout=20); break\n\
        \x20   except OSError: time.sleep(0.1)\n\
        t = threading.Thread(target=lambda: (s.sendall(d), s.shutdown(socket.SHUT_WR)))\n\
        t.start()\n\
        got = b''\n\
        while True:\n\
        \x20   b = s.recv(65536)\n\
        \x20   if not b: break\n\
        \x20   got += b\n\
        t.join()\n\
        print(len(got), got == d)\n";
    for exec in [None, Some(EXEC)] {
        let s = server(&p, exec, &[&bin, SRV, "5380"]);
        let c = in_client(&p, &["timeout", "60", "python3", "-c", client, SRV]);
        let got = String::from_utf8_lossy(&c.stdout).to_string();
        let (status, out, err) = finish(s);
        assert_eq!(got.trim(), "2000000 True", "{exec:?}: {got}\n{out}\n{err}");
        assert!(status.success(), "{exec:?}: {out}\n{err}");
        assert!(
            out.contains("batches some bytes 2000000"),
            "{exec:?}: {out}"
        );
        if exec.is_some() {
            served_cleanly(&out);
        }
    }
    let _ = std::fs::remove_file(&bin);
}

/// `TCP_DEFER_ACCEPT` (set after `listen`, as nginx's `deferred` sets
/// it): a client that connects and waits 0.3 s before its request is
/// accepted only once the request came, so the server finds it readable
/// at once, under exec as on the kernel.
#[test]
fn defer_accept_hands_out_connections_with_their_request() {
    let Some(p) = Pair::new("td", true, &["python3"]) else {
        return;
    };
    let srv = "import socket, sys\n\
        l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
        l.bind((sys.argv[1], 5390)); l.listen(8)\n\
        l.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, 5)\n\
        print('defer', l.getsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT), flush=True)\n\
        for _ in range(3):\n\
        \x20   c, _ = l.accept()\n\
        \x20   c.setblocking(False)\n\
        \x20   try: got = c.recv(100)\n\
        \x20   except BlockingIOError: got = b'(nothing yet)'\n\
        \x20   print('accepted with', got.decode(), flush=True)\n\
        \x20   c.close()\n";
    let client = "import socket, sys, time\n\
        for i in range(3):\n\
        \x20   for _ in range(100):\n\
        \x20       try: s = socket.create_connection((sys.argv[1], 5390), timeout=20); break\n\
        \x20       except OSError: time.sleep(0.1)\n\
        \x20   time.sleep(0.3)\n\
        \x20   s.sendall(b'GET %d' % i)\n\
        \x20   s.recv(10)\n\
        \x20   s.close()\n";
    let mut seen = Vec::new();
    for exec in [None, Some(EXEC)] {
        let s = server(&p, exec, &["python3", "-c", srv, SRV]);
        let c = in_client(&p, &["timeout", "30", "python3", "-c", client, SRV]);
        let (status, out, err) = finish(s);
        assert!(
            status.success() && c.status.success(),
            "{exec:?}: {out}\n{err}"
        );
        let lines: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("accepted") || l.starts_with("defer"))
            .collect();
        assert_eq!(
            lines,
            [
                "defer 7",
                "accepted with GET 0",
                "accepted with GET 1",
                "accepted with GET 2"
            ],
            "{exec:?}: {out}\n{err}"
        );
        if exec.is_some() {
            served_cleanly(&out);
        }
        seen.push(lines.join("\n"));
    }
    assert_eq!(seen[0], seen[1]);
}

const FORKING_SERVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps/forking_server.py");
const FORK_CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps/fork_client.py");
const CALLS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps/tcp_calls.py");
const CALLS_CLIENT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/apps/tcp_calls_client.py"
);

/// A Python server and its client, on the kernel and then under exec:
/// per run, the server's own lines (exec's report after them is exec's),
/// the client's output and stderr, and the server's whole output and
/// stderr. Each run's server exited cleanly; under exec it was served.
fn script_runs(
    p: &Pair,
    srv: &str,
    cli: &str,
    port: &str,
) -> Vec<(Vec<String>, String, String, String)> {
    let mut runs = Vec::new();
    for exec in [None, Some(EXEC)] {
        let mut s = server(p, exec, &["python3", srv, SRV, port]);
        common::exec::wait_ready(&mut s);
        let c = in_client(p, &["timeout", "60", "python3", cli, SRV, port]);
        let got = String::from_utf8_lossy(&c.stdout).to_string();
        let cerr = String::from_utf8_lossy(&c.stderr).to_string();
        let (status, out, err) = common::exec::finish(s);
        assert!(status.success(), "{exec:?}: {out}\n{err}");
        if exec.is_some() {
            served_cleanly(&out);
        }
        let lines = out
            .lines()
            .take_while(|l| !l.starts_with("rxpath exec:"))
            .map(str::to_string)
            .collect();
        runs.push((lines, got, cerr, format!("{out}\n{err}")));
    }
    runs
}

/// The socket calls a real server makes, walked by a Python server that
/// prints what it saw (`tests/apps/tcp_calls.py`): a level-triggered
/// listener and edge-triggered connections in epoll (`EPOLLIN`,
/// `EPOLLRDHUP`, `EPOLLOUT`), `poll`, `MSG_PEEK`, `MSG_WAITALL`,
/// `FIONREAD`, `TCP_INFO`'s state, the addresses, non-blocking sends
/// until `EAGAIN`, `SO_LINGER`, `shutdown`, `close`. Under exec it sees
/// what it sees on the kernel, line for line, and the client gets the
/// same 8 MB.
#[test]
fn the_socket_calls_of_a_server_answer_as_on_the_kernel() {
    let Some(p) = Pair::new("tk", true, &["python3"]) else {
        return;
    };
    let mut seen = Vec::new();
    for (lines, got, cerr, all) in script_runs(&p, CALLS, CALLS_CLIENT, "5340") {
        assert!(got.starts_with("8388608 "), "{got} {cerr}\n{all}");
        assert!(lines.last().map(String::as_str) == Some("done"), "{all}");
        seen.push((lines.join("\n"), got));
    }
    assert_eq!(seen[0], seen[1]);
}

/// A server that answers one connection, closes it and its listener
/// first (its side of the connection waits in TIME_WAIT), then listens
/// on the same port again with `SO_REUSEADDR` and answers a second: the
/// second listener is served (the connection in TIME_WAIT has its
/// listener's `SO_REUSEADDR`, as the kernel's child sockets do) and both
/// clients get their answers, as on the kernel.
#[test]
fn a_listener_made_again_on_its_port_is_served() {
    let Some(p) = Pair::new("tl", true, &["python3"]) else {
        return;
    };
    let srv = format!(
        "import socket\n\
         def one(first):\n\
         \x20   l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         \x20   l.bind(('{SRV}', 5350)); l.listen(4)\n\
         \x20   if first: print('ready', flush=True)\n\
         \x20   c, _ = l.accept(); c.sendall(c.recv(100).upper()); c.close(); l.close()\n\
         one(True)\n\
         one(False)\n\
         print('served twice', flush=True)\n"
    );
    let cli = format!(
        "import socket, time\n\
         for word in (b'first', b'second'):\n\
         \x20   for i in range(100):\n\
         \x20       try:\n\
         \x20           s = socket.create_connection(('{SRV}', 5350)); break\n\
         \x20       except OSError: time.sleep(0.05)\n\
         \x20   s.sendall(word); print(s.recv(100).decode()); time.sleep(0.2); s.close()\n"
    );
    for exec in [None, Some(EXEC)] {
        let mut s = server(&p, exec, &["python3", "-c", &srv]);
        common::exec::wait_ready(&mut s);
        let out = in_client(&p, &["timeout", "30", "python3", "-c", &cli]);
        let got = String::from_utf8_lossy(&out.stdout).to_string();
        let (status, rest, err) = common::exec::finish(s);
        assert!(status.success(), "{exec:?}: {rest}\n{err}");
        assert_eq!(got, "FIRST\nSECOND\n", "{exec:?}: {rest}\n{err}");
        assert!(rest.contains("served twice"), "{exec:?}: {rest}");
        if exec.is_some() {
            assert!(rest.contains("back in the pool: ok"), "{rest}");
            assert!(!rest.contains("sockets on rxpath 0 "), "{rest}");
            // Both listeners rxpath's, neither left to the kernel.
            let line = format!("{SRV}:5350 rxpath x2\n");
            assert!(rest.contains(&line), "{rest}\n{err}");
        }
    }
}

/// Servers that fork a child per connection after `accept`, the parent
/// closing its copy: `socat TCP-LISTEN,fork` (the child answering through
/// a shell that echoes what came, and, inetd style, a `cat` that has the
/// connection as its stdin and stdout) and Python's
/// `socketserver.ForkingTCPServer` (whose child sets `TCP_NODELAY` and
/// says `getpeername`/`getsockname`). Under exec the child's fd is
/// relayed by the parent, which runs rxpath: eight connections, four at
/// a time, up to 1.4 MB each way, get the same bytes as on the kernel.
#[test]
fn servers_forking_per_connection_answer_as_on_the_kernel() {
    let Some(p) = Pair::new("tf", true, &["socat", "python3"]) else {
        return;
    };
    let listen = format!("TCP-LISTEN:5360,bind={SRV},fork,reuseaddr");
    let servers: [&[&str]; 3] = [
        &[
            "socat",
            &listen,
            "SYSTEM:echo peer $SOCAT_PEERADDR; cat; echo end",
        ],
        &["socat", &listen, "EXEC:cat,nofork"],
        &["python3", FORKING_SERVER, SRV, "5360"],
    ];
    for prog in servers {
        let mut seen = Vec::new();
        for exec in [None, Some(EXEC)] {
            let s = server(&p, exec, prog);
            let c = in_client(&p, &["timeout", "60", "python3", FORK_CLIENT, SRV, "5360"]);
            let got = String::from_utf8_lossy(&c.stdout).to_string();
            let _ = Command::new("kill").arg(s.id().to_string()).output();
            let (_, out, err) = finish(s);
            let cerr = String::from_utf8_lossy(&c.stderr);
            assert_eq!(
                got.lines().count(),
                8,
                "{prog:?} {exec:?}: {got} {cerr}\n{out}\n{err}"
            );
            if exec.is_some() {
                served_cleanly(&out);
                assert!(err.contains("relays it to the child"), "{err}");
            }
            seen.push(got);
        }
        assert_eq!(seen[0], seen[1], "{prog:?}");
    }
}

/// A third namespace behind the client one, which routes to it over a
/// link of `mtu` bytes (both ends) and advertises a 1460-byte MSS all
/// the same; removed with what runs there.
struct Far {
    ns: String,
}

impl Far {
    /// `far` (198.18.98.2) behind the client namespace (198.18.98.1 on
    /// its side of the narrow link, forwarding), routed to from the
    /// server namespace through the client.
    fn new(p: &Pair, mtu: u32) -> Far {
        let ns = p.cli.replacen("c-", "f-", 1);
        let (near_if, far_if) = (
            p.cli_if.replacen('c', "r", 1),
            p.cli_if.replacen('c', "f", 1),
        );
        let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        let far = Far { ns };
        let sh = |ns: &str, args: &[&str]| {
            let o = Command::new("ip")
                .args(["netns", "exec", ns])
                .args(args)
                .output();
            assert!(o.is_ok_and(|o| o.status.success()), "{ns}: {args:?}");
        };
        let o = Command::new("ip").args(["netns", "add", &far.ns]).output();
        assert!(o.is_ok_and(|o| o.status.success()), "ip netns add");
        common::kernel_tcp_defaults(&far.ns);
        let mtu = mtu.to_string();
        #[rustfmt::skip]
        sh(&p.cli, &["ip", "link", "add", &near_if, "mtu", &mtu, "type", "veth", "peer", "name", &far_if, "netns", &far.ns]);
        sh(
            &p.cli,
            &["ip", "addr", "add", "198.18.98.1/24", "dev", &near_if],
        );
        sh(&p.cli, &["ip", "link", "set", &near_if, "up"]);
        sh(&p.cli, &["sysctl", "-q", "net.ipv4.ip_forward=1"]);
        sh(&far.ns, &["ip", "link", "set", &far_if, "mtu", &mtu]);
        sh(
            &far.ns,
            &["ip", "addr", "add", "198.18.98.2/24", "dev", &far_if],
        );
        sh(&far.ns, &["ip", "link", "set", &far_if, "up"]);
        sh(&far.ns, &["ip", "link", "set", "lo", "up"]);
        // The far end advertises a full-sized MSS (as a host behind a
        // second router would): only the router's ICMP tells the sender.
        #[rustfmt::skip]
        sh(&far.ns, &["ip", "route", "add", "default", "via", "198.18.98.1", "advmss", "1460"]);
        sh(
            &p.srv,
            &["ip", "route", "add", "198.18.98.0/24", "via", "198.18.9.5"],
        );
        far
    }
}

impl Drop for Far {
    fn drop(&mut self) {
        if let Ok(o) = Command::new("ip")
            .args(["netns", "pids", &self.ns])
            .output()
        {
            for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-KILL", pid]).output();
            }
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
    }
}

/// A narrow link behind a router: `iperf3 -c` in the server namespace
/// sends to a peer past the client namespace, which forwards onto a link
/// of 1280 bytes. Full-sized segments (DF set) do not pass; the router's
/// "fragmentation needed" comes back, the XDP program takes it to
/// rxpath's TCP, which shrinks its segments and resends: every byte
/// arrives, as on the kernel. (Without it the connection stalls.)
#[test]
fn a_narrow_link_behind_a_router_is_learnt_from_icmp() {
    let Some(p) = Pair::new("tp", true, &["iperf3"]) else {
        return;
    };
    let far = Far::new(&p, 1280);
    for exec in [None, Some(EXEC)] {
        let srv = Command::new("ip")
            .args(["netns", "exec", &far.ns])
            .args(["iperf3", "-s", "-1", "-B", "198.18.98.2", "-p", "5323"])
            .stdout(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .expect("iperf3 -s");
        let args = [
            "iperf3",
            "-c",
            "198.18.98.2",
            "-p",
            "5323",
            "-t",
            "1",
            "--json",
        ];
        let j = iperf3_client_counts_every_byte(&p, exec, &args, srv, &format!("{exec:?}"));
        eprintln!("{exec:?}: {}", j["end"]["sum_sent"]);
    }
}

/// A counter of the namespace `ns`: `group` (`Ip:`, `TcpExt:`) in `file`
/// (`/proc/net/snmp`, `/proc/net/netstat`), a line of names then one of
/// values.
fn net_counter(ns: &str, file: &str, group: &str, name: &str) -> u64 {
    let o = in_ns(ns, &["cat", file]);
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(group)).collect();
    let (names, values) = (lines[0].split_whitespace(), lines[1].split_whitespace());
    names
        .zip(values)
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("no {group} {name} in {file}"))
}

/// TCP segments that arrive as IP fragments: a sender past a router that
/// does not set DF (`ip_no_pmtu_disc`), the router's link to the server
/// narrower than the sender's segments, so it cuts each in two. The XDP
/// program takes a fragmented datagram's later pieces where its first
/// went (rxpath's ports), rxpath reassembles them as `ip_defrag` and its
/// TCP takes the segment: every byte of an iperf3 test arrives, as on the
/// kernel. (Left to the kernel, the pieces of rxpath's connection make a
/// segment the kernel resets.)
#[test]
fn tcp_segments_in_ip_fragments_reach_rxpaths_connection() {
    let Some(p) = Pair::new("tg", true, &["iperf3"]) else {
        return;
    };
    let far = Far::new(&p, 1500);
    let ok = |o: Output| assert!(o.status.success(), "{o:?}");
    ok(in_ns(
        &far.ns,
        &["sysctl", "-qw", "net.ipv4.ip_no_pmtu_disc=1"],
    ));
    ok(in_ns(
        &p.cli,
        &["ip", "link", "set", &p.cli_if, "mtu", "1280"],
    ));
    for exec in [None, Some(EXEC)] {
        let before = net_counter(&p.cli, "/proc/net/snmp", "Ip:", "FragCreates");
        let (j, out) = iperf3_once_from(&p, &far.ns, exec, false);
        let what = format!("{exec:?}");
        let sent = j["end"]["sum_sent"]["bytes"].as_u64().unwrap_or(0);
        let got = j["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
        assert!(sent > 1_000_000, "{what}: {}\n{out}", j["end"]);
        let whole = sent.checked_sub(got).is_some_and(|d| d < IN_FLIGHT);
        assert!(whole, "{what}: {}\n{out}", j["end"]);
        let cut = net_counter(&p.cli, "/proc/net/snmp", "Ip:", "FragCreates") - before;
        assert!(cut > 1000, "{what}: the router cut {cut} fragments");
        if exec.is_some() {
            served_cleanly(&out);
        }
    }
}

/// An epoll echo server (Python's `select.epoll`, one connection).
const EPOLL_ECHO: &str = "import socket, select, sys\n\
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
l.bind((sys.argv[1], int(sys.argv[2]))); l.listen(8); l.setblocking(False)\n\
ep = select.epoll(); ep.register(l.fileno(), select.EPOLLIN)\n\
print('ready', flush=True)\n\
conn, n = None, 0\n\
while True:\n\
\x20   for fd, ev in ep.poll():\n\
\x20       if fd == l.fileno():\n\
\x20           conn, _ = l.accept(); conn.setblocking(False)\n\
\x20           ep.register(conn.fileno(), select.EPOLLIN)\n\
\x20           continue\n\
\x20       d = conn.recv(65536)\n\
\x20       if not d:\n\
\x20           print('echoed', n, flush=True); sys.exit(0)\n\
\x20       n += len(d); conn.sendall(d)\n";

/// A TCP echo server that blocks in `accept` and `recv` (as `sockperf
/// server --tcp`): prints how many bytes it echoed when its peer closes.
const BLOCKING_ECHO: &str = "import socket, sys\n\
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
l.bind((sys.argv[1], int(sys.argv[2]))); l.listen(8)\n\
print('ready', flush=True)\n\
conn, _ = l.accept(); n = 0\n\
while True:\n\
\x20   d = conn.recv(65536)\n\
\x20   if not d:\n\
\x20       print('echoed', n, flush=True); sys.exit(0)\n\
\x20   n += len(d); conn.sendall(d)\n";

/// A TCP echo server that blocks in `accept` and then waits for its
/// connection in `poll()` (as `select`- and `poll`-driven servers do).
const POLL_ECHO: &str = "import socket, select, sys\n\
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
l.bind((sys.argv[1], int(sys.argv[2]))); l.listen(8)\n\
print('ready', flush=True)\n\
conn, _ = l.accept(); conn.setblocking(False); n = 0\n\
p = select.poll(); p.register(conn.fileno(), select.POLLIN)\n\
while True:\n\
\x20   p.poll()\n\
\x20   d = conn.recv(65536)\n\
\x20   if not d:\n\
\x20       print('echoed', n, flush=True); sys.exit(0)\n\
\x20   n += len(d); conn.sendall(d)\n";

/// `n` request/answer round trips of 32 bytes on one connection: how many
/// came back right.
const RR_CLIENT: &str = "import socket, sys, time\n\
for i in range(100):\n\
\x20   try:\n\
\x20       s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5); break\n\
\x20   except OSError: time.sleep(0.1)\n\
ok = 0\n\
for i in range(int(sys.argv[3])):\n\
\x20   m = b'%032d' % i; s.sendall(m); got = b''\n\
\x20   while len(got) < len(m): got += s.recv(64)\n\
\x20   ok += got == m\n\
s.close(); print(ok)\n";

/// IRQ suspension for TCP as for UDP: a server's thread that goes to
/// sleep with the queue's interrupt suspended (`--irq-suspend-timeout`,
/// on by default), in `epoll_wait` or in a blocking `recv`, waits on the
/// device itself and polls the NAPI when it wakes, so a round trip raises
/// no interrupt of its own; with the suspension off nearly every segment
/// raises one (the interrupt thread, then the server). Every answer comes
/// back either way.
#[test]
fn an_epoll_server_sleeps_on_the_device_between_segments() {
    sleeps_on_the_device("tq", EPOLL_ECHO, "5350");
}

/// [`an_epoll_server_sleeps_on_the_device_between_segments`] for a
/// server that blocks in `recv`.
#[test]
fn a_blocking_reader_sleeps_on_the_device_between_segments() {
    sleeps_on_the_device("tb", BLOCKING_ECHO, "5351");
}

/// [`an_epoll_server_sleeps_on_the_device_between_segments`] for a
/// server that waits in `poll()` (and so in `select()`, which rxpath
/// answers with the same wait).
#[test]
fn a_poll_server_sleeps_on_the_device_between_segments() {
    sleeps_on_the_device("tj", POLL_ECHO, "5352");
}

fn sleeps_on_the_device(tag: &str, server_src: &str, port: &str) {
    let Some(p) = Pair::new(tag, true, &["python3"]) else {
        return;
    };
    let n = 300;
    for suspend in [None, Some("0")] {
        let mut args = EXEC.to_vec();
        args.push("--json");
        if let Some(s) = suspend {
            args.extend(["--irq-suspend-timeout", s]);
        }
        let prog = ["python3", "-c", server_src, SRV, port];
        let mut s = server(&p, Some(&args), &prog);
        common::exec::wait_ready(&mut s);
        let c = in_client(
            &p,
            &[
                "timeout",
                "60",
                "python3",
                "-c",
                RR_CLIENT,
                SRV,
                port,
                &n.to_string(),
            ],
        );
        let (status, out, err) = common::exec::finish(s);
        let what = format!("suspension {suspend:?}");
        assert!(status.success(), "{what}: {out}\n{err}");
        let got = String::from_utf8_lossy(&c.stdout);
        assert_eq!(got.trim(), n.to_string(), "{what}: {got}\n{out}\n{err}");
        assert!(out.contains(&format!("echoed {}", n * 32)), "{what}: {out}");
        let rep = report_of(&out);
        let acc = &rep["accounting"];
        assert_eq!(acc["frames_home"], acc["frames_total"], "{what}: {rep}");
        let rx = rep["accounting"]["received"].as_u64().unwrap_or(0);
        let irqs = rep["host"]["queues"][0]["device"]["wakeups"]
            .as_u64()
            .unwrap_or_else(|| panic!("{what}: no interrupt count: {rep}"));
        assert!(rx >= n as u64, "{what}: received {rx}");
        if suspend.is_some() {
            assert!(irqs * 2 >= rx, "{what}: {irqs} interrupts for {rx} frames");
        } else {
            assert!(irqs * 4 < rx, "{what}: {irqs} interrupts for {rx} frames");
        }
    }
}

/// A Fast Open server, the kernel's (`TCP_FASTOPEN`): `n` connections,
/// each answered with its request in capitals.
const TFO_SERVER: &str = "import socket, sys\n\
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
l.setsockopt(socket.IPPROTO_TCP, socket.TCP_FASTOPEN, 16)\n\
l.bind((sys.argv[1], int(sys.argv[2]))); l.listen(16)\n\
print('ready', flush=True)\n\
for i in range(int(sys.argv[3])):\n\
\x20   c, _ = l.accept(); c.sendall(c.recv(4096).upper()); c.close()\n";

/// A Fast Open client: `n` connections opened with `TCP_FASTOPEN_CONNECT`
/// (`connect`) or `sendto(MSG_FASTOPEN)` (`sendto`); per connection, the
/// answer and whether its SYN's data was acknowledged (`TCP_INFO`'s
/// `TCPI_OPT_SYN_DATA`).
const TFO_CLIENT: &str = "import socket, sys\n\
to = (sys.argv[1], int(sys.argv[2]))\n\
for i in range(int(sys.argv[3])):\n\
\x20   s = socket.socket(); m = b'fast open %d' % i\n\
\x20   if sys.argv[4] == 'connect':\n\
\x20       s.setsockopt(socket.IPPROTO_TCP, 30, 1); s.connect(to); s.sendall(m)\n\
\x20   else:\n\
\x20       s.sendto(m, socket.MSG_FASTOPEN, to)\n\
\x20   got = b''\n\
\x20   while True:\n\
\x20       d = s.recv(4096)\n\
\x20       if not d: break\n\
\x20       got += d\n\
\x20   info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)\n\
\x20   print(i, got.decode(), info[5] & 32, flush=True); s.close()\n";

/// TCP Fast Open's client under exec, with the kernel's server as the
/// peer: the first connection asks for a cookie, the next ones carry
/// their request on the SYN and the server takes it there
/// (`TCPFastOpenPassive`), through `TCP_FASTOPEN_CONNECT` and through
/// `sendto(MSG_FASTOPEN)`: the answers, `TCP_INFO`'s SYN-data bit and the
/// server's count as with the kernel's own client.
#[test]
fn a_fast_open_client_sends_its_request_on_the_syn_as_on_the_kernel() {
    let Some(p) = Pair::new("to", true, &["python3"]) else {
        return;
    };
    let sysctl = in_client(&p, &["sysctl", "-qw", "net.ipv4.tcp_fastopen=3"]);
    assert!(sysctl.status.success(), "{sysctl:?}");
    let n = 4;
    for how in ["connect", "sendto"] {
        let mut seen = Vec::new();
        for exec in [None, Some(EXEC)] {
            // The kernel client's cookie from an earlier run is forgotten.
            let _ = Command::new("ip")
                .args(["netns", "exec", &p.srv, "ip", "tcp_metrics", "flush", "all"])
                .output();
            let mut srv = Command::new("ip")
                .args(["netns", "exec", &p.cli, "python3", "-c", TFO_SERVER])
                .args(["198.18.9.5", "5360", &n.to_string()])
                .stdout(std::process::Stdio::piped())
                .process_group(0)
                .spawn()
                .expect("the Fast Open server");
            common::exec::wait_ready(&mut srv);
            let before = net_counter(&p.cli, "/proc/net/netstat", "TcpExt:", "TCPFastOpenPassive");
            let prog = ["python3", "-c", TFO_CLIENT, "198.18.9.5", "5360", "4", how];
            let (status, out, err) = finish(server(&p, exec, &prog));
            let _ = common::exec::finish(srv);
            let what = format!("{how} {exec:?}");
            assert!(status.success(), "{what}: {out}\n{err}");
            let passive =
                net_counter(&p.cli, "/proc/net/netstat", "TcpExt:", "TCPFastOpenPassive") - before;
            assert_eq!(
                passive,
                n - 1,
                "{what}: data on every SYN after the first: {out}"
            );
            let answers: Vec<String> = out
                .lines()
                .filter(|l| l.contains("FAST OPEN"))
                .map(str::to_owned)
                .collect();
            assert_eq!(answers.len(), n as usize, "{what}: {out}\n{err}");
            assert!(answers[0].ends_with(" 0"), "{what}: the first asks: {out}");
            assert!(
                answers[1..].iter().all(|a| a.ends_with(" 32")),
                "{what}: {out}"
            );
            if exec.is_some() {
                // Every connection rxpath's, the path's accounting whole.
                assert!(
                    out.contains(&format!("sockets on rxpath {n} ")),
                    "{what}: {out}"
                );
                assert!(out.contains("back in the pool: ok"), "{what}: {out}");
                assert!(!out.contains("MISMATCH"), "{what}: {out}");
            }
            seen.push(answers);
        }
        assert_eq!(seen[0], seen[1], "{how}: as on the kernel");
    }
}

/// One connection echoed whole; the server prints whether ECN was agreed
/// (`TCP_INFO`'s `TCPI_OPT_ECN`) and what it echoed.
const ECN_ECHO: &str = "import socket, struct, sys\n\
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
l.bind((sys.argv[1], int(sys.argv[2]))); l.listen(8)\n\
print('ready', flush=True)\n\
c, _ = l.accept(); n = 0\n\
opts = c.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)[5]\n\
while True:\n\
\x20   d = c.recv(65536)\n\
\x20   if not d: break\n\
\x20   n += len(d); c.sendall(d)\n\
c.close(); print('server ecn', opts & 8 != 0, 'echoed', n, flush=True)\n";

/// Sends 1 MB, reads it back, and says whether ECN was agreed.
const ECN_CLIENT: &str = "import socket, struct, sys, threading, time\n\
for i in range(100):\n\
\x20   try:\n\
\x20       s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10); break\n\
\x20   except OSError: time.sleep(0.1)\n\
opts = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)[5]\n\
data = bytes(range(256)) * 4096\n\
t = threading.Thread(target=lambda: (s.sendall(data), s.shutdown(socket.SHUT_WR))); t.start()\n\
got = b''\n\
while True:\n\
\x20   d = s.recv(65536)\n\
\x20   if not d: break\n\
\x20   got += d\n\
t.join(); print('client ecn', opts & 8 != 0, 'same', got == data)\n";

/// ECN with a kernel peer that asks for it (`tcp_ecn` 1 in its namespace):
/// a server under exec agrees as the kernel's does (`tcp_ecn` 2, the
/// default), both ends say so in `TCP_INFO`, and 1 MB of ECT(0) data
/// each way comes back whole.
#[test]
fn an_ecn_asking_client_gets_ecn_from_a_server_under_exec_as_on_the_kernel() {
    let Some(p) = Pair::new("te", true, &["python3"]) else {
        return;
    };
    let ok = |o: Output| assert!(o.status.success(), "{o:?}");
    ok(in_ns(&p.cli, &["sysctl", "-qw", "net.ipv4.tcp_ecn=1"]));
    ok(in_ns(&p.srv, &["sysctl", "-qw", "net.ipv4.tcp_ecn=2"]));
    let mut seen = Vec::new();
    for exec in [None, Some(EXEC)] {
        let mut s = server(&p, exec, &["python3", "-c", ECN_ECHO, SRV, "5370"]);
        common::exec::wait_ready(&mut s);
        let c = in_client(
            &p,
            &["timeout", "30", "python3", "-c", ECN_CLIENT, SRV, "5370"],
        );
        let got = String::from_utf8_lossy(&c.stdout).trim().to_string();
        let (status, out, err) = common::exec::finish(s);
        assert!(status.success(), "{exec:?}: {out}\n{err}");
        assert_eq!(got, "client ecn True same True", "{exec:?}: {out}\n{err}");
        let line = out.lines().find(|l| l.starts_with("server ecn"));
        assert_eq!(
            line,
            Some("server ecn True echoed 1048576"),
            "{exec:?}: {out}"
        );
        if exec.is_some() {
            served_cleanly(&out);
        }
        seen.push((got, line.map(str::to_owned)));
    }
    assert_eq!(seen[0], seen[1]);
}

/// TCP Fast Open's server half under exec, the kernel's client as the
/// peer, one key in the server's namespace (`tcp_fastopen_key`): first
/// the kernel's server, which gives the client its cookie and takes the
/// next requests on their SYNs; then the server under exec, whose
/// cookies are the kernel's (SipHash of the addresses under that key):
/// every request rides on its SYN, the kernel's cookie taken, and each
/// answer comes back with the client's `TCPI_OPT_SYN_DATA` set.
#[test]
fn a_fast_open_server_under_exec_takes_the_kernels_cookie_and_data() {
    let Some(p) = Pair::new("tw", true, &["python3"]) else {
        return;
    };
    let key = "net.ipv4.tcp_fastopen_key=a0bf63f7-ed803d81-cd641d30-cebc4a90";
    for (ns, kv) in [
        (&p.srv, "net.ipv4.tcp_fastopen=3"),
        (&p.srv, key),
        (&p.cli, "net.ipv4.tcp_fastopen=1"),
    ] {
        let o = in_ns(ns, &["sysctl", "-qw", kv]);
        assert!(o.status.success(), "{o:?}");
    }
    let n = 4;
    let mut runs = Vec::new();
    for exec in [None, Some(EXEC)] {
        let prog = ["python3", "-c", TFO_SERVER, SRV, "5380", "4"];
        let mut s = server(&p, exec, &prog);
        common::exec::wait_ready(&mut s);
        #[rustfmt::skip]
        let c = in_client(&p, &["timeout", "30", "python3", "-c", TFO_CLIENT, SRV, "5380", "4", "sendto"]);
        let (status, out, err) = common::exec::finish(s);
        assert!(status.success(), "{exec:?}: {out}\n{err}");
        let got = String::from_utf8_lossy(&c.stdout).to_string();
        let lines: Vec<String> = got.lines().map(str::to_owned).collect();
        assert_eq!(lines.len(), n, "{exec:?}: {got}\n{out}\n{err}");
        for (i, l) in lines.iter().enumerate() {
            assert!(l.starts_with(&format!("{i} FAST OPEN {i} ")), "{l}");
        }
        if exec.is_some() {
            served_cleanly(&out);
        }
        runs.push(lines);
    }
    // The kernel's server: the first connection asks, the next carry data.
    assert!(runs[0][0].ends_with(" 0"), "{:?}", runs[0]);
    assert!(
        runs[0][1..].iter().all(|l| l.ends_with(" 32")),
        "{:?}",
        runs[0]
    );
    // Under exec: the cookie the kernel gave is rxpath's too.
    assert!(runs[1].iter().all(|l| l.ends_with(" 32")), "{:?}", runs[1]);
}

const LINGER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps/tcp_linger.py");
const LINGER_CLIENT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/apps/tcp_linger_client.py"
);

/// `SO_LINGER` with a timeout, as the kernel: `close()` of a connection
/// with data the client has not read yet returns once the client read it
/// and the FIN was acknowledged, or at the timeout, after which the data
/// still reaches the client whole (the server has exited by then: its
/// host stays until the connection is done).
#[test]
fn so_linger_makes_close_wait_for_the_peer_as_on_the_kernel() {
    let Some(p) = Pair::new("tz", true, &["python3"]) else {
        return;
    };
    let mut seen = Vec::new();
    for (lines, got, _, all) in script_runs(&p, LINGER, LINGER_CLIENT, "5350") {
        assert_eq!(lines.len(), 3, "{all}");
        let sent: Vec<&str> = lines[..2]
            .iter()
            .map(|l| l.split_whitespace().nth(2).unwrap_or(""))
            .collect();
        let gots: Vec<&str> = got.lines().map(|l| l.trim_start_matches("got ")).collect();
        assert_eq!(
            sent, gots,
            "every byte sent reaches the client: {all}\n{got}"
        );
        for l in &lines[..2] {
            assert!(l.ends_with("True"), "{l}\n{all}");
        }
        // Without the byte counts (buffer sizes differ), line for line.
        let shape: Vec<String> = lines
            .iter()
            .map(|l| {
                l.split_whitespace()
                    .enumerate()
                    .filter(|&(i, _)| i != 2)
                    .map(|(_, w)| w)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        seen.push(shape);
    }
    assert_eq!(seen[0], seen[1]);
}

const LISTENER_OPTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/apps/tcp_listener_opts.py"
);
const LISTENER_OPTS_CLIENT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/apps/tcp_listener_opts_client.py"
);

/// Options a server sets on its listener before `listen` are its
/// connections', as on the kernel (`sk_clone_lock`): the accepted
/// connection reads back `SO_LINGER {1, 0}`, `SO_KEEPALIVE`,
/// `TCP_NODELAY` and `IP_TOS`, and its `close` resets the connection,
/// which the client sees as on the kernel.
#[test]
fn a_listeners_options_are_its_connections_as_on_the_kernel() {
    let Some(p) = Pair::new("ty", true, &["python3"]) else {
        return;
    };
    let runs = script_runs(&p, LISTENER_OPTS, LISTENER_OPTS_CLIENT, "5360");
    let want = [
        "linger (1, 0)",
        "keepalive 1",
        "nodelay 1",
        "tos 0x20",
        "rcvbuf 100000",
        "sndbuf 65536",
        "done",
    ];
    for (lines, got, _, all) in &runs {
        assert_eq!(lines, &want, "{all}");
        assert_eq!(
            got.lines().collect::<Vec<_>>(),
            ["got hello", "reset"],
            "{all}\n{got}"
        );
    }
}
