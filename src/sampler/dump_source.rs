//! What the sampler reads datagrams from: the kernel (`NetlinkSource`),
//! recorded files, scripts and simulated hosts in tests. Its own file so that every source
//! depends on it and on nothing of each other.

use std::io;

/// What one `recv` produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// The datagram's real length. Larger than the bytes stored when the buffer was too
    /// small (MSG_TRUNC): the tail is lost, and the caller must say so.
    pub len: usize,
    /// CLOCK_MONOTONIC ns right after the datagram arrived.
    pub ts_ns: u64,
}

/// A source of sock_diag datagrams.
#[allow(async_fn_in_trait)] // used through generics within this crate, never as dyn
pub trait DumpSource {
    /// Sends one request message.
    ///
    /// # Errors
    /// The socket's send error.
    async fn send(&mut self, request: &[u8]) -> io::Result<()>;

    /// Receives one datagram into `buf` (cleared first), storing at most `buf.capacity()`
    /// bytes.
    ///
    /// # Errors
    /// The socket's receive error; `ENOBUFS` means the kernel dropped messages.
    async fn recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Received>;

    /// Like [`recv`](Self::recv), but returns `Ok(None)` at once when nothing is queued.
    ///
    /// # Errors
    /// As for `recv`.
    fn try_recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<Received>>;

    /// Drops any half-read reply, e.g. after a timeout, so the next request starts clean.
    ///
    /// # Errors
    /// Reopening the socket failed.
    fn reset(&mut self) -> io::Result<()>;

    /// Not to be woken for what arrives until the next [`recv`](Self::recv): the owner
    /// rests, and reads what queued meanwhile with [`try_recv`](Self::try_recv) or `recv`.
    /// Nothing by default.
    fn quiet(&mut self) {}
}

/// `recv` for a source whose answers are all queued by the time it is asked (scripts,
/// simulated hosts): the next datagram, or, with none queued, never.
///
/// # Errors
/// The source's `try_recv` failed.
pub async fn next_queued<S: DumpSource>(s: &mut S, buf: &mut Vec<u8>) -> io::Result<Received> {
    match s.try_recv(buf)? {
        Some(r) => Ok(r),
        None => std::future::pending().await,
    }
}
