//! The web view: `/` (the host at a glance) and `/flow/{cookie}` (one flow's charts),
//! with the style sheet and the small refresh script they share.
//!
//! Every page renders in full on the server, charts included (SVG, [`crate::chart`]): it
//! reads without scripts. The script only refreshes: `/` re-fetches itself and swaps its
//! `#live` part; a flow page polls `/flow/{cookie}/live` (JSON with the charts) and swaps
//! the charts and facts. The builders here take plain data and return text, so they are
//! tested without a server or a kernel; the handlers in [`super`] gather the data.

use std::fmt::Write as _;

use crate::analysis::diagnosis::VERDICTS;
use crate::chart::flow::{STYLE as CHART_STYLE, charts, num};
use crate::chart::page::STYLE_CSS;
use crate::chart::{esc, sparkline};
use crate::recent::Ended;
use crate::record::Point;
use crate::tracker::views::Order;

/// Rows of `/` per page unless told (`?limit=`).
pub const DEFAULT_ROWS: usize = 100;

/// Most rows a page of `/` may hold.
pub const MAX_ROWS: usize = 1000;

/// Samples each row's sparklines show (its newest).
pub const SPARK_SAMPLES: usize = 60;

/// One active flow's row on `/`.
#[derive(Debug, Clone, Default)]
pub struct Row {
    /// Socket cookie.
    pub cookie: u64,
    /// `src:port → dst:port`.
    pub tuple: String,
    /// The service it belongs to.
    pub service: String,
    /// Its namespace, when several are sampled.
    pub netns: Option<String>,
    /// TCP state.
    pub state: &'static str,
    /// Current delivery rate, Mbit/s.
    pub rate_mbps: Option<f64>,
    /// Current smoothed RTT, ms.
    pub rtt_ms: Option<f64>,
    /// Minimum RTT, ms.
    pub min_rtt_ms: Option<f64>,
    /// Retransmitted segments.
    pub retrans: u32,
    /// Seconds since its first sample.
    pub age_s: f64,
    /// Its newest samples, oldest first.
    pub points: Vec<Point>,
}

/// One service's row on `/`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceRow {
    /// The service (systemd unit, container, user).
    pub name: String,
    /// Its listening port, when it serves one.
    pub port: u16,
    /// Active flows.
    pub flows: usize,
    /// Bytes acked and received per second, over the last second or more.
    pub bytes_per_s: f64,
    /// Median and 98th percentile of its flows' current RTT, ms.
    pub rtt_p50_ms: Option<f64>,
    /// See `rtt_p50_ms`.
    pub rtt_p98_ms: Option<f64>,
    /// Its flows by what limited them so far: receiver window, send buffer, network,
    /// application, not known yet.
    pub verdicts: [usize; 5],
}

/// Everything `/` shows.
#[derive(Debug, Default)]
pub struct Host {
    /// The page of flows, in order.
    pub rows: Vec<Row>,
    /// Active flows in all.
    pub total: usize,
    /// Their order.
    pub order: Order,
    /// The first row's index among all.
    pub offset: usize,
    /// Rows per page.
    pub limit: usize,
    /// The namespace the page is limited to (`?netns=`), kept in its links.
    pub netns_filter: Option<String>,
    /// Per service, busiest first.
    pub services: Vec<ServiceRow>,
    /// Recently ended flows, newest first; `None` when the ring is off.
    pub ended: Option<Vec<std::sync::Arc<Ended>>>,
    /// Whether several namespaces are sampled (a namespace column).
    pub netns: bool,
    /// The monitor's own state ([`super::status::status_section`]).
    pub health: String,
}

/// The page shell: title, style, navigation, `body`, and the refresh script.
pub fn layout(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\"><title>{}</title>\
         <link rel=\"stylesheet\" href=\"/static/style.css\"></head><body>\
         <nav><b>cgmon-rs</b> <a href=\"/\">host</a> <a href=\"/#ended\">recently ended</a> \
         <a href=\"/#health\">monitor health</a> <a href=\"/metrics\">metrics</a> \
         <span id=\"live-status\" role=\"status\"></span></nav>\n{body}\
         <script src=\"/static/live.js\"></script></body></html>\n",
        esc(title)
    )
}

/// A rate in Mbit/s as text with its unit (kbit/s to Gbit/s).
pub fn rate_text(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| bytes_rate_text(v * 1e6 / 8.0))
}

fn bytes_rate_text(b: f64) -> String {
    let bits = b * 8.0;
    if bits >= 1e9 {
        format!("{:.2} Gbit/s", bits / 1e9)
    } else if bits >= 1e6 {
        format!("{:.1} Mbit/s", bits / 1e6)
    } else if bits >= 1e3 {
        format!("{:.1} kbit/s", bits / 1e3)
    } else {
        format!("{bits:.0} bit/s")
    }
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

fn ms_opt(v: Option<f64>) -> String {
    v.map_or("–".into(), num)
}

/// A sparkline's series: key, name, value of a point, unit.
type Spark<'a> = (&'a str, &'a str, &'a dyn Fn(&Point) -> Option<f64>, &'a str);

/// A row's three sparklines: RTT, cwnd, delivery rate.
fn sparks(r: &Row) -> String {
    let series: [Spark<'_>; 3] = [
        ("rtt", "RTT", &|p| p.rtt_ms, "ms"),
        ("cwnd", "cwnd", &|p| p.cwnd_bytes.map(|b| b / 1000.0), "KB"),
        ("delivery", "delivery rate", &|p| p.delivery_mbps, "Mbit/s"),
    ];
    let mut s = String::new();
    for (key, name, f, unit) in series {
        let v: Vec<Option<f64>> = r.points.iter().map(f).collect();
        let have: Vec<f64> = v.iter().flatten().copied().collect();
        let label = match (have.iter().copied().reduce(f64::min), have.last()) {
            (Some(lo), Some(last)) => format!(
                "{name} over the last {} samples: from {} to {} {unit}, now {} {unit}",
                v.len(),
                num(lo),
                num(have.iter().copied().fold(f64::MIN, f64::max)),
                num(*last)
            ),
            _ => format!("{name}: no values yet"),
        };
        let _ = write!(s, "<td class=\"spark\">{}</td>", sparkline(&v, 80.0, 18.0, key, &label));
    }
    s
}

/// A bar of the verdict shares, with its numbers in words for screen readers.
fn verdict_bar(v: &[usize; 5]) -> String {
    let n: usize = v.iter().sum();
    if n == 0 {
        return "–".into();
    }
    let words: Vec<String> = VERDICTS
        .iter()
        .zip(v)
        .filter(|(_, c)| **c > 0)
        .map(|(name, c)| format!("{name} {:.0} %", 100.0 * *c as f64 / n as f64))
        .collect();
    let mut s = format!(
        "<div class=\"bar\" role=\"img\" aria-label=\"{}\" title=\"{}\">",
        esc(&words.join(", ")),
        esc(&words.join(", "))
    );
    for (name, c) in VERDICTS.iter().zip(v) {
        if *c > 0 {
            let _ = write!(
                s,
                "<span class=\"v-{name}\" style=\"width:{:.1}%\"></span>",
                100.0 * *c as f64 / n as f64
            );
        }
    }
    s.push_str("</div>");
    s
}

/// `/`.
pub fn host_page(h: &Host) -> String {
    let mut b = String::with_capacity(64 * 1024 + h.rows.len() * 2048);
    let _ = write!(b, "<main id=\"live\" data-live=\"\" data-kind=\"host\">");
    active_flows(&mut b, h);
    services(&mut b, h);
    recently_ended(&mut b, h);
    b.push_str("</section></main>\n");
    b.push_str(&h.health);
    layout("cgmon-rs: host", &b)
}

/// The host page's active flows: the orders, the pages, the table.
fn active_flows(b: &mut String, h: &Host) {
    let first = if h.rows.is_empty() { 0 } else { h.offset + 1 };
    let (within, filter) = match &h.netns_filter {
        Some(n) => {
            (format!(" in {}", esc(n)), format!("&amp;netns={}", esc(&super::url_escape(n))))
        }
        None => (String::new(), String::new()),
    };
    let _ = write!(
        b,
        "<section><h1>Active flows{within} <small>{first}–{} of {}</small></h1><p class=\"orders\">Busiest first by:",
        h.offset + h.rows.len(),
        h.total
    );
    // A link to another page of the same view: `order`, from row `offset`.
    let link = |order: Order, offset: usize| {
        let at = if offset > 0 { format!("&amp;offset={offset}") } else { String::new() };
        format!("/?order={}{at}&amp;limit={}{filter}", order.name(), h.limit)
    };
    for o in Order::ALL {
        let label = match o {
            Order::Rate => "delivery rate",
            Order::Rtt => "RTT",
            Order::Retrans => "retransmits",
            Order::Age => "age",
        };
        if o == h.order {
            let _ = write!(b, " <b aria-current=\"true\">{label}</b>");
        } else {
            let _ = write!(b, " <a href=\"{}\">{label}</a>", link(o, 0));
        }
    }
    if h.offset > 0 {
        let prev = link(h.order, h.offset.saturating_sub(h.limit));
        let _ = write!(b, " · <a rel=\"prev\" href=\"{prev}\">previous {}</a>", h.limit);
    }
    if h.offset + h.rows.len() < h.total {
        let next = link(h.order, h.offset + h.limit);
        let _ = write!(b, " · <a rel=\"next\" href=\"{next}\">next {}</a>", h.limit);
    }
    b.push_str("</p>\n<table id=\"flows\" class=\"num\"><thead><tr><th>flow</th><th>service</th>");
    if h.netns {
        b.push_str("<th>namespace</th>");
    }
    b.push_str(
        "<th>state</th><th>delivery rate</th><th>RTT / min RTT (ms)</th>\
         <th>retrans. (segments)</th><th>age</th><th>RTT</th><th>cwnd</th><th>delivery rate</th></tr></thead><tbody>\n",
    );
    for r in &h.rows {
        let _ = write!(
            b,
            "<tr class=\"flow\" data-cookie=\"{}\"><td><a href=\"/flow/{}\">{}</a></td><td>{}</td>",
            r.cookie,
            r.cookie,
            esc(&r.tuple),
            esc(&r.service)
        );
        if h.netns {
            let _ = write!(b, "<td>{}</td>", esc(r.netns.as_deref().unwrap_or("")));
        }
        let _ = writeln!(
            b,
            "<td>{}</td><td>{}</td><td>{} / {}</td><td>{}</td><td>{}</td>{}</tr>",
            r.state,
            rate_text(r.rate_mbps),
            ms_opt(r.rtt_ms),
            ms_opt(r.min_rtt_ms),
            r.retrans,
            age_text(r.age_s),
            sparks(r)
        );
    }
    if h.rows.is_empty() {
        b.push_str("<tr><td colspan=\"11\">No active flows.</td></tr>\n");
    }
    b.push_str("</tbody></table></section>\n");
}

/// The host page's services, each with its verdicts' shares.
fn services(b: &mut String, h: &Host) {
    b.push_str(
        "<section><h2>Services</h2><table id=\"services\" class=\"num\"><thead><tr><th>service</th><th>port</th>\
         <th>flows</th><th>traffic (acked + received)</th><th>RTT median (ms)</th><th>RTT p98 (ms)</th>\
         <th>limited by (share of flows)</th></tr></thead><tbody>\n",
    );
    for s in &h.services {
        let port = if s.port == 0 { "–".to_string() } else { s.port.to_string() };
        let _ = writeln!(
            b,
            "<tr><td>{}</td><td>{port}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.name),
            s.flows,
            bytes_rate_text(s.bytes_per_s),
            ms_opt(s.rtt_p50_ms),
            ms_opt(s.rtt_p98_ms),
            verdict_bar(&s.verdicts)
        );
    }
    b.push_str("</tbody></table><p class=\"legend\">");
    for v in VERDICTS {
        let _ = write!(b, "<span class=\"key v-{v}\"></span>{v} ");
    }
    b.push_str("</p></section>\n");
}

/// The host page's recently ended flows.
fn recently_ended(b: &mut String, h: &Host) {
    b.push_str("<section id=\"ended\"><h2>Recently ended</h2>");
    match &h.ended {
        None => b.push_str("<p>Not kept (<code>--recent-flows 0</code>).</p>"),
        Some(list) if list.is_empty() => b.push_str("<p>No flow has ended yet.</p>"),
        Some(list) => {
            b.push_str(
                "<table id=\"ended-flows\"><thead><tr><th>ended</th><th>flow</th><th>duration</th>\
                 <th>throughput (Mbit/s)</th><th>limited by</th><th>finding</th></tr></thead><tbody>\n",
            );
            for e in list {
                let (v, f) = e.verdict.as_ref().map_or(("–", ""), |(v, f)| (*v, f.as_str()));
                let _ = writeln!(
                    b,
                    "<tr><td>{}</td><td><a href=\"/flow/{}\">{}</a></td><td>{}</td><td class=\"n\">{}</td><td>{v}</td><td>{}</td></tr>",
                    esc(e.end_time.get(11..23).unwrap_or(&e.end_time)),
                    e.cookie,
                    esc(&e.tuple),
                    age_text(e.duration_ns as f64 / 1e9),
                    num(e.throughput_mbps),
                    esc(f)
                );
            }
            b.push_str("</tbody></table>");
        }
    }
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
    /// The pause that breaks a chart's line, s (`None`: from the points' spacing).
    pub gap_s: Option<f64>,
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
    charts("chart-", &v.points, v.min_rtt_ms, v.gap_s)
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
      if (kind === "flow" && r.status === 404) { location.reload(); return; }
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
