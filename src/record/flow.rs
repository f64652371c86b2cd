//! The flow record ([`FlowStats`]) and its parts: identity, sampling, correlations, and the
//! diagnosis.

use serde::Serialize;

use super::{CcText, IpText, TimeText, ip};
use crate::stats::correlation::Correlation;
use crate::wire::sock::SockKey;

/// `ID`: the flow's 4-tuple and first sample time, as cgmon writes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowId {
    /// Local address.
    #[serde(rename = "SrcIP")]
    pub src_ip: IpText,
    /// Local port.
    #[serde(rename = "SrcPort")]
    pub src_port: u16,
    /// Remote address.
    #[serde(rename = "DstIP")]
    pub dst_ip: IpText,
    /// Remote port.
    #[serde(rename = "DstPort")]
    pub dst_port: u16,
    /// CLOCK_MONOTONIC ns of the first sample.
    #[serde(rename = "TstampStartNs")]
    pub tstamp_start_ns: u64,
    /// The two addresses as the kernel gave them (local, remote), for the IPFIX export,
    /// which would otherwise parse the text back (a tenth of its cost). Not in the JSON.
    #[serde(skip)]
    pub addrs: Option<(std::net::IpAddr, std::net::IpAddr)>,
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
            addrs: Some((addr(key.family, &key.src), addr(key.family, &key.dst))),
        }
    }
}

fn addr(family: u8, raw: &[u8; 16]) -> std::net::IpAddr {
    if family == crate::wire::inet_diag::AF_INET {
        std::net::Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]).into()
    } else {
        std::net::Ipv6Addr::from(*raw).into()
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

impl From<(Correlation, Correlation, Correlation)> for Correlations {
    /// RTT ~ cwnd, retransmit rate ~ cwnd and pacing rate ~ cwnd, in that order.
    fn from((rtt, retrans, pacing): (Correlation, Correlation, Correlation)) -> Self {
        Self { rtt_cwnd: rtt.into(), retrans_cwnd: retrans.into(), pacing_cwnd: pacing.into() }
    }
}

impl Correlations {
    /// True when no correlation had two sample pairs to be computed from.
    pub fn none_defined(&self) -> bool {
        [self.rtt_cwnd, self.retrans_cwnd, self.pacing_cwnd].iter().all(|c| c.n < 2)
    }
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
    pub start_time: TimeText,
    /// Wall time the end was seen (destroy event, or the dump that missed the flow).
    #[serde(rename = "EndTime")]
    pub end_time: TimeText,
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
    /// Pearson and Spearman with p-values and effective sample sizes; absent when no
    /// correlation had two samples (a flow of one sample: each would be the `-3`
    /// placeholder, which cgmon's `Corr*Cwnd` fields already carry; docs/records.md).
    #[serde(rename = "Correlations", skip_serializing_if = "Correlations::none_defined")]
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
    /// tcpi_segs_out of the last sample: segments sent, retransmits and pure ACKs included
    /// (an IPFIX record's packets, local to remote).
    #[serde(rename = "SegsOut")]
    pub segs_out: u32,
    /// tcpi_segs_in of the last sample: segments received (the reverse direction's packets).
    #[serde(rename = "SegsIn")]
    pub segs_in: u32,
    /// This end accepted the connection (its local port was listening): the server side.
    /// Not in the JSON record; IPFIX's client and server latencies are told by it.
    #[serde(skip)]
    pub accepted: bool,
    /// Congestion-control algorithm, or [`UNKNOWN_CC`] when the kernel never named it (a
    /// flow seen only in its destroy event, which carries no name).
    #[serde(rename = "CongestionControl")]
    pub congestion_control: CcText,
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
    /// The service that cgroup names (`nginx.service`, `docker:0123456789ab`), set before
    /// the record is written (`who::namer`); absent without a cgroup id or when the cgroup
    /// was gone by then.
    #[serde(rename = "Service", skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// What the remote end is, set by the writer from `--dest-map` and its fallbacks
    /// (`local`, `private`, `external`); absent only when the remote address does not parse.
    #[serde(rename = "DestService", skip_serializing_if = "Option::is_none")]
    pub dest_service: Option<String>,
    /// The program that owned the socket (its task name, or for an interpreter the
    /// module or script it runs: docs/processes.md); absent when none was found, never a
    /// guess.
    #[serde(rename = "Comm", skip_serializing_if = "Option::is_none")]
    pub comm: Option<std::sync::Arc<str>>,
    /// That process's pid, in the monitor's pid namespace.
    #[serde(rename = "Pid", skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Why no program is named, when it cannot be: [`NOT_NAMED_CONNECTING`] for the
    /// connecting side of a connection seen only in its destroy event (which carries no
    /// inode to look for: docs/processes.md). Absent otherwise, named or not.
    #[serde(rename = "NotNamed", skip_serializing_if = "Option::is_none")]
    pub not_named: Option<&'static str>,
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

/// [`FlowStats::not_named`] of a connecting side seen only in its destroy event: fleets
/// group such ends apart, not as a program called `unknown`.
pub const NOT_NAMED_CONNECTING: &str = "connecting side";

impl FlowStats {
    /// Why no program can be named (see [`FlowStats::not_named`]), from what the record
    /// knows: no program, never seen by a dump, and not the accepted side.
    pub fn why_not_named(&self) -> Option<&'static str> {
        let connecting_unseen =
            self.comm.is_none() && self.sampling.from_dumps == 0 && !self.accepted;
        connecting_unseen.then_some(NOT_NAMED_CONNECTING)
    }

    /// The remote end's address: the one the kernel gave, else the record's text parsed
    /// back (a record made elsewhere, read from a file).
    pub fn remote_ip(&self) -> Option<std::net::IpAddr> {
        self.id.addrs.map(|(_, dst)| dst).or_else(|| self.id.dst_ip.parse().ok())
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
    /// The peer's typical window: the time-weighted median over the samples while the flow
    /// was receiver-window limited (over all samples when it never was), bytes; absent with
    /// fewer than two samples.
    #[serde(rename = "TypicalWindowBytes", skip_serializing_if = "Option::is_none")]
    pub typical_window_bytes: Option<u32>,
    /// Window cap: the typical window (else the largest) ÷ min RTT, Mbit/s.
    #[serde(rename = "WindowCapMbps", skip_serializing_if = "Option::is_none")]
    pub window_cap_mbps: Option<f64>,
    /// SO_SNDBUF as the kernel reports it (SKMEMINFO; twice what was asked for), bytes.
    #[serde(rename = "SendBufferBytes", skip_serializing_if = "Option::is_none")]
    pub send_buffer_bytes: Option<u32>,
    /// Send-buffer cap: the send buffer ÷ min RTT, Mbit/s. The buffer is charged with
    /// per-packet overhead, but the kernel lets it overshoot by one packet train, so flows
    /// held by it reach 0.5–1.2 × this (measured in the lab: docs/diagnosis.md, "Rules and thresholds").
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
    /// Retransmitted ÷ sent segments, percent, leaving out the retransmissions the peer
    /// reported as spurious (`SpuriousRetransmits`): loss, not retransmission.
    #[serde(rename = "LossPct")]
    pub loss_pct: f64,
    /// Share of the sampled span the peer's window was closed (under one MSS), percent;
    /// absent with fewer than two samples.
    #[serde(rename = "WindowClosedPct", skip_serializing_if = "Option::is_none")]
    pub window_closed_pct: Option<f64>,
    /// Zero-window stalls: the times the peer's window closed (under one MSS) after it had
    /// been open, over the sampled span; absent with fewer than two samples.
    #[serde(rename = "ZeroWindowStalls", skip_serializing_if = "Option::is_none")]
    pub zero_window_stalls: Option<u32>,
    /// Their total time, ms: how long the window stayed closed, sample to sample.
    #[serde(rename = "ZeroWindowms", skip_serializing_if = "Option::is_none")]
    pub zero_window_ms: Option<f64>,
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
    /// Time spent recovering from retransmission timeouts, ms (tcpi_total_rto_time, Linux
    /// 6.7+; absent before, and at 65,534 for a flow that spent that long or longer).
    #[serde(rename = "RTOTimems", skip_serializing_if = "Option::is_none")]
    pub rto_time_ms: Option<u32>,
    /// The sender's MSS, bytes (tcpi_snd_mss).
    #[serde(rename = "MSS")]
    pub mss: u32,
    /// Whether window scaling was negotiated (RFC 7323): without it the peer's window
    /// cannot pass 65,535 bytes.
    #[serde(rename = "WindowScaling")]
    pub window_scaling: bool,
    /// SYNs (or, on the accepted side, SYN-ACKs) sent again before the connection was set
    /// up.
    #[serde(rename = "SynRetransmits")]
    pub syn_retransmits: u32,
    /// How long the setup took because of them, ms: the initial 1 s timeout plus the RTO
    /// recovery the kernel timed (6.7+), or at least 1 s per retransmit where it cannot be
    /// told apart; absent without SYN retransmits.
    #[serde(rename = "SetupDelayms", skip_serializing_if = "Option::is_none")]
    pub setup_delay_ms: Option<f64>,
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
    /// The dominant limit: `receiver-window`, `send-buffer`, `network`, `application` or
    /// `unknown` (the only values: `analysis::diagnosis::VERDICTS`).
    #[serde(rename = "Verdict")]
    pub verdict: &'static str,
    /// What behind the verdict, when the evidence names it (one of
    /// `analysis::diagnosis::CAUSES`, the first rule that fires in docs/diagnosis.md's
    /// order); absent when the cause is unclear (the finding says so).
    #[serde(rename = "Cause", skip_serializing_if = "Option::is_none")]
    pub cause: Option<&'static str>,
    /// One plain sentence with the numbers behind the verdict.
    #[serde(rename = "Finding")]
    pub finding: String,
}
