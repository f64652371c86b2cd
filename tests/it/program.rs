//! End to end: the built `cgmon-rs` binary, run as a user runs it, against loopback flows
//! each test makes itself. Every monitor is filtered to its test's own listening port, so
//! tests running in parallel do not see each other's flows.

use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cgmon_rs::testkit::Pair;
use serde_json::Value;

use crate::monitor::Monitor;

pub const BIN: &str = env!("CARGO_BIN_EXE_cgmon-rs");

pub fn monitor(args: &[&str]) -> Monitor {
    let mut c = Command::new(BIN);
    c.args(args);
    Monitor::spawn(c)
}

/// A monitor writing `file` in `dir`, sampling every 50 ms the flows of port `a`.
fn file_monitor(dir: &Path, file: &str, a: SocketAddr, extra: &[&str]) -> Monitor {
    let filter = port_filter(a);
    let mut args = vec![
        "-run-interval",
        "50ms",
        "-writer-dir",
        dir.to_str().unwrap(),
        "-writer-file",
        file,
        "--filter",
        &filter,
    ];
    args.extend_from_slice(extra);
    monitor(&args)
}

/// A loopback address no other test listens on: 127.<pid>.<n>, a new `n` each call.
///
/// Tests run in parallel and the monitor dumps the whole host. A filter by port alone
/// picks up any other socket that happens to hold the same number on another address (a
/// listener bound to port 0, a client's ephemeral port, a TIME-WAIT socket), and CI saw
/// such a stray record fail a count. An address of the test's own, named in the filter,
/// rules that out. Clients connecting to it still leave from 127.0.0.1 (the preferred
/// source of the loopback route).
pub fn own_address() -> std::net::IpAddr {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let pid = std::process::id();
    let [_, _, hi, lo] = n.to_be_bytes();
    std::net::Ipv4Addr::new(127, (1 + pid % 250) as u8, hi, lo).into()
}

/// A listener on [`own_address`], port chosen by the kernel.
pub fn listener() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind((own_address(), 0)).unwrap();
    let a = l.local_addr().unwrap();
    (l, a)
}

/// The flows of the listener at `a`, both ends, by address and port: a [`listener`]'s
/// address is the test's own, so no other test's socket matches.
pub fn port_filter(a: SocketAddr) -> String {
    format!("(src {0} and sport {1}) or (dst {0} and dport {1})", a.ip(), a.port())
}

/// Opens a connection, sends `n` bytes each way, and closes it.
fn exchange_and_close(l: &TcpListener, a: SocketAddr, n: usize) {
    let mut p = Pair::connect(l, a).unwrap();
    p.exchange(n).unwrap();
    drop(p);
}

fn by_cookie(v: &[Value]) -> Vec<u64> {
    let mut c: Vec<u64> = v.iter().map(|r| r["Cookie"].as_u64().unwrap()).collect();
    c.sort_unstable();
    c
}

/// Every JSON object in a file, gunzipped when its name ends in .gz, and whether the gzip
/// stream was complete.
fn read_records(path: &Path) -> (Vec<Value>, bool) {
    let raw = std::fs::read(path).unwrap();
    let (text, complete) = if path.extension().is_some_and(|e| e == "gz") {
        let mut d = flate2::read::MultiGzDecoder::new(&raw[..]);
        let mut t = Vec::new();
        let ok = d.read_to_end(&mut t).is_ok();
        (t, ok)
    } else {
        (raw, true)
    };
    let v = serde_json::Deserializer::from_slice(&text)
        .into_iter::<Value>()
        .map_while(Result::ok)
        .collect();
    (v, complete)
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    v.sort();
    v
}

/// `gzip -t` (where the tool exists; under CI=true it must); flate2's complete-stream check
/// always.
fn assert_valid_gzip(p: &Path) {
    let (_, complete) = read_records(p);
    assert!(complete, "{} is not a complete gzip stream", p.display());
    match Command::new("gzip").arg("-t").arg(p).status() {
        Ok(st) => assert!(st.success(), "gzip -t {} failed", p.display()),
        // CI installs gzip: there a missing one fails rather than skips.
        Err(e) => assert!(std::env::var("CI").is_err(), "CI=true: gzip -t: {e}"),
    }
}

#[test]
fn stdout_gives_one_json_line_per_flow_as_it_ends() {
    let (l, a) = listener();
    let dir = tempfile::tempdir().unwrap();
    let samples = dir.path().join("samples.ndjson");
    let m = monitor(&[
        "-run-interval",
        "50ms",
        "--samples-out",
        samples.to_str().unwrap(),
        "--filter",
        &port_filter(a),
    ]);
    exchange_and_close(&l, a, 100_000);
    // Both ends' records arrive while the monitor runs: flushed per record.
    let recs = m.records(2, Duration::from_secs(10));
    let client = recs.iter().find(|r| r["ID"]["DstPort"] == a.port()).unwrap();
    assert_eq!(client["BytesAcked"], 100_000 + 2, "exact, from the destroy event: {client}");
    assert_eq!(client["EndReason"], "destroyed");
    assert_eq!(client["Partial"], false);
    m.signal(libc::SIGTERM);
    let (st, log, rest) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{st:?}\n{log}");
    assert!(rest.is_empty(), "nothing partial is written without -writer-partial: {rest:?}");
    assert!(log.contains("successful termination"), "{log}");
    // The samples stream holds the client's retained samples under its cookie.
    let (lines, _) = read_records(&samples);
    let cookie = client["Cookie"].as_u64().unwrap();
    let mine = lines.iter().filter(|s| s["Cookie"] == cookie).count();
    assert_eq!(mine as u64, client["Samples"].as_u64().unwrap(), "{lines:?}");
}

#[test]
fn records_match_the_json_schema() {
    let (l, a) = listener();
    let schema: Value =
        serde_json::from_str(include_str!("../../schema/flow-record.schema.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let sample_schema: Value =
        serde_json::from_str(include_str!("../../schema/sample.schema.json")).unwrap();
    let sample_validator = jsonschema::validator_for(&sample_schema).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let samples = dir.path().join("s.ndjson");
    let m = monitor(&[
        "-run-interval",
        "20ms",
        "--samples-out",
        samples.to_str().unwrap(),
        "--filter",
        &port_filter(a),
        "-writer-partial",
        // Every tick a full dump: beside another test's 20,000 sockets the budget spaces
        // full dumps over a second apart, and the short bulk flow, never found hot, had
        // only its destroy event (no Correlations, which need two samples).
        "--cpu-budget",
        "0",
    ]);
    // One bulk flow that closes, one still open at shutdown (partial, EndReason shutdown).
    let mut p = Pair::connect(&l, a).unwrap();
    // A pacing cap, so MaxPacingRateKernelMbps is present (absent when unlimited).
    let cap: u32 = 1_000_000_000;
    // SAFETY: setsockopt on an open socket with a u32 value of the right size.
    let r = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&p.client),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            (&raw const cap).cast(),
            4,
        )
    };
    assert_eq!(r, 0);
    for _ in 0..5 {
        p.exchange(200_000).unwrap();
        std::thread::sleep(Duration::from_millis(30));
    }
    drop(p);
    let mut held = Pair::connect(&l, a).unwrap();
    held.exchange(10_000).unwrap();
    let mut recs = m.records(2, Duration::from_secs(10));
    // Time for the process walker (paced to 2 % of a core) to name the held flow's
    // program, also when this test's cgroup holds processes with thousands of sockets:
    // with 100 ms, a CI run beside a 4,000-socket process got no Comm.
    std::thread::sleep(Duration::from_millis(1500));
    m.signal(libc::SIGINT);
    let (st, log, rest) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{log}");
    recs.extend(rest.iter().map(|l| serde_json::from_str::<Value>(l).unwrap()));
    assert_eq!(recs.len(), 4, "{recs:?}");
    for r in &recs {
        let errors: Vec<String> = validator.iter_errors(r).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:?}\n{r:#}");
    }
    // Every field the schema names appears in some record (the schema is not stale).
    let props = schema["properties"].as_object().unwrap();
    let missing: Vec<&String> = props
        .keys()
        // Only records of one sample have a ThroughputBasis (docs/records.md); only a
        // connecting end seen in its destroy event alone has NotNamed (every tick dumps
        // here: `metrics::short_flows_count_under_their_own_services` makes and checks it).
        .filter(|k| {
            !["CgroupID", "Service", "Netns", "ThroughputBasis", "NotNamed"].contains(&k.as_str())
        })
        .filter(|k| !recs.iter().any(|r| r.get(*k).is_some()))
        .collect();
    let counts: Vec<&Value> = recs.iter().map(|r| &r["Samples"]).collect();
    assert!(missing.is_empty(), "never produced: {missing:?} (samples {counts:?})");
    // Our sockets are in this process's cgroup: the records name its service.
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let own =
        own.lines().find_map(|l| l.strip_prefix("0::")).map(cgmon_rs::who::services::service_name);
    for r in recs.iter().filter(|r| r.get("CgroupID").is_some()) {
        assert_eq!(r["Service"].as_str(), own.as_deref(), "{r:#}");
    }
    let (lines, _) = read_records(&samples);
    assert!(lines.len() >= 4);
    for s in &lines {
        assert!(sample_validator.is_valid(s), "{s}");
    }
    drop(held);
}

#[test]
fn sigterm_writes_active_flows_as_partial_with_the_flag() {
    let (l, a) = listener();
    let mut held = Pair::connect(&l, a).unwrap();
    held.exchange(50_000).unwrap();
    for partial in [true, false] {
        let mut args = vec!["-run-interval", "50ms", "-netlink-sport", ""];
        let port = a.port().to_string();
        args[3] = &port;
        if partial {
            args.push("-writer-partial");
        }
        // -netlink-sport names the server end only.
        let m = monitor(&args);
        std::thread::sleep(Duration::from_millis(200));
        let t = Instant::now();
        m.signal(libc::SIGTERM);
        let (st, log, rest) = m.wait(Duration::from_secs(10));
        assert!(st.success(), "{log}");
        assert!(t.elapsed() < Duration::from_secs(3), "slow shutdown: {:?}", t.elapsed());
        if partial {
            assert_eq!(rest.len(), 1, "{rest:?}\n{log}");
            let r: Value = serde_json::from_str(&rest[0]).unwrap();
            assert_eq!(r["ID"]["SrcPort"], a.port());
            assert_eq!(r["Partial"], true);
            assert_eq!(r["PartialStart"], true);
            assert_eq!(r["PartialEnd"], true);
            assert_eq!(r["EndReason"], "shutdown");
            assert_eq!(r["BytesReceived"], 50_000);
        } else {
            assert!(rest.is_empty(), "{rest:?}");
            assert!(log.contains("1 partial not written"), "{log}");
        }
    }
    drop(held);
}

#[test]
fn files_rotate_by_size_and_by_time_and_every_file_is_valid_gzip() {
    let (l, a) = listener();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let m = monitor(&[
        "-run-interval",
        "50ms",
        "-writer-dir",
        d,
        "-writer-file",
        "f.json.gz",
        "-writer-rotate-size",
        "2K",
        "-writer-rotate-interval",
        "1500ms",
        "-writer-compression-level",
        "1",
        "--filter",
        &port_filter(a),
    ]);
    let mut made = 0;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(4) {
        exchange_and_close(&l, a, 1000);
        made += 2;
        std::thread::sleep(Duration::from_millis(10));
    }
    // Idle: nothing arrives, yet the timer rotates a file that holds records.
    std::thread::sleep(Duration::from_millis(2000));
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(15));
    assert!(st.success(), "{log}");
    assert!(log.contains("reason=\"size\""), "no size rotation:\n{log}");
    assert!(log.contains("reason=\"interval\""), "no interval rotation:\n{log}");
    let fs = files(dir.path());
    assert!(fs.len() >= 3, "{fs:?}");
    let mut all = Vec::new();
    for f in &fs {
        assert_valid_gzip(f);
        all.extend(read_records(f).0);
    }
    let cookies = by_cookie(&all);
    let mut uniq = cookies.clone();
    uniq.dedup();
    assert_eq!(uniq.len(), cookies.len(), "a record written twice");
    assert_eq!(all.len(), made, "every flow's record, once");
}

#[test]
fn sigkill_loses_nothing_flushed_a_second_before() {
    let (l, a) = listener();
    let dir = tempfile::tempdir().unwrap();
    let m = file_monitor(dir.path(), "f.json.gz", a, &[]);
    for _ in 0..20 {
        exchange_and_close(&l, a, 5000);
    }
    std::thread::sleep(Duration::from_millis(2500));
    m.signal(libc::SIGKILL);
    let (st, _, _) = m.wait(Duration::from_secs(5));
    assert!(!st.success());
    let (recs, complete) = read_records(&dir.path().join("f.json.gz"));
    assert!(!complete, "a killed writer cannot have written the gzip trailer");
    assert_eq!(recs.len(), 40, "zcat reads every record before the cut");
}

#[test]
fn sighup_rotates_the_file_and_sigusr_signals_log_the_metrics() {
    let (l, a) = listener();
    let dir = tempfile::tempdir().unwrap();
    let m = file_monitor(dir.path(), "f.json.gz", a, &[]);
    exchange_and_close(&l, a, 1000);
    std::thread::sleep(Duration::from_millis(500));
    m.signal(libc::SIGHUP);
    m.wait_log("rotated output file", Duration::from_secs(5));
    let rotated = dir.path().join("f.1.json.gz");
    assert_valid_gzip(&rotated);
    assert_eq!(read_records(&rotated).0.len(), 2);
    m.signal(libc::SIGUSR1);
    m.wait_log("internal metrics", Duration::from_secs(5));
    // cgmon's SIGUSR2 (GC, then the metrics) must not kill us, as its default action would.
    m.signal(libc::SIGUSR2);
    m.wait_log("free heap memory returned to the OS: RSS", Duration::from_secs(5));
    // A connection that closes just before the stop is recorded too: its destroy events
    // wait in the socket and are read at the stop (before, they were left there, and a
    // flow a dump had seen ended as cut off by the shutdown, not written).
    exchange_and_close(&l, a, 1000);
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{log}");
    assert!(log.contains("stopped: 4 records written"), "{log}");
}

#[test]
fn a_full_disk_is_logged_with_the_file_counted_and_fails_the_exit_status() {
    let (l, a) = listener();
    let dir = tempfile::tempdir().unwrap();
    // Every write to a /dev/full device (1, 7) fails with ENOSPC. A node of its own at the
    // output name: a symlink to /dev/full would be refused (outputs never follow links).
    if let Err(e) = cgmon_rs::testkit::dev_full_at(&dir.path().join("f.json")) {
        assert!(std::env::var("CI").map_or(true, |v| v != "true"), "CI=true: mknod: {e}");
        eprintln!("skipped: making a /dev/full node needs root: {e}");
        return;
    }
    let m = file_monitor(dir.path(), "f.json", a, &["-run-shutdown-timeout", "2s"]);
    exchange_and_close(&l, a, 1000);
    m.wait_log("write failed", Duration::from_secs(10));
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(10));
    assert_eq!(st.code(), Some(1), "{log}");
    let path = dir.path().join("f.json");
    assert!(log.contains(&path.display().to_string()), "the log names the file:\n{log}");
    assert!(log.contains("No space left on device"), "{log}");
    assert!(log.contains("2 records could not be written and are lost"), "{log}");
}

/// A 64 KiB tmpfs in a temporary directory, unmounted on drop. `None` (the test skips)
/// when not root; under CI=true it must run.
pub struct SmallDisk {
    pub mnt: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    pub fn mount() -> Option<Self> {
        if unsafe { libc::geteuid() } != 0 {
            assert!(std::env::var("CI").is_err(), "CI=true: this test needs root to mount a tmpfs");
            eprintln!("skipped: mounting a tmpfs needs root");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(&mnt)
            .status()
            .unwrap();
        assert!(ok.success(), "mount tmpfs");
        Some(Self { mnt, _dir: dir })
    }

    /// Fills the filesystem to the last byte; returns the filler's path.
    pub fn fill(&self) -> PathBuf {
        let filler = self.mnt.join("filler");
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 4096];
        while std::io::Write::write_all(&mut f, &chunk).is_ok() {}
        while std::io::Write::write_all(&mut f, &chunk[..1]).is_ok() {}
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
    }
}

/// Needs root (a tmpfs mount). Under CI=true it must run.
#[test]
fn a_disk_that_fills_and_frees_again_loses_nothing() {
    let Some(disk) = SmallDisk::mount() else { return };
    let (l, a) = listener();
    let filler = disk.fill();
    let m = file_monitor(&disk.mnt, "f.json", a, &[]);
    for _ in 0..5 {
        exchange_and_close(&l, a, 1000);
    }
    m.wait_log("write failed", Duration::from_secs(10));
    std::fs::remove_file(&filler).unwrap();
    m.wait_log("output writable again", Duration::from_secs(10));
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{log}");
    let (recs, _) = read_records(&disk.mnt.join("f.json"));
    assert_eq!(recs.len(), 10, "every record once the disk freed:\n{log}");
}

/// Issue 32: a SIGHUP (logrotate's) while the disk is full made the writer panic inside
/// flate2 and sampling stop. Now every record is kept and every file is valid gzip.
/// Needs root (a tmpfs mount). Under CI=true it must run.
#[test]
fn rotating_a_gzip_file_on_a_full_disk_loses_nothing() {
    let Some(disk) = SmallDisk::mount() else { return };
    let (l, a) = listener();
    let m = file_monitor(&disk.mnt, "f.json.gz", a, &[]);
    for _ in 0..3 {
        exchange_and_close(&l, a, 1000);
    }
    m.wait_log("output file opened", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(1500)); // one flush: these reach the disk
    let filler = disk.fill();
    // Enough records a round that their compressed bytes need new pages (tmpfs fills a
    // page it already has).
    for round in 0..4 {
        for _ in 0..40 {
            exchange_and_close(&l, a, 1000);
        }
        std::thread::sleep(Duration::from_millis(300));
        m.signal(libc::SIGHUP);
        if round == 0 {
            m.wait_log("write failed", Duration::from_secs(10));
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    std::fs::remove_file(&filler).unwrap();
    m.wait_log("output writable again", Duration::from_secs(10));
    for _ in 0..2 {
        exchange_and_close(&l, a, 1000);
    }
    std::thread::sleep(Duration::from_millis(300));
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{log}");
    assert!(!log.contains("panicked"), "{log}");
    let mut cookies = Vec::new();
    for e in std::fs::read_dir(&disk.mnt).unwrap() {
        let p = e.unwrap().path();
        if !p.file_name().unwrap().to_string_lossy().starts_with("f.") {
            continue;
        }
        let (recs, complete) = read_records(&p);
        assert!(complete, "{} is complete gzip:\n{log}", p.display());
        let t = Command::new("gzip").arg("-t").arg(&p).status().unwrap();
        assert!(t.success(), "gzip -t {}", p.display());
        cookies.extend(by_cookie(&recs));
    }
    let n = cookies.len();
    cookies.sort_unstable();
    cookies.dedup();
    assert_eq!(cookies.len(), n, "no record twice");
    assert_eq!(n, 2 * (3 + 4 * 40 + 2), "every record of both ends:\n{log}");
    assert!(log.contains("0 lost"), "{log}");
}

#[test]
fn a_bad_value_from_the_environment_names_the_variable() {
    // A unit's Environment= line holds CGMON_RUN_INTERVAL, not --run-interval.
    let out = Command::new(BIN).env("CGMON_RUN_INTERVAL", "0").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("'0'") && err.contains("(from CGMON_RUN_INTERVAL)"), "{err}");
    let out = Command::new(BIN).env("CGMON_WRITER_PARTIAL", "maybe").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("'maybe'") && err.contains("(from CGMON_WRITER_PARTIAL)"), "{err}");
    // The command line wins, so a bad value there is not blamed on the variable.
    let out = Command::new(BIN)
        .env("CGMON_RUN_INTERVAL", "1s")
        .args(["-run-interval", "0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!err.contains("CGMON_RUN_INTERVAL"), "{err}");
    // Values found bad after clap has parsed them: a filter, an output directory.
    for (var, value) in [
        ("CGMON_FILTER", "dport 99999"),
        ("CGMON_WRITER_DIR", "/nonexistent/cgmon-rs"),
        ("CGMON_WRITER_FILE", "a/b"),
        ("CGMON_SAMPLES_OUT", "/nonexistent/cgmon-rs/samples"),
    ] {
        let out = Command::new(BIN).env(var, value).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}: {err}");
        assert_eq!(err.lines().count(), 1, "{var}: {err}");
        assert!(err.contains(value) && err.contains(&format!("(from {var})")), "{err}");
    }
    let out = Command::new(BIN)
        .env("CGMON_FILTER", "dport 443")
        .args(["--filter", "dport 99999"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("99999") && !err.contains("CGMON_FILTER"), "{err}");
}

#[test]
fn a_bad_samples_out_stops_the_run_before_the_records_file_is_touched() {
    // The records' file opens first. When the samples file then failed, the records' file
    // had been created, an earlier run's file moved aside, and the error blamed
    // -writer-dir.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.json"), "{\"earlier\":1}\n").unwrap();
    let d = dir.path().to_str().unwrap();
    let out = Command::new(BIN)
        .args(["-writer-dir", d, "-writer-file", "f.json", "--samples-out", "/nonexistent/s"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("cgmon-rs: --samples-out: cannot open /nonexistent/s:"), "{err}");
    assert_eq!(files(dir.path()), [dir.path().join("f.json")]);
    assert_eq!(std::fs::read_to_string(dir.path().join("f.json")).unwrap(), "{\"earlier\":1}\n");
}

#[test]
fn bad_flags_exit_2_with_one_line_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let cases: &[(&[&str], &str, &str)] = &[
        (&["-run-interval", "0"], "run-interval", "0"),
        (&["-run-interval", "fast"], "run-interval", "fast"),
        (&["-writer-rotate-size", "10X"], "writer-rotate-size", "10X"),
        (&["-netlink-dport", "80,,443"], "netlink-dport", "80,,443"),
        (&["-netlink-sport", "99999"], "netlink-sport", "99999"),
        (&["-writer-compression-level", "12"], "writer-compression-level", "12"),
        (&["-writer-dir", "/nonexistent/cgmon-rs"], "writer-dir", "/nonexistent/cgmon-rs"),
        (&["-writer-dir", "/proc"], "writer-dir", "/proc"),
        (&["-no-such-flag"], "no-such-flag", "no-such-flag"),
        (&["-tracker-destroy-grace", "1h"], "tracker-destroy-grace", "1h"),
        (&["-tracker-destroy-grace", "-1s"], "tracker-destroy-grace", "-1s"),
        (&["dport", "eighty"], "eighty", "eighty"),
    ];
    for (args, flag, value) in cases {
        let mut all: Vec<&str> = args.to_vec();
        if !args.contains(&"-writer-dir") {
            all.extend(["-writer-dir", d]);
        }
        let out = Command::new(BIN).args(&all).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(flag) && err.contains(value), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(files(dir.path()).is_empty(), "{args:?} wrote {:?}", files(dir.path()));
    }
}

#[test]
fn arguments_that_used_to_panic_are_usage_errors() {
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"dport\xff\xfe");
    let out = Command::new(BIN).arg(bad).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not valid UTF-8") && err.lines().count() == 1, "{err}");
    let out =
        Command::new(BIN).args(["diagnose", "--seconds", "18446744073709551615"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--seconds") && err.contains("18446744073709551615"), "{err}");
    // The largest durations and counts every flag accepts run without overflow.
    for args in [
        &["-run-interval", "5000000h"][..],
        &["-run-shutdown-timeout", "5000000h"],
        &["-run-error-delay", "5000000h"],
        &["--http-idle-timeout", "5000000h", "-run-http-server", "127.0.0.1:0"],
        &["-tracker-window-samples", "18446744073709551615"],
        &["-tracker-max-flows", "18446744073709551615"],
        &["-run-max-errors", "4294967295"],
        &["--max-full-interval", "5000000h"],
    ] {
        let out = Command::new(BIN)
            .args(args)
            .args(["-run-duration", "300ms", "--filter", "dport 1"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
}

#[test]
fn a_stdout_reader_that_pauses_loses_no_record() {
    // Nothing reads stdout for 3 s while 1,500 connections open and close (3,000 records).
    // They must wait in the writer's backlog, which `--writer-backlog` bounds. When the
    // writer itself blocked in write(), they stayed in the channels behind it instead,
    // which hold batches, not bytes, and fill within a second of churn like this.
    let (l, a) = listener();
    let filter = port_filter(a);
    let mut c = Command::new(BIN);
    c.args(["-run-interval", "10ms", "-run-http-server", "127.0.0.1:0", "--filter", &filter]);
    let (m, go) = Monitor::spawn_unread(c);
    let addr = http_addr(&m);
    let t = Instant::now();
    for _ in 0..1500 {
        exchange_and_close(&l, a, 100);
        std::thread::sleep(Duration::from_millis(1));
    }
    let churn = t.elapsed();
    // Until every record has reached the writer (or 15 s): written (into the pipe, which the
    // monitor widens to 1 MiB) or held in its backlog.
    let value = |text: &str, name: &str| -> f64 {
        let line = text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let (mut held, mut written, mut dropped, mut text);
    loop {
        text = http_get(&addr, "/metrics");
        held = value(&text, "cgmon_writer_backlog_records ");
        written = value(&text, "cgmon_records_written_total ");
        dropped = value(&text, "cgmon_records_dropped_total ");
        if held + written >= 3000.0 || dropped > 0.0 || t.elapsed() > Duration::from_secs(15) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "1,500 connections in {churn:?}; with stdout unread, {held} records held and {written} \
         written after {:?}",
        t.elapsed()
    );
    go.send(()).unwrap();
    assert_eq!(dropped, 0.0, "{text}");
    assert_eq!(held + written, 3000.0, "{text}");
    // The monitor widens the pipe to 1 MiB (records of 1-2 KB: at most ~1,000 fit in it).
    assert!(written < 1100.0, "the reader took {written}: it was meant to be stalled");
    let recs = m.records(3000, Duration::from_secs(20));
    assert_eq!(recs.len(), 3000);
    m.signal(libc::SIGTERM);
    let (st, log, rest) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{log}");
    assert!(rest.is_empty(), "{rest:?}");
    // Exit status 0 already says none was lost or dropped.
    assert!(log.contains("stopped: 3,000 records written"), "{log}");
}

#[test]
fn records_pushed_out_of_a_full_backlog_fail_the_run() {
    // The smallest backlog (1 MiB, ~500 records) and a reader that reads nothing while 1,200
    // connections close: of their 2,400 records (1.3-2 KB each), what the backlog, stdout's
    // hand-off (a quarter of the backlog, 256 KiB) and the pipe (widened to 1 MiB) cannot
    // hold is pushed out. Everything left is
    // written once the reader reads, but the run lost records, so it must not exit 0.
    let (l, a) = listener();
    let filter = port_filter(a);
    let mut c = Command::new(BIN);
    c.args(["-run-interval", "20ms", "--writer-backlog", "1M", "--filter", &filter]);
    let (m, go) = Monitor::spawn_unread(c);
    for _ in 0..1200 {
        exchange_and_close(&l, a, 100);
    }
    m.wait_log("oldest records lost", Duration::from_secs(10));
    go.send(()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(10));
    assert_eq!(st.code(), Some(1), "{log}");
    assert!(log.contains("records were lost during the run"), "{log}");
    assert!(!log.contains("successful termination"), "{log}");
    // The stop line names the loss with its count, from the counters.
    let stop = log.lines().find(|l| l.contains("stopped: ")).unwrap_or_else(|| panic!("{log}"));
    assert!(stop.contains("lost (the output failed)") && stop.len() < 200, "{stop}");
}

#[test]
fn help_version_and_run_duration() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for s in ["EXIT STATUS", "EXAMPLES", "-writer-rotate-size", "[default: 15m]", "UNITS"] {
        assert!(help.contains(s), "help lacks {s:?}");
    }
    // The subcommand's usage names the program as it is typed.
    let out = Command::new(BIN).args(["diagnose", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Usage: cgmon-rs diagnose [OPTIONS]"), "{help}");
    let out = Command::new(BIN).arg("-version").output().unwrap();
    assert!(out.status.success());
    // cgmon's form, `<name> version <version>`.
    let want = format!("cgmon-rs version {}\n", env!("CARGO_PKG_VERSION"));
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    let t = Instant::now();
    let out = Command::new(BIN)
        .args(["-run-duration", "300ms", "-run-interval", "100ms", "sport", "1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn flags_may_follow_the_filter_words_as_in_ss() {
    // `ss dport = :443 -t` works (getopt permutes); so must ours, for both commands.
    let t = Instant::now();
    let out = Command::new(BIN)
        .args(["sport", "=", ":1", "-run-duration", "300ms", "--run-interval=100ms"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(BIN)
        .args(["diagnose", "sport", "1", "--seconds", "1", "--interval", "50ms", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(t.elapsed() < Duration::from_secs(8));
    // After `--` a flag-like word is filter, and the filter error names it.
    let out = Command::new(BIN).args(["sport", "1", "--", "-run-duration", "1s"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unexpected \"-run-duration\""), "{err}");
}

#[test]
fn systemd_gets_ready_after_the_first_dump_and_watchdog_pings() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut child = Command::new(BIN)
        .args(["-run-interval", "50ms", "sport", "1"])
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "200000")
        .env_remove("WATCHDOG_PID")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while !(got.iter().any(|m: &String| m.contains("READY=1"))
        && got.iter().filter(|m| m.contains("WATCHDOG=1")).count() >= 2)
    {
        let n = sock.recv(&mut buf).expect("a notification within 10 s");
        got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    loop {
        let n = sock.recv(&mut buf).expect("STOPPING=1 after SIGTERM");
        if String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1") {
            break;
        }
    }
    assert!(child.wait().unwrap().success());
    let ready = got.iter().position(|m| m.contains("READY=1")).unwrap();
    assert_eq!(got.iter().filter(|m| m.contains("READY=1")).count(), 1, "{got:?}");
    assert!(ready <= 1, "READY comes with the first dump: {got:?}");
}

/// The shipped unit passes `systemd-analyze verify` (CI installs systemd).
#[test]
fn systemd_unit_verifies() {
    if Command::new("systemd-analyze").arg("--version").output().is_err() {
        assert!(std::env::var("CI").is_err(), "CI=true: systemd-analyze is required");
        eprintln!("skipped: systemd-analyze is not installed");
        return;
    }
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/systemd/cgmon-rs.service"
    ))
    .unwrap();
    // verify checks that ExecStart exists: point it at the binary under test.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cgmon-rs.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/cgmon-rs", BIN)).unwrap();
    let out = Command::new("systemd-analyze").arg("verify").arg(&path).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.trim().is_empty(), "{err}");
}

/// The value of the series `name` (without labels) in a `/metrics` text.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

pub fn http_get(addr: &str, path: &str) -> String {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The body of an [`http_get`] response ("" when it has none).
pub fn body(r: &str) -> &str {
    r.split("\r\n\r\n").nth(1).unwrap_or("")
}

/// A monitor of the flows to and from `a`, sampling every `interval`, with its HTTP server
/// on a loopback port; and that server's address.
pub fn http_monitor(interval: &str, a: SocketAddr) -> (Monitor, String) {
    // Every tick a full dump (no CPU budget): these tests time spans by ticks, and under
    // a parallel test run the budget may space dumps out (a 600 ms flow measured 489 ms).
    let m = monitor(&[
        "--cpu-budget",
        "0",
        "-run-interval",
        interval,
        "-run-http-server",
        "127.0.0.1:0",
        "--filter",
        &port_filter(a),
    ]);
    let addr = http_addr(&m);
    (m, addr)
}

/// The address the monitor's HTTP server listens on, from its log.
pub fn http_addr(m: &Monitor) -> String {
    m.wait_log("HTTP server listening", Duration::from_secs(5));
    m.log()
        .lines()
        .find(|l| l.contains("HTTP server listening"))
        .and_then(|l| l.split("addr=").nth(1))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn http_status_page_flows_and_health() {
    let (l, a) = listener();
    let (m, addr) = http_monitor("50ms", a);
    let mut held = Pair::connect(&l, a).unwrap();
    held.exchange(20_000).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let page = http_get(&addr, "/");
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    for want in [
        "<h2>cgmon-rs version",
        "Pipeline stage times (µs)",
        "<td>analyzer</td>",
        "flows/s",
        "resident memory",
        "<th colspan=\"2\">records</th>",
        "lost (output failed)",
    ] {
        assert!(page.contains(want), "status page lacks {want:?}: {page}");
    }
    // The host view is rendered in full on the server: the flows are in the HTML.
    assert_eq!(page.matches("<tr class=\"flow\"").count(), 2, "{page}");
    let health = http_get(&addr, "/health");
    // The same navigation as every page.
    assert!(
        health.contains("Pipeline stage times (µs)")
            && health.contains("<nav><b>cgmon-rs</b> <a href=\"/\">host</a>"),
        "{health}"
    );
    let h = http_get(&addr, "/healthz");
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    // /flows: both ends of the held connection, with their latest sample.
    let flows: Value = serde_json::from_str(body(&http_get(&addr, "/flows"))).unwrap();
    let flows = flows.as_array().unwrap();
    assert_eq!(flows.len(), 2, "{flows:?}");
    let client = flows.iter().find(|f| f["ID"]["DstPort"] == a.port()).unwrap();
    assert_eq!(client["BytesAcked"], 20_000 + 1);
    assert!(client["Latest"]["RTTms"].as_f64().unwrap() > 0.0, "{client}");
    let cookie = client["Cookie"].as_u64().unwrap();
    let one: Value =
        serde_json::from_str(body(&http_get(&addr, &format!("/flows/{cookie}")))).unwrap();
    assert_eq!(one["Cookie"], cookie);
    assert!(!one["RecentSamples"].as_array().unwrap().is_empty());
    assert!(http_get(&addr, "/flows/1").starts_with("HTTP/1.1 404"));
    drop(held);
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{log}");
}

/// "Recently ended" links answered 404 once churn pushed their flows out of the ring. A
/// flow the host page listed stays findable; one it never listed does not (404). (That a
/// listed flow ages out after 5 minutes into a 410 is tested with a clock in the writer's
/// tests.)
#[test]
fn a_flow_the_host_page_listed_answers_after_churn_pushed_it_out_of_the_ring() {
    let (l, a) = listener();
    let m = monitor(&[
        "--cpu-budget",
        "0",
        "-run-interval",
        "20ms",
        "-run-http-server",
        "127.0.0.1:0",
        "--recent-flows",
        "2",
        "--filter",
        &port_filter(a),
    ]);
    let addr = http_addr(&m);
    // `n` connections that exchange a little and end: two records each.
    let flows = |m: &Monitor, n: usize| {
        let mut pairs: Vec<Pair> = (0..n).map(|_| Pair::connect(&l, a).unwrap()).collect();
        for p in &mut pairs {
            p.exchange(1000).unwrap();
        }
        std::thread::sleep(Duration::from_millis(60));
        drop(pairs);
        m.records(2 * n, Duration::from_secs(10))
    };
    let first = flows(&m, 1);
    let listed: Vec<u64> = first.iter().map(|r| r["Cookie"].as_u64().unwrap()).collect();
    let host = http_get(&addr, "/");
    for c in &listed {
        assert!(host.contains(&format!("href=\"/flow/{c}\"")), "{c} not linked: {host}");
    }
    // Churn: three more connections end; the ring holds only the last two of their six
    // records.
    let later = flows(&m, 3);
    let dropped = later[0]["Cookie"].as_u64().unwrap();
    for c in &listed {
        let page = http_get(&addr, &format!("/flow/{c}"));
        assert!(page.starts_with("HTTP/1.1 200") && page.contains("· ended"), "{c}: {page}");
    }
    let page = http_get(&addr, &format!("/flow/{dropped}"));
    assert!(page.starts_with("HTTP/1.1 404"), "never listed, out of the ring: {page}");
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{log}");
}

#[test]
fn flow_duration_histogram_files_each_flow_by_its_measured_span() {
    let (l, a) = listener();
    let (m, addr) = http_monitor("10ms", a);
    let mut p = Pair::connect(&l, a).unwrap();
    p.exchange(1000).unwrap();
    std::thread::sleep(Duration::from_millis(600));
    p.exchange(1000).unwrap();
    drop(p);
    let recs = m.records(2, Duration::from_secs(10));
    let page = http_get(&addr, "/flow-duration-histogram");
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("content-type: text/plain"), "{page}");
    assert!(page.contains("flow durations: 2 flows"), "{page}");
    // At a 10 ms interval the first range has 10 ms bins; each end of the connection is
    // filed in the bin of its record's Duration (the span sampled, about 600 ms).
    assert!(page.contains("[0s, 2s) step 10ms: 2 flows (100.0 %)"), "{page}");
    let mut bins: Vec<u64> =
        recs.iter().map(|r| r["Duration"].as_u64().unwrap() / 10_000_000).collect();
    assert!(bins.iter().all(|&b| (50..100).contains(&b)), "{bins:?}\n{page}");
    bins.sort_unstable();
    bins.dedup();
    for b in bins {
        let n = recs.iter().filter(|r| r["Duration"].as_u64().unwrap() / 10_000_000 == b).count();
        let label = format!("[{}ms, {}ms)", b * 10, b * 10 + 10);
        let line = page
            .lines()
            .find(|l| l.trim_start().starts_with(&label))
            .unwrap_or_else(|| panic!("no bin {label}:\n{page}"));
        assert_eq!(line.split_whitespace().nth(2), Some(n.to_string().as_str()), "{line}");
    }
    // The status page links to it, as cgmon's did.
    assert!(http_get(&addr, "/").contains("href=\"/flow-duration-histogram\""));
    // `--help` describes it as what it serves (it once said JSON).
    let help = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let line = help.lines().find(|l| l.trim_start().starts_with("/flow-duration-histogram"));
    let line = line.unwrap_or_else(|| panic!("no histogram path in --help:\n{help}"));
    assert!(line.contains("plain-text") && !line.contains("JSON"), "{line}");
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{log}");
}

/// Needs root (to run the binary as another user, with and without a capability). Under
/// CI=true it must run.
#[test]
fn an_output_directory_is_judged_with_the_users_effective_rights() {
    if unsafe { libc::geteuid() } != 0 {
        assert!(std::env::var("CI").is_err(), "CI=true: this test needs root to drop to nobody");
        eprintln!("skipped: running as another user needs root");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // A copy nobody can run (the build directory may be closed to other users), and a
    // directory only root may write to.
    let bin = dir.path().join("cgmon-rs");
    std::fs::copy(BIN, &bin).unwrap();
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    std::fs::set_permissions(&out_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let as_nobody = |caps: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(caps)
            .arg(&bin)
            .args(["-run-duration", "200ms", "sport", "1", "-writer-file", "f.json", "-writer-dir"])
            .arg(&out_dir)
            .output()
            .expect("setpriv (util-linux)")
    };
    let out = as_nobody(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("-writer-dir") && err.contains("Permission denied"), "{err}");
    assert!(files(&out_dir).is_empty());
    // With CAP_DAC_OVERRIDE, as a unit's AmbientCapabilities= can give, open(2) may write
    // there, so the check before it must agree (access(2) judged by the real IDs without
    // capabilities and refused).
    let out = as_nobody(&["--inh-caps", "+dac_override", "--ambient-caps", "+dac_override"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(files(&out_dir), [out_dir.join("f.json")]);
}

/// The shipped all-namespaces drop-in verifies with the unit, and what it adds keeps
/// `systemd-analyze security` at OK (it was 2.2 when written).
#[test]
fn the_all_namespaces_drop_in_verifies_and_stays_ok() {
    drop_in_verifies("cgmon-rs-all-netns.conf", 3.0);
    let conf = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/systemd/cgmon-rs-all-netns.conf"
    ))
    .unwrap();
    // It grants only the two capabilities --netns all needs.
    assert!(conf.contains("CapabilityBoundingSet=CAP_SYS_ADMIN CAP_SYS_PTRACE\n"));
}

/// The processes drop-in: it verifies and grants the two capabilities reading other users'
/// /proc/PID/fd needs, and no other
/// (`processes::nobody_sees_other_users_processes_only_with_both_capabilities` shows the
/// difference they make).
#[test]
fn the_processes_drop_in_verifies_and_grants_only_what_fd_links_need() {
    drop_in_verifies("cgmon-rs-processes.conf", 3.0);
    let conf = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/systemd/cgmon-rs-processes.conf"
    ))
    .unwrap();
    assert!(conf.contains("CapabilityBoundingSet=CAP_DAC_READ_SEARCH CAP_SYS_PTRACE\n"));
    assert!(conf.contains("AmbientCapabilities=CAP_DAC_READ_SEARCH CAP_SYS_PTRACE\n"));
}

/// The ClickHouse drop-in (issue 35): it verifies, grants no capability, and keeps the
/// unit's exposure as it was; its variables parse as the sink's flags.
#[test]
fn the_clickhouse_drop_in_verifies_and_grants_no_capability() {
    drop_in_verifies("cgmon-rs-clickhouse.conf", 1.5);
    let conf = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/systemd/cgmon-rs-clickhouse.conf"
    ))
    .unwrap();
    assert!(!conf.contains("Capabilit"), "no capability");
    for needed in
        ["IPAddressAllow=", "StateDirectory=cgmon-rs/spool", "CGMON_SPOOL_DIR=", "LoadCredential="]
    {
        assert!(conf.contains(needed), "{needed}");
    }
}

/// Verifies the base unit with the drop-in `name` and checks its exposure score.
fn drop_in_verifies(name: &str, max_score: f64) {
    if Command::new("systemd-analyze").arg("--version").output().is_err() {
        assert!(std::env::var("CI").is_err(), "CI=true: systemd-analyze is required");
        eprintln!("skipped: systemd-analyze is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/systemd/cgmon-rs.service"
    ))
    .unwrap();
    let path = dir.path().join("cgmon-rs.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/cgmon-rs", BIN)).unwrap();
    let drop_in = dir.path().join("cgmon-rs.service.d");
    std::fs::create_dir(&drop_in).unwrap();
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/systemd").join(name),
        drop_in.join(name),
    )
    .unwrap();
    let out = Command::new("systemd-analyze").arg("verify").arg(&path).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.trim().is_empty(), "{err}");
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true"])
        .arg(&path)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!text.contains("Failed to parse"), "{text}");
    let score: f64 = text
        .lines()
        .find_map(|l| l.split("exposure level for cgmon-rs.service: ").nth(1))
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no score in {text}"));
    assert!(score <= max_score, "exposure {score}: {text}");
}

/// The Kubernetes example parses, runs the monitor with --netns all, and grants exactly
/// what that needs: host PIDs, SYS_ADMIN and SYS_PTRACE, not privileged; its metrics port is
/// the one the monitor listens on.
#[test]
fn the_daemonset_example_parses_and_asks_for_what_netns_all_needs() {
    use yaml_rust2::YamlLoader;
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/kubernetes/daemonset.yaml"
    ))
    .unwrap();
    let docs = YamlLoader::load_from_str(&text).unwrap();
    assert_eq!(docs.len(), 1);
    let d = &docs[0];
    assert_eq!(d["kind"].as_str(), Some("DaemonSet"));
    assert_eq!(d["apiVersion"].as_str(), Some("apps/v1"));
    let spec = &d["spec"]["template"]["spec"];
    assert_eq!(spec["hostPID"].as_bool(), Some(true));
    let c = &spec["containers"][0];
    let args: Vec<&str> = c["args"].as_vec().unwrap().iter().filter_map(|a| a.as_str()).collect();
    assert_eq!(args[..2], ["--netns", "all"]);
    let listen = args.iter().position(|a| *a == "-run-http-server").map(|i| args[i + 1]).unwrap();
    let port = c["ports"][0]["containerPort"].as_i64().unwrap();
    assert_eq!(listen, format!(":{port}"));
    let sc = &c["securityContext"];
    assert_eq!(sc["privileged"].as_bool(), Some(false));
    let add: Vec<&str> =
        sc["capabilities"]["add"].as_vec().unwrap().iter().filter_map(|a| a.as_str()).collect();
    assert_eq!(add, ["SYS_ADMIN", "SYS_PTRACE"]);
    // Its arguments and variables are ones the monitor accepts.
    let mut cmd = Command::new(BIN);
    // Run here in the monitor's own namespace only (the test need not have the rights), and
    // serving on loopback.
    let own: Vec<&str> = args
        .iter()
        .map(|a| match *a {
            "all" => "own",
            a if a == listen => "127.0.0.1:0",
            a => a,
        })
        .collect();
    cmd.args(&own).args(["-run-duration", "1ms"]);
    let spool = tempfile::tempdir().unwrap();
    let mut sink = false;
    for e in c["env"].as_vec().unwrap() {
        let name = e["name"].as_str().unwrap();
        // Here, the sink's server is a closed loopback port and its spool a temporary
        // directory: a test reaches nothing beyond loopback and writes nothing of the host's.
        let value = match (name, e["value"].as_str()) {
            ("CGMON_CLICKHOUSE", Some(_)) => {
                sink = true;
                "http://127.0.0.1:9/".to_string()
            }
            ("CGMON_SPOOL_DIR", Some(_)) => spool.path().display().to_string(),
            (_, Some(v)) => v.to_string(),
            // From the downward API or a secret.
            ("CGMON_HOST_NAME", None) => "node-1".into(),
            (_, None) => continue,
        };
        cmd.env(name, value);
    }
    assert!(sink, "the DaemonSet sets up the ClickHouse sink");
    let mounts = c["volumeMounts"].as_vec().unwrap();
    assert!(mounts.iter().any(|m| m["mountPath"].as_str() == Some("/var/lib/cgmon-rs/spool")));
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Issue 32's flag edges: each is exit 2 with one line that names the flag and the value,
/// quoting at most ~200 characters of it.
#[test]
fn issue_32_bad_flag_values_are_one_line_and_exit_2() {
    let long_filter = format!("dport {}", "1".repeat(100_000));
    let long_netns = "x".repeat(100_000);
    let cases: Vec<(Vec<&str>, &str, &str)> = vec![
        (vec!["--writer-backlog", "0"], "--writer-backlog", "'0'"),
        (vec!["--writer-backlog", "1"], "--writer-backlog", "'1'"),
        (vec!["--writer-backlog", "999999T"], "--writer-backlog", "999999T"),
        (vec!["--writer-backlog", "32G"], "--writer-backlog", "'32G'"),
        (vec!["--netlink-receive-bufsize", "1T"], "--netlink-receive-bufsize", "'1T'"),
        (vec!["--netlink-receive-bufsize-force", "4G"], "--netlink-receive-bufsize-force", "'4G'"),
        (vec!["--netns", "nosuchns-cgmon-test"], "--netns", "nosuchns-cgmon-test"),
        (vec!["--netns", "own,nosuchns-cgmon-test"], "--netns", "nosuchns-cgmon-test"),
        (vec!["--netns", "/nonexistent/ns"], "--netns", "/nonexistent/ns"),
        (vec!["--netns", ""], "--netns", "''"),
        (vec!["--filter", &long_filter], "filter", "111111"),
        (vec!["--netns", &long_netns], "--netns", "xxxxxx"),
    ];
    for (args, flag, value) in cases {
        let out = Command::new(BIN).args(&args).output().unwrap();
        let full = String::from_utf8_lossy(&out.stderr);
        let err: String = full.chars().take(2000).collect();
        let shown: String = args.iter().map(|a| a.chars().take(40).collect::<String>()).collect();
        assert_eq!(out.status.code(), Some(2), "{shown}: {err}");
        assert_eq!(err.lines().count(), 1, "{shown}: {err}");
        assert!(err.contains(flag) && err.contains(value), "{shown}: {err}");
        assert!(full.len() < 1000, "{shown}: the value is clipped: {} bytes", full.len());
    }
}

#[test]
fn issue_32_rotate_size_0_means_no_size_rotation() {
    let (l, a) = listener();
    let dir = tempfile::tempdir().unwrap();
    let m = file_monitor(dir.path(), "f.json", a, &["-writer-rotate-size", "0"]);
    for _ in 0..10 {
        exchange_and_close(&l, a, 1000);
    }
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while read_records(&dir.path().join("f.json")).0.len() < 20 {
        assert!(std::time::Instant::now() < end, "20 records: {}", m.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{log}");
    assert_eq!(files(dir.path()).len(), 1, "one file, never rotated: {:?}", files(dir.path()));
}

/// `--writer-keep-files` and `--writer-keep-size` delete the oldest rotated files, only
/// those named as the monitor rotates them, and count it.
#[test]
fn issue_32_retention_keeps_the_newest_rotated_files() {
    let (l, a) = listener();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Someone else's files, which must survive: other names, and a near miss.
    for other in ["notes.txt", "f.x.json.gz", "g.1.json.gz"] {
        std::fs::write(d.join(other), "keep me").unwrap();
    }
    let samples = d.join("s.json.gz");
    let m = file_monitor(
        d,
        "f.json.gz",
        a,
        &[
            "--writer-keep-files",
            "2",
            "--samples-out",
            samples.to_str().unwrap(),
            "-run-http-server",
            "127.0.0.1:0",
        ],
    );
    let rotations = |m: &Monitor| m.log().matches("rotated output file").count();
    for round in 0..5 {
        exchange_and_close(&l, a, 1000);
        // A SIGHUP rotates only a file that holds a record (no trail of empty files), and
        // on a loaded machine the connection's records may reach the writer after it: the
        // signal is sent again until this round's rotation is logged. Rotations at least a
        // second apart keep the files' modification times in order.
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while rotations(&m) <= round {
            assert!(std::time::Instant::now() < deadline, "no rotation {round}: {}", m.log());
            std::thread::sleep(Duration::from_millis(1200));
            m.signal(libc::SIGHUP);
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    m.wait_log_count("rotated output file", 5, Duration::from_secs(10));
    let addr = http_addr(&m);
    let text = http_get(&addr, "/metrics");
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{log}");
    let mut names: Vec<String> =
        files(d).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    names.sort();
    // Five rotations each of the records' and the samples' files: the two newest of each.
    assert_eq!(
        names,
        [
            "f.4.json.gz",
            "f.5.json.gz",
            "f.json.gz",
            "f.x.json.gz",
            "g.1.json.gz",
            "notes.txt",
            "s.4.json.gz",
            "s.5.json.gz",
            "s.json.gz"
        ],
        "{log}"
    );
    assert!(log.contains("deleted an old rotated file"), "{log}");
    assert!(metric(&text, "cgmon_writer_files_deleted_total") >= 5.0, "{text}");
}

#[test]
fn dest_map_names_the_remote_end_and_is_read_again_on_sighup() {
    let (l, a) = listener();
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("dests.txt");
    let port = a.port();
    // Replaced whole, by a rename, as a map should be: a file rewritten in place can be read
    // between its truncation and its new text (an empty map, for a second).
    let put = |text: String| {
        let tmp = dir.path().join("dests.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &map).unwrap();
    };
    let ip = a.ip();
    put(format!("# the test's server\n{ip}/32:{port} echo-server\n"));
    let mut c = Command::new(BIN);
    c.args(["-run-interval", "20ms", "--filter", &port_filter(a), "--dest-map"]).arg(&map);
    let m = Monitor::spawn(c);
    // One connection: the DestService of its client end and of its server end.
    let names = || {
        exchange_and_close(&l, a, 100);
        let recs = m.records(2, Duration::from_secs(10));
        let end = |key: &str| {
            let r = recs.iter().find(|r| r["ID"][key] == port).unwrap();
            r["DestService"].as_str().unwrap().to_string()
        };
        (end("DstPort"), end("SrcPort"))
    };
    // The server's remote end is the client's ephemeral port: no entry, so the fallback.
    assert_eq!(names(), ("echo-server".into(), "local".into()));
    // A new name, taken on SIGHUP.
    put(format!("127.0.0.0/8:{port} renamed\n"));
    m.signal(libc::SIGHUP);
    m.wait_log("destination map read", Duration::from_secs(10));
    assert_eq!(names().0, "renamed");
    // A map that no longer parses keeps the one before it, and says why.
    put("127.0.0.0/40 broken\n".into());
    m.signal(libc::SIGHUP);
    m.wait_log("line 1: \"40\": a prefix length of 0 to 32", Duration::from_secs(10));
    assert_eq!(names().0, "renamed");
    // A changed file is read again without a signal (its modification time, once a second).
    put(format!("{ip}:{port} changed\n"));
    m.wait_log_count("destination map read", 2, Duration::from_secs(10));
    assert_eq!(names().0, "changed");
    put("127.0.0.0/40 broken\n".into());
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{log}");
    // At the start, a bad map is a usage error naming the file, the line and the value.
    let out = Command::new(BIN).args(["--dest-map"]).arg(&map).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("dests.txt: line 1: \"40\": a prefix length of 0 to 32"), "{err}");
    // A FIFO or /dev/zero as the map: refused at once, neither waited on nor read forever.
    let fifo = map.with_file_name("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for bad in [fifo.to_str().unwrap(), "/dev/zero"] {
        let out = Command::new(BIN).args(["--dest-map", bad]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("not a regular file"), "{err}");
    }
}

#[test]
fn verdicts_are_counted_by_service_pair_for_every_record() {
    let (l, a) = listener();
    let (m, addr) = http_monitor("20ms", a);
    for _ in 0..2 {
        exchange_and_close(&l, a, 50_000);
    }
    // One that lives across samples, so that its record has a span to share out.
    let mut p = Pair::connect(&l, a).unwrap();
    for _ in 0..6 {
        p.exchange(50_000).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(p);
    let recs = m.records(6, Duration::from_secs(10));
    // The writer counts a batch before the scrape can see it: wait for all six.
    let end = Instant::now() + Duration::from_secs(10);
    let (mut text, mut counted) = (String::new(), 0.0);
    while counted < 6.0 && Instant::now() < end {
        text = http_get(&addr, "/metrics");
        counted = text
            .lines()
            .filter(|l| l.starts_with("cgmon_flows_total{"))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum();
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(counted, 6.0, "{text}");
    // Every record's pair and verdict is a series of its own: loopback ends are `local`.
    for r in &recs {
        let verdict = r["Diagnosis"]["Verdict"].as_str().unwrap();
        // The cause beside it, `none` when the diagnosis names none (one spelling).
        let cause = r["Diagnosis"]["Cause"].as_str().unwrap_or("none");
        let want = format!("dest_service=\"local\",verdict=\"{verdict}\",cause=\"{cause}\"}}");
        assert!(
            text.lines().any(|l| l.starts_with("cgmon_flows_total{") && l.contains(&want)),
            "{want} in\n{text}"
        );
    }
    // The time shares of a record sum to 100 %: the limited seconds add up to the spans.
    let limited: f64 = text
        .lines()
        .filter(|l| l.starts_with("cgmon_flow_limited_seconds_total{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    let spans: f64 = recs
        .iter()
        .filter(|r| r.get("Diagnosis").is_some())
        .map(|r| r["Duration"].as_f64().unwrap() / 1e9)
        .sum();
    assert!(spans > 0.2 && (limited - spans).abs() < 1e-6 * spans, "{limited} vs {spans}");
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{log}");
}

#[test]
fn the_kubernetes_script_writes_a_map_the_monitor_reads() {
    use cgmon_rs::who::destinations::DestMap;
    let root = env!("CARGO_MANIFEST_DIR");
    let fixture = std::fs::File::open(format!("{root}/tests/fixtures/kubernetes/cluster.json"));
    let out = Command::new("python3")
        .arg(format!("{root}/examples/kubernetes/dest-map.py"))
        .stdin(fixture.unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let map = DestMap::parse(&text, vec![]).unwrap_or_else(|e| panic!("{e}:\n{text}"));
    let name = |a: &str, p: u16| map.name(a.parse().unwrap(), p).to_string();
    // The ClusterIP (kube-proxy) and the pods (socket-level load balancing) alike.
    assert_eq!(name("10.96.40.2", 80), "shop/api");
    assert_eq!(name("fd00:10:96::2", 80), "shop/api");
    assert_eq!(name("10.244.2.9", 8080), "shop/api");
    assert_eq!(name("10.96.12.7", 5432), "db/postgres");
    // A headless service's pods, through their slice; UDP ports are not TCP flows.
    assert_eq!(name("fd00:244::5", 6379), "shop/cache");
    assert_eq!(name("10.96.40.2", 53), "private");
    // The monitor takes the file as it is written.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dests.txt");
    std::fs::write(&path, &text).unwrap();
    let st = Command::new(BIN)
        .args(["-run-duration", "50ms", "--dest-map"])
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
}

/// Issue 40: connections open before the monitor starts are packed by its first dump, the
/// one that moves is made whole, and every one ends with its exact final counters.
#[test]
fn idle_connections_are_packed_and_end_whole() {
    let (l, a) = listener();
    let mut pairs: Vec<Pair> = (0..10).map(|_| Pair::connect(&l, a).unwrap()).collect();
    for p in &mut pairs {
        p.exchange(1_000).unwrap();
    }
    // Let the last ACKs settle: a counter that moves after the first dump unpacks a flow.
    std::thread::sleep(Duration::from_millis(500));
    // (Flows open before the start are written only with -writer-partial, as by cgmon.)
    let m = monitor(&[
        "-run-interval",
        "50ms",
        "-writer-partial",
        "-run-http-server",
        "127.0.0.1:0",
        "--filter",
        &port_filter(a),
    ]);
    let addr = http_addr(&m);
    let gauge = |name: &str| metric(body(&http_get(&addr, "/metrics")), name);
    let deadline = Instant::now() + Duration::from_secs(10);
    while gauge("cgmon_flows_active") < 20.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(gauge("cgmon_flows_active"), 20.0);
    assert_eq!(gauge("cgmon_flows_packed"), 20.0, "the first dump's flows are packed");
    let bytes = gauge("cgmon_flows_packed_bytes");
    assert!(bytes > 20.0 * 40.0 && bytes < 20.0 * 200.0, "{bytes} bytes for 20 flows");
    // A packed flow still shows on the flows page, read back from the store.
    let page = body(&http_get(&addr, "/flows")).to_string();
    assert!(page.contains(&a.port().to_string()), "{page}");
    // One connection moves: both its ends are made whole; the other 18 stay packed.
    pairs[0].exchange(50_000).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while gauge("cgmon_flows_packed") > 18.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(gauge("cgmon_flows_packed"), 18.0);
    drop(pairs);
    let recs = m.records(20, Duration::from_secs(10));
    assert_eq!(recs.len(), 20);
    for r in &recs {
        // Exact to the byte, from the destroy event's counters: what each end sent or
        // received (one way: the client sends), with the SYN's and FIN's counted bytes.
        assert_eq!(r["EndReason"], "destroyed", "{r}");
        let moved = r["BytesAcked"].as_u64().unwrap() + r["BytesReceived"].as_u64().unwrap();
        let want = if moved > 40_000 { 51_000 } else { 1_000 };
        assert!((want..=want + 4).contains(&moved), "{moved} bytes: {r}");
        assert!(moved < 40_000 || r["Samples"].as_u64().unwrap() >= 2, "{r}");
    }
    let moved = |r: &&Value| {
        r["BytesAcked"].as_u64().unwrap() + r["BytesReceived"].as_u64().unwrap() > 40_000
    };
    assert_eq!(recs.iter().filter(moved).count(), 2);
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{st:?}\n{log}");
}
