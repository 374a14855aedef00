//! The command line, the config file and the control socket: arbitrary
//! arguments after a real subcommand, an arbitrary `--config` file, and
//! arbitrary control requests. Never a panic: a clear error or a
//! configuration; `run`'s arguments that parse are turned into a run
//! configuration (its checks) without running it; a control request that
//! is refused changes no knob.

#![no_main]

use clap::Parser;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use rxpath::{Cli, Cmd};
use rxpath_runtime::run::{RunConfig, RunKnobs};
use std::ffi::OsString;
use std::sync::atomic::Ordering;

#[derive(Arbitrary, Debug)]
struct Input {
    sub: u8,
    args: Vec<String>,
    config: Option<String>,
    ctl: Vec<String>,
}

const SUBS: [&[&str]; 7] = [
    &["run"],
    &["echo"],
    &["gen"],
    &["soak"],
    &["filter", "show"],
    &["bench", "rxdrop"],
    &["ctl"],
];

fn knobs(k: &RunKnobs) -> (u64, usize, u64) {
    (
        k.gro_flush_timeout.get(),
        k.netdev_budget.load(Ordering::Relaxed),
        k.netdev_budget_usecs.load(Ordering::Relaxed),
    )
}

fuzz_target!(|input: Input| {
    let mut argv: Vec<OsString> = vec!["rxpath".into()];
    argv.extend(
        SUBS[input.sub as usize % SUBS.len()]
            .iter()
            .map(OsString::from),
    );
    argv.extend(input.args.iter().take(16).map(OsString::from));
    if input.config.is_some() {
        argv.push("--config".into());
        argv.push("fuzz.toml".into());
    }
    let text = input.config.clone().unwrap_or_default();
    if let Ok((args, _keys)) = rxpath_cli::config::expand_with(argv, |_| Ok(text)) {
        if let Ok(cli) = Cli::try_parse_from(args) {
            if let Cmd::Run(a) = cli.cmd {
                // The run's own checks; an interface name is looked up in
                // sysfs only.
                let _ = a.config();
            }
        }
    }
    let set = rxpath_cli::ctl::RunKnobSet(RunKnobs::new(&RunConfig::default()), None);
    let k = &set.0;
    for line in input.ctl.iter().take(32) {
        let before = knobs(k);
        let reply = rxpath_cli::ctl::answer(&set, line);
        if reply.starts_with("error") {
            assert_eq!(
                before,
                knobs(&k),
                "a refused request changed a knob: {line:?}"
            );
        }
        assert!(!reply.is_empty());
    }
});
