//! Netlink messages built by hand, as the kernel would send them: for tests, benches and the
//! robustness fuzzing, which need replies the kernel would not give on demand. The encoder
//! side of `sock`'s decoder; the program itself never builds a reply.

use super::{attr, nlmsg};

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

/// Builds a socket message with a full 280-byte `tcp_info`, for tracker and analyzer tests.
/// Starts as an ESTABLISHED IPv4 socket with rtt 10 ms, cwnd 10 × 1448 bytes.
#[derive(Debug, Clone)]
pub struct SockBuilder {
    msg: MsgBuilder,
    info: [u8; 280],
    /// How much of `info` the kernel sends (280 on 6.18; 240 before 6.7).
    info_len: usize,
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
            info_len: 280,
            cong: None,
            sndbuf: None,
            cgroup: None,
        };
        b.info[0] = 1;
        b.set32(68, 10_000).set32(80, 10).set32(16, 1448).set64(104, u64::MAX).set64(112, u64::MAX);
        b.set32(148, u32::MAX);
        // Idle for 100 s, as a real connection open before the monitor started usually is
        // (tcpi_last_data_sent, tcpi_last_data_recv, tcpi_last_ack_recv): a first dump's
        // socket that moved lately starts hot (tracker/tiers.rs).
        b.set32(44, 100_000).set32(52, 100_000).set32(56, 100_000);
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
    /// tcpi_snd_ssthresh, segments (`0x7fffffff`: still in slow start).
    pub fn ssthresh(mut self, v: u32) -> Self {
        self.set32(76, v);
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
    /// tcpi_total_rto and tcpi_total_rto_time (ms), with one RTO recovery when any.
    pub fn rto(mut self, rtos: u16, time_ms: u32) -> Self {
        self.info[240..242].copy_from_slice(&rtos.to_ne_bytes());
        self.info[242..244].copy_from_slice(&u16::from(rtos > 0).to_ne_bytes());
        self.set32(244, time_ms);
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
    /// No peer address (`idiag_dst` all zeros), as a listener's destroy event has.
    pub fn no_peer(mut self) -> Self {
        self.msg.head[24..40].fill(0);
        self
    }
    /// `idiag_uid`.
    pub fn uid(mut self, v: u32) -> Self {
        self.msg.head[64..68].copy_from_slice(&v.to_ne_bytes());
        self
    }
    /// tcpi_retransmits: the retransmissions of the current timeout (a connecting socket's
    /// SYNs sent again).
    pub fn retransmits(mut self, v: u8) -> Self {
        self.info[2] = v;
        self
    }
    /// tcpi_segs_in.
    pub fn segs_in(mut self, v: u32) -> Self {
        self.set32(140, v);
        self
    }
    /// tcpi_segs_out and tcpi_dsack_dups.
    pub fn segs(mut self, out: u32, dsack_dups: u32) -> Self {
        self.set32(136, out).set32(216, dsack_dups);
        self
    }
    /// `idiag_rqueue` and `idiag_wqueue`: bytes unread, and bytes not yet acknowledged.
    pub fn queues(mut self, rqueue: u32, wqueue: u32) -> Self {
        self.msg.head[56..60].copy_from_slice(&rqueue.to_ne_bytes());
        self.msg.head[60..64].copy_from_slice(&wqueue.to_ne_bytes());
        self
    }
    /// `idiag_inode`.
    pub fn inode(mut self, v: u32) -> Self {
        self.msg.head[68..72].copy_from_slice(&v.to_ne_bytes());
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
    /// tcpi_unacked, segments in flight.
    pub fn unacked(mut self, v: u32) -> Self {
        self.set32(24, v);
        self
    }
    /// tcp_info as a kernel before 6.7 sends it: 240 bytes, ending before
    /// `tcpi_total_rto`.
    pub fn before_6_7(mut self) -> Self {
        self.info_len = 240;
        self
    }
    /// The message (nlmsghdr included).
    pub fn build(&self) -> Vec<u8> {
        let mut m = self.msg.clone();
        m.attrs.clear();
        m = m.attr(attr::INET_DIAG_INFO, &self.info[..self.info_len]);
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
