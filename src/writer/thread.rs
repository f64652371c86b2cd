//! The writer's thread: batches taken from the channel until it closes, SIGHUP's reopen
//! requests, and what happens should the writer ever panic.

use std::io;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::{Msg, STREAM_RETRY, TICK, Writer, WriterError};
use crate::metrics::Metrics;

/// A request to reopen the output (SIGHUP) that survives a full channel: the signal sets
/// it and sends [`Msg::Reopen`] only to wake the thread, so when that send finds the
/// channel full, the writer still reopens once it has caught up (at its next loop, at most
/// 200 ms later). Any number of requests before then make one reopen.
#[derive(Debug, Clone, Default)]
pub struct ReopenRequest(Arc<std::sync::atomic::AtomicBool>);

impl ReopenRequest {
    /// Asks for a reopen.
    pub fn request(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }

    fn take(&self) -> bool {
        self.0.swap(false, std::sync::atomic::Ordering::AcqRel)
    }
}

/// Runs the writer on its own thread until the channel closes, then closes the output
/// (retrying a failing output for `patience`). A [`Msg::Reopen`] or a `reopen` request
/// reopens the output.
///
/// Should the writer ever panic (a bug), the thread does not take the monitor down with
/// it: it logs the failure once, counts every record it had taken and not written as lost,
/// and stays to receive (and count as lost) every later batch until the channel closes, so
/// that sampling goes on, the analyzer is never blocked by a dead consumer, and the exit
/// status (1, from [`WriterError::Failed`]) says what happened.
pub fn spawn(
    w: Writer,
    rx: Receiver<Msg>,
    reopen: ReopenRequest,
    patience: Duration,
) -> io::Result<std::thread::JoinHandle<Result<(), WriterError>>> {
    std::thread::Builder::new().name("cgmon-writer".into()).spawn(move || {
        /// Tells the analyzer, however the thread ends, not to wait for room any more.
        struct Stopped(Arc<Metrics>);
        impl Drop for Stopped {
            fn drop(&mut self) {
                self.0.writer_stopped.set(1);
            }
        }
        let metrics = w.metrics.clone();
        let _stopped = Stopped(metrics.clone());
        // Records to write are pushed at us: out of the CPU budget's upkeep.
        let _pushed = metrics.budget.pushed_thread();
        let taken = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = taken.clone();
        let run = std::panic::AssertUnwindSafe(|| serve(w, &rx, &reopen, patience, &counted));
        match std::panic::catch_unwind(run) {
            Ok(r) => r,
            Err(panic) => Err(died(&metrics, &taken, &rx, panic.as_ref())),
        }
    })
}

pub(super) fn serve(
    mut w: Writer,
    rx: &Receiver<Msg>,
    reopen: &ReopenRequest,
    patience: Duration,
    taken: &std::sync::atomic::AtomicU64,
) -> Result<(), WriterError> {
    loop {
        let wait = if w.waiting_for_reader() { STREAM_RETRY } else { TICK };
        match rx.recv_timeout(wait) {
            Ok(Msg::Batch(b)) => {
                w.metrics.writer_queue_bytes.sub(b.queued_bytes);
                taken.fetch_add(b.records.len() as u64, std::sync::atomic::Ordering::Relaxed);
                w.write_batch(b)?;
            }
            Ok(Msg::Reopen) => reopen.request(),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if reopen.take() {
            w.reopen();
        }
        w.tick(Instant::now())?;
    }
    w.close(patience)
}

/// After a panic in the writer: the records it had taken and not written are counted as
/// lost, and so is every batch still to come, until the analyzer closes the channel.
pub(super) fn died(
    metrics: &Metrics,
    taken: &std::sync::atomic::AtomicU64,
    rx: &Receiver<Msg>,
    panic: &(dyn std::any::Any + Send),
) -> WriterError {
    let why = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into());
    let taken = taken.load(std::sync::atomic::Ordering::Relaxed);
    // Only the writer counts records written and lost, so what it took and counted as
    // neither is what the panic lost.
    let lost = taken.saturating_sub(metrics.records_written.get() + metrics.records_lost.get());
    metrics.records_lost.add(lost);
    metrics.writer_backlog.set(0);
    metrics.output_failing.set(1);
    tracing::error!(target: "cgmon_rs::writer", error = %why, lost,
        "the writer failed; sampling goes on, and every record from now on is counted as lost");
    let mut after = 0;
    while let Ok(msg) = rx.recv() {
        if let Msg::Batch(b) = msg {
            metrics.writer_queue_bytes.sub(b.queued_bytes);
            metrics.records_lost.add(b.records.len() as u64);
            after += b.records.len() as u64;
        }
    }
    WriterError::Failed { why, lost: lost + after }
}
