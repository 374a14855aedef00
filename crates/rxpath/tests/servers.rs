//! Unmodified DNS servers as Debian ships them (root only; CI runs it as
//! root and installs the packages): each runs on the kernel's sockets,
//! then under `rxpath exec` on AF_XDP and on AF_PACKET, with its own
//! configuration as its package runs it (dropping privileges to its
//! user, forking or threading its workers). A client in the other
//! namespace asks the same queries of each run over IPv4 and IPv6 (small
//! answers, a name that does not exist, a 3 KB TXT set that comes back in
//! IP fragments or truncated); every query is answered, each answer byte
//! for byte what the server answered on the kernel, exec's accounting
//! holds and every frame comes home. The recursors forward to an
//! authoritative NSD on the server's loopback (records with TTL 0, so no
//! answer depends on when it was cached).

mod common;

use common::Pair;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const SRV4: &str = "198.18.9.6";
const SRV6: &str = "2001:2:0:9::6";
const PORT: &str = "5353";
const UPSTREAM: &str = "5300";
const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps/dns_client.py");
const ROUNDS: usize = 4;

/// A directory every server user can read, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("rxpath-srv-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn write(&self, name: &str, text: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }

    /// Readable and writable by every user (the servers drop to theirs).
    fn open_up(&self) {
        common::sh(&["chmod", "-R", "a+rwX", &self.0.display().to_string()]);
        common::sh(&["chmod", "a+rx", &std::env::temp_dir().display().to_string()]);
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The zone: small records and a TXT set of about 3 KB; `ttl` for all.
fn zone(ttl: u32) -> String {
    let mut z = format!(
        "$ORIGIN example.test.\n$TTL {ttl}\n\
         @ IN SOA ns1 hostmaster 1 7200 3600 1209600 3600\n\
         @ IN NS ns1\nns1 IN A 198.18.9.6\n\
         www IN A 198.18.9.10\nwww IN AAAA 2001:2:0:9::10\n"
    );
    for i in 0..28 {
        z.push_str(&format!("big IN TXT \"{}{i:02}\"\n", "x".repeat(98)));
    }
    z
}

/// NSD's configuration: `count` servers (`reuseport` or one shared
/// socket per address), on `addrs` at `port`, as user nsd.
fn nsd_conf(d: &Dir, addrs: &[&str], port: &str, count: u32, reuseport: bool) -> String {
    d.write("example.test.zone", &zone(0));
    let dir = d.path().display();
    let ips: String = addrs
        .iter()
        .map(|a| format!("  ip-address: {a}@{port}\n"))
        .collect();
    let rp = if reuseport { "yes" } else { "no" };
    d.write(
        "nsd.conf",
        &format!(
            "server:\n{ips}  server-count: {count}\n  reuseport: {rp}\n  username: nsd\n  \
             zonesdir: \"{dir}\"\n  pidfile: \"{dir}/nsd.pid\"\n  database: \"\"\n  \
             xfrdfile: \"{dir}/xfrd.state\"\n  zonelistfile: \"{dir}/zone.list\"\n  \
             xfrdir: \"{dir}\"\n  verbosity: 1\n  logfile: \"{dir}/nsd.log\"\n\
             remote-control:\n  control-enable: no\n\
             zone:\n  name: example.test\n  zonefile: example.test.zone\n"
        ),
    )
}

/// A server program and its files.
struct Server {
    name: &'static str,
    argv: Vec<String>,
    /// What the server's test needs besides python3.
    tools: &'static [&'static str],
    /// Recursors: an authoritative NSD on loopback to forward to.
    upstream: bool,
    /// It shuffles its RRsets: answers compared with records sorted.
    shuffles: bool,
    /// How it is told to exit cleanly, if not by SIGTERM (a program a
    /// signal kills writes no report).
    quit: Option<Vec<String>>,
    /// Its directory (kept for the run).
    _dir: Dir,
}

fn nsd(tag: &str, count: u32, reuseport: bool) -> Server {
    let d = Dir::new(tag);
    let conf = nsd_conf(&d, &[SRV4, SRV6], PORT, count, reuseport);
    d.open_up();
    Server {
        name: "nsd",
        argv: vec!["nsd".into(), "-d".into(), "-c".into(), conf],
        tools: &["nsd"],
        upstream: false,
        shuffles: false,
        quit: None,
        _dir: d,
    }
}

fn knotd(tag: &str) -> Server {
    let d = Dir::new(tag);
    d.write("example.test.zone", &zone(3600));
    std::fs::create_dir_all(d.path().join("run")).unwrap();
    let dir = d.path().display();
    let conf = d.write(
        "knot.conf",
        &format!(
            "server:\n    rundir: \"{dir}/run\"\n    user: knot:knot\n    \
             listen: [ {SRV4}@{PORT}, {SRV6}@{PORT} ]\n    udp-workers: 2\n    \
             tcp-workers: 1\n    background-workers: 1\n    udp-max-payload: 4096\n\
             database:\n    storage: \"{dir}/db\"\n\
             log:\n  - target: stderr\n    any: warning\n\
             zone:\n  - domain: example.test\n    storage: \"{dir}\"\n    file: \"example.test.zone\"\n"
        ),
    );
    d.open_up();
    Server {
        name: "knotd",
        argv: vec!["knotd".into(), "-c".into(), conf],
        tools: &["knotd"],
        upstream: false,
        shuffles: false,
        quit: None,
        _dir: d,
    }
}

fn named(tag: &str) -> Server {
    let d = Dir::new(tag);
    d.write("example.test.zone", &zone(3600));
    let dir = d.path().display();
    let conf = d.write(
        "named.conf",
        &format!(
            "options {{\n  directory \"{dir}\";\n  pid-file \"{dir}/named.pid\";\n  \
             listen-on port {PORT} {{ {SRV4}; }};\n  listen-on-v6 port {PORT} {{ {SRV6}; }};\n  \
             recursion no;\n  edns-udp-size 4096;\n  max-udp-size 4096;\n}};\n\
             controls {{ }};\n\
             zone \"example.test\" {{ type primary; file \"{dir}/example.test.zone\"; }};\n"
        ),
    );
    d.open_up();
    Server {
        name: "named",
        // As Debian's unit starts it: in the foreground, as user bind.
        argv: ["named", "-f", "-u", "bind", "-c", &conf]
            .map(String::from)
            .to_vec(),
        tools: &["named"],
        upstream: false,
        // rrset-order: each answer's records in a new order.
        shuffles: true,
        quit: None,
        _dir: d,
    }
}

fn unbound(tag: &str) -> Server {
    let d = Dir::new(tag);
    let dir = d.path().display();
    let conf = d.write(
        "unbound.conf",
        &format!(
            "server:\n  interface: {SRV4}@{PORT}\n  interface: {SRV6}@{PORT}\n  \
             num-threads: 2\n  so-reuseport: yes\n  username: \"unbound\"\n  chroot: \"\"\n  \
             directory: \"{dir}\"\n  pidfile: \"{dir}/unbound.pid\"\n  use-syslog: no\n  \
             logfile: \"\"\n  verbosity: 0\n  do-daemonize: no\n  \
             access-control: 198.18.0.0/15 allow\n  access-control: 2001:2::/32 allow\n  \
             module-config: \"iterator\"\n  do-not-query-localhost: no\n  \
             local-zone: \"test.\" nodefault\n  domain-insecure: \"test.\"\n  \
             edns-buffer-size: 4096\n  max-udp-size: 4096\n  \
             auto-trust-anchor-file: \"\"\n\
             remote-control:\n  control-enable: no\n\
             forward-zone:\n  name: \"example.test.\"\n  forward-addr: 127.0.0.1@{UPSTREAM}\n"
        ),
    );
    d.open_up();
    Server {
        name: "unbound",
        argv: ["unbound", "-d", "-c", &conf].map(String::from).to_vec(),
        tools: &["unbound", "nsd"],
        upstream: true,
        // rrset-roundrobin: each answer's records in a new order.
        shuffles: true,
        quit: None,
        _dir: d,
    }
}

fn pdns_recursor(tag: &str) -> Server {
    let d = Dir::new(tag);
    let dir = d.path().display().to_string();
    d.write("recursor.conf", "");
    d.open_up();
    let argv = [
        "pdns_recursor".to_string(),
        format!("--config-dir={dir}"),
        format!("--socket-dir={dir}"),
        format!("--local-address={SRV4}:{PORT},[{SRV6}]:{PORT}"),
        format!("--forward-zones=example.test=127.0.0.1:{UPSTREAM}"),
        "--allow-from=198.18.0.0/15,2001:2::/32".into(),
        "--dont-query=".into(),
        "--daemon=no".into(),
        "--threads=2".into(),
        "--setuid=pdns".into(),
        "--setgid=pdns".into(),
        "--disable-syslog=yes".into(),
        "--dnssec=off".into(),
        "--udp-truncation-threshold=4096".into(),
    ];
    Server {
        name: "pdns_recursor",
        argv: argv.to_vec(),
        tools: &["pdns_recursor", "nsd"],
        upstream: true,
        shuffles: true,
        // SIGTERM kills it; rec_control asks it to exit.
        quit: Some(vec![
            "rec_control".into(),
            format!("--socket-dir={dir}"),
            "quit-nicely".into(),
        ]),
        _dir: d,
    }
}

fn dnsmasq(tag: &str) -> Server {
    let d = Dir::new(tag);
    let dir = d.path().display().to_string();
    d.open_up();
    let argv = [
        "dnsmasq".to_string(),
        "-k".into(),
        "--conf-file=/dev/null".into(),
        format!("--port={PORT}"),
        format!("--listen-address={SRV4},{SRV6}"),
        "--bind-interfaces".into(),
        "--no-resolv".into(),
        "--no-hosts".into(),
        "--cache-size=0".into(),
        "--edns-packet-max=4096".into(),
        format!("--server=/example.test/127.0.0.1#{UPSTREAM}"),
        format!("--pid-file={dir}/dnsmasq.pid"),
        "--user=dnsmasq".into(),
    ];
    Server {
        name: "dnsmasq",
        argv: argv.to_vec(),
        tools: &["dnsmasq", "nsd"],
        upstream: true,
        shuffles: false,
        quit: None,
        _dir: d,
    }
}

/// `argv` in the server namespace, under exec with `mode` (or on the
/// kernel's sockets when `None`).
fn start(p: &Pair, argv: &[String], mode: Option<&str>) -> Child {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &p.srv]);
    if let Some(m) = mode {
        c.arg(env!("CARGO_BIN_EXE_rxpath"))
            .args(["exec", "--iface", &p.srv_if, "--mode", m, "--"]);
    }
    c.args(argv)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"))
}

/// SIGTERM (or `quit` in the server's namespace), then the exit's stdout
/// and stderr.
fn stop(c: Child, name: &str, quit: Option<(&Pair, &[String])>) -> (String, String) {
    match quit {
        Some((p, argv)) => {
            let a: Vec<&str> = argv.iter().map(String::as_str).collect();
            let _ = p.exec(&p.srv, &a).output();
        }
        None => {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
        }
    }
    common::wait_out(c, name)
}

/// The client's answers; on a failure, the server's output with it.
fn ask(p: &Pair, s: &Server, server: Child) -> (serde_json::Value, String, String) {
    let name = s.name;
    let mut c = p.exec(&p.cli, &["python3", CLIENT, SRV4, SRV6, PORT]);
    c.arg(ROUNDS.to_string());
    if s.shuffles {
        c.arg("--sorted");
    }
    let out = c.output().expect("client");
    let (sout, serr) = stop(server, name, s.quit.as_deref().map(|q| (p, q)));
    match serde_json::from_slice(&out.stdout) {
        Ok(v) => (v, sout, serr),
        Err(e) => panic!(
            "{name}: {e}: {}\n{sout}\n{serr}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// The first query whose answer differs: its id, the kernel's answer and
/// exec's (hex).
fn first_difference(
    k: &serde_json::Value,
    r: &serde_json::Value,
) -> Option<(String, String, String)> {
    let (k, r) = (k.as_object()?, r.as_object()?);
    k.iter().find_map(|(id, a)| {
        let b = r.get(id).and_then(|b| b.as_str()).unwrap_or("(none)");
        (a.as_str() != Some(b)).then(|| (id.clone(), a.to_string(), b.to_string()))
    })
}

/// The kernel run, then exec on AF_XDP and AF_PACKET: the same answers.
fn same_answers(tag: &str, make: fn(&str) -> Server) {
    let s = make(tag);
    let mut tools = vec!["python3"];
    tools.extend_from_slice(s.tools);
    let Some(p) = Pair::new(tag, true, &tools) else {
        return;
    };
    let up_dir = Dir::new(&format!("{tag}up"));
    let upstream = s.upstream.then(|| {
        let conf = nsd_conf(&up_dir, &["127.0.0.1"], UPSTREAM, 1, false);
        up_dir.open_up();
        let argv = ["nsd", "-d", "-c", &conf].map(String::from);
        start(&p, &argv, None)
    });
    let k = start(&p, &s.argv, None);
    let (on_kernel, kout, kerr) = ask(&p, &s, k);
    let n = 2 * ROUNDS * 7;
    assert_eq!(
        on_kernel["missing"], 0,
        "{} on the kernel: {kout}\n{kerr}",
        s.name
    );
    assert_eq!(on_kernel["answers"].as_object().unwrap().len(), n);
    for mode in ["xdp", "packet"] {
        let r = start(&p, &s.argv, Some(mode));
        let (on_rxpath, out, err) = ask(&p, &s, r);
        let what = format!("{} under exec --mode {mode}", s.name);
        assert_eq!(on_rxpath["missing"], 0, "{what}: {out}\n{err}");
        let diff = first_difference(&on_kernel["answers"], &on_rxpath["answers"]);
        assert!(
            diff.is_none(),
            "{what}: byte for byte: {diff:?}\n{out}\n{err}"
        );
        assert!(out.contains("accounting: received"), "{what}: {out}\n{err}");
        assert!(
            !out.contains("sockets on rxpath 0 "),
            "{what}: {out}\n{err}"
        );
        assert!(!out.contains("MISMATCH"), "{what}: {out}");
        eprintln!("{what}: {n} answers as on the kernel");
    }
    if let Some(u) = upstream {
        stop(u, "the upstream nsd", None);
    }
}

#[test]
fn nsd_with_two_reuseport_servers() {
    same_answers("s1", |t| nsd(t, 2, true));
}

#[test]
fn nsd_with_four_servers_on_one_socket() {
    same_answers("s2", |t| nsd(t, 4, false));
}

#[test]
fn knotd_as_user_knot() {
    same_answers("s3", knotd);
}

#[test]
fn named_as_user_bind() {
    same_answers("s4", named);
}

#[test]
fn unbound_with_two_threads_as_user_unbound() {
    same_answers("s5", unbound);
}

#[test]
fn pdns_recursor_forwarding_to_a_local_authoritative() {
    same_answers("s6", pdns_recursor);
}

#[test]
fn dnsmasq_forwarding_as_user_dnsmasq() {
    same_answers("s7", dnsmasq);
}
