//! TCP destroy events: the kernel multicasts an `inet_diag_msg` with the final `tcp_info` of
//! every TCP socket as it is destroyed (groups SKNLGRP_INET_TCP_DESTROY and
//! SKNLGRP_INET6_TCP_DESTROY). They give a flow's last counters even when it lived and died
//! between two polls.
//!
//! No bytecode applies to multicast, so the user's filter is evaluated here in userspace.
//! Events with remote port 0 skip the filter: listeners, and sockets that the kernel
//! disconnected before destroying them (an abortive close with `SO_LINGER` 0, a failed
//! connect), whose peer and counters it has cleared. They are passed on all the same: the
//! tracker uses them only to end a flow it already follows by cookie (docs/records.md).

use std::io;

use super::SampleError;
use super::source::{DumpSource, NetlinkSource, Slots, SocketOptions};
use crate::filter::Expr;
use crate::wire::inet_diag::{IPPROTO_TCP, SOCK_DIAG_BY_FAMILY};
use crate::wire::nlmsg::NlMsgIter;
use crate::wire::sock::{Datagram, Sample, SockBatch, index};

/// `SKNLGRP_INET_TCP_DESTROY` (include/uapi/linux/sock_diag.h).
pub const SKNLGRP_INET_TCP_DESTROY: u32 = 1;
/// `SKNLGRP_INET6_TCP_DESTROY`.
pub const SKNLGRP_INET6_TCP_DESTROY: u32 = 3;

/// Receive buffer for the event socket, by default (`--destroy-buffer`). An event queues as
/// a 1,280-byte buffer (its truesize: a 380-byte message, Linux 6.18), and the kernel
/// accounts twice the size set, so 32 MiB hold about 52,000 events: 1.2 s without the CPU
/// at the 22,000 connections a second (44,000 events) the churn bench makes here, 13 s at
/// 2,000 a second. Memory is taken only while events wait (docs/scale.md).
pub const DESTROY_RCVBUF: usize = 32 << 20;

/// The kernel's memory for one queued destroy event (its skb's truesize), measured: the
/// figure the buffer's size is reasoned from.
pub const EVENT_TRUESIZE: usize = 1280;

/// Upper bound on datagrams gathered into one batch, so one batch stays a bounded unit of
/// work for the tracker even under a storm of closes.
pub const MAX_DATAGRAMS_PER_BATCH: usize = 1024;

/// Destroy events are one socket per datagram, about 400 bytes; 8 KiB is ample.
const EVENT_BUFSIZE: usize = 8 * 1024;

/// Events taken in one receive call while draining ([`DumpSource::try_recv_many`]), each
/// in a slot of [`EVENT_BUFSIZE`]: 64 KiB a listener (one a network namespace).
const EVENTS_PER_CALL: usize = 8;

/// Events received in one wake-up.
#[derive(Debug, Clone, Default)]
pub struct DestroyBatch {
    /// The flows' final samples.
    pub batch: SockBatch,
    /// ENOBUFS seen: the kernel dropped events because the socket buffer was full.
    pub overruns: u32,
    /// Events the kernel dropped since the last count (its `SO_MEMINFO` drop counter): one
    /// ENOBUFS can stand for thousands, as the kernel drops every event until the queue
    /// has room and says so once.
    pub lost: u64,
    /// Events with remote port 0 (listeners, disconnected sockets): passed on unfiltered.
    pub unconnected: u32,
    /// Events the user's filter rejected.
    pub filtered: u32,
    /// Events that did not decode, or were cut short.
    pub malformed: u32,
    /// It stopped at [`MAX_DATAGRAMS_PER_BATCH`]: more events wait now.
    pub full: bool,
}

/// Listens for TCP destroy events.
pub struct DestroyListener<S> {
    source: S,
    filter: Option<Expr>,
    /// Its receive buffer is smaller than [`DESTROY_RCVBUF`] (net.core.rmem_max capped it):
    /// it must be read more often.
    capped: bool,
    /// Each event is received here, then copied out at its size: a buffer of
    /// [`EVENT_BUFSIZE`] kept per event was 8 KiB allocated for 380 bytes (an event in
    /// tests/fixtures/destroy.bin, Linux 6.18).
    scratch: Vec<u8>,
    /// Where [`drain`](Self::drain) receives several events at a time (made at the first).
    slots: Option<Slots>,
    /// The last batch's datagrams and events: the next starts with room for as many, as
    /// growing its vectors from empty was a realloc every few events under churn.
    last_len: (usize, usize),
    /// The kernel's drop counter when last read, and whether it must be read again: from
    /// an ENOBUFS until a read finds nothing new (drops go on, unannounced, until the
    /// queue has room again).
    drops: (u32, bool),
}

impl DestroyListener<NetlinkSource> {
    /// Joins both destroy groups with a [`DESTROY_RCVBUF`] receive buffer.
    ///
    /// # Errors
    /// Opening or subscribing the socket failed.
    pub fn open(filter: Option<Expr>) -> io::Result<Self> {
        Self::open_in(None, filter, DESTROY_RCVBUF)
    }

    /// As [`open`](Self::open), in the network namespace `netns` (None: the monitor's own).
    ///
    /// # Errors
    /// Entering the namespace, opening or subscribing the socket failed.
    pub fn open_in(
        netns: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
        filter: Option<Expr>,
        size: usize,
    ) -> io::Result<Self> {
        let groups = [SKNLGRP_INET_TCP_DESTROY, SKNLGRP_INET6_TCP_DESTROY];
        // SO_RCVBUF is capped at net.core.rmem_max, 208 KiB by default, which overruns at
        // high churn (docs/kernel.md, "Destroy events"); SO_RCVBUFFORCE (CAP_NET_ADMIN)
        // lifts the cap. One socket: the plain size first, then the forced one where
        // allowed, and a warning below if what it got is short.
        let size = if size == 0 { DESTROY_RCVBUF } else { size };
        let opts = SocketOptions {
            rcvbuf: Some(size),
            rcvbuf_force: Some(size),
            force_if_allowed: true,
            destroy_buffer: size,
        };
        let source = NetlinkSource::open_in(netns, opts, &groups)?;
        // The kernel reports twice what was set (its bookkeeping).
        let got = source.rcvbuf().map(|b| b / 2);
        let capped = got.as_ref().is_ok_and(|&b| b < size);
        if capped {
            tracing::warn!(
                bytes = got.unwrap_or(0),
                wanted = size,
                "destroy events' receive buffer is capped by net.core.rmem_max; at thousands of \
                 closes a second events may be lost (counted as cgmon_destroy_events_lost_total): \
                 raise the sysctl to {size} or grant CAP_NET_ADMIN"
            );
        }
        Ok(Self { capped, ..Self::new(source, filter) })
    }
}

impl<S: DumpSource> DestroyListener<S> {
    /// Listens on `source`, which must already be subscribed.
    pub fn new(source: S, filter: Option<Expr>) -> Self {
        let scratch = Vec::with_capacity(EVENT_BUFSIZE);
        // Drops before we listened are not ours to count (none, on a fresh socket).
        let drops = (source.meminfo().map_or(0, |m| m.drops), false);
        Self { source, filter, capped: false, scratch, slots: None, last_len: (0, 0), drops }
    }

    /// Stops being woken for each event until the next [`next_batch`](Self::next_batch):
    /// the owner rests, and the events queue in the socket's buffer meanwhile.
    pub fn rest(&mut self) {
        self.source.quiet();
    }

    /// Whether net.core.rmem_max capped its receive buffer below what was asked.
    pub fn capped(&self) -> bool {
        self.capped
    }

    /// The same listener over its source wrapped by `f` (e.g. into the program's `Source`).
    pub fn map_source<T>(self, f: impl FnOnce(S) -> T) -> DestroyListener<T> {
        DestroyListener {
            source: f(self.source),
            filter: self.filter,
            capped: self.capped,
            scratch: self.scratch,
            slots: self.slots,
            last_len: self.last_len,
            drops: self.drops,
        }
    }

    /// Events the kernel dropped since the last count, read now whatever was seen: at a
    /// namespace's end and at the stop, so that nothing lost goes uncounted.
    pub fn take_lost(&mut self) -> u64 {
        let Some(m) = self.source.meminfo() else { return 0 };
        let new = m.drops.wrapping_sub(self.drops.0);
        self.drops = (m.drops, false);
        u64::from(new)
    }

    /// The receive queue's memory and limit (`SO_MEMINFO`), where the source has them.
    pub fn meminfo(&self) -> Option<crate::sampler::source::MemInfo> {
        self.source.meminfo()
    }

    /// Waits for at least one event, then takes whatever else is already queued.
    ///
    /// An overrun (ENOBUFS) is counted in the batch and reception goes on: the socket stays
    /// usable, only the events that did not fit are gone.
    ///
    /// # Errors
    /// A receive error other than ENOBUFS.
    pub async fn next_batch(&mut self) -> Result<DestroyBatch, SampleError> {
        let mut out = self.fresh();
        // Received straight into the kept buffer (not taken out of `self`), so that a
        // wait cancelled by the loop's other arms loses nothing.
        let first = match self.source.recv(&mut self.scratch).await {
            Ok(r) => Some(r),
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                out.overruns += 1;
                None
            }
            Err(source) => return Err(SampleError::Io { op: "recv destroy event", source }),
        };
        if let Some(r) = first {
            take(self.filter.as_ref(), &mut out, &self.scratch, r.len, r.ts_ns);
        }
        self.drain_into(&mut out)?;
        Ok(out)
    }

    /// Takes whatever events are queued now, without waiting (possibly none).
    ///
    /// # Errors
    /// A receive error other than ENOBUFS.
    pub fn drain(&mut self) -> Result<DestroyBatch, SampleError> {
        let mut out = self.fresh();
        self.drain_into(&mut out)?;
        Ok(out)
    }

    /// An empty batch with room for as many as the last one held.
    fn fresh(&self) -> DestroyBatch {
        let mut out = DestroyBatch::default();
        out.batch.datagrams.reserve(self.last_len.0);
        out.batch.index.reserve(self.last_len.1);
        out
    }

    fn drain_into(&mut self, out: &mut DestroyBatch) -> Result<(), SampleError> {
        let slots = self.slots.get_or_insert_with(|| Slots::new(EVENTS_PER_CALL, EVENT_BUFSIZE));
        loop {
            let room = MAX_DATAGRAMS_PER_BATCH.saturating_sub(out.batch.datagrams.len());
            if room == 0 {
                out.full = true;
                break;
            }
            match self.source.try_recv_many(slots, room) {
                Ok(0) => break,
                Ok(n) => {
                    for i in 0..n {
                        let (bytes, r) = slots.get(i);
                        take(self.filter.as_ref(), out, bytes, r.len, r.ts_ns);
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => out.overruns += 1,
                Err(source) => {
                    return Err(SampleError::Io { op: "recv destroy event", source });
                }
            }
        }
        self.last_len = (out.batch.datagrams.len(), out.batch.index.len());
        if out.overruns > 0 || self.drops.1 {
            let new = self.take_lost();
            out.lost += new;
            // Read again at the next batch while drops still come.
            self.drops.1 = new > 0;
        }
        Ok(())
    }
}

/// Indexes the events of one datagram `buf` (`len` bytes as the kernel sent it) into
/// `out`, keeping a copy of the datagram when any event passed `filter`.
fn take(filter: Option<&Expr>, out: &mut DestroyBatch, buf: &[u8], len: usize, ts_ns: u64) {
    if len > buf.len() {
        out.malformed += 1;
        return;
    }
    let dgram = out.batch.datagrams.len() as u32;
    let before = out.batch.index.len();
    for m in NlMsgIter::new(buf) {
        let Ok(m) = m else {
            out.malformed += 1;
            break;
        };
        if m.kind != SOCK_DIAG_BY_FAMILY {
            continue;
        }
        let Ok(mut idx) = index(m.payload) else {
            out.malformed += 1;
            continue;
        };
        idx.dgram = dgram;
        idx.payload_off = m.payload_offset as u32;
        let s = Sample::new(ts_ns, m.payload, &idx);
        if s.protocol().is_some_and(|p| p != IPPROTO_TCP) {
            continue;
        }
        if s.msg().dport() == 0 {
            out.unconnected += 1;
        } else if let Some(f) = filter
            && !f.matches(&s.key())
        {
            out.filtered += 1;
            continue;
        }
        out.batch.index.push(idx);
    }
    if out.batch.index.len() > before {
        out.batch.datagrams.push(Datagram { ts_ns, bytes: buf.to_vec() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::fakes::ReplaySource;
    use crate::sampler::source::BufferRefused;
    use crate::wire::build::MsgBuilder;

    /// Drops `cap` from the calling thread's effective capabilities (they are per thread),
    /// as a unit without it runs. Without root it was never there.
    fn drop_effective(cap: u32) {
        #[repr(C)]
        struct Header {
            version: u32,
            pid: libc::c_int,
        }
        #[repr(C)]
        #[derive(Clone, Copy, Default)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let mut h = Header { version: 0x2008_0522, pid: 0 }; // _LINUX_CAPABILITY_VERSION_3
        let mut d = [Data::default(); 2];
        // SAFETY: the header and two data structs capget/capset expect for version 3.
        unsafe {
            assert_eq!(libc::syscall(libc::SYS_capget, &raw mut h, d.as_mut_ptr()), 0);
            d[(cap / 32) as usize].effective &= !(1 << (cap % 32));
            assert_eq!(libc::syscall(libc::SYS_capset, &raw mut h, d.as_ptr()), 0);
        }
    }

    #[test]
    fn without_cap_net_admin_one_socket_gets_what_rmem_max_allows() {
        let rmem_max: usize =
            std::fs::read_to_string("/proc/sys/net/core/rmem_max").unwrap().trim().parse().unwrap();
        std::thread::spawn(move || {
            drop_effective(12); // CAP_NET_ADMIN
            let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
            rt.block_on(async {
                let l = DestroyListener::open(None).expect("opens without the capability");
                let got = l.source.rcvbuf().unwrap() / 2;
                assert_eq!(got, DESTROY_RCVBUF.min(rmem_max));
                assert_eq!(l.capped(), rmem_max < DESTROY_RCVBUF, "{got} B");
                // A forced size the user asked for is refused aloud, naming the flag.
                let opts = SocketOptions { rcvbuf_force: Some(1 << 20), ..Default::default() };
                let e = NetlinkSource::open_in(None, opts, &[]).err().expect("refused");
                assert!(BufferRefused::of(&e).is_some(), "{e}");
            });
        })
        .join()
        .unwrap();
    }

    fn event(cookie: u64, dport: u16) -> Vec<u8> {
        let mut m = MsgBuilder::v4(0, cookie, 40000, dport);
        m.head[1] = 7; // CLOSE
        m.flags = 0;
        m.build()
    }

    #[tokio::test]
    async fn overrun_is_counted_and_reception_goes_on() {
        let script = ReplaySource::default()
            .error(libc::ENOBUFS)
            .message(event(1, 80))
            .error(libc::ENOBUFS)
            .message(event(2, 0)) // a listener: remote port 0
            .message(event(3, 443));
        let mut l = DestroyListener::new(script, None);
        let b = l.next_batch().await.unwrap();
        assert_eq!(b.overruns, 2);
        assert_eq!(b.unconnected, 1);
        let cookies: Vec<_> = b.batch.iter().map(|s| s.key().cookie).collect();
        assert_eq!(cookies, [1, 2, 3], "remote port 0 is the tracker's to judge");
    }

    #[tokio::test]
    async fn other_errors_are_reported() {
        let script = ReplaySource::default().error(libc::EBADF);
        let mut l = DestroyListener::new(script, None);
        assert!(matches!(l.next_batch().await, Err(SampleError::Io { .. })));
    }

    #[tokio::test]
    async fn a_batch_stops_at_its_cap_and_says_more_wait() {
        let script = (0..MAX_DATAGRAMS_PER_BATCH as u64 + 6)
            .fold(ReplaySource::default(), |r, c| r.message(event(c + 1, 443)));
        let mut l = DestroyListener::new(script, None);
        let b = l.next_batch().await.unwrap();
        assert!(b.full && b.batch.len() == MAX_DATAGRAMS_PER_BATCH);
        let b = l.next_batch().await.unwrap();
        assert!(!b.full && b.batch.len() == 6, "{}", b.batch.len());
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_cancelled_by_the_loop_loses_nothing() {
        // The loop's select! drops a waiting next_batch whenever a tick comes first.
        let script = ReplaySource::default()
            .at(std::time::Duration::from_millis(50), event(9, 443))
            .then_silent();
        let mut l = DestroyListener::new(script, None);
        let short = std::time::Duration::from_millis(10);
        assert!(tokio::time::timeout(short, l.next_batch()).await.is_err(), "cancelled");
        let b = l.next_batch().await.unwrap();
        assert_eq!((b.batch.len(), b.malformed), (1, 0));
        assert_eq!(b.batch.get(0).unwrap().key().cookie, 9);
    }
}
