//! The HTML of `cgmon-rs report`: throughput and RTT distributions on log axes, verdicts
//! per service and port, and the slowest flows (those limited by something other than
//! their application, above a minimum size) with their findings and charts.
//!
//! A report must stay small and quick to open for any number of records (100,000 records
//! gave 55.7 MB of HTML when every flow had its charts): each record is cut down to the
//! few fields the report uses as it is read ([`Rec`]), only the listed flows are charted,
//! the distributions are thinned to what their pixels show, and ephemeral ports are
//! grouped.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use crate::analysis::diagnosis::{VERDICTS, verdict_index};
use crate::chart::flow::{STYLE, charts};
use crate::chart::{Axis, Chart, Series, Unit, esc};
use crate::record::Point;
use crate::units::{si_bytes, si_rate_mbps};

use crate::record::EPHEMERAL_FROM;

/// What the report keeps of one record.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rec {
    /// Socket cookie and window sequence number.
    pub cookie: u64,
    /// `Seq`.
    pub seq: u64,
    /// `src:port → dst:port`.
    pub tuple: String,
    /// Service (or cgroup id, in records from before services were named), with the
    /// namespace when named.
    pub service: String,
    /// Local and remote ports.
    pub ports: (u16, u16),
    /// Program, when named.
    pub comm: Option<String>,
    /// `SendThroughputMbps`.
    pub throughput_mbps: Option<f64>,
    /// Median RTT, ms.
    pub rtt_p50_ms: Option<f64>,
    /// Kernel's (or observed) minimum RTT, ms.
    pub min_rtt_ms: Option<f64>,
    /// `BytesAcked`.
    pub bytes_acked: u64,
    /// Index in [`VERDICTS`].
    pub verdict: usize,
    /// `Diagnosis.Cause`.
    pub cause: Option<String>,
    /// `Diagnosis.Finding`.
    pub finding: String,
    /// `StartTime`, `EndTime`.
    pub times: (String, String),
}

impl Rec {
    /// The fields of record line `r`.
    pub fn of(r: &Value) -> Self {
        let cgroup = match (r["Service"].as_str(), r["CgroupID"].as_u64()) {
            (Some(s), _) => Some(s.to_string()),
            (None, Some(c)) => Some(format!("cgroup {c}")),
            (None, None) => None,
        };
        let service = match (r["Netns"]["Name"].as_str(), cgroup) {
            (Some(ns), Some(c)) => format!("{ns} / {c}"),
            (Some(ns), None) => ns.to_string(),
            (None, Some(c)) => c,
            (None, None) => "unknown".into(),
        };
        let port = |k: &str| u16::try_from(r["ID"][k].as_u64().unwrap_or(0)).unwrap_or(0);
        let d = &r["Diagnosis"];
        let text = |v: &Value| v.as_str().map(str::to_string);
        Rec {
            cookie: r["Cookie"].as_u64().unwrap_or(0),
            seq: r["Seq"].as_u64().unwrap_or(0),
            tuple: super::tuple_of(r),
            service,
            ports: (port("SrcPort"), port("DstPort")),
            comm: text(&r["Comm"]),
            throughput_mbps: r["SendThroughputMbps"].as_f64(),
            rtt_p50_ms: r["RTTSummary"][3].as_f64(),
            min_rtt_ms: r["MinRTTKernelms"].as_f64().or(r["MinRTTObservedms"].as_f64()),
            bytes_acked: r["BytesAcked"].as_u64().unwrap_or(0),
            verdict: verdict_index(d["Verdict"].as_str()),
            cause: text(&d["Cause"]),
            finding: text(&d["Finding"]).unwrap_or_default(),
            times: (
                text(&r["StartTime"]).unwrap_or_default(),
                text(&r["EndTime"]).unwrap_or_default(),
            ),
        }
    }

    /// Limited by a window, a buffer or the network: a flow the application did not hold.
    pub fn limited(&self) -> bool {
        self.verdict < 3
    }

    /// Whether it may be listed among the slowest ([`slowest`]).
    pub fn may_be_slowest(&self, min_bytes: u64) -> bool {
        self.limited()
            && self.bytes_acked >= min_bytes
            && self.cause.as_deref() != Some("slow-start")
    }

    /// Its row in the verdict table: the service, and the port that tells what it does
    /// (the one it serves on, or the one it connects to); a client's ephemeral port
    /// would give a row per connection.
    fn role(&self) -> String {
        let (sp, dp) = self.ports;
        if let Some(sp) = crate::record::served_port(sp, dp) {
            format!("{}, serving :{sp}", self.service)
        } else if dp < EPHEMERAL_FROM {
            format!("{}, to :{dp}", self.service)
        } else {
            format!("{}, between ephemeral ports", self.service)
        }
    }
}

/// The flows listed as slowest: limited by something other than their application,
/// having sent at least `min_bytes`, lowest throughput first; at most `n`. A transfer over
/// within slow start's round trips (cause `slow-start`) was held by round trips, not a
/// rate, and is left out, as the fleet's query leaves it out.
pub fn slowest(records: &[Rec], n: usize, min_bytes: u64) -> Vec<&Rec> {
    let mut v: Vec<&Rec> = records.iter().filter(|r| r.may_be_slowest(min_bytes)).collect();
    v.sort_by(|a, b| {
        let t = |r: &Rec| r.throughput_mbps.unwrap_or(0.0);
        t(a).total_cmp(&t(b)).then(a.cookie.cmp(&b.cookie))
    });
    v.truncate(n);
    v
}

/// Decade ticks of a log axis over [lo, hi] (both > 0), labelled with `label` (a
/// trailing ".0" dropped: "10 Mbit/s"); positions are log10 of the values. Over many
/// decades the ticks skip some, so that at most seven labels share the axis.
fn log_axis(title: String, lo: f64, hi: f64, label: impl Fn(f64) -> String) -> Axis {
    let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let b = b.max(a + 1);
    let every = ((b - a) as usize).div_ceil(6).max(1);
    let ticks = (a..=b)
        .step_by(every)
        .map(|e| (f64::from(e), label(10f64.powi(e)).replacen(".0 ", " ", 1)))
        .collect();
    Axis { min: f64::from(a), max: f64::from(b), ticks, title }
}

/// A cumulative distribution of `values` (in `unit`) on a log axis: throughputs and RTTs
/// span decades (20 Mbit/s flows beside 15 Gbit/s ones), which a linear axis flattens
/// into a line at 0 and a step. Values at or below 0 cannot be placed: they are counted
/// in the description and the chart's note.
pub fn cdf(id: &str, title: &str, name: &str, unit: Unit, mut values: Vec<f64>) -> Chart {
    values.retain(|v| v.is_finite());
    let all = values.len();
    values.retain(|v| *v > 0.0);
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let (lo, hi) = (values.first().copied().unwrap_or(1.0), values.last().copied().unwrap_or(1.0));
    let text = |v: f64| match unit {
        Unit::Mbps => si_rate_mbps(v),
        Unit::Ms => format!("{} ms", crate::analysis::diagnosis::ms_text(v)),
        _ => crate::chart::flow::num(v),
    };
    let x = log_axis(format!("{name} (log scale)"), lo, hi, text);
    let (y, _) = crate::chart::value_axis("flows", Unit::Percent, 0.0, 100.0);
    // A step at each value: the share of flows at or below it rises there.
    let mut pts: Vec<(f64, f64)> = Vec::with_capacity(2 * n);
    for (i, v) in values.iter().enumerate() {
        pts.push((v.log10(), 100.0 * i as f64 / n as f64));
        pts.push((v.log10(), 100.0 * (i + 1) as f64 / n as f64));
    }
    let pct = |p: f64| crate::stats::summary::percentile(&values, p).map_or("–".into(), text);
    let left_out = match all - n {
        0 => String::new(),
        k => format!(" {k} flows at 0 are left out (a log axis has no 0)."),
    };
    Chart {
        id: id.into(),
        title: title.into(),
        desc: format!(
            "Cumulative distribution of {name} over {n} flows: median {}, 90th percentile {}, largest {}.{left_out}",
            pct(50.0),
            pct(90.0),
            text(hi)
        ),
        x,
        y: Axis { title: "flows at or below (%)".into(), ..y },
        y_div: 1.0,
        series: vec![Series {
            name: "flows",
            key: "rtt",
            runs: if pts.is_empty() { Vec::new() } else { vec![pts] },
            dashed: false,
            holds: Vec::new(),
        }],
        marks: Vec::new(),
        pauses: Vec::new(),
    }
}

/// What a report says of its inputs.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// The record files, as named.
    pub records: String,
    /// The samples file, when given.
    pub samples: Option<String>,
    /// The flows to list and chart, and the least a listed flow sent.
    pub slowest: usize,
    /// See `slowest`.
    pub min_bytes: u64,
}

/// The report of `records` with `samples` (the listed flows' sample points, by cookie).
pub fn report_html(records: &[Rec], samples: &BTreeMap<u64, Vec<Point>>, src: &Sources) -> String {
    let thr: Vec<f64> = records.iter().filter_map(|r| r.throughput_mbps).collect();
    let rtt: Vec<f64> = records.iter().filter_map(|r| r.rtt_p50_ms).collect();
    let mut b = String::with_capacity(1 << 20);
    let first = records.iter().map(|r| r.times.0.as_str()).filter(|t| !t.is_empty()).min();
    let last = records.iter().map(|r| r.times.1.as_str()).max().unwrap_or("");
    let _ = write!(
        b,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>cgmon-rs report</title><style>{}{STYLE}</style></head><body><main>\
         <h1>cgmon-rs report</h1><p>{} records from {}; flows from {} to {}.</p>",
        crate::chart::page::STYLE_CSS,
        records.len(),
        esc(&src.records),
        esc(first.unwrap_or("")),
        esc(last)
    );
    // Why a flow has no charts belongs at the top, before a reader looks for them.
    if src.samples.is_none() {
        b.push_str(
            "<p id=\"no-samples\">No per-flow charts: no samples file was given. Run the \
             monitor with <code>--samples-out FILE</code> and pass that file here with \
             <code>--samples FILE</code>.</p>",
        );
    }
    // The answer first: which flows were slow and why; then the distributions, the listed
    // flows' charts, and the long per-service table last.
    let listed = slowest(records, src.slowest, src.min_bytes);
    slowest_flows(&mut b, records, &listed, src);
    b.push_str("<h2>Distributions</h2><div class=\"charts\">");
    let cdf_thr =
        cdf("cdf-throughput", "Send throughput per flow", "send throughput", Unit::Mbps, thr);
    b.push_str(&cdf_thr.svg());
    b.push_str(&cdf("cdf-rtt", "Median RTT per flow", "median RTT", Unit::Ms, rtt).svg());
    b.push_str("</div>");
    charted(&mut b, &listed, samples, src);
    verdicts_per_service(&mut b, records);
    b.push_str("</main></body></html>\n");
    b
}

/// Verdicts per service and port ([`Rec::role`]).
fn verdicts_per_service(b: &mut String, records: &[Rec]) {
    let mut per: BTreeMap<String, [usize; 5]> = BTreeMap::new();
    for r in records {
        per.entry(r.role()).or_default()[r.verdict] += 1;
    }
    let _ = write!(
        b,
        "<h2>Verdicts per service and port</h2><p>Ports from {EPHEMERAL_FROM} up (Linux's \
         ephemeral range) are a client's and are grouped.</p><table id=\"verdicts\" class=\"num\"><thead><tr><th>service</th>"
    );
    for v in VERDICTS {
        let _ = write!(b, "<th>{v}</th>");
    }
    b.push_str("</tr></thead><tbody>");
    for (svc, v) in &per {
        let _ = write!(b, "<tr><td>{}</td>", esc(svc));
        for c in v {
            let _ = write!(b, "<td>{c}</td>");
        }
        b.push_str("</tr>");
    }
    b.push_str("</tbody></table>");
}

/// The slowest flows' table.
fn slowest_flows(b: &mut String, records: &[Rec], listed: &[&Rec], src: &Sources) {
    let candidates = records.iter().filter(|r| r.may_be_slowest(src.min_bytes)).count();
    if candidates == 0 {
        // No empty table: say what was looked for.
        let _ = write!(
            b,
            "<h2>The slowest flows</h2><p id=\"slowest\">No flow that sent at least {} was \
             limited by a window, a buffer or the network; <code>--min-bytes</code> changes \
             the size.</p>",
            si_bytes(src.min_bytes)
        );
        return;
    }
    let which = if listed.len() == candidates {
        format!("All {candidates} flow{}", if candidates == 1 { "" } else { "s" })
    } else {
        format!("The {} slowest of the {candidates} flows", listed.len())
    };
    let _ = write!(
        b,
        "<h2>The slowest flows</h2><p>{which} that sent at least {} \
         and were limited by a window, a buffer or the network, slowest first (flows their \
         application held are not slow for the network's sake); <code>--slowest</code> and \
         <code>--min-bytes</code> change it.</p>\
         <table id=\"slowest\"><thead><tr><th>flow</th><th>program</th><th>sent</th><th>throughput</th><th>median RTT</th><th>limited by</th><th>finding</th></tr></thead><tbody>",
        si_bytes(src.min_bytes)
    );
    for r in listed {
        let cause = r.cause.as_deref().map(|c| format!(" ({})", esc(c))).unwrap_or_default();
        let _ = write!(
            b,
            "<tr><td><a href=\"#flow-{}-{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><span class=\"key v-{v}\"></span>{v}{cause}</td><td>{}</td></tr>",
            r.cookie,
            r.seq,
            esc(&r.tuple),
            esc(r.comm.as_deref().unwrap_or("–")),
            si_bytes(r.bytes_acked),
            r.throughput_mbps.map_or("–".into(), si_rate_mbps),
            r.rtt_p50_ms
                .map_or("–".into(), |v| format!("{} ms", crate::analysis::diagnosis::ms_text(v))),
            esc(&r.finding),
            v = VERDICTS[r.verdict],
        );
    }
    b.push_str("</tbody></table>");
}

/// A section per listed flow, with its charts when the samples file holds its samples.
fn charted(b: &mut String, listed: &[&Rec], samples: &BTreeMap<u64, Vec<Point>>, src: &Sources) {
    if listed.is_empty() {
        return;
    }
    b.push_str("<h2>The slowest flows, one by one</h2>");
    if let Some(name) = &src.samples {
        let _ = write!(b, "<p>Charts from {}.</p>", esc(name));
    }
    for r in listed {
        let (cookie, seq) = (r.cookie, r.seq);
        let _ = write!(
            b,
            "<section class=\"flow\" id=\"flow-{cookie}-{seq}\"><h3>{} <small>cookie {cookie} · {} · {}</small></h3><p>{}</p>",
            esc(&r.tuple),
            VERDICTS[r.verdict],
            r.throughput_mbps.map_or("–".into(), si_rate_mbps),
            esc(&r.finding)
        );
        match samples.get(&cookie) {
            Some(points) => {
                b.push_str("<div class=\"charts\">");
                for c in charts(&format!("f{cookie}-{seq}-"), points, r.min_rtt_ms, None) {
                    b.push_str(&c.svg());
                }
                b.push_str("</div>");
            }
            None if src.samples.is_some() => {
                b.push_str("<p>The samples file holds none of its samples.</p>")
            }
            None => {}
        }
        b.push_str("</section>");
    }
}

#[cfg(test)]
mod tests;
