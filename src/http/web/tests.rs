use super::*;

fn pt(t: f64, rtt: f64) -> Point {
    Point {
        unix_s: 1_795_478_400.0 + t,
        rtt_ms: Some(rtt),
        cwnd_bytes: Some(14_480.0),
        delivery_mbps: Some(50.0),
        ..Point::default()
    }
}

fn host(rows: usize, total: usize, offset: usize) -> Host {
    Host {
        rows: (0..rows)
            .map(|i| Row {
                cookie: 100 + i as u64,
                tuple: format!("10.0.0.1:{} → 10.0.0.2:443", 40000 + i),
                service: "nginx.service".into(),
                comm: Some("nginx".into()),
                dest: Some("private".into()),
                state: "ESTAB",
                bytes_per_s: 1.5625e6,
                verdict: "receiver-window",
                cause: Some("small-buffer"),
                main: "window 39.0 KB → 6.2 Mbit/s cap".into(),
                end_unix_s: 1_795_478_404.0,
                rtt_ms: Some(20.0),
                min_rtt_ms: Some(10.0),
                points: (0..5).map(|k| pt(f64::from(k), 10.0 + f64::from(k))).collect(),
                ..Row::default()
            })
            .collect(),
        total,
        all: total,
        offset,
        limit: 100,
        services: vec![ServiceRow {
            name: "<nginx>".into(),
            port: 443,
            flows: 3,
            bytes_per_s: 1.25e6,
            rtt_p50_ms: Some(20.0),
            rtt_p98_ms: Some(40.0),
            verdicts: [1, 0, 2, 0, 0],
        }],
        ended: Some(Vec::new()),
        health: "<section id=\"health\"></section>".into(),
        ..Host::default()
    }
}

#[test]
fn host_page_has_a_row_with_sparklines_per_flow_and_pages() {
    let p = host_page(&host(3, 250, 100));
    assert_eq!(p.matches("<tr class=\"flow\"").count(), 3);
    assert_eq!(p.matches("<svg class=\"spark\"").count(), 9);
    assert!(p.contains("101–103 of 250"), "the rows' place among all");
    assert!(p.contains("rel=\"prev\" href=\"/?order=rate&amp;limit=100\""));
    assert!(p.contains("rel=\"next\" href=\"/?order=rate&amp;offset=200&amp;limit=100\""));
    assert!(p.contains("href=\"/flow/101\""));
    // Text is escaped, rates carry units, verdict shares are read out.
    assert!(p.contains("&lt;nginx&gt;") && !p.contains("<nginx>"));
    assert!(p.contains("10.0 Mbit/s"), "1.25 MB/s is 10 Mbit/s");
    assert!(p.contains("aria-label=\"receiver-window 33 %, network 67 %\""), "{p}");
    assert!(p.contains("No flow has ended yet."));
    // Throughput in SI units, the verdict so far with its number and colour.
    assert!(p.contains("<td class=\"rate\">12.5 Mbit/s</td>"), "{p}");
    assert!(p.contains(
        "class=\"key v-receiver-window\"></span>receiver-window <small>(small-buffer)</small>"
    ));
    assert!(p.contains("window 39.0 KB → 6.2 Mbit/s cap"));
    assert!(p.contains("<b>nginx</b>"), "the program");
    // A page limited to one namespace says so and keeps it in every link.
    let filters = Filters { netns: Some("pod:a b".into()), ..Filters::default() };
    let ns = host_page(&Host { filters, ..host(3, 250, 100) });
    assert!(ns.contains("Active flows in pod:a b"));
    assert!(ns.contains("href=\"/?order=rtt&amp;limit=100&amp;netns=pod%3Aa%20b\""), "{ns}");
    assert!(ns.contains("offset=200&amp;limit=100&amp;netns=pod%3Aa%20b\""));
    let empty = host_page(&host(0, 0, 0));
    assert!(empty.contains("No active flows here.") && !empty.contains("rel=\"next\""));
    // Filters are kept in the links, idle flows are counted with a link to show them.
    let f = Filters {
        service: Some("web".into()),
        verdict: Some("network".into()),
        ..Filters::default()
    };
    let p = host_page(&Host { filters: f, idle: 7, total: 257, ..host(3, 250, 100) });
    assert!(p.contains("&amp;service=web&amp;verdict=network"), "{p}");
    assert!(p.contains("7 idle flows (nothing moved or waiting for 30 s or more) not listed"));
    assert!(p.contains("&amp;service=web&amp;verdict=network&amp;idle=1\">show them too"));
    assert!(p.contains("<option selected>network</option>"));
}

#[test]
fn flow_page_draws_every_chart_and_the_live_json_swaps_them() {
    let v = FlowView {
        cookie: 7,
        tuple: "a → b".into(),
        active: true,
        points: (0..12).map(|k| pt(f64::from(k) * 0.1, 5.0)).collect(),
        samples: 40,
        end_unix_s: None,
        min_rtt_ms: Some(4.0),
        facts: vec![("state".into(), "ESTAB".into())],
        verdict: Some(("network".into(), "network limited".into())),
        json: "{\"Cookie\": 7}".into(),
    };
    let p = flow_page(&v);
    for id in crate::chart::flow::CHART_IDS {
        assert!(p.contains(&format!("id=\"chart-{id}\"")), "{id}");
    }
    assert!(p.contains("Charts of 12 of its 40 samples, spread over its life"));
    assert!(p.contains("data-live=\"/flow/7/live\""));
    assert!(p.contains("Limited by network so far"));
    assert!(p.contains("{&quot;Cookie&quot;: 7}"), "the record, escaped");
    let j = flow_live(&v);
    assert_eq!(j["active"], true);
    assert_eq!(j["charts"].as_object().unwrap().len(), 5);
    assert!(j["charts"]["chart-rtt"].as_str().unwrap().starts_with("<svg"));
    // An ended flow is not refreshed.
    let ended = flow_page(&FlowView { active: false, ..v });
    assert!(ended.contains("data-live=\"\"") && ended.contains("Its record (JSON)"));
}

#[test]
fn a_records_no_rate_reads_as_none_not_as_a_negative_rate() {
    assert_eq!(rate_text(Some(crate::record::UNKNOWN_RATE)), "–");
    assert_eq!(rate_text(None), "–");
    assert_eq!(rate_text(Some(0.0)), "0 bit/s");
    assert_eq!(rate_text(Some(16_100.0)), "16.1 Gbit/s");
}
