//! cgmon-rs: a Linux TCP congestion monitor built on sock_diag.
//!
//! Pipeline:
//!
//! ```text
//! poll task:    DumpSource → Sampler::dump_with → Tracker::observe     (poll)
//!               DestroyListener → Tracker::destroyed
//!   ─ Vec<EndedFlow> (tokio mpsc) → analysis task: gather, analyze      (analysis::stage)
//!     (an ended flow's samples still lie in the tracker's pool blocks; the analysis
//!     copies them out and gives the blocks back: tracker/pool.rs)
//!   ─ writer::Batch (std sync_channel) → writer thread: JSON → stdout | gzip files (writer)
//!   ─ sink::SinkMsg (std sync_channel, try_send) → sink thread: ClickHouse (sink)
//! ```
//!
//! Layers:
//! - The program: `app` (wiring, signals, systemd, exit status), `cli` (cgmon's flags),
//!   `logging`, `metrics` (shared counters; `metrics::catalogue` lists the monitor's own
//!   series once for `/metrics`, the status page and the summary), `http` (status page).
//! - The stages: `poll` (polls the kernel, feeds the tracker), `analysis::stage`, `writer`;
//!   `sink` (the fleet sink to ClickHouse, beside the writer on threads of its own).
//! - The pure parts, each testable without a kernel: `tracker`, `analysis`, `record`,
//!   `stats`, `wire` (kernel formats over `&[u8]`), `filter` (expression →
//!   INET_DIAG_REQ_BYTECODE), `units`; `chart` draws, above them all.
//! - Beside the pipeline, who a flow is (`who`): `who::services` (cgroup → service),
//!   `who::destinations` (address → name, `--dest-map`) and `who::processes` (socket →
//!   process, on a walker thread of its own).
//! - `sampler`: the only code that touches sock_diag sockets (`sampler::source`; a
//!   namespace's sockets are opened together by `sampler::space`). Its stand-ins for
//!   tests (replay, script, simulated host) are `sampler::fakes`, in the `testkit` feature.
//!
//! The facts the code relies on are in the repository's `docs/`: `kernel.md` (sock_diag,
//! tcp_info, destroy events, measured costs), `cgmon.md` (what is kept for cgmon's users,
//! and the defects fixed: the ids `B1`…, `R1`… that comments cite) and `records.md` (how a
//! flow's end is seen and what a record may claim).

pub mod analysis;
pub mod app;
pub mod budget;
pub mod chart;
pub mod cli;
pub mod clock;
pub mod diagnose;
pub mod edges;
pub mod filter;
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
