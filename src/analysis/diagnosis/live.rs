//! The verdict of a flow still open, "so far": what the host page ranks and filters by,
//! from counters alone, on every refresh.

use super::*;

/// What limited an active flow so far, from its counters alone (no samples): the same
/// rules as [`diagnose`], with its current smoothed RTT (`srtt_us`) standing for the median
/// and its largest peer window for the typical one. The host page ranks and filters
/// thousands of flows by it on every refresh; a flow's own page and its record run the full
/// diagnosis over all its samples, which may name another limit (docs/web.md). `None` on a
/// kernel without tcpi_busy_time or before any time has passed.
pub fn so_far(f: &Window<'_>, srtt_us: u32) -> Option<(&'static str, Option<&'static str>)> {
    let (l, x) = (f.last, so_far_inputs(f, srtt_us)?);
    if unjudged(l, &x).is_some() {
        return Some((UNKNOWN, None));
    }
    // Under five clock ticks of busy time, no rate to judge by: what the record will say
    // of it too (slow start needs the samples' ssthresh, which the page does not read).
    let tick = tick_of(l, f.first_chrono);
    let busy = f64::from(l.busy_ms.saturating_sub(f.first_chrono[0]));
    let mss = u32::from(l.snd_mss);
    if let Some((v, c, _)) =
        short::judge(busy, f64::from(tick), l.bytes_acked, mss, x.min_rtt_ms, false)
    {
        return Some((v, c));
    }
    let (shares, caps, sig) = so_far_evidence(f, &x)?;
    Some(judge(&shares, &caps, &sig, &x, x.throughput_mbps, l, (f.span_ns as f64 / 1e6, false)))
}

/// The number that says most about `verdict` (from [`so_far`]) for a person scanning a
/// table: the cap a window or buffer sets, the loss or queue the network shows, the
/// application's idle share.
pub fn so_far_number(f: &Window<'_>, srtt_us: u32, verdict: &str, cause: Option<&str>) -> String {
    use crate::units::{si_bytes, si_rate_mbps};
    let Some(x) = so_far_inputs(f, srtt_us) else { return String::new() };
    let Some((shares, caps, sig)) = so_far_evidence(f, &x) else { return String::new() };
    let l = f.last;
    // A cap only when the flow stayed within it, as in findings.
    let arrow = |bytes: u32, cap: Option<f64>| match cap {
        Some(c) if is_cap(Some(c), x.throughput_mbps, CAP_TOLERANCE) => {
            format!("{} → {} cap", si_bytes(u64::from(bytes)), si_rate_mbps(c))
        }
        _ => si_bytes(u64::from(bytes)),
    };
    match (verdict, cause) {
        ("receiver-window", Some("slow-reader")) => {
            format!("slow reader: window up to {}", si_bytes(u64::from(l.snd_wnd_max)))
        }
        ("receiver-window", _) => {
            format!("window {}", arrow(l.snd_wnd_max, caps.window_cap_mbps))
        }
        // The configured size over the RTT is no cap (a paced sender overshoots it): the
        // buffer and its share.
        ("send-buffer", _) => format!(
            "send buffer {}, limited {} % of the time",
            si_bytes(u64::from(l.sndbuf)),
            pct(shares.send_buffer)
        ),
        ("network", Some("loss")) => format!("{:.2} % loss", sig.loss_pct),
        ("network", Some("queueing")) => {
            format!("RTT {} ms over {} ms min", ms_text(x.rtt_p50_ms), ms_text(x.min_rtt_ms))
        }
        ("network", _) => format!("RTT {} ms, no queue or loss", ms_text(x.rtt_p50_ms)),
        ("application", _) => format!("idle {:.0} % of the time", shares.application),
        _ if l.bytes_received > l.bytes_acked => "receiving: the peer sends".into(),
        _ => format!("{} sent", si_bytes(l.bytes_acked)),
    }
}

/// [`so_far`]'s verdict as an index in [`VERDICTS`]: the host view's judge
/// (`tracker::views::Judge`).
pub fn so_far_index(w: &Window<'_>, srtt_us: u32) -> u8 {
    verdict_index(so_far(w, srtt_us).map(|v| v.0)) as u8
}

/// [`Inputs`] from an active flow's counters: its window's send throughput, its current
/// RTT for the median.
fn so_far_inputs(f: &Window<'_>, srtt_us: u32) -> Option<Inputs> {
    let l = f.last;
    let span_s = f.span_ns as f64 / 1e9;
    if l.busy_ms == u32::MAX || span_s <= 0.0 {
        return None;
    }
    let rate = |now: u64, then: u64| now.saturating_sub(then) as f64 * 8.0 / span_s / 1e6;
    let min_rtt_ms = if l.min_rtt_us == u32::MAX { 0.0 } else { f64::from(l.min_rtt_us) / 1e3 };
    Some(Inputs {
        throughput_mbps: rate(l.bytes_acked, f.first_bytes.0),
        recv_throughput_mbps: Some(rate(l.bytes_received, f.first_bytes.1)),
        min_rtt_ms,
        rtt_p50_ms: f64::from(srtt_us) / 1e3,
        cwnd_p50_bytes: 0.0,
    })
}

/// The time shares over the window, the caps at the flow's largest peer window, and its
/// signals.
fn so_far_evidence(f: &Window<'_>, x: &Inputs) -> Option<(TimeShares, Caps, Signals)> {
    let l = f.last;
    let [b0, r0, s0] = f.first_chrono;
    let d = |now: u32, then: u32| f64::from(now.saturating_sub(then));
    let shares = shares_of(
        d(l.busy_ms, b0),
        d(l.rwnd_limited_ms, r0),
        d(l.sndbuf_limited_ms, s0),
        f.span_ns as f64 / 1e6,
    )?;
    let caps = Caps {
        peer_window_bytes: l.snd_wnd_max,
        typical_window_bytes: None,
        window_cap_mbps: mbps_at(f64::from(l.snd_wnd_max), x.min_rtt_ms)
            .filter(|_| l.snd_wnd_max > 0),
        send_buffer_bytes: (l.sndbuf > 0).then_some(l.sndbuf),
        send_buffer_cap_mbps: mbps_at(f64::from(l.sndbuf), x.min_rtt_ms).filter(|_| l.sndbuf > 0),
        loss_cap_mbps: None,
        bdp_bytes: None,
        cwnd_bytes: 0.0,
    };
    Some((shares, caps, causes::signals(l, f.options)))
}
