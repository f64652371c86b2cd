//! The flags themselves: the clap struct whose field docs are `--help`, the examples under
//! it, and Go's boolean syntax applied to every switch.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, CommandFactory, Parser, ValueEnum};

use super::values::{
    backlog_size, batch_interval, cpu_budget, destroy_grace, destroy_size, go_bool, netns_which,
    port_list, positive_duration, rcvbuf_size, size, states,
};
use crate::logging::LogFormat;
use crate::states::StateSet;
use crate::units::parse_duration;

pub(super) const EXAMPLES: &str = "\
SUBCOMMANDS (each has its own --help):
  cgmon-rs diagnose [--seconds N] [--json] [FILTER]   watch flows for a while, say what limited each
  cgmon-rs report RECORDS... [--samples F] -o F       one HTML report of a run's records
  cgmon-rs clickhouse-ddl [--server-version V] [--cluster NAME]
                                                    print the ClickHouse table the sink makes
  cgmon-rs plot --samples F --cookie C [-o F]         one flow's charts as an SVG

HTTP PATHS (with --http ADDR):
  /                      the host: busiest flows and what limits each, services, recently ended
  /flow/{cookie}         one flow's charts, verdict and record; /flow/{cookie}/live its refresh
  /health                the monitor's own state
  /metrics               Prometheus metrics (OpenMetrics when asked)
  /flows, /flows/{cookie}  active flows as JSON: in cookie order, a page of 1,000 at a time
                         (?limit=N&after=COOKIE, the next page in the Link header); the
                         busiest first with ?order=busy (or rtt, retrans, age) and
                         ?offset=N; ?idle=0 leaves out flows still for 30 s
  /healthz               liveness (200 while dumps succeed)
  /flow-duration-histogram  ended flows' durations, cgmon's plain-text histogram
  /static/style.css, /static/live.js  the pages' style and refresh script

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
     opened, records lost or dropped during the run, destroy events the kernel dropped
     (cgmon_destroy_events_lost_total), or shutdown not finished within -run-shutdown-timeout
  2  a usage error: an unknown flag or a bad value; nothing was sampled or written";

/// `-analyzer-cumulant-kind` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CumulantKind {
    /// Linear interpolation between neighbouring values (cgmon's default).
    Lininterp,
    /// The first value whose cumulative weight reaches the quantile.
    Empirical,
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
    /// Each destroy-event socket's receive buffer (one a namespace; SO_RCVBUFFORCE as root,
    /// else capped at net.core.rmem_max): 32M holds about 52,000 events, 1.2 s of the most
    /// churn seen here. Kernel memory, taken only while events wait
    #[arg(long = "destroy-buffer", env = "CGMON_DESTROY_BUFFER", value_name = "SIZE",
          value_parser = destroy_size, default_value = "32M", help_heading = "Netlink")]
    pub destroy_buffer: u64,
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
    /// CPU for what the monitor does on its own initiative, in percent of one core, as top
    /// sees the process: full dumps, exact polls, the process walks that name each flow's
    /// program, and the process's upkeep (ticks, runtime, start-up; up to a tenth of the
    /// budget). Destroy events, records and HTTP requests come on top
    /// (cgmon_pushed_cpu_seconds_total). Flows whose counters move are
    /// polled every interval; full dumps (which find new flows and refresh idle ones) run as
    /// often as the rest allows, at most every interval: on a host of 200,000 sockets about
    /// every 15 s (cgmon_full_dump_interval_planned_seconds). Naming gets what is left;
    /// flows it cannot cover are marked skipped (cgmon_naming_skipped_total). 0 = no budget:
    /// a full dump every interval (cgmon's way) and naming unthrottled
    #[arg(long = "cpu-budget", env = "CGMON_CPU_BUDGET", value_name = "PERCENT",
          value_parser = cpu_budget, default_value = "2", help_heading = "Run")]
    pub cpu_budget: f64,
    /// With a CPU budget: a full dump at least this often, even when that costs more than
    /// the budget (said in the log and in cgmon_sampling_over_budget). Unset: the budget
    /// alone sets the pace
    #[arg(long = "max-full-interval", env = "CGMON_MAX_FULL_INTERVAL", value_name = "DURATION",
          value_parser = positive_duration, help_heading = "Run")]
    pub max_full_interval: Option<Duration>,
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
    /// Listen address of the HTTP status server, e.g. 127.0.0.1:9464 or :9464 (off by default)
    ///
    /// Serves / (the host page), /flow/{cookie}, /health, /metrics (Prometheus), /flows,
    /// /flows/{cookie}, /healthz and /flow-duration-histogram (see HTTP PATHS below).
    #[arg(
        long = "run-http-server", visible_alias = "http",
        env = "CGMON_RUN_HTTP_SERVER",
        value_name = "ADDR",
        value_parser = crate::units::parse_addr, help_heading = "Run"
    )]
    pub http_server: Option<std::net::SocketAddr>,
    /// A file whose first line is a token every HTTP request must carry (Authorization:
    /// Bearer TOKEN, or Basic with the token as the password), but /healthz: the pages and
    /// /metrics name every local user's programs, peers and pids
    #[arg(
        long = "http-token-file",
        env = "CGMON_HTTP_TOKEN_FILE",
        value_name = "FILE",
        help_heading = "Run"
    )]
    pub http_token_file: Option<PathBuf>,
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

    /// Distinct dest_service label values in /metrics (the verdict counters); later
    /// destinations share "other"
    #[arg(
        long = "metrics-top-destinations",
        env = "CGMON_METRICS_TOP_DESTINATIONS",
        value_name = "K",
        default_value = "20",
        help_heading = "Run"
    )]
    pub top_destinations: usize,

    /// Distinct comm label values (programs) in /metrics; later programs share "other"
    #[arg(
        long = "metrics-top-programs",
        env = "CGMON_METRICS_TOP_PROGRAMS",
        value_name = "K",
        default_value = "20",
        help_heading = "Run"
    )]
    pub top_programs: usize,

    /// Also export kernsnoopd's byte counters under its names:
    /// linux_bytes_sent_total{binary_name} and magma_bytes_sent_total{service_name,dest_service}
    #[arg(long = "metrics-kernsnoopd", env = "CGMON_METRICS_KERNSNOOPD", help_heading = "Run")]
    pub kernsnoopd: bool,

    /// Recently ended flows the web view keeps (their records and up to 300 samples each,
    /// from their whole life; about 45 KB each); 0 = none
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
    /// are counted and not recorded. An idle flow takes about 160 bytes, a busy one about
    /// 600 plus its samples: 4,000,000 idle flows take about 650 MB. 0 = no limit
    #[arg(
        long = "tracker-max-flows",
        visible_alias = "max-flows",
        env = "CGMON_TRACKER_MAX_FLOWS",
        value_name = "N",
        default_value = "4000000",
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
    /// gzip level, 1 (fast) to 9 (small). 1, the default, is our encoder for records: a
    /// fifth of level 3's CPU for files about half as large again (cgmon's default was 9;
    /// docs/running.md, "Output")
    #[arg(long = "writer-compression-level", visible_alias = "compression-level", env = "CGMON_WRITER_COMPRESSION_LEVEL",
          value_name = "N", default_value = "1",
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
    /// Accepted for cgmon; records are always flushed: stdout after each block of the records
    /// ready (as they end, within a tick), files every second
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
    /// Name each record's remote end (DestService) from FILE: lines `CIDR[:PORT[-PORT]] NAME`,
    /// the longest prefix, then the narrowest port range, winning; read again on SIGHUP and
    /// when it changes. Without it, or for addresses it does not hold: local, private or
    /// external
    #[arg(long = "dest-map", env = "CGMON_DEST_MAP", value_name = "FILE", help_heading = "Writer")]
    pub dest_map: Option<PathBuf>,
    /// Do not look for the process behind each flow (Comm, Pid, the comm label). Finding
    /// it reads /proc/PID/fd of the socket's cgroup's processes; other users' processes
    /// need CAP_SYS_PTRACE
    #[arg(long = "no-process", env = "CGMON_NO_PROCESS", help_heading = "Writer")]
    pub no_process: bool,
    /// Records held in memory while the output cannot be written, in bytes of JSON (1M to
    /// 16G); beyond it the oldest are counted as lost
    #[arg(long = "writer-backlog", env = "CGMON_WRITER_BACKLOG", value_name = "SIZE",
          value_parser = backlog_size, default_value = "64M", help_heading = "Writer")]
    pub backlog: u64,

    // ---- ClickHouse ----
    /// Also send every record to ClickHouse over HTTP, exactly once: http://HOST:PORT/ or
    /// https://HOST:PORT/ (a user as http://USER@HOST:PORT/; a proxy's path; ?database=NAME). The database and
    /// table are created when missing (cgmon-rs clickhouse-ddl prints it); a table without
    /// EndTime, Host, SrcIP, SrcPort, DstIP, DstPort and Cookie is not written to; redirects
    /// are not followed
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
    /// missing), and the batch being filled as it fills, so a kill loses none; without it
    /// they wait in memory
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

    /// A PEM file of the CA certificates an https:// server's certificate must chain to
    /// (default: the system's bundle)
    #[arg(
        long = "clickhouse-ca",
        env = "CGMON_CLICKHOUSE_CA",
        value_name = "FILE",
        help_heading = "ClickHouse"
    )]
    pub clickhouse_ca: Option<PathBuf>,

    /// How long one request to ClickHouse may take before it is given up (and the batch
    /// looked up, once no insert of it runs there, before it is sent again)
    #[arg(long = "clickhouse-timeout", env = "CGMON_CLICKHOUSE_TIMEOUT", value_name = "DURATION",
          value_parser = positive_duration, default_value = "30s", help_heading = "ClickHouse")]
    pub clickhouse_timeout: Duration,

    /// How long the sink gathers records into one insert (a batch is also cut at 4,000 rows
    /// or 8 MiB): one insert per interval per host. A fleet of hundreds of hosts raises it,
    /// with --spool-dir so that a kill loses no interval's records (docs/clickhouse.md, "A
    /// fleet"); at most 10m
    #[arg(long = "clickhouse-batch-interval", env = "CGMON_CLICKHOUSE_BATCH_INTERVAL",
          value_name = "DURATION", value_parser = batch_interval, default_value = "1s",
          help_heading = "ClickHouse")]
    pub clickhouse_batch_interval: Duration,

    /// Send batches gzip-compressed; -clickhouse-compress=false sends plain JSON rows
    #[arg(
        long = "clickhouse-compress",
        env = "CGMON_CLICKHOUSE_COMPRESS",
        default_value = "true",
        help_heading = "ClickHouse"
    )]
    pub clickhouse_compress: bool,

    // ---- IPFIX ----
    /// Also export every record as IPFIX (RFC 7011) over UDP to a flow collector at
    /// HOST:PORT (an IPv6 address in brackets, as in a URL); repeat it for more collectors
    /// (CGMON_IPFIX takes a comma-separated list). A collector that is down or a name that
    /// does not resolve is retried and counted, never waited for
    #[arg(long = "ipfix", env = "CGMON_IPFIX", value_name = "HOST:PORT", value_delimiter = ',',
          action = clap::ArgAction::Append, help_heading = "IPFIX")]
    pub ipfix: Vec<String>,
    /// Your private enterprise number (IANA assigns them free): the verdict, cause, RTT
    /// summary, program and destination go out as elements under it. Without it only IANA
    /// and ntop elements are sent
    #[arg(long = "ipfix-pen", env = "CGMON_IPFIX_PEN", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..), help_heading = "IPFIX")]
    pub ipfix_pen: Option<u32>,
    /// The observation domain id in every message [default: a hash of /etc/machine-id,
    /// else of the host name: the same across restarts]
    #[arg(
        long = "ipfix-domain",
        env = "CGMON_IPFIX_DOMAIN",
        value_name = "N",
        help_heading = "IPFIX"
    )]
    pub ipfix_domain: Option<u32>,
    /// The largest IPFIX message, in bytes, headers of IPFIX included (512 to 65000)
    #[arg(long = "ipfix-message-size", env = "CGMON_IPFIX_MESSAGE_SIZE", value_name = "BYTES",
          value_parser = clap::value_parser!(u16).range(512..=65000), default_value = "1400",
          help_heading = "IPFIX")]
    pub ipfix_message_size: u16,

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

impl Cli {
    /// The `-log-<stage>` switches, in [`crate::logging::STAGE_TARGETS`]' order (all on
    /// with `-log-all`).
    pub(super) fn log_stages(&self) -> [bool; 4] {
        [self.log_netlink, self.log_tracker, self.log_analyzer, self.log_writer]
            .map(|on| on || self.log_all)
    }
}
