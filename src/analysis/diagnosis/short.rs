//! Flows too short for their busy time to give a rate: judged by what they are.
//!
//! A flow whose busy time grew by fewer than [`crate::analysis::jiffies::MIN_TICKS`] clock
//! ticks has no rate worth dividing: its bytes over one or two 4 ms ticks read as hundreds
//! of Mbit/s. Such a transfer that ended still in slow start (its ssthresh never set) was
//! bounded by round trips, not by a window or the network's bandwidth: on a path whose
//! round trip is long enough to matter (a millisecond or more) it is `network`/`slow-start`,
//! with the round trips it took. Anything else this short is too short to judge.

use super::{MIN_JUDGED_BYTES, UNKNOWN};

/// The round trip from which the round trips of slow start are what a short transfer is
/// waiting on. Below it (loopback, a data centre's µs) the same transfer is over before
/// the ticks of the busy clock could say what held it.
pub const SLOW_START_MIN_RTT_MS: f64 = 1.0;

/// The initial window, segments (RFC 6928, Linux's default).
const INITIAL_WINDOW: f64 = 10.0;

/// What a short flow is: (verdict, cause, finding), or `None` when its busy time is long
/// enough to judge by rate. `busy_ms`: its busy time's growth; `tick_ms`: the clock's
/// tick; `bytes`: bytes acked; `mss`; `min_rtt_ms`; `in_slow_start`: it never left slow
/// start.
pub fn judge(
    busy_ms: f64,
    tick_ms: f64,
    bytes: u64,
    mss: u32,
    min_rtt_ms: f64,
    in_slow_start: bool,
) -> Option<(&'static str, Option<&'static str>, String)> {
    let ticks = busy_ms / tick_ms.max(1.0);
    if ticks >= crate::analysis::jiffies::MIN_TICKS || bytes < MIN_JUDGED_BYTES {
        return None;
    }
    let sent = crate::units::si_bytes(bytes);
    if in_slow_start && min_rtt_ms >= SLOW_START_MIN_RTT_MS && mss > 0 {
        return Some((
            "network",
            Some("slow-start"),
            format!(
                "{} ({})",
                slow_start_finding(bytes, mss, min_rtt_ms, busy_ms),
                ticks_text(ticks, tick_ms)
            ),
        ));
    }
    Some((
        UNKNOWN,
        None,
        format!(
            "too short to judge: {sent} in {busy_ms:.0} ms busy, under {} clock ticks of \
             {tick_ms:.0} ms, too few to give a rate",
            crate::analysis::jiffies::MIN_TICKS
        ),
    ))
}

/// A transfer that ended in slow start: the round trips it took.
pub fn slow_start_finding(bytes: u64, mss: u32, min_rtt_ms: f64, busy_ms: f64) -> String {
    format!(
        "{} took {} round trips of {} ms in slow start: bounded by round trips, not \
         bandwidth (busy {busy_ms:.0} ms)",
        crate::units::si_bytes(bytes),
        round_trips(bytes, mss),
        super::ms_text(min_rtt_ms)
    )
}

/// "2 clock ticks of 4 ms".
fn ticks_text(ticks: f64, tick_ms: f64) -> String {
    let s = if (ticks - 1.0).abs() < 0.5 { "" } else { "s" };
    format!("{ticks:.0} clock tick{s} of {tick_ms:.0} ms")
}

/// The round trips slow start needs to deliver `bytes` from an initial window of ten
/// segments of `mss`, doubling each round: the smallest n with 10·mss·(2ⁿ − 1) ≥ bytes.
pub fn round_trips(bytes: u64, mss: u32) -> u32 {
    let segs = bytes as f64 / f64::from(mss.max(1));
    (segs / INITIAL_WINDOW + 1.0).log2().ceil().max(1.0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_transfer_is_slow_start_on_a_long_path_and_unjudged_on_a_short_one() {
        // 200 KB at 50 ms, one tick busy: slow start's round trips.
        let (v, c, f) = judge(4.0, 4.0, 200_000, 1448, 50.0, true).unwrap();
        assert_eq!((v, c), ("network", Some("slow-start")));
        assert!(f.starts_with("200.0 KB took 4 round trips of 50 ms in slow start"), "{f}");
        // The same on loopback: nothing to say.
        let (v, c, f) = judge(4.0, 4.0, 200_000, 65_483, 0.02, true).unwrap();
        assert_eq!((v, c), ("unknown", None));
        assert!(f.starts_with("too short to judge: 200.0 KB in 4 ms busy"), "{f}");
        // Out of slow start, short: unjudged too.
        assert_eq!(judge(8.0, 4.0, 200_000, 1448, 50.0, false).unwrap().0, "unknown");
        // Five ticks or more: judged by rate as before.
        assert!(judge(20.0, 4.0, 200_000, 1448, 50.0, true).is_none());
        assert!(judge(5.0, 1.0, 200_000, 1448, 50.0, true).is_none());
        // Under 64 KiB the older rule already says it.
        assert!(judge(4.0, 4.0, 10_000, 1448, 50.0, true).is_none());
    }

    #[test]
    fn round_trips_double_from_ten_segments() {
        assert_eq!(round_trips(14_480, 1448), 1);
        assert_eq!(round_trips(14_481, 1448), 2);
        assert_eq!(round_trips(43_440, 1448), 2);
        assert_eq!(round_trips(200_000, 1448), 4);
    }
}
