#[test]
fn a_share_that_moved_never_reads_as_zero() {
    assert_eq!(super::pct(0.0), "0");
    assert_eq!(super::pct(0.01), "<0.1");
    assert_eq!(super::pct(0.3), "0.3");
    assert_eq!(super::pct(38.4), "38");
}

#[test]
fn verdicts_index_in_page_order_and_the_unknown_last() {
    assert_eq!(super::verdict_index(Some("network")), 2);
    assert_eq!(super::verdict_index(Some("no such verdict")), 4);
    assert_eq!(super::verdict_index(None), 4);
}

use crate::analysis::{AnalyzerConfig, analyze};
use crate::tracker::testing::ended_flow;
use crate::wire::build::SockBuilder;

const S: u64 = 1_000_000_000;

#[test]
fn the_verdict_so_far_follows_the_same_rules_from_the_counters_alone() {
    // 10 s at a 50 ms minimum RTT with an 85 KB window, 16.5 MB sent (13.2 Mbit/s):
    // the window's cap is 13.6 Mbit/s.
    let so_far = |busy: u32, rwnd: u32, srtt_us: u32, retrans: u32| {
        let last = super::Last {
            busy_ms: busy,
            rwnd_limited_ms: rwnd,
            min_rtt_us: 50_000,
            snd_wnd_max: 85_000,
            snd_mss: 1448,
            segs_out: 11_400,
            total_retrans: retrans,
            bytes_acked: 16_500_001,
            ..super::Last::default()
        };
        let w = super::Window {
            last: &last,
            first_chrono: [0; 3],
            first_bytes: (1, 0),
            span_ns: 10 * S,
            options: 4, // window scaling
        };
        let v = super::so_far(&w, srtt_us).unwrap();
        (v, super::so_far_number(&w, srtt_us, v.0, v.1), super::so_far_index(&w, srtt_us))
    };
    let (v, n, i) = so_far(9_800, 9_500, 50_000, 0);
    assert_eq!((v, i), (("receiver-window", Some("small-buffer")), 0));
    assert_eq!(n, "window 85.0 KB → 13.6 Mbit/s cap");
    // Network time with the RTT at 1.5 × its minimum: queueing.
    let (v, n, _) = so_far(10_000, 0, 75_000, 0);
    assert_eq!(v, ("network", Some("queueing")));
    assert_eq!(n, "RTT 75 ms over 50 ms min");
    // With loss instead: 1 % of the segments.
    let (v, n, _) = so_far(10_000, 0, 50_000, 114);
    assert_eq!(v.0, "network");
    assert_eq!(n, "1.00 % loss");
    // Idle most of the time.
    let (v, n, i) = so_far(1_000, 0, 50_000, 0);
    assert_eq!((v.0, i), ("application", 3));
    assert_eq!(n, "idle 90 % of the time");
    // Busy for two ticks of 4 ms, all of it window-limited, in a 10 ms window: too few
    // ticks for a rate, so no window verdict (the record's rule too).
    let last = super::Last {
        busy_ms: 8,
        rwnd_limited_ms: 8,
        min_rtt_us: 50,
        snd_wnd_max: 85_000,
        snd_mss: 1448,
        bytes_acked: 200_001,
        sndbuf_limited_ms: 4,
        ..super::Last::default()
    };
    let w = super::Window {
        last: &last,
        first_chrono: [0; 3],
        first_bytes: (1, 0),
        span_ns: 10_000_000,
        options: 4,
    };
    assert_eq!(super::so_far(&w, 60), Some((super::UNKNOWN, None)));
}

/// A 10 s flow whose chrono counters grow by (busy, rwnd, sndbuf) ms, at its 50 ms
/// minimum RTT (no queue) with an 85 KB window.
fn verdict(busy: u64, rwnd: u64, sndbuf: u64) -> super::Diagnosis {
    verdict_at(busy, rwnd, sndbuf, 50_000)
}

/// As [`verdict`], with the smoothed RTT at `rtt_us` (above 62.5 ms: a queue).
fn verdict_at(busy: u64, rwnd: u64, sndbuf: u64, rtt_us: u32) -> super::Diagnosis {
    let a = SockBuilder::new(1, 5000, 80).rtt_us(rtt_us).min_rtt_us(50_000).snd_wnd(85_000);
    let mut e = ended_flow(&[
        (S, a.clone().chrono_us(0, 0, 0).bytes_acked(1)),
        (11 * S, a.chrono_us(busy * 1000, rwnd * 1000, sndbuf * 1000).bytes_acked(16_500_001)),
    ]);
    analyze(&mut e, &AnalyzerConfig::default()).diagnosis.expect("the kernel reported busy time")
}

#[test]
fn each_limit_wins_when_it_dominates_and_shares_sum_to_100() {
    for (busy, rwnd, sndbuf, rtt, want) in [
        (9_800, 9_500, 0, 50_000, "receiver-window"),
        (9_800, 100, 9_000, 50_000, "send-buffer"),
        (9_900, 0, 0, 80_000, "network"),
        (2_000, 0, 0, 50_000, "application"),
    ] {
        let d = verdict_at(busy, rwnd, sndbuf, rtt);
        assert_eq!(d.verdict, want, "{d:?}");
        let t = &d.shares;
        let sum = t.receiver_window + t.send_buffer + t.network + t.application;
        assert!((sum - 100.0).abs() < 1e-9, "{t:?}");
        assert_eq!(t.basis, "span");
    }
}

#[test]
fn the_receiver_window_finding_carries_its_numbers() {
    // NDT's classic: an 85 KB window at 50 ms caps a flow at 13.6 Mbit/s. The samples
    // keep the window to a step that holds the largest window seen, exactly: 85,000.
    let d = verdict(9_900, 9_800, 0);
    assert_eq!(d.caps.peer_window_bytes, 85_000);
    assert_eq!(d.caps.typical_window_bytes, Some(85_000));
    let cap = d.caps.window_cap_mbps.unwrap();
    assert!((cap - 13.6).abs() < 1e-9, "{cap}");
    assert_eq!(d.signals.window_closed_pct, Some(0.0));
    assert!(
        d.finding.starts_with(
            "receiver window 85.0 KB at 50 ms RTT caps this flow at 13.6 Mbit/s; it reached 13.2 Mbit/s"
        ),
        "{}",
        d.finding
    );
}

/// A kernel before 6.7 counts no RTOs: a 5 s flow whose samples show its window at one
/// segment for 2 s (three RTOs backing off through a blackout) is `timeouts` from them,
/// as the lab's blackout is from the kernel's counters on 6.18.
#[test]
fn before_6_7_the_samples_window_tells_the_rtos() {
    let a = SockBuilder::new(1, 5000, 80)
        .rtt_us(20_000)
        .min_rtt_us(20_000)
        .snd_wnd(1 << 20)
        .before_6_7();
    let at = |ms: u64, cwnd: u32, retrans: u32, busy_ms: u64| {
        let acked = 1 + ms * 2_000;
        (
            S + ms * 1_000_000,
            a.clone()
                .cwnd(cwnd)
                .total_retrans(retrans)
                .bytes_retrans(u64::from(retrans) * 1448)
                .segs(2_000 + ms as u32, 0)
                .bytes_acked(acked)
                .chrono_us(busy_ms * 1000, 0, 0),
        )
    };
    let mut samples = vec![at(0, 10, 0, 0), at(1000, 80, 0, 1000)];
    // The blackout: three RTOs, 1 s backing off to 2 s, the window at 1 throughout.
    for (i, ms) in [1100u64, 1600, 2100, 2600, 3100].iter().enumerate() {
        samples.push(at(*ms, 1, 3 + i as u32, *ms));
    }
    samples.extend([at(3200, 4, 9, 3200), at(4000, 60, 9, 4000), at(5000, 80, 9, 5000)]);
    let mut e = ended_flow(&samples);
    let d = analyze(&mut e, &AnalyzerConfig::default()).diagnosis.unwrap();
    assert_eq!((d.signals.rtos, d.signals.rto_time_ms), (1, Some(2_100)), "{d:?}");
    assert_eq!((d.verdict, d.cause), ("network", Some("timeouts")), "{}", d.finding);
    // On 6.7 and later the kernel's own counters stand, whatever the window did.
    let with = SockBuilder::new(1, 5000, 80).rto(0, 0);
    let mut e = ended_flow(&[(S, with.clone().cwnd(1)), (2 * S, with.cwnd(1))]);
    let d = analyze(&mut e, &AnalyzerConfig::default()).diagnosis.unwrap();
    assert_eq!((d.signals.rtos, d.signals.rto_time_ms), (0, Some(0)));
}

/// A 10 s flow at 100 ms min RTT with a 32 KiB send buffer that delivered `mbit` Mbit
/// (so `mbit / 10` Mbit/s) and was send-buffer limited `sndbuf` ms of 10 s busy, with
/// what that rate keeps in flight a round trip unacknowledged in its last sample.
fn small_buffer(sndbuf: u64, mbit: u64) -> super::Diagnosis {
    small_buffer_in_flight(sndbuf, mbit, (mbit * 12_500 / 10 / 1448) as u32)
}

/// As [`small_buffer`], with `unacked` segments in flight in its last sample.
fn small_buffer_in_flight(sndbuf: u64, mbit: u64, unacked: u32) -> super::Diagnosis {
    let a = SockBuilder::new(1, 5000, 80).rtt_us(100_000).min_rtt_us(100_000).sndbuf(32_768);
    let last = a.clone().chrono_us(10_000_000, 0, sndbuf * 1000).unacked(unacked);
    let mut e = ended_flow(&[
        (S, a.chrono_us(0, 0, 0).bytes_acked(1)),
        (11 * S, last.bytes_acked(mbit * 125_000 + 1)),
    ]);
    analyze(&mut e, &AnalyzerConfig::default()).diagnosis.expect("the kernel reported busy time")
}

#[test]
fn a_flow_at_its_send_buffer_cap_is_send_buffer_limited_though_mostly_busy() {
    // The configured size's rate: 32768 B ÷ 100 ms = 2.62 Mbit/s. The lab's BBR flow:
    // 3.0 Mbit/s, 38 % limited, 14 % over it. The finding's cap is what the buffer let
    // it have in flight (25 segments, 36.2 KB) over the RTT, which it reached.
    let d = small_buffer(3_800, 30);
    let cap = d.caps.send_buffer_cap_mbps.unwrap();
    assert!((cap - 2.62144).abs() < 1e-9, "{cap}");
    assert_eq!(d.verdict, "send-buffer", "{d:?}");
    assert_eq!(
        d.finding,
        "send buffer 32.8 KB held 36.2 KB in flight: at 100 ms RTT that caps this flow at \
         2.9 Mbit/s; it reached 3.0 Mbit/s (38 % of the time send-buffer limited, 62 % \
         sending out what it held)"
    );
    // Past what its bytes in flight carry by more than 10 %: no cap; nor with none
    // sampled.
    let d = small_buffer_in_flight(3_800, 30, 10);
    assert!(
        d.finding.ends_with("in flight carry at 100 ms RTT: cause unclear")
            && !d.finding.contains("caps"),
        "{}",
        d.finding
    );
    let d = small_buffer_in_flight(3_800, 30, 0);
    assert!(d.finding.contains("no sample caught what it had in flight"), "{}", d.finding);
    // Just above and just below the thresholds.
    let at = |pct: f64, frac: f64| {
        let mbit = (frac * cap * 10.0).ceil() as u64;
        small_buffer((pct * 100.0) as u64, mbit).verdict
    };
    assert_eq!(at(super::SNDBUF_MIN_SHARE_PCT, super::SNDBUF_CAP_FRACTION), "send-buffer");
    // Far below the cap, the buffer was not what held it: an autotuned buffer is ≥ 2 ×
    // cwnd, so its flows stay at or under half the cap.
    assert_eq!(at(38.0, 0.3), "network");
    // Rarely limited by the buffer: the network.
    assert_eq!(at(15.0, 1.0), "network");
}

#[test]
fn a_flow_seen_once_is_judged_by_its_rate_while_busy() {
    // A loopback transfer that lived between two polls: only its destroy event was seen.
    let a = SockBuilder::new(1, 5000, 80).rtt_us(28).min_rtt_us(2);
    let mut e = ended_flow(&[(S, a.clone().chrono_us(100_000, 0, 0).bytes_acked(1_250_002))]);
    let r = analyze(&mut e, &AnalyzerConfig::default());
    // No span: the record's throughput is over the kernel's busy time, and says so.
    assert!((r.send_throughput_mbps - 100.00016).abs() < 1e-9, "{}", r.send_throughput_mbps);
    assert_eq!(r.throughput_basis, Some("busy-time"));
    assert_eq!(r.recv_throughput_mbps, crate::record::UNKNOWN_RATE);
    let d = r.diagnosis.unwrap();
    assert_eq!(d.shares.basis, "lifetime");
    assert!((d.achieved_mbps - 100.00016).abs() < 1e-9, "{}", d.achieved_mbps);
    // 0.028 ms over a 0.002 ms minimum is 14 × but 0.026 ms: µs jitter, not a queue.
    assert_eq!(
        d.finding,
        "network limited 100 % of the time, cause unclear: it reached 100.0 Mbit/s with the \
         RTT at 0.028 ms, near its 0.002 ms minimum (no queue), and no loss"
    );
    // Near its minimum, the finding says there was no queue.
    let mut e =
        ended_flow(&[(S, a.min_rtt_us(25).chrono_us(100_000, 0, 0).bytes_acked(1_250_002))]);
    let d = analyze(&mut e, &AnalyzerConfig::default()).diagnosis.unwrap();
    assert!(
        d.finding.contains("at 0.028 ms, near its 0.025 ms minimum (no queue)"),
        "{}",
        d.finding
    );
}

#[test]
fn issue_32_a_short_flow_is_unknown_and_says_why() {
    // A 4 KB HTTP response, seen only in its destroy event.
    let a = SockBuilder::new(1, 80, 40000).rtt_us(30).min_rtt_us(20);
    let mut e = ended_flow(&[(S, a.chrono_us(1_000, 0, 0).bytes_acked(4_097).bytes_received(80))]);
    let r = analyze(&mut e, &AnalyzerConfig::default());
    let d = r.diagnosis.unwrap();
    assert_eq!(d.verdict, "unknown");
    assert_eq!(d.finding, "too short to judge: 4.1 KB sent");
    // Just at the threshold, it is judged.
    let a = SockBuilder::new(2, 80, 40001).rtt_us(30).min_rtt_us(20);
    let mut e = ended_flow(&[
        (S, a.clone().chrono_us(0, 0, 0).bytes_acked(1)),
        (2 * S, a.chrono_us(900_000, 0, 0).bytes_acked(super::MIN_JUDGED_BYTES)),
    ]);
    let d = analyze(&mut e, &AnalyzerConfig::default()).diagnosis.unwrap();
    assert_ne!(d.verdict, "unknown", "{}", d.finding);
}

#[test]
fn issue_32_a_flow_that_mostly_received_gets_no_sender_verdict() {
    // An iperf3 server's socket: 2 GB received over one second, a few bytes sent.
    let a = SockBuilder::new(1, 5201, 40000).rtt_us(30).min_rtt_us(20);
    let mut e = ended_flow(&[
        (S, a.clone().chrono_us(0, 0, 0).bytes_acked(1).bytes_received(1)),
        (2 * S, a.chrono_us(10_000, 0, 0).bytes_acked(37).bytes_received(2_012_500_001)),
    ]);
    let d = analyze(&mut e, &AnalyzerConfig::default()).diagnosis.unwrap();
    assert_eq!(d.verdict, "unknown");
    assert_eq!(d.finding, "received 2.0 GB at 16.1 Gbit/s; the sender is the peer");
}

#[test]
fn an_idle_span_is_exactly_100_percent_application() {
    // A span of 1,000.00007 ms: 100·x/x computes to 100.00000000000001 there.
    let a = SockBuilder::new(1, 5000, 80).rtt_us(50_000).min_rtt_us(50_000);
    let mut e = ended_flow(&[
        (S, a.clone().chrono_us(0, 0, 0).bytes_acked(1)),
        (S + 1_000_000_070, a.chrono_us(0, 0, 0).bytes_acked(2)),
    ]);
    let d = analyze(&mut e, &AnalyzerConfig::default()).diagnosis.unwrap();
    assert_eq!(d.shares.application, 100.0, "{:?}", d.shares);
}

#[test]
fn counters_that_disagree_with_the_clock_are_clamped() {
    // busy above the elapsed time, rwnd above busy: still in [0, 100].
    let d = verdict(12_000, 13_000, 0);
    assert_eq!(d.shares.receiver_window, 100.0);
    assert_eq!(d.shares.application, 0.0);
}

/// A 10 s flow at `min_us` min RTT and `rtt_us` smoothed, with window `wnd`, that
/// delivered `mbit` Mbit with the chrono growths (busy, rwnd) ms and `retrans` of
/// `segs` segments retransmitted, `spurious` of them DSACKed.
#[allow(clippy::too_many_arguments)]
fn flow(
    min_us: u32,
    rtt_us: u32,
    wnd: u32,
    mbit: u64,
    busy: u64,
    rwnd: u64,
    (segs, retrans, spurious): (u32, u32, u32),
) -> super::Diagnosis {
    let a = SockBuilder::new(1, 5000, 80).options(7).rtt_us(rtt_us).min_rtt_us(min_us).snd_wnd(wnd);
    let mut e = ended_flow(&[
        (S, a.clone().chrono_us(0, 0, 0).bytes_acked(1)),
        (
            11 * S,
            a.chrono_us(busy * 1000, rwnd * 1000, 0)
                .bytes_acked(mbit * 125_000 + 1)
                .total_retrans(retrans)
                .segs(segs, spurious),
        ),
    ]);
    analyze(&mut e, &AnalyzerConfig::default()).diagnosis.expect("busy time")
}

#[test]
fn a_paced_sender_without_network_evidence_is_the_application() {
    // 70 % busy (waiting for the ACKs of its bursts), 30 % idle, RTT at its minimum,
    // no loss, far below its window's cap: not the network.
    let d = flow(20_000, 20_500, 1_000_000, 20, 7_000, 0, (10_000, 0, 0));
    assert_eq!((d.verdict, d.cause), ("application", Some("paced")), "{}", d.finding);
    assert!(d.finding.starts_with("the application sent in bursts: idle 30 %"), "{}", d.finding);
    // The same with a queue is the network's.
    let d = flow(20_000, 40_000, 1_000_000, 20, 7_000, 0, (10_000, 0, 0));
    assert_eq!((d.verdict, d.cause), ("network", Some("queueing")), "{}", d.finding);
    // And with little idle time and no evidence, the network, cause unclear.
    let d = flow(20_000, 20_500, 1_000_000, 20, 9_500, 0, (10_000, 0, 0));
    assert_eq!((d.verdict, d.cause), ("network", None));
    assert!(d.finding.contains("cause unclear"), "{}", d.finding);
}

#[test]
fn a_flow_at_its_window_cap_with_no_queue_or_loss_is_held_by_the_window() {
    // iperf3 -w 32K over 50 ms: 32 KB ÷ 50 ms = 5.24 Mbit/s (5.57 as the samples keep
    // the window); it reached 5.2, busy all the time, the kernel counting little of it
    // as receiver-window limited.
    let d = flow(50_000, 50_500, 32_768, 52, 9_900, 500, (10_000, 0, 0));
    assert_eq!((d.verdict, d.cause), ("receiver-window", Some("small-buffer")), "{}", d.finding);
    assert!(
        d.finding.starts_with("receiver window 32.8 KB at 50 ms RTT caps this flow at 5.2 Mbit/s"),
        "{}",
        d.finding
    );
    // The same with the kernel's rwnd-limited time at 0 and the window never seen
    // shut: no evidence of the window, so not its verdict (a 20 Mbit/s bottleneck with
    // a small queue on the sender's own egress was called receiver-window so).
    let d = flow(50_000, 50_500, 32_768, 52, 9_900, 0, (10_000, 0, 0));
    assert_eq!((d.verdict, d.cause), ("network", None), "{}", d.finding);
    assert!(!d.finding.contains("receiver-window"), "{}", d.finding);
}

/// The typical window is never above the largest: a window of exactly 65,536 bytes is
/// typically 65,536, not the 69,632 its kept step's middle says.
#[test]
fn the_typical_window_never_exceeds_the_largest() {
    for wnd in [32_768, 65_536, 65_535, 85_000, 3_000_000] {
        let d = flow(50_000, 50_500, wnd, 52, 9_900, 9_000, (10_000, 0, 0));
        let typical = d.caps.typical_window_bytes.unwrap();
        assert!(typical <= d.caps.peer_window_bytes, "{wnd}: {typical}");
        assert!(f64::from(wnd - typical) <= f64::from(wnd) / 16.0, "{wnd}: {typical}");
    }
    assert_eq!(
        flow(50_000, 50_500, 65_536, 52, 9_900, 9_000, (10_000, 0, 0)).caps.typical_window_bytes,
        Some(65_536)
    );
}

/// On a µs path a median RTT many times its minimum is jitter, not a queue: a queue
/// must also hold the flow back by a millisecond.
#[test]
fn microsecond_jitter_is_not_a_queue() {
    // 1 µs minimum, 26 µs median: 26 × the minimum, 0.025 ms above it.
    let d = flow(1, 26, 3_000_000, 8_000, 9_900, 0, (10_000, 0, 0));
    assert_ne!(d.cause, Some("queueing"), "{}", d.finding);
    // 2 ms over a 5 ms minimum: a queue.
    let d = flow(5_000, 7_000, 3_000_000, 80, 9_900, 0, (10_000, 0, 0));
    assert_eq!((d.verdict, d.cause), ("network", Some("queueing")), "{}", d.finding);
}

/// A 200 KB response busy for one clock tick (4 ms) has no rate: on a 50 ms path it
/// ended in slow start, bounded by round trips; on loopback it is too short to judge.
/// Never a window verdict.
#[test]
fn a_short_response_is_judged_by_round_trips_not_by_its_rate() {
    let short = |min_us: u32, ssthresh: u32| {
        let a = SockBuilder::new(1, 5000, 80)
            .rtt_us(min_us)
            .min_rtt_us(min_us)
            .snd_wnd(30_000)
            .ssthresh(ssthresh);
        let mut e = ended_flow(&[
            (S, a.clone().chrono_us(0, 0, 0).bytes_acked(1)),
            (S + S / 5, a.chrono_us(4_000, 4_000, 0).bytes_acked(200_001)),
        ]);
        analyze(&mut e, &AnalyzerConfig::default()).diagnosis.expect("busy time")
    };
    let d = short(50_000, 0x7fff_ffff);
    assert_eq!((d.verdict, d.cause), ("network", Some("slow-start")), "{}", d.finding);
    assert!(
        d.finding.starts_with("200.0 KB took 4 round trips of 50 ms in slow start"),
        "{}",
        d.finding
    );
    let d = short(20, 0x7fff_ffff);
    assert_eq!((d.verdict, d.cause), ("unknown", None), "{}", d.finding);
    let d = short(50_000, 20);
    assert_eq!((d.verdict, d.cause), ("unknown", None), "{}", d.finding);
    assert!(d.finding.starts_with("too short to judge: 200.0 KB in 4 ms busy"), "{}", d.finding);
}

/// A response whose receiver's window, autotuned from 64 KB, lagged slow start: an
/// extra round trip rwnd-limited, the window grown past the response by the end (a CI
/// lab run: 200 KB at 51 ms, busy 290 ms, 21 % rwnd-limited, window 266 KB). Still
/// bounded by round trips; a window that stayed small held the flow instead.
#[test]
fn a_receive_window_that_lagged_slow_start_leaves_it_slow_start() {
    let run = |wnd: u32, busy_ms: u64, rwnd_ms: u64| {
        let a = SockBuilder::new(1, 5000, 80).options(7).rtt_us(51_000).min_rtt_us(51_000);
        let mut e = ended_flow(&[
            (S, a.clone().snd_wnd(wnd).chrono_us(0, 0, 0).bytes_acked(1)),
            (
                S + busy_ms * 1_000_000,
                a.snd_wnd(wnd).chrono_us(busy_ms * 1000, rwnd_ms * 1000, 0).bytes_acked(200_001),
            ),
        ]);
        analyze(&mut e, &AnalyzerConfig::default()).diagnosis.expect("busy time")
    };
    let d = run(266_240, 290, 60);
    assert_eq!((d.verdict, d.cause), ("network", Some("slow-start")), "{}", d.finding);
    // Without the rwnd-limited time to set aside, 290 ms is past 4 rounds and one.
    let d = run(266_240, 290, 0);
    assert_ne!(d.cause, Some("slow-start"), "{}", d.finding);
    // A 16 KB window that never grew: 12 round trips, held by the window.
    let d = run(16_384, 640, 600);
    assert_eq!((d.verdict, d.cause), ("receiver-window", Some("small-buffer")), "{}", d.finding);
}

#[test]
fn a_slow_reader_is_not_a_small_buffer() {
    // An 80 KB window at 50 ms would carry 12.8 Mbit/s; the reader took 1.3, its
    // window typically 9 KB while it held the flow.
    let a = SockBuilder::new(1, 5000, 80).options(7).rtt_us(50_000).min_rtt_us(50_000);
    let mut e = ended_flow(&[
        (S, a.clone().snd_wnd(80_000).chrono_us(0, 0, 0).bytes_acked(1)),
        (2 * S, a.clone().snd_wnd(9_000).chrono_us(990_000, 800_000, 0).bytes_acked(162_501)),
        (11 * S, a.snd_wnd(80_000).chrono_us(9_900_000, 8_000_000, 0).bytes_acked(1_625_001)),
    ]);
    let d = analyze(&mut e, &AnalyzerConfig::default()).diagnosis.expect("busy time");
    assert_eq!((d.verdict, d.cause), ("receiver-window", Some("slow-reader")));
    assert!(
        d.finding.starts_with("the receiving application read only 1.3 Mbit/s")
            && d.finding.ends_with("fix the reader, a bigger buffer won't help"),
        "{}",
        d.finding
    );
}

#[test]
fn spurious_retransmits_are_not_loss() {
    // Five retransmits, all DSACKed after a host-load RTO.
    let d = flow(20_000, 20_500, 1_000_000, 20, 9_900, 0, (3_500, 5, 5));
    assert_eq!(d.signals.loss_pct, 0.0);
    assert_eq!(d.caps.loss_cap_mbps, None);
    assert!(d.finding.ends_with("5 retransmits were spurious (the peer had the data), not loss"));
    // Real loss stays loss.
    let d = flow(20_000, 20_500, 1_000_000, 20, 9_900, 0, (3_500, 5, 1));
    assert!((d.signals.loss_pct - 400.0 / 3_500.0).abs() < 1e-9, "{:?}", d.signals);
}

/// Over a grid of rates, RTTs, windows, loss and time shares: a finding that says
/// "caps this flow at C" or "near C" never has the flow above C (beyond the tolerance).
#[test]
fn no_finding_names_a_cap_the_flow_exceeded() {
    let mut checked = 0;
    for min_us in [200, 5_000, 50_000] {
        for q in [1.0, 2.0] {
            for wnd in [16_384, 65_536, 1_000_000] {
                for mbit in [1, 10, 100, 1_000] {
                    for (busy, rwnd) in [(9_900, 0), (9_900, 9_000), (5_000, 0)] {
                        for retrans in [0, 3, 300] {
                            let rtt = (f64::from(min_us) * q) as u32;
                            let d = flow(min_us, rtt, wnd, mbit, busy, rwnd, (10_000, retrans, 0));
                            checked += 1;
                            let got = d.achieved_mbps;
                            for mark in ["caps this flow at ", "caps this flow near "] {
                                let Some(rest) = d.finding.split(mark).nth(1) else { continue };
                                let mut w = rest.split(' ');
                                let c: f64 = w.next().unwrap().parse().unwrap();
                                let c = c * match w.next().unwrap().trim_end_matches(';') {
                                    "Gbit/s" => 1000.0,
                                    "kbit/s" => 0.001,
                                    _ => 1.0,
                                };
                                // The sentence rounds C to 0.1 Mbit/s. A window
                                // cap holds within 10 %, a Mathis bound from 0.9 × the
                                // rate (no send buffer in this grid).
                                assert!(
                                    got <= (c + 0.05) / 0.9 + 1e-9,
                                    "{got} above {c}: {}",
                                    d.finding
                                );
                            }
                            assert!(super::VERDICTS.contains(&d.verdict));
                            assert!(d.cause.is_none_or(|c| super::CAUSES.contains(&c)));
                        }
                    }
                }
            }
        }
    }
    assert_eq!(checked, 3 * 2 * 3 * 4 * 3 * 3);
}

#[test]
fn a_window_closed_part_of_the_time_is_a_slow_reader_and_the_finding_says_how_long() {
    // Ten 1 s steps, receiver-window limited throughout; the window closed in three of
    // them, open at 20 KB otherwise (a cap of 3.2 Mbit/s at 50 ms, which it nearly
    // reached: by its rate alone it would read as a small buffer).
    let a = SockBuilder::new(1, 5000, 80).rtt_us(50_000).min_rtt_us(50_000).mss(1448);
    let samples: Vec<(u64, SockBuilder)> = (0..=10u64)
        .map(|i| {
            let wnd = if [2, 5, 8].contains(&i) { 0 } else { 20_000 };
            let b = a.clone().snd_wnd(wnd).chrono_us(i * 990_000, i * 900_000, 0);
            ((i + 1) * S, b.bytes_acked(i * 350_000 + 1))
        })
        .collect();
    let mut e = ended_flow(&samples);
    let d = analyze(&mut e, &AnalyzerConfig::default()).diagnosis.unwrap();
    assert_eq!(d.signals.window_closed_pct, Some(30.0));
    // Closed three times, a second each: three stalls, 3 s in all.
    assert_eq!((d.signals.zero_window_stalls, d.signals.zero_window_ms), (Some(3), Some(3000.0)));
    assert_eq!((d.verdict, d.cause), ("receiver-window", Some("slow-reader")), "{}", d.finding);
    assert!(
        d.finding.contains("it was typically 20.0 KB and closed 30 % of the time"),
        "{}",
        d.finding
    );
    // The typical window while limited is the open one, not the largest nor a closed one.
    assert_eq!(d.caps.typical_window_bytes, Some(20_000)); // the largest's own step
}
