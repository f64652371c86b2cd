//! Analyzer tests: flows built through the tracker from synthetic samples.

use super::*;
use crate::tracker::{Tracker, TrackerConfig};
use crate::wire::build::SockBuilder;
use crate::wire::sock::batch;

const S: u64 = 1_000_000_000;

fn flow(samples: &[(u64, SockBuilder)]) -> EndedFlow {
    crate::tracker::testing::ended_flow(samples)
}

fn cfg() -> AnalyzerConfig {
    AnalyzerConfig::default()
}

#[test]
fn issue_3_throughput_past_18_4_gb_does_not_overflow() {
    // cgmon: 19e9 bytes in 10 s gave 442.604736 (u64 overflow, B2).
    let a = SockBuilder::new(1, 5000, 80);
    let mut e =
        flow(&[(0, a.clone().bytes_acked(0)), (10 * S, a.clone().bytes_acked(19_000_000_000))]);
    let r = analyze(&mut e, &cfg());
    assert!((r.send_throughput_mbps - 15_200.0).abs() < 1e-9, "{}", r.send_throughput_mbps);
    // Not truncated to whole bytes per second: 1001 bytes in 2 s = 4.004 kbit/s.
    let mut e = flow(&[(0, a.clone().bytes_acked(1)), (2 * S, a.clone().bytes_acked(1002))]);
    assert!((analyze(&mut e, &cfg()).send_throughput_mbps - 0.004004).abs() < 1e-15);
}

#[test]
fn issue_3_rtt_falling_while_cwnd_rises_gives_minus_one() {
    let a = SockBuilder::new(1, 5000, 80);
    let samples: Vec<_> = (0..20u32)
        .map(|i| (u64::from(i) * S, a.clone().rtt_us(50_000 - 1000 * i).cwnd(10 + i)))
        .collect();
    let r = analyze(&mut flow(&samples), &cfg());
    assert!((r.corr_rtt_cwnd + 1.0).abs() < 1e-12, "{}", r.corr_rtt_cwnd);
    assert!((r.correlations.rtt_cwnd.spearman + 1.0).abs() < 1e-12);
    assert!(r.correlations.rtt_cwnd.pearson_p.unwrap() < 1e-10);
}

#[test]
fn weights_credit_the_interval_after_each_sample_and_the_median_to_the_last() {
    let t = |ts: u64| {
        let mut r = Retained::default();
        r.ts_ns = ts;
        r
    };
    let w = time_weights(&[t(0), t(S), t(3 * S), t(4 * S)]);
    assert_eq!(w, [1.0, 2.0, 1.0, 1.0]); // median of [1, 2, 1] is 1
    let w = time_weights(&[t(0), t(S), t(4 * S)]);
    assert_eq!(w, [1.0, 3.0, 2.0]); // median of [1, 3] is their mean
    assert_eq!(time_weights(&[t(5)]), [1.0]);
}

#[test]
fn time_weighting_changes_the_summary() {
    // RTT 10 ms for 9 s, then 100 ms for 1 s, then back to 10 ms: weighted, the 98th
    // percentile stays low; unweighted, a third of the samples are high.
    let a = SockBuilder::new(1, 5000, 80);
    let mut e = flow(&[
        (0, a.clone().rtt_us(10_000)),
        (9 * S, a.clone().rtt_us(100_000)),
        (10 * S, a.clone().rtt_us(10_000).bytes_acked(5)),
    ]);
    let w = analyze(&mut e, &cfg());
    let u = analyze(&mut e, &AnalyzerConfig { unweighted_quantiles: true, ..cfg() });
    assert_eq!(w.rtt_summary.unwrap()[3], 10.0);
    assert!(u.rtt_summary.unwrap()[6] > 90.0, "{:?}", u.rtt_summary);
    assert!(
        w.rtt_summary.unwrap()[5] < u.rtt_summary.unwrap()[5],
        "{:?} vs {:?}",
        w.rtt_summary,
        u.rtt_summary
    );
}

#[test]
fn retransmit_rate_is_per_interval() {
    let a = SockBuilder::new(1, 5000, 80);
    // Retransmits come when cwnd is large: r ≈ +1.
    let samples: Vec<_> = (0..10u32)
        .map(|i| (u64::from(i) * S, a.clone().cwnd(10 + i).total_retrans(i * i)))
        .collect();
    let r = analyze(&mut flow(&samples), &cfg());
    assert_eq!(r.correlations.retrans_cwnd.n, 9, "one pair per interval");
    assert!(r.corr_retrans_cwnd > 0.95, "{}", r.corr_retrans_cwnd);
}

#[test]
fn sentinels_and_absent_values_never_reach_json_as_nan() {
    let a = SockBuilder::new(1, 5000, 80); // pacing/max pacing unlimited, min_rtt unset
    let one = analyze(&mut flow(&[(0, a.clone())]), &cfg());
    assert_eq!(one.corr_rtt_cwnd, -3.0);
    // One sample, no busy time from the kernel: the throughputs are the sentinel, and the
    // record says why.
    assert_eq!(one.send_throughput_mbps, crate::record::UNKNOWN_RATE);
    assert_eq!(one.recv_throughput_mbps, crate::record::UNKNOWN_RATE);
    assert_eq!(one.throughput_basis, Some("unknown"));
    assert_eq!(one.min_rtt_kernel_ms, None);
    assert_eq!(one.max_pacing_rate_kernel_mbps, None);
    assert_eq!(one.pacing_rate_summary, None);
    let flat = analyze(&mut flow(&[(0, a.clone()), (S, a.clone().bytes_acked(9))]), &cfg());
    assert_eq!(flat.corr_rtt_cwnd, -2.0, "constant series: undefined");
    for r in [&one, &flat] {
        let v = serde_json::to_value(r).unwrap();
        assert!(v.get("MinRTTKernelms").is_none());
        assert!(v.get("MaxPacingRateKernelMbps").is_none());
        let text = serde_json::to_string(r).unwrap();
        assert!(!text.contains("null") && !text.contains("NaN"), "{text}");
    }
    // With adjustment 2 cgmon let NaN through (B4); here it stays finite.
    let c = AnalyzerConfig { adjust: Adjust::Adjusted, ..cfg() };
    let samples: Vec<_> = (0..5u32)
        .map(|i| (u64::from(i) * S, a.clone().rtt_us(10_000 + (i % 2) * 100).cwnd(10 + i)))
        .collect();
    let r = analyze(&mut flow(&samples), &c);
    assert!(r.corr_rtt_cwnd.is_finite());
    serde_json::to_string(&r).unwrap();
}

#[test]
fn a_cwnd_or_retransmit_count_that_never_moves_gives_undefined_not_noise() {
    // Seen on a live loopback transfer: no retransmits over uneven intervals gave a retransmit
    // Spearman of -2e-16 with a p-value of 1, where a constant series is undefined.
    let a = SockBuilder::new(1, 5000, 80);
    let at = [0, 300, 1100, 1170, 2900, 3000, 4700, 5100];
    let samples: Vec<_> = (0..8u32)
        .map(|i| (at[i as usize] * S / 1000, a.clone().rtt_us(10_000 + 700 * (i % 3)).cwnd(37)))
        .collect();
    let r = analyze(&mut flow(&samples), &cfg());
    for (name, c) in [("rtt", &r.correlations.rtt_cwnd), ("retrans", &r.correlations.retrans_cwnd)]
    {
        assert_eq!((c.pearson, c.spearman), (-2.0, -2.0), "{name}: {c:?}");
        assert_eq!((c.pearson_p, c.spearman_p), (None, None), "{name}: {c:?}");
    }
    assert_eq!(r.corr_rtt_cwnd, -2.0);
    let samples: Vec<_> = (0..8u32)
        .map(|i| (at[i as usize] * S / 1000, a.clone().rtt_us(10_000).cwnd(10 + i)))
        .collect();
    let r = analyze(&mut flow(&samples), &cfg());
    assert_eq!(r.correlations.retrans_cwnd.spearman, -2.0, "{:?}", r.correlations);
}

#[test]
fn a_flow_handed_on_ungathered_is_analysed_whole() {
    // 41 samples: most of them in the tracker's pool blocks when the flow is handed on.
    // `analyze` gathers them itself, so a caller that does not cannot cut the record short.
    let a = SockBuilder::new(1, 5000, 80);
    let samples: Vec<_> =
        (0..41u32).map(|i| (u64::from(i) * S, a.clone().rtt_us(1000 + 10 * i))).collect();
    let mut e = crate::tracker::testing::ended_flow_held(&samples);
    assert!(!e.gathered() && e.flow.samples.len() < 41, "the test needs samples in blocks");
    let r = analyze(&mut e, &cfg());
    assert_eq!(r.samples, 41);
    assert_eq!(r.min_rtt_observed_ms, Some(1.0), "the oldest sample, from the first block");
    assert_eq!(
        r.rtt_summary.unwrap()[6],
        analyze(&mut flow(&samples), &cfg()).rtt_summary.unwrap()[6]
    );
}

#[test]
fn record_carries_cgmon_and_new_fields() {
    let a = SockBuilder::new(42, 5000, 80)
        .cong("cubic")
        .min_rtt_us(1500)
        .max_pacing(125_000_000)
        .pacing(1_250_000)
        .options(1 | 2);
    let mut e = flow(&[
        (0, a.clone().bytes_acked(1).bytes_received(0)),
        (
            S,
            a.clone()
                .bytes_acked(125_001)
                .bytes_received(250_000)
                .bytes_sent(130_000)
                .delivered(90, 3),
        ),
    ]);
    let r = analyze(&mut e, &cfg());
    assert_eq!(r.id.src_ip.as_str(), "127.0.0.1");
    assert_eq!((r.id.src_port, r.id.dst_port), (5000, 80));
    assert_eq!(r.samples, 2);
    assert!(r.timestamps && r.sack && !r.ecn);
    assert_eq!(r.min_rtt_kernel_ms, Some(1.5));
    assert_eq!(r.max_pacing_rate_kernel_mbps, Some(1000.0));
    assert_eq!(r.max_pacing_rate_observed_mbps, Some(10.0));
    assert!((r.send_throughput_mbps - 1.0).abs() < 1e-12);
    assert!((r.recv_throughput_mbps - 2.0).abs() < 1e-12);
    assert_eq!((r.delivered, r.delivered_ce), (90, 3));
    assert_eq!(r.congestion_control.as_str(), "cubic");
    assert_eq!((r.family, r.final_state, r.end_reason), ("inet", "CLOSE", "destroyed"));
    assert_eq!(r.cookie, 42);
    assert!(!r.partial);
    assert_eq!(r.cwnd_summary, [14_480.0; 7]);
    let text = serde_json::to_string(&r).unwrap();
    let order = [
        "\"ID\"",
        "\"StartTime\"",
        "\"EndTime\"",
        "\"Duration\"",
        "\"Samples\"",
        "\"SamplesDeduped\"",
        "\"Partial\"",
        "\"Timestamps\"",
        "\"SACK\"",
        "\"ECN\"",
        "\"ECNSeen\"",
        "\"MinRTTKernelms\"",
        "\"MinRTTObservedms\"",
        "\"MaxPacingRateKernelMbps\"",
        "\"MaxPacingRateObservedMbps\"",
        "\"RTTSummary\"",
        "\"RTTVarSummary\"",
        "\"CorrRTTCwnd\"",
        "\"CorrRetransCwnd\"",
        "\"CorrPacingCwnd\"",
        "\"TotalRetransmits\"",
        "\"BytesAcked\"",
        "\"SendThroughputMbps\"",
    ];
    let pos: Vec<usize> =
        order.iter().map(|k| text.find(k).unwrap_or_else(|| panic!("{k} missing"))).collect();
    assert!(pos.windows(2).all(|p| p[0] < p[1]), "cgmon's field order: {text}");
}

#[test]
fn partial_flags_follow_the_edges() {
    let mut t = Tracker::new(TrackerConfig::default());
    let mut out = Vec::new();
    let b = batch(&[(0, SockBuilder::new(1, 1, 80).build())]);
    t.begin_dump();
    t.observe(&b.get(0).unwrap(), &mut out);
    t.end_dump(true, 0, &mut out);
    t.finish(&mut out);
    let r = analyze(&mut out[0], &cfg());
    assert!(r.partial && r.partial_start && r.partial_end);
    assert_eq!(r.end_reason, "shutdown");
}

#[test]
fn samples_without_an_rtt_measurement_are_left_out_of_rtt_figures() {
    // The first poll caught the connection in SYN-SENT: tcpi_rtt 0, no measurement yet.
    let a = SockBuilder::new(1, 5000, 80);
    let mut e = flow(&[
        (S, a.clone().state(2).rtt_us(0).rttvar_us(0).cwnd(10)),
        (2 * S, a.clone().rtt_us(50_000).rttvar_us(1000).cwnd(10)),
        (3 * S, a.clone().rtt_us(60_000).rttvar_us(2000).cwnd(20)),
        (4 * S, a.clone().rtt_us(70_000).rttvar_us(3000).cwnd(30)),
    ]);
    let r = analyze(&mut e, &cfg());
    assert_eq!(r.samples, 4);
    assert_eq!(r.min_rtt_observed_ms, Some(50.0));
    assert!(r.rtt_summary.unwrap()[0] >= 50.0, "{:?}", r.rtt_summary);
    assert!(r.rttvar_summary.unwrap()[0] >= 1.0, "{:?}", r.rttvar_summary);
    assert_eq!(r.correlations.rtt_cwnd.n, 3);
    assert!((r.corr_rtt_cwnd - 1.0).abs() < 1e-9, "{}", r.corr_rtt_cwnd);
    // No RTT at all: no RTT figures, neither zeros nor a huge sentinel.
    let mut e = flow(&[(S, a.clone().state(2).rtt_us(0)), (2 * S, a.state(2).rtt_us(0))]);
    let r = analyze(&mut e, &cfg());
    assert_eq!(r.min_rtt_observed_ms, None);
    assert_eq!((r.rtt_summary, r.rttvar_summary), (None, None));
    let json = serde_json::to_value(&r).unwrap();
    for field in ["RTTSummary", "RTTVarSummary", "MinRTTObservedms", "MinRTTKernelms"] {
        assert!(json.get(field).is_none(), "{field} in {json}");
    }
    assert!(json["Diagnosis"].get("Caps").is_none_or(|c| c.get("BDPBytes").is_none()), "{json}");
}

#[test]
fn a_one_sample_record_leaves_out_the_placeholder_correlations() {
    let s = SockBuilder::new(7, 40000, 443).rtt_us(50).cwnd(10);
    let one = analyze(&mut flow(&[(1_000_000_000, s.clone())]), &cfg());
    let v = serde_json::to_value(&one).unwrap();
    assert!(v.get("Correlations").is_none(), "{v}");
    // cgmon's fields keep their sentinel.
    assert_eq!(v["CorrRTTCwnd"], -3.0);
    let two = analyze(
        &mut flow(&[(1_000_000_000, s.clone()), (2_000_000_000, s.rtt_us(80).cwnd(20))]),
        &cfg(),
    );
    let v = serde_json::to_value(&two).unwrap();
    assert_eq!(v["Correlations"]["RTTCwnd"]["N"], 2, "{v}");
}

#[test]
fn a_one_sample_flow_has_the_general_paths_figures_field_for_field() {
    use crate::stats::{Adjust, QuantileKind};
    let a = SockBuilder::new(1, 5000, 80).cwnd(10).mss(1448);
    let mut checked = 0;
    for rtt in [0, 180] {
        for pacing in [None, Some(0), Some(u64::MAX), Some(12_345_678)] {
            for delivery in [None, Some(0), Some(9_876)] {
                let mut b = a.clone().rtt_us(rtt).rttvar_us(rtt / 2);
                if let Some(p) = pacing {
                    b = b.pacing(p);
                }
                if let Some(d) = delivery {
                    b = b.delivery_rate(d);
                }
                let mut e = flow(&[(S, b)]);
                e.gather();
                for (uq, uc) in [(false, false), (true, false), (false, true), (true, true)] {
                    for quantile in [QuantileKind::LinInterp, QuantileKind::Empirical] {
                        for adjust in [Adjust::None, Adjust::OlkinPratt, Adjust::Adjusted] {
                            let cfg = AnalyzerConfig {
                                quantile,
                                unweighted_quantiles: uq,
                                unweighted_correlations: uc,
                                adjust,
                                ..cfg()
                            };
                            let basis = Basis::new(&e.flow.samples, &cfg);
                            assert_eq!(basis.s.len(), 1);
                            let general = (rtt_figures(&basis, &cfg), rate_figures(&basis, &cfg));
                            // Debug text: an effective n of no samples is NaN either way.
                            assert_eq!(
                                format!("{:?}", one_sample_figures(&basis, &cfg)),
                                format!("{general:?}"),
                                "rtt {rtt} pacing {pacing:?} delivery {delivery:?} {cfg:?}"
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert_eq!(checked, 2 * 4 * 3 * 4 * 2 * 3);
}

#[test]
fn wall_times_are_chronos_local_times_whether_the_offset_is_kept_or_asked_for() {
    use chrono::{DateTime, Local, SecondsFormat};
    let offset = crate::clock::realtime_offset_ns();
    // Across several seconds, several times within each (the kept offset), and across a
    // year (a change of offset where the zone has one).
    let mut monos: Vec<u64> = (0..40u64).map(|i| S + i * 250_000_007).collect();
    monos.extend((1..=12u64).map(|m| m * 30 * 24 * 3600 * S));
    // The kept second's text, with the first and last nanosecond digits of a second, and
    // back and forth between two seconds.
    let whole = (S - (offset.rem_euclid(1_000_000_000) as u64)) + 7 * S;
    for d in [0, 1, 999_999_999, 5, 100_000_000, 0, 999_999_999] {
        monos.extend([whole + d, whole + S + d, whole + d]);
    }
    for mono in monos {
        let ns = i128::from(mono) + offset;
        let t = DateTime::from_timestamp(
            ns.div_euclid(1_000_000_000) as i64,
            ns.rem_euclid(1_000_000_000) as u32,
        )
        .unwrap();
        let want = t.with_timezone(&Local).to_rfc3339_opts(SecondsFormat::Nanos, true);
        assert_eq!(wall(mono, offset).as_str(), want);
    }
}
