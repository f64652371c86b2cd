//! The stage's schedule, back-off and backpressure, on a scripted source in paused tokio
//! time: no kernel, and no real waiting.

use tokio::sync::mpsc;

use super::*;
use crate::sampler::fakes::{ReplaySource, ScriptSource};
use crate::sampler::{DumpMode, SamplerConfig};
use crate::tracker::{EndReason, TrackerConfig};
use crate::wire::build::SockBuilder;

/// Answers each request after `delay`, with one socket whose cookie is the dump number
/// (so the previous dump's flow ends each time), or with an error for dumps `fail` picks.
fn scripted(delay: Duration, fail: fn(u32) -> bool) -> ScriptSource {
    ScriptSource::new(move |n| {
        if fail(n) {
            vec![ScriptSource::error(libc::EBUSY)]
        } else {
            vec![SockBuilder::new(u64::from(n), 5000, 80).build()]
        }
    })
    .delay(delay)
}

/// Destroy events at set times after the start: the connection `cookie` closing at each.
fn closes(at: impl IntoIterator<Item = (Duration, u64)>) -> ReplaySource {
    at.into_iter().fold(ReplaySource::default().then_silent(), |r, (t, cookie)| {
        r.at(t, SockBuilder::new(cookie, 40000, 443).state(7).build()) // CLOSE
    })
}

type Stage = tokio::task::JoinHandle<Result<TrackerStats, StageError>>;

fn start(
    src: ScriptSource,
    cfg: TaskConfig,
    capacity: usize,
) -> (Stage, watch::Sender<bool>, mpsc::Receiver<Vec<EndedFlow>>, Arc<Metrics>) {
    start_with(src, None, cfg, capacity)
}

fn start_with(
    src: ScriptSource,
    closes: Option<ReplaySource>,
    cfg: TaskConfig,
    capacity: usize,
) -> (Stage, watch::Sender<bool>, mpsc::Receiver<Vec<EndedFlow>>, Arc<Metrics>) {
    let scfg = SamplerConfig { mode: DumpMode::SingleWalk, ..SamplerConfig::default() };
    let sampler = Sampler::new(src, scfg).unwrap();
    let (stop_tx, stop_rx) = watch::channel(false);
    let (tx, rx) = mpsc::channel(capacity);
    let m = Arc::new(Metrics::default());
    let t = Tracker::new(TrackerConfig::default());
    let h = tokio::spawn(run(
        t,
        sampler,
        closes.map(|c| DestroyListener::new(c, None)),
        cfg,
        Wiring::new(stop_rx, tx, m.clone()),
        |_| {},
    ));
    (h, stop_tx, rx, m)
}

#[tokio::test(start_paused = true)]
async fn an_overrunning_dump_skips_missed_ticks_and_is_counted() {
    // Dumps take 50 ms against a 20 ms interval: the ticks at 20 and 40 ms are skipped and
    // the next dump starts on the grid at 60 ms. Back-to-back catch-up would give 20 dumps
    // in 1 s.
    let cfg = TaskConfig::every(Duration::from_millis(20));
    let (h, stop, _rx, m) = start(scripted(Duration::from_millis(50), |_| false), cfg, 256);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.send(true).unwrap();
    h.await.unwrap().unwrap();
    let dumps = m.dumps.get();
    assert!((15..=17).contains(&dumps), "{dumps} dumps");
    assert_eq!(m.ticks_overrun.get(), dumps);
}

#[tokio::test(start_paused = true)]
async fn the_first_dump_runs_at_once() {
    let cfg = TaskConfig::every(Duration::from_secs(10));
    let (h, stop, _rx, m) = start(scripted(Duration::ZERO, |_| false), cfg, 256);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(m.dumps.get(), 1);
    stop.send(true).unwrap();
    h.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn failures_back_off_exponentially_then_give_up() {
    let cfg = TaskConfig {
        interval: Duration::from_millis(10),
        error_delay: Duration::from_millis(100),
        max_errors: 4,
        cpu_budget: 0.0,
        max_full_interval: None,
        whole_process: false,
        upkeep_cap: 0.0,
    };
    let t0 = tokio::time::Instant::now();
    let (h, _stop, _rx, m) = start(scripted(Duration::ZERO, |_| true), cfg, 256);
    let r = h.await.unwrap();
    // Failures at 0, 100, 300 and 700 ms: delays of 100, 200 and 400 ms.
    let took = t0.elapsed();
    assert!(matches!(r, Err(StageError::TooManyErrors { count: 4, .. })), "{r:?}");
    assert!(took >= Duration::from_millis(700) && took < Duration::from_millis(760), "{took:?}");
    assert_eq!(m.dump_errors.get(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_success_resets_the_error_count() {
    let cfg = TaskConfig {
        interval: Duration::from_millis(10),
        error_delay: Duration::from_millis(10),
        max_errors: 3,
        cpu_budget: 0.0,
        max_full_interval: None,
        whole_process: false,
        upkeep_cap: 0.0,
    };
    // Every other dump fails: never 3 in a row.
    let (h, stop, _rx, m) = start(scripted(Duration::ZERO, |n| n % 2 == 0), cfg, 256);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.send(true).unwrap();
    h.await.unwrap().unwrap();
    assert!(m.dump_errors.get() >= 10);
}

#[tokio::test(start_paused = true)]
async fn a_stalled_analyzer_never_stops_sampling_and_drops_are_counted() {
    // Each dump ends the previous dump's flow. Nobody reads the channel (capacity 2).
    let cfg = TaskConfig::every(Duration::from_millis(10));
    let (h, stop, rx, m) = start(scripted(Duration::ZERO, |_| false), cfg, 2);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let dumps = m.dumps.get();
    assert!(dumps >= 99, "sampling went on: {dumps} dumps");
    // Dump 1 opens a flow; dumps 2.. each end one: 2 fit, the rest are counted.
    assert_eq!(m.records_dropped.get(), dumps - 1 - 2);
    stop.send(true).unwrap();
    drop(rx);
    // The final hand-off finds the analyzer gone.
    assert!(matches!(h.await.unwrap(), Err(StageError::DownstreamGone)));
}

#[tokio::test(start_paused = true)]
async fn flows_that_destroy_events_end_go_on_with_the_next_dump_in_one_batch() {
    // Twenty connections close 2 ms apart between the dumps at 100 and 200 ms. Handed on
    // an event at a time they took twenty of the channel's batches, and a channel that
    // counts batches filled twenty times faster than one per dump.
    let cfg = TaskConfig::every(Duration::from_millis(100));
    let at = (0..20).map(|i| (Duration::from_millis(110 + 2 * i), 1000 + i));
    let (h, stop, mut rx, _m) =
        start_with(scripted(Duration::ZERO, |_| false), Some(closes(at)), cfg, 256);
    tokio::time::sleep(Duration::from_millis(250)).await;
    stop.send(true).unwrap();
    h.await.unwrap().unwrap();
    let mut batches = Vec::new();
    while let Ok(b) = rx.try_recv() {
        let mut cookies: Vec<u64> = b.iter().map(|e| e.flow.key.cookie).collect();
        cookies.sort_unstable();
        batches.push(cookies);
    }
    // Dump 2 (100 ms) ends dump 1's flow; dump 3 (200 ms) ends dump 2's, with the twenty
    // closes; the shutdown ends dump 3's.
    let mut want = vec![2];
    want.extend(1000..1020);
    assert_eq!(batches, [vec![1], want, vec![3]]);
}

#[tokio::test(start_paused = true)]
async fn a_close_queued_when_the_stop_comes_ends_its_flow_as_destroyed() {
    // The connection closes at 150 ms and the stop comes at 160 ms, before the task has read
    // the event (the next dump, which would drain it, is at 200 ms).
    let cfg = TaskConfig::every(Duration::from_millis(100));
    let closes = closes([(Duration::from_millis(150), 1000)]).only_when_polled();
    let (h, stop, mut rx, m) =
        start_with(scripted(Duration::ZERO, |_| false), Some(closes), cfg, 256);
    tokio::time::sleep(Duration::from_millis(160)).await;
    stop.send(true).unwrap();
    h.await.unwrap().unwrap();
    let mut last = Vec::new();
    while let Ok(b) = rx.try_recv() {
        last = b;
    }
    let closed = last.iter().find(|e| e.flow.key.cookie == 1000).expect("the closed flow");
    assert_eq!(closed.reason, EndReason::Destroyed);
    assert_eq!(m.destroy_events.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn every_close_queued_when_the_stop_comes_is_read_not_one_batch() {
    // Three batches' worth of closes queued, unread, when the stop comes. The stop read one
    // batch (1,024 events) and left the rest: a monitor that was behind under churn (a
    // loaded machine) lost up to 14 % of its connections' records at the stop, exit 0.
    let cfg = TaskConfig::every(Duration::from_millis(100));
    let n = 3 * crate::sampler::destroy::MAX_DATAGRAMS_PER_BATCH as u64 + 5;
    let at = (0..n).map(|i| (Duration::from_millis(150), 1000 + i));
    let closes = closes(at).only_when_polled();
    let (h, stop, _rx, m) = start_with(scripted(Duration::ZERO, |_| false), Some(closes), cfg, 256);
    tokio::time::sleep(Duration::from_millis(160)).await;
    stop.send(true).unwrap();
    h.await.unwrap().unwrap();
    assert_eq!(m.destroy_events.get(), n);
}

#[path = "tiers_tests.rs"]
mod tiers_tests;

#[tokio::test(start_paused = true)]
async fn under_steady_churn_events_are_taken_at_each_rests_end_without_waiting_for_them() {
    // A close every millisecond from 110 to 409 ms, dumps a second apart. The first close
    // is waited for; each 50 ms rest then ends with the events that queued during it taken
    // at once, and the loop rests again. Only a rest after which none came waits (in
    // epoll, for the kernel) for the next: once here, at the end.
    use std::sync::atomic::{AtomicU32, Ordering};
    let cfg = TaskConfig::every(Duration::from_secs(1));
    let at = (0..300).map(|i| (Duration::from_millis(110 + i), 1000 + i));
    let waits = Arc::new(AtomicU32::new(0));
    let closes = closes(at).counting_waits(waits.clone());
    let (h, stop, _rx, m) = start_with(scripted(Duration::ZERO, |_| false), Some(closes), cfg, 256);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(m.destroy_events.get(), 300);
    // The first close's wait, and the wait after the last rest that found some.
    assert_eq!(waits.load(Ordering::Relaxed), 2, "waits for an event");
    stop.send(true).unwrap();
    h.await.unwrap().unwrap();
}
