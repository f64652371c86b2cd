//! cgmon-rs: a Linux TCP congestion monitor built on sock_diag.
//!
//! Pipeline (each arrow a bounded channel; `edges` types what crosses it):
//!
//! ```text
//! poll task:    DumpSource → Sampler::dump_with → Tracker::observe     (poll)
//!               DestroyListener → Tracker::destroyed
//!   ─ Vec<EndedFlow> (tokio mpsc) → analysis task: gather, analyze      (analysis::stage)
//!     (an ended flow's samples still lie in the tracker's pool blocks; the analysis
//!     copies them out and gives the blocks back: tracker/pool.rs)
//!   ─ edges::Batch (std sync_channel) → writer thread: names (who::namer), then
//!     JSON → stdout | gzip files (writer), then each batch as written to its consumers:
//!       ├─ sink::handoff   → sink threads: ClickHouse (sink)
//!       ├─ ipfix::Handoff  → exporter thread: IPFIX over UDP (ipfix)
//!       ├─ recent::Ring    → the web view's ring of ended flows (recent)
//!       └─ samples_out     → `--samples-out`'s file
//! ```
//!
//! The rooms, from the bottom up (`tests/layering.rs` keeps the ranks):
//! - Ground floor, used by all: `wire` (kernel formats over `&[u8]`), `states` (TCP state
//!   names), `units`, `locks`, `clock`, `stats` (summaries, correlations), `gzip` (the
//!   record streams' compressor), `budget` (the CPU budget's account), `metrics` (shared
//!   counters; `metrics::catalogue` lists the monitor's own series once).
//! - `record` (what the program emits), `filter` (expression → INET_DIAG_REQ_BYTECODE),
//!   `netns` (finding and entering namespaces); for tests only, `testkit` and `lab`.
//! - `sampler`: the only code that touches sock_diag sockets (`sampler::source`; stand-ins
//!   for tests in `sampler::fakes`). `who`: who a flow is, beside the pipeline
//!   (`who::services`, `who::destinations` and `who::dests`, `who::processes`, and
//!   `who::namer`, which names a record before it is written).
//! - The stages: `edges` (what crosses each channel, and the writer's `Consumer`),
//!   `tracker` (the flow table, pure), `poll` (polls the kernel, feeds the tracker),
//!   `analysis` (ended flow → record; `analysis::stage` runs it), `chart` (SVG), `writer`
//!   (stdout and files, and the hand-off to the consumers).
//! - The consumers, ranked above the writer so that it imports none: `sink` (ClickHouse),
//!   `ipfix`, `recent`, `samples_out`.
//! - The program: `http` (status page, `/metrics`, the web view), `cli` (cgmon's flags),
//!   `logging`, `report` (`plot` and `report` from files), `app` (wiring, signals,
//!   systemd, exit status), `diagnose` (`app::run` with its records kept and printed).
//!
//! The facts the code relies on are in the repository's `docs/`: `kernel.md` (sock_diag,
//! tcp_info, destroy events, measured costs), `cgmon.md` (what is kept for cgmon's users,
//! and the defects fixed: the ids `B1`…, `R1`… that comments cite) and `records.md` (how a
//! flow's end is seen and what a record may claim); `internals.md` walks the rooms.

pub mod analysis;
pub mod app;
pub mod budget;
pub mod chart;
pub mod cli;
pub mod clock;
pub mod diagnose;
pub mod edges;
pub mod filter;
pub mod gzip;
pub mod http;
pub mod ipfix;
/// Real TCP over a path with known delay, loss and rate, in network namespaces: equipment
/// for the lab tests and `examples/lab.rs` (the `testkit` feature), not in the monitor.
#[cfg(any(test, feature = "testkit"))]
pub mod lab;
pub mod locks;
pub mod logging;
pub mod metrics;
pub mod netns;
pub mod poll;
pub mod recent;
pub mod record;
pub mod report;
pub mod sampler;
pub mod samples_out;
pub mod sink;
pub mod states;
pub mod stats;
pub mod tracker;
pub mod units;
pub mod who;
pub mod wire;
pub mod writer;

/// Loopback connections and other helpers for tests, benches and examples (the `testkit`
/// feature): not part of the library.
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
