//! The preload's configuration, from the environment `rxpath exec` sets
//! (or a user sets by hand): the kernel's knob names as variables.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `RXPATH_IFACE` | the interface whose UDP sockets rxpath takes | none: every socket stays the kernel's |
//! | `RXPATH_MODE` | `xdp`, `packet` or `auto` (AF_XDP, else AF_PACKET) | `auto` |
//! | `RXPATH_BUSY_POLL` | `SO_BUSY_POLL` for every socket, µs (`net.core.busy_read`) | 0: readers sleep |
//! | `RXPATH_PREFER_BUSY_POLL` | keep the queue's interrupt masked after a busy poll, ns | 0 |
//! | `RXPATH_NAPI_THREADS` | NAPI threads | 1 |
//! | `RXPATH_GRO_FLUSH_TIMEOUT` | `gro_flush_timeout`, ns | 0 |
//! | `RXPATH_NAPI_DEFER_HARD_IRQS` | `napi_defer_hard_irqs` | 0 |
//! | `RXPATH_REPORT` | write the path's accounting (JSON) here at exit | none |
//! | `RXPATH_METRICS` | serve Prometheus metrics on this address while the host runs | none |
//! | `RXPATH_PORTS` | take only UDP sockets bound to these ports (`53,5000-5100`) | every port |
//! | `RXPATH_KERNEL_PORTS` | leave sockets on these ports to the kernel, whatever else says | none |

use std::path::PathBuf;

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
    /// Prefer busy polling: interrupt deferral after a busy poll, ns.
    pub prefer_busy_poll_ns: u64,
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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            iface: None,
            mode: Mode::Auto,
            busy_poll_us: 0,
            prefer_busy_poll_ns: 0,
            napi_threads: 1,
            gro_flush_timeout_ns: 0,
            defer_hard_irqs: 0,
            report: None,
            metrics: None,
            ports: None,
            kernel_ports: Vec::new(),
        }
    }
}

impl Config {
    /// The configuration the process's environment gives.
    pub fn from_env() -> Result<Config, String> {
        Self::from_vars(|k| std::env::var(k).ok())
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
        num(&var, "RXPATH_PREFER_BUSY_POLL", &mut c.prefer_busy_poll_ns)?;
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
        Ok(c)
    }

    /// Whether the rules let rxpath take a socket on `port`; `Err` names
    /// the rule that keeps it on the kernel.
    pub fn port_allowed(&self, port: u16) -> Result<(), String> {
        let within = |l: &[(u16, u16)]| l.iter().any(|&(a, b)| (a..=b).contains(&port));
        if within(&self.kernel_ports) {
            return Err(format!("port {port} is in RXPATH_KERNEL_PORTS"));
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
            (
                "RXPATH_PREFER_BUSY_POLL",
                self.prefer_busy_poll_ns.to_string(),
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
        v
    }
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
            prefer_busy_poll_ns: 200_000,
            napi_threads: 2,
            gro_flush_timeout_ns: 20_000,
            defer_hard_irqs: 2,
            report: Some("/tmp/r.json".into()),
            metrics: Some("127.0.0.1:9900".parse().unwrap()),
            ports: Some(vec![(53, 53), (5000, 5100)]),
            kernel_ports: vec![(5050, 5050)],
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
        assert!(c.port_allowed(53).is_ok());
        assert!(c.port_allowed(5000).is_ok() && c.port_allowed(5100).is_ok());
        assert!(c
            .port_allowed(5050)
            .unwrap_err()
            .contains("RXPATH_KERNEL_PORTS"));
        assert!(c.port_allowed(54).unwrap_err().contains("RXPATH_PORTS"));
        assert!(Config::default().port_allowed(1).is_ok());
        assert!(port_list("9-1").is_err());
        assert!(port_list("70000").is_err());
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
