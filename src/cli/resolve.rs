//! The one resolution step: the parsed options become every stage's typed settings, and the
//! raw options go no further than this file.

use std::path::PathBuf;
use std::time::Duration;

use super::Cli;
use crate::analysis::AnalyzerConfig;
use crate::analysis::stage::StageConfig;
use crate::filter::Expr;
use crate::poll::TaskConfig;
use crate::sampler::SamplerConfig;
use crate::sampler::source::SocketOptions;
use crate::tracker::TrackerConfig;
use crate::writer::file::FileConfig;
use crate::writer::{Target, WriterConfig};

/// What validation made of the options that needed more than a type: the filter (compiled
/// once), the analyzer's settings, the output file name, and the start-up summary.
pub(super) struct Parts {
    pub filter: Option<Expr>,
    pub bytecode: Option<Vec<u8>>,
    pub analyzer: AnalyzerConfig,
    pub file_name: String,
    pub summary: String,
    pub sink: Option<crate::sink::SinkConfig>,
    pub ipfix: Option<crate::ipfix::IpfixConfig>,
    pub http_token: Option<crate::units::Secret>,
    pub warnings: Vec<String>,
}

/// Every stage's settings, resolved once from the parsed command line; the raw options go
/// no further than [`crate::cli::parse`].
#[derive(Debug, Clone)]
pub struct Settings {
    /// Sampling: states (listeners added), filter, buffers.
    pub sampler: SamplerConfig,
    /// The sock_diag socket's receive buffer.
    pub socket: SocketOptions,
    /// The tracker; its destroy grace applies only when destroy events are read.
    pub tracker: TrackerConfig,
    /// The sampling schedule and error policy.
    pub task: TaskConfig,
    /// The analyzer stage.
    pub analyzer: StageConfig,
    /// The output.
    pub writer: WriterConfig,
    /// `--samples-out`: the sample stream's file.
    pub samples_out: Option<FileConfig>,
    /// The HTTP server, when asked for.
    pub http: Option<HttpSettings>,
    /// `--netns`: which network namespaces to sample.
    pub netns: crate::netns::Which,
    /// `--netns-rescan`.
    pub netns_rescan: Duration,
    /// `-run-duration` (0: until a signal).
    pub run_duration: Duration,
    /// `-run-shutdown-timeout`.
    pub shutdown_timeout: Duration,
    /// The one-line summary logged at start.
    pub summary: String,
    /// `--clickhouse`: the fleet sink, when asked for.
    pub sink: Option<crate::sink::SinkConfig>,
    /// `--ipfix`: the exporter, when asked for.
    pub ipfix: Option<crate::ipfix::IpfixConfig>,
    /// `--dest-map`, read and checked (the writer reads it again on SIGHUP).
    pub dest_map: Option<std::path::PathBuf>,
    /// Look for the process behind each flow (not `--no-process`).
    pub process: bool,
    /// `--http-token-file`'s token: every HTTP request but /healthz must carry it.
    pub http_token: Option<crate::units::Secret>,
    /// Warnings the flags earned (a secret file every user can read), logged at the start.
    pub warnings: Vec<String>,
}

/// `-run-http-server` and its bounds.
#[derive(Debug, Clone, Copy)]
pub struct HttpSettings {
    /// Where to listen.
    pub addr: std::net::SocketAddr,
    /// Timeouts and the connection cap.
    pub limits: crate::http::Limits,
    /// `--metrics-top-services`.
    pub top_services: usize,
    /// `--metrics-top-destinations`.
    pub top_destinations: usize,
    /// `--metrics-top-programs`.
    pub top_programs: usize,
    /// `--metrics-kernsnoopd`.
    pub kernsnoopd: bool,
    /// `--recent-flows`.
    pub recent_flows: usize,
}

/// Resolves the parsed command line into every stage's settings.
pub(super) fn resolve(c: &Cli, parts: Parts) -> Settings {
    let window = c.window_samples.unwrap_or_else(|| TrackerConfig::window_for_interval(c.interval));
    let unported_attempts = parts.filter.is_none();
    Settings {
        sampler: SamplerConfig {
            // Listeners too, always: they start no flow, but name the listening ports that
            // label the per-service metrics and the accepting side of short flows.
            states: c.states.unwrap_or_default().with_listeners(),
            filter: parts.filter,
            bytecode: parts.bytecode,
            read_bufsize: c.read_bufsize as usize,
            recv_timeout: c.receive_timeout,
            ..SamplerConfig::default()
        },
        socket: SocketOptions {
            rcvbuf: (c.receive_bufsize > 0).then_some(c.receive_bufsize as usize),
            rcvbuf_force: (c.receive_bufsize_force > 0).then_some(c.receive_bufsize_force as usize),
            force_if_allowed: false,
            destroy_buffer: c.destroy_buffer as usize,
        },
        tracker: TrackerConfig {
            max_flows: c.max_flows,
            min_samples: c.min_samples,
            window_samples: window,
            destroy_grace_ns: c.destroy_grace.as_nanos() as u64,
            max_samples: c.max_samples,
            tiers: c.cpu_budget > 0.0,
            hot_linger_ns: hot_linger(c.interval).as_nanos() as u64,
            pause_ns: pause(c.interval, c.cpu_budget > 0.0).as_nanos() as u64,
            syn_retries: syn_retries(),
            unported_attempts,
        },
        task: TaskConfig {
            interval: c.interval,
            error_delay: c.error_delay,
            max_errors: c.max_errors,
            cpu_budget: c.cpu_budget,
            max_full_interval: c.max_full_interval,
            whole_process: false,
            upkeep_cap: crate::budget::UPKEEP_CAP,
        },
        analyzer: StageConfig {
            analysis: parts.analyzer,
            write_partial: c.partial,
            samples_out: c.samples_out.is_some(),
            chart_points: 0,
        },
        writer: writer_config(c, &parts.file_name),
        samples_out: samples_out(c),
        http: c.http_server.map(|addr| HttpSettings {
            addr,
            limits: crate::http::Limits {
                header_timeout: c.http_header_timeout,
                idle_timeout: c.http_idle_timeout,
                max_connections: c.http_max_connections as usize,
                write_timeout: c.http_write_timeout,
            },
            top_services: c.top_services,
            top_destinations: c.top_destinations,
            top_programs: c.top_programs,
            kernsnoopd: c.kernsnoopd,
            recent_flows: c.recent_flows as usize,
        }),
        netns: c.netns.clone(),
        netns_rescan: c.netns_rescan,
        run_duration: c.run_duration,
        shutdown_timeout: c.shutdown_timeout,
        summary: format!("{} window_samples={window}", parts.summary),
        sink: parts.sink,
        ipfix: parts.ipfix,
        dest_map: c.dest_map.clone(),
        process: !c.no_process,
        http_token: parts.http_token,
        warnings: parts.warnings,
    }
}

fn writer_config(c: &Cli, file_name: &str) -> WriterConfig {
    let keep = crate::writer::file::Keep { files: c.keep_files, bytes: c.keep_size };
    let target = match &c.dir {
        Some(dir) => Target::File(FileConfig {
            dir: dir.clone(),
            name: file_name.to_string(),
            level: c.compression_level,
            keep,
        }),
        None => Target::Stdout,
    };
    WriterConfig {
        target,
        pretty: c.pretty,
        rotate_size: c.rotate_size.filter(|&n| n > 0),
        rotate_interval: (!c.rotate_interval.is_zero()).then_some(c.rotate_interval),
        backlog_bytes: c.backlog,
    }
}

/// `--samples-out`'s file, kept and compressed as the records' files are.
fn samples_out(c: &Cli) -> Option<FileConfig> {
    let keep = crate::writer::file::Keep { files: c.keep_files, bytes: c.keep_size };
    c.samples_out.as_ref().map(|p| {
        let dir = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = p.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        FileConfig { dir, name, level: c.compression_level, keep }
    })
}

/// The tracker's least pause ([`TrackerConfig::pause_ns`]): three ticks, and with the tiers
/// at least 1.5 × the longest a namespace where nothing moves goes unwalked. The poller
/// raises it to 1.5 × the full-dump interval the budget allows, when that is longer.
fn pause(interval: Duration, tiers: bool) -> Duration {
    let rewalk = if tiers { crate::poll::pace::NAMESPACE_REWALK * 3 / 2 } else { Duration::ZERO };
    (interval * 3).max(rewalk)
}

/// How long a flow stays hot once still: ten ticks, and at least a second, so that a flow
/// that pauses between requests is not dropped to the full-dump pace between them.
fn hot_linger(interval: Duration) -> Duration {
    (interval * 10).max(Duration::from_secs(1))
}

/// `net.ipv4.tcp_syn_retries` of the monitor's namespace (6 when unreadable: the kernel's
/// default), what tells a connect the kernel gave up from one its application abandoned.
fn syn_retries() -> u8 {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_syn_retries")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(6)
}
