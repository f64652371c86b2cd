//! The fleet sink (`--clickhouse`): flow records into a ClickHouse table, exactly once.
//!
//! A stage beside the writer, on threads of its own ([`spawn`]): the writer hands it
//! each record it serialised, without waiting (a full hand-off drops and counts them, so
//! sampling never waits for the server). One thread cuts rows into batches, compresses
//! each once (gzip by the writer's encoder, unless `--clickhouse-compress=false`:
//! ClickHouse takes `Content-Encoding: gzip`, and the wire, the queue and the spool carry
//! far fewer bytes for a little more CPU: benches/RESULTS.md, "sink"), and keeps them in a
//! bounded queue
//! (and, with `--spool-dir`, on disk); another delivers them in order. Its parts, each
//! testable without a network:
//! - [`row`]: a record as a `JSONEachRow` row: the record as the writer serialises it,
//!   plus the flat columns a fleet queries (on ClickHouse 18.16, which skips nested
//!   objects, the diagnosis would otherwise be lost);
//! - [`ddl`]: the `CREATE TABLE` a server of a given version takes;
//! - [`batch`]: rows cut into batches by count, bytes and age, each with its `BatchId`;
//! - [`pressure`]: the batch interval stretched while the server has too many parts;
//! - [`delivery`]: a bounded queue of batches, retried with backoff and jitter, where a
//!   batch whose insert's reply was lost is looked up by its id before it is sent again,
//!   so that a retry never stores it twice.
//!
//! - [`client`]: the server over HTTP, the table's set-up at first contact;
//! - [`target`]: `--clickhouse`'s URL: server, database, table and credentials;
//! - [`spool`]: batches on disk across restarts;
//! - [`filling`]: the batch being filled, on disk as its rows come;
//! - [`handoff`]: the writer's end, a consumer of its batches.
//!
//! The facts it relies on are in docs/clickhouse.md.

pub mod batch;
pub mod client;
pub mod ddl;
pub mod delivery;
pub mod filling;
pub mod handoff;
pub mod pressure;
pub mod row;
pub mod spool;
pub mod target;

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::locks::Locked;
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
    /// `--clickhouse-timeout`: one request's longest.
    pub timeout: Duration,
    /// What the flags' checks found worth a warning (a password file every user can
    /// read), logged when the sink starts.
    pub warnings: Vec<String>,
}

/// How the sink ended.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// Records were dropped (a full queue, or not delivered nor spooled by the end).
    #[error("{0} records were not delivered to ClickHouse and are lost")]
    Dropped(u64),
}

/// Runs the sink on its own threads until the writer's side of the channel closes; then
/// delivers what it can within `patience` and leaves the rest in the spool (or counts it
/// dropped, without one).
///
/// Two threads, so that the server never holds up the hand-off: `cgmon-sink` takes the
/// writer's records, cuts and compresses batches, spools them and queues them;
/// `cgmon-sink-send` sends the oldest queued batch. A server that hangs (stopped, or
/// behind a black-holed route) blocks only the sender, while the queue keeps taking
/// batches up to its bound (dropping the oldest, counted), so memory stays within the
/// hand-off, one batch being filled, the queue's bound and the one batch out
/// (measured: benches/sink.rs, "server stopped").
///
/// # Errors
/// A thread cannot be started, or the spool directory cannot be opened.
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
    for w in &cfg.warnings {
        tracing::warn!(target: "cgmon_rs::sink", "{w}");
    }
    metrics.sink.enabled.set(1);
    metrics.sink.batch_interval_ns.set(cfg.limits.age.as_nanos() as u64);
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut state = State {
        delivery: delivery::Delivery::new(cfg.spool_max as usize, cfg.backoff, run),
        spool: None,
        metrics,
        dropped_before: 0,
        full_before: 0,
        spool_error: None,
        respooled: Instant::now(),
        closing: None,
    };
    let mut filling = None;
    if let Some((mut sp, old)) = spool {
        let (f, left) = filling::Filling::open(sp.dir())?;
        let recovered = recover_filled(&mut sp, &left, cfg.compress);
        if !old.is_empty() || !recovered.is_empty() {
            tracing::info!(target: "cgmon_rs::sink", batches = old.len() + recovered.len(),
                "batches an earlier run spooled: sent first, each looked up before it is sent");
        }
        for (b, size) in old.into_iter().chain(recovered) {
            state.delivery.offer_spooled(b, size, true);
        }
        state.spool = Some(sp);
        filling = Some(f);
    }
    let shared = Arc::new(Shared { state: Mutex::new(state), wake: Condvar::new() });
    let store = client::Client::new(cfg.target.clone(), cfg.timeout);
    let to_send = Arc::clone(&shared);
    // Both threads' work is pushed at us (records to send): out of the CPU budget's upkeep.
    let m = Arc::clone(&shared.lock().metrics);
    let sender = std::thread::Builder::new().name("cgmon-sink-send".into()).spawn(move || {
        let _pushed = m.budget.pushed_thread();
        send_loop(&to_send, store);
    })?;
    let m = Arc::clone(&shared.lock().metrics);
    std::thread::Builder::new().name("cgmon-sink".into()).spawn(move || {
        let _pushed = m.budget.pushed_thread();
        let mut intake = Intake {
            batcher: batch::Batcher::new(cfg.limits, &cfg.host, run),
            shared,
            host: cfg.host,
            compress: cfg.compress,
            filling,
            fill_error: false,
            stretch: pressure::Stretch::new(cfg.limits.age),
        };
        intake.run(&rx);
        intake.finish(sender, patience)
    })
}

/// What both threads share: the queue, the spool, the counters.
struct Shared {
    state: Mutex<State>,
    /// Rung when a batch is queued or the end begins.
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic on one thread leaves a queue that is still whole: go on with it.
        self.state.locked()
    }
}

struct State {
    delivery: delivery::Delivery,
    spool: Option<spool::Spool>,
    metrics: Arc<Metrics>,
    /// Rows counted dropped by the queue so far (its tally is cumulative).
    dropped_before: u64,
    /// Rows dropped past the bound so far, likewise.
    full_before: u64,
    /// Why the last batch could not be spooled, while batches wait in memory only.
    spool_error: Option<String>,
    /// When spooling the batches that wait in memory only was last tried.
    respooled: Instant,
    /// Set at the end: the sender stops once nothing is due before this.
    closing: Option<Instant>,
}

/// The intake thread's own parts.
struct Intake {
    batcher: batch::Batcher,
    shared: Arc<Shared>,
    host: String,
    compress: bool,
    /// With `--spool-dir`: the batch being filled, on disk as its rows come.
    filling: Option<filling::Filling>,
    /// Writing it failed, and has not worked since (logged once).
    fill_error: bool,
    /// The batch interval in force (stretched under part pressure).
    stretch: pressure::Stretch,
}

/// The batches `.filling` files an earlier run left make ([`filling`]), spooled whole:
/// their heads and body sizes, to be sent first as uncertain. A file whose batch is
/// already spooled, or holds no row, is deleted; one that is not ours is set aside; one
/// the disk cannot take as a batch now stays for the next start.
fn recover_filled(
    sp: &mut spool::Spool,
    left: &[PathBuf],
    compress: bool,
) -> Vec<(batch::Batch, usize)> {
    let mut out = Vec::new();
    for p in left {
        match filling::read_left(p) {
            Ok(Some(mut b)) if sp.path_of(&b.id).is_none() => {
                let count = b.count;
                if compress {
                    b.rows = gzip(&b.rows);
                }
                match sp.save(&b) {
                    Ok(()) => {
                        tracing::info!(target: "cgmon_rs::sink", batch = %b.id, records = count,
                            "the batch an earlier run was filling when it stopped is spooled");
                        out.push((b.head(count), b.rows.len()));
                    }
                    Err(e) => {
                        tracing::error!(target: "cgmon_rs::sink", file = %p.display(), error = %e,
                            "cannot spool the batch an earlier run was filling; its file stays \
                             for the next start");
                        continue;
                    }
                }
            }
            Ok(_) => {}
            Err(why) => {
                spool::set_aside(p, &why.to_string());
                continue;
            }
        }
        let _ = std::fs::remove_file(p);
    }
    out
}

/// How long past its patience the end waits for an attempt that is out.
const SENDER_GRACE: Duration = Duration::from_secs(1);

/// How often the intake wakes when idle, to cut aged batches.
const TICK: Duration = Duration::from_millis(100);

/// How often batches that could not be spooled (a full or read-only disk) are tried again.
const RESPOOL: Duration = Duration::from_secs(1);

impl Intake {
    fn run(&mut self, rx: &Receiver<SinkMsg>) {
        loop {
            let wake = self
                .batcher
                .deadline()
                .map_or(TICK, |t| t.saturating_duration_since(Instant::now()).min(TICK));
            match rx.recv_timeout(wake) {
                Ok(msg) => self.take(msg),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if let Some(b) = self.batcher.due(Instant::now()) {
                self.enqueue(b);
            }
            // Batches a full disk kept in memory are spooled once it takes them.
            let mut st = self.shared.lock();
            let (t, before) = (st.delivery.tally, self.stretch.interval());
            if let Some(d) = self.stretch.observe(Instant::now(), t.part_pressure, t.sent_batches) {
                self.batcher.set_age(d);
                st.metrics.sink.batch_interval_ns.set(d.as_nanos() as u64);
                if d > before {
                    tracing::warn!(target: "cgmon_rs::sink", interval = ?d,
                        "ClickHouse has too many parts: this host's batches are cut less often");
                } else {
                    tracing::info!(target: "cgmon_rs::sink", interval = ?d,
                        "ClickHouse's parts are back within bounds: the batch interval shortens");
                }
            }
            if st.spool.is_some()
                && st.respooled.elapsed() >= RESPOOL
                && st.delivery.waiting_in_memory() > 0
            {
                st.respool();
                st.publish();
            }
        }
    }

    fn take(&mut self, msg: SinkMsg) {
        let now = Instant::now();
        for (json, r) in msg {
            // The rows' EndTime range scopes the lookup after a lost reply (client.rs).
            if let Ok(t) = chrono::DateTime::parse_from_rfc3339(&r.end_time) {
                self.batcher.note_end(t.timestamp());
            }
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
        self.fill();
    }

    /// Puts the rows of the batch being filled that are not on disk yet in its file.
    fn fill(&mut self) {
        let (Some(f), Some((id, rows))) = (self.filling.as_mut(), self.batcher.filling()) else {
            return;
        };
        match f.fill(&id, rows) {
            Ok(()) if self.fill_error => {
                self.fill_error = false;
                tracing::warn!(target: "cgmon_rs::sink",
                    "the batch being filled reaches the spool again");
            }
            Ok(()) => {}
            Err(e) => {
                if !self.fill_error {
                    tracing::error!(target: "cgmon_rs::sink", error = %e,
                        "cannot write the batch being filled to the spool; until it is cut, a \
                         kill loses its records");
                }
                self.fill_error = true;
            }
        }
    }

    /// Compresses a batch once (outside the lock), spools it, and queues it.
    fn enqueue(&mut self, mut b: batch::Batch) {
        if self.compress {
            b.rows = gzip(&b.rows);
        }
        let mut st = self.shared.lock();
        let spooled = st.save(&b);
        if spooled {
            let size = b.rows.len();
            st.delivery.offer_spooled(b, size, false);
        } else {
            st.delivery.offer(b);
        }
        st.publish();
        drop(st);
        self.shared.wake.notify_one();
        // Spooled whole (or waiting in memory, where the disk refused it): its rows' file
        // goes.
        if let Some(f) = self.filling.as_mut() {
            f.done();
        }
    }

    /// At the end: the last batch, then `patience` for the sender; what is left stays in
    /// the spool (delivered by the next run), or is dropped without one.
    fn finish(
        mut self,
        sender: std::thread::JoinHandle<()>,
        patience: Duration,
    ) -> Result<(), SinkError> {
        if let Some(b) = self.batcher.flush() {
            self.enqueue(b);
        }
        let deadline = Instant::now() + patience;
        self.shared.lock().closing = Some(deadline);
        self.shared.wake.notify_one();
        // An attempt still out at the deadline (a server that hangs) is not waited for:
        // its batch still counts as waiting, so it stays in the spool, where the next run
        // looks it up before sending it (a spooled batch is uncertain).
        while !sender.is_finished() && Instant::now() < deadline + SENDER_GRACE {
            std::thread::sleep(Duration::from_millis(10));
        }
        if !sender.is_finished() {
            tracing::warn!(target: "cgmon_rs::sink",
                "a request to ClickHouse is still out at the stop; its batch counts as waiting");
        } else if sender.join().is_err() {
            tracing::error!(target: "cgmon_rs::sink", "the sink's sending thread panicked");
        }
        let mut st = self.shared.lock();
        // Batches that could not be spooled get a last try (the disk may have room by
        // now); what is still only in memory is lost, and said so.
        st.respool();
        let (rows, _) = st.delivery.waiting();
        let in_memory = st.delivery.waiting_in_memory();
        if st.spool.is_none() {
            st.metrics.sink.dropped.add(rows as u64);
        } else {
            if rows > in_memory {
                tracing::warn!(target: "cgmon_rs::sink", records = rows - in_memory,
                    "records not delivered by the stop stay in the spool for the next run");
            }
            if in_memory > 0 {
                tracing::error!(target: "cgmon_rs::sink", records = in_memory,
                    error = st.spool_error.as_deref().unwrap_or(""),
                    "records neither delivered nor spooled by the stop are lost");
                st.metrics.sink.dropped.add(in_memory as u64);
            }
        }
        let dropped = st.metrics.sink.dropped.get();
        if dropped > 0 { Err(SinkError::Dropped(dropped)) } else { Ok(()) }
    }
}

/// The sending thread: the oldest batch when it is due, sent without holding the queue;
/// until the end's deadline, or until nothing waits once the end has begun.
fn send_loop(shared: &Shared, mut store: client::Client) {
    loop {
        let a = {
            let mut st = shared.lock();
            loop {
                let now = Instant::now();
                let next = st.delivery.next_try();
                if let Some(deadline) = st.closing
                    && next.is_none_or(|t| t >= deadline)
                {
                    return;
                }
                if let Some(a) = st.delivery.begin(now) {
                    break a;
                }
                let wait = next.map_or(TICK, |t| t.saturating_duration_since(now).min(TICK));
                st = shared
                    .wake
                    .wait_timeout(st, wait)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
            }
        };
        let Some(a) = read_back(shared, a) else { continue };
        let t = Instant::now();
        let r = delivery::attempt(&mut store, &a);
        let mut st = shared.lock();
        if st.delivery.end(Instant::now(), r, t.elapsed()) {
            match &st.delivery.last_error {
                Some(e) => tracing::error!(target: "cgmon_rs::sink", error = %e,
                    "ClickHouse sink failing; records wait and are retried"),
                None => {
                    tracing::warn!(target: "cgmon_rs::sink", "ClickHouse sink delivering again")
                }
            }
        }
        st.publish();
    }
}

/// The attempt with its body: a spooled batch's read back from its file (outside the lock),
/// its rows counted by what the body holds. `None` when the file is gone (the batch is
/// dropped and counted) or broken (set aside and counted): either way the next goes on.
fn read_back(shared: &Shared, a: delivery::Attempt) -> Option<delivery::Attempt> {
    if !a.on_disk {
        return Some(a);
    }
    let path = shared.lock().spool.as_ref().and_then(|sp| sp.path_of(&a.batch.id));
    let Some(path) = path else {
        gone(shared, &a, "its spool file is not known");
        return None;
    };
    if std::fs::symlink_metadata(&path).is_err() {
        gone(shared, &a, "its spool file is gone");
        return None;
    }
    let read = spool::read(&path).and_then(|b| spool::rows_in(&b.rows).map(|n| (b, n)));
    match read {
        Ok((b, n)) => {
            if n != b.count {
                tracing::warn!(target: "cgmon_rs::sink", batch = %a.batch.id, head = b.count,
                    rows = n, file = %path.display(),
                    "a spooled batch holds other than its head says; counted by what it holds");
                shared.lock().delivery.recount(n);
            }
            let b = batch::Batch { count: n, ..b };
            Some(delivery::Attempt { batch: Arc::new(b), ..a })
        }
        Err(why) => {
            let mut st = shared.lock();
            st.delivery.reject(&why.to_string());
            st.publish();
            None
        }
    }
}

/// The spooled batch of `a` cannot be found: its records are lost, counted.
fn gone(shared: &Shared, a: &delivery::Attempt, why: &str) {
    tracing::error!(target: "cgmon_rs::sink", batch = %a.batch.id, records = a.batch.count,
        reason = why, "a spooled batch cannot be read back; its records are lost");
    let mut st = shared.lock();
    st.delivery.lost();
    st.publish();
}

impl State {
    /// Spools `b`: true when it is on disk. A failure is logged once while it lasts; the
    /// batch then waits in memory, and [`respool`](Self::respool) tries again.
    fn save(&mut self, b: &batch::Batch) -> bool {
        let Some(sp) = &mut self.spool else { return false };
        match sp.save(b) {
            Ok(()) => true,
            Err(e) => {
                if self.spool_error.is_none() {
                    tracing::error!(target: "cgmon_rs::sink", error = %e,
                        "cannot spool batches; they wait in memory only, and are spooled \
                         when the disk takes them again");
                }
                self.spool_error = Some(e.to_string());
                self.respooled = Instant::now();
                false
            }
        }
    }

    /// Spools the batches that wait in memory only, oldest first, until one fails.
    fn respool(&mut self) {
        let Some(sp) = &mut self.spool else { return };
        self.respooled = Instant::now();
        for b in self.delivery.unspooled() {
            if let Err(e) = sp.save(&b) {
                self.spool_error = Some(e.to_string());
                return;
            }
            self.delivery.mark_spooled(&b.id);
        }
        if self.spool_error.take().is_some() {
            tracing::warn!(target: "cgmon_rs::sink",
                "spooling again: the batches that waited in memory are on disk");
        }
    }

    /// Spool files of batches gone, and the metrics.
    fn publish(&mut self) {
        for id in self.delivery.take_done() {
            if let Some(sp) = &mut self.spool {
                sp.remove(&id);
            }
        }
        for (id, why) in self.delivery.take_rejected() {
            tracing::error!(target: "cgmon_rs::sink", batch = %id, reason = %why,
                "a batch that cannot be sent is set aside (SEQ.rejected in the spool); its \
                 records are lost to ClickHouse, the batches behind it go on");
            if let Some(sp) = &mut self.spool {
                sp.reject(&id, &why);
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
        m.part_pressure.mirror(t.part_pressure);
        if t.dropped_rows > self.dropped_before {
            m.dropped.add(t.dropped_rows - self.dropped_before);
            if t.full_rows > self.full_before {
                tracing::warn!(target: "cgmon_rs::sink", dropped = t.full_rows,
                    "ClickHouse queue full (--spool-max): oldest records dropped");
            }
            self.dropped_before = t.dropped_rows;
            self.full_before = t.full_rows;
        }
        let (rows, bytes) = self.delivery.waiting();
        m.waiting_records.set(rows as u64);
        m.waiting_bytes.set(bytes as u64);
        m.spooled_batches.set(self.spool.as_ref().map_or(0, |s| s.len() as u64));
        m.failing.set(u64::from(self.delivery.last_error.is_some()));
        *m.last_error.locked() = self.delivery.last_error.clone();
    }
}

/// `rows` as one gzip member, by the encoder for record streams (its level 1,
/// `gzip`): rows are the writer's records with a few fields more, and it is the
/// cheapest of the encoders on them (benches/RESULTS.md, D25).
fn gzip(rows: &[u8]) -> Vec<u8> {
    let mut gz =
        crate::gzip::Gzip::new(Vec::with_capacity(rows.len() / 8), crate::gzip::FAST_LEVEL);
    // Into memory: neither can fail.
    gz.write_all(rows).expect("writing to memory");
    gz.finish().expect("writing to memory")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_of_thousands_of_rows_gunzips_to_itself() {
        use std::io::Read;
        let rows: Vec<u8> = (0..5_000)
            .flat_map(|i| {
                format!(
                    "{{\"Host\":\"h{}\",\"Cookie\":{i},\"RTTSummary\":[0.{i},1,2],\"BatchId\":\"b\"}}\n",
                    i % 7
                )
                .into_bytes()
            })
            .collect();
        let gz = gzip(&rows);
        assert!(gz.len() * 4 < rows.len(), "{} of {} bytes", gz.len(), rows.len());
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut back).unwrap();
        assert_eq!(back, rows);
    }
    use crate::analysis::{AnalyzerConfig, analyze};
    use crate::tracker::testing::ended_flow;
    use crate::wire::build::SockBuilder;

    fn msg(from: u64, n: u64) -> SinkMsg {
        (from..from + n)
            .map(|i| {
                let s = SockBuilder::new(i + 1, 5000 + (i % 60000) as u16, 80);
                let mut e = ended_flow(&[
                    (1_000_000_000, s.clone().rtt_us(10_000).bytes_acked(1000)),
                    (2_000_000_000, s.rtt_us(12_000).bytes_acked(90_000 + i)),
                ]);
                let r = analyze(&mut e, &AnalyzerConfig::default());
                (serde_json::to_vec(&r).unwrap(), r)
            })
            .collect()
    }

    /// Spooled batches wait on disk: when one's file is gone by its turn (deleted by hand),
    /// its records are counted dropped, not sent empty, and the others still go.
    #[test]
    fn a_spooled_batch_whose_file_is_gone_is_counted_dropped() {
        let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", dead.local_addr().unwrap());
        drop(dead);
        let dir = tempfile::tempdir().unwrap();
        let metrics = Arc::new(Metrics::default());
        let cfg = SinkConfig {
            target: client::Target::parse(&url, "flows").unwrap(),
            host: "h".into(),
            limits: batch::Limits { rows: 10, bytes: 1 << 20, age: Duration::from_secs(1) },
            spool_dir: Some(dir.path().to_path_buf()),
            spool_max: 1 << 20,
            backoff: delivery::Backoff {
                min: Duration::from_millis(50),
                max: Duration::from_millis(50),
            },
            compress: true,
            timeout: Duration::from_secs(30),
            warnings: Vec::new(),
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(4);
        let sink = spawn(cfg, rx, Arc::clone(&metrics), Duration::from_millis(300)).unwrap();
        tx.send(msg(0, 30)).unwrap();
        let end = Instant::now() + Duration::from_secs(10);
        // Queued (the gauge is set after the third batch's file is renamed into place).
        while metrics.sink.waiting_records.get() < 30 {
            assert!(Instant::now() < end, "three batches spooled");
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut files: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "batch"))
            .collect();
        assert_eq!(files.len(), 3);
        files.sort();
        std::fs::remove_file(&files[0]).unwrap();
        // The others still wait (the two figures are published one after the other).
        while metrics.sink.dropped.get() == 0 || metrics.sink.waiting_records.get() != 20 {
            assert!(Instant::now() < end, "the missing batch is counted");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(metrics.sink.dropped.get(), 10);
        drop(tx);
        // The rest stay spooled for the next run: only the lost batch counts.
        assert!(matches!(sink.join().unwrap(), Err(SinkError::Dropped(10))));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    /// A server that takes connections and never answers (stopped, or black-holed) holds up
    /// only the sending thread: the hand-off keeps draining, batches keep queueing up to
    /// the bound, and the end leaves within its patience, counting what it could not send.
    #[test]
    fn a_server_that_never_answers_does_not_hold_up_the_hand_off() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", silent.local_addr().unwrap());
        let held = std::thread::spawn(move || {
            // Accepted and kept open, never read nor answered.
            let mut kept = Vec::new();
            while let Ok((c, _)) = silent.accept() {
                kept.push(c);
                if kept.len() == 4 {
                    std::thread::sleep(Duration::from_secs(60));
                }
            }
        });
        let metrics = Arc::new(Metrics::default());
        let cfg = SinkConfig {
            target: client::Target::parse(&url, "flows").unwrap(),
            host: "h".into(),
            limits: batch::Limits { rows: 10, bytes: 1 << 20, age: Duration::from_secs(1) },
            spool_dir: None,
            spool_max: 8 << 10,
            backoff: delivery::Backoff::default(),
            compress: true,
            timeout: Duration::from_secs(30),
            warnings: Vec::new(),
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(2);
        let sink = spawn(cfg, rx, Arc::clone(&metrics), Duration::from_millis(200)).unwrap();
        // Far more than the hand-off's two messages: every send must find room.
        for k in 0..40 {
            tx.send(msg(k * 10, 10)).unwrap();
        }
        let end = Instant::now() + Duration::from_secs(10);
        while metrics.sink.waiting_records.get() + metrics.sink.dropped.get() < 400 {
            assert!(Instant::now() < end, "the intake stalled behind the silent server");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(metrics.sink.sent.get(), 0);
        assert!(metrics.sink.waiting_bytes.get() <= 8 << 10, "within --spool-max");
        assert!(metrics.sink.dropped.get() > 0, "the oldest dropped past the bound");
        drop(tx);
        let t = Instant::now();
        let r = sink.join().unwrap();
        // The attempt still out is not waited for beyond the patience and its grace.
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert!(matches!(r, Err(SinkError::Dropped(400))), "{r:?}");
        drop(held);
    }
}
