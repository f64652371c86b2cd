//! The monitor's own series: the plain counters and gauges (one table, `SERIES`), its
//! histograms, the ClickHouse sink's series, and the process's.

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use crate::metrics::Metrics;

pub(super) fn counter(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: u64,
) -> std::fmt::Result {
    e.encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<NoLabelSet, _, u64>(&v, None)
}

pub(super) fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> std::fmt::Result {
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

/// The monitor's own series: the plain ones, the dump and tick histograms, the pace.
pub(super) fn encode_own(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    for (name, help, v) in SERIES {
        match v {
            Value::Counter(get) => counter(e, name, help, get(m))?,
            Value::Gauge(get) => gauge(e, name, help, get(m) as f64)?,
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
        gauge(e, name, help, v)?;
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
    Ok(())
}

/// The ClickHouse sink's series (only when it is on).
pub(super) fn encode_sink(
    e: &mut DescriptorEncoder,
    k: &crate::metrics::SinkMetrics,
) -> std::fmt::Result {
    let mut d = e.encode_descriptor(
        "cgmon_sink_records",
        "Records the ClickHouse sink delivered (the server acknowledged them) or dropped",
        None,
        MetricType::Counter,
    )?;
    for (result, v) in [("sent", k.sent.get()), ("dropped", k.dropped.get())] {
        d.encode_family(&[("result", result)])?.encode_counter::<NoLabelSet, _, u64>(&v, None)?;
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
        ("cgmon_sink_spooled_batches", "Batches waiting in --spool-dir", k.spooled_batches.get()),
        (
            "cgmon_sink_failing",
            "1 while the last attempt to reach ClickHouse failed",
            k.failing.get(),
        ),
    ] {
        gauge(e, name, help, v as f64)?;
    }
    counter(
        e,
        "cgmon_sink_failures",
        "Failed attempts to insert into or ask ClickHouse",
        k.failures.get(),
    )?;
    counter(
        e,
        "cgmon_sink_batches_found_stored",
        "Batches found already stored after a lost reply, so not sent twice",
        k.found_stored.get(),
    )?;
    // The last failure's text while failing (a gauge of 1, as `*_info` series are),
    // clipped: one series at a time, gone once the sink delivers again.
    let last = k.last_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
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
    Ok(())
}

/// The writer's backlog, memory, the build, and the standard `process_*` series.
pub(super) fn encode_process(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    gauge(
        e,
        "cgmon_writer_backlog_records",
        "Records held while the output cannot take them",
        m.writer_backlog.get() as f64,
    )?;
    // One read of /proc for both RSS series (the cgmon_ one predates the process_ ones).
    let process = crate::metrics::process::read();
    if let Some(rss) = process.as_ref().map(|p| p.resident_bytes).or_else(crate::metrics::rss_bytes)
    {
        gauge(e, "cgmon_resident_memory_bytes", "Resident set size of the monitor", rss as f64)?;
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
            gauge(e, name, help, v)?;
        }
    }

    Ok(())
}
