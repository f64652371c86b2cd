//! What finding the process behind each flow costs (issue 36), side by side in one run:
//! the release binary with attribution (the default) and with `--no-process`, alternately,
//! on the same traffic.
//!
//! ```text
//! cargo bench --bench attribution -- flows [SECS] [ROUNDS]   20,000 sockets in 50 processes
//! cargo bench --bench attribution -- churn [SECS] [ROUNDS]   2,000 short connections/s from 10
//! cargo bench --bench attribution -- iperf [RUNS] [SECS]     iperf3's loopback throughput,
//!                                                            with and without the monitor
//! (It does nothing under `cargo test`, which runs bench targets too.)
//! ```
//! `flows`: 50 processes each open N connections (default 200) to their own listener (both
//! ends theirs: 2N sockets each) and send 100 bytes on each every second. `churn`: 10 processes
//! each make 200 connections a second (100 bytes, then close) to a listener in this
//! process. Each round runs the monitor (`-run-interval 100ms`, filtered on the traffic's
//! ports) for SECS (default 20) once with attribution and once without, and prints the
//! monitor's CPU (whole process, from its start: the first walk is included), the walker
//! thread's share of a core, and the share of ended flows named (`how="socket"` or
//! `listener`). `iperf`: iperf3's server and client on core 1, the monitor (`-run-interval
//! 10ms`) on core 0; RUNS (11) alternating runs of SECS each way (10, iperf3's own default
//! length: 3 s runs weigh each flow's start, when the monitor finds its process, three
//! times as much as a transfer of the default length does); the medians, the spread, and
//! the median of each round's ratio (the two runs of a round are next to each other in
//! time, so a drift of the machine's speed over minutes cancels in it). Figures:
//! benches/RESULTS.md and the README.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "common/procstat.rs"]
mod procstat;
use procstat::{proc_cpu_s, status_mib, thread_cpu_s};

const BIN: &str = env!("CARGO_BIN_EXE_cgmon-rs");

/// A child of this bench: `hold,PORT_BASE,N` or `churn,PORT,RATE`.
fn child(spec: &str) {
    let parts: Vec<&str> = spec.split(',').collect();
    match parts[0] {
        "hold" => hold(parts[1].parse().unwrap()),
        "churn" => churn(parts[1].parse().unwrap(), parts[2].parse().unwrap()),
        other => panic!("unknown child {other}"),
    }
}

/// Holds N connections to its own listener (on an ephemeral port it prints once they are
/// all open), sending 100 bytes on each every second, until its stdin closes.
fn hold(n: usize) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut pairs: Vec<(TcpStream, TcpStream)> = (0..n)
        .map(|_| {
            let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            (c, l.accept().unwrap().0)
        })
        .collect();
    println!("{}", l.local_addr().unwrap().port());
    std::thread::spawn(|| {
        let mut b = [0u8; 1];
        let _ = std::io::stdin().read(&mut b);
        std::process::exit(0);
    });
    let msg = [7u8; 100];
    let mut buf = [0u8; 100];
    loop {
        for (c, s) in &mut pairs {
            c.write_all(&msg).unwrap();
            s.read_exact(&mut buf).unwrap();
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// RATE connections a second to PORT, paced: connect, send 100 bytes, close; until its stdin
/// closes.
fn churn(port: u16, rate: u64) {
    std::thread::spawn(|| {
        let mut b = [0u8; 1];
        let _ = std::io::stdin().read(&mut b);
        std::process::exit(0);
    });
    let t = Instant::now();
    for i in 0u64.. {
        let due = Duration::from_nanos(i * 1_000_000_000 / rate);
        if let Some(w) = due.checked_sub(t.elapsed()) {
            std::thread::sleep(w);
        }
        if let Ok(mut c) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = c.write_all(&[1u8; 100]);
        }
    }
}

fn spawn_child(spec: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .env("ATTR_CHILD", spec)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// What one monitor run measured.
struct Run {
    /// The monitor's CPU seconds, from its start.
    cpu: f64,
    /// Its CPU seconds after its first 5 (the first walk done): the steady state.
    steady: f64,
    /// Its walker thread's CPU seconds.
    walker: f64,
    /// Records written, and those naming their process.
    records: usize,
    named: usize,
    /// Peak RSS, MiB.
    peak_mib: f64,
}

/// One monitor run of `secs` over `filter`, writing its records to a file read afterwards
/// (at the stop every flow still open is written, named or not).
fn monitor(filter: &str, secs: u64, attribute: bool) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args(["-run-interval", "100ms", "--filter", filter, "-writer-partial"])
        .args(["-writer-dir", dir.path().to_str().unwrap(), "-writer-file", "f.json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if !attribute {
        cmd.arg("--no-process");
    }
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    std::thread::sleep(Duration::from_secs(5));
    let at5 = proc_cpu_s(pid).unwrap();
    std::thread::sleep(Duration::from_secs(secs.saturating_sub(5)));
    let (cpu, walker) = (proc_cpu_s(pid).unwrap(), thread_cpu_s(pid, "cgmon-procs"));
    let peak_mib = status_mib(pid, "VmHWM:");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = child.wait();
    let (mut records, mut named) = (0, 0);
    for f in std::fs::read_dir(dir.path()).unwrap().flatten() {
        for line in std::fs::read_to_string(f.path()).unwrap_or_default().lines() {
            records += 1;
            named += usize::from(line.contains("\"Comm\":") && line.contains("\"Pid\":"));
        }
    }
    Run { cpu, steady: cpu - at5, walker, records, named, peak_mib }
}

/// ROUNDS rounds of the monitor with and without attribution over `filter`; prints each
/// and the ratio of the medians.
fn compare(what: &str, filter: &str, secs: u64, rounds: usize) {
    let (mut on, mut off, mut on_steady, mut off_steady) = (vec![], vec![], vec![], vec![]);
    for round in 0..rounds {
        // Alternate which goes first: the machine's noise drifts.
        let order = if round % 2 == 0 { [true, false] } else { [false, true] };
        for attribute in order {
            let r = monitor(filter, secs, attribute);
            println!(
                "  {what} round {round} {:>14}: CPU {:.3} s (after 5 s: {:.3}), walker {:.3} s \
                 ({:.2} % of a core), records {}, named {} ({:.2} %), peak RSS {:.1} MiB",
                if attribute { "attribution" } else { "--no-process" },
                r.cpu,
                r.steady,
                r.walker,
                r.walker / secs as f64 * 100.0,
                r.records,
                r.named,
                r.named as f64 / r.records.max(1) as f64 * 100.0,
                r.peak_mib,
            );
            if attribute {
                on.push(r.cpu);
                on_steady.push(r.steady);
            } else {
                off.push(r.cpu);
                off_steady.push(r.steady);
            }
        }
    }
    let (a, b) = (median(&mut on), median(&mut off));
    let (c, d) = (median(&mut on_steady), median(&mut off_steady));
    println!(
        "{what}: median CPU {a:.3} s with attribution, {b:.3} s without: {:+.1} %; after the \
         first 5 s {c:.3} s and {d:.3} s: {:+.1} %",
        (a / b - 1.0) * 100.0,
        (c / d - 1.0) * 100.0
    );
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// 50 processes holding 200 sockets each.
fn flows(secs: u64, rounds: usize) {
    let mut kids: Vec<Child> = (0..50).map(|_| spawn_child("hold,200")).collect();
    let ports: Vec<u16> = kids
        .iter_mut()
        .map(|k| {
            let mut line = String::new();
            std::io::BufRead::read_line(
                &mut std::io::BufReader::new(k.stdout.as_mut().unwrap()),
                &mut line,
            )
            .unwrap();
            line.trim().parse().unwrap()
        })
        .collect();
    println!("flows: 50 processes, 10,000 connections (20,000 sockets, both ends theirs)");
    // Exactly their sockets: each listener's port, either way.
    let filter: Vec<String> = ports.iter().map(|p| format!("sport {p} or dport {p}")).collect();
    let filter = filter.join(" or ");
    compare("flows", &filter, secs, rounds);
    for k in &mut kids {
        drop(k.stdin.take());
        let _ = k.wait();
    }
}

/// 10 processes making 200 short connections a second each.
fn churn_mode(secs: u64, rounds: usize) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let mut c = c;
            let mut b = [0u8; 100];
            let _ = c.read(&mut b);
        }
    });
    let mut kids: Vec<Child> = (0..10).map(|_| spawn_child(&format!("churn,{port},200"))).collect();
    println!("churn: 10 processes, 2,000 connections a second to port {port}");
    compare("churn", &format!("sport {port} or dport {port}"), secs, rounds);
    for k in &mut kids {
        drop(k.stdin.take());
        let _ = k.wait();
    }
}

/// iperf3's loopback throughput, bits a second, over `secs` on core 1.
fn iperf(port: u16, secs: u64) -> f64 {
    let out = Command::new("taskset")
        .args(["-c", "1", "iperf3", "-c", "127.0.0.1", "-p", &port.to_string(), "-J", "-t"])
        .arg(secs.to_string())
        .output()
        .expect("iperf3");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("iperf3 -J");
    v["end"]["sum_received"]["bits_per_second"].as_f64().expect("a rate")
}

/// RUNS alternating runs with and without the monitor beside iperf3.
fn iperf_mode(runs: usize, secs: u64) {
    let port = 5201 + (std::process::id() % 500) as u16;
    let mut server = Command::new("taskset")
        .args(["-c", "1", "iperf3", "-s", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .spawn()
        .expect("iperf3");
    std::thread::sleep(Duration::from_millis(500));
    let (mut with, mut without, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs {
        for on in if i % 2 == 0 { [false, true] } else { [true, false] } {
            let mut m = on.then(|| {
                Command::new("taskset")
                    .args(["-c", "0", BIN, "-run-interval", "10ms"])
                    .args(["-writer-file", "/dev/null", "-writer-dir", "/dev"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            });
            if m.is_some() {
                std::thread::sleep(Duration::from_millis(500));
            }
            let bps = iperf(port, secs);
            if let Some(m) = &mut m {
                // SAFETY: signalling our own child.
                unsafe { libc::kill(m.id() as i32, libc::SIGTERM) };
                let _ = m.wait();
            }
            println!(
                "  run {i} {:>15}: {:.2} Gbit/s",
                if on { "with monitor" } else { "without" },
                bps / 1e9
            );
            if on { with.push(bps) } else { without.push(bps) }
        }
        ratios.push(with[i] / without[i]);
    }
    let _ = server.kill();
    let _ = server.wait();
    let spread = |v: &[f64]| {
        let (lo, hi) =
            (v.iter().copied().fold(f64::MAX, f64::min), v.iter().copied().fold(0.0, f64::max));
        format!("{:.2}–{:.2} Gbit/s", lo / 1e9, hi / 1e9)
    };
    let (sw, so) = (spread(&with), spread(&without));
    let (a, b) = (median(&mut with), median(&mut without));
    let (lo, hi) = (
        ratios.iter().copied().fold(f64::MAX, f64::min),
        ratios.iter().copied().fold(0.0, f64::max),
    );
    println!(
        "iperf: median {:.2} Gbit/s with the monitor (spread {sw}), {:.2} without ({so}): {:.1} %; \
         each round's ratio: median {:.1} % ({:.1}–{:.1} %)",
        a / 1e9,
        b / 1e9,
        a / b * 100.0,
        median(&mut ratios) * 100.0,
        lo * 100.0,
        hi * 100.0
    );
}

fn main() {
    if let Ok(spec) = std::env::var("ATTR_CHILD") {
        child(&spec);
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let num = |i: usize, d: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    match args.first().map(String::as_str) {
        Some("flows") => flows(num(1, 20), num(2, 3) as usize),
        Some("churn") => churn_mode(num(1, 20), num(2, 3) as usize),
        Some("iperf") => iperf_mode(num(1, 11) as usize, num(2, 10)),
        _ => println!("attribution: give a mode (flows, churn or iperf); nothing to do"),
    }
}
