//! The catalogue of the monitor's own metrics: every series it keeps about itself, once,
//! with its Prometheus name, help, kind, unit, the words a person reads it by, and how to
//! read it from [`Metrics`].
//!
//! Three renderings read this one table: `/metrics` (`http::prom::own`), the status page
//! (`http::status`) and the summary logged at SIGUSR1 and at the exit
//! ([`Metrics::report`]). A series added here appears in all three; none of them lists
//! series by hand. What is not a plain series stays with its renderer: the per-service
//! families, the stage times, the churn rate, the `*_info` series and `process_*`.

use super::{Histogram, Metrics};

/// What a series is, as Prometheus types it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (exposed with `_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations in buckets.
    Histogram,
}

/// The unit a value is kept in, and so how it is scaled to the base unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A count.
    Count,
    /// Nanoseconds, exposed as seconds.
    Nanos,
    /// Parts per million, exposed as a ratio.
    Ppm,
    /// Bytes.
    Bytes,
}

/// How a series is read.
#[derive(Clone, Copy)]
pub enum Read {
    /// A counter's or gauge's value, in its unit.
    Value(fn(&Metrics) -> u64),
    /// A histogram.
    Histogram(fn(&Metrics) -> &Histogram),
}

/// The group a series is shown in by the human renderings (a line of the summary, a part
/// of the status page's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// sock_diag dumps.
    Dumps,
    /// The sampling tiers and the CPU budget.
    Sampling,
    /// `--netns`.
    Namespaces,
    /// Flows tracked and their memory.
    Flows,
    /// Destroy events.
    Destroy,
    /// Records and the output.
    Records,
    /// The HTTP server.
    Http,
    /// The ClickHouse sink (shown only when it is on).
    Sink,
    /// The IPFIX exporter (shown only when it is on).
    Ipfix,
}

impl Section {
    /// Every section, in the order the renderings show them.
    pub const ALL: [Section; 9] = [
        Section::Flows,
        Section::Dumps,
        Section::Sampling,
        Section::Namespaces,
        Section::Destroy,
        Section::Records,
        Section::Http,
        Section::Sink,
        Section::Ipfix,
    ];

    /// The section's name, as the summary's line starts.
    pub fn name(self) -> &'static str {
        match self {
            Section::Dumps => "dumps",
            Section::Sampling => "sampling",
            Section::Namespaces => "network namespaces",
            Section::Flows => "flows",
            Section::Destroy => "destroy events",
            Section::Records => "records",
            Section::Http => "http",
            Section::Sink => "clickhouse sink",
            Section::Ipfix => "ipfix export",
        }
    }

    /// Whether the section applies to this run (the sink's and the exporter's only when
    /// they are on).
    pub fn shown(self, m: &Metrics) -> bool {
        match self {
            Section::Sink => m.sink.enabled.get() != 0,
            Section::Ipfix => m.ipfix.enabled.get() != 0,
            _ => true,
        }
    }

    /// The section's series, in order.
    pub fn series(self) -> impl Iterator<Item = &'static Series> {
        SERIES.iter().filter(move |s| s.section == self)
    }
}

/// One series of the monitor's own.
pub struct Series {
    /// The Prometheus name, without `_total` (the encoder adds it to counters).
    pub name: &'static str,
    /// The Prometheus help text.
    pub help: &'static str,
    /// For one member of a labelled family: its label (consecutive entries with the same
    /// name are one family).
    pub label: Option<(&'static str, &'static str)>,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// The unit the value is kept in.
    pub unit: Unit,
    /// Where the human renderings show it.
    pub section: Section,
    /// What a person reads it as, after its value ("12 written").
    pub says: &'static str,
    /// How to read it.
    pub read: Read,
}

impl Series {
    /// The value in its base unit (seconds, a ratio, bytes, a count); for a histogram, the
    /// number of observations.
    pub fn value(&self, m: &Metrics) -> f64 {
        match self.read {
            Read::Value(get) => {
                let v = get(m) as f64;
                match self.unit {
                    Unit::Count | Unit::Bytes => v,
                    Unit::Nanos => v / 1e9,
                    Unit::Ppm => v / 1e6,
                }
            }
            Read::Histogram(get) => get(m).snapshot().1 as f64,
        }
    }

    /// The value as a person reads it: a count as it is, seconds to the ms, a ratio as a
    /// percentage, bytes in SI units, a histogram as its count and mean.
    pub fn shown(&self, m: &Metrics) -> String {
        match self.read {
            Read::Value(get) => match self.unit {
                Unit::Count => get(m).to_string(),
                Unit::Nanos => format!("{:.3} s", self.value(m)),
                Unit::Ppm => format!("{:.2} %", self.value(m) * 100.0),
                Unit::Bytes => crate::units::si_bytes(get(m)),
            },
            Read::Histogram(get) => {
                let (sum, count, _) = get(m).snapshot();
                if count == 0 {
                    "0".into()
                } else {
                    format!("{count}, mean {:.3} ms", sum / count as f64 * 1e3)
                }
            }
        }
    }

    /// The value and what it is, as the summary's lines say it: "12 written", "7 dumps
    /// timed (mean 1.995 ms)".
    pub fn phrase(&self, m: &Metrics) -> String {
        let shown = self.shown(m);
        match shown.split_once(", ") {
            Some((count, mean)) if self.kind == Kind::Histogram => {
                format!("{count} {} ({mean})", self.says)
            }
            _ => format!("{shown} {}", self.says),
        }
    }
}

mod make;
mod series;
pub use series::SERIES;

#[cfg(test)]
#[path = "catalogue_tests.rs"]
mod tests;
