//! Verdicts per service pair: how many flows ended with each verdict, and how long flows
//! spent limited by each cause, by `service` and `dest_service` (the records' `Service`
//! and `DestService`), for `cgmon_flows_total` and `cgmon_flow_limited_seconds_total`.
//!
//! Bounded as the per-service byte counters are: the first K distinct services
//! (`--metrics-top-services`) and destinations (`--metrics-top-destinations`) keep their
//! names, later ones count under `other`; so the series stay at most (K₁ + 1)(K₂ + 1) × the
//! verdicts, however many services come and go.

use crate::locks::Locked;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The label that services and destinations beyond the first `top` share.
pub const OTHER: &str = "other";

/// The causes time is limited by, as the records' `TimeShares` name them (and the
/// diagnosis's verdicts).
pub const LIMITS: [&str; 4] = ["receiver-window", "send-buffer", "network", "application"];

/// The `cause` label of a flow whose diagnosis names no cause, as ClickHouse's `Cause`
/// column spells it: one spelling everywhere, never a blank.
pub const NO_CAUSE: &str = "none";

/// Distinct services (and destinations) named, unless [`VerdictCounts::set_top`] says
/// otherwise (`--metrics-top-services`' default).
pub const DEFAULT_TOP: usize = 20;

/// The counts, behind one lock (the writer adds a batch at a time; a scrape reads).
#[derive(Debug)]
pub struct VerdictCounts {
    inner: Mutex<Inner>,
}

impl Default for VerdictCounts {
    fn default() -> Self {
        let inner = Inner { top: DEFAULT_TOP, top_dests: DEFAULT_TOP, ..Inner::default() };
        Self { inner: Mutex::new(inner) }
    }
}

#[derive(Debug, Default)]
struct Inner {
    top: usize,
    top_dests: usize,
    services: Vec<String>,
    dests: Vec<String>,
    /// (service, dest_service, verdict, cause) → flows; the names by their index in
    /// `services` and `dests` ([`OTHER_INDEX`] for `other`), so that counting a record
    /// copies no name.
    flows: BTreeMap<(u16, u16, &'static str, &'static str), u64>,
    /// (service, dest_service, limit) → seconds.
    limited: BTreeMap<(u16, u16, &'static str), f64>,
    /// (dest_service, outcome) → connects that never established.
    connects: BTreeMap<(u16, &'static str), u64>,
}

/// The causes of connects that never established (the tracker's `attempts::OUTCOMES`):
/// `cgmon_connect_failures_total`'s `outcome` label.
pub const CONNECT_OUTCOMES: [&str; 3] = ["refused", "syn-timeout", "abandoned"];

/// One series of `cgmon_flows_total`: service, dest_service, verdict, cause, flows.
pub type FlowCount = (String, String, &'static str, &'static str, u64);

/// The index that stands for `other`.
const OTHER_INDEX: u16 = u16::MAX;

impl Inner {
    fn names(&self, svc: u16, dst: u16) -> (String, String) {
        fn name(v: &[String], i: u16) -> String {
            v.get(usize::from(i)).map_or(OTHER, String::as_str).to_string()
        }
        (name(&self.services, svc), name(&self.dests, dst))
    }
}

/// One ended flow, as the counts take it.
#[derive(Debug, Clone, Copy)]
pub struct Ended<'a> {
    /// The record's `Service` (None: `unknown`).
    pub service: Option<&'a str>,
    /// Its `DestService` (None: `unknown`).
    pub dest_service: Option<&'a str>,
    /// Its verdict (one of the diagnosis's; None without a diagnosis: `unknown`).
    pub verdict: Option<&'static str>,
    /// Its cause (one of the diagnosis's; None when it names none: [`NO_CAUSE`]).
    pub cause: Option<&'static str>,
    /// Seconds limited by each of [`LIMITS`], in that order.
    pub limited_s: [f64; 4],
}

impl VerdictCounts {
    /// Keeps the first `services` distinct services, and `dests` destinations, under their
    /// names.
    pub fn set_top(&self, services: usize, dests: usize) {
        let mut g = self.lock();
        (g.top, g.top_dests) = (services, dests);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.locked()
    }

    /// Counts ended flows.
    pub fn add<'a>(&self, ended: impl IntoIterator<Item = Ended<'a>>) {
        let mut g = self.lock();
        let (top, top_dests) = (g.top, g.top_dests);
        for e in ended {
            let svc = bounded(&mut g.services, e.service.unwrap_or("unknown"), top);
            let dst = bounded(&mut g.dests, e.dest_service.unwrap_or("unknown"), top_dests);
            let verdict = e.verdict.unwrap_or("unknown");
            let cause = e.cause.unwrap_or(NO_CAUSE);
            *g.flows.entry((svc, dst, verdict, cause)).or_default() += 1;
            if let Some(&outcome) = CONNECT_OUTCOMES.iter().find(|&&o| o == cause) {
                *g.connects.entry((dst, outcome)).or_default() += 1;
            }
            for (limit, s) in LIMITS.iter().zip(e.limited_s) {
                if s > 0.0 {
                    *g.limited.entry((svc, dst, limit)).or_default() += s;
                }
            }
        }
    }

    /// (service, dest_service, verdict, cause, flows), in label order.
    pub fn flows(&self) -> Vec<FlowCount> {
        let g = self.lock();
        let mut v: Vec<_> = g
            .flows
            .iter()
            .map(|(&(s, d, verdict, cause), &n)| {
                let (s, d) = g.names(s, d);
                (s, d, verdict, cause, n)
            })
            .collect();
        v.sort_by(|a, b| (&a.0, &a.1, a.2, a.3).cmp(&(&b.0, &b.1, b.2, b.3)));
        v
    }

    /// (dest_service, outcome, connects), in label order: connects that never established.
    pub fn connect_failures(&self) -> Vec<(String, &'static str, u64)> {
        let g = self.lock();
        let mut v: Vec<_> =
            g.connects.iter().map(|(&(d, outcome), &n)| (g.names(0, d).1, outcome, n)).collect();
        v.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        v
    }

    /// (service, dest_service, limit, seconds), in label order.
    pub fn limited(&self) -> Vec<(String, String, &'static str, f64)> {
        let g = self.lock();
        let mut v: Vec<_> = g
            .limited
            .iter()
            .map(|(&(s, d, limit), &x)| {
                let (s, d) = g.names(s, d);
                (s, d, limit, x)
            })
            .collect();
        v.sort_by(|a, b| (&a.0, &a.1, a.2).cmp(&(&b.0, &b.1, b.2)));
        v
    }
}

/// The index of `name` when it is one of the first `top` seen (and then remembered), else
/// [`OTHER_INDEX`].
fn bounded(seen: &mut Vec<String>, name: &str, top: usize) -> u16 {
    // A service that is itself called "other" counts with the others: one series.
    if name == OTHER {
        return OTHER_INDEX;
    }
    if let Some(i) = seen.iter().position(|s| s == name) {
        return i as u16;
    }
    if seen.len() < top.min(usize::from(OTHER_INDEX)) {
        seen.push(name.to_string());
        return (seen.len() - 1) as u16;
    }
    OTHER_INDEX
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_pair_and_bounds_the_labels() {
        let c = VerdictCounts::default();
        c.set_top(2, 2);
        let e = |s: &'static str, d: &'static str, v| Ended {
            service: Some(s),
            dest_service: Some(d),
            verdict: Some(v),
            cause: (v == "network").then_some("loss"),
            limited_s: [0.0, 0.0, 1.5, 0.5],
        };
        c.add([e("api", "db", "network"), e("api", "db", "network"), e("web", "api", "unknown")]);
        c.add([e("batch", "db", "application"), e("api", "cache", "network")]);
        assert_eq!(
            c.flows(),
            [
                ("api".into(), "db".into(), "network", "loss", 2),
                ("api".into(), OTHER.into(), "network", "loss", 1),
                (OTHER.into(), "db".into(), "application", NO_CAUSE, 1),
                ("web".into(), "api".into(), "unknown", NO_CAUSE, 1),
            ]
        );
        let limited = c.limited();
        assert!(limited.contains(&("api".into(), "db".into(), "network", 3.0)), "{limited:?}");
        assert!(limited.contains(&("api".into(), "db".into(), "application", 1.0)));
        assert!(!limited.iter().any(|(.., l, _)| *l == "receiver-window"), "no zero series");
        // Connects that never established, by destination and outcome.
        c.add([Ended { verdict: Some("unknown"), cause: Some("refused"), ..e("web", "db", "x") }]);
        c.add([Ended { verdict: Some("unknown"), cause: Some("refused"), ..e("api", "db", "x") }]);
        assert_eq!(c.connect_failures(), [("db".to_string(), "refused", 2)]);
        // A service called "other" counts with the others, in one series.
        c.add([e("other", "db", "application")]);
        assert!(c.flows().contains(&(OTHER.into(), "db".into(), "application", NO_CAUSE, 2)));
        assert_eq!(c.flows().len(), 6, "four, and the two refused connects");
    }
}
