//! What the program emits, below every stage: the flow record and its parts, the sample
//! as retained (packed: `sample`), and the sample line. The analysis builds records; the
//! writer and the HTTP side add only the names (`who::namer`) and otherwise read them. The logic here is construction, packing and serialisation; what a
//! record says is decided in `analysis`. (The field names and units are cgmon's where it had
//! the field: docs/cgmon.md.)
//!
//! Its rooms: `flow` the record and its parts, `sample` the retained sample, `lines` the
//! sample line and the live view, `text` addresses and rates as text, and `json` the
//! one-line JSON of a record (field by field, the bytes serde_json writes).

mod flow;
pub mod json;
mod lines;
mod sample;
mod text;

pub use flow::{
    Caps, CorrDetail, Correlations, Diagnosis, FlowId, FlowStats, NOT_NAMED_CONNECTING, NetnsLabel,
    SamplingStats, Signals, TimeShares, UNKNOWN_CC, UNKNOWN_RATE,
};
pub use lines::{Line, View};
pub use sample::{ABSENT_U64, INFINITE_SSTHRESH, Point, Retained, unwrap_chrono};
pub use text::{
    CcText, EPHEMERAL_FROM, IpText, TimeText, endpoint_text, ip, mbps, served_port, text_in,
    tuple_text,
};
