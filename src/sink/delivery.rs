//! Delivery that users can trust: a bounded queue of batches sent in order, retried with
//! backoff and jitter, and never stored twice.
//!
//! A batch counts as delivered only on the server's success reply. When an attempt fails
//! in a way that may have stored it (the connection dropped after the request was sent, a
//! timeout, a 5xx: the reply may be what was lost), the batch is marked *uncertain*, and
//! before it is sent again the store is asked how many rows with its `BatchId` landed: all
//! of them means it was delivered after all; none means it is sent again. (One insert of
//! fewer than `max_insert_block_size` rows is atomic in a MergeTree table, so a part of a
//! batch does not land alone; through a `Distributed` table the insert must be synchronous
//! for the count to see it: `insert_distributed_sync=1`.) A refusal that cannot have
//! stored anything (a 4xx, a refused connection) is retried without the question.
//!
//! The queue is bounded in bytes; past the bound the oldest batch is dropped and counted.
//! Sampling never waits for any of this: one thread offers batches while another sends
//! them ([`Delivery::begin`] hands the oldest out, [`attempt`] sends it without the queue,
//! [`Delivery::end`] takes the answer).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::batch::Batch;

/// What an attempt to store or to look up a batch gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Nothing can have been stored (connection refused, a 4xx answer): send again.
    NotStored(String),
    /// It may have been stored (the reply was lost, a timeout, a 5xx): ask first.
    Uncertain(String),
    /// The body itself is broken (a spool file that does not inflate, or the server says
    /// so): sending it again cannot help, and it would hold up every batch behind it. It
    /// is set aside and its rows counted lost.
    Malformed(String),
}

impl Failure {
    /// The failure's text, for the log and the status page.
    pub fn text(&self) -> &str {
        match self {
            Failure::NotStored(s) | Failure::Uncertain(s) | Failure::Malformed(s) => s,
        }
    }
}

/// The server, as delivery sees it.
pub trait Store {
    /// Inserts the batch's rows.
    ///
    /// # Errors
    /// Why it did not get a success reply.
    fn insert(&mut self, b: &Batch) -> Result<(), Failure>;

    /// How many rows of the batch `b` (by its id) the table holds.
    ///
    /// # Errors
    /// The question got no answer, or cannot be answered yet (an insert of it may still be
    /// running).
    fn landed(&mut self, b: &Batch) -> Result<u64, Failure>;
}

/// Backoff between failed attempts: doubling from `min` to `max`, with up to a quarter of
/// jitter so that a fleet that lost its server does not come back in step.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// First delay.
    pub min: Duration,
    /// Largest delay.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { min: Duration::from_millis(500), max: Duration::from_secs(30) }
    }
}

/// What happened, for the counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Batches and rows delivered.
    pub sent_batches: u64,
    /// Rows delivered.
    pub sent_rows: u64,
    /// Rows dropped: the queue was full, a spooled batch's file went, or it was malformed.
    pub dropped_rows: u64,
    /// Failed attempts.
    pub failures: u64,
    /// Batches found stored when asked after an uncertain failure (a lost reply).
    pub found_stored: u64,
    /// Rows of batches set aside as malformed (also in `dropped_rows`).
    pub rejected_rows: u64,
    /// Rows dropped because the queue was over its bound (also in `dropped_rows`).
    pub full_rows: u64,
    /// Failed attempts the server refused for too many parts (also in `failures`).
    pub part_pressure: u64,
}

struct Queued {
    /// Without its rows when they wait in the spool (`on_disk`).
    batch: Arc<Batch>,
    /// Bytes of its body, in memory or on disk: what the bound counts.
    size: usize,
    on_disk: bool,
    uncertain: bool,
    /// An attempt is out with it ([`Delivery::begin`]): it is not dropped meanwhile.
    sending: bool,
}

/// A batch handed out to be sent, on the sending thread, while the queue goes on taking
/// batches ([`Delivery::begin`], [`attempt`], [`Delivery::end`]).
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The batch; without rows when `on_disk`.
    pub batch: Arc<Batch>,
    /// Its body waits in the spool: the sender reads it back ([`super::spool::read`]).
    pub on_disk: bool,
    /// Its insert may have been stored before: look it up first.
    pub uncertain: bool,
}

/// Sends one attempt: for an uncertain batch, first asks whether it landed. `Ok(true)`: it
/// was found stored (a lost reply); `Ok(false)`: inserted now.
///
/// # Errors
/// Why it got no success reply.
pub fn attempt(store: &mut dyn Store, a: &Attempt) -> Result<bool, Failure> {
    if a.uncertain && store.landed(&a.batch)? > 0 {
        return Ok(true);
    }
    store.insert(&a.batch).map(|()| false)
}

/// The queue of batches waiting for the server.
pub struct Delivery {
    queue: VecDeque<Queued>,
    bytes: usize,
    max_bytes: usize,
    backoff: Backoff,
    delay: Duration,
    next_try: Option<Instant>,
    /// Jitter's state (xorshift): no need for a random crate.
    seed: u64,
    /// The last failure, while failing.
    pub last_error: Option<String>,
    /// Counters.
    pub tally: Tally,
    /// Ids of the batches that left the queue (delivered or dropped) since
    /// [`take_done`](Self::take_done): their spool files go.
    done: Vec<String>,
    /// Ids of the batches set aside as malformed since [`take_rejected`](Self::take_rejected),
    /// with why: their spool files are kept aside.
    rejected: Vec<(String, String)>,
    /// How long each delivered batch's successful call took, since the last take.
    latencies: Vec<Duration>,
}

impl Delivery {
    /// A queue of at most `max_bytes` of rows (plus the one batch being sent).
    pub fn new(max_bytes: usize, backoff: Backoff, seed: u64) -> Self {
        Self {
            queue: VecDeque::new(),
            bytes: 0,
            max_bytes,
            backoff,
            delay: Duration::ZERO,
            next_try: None,
            seed: seed | 1,
            last_error: None,
            tally: Tally::default(),
            done: Vec::new(),
            rejected: Vec::new(),
            latencies: Vec::new(),
        }
    }

    /// Ids of the batches set aside as malformed since the last call, with why.
    pub fn take_rejected(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.rejected)
    }

    /// Batches whose rows wait in memory only (their spooling failed), oldest first,
    /// except the one out with the sender: to spool again when the disk has room.
    pub fn unspooled(&self) -> Vec<Arc<Batch>> {
        self.queue
            .iter()
            .filter(|q| !q.on_disk && !q.sending)
            .map(|q| Arc::clone(&q.batch))
            .collect()
    }

    /// The batch `id` is now in the spool: its rows leave memory.
    pub fn mark_spooled(&mut self, id: &str) {
        if let Some(q) = self.queue.iter_mut().find(|q| q.batch.id == id && !q.sending) {
            q.batch = Arc::new(q.batch.head(q.batch.count));
            q.on_disk = true;
        }
    }

    /// Rows waiting in memory only, not in the spool.
    pub fn waiting_in_memory(&self) -> usize {
        self.queue.iter().filter(|q| !q.on_disk).map(|q| q.batch.count).sum()
    }

    /// The batch out with the sender holds `rows` rows, not what its head said (a spool
    /// file cut short): counted by what it holds from now on.
    pub fn recount(&mut self, rows: usize) {
        if let Some(q) = self.queue.front_mut().filter(|q| q.sending) {
            q.batch = Arc::new(q.batch.head(rows));
        }
    }

    /// Ids of the batches that left the queue since the last call.
    pub fn take_done(&mut self) -> Vec<String> {
        std::mem::take(&mut self.done)
    }

    /// How long each batch delivered since the last call took to deliver.
    pub fn take_latencies(&mut self) -> Vec<Duration> {
        std::mem::take(&mut self.latencies)
    }

    /// Queues a batch whose body (of `size` bytes) waits in the spool; `uncertain` when an
    /// earlier run spooled it and may have died mid-send (it is looked up before it is
    /// sent). Its rows, if any, are let go.
    pub fn offer_spooled(&mut self, mut b: Batch, size: usize, uncertain: bool) {
        b.rows = Vec::new();
        self.push(b, size, true, uncertain);
    }

    /// Rows and bytes waiting.
    pub fn waiting(&self) -> (usize, usize) {
        (self.queue.iter().map(|q| q.batch.count).sum(), self.bytes)
    }

    /// Queues a batch, dropping (and counting) the oldest while over the bound. A batch
    /// that waits for a retry is dropped too when it is the oldest (the bound holds whatever
    /// the server does); only the one whose attempt is out at this moment is kept until the
    /// attempt ends.
    pub fn offer(&mut self, b: Batch) {
        let size = b.rows.len();
        self.push(b, size, false, false);
    }

    fn push(&mut self, b: Batch, size: usize, on_disk: bool, uncertain: bool) {
        self.bytes += size;
        let batch = Arc::new(b);
        self.queue.push_back(Queued { batch, size, on_disk, uncertain, sending: false });
        while self.bytes > self.max_bytes {
            let i = usize::from(self.queue.front().is_some_and(|q| q.sending));
            if i + 1 >= self.queue.len() {
                break; // the newest is kept whatever its size
            }
            let old = self.queue.remove(i).expect("within the queue");
            self.bytes -= old.size;
            self.tally.dropped_rows += old.batch.count as u64;
            self.tally.full_rows += old.batch.count as u64;
            self.done.push(old.batch.id.clone());
        }
    }

    /// When the next attempt is due (`None`: nothing waits).
    pub fn next_try(&self) -> Option<Instant> {
        if self.queue.is_empty() { None } else { Some(self.next_try.unwrap_or_else(Instant::now)) }
    }

    /// The oldest batch, when an attempt is due and none is out.
    pub fn begin(&mut self, now: Instant) -> Option<Attempt> {
        if self.next_try.is_some_and(|t| now < t) {
            return None;
        }
        let q = self.queue.front_mut().filter(|q| !q.sending)?;
        q.sending = true;
        Some(Attempt { batch: Arc::clone(&q.batch), on_disk: q.on_disk, uncertain: q.uncertain })
    }

    /// The batch of the attempt out could not be read back from the spool (its file went):
    /// dropped, its rows counted so.
    pub fn lost(&mut self) {
        if self.queue.front().is_some_and(|q| q.sending) {
            let q = self.queue.pop_front().expect("front exists");
            self.bytes -= q.size;
            self.tally.dropped_rows += q.batch.count as u64;
            self.done.push(q.batch.id.clone());
        }
    }

    /// The batch of the attempt out is malformed (`why`): set aside, its rows counted lost,
    /// and the batches behind it go on.
    pub fn reject(&mut self, why: &str) {
        if self.queue.front().is_some_and(|q| q.sending) {
            let q = self.queue.pop_front().expect("front exists");
            self.bytes -= q.size;
            self.tally.dropped_rows += q.batch.count as u64;
            self.tally.rejected_rows += q.batch.count as u64;
            self.rejected.push((q.batch.id.clone(), why.to_string()));
        }
    }

    /// The end of the attempt [`begin`](Self::begin) gave, which took `took`. Returns true
    /// when the store went from failing to working, or the other way (the caller logs those
    /// moments, not every retry).
    pub fn end(&mut self, now: Instant, r: Result<bool, Failure>, took: Duration) -> bool {
        let was_failing = self.last_error.is_some();
        // A body that cannot be sent leaves the queue at once: no backoff, no failure.
        if let Err(Failure::Malformed(why)) = &r {
            self.reject(why);
            self.next_try = None;
            return false;
        }
        let Some(q) = self.queue.front_mut().filter(|q| q.sending) else {
            return false; // no attempt was out
        };
        q.sending = false;
        match r {
            Ok(found) => {
                let q = self.queue.pop_front().expect("front exists");
                self.bytes -= q.size;
                self.tally.found_stored += u64::from(found);
                self.tally.sent_batches += 1;
                self.tally.sent_rows += q.batch.count as u64;
                self.done.push(q.batch.id.clone());
                self.latencies.push(took);
                self.delay = Duration::ZERO;
                self.next_try = None;
                self.last_error = None;
            }
            Err(e) => {
                // Once uncertain, a batch stays so until it is found or resent: a later
                // refusal does not undo what an earlier lost reply may have stored.
                q.uncertain |= matches!(e, Failure::Uncertain(_));
                self.tally.failures += 1;
                self.tally.part_pressure += u64::from(super::pressure::is_part_pressure(e.text()));
                self.last_error = Some(e.text().to_string());
                self.delay = if self.delay.is_zero() {
                    self.backoff.min
                } else {
                    (self.delay * 2).min(self.backoff.max)
                };
                self.next_try = Some(now + self.jittered(self.delay));
            }
        }
        was_failing != self.last_error.is_some()
    }

    /// Sends what is due on this thread, in order, until the queue is empty or an attempt
    /// fails. Returns true when the store went from failing to working, or the other way.
    /// (The sink sends on a thread of its own; the tests drive the queue with this.)
    #[cfg(test)]
    pub fn step(&mut self, now: Instant, store: &mut dyn Store) -> bool {
        let was_failing = self.last_error.is_some();
        while let Some(a) = self.begin(now) {
            let t = Instant::now();
            let r = attempt(store, &a);
            let failed = r.is_err();
            self.end(now, r, t.elapsed());
            if failed {
                break;
            }
        }
        was_failing != self.last_error.is_some()
    }

    fn jittered(&mut self, d: Duration) -> Duration {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let quarter = d.as_nanos() as u64 / 4;
        d + Duration::from_nanos(if quarter == 0 { 0 } else { self.seed % quarter })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table in memory behind a server that fails on cue.
    #[derive(Default)]
    struct Fake {
        rows: Vec<(String, usize)>,
        script: VecDeque<Step>,
        inserts: usize,
        questions: usize,
    }

    #[derive(Clone, Copy)]
    enum Step {
        Ok,
        Refused,
        /// Stores the batch, then the reply is lost.
        StoredReplyLost,
        /// Fails before storing, in a way that looks the same as a lost reply.
        Timeout,
        /// Refuses the body as broken.
        Malformed,
    }

    impl Store for Fake {
        fn insert(&mut self, b: &Batch) -> Result<(), Failure> {
            self.inserts += 1;
            match self.script.pop_front().unwrap_or(Step::Ok) {
                Step::Ok => {
                    self.rows.push((b.id.clone(), b.count));
                    Ok(())
                }
                Step::Refused => Err(Failure::NotStored("connection refused".into())),
                Step::StoredReplyLost => {
                    self.rows.push((b.id.clone(), b.count));
                    Err(Failure::Uncertain("connection closed mid-reply".into()))
                }
                Step::Timeout => Err(Failure::Uncertain("timed out".into())),
                Step::Malformed => Err(Failure::Malformed("inflate failed".into())),
            }
        }

        fn landed(&mut self, b: &Batch) -> Result<u64, Failure> {
            self.questions += 1;
            Ok(self.rows.iter().filter(|r| r.0 == b.id).map(|r| r.1 as u64).sum())
        }
    }

    fn batch(i: usize) -> Batch {
        Batch { id: format!("h/1/{i}"), rows: vec![b'x'; 100], count: 2, ends: None }
    }

    fn run(script: &[Step], batches: usize) -> (Fake, Delivery) {
        let mut f = Fake { script: script.iter().copied().collect(), ..Fake::default() };
        let mut d = Delivery::new(1 << 20, Backoff::default(), 7);
        for i in 0..batches {
            d.offer(batch(i));
        }
        let mut now = Instant::now();
        for _ in 0..100 {
            d.step(now, &mut f);
            now += Duration::from_secs(60);
        }
        (f, d)
    }

    #[test]
    fn every_batch_lands_exactly_once_whatever_the_server_does() {
        use Step::*;
        for script in [
            vec![],
            vec![Refused, Refused, Ok],
            vec![StoredReplyLost],
            vec![Timeout, Timeout, StoredReplyLost, Refused],
            vec![StoredReplyLost, Refused, Timeout, StoredReplyLost],
        ] {
            let (f, d) = run(&script, 5);
            let mut ids: Vec<&str> = f.rows.iter().map(|r| r.0.as_str()).collect();
            ids.sort_unstable();
            let want: Vec<String> = (0..5).map(|i| format!("h/1/{i}")).collect();
            assert_eq!(
                ids,
                want.iter().map(String::as_str).collect::<Vec<_>>(),
                "nothing lost, nothing twice"
            );
            assert_eq!(d.tally.sent_rows, 10);
            assert_eq!(d.waiting(), (0, 0));
            assert!(d.last_error.is_none());
        }
        // A lost reply: asked, found, not sent again.
        let (f, d) = run(&[StoredReplyLost], 1);
        assert_eq!((f.inserts, f.questions, d.tally.found_stored), (1, 1, 1));
        // A refusal: sent again without asking.
        let (f, _) = run(&[Refused], 1);
        assert_eq!((f.inserts, f.questions), (2, 0));
    }

    /// A batch the server refuses as broken is set aside at once, counted, and the batches
    /// behind it are sent: one bad spool file does not stop delivery.
    #[test]
    fn a_malformed_batch_is_set_aside_and_the_rest_flow_on() {
        let (f, mut d) = run(&[Step::Timeout, Step::Malformed], 3);
        let ids: Vec<&str> = f.rows.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(ids, ["h/1/1", "h/1/2"]);
        assert_eq!((d.tally.sent_rows, d.tally.dropped_rows, d.tally.rejected_rows), (4, 2, 2));
        assert_eq!(d.take_rejected(), [("h/1/0".to_string(), "inflate failed".to_string())]);
        assert!(d.take_done().iter().all(|id| id != "h/1/0"), "its file is kept aside");
        assert!(d.last_error.is_none());
    }

    #[test]
    fn retries_back_off_with_jitter_and_report_only_the_changes() {
        let mut f = Fake { script: [Step::Refused; 10].into_iter().collect(), ..Fake::default() };
        let mut d = Delivery::new(
            1 << 20,
            Backoff { min: Duration::from_secs(1), max: Duration::from_secs(8) },
            3,
        );
        d.offer(batch(0));
        let t0 = Instant::now();
        assert!(d.step(t0, &mut f), "started failing");
        let mut last = t0;
        let mut gaps = Vec::new();
        for _ in 0..6 {
            let next = d.next_try().unwrap();
            assert!(!d.step(next - Duration::from_millis(1), &mut f), "not yet");
            assert!(!d.step(next, &mut f), "still failing: nothing to log");
            gaps.push(next - last);
            last = next;
        }
        // 1, 2, 4, 8, 8, 8 s, each plus up to a quarter.
        for (g, base) in gaps.iter().zip([1, 2, 4, 8, 8, 8]) {
            let base = Duration::from_secs(base);
            assert!(*g >= base && *g <= base + base / 4, "{g:?} for {base:?}");
        }
        f.script.clear();
        assert!(d.step(d.next_try().unwrap(), &mut f), "recovered");
        assert_eq!(d.tally.failures, 7);
    }

    #[test]
    fn the_queue_is_bounded_and_drops_the_oldest_counted() {
        let mut f = Fake { script: [Step::Refused; 3].into_iter().collect(), ..Fake::default() };
        let mut d = Delivery::new(350, Backoff::default(), 1);
        for i in 0..5 {
            d.offer(batch(i));
        }
        assert_eq!(d.waiting(), (6, 300), "three batches of 100 bytes fit in 350");
        assert_eq!(d.tally.dropped_rows, 4);
        let mut now = Instant::now();
        for _ in 0..10 {
            d.step(now, &mut f);
            now += Duration::from_secs(60);
        }
        let ids: Vec<&str> = f.rows.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(ids, ["h/1/2", "h/1/3", "h/1/4"], "the newest, in order");
    }

    /// Batches keep coming while one is out with the sender: the bound drops older waiting
    /// batches, never the one in flight, and its answer is taken for it.
    #[test]
    fn the_batch_being_sent_is_kept_while_the_queue_takes_more() {
        let mut f = Fake::default();
        let mut d = Delivery::new(250, Backoff::default(), 1);
        d.offer(batch(0));
        let a = d.begin(Instant::now()).unwrap();
        assert_eq!(a.batch.id, "h/1/0");
        assert!(d.begin(Instant::now()).is_none(), "one attempt at a time");
        for i in 1..5 {
            d.offer(batch(i));
        }
        assert_eq!(d.waiting(), (4, 200), "the one out and the newest");
        assert_eq!(d.tally.dropped_rows, 6, "batches 1 to 3");
        // Its reply was lost after it was stored; asked again, it is found.
        assert!(d.end(Instant::now(), Err(Failure::Uncertain("reset".into())), Duration::ZERO));
        f.rows.push(("h/1/0".into(), 2));
        let again = d.begin(Instant::now() + Duration::from_secs(60)).unwrap();
        assert!(again.uncertain && again.batch.id == "h/1/0");
        let r = attempt(&mut f, &again);
        assert_eq!(r, Ok(true), "found stored");
        assert!(d.end(Instant::now(), r, Duration::ZERO), "recovered");
        d.step(Instant::now(), &mut f);
        let ids: Vec<&str> = f.rows.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(ids, ["h/1/0", "h/1/4"]);
        assert_eq!((f.inserts, d.tally.found_stored, d.tally.sent_rows), (1, 1, 4));
        let mut done = d.take_done();
        done.sort();
        assert_eq!(done, ["h/1/0", "h/1/1", "h/1/2", "h/1/3", "h/1/4"], "each spool file goes");
    }
}
