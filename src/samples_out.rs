//! `--samples-out`: every retained sample of the recorded flows, as NDJSON lines, in a
//! file of its own beside the records (gzip when its name ends in `.gz`), rotated with the
//! records' files on SIGHUP and pruned by the same `--writer-keep-*` limits. A consumer of
//! the writer's batches: the analyzer makes the lines, this writes them on the writer's
//! thread. A failing file is counted (`cgmon_write_errors_total`) and logged; the records'
//! output goes on.

use std::sync::Arc;
use std::time::Instant;

use crate::edges::{Consumer, Written};
use crate::metrics::Metrics;
use crate::writer::file::{FileConfig, OutFile};
use crate::writer::{FLUSH_INTERVAL, WriterError, open_error, open_file, retain};

/// The samples file.
pub struct SamplesOut {
    cfg: FileConfig,
    file: OutFile,
    metrics: Arc<Metrics>,
    last_flush: Instant,
}

/// Checks that `fc`'s directory can take the file, moving nothing: called before the
/// records' file is opened, so that a bad `--samples-out` stops a run before it has moved
/// an earlier run's records aside.
///
/// # Errors
/// The directory cannot be written.
pub fn check(fc: &FileConfig) -> Result<(), WriterError> {
    fc.check().map_err(|source| open_error(fc, source))
}

impl SamplesOut {
    /// Opens the file (an earlier run's is moved aside).
    ///
    /// # Errors
    /// It cannot be opened.
    pub fn open(cfg: FileConfig, metrics: Arc<Metrics>) -> Result<Self, WriterError> {
        let file = open_file(&cfg, &metrics)?;
        Ok(SamplesOut { cfg, file, metrics, last_flush: Instant::now() })
    }

    /// Tests: every write and sync fails with ENOSPC while `full` is set.
    #[cfg(test)]
    pub(crate) fn inject_full(&mut self, full: &Arc<std::sync::atomic::AtomicBool>) {
        self.file.full = Some(full.clone());
    }

    fn failed(&self, what: &str, e: &std::io::Error) {
        self.metrics.write_errors.inc();
        tracing::warn!(target: "cgmon_rs::samples_out", file = %self.file.path().display(),
            error = %e, "{what}");
    }
}

impl Consumer for SamplesOut {
    fn take(&mut self, batch: &mut Written<'_>) {
        if batch.samples.is_empty() {
            return;
        }
        let r = self.file.write_record(batch.samples).and_then(|()| self.file.pump());
        if let Err(e) = r {
            self.failed("samples not written", &e);
        }
    }

    fn tick(&mut self, now: Instant) {
        if now.duration_since(self.last_flush) < FLUSH_INTERVAL {
            return;
        }
        self.last_flush = now;
        if let Err(e) = self.file.flush() {
            self.failed("flushing the samples file failed", &e);
        }
    }

    fn reopen(&mut self) {
        match self.file.rotate() {
            Ok((Some(_), _)) => retain(&self.cfg, &self.metrics),
            Ok((None, _)) => {}
            Err(e) => self.failed("reopening the samples file failed", &e),
        }
    }

    fn close(&mut self) {
        if let Err(e) = self.file.close() {
            self.metrics.write_errors.inc();
            tracing::error!(target: "cgmon_rs::samples_out", file = %self.file.path().display(),
                error = %e, "closing the samples file failed");
        }
    }
}

#[cfg(test)]
mod tests;
