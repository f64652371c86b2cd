//! The command line: cgmon's flags under cgmon's names and defaults, plus ours.
//!
//! cgmon used Go's `flag` package, where `-run-interval 1s` and `--run-interval 1s` mean the
//! same and a boolean takes a value only as `-flag=false`. clap parses GNU-style options, so
//! [`normalize`] rewrites a single-dash long flag into its double-dash form first; then
//! cgmon's documented commands parse unchanged. Every option can also come from a
//! `CGMON_*` environment variable (for the systemd unit), named after the flag.

use clap::FromArgMatches;

use crate::logging::LogSettings;

/// Rewrites `-long-flag[=v]` into `--long-flag[=v]` for every long flag the command knows,
/// so Go-style command lines parse, and joins a value-taking flag with its value
/// (`--flag=value`) so that a value starting with '-' (the `-5s` of a rejected negative
/// duration) is read as the value. Short flags (`-h`, `-V`) and everything after `--` pass
/// through. Flags written after the filter words move in front of them.
pub fn normalize(args: impl IntoIterator<Item = String>) -> Vec<String> {
    normalize_for(&command(), args)
}

/// [`normalize`] for any command whose positional words are a trailing filter expression
/// (the program's and `diagnose`'s).
///
/// clap's `trailing_var_arg` reads every word after the first filter word as filter, so
/// `cgmon-rs dport 443 -run-interval 100ms` would fail on a filter that ends in a flag. `ss`
/// takes its options anywhere (getopt permutes them), and so do we: once the filter has
/// begun, a word that starts with `-` and a letter is a flag, which no filter word does (a
/// port-range end such as `-90` starts with a digit). After `--` every word is filter.
pub(crate) fn normalize_for(
    cmd: &clap::Command,
    args: impl IntoIterator<Item = String>,
) -> Vec<String> {
    fn names(a: &clap::Arg) -> Vec<&str> {
        a.get_long_and_visible_aliases().unwrap_or_default()
    }
    let longs: Vec<&str> = cmd.get_arguments().flat_map(names).collect();
    let takes_value = |name: &str| {
        cmd.get_arguments()
            .find(|a| names(a).contains(&name))
            .is_some_and(|a| a.get_action().takes_values() && !a.is_require_equals_set())
    };
    // Flags (with their values) in `out`, filter words in `filter`, joined at the end.
    let mut out = Vec::new();
    let mut filter = Vec::new();
    let mut rest = false;
    let mut value_next = false;
    for a in args {
        if value_next {
            // Joined as `--flag=value`, so a value that starts with '-' stays a value.
            value_next = false;
            let flag = out.pop().unwrap_or_default();
            out.push(format!("{flag}={a}"));
            continue;
        }
        if rest {
            filter.push(a);
            continue;
        }
        if a == "--" {
            // Kept only in front of the filter, where clap needs it to read a first word
            // that starts with '-' as filter.
            rest = true;
            if filter.is_empty() {
                filter.push(a);
            }
            continue;
        }
        let name = a.trim_start_matches('-');
        let name_only = name.split_once('=').map_or(name, |(n, _)| n);
        let dashes = a.len() - name.len();
        let flag_like =
            (dashes == 1 || dashes == 2) && name.starts_with(|c: char| c.is_ascii_alphabetic());
        if !filter.is_empty() && !flag_like {
            filter.push(a);
        } else if (dashes == 1 || dashes == 2) && longs.contains(&name_only) {
            value_next = !name.contains('=') && takes_value(name_only);
            out.push(format!("--{name}"));
        } else if dashes == 1 && name.len() > 1 && (flag_like || filter.is_empty()) {
            // Go has no clusters of short flags, so an unknown `-word` is an unknown long
            // flag (`-version` becomes `--version`); clap then names it whole.
            out.push(format!("--{name}"));
        } else if flag_like {
            out.push(a);
        } else {
            filter.push(a);
        }
    }
    if value_next {
        // The last word is a flag that wants a value. In front of the filter it would take
        // the first filter word; alone at the end, clap says that its value is missing.
        return out;
    }
    out.append(&mut filter);
    out
}

/// Everything the program needs, validated and resolved: the raw options stop at
/// [`parse`].
#[derive(Debug, Clone)]
pub struct Config {
    /// Every stage's settings.
    pub settings: Settings,
    /// Logging.
    pub log: LogSettings,
    /// `-run-serial`: one runtime thread.
    pub serial: bool,
    /// Which options took their value from a `CGMON_*` variable.
    pub env: EnvOrigins,
}

/// The options whose value came from a `CGMON_*` variable, and those variables, so that an
/// error found after parsing (a filter that does not parse, a -writer-dir that cannot be
/// opened) names the variable as clap's own errors do: a service's unit file holds
/// `CGMON_WRITER_DIR=`, not `-writer-dir`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvOrigins(Vec<(String, String)>);

impl EnvOrigins {
    fn of(m: &clap::ArgMatches, cmd: &clap::Command) -> Self {
        let from_env = |a: &&clap::Arg| {
            m.value_source(a.get_id().as_str()) == Some(clap::parser::ValueSource::EnvVariable)
        };
        Self(
            cmd.get_arguments()
                .filter(from_env)
                .filter_map(|a| Some((a.get_id().to_string(), a.get_env()?.to_str()?.to_string())))
                .collect(),
        )
    }

    /// ` (from CGMON_X)`, or ` (from CGMON_X, CGMON_Y)`, for those of the options `ids` (as
    /// named in [`Cli`]) whose value came from the environment; empty when none did.
    pub fn suffix(&self, ids: &[&str]) -> String {
        let vars: Vec<&str> = ids
            .iter()
            .filter_map(|id| self.0.iter().find(|(i, _)| i == id).map(|(_, v)| v.as_str()))
            .collect();
        if vars.is_empty() { String::new() } else { format!(" (from {})", vars.join(", ")) }
    }
}

/// A usage error: one line naming the flag and the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// What parsing asks the program to do.
#[derive(Debug)]
pub enum Parsed {
    /// Run with this configuration.
    Run(Box<Config>),
    /// Print this (help or version) to stdout and exit 0.
    Print(String),
}

/// Parses the arguments (without the program name), with `CGMON_*` variables from the
/// environment.
///
/// # Errors
/// The first bad flag or value, as one line.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Parsed, UsageError> {
    parse_unclipped(args).map_err(|e| UsageError(crate::units::clip_line(&e.0)))
}

fn parse_unclipped(args: impl IntoIterator<Item = String>) -> Result<Parsed, UsageError> {
    let argv: Vec<String> =
        std::iter::once("cgmon-rs".to_string()).chain(normalize(args)).collect();
    let m = match command().try_get_matches_from(&argv) {
        Ok(m) => m,
        Err(e) => {
            use clap::error::ErrorKind;
            return match e.kind() {
                ErrorKind::DisplayHelp => Ok(Parsed::Print(e.to_string())),
                // cgmon's line (`<name> version 0.2`), so a script that reads the version
                // after the word "version" reads ours too; clap's would be `cgmon-rs 0.1.0`.
                ErrorKind::DisplayVersion => {
                    Ok(Parsed::Print(format!("cgmon-rs version {}\n", env!("CARGO_PKG_VERSION"))))
                }
                _ => {
                    Err(UsageError(clip_value(&e, one_line(&e.to_string())) + &from_env(&e, &argv)))
                }
            };
        }
    };
    Ok(Parsed::Run(Box::new(config_of(&m, |_| {})?)))
}

/// The options `m` holds, as `edit` changes them, validated.
fn config_of(m: &clap::ArgMatches, edit: impl FnOnce(&mut Cli)) -> Result<Config, UsageError> {
    let mut cli = Cli::from_arg_matches(m).map_err(|e| UsageError(one_line(&e.to_string())))?;
    edit(&mut cli);
    validate(cli, EnvOrigins::of(m, &command()))
}

/// The monitor's settings with its defaults (and `CGMON_*` variables) as `edit` changes
/// them, validated as a command line would be: for callers that run the monitor with
/// settings of their own (`diagnose`), without writing them out as text to parse again.
///
/// # Errors
/// What the flags must agree on does not hold (the filter does not parse, say).
pub fn settings_with(edit: impl FnOnce(&mut Cli)) -> Result<Settings, UsageError> {
    let m = command()
        .try_get_matches_from(["cgmon-rs"])
        .map_err(|e| UsageError(one_line(&e.to_string())))?;
    let c = config_of(&m, edit).map_err(|e| UsageError(crate::units::clip_line(&e.0)))?;
    Ok(c.settings)
}

/// `msg` with the bad value clap quotes in it cut to [`crate::units::QUOTED_CHARS`].
fn clip_value(e: &clap::Error, msg: String) -> String {
    use clap::error::{ContextKind, ContextValue};
    match e.get(ContextKind::InvalidValue) {
        Some(ContextValue::String(v)) if v.chars().count() > crate::units::QUOTED_CHARS => {
            msg.replacen(v.as_str(), &crate::units::clip(v), 1)
        }
        _ => msg,
    }
}

/// ` (from CGMON_X)` when the bad value came from the environment: clap names the flag,
/// which a service's unit file may not hold at all. Empty when the flag was on the command
/// line (which wins) or the error is about no one flag.
fn from_env(e: &clap::Error, argv: &[String]) -> String {
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return String::new();
    };
    // `--run-interval <DURATION>` or `--writer-partial[=<BOOL>]`.
    let long = arg.trim_start_matches('-').split([' ', '[', '=']).next().unwrap_or_default();
    let cmd = command();
    let Some(a) = cmd.get_arguments().find(|a| a.get_long() == Some(long)) else {
        return String::new();
    };
    let names = a.get_long_and_visible_aliases().unwrap_or_default();
    let on_line = argv.iter().any(|w| {
        w.strip_prefix("--")
            .map(|n| n.split('=').next().unwrap_or(n))
            .is_some_and(|n| names.contains(&n))
    });
    match a.get_env() {
        Some(env) if !on_line && std::env::var_os(env).is_some() => {
            format!(" (from {})", env.to_string_lossy())
        }
        _ => String::new(),
    }
}

/// Exit status for a usage error.
pub const EXIT_USAGE: u8 = 2;

/// Parses a subcommand's arguments (`cgmon-rs NAME ARGS`) as `T`. Help and version are
/// printed and end the run well (`Err(SUCCESS)`); any other error is one line on stderr
/// and the usage status.
///
/// # Errors
/// As above: the exit code to end with.
pub(crate) fn parse_subcommand<T: clap::Parser>(
    name: &str,
    args: Vec<String>,
) -> Result<T, std::process::ExitCode> {
    T::try_parse_from(std::iter::once(name.to_string()).chain(args)).map_err(|e| {
        use clap::error::ErrorKind;
        if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
            print!("{e}");
            return std::process::ExitCode::SUCCESS;
        }
        eprintln!("cgmon-rs {name}: {}", one_line(&e.to_string()));
        std::process::ExitCode::from(EXIT_USAGE)
    })
}

/// clap's error as one line: its first line without the `error: ` prefix, then its list of
/// possible values or its suggestion of a similar flag or value, when it gives one (on lines
/// of their own there). The rest is usage advice, left out.
pub(crate) fn one_line(s: &str) -> String {
    let mut lines = s.lines();
    let first = lines.next().unwrap_or(s);
    let mut out = first.strip_prefix("error: ").unwrap_or(first).to_string();
    // A first line that ends in a colon ("the following required arguments were not
    // provided:") is followed by its list, one indented item a line, up to a blank line.
    let mut listed = Vec::new();
    if out.ends_with(':') {
        let rest: Vec<&str> = lines.clone().take_while(|l| !l.trim().is_empty()).collect();
        listed.extend(rest.iter().map(|l| l.trim()));
        out.push(' ');
        out.push_str(&listed.join(", "));
    }
    for l in lines.skip(listed.len()).map(str::trim) {
        let hint = l
            .strip_prefix("[possible values: ")
            .and_then(|v| v.strip_suffix(']'))
            .map(|v| format!("possible values: {v}"))
            .or_else(|| {
                l.strip_prefix("tip: ").filter(|t| t.starts_with("a similar ")).map(str::to_string)
            });
        if let Some(h) = hint {
            out.push_str("; ");
            out.push_str(&h);
        }
    }
    out
}

/// The host name (cgmon's default file name uses it).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it
    // when the name fits, and we cut at the first NUL either way.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

pub mod ddl_cmd;
mod flags;
mod resolve;
mod secret;
mod sink_flags;
mod validate;
mod values;
pub use flags::{Cli, CumulantKind, command};
pub use resolve::{HttpSettings, Settings};
use validate::validate;
pub(crate) use values::netns_which;

#[cfg(test)]
mod tests;
