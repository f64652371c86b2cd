//! The command line: cgmon's flags under cgmon's names and defaults, plus ours.
//!
//! cgmon used Go's `flag` package, where `-run-interval 1s` and `--run-interval 1s` mean the
//! same and a boolean takes a value only as `-flag=false`. clap parses GNU-style options, so
//! [`normalize`] rewrites a single-dash long flag into its double-dash form first; then
//! cgmon's documented commands parse unchanged. Every option can also come from a
//! `CGMON_*` environment variable (for the systemd unit), named after the flag.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, CommandFactory, FromArgMatches, Parser, ValueEnum};

use crate::analyzer::AnalyzerConfig;
use crate::filter::{self, Expr};
use crate::logging::{LogFormat, LogSettings};
use crate::states::StateSet;
use crate::stats::correlation::Adjust;
use crate::stats::summary::QuantileKind;
use crate::units::{ValueError, format_duration, parse_duration, parse_size};

const EXAMPLES: &str = "\
`cgmon-rs diagnose [--seconds N] [--json] [FILTER]` watches flows for a while and says what
limited each (see `cgmon-rs diagnose --help`).

Every long option may be spelled with one dash, as cgmon's are (-run-interval 1s), and
booleans take a value only as -flag=false.

EXAMPLES:
  cgmon-rs                                         every TCP flow, one JSON record per line as it ends
  cgmon-rs -netlink-sport 80,443 -tracker-max-flows 100 -writer-dir output \\
           -writer-rotate-size 10M -run-interval 100ms
                                                   cgmon's README example, unchanged
  cgmon-rs --pretty dport 443 or sport 22          a filter expression (ss syntax), tab-indented JSON
  cgmon-rs --filter 'dst 2001:db8::/32' -writer-partial | jq .SendThroughputMbps
  cgmon-rs -writer-dir /var/log/cgmon-rs -writer-file flows.json.gz -writer-rotate-interval 1h

UNITS:
  Durations are Go's: 100ms, 1s, 1m30s, 1.5h (ns, us, ms, s, m, h).
  Sizes are bytes with an optional K, M, G or T suffix (x1024^n): 200K, 10M.

SIGNALS:
  SIGINT, SIGTERM  stop: finish every active flow (written with -writer-partial), close files, exit 0;
                   a second signal exits at once
  SIGHUP           close and rotate the output file, then reopen it (logrotate)
  SIGUSR1          log the monitor's internal metrics
  SIGUSR2          return free heap memory to the OS, log RSS before and after and the metrics

ENVIRONMENT:
  Every option can be set as CGMON_<NAME>, the flag's name in upper case with '-' as '_',
  e.g. CGMON_RUN_INTERVAL=100ms, CGMON_WRITER_PARTIAL=true. The command line wins. An
  error about a value from the environment names its variable.
  RUST_LOG overrides the log level (tracing's EnvFilter syntax).

EXIT STATUS:
  0  stopped by a signal or -run-duration, every record written
  1  a run-time failure: -run-max-errors consecutive netlink errors, an output that could not be
     opened, records lost or dropped during the run, or shutdown not finished within
     -run-shutdown-timeout
  2  a usage error: an unknown flag or a bad value; nothing was sampled or written";

/// `-analyzer-cumulant-kind` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CumulantKind {
    /// Linear interpolation between neighbouring values (cgmon's default).
    Lininterp,
    /// The first value whose cumulative weight reaches the quantile.
    Empirical,
}

fn positive_duration(s: &str) -> Result<Duration, ValueError> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(ValueError(format!("invalid duration {s:?}: must be greater than 0")));
    }
    Ok(d)
}

fn destroy_grace(s: &str) -> Result<Duration, ValueError> {
    let d = parse_duration(s)?;
    let max = crate::tracker::MAX_DESTROY_GRACE;
    if d > max {
        return Err(ValueError(format!(
            "invalid duration {s:?}: at most {} (waiting flows hold their samples)",
            format_duration(max)
        )));
    }
    Ok(d)
}

fn netns_which(s: &str) -> Result<crate::netns::Which, ValueError> {
    crate::netns::Which::parse(s).map_err(ValueError)
}

/// `--cpu-budget`: a percentage of one core, `2`, `2%` or `0.5`; 0 turns tiers off.
fn cpu_budget(s: &str) -> Result<f64, ValueError> {
    let t = s.trim().trim_end_matches('%');
    match t.parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p / 100.0),
        _ => Err(ValueError(format!(
            "invalid CPU budget {s:?}: a percentage of one core from 0 to 100, e.g. 2 or 0.5%"
        ))),
    }
}

fn size(s: &str) -> Result<u64, ValueError> {
    parse_size(s)
}

/// `--writer-backlog`: the backlog holds records while the output cannot take them. Below
/// 1 MiB a short stall would lose a few hundred records; above 16 GiB it is a typo (or
/// the memory the host needs for everything else).
fn backlog_size(s: &str) -> Result<u64, ValueError> {
    match parse_size(s)? {
        n if (1 << 20..=16 << 30).contains(&n) => Ok(n),
        n => Err(ValueError(format!("must be 1M to 16G bytes, not {n}"))),
    }
}

/// A netlink receive buffer: SO_RCVBUF and SO_RCVBUFFORCE take a C int.
fn rcvbuf_size(s: &str) -> Result<u64, ValueError> {
    match parse_size(s)? {
        n if n <= i32::MAX as u64 => Ok(n),
        n => Err(ValueError(format!("at most {} bytes (a C int), not {n}", i32::MAX))),
    }
}

fn port_list(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Ok(String::new());
    }
    filter::parse_port_list(s).map_err(|e| e.to_string())?;
    Ok(s.to_string())
}

fn states(s: &str) -> Result<StateSet, String> {
    StateSet::parse(s).map_err(|e| e.to_string())
}

/// Go's boolean flag syntax on every boolean option: `-flag` alone means true, and a value is
/// taken only as `-flag=false` (a separate word after it is not its value). Applied to the
/// derived command here rather than repeated on each field.
pub fn command() -> clap::Command {
    Cli::command().mut_args(|a| {
        if !matches!(a.get_action(), ArgAction::SetTrue) {
            return a;
        }
        // A flag that is on unless turned off (`-clickhouse-compress=false`) keeps its
        // own default and shows it.
        let on = a.get_default_values().iter().any(|v| v == "true");
        a.action(ArgAction::Set)
            .value_parser(go_bool)
            .value_name("BOOL")
            .num_args(0..=1)
            .require_equals(true)
            .default_missing_value("true")
            .default_value(if on { "true" } else { "false" })
            .hide_default_value(!on)
    })
}

fn go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("invalid boolean {s:?} (use true or false)")),
    }
}

/// cgmon-rs's options. Field docs are the `--help` text.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "cgmon-rs",
    version,
    about = "Linux TCP congestion monitor: samples tcp_info for every TCP flow through sock_diag \
             (as `ss -ti` does) and writes one JSON record per flow when it ends.",
    after_help = EXAMPLES,
    color = clap::ColorChoice::Never,
    max_term_width = 100
)]
pub struct Cli {
    // ---- Analyzer ----
    /// Adjust each correlation by Olkin-Pratt, r*(1+(1-r^2)/(2n)), clamped to [-1,1]
    #[arg(
        long = "analyzer-adjusted-correlation-1",
        env = "CGMON_ANALYZER_ADJUSTED_CORRELATION_1",
        help_heading = "Analyzer"
    )]
    pub adjusted_correlation_1: bool,
    /// Adjust each correlation to sign(r)*sqrt(max(0,1-(1-r^2)(n-1)/(n-2)))
    #[arg(
        long = "analyzer-adjusted-correlation-2",
        env = "CGMON_ANALYZER_ADJUSTED_CORRELATION_2",
        help_heading = "Analyzer"
    )]
    pub adjusted_correlation_2: bool,
    /// Quantile method of the seven-number summaries
    #[arg(
        long = "analyzer-cumulant-kind",
        env = "CGMON_ANALYZER_CUMULANT_KIND",
        value_enum,
        default_value = "lininterp",
        help_heading = "Analyzer"
    )]
    pub cumulant_kind: CumulantKind,
    /// Weigh every sample equally in the correlations (default: by the time it held)
    #[arg(
        long = "analyzer-unweighted-correlations",
        env = "CGMON_ANALYZER_UNWEIGHTED_CORRELATIONS",
        help_heading = "Analyzer"
    )]
    pub unweighted_correlations: bool,
    /// Weigh every sample equally in the summaries (default: by the time it held)
    #[arg(
        long = "analyzer-unweighted-quantiles",
        env = "CGMON_ANALYZER_UNWEIGHTED_QUANTILES",
        help_heading = "Analyzer"
    )]
    pub unweighted_quantiles: bool,

    // ---- Logging ----
    /// Turn on every logging switch below. (The help text is an attribute, not this
    /// comment: rustdoc would read its `<stage>` as an HTML tag.)
    #[arg(
        long = "log-all",
        env = "CGMON_LOG_ALL",
        help = "Turn on every -log-<stage> switch",
        help_heading = "Logging"
    )]
    pub log_all: bool,
    /// Log each analyzed batch (debug level of target cgmon_rs::analyzer)
    #[arg(long = "log-analyzer", env = "CGMON_LOG_ANALYZER", help_heading = "Logging")]
    pub log_analyzer: bool,
    /// Log each dump: time, sockets, datagrams, bytes (target cgmon_rs::sampler)
    #[arg(long = "log-netlink", env = "CGMON_LOG_NETLINK", help_heading = "Logging")]
    pub log_netlink: bool,
    /// Log to syslog through /dev/log as well (a warning, not an error, when it is missing)
    #[arg(long = "log-syslog", env = "CGMON_LOG_SYSLOG", help_heading = "Logging")]
    pub log_syslog: bool,
    /// Log each dump's flow table changes (target cgmon_rs::tracker)
    #[arg(long = "log-tracker", env = "CGMON_LOG_TRACKER", help_heading = "Logging")]
    pub log_tracker: bool,
    /// Log each written batch, file opens and rotations (target cgmon_rs::writer)
    #[arg(long = "log-writer", env = "CGMON_LOG_WRITER", help_heading = "Logging")]
    pub log_writer: bool,
    /// Log line format on stderr (under systemd, logs go to the journal natively)
    #[arg(
        long = "log-format",
        env = "CGMON_LOG_FORMAT",
        value_enum,
        default_value = "text",
        help_heading = "Logging"
    )]
    pub log_format: LogFormat,
    /// Base log level: error, warn, info, debug or trace
    #[arg(long = "log-level", env = "CGMON_LOG_LEVEL", default_value = "info",
          value_parser = ["error", "warn", "info", "debug", "trace"], help_heading = "Logging")]
    pub log_level: String,

    // ---- Netlink ----
    /// Only flows whose remote port is in LIST, e.g. 80,443,8000-8080 (in the kernel)
    #[arg(long = "netlink-dport", visible_alias = "dport", env = "CGMON_NETLINK_DPORT", value_name = "LIST",
          value_parser = port_list, default_value = "", help_heading = "Netlink")]
    pub dport: String,
    /// Only flows whose local port is in LIST (in the kernel)
    #[arg(long = "netlink-sport", visible_alias = "sport", env = "CGMON_NETLINK_SPORT", value_name = "LIST",
          value_parser = port_list, default_value = "", help_heading = "Netlink")]
    pub sport: String,
    /// Initial receive buffer per datagram in bytes; it grows when a datagram is larger
    #[arg(long = "netlink-read-bufsize", env = "CGMON_NETLINK_READ_BUFSIZE", value_name = "SIZE",
          value_parser = size, default_value = "32768", help_heading = "Netlink")]
    pub read_bufsize: u64,
    /// SO_RCVBUF of the netlink sockets in bytes; 0 keeps the system default
    #[arg(long = "netlink-receive-bufsize", env = "CGMON_NETLINK_RECEIVE_BUFSIZE",
          value_name = "SIZE", value_parser = rcvbuf_size, default_value = "0", help_heading = "Netlink")]
    pub receive_bufsize: u64,
    /// SO_RCVBUFFORCE in bytes (needs CAP_NET_ADMIN); 0 = unset
    #[arg(long = "netlink-receive-bufsize-force", env = "CGMON_NETLINK_RECEIVE_BUFSIZE_FORCE",
          value_name = "SIZE", value_parser = rcvbuf_size, default_value = "0", help_heading = "Netlink")]
    pub receive_bufsize_force: u64,
    /// How long to wait for each datagram of a dump before failing it
    #[arg(long = "netlink-receive-timeout", env = "CGMON_NETLINK_RECEIVE_TIMEOUT",
          value_name = "DURATION", value_parser = positive_duration, default_value = "1s", help_heading = "Netlink")]
    pub receive_timeout: Duration,

    // ---- Run ----
    /// Stop after this long; 0 runs until a signal
    #[arg(long = "run-duration", visible_alias = "duration", env = "CGMON_RUN_DURATION", value_name = "DURATION",
          value_parser = parse_duration, default_value = "0", help_heading = "Run")]
    pub run_duration: Duration,
    /// First back-off after a failed dump; doubles on each consecutive failure
    #[arg(long = "run-error-delay", env = "CGMON_RUN_ERROR_DELAY", value_name = "DURATION",
          value_parser = parse_duration, default_value = "1s", help_heading = "Run")]
    pub error_delay: Duration,
    /// Sampling interval; the first sample is taken at once
    #[arg(long = "run-interval", visible_alias = "interval", env = "CGMON_RUN_INTERVAL", value_name = "DURATION",
          value_parser = positive_duration, default_value = "1s", help_heading = "Run")]
    pub interval: Duration,
    /// Network namespaces to sample: own (the monitor's), all (every namespace on the host:
    /// named ones and those of processes; needs CAP_SYS_ADMIN, and CAP_SYS_PTRACE for other
    /// users' processes), or a comma list of `ip netns` names, paths and own
    #[arg(long = "netns", env = "CGMON_NETNS", value_name = "WHICH", value_parser = netns_which,
          default_value = "own", help_heading = "Run")]
    pub netns: crate::netns::Which,
    /// How often to look for network namespaces that came or went (with --netns)
    #[arg(long = "netns-rescan", env = "CGMON_NETNS_RESCAN", value_name = "DURATION",
          value_parser = positive_duration, default_value = "10s", help_heading = "Run")]
    pub netns_rescan: Duration,
    /// CPU for sampling, in percent of one core. Flows whose counters move are polled
    /// every interval by exact requests; full dumps (which find new flows and refresh idle
    /// ones) run as often as the rest of the budget allows, at most every interval and at
    /// least every 10 s. 0 = a full dump every interval (cgmon's way)
    #[arg(long = "cpu-budget", env = "CGMON_CPU_BUDGET", value_name = "PERCENT",
          value_parser = cpu_budget, default_value = "2", help_heading = "Run")]
    pub cpu_budget: f64,
    /// Consecutive failed dumps before giving up (exit 1); 0 never gives up
    #[arg(
        long = "run-max-errors",
        env = "CGMON_RUN_MAX_ERRORS",
        value_name = "N",
        default_value = "5",
        help_heading = "Run"
    )]
    pub max_errors: u32,
    /// Run every stage on one thread
    #[arg(long = "run-serial", env = "CGMON_RUN_SERIAL", help_heading = "Run")]
    pub serial: bool,
    /// Listen address of the HTTP status server, e.g. 127.0.0.1:9090 or :9090 (off by default)
    ///
    /// Serves / (status page), /metrics (Prometheus), /flows, /flows/{cookie}, /healthz and
    /// /flow-duration-histogram.
    #[arg(
        long = "run-http-server", visible_alias = "http",
        env = "CGMON_RUN_HTTP_SERVER",
        value_name = "ADDR",
        value_parser = crate::http::parse_addr, help_heading = "Run"
    )]
    pub http_server: Option<std::net::SocketAddr>,
    /// Longest time an HTTP client may take to send a request's headers
    #[arg(long = "http-header-timeout", env = "CGMON_HTTP_HEADER_TIMEOUT", value_name = "DURATION",
          value_parser = positive_duration, default_value = "5s", help_heading = "Run")]
    pub http_header_timeout: Duration,
    /// An HTTP connection that sends and receives nothing for this long is closed
    #[arg(long = "http-idle-timeout", env = "CGMON_HTTP_IDLE_TIMEOUT", value_name = "DURATION",
          value_parser = positive_duration, default_value = "60s", help_heading = "Run")]
    pub http_idle_timeout: Duration,
    /// A response not fully written this long after its request arrived (a client that
    /// reads too slowly) ends its connection
    #[arg(long = "http-write-timeout", env = "CGMON_HTTP_WRITE_TIMEOUT", value_name = "DURATION",
          value_parser = positive_duration, default_value = "30s", help_heading = "Run")]
    pub http_write_timeout: Duration,
    /// Most HTTP connections served at once. At the cap a new connection takes the slot of
    /// the oldest one that is idle or still sending its request; it is closed at once (and
    /// counted) only when every slot is busy with a response
    #[arg(long = "http-max-connections", env = "CGMON_HTTP_MAX_CONNECTIONS", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=100_000), default_value = "64", help_heading = "Run")]
    pub http_max_connections: u32,
    /// How long a stop signal waits for the pipeline to drain before exiting 1
    #[arg(long = "run-shutdown-timeout", visible_alias = "shutdown-timeout", env = "CGMON_RUN_SHUTDOWN_TIMEOUT",
          value_name = "DURATION", value_parser = positive_duration, default_value = "15s", help_heading = "Run")]
    pub shutdown_timeout: Duration,

    /// Distinct service label values in /metrics; later services share "other"
    #[arg(
        long = "metrics-top-services",
        env = "CGMON_METRICS_TOP_SERVICES",
        value_name = "K",
        default_value = "20",
        help_heading = "Run"
    )]
    pub top_services: usize,

    /// Recently ended flows the web view keeps (their records and up to 300 samples each,
    /// from their whole life; about 43 KB each); 0 = none
    #[arg(
        long = "recent-flows",
        env = "CGMON_RECENT_FLOWS",
        value_name = "N",
        default_value = "100",
        value_parser = clap::value_parser!(u32).range(0..=1000),
        help_heading = "Run"
    )]
    pub recent_flows: u32,

    // ---- Tracker ----
    /// Most flows recorded at once (flows waiting for their destroy event too); flows beyond
    /// are counted and not recorded. 0 = no limit
    #[arg(
        long = "tracker-max-flows",
        visible_alias = "max-flows",
        env = "CGMON_TRACKER_MAX_FLOWS",
        value_name = "N",
        default_value = "1000000",
        help_heading = "Tracker"
    )]
    pub max_flows: usize,
    /// Most retained samples (48 bytes each) held by the flows being recorded; past it the
    /// longest windows are written early as interim records (Seq counts on). 0 = no limit
    #[arg(
        long = "tracker-max-samples",
        env = "CGMON_TRACKER_MAX_SAMPLES",
        value_name = "N",
        default_value = "40000000",
        help_heading = "Tracker"
    )]
    pub max_samples: u64,
    /// Fewest retained samples for a flow to be written; 0 = no minimum
    #[arg(
        long = "tracker-min-samples",
        visible_alias = "min-samples",
        env = "CGMON_TRACKER_MIN_SAMPLES",
        value_name = "N",
        default_value = "0",
        help_heading = "Tracker"
    )]
    pub min_samples: usize,
    /// Retained samples per record before a long flow writes an interim record (Seq counts
    /// them); default about an hour at -run-interval
    #[arg(
        long = "tracker-window-samples",
        env = "CGMON_TRACKER_WINDOW_SAMPLES",
        value_name = "N",
        help_heading = "Tracker"
    )]
    pub window_samples: Option<usize>,
    /// How long a flow that left the dumps waits for its destroy event (and final counters)
    /// before it ends as gone; 0 = at once. A reset connection leaves the dumps at once but
    /// is destroyed only when its program closes it
    #[arg(long = "tracker-destroy-grace", visible_alias = "destroy-grace", env = "CGMON_TRACKER_DESTROY_GRACE",
          value_name = "DURATION", value_parser = destroy_grace, default_value = "5s", help_heading = "Tracker")]
    pub destroy_grace: Duration,

    // ---- Writer ----
    /// gzip level, 1 (fast) to 9 (small)
    #[arg(long = "writer-compression-level", visible_alias = "compression-level", env = "CGMON_WRITER_COMPRESSION_LEVEL",
          value_name = "N", default_value = "9",
          value_parser = clap::value_parser!(u32).range(1..=9), help_heading = "Writer")]
    pub compression_level: u32,
    /// Write files in DIR (which must exist) instead of stdout
    #[arg(
        long = "writer-dir",
        visible_alias = "output-dir",
        env = "CGMON_WRITER_DIR",
        value_name = "DIR",
        help_heading = "Writer"
    )]
    pub dir: Option<PathBuf>,
    /// Output file name in -writer-dir (the help text is an attribute: rustdoc would read
    /// `<hostname>` in a comment as an HTML tag).
    #[arg(
        long = "writer-file",
        help = "Output file name in -writer-dir; gzip-compressed when it ends in .gz \
                [default: cgmon-<hostname>.json.gz]",
        visible_alias = "output-file",
        env = "CGMON_WRITER_FILE",
        value_name = "NAME",
        help_heading = "Writer"
    )]
    pub file: Option<String>,
    /// Accepted for cgmon; records are always flushed (stdout per record, files every second)
    #[arg(long = "writer-flush", env = "CGMON_WRITER_FLUSH", help_heading = "Writer")]
    pub flush: bool,
    /// Rotate the file this often, kept by a timer (files only); 0 = never
    #[arg(long = "writer-rotate-interval", visible_alias = "rotate-interval", env = "CGMON_WRITER_ROTATE_INTERVAL",
          value_name = "DURATION", value_parser = parse_duration, default_value = "15m", help_heading = "Writer")]
    pub rotate_interval: Duration,
    /// Rotate the file when it reaches SIZE bytes on disk (after compression), e.g. 10M;
    /// 0 = no size rotation
    #[arg(long = "writer-rotate-size", visible_alias = "rotate-size", env = "CGMON_WRITER_ROTATE_SIZE", value_name = "SIZE",
          value_parser = size, help_heading = "Writer")]
    pub rotate_size: Option<u64>,
    /// Rotated files kept beside the live one (records' and --samples-out's files, each);
    /// the oldest are deleted first, only files named as this monitor rotates them.
    /// 0 = no limit (cgmon never deleted; the systemd unit sets a limit)
    #[arg(
        long = "writer-keep-files",
        env = "CGMON_WRITER_KEEP_FILES",
        value_name = "N",
        default_value = "0",
        help_heading = "Writer"
    )]
    pub keep_files: u32,
    /// Bytes of rotated files kept (each output), oldest deleted first, e.g. 2G; 0 = no limit
    #[arg(long = "writer-keep-size", env = "CGMON_WRITER_KEEP_SIZE", value_name = "SIZE",
          value_parser = size, default_value = "0", help_heading = "Writer")]
    pub keep_size: u64,
    /// Also write partial records: flows open at startup, or still open at shutdown
    #[arg(
        long = "writer-partial",
        visible_alias = "partial",
        env = "CGMON_WRITER_PARTIAL",
        help_heading = "Writer"
    )]
    pub partial: bool,
    /// Indent records with tabs, one object after another (cgmon's output style)
    #[arg(long = "pretty", env = "CGMON_PRETTY", help_heading = "Writer")]
    pub pretty: bool,
    /// Also write every retained sample of every written flow to FILE as JSON lines
    /// (gzip when it ends in .gz)
    #[arg(
        long = "samples-out",
        env = "CGMON_SAMPLES_OUT",
        value_name = "FILE",
        help_heading = "Writer"
    )]
    pub samples_out: Option<PathBuf>,
    /// Records held in memory while the output cannot be written, in bytes of JSON (1M to
    /// 16G); beyond it the oldest are counted as lost
    #[arg(long = "writer-backlog", env = "CGMON_WRITER_BACKLOG", value_name = "SIZE",
          value_parser = backlog_size, default_value = "64M", help_heading = "Writer")]
    pub backlog: u64,

    // ---- ClickHouse ----
    /// Also send every record to ClickHouse over HTTP, exactly once: http://HOST:PORT/
    /// (a user as http://USER@HOST:PORT/; ?database=NAME). The database and table are
    /// created when missing
    #[arg(
        long = "clickhouse",
        env = "CGMON_CLICKHOUSE",
        value_name = "URL",
        help_heading = "ClickHouse"
    )]
    pub clickhouse: Option<String>,
    /// The table, [DB.]TABLE; the database defaults to the URL's ?database=, else cgmon
    #[arg(
        long = "clickhouse-table",
        env = "CGMON_CLICKHOUSE_TABLE",
        value_name = "TABLE",
        default_value = "flows",
        help_heading = "ClickHouse"
    )]
    pub clickhouse_table: String,
    /// A file holding the ClickHouse password (its first line); or set
    /// CGMON_CLICKHOUSE_PASSWORD. Never on the command line
    #[arg(
        long = "clickhouse-password-file",
        env = "CGMON_CLICKHOUSE_PASSWORD_FILE",
        value_name = "FILE",
        help_heading = "ClickHouse"
    )]
    pub clickhouse_password_file: Option<PathBuf>,
    /// The host name every ClickHouse row carries in Host [default: the system's]
    #[arg(
        long = "host-name",
        env = "CGMON_HOST_NAME",
        value_name = "NAME",
        help_heading = "ClickHouse"
    )]
    pub host_name: Option<String>,
    /// Keep batches the server has not taken in DIR, across restarts (created when
    /// missing); without it they wait in memory
    #[arg(
        long = "spool-dir",
        env = "CGMON_SPOOL_DIR",
        value_name = "DIR",
        help_heading = "ClickHouse"
    )]
    pub spool_dir: Option<PathBuf>,
    /// Most compressed bytes of records waiting for ClickHouse: on disk with --spool-dir,
    /// else in memory (256M: ~2 million records, measured at ~120 bytes each); past it the
    /// oldest are dropped and counted
    #[arg(long = "spool-max", env = "CGMON_SPOOL_MAX", value_name = "SIZE", value_parser = size,
          default_value = "256M", help_heading = "ClickHouse")]
    pub spool_max: u64,

    /// Send batches gzip-compressed; -clickhouse-compress=false sends plain JSON rows
    #[arg(
        long = "clickhouse-compress",
        env = "CGMON_CLICKHOUSE_COMPRESS",
        default_value = "true",
        help_heading = "ClickHouse"
    )]
    pub clickhouse_compress: bool,

    // ---- Selection ----
    /// TCP states to sample, comma-separated ss names (established, syn-sent, fin-wait-1,
    /// ..., time-wait, closing, all); default all but listen
    #[arg(long = "states", env = "CGMON_STATES", value_name = "LIST", value_parser = states, help_heading = "Selection")]
    pub states: Option<StateSet>,
    /// Filter expression in ss syntax, e.g. 'dport 443 or (sport 22 and dst 10.0.0.0/8)'
    #[arg(long = "filter", env = "CGMON_FILTER", value_name = "EXPR", help_heading = "Selection")]
    pub filter: Option<String>,
    /// The filter expression may also be given as words, before or after the flags:
    /// cgmon-rs dport 443 or sport 22
    #[arg(value_name = "FILTER", trailing_var_arg = true, help_heading = "Selection")]
    pub filter_words: Vec<String>,
}

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
    let cli = Cli::from_arg_matches(&m).map_err(|e| UsageError(one_line(&e.to_string())))?;
    Ok(Parsed::Run(Box::new(validate(cli, EnvOrigins::of(&m, &command()))?)))
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
    for l in lines.map(str::trim) {
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

fn validate(cli: Cli, env: EnvOrigins) -> Result<Config, UsageError> {
    let adjust = match (cli.adjusted_correlation_1, cli.adjusted_correlation_2) {
        (true, true) => {
            return Err(UsageError(format!(
                "-analyzer-adjusted-correlation-1 and -analyzer-adjusted-correlation-2 exclude \
                 each other{}",
                env.suffix(&["adjusted_correlation_1", "adjusted_correlation_2"])
            )));
        }
        (true, false) => Adjust::OlkinPratt,
        (false, true) => Adjust::Adjusted,
        (false, false) => Adjust::None,
    };
    let ports = Expr::from_port_lists(&cli.sport, &cli.dport).map_err(|e| {
        let from = env.suffix(&["sport", "dport"]);
        UsageError(format!("-netlink-sport/-netlink-dport: {e}{from}"))
    })?;
    let text = match (&cli.filter, cli.filter_words.is_empty()) {
        (Some(_), false) => {
            return Err(UsageError(format!(
                "give the filter either as --filter or as trailing words, not both (words: {:?}){}",
                cli.filter_words.join(" "),
                env.suffix(&["filter"])
            )));
        }
        (Some(f), true) => Some(f.clone()),
        (None, false) => Some(cli.filter_words.join(" ")),
        (None, true) => None,
    };
    let expr = match text {
        Some(t) => Some(filter::parse(&t).map_err(|e| {
            let (t, e) = (crate::units::clip(&t), crate::units::clip(&e.to_string()).into_owned());
            UsageError(format!("filter {t:?}: {e}{}", env.suffix(&["filter"])))
        })?),
        None => None,
    };
    let filter = Expr::all_of(ports.into_iter().chain(expr));
    // Compiled here, once: a filter too large for the kernel is a usage error, and the
    // sampler takes the bytecode as it is.
    let bytecode = match &filter {
        Some(f) => Some(filter::compile(&f.clone().or_listeners()).map_err(|e| {
            UsageError(format!("filter: {e}{}", env.suffix(&["filter", "sport", "dport"])))
        })?),
        None => None,
    };
    if cli.window_samples.is_some_and(|n| n < 2) {
        return Err(UsageError(format!(
            "invalid value '{}' for '--tracker-window-samples': must be at least 2{}",
            cli.window_samples.unwrap_or(0),
            env.suffix(&["window_samples"])
        )));
    }
    if cli.read_bufsize < 4096 || cli.read_bufsize > 1 << 30 {
        return Err(UsageError(format!(
            "invalid value '{}' for '--netlink-read-bufsize': must be 4096 to 1G bytes{}",
            cli.read_bufsize,
            env.suffix(&["read_bufsize"])
        )));
    }
    if cli.dir.is_none() && cli.rotate_size.is_some() {
        tracing::debug!("-writer-rotate-size has no effect on stdout");
    }
    let file_name = match &cli.file {
        Some(f) if f.is_empty() || f.contains('/') => {
            return Err(UsageError(format!(
                "invalid value {:?} for '--writer-file': a file name without '/'{}",
                crate::units::clip(f),
                env.suffix(&["file"])
            )));
        }
        Some(f) => f.clone(),
        None => format!("cgmon-{}.json.gz", hostname()),
    };
    let analyzer = AnalyzerConfig {
        quantile: match cli.cumulant_kind {
            CumulantKind::Lininterp => QuantileKind::LinInterp,
            CumulantKind::Empirical => QuantileKind::Empirical,
        },
        unweighted_quantiles: cli.unweighted_quantiles,
        unweighted_correlations: cli.unweighted_correlations,
        adjust,
        realtime_offset_ns: 0,
    };
    let sink = sink_config(&cli, &env)?;
    let summary = summary(&cli, filter.as_ref(), &file_name);
    let log = LogSettings {
        directives: crate::logging::directives(&cli.log_level, &cli.log_stages()),
        format: cli.log_format,
        syslog: cli.log_syslog,
    };
    let settings = resolve::resolve(
        &cli,
        resolve::Parts { filter, bytecode, analyzer, file_name, summary, sink },
    );
    Ok(Config { settings, log, serial: cli.serial, env })
}

/// `--clickhouse` and its flags as the sink's settings. The password comes from
/// `--clickhouse-password-file` or `CGMON_CLICKHOUSE_PASSWORD`, never from a flag.
fn sink_config(cli: &Cli, env: &EnvOrigins) -> Result<Option<crate::sink::SinkConfig>, UsageError> {
    let Some(url) = &cli.clickhouse else { return Ok(None) };
    let from = env.suffix(&["clickhouse", "clickhouse_table"]);
    let mut target = crate::sink::client::Target::parse(url, &cli.clickhouse_table)
        .map_err(|e| UsageError(format!("--clickhouse: {e}{from}")))?;
    target.password = match &cli.clickhouse_password_file {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| {
                UsageError(format!(
                    "--clickhouse-password-file: cannot read {}: {e}{}",
                    crate::units::clip(&p.display().to_string()),
                    env.suffix(&["clickhouse_password_file"])
                ))
            })?;
            Some(text.lines().next().unwrap_or("").to_string())
        }
        None => std::env::var("CGMON_CLICKHOUSE_PASSWORD").ok(),
    };
    if cli.spool_max < 1 << 20 {
        return Err(UsageError(format!(
            "invalid value '{}' for '--spool-max': at least 1M bytes{}",
            cli.spool_max,
            env.suffix(&["spool_max"])
        )));
    }
    Ok(Some(crate::sink::SinkConfig {
        target,
        host: cli.host_name.clone().unwrap_or_else(hostname),
        limits: crate::sink::batch::Limits::default(),
        spool_dir: cli.spool_dir.clone(),
        spool_max: cli.spool_max,
        backoff: crate::sink::delivery::Backoff::default(),
        compress: cli.clickhouse_compress,
    }))
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

/// One line per setting that matters, for the start-up log.
fn summary(c: &Cli, filter: Option<&Expr>, file_name: &str) -> String {
    format!(
        "interval={} filter={} states={} output={} partial={} max_flows={} min_samples={}",
        format_duration(c.interval),
        filter.map_or("none".into(), |f| format!("{f:?}")),
        c.states.unwrap_or_default(),
        c.dir.as_ref().map_or("stdout".into(), |d| d.join(file_name).display().to_string()),
        c.partial,
        c.max_flows,
        c.min_samples,
    )
}

impl Cli {
    /// The `-log-<stage>` switches, in [`crate::logging::STAGE_TARGETS`]' order (all on
    /// with `-log-all`).
    fn log_stages(&self) -> [bool; 4] {
        [self.log_netlink, self.log_tracker, self.log_analyzer, self.log_writer]
            .map(|on| on || self.log_all)
    }
}

mod resolve;
pub use resolve::{HttpSettings, Settings};

#[cfg(test)]
mod tests;
