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

    /// Receives up to `limit` queued datagrams (at most [`Slots::count`]) into `slots`
    /// without waiting: how many, 0 when none is queued. An error after some datagrams
    /// comes at the next call, as recvmmsg(2) does it. By default one
    /// [`try_recv`](Self::try_recv) at a time.
    ///
    /// # Errors
    /// As for `recv`, for the first datagram.
    fn try_recv_many(&mut self, slots: &mut Slots, limit: usize) -> io::Result<usize> {
        one_at_a_time(self, slots, limit)
    }

    /// Drops any half-read reply, e.g. after a timeout, so the next request starts clean.
    ///
    /// # Errors
    /// Reopening the socket failed.
    fn reset(&mut self) -> io::Result<()>;

    /// Not to be woken for what arrives until the next [`recv`](Self::recv): the owner
    /// rests, and reads what queued meanwhile with [`try_recv`](Self::try_recv) or `recv`.
    /// Nothing by default.
    fn quiet(&mut self) {}

    /// The socket's receive-queue memory and drop counter (`SO_MEMINFO`), where it has
    /// them: a kernel socket does, a stand-in does not (`None`).
    fn meminfo(&self) -> Option<MemInfo> {
        None
    }
}

/// What `SO_MEMINFO` tells of a socket's receive side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemInfo {
    /// Bytes queued, as the kernel charges them (each message's buffer, its truesize).
    pub rmem_alloc: u32,
    /// The receive buffer's limit, as the kernel accounts it (twice what was set).
    pub rcvbuf: u32,
    /// Messages the kernel dropped for want of room since the socket opened (it wraps).
    pub drops: u32,
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

/// Datagrams received together ([`DumpSource::try_recv_many`]): slots of one size in one
/// buffer, kept from call to call.
pub struct Slots {
    bytes: Vec<u8>,
    size: usize,
    count: usize,
    got: Vec<Received>,
    /// An error that came after some datagrams, for the next call.
    deferred: Option<io::Error>,
    /// [`one_at_a_time`]'s receive buffer, kept so that a call allocates nothing.
    one: Vec<u8>,
}

impl Slots {
    /// Most slots a set may have (a source's headers for them may live on its stack).
    pub const MAX: usize = 16;

    /// `count` slots (at most [`Slots::MAX`]) of `size` bytes each.
    pub fn new(count: usize, size: usize) -> Self {
        let (count, size) = (count.clamp(1, Self::MAX), size.max(1));
        let bytes = vec![0; count * size];
        let got = Vec::with_capacity(count);
        Self { bytes, size, count, got, deferred: None, one: Vec::with_capacity(size) }
    }

    /// How many slots.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The size of each.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Datagram `i` of the last call: the bytes stored (at most [`size`](Self::size); its
    /// real length is `Received::len`) and what the receive said.
    pub fn get(&self, i: usize) -> (&[u8], Received) {
        let r = self.got[i];
        let at = i * self.size;
        (&self.bytes[at..at + r.len.min(self.size)], r)
    }

    /// The slots' memory, one after another, for a source that fills them itself; then
    /// [`set_received`](Self::set_received).
    pub fn buffers(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    /// What the source received, slot by slot, in the last call.
    pub fn set_received(&mut self, got: impl IntoIterator<Item = Received>) {
        self.got.clear();
        self.got.extend(got.into_iter().take(self.count));
    }
}

/// [`DumpSource::try_recv_many`] by one [`DumpSource::try_recv`] at a time, for sources
/// with nothing better.
///
/// # Errors
/// As the source's `try_recv`, for the first datagram (a later one's comes next call).
pub fn one_at_a_time<S: DumpSource + ?Sized>(
    s: &mut S,
    slots: &mut Slots,
    limit: usize,
) -> io::Result<usize> {
    slots.got.clear();
    if let Some(e) = slots.deferred.take() {
        return Err(e);
    }
    let mut one = std::mem::take(&mut slots.one);
    while slots.got.len() < limit.min(slots.count()) {
        match s.try_recv(&mut one) {
            Ok(Some(r)) => {
                let at = slots.got.len() * slots.size;
                let n = one.len().min(slots.size);
                slots.bytes[at..at + n].copy_from_slice(&one[..n]);
                slots.got.push(r);
            }
            Ok(None) => break,
            Err(e) if slots.got.is_empty() => {
                slots.one = one;
                return Err(e);
            }
            Err(e) => {
                slots.deferred = Some(e);
                break;
            }
        }
    }
    slots.one = one;
    Ok(slots.got.len())
}
