//! The recently ended flows the web view shows (`--recent-flows N`): a bounded ring of the
//! last N records, each with its newest samples as chart points. The analyzer pushes a
//! record as it writes it; the HTTP server reads the ring. Memory is bounded by N and
//! [`MAX_POINTS`]: about 43 KB an entry (`a_recent_entry_is_about_43_kb`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::chart::flow::Point;
use crate::record::FlowStats;

/// Default `--recent-flows`.
pub const DEFAULT_RECENT: usize = 100;

/// Most samples kept per ended flow (its newest), as many as a live flow's page shows.
pub const MAX_POINTS: usize = 300;

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
    /// Its newest samples ([`MAX_POINTS`]) as chart points.
    pub points: Vec<Point>,
    /// Samples the record holds in all.
    pub samples: usize,
}

impl Ended {
    /// An entry for record `r` with the chart points of its samples (the newest
    /// [`MAX_POINTS`] are kept; the analyzer converts no more than those).
    pub fn new(r: &FlowStats, mut points: Vec<Point>) -> Self {
        let extra = points.len().saturating_sub(MAX_POINTS);
        points.drain(..extra);
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

// Tested with real records in `analyzer/tests.rs` (a record needs the analyzer).
