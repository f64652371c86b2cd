//! The analysis: an ended flow → its record ([`FlowStats`]). Pure; reads no clock (wall
//! times come from the sample times plus an offset measured at startup). The pipeline's
//! stage that runs it is [`stage`]; the diagnosis of what limited a flow is [`diagnosis`].
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

use chrono::{DateTime, Local, SecondsFormat};

pub use crate::record::{CorrDetail, Correlations, FlowId, FlowStats, SamplingStats, ip, mbps};
use crate::record::{TimeText, UNKNOWN_CC, UNKNOWN_RATE, text_in};
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

/// The RFC 3339 local time (nanoseconds, `Z` for UTC) of CLOCK_MONOTONIC `mono_ns`.
///
/// The text up to the second and the zone after the digits are kept for the last second
/// asked for: within a second only the nine digits differ (the offset changes only at a
/// whole second, see [`local_offset`]). Formatted whole by chrono each time, the two times
/// of a record were a large part of a one-sample flow's analysis under churn
/// (benches/RESULTS.md, D23).
fn wall(mono_ns: u64, offset: i128) -> TimeText {
    thread_local! {
        /// (UTC second, text up to and with its `.`, the zone's text).
        static SECOND: std::cell::RefCell<(i64, String, String)> =
            const { std::cell::RefCell::new((i64::MIN, String::new(), String::new())) };
    }
    let ns = i128::from(mono_ns) + offset;
    let secs = ns.div_euclid(1_000_000_000) as i64;
    let sub = ns.rem_euclid(1_000_000_000) as u32;
    SECOND.with_borrow_mut(|(second, head, zone)| {
        if *second != secs {
            let Some(t) = DateTime::from_timestamp(secs, sub) else { return TimeText::new() };
            let text =
                t.with_timezone(&local_offset(&t)).to_rfc3339_opts(SecondsFormat::Nanos, true);
            // `SS.` then nine digits, then the zone: `Z` or `+hh:mm`.
            let Some(dot) = text.find('.') else { return text_in(&text) };
            (*second, *head, *zone) = (secs, text[..=dot].into(), text[dot + 10..].into());
            return text_in(&text);
        }
        // Within the capacity, as chrono's text of this second was (`TimeText`); `try_`
        // all the same, so that no text could panic here.
        let mut out = TimeText::new();
        let _ = out.try_push_str(head);
        let mut digits = [b'0'; 9];
        let mut n = sub;
        for d in digits.iter_mut().rev() {
            *d = b'0' + (n % 10) as u8;
            n /= 10;
        }
        // Nine ASCII digits.
        let _ = out.try_push_str(std::str::from_utf8(&digits).unwrap_or_default());
        let _ = out.try_push_str(zone);
        out
    })
}

/// The local time zone's offset at `t`, kept for its UTC second. Asking `Local` was a
/// fifth of a one-sample flow's analysis (two times a record, thousands of records a
/// second under churn: `cargo bench --bench churn`, PERF=); a zone's offset changes only
/// at a whole second, so within one the answer is the same.
fn local_offset(t: &DateTime<chrono::Utc>) -> chrono::FixedOffset {
    use chrono::Offset;
    thread_local! {
        static LAST: std::cell::Cell<Option<(i64, chrono::FixedOffset)>> =
            const { std::cell::Cell::new(None) };
    }
    let secs = t.timestamp();
    LAST.with(|last| match last.get() {
        Some((s, o)) if s == secs => o,
        _ => {
            let o = t.with_timezone(&Local).offset().fix();
            last.set(Some((secs, o)));
            o
        }
    })
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
    let b = Basis::new(&e.flow.samples, cfg);
    let (rtt, rates) = if b.s.len() == 1 {
        one_sample_figures(&b, cfg)
    } else {
        (rtt_figures(&b, cfg), rate_figures(&b, cfg))
    };
    let mut r = record(e, cfg, &b, rtt, rates);
    r.not_named = r.why_not_named();
    r
}

/// A subset of the one sample of a flow: its value, weight (1) and cwnd, as slices of one
/// element when it has the value, of none when not.
struct One {
    x: [f64; 1],
    w: [f64; 1],
    cwnd: [f64; 1],
    n: usize,
}

impl One {
    fn of(v: Option<f64>, cwnd: f64) -> Self {
        Self { x: [v.unwrap_or(0.0)], w: [1.0], cwnd: [cwnd], n: usize::from(v.is_some()) }
    }

    fn x(&self) -> &[f64] {
        &self.x[..self.n]
    }

    /// Its weights, unless `unweighted` (as [`Subset::weights`]).
    fn weights(&self, unweighted: bool) -> Option<&[f64]> {
        (!unweighted).then_some(&self.w[..self.n])
    }

    fn summary(&self, unweighted: bool, kind: QuantileKind) -> Option<[f64; 7]> {
        seven_number_sorted(self.x(), self.weights(unweighted), &[0][..self.n], kind)
    }

    /// Against cwnd: fewer than two pairs, so the placeholder with its n and n_eff.
    fn corr(&self, unweighted: bool, adjust: Adjust) -> Correlation {
        let (x, c) = (self.x(), &self.cwnd[..self.n]);
        correlate_ranked(x, c, x, c, self.weights(unweighted), adjust)
    }
}

/// [`rtt_figures`] and [`rate_figures`] of a flow of one sample, without their vectors:
/// most short connections are seen only in their destroy event, and the general path's
/// twenty-odd allocations and sorts were half their analysis (`cargo bench --bench churn`,
/// PERF=). The same figures, field for field: a test compares the two paths.
fn one_sample_figures(b: &Basis<'_>, cfg: &AnalyzerConfig) -> (RttFigures, RateFigures) {
    let (r, c) = (&b.s[0], b.cwnd[0]);
    let (uq, uc, kind) = (cfg.unweighted_quantiles, cfg.unweighted_correlations, cfg.quantile);
    let has_rtt = r.rtt_us > 0;
    let rtt = One::of(has_rtt.then(|| f64::from(r.rtt_us) / 1000.0), c);
    let var = One::of(has_rtt.then(|| f64::from(r.rttvar_us) / 1000.0), c);
    let rate = |v: u64| (v != ABSENT_U64).then(|| mbps(v));
    let (pacing, delivery) =
        (One::of(rate(r.pacing_rate()), c), One::of(rate(r.delivery_rate()), c));
    (
        RttFigures {
            summary: rtt.summary(uq, kind),
            var_summary: var.summary(uq, kind),
            corr: rtt.corr(uc, cfg.adjust),
            min_observed_ms: rtt.x().first().copied(),
        },
        RateFigures {
            pacing_summary: pacing.summary(uq, kind),
            pacing_max: pacing.x().first().copied(),
            delivery_summary: delivery.summary(uq, kind),
            pacing_corr: pacing.corr(uc, cfg.adjust),
            // A retransmit rate needs the next sample.
            retrans_corr: One::of(None, c).corr(uc, cfg.adjust),
        },
    )
}

/// A subset of samples with a value for each: values, weights, the cwnd of each, and the
/// slot of each sample in the subset (`u32::MAX` when it has no value).
struct Subset {
    x: Vec<f64>,
    w: Vec<f64>,
    cwnd: Vec<f64>,
    slot: Vec<u32>,
}

impl Subset {
    /// The samples `value` gives a (value, weight) for.
    fn of(cwnd: &[f64], value: &dyn Fn(usize) -> Option<(f64, f64)>) -> Subset {
        let mut out = Subset {
            x: Vec::new(),
            w: Vec::new(),
            cwnd: Vec::new(),
            slot: vec![u32::MAX; cwnd.len()],
        };
        for (i, &c) in cwnd.iter().enumerate() {
            if let Some((v, weight)) = value(i) {
                out.slot[i] = out.x.len() as u32;
                out.x.push(v);
                out.w.push(weight);
                out.cwnd.push(c);
            }
        }
        out
    }

    /// Its weights, unless `unweighted`.
    fn weights(&self, unweighted: bool) -> Option<&[f64]> {
        (!unweighted).then_some(self.w.as_slice())
    }
}

/// What every figure shares: the samples, their time weights, and cwnd sorted once (its
/// order serves both its summary and Spearman's ranks; sorting dominates the analysis).
struct Basis<'a> {
    s: &'a [Retained],
    w: Vec<f64>,
    cwnd: Vec<f64>,
    o_cwnd: Vec<u32>,
    cwnd_ranks: Vec<f64>,
}

impl<'a> Basis<'a> {
    fn new(s: &'a [Retained], cfg: &AnalyzerConfig) -> Self {
        let w = time_weights(s);
        let wq = (!cfg.unweighted_quantiles).then_some(&w[..]);
        let wc = (!cfg.unweighted_correlations).then_some(&w[..]);
        let cwnd: Vec<f64> = s.iter().map(|r| r.cwnd_bytes() as f64).collect();
        let o_cwnd = sort_order_u64(&s.iter().map(|r| r.cwnd_bytes()).collect::<Vec<_>>(), wq);
        let cwnd_ranks = ranks_of_subset(&cwnd, &o_cwnd, None, s.len(), wc);
        Self { s, w, cwnd, o_cwnd, cwnd_ranks }
    }
}

/// The RTT figures.
#[derive(Debug)]
struct RttFigures {
    summary: Option<[f64; 7]>,
    var_summary: Option<[f64; 7]>,
    corr: Correlation,
    min_observed_ms: Option<f64>,
}

/// RTT and RTT variance over the samples with an RTT, and RTT ~ cwnd. A tcpi_rtt of 0 means
/// no RTT was measured yet (e.g. in SYN-SENT): such samples are left out of the RTT figures
/// instead of reading as a 0 ms RTT.
fn rtt_figures(b: &Basis<'_>, cfg: &AnalyzerConfig) -> RttFigures {
    let (s, w, n) = (b.s, &b.w, b.s.len());
    let has_rtt = |i: usize| s[i].rtt_us > 0;
    // Usually every sample has an RTT: then the full series serve as they are, uncopied.
    let all_rtt = s.iter().all(|r| r.rtt_us > 0);
    let rtt_sub = (!all_rtt).then(|| {
        Subset::of(&b.cwnd, &|i| has_rtt(i).then(|| (f64::from(s[i].rtt_us) / 1000.0, w[i])))
    });
    let rtt_full: Vec<f64>;
    let (rtt_x, rtt_cwnd, rtt_w): (&[f64], &[f64], &[f64]) = match &rtt_sub {
        Some(sub) => (&sub.x, &sub.cwnd, &sub.w),
        None => {
            rtt_full = s.iter().map(|r| f64::from(r.rtt_us) / 1000.0).collect();
            (&rtt_full, &b.cwnd, w)
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
    let rtt_cwnd_ranks: Vec<f64>;
    let corr = correlate_ranked(
        rtt_x,
        rtt_cwnd,
        &ranks_of_subset(rtt_x, &o_rtt, None, rtt_x.len(), rcw),
        match &rtt_sub {
            None => &b.cwnd_ranks, // every sample has an RTT: same subset, same weights
            Some(sub) => {
                rtt_cwnd_ranks =
                    ranks_of_subset(&b.cwnd, &b.o_cwnd, Some(&sub.slot), sub.x.len(), rcw);
                &rtt_cwnd_ranks
            }
        },
        rcw,
        cfg.adjust,
    );
    RttFigures {
        summary: seven_number_sorted(rtt_x, rq, &o_rtt, cfg.quantile),
        var_summary: seven_number_sorted(&rttvar, rq, &o_var, cfg.quantile),
        corr,
        min_observed_ms: rtt_x.iter().copied().reduce(f64::min),
    }
}

/// The rate figures.
#[derive(Debug)]
struct RateFigures {
    pacing_summary: Option<[f64; 7]>,
    pacing_max: Option<f64>,
    delivery_summary: Option<[f64; 7]>,
    pacing_corr: Correlation,
    retrans_corr: Correlation,
}

/// Pacing and delivery rates over the samples that have one, pacing rate ~ cwnd, and the
/// retransmit rate over each interval a sample stands for ~ its cwnd.
fn rate_figures(b: &Basis<'_>, cfg: &AnalyzerConfig) -> RateFigures {
    let (s, w, n) = (b.s, &b.w, b.s.len());
    let wc = (!cfg.unweighted_correlations).then_some(&w[..]);
    let rate = |v: u64| (v != ABSENT_U64).then(|| mbps(v));
    let pacing = Subset::of(&b.cwnd, &|i| rate(s[i].pacing_rate()).map(|v| (v, w[i])));
    let delivery = Subset::of(&b.cwnd, &|i| rate(s[i].delivery_rate()).map(|v| (v, w[i])));
    let retrans = Subset::of(&b.cwnd, &|i| {
        let next = s.get(i + 1)?;
        let dt = next.ts_ns.saturating_sub(s[i].ts_ns) as f64 / 1e9;
        (dt > 0.0)
            .then(|| (f64::from(next.total_retrans.wrapping_sub(s[i].total_retrans)) / dt, dt))
    });
    let (pq, pc) =
        (pacing.weights(cfg.unweighted_quantiles), pacing.weights(cfg.unweighted_correlations));
    let rc = retrans.weights(cfg.unweighted_correlations);
    let dq = delivery.weights(cfg.unweighted_quantiles);
    let raw = |get: fn(&Retained) -> u64| -> Vec<u64> {
        s.iter().map(get).filter(|&v| v != ABSENT_U64).collect()
    };
    let o_pacing = sort_order_u64(&raw(|r| r.pacing_rate()), pq);
    let o_delivery = sort_order_u64(&raw(|r| r.delivery_rate()), dq);
    let pacing_cwnd_ranks: Vec<f64>;
    let pacing_corr = correlate_ranked(
        &pacing.x,
        &pacing.cwnd,
        &ranks_of_subset(&pacing.x, &o_pacing, None, pacing.x.len(), pc),
        if pacing.x.len() == n && pc.is_some() == wc.is_some() {
            &b.cwnd_ranks // every sample has a pacing rate: same subset, same weights
        } else {
            pacing_cwnd_ranks =
                ranks_of_subset(&b.cwnd, &b.o_cwnd, Some(&pacing.slot), pacing.x.len(), pc);
            &pacing_cwnd_ranks
        },
        pc,
        cfg.adjust,
    );
    let o_retrans = sort_order(&retrans.x, None);
    let retrans_corr = correlate_ranked(
        &retrans.x,
        &retrans.cwnd,
        &ranks_of_subset(&retrans.x, &o_retrans, None, retrans.x.len(), rc),
        &ranks_of_subset(&b.cwnd, &b.o_cwnd, Some(&retrans.slot), retrans.x.len(), rc),
        rc,
        cfg.adjust,
    );
    RateFigures {
        pacing_summary: seven_number_sorted(&pacing.x, pq, &o_pacing, cfg.quantile),
        pacing_max: pacing.x.iter().copied().reduce(f64::max),
        delivery_summary: seven_number_sorted(&delivery.x, dq, &o_delivery, cfg.quantile),
        pacing_corr,
        retrans_corr,
    }
}

/// The record's send and receive rates and their basis (`None`: the span sampled).
///
/// A flow of one sample (mostly: seen only in its destroy event) has no span. Its send
/// rate is its lifetime bytes over the kernel's busy time, the time it had data in
/// flight; with no busy time (before Linux 4.10), and on the receive side always, there
/// is no duration to divide by, and the record says so instead of giving 0.
fn throughputs(f: &crate::tracker::Flow) -> (f64, f64, Option<&'static str>) {
    let (span, last) = (f.span_ns(), &f.last);
    if span > 0 {
        let recv = last.bytes_received.saturating_sub(f.first_bytes_received);
        (
            throughput_mbps(last.bytes_acked.saturating_sub(f.first_bytes_acked), span),
            throughput_mbps(recv, span),
            None,
        )
    } else if last.busy_ms != u32::MAX && last.busy_ms > 0 {
        let busy_ns = u64::from(last.busy_ms) * 1_000_000;
        (throughput_mbps(last.bytes_acked, busy_ns), UNKNOWN_RATE, Some("busy-time"))
    } else {
        (UNKNOWN_RATE, UNKNOWN_RATE, Some("unknown"))
    }
}

/// `EndReason` as records name it.
fn end_reason(r: EndReason) -> &'static str {
    match r {
        EndReason::Destroyed => "destroyed",
        EndReason::Gone => "gone",
        EndReason::Shutdown => "shutdown",
        EndReason::Window => "window",
    }
}

/// The diagnosis of `e`, from its record's send and receive throughputs (negative: none),
/// minimum RTT, RTT summary and median cwnd.
fn diagnosed(
    e: &EndedFlow,
    (send, recv): (f64, f64),
    min_rtt_ms: f64,
    rtt_summary: Option<[f64; 7]>,
    cwnd_p50_bytes: f64,
) -> Option<crate::record::Diagnosis> {
    let inputs = diagnosis::Inputs {
        throughput_mbps: send.max(0.0),
        recv_throughput_mbps: (recv >= 0.0).then_some(recv),
        min_rtt_ms,
        rtt_p50_ms: rtt_summary.map_or(0.0, |r| r[3]),
        cwnd_p50_bytes,
    };
    diagnosis::diagnose(e, inputs)
}

/// How `e`'s samples were taken.
fn sampling_stats(e: &EndedFlow) -> SamplingStats {
    SamplingStats {
        from_dumps: e.dump_samples(),
        from_exact: e.sampling.exact,
        from_destroy_event: e.sampling.event,
        max_gap_ms: f64::from(e.sampling.max_gap_us) / 1000.0,
    }
}

/// The record of `e` from its figures.
fn record(
    e: &EndedFlow,
    cfg: &AnalyzerConfig,
    b: &Basis<'_>,
    rtt: RttFigures,
    rates: RateFigures,
) -> FlowStats {
    let f = &e.flow;
    let wq = (!cfg.unweighted_quantiles).then_some(&b.w[..]);
    let (rtt_summary, min_rtt_observed_ms, c_rtt) = (rtt.summary, rtt.min_observed_ms, rtt.corr);
    let last = &f.last;
    let (send, recv, throughput_basis) = throughputs(f);
    let cwnd_summary =
        seven_number_sorted(&b.cwnd, wq, &b.o_cwnd, cfg.quantile).unwrap_or([0.0; 7]);
    let min_rtt_kernel_ms =
        (last.min_rtt_us != u32::MAX).then(|| f64::from(last.min_rtt_us) / 1000.0);
    let min_rtt_ms = min_rtt_kernel_ms.or(min_rtt_observed_ms).unwrap_or(0.0);
    let diagnosis = diagnosed(e, (send, recv), min_rtt_ms, rtt_summary, cwnd_summary[3]);
    let has = |bit: u8| f.options & bit != 0;
    let cc = if f.cc.as_str().is_empty() { UNKNOWN_CC } else { f.cc.as_str() };
    FlowStats {
        id: FlowId::new(&f.key, f.first_ts_ns),
        start_time: wall(f.first_ts_ns, cfg.realtime_offset_ns),
        end_time: wall(e.end_ts_ns, cfg.realtime_offset_ns),
        duration: i64::try_from(f.span_ns()).unwrap_or(i64::MAX),
        samples: b.s.len(),
        samples_deduped: f.deduped,
        sampling: sampling_stats(e),
        netns: e.netns.as_deref().cloned(),
        partial: f.partial_start || e.partial_end(),
        timestamps: has(TCPI_OPT_TIMESTAMPS),
        sack: has(TCPI_OPT_SACK),
        ecn: has(TCPI_OPT_ECN),
        ecn_seen: has(TCPI_OPT_ECN_SEEN),
        min_rtt_kernel_ms,
        min_rtt_observed_ms,
        max_pacing_rate_kernel_mbps: (last.max_pacing_rate != ABSENT_U64)
            .then(|| mbps(last.max_pacing_rate)),
        max_pacing_rate_observed_mbps: rates.pacing_max,
        rtt_summary,
        rttvar_summary: rtt.var_summary,
        corr_rtt_cwnd: c_rtt.pearson,
        corr_retrans_cwnd: rates.retrans_corr.pearson,
        corr_pacing_cwnd: rates.pacing_corr.pearson,
        total_retransmits: last.total_retrans,
        bytes_acked: last.bytes_acked,
        send_throughput_mbps: send,
        throughput_basis,
        delivered: last.delivered,
        delivered_ce: last.delivered_ce,
        partial_start: f.partial_start,
        partial_end: e.partial_end(),
        seq: f.seq,
        end_reason: end_reason(e.reason),
        close: e.close.map(crate::tracker::Close::as_str),
        cwnd_summary,
        pacing_rate_summary: rates.pacing_summary,
        delivery_rate_summary: rates.delivery_summary,
        correlations: Correlations::from((c_rtt, rates.retrans_corr, rates.pacing_corr)),
        recv_throughput_mbps: recv,
        bytes_sent: last.bytes_sent,
        bytes_retrans: last.bytes_retrans,
        bytes_received: last.bytes_received,
        segs_out: last.segs_out,
        segs_in: last.segs_in,
        accepted: f.passive_open,
        congestion_control: text_in(cc),
        family: if f.key.family == AF_INET { "inet" } else { "inet6" },
        final_state: state_name(last.state),
        cookie: f.key.cookie,
        cgroup_id: (f.cgroup_id != 0).then_some(f.cgroup_id),
        // Named on the writer's thread (who::namer), the one that may block on the cgroups.
        service: None,
        dest_service: None,
        comm: e.owner.as_ref().map(|o| o.name.clone()),
        pid: e.owner.as_ref().map(|o| o.pid),
        not_named: None,
        diagnosis,
    }
}

/// Stops glibc from returning freed heap to the kernel at the 128 KiB default trim
/// threshold (raised to 64 MiB, per process), and keeps mid-sized blocks on the heap.
///
/// Analyzing a long flow allocates and frees about 1 MB of vectors. With the default, the
/// freed top of the heap went back to the kernel after every record and was faulted in
/// again for the next, about a third of the analysis (`cargo bench --bench tracker`,
/// `analyze`; benches/RESULTS.md, D9). The analyzer stage calls this; the memory kept is
/// bounded by the largest analysis, a few MB.
///
/// Setting one threshold also freezes glibc's mmap threshold at its 128 KiB start, which
/// it would otherwise raise past the blocks a program frees. Under churn each batch's
/// vectors of ended flows and records (hundreds of entries, a few hundred KB) were then
/// mapped, faulted in page by page, and unmapped with a TLB shootdown of the other core,
/// batch after batch (benches/RESULTS.md, D28). Below 1 MiB they now come from the heap;
/// larger blocks (the tables of many sockets) are still mapped, and go back to the kernel
/// when freed (at 4 MiB, idle hosts kept more: D28).
pub fn keep_heap_for_reuse() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only adjusts allocator parameters; it is safe to call at any time.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

pub mod diagnosis;
pub mod jiffies;
pub mod samples;
pub mod stage;

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests;
