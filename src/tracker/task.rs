//! The tracker stage. It owns the sampler. Each dump is read in one task, and each socket is
//! applied to the flow table while its datagram is still in cache (`Sampler::dump_with`).
//! Destroy events are applied between dumps. Ended flows go on to the analyzer through a
//! bounded channel.
//!
//! Order matters at the end of a dump. First the destroy events that arrived during it are
//! applied, and only then are absent flows judged. A flow whose socket closed while the
//! dump was walking therefore ends with its exact final counters, not as merely "gone".

use std::time::Duration;

use tokio::sync::{mpsc::Sender, watch};
use tokio::time::MissedTickBehavior;

use super::{EndedFlow, Tracker, TrackerStats};
use crate::sampler::destroy::{DestroyBatch, DestroyListener};
use crate::sampler::source::DumpSource;
use crate::sampler::{SampleError, Sampler};

/// Capacity of the tracker → analyzer channel, in batches: cgmon's 256. Each batch holds
/// the flows one dump or one burst of destroy events ended, so this absorbs a long analyzer
/// stall before the tracker (and with it sampling) waits.
pub const ENDED_CHANNEL_CAPACITY: usize = 256;

/// Why a stage stopped early.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// The next stage dropped its receiver.
    #[error("downstream stage is gone")]
    DownstreamGone,
    /// Sampling failed in a way that cannot be retried.
    #[error(transparent)]
    Sample(#[from] SampleError),
}

async fn next_destroy<D: DumpSource>(
    d: &mut Option<DestroyListener<D>>,
) -> Result<DestroyBatch, SampleError> {
    match d {
        Some(d) => d.next_batch().await,
        None => std::future::pending().await,
    }
}

fn apply_destroyed(tracker: &mut Tracker, b: &DestroyBatch, out: &mut Vec<EndedFlow>) {
    if b.overruns > 0 {
        tracing::warn!(
            overruns = b.overruns,
            "destroy events lost (ENOBUFS); those flows end as gone"
        );
    }
    for s in b.batch.iter() {
        tracker.destroyed(&s, out);
    }
}

/// Samples every `interval` (the first at once) until `stop` turns true or its sender
/// goes, then hands on every active flow as partial and returns the counters.
///
/// A failed dump is logged and ends no flow; the next tick tries again (retry limits and
/// backoff belong to the program, issue 4).
///
/// # Errors
/// The analyzer's receiver is gone.
pub async fn run<S: DumpSource, D: DumpSource>(
    mut tracker: Tracker,
    mut sampler: Sampler<S>,
    mut destroy: Option<DestroyListener<D>>,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
    ended_tx: Sender<Vec<EndedFlow>>,
) -> Result<TrackerStats, StageError> {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    loop {
        if *stop.borrow() {
            break;
        }
        let mut out = Vec::new();
        tokio::select! {
            biased;
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    break;
                }
            }
            _ = tick.tick() => {
                tracker.begin_dump();
                let r = sampler.dump_with(|s| tracker.observe(&s, &mut out)).await;
                if let Some(d) = destroy.as_mut() {
                    match d.drain() {
                        Ok(b) => apply_destroyed(&mut tracker, &b, &mut out),
                        Err(e) => tracing::warn!(error = %e, "reading destroy events"),
                    }
                }
                match r {
                    Ok(d) => tracker.end_dump(d.is_complete(), d.span_ns.0, &mut out),
                    Err(e) => {
                        tracing::warn!(error = %e, "dump failed; no flow ends on it");
                        tracker.end_dump(false, 0, &mut out);
                    }
                }
            }
            b = next_destroy(&mut destroy) => match b {
                Ok(b) => apply_destroyed(&mut tracker, &b, &mut out),
                Err(e) => tracing::warn!(error = %e, "reading destroy events"),
            },
        }
        if !out.is_empty() {
            ended_tx.send(out).await.map_err(|_| StageError::DownstreamGone)?;
        }
    }
    let mut out = Vec::new();
    tracker.finish(&mut out);
    if !out.is_empty() {
        ended_tx.send(out).await.map_err(|_| StageError::DownstreamGone)?;
    }
    Ok(tracker.stats())
}
