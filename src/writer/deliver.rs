//! Delivery: the backlog of serialised records, and handing them to the output (the
//! stdout thread's hand-off, or the file) as it takes them. A failure is counted and logged
//! once for a run of them, and the records wait; a full backlog pushes out its oldest,
//! counted as lost.

use std::io;
use std::time::{Duration, Instant};

use super::{Out, Writer};
use crate::writer::WriterError;

/// What [`Writer::offer_to_file`] did with a line.
pub(super) enum Took {
    /// It is in the file's stream.
    Yes,
    /// It is in the file's stream, but writing out what waited failed.
    ButStuck,
    /// The file could not take it (its bytes from before still cannot be written).
    No,
}

impl Writer {
    pub(super) fn enqueue(&mut self, buf: Vec<u8>) {
        self.queued_bytes += buf.len() as u64;
        self.queue.push_back(buf);
        let mut lost = 0;
        while self.queued_bytes > self.cfg.backlog_bytes && self.queue.len() > 1 {
            let old = self.queue.pop_front().expect("queue holds more than one record");
            self.queued_bytes -= old.len() as u64;
            lost += 1;
        }
        if lost > 0 {
            self.metrics.records_lost.add(lost);
            if self.lost_logged.elapsed() >= Duration::from_secs(10) {
                self.lost_logged = Instant::now();
                tracing::error!(target: "cgmon_rs::writer",
                    lost = self.metrics.records_lost.get(), backlog_bytes = self.cfg.backlog_bytes,
                    "output backlog full: oldest records lost");
            }
        }
        self.metrics.writer_backlog.set(self.queue.len() as u64);
    }

    /// Gives a line to the file while nothing waits before it, keeping the buffer for the
    /// next line; queues it when the file cannot take it. Under churn this saved an
    /// allocation a record and compressing each line after a few hundred others had pushed
    /// it out of cache (benches/RESULTS.md, D24).
    pub(super) fn emit(&mut self, line: Vec<u8>) {
        match self.offer_to_file(&line) {
            Took::No => self.enqueue(line),
            Took::Yes | Took::ButStuck => self.spare = line,
        }
    }

    /// Writes queued records until the output refuses one.
    pub(super) fn deliver(&mut self) -> Result<(), WriterError> {
        let r = match self.out {
            Out::Stream(_) => self.deliver_to_stream(),
            Out::File(_) => {
                self.deliver_to_file();
                Ok(())
            }
        };
        self.metrics.writer_backlog.set(self.backlog_len());
        r
    }

    fn deliver_to_file(&mut self) {
        while let Some(rec) = self.queue.pop_front() {
            self.queued_bytes -= rec.len() as u64;
            match self.offer_to_file(&rec) {
                Took::Yes => {}
                Took::ButStuck => break,
                Took::No => {
                    self.queued_bytes += rec.len() as u64;
                    self.queue.push_front(rec);
                    break;
                }
            }
        }
    }

    /// Gives one line to the file, then writes out what waits once there is enough of it.
    /// A line the file took is never offered again, even when the write after it failed:
    /// its bytes wait in the file (queuing it again wrote it twice once the disk had room).
    fn offer_to_file(&mut self, line: &[u8]) -> Took {
        let Out::File(f) = &mut self.out else { return Took::No };
        if let Err(e) = f.write_record(line) {
            // `write_record` fails only before taking the line.
            self.failed(&e);
            return Took::No;
        }
        if let Err(e) = f.pump() {
            self.failed(&e);
            return Took::ButStuck;
        }
        let full = self.cfg.rotate_size.is_some_and(|limit| f.produced() >= limit);
        // Counted as written once a flush confirms it.
        self.recovered();
        if full {
            self.rotate("size");
        }
        Took::Yes
    }

    /// Hands queued records to the stdout thread while it has room (it counts each as
    /// written once the stream has taken it), and passes on what the thread saw fail.
    fn deliver_to_stream(&mut self) -> Result<(), WriterError> {
        let Out::Stream(s) = &self.out else { return Ok(()) };
        let report = s.report();
        let (taken, mut closed) = s.offer_from(&mut self.queue);
        self.queued_bytes -= taken;
        closed |= s.closed();
        if let Some(e) = &report.first {
            self.failed(e);
            self.metrics.write_errors.add(report.errors.saturating_sub(1));
        }
        if report.recovered {
            self.recovered();
        }
        if closed { Err(WriterError::StdoutClosed) } else { Ok(()) }
    }

    /// Records not yet written: the backlog, and those the stdout thread holds.
    pub(super) fn backlog_len(&self) -> u64 {
        let held = match &self.out {
            Out::Stream(s) => s.in_flight(),
            Out::File(_) => 0,
        };
        self.queue.len() as u64 + held
    }

    /// True while records wait for stdout's reader, so the thread should come back soon
    /// rather than at the next tick.
    pub(super) fn waiting_for_reader(&self) -> bool {
        matches!(self.out, Out::Stream(_)) && !self.queue.is_empty()
    }

    pub(super) fn out_name(&self) -> String {
        match &self.out {
            Out::Stream(_) => "stdout".into(),
            Out::File(f) => f.path().display().to_string(),
        }
    }

    pub(super) fn failed(&mut self, e: &io::Error) {
        self.metrics.write_errors.inc();
        self.metrics.output_failing.set(1);
        let now = Instant::now();
        match &mut self.failing_since {
            None => {
                self.failing_since = Some((now, 1));
                tracing::error!(target: "cgmon_rs::writer", file = %self.out_name(), error = %e,
                    "write failed; records are kept and retried");
            }
            Some((_, n)) => *n += 1,
        }
    }

    pub(super) fn recovered(&mut self) {
        self.metrics.output_failing.set(0);
        if let Some((since, n)) = self.failing_since.take() {
            tracing::warn!(target: "cgmon_rs::writer", file = %self.out_name(), errors = n,
                after_ms = since.elapsed().as_millis() as u64, "output writable again");
        }
    }
}
