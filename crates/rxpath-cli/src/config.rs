//! `--config FILE`: a TOML file with the same names as the flags, so that a
//! deployment (of `rxpath echo`, say) is one file. Keys are the long flags
//! without their dashes (`busy-poll = 50`, `steer = "rfs"`, `gro = "on"`,
//! `json = true`); flags on the command line override the file; an unknown
//! key is an error that names it.
//!
//! The file is turned into flags placed right after the subcommand, and
//! clap reads them as it reads the command line (a later flag overrides an
//! earlier one), so every check and every error is the command line's.

use anyhow::{bail, Context, Result};
use std::ffi::OsString;

/// Where `--config FILE` (or `--config=FILE`) is, if given.
fn find(args: &[OsString]) -> Option<(usize, usize, OsString)> {
    for (i, a) in args.iter().enumerate() {
        let s = a.to_string_lossy();
        if s == "--config" {
            return args.get(i + 1).map(|f| (i, 2, f.clone()));
        }
        if let Some(f) = s.strip_prefix("--config=") {
            return Some((i, 1, OsString::from(f)));
        }
    }
    None
}

/// One value as flag arguments: `--k v`, `--k` for true, nothing for
/// false, `--k a,b` for an array.
fn flag(key: &str, v: &toml::Value) -> Result<Vec<OsString>> {
    let f = OsString::from(format!("--{key}"));
    Ok(match v {
        toml::Value::Boolean(true) => vec![f],
        toml::Value::Boolean(false) => vec![],
        toml::Value::String(s) => vec![f, s.into()],
        toml::Value::Integer(n) => vec![f, n.to_string().into()],
        toml::Value::Float(x) => vec![f, x.to_string().into()],
        toml::Value::Array(a) => {
            let parts: Vec<String> = a
                .iter()
                .map(|x| match x {
                    toml::Value::String(s) => Ok(s.clone()),
                    toml::Value::Integer(n) => Ok(n.to_string()),
                    _ => bail!("key '{key}': an array of strings or integers"),
                })
                .collect::<Result<_>>()?;
            vec![f, parts.join(",").into()]
        }
        _ => bail!("key '{key}': a string, number, boolean or array"),
    })
}

/// The command line with the file's keys spliced in after the subcommand;
/// also the keys, to name an unknown one.
pub fn expand(args: Vec<OsString>) -> Result<(Vec<OsString>, Vec<String>)> {
    expand_with(args, |path| {
        rxpath_contract::config::read_config_file(path.as_ref())
            .map_err(|e| anyhow::anyhow!("--config {}: {e}", path.to_string_lossy()))
    })
}

/// [`expand`] with the file read by `read` (the fuzz target gives the
/// text itself).
pub fn expand_with(
    args: Vec<OsString>,
    read: impl FnOnce(&std::ffi::OsStr) -> Result<String>,
) -> Result<(Vec<OsString>, Vec<String>)> {
    let Some((at, n, path)) = find(&args) else {
        return Ok((args, Vec::new()));
    };
    let text = read(&path)?;
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        // One line: where, and what.
        let at = e.to_string().lines().next().unwrap_or("").to_string();
        let what = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
        anyhow::anyhow!("--config {}: {at}: {what}", path.to_string_lossy())
    })?;
    let mut extra = Vec::new();
    let mut keys = Vec::new();
    for (k, v) in &table {
        if k == "config" {
            bail!(
                "--config {}: a config file cannot name another",
                path.to_string_lossy()
            );
        }
        extra.extend(flag(k, v).with_context(|| format!("--config {}", path.to_string_lossy()))?);
        keys.push(k.clone());
    }
    let mut out: Vec<OsString> = args[..at].to_vec();
    let rest: Vec<OsString> = args[at + n..].to_vec();
    // After the program and its subcommand(s): the first arguments that are
    // not flags.
    let mut i = 0;
    while i < out.len() && !out[i].to_string_lossy().starts_with('-') {
        i += 1;
    }
    let tail = out.split_off(i);
    out.extend(extra);
    out.extend(tail);
    out.extend(rest);
    Ok((out, keys))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_become_flags_before_the_command_lines() {
        let dir = std::env::temp_dir().join(format!("rxpath-cfg-{}", std::process::id()));
        std::fs::write(&dir, "duration = \"2s\"\nqueues = 1\njson = true\nno-pin = false\nlocal-route = [\"198.19.0.0/16\"]\n").unwrap();
        let args: Vec<OsString> = [
            "rxpath",
            "run",
            "--config",
            dir.to_str().unwrap(),
            "--queues",
            "2",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let (out, keys) = expand(args).unwrap();
        let out: Vec<String> = out
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            out,
            [
                "rxpath",
                "run",
                "--duration",
                "2s",
                "--json",
                "--local-route",
                "198.19.0.0/16",
                "--queues",
                "1",
                "--queues",
                "2"
            ]
        );
        assert_eq!(keys.len(), 5);
        let _ = std::fs::remove_file(dir);
    }
}
