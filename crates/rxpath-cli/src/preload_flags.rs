//! `rxpath exec`'s flags for the preload's options: one per entry of
//! [`rxpath_contract::OPTIONS`] (`--KEY`, its help the option's doc, its
//! default and check the option's), so a flag, its variable and its TOML
//! key cannot drift apart. What they give is a [`Config`], which `exec`
//! hands the program as [`Config::to_vars`] says.

use clap::{Arg, ArgMatches, Args, Command, FromArgMatches};
use rxpath_contract::{Config, Kind, Opt, OPTIONS};

/// The options `exec` takes as flags: all but the report's path, which
/// `exec` sets itself.
fn flags() -> impl Iterator<Item = &'static Opt> {
    OPTIONS.iter().filter(|o| o.key != "report")
}

/// The preload's options as given on the command line (each flag's text,
/// checked by its option), defaults included.
#[derive(Debug, Clone, Default)]
pub struct PreloadFlags {
    given: Vec<(&'static Opt, String)>,
}

impl PreloadFlags {
    /// The configuration they give.
    pub fn config(&self) -> Config {
        Config::from_vars(|var| {
            self.given
                .iter()
                .find(|(o, _)| o.var == var)
                .map(|(_, v)| v.clone())
        })
        // Each value was checked by its flag's parser.
        .unwrap_or_default()
    }
}

/// A flag's value name: its unit's, or what it takes.
fn value_name(o: &Opt) -> &'static str {
    match (o.kind, o.unit) {
        (_, "µs") => "US",
        (_, "ns") => "NS",
        (Kind::Number(..), _) => "N",
        (Kind::Address, _) => "ADDR",
        (Kind::Ports, _) => "LIST",
        (Kind::Rules, _) => "RULES",
        (Kind::Choice(_), _) => "WORD",
        (Kind::Text, _) => "TEXT",
    }
}

fn arg(o: &'static Opt) -> Arg {
    let unit = match o.unit {
        "" => String::new(),
        u => format!(" ({u})"),
    };
    let help = format!(
        "{}{unit} [{}]",
        o.doc.split_whitespace().collect::<Vec<_>>().join(" "),
        o.var
    );
    let mut a = Arg::new(o.key)
        .long(o.key)
        .value_name(value_name(o))
        .help(help)
        .value_parser(move |s: &str| o.check(s).map(|()| s.to_string()).map_err(|e| e.why));
    if !o.default.is_empty() {
        a = a.default_value(o.default);
    }
    if let Kind::Choice(words) = o.kind {
        a = a.value_parser(clap::builder::PossibleValuesParser::new(
            words.iter().copied(),
        ));
    }
    // `exec` is for a program on an interface.
    a.required(o.key == "iface")
}

impl Args for PreloadFlags {
    fn augment_args(cmd: Command) -> Command {
        flags().fold(cmd, |c, o| c.arg(arg(o)))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl FromArgMatches for PreloadFlags {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let given = flags()
            .filter_map(|o| Some((o, m.get_one::<String>(o.key)?.clone())))
            .collect();
        Ok(PreloadFlags { given })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        flags: PreloadFlags,
    }

    fn parse(args: &[&str]) -> Result<Config, clap::Error> {
        use clap::Parser;
        let argv = std::iter::once("exec").chain(args.iter().copied());
        Cli::try_parse_from(argv).map(|c| c.flags.config())
    }

    #[test]
    fn each_option_but_the_report_is_a_flag_with_its_default() {
        let c = parse(&["--iface", "veth0"]).unwrap();
        assert_eq!(
            c,
            Config {
                iface: Some("veth0".into()),
                ..Config::default()
            }
        );
        let c = parse(&["--iface", "veth0", "--busy-poll", "50", "--mode", "packet"]).unwrap();
        assert_eq!(
            (c.busy_poll_us, c.mode),
            (50, rxpath_contract::Mode::Packet)
        );
        assert!(parse(&["--iface", "veth0", "--report", "/tmp/x"]).is_err());
    }

    #[test]
    fn a_value_its_option_refuses_is_a_usage_error_naming_the_flag() {
        let e = parse(&["--iface", "veth0", "--napi-threads", "0"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        let text = e.to_string();
        assert!(
            text.contains("--napi-threads") && text.contains("out of range 1..=64"),
            "{text}"
        );
        assert!(parse(&["--iface", "veth0", "--ports", "70000"]).is_err());
        assert!(parse(&["--iface", "veth0", "--mode", "dpdk"]).is_err());
        assert!(parse(&[]).is_err(), "--iface is required");
    }
}
