//! `rxpath`: the command line.

fn main() -> std::process::ExitCode {
    rxpath_cli::main()
}
