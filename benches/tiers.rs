//! The tiered-sampling benchmark (issue targets; figures in benches/RESULTS.md, D10).
//!
//! ```text
//! [OLD=path/to/an/older/cgmon-rs] cargo bench --bench tiers -- [ROUNDS] [SECS]
//! (It does nothing under `cargo test`, which runs bench targets too.)
//! ```
//! It holds 10,000 idle loopback connections (20,000 sockets) and 100 busy ones (200
//! sockets that move every 5 ms), then runs the release binary side by side, round after
//! round, in these configurations:
//! - `-run-interval 100ms --cpu-budget 0`: a full dump every tick, cgmon's way (cgmon itself
//!   is not on this machine; docs/cgmon.md has its figures against ours);
//! - `-run-interval 100ms` with the default budget;
//! - `-run-interval 10ms` with the default budget.
//!
//! For each run it reports the monitor's whole-process CPU in its steady state (from
//! /proc, between 2 s in and just before the stop, so start-up and the records written at
//! the stop are left out), each busy flow's samples against its lifetime over the interval,
//! the full-dump interval the monitor reports, and how late flows opened during the run
//! were found. A bare loop that only receives and discards full dumps (no decoding, no
//! tracking) runs in-process at 100 ms for the floor of the full-dump path.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cgmon_rs::clock::{monotonic_ns, thread_cpu_ns};
use cgmon_rs::sampler::source::{DumpSource, NetlinkSource, SocketOptions};
use cgmon_rs::states::StateSet;
use cgmon_rs::testkit::{ConnHolder, Pair};
use cgmon_rs::wire::inet_diag::{DumpRequest, RequestKind, default_extensions};
use cgmon_rs::wire::nlmsg::{NLMSG_DONE, NlMsgIter};
use serde_json::Value;

#[path = "common/procstat.rs"]
mod procstat;
use procstat::proc_cpu_s;

const IDLE_CONNECTIONS: usize = 10_000;
const BUSY_CONNECTIONS: usize = 100;

fn scrape(port: u16, name: &str) -> Option<f64> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    body.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))?
        .split(' ')
        .nth(1)?
        .parse()
        .ok()
}

struct Outcome {
    cpu_share: f64,
    busy_min: f64,
    busy_mean: f64,
    full_interval_s: f64,
    discovery_max_ms: f64,
    discovered: usize,
}

/// Runs the monitor for `secs` with `args`; opens a new connection every 500 ms meanwhile.
fn run(bin: &str, args: &[&str], secs: u64, busy_port: u16, interval_ms: f64) -> Outcome {
    let http = 18_000 + (std::process::id() % 1000) as u16;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("records.json");
    let mut child = Command::new(bin)
        .args(args)
        .args(["-run-duration", &format!("{secs}s"), "-writer-partial"])
        .args(["-run-http-server", &format!("127.0.0.1:{http}")])
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let news = TcpListener::bind("127.0.0.1:0").unwrap();
    let news_addr = news.local_addr().unwrap();
    let mut opened: Vec<(u16, u64, Pair)> = Vec::new();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let c0 = proc_cpu_s(pid).unwrap();
    let w0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(secs * 1000 - 1500) {
        std::thread::sleep(Duration::from_millis(500));
        let at = monotonic_ns();
        let p = Pair::connect(&news, news_addr).unwrap();
        opened.push((p.client.local_addr().unwrap().port(), at, p));
    }
    let full_interval_s = scrape(http, "cgmon_full_dump_interval_seconds").unwrap_or(f64::NAN);
    let c1 = proc_cpu_s(pid).unwrap();
    let cpu_share = (c1 - c0) / w0.elapsed().as_secs_f64();
    child.wait().unwrap();
    let text = std::fs::read_to_string(&out).unwrap();
    let (mut ratios, mut delays) = (Vec::new(), Vec::new());
    for r in serde_json::Deserializer::from_str(&text).into_iter::<Value>().flatten() {
        let id = &r["ID"];
        let (sp, dp) = (
            id["SrcPort"].as_u64().unwrap_or(0) as u16,
            id["DstPort"].as_u64().unwrap_or(0) as u16,
        );
        if sp == busy_port || dp == busy_port {
            let seen =
                r["Samples"].as_f64().unwrap_or(0.0) + r["SamplesDeduped"].as_f64().unwrap_or(0.0);
            let expected = r["Duration"].as_f64().unwrap_or(0.0) / 1e6 / interval_ms + 1.0;
            ratios.push(seen / expected);
        }
        if let Some((_, at, _)) = opened.iter().find(|(p, _, _)| *p == sp && dp == news_addr.port())
        {
            let first = id["TstampStartNs"].as_u64().unwrap_or(0);
            delays.push(first.saturating_sub(*at) as f64 / 1e6);
        }
    }
    assert_eq!(ratios.len(), 2 * BUSY_CONNECTIONS, "a record for every busy socket");
    Outcome {
        cpu_share,
        busy_min: ratios.iter().copied().fold(f64::INFINITY, f64::min),
        busy_mean: ratios.iter().sum::<f64>() / ratios.len() as f64,
        full_interval_s,
        discovery_max_ms: delays.iter().copied().fold(0.0, f64::max),
        discovered: delays.len(),
    }
}

/// CPU share of a loop that takes a full dump every 100 ms and discards it: the floor.
fn bare_loop(secs: u64) -> f64 {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut src = NetlinkSource::open(SocketOptions::default()).unwrap();
        let req = DumpRequest {
            kind: RequestKind::SingleWalk,
            states: StateSet::default().0,
            ext: default_extensions(),
            bytecode: None,
        };
        let mut buf = Vec::with_capacity(32 * 1024);
        let (c0, w0) = (thread_cpu_ns(), Instant::now());
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        for seq in 1..=(secs * 10) as u32 {
            tick.tick().await;
            src.send(&req.emit(seq)).await.unwrap();
            'dump: loop {
                buf.clear();
                src.recv(&mut buf).await.unwrap();
                for m in NlMsgIter::new(&buf).flatten() {
                    if m.kind == NLMSG_DONE {
                        break 'dump;
                    }
                }
            }
        }
        (thread_cpu_ns() - c0) as f64 / 1e9 / w0.elapsed().as_secs_f64()
    })
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // `cargo test --all-targets`: a benchmark of minutes, not a test
    }
    let mut a = std::env::args().skip(1).filter(|a| a != "--bench");
    let rounds: usize = a.next().map_or(2, |v| v.parse().unwrap());
    let secs: u64 = a.next().map_or(12, |v| v.parse().unwrap());
    // With OLD=PATH, that binary runs beside this build's in every round (alternating which
    // goes first), for benches/compare.sh.
    let old = std::env::var("OLD").ok();
    // Fork before any thread starts.
    let _idle =
        ConnHolder::start("127.0.0.1:0".parse::<SocketAddr>().unwrap(), IDLE_CONNECTIONS).unwrap();
    let busy_l = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy_l.local_addr().unwrap();
    let pairs: Vec<Pair> =
        (0..BUSY_CONNECTIONS).map(|_| Pair::connect(&busy_l, busy_addr).unwrap()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let pairs = Arc::new(Mutex::new(pairs));
    let mover = {
        let (stop, pairs) = (stop.clone(), pairs.clone());
        std::thread::spawn(move || {
            let chunk = [0x5au8; 512];
            let mut rbuf = [0u8; 4096];
            while !stop.load(Ordering::Relaxed) {
                for p in pairs.lock().unwrap().iter_mut() {
                    p.client.write_all(&chunk).unwrap();
                    let mut got = 0;
                    while got < chunk.len() {
                        got += p.server.read(&mut rbuf).unwrap();
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let configs: [(&str, &[&str], f64); 3] = [
        (
            "100ms, --cpu-budget 0 (every tick a full dump)",
            &["-run-interval", "100ms", "--cpu-budget", "0"],
            100.0,
        ),
        ("100ms, default budget", &["-run-interval", "100ms"], 100.0),
        ("10ms, default budget", &["-run-interval", "10ms"], 10.0),
    ];
    println!(
        "config | round | binary | CPU % of a core | × budget-0 at 100ms | busy samples min / mean | full-dump interval s | new flows found (max delay ms)"
    );
    for round in 1..=rounds {
        let mut bins: Vec<&str> =
            [env!("CARGO_BIN_EXE_cgmon-rs")].into_iter().chain(old.as_deref()).collect();
        if round % 2 == 0 {
            bins.reverse();
        }
        let mut base = None;
        for (name, args, iv) in configs {
            for &bin in &bins {
                let o = run(bin, args, secs, busy_addr.port(), iv);
                let b = *base.get_or_insert(o.cpu_share);
                let who = if old.as_deref() == Some(bin) { "old" } else { "new" };
                println!(
                    "{name} | {round} | {who} | {:.2} | {:.3} | {:.3} / {:.3} | {:.2} | {} ({:.0})",
                    o.cpu_share * 100.0,
                    o.cpu_share / b,
                    o.busy_min,
                    o.busy_mean,
                    o.full_interval_s,
                    o.discovered,
                    o.discovery_max_ms
                );
            }
        }
        let floor = bare_loop(secs.min(10));
        println!(
            "bare receive-and-discard loop, 100ms | {round} | - | {:.2} | {:.3} | - | - | -",
            floor * 100.0,
            floor / base.unwrap_or(floor)
        );
    }
    stop.store(true, Ordering::Relaxed);
    mover.join().unwrap();
}
