//! The types an option's value takes, and how each is read from and
//! written as text (a variable's value, a TOML value made text, a flag).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// How the preloaded process opens its interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// AF_XDP; if it cannot be set up, AF_PACKET.
    Auto,
    /// AF_XDP only.
    Xdp,
    /// AF_PACKET.
    Packet,
}

/// The protocols whose sockets rxpath takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocols {
    /// UDP sockets; every TCP socket stays the kernel's.
    Udp,
    /// UDP and TCP sockets (TCP: listeners and the connections they
    /// accept, on AF_XDP).
    UdpTcp,
}

impl Protocols {
    /// TCP sockets are taken too.
    pub fn tcp(self) -> bool {
        self == Protocols::UdpTcp
    }
}

/// A tuning profile, as VMA's `VMA_SPEC`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// Busy-poll 50 µs in every read (`SO_BUSY_POLL`) unless a busy-poll
    /// time is given: the lowest round trip, a core per reading thread.
    Latency,
}

/// A rule for which sockets rxpath takes, by the address and port they
/// are bound to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// Whether a socket bound to `a` is one this rule names.
    pub fn matches(&self, a: SocketAddr) -> bool {
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

/// `kernel 198.18.0.1:5000-5100, rxpath *:53, kernel [2001:db8::1]:*`.
pub fn rule_list(s: &str) -> Result<Vec<Rule>, String> {
    s.split([',', ';'])
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(one_rule)
        .collect()
}

fn one_rule(x: &str) -> Result<Rule, String> {
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

/// Ranges as `53,5000-5100`.
pub fn show_ports(l: &[(u16, u16)]) -> String {
    let one = |&(a, b): &(u16, u16)| {
        if a == b {
            a.to_string()
        } else {
            format!("{a}-{b}")
        }
    };
    l.iter().map(one).collect::<Vec<_>>().join(",")
}

/// A value an option holds: read from its text (`""`: unset, which only
/// the types that can be unset accept) within its bounds, and written
/// back (`None`: unset).
pub trait Value: Sized {
    /// The value `s` gives; `range`: the bounds of a number.
    fn read(s: &str, range: Option<(u64, u64)>) -> Result<Self, String>;
    /// The value as text, `None` when unset.
    fn write(&self) -> Option<String>;
}

fn number(s: &str, range: Option<(u64, u64)>) -> Result<u64, String> {
    let n: u64 = s.trim().parse().map_err(|_| "not a number".to_string())?;
    match range {
        Some((lo, hi)) if !(lo..=hi).contains(&n) => Err(format!("out of range {lo}..={hi}")),
        _ => Ok(n),
    }
}

macro_rules! numbers {
    ($($t:ty),*) => {$(
        impl Value for $t {
            fn read(s: &str, range: Option<(u64, u64)>) -> Result<Self, String> {
                let n = number(s, range)?;
                <$t>::try_from(n).map_err(|_| format!("out of range 0..={}", <$t>::MAX))
            }
            fn write(&self) -> Option<String> {
                Some(self.to_string())
            }
        }
    )*};
}
numbers!(u16, u32, u64, usize);

impl Value for Mode {
    fn read(s: &str, _: Option<(u64, u64)>) -> Result<Self, String> {
        match s {
            "auto" => Ok(Mode::Auto),
            "xdp" => Ok(Mode::Xdp),
            "packet" => Ok(Mode::Packet),
            _ => Err("auto, xdp or packet".into()),
        }
    }
    fn write(&self) -> Option<String> {
        Some(format!("{self:?}").to_lowercase())
    }
}

impl Value for Protocols {
    fn read(s: &str, _: Option<(u64, u64)>) -> Result<Self, String> {
        match s {
            "udp" => Ok(Protocols::Udp),
            "udp,tcp" | "tcp,udp" => Ok(Protocols::UdpTcp),
            _ => Err("udp or udp,tcp".into()),
        }
    }
    fn write(&self) -> Option<String> {
        Some(match self {
            Protocols::Udp => "udp".into(),
            Protocols::UdpTcp => "udp,tcp".into(),
        })
    }
}

impl Value for Option<Profile> {
    fn read(s: &str, _: Option<(u64, u64)>) -> Result<Self, String> {
        match s {
            "" => Ok(None),
            "latency" => Ok(Some(Profile::Latency)),
            _ => Err("the profile is latency".into()),
        }
    }
    fn write(&self) -> Option<String> {
        self.map(|_| "latency".into())
    }
}

impl Value for Option<String> {
    fn read(s: &str, _: Option<(u64, u64)>) -> Result<Self, String> {
        Ok((!s.is_empty()).then(|| s.to_string()))
    }
    fn write(&self) -> Option<String> {
        self.clone()
    }
}

impl Value for Option<PathBuf> {
    fn read(s: &str, _: Option<(u64, u64)>) -> Result<Self, String> {
        Ok((!s.is_empty()).then(|| PathBuf::from(s)))
    }
    fn write(&self) -> Option<String> {
        self.as_ref().map(|p| p.display().to_string())
    }
}

impl Value for Option<SocketAddr> {
    fn read(s: &str, _: Option<(u64, u64)>) -> Result<Self, String> {
        if s.is_empty() {
            return Ok(None);
        }
        s.parse()
            .map(Some)
            .map_err(|_| "not an address:port".into())
    }
    fn write(&self) -> Option<String> {
        self.map(|a| a.to_string())
    }
}

impl Value for Option<Vec<(u16, u16)>> {
    fn read(s: &str, _: Option<(u64, u64)>) -> Result<Self, String> {
        if s.is_empty() {
            return Ok(None);
        }
        port_list(s).map(Some)
    }
    fn write(&self) -> Option<String> {
        self.as_deref().map(show_ports)
    }
}

impl Value for Vec<(u16, u16)> {
    fn read(s: &str, _: Option<(u64, u64)>) -> Result<Self, String> {
        port_list(s)
    }
    fn write(&self) -> Option<String> {
        (!self.is_empty()).then(|| show_ports(self))
    }
}

impl Value for Vec<Rule> {
    fn read(s: &str, _: Option<(u64, u64)>) -> Result<Self, String> {
        rule_list(s)
    }
    fn write(&self) -> Option<String> {
        let r: Vec<String> = self.iter().map(Rule::to_string).collect();
        (!r.is_empty()).then(|| r.join(", "))
    }
}
