//! `rxpath`: the command line.

mod bench;
mod bench_gro;
mod opts;
mod report;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match opts::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return opts::exit_on_clap_error(e),
    };
    let result = match cli.cmd {
        opts::Cmd::Run(a) => report::run(a),
        opts::Cmd::Bench(b) => bench::bench(b),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rxpath: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
