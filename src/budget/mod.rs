//! One CPU budget (`--cpu-budget`) for everything the monitor does on its own initiative:
//! full dumps, exact polls and namespace walks (the sampling task, paced by `poll/pace.rs`)
//! and the process walks that name each flow's program (`processes`). Work the kernel
//! pushes at us (destroy events, records to write) is not in it: it cannot be put off.
//!
//! A ledger of CPU time: it earns the budget's share of every second that passes, at most
//! [`SAVED`] of them ahead, and each spender charges what its thread spent. Sampling is
//! never refused (its plan is paced beforehand); naming spends only while the ledger is not
//! in debt, so it takes what the plan leaves. The order when the budget is short:
//! - the hot flows' polls, whatever they cost (the plan says when that is over budget);
//! - full dumps, at least a quarter of the budget (`MIN_DUMP_SHARE`, poll/pace.rs); while
//!   names wait, the plan leaves [`NAMING_SHARE`] of the budget to naming (without it,
//!   on any host where something moves, full dumps would take the whole budget and no
//!   program would ever be named);
//! - naming: what is left. Names that would wait past the walker's queue are not looked
//!   for, and counted as skipped.
//!
//! With no budget (`--cpu-budget 0`) nothing waits: a full dump every tick, as cgmon does,
//! and naming as fast as it goes.
//!
//! The rest of the process is charged too, up to a tenth of the budget: its upkeep
//! (ticks, the runtime, the start-up; `upkeep.rs`), so that on an idle host the whole
//! process, as `top` sees it, stays within the budget. Work the kernel and users push at us
//! is measured and left out.
//!
//! Every thread that spends the budget already holds the metrics, so the ledger is kept
//! there (`Metrics::budget`).

mod upkeep;

pub use upkeep::{PushedThread, UPKEEP_CAP, UPKEEP_SAVED, UpkeepFigures};

use crate::locks::Locked;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The most a ledger saves up while nothing spends: a second's share. A walk or a dump
/// after a quiet spell may spend that much at once, and no more.
pub const SAVED: Duration = Duration::from_secs(1);

/// The share of the budget the sampling plan leaves to naming while names wait.
pub const NAMING_SHARE: f64 = 0.5;

/// The budget's ledger.
#[derive(Debug, Default)]
pub struct Budget {
    /// The share of one core, in millionths (0: no budget).
    share_ppm: AtomicU64,
    ledger: Mutex<Ledger>,
    /// Naming requests waiting for the budget (set by the walker).
    waiting: AtomicU64,
    /// Whether naming has skipped a flow yet (said once in the log).
    skipped: std::sync::atomic::AtomicBool,
    /// Pushed work measured on threads that also do the budget's work, ns (`upkeep.rs`).
    pushed_ns: AtomicU64,
    /// The rest of the process's CPU (`upkeep.rs`).
    upkeep: Mutex<upkeep::Upkeep>,
}

#[derive(Debug, Default)]
struct Ledger {
    /// CPU ns that may be spent now; below zero, owed.
    level_ns: f64,
    /// When `level_ns` was last brought up to date; None until the first charge.
    at: Option<Instant>,
}

impl Budget {
    /// A budget of `share` of one core (0: none).
    pub fn new(share: f64) -> Self {
        let b = Budget::default();
        b.set_share(share);
        b
    }

    /// Sets the share of one core (`--cpu-budget`), once, at the start.
    pub fn set_share(&self, share: f64) {
        self.share_ppm.store((share.max(0.0) * 1e6).round() as u64, Ordering::Relaxed);
    }

    /// The share of one core; 0 when there is no budget.
    pub fn share(&self) -> f64 {
        self.share_ppm.load(Ordering::Relaxed) as f64 / 1e6
    }

    /// Whether there is a budget at all.
    pub fn limited(&self) -> bool {
        self.share_ppm.load(Ordering::Relaxed) > 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.locked()
    }

    /// Brings the ledger up to `now`: the share of the time since, up to [`SAVED`]'s.
    fn earn(&self, l: &mut Ledger, now: Instant) {
        let share = self.share();
        let since = l.at.map_or(0.0, |at| now.saturating_duration_since(at).as_nanos() as f64);
        let cap = share * SAVED.as_nanos() as f64;
        l.level_ns = (l.level_ns + share * since).min(cap);
        l.at = Some(now);
    }

    /// `ns` of CPU spent (by either spender) at `now`.
    pub fn spend_at(&self, ns: u64, now: Instant) {
        if !self.limited() {
            return;
        }
        let mut l = self.lock();
        self.earn(&mut l, now);
        l.level_ns -= ns as f64;
    }

    /// `ns` of CPU spent now.
    pub fn spend(&self, ns: u64) {
        self.spend_at(ns, Instant::now());
    }

    /// How long naming must wait at `now` before it may spend: zero when the ledger is not
    /// in debt (or there is no budget), else the time the debt takes to repay.
    pub fn wait_at(&self, now: Instant) -> Duration {
        if !self.limited() {
            return Duration::ZERO;
        }
        let mut l = self.lock();
        self.earn(&mut l, now);
        if l.level_ns >= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_nanos((-l.level_ns / self.share()).ceil() as u64)
    }

    /// [`wait_at`](Self::wait_at) now.
    pub fn wait(&self) -> Duration {
        self.wait_at(Instant::now())
    }

    /// Naming requests waiting for the budget now.
    pub fn set_waiting(&self, n: usize) {
        self.waiting.store(n as u64, Ordering::Relaxed);
    }

    /// Naming requests waiting for the budget.
    pub fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
    }

    /// The share of a core the sampling plan leaves to naming now: [`NAMING_SHARE`] of the
    /// budget while names wait, else none.
    pub fn naming_reserve(&self) -> f64 {
        if self.waiting() > 0 { self.share() * NAMING_SHARE } else { 0.0 }
    }

    /// True the first time it is called: the first flow naming skips is said in the log,
    /// once.
    pub fn first_skip(&self) -> bool {
        !self.skipped.swap(true, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn naming_waits_while_the_ledger_is_in_debt_and_the_debt_is_repaid_at_the_share() {
        let b = Budget::new(0.02);
        let t0 = Instant::now();
        // Nothing saved at the start: 20 ms spent at once (the first dumps) is owed.
        b.spend_at(20_000_000, t0);
        assert_eq!(b.wait_at(t0), 1000 * MS, "20 ms at 2 % of a core: a second");
        assert_eq!(b.wait_at(t0 + 400 * MS), 600 * MS);
        assert_eq!(b.wait_at(t0 + 1000 * MS), Duration::ZERO);
        // A quiet minute saves a second's share, no more: 20 ms may go at once, then 1 ms
        // more is owed for 50 ms.
        let later = t0 + 61_000 * MS;
        assert_eq!(b.wait_at(later), Duration::ZERO);
        b.spend_at(21_000_000, later);
        assert_eq!(b.wait_at(later), 50 * MS);
    }

    #[test]
    fn over_any_span_the_spenders_together_keep_to_the_share() {
        // Sampling charges 1.5 ms every 100 ms; naming spends 5 ms steps whenever it may.
        // Over 60 s both together come to the budget, within what a second saves.
        let b = Budget::new(0.02);
        let t0 = Instant::now();
        let (mut sampling, mut naming) = (0u64, 0u64);
        let mut now = t0;
        while now < t0 + 60_000 * MS {
            if (now - t0).as_millis().is_multiple_of(100) {
                b.spend_at(1_500_000, now);
                sampling += 1_500_000;
            }
            if b.wait_at(now).is_zero() {
                b.spend_at(5_000_000, now);
                naming += 5_000_000;
            }
            now += MS;
        }
        let budget = 0.02 * 60e9;
        let total = (sampling + naming) as f64;
        assert!(total <= budget + 0.02e9 + 5e6, "{total} of {budget}");
        assert!(total >= budget * 0.97, "{total} of {budget}: naming took what was left");
        assert!(naming > 0 && sampling == 900_000_000);
    }

    #[test]
    fn no_budget_never_waits_and_reserves_nothing() {
        let b = Budget::new(0.0);
        b.spend(1_000_000_000);
        assert_eq!(b.wait(), Duration::ZERO);
        b.set_waiting(10);
        assert_eq!(b.naming_reserve(), 0.0);
        let b = Budget::new(0.02);
        assert_eq!(b.naming_reserve(), 0.0, "nothing waits");
        b.set_waiting(10);
        assert!((b.naming_reserve() - 0.01).abs() < 1e-12);
    }
}
