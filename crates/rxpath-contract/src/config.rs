//! The preload's [`Config`]: read from the environment `rxpath exec` sets
//! (or a user sets by hand), and from the TOML file `RXPATH_CONFIG`
//! names, keyed as `exec`'s flags; written back as variables.

use crate::options::{Opt, OptError, OPTIONS};
use crate::values::Profile;
use std::collections::HashMap;
use std::net::SocketAddr;

pub use crate::options::Config;
pub use crate::values::{port_list, rule_list, show_ports, Mode, Protocols, Rule};

/// The variable that names a TOML file of settings.
pub const CONFIG_VAR: &str = "RXPATH_CONFIG";

/// The busy-poll time of the latency profile, µs.
pub const LATENCY_BUSY_POLL_US: u32 = 50;

/// The keys of `rxpath exec`'s own flags a file may hold besides the
/// options (the same file serves `exec --config`).
pub const EXEC_KEYS: [&str; 2] = ["preload", "json"];

impl Default for Config {
    fn default() -> Self {
        Config::read_all(&|_| None).expect("every default is a value its option takes")
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
        let file = match env(CONFIG_VAR) {
            Some(p) if !p.is_empty() => {
                let text = read_config_file(std::path::Path::new(&p))
                    .map_err(|e| format!("{CONFIG_VAR}={p:?}: {e}"))?;
                file_vars(&text).map_err(|e| format!("{CONFIG_VAR}={p:?}: {e}"))?
            }
            _ => HashMap::new(),
        };
        Self::from_vars(|k| {
            env(k)
                .filter(|s| !s.is_empty())
                .or_else(|| file.get(k).cloned())
        })
        .map_err(|e| e.to_string())
    }

    /// The configuration `var` gives (`var(name)` is the variable's value);
    /// a value an option does not take is an error naming it.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Config, OptError> {
        let mut c = Config::read_all(&var)?;
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

/// A TOML value as an option's text: a list (`rules`) joined by commas.
pub fn toml_text(k: &str, v: toml::Value) -> Result<String, String> {
    Ok(match v {
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
    })
}

/// The settings of a TOML file, as the variables they stand for: keys are
/// the options' ([`Opt::key`], `rxpath exec`'s flags); `exec`'s own keys
/// ([`EXEC_KEYS`]) are left to it. An unknown key, or a value its option
/// does not take, is an error.
pub fn file_vars(text: &str) -> Result<HashMap<&'static str, String>, String> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
    let mut out = HashMap::new();
    for (k, v) in table {
        if EXEC_KEYS.contains(&k.as_str()) {
            continue;
        }
        let Some(o) = Opt::by_key(&k) else {
            let known: Vec<&str> = OPTIONS.iter().map(|o| o.key).chain(EXEC_KEYS).collect();
            return Err(format!("unknown key {k:?} (keys: {})", known.join(", ")));
        };
        let s = toml_text(&k, v)?;
        o.check(&s)
            .map_err(|e| format!("{k} = {:?}: {}", e.text, e.why))?;
        out.insert(o.var, s);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::Profile;

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
        assert_eq!(c.mode, Mode::Auto);
        assert_eq!(c.busy_poll_budget, 64);
        assert_eq!(c.irq_suspend_timeout_ns, 20_000_000);
        assert_eq!(c.napi_threads, 1);
    }

    #[test]
    fn variables_round_trip() {
        let c = Config {
            iface: Some("veth0".into()),
            mode: Mode::Xdp,
            protocols: Protocols::UdpTcp,
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
        // Every variable written is an option's.
        assert!(v.iter().all(|(k, _)| Opt::by_var(k).is_some()));
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
            "iface = \"veth0\"\nbusy-poll = 20\nrules = [\"kernel *:53\"]\nprofile = \"latency\"\njson = true\n",
        )
        .unwrap();
        let env = vars(&[("RXPATH_BUSY_POLL", "30")]);
        let c = Config::from_vars(|k| env(k).or_else(|| f.get(k).cloned())).unwrap();
        assert_eq!(c.iface.as_deref(), Some("veth0"));
        assert_eq!(c.busy_poll_us, 30, "the variable wins");
        assert_eq!(c.rules.len(), 1);
        assert!(file_vars("bogus = 1").unwrap_err().contains("bogus"));
        assert!(file_vars("iface = ").is_err());
        let e = file_vars("napi-threads = 0").unwrap_err();
        assert_eq!(e, "napi-threads = \"0\": out of range 1..=64");
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
        assert_eq!(e.to_string(), "RXPATH_BUSY_POLL=\"fifty\": not a number");
        let e = Config::from_vars(vars(&[("RXPATH_MODE", "dpdk")])).unwrap_err();
        assert!(e.to_string().contains("RXPATH_MODE"), "{e}");
        let e = Config::from_vars(vars(&[("RXPATH_METRICS", "9900")])).unwrap_err();
        assert_eq!(e.as_flag(), "--metrics \"9900\": not an address:port");
    }
}
