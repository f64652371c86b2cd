//! The sink's defects an adversarial audit found, each against the built binary and a fake
//! server that behaves as the defect needs (stores late, redirects, refuses), or a small
//! full disk. Each test failed before its fix.

use std::io::Read;
use std::net::TcpListener;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::monitor::Monitor;
use crate::program::{SmallDisk, http_addr, http_get, metric};
use crate::sink::{
    Fake, Insert, connections, fake, file_cookies, sink_monitor, stop, wait_rows, wait_table,
};

const BIN: &str = env!("CARGO_BIN_EXE_cgmon-rs");

/// Cookies of the records in the spool's batch files (`.batch`), gzip or plain.
fn spool_cookies(dir: &std::path::Path) -> Vec<u64> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "batch") {
            continue;
        }
        let raw = std::fs::read(&p).unwrap();
        let body_at = raw.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(1).unwrap().0 + 1;
        let mut text = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[body_at..]).read_to_end(&mut text).unwrap();
        for l in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let r: serde_json::Value = serde_json::from_slice(l).unwrap();
            v.push(r["Cookie"].as_u64().unwrap());
        }
    }
    v.sort_unstable();
    v
}

/// A URL nothing listens at.
fn dead_url() -> String {
    let dead = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    format!("http://{}/", dead.local_addr().unwrap())
}

/// Values that can never work are usage errors: one line, exit 2, no secret echoed, and
/// nothing written.
#[test]
fn statically_bad_sink_values_are_usage_errors_that_echo_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let zero = "/dev/zero".to_string();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let open = open.to_str().unwrap().to_string();
    for (args, says) in [
        (vec!["--clickhouse", "http://::1:18123/"], "must be in brackets"),
        (vec!["--clickhouse", "http://a b:18123/"], "bad host name"),
        (vec!["--clickhouse", "http://host:0/"], "bad port"),
        (vec!["--clickhouse", "http://u%01@host/"], "control character"),
        (vec!["--clickhouse", "http://u:S3c/r3t@host:8123/"], "password in the URL"),
        (vec!["--clickhouse", "http://u:1234/x@host/"], "password in the URL"),
        (vec!["--clickhouse", "http://host/?password=S3cr3t"], "password in the URL"),
        (vec!["--clickhouse", "http://host/", "--host-name", ""], "--host-name"),
        (vec!["--clickhouse", "http://host/", "--host-name", "web-1\n"], "control character"),
        (vec!["--clickhouse", "http://host/", "--clickhouse-password-file", &zero], "no line end"),
        (vec!["--clickhouse", "http://host/", "--spool-dir", &open], "writable by other users"),
    ] {
        let out = Command::new(BIN)
            .args(&args)
            .args(["-writer-dir", dir.path().to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        for secret in ["S3c", "r3t", "1234"] {
            assert!(!err.contains(secret), "{args:?}: {err}");
        }
    }
    let written: Vec<_> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(written, ["open"], "nothing written on a usage error");
}

/// A spool on a disk that is full for a while, during an outage: batches wait in memory,
/// are spooled once the disk has room again, and the next run delivers every record once.
/// Then a disk that stays full to the stop: what could not be spooled is counted lost,
/// logged with its count, and the exit status is 1 (it once said "stay in the spool" and
/// exited 0 with an empty spool). Needs root (a tmpfs); under CI=true it must run.
#[test]
fn a_spool_that_cannot_be_written_loses_nothing_silently() {
    let Some(disk) = SmallDisk::mount() else { return };
    let spool = disk.mnt.join("spool");
    std::fs::DirBuilder::new().create(&spool).unwrap();
    let filler = disk.fill();
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let at = l.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sp = spool.to_str().unwrap().to_string();
    let url = dead_url();
    let m =
        sink_monitor(&url, dir.path(), at, &["--spool-dir", &sp, "-run-shutdown-timeout", "2s"]);
    connections(&l, 20);
    m.wait_log("cannot spool batches", Duration::from_secs(20));
    // Room again: the batches held in memory reach the disk.
    std::fs::remove_file(&filler).unwrap();
    m.wait_log("spooling again", Duration::from_secs(20));
    connections(&l, 10);
    std::thread::sleep(Duration::from_millis(2500));
    let (st, log) = stop(m);
    assert!(st.success(), "{log}");
    let files = file_cookies(dir.path());
    assert_eq!(files.len(), 60, "{log}");
    assert_eq!(spool_cookies(&spool), files, "every record in the spool\n{log}");
    // The next run, with a server: every record once.
    let f = Arc::new(Mutex::new(Fake::default()));
    let live = fake(f.clone());
    let m = sink_monitor(&live, dir.path(), at, &["--spool-dir", &sp]);
    wait_rows(&f, 60, 30);
    let (st, log) = stop(m);
    assert!(st.success(), "{log}");
    let mut table: Vec<u64> =
        f.lock().unwrap().rows.iter().map(|r| r["Cookie"].as_u64().unwrap()).collect();
    table.sort_unstable();
    assert_eq!(table, files, "exactly once");
    // Full to the end: the loss is counted and said.
    let filler = disk.fill();
    let dir = tempfile::tempdir().unwrap();
    let m =
        sink_monitor(&url, dir.path(), at, &["--spool-dir", &sp, "-run-shutdown-timeout", "2s"]);
    connections(&l, 10);
    m.wait_log("cannot spool batches", Duration::from_secs(20));
    let (st, log) = stop(m);
    assert_eq!(st.code(), Some(1), "{log}");
    assert!(log.contains("records neither delivered nor spooled by the stop are lost"), "{log}");
    assert!(log.contains("records=20"), "{log}");
    assert!(!log.contains("stay in the spool"), "{log}");
    drop(filler);
}

/// A server that stores an insert only long after the client gave up: the retry waits while
/// the insert still runs there (system.processes lists its query_id), then finds it stored
/// and does not send it again. Before, the count taken at once said 0 and both landed.
#[test]
fn an_insert_stored_late_is_not_stored_twice() {
    let f = Arc::new(Mutex::new(Fake {
        script: [Insert::StoresLate].into_iter().collect(),
        late: Duration::from_secs(4),
        ..Fake::default()
    }));
    let url = fake(f.clone());
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let m =
        sink_monitor(&url, dir.path(), l.local_addr().unwrap(), &["--clickhouse-timeout", "1s"]);
    connections(&l, 10);
    std::thread::sleep(Duration::from_millis(1500));
    connections(&l, 10);
    wait_rows(&f, 40, 40);
    std::thread::sleep(Duration::from_millis(500));
    let (st, log) = stop(m);
    assert!(st.success(), "{log}");
    let g = f.lock().unwrap();
    let mut table: Vec<u64> = g.rows.iter().map(|r| r["Cookie"].as_u64().unwrap()).collect();
    table.sort_unstable();
    assert_eq!(table, file_cookies(dir.path()), "every record once\n{log}");
    assert!(g.asked_while_running >= 1, "the retry waited for the insert\n{log}");
    // Every insert names its batch in its query_id.
    let ids = g.requests.iter().filter(|r| r.contains("query_id=cgmon%3A")).count();
    assert!(ids >= 2, "{:?}", g.requests);
}

/// A 302 (a proxy or an ingress) is not followed: the password does not go to the host it
/// names, nothing is counted sent that was not stored, and the batch is delivered once the
/// server answers again.
#[test]
fn a_redirect_is_refused_and_the_password_stays_home() {
    let thief = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    thief.set_nonblocking(true).unwrap();
    let f = Arc::new(Mutex::new(Fake {
        script: [Insert::Redirect, Insert::Redirect].into_iter().collect(),
        redirect_to: format!("http://{}/steal", thief.local_addr().unwrap()),
        ..Fake::default()
    }));
    let url = fake(f.clone());
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut c = Command::new(BIN);
    c.args(["-run-interval", "100ms", "-run-http-server", "127.0.0.1:0"]);
    c.args(["-writer-dir", dir.path().to_str().unwrap(), "-writer-file", "f.json.gz"]);
    c.args(["--clickhouse", &url, "--host-name", "test-host"]);
    c.args(["--filter", &crate::program::port_filter(l.local_addr().unwrap())]);
    c.env("CGMON_CLICKHOUSE_PASSWORD", "pa55word");
    let m = Monitor::spawn(c);
    connections(&l, 10);
    wait_rows(&f, 20, 30);
    let (st, log) = stop(m);
    assert!(st.success(), "{log}");
    assert!(thief.accept().is_err(), "the redirect was followed");
    assert!(log.contains("a redirect to") && log.contains("not followed"), "{log}");
    assert_eq!(f.lock().unwrap().rows.len(), 20, "{log}");
    assert!(f.lock().unwrap().requests.iter().any(|r| r.contains("pa55word")), "sent home");
    assert!(!log.contains("pa55word"));
}

/// At trace level (any spelling: --log-level, RUST_LOG, the HTTP client's own target), no
/// log line holds the password, which every request carries in a header.
#[test]
fn the_password_is_in_no_log_line_at_trace_level() {
    for (flag, rust_log) in [
        (Some("trace"), None),
        (None, Some("trace")),
        (None, Some("info,ureq_proto=trace,ureq=trace")),
    ] {
        let f = Arc::new(Mutex::new(Fake::default()));
        let url = fake(f.clone());
        let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "Tr4ceS3cret\n").unwrap();
        let mut c = Command::new(BIN);
        c.args(["-run-interval", "100ms", "-writer-dir", dir.path().to_str().unwrap()]);
        c.args(["--clickhouse", &url, "--host-name", "test-host"]);
        c.args(["--clickhouse-password-file", pw.to_str().unwrap()]);
        c.args(["--filter", &crate::program::port_filter(l.local_addr().unwrap())]);
        if let Some(level) = flag {
            c.args(["--log-level", level]);
        }
        c.env_remove("RUST_LOG");
        if let Some(v) = rust_log {
            c.env("RUST_LOG", v);
        }
        let m = Monitor::spawn(c);
        connections(&l, 5);
        wait_rows(&f, 10, 20);
        let (st, log) = stop(m);
        assert!(st.success(), "{log}");
        assert_eq!(f.lock().unwrap().rows.len(), 10, "{log}");
        if rust_log.is_none_or(|v| v == "trace") {
            assert!(log.contains("TRACE") || log.contains("DEBUG"), "{flag:?} {rust_log:?}");
        }
        assert!(!log.contains("Tr4ceS3cret"), "{flag:?} {rust_log:?}: the password logged");
        assert!(f.lock().unwrap().requests.iter().any(|r| r.contains("Tr4ceS3cret")));
    }
}

/// A table that shares none of a flow's identifying columns (a typo in --clickhouse-table
/// landing on another application's table) is not written to: one error names the table
/// and the columns, /metrics says failing and /healthz degraded, records wait; once the
/// table has them, the records land.
#[test]
fn a_table_without_the_flows_columns_is_not_written_to() {
    let f =
        Arc::new(Mutex::new(Fake { columns: vec!["id".into(), "name".into()], ..Fake::default() }));
    let url = fake(f.clone());
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let m = sink_monitor(&url, dir.path(), l.local_addr().unwrap(), &[]);
    connections(&l, 10);
    m.wait_log("lacks the columns", Duration::from_secs(20));
    let text = http_get(&http_addr(&m), "/metrics");
    assert_eq!(metric(&text, "cgmon_sink_failing"), 1.0, "{text}");
    assert_eq!(metric(&text, "cgmon_sink_records_total{result=\"sent\"}"), 0.0, "{text}");
    let health = http_get(&http_addr(&m), "/healthz");
    assert!(health.contains("degraded"), "{health}");
    assert_eq!(f.lock().unwrap().inserts, 0, "never inserted into");
    f.lock().unwrap().columns.clear(); // now the monitor's own table's
    wait_rows(&f, 20, 30);
    let (st, log) = stop(m);
    assert!(st.success(), "{log}");
    assert_eq!(f.lock().unwrap().rows.len(), 20, "{log}");
    let line = log.lines().find(|l| l.contains("lacks the columns")).unwrap();
    assert!(
        line.contains("cgmon.flows")
            && line.contains("EndTime, Host, SrcIP, SrcPort, DstIP, DstPort, Cookie"),
        "{line}"
    );
}

/// One corrupt batch file in the spool (cut short) does not hold up delivery: it is set
/// aside (`.rejected`, kept), its records counted lost, and the records behind it are
/// delivered; a head that claims more rows than the body holds is counted by the body.
/// Spool files are the monitor's alone (0600 in a 0700 directory).
#[test]
fn a_broken_spool_file_is_set_aside_and_the_rest_flow_on() {
    let spool = tempfile::tempdir().unwrap();
    let sp = spool.path().to_str().unwrap().to_string();
    // A whole batch whose head claims 9 rows for 2, and a truncated one after it.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, b"{\"Cookie\":1,\"Host\":\"old\",\"BatchId\":\"old/1/0\",\"EndTime\":\"2026-11-27T00:00:00Z\",\"SrcIP\":\"a\",\"SrcPort\":1,\"DstIP\":\"b\",\"DstPort\":2}\n{\"Cookie\":2,\"Host\":\"old\",\"BatchId\":\"old/1/0\",\"EndTime\":\"2026-11-27T00:00:00Z\",\"SrcIP\":\"a\",\"SrcPort\":1,\"DstIP\":\"b\",\"DstPort\":2}\n").unwrap();
    let body = gz.finish().unwrap();
    let mut whole = b"old/1/0\n9\n".to_vec();
    whole.extend_from_slice(&body);
    std::fs::write(spool.path().join("0000000000000000.batch"), whole).unwrap();
    let mut cut = b"old/1/1\n5\n".to_vec();
    cut.extend_from_slice(&body[..body.len() - 8]);
    std::fs::write(spool.path().join("0000000000000001.batch"), cut).unwrap();
    let f = Arc::new(Mutex::new(Fake::default()));
    let url = fake(f.clone());
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let m = sink_monitor(&url, dir.path(), l.local_addr().unwrap(), &["--spool-dir", &sp]);
    connections(&l, 10);
    wait_rows(&f, 22, 30);
    // The server holds the rows before the monitor reads its answer and counts them sent
    // (a CI run read the counter at 2 in between).
    let end = std::time::Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = http_get(&http_addr(&m), "/metrics");
        if metric(&text, "cgmon_sink_records_total{result=\"sent\"}") >= 22.0
            || std::time::Instant::now() > end
        {
            break text;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (st, log) = stop(m);
    assert_eq!(st.code(), Some(1), "the cut batch's records are lost, and said so\n{log}");
    assert_eq!(f.lock().unwrap().rows.len(), 22, "2 old and 20 new\n{log}");
    assert_eq!(metric(&text, "cgmon_sink_records_total{result=\"sent\"}"), 22.0, "{text}");
    assert_eq!(metric(&text, "cgmon_sink_records_total{result=\"dropped\"}"), 5.0, "{text}");
    assert!(spool.path().join("0000000000000001.rejected").exists(), "{log}");
    assert!(log.contains("counted by what it holds"), "{log}");
}

/// The spool holds every record's peers and programs: the directory the monitor makes is
/// 0700 and its batch files 0600 (they were 0755 and 0644, readable by every local user).
#[test]
fn spool_files_are_private() {
    use std::os::unix::fs::MetadataExt;
    let top = tempfile::tempdir().unwrap();
    let spool = top.path().join("made/spool");
    let sp = spool.to_str().unwrap().to_string();
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = dead_url();
    let m = sink_monitor(&url, dir.path(), l.local_addr().unwrap(), &["--spool-dir", &sp]);
    connections(&l, 5);
    let end = Instant::now() + Duration::from_secs(20);
    while spool_cookies(&spool).len() < 10 {
        assert!(Instant::now() < end, "spooled\n{}", m.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(std::fs::metadata(&spool).unwrap().mode() & 0o777, 0o700);
    for e in std::fs::read_dir(&spool).unwrap() {
        let p = e.unwrap().path();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600, "{}", p.display());
    }
    let (st, log) = stop(m);
    assert!(st.success(), "{log}");
}

/// A batch the server refuses because its body does not inflate (`Code: 354`) is not sent
/// forever: it is set aside and counted, and the batches behind it are delivered.
#[test]
fn a_batch_the_server_cannot_inflate_does_not_stop_delivery() {
    let f = Arc::new(Mutex::new(Fake {
        script: [Insert::Inflate].into_iter().collect(),
        ..Fake::default()
    }));
    let url = fake(f.clone());
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let m = sink_monitor(&url, dir.path(), l.local_addr().unwrap(), &[]);
    connections(&l, 5);
    std::thread::sleep(Duration::from_millis(1500));
    connections(&l, 5);
    wait_rows(&f, 10, 20);
    let (st, log) = stop(m);
    assert_eq!(st.code(), Some(1), "{log}");
    assert_eq!(f.lock().unwrap().rows.len(), 10, "the second batch\n{log}");
    assert!(log.contains("set aside") && log.contains("10 records were not delivered"), "{log}");
}

/// A --spool-dir that cannot be had is a usage error found before any output file is
/// touched: the last run's r.json is neither rotated aside nor replaced by an empty one.
#[test]
fn a_bad_spool_dir_touches_no_output_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("r.json"), "{\"Cookie\":1}\n").unwrap();
    std::fs::write(dir.path().join("plain"), "").unwrap();
    let under_a_file = dir.path().join("plain/spool");
    for spool in [under_a_file.to_str().unwrap(), "/proc/cgmon-rs-spool"] {
        let out = Command::new(BIN)
            .args(["-writer-dir", dir.path().to_str().unwrap(), "-writer-file", "r.json"])
            .args(["--clickhouse", "http://127.0.0.1:9/", "--spool-dir", spool])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{spool}: {err}");
        assert!(err.contains("--spool-dir"), "{err}");
        let mut names: Vec<_> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["plain", "r.json"], "{spool}: {err}");
        assert_eq!(std::fs::read_to_string(dir.path().join("r.json")).unwrap(), "{\"Cookie\":1}\n");
    }
}

/// A CA, and a certificate it signed for localhost and 127.0.0.1, made with openssl in
/// `dir`: (ca.crt, server.crt, server.key).
fn make_ca(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl").current_dir(dir).args(args).output().unwrap();
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=cgmon-rs test CA",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    std::fs::write(dir.join("san.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    ]);
    (dir.join("ca.crt"), dir.join("server.crt"), dir.join("server.key"))
}

/// https:// to a real ClickHouse 18.16 whose certificate a CA the test made signed: with
/// that CA (--clickhouse-ca) every record lands once; with the system's roots, which do not
/// know it, nothing is sent and the sink says why.
#[test]
fn https_to_a_real_server_verifies_its_certificate() {
    if Command::new("openssl").arg("version").output().is_err() {
        assert!(std::env::var("CI").is_err(), "CI=true: openssl is required");
        eprintln!("skipped: no openssl to make a CA");
        return;
    }
    let pki = tempfile::tempdir().unwrap();
    let (ca, cert, key) = make_ca(pki.path());
    let Some(ch) = crate::clickhouse::ChServer::start_tls(&cert, &key) else { return };
    let url = format!("https://127.0.0.1:{}/", ch.https.unwrap());
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let at = l.local_addr().unwrap();
    // The system's roots: refused, and said so.
    let dir = tempfile::tempdir().unwrap();
    let m = sink_monitor(&url, dir.path(), at, &[]);
    connections(&l, 5);
    m.wait_log("ClickHouse sink failing", Duration::from_secs(20));
    let (st, log) = stop(m);
    assert_eq!(st.code(), Some(1), "{log}");
    let line = log.lines().find(|l| l.contains("ClickHouse sink failing")).unwrap();
    assert!(
        line.to_lowercase().contains("certificate") || line.contains("UnknownIssuer"),
        "{line}"
    );
    assert!(ch.query("EXISTS TABLE cgmon.flows").unwrap_or_default().trim() != "1", "nothing sent");
    // Its CA: every record once.
    let dir = tempfile::tempdir().unwrap();
    let m = sink_monitor(&url, dir.path(), at, &["--clickhouse-ca", ca.to_str().unwrap()]);
    connections(&l, 10);
    wait_table(&ch, 20, &m);
    let (st, log) = stop(m);
    assert!(st.success(), "{log}");
    let stored = ch.query("SELECT Cookie FROM cgmon.flows ORDER BY Cookie FORMAT TSV").unwrap();
    let stored: Vec<u64> = stored.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(stored, file_cookies(dir.path()));
    // --clickhouse-ca with http:// says it has nothing to verify.
    let out = Command::new(BIN)
        .args(["--clickhouse", &ch.url(), "--clickhouse-ca", ca.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs an https://"));
}
