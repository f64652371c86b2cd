//! The fleet sink (`--clickhouse`): flow records into a ClickHouse table, exactly once.
//!
//! A stage beside the writer, on a thread of its own ([`spawn`]): the writer hands it
//! each record it serialised, without waiting (a full hand-off drops and counts them, so
//! sampling never waits for the server). The thread cuts rows into batches, compresses
//! each once (gzip level 1: ClickHouse takes `Content-Encoding: gzip`, and the queue and
//! the spool hold ~40× more records than raw rows would), keeps them in a bounded queue
//! (and, with `--spool-dir`, on disk), and delivers them in order. Its parts, each
//! testable without a network:
//! - [`row`]: a record as a `JSONEachRow` row: the record as the writer serialises it,
//!   plus the flat columns a fleet queries (on ClickHouse 18.16, which skips nested
//!   objects, the diagnosis would otherwise be lost);
//! - [`ddl`]: the `CREATE TABLE` a server of a given version takes;
//! - [`batch`]: rows cut into batches by count, bytes and age, each with its `BatchId`;
//! - [`delivery`]: a bounded queue of batches, retried with backoff and jitter, where a
//!   batch whose insert's reply was lost is looked up by its id before it is sent again,
//!   so that a retry never stores it twice.
//!
//! - [`client`]: the server over HTTP, the table's set-up at first contact;
//! - [`spool`]: batches on disk across restarts.
//!
//! The facts it relies on are in docs/clickhouse.md.

pub mod batch;
pub mod client;
pub mod ddl;
pub mod delivery;
pub mod row;
pub mod spool;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::metrics::Metrics;
use crate::record::FlowStats;

/// What the writer hands the sink: each record's JSON (one line, as the files hold it) and
/// the record.
pub type SinkMsg = Vec<(Vec<u8>, FlowStats)>;

/// Batches in the writer-to-sink hand-off: a few seconds of records at any rate the
/// monitor reaches; past it, records are dropped and counted rather than waited for.
pub const SINK_CHANNEL_CAPACITY: usize = 256;

/// The sink's settings.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    /// The server and table.
    pub target: client::Target,
    /// `Host` in every row.
    pub host: String,
    /// When batches are cut.
    pub limits: batch::Limits,
    /// `--spool-dir`.
    pub spool_dir: Option<PathBuf>,
    /// `--spool-max`: compressed bytes waiting, in memory and on disk.
    pub spool_max: u64,
    /// Retry delays.
    pub backoff: delivery::Backoff,
    /// Gzip batches (`--clickhouse-compress`, on by default).
    pub compress: bool,
}

/// How the sink ended.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// Records were dropped (a full queue, or not delivered nor spooled by the end).
    #[error("{0} records were not delivered to ClickHouse and are lost")]
    Dropped(u64),
}

/// Runs the sink on its own thread until the writer's side of the channel closes; then
/// delivers what it can within `patience` and leaves the rest in the spool (or counts it
/// dropped, without one).
///
/// # Errors
/// The thread cannot be started, or the spool directory cannot be opened.
pub fn spawn(
    cfg: SinkConfig,
    rx: Receiver<SinkMsg>,
    metrics: Arc<Metrics>,
    patience: Duration,
) -> std::io::Result<std::thread::JoinHandle<Result<(), SinkError>>> {
    let spool = match &cfg.spool_dir {
        Some(d) => Some(spool::Spool::open(d)?),
        None => None,
    };
    metrics.sink.enabled.set(1);
    std::thread::Builder::new().name("cgmon-sink".into()).spawn(move || {
        let run = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let store = client::Client::new(cfg.target.clone());
        let mut s = Stage {
            batcher: batch::Batcher::new(cfg.limits, &cfg.host, run),
            delivery: delivery::Delivery::new(cfg.spool_max as usize, cfg.backoff, run),
            spool: None,
            store,
            metrics,
            host: cfg.host.clone(),
            dropped_before: 0,
            compress: cfg.compress,
        };
        if let Some((sp, old)) = spool {
            if !old.is_empty() {
                tracing::info!(target: "cgmon_rs::sink", batches = old.len(),
                    "batches an earlier run spooled: sent first, each looked up before it is sent");
            }
            for b in old {
                s.delivery.offer_uncertain(b);
            }
            s.spool = Some(sp);
        }
        s.run(&rx);
        s.finish(patience)
    })
}

struct Stage {
    batcher: batch::Batcher,
    delivery: delivery::Delivery,
    spool: Option<spool::Spool>,
    store: client::Client,
    metrics: Arc<Metrics>,
    host: String,
    /// Rows counted dropped by the queue so far (its tally is cumulative).
    dropped_before: u64,
    compress: bool,
}

/// How often the thread wakes when idle, to cut aged batches and retry.
const TICK: Duration = Duration::from_millis(100);

impl Stage {
    fn run(&mut self, rx: &Receiver<SinkMsg>) {
        loop {
            let now = Instant::now();
            let wake = [self.batcher.deadline(), self.delivery.next_try()]
                .into_iter()
                .flatten()
                .min()
                .map_or(TICK, |t| t.saturating_duration_since(now).min(TICK));
            match rx.recv_timeout(wake) {
                Ok(msg) => self.take(msg),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if let Some(b) = self.batcher.due(Instant::now()) {
                self.enqueue(b);
            }
            self.step();
        }
    }

    fn take(&mut self, msg: SinkMsg) {
        let now = Instant::now();
        for (json, r) in msg {
            let host = &self.host;
            let full = self.batcher.push(now, 1, |out, id| {
                // A record's JSON is always an object: the writer made it.
                if let Err(e) = row::append(out, &json, &r, host, id) {
                    tracing::error!(target: "cgmon_rs::sink", error = %e, "a record left out");
                }
            });
            if let Some(b) = full {
                self.enqueue(b);
            }
        }
    }

    /// Compresses a batch once, spools it, and queues it.
    fn enqueue(&mut self, mut b: batch::Batch) {
        if self.compress {
            let mut gz = flate2::write::GzEncoder::new(
                Vec::with_capacity(b.rows.len() / 8),
                flate2::Compression::fast(),
            );
            gz.write_all(&b.rows).expect("writing to memory");
            b.rows = gz.finish().expect("writing to memory");
        }
        if let Some(sp) = &mut self.spool
            && let Err(e) = sp.save(&b)
        {
            tracing::warn!(target: "cgmon_rs::sink", error = %e,
                "cannot spool a batch; it waits in memory only");
        }
        self.delivery.offer(b);
        self.publish();
    }

    fn step(&mut self) {
        let changed = self.delivery.step(Instant::now(), &mut self.store);
        if changed {
            match &self.delivery.last_error {
                Some(e) => tracing::error!(target: "cgmon_rs::sink", error = %e,
                    "ClickHouse sink failing; records wait and are retried"),
                None => {
                    tracing::warn!(target: "cgmon_rs::sink", "ClickHouse sink delivering again")
                }
            }
        }
        self.publish();
    }

    /// Spool files of batches gone, and the metrics.
    fn publish(&mut self) {
        for id in self.delivery.take_done() {
            if let Some(sp) = &mut self.spool {
                sp.remove(&id);
            }
        }
        let m = &self.metrics.sink;
        for l in self.delivery.take_latencies() {
            m.batch_seconds.observe(l);
        }
        let t = self.delivery.tally;
        m.sent.mirror(t.sent_rows);
        m.failures.mirror(t.failures);
        m.found_stored.mirror(t.found_stored);
        if t.dropped_rows > self.dropped_before {
            m.dropped.add(t.dropped_rows - self.dropped_before);
            tracing::warn!(target: "cgmon_rs::sink", dropped = t.dropped_rows,
                "ClickHouse queue full (--spool-max): oldest records dropped");
            self.dropped_before = t.dropped_rows;
        }
        let (rows, bytes) = self.delivery.waiting();
        m.waiting_records.set(rows as u64);
        m.waiting_bytes.set(bytes as u64);
        m.spooled_batches.set(self.spool.as_ref().map_or(0, |s| s.len() as u64));
        m.failing.set(u64::from(self.delivery.last_error.is_some()));
        *m.last_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            self.delivery.last_error.clone();
    }

    /// At the end: the last batch, then deliveries until `patience` runs out; what is
    /// left stays in the spool (delivered by the next run), or is dropped without one.
    fn finish(mut self, patience: Duration) -> Result<(), SinkError> {
        if let Some(b) = self.batcher.flush() {
            self.enqueue(b);
        }
        let deadline = Instant::now() + patience;
        loop {
            self.step();
            let Some(next) = self.delivery.next_try() else { break };
            if next >= deadline {
                break;
            }
            std::thread::sleep(next.saturating_duration_since(Instant::now()).min(TICK));
        }
        let (rows, _) = self.delivery.waiting();
        if rows > 0 {
            if self.spool.is_some() {
                tracing::warn!(target: "cgmon_rs::sink", records = rows,
                    "records not delivered by the stop stay in the spool for the next run");
            } else {
                self.metrics.sink.dropped.add(rows as u64);
            }
        }
        let dropped = self.metrics.sink.dropped.get();
        if dropped > 0 { Err(SinkError::Dropped(dropped)) } else { Ok(()) }
    }
}
