//! Records for the tests of the stages after the analysis (the writer and its consumers).

use crate::tracker::testing::ended_flow;
use crate::wire::build::SockBuilder;

/// A record of a synthetic flow `i` (cookie `i + 1`, local port 5000 + i) of three samples.
pub fn record(i: u64) -> crate::analysis::FlowStats {
    let s = SockBuilder::new(i + 1, 5000 + (i % 60000) as u16, 80);
    let mut e = ended_flow(&[
        (1_000_000_000, s.clone().rtt_us(10_000).cwnd(10).bytes_acked(1000)),
        (2_000_000_000, s.clone().rtt_us(12_000).cwnd(12).bytes_acked(5000 + i)),
        (3_000_000_000, s.rtt_us(11_000).cwnd(14).bytes_acked(9000 + i)),
    ]);
    crate::analysis::analyze(&mut e, &crate::analysis::AnalyzerConfig::default())
}

/// A batch for the writer of records `range` ([`record`]).
pub fn batch(range: std::ops::Range<u64>) -> crate::edges::Batch {
    crate::edges::Batch { records: range.map(record).collect(), ..Default::default() }
}
