//! The monitor's own state, as cgmon's status page showed it: a section of `/` and the
//! page `/health`.

use std::time::Duration;

use crate::chart::esc;
use crate::locks::Locked;
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
    pace_line(&mut p, m);
    naming_line(&mut p, m);
    p.push_str("<h3>Pipeline stage times (µs)</h3>\n<table class=\"num\"><tr><th>stage</th><th>calls</th><th>min</th><th>mean</th><th>max</th><th>stddev</th></tr>\n");
    for (st, t) in crate::metrics::Stage::ALL.iter().zip(m.stage_times()) {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let _ = writeln!(
            p,
            "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td></tr>",
            esc(st.name()),
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

/// With a CPU budget: how late new flows are found (the planned full-dump interval), and,
/// when the plan costs more than the budget, a warning with what it costs and the pace
/// achieved (docs/scale.md).
fn pace_line(p: &mut String, m: &Metrics) {
    use std::fmt::Write as _;
    let (budget, planned) = (m.cpu_budget_ppm.get(), m.full_dump_interval_planned_ns.get());
    if budget == 0 || planned == 0 {
        return;
    }
    let secs = |ns: u64| ns as f64 / 1e9;
    let _ = writeln!(
        p,
        "<p id=\"pace\">Full dumps are planned every {:.1} s (CPU budget {:.2} % of a core): a \
         new flow is found at most that late, or by its destroy event if it ends first.</p>",
        secs(planned),
        budget as f64 / 1e4
    );
    if m.over_budget.get() == 1 {
        let _ = writeln!(
            p,
            "<p class=\"warn\" id=\"over-budget\"><b>Over the CPU budget:</b> sampling is \
             planned at {:.2} % of a core against {:.2} %; the last full dumps were {:.1} s \
             apart. The busy flows' polls need more than three quarters of the budget, or \
             --max-full-interval forces more dumps.</p>",
            m.sampling_cpu_planned_ppm.get() as f64 / 1e4,
            budget as f64 / 1e4,
            secs(m.full_dump_interval_ns.get())
        );
    }
}

/// How far naming programs has got: new flows named, not found, skipped and waiting for
/// the CPU budget; when some were skipped, a warning with the share named.
fn naming_line(p: &mut String, m: &Metrics) {
    use std::fmt::Write as _;
    let (named, absent, skipped, waiting) = (
        m.naming_named.get(),
        m.naming_not_found.get(),
        m.naming_skipped.get(),
        m.budget.waiting(),
    );
    let asked = named + absent + skipped;
    if asked + waiting == 0 {
        return;
    }
    let wait = if waiting > 0 {
        format!(", <b>{waiting}</b> waiting for the CPU budget")
    } else {
        String::new()
    };
    let _ = writeln!(
        p,
        "<p id=\"naming\">Programs: {named} new flows named, {absent} not found, {skipped} \
         skipped{wait}.</p>"
    );
    if skipped > 0 {
        let _ = writeln!(
            p,
            "<p class=\"warn\" id=\"naming-skipped\"><b>Programs named for {:.0} % of new \
             flows, the rest marked skipped:</b> the CPU budget ({:.2} % of a core) does not \
             cover a walk for each. --cpu-budget raises it; --no-process names none.</p>",
            named as f64 / asked as f64 * 100.0,
            m.budget.share() * 100.0
        );
    }
}

/// The counters' rows, from the catalogue: a heading row for each section that applies,
/// then its series (value, and what it is); the sampling CPU's share of a core and the
/// sink's last error follow their sections, the memory ends the table.
fn counter_rows(p: &mut String, m: &Metrics, up: f64) {
    use std::fmt::Write as _;
    for section in Section::ALL.into_iter().filter(|x| x.shown(m)) {
        let _ = writeln!(p, "<tr><th colspan=\"2\">{}</th></tr>", esc(section.name()));
        let mut rows: Vec<(String, String)> =
            section.series().map(|x| (x.says.to_string(), x.shown(m))).collect();
        match section {
            Section::Sampling => {
                let share = |ns: u64| format!("{:.2} %", ns as f64 / 1e9 / up * 100.0);
                let (s, n) = (m.sampling_cpu_ns.get(), m.naming_cpu_ns.get());
                let u = m.budget.upkeep();
                let charged = u.total_ns - u.uncharged_ns;
                rows.push(("sampling CPU: mean share of a core".into(), share(s)));
                rows.push(("naming CPU: mean share of a core".into(), share(n)));
                rows.push(("upkeep CPU (ticks, runtime, start-up)".into(), share(u.total_ns)));
                rows.push((
                    "CPU budget used (sampling, naming, upkeep up to a tenth): mean share".into(),
                    share(s + n + charged),
                ));
                rows.push((
                    "pushed work CPU, outside the budget (events, records, HTTP)".into(),
                    share(u.pushed_ns),
                ));
            }
            Section::Sink => rows.push((
                "state".into(),
                m.sink.failing_with().map_or("delivering".into(), |e| format!("failing: {e}")),
            )),
            _ => {}
        }
        for (k, v) in rows {
            let _ = writeln!(p, "<tr><td>{}</td><td>{}</td></tr>", esc(&k), esc(&v));
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
    let flows = m.netns_flows.locked().clone();
    p.push_str(
        "<h3>Network namespaces</h3>\n<table><tr><th>namespace</th><th>active flows</th></tr>\n",
    );
    for (i, name) in names.iter().enumerate().filter(|(_, n)| !n.is_empty()) {
        let _ = writeln!(
            p,
            "<tr><td><a href=\"/flows?netns={}\">{}</a></td><td>{}</td></tr>",
            esc(&crate::units::url_escape(name)),
            esc(name),
            flows.get(i).copied().unwrap_or(0)
        );
    }
    p.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_says_how_late_new_flows_are_found_and_when_the_plan_is_over_budget() {
        let m = Metrics::default();
        assert!(!status_section(&m, None).contains("id=\"pace\""), "no budget, no pace line");
        m.cpu_budget_ppm.set(20_000);
        m.full_dump_interval_planned_ns.set(14_300_000_000);
        m.sampling_cpu_planned_ppm.set(20_000);
        let p = status_section(&m, None);
        assert!(p.contains("planned every 14.3 s (CPU budget 2.00 % of a core)"), "{p}");
        assert!(!p.contains("over-budget"), "{p}");
        m.over_budget.set(1);
        m.sampling_cpu_planned_ppm.set(28_600);
        m.full_dump_interval_ns.set(10_000_000_000);
        let p = status_section(&m, None);
        assert!(p.contains("planned at 2.86 % of a core against 2.00 %"), "{p}");
        assert!(p.contains("the last full dumps were 10.0 s apart"), "{p}");
    }

    #[test]
    fn the_page_shows_the_upkeep_and_the_pushed_work_beside_the_budget() {
        let m = Metrics::default();
        m.budget.set_share(0.02);
        // 50 ms of process CPU: 10 sampling, 30 pushed, 10 upkeep; over 10 s of uptime.
        m.sampling_cpu_ns.add(10_000_000);
        m.budget.pushed(30_000_000);
        m.budget.charge_upkeep_at(50_000_000, 10_000_000, std::time::Instant::now());
        let mut p = String::new();
        counter_rows(&mut p, &m, 10.0);
        let row = |k: &str, v: &str| format!("<tr><td>{k}</td><td>{v}</td></tr>");
        for (k, v) in [
            ("upkeep CPU (ticks, runtime, start-up)", "0.10 %"),
            ("CPU budget used (sampling, naming, upkeep up to a tenth): mean share", "0.20 %"),
            ("pushed work CPU, outside the budget (events, records, HTTP)", "0.30 %"),
        ] {
            assert!(p.contains(&row(k, v)), "{k} = {v}:\n{p}");
        }
    }

    #[test]
    fn the_page_says_how_far_naming_has_got_and_what_it_skipped() {
        let m = Metrics::default();
        assert!(!status_section(&m, None).contains("id=\"naming\""), "nothing asked yet");
        m.budget.set_share(0.02);
        m.budget.set_waiting(5_000);
        m.naming_named.add(15_000);
        let p = status_section(&m, None);
        assert!(
            p.contains("15000 new flows named, 0 not found, 0 skipped, <b>5000</b> waiting"),
            "{p}"
        );
        assert!(!p.contains("naming-skipped"), "{p}");
        m.budget.set_waiting(0);
        m.naming_named.add(16_000);
        m.naming_not_found.add(1_000);
        m.naming_skipped.add(18_000);
        let p = status_section(&m, None);
        assert!(p.contains("Programs named for 62 % of new flows, the rest marked skipped"), "{p}");
        assert!(p.contains("CPU budget (2.00 % of a core)"), "{p}");
        assert!(!p.contains("waiting for the CPU budget"), "{p}");
    }
}
