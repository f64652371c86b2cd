//! The web view: `/` (the host at a glance) and `/flow/{cookie}` (one flow's charts),
//! with the style sheet and the small refresh script they share.
//!
//! Every page renders in full on the server, charts included (SVG, [`crate::chart`]): it
//! reads without scripts. The script only refreshes: `/` re-fetches itself and swaps its
//! `#live` part; a flow page polls `/flow/{cookie}/live` (JSON with the charts) and swaps
//! the charts and facts. The builders here take plain data and return text, so they are
//! tested without a server or a kernel; the handlers in [`super`] gather the data.

use std::fmt::Write as _;

use crate::chart::flow::{STYLE as CHART_STYLE, charts, num};
use crate::chart::page::STYLE_CSS;
use crate::chart::{esc, sparkline};
use crate::record::Point;

mod host;
pub use host::{Filters, Host, Row, ServiceRow, host_page, verdict_cell};

/// Rows of `/` per page unless told (`?limit=`).
pub const DEFAULT_ROWS: usize = 100;

/// Most rows a page of `/` may hold.
pub const MAX_ROWS: usize = 1000;

/// Samples each row's sparklines show (its newest).
pub const SPARK_SAMPLES: usize = 60;

/// Seconds a row's sparklines span, up to its last sample.
pub const SPARK_SPAN_S: f64 = 60.0;

/// The page shell: title, style, navigation, `body`, and the refresh script.
pub fn layout(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\"><title>{}</title>\
         <link rel=\"stylesheet\" href=\"/static/style.css\"></head><body>\
         <nav><b>cgmon-rs</b> <a href=\"/\">host</a> <a href=\"/#ended\">recently ended</a> \
         <a href=\"/health\">monitor health</a> <a href=\"/flows\">flows (JSON)</a> \
         <a href=\"/metrics\">metrics</a> \
         <span id=\"live-status\" role=\"status\"></span></nav>\n{body}\
         <script src=\"/static/live.js\"></script></body></html>\n",
        esc(title)
    )
}

/// A rate in Mbit/s as text with its SI unit, or a dash.
pub fn rate_text(v: Option<f64>) -> String {
    // A negative rate is a record's "none" (`UNKNOWN_RATE`: a flow of one sample without
    // busy time), not a rate: an ended flow's page read "-1000000 bit/s".
    v.filter(|r| *r >= 0.0).map_or("–".into(), crate::units::si_rate_mbps)
}

fn age_text(s: f64) -> String {
    if s >= 3600.0 {
        format!("{}h{:02}m", (s / 3600.0) as u64, ((s % 3600.0) / 60.0) as u64)
    } else if s >= 60.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!("{s:.1}s")
    }
}

/// A row's three sparklines (RTT, cwnd, delivery rate) over the last [`SPARK_SPAN_S`]
/// (or the flow's life when shorter) up to `end` (Unix s), each value held until the next
/// sample as in the full charts.
fn sparks(points: &[Point], end: f64) -> String {
    type Value<'a> = &'a dyn Fn(&Point) -> Option<f64>;
    let series: [(&str, &str, Value<'_>, &str); 3] = [
        ("rtt", "RTT", &|p| p.rtt_ms, "ms"),
        ("cwnd", "cwnd", &|p| p.cwnd_bytes.map(|b| b / 1000.0), "KB"),
        ("delivery", "delivery rate", &|p| p.delivery_mbps, "Mbit/s"),
    ];
    let mut s = String::new();
    for (key, name, f, unit) in series {
        let v: Vec<(f64, Option<f64>, bool)> =
            points.iter().map(|p| (p.unix_s, f(p), p.after_pause)).collect();
        let have: Vec<f64> = v.iter().filter_map(|x| x.1).collect();
        let label = match (have.iter().copied().reduce(f64::min), have.last()) {
            (Some(lo), Some(last)) => format!(
                "{name} over its last {} samples: from {} to {} {unit}, now {} {unit}",
                v.len(),
                num(lo),
                num(have.iter().copied().fold(f64::MIN, f64::max)),
                num(*last)
            ),
            _ => format!("{name}: no values yet"),
        };
        // The last minute, or the flow's life when shorter: a young flow fills its box.
        let span =
            points.first().map_or(SPARK_SPAN_S, |p| (end - p.unix_s).clamp(1.0, SPARK_SPAN_S));
        let line = sparkline(&v, end, span, (80.0, 18.0), key, &label);
        let _ = write!(s, "<td class=\"spark\">{line}</td>");
    }
    s
}

/// What a flow page shows.
#[derive(Debug, Default)]
pub struct FlowView {
    /// Socket cookie.
    pub cookie: u64,
    /// `src:port → dst:port`.
    pub tuple: String,
    /// Whether it is still open.
    pub active: bool,
    /// Its samples (an ended flow's: some, [`crate::recent::spread`]), oldest first.
    pub points: Vec<Point>,
    /// Samples in its window in all.
    pub samples: usize,
    /// Until when its last values held, Unix s: its last sample, deduped or not (`None`:
    /// the last point).
    pub end_unix_s: Option<f64>,
    /// Minimum RTT, ms.
    pub min_rtt_ms: Option<f64>,
    /// Facts as (name, value) pairs, first the diagnosis.
    pub facts: Vec<(String, String)>,
    /// The diagnosis' verdict and its sentence.
    pub verdict: Option<(String, String)>,
    /// The record (ended) or the record it would have if it ended now (active), as JSON.
    pub json: String,
}

/// The facts block of a flow page (swapped by the script as the flow goes on).
pub fn facts_html(v: &FlowView) -> String {
    let mut s = String::new();
    if let Some((verdict, finding)) = &v.verdict {
        let so_far = if v.active { " so far" } else { "" };
        let _ = write!(
            s,
            "<p class=\"verdict\"><span class=\"key v-{}\"></span><b>Limited by {}{so_far}:</b> {}</p>",
            esc(verdict),
            esc(verdict),
            esc(finding)
        );
    }
    s.push_str("<table class=\"facts\">");
    for (k, val) in &v.facts {
        let _ = write!(s, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(val));
    }
    s.push_str("</table>");
    s
}

/// The charts of a flow page, by chart id.
pub fn chart_svgs(v: &FlowView) -> Vec<(String, String)> {
    charts("chart-", &v.points, v.min_rtt_ms, v.end_unix_s)
        .into_iter()
        .map(|c| (c.id.clone(), c.svg()))
        .collect()
}

/// `/flow/{cookie}`.
pub fn flow_page(v: &FlowView) -> String {
    let mut b = String::with_capacity(64 * 1024);
    let state = if v.active { "active" } else { "ended" };
    let _ = write!(
        b,
        "<main id=\"flow\" data-live=\"{}\" data-kind=\"flow\" data-active=\"{}\"><h1>{} <small>cookie {} · {state}</small></h1>",
        if v.active { format!("/flow/{}/live", v.cookie) } else { String::new() },
        v.active,
        esc(&v.tuple),
        v.cookie
    );
    let shown = v.points.len();
    let which = if shown < v.samples {
        // An ended flow's, from the ring (`recent::spread`).
        format!(
            "Charts of {shown} of its {} samples, spread over its life: in each of {} equal \
             stretches, the first, the last, and those with the lowest and highest RTT",
            v.samples,
            crate::recent::MAX_POINTS / 4
        )
    } else {
        format!("Charts of its {shown} sample{}", if shown == 1 { "" } else { "s" })
    };
    let _ = write!(
        b,
        "<p>{which}{}.</p><div id=\"facts\">{}</div><div class=\"charts\">",
        if v.active { ", refreshed while it lives" } else { "" },
        facts_html(v)
    );
    for (_, svg) in chart_svgs(v) {
        b.push_str(&svg);
    }
    let what = if v.active {
        "The record it would have if it ended now (JSON)"
    } else {
        "Its record (JSON)"
    };
    let _ = write!(
        b,
        "</div><details open><summary>{what}</summary><pre id=\"record\">{}</pre></details></main>",
        esc(&v.json)
    );
    layout(&format!("cgmon-rs: {}", v.tuple), &b)
}

/// `/flow/{cookie}/live`: what the script swaps in.
pub fn flow_live(v: &FlowView) -> serde_json::Value {
    let charts: serde_json::Map<String, serde_json::Value> =
        chart_svgs(v).into_iter().map(|(id, svg)| (id, svg.into())).collect();
    serde_json::json!({
        "active": v.active,
        "samples": v.points.len(),
        "charts": charts,
        "facts": facts_html(v),
    })
}

/// The style sheet: the page's and the charts'.
pub fn style_css() -> String {
    format!("{STYLE_CSS}{CHART_STYLE}")
}

/// `/static/live.js`: refreshes `/` and flow pages while they are open (every 2 s; a
/// checkbox in the navigation bar pauses it). Without it the pages are complete, only
/// not refreshed.
pub const LIVE_JS: &str = r#""use strict";
(function () {
  const root = document.querySelector("[data-kind]");
  const status = document.getElementById("live-status");
  if (!root || !status) return;
  const kind = root.dataset.kind;
  const url = kind === "host" ? location.pathname + location.search : root.dataset.live;
  if (!url) return; // an ended flow: nothing to refresh
  const box = document.createElement("input");
  box.type = "checkbox";
  box.checked = true;
  box.id = "live-toggle";
  const label = document.createElement("label");
  label.htmlFor = box.id;
  label.textContent = " refresh every 2 s ";
  status.append(box, label);
  const note = document.createElement("span");
  status.append(note);
  const say = (t) => { note.textContent = t; };
  let busy = false;
  async function tick() {
    if (!box.checked || busy) return;
    busy = true;
    try {
      const r = await fetch(url, { cache: "no-store" });
      if (kind === "flow" && (r.status === 404 || r.status === 410)) { location.reload(); return; }
      if (!r.ok) { say("refresh failed: HTTP " + r.status); return; }
      if (kind === "flow") {
        const j = await r.json();
        for (const [id, svg] of Object.entries(j.charts)) {
          const el = document.getElementById(id);
          if (el) el.outerHTML = svg;
        }
        document.getElementById("facts").innerHTML = j.facts;
        say("updated " + new Date().toLocaleTimeString());
        if (!j.active) { location.reload(); }
      } else {
        const doc = new DOMParser().parseFromString(await r.text(), "text/html");
        const fresh = doc.getElementById("live");
        if (fresh) root.innerHTML = fresh.innerHTML;
        say("updated " + new Date().toLocaleTimeString());
      }
    } catch (e) {
      say("refresh failed: " + e.message);
    } finally {
      busy = false;
    }
  }
  setInterval(tick, 2000);
})();
"#;

#[cfg(test)]
mod tests;
