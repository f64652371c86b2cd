//! Stdout on a thread of its own, so that a reader that stops reading stalls only that
//! thread.
//!
//! A write to a full pipe blocks until the reader reads. Done on the writer thread, that
//! stopped it taking batches off its channel; the channels behind it filled within a second
//! at a thousand connections a second (destroy events come a flow or two per batch), and
//! the tracker had to drop records while the byte-bounded backlog stood empty. Now the
//! writer hands records over here only while less than [`HANDOFF_BYTES`] wait, and keeps
//! the rest in its backlog, where `--writer-backlog` bounds them and counts what it pushes
//! out. No flag of the shared file description is touched (making stdout non-blocking
//! would change it for every process that shares the terminal or pipe).

use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::locks::Locked;
use crate::metrics::Metrics;

/// Most bytes handed to the thread and not yet written (a quarter of the backlog when that
/// is smaller, so that a small backlog still bounds what a stalled reader holds): enough to keep a fast reader busy
/// between two of the writer's turns (10 ms while it has a backlog): 400 MB/s. (At 256 KiB
/// it allowed at most ~25 MB/s, which held stdout back: benches/RESULTS.md, D29.) Small beside the
/// backlog (`--writer-backlog`, 64 MiB).
pub const HANDOFF_BYTES: usize = 4 << 20;

/// How long the thread waits before it retries a failed write (as the writer does a file).
const RETRY: Duration = Duration::from_millis(200);

/// Why [`StreamOut::offer`] did not take a record.
#[derive(Debug)]
pub enum Refused {
    /// [`HANDOFF_BYTES`] already wait: keep it and offer it again later.
    Full(Vec<u8>),
    /// The reader is gone (EPIPE); the record comes back unwritten.
    Closed(Vec<u8>),
}

/// Failures the thread saw since the writer last asked (see [`StreamOut::report`]).
#[derive(Debug, Default)]
pub struct Report {
    /// Failed writes.
    pub errors: u64,
    /// The first of them.
    pub first: Option<io::Error>,
    /// A write succeeded after the last failure.
    pub recovered: bool,
}

#[derive(Default)]
struct State {
    /// Handed over, not yet written; the front one may be being written.
    pending: VecDeque<Vec<u8>>,
    pending_bytes: usize,
    /// EPIPE seen: nothing more is written.
    closed: bool,
    /// The writer is done handing over: exit once `pending` is empty.
    ending: bool,
    report: Report,
    failing: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when work arrives for the thread and when the thread finishes a record.
    cv: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic on the other side leaves the state consistent (no invariant spans an
        // unlock), so a poisoned lock is still usable.
        self.state.locked()
    }
}

/// The records the thread is writing: copies of the front of `pending`, end to end. They
/// stay in `pending` (so that [`StreamOut::in_flight`] counts them) until written whole.
#[derive(Default)]
struct Block {
    bytes: Vec<u8>,
    /// Each record's length, in order.
    lens: VecDeque<usize>,
    /// Bytes of `bytes` written.
    off: usize,
    /// Bytes of records written whole and settled (popped from `pending`).
    settled: usize,
}

impl Block {
    /// Waits for records and copies every one handed over into the block; false when the
    /// thread should end (the writer is done and nothing waits, or the reader has gone).
    fn claim(&mut self, s: &Shared) -> bool {
        let mut st = s.lock();
        while st.pending.is_empty() && !st.ending {
            st = s.cv.wait(st).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        if st.pending.is_empty() || st.closed {
            return false;
        }
        self.bytes.clear();
        self.lens.clear();
        (self.off, self.settled) = (0, 0);
        for r in &st.pending {
            self.bytes.extend_from_slice(r);
            self.lens.push_back(r.len());
        }
        true
    }

    /// Writes the block, retrying a failed write from where it stopped (so no record is
    /// written twice or cut), then flushes. Err when the reader has gone.
    fn write_out(&mut self, w: &mut dyn Write, s: &Shared, m: &Metrics) -> Result<(), ()> {
        loop {
            let r = if self.off < self.bytes.len() {
                match w.write(&self.bytes[self.off..]) {
                    Ok(0) => Err(io::Error::from(io::ErrorKind::WriteZero)),
                    Ok(n) => {
                        self.off += n;
                        continue;
                    }
                    Err(e) => Err(e),
                }
            } else {
                w.flush()
            };
            match r {
                Ok(()) => {
                    let mut st = self.settle(s, m);
                    if st.failing {
                        st.failing = false;
                        st.report.recovered = true;
                    }
                    drop(st);
                    s.cv.notify_all();
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                    self.settle(s, m).closed = true;
                    s.cv.notify_all();
                    return Err(());
                }
                Err(e) => {
                    let mut st = self.settle(s, m);
                    st.failing = true;
                    st.report.errors += 1;
                    st.report.first.get_or_insert(e);
                    st.report.recovered = false;
                    drop(st);
                    s.cv.notify_all();
                    std::thread::sleep(RETRY);
                }
            }
        }
    }

    /// Counts the records now written whole and takes them off `pending`; the state, locked.
    fn settle<'a>(&mut self, s: &'a Shared, m: &Metrics) -> MutexGuard<'a, State> {
        let mut st = s.lock();
        let mut n = 0;
        while let Some(&len) = self.lens.front()
            && self.settled + len <= self.off
        {
            self.lens.pop_front();
            self.settled += len;
            st.pending.pop_front();
            st.pending_bytes -= len;
            n += 1;
        }
        m.records_written.add(n);
        st
    }
}

/// The stream and its thread.
pub struct StreamOut {
    shared: Arc<Shared>,
    /// Bytes handed over and not yet written, at most.
    limit: usize,
}

impl StreamOut {
    /// Starts the thread that writes to `w`: everything handed over since its last write,
    /// in one block, then a flush; each record counted in `records_written` once `w` has
    /// taken all of it.
    ///
    /// One block, not a write per record: a pipe's reader wakes once per write, and a
    /// write and a flush per record held stdout to ~12,000 one-sample records a second
    /// (docs/records.md, "What a record costs").
    ///
    /// # Errors
    /// The thread cannot be started.
    pub fn spawn(
        mut w: Box<dyn Write + Send>,
        metrics: Arc<Metrics>,
        limit: usize,
    ) -> io::Result<Self> {
        let shared = Arc::new(Shared { state: Mutex::new(State::default()), cv: Condvar::new() });
        let s = shared.clone();
        std::thread::Builder::new().name("cgmon-stdout".into()).spawn(move || {
            // Records to write are pushed at us: out of the CPU budget's upkeep.
            let _pushed = metrics.budget.pushed_thread();
            let mut block = Block::default();
            while block.claim(&s) {
                if block.write_out(&mut *w, &s, &metrics).is_err() {
                    return; // the reader is gone
                }
            }
        })?;
        Ok(Self { shared, limit })
    }

    /// Hands `rec` to the thread, unless its limit's bytes already wait (a record larger
    /// than that is taken when nothing waits).
    ///
    /// # Errors
    /// Full, with the record back; or Closed, when the reader has gone.
    pub fn offer(&self, rec: Vec<u8>) -> Result<(), Refused> {
        let mut q = VecDeque::from([rec]);
        let (_, closed) = self.offer_from(&mut q);
        match q.pop_front() {
            None => Ok(()),
            Some(rec) if closed => Err(Refused::Closed(rec)),
            Some(rec) => Err(Refused::Full(rec)),
        }
    }

    /// Hands the records at the front of `queue` to the thread while they fit (each as
    /// [`offer`](Self::offer) would), under one lock and with one wake-up: a wake-up is a
    /// futex call, and one a record was a system call a record under churn. Returns the
    /// bytes taken, and whether the reader has gone (then none are).
    pub fn offer_from(&self, queue: &mut VecDeque<Vec<u8>>) -> (u64, bool) {
        let mut st = self.shared.lock();
        if st.closed {
            return (0, true);
        }
        let mut taken = 0;
        while let Some(rec) = queue.front() {
            if st.pending_bytes > 0 && st.pending_bytes + rec.len() > self.limit {
                break;
            }
            let rec = queue.pop_front().expect("front exists");
            st.pending_bytes += rec.len();
            taken += rec.len() as u64;
            st.pending.push_back(rec);
        }
        drop(st);
        if taken > 0 {
            self.shared.cv.notify_all();
        }
        (taken, false)
    }

    /// Records handed over and not yet written.
    pub fn in_flight(&self) -> u64 {
        self.shared.lock().pending.len() as u64
    }

    /// The reader has gone.
    pub fn closed(&self) -> bool {
        self.shared.lock().closed
    }

    /// Failures and recovery since the last call.
    pub fn report(&self) -> Report {
        std::mem::take(&mut self.shared.lock().report)
    }

    /// Waits until everything handed over is written, the reader has gone, or `deadline`;
    /// true when nothing is left to write.
    pub fn wait_written(&self, deadline: Instant) -> bool {
        let mut st = self.shared.lock();
        loop {
            if st.pending.is_empty() {
                return true;
            }
            let now = Instant::now();
            if st.closed || now >= deadline {
                return false;
            }
            st = self
                .shared
                .cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for StreamOut {
    /// Lets the thread finish what it holds and exit. It is not joined: a reader that never
    /// reads again must not hold up the program's exit, which [`Writer::close`]'s patience
    /// already bounds.
    ///
    /// [`Writer::close`]: super::Writer::close
    fn drop(&mut self) {
        self.shared.lock().ending = true;
        self.shared.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream that takes nothing until the gate opens.
    #[derive(Clone, Default)]
    struct Gated {
        open: Arc<(Mutex<bool>, Condvar)>,
        out: Arc<Mutex<Vec<u8>>>,
    }

    impl Gated {
        fn open(&self) {
            *self.open.0.lock().unwrap() = true;
            self.open.1.notify_all();
        }
    }

    impl Write for Gated {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let mut g = self.open.0.lock().unwrap();
            while !*g {
                g = self.open.1.wait(g).unwrap();
            }
            self.out.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stalled_stream_takes_up_to_the_handoff_then_refuses_without_blocking() {
        let g = Gated::default();
        let m = Arc::new(Metrics::default());
        let s = StreamOut::spawn(Box::new(g.clone()), m.clone(), HANDOFF_BYTES).unwrap();
        let rec = vec![b'x'; 1000];
        let mut taken = 0;
        let t = Instant::now();
        loop {
            match s.offer(rec.clone()) {
                Ok(()) => taken += 1,
                Err(Refused::Full(back)) => {
                    assert_eq!(back, rec, "the refused record comes back whole");
                    break;
                }
                Err(Refused::Closed(_)) => panic!("not closed"),
            }
        }
        assert!(t.elapsed() < Duration::from_secs(1), "offer never waits for the stream");
        assert_eq!(taken, HANDOFF_BYTES / 1000);
        assert_eq!(s.in_flight(), taken as u64);
        assert!(!s.wait_written(Instant::now() + Duration::from_millis(50)));
        assert_eq!(m.records_written.get(), 0);
        g.open();
        assert!(s.wait_written(Instant::now() + Duration::from_secs(10)));
        assert_eq!(m.records_written.get(), taken as u64);
        assert_eq!(g.out.lock().unwrap().len(), taken * 1000);
        // Room again.
        assert!(s.offer(rec).is_ok());
    }

    struct Failing {
        fails_left: u32,
        out: Arc<Mutex<Vec<u8>>>,
        broken: bool,
    }

    impl Write for Failing {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            if self.broken {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            if self.fails_left > 0 {
                self.fails_left -= 1;
                return Err(io::Error::other("disk full"));
            }
            self.out.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_write_is_retried_in_order_and_reported_once_with_its_recovery() {
        let out = Arc::new(Mutex::new(Vec::new()));
        let w = Failing { fails_left: 2, out: out.clone(), broken: false };
        let m = Arc::new(Metrics::default());
        let s = StreamOut::spawn(Box::new(w), m.clone(), HANDOFF_BYTES).unwrap();
        s.offer(b"a\n".to_vec()).unwrap();
        s.offer(b"b\n".to_vec()).unwrap();
        assert!(s.wait_written(Instant::now() + Duration::from_secs(10)));
        assert_eq!(&out.lock().unwrap()[..], b"a\nb\n");
        let r = s.report();
        assert_eq!(r.errors, 2);
        assert_eq!(r.first.unwrap().to_string(), "disk full");
        assert!(r.recovered);
        assert_eq!(m.records_written.get(), 2);
        assert_eq!(s.report().errors, 0, "a report is given once");
    }

    #[test]
    fn a_gone_reader_closes_the_stream_and_keeps_the_record_counted_unwritten() {
        let w = Failing { fails_left: 0, out: Arc::default(), broken: true };
        let s = StreamOut::spawn(Box::new(w), Arc::new(Metrics::default()), HANDOFF_BYTES).unwrap();
        s.offer(b"a\n".to_vec()).unwrap();
        assert!(!s.wait_written(Instant::now() + Duration::from_secs(10)));
        assert!(s.closed());
        assert_eq!(s.in_flight(), 1);
        assert!(matches!(s.offer(b"b\n".to_vec()), Err(Refused::Closed(r)) if r == b"b\n"));
    }

    /// Takes at most 7 bytes a write, fails every third write, and breaks after `breaks_at`
    /// bytes.
    struct Dribble {
        calls: u32,
        out: Arc<Mutex<Vec<u8>>>,
        breaks_at: usize,
    }

    impl Write for Dribble {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.calls += 1;
            let mut out = self.out.lock().unwrap();
            if out.len() >= self.breaks_at {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            if self.calls.is_multiple_of(3) {
                return Err(io::Error::other("EIO"));
            }
            let n = b.len().min(7).min(self.breaks_at - out.len());
            out.extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_block_written_in_pieces_with_failures_between_is_written_once_in_order() {
        let recs: Vec<Vec<u8>> = (0..10).map(|i| format!("record {i}\n").into_bytes()).collect();
        let want: Vec<u8> = recs.concat();
        let out = Arc::new(Mutex::new(Vec::new()));
        let m = Arc::new(Metrics::default());
        let w = Dribble { calls: 0, out: out.clone(), breaks_at: usize::MAX };
        let s = StreamOut::spawn(Box::new(w), m.clone(), HANDOFF_BYTES).unwrap();
        for r in &recs {
            s.offer(r.clone()).unwrap();
        }
        assert!(s.wait_written(Instant::now() + Duration::from_secs(60)));
        assert_eq!(*out.lock().unwrap(), want, "no byte twice, none cut");
        assert_eq!(m.records_written.get(), 10);
        assert!(s.report().errors > 0);

        // The reader goes away inside record 5: records 0-4 are written and counted, the
        // rest stay unwritten, counted as such.
        let out = Arc::new(Mutex::new(Vec::new()));
        let m = Arc::new(Metrics::default());
        let cut = recs[..5].concat().len() + 3;
        let w = Dribble { calls: 0, out: out.clone(), breaks_at: cut };
        let s = StreamOut::spawn(Box::new(w), m.clone(), HANDOFF_BYTES).unwrap();
        for r in &recs {
            let _ = s.offer(r.clone());
        }
        assert!(!s.wait_written(Instant::now() + Duration::from_secs(60)));
        assert!(s.closed());
        assert_eq!(m.records_written.get(), 5);
        assert_eq!(s.in_flight(), 5);
    }
}
