//! The OS boundary: the only code that opens a socket. Everything above it sees datagrams as
//! bytes plus the monotonic time each arrived, so the sampler can be driven from fixture
//! files (`fakes::ReplaySource`) in tests and benches exactly as from the kernel ([`NetlinkSource`]).

use std::io::{self, Read, Write};
use std::path::Path;

use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_SOCK_DIAG};
use tokio::io::unix::AsyncFd;

use crate::clock::monotonic_ns;
use crate::wire::sock::Datagram;

pub use super::dump_source::{DumpSource, MemInfo, Received, Slots};

/// Socket options for [`NetlinkSource`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SocketOptions {
    /// SO_RCVBUF in bytes, if set (cgmon's `-netlink-receive-bufsize`).
    pub rcvbuf: Option<usize>,
    /// SO_RCVBUFFORCE in bytes, if set; needs CAP_NET_ADMIN.
    pub rcvbuf_force: Option<usize>,
    /// A refused `rcvbuf_force` is not an error: the socket keeps what `rcvbuf` got (capped
    /// at net.core.rmem_max). For the destroy events' socket, which asks for more than the
    /// default when it may; a size the user gave must be refused aloud instead.
    pub force_if_allowed: bool,
    /// `--destroy-buffer`: each destroy-event socket's receive buffer, bytes (0: the
    /// destroy listener's default).
    pub destroy_buffer: usize,
}

/// A NETLINK_SOCK_DIAG socket on tokio.
///
/// netlink-sys's own `TokioSocket` wraps the same `AsyncFd<Socket>`, but its `recv` discards
/// the length `recv(2)` returns, so a truncated datagram (MSG_TRUNC) would go unnoticed, which
/// is how cgmon silently lost sockets (its B17). We keep the `AsyncFd` ourselves and call
/// netlink-sys's `Socket::recv` with `MSG_TRUNC`, which returns the datagram's real length.
pub struct NetlinkSource {
    fd: Fd,
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
        let fd = Fd::Watched(Self::make(netns.as_deref(), opts, groups)?);
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
            match set_rcvbuf_force(&s, n) {
                Ok(()) => {}
                Err(e) if opts.force_if_allowed && e.raw_os_error() == Some(libc::EPERM) => {}
                Err(e) => return Err(BufferRefused::wrap("--netlink-receive-bufsize-force", n, e)),
            }
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
        self.fd.socket()?.get_rx_buf_sz()
    }

    /// `SO_MEMINFO`: the queue's memory and the kernel's drop count. A netlink socket
    /// counts every multicast message it had no room for (`netlink_overrun`), including
    /// those after the first, which raise no second `ENOBUFS` until the queue empties.
    ///
    /// # Errors
    /// getsockopt(2) failed.
    pub fn meminfo(&self) -> io::Result<MemInfo> {
        use std::os::fd::AsRawFd;
        /// `SO_MEMINFO` (include/uapi/asm-generic/socket.h; the same on x86 and arm).
        const SO_MEMINFO: libc::c_int = 55;
        let fd = self.fd.socket()?.as_raw_fd();
        let mut v = [0u32; 9];
        let mut len = std::mem::size_of_val(&v) as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `v`, which has that room.
        let r = unsafe {
            libc::getsockopt(fd, libc::SOL_SOCKET, SO_MEMINFO, v.as_mut_ptr().cast(), &raw mut len)
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        let at = |i: libc::c_int| v[i as usize];
        Ok(MemInfo {
            rmem_alloc: at(libc::SK_MEMINFO_RMEM_ALLOC),
            rcvbuf: at(libc::SK_MEMINFO_RCVBUF),
            drops: at(libc::SK_MEMINFO_DROPS),
        })
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
            let mut guard = self.fd.watched()?.writable().await?;
            match guard.try_io(|fd| fd.get_ref().send(request, 0)) {
                Ok(r) => return r.map(|_| ()),
                Err(_would_block) => continue,
            }
        }
    }

    async fn recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Received> {
        buf.clear();
        loop {
            let mut guard = self.fd.watched()?.readable().await?;
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
            match self.fd.socket()?.recv(buf, libc::MSG_TRUNC | libc::MSG_DONTWAIT) {
                Ok(len) => return Ok(Some(Received { len, ts_ns: monotonic_ns() })),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// recvmmsg(2): one system call for up to [`Slots::MAX`] datagrams. The destroy
    /// listener reads each event as a datagram of its own, and a call's entry and exit for
    /// each were dear under churn (benches/RESULTS.md, D20). With `MSG_TRUNC`, netlink gives each datagram's real
    /// length, so a cut one is seen as with `recv`.
    fn try_recv_many(&mut self, slots: &mut Slots, limit: usize) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        let fd = self.fd.socket()?.as_raw_fd();
        let (size, n) = (slots.size(), limit.min(slots.count()));
        slots.set_received([]);
        if n == 0 {
            return Ok(0);
        }
        let buf = slots.buffers();
        // SAFETY: plain C structs, for which all zeroes is a valid value.
        let mut iov: [libc::iovec; Slots::MAX] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; Slots::MAX] = unsafe { std::mem::zeroed() };
        for (i, (v, m)) in iov.iter_mut().zip(msgs.iter_mut()).take(n).enumerate() {
            v.iov_base = buf[i * size..].as_mut_ptr().cast();
            v.iov_len = size;
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
        }
        let got = loop {
            // SAFETY: `n` headers, each with one iovec into a distinct `size`-byte slot of
            // `buf`, all of which outlive the call; no timeout.
            let rc = unsafe {
                libc::recvmmsg(
                    fd,
                    msgs.as_mut_ptr(),
                    n as libc::c_uint,
                    libc::MSG_TRUNC | libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if rc >= 0 {
                break rc as usize;
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => break 0,
                _ => return Err(e),
            }
        };
        let ts_ns = monotonic_ns();
        slots.set_received(msgs[..got].iter().map(|m| Received { len: m.msg_len as usize, ts_ns }));
        Ok(got)
    }

    fn reset(&mut self) -> io::Result<()> {
        self.fd = Fd::Watched(Self::make(self.netns.as_deref(), self.opts, &self.groups)?);
        Ok(())
    }

    fn quiet(&mut self) {
        self.fd.quiet();
    }

    fn meminfo(&self) -> Option<MemInfo> {
        NetlinkSource::meminfo(self).ok()
    }
}

/// The socket, watched by tokio's reactor (epoll) or, while the owner rests, not: a
/// multicast socket watched is a wake-up of a runtime thread for every datagram the kernel
/// queues, whether or not a task waits on it (2,000 a second at 1,000 closes a second),
/// so the destroy listener takes its socket out of epoll while it rests (two `epoll_ctl`
/// calls a rest instead).
enum Fd {
    Watched(AsyncFd<Socket>),
    Quiet(Socket),
    /// Only when registering again failed; [`DumpSource::reset`] makes a new socket.
    Lost,
}

impl Fd {
    fn socket(&self) -> io::Result<&Socket> {
        match self {
            Fd::Watched(a) => Ok(a.get_ref()),
            Fd::Quiet(s) => Ok(s),
            Fd::Lost => {
                Err(io::Error::other("sock_diag socket lost to a failed epoll registration"))
            }
        }
    }

    /// The socket, watched again if it was quiet.
    fn watched(&mut self) -> io::Result<&AsyncFd<Socket>> {
        if let Fd::Quiet(_) = self {
            let Fd::Quiet(s) = std::mem::replace(self, Fd::Lost) else { unreachable!() };
            // SAFETY: as in `make`: the AsyncFd owns the Socket, whose fd is stable.
            *self = match unsafe { AsyncFd::register(s) } {
                Ok(a) => Fd::Watched(a),
                Err(e) => {
                    let (s, err) = e.into_parts();
                    *self = Fd::Quiet(s);
                    return Err(err);
                }
            };
        }
        match self {
            Fd::Watched(a) => Ok(a),
            _ => Err(io::Error::other("sock_diag socket lost to a failed epoll registration")),
        }
    }

    /// Out of epoll until [`watched`](Self::watched) again.
    fn quiet(&mut self) {
        if let Fd::Watched(_) = self {
            let Fd::Watched(a) = std::mem::replace(self, Fd::Lost) else { unreachable!() };
            *self = Fd::Quiet(a.into_inner());
        }
    }
}

/// A source of any other kind, behind a pointer: its futures boxed so that it can be one
/// variant of [`Source`] (an `async fn` trait cannot be a trait object). Tests run the whole
/// program on one (`fakes::ScriptSource`); the kernel's socket never pays for the box.
pub trait BoxedSource: Send {
    /// [`DumpSource::send`], boxed.
    fn send_boxed<'a>(&'a mut self, request: &'a [u8]) -> BoxFuture<'a, io::Result<()>>;
    /// [`DumpSource::recv`], boxed.
    fn recv_boxed<'a>(&'a mut self, buf: &'a mut Vec<u8>) -> BoxFuture<'a, io::Result<Received>>;
    /// [`DumpSource::try_recv`].
    ///
    /// # Errors
    /// As the source's.
    fn try_recv_now(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<Received>>;
    /// [`DumpSource::reset`].
    ///
    /// # Errors
    /// As the source's.
    fn reset_now(&mut self) -> io::Result<()>;
}

/// A boxed future that can move between threads.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// The program's sources: the kernel's sock_diag socket, or another (a test's script). One
/// concrete type, so the sampling task that owns it can move between threads, and no
/// variant that exists only for tests.
pub enum Source {
    /// A sock_diag socket.
    Netlink(NetlinkSource),
    /// Any other source.
    Other(Box<dyn BoxedSource>),
}

impl DumpSource for Source {
    async fn send(&mut self, request: &[u8]) -> io::Result<()> {
        match self {
            Source::Netlink(x) => x.send(request).await,
            Source::Other(x) => x.send_boxed(request).await,
        }
    }

    async fn recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Received> {
        match self {
            Source::Netlink(x) => x.recv(buf).await,
            Source::Other(x) => x.recv_boxed(buf).await,
        }
    }

    fn try_recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<Received>> {
        match self {
            Source::Netlink(x) => x.try_recv(buf),
            Source::Other(x) => x.try_recv_now(buf),
        }
    }

    fn try_recv_many(&mut self, slots: &mut Slots, limit: usize) -> io::Result<usize> {
        match self {
            Source::Netlink(x) => x.try_recv_many(slots, limit),
            Source::Other(_) => super::dump_source::one_at_a_time(self, slots, limit),
        }
    }

    fn reset(&mut self) -> io::Result<()> {
        match self {
            Source::Netlink(x) => x.reset(),
            Source::Other(x) => x.reset_now(),
        }
    }

    fn quiet(&mut self) {
        if let Source::Netlink(x) = self {
            x.quiet();
        }
    }

    fn meminfo(&self) -> Option<MemInfo> {
        match self {
            Source::Netlink(x) => x.meminfo().ok(),
            Source::Other(_) => None,
        }
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
