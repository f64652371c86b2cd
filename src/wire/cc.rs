//! Congestion-control info and socket memory attributes:
//! `struct tcp_bbr_info`, `struct tcp_dctcp_info`, `struct tcpvegas_info`
//! (include/uapi/linux/inet_diag.h) and the `SK_MEMINFO_*` array (include/uapi/linux/sock_diag.h).
//! Like `tcp_info`, each is read field by field, and a short payload leaves its tail `None`.

use super::NeField;

/// `INET_DIAG_BBRINFO`: BBR's model of the path.
#[derive(Debug, Clone, Copy)]
pub struct BbrInfo<'a>(pub &'a [u8]);

impl BbrInfo<'_> {
    /// `bbr_bw_hi:bbr_bw_lo`: the bottleneck bandwidth estimate (bytes/s).
    pub fn bw(&self) -> Option<u64> {
        let lo = u32::read(self.0, 0)?; // bbr_bw_lo
        let hi = u32::read(self.0, 4)?; // bbr_bw_hi
        Some(u64::from(hi) << 32 | u64::from(lo))
    }
    /// `bbr_min_rtt` (µs).
    pub fn min_rtt(&self) -> Option<u32> {
        u32::read(self.0, 8)
    }
    /// `bbr_pacing_gain`, a fixed-point value scaled by 256.
    pub fn pacing_gain(&self) -> Option<u32> {
        u32::read(self.0, 12)
    }
    /// `bbr_cwnd_gain`, scaled by 256.
    pub fn cwnd_gain(&self) -> Option<u32> {
        u32::read(self.0, 16)
    }
}

/// `INET_DIAG_DCTCPINFO`.
#[derive(Debug, Clone, Copy)]
pub struct DctcpInfo<'a>(pub &'a [u8]);

impl DctcpInfo<'_> {
    /// `dctcp_enabled`.
    pub fn enabled(&self) -> Option<u16> {
        u16::read(self.0, 0)
    }
    /// `dctcp_ce_state`.
    pub fn ce_state(&self) -> Option<u16> {
        u16::read(self.0, 2)
    }
    /// `dctcp_alpha`, scaled by 1024.
    pub fn alpha(&self) -> Option<u32> {
        u32::read(self.0, 4)
    }
    /// `dctcp_ab_ecn`: bytes acked with ECE.
    pub fn ab_ecn(&self) -> Option<u32> {
        u32::read(self.0, 8)
    }
    /// `dctcp_ab_tot`: bytes acked.
    pub fn ab_tot(&self) -> Option<u32> {
        u32::read(self.0, 12)
    }
}

/// `INET_DIAG_VEGASINFO` (also sent by other delay-based algorithms).
#[derive(Debug, Clone, Copy)]
pub struct VegasInfo<'a>(pub &'a [u8]);

impl VegasInfo<'_> {
    /// `tcpv_enabled`.
    pub fn enabled(&self) -> Option<u32> {
        u32::read(self.0, 0)
    }
    /// `tcpv_rttcnt`.
    pub fn rttcnt(&self) -> Option<u32> {
        u32::read(self.0, 4)
    }
    /// `tcpv_rtt` (µs).
    pub fn rtt(&self) -> Option<u32> {
        u32::read(self.0, 8)
    }
    /// `tcpv_minrtt` (µs).
    pub fn minrtt(&self) -> Option<u32> {
        u32::read(self.0, 12)
    }
}

/// The congestion-control specific info the kernel sent, if any.
#[derive(Debug, Clone, Copy)]
pub enum CcInfo<'a> {
    /// BBR (v1, v3).
    Bbr(BbrInfo<'a>),
    /// DCTCP.
    Dctcp(DctcpInfo<'a>),
    /// Vegas and other delay-based algorithms.
    Vegas(VegasInfo<'a>),
}

impl CcInfo<'_> {
    /// The congestion control's own fields (INET_DIAG_BBRINFO, DCTCPINFO, VEGASINFO), under
    /// its name.
    pub fn fields(&self) -> (&'static str, Vec<(&'static str, Option<u64>)>) {
        match self {
            Self::Bbr(b) => (
                "bbr",
                vec![
                    ("bw", b.bw()),
                    ("min_rtt", b.min_rtt().map(u64::from)),
                    ("pacing_gain", b.pacing_gain().map(u64::from)),
                    ("cwnd_gain", b.cwnd_gain().map(u64::from)),
                ],
            ),
            Self::Dctcp(d) => (
                "dctcp",
                vec![
                    ("enabled", d.enabled().map(u64::from)),
                    ("ce_state", d.ce_state().map(u64::from)),
                    ("alpha", d.alpha().map(u64::from)),
                    ("ab_ecn", d.ab_ecn().map(u64::from)),
                    ("ab_tot", d.ab_tot().map(u64::from)),
                ],
            ),
            Self::Vegas(v) => (
                "vegas",
                vec![
                    ("enabled", v.enabled().map(u64::from)),
                    ("rttcnt", v.rttcnt().map(u64::from)),
                    ("rtt", v.rtt().map(u64::from)),
                    ("minrtt", v.minrtt().map(u64::from)),
                ],
            ),
        }
    }
}

/// `INET_DIAG_SKMEMINFO`: the `SK_MEMINFO_*` u32 array, in bytes.
#[derive(Debug, Clone, Copy)]
pub struct SkMemInfo<'a>(pub &'a [u8]);

impl SkMemInfo<'_> {
    /// `SK_MEMINFO_RMEM_ALLOC`: receive queue memory in use.
    pub fn rmem_alloc(&self) -> Option<u32> {
        u32::read(self.0, 0)
    }
    /// `SK_MEMINFO_RCVBUF`: SO_RCVBUF.
    pub fn rcvbuf(&self) -> Option<u32> {
        u32::read(self.0, 4)
    }
    /// `SK_MEMINFO_WMEM_ALLOC`: send memory in flight.
    pub fn wmem_alloc(&self) -> Option<u32> {
        u32::read(self.0, 8)
    }
    /// `SK_MEMINFO_SNDBUF`: SO_SNDBUF.
    pub fn sndbuf(&self) -> Option<u32> {
        u32::read(self.0, 12)
    }
    /// `SK_MEMINFO_FWD_ALLOC`.
    pub fn fwd_alloc(&self) -> Option<u32> {
        u32::read(self.0, 16)
    }
    /// `SK_MEMINFO_WMEM_QUEUED`: send queue memory.
    pub fn wmem_queued(&self) -> Option<u32> {
        u32::read(self.0, 20)
    }
    /// `SK_MEMINFO_OPTMEM`.
    pub fn optmem(&self) -> Option<u32> {
        u32::read(self.0, 24)
    }
    /// `SK_MEMINFO_BACKLOG`.
    pub fn backlog(&self) -> Option<u32> {
        u32::read(self.0, 28)
    }
    /// `SK_MEMINFO_DROPS`.
    pub fn drops(&self) -> Option<u32> {
        u32::read(self.0, 32)
    }
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;

    #[test]
    fn bbr_bandwidth_joins_hi_and_lo() {
        let mut b = Vec::new();
        b.extend_from_slice(&7u32.to_ne_bytes()); // bbr_bw_lo
        b.extend_from_slice(&1u32.to_ne_bytes()); // bbr_bw_hi
        b.extend_from_slice(&1_500u32.to_ne_bytes()); // bbr_min_rtt
        b.extend_from_slice(&739u32.to_ne_bytes()); // bbr_pacing_gain (2.89 × 256)
        b.extend_from_slice(&512u32.to_ne_bytes()); // bbr_cwnd_gain (2 × 256)
        let i = BbrInfo(&b);
        assert_eq!(i.bw(), Some((1u64 << 32) + 7));
        assert_eq!(i.min_rtt(), Some(1_500));
        assert_eq!(i.pacing_gain(), Some(739));
        assert_eq!(i.cwnd_gain(), Some(512));
        assert_eq!(BbrInfo(&b[..12]).pacing_gain(), None);
    }

    #[test]
    fn skmeminfo_short_array() {
        let b: Vec<u8> = (1u32..=4).flat_map(|v| v.to_ne_bytes()).collect();
        let m = SkMemInfo(&b);
        assert_eq!(m.rmem_alloc(), Some(1));
        assert_eq!(m.sndbuf(), Some(4));
        assert_eq!(m.drops(), None);
    }
}
