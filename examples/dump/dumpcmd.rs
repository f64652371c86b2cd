//! The command line of this example: dumps sockets as JSON lines, one object per
//! socket per dump, like a machine-readable `ss -tni`. (The `cgmon-rs` program's own command
//! line is `cgmon_rs::cli`.)

use std::io::Write;
use std::time::Duration;

use cgmon_rs::filter;
use cgmon_rs::sampler::source::{NetlinkSource, SocketOptions};
use cgmon_rs::sampler::{DumpMode, Sampler, SamplerConfig};
use cgmon_rs::states::StateSet;

/// Usage text.
pub const USAGE: &str = "\
usage: dump [--states LIST] [--mode auto|single|per-family] [--interval SECONDS] [--count N] [FILTER...]

Prints every TCP socket (all states but LISTEN by default) as one JSON object per line, once
per interval (default: once). FILTER is evaluated in the kernel, e.g.
  dump dport 443 or sport 22
  dump --states established --interval 1 --count 10 src 127.0.0.0/8
Exit status: 0 success, 1 runtime failure, 2 usage error.";

/// Parsed arguments.
#[derive(Debug, Clone)]
pub struct DumpArgs {
    /// Sampler settings, filter included.
    pub cfg: SamplerConfig,
    /// Time between dumps.
    pub interval: Duration,
    /// Dumps to take.
    pub count: u64,
}

/// A usage error, printed as one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Parses arguments (without the program name).
///
/// # Errors
/// An unknown value or a malformed filter, naming it.
pub fn parse_args(args: impl IntoIterator<Item = String>) -> Result<DumpArgs, UsageError> {
    let mut a =
        DumpArgs { cfg: SamplerConfig::default(), interval: Duration::from_secs(1), count: 1 };
    let mut words = Vec::new();
    let mut it = args.into_iter();
    let need = |flag: &str, v: Option<String>| {
        v.ok_or_else(|| UsageError(format!("{flag} needs a value")))
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--states" => {
                let v = need("--states", it.next())?;
                a.cfg.states =
                    StateSet::parse(&v).map_err(|e| UsageError(format!("--states: {e}")))?;
            }
            "--mode" => {
                a.cfg.mode = match need("--mode", it.next())?.as_str() {
                    "auto" => DumpMode::Auto,
                    "single" => DumpMode::SingleWalk,
                    "per-family" => DumpMode::PerFamily,
                    other => return Err(UsageError(format!("--mode: unknown mode {other:?}"))),
                }
            }
            "--interval" => {
                let v = need("--interval", it.next())?;
                let secs: f64 = v
                    .parse()
                    .map_err(|_| UsageError(format!("--interval: invalid seconds {v:?}")))?;
                if !(secs > 0.0 && secs.is_finite()) {
                    return Err(UsageError(format!("--interval: must be positive, got {v:?}")));
                }
                a.interval = Duration::from_secs_f64(secs);
            }
            "--count" => {
                let v = need("--count", it.next())?;
                a.count = v.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                    UsageError(format!("--count: want a positive integer, got {v:?}"))
                })?;
            }
            flag if flag.starts_with("--") => {
                return Err(UsageError(format!("unknown option {flag:?}")));
            }
            _ => words.push(arg),
        }
    }
    if !words.is_empty() {
        let e = filter::parse(&words.join(" ")).map_err(|e| UsageError(format!("filter: {e}")))?;
        filter::compile(&e).map_err(|e| UsageError(format!("filter: {e}")))?;
        a.cfg.filter = Some(e);
    }
    Ok(a)
}

/// Runs the dumps, writing JSON lines to `out`; returns the process exit code.
pub async fn run(args: DumpArgs, mut out: impl Write) -> u8 {
    let source = match NetlinkSource::open(SocketOptions::default()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("dump: opening sock_diag socket: {e}");
            return 1;
        }
    };
    let mut sampler = Sampler::new(source, args.cfg).expect("parse_args compiled the filter");
    let mut tick = tokio::time::interval(args.interval);
    for _ in 0..args.count {
        tick.tick().await;
        let dump = match sampler.dump().await {
            Ok(d) => d,
            Err(e) => {
                eprintln!("dump: {e}");
                return 1;
            }
        };
        for s in dump.batch.iter() {
            let line = serde_json::to_string(&s).expect("a sample always serialises");
            if writeln!(out, "{line}").is_err() {
                return 1; // stdout closed, e.g. piped into head
            }
        }
        if out.flush().is_err() {
            return 1;
        }
        if !dump.is_complete() {
            eprintln!(
                "dump: incomplete dump (interrupted={}, truncated datagrams={}, malformed={})",
                dump.interrupted, dump.truncated, dump.malformed
            );
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Result<DumpArgs, UsageError> {
        parse_args(s.split_whitespace().map(String::from))
    }

    #[test]
    fn parses_flags_and_filter() {
        let a =
            args("--states established --interval 0.5 --count 3 dport 443 or sport 22").unwrap();
        assert_eq!(a.cfg.states.0, 2);
        assert_eq!(a.interval, Duration::from_millis(500));
        assert_eq!(a.count, 3);
        assert!(a.cfg.filter.is_some());
    }

    #[test]
    fn errors_name_the_value() {
        for (input, needle) in [
            ("--interval 0", "\"0\""),
            ("--interval soon", "\"soon\""),
            ("--count -1", "\"-1\""),
            ("--states bogus", "bogus"),
            ("--mode fast", "\"fast\""),
            ("--frob", "--frob"),
            ("sport 70000", "70000"),
            ("--count", "--count needs a value"),
        ] {
            let e = args(input).unwrap_err().to_string();
            assert!(e.contains(needle), "{input:?} gave {e:?}");
        }
    }
}
