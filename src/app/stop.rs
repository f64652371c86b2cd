//! The stop's summary line, built from the counters: how many records were written, and
//! each way a record can have gone missing, named once with its count. A count of zero is
//! left out, so a clean run reads as one short line and a troubled one names its trouble.
//! The whole report (SIGUSR1's) stays in the log at debug level and in `/metrics`.

use crate::metrics::Metrics;

/// What the stop says, from `m`'s counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StopFigures {
    /// Records the output confirmed.
    pub written: u64,
    /// Pushed out of a full backlog, or left unwritten at the end.
    pub lost: u64,
    /// Dropped while a stage's channel was full.
    pub dropped: u64,
    /// Dropped for the ClickHouse sink (its hand-off full, or not delivered at the end).
    pub sink_dropped: u64,
    /// Partial records not written (no `-writer-partial`): by choice, not lost.
    pub partial_skipped: u64,
    /// Output write errors (each retried; the records waited).
    pub write_errors: u64,
    /// Destroy events the kernel dropped (its count): each a connection's end, recorded
    /// as `gone` without its final counters, or not at all when no dump had seen it. With
    /// a filter some may be of connections the filter would have left out.
    pub destroy_lost: u64,
    /// Flows a dump had seen that ended `gone`, their destroy event never read (recorded,
    /// without their final counters; those whose event came late are left out): of the
    /// events lost, these left a record.
    pub gone: u64,
}

impl StopFigures {
    /// The counters as they stand.
    pub fn of(m: &Metrics) -> Self {
        StopFigures {
            written: m.records_written.get(),
            lost: m.records_lost.get(),
            dropped: m.records_dropped.get(),
            sink_dropped: m.sink.dropped.get(),
            partial_skipped: m.records_partial_skipped.get(),
            write_errors: m.write_errors.get(),
            destroy_lost: m.destroy_events_lost.get(),
            // A flow ended gone whose event then came late was not lost: left out.
            gone: m.destroy_wait_expired.get().saturating_sub(m.destroy_late.get()),
        }
    }

    /// Records that did not reach every output they were meant for, and connection ends
    /// the kernel dropped: they fail the run.
    pub fn missing(&self) -> u64 {
        self.lost + self.dropped + self.sink_dropped + self.destroy_lost
    }

    /// One line: "stopped: 1,204 records written; 3 lost (the output failed)".
    pub fn line(&self) -> String {
        let mut s = format!("stopped: {} records written", thousands(self.written));
        // Of the lost events, those of flows a dump had seen left a record (gone); the
        // rest, connections no dump saw, left none.
        let gone = self.gone.min(self.destroy_lost);
        let destroy = format!(
            "destroy events lost (the kernel's buffer was full: {} of their flows ended gone, \
             {} connection ends left no record)",
            thousands(gone),
            thousands(self.destroy_lost - gone)
        );
        let parts = [
            (self.lost, "lost (the output failed)".to_string()),
            (self.dropped, "dropped (a stage's channel was full)".to_string()),
            (self.sink_dropped, "dropped for ClickHouse".to_string()),
            (self.destroy_lost, destroy),
            (self.write_errors, "write errors".to_string()),
            (self.partial_skipped, "partial not written (no -writer-partial)".to_string()),
        ];
        let mut sep = "; ";
        for (n, what) in parts.into_iter().filter(|(n, _)| *n > 0) {
            s.push_str(sep);
            s.push_str(&thousands(n));
            s.push(' ');
            s.push_str(&what);
            sep = ", ";
        }
        s
    }
}

/// `n` with a comma every three digits.
fn thousands(n: u64) -> String {
    let d = n.to_string();
    let mut out = String::with_capacity(d.len() + d.len() / 3);
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_stop_is_short_and_a_troubled_one_names_each_loss_once() {
        let m = Metrics::default();
        m.records_written.add(1_204_331);
        assert_eq!(StopFigures::of(&m).line(), "stopped: 1,204,331 records written");
        assert_eq!(StopFigures::of(&m).missing(), 0);
        m.records_lost.add(3);
        m.sink.dropped.add(1000);
        m.records_partial_skipped.add(7);
        m.destroy_events_lost.add(12_432);
        m.destroy_wait_expired.add(32);
        let f = StopFigures::of(&m);
        assert_eq!(
            f.line(),
            "stopped: 1,204,331 records written; 3 lost (the output failed), 1,000 dropped for \
             ClickHouse, 12,432 destroy events lost (the kernel's buffer was full: 32 of their \
             flows ended gone, 12,400 connection ends left no record), 7 partial not written \
             (no -writer-partial)"
        );
        assert_eq!(f.missing(), 13_435);
        assert_eq!(
            (thousands(0), thousands(999), thousands(1000)),
            ("0".into(), "999".into(), "1,000".into())
        );
    }
}
