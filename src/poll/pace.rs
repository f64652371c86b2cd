//! When to dump the whole host and when to poll only the hot flows.
//!
//! Every tick samples the hot flows (those whose counters move, see `tiers.rs`). It does so
//! with a full dump when one is due, or when asking for the hot flows one by one would cost
//! more than a dump; else with an exact poll. Full dumps are due as often as the CPU budget
//! allows once the hot flows' polls are paid for, never more often than every tick, and
//! never less often than the user's cap (`--max-full-interval`) when one is set. Without a
//! cap the budget alone sets the pace, at any size: at a million sockets a dump costs about
//! a second of CPU, so at 2 % dumps are close to a minute apart, and new flows are found
//! that late (the metrics and the status page say how late; docs/scale.md). Full dumps always
//! get at least [`MIN_DUMP_SHARE`] of the budget: when the hot flows' polls need more, or a
//! cap forces dumps more often than the budget pays for, the plan is over budget, and says
//! so ([`Pacer::planned_share`]). Costs are the sampling thread's measured CPU
//! time (a dump's includes the tracker's work on its sockets), smoothed, never a model:
//! until an exact poll has been measured, its cost per socket is guessed as
//! [`EXACT_PRIOR_RATIO`] times a dump's, the ratio measured on this kernel (docs/kernel.md).
//!
//! A full dump with a budget walks only the network namespaces in which something moved
//! since their last walk, and each at least every [`NAMESPACE_REWALK`]
//! (`poll/spaces.rs`, `Walk::Moved`); its cost, and so the pace, follows what it walked.
//!
//! Pure: given costs and times, it decides; the poll task measures and acts.

use std::time::Duration;

/// `--cpu-budget`'s default: 2 % of one core. On the host the design aims at (20,000 idle
/// and 200 busy flows, 100 ms ticks) the busy flows' exact polls take about 0.5 % and full
/// dumps get the rest, about one every 1.5–2 s: under a tenth of what dumping every tick
/// costs (benches/RESULTS.md, D10). A host of a few hundred sockets dumps in well under
/// 2 % of a tick, so there the budget never binds and every tick is a full dump.
pub const DEFAULT_CPU_BUDGET: f64 = 0.02;

/// The longest a network namespace where nothing moves goes unwalked by full dumps (each
/// goes after 30 to 60 s, spread: `poll/spaces.rs`). It is no cap on the full-dump interval,
/// which follows the budget: as a cap it held the monitor over its budget on large hosts
/// (benches/RESULTS.md, D13).
///
/// Why a minute: where no segment moved, no socket opened and none changed what a record
/// holds; sockets that end without a segment (a FIN-WAIT-2 timeout) send their destroy
/// events. The walk is a safety net for what the counters cannot tell (a receive queue
/// drained, a TIME-WAIT minisocket expired where events are not read), and it costs a whole
/// dump: every 5–10 s it was most of an idle host's CPU (benches/RESULTS.md, D30).
pub const NAMESPACE_REWALK: Duration = Duration::from_secs(60);

/// The least share of the budget full dumps get, whatever the hot flows' polls take: without
/// it a hot set that used the whole budget would stop full dumps, and new flows would never
/// be found. A quarter: polls of a few hundred busy flows take about a quarter of the 2 %
/// default (benches/RESULTS.md, D10), so the floor binds only past that.
pub const MIN_DUMP_SHARE: f64 = 0.25;

/// An exact request's CPU cost over a dump's per socket, until measured: 2.0–2.5 µs
/// against 0.95–1.03 µs (docs/kernel.md, "Asking for one socket").
pub const EXACT_PRIOR_RATIO: f64 = 2.5;

/// Weight of the newest measurement in the smoothed costs.
const EWMA: f64 = 0.3;

/// What a tick does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// A full dump, and why.
    Full(Why),
    /// An exact poll of the hot flows.
    Exact,
}

/// Why a tick dumps the whole host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// No budget: every tick dumps (cgmon's way).
    Always,
    /// The first tick (costs and flows are not known yet), and the second when a dump
    /// costs at most a second of the budget (which flows move is known from it).
    First,
    /// The budget's interval has passed since the last full dump.
    Due,
    /// The hot flows are so many that asking for each would cost more.
    Cheaper,
}

/// The pacing state.
#[derive(Debug, Clone)]
pub struct Pacer {
    interval_ns: u64,
    budget: f64,
    /// The user's cap on the full-dump interval, ns (`--max-full-interval`).
    cap_ns: Option<u64>,
    /// Smoothed CPU ns of a full dump, and sockets in the last one.
    full_ns: Option<f64>,
    sockets: u64,
    /// Smoothed CPU ns per exact request, once measured.
    exact_ns: Option<f64>,
    last_full_ns: Option<u64>,
    /// Full dumps measured.
    fulls: u32,
    /// The share of a core left to naming programs now (`crate::budget`).
    naming: f64,
    /// The share of a core the process's upkeep is charged (`crate::budget`, `upkeep.rs`).
    upkeep: f64,
}

fn smooth(old: Option<f64>, new: f64) -> f64 {
    old.map_or(new, |o| o + EWMA * (new - o))
}

impl Pacer {
    /// Ticks every `interval`; `budget` is a share of one core (0: every tick dumps); full
    /// dumps at least every `cap` when one is given.
    pub fn new(interval: Duration, budget: f64, cap: Option<Duration>) -> Self {
        let interval_ns = interval.as_nanos().max(1) as u64;
        Self {
            interval_ns,
            budget: budget.max(0.0),
            cap_ns: cap.map(|c| (c.as_nanos() as u64).max(interval_ns)),
            full_ns: None,
            sockets: 0,
            exact_ns: None,
            last_full_ns: None,
            fulls: 0,
            naming: 0.0,
            upkeep: 0.0,
        }
    }

    /// Whether exact polls are used at all.
    pub fn tiers(&self) -> bool {
        self.budget > 0.0
    }

    /// What the tick at `now_ns` does with `hot` flows in the hot set.
    pub fn plan(&self, now_ns: u64, hot: usize) -> Plan {
        if !self.tiers() {
            return Plan::Full(Why::Always);
        }
        // The first dump finds the flows, and the hot set among them: those whose tcp_info
        // says they sent or received lately (`tracker/tiers.rs`). The second, which tells
        // the rest that move, follows at once when it costs no more than a second of the
        // budget; a dearer one (45 ms at 20,000 sockets here) waits for the budget's pace
        // like any other.
        let (Some(full), Some(last)) = (self.full_ns, self.last_full_ns) else {
            return Plan::Full(Why::First);
        };
        if self.fulls < 2 && full <= self.budget * crate::budget::SAVED.as_nanos() as f64 {
            return Plan::Full(Why::First);
        }
        if now_ns.saturating_sub(last) >= self.full_interval_ns(hot) {
            return Plan::Full(Why::Due);
        }
        if hot as f64 * self.exact_request_ns() >= full {
            return Plan::Full(Why::Cheaper);
        }
        Plan::Exact
    }

    /// A full dump at `now_ns` of `sockets` sockets took `cpu_ns`.
    pub fn full_done(&mut self, now_ns: u64, cpu_ns: u64, sockets: u64) {
        self.full_ns = Some(smooth(self.full_ns, cpu_ns as f64));
        self.fulls = self.fulls.saturating_add(1);
        self.sockets = sockets;
        self.last_full_ns = Some(now_ns);
    }

    /// An exact poll of `asked` sockets took `cpu_ns`.
    pub fn exact_done(&mut self, cpu_ns: u64, asked: usize) {
        if asked > 0 {
            self.exact_ns = Some(smooth(self.exact_ns, cpu_ns as f64 / asked as f64));
        }
    }

    /// CPU ns an exact request costs: measured, else guessed from a dump's per socket.
    pub fn exact_request_ns(&self) -> f64 {
        self.exact_ns.unwrap_or_else(|| {
            let per_socket = self.full_ns.unwrap_or(0.0) / self.sockets.max(1) as f64;
            per_socket * EXACT_PRIOR_RATIO
        })
    }

    /// Leaves `share` of a core to naming programs (while names wait: the budget's
    /// [`NAMING_SHARE`](crate::budget::NAMING_SHARE)), taken from full dumps down to their
    /// [`MIN_DUMP_SHARE`].
    pub fn set_naming_reserve(&mut self, share: f64) {
        self.naming = share.max(0.0);
    }

    /// The share of a core the process's upkeep is charged (measured, smoothed): taken
    /// from full dumps down to their [`MIN_DUMP_SHARE`].
    pub fn set_upkeep(&mut self, share: f64) {
        self.upkeep = share.max(0.0);
    }

    /// The tick, ns.
    pub fn interval_ns(&self) -> u64 {
        self.interval_ns
    }

    /// When the last full dump was taken (the caller's clock), once one was.
    pub fn last_full_ns(&self) -> Option<u64> {
        self.last_full_ns
    }

    /// Smoothed CPU ns of a full dump, once one was measured.
    pub fn full_dump_ns(&self) -> Option<f64> {
        self.full_ns
    }

    /// The time between full dumps that the budget allows with `hot` flows polled every
    /// tick: a dump's cost over the share of a core the polls, naming and the upkeep leave
    /// (at least [`MIN_DUMP_SHARE`] of the budget), then the user's cap.
    pub fn full_interval_ns(&self, hot: usize) -> u64 {
        let Some(full) = self.full_ns else { return self.interval_ns };
        let left = (self.budget - self.polls_share(hot) - self.naming - self.upkeep)
            .max(self.budget * MIN_DUMP_SHARE);
        let paced = if left > 0.0 { (full / left).min(u64::MAX as f64) as u64 } else { u64::MAX };
        paced.min(self.cap_ns.unwrap_or(u64::MAX)).max(self.interval_ns)
    }

    /// The share of a core that polling `hot` flows every tick costs.
    fn polls_share(&self, hot: usize) -> f64 {
        hot as f64 * self.exact_request_ns() / self.interval_ns as f64
    }

    /// The share of a core the plan costs with `hot` flows: their polls, and full dumps at
    /// [`full_interval_ns`](Self::full_interval_ns). Above the budget when the polls leave
    /// dumps less than [`MIN_DUMP_SHARE`] of it, or the cap makes dumps more frequent than
    /// the budget pays for. 0 until a dump was measured.
    pub fn planned_share(&self, hot: usize) -> f64 {
        let Some(full) = self.full_ns else { return 0.0 };
        if !self.tiers() {
            return full / self.interval_ns as f64;
        }
        self.polls_share(hot) + full / self.full_interval_ns(hot) as f64
    }

    /// Whether the plan with `hot` flows costs more than the budget (by more than rounding).
    pub fn over_budget(&self, hot: usize) -> bool {
        self.tiers() && self.planned_share(hot) > self.budget * 1.001
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn no_budget_dumps_every_tick() {
        let mut p = Pacer::new(Duration::from_millis(100), 0.0, None);
        p.full_done(0, 25 * MS, 20_000);
        assert!(!p.tiers());
        assert_eq!(p.plan(100 * MS, 0), Plan::Full(Why::Always));
    }

    #[test]
    fn the_budget_sets_the_full_dump_pace() {
        // 20,000 sockets, 25 ms a dump, 100 ms ticks, 2 % of a core.
        let mut p = Pacer::new(Duration::from_millis(100), 0.02, None);
        assert_eq!(p.plan(0, 0), Plan::Full(Why::First));
        p.full_done(0, 25 * MS, 20_000);
        // 25 ms is more than a second of the budget (20 ms): the first dump's hot set
        // stands, and the next goes at the budget's pace.
        assert_eq!(p.plan(100 * MS, 0), Plan::Exact);
        // A cheap first dump is followed at once by the second.
        let mut c = Pacer::new(Duration::from_millis(100), 0.02, None);
        c.full_done(0, 2 * MS, 500);
        assert_eq!(c.plan(100 * MS, 0), Plan::Full(Why::First));
        c.full_done(100 * MS, 2 * MS, 500);
        assert_eq!(c.plan(150 * MS, 0), Plan::Exact);
        // Nothing hot: the whole budget is for dumps, 25 ms / 2 % = 1.25 s apart.
        assert_eq!(p.full_interval_ns(0), 1250 * MS);
        assert_eq!(p.plan(1200 * MS, 0), Plan::Exact);
        assert_eq!(p.plan(1250 * MS, 0), Plan::Full(Why::Due));
        // 200 hot flows at 2.5 µs (measured) take 0.5 % of the core: dumps get 1.5 %.
        p.exact_done(500_000, 200);
        assert_eq!(p.full_interval_ns(200), 1666 * MS + 666_666);
        assert!(!p.over_budget(200));
        // A budget the polls use up: dumps still get a quarter of it, 25 ms / 0.5 % = 5 s,
        // and the plan says it is over budget: 2,000 × 2.5 µs a tick is 5 %, plus 0.5 %.
        assert_eq!(p.full_interval_ns(2000), 5000 * MS);
        assert!(p.over_budget(2000));
        assert!((p.planned_share(2000) - 0.055).abs() < 1e-9);
    }

    #[test]
    fn no_cap_unless_the_user_sets_one() {
        // 200,000 sockets at 1.43 µs: 286 ms a dump. At 2 % that is 14.3 s between dumps,
        // past where a 10 s cap would have cut in, and within the budget.
        let mut p = Pacer::new(Duration::from_millis(100), 0.02, None);
        p.full_done(0, 286 * MS, 200_000);
        p.full_done(0, 286 * MS, 200_000);
        assert!(p.full_interval_ns(0).abs_diff(14_300 * MS) <= 1);
        assert!(!p.over_budget(0));
        assert!((p.planned_share(0) - 0.02).abs() < 1e-9);
        // A million sockets, 1.2 s a dump: a minute apart.
        let mut m = Pacer::new(Duration::from_millis(100), 0.02, None);
        m.full_done(0, 1200 * MS, 1_000_000);
        m.full_done(0, 1200 * MS, 1_000_000);
        assert!(m.full_interval_ns(0).abs_diff(60_000 * MS) <= 1);
        // With a 10 s cap the dumps come every 10 s, and the plan is over budget: 2.86 %.
        let mut c = Pacer::new(Duration::from_millis(100), 0.02, Some(Duration::from_secs(10)));
        c.full_done(0, 286 * MS, 200_000);
        c.full_done(0, 286 * MS, 200_000);
        assert_eq!(c.full_interval_ns(0), 10_000 * MS);
        assert!(c.over_budget(0));
        assert!((c.planned_share(0) - 0.0286).abs() < 1e-9);
        // A cap below the tick is the tick.
        let t = Pacer::new(Duration::from_millis(100), 0.02, Some(Duration::from_millis(1)));
        assert_eq!(t.cap_ns, Some(100 * MS));
    }

    #[test]
    fn a_small_host_dumps_every_tick() {
        // 200 sockets dump in 0.25 ms, 0.25 % of a 100 ms tick: under 2 %, every tick dumps.
        let mut p = Pacer::new(Duration::from_millis(100), 0.02, None);
        p.full_done(0, 250_000, 200);
        p.full_done(0, 250_000, 200);
        assert_eq!(p.full_interval_ns(0), 100 * MS);
        assert_eq!(p.plan(100 * MS, 0), Plan::Full(Why::Due));
    }

    #[test]
    fn while_names_wait_dumps_leave_them_half_the_budget_and_keep_a_quarter() {
        // 20,000 sockets, 25 ms a dump, 2 %: 1.25 s apart with nothing else to pay for.
        let mut p = Pacer::new(Duration::from_millis(100), 0.02, None);
        p.full_done(0, 25 * MS, 20_000);
        p.full_done(0, 25 * MS, 20_000);
        assert_eq!(p.full_interval_ns(0), 1250 * MS);
        // Names waiting: dumps get the other 1 %, 2.5 s apart.
        p.set_naming_reserve(0.01);
        assert_eq!(p.full_interval_ns(0), 2500 * MS);
        assert!(!p.over_budget(0));
        // With 200 hot flows at 2.5 µs (0.5 %) they keep a quarter: 0.5 %, 5 s apart.
        p.exact_done(500_000, 200);
        assert_eq!(p.full_interval_ns(200), 5000 * MS);
        // Named: the whole rest again.
        p.set_naming_reserve(0.0);
        assert_eq!(p.full_interval_ns(0), 1250 * MS);
        // The upkeep charged 0.5 %: dumps get 1.5 %.
        p.set_upkeep(0.005);
        assert_eq!(p.full_interval_ns(0), 1666 * MS + 666_666);
    }

    #[test]
    fn a_large_hot_set_takes_the_cheaper_full_dump() {
        let mut p = Pacer::new(Duration::from_millis(100), 0.5, None);
        p.full_done(0, 25 * MS, 20_000); // 1.25 µs a socket
        p.full_done(0, 25 * MS, 20_000);
        // Unmeasured, an exact request is guessed at 2.5 × 1.25 µs: 8,000 of them cost a dump.
        assert_eq!(p.plan(10 * MS, 7_999), Plan::Exact);
        assert_eq!(p.plan(10 * MS, 8_000), Plan::Full(Why::Cheaper));
        // Measured at 5 µs, the crossover moves to 5,000.
        p.exact_done(5 * MS, 1000);
        assert_eq!(p.plan(10 * MS, 4_999), Plan::Exact);
        assert_eq!(p.plan(10 * MS, 5_000), Plan::Full(Why::Cheaper));
    }
}
