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

/// The writer's consumer that fills the ring: each record as written, with the chart
/// points the analyzer passed on.
pub struct Ring(pub Arc<Recent>);

impl crate::edges::Consumer for Ring {
    fn keeps(&self) -> crate::edges::Keeps {
        crate::edges::Keeps { records: true, lines: false }
    }

    /// Only the last `cap` of a batch can stay in the ring: under churn a tick's batch holds
    /// hundreds of records, and boxing each only to drop it a moment later was dear
    /// (benches/RESULTS.md, D17). They are moved out of the batch unless a later consumer
    /// keeps records too.
    fn take(&mut self, batch: &mut crate::edges::Written<'_>) {
        let n = batch.records().len();
        if batch.points.len() != n || self.0.cap == 0 {
            // None stay; taking none still tells a later keeper that it is the last.
            drop(batch.keep_records(n));
            return;
        }
        let skip = n.saturating_sub(self.0.cap);
        let points = std::mem::take(batch.points).into_iter().skip(skip);
        self.0.push_all(batch.keep_records(skip).into_iter().zip(points));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::testing::{batch, record};
    use crate::chart::runs;
    use crate::writer::{MemoryOut, Writer};
    use std::time::Duration;

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

    fn stdout_cfg() -> crate::writer::WriterConfig {
        crate::writer::WriterConfig {
            target: crate::writer::Target::Stdout,
            pretty: false,
            rotate_size: None,
            rotate_interval: None,
            backlog_bytes: 64 << 20,
        }
    }

    #[test]
    fn the_recent_ring_keeps_the_newest_n_records_with_points_from_their_whole_life() {
        use crate::recent::{MAX_POINTS, Recent};
        let r = Recent::new(3);
        for cookie in 1..=5u64 {
            let b = crate::wire::build::SockBuilder::new(cookie, 5000, 80).rtt_us(1000);
            let mut e = crate::tracker::testing::ended_flow(&[
                (1_000_000_000, b.clone()),
                (2_000_000_000, b),
            ]);
            let rec = crate::analysis::analyze(&mut e, &crate::analysis::AnalyzerConfig::default());
            let points = (0..MAX_POINTS * 4 + usize::try_from(cookie).unwrap())
                .map(|i| crate::record::Point {
                    unix_s: i as f64,
                    rtt_ms: Some(1.0),
                    ..Default::default()
                })
                .collect();
            r.push_all(std::iter::once((rec, points)));
        }
        assert_eq!(r.list().iter().map(|e| e.cookie).collect::<Vec<_>>(), vec![5, 4, 3]);
        let now = std::time::Instant::now();
        assert!(matches!(r.find(2, now), crate::recent::Found::Unknown));
        let crate::recent::Found::Kept(four) = r.find(4, now) else { panic!("4 is in the ring") };
        assert!(four.points.len() <= MAX_POINTS, "{} points kept", four.points.len());
        let (first, last) = (four.points[0].unix_s, four.points[four.points.len() - 1].unix_s);
        assert_eq!((first, last), (0.0, (MAX_POINTS * 4 + 3) as f64), "from its whole life");
        assert_eq!(four.record.cookie, 4);
        let off = Recent::new(0);
        off.push_all(std::iter::once(((*four.record).clone(), Vec::new())));
        assert!(off.list().is_empty() && !off.enabled());
    }

    #[test]
    fn a_recent_entry_is_about_45_kb() {
        // The figure `--recent-flows`' help and docs/web.md give: the points dominate.
        use crate::recent::{Ended, MAX_POINTS};
        use crate::record::Point;
        let bytes = size_of::<Ended>() + size_of::<FlowStats>() + MAX_POINTS * size_of::<Point>();
        // 42,248 B when measured, plus its strings (times, addresses, names: a few hundred).
        assert!((44_000..=45_500).contains(&bytes), "{bytes} B: update the figure");
    }

    #[test]
    fn flows_a_page_listed_stay_findable_after_the_ring_drops_them_then_are_gone() {
        use crate::recent::{Found, KEEP_LISTED, KEEP_LISTED_BYTES, Recent};
        let t0 = std::time::Instant::now();
        let recent = Recent::new(2);
        let put = |i: u64| recent.push_all(std::iter::once((record(i), Vec::new())));
        let is = |cookie: u64, at: std::time::Instant| match recent.find(cookie, at) {
            Found::Kept(e) => {
                assert_eq!(e.cookie, cookie);
                "kept"
            }
            Found::Gone => "gone",
            Found::Unknown => "unknown",
        };
        put(0);
        put(1);
        // The page lists cookies 1 and 2; then churn pushes them out of the ring.
        let listed: Vec<u64> = recent.list_linked(t0).iter().map(|e| e.cookie).collect();
        assert_eq!(listed, [2, 1]);
        for i in 2..10 {
            put(i);
        }
        let at = |s: u64| t0 + std::time::Duration::from_secs(s);
        assert_eq!((is(1, at(1)), is(2, at(1))), ("kept", "kept"), "listed: kept");
        assert_eq!(is(3, at(1)), "unknown", "never listed, left the ring: 404");
        assert_eq!(is(10, at(1)), "kept", "in the ring");
        // Listed again at 200 s, cookie 10 is kept from then; 1 and 2 age out at 300 s.
        recent.list_linked(at(200));
        let past = KEEP_LISTED.as_secs() + 1;
        assert_eq!((is(1, at(past)), is(2, at(past))), ("gone", "gone"));
        for i in 10..20 {
            put(i);
        }
        assert_eq!(is(10, at(past)), "kept", "listed 101 s ago");
        assert_eq!(is(10, at(200 + past)), "gone");
        assert_eq!(is(77, at(200 + past)), "unknown");
        assert_eq!(recent.kept_listed().0, 0, "nothing kept past its time");
        // The bytes bound: listing entry after entry, the oldest listed go first.
        let each = {
            put(100);
            recent.list_linked(at(1000));
            recent.kept_listed().1 / 2
        };
        let fit = KEEP_LISTED_BYTES / each;
        let template = record(0);
        for i in 0..fit as u64 + 10 {
            let mut r = template.clone();
            r.cookie = 1001 + i;
            recent.push_all(std::iter::once((r, Vec::new())));
            recent.list_linked(at(1000));
        }
        let (n, bytes) = recent.kept_listed();
        assert!(
            bytes <= KEEP_LISTED_BYTES && n + 2 >= fit,
            "{n} entries, {bytes} bytes, {fit} fit"
        );
        assert_eq!(is(101, at(1000)), "gone", "the oldest listed went first");
        assert_eq!(is(1001 + fit as u64 + 9, at(1000)), "kept");
    }

    #[test]
    fn the_web_views_ring_gets_each_record_as_written_with_its_points() {
        use crate::record::Point;
        let tree = tempfile::tempdir().unwrap();
        let unit = tree.path().join("system.slice/api.service");
        std::fs::create_dir_all(&unit).unwrap();
        let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&unit).unwrap());
        let out = MemoryOut::default();
        let recent = Arc::new(Recent::new(2));
        let services = Arc::new(Mutex::new(crate::who::services::Services::with_root(Some(
            tree.path().to_path_buf(),
        ))));
        let dests = Arc::new(Mutex::new(crate::who::dests::Dests::fallbacks()));
        let namer = crate::who::namer::RecordNamer::new(services, dests);
        let mut w = Writer::to_stream(stdout_cfg(), Box::new(out.clone()), Arc::default())
            .unwrap()
            .with_naming(Box::new(namer))
            .with_consumer(Box::new(Ring(recent.clone())));
        let mut b = batch(0..3);
        b.records[2].cgroup_id = Some(ino);
        let at = |t: f64| Point { unix_s: t, rtt_ms: Some(t), ..Default::default() };
        b.points = vec![vec![at(1.0)], vec![at(2.0)], vec![at(3.0), at(4.0)]];
        w.write_batch(b).unwrap();
        // The newest two, named as written (the line on stdout says the same), with their
        // own points.
        let ring = recent.list();
        assert_eq!(ring.iter().map(|e| e.cookie).collect::<Vec<_>>(), vec![3, 2]);
        assert_eq!(ring[0].record.service.as_deref(), Some("api.service"));
        assert!(ring[0].record.dest_service.is_some(), "its destination named too");
        assert_eq!(ring[0].points, vec![at(3.0), at(4.0)]);
        assert_eq!(ring[1].points, vec![at(2.0)]);
        // A batch without points (none passed on) leaves the ring as it was.
        w.write_batch(batch(5..6)).unwrap();
        assert_eq!(recent.list().len(), 2);
        assert_eq!(recent.list()[0].cookie, 3);
        w.close(Duration::from_secs(5)).unwrap();
        assert!(String::from_utf8_lossy(&out.contents()).contains("\"Service\":\"api.service\""));
    }
}
