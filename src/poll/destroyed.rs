//! Destroy events applied to the tracker, and what the kernel could not queue counted and
//! said.

use super::{DestroyBatch, EndedFlow, Metrics, Tracker};

/// Applies a batch of destroy events: each ends its flow (or makes a record of a
/// connection no dump saw); overruns and the events the kernel dropped are counted, and
/// a loss is logged.
pub(super) fn apply_destroyed(
    tracker: &mut Tracker,
    (b, ns): (&DestroyBatch, u32),
    out: &mut Vec<EndedFlow>,
    metrics: &Metrics,
) {
    if b.overruns > 0 {
        metrics.destroy_overruns.add(u64::from(b.overruns));
    }
    if b.lost > 0 {
        count_lost(metrics, b.lost, ns);
    } else if b.overruns > 0 {
        tracing::warn!(
            overruns = b.overruns,
            "destroy events lost (ENOBUFS); those flows end as gone"
        );
    }
    metrics.destroy_events.add(b.batch.len() as u64);
    // An owner answered since the last tick reaches its flow before the flow can end.
    tracker.settle_owners();
    for s in b.batch.iter() {
        tracker.destroyed(&s, out);
    }
}

/// Counts `n` destroy events the kernel dropped in namespace `ns`. Said at the start of a
/// run of losses (none in the [`LOSS_QUIET`] before), not at every batch of a storm, which
/// logged a line every few milliseconds: the counter, `/healthz` and the stop line carry
/// the rest.
pub(super) fn count_lost(metrics: &Metrics, n: u64, ns: u32) {
    if n == 0 {
        return;
    }
    metrics.destroy_events_lost.add(n);
    let now = crate::clock::monotonic_ns();
    let last = metrics.destroy_lost_at_ns.get();
    metrics.destroy_lost_at_ns.set(now);
    if last == 0 || now.saturating_sub(last) >= LOSS_QUIET.as_nanos() as u64 {
        tracing::warn!(
            netns = ns,
            lost = n,
            total = metrics.destroy_events_lost.get(),
            "destroy events lost: the kernel's buffer for them was full (--destroy-buffer); \
             their flows end as gone, or leave no record when no dump saw them"
        );
    }
}

/// How long without a lost event before the next loss is logged again.
const LOSS_QUIET: std::time::Duration = std::time::Duration::from_secs(10);
