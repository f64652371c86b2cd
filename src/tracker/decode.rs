//! A sample's values as the tracker keeps them: read from `tcp_info` once, field by field,
//! into the retained sample and the flow's latest values.
//!
//! Its small functions are marked `#[inline]`: they were split out of `tracker.rs`, and
//! the changed path must not pay a call for them (benches/compare.sh against the split).

use super::flow::{CcName, Flow, Last};
use crate::record::{ABSENT_U64, INFINITE_SSTHRESH, Retained};
use crate::wire::sock::{Sample, nul_terminated};
use crate::wire::tcp_info::TcpInfo;

/// What dedup compares, read from one sample once.
#[derive(Debug, Clone, Copy)]
pub(super) struct Snap {
    pub(super) retained: Retained,
    pub(super) last: Last,
    pub(super) options: u8,
}

/// busy_time in ms, 0 when absent.
#[inline]
pub(super) fn l_busy(l: &Last) -> u32 {
    if l.busy_ms == u32::MAX { 0 } else { l.busy_ms }
}

/// µs → ms, saturating below u32::MAX (the "absent" mark).
#[inline]
pub(super) fn ms(us: u64) -> u32 {
    (us / 1000).min(u64::from(u32::MAX - 1)) as u32
}

/// Bytes of `tcp_info` that hold every field [`decode_into`] reads (kernels since 6.7 send 248 or
/// more).
pub(super) const DECODE_INFO_LEN: usize = 248;

/// A sample's values, for a flow that has none yet.
#[inline]
pub(super) fn snap(s: &Sample<'_>, t: &TcpInfo<'_>) -> Snap {
    let mut sn = Snap { retained: Retained::default(), last: Last::default(), options: 0 };
    decode_into(&mut sn.retained, &mut sn.last, s, t);
    sn.options = t.options().unwrap_or(0);
    sn
}

/// Writes a retained sample's values to `r`, and its flow-level values over the flow's
/// latest ones in `l` (keeping the largest send window, and the send buffer when this
/// sample has none: destroy events carry no SKMEMINFO).
///
/// It writes in place, field by field: a sample built whole and then copied in was stored
/// field by field on the stack and read back in wider loads that had to wait for those
/// stores (see [`StagePool::next_slot`]). Inlined, as it runs on every retained sample.
#[inline(always)]
pub(super) fn decode_into(r: &mut Retained, l: &mut Last, s: &Sample<'_>, t: &TcpInfo<'_>) {
    // Read through a view of fixed length when the kernel sent all of it: every offset is
    // then known to be in range and the compiler drops some 30 bounds checks.
    match t.as_bytes().first_chunk::<DECODE_INFO_LEN>() {
        Some(fixed) => decode_from(r, l, s, &TcpInfo::new(fixed)),
        None => decode_from(r, l, s, t),
    }
}

#[inline(always)]
pub(super) fn decode_from(r: &mut Retained, l: &mut Last, s: &Sample<'_>, t: &TcpInfo<'_>) {
    let state = s.msg().state();
    let total_retrans = t.total_retrans().unwrap_or(0);
    r.ts_ns = s.ts_ns;
    r.snd_mss = t.snd_mss().map_or(0, |m| m.min(u32::from(u16::MAX)) as u16);
    r.set_windows(
        t.snd_cwnd().unwrap_or(0),
        t.snd_ssthresh().unwrap_or(INFINITE_SSTHRESH),
        t.unacked().unwrap_or(0),
    );
    r.set_pacing_rate(t.pacing_rate().unwrap_or(ABSENT_U64));
    // The kernel leaves tcpi_delivery_rate 0 until it has a rate sample: not measured.
    r.set_delivery_rate(t.delivery_rate().filter(|&v| v != 0).unwrap_or(ABSENT_U64));
    r.rtt_us = t.rtt().unwrap_or(0);
    r.rttvar_us = t.rttvar().unwrap_or(0);
    r.total_retrans = total_retrans;
    r.set_state(state);
    l.state = state;
    l.min_rtt_us = t.min_rtt().unwrap_or(u32::MAX);
    l.total_retrans = total_retrans;
    l.delivered = t.delivered().unwrap_or(0);
    l.delivered_ce = t.delivered_ce().unwrap_or(0);
    l.snd_mss = t.snd_mss().map_or(0, |m| m.min(u32::from(u16::MAX)) as u16);
    l.max_pacing_rate = t.max_pacing_rate().unwrap_or(ABSENT_U64);
    l.bytes_acked = t.bytes_acked().unwrap_or(0);
    l.bytes_received = t.bytes_received().unwrap_or(0);
    l.bytes_sent = t.bytes_sent().unwrap_or(0);
    l.bytes_retrans = t.bytes_retrans().unwrap_or(0);
    l.busy_ms = t.busy_time().map_or(u32::MAX, ms);
    l.rwnd_limited_ms = t.rwnd_limited().map_or(0, ms);
    l.sndbuf_limited_ms = t.sndbuf_limited().map_or(0, ms);
    // Their low bits per sample, for the time shares as they grew (`unwrap_chrono`).
    r.chrono16 = [l.busy_ms as u16, l.rwnd_limited_ms as u16, l.sndbuf_limited_ms as u16];
    l.segs_out = t.segs_out().unwrap_or(0);
    l.segs_in = t.segs_in().unwrap_or(0);
    l.reord_seen = t.reord_seen().unwrap_or(0);
    l.dsack_dups = t.dsack_dups().unwrap_or(0);
    let wnd = t.snd_wnd().unwrap_or(0);
    r.set_snd_wnd(wnd);
    l.snd_wnd = wnd;
    l.snd_wnd_max = l.snd_wnd_max.max(wnd);
    let sndbuf = s.skmem().and_then(|m| m.sndbuf()).unwrap_or(0);
    if sndbuf != 0 {
        l.sndbuf = sndbuf;
    }
    l.total_rto = t.total_rto().unwrap_or(0);
    l.total_rto_time_ms = t.total_rto_time().map_or(super::flow::RTO_TIME_ABSENT, |v| {
        v.min(u32::from(super::flow::RTO_TIME_SATURATED)) as u16
    });
}

/// The congestion control, read only when a sample is retained: it rarely changes, so the
/// raw attribute is compared with the name held first, and the NUL looked for only when they
/// differ, which is cheaper per changed socket (benches/RESULTS.md, D4).
#[inline]
pub(super) fn refresh_attrs(f: &mut Flow, s: &Sample<'_>) {
    if let Some(raw) = s.cong_raw()
        && raw != u128::from_le_bytes(f.cc.0)
    {
        f.cc = CcName(nul_terminated(raw).to_le_bytes());
    }
}
