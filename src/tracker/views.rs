//! Read-only views of active flows, for the HTTP server's `/flows` endpoints. When asked
//! ([`Query`]), the tracker task copies, between dumps, only the flows a response shows
//! (a page of them, or one found by its cookie) with only the samples it shows, read in
//! place from the flows' blocks; the server turns the copies into JSON on its own thread.

use tokio::sync::oneshot;

use super::Flow;
use crate::chart::flow::Point;
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
    /// Current delivery rate.
    #[default]
    Rate,
    /// Current smoothed RTT.
    Rtt,
    /// Retransmitted segments.
    Retrans,
    /// Time since the first sample (oldest first).
    Age,
}

impl Order {
    /// Its name in a URL (`?order=`).
    pub fn name(self) -> &'static str {
        match self {
            Order::Rate => "rate",
            Order::Rtt => "rtt",
            Order::Retrans => "retrans",
            Order::Age => "age",
        }
    }

    /// Every order, as the page offers them.
    pub const ALL: [Order; 4] = [Order::Rate, Order::Rtt, Order::Retrans, Order::Age];
}

/// What the host view needs of every active flow, for the per-service table (a few
/// numbers each, so 20,000 flows are a few hundred KB).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Brief {
    /// The flow's account (service) slot.
    pub slot: u32,
    /// Its latest smoothed RTT, µs (0: none yet).
    pub rtt_us: u32,
    /// Growth of its busy, rwnd-limited and sndbuf-limited time since its first sample, ms
    /// (`None` before Linux 4.10).
    pub chrono_ms: Option<[u32; 3]>,
    /// Time since its first sample, ms.
    pub span_ms: u64,
}

/// The host view: one page of active flows in the asked order, each with its newest
/// samples, and every active flow briefly.
#[derive(Debug, Default)]
pub struct Overview {
    /// The page, in order.
    pub page: Vec<Flow>,
    /// Each page flow's network namespace (index), beside `page`.
    pub netns: Vec<u32>,
    /// Every active flow (of the namespace asked for).
    pub all: Vec<Brief>,
}

/// A question to the tracker task.
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
        /// Only the flows of this network namespace (index).
        netns: Option<u32>,
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
