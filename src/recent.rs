//! The recently ended flows the web view shows (`--recent-flows N`): a bounded ring of the
//! last N records, each with at most [`MAX_POINTS`] of its samples as chart points, spread
//! over its whole life ([`spread`]). The analyzer pushes a
//! record as it writes it; the HTTP server reads the ring. Memory is bounded by N and
//! [`MAX_POINTS`]: about 43 KB an entry (`a_recent_entry_is_about_43_kb`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::record::FlowStats;
use crate::record::Point;

/// Default `--recent-flows`.
pub const DEFAULT_RECENT: usize = 100;

/// Most samples kept per ended flow.
pub const MAX_POINTS: usize = 300;

/// At most `max` of `points` (in time order), spread over their whole span: fewer than
/// `max` are all kept; otherwise the span is cut into `max / 4` equal stretches, and each
/// keeps its first and last sample and those with the lowest and highest RTT. An hour-long
/// flow's page then shows the hour, with every stretch's RTT extremes, rather than its last
/// five minutes; a stretch with no sample (a pause) stays empty, so the chart breaks there.
pub fn spread(points: Vec<Point>, max: usize) -> Vec<Point> {
    if points.len() <= max || max < 4 {
        return points;
    }
    let stretches = max / 4;
    let (t0, t1) = (points[0].unix_s, points[points.len() - 1].unix_s);
    let width = (t1 - t0) / stretches as f64;
    let stretch = |p: &Point| {
        if width > 0.0 { (((p.unix_s - t0) / width) as usize).min(stretches - 1) } else { 0 }
    };
    let mut keep = Vec::with_capacity(max);
    let mut i = 0;
    while i < points.len() {
        let s = stretch(&points[i]);
        let mut j = i + 1;
        while j < points.len() && stretch(&points[j]) == s {
            j += 1;
        }
        let rtt = |k: &usize| points[*k].rtt_ms.unwrap_or(f64::NAN);
        let with_rtt = || (i..j).filter(|k| points[*k].rtt_ms.is_some());
        let lo = with_rtt().min_by(|a, b| rtt(a).total_cmp(&rtt(b)));
        let hi = with_rtt().max_by(|a, b| rtt(a).total_cmp(&rtt(b)));
        let mut k: Vec<usize> = [Some(i), lo, hi, Some(j - 1)].into_iter().flatten().collect();
        k.sort_unstable();
        k.dedup();
        keep.extend(k);
        i = j;
    }
    keep.into_iter().map(|k| points[k]).collect()
}

/// The pause that breaks a chart's line once [`spread`] has picked at most `max` of
/// `points`: the one all their spacing gives, and at least two stretches. The picked
/// points' own spacing alternates between most of a stretch and a tick, so its median
/// ([`crate::chart::max_gap`]) says nothing of the sampling interval. `None` when all are
/// kept.
pub fn spread_gap(points: &[Point], max: usize) -> Option<f64> {
    (points.len() > max && max >= 4).then(|| {
        let times: Vec<f64> = points.iter().map(|p| p.unix_s).collect();
        let span = times[times.len() - 1] - times[0];
        crate::chart::max_gap(&times).max(2.0 * span / (max / 4) as f64)
    })
}

/// One ended flow.
#[derive(Debug, Clone)]
pub struct Ended {
    /// Its socket cookie.
    pub cookie: u64,
    /// `src:port → dst:port`.
    pub tuple: String,
    /// Its namespace's name, when several are sampled.
    pub netns: Option<String>,
    /// The record's `EndTime`.
    pub end_time: String,
    /// `Duration`, ns.
    pub duration_ns: i64,
    /// `SendThroughputMbps`.
    pub throughput_mbps: f64,
    /// The diagnosis' verdict and finding, when there is one.
    pub verdict: Option<(&'static str, String)>,
    /// The smallest RTT the kernel saw, ms.
    pub min_rtt_ms: Option<f64>,
    /// The record as written (turned into JSON only when a page shows it: the analyzer
    /// pushes every record, at thousands a second under churn).
    pub record: Box<FlowStats>,
    /// At most [`MAX_POINTS`] of its samples as chart points ([`spread`]).
    pub points: Vec<Point>,
    /// With points spread, the pause that breaks a chart's line, s ([`spread_gap`]).
    pub gap_s: Option<f64>,
    /// Samples the record holds in all.
    pub samples: usize,
}

impl Ended {
    /// An entry for record `r` with the chart points of its samples ([`spread`] to
    /// [`MAX_POINTS`]).
    pub fn new(r: &FlowStats, points: Vec<Point>) -> Self {
        let gap_s = spread_gap(&points, MAX_POINTS);
        let points = spread(points, MAX_POINTS);
        let id = &r.id;
        Self {
            cookie: r.cookie,
            tuple: crate::record::tuple_text(id),
            netns: r.netns.as_ref().map(|n| n.name.clone()),
            end_time: r.end_time.clone(),
            duration_ns: r.duration,
            throughput_mbps: r.send_throughput_mbps,
            verdict: r.diagnosis.as_ref().map(|d| (d.verdict, d.finding.clone())),
            min_rtt_ms: r.min_rtt_kernel_ms.or(r.min_rtt_observed_ms),
            record: Box::new(r.clone()),
            points,
            gap_s,
            samples: r.samples,
        }
    }
}

/// The ring.
#[derive(Debug)]
pub struct Recent {
    cap: usize,
    ring: Mutex<VecDeque<Arc<Ended>>>,
}

impl Recent {
    /// A ring of at most `cap` entries (0 keeps none).
    pub fn new(cap: usize) -> Self {
        Self { cap, ring: Mutex::new(VecDeque::with_capacity(cap.min(4096))) }
    }

    /// Whether it keeps anything.
    pub fn enabled(&self) -> bool {
        self.cap > 0
    }

    /// Adds `e`, dropping the oldest entry when full.
    pub fn push(&self, e: Ended) {
        if self.cap == 0 {
            return;
        }
        let mut r = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        if r.len() == self.cap {
            r.pop_front();
        }
        r.push_back(Arc::new(e));
    }

    /// The entries, newest first.
    pub fn list(&self) -> Vec<Arc<Ended>> {
        let r = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        r.iter().rev().cloned().collect()
    }

    /// The newest entry for `cookie`.
    pub fn find(&self, cookie: u64) -> Option<Arc<Ended>> {
        let r = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        r.iter().rev().find(|e| e.cookie == cookie).cloned()
    }
}

// Tested with real records in `analysis/tests.rs` (a record needs the analyzer).

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::runs;

    fn at(t: f64, rtt: f64) -> Point {
        Point { unix_s: t, rtt_ms: Some(rtt), cwnd_bytes: Some(1000.0), ..Default::default() }
    }

    /// The gap an entry of `points` breaks lines at.
    fn gap_of(points: &[Point]) -> f64 {
        spread_gap(points, MAX_POINTS).expect("points were spread")
    }

    #[test]
    fn few_points_are_all_kept() {
        let p: Vec<Point> = (0..MAX_POINTS).map(|i| at(i as f64, 1.0)).collect();
        assert_eq!(spread(p.clone(), MAX_POINTS), p);
    }

    #[test]
    fn an_hour_is_kept_whole_with_each_stretchs_rtt_extremes() {
        let mut p: Vec<Point> =
            (0..3600).map(|i| at(f64::from(i), 10.0 + (f64::from(i) / 90.0).sin())).collect();
        p[1234].rtt_ms = Some(500.0);
        p[2345].rtt_ms = Some(0.5);
        p[3000].rtt_ms = None;
        let s = spread(p.clone(), MAX_POINTS);
        assert!(s.len() <= MAX_POINTS && s.len() >= MAX_POINTS / 2, "{}", s.len());
        assert_eq!(s.first(), p.first());
        assert_eq!(s.last(), p.last());
        assert!(s.contains(&p[1234]) && s.contains(&p[2345]), "the spike and the dip");
        assert!(s.windows(2).all(|w| w[0].unix_s < w[1].unix_s), "in time order");
        // Every stretch (48 s here) has points: with the entry's gap the line does not
        // break, with a varying RTT or a flat one (each stretch then keeps its first and
        // last only).
        let flat: Vec<Point> = (0..3600).map(|i| at(f64::from(i), 10.0)).collect();
        let gap = gap_of(&flat);
        for pts in [s, spread(flat, MAX_POINTS)] {
            let line = runs(pts.iter().map(|x| (x.unix_s, x.rtt_ms)), gap);
            assert_eq!(line.len(), 1, "one unbroken line");
        }
    }

    #[test]
    fn a_pause_stays_a_break() {
        let p: Vec<Point> = (0..1000).chain(2000..3000).map(|i| at(f64::from(i), 10.0)).collect();
        let gap = gap_of(&p);
        let s = spread(p, MAX_POINTS);
        assert!(!s.iter().any(|x| x.unix_s > 999.0 && x.unix_s < 2000.0));
        let line = runs(s.iter().map(|x| (x.unix_s, x.rtt_ms)), gap);
        assert_eq!(line.len(), 2, "the pause breaks the line");
    }
}
