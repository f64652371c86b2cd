//! The churn benchmark: short loopback connections (100 bytes each, both ends recorded), the
//! release binary recording them, and beside it, in the same run and on the same
//! connections, the floor: a bare loop that only receives and discards the kernel's TCP
//! destroy events.
//!
//! ```text
//! cargo bench --bench churn -- [SECS] [RATE ...]
//! cargo bench --bench churn -- refused [SECS] [RATE ...]   (connects refused, beside churn)
//! cargo bench --bench churn -- levels FILE   (what each gzip level costs on FILE's records)
//! cargo bench --bench churn -- writer [N]     (the stdout writer alone into a pipe `cat` reads)
//! cargo bench --bench churn -- ser [N]        (serialising a record: serde_json's and ours)
//! (It does nothing under `cargo test`, which runs bench targets too.)
//! ```
//! For each rate (default: `max`, the most the generator makes with the monitor running,
//! and 2000 connections a second) and each output (stdout into a pipe that `cat` drains
//! to /dev/null; gzip files), it runs the monitor (`-run-interval 100ms`, filtered on the
//! listener's port) for SECS (default 10) and prints: connections a second, the monitor's
//! CPU per connection (whole process, from /proc), the floor's (its thread's CPU), their
//! ratio, records written against two per connection, records lost and dropped, flows
//! refused, destroy-event overruns (the monitor's and the floor's), and the monitor's peak
//! RSS. `NO_NET_ADMIN=1` runs the monitor without CAP_NET_ADMIN (root only), so that its
//! destroy socket gets what `net.core.rmem_max` allows; `MONITOR_ARGS="..."` gives the
//! monitor more flags; `MONITOR_BIN=PATH` runs another build of it. Figures:
//! benches/RESULTS.md and the README.
//!
//! `whole` with `CHURN_BUSY=N` is the busy host: one busy loop a core beside the monitor,
//! and the churn from N client processes at once (each with a listener of its own, at
//! RATE / N), so that the monitor gets the CPU only in the scheduler's turns.
//!
//! `refused` (issue 51): for each rate, a run of connects refused by a closed loopback port
//! (non-blocking, one record each, `refused`) and a run of churned connections at the same
//! rate, alternating, gzip output: CPU an attempt against CPU a connection, the RSS each
//! second, and the connect-failure counters against the attempts made.

use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cgmon_rs::clock::thread_cpu_ns;
use cgmon_rs::sampler::destroy::{SKNLGRP_INET_TCP_DESTROY, SKNLGRP_INET6_TCP_DESTROY};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_SOCK_DIAG};

#[path = "common/procstat.rs"]
mod procstat;
use procstat::{proc_cpu_s, status_mib};

/// A number read for each of a process's threads by `value` (given the thread's /proc
/// directory), summed by thread name.
fn per_thread(
    pid: u32,
    value: impl Fn(&std::path::Path) -> Option<u64>,
) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        *out.entry(name.trim().to_string()).or_default() += value(&t.path()).unwrap_or(0);
    }
    out
}

/// Voluntary context switches (sleeps) of each of a process's threads, by thread name.
fn switches(pid: u32) -> std::collections::BTreeMap<String, u64> {
    per_thread(pid, |t| {
        let st = std::fs::read_to_string(t.join("status")).ok()?;
        st.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?.trim().parse().ok()
    })
}

/// CPU ns of each of a process's threads (schedstat), by thread name.
fn thread_cpu(pid: u32) -> std::collections::BTreeMap<String, u64> {
    per_thread(pid, |t| {
        std::fs::read_to_string(t.join("schedstat")).ok()?.split_whitespace().next()?.parse().ok()
    })
}

/// A socket in both TCP destroy groups with the monitor's receive buffer (4 MiB, forced
/// when the capability allows, as the monitor does).
fn destroy_socket() -> Socket {
    let mut s = Socket::new(NETLINK_SOCK_DIAG).unwrap();
    s.bind(&SocketAddr::new(0, 0)).unwrap();
    for g in [SKNLGRP_INET_TCP_DESTROY, SKNLGRP_INET6_TCP_DESTROY] {
        s.add_membership(g).unwrap();
    }
    let n: libc::c_int = 4 << 20;
    // SAFETY: a valid fd and a c_int of the given size.
    unsafe {
        use std::os::fd::AsRawFd;
        let p = (&raw const n).cast();
        let len = size_of::<libc::c_int>() as libc::socklen_t;
        if libc::setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, p, len) != 0 {
            libc::setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, p, len);
        }
    }
    s
}

/// The floor: receives destroy events and discards them until `stop`; its thread's CPU
/// seconds, the events and the overruns. Its receive buffer is the monitor's (4 MiB,
/// forced when the capability allows, as the monitor does).
fn floor(stop: Arc<AtomicBool>, ready: Arc<AtomicBool>) -> (f64, u64, u64) {
    let s = destroy_socket();
    s.set_non_blocking(true).unwrap();
    let mut buf = vec![0u8; 64 << 10];
    let (mut events, mut overruns) = (0u64, 0u64);
    ready.store(true, Ordering::Relaxed);
    let c0 = thread_cpu_ns();
    while !stop.load(Ordering::Relaxed) {
        let mut pfd = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&s),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&raw mut pfd, 1, 100) };
        loop {
            match s.recv(&mut &mut buf[..], 0) {
                Ok(n) => {
                    // Count the messages in the datagram (each is one destroyed socket).
                    let mut off = 0;
                    while off + 16 <= n {
                        let len = u32::from_ne_bytes(buf[off..off + 4].try_into().unwrap());
                        if len < 16 {
                            break;
                        }
                        events += 1;
                        off += (len as usize + 3) & !3;
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => overruns += 1,
                Err(_) => break,
            }
        }
    }
    ((thread_cpu_ns() - c0) as f64 / 1e9, events, overruns)
}

/// The monitor's `/metrics` text (empty when it does not answer).
fn metrics_text(port: u16) -> String {
    use std::io::Write;
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return String::new() };
    let _ = write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}

fn scrape(port: u16, name: &str) -> f64 {
    metrics_text(port)
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(f64::NAN)
}

/// The sum of every series whose line starts with `prefix` (a name and its `{`).
fn scrape_sum(port: u16, prefix: &str) -> f64 {
    metrics_text(port)
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |a, b| a + b)
}

/// The monitor to run: this tree's, or `MONITOR_BIN` (another build, for an A/B in one
/// sitting, since the machine's noise moves the floor from run to run).
fn monitor_bin() -> String {
    std::env::var("MONITOR_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_cgmon-rs").into())
}

/// What the generator makes.
#[derive(Clone, Copy, PartialEq)]
enum Load {
    /// Connections opened, 100 bytes written, reset: two records each.
    Churn,
    /// Connects refused by a closed port: one record each.
    Refused,
}

struct Outcome {
    rate: f64,
    /// The sum of `cgmon_connect_failures_total`'s series.
    failures: f64,
    made: u64,
    cpu_us: f64,
    floor_us: f64,
    written: f64,
    lost: f64,
    dropped: f64,
    refused: f64,
    overruns: f64,
    floor_overruns: u64,
    peak_mib: f64,
    exact_per_conn: f64,
    /// RSS at each second of the run, MiB.
    rss: Vec<f64>,
    /// Each thread's sleeps a second.
    sleeps: String,
    /// Each thread's CPU, µs a connection.
    by_thread: String,
}

/// One run: `rate` connections a second (0: as many as the generator makes) for `secs`,
/// the monitor writing to stdout (`gzip` false) or gzip files.
fn run(secs: u64, rate: u64, gzip: bool, load: Load) -> Outcome {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    let per = if load == Load::Churn { 2.0 } else { 1.0 };
    let http = 19_000 + (std::process::id() % 1000) as u16;
    let dir = tempfile::tempdir().unwrap();
    let filter = format!("sport {0} or dport {0}", a.port());
    // NO_NET_ADMIN=1: the monitor without CAP_NET_ADMIN (as the shipped unit runs it), so
    // its destroy socket's buffer is what net.core.rmem_max allows.
    let mut cmd = if std::env::var_os("NO_NET_ADMIN").is_some() {
        let mut c = Command::new("setpriv");
        c.args(["--bounding-set=-net_admin", "--inh-caps=-net_admin"]);
        c.arg(monitor_bin());
        c
    } else {
        Command::new(monitor_bin())
    };
    cmd.args(["-run-interval", "100ms", "--filter", &filter])
        .args(["-run-http-server", &format!("127.0.0.1:{http}")])
        .stderr(Stdio::null());
    // MONITOR_ARGS="...": more flags for the monitor (e.g. `-writer-compression-level 1`).
    if let Ok(more) = std::env::var("MONITOR_ARGS") {
        cmd.args(more.split_whitespace());
    }
    if gzip {
        cmd.args(["-writer-dir", dir.path().to_str().unwrap(), "-writer-file", "f.json.gz"]);
        cmd.stdout(Stdio::null());
    } else {
        cmd.stdout(Stdio::piped());
    }
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    // stdout: a pipe `cat` drains, as a log shipper would.
    let cat = child
        .stdout
        .take()
        .map(|out| Command::new("cat").stdin(out).stdout(Stdio::null()).spawn().unwrap());
    let (stop_floor, ready) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let floor_t = {
        let (s, r) = (stop_floor.clone(), ready.clone());
        std::thread::spawn(move || floor(s, r))
    };
    while !ready.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_secs(1)); // the monitor's start
    let c0 = proc_cpu_s(pid).unwrap();
    let sw0 = switches(pid);
    let cpu0 = thread_cpu(pid);
    // PERF=FILE: a perf profile of the monitor over the run (for looking, not for figures;
    // PERF_CG=dwarf for call graphs through code built without frame pointers).
    let perf = std::env::var("PERF").ok().map(|out| {
        Command::new("perf")
            .args([
                "record",
                "--call-graph",
                std::env::var("PERF_CG").as_deref().unwrap_or("fp"),
                "-o",
                &out,
                "-p",
                &pid.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    });
    let stop = Arc::new(AtomicBool::new(false));
    let t = Instant::now();
    let generator = {
        let stop = stop.clone();
        std::thread::spawn(move || match load {
            Load::Churn => cgmon_rs::testkit::churn(l, a, 4, rate, stop),
            Load::Refused => {
                drop(l);
                cgmon_rs::testkit::refused_connects(a, 4, rate, stop)
            }
        })
    };
    // RSS each second of the run: flat after the first seconds, or growing?
    let mut rss = Vec::new();
    for _ in 0..secs {
        std::thread::sleep(Duration::from_secs(1));
        rss.push(status_mib(pid, "VmRSS:"));
    }
    stop.store(true, Ordering::Relaxed);
    let made = generator.join().unwrap();
    let elapsed = t.elapsed().as_secs_f64();
    let sw: Vec<String> = switches(pid)
        .into_iter()
        .map(|(k, v)| {
            format!("{k} {:.0}/s", (v - sw0.get(&k).copied().unwrap_or(0)) as f64 / elapsed)
        })
        .collect();
    if let Some(p) = perf {
        // SAFETY: signalling our own child; perf writes its file on SIGINT.
        unsafe { libc::kill(p.id() as i32, libc::SIGINT) };
        let _ = p.wait_with_output();
    }
    // The last events and records through (the destroy grace, the writer's turn).
    let settle = Instant::now();
    let mut last = -1.0;
    while settle.elapsed() < Duration::from_secs(15) {
        let w = scrape(http, "cgmon_records_written_total")
            + scrape(http, "cgmon_records_lost_total")
            + scrape(http, "cgmon_records_dropped_total")
            + scrape(http, "cgmon_flows_refused_total");
        if w >= per * made as f64 || w == last {
            break;
        }
        last = w;
        // Longer than the files' one-second flush, which is when they count records written.
        std::thread::sleep(Duration::from_millis(1200));
    }
    let cpu = proc_cpu_s(pid).unwrap() - c0;
    let by_thread: Vec<String> = thread_cpu(pid)
        .into_iter()
        .map(|(k, v)| {
            let us = (v - cpu0.get(&k).copied().unwrap_or(0)) as f64 / 1e3 / made as f64;
            format!("{k} {us:.2}")
        })
        .collect();
    stop_floor.store(true, Ordering::Relaxed);
    let (floor_cpu, _events, floor_overruns) = floor_t.join().unwrap();
    let o = Outcome {
        rate: made as f64 / elapsed,
        failures: scrape_sum(http, "cgmon_connect_failures_total{"),
        made,
        cpu_us: cpu / made as f64 * 1e6,
        floor_us: floor_cpu / made as f64 * 1e6,
        written: scrape(http, "cgmon_records_written_total"),
        lost: scrape(http, "cgmon_records_lost_total"),
        dropped: scrape(http, "cgmon_records_dropped_total"),
        refused: scrape(http, "cgmon_flows_refused_total"),
        overruns: scrape(http, "cgmon_destroy_overruns_total"),
        floor_overruns,
        peak_mib: status_mib(pid, "VmHWM:"),
        exact_per_conn: scrape(http, "cgmon_exact_requests_total") / made as f64,
        rss,
        sleeps: sw.join(", "),
        by_thread: by_thread.join(", "),
    };
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    child.wait().unwrap();
    if let Some(mut c) = cat {
        c.wait().unwrap();
    }
    if gzip {
        // What the files hold, after the stop: every record, counted line by line.
        let mut lines = 0;
        for f in std::fs::read_dir(dir.path()).unwrap().flatten() {
            let mut text = String::new();
            flate2::read::MultiGzDecoder::new(std::fs::File::open(f.path()).unwrap())
                .read_to_string(&mut text)
                .unwrap();
            lines += text.lines().count();
        }
        println!("  gzip files after the stop: {lines} records");
    }
    o
}

/// The stdout writer alone (`writer [N]`): N one-sample records (a connection that opened
/// and closed between two dumps), serialized and written to a pipe that `cat` drains to
/// /dev/null, in batches of 64 as the analyzer hands them on; records a second, wall clock
/// from the first batch to the last record written.
fn writer(n: usize) {
    use cgmon_rs::analysis::{AnalyzerConfig, analyze};
    use cgmon_rs::edges::Batch;
    use cgmon_rs::testkit::SockBuilder;
    use cgmon_rs::writer::{Target, Writer, WriterConfig};
    let cfg = AnalyzerConfig::default();
    let mut ended: Vec<_> = (0..n as u64)
        .map(|i| {
            let s = SockBuilder::new(i + 1, 40000 + (i % 20000) as u16, 443).rtt_us(50).cwnd(10);
            cgmon_rs::tracker::testing::ended_flow(&[(1_000_000_000, s)])
        })
        .collect();
    let c0 = thread_cpu_ns();
    let records: Vec<_> = ended.iter_mut().map(|e| analyze(e, &cfg)).collect();
    let analyze_us = (thread_cpu_ns() - c0) as f64 / 1e3 / n as f64;
    let size = serde_json::to_vec(&records[0]).unwrap().len() + 1;
    let mut cat = Command::new("cat").stdin(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
    let pipe = cat.stdin.take().unwrap();
    let m = Arc::new(cgmon_rs::metrics::Metrics::default());
    let wc = WriterConfig {
        target: Target::Stdout,
        pretty: false,
        rotate_size: None,
        rotate_interval: None,
        backlog_bytes: 64 << 20,
    };
    // Named as the monitor names them (services, destinations' fallbacks).
    let dests = Arc::new(std::sync::Mutex::new(cgmon_rs::who::dests::Dests::fallbacks()));
    let namer = cgmon_rs::who::namer::RecordNamer::new(Arc::default(), dests);
    let mut w =
        Writer::to_stream(wc, Box::new(pipe), m.clone()).unwrap().with_naming(Box::new(namer));
    let (t, c0) = (Instant::now(), thread_cpu_ns());
    let mut it = records.into_iter().peekable();
    while it.peek().is_some() {
        let records: Vec<_> = it.by_ref().take(64).collect();
        w.write_batch(Batch { records, ..Batch::default() }).unwrap();
        w.tick(Instant::now()).unwrap();
    }
    let serialize_us = (thread_cpu_ns() - c0) as f64 / 1e3 / n as f64;
    w.close(Duration::from_secs(60)).unwrap();
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(m.records_written.get(), n as u64, "every record written");
    cat.wait().unwrap();
    println!(
        "stdout writer: {n} one-sample records of {size} B in {secs:.2} s: {:.0} records/s; \
         the writer thread's CPU {serialize_us:.2} µs a record; analysis {analyze_us:.2} µs a \
         record",
        n as f64 / secs
    );
}

/// What each gzip level costs on real records (`levels FILE`): CPU per record and bytes per
/// record, compressing the file's lines as the writer does (a record at a time into one
/// stream, `gzip::Gzip`: level 1 is our own encoder, the others flate2's), best
/// of five rounds taken in turn; and beside ours flate2's level 1 (miniz_oxide) and zlib-rs's
/// levels 1–3.
fn levels(path: &str) {
    use cgmon_rs::gzip::Gzip;
    use std::io::Write;
    let text = std::fs::read(path).unwrap();
    let lines: Vec<&[u8]> = text.split_inclusive(|&b| b == b'\n').collect();
    println!(
        "{} records, {:.0} B each uncompressed",
        lines.len(),
        text.len() as f64 / lines.len() as f64
    );
    println!("level | µs per record | bytes per record | ratio");
    let ours = |level| {
        let mut z = Gzip::new(Vec::new(), level);
        for l in &lines {
            z.write_all(l).unwrap();
        }
        z.finish().unwrap().len()
    };
    let flate2_1 = || {
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(1));
        for l in &lines {
            z.write_all(l).unwrap();
        }
        z.finish().unwrap().len()
    };
    // Each stream decodes to the records (ours is checked by its own tests).
    let mut back = Vec::new();
    let z = zlib_rs_gzip(&lines, 1);
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&z[..]), &mut back).unwrap();
    assert!(back == text, "zlib-rs's stream decodes to the records");
    let cases: Vec<(String, Box<dyn Fn() -> usize>)> = [1, 2, 3, 6, 9]
        .into_iter()
        .map(|level| {
            let name = if level == 1 { "1 (ours)".to_string() } else { level.to_string() };
            (name, Box::new(move || ours(level)) as Box<dyn Fn() -> usize>)
        })
        .chain([(
            "1 (flate2: miniz_oxide)".to_string(),
            Box::new(flate2_1) as Box<dyn Fn() -> usize>,
        )])
        .chain([1, 2, 3].map(|level| {
            let lines = &lines;
            let run = move || zlib_rs_gzip(lines, level).len();
            (format!("{level} (zlib-rs)"), Box::new(run) as Box<dyn Fn() -> usize>)
        }))
        .collect();
    // Rounds taken in turn, so that a slow spell of this noisy machine falls on every case
    // alike; the best of each.
    let mut best = vec![f64::INFINITY; cases.len()];
    let mut size = vec![0; cases.len()];
    for _ in 0..5 {
        for (i, (_, run)) in cases.iter().enumerate() {
            let t = thread_cpu_ns();
            size[i] = run();
            best[i] = best[i].min((thread_cpu_ns() - t) as f64 / 1e3 / lines.len() as f64);
        }
    }
    for (i, (name, _)) in cases.iter().enumerate() {
        println!(
            "{name} | {:.2} | {:.0} | {:.1}",
            best[i],
            size[i] as f64 / lines.len() as f64,
            text.len() as f64 / size[i] as f64
        );
    }
}

/// `lines` through zlib-rs's deflate at `level` into one gzip stream, a record at a time as
/// the writer feeds its encoder; the stream's length. zlib-rs is reached through its zlib
/// API (libz-rs-sys), since flate2 takes one backend a build and ours uses miniz_oxide.
fn zlib_rs_gzip(lines: &[&[u8]], level: i32) -> Vec<u8> {
    use libz_rs_sys as z;
    // SAFETY: a zeroed z_stream is what zlib's deflateInit2 expects (no allocator given,
    // so the library's own); every pointer set below points into `line` or `out`, alive
    // and unmoved across the call that reads it, with the lengths given.
    unsafe {
        let mut s: z::z_stream = std::mem::zeroed();
        let size = std::mem::size_of::<z::z_stream>() as i32;
        // Window bits 15 + 16: a gzip wrapper, as ours and flate2's GzEncoder write.
        let rc = z::deflateInit2_(&mut s, level, z::Z_DEFLATED, 31, 8, 0, z::zlibVersion(), size);
        assert_eq!(rc, z::Z_OK);
        let mut out: Vec<u8> = Vec::with_capacity(1 << 20);
        let mut run = |s: &mut z::z_stream, input: &[u8], flush: i32| loop {
            if out.capacity() - out.len() < 64 << 10 {
                out.reserve(1 << 20);
            }
            s.next_in = input.as_ptr().add(input.len() - s.avail_in as usize);
            s.next_out = out.as_mut_ptr().add(out.len());
            s.avail_out = (out.capacity() - out.len()) as u32;
            let before = s.avail_out;
            let rc = z::deflate(s, flush);
            out.set_len(out.len() + (before - s.avail_out) as usize);
            assert!(rc == z::Z_OK || rc == z::Z_STREAM_END || rc == z::Z_BUF_ERROR, "{rc}");
            if rc == z::Z_STREAM_END || (flush != z::Z_FINISH && s.avail_in == 0) {
                break;
            }
        };
        for l in lines {
            s.avail_in = l.len() as u32;
            run(&mut s, l, z::Z_NO_FLUSH);
        }
        s.avail_in = 0;
        run(&mut s, &[], z::Z_FINISH);
        z::deflateEnd(&mut s);
        out
    }
}

/// The IPFIX export's cost on the writer's thread (`ipfix [N]`): encoding one-sample
/// records of loopback connections (both directions, our elements on) into message bodies,
/// in batches of 64 as the writer hands them; ns a record, best of 7 rounds.
fn ipfix(n: usize) {
    use cgmon_rs::analysis::{AnalyzerConfig, analyze};
    use cgmon_rs::ipfix::encode::{EncodeConfig, Encoder};
    use cgmon_rs::testkit::SockBuilder;
    let cfg = AnalyzerConfig::default();
    let records: Vec<_> = (0..n as u64)
        .map(|i| {
            let s = SockBuilder::new(i + 1, 40000 + (i % 20000) as u16, 443)
                .rtt_us(50)
                .cwnd(10)
                .bytes_acked(2001)
                .bytes_received(51)
                .segs(6, 0)
                .segs_in(5);
            analyze(&mut cgmon_rs::tracker::testing::ended_flow(&[(1_000_000_000, s)]), &cfg)
        })
        .collect();
    let mut e =
        Encoder::new(EncodeConfig { pen: Some(32473), message_size: 1400, realtime_offset_ns: 0 });
    let mut best = f64::INFINITY;
    let mut chunks = Vec::new();
    for _ in 0..7 {
        let t = thread_cpu_ns();
        for b in records.chunks(64) {
            chunks.clear();
            e.encode(b, &mut chunks);
        }
        best = best.min((thread_cpu_ns() - t) as f64 / n as f64);
    }
    let bytes: usize = chunks.iter().map(|c| c.sets.len()).sum();
    println!(
        "IPFIX encoding on the writer's thread: {best:.0} ns a record ({} data records, {bytes} B in the last batch's bodies)",
        chunks.iter().map(|c| c.records).sum::<u32>()
    );
}

/// Serialising one-sample records (`ser [N]`): serde_json's compact writer against the
/// writer's (`record::json::write_record`: field by field, the same bytes), ns
/// a record, best of 7 rounds taken in turn.
fn ser(n: usize) {
    use cgmon_rs::analysis::{AnalyzerConfig, analyze};
    use cgmon_rs::testkit::SockBuilder;
    let cfg = AnalyzerConfig::default();
    let records: Vec<_> = (0..n as u64)
        .map(|i| {
            let s = SockBuilder::new(i + 1, 40000 + (i % 20000) as u16, 443).rtt_us(50).cwnd(10);
            analyze(&mut cgmon_rs::tracker::testing::ended_flow(&[(1_000_000_000, s)]), &cfg)
        })
        .collect();
    type Ser = fn(&cgmon_rs::record::FlowStats, &mut Vec<u8>);
    let ways: [(&str, Ser); 2] = [
        ("serde_json", |r, b| serde_json::to_writer(b, r).unwrap()),
        ("write_record (the writer's)", cgmon_rs::record::json::write_record),
    ];
    let mut best = [f64::INFINITY; 2];
    let mut buf = Vec::with_capacity(4096);
    for _ in 0..7 {
        for (i, (_, f)) in ways.iter().enumerate() {
            let t = thread_cpu_ns();
            for r in &records {
                buf.clear();
                f(r, &mut buf);
            }
            best[i] = best[i].min((thread_cpu_ns() - t) as f64 / n as f64);
        }
    }
    for ((name, _), ns) in ways.iter().zip(best) {
        println!("{name}: {ns:.0} ns a record of {} B", buf.len());
    }
}

/// The floor of `whole` as a process of its own (`floor-process`): joins both TCP destroy
/// groups with the monitor's receive buffer (4 MiB, forced when the capability allows) and
/// `recv()`s each datagram as it arrives, blocking, until killed.
fn floor_process() {
    let s = destroy_socket();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let _ = s.recv(&mut &mut buf[..], 0);
    }
}

/// `TcpActiveOpens + TcpPassiveOpens` of this namespace (`/proc/net/snmp`).
fn snmp_opens() -> u64 {
    let text = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let (Some(names), Some(values)) = (tcp.next(), tcp.next()) else { return 0 };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .filter(|(n, _)| *n == "ActiveOpens" || *n == "PassiveOpens")
        .filter_map(|(_, v)| v.parse::<u64>().ok())
        .sum()
}

/// `CHURN_BUSY=N`: the busy-host mode of `whole`, with N client processes (0: off).
fn busy_clients() -> usize {
    std::env::var("CHURN_BUSY").ok().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The machine's cores, for one busy loop each.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, usize::from)
}

/// A client process of the busy-host mode (`churn-client SECS RATE`): churns against a
/// listener of its own (both ends here) at RATE a second (0: as fast as it can) for SECS,
/// and prints how many connections it made.
fn churn_client(secs: u64, rate: u64) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let generator = {
        let stop = stop.clone();
        std::thread::spawn(move || cgmon_rs::testkit::churn(l, a, 2, rate, stop))
    };
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    println!("{}", generator.join().unwrap());
}

/// `whole [SECS] [RUNS] [RATE ...]` (issue 52's measure): the monitor with its defaults
/// (`-run-interval 100ms`, gzip files, naming on, no filter, no HTTP server) and the floor, a separate bare
/// process ([`floor_process`]), both started together in a network namespace of this
/// bench's own; each one's CPU (user + system, /proc/PID/stat) from 1.5 s after their start
/// to 0.6 s after the churn ends. RUNS runs a rate (default 5), in turn; the medians.
fn whole(secs: u64, runs: usize, rates: Vec<u64>) {
    if std::env::var_os("CHURN_NETNS").is_none() {
        // Again, in a network namespace of its own (root), its loopback up.
        let me = std::env::current_exe().unwrap();
        let args: Vec<String> = std::env::args().skip(1).collect();
        let st = Command::new("unshare")
            .args(["--net", "--", "sh", "-c", "ip link set lo up && exec \"$0\" \"$@\""])
            .arg(me)
            .args(args)
            .env("CHURN_NETNS", "1")
            .status()
            .unwrap();
        std::process::exit(st.code().unwrap_or(1));
    }
    println!(
        "rate asked | run | conn/s | monitor µs/conn | floor µs/conn | × floor | records / 2×conns | exit status not 0 | records with a program"
    );
    for rate in rates {
        let mut ratios = Vec::new();
        let mut figures = Vec::new();
        for run in 0..runs {
            let o = whole_run(secs, rate);
            let ratio = o.cpu_us / o.floor_us;
            println!(
                "{} | {} | {:.0} | {:.2} | {:.2} | {ratio:.2} | {}/{} | {} | {}",
                if rate == 0 { "max".to_string() } else { rate.to_string() },
                run + 1,
                o.rate,
                o.cpu_us,
                o.floor_us,
                o.written,
                2 * o.made,
                o.lost,
                o.sleeps,
            );
            println!("  CPU by thread, µs a connection: {}", o.by_thread);
            ratios.push(ratio);
            figures.push((o.cpu_us, o.floor_us, o.rate));
        }
        let med = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "{} | median of {runs} | {:.0} | {:.2} | {:.2} | {:.2} (runs {:.2}–{:.2})",
            if rate == 0 { "max".to_string() } else { rate.to_string() },
            med(figures.iter().map(|f| f.2).collect()),
            med(figures.iter().map(|f| f.0).collect()),
            med(figures.iter().map(|f| f.1).collect()),
            med(ratios.clone()),
            ratios.iter().copied().fold(f64::INFINITY, f64::min),
            ratios.iter().copied().fold(0.0, f64::max),
        );
    }
}

/// One run of `whole`. The monitor runs with its defaults (no HTTP server: nothing asks it
/// anything); what it wrote is counted in its files after it stops.
fn whole_run(secs: u64, rate: u64) -> Outcome {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let me = std::env::current_exe().unwrap();
    let mut floor = Command::new(&me).args(["--bench", "floor-process"]).spawn().unwrap();
    // CHURN_LOG=FILE: the monitor's log there (appended), to see why a record is missing.
    let log = match std::env::var_os("CHURN_LOG") {
        Some(f) => {
            Stdio::from(std::fs::OpenOptions::new().create(true).append(true).open(f).unwrap())
        }
        None => Stdio::null(),
    };
    let mut child = Command::new(monitor_bin())
        .args(["-run-interval", "100ms"])
        .args(["-writer-dir", dir.path().to_str().unwrap(), "-writer-file", "f.json.gz"])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let (pid, fpid) = (child.id(), floor.id());
    std::thread::sleep(Duration::from_millis(1500));
    let (c0, f0) = (proc_cpu_s(pid).unwrap(), proc_cpu_s(fpid).unwrap());
    let cpu0 = thread_cpu(pid);
    let stop = Arc::new(AtomicBool::new(false));
    let opens0 = snmp_opens();
    // CHURN_BUSY=N: a busy host. One busy loop a core beside the monitor, and the churn
    // from N client processes at once (a busy host has many clients; one alone made only
    // 4,500 a second beside the loops), each at RATE / N.
    let busy: Vec<std::process::Child> = match busy_clients() {
        0 => Vec::new(),
        _ => (0..cores())
            .map(|_| Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap())
            .collect(),
    };
    let t = Instant::now();
    let made = match busy_clients() {
        0 => {
            let generator = {
                let stop = stop.clone();
                std::thread::spawn(move || cgmon_rs::testkit::churn(l, a, 4, rate, stop))
            };
            std::thread::sleep(Duration::from_secs(secs));
            stop.store(true, Ordering::Relaxed);
            generator.join().unwrap()
        }
        n => {
            drop(l);
            let per = rate.div_ceil(n as u64);
            let clients: Vec<std::process::Child> = (0..n)
                .map(|_| {
                    Command::new(&me)
                        .args(["--bench", "churn-client", &secs.to_string(), &per.to_string()])
                        .stdout(Stdio::piped())
                        .spawn()
                        .unwrap()
                })
                .collect();
            clients
                .into_iter()
                .map(|c| {
                    let out = c.wait_with_output().unwrap();
                    String::from_utf8_lossy(&out.stdout).trim().parse::<u64>().unwrap_or(0)
                })
                .sum()
        }
    };
    let elapsed = t.elapsed().as_secs_f64();
    for mut b in busy {
        let _ = b.kill();
        let _ = b.wait();
    }
    std::thread::sleep(Duration::from_millis(600));
    let (cpu, floor_cpu) = (proc_cpu_s(pid).unwrap() - c0, proc_cpu_s(fpid).unwrap() - f0);
    let opens = snmp_opens() - opens0;
    let by_thread: Vec<String> = thread_cpu(pid)
        .into_iter()
        .map(|(k, v)| {
            let us = (v - cpu0.get(&k).copied().unwrap_or(0)) as f64 / 1e3 / made as f64;
            format!("{k} {us:.2}")
        })
        .collect();
    let _ = floor.kill();
    let _ = floor.wait();
    // The last events through (the destroy grace), then the stop, which writes the rest.
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let st = child.wait().unwrap();
    let (mut records, mut named) = (0u64, 0u64);
    for f in std::fs::read_dir(dir.path()).unwrap().flatten() {
        let mut text = String::new();
        flate2::read::MultiGzDecoder::new(std::fs::File::open(f.path()).unwrap())
            .read_to_string(&mut text)
            .unwrap();
        for line in text.lines() {
            records += 1;
            named += u64::from(line.contains("\"Pid\":") && !line.contains("\"Pid\":0,"));
        }
    }
    // The kernel's own count of connection ends in this namespace (each connect is an
    // active open, each accept a passive one): the cross-check of records plus losses.
    println!(
        "  kernel: TcpActiveOpens + TcpPassiveOpens grew by {opens} ({} connections made, \
         {records} records written)",
        made
    );
    Outcome {
        rate: made as f64 / elapsed,
        failures: 0.0,
        made,
        cpu_us: cpu / made as f64 * 1e6,
        floor_us: floor_cpu / made as f64 * 1e6,
        written: records as f64,
        // Exit status 1: records were lost or dropped (the log says how many).
        lost: f64::from(u8::from(st.code() != Some(0))),
        dropped: 0.0,
        refused: 0.0,
        overruns: 0.0,
        floor_overruns: 0,
        peak_mib: 0.0,
        exact_per_conn: 0.0,
        rss: Vec::new(),
        sleeps: format!("{named} of {records}"),
        by_thread: by_thread.join(", "),
    }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // `cargo test --all-targets`: a benchmark of minutes, not a test
    }
    let mut a = std::env::args().skip(1).filter(|a| a != "--bench").peekable();
    if a.peek().is_some_and(|x| x == "writer") {
        let n = a.nth(1).map_or(300_000, |v| v.parse().unwrap());
        return writer(n);
    }
    if a.peek().is_some_and(|x| x == "ser") {
        return ser(a.nth(1).map_or(20_000, |v| v.parse().unwrap()));
    }
    if a.peek().is_some_and(|x| x == "ipfix") {
        return ipfix(a.nth(1).map_or(20_000, |v| v.parse().unwrap()));
    }
    if a.peek().is_some_and(|x| x == "levels") {
        let path = a.nth(1).expect("levels FILE: a file of JSON records, one a line");
        return levels(&path);
    }
    if a.peek().is_some_and(|x| x == "floor-process") {
        floor_process();
    }
    if a.peek().is_some_and(|x| x == "churn-client") {
        a.next();
        let secs: u64 = a.next().map_or(10, |v| v.parse().unwrap());
        let rate: u64 = a.next().map_or(0, |v| v.parse().unwrap());
        return churn_client(secs, rate);
    }
    if a.peek().is_some_and(|x| x == "whole") {
        a.next();
        let secs: u64 = a.next().map_or(10, |v| v.parse().unwrap());
        let runs: usize = a.next().map_or(5, |v| v.parse().unwrap());
        let rates: Vec<u64> = a.map(|v| if v == "max" { 0 } else { v.parse().unwrap() }).collect();
        return whole(secs, runs, if rates.is_empty() { vec![2000, 0] } else { rates });
    }
    if a.peek().is_some_and(|x| x == "refused") {
        a.next();
        let secs: u64 = a.next().map_or(10, |v| v.parse().unwrap());
        let rates: Vec<u64> = a.map(|v| v.parse().unwrap()).collect();
        return refused(secs, if rates.is_empty() { vec![10_000] } else { rates });
    }
    let secs: u64 = a.next().map_or(10, |v| v.parse().unwrap());
    let mut rates: Vec<u64> = a.map(|v| if v == "max" { 0 } else { v.parse().unwrap() }).collect();
    if rates.is_empty() {
        rates = vec![0, 2000];
    }
    println!(
        "rate asked | output | conn/s | monitor µs/conn | floor µs/conn | × floor | records / 2×conns | lost | dropped | refused | overruns (monitor, floor) | peak RSS MiB | exact requests/conn"
    );
    for rate in rates {
        // OUTPUT=stdout or gzip: that one only.
        let only = std::env::var("OUTPUT").ok();
        for gzip in [false, true] {
            if only.as_deref().is_some_and(|o| (o == "gzip") != gzip) {
                continue;
            }
            let o = run(secs, rate, gzip, Load::Churn);
            println!(
                "{} | {} | {:.0} | {:.1} | {:.2} | {:.1} | {}/{} ({:.1} %) | {} | {} | {} | {}, {} | {:.1} | {:.2}",
                if rate == 0 { "max".to_string() } else { rate.to_string() },
                if gzip { "gzip" } else { "stdout" },
                o.rate,
                o.cpu_us,
                o.floor_us,
                o.cpu_us / o.floor_us,
                o.written,
                2 * o.made,
                o.written / (2 * o.made) as f64 * 100.0,
                o.lost,
                o.dropped,
                o.refused,
                o.overruns,
                o.floor_overruns,
                o.peak_mib,
                o.exact_per_conn
            );
            let each: Vec<String> = o.rss.iter().map(|m| format!("{m:.0}")).collect();
            println!("  RSS MiB each second: {}", each.join(" "));
            println!("  sleeps (voluntary context switches): {}", o.sleeps);
            println!("  CPU by thread, µs a connection: {}", o.by_thread);
        }
    }
}

/// `refused [SECS] [RATE ...]`: connects refused against churned connections at the same
/// rate, two rounds alternating, gzip files (as a fleet host writes).
fn refused(secs: u64, rates: Vec<u64>) {
    println!(
        "load | rate asked | made/s | monitor µs each | floor µs each | records / expected | dropped | connect failures counted / made | overruns | peak RSS MiB"
    );
    for rate in rates {
        for round in 0..2 {
            for load in [Load::Refused, Load::Churn] {
                let o = run(secs, rate, true, load);
                let (name, per) = if load == Load::Churn { ("churn", 2) } else { ("refused", 1) };
                println!(
                    "{name} (round {}) | {rate} | {:.0} | {:.1} | {:.2} | {}/{} | {} | {}/{} | {}, {} | {:.1}",
                    round + 1,
                    o.rate,
                    o.cpu_us,
                    o.floor_us,
                    o.written,
                    per * o.made,
                    o.dropped,
                    o.failures,
                    if load == Load::Refused { o.made } else { 0 },
                    o.overruns,
                    o.floor_overruns,
                    o.peak_mib
                );
                let each: Vec<String> = o.rss.iter().map(|m| format!("{m:.0}")).collect();
                println!("  RSS MiB each second: {}", each.join(" "));
            }
        }
    }
}
