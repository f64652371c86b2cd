//! Logging set-up: tracing to stderr (text or JSON), to the journal natively when systemd
//! started us, and to syslog on request.
//!
//! cgmon's `-log-<stage>` switches become debug level for that stage's target:
//! `-log-netlink` → `cgmon_rs::sampler`, `-log-tracker` → `cgmon_rs::tracker`,
//! `-log-analyzer` → `cgmon_rs::analyzer`, `-log-writer` → `cgmon_rs::writer`. `RUST_LOG`
//! (tracing's EnvFilter syntax) overrides all of them.

use std::os::unix::fs::MetadataExt;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::FilterExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// `--log-format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines on stderr.
    Text,
    /// One JSON object per line on stderr.
    Json,
}

/// Logging, resolved from the options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// EnvFilter directives, e.g. `info,cgmon_rs::sampler=debug` (`RUST_LOG` overrides).
    pub directives: String,
    /// Text or JSON on stderr.
    pub format: LogFormat,
    /// Also to syslog (`-log-syslog`).
    pub syslog: bool,
}

/// The tracing targets of `-log-netlink`, `-log-tracker`, `-log-analyzer`, `-log-writer`.
pub const STAGE_TARGETS: [&str; 4] =
    ["cgmon_rs::sampler", "cgmon_rs::tracker", "cgmon_rs::analyzer", "cgmon_rs::writer"];

/// The filter directives for a level and the stage switches that are on, e.g.
/// `info,cgmon_rs::sampler=debug`.
pub fn directives(level: &str, stages: &[bool; 4]) -> String {
    let mut d = level.to_string();
    for (on, target) in stages.iter().zip(STAGE_TARGETS) {
        if *on {
            d.push_str(&format!(",{target}=debug"));
        }
    }
    d
}

/// `RUST_LOG`, else `directives`, less the HTTP client's wire dumps ([`not_a_wire_dump`]).
fn layer_filter<S>(directives: &str) -> impl tracing_subscriber::layer::Filter<S> + use<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(directives))
        .and(tracing_subscriber::filter::filter_fn(not_a_wire_dump))
}

/// False for the HTTP client's debug and trace events: at those levels ureq dumps every
/// request, headers included, and so the ClickHouse password in `X-ClickHouse-Key`. No
/// `--log-level` or `RUST_LOG` (not even `ureq_proto=trace`) turns them on; the sink logs
/// what a user needs of its requests itself, without credentials.
fn not_a_wire_dump(m: &tracing::Metadata<'_>) -> bool {
    !(m.target().starts_with("ureq") && *m.level() > tracing::Level::INFO)
}

/// True when stderr is the journal stream systemd gave us (`JOURNAL_STREAM` holds its
/// device and inode), so records should go to journald with their fields.
fn stderr_is_journal() -> bool {
    let Ok(v) = std::env::var("JOURNAL_STREAM") else { return false };
    let Some((dev, ino)) = v.split_once(':') else { return false };
    let Ok(m) = std::fs::metadata("/proc/self/fd/2") else { return false };
    dev.parse() == Ok(m.dev()) && ino.parse() == Ok(m.ino())
}

/// Installs the global subscriber. Returns warnings to log once it is up (a missing
/// /dev/log is one: cgmon made it fatal).
pub fn init(cfg: &LogSettings) -> Vec<String> {
    let mut warnings = Vec::new();
    let journald = if stderr_is_journal() {
        match tracing_journald::layer() {
            Ok(l) => Some(
                l.with_syslog_identifier("cgmon-rs".into())
                    .with_filter(layer_filter(&cfg.directives)),
            ),
            Err(e) => {
                warnings.push(format!("journald unavailable ({e}); logging to stderr"));
                None
            }
        }
    } else {
        None
    };
    let stderr = journald.is_none().then(|| {
        let l = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
        match cfg.format {
            LogFormat::Text => l.with_ansi(false).boxed(),
            LogFormat::Json => l.json().flatten_event(true).boxed(),
        }
        .with_filter(layer_filter(&cfg.directives))
    });
    let syslog = if cfg.syslog {
        if std::path::Path::new("/dev/log").exists() {
            let ident = c"cgmon-rs";
            syslog_tracing::Syslog::new(ident, Default::default(), Default::default()).map(|w| {
                tracing_subscriber::fmt::layer()
                    .with_writer(w)
                    .with_ansi(false)
                    .without_time()
                    .with_level(true)
                    .with_target(false)
                    .with_filter(layer_filter(&cfg.directives))
            })
        } else {
            warnings.push("-log-syslog: /dev/log does not exist; not logging to syslog".into());
            None
        }
    } else {
        None
    };
    // A second init (tests) keeps the first subscriber.
    let _ = tracing_subscriber::registry().with(journald).with(stderr).with(syslog).try_init();
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_switches_map_to_targets() {
        let d = directives("info", &[true, false, false, true]);
        assert_eq!(d, "info,cgmon_rs::sampler=debug,cgmon_rs::writer=debug");
        assert_eq!(directives("warn", &[false; 4]), "warn");
    }
}
