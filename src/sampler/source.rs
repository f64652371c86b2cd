//! The OS boundary: the only code that opens a socket. Everything above it sees datagrams as
//! bytes plus the monotonic time each arrived, so the sampler can be driven from fixture
//! files ([`ReplaySource`]) in tests and benches exactly as from the kernel ([`NetlinkSource`]).

#[cfg(any(test, feature = "testkit"))]
use super::dump_source::next_queued;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::path::Path;

use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_SOCK_DIAG};
use tokio::io::unix::AsyncFd;

use crate::clock::monotonic_ns;
use crate::wire::sock::Datagram;

pub use super::dump_source::{DumpSource, Received};

/// Socket options for [`NetlinkSource`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SocketOptions {
    /// SO_RCVBUF in bytes, if set (cgmon's `-netlink-receive-bufsize`).
    pub rcvbuf: Option<usize>,
    /// SO_RCVBUFFORCE in bytes, if set; needs CAP_NET_ADMIN.
    pub rcvbuf_force: Option<usize>,
}

/// A NETLINK_SOCK_DIAG socket on tokio.
///
/// netlink-sys's own `TokioSocket` wraps the same `AsyncFd<Socket>`, but its `recv` discards
/// the length `recv(2)` returns, so a truncated datagram (MSG_TRUNC) would go unnoticed, which
/// is how cgmon silently lost sockets (its B17). We keep the `AsyncFd` ourselves and call
/// netlink-sys's `Socket::recv` with `MSG_TRUNC`, which returns the datagram's real length.
pub struct NetlinkSource {
    fd: AsyncFd<Socket>,
    opts: SocketOptions,
    groups: Vec<u32>,
    /// The network namespace the socket was made in, when not the monitor's own: a socket
    /// reopened after an error is made there again.
    netns: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
}

impl NetlinkSource {
    /// Opens a socket for dumps. Must be called within a tokio runtime.
    ///
    /// # Errors
    /// socket(2), bind(2) or setsockopt(2) failed.
    pub fn open(opts: SocketOptions) -> io::Result<Self> {
        Self::open_with_groups(opts, &[])
    }

    /// Opens a socket subscribed to multicast `groups` (destroy events).
    ///
    /// # Errors
    /// socket(2), bind(2) or setsockopt(2) failed.
    pub fn open_with_groups(opts: SocketOptions, groups: &[u32]) -> io::Result<Self> {
        Self::open_in(None, opts, groups)
    }

    /// Opens a socket in the network namespace `netns` (None: the monitor's own),
    /// subscribed to `groups`. The socket is made by a thread that enters the namespace
    /// and leaves; it answers for that namespace for life.
    ///
    /// # Errors
    /// `setns` failed (`EPERM` without `CAP_SYS_ADMIN`), or as for [`open`](Self::open).
    pub fn open_in(
        netns: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
        opts: SocketOptions,
        groups: &[u32],
    ) -> io::Result<Self> {
        let fd = Self::make(netns.as_deref(), opts, groups)?;
        Ok(Self { fd, opts, groups: groups.to_vec(), netns })
    }

    fn make(
        netns: Option<&std::os::fd::OwnedFd>,
        opts: SocketOptions,
        groups: &[u32],
    ) -> io::Result<AsyncFd<Socket>> {
        // AsyncFd panics outside a runtime; say so as an error instead.
        tokio::runtime::Handle::try_current().map_err(|e| {
            io::Error::other(format!("sock_diag socket needs a tokio runtime: {e}"))
        })?;
        let s = match netns {
            Some(ns) => crate::netns::in_netns(ns, || Self::socket(opts, groups))?,
            None => Self::socket(opts, groups)?,
        };
        // SAFETY: `Socket` owns its fd, closes it only on drop, and always returns the same
        // fd from `as_raw_fd`; the AsyncFd owns the Socket, so the fd outlives the
        // registration.
        unsafe { AsyncFd::register(s) }.map_err(io::Error::from)
    }

    /// A non-blocking sock_diag socket with the options and memberships, in the calling
    /// thread's namespace.
    fn socket(opts: SocketOptions, groups: &[u32]) -> io::Result<Socket> {
        let mut s = Socket::new(NETLINK_SOCK_DIAG)?;
        s.bind(&SocketAddr::new(0, 0))?;
        if let Some(n) = opts.rcvbuf {
            // SO_RCVBUF takes an int; netlink-sys passes whatever type it is given.
            let v =
                libc::c_int::try_from(n).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput));
            v.and_then(|v| s.set_rx_buf_sz(v))
                .map_err(|e| BufferRefused::wrap("--netlink-receive-bufsize", n, e))?;
        }
        if let Some(n) = opts.rcvbuf_force {
            set_rcvbuf_force(&s, n)
                .map_err(|e| BufferRefused::wrap("--netlink-receive-bufsize-force", n, e))?;
        }
        for &g in groups {
            s.add_membership(g)?;
        }
        s.set_non_blocking(true)?;
        Ok(s)
    }

    /// SO_RCVBUF as the kernel reports it (twice what was set, for bookkeeping overhead).
    ///
    /// # Errors
    /// getsockopt(2) failed.
    pub fn rcvbuf(&self) -> io::Result<usize> {
        self.fd.get_ref().get_rx_buf_sz()
    }
}

/// The kernel refused a receive-buffer size the user gave: a usage error (exit 2) that
/// names the flag and the value, carried inside the `io::Error` of the socket's opening.
#[derive(Debug, thiserror::Error)]
#[error("{flag} {value}: the kernel refused it: {source}")]
pub struct BufferRefused {
    /// The flag that gave the size.
    pub flag: &'static str,
    /// The size in bytes.
    pub value: usize,
    /// What the kernel said.
    pub source: io::Error,
}

impl BufferRefused {
    fn wrap(flag: &'static str, value: usize, source: io::Error) -> io::Error {
        io::Error::new(source.kind(), BufferRefused { flag, value, source })
    }

    /// The refusal inside `e`, if that is what `e` is.
    pub fn of(e: &io::Error) -> Option<&Self> {
        e.get_ref().and_then(|r| r.downcast_ref::<Self>())
    }
}

fn set_rcvbuf_force(s: &Socket, n: usize) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let v = libc::c_int::try_from(n)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "SO_RCVBUFFORCE too large"))?;
    // SAFETY: a valid fd, a c_int option value and its exact size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

impl DumpSource for NetlinkSource {
    async fn send(&mut self, request: &[u8]) -> io::Result<()> {
        loop {
            let mut guard = self.fd.writable().await?;
            match guard.try_io(|fd| fd.get_ref().send(request, 0)) {
                Ok(r) => return r.map(|_| ()),
                Err(_would_block) => continue,
            }
        }
    }

    async fn recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Received> {
        buf.clear();
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|fd| fd.get_ref().recv(buf, libc::MSG_TRUNC)) {
                Ok(Ok(len)) => return Ok(Received { len, ts_ns: monotonic_ns() }),
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    fn try_recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<Received>> {
        buf.clear();
        loop {
            match self.fd.get_ref().recv(buf, libc::MSG_TRUNC | libc::MSG_DONTWAIT) {
                Ok(len) => return Ok(Some(Received { len, ts_ns: monotonic_ns() })),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn reset(&mut self) -> io::Result<()> {
        self.fd = Self::make(self.netns.as_deref(), self.opts, &self.groups)?;
        Ok(())
    }
}

/// Plays recorded datagrams back, in order, and records the requests it is sent.
#[derive(Debug, Default)]
pub struct ReplaySource {
    queue: VecDeque<Datagram>,
    /// Every request sent, for tests to inspect.
    pub sent: Vec<Vec<u8>>,
}

impl ReplaySource {
    /// A source that will return `datagrams` one per `recv`.
    pub fn new(datagrams: impl IntoIterator<Item = Datagram>) -> Self {
        Self { queue: datagrams.into_iter().collect(), sent: Vec::new() }
    }
}

impl DumpSource for ReplaySource {
    async fn send(&mut self, request: &[u8]) -> io::Result<()> {
        self.sent.push(request.to_vec());
        Ok(())
    }

    async fn recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Received> {
        self.try_recv(buf)?
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "replay exhausted"))
    }

    fn try_recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<Received>> {
        if self.queue.is_empty() {
            return Ok(None);
        }
        let d = self.queue.pop_front().expect("checked non-empty");
        buf.clear();
        let keep = d.bytes.len().min(buf.capacity().max(1));
        buf.extend_from_slice(&d.bytes[..keep]);
        Ok(Some(Received { len: d.bytes.len(), ts_ns: d.ts_ns }))
    }

    fn reset(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(any(test, feature = "testkit"))]
/// Answers each dump request with the messages a script gives for that dump (numbered from
/// 1), stamped with the request's sequence number and followed by `NLMSG_DONE`: a kernel
/// that says what a test wants, for running the whole program in-process. As a destroy
/// listener it has nothing to say.
pub struct ScriptSource {
    script: Box<dyn FnMut(u32) -> Vec<Vec<u8>> + Send>,
    dumps: u32,
    queue: VecDeque<Vec<u8>>,
}

#[cfg(any(test, feature = "testkit"))]
impl ScriptSource {
    /// A source that answers dump `n` with `script(n)`.
    pub fn new(script: impl FnMut(u32) -> Vec<Vec<u8>> + Send + 'static) -> Self {
        Self { script: Box::new(script), dumps: 0, queue: VecDeque::new() }
    }
}

#[cfg(any(test, feature = "testkit"))]
impl std::fmt::Debug for ScriptSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptSource").field("dumps", &self.dumps).finish_non_exhaustive()
    }
}

#[cfg(any(test, feature = "testkit"))]
impl DumpSource for ScriptSource {
    async fn send(&mut self, request: &[u8]) -> io::Result<()> {
        let seq = request.get(8..12).map_or([0; 4], |b| b.try_into().unwrap_or([0; 4]));
        self.dumps += 1;
        for mut m in (self.script)(self.dumps) {
            if m.len() >= 12 {
                m[8..12].copy_from_slice(&seq);
            }
            self.queue.push_back(m);
        }
        let done = crate::wire::nlmsg::control_msg(
            u32::from_ne_bytes(seq),
            crate::wire::nlmsg::NLMSG_DONE,
            0,
        );
        self.queue.push_back(done);
        Ok(())
    }

    async fn recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Received> {
        next_queued(self, buf).await
    }

    fn try_recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<Received>> {
        let Some(d) = self.queue.pop_front() else { return Ok(None) };
        buf.clear();
        buf.extend_from_slice(&d);
        Ok(Some(Received { len: d.len(), ts_ns: monotonic_ns() }))
    }

    fn reset(&mut self) -> io::Result<()> {
        self.queue.clear();
        Ok(())
    }
}

/// The program's sources: the kernel's, or, in tests, a script's or a simulated host's. One
/// concrete type, so the sampling task that owns it can move between threads.
pub enum Source {
    /// A sock_diag socket.
    Netlink(NetlinkSource),
    /// A script (tests).
    #[cfg(any(test, feature = "testkit"))]
    Script(ScriptSource),
    /// A simulated host (tests).
    #[cfg(any(test, feature = "testkit"))]
    Sim(super::sim::SimHost),
}

/// Calls `$call` on whichever source `$s` is.
macro_rules! each_source {
    ($s:expr, $x:ident => $call:expr) => {
        match $s {
            Source::Netlink($x) => $call,
            #[cfg(any(test, feature = "testkit"))]
            Source::Script($x) => $call,
            #[cfg(any(test, feature = "testkit"))]
            Source::Sim($x) => $call,
        }
    };
}

impl DumpSource for Source {
    async fn send(&mut self, request: &[u8]) -> io::Result<()> {
        each_source!(self, x => x.send(request).await)
    }

    async fn recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Received> {
        each_source!(self, x => x.recv(buf).await)
    }

    fn try_recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<Received>> {
        each_source!(self, x => x.try_recv(buf))
    }

    fn reset(&mut self) -> io::Result<()> {
        each_source!(self, x => x.reset())
    }
}

/// Fixture format: for each datagram, `ts_ns: u64 LE`, `len: u32 LE`, then `len` bytes.
///
/// # Errors
/// I/O errors, or a file that ends inside a record.
pub fn read_datagrams(path: &Path) -> io::Result<Vec<Datagram>> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.read_to_end(&mut bytes)?;
    parse_datagrams(&bytes)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Parses the fixture format from memory.
///
/// # Errors
/// Input that ends inside a record.
pub fn parse_datagrams(mut bytes: &[u8]) -> io::Result<Vec<Datagram>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let bad = || io::Error::new(io::ErrorKind::InvalidData, "truncated datagram record");
        let ts = bytes.get(..8).ok_or_else(bad)?;
        let ts_ns = u64::from_le_bytes(ts.try_into().expect("8 bytes"));
        let len = bytes.get(8..12).ok_or_else(bad)?;
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        let body = bytes.get(12..12 + len).ok_or_else(bad)?;
        out.push(Datagram { ts_ns, bytes: body.to_vec() });
        bytes = &bytes[12 + len..];
    }
    Ok(out)
}

/// Writes datagrams in the fixture format.
///
/// # Errors
/// I/O errors.
pub fn write_datagrams(mut w: impl Write, datagrams: &[Datagram]) -> io::Result<()> {
    for d in datagrams {
        w.write_all(&d.ts_ns.to_le_bytes())?;
        let len = u32::try_from(d.bytes.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "datagram over 4 GiB"))?;
        w.write_all(&len.to_le_bytes())?;
        w.write_all(&d.bytes)?;
    }
    Ok(())
}
