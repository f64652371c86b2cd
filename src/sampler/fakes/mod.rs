//! The kernel's stand-ins, for tests and benches only (the `testkit` feature): each is a
//! [`DumpSource`](super::DumpSource) the sampler, the destroy listener and the whole
//! program run on as they run on a sock_diag socket.
//!
//! - [`ReplaySource`]: datagrams (or receive errors) played back in order, at once or at set
//!   times; recorded dumps, destroy events, overruns.
//! - [`ScriptSource`]: answers each dump request with what a script says for that dump (or
//!   an error), after an optional delay; the kernel a scheduling test wants.
//! - [`SimHost`]: a host in memory whose sockets a test opens, changes and closes; answers
//!   dumps and exact requests as the kernel does ([`CannedAnswers`] is its allocation-free
//!   answerer for measuring the exact path alone).

pub mod replay;
pub mod script;
pub mod sim;

pub use replay::ReplaySource;
pub use script::ScriptSource;
pub use sim::{CannedAnswers, SimHost, SimState};
