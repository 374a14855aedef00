//! Test topologies: a network namespace with a veth pair inside, made with
//! iproute2 and removed when the guard is dropped (also when a test fails
//! and unwinds). Addresses come only from 198.18.0.0/15.

use std::io;
use std::process::Command;

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
    /// Make namespace `rxp-<tag>-<pid>` with a veth pair (198.18.0.1/24 on
    /// `a`, 198.18.0.2/24 on `b`), both up. Anything half made is removed
    /// on error.
    pub fn create(tag: &str) -> io::Result<VethLab> {
        let pid = std::process::id() % 100_000;
        let lab = VethLab {
            ns: format!("rxp-{tag}-{pid}"),
            a: format!("{tag}a{pid}"),
            b: format!("{tag}b{pid}"),
        };
        if lab.a.len() > 15 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "tag too long for an interface name",
            ));
        }
        sh("ip", &["netns", "add", &lab.ns])?;
        // From here on, Drop removes the namespace (and the veth in it).
        let (ma, mb) = (mac(MAC_A), mac(MAC_B));
        lab.ip(&[
            "link", "add", &lab.a, "address", &ma, "type", "veth", "peer", "name", &lab.b,
            "address", &mb,
        ])?;
        lab.ip(&["addr", "add", "198.18.0.1/24", "dev", &lab.a])?;
        lab.ip(&["addr", "add", "198.18.0.2/24", "dev", &lab.b])?;
        lab.ip(&["link", "set", &lab.a, "up"])?;
        lab.ip(&["link", "set", &lab.b, "up"])?;
        Ok(lab)
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
        let _ = sh("ip", &["netns", "del", &self.ns]);
    }
}
