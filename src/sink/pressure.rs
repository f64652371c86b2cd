//! The batch interval under part pressure: fewer, larger inserts while the server says it
//! has too many parts.
//!
//! Every insert is a part that merges must fold in; ClickHouse delays inserts into a
//! partition past `parts_to_delay_insert` (150) active parts and refuses them with
//! `Code: 252` ("Too many parts") past `parts_to_throw_insert` (300). A refused batch is
//! retried with the sink's backoff like any failure (and stored once: delivery.rs); that
//! alone keeps the *rate of new batches* what it was, and a fleet whose hosts all keep
//! cutting a batch a second keeps the partition over the line. So each refusal for too
//! many parts doubles this host's interval (at most once an interval, so the retries of one
//! batch count once), up to the larger of 8 times `--clickhouse-batch-interval` and 60 s
//! (never past the flag's own 10 minutes); once the server has stored a batch and said
//! nothing of parts for 4 intervals, the interval halves again, a step at a time, back to
//! the flag's. Tested against 18.16 with merges stopped and a table that refuses past 8
//! parts (`tests/it/sink.rs`, `part_pressure_stretches_the_interval…`).

use std::time::{Duration, Instant};

/// The longest interval the flag allows, and so the longest stretch.
const LONGEST: Duration = Duration::from_secs(600);

/// Intervals without a refusal before the interval halves.
const CALM_INTERVALS: u32 = 4;

/// The interval in force, and what moves it.
#[derive(Debug, Clone)]
pub struct Stretch {
    base: Duration,
    longest: Duration,
    now: Duration,
    /// The refusals for too many parts and the batches delivered, as last seen.
    seen: (u64, u64),
    /// When the interval last changed, or the last refusal came.
    since: Option<Instant>,
}

impl Stretch {
    /// At `base`, the flag's interval.
    pub fn new(base: Duration) -> Self {
        let longest = (base * 8).max(Duration::from_secs(60)).min(LONGEST).max(base);
        Self { base, longest, now: base, seen: (0, 0), since: None }
    }

    /// The interval in force.
    pub fn interval(&self) -> Duration {
        self.now
    }

    /// The tallies at `at`: refusals for too many parts so far, batches delivered so far.
    /// Returns the new interval when it changed.
    pub fn observe(&mut self, at: Instant, refusals: u64, delivered: u64) -> Option<Duration> {
        let (was_refused, was_delivered) = self.seen;
        self.seen = (refusals, delivered);
        let waited = |d: Duration| self.since.is_none_or(|t| at.duration_since(t) >= d);
        if refusals > was_refused {
            let raise = self.now < self.longest && waited(self.now);
            self.since = Some(at);
            if raise {
                self.now = (self.now * 2).min(self.longest);
                return Some(self.now);
            }
            return None;
        }
        if self.now > self.base && delivered > was_delivered && waited(self.now * CALM_INTERVALS) {
            self.now = (self.now / 2).max(self.base);
            self.since = Some(at);
            return Some(self.now);
        }
        None
    }
}

/// Whether a failure's text is the server's refusal for too many parts.
pub fn is_part_pressure(text: &str) -> bool {
    text.contains("Code: 252,") || text.contains("TOO_MANY_PARTS")
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn refusals_double_the_interval_once_an_interval_and_calm_halves_it_back() {
        let t0 = Instant::now();
        let mut s = Stretch::new(S);
        assert_eq!(s.observe(t0, 0, 5), None, "no refusal: the flag's interval");
        assert_eq!(s.observe(t0, 1, 5), Some(2 * S));
        // Retries of the same batch within the interval count once.
        assert_eq!(s.observe(t0 + S, 3, 5), None);
        assert_eq!(s.observe(t0 + 3 * S, 4, 5), Some(4 * S));
        // Up to 60 s for a 1 s flag, never past it.
        let mut t = t0 + 3 * S;
        for r in 5..20 {
            t += 120 * S;
            s.observe(t, r, 5);
        }
        assert_eq!(s.interval(), 60 * S);
        // Calm: no refusal for 4 intervals and a batch stored: one halving at a time.
        assert_eq!(s.observe(t + 100 * S, 19, 6), None, "not 4 intervals yet");
        assert_eq!(s.observe(t + 240 * S, 19, 6), None, "nothing stored since");
        assert_eq!(s.observe(t + 241 * S, 19, 7), Some(30 * S));
        assert_eq!(
            s.observe(t + 300 * S, 19, 8),
            None,
            "4 of the new intervals from the last step"
        );
        assert_eq!(s.observe(t + 361 * S, 19, 9), Some(15 * S));
        let mut t = t + 361 * S;
        for d in 10..20 {
            t += 60 * S;
            s.observe(t, 19, d);
        }
        assert_eq!(s.interval(), S, "back to the flag's, not below");
    }

    #[test]
    fn the_longest_is_eight_intervals_or_a_minute_within_the_flags_bound() {
        assert_eq!(Stretch::new(60 * S).longest, 480 * S);
        assert_eq!(Stretch::new(120 * S).longest, 600 * S);
        assert_eq!(Stretch::new(600 * S).longest, 600 * S);
        assert_eq!(Stretch::new(S / 2).longest, 60 * S);
    }

    #[test]
    fn the_servers_refusal_is_told_from_other_failures() {
        let text = "HTTP 500: Code: 252, e.displayText() = DB::Exception: Too many parts (300). \
                    Merges are processing significantly slower than inserts.";
        assert!(is_part_pressure(text));
        assert!(!is_part_pressure("HTTP 500: Code: 241, e.displayText() = Memory limit"));
        assert!(!is_part_pressure("connection refused"));
    }
}
