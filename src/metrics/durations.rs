//! The flow-duration histogram behind `GET /flow-duration-histogram`, cgmon's plain-text
//! page.
//!
//! cgmon's four ranges and their steps are kept, since they follow the sampling interval
//! (a flow's duration is known only to about one interval):
//! `[0, 2s)` by the interval (at most 2 s), `[2s, 5s)` by the interval within 100 ms–5 s,
//! `[5s, 1m)` within 1 s–1 m and `[1m, 1h)` within 1 m–1 h. Longer flows are counted as out
//! of range.
//!
//! Two of cgmon's defects are not: it filed a flow under `interval × samples`, which falls
//! short whenever sampling runs late (at 10 ms with 20,000 sockets its dumps came every
//! 29 ms), where this files the span it measured between the flow's first and last sample
//! (the record's `Duration`); and it rendered the page without holding the lock that
//! `push` took (a data race). Here every count is an atomic, so `push` on the analyzer's
//! thread and `render` on the server's never wait for each other.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::units::format_duration;

/// Bar width of the largest bin of a range, in `#`.
const BAR_WIDTH: u64 = 80;

/// Smallest step of the first range: with a sub-millisecond interval, cgmon's rule would
/// give millions of bins for a resolution no flow record has.
const MIN_STEP: Duration = Duration::from_millis(1);

/// One range: `[lo, hi)` in bins of `step`.
#[derive(Debug)]
struct Range {
    lo: Duration,
    hi: Duration,
    step: Duration,
    bins: Vec<AtomicU64>,
    /// Smallest and largest duration filed here (ns); `u64::MAX` and 0 while empty.
    min_ns: AtomicU64,
    max_ns: AtomicU64,
}

impl Range {
    fn new(lo: Duration, hi: Duration, step: Duration) -> Self {
        let n = (hi - lo).as_nanos().div_ceil(step.as_nanos());
        Self {
            lo,
            hi,
            step,
            bins: (0..n).map(|_| AtomicU64::new(0)).collect(),
            min_ns: AtomicU64::new(u64::MAX),
            max_ns: AtomicU64::new(0),
        }
    }
}

/// Flow durations, by range and bin.
#[derive(Debug)]
pub struct DurationHistogram {
    ranges: [Range; 4],
    /// Flows at an hour or longer.
    over: AtomicU64,
    /// In µs: in ns, 20,000 hour-long windows an hour would wrap it within ten days.
    sum_us: AtomicU64,
    min_ns: AtomicU64,
    max_ns: AtomicU64,
}

impl DurationHistogram {
    /// The ranges for sampling every `interval`.
    pub fn new(interval: Duration) -> Self {
        let s = Duration::from_secs;
        let step = |cap: Duration, floor: Duration| interval.min(cap).max(floor);
        Self {
            ranges: [
                Range::new(Duration::ZERO, s(2), step(s(2), MIN_STEP)),
                Range::new(s(2), s(5), step(s(5), Duration::from_millis(100))),
                Range::new(s(5), s(60), step(s(60), s(1))),
                Range::new(s(60), s(3600), step(s(3600), s(60))),
            ],
            over: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
            min_ns: AtomicU64::new(u64::MAX),
            max_ns: AtomicU64::new(0),
        }
    }

    /// Files one flow that lasted `d`.
    pub fn push(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_us.fetch_add(ns / 1000, Ordering::Relaxed);
        self.min_ns.fetch_min(ns, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
        let Some(r) = self.ranges.iter().find(|r| d < r.hi) else {
            self.over.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let i = ((d - r.lo).as_nanos() / r.step.as_nanos()) as usize;
        r.bins[i.min(r.bins.len() - 1)].fetch_add(1, Ordering::Relaxed);
        r.min_ns.fetch_min(ns, Ordering::Relaxed);
        r.max_ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// Flows filed: those in the bins and those out of range.
    pub fn count(&self) -> u64 {
        let binned: u64 =
            self.ranges.iter().flat_map(|r| &r.bins).map(|b| b.load(Ordering::Relaxed)).sum();
        binned + self.over.load(Ordering::Relaxed)
    }

    /// The plain-text page: a summary line, then per range its count, share, min, max and
    /// density (flows per second of duration), and a line per bin with a bar scaled so the
    /// range's fullest bin is 80 `#` wide. Empty bins at either end of a range are
    /// left out.
    pub fn render(&self) -> String {
        let n = self.count();
        let pct = |k: u64| if n == 0 { 0.0 } else { 100.0 * k as f64 / n as f64 };
        let mut out = String::new();
        let _ = write!(out, "flow durations: {n} flows");
        if let Some(mean_us) = self.sum_us.load(Ordering::Relaxed).checked_div(n) {
            let mean = mean_us.saturating_mul(1000);
            let _ = write!(
                out,
                ", min {}, mean {}, max {}",
                shown(self.min_ns.load(Ordering::Relaxed)),
                shown(mean),
                shown(self.max_ns.load(Ordering::Relaxed))
            );
        }
        let over = self.over.load(Ordering::Relaxed);
        let _ = writeln!(out, "; {over} ({:.1} %) at 1h or longer, out of range", pct(over));
        for r in &self.ranges {
            let counts: Vec<u64> = r.bins.iter().map(|b| b.load(Ordering::Relaxed)).collect();
            let k: u64 = counts.iter().sum();
            let width = (r.hi - r.lo).as_secs_f64();
            let _ = write!(
                out,
                "\n[{}, {}) step {}: {k} flows ({:.1} %)",
                format_duration(r.lo),
                format_duration(r.hi),
                format_duration(r.step),
                pct(k)
            );
            if k == 0 {
                out.push('\n');
                continue;
            }
            let _ = writeln!(
                out,
                ", min {}, max {}, density {:.3} flows/s",
                shown(r.min_ns.load(Ordering::Relaxed)),
                shown(r.max_ns.load(Ordering::Relaxed)),
                k as f64 / width
            );
            let top = counts.iter().copied().max().unwrap_or(1);
            let first = counts.iter().position(|&c| c > 0).unwrap_or(0);
            let last = counts.iter().rposition(|&c| c > 0).unwrap_or(0);
            for (i, &c) in counts.iter().enumerate().take(last + 1).skip(first) {
                let lo = r.lo + r.step * i as u32;
                let hi = (lo + r.step).min(r.hi);
                // Rounded up, so a bin with any flow shows at least one '#'.
                let bar = (c * BAR_WIDTH).div_ceil(top) as usize;
                let label = format!("[{}, {})", format_duration(lo), format_duration(hi));
                let _ = writeln!(out, "  {label:<20} {c:>8} {}", "#".repeat(bar));
            }
        }
        out
    }
}

/// A duration for the page: to the millisecond (to the microsecond below 1 ms).
fn shown(ns: u64) -> String {
    let unit = if ns < 1_000_000 { 1_000 } else { 1_000_000 };
    format_duration(Duration::from_nanos((ns + unit / 2) / unit * unit))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn steps_follow_the_interval_within_each_ranges_bounds() {
        let steps = |iv| DurationHistogram::new(iv).ranges.map(|r| (r.step, r.bins.len()));
        let s = Duration::from_secs;
        assert_eq!(steps(s(1)), [(s(1), 2), (s(1), 3), (s(1), 55), (s(60), 59)]);
        assert_eq!(steps(ms(10)), [(ms(10), 200), (ms(100), 30), (s(1), 55), (s(60), 59)]);
        assert_eq!(steps(s(10)), [(s(2), 1), (s(5), 1), (s(10), 6), (s(60), 59)]);
        assert_eq!(steps(s(7200)), [(s(2), 1), (s(5), 1), (s(60), 1), (s(3600), 1)]);
        // cgmon divided by the interval; a tiny one gives millisecond bins, not millions.
        assert_eq!(steps(Duration::from_micros(1))[0], (ms(1), 2000));
        // A step that does not divide its range: the last bin is cut at the range's end.
        assert_eq!(steps(ms(300))[0], (ms(300), 7));
    }

    #[test]
    fn each_flow_lands_in_its_bin_and_the_page_says_so() {
        let h = DurationHistogram::new(Duration::from_secs(1));
        for d in [ms(0), ms(999), ms(1000), ms(1500), ms(4999), ms(59_999), ms(60_000)] {
            h.push(d);
        }
        h.push(Duration::from_secs(3600)); // an hour: out of range
        h.push(Duration::from_secs(3599)); // the last bin of the last range
        let bins: Vec<Vec<u64>> = h
            .ranges
            .iter()
            .map(|r| r.bins.iter().map(|b| b.load(Ordering::Relaxed)).collect())
            .collect();
        assert_eq!(bins[0], [2, 2]);
        assert_eq!(bins[1], [0, 0, 1]);
        assert_eq!(bins[2][54], 1);
        assert_eq!((bins[3][0], bins[3][58]), (1, 1));
        assert_eq!(h.count(), 9);
        let page = h.render();
        let mut lines = page.lines();
        assert_eq!(
            lines.next().unwrap(),
            "flow durations: 9 flows, min 0s, mean 13m34.166s, max 1h0m0s; 1 (11.1 %) at 1h or \
             longer, out of range"
        );
        assert!(
            page.contains(
                "[0s, 2s) step 1s: 4 flows (44.4 %), min 0s, max 1.5s, density 2.000 flows/s\n"
            ),
            "{page}"
        );
        let full = format!("  {:<20} {:>8} {}", "[0s, 1s)", 2, "#".repeat(80));
        assert!(page.contains(&format!("{full}\n")), "{page}");
        // Empty bins at a range's ends are left out; those between are shown, bar-less.
        assert!(page.contains("[2s, 5s) step 1s: 1 flows (11.1 %)"), "{page}");
        assert!(!page.contains("[2s, 3s)"), "{page}");
        assert!(page.contains("[1m0s, 2m0s)"), "{page}");
        assert!(page.contains(&format!("  {:<20} {:>8} \n", "[2m0s, 3m0s)", 0)), "{page}");
    }

    #[test]
    fn an_empty_histogram_renders_every_range_empty() {
        let page = DurationHistogram::new(Duration::from_secs(1)).render();
        assert!(page.starts_with("flow durations: 0 flows; 0 (0.0 %) at 1h or longer"), "{page}");
        assert_eq!(page.matches(" 0 flows (0.0 %)\n").count(), 4, "{page}");
    }

    #[test]
    fn pushes_from_many_threads_are_all_counted() {
        let h = std::sync::Arc::new(DurationHistogram::new(ms(100)));
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let h = h.clone();
                std::thread::spawn(move || {
                    for i in 0..10_000u64 {
                        h.push(ms((i * 7 + t) % 90_000));
                    }
                })
            })
            .collect();
        hs.into_iter().for_each(|j| j.join().unwrap());
        // Every push is in a bin or out of range: none lost to a race.
        assert_eq!(h.count(), 40_000);
    }
}
