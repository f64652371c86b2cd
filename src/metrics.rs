//! The monitor's own counters, shared by every stage through an `Arc<Metrics>`.
//!
//! Counters are relaxed atomics: each is written by one stage and read by the reporting
//! paths (SIGUSR1, the HTTP server), which need no ordering between counters.
//! Stage timings are Welford running statistics behind a mutex held for a few ns per call.

use crate::locks::Locked;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub mod catalogue;
pub mod durations;
pub mod process;
pub mod verdicts;

/// A monotonically increasing counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// Adds 1.
    pub fn inc(&self) {
        self.add(1);
    }
    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    /// Mirrors a counter kept elsewhere (the tracker's own), never moving backwards.
    pub fn mirror(&self, v: u64) {
        self.0.fetch_max(v, Ordering::Relaxed);
    }
}

/// A value that goes up and down.
#[derive(Debug, Default)]
pub struct Gauge(AtomicU64);

impl Gauge {
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// Subtracts `n`, stopping at 0.
    pub fn sub(&self, n: u64) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(n)));
    }
    /// Sets the value.
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }
    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Bounds of the discovery-delay histogram, seconds (full dumps are at most 10 s apart).
pub const DISCOVERY_BUCKETS_S: [f64; 8] = [0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0];

/// A histogram with fixed bucket bounds, of relaxed atomics.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum_ns: AtomicU64,
}

impl Histogram {
    /// Buckets with these upper bounds (seconds), plus +Inf.
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
        }
    }
    /// Adds `n` observations of the same value.
    pub fn observe_n(&self, d: Duration, n: u64) {
        let s = d.as_secs_f64();
        let i = self.bounds.iter().position(|&b| s <= b).unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(n, Ordering::Relaxed);
        self.sum_ns.fetch_add((d.as_nanos() as u64).saturating_mul(n), Ordering::Relaxed);
    }

    /// Adds one observation.
    pub fn observe(&self, d: Duration) {
        self.observe_n(d, 1);
    }
    /// (sum in seconds, count, buckets as (upper bound, count in that bucket alone)).
    pub fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let mut total = 0;
        let mut buckets = Vec::with_capacity(self.counts.len());
        for (i, c) in self.counts.iter().enumerate() {
            let n = c.load(Ordering::Relaxed);
            total += n;
            buckets.push((self.bounds.get(i).copied().unwrap_or(f64::INFINITY), n));
        }
        (self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9, total, buckets)
    }
}

/// Bucket bounds of the dump duration histogram, seconds.
pub const DUMP_BUCKETS_S: [f64; 12] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// Running call statistics of one stage (Welford's online mean and variance).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StageTimes {
    /// Calls.
    pub calls: u64,
    /// Fastest call.
    pub min: Duration,
    /// Slowest call.
    pub max: Duration,
    mean_ns: f64,
    m2: f64,
}

impl StageTimes {
    /// Adds one call.
    pub fn push(&mut self, d: Duration) {
        self.calls += 1;
        if self.calls == 1 || d < self.min {
            self.min = d;
        }
        self.max = self.max.max(d);
        let x = d.as_nanos() as f64;
        let delta = x - self.mean_ns;
        self.mean_ns += delta / self.calls as f64;
        self.m2 += delta * (x - self.mean_ns);
    }
    /// Mean call time.
    pub fn mean(&self) -> Duration {
        Duration::from_nanos(self.mean_ns as u64)
    }
    /// Sample standard deviation (0 below two calls).
    pub fn stddev(&self) -> Duration {
        if self.calls < 2 {
            return Duration::ZERO;
        }
        Duration::from_nanos((self.m2 / (self.calls - 1) as f64).sqrt() as u64)
    }
}

/// The pipeline's stages, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// One dump: request, receive, decode and track every socket.
    Dump,
    /// One exact poll of the hot flows: requests, answers, tracking.
    Exact,
    /// Analysis of one batch of ended flows.
    Analyzer,
    /// Writing one batch of records.
    Writer,
}

impl Stage {
    /// Every stage.
    pub const ALL: [Stage; 4] = [Stage::Dump, Stage::Exact, Stage::Analyzer, Stage::Writer];
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Dump => "full dump (netlink + tracker)",
            Stage::Exact => "exact poll (netlink + tracker)",
            Stage::Analyzer => "analyzer",
            Stage::Writer => "writer",
        }
    }
}

/// Every counter of the monitor.
#[derive(Debug)]
pub struct Metrics {
    started: Instant,
    /// Dumps completed (successfully or not).
    pub dumps: Counter,
    /// Dumps that failed (netlink error, timeout).
    pub dump_errors: Counter,
    /// Dumps that completed but were interrupted or truncated (no flow ended on them).
    pub dumps_incomplete: Counter,
    /// Ticks where the previous dump overran the interval.
    pub ticks_overrun: Counter,
    /// Sockets in the last full dump, those of namespaces it left unwalked as at their last
    /// walk.
    pub sockets_last_dump: Gauge,
    /// Flows being tracked.
    pub flows_active: Gauge,
    /// Of them, those kept packed (idle), and the bytes the packed take.
    pub flows_packed: Gauge,
    pub flows_packed_bytes: Gauge,
    /// Flows opened.
    pub flows_opened: Counter,
    /// Flow records (windows included) handed on by the tracker.
    pub flows_ended: Counter,
    /// Flows refused by `-tracker-max-flows`.
    pub flows_refused: Counter,
    /// Flows dropped by `-tracker-min-samples`.
    pub flows_too_short: Counter,
    /// Flows ended, by how their process was found (in the order of `processes::How::ALL`).
    pub flow_owners: [Counter; 5],
    /// Samples retained and deduped.
    pub samples_retained: Counter,
    /// Samples not retained because nothing the analysis uses changed.
    pub samples_deduped: Counter,
    /// Destroy events received.
    pub destroy_events: Counter,
    /// ENOBUFS errors on the destroy sockets: each says that the kernel dropped one or more
    /// events (how many: [`Self::destroy_events_lost`]).
    pub destroy_overruns: Counter,
    /// Destroy events the kernel dropped for want of room in the socket's buffer, read
    /// from its drop counter (`SO_MEMINFO`), summed over the namespaces.
    pub destroy_events_lost: Counter,
    /// When destroy events were last lost (CLOCK_MONOTONIC ns; 0 never): `/healthz` is
    /// degraded for a while after.
    pub destroy_lost_at_ns: Gauge,
    /// The destroy sockets' receive buffers, bytes, summed over the namespaces.
    pub destroy_buffer_bytes: Gauge,
    /// Flows that left the dumps and are waiting for their destroy event.
    pub flows_awaiting_destroy: Gauge,
    /// 1 while the output fails (a write, a flush, a rotation), 0 once it works again.
    pub output_failing: Gauge,
    /// Retained samples held by the flows being tracked.
    pub samples_held: Gauge,
    /// Retained samples of ended flows in the tracker → analyzer channel.
    pub ended_queue_samples: Gauge,
    /// Bytes (estimated) of records and sample lines in the analyzer → writer channel.
    pub writer_queue_bytes: Gauge,
    /// 1 once the writer thread has stopped.
    pub writer_stopped: Gauge,
    /// Windows written early to keep the samples held within -tracker-max-samples.
    pub windows_cut_for_memory: Counter,
    /// The HTTP server's connections.
    pub http: HttpMetrics,
    /// Rotated output files deleted by `--writer-keep-files`/`--writer-keep-size`.
    pub files_deleted: Counter,
    /// Flows that left the dumps and were completed by their destroy event in time.
    pub destroy_awaited: Counter,
    /// Flows that left the dumps and ended as gone when the grace period ran out.
    pub destroy_wait_expired: Counter,
    /// Destroy events for flows already written as gone (counted, not written).
    pub destroy_late: Counter,
    /// Records written.
    pub records_written: Counter,
    /// Partial records not written (no `-writer-partial`).
    pub records_partial_skipped: Counter,
    /// Records dropped because a stage's channel was full.
    pub records_dropped: Counter,
    /// Records lost because the output could not take them within the backlog bound.
    pub records_lost: Counter,
    /// Write or open errors on the output.
    pub write_errors: Counter,
    /// Files rotated.
    pub rotations: Counter,
    /// Records waiting in the writer's backlog.
    pub writer_backlog: Gauge,
    /// Batches waiting in the tracker → analyzer channel.
    pub ended_queue: Gauge,
    /// Batches waiting in the analyzer → writer channel.
    pub writer_queue: Gauge,
    /// Exact polls made (ticks that asked only for the hot flows).
    pub exact_polls: Counter,
    /// Sockets asked for by exact requests.
    pub exact_requests: Counter,
    /// Exact requests answered "gone" (the flow ended there).
    pub exact_gone: Counter,
    /// Exact requests left unanswered (their answers overran the socket buffer).
    pub exact_unanswered: Counter,
    /// Flows in the hot set.
    pub hot_flows: Gauge,
    /// Network namespaces sampled.
    pub netns_sampled: Gauge,
    /// Active flows per namespace index, when several are sampled.
    pub netns_flows: Mutex<Vec<u64>>,
    /// Network namespaces found but not sampled: their file could not be read or entered
    /// (missing capabilities), as of the last scan.
    pub netns_unreachable: Gauge,
    /// Namespaces a full dump left unwalked: no segment sent or received in them since
    /// their last walk.
    pub netns_walks_skipped: Counter,
    /// Namespaces sampled that share the host's TCP hash table (each of their walks reads
    /// every TCP socket of the host), as of the last scan.
    pub netns_shared_tcp_hash: Gauge,
    /// Full dumps taken because the hot set was too large for exact polls to be cheaper.
    pub full_dumps_cheaper: Counter,
    /// Time between the last two full dumps, ns: the full-dump interval achieved.
    pub full_dump_interval_ns: Gauge,
    /// The full-dump interval the budget allows now, ns.
    pub full_dump_interval_planned_ns: Gauge,
    /// CPU time the sampling task spent in dumps and exact polls (the kernel's share
    /// included), ns.
    pub sampling_cpu_ns: Counter,
    /// `--cpu-budget`, in millionths of one core.
    pub cpu_budget_ppm: Gauge,
    /// The budget's ledger, shared by the sampling task and the process walker.
    pub budget: crate::budget::Budget,
    /// CPU time the process walks that name flows' programs spent, ns.
    pub naming_cpu_ns: Counter,
    /// Naming requests answered with a process found.
    pub naming_named: Counter,
    /// Naming requests walked for and not found (the socket had closed, or its process is
    /// not readable).
    pub naming_not_found: Counter,
    /// Naming requests not walked for: the budget could not cover them.
    pub naming_skipped: Counter,
    /// What the pace planned now costs (hot flows' polls and full dumps), in millionths of
    /// one core.
    pub sampling_cpu_planned_ppm: Gauge,
    /// 1 while that plan costs more than the budget.
    pub over_budget: Gauge,
    /// Flows found by a full dump more than an interval after the one before: they may
    /// have begun up to that long before they were found.
    pub flows_discovered_late: Counter,
    /// For each flow discovered late, how late it may have been found (the time since
    /// the full dump before).
    pub discovery_delay: Histogram,
    /// Dump durations.
    pub dump_seconds: Histogram,
    /// How late each dump started after its point on the interval's grid: the sampling
    /// interval's jitter.
    pub tick_lateness: Histogram,
    /// Time spent decoding and tracking (the dump's CPU share), ns.
    pub decode_ns: Counter,
    /// Flows ended in the last dump, and that dump's interval since the previous one (ns):
    /// the instantaneous churn.
    pub last_churn: Mutex<(u64, u64)>,
    stages: Mutex<[StageTimes; 4]>,
    /// ns after `started` of the last successful dump, +1 (0: none yet).
    last_good_dump: AtomicU64,
    /// Durations of the flows (and windows) the analyzer received, for
    /// `/flow-duration-histogram`.
    pub flow_durations: durations::DurationHistogram,
    /// The ClickHouse sink (`--clickhouse`), when it runs.
    pub sink: SinkMetrics,
    /// The IPFIX exporter's (`--ipfix`).
    pub ipfix: IpfixMetrics,
    /// Verdicts and limited time per service pair (the writer adds each record).
    pub verdicts: verdicts::VerdictCounts,
}

/// The fleet sink's state, as `/metrics`, `/healthz` and the status page show it.
#[derive(Debug)]
pub struct SinkMetrics {
    /// `--clickhouse` is set.
    pub enabled: Gauge,
    /// Records the server acknowledged.
    pub sent: Counter,
    /// Records dropped: the queue or spool was full, the hand-off to the sink was full, or
    /// they were not delivered nor spooled by the end of the run.
    pub dropped: Counter,
    /// Records and bytes (compressed) waiting, in memory or in the spool.
    pub waiting_records: Gauge,
    /// Bytes (compressed) waiting.
    pub waiting_bytes: Gauge,
    /// Batches waiting in the spool directory.
    pub spooled_batches: Gauge,
    /// 1 while the last attempt failed.
    pub failing: Gauge,
    /// Failed attempts.
    pub failures: Counter,
    /// Batches found stored after a lost reply (not sent twice).
    pub found_stored: Counter,
    /// Inserts the server refused for too many parts (`Code: 252`).
    pub part_pressure: Counter,
    /// The batch interval in force, ns (`--clickhouse-batch-interval`, stretched under
    /// part pressure).
    pub batch_interval_ns: Gauge,
    /// Time to deliver each batch (the successful call).
    pub batch_seconds: Histogram,
    /// The last failure, while failing (no credentials: they are never in a URL or error).
    pub last_error: Mutex<Option<String>>,
}

/// The HTTP server's connections.
#[derive(Debug, Default)]
pub struct HttpMetrics {
    /// Open now.
    pub connections: Gauge,
    /// Closed at once for the connection cap.
    pub refused: Counter,
    /// Closed for the header-read, write or idle timeout.
    pub timeouts: Counter,
    /// Idle or half-sent ones closed to make room for a newcomer at the cap.
    pub evicted: Counter,
    /// Accepts that failed (e.g. out of file descriptors).
    pub accept_errors: Counter,
}

/// The IPFIX exporter's counts. Records are counted once per collector: two collectors
/// that each got a record count two.
#[derive(Debug, Default)]
pub struct IpfixMetrics {
    /// `--ipfix` is set.
    pub enabled: Gauge,
    /// Data records a socket took.
    pub sent: Counter,
    /// Data records not sent: the hand-off or a socket buffer was full, or the collector
    /// was down or its name did not resolve.
    pub dropped: Counter,
    /// Messages a socket took.
    pub messages: Counter,
    /// Messages over `--ipfix-message-size`: a record too large to share one.
    pub oversize: Counter,
    /// Sends refused: the collector's host answered ICMP port unreachable.
    pub refused: Counter,
    /// Sends not made because the collector's name did not resolve.
    pub unresolved: Counter,
    /// Sends the socket's buffer could not take.
    pub full: Counter,
    /// Sends that failed otherwise.
    pub other: Counter,
    /// Batches the writer could not hand to the exporter (its thread far behind).
    pub handoff_full: Counter,
    /// Collectors whose last send failed.
    pub failing: Gauge,
}

/// Batch delivery latency buckets, seconds.
pub const SINK_BUCKETS_S: [f64; 10] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

impl SinkMetrics {
    /// The last failure's text while the sink fails.
    pub fn failing_with(&self) -> Option<String> {
        self.last_error.locked().clone()
    }
}

impl Default for SinkMetrics {
    fn default() -> Self {
        Self {
            enabled: Gauge::default(),
            sent: Counter::default(),
            dropped: Counter::default(),
            waiting_records: Gauge::default(),
            waiting_bytes: Gauge::default(),
            spooled_batches: Gauge::default(),
            failing: Gauge::default(),
            failures: Counter::default(),
            found_stored: Counter::default(),
            part_pressure: Counter::default(),
            batch_interval_ns: Gauge::default(),
            batch_seconds: Histogram::new(&SINK_BUCKETS_S),
            last_error: Mutex::new(None),
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(Duration::from_secs(1))
    }
}

impl Metrics {
    /// Metrics for sampling every `interval` (it sets the flow-duration histogram's steps).
    pub fn new(interval: Duration) -> Self {
        Self {
            started: Instant::now(),
            dumps: Counter::default(),
            dump_errors: Counter::default(),
            dumps_incomplete: Counter::default(),
            ticks_overrun: Counter::default(),
            sockets_last_dump: Gauge::default(),
            flows_active: Gauge::default(),
            flows_packed: Gauge::default(),
            flows_packed_bytes: Gauge::default(),
            flows_opened: Counter::default(),
            flows_ended: Counter::default(),
            flows_refused: Counter::default(),
            flows_too_short: Counter::default(),
            flow_owners: Default::default(),
            samples_retained: Counter::default(),
            samples_deduped: Counter::default(),
            destroy_events: Counter::default(),
            destroy_overruns: Counter::default(),
            destroy_events_lost: Counter::default(),
            destroy_lost_at_ns: Gauge::default(),
            destroy_buffer_bytes: Gauge::default(),
            flows_awaiting_destroy: Gauge::default(),
            output_failing: Gauge::default(),
            samples_held: Gauge::default(),
            ended_queue_samples: Gauge::default(),
            writer_queue_bytes: Gauge::default(),
            writer_stopped: Gauge::default(),
            windows_cut_for_memory: Counter::default(),
            http: HttpMetrics::default(),
            files_deleted: Counter::default(),
            destroy_awaited: Counter::default(),
            destroy_wait_expired: Counter::default(),
            destroy_late: Counter::default(),
            records_written: Counter::default(),
            records_partial_skipped: Counter::default(),
            records_dropped: Counter::default(),
            records_lost: Counter::default(),
            write_errors: Counter::default(),
            rotations: Counter::default(),
            writer_backlog: Gauge::default(),
            ended_queue: Gauge::default(),
            writer_queue: Gauge::default(),
            exact_polls: Counter::default(),
            exact_requests: Counter::default(),
            exact_gone: Counter::default(),
            exact_unanswered: Counter::default(),
            hot_flows: Gauge::default(),
            netns_sampled: Gauge::default(),
            netns_flows: Mutex::new(Vec::new()),
            netns_unreachable: Gauge::default(),
            netns_walks_skipped: Counter::default(),
            netns_shared_tcp_hash: Gauge::default(),
            full_dumps_cheaper: Counter::default(),
            full_dump_interval_ns: Gauge::default(),
            full_dump_interval_planned_ns: Gauge::default(),
            sampling_cpu_ns: Counter::default(),
            cpu_budget_ppm: Gauge::default(),
            budget: crate::budget::Budget::default(),
            naming_cpu_ns: Counter::default(),
            naming_named: Counter::default(),
            naming_not_found: Counter::default(),
            naming_skipped: Counter::default(),
            sampling_cpu_planned_ppm: Gauge::default(),
            over_budget: Gauge::default(),
            flows_discovered_late: Counter::default(),
            discovery_delay: Histogram::new(&DISCOVERY_BUCKETS_S),
            dump_seconds: Histogram::new(&DUMP_BUCKETS_S),
            tick_lateness: Histogram::new(&DUMP_BUCKETS_S),
            decode_ns: Counter::default(),
            last_churn: Mutex::new((0, 0)),
            stages: Mutex::new([StageTimes::default(); 4]),
            last_good_dump: AtomicU64::new(0),
            flow_durations: durations::DurationHistogram::new(interval),
            sink: SinkMetrics::default(),
            ipfix: IpfixMetrics::default(),
            verdicts: verdicts::VerdictCounts::default(),
        }
    }
}

impl Metrics {
    /// Records one call of `stage`.
    pub fn time(&self, stage: Stage, d: Duration) {
        let i = Stage::ALL.iter().position(|&s| s == stage).unwrap_or(0);
        // A poisoned lock only means another thread panicked mid-push; the numbers are
        // still usable.
        let mut g = self.stages.locked();
        g[i].push(d);
    }

    /// A copy of the stage timings, in [`Stage::ALL`] order.
    pub fn stage_times(&self) -> [StageTimes; 4] {
        *self.stages.locked()
    }

    /// Marks a successful dump now.
    pub fn dump_ok(&self) {
        let ns = self.started.elapsed().as_nanos() as u64 + 1;
        self.last_good_dump.store(ns, Ordering::Relaxed);
    }

    /// Time since the last successful dump, if any.
    pub fn since_last_good_dump(&self) -> Option<Duration> {
        match self.last_good_dump.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(self.started.elapsed().saturating_sub(Duration::from_nanos(ns - 1))),
        }
    }

    /// Time since start.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// The figures as a multi-line text report (SIGUSR1).
    pub fn report(&self) -> String {
        let mut s = String::new();
        let up = self.uptime().as_secs_f64().max(1e-9);
        let _ = writeln!(s, "uptime {:.1} s", up);
        let _ = writeln!(s, "churn: {}", self.churn_text(up));
        for section in catalogue::Section::ALL.into_iter().filter(|x| x.shown(self)) {
            let items: Vec<String> = section.series().map(|x| x.phrase(self)).collect();
            let _ = write!(s, "{}: {}", section.name(), items.join(", "));
            match section {
                catalogue::Section::Sampling => {
                    let _ = write!(
                        s,
                        "; sampling CPU {:.2} % of a core",
                        self.sampling_cpu_ns.get() as f64 / 1e9 / up * 100.0
                    );
                }
                catalogue::Section::Sink => {
                    if let Some(e) = self.sink.failing_with() {
                        let _ = write!(s, "; failing: {e}");
                    }
                }
                _ => {}
            }
            s.push('\n');
        }
        let _ = writeln!(s, "stage times (µs): calls min mean max stddev");
        for (st, t) in Stage::ALL.iter().zip(self.stage_times()) {
            let us = |d: Duration| d.as_secs_f64() * 1e6;
            let _ = writeln!(
                s,
                "  {:<26} {:>8} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
                st.name(),
                t.calls,
                us(t.min),
                us(t.mean()),
                us(t.max),
                us(t.stddev())
            );
        }
        if let Some(rss) = rss_bytes() {
            let _ = writeln!(s, "memory: RSS {:.1} MiB", rss as f64 / (1 << 20) as f64);
        }
        s
    }

    /// Flows opened and ended, and the churn: over the last interval measured and since the
    /// start (`up` seconds).
    pub fn churn_text(&self, up: f64) -> String {
        let (n, ns) = *self.last_churn.locked();
        let now = if ns > 0 { n as f64 / (ns as f64 / 1e9) } else { 0.0 };
        format!(
            "{} opened, {} ended; {now:.2} flows/s now, {:.2} flows/s mean",
            self.flows_opened.get(),
            self.flows_ended.get(),
            self.flows_ended.get() as f64 / up
        )
    }
}

/// The process's resident set size, bytes.
pub fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn welford_matches_two_pass() {
        let xs = [3u64, 9, 1, 7, 5];
        let mut t = StageTimes::default();
        for x in xs {
            t.push(Duration::from_micros(x));
        }
        assert_eq!(t.calls, 5);
        assert_eq!(t.min, Duration::from_micros(1));
        assert_eq!(t.max, Duration::from_micros(9));
        assert_eq!(t.mean(), Duration::from_micros(5));
        // Sample variance of 1,3,5,7,9 µs is 10 µs², so stddev is 3162.28 ns.
        assert_eq!(t.stddev().as_nanos(), 3162);
    }

    #[test]
    fn report_names_units_and_counts() {
        let m = Metrics::default();
        m.records_written.add(7);
        m.time(Stage::Writer, Duration::from_micros(10));
        let r = m.report();
        assert!(r.contains("7 written"), "{r}");
        assert!(r.contains("stage times (µs)"));
        assert!(r.lines().any(|l| l.trim_start().starts_with("writer") && l.contains("10.0")));
    }
}
