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

use crate::program::{body, http_addr, http_get, http_monitor, listener, monitor, port_filter};

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

/// The chart with id `id` in `dom`.
fn chart<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no #{id}"));
    let end = start + dom[start..].find("</svg>").unwrap();
    &dom[start..end]
}

/// The samples the polylines of `series` draw in the chart with id `id` (their `data-n`:
/// the steps between samples add corners to `points`).
fn chart_points(dom: &str, id: &str, series: &str) -> usize {
    let tag = format!("data-series=\"{series}\" data-n=\"");
    chart(dom, id)
        .split(&tag)
        .skip(1)
        .map(|p| p.split('"').next().unwrap().parse::<usize>().unwrap())
        .sum()
}

/// The polylines of `series` in the chart with id `id`: one per unbroken run.
fn lines(dom: &str, id: &str, series: &str) -> usize {
    chart(dom, id)
        .matches(&format!("<polyline class=\"s-{series}\" data-series=\"{series}\""))
        .count()
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

    // `/`: one row per active flow, each with its verdict so far, its throughput and its
    // three sparklines.
    let host = dom(browser, &format!("{base}/"), 3000);
    let rows: Vec<&str> = host.split("<tr class=\"flow\"").skip(1).collect();
    assert_eq!(rows.len(), 6, "{host}");
    for r in &rows {
        let r = &r[..r.find("</tr>").unwrap()];
        assert_eq!(r.matches("<svg class=\"spark\"").count(), 3, "{r}");
        assert!(r.contains("<polyline"), "a sparkline with a line: {r}");
        assert!(r.contains("data-verdict=\"") && r.contains("class=\"key v-"), "{r}");
        assert!(r.contains("<td class=\"rate\">"), "{r}");
    }
    assert!(host.contains("<form class=\"filters\""), "the filters");
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

    // /health: the same navigation as every page.
    let health = dom(browser, &format!("{base}/health"), 500);
    assert!(health.contains("<nav>") && health.contains("Pipeline stage times"), "{health}");
    screenshot(browser, &format!("{base}/health"), "health.png", "1000,1200");

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
    // Every flow is counted in the distributions and the verdict table; the listed ones
    // (limited by something other than the application) have a section each.
    assert!(rdom.contains(&format!("{} records from", records.len())), "{rdom}");
    // (No flow limited by the network's side: a sentence instead of the table.)
    let n = match rdom.split("<table id=\"slowest\"").nth(1) {
        Some(t) => t.split("</table>").next().unwrap().matches("<tr>").count() - 1,
        None => {
            assert!(rdom.contains("<p id=\"slowest\">No flow that sent"), "{rdom}");
            0
        }
    };
    assert_eq!(rdom.matches("<section class=\"flow\"").count(), n);
    assert!(rdom.contains("id=\"cdf-throughput\"") && rdom.contains("id=\"cdf-rtt\""));
    screenshot(browser, &url, "report.png", "1200,1400");

    // `plot`: the same charts as one SVG, with the lowest sampled RTT marked.
    let svg = dir.path().join("flow.svg");
    let out = Command::new(BIN)
        .args(["plot", "--samples", samples.to_str().unwrap(), "--cookie", &cookie.to_string()])
        .arg("-o")
        .arg(&svg)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let purl = format!("file://{}", svg.display());
    let pdom = dom(browser, &purl, 200);
    for id in ["rtt", "cwnd", "rate", "retrans", "shares"] {
        assert!(pdom.contains(&format!("id=\"{id}\"")), "plot lacks {id}");
    }
    assert!(pdom.contains("data-mark=\"minrtt\""), "plot draws the min-RTT line");
    screenshot(browser, &purl, "plot.png", "760,1100");
}

/// A rate as the pages write it ("12.5 Mbit/s"), in bits per second.
fn rate_of(text: &str) -> f64 {
    let (v, unit) = text.trim().split_once(' ').unwrap_or_else(|| panic!("{text:?}"));
    let mul = match unit {
        "bit/s" => 1.0,
        "kbit/s" => 1e3,
        "Mbit/s" => 1e6,
        "Gbit/s" => 1e9,
        _ => panic!("unit of {text:?}"),
    };
    v.parse::<f64>().unwrap() * mul
}

/// Raises this process's open-file limit to `n` (or its hard limit).
fn allow_files(n: u64) -> u64 {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit on a valid struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur = n.min(r.rlim_max);
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
    }
    r.rlim_cur
}

#[test]
fn a_receiver_limited_download_is_drawn_continuous() {
    use std::io::{Read, Write};
    let Some(browser) = chromium() else { return };
    let (l, a) = listener();
    let (_m, addr) = http_monitor("50ms", a);
    // The server sends all it can; the client reads 16 KB every 50 ms through a small
    // buffer: the sender waits on the window most of the time, and its counters stand
    // still between many polls (deduped samples).
    let client = std::net::TcpStream::connect(a).unwrap();
    let (mut server, _) = l.accept().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let sender = std::thread::spawn(move || {
        let chunk = vec![7u8; 64 * 1024];
        server.set_write_timeout(Some(Duration::from_millis(200))).unwrap();
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            let _ = server.write(&chunk);
        }
    });
    let mut c = client;
    let mut buf = vec![0u8; 16 * 1024];
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_secs(4) {
        let _ = c.read(&mut buf).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let flows: Vec<Value> = serde_json::from_str(body(&http_get(&addr, "/flows"))).unwrap();
    let sending = flows.iter().find(|f| f["ID"]["SrcPort"] == a.port()).expect("the sender");
    let cookie = sending["Cookie"].as_u64().unwrap();
    let url = format!("http://{addr}/flow/{cookie}");
    let page = dom(browser, &url, 500);
    let rec = page.split("<pre id=\"record\">").nth(1).unwrap();
    let rec = rec.replace("&quot;", "\"");
    let deduped: u64 = rec
        .split("\"SamplesDeduped\": ")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(deduped > 10, "the counters stood still between polls: {deduped} deduped");
    // Every sampled series is one unbroken line of held values: no fragments, no lone dots,
    // no pause (the monitor sampled it every tick).
    for (id, series) in [("chart-rtt", "rtt"), ("chart-cwnd", "cwnd"), ("chart-retrans", "retrans")]
    {
        assert_eq!(lines(&page, id, series), 1, "{id}: {}", chart(&page, id));
        assert!(!chart(&page, id).contains("data-dot"), "{id}");
        assert!(!chart(&page, id).contains("data-pause"), "{id}");
    }
    screenshot(browser, &url, "receiver-limited.png", "1000,1500");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(c);
    sender.join().unwrap();
}

#[test]
fn a_busy_host_lists_the_busiest_first_and_collapses_the_idle() {
    let Some(browser) = chromium() else { return };
    let idle_pairs = if allow_files(20_000) >= 4_000 { 1_500 } else { 400 };
    let (l, a) = listener();
    let (_m, addr) = http_monitor("100ms", a);
    let mut idle: Vec<Pair> = (0..idle_pairs).map(|_| Pair::connect(&l, a).unwrap()).collect();
    for p in &mut idle {
        p.exchange(100).unwrap();
    }
    // Three busy pairs at fixed paces (each tick 400, 100 and 25 KB each way), kept moving
    // until the page is read, so that its rates are those of flows still busy (a rate read
    // after they stop decays by however long the browser takes to start, which on a loaded
    // machine is seconds). The page is read 32 s in: the idle ones have not moved for more
    // than 30 s by then (`IDLE_NS`).
    let mut busy: Vec<Pair> = (0..3).map(|_| Pair::connect(&l, a).unwrap()).collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mover = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let t0 = std::time::Instant::now();
            let mut ticks = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for (i, p) in busy.iter_mut().enumerate() {
                    p.exchange(400_000 >> (2 * i)).unwrap();
                }
                ticks += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            (busy, ticks, t0.elapsed())
        })
    };
    std::thread::sleep(Duration::from_secs(32));
    let url = format!("http://{addr}/");
    let host = dom(browser, &url, 1500);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (busy, ticks, took) = mover.join().unwrap();
    // The first pair's pace as the loop achieved it, bits/s (each end acks and receives
    // 400 KB a tick): on a loaded machine the ticks stretch, and the page's rate with them.
    let pace = f64::from(ticks) * 800_000.0 * 8.0 / took.as_secs_f64();
    let rows: Vec<&str> =
        host.split("<tr class=\"flow\"").skip(1).map(|r| &r[..r.find("</tr>").unwrap()]).collect();
    assert_eq!(rows.len(), 6, "the three busy pairs' two ends: {host}");
    let rates: Vec<f64> = rows
        .iter()
        .map(|r| rate_of(r.split("<td class=\"rate\">").nth(1).unwrap().split('<').next().unwrap()))
        .collect();
    assert!(rates.windows(2).all(|w| w[0] >= w[1]), "busiest first: {rates:?}");
    // Each tick the first pair moves 400 KB each way (and so 800 KB per end, acked plus
    // received, over 100 ms and a little more): tens of Mbit/s on an idle machine (a CI run
    // under load made 8), the third a sixteenth. The page's rate is a recent average of a
    // flow still moving: within a factor of 4 of the pace the loop kept.
    assert!(rates[0] > pace / 4.0 && rates[0] < pace * 4.0, "pace {pace}: {rates:?}");
    assert!(rates[0] > 5.0 * rates[5], "{rates:?}");
    let n: usize = host
        .split("id=\"idle-flows\">")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(n >= 2 * idle_pairs - 10 && n <= 2 * idle_pairs, "{n} idle of {}", 2 * idle_pairs);
    // Filtered by a verdict nothing has: no rows, and the filter is kept.
    let none = dom(browser, &format!("{url}?verdict=send-buffer"), 500);
    assert!(
        none.contains("No active flows here.")
            && none.contains("<option selected=\"\">send-buffer</option>"),
        "{none}"
    );
    screenshot(browser, &url, "busy-host.png", "1500,1200");
    drop(busy);
    drop(idle);
}

/// A newcomer's rate-limited download went missing from the host page: its counters stood
/// still for seconds while curl drained a multi-MB receive buffer, and it was counted as
/// idle. A flow that moved bytes in the last 30 s, or has bytes waiting in a queue, is
/// listed: both ends of the download are on every read of the page while it runs.
#[test]
fn a_rate_limited_download_stays_listed_throughout() {
    use std::io::{Read, Write};
    let Some(browser) = chromium() else { return };
    if Command::new("curl").arg("--version").output().is_err() {
        assert!(std::env::var("CI").map_or(true, |v| v != "true"), "CI=true: no curl");
        eprintln!("skipped: no curl");
        return;
    }
    let (l, a) = listener();
    let (m, addr) = http_monitor("100ms", a);
    // 256 MB served at whatever pace the reader takes; curl reads 256 KB a second of it, so
    // the server is still writing when the page was read for the last time. (A server that
    // wrote its last byte into the socket buffers and closed early left an orphaned socket
    // in zero-window probing, which the kernel may reset: with 16 MB, a CI run saw the
    // connection gone after 29 s.)
    const SIZE: usize = 256 << 20;
    let server = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut req = [0u8; 1024];
        let _ = s.read(&mut req).unwrap();
        write!(s, "HTTP/1.1 200 OK\r\nContent-Length: {SIZE}\r\nConnection: close\r\n\r\n")
            .unwrap();
        let chunk = vec![b'x'; 64 << 10];
        for _ in 0..SIZE / chunk.len() {
            if s.write_all(&chunk).is_err() {
                return; // curl was stopped
            }
        }
    });
    let mut curl = Command::new("curl")
        .args(["-s", "--limit-rate", "256k", "-o", "/dev/null", &format!("http://{a}/")])
        .spawn()
        .unwrap();
    let port = format!(":{}", a.port());
    let mut reads = Vec::new();
    let mut seen = Vec::new();
    for _ in 0..36 {
        std::thread::sleep(Duration::from_secs(1));
        // A page the poll task was too busy to answer in time (503 on a loaded machine) is
        // asked again: what is tested is what a rendered page lists.
        let mut response = http_get(&addr, "/");
        for _ in 0..5 {
            if response.starts_with("HTTP/1.1 200") {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
            response = http_get(&addr, "/");
        }
        let page = body(&response).to_string();
        let rows = page.split("<tr class=\"flow\"").skip(1).filter(|r| r.contains(&port)).count();
        reads.push(rows);
        // What a failure needs to be read: the status line, and whether curl still runs.
        let status = response.lines().next().unwrap_or("").to_string();
        seen.push((status, curl.try_wait().ok().flatten().map(|st| st.to_string())));
    }
    let url = format!("http://{addr}/");
    screenshot(browser, &url, "rate-limited-download.png", "1400,900");
    let _ = curl.kill();
    let _ = curl.wait();
    let _ = server.join();
    drop(m);
    eprintln!("download's rows on each read of the page: {reads:?}");
    assert!(reads.iter().all(|&n| n == 2), "both ends listed on every read: {reads:?}\n{seen:?}");
}

#[test]
fn a_report_of_a_hundred_thousand_records_is_small_and_opens() {
    use std::io::Write;
    let Some(browser) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let recs = dir.path().join("records.ndjson");
    let samples = dir.path().join("samples.ndjson");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&recs).unwrap());
    let verdicts = ["receiver-window", "send-buffer", "network", "application", "unknown"];
    for i in 0..100_000u64 {
        let v = verdicts[(i % 5) as usize];
        let r = serde_json::json!({
            "ID": {"SrcIP": "10.0.0.1", "SrcPort": 443, "DstIP": "10.0.0.2", "DstPort": 32_768 + i % 28_000},
            "Cookie": i, "Seq": 0, "Service": format!("svc{}", i % 40),
            "StartTime": "2026-11-26T10:00:00Z", "EndTime": "2026-11-26T11:00:00Z",
            "SendThroughputMbps": 0.02 * (1 + i % 100_000) as f64, "BytesAcked": 2_000_000 + i,
            "RTTSummary": [0, 0, 0, 0.05 * (1 + i % 2_000) as f64, 0, 0, 0],
            "Diagnosis": {"Verdict": v, "Finding": format!("{v}: a finding as long as real ones are, with its numbers {i}")},
        });
        writeln!(f, "{r}").unwrap();
    }
    f.flush().unwrap();
    // Samples for the slowest limited flows (the lowest cookies): an hour each at 1 s.
    let mut s = std::io::BufWriter::new(std::fs::File::create(&samples).unwrap());
    for cookie in 0..40u64 {
        for k in 0..3600u64 {
            let line = serde_json::json!({"Cookie": cookie, "UnixNs": 1_795_478_400_000_000_000u64 + k * 1_000_000_000,
                "RTTms": 10.0 + (k % 60) as f64, "CwndBytes": 14_480 * (1 + k % 30)});
            writeln!(s, "{line}").unwrap();
        }
    }
    s.flush().unwrap();
    let report = dir.path().join("report.html");
    let out = Command::new(BIN)
        .args(["report", recs.to_str().unwrap(), "--samples", samples.to_str().unwrap(), "-o"])
        .arg(&report)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("100000 records; 20 flows listed, 20 of them with samples"), "{err}");
    let size = std::fs::metadata(&report).unwrap().len();
    assert!(size < 10 << 20, "{size} bytes");
    let url = format!("file://{}", report.display());
    let rdom = dom(browser, &url, 500);
    assert_eq!(rdom.matches("<section class=\"flow\"").count(), 20);
    assert_eq!(rdom.matches("<svg class=\"chart\"").count(), 2 + 20 * 5);
    // Ephemeral ports grouped: one row per service, not one per port.
    let table = rdom.split("id=\"verdicts\"").nth(1).unwrap().split("</table>").next().unwrap();
    assert_eq!(table.matches("<tr>").count(), 1 + 40, "a header and 40 services");
    // The answer first: the slowest flows before the distributions and the 40-row table.
    let at = |id: &str| rdom.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no {id}"));
    assert!(at("slowest") < at("cdf-throughput") && at("cdf-throughput") < at("verdicts"));
    screenshot(browser, &url, "report-100k.png", "1300,1600");
}
