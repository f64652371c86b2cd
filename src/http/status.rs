//! The monitor's own state, as cgmon's status page showed it: a section of `/` and the
//! page `/health`.

use std::time::Duration;

use crate::metrics::Metrics;

/// The status page (`/health`): the monitor's own state as a page of its own.
pub fn status_page(m: &Metrics, netns: Option<&[String]>) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>cgmon-rs: monitor health</title>\
         <link rel=\"stylesheet\" href=\"/static/style.css\"></head><body>{}</body></html>\n",
        status_section(m, netns)
    )
}

/// The monitor's own state (cgmon's status page), as a section of a page; with `netns`
/// (the sampled namespaces' names by index), a table of them, each with its active flows
/// and a link to them.
pub fn status_section(m: &Metrics, netns: Option<&[String]>) -> String {
    use std::fmt::Write as _;
    let up = m.uptime().as_secs_f64().max(1e-9);
    let (churn_n, churn_ns) = *m.last_churn.lock().unwrap_or_else(|e| e.into_inner());
    let inst = if churn_ns > 0 { churn_n as f64 / (churn_ns as f64 / 1e9) } else { 0.0 };
    let mut p = format!(
        "<section id=\"health\"><h2>cgmon-rs version {}: monitor health</h2>\n",
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(
        p,
        "<p>Uptime {up:.1} s. Tracking <b>{}</b> flows; churn {inst:.2} flows/s now, {:.2} flows/s \
         mean ({} opened, {} ended, {} refused by -tracker-max-flows).</p>",
        m.flows_active.get(),
        m.flows_ended.get() as f64 / up,
        m.flows_opened.get(),
        m.flows_ended.get(),
        m.flows_refused.get()
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
    for (k, v) in counter_rows(m, up) {
        let _ = writeln!(p, "<tr><td>{}</td><td>{}</td></tr>", escape(k), escape(&v));
    }
    p.push_str("</table>\n");
    if let Some(names) = netns {
        netns_table(&mut p, m, names);
    }
    p.push_str("<p><a href=\"/\">Host view</a> · <a href=\"/metrics\">/metrics</a> · \
                <a href=\"/flows\">/flows</a> · <a href=\"/flow-duration-histogram\">flow-duration histogram</a> · \
                <a href=\"/healthz\">/healthz</a></p></section>\n");
    p
}

/// The counters' rows: what the status page shows beside the stage times.
fn counter_rows(m: &Metrics, up: f64) -> Vec<(&'static str, String)> {
    let rows: [(&'static str, String); 19] = [
        ("dumps", m.dumps.get().to_string()),
        ("failed dumps (netlink errors)", m.dump_errors.get().to_string()),
        ("incomplete dumps", m.dumps_incomplete.get().to_string()),
        ("ticks overrun", m.ticks_overrun.get().to_string()),
        ("sockets in the last dump", m.sockets_last_dump.get().to_string()),
        (
            "sampling: hot flows / exact requests / full dumps taken as cheaper",
            format!(
                "{} / {} / {}",
                m.hot_flows.get(),
                m.exact_requests.get(),
                m.full_dumps_cheaper.get()
            ),
        ),
        (
            "full-dump interval: achieved / the budget allows",
            format!(
                "{:.2} s / {:.2} s",
                m.full_dump_interval_ns.get() as f64 / 1e9,
                m.full_dump_interval_planned_ns.get() as f64 / 1e9
            ),
        ),
        (
            "sampling CPU: mean share of a core / budget",
            format!(
                "{:.2} % / {:.2} %",
                m.sampling_cpu_ns.get() as f64 / 1e9 / up * 100.0,
                m.cpu_budget_ppm.get() as f64 / 1e4
            ),
        ),
        (
            "flows discovered late (up to the full-dump interval)",
            m.flows_discovered_late.get().to_string(),
        ),
        (
            "network namespaces: sampled / found but not reachable / sharing the host's TCP table",
            format!(
                "{} / {} / {}",
                m.netns_sampled.get(),
                m.netns_unreachable.get(),
                m.netns_shared_tcp_hash.get()
            ),
        ),
        (
            "namespace walks left out (nothing moved in them)",
            m.netns_walks_skipped.get().to_string(),
        ),
        (
            "destroy events (overruns)",
            format!("{} ({})", m.destroy_events.get(), m.destroy_overruns.get()),
        ),
        (
            "flows awaiting their destroy event (completed / gone / late events)",
            format!(
                "{} ({} / {} / {})",
                m.flows_awaiting_destroy.get(),
                m.destroy_awaited.get(),
                m.destroy_wait_expired.get(),
                m.destroy_late.get()
            ),
        ),
        ("records written", m.records_written.get().to_string()),
        ("records dropped (channel full)", m.records_dropped.get().to_string()),
        ("records lost (output failed)", m.records_lost.get().to_string()),
        ("partial records not written", m.records_partial_skipped.get().to_string()),
        ("write errors / rotations", format!("{} / {}", m.write_errors.get(), m.rotations.get())),
        (
            "resident memory",
            crate::metrics::rss_bytes()
                .map_or("unknown".into(), |b| format!("{:.1} MiB", b as f64 / (1 << 20) as f64)),
        ),
    ];
    let mut rows = rows.to_vec();
    if m.sink.enabled.get() != 0 {
        rows.extend(sink_rows(&m.sink));
    }
    rows
}

/// The ClickHouse sink's rows, when it is on.
fn sink_rows(k: &crate::metrics::SinkMetrics) -> [(&'static str, String); 3] {
    let last = k.last_error.lock().unwrap_or_else(|e| e.into_inner()).clone();
    [
        (
            "ClickHouse sink: records sent / dropped",
            format!("{} / {}", k.sent.get(), k.dropped.get()),
        ),
        (
            "ClickHouse sink: waiting (records, bytes, spooled batches)",
            format!(
                "{}, {} B, {}",
                k.waiting_records.get(),
                k.waiting_bytes.get(),
                k.spooled_batches.get()
            ),
        ),
        (
            "ClickHouse sink: state",
            match last {
                Some(e) => format!("failing: {e}"),
                None => "delivering".into(),
            },
        ),
    ]
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
