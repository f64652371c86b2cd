//! Destroy events applied to the tracker, and what the kernel could not queue counted and
//! said.

use super::{DestroyBatch, EndedFlow, Metrics, Tracker};

/// Applies a batch of destroy events: each ends its flow (or makes a record of a
/// connection no dump saw); overruns and the events the kernel dropped are counted, and
/// a loss is logged.
pub(super) fn apply_destroyed(
    tracker: &mut Tracker,
    b: &DestroyBatch,
    out: &mut Vec<EndedFlow>,
    metrics: &Metrics,
) {
    if b.overruns > 0 {
        metrics.destroy_overruns.add(u64::from(b.overruns));
    }
    if b.lost > 0 {
        metrics.destroy_events_lost.add(b.lost);
        metrics.destroy_lost_at_ns.set(crate::clock::monotonic_ns());
        tracing::warn!(
            lost = b.lost,
            total = metrics.destroy_events_lost.get(),
            "destroy events lost: the kernel's buffer for them was full (--destroy-buffer); \
             their flows end as gone, or leave no record when no dump saw them"
        );
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
