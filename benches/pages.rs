//! What a person waits for: the report of a large run, written and opened in a real
//! browser (headless Chromium, Debian's `chromium`).
//!
//! ```text
//! cargo bench --bench pages -- [RECORDS] [ROUNDS]
//! (It does nothing under `cargo test`, which runs bench targets too.)
//! ```
//! It writes RECORDS synthetic records (default 100,000: varied services, ports,
//! throughputs over five decades, RTTs over four, all five verdicts with findings of a
//! real length) and an hour of samples at 1 s for the flows the report will list, runs
//! `cgmon-rs report` on them (the binary of this build profile), and prints the time to
//! write the report and its size. Then it opens the report in Chromium ROUNDS times
//! (default 5), alternating with an empty page, and prints the median time to load each
//! and their difference: the browser's start is the same in both, so the difference is
//! what the report itself costs to open. Figures: benches/RESULTS.md.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_cgmon-rs");
const CHROMIUM: &str = "/usr/bin/chromium";

/// Writes `n` records to `path`, and the samples of the flows with the lowest
/// throughput among the limited ones (the first 40 cookies) to `samples`.
fn write_run(n: u64, path: &Path, samples: &Path) {
    let verdicts = ["receiver-window", "send-buffer", "network", "application", "unknown"];
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for i in 0..n {
        let v = verdicts[(i % 5) as usize];
        // Throughputs from 20 kbit/s to 2 Gbit/s (a log-uniform spread), RTTs 50 µs to 500 ms.
        let mbps = 0.02 * 10f64.powf(5.0 * ((i * 7919) % n) as f64 / n as f64);
        let rtt = 0.05 * 10f64.powf(4.0 * ((i * 104_729) % n) as f64 / n as f64);
        let sport = [443, 5432, 8080][(i % 3) as usize];
        let r = serde_json::json!({
            "ID": {"SrcIP": "10.1.2.3", "SrcPort": sport,
                   "DstIP": format!("10.9.{}.{}", i % 200, i % 250), "DstPort": 32_768 + i % 28_000},
            "Cookie": i, "Seq": 0, "Service": format!("svc-{}", i % 60), "Comm": "server",
            "StartTime": "2026-11-26T10:00:00Z", "EndTime": "2026-11-26T11:00:00Z",
            "SendThroughputMbps": if i < 40 { 0.01 + i as f64 * 1e-4 } else { mbps },
            "BytesAcked": 2_000_000 + i * 37, "RTTSummary": [rtt, rtt, rtt, rtt, rtt, rtt, rtt],
            "MinRTTKernelms": rtt * 0.8,
            "Diagnosis": {"Verdict": v, "Cause": "small-buffer",
                "Finding": format!("{v}: receiver window 85.0 KB at {rtt:.1} ms RTT caps this flow at 13.6 Mbit/s; it reached 13.2 Mbit/s (97 % of the time receiver-window limited)")},
        });
        writeln!(f, "{r}").unwrap();
    }
    f.flush().unwrap();
    let mut s = std::io::BufWriter::new(std::fs::File::create(samples).unwrap());
    for cookie in 0..40u64 {
        for k in 0..3600u64 {
            let line = serde_json::json!({
                "Cookie": cookie, "UnixNs": 1_795_478_400_000_000_000u64 + k * 1_000_000_000,
                "RTTms": 10.0 + (k % 60) as f64, "CwndBytes": 14_480 * (1 + k % 30),
                "PacingRateMbps": 20.0, "DeliveryRateMbps": 10.0 + (k % 7) as f64,
                "TotalRetransmits": k / 600, "BusyMs": k * 1000, "RwndLimitedMs": k * 900, "SndbufLimitedMs": 0,
            });
            writeln!(s, "{line}").unwrap();
        }
    }
    s.flush().unwrap();
}

/// One headless load of `url`: the wall time until Chromium has the page loaded and its
/// DOM written out.
fn load(url: &str) -> Duration {
    let profile = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let out = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(url)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    t.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // `cargo test --all-targets`: a benchmark, not a test
    }
    let mut a = std::env::args().skip(1).filter(|a| a != "--bench");
    let n: u64 = a.next().map_or(100_000, |v| v.parse().unwrap());
    let rounds: usize = a.next().map_or(5, |v| v.parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let (recs, samples) = (dir.path().join("records.ndjson"), dir.path().join("samples.ndjson"));
    write_run(n, &recs, &samples);
    let report = dir.path().join("report.html");
    let t = Instant::now();
    let out = Command::new(BIN)
        .args(["report", recs.to_str().unwrap(), "--samples", samples.to_str().unwrap(), "-o"])
        .arg(&report)
        .output()
        .unwrap();
    let write = t.elapsed();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let size = std::fs::metadata(&report).unwrap().len();
    println!(
        "report of {n} records: written in {:.2} s, {:.2} MB ({})",
        write.as_secs_f64(),
        size as f64 / 1e6,
        String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("")
    );
    if !Path::new(CHROMIUM).exists() {
        println!("no {CHROMIUM}: the load time is not measured");
        return;
    }
    let empty = dir.path().join("empty.html");
    std::fs::write(&empty, "<!DOCTYPE html><html><body><p>empty</p></body></html>\n").unwrap();
    let (mut r, mut e) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        e.push(load(&format!("file://{}", empty.display())));
        r.push(load(&format!("file://{}", report.display())));
    }
    let (r, e) = (median(r), median(e));
    println!(
        "chromium load, median of {rounds}: report {:.2} s, empty page {:.2} s, the report's own {:.2} s",
        r.as_secs_f64(),
        e.as_secs_f64(),
        r.as_secs_f64() - e.as_secs_f64()
    );
}
