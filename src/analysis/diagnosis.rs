//! Why a flow was slow, the way NDT and web100 answered it: how the flow's time divided
//! between being limited by the receiver's window, by its own send buffer, by the network
//! (cwnd), and by the application (idle or app-limited); what each of those limits would
//! allow; and a verdict in one sentence.
//!
//! Linux keeps web100's SndLimTime{Rwin,Snd,Cwnd} as `tcpi_busy_time` (all three),
//! `tcpi_rwnd_limited` and `tcpi_sndbuf_limited`, cumulative since the connection began.
//! Over the sampled span their growth splits the elapsed time: receiver window, send buffer,
//! network = busy − rwnd − sndbuf, application = elapsed − busy. A flow seen in one sample
//! only (e.g. just its destroy event) has no span: its lifetime counters are used with the
//! busy time as the elapsed time, so the application share is then unknown and reported 0.
//!
//! One correction to the largest-share rule: Linux's busy time, unlike web100's
//! SndLimTimeCwnd, also holds the time a paced sender spends sending out what it has. A flow
//! whose send buffer was fixed too small therefore shows only part of its time as send-buffer
//! limited: 34–40 % in the lab (BBR, SO_SNDBUF 16 or 64 KiB, 50 and 100 ms RTT), the rest
//! spent pacing out what the buffer allowed. What gives it away is the rate: a buffer the
//! kernel autotunes holds at least twice the congestion window (`tcp_sndbuf_expand`:
//! 2 × segments × per-segment memory), so an autotuned flow reaches at most half of
//! sndbuf ÷ min RTT, while those lab flows reached 0.51–1.18 of it. So a flow that was
//! send-buffer limited for at least [`SNDBUF_MIN_SHARE_PCT`] of the time and reached at
//! least [`SNDBUF_CAP_FRACTION`] of its send-buffer cap is called send-buffer limited rather
//! than network limited.

pub mod causes;
mod findings;
pub(crate) mod short;

pub use crate::record::{Caps, Diagnosis, Signals, TimeShares};
use crate::tracker::{EndedFlow, Last};

/// Mathis et al.'s constant for periodic loss with delayed ACKs off: sqrt(3/2).
const MATHIS_C: f64 = 1.224_744_871_391_589;

/// Send-buffer-limited share (percent) from which the rate may turn a network verdict into a
/// send-buffer one (see the module documentation).
pub const SNDBUF_MIN_SHARE_PCT: f64 = 20.0;

/// Fraction of the send-buffer cap that only a buffer fixed below what autotuning would
/// give can reach (autotuned buffers stay at or below 0.5).
pub const SNDBUF_CAP_FRACTION: f64 = 0.4;

/// Data a flow must have delivered for its sending to be judged: 64 KiB. Below it a flow
/// spends its whole life in slow start (an initial window of 10 segments is ~14.6 KB, and
/// each round trip doubles it), so no limit other than the round trips and the
/// application's request could have shown; such a flow's verdict is `unknown`.
pub const MIN_JUDGED_BYTES: u64 = 64 * 1024;

/// What the analysis already computed that the diagnosis uses.
#[derive(Debug, Clone, Copy)]
pub struct Inputs {
    /// Achieved send throughput, Mbit/s.
    pub throughput_mbps: f64,
    /// Achieved receive throughput, Mbit/s, when known.
    pub recv_throughput_mbps: Option<f64>,
    /// Minimum RTT, ms (0: unknown).
    pub min_rtt_ms: f64,
    /// Median smoothed RTT, ms (0: no RTT measured).
    pub rtt_p50_ms: f64,
    /// Median cwnd, bytes.
    pub cwnd_p50_bytes: f64,
}

/// The verdict of a flow that cannot be judged as a sender: too short, mostly receiving,
/// or without evidence (one of the verdicts docs/records.md lists).
pub const UNKNOWN: &str = "unknown";

/// A median RTT above this multiple of the minimum counts as a queue: network evidence.
pub const QUEUE_RTT_RATIO: f64 = 1.25;

/// ... and at least this far above it, ms. On loopback and in a data centre RTTs are tens
/// of µs, and the ratio alone fired on jitter (iperf3 `-w 32K` on loopback was called
/// `queueing` for a median of 0.026 ms over a 0.001 ms minimum). A queue that holds a flow
/// back by less than a millisecond is not what limits it (docs/diagnosis.md).
pub const QUEUE_EXCESS_MS: f64 = 1.0;

/// A limit's cap is a cap only when the flow stayed at or below it within this fraction
/// (the min RTT and the windows are sampled, so a flow at its cap can measure a little
/// above it): a finding names a cap only then, whatever the limit. (The send buffer had
/// 20 %: the kernel lets it run over by a packet train, and flows it held reached up to
/// 1.18 of the cap its configured size gives; such a flow's finding now says the cause is
/// unclear rather than name a cap it passed.)
pub const CAP_TOLERANCE: f64 = 0.10;

/// A flow at this fraction of its receiver-window cap or more, with no queue and no loss,
/// was held by the window (docs/diagnosis.md: an iperf3 `-w 32K` flow reached 0.94 of its
/// window cap and was called `network` before this rule).
pub const CAP_REACHED: f64 = 0.90;

/// A receiver-window-limited flow below this fraction of its window cap had a window
/// that was mostly not open to its largest size: the receiving application read slowly,
/// and a bigger buffer would not help.
pub const SLOW_READER_FRACTION: f64 = 0.5;

/// A receiver-window-limited flow whose peer's window was closed (under one MSS) for at
/// least this share of its span had a reader that stalled (docs/diagnosis.md).
pub const SLOW_READER_CLOSED_PCT: f64 = 10.0;

/// An application share of at least this much (percent), with no network evidence, makes a
/// mostly busy flow `application` (`paced`): the kernel counts as busy the time a sender
/// waits for the acknowledgements of a burst the application handed over. In the lab paced
/// senders showed 21–79 % application time, network- and send-buffer-limited flows at most
/// 1.9 % (docs/diagnosis.md).
pub const PACED_APP_SHARE_PCT: f64 = 10.0;

/// The finer causes a diagnosis may name (`Cause`), and no others.
pub const CAUSES: [&str; 16] = [
    "small-buffer",
    "slow-reader",
    "no-window-scaling",
    "queueing",
    "loss",
    "timeouts",
    "spurious",
    "reordering",
    "ecn",
    "small-mss",
    "slow-start",
    "syn-retransmit",
    "paced",
    "refused",
    "syn-timeout",
    "abandoned",
];

/// Milliseconds with as many decimals as they need to show (loopback RTTs are µs).
pub(crate) fn ms_text(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// A share of the time, percent, as a finding writes it: never "0 %" for a share that is
/// not zero (a verdict must not seem to rest on a counter that did not move).
pub(crate) fn pct(v: f64) -> String {
    match v {
        v if v > 0.0 && v < 0.05 => "<0.1".into(),
        v if v > 0.0 && v < 0.5 => format!("{v:.1}"),
        v => format!("{v:.0}"),
    }
}

/// Bytes in SI units, as every page writes them.
pub(crate) fn kb(b: f64) -> String {
    crate::units::si_bytes(b.max(0.0) as u64)
}

/// The peer's window over the samples: its time-weighted median while the flow was
/// receiver-window limited (its rwnd-limited time grew; all samples when it never was),
/// the share of the span it was closed (under one MSS), and its zero-window stalls (each
/// time it closed after being open) with their total time. Each sample's window holds
/// until the next sample. `None` with fewer than two samples.
///
/// A sample keeps its window to a step of 1/8 of a power of two; the window it stands for
/// is `max` (the largest window seen, kept exactly) when that lies in its step, else the
/// step's middle. Taking the step's middle alone put the typical window above the largest one
/// (65,536 kept as 69,632) in half the records of a busy host.
pub fn window_stats(samples: &[crate::record::Retained], max: u32) -> Option<WindowStats> {
    let (mut limited, mut all) = (Vec::new(), Vec::new());
    let (mut closed, mut total, mut stalls) = (0u64, 0u64, 0u32);
    let mut was_open = false;
    for p in samples.windows(2) {
        let (a, b) = (&p[0], &p[1]);
        // Before the handshake ends there is no window to be closed.
        if causes::connecting(a) {
            continue;
        }
        let dt = b.ts_ns.saturating_sub(a.ts_ns);
        let (lo, hi) = a.snd_wnd_range();
        // In the largest window's own step, the window most likely was the largest (a
        // window stays at its size while the reader keeps up); below it, the step's middle.
        let w = if (lo..=hi).contains(&max) { max } else { lo + (hi - lo) / 2 };
        total += dt;
        if w < u32::from(a.snd_mss.max(1)) {
            closed += dt;
            stalls += u32::from(was_open);
            was_open = false;
        } else {
            was_open = true;
        }
        all.push((w, dt));
        if b.chrono16[1] != a.chrono16[1] {
            limited.push((w, dt));
        }
    }
    let mut v = if limited.is_empty() { all } else { limited };
    let typical = weighted_median(&mut v)?;
    (total > 0).then(|| WindowStats {
        typical,
        closed_pct: 100.0 * closed as f64 / total as f64,
        stalls,
        closed_ms: closed as f64 / 1e6,
    })
}

/// The value that half the weight lies at or under: `v` is (value, weight) pairs, sorted
/// here. `None` when `v` is empty.
fn weighted_median<T: Ord + Copy>(v: &mut [(T, u64)]) -> Option<T> {
    v.sort_unstable();
    let half = v.iter().map(|&(_, w)| w).sum::<u64>().div_ceil(2);
    let mut acc = 0;
    v.iter()
        .find(|&&(_, w)| {
            acc += w;
            acc >= half
        })
        .map(|&(x, _)| x)
}

/// What a flow had in flight while its send buffer held it, bytes: `tcpi_unacked` × MSS in
/// the samples that closed an interval in which `tcpi_sndbuf_limited` grew, their
/// time-weighted mean (by Little's law the rate is the mean in flight over the RTT; the
/// median read low: a lab flow reached 1.09 × its cap); `None` when there was none. The
/// cap a send-buffer finding names is this over the RTT, what the flow was held at, not
/// the configured SO_SNDBUF: a paced sender overshoots that by a packet train, and the
/// kernel's delivery rate is no stand-in (the lab's 16 KB flow at 50 ms: 2.1 Mbit/s while
/// limited, 2.95 reached).
pub fn sndbuf_in_flight(samples: &[crate::record::Retained]) -> Option<u32> {
    let (sum, weight) = samples
        .windows(2)
        .filter(|p| p[1].chrono16[2] != p[0].chrono16[2])
        .map(|p| {
            let bytes = p[1].unacked().saturating_mul(u32::from(p[1].snd_mss));
            (u128::from(bytes), u128::from(p[1].ts_ns.saturating_sub(p[0].ts_ns)))
        })
        .filter(|&(bytes, _)| bytes > 0)
        .fold((0u128, 0u128), |(s, w), (b, dt)| (s + b * dt, w + dt));
    (weight > 0).then(|| (sum / weight) as u32)
}

/// The peer's window over a flow's samples ([`window_stats`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowStats {
    /// Its typical size while it held the flow, bytes.
    pub typical: u32,
    /// The share of the span it was closed (under one MSS), percent.
    pub closed_pct: f64,
    /// How many times it closed after it had been open: zero-window stalls.
    pub stalls: u32,
    /// How long it stayed closed in all, ms.
    pub closed_ms: f64,
}

/// The verdict the time shares give alone: the largest share (the application's on a tie
/// with it, then the earlier in this order).
pub fn largest(shares: &TimeShares) -> &'static str {
    let ranked = [
        ("receiver-window", shares.receiver_window),
        ("send-buffer", shares.send_buffer),
        ("network", shares.network),
        ("application", shares.application),
    ];
    ranked.iter().fold(ranked[3], |best, &c| if c.1 > best.1 { c } else { best }).0
}

/// The shares of `elapsed` ms that growths of `busy`, `rwnd` and `sndbuf` (ms) give, with
/// the kernel's jiffy-sized disagreements clamped so they stay in [0, 100] and sum to 100;
/// `None` when no time elapsed.
pub fn shares_of(busy: f64, rwnd: f64, sndbuf: f64, elapsed: f64) -> Option<TimeShares> {
    (elapsed > 0.0).then(|| {
        let busy = busy.min(elapsed);
        let rwnd = rwnd.min(busy);
        let sndbuf = sndbuf.min(busy - rwnd);
        // 100·x/x is not always 100 in floating point (100.00000000000001 was seen).
        let pct = |v: f64| (100.0 * v / elapsed).clamp(0.0, 100.0);
        TimeShares {
            receiver_window: pct(rwnd),
            send_buffer: pct(sndbuf),
            network: pct(busy - rwnd - sndbuf),
            application: pct(elapsed - busy),
            basis: "span",
        }
    })
}

/// The diagnosis of `e`; `None` when the kernel reports no busy time (before Linux 4.10).
pub fn diagnose(e: &EndedFlow, x: Inputs) -> Option<Diagnosis> {
    let f = &e.flow;
    let l = &f.last;
    if l.busy_ms == u32::MAX {
        return None;
    }
    let Spent { shares, busy, elapsed } = spent(e);
    // A flow seen in a single sample (typically only its destroy event: it lived between two
    // polls) has no span to divide its bytes by, and its record's SendThroughputMbps is 0.
    // Its rate while busy is the one to judge it by.
    let got = if shares.basis == "lifetime" && busy > 0.0 {
        l.bytes_acked as f64 * 8.0 / (busy / 1000.0) / 1e6
    } else {
        x.throughput_mbps
    };
    let (sig, caps, setup) = evidence(e, &x, got);
    let made = |verdict, cause, finding| Diagnosis {
        shares: shares.clone(),
        caps: caps.clone(),
        signals: sig.clone(),
        achieved_mbps: got,
        verdict,
        cause,
        finding,
    };
    // A connect that never established: how it ended is all there is to say.
    if let Some(a) = e.attempt {
        let finding = findings::attempt(&a, f.span_ns());
        return Some(Diagnosis {
            achieved_mbps: 0.0,
            ..made(UNKNOWN, Some(a.outcome.as_str()), finding)
        });
    }
    // A setup that took longer than the flow then spent sending: whichever end sent, the
    // lost SYNs are what it waited on.
    if let Some((n, delay, exact)) = setup.filter(|s| s.1 >= f64::from(l.busy_ms)) {
        let finding = findings::setup(n, delay, exact, f64::from(l.busy_ms));
        return Some(made("network", Some("syn-retransmit"), finding));
    }
    // Which end sent. A flow that mostly received was limited by its peer's sending, which
    // its own counters do not show; one that sent too little to leave slow start shows no
    // limit at all. Neither gets a sender's verdict.
    if let Some(finding) = unjudged(l, &x) {
        return Some(made(UNKNOWN, None, finding));
    }
    // Too few clock ticks of busy time to divide by: judged by what it is.
    let tick = tick_of(l, f.first_chrono);
    let in_slow_start = f.samples.last().is_some_and(|s| s.ssthresh_bytes().is_none());
    if let Some((verdict, cause, finding)) = short::judge(
        busy,
        f64::from(tick),
        l.bytes_acked,
        l.snd_mss.into(),
        x.min_rtt_ms,
        in_slow_start,
    ) {
        return Some(made(verdict, cause, finding));
    }
    let slow_start = over_in_slow_start(l, &shares, (busy, elapsed), &sig, &x);
    let (verdict, cause) = judge(&shares, &caps, &sig, &x, got, l, (elapsed, slow_start));
    let finding = findings::finding(
        verdict,
        cause,
        &findings::Evidence {
            l,
            x: &x,
            shares: &shares,
            caps: &caps,
            sig: &sig,
            got,
            elapsed_ms: elapsed,
            // Only a send-buffer finding reads it: no pass over every flow's samples.
            sndbuf_in_flight: (verdict == "send-buffer")
                .then(|| sndbuf_in_flight(&f.samples))
                .flatten(),
        },
    );
    Some(made(verdict, cause, finding))
}

/// Whether a flow was over in the round trips slow start needs, whatever held it within
/// them: `busy` and `elapsed` ms.
fn over_in_slow_start(
    l: &Last,
    shares: &TimeShares,
    (busy, elapsed): (f64, f64),
    sig: &Signals,
    x: &Inputs,
) -> bool {
    // Over in the round trips slow start needs: the last sample's ssthresh alone does not
    // say, since the kernel sets it when the sender goes idle (a response sent and then
    // waited on read finite by its close).
    let rounds = short::round_trips(l.bytes_acked, l.snd_mss.into());
    // One round trip of slack, the last data's ACK: 200 KB over 50 ms in the lab was busy
    // 208 ms for its 4 rounds.
    let slack = f64::from(rounds + 1) * x.min_rtt_ms;
    // The receiver's window, autotuned up from 64 KB as slow start grows, can lag it for a
    // round trip or two: such time is not counted against the rounds when the window grew
    // to hold the whole transfer by the end (a fixed small window never does). In one CI
    // run a 200 KB response at 50 ms was busy 290 ms, 21 % of it rwnd-limited, with the
    // window grown to 266 KB.
    let rwnd_ms = shares.receiver_window / 100.0 * elapsed;
    let window_caught_up = u64::from(l.snd_wnd_max) >= l.bytes_acked;
    let within_rounds = busy <= slack || (window_caught_up && busy - rwnd_ms <= slack);
    // Bounded by the rounds, whatever held it within them. (Never leaving slow start alone
    // says little: a flow held by a window never needs to, and a 5 MB one was called
    // "bounded by round trips" for it.)
    within_rounds && sig.loss_pct == 0.0 && x.min_rtt_ms >= short::SLOW_START_MIN_RTT_MS
}

/// The kernel's clock tick, ms, as a flow's chrono counters show it, now and at `first`
/// (the window's first sample): [`crate::analysis::tick::tick_ms`].
fn tick_of(l: &Last, [b0, r0, s0]: [u32; 3]) -> u32 {
    crate::analysis::tick::tick_ms(&[l.busy_ms, l.rwnd_limited_ms, l.sndbuf_limited_ms, b0, r0, s0])
}

/// Where a flow's sampled time went, from its chrono counters' growth.
struct Spent {
    /// The time shares.
    shares: TimeShares,
    /// Busy time's growth, ms.
    busy: f64,
    /// The time judged over, ms.
    elapsed: f64,
}

/// [`Spent`] of `e`'s flow: over its sampled span, or over its life for a flow of one
/// sample.
fn spent(e: &EndedFlow) -> Spent {
    let f = &e.flow;
    let l = &f.last;
    // From the connection's setup on, as web100's SndLim timers count: a flow first seen
    // connecting spent its handshake neither busy nor idle, and counting it as the
    // application's time made a short response's one round trip of SYN a fifth of it.
    let span_ms = f.span_ns().saturating_sub(causes::handshake_ns(&f.samples)) as f64 / 1e6;
    let [b0, r0, s0] = f.first_chrono;
    let (busy, rwnd, sndbuf, elapsed, basis) = if f.samples.len() >= 2 && span_ms > 0.0 {
        let d = |now: u32, then: u32| f64::from(now.saturating_sub(then));
        (d(l.busy_ms, b0), d(l.rwnd_limited_ms, r0), d(l.sndbuf_limited_ms, s0), span_ms, "span")
    } else {
        let busy = f64::from(l.busy_ms);
        (busy, f64::from(l.rwnd_limited_ms), f64::from(l.sndbuf_limited_ms), busy, "lifetime")
    };
    // The kernel's chrono counters tick in jiffies and our timestamps at datagram arrival:
    // `shares_of` clamps the small disagreements.
    let shares = if let Some(s) = shares_of(busy, rwnd, sndbuf, elapsed) {
        TimeShares { basis, ..s }
    } else {
        TimeShares {
            receiver_window: 0.0,
            send_buffer: 0.0,
            network: 0.0,
            application: 100.0,
            basis,
        }
    };
    Spent { shares, busy, elapsed }
}

/// The flow's signals and caps, and its setup's SYN retransmits and delay (with whether
/// that delay is exact), for the rules and the findings; `got` the rate it is judged by.
fn evidence(e: &EndedFlow, x: &Inputs, got: f64) -> (Signals, Caps, Option<(u32, f64, bool)>) {
    let f = &e.flow;
    let l = &f.last;
    let rtt_s = (x.min_rtt_ms > 0.0).then_some(x.min_rtt_ms / 1000.0);
    let mbps_over = |bytes: f64| rtt_s.map(|r| bytes * 8.0 / r / 1e6);
    let mut sig = causes::signals(l, f.options);
    // A kernel before 6.7 counts no RTOs: the samples' congestion window tells them.
    if sig.rto_time_ms.is_none()
        && let Some((n, ms)) = causes::rtos_from_samples(&f.samples)
    {
        (sig.rtos, sig.rto_time_ms) = (n, Some(ms));
    }
    let setup = causes::setup(&f.samples, l);
    if let Some((n, delay, _)) = setup {
        (sig.syn_retransmits, sig.setup_delay_ms) = (n, Some(delay));
    }
    let window = window_stats(&f.samples, l.snd_wnd_max);
    sig.window_closed_pct = window.map(|w| w.closed_pct);
    sig.zero_window_stalls = window.map(|w| w.stalls);
    sig.zero_window_ms = window.map(|w| w.closed_ms);
    // The cap is the window the flow typically had while the window held it: a reader
    // that let it close is not capped by the largest window it ever offered.
    let cap_window = window.map_or(l.snd_wnd_max, |w| w.typical);
    let p = sig.loss_pct / 100.0;
    let srtt_s = if x.rtt_p50_ms > 0.0 { x.rtt_p50_ms / 1000.0 } else { x.min_rtt_ms / 1000.0 };
    let caps = Caps {
        peer_window_bytes: l.snd_wnd_max,
        typical_window_bytes: window.map(|w| w.typical),
        window_cap_mbps: (cap_window > 0).then(|| mbps_over(f64::from(cap_window))).flatten(),
        send_buffer_bytes: (l.sndbuf > 0).then_some(l.sndbuf),
        send_buffer_cap_mbps: (l.sndbuf > 0).then(|| mbps_over(f64::from(l.sndbuf))).flatten(),
        loss_cap_mbps: (p > 0.0 && srtt_s > 0.0 && l.snd_mss > 0)
            .then(|| f64::from(l.snd_mss) * 8.0 / srtt_s * MATHIS_C / p.sqrt() / 1e6),
        bdp_bytes: rtt_s.map(|r| got * 1e6 / 8.0 * r),
        cwnd_bytes: x.cwnd_p50_bytes,
    };
    if let Some(a) = e.attempt {
        sig.syn_retransmits = u32::from(a.syn_retransmits);
    }
    (sig, caps, setup)
}

/// The verdict and its cause: the largest time share, then the evidence. `network` needs
/// network evidence (a queue or loss); without it a flow at its window cap was held by the
/// window, and one with a substantial application share by the application's pacing.
fn judge(
    shares: &TimeShares,
    caps: &Caps,
    sig: &Signals,
    x: &Inputs,
    got: f64,
    l: &Last,
    (elapsed_ms, slow_start): (f64, bool),
) -> (&'static str, Option<&'static str>) {
    let mut verdict = largest(shares);
    // Over within slow start's round trips, with no loss: bounded by round trips. The
    // receiver's window, autotuned from 64 KB, grows with slow start and can hold part of
    // such a transfer (a 200 KB response at 50 ms was 49 % rwnd-limited in one lab run of
    // three): that is no reader's or buffer's verdict.
    if slow_start && matches!(verdict, "network" | "receiver-window") {
        return ("network", Some("slow-start"));
    }
    let near_sndbuf_cap =
        caps.send_buffer_cap_mbps.is_some_and(|c| c > 0.0 && got >= SNDBUF_CAP_FRACTION * c);
    if verdict == "network" && shares.send_buffer >= SNDBUF_MIN_SHARE_PCT && near_sndbuf_cap {
        verdict = "send-buffer";
    }
    let queue = queued(x);
    let loss = sig.loss_pct > 0.0 || causes::network_evidence(sig, l);
    let reached = |cap: Option<f64>| cap.is_some_and(|c| c > 0.0 && got >= CAP_REACHED * c);
    let mut paced = false;
    // The window's own evidence: the kernel's rwnd-limited time, or the window seen shut.
    let window_evidence =
        shares.receiver_window > 0.0 || sig.window_closed_pct.is_some_and(|p| p > 0.0);
    if verdict == "network" && !queue && !loss {
        if reached(caps.window_cap_mbps) && window_evidence {
            verdict = "receiver-window";
        } else if shares.application >= PACED_APP_SHARE_PCT && shares.basis == "span" {
            (verdict, paced) = ("application", true);
        }
    }
    // Against the largest window: a reader that kept it open would have had that much.
    let largest_cap = mbps_at(f64::from(caps.peer_window_bytes), x.min_rtt_ms);
    // The window's own evidence first: a reader that kept it open had it at its largest
    // while it held the flow. Only a flow without a typical window (one sample) is judged
    // by its rate against the largest window's, which on a µs path divides by a minimum
    // RTT far under the one the flow ran at: a 16 KB buffer read flat out on one, its
    // window at its largest throughout, reached 0.19 of that "cap" and read as a slow
    // reader.
    let shrunk = match caps.typical_window_bytes {
        Some(t) => f64::from(t) < SLOW_READER_FRACTION * f64::from(caps.peer_window_bytes),
        None => largest_cap.is_some_and(|c| got < SLOW_READER_FRACTION * c),
    };
    let slow_reader = sig.window_closed_pct.is_some_and(|p| p >= SLOW_READER_CLOSED_PCT) || shrunk;
    let cause = match verdict {
        "receiver-window" => Some(causes::receiver_window(sig, caps, slow_reader)),
        "send-buffer" => Some("small-buffer"),
        "network" => causes::network(sig, l, elapsed_ms, mathis_cap(caps, got).is_some(), queue),
        "application" if paced => Some("paced"),
        _ => None,
    };
    (verdict, cause)
}

/// `bytes` per `rtt_ms`, Mbit/s (None without an RTT).
pub(crate) fn mbps_at(bytes: f64, rtt_ms: f64) -> Option<f64> {
    (rtt_ms > 0.0).then(|| bytes * 8.0 / (rtt_ms / 1000.0) / 1e6)
}

/// Whether the median RTT stood well above the minimum, by a ratio and by a margin that
/// jitter on a µs path does not reach: a queue on the path.
fn queued(x: &Inputs) -> bool {
    x.min_rtt_ms > 0.0
        && x.rtt_p50_ms > QUEUE_RTT_RATIO * x.min_rtt_ms
        && x.rtt_p50_ms - x.min_rtt_ms >= QUEUE_EXCESS_MS
}

/// The loss cap when it explains the rate: at or above what the flow reached (a cap), and
/// not so far above that something else held it first.
pub(crate) fn mathis_cap(caps: &Caps, got: f64) -> Option<f64> {
    caps.loss_cap_mbps.filter(|&m| m >= got * (1.0 - CAP_TOLERANCE) && m <= 2.0 * got)
}

/// Whether `cap` bounds `got` (within `tolerance`).
pub(crate) fn is_cap(cap: Option<f64>, got: f64, tolerance: f64) -> bool {
    cap.is_some_and(|c| got <= c * (1.0 + tolerance))
}

/// Why a flow gets no sender's verdict, if it gets none: one that mostly received was
/// limited by its peer's sending, which its own counters do not show; one that sent too
/// little to leave slow start shows no limit at all.
fn unjudged(l: &Last, x: &Inputs) -> Option<String> {
    let (sent, received) = (l.bytes_acked, l.bytes_received);
    if received > sent && received >= MIN_JUDGED_BYTES {
        return Some(match x.recv_throughput_mbps {
            Some(r) => format!(
                "received {} at {}; the sender is the peer",
                crate::units::si_bytes(received),
                crate::units::si_rate_mbps(r)
            ),
            None => format!(
                "received {} (one sample: no rate); the sender is the peer",
                crate::units::si_bytes(received)
            ),
        });
    }
    (sent < MIN_JUDGED_BYTES)
        .then(|| format!("too short to judge: {} sent", crate::units::si_bytes(sent)))
}

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

pub use crate::tracker::views::Window;

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

/// The verdict names, in the order pages and reports count them.
pub const VERDICTS: [&str; 5] =
    ["receiver-window", "send-buffer", "network", "application", "unknown"];

/// The index of `verdict` in [`VERDICTS`] (an unknown or absent one is `unknown`).
pub fn verdict_index(verdict: Option<&str>) -> usize {
    verdict.and_then(|v| VERDICTS.iter().position(|x| *x == v)).unwrap_or(4)
}

#[cfg(test)]
mod tests {
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
        analyze(&mut e, &AnalyzerConfig::default())
            .diagnosis
            .expect("the kernel reported busy time")
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
        analyze(&mut e, &AnalyzerConfig::default())
            .diagnosis
            .expect("the kernel reported busy time")
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
        let mut e =
            ended_flow(&[(S, a.chrono_us(1_000, 0, 0).bytes_acked(4_097).bytes_received(80))]);
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
        let a =
            SockBuilder::new(1, 5000, 80).options(7).rtt_us(rtt_us).min_rtt_us(min_us).snd_wnd(wnd);
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
        assert!(
            d.finding.starts_with("the application sent in bursts: idle 30 %"),
            "{}",
            d.finding
        );
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
        assert_eq!(
            (d.verdict, d.cause),
            ("receiver-window", Some("small-buffer")),
            "{}",
            d.finding
        );
        assert!(
            d.finding
                .starts_with("receiver window 32.8 KB at 50 ms RTT caps this flow at 5.2 Mbit/s"),
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
            flow(50_000, 50_500, 65_536, 52, 9_900, 9_000, (10_000, 0, 0))
                .caps
                .typical_window_bytes,
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
        assert!(
            d.finding.starts_with("too short to judge: 200.0 KB in 4 ms busy"),
            "{}",
            d.finding
        );
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
                    a.snd_wnd(wnd)
                        .chrono_us(busy_ms * 1000, rwnd_ms * 1000, 0)
                        .bytes_acked(200_001),
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
        assert_eq!(
            (d.verdict, d.cause),
            ("receiver-window", Some("small-buffer")),
            "{}",
            d.finding
        );
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
        assert!(
            d.finding.ends_with("5 retransmits were spurious (the peer had the data), not loss")
        );
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
                                let d =
                                    flow(min_us, rtt, wnd, mbit, busy, rwnd, (10_000, retrans, 0));
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
        assert_eq!(
            (d.signals.zero_window_stalls, d.signals.zero_window_ms),
            (Some(3), Some(3000.0))
        );
        assert_eq!((d.verdict, d.cause), ("receiver-window", Some("slow-reader")), "{}", d.finding);
        assert!(
            d.finding.contains("it was typically 20.0 KB and closed 30 % of the time"),
            "{}",
            d.finding
        );
        // The typical window while limited is the open one, not the largest nor a closed one.
        assert_eq!(d.caps.typical_window_bytes, Some(20_000)); // the largest's own step
    }
}
