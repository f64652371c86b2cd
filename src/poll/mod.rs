//! The poll stage: it polls the kernel and feeds the tracker. It owns the sampler. Each
//! dump is read in one task, and each socket is applied to the flow table while its
//! datagram is still in cache (`Sampler::dump_with`).
//! Destroy events are applied between dumps. Ended flows go on to the analyzer through a
//! bounded channel, one batch per dump: the flows destroy events ended wait for the next.
//!
//! Order matters at the end of a dump. First the destroy events that arrived during it are
//! applied, and only then are absent flows judged. A flow whose socket closed while the
//! dump was walking therefore ends with its exact final counters, not as merely "gone".
//!
//! Schedule: the first dump at once, then one per interval on a fixed grid. A dump that
//! overruns its interval skips the ticks it missed (never back-to-back catch-up); each
//! overrun is counted and warned about (once, then at most once a minute). A failed dump
//! backs off `error_delay × 2^(n-1)` after the n-th consecutive failure and gives up after
//! `max_errors` (cgmon's `-run-error-delay`, `-run-max-errors`).
//!
//! Backpressure: sampling never waits for the analyzer. Ended flows are handed on with
//! `try_send`; when the channel is full the batch is dropped, counted in
//! `records_dropped` and logged. Only the final hand-off at shutdown waits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::Sender;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

use crate::clock::{cpu_timed, cpu_timed_sync};
pub use crate::edges::{ENDED_CHANNEL_CAPACITY, MAX_QUEUED_SAMPLES, StageError};
use crate::locks::Locked;
use crate::metrics::{Metrics, Stage};
use crate::sampler::destroy::{DestroyBatch, DestroyListener};
use crate::sampler::exact::ExactPoll;
use crate::sampler::source::DumpSource;
use crate::sampler::{SampleError, Sampler};
use crate::tracker::accounts::Account;
use crate::tracker::views::{self, Query};
use crate::tracker::{EndedFlow, Tracker, TrackerStats};
use pace::{Pacer, Plan, Why};

/// Longest back-off between failed dumps, however many failed.
pub const MAX_ERROR_DELAY: Duration = Duration::from_secs(300);

/// How often a recurring warning (overruns, drops) may repeat.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The stage's schedule and limits.
#[derive(Debug, Clone)]
pub struct TaskConfig {
    /// Time between dumps.
    pub interval: Duration,
    /// Back-off after the first failed dump; doubles per consecutive failure.
    pub error_delay: Duration,
    /// Consecutive failures before giving up; 0 = never.
    pub max_errors: u32,
    /// Share of one core for sampling (`--cpu-budget`); 0: a full dump every tick.
    pub cpu_budget: f64,
    /// The longest time between full dumps whatever the budget (`--max-full-interval`);
    /// `None`: the budget alone sets it.
    pub max_full_interval: Option<Duration>,
    /// Whether the process is the monitor alone (the binary), so that the rest of its CPU,
    /// its upkeep, is measured and charged to the budget too (`crate::budget`), up to
    /// [`upkeep_cap`](Self::upkeep_cap). False where the stage runs inside a larger
    /// process, as in a test binary, whose other threads are not the monitor's.
    pub whole_process: bool,
    /// The most of the budget the upkeep is charged ([`crate::budget::UPKEEP_CAP`]; the
    /// binary charges none in an unoptimised build, see `app::main`).
    pub upkeep_cap: f64,
}

impl TaskConfig {
    /// A dump every `interval`, cgmon's error defaults (1 s, 5).
    pub fn every(interval: Duration) -> Self {
        Self {
            interval,
            error_delay: Duration::from_secs(1),
            max_errors: 5,
            cpu_budget: 0.0,
            max_full_interval: None,
            whole_process: false,
            upkeep_cap: crate::budget::UPKEEP_CAP,
        }
    }
}

/// The stage's connections to the rest of the program.
#[derive(Debug)]
pub struct Wiring {
    /// Turns true (or its sender goes) to stop sampling.
    pub stop: watch::Receiver<bool>,
    /// To the analyzer.
    pub ended_tx: Sender<Vec<EndedFlow>>,
    /// Counters this stage updates.
    pub metrics: Arc<Metrics>,
    /// Where the per-service accounts are published after every dump (for `/metrics`).
    pub accounts: Option<Arc<std::sync::Mutex<Vec<Account>>>>,
    /// Questions about active flows (from the HTTP server), answered between dumps.
    pub queries: Option<tokio::sync::mpsc::Receiver<Query>>,
}

impl Wiring {
    /// Just the essentials: no accounts published, no queries.
    pub fn new(
        stop: watch::Receiver<bool>,
        ended_tx: Sender<Vec<EndedFlow>>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self { stop, ended_tx, metrics, accounts: None, queries: None }
    }
}

async fn next_query(q: &mut Option<tokio::sync::mpsc::Receiver<Query>>) -> Option<Query> {
    match q {
        Some(q) => q.recv().await,
        None => std::future::pending().await,
    }
}

fn answer(tracker: &Tracker, q: Query) {
    match q {
        Query::List { after, limit, netns, tx } => {
            let (flows, total) = tracker.view_page(after, limit, 1, netns);
            let netns = flows.iter().map(|f| tracker.netns_of(f.key.cookie)).collect();
            let _ = tx.send(views::Page { flows, netns, total });
        }
        Query::Flow { cookie, keep, tx } => {
            let f = tracker.view_one(cookie, keep);
            let _ = tx.send(f.map(|f| (f, tracker.netns_of(cookie))));
        }
        Query::Overview { order, offset, limit, keep, filter, judge, tx } => {
            let _ = tx.send(tracker.overview(order, offset, limit, keep, &filter, judge));
        }
    }
}

/// What happened in one dump, for the program's hooks (READY, watchdog).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DumpOutcome {
    /// The dump completed.
    Ok,
    /// It failed and will be retried.
    Failed,
}

/// A warning that repeats at most every [`WARN_EVERY`], with the count since the last one.
#[derive(Debug, Default)]
struct RateLimited {
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimited {
    fn hit(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self.last.is_some_and(|t| now.duration_since(t) < WARN_EVERY) {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

async fn next_update<T>(u: &mut Option<tokio::sync::mpsc::Receiver<T>>) -> Option<T> {
    match u {
        Some(u) => u.recv().await,
        None => std::future::pending().await,
    }
}

fn publish(
    tracker: &Tracker,
    m: &Metrics,
    accounts: Option<&std::sync::Mutex<Vec<Account>>>,
) -> TrackerStats {
    if let Some(a) = accounts {
        let mut g = a.locked();
        g.clear();
        g.extend_from_slice(tracker.accounts().all());
    }
    let st = tracker.stats();
    m.flows_active.set(tracker.active() as u64);
    let (packed, bytes) = tracker.packed();
    m.flows_packed.set(packed as u64);
    m.flows_packed_bytes.set(bytes as u64);
    // For the status page only, so only when it is served (`accounts` is published for it).
    if accounts.is_some() && tracker.several_netns() {
        *m.netns_flows.locked() = tracker.flows_per_netns();
    }
    m.flows_opened.mirror(st.flows_opened);
    m.flows_ended.mirror(st.flows_ended);
    m.flows_refused.mirror(st.flows_refused);
    m.flows_too_short.mirror(st.flows_too_short);
    for (c, n) in m.flow_owners.iter().zip(tracker.owner_counts()) {
        c.mirror(n);
    }
    m.flows_awaiting_destroy.set(tracker.awaiting_destroy() as u64);
    m.destroy_awaited.mirror(st.destroy_awaited);
    m.destroy_wait_expired.mirror(st.destroy_wait_expired);
    m.destroy_late.mirror(st.destroy_late);
    m.samples_held.set(tracker.samples_held());
    m.windows_cut_for_memory.mirror(st.windows_cut_for_memory);
    m.samples_retained.mirror(st.samples_retained);
    m.samples_deduped.mirror(st.samples_deduped);
    st
}

/// Samples every `cfg.interval` (the first at once) until `wiring.stop` turns true or its
/// sender goes, then hands on every active flow as partial and returns the counters. `on_dump`
/// runs after every dump.
///
/// # Errors
/// The analyzer's receiver is gone, or `max_errors` dumps failed in a row.
pub async fn run<S: DumpSource, D: DumpSource>(
    tracker: Tracker,
    sampler: Sampler<S>,
    destroy: Option<DestroyListener<D>>,
    cfg: TaskConfig,
    wiring: Wiring,
    on_dump: impl FnMut(DumpOutcome) + Send,
) -> Result<TrackerStats, StageError> {
    let own = Space::new(0, None, sampler, destroy);
    run_spaces(tracker, vec![own], None, cfg, wiring, on_dump).await
}

/// [`run`] over several network namespaces, and those `updates` add or remove while it
/// runs.
///
/// # Errors
/// As for [`run`].
pub async fn run_spaces<S: DumpSource, D: DumpSource>(
    tracker: Tracker,
    spaces: Vec<Space<S, D>>,
    mut updates: Option<tokio::sync::mpsc::Receiver<SpaceUpdate<S, D>>>,
    cfg: TaskConfig,
    wiring: Wiring,
    mut on_dump: impl FnMut(DumpOutcome) + Send,
) -> Result<TrackerStats, StageError> {
    let Wiring { mut stop, ended_tx, metrics, accounts, mut queries } = wiring;
    let mut p = Poll::new(tracker, spaces, cfg, metrics, accounts);
    loop {
        if *stop.borrow() {
            break;
        }
        let mut hand_on = false;
        let (until, resting) = (p.backoff_until, p.destroy_rest_until);
        let backoff = sleep_until_or_never(until);
        let rest = sleep_until_or_never(resting);
        tokio::select! {
            biased;
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    break;
                }
            }
            () = backoff => {
                p.backoff_until = None;
                p.tick.reset_immediately();
            }
            due = p.tick.tick(), if p.backoff_until.is_none() => {
                hand_on = true;
                p.on_tick(due, &mut on_dump).await?;
            }
            () = rest => p.after_rest(),
            ((ns, b), recv_cpu) = cpu_timed(spaces::next_destroy_any(&mut p.spaces)),
                if resting.is_none() => {
                // A batch that stopped at its cap leaves events waiting: no rest then.
                let more = b.as_ref().is_ok_and(|b| b.full);
                let ((), cpu) = cpu_timed_sync(|| p.on_destroy(ns, b));
                p.metrics.budget.pushed(cpu + recv_cpu);
                if !more {
                    p.destroy_rest_until = Some(tokio::time::Instant::now() + p.destroy_rest);
                    for d in p.spaces.iter_mut().filter_map(|sp| sp.destroy.as_mut()) {
                        d.rest();
                    }
                }
            }
            Some(u) = next_update(&mut updates) => {
                spaces::update(&mut p.spaces, u, &mut p.tracker, &mut p.out, &p.metrics);
                p.metrics.netns_sampled.set(p.spaces.len() as u64);
                hand_on = true;
            }
            Some(q) = next_query(&mut queries) => {
                // A page's question (the HTTP server's): pushed at us.
                let ((), cpu) = cpu_timed_sync(|| answer(&p.tracker, q));
                p.metrics.budget.pushed(cpu);
            }
        }
        if hand_on && !p.out.is_empty() {
            p.hand_on(&ended_tx).await?;
        }
    }
    p.finish(&ended_tx).await
}

/// Sleeps until `t`, or forever without one (a `select!` arm that is off).
async fn sleep_until_or_never(t: Option<tokio::time::Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// How long the loop leaves the destroy sockets alone after reading them: the events that
/// come meanwhile wait in the socket's buffer and are read together. Woken for every event,
/// the loop spent much of its CPU going to sleep and waking again (benches/RESULTS.md, D11);
/// the flows they end wait for the next tick in any case. 50 ms at 30,000 events a second
/// (15,000 connections) is ~1,500 events, which a 4 MiB buffer holds (D11). Never more than
/// half the interval.
pub const DESTROY_REST: Duration = Duration::from_millis(50);

/// The most batches of destroy events read at the stop (each up to
/// [`MAX_DATAGRAMS_PER_BATCH`](crate::sampler::destroy::MAX_DATAGRAMS_PER_BATCH)): 64 is
/// 65,536 events, more than a 4 MiB buffer holds.
const STOP_DRAIN_BATCHES: usize = 64;

/// The rest when a destroy socket's buffer is capped (net.core.rmem_max, 208 KiB by
/// default). A shorter rest records more of the flows at the most the churn bench makes,
/// at the price of wake-ups (benches/RESULTS.md, D12); docs/deployment.md, "High churn",
/// says to raise the sysctl.
pub const DESTROY_REST_CAPPED: Duration = Duration::from_millis(2);

/// The loop's state between ticks: the flow table, the namespaces' samplers, the flows
/// ended since the last hand-off, the schedule and its pace.
struct Poll<S, D> {
    tracker: Tracker,
    spaces: Vec<Space<S, D>>,
    /// Flows ended since the last hand-off. Those that destroy events end wait here for the
    /// next tick, so the analyzer gets one batch per dump: the channel's capacity counts
    /// batches, and at a thousand closes a second, a batch per event burst filled it within
    /// a second of any stall downstream.
    out: Vec<EndedFlow>,
    cfg: TaskConfig,
    metrics: Arc<Metrics>,
    accounts: Option<Arc<std::sync::Mutex<Vec<Account>>>>,
    /// The interval's grid starts here.
    grid0: tokio::time::Instant,
    tick: tokio::time::Interval,
    pacer: Pacer,
    last_plan: Option<Plan>,
    last_dump_start: Option<tokio::time::Instant>,
    /// Failed dumps in a row, and when the next may be tried.
    errors: u32,
    backoff_until: Option<tokio::time::Instant>,
    /// The destroy sockets are left alone until then ([`DESTROY_REST`]).
    destroy_rest_until: Option<tokio::time::Instant>,
    /// [`DESTROY_REST`] ([`DESTROY_REST_CAPPED`] with a capped buffer), or half the
    /// interval when that is shorter.
    destroy_rest: Duration,
    overrun_warn: RateLimited,
    drop_warn: RateLimited,
}

impl<S: DumpSource, D: DumpSource> Poll<S, D> {
    fn new(
        mut tracker: Tracker,
        spaces: Vec<Space<S, D>>,
        cfg: TaskConfig,
        metrics: Arc<Metrics>,
        accounts: Option<Arc<std::sync::Mutex<Vec<Account>>>>,
    ) -> Self {
        for sp in &spaces {
            if let Some(l) = &sp.label {
                tracker.set_label(sp.ns, l.clone());
            }
        }
        spaces::publish_buffers(&spaces, &metrics);
        let grid0 = tokio::time::Instant::now();
        let mut tick = tokio::time::interval_at(grid0, cfg.interval);
        tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
        metrics.cpu_budget_ppm.set((cfg.cpu_budget * 1e6).round() as u64);
        metrics.budget.set_share(cfg.cpu_budget);
        metrics.budget.set_upkeep_cap(cfg.upkeep_cap);
        metrics.netns_sampled.set(spaces.len() as u64);
        let capped = spaces.iter().any(|sp| sp.destroy.as_ref().is_some_and(|d| d.capped()));
        let rest = if capped { DESTROY_REST_CAPPED } else { DESTROY_REST };
        let destroy_rest = rest.min(cfg.interval / 2);
        Self {
            tracker,
            spaces,
            out: Vec::new(),
            pacer: Pacer::new(cfg.interval, cfg.cpu_budget, cfg.max_full_interval),
            cfg,
            metrics,
            accounts,
            grid0,
            tick,
            last_plan: None,
            last_dump_start: None,
            errors: 0,
            backoff_until: None,
            destroy_rest_until: None,
            destroy_rest,
            overrun_warn: RateLimited::default(),
            drop_warn: RateLimited::default(),
        }
    }

    /// A tick: plan a full dump or exact polls, poll, then the events that came meanwhile.
    async fn on_tick(
        &mut self,
        due: tokio::time::Instant,
        on_dump: &mut (impl FnMut(DumpOutcome) + Send),
    ) -> Result<(), StageError> {
        // tokio's clock (the same as std's outside paused-time tests).
        let start = tokio::time::Instant::now();
        self.metrics.tick_lateness.observe(start.saturating_duration_since(due));
        let now_ns = start.duration_since(self.grid0).as_nanos() as u64;
        // Names waiting for the budget take their share of it from full dumps, and so does
        // the process's upkeep.
        self.pacer.set_naming_reserve(self.metrics.budget.naming_reserve());
        if self.cfg.whole_process {
            self.charge_upkeep();
        }
        let plan = self.pacer.plan(now_ns, self.tracker.hot_len());
        self.last_plan = Some(plan);
        // The flows opened since the last tick that are still open go to the process
        // walker (those already gone cost no walk); its answers reach their flows.
        self.tracker.ask_owners();
        self.tracker.settle_owners();
        let r = match plan {
            Plan::Exact => exact_poll(self.tick_parts()).await,
            Plan::Full(why) => full_dump(self.tick_parts(), now_ns, why).await,
        };
        self.drain_destroyed();
        match r {
            Ok(d) => {
                self.errors = 0;
                if let Some(d) = d {
                    dump_done(&d, &mut self.tracker, &mut self.out, &self.metrics, start);
                }
                on_dump(DumpOutcome::Ok);
            }
            Err(e) => {
                if plan != Plan::Exact {
                    self.tracker.end_dump(false, 0, &mut self.out);
                }
                self.errors += 1;
                let delay = dump_failed(e, self.errors, &self.cfg, &self.metrics)?;
                self.backoff_until = Some(tokio::time::Instant::now() + delay);
                on_dump(DumpOutcome::Failed);
            }
        }
        self.after_tick(plan, start);
        Ok(())
    }

    /// Charges the process's upkeep since the last tick to the budget (`crate::budget`,
    /// `upkeep.rs`); the plan leaves it its share.
    fn charge_upkeep(&mut self) {
        let m = &self.metrics;
        let budgeted = m.sampling_cpu_ns.get() + m.naming_cpu_ns.get();
        let process = crate::clock::process_cpu_ns();
        let share = m.budget.charge_upkeep_at(process, budgeted, std::time::Instant::now());
        self.pacer.set_upkeep(share);
    }

    /// The tick's figures: published accounts, churn, stage times, the pace, overruns.
    fn after_tick(&mut self, plan: Plan, start: tokio::time::Instant) {
        let (tracker, metrics) = (&self.tracker, &self.metrics);
        let st = publish(tracker, metrics, self.accounts.as_deref());
        if let Some(prev) = self.last_dump_start.replace(start) {
            let mut c = metrics.last_churn.locked();
            *c = (self.out.len() as u64, start.duration_since(prev).as_nanos() as u64);
        }
        tracing::debug!(target: "cgmon_rs::tracker", active = tracker.active(),
            ended = self.out.len(), opened = st.flows_opened, refused = st.flows_refused,
            retained = st.samples_retained, deduped = st.samples_deduped, "tracker dump");
        let took = start.elapsed();
        if plan == Plan::Exact {
            metrics.time(Stage::Exact, took);
        } else {
            metrics.time(Stage::Dump, took);
            metrics.dump_seconds.observe(took);
        }
        metrics.hot_flows.set(tracker.hot_len() as u64);
        if took > self.cfg.interval {
            let (grid0, cfg) = (self.grid0, &self.cfg);
            skip_missed_ticks(&mut self.tick, grid0, cfg, took, metrics, &mut self.overrun_warn);
        }
        self.pace_figures();
    }

    /// The pace the budget allows now, what it costs, and whether that is over the budget
    /// (said once in the log when it goes over, and once when it is back within). The
    /// tracker's pause follows the pace: a still flow waits for the next full dump, and
    /// only a longer gap is a pause on its charts.
    fn pace_figures(&mut self) {
        let (hot, m, p) = (self.tracker.hot_len(), &self.metrics, &self.pacer);
        if p.full_dump_ns().is_none() {
            return;
        }
        let planned = p.full_interval_ns(hot);
        m.full_dump_interval_planned_ns.set(planned);
        let share = p.planned_share(hot);
        m.sampling_cpu_planned_ppm.set((share * 1e6).round() as u64);
        let over = p.over_budget(hot);
        // The gauge is the state: what it said last tick tells whether this is a change.
        if over != (m.over_budget.get() == 1) {
            m.over_budget.set(u64::from(over));
            let (pct, budget) = (share * 100.0, self.cfg.cpu_budget * 100.0);
            let every = Duration::from_nanos(planned).as_secs_f64();
            if over {
                tracing::warn!(
                    planned_cpu_percent = format!("{pct:.2}"),
                    hot_flows = hot,
                    "sampling costs {pct:.2} % of a core, over the {budget} % budget: full dumps \
                     every {every:.1} s and {hot} hot flows polled every tick"
                );
            } else {
                tracing::info!(
                    "sampling is back within the {budget} % budget: {pct:.2} % of a \
                     core, full dumps every {every:.1} s"
                );
            }
        }
        if p.tiers() {
            // (At least the tracker's configured pause, three ticks and more.)
            self.tracker.set_pause_ns(planned.saturating_mul(3) / 2);
        }
    }

    /// After a rest of the destroy sockets: what queued during it is taken while the sockets
    /// stay out of epoll, and the loop rests again; only a rest after which nothing came
    /// waits in epoll for the next event. Under steady churn a rest then costs one recvmmsg,
    /// not two epoll_ctl calls and a wake-up through epoll.
    fn after_rest(&mut self) {
        let (taken, full) = self.drain_destroyed();
        self.destroy_rest_until = match (taken, full) {
            (0, _) => None,
            (_, true) => Some(tokio::time::Instant::now()),
            (_, false) => Some(tokio::time::Instant::now() + self.destroy_rest),
        };
        if taken > 0 {
            publish(&self.tracker, &self.metrics, self.accounts.as_deref());
        }
    }

    /// Applies the destroy events queued now in every namespace ([`spaces::drain_all`]):
    /// pushed work, charged apart from the budget. Returns what `drain_all` does.
    fn drain_destroyed(&mut self) -> (usize, bool) {
        let Tick { spaces, tracker, out, metrics, .. } = self.tick_parts();
        let (r, cpu) = cpu_timed_sync(|| spaces::drain_all(spaces, tracker, out, metrics));
        metrics.budget.pushed(cpu);
        r
    }

    /// The parts a tick works on, borrowed together.
    fn tick_parts(&mut self) -> Tick<'_, S, D> {
        Tick {
            tracker: &mut self.tracker,
            spaces: &mut self.spaces,
            out: &mut self.out,
            metrics: &self.metrics,
            pacer: &mut self.pacer,
        }
    }

    /// Hands the flows ended since the last hand-off on to the analyzer (pushed work, as
    /// the events that ended most of them).
    ///
    /// # Errors
    /// The analyzer is gone.
    async fn hand_on(&mut self, ended_tx: &Sender<Vec<EndedFlow>>) -> Result<(), StageError> {
        let (t, sp, out) = (&mut self.tracker, &mut self.spaces, &mut self.out);
        let ((), cpu) = cpu_timed(resolve_sides(t, sp, out)).await;
        let (out, m, warn) = (&mut self.out, &self.metrics, &mut self.drop_warn);
        let (r, cpu2) = cpu_timed_sync(|| hand_off(out, ended_tx, m, warn));
        self.metrics.budget.pushed(cpu + cpu2);
        r
    }

    /// Destroy events from namespace `ns`.
    fn on_destroy(&mut self, ns: u32, b: Result<DestroyBatch, SampleError>) {
        match b {
            Ok(b) => {
                self.tracker.set_netns(ns);
                apply_destroyed(&mut self.tracker, (&b, ns), &mut self.out, &self.metrics);
                publish(&self.tracker, &self.metrics, self.accounts.as_deref());
            }
            Err(e) => tracing::warn!(netns = ns, error = %e, "reading destroy events"),
        }
    }

    /// At the stop: one more full dump when the last was exact polls (flows that began since
    /// the last full dump are not known yet), the queued destroy events, and every flow
    /// still open handed on (as partial).
    async fn finish(
        mut self,
        ended_tx: &Sender<Vec<EndedFlow>>,
    ) -> Result<TrackerStats, StageError> {
        if self.last_plan == Some(Plan::Exact) {
            let start = tokio::time::Instant::now();
            let now_ns = start.duration_since(self.grid0).as_nanos() as u64;
            match full_dump(self.tick_parts(), now_ns, Why::Due).await {
                Ok(Some(d)) => {
                    dump_done(&d, &mut self.tracker, &mut self.out, &self.metrics, start)
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "the last full dump, at the stop, failed"),
            }
        }
        // Connections that closed before the stop have their events queued, unread: applied,
        // they end as closed, with their final counters. Left, they ended as cut off by the
        // shutdown, and without -writer-partial their records were not written at all.
        // Every batch of them: a loop that was behind (a loaded machine, churn) had several
        // queued, and reading one lost the rest's records with exit 0. Bounded, as the
        // churn may go on: what a 4 MiB buffer holds is a few batches.
        for _ in 0..STOP_DRAIN_BATCHES {
            if !self.drain_destroyed().1 {
                break;
            }
        }
        for sp in &mut self.spaces {
            spaces::count_lost(sp, &self.metrics);
        }
        resolve_sides(&mut self.tracker, &mut self.spaces, &mut self.out).await;
        self.tracker.finish(&mut self.out);
        let st = publish(&self.tracker, &self.metrics, self.accounts.as_deref());
        if !self.out.is_empty() {
            ended_tx.send(self.out).await.map_err(|_| StageError::DownstreamGone)?;
        }
        Ok(st)
    }
}

/// Hands the flows ended since the last hand-off to the analyzer without waiting; a batch
/// that finds no room (in batches, or in samples) is dropped and counted.
///
/// # Errors
/// The analyzer is gone.
fn hand_off(
    out: &mut Vec<EndedFlow>,
    ended_tx: &Sender<Vec<EndedFlow>>,
    metrics: &Metrics,
    drop_warn: &mut RateLimited,
) -> Result<(), StageError> {
    let n = out.len() as u64;
    let samples: u64 = out.iter().map(|e| e.sample_count() as u64).sum();
    let room = metrics.ended_queue_samples.get() + samples <= MAX_QUEUED_SAMPLES
        || metrics.ended_queue_samples.get() == 0;
    // The next batch starts with room for as many: grown from empty, a Vec of these large
    // entries was reallocated and copied about log2(n) times each batch (benches/RESULTS.md,
    // D27).
    let batch = std::mem::replace(out, Vec::with_capacity(out.len()));
    let sent = if room { ended_tx.try_send(batch) } else { Err(TrySendError::Full(batch)) };
    match sent {
        Ok(()) => {
            metrics.ended_queue_samples.add(samples);
            metrics.ended_queue.set((ended_tx.max_capacity() - ended_tx.capacity()) as u64);
        }
        Err(TrySendError::Full(_)) => {
            metrics.records_dropped.add(n);
            if let Some(more) = drop_warn.hit() {
                tracing::error!(
                    flows = n,
                    drops_since_last_warning = more,
                    "analyzer is behind: ended flows dropped (counted in records_dropped)"
                );
            }
        }
        Err(TrySendError::Closed(_)) => return Err(StageError::DownstreamGone),
    }
    Ok(())
}

mod destroyed;
pub mod namespaces;
pub mod pace;
mod spaces;
mod tick;
use destroyed::apply_destroyed;
pub use spaces::{Space, SpaceUpdate, Walk};
use tick::{Tick, dump_done, dump_failed, exact_poll, full_dump, resolve_sides, skip_missed_ticks};

#[cfg(test)]
mod tests;
