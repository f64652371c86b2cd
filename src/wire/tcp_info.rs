//! `struct tcp_info` (include/uapi/linux/tcp.h), the payload of `INET_DIAG_INFO`.
//!
//! The struct has grown with the kernel: 104 bytes on 3.x, 144 on 4.4, 232 ending at
//! `snd_wnd`, 248 after `total_rto_time`, 280 on 6.18 with the AccECN counters. The view
//! accepts any length: a field that lies past the end of what the kernel sent is `None`, and
//! bytes beyond the last field we know are ignored. Offsets are declared once, beside the C
//! member they come from.

use super::NeField;

/// Size of the newest layout this decoder knows (Linux 6.18).
pub const TCP_INFO_LEN_KNOWN: usize = 280;

/// `TCPI_OPT_TIMESTAMPS`.
pub const TCPI_OPT_TIMESTAMPS: u8 = 1;
/// `TCPI_OPT_SACK`.
pub const TCPI_OPT_SACK: u8 = 2;
/// `TCPI_OPT_WSCALE`.
pub const TCPI_OPT_WSCALE: u8 = 4;
/// `TCPI_OPT_ECN`: ECN was negotiated at SYN/SYN-ACK.
pub const TCPI_OPT_ECN: u8 = 8;
/// `TCPI_OPT_ECN_SEEN`: at least one ECT packet was received.
pub const TCPI_OPT_ECN_SEEN: u8 = 16;
/// `TCPI_OPT_SYN_DATA`: SYN-ACK acked data in SYN (fast open).
pub const TCPI_OPT_SYN_DATA: u8 = 32;

/// Zero-copy view of a `tcp_info` of any length.
#[derive(Debug, Clone, Copy)]
pub struct TcpInfo<'a> {
    buf: &'a [u8],
}

/// The value of one field, for generic visitors (JSON output, differential tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// The C member name without `tcpi_`.
    pub name: &'static str,
    /// The value, widened.
    pub value: u64,
}

macro_rules! tcp_info_fields {
    ($( $(#[$doc:meta])* $name:ident : $ty:ident = $off:literal ; )*) => {
        impl<'a> TcpInfo<'a> {
            $(
                $(#[$doc])*
                #[inline]
                pub fn $name(&self) -> Option<$ty> {
                    <$ty>::read(self.buf, $off)
                }
            )*

            /// Every plain (non-bit-field, non-sentinel) field the kernel sent, in layout
            /// order.
            fn plain_fields(&self) -> impl Iterator<Item = Field> + '_ {
                [$( (stringify!($name), self.$name().map(u64::from)) ),*]
                    .into_iter()
                    .filter_map(|(name, v)| v.map(|value| Field { name, value }))
            }
        }
    };
}

tcp_info_fields! {
    /// `tcpi_state`: TCP_ESTABLISHED etc.
    state: u8 = 0;
    /// `tcpi_ca_state`: TCP_CA_Open, Disorder, CWR, Recovery, Loss.
    ca_state: u8 = 1;
    /// `tcpi_retransmits`: consecutive RTO retransmits of the head.
    retransmits: u8 = 2;
    /// `tcpi_probes`: unanswered zero-window or keepalive probes.
    probes: u8 = 3;
    /// `tcpi_backoff`: RTO backoff exponent.
    backoff: u8 = 4;
    /// `tcpi_options`: TCPI_OPT_* bits.
    options: u8 = 5;
    /// `tcpi_rto` (µs).
    rto: u32 = 8;
    /// `tcpi_ato` (µs).
    ato: u32 = 12;
    /// `tcpi_snd_mss` (bytes).
    snd_mss: u32 = 16;
    /// `tcpi_rcv_mss` (bytes).
    rcv_mss: u32 = 20;
    /// `tcpi_unacked` (segments).
    unacked: u32 = 24;
    /// `tcpi_sacked` (segments).
    sacked: u32 = 28;
    /// `tcpi_lost` (segments).
    lost: u32 = 32;
    /// `tcpi_retrans` (segments in flight that are retransmissions).
    retrans: u32 = 36;
    /// `tcpi_fackets` (always 0 since 4.15).
    fackets: u32 = 40;
    /// `tcpi_last_data_sent` (ms ago).
    last_data_sent: u32 = 44;
    /// `tcpi_last_ack_sent` (not remembered by Linux; 0).
    last_ack_sent: u32 = 48;
    /// `tcpi_last_data_recv` (ms ago).
    last_data_recv: u32 = 52;
    /// `tcpi_last_ack_recv` (ms ago).
    last_ack_recv: u32 = 56;
    /// `tcpi_pmtu` (bytes).
    pmtu: u32 = 60;
    /// `tcpi_rcv_ssthresh` (bytes).
    rcv_ssthresh: u32 = 64;
    /// `tcpi_rtt`: smoothed RTT (µs).
    rtt: u32 = 68;
    /// `tcpi_rttvar` (µs).
    rttvar: u32 = 72;
    /// `tcpi_snd_ssthresh` (segments).
    snd_ssthresh: u32 = 76;
    /// `tcpi_snd_cwnd` (segments).
    snd_cwnd: u32 = 80;
    /// `tcpi_advmss` (bytes).
    advmss: u32 = 84;
    /// `tcpi_reordering` (segments).
    reordering: u32 = 88;
    /// `tcpi_rcv_rtt` (µs).
    rcv_rtt: u32 = 92;
    /// `tcpi_rcv_space` (bytes).
    rcv_space: u32 = 96;
    /// `tcpi_total_retrans` (segments, cumulative).
    total_retrans: u32 = 100;
    /// `tcpi_bytes_acked` (cumulative; SYN and FIN each count 1).
    bytes_acked: u64 = 120;
    /// `tcpi_bytes_received` (cumulative).
    bytes_received: u64 = 128;
    /// `tcpi_segs_out`.
    segs_out: u32 = 136;
    /// `tcpi_segs_in`.
    segs_in: u32 = 140;
    /// `tcpi_notsent_bytes`.
    notsent_bytes: u32 = 144;
    /// `tcpi_data_segs_in`.
    data_segs_in: u32 = 152;
    /// `tcpi_data_segs_out`.
    data_segs_out: u32 = 156;
    /// `tcpi_delivery_rate` (bytes/s).
    delivery_rate: u64 = 160;
    /// `tcpi_busy_time` (µs): busy + rwnd-limited + sndbuf-limited time.
    busy_time: u64 = 168;
    /// `tcpi_rwnd_limited` (µs).
    rwnd_limited: u64 = 176;
    /// `tcpi_sndbuf_limited` (µs).
    sndbuf_limited: u64 = 184;
    /// `tcpi_delivered` (segments).
    delivered: u32 = 192;
    /// `tcpi_delivered_ce` (segments).
    delivered_ce: u32 = 196;
    /// `tcpi_bytes_sent` (cumulative, includes retransmissions).
    bytes_sent: u64 = 200;
    /// `tcpi_bytes_retrans` (cumulative).
    bytes_retrans: u64 = 208;
    /// `tcpi_dsack_dups`: DSACKed (spuriously retransmitted) segments.
    dsack_dups: u32 = 216;
    /// `tcpi_reord_seen`: reordering events.
    reord_seen: u32 = 220;
    /// `tcpi_rcv_ooopack`: out-of-order packets received.
    rcv_ooopack: u32 = 224;
    /// `tcpi_snd_wnd`: peer's advertised receive window (bytes).
    snd_wnd: u32 = 228;
    /// `tcpi_rcv_wnd`: our advertised receive window (bytes).
    rcv_wnd: u32 = 232;
    /// `tcpi_rehash`: PLB or timeout-triggered rehashes.
    rehash: u32 = 236;
    /// `tcpi_total_rto`: RTO timeouts.
    total_rto: u16 = 240;
    /// `tcpi_total_rto_recoveries`.
    total_rto_recoveries: u16 = 242;
    /// `tcpi_total_rto_time` (ms in RTO recovery).
    total_rto_time: u32 = 244;
    /// `tcpi_accecn_fail_mode`.
    accecn_fail_mode: u16 = 248;
    /// `tcpi_accecn_opt_seen`.
    accecn_opt_seen: u16 = 250;
    /// `tcpi_received_ce`: CE-marked segments received.
    received_ce: u32 = 252;
    /// `tcpi_delivered_e1_bytes`.
    delivered_e1_bytes: u32 = 256;
    /// `tcpi_delivered_e0_bytes`.
    delivered_e0_bytes: u32 = 260;
    /// `tcpi_delivered_ce_bytes`.
    delivered_ce_bytes: u32 = 264;
    /// `tcpi_received_e1_bytes`.
    received_e1_bytes: u32 = 268;
    /// `tcpi_received_e0_bytes`.
    received_e0_bytes: u32 = 272;
    /// `tcpi_received_ce_bytes`.
    received_ce_bytes: u32 = 276;
}

// Members whose raw value needs more than a read: bit fields and sentinels.
const WSCALE: usize = 6; // tcpi_snd_wscale:4, tcpi_rcv_wscale:4
const APP_LIMITED: usize = 7; // tcpi_delivery_rate_app_limited:1, tcpi_fastopen_client_fail:2
const PACING_RATE: usize = 104; // tcpi_pacing_rate: u64, u64::MAX = unlimited
const MAX_PACING_RATE: usize = 112; // tcpi_max_pacing_rate: u64, u64::MAX = unlimited
const MIN_RTT: usize = 148; // tcpi_min_rtt: u32, u32::MAX = no sample yet

impl<'a> TcpInfo<'a> {
    /// Views `buf`, whatever its length.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    /// How many bytes the kernel sent.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True when the kernel sent an empty struct.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.buf
    }

    /// `tcpi_snd_wscale` (low nibble on little-endian bit-field layout).
    pub fn snd_wscale(&self) -> Option<u8> {
        u8::read(self.buf, WSCALE).map(|b| b & 0x0f)
    }

    /// `tcpi_rcv_wscale`.
    pub fn rcv_wscale(&self) -> Option<u8> {
        u8::read(self.buf, WSCALE).map(|b| b >> 4)
    }

    /// `tcpi_delivery_rate_app_limited`: the last delivery-rate sample was app-limited.
    pub fn delivery_rate_app_limited(&self) -> Option<bool> {
        u8::read(self.buf, APP_LIMITED).map(|b| b & 1 != 0)
    }

    /// `tcpi_fastopen_client_fail`.
    pub fn fastopen_client_fail(&self) -> Option<u8> {
        u8::read(self.buf, APP_LIMITED).map(|b| (b >> 1) & 3)
    }

    /// `tcpi_pacing_rate` (bytes/s); `None` when absent or unlimited (`u64::MAX`).
    pub fn pacing_rate(&self) -> Option<u64> {
        u64::read(self.buf, PACING_RATE).filter(|&v| v != u64::MAX)
    }

    /// `tcpi_max_pacing_rate` (bytes/s, SO_MAX_PACING_RATE); `None` when absent or unlimited.
    pub fn max_pacing_rate(&self) -> Option<u64> {
        u64::read(self.buf, MAX_PACING_RATE).filter(|&v| v != u64::MAX)
    }

    /// `tcpi_min_rtt` (µs); `None` when absent or when no RTT was sampled yet (`u32::MAX`).
    pub fn min_rtt(&self) -> Option<u32> {
        u32::read(self.buf, MIN_RTT).filter(|&v| v != u32::MAX)
    }

    /// `snd_cwnd × snd_mss` in bytes, computed in u64 so it cannot wrap (cgmon's B9).
    pub fn snd_cwnd_bytes(&self) -> Option<u64> {
        Some(u64::from(self.snd_cwnd()?) * u64::from(self.snd_mss()?))
    }

    /// Every field present, with sentinels left out and bit fields split, in layout order.
    pub fn fields(&self) -> impl Iterator<Item = Field> + '_ {
        let special = [
            ("snd_wscale", self.snd_wscale().map(u64::from)),
            ("rcv_wscale", self.rcv_wscale().map(u64::from)),
            ("delivery_rate_app_limited", self.delivery_rate_app_limited().map(u64::from)),
            ("fastopen_client_fail", self.fastopen_client_fail().map(u64::from)),
            ("pacing_rate", self.pacing_rate()),
            ("max_pacing_rate", self.max_pacing_rate()),
            ("min_rtt", self.min_rtt().map(u64::from)),
        ];
        special
            .into_iter()
            .filter_map(|(name, v)| v.map(|value| Field { name, value }))
            .chain(self.plain_fields())
    }
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;

    fn info_280() -> Vec<u8> {
        let mut b = vec![0u8; 280];
        b[0] = 1; // state ESTABLISHED
        b[5] = TCPI_OPT_TIMESTAMPS | TCPI_OPT_SACK; // options
        b[6] = 0x97; // snd_wscale 7, rcv_wscale 9
        b[7] = 0b101; // app_limited 1, fastopen_client_fail 2
        b[68..72].copy_from_slice(&5_000u32.to_ne_bytes()); // rtt 5 ms
        b[80..84].copy_from_slice(&10u32.to_ne_bytes()); // snd_cwnd 10
        b[16..20].copy_from_slice(&1448u32.to_ne_bytes()); // snd_mss
        b[104..112].copy_from_slice(&u64::MAX.to_ne_bytes()); // pacing_rate unlimited
        b[112..120].copy_from_slice(&1_000_000u64.to_ne_bytes()); // max_pacing_rate
        b[120..128].copy_from_slice(&(19_000_000_000u64).to_ne_bytes()); // bytes_acked
        b[148..152].copy_from_slice(&u32::MAX.to_ne_bytes()); // min_rtt: no sample
        b[232..236].copy_from_slice(&65_535u32.to_ne_bytes()); // rcv_wnd
        b[240..242].copy_from_slice(&3u16.to_ne_bytes()); // total_rto
        b[276..280].copy_from_slice(&42u32.to_ne_bytes()); // received_ce_bytes
        b
    }

    #[test]
    fn full_6_18_layout() {
        let b = info_280();
        let t = TcpInfo::new(&b);
        assert_eq!(t.state(), Some(1));
        assert_eq!(t.snd_wscale(), Some(7));
        assert_eq!(t.rcv_wscale(), Some(9));
        assert_eq!(t.delivery_rate_app_limited(), Some(true));
        assert_eq!(t.fastopen_client_fail(), Some(2));
        assert_eq!(t.rtt(), Some(5_000));
        assert_eq!(t.snd_cwnd_bytes(), Some(14_480));
        assert_eq!(t.pacing_rate(), None, "u64::MAX is the unlimited sentinel");
        assert_eq!(t.max_pacing_rate(), Some(1_000_000));
        assert_eq!(t.bytes_acked(), Some(19_000_000_000));
        assert_eq!(t.min_rtt(), None, "u32::MAX is the no-sample sentinel");
        assert_eq!(t.rcv_wnd(), Some(65_535));
        assert_eq!(t.total_rto(), Some(3));
        assert_eq!(t.received_ce_bytes(), Some(42));
    }

    #[test]
    fn short_struct_leaves_tail_absent_not_zero() {
        let b = info_280();
        let t = TcpInfo::new(&b[..232]); // ends at snd_wnd
        assert_eq!(t.snd_wnd(), Some(0));
        assert_eq!(t.rcv_wnd(), None);
        assert_eq!(t.received_ce_bytes(), None);
        let t = TcpInfo::new(&b[..144]); // Linux 4.4
        assert_eq!(t.bytes_acked(), Some(19_000_000_000));
        assert_eq!(t.min_rtt(), None);
        assert_eq!(t.notsent_bytes(), None);
        assert!(t.fields().all(|f| f.name != "delivery_rate"));
        let t = TcpInfo::new(&b[..3]);
        assert_eq!(t.state(), Some(1));
        assert_eq!(t.options(), None);
    }

    #[test]
    fn longer_struct_than_known_is_fine() {
        let mut b = info_280();
        b.extend_from_slice(&[0xff; 24]);
        let t = TcpInfo::new(&b);
        assert_eq!(t.received_ce_bytes(), Some(42));
        assert_eq!(t.len(), 304);
    }

    #[test]
    fn fields_lists_each_member_once() {
        let b = info_280();
        let t = TcpInfo::new(&b);
        let names: Vec<_> = t.fields().map(|f| f.name).collect();
        let mut dedup = names.clone();
        dedup.sort_unstable();
        dedup.dedup();
        assert_eq!(dedup.len(), names.len());
        // 63 plain members + 4 bit fields + max_pacing_rate (pacing_rate and min_rtt are
        // sentinels here and so absent).
        assert_eq!(names.len(), 68);
    }
}
