//! The pipeline's edges: what crosses each channel between the stages, how much each
//! holds, and why a stage stops. Each stage imports its edges from here, never from the
//! stage on the other end.
//!
//! ```text
//! poll task ──Vec<EndedFlow>, ENDED_CHANNEL_CAPACITY──→ analysis task
//!   ──Msg (Batch of FlowStats), RECORDS_CHANNEL_CAPACITY──→ writer thread
//!   ──Written, to each Consumer in turn, on the writer's thread──→ the other outputs
//! ```
//!
//! The writer names the records (`who::namer::Naming`), writes stdout or the files, and hands every
//! batch as it serialised it ([`Written`]) to the [`Consumer`]s `app` wired: the ClickHouse
//! sink, the IPFIX exporter, the web view's ring, `--samples-out`. A consumer never waits:
//! one with a thread of its own hands over through a bounded channel and counts what a full
//! one drops. Adding an output is a new consumer, with no change to the writer.

use std::time::Instant;

use crate::record::{FlowStats, Point};
use crate::sampler::SampleError;

/// Capacity of the tracker → analyzer channel, in batches: cgmon's 256. Each batch holds
/// the flows ended since the dump before (by the dump, or by destroy events in between), so
/// this absorbs a long analyzer stall (over four minutes at a 1 s interval) before a batch
/// is dropped.
pub const ENDED_CHANNEL_CAPACITY: usize = 256;

/// Most retained samples of ended flows waiting in the channel to the analyzer (about
/// 480 MB): a batch counts its flows' samples, not one slot, so a stalled analyzer cannot
/// pile up 256 batches of long windows. A batch that would pass it is dropped and counted,
/// as when the channel is full.
pub const MAX_QUEUED_SAMPLES: u64 = 10_000_000;

/// Why a stage stopped early.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// The next stage dropped its receiver.
    #[error("downstream stage is gone")]
    DownstreamGone,
    /// Sampling failed in a way that cannot be retried.
    #[error(transparent)]
    Sample(#[from] SampleError),
    /// Too many dumps failed in a row.
    #[error("aborted after {count} consecutive failed dumps; last error: {last}")]
    TooManyErrors {
        /// Consecutive failures.
        count: u32,
        /// The last one.
        last: SampleError,
    },
}

/// Capacity of the analyzer → writer channel, in batches (one batch per batch of ended
/// flows, so up to a dump's worth of records each). The writer thread empties it into its
/// byte-bounded backlog at once, so it fills only while that thread is stuck in a system
/// call on a file (stdout has its own thread); 1024 batches then cover over 15 minutes at
/// a 1 s interval before a batch is dropped (and counted).
pub const RECORDS_CHANNEL_CAPACITY: usize = 1024;

/// What the writer thread receives.
#[derive(Debug)]
pub enum Msg {
    /// Records to write, and (with `--samples-out`) their flows' sample lines.
    Batch(Batch),
    /// Close, rotate and reopen the files (SIGHUP).
    Reopen,
}

/// One batch from the analyzer.
#[derive(Debug, Default)]
pub struct Batch {
    /// Records, in the order their flows ended.
    pub records: Vec<FlowStats>,
    /// NDJSON sample lines of the same flows (empty without `--samples-out`).
    pub samples: Vec<u8>,
    /// Each record's chart points, in the same order, when the web view keeps recently
    /// ended flows (else empty): the writer puts each record, as written, in its ring.
    pub points: Vec<Vec<Point>>,
    /// What the analyzer counted into `Metrics::writer_queue_bytes` for this batch; the
    /// writer takes it out again when it receives the batch.
    pub queued_bytes: u64,
}

/// Most bytes (estimated: [`RECORD_BYTES`] a record, and the sample lines) waiting in the
/// analyzer → writer channel; past it the analyzer waits, and the tracker, which never
/// waits, drops what the analyzer cannot take (counted).
pub const MAX_QUEUED_BYTES: u64 = 64 << 20;

/// A record's JSON, about (1.5-2.5 KB with a diagnosis).
pub const RECORD_BYTES: u64 = 2048;

/// One batch as the writer wrote it, lent to each consumer in turn. It is handed over
/// whether or not the file has taken it, so the other outputs go on while the disk is full.
pub struct Written<'a> {
    records: &'a mut Vec<FlowStats>,
    lines: &'a mut Vec<Vec<u8>>,
    /// Each record's chart points, in the same order, when the analyzer kept any (the web
    /// view's ring takes them).
    pub points: &'a mut Vec<Vec<Point>>,
    /// The batch's NDJSON sample lines (`--samples-out`; else empty).
    pub samples: &'a [u8],
    /// Consumers still to come that keep records, and that keep lines: the last of each
    /// takes them, the others copy them.
    keep_records: usize,
    keep_lines: usize,
}

impl<'a> Written<'a> {
    /// A batch for consumers, of which `keep_records` will call [`Self::keep_records`] and
    /// `keep_lines` [`Self::keep_lines`].
    pub fn new(
        records: &'a mut Vec<FlowStats>,
        lines: &'a mut Vec<Vec<u8>>,
        points: &'a mut Vec<Vec<Point>>,
        samples: &'a [u8],
        (keep_records, keep_lines): (usize, usize),
    ) -> Self {
        Written { records, lines, points, samples, keep_records, keep_lines }
    }

    /// The records, named, in the order their flows ended. Whole for every consumer that
    /// keeps nothing (they are called first); for one that keeps, call before keeping.
    pub fn records(&self) -> &[FlowStats] {
        self.records
    }

    /// The records from `from` on, to keep: moved out to the last consumer that keeps
    /// records, copied for the others (so that no output pays a copy it does not need).
    pub fn keep_records(&mut self, from: usize) -> Vec<FlowStats> {
        take_or_copy(self.records, &mut self.keep_records, from)
    }

    /// Each record's one-line JSON (no newline), as the files hold it; empty unless a
    /// consumer said it keeps lines ([`Consumer::keeps`]). Moved or copied as records are.
    pub fn keep_lines(&mut self) -> Vec<Vec<u8>> {
        take_or_copy(self.lines, &mut self.keep_lines, 0)
    }
}

fn take_or_copy<T: Clone>(v: &mut Vec<T>, keepers: &mut usize, from: usize) -> Vec<T> {
    let from = from.min(v.len());
    *keepers = keepers.saturating_sub(1);
    if *keepers == 0 {
        let mut all = std::mem::take(v);
        all.drain(..from);
        all
    } else {
        v[from..].to_vec()
    }
}

/// What a consumer keeps of each batch past its call, so that the writer makes the lines
/// only when one needs them and the last keeper takes rather than copies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Keeps {
    /// It calls [`Written::keep_records`].
    pub records: bool,
    /// It calls [`Written::keep_lines`].
    pub lines: bool,
}

/// An output beside the writer's own stdout or files. Every call is on the writer's thread
/// and must not wait: a consumer that sends hands over through a bounded channel and
/// counts what a full one drops.
pub trait Consumer: Send {
    /// What it keeps of a batch.
    fn keeps(&self) -> Keeps {
        Keeps::default()
    }
    /// Takes what it needs of a batch.
    fn take(&mut self, batch: &mut Written<'_>);
    /// The writer's periodic tick (every 200 ms when idle): flush, retry.
    fn tick(&mut self, _now: Instant) {}
    /// SIGHUP: close, rotate and reopen what it writes.
    fn reopen(&mut self) {}
    /// The end: finish what it holds (the writer's own output is closed first).
    fn close(&mut self) {}
}
