//! Rows cut into batches by count, bytes and age; each batch gets an id.
//!
//! The id (`HOST/RUN/SEQ`: the host, the run's start in ns since the epoch, and a
//! sequence) is written in every row's `BatchId`, so that after an insert whose reply was
//! lost the sink can ask the server whether that batch landed before it sends it again.
//! The run part keeps ids unique across restarts of the monitor.

use std::time::{Duration, Instant};

/// When a batch is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Rows.
    pub rows: usize,
    /// Bytes of rows.
    pub bytes: usize,
    /// Age of its first row.
    pub age: Duration,
}

impl Default for Limits {
    /// 4,000 rows or 8 MiB (a 2 KB record makes 8 MiB at about 4,000), or 1 s: one insert a
    /// second is what ClickHouse's MergeTree is comfortable with per host.
    fn default() -> Self {
        Self { rows: 4_000, bytes: 8 << 20, age: Duration::from_secs(1) }
    }
}

/// A batch of rows, ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Its id, in every row's `BatchId`.
    pub id: String,
    /// `JSONEachRow` rows, each ending in a newline.
    pub rows: Vec<u8>,
    /// How many rows.
    pub count: usize,
    /// The earliest and latest `EndTime` of its rows, in seconds since the epoch: the
    /// lookup after a lost reply reads only that stretch of the host's rows. `None` for a
    /// batch an earlier release spooled (the lookup is then scoped by host alone).
    pub ends: Option<(i64, i64)>,
}

impl Batch {
    /// The batch without its rows (which wait in the spool), holding `count` rows.
    pub fn head(&self, count: usize) -> Batch {
        Batch { id: self.id.clone(), rows: Vec::new(), count, ends: self.ends }
    }
}

/// Collects rows into the batch being filled.
#[derive(Debug)]
pub struct Batcher {
    limits: Limits,
    prefix: String,
    seq: u64,
    rows: Vec<u8>,
    count: usize,
    since: Option<Instant>,
    ends: Option<(i64, i64)>,
}

impl Batcher {
    /// A batcher for `host`, whose run started at `run` (ns since the epoch).
    pub fn new(limits: Limits, host: &str, run: u64) -> Self {
        Self {
            limits,
            prefix: format!("{host}/{run}"),
            seq: 0,
            rows: Vec::new(),
            count: 0,
            since: None,
            ends: None,
        }
    }

    /// The id the batch being filled will have: rows written now carry it.
    pub fn next_id(&self) -> String {
        format!("{}/{}", self.prefix, self.seq)
    }

    /// Notes the `EndTime` (seconds since the epoch) of a row about to be pushed.
    pub fn note_end(&mut self, secs: i64) {
        self.ends = Some(self.ends.map_or((secs, secs), |(a, b)| (a.min(secs), b.max(secs))));
    }

    /// Takes the rows `write` appends (one or more, each ending in a newline) into the
    /// batch being filled, whose id `write` is given; returns the batch when it is full.
    pub fn push(
        &mut self,
        now: Instant,
        rows: usize,
        write: impl FnOnce(&mut Vec<u8>, &str),
    ) -> Option<Batch> {
        let id = self.next_id();
        write(&mut self.rows, &id);
        self.count += rows;
        self.since.get_or_insert(now);
        (self.count >= self.limits.rows || self.rows.len() >= self.limits.bytes).then(|| self.cut())
    }

    /// The batch being filled, when its first row is older than the age limit.
    pub fn due(&mut self, now: Instant) -> Option<Batch> {
        let old = self.since.is_some_and(|t| now.duration_since(t) >= self.limits.age);
        old.then(|| self.cut())
    }

    /// Whatever is being filled (at shutdown).
    pub fn flush(&mut self) -> Option<Batch> {
        (self.count > 0).then(|| self.cut())
    }

    /// Cuts batches at `age` from now on ([`super::pressure`]).
    pub fn set_age(&mut self, age: Duration) {
        self.limits.age = age;
    }

    /// The batch being filled, when it holds a row: its id and its rows so far.
    pub fn filling(&self) -> Option<(String, &[u8])> {
        (self.count > 0).then(|| (self.next_id(), self.rows.as_slice()))
    }

    /// When [`due`](Self::due) will next cut a batch, if anything waits.
    pub fn deadline(&self) -> Option<Instant> {
        self.since.map(|t| t + self.limits.age)
    }

    fn cut(&mut self) -> Batch {
        let b = Batch {
            id: self.next_id(),
            rows: std::mem::take(&mut self.rows),
            count: self.count,
            ends: self.ends.take(),
        };
        self.seq += 1;
        self.count = 0;
        self.since = None;
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(out: &mut Vec<u8>, id: &str) {
        out.extend_from_slice(format!("{{\"BatchId\":\"{id}\"}}\n").as_bytes());
    }

    #[test]
    fn batches_are_cut_by_rows_bytes_and_age_and_every_row_carries_its_batchs_id() {
        let t0 = Instant::now();
        let mut b =
            Batcher::new(Limits { rows: 3, bytes: 1 << 20, age: Duration::from_secs(1) }, "h", 9);
        assert!(b.push(t0, 1, row).is_none());
        assert!(b.push(t0, 1, row).is_none());
        let full = b.push(t0, 1, row).unwrap();
        assert_eq!((full.id.as_str(), full.count, full.ends), ("h/9/0", 3, None));
        assert_eq!(String::from_utf8(full.rows).unwrap().matches("\"h/9/0\"").count(), 3);
        // Age: the first row's. The rows' end times travel with their batch.
        b.note_end(1_700_000_100);
        b.note_end(1_700_000_050);
        assert!(b.push(t0, 1, row).is_none());
        assert_eq!(b.deadline(), Some(t0 + Duration::from_secs(1)));
        assert!(b.due(t0 + Duration::from_millis(999)).is_none());
        let old = b.due(t0 + Duration::from_secs(1)).unwrap();
        assert_eq!((old.id.as_str(), old.count), ("h/9/1", 1));
        assert_eq!(old.ends, Some((1_700_000_050, 1_700_000_100)));
        assert!(b.due(t0 + Duration::from_secs(5)).is_none(), "nothing waits");
        // Bytes.
        let mut b =
            Batcher::new(Limits { rows: 100, bytes: 40, age: Duration::from_secs(1) }, "h", 9);
        assert!(b.push(t0, 1, row).is_none());
        assert!(b.push(t0, 1, row).is_some(), "two rows of 22 bytes pass 40");
        assert!(b.flush().is_none());
        b.push(t0, 1, row);
        assert_eq!(b.flush().unwrap().id, "h/9/1");
    }
}
