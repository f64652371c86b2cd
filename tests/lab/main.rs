//! Lab tests: real kernel TCP over a path with known delay, loss and rate (`cgmon_rs::lab`),
//! checked against what the cgmon-rs binary, run inside the sender's namespace with cgmon's
//! flags, reports.
//!
//! They need root. Under `CI=true` a lab that cannot be built is a failure; elsewhere the
//! tests skip with a printed reason. Each prints `LAB <test>: …` lines with the measured
//! values and tolerances (`cargo test --test lab -- --nocapture`).

mod causes;
mod lost;
#[path = "../common/monitor.rs"]
mod monitor;
mod netns;

use std::net::SocketAddr;
use std::time::Duration;

use cgmon_rs::lab::traffic::{Bulk, Reader, Responder, Sent, Sink, exchange, send};
use cgmon_rs::lab::{Lab, LabConfig, Side, addr, in_netns};
use cgmon_rs::testkit::Pair;
use serde_json::Value;

use monitor::Monitor;

const BIN: &str = env!("CARGO_BIN_EXE_cgmon-rs");
const MBIT: u64 = 1_000_000;

/// Runs the lab tests one at a time. The path emulator is user-space threads, so two tests
/// at once on a 2-core machine perturbed each other's paths: a CI run measured 3.94 Mbit/s
/// at 25 ms one-way delay where 7.2–7.8 is usual alone, and failed an ordering check. (A
/// sweep's labs still run together, by design.)
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed holding it leaves it poisoned; the lock itself is still sound.
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Builds a lab, or explains why not (and fails under CI).
fn lab(cfg: LabConfig) -> Option<Lab> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(!ci, "CI=true: lab tests need root (namespaces, TUN, tc)");
        eprintln!("skipped: lab tests need root (namespaces, TUN, tc)");
        return None;
    }
    match Lab::up(cfg) {
        Ok(l) => Some(l),
        Err(e) => {
            assert!(!ci, "CI=true: cannot build the lab: {e}");
            eprintln!("skipped: cannot build the lab: {e}");
            None
        }
    }
}

/// cgmon-rs in A's namespace, watching flows to `port`.
fn monitor(lab: &Lab, interval: &str, extra: &[&str]) -> Monitor {
    let mut c = lab.command(Side::A, BIN);
    c.args(["-run-interval", interval]).args(extra);
    Monitor::spawn(c)
}

fn to(port: u16, v6: bool) -> SocketAddr {
    SocketAddr::new(addr(Side::B, v6), port)
}

/// Sends `bulk` A → B through a fresh sink while a monitor watches, and returns the
/// sender's record and what the generator measured.
/// How late the path emulator may run during a measurement before it is taken again. Its
/// forwarders are ordinary threads: on this shared 2-core machine one lab alone ran
/// 0.3-7.0 ms late at most (10 measurements of one full run), but in a CI run that stalled
/// them a 20 ms RTT path measured 44 ms, and a slow writer's flow was then rightly judged
/// network-limited. (SCHED_FIFO did not help: the stalls hit every lab at once.)
const LATE_LIMIT: Duration = Duration::from_millis(10);

/// A transfer over one lab and its record, taken again (at most twice) when the emulator
/// ran more than [`LATE_LIMIT`] late, since the path was then not the one configured. The
/// assertions apply to the last attempt, whatever its lateness.
fn measured(lab: &Lab, bulk: &Bulk, v6: bool, rcvbuf: Option<usize>) -> (Value, Sent) {
    let (mut recs, sent) = measured_at(lab, bulk, v6, rcvbuf, Reader::Full, &["20ms"]);
    (recs.remove(0), sent)
}

/// As [`measured`], the sink reading as `reader` says, watched by one monitor per sampling
/// interval in `intervals` at once (the same flow, each monitor's record).
fn measured_at(
    lab: &Lab,
    bulk: &Bulk,
    v6: bool,
    rcvbuf: Option<usize>,
    reader: Reader,
    intervals: &[&str],
) -> (Vec<Value>, Sent) {
    let mut attempt = 1;
    loop {
        lab.take_late_max();
        let r = measured_once_at(lab, bulk, v6, rcvbuf, reader, intervals);
        let late = lab.take_late_max();
        eprintln!("LAB emulator late by at most {late:?}");
        if late <= LATE_LIMIT || attempt == 3 {
            return r;
        }
        eprintln!("LAB the path emulator ran {late:?} late (attempt {attempt}): measuring again");
        attempt += 1;
    }
}

fn measured_once(lab: &Lab, bulk: &Bulk, v6: bool, rcvbuf: Option<usize>) -> (Value, Sent) {
    let (mut recs, sent) = measured_once_at(lab, bulk, v6, rcvbuf, Reader::Full, &["20ms"]);
    (recs.remove(0), sent)
}

fn measured_once_at(
    lab: &Lab,
    bulk: &Bulk,
    v6: bool,
    rcvbuf: Option<usize>,
    reader: Reader,
    intervals: &[&str],
) -> (Vec<Value>, Sent) {
    measured_while(lab, bulk, v6, rcvbuf, reader, intervals, &|_| {})
}

/// As [`measured_once_at`], with `during` run on its own thread as the transfer starts (to
/// arm a blackout or a stall in the middle of it).
fn measured_while(
    lab: &Lab,
    bulk: &Bulk,
    v6: bool,
    rcvbuf: Option<usize>,
    reader: Reader,
    intervals: &[&str],
    during: &(dyn Fn(&Lab) + Sync),
) -> (Vec<Value>, Sent) {
    let sink = Sink::start_reading(lab, Side::B, 0, rcvbuf, reader).unwrap();
    let port = sink.port.to_string();
    let ms: Vec<Monitor> =
        intervals.iter().map(|i| monitor(lab, i, &["-netlink-dport", &port])).collect();
    let sent = std::thread::scope(|s| {
        s.spawn(|| during(lab));
        send(lab, Side::A, to(sink.port, v6), bulk).unwrap()
    });
    let recs = ms
        .into_iter()
        .map(|m| {
            let rec = m.records(1, Duration::from_secs(20)).remove(0);
            m.signal(libc::SIGTERM);
            let (st, log, rest) = m.wait(Duration::from_secs(10));
            assert!(st.success(), "{log}");
            assert!(rest.is_empty(), "one flow, one record: {rest:?}");
            rec
        })
        .collect();
    (recs, sent)
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k} missing in {v}"))
}

fn within(x: f64, lo: f64, hi: f64) -> bool {
    (lo..=hi).contains(&x)
}

#[test]
fn min_rtt_is_twice_the_one_way_delay() {
    let _one = one_at_a_time();
    let Some(lab) = lab(LabConfig::default().delay(Duration::from_millis(20))) else { return };
    let (r, _) = measured(&lab, &Bulk::bytes(300_000), false, None);
    let (kernel, observed) = (f(&r, "MinRTTKernelms"), f(&r, "MinRTTObservedms"));
    // Tolerance +10 % / -0 %: the path cannot be faster than its delay; the forwarder and
    // the stack add well under a millisecond, and srtt (Observed) smooths a few samples.
    eprintln!(
        "LAB min_rtt: MinRTTKernelms {kernel:.3}, MinRTTObservedms {observed:.3}; expected 40..44 ms"
    );
    assert!(within(kernel, 40.0, 44.0), "{kernel}");
    assert!(within(observed, 40.0, 44.0), "{observed}");
}

#[test]
fn bulk_throughput_matches_the_bottleneck_and_the_generator_exactly_acked() {
    let _one = one_at_a_time();
    let cfg = LabConfig::default().delay(Duration::from_millis(10)).rate(20 * MBIT, 1 << 20);
    let Some(lab) = lab(cfg) else { return };
    // A 128 KiB receive buffer keeps the window (at most 256 KiB) under the 1 MiB queue:
    // the queue never overflows, and there is no random loss, so nothing is lost at all.
    let bulk = Bulk::for_duration(Duration::from_secs(4)).cc("cubic");
    let (r, sent) = measured(&lab, &bulk, false, Some(128 << 10));
    let tput = f(&r, "SendThroughputMbps");
    eprintln!(
        "LAB bulk: SendThroughputMbps {tput:.2} vs bottleneck 20 (±15 %) and generator {:.2} \
         (±10 %); BytesAcked {} vs {} sent + 2; TotalRetransmits {} (expected 0; queue drops \
         {:?})",
        sent.mbps(),
        r["BytesAcked"],
        sent.bytes,
        r["TotalRetransmits"],
        lab.queue_drops()
    );
    // ±15 %: tbf counts whole IP packets (1448 payload bytes of 1500), and slow start and the
    // final drain are inside the span.
    assert!(within(tput, 17.0, 23.0), "{tput}");
    assert!((tput / sent.mbps() - 1.0).abs() < 0.10, "{tput} vs {}", sent.mbps());
    // Exact: the final counters come from the destroy event; SYN and FIN count one each.
    assert_eq!(r["BytesAcked"].as_u64(), Some(sent.bytes + 2));
    assert_eq!(r["EndReason"], "destroyed");
    assert_eq!(lab.queue_drops().unwrap(), (0, 0), "the queue overflowed: fix the setup");
    assert_eq!(lab.stats_ab().dropped.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_eq!(r["TotalRetransmits"], 0, "{r}");
}

#[test]
fn deep_cubic_queue_raises_rtt_with_cwnd() {
    let _one = one_at_a_time();
    // 10 Mbit/s, 10 ms base RTT, a 500 KB queue (400 ms at the rate): cubic fills it.
    let cfg = LabConfig::default().delay(Duration::from_millis(5)).rate(10 * MBIT, 500_000);
    let Some(lab) = lab(cfg) else { return };
    let (r, _) =
        measured(&lab, &Bulk::for_duration(Duration::from_secs(5)).cc("cubic"), false, None);
    let s: Vec<f64> =
        r["RTTSummary"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    let corr = f(&r, "CorrRTTCwnd");
    eprintln!(
        "LAB deep_queue: RTT p2 {:.1} ms, p98 {:.1} ms (expected p98 > 3 × p2); CorrRTTCwnd \
         {corr:.3} (expected > 0.5)",
        s[0], s[6]
    );
    assert!(s[6] > 3.0 * s[0], "{s:?}");
    assert!(corr > 0.5, "{corr}");
}

/// Runs one bulk transfer in each lab at once (so the steps share the machine's state)
/// and returns each sender's record.
fn sweep(cfgs: Vec<LabConfig>, bulk: &Bulk) -> Option<Vec<Value>> {
    let labs: Vec<Lab> = cfgs.into_iter().map(lab).collect::<Option<_>>()?;
    let recs = std::thread::scope(|s| {
        let hs: Vec<_> =
            labs.iter().map(|l| s.spawn(move || measured_once(l, bulk, false, None).0)).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    Some(recs)
}

#[test]
fn goodput_falls_as_loss_rises() {
    let _one = one_at_a_time();
    let base = LabConfig::default().delay(Duration::from_millis(10)).rate(30 * MBIT, 128 << 10);
    let cfgs = [0.0, 0.01, 0.05]
        .iter()
        .enumerate()
        .map(|(i, &p)| LabConfig { loss_ab: p, seed: 11 + i as u64, ..base.clone() })
        .collect();
    // cubic: BBR is built to ignore random loss this light.
    let Some(r) = sweep(cfgs, &Bulk::for_duration(Duration::from_secs(4)).cc("cubic")) else {
        return;
    };
    let g: Vec<f64> = r.iter().map(|v| f(v, "SendThroughputMbps")).collect();
    let rx: Vec<u64> = r.iter().map(|v| v["TotalRetransmits"].as_u64().unwrap()).collect();
    eprintln!(
        "LAB loss: goodput at 0 %, 1 %, 5 % loss: {g:.2?} Mbit/s (expected strictly lower); \
         TotalRetransmits {rx:?} (expected > 0 with loss)"
    );
    assert!(g[0] > g[1] && g[1] > g[2], "{g:?}");
    assert!(rx[1] > 0 && rx[2] > 0, "{rx:?}");
}

#[test]
fn goodput_falls_as_delay_rises() {
    let _one = one_at_a_time();
    // 0.5 % loss makes the window loss-bound, so goodput follows 1/RTT (Mathis). Reno, not
    // cubic: cubic grows its window with wall-clock time, not with RTTs, on purpose, so its
    // goodput depends on RTT much less. Over 4 s with cubic the 25 and 100 ms steps came out
    // 7.2 and 4.1 Mbit/s here, and one CI run got 3.96 and 3.97 (a step with an early end
    // to slow start or an RTO). Reno over 8 s measured 16.9-18.6 > 4.7-5.1 > 1.8-1.9 (with
    // the CPU busy or idle): far enough apart that one such event cannot swap two steps.
    let base = LabConfig::default().rate(30 * MBIT, 256 << 10);
    let cfgs = [5, 25, 100]
        .iter()
        .enumerate()
        .map(|(i, &ms)| LabConfig {
            loss_ab: 0.005,
            seed: 21 + i as u64,
            ..base.clone().delay(Duration::from_millis(ms))
        })
        .collect();
    let Some(r) = sweep(cfgs, &Bulk::for_duration(Duration::from_secs(8)).cc("reno")) else {
        return;
    };
    let g: Vec<f64> = r.iter().map(|v| f(v, "SendThroughputMbps")).collect();
    eprintln!(
        "LAB delay: goodput at 5, 25, 100 ms one-way delay: {g:.2?} Mbit/s (expected strictly lower)"
    );
    assert!(g[0] > g[1] && g[1] > g[2], "{g:?}");
}

#[test]
fn ipv6_gives_the_same_results_as_ipv4() {
    let _one = one_at_a_time();
    let cfg = LabConfig::default().delay(Duration::from_millis(10)).rate(20 * MBIT, 256 << 10);
    let (Some(l4), Some(l6)) = (lab(cfg.clone()), lab(cfg)) else { return };
    let bulk = Bulk::for_duration(Duration::from_secs(3)).cc("cubic");
    let ((r4, _), (r6, _)) = std::thread::scope(|s| {
        let a = s.spawn(|| measured_once(&l4, &bulk, false, Some(128 << 10)));
        let b = s.spawn(|| measured_once(&l6, &bulk, true, Some(128 << 10)));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(r4["Family"], "inet");
    assert_eq!(r6["Family"], "inet6");
    assert_eq!(r6["ID"]["DstIP"], "2001:db8:b::2");
    let (t4, t6) = (f(&r4, "SendThroughputMbps"), f(&r6, "SendThroughputMbps"));
    let (m4, m6) = (f(&r4, "MinRTTKernelms"), f(&r6, "MinRTTKernelms"));
    eprintln!(
        "LAB ipv6: throughput v4 {t4:.2} / v6 {t6:.2} Mbit/s (within 10 %; v6 headers are 20 B \
         longer), min RTT v4 {m4:.2} / v6 {m6:.2} ms (within 10 %)"
    );
    assert!((t6 / t4 - 1.0).abs() < 0.10, "{t4} {t6}\n{r4}\n{r6}");
    assert!((m6 / m4 - 1.0).abs() < 0.10, "{m4} {m6}");
}

#[test]
fn a_connection_between_two_samples_is_recorded_with_exact_bytes() {
    let _one = one_at_a_time();
    let cfg = LabConfig::default().delay(Duration::from_millis(5)).rate(20 * MBIT, 256 << 10);
    let Some(lab) = lab(cfg) else { return };
    let sink = Sink::start(&lab, Side::B, 0, None).unwrap();
    let port = sink.port.to_string();
    // One dump per second; the first runs at once, before `spawn` returns + 300 ms.
    let m = monitor(&lab, "1s", &["-netlink-dport", &port]);
    let t = std::time::Instant::now();
    let sent =
        send(&lab, Side::A, to(sink.port, false), &Bulk::for_duration(Duration::from_millis(200)))
            .unwrap();
    let lived = t.elapsed();
    let r = m.records(1, Duration::from_secs(10)).remove(0);
    m.signal(libc::SIGTERM);
    let (st, log, _) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{log}");
    eprintln!(
        "LAB between_polls: a {lived:?} connection, {} bytes; record BytesAcked {}, Samples {}, \
         EndReason {}",
        sent.bytes, r["BytesAcked"], r["Samples"], r["EndReason"]
    );
    assert!(lived < Duration::from_millis(650), "the connection must fit between two polls");
    assert_eq!(r["BytesAcked"].as_u64(), Some(sent.bytes + 2));
    assert_eq!(r["EndReason"], "destroyed");
    assert_eq!(r["Samples"], 1, "seen only in its destroy event");
}

#[test]
fn port_flag_and_filter_expression_show_only_the_named_flows() {
    let _one = one_at_a_time();
    let Some(lab) = lab(LabConfig::default().delay(Duration::from_millis(5))) else { return };
    let (s1, s2) = (
        Sink::start(&lab, Side::B, 0, None).unwrap(),
        Sink::start(&lab, Side::B, 0, None).unwrap(),
    );
    let p1 = s1.port.to_string();
    let m1 = monitor(&lab, "20ms", &["-netlink-dport", &p1]);
    let m2 = monitor(&lab, "20ms", &["--filter", &format!("dport {}", s2.port)]);
    std::thread::scope(|s| {
        for port in [s1.port, s2.port] {
            let lab = &lab;
            s.spawn(move || send(lab, Side::A, to(port, false), &Bulk::bytes(200_000)).unwrap());
        }
    });
    let (r1, r2) = (m1.records(1, Duration::from_secs(10)), m2.records(1, Duration::from_secs(10)));
    std::thread::sleep(Duration::from_millis(300));
    for m in [m1, m2] {
        m.signal(libc::SIGTERM);
        let (st, log, rest) = m.wait(Duration::from_secs(10));
        assert!(st.success(), "{log}");
        assert!(rest.is_empty(), "a flow the monitor was not asked for: {rest:?}");
    }
    eprintln!(
        "LAB selection: -netlink-dport {} saw DstPort {}; filter 'dport {}' saw DstPort {}",
        s1.port, r1[0]["ID"]["DstPort"], s2.port, r2[0]["ID"]["DstPort"]
    );
    assert_eq!(r1[0]["ID"]["DstPort"], s1.port);
    assert_eq!(r2[0]["ID"]["DstPort"], s2.port);
}

#[test]
fn ecn_negotiated_end_to_end_sets_the_flag() {
    let _one = one_at_a_time();
    let cfg = LabConfig::default().delay(Duration::from_millis(5));
    let (Some(on), Some(off)) = (lab(cfg.clone()), lab(cfg)) else { return };
    // A requests ECN; B accepts it when asked (the default, tcp_ecn = 2).
    on.sysctl(Side::A, "net.ipv4.tcp_ecn", "1").unwrap();
    off.sysctl(Side::A, "net.ipv4.tcp_ecn", "0").unwrap();
    let (r_on, _) = measured(&on, &Bulk::bytes(500_000), false, None);
    let (r_off, _) = measured(&off, &Bulk::bytes(500_000), false, None);
    eprintln!(
        "LAB ecn: tcp_ecn=1 → ECN {} ECNSeen {}; tcp_ecn=0 → ECN {}",
        r_on["ECN"], r_on["ECNSeen"], r_off["ECN"]
    );
    assert_eq!(r_on["ECN"], true);
    assert_eq!(r_off["ECN"], false);
}

// ---- Diagnosis (issue 7): each verdict, with its numbers ----

fn diagnosis(r: &Value) -> &Value {
    &r["Diagnosis"]
}

fn report(name: &str, r: &Value) {
    let d = diagnosis(r);
    eprintln!(
        "LAB diag {name}: verdict {} ({}) — {}; shares {}; signals {}, {} retransmits; \
         throughput {:.2} Mbit/s; window typical {} of {} largest, closed {} %",
        d["Verdict"],
        d["Cause"],
        d["Finding"],
        d["TimeShares"],
        d["Signals"],
        r["TotalRetransmits"],
        f(r, "SendThroughputMbps"),
        d["Caps"]["TypicalWindowBytes"],
        d["Caps"]["PeerWindowBytes"],
        d["Signals"]["WindowClosedPct"]
    );
}

#[test]
fn diagnosis_small_receive_window_on_a_long_path() {
    let _one = one_at_a_time();
    let Some(lab) = lab(LabConfig::default().delay(Duration::from_millis(25))) else { return };
    let bulk = Bulk::for_duration(Duration::from_secs(4)).cc("cubic");
    let (r, _) = measured(&lab, &bulk, false, Some(16 << 10));
    report("receiver window", &r);
    let d = diagnosis(&r);
    assert_eq!(d["Verdict"], "receiver-window", "{d}");
    let cap = d["Caps"]["WindowCapMbps"].as_f64().unwrap();
    let got = f(&r, "SendThroughputMbps");
    // 10 %: the window cap is what a full window per min RTT carries; the achieved rate
    // also pays for the first RTTs and the close.
    assert!((got / cap - 1.0).abs() < 0.10, "window cap {cap} vs achieved {got}");
}

#[test]
fn diagnosis_slow_writer_is_the_application() {
    let _one = one_at_a_time();
    let Some(lab) = lab(LabConfig::default().delay(Duration::from_millis(10))) else { return };
    // 16 KB every ~160 ms: each write is in flight for one 20 ms RTT, then the
    // connection waits for the application.
    let bulk = Bulk {
        duration: Some(Duration::from_secs(3)),
        pace_bytes_per_s: Some(100_000),
        chunk: 16_384,
        ..Bulk::default()
    };
    let (r, _) = measured(&lab, &bulk, false, None);
    report("slow writer", &r);
    assert_eq!(diagnosis(&r)["Verdict"], "application", "{}", diagnosis(&r));
    assert!(diagnosis(&r)["TimeShares"]["ApplicationPct"].as_f64().unwrap() > 50.0);
}

#[test]
fn diagnosis_narrow_bottleneck_is_the_network() {
    let _one = one_at_a_time();
    // Two bottlenecks with a deep queue, v4 and v6, cubic and bbr, sampled at 10 and 100 ms.
    for (delay_ms, rate, cc, v6) in [(10, 10 * MBIT, "cubic", false), (20, 20 * MBIT, "bbr", true)]
    {
        let cfg = LabConfig::default().delay(Duration::from_millis(delay_ms)).rate(rate, 256 << 10);
        let Some(lab) = lab(cfg) else { return };
        let bulk = Bulk::for_duration(Duration::from_secs(4)).cc(cc);
        let (recs, _) = measured_at(&lab, &bulk, v6, None, Reader::Full, &["10ms", "100ms"]);
        for (r, every) in recs.iter().zip(["10ms", "100ms"]) {
            report(&format!("bottleneck {rate} b/s {cc} v6={v6} every {every}"), r);
            consistent(r);
            let d = diagnosis(r);
            assert_eq!(d["Verdict"], "network", "{every}: {d}");
            assert!(d["Cause"] == "queueing" || d["Cause"] == "loss", "{every}: {d}");
            assert!(d["TimeShares"]["NetworkPct"].as_f64().unwrap() > 50.0);
        }
    }
}

/// The send-buffer row of the issue cannot be produced on this kernel: Linux 6.18 accepts
/// writes far beyond SO_SNDBUF (measured with `ss -tmi` in the lab: tb32768 with
/// w896896, 745 KB unacknowledged), so a small send buffer never limits the flow and the
/// kernel records no sndbuf-limited time. This test checks that the diagnosis reports what
/// the kernel measured (the buffer, and a send-buffer share equal to the kernel's own), and
/// checks the verdict whenever the kernel does report the buffer as the limit. The
/// send-buffer verdict itself is covered by `analyzer::diagnosis` unit tests.
#[test]
fn diagnosis_small_send_buffer_on_a_long_path() {
    let _one = one_at_a_time();
    // BBR, because on this kernel (6.18) a cubic sender's queue overshoots SO_SNDBUF: with
    // 16 KiB asked for (32 KiB granted) it held 212 KB and reached 21.7 Mbit/s at 50 ms, and
    // the kernel counted no send-buffer-limited time. A paced BBR sender is held to it.
    // Two buffers and paths, v4 and v6, sampled at 10 and 100 ms.
    for (delay_ms, sndbuf, v6) in [(50, 16 << 10, false), (25, 32 << 10, true)] {
        let cfg =
            LabConfig::default().delay(Duration::from_millis(delay_ms)).rate(50 * MBIT, 1 << 20);
        let Some(lab) = lab(cfg) else { return };
        let bulk =
            Bulk { sndbuf: Some(sndbuf), ..Bulk::for_duration(Duration::from_secs(4)).cc("bbr") };
        let (recs, _) = measured_at(&lab, &bulk, v6, None, Reader::Full, &["10ms", "100ms"]);
        for (r, every) in recs.iter().zip(["10ms", "100ms"]) {
            report(&format!("send buffer {sndbuf} at {delay_ms} ms v6={v6} every {every}"), r);
            consistent(r);
            let d = diagnosis(r);
            assert_eq!(
                d["Caps"]["SendBufferBytes"],
                2 * sndbuf,
                "SO_SNDBUF, doubled by the kernel"
            );
            let (share, cap) =
                (f(&d["TimeShares"], "SendBufferPct"), f(&d["Caps"], "SendBufferCapMbps"));
            let got = f(r, "SendThroughputMbps");
            let finding = d["Finding"].as_str().unwrap();
            eprintln!(
                "LAB diag send buffer: {share:.1} % send-buffer limited, cap {cap:.2} Mbit/s, reached {got:.2}: {finding}"
            );
            // The cap it names is what it had in flight over the RTT, and the flow was held
            // at it (the lab: 0.89–1.0 of it; the configured size's cap, 2.6 Mbit/s, was
            // exceeded by 13–18 %, and the 64 KiB buffer's, 10.4, never reached).
            let held = named_cap(finding).unwrap_or_else(|| panic!("no cap named: {finding}"));
            assert!(finding.contains("in flight: at"), "{finding}");
            assert!((0.75..=1.1).contains(&(got / held)), "reached {got} of a {held} cap");
            assert_eq!(
                (&d["Verdict"], &d["Cause"]),
                (&Value::from("send-buffer"), &Value::from("small-buffer")),
                "{every}: {d}"
            );
            assert!(share >= 20.0, "the kernel counted {share} % send-buffer-limited time");
            assert!((0.5..=1.5).contains(&(got / cap)), "reached {got} against a cap of {cap}");
            assert!(got < 25.0, "a 50 Mbit/s path, held below it: {got}");
        }
    }
}

/// A policer: the rate enforced by dropping (a queue too short to hold a window), so the
/// sender sees loss and no queueing. It reads as the network, by loss.
#[test]
fn diagnosis_a_policer_is_the_network_by_loss() {
    let _one = one_at_a_time();
    for (rate, delay_ms, v6) in [(10 * MBIT, 10, false), (20 * MBIT, 20, true)] {
        let cfg = LabConfig::default().delay(Duration::from_millis(delay_ms)).rate(rate, 16 << 10);
        let Some(lab) = lab(cfg) else { return };
        let bulk = Bulk::for_duration(Duration::from_secs(4)).cc("cubic");
        let (recs, _) = measured_at(&lab, &bulk, v6, None, Reader::Full, &["10ms", "100ms"]);
        for (r, every) in recs.iter().zip(["10ms", "100ms"]) {
            report(&format!("policer {rate} b/s at {delay_ms} ms v6={v6} every {every}"), r);
            consistent(r);
            let d = diagnosis(r);
            assert_eq!(d["Verdict"], "network", "{every}: {d}");
            assert!(f(&d["Signals"], "LossPct") > 0.0, "{d}");
            assert!(d["Cause"] == "loss" || d["Cause"] == "queueing", "{every}: {d}");
            assert!(f(r, "SendThroughputMbps") <= rate as f64 / 1e6 * 1.05, "{d}");
        }
    }
}

#[test]
fn diagnosis_mathis_bound_tracks_a_lossy_path() {
    let _one = one_at_a_time();
    // Random loss on two paths, v4 and v6, sampled at 10 and 100 ms.
    for (loss, delay_ms, v6) in [(0.02, 10, false), (0.01, 20, true)] {
        let cfg = LabConfig {
            loss_ab: loss,
            seed: 7,
            ..LabConfig::default().delay(Duration::from_millis(delay_ms))
        };
        let Some(lab) = lab(cfg) else { return };
        let bulk = Bulk::for_duration(Duration::from_secs(4)).cc("cubic");
        let (recs, _) = measured_at(&lab, &bulk, v6, None, Reader::Full, &["10ms", "100ms"]);
        for (r, every) in recs.iter().zip(["10ms", "100ms"]) {
            report(&format!("{loss} loss at {delay_ms} ms v6={v6} every {every}"), r);
            consistent(r);
            let d = diagnosis(r);
            let (m, got) = (f(&d["Caps"], "LossCapMbps"), f(r, "SendThroughputMbps"));
            eprintln!(
                "LAB diag mathis: bound {m:.2} Mbit/s, achieved {got:.2} (within a factor of 2)"
            );
            assert!(m / got < 2.0 && got / m < 2.0, "Mathis {m} vs achieved {got}");
            assert_eq!(d["Verdict"], "network", "{every}: {d}");
            assert_eq!(d["Cause"], "loss", "{every}: {d}");
        }
    }
}

/// Checks a diagnosis against its own numbers: a cap the finding names bounds the rate
/// reached, by the rule the diagnosis itself applies (`diagnosis.rs`): a window cap within
/// 10 %, the send buffer's too, and a Mathis bound when it is at least 0.9 × the
/// rate (`mathis_cap`; a 2 % random-loss path once reached 1.103 × its bound, which that
/// rule names a cap and a 1.1 × test called a failure). The verdict and cause are the
/// documented ones.
fn consistent(r: &Value) {
    let d = diagnosis(r);
    let got = f(d, "AchievedMbps");
    let finding = d["Finding"].as_str().unwrap();
    for (mark, cap, tol) in
        [("receiver window", "WindowCapMbps", 1.1), ("(Mathis)", "LossCapMbps", 1.0 / 0.9)]
    {
        if finding.contains(mark) && finding.contains("caps this flow") {
            let c = f(&d["Caps"], cap);
            assert!(got <= c * tol + 1e-9, "{finding}: reached {got} above the cap {c}");
        }
    }
    // The send buffer's cap is what it let the flow have in flight, a figure of the finding
    // alone: read back from its text (rounded to three digits, hence the slack).
    if finding.starts_with("send buffer")
        && let Some(c) = named_cap(finding)
    {
        assert!(got <= c * 1.1 * 1.01, "{finding}: reached {got} above the cap {c}");
    }
    let verdicts = ["receiver-window", "send-buffer", "network", "application", "unknown"];
    assert!(verdicts.contains(&d["Verdict"].as_str().unwrap()), "{d}");
    let causes = cgmon_rs::analysis::diagnosis::CAUSES;
    assert!(d["Cause"].is_null() || causes.contains(&d["Cause"].as_str().unwrap()), "{d}");
}

/// The cap a finding names ("caps this flow at 2.9 Mbit/s"), Mbit/s.
fn named_cap(finding: &str) -> Option<f64> {
    let rest = finding.split("caps this flow at ").nth(1)?;
    let mut words = rest.split_whitespace();
    let n: f64 = words.next()?.parse().ok()?;
    let unit = words.next()?.trim_end_matches([';', ',']);
    let scale = match unit {
        "Gbit/s" => 1000.0,
        "Mbit/s" => 1.0,
        "kbit/s" => 0.001,
        _ => return None,
    };
    Some(n * scale)
}

/// A sender that hands over a fixed amount every 100 ms on a path faster than that: busy
/// only waiting for the acknowledgements of each burst, with no queue and no loss. It was
/// called `network`; it is the application's (issue 37). Two paths, v4 and v6, sampled
/// at 10 and 100 ms by two monitors at once.
#[test]
fn diagnosis_paced_sender_is_the_application_not_the_network() {
    let _one = one_at_a_time();
    for (delay_ms, rate, chunk, v6) in
        [(10, Some(50 * MBIT), 200_000, false), (25, None, 100_000, true)]
    {
        let mut cfg = LabConfig::default().delay(Duration::from_millis(delay_ms));
        if let Some(r) = rate {
            cfg = cfg.rate(r, 1 << 20);
        }
        let Some(lab) = lab(cfg) else { return };
        let bulk = Bulk {
            duration: Some(Duration::from_secs(3)),
            pace_bytes_per_s: Some(chunk as u64 * 10),
            chunk,
            ..Bulk::default()
        };
        let (recs, _) = measured_at(&lab, &bulk, v6, None, Reader::Full, &["10ms", "100ms"]);
        for (r, every) in recs.iter().zip(["10ms", "100ms"]) {
            report(&format!("paced {delay_ms} ms v6={v6} every {every}"), r);
            consistent(r);
            let d = diagnosis(r);
            assert_eq!(d["Verdict"], "application", "{every}: {d}");
            assert!(!d["Finding"].as_str().unwrap().contains("network"), "{d}");
        }
    }
}

/// A receiver window small for the path, reached with no queue and no loss: the window is
/// the verdict, and its cap bounds what the flow reached (an iperf3 `-w 32K` flow over 50 ms
/// at 20 Mbit/s was called `network`). Two windows and paths, v4 and v6, at 10 and 100 ms.
#[test]
fn diagnosis_a_reached_window_cap_is_the_receiver_window() {
    let _one = one_at_a_time();
    for (delay_ms, rate, rcvbuf, v6) in
        [(25, Some(20 * MBIT), 32 << 10, false), (15, None, 64 << 10, true)]
    {
        let mut cfg = LabConfig::default().delay(Duration::from_millis(delay_ms));
        if let Some(r) = rate {
            cfg = cfg.rate(r, 1 << 20);
        }
        let Some(lab) = lab(cfg) else { return };
        let bulk = Bulk::for_duration(Duration::from_secs(3)).cc("cubic");
        let (recs, _) =
            measured_at(&lab, &bulk, v6, Some(rcvbuf), Reader::Full, &["10ms", "100ms"]);
        for (r, every) in recs.iter().zip(["10ms", "100ms"]) {
            report(&format!("window {rcvbuf} at {delay_ms} ms v6={v6} every {every}"), r);
            consistent(r);
            let d = diagnosis(r);
            assert_eq!(d["Verdict"], "receiver-window", "{every}: {d}");
            assert_eq!(d["Cause"], "small-buffer", "{every}: {d}");
        }
    }
}

/// Runs `cmd` (a `diagnose` command: `--json` added when `json`, the filter on the sink's
/// port) while a 2 s transfer goes to `sink`; its stdout, and how long it ran after the
/// transfer began.
fn diagnosed(
    lab: &Lab,
    mut cmd: std::process::Command,
    sink: &Sink,
    json: bool,
) -> (String, Duration) {
    if json {
        cmd.arg("--json");
    }
    let child = cmd
        .args(["dport", &sink.port.to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let t = std::time::Instant::now();
    let bulk = Bulk::for_duration(Duration::from_secs(2)).cc("cubic");
    send(lab, Side::A, to(sink.port, false), &bulk).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8_lossy(&out.stdout).into_owned(), t.elapsed())
}

#[test]
fn diagnose_command_prints_the_limit_of_each_flow_and_stops_when_they_end() {
    let _one = one_at_a_time();
    let Some(lab) = lab(LabConfig::default().delay(Duration::from_millis(25))) else { return };
    let sink = Sink::start(&lab, Side::B, 0, Some(16 << 10)).unwrap();
    for json in [false, true] {
        let mut cmd = lab.command(Side::A, BIN);
        cmd.args(["diagnose", "--seconds", "20"]);
        let (stdout, took) = diagnosed(&lab, cmd, &sink, json);
        assert!(took < Duration::from_secs(8), "it stops once the flow has ended");
        eprintln!("LAB diagnose (json {json}):\n{stdout}");
        if json {
            let r: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
            assert_eq!(r["Diagnosis"]["Verdict"], "receiver-window");
        } else {
            let lines: Vec<&str> = stdout.lines().collect();
            assert!(lines[0].starts_with("FLOW") && lines[0].contains("LIMIT"), "{stdout}");
            assert!(
                lines[1].contains("192.0.2.1") && lines[1].contains("receiver-window"),
                "{stdout}"
            );
            assert!(lines[1].contains("receiver window"), "the finding: {stdout}");
        }
    }
}

/// A receiver that reads slowly: its window is mostly not open to its largest size, so the
/// flow is receiver-window limited far below its window cap, and the finding says to fix the
/// reader, not the buffer (it read as a small buffer before). v4 and v6, at 10 and 100 ms.
#[test]
fn diagnosis_a_slow_reader_is_not_a_small_buffer() {
    let _one = one_at_a_time();
    for (delay_ms, read_kb_s, v6) in [(25, 160, false), (10, 400, true)] {
        let cfg = LabConfig::default().delay(Duration::from_millis(delay_ms));
        let Some(lab) = lab(cfg) else { return };
        let bulk = Bulk::for_duration(Duration::from_secs(4)).cc("cubic");
        let reader = Reader::Paced(read_kb_s * 1000);
        let (recs, _) = measured_at(&lab, &bulk, v6, None, reader, &["10ms", "100ms"]);
        for (r, every) in recs.iter().zip(["10ms", "100ms"]) {
            report(
                &format!("slow reader {read_kb_s} KB/s at {delay_ms} ms v6={v6} every {every}"),
                r,
            );
            consistent(r);
            let d = diagnosis(r);
            assert_eq!(d["Verdict"], "receiver-window", "{every}: {d}");
            assert_eq!(d["Cause"], "slow-reader", "{every}: {d}");
            assert!(d["Finding"].as_str().unwrap().contains("fix the reader"), "{d}");
        }
    }
}

/// Request/response: a client asks for a 100 KB answer every 100 ms (20 ms RTT) or 300 ms
/// (50 ms RTT). The server, the sender, waits for requests most of the time
/// (`application`); the client mostly receives, so its sender is the peer (`unknown`, and
/// its finding says so). v4 and v6, at 10 and 100 ms: one monitor per rate in each
/// namespace. (Asked every 100 ms over 50 ms RTT, each answer takes about as long as the
/// interval, restarting from its initial window after the idle: the server is busy 99 % of
/// the time, and reads as `network`, cause unclear, measured here.)
#[test]
fn diagnosis_request_response_is_the_application_on_the_server() {
    let _one = one_at_a_time();
    for (delay_ms, v6, every_ms) in [(10, false, 100), (25, true, 300)] {
        let Some(lab) = lab(LabConfig::default().delay(Duration::from_millis(delay_ms))) else {
            return;
        };
        let server = Responder::start(&lab, Side::B).unwrap();
        let port = server.port.to_string();
        let watch = |side: Side, flag: &str, every: &str| {
            let mut c = lab.command(side, BIN);
            c.args(["-run-interval", every, flag, &port]);
            Monitor::spawn(c)
        };
        let everies = ["10ms", "100ms"];
        let servers: Vec<Monitor> =
            everies.iter().map(|e| watch(Side::B, "-netlink-sport", e)).collect();
        let clients: Vec<Monitor> =
            everies.iter().map(|e| watch(Side::A, "-netlink-dport", e)).collect();
        let interval = Duration::from_millis(every_ms);
        exchange(&lab, Side::A, to(server.port, v6), 20, 100_000, interval).unwrap();
        for (ms, side) in [(servers, "server"), (clients, "client")] {
            for (m, every) in ms.into_iter().zip(everies) {
                let r = m.records(1, Duration::from_secs(20)).remove(0);
                m.signal(libc::SIGTERM);
                m.wait(Duration::from_secs(10));
                report(
                    &format!("request/response {side} at {delay_ms} ms v6={v6} every {every}"),
                    &r,
                );
                consistent(&r);
                let d = diagnosis(&r);
                if side == "server" {
                    assert_eq!(d["Verdict"], "application", "{every}: {d}");
                } else {
                    assert_eq!(d["Verdict"], "unknown", "{every}: {d}");
                    assert!(
                        d["Finding"].as_str().unwrap().ends_with("the sender is the peer"),
                        "{d}"
                    );
                }
            }
        }
    }
}

/// A reader that stalls: it takes what has arrived, then reads nothing for 300 ms. The
/// window closes while it stalls, which the samples show (`WindowClosedPct`), and the
/// finding says so. v4 and v6, at 10 and 100 ms.
#[test]
fn diagnosis_a_stalling_reader_closes_its_window() {
    let _one = one_at_a_time();
    for (delay_ms, v6) in [(10, false), (25, true)] {
        let Some(lab) = lab(LabConfig::default().delay(Duration::from_millis(delay_ms))) else {
            return;
        };
        let stalls = Reader::Stalls(Duration::from_millis(300));
        let bulk = Bulk::for_duration(Duration::from_secs(4)).cc("cubic");
        let (recs, _) = measured_at(&lab, &bulk, v6, Some(64 << 10), stalls, &["10ms", "100ms"]);
        for (r, every) in recs.iter().zip(["10ms", "100ms"]) {
            report(&format!("stalling reader at {delay_ms} ms v6={v6} every {every}"), r);
            consistent(r);
            let d = diagnosis(r);
            assert_eq!(
                (&d["Verdict"], &d["Cause"]),
                (&Value::from("receiver-window"), &Value::from("slow-reader")),
                "{every}: {d}"
            );
            let closed = f(&d["Signals"], "WindowClosedPct");
            assert!(closed >= 10.0, "{every}: closed {closed} %: {d}");
        }
    }
}

/// `diagnose --netns NAME` from the host diagnoses the flows inside a namespace (a user
/// could not diagnose the lab's flows from outside it), and names the namespace.
#[test]
fn diagnose_from_the_host_sees_into_a_namespace_with_netns() {
    let _one = one_at_a_time();
    let Some(lab) = lab(LabConfig::default().delay(Duration::from_millis(25))) else { return };
    let sink = Sink::start(&lab, Side::B, 0, Some(16 << 10)).unwrap();
    let ns = lab.ns_name(Side::A).to_string();
    for json in [true, false] {
        let mut cmd = std::process::Command::new(BIN); // the host's namespace
        cmd.args(["diagnose", "--seconds", "20", "--netns", &ns]);
        let (stdout, _) = diagnosed(&lab, cmd, &sink, json);
        eprintln!("LAB diagnose --netns {ns} (json {json}):\n{stdout}");
        if json {
            let r: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
            assert_eq!(r["Netns"]["Name"], ns.as_str(), "{r}");
            assert_eq!(r["Diagnosis"]["Verdict"], "receiver-window", "{r}");
        } else {
            let line = stdout.lines().nth(1).unwrap_or_default();
            assert!(line.starts_with(&format!("{ns} 192.0.2.1")), "{stdout}");
        }
    }
}

/// Whether a program is installed (CI installs iperf3; elsewhere its absence skips).
fn have(tool: &str) -> bool {
    std::process::Command::new(tool)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok()
}

#[test]
fn an_iperf3_run_gives_one_record_per_connection_that_agrees_with_iperf3() {
    let _one = one_at_a_time();
    if !have("iperf3") {
        assert!(std::env::var("CI").map_or(true, |v| v != "true"), "CI=true: no iperf3");
        eprintln!("skipped: no iperf3");
        return;
    }
    let cfg = LabConfig::default().delay(Duration::from_millis(25)).rate(20 * MBIT, 256 << 10);
    let Some(lab) = lab(cfg) else { return };
    let port = "5301";
    let b = addr(Side::B, false).to_string();
    let mut server = lab
        .command(Side::B, "iperf3")
        .args(["-s", "-1", "-B", &b, "-p", port])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let m = monitor(&lab, "100ms", &["--filter", &format!("dport {port}")]);
    let out = lab.command(Side::A, "iperf3").args(["-c", &b, "-p", port, "-t", "4", "-J"]).output();
    let out = out.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let _ = server.wait();
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (sent, received) = (&j["end"]["sum_sent"], &j["end"]["sum_received"]);
    let (sent_bytes, recv_bytes) = (f(sent, "bytes"), f(received, "bytes"));
    let recv_mbps = f(received, "bits_per_second") / 1e6;
    // The control connection and the data connection: one record each, no more.
    let mut v = m.records(2, Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(500));
    m.signal(libc::SIGTERM);
    let (st, log, rest) = m.wait(Duration::from_secs(10));
    assert!(st.success(), "{log}");
    v.extend(rest.iter().map(|l| serde_json::from_str::<Value>(l).unwrap()));
    assert_eq!(v.len(), 2, "one record per connection: {v:#?}");
    let data = v.iter().max_by_key(|r| r["BytesAcked"].as_u64().unwrap()).unwrap();
    let acked = f(data, "BytesAcked");
    let mbps = f(data, "SendThroughputMbps");
    // Compared in bytes. In words, the units differ: iperf3's MBytes are binary (2^20
    // bytes) and its Mbits/sec decimal; our pages' MB are SI (10^6), like its rates.
    eprintln!(
        "LAB iperf3: sent {sent_bytes} B, received {recv_bytes} B ({:.2} MBytes as iperf3 \
         prints it, binary; {} as our pages print it, SI) at {recv_mbps:.2} Mbit/s; \
         record: {} ({:?}), {acked} B acked, {mbps:.2} Mbit/s over {} samples",
        recv_bytes / f64::from(1u32 << 20),
        cgmon_rs::units::si_bytes(recv_bytes as u64),
        data["EndReason"],
        data.get("Close"),
        data["Samples"]
    );
    // BytesAcked counts the SYN (and a FIN) besides the data.
    assert!(within(acked, recv_bytes, sent_bytes + 2.0), "{acked} vs [{recv_bytes}, {sent_bytes}]");
    assert!(within(mbps, recv_mbps * 0.85, recv_mbps * 1.15), "{mbps} vs iperf3's {recv_mbps}");
}

#[test]
fn on_a_small_host_the_default_budget_dumps_every_tick_as_budget_zero_does() {
    // A's namespace holds only the 200 sockets made here (and the lab's own listener-free
    // path): dumping them costs far less than 2 % of a 100 ms tick (even in a debug build),
    // so the budget never binds and every tick is a full dump, as with --cpu-budget 0. Two
    // monitors run side by side and must write the same records.
    let _one = one_at_a_time();
    let Some(lab) = lab(LabConfig::default()) else { return };
    let (l, a) = in_netns(lab.ns(Side::A), || {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        let a = l.local_addr()?;
        Ok((l, a))
    })
    .unwrap();
    let tiered = monitor(&lab, "100ms", &[]);
    let every = monitor(&lab, "100ms", &["--cpu-budget", "0"]);
    std::thread::sleep(Duration::from_millis(300));
    let mut pairs: Vec<Pair> =
        in_netns(lab.ns(Side::A), || (0..100).map(|_| Pair::connect(&l, a)).collect()).unwrap();
    for round in 0..8 {
        for (i, p) in pairs.iter_mut().enumerate() {
            p.exchange(1000 + i + round).unwrap();
        }
        std::thread::sleep(Duration::from_millis(60));
    }
    for p in &pairs {
        p.client.shutdown(std::net::Shutdown::Write).unwrap();
    }
    std::thread::sleep(Duration::from_millis(20));
    drop(pairs);
    let ours = |m: &Monitor| {
        let mut v: Vec<Value> = m
            .records(200, Duration::from_secs(10))
            .into_iter()
            .filter(|r| r["ID"]["SrcPort"] == a.port() || r["ID"]["DstPort"] == a.port())
            .collect();
        v.sort_by_key(|r| r["Cookie"].as_u64());
        v
    };
    let (t, e) = (ours(&tiered), ours(&every));
    assert_eq!((t.len(), e.len()), (200, 200));
    let seen = |r: &Value| r["Samples"].as_i64().unwrap() + r["SamplesDeduped"].as_i64().unwrap();
    for (x, y) in t.iter().zip(&e) {
        for k in ["Cookie", "EndReason", "Close", "FinalState", "BytesAcked", "BytesReceived"] {
            assert_eq!(x[k], y[k], "{k}: {x:#} {y:#}");
        }
        // The same socket; each monitor first saw it at its own tick.
        for k in ["SrcIP", "SrcPort", "DstIP", "DstPort"] {
            assert_eq!(x["ID"][k], y["ID"][k]);
        }
        assert_eq!(x["Sampling"]["FromExact"], 0, "no exact polls: {x:#}");
        assert!((seen(x) - seen(y)).abs() <= 2, "{} against {}", seen(x), seen(y));
    }
    eprintln!("LAB small host: 200 records each, identical; samples per flow {}", seen(&t[0]));
    for m in [tiered, every] {
        m.signal(libc::SIGINT);
        assert!(m.wait(Duration::from_secs(10)).0.success());
    }
}

/// The polyline points of `series` in an SVG document.
fn svg_points(doc: &roxmltree::Document, series: &str) -> usize {
    // `data-n`: the samples a polyline draws (held values add corners to its points).
    doc.descendants()
        .filter(|n| n.has_tag_name("polyline") && n.attribute("data-series") == Some(series))
        .map(|n| n.attribute("data-n").and_then(|v| v.parse::<usize>().ok()).unwrap_or(0))
        .sum()
}

#[test]
fn plot_and_report_draw_a_deep_queue_and_a_lossy_path() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let paths = [
        ("deep", LabConfig::default().delay(Duration::from_millis(5)).rate(10 * MBIT, 500_000)),
        (
            "lossy",
            LabConfig {
                loss_ab: 0.02,
                seed: 7,
                ..LabConfig::default().delay(Duration::from_millis(10))
            },
        ),
    ];
    let mut records = Vec::new();
    let mut all_samples = Vec::new();
    for (name, cfg) in paths {
        let Some(lab) = lab(cfg) else { return };
        let sink = Sink::start(&lab, Side::B, 0, None).unwrap();
        let samples = dir.path().join(format!("{name}.ndjson.gz"));
        let port = sink.port.to_string();
        let m = monitor(
            &lab,
            "20ms",
            &["-netlink-dport", &port, "--samples-out", samples.to_str().unwrap()],
        );
        let bulk = Bulk::for_duration(Duration::from_secs(3)).cc("cubic");
        send(&lab, Side::A, to(sink.port, false), &bulk).unwrap();
        let rec = m.records(1, Duration::from_secs(20)).remove(0);
        m.signal(libc::SIGTERM);
        let (st, log, _) = m.wait(Duration::from_secs(10));
        assert!(st.success(), "{log}");
        // The flow's samples, as the file holds them.
        let cookie = rec["Cookie"].as_u64().unwrap();
        let mut with_rtt = 0;
        cgmon_rs::report::read_lines(&samples, false, |v| {
            if v["Cookie"].as_u64() == Some(cookie) && v["RTTms"].is_number() {
                with_rtt += 1;
            }
        })
        .unwrap();
        let svg_path = dir.path().join(format!("{name}.svg"));
        let out = std::process::Command::new(BIN)
            .args([
                "plot",
                "--samples",
                samples.to_str().unwrap(),
                "--cookie",
                &cookie.to_string(),
                "-o",
            ])
            .arg(&svg_path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let svg = std::fs::read_to_string(&svg_path).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{name}.svg: {e}"));
        let drawn = svg_points(&doc, "rtt");
        eprintln!("LAB plot {name}: {with_rtt} samples with an RTT, {drawn} RTT points drawn");
        assert_eq!(drawn, with_rtt, "one RTT point per sample");
        assert!(with_rtt > 50, "{with_rtt}");
        // The lowest sampled RTT is marked, as on the web page; the monitor sampled the
        // flow every tick, so no line breaks for a pause.
        assert!(svg.contains("data-mark=\"minrtt\""), "{name}: no min-RTT line");
        assert!(!svg.contains("data-pause"), "{name}: a pause in a flow sampled every tick");
        if name == "lossy" {
            // Retransmits grow over the flow: the cumulative line ends above where it starts.
            assert!(rec["TotalRetransmits"].as_u64().unwrap() > 0);
            assert!(svg_points(&doc, "retrans") > 0 && svg_points(&doc, "ssthresh") > 0, "{name}");
        }
        records.push(rec);
        all_samples.extend(std::fs::read(&samples).unwrap()); // gzip members concatenate
    }
    let recs = dir.path().join("records.ndjson");
    std::fs::write(&recs, records.iter().map(|r| format!("{r}\n")).collect::<String>()).unwrap();
    let samples = dir.path().join("all.ndjson.gz");
    std::fs::write(&samples, all_samples).unwrap();
    let html = dir.path().join("report.html");
    let out = std::process::Command::new(BIN)
        .args(["report", recs.to_str().unwrap(), "--samples", samples.to_str().unwrap(), "-o"])
        .arg(&html)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&html).unwrap();
    for r in &records {
        // Listed and charted: a flow limited by a window, a buffer or the network that
        // sent at least 1 MiB (the default --min-bytes); the others are only counted.
        let limited = ["receiver-window", "send-buffer", "network"]
            .contains(&r["Diagnosis"]["Verdict"].as_str().unwrap_or(""));
        let listed = limited && r["BytesAcked"].as_u64().unwrap_or(0) >= 1 << 20;
        let id = format!("id=\"flow-{}-{}\"", r["Cookie"], r["Seq"]);
        assert_eq!(text.contains(&id), listed, "{id}: {}", r["Diagnosis"]);
        let chart = format!("id=\"f{}-{}-rtt\"", r["Cookie"], r["Seq"]);
        assert_eq!(text.contains(&chart), listed, "{chart}");
    }
}
