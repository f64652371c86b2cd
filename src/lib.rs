//! cgmon-rs: a Linux TCP congestion monitor built on sock_diag.
//!
//! Pipeline:
//!
//! ```text
//! tracker task: DumpSource → Sampler::dump_with → Tracker::observe     (tracker::task)
//!               DestroyListener → Tracker::destroyed
//!   ─ Vec<EndedFlow> (bounded channel) → analyzer task: analyze → Vec<FlowStats> → writer
//! ```
//!
//! Layers:
//! - The stages: `tracker::task`, `analyzer`.
//! - The pure parts, each testable without a kernel: `tracker`, `stats`, `wire` (kernel
//!   formats over `&[u8]`), `filter` (expression → INET_DIAG_REQ_BYTECODE).
//! - `sampler`: the only code that touches sockets (`sampler::source`).

pub mod analyzer;
pub mod app;
pub mod cli;
pub mod clock;
pub mod dumpcmd;
pub mod filter;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod sampler;
pub mod states;
pub mod stats;
pub mod tracker;
pub mod units;
pub mod wire;
pub mod writer;

#[doc(hidden)]
pub mod testkit;
