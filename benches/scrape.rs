//! Scrape cost at 20,000 active flows (issues 6 and 23): the cgmon-rs binary tracks 10,000
//! idle loopback connections (20,000 sockets, held by a forked helper) and 100 busy ones, at
//! `-run-interval 1s`, and phases of 20 s run back to back:
//! - idle: no HTTP requests;
//! - `/metrics` scraped every 100 ms (150× a typical 15 s scrape interval);
//! - `/flows` (its first page: 1,000 flows as JSON, copied by the poll task between
//!   dumps) every 1 s;
//! - the web view's `/` (issue 23: the top 100 flows by rate with sparklines, and per-service
//!   summaries over all 20,000) every 1 s, its largest page (`/?limit=1000`) every 1 s, then
//!   `/` every 100 ms (20× the page's own refresh);
//! - one flow's page `/flow/{cookie}` (a busy flow's) every 100 ms.
//!
//! Then the same monitor at `-run-interval 100ms --cpu-budget 0`, a full dump every tick,
//! the harsh case for tick overruns, with the web view's phases only.
//!
//! For each phase it prints the client-side request time and the mean dump duration, from
//! the monitor's own `cgmon_dump_duration_seconds`, plus any overrun ticks. Run with
//! `cargo bench --bench scrape`; under `cargo test` it does nothing.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cgmon_rs::testkit::{ConnHolder, Pair};

const BIN: &str = env!("CARGO_BIN_EXE_cgmon-rs");

fn get(addr: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn value(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l[name.len()..].trim().parse().ok())
        .unwrap_or(f64::NAN)
}

/// (dump seconds sum, dump count, ticks overrun).
fn dumps(addr: &str) -> (f64, f64, f64) {
    let t = get(addr, "/metrics");
    (
        value(&t, "cgmon_dump_duration_seconds_sum"),
        value(&t, "cgmon_dump_duration_seconds_count"),
        value(&t, "cgmon_ticks_overrun_total"),
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    // Fork the holder before any thread exists.
    let holder = ConnHolder::start("127.0.0.1:0".parse().unwrap(), 10_000).unwrap();
    // 100 busy connections (200 sockets) that move every 5 ms: the top of `/` by rate, so
    // its rows carry full sparklines (idle flows keep one sample each).
    let stop = Arc::new(AtomicBool::new(false));
    let mover = {
        let stop = stop.clone();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let mut pairs: Vec<Pair> = (0..100).map(|_| Pair::connect(&l, at).unwrap()).collect();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for p in &mut pairs {
                    p.exchange(512).unwrap();
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    println!("-run-interval 1s (the default), default --cpu-budget");
    monitor(&["-run-interval", "1s"], true);
    // The harsh case for tick overruns: a full dump of 20,000 sockets every 100 ms.
    println!("-run-interval 100ms --cpu-budget 0 (a full dump every tick)");
    monitor(&["-run-interval", "100ms", "--cpu-budget", "0"], false);
    stop.store(true, Ordering::Relaxed);
    mover.join().unwrap();
    drop(holder);
}

/// Starts the monitor with `args` and runs the phases; `all` adds the JSON endpoints'.
fn monitor(args: &[&str], all: bool) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let mut mon = Command::new(BIN)
        .args(args)
        .args(["-run-http-server", &addr, "--states", "established"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(4));
    let active = value(&get(&addr, "/metrics"), "cgmon_flows_active");
    println!("tracking {active} flows");
    let phase = |name: &str, every: Duration, path: Option<&str>| {
        let (s0, c0, o0) = dumps(&addr);
        let mut req = Vec::new();
        let end = Instant::now() + Duration::from_secs(20);
        while Instant::now() < end {
            if let Some(p) = path {
                let t = Instant::now();
                let body = get(&addr, p);
                req.push(t.elapsed().as_secs_f64() * 1e3);
                assert!(body.starts_with("HTTP/1.1 200"), "{}", &body[..body.len().min(200)]);
            }
            std::thread::sleep(every);
        }
        let (s1, c1, o1) = dumps(&addr);
        println!(
            "{name:<28} requests {:>4}, median {:>8.3} ms, max {:>8.3} ms; dumps {:>3}, mean dump {:>6.2} ms, \
             ticks overrun {}",
            req.len(),
            median(req.clone()),
            req.iter().copied().fold(f64::NAN, f64::max),
            c1 - c0,
            (s1 - s0) / (c1 - c0) * 1e3,
            o1 - o0
        );
    };
    phase("idle", Duration::from_millis(100), None);
    if all {
        phase("/metrics every 100 ms", Duration::from_millis(100), Some("/metrics"));
        phase("/flows every 1 s", Duration::from_secs(1), Some("/flows"));
        phase("/ every 1 s", Duration::from_secs(1), Some("/"));
        phase("/?limit=1000 every 1 s", Duration::from_secs(1), Some("/?limit=1000"));
    }
    phase("/ every 100 ms", Duration::from_millis(100), Some("/"));
    // The busiest flow: the first row of `/`.
    let host = get(&addr, "/");
    let cookie = host
        .split("data-cookie=\"")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .expect("a flow row on /")
        .to_string();
    let page = format!("/flow/{cookie}");
    phase("/flow/{cookie} every 100 ms", Duration::from_millis(100), Some(&page));
    phase("idle again", Duration::from_millis(100), None);
    let _ = mon.kill();
    let _ = mon.wait();
}
