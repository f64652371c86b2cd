//! The fleet sink against a real ClickHouse 18.16 on this machine (issue 35's targets): records
//! handed to the sink at a fixed rate for a while, as the writer hands them, then counted in
//! the table. It reports, for gzip on and off:
//!
//! - records handed, sent, dropped, and the table's `count()` (nothing lost, nothing twice);
//! - the sink thread's CPU per record (its own `/proc/self/task/TID/stat`, so neither the
//!   feeder nor anything else in the process counts), and the server's CPU per record;
//! - the most bytes and records that waited, and the process's peak RSS.
//!
//! The last phases stop the server (SIGSTOP) for the whole run: without a spool, memory
//! must stay within `--spool-max` (16M here) while records are dropped and counted; with
//! `--spool-dir` (and 64M), batches wait on disk and memory stays flat.
//!
//! A last-but-one phase runs the monitor itself (the release binary) with `--clickhouse` over
//! loopback connections of varied sizes and pauses made here, paced, to measure what a day
//! of records costs the server's disk, beside the same records in the gzip files.
//!
//! The records are real: the captured 20,000-socket dump (`tests/fixtures/dump20k.bin.gz`)
//! through the tracker and the analyzer, serialised as the writer does, then handed out in
//! turn. Settings, from the environment:
//!
//! - `RATE` (default 30000): records a second, paced in 10 ms steps;
//! - `SECS` (default 60): how long each phase hands records;
//! - `STALL_SECS` (default 20): the stopped-server phase; 0 leaves it out;
//! - `LIVE_SECS` (default 30) and `LIVE_RATE` (default 200 connections a second): the
//!   monitor's phase; 0 seconds leaves it out.
//!
//! ```sh
//! cargo bench --bench sink
//! SECS=10 STALL_SECS=5 cargo bench --bench sink
//! ```
//!
//! Needs `clickhouse-server` (Debian's package); the figures are in benches/RESULTS.md.

use std::sync::Arc;
use std::sync::mpsc::{TrySendError, sync_channel};
use std::time::{Duration, Instant};

use cgmon_rs::analysis::FlowStats;
use cgmon_rs::metrics::Metrics;
use cgmon_rs::sink::{self, SINK_CHANNEL_CAPACITY, SinkConfig};

#[path = "../tests/common/clickhouse.rs"]
mod clickhouse;
#[path = "common/fixture.rs"]
#[allow(dead_code)] // bumped_where is for the tracker benches
mod fixture;

fn setting<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name}={v}: not a number")),
        Err(_) => default,
    }
}

/// Clock ticks of a `/proc/.../stat` line's utime + stime, as seconds.
fn cpu_secs(stat: &str) -> f64 {
    // Fields after the command's closing parenthesis: state is the 3rd field; utime and
    // stime the 14th and 15th.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0 // USER_HZ is 100 on Linux
}

/// CPU seconds of the sink's threads: this process's, less the main thread's (the feeder).
/// A process's figure keeps the time of its threads that have ended, so the sending thread
/// counts after it is gone.
fn sink_cpu() -> f64 {
    let me = std::process::id();
    let main = std::fs::read_to_string(format!("/proc/self/task/{me}/stat")).unwrap();
    process_cpu(me) - cpu_secs(&main)
}

fn process_cpu(pid: u32) -> f64 {
    cpu_secs(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap())
}

/// Kilobytes of `VmHWM` (peak RSS) or `VmRSS`.
fn vm(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

struct Phase {
    handed: u64,
    handoff_dropped: u64,
    sent: u64,
    dropped: u64,
    stored: u64,
    sink_cpu: f64,
    server_cpu: f64,
    most_waiting_bytes: u64,
    most_waiting_records: u64,
    rss_before_kb: u64,
    rss_most_kb: u64,
    /// At half the phase, and as the handing ends: flat when memory is bounded.
    rss_middle_kb: u64,
    rss_end_kb: u64,
    secs: f64,
}

/// One phase's settings.
#[derive(Clone, Copy)]
struct Setup<'a> {
    table: &'a str,
    compress: bool,
    /// Records a second, and for how long.
    rate: u64,
    secs: f64,
    /// `--spool-max`.
    spool_max: u64,
    /// The server is stopped (SIGSTOP) for the whole phase.
    stall: bool,
    /// With `--spool-dir` (a temporary directory).
    spool: bool,
}

/// Hands `rate` records a second for `secs` to a sink pointed at `ch`, then waits for it to
/// deliver (up to 60 s) and counts the table.
fn phase(ch: &clickhouse::ChServer, recs: &[(Vec<u8>, FlowStats)], set: &Setup) -> Phase {
    let Setup { table, compress, rate, secs, spool_max, stall, spool } = *set;
    let spool_dir = tempfile::tempdir().unwrap();
    let pid = ch.pid().unwrap();
    let target = sink::client::Target::parse(&ch.url(), table).unwrap();
    let cfg = SinkConfig {
        target,
        host: "bench-1".into(),
        limits: sink::batch::Limits::default(),
        spool_dir: spool.then(|| spool_dir.path().to_path_buf()),
        spool_max,
        backoff: sink::delivery::Backoff::default(),
        compress,
        timeout: Duration::from_secs(30),
        warnings: Vec::new(),
    };
    let metrics = Arc::new(Metrics::default());
    let (tx, rx) = sync_channel(SINK_CHANNEL_CAPACITY);
    let patience = if stall { Duration::from_secs(1) } else { Duration::from_secs(60) };
    if stall {
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    }
    let rss_before_kb = vm("VmRSS:");
    let handle = sink::spawn(cfg, rx, metrics.clone(), patience).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let (sink0, server0) = (sink_cpu(), process_cpu(pid));
    let step = Duration::from_millis(10);
    let per_step = rate / 100;
    let start = Instant::now();
    let (mut handed, mut handoff_dropped, mut next, mut i) = (0u64, 0u64, start, 0usize);
    let (mut most_bytes, mut most_rows, mut rss_most) = (0, 0, 0);
    let mut rss_middle = 0;
    while start.elapsed().as_secs_f64() < secs {
        let mut msg = Vec::with_capacity(per_step as usize);
        for _ in 0..per_step {
            msg.push(recs[i % recs.len()].clone());
            i += 1;
        }
        match tx.try_send(msg) {
            Ok(()) => handed += per_step,
            Err(TrySendError::Full(_)) => handoff_dropped += per_step,
            Err(TrySendError::Disconnected(_)) => panic!("the sink ended"),
        }
        most_bytes = most_bytes.max(metrics.sink.waiting_bytes.get());
        most_rows = most_rows.max(metrics.sink.waiting_records.get());
        rss_most = rss_most.max(vm("VmRSS:"));
        next += step;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        if rss_middle == 0 && start.elapsed().as_secs_f64() >= secs / 2.0 {
            rss_middle = vm("VmRSS:");
        }
    }
    let took = start.elapsed().as_secs_f64();
    drop(tx);
    // Delivery of the tail (at most `patience`), counted in the CPU figures.
    let rss_end = vm("VmRSS:");
    while !handle.is_finished() {
        rss_most = rss_most.max(vm("VmRSS:"));
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = handle.join().unwrap();
    let server_cpu = process_cpu(pid) - server0;
    if stall {
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    }
    let stored = if stall {
        0
    } else {
        ch.query(&format!("SELECT count() FROM {table}")).unwrap().trim().parse().unwrap()
    };
    Phase {
        handed,
        handoff_dropped,
        sent: metrics.sink.sent.get(),
        dropped: metrics.sink.dropped.get(),
        stored,
        sink_cpu: sink_cpu() - sink0,
        server_cpu,
        most_waiting_bytes: most_bytes,
        most_waiting_records: most_rows,
        rss_before_kb,
        rss_most_kb: rss_most,
        rss_middle_kb: rss_middle,
        rss_end_kb: rss_end,
        secs: took,
    }
}

/// xorshift: varied sizes without a random crate.
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Loopback connections at `rate` a second for `secs`: each asks for 200 B to 4 MB
/// (log-uniform), and one in ten pauses 50 to 500 ms mid-response, as an application
/// would. The monitor watches their port and sends its records to `ch`; then rows and
/// bytes on disk per row, against the gzip files' bytes per record.
fn live(ch: &clickhouse::ChServer, rate: u64, secs: f64) {
    use std::io::{Read, Write};
    let srv = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = srv.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in srv.incoming() {
            let Ok(mut c) = c else { continue };
            std::thread::spawn(move || {
                let mut ask = [0u8; 8];
                if c.read_exact(&mut ask).is_err() {
                    return;
                }
                let size = u32::from_le_bytes(ask[..4].try_into().unwrap()) as usize;
                let pause = u32::from_le_bytes(ask[4..].try_into().unwrap());
                let chunk = vec![b'x'; 64 << 10];
                let mut left = size;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if c.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                    left -= n;
                    if pause > 0 && left <= size / 2 && left + n > size / 2 {
                        std::thread::sleep(Duration::from_millis(u64::from(pause)));
                    }
                }
            });
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let table = "cgmon.live";
    let mut mon = std::process::Command::new(env!("CARGO_BIN_EXE_cgmon-rs"))
        .args(["-run-interval", "100ms", "--clickhouse", &ch.url(), "--clickhouse-table", table])
        .args(["-writer-dir", dir.path().to_str().unwrap(), "-writer-file", "f.json.gz"])
        .args(["--host-name", "bench-1", "--filter", &format!("sport {port} or dport {port}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let start = Instant::now();
    let mut at = start;
    let mut made = 0u64;
    let mut clients = Vec::new();
    while start.elapsed().as_secs_f64() < secs {
        let r = next(&mut seed);
        // 200 B to 4 MB, log-uniform: 2^(7.6 .. 22).
        let size = 2f64.powf(7.6 + (r % 1000) as f64 / 1000.0 * 14.4) as u32;
        let pause = if r.is_multiple_of(10) { 50 + (r >> 20) % 450 } else { 0 } as u32;
        clients.push(std::thread::spawn(move || {
            let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            let mut ask = size.to_le_bytes().to_vec();
            ask.extend_from_slice(&pause.to_le_bytes());
            c.write_all(&ask).unwrap();
            std::io::copy(&mut c, &mut std::io::sink()).unwrap();
        }));
        made += 1;
        at += Duration::from_secs_f64(1.0 / rate as f64);
        std::thread::sleep(at.saturating_duration_since(Instant::now()));
        clients.retain(|c| !c.is_finished());
    }
    for c in clients {
        c.join().unwrap();
    }
    std::thread::sleep(Duration::from_secs(2));
    unsafe { libc::kill(mon.id() as i32, libc::SIGTERM) };
    let status = mon.wait().unwrap();
    let rows: f64 =
        ch.query(&format!("SELECT count() FROM {table}")).unwrap().trim().parse().unwrap();
    ch.query(&format!("OPTIMIZE TABLE {table} FINAL")).unwrap();
    let on_disk: f64 = ch
        .query(
            "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = 'cgmon' AND \
             table = 'live' AND active",
        )
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let (mut gz, mut records) = (0u64, 0u64);
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        let raw = std::fs::read(&p).unwrap();
        gz += raw.len() as u64;
        let mut text = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[..]).read_to_end(&mut text).unwrap();
        records += text.iter().filter(|&&b| b == b'\n').count() as u64;
    }
    assert!(status.success() && rows as u64 == records, "the table and the files differ");
    let per = on_disk / rows.max(1.0);
    println!(
        "the monitor over {made} loopback connections ({status}): {rows} rows in ClickHouse, {} \
         records in the gzip files; {per:.0} bytes a row on the server's disk ({on_disk} \
         bytes), {:.0} bytes a record in the files; a day at 100 / 1,000 records a second: \
         {:.2} / {:.1} GB on the server",
        records,
        gz as f64 / records.max(1) as f64,
        per * 100.0 * 86400.0 / 1e9,
        per * 1000.0 * 86400.0 / 1e9,
    );
}

fn main() {
    // `cargo test --all-targets` (CI) runs this too, without `--bench`, in a debug build:
    // there it is a short check that every phase works, every record once, at a tenth of
    // the rate.
    let quick = !std::env::args().any(|a| a == "--bench");
    let rate: u64 = setting("RATE", if quick { 3_000 } else { 30_000 });
    let secs: f64 = setting("SECS", if quick { 2.0 } else { 60.0 });
    let stall_secs: f64 = setting("STALL_SECS", if quick { 2.0 } else { 20.0 });
    let Some(ch) = clickhouse::ChServer::start(None, None) else { return };
    let recs = fixture::records();
    let raw: usize = recs.iter().map(|r| r.0.len()).sum();
    println!(
        "{} records from the 20k fixture, {:.0} bytes each as JSON; {rate} records/s for {secs} s",
        recs.len(),
        raw as f64 / recs.len() as f64
    );
    for (compress, table) in [(true, "cgmon.flows_gz"), (false, "cgmon.flows_plain")] {
        let set =
            Setup { table, compress, rate, secs, spool_max: 256 << 20, stall: false, spool: false };
        let p = phase(&ch, &recs, &set);
        let n = p.handed as f64;
        println!(
            "gzip {compress}: handed {} in {:.1} s ({:.0}/s), hand-off full {}, sent {}, dropped {}, \
             table {} ({}); sink CPU {:.2} s = {:.2} µs/record ({:.1} % of a core); server CPU \
             {:.2} s = {:.2} µs/record ({:.1} % of a core); most waiting {} records / {} KiB; \
             RSS {} → {} MiB at most",
            p.handed,
            p.secs,
            n / p.secs,
            p.handoff_dropped,
            p.sent,
            p.dropped,
            p.stored,
            if p.stored == p.handed && p.dropped == 0 { "every record once" } else { "MISMATCH" },
            p.sink_cpu,
            p.sink_cpu * 1e6 / n,
            p.sink_cpu * 100.0 / p.secs,
            p.server_cpu,
            p.server_cpu * 1e6 / n,
            p.server_cpu * 100.0 / p.secs,
            p.most_waiting_records,
            p.most_waiting_bytes >> 10,
            p.rss_before_kb >> 10,
            p.rss_most_kb >> 10,
        );
        assert!(p.stored == p.handed && p.dropped == 0, "gzip {compress}: not every record once");
    }
    let live_secs: f64 = setting("LIVE_SECS", if quick { 2.0 } else { 30.0 });
    if live_secs > 0.0 {
        live(&ch, setting("LIVE_RATE", 200), live_secs);
    }
    if stall_secs > 0.0 {
        // Without a spool the queue is in memory, within --spool-max; with one, batches
        // wait on disk and memory stays flat however much waits.
        for (spool, bound) in [(true, 64u64 << 20), (false, 16 << 20)] {
            let set = Setup {
                table: "cgmon.flows_stall",
                compress: true,
                rate,
                secs: stall_secs,
                spool_max: bound,
                stall: true,
                spool,
            };
            let p = phase(&ch, &recs, &set);
            println!(
                "server stopped, --spool-max {}M{}: handed {}, sent {}, dropped {}; most \
                 waiting {} records / {} KiB; RSS {} MiB before, {} at half time, {} at the \
                 end, {} MiB at most",
                bound >> 20,
                if spool { " with --spool-dir" } else { ", no spool" },
                p.handed,
                p.sent,
                p.dropped,
                p.most_waiting_records,
                p.most_waiting_bytes >> 10,
                p.rss_before_kb >> 10,
                p.rss_middle_kb >> 10,
                p.rss_end_kb >> 10,
                p.rss_most_kb >> 10,
            );
        }
    }
}
