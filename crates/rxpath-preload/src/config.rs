//! The preload's configuration, from the environment `rxpath exec` sets
//! (or a user sets by hand): the kernel's knob names as variables.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `RXPATH_IFACE` | the interface whose UDP sockets rxpath takes | none: every socket stays the kernel's |
//! | `RXPATH_MODE` | `xdp`, `packet` or `auto` (AF_XDP, else AF_PACKET) | `auto` |
//! | `RXPATH_BUSY_POLL` | `SO_BUSY_POLL` for every socket, µs (`net.core.busy_read`) | 0: readers sleep |
//! | `RXPATH_BUSY_POLL_BUDGET` | `SO_BUSY_POLL_BUDGET` for every socket: the packets one poll of a reading or waiting thread takes from its queue (a socket's own setting wins) | 64 |
//! | `RXPATH_PREFER_BUSY_POLL` | keep the queue's interrupt masked after a busy poll, ns | 0 |
//! | `RXPATH_IRQ_SUSPEND_TIMEOUT` | a thread that waits on a socket polls its queue first and keeps the interrupt suspended up to this long, ns; asleep, it waits on the device itself (0: the interrupt thread wakes it); an epoll wait that hands over events keeps it suspended this long from then | 20000000 |
//! | `RXPATH_NAPI_THREADS` | NAPI threads | 1 |
//! | `RXPATH_GRO_FLUSH_TIMEOUT` | `gro_flush_timeout`, ns | 0 |
//! | `RXPATH_NAPI_DEFER_HARD_IRQS` | `napi_defer_hard_irqs` | 0 |
//! | `RXPATH_REPORT` | write the path's accounting (JSON) here at exit | none |
//! | `RXPATH_METRICS` | serve Prometheus metrics on this address while the host runs | none |
//! | `RXPATH_PORTS` | take only UDP sockets bound to these ports (`53,5000-5100`) | every port |
//! | `RXPATH_KERNEL_PORTS` | leave sockets on these ports to the kernel, whatever else says | none |
//! | `RXPATH_RULES` | rules by bound address and port, first match wins: `kernel 198.18.0.1:5000-5100, rxpath *:53` | none: every socket is rxpath's |
//! | `RXPATH_PROFILE` | `latency`: busy-poll 50 µs in every read unless `RXPATH_BUSY_POLL` says otherwise | none |
//! | `RXPATH_CONFIG` | a TOML file with the same settings, keyed as `rxpath exec`'s flags (`iface`, `busy-poll`, `rules`, ...); a variable that is set wins over it | none |

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// A tuning profile, as VMA's `VMA_SPEC`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// Busy-poll 50 µs in every read (`SO_BUSY_POLL`) unless a busy-poll
    /// time is given: the lowest round trip, a core per reading thread.
    Latency,
}

/// The busy-poll time of the latency profile, µs.
pub const LATENCY_BUSY_POLL_US: u32 = 50;

/// The default interrupt suspension while threads wait, ns: long against
/// a request's turnaround and against the pauses a program's thread takes
/// when the scheduler puts something else on its core (the NAPI thread
/// checks back once per period while a program keeps reading). While the
/// program is away its datagrams wait in the device's RX ring, thousands
/// deep, instead of being moved into a socket buffer that holds a few
/// hundred: at 1 ms a pause of a few ms moved a burst into knotd's
/// socket and overflowed it (`bench dns`), at 20 ms it stayed in the ring
/// and was read when the program came back.
pub const IRQ_SUSPEND_TIMEOUT_NS: u64 = 20_000_000;

/// The default busy-poll budget, packets: the kernel's `BUSY_POLL_BUDGET`
/// is 8, which made a waiting knotd (10 datagrams a `recvmmsg`) poll its
/// queue once per batch; at 64 one poll fills several batches and the
/// program catches up faster after a pause (`bench dns`: fewer queries
/// lost at the RX ring at the same offered rate). The kernel's
/// `EPIOCSPARAMS` takes the same budget for IRQ suspension.
pub const BUSY_POLL_BUDGET: u16 = 64;

/// A rule for which sockets rxpath takes, by the address and port they
/// are bound to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Rule {
    /// Leave matching sockets to the kernel (`kernel`) or take them
    /// (`rxpath`).
    pub kernel: bool,
    /// The bound address (`None`: any, `*`).
    pub addr: Option<IpAddr>,
    /// The port range.
    pub ports: (u16, u16),
}

impl Rule {
    fn matches(&self, a: SocketAddr) -> bool {
        self.addr.is_none_or(|x| x == a.ip()) && (self.ports.0..=self.ports.1).contains(&a.port())
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.kernel { "kernel" } else { "rxpath" };
        let addr = match self.addr {
            None => "*".to_string(),
            Some(IpAddr::V4(a)) => a.to_string(),
            Some(IpAddr::V6(a)) => format!("[{a}]"),
        };
        let ports = match self.ports {
            (0, u16::MAX) => "*".to_string(),
            p => show_ports(&[p]),
        };
        write!(f, "{what} {addr}:{ports}")
    }
}

/// How the preloaded process opens its interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// AF_XDP; if it cannot be set up, AF_PACKET.
    Auto,
    /// AF_XDP only.
    Xdp,
    /// AF_PACKET.
    Packet,
}

/// The preload's settings.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Config {
    /// The interface (`RXPATH_IFACE`); `None`: accelerate nothing.
    pub iface: Option<String>,
    /// How to open it.
    pub mode: Mode,
    /// `SO_BUSY_POLL` default for every socket, µs.
    pub busy_poll_us: u32,
    /// `SO_BUSY_POLL_BUDGET` default for every socket, packets (0: the
    /// kernel's 8).
    pub busy_poll_budget: u16,
    /// Prefer busy polling: interrupt deferral after a busy poll, ns.
    pub prefer_busy_poll_ns: u64,
    /// Interrupt suspension while threads wait, ns (0: off): the deferral
    /// after the one poll a waiting thread makes when it does not busy-poll.
    pub irq_suspend_timeout_ns: u64,
    /// NAPI threads.
    pub napi_threads: usize,
    /// `gro_flush_timeout`, ns.
    pub gro_flush_timeout_ns: u64,
    /// `napi_defer_hard_irqs`.
    pub defer_hard_irqs: u32,
    /// Where to write the report at exit.
    pub report: Option<PathBuf>,
    /// Where to serve Prometheus metrics.
    pub metrics: Option<std::net::SocketAddr>,
    /// Take only sockets on these port ranges (`None`: every port).
    pub ports: Option<Vec<(u16, u16)>>,
    /// Leave sockets on these port ranges to the kernel.
    pub kernel_ports: Vec<(u16, u16)>,
    /// Rules by bound address and port, first match wins.
    pub rules: Vec<Rule>,
    /// The tuning profile.
    pub profile: Option<Profile>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            iface: None,
            mode: Mode::Auto,
            busy_poll_us: 0,
            busy_poll_budget: BUSY_POLL_BUDGET,
            prefer_busy_poll_ns: 0,
            irq_suspend_timeout_ns: IRQ_SUSPEND_TIMEOUT_NS,
            napi_threads: 1,
            gro_flush_timeout_ns: 0,
            defer_hard_irqs: 0,
            report: None,
            metrics: None,
            ports: None,
            kernel_ports: Vec::new(),
            rules: Vec::new(),
            profile: None,
        }
    }
}

impl Config {
    /// The configuration the process's environment gives: the variables,
    /// and for those not set the file `RXPATH_CONFIG` names.
    pub fn from_env() -> Result<Config, String> {
        Self::from_env_with(|k| std::env::var(k).ok())
    }

    /// [`Self::from_env`] with the environment `env` gives (`rxpath exec`
    /// checks what the program's will be before it starts it).
    pub fn from_env_with(env: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        let file = match env("RXPATH_CONFIG") {
            Some(p) if !p.is_empty() => {
                let text = read_config_file(std::path::Path::new(&p))
                    .map_err(|e| format!("RXPATH_CONFIG={p:?}: {e}"))?;
                file_vars(&text).map_err(|e| format!("RXPATH_CONFIG={p:?}: {e}"))?
            }
            _ => HashMap::new(),
        };
        Self::from_vars(|k| {
            env(k)
                .filter(|s| !s.is_empty())
                .or_else(|| file.get(k).cloned())
        })
    }

    /// The configuration `var` gives (`var(name)` is the variable's value);
    /// a value that does not parse is an error naming the variable.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        let mut c = Config {
            iface: var("RXPATH_IFACE").filter(|s| !s.is_empty()),
            report: var("RXPATH_REPORT")
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
            ..Config::default()
        };
        if let Some(m) = var("RXPATH_MODE") {
            c.mode = match m.as_str() {
                "auto" => Mode::Auto,
                "xdp" => Mode::Xdp,
                "packet" => Mode::Packet,
                o => return Err(format!("RXPATH_MODE={o:?}: auto, xdp or packet")),
            };
        }
        num(&var, "RXPATH_BUSY_POLL", &mut c.busy_poll_us)?;
        num(&var, "RXPATH_BUSY_POLL_BUDGET", &mut c.busy_poll_budget)?;
        num(&var, "RXPATH_PREFER_BUSY_POLL", &mut c.prefer_busy_poll_ns)?;
        num(
            &var,
            "RXPATH_IRQ_SUSPEND_TIMEOUT",
            &mut c.irq_suspend_timeout_ns,
        )?;
        num(&var, "RXPATH_NAPI_THREADS", &mut c.napi_threads)?;
        num(
            &var,
            "RXPATH_GRO_FLUSH_TIMEOUT",
            &mut c.gro_flush_timeout_ns,
        )?;
        num(&var, "RXPATH_NAPI_DEFER_HARD_IRQS", &mut c.defer_hard_irqs)?;
        if let Some(m) = var("RXPATH_METRICS").filter(|s| !s.is_empty()) {
            let a = m
                .parse()
                .map_err(|_| format!("RXPATH_METRICS={m:?}: not an address:port"))?;
            c.metrics = Some(a);
        }
        if let Some(p) = var("RXPATH_PORTS").filter(|s| !s.is_empty()) {
            c.ports = Some(port_list(&p).map_err(|e| format!("RXPATH_PORTS={p:?}: {e}"))?);
        }
        if let Some(p) = var("RXPATH_KERNEL_PORTS").filter(|s| !s.is_empty()) {
            c.kernel_ports =
                port_list(&p).map_err(|e| format!("RXPATH_KERNEL_PORTS={p:?}: {e}"))?;
        }
        if let Some(r) = var("RXPATH_RULES").filter(|s| !s.is_empty()) {
            c.rules = rule_list(&r).map_err(|e| format!("RXPATH_RULES={r:?}: {e}"))?;
        }
        if let Some(p) = var("RXPATH_PROFILE").filter(|s| !s.is_empty()) {
            c.profile = match p.as_str() {
                "latency" => Some(Profile::Latency),
                o => return Err(format!("RXPATH_PROFILE={o:?}: the profile is latency")),
            };
        }
        if c.profile == Some(Profile::Latency) && c.busy_poll_us == 0 {
            c.busy_poll_us = LATENCY_BUSY_POLL_US;
        }
        Ok(c)
    }

    /// Whether the rules let rxpath take a socket bound to `addr`; `Err`
    /// names the rule that keeps it on the kernel. `RXPATH_KERNEL_PORTS`
    /// first, then the first of `RXPATH_RULES` that matches, then
    /// `RXPATH_PORTS`.
    pub fn allowed(&self, addr: SocketAddr) -> Result<(), String> {
        let port = addr.port();
        let within = |l: &[(u16, u16)]| l.iter().any(|&(a, b)| (a..=b).contains(&port));
        if within(&self.kernel_ports) {
            return Err(format!("port {port} is in RXPATH_KERNEL_PORTS"));
        }
        if let Some(r) = self.rules.iter().find(|r| r.matches(addr)) {
            return match r.kernel {
                true => Err(format!("{addr}: RXPATH_RULES says \"{r}\"")),
                false => Ok(()),
            };
        }
        match &self.ports {
            Some(l) if !within(l) => Err(format!("port {port} is not in RXPATH_PORTS")),
            _ => Ok(()),
        }
    }

    /// The variables that give this configuration (what `rxpath exec`
    /// sets in the program's environment).
    pub fn to_vars(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![
            ("RXPATH_MODE", format!("{:?}", self.mode).to_lowercase()),
            ("RXPATH_BUSY_POLL", self.busy_poll_us.to_string()),
            ("RXPATH_BUSY_POLL_BUDGET", self.busy_poll_budget.to_string()),
            (
                "RXPATH_PREFER_BUSY_POLL",
                self.prefer_busy_poll_ns.to_string(),
            ),
            (
                "RXPATH_IRQ_SUSPEND_TIMEOUT",
                self.irq_suspend_timeout_ns.to_string(),
            ),
            ("RXPATH_NAPI_THREADS", self.napi_threads.to_string()),
            (
                "RXPATH_GRO_FLUSH_TIMEOUT",
                self.gro_flush_timeout_ns.to_string(),
            ),
            (
                "RXPATH_NAPI_DEFER_HARD_IRQS",
                self.defer_hard_irqs.to_string(),
            ),
        ];
        if let Some(i) = &self.iface {
            v.push(("RXPATH_IFACE", i.clone()));
        }
        if let Some(r) = &self.report {
            v.push(("RXPATH_REPORT", r.display().to_string()));
        }
        if let Some(m) = self.metrics {
            v.push(("RXPATH_METRICS", m.to_string()));
        }
        if let Some(p) = &self.ports {
            v.push(("RXPATH_PORTS", show_ports(p)));
        }
        if !self.kernel_ports.is_empty() {
            v.push(("RXPATH_KERNEL_PORTS", show_ports(&self.kernel_ports)));
        }
        if !self.rules.is_empty() {
            let r: Vec<String> = self.rules.iter().map(Rule::to_string).collect();
            v.push(("RXPATH_RULES", r.join(", ")));
        }
        if let Some(Profile::Latency) = self.profile {
            v.push(("RXPATH_PROFILE", "latency".into()));
        }
        v
    }
}

/// The most a config file holds (`RXPATH_CONFIG`, `rxpath --config`).
pub const CONFIG_MAX_BYTES: u64 = 1 << 20;

/// A config file's text: a regular file of at most [`CONFIG_MAX_BYTES`],
/// opened without waiting (a FIFO's open waits for a writer) and read
/// with that bound (`/dev/zero` never ends; a file that grows meanwhile is
/// refused too). The error is one line.
pub fn read_config_file(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    let too_big = || format!("larger than 1 MiB ({CONFIG_MAX_BYTES} bytes)");
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > CONFIG_MAX_BYTES {
        return Err(too_big());
    }
    let mut text = String::new();
    f.take(CONFIG_MAX_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > CONFIG_MAX_BYTES {
        return Err(too_big());
    }
    Ok(text)
}

/// The settings of a TOML file, as the variables they stand for: keys are
/// `rxpath exec`'s flags (`busy-poll` for `RXPATH_BUSY_POLL`); `rules` may
/// be a list. An unknown key is an error.
fn file_vars(text: &str) -> Result<HashMap<&'static str, String>, String> {
    const KEYS: [(&str, &str); 17] = [
        ("iface", "RXPATH_IFACE"),
        ("mode", "RXPATH_MODE"),
        ("busy-poll", "RXPATH_BUSY_POLL"),
        ("busy-poll-budget", "RXPATH_BUSY_POLL_BUDGET"),
        ("prefer-busy-poll", "RXPATH_PREFER_BUSY_POLL"),
        ("irq-suspend-timeout", "RXPATH_IRQ_SUSPEND_TIMEOUT"),
        ("napi-threads", "RXPATH_NAPI_THREADS"),
        ("gro-flush-timeout", "RXPATH_GRO_FLUSH_TIMEOUT"),
        ("defer-hard-irqs", "RXPATH_NAPI_DEFER_HARD_IRQS"),
        ("report", "RXPATH_REPORT"),
        ("metrics", "RXPATH_METRICS"),
        ("ports", "RXPATH_PORTS"),
        ("kernel-ports", "RXPATH_KERNEL_PORTS"),
        ("rules", "RXPATH_RULES"),
        ("profile", "RXPATH_PROFILE"),
        // `rxpath exec`'s own: the same file serves `exec --config`.
        ("preload", ""),
        ("json", ""),
    ];
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
    let mut out = HashMap::new();
    for (k, v) in table {
        let Some(&(_, var)) = KEYS.iter().find(|(key, _)| *key == k) else {
            let known: Vec<&str> = KEYS.iter().map(|(k, _)| *k).collect();
            return Err(format!("unknown key {k:?} (keys: {})", known.join(", ")));
        };
        let s = match v {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Array(a) => a
                .iter()
                .map(|x| {
                    x.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| x.to_string())
                })
                .collect::<Vec<_>>()
                .join(", "),
            toml::Value::Boolean(b) => b.to_string(),
            o => return Err(format!("{k}: {o} is not a string, number or list")),
        };
        if !var.is_empty() {
            out.insert(var, s);
        }
    }
    Ok(out)
}

/// `kernel 198.18.0.1:5000-5100, rxpath *:53, kernel [2001:db8::1]:*`.
pub fn rule_list(s: &str) -> Result<Vec<Rule>, String> {
    s.split([',', ';'])
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| {
            let (what, at) = x
                .split_once(char::is_whitespace)
                .ok_or_else(|| format!("{x:?}: kernel|rxpath ADDR:PORTS"))?;
            let kernel = match what {
                "kernel" => true,
                "rxpath" => false,
                o => return Err(format!("{o:?}: a rule says kernel or rxpath")),
            };
            let at = at.trim();
            let (addr, ports) = at
                .rsplit_once(':')
                .ok_or_else(|| format!("{at:?}: ADDR:PORTS (* for any)"))?;
            let addr = match addr.trim_start_matches('[').trim_end_matches(']') {
                "*" => None,
                a => Some(
                    a.parse::<IpAddr>()
                        .map_err(|_| format!("{a:?} is not an address"))?,
                ),
            };
            let ports = match ports {
                "*" => (0, u16::MAX),
                p => port_list(p)?
                    .first()
                    .copied()
                    .ok_or_else(|| format!("{x:?}: no port"))?,
            };
            Ok(Rule {
                kernel,
                addr,
                ports,
            })
        })
        .collect()
}

/// `53,5000-5100` as ranges.
pub fn port_list(s: &str) -> Result<Vec<(u16, u16)>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| {
            let (a, b) = x.split_once('-').unwrap_or((x, x));
            let p = |v: &str| {
                v.trim()
                    .parse::<u16>()
                    .map_err(|_| format!("{v:?} is not a port"))
            };
            let (a, b) = (p(a)?, p(b)?);
            if a > b {
                return Err(format!("{x:?}: the range runs backwards"));
            }
            Ok((a, b))
        })
        .collect()
}

fn show_ports(l: &[(u16, u16)]) -> String {
    let one = |&(a, b): &(u16, u16)| {
        if a == b {
            a.to_string()
        } else {
            format!("{a}-{b}")
        }
    };
    l.iter().map(one).collect::<Vec<_>>().join(",")
}

fn num<T: std::str::FromStr>(
    var: &impl Fn(&str) -> Option<String>,
    name: &str,
    out: &mut T,
) -> Result<(), String> {
    if let Some(s) = var(name).filter(|s| !s.is_empty()) {
        *out = s
            .trim()
            .parse()
            .map_err(|_| format!("{name}={s:?}: not a number"))?;
    }
    Ok(())
}

/// A line on stderr, as Onload's `oo:` lines: the program's own output is
/// not touched.
pub(crate) fn say(msg: &str) {
    eprintln!("rxpath-preload: {msg}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(kv: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = kv
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn nothing_set_accelerates_nothing() {
        let c = Config::from_vars(vars(&[])).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.iface, None);
    }

    #[test]
    fn variables_round_trip() {
        let c = Config {
            iface: Some("veth0".into()),
            mode: Mode::Xdp,
            busy_poll_us: 50,
            busy_poll_budget: 16,
            prefer_busy_poll_ns: 200_000,
            irq_suspend_timeout_ns: 3_000_000,
            napi_threads: 2,
            gro_flush_timeout_ns: 20_000,
            defer_hard_irqs: 2,
            report: Some("/tmp/r.json".into()),
            metrics: Some("127.0.0.1:9900".parse().unwrap()),
            ports: Some(vec![(53, 53), (5000, 5100)]),
            kernel_ports: vec![(5050, 5050)],
            rules: rule_list("kernel 198.18.0.1:5000-5100, rxpath *:53, kernel [2001:db8::1]:*")
                .unwrap(),
            profile: Some(Profile::Latency),
        };
        let v: Vec<(String, String)> = c
            .to_vars()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let back = Config::from_vars(|k| v.iter().find(|(n, _)| n == k).map(|(_, x)| x.clone()));
        assert_eq!(back.unwrap(), c);
    }

    #[test]
    fn port_rules_keep_what_they_say_on_the_kernel() {
        let c = Config::from_vars(vars(&[
            ("RXPATH_PORTS", "53, 5000-5100"),
            ("RXPATH_KERNEL_PORTS", "5050"),
        ]))
        .unwrap();
        let at = |p: u16| SocketAddr::from(([198, 18, 0, 1], p));
        assert!(c.allowed(at(53)).is_ok());
        assert!(c.allowed(at(5000)).is_ok() && c.allowed(at(5100)).is_ok());
        assert!(c
            .allowed(at(5050))
            .unwrap_err()
            .contains("RXPATH_KERNEL_PORTS"));
        assert!(c.allowed(at(54)).unwrap_err().contains("RXPATH_PORTS"));
        assert!(Config::default().allowed(at(1)).is_ok());
        assert!(port_list("9-1").is_err());
        assert!(port_list("70000").is_err());
    }

    #[test]
    fn address_rules_match_first_to_last() {
        let c = Config::from_vars(vars(&[(
            "RXPATH_RULES",
            "rxpath 198.18.0.1:53; kernel 198.18.0.1:*, kernel *:5000-5100",
        )]))
        .unwrap();
        let a = |ip: [u8; 4], p: u16| SocketAddr::from((ip, p));
        assert!(c.allowed(a([198, 18, 0, 1], 53)).is_ok());
        let e = c.allowed(a([198, 18, 0, 1], 54)).unwrap_err();
        assert!(e.contains("kernel 198.18.0.1:*"), "{e}");
        assert!(c.allowed(a([0, 0, 0, 0], 5050)).is_err());
        assert!(c.allowed(a([0, 0, 0, 0], 5200)).is_ok());
        let v6: SocketAddr = "[2001:db8::1]:7".parse().unwrap();
        let c6 = Config::from_vars(vars(&[("RXPATH_RULES", "kernel [2001:db8::1]:*")])).unwrap();
        assert!(c6.allowed(v6).is_err());
        for bad in ["drop *:1", "kernel 1.2.3:4", "kernel *", "kernel *:x"] {
            assert!(rule_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_file_gives_what_variables_do_not() {
        let f = file_vars(
            "iface = \"veth0\"\nbusy-poll = 20\nrules = [\"kernel *:53\"]\nprofile = \"latency\"\n",
        )
        .unwrap();
        let env = vars(&[("RXPATH_BUSY_POLL", "30")]);
        let c = Config::from_vars(|k| env(k).or_else(|| f.get(k).cloned())).unwrap();
        assert_eq!(c.iface.as_deref(), Some("veth0"));
        assert_eq!(c.busy_poll_us, 30, "the variable wins");
        assert_eq!(c.rules.len(), 1);
        assert!(file_vars("bogus = 1").unwrap_err().contains("bogus"));
        assert!(file_vars("iface = ").is_err());
    }

    #[test]
    fn the_latency_profile_busy_polls_unless_told_otherwise() {
        let c = Config::from_vars(vars(&[("RXPATH_PROFILE", "latency")])).unwrap();
        assert_eq!(c.busy_poll_us, LATENCY_BUSY_POLL_US);
        let c = Config::from_vars(vars(&[
            ("RXPATH_PROFILE", "latency"),
            ("RXPATH_BUSY_POLL", "8"),
        ]))
        .unwrap();
        assert_eq!(c.busy_poll_us, 8);
        assert!(Config::from_vars(vars(&[("RXPATH_PROFILE", "fast")])).is_err());
    }

    #[test]
    fn a_bad_value_names_its_variable() {
        let e = Config::from_vars(vars(&[("RXPATH_BUSY_POLL", "fifty")])).unwrap_err();
        assert!(e.contains("RXPATH_BUSY_POLL"), "{e}");
        let e = Config::from_vars(vars(&[("RXPATH_MODE", "dpdk")])).unwrap_err();
        assert!(e.contains("RXPATH_MODE"), "{e}");
        let e = Config::from_vars(vars(&[("RXPATH_METRICS", "9900")])).unwrap_err();
        assert!(e.contains("RXPATH_METRICS"), "{e}");
    }
}
