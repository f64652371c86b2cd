//! The tiers' schedule on a simulated host in paused tokio time: which ticks dump the host
//! and which poll the hot flows, with costs the host really spends (spinning), so the
//! budget has real CPU time to measure. No kernel.

use std::sync::Mutex;

use tokio::sync::mpsc;

use super::*;
use crate::sampler::SamplerConfig;
use crate::sampler::activity::Activity;
use crate::sampler::fakes::{SimHost, SimState};
use crate::tracker::TrackerConfig;
use crate::wire::build::SockBuilder;

struct Run {
    host: Arc<Mutex<SimState>>,
    metrics: Arc<Metrics>,
    stop: watch::Sender<bool>,
    stage: tokio::task::JoinHandle<Result<TrackerStats, StageError>>,
    ended: mpsc::Receiver<Vec<EndedFlow>>,
}

thread_local! {
    /// `--max-full-interval` for the runs this thread starts (a test sets it first).
    static MAX_FULL: std::cell::Cell<Option<Duration>> = const { std::cell::Cell::new(None) };
}

type TaskHandle = tokio::task::JoinHandle<Result<TrackerStats, StageError>>;

/// The sampling task over `spaces`, a tick every `interval` with `budget` (the tiers on
/// when above 0): its stop, the task, its records and its counters.
fn spawn_over(
    spaces: Vec<Space<SimHost, SimHost>>,
    interval: Duration,
    budget: f64,
) -> (watch::Sender<bool>, TaskHandle, mpsc::Receiver<Vec<EndedFlow>>, Arc<Metrics>) {
    let tracker = Tracker::new(TrackerConfig {
        tiers: budget > 0.0,
        hot_linger_ns: 200_000_000,
        ..TrackerConfig::default()
    });
    let (stop, stop_rx) = watch::channel(false);
    let (tx, ended) = mpsc::channel(1024);
    let metrics = Arc::new(Metrics::default());
    let cap = MAX_FULL.with(|c| c.get());
    let cfg =
        TaskConfig { cpu_budget: budget, max_full_interval: cap, ..TaskConfig::every(interval) };
    let wiring = Wiring::new(stop_rx, tx, metrics.clone());
    let stage = tokio::spawn(run_spaces(tracker, spaces, None, cfg, wiring, |_| {}));
    (stop, stage, ended, metrics)
}

/// A host of `idle` still sockets (cookies 1000…) and `busy` ones (cookies 1…) whose bytes
/// move every 10 ms (and whose tcp_info says so: they sent 5 ms ago), sampled every
/// `interval` with `budget`.
fn host(
    idle: u64,
    busy: u64,
    interval: Duration,
    budget: f64,
    setup: impl FnOnce(&mut SimState),
) -> Run {
    let sim = SimHost::new();
    let host = sim.state();
    {
        let mut st = host.lock().unwrap();
        for c in 0..idle {
            st.set(SockBuilder::new(1000 + c, 20000 + c as u16, 80).bytes_acked(1).build());
        }
        for c in 1..=busy {
            let s = SockBuilder::new(c, 10000 + c as u16, 80).bytes_acked(1001).last_data_sent(5);
            st.set(s.build());
        }
        setup(&mut st);
    }
    let mover = host.clone();
    tokio::spawn(async move {
        for step in 2u64.. {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let mut st = mover.lock().unwrap();
            for c in 1..=busy {
                let s = SockBuilder::new(c, 10000 + c as u16, 80).last_data_sent(5);
                st.set(s.bytes_acked(step * 1000).build());
            }
        }
    });
    let sampler = Sampler::new(sim, SamplerConfig::default()).unwrap();
    let (stop, stage, ended, metrics) =
        spawn_over(vec![Space::new(0, None, sampler, None)], interval, budget);
    Run { host, metrics, stop, stage, ended }
}

impl Run {
    /// Stops, and returns every record's (cookie, samples seen, exact samples).
    async fn finish(mut self) -> Vec<(u64, u64, u32)> {
        self.stop.send(true).unwrap();
        self.stage.await.unwrap().unwrap();
        let mut v = Vec::new();
        while let Ok(b) = self.ended.try_recv() {
            for e in b {
                let seen = e.sample_count() as u64 + u64::from(e.flow.deduped);
                v.push((e.flow.key.cookie, seen, e.sampling.exact));
            }
        }
        v
    }
}

#[tokio::test(start_paused = true)]
async fn a_flow_the_first_dump_finds_moving_is_polled_from_the_next_tick() {
    // 1,000 idle sockets at 10 µs: a dump costs over 10 ms, more than a second of a 0.5 %
    // budget, so the second full dump waits seconds. The busy flow's tcp_info says it sent
    // 5 ms ago: it is hot from the first dump, with no second dump to tell.
    let r = host(1000, 1, Duration::from_millis(20), 0.005, |st| {
        st.cost_per_socket = Duration::from_micros(10);
        st.set(SockBuilder::new(1, 10001, 80).bytes_acked(1001).last_data_sent(5).build());
        // A connection just made, which has carried nothing: its handshake's times are
        // recent, but it does not start hot.
        st.set(SockBuilder::new(2, 10002, 80).bytes_acked(1).last_data_sent(5).build());
    });
    tokio::time::sleep(Duration::from_millis(110)).await;
    let m = r.metrics.clone();
    assert_eq!(m.dumps.get(), 1, "one full dump, then the budget's pace");
    let (polls, asked) = (m.exact_polls.get(), m.exact_requests.get());
    assert!(polls >= 4, "{polls} exact polls");
    assert_eq!(asked, polls, "each asks for the busy flow alone");
    r.finish().await;
}

#[tokio::test(start_paused = true)]
async fn the_budget_sets_the_full_dump_pace_and_busy_flows_keep_every_tick() {
    // 1,000 idle sockets at 10 µs each: a full dump costs over 10 ms of CPU. At 5 % of a
    // core with 20 ms ticks, full dumps come a few hundred ms apart; the two busy flows are
    // asked for every tick in between.
    let r = host(1000, 2, Duration::from_millis(20), 0.05, |st| {
        st.cost_per_socket = Duration::from_micros(10);
    });
    tokio::time::sleep(Duration::from_millis(4000)).await;
    let m = r.metrics.clone();
    let records = r.finish().await;
    let (full, exact) = (m.dumps.get(), m.exact_polls.get());
    let ticks = full + exact;
    assert!((200..=201).contains(&ticks), "one or the other every tick: {full} + {exact}");
    assert!((6..=40).contains(&full), "{full} full dumps, {exact} exact polls");
    // What sampling cost, over the run: the budget (the first two dumps are not paced).
    let share = m.sampling_cpu_ns.get() as f64 / 4e9;
    assert!((0.03..0.08).contains(&share), "sampling used {:.1} % of a core", share * 100.0);
    let planned = m.full_dump_interval_planned_ns.get();
    assert!((100_000_000..800_000_000).contains(&planned), "{planned} ns");
    // The plan costs the budget, and says it is within it.
    let plan = m.sampling_cpu_planned_ppm.get();
    assert!((49_000..=50_050).contains(&plan), "the plan costs {plan} ppm of a core");
    assert_eq!(m.over_budget.get(), 0);
    assert_eq!(m.hot_flows.get(), 2, "the idle flows are not hot");
    for c in [1, 2] {
        let (_, seen, exact) = *records.iter().find(|r| r.0 == c).unwrap();
        assert!(seen + 2 >= ticks, "busy flow {c}: {seen} samples of {ticks} ticks");
        assert!(u64::from(exact) + full + 2 >= ticks, "{exact} exact samples");
    }
    // An idle flow is seen at full dumps only.
    let (_, seen, exact) = *records.iter().find(|r| r.0 == 1000).unwrap();
    assert!(seen <= full && exact == 0, "{seen} samples, {exact} exact");
}

#[tokio::test(start_paused = true)]
async fn a_large_hot_set_takes_full_dumps_and_a_small_one_exact_polls() {
    // Asking for one socket costs 70 µs, a dump 30 µs a socket: with 60 of 100 sockets busy,
    // exact polls would cost more than a dump (and more than the 5 % budget), so every
    // tick dumps.
    let costs = |st: &mut SimState| {
        st.cost_per_socket = Duration::from_micros(30);
        st.cost_per_exact = Duration::from_micros(40);
    };
    let r = host(40, 60, Duration::from_millis(20), 0.05, costs);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let m = r.metrics.clone();
    r.finish().await;
    assert!(m.full_dumps_cheaper.get() >= 40, "{} cheaper", m.full_dumps_cheaper.get());
    assert!(m.exact_polls.get() <= 5, "{} exact polls", m.exact_polls.get());
    // 10 of 100 busy: exact polls are cheaper.
    let r = host(90, 10, Duration::from_millis(20), 0.05, costs);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let m = r.metrics.clone();
    r.finish().await;
    assert!(m.exact_polls.get() >= 30, "{} exact polls", m.exact_polls.get());
    assert_eq!(m.full_dumps_cheaper.get(), 0);
}

#[tokio::test(start_paused = true)]
async fn no_budget_dumps_every_tick_and_keeps_no_hot_set() {
    let r = host(100, 2, Duration::from_millis(20), 0.0, |_| {});
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let m = r.metrics.clone();
    let host = r.host.clone();
    r.finish().await;
    assert!((50..=51).contains(&m.dumps.get()), "{}", m.dumps.get());
    assert_eq!((m.exact_polls.get(), m.hot_flows.get()), (0, 0));
    assert_eq!(host.lock().unwrap().exact_requests, 0);
}

#[tokio::test(start_paused = true)]
async fn a_hot_flow_that_closes_ends_at_the_next_exact_poll() {
    // Full dumps cost 10 ms: at 2 % they come every 500 ms.
    let r = host(100, 2, Duration::from_millis(20), 0.02, |st| {
        st.cost_per_socket = Duration::from_micros(100);
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = r.metrics.dumps.get();
    r.host.lock().unwrap().close(3); // no such cookie: nothing happens
    // Busy flow 1 stops moving and closes: gone at the next tick, not the next full dump.
    let mut r = r;
    r.host.lock().unwrap().close(1);
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(r.metrics.dumps.get(), before, "no full dump in between");
    assert!(r.metrics.exact_gone.get() >= 1);
    let b = r.ended.try_recv().expect("the flow ended");
    assert!(b.iter().any(|e| e.flow.key.cookie == 1));
    r.finish().await;
}

/// Two simulated namespaces under a budget: `quiet` (cookies 5000…, counters still unless
/// a test moves them) and `busy` (cookie 1 moves every 10 ms, and so do its counters).
struct TwoSpaces {
    quiet: Arc<Mutex<SimState>>,
    quiet_segs: Arc<std::sync::atomic::AtomicU64>,
    run: Run,
}

fn two_spaces(quiet_socks: u64) -> TwoSpaces {
    use std::sync::atomic::{AtomicU64, Ordering};
    let (qsim, bsim) = (SimHost::new(), SimHost::new());
    let (quiet, busy) = (qsim.state(), bsim.state());
    for c in 0..quiet_socks {
        quiet.lock().unwrap().set(SockBuilder::new(5000 + c, 30000 + c as u16, 80).build());
    }
    busy.lock().unwrap().set(SockBuilder::new(1, 10001, 80).bytes_acked(1).build());
    let (quiet_segs, busy_segs) = (Arc::new(AtomicU64::new(1)), Arc::new(AtomicU64::new(1)));
    let (mover, moved) = (busy.clone(), busy_segs.clone());
    tokio::spawn(async move {
        for step in 2u64.. {
            tokio::time::sleep(Duration::from_millis(10)).await;
            mover.lock().unwrap().set(SockBuilder::new(1, 10001, 80).bytes_acked(step).build());
            moved.fetch_add(1, Ordering::Relaxed);
        }
    });
    let config = SamplerConfig::default();
    let label = |name: &str| {
        Some(Arc::new(crate::record::NetnsLabel {
            inode: 0,
            name: name.into(),
            runtime: None,
            container: None,
            pod: None,
        }))
    };
    let spaces: Vec<Space<SimHost, SimHost>> = vec![
        Space::new(0, label("busy"), Sampler::new(bsim, config.clone()).unwrap(), None)
            .with_activity(Some(Activity::Counter(busy_segs))),
        Space::new(1, label("quiet"), Sampler::new(qsim, config).unwrap(), None)
            .with_activity(Some(Activity::Counter(quiet_segs.clone()))),
    ];
    // 100 % of a core: every tick is a full dump, so each one chooses what to walk.
    let (stop, stage, ended, metrics) = spawn_over(spaces, Duration::from_millis(100), 1.0);
    TwoSpaces {
        quiet: quiet.clone(),
        quiet_segs,
        run: Run { host: busy, metrics, stop, stage, ended },
    }
}

#[tokio::test(start_paused = true)]
async fn a_namespace_where_nothing_moves_is_walked_only_every_30_to_60_s() {
    use std::sync::atomic::Ordering;
    let t = two_spaces(3);
    // 150 s of 100 ms ticks: the quiet namespace is walked by the first two dumps, then
    // once each time its longest unwalked span (30–60 s) runs out.
    const RUN: u64 = 150_000_000_000;
    tokio::time::sleep(Duration::from_nanos(RUN)).await;
    let quiet_walks = t.quiet.lock().unwrap().dumps;
    let busy_walks = t.run.host.lock().unwrap().dumps;
    let span = spaces::longest_unwalked_ns(1);
    assert!((30_000_000_000..60_000_000_000).contains(&span), "{span}");
    let most = 2 + (RUN / span) as u32;
    let least = 1 + (RUN / (span + 100_000_000)) as u32;
    assert!(
        (least..=most).contains(&quiet_walks),
        "quiet namespace walked {quiet_walks} times ({least}..={most})"
    );
    assert!(busy_walks >= 1440, "busy namespace walked {busy_walks} times");
    let m = t.run.metrics.clone();
    assert_eq!(m.netns_walks_skipped.get() + u64::from(quiet_walks), u64::from(busy_walks));
    // Its flows stand while it is not walked: none ended, and its sockets still count.
    assert_eq!(m.flows_active.get(), 4, "3 quiet flows and the busy one");
    assert_eq!(m.sockets_last_dump.get(), 4);
    // A new socket there comes with a segment: the next full dump walks it and finds it.
    t.quiet.lock().unwrap().set(SockBuilder::new(6000, 40000, 80).build());
    t.quiet_segs.fetch_add(2, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(m.flows_active.get(), 5);
    assert_eq!(t.quiet.lock().unwrap().dumps, quiet_walks + 1, "walked once, then quiet again");
    // A socket gone without a segment or an event (the simulation sends none) ends at the
    // next walk, a minute at most.
    t.quiet.lock().unwrap().close(5000);
    tokio::time::sleep(Duration::from_millis(60_100)).await;
    assert_eq!(m.flows_active.get(), 4);
    let records = t.run.finish().await;
    let r5000 = records.iter().filter(|r| r.0 == 5000).count();
    assert_eq!(r5000, 1, "the closed quiet flow has its record");
    assert_eq!(records.len(), 5);
}

#[tokio::test(start_paused = true)]
async fn without_a_budget_every_namespace_is_walked_every_tick() {
    // A quiet namespace beside another, no budget: nothing is left out.
    let (qsim, bsim) = (SimHost::new(), SimHost::new());
    let quiet = qsim.state();
    quiet.lock().unwrap().set(SockBuilder::new(5000, 30000, 80).build());
    let segs = Arc::new(std::sync::atomic::AtomicU64::new(1));
    let spaces = vec![
        Space::new(0, None, Sampler::new(bsim, SamplerConfig::default()).unwrap(), None),
        Space::new(1, None, Sampler::new(qsim, SamplerConfig::default()).unwrap(), None)
            .with_activity(Some(Activity::Counter(segs))),
    ];
    let (_stop, stage, _ended, metrics) = spawn_over(spaces, Duration::from_millis(100), 0.0);
    tokio::time::sleep(Duration::from_millis(2_050)).await;
    assert_eq!(quiet.lock().unwrap().dumps, 21);
    assert_eq!(metrics.netns_walks_skipped.get(), 0);
    stage.abort();
}

#[tokio::test(start_paused = true)]
async fn quiet_namespaces_first_walked_together_fall_due_apart() {
    // Ten quiet namespaces of one socket each, every tick a full dump: after the first two
    // dumps walk them all (a dump this cheap is followed at once by the second), no dump
    // walks more than two of them.
    let mut sims = Vec::new();
    let mut spaces: Vec<Space<SimHost, SimHost>> = Vec::new();
    for ns in 0..10u32 {
        let sim = SimHost::new();
        sim.state().lock().unwrap().set(SockBuilder::new(100 + u64::from(ns), 30000, 80).build());
        sims.push(sim.state());
        let segs = Activity::Counter(Arc::new(std::sync::atomic::AtomicU64::new(1)));
        let sampler = Sampler::new(sim, SamplerConfig::default()).unwrap();
        spaces.push(Space::new(ns, None, sampler, None).with_activity(Some(segs)));
    }
    let (_stop, stage, _ended, _metrics) = spawn_over(spaces, Duration::from_millis(100), 1.0);
    let walks = || sims.iter().map(|s| s.lock().unwrap().dumps).sum::<u32>();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(walks(), 20, "the first two dumps walk every namespace");
    let (mut last, mut most, mut total) = (walks(), 0, 0);
    for _ in 0..1800 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = walks();
        most = most.max(now - last);
        total += now - last;
        last = now;
    }
    // In 180 s each namespace falls due three to six times, but never with many others.
    assert!((30..=60).contains(&total), "{total} walks");
    assert!(most <= 2, "{most} namespaces walked by one dump");
    stage.abort();
}

#[tokio::test(start_paused = true)]
async fn a_cap_on_the_full_dump_interval_costs_the_budget_and_says_so() {
    // 100 still sockets at 100 µs: 10 ms a dump. At 0.5 % the budget paces dumps 2 s
    // apart; a 500 ms cap makes them 4 times as frequent, 2 % of a core: over budget. (Few
    // dear sockets: the real decoding and tracking of each adds to the simulated cost, and
    // with 1,000 cheap ones the plan read 31,455 ppm on a loaded machine.)
    MAX_FULL.with(|c| c.set(Some(Duration::from_millis(500))));
    let r = host(100, 0, Duration::from_millis(100), 0.005, |st| {
        st.cost_per_socket = Duration::from_micros(100);
    });
    tokio::time::sleep(Duration::from_millis(4000)).await;
    let m = r.metrics.clone();
    r.finish().await;
    MAX_FULL.with(|c| c.set(None));
    assert_eq!(m.full_dump_interval_planned_ns.get(), 500_000_000);
    assert_eq!(m.over_budget.get(), 1);
    let plan = m.sampling_cpu_planned_ppm.get();
    // (The tracker's own work on each simulated socket adds to the 10 µs.)
    assert!((19_000..=30_000).contains(&plan), "the plan costs {plan} ppm of a core");
    let gap = m.full_dump_interval_ns.get();
    assert!((400_000_000..=600_000_000).contains(&gap), "dumps {gap} ns apart");
}

#[tokio::test(start_paused = true)]
async fn without_a_cap_the_budget_alone_sets_the_pace() {
    // 100 sockets at 2 ms: 200 ms a dump, at 1 % 20 s apart: past the 10 s that used to
    // be the longest, and within the budget. Few sockets, each dear: the real decoding
    // adds to the simulated cost (each of its ms is 0.1 s of the plan at 1 %), and on a
    // loaded machine 1,000 sockets' decoding put the plan at 21.03 s.
    let r = host(100, 0, Duration::from_millis(100), 0.01, |st| {
        st.cost_per_socket = Duration::from_millis(2);
    });
    tokio::time::sleep(Duration::from_secs(45)).await;
    let m = r.metrics.clone();
    r.finish().await;
    assert_eq!(m.over_budget.get(), 0);
    let planned = m.full_dump_interval_planned_ns.get();
    assert!((19_000_000_000..=21_000_000_000).contains(&planned), "{planned} ns");
    // The first two dumps come a tick apart; then one 20 s on, one 40 s on, and the one
    // at the stop.
    assert!((4..=5).contains(&m.dumps.get()), "{} full dumps", m.dumps.get());
}
