//! The sampler: sends a dump request, reads the whole multipart reply, and indexes every
//! socket in it. One [`Dump`] is one poll of the host.
//!
//! It owns the decisions about a dump's integrity, because only it sees them:
//! - `NLMSG_ERROR` and a failed `NLMSG_DONE` are errors;
//! - `NLM_F_DUMP_INTR` marks the dump interrupted;
//! - a datagram larger than the buffer (MSG_TRUNC) is counted and the buffer grown;
//! - a message that does not decode is counted.
//!
//! Any of the last three makes the dump incomplete ([`Dump::is_complete`]): a socket missing
//! from it may still be alive, so no flow may be ended on its evidence.
//!
//! By default it asks with the single-walk request (type 18), which returns IPv4 and IPv6
//! sockets from one walk of the hash tables, and falls back to one request per family when
//! the kernel refuses it (see `benches/dump.rs` for the measured difference).

pub mod activity;
pub mod destroy;
pub mod dump_source;
pub mod exact;
#[cfg(any(test, feature = "testkit"))]
pub mod fakes;
pub mod source;
pub mod space;

use std::io;
use std::time::Duration;

use crate::filter::{CompileError, Expr, compile};
use crate::states::StateSet;
use crate::wire::inet_diag::{
    AF_INET, AF_INET6, DumpRequest, RequestKind, SOCK_DIAG_BY_FAMILY, TCPDIAG_GETSOCK,
    default_extensions,
};
use crate::wire::nlmsg::{self, NlMsgIter};
use crate::wire::sock::{Datagram, LayoutCache, Sample, SockBatch, SockIndex};
use source::{DumpSource, Slots};

/// cgmon's `-netlink-read-bufsize` default. The kernel sizes dump datagrams to the reader's
/// buffer up to about 32 KiB, so this both avoids truncation and keeps datagrams full.
pub const DEFAULT_READ_BUFSIZE: usize = 32 * 1024;

/// The smallest read buffer accepted: one maximal inet_diag message and then some.
pub const MIN_READ_BUFSIZE: usize = 4096;

/// How to ask for both families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DumpMode {
    /// Single walk, falling back to per-family if the kernel refuses it.
    #[default]
    Auto,
    /// Always the single-walk request (type 18).
    SingleWalk,
    /// One SOCK_DIAG_BY_FAMILY request per family.
    PerFamily,
}

/// What to dump and how.
#[derive(Debug, Clone)]
pub struct SamplerConfig {
    /// TCP states to report.
    pub states: StateSet,
    /// Kernel-side filter.
    pub filter: Option<Expr>,
    /// `filter` already compiled (by the command line's check), so that it is compiled
    /// once; `None` compiles `filter` here.
    pub bytecode: Option<Vec<u8>>,
    /// `idiag_ext` bits.
    pub ext: u8,
    /// User-space receive buffer per datagram, in bytes.
    pub read_bufsize: usize,
    /// Request shape.
    pub mode: DumpMode,
    /// How long to wait for each datagram before giving up on the dump.
    pub recv_timeout: Duration,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        Self {
            states: StateSet::default(),
            filter: None,
            bytecode: None,
            ext: default_extensions(),
            read_bufsize: DEFAULT_READ_BUFSIZE,
            mode: DumpMode::Auto,
            recv_timeout: Duration::from_secs(1),
        }
    }
}

/// A dump that failed.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    /// A socket call failed.
    #[error("sock_diag {op}: {source}")]
    Io {
        /// Which call.
        op: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The kernel answered with NLMSG_ERROR or a failed NLMSG_DONE.
    #[error("kernel refused the {request} dump: {}", io::Error::from_raw_os_error(*.errno))]
    Kernel {
        /// Which request.
        request: &'static str,
        /// The errno.
        errno: i32,
    },
    /// No datagram arrived in time.
    #[error("sock_diag dump timed out after {0:?} without a reply")]
    Timeout(Duration),
    /// The kernel reported NLMSG_OVERRUN.
    #[error("sock_diag reported NLMSG_OVERRUN: the reply lost data")]
    Overrun,
}

/// One poll of the host: the sockets found and what went wrong on the way.
#[derive(Debug, Clone, Default)]
pub struct Dump {
    /// Datagrams and the sockets indexed in them.
    pub batch: SockBatch,
    /// NLM_F_DUMP_INTR was set: the tables changed during the walk.
    pub interrupted: bool,
    /// Datagrams larger than the read buffer, whose tails were lost.
    pub truncated: u32,
    /// Messages or datagrams that failed to decode and were skipped.
    pub malformed: u32,
    /// Sockets found (kept in `batch`, or shown to the visitor of `dump_with`).
    pub sockets: u32,
    /// Requests sent (1 for single walk, 2 per family).
    pub requests: u32,
    /// Datagrams received.
    pub datagrams: u32,
    /// Bytes received.
    pub bytes: u64,
    /// CLOCK_MONOTONIC ns of the first and last datagram.
    pub span_ns: (u64, u64),
    /// ns spent decoding datagrams and in the visitor (the tracker): the dump's own CPU
    /// cost, without the kernel's walk and the waits for datagrams.
    pub process_ns: u64,
}

impl Dump {
    /// True when every socket the kernel sent was read: a flow absent from a complete dump
    /// has ended.
    pub fn is_complete(&self) -> bool {
        !self.interrupted && self.truncated == 0 && self.malformed == 0
    }
}

/// Errnos with which a kernel refuses a request type it does not serve.
const UNSUPPORTED: [i32; 4] = [libc::EINVAL, libc::EOPNOTSUPP, libc::ENOENT, libc::EPROTONOSUPPORT];

/// Polls sock_diag through a [`DumpSource`].
pub struct Sampler<S> {
    source: S,
    cfg: SamplerConfig,
    bytecode: Option<Vec<u8>>,
    seq: u32,
    single_walk: bool,
    bufsize: usize,
    /// Receive buffers handed back through [`Sampler::recycle`]. Reusing them spares the
    /// page faults of fresh 32 KiB allocations on every datagram of every dump.
    pool: Vec<Vec<u8>>,
    /// Exact polls: the requests of one chunk, built in place.
    exact_req: Vec<u8>,
    /// Exact polls: which requests of the chunk were answered.
    exact_answered: Vec<bool>,
    /// Exact polls: the targets left unanswered by an overrun, to ask again.
    exact_retry: Vec<usize>,
    /// Exact polls: requests per `send` (halved when replies overran the socket buffer).
    exact_chunk: usize,
    /// Exact polls: the answers of one receive call, a datagram each (made at the first).
    exact_slots: Option<Slots>,
}

/// Buffers kept for reuse at most: enough for a dump of ~130,000 sockets; beyond that,
/// memory goes back to the allocator.
const POOL_MAX: usize = 4096;

impl<S: DumpSource> Sampler<S> {
    /// Prepares the requests; compiles the filter once.
    ///
    /// # Errors
    /// The filter does not compile.
    pub fn new(source: S, cfg: SamplerConfig) -> Result<Self, CompileError> {
        let bytecode = match &cfg.bytecode {
            Some(b) => Some(b.clone()),
            None => cfg.filter.as_ref().map(compile).transpose()?,
        };
        let single_walk = cfg.mode != DumpMode::PerFamily;
        let bufsize = cfg.read_bufsize.max(MIN_READ_BUFSIZE);
        Ok(Self {
            source,
            cfg,
            bytecode,
            seq: 0,
            single_walk,
            bufsize,
            pool: Vec::new(),
            exact_req: Vec::new(),
            exact_answered: Vec::new(),
            exact_retry: Vec::new(),
            exact_chunk: exact::MAX_CHUNK,
            exact_slots: None,
        })
    }

    /// The request shape in use now (Auto resolves after the first dump).
    pub fn mode(&self) -> DumpMode {
        if self.single_walk { DumpMode::SingleWalk } else { DumpMode::PerFamily }
    }

    /// The current read buffer size (grown after a truncated datagram).
    pub fn read_bufsize(&self) -> usize {
        self.bufsize
    }

    /// The configuration.
    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// Takes back the buffers of a batch that is no longer needed, for the next dumps.
    pub fn recycle(&mut self, batch: SockBatch) {
        for d in batch.datagrams {
            if self.pool.len() >= POOL_MAX {
                break;
            }
            if d.bytes.capacity() >= self.bufsize {
                self.pool.push(d.bytes);
            }
        }
    }

    /// Gives the source back.
    pub fn into_source(self) -> S {
        self.source
    }

    /// Takes one dump of both families and keeps it: every datagram with its sockets.
    ///
    /// # Errors
    /// A socket error, a kernel error or a timeout; the half-read reply is discarded so the
    /// next dump starts clean.
    pub async fn dump(&mut self) -> Result<Dump, SampleError> {
        self.run(true, &mut |_| {}).await
    }

    /// Takes one dump of both families and shows each socket to `visit` as soon as its
    /// datagram is decoded, then reuses the datagram's buffer. The returned [`Dump`] has the
    /// counters and integrity flags but no batch.
    ///
    /// This is the tracker's path: a socket is read while its datagram is still in cache, and
    /// the dump's working set is one buffer instead of ~10 MB per 20,000 sockets (keeping the
    /// whole dump is slower: benches/RESULTS.md, D21).
    ///
    /// # Errors
    /// As for [`dump`](Self::dump). Sockets visited before an error belong to a dump that
    /// failed: treat them as seen, but end no flow on that dump's evidence.
    pub async fn dump_with<F: FnMut(Sample<'_>)>(
        &mut self,
        mut visit: F,
    ) -> Result<Dump, SampleError> {
        self.run(false, &mut visit).await
    }

    /// Takes one dump of the listening sockets alone, unfiltered, and shows each to
    /// `visit`. The kernel walks only its listener table for it (a request for
    /// `TCP_LISTEN` alone skips the established table), so it costs tens of microseconds
    /// where a full dump costs one per socket: the tracker asks for it when a flow seen only
    /// in its destroy event has a local port not known to listen (docs/kernel.md).
    ///
    /// # Errors
    /// As for [`dump`](Self::dump).
    pub async fn listeners_with<F: FnMut(Sample<'_>)>(
        &mut self,
        mut visit: F,
    ) -> Result<Dump, SampleError> {
        let saved = (self.cfg.states, self.bytecode.take());
        self.cfg.states = crate::states::StateSet(1 << crate::states::tcp::LISTEN);
        let r = self.run(false, &mut visit).await;
        (self.cfg.states, self.bytecode) = saved;
        r
    }

    async fn run<F: FnMut(Sample<'_>)>(
        &mut self,
        keep: bool,
        visit: &mut F,
    ) -> Result<Dump, SampleError> {
        let mut dump = Dump::default();
        if self.single_walk {
            match self.request(RequestKind::SingleWalk, &mut dump, keep, visit).await {
                Err(SampleError::Kernel { errno, .. })
                    if self.cfg.mode == DumpMode::Auto && UNSUPPORTED.contains(&errno) =>
                {
                    tracing::warn!(
                        errno,
                        "kernel refused the single-walk dump (type 18); using one request per family"
                    );
                    self.single_walk = false;
                    dump = Dump::default();
                }
                r => return r.map(|()| dump),
            }
        }
        for family in [AF_INET, AF_INET6] {
            self.request(RequestKind::ByFamily(family), &mut dump, keep, visit).await?;
        }
        Ok(dump)
    }

    async fn request<F: FnMut(Sample<'_>)>(
        &mut self,
        kind: RequestKind,
        dump: &mut Dump,
        keep: bool,
        visit: &mut F,
    ) -> Result<(), SampleError> {
        let r = self.request_inner(kind, dump, keep, visit).await;
        if matches!(r, Err(SampleError::Io { .. } | SampleError::Timeout(_))) {
            // A dump still running on the socket would make the next request fail with
            // EBUSY; a fresh socket drops it.
            if let Err(e) = self.source.reset() {
                tracing::warn!(error = %e, "reopening the sock_diag socket failed");
            }
        }
        r
    }

    async fn request_inner<F: FnMut(Sample<'_>)>(
        &mut self,
        kind: RequestKind,
        dump: &mut Dump,
        keep: bool,
        visit: &mut F,
    ) -> Result<(), SampleError> {
        let name = match kind {
            RequestKind::SingleWalk => "single-walk",
            RequestKind::ByFamily(AF_INET) => "IPv4",
            RequestKind::ByFamily(_) => "IPv6",
        };
        self.seq = self.seq.wrapping_add(1);
        let req = DumpRequest {
            kind,
            states: self.cfg.states.0,
            ext: self.cfg.ext,
            bytecode: self.bytecode.clone(),
        }
        .emit(self.seq);
        self.source.send(&req).await.map_err(|source| SampleError::Io { op: "send", source })?;
        dump.requests += 1;
        loop {
            let (buf, got) = self.next_datagram(dump).await?;
            let dgram = dump.batch.datagrams.len() as u32;
            let before = dump.batch.index.len();
            let t0 = std::time::Instant::now();
            let done = scan_datagram(&buf, self.seq, dgram, name, dump)?;
            let found = dump.batch.index.len() - before;
            dump.sockets += found as u32;
            if keep && found > 0 {
                dump.batch.datagrams.push(Datagram { ts_ns: got.ts_ns, bytes: buf });
            } else {
                if !keep {
                    for idx in &dump.batch.index[before..] {
                        let start = idx.payload_off as usize;
                        let payload = &buf[start..start + usize::from(idx.payload_len)];
                        visit(Sample::new(got.ts_ns, payload, idx));
                    }
                    dump.batch.index.truncate(before);
                }
                self.pool.push(buf);
            }
            dump.process_ns += t0.elapsed().as_nanos() as u64;
            if done {
                return Ok(());
            }
        }
    }

    /// The dump's next datagram, in a buffer from the pool, counted in `dump` (a truncated
    /// one is counted, warned about, and the read buffer grown for the next).
    async fn next_datagram(
        &mut self,
        dump: &mut Dump,
    ) -> Result<(Vec<u8>, dump_source::Received), SampleError> {
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        buf.reserve(self.bufsize);
        // The kernel fills the next datagram of a dump while we read the last one, so it
        // is usually queued already: take it without arming a timer, and wait (with the
        // timeout) only when it is not.
        let ready = self
            .source
            .try_recv(&mut buf)
            .map_err(|source| SampleError::Io { op: "recv", source })?;
        let got = match ready {
            Some(got) => got,
            None => tokio::time::timeout(self.cfg.recv_timeout, self.source.recv(&mut buf))
                .await
                .map_err(|_| SampleError::Timeout(self.cfg.recv_timeout))?
                .map_err(|source| SampleError::Io { op: "recv", source })?,
        };
        dump.datagrams += 1;
        dump.bytes += got.len as u64;
        if dump.span_ns.0 == 0 {
            dump.span_ns.0 = got.ts_ns;
        }
        dump.span_ns.1 = got.ts_ns;
        if got.len > buf.len() {
            dump.truncated += 1;
            let grown = got.len.next_power_of_two();
            tracing::warn!(
                datagram = got.len,
                buffer = buf.len(),
                new_buffer = grown,
                "sock_diag datagram truncated; sockets in it were lost, growing the read buffer"
            );
            self.bufsize = self.bufsize.max(grown);
        }
        Ok((buf, got))
    }
}

/// Indexes the sockets of one datagram into `dump` (the datagram itself is the caller's to
/// store at `dgram`); returns true at NLMSG_DONE. Messages of another `seq` are skipped.
/// Public for the decode benchmark, which measures exactly this step.
///
/// # Errors
/// NLMSG_ERROR, a failed NLMSG_DONE or NLMSG_OVERRUN.
pub fn scan_datagram(
    buf: &[u8],
    seq: u32,
    dgram: u32,
    request: &'static str,
    dump: &mut Dump,
) -> Result<bool, SampleError> {
    let mut layout = LayoutCache::default();
    for m in NlMsgIter::new(buf) {
        let Ok(m) = m else {
            dump.malformed += 1;
            break;
        };
        if m.seq != seq {
            continue; // a stale reply to an abandoned request
        }
        if m.flags & nlmsg::NLM_F_DUMP_INTR != 0 {
            dump.interrupted = true;
        }
        match m.kind {
            nlmsg::NLMSG_DONE => {
                // NLMSG_DONE carries the dump's status; a negative value is a failed dump.
                if let Ok(errno) = m.error_code()
                    && errno > 0
                {
                    return Err(SampleError::Kernel { request, errno });
                }
                return Ok(true);
            }
            nlmsg::NLMSG_ERROR => match m.error_code() {
                Ok(0) => {}
                Ok(errno) => return Err(SampleError::Kernel { request, errno }),
                Err(_) => dump.malformed += 1,
            },
            nlmsg::NLMSG_OVERRUN => return Err(SampleError::Overrun),
            SOCK_DIAG_BY_FAMILY | TCPDIAG_GETSOCK => {
                let list = &mut dump.batch.index;
                list.push(SockIndex::default());
                let slot = list.last_mut().expect("just pushed");
                slot.dgram = dgram;
                slot.payload_off = m.payload_offset as u32;
                if let Err(e) = layout.index_into(m.payload, slot) {
                    list.pop();
                    dump.malformed += 1;
                    tracing::debug!(error = %e, "skipping undecodable inet_diag message");
                }
            }
            _ => {}
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests;
