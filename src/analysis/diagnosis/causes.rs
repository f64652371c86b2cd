//! The second question: what behind the verdict. Each cause is one rule over the kernel's
//! own counters, tried in the order docs/diagnosis.md gives; the first that fires is the
//! record's `Cause`, and `Signals` carries the evidence of all of them.
//!
//! The rules read [`Signals`] (the counters, already turned into shares and flags) so that
//! they can be tested without a kernel, and so that the record shows every number a rule
//! used.

use super::{Caps, Signals};
use crate::record::Retained;
use crate::states::tcp;
use crate::tracker::Last;
use crate::tracker::{RTO_TIME_ABSENT, RTO_TIME_SATURATED};

/// The initial retransmission timeout, ms (RFC 6298's 1 s, Linux's `TCP_TIMEOUT_INIT`):
/// the least a lost SYN costs.
pub const INITIAL_RTO_MS: f64 = 1000.0;

/// Time recovering from RTOs, as a share of the flow's time (percent), from which
/// timeouts rather than fast recovery are what the loss cost. In the lab a 1.5 s blackout in
/// a 5 s transfer spent 38–52 % of its span in RTO recovery; random loss of 1–2 %, recovered
/// by fast retransmit, spent under 3 % (docs/diagnosis.md).
pub const TIMEOUT_SHARE_PCT: f64 = 10.0;

/// The share of retransmissions the peer reported as duplicates (DSACK) from which they
/// were mostly spurious: the data was late, not lost.
pub const SPURIOUS_SHARE: f64 = 0.5;

/// An MSS under this many bytes is far under an Ethernet path's 1,460 (1,440 for IPv6):
/// IPv4's 576-byte minimum MTU gives 536, an MSS clamp less. A 1,280-byte IPv6 tunnel
/// (1,220) is not flagged.
pub const SMALL_MSS_BYTES: u32 = 1000;

/// The largest window a peer can offer without window scaling.
pub const UNSCALED_WINDOW_MAX: u32 = 65_535;

/// CE marks per lost segment from which congestion was signalled by ECN rather than by
/// loss.
pub const CE_PER_LOSS: f64 = 10.0;

/// Reordering events (tcpi_reord_seen) per 1,000 segments sent from which reordering is
/// what the network did to the flow.
pub const REORDER_PER_1000: f64 = 1.0;

/// `TCPI_OPT_WSCALE`: window scaling was negotiated.
const OPT_WSCALE: u8 = 4;

/// The signals that the counters give alone (the window's come from the samples).
pub fn signals(l: &Last, options: u8) -> Signals {
    // Retransmissions the peer reported twice (DSACK) were not lost: a retransmission
    // timeout on a loaded host, or reordering, sent them again needlessly.
    let lost = l.total_retrans.saturating_sub(l.dsack_dups);
    Signals {
        loss_pct: if l.segs_out > 0 {
            100.0 * f64::from(lost) / f64::from(l.segs_out)
        } else {
            0.0
        },
        reordering: l.reord_seen,
        spurious: l.dsack_dups,
        ce_pct: (l.delivered > 0)
            .then(|| 100.0 * f64::from(l.delivered_ce) / f64::from(l.delivered)),
        rtos: l.total_rto,
        window_closed_pct: None,
        zero_window_stalls: None,
        zero_window_ms: None,
        rto_time_ms: (l.total_rto_time_ms != RTO_TIME_ABSENT)
            .then_some(u32::from(l.total_rto_time_ms)),
        mss: u32::from(l.snd_mss),
        window_scaling: options & OPT_WSCALE != 0,
        syn_retransmits: 0,
        setup_delay_ms: None,
    }
}

/// The SYNs (SYN-ACKs on the accepted side) sent again before the connection was set up,
/// and what they cost, ms, with whether that cost is exact (else a lower bound).
///
/// Seen in SYN-SENT or SYN-RECV, the retransmits are the connecting socket's. A flow first
/// seen established had them when its first sample already counts retransmits and no byte
/// of data was ever sent again (the kernel counts a retransmitted SYN in
/// `tcpi_total_retrans`, not in `tcpi_bytes_retrans`).
pub fn setup(samples: &[Retained], l: &Last) -> Option<(u32, f64, bool)> {
    let while_connecting =
        samples.iter().filter(|s| connecting(s)).map(|s| s.total_retrans).max().unwrap_or(0);
    // The first sample set up: a connect seen only once before its SYN was sent again (the
    // monitor samples a still socket less often) shows them there.
    // That sample may already be closing (a short transfer between two samples): seen
    // connecting just before, its retransmits are still the handshake's (a FIN sent again
    // would pass for one only if it too was lost, in that same gap).
    let seen_connecting = samples.first().is_some_and(connecting);
    let first = samples.iter().find(|s| !connecting(s));
    let at_first = first
        .filter(|s| (s.state() == tcp::ESTABLISHED || seen_connecting) && l.bytes_retrans == 0)
        .map_or(0, |s| s.total_retrans);
    let n = while_connecting.max(at_first);
    if n == 0 {
        return None;
    }
    // tcpi_total_rto_time leaves the first timeout (1 s) out and counts the recovery
    // (docs/diagnosis.md, "What the kernel gives", measured on 6.18).
    // Exact only when every RTO the flow had was the setup's.
    let exact = l.bytes_retrans == 0
        && l.total_rto_time_ms != RTO_TIME_ABSENT
        && l.total_rto_time_ms < RTO_TIME_SATURATED;
    let delay = if exact {
        INITIAL_RTO_MS + f64::from(l.total_rto_time_ms)
    } else {
        INITIAL_RTO_MS * f64::from(n)
    };
    Some((n, delay, exact))
}

/// Whether `s` was taken before the connection was set up (SYN-SENT or SYN-RECV).
pub fn connecting(s: &Retained) -> bool {
    matches!(s.state(), tcp::SYN_SENT | tcp::SYN_RECV)
}

/// How long the samples show the connection being set up: from the first sample, when
/// that one was connecting, to the first that was not; 0 otherwise.
pub fn handshake_ns(samples: &[Retained]) -> u64 {
    match (samples.first(), samples.iter().find(|s| !connecting(s))) {
        (Some(a), Some(b)) if connecting(a) => b.ts_ns.saturating_sub(a.ts_ns),
        _ => 0,
    }
}

/// What a receiver-window verdict is for: a reader that let the window close or kept it
/// far under its largest, a window that could not scale, or a buffer too small.
pub fn receiver_window(sig: &Signals, caps: &Caps, slow_reader: bool) -> &'static str {
    if slow_reader {
        "slow-reader"
    } else if !sig.window_scaling && caps.peer_window_bytes <= UNSCALED_WINDOW_MAX {
        "no-window-scaling"
    } else {
        "small-buffer"
    }
}

/// The RTOs and their recovery time (ms) as the samples show them, for kernels before 6.7,
/// which report neither (`tcpi_total_rto*`): an RTO is the one event that sets the
/// congestion window to a single segment (fast recovery keeps it at ssthresh, at least 2;
/// an idle restart goes back to the initial window), so each fall to 1 is one, and the
/// time at 1 is the backoff it cost. Samples taken while connecting or closed do not
/// count. `None` when no sample was at 1. A lower bound: a window back above 1 between two
/// samples hides the recovery's slow start.
pub fn rtos_from_samples(samples: &[Retained]) -> Option<(u16, u32)> {
    let (mut n, mut ns, mut was_one) = (0u16, 0u64, false);
    for p in samples.windows(2) {
        let (a, b) = (&p[0], &p[1]);
        let counts = !connecting(a) && !matches!(a.state(), tcp::CLOSE | tcp::TIME_WAIT);
        let one = counts && a.snd_cwnd() == 1;
        if one {
            n = n.saturating_add(u16::from(!was_one));
            ns += b.ts_ns.saturating_sub(a.ts_ns);
        }
        was_one = one;
    }
    (n > 0).then(|| (n, u32::try_from(ns / 1_000_000).unwrap_or(u32::MAX)))
}

/// Whether the RTOs cost the flow at least [`TIMEOUT_SHARE_PCT`] of `elapsed_ms`, with
/// data sent again (a setup's timeouts are `syn-retransmit`'s).
pub fn timeouts(sig: &Signals, l: &Last, elapsed_ms: f64) -> bool {
    let rto_ms = sig.rto_time_ms.map_or(0.0, f64::from);
    sig.rtos > 0
        && l.bytes_retrans > 0
        && elapsed_ms > 0.0
        && 100.0 * rto_ms / elapsed_ms >= TIMEOUT_SHARE_PCT
}

/// Whether most retransmissions were of data the peer already had.
pub fn spurious(sig: &Signals, l: &Last) -> bool {
    sig.spurious > 0 && f64::from(sig.spurious) >= SPURIOUS_SHARE * f64::from(l.total_retrans)
}

/// Whether CE marks, not loss, signalled the congestion.
pub fn ecn(l: &Last) -> bool {
    let lost = l.total_retrans.saturating_sub(l.dsack_dups);
    l.delivered_ce > 0 && f64::from(l.delivered_ce) >= CE_PER_LOSS * f64::from(lost)
}

/// Whether the path reordered the flow's segments often enough to matter.
pub fn reordering(sig: &Signals, l: &Last) -> bool {
    l.segs_out > 0
        && sig.reordering > 0
        && 1000.0 * f64::from(sig.reordering) / f64::from(l.segs_out) >= REORDER_PER_1000
}

/// Whether the MSS is far under an Ethernet path's.
pub fn small_mss(sig: &Signals) -> bool {
    sig.mss > 0 && sig.mss < SMALL_MSS_BYTES
}

/// The cause of a `network` verdict, in docs/diagnosis.md's order; `None` when the
/// evidence names none. `loss_capped`: loss explains the rate (its Mathis bound);
/// `queue`: the RTT stood well above its minimum.
pub fn network(
    sig: &Signals,
    l: &Last,
    elapsed_ms: f64,
    loss_capped: bool,
    queue: bool,
) -> Option<&'static str> {
    let loss = sig.loss_pct > 0.0;
    if spurious(sig, l) && !reordering(sig, l) && sig.rtos > 0 {
        Some("spurious")
    } else if timeouts(sig, l, elapsed_ms) {
        Some("timeouts")
    } else if ecn(l) {
        Some("ecn")
    } else if reordering(sig, l) {
        Some("reordering")
    } else if spurious(sig, l) {
        Some("spurious")
    } else if small_mss(sig) && (loss || !queue) {
        Some("small-mss")
    } else if loss && loss_capped {
        Some("loss")
    } else if queue {
        Some("queueing")
    } else if loss {
        Some("loss")
    } else {
        None
    }
}

/// Whether the counters show the network acting on the flow at all: what lets a `network`
/// share stand as the verdict when neither a queue nor loss shows.
pub fn network_evidence(sig: &Signals, l: &Last) -> bool {
    spurious(sig, l) || ecn(l) || reordering(sig, l) || sig.rtos > 0
}

#[cfg(test)]
mod tests {
    use crate::analysis::{AnalyzerConfig, analyze};
    use crate::states::tcp;
    use crate::tracker::testing::ended_flow;
    use crate::wire::build::SockBuilder;

    const MS: u64 = 1_000_000;

    /// A connect whose first SYN was lost: seen in SYN-SENT, retransmitting at 1 s, set up
    /// 50 ms later, then 200 KB sent in 60 ms.
    #[test]
    fn a_lost_syn_is_counted_and_costs_the_setup() {
        let a = SockBuilder::new(1, 40000, 80).options(7).min_rtt_us(50_000).rtt_us(50_000);
        let mut e = ended_flow(&[
            (10 * MS, a.clone().state(tcp::SYN_SENT).snd_wnd(0)),
            (1010 * MS, a.clone().state(tcp::SYN_SENT).snd_wnd(0).total_retrans(1)),
            (1070 * MS, a.clone().total_retrans(1).snd_wnd(65_535).bytes_acked(1)),
            (
                1150 * MS,
                a.total_retrans(1)
                    .snd_wnd(65_535)
                    .bytes_acked(200_001)
                    .chrono_us(60_000, 0, 0)
                    .rto(1, 50),
            ),
        ]);
        let d = analyze(&mut e, &AnalyzerConfig::default()).diagnosis.unwrap();
        assert_eq!((d.signals.syn_retransmits, d.signals.setup_delay_ms), (1, Some(1050.0)));
        assert_eq!((d.verdict, d.cause), ("network", Some("syn-retransmit")), "{}", d.finding);
        assert!(d.finding.starts_with("the connection waited 1.1 s to be set up"), "{}", d.finding);
        // The handshake's samples, with no window yet, are not a closed window.
        assert_eq!(d.signals.window_closed_pct, Some(0.0));
    }

    /// A 200 KB response over 50 ms, over in slow start's 4 round trips, half of it held
    /// by the receiver's window as autotuning grew it (measured in the lab): bounded by
    /// round trips, not by a reader or a buffer.
    #[test]
    fn a_response_over_in_slow_start_rounds_is_slow_start_though_the_window_held_it() {
        let a = SockBuilder::new(1, 40000, 80).options(7).min_rtt_us(51_000).rtt_us(51_000);
        let mut e = ended_flow(&[
            (10 * MS, a.clone().snd_wnd(77_824).bytes_acked(1).ssthresh(20)),
            (
                260 * MS,
                a.snd_wnd(277_504).bytes_acked(200_001).chrono_us(204_000, 100_000, 0).ssthresh(20),
            ),
        ]);
        let d = analyze(&mut e, &AnalyzerConfig::default()).diagnosis.unwrap();
        assert_eq!((d.verdict, d.cause), ("network", Some("slow-start")), "{}", d.finding);
        assert!(d.finding.contains("200.0 KB took 4 round trips of 51 ms"), "{}", d.finding);
    }

    /// The same connect seen once before its SYN was sent again (a still socket is sampled
    /// less often), then established: its first established sample counts the SYN, since
    /// no byte of data was ever sent again. The handshake is no one's time.
    #[test]
    fn a_lost_syn_shows_in_the_first_established_sample() {
        let a = SockBuilder::new(1, 40000, 80).options(7).min_rtt_us(50_000).rtt_us(50_000);
        let established = |t: u64, bytes: u64, busy_ms: u64| {
            (
                t * MS,
                a.clone().total_retrans(1).snd_wnd(65_535).bytes_acked(bytes).chrono_us(
                    busy_ms * 1000,
                    0,
                    0,
                ),
            )
        };
        let mut e = ended_flow(&[
            (10 * MS, a.clone().state(tcp::SYN_SENT).snd_wnd(0)),
            established(1060, 1, 0),
            established(5060, 40_000_001, 4000),
        ]);
        let d = analyze(&mut e, &AnalyzerConfig::default()).diagnosis.unwrap();
        assert_eq!((d.signals.syn_retransmits, d.signals.setup_delay_ms), (1, Some(1000.0)));
        // 4 s of sending after a 1 s setup: the setup did not dominate.
        assert_eq!(d.verdict, "network", "{}", d.finding);
        assert_ne!(d.cause, Some("syn-retransmit"));
        assert_eq!(d.shares.application, 0.0, "the handshake is not the application's");
    }
}
