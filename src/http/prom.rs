//! `/metrics`: the monitor's own figures and per-service flow aggregates in Prometheus text
//! format (OpenMetrics), through prometheus-client's `Collector`: values are read from the
//! shared atomics and the tracker's published accounts at scrape time, so sampling never
//! waits on a scrape.
//!
//! Names take the `cgmon_` prefix and base units (seconds, bytes); counters end in `_total`.
//! Flow aggregates carry two labels, bounding cardinality:
//! - `service`: the systemd unit or container of the sockets' cgroup
//!   ([`crate::services`]); the first `top_services` distinct services keep their own label
//!   and later ones share `other` (a label, once given, never moves, so counters never go
//!   backwards);
//! - `port`: the local port when it is a listening port (the server side of a flow), else
//!   `0`; the first [`MAX_PORT_LABELS`] ports keep their own label, later ones `other`;
//! - with `--netns` sampling more than the monitor's own namespace, `netns`: the namespace's
//!   name (its `ip netns` name, `pod:<uid>`, `<runtime>:<container>`, `host`), the first
//!   `top_services` distinct ones keeping their own label, later ones `other`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::metrics::Metrics;
use crate::services::Services;
use crate::tracker::accounts::{Account, NO_UID, OVERFLOW_CGROUP, RTT_BUCKETS_S};

/// Distinct `port` label values before the rest share `other`.
pub const MAX_PORT_LABELS: usize = 64;

/// Default distinct `service` label values (`--metrics-top-services`).
pub const DEFAULT_TOP_SERVICES: usize = 20;

/// The service an account's owner belongs to: its cgroup's, or with none, its sockets'
/// uid's; the overflow account is `other`. (`/metrics` and the web view name services
/// alike.)
pub(crate) fn owner_name(services: &mut Services, cgroup_id: u64, uid: u32) -> String {
    if cgroup_id == OVERFLOW_CGROUP {
        "other".into()
    } else if cgroup_id == 0 && uid != NO_UID {
        services.name_of_uid(uid)
    } else {
        services.name(cgroup_id)
    }
}

/// Decides label values, once per cgroup and port.
#[derive(Debug)]
struct Labeler {
    services: Arc<Mutex<Services>>,
    by_owner: FxHashMap<(u64, u32), String>,
    given: FxHashSet<String>,
    top: usize,
    ports: FxHashSet<u16>,
    netns_given: FxHashSet<String>,
}

impl Labeler {
    /// The label of an account's owner: its cgroup, or with none, its sockets' uid.
    fn service(&mut self, cgroup_id: u64, uid: u32) -> String {
        if let Some(s) = self.by_owner.get(&(cgroup_id, uid)) {
            return s.clone();
        }
        let name = {
            let mut s = self.services.lock().unwrap_or_else(|e| e.into_inner());
            owner_name(&mut s, cgroup_id, uid)
        };
        let label = if self.given.contains(&name) || self.given.len() < self.top {
            self.given.insert(name.clone());
            name
        } else {
            "other".into()
        };
        self.by_owner.insert((cgroup_id, uid), label.clone());
        label
    }

    /// A namespace's label: its name while fewer than `top` names were given, else `other`;
    /// a name given keeps its label.
    fn netns(&mut self, name: &str) -> String {
        if self.netns_given.contains(name) || self.netns_given.len() < self.top {
            self.netns_given.insert(name.to_string());
            name.to_string()
        } else {
            "other".into()
        }
    }

    fn port(&mut self, p: u16) -> String {
        if p == 0 {
            return "0".into();
        }
        if self.ports.contains(&p) || self.ports.len() < MAX_PORT_LABELS {
            self.ports.insert(p);
            p.to_string()
        } else {
            "other".into()
        }
    }
}

/// Sums per label pair.
#[derive(Debug, Default, Clone)]
struct Agg {
    opened: u64,
    closed: u64,
    acked: u64,
    received: u64,
    retrans: u64,
    rtt: Vec<u64>,
    rtt_sum: f64,
}

/// The collector behind `/metrics`.
#[derive(Debug)]
pub struct Exporter {
    metrics: Arc<Metrics>,
    accounts: Arc<Mutex<Vec<Account>>>,
    labels: Mutex<Labeler>,
    /// Namespace names by index, when more than one namespace is sampled.
    netns: Option<Arc<Mutex<Vec<String>>>>,
}

impl Exporter {
    /// An exporter of `metrics` and the accounts the tracker publishes into `accounts`.
    pub fn new(
        metrics: Arc<Metrics>,
        accounts: Arc<Mutex<Vec<Account>>>,
        services: Arc<Mutex<Services>>,
        top_services: usize,
    ) -> Self {
        let labels = Labeler {
            services,
            by_owner: FxHashMap::default(),
            given: FxHashSet::default(),
            top: top_services,
            ports: FxHashSet::default(),
            netns_given: FxHashSet::default(),
        };
        Self { metrics, accounts, labels: Mutex::new(labels), netns: None }
    }

    /// Labels the flow aggregates with their network namespace, named by index in `names`
    /// (which the namespace scanner keeps up to date).
    pub fn with_netns(mut self, names: Arc<Mutex<Vec<String>>>) -> Self {
        self.netns = Some(names);
        self
    }

    /// A registry holding this exporter.
    pub fn registry(self: Arc<Self>) -> Registry {
        let mut r = Registry::default();
        r.register_collector(Box::new(self));
        r
    }

    fn aggregate(&self) -> BTreeMap<(String, String, String), Agg> {
        let accounts = self.accounts.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let names =
            self.netns.as_ref().map(|n| n.lock().unwrap_or_else(|e| e.into_inner()).clone());
        let mut l = self.labels.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: BTreeMap<(String, String, String), Agg> = BTreeMap::new();
        for a in &accounts {
            if a.opened == 0 && a.bytes_acked == 0 && a.bytes_received == 0 {
                continue; // the unused overflow slot
            }
            let ns = match &names {
                Some(n) => {
                    let name = n.get(a.netns as usize).map_or("other", String::as_str);
                    l.netns(name)
                }
                None => String::new(),
            };
            let key = (ns, l.service(a.cgroup_id, a.uid), l.port(a.port));
            let g = out
                .entry(key)
                .or_insert_with(|| Agg { rtt: vec![0; RTT_BUCKETS_S.len() + 1], ..Agg::default() });
            g.opened += a.opened;
            g.closed += a.closed;
            g.acked += a.bytes_acked;
            g.received += a.bytes_received;
            g.retrans += a.bytes_retrans;
            for (t, v) in g.rtt.iter_mut().zip(&a.rtt_buckets) {
                *t += v;
            }
            g.rtt_sum += a.rtt_sum_us as f64 / 1e6;
        }
        out
    }
}

fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    e.encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<NoLabelSet, _, u64>(&v, None)
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> std::fmt::Result {
    e.encode_descriptor(name, help, None, MetricType::Gauge)?.encode_gauge(&v)
}

/// A plain series of the monitor's own: a counter or a gauge, read from the metrics.
#[derive(Clone, Copy)]
enum Value {
    Counter(fn(&Metrics) -> u64),
    Gauge(fn(&Metrics) -> u64),
}

/// The monitor's plain series, in the order they are exposed: name, help, value.
const SERIES: &[(&str, &str, Value)] = &[
    ("cgmon_dumps", "sock_diag dumps taken", Value::Counter(|m| m.dumps.get())),
    (
        "cgmon_netlink_errors",
        "Dumps that failed (netlink error or timeout)",
        Value::Counter(|m| m.dump_errors.get()),
    ),
    (
        "cgmon_dumps_incomplete",
        "Dumps interrupted (NLM_F_DUMP_INTR), truncated or malformed; no flow ended on them",
        Value::Counter(|m| m.dumps_incomplete.get()),
    ),
    (
        "cgmon_ticks_overrun",
        "Ticks missed because a dump outlasted the interval",
        Value::Counter(|m| m.ticks_overrun.get()),
    ),
    (
        "cgmon_dump_sockets",
        "Sockets in the last full dump (a namespace it did not walk: as at its last walk)",
        Value::Gauge(|m| m.sockets_last_dump.get()),
    ),
    (
        "cgmon_exact_polls",
        "Ticks that asked only for the hot flows, by exact requests",
        Value::Counter(|m| m.exact_polls.get()),
    ),
    (
        "cgmon_exact_requests",
        "Sockets asked for by exact requests",
        Value::Counter(|m| m.exact_requests.get()),
    ),
    (
        "cgmon_exact_gone",
        "Exact requests answered gone (ENOENT/ESTALE): the flow ended there",
        Value::Counter(|m| m.exact_gone.get()),
    ),
    (
        "cgmon_exact_unanswered",
        "Exact requests whose answers overran the socket buffer (asked again at the next tick)",
        Value::Counter(|m| m.exact_unanswered.get()),
    ),
    (
        "cgmon_hot_flows",
        "Flows polled every tick (their counters move)",
        Value::Gauge(|m| m.hot_flows.get()),
    ),
    (
        "cgmon_netns_sampled",
        "Network namespaces sampled (--netns)",
        Value::Gauge(|m| m.netns_sampled.get()),
    ),
    (
        "cgmon_netns_unreachable",
        "Network namespaces found but not sampled: not readable or not enterable (capabilities)",
        Value::Gauge(|m| m.netns_unreachable.get()),
    ),
    (
        "cgmon_netns_walks_skipped",
        "Namespaces a full dump did not walk: no TCP segment sent or received in them since their last walk",
        Value::Counter(|m| m.netns_walks_skipped.get()),
    ),
    (
        "cgmon_netns_shared_tcp_hash",
        "Namespaces sampled that share the host's TCP hash table (each walk of one reads every TCP socket of the host)",
        Value::Gauge(|m| m.netns_shared_tcp_hash.get()),
    ),
    (
        "cgmon_full_dumps_cheaper",
        "Full dumps taken because the hot set was too large for exact requests to be cheaper",
        Value::Counter(|m| m.full_dumps_cheaper.get()),
    ),
    (
        "cgmon_flows_discovered_late",
        "Flows found by a full dump more than an interval after the one before",
        Value::Counter(|m| m.flows_discovered_late.get()),
    ),
    ("cgmon_flows_active", "Flows being tracked", Value::Gauge(|m| m.flows_active.get())),
    (
        "cgmon_flows_refused",
        "Flows not recorded for -tracker-max-flows",
        Value::Counter(|m| m.flows_refused.get()),
    ),
    (
        "cgmon_destroy_events",
        "Socket destroy events received",
        Value::Counter(|m| m.destroy_events.get()),
    ),
    (
        "cgmon_destroy_overruns",
        "Destroy events lost to receive-buffer overruns",
        Value::Counter(|m| m.destroy_overruns.get()),
    ),
    (
        "cgmon_flows_awaiting_destroy",
        "Flows that left the dumps, waiting for their destroy event (-tracker-destroy-grace)",
        Value::Gauge(|m| m.flows_awaiting_destroy.get()),
    ),
    (
        "cgmon_destroy_awaited",
        "Flows that left the dumps and got their destroy event within the grace period",
        Value::Counter(|m| m.destroy_awaited.get()),
    ),
    (
        "cgmon_destroy_wait_expired",
        "Flows that left the dumps and ended as gone: no destroy event within the grace period",
        Value::Counter(|m| m.destroy_wait_expired.get()),
    ),
    (
        "cgmon_destroy_events_late",
        "Destroy events for flows already written as gone (counted, not written again)",
        Value::Counter(|m| m.destroy_late.get()),
    ),
    (
        "cgmon_output_failing",
        "1 while the output fails (write, flush or rotation; records wait in the backlog)",
        Value::Gauge(|m| m.output_failing.get()),
    ),
    (
        "cgmon_samples_held",
        "Retained samples held by the flows being tracked (-tracker-max-samples bounds them)",
        Value::Gauge(|m| m.samples_held.get()),
    ),
    (
        "cgmon_windows_cut_for_memory",
        "Windows written early to keep the samples held within -tracker-max-samples",
        Value::Counter(|m| m.windows_cut_for_memory.get()),
    ),
    ("cgmon_http_connections", "HTTP connections open", Value::Gauge(|m| m.http_connections.get())),
    (
        "cgmon_http_refused",
        "HTTP connections closed at once: at --http-max-connections with every slot \
         mid-response",
        Value::Counter(|m| m.http_refused.get()),
    ),
    (
        "cgmon_http_evicted",
        "Idle or half-sent HTTP connections closed to make room for a new one at \
         --http-max-connections",
        Value::Counter(|m| m.http_evicted.get()),
    ),
    (
        "cgmon_http_timeouts",
        "HTTP connections closed by the header-read, write or idle timeout",
        Value::Counter(|m| m.http_timeouts.get()),
    ),
    (
        "cgmon_http_accept_errors",
        "HTTP accepts that failed (e.g. out of file descriptors)",
        Value::Counter(|m| m.http_accept_errors.get()),
    ),
    ("cgmon_records_written", "Flow records written", Value::Counter(|m| m.records_written.get())),
    (
        "cgmon_writer_files_deleted",
        "Rotated output files deleted to stay within --writer-keep-files and --writer-keep-size",
        Value::Counter(|m| m.files_deleted.get()),
    ),
    (
        "cgmon_records_partial_skipped",
        "Partial flow records not written (no -writer-partial)",
        Value::Counter(|m| m.records_partial_skipped.get()),
    ),
    (
        "cgmon_records_dropped",
        "Flow records dropped because a stage's channel was full",
        Value::Counter(|m| m.records_dropped.get()),
    ),
    (
        "cgmon_records_lost",
        "Flow records lost because the output failed",
        Value::Counter(|m| m.records_lost.get()),
    ),
    ("cgmon_write_errors", "Output write errors", Value::Counter(|m| m.write_errors.get())),
    ("cgmon_rotations", "Output files rotated", Value::Counter(|m| m.rotations.get())),
];

impl Collector for Exporter {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let m = &self.metrics;
        for (name, help, v) in SERIES {
            match v {
                Value::Counter(get) => counter(&mut e, name, help, get(m))?,
                Value::Gauge(get) => gauge(&mut e, name, help, get(m) as f64)?,
            }
        }
        let (sum, count, buckets) = m.dump_seconds.snapshot();
        e.encode_descriptor(
            "cgmon_dump_duration_seconds",
            "Time per dump, request to last socket tracked",
            None,
            MetricType::Histogram,
        )?
        .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        let (sum, count, buckets) = m.tick_lateness.snapshot();
        e.encode_descriptor(
            "cgmon_tick_lateness_seconds",
            "How late each dump started after its point on the interval's grid (jitter)",
            None,
            MetricType::Histogram,
        )?
        .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        for (name, help, v) in [
            (
                "cgmon_full_dump_interval_seconds",
                "Time between the last two full dumps (the full-dump pace achieved)",
                m.full_dump_interval_ns.get() as f64 / 1e9,
            ),
            (
                "cgmon_full_dump_interval_planned_seconds",
                "Time between full dumps that --cpu-budget allows now",
                m.full_dump_interval_planned_ns.get() as f64 / 1e9,
            ),
            (
                "cgmon_cpu_budget_ratio",
                "--cpu-budget, as a share of one core",
                m.cpu_budget_ppm.get() as f64 / 1e6,
            ),
        ] {
            gauge(&mut e, name, help, v)?;
        }
        e.encode_descriptor(
            "cgmon_sampling_cpu_seconds",
            "CPU time spent in dumps and exact polls, the kernel's part included",
            None,
            MetricType::Counter,
        )?
        .encode_counter::<NoLabelSet, _, f64>(&(m.sampling_cpu_ns.get() as f64 / 1e9), None)?;
        let (sum, count, buckets) = m.discovery_delay.snapshot();
        e.encode_descriptor(
            "cgmon_flow_discovery_delay_seconds",
            "For flows discovered late, the most they may have been late by",
            None,
            MetricType::Histogram,
        )?
        .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        e.encode_descriptor(
            "cgmon_decode_seconds",
            "Time spent decoding dumps and tracking their sockets (without the kernel's walk)",
            None,
            MetricType::Counter,
        )?
        .encode_counter::<NoLabelSet, _, u64>(&(m.decode_ns.get() as f64 / 1e9), None)?;
        {
            let mut d = e.encode_descriptor(
                "cgmon_channel_depth",
                "Batches waiting in a stage's input channel",
                None,
                MetricType::Gauge,
            )?;
            for (ch, v) in [("analyzer", m.ended_queue.get()), ("writer", m.writer_queue.get())] {
                d.encode_family(&[("channel", ch)])?.encode_gauge(&(v as f64))?;
            }
        }
        if m.sink.enabled.get() != 0 {
            let k = &m.sink;
            let mut d = e.encode_descriptor(
                "cgmon_sink_records",
                "Records the ClickHouse sink delivered (the server acknowledged them) or dropped",
                None,
                MetricType::Counter,
            )?;
            for (result, v) in [("sent", k.sent.get()), ("dropped", k.dropped.get())] {
                d.encode_family(&[("result", result)])?
                    .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
            }
            for (name, help, v) in [
                (
                    "cgmon_sink_waiting_records",
                    "Records waiting for ClickHouse, in memory or in the spool",
                    k.waiting_records.get(),
                ),
                (
                    "cgmon_sink_waiting_bytes",
                    "Compressed bytes waiting for ClickHouse (--spool-max bounds them)",
                    k.waiting_bytes.get(),
                ),
                (
                    "cgmon_sink_spooled_batches",
                    "Batches waiting in --spool-dir",
                    k.spooled_batches.get(),
                ),
                (
                    "cgmon_sink_failing",
                    "1 while the last attempt to reach ClickHouse failed",
                    k.failing.get(),
                ),
            ] {
                gauge(&mut e, name, help, v as f64)?;
            }
            counter(
                &mut e,
                "cgmon_sink_failures",
                "Failed attempts to insert into or ask ClickHouse",
                k.failures.get(),
            )?;
            counter(
                &mut e,
                "cgmon_sink_batches_found_stored",
                "Batches found already stored after a lost reply, so not sent twice",
                k.found_stored.get(),
            )?;
            // The last failure's text while failing (a gauge of 1, as `*_info` series are),
            // clipped: one series at a time, gone once the sink delivers again.
            let last =
                k.last_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            if let Some(why) = last {
                e.encode_descriptor(
                    "cgmon_sink_last_error_info",
                    "Always 1 while the ClickHouse sink fails; its last error is in the label",
                    None,
                    MetricType::Gauge,
                )?
                .encode_family(&[("error", crate::units::clip(&why).as_ref())])?
                .encode_gauge(&1.0)?;
            }
            let (sum, count, buckets) = k.batch_seconds.snapshot();
            e.encode_descriptor(
                "cgmon_sink_batch_duration_seconds",
                "Time to deliver one batch to ClickHouse (the successful request)",
                None,
                MetricType::Histogram,
            )?
            .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        }
        gauge(
            &mut e,
            "cgmon_writer_backlog_records",
            "Records held while the output cannot take them",
            m.writer_backlog.get() as f64,
        )?;
        // One read of /proc for both RSS series (the cgmon_ one predates the process_ ones).
        let process = crate::metrics::process::read();
        if let Some(rss) =
            process.as_ref().map(|p| p.resident_bytes).or_else(crate::metrics::rss_bytes)
        {
            gauge(
                &mut e,
                "cgmon_resident_memory_bytes",
                "Resident set size of the monitor",
                rss as f64,
            )?;
        }
        e.encode_descriptor(
            "cgmon_build_info",
            "Always 1; the version is in the label",
            None,
            MetricType::Gauge,
        )?
        .encode_family(&[("version", env!("CARGO_PKG_VERSION"))])?
        .encode_gauge(&1.0)?;
        if let Some(p) = process {
            e.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                MetricType::Counter,
            )?
            .encode_counter::<NoLabelSet, _, u64>(&p.cpu_seconds, None)?;
            let gauges = [
                (
                    "process_virtual_memory_bytes",
                    "Virtual memory size in bytes",
                    p.virtual_bytes as f64,
                ),
                (
                    "process_resident_memory_bytes",
                    "Resident memory size in bytes",
                    p.resident_bytes as f64,
                ),
                (
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds",
                    p.start_time_seconds,
                ),
                ("process_open_fds", "Number of open file descriptors", p.open_fds as f64),
                ("process_max_fds", "Maximum number of open file descriptors", p.max_fds as f64),
            ];
            for (name, help, v) in gauges {
                gauge(&mut e, name, help, v)?;
            }
        }

        let agg = self.aggregate();
        type Get = fn(&Agg) -> u64;
        let families: [(&str, &str, Get); 5] = [
            ("cgmon_flows_opened", "Flows opened, by service and listening port", |a| a.opened),
            ("cgmon_flows_closed", "Flows closed, by service and listening port", |a| a.closed),
            (
                "cgmon_flow_acked_bytes",
                "Bytes acknowledged by the peer (tcpi_bytes_acked), by service and listening port",
                |a| a.acked,
            ),
            (
                "cgmon_flow_received_bytes",
                "Bytes received (tcpi_bytes_received), by service and listening port",
                |a| a.received,
            ),
            (
                "cgmon_flow_retransmitted_bytes",
                "Bytes retransmitted (tcpi_bytes_retrans), by service and listening port",
                |a| a.retrans,
            ),
        ];
        for (name, help, get) in families {
            let mut d = e.encode_descriptor(name, help, None, MetricType::Counter)?;
            for ((ns, svc, port), a) in &agg {
                d.encode_family(&labels(ns, svc, port))?
                    .encode_counter::<NoLabelSet, _, u64>(&get(a), None)?;
            }
        }
        let mut d = e.encode_descriptor(
            "cgmon_flow_rtt_seconds",
            "Smoothed RTT of retained samples, by service and listening port",
            None,
            MetricType::Histogram,
        )?;
        for ((ns, svc, port), a) in &agg {
            let buckets: Vec<(f64, u64)> = RTT_BUCKETS_S
                .iter()
                .copied()
                .chain([f64::INFINITY])
                .zip(a.rtt.iter().copied())
                .collect();
            let count = a.rtt.iter().sum();
            d.encode_family(&labels(ns, svc, port))?
                .encode_histogram::<NoLabelSet>(a.rtt_sum, count, &buckets, None)?;
        }
        Ok(())
    }
}

/// A flow aggregate's labels: `netns` only when namespaces are told apart.
fn labels<'a>(ns: &'a str, svc: &'a str, port: &'a str) -> Vec<(&'static str, &'a str)> {
    let mut v = Vec::with_capacity(3);
    if !ns.is_empty() {
        v.push(("netns", ns));
    }
    v.push(("service", svc));
    v.push(("port", port));
    v
}

/// The registry rendered as OpenMetrics text (what Prometheus asks for).
///
/// # Errors
/// Formatting failed (it does not, writing to a String).
pub fn render(r: &Registry) -> Result<String, std::fmt::Error> {
    let mut s = String::with_capacity(16 << 10);
    prometheus_client::encoding::text::encode(&mut s, r)?;
    Ok(s)
}

/// OpenMetrics text rewritten as Prometheus text format 0.0.4, for clients that do not ask
/// for OpenMetrics (curl, `promtool check metrics`). prometheus-client writes only
/// OpenMetrics, where a counter family `x` has samples `x_total`; format 0.0.4 names the
/// family `x_total` too, and has no `# EOF`.
pub fn to_prometheus_text(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    let mut help: Option<&str> = None;
    for line in om.lines() {
        if line == "# EOF" {
            continue;
        }
        if line.starts_with("# HELP ") {
            if let Some(h) = help.replace(line) {
                out.push_str(h);
                out.push('\n');
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            let h = help.take();
            if kind == "counter" {
                if let Some(h) = h {
                    let text = h.strip_prefix("# HELP ").and_then(|t| t.strip_prefix(name));
                    out.push_str(&format!("# HELP {name}_total{}\n", text.unwrap_or("")));
                }
                out.push_str(&format!("# TYPE {name}_total counter\n"));
            } else {
                if let Some(h) = h {
                    out.push_str(h);
                    out.push('\n');
                }
                out.push_str(line);
                out.push('\n');
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(cgroup_id: u64, port: u16, acked: u64) -> Account {
        let mut a = crate::tracker::accounts::Accounts::default();
        let slot = a.slot(0, cgroup_id, port, None);
        let mut c = crate::tracker::accounts::Counted { slot, ..Default::default() };
        a.count(&mut c, acked, 0, 0);
        a.get_mut(slot).opened = 1;
        a.get_mut(slot).observe_rtt(20_000);
        let mut v = a.all()[slot as usize].clone();
        v.port = port;
        v
    }

    #[test]
    fn services_beyond_top_k_share_other_and_labels_stay_put() {
        let accounts =
            Arc::new(Mutex::new(vec![account(1, 0, 100), account(2, 0, 200), account(3, 0, 300)]));
        let ex = Arc::new(Exporter::new(
            Arc::default(),
            accounts.clone(),
            Arc::new(Mutex::new(Services::with_root(None))),
            2,
        ));
        let text = render(&ex.clone().registry()).unwrap();
        assert!(
            text.contains("cgmon_flow_acked_bytes_total{service=\"cgroup-1\",port=\"0\"} 100"),
            "{text}"
        );
        assert!(text.contains("cgmon_flow_acked_bytes_total{service=\"cgroup-2\",port=\"0\"} 200"));
        assert!(text.contains("cgmon_flow_acked_bytes_total{service=\"other\",port=\"0\"} 300"));
        assert!(
            text.contains(
                "cgmon_flow_rtt_seconds_bucket{le=\"0.025\",service=\"cgroup-1\",port=\"0\"} 1"
            ) || text.contains(
                "cgmon_flow_rtt_seconds_bucket{service=\"cgroup-1\",port=\"0\",le=\"0.025\"} 1"
            ),
            "{text}"
        );
        // A fourth service later still goes to "other"; the first two keep their labels.
        accounts.lock().unwrap().push(account(4, 0, 5));
        let text = render(&ex.registry()).unwrap();
        assert!(
            text.contains("cgmon_flow_acked_bytes_total{service=\"other\",port=\"0\"} 305"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
        let plain = to_prometheus_text(&text);
        assert!(plain.contains("# HELP cgmon_dumps_total sock_diag dumps taken\n# TYPE cgmon_dumps_total counter\ncgmon_dumps_total 0\n"), "{plain}");
        assert!(plain.contains("# TYPE cgmon_flow_rtt_seconds histogram\n"));
        assert!(!plain.contains("# EOF"));
    }

    /// Every series the README names is served: a name documented but never exported (as
    /// `cgmon_netns_sampled` once was) fails here.
    #[test]
    fn every_metric_the_readme_names_is_exported() {
        let accounts = Arc::new(Mutex::new(vec![account(1, 80, 100)]));
        // With the ClickHouse sink on, so its series are served too.
        let m = Arc::new(Metrics::default());
        m.sink.enabled.set(1);
        *m.sink.last_error.lock().unwrap() = Some("connection refused \"x\"\n".into());
        let ex = Arc::new(
            Exporter::new(m, accounts, Arc::new(Mutex::new(Services::with_root(None))), 2)
                .with_netns(Arc::new(Mutex::new(vec!["host".into(), "blue".into()]))),
        );
        let text = to_prometheus_text(&render(&ex.registry()).unwrap());
        // The error's quotes and newline are escaped in its label.
        assert!(
            text.contains(
                "cgmon_sink_last_error_info{error=\"connection refused \\\"x\\\"\\n\"} 1"
            ),
            "{text}"
        );
        let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"));
        let mut missing = Vec::new();
        for (i, _) in readme.match_indices("cgmon_") {
            let name: String = readme[i..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            // `cgmon_*` (a prefix) and `cgmon_rs::…` (a log target) name no series.
            if name.ends_with('_') || readme[i + name.len()..].starts_with("::") {
                continue;
            }
            let served = text.lines().any(|l| {
                l.strip_prefix(name.as_str())
                    .is_some_and(|rest| rest.starts_with([' ', '{']) || rest.is_empty())
                    || l.starts_with(&format!("# TYPE {name} "))
            });
            if !served && !missing.contains(&name) {
                missing.push(name);
            }
        }
        assert!(missing.is_empty(), "in the README, not in /metrics: {missing:?}\n{text}");
    }
}
