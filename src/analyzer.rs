//! The analyzer: an ended flow → its record ([`FlowStats`]). Pure apart from its task
//! wrapper; reads no clock (wall times come from the sample times plus an offset measured at
//! startup).
//!
//! **Time weighting.** Retained sample `i` stands for the time its values held: from its
//! timestamp to the next retained sample's. Deduped samples in between count toward that
//! time, since they repeated the same values. The last sample has no successor, so it gets
//! the median of the other weights (the mean of the middle two for an even count), or 1
//! when it is the only sample. cgmon credited each interval to the sample that *ended* it
//! (its B6).
//!
//! **Correlations**, all against cwnd in bytes (`snd_cwnd × snd_mss` per sample), on the
//! time series:
//! - RTT (ms).
//! - Retransmit rate: retransmits per second over the interval a sample stands for, paired
//!   with that sample's cwnd. It is weighted by the interval length and has one pair fewer
//!   than there are samples (cgmon's B7 inserted a fixed 0 and divided by zero on equal
//!   times).
//! - Pacing rate (Mbit/s), over the samples that carry one.

use std::net::IpAddr;

use chrono::{DateTime, Local, SecondsFormat};
use serde::Serialize;
use tokio::sync::mpsc::Receiver;

use crate::states::name as state_name;
use crate::stats::correlation::{Correlation, correlate_ranked, ranks_of_subset};
use crate::stats::summary::{seven_number_sorted, sort_order, sort_order_by, sort_order_u64};
use crate::stats::{Adjust, QuantileKind};
use crate::tracker::{ABSENT_U64, EndReason, EndedFlow, Retained};
use crate::wire::inet_diag::AF_INET;
use crate::wire::tcp_info::{TCPI_OPT_ECN, TCPI_OPT_ECN_SEEN, TCPI_OPT_SACK, TCPI_OPT_TIMESTAMPS};

/// Analyzer settings (cgmon's `-analyzer-*` flags).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct AnalyzerConfig {
    /// `-analyzer-cumulant-kind`.
    pub quantile: QuantileKind,
    /// `-analyzer-unweighted-quantiles`.
    pub unweighted_quantiles: bool,
    /// `-analyzer-unweighted-correlations`.
    pub unweighted_correlations: bool,
    /// `-analyzer-adjusted-correlation-1` / `-2`.
    pub adjust: Adjust,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC, ns ([`crate::clock::realtime_offset_ns`]).
    pub realtime_offset_ns: i128,
}

/// `ID`: the flow's 4-tuple and first sample time, as cgmon writes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowId {
    /// Local address.
    #[serde(rename = "SrcIP")]
    pub src_ip: String,
    /// Local port.
    #[serde(rename = "SrcPort")]
    pub src_port: u16,
    /// Remote address.
    #[serde(rename = "DstIP")]
    pub dst_ip: String,
    /// Remote port.
    #[serde(rename = "DstPort")]
    pub dst_port: u16,
    /// CLOCK_MONOTONIC ns of the first sample.
    #[serde(rename = "TstampStartNs")]
    pub tstamp_start_ns: u64,
}

/// One correlation with its evidence.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CorrDetail {
    /// Pearson's r (after any adjustment); -2 undefined, -3 fewer than two samples.
    pub pearson: f64,
    /// Spearman's ρ; same sentinels.
    pub spearman: f64,
    /// Two-sided p-value of r; absent when it cannot be computed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pearson_p: Option<f64>,
    /// Two-sided p-value of ρ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spearman_p: Option<f64>,
    /// Pairs used.
    pub n: usize,
    /// Effective sample size of the weights (Kish).
    pub effective_n: f64,
}

impl From<Correlation> for CorrDetail {
    fn from(c: Correlation) -> Self {
        Self {
            pearson: c.pearson,
            spearman: c.spearman,
            pearson_p: c.pearson_p,
            spearman_p: c.spearman_p,
            n: c.n,
            effective_n: c.n_eff,
        }
    }
}

/// The three correlations.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Correlations {
    /// RTT ~ cwnd.
    #[serde(rename = "RTTCwnd")]
    pub rtt_cwnd: CorrDetail,
    /// Retransmit rate ~ cwnd.
    #[serde(rename = "RetransCwnd")]
    pub retrans_cwnd: CorrDetail,
    /// Pacing rate ~ cwnd.
    #[serde(rename = "PacingCwnd")]
    pub pacing_cwnd: CorrDetail,
}

/// One flow's record. cgmon's fields first, under cgmon's names and units, then ours.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowStats {
    /// Identity.
    #[serde(rename = "ID")]
    pub id: FlowId,
    /// Wall time of the first sample, RFC 3339 with ns, local time zone.
    #[serde(rename = "StartTime")]
    pub start_time: String,
    /// Wall time the end was seen (destroy event, or the dump that missed the flow).
    #[serde(rename = "EndTime")]
    pub end_time: String,
    /// Last sample seen minus first, ns.
    #[serde(rename = "Duration")]
    pub duration: i64,
    /// Retained samples.
    #[serde(rename = "Samples")]
    pub samples: usize,
    /// Deduped samples.
    #[serde(rename = "SamplesDeduped")]
    pub samples_deduped: u32,
    /// Start or end not seen (`PartialStart || PartialEnd`).
    #[serde(rename = "Partial")]
    pub partial: bool,
    /// TCPI_OPT_TIMESTAMPS in any sample.
    #[serde(rename = "Timestamps")]
    pub timestamps: bool,
    /// TCPI_OPT_SACK in any sample.
    #[serde(rename = "SACK")]
    pub sack: bool,
    /// TCPI_OPT_ECN in any sample.
    #[serde(rename = "ECN")]
    pub ecn: bool,
    /// TCPI_OPT_ECN_SEEN in any sample.
    #[serde(rename = "ECNSeen")]
    pub ecn_seen: bool,
    /// tcpi_min_rtt of the last sample, ms; absent when the kernel had no RTT sample.
    #[serde(rename = "MinRTTKernelms", skip_serializing_if = "Option::is_none")]
    pub min_rtt_kernel_ms: Option<f64>,
    /// Smallest tcpi_rtt over retained samples, ms; absent when no sample had an RTT.
    #[serde(rename = "MinRTTObservedms", skip_serializing_if = "Option::is_none")]
    pub min_rtt_observed_ms: Option<f64>,
    /// tcpi_max_pacing_rate (SO_MAX_PACING_RATE), Mbit/s; absent when unlimited.
    #[serde(rename = "MaxPacingRateKernelMbps", skip_serializing_if = "Option::is_none")]
    pub max_pacing_rate_kernel_mbps: Option<f64>,
    /// Largest tcpi_pacing_rate over retained samples, Mbit/s; absent when none had one.
    #[serde(rename = "MaxPacingRateObservedMbps", skip_serializing_if = "Option::is_none")]
    pub max_pacing_rate_observed_mbps: Option<f64>,
    /// Seven-number summary of tcpi_rtt over the samples with an RTT, ms; absent when no
    /// sample had one (a tcpi_rtt of 0 is "not measured", never a 0 ms RTT).
    #[serde(rename = "RTTSummary", skip_serializing_if = "Option::is_none")]
    pub rtt_summary: Option<[f64; 7]>,
    /// Seven-number summary of tcpi_rttvar over the same samples, ms; absent likewise.
    #[serde(rename = "RTTVarSummary", skip_serializing_if = "Option::is_none")]
    pub rttvar_summary: Option<[f64; 7]>,
    /// Pearson RTT ~ cwnd.
    #[serde(rename = "CorrRTTCwnd")]
    pub corr_rtt_cwnd: f64,
    /// Pearson retransmit rate ~ cwnd.
    #[serde(rename = "CorrRetransCwnd")]
    pub corr_retrans_cwnd: f64,
    /// Pearson pacing rate ~ cwnd.
    #[serde(rename = "CorrPacingCwnd")]
    pub corr_pacing_cwnd: f64,
    /// tcpi_total_retrans of the last sample.
    #[serde(rename = "TotalRetransmits")]
    pub total_retransmits: u32,
    /// tcpi_bytes_acked of the last sample (cumulative; SYN and FIN count 1 each).
    #[serde(rename = "BytesAcked")]
    pub bytes_acked: u64,
    /// Bytes acked during the sampled span over its length, Mbit/s; 0 for a one-sample flow.
    #[serde(rename = "SendThroughputMbps")]
    pub send_throughput_mbps: f64,
    /// tcpi_delivered of the last sample (segments).
    #[serde(rename = "Delivered")]
    pub delivered: u32,
    /// tcpi_delivered_ce of the last sample (segments).
    #[serde(rename = "DeliveredCE")]
    pub delivered_ce: u32,
    /// The start was not seen: open at startup, or a window after the first.
    #[serde(rename = "PartialStart")]
    pub partial_start: bool,
    /// The end was not seen: open at shutdown, or cut at the window cap.
    #[serde(rename = "PartialEnd")]
    pub partial_end: bool,
    /// Window number, from 0; a long flow yields one record per window.
    #[serde(rename = "Seq")]
    pub seq: u32,
    /// destroyed | gone | shutdown | window.
    #[serde(rename = "EndReason")]
    pub end_reason: &'static str,
    /// How the connection closed: clean (this side's FIN was acknowledged) | reset (a RST
    /// was sent or received, or the kernel gave up on it); absent when the end was not seen
    /// or cannot be told.
    #[serde(rename = "Close", skip_serializing_if = "Option::is_none")]
    pub close: Option<&'static str>,
    /// Seven-number summary of cwnd, bytes.
    #[serde(rename = "CwndSummary")]
    pub cwnd_summary: [f64; 7],
    /// Seven-number summary of tcpi_pacing_rate, Mbit/s; absent when no sample had one.
    #[serde(rename = "PacingRateSummary", skip_serializing_if = "Option::is_none")]
    pub pacing_rate_summary: Option<[f64; 7]>,
    /// Seven-number summary of tcpi_delivery_rate, Mbit/s.
    #[serde(rename = "DeliveryRateSummary", skip_serializing_if = "Option::is_none")]
    pub delivery_rate_summary: Option<[f64; 7]>,
    /// Pearson and Spearman with p-values and effective sample sizes.
    #[serde(rename = "Correlations")]
    pub correlations: Correlations,
    /// Bytes received during the sampled span over its length, Mbit/s.
    #[serde(rename = "RecvThroughputMbps")]
    pub recv_throughput_mbps: f64,
    /// tcpi_bytes_sent (includes retransmissions).
    #[serde(rename = "BytesSent")]
    pub bytes_sent: u64,
    /// tcpi_bytes_retrans.
    #[serde(rename = "BytesRetrans")]
    pub bytes_retrans: u64,
    /// tcpi_bytes_received.
    #[serde(rename = "BytesReceived")]
    pub bytes_received: u64,
    /// Congestion-control algorithm ("" when the kernel never named it).
    #[serde(rename = "CongestionControl")]
    pub congestion_control: String,
    /// inet | inet6.
    #[serde(rename = "Family")]
    pub family: &'static str,
    /// State at the last sample (ss's names).
    #[serde(rename = "FinalState")]
    pub final_state: &'static str,
    /// Socket cookie.
    #[serde(rename = "Cookie")]
    pub cookie: u64,
    /// cgroup2 id (directory inode); absent when the kernel sent none.
    #[serde(rename = "CgroupID", skip_serializing_if = "Option::is_none")]
    pub cgroup_id: Option<u64>,
    /// What limited the flow, and why (absent on kernels without tcpi_busy_time).
    #[serde(rename = "Diagnosis", skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<diagnosis::Diagnosis>,
}

pub(crate) fn ip(family: u8, raw: &[u8; 16]) -> String {
    if family == AF_INET {
        IpAddr::from([raw[0], raw[1], raw[2], raw[3]]).to_string()
    } else {
        IpAddr::from(*raw).to_string()
    }
}

fn wall(mono_ns: u64, offset: i128) -> String {
    let ns = i128::from(mono_ns) + offset;
    let secs = ns.div_euclid(1_000_000_000) as i64;
    let sub = ns.rem_euclid(1_000_000_000) as u32;
    match DateTime::from_timestamp(secs, sub) {
        Some(t) => t.with_timezone(&Local).to_rfc3339_opts(SecondsFormat::Nanos, true),
        None => String::new(),
    }
}

/// The weight of each retained sample (see the module docs), in seconds.
pub fn time_weights(samples: &[Retained]) -> Vec<f64> {
    let n = samples.len();
    if n <= 1 {
        return vec![1.0; n];
    }
    let mut w: Vec<f64> =
        samples.windows(2).map(|p| p[1].ts_ns.saturating_sub(p[0].ts_ns) as f64 / 1e9).collect();
    let mut tmp = w.clone();
    let m = tmp.len();
    let (lower, mid, _) = tmp.select_nth_unstable_by(m / 2, f64::total_cmp);
    let mid = *mid;
    let median = if m % 2 == 1 {
        mid
    } else {
        // The other middle value is the largest of the lower half.
        (lower.iter().copied().fold(f64::NEG_INFINITY, f64::max) + mid) / 2.0
    };
    w.push(median);
    w
}

fn mbps(bytes_per_s: u64) -> f64 {
    bytes_per_s as f64 * 8.0 / 1e6
}

fn throughput_mbps(bytes: u64, span_ns: u64) -> f64 {
    if span_ns == 0 { 0.0 } else { bytes as f64 * 8.0 / (span_ns as f64 / 1e9) / 1e6 }
}

/// Computes a flow's record. It [gathers](EndedFlow::gather) the flow first (nothing to do
/// when the caller has, as the analyzer stage does into reused memory), so no caller can
/// analyse a flow whose older samples still lie in the tracker's blocks and get a record
/// silently cut short (a debug assertion, as before, caught that only in debug builds).
pub fn analyze(e: &mut EndedFlow, cfg: &AnalyzerConfig) -> FlowStats {
    e.gather();
    let e = &*e;
    let f = &e.flow;
    let s = &f.samples;
    let w = time_weights(s);
    let wq = (!cfg.unweighted_quantiles).then_some(&w[..]);
    let wc = (!cfg.unweighted_correlations).then_some(&w[..]);
    let kind = cfg.quantile;
    let adjust = cfg.adjust;
    let n = s.len();

    // A subset of samples with a value for each: (values, weights, cwnd, slot of each sample
    // in the subset or u32::MAX).
    struct Subset {
        x: Vec<f64>,
        w: Vec<f64>,
        cwnd: Vec<f64>,
        slot: Vec<u32>,
    }
    let cwnd: Vec<f64> = s.iter().map(|r| r.cwnd_bytes as f64).collect();
    let subset = |value: &dyn Fn(usize) -> Option<(f64, f64)>| -> Subset {
        let mut out =
            Subset { x: Vec::new(), w: Vec::new(), cwnd: Vec::new(), slot: vec![u32::MAX; n] };
        for (i, &c) in cwnd.iter().enumerate() {
            if let Some((v, weight)) = value(i) {
                out.slot[i] = out.x.len() as u32;
                out.x.push(v);
                out.w.push(weight);
                out.cwnd.push(c);
            }
        }
        out
    };
    fn weights(flag: bool, sub: &Subset) -> Option<&[f64]> {
        (!flag).then_some(sub.w.as_slice())
    }

    // Each series is sorted once; its order serves both the summary and Spearman's ranks
    // (of the whole series or of a subset). Sorting dominates the analysis.
    // A tcpi_rtt of 0 means no RTT was measured yet (e.g. in SYN-SENT): such samples are
    // left out of the RTT figures instead of reading as a 0 ms RTT.
    let has_rtt = |i: usize| s[i].rtt_us > 0;
    // Usually every sample has an RTT: then the full series serve as they are, uncopied.
    let all_rtt = s.iter().all(|r| r.rtt_us > 0);
    let rtt_sub = (!all_rtt)
        .then(|| subset(&|i| has_rtt(i).then(|| (f64::from(s[i].rtt_us) / 1000.0, w[i]))));
    let rtt_full: Vec<f64>;
    let (rtt_x, rtt_cwnd, rtt_w): (&[f64], &[f64], &[f64]) = match &rtt_sub {
        Some(sub) => (&sub.x, &sub.cwnd, &sub.w),
        None => {
            rtt_full = s.iter().map(|r| f64::from(r.rtt_us) / 1000.0).collect();
            (&rtt_full, &cwnd, &w)
        }
    };
    let rttvar: Vec<f64> =
        (0..n).filter(|&i| has_rtt(i)).map(|i| f64::from(s[i].rttvar_us) / 1000.0).collect();
    let (rq, rcw) = (
        (!cfg.unweighted_quantiles).then_some(rtt_w),
        (!cfg.unweighted_correlations).then_some(rtt_w),
    );
    // Sorted by the integer counters the floats came from: same order, fewer radix passes.
    let rtt_u32 = |get: fn(&Retained) -> u32| -> Vec<u32> {
        s.iter().filter(|r| all_rtt || r.rtt_us > 0).map(get).collect()
    };
    let o_rtt = sort_order_by(&rtt_u32(|r| r.rtt_us), rq);
    let o_var = sort_order_by(&rtt_u32(|r| r.rttvar_us), rq);
    let o_cwnd = sort_order_u64(&s.iter().map(|r| r.cwnd_bytes).collect::<Vec<_>>(), wq);
    let summary = |x: &[f64], o: &[u32], w: Option<&[f64]>| {
        seven_number_sorted(x, w, o, kind).unwrap_or([0.0; 7])
    };
    let cwnd_ranks = ranks_of_subset(&cwnd, &o_cwnd, None, n, wc);
    let rtt_cwnd_ranks: Vec<f64>;
    let c_rtt = correlate_ranked(
        rtt_x,
        rtt_cwnd,
        &ranks_of_subset(rtt_x, &o_rtt, None, rtt_x.len(), rcw),
        match &rtt_sub {
            None => &cwnd_ranks, // every sample has an RTT: same subset, same weights
            Some(sub) => {
                rtt_cwnd_ranks = ranks_of_subset(&cwnd, &o_cwnd, Some(&sub.slot), sub.x.len(), rcw);
                &rtt_cwnd_ranks
            }
        },
        rcw,
        adjust,
    );

    let rate = |v: u64| (v != ABSENT_U64).then(|| mbps(v));
    let pacing = subset(&|i| rate(s[i].pacing_rate).map(|v| (v, w[i])));
    let delivery = subset(&|i| rate(s[i].delivery_rate).map(|v| (v, w[i])));
    // Retransmits per second over each interval a sample stands for, with its cwnd.
    let retrans = subset(&|i| {
        let next = s.get(i + 1)?;
        let dt = next.ts_ns.saturating_sub(s[i].ts_ns) as f64 / 1e9;
        (dt > 0.0)
            .then(|| (f64::from(next.total_retrans.wrapping_sub(s[i].total_retrans)) / dt, dt))
    });
    let (pq, pc) =
        (weights(cfg.unweighted_quantiles, &pacing), weights(cfg.unweighted_correlations, &pacing));
    let rc = weights(cfg.unweighted_correlations, &retrans);
    let dq = weights(cfg.unweighted_quantiles, &delivery);
    let raw = |get: fn(&Retained) -> u64| -> Vec<u64> {
        s.iter().map(get).filter(|&v| v != ABSENT_U64).collect()
    };
    let o_pacing = sort_order_u64(&raw(|r| r.pacing_rate), pq);
    let o_delivery = sort_order_u64(&raw(|r| r.delivery_rate), dq);
    let pacing_cwnd_ranks: Vec<f64>;
    let c_pacing = correlate_ranked(
        &pacing.x,
        &pacing.cwnd,
        &ranks_of_subset(&pacing.x, &o_pacing, None, pacing.x.len(), pc),
        if pacing.x.len() == n && pc.is_some() == wc.is_some() {
            &cwnd_ranks // every sample has a pacing rate: same subset, same weights
        } else {
            pacing_cwnd_ranks =
                ranks_of_subset(&cwnd, &o_cwnd, Some(&pacing.slot), pacing.x.len(), pc);
            &pacing_cwnd_ranks
        },
        pc,
        adjust,
    );
    let o_retrans = sort_order(&retrans.x, None);
    let c_retrans = correlate_ranked(
        &retrans.x,
        &retrans.cwnd,
        &ranks_of_subset(&retrans.x, &o_retrans, None, retrans.x.len(), rc),
        &ranks_of_subset(&cwnd, &o_cwnd, Some(&retrans.slot), retrans.x.len(), rc),
        rc,
        adjust,
    );

    let span = f.span_ns();
    let last = &f.last;
    let send_throughput_mbps =
        throughput_mbps(last.bytes_acked.saturating_sub(f.first_bytes_acked), span);
    let rtt_summary = seven_number_sorted(rtt_x, rq, &o_rtt, kind);
    let cwnd_summary = summary(&cwnd, &o_cwnd, wq);
    let min_rtt_observed_ms = rtt_x.iter().copied().reduce(f64::min);
    let min_rtt_kernel_ms =
        (last.min_rtt_us != u32::MAX).then(|| f64::from(last.min_rtt_us) / 1000.0);
    let diagnosis = diagnosis::diagnose(
        e,
        diagnosis::Inputs {
            throughput_mbps: send_throughput_mbps,
            min_rtt_ms: min_rtt_kernel_ms.or(min_rtt_observed_ms).unwrap_or(0.0),
            rtt_p50_ms: rtt_summary.map_or(0.0, |r| r[3]),
            cwnd_p50_bytes: cwnd_summary[3],
        },
    );
    let has = |bit: u8| f.options & bit != 0;
    let partial_end = e.partial_end();
    FlowStats {
        id: FlowId {
            src_ip: ip(f.key.family, &f.key.src),
            src_port: f.key.sport,
            dst_ip: ip(f.key.family, &f.key.dst),
            dst_port: f.key.dport,
            tstamp_start_ns: f.first_ts_ns,
        },
        start_time: wall(f.first_ts_ns, cfg.realtime_offset_ns),
        end_time: wall(e.end_ts_ns, cfg.realtime_offset_ns),
        duration: i64::try_from(span).unwrap_or(i64::MAX),
        samples: s.len(),
        samples_deduped: f.deduped,
        partial: f.partial_start || partial_end,
        timestamps: has(TCPI_OPT_TIMESTAMPS),
        sack: has(TCPI_OPT_SACK),
        ecn: has(TCPI_OPT_ECN),
        ecn_seen: has(TCPI_OPT_ECN_SEEN),
        min_rtt_kernel_ms,
        min_rtt_observed_ms,
        max_pacing_rate_kernel_mbps: (last.max_pacing_rate != ABSENT_U64)
            .then(|| mbps(last.max_pacing_rate)),
        max_pacing_rate_observed_mbps: pacing.x.iter().copied().reduce(f64::max),
        rtt_summary,
        rttvar_summary: seven_number_sorted(&rttvar, rq, &o_var, kind),
        corr_rtt_cwnd: c_rtt.pearson,
        corr_retrans_cwnd: c_retrans.pearson,
        corr_pacing_cwnd: c_pacing.pearson,
        total_retransmits: last.total_retrans,
        bytes_acked: last.bytes_acked,
        send_throughput_mbps,
        delivered: last.delivered,
        delivered_ce: last.delivered_ce,
        partial_start: f.partial_start,
        partial_end,
        seq: f.seq,
        end_reason: match e.reason {
            EndReason::Destroyed => "destroyed",
            EndReason::Gone => "gone",
            EndReason::Shutdown => "shutdown",
            EndReason::Window => "window",
        },
        close: e.close.map(crate::tracker::Close::as_str),
        cwnd_summary,
        pacing_rate_summary: seven_number_sorted(&pacing.x, pq, &o_pacing, kind),
        delivery_rate_summary: seven_number_sorted(&delivery.x, dq, &o_delivery, kind),
        correlations: Correlations {
            rtt_cwnd: c_rtt.into(),
            retrans_cwnd: c_retrans.into(),
            pacing_cwnd: c_pacing.into(),
        },
        recv_throughput_mbps: throughput_mbps(
            last.bytes_received.saturating_sub(f.first_bytes_received),
            span,
        ),
        bytes_sent: last.bytes_sent,
        bytes_retrans: last.bytes_retrans,
        bytes_received: last.bytes_received,
        congestion_control: f.cc.as_str().to_string(),
        family: if f.key.family == AF_INET { "inet" } else { "inet6" },
        final_state: state_name(last.state),
        cookie: f.key.cookie,
        cgroup_id: (f.cgroup_id != 0).then_some(f.cgroup_id),
        diagnosis,
    }
}

/// Stops glibc from returning freed heap to the kernel at the 128 KiB default trim
/// threshold (raised to 64 MiB, per process).
///
/// Analyzing a long flow allocates and frees about 1 MB of vectors. With the default, the
/// freed top of the heap went back to the kernel after every record and was faulted in
/// again for the next: 10,000 samples took 3.1 ms, of which ~1 ms was page faults; with
/// the memory kept, 2.1 ms (best of 100, same run). The analyzer stage calls this; the
/// memory kept is bounded by the largest analysis, a few MB.
pub fn keep_heap_for_reuse() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only adjusts allocator parameters; it is safe to call at any time.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
    }
}

/// The analyzer stage's settings beyond the analysis itself.
#[derive(Debug, Clone, Default)]
pub struct StageConfig {
    /// How records are computed.
    pub analysis: AnalyzerConfig,
    /// `-writer-partial`: also pass on flows that were open at startup or shutdown.
    pub write_partial: bool,
    /// `--samples-out`: pass on every retained sample as JSON lines too.
    pub samples_out: bool,
}

impl StageConfig {
    /// Whether `e` is written. Without `-writer-partial`, a flow that crossed the
    /// monitor's start or stop is not (cgmon's rule). Interim windows of a flow seen from
    /// its start are written, though they are partial at a window edge: otherwise a flow
    /// that outlives a window would never be written at all.
    pub fn writes(&self, e: &EndedFlow) -> bool {
        self.write_partial || !(e.flow.preexisting || e.reason == EndReason::Shutdown)
    }
}

/// The analyzer stage: ended flows in, record batches out to the writer thread, until its
/// input closes.
///
/// When the writer's channel is full this stage waits (on a blocking-pool thread, never
/// on a runtime worker); sampling does not wait, since the tracker hands on with
/// `try_send` and counts what it must drop.
///
/// # Errors
/// The writer is gone.
pub async fn run(
    cfg: StageConfig,
    mut ended_rx: Receiver<Vec<EndedFlow>>,
    writer_tx: std::sync::mpsc::SyncSender<crate::writer::Msg>,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
) -> Result<(), crate::tracker::task::StageError> {
    use crate::tracker::task::StageError;
    use crate::writer::{Batch, Msg};
    use std::sync::mpsc::TrySendError;
    keep_heap_for_reuse();
    // The last flow's samples: the next one is gathered into their memory. It holds at
    // most one window.
    let mut spare = Vec::new();
    while let Some(ended) = ended_rx.recv().await {
        let start = std::time::Instant::now();
        let samples: u64 = ended.iter().map(|e| e.sample_count() as u64).sum();
        let mut out = Batch::default();
        for mut e in ended {
            // Every flow and window the analyzer receives, written or not, as cgmon's
            // histogram counted them; by the span the record's `Duration` gives.
            metrics.flow_durations.push(std::time::Duration::from_nanos(e.flow.span_ns()));
            if !cfg.writes(&e) {
                metrics.records_partial_skipped.inc();
                continue; // dropped ungathered: its blocks go back to the tracker
            }
            e.gather_into(std::mem::take(&mut spare));
            let r = analyze(&mut e, &cfg.analysis);
            if cfg.samples_out {
                samples::write_lines(&mut e, &r.id, &mut out.samples);
            }
            spare = std::mem::take(&mut e.flow.samples);
            out.records.push(r);
        }
        metrics.ended_queue_samples.sub(samples);
        let took = start.elapsed();
        metrics.time(crate::metrics::Stage::Analyzer, took);
        tracing::debug!(target: "cgmon_rs::analyzer", time_us = took.as_micros() as u64,
            flows = out.records.len(), "analyzer batch");
        if out.records.is_empty() {
            continue;
        }
        // Bounded in bytes, not only in batches: wait while the writer holds too much (a
        // batch goes alone into an empty queue, however large).
        out.queued_bytes =
            out.records.len() as u64 * crate::writer::RECORD_BYTES + out.samples.len() as u64;
        // (A writer that stopped takes nothing: the send below finds out.)
        while metrics.writer_queue_bytes.get() > 0
            && metrics.writer_queue_bytes.get() + out.queued_bytes > crate::writer::MAX_QUEUED_BYTES
            && metrics.writer_stopped.get() == 0
        {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        metrics.writer_queue_bytes.add(out.queued_bytes);
        match writer_tx.try_send(Msg::Batch(out)) {
            Ok(()) => {}
            Err(TrySendError::Full(msg)) => {
                let tx = writer_tx.clone();
                tokio::task::spawn_blocking(move || tx.send(msg))
                    .await
                    .map_err(|_| StageError::DownstreamGone)?
                    .map_err(|_| StageError::DownstreamGone)?;
            }
            Err(TrySendError::Disconnected(_)) => return Err(StageError::DownstreamGone),
        }
    }
    Ok(())
}

pub mod diagnosis;
pub mod samples;

#[cfg(test)]
mod tests;
