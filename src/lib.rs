//! cgmon-rs: a Linux TCP congestion monitor built on sock_diag.
//!
//! Pipeline (this crate grows it stage by stage):
//!
//! ```text
//! DumpSource ─datagrams→ sampler ─SockBatch→ tracker ─flows→ analyzer ─records→ writer
//!                 destroy events ─SockBatch→ ┘
//! ```
//!
//! Layers: `sampler` (the only code that touches sockets) sits on `wire` (kernel formats over
//! `&[u8]`) and `filter` (expression → INET_DIAG_REQ_BYTECODE). Both are pure and testable
//! without a kernel.

pub mod analyzer;
pub mod clock;
pub mod dumpcmd;
pub mod filter;
pub mod sampler;
pub mod states;
pub mod stats;
pub mod tracker;
pub mod wire;

#[doc(hidden)]
pub mod testkit;
