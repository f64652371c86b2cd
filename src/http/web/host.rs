//! `/`, the host at a glance: which flows move the most bytes now, what limits each (its
//! verdict so far and the number behind it), the services' traffic, and the flows that
//! ended lately with the limited ones first and trivial short connections grouped.
//!
//! The builders take plain data and return text (tested without a server or a kernel);
//! [`crate::http::gather`] gathers the data.

use std::fmt::Write as _;
use std::sync::Arc;

use super::{esc, sparks};
use crate::analysis::diagnosis::VERDICTS;
use crate::recent::Ended;
use crate::record::Point;
use crate::tracker::views::Order;
use crate::units::{si_bytes, si_rate_bps};

/// How far back the services' rates average (see [`crate::tracker::accounts`]).
pub use crate::tracker::accounts::SERVICE_RATE_TAU_S;

/// One active flow's row on `/`.
#[derive(Debug, Clone, Default)]
pub struct Row {
    /// Socket cookie.
    pub cookie: u64,
    /// `src:port → dst:port`.
    pub tuple: String,
    /// The service it belongs to.
    pub service: String,
    /// The program that owns it, when known.
    pub comm: Option<String>,
    /// The remote end's name (`--dest-map` and its fallbacks).
    pub dest: Option<String>,
    /// Its namespace, when several are sampled.
    pub netns: Option<String>,
    /// TCP state.
    pub state: &'static str,
    /// Bytes acked and received per second, recently.
    pub bytes_per_s: f64,
    /// Its verdict so far ([`VERDICTS`]) and cause.
    pub verdict: &'static str,
    /// The finer cause, when one is named.
    pub cause: Option<&'static str>,
    /// The number behind the verdict ("window 39.0 KB → 6.2 Mbit/s cap").
    pub main: String,
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
    /// Its last sample's time (deduped or not), Unix s: the sparklines hold to it.
    pub end_unix_s: f64,
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
    /// Bytes acked and received per second, averaged over about
    /// [`SERVICE_RATE_TAU_S`].
    pub bytes_per_s: f64,
    /// Median and 98th percentile of its flows' current RTT, ms.
    pub rtt_p50_ms: Option<f64>,
    /// See `rtt_p50_ms`.
    pub rtt_p98_ms: Option<f64>,
    /// Its flows by what limited them so far, in [`VERDICTS`] order.
    pub verdicts: [usize; 5],
}

/// The filter `/` was asked for (`?service=&verdict=&dest=&idle=1`), kept in its links.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filters {
    /// Only this service's flows.
    pub service: Option<String>,
    /// Only the flows with this verdict so far.
    pub verdict: Option<String>,
    /// Only the flows to this destination name.
    pub dest: Option<String>,
    /// Idle flows too.
    pub idle: bool,
    /// Only this namespace's flows.
    pub netns: Option<String>,
}

impl Filters {
    /// The filters as a query string tail (`&amp;service=…`), for links.
    fn query(&self) -> String {
        let mut q = String::new();
        for (k, v) in [
            ("service", &self.service),
            ("verdict", &self.verdict),
            ("dest", &self.dest),
            ("netns", &self.netns),
        ] {
            if let Some(v) = v {
                let _ = write!(q, "&amp;{k}={}", esc(&crate::units::url_escape(v)));
            }
        }
        if self.idle {
            q.push_str("&amp;idle=1");
        }
        q
    }

    fn any(&self) -> bool {
        self.service.is_some() || self.verdict.is_some() || self.dest.is_some()
    }
}

/// Everything `/` shows.
#[derive(Debug, Default)]
pub struct Host {
    /// The page of flows, in order.
    pub rows: Vec<Row>,
    /// Flows the filters let through (idle ones included).
    pub total: usize,
    /// Of those, idle ones not listed (no retained sample for
    /// [`crate::tracker::views::IDLE_NS`]).
    pub idle: usize,
    /// Active flows in all.
    pub all: usize,
    /// Their order.
    pub order: Order,
    /// The first row's index among all.
    pub offset: usize,
    /// Rows per page.
    pub limit: usize,
    /// The filters asked for.
    pub filters: Filters,
    /// What the filter menus offer: services and destinations seen among active flows.
    pub choices: (Vec<String>, Vec<String>),
    /// Per service, busiest first.
    pub services: Vec<ServiceRow>,
    /// Recently ended flows, newest first; `None` when the ring is off.
    pub ended: Option<Vec<Arc<Ended>>>,
    /// Whether several namespaces are sampled (a namespace column).
    pub netns: bool,
    /// The monitor's own state ([`crate::http::status::status_section`]).
    pub health: String,
}

/// A verdict as a coloured key and its name, with its cause: `none` when no rule named
/// one, as in ClickHouse and the metrics' labels (one vocabulary, no blank).
pub fn verdict_cell(verdict: &str, cause: Option<&str>) -> String {
    let cause = cause.unwrap_or(crate::metrics::verdicts::NO_CAUSE);
    format!(
        "<span class=\"key v-{}\"></span>{} <small>({})</small>",
        esc(verdict),
        esc(verdict),
        esc(cause)
    )
}

/// `/`.
pub fn host_page(h: &Host) -> String {
    let mut b = String::with_capacity(64 * 1024 + h.rows.len() * 2048);
    b.push_str("<main id=\"live\" data-live=\"\" data-kind=\"host\">");
    active_flows(&mut b, h);
    services(&mut b, h);
    recently_ended(&mut b, h);
    b.push_str("</main>\n");
    b.push_str(&h.health);
    super::layout("cgmon-rs: host", &b)
}

/// The filter form: service, verdict, destination, idle flows; a plain GET form, so it
/// works without the script.
fn filter_form(b: &mut String, h: &Host) {
    let f = &h.filters;
    let select =
        |b: &mut String, name: &str, label: &str, opts: &[String], cur: &Option<String>| {
            let _ =
                write!(b, "<label>{label} <select name=\"{name}\"><option value=\"\">all</option>");
            for o in opts {
                let sel = if cur.as_deref() == Some(o.as_str()) { " selected" } else { "" };
                let _ = write!(b, "<option{sel}>{}</option>", esc(o));
            }
            b.push_str("</select></label> ");
        };
    b.push_str("<form class=\"filters\" method=\"get\" action=\"/\">");
    let _ = write!(b, "<input type=\"hidden\" name=\"order\" value=\"{}\">", h.order.name());
    if let Some(n) = &f.netns {
        let _ = write!(b, "<input type=\"hidden\" name=\"netns\" value=\"{}\">", esc(n));
    }
    select(b, "service", "service", &h.choices.0, &f.service);
    let verdicts: Vec<String> = VERDICTS.iter().map(|v| v.to_string()).collect();
    select(b, "verdict", "limited by", &verdicts, &f.verdict);
    select(b, "dest", "destination", &h.choices.1, &f.dest);
    let checked = if f.idle { " checked" } else { "" };
    let _ = write!(
        b,
        "<label><input type=\"checkbox\" name=\"idle\" value=\"1\"{checked}> idle flows too</label> \
         <button>show</button>"
    );
    if f.any() || f.idle {
        b.push_str(" <a href=\"/\">clear</a>");
    }
    b.push_str("</form>\n");
}

/// The host page's active flows: the filters, the orders, the pages, the table.
fn active_flows(b: &mut String, h: &Host) {
    let listed = h.total - h.idle.min(h.total);
    let first = if h.rows.is_empty() { 0 } else { h.offset + 1 };
    let within = h.filters.netns.as_ref().map(|n| format!(" in {}", esc(n))).unwrap_or_default();
    let of_all = if h.filters.any() { format!(" (of {} active)", h.all) } else { String::new() };
    let _ = write!(
        b,
        "<section><h1>Active flows{within} <small>{first}–{} of {listed}{of_all}</small></h1>",
        h.offset + h.rows.len(),
    );
    filter_form(b, h);
    let q = h.filters.query();
    // A link to another page of the same view: `order`, from row `offset`.
    let link = |order: Order, offset: usize| {
        let at = if offset > 0 { format!("&amp;offset={offset}") } else { String::new() };
        format!("/?order={}{at}&amp;limit={}{q}", order.name(), h.limit)
    };
    b.push_str("<p class=\"orders\">Busiest first by:");
    for o in Order::ALL {
        let label = match o {
            Order::Rate => "throughput",
            Order::Rtt => "RTT",
            Order::Retrans => "retransmits",
            Order::Age => "age",
            Order::Cookie => "cookie",
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
    if h.offset + h.rows.len() < listed {
        let next = link(h.order, h.offset + h.limit);
        let _ = write!(b, " · <a rel=\"next\" href=\"{next}\">next {}</a>", h.limit);
    }
    b.push_str("</p>\n<table id=\"flows\" class=\"num\"><thead><tr><th>flow</th><th>program / service</th><th>destination</th>");
    if h.netns {
        b.push_str("<th>namespace</th>");
    }
    b.push_str(
        "<th title=\"bytes acked and received per second, over about the last 2 s\">throughput</th>\
         <th class=\"l\">limited by, so far</th><th>RTT / min (ms)</th><th>retrans.</th><th>age</th>\
         <th>RTT</th><th>cwnd</th><th>delivery rate</th></tr></thead><tbody>\n",
    );
    for r in &h.rows {
        flow_row(b, h, r);
    }
    if h.rows.is_empty() {
        b.push_str("<tr><td colspan=\"12\">No active flows here.</td></tr>\n");
    }
    b.push_str("</tbody></table>");
    if h.idle > 0 {
        let _ = write!(
            b,
            "<p class=\"idle\" id=\"idle-flows\">{} idle flow{} (nothing moved or waiting for 30 s or more) not listed: \
             <a href=\"/?order={}&amp;limit={}{}&amp;idle=1\">show them too</a>.</p>",
            h.idle,
            if h.idle == 1 { "" } else { "s" },
            h.order.name(),
            h.limit,
            Filters { idle: false, ..h.filters.clone() }.query()
        );
    }
    b.push_str("</section>\n");
}

fn flow_row(b: &mut String, h: &Host, r: &Row) {
    let who = match &r.comm {
        Some(c) => format!("<b>{}</b><br><small>{}</small>", esc(c), esc(&r.service)),
        None => esc(&r.service),
    };
    let _ = write!(
        b,
        "<tr class=\"flow\" data-cookie=\"{}\" data-verdict=\"{}\"><td><a href=\"/flow/{}\">{}</a> <small>{}</small></td><td class=\"l\">{who}</td><td class=\"l\">{}</td>",
        r.cookie,
        esc(r.verdict),
        r.cookie,
        esc(&r.tuple),
        r.state,
        esc(r.dest.as_deref().unwrap_or(crate::sink::row::UNKNOWN)),
    );
    if h.netns {
        let _ = write!(b, "<td>{}</td>", esc(r.netns.as_deref().unwrap_or("")));
    }
    let _ = writeln!(
        b,
        "<td class=\"rate\">{}</td><td class=\"l verdict\">{}<br><small>{}</small></td><td>{} / {}</td><td>{}</td><td>{}</td>{}</tr>",
        si_rate_bps(r.bytes_per_s),
        verdict_cell(r.verdict, r.cause),
        esc(&r.main),
        ms_opt(r.rtt_ms),
        ms_opt(r.min_rtt_ms),
        r.retrans,
        super::age_text(r.age_s),
        sparks(&r.points, r.end_unix_s)
    );
}

fn ms_opt(v: Option<f64>) -> String {
    v.map_or("–".into(), crate::analysis::diagnosis::ms_text)
}

/// The host page's services, each with its verdicts' shares.
fn services(b: &mut String, h: &Host) {
    let _ = writeln!(
        b,
        "<section><h2>Services</h2><table id=\"services\" class=\"num\"><thead><tr><th>service</th><th>port</th>\
         <th>flows</th><th>traffic (acked + received, averaged over ~{SERVICE_RATE_TAU_S:.0} s)</th><th>RTT median (ms)</th><th>RTT p98 (ms)</th>\
         <th>limited by, so far (share of flows)</th></tr></thead><tbody>",
    );
    for s in &h.services {
        let port = if s.port == 0 { "–".to_string() } else { s.port.to_string() };
        let _ = writeln!(
            b,
            "<tr><td class=\"l\"><a href=\"/?service={}\">{}</a></td><td>{port}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&crate::units::url_escape(&s.name)),
            esc(&s.name),
            s.flows,
            si_rate_bps(s.bytes_per_s),
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

/// Whether an ended flow was limited by something other than its application (a window,
/// a buffer or the network): worth a row of its own.
fn limited(e: &Ended) -> bool {
    e.verdict().is_some_and(|(v, _)| matches!(v, "receiver-window" | "send-buffer" | "network"))
}

/// A group of trivial ended flows: the same program (or service) in the same role, to
/// or on the same port.
struct Group<'a> {
    what: String,
    flows: Vec<&'a Ended>,
}

/// The ended flows not [`limited`], grouped by program and what they did (served on a
/// port, or connected to a destination and port), largest group first.
fn groups(list: &[Arc<Ended>]) -> Vec<Group<'_>> {
    let mut out: Vec<Group<'_>> = Vec::new();
    let mut at: std::collections::HashMap<String, usize> = Default::default();
    for e in list.iter().filter(|e| !limited(e)) {
        let r = &e.record;
        // A connecting end seen only at its end cannot be named: grouped as that, not with
        // the programs that were looked for and not found.
        let who = r
            .comm
            .as_deref()
            .map(str::to_string)
            .or_else(|| r.not_named.map(|n| format!("the {n}, not named")))
            .or_else(|| r.service.clone())
            .unwrap_or_else(|| "an unknown program".into());
        let what = match crate::record::served_port(r.id.src_port, r.id.dst_port) {
            Some(port) => format!("served by <b>{}</b> on :{port}", esc(&who)),
            None => {
                let to = crate::record::endpoint_text(&r.id.dst_ip, r.id.dst_port);
                let name =
                    r.dest_service.as_deref().map(|d| format!(" ({})", esc(d))).unwrap_or_default();
                format!("from <b>{}</b> to {}{name}", esc(&who), esc(&to))
            }
        };
        let i = *at.entry(what.clone()).or_insert_with(|| {
            out.push(Group { what, flows: Vec::new() });
            out.len() - 1
        });
        out[i].flows.push(e);
    }
    out.sort_by_key(|g| std::cmp::Reverse(g.flows.len()));
    out
}

/// The host page's recently ended flows: the limited ones each on a row, newest first;
/// then the others grouped.
fn recently_ended(b: &mut String, h: &Host) {
    b.push_str("<section id=\"ended\"><h2>Recently ended</h2>");
    let list = match &h.ended {
        None => return b.push_str("<p>Not kept (<code>--recent-flows 0</code>).</p></section>"),
        Some(list) if list.is_empty() => {
            return b.push_str("<p>No flow has ended yet.</p></section>");
        }
        Some(list) => list,
    };
    let hard: Vec<&Arc<Ended>> = list.iter().filter(|e| limited(e)).collect();
    let _ = write!(
        b,
        "<p>The last {} records: {} limited by a window, a buffer or the network, listed first; \
         the rest grouped by program and destination.</p>",
        list.len(),
        hard.len()
    );
    if !hard.is_empty() {
        b.push_str(
            "<table id=\"ended-flows\" class=\"num\"><thead><tr><th>ended</th><th>flow</th><th>duration</th>\
             <th>send throughput</th><th class=\"l\">limited by</th><th class=\"l\">finding</th></tr></thead><tbody>\n",
        );
        for e in hard {
            let (v, f) = e.verdict().unwrap_or(("–", ""));
            let cause = e.record.diagnosis.as_ref().and_then(|d| d.cause);
            let _ = writeln!(
                b,
                "<tr data-verdict=\"{}\"><td>{}</td><td><a href=\"/flow/{}\">{}</a></td><td>{}</td><td>{}</td><td class=\"l\">{}</td><td class=\"l finding\">{}</td></tr>",
                esc(v),
                esc(e.end_time().get(11..19).unwrap_or(e.end_time())),
                e.cookie,
                esc(&e.tuple()),
                super::age_text(e.duration_ns as f64 / 1e9),
                super::rate_text(Some(e.throughput_mbps)),
                verdict_cell(v, cause),
                esc(f)
            );
        }
        b.push_str("</tbody></table>");
    }
    let groups = groups(list);
    if !groups.is_empty() {
        b.push_str(
            "<table id=\"ended-groups\" class=\"num\"><thead><tr><th class=\"l\">connections</th>\
             <th>bytes, median</th><th>duration, median</th><th>last ended</th><th class=\"l\">newest</th></tr></thead><tbody>\n",
        );
        for g in groups {
            let median = |mut v: Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let bytes = median(
                g.flows
                    .iter()
                    .map(|e| (e.record.bytes_acked + e.record.bytes_received) as f64)
                    .collect(),
            );
            let dur = median(g.flows.iter().map(|e| e.duration_ns as f64 / 1e9).collect());
            let newest = g.flows[0];
            let n = g.flows.len();
            let _ = writeln!(
                b,
                "<tr class=\"group\"><td class=\"l\">{n} {} {}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\"><a href=\"/flow/{}\">{}</a></td></tr>",
                if n == 1 { "connection" } else { "connections" },
                g.what,
                si_bytes(bytes as u64),
                super::age_text(dur),
                esc(newest.end_time().get(11..19).unwrap_or(newest.end_time())),
                newest.cookie,
                esc(&newest.tuple())
            );
        }
        b.push_str("</tbody></table>");
    }
    b.push_str("</section>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::testing::record;

    #[test]
    fn a_connecting_end_no_one_could_name_is_grouped_as_that_not_as_an_unknown_program() {
        let make = |i: u64, comm: Option<&str>, not_named: Option<&'static str>| {
            let mut r = record(i);
            r.diagnosis = None; // not limited: grouped
            r.id.src_port = 40_000 + i as u16; // the connecting side, to port 80
            r.comm = comm.map(Into::into);
            r.not_named = not_named;
            r.service = None;
            Arc::new(Ended::new(r, Vec::new()))
        };
        let list = vec![
            make(1, None, Some(crate::record::NOT_NAMED_CONNECTING)),
            make(2, None, Some(crate::record::NOT_NAMED_CONNECTING)),
            make(3, Some("curl"), None),
            make(4, None, None),
        ];
        let whats: Vec<String> = groups(&list).into_iter().map(|g| g.what).collect();
        assert!(
            whats.iter().any(|w| w.contains("<b>the connecting side, not named</b>")),
            "{whats:?}"
        );
        assert!(whats.iter().any(|w| w.contains("<b>curl</b>")), "{whats:?}");
        assert!(whats.iter().any(|w| w.contains("<b>an unknown program</b>")), "{whats:?}");
        assert_eq!(whats.len(), 3, "the two unnamed connecting ends in one group: {whats:?}");
    }
}
