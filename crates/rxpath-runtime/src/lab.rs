//! Test topologies: a network namespace with a veth pair inside, made with
//! iproute2 and removed when the guard is dropped (also when a test fails
//! and unwinds). Addresses come only from 198.18.0.0/15.

use rxpath_dev::sync::lock;
use std::io;
use std::process::Command;
use std::sync::Mutex;

/// What exists now that a process that is told to stop must remove: the
/// namespaces of live [`VethLab`]s and the topologies of live
/// [`LabGuard`]s. Guards remove themselves when dropped; a signal handler
/// calls [`cleanup_all`] instead, since a process that exits from a handler
/// drops nothing.
static LIVE: Mutex<Vec<Made>> = Mutex::new(Vec::new());

#[derive(Debug, Clone, PartialEq)]
enum Made {
    Ns(String),
    Topology(Topology),
}

fn live() -> std::sync::MutexGuard<'static, Vec<Made>> {
    lock(&LIVE)
}

/// Held while a namespace or topology is being made, and by
/// [`cleanup_all`]: a signal that comes in the middle of `ip netns add`
/// or [`Topology::up`] waits for it to end, then removes what it made
/// (removing first would race the `ip` still running, which would then
/// leave a namespace behind).
static BUILDING: Mutex<()> = Mutex::new(());

fn building() -> std::sync::MutexGuard<'static, ()> {
    lock(&BUILDING)
}

fn forget(m: &Made) {
    let mut l = live();
    if let Some(i) = l.iter().position(|x| x == m) {
        l.remove(i);
    }
}

/// Remove everything this process made and still has (for a signal
/// handler: what a normal exit would drop). Processes still running in
/// those namespaces (peers, generators) are killed first. Returns the names
/// removed.
pub fn cleanup_all() -> Vec<String> {
    let _building = building();
    let made = std::mem::take(&mut *live());
    let mut gone = Vec::new();
    for m in made {
        let ns = match &m {
            Made::Ns(ns) => ns.clone(),
            Made::Topology(t) => t.ns.clone(),
        };
        if let Ok(pids) = sh("ip", &["netns", "pids", &ns]) {
            for pid in pids.split_whitespace() {
                let _ = sh("kill", &["-KILL", pid]);
            }
        }
        let r = match &m {
            Made::Ns(ns) => sh("ip", &["netns", "del", ns]).map(|_| ()),
            Made::Topology(t) => t.down(),
        };
        if r.is_ok() {
            gone.push(ns);
        }
    }
    gone
}

/// A network namespace holding the veth pair `a` ↔ `b`.
#[derive(Debug)]
pub struct VethLab {
    /// Namespace name (`ip netns`).
    pub ns: String,
    /// The sending end.
    pub a: String,
    /// The receiving end.
    pub b: String,
}

/// MAC of the `a` end.
pub const MAC_A: [u8; 6] = [0x02, 0x52, 0x58, 0, 0, 0x0a];
/// MAC of the `b` end.
pub const MAC_B: [u8; 6] = [0x02, 0x52, 0x58, 0, 0, 0x0b];

fn mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Run a command; an error names it and carries its stderr.
pub fn sh(cmd: &str, args: &[&str]) -> io::Result<String> {
    let out = Command::new(cmd).args(args).output().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("{cmd}: {e} (install iproute2 and ethtool)"),
        )
    })?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl VethLab {
    /// Make namespace `rxp-<tag>-<pid>-<n>` with a veth pair (198.18.0.1/24 on
    /// `a`, 198.18.0.2/24 on `b`), both up. Anything half made is removed
    /// on error.
    pub fn create(tag: &str) -> io::Result<VethLab> {
        Self::create_with_queues(tag, 1)
    }

    /// [`Self::create`] with `queues` RX and TX queues on each end.
    pub fn create_with_queues(tag: &str, queues: usize) -> io::Result<VethLab> {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 100;
        let pid = std::process::id() % 100_000;
        let lab = VethLab {
            ns: format!("rxp-{tag}-{pid}-{n}"),
            a: format!("{tag}{n}a{pid}"),
            b: format!("{tag}{n}b{pid}"),
        };
        if lab.a.len() > 15 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "tag too long for an interface name",
            ));
        }
        {
            let _building = building();
            sh("ip", &["netns", "add", &lab.ns])?;
            live().push(Made::Ns(lab.ns.clone()));
        }
        // From here on, Drop removes the namespace (and the veth in it).
        let (ma, mb) = (mac(MAC_A), mac(MAC_B));
        let q = queues.to_string();
        lab.ip(&[
            "link",
            "add",
            &lab.a,
            "address",
            &ma,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            &lab.b,
            "address",
            &mb,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
        ])?;
        lab.ip(&["addr", "add", "198.18.0.1/24", "dev", &lab.a])?;
        lab.ip(&["addr", "add", "198.18.0.2/24", "dev", &lab.b])?;
        lab.ip(&["link", "set", &lab.a, "up"])?;
        lab.ip(&["link", "set", &lab.b, "up"])?;
        Ok(lab)
    }

    /// Make the kernel's sends to 198.18.0.2 leave through `a` and arrive
    /// on `b`, where rxpath reads: both ends share one namespace, so take
    /// the address off `b` and point 198.18.0.2 at b's MAC on `a` (else the
    /// kernel would deliver locally).
    pub fn route_to_b(&self) -> io::Result<()> {
        self.ip(&["addr", "del", "198.18.0.2/24", "dev", &self.b])?;
        self.ip(&[
            "neigh",
            "replace",
            "198.18.0.2",
            "lladdr",
            &mac(MAC_B),
            "dev",
            &self.a,
            "nud",
            "permanent",
        ])?;
        Ok(())
    }

    /// `ip -n <ns> ...`.
    pub fn ip(&self, args: &[&str]) -> io::Result<String> {
        let mut v = vec!["-n", &self.ns];
        v.extend_from_slice(args);
        sh("ip", &v)
    }

    /// Run a command inside the namespace (`ip netns exec`).
    pub fn exec(&self, cmd: &[&str]) -> io::Result<String> {
        let mut v = vec!["netns", "exec", &self.ns];
        v.extend_from_slice(cmd);
        sh("ip", &v)
    }

    /// Path for `setns`.
    pub fn netns_path(&self) -> String {
        format!("/run/netns/{}", self.ns)
    }

    /// Turn on threaded NAPI on `b` (needs GRO on first) and return the pid
    /// of its NAPI kthread.
    pub fn threaded_napi(&self) -> io::Result<i32> {
        let path = format!("/sys/class/net/{}/threaded", self.b);
        self.exec(&["sh", "-c", &format!("echo 1 > {path}")])?;
        let prefix = format!("napi/{}-", self.b);
        for e in std::fs::read_dir("/proc")?.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            if let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) {
                if comm.trim().starts_with(&prefix)
                    || prefix.starts_with(comm.trim()) && comm.trim().starts_with("napi/")
                {
                    return Ok(pid);
                }
            }
        }
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no NAPI kthread for {}", self.b),
        ))
    }
}

impl Drop for VethLab {
    fn drop(&mut self) {
        forget(&Made::Ns(self.ns.clone()));
        let _ = sh("ip", &["netns", "del", &self.ns]);
    }
}

/// The `rxpath lab` topology: a veth pair whose host end lives in the
/// caller's namespace (where `rxpath run --iface` opens it) and whose peer
/// end lives in namespace `ns` (where generators and clients run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Peer namespace.
    pub ns: String,
    /// Host-side interface.
    pub host_if: String,
    /// Peer-side interface (in `ns`).
    pub peer_if: String,
    /// RX/TX queues on each end.
    pub queues: usize,
    /// GRO on the host end.
    pub gro: bool,
    /// Threaded NAPI on the host end (turns GRO on first: veth needs it).
    pub threaded: bool,
}

impl Topology {
    /// A one-queue lab named after `tag` and this process (so tests that
    /// run at once do not meet): namespace `rxp-TAG-ID`, interfaces
    /// `TAGIDh` and `TAGIDp`, no GRO, no threaded NAPI.
    pub fn named(tag: &str) -> Topology {
        let id = std::process::id() % 10_000;
        Topology {
            ns: format!("rxp-{tag}-{id}"),
            host_if: format!("{tag}{id}h"),
            peer_if: format!("{tag}{id}p"),
            queues: 1,
            gro: false,
            threaded: false,
        }
    }
}

/// The MAC address of `iface` in namespace `ns` (`ip -o link show`).
pub fn mac_in(ns: &str, iface: &str) -> io::Result<[u8; 6]> {
    let out = sh("ip", &["-n", ns, "-o", "link", "show", "dev", iface])?;
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("no MAC for {iface}: {out}"),
        )
    };
    let hex = out
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .ok_or_else(bad)?;
    let mut mac = [0u8; 6];
    let parts: Vec<&str> = hex.split(':').collect();
    if parts.len() != 6 {
        return Err(bad());
    }
    for (m, h) in mac.iter_mut().zip(parts) {
        *m = u8::from_str_radix(h, 16).map_err(|_| bad())?;
    }
    Ok(mac)
}

/// Host-side address.
pub const HOST_ADDR: &str = "198.18.0.1";
/// Peer-side address.
pub const PEER_ADDR: &str = "198.18.0.2";

impl Default for Topology {
    fn default() -> Self {
        Topology {
            ns: "rxp-peer".into(),
            host_if: "rxp0".into(),
            peer_if: "rxp1".into(),
            queues: 2,
            gro: false,
            threaded: false,
        }
    }
}

/// A topology that is taken down when dropped (errors and panics too).
#[derive(Debug)]
pub struct LabGuard(pub Topology);

impl Drop for LabGuard {
    fn drop(&mut self) {
        forget(&Made::Topology(self.0.clone()));
        let _ = self.0.down();
    }
}

impl Topology {
    /// Bring the topology up for the life of the returned guard.
    pub fn up_scoped(self) -> io::Result<LabGuard> {
        let _building = building();
        live().push(Made::Topology(self.clone()));
        let g = LabGuard(self);
        g.0.up()?;
        Ok(g)
    }
}

/// What `status` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabStatus {
    /// The peer namespace exists.
    pub ns: bool,
    /// The host interface exists.
    pub host_if: bool,
    /// Its RX queue count, if it exists.
    pub queues: Option<usize>,
    /// `ethtool -k` says GRO is on.
    pub gro: Option<bool>,
    /// `/sys/class/net/<if>/threaded`.
    pub threaded: Option<bool>,
}

impl Topology {
    /// Check names and sizes.
    pub fn validate(&self) -> io::Result<()> {
        let bad = |m: String| Err(io::Error::new(io::ErrorKind::InvalidInput, m));
        for n in [&self.host_if, &self.peer_if] {
            if n.is_empty()
                || n.len() > 15
                || !n
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return bad(format!("bad interface name '{n}' (1-15 of [A-Za-z0-9_-])"));
            }
        }
        if self.ns.is_empty() || self.ns.contains('/') {
            return bad(format!("bad namespace name '{}'", self.ns));
        }
        if !(1..=64).contains(&self.queues) {
            return bad(format!("queues must be in 1..=64, got {}", self.queues));
        }
        Ok(())
    }

    /// Build the topology. Idempotent: if it exists it is brought to the
    /// asked settings. On any failure, what was made is removed.
    pub fn up(&self) -> io::Result<()> {
        self.validate()?;
        let st = self.status();
        if st.ns && st.host_if && st.queues == Some(self.queues) {
            return self.settings();
        }
        if st.ns || st.host_if {
            self.down()?;
        }
        let r = self.build();
        if r.is_err() {
            let _ = self.down();
        }
        r
    }

    fn build(&self) -> io::Result<()> {
        let q = self.queues.to_string();
        sh("ip", &["netns", "add", &self.ns])?;
        sh(
            "ip",
            &[
                "link",
                "add",
                &self.host_if,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
                "type",
                "veth",
                "peer",
                "name",
                &self.peer_if,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
                "netns",
                &self.ns,
            ],
        )?;
        sh(
            "ip",
            &[
                "addr",
                "add",
                &format!("{HOST_ADDR}/24"),
                "dev",
                &self.host_if,
            ],
        )?;
        sh(
            "ip",
            &[
                "-n",
                &self.ns,
                "addr",
                "add",
                &format!("{PEER_ADDR}/24"),
                "dev",
                &self.peer_if,
            ],
        )?;
        sh("ip", &["link", "set", &self.host_if, "up"])?;
        sh("ip", &["-n", &self.ns, "link", "set", &self.peer_if, "up"])?;
        sh("ip", &["-n", &self.ns, "link", "set", "lo", "up"])?;
        self.settings()
    }

    fn settings(&self) -> io::Result<()> {
        let gro = if self.gro || self.threaded {
            "on"
        } else {
            "off"
        };
        sh("ethtool", &["-K", &self.host_if, "gro", gro])?;
        let path = format!("/sys/class/net/{}/threaded", self.host_if);
        let now = std::fs::read_to_string(&path)
            .map(|s| s.trim() == "1")
            .unwrap_or(false);
        if self.threaded != now {
            // veth refuses threaded NAPI unless GRO is on (set just above).
            std::fs::write(&path, if self.threaded { "1" } else { "0" })
                .map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
        }
        Ok(())
    }

    /// Remove the topology (idempotent).
    pub fn down(&self) -> io::Result<()> {
        if self.status().host_if {
            sh("ip", &["link", "del", &self.host_if])?;
        }
        if self.status().ns {
            sh("ip", &["netns", "del", &self.ns])?;
        }
        Ok(())
    }

    /// What exists now.
    pub fn status(&self) -> LabStatus {
        let ns = sh("ip", &["netns", "list"])
            .map(|o| {
                o.lines()
                    .any(|l| l.split_whitespace().next() == Some(self.ns.as_str()))
            })
            .unwrap_or(false);
        let base = format!("/sys/class/net/{}", self.host_if);
        let host_if = std::path::Path::new(&base).exists();
        let queues = host_if
            .then(|| std::fs::read_dir(format!("{base}/queues")).ok())
            .flatten()
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                    .count()
            });
        let gro = host_if
            .then(|| sh("ethtool", &["-k", &self.host_if]).ok())
            .flatten()
            .map(|o| o.lines().any(|l| l.trim() == "generic-receive-offload: on"));
        let threaded = host_if
            .then(|| std::fs::read_to_string(format!("{base}/threaded")).ok())
            .flatten()
            .map(|s| s.trim() == "1");
        LabStatus {
            ns,
            host_if,
            queues,
            gro,
            threaded,
        }
    }
}
