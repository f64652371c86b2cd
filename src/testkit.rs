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

/// Builds a socket message with a full 280-byte `tcp_info`, for tracker and analyzer tests.
/// Starts as an ESTABLISHED IPv4 socket with rtt 10 ms, cwnd 10 × 1448 bytes.
#[derive(Debug, Clone)]
pub struct SockBuilder {
    msg: MsgBuilder,
    info: [u8; 280],
    cong: Option<String>,
    sndbuf: Option<u32>,
    cgroup: Option<u64>,
}

impl SockBuilder {
    /// 127.0.0.1:`sport` → 127.0.0.1:`dport`, cookie `cookie`.
    pub fn new(cookie: u64, sport: u16, dport: u16) -> Self {
        let mut b = Self {
            msg: MsgBuilder::v4(0, cookie, sport, dport),
            info: [0; 280],
            cong: None,
            sndbuf: None,
            cgroup: None,
        };
        b.info[0] = 1;
        b.set32(68, 10_000).set32(80, 10).set32(16, 1448).set64(104, u64::MAX).set64(112, u64::MAX);
        b.set32(148, u32::MAX);
        b
    }
    fn set32(&mut self, off: usize, v: u32) -> &mut Self {
        self.info[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn set64(&mut self, off: usize, v: u64) -> &mut Self {
        self.info[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    /// tcpi_busy_time, tcpi_rwnd_limited and tcpi_sndbuf_limited, µs.
    pub fn chrono_us(mut self, busy: u64, rwnd: u64, sndbuf: u64) -> Self {
        self.set64(168, busy).set64(176, rwnd).set64(184, sndbuf);
        self
    }
    /// tcpi_snd_wnd.
    pub fn snd_wnd(mut self, v: u32) -> Self {
        self.set32(228, v);
        self
    }
    /// TCP state (both `idiag_state` and `tcpi_state`).
    pub fn state(mut self, s: u8) -> Self {
        self.msg.head[1] = s;
        self.info[0] = s;
        self
    }
    /// tcpi_options.
    pub fn options(mut self, o: u8) -> Self {
        self.info[5] = o;
        self
    }
    /// tcpi_rtt, µs.
    pub fn rtt_us(mut self, v: u32) -> Self {
        self.set32(68, v);
        self
    }
    /// tcpi_rttvar, µs.
    pub fn rttvar_us(mut self, v: u32) -> Self {
        self.set32(72, v);
        self
    }
    /// tcpi_snd_cwnd, segments.
    pub fn cwnd(mut self, v: u32) -> Self {
        self.set32(80, v);
        self
    }
    /// tcpi_snd_mss.
    pub fn mss(mut self, v: u32) -> Self {
        self.set32(16, v);
        self
    }
    /// tcpi_total_retrans.
    pub fn total_retrans(mut self, v: u32) -> Self {
        self.set32(100, v);
        self
    }
    /// tcpi_pacing_rate, bytes/s.
    pub fn pacing(mut self, v: u64) -> Self {
        self.set64(104, v);
        self
    }
    /// tcpi_max_pacing_rate, bytes/s.
    pub fn max_pacing(mut self, v: u64) -> Self {
        self.set64(112, v);
        self
    }
    /// tcpi_min_rtt, µs.
    pub fn min_rtt_us(mut self, v: u32) -> Self {
        self.set32(148, v);
        self
    }
    /// tcpi_delivery_rate, bytes/s.
    pub fn delivery_rate(mut self, v: u64) -> Self {
        self.set64(160, v);
        self
    }
    /// tcpi_bytes_acked.
    pub fn bytes_acked(mut self, v: u64) -> Self {
        self.set64(120, v);
        self
    }
    /// tcpi_bytes_received.
    pub fn bytes_received(mut self, v: u64) -> Self {
        self.set64(128, v);
        self
    }
    /// tcpi_bytes_sent.
    pub fn bytes_sent(mut self, v: u64) -> Self {
        self.set64(200, v);
        self
    }
    /// tcpi_bytes_retrans.
    pub fn bytes_retrans(mut self, v: u64) -> Self {
        self.set64(208, v);
        self
    }
    /// `idiag_uid`.
    pub fn uid(mut self, v: u32) -> Self {
        self.msg.head[64..68].copy_from_slice(&v.to_ne_bytes());
        self
    }
    /// INET_DIAG_CGROUP_ID.
    pub fn cgroup(mut self, id: u64) -> Self {
        self.cgroup = Some(id);
        self
    }
    /// tcpi_delivered and tcpi_delivered_ce.
    pub fn delivered(mut self, all: u32, ce: u32) -> Self {
        self.set32(192, all).set32(196, ce);
        self
    }
    /// tcpi_last_data_sent (ms): a time-only field.
    pub fn last_data_sent(mut self, v: u32) -> Self {
        self.set32(44, v);
        self
    }
    /// INET_DIAG_CONG.
    pub fn cong(mut self, name: &str) -> Self {
        self.cong = Some(name.to_string());
        self
    }
    /// INET_DIAG_SKMEMINFO with this SO_SNDBUF (bytes, as the kernel reports it).
    pub fn sndbuf(mut self, v: u32) -> Self {
        self.sndbuf = Some(v);
        self
    }
    /// Without tcp_info, as TIME-WAIT minisockets are dumped.
    pub fn minisock(&self) -> Vec<u8> {
        let mut m = self.msg.clone();
        m.attrs.clear();
        m.head[1] = 6;
        m.build()
    }
    /// The message (nlmsghdr included).
    pub fn build(&self) -> Vec<u8> {
        let mut m = self.msg.clone();
        m.attrs.clear();
        m = m.attr(attr::INET_DIAG_INFO, &self.info);
        if let Some(c) = &self.cong {
            let mut v = c.as_bytes().to_vec();
            v.push(0);
            m = m.attr(attr::INET_DIAG_CONG, &v);
        }
        if let Some(id) = self.cgroup {
            m = m.attr(attr::INET_DIAG_CGROUP_ID, &id.to_ne_bytes());
        }
        if let Some(b) = self.sndbuf {
            // SK_MEMINFO_*: rmem_alloc, rcvbuf, wmem_alloc, sndbuf, fwd_alloc, wmem_queued,
            // optmem, backlog, drops.
            let mem: Vec<u8> = [0, 131_072, 0, b, 0, 0, 0, 0, 0]
                .iter()
                .flat_map(|v: &u32| v.to_ne_bytes())
                .collect();
            m = m.attr(attr::INET_DIAG_SKMEMINFO, &mem);
        }
        m.build()
    }
}

/// Turns built messages into a batch of samples (one datagram each, at the given times).
pub fn batch(msgs: &[(u64, Vec<u8>)]) -> crate::wire::sock::SockBatch {
    use crate::wire::sock::{Datagram, SockBatch, index};
    let mut b = SockBatch::default();
    for (ts, m) in msgs {
        let payload = &m[nlmsg::NLMSG_HDRLEN..];
        let mut idx = index(payload).expect("built messages decode");
        idx.dgram = b.datagrams.len() as u32;
        idx.payload_off = nlmsg::NLMSG_HDRLEN as u32;
        b.index.push(idx);
        b.datagrams.push(Datagram { ts_ns: *ts, bytes: m.clone() });
    }
    b
}

/// Feeds one socket's samples (time, builder) through a tracker and ends the flow with a
/// destroy event built from the last one (state CLOSE). The flow is not partial, and it is
/// gathered, as the analyzer stage has it.
pub fn ended_flow(samples: &[(u64, SockBuilder)]) -> crate::tracker::EndedFlow {
    let mut e = ended_flow_held(samples);
    e.gather();
    e
}

/// As [`ended_flow`], as the tracker hands it on: its older samples may still lie in the
/// tracker's pool blocks.
pub fn ended_flow_held(samples: &[(u64, SockBuilder)]) -> crate::tracker::EndedFlow {
    use crate::tracker::{Tracker, TrackerConfig};
    let mut t = Tracker::new(TrackerConfig::default());
    let mut out = Vec::new();
    t.begin_dump();
    t.end_dump(true, 0, &mut out); // an empty first dump: the flow is not partial
    let (last_ts, last) = samples.last().expect("at least one sample").clone();
    for (ts, s) in &samples[..samples.len() - 1] {
        let b = batch(&[(*ts, s.build())]);
        t.begin_dump();
        t.observe(&b.get(0).expect("one socket"), &mut out);
        t.end_dump(true, *ts, &mut out);
    }
    let b = batch(&[(last_ts, last.state(7).build())]);
    t.destroyed(&b.get(0).expect("one socket"), &mut out);
    assert_eq!(out.len(), 1, "exactly the one flow ends");
    out.pop().expect("one flow")
}

/// A record of a synthetic flow `i` (cookie `i + 1`, local port 5000 + i) of three samples.
pub fn record(i: u64) -> crate::analyzer::FlowStats {
    let s = SockBuilder::new(i + 1, 5000 + (i % 60000) as u16, 80);
    let mut e = ended_flow(&[
        (1_000_000_000, s.clone().rtt_us(10_000).cwnd(10).bytes_acked(1000)),
        (2_000_000_000, s.clone().rtt_us(12_000).cwnd(12).bytes_acked(5000 + i)),
        (3_000_000_000, s.rtt_us(11_000).cwnd(14).bytes_acked(9000 + i)),
    ]);
    crate::analyzer::analyze(&mut e, &crate::analyzer::AnalyzerConfig::default())
}
