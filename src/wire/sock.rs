//! One socket of one dump: where its parts lie in the datagram ([`SockIndex`]), and a
//! borrowing view with typed accessors ([`Sample`]).
//!
//! Decoding a socket walks its attributes once and records each known attribute's span in a
//! fixed-size, `Copy` index: no heap allocation per socket, and every later accessor is a
//! bounds-checked read at a known offset. The datagrams themselves stay owned by a
//! [`SockBatch`], so samples can cross a channel without copying `tcp_info`.

use std::net::IpAddr;

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::attr::{self, NLA_TYPE_MASK, RTA_HDRLEN};
use super::cc::{BbrInfo, CcInfo, DctcpInfo, SkMemInfo, VegasInfo};
use super::inet_diag::{AF_INET, AF_INET6, INET_DIAG_MSG_LEN, InetDiagMsg};
use super::tcp_info::TcpInfo;
use super::{DecodeError, NeField, align4};

/// Where one attribute's value lies, relative to the start of the message payload.
/// `off == 0` means absent: offset 0 is `inet_diag_msg` itself, never an attribute value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    off: u16,
    len: u16,
}

impl Span {
    #[inline(always)]
    fn get<'a>(&self, payload: &'a [u8]) -> Option<&'a [u8]> {
        if self.off == 0 {
            return None;
        }
        let start = usize::from(self.off);
        payload.get(start..start + usize::from(self.len))
    }
}

// Slots of `SockIndex::spans`, one per attribute we decode. Slot 0 collects attributes we
// skip, so that recording an attribute is a table lookup and a store, with no branch.
const S_INFO: usize = 1;
const S_CONG: usize = 2;
const S_BBR: usize = 3;
const S_DCTCP: usize = 4;
const S_VEGAS: usize = 5;
const S_SKMEM: usize = 6;
const S_CGROUP: usize = 7;
const S_TOS: usize = 8;
const S_TCLASS: usize = 9;
const S_SHUTDOWN: usize = 10;
const S_MARK: usize = 11;
const S_SOCKOPT: usize = 12;
const S_PROTOCOL: usize = 13;
const SLOTS: usize = 14;

/// Attribute type (below 32) → slot.
const SLOT_OF: [u8; 32] = {
    let mut t = [0u8; 32];
    t[attr::INET_DIAG_INFO as usize] = S_INFO as u8;
    t[attr::INET_DIAG_CONG as usize] = S_CONG as u8;
    t[attr::INET_DIAG_BBRINFO as usize] = S_BBR as u8;
    t[attr::INET_DIAG_DCTCPINFO as usize] = S_DCTCP as u8;
    t[attr::INET_DIAG_VEGASINFO as usize] = S_VEGAS as u8;
    t[attr::INET_DIAG_SKMEMINFO as usize] = S_SKMEM as u8;
    t[attr::INET_DIAG_CGROUP_ID as usize] = S_CGROUP as u8;
    t[attr::INET_DIAG_TOS as usize] = S_TOS as u8;
    t[attr::INET_DIAG_TCLASS as usize] = S_TCLASS as u8;
    t[attr::INET_DIAG_SHUTDOWN as usize] = S_SHUTDOWN as u8;
    t[attr::INET_DIAG_MARK as usize] = S_MARK as u8;
    t[attr::INET_DIAG_SOCKOPT as usize] = S_SOCKOPT as u8;
    t[attr::INET_DIAG_PROTOCOL as usize] = S_PROTOCOL as u8;
    t
};

/// The decoded layout of one socket message: 68 bytes, `Copy`, no pointers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SockIndex {
    /// Which datagram of the batch holds the message.
    pub dgram: u32,
    /// Offset of the message payload (`inet_diag_msg`) within that datagram.
    pub payload_off: u32,
    /// Payload length.
    pub payload_len: u16,
    spans: [Span; SLOTS],
}

/// Indexes one inet_diag message payload (the bytes after `nlmsghdr`).
///
/// Unknown attributes are skipped. A payload larger than 64 KiB is refused: real messages
/// are under 1 KiB, and a u16 offset keeps the index small.
///
/// # Errors
/// A payload shorter than `inet_diag_msg`, longer than 65,535 bytes, or with an attribute
/// whose length runs outside the payload.
pub fn index(payload: &[u8]) -> Result<SockIndex, DecodeError> {
    let mut idx = SockIndex::default();
    index_into(payload, &mut idx)?;
    Ok(idx)
}

/// [`index`] writing into a caller's (default-initialised) slot, so the sampler can fill
/// its batch in place instead of copying each index.
///
/// # Errors
/// As for [`index`]; the slot's contents are then unspecified.
#[inline]
pub fn index_into(payload: &[u8], idx: &mut SockIndex) -> Result<(), DecodeError> {
    walk(payload, idx, None)
}

/// Most attributes a layout records; messages with more are always walked.
const LAYOUT_MAX: usize = 24;

/// Remembers the attribute layout of the last message indexed, so the next can be indexed
/// by checking instead of walking.
///
/// Walking attributes is a dependent chain: each header's position waits on the previous
/// header's length. But the sockets of a dump mostly share one layout (the same attributes
/// with the same lengths). If a message has the same length and every recorded header
/// (length and type) is found again at its recorded offset, a walk would visit exactly
/// those offsets and yield exactly those spans. Those checks are independent loads, which
/// the CPU overlaps. A mismatch falls back to the walk, which records the new layout.
#[derive(Debug, Clone)]
pub struct LayoutCache {
    payload_len: usize,
    count: usize,
    headers: [(u16, u32); LAYOUT_MAX],
    spans: [Span; SLOTS],
}

impl Default for LayoutCache {
    fn default() -> Self {
        Self {
            payload_len: 0,
            count: 0,
            headers: [(0, 0); LAYOUT_MAX],
            spans: [Span::default(); SLOTS],
        }
    }
}

impl LayoutCache {
    /// [`index_into`], using and updating the remembered layout.
    ///
    /// # Errors
    /// As for [`index`].
    #[inline]
    pub fn index_into(&mut self, payload: &[u8], idx: &mut SockIndex) -> Result<(), DecodeError> {
        if self.payload_len != 0 && payload.len() == self.payload_len {
            let same = self.headers[..self.count].iter().all(|&(off, h)| {
                let off = usize::from(off);
                payload
                    .get(off..off + 4)
                    .is_some_and(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) == h)
            });
            if same {
                idx.payload_len = self.payload_len as u16;
                idx.spans = self.spans;
                return Ok(());
            }
        }
        self.payload_len = 0; // invalid until a walk succeeds
        walk(payload, idx, Some(self))?;
        Ok(())
    }
}

/// The attribute walk; records the layout into `rec` when given and it fits.
#[inline]
fn walk(
    payload: &[u8],
    idx: &mut SockIndex,
    mut rec: Option<&mut LayoutCache>,
) -> Result<(), DecodeError> {
    InetDiagMsg::new_checked(payload)?;
    let n = payload.len();
    let payload_len = u16::try_from(n).map_err(|_| DecodeError::BadLength {
        what: "inet_diag message",
        len: n,
        avail: usize::from(u16::MAX),
    })?;
    idx.payload_len = payload_len;
    let mut count = 0;
    // This is AttrIter's walk written out flat: it is the hot loop of every dump (ten-odd
    // attributes per socket), and the flat form is about twice as fast. The property tests in
    // tests/it/robustness.rs run both over the same mutated inputs.
    let mut pos = INET_DIAG_MSG_LEN;
    while pos < n {
        let rest = n - pos;
        if rest < RTA_HDRLEN {
            return Err(DecodeError::TooShort { what: "rtattr", need: RTA_HDRLEN, got: rest });
        }
        let head = [payload[pos], payload[pos + 1], payload[pos + 2], payload[pos + 3]];
        let len = usize::from(u16::from_ne_bytes([head[0], head[1]]));
        let kind = u16::from_ne_bytes([head[2], head[3]]) & NLA_TYPE_MASK;
        if len < RTA_HDRLEN || len > rest {
            return Err(DecodeError::BadLength { what: "rtattr", len, avail: rest });
        }
        if let Some(r) = rec.as_deref_mut()
            && count < LAYOUT_MAX
        {
            r.headers[count] = (pos as u16, u32::from_ne_bytes(head));
        }
        count += 1;
        // Both fit in u16: the payload does (checked above) and the value lies inside it.
        let span = Span { off: (pos + RTA_HDRLEN) as u16, len: (len - RTA_HDRLEN) as u16 };
        let slot = if kind < 32 { SLOT_OF[usize::from(kind)] } else { 0 };
        idx.spans[usize::from(slot)] = span;
        pos += align4(len);
    }
    // Slot 0 is scratch; clear it so equal sockets give equal indexes.
    idx.spans[0] = Span::default();
    if let Some(r) = rec
        && count <= LAYOUT_MAX
    {
        r.payload_len = n;
        r.count = count;
        r.spans = idx.spans;
    }
    Ok(())
}

/// One socket as seen in one dump or destroy event: a view into its batch's datagram.
#[derive(Debug, Clone, Copy)]
pub struct Sample<'a> {
    /// CLOCK_MONOTONIC ns at which the datagram holding this socket arrived.
    pub ts_ns: u64,
    payload: &'a [u8],
    idx: &'a SockIndex,
}

impl<'a> Sample<'a> {
    /// Builds a view from a payload and the index [`index`] produced for it.
    ///
    /// # Panics
    /// If `payload` is shorter than `inet_diag_msg`, which `index` has already refused.
    pub fn new(ts_ns: u64, payload: &'a [u8], idx: &'a SockIndex) -> Self {
        assert!(payload.len() >= INET_DIAG_MSG_LEN, "index() checked the length");
        Self { ts_ns, payload, idx }
    }

    /// The fixed `inet_diag_msg` head.
    pub fn msg(&self) -> InetDiagMsg<'a> {
        InetDiagMsg::new_checked(self.payload).expect("index() checked the length")
    }

    /// The whole message payload.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// The identity used everywhere a flow is keyed: family, 4-tuple and cookie.
    pub fn key(&self) -> SockKey {
        let m = self.msg();
        SockKey {
            family: m.family(),
            src: *m.src_raw(),
            dst: *m.dst_raw(),
            sport: m.sport(),
            dport: m.dport(),
            cookie: m.cookie(),
        }
    }

    /// `INET_DIAG_INFO`, of whatever length the kernel sent.
    pub fn tcp_info(&self) -> Option<TcpInfo<'a>> {
        self.idx.spans[S_INFO].get(self.payload).map(TcpInfo::new)
    }

    /// `INET_DIAG_CONG`: the congestion-control algorithm's name.
    pub fn cong(&self) -> Option<&'a str> {
        std::str::from_utf8(self.cong_bytes()?).ok()
    }

    /// The algorithm name's bytes, without the NUL: cheap to compare against a stored name.
    pub fn cong_bytes(&self) -> Option<&'a [u8]> {
        let raw = self.idx.spans[S_CONG].get(self.payload)?;
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        Some(&raw[..end])
    }

    /// The algorithm name as 16 bytes padded with NUL (TCP_CA_NAME_MAX is 16, the NUL
    /// included), little-endian in a `u128`: equal names give equal words, compared without
    /// finding a NUL or calling `memcmp`. The tracker holds this word per flow; on each
    /// retained sample it compares [`cong_raw`](Self::cong_raw) with it first and applies
    /// [`nul_terminated`] only when they differ.
    #[inline]
    pub fn cong_word(&self) -> Option<u128> {
        self.cong_raw().map(nul_terminated)
    }

    /// The attribute's first 16 bytes, zero past its end, little-endian in a `u128`. The
    /// kernel sends the name and one NUL, so this usually equals
    /// [`cong_word`](Self::cong_word); it differs when bytes follow a NUL inside the
    /// attribute. It is cheaper, so a caller holding a word that `cong_word` gave can test
    /// this first: when the two are equal, `cong_word` would give that word again.
    #[inline]
    pub fn cong_raw(&self) -> Option<u128> {
        let span = self.idx.spans[S_CONG];
        let raw = span.get(self.payload)?;
        let start = usize::from(span.off);
        let Some(&fixed) = self.payload.get(start..).and_then(|b| b.first_chunk::<16>()) else {
            // Fewer than 16 bytes left in the message: copy what there is.
            let mut w = [0u8; 16];
            let n = raw.len().min(16);
            w[..n].copy_from_slice(&raw[..n]);
            return Some(u128::from_le_bytes(w));
        };
        let mut v = u128::from_le_bytes(fixed);
        if raw.len() < 16 {
            v &= (1u128 << (8 * raw.len())) - 1; // bytes past the attribute
        }
        Some(v)
    }

    /// BBRINFO, DCTCPINFO or VEGASINFO, whichever the kernel sent.
    pub fn cc_info(&self) -> Option<CcInfo<'a>> {
        if let Some(b) = self.idx.spans[S_BBR].get(self.payload) {
            return Some(CcInfo::Bbr(BbrInfo(b)));
        }
        if let Some(b) = self.idx.spans[S_DCTCP].get(self.payload) {
            return Some(CcInfo::Dctcp(DctcpInfo(b)));
        }
        self.idx.spans[S_VEGAS].get(self.payload).map(|b| CcInfo::Vegas(VegasInfo(b)))
    }

    /// `INET_DIAG_SKMEMINFO`.
    pub fn skmem(&self) -> Option<SkMemInfo<'a>> {
        self.idx.spans[S_SKMEM].get(self.payload).map(SkMemInfo)
    }

    /// `INET_DIAG_CGROUP_ID`: the inode of the socket's cgroup2 directory.
    pub fn cgroup_id(&self) -> Option<u64> {
        u64::read(self.idx.spans[S_CGROUP].get(self.payload)?, 0)
    }

    /// `INET_DIAG_TOS`: IPv4 TOS byte (DSCP and ECN bits).
    pub fn tos(&self) -> Option<u8> {
        u8::read(self.idx.spans[S_TOS].get(self.payload)?, 0)
    }

    /// `INET_DIAG_TCLASS`: IPv6 traffic class.
    pub fn tclass(&self) -> Option<u8> {
        u8::read(self.idx.spans[S_TCLASS].get(self.payload)?, 0)
    }

    /// `INET_DIAG_SHUTDOWN`: bit 0 receive side shut, bit 1 send side shut.
    pub fn shutdown(&self) -> Option<u8> {
        u8::read(self.idx.spans[S_SHUTDOWN].get(self.payload)?, 0)
    }

    /// `INET_DIAG_MARK` (sent only to CAP_NET_ADMIN readers).
    pub fn mark(&self) -> Option<u32> {
        u32::read(self.idx.spans[S_MARK].get(self.payload)?, 0)
    }

    /// `INET_DIAG_SOCKOPT` bit field.
    pub fn sockopt(&self) -> Option<u16> {
        u16::read(self.idx.spans[S_SOCKOPT].get(self.payload)?, 0)
    }

    /// `INET_DIAG_PROTOCOL` (destroy events carry it).
    pub fn protocol(&self) -> Option<u8> {
        u8::read(self.idx.spans[S_PROTOCOL].get(self.payload)?, 0)
    }
}

/// A socket's identity: family, both addresses and ports (local first), and cookie.
///
/// Addresses are the raw 16 bytes of `inet_diag_sockid`; IPv4 uses the first four. The
/// filter's userspace evaluation works on this type, so it matches what the kernel's
/// bytecode sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SockKey {
    /// AF_INET or AF_INET6.
    pub family: u8,
    /// Local address bytes.
    pub src: [u8; 16],
    /// Remote address bytes.
    pub dst: [u8; 16],
    /// Local port.
    pub sport: u16,
    /// Remote port.
    pub dport: u16,
    /// Socket cookie.
    pub cookie: u64,
}

impl SockKey {
    /// The remote address.
    pub fn remote_ip(&self) -> IpAddr {
        if self.family == AF_INET {
            IpAddr::from(<[u8; 4]>::try_from(&self.dst[..4]).expect("four bytes"))
        } else {
            IpAddr::from(self.dst)
        }
    }

    /// Builds a key from socket addresses (cookie 0), for tests and userspace filtering.
    pub fn from_addrs(local: std::net::SocketAddr, remote: std::net::SocketAddr) -> Self {
        fn raw(ip: IpAddr) -> [u8; 16] {
            match ip {
                IpAddr::V4(v4) => {
                    let mut b = [0u8; 16];
                    b[..4].copy_from_slice(&v4.octets());
                    b
                }
                IpAddr::V6(v6) => v6.octets(),
            }
        }
        Self {
            family: if local.is_ipv4() { AF_INET } else { AF_INET6 },
            src: raw(local.ip()),
            dst: raw(remote.ip()),
            sport: local.port(),
            dport: remote.port(),
            cookie: 0,
        }
    }
}

/// One received datagram and the monotonic time it arrived.
#[derive(Debug, Clone, Default)]
pub struct Datagram {
    /// CLOCK_MONOTONIC ns, read right after `recv` returned.
    pub ts_ns: u64,
    /// The datagram as received.
    pub bytes: Vec<u8>,
}

/// The datagrams of one dump (or a burst of destroy events) and the sockets found in them.
#[derive(Debug, Clone, Default)]
pub struct SockBatch {
    /// Owned datagrams, in arrival order.
    pub datagrams: Vec<Datagram>,
    /// One entry per socket, in arrival order.
    pub index: Vec<SockIndex>,
}

impl SockBatch {
    /// Number of sockets.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// True when no socket was found.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The `i`-th socket.
    pub fn get(&self, i: usize) -> Option<Sample<'_>> {
        let idx = self.index.get(i)?;
        Some(self.view(idx))
    }

    /// Every socket, in arrival order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Sample<'_>> + '_ {
        self.index.iter().map(|idx| self.view(idx))
    }

    fn view<'a>(&'a self, idx: &'a SockIndex) -> Sample<'a> {
        let d = &self.datagrams[idx.dgram as usize];
        let start = idx.payload_off as usize;
        Sample::new(d.ts_ns, &d.bytes[start..start + usize::from(idx.payload_len)], idx)
    }
}

/// One JSON object per socket, for `examples/dump/` and the samples stream: every field
/// the kernel sent, kernel member names without prefixes, absent fields left out.
impl Serialize for Sample<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let m = self.msg();
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("ts_ns", &self.ts_ns)?;
        let family = match m.family() {
            AF_INET => "inet",
            AF_INET6 => "inet6",
            _ => "unknown",
        };
        map.serialize_entry("family", family)?;
        map.serialize_entry("state", crate::states::name(m.state()))?;
        map.serialize_entry("src", &m.src())?;
        map.serialize_entry("sport", &m.sport())?;
        map.serialize_entry("dst", &m.dst())?;
        map.serialize_entry("dport", &m.dport())?;
        map.serialize_entry("cookie", &m.cookie())?;
        map.serialize_entry("ifindex", &m.ifindex())?;
        map.serialize_entry("timer", &m.timer())?;
        map.serialize_entry("retrans", &m.retrans())?;
        map.serialize_entry("expires_ms", &m.expires())?;
        map.serialize_entry("rqueue", &m.rqueue())?;
        map.serialize_entry("wqueue", &m.wqueue())?;
        map.serialize_entry("uid", &m.uid())?;
        map.serialize_entry("inode", &m.inode())?;
        if let Some(c) = self.cong() {
            map.serialize_entry("cong", c)?;
        }
        if let Some(v) = self.cgroup_id() {
            map.serialize_entry("cgroup_id", &v)?;
        }
        for (k, v) in
            [("tos", self.tos()), ("tclass", self.tclass()), ("shutdown", self.shutdown())]
        {
            if let Some(v) = v {
                map.serialize_entry(k, &v)?;
            }
        }
        if let Some(v) = self.mark() {
            map.serialize_entry("mark", &v)?;
        }
        if let Some(v) = self.sockopt() {
            map.serialize_entry("sockopt", &v)?;
        }
        if let Some(t) = self.tcp_info() {
            map.serialize_entry("tcp_info_len", &t.len())?;
            let fields: Vec<_> = t.fields().map(|f| (f.name, Some(f.value))).collect();
            map.serialize_entry("tcp_info", &FieldMap(&fields))?;
        }
        if let Some(mem) = self.skmem() {
            let f = [
                ("rmem_alloc", mem.rmem_alloc()),
                ("rcvbuf", mem.rcvbuf()),
                ("wmem_alloc", mem.wmem_alloc()),
                ("sndbuf", mem.sndbuf()),
                ("fwd_alloc", mem.fwd_alloc()),
                ("wmem_queued", mem.wmem_queued()),
                ("optmem", mem.optmem()),
                ("backlog", mem.backlog()),
                ("drops", mem.drops()),
            ];
            map.serialize_entry("skmem", &FieldMap(&f.map(|(k, v)| (k, v.map(u64::from)))))?;
        }
        if let Some(cc) = self.cc_info() {
            let (name, fields) = cc.fields();
            map.serialize_entry(name, &FieldMap(&fields))?;
        }
        map.end()
    }
}

/// Serialises `(name, Some(value))` pairs as a JSON object, leaving out `None`s.
struct FieldMap<'a>(&'a [(&'static str, Option<u64>)]);

impl Serialize for FieldMap<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        for (k, v) in self.0 {
            if let Some(v) = v {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}

/// `v` (16 bytes, little-endian) with its lowest zero byte, a NUL, and every byte above it
/// cleared.
#[inline]
pub fn nul_terminated(mut v: u128) -> u128 {
    // `x - 0x01… & !x & 0x80…` marks the lowest zero byte exactly (marks above it may be
    // false).
    const ONES: u128 = u128::MAX / 255;
    let zeros = v.wrapping_sub(ONES) & !v & (ONES << 7);
    if zeros != 0 {
        v &= (1u128 << (zeros.trailing_zeros() & !7)) - 1;
    }
    v
}

/// Whole netlink messages, each with its arrival time, as a batch of samples (one datagram
/// each): for replaying recorded or built messages.
///
/// # Panics
/// A message does not decode (the caller built or recorded it).
#[cfg(any(test, feature = "testkit"))]
pub fn batch(msgs: &[(u64, Vec<u8>)]) -> SockBatch {
    let mut b = SockBatch::default();
    for (ts, m) in msgs {
        let payload = &m[super::nlmsg::NLMSG_HDRLEN..];
        let mut idx = index(payload).expect("built messages decode");
        idx.dgram = b.datagrams.len() as u32;
        idx.payload_off = super::nlmsg::NLMSG_HDRLEN as u32;
        b.index.push(idx);
        b.datagrams.push(Datagram { ts_ns: *ts, bytes: m.clone() });
    }
    b
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::super::build::MsgBuilder;
    use super::*;

    fn payload(m: &[u8]) -> &[u8] {
        &m[16..]
    }

    #[test]
    fn cong_word_is_the_name_padded_with_nul_wherever_the_attribute_lies() {
        let info = vec![7u8; 280];
        let names: [&[u8]; 7] = [
            b"bbr\0",
            b"cubic\0\0\0",
            b"dctcp\0xyz", // bytes after the NUL are not the name's
            b"fifteen_chars__\0",
            b"sixteen_chars___", // no NUL: the word is all of it
            b"\0",
            b"",
        ];
        for name in names {
            let want: Vec<u8> = name.iter().copied().take_while(|&b| b != 0).take(16).collect();
            let mut padded = [0u8; 16];
            padded[..want.len()].copy_from_slice(&want);
            // CONG first (16 bytes of INFO follow it) and last (the message ends after it).
            let first = MsgBuilder::v4(1, 1, 1, 2)
                .attr(attr::INET_DIAG_CONG, name)
                .attr(attr::INET_DIAG_INFO, &info)
                .build();
            let last = MsgBuilder::v4(1, 1, 1, 2)
                .attr(attr::INET_DIAG_INFO, &info)
                .attr(attr::INET_DIAG_CONG, name)
                .build();
            for m in [&first, &last] {
                let idx = index(payload(m)).unwrap();
                let s = Sample::new(0, payload(m), &idx);
                assert_eq!(s.cong_word(), Some(u128::from_le_bytes(padded)), "{name:?}");
                // The raw word is the attribute's bytes, whatever follows a NUL in it.
                let mut raw = [0u8; 16];
                let n = name.len().min(16);
                raw[..n].copy_from_slice(&name[..n]);
                assert_eq!(s.cong_raw(), Some(u128::from_le_bytes(raw)), "{name:?}");
                assert_eq!(s.cong_bytes().unwrap(), &want[..], "{name:?}");
            }
        }
        let none = MsgBuilder::v4(1, 1, 1, 2).attr(attr::INET_DIAG_INFO, &info).build();
        let idx = index(payload(&none)).unwrap();
        assert_eq!(Sample::new(0, payload(&none), &idx).cong_word(), None);
    }

    #[test]
    fn layout_cache_reuses_a_layout_and_notices_a_change() {
        let info = vec![7u8; 280];
        let a = MsgBuilder::v4(1, 1, 1, 2)
            .attr(attr::INET_DIAG_INFO, &info)
            .attr(attr::INET_DIAG_CONG, b"bbr\0")
            .build();
        let b = MsgBuilder::v4(1, 2, 3, 4)
            .attr(attr::INET_DIAG_INFO, &info)
            .attr(attr::INET_DIAG_CONG, b"bbr\0")
            .build();
        // Same total length, other attributes: CONG first, then a shorter INFO.
        let c = MsgBuilder::v4(1, 3, 5, 6)
            .attr(attr::INET_DIAG_CONG, b"bbr\0")
            .attr(attr::INET_DIAG_INFO, &info)
            .build();
        assert_eq!(a.len(), c.len());
        let mut cache = LayoutCache::default();
        for m in [&a, &b, &c, &a] {
            let mut got = SockIndex::default();
            cache.index_into(payload(m), &mut got).unwrap();
            assert_eq!(got, index(payload(m)).unwrap());
        }
        let mut bad = b.clone();
        bad[16 + 72] = 3; // INFO's length below its header: a walk must reject it
        let mut got = SockIndex::default();
        assert!(cache.index_into(payload(&bad), &mut got).is_err());
    }
}
