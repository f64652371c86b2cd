//! A fleet of N hosts into one ClickHouse 18.16 (issue 54): N senders, each the real sink
//! (`sink::spawn`, its two threads, its own `Host` and so its own `BatchId`s), handed R
//! records a second each, into a local server started here. It reports, for the steady
//! state (the last STEADY seconds):
//!
//! - inserts a second (the server's `InsertQuery` events), rows merged a second
//!   (`MergedRows`: 18.16 does not count merges themselves);
//! - active parts per partition, the peak over the run and the most in steady state
//!   (18.16 delays inserts past 150 in a partition and refuses them past 300);
//! - delayed and refused inserts (`DelayedInserts`, `RejectedInserts`);
//! - p99 of one batch's delivery (the sinks' shared histogram, to its bucket);
//! - the server's CPU and the simulator's (this process: the sinks and the feeder), each
//!   as a share of one core;
//! - records handed, stored, lost and stored twice, by counting the table per host.
//!
//! Settings, from the environment: `N` (default 10), `R` (10), `SECS` (900), `STEADY`
//! (600), `INTERVAL` (the sink's batch interval, default its default, 1s), `STAGGER` (1:
//! host i starts i/N of an interval in, as a fleet's monitors start at different times;
//! 0: all at once, so that every host cuts its batch in the same tick).
//!
//! ```sh
//! N=1000 SECS=900 STEADY=600 cargo bench --bench fleet
//! N=1000 INTERVAL=10s cargo bench --bench fleet
//! ```
//!
//! Needs `clickhouse-server` (Debian's package); the figures are in benches/RESULTS.md.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc::{SyncSender, sync_channel};
use std::time::{Duration, Instant};

use cgmon_rs::metrics::Metrics;
use cgmon_rs::sink::{self, SINK_CHANNEL_CAPACITY, SinkConfig, SinkMsg};

#[path = "../tests/common/clickhouse.rs"]
mod clickhouse;
#[path = "common/fixture.rs"]
#[allow(dead_code)] // bumped_where is for the tracker benches
mod fixture;
#[path = "common/procstat.rs"]
mod procstat;

fn setting<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name}={v}: not a number")),
        Err(_) => default,
    }
}

/// The server's cumulative events of interest (0 for one it has not counted yet).
fn events(ch: &clickhouse::ChServer) -> BTreeMap<String, u64> {
    let text = ch
        .query(
            "SELECT event, value FROM system.events WHERE event IN \
             ('InsertQuery', 'MergedRows', 'DelayedInserts', 'RejectedInserts') FORMAT TSV",
        )
        .unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.to_string(), v.trim().parse().unwrap_or(0)))
        .collect()
}

/// The most active parts in any partition of the table.
fn parts(ch: &clickhouse::ChServer) -> u64 {
    ch.query(
        "SELECT max(c) FROM (SELECT partition, count() AS c FROM system.parts \
         WHERE active AND database = 'cgmon' AND table = 'fleet' GROUP BY partition)",
    )
    .ok()
    .and_then(|s| s.trim().parse().ok())
    .unwrap_or(0)
}

/// One reading every 5 s.
struct Reading {
    at: f64,
    events: BTreeMap<String, u64>,
    parts: u64,
    server_cpu: f64,
    sim_cpu: f64,
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // `cargo test --all-targets`: a benchmark of minutes, not a test
    }
    let n: usize = setting("N", 10);
    let r: u64 = setting("R", 10);
    let secs: f64 = setting("SECS", 900.0);
    let steady = setting::<f64>("STEADY", 600.0).min(secs);
    let interval_text = std::env::var("INTERVAL").unwrap_or("1s".into());
    let interval = cgmon_rs::units::parse_duration(&interval_text)
        .unwrap_or_else(|e| panic!("INTERVAL={interval_text}: {e}"));
    let Some(ch) = clickhouse::ChServer::start(None, None) else { return };
    let pid = ch.pid().expect("the ClickHouse server just started has no pid");
    let recs = fixture::records();
    // One set of metrics per host, as each monitor has its own.
    let metrics: Vec<Arc<Metrics>> = (0..n).map(|_| Arc::new(Metrics::default())).collect();
    let mut senders: Vec<SyncSender<SinkMsg>> = Vec::new();
    let mut handles = Vec::new();
    for (i, m) in metrics.iter().enumerate() {
        let cfg = SinkConfig {
            target: sink::client::Target::parse(&ch.url(), "cgmon.fleet")
                .unwrap_or_else(|e| panic!("{}: {e}", ch.url())),
            host: format!("fleet-{i:04}"),
            limits: sink::batch::Limits { age: interval, ..sink::batch::Limits::default() },
            spool_dir: None,
            spool_max: 16 << 20,
            backoff: sink::delivery::Backoff::default(),
            compress: true,
            timeout: Duration::from_secs(30),
            warnings: Vec::new(),
        };
        let (tx, rx) = sync_channel(SINK_CHANNEL_CAPACITY);
        let h = sink::spawn(cfg, rx, m.clone(), Duration::from_secs(120));
        handles.push(h.unwrap_or_else(|e| panic!("sink of host {i}: {e}")));
        senders.push(tx);
    }
    println!(
        "fleet: N={n} hosts, R={r} records/s each, {secs:.0} s (steady: the last {steady:.0} s), \
         batch interval {interval:?}"
    );
    // Feeder: every 100 ms each host is handed its tenth of R (spread over the hosts so that
    // their batches are not cut in step).
    let step = Duration::from_millis(100);
    let mut handed = vec![0u64; n];
    let mut handoff_dropped = 0u64;
    let start = Instant::now();
    let me = std::process::id();
    let mut readings = Vec::new();
    let mut next_reading = start;
    let mut tick = 0u64;
    let stagger = if setting("STAGGER", 1) == 1 { (interval.as_millis() / 100) as u64 } else { 0 };
    while start.elapsed().as_secs_f64() < secs {
        for (i, tx) in senders.iter().enumerate() {
            // Host i starts its feed i/N of a batch interval in (a fleet's monitors start
            // at different times, so their batches are not cut in step); `STAGGER=0` starts
            // them all at once, the worst case.
            if tick < stagger * i as u64 / n as u64 {
                continue;
            }
            // R records a second: this tick's share, without drift.
            let due = (tick + 1) * r / 10 - tick * r / 10;
            let msg: SinkMsg =
                (0..due).map(|k| recs[(handed[i] + k) as usize % recs.len()].clone()).collect();
            match tx.try_send(msg) {
                Ok(()) => handed[i] += due,
                Err(_) => handoff_dropped += due,
            }
        }
        tick += 1;
        if Instant::now() >= next_reading {
            readings.push(Reading {
                at: start.elapsed().as_secs_f64(),
                events: events(&ch),
                parts: parts(&ch),
                server_cpu: procstat::proc_cpu_s(pid).unwrap_or(0.0),
                sim_cpu: procstat::proc_cpu_s(me).unwrap_or(0.0),
            });
            next_reading += Duration::from_secs(5);
        }
        std::thread::sleep((start + step * tick as u32).saturating_duration_since(Instant::now()));
    }
    drop(senders);
    for h in handles {
        let _ = h.join();
    }
    report(&ch, &readings, (secs, steady), &handed, handoff_dropped, &metrics);
}

fn report(
    ch: &clickhouse::ChServer,
    readings: &[Reading],
    (secs, steady): (f64, f64),
    handed: &[u64],
    handoff_dropped: u64,
    metrics: &[Arc<Metrics>],
) {
    let to = readings.last().expect("no reading taken: SECS must be over 0");
    let from = readings.iter().find(|x| x.at >= secs - steady).unwrap_or(&readings[0]);
    let span = (to.at - from.at).max(1.0);
    let d = |k: &str| to.events.get(k).unwrap_or(&0) - from.events.get(k).unwrap_or(&0);
    let peak = readings.iter().map(|x| x.parts).max().unwrap_or(0);
    let steady_most =
        readings.iter().filter(|x| x.at >= from.at).map(|x| x.parts).max().unwrap_or(0);
    let total = |k: &str| to.events.get(k).copied().unwrap_or(0);
    // Exactly once, by counting: each host's rows against what it was handed, and each
    // (host, cookie) once (a host's cookies are distinct within a run shorter than the
    // fixture's 20,000 records).
    let per_host: BTreeMap<String, (u64, u64)> = ch
        .query("SELECT Host, count(), uniqExact(Cookie) FROM cgmon.fleet GROUP BY Host FORMAT TSV")
        .unwrap_or_else(|e| panic!("counting the rows per host: {e}"))
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let n = |i: usize| -> u64 {
                let v = f.get(i).copied().unwrap_or_default();
                v.parse().unwrap_or_else(|_| panic!("a row count {v:?} in {l:?}"))
            };
            (f[0].to_string(), (n(1), n(2)))
        })
        .collect();
    let (mut lost, mut twice) = (0i64, 0u64);
    for (i, h) in handed.iter().enumerate() {
        let (rows, uniq) = per_host.get(&format!("fleet-{i:04}")).copied().unwrap_or((0, 0));
        lost += *h as i64 - uniq as i64;
        twice += rows - uniq;
    }
    // The hosts' delivery-time histograms, added bucket by bucket.
    let mut count = 0;
    let mut buckets: Vec<(f64, u64)> = Vec::new();
    for m in metrics {
        let (_, c, b) = m.sink.batch_seconds.snapshot();
        count += c;
        if buckets.is_empty() {
            buckets = b;
        } else {
            buckets.iter_mut().zip(b).for_each(|(x, y)| x.1 += y.1);
        }
    }
    let p99 = p99(count, &buckets);
    println!(
        "| N | inserts/s | rows merged/s | parts peak | parts steady (most) | delayed | refused | p99 insert | server CPU | simulator CPU | handed | lost | twice |"
    );
    println!(
        "| {} | {:.1} | {:.0} | {peak} | {steady_most} | {} | {} | {p99} | {:.1} % | {:.1} % | {} | {lost} | {twice} |",
        handed.len(),
        d("InsertQuery") as f64 / span,
        d("MergedRows") as f64 / span,
        total("DelayedInserts"),
        total("RejectedInserts"),
        (to.server_cpu - from.server_cpu) / span * 100.0,
        (to.sim_cpu - from.sim_cpu) / span * 100.0,
        handed.iter().sum::<u64>(),
    );
    println!(
        "hand-off drops {handoff_dropped}; the sinks' sent {} dropped {} failures {}",
        metrics.iter().map(|m| m.sink.sent.get()).sum::<u64>(),
        metrics.iter().map(|m| m.sink.dropped.get()).sum::<u64>(),
        metrics.iter().map(|m| m.sink.failures.get()).sum::<u64>()
    );
    let series: Vec<String> = readings.iter().map(|x| format!("{:.0}:{}", x.at, x.parts)).collect();
    println!("parts over time (s:most in a partition): {}", series.join(" "));
}

/// The upper bound of the bucket the 99th percentile falls in (`buckets`: each bucket's own
/// count, in order).
fn p99(count: u64, buckets: &[(f64, u64)]) -> String {
    let want = (count as f64 * 0.99).ceil() as u64;
    let mut seen = 0;
    for (le, c) in buckets {
        seen += c;
        if seen >= want {
            return if le.is_finite() { format!("≤ {le} s") } else { "> 5 s".into() };
        }
    }
    "none".into()
}
