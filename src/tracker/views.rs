//! Read-only views of active flows, for the HTTP server's `/flows` endpoints. When asked
//! ([`Query`]), the tracker task copies, between dumps, only the flows a response shows
//! (a page of them, or one found by its cookie) with only the samples it shows, read in
//! place from the flows' blocks; the server turns the copies into JSON on its own thread.

use tokio::sync::oneshot;

use super::Flow;

/// Most samples `/flows/{cookie}` returns (the newest).
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
    /// One flow (by cookie) with its [`RECENT_SAMPLES`] newest samples, and its network
    /// namespace (index); `None` when it is not active.
    Flow(u64, oneshot::Sender<Option<(Flow, u32)>>),
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
