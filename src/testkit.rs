//! Support for tests, benches and examples: loopback connections the test owns, and a process
//! that holds thousands of them; the message builders of `wire::build`, again. Hidden from
//! the docs; not part of the monitor. It imports only `wire`, so no module's tests that use it
//! close a circle.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use crate::wire::build::{MsgBuilder, SockBuilder};
pub use crate::wire::nlmsg::control_msg;
pub use crate::wire::sock::batch;

/// Sets TCP_CONGESTION on a socket ("cubic", "bbr", "reno").
///
/// # Errors
/// The algorithm is not available.
pub fn set_congestion(fd: &impl AsRawFd, name: &str) -> io::Result<()> {
    // SAFETY: a valid fd and a byte buffer of the given length.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// One connected pair on loopback: `client` connected to `server` (the accepted end).
pub struct Pair {
    /// The connecting end.
    pub client: TcpStream,
    /// The accepted end.
    pub server: TcpStream,
}

impl Pair {
    /// Connects to `listener` and accepts.
    ///
    /// # Errors
    /// connect or accept failed.
    pub fn connect(listener: &TcpListener, target: SocketAddr) -> io::Result<Pair> {
        let client = TcpStream::connect(target)?;
        let (server, _) = listener.accept()?;
        Ok(Pair { client, server })
    }

    /// Sends `n` bytes from client to server and reads them all, so both ends' counters
    /// move (`bytes_acked` on the client, `bytes_received` on the server).
    ///
    /// # Errors
    /// I/O on either end.
    pub fn exchange(&mut self, n: usize) -> io::Result<()> {
        let chunk = vec![0x5au8; 64 * 1024];
        let mut sent = 0;
        let mut got = 0;
        let mut rbuf = vec![0u8; 64 * 1024];
        while sent < n {
            let k = (n - sent).min(chunk.len());
            self.client.write_all(&chunk[..k])?;
            sent += k;
            while got < sent {
                got += self.server.read(&mut rbuf)?;
            }
        }
        Ok(())
    }
}

/// Holds `n` loopback connections to one listener: this process keeps the accepted ends, a
/// forked child the connecting ends, so that `2n` sockets fit under a per-process file limit
/// (20,000 here). The child exits when the holder is dropped.
pub struct ConnHolder {
    /// The listener's address.
    pub addr: SocketAddr,
    /// The accepted ends.
    pub accepted: Vec<TcpStream>,
    /// Client-side local ports, as the accepted ends see them.
    pub client_ports: Vec<u16>,
    _listener: TcpListener,
    child: libc::pid_t,
    pipe_w: libc::c_int,
}

impl ConnHolder {
    /// Forks a child that opens `n` connections to a new listener on `bind`.
    ///
    /// Call this while the process is single-threaded (before a runtime or a benchmark
    /// harness starts threads): the child only makes system calls, but fork copies one
    /// thread, and that must not be one that holds a lock another needs.
    ///
    /// # Errors
    /// bind, fork or accept failed.
    pub fn start(bind: SocketAddr, n: usize) -> io::Result<ConnHolder> {
        let listener = TcpListener::bind(bind)?;
        let addr = listener.local_addr()?;
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: a two-int array for pipe(2).
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the child only calls async-signal-safe functions (socket, connect, read,
        // _exit) through std's thin wrappers and allocates nothing after the Vec below.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // Child: connect n times, then block until the parent closes the pipe.
            // SAFETY: closing our copy of the write end so EOF arrives when the parent's goes.
            unsafe { libc::close(fds[1]) };
            let mut conns = Vec::with_capacity(n);
            for _ in 0..n {
                match TcpStream::connect(addr) {
                    Ok(c) => conns.push(c),
                    Err(_) => unsafe { libc::_exit(1) },
                }
            }
            let mut b = [0u8; 1];
            // SAFETY: reading one byte into a valid buffer.
            unsafe {
                libc::read(fds[0], b.as_mut_ptr().cast(), 1);
                libc::_exit(0);
            }
        }
        // SAFETY: the parent does not need the read end.
        unsafe { libc::close(fds[0]) };
        let mut accepted = Vec::with_capacity(n);
        let mut client_ports = Vec::with_capacity(n);
        for _ in 0..n {
            let (s, peer) = listener.accept()?;
            client_ports.push(peer.port());
            accepted.push(s);
        }
        Ok(ConnHolder {
            addr,
            accepted,
            client_ports,
            _listener: listener,
            child: pid,
            pipe_w: fds[1],
        })
    }
}

impl Drop for ConnHolder {
    fn drop(&mut self) {
        // SAFETY: closing our pipe end and reaping our own child.
        unsafe {
            libc::close(self.pipe_w);
            let mut status = 0;
            libc::waitpid(self.child, &mut status, 0);
        }
    }
}

/// Makes a character device like /dev/full (1, 7) at `path`: every write to it fails with
/// ENOSPC. A node of its own, since outputs refuse a symlink to /dev/full. Needs CAP_MKNOD.
///
/// # Errors
/// mknod failed (not root, or the path exists).
pub fn dev_full_at(path: &std::path::Path) -> io::Result<()> {
    let node = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in the path"))?;
    // SAFETY: a valid NUL-terminated path; mknod touches nothing of ours.
    if unsafe { libc::mknod(node.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 7)) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Opens and resets connections to `a` from `threads` threads until `stop`, at `rate`
/// connections a second in all (paced on a fixed schedule, so the load does not depend on
/// how fast the machine is; a thread that falls behind catches up without bursting past
/// the schedule; a `rate` of 0: as fast as they can): each client writes 100 bytes, the server closes without reading them (a
/// RST, so no TIME-WAIT piles up), the client closes. Returns the connections made.
pub fn churn(
    l: TcpListener,
    a: SocketAddr,
    threads: usize,
    rate: u64,
    stop: Arc<AtomicBool>,
) -> u64 {
    // The server stops only once every client has: a connection made after it stopped
    // accepting sat in the queue until the listener closed, and was counted as made while
    // it ended some other way (one CI run lost a connection's two records so).
    let clients_done = Arc::new(AtomicBool::new(false));
    let server = {
        let done = clients_done.clone();
        std::thread::spawn(move || {
            l.set_nonblocking(true).unwrap();
            while !done.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((s, _)) => {
                        s.set_nonblocking(false).unwrap();
                        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
                        let _ = s.peek(&mut [0u8; 1]); // the data is there, unread
                    }
                    Err(_) => std::thread::sleep(Duration::from_micros(200)),
                }
            }
            // Whatever is still queued.
            while l.accept().is_ok() {}
        })
    };
    let made = paced(threads, rate, &stop, move || {
        let Ok(mut c) = TcpStream::connect(a) else { return false };
        let _ = c.write_all(&[5u8; 100]);
        c.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let _ = c.read(&mut [0u8; 16]); // the reset
        true
    });
    clients_done.store(true, Ordering::Relaxed);
    server.join().unwrap();
    made
}

/// Connects refused: from `threads` threads until `stop`, at `rate` attempts a second in
/// all (paced as [`churn`] is), a non-blocking connect to `a`, where nothing listens, and a
/// close once the RST is in (non-blocking, so that the kernel keeps the remote port in the
/// destroy event). Returns the attempts made.
pub fn refused_connects(a: SocketAddr, threads: usize, rate: u64, stop: Arc<AtomicBool>) -> u64 {
    let domain = if a.is_ipv4() { socket2::Domain::IPV4 } else { socket2::Domain::IPV6 };
    paced(threads, rate, &stop, move || {
        let Ok(s) = socket2::Socket::new(domain, socket2::Type::STREAM, None) else {
            return false;
        };
        if s.set_nonblocking(true).is_err() {
            return false;
        }
        // EINPROGRESS, or ECONNREFUSED at once: loopback answers within the call.
        let _ = s.connect(&a.into());
        true
    })
}

/// Runs `attempt` from `threads` threads until `stop`, at `rate` calls a second in all, on
/// a fixed schedule: the load does not depend on how fast the machine is, and a thread
/// that falls behind catches up without bursting past the schedule (`rate` 0: as fast as
/// they can). Returns the calls that said they made one.
fn paced(
    threads: usize,
    rate: u64,
    stop: &Arc<AtomicBool>,
    attempt: impl Fn() -> bool + Clone + Send + 'static,
) -> u64 {
    let made = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..threads)
        .map(|_| {
            let (stop, made, attempt) = (stop.clone(), made.clone(), attempt.clone());
            let every = match rate {
                0 => Duration::ZERO,
                r => Duration::from_secs(threads as u64) / r as u32,
            };
            std::thread::spawn(move || {
                let start = Instant::now();
                let mut n: u32 = 0;
                while !stop.load(Ordering::Relaxed) {
                    let due = start + every * n;
                    let now = Instant::now();
                    if due > now {
                        std::thread::sleep(due - now);
                    }
                    n += 1;
                    if attempt() {
                        made.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    made.load(Ordering::Relaxed)
}
