//! What the program emits, below every stage: the flow record and its parts, the sample
//! as retained, and the sample line. The analyzer builds records; the writer and the HTTP
//! side only read them. No logic here beyond construction and serialisation. (The field
//! names and units are cgmon's where it had the field: docs/cgmon.md.)
//!
//! Its rooms: `flow` the record and its parts, `sample` the retained sample, `lines` the
//! sample line and the live view, `text` addresses and rates as text, `json` the one-line
//! JSON of a record, and `ser` the serde serializer that writes it.

mod flow;
pub mod json;
mod lines;
mod sample;
mod ser;
mod text;

pub use flow::{
    Caps, CorrDetail, Correlations, Diagnosis, FlowId, FlowStats, NetnsLabel, SamplingStats,
    Signals, TimeShares, UNKNOWN_CC, UNKNOWN_RATE,
};
pub use lines::{Line, View};
pub use sample::{ABSENT_U64, INFINITE_SSTHRESH, Point, Retained, unwrap_chrono};
pub use text::{EPHEMERAL_FROM, endpoint_text, ip, mbps, served_port, tuple_text};
