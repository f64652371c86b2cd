//! The monitor's own series, from the catalogue (`metrics::catalogue`), and the process's.

use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use crate::metrics::Metrics;
use crate::metrics::catalogue::{Kind, Read, SERIES, Section, Series, Unit};

pub(super) fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> std::fmt::Result {
    e.encode_descriptor(name, help, None, MetricType::Gauge)?.encode_gauge(&v)
}

/// The monitor's own series, as the catalogue lists them (a section that does not apply,
/// the sink's when it is off, is left out), then the sink's last error while it fails.
pub(super) fn encode_own(e: &mut DescriptorEncoder, m: &Metrics) -> std::fmt::Result {
    let shown = SERIES.iter().filter(|s| s.section.shown(m)).collect::<Vec<_>>();
    // Consecutive entries with one name are one family, each with its label.
    for family in shown.chunk_by(|a, b| a.name == b.name) {
        let first = family[0];
        let kind = match first.kind {
            Kind::Counter => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
            Kind::Histogram => MetricType::Histogram,
        };
        let mut d = e.encode_descriptor(first.name, first.help, None, kind)?;
        for s in family {
            match s.label {
                Some(l) => point(&mut d.encode_family(&[l])?, s, m)?,
                None => point(&mut d, s, m)?,
            }
        }
    }
    // The last failure's text while failing (a gauge of 1, as `*_info` series are),
    // clipped: one series at a time, gone once the sink delivers again.
    if let Some(why) = m.sink.failing_with().filter(|_| Section::Sink.shown(m)) {
        e.encode_descriptor(
            "cgmon_sink_last_error_info",
            "Always 1 while the ClickHouse sink fails; its last error is in the label",
            None,
            MetricType::Gauge,
        )?
        .encode_family(&[("error", crate::units::clip(&why).as_ref())])?
        .encode_gauge(&1.0)?;
    }
    Ok(())
}

/// One point of a series: a histogram's buckets, a counter's or a gauge's value.
fn point(p: &mut MetricEncoder, s: &Series, m: &Metrics) -> std::fmt::Result {
    match (s.read, s.unit) {
        (Read::Histogram(get), _) => {
            let (sum, count, buckets) = get(m).snapshot();
            p.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
        }
        (Read::Value(get), Unit::Count) if s.kind == Kind::Counter => {
            p.encode_counter::<NoLabelSet, _, u64>(&get(m), None)
        }
        _ if s.kind == Kind::Counter => p.encode_counter::<NoLabelSet, _, u64>(&s.value(m), None),
        _ => p.encode_gauge(&s.value(m)),
    }
}

/// Memory, the build, and the standard `process_*` series.
pub(super) fn encode_process(e: &mut DescriptorEncoder) -> std::fmt::Result {
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
