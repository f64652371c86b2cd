//! Read-only views of active flows, for the HTTP server's `/flows` endpoints. When asked
//! ([`Query`]), the poll task copies, between dumps, only the flows a response shows
//! (a page of them, or one found by its cookie) with only the samples it shows, read in
//! place from the flows' blocks; the server turns the copies into JSON on its own thread.

use tokio::sync::oneshot;

use super::{Flow, sync};
use crate::record::Point;
use crate::record::{ABSENT_U64, mbps};

/// Most samples `/flows/{cookie}` returns (the newest), so that a long flow's answer
/// stays small; the flow's page draws them all.
pub const RECENT_SAMPLES: usize = 300;

/// Flows `/flows` lists per page unless told (`?limit=`).
pub const DEFAULT_PAGE: usize = 1000;

/// Most flows one page may hold.
pub const MAX_PAGE: usize = 10_000;

/// One page of active flows, in cookie order.
#[derive(Debug)]
pub struct Page {
    /// The flows, each with its latest sample only.
    pub flows: Vec<Flow>,
    /// Each flow's network namespace (index), beside `flows`.
    pub netns: Vec<u32>,
    /// Active flows in all.
    pub total: usize,
}

/// How the host view orders active flows, largest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Recent throughput: bytes acked and received per second ([`Last::recent_bps`]).
    ///
    /// [`Last::recent_bps`]: crate::tracker::Last::recent_bps
    #[default]
    Rate,
    /// Current smoothed RTT.
    Rtt,
    /// Retransmitted segments.
    Retrans,
    /// Time since the first sample (oldest first).
    Age,
    /// Socket cookie, smallest first (`/flows`' own order; not offered by the page).
    Cookie,
}

impl Order {
    /// Its name in a URL (`?order=`).
    pub fn name(self) -> &'static str {
        match self {
            Order::Rate => "rate",
            Order::Rtt => "rtt",
            Order::Retrans => "retrans",
            Order::Age => "age",
            Order::Cookie => "cookie",
        }
    }

    /// Every order, as the page offers them.
    pub const ALL: [Order; 4] = [Order::Rate, Order::Rtt, Order::Retrans, Order::Age];
}

/// A flow with no retained sample (no byte moved, nothing changed) for this long, and no
/// byte waiting in its receive or send queue, is idle: the host page collapses it into a
/// count. Long, because a rate-limited reader's flow stands still for seconds at a time
/// while it drains a multi-MB receive buffer, and such a flow is the one a user looks for.
pub const IDLE_NS: u64 = 30_000_000_000;

/// What the host view needs of every active flow, for the per-service table (a few
/// numbers each, so 20,000 flows are a few hundred KB).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Brief {
    /// The flow's account (service) slot.
    pub slot: u32,
    /// Its latest smoothed RTT, µs (0: none yet).
    pub rtt_us: u32,
    /// Its recent throughput, bytes/s (0 when idle).
    pub bytes_per_s: f32,
    /// What limited it so far (the query's [`Judge`]): an index in the diagnosis's
    /// verdicts.
    pub verdict: u8,
}

/// What the host view's judge reads of an active flow: its latest counters and where its
/// window began. Borrowed in place, so thousands of flows are judged without a copy.
#[derive(Debug, Clone, Copy)]
pub struct Window<'a> {
    /// Its latest counters.
    pub last: &'a super::Last,
    /// busy, rwnd-limited and sndbuf-limited time at the window's first sample, ms.
    pub first_chrono: [u32; 3],
    /// bytes_acked and bytes_received at the window's first sample.
    pub first_bytes: (u64, u64),
    /// From the window's first sample to its latest (retained or not), ns.
    pub span_ns: u64,
    /// TCP option flags OR'd over its samples (`tcpi_options`).
    pub options: u8,
}

impl<'a> Window<'a> {
    /// The window of `f` (whose `last_ts_ns` is current).
    pub fn of(f: &'a Flow) -> Self {
        Window {
            last: &f.last,
            first_chrono: f.first_chrono,
            first_bytes: (f.first_bytes_acked, f.first_bytes_received),
            span_ns: f.span_ns(),
            options: f.options,
        }
    }
}

/// What limited a flow so far, as an index in the diagnosis's verdicts, from its window and
/// current smoothed RTT (µs). The HTTP server passes the diagnosis's rules
/// (`analysis::diagnosis::so_far`); the tracker, below the analysis, only calls it.
pub type Judge = fn(&Window<'_>, u32) -> u8;

/// Which flows the host view shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only the flows of these account slots (sorted): a service or a destination.
    pub slots: Option<Vec<u32>>,
    /// Only the flows with this verdict so far (an index in `VERDICTS`).
    pub verdict: Option<u8>,
    /// Idle flows too (otherwise they are only counted).
    pub idle: bool,
    /// Only the flows of this network namespace (index).
    pub netns: Option<u32>,
}

/// The host view: one page of active flows in the asked order, each with its newest
/// samples, and every active flow briefly.
#[derive(Debug, Default)]
pub struct Overview {
    /// The page, in order.
    pub page: Vec<Flow>,
    /// Each page flow's network namespace (index), beside `page`.
    pub netns: Vec<u32>,
    /// Each page flow's brief, beside `page`.
    pub briefs: Vec<Brief>,
    /// Every active flow (of the namespace asked for).
    pub all: Vec<Brief>,
    /// Flows the filter matched (the page is some of them).
    pub matched: usize,
    /// Flows the filter matched but left out as idle.
    pub idle: usize,
    /// The time the view is of: the newest sample's (CLOCK_MONOTONIC ns).
    pub now_ns: u64,
}

/// A question to the poll task.
#[derive(Debug)]
pub enum Query {
    /// Active flows with a cookie above `after`, at most `limit`, in cookie order.
    List {
        /// The last cookie of the previous page.
        after: Option<u64>,
        /// Page size.
        limit: usize,
        /// Only the flows of this network namespace (index).
        netns: Option<u32>,
        /// Where the answer goes.
        tx: oneshot::Sender<Page>,
    },
    /// One active flow and its network namespace (index); `None` when it is not active.
    Flow {
        /// Its socket cookie.
        cookie: u64,
        /// How many of its newest samples to copy: [`RECENT_SAMPLES`] for `/flows/{cookie}`,
        /// all the tracker holds (`usize::MAX`, at most a window) for its page.
        keep: usize,
        /// Where the answer goes.
        tx: oneshot::Sender<Option<(Flow, u32)>>,
    },
    /// The host view.
    Overview {
        /// Page order.
        order: Order,
        /// Flows before the page.
        offset: usize,
        /// Page size.
        limit: usize,
        /// Samples per page flow (for its sparklines).
        keep: usize,
        /// Which flows.
        filter: Filter,
        /// What limited each flow so far.
        judge: Judge,
        /// Where the answer goes.
        tx: oneshot::Sender<Overview>,
    },
}

impl Flow {
    /// Its samples as chart points; `realtime_offset_ns`: CLOCK_REALTIME − CLOCK_MONOTONIC.
    /// (A view copy holds the samples its query asked for.)
    pub fn chart_points(&self, realtime_offset_ns: i128) -> Vec<Point> {
        let (samples, chrono) = self.chrono();
        let rate = |v: u64| (v != ABSENT_U64).then(|| mbps(v));
        samples
            .iter()
            .enumerate()
            .map(|(i, s)| Point {
                unix_s: (i128::from(s.ts_ns) + realtime_offset_ns) as f64 / 1e9,
                rtt_ms: (s.rtt_us > 0).then(|| f64::from(s.rtt_us) / 1000.0),
                cwnd_bytes: Some(s.cwnd_bytes() as f64),
                ssthresh_bytes: s.ssthresh_bytes().map(|v| v as f64),
                pacing_mbps: rate(s.pacing_rate()),
                delivery_mbps: rate(s.delivery_rate()),
                retrans: Some(f64::from(s.total_retrans)),
                chrono_ms: chrono.as_ref().map(|c| c[i].map(f64::from)),
                after_pause: s.after_pause(),
            })
            .collect()
    }
}

/// A copy of `f`'s identity and latest values, without samples.
pub fn header(f: &Flow) -> Flow {
    Flow {
        key: f.key,
        cc: f.cc,
        stage: crate::tracker::StageRef::NONE,
        cgroup_id: f.cgroup_id,
        seq: f.seq,
        partial_start: f.partial_start,
        preexisting: f.preexisting,
        passive_open: f.passive_open,
        first_ts_ns: f.first_ts_ns,
        last_ts_ns: f.last_ts_ns,
        first_bytes_acked: f.first_bytes_acked,
        first_bytes_received: f.first_bytes_received,
        options: f.options,
        deduped: f.deduped,
        last: f.last,
        samples: Vec::new(),
        counted: f.counted,
        first_chrono: f.first_chrono,
    }
}

impl super::Tracker {
    /// The host view ([`Overview`]): of the flows `filter` lets through, those
    /// `offset..offset + limit` in `order`, largest first, each with its `keep` newest
    /// samples, and every flow briefly. Only the page's flows are copied; the others are
    /// read in place.
    pub fn overview(
        &self,
        order: Order,
        offset: usize,
        limit: usize,
        keep: usize,
        filter: &Filter,
        judge: Judge,
    ) -> Overview {
        let now_ns = self.hot.iter().map(|h| h.last_ts_ns).max().unwrap_or(0);
        // (sort key, flow slot, index of its brief in `all`)
        let mut keyed: Vec<(u64, u32, u32)> = Vec::with_capacity(self.hot.len());
        let mut all = Vec::with_capacity(self.hot.len());
        let mut idle = 0;
        for (slot, h) in self.hot.iter().enumerate() {
            if filter.netns.is_some_and(|n| self.netns_of(h.cookie) != n) {
                continue;
            }
            let f = self.flow_at(slot);
            let latest = self.stages.latest(&f.stage, &f.samples);
            let l = &f.last;
            let rtt_us = latest.map_or(0, |r| r.rtt_us);
            let moved_ns = latest.map_or(f.first_ts_ns, |r| r.ts_ns);
            let still = now_ns.saturating_sub(moved_ns);
            let is_idle = still > IDLE_NS && !h.queued();
            let rate = if is_idle { 0.0 } else { l.recent_rate_at(still) };
            let window = Window {
                last: l,
                first_chrono: f.first_chrono,
                first_bytes: (f.first_bytes_acked, f.first_bytes_received),
                span_ns: h.last_ts_ns.saturating_sub(f.first_ts_ns),
                options: f.options,
            };
            let b = Brief {
                slot: f.counted.slot,
                rtt_us,
                bytes_per_s: rate as f32,
                verdict: judge(&window, rtt_us),
            };
            all.push(b);
            let wanted = filter.slots.as_ref().is_none_or(|s| s.binary_search(&b.slot).is_ok())
                && filter.verdict.is_none_or(|v| v == b.verdict);
            if !wanted {
                continue;
            }
            if is_idle && !filter.idle {
                idle += 1;
                continue;
            }
            let key = match order {
                Order::Rate => (rate.max(0.0) as u64).saturating_add(1),
                Order::Rtt => u64::from(rtt_us),
                Order::Retrans => u64::from(l.total_retrans),
                Order::Age => u64::MAX - f.first_ts_ns,
                Order::Cookie => u64::MAX - h.cookie,
            };
            keyed.push((key, slot as u32, (all.len() - 1) as u32));
        }
        let matched = keyed.len() + idle;
        // Largest first; ties by slot, so a page is stable between two requests.
        let cmp = |a: &(u64, u32, u32), b: &(u64, u32, u32)| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
        let end = offset.saturating_add(limit).min(keyed.len());
        if end < keyed.len() && end > 0 {
            keyed.select_nth_unstable_by(end - 1, cmp);
        }
        keyed.truncate(end);
        keyed.sort_unstable_by(cmp);
        let rows = &keyed[offset.min(keyed.len())..];
        let page: Vec<Flow> = rows.iter().map(|k| self.view_slot(k.1 as usize, keep)).collect();
        let netns = page.iter().map(|f| self.netns_of(f.key.cookie)).collect();
        let briefs = rows.iter().map(|k| all[k.2 as usize]).collect();
        Overview { page, netns, briefs, all, matched, idle, now_ns }
    }

    /// A copy of the active flow `cookie` with its `keep` newest samples (and its
    /// `Samples` count in `stage.window`), found by its index; nothing else is touched.
    pub fn view_one(&self, cookie: u64, keep: usize) -> Option<Flow> {
        let slot = self.index.get(cookie, &self.hot)?;
        Some(self.view_slot(slot, keep))
    }

    /// The active flows with a cookie above `after`, the `limit` smallest in cookie order
    /// (a stable order for paging), each with its `keep` newest samples; and how many flows
    /// are active in all. Only the flows on the page are copied.
    /// With `netns`, only the flows of that namespace count, on the page and in all.
    pub fn view_page(
        &self,
        after: Option<u64>,
        limit: usize,
        keep: usize,
        netns: Option<u32>,
    ) -> (Vec<Flow>, usize) {
        let in_ns = |c: u64| netns.is_none_or(|n| self.netns_of(c) == n);
        let total = match netns {
            Some(_) => self.hot.iter().filter(|h| in_ns(h.cookie)).count(),
            None => self.hot.len(),
        };
        let mut cookies: Vec<u64> = self
            .hot
            .iter()
            .map(|h| h.cookie)
            .filter(|&c| after.is_none_or(|a| c > a) && in_ns(c))
            .collect();
        if cookies.len() > limit {
            cookies.select_nth_unstable(limit);
            cookies.truncate(limit);
        }
        cookies.sort_unstable();
        let page = cookies
            .iter()
            .filter_map(|&c| self.index.get(c, &self.hot))
            .map(|slot| self.view_slot(slot, keep))
            .collect();
        (page, total)
    }

    pub(super) fn view_slot(&self, slot: usize, keep: usize) -> Flow {
        let (f, h) = (self.flow_at(slot), &self.hot[slot]);
        let mut v = header(&f);
        sync(&mut v, h);
        v.stage.window = f.stage.window.max(f.samples.len() as u32);
        v.samples = self.stages.newest(&f.stage, &f.samples, keep);
        v
    }

    /// The active flows, brought up to date with their latest samples.
    /// Packed flows are made whole for it.
    pub fn flows(&mut self) -> impl Iterator<Item = &Flow> {
        for slot in 0..self.slab.len() {
            self.wake(slot);
        }
        for (b, h) in self.slab.iter_mut().zip(&self.hot) {
            if let Some(f) = b.live_mut() {
                self.stages.flush(&mut f.stage, &mut f.samples);
                sync(f, h);
            }
        }
        self.slab.iter().filter_map(super::Body::live)
    }
}
