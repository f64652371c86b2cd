//! The analyzer stage: ended flows in, records out to the writer, on the pipeline's
//! runtime; the analysis itself is the parent module's.

use tokio::sync::mpsc::Receiver;

use super::{AnalyzerConfig, analyze, keep_heap_for_reuse, samples};
use crate::tracker::{EndReason, EndedFlow};

/// The analyzer stage's settings beyond the analysis itself.
#[derive(Debug, Clone, Default)]
pub struct StageConfig {
    /// How records are computed.
    pub analysis: AnalyzerConfig,
    /// `-writer-partial`: also pass on flows that were open at startup or shutdown.
    pub write_partial: bool,
    /// `--samples-out`: pass on every retained sample as JSON lines too.
    pub samples_out: bool,
    /// Pass on chart points with the records of the last this many written flows of each
    /// batch, for the web view's ring of recently ended flows (which the writer fills, with
    /// the records as written, and which holds this many: the batch's earlier flows would
    /// be pushed out by its later ones). The others get no points. 0: none.
    pub chart_points: usize,
}

impl StageConfig {
    /// Whether `e` is written. Without `-writer-partial`, a flow that crossed the
    /// monitor's start or stop is not (cgmon's rule). Interim windows of a flow seen from
    /// its start are written, though they are partial at a window edge: otherwise a flow
    /// that outlives a window would never be written at all.
    pub fn writes(&self, e: &EndedFlow) -> bool {
        self.write_partial || !(e.flow.preexisting || e.reason == EndReason::Shutdown)
    }
}

/// The analyzer stage: ended flows in, record batches out to the writer thread, until its
/// input closes.
///
/// When the writer's channel is full this stage waits (on a blocking-pool thread, never
/// on a runtime worker); sampling does not wait, since the tracker hands on with
/// `try_send` and counts what it must drop.
///
/// # Errors
/// The writer is gone.
pub async fn run(
    cfg: StageConfig,
    mut ended_rx: Receiver<Vec<EndedFlow>>,
    writer_tx: std::sync::mpsc::SyncSender<crate::edges::Msg>,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
) -> Result<(), crate::edges::StageError> {
    use crate::edges::Batch;
    keep_heap_for_reuse();
    // The last flow's samples: the next one is gathered into their memory. It holds at
    // most one window.
    let mut spare = Vec::new();
    while let Some(ended) = ended_rx.recv().await {
        // What still waits behind this batch (the poll task sets it when it sends).
        metrics.ended_queue.set(ended_rx.len() as u64);
        let start = std::time::Instant::now();
        // Ended flows are pushed at us: their analysis is out of the CPU budget's upkeep.
        let cpu = crate::clock::thread_cpu_ns();
        let samples: u64 = ended.iter().map(|e| e.sample_count() as u64).sum();
        let mut out = Batch { records: Vec::with_capacity(ended.len()), ..Batch::default() };
        // The written flows from this one on get chart points. At 2,000 connections a
        // second, a tick's batch of ~400 made ~300 sets of points only to drop them.
        let pointed_from = match cfg.chart_points {
            0 => usize::MAX,
            n => ended.iter().filter(|e| cfg.writes(e)).count().saturating_sub(n),
        };
        for mut e in ended {
            // Every flow and window the analyzer receives, written or not, as cgmon's
            // histogram counted them; by the span the record's `Duration` gives.
            metrics.flow_durations.push(std::time::Duration::from_nanos(e.flow.span_ns()));
            if !cfg.writes(&e) {
                metrics.records_partial_skipped.inc();
                continue; // dropped ungathered: its blocks go back to the tracker
            }
            e.gather_into(std::mem::take(&mut spare));
            let r = analyze(&mut e, &cfg.analysis);
            if cfg.chart_points > 0 {
                // Every sample: the ring keeps some from the whole flow (`recent::spread`).
                out.points.push(if out.records.len() >= pointed_from {
                    e.flow.chart_points(cfg.analysis.realtime_offset_ns)
                } else {
                    Vec::new()
                });
            }
            if cfg.samples_out {
                samples::write_lines(
                    &mut e,
                    &r.id,
                    cfg.analysis.realtime_offset_ns,
                    &mut out.samples,
                );
            }
            spare = std::mem::take(&mut e.flow.samples);
            out.records.push(r);
        }
        metrics.ended_queue_samples.sub(samples);
        metrics.budget.pushed(crate::clock::thread_cpu_ns().saturating_sub(cpu));
        let took = start.elapsed();
        metrics.time(crate::metrics::Stage::Analyzer, took);
        tracing::debug!(target: "cgmon_rs::analyzer", time_us = took.as_micros() as u64,
            flows = out.records.len(), "analyzer batch");
        if out.records.is_empty() {
            continue;
        }
        hand_on(out, &writer_tx, &metrics).await?;
    }
    Ok(())
}

/// Hands a batch of records to the writer. Bounded in bytes, not only in batches: it waits
/// while the writer holds too much (a batch goes alone into an empty queue, however large).
///
/// # Errors
/// The writer is gone.
async fn hand_on(
    mut out: crate::edges::Batch,
    writer_tx: &std::sync::mpsc::SyncSender<crate::edges::Msg>,
    metrics: &crate::metrics::Metrics,
) -> Result<(), crate::edges::StageError> {
    use crate::edges::{MAX_QUEUED_BYTES, Msg, RECORD_BYTES, StageError};
    use std::sync::mpsc::TrySendError;
    out.queued_bytes = out.records.len() as u64 * RECORD_BYTES + out.samples.len() as u64;
    // (A writer that stopped takes nothing: the send below finds out.)
    while metrics.writer_queue_bytes.get() > 0
        && metrics.writer_queue_bytes.get() + out.queued_bytes > MAX_QUEUED_BYTES
        && metrics.writer_stopped.get() == 0
    {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    metrics.writer_queue_bytes.add(out.queued_bytes);
    match writer_tx.try_send(Msg::Batch(out)) {
        Ok(()) => {}
        Err(TrySendError::Full(msg)) => {
            let tx = writer_tx.clone();
            tokio::task::spawn_blocking(move || tx.send(msg))
                .await
                .map_err(|_| StageError::DownstreamGone)?
                .map_err(|_| StageError::DownstreamGone)?;
        }
        Err(TrySendError::Disconnected(_)) => return Err(StageError::DownstreamGone),
    }
    Ok(())
}
