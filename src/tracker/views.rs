//! Read-only views of active flows, for the HTTP server's `/flows` endpoints. When asked
//! ([`Query`]), the tracker task copies, between dumps, only the flows a response shows
//! (a page of them, or one found by its cookie) with only the samples it shows, read in
//! place from the flows' blocks; the server turns the copies into JSON on its own thread.

use serde::Serialize;
use tokio::sync::oneshot;

use super::{ABSENT_U64, Flow};
use crate::record::{FlowId, Line, ip};
use crate::states::name as state_name;
use crate::wire::inet_diag::AF_INET;

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
        /// Where the answer goes.
        tx: oneshot::Sender<Page>,
    },
    /// One flow (by cookie) with its [`RECENT_SAMPLES`] newest samples; `None` when it is
    /// not active.
    Flow(u64, oneshot::Sender<Option<Flow>>),
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

/// An active flow and its newest values.
#[derive(Debug, Serialize)]
struct View<'a> {
    #[serde(rename = "Cookie")]
    cookie: u64,
    #[serde(rename = "Family")]
    family: &'static str,
    #[serde(rename = "ID")]
    id: &'a FlowId,
    #[serde(rename = "State")]
    state: &'static str,
    #[serde(rename = "CongestionControl")]
    cc: &'a str,
    #[serde(rename = "CgroupID", skip_serializing_if = "Option::is_none")]
    cgroup_id: Option<u64>,
    #[serde(rename = "Seq")]
    seq: u32,
    #[serde(rename = "PartialStart")]
    partial_start: bool,
    #[serde(rename = "Samples")]
    samples: usize,
    #[serde(rename = "SamplesDeduped")]
    deduped: u32,
    #[serde(rename = "LastTstampNs")]
    last_ts_ns: u64,
    #[serde(rename = "MinRTTKernelms", skip_serializing_if = "Option::is_none")]
    min_rtt_ms: Option<f64>,
    #[serde(rename = "TotalRetransmits")]
    total_retrans: u32,
    #[serde(rename = "BytesAcked")]
    bytes_acked: u64,
    #[serde(rename = "BytesReceived")]
    bytes_received: u64,
    #[serde(rename = "BytesSent")]
    bytes_sent: u64,
    #[serde(rename = "BytesRetrans")]
    bytes_retrans: u64,
    #[serde(rename = "MaxPacingRateKernelMbps", skip_serializing_if = "Option::is_none")]
    max_pacing_mbps: Option<f64>,
    #[serde(rename = "Latest", skip_serializing_if = "Option::is_none")]
    latest: Option<Line<'a>>,
    #[serde(rename = "RecentSamples", skip_serializing_if = "Option::is_none")]
    recent: Option<Vec<Line<'a>>>,
}

fn flow_id(f: &Flow) -> FlowId {
    FlowId {
        src_ip: ip(f.key.family, &f.key.src),
        src_port: f.key.sport,
        dst_ip: ip(f.key.family, &f.key.dst),
        dst_port: f.key.dport,
        tstamp_start_ns: f.first_ts_ns,
    }
}

/// `f` (a view copy: its samples are the newest few, `stage.window` counts all) as JSON,
/// with its latest sample, and with those samples when `recent`.
pub fn view(f: &Flow, recent: bool) -> serde_json::Value {
    let id = flow_id(f);
    let l = &f.last;
    let v = View {
        cookie: f.key.cookie,
        family: if f.key.family == AF_INET { "inet" } else { "inet6" },
        id: &id,
        state: state_name(l.state),
        cc: f.cc.as_str(),
        cgroup_id: (f.cgroup_id != 0).then_some(f.cgroup_id),
        seq: f.seq,
        partial_start: f.partial_start,
        samples: f.stage.window as usize,
        deduped: f.deduped,
        last_ts_ns: f.last_ts_ns,
        min_rtt_ms: (l.min_rtt_us != u32::MAX).then(|| f64::from(l.min_rtt_us) / 1000.0),
        total_retrans: l.total_retrans,
        bytes_acked: l.bytes_acked,
        bytes_received: l.bytes_received,
        bytes_sent: l.bytes_sent,
        bytes_retrans: l.bytes_retrans,
        max_pacing_mbps: (l.max_pacing_rate != ABSENT_U64)
            .then(|| l.max_pacing_rate as f64 * 8.0 / 1e6),
        latest: f.samples.last().map(|s| Line::new(f.key.cookie, f.seq, &id, s)),
        recent: recent
            .then(|| f.samples.iter().map(|s| Line::new(f.key.cookie, f.seq, &id, s)).collect()),
    };
    // Serialising numbers and strings into a Value cannot fail.
    serde_json::to_value(&v).unwrap_or(serde_json::Value::Null)
}
