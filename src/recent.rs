//! The recently ended flows the web view shows (`--recent-flows N`): a bounded ring of the
//! last N records, each with at most [`MAX_POINTS`] of its samples as chart points, spread
//! over its whole life ([`spread`]). The writer puts each record in as it writes it (the
//! analyzer passes the points on with it); the HTTP server reads the ring. Memory is
//! bounded by N and [`MAX_POINTS`]: about 45 KB an entry (`a_recent_entry_is_about_45_kb`).
//!
//! Under churn the ring turns over in under a second, so a link the host page gave would
//! answer 404 moments later. The entries a page lists are therefore also *kept*: each for
//! [`KEEP_LISTED`] after it was last listed, or until newer listed entries fill
//! [`KEEP_LISTED_BYTES`], whichever comes first. A kept entry that leaves is remembered as
//! gone (the last [`GONE_REMEMBERED`] cookies), and its page answers 410, "this flow has aged
//! out", rather than 404.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::locks::Locked;
use crate::record::FlowStats;
use crate::record::Point;

/// Default `--recent-flows`.
pub const DEFAULT_RECENT: usize = 100;

/// Most samples kept per ended flow.
pub const MAX_POINTS: usize = 300;

/// How long an entry a page listed stays findable after it was last listed.
pub const KEEP_LISTED: Duration = Duration::from_secs(300);

/// The most listed entries kept beyond the ring, in bytes ([`Ended::size`]): 16 MiB, at
/// least 370 of the largest entries (45 KB), several refreshes of a busy host page.
pub const KEEP_LISTED_BYTES: usize = 16 << 20;

/// Cookies of kept entries that aged out, remembered for a 410 (8 bytes each, twice over).
pub const GONE_REMEMBERED: usize = 65_536;

/// At most `max` of `points` (in time order), spread over their whole span: fewer than
/// `max` are all kept; otherwise the span is cut into `max / 4` equal stretches, and each
/// keeps its first and last sample and those with the lowest and highest RTT. An hour-long
/// flow's page then shows the hour, with every stretch's RTT extremes, rather than its last
/// five minutes. A pause in sampling (a point's `after_pause`) among the points left out
/// moves to the next point kept, so the chart still breaks there.
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
    let mut out = Vec::with_capacity(keep.len());
    let mut from = 0;
    for k in keep {
        let mut p = points[k];
        p.after_pause = points[from..=k].iter().any(|x| x.after_pause);
        out.push(p);
        from = k + 1;
    }
    out
}

/// One ended flow.
#[derive(Debug, Clone)]
pub struct Ended {
    /// Its socket cookie.
    pub cookie: u64,
    /// `Duration`, ns.
    pub duration_ns: i64,
    /// `SendThroughputMbps`.
    pub throughput_mbps: f64,
    /// The smallest RTT the kernel saw, ms.
    pub min_rtt_ms: Option<f64>,
    /// The record as written (turned into JSON only when a page shows it: the writer
    /// puts every record in, thousands a second under churn).
    pub record: Box<FlowStats>,
    /// At most [`MAX_POINTS`] of its samples as chart points ([`spread`]).
    pub points: Vec<Point>,
    /// Samples the record holds in all.
    pub samples: usize,
}

impl Ended {
    /// An entry for record `r` with the chart points of its samples ([`spread`] to
    /// [`MAX_POINTS`]).
    pub fn new(r: FlowStats, points: Vec<Point>) -> Self {
        let points = spread(points, MAX_POINTS);
        Self {
            cookie: r.cookie,
            duration_ns: r.duration,
            throughput_mbps: r.send_throughput_mbps,
            min_rtt_ms: r.min_rtt_kernel_ms.or(r.min_rtt_observed_ms),
            samples: r.samples,
            record: Box::new(r),
            points,
        }
    }

    /// `src:port → dst:port`. Made when a page asks, not for each of the thousands of
    /// flows a second that pass through the ring under churn (as the record's other text).
    pub fn tuple(&self) -> String {
        crate::record::tuple_text(&self.record.id)
    }

    /// The record's `EndTime`.
    pub fn end_time(&self) -> &str {
        &self.record.end_time
    }

    /// The diagnosis' verdict and finding, when there is one.
    pub fn verdict(&self) -> Option<(&'static str, &str)> {
        self.record.diagnosis.as_ref().map(|d| (d.verdict, d.finding.as_str()))
    }

    /// About what it holds, bytes: the entry, its record and its chart points (the
    /// record's strings, a few hundred bytes, left out).
    pub fn size(&self) -> usize {
        size_of::<Self>() + size_of::<FlowStats>() + self.points.capacity() * size_of::<Point>()
    }
}

/// What [`Recent::find`] found.
#[derive(Debug, Clone)]
pub enum Found {
    /// In the ring, or kept since a page listed it.
    Kept(Arc<Ended>),
    /// A page listed it, and it has aged out since.
    Gone,
    /// Not known here.
    Unknown,
}

/// The entries pages listed, kept beyond the ring.
#[derive(Debug, Default)]
struct Listed {
    /// cookie → the entry and when a page last listed it.
    by_cookie: HashMap<u64, (Arc<Ended>, Instant)>,
    /// (cookie, when listed), oldest first; an entry listed again appears again, and only
    /// its newest appearance (the one matching `by_cookie`) counts.
    order: VecDeque<(u64, Instant)>,
    /// [`Ended::size`] of the entries in `by_cookie`.
    bytes: usize,
    /// Cookies of entries that aged out, oldest first, and as a set.
    gone: VecDeque<u64>,
    gone_set: HashSet<u64>,
}

impl Listed {
    fn keep(&mut self, e: &Arc<Ended>, now: Instant) {
        match self.by_cookie.insert(e.cookie, (e.clone(), now)) {
            Some((old, _)) => self.bytes = self.bytes - old.size() + e.size(),
            None => self.bytes += e.size(),
        }
        if self.gone_set.remove(&e.cookie) {
            self.gone.retain(|&c| c != e.cookie);
        }
        self.order.push_back((e.cookie, now));
        // A page read over and over lists the same entries again: keep `order` near the
        // entries' count, not the count of reads.
        if self.order.len() > 2 * self.by_cookie.len() + 1024 {
            let mut fresh: Vec<(u64, Instant)> =
                self.by_cookie.iter().map(|(c, (_, t))| (*c, *t)).collect();
            fresh.sort_unstable_by_key(|x| x.1);
            self.order = fresh.into();
        }
    }

    /// Drops what was listed longer than [`KEEP_LISTED`] ago, then the oldest listed while
    /// over [`KEEP_LISTED_BYTES`]; each dropped entry is remembered as gone.
    fn age(&mut self, now: Instant) {
        while let Some(&(cookie, at)) = self.order.front() {
            let old = now.saturating_duration_since(at) > KEEP_LISTED;
            if !old && self.bytes <= KEEP_LISTED_BYTES {
                break;
            }
            self.order.pop_front();
            if self.by_cookie.get(&cookie).is_some_and(|(_, t)| *t == at) {
                let (e, _) = self.by_cookie.remove(&cookie).unwrap_or_else(|| unreachable!());
                self.bytes -= e.size();
                if self.gone.len() == GONE_REMEMBERED
                    && let Some(c) = self.gone.pop_front()
                {
                    self.gone_set.remove(&c);
                }
                self.gone.push_back(cookie);
                self.gone_set.insert(cookie);
            }
        }
    }
}

/// The ring.
#[derive(Debug)]
pub struct Recent {
    cap: usize,
    ring: Mutex<VecDeque<Arc<Ended>>>,
    listed: Mutex<Listed>,
}

impl Recent {
    /// A ring of at most `cap` entries (0 keeps none).
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            ring: Mutex::new(VecDeque::with_capacity(cap.min(4096))),
            listed: Mutex::new(Listed::default()),
        }
    }

    /// Whether it keeps anything.
    pub fn enabled(&self) -> bool {
        self.cap > 0
    }

    /// Adds the records of a batch as written (services and destinations named), with the
    /// chart points of each (`points`: none when the analyzer passed none on). They are
    /// moved out of `records`, or copied when the sink takes them too (`copy`). Only the
    /// last `cap` of a batch can stay in the ring: under churn a tick's batch holds hundreds
    /// of records, and boxing each only to drop it a moment later was dear (benches/RESULTS.md,
    /// D17).
    pub fn push_written(&self, records: &mut Vec<FlowStats>, points: Vec<Vec<Point>>, copy: bool) {
        if points.len() != records.len() || self.cap == 0 {
            return;
        }
        let skip = records.len().saturating_sub(self.cap);
        let points = points.into_iter().skip(skip);
        if copy {
            self.push_all(records[skip..].iter().cloned().zip(points));
        } else {
            self.push_all(std::mem::take(records).into_iter().skip(skip).zip(points));
        }
    }

    /// Adds an entry for each record and its chart points, under one lock, dropping the
    /// oldest entries when full.
    pub fn push_all(&self, ended: impl Iterator<Item = (FlowStats, Vec<Point>)>) {
        if self.cap == 0 {
            return;
        }
        let mut r = self.ring.locked();
        for (record, points) in ended {
            if r.len() == self.cap {
                r.pop_front();
            }
            r.push_back(Arc::new(Ended::new(record, points)));
        }
    }

    /// The entries, newest first.
    pub fn list(&self) -> Vec<Arc<Ended>> {
        let r = self.ring.locked();
        r.iter().rev().cloned().collect()
    }

    /// The entries, newest first, for a page that links each: they are kept findable
    /// ([`KEEP_LISTED`], [`KEEP_LISTED_BYTES`]) after the ring drops them.
    pub fn list_linked(&self, now: Instant) -> Vec<Arc<Ended>> {
        let list = self.list();
        let mut l = self.listed.locked();
        for e in list.iter().rev() {
            l.keep(e, now);
        }
        l.age(now);
        list
    }

    /// The newest entry for `cookie`: in the ring, else kept since a page listed it, else
    /// whether it aged out.
    pub fn find(&self, cookie: u64, now: Instant) -> Found {
        let r = self.ring.locked();
        if let Some(e) = r.iter().rev().find(|e| e.cookie == cookie) {
            return Found::Kept(e.clone());
        }
        drop(r);
        let mut l = self.listed.locked();
        l.age(now);
        match l.by_cookie.get(&cookie) {
            Some((e, _)) => Found::Kept(e.clone()),
            None if l.gone_set.contains(&cookie) => Found::Gone,
            None => Found::Unknown,
        }
    }

    /// Entries kept beyond the ring, and their bytes.
    pub fn kept_listed(&self) -> (usize, usize) {
        let l = self.listed.locked();
        (l.by_cookie.len(), l.bytes)
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

    fn line(points: &[Point]) -> Vec<Vec<(f64, f64)>> {
        let end = points.last().map_or(0.0, |p| p.unix_s);
        runs(points.iter().map(|x| (x.unix_s, x.rtt_ms, x.after_pause)), end).0
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
        // One unbroken line (values hold from point to point), with a varying RTT or a
        // flat one (each stretch then keeps its first and last only).
        let flat: Vec<Point> = (0..3600).map(|i| at(f64::from(i), 10.0)).collect();
        assert_eq!(line(&s).len(), 1);
        assert_eq!(line(&spread(flat, MAX_POINTS)).len(), 1, "one unbroken line");
    }

    #[test]
    fn a_pause_stays_a_break_even_when_its_point_is_left_out() {
        let mut p: Vec<Point> =
            (0..1000).chain(2000..3000).map(|i| at(f64::from(i), 10.0)).collect();
        p[1000].after_pause = true; // at 2000 s, after 1000 s without a sample
        p[1001].rtt_ms = Some(1.0); // the stretch's low point, kept after the pause
        let s = spread(p, MAX_POINTS);
        assert!(!s.iter().any(|x| x.unix_s > 999.0 && x.unix_s < 2000.0));
        assert_eq!(line(&s).len(), 2, "the pause breaks the line");
    }
}
