//! The second question (issue 51): each cause built on purpose, with the kernel's own
//! counters (`nstat` in the lab's namespaces, the socket's `tcp_info`) checked first, so a
//! lab that failed to build its case fails instead of passing vacuously. Every case is
//! watched at 10 ms and at 100 ms sampling by two monitors at once.

use std::collections::BTreeMap;
use std::time::Duration;

use cgmon_rs::lab::traffic::{Bulk, Reader};
use cgmon_rs::lab::{Impair, Lab, LabConfig, Side};
use serde_json::Value;

use super::{MBIT, consistent, diagnosis, f, lab, measured_while, one_at_a_time, report};

const EVERY: [&str; 2] = ["10ms", "100ms"];

/// The growth of the named counters in `side`'s namespace while `run` ran.
fn counted<T>(lab: &Lab, side: Side, run: impl FnOnce() -> T) -> (T, BTreeMap<String, u64>) {
    let before = lab.nstat(side).expect("nstat");
    let out = run();
    let after = lab.nstat(side).expect("nstat");
    let grew = after
        .iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(before.get(k).copied().unwrap_or(0))))
        .filter(|(_, v)| *v > 0)
        .collect();
    (out, grew)
}

fn n(c: &BTreeMap<String, u64>, k: &str) -> u64 {
    c.get(k).copied().unwrap_or(0)
}

/// Both records' verdict and cause.
fn assert_cause(recs: &[Value], verdict: &str, cause: &str, what: &str) {
    for (r, every) in recs.iter().zip(EVERY) {
        report(&format!("{what} every {every}"), r);
        consistent(r);
        let d = diagnosis(r);
        assert_eq!(
            (d["Verdict"].as_str(), d["Cause"].as_str()),
            (Some(verdict), Some(cause)),
            "{what} every {every}: {d}"
        );
    }
}

/// A link that goes dark for 1.5 s in the middle of a transfer: the sender's
/// retransmission timer fires, backing off, until the link returns. `network`/`timeouts`.
#[test]
fn diagnosis_a_blackout_is_the_network_by_timeouts() {
    let _one = one_at_a_time();
    for (delay_ms, v6) in [(10, false), (25, true)] {
        let cfg =
            LabConfig::default().delay(Duration::from_millis(delay_ms)).rate(20 * MBIT, 256 << 10);
        let Some(lab) = lab(cfg) else { return };
        let bulk = Bulk::for_duration(Duration::from_secs(5)).cc("cubic");
        let arm = |l: &Lab| {
            std::thread::sleep(Duration::from_millis(1500));
            l.live_ab().blackout(Duration::from_millis(1500));
            l.live_ba().blackout(Duration::from_millis(1500));
        };
        // A blackout loses what it holds. A CI run's v6 path once delivered it late
        // instead (144 of 275 retransmits came back as DSACKs, so the monitor rightly said
        // `spurious`): the kernel's counters say the lab did not build the case, and it is
        // built once more.
        for attempt in 1..=2 {
            let ((recs, _), grew) = counted(&lab, Side::A, || {
                measured_while(&lab, &bulk, v6, None, Reader::Full, &EVERY, &arm)
            });
            eprintln!("LAB blackout {delay_ms} ms v6={v6}: nstat A {grew:?}");
            let (dsacks, sent_again) = (n(&grew, "TcpExtTCPDSACKRecv"), n(&grew, "TcpRetransSegs"));
            if attempt == 1 && dsacks * 4 > sent_again {
                eprintln!(
                    "LAB blackout {delay_ms} ms v6={v6}: {dsacks} DSACKs for {sent_again} retransmits: delayed, not lost; built again"
                );
                continue;
            }
            assert!(dsacks * 4 <= sent_again, "delayed, not lost, twice: {grew:?}");
            assert!(n(&grew, "TcpExtTCPTimeouts") >= 2, "the blackout made no timeouts: {grew:?}");
            assert_cause(&recs, "network", "timeouts", &format!("blackout {delay_ms} ms v6={v6}"));
            break;
        }
    }
}

/// The path holds every packet for 800 ms, then delivers them all: nothing is lost, but the
/// sender's timer fires first and it sends again what was only late. `network`/`spurious`.
#[test]
fn diagnosis_a_delay_spike_is_the_network_by_spurious_retransmits() {
    let _one = one_at_a_time();
    for (delay_ms, v6) in [(10, false), (25, true)] {
        // A queue that holds BBR's startup (about twice the path's 125 KB at 25 ms).
        let cfg =
            LabConfig::default().delay(Duration::from_millis(delay_ms)).rate(20 * MBIT, 1 << 20);
        let Some(lab) = lab(cfg) else { return };
        // BBR: it keeps the bottleneck's queue short, so that nothing but the spikes
        // delays or drops a packet (cubic filled the queue and lost from it).
        let bulk = Bulk::for_duration(Duration::from_secs(5)).cc("bbr");
        let arm = |l: &Lab| {
            for _ in 0..2 {
                std::thread::sleep(Duration::from_millis(1200));
                l.live_ab().stall(Duration::from_millis(800));
            }
        };
        let ((recs, _), grew) = counted(&lab, Side::A, || {
            measured_while(&lab, &bulk, v6, None, Reader::Full, &EVERY, &arm)
        });
        eprintln!("LAB delay spike {delay_ms} ms v6={v6}: nstat A {grew:?}");
        assert!(n(&grew, "TcpExtTCPTimeouts") >= 1, "the spike made no timeout: {grew:?}");
        assert!(n(&grew, "TcpExtTCPDSACKRecv") >= 1, "no DSACK came back: {grew:?}");
        assert_eq!(lab.stats_ab().dropped.load(std::sync::atomic::Ordering::Relaxed), 0);
        assert_cause(&recs, "network", "spurious", &format!("delay spike {delay_ms} ms v6={v6}"));
    }
}

/// One packet in 50 arrives 4 ms after those sent behind it. `network`/`reordering`.
#[test]
fn diagnosis_a_reordering_path_is_the_network_by_reordering() {
    let _one = one_at_a_time();
    for (delay_ms, v6) in [(10, false), (25, true)] {
        let mut cfg =
            LabConfig::default().delay(Duration::from_millis(delay_ms)).rate(20 * MBIT, 256 << 10);
        cfg.impair_ab =
            Impair { reorder: 0.02, reorder_by: Duration::from_millis(4), ..Impair::default() };
        let Some(lab) = lab(cfg) else { return };
        let bulk = Bulk::for_duration(Duration::from_secs(4)).cc("cubic");
        let ((recs, _), grew) = counted(&lab, Side::A, || {
            measured_while(&lab, &bulk, v6, None, Reader::Full, &EVERY, &|_| {})
        });
        eprintln!("LAB reordering {delay_ms} ms v6={v6}: nstat A {grew:?}");
        let reorders: u64 =
            grew.iter().filter(|(k, _)| k.contains("Reorder")).map(|(_, v)| v).sum();
        assert!(reorders >= 1, "the kernel saw no reordering: {grew:?}");
        assert_cause(&recs, "network", "reordering", &format!("reordering {delay_ms} ms v6={v6}"));
    }
}

/// A bottleneck that marks CE on packets that queued over 5 ms, with a queue deep enough
/// that nothing is dropped, and an ECN-capable cubic sender. `network`/`ecn`.
#[test]
fn diagnosis_ce_marks_without_loss_are_the_network_by_ecn() {
    let _one = one_at_a_time();
    for (delay_ms, v6) in [(10, false), (25, true)] {
        let mut cfg = LabConfig::default().delay(Duration::from_millis(delay_ms));
        cfg.impair_ab = Impair {
            rate_bps: Some(20 * MBIT),
            queue_bytes: 4 << 20,
            ce_after: Some(Duration::from_millis(5)),
            ..Impair::default()
        };
        let Some(lab) = lab(cfg) else { return };
        lab.sysctl(Side::A, "net.ipv4.tcp_ecn", "1").unwrap();
        let bulk = Bulk::for_duration(Duration::from_secs(4)).cc("cubic");
        let ((recs, _), grew) = counted(&lab, Side::A, || {
            measured_while(&lab, &bulk, v6, None, Reader::Full, &EVERY, &|_| {})
        });
        let marked = lab.stats_ab().ce_marked.load(std::sync::atomic::Ordering::Relaxed);
        eprintln!("LAB ecn {delay_ms} ms v6={v6}: {marked} marked; nstat A {grew:?}");
        assert!(marked > 0, "the bottleneck marked nothing");
        assert!(n(&grew, "TcpExtTCPDeliveredCE") > 0, "the sender heard of no CE: {grew:?}");
        assert_eq!(lab.stats_ab().queue_dropped.load(std::sync::atomic::Ordering::Relaxed), 0);
        assert_cause(&recs, "network", "ecn", &format!("ecn {delay_ms} ms v6={v6}"));
    }
}

/// Links with a 576-byte MTU: the sender's MSS is 536, against 1,460 on an Ethernet path.
/// `network`/`small-mss`.
#[test]
fn diagnosis_a_small_mtu_is_the_network_by_small_mss() {
    let _one = one_at_a_time();
    let mut cfg = LabConfig::default().delay(Duration::from_millis(10)).rate(20 * MBIT, 256 << 10);
    cfg.mtu = Some(576);
    let Some(lab) = lab(cfg) else { return };
    let bulk = Bulk::for_duration(Duration::from_secs(4)).cc("cubic");
    // The case is a small MSS on a lossy bottleneck: the rule names `small-mss` when loss
    // (whose Mathis bound scales with the MSS) or no queue shows. What the lab built is
    // read from the kernel's counters, not assumed: on a machine loaded by other labs the
    // user-space path can fall behind the 20 Mbit/s it emulates, so that the queue fills
    // without a drop, or a stall fires the sender's timer (then `queueing` or `timeouts`
    // is the right answer for what was built). Such a run is built once more; two that
    // build neither loss nor a clean run fail, saying what the kernel counted.
    for attempt in 1..=3 {
        let ((recs, _), grew) = counted(&lab, Side::A, || {
            measured_while(&lab, &bulk, false, None, Reader::Full, &EVERY, &|_| {})
        });
        eprintln!("LAB mtu 576 attempt {attempt}: nstat A {grew:?}");
        let (lost, rtos) = (n(&grew, "TcpRetransSegs"), n(&grew, "TcpExtTCPTimeouts"));
        if (lost == 0 || rtos > 0) && attempt < 3 {
            eprintln!(
                "LAB mtu 576: {lost} retransmits, {rtos} timeouts: not the case; built again"
            );
            continue;
        }
        assert!(lost > 0 && rtos == 0, "the lab built no clean loss thrice: {grew:?}");
        for r in &recs {
            let mss = f(&diagnosis(r)["Signals"], "MSS");
            assert!(mss <= 536.0, "the kernel's MSS is {mss}, not the small MTU's");
        }
        assert_cause(&recs, "network", "small-mss", "mtu 576");
        break;
    }
}

/// The receiver's namespace has window scaling off: its window can never pass 64 KB, which
/// on a 50 ms path caps the flow near 10 Mbit/s. `receiver-window`/`no-window-scaling`.
#[test]
fn diagnosis_no_window_scaling_is_the_receiver_window() {
    let _one = one_at_a_time();
    for v6 in [false, true] {
        let cfg = LabConfig::default().delay(Duration::from_millis(25));
        let Some(lab) = lab(cfg) else { return };
        lab.sysctl(Side::B, "net.ipv4.tcp_window_scaling", "0").unwrap();
        let bulk = Bulk::for_duration(Duration::from_secs(4)).cc("cubic");
        let (recs, _) = measured_while(&lab, &bulk, v6, None, Reader::Full, &EVERY, &|_| {});
        for r in &recs {
            let d = diagnosis(r);
            assert_eq!(d["Signals"]["WindowScaling"], false, "scaling was negotiated: {d}");
            assert!(f(&d["Caps"], "PeerWindowBytes") <= 65_535.0, "{d}");
        }
        assert_cause(&recs, "receiver-window", "no-window-scaling", &format!("no wscale v6={v6}"));
    }
}

/// SYNs dropped for the first 1.5 s: the connection is set up on the third SYN, 2 s late,
/// then sends 200 KB in a fraction of that. `network`/`syn-retransmit`.
#[test]
fn diagnosis_a_late_setup_is_the_network_by_syn_retransmit() {
    let _one = one_at_a_time();
    for (delay_ms, v6) in [(25, false), (5, true)] {
        let cfg = LabConfig::default().delay(Duration::from_millis(delay_ms));
        let Some(lab) = lab(cfg) else { return };
        lab.live_ab().drop_syns(Duration::from_millis(1500));
        let bulk = Bulk::bytes(200_000).cc("cubic");
        let ((recs, _), grew) = counted(&lab, Side::A, || {
            measured_while(&lab, &bulk, v6, None, Reader::Full, &EVERY, &|_| {})
        });
        eprintln!("LAB late setup {delay_ms} ms v6={v6}: nstat A {grew:?}");
        assert!(n(&grew, "TcpExtTCPSynRetrans") >= 1, "no SYN was sent again: {grew:?}");
        for r in &recs {
            let s = &diagnosis(r)["Signals"];
            assert!(f(s, "SynRetransmits") >= 1.0, "{r}");
            assert!(f(s, "SetupDelayms") >= 1000.0, "{s}");
        }
        assert_cause(
            &recs,
            "network",
            "syn-retransmit",
            &format!("late setup {delay_ms} ms v6={v6}"),
        );
    }
}

/// A 200 KB response, the fleet's most common flow: on a 50 ms path it is over in slow
/// start, bounded by round trips (`network`/`slow-start`); on a µs path (no delay: the
/// emulator's own tens of µs) it is over before the kernel's busy clock ticks five times,
/// and must never be called a window's or a reader's.
#[test]
fn diagnosis_a_short_response_is_judged_by_round_trips_not_by_its_rate() {
    let _one = one_at_a_time();
    for (delay_ms, v6) in [(25, false), (0, true), (0, false)] {
        let Some(lab) = lab(LabConfig::default().delay(Duration::from_millis(delay_ms))) else {
            return;
        };
        let bulk = Bulk::bytes(200_000).cc("cubic");
        let ((recs, _), grew) = counted(&lab, Side::A, || {
            measured_while(&lab, &bulk, v6, None, Reader::Full, &EVERY, &|_| {})
        });
        eprintln!("LAB short response {delay_ms} ms v6={v6}: nstat A {grew:?}");
        // The kernel's word that the 50 ms case never left slow start: no loss, no HyStart
        // exit. (On the µs path HyStart's ACK-train detection does end it: measured, and
        // what such a flow is then judged by does not matter as long as it is no window's.)
        assert_eq!(n(&grew, "TcpRetransSegs"), 0, "{grew:?}");
        let hystart = grew.keys().any(|k| k.starts_with("TcpExtTCPHystart"));
        assert!(delay_ms == 0 || !hystart, "{grew:?}");
        for (r, every) in recs.iter().zip(EVERY) {
            let what = format!("short response {delay_ms} ms v6={v6} every {every}");
            report(&what, r);
            consistent(r);
            let d = diagnosis(r);
            let (verdict, cause) = (d["Verdict"].as_str().unwrap(), d["Cause"].as_str());
            if delay_ms > 0 {
                assert_eq!((verdict, cause), ("network", Some("slow-start")), "{what}: {d}");
                let finding = d["Finding"].as_str().unwrap();
                assert!(finding.contains("200.0 KB took 4 round trips of 5"), "{finding}");
            } else {
                assert!(
                    ["unknown", "network", "application"].contains(&verdict),
                    "{what}: a window verdict for a µs response: {d}"
                );
                // Slow start or no cause, unless the path was not the µs path it was built
                // as: on a loaded machine the emulator's own delay made a queue of 4.4 ms
                // over a 0.24 ms minimum (in CI), and the flow's RTT shows it.
                let median = r["RTTSummary"][3].as_f64().unwrap_or(0.0);
                let queued = median - r["MinRTTKernelms"].as_f64().unwrap_or(median) >= 1.0;
                let allowed = cause.is_none()
                    || cause == Some("slow-start")
                    || (queued && cause == Some("queueing"));
                assert!(allowed, "{what}: {d}");
            }
        }
    }
}

/// µs paths (no delay): a 16 KB receive buffer read flat out holds the flow, as the
/// kernel's own rwnd-limited time says; it is `receiver-window`/`small-buffer`, not
/// `queueing` on µs of jitter.
#[test]
fn diagnosis_a_small_receive_buffer_on_a_microsecond_path() {
    let _one = one_at_a_time();
    for v6 in [false, true] {
        let Some(lab) = lab(LabConfig::default().delay(Duration::ZERO)) else { return };
        let bulk = Bulk::for_duration(Duration::from_secs(3)).cc("cubic");
        let (recs, _) =
            measured_while(&lab, &bulk, v6, Some(16 << 10), Reader::Full, &EVERY, &|_| {});
        for (r, every) in recs.iter().zip(EVERY) {
            let what = format!("µs path 16 KB rcvbuf v6={v6} every {every}");
            report(&what, r);
            consistent(r);
            let d = diagnosis(r);
            let rwnd = f(&d["TimeShares"], "ReceiverWindowPct");
            assert!(rwnd > 50.0, "{what}: the kernel counted {rwnd} % rwnd-limited: {d}");
            assert!(f(r, "MinRTTKernelms") < 1.0, "{what}: not a µs path: {r}");
            let got = (d["Verdict"].as_str(), d["Cause"].as_str());
            assert_eq!(got, (Some("receiver-window"), Some("small-buffer")), "{what}: {d}");
        }
    }
}
