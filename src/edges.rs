//! The pipeline's edges: what crosses each channel between the stages, how much each
//! holds, and why a stage stops. Each stage imports its edges from here, never from the
//! stage on the other end.
//!
//! ```text
//! poll task ──Vec<EndedFlow>, ENDED_CHANNEL_CAPACITY──→ analysis task
//!   ──Msg (Batch of FlowStats), RECORDS_CHANNEL_CAPACITY──→ writer thread
//!   ──SinkMsg, sink::SINK_CHANNEL_CAPACITY──→ sink thread (with `--clickhouse`)
//! ```

use crate::record::FlowStats;
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
    pub points: Vec<Vec<crate::record::Point>>,
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
