//! The ClickHouse sink against the built binary: a fake server that fails on cue (here), and
//! Debian's real ClickHouse 18.16 (`real_server_*`, when it is installed; CI installs it).
//! Every record the files hold must reach the table exactly once.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::clickhouse::{ChServer, free_port};
use crate::monitor::Monitor;
use crate::program::{http_addr, http_get, metric};

const BIN: &str = env!("CARGO_BIN_EXE_cgmon-rs");

/// What the fake does with the next insert.
#[derive(Debug, Clone, Copy)]
pub enum Insert {
    /// Stores it and answers 200.
    Ok,
    /// Answers 500 without storing.
    Error500,
    /// Stores it, then closes the connection without a reply (the reply is lost).
    StoredReplyLost,
    /// Closes the connection before reading the body (nothing stored).
    ClosedMidBatch,
    /// Stores it after 2 s, then answers 200.
    Slow,
    /// Stores it only after `Fake::late` (a server or buffering proxy that stores late),
    /// then answers 200 (by then the client has long given up). While it waits, the
    /// insert is listed in `system.processes` under its query_id, as a server lists it.
    StoresLate,
    /// Answers 302 to another address (a proxy or an ingress), storing nothing.
    Redirect,
    /// Answers 500 `Code: 354` (the body does not inflate), storing nothing.
    Inflate,
}

/// A fake ClickHouse: `SELECT version()`, DDL, `system.columns`, inserts (gzip bodies)
/// into one table of rows kept in memory, and `count()` by `BatchId`.
#[derive(Default)]
pub struct Fake {
    /// Stored rows.
    pub rows: Vec<Value>,
    /// What the next inserts do; then `Ok`.
    pub script: VecDeque<Insert>,
    /// Inserts tried.
    pub inserts: usize,
    /// How late a `StoresLate` insert is stored.
    pub late: Duration,
    /// query_ids of inserts that are running (`StoresLate`).
    pub running: Vec<String>,
    /// The columns `system.columns` lists; the monitor's own table's when empty.
    pub columns: Vec<String>,
    /// Every request's target and headers, as received.
    pub requests: Vec<String>,
    /// Where a `Redirect` points.
    pub redirect_to: String,
    /// Lookups answered "still running" (a `StoresLate` insert had not landed yet).
    pub asked_while_running: usize,
}

/// Starts the fake on a loopback port; its base URL.
pub fn fake(f: Arc<Mutex<Fake>>) -> String {
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let url = format!("http://{}/", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let f = f.clone();
            std::thread::spawn(move || serve(c, &f));
        }
    });
    url
}

fn serve(c: TcpStream, f: &Mutex<Fake>) {
    let mut r = BufReader::new(c.try_clone().unwrap());
    let mut w = c;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let target = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        let mut len = 0usize;
        let mut gz = false;
        let mut seen = line.clone();
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            seen.push_str(&h);
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (k, v) = h.split_once(':').unwrap_or((h, ""));
            match k.to_ascii_lowercase().as_str() {
                "content-length" => len = v.trim().parse().unwrap(),
                "content-encoding" => gz = v.trim() == "gzip",
                _ => {}
            }
        }
        f.lock().unwrap().requests.push(seen);
        let param = |name: &str| {
            let (_, q) = target.split_once('?')?;
            q.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')).map(decode)
        };
        let query = param("query");
        let query_id = param("query_id").unwrap_or_default();
        let is_insert = query.as_deref().is_some_and(|q| q.starts_with("INSERT"));
        let step = if is_insert {
            let mut g = f.lock().unwrap();
            g.inserts += 1;
            g.script.pop_front().unwrap_or(Insert::Ok)
        } else {
            Insert::Ok
        };
        if matches!(step, Insert::ClosedMidBatch) {
            return; // the body unread: nothing stored
        }
        if matches!(step, Insert::Redirect) {
            let to = f.lock().unwrap().redirect_to.clone();
            let head = format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\n\r\n");
            let _ = w.write_all(head.as_bytes());
            return;
        }
        let mut body = vec![0u8; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        if gz {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&body[..]).read_to_end(&mut out).unwrap();
            body = out;
        }
        let (status, answer) = if is_insert {
            if matches!(step, Insert::Error500) {
                (500, "Code: 999, e.displayText() = fake failure".to_string())
            } else if matches!(step, Insert::Inflate) {
                (500, "Code: 354, e.displayText() = inflate failed: buffer error".to_string())
            } else {
                if matches!(step, Insert::Slow) {
                    std::thread::sleep(Duration::from_secs(2));
                }
                if matches!(step, Insert::StoresLate) {
                    let late = {
                        let mut g = f.lock().unwrap();
                        g.running.push(query_id.clone());
                        g.late
                    };
                    std::thread::sleep(late);
                    f.lock().unwrap().running.retain(|q| *q != query_id);
                }
                let mut g = f.lock().unwrap();
                for l in body.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                    g.rows.push(serde_json::from_slice(l).unwrap());
                }
                if matches!(step, Insert::StoredReplyLost) {
                    return;
                }
                (200, String::new())
            }
        } else {
            let q = String::from_utf8_lossy(&body).to_string();
            let mut g = f.lock().unwrap();
            let a = if q.starts_with("SELECT version()") {
                "18.16.1\n".to_string()
            } else if q.contains("system.columns") {
                if g.columns.is_empty() {
                    cgmon_rs::sink::ddl::names().map(|c| format!("{c}\n")).collect()
                } else {
                    g.columns.iter().map(|c| format!("{c}\n")).collect()
                }
            } else if q.contains("system.processes") {
                let id = q.split("query_id = '").nth(1).unwrap().split('\'').next().unwrap();
                let n = g.running.iter().filter(|r| *r == id).count();
                g.asked_while_running += usize::from(n > 0);
                format!("{n}\n")
            } else if let Some(id) = q.split("BatchId = '").nth(1) {
                let id = id.split('\'').next().unwrap();
                format!("{}\n", g.rows.iter().filter(|r| r["BatchId"] == id).count())
            } else {
                String::new() // DDL
            };
            (200, a)
        };
        let reason = if status == 200 { "OK" } else { "Internal Server Error" };
        let head =
            format!("HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\n\r\n", answer.len());
        if w.write_all(head.as_bytes()).and_then(|()| w.write_all(answer.as_bytes())).is_err() {
            return;
        }
    }
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(
                u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap(), 16).unwrap(),
            );
            i += 3;
        } else {
            out.push(if b[i] == b'+' { b' ' } else { b[i] });
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// Opens, exchanges and closes `n` loopback connections to `l`.
pub fn connections(l: &TcpListener, n: usize) {
    let a = l.local_addr().unwrap();
    for _ in 0..n {
        let mut c = TcpStream::connect(a).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(&[1u8; 3000]).unwrap();
        let mut b = [0u8; 3000];
        s.read_exact(&mut b).unwrap();
        s.write_all(&[2u8; 5000]).unwrap();
        drop(s);
        let mut rest = Vec::new();
        let _ = c.read_to_end(&mut rest);
    }
}

/// Cookies of every record in the gzip files of `dir`.
pub fn file_cookies(dir: &std::path::Path) -> Vec<u64> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if !p.to_string_lossy().ends_with(".gz") {
            continue;
        }
        let raw = std::fs::read(&p).unwrap();
        let mut text = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[..]).read_to_end(&mut text).unwrap();
        for r in serde_json::Deserializer::from_slice(&text).into_iter::<Value>() {
            v.push(r.unwrap()["Cookie"].as_u64().unwrap());
        }
    }
    v.sort_unstable();
    v
}

/// Waits up to `secs` for the fake to hold `n` rows (the test's own asserts say what then).
pub fn wait_rows(f: &Mutex<Fake>, n: usize, secs: u64) {
    let end = Instant::now() + Duration::from_secs(secs);
    while f.lock().unwrap().rows.len() < n && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits up to 30 s for the real server's `cgmon.flows` to hold `n` rows.
pub fn wait_table(ch: &ChServer, n: usize, m: &Monitor) {
    let end = Instant::now() + Duration::from_secs(30);
    while ch.query("SELECT count() FROM cgmon.flows").ok() != Some(format!("{n}\n")) {
        assert!(
            Instant::now() < end,
            "{n} rows: {:?}\n{}",
            ch.query("SELECT count() FROM cgmon.flows"),
            m.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// SIGTERM, and the exit: its status and the log.
pub fn stop(m: Monitor) -> (std::process::ExitStatus, String) {
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(30));
    (st, log)
}

pub fn sink_monitor(
    url: &str,
    dir: &std::path::Path,
    a: std::net::SocketAddr,
    extra: &[&str],
) -> Monitor {
    let mut c = Command::new(BIN);
    c.args(["-run-interval", "100ms", "-run-http-server", "127.0.0.1:0"]);
    c.args(["-writer-dir", dir.to_str().unwrap(), "-writer-file", "f.json.gz"]);
    c.args(["--clickhouse", url, "--host-name", "test-host"]);
    c.args(["--filter", &crate::program::port_filter(a)]);
    c.args(extra);
    Monitor::spawn(c)
}

#[test]
fn a_failing_server_gets_every_record_exactly_once() {
    use Insert::*;
    let f = Arc::new(Mutex::new(Fake {
        script: [Error500, ClosedMidBatch, StoredReplyLost, Slow, StoredReplyLost, Error500]
            .into_iter()
            .collect(),
        ..Fake::default()
    }));
    let url = fake(f.clone());
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let m = sink_monitor(&url, dir.path(), l.local_addr().unwrap(), &[]);
    // Batches of a second: several rounds, so that each failure meets a batch.
    for _ in 0..6 {
        connections(&l, 10);
        std::thread::sleep(Duration::from_millis(1200));
    }
    // Wait until the table holds what was written (the retries back off).
    let end = Instant::now() + Duration::from_secs(60);
    while f.lock().unwrap().rows.len() < 120 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(200));
    }
    let text = http_get(&http_addr(&m), "/metrics");
    let health = http_get(&http_addr(&m), "/healthz");
    let (st, log) = stop(m);
    assert!(st.success(), "{log}");
    let files = file_cookies(dir.path());
    assert_eq!(files.len(), 120, "{log}");
    let g = f.lock().unwrap();
    let mut table: Vec<u64> = g.rows.iter().map(|r| r["Cookie"].as_u64().unwrap()).collect();
    table.sort_unstable();
    assert_eq!(table, files, "every record once: nothing lost, nothing twice\n{log}");
    assert!(g.rows.iter().all(|r| r["Host"] == "test-host" && r["BatchId"].is_string()));
    assert!(g.inserts >= 7, "the failures were retried: {} inserts", g.inserts);
    assert_eq!(metric(&text, "cgmon_sink_records_total{result=\"sent\"}"), 120.0, "{text}");
    assert_eq!(metric(&text, "cgmon_sink_records_total{result=\"dropped\"}"), 0.0);
    assert!(metric(&text, "cgmon_sink_failures_total") >= 5.0, "{text}");
    assert!(metric(&text, "cgmon_sink_batches_found_stored_total") >= 2.0, "{text}");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    // One line when it starts failing and one when it recovers, not one per retry.
    let failing = log.matches("ClickHouse sink failing").count();
    let recovered = log.matches("delivering again").count();
    assert!(failing >= 1 && failing == recovered, "{failing} / {recovered}\n{log}");
}

#[test]
fn bad_sink_flags_are_one_line_and_exit_2() {
    for (args, says) in [
        (vec!["--clickhouse", "ftp://ch:8443/"], "unknown scheme"),
        (vec!["--clickhouse", "ch:8123"], "not a URL"),
        (vec!["--clickhouse", "http://u:hunter2@ch:8123/"], "password in the URL"),
        (vec!["--clickhouse", "http://ch/", "--clickhouse-table", "a;b"], "invalid table name"),
        (
            vec!["--clickhouse", "http://ch/", "--clickhouse-password-file", "/nonexistent/pw"],
            "--clickhouse-password-file",
        ),
        (vec!["--clickhouse", "http://ch/", "--spool-max", "1K"], "--spool-max"),
    ] {
        let out = Command::new(BIN).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}

#[test]
fn an_unreachable_server_at_start_is_not_fatal_and_the_spool_keeps_records_across_restarts() {
    // A port with nothing behind it: the records wait, spooled.
    let dead = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let dead_url = format!("http://{}/", dead.local_addr().unwrap());
    drop(dead);
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let at = l.local_addr().unwrap();
    let (dir, spool) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sp = spool.path().to_str().unwrap();
    let m = sink_monitor(
        &dead_url,
        dir.path(),
        at,
        &["--spool-dir", sp, "-run-shutdown-timeout", "4s"],
    );
    connections(&l, 20);
    std::thread::sleep(Duration::from_millis(2500));
    let health = http_get(&http_addr(&m), "/healthz");
    assert!(health.starts_with("HTTP/1.1 200") && health.contains("degraded"), "{health}");
    let (st, log) = stop(m);
    assert!(st.success(), "spooled, not dropped: exit 0\n{log}");
    assert!(log.contains("stay in the spool"), "{log}");
    let spooled = std::fs::read_dir(spool.path()).unwrap().count();
    assert!(spooled >= 1, "{log}");
    // The next run, with the server up, sends them first, each once.
    let f = Arc::new(Mutex::new(Fake::default()));
    let url = fake(f.clone());
    let m = sink_monitor(&url, dir.path(), at, &["--spool-dir", sp]);
    connections(&l, 5);
    let end = Instant::now() + Duration::from_secs(30);
    while f.lock().unwrap().rows.len() < 50 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_millis(500));
    let (st, log) = stop(m);
    assert!(st.success(), "{log}");
    let mut table: Vec<u64> =
        f.lock().unwrap().rows.iter().map(|r| r["Cookie"].as_u64().unwrap()).collect();
    table.sort_unstable();
    assert_eq!(table, file_cookies(dir.path()), "both runs' records, once each\n{log}");
    assert_eq!(std::fs::read_dir(spool.path()).unwrap().count(), 0, "the spool emptied");
}

/// Past `--spool-max`, records are dropped: counted, `/healthz` 503 while it lasts (and not
/// before), and exit status 1; the queue stays within the bound.
#[test]
fn records_dropped_past_the_bound_make_healthz_503_and_the_exit_status_1() {
    let dead = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let dead_url = format!("http://{}/", dead.local_addr().unwrap());
    drop(dead);
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let args = ["--spool-max", "1M", "-run-shutdown-timeout", "2s"];
    let m = sink_monitor(&dead_url, dir.path(), l.local_addr().unwrap(), &args);
    connections(&l, 50);
    std::thread::sleep(Duration::from_millis(1500));
    let health = http_get(&http_addr(&m), "/healthz");
    assert!(health.starts_with("HTTP/1.1 200") && health.contains("degraded"), "{health}");
    // About 120 bytes a compressed record: 1 MiB holds some 9,000.
    let mut text = String::new();
    for _ in 0..30 {
        connections(&l, 1000);
        std::thread::sleep(Duration::from_millis(1200));
        text = http_get(&http_addr(&m), "/metrics");
        if metric(&text, "cgmon_sink_records_total{result=\"dropped\"}") > 0.0 {
            break;
        }
    }
    assert!(metric(&text, "cgmon_sink_records_total{result=\"dropped\"}") > 0.0, "{text}");
    assert!(metric(&text, "cgmon_sink_waiting_bytes") <= f64::from(1u32 << 20), "{text}");
    let health = http_get(&http_addr(&m), "/healthz");
    assert!(health.starts_with("HTTP/1.1 503") && health.contains("dropping"), "{health}");
    let (st, log) = stop(m);
    assert_eq!(st.code(), Some(1), "records were dropped\n{log}");
    assert!(log.contains("not delivered to ClickHouse and are lost"), "{log}");
    assert_eq!(log.matches("ClickHouse sink failing").count(), 1, "one line, not one a retry");
}

/// A table the user made that does not fit the records (here `Verdict` a number): the
/// server refuses every insert; the records wait (spooled), the failure is logged once and
/// counted, and once the table is fixed every record lands once.
#[test]
fn a_table_that_does_not_fit_keeps_the_records_until_it_is_fixed() {
    let Some(ch) = ChServer::start(None, None) else { return };
    ch.query("CREATE DATABASE cgmon").unwrap();
    ch.query(
        "CREATE TABLE cgmon.flows (Host String, BatchId String, Cookie UInt64, \
         BytesAcked UInt64, Verdict UInt8, EndTime DateTime, SrcIP String, SrcPort UInt16, \
         DstIP String, DstPort UInt16) ENGINE = MergeTree \
         PARTITION BY toDate(EndTime) ORDER BY Host",
    )
    .unwrap();
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let at = l.local_addr().unwrap();
    let (dir, spool) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sp = spool.path().to_str().unwrap();
    let m = sink_monitor(&ch.url(), dir.path(), at, &["--spool-dir", sp]);
    connections(&l, 20);
    std::thread::sleep(Duration::from_millis(2500));
    let text = http_get(&http_addr(&m), "/metrics");
    assert_eq!(metric(&text, "cgmon_sink_failing"), 1.0, "{text}");
    assert!(metric(&text, "cgmon_sink_failures_total") >= 1.0, "{text}");
    assert!(metric(&text, "cgmon_sink_waiting_records") >= 40.0, "{text}");
    assert!(std::fs::read_dir(spool.path()).unwrap().count() >= 1, "spooled");
    let health = http_get(&http_addr(&m), "/healthz");
    assert!(health.starts_with("HTTP/1.1 200") && health.contains("degraded"), "{health}");
    ch.query("ALTER TABLE cgmon.flows MODIFY COLUMN Verdict String").unwrap();
    let end = Instant::now() + Duration::from_secs(60);
    while ch.query("SELECT count() FROM cgmon.flows").ok().as_deref() != Some("40\n") {
        assert!(Instant::now() < end, "40 rows after the fix\n{}", m.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let (st, log) = stop(m);
    assert!(st.success(), "{log}");
    assert_eq!(log.matches("ClickHouse sink failing").count(), 1, "logged once\n{log}");
    assert!(log.contains("delivering again"), "{log}");
    assert_eq!(table_rows(&ch, "cgmon.flows"), file_rows(dir.path(), "test-host"));
}

/// (Cookie, BytesAcked, Verdict, Host) of every record in the gzip files, as the table's
/// TSV gives them, sorted.
fn file_rows(dir: &std::path::Path, host: &str) -> Vec<String> {
    file_rows_of(dir, host, false)
}

/// As [`file_rows`]; with `killed`, a file a SIGKILL cut short gives the whole lines it
/// had flushed.
fn file_rows_of(dir: &std::path::Path, host: &str, killed: bool) -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if !p.to_string_lossy().ends_with(".gz") {
            continue;
        }
        let raw = std::fs::read(&p).unwrap();
        let mut text = Vec::new();
        let mut d = flate2::read::MultiGzDecoder::new(&raw[..]);
        if killed {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = d.read(&mut buf) {
                text.extend_from_slice(&buf[..n]);
            }
            text.truncate(text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1));
        } else {
            d.read_to_end(&mut text).unwrap();
        }
        for r in serde_json::Deserializer::from_slice(&text).into_iter::<Value>() {
            let r = r.unwrap();
            let verdict = r["Diagnosis"]["Verdict"].as_str().unwrap_or("");
            v.push(format!("{}\t{}\t{verdict}\t{host}", r["Cookie"], r["BytesAcked"]));
        }
    }
    v.sort();
    v
}

fn table_rows(ch: &ChServer, table: &str) -> Vec<String> {
    let t = ch
        .query(&format!("SELECT Cookie, BytesAcked, Verdict, Host FROM {table} FORMAT TSV"))
        .unwrap();
    let mut v: Vec<String> = t.lines().map(str::to_string).collect();
    v.sort();
    v
}

/// The real server: killed mid-run and restarted, then the monitor stopped while the
/// server is down and restarted with the same spool. The table holds exactly the records
/// the files hold, each once, with its verdict and host.
#[test]
fn real_server_killed_and_restarted_holds_every_record_once() {
    let Some(mut ch) = ChServer::start(None, None) else { return };
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let at = l.local_addr().unwrap();
    let (dir, spool) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sp = spool.path().to_str().unwrap().to_string();
    let args = ["--spool-dir", sp.as_str(), "-run-shutdown-timeout", "4s"];
    let m = sink_monitor(&ch.url(), dir.path(), at, &args);
    connections(&l, 30);
    std::thread::sleep(Duration::from_millis(1500));
    ch.kill();
    connections(&l, 30);
    std::thread::sleep(Duration::from_millis(1500));
    ch.restart();
    connections(&l, 30);
    // Everything so far lands.
    let end = Instant::now() + Duration::from_secs(60);
    while ch.query("SELECT count() FROM cgmon.flows").ok().as_deref() != Some("180\n") {
        assert!(
            Instant::now() < end,
            "180 rows: {:?}\n{}",
            ch.query("SELECT count() FROM cgmon.flows"),
            m.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Down again, and the monitor stops: what it holds stays in the spool.
    ch.kill();
    connections(&l, 20);
    std::thread::sleep(Duration::from_millis(1500));
    let (st, log) = stop(m);
    assert!(st.success(), "{log}");
    assert!(std::fs::read_dir(spool.path()).unwrap().count() >= 1, "{log}");
    // Server and monitor back: the spool goes first.
    ch.restart();
    let m = sink_monitor(&ch.url(), dir.path(), at, &args);
    connections(&l, 10);
    let end = Instant::now() + Duration::from_secs(60);
    while ch.query("SELECT count() FROM cgmon.flows").ok().as_deref() != Some("240\n") {
        assert!(
            Instant::now() < end,
            "240 rows: {:?}\n{}",
            ch.query("SELECT count() FROM cgmon.flows"),
            m.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (st, log) = stop(m);
    assert!(st.success(), "{log}");
    let files = file_rows(dir.path(), "test-host");
    assert_eq!(files.len(), 240);
    assert_eq!(table_rows(&ch, "cgmon.flows"), files, "exactly the files' records");
    let sums = ch
        .query("SELECT count(), sum(BytesAcked), uniqExact(Cookie) FROM cgmon.flows FORMAT TSV")
        .unwrap();
    let bytes: u64 =
        files.iter().map(|r| r.split('\t').nth(1).unwrap().parse::<u64>().unwrap()).sum();
    assert_eq!(sums, format!("240\t{bytes}\t240\n"));
    // A quantile of RTT, as the table and the files give it.
    let mut rtts: Vec<f64> = Vec::new();
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let raw = std::fs::read(e.unwrap().path()).unwrap();
        let mut text = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[..]).read_to_end(&mut text).unwrap();
        for r in serde_json::Deserializer::from_slice(&text).into_iter::<Value>() {
            if let Some(v) = r.unwrap()["MinRTTObservedms"].as_f64() {
                rtts.push(v);
            }
        }
    }
    rtts.sort_by(f64::total_cmp);
    let median = rtts[(rtts.len() / 2).min(rtts.len() - 1)];
    let q = ch.query("SELECT quantileExact(0.5)(MinRTTObservedms) FROM cgmon.flows FORMAT TSV");
    assert_eq!(q.unwrap().trim().parse::<f64>().unwrap(), median, "median of MinRTTObservedms");
}

/// Rows of the batch being filled, in the spool's `.filling` files.
fn filling_rows(spool: &std::path::Path) -> usize {
    std::fs::read_dir(spool)
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            p.to_string_lossy().ends_with(".filling").then(|| std::fs::read(&p).unwrap_or_default())
        })
        .map(|raw| raw.iter().filter(|&&b| b == b'\n').count().saturating_sub(1))
        .sum()
}

/// A fleet's interval (`--clickhouse-batch-interval 60s`) with `--spool-dir`: the batch
/// being filled reaches the disk as its rows come, so a SIGKILL well inside the minute loses
/// none of the records the files had; the next run sends that batch first, each record
/// once, into the real server.
#[test]
fn a_long_batch_interval_killed_mid_batch_loses_nothing_with_a_spool() {
    let Some(ch) = ChServer::start(None, None) else { return };
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let at = l.local_addr().unwrap();
    let (dir, dir2, spool) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sp = spool.path().to_str().unwrap();
    let args = ["--spool-dir", sp, "--clickhouse-batch-interval", "60s"];
    let m = sink_monitor(&ch.url(), dir.path(), at, &args);
    connections(&l, 40);
    let end = Instant::now() + Duration::from_secs(30);
    while file_rows_of(dir.path(), "test-host", true).len() < 80 || filling_rows(spool.path()) < 80
    {
        assert!(Instant::now() < end, "{} rows filling\n{}", filling_rows(spool.path()), m.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let text = http_get(&http_addr(&m), "/metrics");
    assert_eq!(metric(&text, "cgmon_sink_records_total{result=\"sent\"}"), 0.0, "not cut yet");
    m.signal(libc::SIGKILL);
    let _ = m.wait(Duration::from_secs(10));
    // The next run, at the default interval, into other files.
    let m = sink_monitor(&ch.url(), dir2.path(), at, &["--spool-dir", sp]);
    connections(&l, 10);
    wait_table(&ch, 100, &m);
    let (st, log) = stop(m);
    assert!(st.success(), "{log}");
    assert!(log.contains("earlier run was filling"), "{log}");
    let mut files = file_rows_of(dir.path(), "test-host", true);
    files.extend(file_rows(dir2.path(), "test-host"));
    files.sort();
    assert_eq!(files.len(), 100, "both ends of 50 connections");
    assert_eq!(table_rows(&ch, "cgmon.flows"), files, "exactly the files' records, once");
    assert_eq!(std::fs::read_dir(spool.path()).unwrap().count(), 0, "the spool emptied");
}

/// Part pressure (issue 54): a table that refuses inserts past 8 active parts (18.16's
/// `Code: 252`, as past 300 by default), merges stopped. (Below 5 parts 18.16's merge
/// selector merges nothing, so a bound of 4 would never clear.) The refusals stretch this host's
/// batch interval, counted; once merges run again, the interval comes back toward the
/// flag's and every record lands once.
#[test]
fn part_pressure_stretches_the_interval_and_every_record_lands_once() {
    let Some(ch) = ChServer::start(None, None) else { return };
    let ddl = Command::new(BIN).args(["clickhouse-ddl", "--server-version", "18.16"]).output();
    let ddl = String::from_utf8(ddl.unwrap().stdout).unwrap();
    let code: String = ddl
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .map(|l| l.to_string() + "\n")
        .collect();
    for stmt in code.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let stmt = match stmt.starts_with("CREATE TABLE") {
            true => format!("{stmt} SETTINGS parts_to_throw_insert = 8, parts_to_delay_insert = 7"),
            false => stmt.to_string(),
        };
        ch.query(&stmt).unwrap();
    }
    ch.query("SYSTEM STOP MERGES").unwrap();
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let args = ["--clickhouse-batch-interval", "300ms", "-run-shutdown-timeout", "40s"];
    let m = sink_monitor(&ch.url(), dir.path(), l.local_addr().unwrap(), &args);
    let gauge = "cgmon_sink_batch_interval_seconds";
    let refusals = "cgmon_sink_part_pressure_total";
    let end = Instant::now() + Duration::from_secs(60);
    let mut text = http_get(&http_addr(&m), "/metrics");
    assert_eq!(metric(&text, gauge), 0.3, "the flag's at first");
    while metric(&text, refusals) < 2.0 || metric(&text, gauge) < 1.2 {
        assert!(Instant::now() < end, "{text}\n{}", m.log());
        connections(&l, 2);
        std::thread::sleep(Duration::from_millis(100));
        text = http_get(&http_addr(&m), "/metrics");
    }
    let stretched = metric(&text, gauge);
    let parts = ch.query(
        "SELECT count() FROM system.parts WHERE database = 'cgmon' AND table = 'flows' AND active",
    );
    assert!(parts.unwrap().trim().parse::<u32>().unwrap() <= 8, "the table's bound held");
    assert_eq!(m.log().matches("ClickHouse has too many parts").count() as f64, {
        // One line each time the interval doubled: 0.3 s to the stretched one.
        (stretched / 0.3).log2().round()
    });
    // Merges again: the queue drains, and calm brings the interval back down.
    ch.query("SYSTEM START MERGES").unwrap();
    let end = Instant::now() + Duration::from_secs(120);
    while metric(&text, gauge) >= stretched {
        assert!(Instant::now() < end, "{text}\n{}", m.log());
        connections(&l, 1);
        std::thread::sleep(Duration::from_millis(200));
        text = http_get(&http_addr(&m), "/metrics");
    }
    let (st, log) = stop(m);
    assert!(st.success(), "{log}");
    let files = file_rows(dir.path(), "test-host");
    assert_eq!(table_rows(&ch, "cgmon.flows"), files, "every record once");
}

/// Two servers as two shards behind a `Distributed` table: the totals through it are the
/// files' (the insert is synchronous, so the lost-reply check sees what landed).
#[test]
fn real_servers_as_two_shards_behind_a_distributed_table() {
    let (ta, tb) = (free_port(), free_port());
    let Some(a) = ChServer::start(Some((ta, tb)), Some(ta)) else { return };
    let Some(b) = ChServer::start(Some((ta, tb)), Some(tb)) else { return };
    // What `cgmon-rs clickhouse-ddl --cluster` prints for 18.16 (examples/clickhouse/
    // cluster.sql is the same for current servers), run on each server: the shard's table
    // and the Distributed table over both (the cluster named cgmon_fleet in each config).
    let out = Command::new(BIN)
        .args(["clickhouse-ddl", "--server-version", "18.16", "--cluster", "cgmon_fleet"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let text: Vec<&str> = text.lines().filter(|l| !l.trim_start().starts_with("--")).collect();
    let text = text.join("\n");
    for s in [&a, &b] {
        for st in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            s.query(st).unwrap();
        }
    }
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let m = sink_monitor(&a.url(), dir.path(), l.local_addr().unwrap(), &[]);
    // Rounds a batch apart: batches are the shard key.
    for _ in 0..4 {
        connections(&l, 10);
        std::thread::sleep(Duration::from_millis(1200));
    }
    let end = Instant::now() + Duration::from_secs(60);
    while a.query("SELECT count() FROM cgmon.flows").ok().as_deref() != Some("80\n") {
        assert!(
            Instant::now() < end,
            "{:?}\n{}",
            a.query("SELECT count() FROM cgmon.flows"),
            m.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (st, log) = stop(m);
    assert!(st.success(), "{log}");
    let files = file_rows(dir.path(), "test-host");
    assert_eq!(table_rows(&a, "cgmon.flows"), files);
    assert_eq!(table_rows(&b, "cgmon.flows"), files, "the same through either server");
    // Each batch lies whole on the shard its id's hash names (shard 0 the first listed):
    // which shard that is, is the hash's business, so the test asks the server rather
    // than hoping the batches fall on both.
    let by_batch = |s: &ChServer| -> Vec<(String, u64, u64)> {
        let q = "SELECT BatchId, cityHash64(BatchId) % 2, count() FROM cgmon.flows_local \
                 GROUP BY BatchId ORDER BY BatchId";
        s.query(q)
            .unwrap()
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                (f[0].to_string(), f[1].parse().unwrap(), f[2].parse().unwrap())
            })
            .collect()
    };
    let (on_a, on_b) = (by_batch(&a), by_batch(&b));
    assert!(on_a.iter().all(|(_, shard, _)| *shard == 0), "{on_a:?}");
    assert!(on_b.iter().all(|(_, shard, _)| *shard == 1), "{on_b:?}");
    assert!(on_a.iter().all(|(id, ..)| on_b.iter().all(|(o, ..)| o != id)), "a batch split");
    let rows: u64 = on_a.iter().chain(&on_b).map(|(.., n)| n).sum();
    assert_eq!(rows, 80, "split over the shards: {on_a:?} + {on_b:?}");
}

/// Loopback traffic for the shipped queries to answer: 30 short exchanges and four flows
/// that live across several samples (so that time-weighted questions have flows with a
/// Duration).
/// [`QUERY_RECORDS`] records for the fleet's questions: short connections, longer ones,
/// and, once the listener is closed, connects to its port refused (non-blocking, so that
/// the kernel keeps the port and the monitor's filter matches them).
fn query_traffic(l: TcpListener) {
    connections(&l, 30);
    let a = l.local_addr().unwrap();
    for _ in 0..4 {
        let mut c = TcpStream::connect(a).unwrap();
        let (mut s, _) = l.accept().unwrap();
        for _ in 0..6 {
            c.write_all(&[3u8; 20_000]).unwrap();
            let mut b = vec![0u8; 20_000];
            s.read_exact(&mut b).unwrap();
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    drop(l);
    for _ in 0..3 {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.set_nonblocking(true).unwrap();
        let _ = s.connect(&a.into());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The records [`query_traffic`] makes: both ends of 34 connections, and 3 refused.
const QUERY_RECORDS: usize = 71;

/// Runs tests/clickhouse/examples.py with `backend` (`--chdb ROWS` or `--server URL`) over
/// the records in `dir`; its output, after asserting that every query and dashboard
/// query passed with rows to check.
fn run_examples(dir: &std::path::Path, backend: [&str; 2]) -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("python3")
        .arg(format!("{root}/tests/clickhouse/examples.py"))
        .args(["--files", dir.to_str().unwrap(), "--host", "test-host"])
        .args(backend)
        .arg(format!("{root}/examples/clickhouse"))
        .arg(format!("{root}/examples/grafana/cgmon-fleet.json"))
        .output()
        .unwrap();
    let (so, se) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{so}\n{se}");
    let queries = std::fs::read_dir(format!("{root}/examples/clickhouse/queries")).unwrap().count();
    assert!(so.contains("ok the table holds the files'"), "{so}");
    assert!(so.contains(&format!("{queries} passed, 0 failed")), "{so}");
    // The fleet dashboard's 8 panels and 2 variables, with All and with one of each.
    assert!(so.contains("dashboard cgmon-rs-fleet: 20 passed, 0 failed"), "{so}");
    // Every question has an answer in these rows, not only an empty one that matches.
    // (With one host and one service selected, a dashboard's query need only run.)
    for line in so.lines().filter(|l| l.starts_with("ok ") && !l.contains("(one each)")) {
        assert!(!line.ends_with(": 0 rows"), "{line}");
    }
    so.into_owned()
}

/// Every query in examples/clickhouse/ and every query of the fleet dashboard runs with
/// chdb (current ClickHouse SQL) on the table `cgmon-rs clickhouse-ddl` prints for a
/// current server (examples/clickhouse/flows.sql), loaded with the rows this monitor's sink
/// sent, and each answer is checked against the same question answered from the monitor's
/// gzip files (tests/clickhouse/examples.py). Needs PyPI's chdb-core (CI installs it);
/// elsewhere it skips.
#[test]
fn the_shipped_queries_run_on_current_clickhouse_with_the_right_answers() {
    let has_chdb = Command::new("python3")
        .args(["-c", "import chdb"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_chdb {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "CI=true: chdb-core is required"
        );
        eprintln!("skipped: python3 cannot import chdb (pip install chdb-core)");
        return;
    }
    let f = Arc::new(Mutex::new(Fake::default()));
    let url = fake(f.clone());
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let m = sink_monitor(&url, dir.path(), l.local_addr().unwrap(), &[]);
    query_traffic(l);
    wait_rows(&f, QUERY_RECORDS, 30);
    let (st, log) = stop(m);
    assert!(st.success(), "{log}");
    let rows = dir.path().join("rows.ndjson.txt");
    let text: String = f.lock().unwrap().rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&rows, text).unwrap();
    let so = run_examples(dir.path(), ["--chdb", rows.to_str().unwrap()]);
    eprintln!("{so}");
}

/// The same on a real ClickHouse 18.16, on the table the monitor created there itself: every
/// shipped query and dashboard query runs, with answers checked against the gzip files.
#[test]
fn the_shipped_queries_run_on_the_monitors_own_table_on_clickhouse_18_16() {
    let Some(ch) = ChServer::start(None, None) else { return };
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let m = sink_monitor(&ch.url(), dir.path(), l.local_addr().unwrap(), &[]);
    query_traffic(l);
    let end = Instant::now() + Duration::from_secs(30);
    let count = || {
        ch.query("SELECT count() FROM cgmon.flows")
            .ok()
            .and_then(|t| t.trim().parse::<usize>().ok())
    };
    while count().unwrap_or(0) < QUERY_RECORDS && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (st, log) = stop(m);
    assert!(st.success(), "{log}");
    assert_eq!(count(), Some(file_cookies(dir.path()).len()), "{log}");
    let so = run_examples(dir.path(), ["--server", &ch.url()]);
    eprintln!("{so}");
}

/// `examples/clickhouse/flows.sql`, `flows-18.16.sql` and `cluster.sql` are what
/// `cgmon-rs clickhouse-ddl` prints, byte for byte: the files people run are the table the
/// monitor makes.
#[test]
fn the_shipped_ddl_files_are_the_ddl_commands_output() {
    let root = env!("CARGO_MANIFEST_DIR");
    for (file, args) in [
        ("flows.sql", &[][..]),
        ("flows-18.16.sql", &["--server-version", "18.16"][..]),
        ("cluster.sql", &["--cluster", "cgmon_fleet"][..]),
    ] {
        let out = Command::new(BIN).arg("clickhouse-ddl").args(args).output().unwrap();
        assert!(out.status.success());
        let kept = std::fs::read(format!("{root}/examples/clickhouse/{file}")).unwrap();
        assert!(
            kept == out.stdout,
            "examples/clickhouse/{file} is not `cgmon-rs clickhouse-ddl {}`: regenerate it",
            args.join(" ")
        );
    }
    // examples/clickhouse/README.md lists every query, and counts them right.
    let readme = std::fs::read_to_string(format!("{root}/examples/clickhouse/README.md")).unwrap();
    let files: Vec<String> = std::fs::read_dir(format!("{root}/examples/clickhouse/queries"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for f in &files {
        assert!(readme.contains(&format!("| `{f}` |")), "{f} is not in the README's table");
    }
    let words = [
        "", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve", "thirteen", "fourteen", "fifteen",
    ];
    assert!(readme.contains(&format!("{} fleet questions", words[files.len()])), "the count");
    let out = Command::new(BIN).args(["clickhouse-ddl", "--server-version", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// docs/fleet.md's "Fleet" block, run as written against a real ClickHouse 18.16: its monitor
/// line (the server's address and the spool's path put in, and a run of a few seconds) and
/// its clickhouse-client line (the native port put in). The user `cgmon` with the README's
/// password exists on the server, so the credentials are the README's own.
#[test]
fn the_readmes_fleet_example_runs() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/fleet.md")).unwrap();
    let block = readme.split("## Fleet: every record in ClickHouse").nth(1).unwrap();
    let block = block.split("```sh\n").nth(1).unwrap().split("```").next().unwrap();
    let lines: Vec<String> = block
        .replace("\\\n", " ")
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), 2, "a monitor line and a query line: {lines:?}");
    let Some(ch) = ChServer::start_with_user("cgmon", "secret") else { return };
    if Command::new("clickhouse-client").arg("--version").output().is_err() {
        assert!(std::env::var("CI").is_err(), "CI=true: clickhouse-client is required");
        eprintln!("skipped: no clickhouse-client");
        return;
    }
    let spool = tempfile::tempdir().unwrap();
    let monitor = lines[0]
        .replace("cgmon-rs ", &format!("{BIN} "))
        .replace("ch.example:8123", &format!("127.0.0.1:{}", ch.http))
        .replace("/var/lib/cgmon-rs/spool", spool.path().join("spool").to_str().unwrap());
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let run = std::thread::spawn(move || {
        Command::new("sh")
            .arg("-c")
            .arg(format!("{monitor} -run-duration 6s -run-interval 100ms >/dev/null"))
            .output()
            .unwrap()
    });
    std::thread::sleep(Duration::from_secs(2));
    connections(&l, 20);
    let out = run.join().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let n: u64 = ch
        .query("SELECT count() FROM cgmon.flows WHERE DstPort = 0 OR 1")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(n >= 40, "the monitor's records landed: {n}");
    let query =
        lines[1].replace("--host ch.example", &format!("--host 127.0.0.1 --port {}", ch.tcp));
    let out = Command::new("sh")
        .arg("-c")
        .arg(&query)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{query}: {}", String::from_utf8_lossy(&out.stderr));
    // Service, Host, Verdict, flows, pct: the monitor's host, every flow counted.
    let host = cgmon_rs::cli::hostname();
    let flows: u64 = text
        .lines()
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .filter(|f| f.len() == 5 && f[1] == host)
        .map(|f| f[3].parse::<u64>().unwrap())
        .sum();
    assert_eq!(flows, n, "{text}");
}

/// A table the previous release made on 18.16 (flat columns only: no RTTSummary, no
/// FinalState, `DateTime` without a zone, ordered by host, service and time) keeps taking
/// records: at first contact the monitor adds the columns it lacks, says once which, and
/// every record lands once with its summaries.
#[test]
fn a_table_the_previous_release_made_gains_the_new_columns() {
    let Some(ch) = ChServer::start(None, None) else { return };
    let old_columns = "StartTime DateTime, EndTime DateTime, Duration Int64, Samples UInt32, \
        Partial UInt8, MinRTTKernelms Nullable(Float64), MinRTTObservedms Nullable(Float64), \
        TotalRetransmits UInt32, BytesAcked UInt64, SendThroughputMbps Float64, \
        RecvThroughputMbps Float64, BytesSent UInt64, BytesRetrans UInt64, BytesReceived UInt64, \
        EndReason String, Close String, CongestionControl String, Family String, Cookie UInt64, \
        Service String, DestService String, Comm String, Pid UInt32, Host String, \
        BatchId String, Verdict String, Cause String, Finding String, \
        ReceiverWindowPct Float64, SendBufferPct Float64, NetworkPct Float64, \
        ApplicationPct Float64, SrcIP String, SrcPort UInt16, DstIP String, DstPort UInt16";
    ch.query("CREATE DATABASE cgmon").unwrap();
    ch.query(&format!(
        "CREATE TABLE cgmon.flows ({old_columns}) ENGINE = MergeTree \
         PARTITION BY toDate(EndTime) ORDER BY (Host, Service, EndTime)"
    ))
    .unwrap();
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let m = sink_monitor(&ch.url(), dir.path(), l.local_addr().unwrap(), &[]);
    connections(&l, 10);
    wait_table(&ch, 20, &m);
    let (st, log) = stop(m);
    assert!(st.success(), "{log}");
    let added: Vec<&str> =
        log.lines().filter(|l| l.contains("columns this release writes added")).collect();
    assert_eq!(added.len(), 1, "said once: {log}");
    assert!(added[0].contains("RTTSummary") && added[0].contains("FinalState"), "{}", added[0]);
    assert!(!added[0].contains("Cookie,"), "only the missing: {}", added[0]);
    let stored = ch
        .query("SELECT Cookie, length(RTTSummary), Service FROM cgmon.flows ORDER BY Cookie FORMAT TSV")
        .unwrap();
    let rows: Vec<Vec<&str>> = stored.lines().map(|l| l.split('\t').collect()).collect();
    let cookies: Vec<u64> = rows.iter().map(|r| r[0].parse().unwrap()).collect();
    assert_eq!(cookies, file_cookies(dir.path()), "every record once");
    // Every summary whole; every service named or `unknown`, never blank.
    assert!(rows.iter().all(|r| r[1] == "7" && !r[2].is_empty()), "{stored}");
}

/// Issue 54's fleet, small: ten hosts, each the real sink with its own `Host` (so its own
/// `BatchId`s), ten records a second each into one 18.16 server, then every host's rows
/// counted: each record stored, and stored once. (The figures for 10, 100 and 1,000 hosts
/// come from `benches/fleet.rs`.)
#[test]
fn a_fleet_of_ten_hosts_stores_every_record_exactly_once() {
    use cgmon_rs::sink::{self, SinkConfig};
    let Some(ch) = ChServer::start(None, None) else { return };
    let (hosts, per_host) = (10u64, 60u64);
    // One set of metrics per host, as each monitor has its own.
    let metrics: Vec<_> =
        (0..hosts).map(|_| Arc::new(cgmon_rs::metrics::Metrics::default())).collect();
    let mut senders = Vec::new();
    let mut threads = Vec::new();
    for h in 0..hosts {
        let cfg = SinkConfig {
            target: sink::client::Target::parse(&ch.url(), "cgmon.fleet").unwrap(),
            host: format!("fleet-{h:02}"),
            limits: sink::batch::Limits { age: Duration::from_millis(500), ..Default::default() },
            spool_dir: None,
            spool_max: 16 << 20,
            backoff: sink::delivery::Backoff::default(),
            compress: true,
            timeout: Duration::from_secs(30),
            warnings: Vec::new(),
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(sink::SINK_CHANNEL_CAPACITY);
        let m = metrics[h as usize].clone();
        threads.push(sink::spawn(cfg, rx, m, Duration::from_secs(60)).unwrap());
        senders.push(tx);
    }
    // Ten records a second per host, a tenth of a second apart, for six seconds; each
    // record a flow of its own (its cookie).
    let acfg = cgmon_rs::analysis::AnalyzerConfig::default();
    let start = Instant::now();
    for k in 0..per_host {
        for (h, tx) in senders.iter().enumerate() {
            let cookie = 1 + h as u64 * 1_000_000 + k;
            let s = cgmon_rs::testkit::SockBuilder::new(cookie, 40000, 443).rtt_us(900).cwnd(10);
            let mut e = cgmon_rs::tracker::testing::ended_flow(&[(1_000_000_000, s)]);
            let r = cgmon_rs::analysis::analyze(&mut e, &acfg);
            tx.send(vec![(serde_json::to_vec(&r).unwrap(), r)]).unwrap();
        }
        let next = start + Duration::from_millis(100 * (k + 1));
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    drop(senders);
    for t in threads {
        t.join().unwrap().unwrap();
    }
    let rows = ch
        .query("SELECT Host, count(), uniqExact(Cookie) FROM cgmon.fleet GROUP BY Host ORDER BY Host FORMAT TSV")
        .unwrap();
    let want: String =
        (0..hosts).map(|h| format!("fleet-{h:02}\t{per_host}\t{per_host}\n")).collect();
    assert_eq!(rows, want, "every host's records, each once");
    assert!(metrics.iter().all(|m| m.sink.sent.get() == per_host && m.sink.dropped.get() == 0));
}
