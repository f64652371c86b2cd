//! Verdicts per service pair: how many flows ended with each verdict, and how long flows
//! spent limited by each cause, by `service` and `dest_service` (the records' `Service`
//! and `DestService`), for `cgmon_flows_total` and `cgmon_flow_limited_seconds_total`.
//!
//! Bounded as the per-service byte counters are: the first K distinct services
//! (`--metrics-top-services`) and destinations (`--metrics-top-destinations`) keep their
//! names, later ones count under `other`; so the series stay at most (K₁ + 1)(K₂ + 1) × the
//! verdicts, however many services come and go.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// The label that services and destinations beyond the first `top` share.
pub const OTHER: &str = "other";

/// The causes time is limited by, as the records' `TimeShares` name them (and the
/// diagnosis's verdicts).
pub const LIMITS: [&str; 4] = ["receiver-window", "send-buffer", "network", "application"];

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
    /// (service, dest_service, verdict) → flows.
    flows: BTreeMap<(String, String, &'static str), u64>,
    /// (service, dest_service, limit) → seconds.
    limited: BTreeMap<(String, String, &'static str), f64>,
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
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts ended flows.
    pub fn add<'a>(&self, ended: impl IntoIterator<Item = Ended<'a>>) {
        let mut g = self.lock();
        let (top, top_dests) = (g.top, g.top_dests);
        for e in ended {
            let svc = bounded(&mut g.services, e.service.unwrap_or("unknown"), top);
            let dst = bounded(&mut g.dests, e.dest_service.unwrap_or("unknown"), top_dests);
            let verdict = e.verdict.unwrap_or("unknown");
            *g.flows.entry((svc.clone(), dst.clone(), verdict)).or_default() += 1;
            for (limit, s) in LIMITS.iter().zip(e.limited_s) {
                if s > 0.0 {
                    *g.limited.entry((svc.clone(), dst.clone(), limit)).or_default() += s;
                }
            }
        }
    }

    /// (service, dest_service, verdict, flows), in label order.
    pub fn flows(&self) -> Vec<(String, String, &'static str, u64)> {
        self.lock().flows.iter().map(|((s, d, v), n)| (s.clone(), d.clone(), *v, *n)).collect()
    }

    /// (service, dest_service, limit, seconds), in label order.
    pub fn limited(&self) -> Vec<(String, String, &'static str, f64)> {
        self.lock().limited.iter().map(|((s, d, l), x)| (s.clone(), d.clone(), *l, *x)).collect()
    }
}

/// `name` when it is one of the first `top` seen (and then remembered), else `other`.
fn bounded(seen: &mut Vec<String>, name: &str, top: usize) -> String {
    if seen.iter().any(|s| s == name) {
        return name.to_string();
    }
    if seen.len() < top {
        seen.push(name.to_string());
        return name.to_string();
    }
    OTHER.to_string()
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
            limited_s: [0.0, 0.0, 1.5, 0.5],
        };
        c.add([e("api", "db", "network"), e("api", "db", "network"), e("web", "api", "unknown")]);
        c.add([e("batch", "db", "application"), e("api", "cache", "network")]);
        assert_eq!(
            c.flows(),
            [
                ("api".into(), "db".into(), "network", 2),
                ("api".into(), OTHER.into(), "network", 1),
                (OTHER.into(), "db".into(), "application", 1),
                ("web".into(), "api".into(), "unknown", 1),
            ]
        );
        let limited = c.limited();
        assert!(limited.contains(&("api".into(), "db".into(), "network", 3.0)), "{limited:?}");
        assert!(limited.contains(&("api".into(), "db".into(), "application", 1.0)));
        assert!(!limited.iter().any(|(.., l, _)| *l == "receiver-window"), "no zero series");
    }
}
