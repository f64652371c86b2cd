//! The writer stage: flow records → JSON on stdout or in rotated, gzipped files, and each
//! batch as written handed to the other outputs ([`crate::edges::Consumer`]s that `app`
//! wires: the sink, IPFIX, the web view's ring, `--samples-out`).
//!
//! It runs on its own OS thread ([`spawn`]), fed by a bounded `std::sync::mpsc` channel,
//! so a slow disk blocks only this thread and never a tokio worker that samples. Records
//! are serialised as they arrive and held in a backlog (bounded in bytes, `-writer-backlog`)
//! until the output takes them:
//! - stdout: one JSON object per line, written and flushed in blocks of the records ready
//!   (`stream.rs`; `--pretty`: cgmon's tab-indented
//!   objects, one after another), written by a thread of its own ([`stream`]), so that a
//!   reader that stops reading fills the backlog rather than stopping this thread;
//! - files ([`file::OutFile`]): gzip when the name ends in `.gz`, a sync flush every
//!   `flush_interval` (1 s) so a crash loses at most about that much, rotation by compressed
//!   size (checked per record) and by interval (kept by a timer, so an idle file still
//!   rotates), and SIGHUP ([`Msg::Reopen`]) to close, rotate and reopen.
//!
//! When the output fails (disk full, permission), the error is logged with the file's name
//! and counted, records wait in the backlog and are retried every tick; records pushed out
//! of a full backlog are counted as lost. Nothing is dropped silently. The consumers get
//! every batch whether or not the file took it, so they go on while the disk is full.

mod deliver;
pub mod file;
pub mod stream;
mod thread;

use std::collections::VecDeque;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::Arc;

use std::time::{Duration, Instant};

use serde::Serialize;

pub use crate::edges::{Batch, MAX_QUEUED_BYTES, Msg, RECORD_BYTES, RECORDS_CHANNEL_CAPACITY};
use crate::edges::{Consumer, Written};
use crate::locks::Locked;
use crate::metrics::{Metrics, Stage};
use crate::who::namer::Naming;
use file::{FileConfig, OutFile};
use stream::StreamOut;
pub use thread::{ReopenRequest, spawn};

/// Output kept in memory: what the `diagnose` command reads back, and what tests read.
/// Clones share the buffer.
#[derive(Debug, Clone, Default)]
pub struct MemoryOut(Arc<std::sync::Mutex<Vec<u8>>>);

impl MemoryOut {
    /// A copy of everything written so far.
    pub fn contents(&self) -> Vec<u8> {
        self.0.locked().clone()
    }
}

impl Write for MemoryOut {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.locked().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// How often files are sync-flushed: at most this much output is lost to a SIGKILL.
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// How often the thread wakes when idle, to flush, rotate and retry.
const TICK: Duration = Duration::from_millis(200);

/// How soon the thread comes back while records wait for room in stdout's hand-off.
const STREAM_RETRY: Duration = Duration::from_millis(10);

/// Where records go.
#[derive(Debug, Clone)]
pub enum Target {
    /// Standard output.
    Stdout,
    /// A file in a directory.
    File(FileConfig),
}

/// The writer's settings.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// Records' destination.
    pub target: Target,
    /// Tab-indented objects (cgmon's format) instead of one line per record.
    pub pretty: bool,
    /// Rotate when the file reaches this many bytes on disk.
    pub rotate_size: Option<u64>,
    /// Rotate this often (a file with no records is not rotated).
    pub rotate_interval: Option<Duration>,
    /// Most bytes of JSON held while the output cannot take them.
    pub backlog_bytes: u64,
}

/// The writer failed in a way that stops the program.
#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    /// Opening an output at startup failed.
    #[error("cannot open {path}: {source}")]
    Open {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The reader of stdout went away.
    #[error("stdout closed by its reader")]
    StdoutClosed,
    /// Records could not be written before the end.
    #[error("{0} records could not be written and are lost")]
    Lost(u64),
    /// The writer failed (a bug); every record it had not written was counted as lost.
    #[error("the writer failed ({why}); {lost} records are lost")]
    Failed {
        /// The panic's message.
        why: String,
        /// Records lost through it.
        lost: u64,
    },
}

enum Out {
    Stream(StreamOut),
    File(Box<OutFile>),
}

impl Writer {
    /// Tests: makes every write and sync of the records' file fail with ENOSPC while
    /// `full` is set.
    #[cfg(test)]
    pub(crate) fn inject_full(&mut self, full: &Arc<std::sync::atomic::AtomicBool>) {
        if let Out::File(f) = &mut self.out {
            f.full = Some(full.clone());
        }
    }
}

/// The writer's state; [`spawn`] runs it on a thread.
pub struct Writer {
    cfg: WriterConfig,
    out: Out,
    queue: VecDeque<Vec<u8>>,
    queued_bytes: u64,
    metrics: Arc<Metrics>,
    last_rotate: Instant,
    last_flush: Instant,
    /// Set while the output is failing: the first error of a run of them is logged, and
    /// the recovery.
    failing_since: Option<(Instant, u64)>,
    lost_logged: Instant,
    /// Names records' services and destinations. Here, not in the analyzer: an unknown
    /// cgroup id walks the cgroup tree (at most every few seconds), and this thread is the
    /// one stage that may block on the file system.
    naming: Option<Box<dyn Naming>>,
    /// The other outputs, each handed every batch as written, in the order wired.
    consumers: Vec<Box<dyn Consumer>>,
    /// How many consumers keep records, and lines ([`crate::edges::Keeps`]).
    keepers: (usize, usize),
    /// Tests: the next batch panics (a stand-in for a bug) while set.
    #[cfg(test)]
    pub(crate) panic_next: Arc<std::sync::atomic::AtomicBool>,
    /// The line buffer that records written straight into a file reuse.
    spare: Vec<u8>,
}

impl Writer {
    /// Opens the output. Call before sampling starts, so a bad `-writer-dir` stops the
    /// program before anything is sampled.
    ///
    /// # Errors
    /// A file or directory cannot be opened.
    pub fn open(cfg: WriterConfig, metrics: Arc<Metrics>) -> Result<Self, WriterError> {
        let out = match &cfg.target {
            Target::Stdout => {
                widen_pipe(libc::STDOUT_FILENO);
                Out::Stream(stream(Box::new(io::stdout()), &cfg, &metrics)?)
            }
            Target::File(fc) => Out::File(Box::new(open_file(fc, &metrics)?)),
        };
        Self::with_output(cfg, out, metrics)
    }

    /// A writer onto any stream instead of stdout (tests, `diagnose`).
    ///
    /// # Errors
    /// The stream's thread cannot start.
    pub fn to_stream(
        cfg: WriterConfig,
        w: Box<dyn Write + Send>,
        metrics: Arc<Metrics>,
    ) -> Result<Self, WriterError> {
        let out = Out::Stream(stream(w, &cfg, &metrics)?);
        Self::with_output(cfg, out, metrics)
    }

    fn with_output(
        cfg: WriterConfig,
        out: Out,
        metrics: Arc<Metrics>,
    ) -> Result<Self, WriterError> {
        let now = Instant::now();
        Ok(Self {
            cfg,
            out,
            queue: VecDeque::new(),
            queued_bytes: 0,
            metrics,
            last_rotate: now,
            last_flush: now,
            failing_since: None,
            lost_logged: now - Duration::from_secs(3600),
            naming: None,
            consumers: Vec::new(),
            keepers: (0, 0),
            #[cfg(test)]
            panic_next: Arc::default(),
            spare: Vec::new(),
        })
    }

    /// Serialises and queues a batch, then writes what the output takes.
    ///
    /// # Errors
    /// Stdout's reader is gone.
    pub fn write_batch(&mut self, mut b: Batch) -> Result<(), WriterError> {
        let start = Instant::now();
        let n = b.records.len();
        #[cfg(test)]
        assert!(!self.panic_next.swap(false, std::sync::atomic::Ordering::Relaxed), "injected");
        if !b.records.is_empty() {
            if let Some(n) = &mut self.naming {
                n.name(&mut b.records);
            }
            self.metrics.verdicts.add(b.records.iter().map(verdict_of));
        }
        let want_lines = self.keepers.1 > 0;
        let mut lines = Vec::new();
        for r in &b.records {
            // Straight into the file while nothing waits: one buffer for every line, and each
            // compressed while it is still in cache (`emit`).
            let direct = self.queue.is_empty() && matches!(self.out, Out::File(_));
            let mut buf = if direct { std::mem::take(&mut self.spare) } else { Vec::new() };
            buf.clear();
            buf.reserve(2048);
            if self.cfg.pretty {
                let fmt = serde_json::ser::PrettyFormatter::with_indent(b"\t");
                let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
                r.serialize(&mut ser).map_err(io::Error::other).map_err(|e| self.bug(e))?;
                if want_lines {
                    lines.push(serde_json::to_vec(r).map_err(|e| self.bug(e.into()))?);
                }
            } else {
                crate::record::json::write_record(r, &mut buf);
                if want_lines {
                    lines.push(buf.clone());
                }
            }
            buf.push(b'\n');
            if direct {
                self.emit(buf);
            } else {
                self.enqueue(buf);
            }
        }
        if !b.records.is_empty() || !b.samples.is_empty() {
            let mut w =
                Written::new(&mut b.records, &mut lines, &mut b.points, &b.samples, self.keepers);
            for c in &mut self.consumers {
                c.take(&mut w);
            }
        }
        self.deliver()?;
        self.metrics.time(Stage::Writer, start.elapsed());
        tracing::debug!(target: "cgmon_rs::writer", records = n, time_us = start.elapsed().as_micros() as u64, "writer batch");
        Ok(())
    }

    /// Names every record with `n` before it is written.
    #[must_use]
    pub fn with_naming(mut self, n: Box<dyn Naming>) -> Self {
        self.naming = Some(n);
        self
    }

    /// Hands every batch, as written, to `c` too. Consumers that keep nothing of a batch
    /// are called first, so that every one of them sees it whole; the last that keeps
    /// records (or lines) takes them rather than a copy.
    #[must_use]
    pub fn with_consumer(mut self, c: Box<dyn Consumer>) -> Self {
        let k = c.keeps();
        self.keepers.0 += usize::from(k.records);
        self.keepers.1 += usize::from(k.lines);
        let at = if k == crate::edges::Keeps::default() {
            self.consumers
                .iter()
                .take_while(|c| c.keeps() == crate::edges::Keeps::default())
                .count()
        } else {
            self.consumers.len()
        };
        self.consumers.insert(at, c);
        self
    }

    fn bug(&self, e: io::Error) -> WriterError {
        // serde_json fails only on non-string map keys and I/O; neither can occur here.
        tracing::error!(error = %e, "record serialisation failed");
        WriterError::Lost(1)
    }

    fn rotate(&mut self, why: &str) {
        let Out::File(f) = &mut self.out else { return };
        let r = f.rotate();
        // Records the close confirmed are on disk even when the rename or reopen failed.
        self.metrics.records_written.add(f.take_confirmed());
        match r {
            Ok((to, confirmed)) => {
                self.metrics.records_written.add(confirmed);
                self.last_rotate = Instant::now();
                self.rotated(to, why);
                self.recovered();
            }
            Err(e) => self.failed(&e),
        }
    }

    fn rotated(&self, to: Option<PathBuf>, why: &str) {
        if let Some(to) = to {
            self.metrics.rotations.inc();
            tracing::info!(target: "cgmon_rs::writer", reason = why, to = %to.display(),
                "rotated output file");
            if let Target::File(fc) = &self.cfg.target {
                retain(fc, &self.metrics);
            }
        }
    }

    /// Retries a rotation left pending by a failed rename or reopen, even when no record
    /// is waiting to be written.
    fn retry_rotation(&mut self) {
        let Out::File(f) = &mut self.out else { return };
        if !f.rotation_pending() {
            return;
        }
        match f.finish_rotation() {
            Ok(to) => {
                self.last_rotate = Instant::now();
                self.rotated(to, "retry");
                self.recovered();
            }
            Err(e) => self.failed(&e),
        }
    }

    /// SIGHUP: rotate (when the file holds records and is still ours) and reopen.
    pub fn reopen(&mut self) {
        if let Some(n) = &mut self.naming {
            n.reopen();
        }
        self.rotate("SIGHUP");
        for c in &mut self.consumers {
            c.reopen();
        }
    }

    /// Periodic work: retry, flush, rotate by time.
    ///
    /// # Errors
    /// Stdout's reader is gone.
    pub fn tick(&mut self, now: Instant) -> Result<(), WriterError> {
        if let Some(n) = &mut self.naming {
            n.tick(now);
        }
        self.retry_rotation();
        self.deliver()?;
        if now.duration_since(self.last_flush) >= FLUSH_INTERVAL {
            self.last_flush = now;
            if let Out::File(f) = &mut self.out {
                match f.flush() {
                    Ok(n) => {
                        self.metrics.records_written.add(n);
                        // Records the file took before a failure go out here, with none
                        // waiting in the queue to say the output works again.
                        self.recovered();
                    }
                    Err(e) => self.failed(&e),
                }
            }
        }
        for c in &mut self.consumers {
            c.tick(now);
        }
        if let Some(iv) = self.cfg.rotate_interval
            && !iv.is_zero()
            && now.duration_since(self.last_rotate) >= iv
        {
            match &self.out {
                Out::File(f) if f.records > 0 => self.rotate("interval"),
                _ => self.last_rotate = now,
            }
        }
        Ok(())
    }

    /// Writes what is left, ending files as valid gzip. Retries a failing output for up to
    /// `patience`, then counts what remains as lost.
    ///
    /// # Errors
    /// Records were lost, or stdout's reader is gone.
    pub fn close(mut self, patience: Duration) -> Result<(), WriterError> {
        let r = self.close_output(patience);
        // The other outputs are finished whatever became of the records' own.
        for c in &mut self.consumers {
            c.close();
        }
        r
    }

    fn close_output(&mut self, patience: Duration) -> Result<(), WriterError> {
        let deadline = Instant::now() + patience;
        loop {
            self.deliver()?;
            if self.queue.is_empty() {
                // Some(n): closed, with n more records confirmed; None: stdout's thread
                // is still writing.
                let closed = match &mut self.out {
                    Out::Stream(s) => {
                        Ok(s.wait_written(deadline.min(Instant::now() + TICK)).then_some(0))
                    }
                    Out::File(f) => f.close().map(Some),
                };
                match closed {
                    Ok(Some(n)) => {
                        self.metrics.records_written.add(n);
                        break;
                    }
                    Ok(None) => {}
                    Err(e) => self.failed(&e),
                }
            }
            if Instant::now() >= deadline {
                let taken = match &self.out {
                    Out::File(f) => f.unconfirmed(),
                    Out::Stream(s) => s.in_flight(),
                };
                let n = self.queue.len() as u64 + taken;
                self.metrics.records_lost.add(n);
                self.metrics.writer_backlog.set(0);
                return Err(WriterError::Lost(n));
            }
            match self.out {
                // Room in the hand-off comes as the reader reads.
                Out::Stream(_) if !self.queue.is_empty() => std::thread::sleep(STREAM_RETRY),
                Out::Stream(_) => {}
                Out::File(_) => std::thread::sleep(TICK),
            }
        }
        Ok(())
    }
}

/// A record as the verdict counters take it: its pair, its verdict, and the seconds of its
/// sampled span each cause limited it (its time shares of its `Duration`).
fn verdict_of(r: &crate::record::FlowStats) -> crate::metrics::verdicts::Ended<'_> {
    let span_s = r.duration.max(0) as f64 / 1e9;
    let d = r.diagnosis.as_ref();
    let limited_s = d.map_or([0.0; 4], |d| {
        let s = &d.shares;
        [s.receiver_window, s.send_buffer, s.network, s.application].map(|pct| pct / 100.0 * span_s)
    });
    crate::metrics::verdicts::Ended {
        service: r.service.as_deref(),
        dest_service: r.dest_service.as_deref(),
        verdict: d.map(|d| d.verdict),
        cause: d.and_then(|d| d.cause),
        limited_s,
    }
}

/// When `fd` is a pipe, asks for a 1 MiB buffer (the most an unprivileged process may,
/// `/proc/sys/fs/pipe-max-size`; 64 KiB by default): at thousands of records a second the
/// default filled ~80 times a second, each time putting the writer to sleep and waking the
/// reader. A larger pipe only holds more; a refusal leaves the pipe as it was.
fn widen_pipe(fd: libc::c_int) {
    // SAFETY: fstat and fcntl on an fd number with valid pointers; a closed or non-pipe fd
    // only makes them fail, which is ignored.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &raw mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFIFO {
            libc::fcntl(fd, libc::F_SETPIPE_SZ, 1 << 20);
        }
    }
}

fn stream(
    w: Box<dyn Write + Send>,
    cfg: &WriterConfig,
    metrics: &Arc<Metrics>,
) -> Result<StreamOut, WriterError> {
    let limit = usize::try_from(cfg.backlog_bytes / 4).unwrap_or(usize::MAX);
    let limit = stream::HANDOFF_BYTES.min(limit).max(64 << 10);
    StreamOut::spawn(w, metrics.clone(), limit)
        .map_err(|source| WriterError::Open { path: "stdout".into(), source })
}

/// Applies `fc.keep` to `fc`'s rotated files: deletions are logged and counted, and a
/// directory that cannot be read is a warning (the next rotation tries again).
pub fn retain(fc: &FileConfig, metrics: &Metrics) {
    match file::prune(&fc.dir, &fc.name, fc.keep) {
        Ok(deleted) => {
            for (path, bytes) in deleted {
                metrics.files_deleted.inc();
                tracing::info!(target: "cgmon_rs::writer", file = %path.display(), bytes,
                    "deleted an old rotated file (--writer-keep-files/--writer-keep-size)");
            }
        }
        Err(e) => tracing::warn!(target: "cgmon_rs::writer", dir = %fc.dir.display(),
            error = %e, "cannot read the directory to delete old rotated files"),
    }
}

/// Opens `fc`, moving an earlier run's file aside (logged, counted, and the rotated files
/// pruned).
///
/// # Errors
/// The file or its directory cannot be opened.
pub fn open_file(fc: &FileConfig, metrics: &Metrics) -> Result<OutFile, WriterError> {
    let (f, rotated) = OutFile::open(fc.clone()).map_err(|source| open_error(fc, source))?;
    if let Some(to) = rotated {
        metrics.rotations.inc();
        tracing::info!(target: "cgmon_rs::writer", to = %to.display(),
            "an earlier run's file was moved aside");
        retain(fc, metrics);
    }
    tracing::info!(target: "cgmon_rs::writer", file = %f.path().display(), "output file opened");
    Ok(f)
}

/// The error of `fc`'s file failing to open, naming it.
pub fn open_error(fc: &FileConfig, source: io::Error) -> WriterError {
    WriterError::Open { path: fc.dir.join(&fc.name), source }
}

#[cfg(test)]
mod tests;
