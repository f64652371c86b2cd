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
//! limited: 34–40 % in the lab (BBR, SO_SNDBUF 16 or 64 KiB, 50 and 100 ms RTT; docs/diagnosis.md, "Rules and thresholds"), the rest
//! spent pacing out what the buffer allowed. What gives it away is the rate: a buffer the
//! kernel autotunes holds at least twice the congestion window (`tcp_sndbuf_expand`:
//! 2 × segments × per-segment memory), so an autotuned flow reaches at most half of
//! sndbuf ÷ min RTT, while those lab flows reached 0.51–1.18 of it. So a flow that was
//! send-buffer limited for at least [`SNDBUF_MIN_SHARE_PCT`] of the time and reached at
//! least [`SNDBUF_CAP_FRACTION`] of its send-buffer cap is called send-buffer limited rather
//! than network limited.

pub mod causes;
mod findings;
mod live;
pub(crate) mod short;

pub use crate::record::{Caps, Diagnosis, Signals, TimeShares};
pub use crate::tracker::views::Window;
use crate::tracker::{EndedFlow, Last};
pub use live::{so_far, so_far_index, so_far_number};

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
/// median read low: a lab flow reached 1.09 × its cap, docs/diagnosis.md, "Rules and thresholds"); `None` when there was none. The
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
    // 208 ms for its 4 rounds (docs/diagnosis.md, "Rules and thresholds", slow-start).
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
/// (the window's first sample): [`crate::analysis::jiffies::tick_ms`].
fn tick_of(l: &Last, [b0, r0, s0]: [u32; 3]) -> u32 {
    crate::analysis::jiffies::tick_ms(&[
        l.busy_ms,
        l.rwnd_limited_ms,
        l.sndbuf_limited_ms,
        b0,
        r0,
        s0,
    ])
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
    // three; docs/diagnosis.md, "Rules and thresholds"): that is no reader's or buffer's verdict.
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

/// The verdict names, in the order pages and reports count them.
pub const VERDICTS: [&str; 5] =
    ["receiver-window", "send-buffer", "network", "application", "unknown"];

/// The index of `verdict` in [`VERDICTS`] (an unknown or absent one is `unknown`).
pub fn verdict_index(verdict: Option<&str>) -> usize {
    verdict.and_then(|v| VERDICTS.iter().position(|x| *x == v)).unwrap_or(4)
}

#[cfg(test)]
mod tests;
