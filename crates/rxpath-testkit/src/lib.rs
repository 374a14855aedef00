//! What a test needs from the machine, and what happens when it is missing.
//!
//! Some of rxpath's tests need root (network namespaces, veth pairs, XDP),
//! two cores (a reader and a worker on different CPUs) or a tool (sockperf,
//! tcpdump, setpriv). On a machine without them such a test cannot run its
//! check. It then does one of two things, never a silent "ok":
//!
//! - When the run requires it (`RXPATH_TESTS_REQUIRE=root,cores,tools`, or
//!   `all`; CI sets `all`), the test **fails**, naming what was missing.
//! - Otherwise it is skipped **out loud**: a `SKIPPED` line goes straight to
//!   the terminal (past the test harness's capture of passing tests' output),
//!   and the line is appended to `target/rxpath-skipped-tests.txt`, which
//!   `cargo test` leaves for a person to read.
//!
//! ```
//! use rxpath_testkit::{can_run, Need};
//! // A test that needs a tool no machine has: skipped out loud here
//! // (this doctest runs without RXPATH_TESTS_REQUIRE=tools).
//! # if std::env::var("RXPATH_TESTS_REQUIRE").is_ok() { return; }
//! if !can_run(&[Need::Tool("no-such-tool-rxpath")]) {
//!     return;
//! }
//! unreachable!();
//! ```

use std::io::Write;
use std::path::Path;

/// One thing a test needs from the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Effective user id 0 (namespaces, veth, XDP, iptables).
    Root,
    /// At least this many CPUs the test may run on.
    Cores(usize),
    /// An executable of this name on `PATH`.
    Tool(&'static str),
}

impl Need {
    /// The class `RXPATH_TESTS_REQUIRE` names it by.
    pub fn class(self) -> Class {
        match self {
            Need::Root => Class::Root,
            Need::Cores(_) => Class::Cores,
            Need::Tool(_) => Class::Tools,
        }
    }

    fn describe(self) -> String {
        match self {
            Need::Root => "root".into(),
            Need::Cores(n) => format!("{n} cores (this machine has {})", cores()),
            Need::Tool(t) => format!("the tool `{t}` on PATH"),
        }
    }
}

/// The classes of needs a run can require.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// `root`
    Root,
    /// `cores`
    Cores,
    /// `tools`
    Tools,
}

/// Which classes of needs a run requires: a need of a required class that
/// is missing fails the test instead of skipping it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Require {
    /// `root` (or `all`) in the list.
    pub root: bool,
    /// `cores` (or `all`).
    pub cores: bool,
    /// `tools` (or `all`).
    pub tools: bool,
}

impl Require {
    /// Parse a comma-separated list: `root`, `cores`, `tools`, `all`.
    /// An unknown word is an error (a typo must not turn a requirement off).
    pub fn parse(s: &str) -> Result<Require, String> {
        let mut r = Require::default();
        for w in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match w {
                "root" => r.root = true,
                "cores" => r.cores = true,
                "tools" => r.tools = true,
                "all" => {
                    r = Require {
                        root: true,
                        cores: true,
                        tools: true,
                    }
                }
                other => {
                    return Err(format!(
                        "RXPATH_TESTS_REQUIRE: unknown `{other}` (root, cores, tools or all)"
                    ))
                }
            }
        }
        Ok(r)
    }

    /// From the environment (`RXPATH_TESTS_REQUIRE`); nothing required when unset.
    pub fn from_env() -> Result<Require, String> {
        std::env::var("RXPATH_TESTS_REQUIRE").map_or(Ok(Require::default()), |s| Require::parse(&s))
    }

    /// Whether a missing need of this class fails the test.
    pub fn requires(self, c: Class) -> bool {
        match c {
            Class::Root => self.root,
            Class::Cores => self.cores,
            Class::Tools => self.tools,
        }
    }
}

/// What to do with a test, given what it needs and what is missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Everything it needs is here.
    Run,
    /// Something is missing and the run does not require it: skip, saying so.
    Skip(String),
    /// Something the run requires is missing: fail.
    Fail(String),
}

/// The verdict for `needs`, where `missing` says whether a need is missing.
pub fn verdict(needs: &[Need], require: Require, missing: impl Fn(Need) -> bool) -> Verdict {
    let gone: Vec<Need> = needs.iter().copied().filter(|&n| missing(n)).collect();
    if gone.is_empty() {
        return Verdict::Run;
    }
    let what = gone
        .iter()
        .map(|n| n.describe())
        .collect::<Vec<_>>()
        .join(", ");
    if gone.iter().any(|n| require.requires(n.class())) {
        Verdict::Fail(format!(
            "needs {what}, and RXPATH_TESTS_REQUIRE requires it"
        ))
    } else {
        Verdict::Skip(format!("needs {what}"))
    }
}

/// Whether this machine lacks `n`.
pub fn is_missing(n: Need) -> bool {
    match n {
        Need::Root => !rxpath_os::sched::is_root(),
        Need::Cores(k) => cores() < k,
        Need::Tool(t) => !on_path(t),
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            let f = d.join(tool);
            f.is_file() && is_executable(&f)
        })
    })
}

fn is_executable(f: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    f.metadata()
        .is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
}

/// Whether the calling test can run. `true`: go on. `false`: the test was
/// skipped and said so where a person sees it; return at once. Panics
/// (fails the test) when `RXPATH_TESTS_REQUIRE` requires a missing need,
/// or names something unknown.
pub fn can_run(needs: &[Need]) -> bool {
    let require = Require::from_env().unwrap_or_else(|e| panic!("{e}"));
    let test = std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("a test")
        .to_string();
    match verdict(needs, require, is_missing) {
        Verdict::Run => true,
        Verdict::Fail(why) => panic!("{test}: cannot run its check: {why}"),
        Verdict::Skip(why) => {
            let line =
                format!("SKIPPED {test}: {why} (RXPATH_TESTS_REQUIRE=all makes this a failure)\n");
            // Straight to the process's stderr: `eprintln!` would be
            // captured by the harness and hidden for a passing test.
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
            record(&line);
            false
        }
    }
}

/// Append a skip to `target/rxpath-skipped-tests.txt` (best effort).
fn record(line: &str) {
    let Some(target) = target_dir() else { return };
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(target.join("rxpath-skipped-tests.txt"))
    {
        let _ = f.write_all(line.as_bytes());
    }
}

/// The cargo target directory: `CARGO_TARGET_DIR`, else the `target`
/// folder that holds the running test binary (`target/debug/deps/...`).
fn target_dir() -> Option<std::path::PathBuf> {
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        return Some(d.into());
    }
    let exe = std::env::current_exe().ok()?;
    exe.ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "target"))
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_need_the_run_requires_fails_the_test() {
        let all = Require::parse("all").unwrap();
        let v = verdict(&[Need::Root, Need::Tool("sockperf")], all, |_| true);
        assert!(
            matches!(v, Verdict::Fail(ref w) if w.contains("root") && w.contains("sockperf")),
            "{v:?}"
        );
        // Only tools required: a missing tool fails, missing root alone skips.
        let tools = Require::parse("tools").unwrap();
        assert!(matches!(
            verdict(&[Need::Tool("x")], tools, |_| true),
            Verdict::Fail(_)
        ));
        assert!(matches!(
            verdict(&[Need::Root], tools, |_| true),
            Verdict::Skip(_)
        ));
    }

    #[test]
    fn nothing_missing_runs_and_nothing_required_skips() {
        let all = Require::parse("all").unwrap();
        assert_eq!(
            verdict(&[Need::Root, Need::Cores(2)], all, |_| false),
            Verdict::Run
        );
        let none = Require::parse("").unwrap();
        assert!(
            matches!(verdict(&[Need::Cores(2)], none, |_| true), Verdict::Skip(ref w) if w.contains("2 cores"))
        );
    }

    #[test]
    fn an_unknown_requirement_is_an_error_not_a_silent_no() {
        assert!(Require::parse("root,tool").is_err());
        assert_eq!(
            Require::parse(" root , cores ").unwrap(),
            Require {
                root: true,
                cores: true,
                tools: false
            }
        );
    }

    #[test]
    fn the_machine_is_read_for_real() {
        assert!(is_missing(Need::Tool("no-such-tool-rxpath-testkit")));
        assert!(!is_missing(Need::Tool("sh")));
        assert!(!is_missing(Need::Cores(1)));
        assert!(is_missing(Need::Cores(100_000)));
    }

    #[test]
    #[should_panic(expected = "cannot run its check")]
    fn can_run_panics_when_the_environment_requires_what_is_missing() {
        // Set for this process only; other tests of this file do not read it.
        std::env::set_var("RXPATH_TESTS_REQUIRE", "tools");
        can_run(&[Need::Tool("no-such-tool-rxpath-testkit")]);
    }
}
