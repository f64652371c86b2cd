//! The sample line (`--samples-out` and `/flows`) and the live view of a flow.

use serde::Serialize;

use super::{ABSENT_U64, FlowId, Retained, mbps};
use crate::states::name as state_name;
use crate::wire::inet_diag::AF_INET;

/// One sample line. Units as in the records: ms, bytes, Mbit/s. Also the sample format of
/// the HTTP server's `/flows`.
#[derive(Debug, Serialize)]
pub struct Line<'a> {
    #[serde(rename = "Cookie")]
    cookie: u64,
    #[serde(rename = "Seq")]
    seq: u32,
    #[serde(rename = "SrcIP")]
    src_ip: &'a str,
    #[serde(rename = "SrcPort")]
    src_port: u16,
    #[serde(rename = "DstIP")]
    dst_ip: &'a str,
    #[serde(rename = "DstPort")]
    dst_port: u16,
    /// CLOCK_MONOTONIC ns, as the record's `ID.TstampStartNs`.
    #[serde(rename = "TstampNs")]
    ts_ns: u64,
    #[serde(rename = "State")]
    state: &'static str,
    /// Absent while no RTT was measured.
    #[serde(rename = "RTTms", skip_serializing_if = "Option::is_none")]
    rtt_ms: Option<f64>,
    #[serde(rename = "RTTVarms", skip_serializing_if = "Option::is_none")]
    rttvar_ms: Option<f64>,
    #[serde(rename = "CwndBytes")]
    cwnd_bytes: u64,
    #[serde(rename = "PacingRateMbps", skip_serializing_if = "Option::is_none")]
    pacing_rate_mbps: Option<f64>,
    #[serde(rename = "DeliveryRateMbps", skip_serializing_if = "Option::is_none")]
    delivery_rate_mbps: Option<f64>,
    #[serde(rename = "TotalRetransmits")]
    total_retransmits: u32,
    /// Wall-clock time of `TstampNs`, ns since the Unix epoch.
    #[serde(rename = "UnixNs")]
    unix_ns: i128,
    #[serde(rename = "SndCwnd")]
    snd_cwnd: u32,
    /// Absent while ssthresh is still infinite (before the first loss).
    #[serde(rename = "SsthreshBytes", skip_serializing_if = "Option::is_none")]
    ssthresh_bytes: Option<u64>,
    /// tcpi_busy_time, ms since the connection began; absent before Linux 4.10.
    #[serde(rename = "BusyMs", skip_serializing_if = "Option::is_none")]
    busy_ms: Option<u32>,
    #[serde(rename = "RwndLimitedMs", skip_serializing_if = "Option::is_none")]
    rwnd_limited_ms: Option<u32>,
    #[serde(rename = "SndbufLimitedMs", skip_serializing_if = "Option::is_none")]
    sndbuf_limited_ms: Option<u32>,
    /// The monitor took no sample of the flow for a while before this one (cgmon-rs only;
    /// absent otherwise): `plot` breaks its lines here instead of holding the values.
    #[serde(rename = "AfterPause", skip_serializing_if = "std::ops::Not::not")]
    after_pause: bool,
}

impl<'a> Line<'a> {
    /// Sample `s` of the flow (window `seq`) with socket cookie `cookie`, whose addresses
    /// are already text; `chrono` its full chrono counters ([`unwrap_chrono`](super::unwrap_chrono); `None`
    /// when the kernel sends none), `realtime_offset_ns` CLOCK_REALTIME − CLOCK_MONOTONIC.
    pub fn new(
        cookie: u64,
        seq: u32,
        id: &'a FlowId,
        s: &Retained,
        chrono: Option<[u32; 3]>,
        realtime_offset_ns: i128,
    ) -> Self {
        let rate = |v: u64| (v != ABSENT_U64).then(|| mbps(v));
        Line {
            cookie,
            seq,
            src_ip: &id.src_ip,
            src_port: id.src_port,
            dst_ip: &id.dst_ip,
            dst_port: id.dst_port,
            ts_ns: s.ts_ns,
            state: state_name(s.state()),
            rtt_ms: (s.rtt_us > 0).then(|| f64::from(s.rtt_us) / 1000.0),
            rttvar_ms: (s.rtt_us > 0).then(|| f64::from(s.rttvar_us) / 1000.0),
            cwnd_bytes: s.cwnd_bytes(),
            pacing_rate_mbps: rate(s.pacing_rate()),
            delivery_rate_mbps: rate(s.delivery_rate()),
            total_retransmits: s.total_retrans,
            unix_ns: i128::from(s.ts_ns) + realtime_offset_ns,
            snd_cwnd: s.snd_cwnd(),
            ssthresh_bytes: s.ssthresh_bytes(),
            busy_ms: chrono.map(|c| c[0]),
            rwnd_limited_ms: chrono.map(|c| c[1]),
            sndbuf_limited_ms: chrono.map(|c| c[2]),
            after_pause: s.after_pause(),
        }
    }
}

/// An active flow and its newest values, as `/flows` shows it.
#[derive(Debug, Serialize)]
pub struct View<'a> {
    /// The socket cookie.
    #[serde(rename = "Cookie")]
    pub cookie: u64,
    /// `inet` or `inet6`.
    #[serde(rename = "Family")]
    pub family: &'static str,
    /// Its network namespace's name, when several are sampled (`--netns`).
    #[serde(rename = "Netns", skip_serializing_if = "Option::is_none")]
    pub netns: Option<&'a str>,
    /// The 4-tuple and first sample time.
    #[serde(rename = "ID")]
    pub id: &'a FlowId,
    /// The TCP state of the latest sample, as the kernel names it.
    #[serde(rename = "State")]
    pub state: &'static str,
    /// The congestion control algorithm.
    #[serde(rename = "CongestionControl")]
    pub cc: &'a str,
    /// The socket's cgroup v2 id, when the kernel gave one.
    #[serde(rename = "CgroupID", skip_serializing_if = "Option::is_none")]
    pub cgroup_id: Option<u64>,
    /// Which record of this flow the next one will be (windows cut a long flow).
    #[serde(rename = "Seq")]
    pub seq: u32,
    /// True when the flow was open before the monitor saw it start.
    #[serde(rename = "PartialStart")]
    pub partial_start: bool,
    /// Samples held for the current window.
    #[serde(rename = "Samples")]
    pub samples: usize,
    /// Samples dropped as equal to the one before.
    #[serde(rename = "SamplesDeduped")]
    pub deduped: u32,
    /// CLOCK_MONOTONIC ns of the latest sample.
    #[serde(rename = "LastTstampNs")]
    pub last_ts_ns: u64,
    /// The kernel's minimum RTT, ms.
    #[serde(rename = "MinRTTKernelms", skip_serializing_if = "Option::is_none")]
    pub min_rtt_ms: Option<f64>,
    /// Cumulative retransmitted segments.
    #[serde(rename = "TotalRetransmits")]
    pub total_retrans: u32,
    /// Bytes the peer acknowledged.
    #[serde(rename = "BytesAcked")]
    pub bytes_acked: u64,
    /// Bytes received.
    #[serde(rename = "BytesReceived")]
    pub bytes_received: u64,
    /// Bytes sent, retransmissions included.
    #[serde(rename = "BytesSent")]
    pub bytes_sent: u64,
    /// Bytes retransmitted.
    #[serde(rename = "BytesRetrans")]
    pub bytes_retrans: u64,
    /// The socket's pacing cap, Mbit/s, when one is set.
    #[serde(rename = "MaxPacingRateKernelMbps", skip_serializing_if = "Option::is_none")]
    pub max_pacing_mbps: Option<f64>,
    /// The newest sample.
    #[serde(rename = "Latest", skip_serializing_if = "Option::is_none")]
    pub latest: Option<Line<'a>>,
    /// The newest samples, oldest first (`/flows/{cookie}` only).
    #[serde(rename = "RecentSamples", skip_serializing_if = "Option::is_none")]
    pub recent: Option<Vec<Line<'a>>>,
}

impl View<'_> {
    /// `inet` or `inet6`, as `ss` names the families.
    pub fn family_name(family: u8) -> &'static str {
        if family == AF_INET { "inet" } else { "inet6" }
    }
}
