//! What the lookup after a lost reply costs on a large table (issue 41, defect 12): the
//! monitor's own 18.16 table filled with ROWS rows (default 100 million: 100 hosts, seven
//! services, 30 days, batches of 4,000), then the same batch looked up the old way (by
//! `BatchId` alone, which reads the whole column) and the way the sink asks now
//! ([`cgmon_rs::sink::client::lookup_sql`]: the batch's host and `EndTime` range first),
//! RUNS times each, alternately. Prints each one's median time and the rows the server read
//! (`system.query_log`).
//!
//! ```sh
//! cargo bench --bench lookup              # ROWS=100000000 RUNS=5
//! ROWS=20000000 cargo bench --bench lookup
//! ```
//! Under `cargo test` (no `--bench`) it runs on 200,000 rows as a check that it works.
//! Needs `clickhouse-server` (Debian's package).

use std::time::Instant;

use cgmon_rs::sink::batch::Batch;
use cgmon_rs::sink::client::lookup_sql;
use cgmon_rs::sink::ddl::{Version, create_table};

#[path = "../tests/common/clickhouse.rs"]
mod clickhouse;

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let rows = setting("ROWS", if quick { 200_000 } else { 100_000_000 });
    let runs = setting("RUNS", if quick { 1 } else { 5 });
    let Some(ch) = clickhouse::ChServer::start(None, None) else { return };
    ch.query("CREATE DATABASE cgmon").unwrap();
    ch.query(&create_table(Version(18, 16), "cgmon", "flows")).unwrap();
    // 100 hosts; a host's rows 40 a second of its own clock over 30 days back from now;
    // batches of 4,000 rows of one host.
    let span = 30 * 86_400u64;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let t0 = now - span;
    let per_host = rows / 100;
    // Row n is host n % 100's (n / 100)th: rows come in time order, so each chunk below
    // fills a partition or two, as a fleet's inserts do.
    let fill = format!(
        "INSERT INTO cgmon.flows (EndTime, Host, Service, BatchId, Cookie, SrcIP, SrcPort, DstIP, \
         DstPort) SELECT toDateTime({t0} + intDiv(intDiv(number, 100) * {span}, {per_host})), \
         concat('host-', toString(number % 100)), \
         concat('svc-', toString(intDiv(number, 100) % 7)), \
         concat('host-', toString(number % 100), '/1/', toString(intDiv(intDiv(number, 100), 4000))), \
         number, '10.0.0.1', 1000, '10.0.0.2', 80 \
         FROM (SELECT number + OFFSET AS number FROM numbers(CHUNK))"
    );
    let t = Instant::now();
    // In chunks the test harness's 10 s read timeout takes.
    let chunk = 1_000_000u64.min(rows);
    for off in (0..rows).step_by(chunk as usize) {
        let n = chunk.min(rows - off);
        ch.query(&fill.replace("OFFSET", &off.to_string()).replace("CHUNK", &n.to_string()))
            .unwrap();
    }
    // Merged as a month-old table would be (OPTIMIZE may take longer than the harness's
    // read timeout: parts merge on their own meanwhile).
    ch.query("OPTIMIZE TABLE cgmon.flows").ok();
    println!("{rows} rows in {:.1} s", t.elapsed().as_secs_f64());
    // A batch in the middle of host-42's month: its rows' EndTime range, as the sink keeps it.
    let host = 42u64;
    let seq = per_host / 4000 / 2;
    let id = format!("host-{host}/1/{seq}");
    let first = seq * 4000;
    let lo = t0 + first * span / per_host;
    let hi = t0 + (first + 3999).min(per_host - 1) * span / per_host;
    let b =
        Batch { id: id.clone(), rows: Vec::new(), count: 4000, ends: Some((lo as i64, hi as i64)) };
    let new = lookup_sql("cgmon", "flows", &b).replace(" FORMAT TSV", "");
    let old = format!("SELECT count() FROM cgmon.flows WHERE BatchId = '{id}'");
    let mut times = [Vec::new(), Vec::new()];
    let mut rows_read = [0u64; 2];
    for run in 0..runs {
        for (k, q) in [&old, &new].into_iter().enumerate() {
            let tag = format!("/* lookup {k} {run} */");
            let t = Instant::now();
            let n = ch.query(&format!("{q} {tag}")).unwrap();
            times[k].push(t.elapsed().as_secs_f64());
            if run == 0 {
                rows_read[k] = read_bound(&ch, q);
            }
            let want = (per_host - first).min(4000);
            assert_eq!(n.trim().parse::<u64>().unwrap(), want, "{q}");
        }
    }
    for (k, name) in [(0, "by BatchId alone (before)"), (1, "by host and EndTime first (now)")] {
        let read = rows_read[k];
        let t = &mut times[k];
        t.sort_by(f64::total_cmp);
        println!(
            "{name}: median {:.4} s over {runs} runs ({:.4}-{:.4}), reads at most {} rows",
            t[t.len() / 2],
            t[0],
            t[t.len() - 1],
            read
        );
    }
}

/// The fewest rows, as a power of two from 8,192, within which the server runs `sql`
/// (`max_rows_to_read`; 18.16 sends no progress headers for a query this short, nor a row
/// count in its reply).
fn read_bound(ch: &clickhouse::ChServer, sql: &str) -> u64 {
    let mut bound = 8192u64;
    while ch.query(&format!("{sql} SETTINGS max_rows_to_read = {bound}")).is_err() {
        bound *= 2;
    }
    bound
}
