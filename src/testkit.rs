//! Support for tests, benches and examples: loopback connections the test owns, a process
//! that holds thousands of them, and builders for synthetic netlink messages. Hidden from the
//! docs; not part of the monitor.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;

use crate::wire::{attr, nlmsg};

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

/// Builds one inet_diag reply message (header + `inet_diag_msg` + attributes) for tests.
#[derive(Debug, Clone)]
pub struct MsgBuilder {
    /// nlmsg_type (20 or 18).
    pub kind: u16,
    /// nlmsg_flags.
    pub flags: u16,
    /// nlmsg_seq.
    pub seq: u32,
    /// The 72-byte `inet_diag_msg`.
    pub head: [u8; 72],
    /// Attributes as (type, value).
    pub attrs: Vec<(u16, Vec<u8>)>,
}

impl MsgBuilder {
    /// An ESTABLISHED IPv4 socket 127.0.0.1:`sport` → 127.0.0.1:`dport` with `cookie`.
    pub fn v4(seq: u32, cookie: u64, sport: u16, dport: u16) -> Self {
        let mut head = [0u8; 72];
        head[0] = libc::AF_INET as u8;
        head[1] = 1;
        head[4..6].copy_from_slice(&sport.to_be_bytes());
        head[6..8].copy_from_slice(&dport.to_be_bytes());
        head[8..12].copy_from_slice(&[127, 0, 0, 1]);
        head[24..28].copy_from_slice(&[127, 0, 0, 1]);
        head[44..48].copy_from_slice(&(cookie as u32).to_ne_bytes());
        head[48..52].copy_from_slice(&((cookie >> 32) as u32).to_ne_bytes());
        Self { kind: 20, flags: nlmsg::NLM_F_MULTI, seq, head, attrs: Vec::new() }
    }

    /// Adds an attribute.
    pub fn attr(mut self, kind: u16, value: &[u8]) -> Self {
        self.attrs.push((kind, value.to_vec()));
        self
    }

    /// The message bytes.
    pub fn build(&self) -> Vec<u8> {
        let mut out = vec![0u8; nlmsg::NLMSG_HDRLEN];
        out.extend_from_slice(&self.head);
        for (k, v) in &self.attrs {
            attr::emit(&mut out, *k, v);
        }
        let len = out.len();
        nlmsg::emit_header(&mut out, len, self.kind, self.flags, self.seq);
        out
    }
}

/// An `NLMSG_DONE` (status 0) or `NLMSG_ERROR` (`errno` > 0) message.
pub fn control_msg(seq: u32, kind: u16, errno: i32) -> Vec<u8> {
    let mut out = vec![0u8; nlmsg::NLMSG_HDRLEN];
    out.extend_from_slice(&(-errno).to_ne_bytes());
    if kind == nlmsg::NLMSG_ERROR {
        out.extend_from_slice(&[0u8; 16]); // the echoed request header
    }
    let len = out.len();
    nlmsg::emit_header(&mut out, len, kind, nlmsg::NLM_F_MULTI, seq);
    out
}
