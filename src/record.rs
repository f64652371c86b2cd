//! What the program emits, below every stage: the flow record and its parts, the sample
//! as retained, and the sample line. The analyzer builds records; the writer and the HTTP
//! side only read them. No logic here beyond construction and serialisation. (The field
//! names and units are cgmon's where it had the field: docs/cgmon.md.)

use std::net::IpAddr;

use serde::Serialize;

use crate::states::name as state_name;
use crate::stats::correlation::Correlation;
use crate::wire::inet_diag::AF_INET;
use crate::wire::sock::SockKey;

/// A rate in bytes/s as Mbit/s.
pub fn mbps(bytes_per_s: u64) -> f64 {
    bytes_per_s as f64 * 8.0 / 1e6
}

/// One retained sample: what the analysis and the charts need of one poll, in 48 bytes.
///
/// Packed to stay at 48 bytes (a flow keeps thousands): the congestion window and ssthresh
/// are kept in segments beside the MSS (bytes are their product, in u64 as before), the
/// two rates in 40 bits each (up to 8.8 Tbit/s; larger rates are stored as that), and the
/// chrono counters as their low 16 bits in ms ([`unwrap_chrono`] recovers them: between
/// two retained samples of a busy flow they grow by far less than 65 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Retained {
    /// CLOCK_MONOTONIC ns the sample's datagram arrived.
    pub ts_ns: u64,
    /// Smoothed RTT, µs; 0 when no RTT was measured yet.
    pub rtt_us: u32,
    /// RTT variance, µs (meaningless while `rtt_us` is 0).
    pub rttvar_us: u32,
    /// Cumulative retransmitted segments.
    pub total_retrans: u32,
    /// tcpi_snd_cwnd, segments.
    pub snd_cwnd: u32,
    /// tcpi_snd_ssthresh, segments ([`INFINITE_SSTHRESH`] and above: not yet set).
    pub ssthresh: u32,
    /// Low 32 bits of the pacing and delivery rates, bytes/s.
    rates_lo: [u32; 2],
    /// tcpi_snd_mss, bytes (TCP's MSS option is 16 bits wide).
    pub snd_mss: u16,
    /// Bits 32..40 of the pacing and delivery rates.
    rates_hi: [u8; 2],
    /// tcpi_busy_time, tcpi_rwnd_limited, tcpi_sndbuf_limited in ms, modulo 2^16.
    pub chrono16: [u16; 3],
    /// TCP state.
    pub state: u8,
}

// The packing above exists to keep this: a flow keeps thousands of samples.
const _: () = assert!(std::mem::size_of::<Retained>() == 48);

/// The kernel's ssthresh before the first loss (`TCP_INFINITE_SSTHRESH`).
pub const INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

/// A rate as stored: 40 bits, all ones for [`ABSENT_U64`].
const RATE_BITS_MAX: u64 = (1 << 40) - 1;

fn pack_rate(v: u64) -> (u32, u8) {
    let v = if v == ABSENT_U64 { RATE_BITS_MAX } else { v.min(RATE_BITS_MAX - 1) };
    (v as u32, (v >> 32) as u8)
}

fn unpack_rate(lo: u32, hi: u8) -> u64 {
    let v = u64::from(hi) << 32 | u64::from(lo);
    if v == RATE_BITS_MAX { ABSENT_U64 } else { v }
}

impl Retained {
    /// `snd_cwnd × snd_mss`, bytes, computed in u64 (cgmon wrapped it in u32: B9).
    #[inline]
    pub fn cwnd_bytes(&self) -> u64 {
        u64::from(self.snd_cwnd) * u64::from(self.snd_mss)
    }

    /// `snd_ssthresh × snd_mss`, bytes; `None` while ssthresh is still infinite.
    pub fn ssthresh_bytes(&self) -> Option<u64> {
        (self.ssthresh < INFINITE_SSTHRESH)
            .then(|| u64::from(self.ssthresh) * u64::from(self.snd_mss))
    }

    /// Pacing rate, bytes/s; [`ABSENT_U64`] when unlimited or not sent.
    #[inline]
    pub fn pacing_rate(&self) -> u64 {
        unpack_rate(self.rates_lo[0], self.rates_hi[0])
    }

    /// Delivery rate, bytes/s; [`ABSENT_U64`] when not sent or not measured yet (0).
    #[inline]
    pub fn delivery_rate(&self) -> u64 {
        unpack_rate(self.rates_lo[1], self.rates_hi[1])
    }

    /// Sets the pacing rate (bytes/s, or [`ABSENT_U64`]).
    #[inline]
    pub fn set_pacing_rate(&mut self, v: u64) {
        (self.rates_lo[0], self.rates_hi[0]) = pack_rate(v);
    }

    /// Sets the delivery rate (bytes/s, or [`ABSENT_U64`]).
    #[inline]
    pub fn set_delivery_rate(&mut self, v: u64) {
        (self.rates_lo[1], self.rates_hi[1]) = pack_rate(v);
    }
}

/// The chrono counters (busy, rwnd-limited, sndbuf-limited; ms) of each of `samples`,
/// recovered from their low 16 bits going back from the newest, whose full values are
/// `newest` (the flow's latest values, which the tracker keeps whole). Any run of a flow's
/// newest samples works: nothing before it is read.
pub fn unwrap_chrono(samples: &[Retained], newest: [u32; 3]) -> Vec<[u32; 3]> {
    let mut out = vec![[0u32; 3]; samples.len()];
    let mut cur = newest;
    for i in (0..samples.len()).rev() {
        out[i] = cur;
        if i > 0 {
            for (k, c) in cur.iter_mut().enumerate() {
                let step = samples[i].chrono16[k].wrapping_sub(samples[i - 1].chrono16[k]);
                *c = c.saturating_sub(u32::from(step));
            }
        }
    }
    out
}

/// Marks a rate the kernel did not give.
pub const ABSENT_U64: u64 = u64::MAX;

/// `ID`: the flow's 4-tuple and first sample time, as cgmon writes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowId {
    /// Local address.
    #[serde(rename = "SrcIP")]
    pub src_ip: String,
    /// Local port.
    #[serde(rename = "SrcPort")]
    pub src_port: u16,
    /// Remote address.
    #[serde(rename = "DstIP")]
    pub dst_ip: String,
    /// Remote port.
    #[serde(rename = "DstPort")]
    pub dst_port: u16,
    /// CLOCK_MONOTONIC ns of the first sample.
    #[serde(rename = "TstampStartNs")]
    pub tstamp_start_ns: u64,
}

/// `addr:port`, an IPv6 address in brackets.
pub fn endpoint_text(ip: &str, port: u16) -> String {
    if ip.contains(':') { format!("[{ip}]:{port}") } else { format!("{ip}:{port}") }
}

/// `src:port → dst:port`, IPv6 addresses in brackets.
pub fn tuple_text(id: &FlowId) -> String {
    let (src, dst) =
        (endpoint_text(&id.src_ip, id.src_port), endpoint_text(&id.dst_ip, id.dst_port));
    format!("{src} → {dst}")
}

impl FlowId {
    /// The identity of the socket `key`, first sampled at `first_ts_ns`: the one place a
    /// record's and a live view's `ID` are made.
    pub fn new(key: &SockKey, first_ts_ns: u64) -> Self {
        FlowId {
            src_ip: ip(key.family, &key.src),
            src_port: key.sport,
            dst_ip: ip(key.family, &key.dst),
            dst_port: key.dport,
            tstamp_start_ns: first_ts_ns,
        }
    }
}

/// A record's `Netns`: the network namespace its socket was in (with `--netns`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetnsLabel {
    /// The namespace's inode, as `lsns` and `ip netns identify` show it.
    #[serde(rename = "Inode")]
    pub inode: u64,
    /// Its name: the `ip netns` name, else `pod:<uid>` or `<runtime>:<container id>`, else
    /// `host` for the monitor's own, else `netns:<inode>`.
    #[serde(rename = "Name")]
    pub name: String,
    /// The container runtime, when a process in it runs in a recognised container.
    #[serde(rename = "Runtime", skip_serializing_if = "Option::is_none")]
    pub runtime: Option<&'static str>,
    /// That container's id (or an nspawn machine's name).
    #[serde(rename = "Container", skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Its Kubernetes pod UID.
    #[serde(rename = "Pod", skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
}

/// A record's `Sampling`: which requests gave its samples, and how evenly they came.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SamplingStats {
    /// Samples full dumps gave.
    #[serde(rename = "FromDumps")]
    pub from_dumps: u64,
    /// Samples exact polls of the hot flows gave (every tick while the flow moved).
    #[serde(rename = "FromExact")]
    pub from_exact: u32,
    /// The flow's final counters came from its destroy event.
    #[serde(rename = "FromDestroyEvent")]
    pub from_destroy_event: bool,
    /// The longest time between two of its samples, ms: about the tick while it moved,
    /// the full-dump interval while it was still.
    #[serde(rename = "MaxGapms")]
    pub max_gap_ms: f64,
}

/// One correlation with its evidence.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CorrDetail {
    /// Pearson's r (after any adjustment); -2 undefined, -3 fewer than two samples.
    pub pearson: f64,
    /// Spearman's ρ; same sentinels.
    pub spearman: f64,
    /// Two-sided p-value of r; absent when it cannot be computed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pearson_p: Option<f64>,
    /// Two-sided p-value of ρ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spearman_p: Option<f64>,
    /// Pairs used.
    pub n: usize,
    /// Effective sample size of the weights (Kish).
    pub effective_n: f64,
}

impl From<Correlation> for CorrDetail {
    fn from(c: Correlation) -> Self {
        Self {
            pearson: c.pearson,
            spearman: c.spearman,
            pearson_p: c.pearson_p,
            spearman_p: c.spearman_p,
            n: c.n,
            effective_n: c.n_eff,
        }
    }
}

/// The three correlations.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Correlations {
    /// RTT ~ cwnd.
    #[serde(rename = "RTTCwnd")]
    pub rtt_cwnd: CorrDetail,
    /// Retransmit rate ~ cwnd.
    #[serde(rename = "RetransCwnd")]
    pub retrans_cwnd: CorrDetail,
    /// Pacing rate ~ cwnd.
    #[serde(rename = "PacingCwnd")]
    pub pacing_cwnd: CorrDetail,
}

/// The throughput of a record that has none to give (a flow of one sample with no busy time
/// from the kernel, or the receive side of any flow of one sample). cgmon has no sentinel
/// for throughputs; like its correlations' -2 and -3, a negative number cannot be a rate
/// (docs/records.md, "Sentinels").
pub const UNKNOWN_RATE: f64 = -1.0;

/// `CongestionControl` when the kernel never named the algorithm (docs/records.md).
pub const UNKNOWN_CC: &str = "unknown";

/// One flow's record. cgmon's fields first, under cgmon's names and units, then ours.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowStats {
    /// Identity.
    #[serde(rename = "ID")]
    pub id: FlowId,
    /// Wall time of the first sample, RFC 3339 with ns, local time zone.
    #[serde(rename = "StartTime")]
    pub start_time: String,
    /// Wall time the end was seen (destroy event, or the dump that missed the flow).
    #[serde(rename = "EndTime")]
    pub end_time: String,
    /// Last sample seen minus first, ns.
    #[serde(rename = "Duration")]
    pub duration: i64,
    /// Retained samples.
    #[serde(rename = "Samples")]
    pub samples: usize,
    /// Deduped samples.
    #[serde(rename = "SamplesDeduped")]
    pub samples_deduped: u32,
    /// Start or end not seen (`PartialStart || PartialEnd`).
    #[serde(rename = "Partial")]
    pub partial: bool,
    /// TCPI_OPT_TIMESTAMPS in any sample.
    #[serde(rename = "Timestamps")]
    pub timestamps: bool,
    /// TCPI_OPT_SACK in any sample.
    #[serde(rename = "SACK")]
    pub sack: bool,
    /// TCPI_OPT_ECN in any sample.
    #[serde(rename = "ECN")]
    pub ecn: bool,
    /// TCPI_OPT_ECN_SEEN in any sample.
    #[serde(rename = "ECNSeen")]
    pub ecn_seen: bool,
    /// tcpi_min_rtt of the last sample, ms; absent when the kernel had no RTT sample.
    #[serde(rename = "MinRTTKernelms", skip_serializing_if = "Option::is_none")]
    pub min_rtt_kernel_ms: Option<f64>,
    /// Smallest tcpi_rtt over retained samples, ms; absent when no sample had an RTT.
    #[serde(rename = "MinRTTObservedms", skip_serializing_if = "Option::is_none")]
    pub min_rtt_observed_ms: Option<f64>,
    /// tcpi_max_pacing_rate (SO_MAX_PACING_RATE), Mbit/s; absent when unlimited.
    #[serde(rename = "MaxPacingRateKernelMbps", skip_serializing_if = "Option::is_none")]
    pub max_pacing_rate_kernel_mbps: Option<f64>,
    /// Largest tcpi_pacing_rate over retained samples, Mbit/s; absent when none had one.
    #[serde(rename = "MaxPacingRateObservedMbps", skip_serializing_if = "Option::is_none")]
    pub max_pacing_rate_observed_mbps: Option<f64>,
    /// Seven-number summary of tcpi_rtt over the samples with an RTT, ms; absent when no
    /// sample had one (a tcpi_rtt of 0 is "not measured", never a 0 ms RTT).
    #[serde(rename = "RTTSummary", skip_serializing_if = "Option::is_none")]
    pub rtt_summary: Option<[f64; 7]>,
    /// Seven-number summary of tcpi_rttvar over the same samples, ms; absent likewise.
    #[serde(rename = "RTTVarSummary", skip_serializing_if = "Option::is_none")]
    pub rttvar_summary: Option<[f64; 7]>,
    /// Pearson RTT ~ cwnd.
    #[serde(rename = "CorrRTTCwnd")]
    pub corr_rtt_cwnd: f64,
    /// Pearson retransmit rate ~ cwnd.
    #[serde(rename = "CorrRetransCwnd")]
    pub corr_retrans_cwnd: f64,
    /// Pearson pacing rate ~ cwnd.
    #[serde(rename = "CorrPacingCwnd")]
    pub corr_pacing_cwnd: f64,
    /// tcpi_total_retrans of the last sample.
    #[serde(rename = "TotalRetransmits")]
    pub total_retransmits: u32,
    /// tcpi_bytes_acked of the last sample (cumulative; SYN and FIN count 1 each).
    #[serde(rename = "BytesAcked")]
    pub bytes_acked: u64,
    /// Bytes acked during the sampled span over its length, Mbit/s. A flow of one sample
    /// has no span: its lifetime bytes over the kernel's busy time (`ThroughputBasis`
    /// `busy-time`), or [`UNKNOWN_RATE`] when the kernel gives no busy time.
    #[serde(rename = "SendThroughputMbps")]
    pub send_throughput_mbps: f64,
    /// How the throughputs were computed when not over the sampled span (absent): see
    /// docs/records.md.
    #[serde(rename = "ThroughputBasis", skip_serializing_if = "Option::is_none")]
    pub throughput_basis: Option<&'static str>,
    /// tcpi_delivered of the last sample (segments).
    #[serde(rename = "Delivered")]
    pub delivered: u32,
    /// tcpi_delivered_ce of the last sample (segments).
    #[serde(rename = "DeliveredCE")]
    pub delivered_ce: u32,
    /// The start was not seen: open at startup, or a window after the first.
    #[serde(rename = "PartialStart")]
    pub partial_start: bool,
    /// The end was not seen: open at shutdown, or cut at the window cap.
    #[serde(rename = "PartialEnd")]
    pub partial_end: bool,
    /// Window number, from 0; a long flow yields one record per window.
    #[serde(rename = "Seq")]
    pub seq: u32,
    /// destroyed | gone | shutdown | window.
    #[serde(rename = "EndReason")]
    pub end_reason: &'static str,
    /// How the connection closed: clean (this side's FIN was acknowledged) | reset (a RST
    /// was sent or received, or the kernel gave up on it); absent when the end was not seen
    /// or cannot be told.
    #[serde(rename = "Close", skip_serializing_if = "Option::is_none")]
    pub close: Option<&'static str>,
    /// Seven-number summary of cwnd, bytes.
    #[serde(rename = "CwndSummary")]
    pub cwnd_summary: [f64; 7],
    /// Seven-number summary of tcpi_pacing_rate, Mbit/s; absent when no sample had one.
    #[serde(rename = "PacingRateSummary", skip_serializing_if = "Option::is_none")]
    pub pacing_rate_summary: Option<[f64; 7]>,
    /// Seven-number summary of tcpi_delivery_rate, Mbit/s.
    #[serde(rename = "DeliveryRateSummary", skip_serializing_if = "Option::is_none")]
    pub delivery_rate_summary: Option<[f64; 7]>,
    /// Pearson and Spearman with p-values and effective sample sizes.
    #[serde(rename = "Correlations")]
    pub correlations: Correlations,
    /// Bytes received during the sampled span over its length, Mbit/s; [`UNKNOWN_RATE`]
    /// for a flow of one sample (the kernel keeps no receive-side busy time).
    #[serde(rename = "RecvThroughputMbps")]
    pub recv_throughput_mbps: f64,
    /// tcpi_bytes_sent (includes retransmissions).
    #[serde(rename = "BytesSent")]
    pub bytes_sent: u64,
    /// tcpi_bytes_retrans.
    #[serde(rename = "BytesRetrans")]
    pub bytes_retrans: u64,
    /// tcpi_bytes_received.
    #[serde(rename = "BytesReceived")]
    pub bytes_received: u64,
    /// Congestion-control algorithm, or [`UNKNOWN_CC`] when the kernel never named it (a
    /// flow seen only in its destroy event, which carries no name).
    #[serde(rename = "CongestionControl")]
    pub congestion_control: String,
    /// inet | inet6.
    #[serde(rename = "Family")]
    pub family: &'static str,
    /// State at the last sample (ss's names).
    #[serde(rename = "FinalState")]
    pub final_state: &'static str,
    /// Socket cookie.
    #[serde(rename = "Cookie")]
    pub cookie: u64,
    /// cgroup2 id (directory inode); absent when the kernel sent none.
    #[serde(rename = "CgroupID", skip_serializing_if = "Option::is_none")]
    pub cgroup_id: Option<u64>,
    /// The service that cgroup names (`nginx.service`, `docker:0123456789ab`), set by the
    /// writer ([`FlowStats::name_service`]); absent without a cgroup id or when the cgroup
    /// was gone by then.
    #[serde(rename = "Service", skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// What limited the flow, and why (absent on kernels without tcpi_busy_time).
    #[serde(rename = "Diagnosis", skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<Diagnosis>,
    /// How the samples (retained and deduped) were taken: by full dumps, by exact polls
    /// of the hot flows, and the largest gap between two of them (cgmon-rs only).
    #[serde(rename = "Sampling")]
    pub sampling: SamplingStats,
    /// The network namespace, when `--netns` samples more than the monitor's own.
    #[serde(rename = "Netns", skip_serializing_if = "Option::is_none")]
    pub netns: Option<NetnsLabel>,
}

impl FlowStats {
    /// Names the record's service from its cgroup id with `services`, unless named already:
    /// what the writer does before writing it, and the web view before showing it.
    pub fn name_service(&mut self, services: &mut crate::services::Services) {
        if self.service.is_none()
            && let Some(id) = self.cgroup_id
        {
            self.service = services.lookup(id);
        }
    }
}

/// An address as text: IPv4 from the first four bytes, else IPv6.
pub fn ip(family: u8, raw: &[u8; 16]) -> String {
    if family == AF_INET {
        IpAddr::from([raw[0], raw[1], raw[2], raw[3]]).to_string()
    } else {
        IpAddr::from(*raw).to_string()
    }
}

/// How the elapsed time divided, in percent (they sum to 100).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimeShares {
    /// Limited by the peer's advertised receive window.
    #[serde(rename = "ReceiverWindowPct")]
    pub receiver_window: f64,
    /// Limited by our send buffer.
    #[serde(rename = "SendBufferPct")]
    pub send_buffer: f64,
    /// Limited by the congestion window: the network.
    #[serde(rename = "NetworkPct")]
    pub network: f64,
    /// Not busy: the application had nothing to send, or the connection was idle.
    #[serde(rename = "ApplicationPct")]
    pub application: f64,
    /// `span` (growth over the sampled span) or `lifetime` (one sample: lifetime counters,
    /// busy time as elapsed time).
    #[serde(rename = "Basis")]
    pub basis: &'static str,
}

/// What each limit allows, to compare with the achieved throughput.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Caps {
    /// Largest receive window the peer advertised, bytes.
    #[serde(rename = "PeerWindowBytes")]
    pub peer_window_bytes: u32,
    /// Window cap: peer window ÷ min RTT, Mbit/s.
    #[serde(rename = "WindowCapMbps", skip_serializing_if = "Option::is_none")]
    pub window_cap_mbps: Option<f64>,
    /// SO_SNDBUF as the kernel reports it (SKMEMINFO; twice what was asked for), bytes.
    #[serde(rename = "SendBufferBytes", skip_serializing_if = "Option::is_none")]
    pub send_buffer_bytes: Option<u32>,
    /// Send-buffer cap: the send buffer ÷ min RTT, Mbit/s. The buffer is charged with
    /// per-packet overhead, but the kernel lets it overshoot by one packet train, so flows
    /// held by it reach 0.5–1.2 × this (measured in the lab).
    #[serde(rename = "SendBufferCapMbps", skip_serializing_if = "Option::is_none")]
    pub send_buffer_cap_mbps: Option<f64>,
    /// Loss cap (Mathis): MSS ÷ RTT × √(3/2) ÷ √p, with p = retransmitted ÷ sent
    /// segments and the median smoothed RTT, Mbit/s; absent without loss.
    #[serde(rename = "LossCapMbps", skip_serializing_if = "Option::is_none")]
    pub loss_cap_mbps: Option<f64>,
    /// Bandwidth-delay product of the achieved rate at the min RTT, bytes; absent when no
    /// RTT was measured.
    #[serde(rename = "BDPBytes", skip_serializing_if = "Option::is_none")]
    pub bdp_bytes: Option<f64>,
    /// Median congestion window, bytes.
    #[serde(rename = "CwndBytes")]
    pub cwnd_bytes: f64,
}

/// Other signals of trouble.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Signals {
    /// Retransmitted ÷ sent segments, percent.
    #[serde(rename = "LossPct")]
    pub loss_pct: f64,
    /// Reordering events (tcpi_reord_seen).
    #[serde(rename = "ReorderingEvents")]
    pub reordering: u32,
    /// Spurious retransmissions: segments the peer reported twice (tcpi_dsack_dups).
    #[serde(rename = "SpuriousRetransmits")]
    pub spurious: u32,
    /// CE-marked share of delivered segments, percent; absent with nothing delivered.
    #[serde(rename = "CEMarkedPct", skip_serializing_if = "Option::is_none")]
    pub ce_pct: Option<f64>,
    /// Retransmission timeouts (tcpi_total_rto).
    #[serde(rename = "RTOs")]
    pub rtos: u16,
}

/// A flow's diagnosis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnosis {
    /// Time shares.
    #[serde(rename = "TimeShares")]
    pub shares: TimeShares,
    /// Caps.
    #[serde(rename = "Caps")]
    pub caps: Caps,
    /// Other signals.
    #[serde(rename = "Signals")]
    pub signals: Signals,
    /// The rate the verdict and caps are judged against, Mbit/s: the record's
    /// SendThroughputMbps, or for a flow seen in a single sample, its bytes acked over its
    /// busy time.
    #[serde(rename = "AchievedMbps")]
    pub achieved_mbps: f64,
    /// The dominant limit: `receiver-window`, `send-buffer`, `network` or `application`.
    #[serde(rename = "Verdict")]
    pub verdict: &'static str,
    /// One plain sentence with the numbers behind the verdict.
    #[serde(rename = "Finding")]
    pub finding: String,
}

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
}

impl<'a> Line<'a> {
    /// Sample `s` of the flow (window `seq`) with socket cookie `cookie`, whose addresses
    /// are already text; `chrono` its full chrono counters ([`unwrap_chrono`]; `None`
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
            state: state_name(s.state),
            rtt_ms: (s.rtt_us > 0).then(|| f64::from(s.rtt_us) / 1000.0),
            rttvar_ms: (s.rtt_us > 0).then(|| f64::from(s.rttvar_us) / 1000.0),
            cwnd_bytes: s.cwnd_bytes(),
            pacing_rate_mbps: rate(s.pacing_rate()),
            delivery_rate_mbps: rate(s.delivery_rate()),
            total_retransmits: s.total_retrans,
            unix_ns: i128::from(s.ts_ns) + realtime_offset_ns,
            snd_cwnd: s.snd_cwnd,
            ssthresh_bytes: s.ssthresh_bytes(),
            busy_ms: chrono.map(|c| c[0]),
            rwnd_limited_ms: chrono.map(|c| c[1]),
            sndbuf_limited_ms: chrono.map(|c| c[2]),
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

#[cfg(test)]
mod packing_tests {
    use super::*;

    #[test]
    fn rates_keep_40_bits_absent_stays_absent_and_more_saturates() {
        let mut r = Retained::default();
        for v in [0, 1, u64::from(u32::MAX) + 7, RATE_BITS_MAX - 1] {
            r.set_pacing_rate(v);
            r.set_delivery_rate(v / 2);
            assert_eq!((r.pacing_rate(), r.delivery_rate()), (v, v / 2));
        }
        r.set_pacing_rate(ABSENT_U64);
        assert_eq!(r.pacing_rate(), ABSENT_U64);
        r.set_pacing_rate(RATE_BITS_MAX + 5);
        assert_eq!(r.pacing_rate(), RATE_BITS_MAX - 1, "too fast for 40 bits: the largest kept");
        r.ssthresh = INFINITE_SSTHRESH;
        assert_eq!(r.ssthresh_bytes(), None);
        (r.ssthresh, r.snd_mss, r.snd_cwnd) = (20, 1448, u32::MAX);
        assert_eq!(r.ssthresh_bytes(), Some(28_960));
        assert_eq!(r.cwnd_bytes(), u64::from(u32::MAX) * 1448, "no u32 wrap (B9)");
    }

    #[test]
    fn chrono_counters_unwrap_across_16_bit_wraps() {
        // Busy time 65,000 → 66,000 → 200,000 ms: the low 16 bits wrap twice.
        let full = [[65_000u32, 10, 0], [66_000, 10, 0], [200_000, 70_000, 5]];
        let s: Vec<Retained> = full
            .iter()
            .map(|c| Retained { chrono16: c.map(|v| v as u16), ..Retained::default() })
            .collect();
        // From the newest back, every step under 65.5 s is recovered; the last step grew
        // busy time by 134 s and rwnd-limited time by 70 s between two samples, which 16
        // bits cannot hold (they come back short by multiples of 65,536 ms).
        let got = unwrap_chrono(&s, full[2]);
        assert_eq!(got[1], [200_000 - 134_000 % 65_536, 70_000 - 69_990 % 65_536, 0]);
        assert_eq!(unwrap_chrono(&s[..2], full[1]), full[..2].to_vec());
    }
}
