//! Flows for the analyzer's and writer's tests and benches (the `testkit` feature): samples
//! fed through a real tracker.

use super::{EndedFlow, Tracker, TrackerConfig};
use crate::wire::build::SockBuilder;
use crate::wire::sock::batch;

/// Feeds one socket's samples (time, builder) through a tracker and ends the flow with a
/// destroy event built from the last one (state CLOSE). The flow is not partial, and it is
/// gathered, as the analyzer stage has it.
pub fn ended_flow(samples: &[(u64, SockBuilder)]) -> EndedFlow {
    let mut e = ended_flow_held(samples);
    e.gather();
    e
}

/// As [`ended_flow`], as the tracker hands it on: its older samples may still lie in the
/// tracker's pool blocks.
pub fn ended_flow_held(samples: &[(u64, SockBuilder)]) -> EndedFlow {
    let mut t = Tracker::new(TrackerConfig::default());
    let mut out = Vec::new();
    t.begin_dump();
    t.end_dump(true, 0, &mut out); // an empty first dump: the flow is not partial
    let (last_ts, last) = samples.last().expect("at least one sample").clone();
    for (ts, s) in &samples[..samples.len() - 1] {
        let b = batch(&[(*ts, s.build())]);
        t.begin_dump();
        t.observe(&b.get(0).expect("one socket"), &mut out);
        t.end_dump(true, *ts, &mut out);
    }
    let b = batch(&[(last_ts, last.state(7).build())]);
    t.destroyed(&b.get(0).expect("one socket"), &mut out);
    assert_eq!(out.len(), 1, "exactly the one flow ends");
    out.pop().expect("one flow")
}
