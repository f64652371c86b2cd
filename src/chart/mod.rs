//! Charts as SVG text, for the web view (`http`), `plot` and `report`.
//!
//! A chart is built in two steps, each testable alone: a model ([`Chart`]: series of
//! (time, value) points split at gaps, axis ranges with their ticks and units, a title and
//! a description) and its rendering ([`Chart::svg`]).
//!
//! Written here rather than with plotters: what the pages need of an SVG is what plotters'
//! SVG backend does not let a caller set. Each series must be findable (a `class` and a
//! `data-series` on its lines: the browser tests count a chart's points, the page's script
//! swaps charts by id), the chart must carry `role="img"` with a `<title>` and `<desc>` for
//! screen readers, and colours come from the page's style sheet so one chart serves the
//! page and a standalone file. Axes with "nice" ticks and a time axis are the rest, some
//! 200 lines; plotters would also emit a `<line>` per grid line and inline styles on each
//! element, which at 100 sparklines a page costs bytes for nothing.

pub mod flow;
pub mod page;

use std::borrow::Cow;
use std::fmt::Write as _;

/// What a series' values measure, and how the axis shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Milliseconds.
    Ms,
    /// Bytes, shown in B, KB, MB or GB (powers of 1000) as the range needs.
    Bytes,
    /// Megabits per second, shown in kbit/s, Mbit/s or Gbit/s as the range needs.
    Mbps,
    /// A count (segments).
    Count,
    /// Percent, 0–100.
    Percent,
}

impl Unit {
    /// The divisor and unit text for values up to `max`.
    pub fn scale(self, max: f64) -> (f64, &'static str) {
        match self {
            Unit::Ms => (1.0, "ms"),
            Unit::Count => (1.0, "segments"),
            Unit::Percent => (1.0, "%"),
            Unit::Bytes if max >= 1e9 => (1e9, "GB"),
            Unit::Bytes if max >= 1e6 => (1e6, "MB"),
            Unit::Bytes if max >= 1e3 => (1e3, "KB"),
            Unit::Bytes => (1.0, "B"),
            Unit::Mbps if max >= 1e3 => (1e3, "Gbit/s"),
            Unit::Mbps if max < 1.0 && max > 0.0 => (1e-3, "kbit/s"),
            Unit::Mbps => (1.0, "Mbit/s"),
        }
    }
}

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Its name in the legend.
    pub name: &'static str,
    /// Its class (the page's style sheet colours it) and `data-series` value.
    pub key: &'static str,
    /// Connected runs of (seconds since the chart's start, value): a value the kernel did
    /// not give, or a pause in sampling, ends one run and the next value starts another.
    pub runs: Vec<Vec<(f64, f64)>>,
    /// Drawn dashed (a reference, e.g. ssthresh).
    pub dashed: bool,
    /// Drawn as steps: each value holds until the next (a sampled value: the samples the
    /// tracker deduped in between were equal to it), and each run's last value until the
    /// time beside it here (parallel to `runs`; empty when not drawn as steps).
    pub holds: Vec<f64>,
}

impl Series {
    /// The points of all runs: the samples drawn.
    pub fn points(&self) -> usize {
        self.runs.iter().map(Vec::len).sum()
    }

    /// Whether it is drawn as steps.
    pub fn step(&self) -> bool {
        !self.holds.is_empty()
    }
}

/// A horizontal reference line (e.g. the minimum RTT).
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    /// Its label.
    pub label: String,
    /// Its class.
    pub key: &'static str,
    /// Its value, in the series' unit.
    pub value: f64,
}

/// An axis: its range, ticks (position, text) and title (with the unit).
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// Lowest value shown.
    pub min: f64,
    /// Highest value shown.
    pub max: f64,
    /// Tick positions and their text.
    pub ticks: Vec<(f64, String)>,
    /// The axis title, with its unit.
    pub title: String,
}

/// A chart over time, ready to render.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Its element id.
    pub id: String,
    /// Its title.
    pub title: String,
    /// What it shows, in words, for screen readers.
    pub desc: String,
    /// Time axis: seconds since `start_unix_s`.
    pub x: Axis,
    /// Value axis, in the series' unit divided by the scale the unit chose.
    pub y: Axis,
    /// The divisor applied to the series' values for drawing.
    pub y_div: f64,
    /// The lines.
    pub series: Vec<Series>,
    /// Horizontal reference lines.
    pub marks: Vec<Mark>,
    /// Spans (start, end; seconds since the start) in which the monitor took no sample of
    /// the flow: shaded, and the lines break there.
    pub pauses: Vec<(f64, f64)>,
}

/// Pixel size of a full chart.
pub const WIDTH: f64 = 720.0;
/// Pixel height of a full chart.
pub const HEIGHT: f64 = 210.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 40.0;

/// A coordinate written with one decimal, as `{:.1}` would (ties may round the other way,
/// a twentieth of a pixel). `{:.1}` on an `f64` runs the exact float formatter (Grisu, with a
/// Dragon fallback): perf showed it as the largest user-space cost of `/` at 20,000 flows
/// (about 6 % of the monitor's CPU with `/` requested every 100 ms), for a polyline of 60
/// points per sparkline. Integer arithmetic does the same job.
pub struct Px(pub f64);

impl std::fmt::Display for Px {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tenths = (self.0 * 10.0).round();
        if !tenths.is_finite() || tenths.abs() >= 1e15 {
            return write!(f, "{:.1}", self.0);
        }
        let t = tenths as i64;
        let sign = if t < 0 { "-" } else { "" };
        let a = t.unsigned_abs();
        write!(f, "{sign}{}.{}", a / 10, a % 10)
    }
}

/// The points of `run` a polyline `width` pixels wide needs. Up to four points a pixel
/// column it is `run` itself. Longer (an hour of samples on a flow's page is 3,600), each
/// column keeps its first, lowest, highest and last point, in time order: the line drawn
/// is the same at that resolution (every extreme and every step between columns is kept),
/// and the page stays small enough to refresh every second. `col` maps a time to its
/// x pixel.
pub fn thin(run: &[(f64, f64)], width: f64, col: impl Fn(f64) -> f64) -> Cow<'_, [(f64, f64)]> {
    let columns = width.max(1.0) as usize;
    if run.len() <= 4 * columns {
        return Cow::Borrowed(run);
    }
    let mut out = Vec::with_capacity(4 * columns + 4);
    let mut i = 0;
    while i < run.len() {
        let c = col(run[i].0).floor();
        let mut j = i + 1;
        while j < run.len() && col(run[j].0).floor() == c {
            j += 1;
        }
        let g = &run[i..j];
        let lo = (0..g.len()).min_by(|&a, &b| g[a].1.total_cmp(&g[b].1)).unwrap_or(0);
        let hi = (0..g.len()).max_by(|&a, &b| g[a].1.total_cmp(&g[b].1)).unwrap_or(0);
        let mut keep = [0, lo, hi, g.len() - 1];
        keep.sort_unstable();
        for (n, &k) in keep.iter().enumerate() {
            if n == 0 || keep[n - 1] != k {
                out.push(g[k]);
            }
        }
        i = j;
    }
    Cow::Owned(out)
}

/// Escapes text for XML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A step of 1, 2 or 5 × 10^k giving about `want` ticks over `span`.
fn nice_step(span: f64, want: f64) -> f64 {
    if span <= 0.0 || !span.is_finite() {
        return 1.0;
    }
    let raw = span / want;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let m = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// Text for a tick value at step `step` (as many decimals as the step needs).
fn tick_text(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 { 0 } else { (-step.log10().floor()) as usize };
    format!("{v:.decimals$}")
}

/// A value axis from 0 (or below, if a value is negative) to a round number at or above
/// `max`, with about five ticks. `max` is in the unit's base; the axis is in the scaled
/// unit, whose divisor is returned.
pub fn value_axis(name: &str, unit: Unit, min: f64, max: f64) -> (Axis, f64) {
    let (div, unit_text) = unit.scale(max);
    let (lo, hi) = ((min / div).min(0.0), (max / div).max(0.0));
    let (lo, hi) = match unit {
        Unit::Percent => (0.0, 100.0),
        _ if hi - lo <= 0.0 => (lo, lo + 1.0),
        _ => (lo, hi),
    };
    let step = nice_step(hi - lo, 5.0);
    let (lo, hi) = ((lo / step).floor() * step, (hi / step).ceil() * step);
    let mut ticks = Vec::new();
    let mut i = 0.0;
    while lo + i * step <= hi + step * 1e-9 {
        let v = lo + i * step;
        ticks.push((v, tick_text(v, step)));
        i += 1.0;
    }
    (Axis { min: lo, max: hi, ticks, title: format!("{name} ({unit_text})") }, div)
}

/// Steps a time axis may take, seconds.
const TIME_STEPS: [f64; 16] = [
    0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
    7200.0,
];

/// A time axis over `span` seconds from `start_unix_s`, ticks at round wall-clock times,
/// labelled in local time (with tenths when the step is under a second).
pub fn time_axis(start_unix_s: f64, span: f64) -> Axis {
    let span = if span > 0.0 { span } else { 1.0 };
    let step = TIME_STEPS.iter().copied().find(|s| span / s <= 7.0).unwrap_or(21_600.0);
    // Ticks at multiples of the step in wall-clock time (local offset included, so that
    // minutes and hours fall on round local times).
    let off = local_offset_s(start_unix_s);
    let first = ((start_unix_s + off) / step).ceil() * step - off - start_unix_s;
    let mut ticks = Vec::new();
    let mut t = first;
    while t <= span + 1e-9 {
        ticks.push((t, clock_text(start_unix_s + t, step < 1.0)));
        t += step;
    }
    let zone = chrono::Local::now().format("%:z");
    let day = date_text(start_unix_s);
    Axis { min: 0.0, max: span, ticks, title: format!("time ({day}, UTC{zone})") }
}

fn local(unix_s: f64) -> Option<chrono::DateTime<chrono::Local>> {
    let secs = unix_s.floor();
    let ns = ((unix_s - secs) * 1e9) as u32;
    chrono::DateTime::from_timestamp(secs as i64, ns.min(999_999_999))
        .map(|t| t.with_timezone(&chrono::Local))
}

fn local_offset_s(unix_s: f64) -> f64 {
    local(unix_s).map_or(0.0, |t| f64::from(t.offset().local_minus_utc()))
}

/// `HH:MM:SS` (with tenths when `tenths`) in local time.
pub fn clock_text(unix_s: f64, tenths: bool) -> String {
    // Rounded to the tenth first: a tick at 48.4 s held as 48.39999… is 48.4, not 48.3.
    let tenth = (unix_s * 10.0).round();
    match local(if tenths { tenth / 10.0 } else { unix_s }) {
        Some(t) if tenths => format!("{}.{}", t.format("%H:%M:%S"), tenth.rem_euclid(10.0) as u8),
        Some(t) => t.format("%H:%M:%S").to_string(),
        None => format!("{unix_s:.0}"),
    }
}

/// `YYYY-MM-DD` in local time.
pub fn date_text(unix_s: f64) -> String {
    local(unix_s).map_or_else(String::new, |t| t.format("%Y-%m-%d").to_string())
}

/// Splits (time, value, after a pause) samples into runs: a `None` value ends a run,
/// and so does a pause before a sample. Beside each run, the time its last value holds
/// until: the next sample (the one without a value), `end` for the last run, and its own
/// last sample's time before a pause (what came after it is not known).
pub fn runs(
    points: impl IntoIterator<Item = (f64, Option<f64>, bool)>,
    end: f64,
) -> (Vec<Vec<(f64, f64)>>, Vec<f64>) {
    let (mut out, mut holds): (Vec<Vec<(f64, f64)>>, Vec<f64>) = (Vec::new(), Vec::new());
    let mut open = false;
    for (t, v, after_pause) in points {
        let v = v.filter(|v| v.is_finite());
        if open && (v.is_none() || after_pause) {
            // The run ends here: held up to this sample, or not at all across a pause.
            let last = out.last().and_then(|r| r.last()).map_or(t, |p| p.0);
            holds.push(if after_pause { last } else { t });
            open = false;
        }
        if let Some(v) = v {
            if !open {
                out.push(Vec::new());
            }
            if let Some(r) = out.last_mut() {
                r.push((t, v));
            }
            open = true;
        }
    }
    if open {
        let last = out.last().and_then(|r| r.last()).map_or(end, |p| p.0);
        holds.push(end.max(last));
    }
    (out, holds)
}

/// The spans between a sample after a pause and the sample before it, for
/// [`Chart::pauses`].
pub fn pauses(times_and_flags: impl IntoIterator<Item = (f64, bool)>) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let mut prev: Option<f64> = None;
    for (t, paused) in times_and_flags {
        if paused && let Some(p) = prev {
            out.push((p, t));
        }
        prev = Some(t);
    }
    out
}

impl Chart {
    /// The chart as an `<svg>` element (`WIDTH` × `HEIGHT`, scaling with its container).
    pub fn svg(&self) -> String {
        let (w, h) = (WIDTH, HEIGHT);
        let (pw, ph) = (w - LEFT - RIGHT, h - TOP - BOTTOM);
        let id = esc(&self.id);
        let mut s = String::with_capacity(4096);
        let _ = write!(
            s,
            r#"<svg class="chart" id="{id}" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-labelledby="{id}-t {id}-d" xmlns="http://www.w3.org/2000/svg"><title id="{id}-t">{}</title><desc id="{id}-d">{}</desc>"#,
            esc(&self.title),
            esc(&self.desc)
        );
        let _ = write!(s, r#"<text class="title" x="{LEFT}" y="18">{}</text>"#, esc(&self.title));
        self.legend(&mut s);
        self.axes(&mut s);
        self.plot(&mut s);
        if self.series.iter().all(|x| x.runs.is_empty()) {
            let _ = write!(
                s,
                r#"<text class="empty" x="{:.1}" y="{:.1}" text-anchor="middle">no samples</text>"#,
                LEFT + pw / 2.0,
                TOP + ph / 2.0
            );
        }
        s.push_str("</svg>");
        s
    }
    /// Where time `t` falls, in pixels from the left.
    fn x_px(&self, t: f64) -> f64 {
        let pw = WIDTH - LEFT - RIGHT;
        LEFT + (t - self.x.min) / (self.x.max - self.x.min).max(1e-12) * pw
    }

    /// Where value `v` falls, in pixels from the top.
    fn y_px(&self, v: f64) -> f64 {
        let ph = HEIGHT - TOP - BOTTOM;
        TOP + ph - (v - self.y.min) / (self.y.max - self.y.min).max(1e-12) * ph
    }

    /// The legend, right-aligned on the title line.
    fn legend(&self, s: &mut String) {
        let w = WIDTH;
        let mut lx = w - RIGHT;
        for (name, key, dashed) in self
            .series
            .iter()
            .map(|x| (x.name.to_string(), x.key, x.dashed))
            .chain(self.marks.iter().map(|m| (m.label.clone(), m.key, true)))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            let tw = 7.0 * name.chars().count() as f64;
            lx -= tw;
            let _ = write!(s, r#"<text class="legend" x="{lx:.1}" y="18">{}</text>"#, esc(&name));
            let dash = if dashed { r#" stroke-dasharray="4 3""# } else { "" };
            let _ = write!(
                s,
                r#"<line class="s-{key}" x1="{:.1}" y1="14" x2="{:.1}" y2="14"{dash}/>"#,
                lx - 22.0,
                lx - 4.0
            );
            lx -= 34.0;
        }
    }

    /// Axes, grid, ticks and axis titles.
    fn axes(&self, s: &mut String) {
        let (w, h) = (WIDTH, HEIGHT);
        let (pw, ph) = (w - LEFT - RIGHT, h - TOP - BOTTOM);
        let _ = write!(s, r#"<g class="axis">"#);
        for (v, text) in &self.y.ticks {
            let y = self.y_px(*v);
            let _ = write!(
                s,
                r#"<line class="grid" x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                w - RIGHT,
                LEFT - 6.0,
                y + 4.0,
                esc(text)
            );
        }
        for (t, text) in &self.x.ticks {
            let x = self.x_px(*t);
            // A label at the right edge would be cut: it ends at its tick instead.
            let half = 3.5 * text.chars().count() as f64;
            let anchor = if x + half > w { "end" } else { "middle" };
            let _ = write!(
                s,
                r#"<line class="tick" x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}"/><text x="{x:.1}" y="{:.1}" text-anchor="{anchor}">{}</text>"#,
                TOP + ph,
                TOP + ph + 4.0,
                TOP + ph + 16.0,
                esc(text)
            );
        }
        let _ = write!(
            s,
            r#"<line class="frame" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{:.1}"/><line class="frame" x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}"/>"#,
            TOP + ph,
            TOP + ph,
            w - RIGHT,
            TOP + ph
        );
        let _ = write!(
            s,
            r#"<text class="axis-title" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            h - 6.0,
            esc(&self.x.title)
        );
        let _ = write!(
            s,
            r#"<text class="axis-title" transform="rotate(-90)" x="{:.1}" y="14" text-anchor="middle">{}</text></g>"#,
            -(TOP + ph / 2.0),
            esc(&self.y.title)
        );
    }

    /// The pauses, the marks, then each series' runs (a run of one sample as a dot).
    fn plot(&self, s: &mut String) {
        let w = WIDTH;
        let pw = w - LEFT - RIGHT;
        let ph = HEIGHT - TOP - BOTTOM;
        for &(a, b) in &self.pauses {
            let (x0, x1) = (self.x_px(a), self.x_px(b));
            let _ = write!(
                s,
                r#"<rect class="pause" data-pause="" x="{:.1}" y="{TOP}" width="{:.1}" height="{ph:.1}"><title>not sampled for {} s</title></rect>"#,
                x0,
                (x1 - x0).max(1.0),
                flow::num(b - a)
            );
        }
        for m in &self.marks {
            let y = self.y_px(m.value / self.y_div);
            let _ = write!(
                s,
                r#"<line class="s-{}" data-mark="{}" x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke-dasharray="4 3"/>"#,
                m.key,
                m.key,
                w - RIGHT
            );
        }
        for x in &self.series {
            let dash = if x.dashed { r#" stroke-dasharray="6 3""# } else { "" };
            for (i, run) in x.runs.iter().enumerate() {
                let hold = x.holds.get(i).copied().filter(|&h| run.last().is_some_and(|p| h > p.0));
                let _ = write!(
                    s,
                    r#"<polyline class="s-{}" data-series="{}" data-n="{}"{dash} points=""#,
                    x.key,
                    x.key,
                    run.len()
                );
                let drawn = thin(run, pw, |t| self.x_px(t));
                let mut prev_y: Option<f64> = None;
                for (i, &(t, v)) in drawn.iter().enumerate() {
                    let sep = if i == 0 { "" } else { " " };
                    let (px, py) = (self.x_px(t), self.y_px(v / self.y_div));
                    if let Some(y0) = prev_y.filter(|&y0| x.step() && y0 != py) {
                        // The value held until this sample: across, then up or down.
                        let _ = write!(s, " {},{}", Px(px), Px(y0));
                    }
                    let _ = write!(s, "{sep}{},{}", Px(px), Px(py));
                    prev_y = Some(py);
                }
                if let (Some(h), Some(y)) = (hold, prev_y) {
                    let _ = write!(s, " {},{}", Px(self.x_px(h)), Px(y));
                }
                s.push_str("\"/>");
                // A run of one sample would draw nothing as a line: a dot shows it.
                if let ([(t, v)], None) = (&run[..], hold) {
                    let (t, v) = (*t, *v);
                    let _ = write!(
                        s,
                        r#"<circle class="s-{}" data-dot="{}" cx="{:.1}" cy="{:.1}" r="2.5"/>"#,
                        x.key,
                        x.key,
                        self.x_px(t),
                        self.y_px(v / self.y_div)
                    );
                }
            }
        }
    }
}

/// A small inline chart of `values` (oldest first, at their times; `None` breaks the
/// line), `w` × `h` pixels, over the last `span` seconds up to `end`, scaled from 0 to
/// its largest value and drawn as steps held until the next sample (or `end`), as the
/// full charts are; `label` is read out by screen readers.
pub fn sparkline(
    values: &[(f64, Option<f64>, bool)],
    end: f64,
    span: f64,
    (w, h): (f64, f64),
    key: &str,
    label: &str,
) -> String {
    let max = values.iter().filter_map(|p| p.1).fold(0.0, f64::max);
    let start = end - span.max(1e-9);
    let x = |t: f64| 1.0 + ((t - start) / (end - start)).clamp(0.0, 1.0) * (w - 2.0);
    let y = |v: f64| if max > 0.0 { h - 1.0 - v / max * (h - 2.0) } else { h - 1.0 };
    let mut s = format!(
        r#"<svg class="spark" data-series="{key}" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{}">"#,
        esc(label)
    );
    let (lines, holds) = runs(values.iter().copied(), end);
    for (run, hold) in lines.iter().zip(holds) {
        let _ = write!(s, r#"<polyline class="s-{key}" points=""#);
        let mut prev: Option<f64> = None;
        for (i, &(t, v)) in run.iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            if let Some(y0) = prev.filter(|&y0| y0 != y(v)) {
                let _ = write!(s, " {},{}", Px(x(t)), Px(y0));
            }
            let _ = write!(s, "{sep}{},{}", Px(x(t)), Px(y(v)));
            prev = Some(y(v));
        }
        if let (Some(y0), Some(&(t, _))) = (prev, run.last())
            && hold > t
        {
            let _ = write!(s, " {},{}", Px(x(hold)), Px(y0));
        }
        s.push_str("\"/>");
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests;
