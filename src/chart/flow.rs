//! A flow's charts over time: RTT (with its minimum), cwnd (with ssthresh), pacing and
//! delivery rate, cumulative retransmits, and the time shares as they grew. The same
//! charts serve the live flow page, `plot` and `report`: each source turns its samples
//! into [`Point`]s first.

use super::{Chart, Mark, Series, Unit, clock_text, pauses, runs, time_axis, value_axis};
use crate::record::Point;

/// The chart ids, in page order.
pub const CHART_IDS: [&str; 5] = ["rtt", "cwnd", "rate", "retrans", "shares"];

/// A summary of a series' values for the chart's description.
fn describe(name: &str, unit: &str, s: &Series) -> String {
    let vals: Vec<f64> = s.runs.iter().flatten().map(|p| p.1).collect();
    let Some(last) = vals.last() else {
        return format!("{name}: no values.");
    };
    let (lo, hi) =
        vals.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(*v), b.max(*v)));
    format!(
        "{name}: {} values from {} to {} {unit}, the last {} {unit}.",
        vals.len(),
        num(lo),
        num(hi),
        num(*last)
    )
}

/// A value with three significant digits, or as a whole number when it is large.
pub fn num(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// The time frame of a flow's charts: start (Unix s), span (s), and the samples in words.
struct Frame<'a> {
    start: f64,
    span: f64,
    when: &'a str,
    /// Where the monitor took no sample (seconds since `start`).
    pauses: &'a [(f64, f64)],
}

/// A chart of `series` (values in `unit`) over the frame.
fn chart(
    id: String,
    title: &str,
    axis_name: &str,
    unit: Unit,
    series: Vec<Series>,
    marks: Vec<Mark>,
    frame: &Frame<'_>,
) -> Chart {
    let vals = series.iter().flat_map(|s| s.runs.iter().flatten().map(|p| p.1));
    let vals = vals.chain(marks.iter().map(|m| m.value));
    let (lo, hi) = vals.fold((0.0, 0.0), |(a, b): (f64, f64), v| (a.min(v), b.max(v)));
    let (y, y_div) = value_axis(axis_name, unit, lo, hi);
    let unit_text = unit.scale(hi).1;
    let scaled = |s: &Series| Series {
        runs: s.runs.iter().map(|r| r.iter().map(|&(t, v)| (t, v / y_div)).collect()).collect(),
        ..s.clone()
    };
    let mut desc: Vec<String> = vec![format!("{title}, {}.", frame.when)];
    desc.extend(series.iter().map(|s| describe(s.name, unit_text, &scaled(s))));
    desc.extend(
        marks.iter().map(|m| format!("{}: {} {unit_text}.", m.label, num(m.value / y_div))),
    );
    Chart {
        id,
        title: title.to_string(),
        desc: desc.join(" "),
        x: time_axis(frame.start, frame.span),
        y,
        y_div,
        series,
        marks,
        pauses: frame.pauses.to_vec(),
    }
}

/// The charts' time frame in words: how many samples, from when to when, and the pauses.
fn frame_text(points: &[Point], pauses: usize) -> String {
    match (points.first(), points.last()) {
        (Some(a), Some(b)) => format!(
            "{} samples from {} to {}{}",
            points.len(),
            clock_text(a.unix_s, false),
            clock_text(b.unix_s, false),
            match pauses {
                0 => String::new(),
                n => format!(", with {n} pause{} in sampling", if n == 1 { "" } else { "s" }),
            }
        ),
        _ => "no samples".to_string(),
    }
}

/// The flow's charts, ids prefixed by `prefix`: RTT with `min_rtt_ms` marked, cwnd with
/// ssthresh, pacing and delivery rate, cumulative retransmits and the time shares. Each
/// sampled value is drawn held until the next point (the tracker keeps a sample only when
/// something changed), the last until `end` (Unix s: the flow's last sample, deduped or
/// not; `None`: the last point). Lines break only where a value is missing or the monitor
/// took no sample for a while (a point's `after_pause`), and such pauses are shaded.
pub fn charts(
    prefix: &str,
    points: &[Point],
    min_rtt_ms: Option<f64>,
    end: Option<f64>,
) -> Vec<Chart> {
    let start = points.first().map_or(0.0, |p| p.unix_s);
    let times: Vec<f64> = points.iter().map(|p| p.unix_s - start).collect();
    let last = times.last().copied().unwrap_or(0.0);
    let span = end.map_or(last, |e| (e - start).max(last));
    let gaps = pauses(times.iter().zip(points).map(|(&t, p)| (t, p.after_pause)));
    let when = frame_text(points, gaps.len());
    let series = |name, key, f: &dyn Fn(&Point) -> Option<f64>, dashed, step: bool| {
        let (runs, holds) =
            runs(points.iter().zip(&times).map(|(p, &t)| (t, f(p), p.after_pause)), span);
        Series { name, key, runs, dashed, holds: if step { holds } else { Vec::new() } }
    };
    let id = |k: &str| format!("{prefix}{k}");
    let frame = Frame { start, span, when: &when, pauses: &gaps };
    let mut out = Vec::with_capacity(CHART_IDS.len());
    out.push(chart(
        id("rtt"),
        "Round-trip time",
        "RTT",
        Unit::Ms,
        vec![series("smoothed RTT", "rtt", &|p| p.rtt_ms, false, true)],
        min_rtt_ms.map(min_rtt_mark).into_iter().collect(),
        &frame,
    ));
    out.push(chart(
        id("cwnd"),
        "Congestion window",
        "window",
        Unit::Bytes,
        vec![
            series("cwnd", "cwnd", &|p| p.cwnd_bytes, false, true),
            series("ssthresh", "ssthresh", &|p| p.ssthresh_bytes, true, true),
        ],
        Vec::new(),
        &frame,
    ));
    out.push(chart(
        id("rate"),
        "Pacing and delivery rate",
        "rate",
        Unit::Mbps,
        vec![
            series("pacing", "pacing", &|p| p.pacing_mbps, false, true),
            series("delivery", "delivery", &|p| p.delivery_mbps, false, true),
        ],
        Vec::new(),
        &frame,
    ));
    out.push(chart(
        id("retrans"),
        "Retransmitted segments (cumulative)",
        "retransmits",
        Unit::Count,
        vec![series("retransmits", "retrans", &|p| p.retrans, false, true)],
        Vec::new(),
        &frame,
    ));
    let base = points.iter().find_map(|p| p.chrono_ms.map(|c| (p.unix_s, c)));
    let share = |i: usize| time_share(base, i);
    out.push(chart(
        id("shares"),
        "Time shares since the first sample",
        "share of time",
        Unit::Percent,
        vec![
            series("busy", "busy", &share(0), false, false),
            series("rwnd-limited", "rwnd", &share(1), false, false),
            series("sndbuf-limited", "sndbuf", &share(2), false, false),
        ],
        Vec::new(),
        &frame,
    ));
    out
}

/// The chart's mark at the lowest RTT the kernel saw, `value` ms.
fn min_rtt_mark(value: f64) -> Mark {
    Mark { label: "min RTT".into(), key: "minrtt", value }
}

/// Chrono counter `i`'s share of the time since the first sample (`base`: its time and
/// counters), as it grew: each sample's counter less the first's, over the time elapsed.
fn time_share(base: Option<(f64, [f64; 3])>, i: usize) -> impl Fn(&Point) -> Option<f64> {
    move |p: &Point| {
        let (t0, c0) = base?;
        let c = p.chrono_ms?;
        let elapsed = (p.unix_s - t0) * 1000.0;
        (elapsed > 0.0).then(|| (100.0 * (c[i] - c0[i]) / elapsed).clamp(0.0, 100.0))
    }
}

/// The flow's charts as one standalone SVG document (for `plot`), `title` above them.
pub fn standalone(title: &str, charts: &[Chart]) -> String {
    let h = super::HEIGHT * charts.len() as f64 + 30.0;
    let w = super::WIDTH;
    let mut s = format!(
        r##"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-labelledby="doc-title"><title id="doc-title">{}</title><style>{}</style><rect width="100%" height="100%" fill="#fff"/><text class="doc-title" x="8" y="20">{}</text>"##,
        super::esc(title),
        STYLE,
        super::esc(title)
    );
    for (i, c) in charts.iter().enumerate() {
        let y = 30.0 + super::HEIGHT * i as f64;
        s.push_str(&format!(r#"<g transform="translate(0 {y})">"#));
        s.push_str(&c.svg());
        s.push_str("</g>");
    }
    s.push_str("</svg>\n");
    s
}

/// The charts' colours and type, shared by the pages and standalone files.
pub const STYLE: &str = "\
svg.chart{font:11px sans-serif;background:#fff}\
.chart text{fill:#333}.chart .title{font-weight:bold;font-size:13px}.chart .legend{font-size:11px}\
.chart .grid{stroke:#e4e4e4}.chart .tick,.chart .frame{stroke:#888}.chart .empty{fill:#999}\
.chart polyline{fill:none;stroke-width:1.6}.chart line{stroke-width:1.6}\
.doc-title{font:bold 14px sans-serif}\
.s-rtt{stroke:#1f77b4;fill:#1f77b4}.s-minrtt{stroke:#2ca02c;fill:#2ca02c}\
.s-cwnd{stroke:#d62728;fill:#d62728}.s-ssthresh{stroke:#9467bd;fill:#9467bd}\
.s-pacing{stroke:#ff7f0e;fill:#ff7f0e}.s-delivery{stroke:#1f77b4;fill:#1f77b4}\
.s-retrans{stroke:#8c564b;fill:#8c564b}.s-busy{stroke:#7f7f7f;fill:#7f7f7f}\
.s-rwnd{stroke:#e377c2;fill:#e377c2}.s-sndbuf{stroke:#17becf;fill:#17becf}\
svg.spark polyline{fill:none;stroke-width:1.2}svg.spark{vertical-align:middle}\
.chart .pause{fill:#f2f2f2;stroke:#bbb;stroke-dasharray:3 3}\
";
