//! Every setting of the preload, each defined once: its TOML key (which
//! is also `rxpath exec`'s flag), its environment variable, its default
//! as written, what it takes (a range, a list of words), its unit and
//! its doc, as Onload's `opts_citp_def.h` defines its `EF_*` options.
//! [`Config`] has a field for each, read and written through the table,
//! so a name changed here changes on both sides of `exec` at once.

use crate::values::{Mode, Profile, Protocols, Rule, Value};
use std::net::SocketAddr;
use std::path::PathBuf;

/// What an option takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One of these words.
    Choice(&'static [&'static str]),
    /// A whole number from the first to the second, inclusive.
    Number(u64, u64),
    /// Any text (an interface's name, a path).
    Text,
    /// `host:port` (`[v6]:port`).
    Address,
    /// Port ranges: `53,5000-5100`.
    Ports,
    /// Rules by address and port, first match wins: `kernel
    /// 198.18.0.1:5000-5100, rxpath *:53`.
    Rules,
}

impl Kind {
    fn range(self) -> Option<(u64, u64)> {
        match self {
            Kind::Number(lo, hi) => Some((lo, hi)),
            _ => None,
        }
    }

    /// What it takes, in a few words (the guide's table, `--help`).
    pub fn describe(self) -> String {
        match self {
            Kind::Choice(w) => w.join(" \\| "),
            Kind::Number(lo, hi) => format!("{lo} to {hi}"),
            Kind::Text => "text".into(),
            Kind::Address => "address:port".into(),
            Kind::Ports => "ports, e.g. `53,5000-5100`".into(),
            Kind::Rules => "rules, e.g. `kernel 198.18.0.1:5000-5100, rxpath *:53`".into(),
        }
    }
}

/// One setting of the preload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opt {
    /// Its key in a TOML file, and `rxpath exec`'s flag (`--KEY`).
    pub key: &'static str,
    /// Its environment variable.
    pub var: &'static str,
    /// Its value when unset, as written (`""`: none).
    pub default: &'static str,
    /// What it takes.
    pub kind: Kind,
    /// Its unit (`µs`, `ns`, `packets`), or `""`.
    pub unit: &'static str,
    /// What it does.
    pub doc: &'static str,
}

impl Opt {
    /// The option whose variable is `var`.
    pub fn by_var(var: &str) -> Option<&'static Opt> {
        OPTIONS.iter().find(|o| o.var == var)
    }

    /// The option whose key (and flag) is `key`.
    pub fn by_key(key: &str) -> Option<&'static Opt> {
        OPTIONS.iter().find(|o| o.key == key)
    }

    /// Check `text` as this option's value (what a flag's parser and a
    /// file's reader ask before anything starts).
    pub fn check(&'static self, text: &str) -> Result<(), OptError> {
        Config::read_one(self, text)
    }

    /// The doc's first sentence (a flag's one-line help).
    pub fn summary(&self) -> &'static str {
        self.doc.split_once(". ").map_or(self.doc, |(s, _)| s)
    }
}

/// A value an option does not take: which option, what was given, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptError {
    /// The option.
    pub opt: &'static Opt,
    /// The text given.
    pub text: String,
    /// Why it is refused.
    pub why: String,
}

impl OptError {
    /// Said as the flag that gave it: `--busy-poll "x": not a number`.
    pub fn as_flag(&self) -> String {
        format!("--{} {:?}: {}", self.opt.key, self.text, self.why)
    }
}

impl std::fmt::Display for OptError {
    /// Said as the variable that gave it: `RXPATH_BUSY_POLL="x": not a
    /// number`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={:?}: {}", self.opt.var, self.text, self.why)
    }
}

impl std::error::Error for OptError {}

/// The table, and the [`Config`] with a field for each entry.
macro_rules! options {
    ($(
        $(#[doc = $doc:literal])+
        $field:ident: $ty:ty = $default:literal,
            key $key:literal, var $var:literal, $kind:expr, unit $unit:literal;
    )*) => {
        /// Every option, in the order the guide lists them.
        pub const OPTIONS: &[Opt] = &[$(
            Opt {
                key: $key,
                var: $var,
                default: $default,
                kind: $kind,
                unit: $unit,
                doc: concat!($($doc),+),
            },
        )*];

        /// The preload's settings: a field for each of [`OPTIONS`].
        #[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        pub struct Config {
            $( $(#[doc = $doc])+ pub $field: $ty, )*
        }

        impl Config {
            /// Every option's value as `var` (a variable's name to its
            /// text) gives it, its default where it gives none.
            pub(crate) fn read_all(var: &dyn Fn(&str) -> Option<String>) -> Result<Config, OptError> {
                Ok(Config {$(
                    $field: read::<$ty>(Opt::by_var($var).expect("in the table"), var)?,
                )*})
            }

            /// Check `text` as option `o`'s value.
            fn read_one(o: &'static Opt, text: &str) -> Result<(), OptError> {
                $(
                    if o.var == $var {
                        return read::<$ty>(o, &|_| Some(text.to_string())).map(drop);
                    }
                )*
                Ok(())
            }

            /// Each option that is set, as its variable and value's text:
            /// what `rxpath exec` sets in the program's environment.
            pub fn to_vars(&self) -> Vec<(&'static str, String)> {
                let mut v = Vec::new();
                $(
                    if let Some(s) = Value::write(&self.$field) {
                        v.push(($var, s));
                    }
                )*
                v
            }
        }
    };
}

/// Option `o`'s value as `var` gives its variable (its default if unset
/// or empty).
fn read<T: Value>(o: &'static Opt, var: &dyn Fn(&str) -> Option<String>) -> Result<T, OptError> {
    let given = var(o.var).filter(|s| !s.is_empty());
    let text = given.as_deref().unwrap_or(o.default);
    T::read(text, o.kind.range()).map_err(|why| OptError {
        opt: o,
        text: text.to_string(),
        why,
    })
}

options! {
    /// The interface whose UDP sockets rxpath takes. Unset: every socket
    /// stays the kernel's.
    iface: Option<String> = "", key "iface", var "RXPATH_IFACE", Kind::Text, unit "";
    /// The protocols whose sockets rxpath takes: `udp,tcp` takes TCP
    /// listeners and the connections they accept too (AF_XDP only; not
    /// finished: listeners in pre-forked workers go to the kernel at the
    /// fork, see the README).
    protocols: Protocols = "udp", key "protocols", var "RXPATH_PROTOCOLS",
        Kind::Choice(&["udp", "udp,tcp"]), unit "";
    /// How the interface is opened: AF_XDP, AF_PACKET, or AF_XDP with
    /// AF_PACKET when AF_XDP cannot be set up.
    mode: Mode = "auto", key "mode", var "RXPATH_MODE",
        Kind::Choice(&["auto", "xdp", "packet"]), unit "";
    /// `SO_BUSY_POLL` for every socket: busy-poll this long in every read
    /// before sleeping (`net.core.busy_read`). 0: readers sleep.
    busy_poll_us: u32 = "0", key "busy-poll", var "RXPATH_BUSY_POLL",
        Kind::Number(0, i32::MAX as u64), unit "µs";
    // 64, not the kernel's 8: at 8 a waiting knotd (10 datagrams a
    // `recvmmsg`) polled its queue once per batch; at 64 one poll fills
    // several batches and the program catches up faster after a pause
    // (`bench dns`: fewer queries lost at the RX ring at the same offered
    // rate). The kernel's `EPIOCSPARAMS` takes the same budget.
    /// `SO_BUSY_POLL_BUDGET` for every socket that sets none of its own:
    /// the packets one poll of a reading or waiting thread takes from its
    /// queue. 0: the kernel's 8.
    busy_poll_budget: u16 = "64", key "busy-poll-budget", var "RXPATH_BUSY_POLL_BUDGET",
        Kind::Number(0, u16::MAX as u64), unit "packets";
    /// Prefer busy polling: keep the queue's interrupt masked this long
    /// after a busy poll.
    prefer_busy_poll_ns: u64 = "0", key "prefer-busy-poll", var "RXPATH_PREFER_BUSY_POLL",
        Kind::Number(0, 10_000_000_000), unit "ns";
    // 20 ms: long against a request's turnaround and against the pauses
    // a program's thread takes when the scheduler puts something else on
    // its core (the NAPI thread checks back once per period while a
    // program keeps reading). While the program is away its datagrams
    // wait in the device's RX ring, thousands deep, instead of a socket
    // buffer that holds a few hundred: at 1 ms a pause of a few ms moved
    // a burst into knotd's socket and overflowed it (`bench dns`), at
    // 20 ms it stayed in the ring and was read when the program came back.
    /// IRQ suspension: a thread that waits on a socket (without busy
    /// polling) polls its queue once and keeps the interrupt suspended up
    /// to this long; asleep, it waits on the device itself. An epoll wait
    /// that hands over events keeps it suspended this long from then. 0:
    /// off.
    irq_suspend_timeout_ns: u64 = "20000000", key "irq-suspend-timeout",
        var "RXPATH_IRQ_SUSPEND_TIMEOUT", Kind::Number(0, 10_000_000_000), unit "ns";
    /// NAPI threads.
    napi_threads: usize = "1", key "napi-threads", var "RXPATH_NAPI_THREADS",
        Kind::Number(1, 64), unit "";
    /// `gro_flush_timeout`: how long GRO may hold a flow's packets.
    gro_flush_timeout_ns: u64 = "0", key "gro-flush-timeout", var "RXPATH_GRO_FLUSH_TIMEOUT",
        Kind::Number(0, 1_000_000_000), unit "ns";
    /// `napi_defer_hard_irqs`: polls that find nothing before the
    /// interrupt is unmasked.
    defer_hard_irqs: u32 = "0", key "defer-hard-irqs", var "RXPATH_NAPI_DEFER_HARD_IRQS",
        Kind::Number(0, i32::MAX as u64), unit "";
    /// Write the report (JSON) here at exit (a process that a program
    /// started writes it beside, as PATH.PID). `rxpath exec` sets it.
    report: Option<PathBuf> = "", key "report", var "RXPATH_REPORT", Kind::Text, unit "";
    /// Serve Prometheus metrics on this address while the host runs.
    metrics: Option<SocketAddr> = "", key "metrics", var "RXPATH_METRICS",
        Kind::Address, unit "";
    /// Take only UDP sockets bound to these ports; the rest stay the
    /// kernel's. Unset: every port.
    ports: Option<Vec<(u16, u16)>> = "", key "ports", var "RXPATH_PORTS",
        Kind::Ports, unit "";
    /// Leave sockets on these ports to the kernel, whatever else says.
    kernel_ports: Vec<(u16, u16)> = "", key "kernel-ports", var "RXPATH_KERNEL_PORTS",
        Kind::Ports, unit "";
    /// Rules by the address and port a socket is bound to, first match
    /// wins. The order: `kernel-ports` first, then the first rule that
    /// matches, then `ports`.
    rules: Vec<Rule> = "", key "rules", var "RXPATH_RULES", Kind::Rules, unit "";
    /// A tuning profile: `latency` busy-polls 50 µs in every read unless
    /// `busy-poll` says otherwise.
    profile: Option<Profile> = "", key "profile", var "RXPATH_PROFILE",
        Kind::Choice(&["latency"]), unit "";
}

/// The guide's table of options, from [`OPTIONS`] (a test checks the
/// guide has it as it is).
pub fn markdown_table() -> String {
    let mut t = String::from(
        "| variable | `exec` flag, TOML key | meaning | takes | default |\n|---|---|---|---|---|\n",
    );
    for o in OPTIONS {
        let unit = if o.unit.is_empty() {
            String::new()
        } else {
            format!(", {}", o.unit)
        };
        let default = if o.default.is_empty() {
            "none".to_string()
        } else {
            format!("`{}`", o.default)
        };
        let doc = o.doc.split_whitespace().collect::<Vec<_>>().join(" ");
        t.push_str(&format!(
            "| `{}` | `--{}`, `{}` | {doc} | {}{unit} | {default} |\n",
            o.var,
            o.key,
            o.key,
            o.kind.describe()
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_name_is_one_options_alone() {
        for (i, a) in OPTIONS.iter().enumerate() {
            for b in &OPTIONS[i + 1..] {
                assert_ne!(a.key, b.key);
                assert_ne!(a.var, b.var);
            }
            assert!(a.var.starts_with("RXPATH_"), "{}", a.var);
            assert_eq!(Opt::by_key(a.key), Some(a));
        }
    }

    #[test]
    fn every_default_is_a_value_its_option_takes() {
        for o in OPTIONS {
            o.check(o.default).unwrap_or_else(|e| panic!("{e}"));
        }
    }

    #[test]
    fn a_number_out_of_its_range_is_refused_by_name() {
        let o = Opt::by_key("napi-threads").unwrap();
        assert!(o.check("64").is_ok());
        let e = o.check("65").unwrap_err();
        assert_eq!(e.as_flag(), "--napi-threads \"65\": out of range 1..=64");
        assert_eq!(
            e.to_string(),
            "RXPATH_NAPI_THREADS=\"65\": out of range 1..=64"
        );
        let e = Opt::by_key("busy-poll-budget").unwrap().check("70000");
        assert!(e.is_err());
        let e = Opt::by_key("mode").unwrap().check("dpdk").unwrap_err();
        assert_eq!(e.why, "auto, xdp or packet");
    }

    /// The guide's table of options is the one [`markdown_table`] makes
    /// now (rewrite it from the failure's text when an option changes).
    #[test]
    fn the_guide_lists_every_option_as_the_table_defines_it() {
        let guide = include_str!("../../../docs/guide/preload.md");
        let table = markdown_table();
        assert!(
            guide.contains(&table),
            "docs/guide/preload.md's table of options is not this:\n{table}"
        );
    }
}
