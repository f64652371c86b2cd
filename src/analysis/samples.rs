//! `--samples-out`: every retained sample of a written flow as one JSON line, so a flow can
//! be re-analysed or plotted later. Lines carry the flow's cookie and window `Seq` (the
//! join key with its record) and its 4-tuple.

use crate::record::FlowId;
pub use crate::record::Line;
use crate::tracker::EndedFlow;

/// Appends `e`'s retained samples, oldest first, one JSON object per line. It
/// [gathers](EndedFlow::gather) the flow first, as [`analyze`](super::analyze) does.
/// `realtime_offset_ns`: CLOCK_REALTIME − CLOCK_MONOTONIC, for the lines' `UnixNs`.
pub fn write_lines(e: &mut EndedFlow, id: &FlowId, realtime_offset_ns: i128, out: &mut Vec<u8>) {
    e.gather();
    let f = &e.flow;
    let (samples, chrono) = f.chrono();
    for (i, s) in samples.iter().enumerate() {
        let c = chrono.as_ref().map(|c| c[i]);
        let line = Line::new(f.key.cookie, f.seq, id, s, c, realtime_offset_ns);
        // Serialising into a Vec cannot fail: every field is a number or a string.
        if serde_json::to_writer(&mut *out, &line).is_ok() {
            out.push(b'\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::testing::ended_flow;
    use crate::wire::build::SockBuilder;

    #[test]
    fn one_line_per_retained_sample_with_the_flows_key() {
        let s = SockBuilder::new(9, 5000, 80);
        let mut e = ended_flow(&[
            (1_000_000_000, s.clone().rtt_us(10_000).cwnd(10).mss(1000).pacing(1_250_000)),
            (2_000_000_000, s.clone().rtt_us(12_500).cwnd(20).mss(1000).pacing(1_250_000)),
        ]);
        let r = super::super::analyze(&mut e, &Default::default());
        let mut out = Vec::new();
        write_lines(&mut e, &r.id, 7, &mut out);
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
        assert_eq!(lines[0]["UnixNs"], 1_000_000_007u64);
        assert_eq!(lines[1]["SndCwnd"], 20);
    }
}
