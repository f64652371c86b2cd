//! Hashes that let a sample be compared without reading its flow: the fingerprint of
//! everything dedup compares, and the 4-tuple's hash.
//!
//! Its small functions are marked `#[inline]`: they were split out of `tracker.rs`, and
//! the changed path must not pay a call for them (benches/compare.sh against the split).

use super::decode::snap;
use crate::wire::sock::{Sample, SockKey};
use crate::wire::tcp_info::TcpInfo;

/// Multiplies and folds the 128-bit product: a 64-bit mix of two words (as in wyhash).
#[inline(always)]
pub(super) fn mum(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// Odd 64-bit constants, one per mixed word (digits of well-known hash constants).
pub(super) const K: [u64; 16] = [
    0xa076_1d64_78bd_642f,
    0xe703_7ed1_a0b4_28db,
    0x8ebc_6af0_9c88_c6e3,
    0x5899_65cc_7537_4cc3,
    0x1d8e_4e27_c47d_124f,
    0x72be_5d74_f27b_896f,
    0xd5a5_c0a8_1e3b_c0ef,
    0x9e37_79b9_7f4a_7c15,
    0xc2b2_ae3d_27d4_eb4f,
    0x1656_67b1_9e37_79f9,
    0x27d4_eb2f_1656_67c5,
    0x94d0_49bb_1331_11eb,
    0xbf58_476d_1ce4_e5b9,
    0x2545_f491_4f6c_dd1d,
    0x9fb2_1c65_1e98_df25,
    0xd6e8_feb8_6659_fd93,
];

/// inet_diag_msg bytes 4..40 (ports, then both addresses) as five words, the last with the
/// family beside it.
#[inline(always)]
pub(super) fn tuple_words(s: &Sample<'_>) -> [u64; 5] {
    let p = s.payload();
    let word = |off: usize| u64::from_ne_bytes(p[off..off + 8].try_into().expect("8 bytes"));
    let tail = u32::from_ne_bytes(p[36..40].try_into().expect("4 bytes"));
    [word(4), word(12), word(20), word(28), u64::from(tail) | u64::from(s.msg().family()) << 32]
}

/// 32-bit hash of the family and 4-tuple ([`FlowHead::tuple`]).
#[inline(always)]
pub(super) fn tuple_hash(s: &Sample<'_>) -> u32 {
    let t = tuple_words(s);
    mum(mum(t[0] ^ K[0], t[1] ^ K[1]) ^ mum(t[2] ^ K[2], t[3] ^ K[3]), t[4] ^ K[4]) as u32
}

/// 64-bit fingerprint of what dedup compares in a sample, and of its family and 4-tuple.
/// Two different samples collide with probability about 2^-64, so a collision that would
/// wrongly dedup one sample is not a practical concern.
///
/// It hashes the raw `tcp_info` words that hold the compared fields (masking out neighbours
/// such as time-only fields), so the dedup path decodes nothing. This runs once per socket
/// per dump, so it is lean:
/// - the compared 32-bit fields are paired into twelve words, mixed in six independent
///   pairs (a 64×64→128-bit multiply each, folded), not in one serial chain;
/// - the tuple's five words are XORed into five of those words rather than mixed on their
///   own: a new tuple still changes the fingerprint, and only a sample that changed pays
///   for the tuple's own hash ([`tuple_hash`]), to tell a new tuple from new values.
///
/// Six multiplies, where fourteen words with the tuple mixed on its own took ten, and cost
/// more per deduped and per changed socket (`cargo bench --bench tracker`;
/// benches/RESULTS.md, D2).
#[inline(always)]
pub(super) fn fingerprint(s: &Sample<'_>, t: &TcpInfo<'_>) -> u64 {
    let info = t.as_bytes();
    let m = s.msg();
    // The peer's window (tcpi_snd_wnd, 4 bytes at 228) beside the family and state: the
    // diagnosis reads it per sample.
    let wnd = info.get(228..232).map_or(0, |b| u32::from_ne_bytes(b.try_into().expect("4")));
    let head = u64::from(m.family()) << 8 | u64::from(m.state()) | u64::from(wnd) << 32;
    let w: [u64; 12] = if cfg!(target_endian = "little") && info.len() >= 216 {
        let word = |off: usize| u64::from_ne_bytes(info[off..off + 8].try_into().expect("8"));
        let half =
            |off: usize| u64::from(u32::from_ne_bytes(info[off..off + 4].try_into().expect("4")));
        [
            half(16) | half(80) << 32,   // snd_mss, snd_cwnd
            word(68),                    // rtt, rttvar
            half(100) | half(148) << 32, // total_retrans, min_rtt
            word(104),                   // pacing_rate
            word(112),                   // max_pacing_rate
            word(120),                   // bytes_acked
            word(128),                   // bytes_received
            word(160),                   // delivery_rate
            word(192),                   // delivered, delivered_ce
            word(200),                   // bytes_sent
            word(208),                   // bytes_retrans
            head,
        ]
    } else {
        // A kernel older than the fields above: hash the decoded values instead.
        let sn = snap(s, t);
        let (r, l) = (sn.retained, sn.last);
        [
            u64::from(l.snd_mss) | u64::from(t.snd_cwnd().unwrap_or(0)) << 32,
            u64::from(r.rtt_us) << 32 | u64::from(r.rttvar_us),
            u64::from(r.total_retrans) | u64::from(l.min_rtt_us) << 32,
            r.pacing_rate(),
            l.max_pacing_rate,
            l.bytes_acked,
            l.bytes_received,
            r.delivery_rate(),
            u64::from(l.delivered) << 32 | u64::from(l.delivered_ce),
            l.bytes_sent,
            l.bytes_retrans,
            head | (info.len() as u64) << 16,
        ]
    };
    let tw = tuple_words(s);
    let mut h = 0u64;
    for i in 0..6 {
        let tuple = tw.get(i).copied().unwrap_or(0);
        h ^= mum(w[2 * i] ^ K[2 * i] ^ tuple, w[2 * i + 1] ^ K[2 * i + 1]);
    }
    h
}

/// As [`same_socket`], or the flow was read with its local port 0 and the rest equal.
///
/// A dump collects a hash bucket's sockets under its lock and reads them after it: a
/// connect refused in between can be read with its local port already released (`ss`
/// prints it as `127.0.0.1:*`), in SYN-SENT or CLOSE, while its destroy event, moments
/// later, carries the port again (Linux 6.18; 1 in 40,000 refused connects at 10,000 a
/// second, and in 2 of 200,000 with a dump every 20 ms). The cookie already matched, and a
/// cookie is never reused, so the event is that flow's end.
#[inline]
pub(super) fn same_socket_or_port_released(k: &SockKey, s: &Sample<'_>) -> bool {
    same_socket(k, s) || (k.sport == 0 && same_socket(&SockKey { sport: s.msg().sport(), ..*k }, s))
}

/// The socket's 4-tuple and family equal the flow's (the cookie already matched).
#[inline]
pub(super) fn same_socket(k: &SockKey, s: &Sample<'_>) -> bool {
    let m = s.msg();
    k.sport == m.sport()
        && k.dport == m.dport()
        && k.family == m.family()
        && k.src == *m.src_raw()
        && k.dst == *m.dst_raw()
}
