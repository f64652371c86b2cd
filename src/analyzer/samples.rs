//! `--samples-out`: every retained sample of a written flow as one JSON line, so a flow can
//! be re-analysed or plotted later. Lines carry the flow's cookie and window `Seq` (the
//! join key with its record) and its 4-tuple.

use serde::Serialize;

use super::{FlowId, mbps};
use crate::states::name as state_name;
use crate::tracker::{ABSENT_U64, EndedFlow, Flow, Retained};

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
}

impl<'a> Line<'a> {
    /// Sample `s` of flow `f`, whose addresses are already text.
    pub fn new(f: &Flow, id: &'a FlowId, s: &Retained) -> Self {
        let rate = |v: u64| (v != ABSENT_U64).then(|| mbps(v));
        Line {
            cookie: f.key.cookie,
            seq: f.seq,
            src_ip: &id.src_ip,
            src_port: id.src_port,
            dst_ip: &id.dst_ip,
            dst_port: id.dst_port,
            ts_ns: s.ts_ns,
            state: state_name(s.state),
            rtt_ms: (s.rtt_us > 0).then(|| f64::from(s.rtt_us) / 1000.0),
            rttvar_ms: (s.rtt_us > 0).then(|| f64::from(s.rttvar_us) / 1000.0),
            cwnd_bytes: s.cwnd_bytes,
            pacing_rate_mbps: rate(s.pacing_rate),
            delivery_rate_mbps: rate(s.delivery_rate),
            total_retransmits: s.total_retrans,
        }
    }
}

/// Appends `e`'s retained samples, oldest first, one JSON object per line. It
/// [gathers](EndedFlow::gather) the flow first, as [`analyze`](super::analyze) does.
pub fn write_lines(e: &mut EndedFlow, id: &FlowId, out: &mut Vec<u8>) {
    e.gather();
    for s in &e.flow.samples {
        // Serialising into a Vec cannot fail: every field is a number or a string.
        if serde_json::to_writer(&mut *out, &Line::new(&e.flow, id, s)).is_ok() {
            out.push(b'\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{SockBuilder, ended_flow};

    #[test]
    fn one_line_per_retained_sample_with_the_flows_key() {
        let s = SockBuilder::new(9, 5000, 80);
        let mut e = ended_flow(&[
            (1_000_000_000, s.clone().rtt_us(10_000).cwnd(10).mss(1000).pacing(1_250_000)),
            (2_000_000_000, s.clone().rtt_us(12_500).cwnd(20).mss(1000).pacing(1_250_000)),
        ]);
        let r = super::super::analyze(&mut e, &Default::default());
        let mut out = Vec::new();
        write_lines(&mut e, &r.id, &mut out);
        let lines: Vec<serde_json::Value> = out
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        assert_eq!(lines.len(), r.samples);
        assert_eq!(lines[0]["Cookie"], 9);
        assert_eq!(lines[0]["SrcPort"], 5000);
        assert_eq!(lines[0]["TstampNs"], 1_000_000_000u64);
        assert_eq!(lines[0]["RTTms"], 10.0);
        assert_eq!(lines[1]["RTTms"], 12.5);
        assert_eq!(lines[1]["CwndBytes"], 20_000);
        assert_eq!(lines[0]["PacingRateMbps"], 10.0);
    }
}
