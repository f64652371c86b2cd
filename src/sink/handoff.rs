//! The writer's end of the sink, a consumer of its batches: each record with its one-line
//! JSON, handed to the sink's thread without waiting.

use std::sync::Arc;
use std::sync::mpsc::SyncSender;
use std::time::{Duration, Instant};

use super::SinkMsg;
use crate::edges::{Consumer, Keeps, Written};
use crate::metrics::Metrics;

/// Hands each batch to the sink's thread. A full hand-off (the sink far behind) drops the
/// batch, counted and logged at most every 10 s: the writer never waits for the sink.
pub struct Handoff {
    tx: SyncSender<SinkMsg>,
    metrics: Arc<Metrics>,
    full_logged: Option<Instant>,
}

impl Handoff {
    /// A hand-off into `tx`.
    pub fn new(tx: SyncSender<SinkMsg>, metrics: Arc<Metrics>) -> Self {
        Handoff { tx, metrics, full_logged: None }
    }
}

impl Consumer for Handoff {
    fn keeps(&self) -> Keeps {
        Keeps { records: true, lines: true }
    }

    fn take(&mut self, batch: &mut Written<'_>) {
        if batch.records().is_empty() {
            return;
        }
        let lines = batch.keep_lines();
        let records = batch.keep_records(0);
        let n = records.len() as u64;
        let msg: SinkMsg = lines.into_iter().zip(records).collect();
        if self.tx.try_send(msg).is_err() {
            self.metrics.sink.dropped.add(n);
            if self.full_logged.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                self.full_logged = Some(Instant::now());
                tracing::error!(target: "cgmon_rs::sink", dropped = self.metrics.sink.dropped.get(),
                    "the ClickHouse sink's hand-off is full: records dropped for it");
            }
        }
    }
}
