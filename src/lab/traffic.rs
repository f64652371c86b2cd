//! Bulk traffic for the lab: a sink that reads and discards, and a sender that writes a
//! number of bytes or for a duration, with a chosen congestion control, socket buffers and
//! optional application pacing.
//!
//! Sockets are created inside a namespace ([`super::in_netns`]) and then used from any
//! thread. The sender closes its write side when done and waits for the sink to close, so
//! its `elapsed` covers delivery of every byte, and the flow ends with a FIN each way.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use super::{Lab, Side, in_netns};
use crate::locks::Locked;

/// What the sender does.
#[derive(Debug, Clone, Default)]
pub struct Bulk {
    /// Stop after this many bytes.
    pub bytes: Option<u64>,
    /// Stop after this long (whichever comes first; at least one must be set).
    pub duration: Option<Duration>,
    /// Congestion control (`cubic`, `bbr`, `reno`); the namespace's default when `None`.
    pub cc: Option<String>,
    /// SO_SNDBUF, bytes (the kernel doubles it).
    pub sndbuf: Option<usize>,
    /// Application pacing: write at most this many bytes per second.
    pub pace_bytes_per_s: Option<u64>,
    /// Size of each write.
    pub chunk: usize,
}

impl Bulk {
    /// `n` bytes, in 64 KiB writes.
    pub fn bytes(n: u64) -> Self {
        Self { bytes: Some(n), chunk: 64 << 10, ..Self::default() }
    }
    /// For `d`, in 64 KiB writes.
    pub fn for_duration(d: Duration) -> Self {
        Self { duration: Some(d), chunk: 64 << 10, ..Self::default() }
    }
    /// With congestion control `cc`.
    pub fn cc(mut self, cc: &str) -> Self {
        self.cc = Some(cc.into());
        self
    }
}

/// What the sender did.
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    /// Bytes written (and, since the sink closed after reading them all, delivered).
    pub bytes: u64,
    /// From the start of connect to the sink's close.
    pub elapsed: Duration,
    /// The sender's address.
    pub local: SocketAddr,
    /// The sink's address.
    pub remote: SocketAddr,
}

impl Sent {
    /// Goodput, Mbit/s.
    pub fn mbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.elapsed.as_secs_f64() / 1e6
    }
}

/// How a [`Sink`] reads each connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// As fast as the data comes.
    Full,
    /// At no more than this many bytes a second, 4 KB at a time.
    Paced(u64),
    /// Whatever has arrived, then nothing for this long, again and again.
    Stalls(Duration),
}

/// A listener in one namespace on `[::]:port` (IPv4 too; 0 picks a port), each accepted
/// connection served by `serve` on a thread of its own until the server drops. What
/// [`Sink`] and [`Responder`] share.
struct Server {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    fn start(
        lab: &Lab,
        side: Side,
        port: u16,
        rcvbuf: Option<usize>,
        serve: impl Fn(TcpStream, SocketAddr) + Send + Sync + 'static,
    ) -> io::Result<Server> {
        let l = in_netns(lab.ns(side), || {
            let s = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
            s.set_only_v6(false)?;
            s.set_reuse_address(true)?;
            if let Some(b) = rcvbuf {
                s.set_recv_buffer_size(b)?;
            }
            s.bind(&SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)).into())?;
            s.listen(64)?;
            Ok(s)
        })?;
        let port = l.local_addr()?.as_socket().map_or(0, |a| a.port());
        l.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (st, serve) = (stop.clone(), Arc::new(serve));
        let thread = std::thread::spawn(move || {
            let l: std::net::TcpListener = l.into();
            let mut conns = Vec::new();
            while !st.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((c, peer)) => {
                        let serve = serve.clone();
                        conns.push(std::thread::spawn(move || {
                            let _ = c.set_nonblocking(false);
                            serve(c, peer);
                        }));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            for c in conns {
                let _ = c.join();
            }
        });
        Ok(Server { port, stop, thread: Some(thread) })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A listening sink in one namespace.
pub struct Sink {
    /// The port it listens on (both families).
    pub port: u16,
    received: Arc<Mutex<Vec<(SocketAddr, u64)>>>,
    _server: Server,
}

impl Sink {
    /// Listens on `[::]:port` (IPv4 too) in `side`'s namespace; 0 picks a port. With
    /// `rcvbuf`, accepted sockets get that SO_RCVBUF (set on the listener, so the window
    /// scale is chosen for it).
    ///
    /// # Errors
    /// The socket cannot be created or bound.
    pub fn start(lab: &Lab, side: Side, port: u16, rcvbuf: Option<usize>) -> io::Result<Sink> {
        Self::start_reading(lab, side, port, rcvbuf, Reader::Full)
    }

    /// As [`start`](Self::start), each connection read as `reader` says (a slow or stalling
    /// reader: the receive buffer fills and the window shrinks or closes).
    ///
    /// # Errors
    /// The socket cannot be created or bound.
    pub fn start_reading(
        lab: &Lab,
        side: Side,
        port: u16,
        rcvbuf: Option<usize>,
        reader: Reader,
    ) -> io::Result<Sink> {
        let received = Arc::new(Mutex::new(Vec::new()));
        let rx = received.clone();
        let server = Server::start(lab, side, port, rcvbuf, move |mut c, peer| {
            let n = read_all(&mut c, reader);
            rx.locked().push((peer, n));
            let _ = c.shutdown(Shutdown::Both);
        })?;
        Ok(Sink { port: server.port, received, _server: server })
    }

    /// Bytes received per finished connection, by peer address.
    pub fn received(&self) -> Vec<(SocketAddr, u64)> {
        self.received.locked().clone()
    }
}

/// Reads `c` to its end as `reader` says; the bytes read.
fn read_all(c: &mut TcpStream, reader: Reader) -> u64 {
    // Paced reads take a little at a time, so that the window opens as the reader drains
    // it, not in one gulp.
    let size = if let Reader::Paced(_) = reader { 4 << 10 } else { 256 << 10 };
    let mut buf = vec![0u8; size];
    let mut n = 0u64;
    let t0 = std::time::Instant::now();
    while let Ok(k @ 1..) = c.read(&mut buf) {
        n += k as u64;
        match reader {
            Reader::Full => {}
            Reader::Paced(rate) => {
                let due = Duration::from_secs_f64(n as f64 / rate as f64);
                if let Some(w) = due.checked_sub(t0.elapsed()) {
                    std::thread::sleep(w);
                }
            }
            Reader::Stalls(pause) => std::thread::sleep(pause),
        }
    }
    n
}

/// Connects from `side`'s namespace to `to` and sends as `s` says.
///
/// # Errors
/// Connecting or writing failed.
pub fn send(lab: &Lab, side: Side, to: SocketAddr, s: &Bulk) -> io::Result<Sent> {
    let sock = in_netns(lab.ns(side), || {
        let d = if to.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
        let sock = Socket::new(d, Type::STREAM, Some(Protocol::TCP))?;
        if let Some(cc) = &s.cc {
            sock.set_tcp_congestion(cc.as_bytes())?;
        }
        if let Some(b) = s.sndbuf {
            sock.set_send_buffer_size(b)?;
        }
        Ok(sock)
    })?;
    let start = Instant::now();
    sock.connect_timeout(&to.into(), Duration::from_secs(10))?;
    let mut c: TcpStream = sock.into();
    let local = c.local_addr()?;
    let chunk = vec![0x5au8; s.chunk.max(1)];
    let mut sent = 0u64;
    let limit = s.bytes.unwrap_or(u64::MAX);
    let until = s.duration.map(|d| Instant::now() + d);
    while sent < limit && until.is_none_or(|u| Instant::now() < u) {
        let n = chunk.len().min((limit - sent) as usize);
        if let Some(rate) = s.pace_bytes_per_s {
            // Never ahead of the rate: sleep until this write is due.
            let due = start + Duration::from_secs_f64(sent as f64 / rate as f64);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        c.write_all(&chunk[..n])?;
        sent += n as u64;
    }
    c.shutdown(Shutdown::Write)?;
    let mut rest = [0u8; 64];
    while c.read(&mut rest)? > 0 {}
    Ok(Sent { bytes: sent, elapsed: start.elapsed(), local, remote: to })
}

/// A request/response exchange from `side` to a [`Responder`] at `to`: `requests` requests of
/// 100 bytes, one every `every`, each answered with `response` bytes read in full.
///
/// # Errors
/// Connecting, writing or reading failed.
pub fn exchange(
    lab: &Lab,
    side: Side,
    to: SocketAddr,
    requests: usize,
    response: usize,
    every: Duration,
) -> io::Result<()> {
    let sock = in_netns(lab.ns(side), || {
        let d = if to.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
        Socket::new(d, Type::STREAM, Some(Protocol::TCP))
    })?;
    sock.connect_timeout(&to.into(), Duration::from_secs(10))?;
    let mut c: TcpStream = sock.into();
    let mut buf = vec![0u8; response];
    let start = Instant::now();
    for i in 0..requests {
        let due = start + every * i as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let mut req = [0u8; 100];
        req[..8].copy_from_slice(&(response as u64).to_le_bytes());
        c.write_all(&req)?;
        c.read_exact(&mut buf)?;
    }
    c.shutdown(Shutdown::Write)?;
    let mut rest = [0u8; 64];
    while c.read(&mut rest)? > 0 {}
    Ok(())
}

/// A server in one namespace that answers each 100-byte request with as many bytes as its
/// first 8 bytes ask for (little-endian), until the client closes.
pub struct Responder {
    /// The port it listens on (both families).
    pub port: u16,
    _server: Server,
}

impl Responder {
    /// Listens on `[::]:0` in `side`'s namespace.
    ///
    /// # Errors
    /// The socket cannot be created or bound.
    pub fn start(lab: &Lab, side: Side) -> io::Result<Responder> {
        let server = Server::start(lab, side, 0, None, |mut c, _| {
            let mut req = [0u8; 100];
            while c.read_exact(&mut req).is_ok() {
                let n = u64::from_le_bytes(req[..8].try_into().expect("8 bytes"));
                if c.write_all(&vec![0x33u8; n as usize]).is_err() {
                    break;
                }
            }
            let _ = c.shutdown(Shutdown::Both);
        })?;
        Ok(Responder { port: server.port, _server: server })
    }
}
