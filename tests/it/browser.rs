//! The web view and the report in a real browser: headless Chromium (Debian's `chromium`,
//! which `.ci/run` installs) loads `/`, a flow page and a generated report from a running
//! monitor watching loopback flows. Screenshots go to `target/browser/`.
//!
//! Under `CI=true` a missing browser fails the test; elsewhere it skips with a reason.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use cgmon_rs::testkit::Pair;
use serde_json::Value;

use crate::program::{body, http_addr, http_get, listener, monitor, port_filter};

const BIN: &str = env!("CARGO_BIN_EXE_cgmon-rs");
const CHROMIUM: &str = "/usr/bin/chromium";

/// The browser, or why not.
fn chromium() -> Option<&'static str> {
    if Path::new(CHROMIUM).exists() {
        return Some(CHROMIUM);
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    assert!(!ci, "CI=true: {CHROMIUM} is missing (.ci/run installs Debian's chromium)");
    eprintln!("skipped: {CHROMIUM} is missing (apt-get install chromium)");
    None
}

/// Where screenshots go.
fn shots() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/browser");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// One headless run of `url` with `args`: its stdout and the console lines it logged.
fn run(browser: &str, url: &str, args: &[&str]) -> (String, Vec<String>) {
    let profile = tempfile::tempdir().unwrap();
    // As root Chromium needs --no-sandbox; the others keep it off this machine's closed
    // network (no background fetches, updates or sync).
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // Every console message (and uncaught error) is logged as `INFO:CONSOLE`; the pages
    // log nothing, so any such line is a fault.
    let console = err.lines().filter(|l| l.contains(":CONSOLE")).map(String::from).collect();
    assert!(out.status.success(), "chromium failed on {url}: {err}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), console)
}

/// The DOM after the page's scripts ran for `ms` of virtual time.
fn dom(browser: &str, url: &str, ms: u32) -> String {
    let budget = format!("--virtual-time-budget={ms}");
    let (dom, console) = run(browser, url, &[&budget, "--dump-dom"]);
    assert!(console.is_empty(), "console errors on {url}: {console:#?}");
    dom
}

fn screenshot(browser: &str, url: &str, name: &str, size: &str) -> PathBuf {
    let path = shots().join(name);
    let _ = std::fs::remove_file(&path);
    let (_, console) = run(
        browser,
        url,
        &[&format!("--screenshot={}", path.display()), &format!("--window-size={size}")],
    );
    assert!(console.is_empty(), "console errors on {url}: {console:#?}");
    let png = std::fs::read(&path).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} is no screenshot",
        path.display()
    );
    eprintln!("screenshot: {}", path.display());
    path
}

/// The points of the polylines of `series` inside the element with id `id`.
fn chart_points(dom: &str, id: &str, series: &str) -> usize {
    let start = dom.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no #{id}"));
    let end = start + dom[start..].find("</svg>").unwrap();
    let tag = format!("data-series=\"{series}\"");
    dom[start..end]
        .split("<polyline")
        .skip(1)
        .filter(|p| p.contains(&tag))
        .map(|p| {
            let pts = p.split("points=\"").nth(1).unwrap().split('"').next().unwrap();
            pts.split_whitespace().count()
        })
        .sum()
}

#[test]
fn host_view_flow_page_and_report_in_chromium() {
    let Some(browser) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let samples = dir.path().join("samples.ndjson");
    let (l, a) = listener();
    let filter = port_filter(a);
    let m = monitor(&[
        "-run-interval",
        "50ms",
        "-run-http-server",
        "127.0.0.1:0",
        "--cpu-budget",
        "0",
        "--samples-out",
        samples.to_str().unwrap(),
        "--filter",
        &filter,
    ]);
    let addr = http_addr(&m);
    let mut pairs: Vec<Pair> = (0..3).map(|_| Pair::connect(&l, a).unwrap()).collect();
    for _ in 0..10 {
        for (i, p) in pairs.iter_mut().enumerate() {
            p.exchange(20_000 * (i + 1)).unwrap();
        }
        std::thread::sleep(Duration::from_millis(60));
    }
    // Idle now: their samples stop changing, so a flow's count holds still while we look.
    std::thread::sleep(Duration::from_millis(500));
    let flows: Vec<Value> = serde_json::from_str(body(&http_get(&addr, "/flows"))).unwrap();
    assert_eq!(flows.len(), 6, "both ends of three connections");
    let base = format!("http://{addr}");

    // `/`: one row per active flow, each with its three sparklines.
    let host = dom(browser, &format!("{base}/"), 3000);
    let rows: Vec<&str> = host.split("<tr class=\"flow\"").skip(1).collect();
    assert_eq!(rows.len(), 6, "{host}");
    for r in &rows {
        let r = &r[..r.find("</tr>").unwrap()];
        assert_eq!(r.matches("<svg class=\"spark\"").count(), 3, "{r}");
        assert!(r.contains("<polyline"), "a sparkline with a line: {r}");
    }
    for f in &flows {
        assert!(host.contains(&format!("data-cookie=\"{}\"", f["Cookie"])), "{}", f["Cookie"]);
    }
    // The script ran and refreshed the page without an error.
    assert!(host.contains("updated "), "the refresh script did not report: {host}");
    assert!(host.contains("id=\"services\"") && host.contains("monitor health"));
    screenshot(browser, &format!("{base}/"), "host.png", "1400,900");

    // A flow page: its RTT chart has a point per sample with an RTT.
    let client = flows.iter().find(|f| f["ID"]["DstPort"] == a.port()).unwrap();
    let cookie = client["Cookie"].as_u64().unwrap();
    let count = || {
        let one: Value =
            serde_json::from_str(body(&http_get(&addr, &format!("/flows/{cookie}")))).unwrap();
        one["RecentSamples"].as_array().unwrap().iter().filter(|s| s["RTTms"].is_number()).count()
    };
    let before = count();
    let page = dom(browser, &format!("{base}/flow/{cookie}"), 2500);
    assert_eq!(count(), before, "the idle flow gained samples while we looked");
    assert!(before >= 10, "{before} samples");
    assert_eq!(chart_points(&page, "chart-rtt", "rtt"), before, "RTT chart points vs samples");
    assert_eq!(chart_points(&page, "chart-cwnd", "cwnd"), before);
    for id in ["chart-rtt", "chart-cwnd", "chart-rate", "chart-retrans", "chart-shares"] {
        assert!(page.contains(&format!("id=\"{id}\"")), "no {id}");
    }
    assert!(page.contains("<desc id=\"chart-rtt-d\">"), "a text description");
    assert!(page.contains("Limited by"), "the diagnosis so far");
    screenshot(browser, &format!("{base}/flow/{cookie}"), "flow.png", "1000,1400");

    // The flows end: the report of the run holds every one of them.
    drop(pairs);
    let records = m.records(6, Duration::from_secs(10));
    // An ended flow's page comes from the ring of recent records.
    let ended = http_get(&addr, &format!("/flow/{cookie}"));
    assert!(ended.starts_with("HTTP/1.1 200") && ended.contains("· ended"), "{ended}");
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{log}");
    let recs = dir.path().join("records.ndjson");
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&recs, text).unwrap();
    let report = dir.path().join("report.html");
    let out = Command::new(BIN)
        .args(["report", recs.to_str().unwrap(), "--samples", samples.to_str().unwrap(), "-o"])
        .arg(&report)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(!html.contains("src=\"http") && !html.contains("href=\"http"), "self-contained");
    let url = format!("file://{}", report.display());
    let rdom = dom(browser, &url, 500);
    for r in &records {
        assert!(
            rdom.contains(&format!("id=\"flow-{}-{}\"", r["Cookie"], r["Seq"])),
            "{}",
            r["Cookie"]
        );
    }
    assert!(rdom.contains("id=\"cdf-throughput\"") && rdom.contains("id=\"cdf-rtt\""));
    screenshot(browser, &url, "report.png", "1200,1400");
}
