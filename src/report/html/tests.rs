use super::*;

fn rec(service: Option<&str>, cgroup: u64, sport: u16, dport: u16) -> Value {
    let mut r = serde_json::json!({
        "ID": {"SrcIP": "10.0.0.1", "SrcPort": sport, "DstIP": "10.0.0.2", "DstPort": dport},
        "Cookie": u64::from(sport) * 100_000 + u64::from(dport),
        "CgroupID": cgroup,
        "SendThroughputMbps": 10.0,
        "BytesAcked": 5_000_000,
        "Diagnosis": {"Verdict": "network"},
    });
    if let Some(s) = service {
        r["Service"] = s.into();
    }
    r
}

fn html_of(records: &[Value], slowest: usize) -> String {
    let recs: Vec<Rec> = records.iter().map(Rec::of).collect();
    let src = Sources { records: "test".into(), slowest, min_bytes: 1 << 20, ..Sources::default() };
    report_html(&recs, &BTreeMap::new(), &src)
}

#[test]
fn verdicts_are_grouped_by_service_and_port_with_ephemeral_ports_together() {
    let records = [
        rec(Some("nginx.service"), 7, 443, 50_001),
        rec(Some("nginx.service"), 7, 443, 50_002),
        // A record from before records named services: its cgroup id stands in.
        rec(None, 77, 80, 50_003),
        // Clients: to a server port, and between two ephemeral ports (loopback tests).
        rec(Some("curl"), 9, 50_004, 8080),
        rec(Some("curl"), 9, 50_005, 8080),
        rec(Some("iperf"), 9, 40_000, 50_006),
        rec(Some("iperf"), 9, 40_001, 50_007),
    ];
    let html = html_of(&records, 10);
    let row = |name: &str| {
        let t = html.split(&format!("<td>{name}</td>")).nth(1).unwrap_or_else(|| panic!("{name}"));
        t[..t.find("</tr>").unwrap()].to_string()
    };
    // Verdict counts: receiver window, send buffer, network, application, unknown.
    let counts = |n: usize| format!("<td>0</td><td>0</td><td>{n}</td><td>0</td><td>0</td>");
    assert_eq!(row("nginx.service, serving :443"), counts(2));
    assert_eq!(row("cgroup 77, serving :80"), counts(1));
    assert_eq!(row("curl, to :8080"), counts(2));
    assert_eq!(row("iperf, between ephemeral ports"), counts(2));
    assert!(!html.contains("cgroup 7,"), "the name replaces the id");
    assert_eq!(html.matches("<tr><td>").count() - html.matches("<tr><td><a").count(), 4);
}

#[test]
fn the_slowest_are_limited_flows_above_the_minimum_size() {
    let mut records = Vec::new();
    let mut add = |cookie: u64, verdict: &str, mbps: f64, bytes: u64| {
        records.push(serde_json::json!({
            "ID": {"SrcIP": "10.0.0.1", "SrcPort": 443, "DstIP": "10.0.0.2", "DstPort": 50_000 + cookie},
            "Cookie": cookie, "SendThroughputMbps": mbps, "BytesAcked": bytes,
            "Diagnosis": {"Verdict": verdict, "Finding": format!("finding {cookie}")},
        }));
    };
    add(1, "application", 0.01, 10_000_000); // idle keep-alive: not slow for the network
    add(2, "unknown", 0.02, 2_000); // tiny
    add(3, "network", 5.0, 100_000); // limited, but below the minimum size
    add(4, "receiver-window", 20.0, 50_000_000);
    add(5, "network", 900.0, 900_000_000);
    add(6, "send-buffer", 40.0, 5_000_000);
    add(7, "network", 1.0, 2_000_000);
    // Over in slow start's round trips: held by round trips, not a rate; never listed.
    records[6]["Diagnosis"]["Cause"] = "slow-start".into();
    let recs: Vec<Rec> = records.iter().map(Rec::of).collect();
    let got: Vec<u64> = slowest(&recs, 2, 1 << 20).iter().map(|r| r.cookie).collect();
    assert_eq!(got, vec![4, 6], "lowest throughput first, at most N");
    let html = html_of(&records, 2);
    assert!(html.contains("The 2 slowest of the 3 flows"), "honest counts");
    // Only the listed flows get a section.
    assert_eq!(html.matches("<section class=\"flow\"").count(), 2);
    assert!(html.contains("id=\"flow-4-0\"") && !html.contains("id=\"flow-1-0\""));
    // Human units.
    assert!(html.contains("20.0 Mbit/s") && html.contains("50.0 MB"), "{html}");
}

#[test]
fn the_answer_comes_first_and_a_report_without_samples_says_why_it_has_no_charts() {
    let records: Vec<Value> = (0..200u16)
        .map(|i| {
            let mut r = rec(Some(&format!("svc{i}")), 7, 443, 50_000 + i);
            r["BytesAcked"] = 2_000_000.into();
            r
        })
        .collect();
    let html = html_of(&records, 5);
    let at = |needle: &str| html.find(needle).unwrap_or_else(|| panic!("no {needle}"));
    // The reason comes right after the title line, before any table or chart.
    let why = at("id=\"no-samples\"");
    assert!(why < at("<h2>"), "{}", &html[..why]);
    assert!(html[why..].contains("--samples-out FILE"));
    // The slowest flows come before the distributions and the long per-service table.
    assert!(at("id=\"slowest\"") < at("id=\"cdf-throughput\""));
    assert!(at("id=\"cdf-throughput\"") < at("id=\"verdicts\""));
    // No flow limited by the network's side: a sentence, not an empty table.
    let few = html_of(&[rec(Some("svc"), 7, 443, 50_000)], 5);
    let app: Vec<Value> = vec![{
        let mut r = rec(Some("svc"), 7, 443, 50_000);
        r["Diagnosis"]["Verdict"] = "application".into();
        r
    }];
    let none = html_of(&app, 5);
    assert!(none.contains("No flow that sent at least 1.0 MB was limited"), "{none}");
    assert!(!none.contains("<table id=\"slowest\""));
    assert!(few.contains("<table id=\"slowest\""));
    // Given a samples file, the report does not claim it lacks one.
    let recs: Vec<Rec> = records.iter().map(Rec::of).collect();
    let src = Sources {
        records: "test".into(),
        samples: Some("s.ndjson".into()),
        slowest: 5,
        min_bytes: 1 << 20,
    };
    assert!(!report_html(&recs, &BTreeMap::new(), &src).contains("no-samples"));
}

#[test]
fn distributions_use_log_axes_that_cover_the_decades() {
    let c = cdf("c", "t", "send throughput", Unit::Mbps, vec![0.0, 20.0, 20.5, 15_000.0]);
    assert_eq!((c.x.min, c.x.max), (1.0, 5.0), "10 Mbit/s to 100 Gbit/s, in decades");
    let labels: Vec<&str> = c.x.ticks.iter().map(|t| t.1.as_str()).collect();
    assert_eq!(labels, ["10 Mbit/s", "100 Mbit/s", "1 Gbit/s", "10 Gbit/s", "100 Gbit/s"]);
    // Eleven decades (1 bit/s to 100 Gbit/s): every second one is labelled.
    let wide = cdf("w", "t", "send throughput", Unit::Mbps, vec![1e-6, 5e4]);
    assert!(wide.x.ticks.len() <= 7, "{:?}", wide.x.ticks);
    assert_eq!(wide.x.ticks[0].1, "1 bit/s");
    assert!(c.desc.contains("1 flows at 0 are left out"), "{}", c.desc);
    // The 20 Mbit/s flows are half the distribution and sit a decade from the 15 Gbit/s one.
    let pts = &c.series[0].runs[0];
    assert!((pts[0].0 - 20f64.log10()).abs() < 1e-12);
}

#[test]
fn a_hundred_thousand_records_make_a_small_report() {
    let records: Vec<Value> = (0..100_000u64)
        .map(|i| {
            serde_json::json!({
                "ID": {"SrcIP": "10.0.0.1", "SrcPort": 443, "DstIP": "10.0.0.2", "DstPort": 32_768 + i % 20_000},
                "Cookie": i, "Service": format!("svc{}", i % 50),
                "SendThroughputMbps": 1.0 + (i % 997) as f64, "BytesAcked": 2_000_000 + i,
                "RTTSummary": [0, 0, 0, 0.1 + (i % 101) as f64, 0, 0, 0],
                "Diagnosis": {"Verdict": VERDICTS[(i % 5) as usize], "Finding": "a finding of some eighty characters, as real ones are, or longer"},
            })
        })
        .collect();
    let recs: Vec<Rec> = records.iter().map(Rec::of).collect();
    let pts: Vec<Point> = (0..3600)
        .map(|k| Point { unix_s: 1e9 + f64::from(k), rtt_ms: Some(10.0), ..Point::default() })
        .collect();
    let samples: BTreeMap<u64, Vec<Point>> =
        slowest(&recs, 20, 1 << 20).iter().map(|r| (r.cookie, pts.clone())).collect();
    let src = Sources {
        slowest: 20,
        min_bytes: 1 << 20,
        samples: Some("s".into()),
        ..Sources::default()
    };
    let html = report_html(&recs, &samples, &src);
    assert!(html.len() < 10 << 20, "{} bytes", html.len());
    assert_eq!(html.matches("<section class=\"flow\"").count(), 20);
    assert_eq!(html.matches("<svg class=\"chart\"").count(), 2 + 20 * 5);
}
