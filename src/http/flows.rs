//! The active flows as `/flows` shows them: the tracker's view copies ([`crate::tracker::views`])
//! turned into [`View`] records.

use crate::record::{ABSENT_U64, FlowId, Line, View};
use crate::tracker::Flow;

/// `f` (a view copy: its samples are the newest few, `stage.window` counts all) as JSON,
/// with its latest sample, and with those samples when `recent`.
/// `netns`: its namespace's name, when several are sampled.
/// `realtime_offset_ns`: CLOCK_REALTIME − CLOCK_MONOTONIC, for the samples' `UnixNs`.
pub fn view(
    f: &Flow,
    recent: bool,
    netns: Option<&str>,
    realtime_offset_ns: i128,
) -> serde_json::Value {
    let id = FlowId::new(&f.key, f.first_ts_ns);
    let (_, chrono) = f.chrono();
    let chrono_at = |i: usize| chrono.as_ref().map(|c| c[i]);
    let line =
        |i: usize, s| Line::new(f.key.cookie, f.seq, &id, s, chrono_at(i), realtime_offset_ns);
    let l = &f.last;
    let v = View {
        cookie: f.key.cookie,
        family: View::family_name(f.key.family),
        netns,
        id: &id,
        state: crate::states::name(l.state),
        cc: f.cc.as_str(),
        cgroup_id: (f.cgroup_id != 0).then_some(f.cgroup_id),
        seq: f.seq,
        partial_start: f.partial_start,
        samples: f.stage.window(),
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
        latest: f.samples.last().map(|s| line(f.samples.len() - 1, s)),
        recent: recent.then(|| f.samples.iter().enumerate().map(|(i, s)| line(i, s)).collect()),
    };
    // Serialising numbers and strings into a Value cannot fail.
    serde_json::to_value(&v).unwrap_or(serde_json::Value::Null)
}
