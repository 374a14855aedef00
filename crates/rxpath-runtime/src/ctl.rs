//! Live knobs over a control socket: `$XDG_RUNTIME_DIR/rxpath-PID.sock`
//! (else `/tmp/rxpath-PID.sock`), mode 0600, removed when the run ends. One
//! line per request, one answer: `show` lists every knob, `get NAME` its
//! value, `set NAME VALUE` changes it while packets flow (`ok`), anything
//! else is `error: ...` with nothing changed. `rxpath ctl` is the client;
//! `rxpath run`, `rxpath echo` and a program under `rxpath exec` serve one.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;

/// The directory control sockets live in.
pub fn dir() -> PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_dir())
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

/// The control socket of process `pid`.
pub fn path_of(pid: u32) -> PathBuf {
    dir().join(format!("rxpath-{pid}.sock"))
}

/// The knobs a control socket serves: `rxpath run`'s and `rxpath echo`'s.
pub trait Knobs: Send + Sync + 'static {
    /// Every knob, with its value, in the order `show` lists them.
    fn values(&self) -> Vec<(&'static str, u64)>;
    /// Set knob `name` (as listed) to `v`; an error (out of range) changes
    /// nothing.
    fn set(&self, name: &str, v: u64) -> Result<(), String>;
}

/// Answer one request line (`get NAME`, `set NAME VALUE`, `show`): the
/// reply ([`rxpath_contract::ctl`]), never a panic; a bad request changes
/// nothing. `net.core.` may be left out of a name.
pub fn answer(k: &dyn Knobs, line: &str) -> String {
    use rxpath_contract::ctl::{short, Reply, Request};
    let find = |n: &str| -> Option<(&'static str, u64)> {
        k.values().into_iter().find(|(m, _)| short(m) == short(n))
    };
    let reply = match Request::parse(line) {
        Err(r) => r,
        Ok(Request::Show) => Reply::Knobs(
            k.values()
                .into_iter()
                .map(|(n, v)| (n.to_string(), v))
                .collect(),
        ),
        Ok(Request::Get(n)) => match find(&n) {
            Some((_, v)) => Reply::Value(v),
            None => Reply::Error(format!("no knob named {}", short(&n))),
        },
        Ok(Request::Set(n, v)) => match find(&n) {
            None => Reply::Error(format!("no knob named {}", short(&n))),
            Some((name, _)) => match k.set(name, v) {
                Ok(()) => Reply::Done,
                Err(e) => Reply::Error(format!("{}: {e}", short(name))),
            },
        },
    };
    reply.text()
}

/// The control socket of this process; removed on drop.
#[derive(Debug)]
pub struct Control {
    path: PathBuf,
}

impl Control {
    /// Listen for requests that change `knobs`.
    pub fn start(knobs: impl Knobs) -> std::io::Result<Control> {
        let path = path_of(std::process::id());
        let _ = std::fs::remove_file(&path);
        let l = UnixListener::bind(&path).map_err(|e| {
            std::io::Error::new(e.kind(), format!("control socket {}: {e}", path.display()))
        })?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        std::thread::Builder::new()
            .name("rxpath-ctl".into())
            .spawn(move || {
                for s in l.incoming().flatten() {
                    let _ = serve(s, &knobs);
                }
            })?;
        Ok(Control { path })
    }

    /// Where it is.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn serve(s: UnixStream, k: &dyn Knobs) -> std::io::Result<()> {
    s.set_read_timeout(Some(std::time::Duration::from_secs(2)))?;
    let mut r = BufReader::new(s.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut w = s;
    writeln!(w, "{}", answer(k, line.trim()))
}

/// The knobs of a whole host, for a program whose sockets it serves (a
/// program under `rxpath exec`): `net.core.busy_read` (the busy-poll time
/// of sockets opened from now on), `prefer_busy_poll` (every NAPI),
/// `gro_flush_timeout` and `napi_defer_hard_irqs` (as the device's sysfs
/// files).
#[derive(Debug)]
pub struct HostKnobs {
    sockets: Arc<rxpath_core::sock::Sockets>,
    napis: Vec<Arc<rxpath_core::sock::SharedNapi>>,
    gro_flush_timeout: rxpath_core::gro::GroKnob,
    defer_hard_irqs: rxpath_core::gro::GroKnob,
}

impl HostKnobs {
    /// The knobs of `host`.
    pub fn of(host: &crate::host::Host) -> HostKnobs {
        HostKnobs {
            sockets: host.sockets().clone(),
            napis: host.napis().to_vec(),
            gro_flush_timeout: host.irq_knobs().0.clone(),
            defer_hard_irqs: host.irq_knobs().1.clone(),
        }
    }
}

impl Knobs for HostKnobs {
    fn values(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("net.core.busy_read", self.sockets.busy_read() as u64),
            (
                "prefer_busy_poll",
                self.napis.first().map_or(0, |n| n.prefer_busy_poll()),
            ),
            ("gro_flush_timeout", self.gro_flush_timeout.get()),
            ("napi_defer_hard_irqs", self.defer_hard_irqs.get()),
        ]
    }

    fn set(&self, name: &str, v: u64) -> Result<(), String> {
        match name {
            "net.core.busy_read" if v <= 1_000_000 => self.sockets.set_busy_read(v as u32),
            "prefer_busy_poll" if v <= 1_000_000_000 => {
                for n in &self.napis {
                    n.set_prefer_busy_poll(v);
                }
            }
            "gro_flush_timeout" if v <= 1_000_000_000 => self.gro_flush_timeout.set(v),
            "napi_defer_hard_irqs" if v <= i32::MAX as u64 => self.defer_hard_irqs.set(v),
            _ => return Err(format!("{v} is out of range")),
        }
        Ok(())
    }
}
