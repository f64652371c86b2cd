//! One network namespace's sockets: the dump socket, the destroy listener and the TCP
//! segment counters, opened together. The monitor's own namespace and each `--netns` one
//! are opened here, the same way.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use super::activity::{self, Activity};
use super::destroy::DestroyListener;
use super::source::{NetlinkSource, SocketOptions, Source};

/// What opening a namespace gives.
pub struct SpaceSockets {
    /// Its dump socket.
    pub dump: Source,
    /// Its destroy listener, when one could be opened (a warning names the namespace when
    /// not: its flows then end when a dump misses them).
    pub destroy: Option<DestroyListener<Source>>,
    /// Its TCP segment counters, when readable (see `activity`).
    pub activity: Option<Activity>,
    /// Whether it shares the host's TCP hash table, when the kernel says.
    pub shared_hash: Option<bool>,
}

/// Opens the sockets of the namespace `netns` (None: the monitor's own) named `name` in
/// warnings. What only a thread inside the namespace can read is read by a thread that
/// enters it (`netns::in_netns`). Blocking: threads are made and joined. Call within a
/// tokio runtime.
///
/// # Errors
/// The dump socket could not be made, or the namespace not entered.
pub fn open_space(
    netns: Option<Arc<OwnedFd>>,
    name: &str,
    opts: SocketOptions,
    filter: Option<crate::filter::Expr>,
) -> io::Result<SpaceSockets> {
    let dump = NetlinkSource::open_in(netns.clone(), opts, &[])?;
    let inside = || (activity_here(name), activity::tcp_hash_shared_here());
    let (activity, shared_hash) = match &netns {
        None => inside(),
        Some(fd) => crate::netns::in_netns(fd, || Ok(inside()))?,
    };
    let destroy = match DestroyListener::open_in(netns, filter, opts.destroy_buffer) {
        Ok(d) => Some(d.map_source(Source::Netlink)),
        Err(e) => {
            tracing::warn!(netns = %name, error = %e,
                "no destroy events; flows end when a dump misses them, with the counters of their last sample");
            None
        }
    };
    Ok(SpaceSockets { dump: Source::Netlink(dump), destroy, activity, shared_hash })
}

/// The calling thread's namespace's TCP segment counters, or `None` with a warning naming
/// the namespace (it is then walked by every full dump).
pub fn activity_here(name: &str) -> Option<Activity> {
    Activity::open_here()
        .inspect_err(|e| {
            tracing::warn!(netns = name, error = %e,
                "cannot read the namespace's TCP counters; every full dump walks it");
        })
        .ok()
}
