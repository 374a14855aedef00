//! The manual's commands, run as they are written: every `rxpath ...` line
//! of a `sh` block in README.md and docs/guide/*.md that needs neither root
//! nor a running rxpath nor a bench's minutes, in the page's order, in a
//! scratch directory, with this build's binary for `rxpath` (and for
//! `cargo run --release --`). Each must exit 0, and a `run` must end with
//! the two lines the README shows (`accounting: ... ok`, `frames: ... ok`).
//! A command left out is left out by a rule below that says why; a page
//! that shows a command no rule covers gets it run.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Why a command is not run here, or `None` to run it.
fn left_out(cmd: &str) -> Option<&'static str> {
    let rules: [(&str, &str); 9] = [
        ("sudo ", "needs root: the root tests cover it"),
        (
            "--iface",
            "needs root and an interface: the root tests cover it",
        ),
        (" lab ", "needs root: the root tests cover it"),
        (
            "rxpath echo",
            "needs root (AF_XDP): tests/echo.rs covers it",
        ),
        (
            "rxpath quic",
            "needs root or a peer: tests/quic.rs covers it",
        ),
        (
            "rxpath bench",
            "minutes and peers: the bench tests in tests/cli.rs run them short",
        ),
        (
            "rxpath ctl",
            "talks to a running rxpath: tests/cli.rs covers ctl",
        ),
        ("rxpath gen", "sends on an interface: needs root"),
        ("--metrics", "serves until scraped: tests/cli.rs scrapes it"),
    ];
    rules
        .iter()
        .find(|(pat, _)| cmd.contains(pat))
        .map(|(_, why)| *why)
}

/// The `sh` blocks' command lines of a page: comments cut, continuation
/// lines joined, only the lines that start with the binary.
fn commands(page: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in page.lines() {
        let t = line.trim_end();
        if t.starts_with("```") {
            in_sh = !in_sh && t == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let code = match t.find(" #") {
            Some(i) => t[..i].trim_end(),
            None => t,
        };
        if let Some(head) = code.strip_suffix('\\') {
            pending.push_str(head.trim());
            pending.push(' ');
            continue;
        }
        pending.push_str(code.trim());
        let cmd = std::mem::take(&mut pending);
        for part in cmd.split(';').map(str::trim) {
            if part.starts_with("rxpath ")
                || part.starts_with("sudo rxpath ")
                || part.starts_with("cargo run --release -- ")
            {
                out.push(part.to_string());
            }
        }
    }
    out
}

fn pages() -> Vec<PathBuf> {
    let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut v = vec![top.join("README.md")];
    let mut guide: Vec<PathBuf> = std::fs::read_dir(top.join("docs/guide"))
        .expect("docs/guide")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    guide.sort();
    v.extend(guide);
    v
}

#[test]
fn the_commands_of_the_readme_and_the_guide_work_as_written() {
    let dir = std::env::temp_dir().join(format!("rxpath-guide-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (mut ran, mut skipped) = (0, Vec::new());
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for cmd in commands(&text) {
            if let Some(why) = left_out(&cmd) {
                skipped.push(format!("{cmd}: {why}"));
                continue;
            }
            let args: Vec<&str> = cmd
                .strip_prefix("cargo run --release -- ")
                .or_else(|| cmd.strip_prefix("rxpath "))
                .unwrap()
                .split_whitespace()
                .collect();
            let o = Command::new(env!("CARGO_BIN_EXE_rxpath"))
                .args(&args)
                .current_dir(&dir)
                .output()
                .unwrap();
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.status.success(),
                "{}: `{cmd}` failed ({}):\n{out}\n{}",
                page.display(),
                o.status,
                String::from_utf8_lossy(&o.stderr)
            );
            if args[0] == "run" && !args.contains(&"--json") {
                for want in ["accounting: received", "frames: "] {
                    let line = out.lines().find(|l| l.starts_with(want));
                    assert!(
                        line.is_some_and(|l| l.ends_with(": ok")),
                        "{}: `{cmd}`: no `{want} ...: ok` line:\n{out}",
                        page.display()
                    );
                }
            }
            ran += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(ran >= 10, "only {ran} commands found: the parser lost them");
    // Said where a person sees it (past the harness's capture): what was
    // not run here, and why.
    use std::io::Write;
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "guide: {ran} commands run; left out:");
    for s in &skipped {
        let _ = writeln!(e, "  {s}");
    }
}

#[test]
fn the_parser_joins_continuations_and_cuts_comments() {
    let page = "text\n```sh\nrxpath run --a \\\n    --b   # why\nrxpath ctl x; rxpath ctl y\nls\n```\n```rust\nrxpath run\n```\n";
    assert_eq!(
        commands(page),
        vec!["rxpath run --a --b", "rxpath ctl x", "rxpath ctl y"]
    );
}
