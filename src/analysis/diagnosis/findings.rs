//! The findings: one plain sentence per verdict and cause, in the flow's own figures. A
//! finding names a cap only when the flow stayed within it ([`is_cap`]); otherwise it names
//! the evidence, or says that the cause is unclear.

use super::{
    CAP_TOLERANCE, Caps, Inputs, Signals, TimeShares, is_cap, kb, mathis_cap, mbps_at, ms_text, pct,
};
use crate::tracker::Last;
use crate::units::si_rate_mbps;

/// The figures a finding quotes: the flow's counters, the analysis's inputs, its time
/// shares, caps and signals, the rate it is judged by (Mbit/s) and the time it is judged
/// over (ms).
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    /// Its latest counters.
    pub l: &'a Last,
    /// What the analysis computed.
    pub x: &'a Inputs,
    /// Its time shares.
    pub shares: &'a TimeShares,
    /// Its caps.
    pub caps: &'a Caps,
    /// Its signals.
    pub sig: &'a Signals,
    /// The rate reached, Mbit/s.
    pub got: f64,
    /// The time judged over, ms.
    pub elapsed_ms: f64,
    /// What it had in flight while its send buffer held it, bytes
    /// ([`super::sndbuf_in_flight`]).
    pub sndbuf_in_flight: Option<u32>,
}

/// The finding that explains `verdict` in the flow's own figures. It names a cap only when
/// the flow stayed within it ([`is_cap`]); otherwise it names the evidence, or says that the
/// cause is unclear.
pub fn finding(verdict: &str, cause: Option<&str>, e: &Evidence<'_>) -> String {
    let Evidence { x, shares, sig, got, .. } = *e;
    let got_t = si_rate_mbps(got);
    let rtt = ms_text(x.min_rtt_ms);
    let spurious = match sig.spurious {
        0 => String::new(),
        n => format!("; {n} retransmits were spurious (the peer had the data), not loss"),
    };
    let text = match (verdict, cause) {
        ("receiver-window", _) => receiver_window_finding(cause, e),
        ("send-buffer", _) => send_buffer_finding(e),
        ("network", _) => network_finding(cause, e),
        ("application", Some("paced")) => format!(
            "the application sent in bursts: idle {:.0} % of the time, and busy the rest only \
             waiting for the acknowledgements of what it handed over, with the RTT at {} ms \
             near its {rtt} ms minimum (no queue) and no loss; it reached {got_t}",
            shares.application,
            ms_text(x.rtt_p50_ms)
        ),
        _ => format!(
            "the application left the connection idle or app-limited {:.0} % of the time; it \
             reached {got_t}",
            shares.application
        ),
    };
    text + &spurious
}

/// A `receiver-window` verdict's finding: a slow reader, a window without scaling, the
/// window that caps the flow, or a window the flow did not reach its cap at.
fn receiver_window_finding(cause: Option<&str>, e: &Evidence<'_>) -> String {
    let Evidence { l, x, shares, caps, sig, got, .. } = *e;
    let cap = |c: Option<f64>| c.map_or("an unknown rate".into(), si_rate_mbps);
    let got_t = si_rate_mbps(got);
    let rtt = ms_text(x.min_rtt_ms);
    match cause {
        Some("slow-reader") => format!(
            "the receiving application read only {got_t}: the peer's window, up to {}, \
             would carry {} at {rtt} ms RTT, but while it held the flow it was typically {}{} \
             ({} % of the time receiver-window limited): fix the reader, a bigger buffer \
             won't help",
            kb(f64::from(l.snd_wnd_max)),
            cap(mbps_at(f64::from(l.snd_wnd_max), x.min_rtt_ms)),
            caps.typical_window_bytes.map_or("smaller".into(), |w| kb(f64::from(w))),
            sig.window_closed_pct
                .filter(|&p| p >= 1.0)
                .map(|p| format!(" and closed {p:.0} % of the time"))
                .unwrap_or_default(),
            pct(shares.receiver_window)
        ),
        Some("no-window-scaling") => format!(
            "the peer's window never passed {} because window scaling was not negotiated \
             (RFC 7323; a middlebox that strips the option, or net.ipv4.tcp_window_scaling=0 \
             on one end): at {rtt} ms RTT that carries {}; it reached {got_t} ({} % of the \
             time receiver-window limited)",
            kb(f64::from(l.snd_wnd_max)),
            cap(mbps_at(f64::from(l.snd_wnd_max), x.min_rtt_ms)),
            pct(shares.receiver_window)
        ),
        _ if is_cap(caps.window_cap_mbps, got, CAP_TOLERANCE)
            && caps.window_cap_mbps.is_some_and(|c| got >= super::SLOW_READER_FRACTION * c) =>
        {
            format!(
                "receiver window {} at {rtt} ms RTT caps this flow at {}; it reached {got_t} \
                 ({} % of the time receiver-window limited)",
                kb(f64::from(caps.typical_window_bytes.unwrap_or(l.snd_wnd_max))),
                cap(caps.window_cap_mbps),
                pct(shares.receiver_window)
            )
        }
        // Held by a window kept at its largest, far under what it carries at the minimum
        // RTT: the flow ran at a longer RTT than its best (on a µs path, the hosts' own
        // latency under load), so that figure is no cap it was held at.
        _ if is_cap(caps.window_cap_mbps, got, CAP_TOLERANCE) => format!(
            "receiver-window limited {} % of the time with the peer's window typically {}, \
             near its largest: it reached {got_t}, far under the {} that window carries at \
             the {rtt} ms minimum RTT, so it ran at a longer RTT than that (on a µs path, the \
             hosts' own latency); a bigger receive buffer would raise it",
            pct(shares.receiver_window),
            kb(f64::from(caps.typical_window_bytes.unwrap_or(l.snd_wnd_max))),
            cap(caps.window_cap_mbps)
        ),
        _ => format!(
            "receiver-window limited {} % of the time, but it reached {got_t}, above \
             the {} its largest window ({}) carries at {rtt} ms RTT: cause unclear",
            pct(shares.receiver_window),
            cap(caps.window_cap_mbps),
            kb(f64::from(l.snd_wnd_max))
        ),
    }
}

/// A `send-buffer` verdict's finding: the buffer's bytes in flight over the RTT as the
/// cap, or the cause unclear.
fn send_buffer_finding(e: &Evidence<'_>) -> String {
    let Evidence { l, x, shares, got, .. } = *e;
    let cap = |c: Option<f64>| c.map_or("an unknown rate".into(), si_rate_mbps);
    let got_t = si_rate_mbps(got);
    let rtt = ms_text(x.min_rtt_ms);
    let in_flight_cap = e.sndbuf_in_flight.and_then(|b| mbps_at(f64::from(b), x.min_rtt_ms));
    // The cap is what the buffer let it have in flight, measured, over the RTT: the
    // configured size over the RTT is no cap (a 16 KB SO_SNDBUF flow was told "caps this
    // flow at 5.2 Mbit/s; it reached 6.0").
    if is_cap(in_flight_cap, got, CAP_TOLERANCE) {
        format!(
            "send buffer {} held {} in flight: at {rtt} ms RTT that caps this flow at {}; it \
             reached {got_t} ({} % of the time send-buffer limited{})",
            kb(f64::from(l.sndbuf)),
            kb(f64::from(e.sndbuf_in_flight.unwrap_or(0))),
            cap(in_flight_cap),
            pct(shares.send_buffer),
            if shares.network > shares.send_buffer {
                format!(", {:.0} % sending out what it held", shares.network)
            } else {
                String::new()
            }
        )
    } else {
        format!(
            "send-buffer limited {} % of the time with a {} buffer; it reached {got_t}, {}: \
             cause unclear",
            pct(shares.send_buffer),
            kb(f64::from(l.sndbuf)),
            match e.sndbuf_in_flight {
                Some(b) => format!(
                    "above the {} its {} in flight carry at {rtt} ms RTT",
                    cap(in_flight_cap),
                    kb(f64::from(b))
                ),
                None =>
                    "and no sample caught what it had in flight while the buffer held it".into(),
            }
        )
    }
}

/// A `network` verdict's finding: the loss that caps it, the queue that shows the
/// bottleneck, or the loss as evidence when its Mathis bound is no cap; without either,
/// the cause is unclear.
fn network_finding(cause: Option<&str>, e: &Evidence<'_>) -> String {
    let Evidence { l, x, shares, caps, sig, got, elapsed_ms, .. } = *e;
    let got_t = si_rate_mbps(got);
    let (rtt, min) = (ms_text(x.rtt_p50_ms), ms_text(x.min_rtt_ms));
    let share = shares.network;
    let rto_ms = sig.rto_time_ms.map_or(0.0, f64::from);
    match (cause, mathis_cap(caps, got)) {
        (Some("slow-start"), _) => format!(
            "network limited {share:.0} % of the time: {}",
            super::short::slow_start_finding(
                l.bytes_acked,
                u32::from(l.snd_mss),
                x.min_rtt_ms,
                f64::from(l.busy_ms)
            )
        ),
        (Some("timeouts"), _) => format!(
            "network limited {share:.0} % of the time, and {} RTOs held it {} ms in \
             recovery ({} % of the flow's time): losses were repaired by timeouts, not fast \
             retransmit (a path that went dark, or lost whole windows); it reached {got_t}",
            sig.rtos,
            ms_text(rto_ms),
            pct(100.0 * rto_ms / elapsed_ms.max(1.0))
        ),
        (Some("spurious"), _) => format!(
            "network limited {share:.0} % of the time; {} of its {} retransmits were \
             spurious (the peer reported them twice: DSACK), after {} RTOs: the path delayed \
             packets past the retransmission timer rather than losing them; it reached \
             {got_t}",
            sig.spurious, l.total_retrans, sig.rtos
        ),
        (Some("ecn"), _) => format!(
            "network limited {share:.0} % of the time at a bottleneck that signalled \
             congestion with ECN: {} of the delivered segments were CE-marked, with {:.2} % \
             loss; it reached {got_t}",
            sig.ce_pct.map_or("some".into(), |p| format!("{p:.2} %")),
            sig.loss_pct
        ),
        (Some("reordering"), _) => format!(
            "network limited {share:.0} % of the time on a path that reordered its segments \
             ({} reordering events in {} segments sent, {} retransmits spurious): the sender \
             took reordering for loss; it reached {got_t}",
            sig.reordering, l.segs_out, sig.spurious
        ),
        (Some("small-mss"), _) => format!(
            "network limited {share:.0} % of the time with an MSS of {} bytes, far under an \
             Ethernet path's 1,460 (a small path MTU or an MSS clamp): every window and the \
             loss bound ({:.2} % loss) scale with it; it reached {got_t}",
            sig.mss, sig.loss_pct
        ),
        (Some("loss"), Some(m)) => format!(
            "network limited {share:.0} % of the time: {:.2} % loss at {rtt} ms RTT caps this \
             flow near {} (Mathis); it reached {got_t}",
            sig.loss_pct,
            si_rate_mbps(m)
        ),
        (Some("queueing"), _) => format!(
            "network limited {share:.0} % of the time at the path's bottleneck: it reached \
             {got_t} with the RTT at {rtt} ms over a {min} ms minimum (queueing) and \
             {:.2} % loss",
            sig.loss_pct
        ),
        (Some("loss"), None) => format!(
            "network limited {share:.0} % of the time with {:.2} % loss at {rtt} ms RTT; it \
             reached {got_t}{}",
            sig.loss_pct,
            loss_no_cap(caps.loss_cap_mbps, got)
        ),
        _ => format!(
            "network limited {share:.0} % of the time, cause unclear: it reached {got_t} \
             with the RTT at {rtt} ms, near its {min} ms minimum (no queue), and no loss"
        ),
    }
}

/// Why a loss that is the evidence is no cap: its Mathis bound `cap` is below what the flow
/// reached (`got`), or above it and something else held the flow.
fn loss_no_cap(cap: Option<f64>, got: f64) -> String {
    match cap {
        Some(m) if m < got => format!(
            " (the Mathis bound for that loss, {}, is below what it reached, so it is no cap \
             here)",
            si_rate_mbps(m)
        ),
        Some(m) => {
            format!(" (the loss alone would allow {}: something else held it)", si_rate_mbps(m))
        }
        None => String::new(),
    }
}

/// A `syn-retransmit` finding: `n` SYNs sent again cost `delay_ms` (a lower bound unless
/// `exact`), against `busy_ms` of sending.
pub fn setup(n: u32, delay_ms: f64, exact: bool, busy_ms: f64) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!(
        "the connection waited {}{} s to be set up ({n} SYN retransmit{s}: the first SYN \
         or its answer was lost), longer than it then spent sending ({} ms busy)",
        if exact { "" } else { "at least " },
        format_args!("{:.1}", delay_ms / 1000.0),
        ms_text(busy_ms)
    )
}

/// A connect that never established: how it ended, its SYNs sent again, and whether the
/// port is known.
pub fn attempt(a: &crate::tracker::attempts::Attempt, span_ns: u64) -> String {
    use crate::tracker::attempts::Outcome;
    let n = a.syn_retransmits;
    let again = match n {
        0 => "no SYN sent again".to_string(),
        1 => "1 SYN sent again".to_string(),
        n => format!("{n} SYNs sent again"),
    };
    let port = if a.port_known {
        ""
    } else {
        "; the port is unknown (the kernel clears it when a blocking connect fails, and no \
         sample saw the attempt)"
    };
    let seen = if span_ns > 0 {
        format!(", seen connecting for {} ms", ms_text(span_ns as f64 / 1e6))
    } else {
        String::new()
    };
    let what = match a.outcome {
        Outcome::Refused => "the connect was refused (a RST or an ICMP error answered it)",
        Outcome::SynTimeout => "the connect timed out: no answer to its SYNs, the kernel gave up",
        Outcome::Abandoned => "the connect was abandoned: closed while its SYN went unanswered",
    };
    format!("{what}, {again}{seen}{port}")
}
