//! The HTTP server under abuse and at scale, against the built binary: slow and idle
//! clients are timed out, idle and stalled ones give way to newcomers at the cap, `/flows` comes a
//! page at a time, and the monitor's file descriptors stay bounded throughout.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use cgmon_rs::testkit::Pair;
use serde_json::Value;

use crate::monitor::Monitor;
use crate::program::{body, http_addr, http_get, metric};

const BIN: &str = env!("CARGO_BIN_EXE_cgmon-rs");

fn monitor(filter: &str, extra: &[&str]) -> (Monitor, String) {
    let mut c = Command::new(BIN);
    c.args(["-run-interval", "100ms", "-run-http-server", "127.0.0.1:0", "--filter", filter]);
    c.args(extra);
    let m = Monitor::spawn(c);
    let a = http_addr(&m);
    (m, a)
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

/// Whether the server closed `s` (EOF or reset) within `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut b = [0u8; 512];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue, // a response (e.g. 408); the close follows
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return false,
            Err(_) => return true,
        }
    }
}

#[test]
fn slow_and_idle_clients_are_closed_and_give_way_to_newcomers_at_the_cap() {
    let (m, addr) = monitor(
        "dport 1",
        &[
            "--http-header-timeout",
            "1s",
            "--http-idle-timeout",
            "2s",
            "--http-max-connections",
            "8",
        ],
    );
    let base = fds(m.pid());
    // Eight connections take every slot: four send half a request; four make one request
    // on a kept-alive connection, then stay silent.
    let mut held: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    for s in &mut held[..4] {
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ").unwrap();
    }
    for s in &mut held[4..] {
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut b = [0u8; 256];
        assert!(s.read(&mut b).unwrap() > 0, "answered");
    }
    std::thread::sleep(Duration::from_millis(200));
    // Timeouts: the half-sent headers after 1 s, the silent ones when idle for 2 s.
    let t = Instant::now();
    for s in &mut held[..4] {
        assert!(closed_within(s, Duration::from_millis(2500)), "header timeout");
    }
    let header_closed = t.elapsed();
    for s in &mut held[4..] {
        assert!(closed_within(s, Duration::from_millis(3000)), "idle timeout");
    }
    let idle_closed = t.elapsed();
    eprintln!("half headers closed after {header_closed:?}, idle ones after {idle_closed:?}");
    assert!(header_closed < Duration::from_millis(2000), "{header_closed:?}");
    assert!(idle_closed > Duration::from_millis(1200), "idle 2 s, not the header's 1 s");
    // At the cap, each newcomer takes the oldest idle or half-sent slot: twenty silent
    // connections, then a scraper, which is answered, and the fds stay bounded.
    let mut silent: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    let text = http_get(&addr, "/metrics");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    // The cap, plus at most 8 connections that gave way and are still closing.
    assert!(
        fds(m.pid()) <= base + 8 + 8 + 1,
        "fds {} with 21 clients, {base} before",
        fds(m.pid())
    );
    for s in &mut silent[..12] {
        assert!(closed_within(s, Duration::from_millis(500)), "the oldest gave way");
    }
    assert!(metric(&text, "cgmon_http_evicted_total") >= 12.0, "{text}");
    assert_eq!(metric(&text, "cgmon_http_refused_total"), 0.0, "{text}");
    assert!(metric(&text, "cgmon_http_timeouts_total") >= 8.0, "{text}");
    drop(silent);
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{log}");
}

/// `/healthz` and `/metrics`, 20 times each, every answer within a second.
fn scrapes_get_through(addr: &str) {
    for i in 0..20 {
        for path in ["/healthz", "/metrics"] {
            let t = Instant::now();
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
            let mut out = String::new();
            let r = s.read_to_string(&mut out);
            assert!(r.is_ok() && out.starts_with("HTTP/1.1 200"), "{path} #{i}: {r:?} {out:?}");
            assert!(t.elapsed() < Duration::from_secs(1), "{path} #{i} took {:?}", t.elapsed());
        }
    }
}

#[test]
fn issue_32_two_hundred_stalled_connections_do_not_block_scrapes() {
    let (m, addr) = monitor("dport 1", &[]);
    // Connect and send nothing, three times the default cap of 64.
    let stalled: Vec<TcpStream> = (0..200).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    scrapes_get_through(&addr);
    drop(stalled);
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{log}");
}

#[test]
fn issue_32_two_hundred_slow_readers_do_not_block_scrapes() {
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let (m, addr) = monitor(&crate::program::port_filter(l.local_addr().unwrap()), &[]);
    // A few flows, so /flows has something to say.
    let _pairs: Vec<Pair> =
        (0..4).map(|_| Pair::connect(&l, l.local_addr().unwrap()).unwrap()).collect();
    // 200 clients ask for /flows and read one byte a second.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers: Vec<TcpStream> =
        (0..200).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    for s in &mut readers {
        let _ = s.write_all(b"GET /flows HTTP/1.1\r\nHost: x\r\n\r\n");
    }
    // Each reads its first byte (or finds its connection given to a later one).
    for s in &mut readers {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.read(&mut [0u8; 1]);
    }
    let trickle = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut b = [0u8; 1];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for s in &mut readers {
                    s.set_nonblocking(true).unwrap();
                    let _ = s.read(&mut b);
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    scrapes_get_through(&addr);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    trickle.join().unwrap();
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{log}");
}

#[test]
fn flows_come_a_page_at_a_time_in_cookie_order_or_busiest_first() {
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let a = l.local_addr().unwrap();
    let (m, addr) = monitor(&crate::program::port_filter(a), &[]);
    let mut pairs: Vec<Pair> = (0..12).map(|_| Pair::connect(&l, a).unwrap()).collect();
    for p in &mut pairs {
        p.exchange(1000).unwrap();
    }
    std::thread::sleep(Duration::from_millis(400));
    let body = |r: &str| -> Vec<Value> {
        serde_json::from_str(r.split("\r\n\r\n").nth(1).unwrap()).unwrap()
    };
    let header = |r: &str, name: &str| -> Option<String> {
        r.split("\r\n\r\n").next().unwrap().lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    };
    let mut path = "/flows?limit=10".to_string();
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let r = http_get(&addr, &path);
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        assert_eq!(header(&r, "x-total-count").as_deref(), Some("24"), "{r}");
        let page = body(&r);
        assert!(page.len() <= 10);
        seen.extend(page.iter().map(|f| f["Cookie"].as_u64().unwrap()));
        pages += 1;
        match header(&r, "link") {
            Some(link) => {
                path = link.trim_start_matches('<').split('>').next().unwrap().to_string();
            }
            None => break,
        }
    }
    assert_eq!((pages, seen.len()), (3, 24), "24 flows in pages of 10");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "ascending, no repeats: {seen:?}");
    // One flow by its cookie, with its samples.
    let one = http_get(&addr, &format!("/flows/{}", seen[5]));
    let v: Value = serde_json::from_str(one.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(v["Cookie"].as_u64(), Some(seen[5]));
    let recent = v["RecentSamples"].as_array().unwrap();
    assert!(!recent.is_empty() && recent.len() as u64 <= v["Samples"].as_u64().unwrap(), "{v}");
    // The busiest first: one pair moves data, and its ends head `?order=busy`, with the
    // next page at an offset (a host with thousands of idle flows in cookie order showed
    // none of its busy ones on the first page).
    let busy_port = pairs[7].client.local_addr().unwrap().port();
    let deadline = Instant::now() + Duration::from_secs(20);
    let top = loop {
        pairs[7].exchange(200_000).unwrap();
        let r = http_get(&addr, "/flows?order=busy&limit=2");
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        let page = body(&r);
        let ports: Vec<u64> = page
            .iter()
            .flat_map(|f| [f["ID"]["SrcPort"].as_u64(), f["ID"]["DstPort"].as_u64()])
            .flatten()
            .collect();
        if ports.iter().all(|&p| p == u64::from(busy_port) || p == u64::from(a.port())) {
            break r;
        }
        assert!(Instant::now() < deadline, "the busy pair never came first: {page:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(body(&top).len(), 2, "both ends of the busy pair: {top}");
    let next = header(&top, "link").unwrap_or_default();
    assert!(next.contains("order=rate&idle=1&offset=2&limit=2"), "{next}");
    // Bad paging values are the client's error, named.
    for bad in [
        "/flows?limit=0",
        "/flows?limit=99999",
        "/flows?after=x",
        "/flows?order=fastest",
        "/flows?order=busy&after=5",
        "/flows?offset=5",
    ] {
        let r = http_get(&addr, bad);
        assert!(r.starts_with("HTTP/1.1 400"), "{bad}: {r}");
    }
    drop(pairs);
    m.signal(libc::SIGTERM);
    m.wait(Duration::from_secs(10));
}

/// The cookie of the first flow `/flows` lists, exchanging on `p` every `pause` until one
/// is listed.
fn first_flow(addr: &str, p: &mut Pair, pause: Duration, deadline: Instant) -> u64 {
    loop {
        p.exchange(4000).unwrap();
        std::thread::sleep(pause);
        let flows: Vec<Value> = serde_json::from_str(body(&http_get(addr, "/flows"))).unwrap();
        if let Some(c) = flows.first().and_then(|f| f["Cookie"].as_u64()) {
            return c;
        }
        assert!(Instant::now() < deadline, "no flow seen");
    }
}

/// The record a flow page shows (`<pre id="record">`, HTML-escaped JSON).
fn record_shown(page: &str) -> Value {
    let text = page.split("<pre id=\"record\">").nth(1).unwrap().split("</pre>").next().unwrap();
    // `&amp;` last, so that an escaped entity's text is not unescaped twice.
    let json = [("&quot;", "\""), ("&lt;", "<"), ("&gt;", ">"), ("&#39;", "'"), ("&amp;", "&")]
        .iter()
        .fold(text.to_string(), |t, (from, to)| t.replace(from, to));
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

/// An active flow's page draws every sample the tracker holds (not only the newest few
/// hundred `/flows/{cookie}` returns), and its record is computed over all of them.
#[test]
fn an_active_flow_page_draws_all_its_samples() {
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let a = l.local_addr().unwrap();
    let mut c = Command::new(BIN);
    c.args(["-run-interval", "10ms", "--cpu-budget", "0", "-run-http-server", "127.0.0.1:0"]);
    c.args(["--filter", &format!("dst {} and dport {}", a.ip(), a.port())]);
    let m = Monitor::spawn(c);
    let addr = http_addr(&m);
    let mut p = Pair::connect(&l, a).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let samples = |page: &str| -> Option<usize> {
        let t = page.split("Charts of its ").nth(1)?;
        t.split(' ').next()?.parse().ok()
    };
    let cookie = first_flow(&addr, &mut p, Duration::from_millis(4), deadline);
    let page = loop {
        for _ in 0..50 {
            p.exchange(4000).unwrap();
            std::thread::sleep(Duration::from_millis(4));
        }
        let page = http_get(&addr, &format!("/flow/{cookie}"));
        assert!(page.starts_with("HTTP/1.1 200"), "{page}");
        if samples(&page).is_some_and(|n| n > 400) {
            break page;
        }
        assert!(Instant::now() < deadline, "fewer than 400 samples in 20 s: {page}");
    };
    let n = samples(&page).unwrap();
    assert!(!page.contains("newest"), "all samples, not the newest few");
    // The RTT line: one point per sample with an RTT (its polylines' `data-n`; the steps
    // between them add corners).
    let rtt = page.split("id=\"chart-rtt\"").nth(1).unwrap();
    let rtt = &rtt[..rtt.find("</svg>").unwrap()];
    let points: usize = rtt
        .split("data-series=\"rtt\" data-n=\"")
        .skip(1)
        .map(|s| s.split('"').next().unwrap().parse::<usize>().unwrap())
        .sum();
    assert!(points + 2 >= n && points <= n, "{points} RTT points for {n} samples");
    // The record it would have: its sample count is the page's.
    let rec = record_shown(&page);
    assert_eq!(rec["Samples"].as_u64(), Some(n as u64), "{rec}");
    drop(m);
}

/// An ended flow's page shows its record as it was written, its service named included
/// (the ring is filled before the writer names services).
#[test]
fn an_ended_flow_page_shows_its_record_as_written() {
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let a = l.local_addr().unwrap();
    let mut c = Command::new(BIN);
    c.args(["-run-interval", "50ms", "-run-http-server", "127.0.0.1:0"]);
    c.args(["--filter", &format!("dst {} and dport {}", a.ip(), a.port())]);
    let m = Monitor::spawn(c);
    let addr = http_addr(&m);
    let mut p = Pair::connect(&l, a).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let cookie = first_flow(&addr, &mut p, Duration::from_millis(20), deadline);
    drop(p);
    let page = loop {
        let page = http_get(&addr, &format!("/flow/{cookie}"));
        if page.contains("· ended</small>") {
            break page;
        }
        assert!(Instant::now() < deadline, "the flow did not end: {page}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let shown = record_shown(&page);
    m.signal(libc::SIGTERM);
    let (st, log, lines) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{log}");
    let written: Value = lines
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|r| r["Cookie"] == cookie)
        .expect("its record was written");
    assert_eq!(shown, written);
    if written.get("CgroupID").is_some_and(|id| id != 0) {
        assert!(page.contains("<th>service</th>"), "{page}");
    }
}

/// GET `path` with an `Authorization` header (or none): the status line and the body.
fn get_with(addr: &str, path: &str, auth: Option<&str>) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (head.lines().next().unwrap_or("").to_string(), body.to_string())
}

/// With --http-token-file, the pages and /metrics (which name every local user's programs,
/// peers and pids) answer only requests that carry the token, as a bearer token or as
/// Basic's password; /healthz answers anyone. Without a server to guard, or with a short
/// token, the flag is a usage error.
#[test]
fn a_token_file_closes_the_pages_to_everyone_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let tf = dir.path().join("token");
    std::fs::write(&tf, "s3cret-token-0123456789\n").unwrap();
    let (_l, a) = crate::program::listener();
    let (m, addr) =
        monitor(&crate::program::port_filter(a), &["--http-token-file", tf.to_str().unwrap()]);
    for path in ["/", "/metrics", "/flows", "/health", "/flow-duration-histogram"] {
        let (status, _) = get_with(&addr, path, None);
        assert!(status.contains(" 401 "), "{path}: {status}");
        let (status, _) = get_with(&addr, path, Some("Bearer wrong-token-0123456789"));
        assert!(status.contains(" 401 "), "{path}: {status}");
        let (status, _) = get_with(&addr, path, Some("Bearer s3cret-token-0123456789"));
        assert!(status.contains(" 200 "), "{path}: {status}");
    }
    // A browser's Basic credentials, any user name: "me:s3cret-token-0123456789".
    let (status, body) =
        get_with(&addr, "/metrics", Some("Basic bWU6czNjcmV0LXRva2VuLTAxMjM0NTY3ODk="));
    assert!(status.contains(" 200 ") && body.contains("cgmon_"), "{status}");
    let (status, _) = get_with(&addr, "/healthz", None);
    assert!(status.contains(" 200 "), "{status}");
    drop(m);
    std::fs::write(&tf, "short\n").unwrap();
    for args in [
        vec!["--http-token-file", tf.to_str().unwrap(), "-run-http-server", "127.0.0.1:0"],
        vec!["--http-token-file", tf.to_str().unwrap()],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_cgmon-rs"))
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("--http-token-file"), "{err}");
    }
}
