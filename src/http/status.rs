//! The monitor's own state, as cgmon's status page showed it: a section of `/` and the
//! page `/health`.

use std::time::Duration;

use crate::metrics::Metrics;
use crate::metrics::catalogue::Section;

/// The status page (`/health`): the monitor's own state as a page of its own.
pub fn status_page(m: &Metrics, netns: Option<&[String]>) -> String {
    super::web::layout("cgmon-rs: monitor health", &status_section(m, netns))
}

/// The monitor's own state (cgmon's status page), as a section of a page; with `netns`
/// (the sampled namespaces' names by index), a table of them, each with its active flows
/// and a link to them.
pub fn status_section(m: &Metrics, netns: Option<&[String]>) -> String {
    use std::fmt::Write as _;
    let up = m.uptime().as_secs_f64().max(1e-9);
    let mut p = format!(
        "<section id=\"health\"><h2>cgmon-rs version {}: monitor health</h2>\n",
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(
        p,
        "<p>Uptime {up:.1} s. Tracking <b>{}</b> flows ({}).</p>",
        m.flows_active.get(),
        m.churn_text(up)
    );
    p.push_str("<h3>Pipeline stage times (µs)</h3>\n<table class=\"num\"><tr><th>stage</th><th>calls</th><th>min</th><th>mean</th><th>max</th><th>stddev</th></tr>\n");
    for (st, t) in crate::metrics::Stage::ALL.iter().zip(m.stage_times()) {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let _ = writeln!(
            p,
            "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td></tr>",
            escape(st.name()),
            t.calls,
            us(t.min),
            us(t.mean()),
            us(t.max),
            us(t.stddev())
        );
    }
    p.push_str("</table>\n<h3>Counters</h3>\n<table class=\"num\">\n");
    counter_rows(&mut p, m, up);
    p.push_str("</table>\n");
    if let Some(names) = netns {
        netns_table(&mut p, m, names);
    }
    p.push_str("<p><a href=\"/\">Host view</a> · <a href=\"/metrics\">/metrics</a> · \
                <a href=\"/flows\">/flows</a> · <a href=\"/flow-duration-histogram\">flow-duration histogram</a> · \
                <a href=\"/healthz\">/healthz</a></p></section>\n");
    p
}

/// The counters' rows, from the catalogue: a heading row for each section that applies,
/// then its series (value, and what it is); the sampling CPU's share of a core and the
/// sink's last error follow their sections, the memory ends the table.
fn counter_rows(p: &mut String, m: &Metrics, up: f64) {
    use std::fmt::Write as _;
    for section in Section::ALL.into_iter().filter(|x| x.shown(m)) {
        let _ = writeln!(p, "<tr><th colspan=\"2\">{}</th></tr>", escape(section.name()));
        let mut rows: Vec<(String, String)> =
            section.series().map(|x| (x.says.to_string(), x.shown(m))).collect();
        match section {
            Section::Sampling => rows.push((
                "sampling CPU: mean share of a core".into(),
                format!("{:.2} %", m.sampling_cpu_ns.get() as f64 / 1e9 / up * 100.0),
            )),
            Section::Sink => rows.push((
                "state".into(),
                m.sink.failing_with().map_or("delivering".into(), |e| format!("failing: {e}")),
            )),
            _ => {}
        }
        for (k, v) in rows {
            let _ = writeln!(p, "<tr><td>{}</td><td>{}</td></tr>", escape(&k), escape(&v));
        }
    }
    let rss = crate::metrics::rss_bytes().map_or("unknown".into(), crate::units::si_bytes);
    let _ = writeln!(
        p,
        "<tr><th colspan=\"2\">process</th></tr>\n<tr><td>resident memory</td><td>{rss}</td></tr>"
    );
}

/// The sampled namespaces (names by index), each with its active flows and a link to them.
fn netns_table(p: &mut String, m: &Metrics, names: &[String]) {
    use std::fmt::Write as _;
    let flows = m.netns_flows.lock().unwrap_or_else(|e| e.into_inner()).clone();
    p.push_str(
        "<h3>Network namespaces</h3>\n<table><tr><th>namespace</th><th>active flows</th></tr>\n",
    );
    for (i, name) in names.iter().enumerate().filter(|(_, n)| !n.is_empty()) {
        let _ = writeln!(
            p,
            "<tr><td><a href=\"/flows?netns={}\">{}</a></td><td>{}</td></tr>",
            escape(&super::url_escape(name)),
            escape(name),
            flows.get(i).copied().unwrap_or(0)
        );
    }
    p.push_str("</table>\n");
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
