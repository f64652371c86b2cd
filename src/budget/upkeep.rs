//! What the process spends besides the budget's own work (sampling, naming) and besides the
//! work pushed at it (destroy events, records to analyse, write and send, scrapes of the
//! HTTP server): the ticks' bookkeeping, the runtime's wake-ups, the start-up. Its upkeep.
//!
//! Why it is charged: `--cpu-budget 2` reads as "this monitor takes about 2 % of a core",
//! and what a user checks it with is `top`, which sees the whole process. On an idle host
//! the upkeep is small (0.3–0.4 ms a second here) but the start-up is not (20–30 ms), and
//! uncharged they put an idle monitor's first 10 s a tenth over its budget
//! (benches/RESULTS.md, "budget").
//!
//! How it is measured: the process's CPU clock, less the budget's spenders (their own
//! counters), less the pushed work. The pushed work is measured where it is done: the
//! threads whose whole work is pushed at us register their CPU clocks
//! ([`Budget::pushed_thread`]); the tasks that share the runtime's threads with sampling
//! (destroy events, the analysis) add what each batch took ([`Budget::pushed`]).
//!
//! Why at most [`UPKEEP_CAP`] of the budget: an unoptimised build's upkeep is half the whole
//! budget (0.9 % of a core at idle here, against under 0.05 % for a release build); charged
//! whole it left nothing to naming and held full dumps at their least share, and kernel
//! tests failed on it, as they did with a quarter. What is over
//! the cap is counted as uncharged (`cgmon_upkeep_uncharged_cpu_seconds_total`), never
//! hidden.

use super::Budget;
use crate::clock::ThreadClock;
use crate::locks::Locked;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The most of the budget the upkeep is charged, on average: a tenth. A release build's
/// upkeep is about a fiftieth of the 2 % default on an idle host and a fifteenth with 200
/// busy flows polled every tick; a debug build's is half of it.
pub const UPKEEP_CAP: f64 = 0.1;

/// How much of the cap may be saved up and spent at once: fifteen seconds' worth, which
/// covers a release build's start-up (20–30 ms here, against 30 ms at the 2 % default).
pub const UPKEEP_SAVED: Duration = Duration::from_secs(15);

/// Weight of the newest tick in the upkeep's smoothed share.
const EWMA: f64 = 0.1;

/// The upkeep's accounts (inside [`Budget`]).
#[derive(Debug, Default)]
pub(super) struct Upkeep {
    /// The CPU clocks of the threads whose whole work is pushed at us.
    threads: Vec<ThreadClock>,
    /// The upkeep split off the process's CPU so far, ns.
    total_ns: u64,
    /// Of it, what was over the cap and not charged, ns.
    uncharged_ns: u64,
    /// What may still be charged, ns (the cap's savings); `None` until the first split.
    allowance_ns: Option<f64>,
    /// When the last split was made.
    at: Option<Instant>,
    /// The charged upkeep's smoothed share of a core.
    share: f64,
    /// The most of the budget it is charged; [`UPKEEP_CAP`] unless set.
    cap: Option<f64>,
}

/// A thread's registration as pushed work ([`Budget::pushed_thread`]).
#[derive(Debug)]
pub struct PushedThread<'a> {
    budget: &'a Budget,
    clock: Option<ThreadClock>,
}

impl Drop for PushedThread<'_> {
    fn drop(&mut self) {
        let Some(c) = self.clock else { return };
        let mut u = self.budget.upkeep.locked();
        u.threads.retain(|t| !t.same(&c));
        self.budget.pushed(crate::clock::thread_cpu_ns());
    }
}

/// The upkeep's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UpkeepFigures {
    /// Split off the process's CPU so far, ns.
    pub total_ns: u64,
    /// Of it, over the cap and not charged, ns.
    pub uncharged_ns: u64,
    /// The pushed work so far, ns.
    pub pushed_ns: u64,
}

impl Budget {
    /// Charges the upkeep up to `cap` of the budget (at the start; [`UPKEEP_CAP`] unless
    /// set).
    pub fn set_upkeep_cap(&self, cap: f64) {
        self.upkeep.locked().cap = Some(cap.clamp(0.0, 1.0));
    }

    /// `ns` of pushed work done on a thread that also does the budget's work (a batch of
    /// destroy events, a batch of records analysed): left out of the upkeep.
    pub fn pushed(&self, ns: u64) {
        self.pushed_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The calling thread's whole work is pushed at us (a writer, a sink, the HTTP server):
    /// its CPU is left out of the upkeep while the guard lives. Take it once, in the
    /// thread, as it starts; when it drops (the thread ends), the thread's CPU is added to
    /// the pushed work for good, and its clock (which an ended thread no longer has) is
    /// read no more.
    pub fn pushed_thread(&self) -> PushedThread<'_> {
        let clock = ThreadClock::current();
        if let Some(c) = clock {
            self.upkeep.locked().threads.push(c);
        }
        PushedThread { budget: self, clock }
    }

    /// The upkeep's figures so far (the pushed threads' clocks read now).
    pub fn upkeep(&self) -> UpkeepFigures {
        let mut u = self.upkeep.locked();
        let threads: u64 = u.threads.iter_mut().map(ThreadClock::read).sum();
        UpkeepFigures {
            total_ns: u.total_ns,
            uncharged_ns: u.uncharged_ns,
            pushed_ns: threads + self.pushed_ns.load(Ordering::Relaxed),
        }
    }

    /// Splits the process's CPU at `now`: `process_ns` in all, of which `budgeted_ns` went
    /// to sampling and naming (their own counters). What is neither that nor pushed work is
    /// upkeep: the new part of it is charged to the ledger up to the cap's savings. Returns
    /// the charged upkeep's smoothed share of a core, which the sampling plan leaves it.
    pub fn charge_upkeep_at(&self, process_ns: u64, budgeted_ns: u64, now: Instant) -> f64 {
        let mut u = self.upkeep.locked();
        let threads: u64 = u.threads.iter_mut().map(ThreadClock::read).sum();
        let pushed = threads + self.pushed_ns.load(Ordering::Relaxed);
        let total = process_ns.saturating_sub(budgeted_ns).saturating_sub(pushed);
        // Never less than before: clocks read a moment apart can make one split smaller.
        let new = total.saturating_sub(u.total_ns);
        u.total_ns = u.total_ns.max(total);
        let cap = self.share() * u.cap.unwrap_or(UPKEEP_CAP);
        let since = u.at.map_or(0.0, |at| now.saturating_duration_since(at).as_nanos() as f64);
        let most = cap * UPKEEP_SAVED.as_nanos() as f64;
        let allowance = u.allowance_ns.map_or(most, |a| (a + cap * since).min(most));
        let charged = (new as f64).min(allowance).max(0.0);
        u.allowance_ns = Some(allowance - charged);
        u.uncharged_ns += new - charged as u64;
        if since > 0.0 {
            u.share += EWMA * (charged / since - u.share);
        }
        u.at = Some(now);
        drop(u);
        self.spend_at(charged as u64, now);
        self.upkeep.locked().share
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_upkeep_is_what_is_neither_budgeted_nor_pushed_and_is_charged() {
        let b = Budget::new(0.02);
        let t0 = Instant::now();
        // 30 ms of process CPU: 10 ms sampling, 15 ms pushed, 5 ms upkeep.
        b.pushed(15 * MS);
        b.charge_upkeep_at(30 * MS, 10 * MS, t0);
        let f = b.upkeep();
        assert_eq!((f.total_ns, f.uncharged_ns, f.pushed_ns), (5 * MS, 0, 15 * MS));
        // The 5 ms are owed: a quarter of a second at 2 % (less what the moment earned).
        let wait = b.wait_at(t0).as_nanos() as u64;
        assert!((240 * MS..=250 * MS).contains(&wait), "{wait} ns");
        // A second split counts only what is new.
        b.charge_upkeep_at(31 * MS, 10 * MS, t0 + Duration::from_millis(100));
        assert_eq!(b.upkeep().total_ns, 6 * MS);
    }

    #[test]
    fn the_charge_is_capped_at_a_tenth_of_the_budget_and_the_rest_is_counted() {
        // An upkeep of 5 % of a core under a 2 % budget, for 60 s.
        let b = Budget::new(0.02);
        let t0 = Instant::now();
        let mut share = 0.0;
        for i in 0..=600u64 {
            share = b.charge_upkeep_at(i * 5 * MS, 0, t0 + Duration::from_millis(100 * i));
        }
        let f = b.upkeep();
        assert_eq!(f.total_ns, 3000 * MS);
        // Charged: the fifteen seconds saved at the start and 0.2 % of a core since.
        let charged = (f.total_ns - f.uncharged_ns) as f64;
        let want = 0.002 * 75e9;
        assert!((charged - want).abs() < 2.0 * MS as f64, "{charged} ns charged, {want} wanted");
        assert!((share - 0.002).abs() < 0.0002, "smoothed share {share}");
    }

    #[test]
    fn a_cap_of_nothing_charges_nothing_but_still_splits() {
        let b = Budget::new(0.02);
        b.set_upkeep_cap(0.0);
        b.charge_upkeep_at(10 * MS, 2 * MS, Instant::now());
        let f = b.upkeep();
        assert_eq!((f.total_ns, f.uncharged_ns), (8 * MS, 8 * MS));
        assert_eq!(b.wait(), Duration::ZERO);
    }

    #[test]
    fn no_budget_charges_nothing_but_still_splits() {
        let b = Budget::new(0.0);
        b.charge_upkeep_at(10 * MS, 2 * MS, Instant::now());
        assert_eq!(b.upkeep().total_ns, 8 * MS);
        assert_eq!(b.wait(), Duration::ZERO);
    }

    #[test]
    fn a_pushed_threads_cpu_is_left_out() {
        let b = std::sync::Arc::new(Budget::new(0.02));
        let b2 = b.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            let _pushed = b2.pushed_thread();
            let t = crate::clock::thread_cpu_ns();
            while crate::clock::thread_cpu_ns() - t < 20 * MS {
                std::hint::spin_loop();
            }
            tx.send(()).unwrap();
            go_rx.recv().unwrap();
        });
        rx.recv().unwrap();
        // Alive: read through its clock.
        let alive = b.upkeep().pushed_ns;
        assert!(alive >= 20 * MS, "{alive} ns");
        go_tx.send(()).unwrap();
        h.join().unwrap();
        // Ended: its CPU stays counted, once.
        let ended = b.upkeep().pushed_ns;
        assert!((alive..alive + 10 * MS).contains(&ended), "{ended} ns after {alive}");
    }
}
