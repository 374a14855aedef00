//! Command-line options, named as the kernel names the knobs.

use std::process::ExitCode;

mod values;

pub use crate::parse::{parse_duration, parse_faults, parse_mac, parse_prefix};
pub use values::*;

/// As [`exit_on_clap_error`], naming the config file's key when the
/// unknown argument came from it.
pub fn exit_on_clap_error_with(e: clap::Error, config_keys: &[String]) -> ExitCode {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() == ErrorKind::UnknownArgument {
        if let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) {
            let name = arg.trim_start_matches('-');
            if config_keys.iter().any(|k| k == name) {
                eprintln!("rxpath: error: --config: unknown key '{name}' (keys are the subcommand's long flags without dashes)");
                return ExitCode::from(2);
            }
        }
    }
    exit_on_clap_error(e)
}

/// clap prints multi-line errors with usage; ours are one line. Help and
/// version go out as clap renders them.
pub fn exit_on_clap_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::MissingRequiredArgument => {
            // clap lists them on lines of their own: name them here.
            use clap::error::{ContextKind, ContextValue};
            let missing: Vec<String> = match e.get(ContextKind::InvalidArg) {
                Some(ContextValue::Strings(v)) => v.clone(),
                Some(ContextValue::String(s)) => vec![s.clone()],
                _ => Vec::new(),
            };
            if missing.iter().any(|m| m.contains("<PROGRAM>")) {
                eprintln!(
                    "rxpath: error: a program to run is missing: rxpath exec --iface IF -- PROGRAM ARGS"
                );
            } else {
                eprintln!(
                    "rxpath: error: missing {} (see rxpath --help)",
                    missing.join(", ")
                );
            }
            ExitCode::from(2)
        }
        _ => {
            let text = e.render().to_string();
            let first = text
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("bad arguments");
            let first = first.trim_start_matches("error: ");
            eprintln!("rxpath: error: {first} (see rxpath --help)");
            ExitCode::from(2)
        }
    }
}
