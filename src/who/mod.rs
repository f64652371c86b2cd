//! Who a flow is: the names a record carries besides its addresses. Each is looked up
//! beside the pipeline, not in it, and none imports another stage:
//! - `services`: the flow's cgroup → its service (`Service`), read from the cgroup tree;
//! - `destinations`: its remote address and port → a name (`DestService`), from
//!   `--dest-map` or the address's kind (local, private, external); `dests` keeps that map
//!   fresh (reread on change and SIGHUP);
//! - `processes`: its socket → the process that holds it (`Comm`, `Pid`), by a walker over
//!   `/proc` on a thread of its own, within the CPU budget;
//! - `namer`: a record's service and destination set before it is written.

pub mod destinations;
pub mod dests;
pub mod namer;
pub mod processes;
pub mod services;
