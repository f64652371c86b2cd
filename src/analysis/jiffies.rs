//! The kernel's clock tick, inferred: `tcpi_busy_time`, `tcpi_rwnd_limited` and
//! `tcpi_sndbuf_limited` move in jiffies (4 ms at HZ=250), and HZ is not visible to user
//! space (`sysconf(_SC_CLK_TCK)` gives USER_HZ, 100, whatever HZ is). Every value those
//! counters take is a multiple of the tick, so the greatest common divisor of a flow's
//! values bounds it from above: busy times of 8 and 12 ms say 4 ms at most. A rate divided
//! by a busy time of one or two ticks is noise (every 200 KB response "reached 400 Mbit/s"
//! over one 4 ms tick), so the diagnosis judges a rate only over [`MIN_TICKS`] of them.
//!
//! The estimate is the flow's own, so that a flow's verdict does not depend on which flows
//! came before it. Where its values are few it errs coarse (a lone 8 ms is taken as one
//! tick of 8 ms), which only withholds a rate-based verdict from a flow that short.

/// Busy-time growth, in ticks, under which a flow gets no rate-based verdict.
pub const MIN_TICKS: f64 = 5.0;

/// The tick assumed when a flow's values say nothing (all zero, or a divisor above
/// [`MAX_TICK_MS`]): HZ=250, the default of Debian's and Ubuntu's kernels.
pub const DEFAULT_TICK_MS: u32 = 4;

/// The coarsest tick there is (HZ=100): a greatest common divisor above it means too few
/// values, not a slower clock.
pub const MAX_TICK_MS: u32 = 10;

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The tick the chrono values `ms` say (0 and the absent `u32::MAX` say nothing), ms.
pub fn tick_ms(ms: &[u32]) -> u32 {
    let g = ms.iter().filter(|&&v| v != 0 && v != u32::MAX).fold(0, |g, &v| gcd(g, v));
    match g {
        0 => DEFAULT_TICK_MS,
        g if g > MAX_TICK_MS => DEFAULT_TICK_MS,
        g => g,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tick_is_the_greatest_common_divisor_within_the_usual_clocks() {
        assert_eq!(tick_ms(&[]), 4, "none seen: HZ=250");
        assert_eq!(tick_ms(&[0, u32::MAX]), 4);
        assert_eq!(tick_ms(&[8, 12]), 4);
        assert_eq!(tick_ms(&[4]), 4);
        assert_eq!(tick_ms(&[7, 12]), 1, "HZ=1000, or 300's 3.33 ms rounded");
        assert_eq!(tick_ms(&[10, 30]), 10, "HZ=100");
        assert_eq!(tick_ms(&[40]), 4, "a lone 40 ms says no more than the default");
        assert_eq!(tick_ms(&[8]), 8, "a lone 8 ms errs coarse");
    }
}
