//! `rxpath`: the command line.

fn main() -> std::process::ExitCode {
    rxpath::main()
}
