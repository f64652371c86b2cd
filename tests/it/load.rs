//! Load and fault tests of the built binary on loopback: connection churn with every
//! connection accounted for, the HTTP server abused at 20,000 flows, and the output failing
//! in every way the writer knows. Each prints `LOAD …` lines with its figures
//! (`cargo test --test it load:: -- --nocapture`); `churn_for_30_seconds` is the long run
//! (`-- --ignored`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::monitor::Monitor;
use crate::program::{http_addr, http_get, metric};

const BIN: &str = env!("CARGO_BIN_EXE_cgmon-rs");

/// CPU seconds (user + system) of a process so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split_whitespace().collect();
    // SAFETY: sysconf has no preconditions.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / tck
}

/// The churn test's rate: what a busy web or RPC host makes, and well within what a
/// 2-core machine makes beside the monitor (~14,000 a second); the monitor's maximum is a
/// benchmark's business, not a test's.
const CHURN_RATE: u64 = 2_000;

fn churn_for(seconds: u64) {
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let a = l.local_addr().unwrap();
    let filter = crate::program::port_filter(a);
    let mut c = Command::new(BIN);
    c.args(["-run-interval", "100ms", "-run-http-server", "127.0.0.1:0", "--filter", &filter]);
    let m = Monitor::spawn(c);
    let addr = http_addr(&m);
    let cpu0 = cpu_seconds(m.pid());
    let stop = Arc::new(AtomicBool::new(false));
    let t = Instant::now();
    let generator = {
        let stop = stop.clone();
        std::thread::spawn(move || cgmon_rs::testkit::churn(l, a, 2, CHURN_RATE, stop))
    };
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    let made = generator.join().unwrap();
    let elapsed = t.elapsed().as_secs_f64();
    // Let the last destroy events and dumps come in: every flow ended and its record through
    // the channels, so that the counters scraped now are the run's final ones.
    let settle = Instant::now();
    let mut last_written = -1.0;
    let text = loop {
        let text = http_get(&addr, "/metrics");
        let written = metric(&text, "cgmon_records_written_total");
        let idle = metric(&text, "cgmon_flows_active") == 0.0
            && metric(&text, "cgmon_flows_awaiting_destroy") == 0.0
            && metric(&text, "cgmon_writer_backlog_records") == 0.0
            && written == last_written;
        if idle || settle.elapsed() > Duration::from_secs(20) {
            break text;
        }
        last_written = written;
        std::thread::sleep(Duration::from_millis(300));
    };
    let cpu = cpu_seconds(m.pid()) - cpu0;
    m.signal(libc::SIGTERM);
    let (st, log, lines) = m.wait(Duration::from_secs(30));
    let records: Vec<Value> = lines.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut cookies: Vec<u64> = records.iter().map(|r| r["Cookie"].as_u64().unwrap()).collect();
    cookies.sort_unstable();
    cookies.dedup();
    let (lost, dropped, refused, overruns) = (
        metric(&text, "cgmon_records_lost_total") as u64,
        metric(&text, "cgmon_records_dropped_total") as u64,
        metric(&text, "cgmon_flows_refused_total") as u64,
        metric(&text, "cgmon_destroy_overruns_total") as u64,
    );
    eprintln!(
        "LOAD churn {seconds} s: {made} connections ({:.0}/s), {} records for {} sockets, \
         {dropped} dropped, {refused} refused, {lost} lost (backlog full), {overruns} destroy \
         overruns; monitor CPU {cpu:.2} s ({:.0} % of a core)",
        made as f64 / elapsed,
        records.len(),
        2 * made,
        cpu / elapsed * 100.0
    );
    // Exit status 1 exactly when records were lost or dropped (and counted).
    assert_eq!(st.code(), Some(i32::from(lost + dropped > 0)), "{log}");
    assert_eq!(cookies.len(), records.len(), "a socket written twice");
    let rate = made as f64 / elapsed;
    assert!(rate > CHURN_RATE as f64 * 0.8, "the generator kept its pace: {rate:.0}/s");
    let accounted = records.len() as u64 + dropped + refused + lost;
    if overruns > 0 {
        // An overrun does not say how many events it lost, so the identity cannot hold;
        // it is counted, and nothing may be written twice or invented.
        eprintln!("LOAD churn: {overruns} destroy-event overruns; the identity is void this run");
        assert!(accounted <= 2 * made, "{log}");
    } else {
        // Each connection is two sockets: each written once, or counted.
        assert_eq!(accounted, 2 * made, "{log}");
    }
    assert_eq!(lost + dropped, 0, "at {CHURN_RATE}/s nothing is lost: {log}");
}

#[test]
fn churn_every_connection_is_accounted_for_once() {
    churn_for(5);
}

#[test]
#[ignore = "30 s; the figures in the notes come from it"]
fn churn_for_30_seconds() {
    churn_for(30);
}

/// The refused-connect test's rate (issue 51): a client hammering a dead port.
const REFUSED_RATE: u64 = 10_000;

/// VmRSS of a process, KiB.
fn rss_kib(pid: u32) -> u64 {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let l = st.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap();
    l.trim().trim_end_matches(" kB").trim().parse().unwrap()
}

/// Issue 51: 10,000 connects a second refused by a closed port, each a record (`refused`,
/// with its port) and a count in `cgmon_connect_failures_total`, exactly; the attempts
/// leave nothing behind in the tracker, and memory grows only by the bounded output
/// backlog. The records go to gzip files, as a fleet host writes them (to stdout, the
/// test's own reader, starved on a loaded CI machine, held them back). Its CPU an attempt
/// against a churned connection's, and the release build's flat RSS, are the churn bench's
/// (`cargo bench --bench churn -- refused`).
#[test]
fn refused_connects_at_10000_a_second_are_counted_exactly_and_memory_stays_flat() {
    let dead = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let a = dead.local_addr().unwrap();
    drop(dead);
    let dir = tempfile::tempdir().unwrap();
    let filter = crate::program::port_filter(a);
    let mut c = Command::new(BIN);
    c.args(["-run-interval", "100ms", "-run-http-server", "127.0.0.1:0", "--filter", &filter]);
    c.args(["-writer-dir", dir.path().to_str().unwrap(), "-writer-file", "f.json.gz"]);
    let m = Monitor::spawn(c);
    let addr = http_addr(&m);
    let stop = Arc::new(AtomicBool::new(false));
    let t = Instant::now();
    let generator = {
        let stop = stop.clone();
        std::thread::spawn(move || cgmon_rs::testkit::refused_connects(a, 2, REFUSED_RATE, stop))
    };
    let mut rss = Vec::new();
    for _ in 0..4 {
        std::thread::sleep(Duration::from_secs(1));
        rss.push(rss_kib(m.pid()));
    }
    stop.store(true, Ordering::Relaxed);
    let made = generator.join().unwrap();
    let elapsed = t.elapsed().as_secs_f64();
    let failures = |text: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with("cgmon_connect_failures_total{"))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .fold(0.0, |s, v| s + v)
    };
    // Every record through the writer (the files count a record as written when they
    // flush, once a second), or 20 s.
    let settle = Instant::now();
    let text = loop {
        let text = http_get(&addr, "/metrics");
        let written = metric(&text, "cgmon_records_written_total");
        if written >= made as f64 || settle.elapsed() > Duration::from_secs(20) {
            break text;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    let settled = settle.elapsed().as_secs_f64();
    let (dropped, lost, overruns) = (
        metric(&text, "cgmon_records_dropped_total") as u64,
        metric(&text, "cgmon_records_lost_total") as u64,
        metric(&text, "cgmon_destroy_overruns_total") as u64,
    );
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(30));
    let records = gzip_records(dir.path());
    eprintln!(
        "LOAD refused: {made} attempts ({:.0}/s), {} records, {} counted, {dropped} dropped, \
         {lost} lost, {overruns} overruns, settled in {settled:.1} s; RSS KiB each second \
         {rss:?}",
        made as f64 / elapsed,
        records.len(),
        failures(&text),
    );
    assert_eq!(st.code(), Some(i32::from(lost + dropped > 0)), "{log}");
    let refused: Vec<&Value> =
        records.iter().filter(|r| r["Diagnosis"]["Cause"] == "refused").collect();
    assert!(refused.iter().all(|r| r["ID"]["DstPort"] == a.port()));
    if overruns + dropped + lost > 0 {
        // A loaded machine starved the monitor: an overrun does not say how many events
        // it lost, and a dropped batch is not counted. Nothing may be counted twice or
        // invented; the figures are printed.
        eprintln!("LOAD refused: the identity is void this run");
        assert!(failures(&text) <= made as f64 && records.len() as u64 <= made, "{log}");
    } else {
        // Each attempt: one record, `refused`, and one count.
        assert_eq!(refused.len(), records.len(), "{records:#?}");
        assert_eq!(records.len() as u64, made, "a record each");
        assert_eq!(failures(&text), made as f64, "counted exactly\n{text}");
    }
    // Nothing of the attempts stays in the tracker once they are written.
    for gauge in ["cgmon_flows_active", "cgmon_flows_awaiting_destroy", "cgmon_samples_held"] {
        assert_eq!(metric(&text, gauge), 0.0, "{gauge}\n{text}");
    }
    // What grows while the attempts come is what waits for the output: on a loaded machine
    // (this test beside the others) the debug build's gzip writer fell behind by two
    // seconds and RSS grew by 27 MiB; that backlog is bounded by `--writer-backlog` (64 MB
    // of JSON). On an idle machine it grew under 5 MiB, and the release build held 12–15
    // MiB through 300,000 attempts (`cargo bench --bench churn -- refused 30 10000`).
    let growth = rss.iter().max().unwrap() - rss[0];
    assert!(growth < 64 << 10, "RSS grew {growth} KiB: {rss:?}");
}

/// Every record in the gzip files of `dir`.
fn gzip_records(dir: &std::path::Path) -> Vec<Value> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let mut text = String::new();
        flate2::read::MultiGzDecoder::new(std::fs::File::open(&p).unwrap())
            .read_to_string(&mut text)
            .unwrap();
        out.extend(text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()));
    }
    out
}

/// Holds `CGMON_TEST_HOLD=addr,n` connections: with `listen` in the spec, accepts them on a
/// new listener and prints its port; else connects them. Waits for stdin to close.
#[test]
#[ignore = "a helper, run by the HTTP abuse test as a child"]
fn hold_connections_helper() {
    let spec = std::env::var("CGMON_TEST_HOLD").expect("run only by the HTTP abuse test");
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid rlimit pointers; raising the soft limit to the hard one.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    let mut it = spec.split(',');
    let (what, n) = (it.next().unwrap(), it.next().unwrap().parse::<usize>().unwrap());
    let mut held = Vec::with_capacity(n);
    if what == "listen" {
        let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
        println!("\nADDR {}", l.local_addr().unwrap());
        std::io::stdout().flush().unwrap();
        for _ in 0..n {
            held.push(l.accept().unwrap().0);
        }
    } else {
        let a: SocketAddr = what.parse().unwrap();
        for _ in 0..n {
            held.push(TcpStream::connect(a).unwrap());
        }
    }
    println!("\nHELD");
    std::io::stdout().flush().unwrap();
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}

fn helper(spec: String) -> (std::process::Child, std::io::BufReader<std::process::ChildStdout>) {
    let mut c = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "load::hold_connections_helper", "--ignored", "--nocapture"])
        .env("CGMON_TEST_HOLD", spec)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(c.stdout.take().unwrap());
    (c, out)
}

fn line_with(out: &mut impl std::io::BufRead, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the helper ended before {prefix:?}");
        if let Some(rest) = line.strip_prefix(prefix) {
            return rest.trim().to_string();
        }
    }
}

/// A GET that returns "" when the server closes the connection (as over its cap).
fn try_get(addr: &str, path: &str) -> String {
    let Ok(mut s) = TcpStream::connect(addr) else { return String::new() };
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut out = String::new();
    if s.write_all(req.as_bytes()).is_err() || s.read_to_string(&mut out).is_err() {
        return String::new();
    }
    out
}

fn rss_bytes(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    kb * 1024
}

#[test]
fn http_abuse_at_20000_flows_leaves_sampling_and_the_bounds_alone() {
    const PAIRS: usize = 10_000;
    let (mut server, mut sout) = helper(format!("listen,{PAIRS}"));
    let a: SocketAddr = line_with(&mut sout, "ADDR ").parse().unwrap();
    let (mut client, mut cout) = helper(format!("{a},{PAIRS}"));
    line_with(&mut cout, "HELD");
    line_with(&mut sout, "HELD");
    let filter = crate::program::port_filter(a);
    let mut c = Command::new(BIN);
    c.args(["-run-interval", "500ms", "-run-http-server", "127.0.0.1:0", "--filter", &filter]);
    c.args(["--http-header-timeout", "2s"]);
    let m = Monitor::spawn(c);
    let addr = http_addr(&m);
    std::thread::sleep(Duration::from_secs(2));
    let before = http_get(&addr, "/metrics");
    assert_eq!(metric(&before, "cgmon_flows_active"), (2 * PAIRS) as f64);
    let (fd0, rss0) =
        (std::fs::read_dir(format!("/proc/{}/fd", m.pid())).unwrap().count(), rss_bytes(m.pid()));
    let overruns0 = metric(&before, "cgmon_ticks_overrun_total");
    // 500 slow clients, each sending half a request; then 50 clients paging through
    // /flows at once, retrying when turned away.
    let t = Instant::now();
    let mut slow: Vec<TcpStream> = Vec::new();
    for _ in 0..500 {
        let mut s = TcpStream::connect(&addr).unwrap();
        let _ = s.write_all(b"GET /flows HTTP/1.1\r\nHost: x\r\n");
        slow.push(s);
    }
    let pagers: Vec<_> = (0..50)
        .map(|i| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                // Each asks for one page (the default, 1,000 flows); one of them walks every
                // page. Turned away (the cap, or 429), it retries.
                let (mut flows, mut refused) = (0usize, 0u32);
                let mut after: Option<u64> = None;
                let end = Instant::now() + Duration::from_secs(60);
                while Instant::now() < end {
                    let path = match after {
                        Some(a) => format!("/flows?after={a}"),
                        None => "/flows".to_string(),
                    };
                    let r = try_get(&addr, &path);
                    if !r.starts_with("HTTP/1.1 200") {
                        assert!(!r.starts_with("HTTP/1.1 503"), "{r}");
                        refused += 1;
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    }
                    let body: Vec<Value> =
                        serde_json::from_str(r.split("\r\n\r\n").nth(1).unwrap()).unwrap();
                    flows += body.len();
                    match body.last() {
                        Some(last) if i == 0 && body.len() == 1000 => {
                            after = last["Cookie"].as_u64()
                        }
                        _ => return (flows, refused),
                    }
                }
                panic!("a pager did not finish in 60 s ({flows} flows, {refused} turned away)");
            })
        })
        .collect();
    let mut fd_max = 0;
    let mut rss_max = 0;
    while t.elapsed() < Duration::from_secs(4) {
        fd_max = fd_max.max(std::fs::read_dir(format!("/proc/{}/fd", m.pid())).unwrap().count());
        rss_max = rss_max.max(rss_bytes(m.pid()));
        std::thread::sleep(Duration::from_millis(50));
    }
    let results: Vec<(usize, u32)> = pagers.into_iter().map(|p| p.join().unwrap()).collect();
    // Every slow client was closed: by the cap at once, or by the header timeout.
    let mut open = 0;
    for s in &mut slow {
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut b = [0u8; 64];
        if let Err(e) = s.read(&mut b)
            && matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
        {
            open += 1;
        }
    }
    let after = http_get(&addr, "/metrics");
    let overruns = metric(&after, "cgmon_ticks_overrun_total") - overruns0;
    // The interval's jitter: how late dumps started, before and during the load.
    let late = |t: &str| {
        (
            metric(t, "cgmon_tick_lateness_seconds_sum"),
            metric(t, "cgmon_tick_lateness_seconds_count"),
        )
    };
    let late_over_10ms =
        |t: &str| late(t).1 - metric(t, "cgmon_tick_lateness_seconds_bucket{le=\"0.01\"}");
    let (s0, n0) = late(&before);
    let (s1, n1) = late(&after);
    let (mean_before, mean_during) = (s0 / n0.max(1.0), (s1 - s0) / (n1 - n0).max(1.0));
    let late_ticks = late_over_10ms(&after) - late_over_10ms(&before);
    eprintln!(
        "LOAD tick lateness: mean {:.2} ms before, {:.2} ms during the load ({} ticks); \
         {late_ticks} ticks over 10 ms late during it",
        mean_before * 1e3,
        mean_during * 1e3,
        n1 - n0
    );
    eprintln!(
        "LOAD http abuse: 500 slow + 50 pagers at 20,000 flows: fds {fd0} → max {fd_max}, \
         RSS {:.1} → max {:.1} MiB, {overruns} tick overruns, pagers turned away {} times, \
         {} slow still open after {:?}, {} refused at the cap, {} timed out",
        rss0 as f64 / 1048576.0,
        rss_max as f64 / 1048576.0,
        results.iter().map(|r| r.1).sum::<u32>(),
        open,
        t.elapsed(),
        metric(&after, "cgmon_http_refused_total"),
        metric(&after, "cgmon_http_timeouts_total"),
    );
    assert_eq!(results[0].0, 2 * PAIRS, "the walker saw every flow");
    assert!(results[1..].iter().all(|r| r.0 == 1000), "a page each: {results:?}");
    assert_eq!(open, 0, "slow clients still open");
    // The cap, plus connections told to give way that are still closing (at most 8).
    assert!(fd_max <= fd0 + 64 + 8 + 2, "fds {fd0} → {fd_max}");
    assert!(rss_max < rss0 + (200 << 20), "RSS {rss0} → {rss_max}");
    assert_eq!(overruns, 0.0, "the HTTP load delayed sampling");
    assert!(mean_during < 0.010, "dumps started {mean_during} s late on average under load");
    m.signal(libc::SIGTERM);
    m.wait(Duration::from_secs(20));
    drop(server.stdin.take());
    drop(client.stdin.take());
    let _ = (server.wait(), client.wait());
}

/// Every record in the files of `dirs` (gzip or not), by cookie.
fn cookies_in(dirs: &[PathBuf]) -> Vec<u64> {
    let mut out = Vec::new();
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(d) else { continue };
        for e in rd.flatten() {
            let raw = std::fs::read(e.path()).unwrap();
            let mut text = Vec::new();
            flate2::read::MultiGzDecoder::new(&raw[..]).read_to_end(&mut text).unwrap();
            for v in serde_json::Deserializer::from_slice(&text).into_iter::<Value>() {
                out.push(v.unwrap()["Cookie"].as_u64().unwrap());
            }
        }
    }
    out.sort_unstable();
    out
}

fn connect_some(l: &TcpListener, a: SocketAddr, n: usize) {
    for _ in 0..n {
        let mut p = cgmon_rs::testkit::Pair::connect(l, a).unwrap();
        p.exchange(200).unwrap();
    }
}

#[test]
fn output_faults_lose_nothing_the_backlog_holds() {
    let top = tempfile::tempdir().unwrap();
    let dir = top.path().join("out");
    std::fs::create_dir(&dir).unwrap();
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let a = l.local_addr().unwrap();
    let mut c = Command::new(BIN);
    c.args(["-run-interval", "50ms", "-writer-dir", dir.to_str().unwrap()]);
    c.args(["-writer-file", "f.json.gz", "-run-http-server", "127.0.0.1:0"]);
    c.args(["--filter", &format!("dst {} and dport {}", a.ip(), a.port())]);
    let m = Monitor::spawn(c);
    let addr = http_addr(&m);
    let mut made = 0;
    let step = |n: usize, made: &mut usize| {
        connect_some(&l, a, n);
        *made += n;
        std::thread::sleep(Duration::from_millis(400));
    };
    step(5, &mut made);
    // 1. The directory goes away; SIGHUP; records pile up; it comes back.
    let away = top.path().join("away");
    std::fs::rename(&dir, &away).unwrap();
    m.signal(libc::SIGHUP);
    step(5, &mut made);
    let failing = http_get(&addr, "/healthz");
    assert!(failing.starts_with("HTTP/1.1 503") && failing.contains("output failing"), "{failing}");
    std::fs::create_dir(&dir).unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let healthy = http_get(&addr, "/healthz");
    assert!(healthy.starts_with("HTTP/1.1 200"), "{healthy}");
    // 2. The file is moved and a symlink put in its place; SIGHUP; the symlink goes.
    std::fs::rename(dir.join("f.json.gz"), away.join("moved.json.gz")).unwrap();
    let target = top.path().join("target");
    std::os::unix::fs::symlink(&target, dir.join("f.json.gz")).unwrap();
    m.signal(libc::SIGHUP);
    step(5, &mut made);
    assert!(!target.exists(), "the symlink was followed");
    std::fs::remove_file(dir.join("f.json.gz")).unwrap();
    std::thread::sleep(Duration::from_millis(600));
    // 3. A storm: 100 SIGHUPs in a second, while flows end.
    for i in 0..100 {
        m.signal(libc::SIGHUP);
        if i % 20 == 0 {
            connect_some(&l, a, 1);
            made += 1;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(500));
    let text = http_get(&addr, "/metrics");
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(20));
    assert!(st.success(), "{log}");
    assert!(!log.contains("panicked"), "{log}");
    let cookies = cookies_in(&[dir.clone(), away.clone()]);
    let mut unique = cookies.clone();
    unique.dedup();
    eprintln!(
        "LOAD output faults: {made} flows made, {} records in the files, {} write errors, {} rotations",
        cookies.len(),
        metric(&text, "cgmon_write_errors_total"),
        metric(&text, "cgmon_rotations_total")
    );
    assert_eq!(unique.len(), cookies.len(), "a record written twice");
    assert_eq!(cookies.len(), made, "every flow's record, none lost:\n{log}");
    assert_eq!(metric(&text, "cgmon_records_lost_total"), 0.0);
    assert!(metric(&text, "cgmon_write_errors_total") >= 2.0, "the faults were seen");
    // The storm of 100 signals rotated a few times, not 100.
    assert!(
        metric(&text, "cgmon_rotations_total") < 40.0,
        "{}",
        metric(&text, "cgmon_rotations_total")
    );
}
