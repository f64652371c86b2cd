//! A retained sample as the tracker keeps it (48 bytes, packed), the chrono counters
//! unwrapped over a flow's samples, and a sample as charts read it ([`Point`]).

/// One retained sample: what the analysis and the charts need of one poll, in 48 bytes.
///
/// Packed to stay at 48 bytes (a flow keeps thousands): the congestion window and ssthresh
/// are kept in segments beside the MSS (bytes are their product, in u64 as before), the
/// two rates in 40 bits each (up to 8.8 Tbit/s; larger rates are stored as that), and the
/// chrono counters as their low 16 bits in ms ([`unwrap_chrono`] recovers them: between
/// two retained samples of a busy flow they grow by far less than 65 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Retained {
    /// CLOCK_MONOTONIC ns the sample's datagram arrived.
    pub ts_ns: u64,
    /// Smoothed RTT, µs; 0 when no RTT was measured yet.
    pub rtt_us: u32,
    /// RTT variance, µs (meaningless while `rtt_us` is 0).
    pub rttvar_us: u32,
    /// Cumulative retransmitted segments.
    pub total_retrans: u32,
    /// tcpi_snd_cwnd (low 24 bits), tcpi_snd_ssthresh (next 24; all ones: not yet set)
    /// and tcpi_unacked (top 16), segments, each saturating: [`Retained::snd_cwnd`],
    /// [`Retained::ssthresh`], [`Retained::unacked`]. The unacked count took the bytes the
    /// two windows did not need (16.7 million segments is 24 GB at a 1,448-byte MSS).
    cwnd_ss: u64,
    /// Low 32 bits of the pacing and delivery rates, bytes/s.
    rates_lo: [u32; 2],
    /// tcpi_snd_mss, bytes (TCP's MSS option is 16 bits wide).
    pub snd_mss: u16,
    /// Bits 32..40 of the pacing and delivery rates.
    rates_hi: [u8; 2],
    /// tcpi_busy_time, tcpi_rwnd_limited, tcpi_sndbuf_limited in ms, modulo 2^16.
    pub chrono16: [u16; 3],
    /// TCP state (low 7 bits; the kernel's states are 1–12), and [`AFTER_PAUSE`] in the
    /// high bit. The flag takes no byte of its own: see the size assertion below.
    state_bits: u8,
    /// tcpi_snd_wnd (the peer's advertised window, bytes) on a log scale: 8 steps per
    /// doubling, read back as the middle of its step, within 6.25 %
    /// ([`Retained::snd_wnd`]); 0 for a window under 2 bytes.
    /// It fills the struct's last byte: the exact value would take 8 more in every sample.
    wnd8: u8,
}

// The packing above exists to keep this: a flow keeps thousands of samples.
const _: () = assert!(std::mem::size_of::<Retained>() == 48);

/// The high bit of `state_bits`: the monitor took no sample of the flow (retained or
/// deduped) for longer than the tracker's pause (`TrackerConfig::pause_ns`) before this one.
/// A chart draws a value as held until the next retained sample, because every sample in
/// between was deduped (nothing changed); after a pause that is not known, so the line
/// breaks there (docs/web.md, "Charts").
const AFTER_PAUSE: u8 = 0x80;

/// The kernel's ssthresh before the first loss (`TCP_INFINITE_SSTHRESH`).
pub const INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

/// A rate as stored: 40 bits, all ones for [`ABSENT_U64`].
const RATE_BITS_MAX: u64 = (1 << 40) - 1;

fn pack_rate(v: u64) -> (u32, u8) {
    let v = if v == ABSENT_U64 { RATE_BITS_MAX } else { v.min(RATE_BITS_MAX - 1) };
    (v as u32, (v >> 32) as u8)
}

fn unpack_rate(lo: u32, hi: u8) -> u64 {
    let v = u64::from(hi) << 32 | u64::from(lo);
    if v == RATE_BITS_MAX { ABSENT_U64 } else { v }
}

/// The most a 24-bit window field holds; [`Retained::ssthresh`]'s "not yet set" is one more.
const WINDOW_MAX: u64 = (1 << 24) - 2;

impl Retained {
    /// tcpi_snd_cwnd, segments (saturating at 16,777,214).
    #[inline]
    pub fn snd_cwnd(&self) -> u32 {
        (self.cwnd_ss & 0xff_ffff) as u32
    }

    /// Sets [`Retained::snd_cwnd`].
    #[inline]
    pub fn set_snd_cwnd(&mut self, v: u32) {
        self.cwnd_ss = (self.cwnd_ss & !0xff_ffff) | u64::from(v).min(WINDOW_MAX);
    }

    /// tcpi_snd_ssthresh, segments; [`INFINITE_SSTHRESH`] while not yet set.
    #[inline]
    pub fn ssthresh(&self) -> u32 {
        match (self.cwnd_ss >> 24) & 0xff_ffff {
            v if v > WINDOW_MAX => INFINITE_SSTHRESH,
            v => v as u32,
        }
    }

    /// Sets [`Retained::ssthresh`] ([`INFINITE_SSTHRESH`] and above: not yet set).
    #[inline]
    pub fn set_ssthresh(&mut self, v: u32) {
        let v = if v >= INFINITE_SSTHRESH { WINDOW_MAX + 1 } else { u64::from(v).min(WINDOW_MAX) };
        self.cwnd_ss = (self.cwnd_ss & !(0xff_ffff << 24)) | v << 24;
    }

    /// Sets [`Retained::snd_cwnd`], [`Retained::ssthresh`] and [`Retained::unacked`] at
    /// once (the decoder's path: one store).
    #[inline]
    pub fn set_windows(&mut self, cwnd: u32, ssthresh: u32, unacked: u32) {
        let ss = if ssthresh >= INFINITE_SSTHRESH {
            WINDOW_MAX + 1
        } else {
            u64::from(ssthresh).min(WINDOW_MAX)
        };
        self.cwnd_ss =
            u64::from(cwnd).min(WINDOW_MAX) | ss << 24 | u64::from(unacked.min(0xffff)) << 48;
    }

    /// tcpi_unacked: segments in flight, not yet acknowledged (saturating at 65,535).
    #[inline]
    pub fn unacked(&self) -> u32 {
        (self.cwnd_ss >> 48) as u32
    }

    /// Sets [`Retained::unacked`].
    #[inline]
    pub fn set_unacked(&mut self, v: u32) {
        self.cwnd_ss = (self.cwnd_ss & ((1 << 48) - 1)) | u64::from(v.min(0xffff)) << 48;
    }

    /// TCP state.
    #[inline]
    pub fn state(&self) -> u8 {
        self.state_bits & !AFTER_PAUSE
    }

    /// Sets the TCP state (keeping the pause flag).
    #[inline]
    pub fn set_state(&mut self, state: u8) {
        self.state_bits = (state & !AFTER_PAUSE) | (self.state_bits & AFTER_PAUSE);
    }

    /// Whether the monitor took no sample of the flow for longer than its pause before this
    /// one (the high bit of the state byte).
    #[inline]
    pub fn after_pause(&self) -> bool {
        self.state_bits & AFTER_PAUSE != 0
    }

    /// Sets or clears [`Retained::after_pause`].
    #[inline]
    pub fn set_after_pause(&mut self, paused: bool) {
        self.state_bits = self.state() | if paused { AFTER_PAUSE } else { 0 };
    }

    /// The sample as 13 words, each small for a quiet flow: what the tracker's store of
    /// idle flows packs (`tracker/cold.rs`), seven bits a byte. The usual "not set" values
    /// (an infinite ssthresh, an absent rate) become 0. [`Retained::from_words`] reads them
    /// back exactly.
    pub fn to_words(&self) -> [u64; 13] {
        let [c0, c1, c2] = self.chrono16.map(u64::from);
        let ssthresh = match self.ssthresh() {
            INFINITE_SSTHRESH => 0,
            v => u64::from(v) + 1,
        };
        [
            self.ts_ns,
            self.rtt_us.into(),
            self.rttvar_us.into(),
            self.total_retrans.into(),
            // The window and what is in flight, in one word: 0 for an idle flow's.
            u64::from(self.snd_cwnd()) | u64::from(self.unacked()) << 24,
            ssthresh,
            self.pacing_rate().wrapping_add(1),
            self.delivery_rate().wrapping_add(1),
            self.snd_mss.into(),
            c0,
            c1,
            c2,
            u64::from(self.state_bits) | u64::from(self.wnd8) << 8,
        ]
    }

    /// The sample [`Retained::to_words`] gave these words for.
    pub fn from_words(w: [u64; 13]) -> Self {
        let mut r = Self {
            ts_ns: w[0],
            rtt_us: w[1] as u32,
            rttvar_us: w[2] as u32,
            total_retrans: w[3] as u32,
            cwnd_ss: 0,
            rates_lo: [0; 2],
            snd_mss: w[8] as u16,
            rates_hi: [0; 2],
            chrono16: [w[9] as u16, w[10] as u16, w[11] as u16],
            state_bits: w[12] as u8,
            wnd8: (w[12] >> 8) as u8,
        };
        r.set_snd_cwnd((w[4] & 0xff_ffff) as u32);
        r.set_unacked((w[4] >> 24) as u32);
        r.set_ssthresh(if w[5] == 0 { INFINITE_SSTHRESH } else { (w[5] - 1) as u32 });
        r.set_pacing_rate(w[6].wrapping_sub(1));
        r.set_delivery_rate(w[7].wrapping_sub(1));
        r
    }

    /// `snd_cwnd × snd_mss`, bytes, computed in u64 (cgmon wrapped it in u32: B9).
    #[inline]
    pub fn cwnd_bytes(&self) -> u64 {
        u64::from(self.snd_cwnd()) * u64::from(self.snd_mss)
    }

    /// `snd_ssthresh × snd_mss`, bytes; `None` while ssthresh is still infinite.
    pub fn ssthresh_bytes(&self) -> Option<u64> {
        (self.ssthresh() < INFINITE_SSTHRESH)
            .then(|| u64::from(self.ssthresh()) * u64::from(self.snd_mss))
    }

    /// Pacing rate, bytes/s; [`ABSENT_U64`] when unlimited or not sent.
    #[inline]
    pub fn pacing_rate(&self) -> u64 {
        unpack_rate(self.rates_lo[0], self.rates_hi[0])
    }

    /// Delivery rate, bytes/s; [`ABSENT_U64`] when not sent or not measured yet (0).
    #[inline]
    pub fn delivery_rate(&self) -> u64 {
        unpack_rate(self.rates_lo[1], self.rates_hi[1])
    }

    /// The peer's window as kept (the middle of its step: within 6.25 % of the value
    /// seen), bytes.
    #[inline]
    pub fn snd_wnd(&self) -> u32 {
        let (e, frac) = (u32::from(self.wnd8 / 8), u64::from(self.wnd8 % 8));
        if self.wnd8 == 0 {
            0
        } else {
            (((17 + 2 * frac) << e) >> 4).min(u64::from(u32::MAX)) as u32
        }
    }

    /// The peer's windows this sample may have seen: the step it was kept in, `(lowest,
    /// highest)` bytes, both inclusive ([`snd_wnd`](Self::snd_wnd) is its middle).
    #[inline]
    pub fn snd_wnd_range(&self) -> (u32, u32) {
        if self.wnd8 == 0 {
            return (0, 1);
        }
        let (e, frac) = (u32::from(self.wnd8 / 8), u64::from(self.wnd8 % 8));
        let lo = ((8 + frac) << e) >> 3;
        let step = ((1u64 << e) >> 3).max(1);
        (lo.min(u64::from(u32::MAX)) as u32, (lo + step - 1).min(u64::from(u32::MAX)) as u32)
    }

    /// Keeps the peer's window `w` (bytes): its highest set bit and the three bits below.
    #[inline]
    pub fn set_snd_wnd(&mut self, w: u32) {
        let e = 31u32.saturating_sub(w.leading_zeros()).min(31);
        let frac = if e >= 3 { (w >> (e - 3)) & 7 } else { (w << (3 - e)) & 7 };
        self.wnd8 = if w < 2 { 0 } else { (e * 8 + frac) as u8 };
    }

    /// Sets the pacing rate (bytes/s, or [`ABSENT_U64`]).
    #[inline]
    pub fn set_pacing_rate(&mut self, v: u64) {
        (self.rates_lo[0], self.rates_hi[0]) = pack_rate(v);
    }

    /// Sets the delivery rate (bytes/s, or [`ABSENT_U64`]).
    #[inline]
    pub fn set_delivery_rate(&mut self, v: u64) {
        (self.rates_lo[1], self.rates_hi[1]) = pack_rate(v);
    }
}

/// The chrono counters (busy, rwnd-limited, sndbuf-limited; ms) of each of `samples`,
/// recovered from their low 16 bits going back from the newest, whose full values are
/// `newest` (the flow's latest values, which the tracker keeps whole). Any run of a flow's
/// newest samples works: nothing before it is read.
pub fn unwrap_chrono(samples: &[Retained], newest: [u32; 3]) -> Vec<[u32; 3]> {
    let mut out = vec![[0u32; 3]; samples.len()];
    let mut cur = newest;
    for i in (0..samples.len()).rev() {
        out[i] = cur;
        if i > 0 {
            for (k, c) in cur.iter_mut().enumerate() {
                let step = samples[i].chrono16[k].wrapping_sub(samples[i - 1].chrono16[k]);
                *c = c.saturating_sub(u32::from(step));
            }
        }
    }
    out
}

/// Marks a rate the kernel did not give.
pub const ABSENT_U64: u64 = u64::MAX;

/// One sample as the charts read it, in the units of the records. `None`: the kernel did not give the value.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Point {
    /// Wall-clock time, seconds since the Unix epoch.
    pub unix_s: f64,
    /// Smoothed RTT, ms.
    pub rtt_ms: Option<f64>,
    /// Congestion window, bytes.
    pub cwnd_bytes: Option<f64>,
    /// Slow-start threshold, bytes (`None` while it is still "infinite").
    pub ssthresh_bytes: Option<f64>,
    /// Pacing rate, Mbit/s.
    pub pacing_mbps: Option<f64>,
    /// Delivery rate, Mbit/s.
    pub delivery_mbps: Option<f64>,
    /// Cumulative retransmitted segments.
    pub retrans: Option<f64>,
    /// Cumulative busy, receiver-window-limited and send-buffer-limited time, ms.
    pub chrono_ms: Option<[f64; 3]>,
    /// The monitor did not sample the flow for a while before this point
    /// ([`Retained::after_pause`]): a chart breaks its lines here instead of holding.
    pub after_pause: bool,
}

#[cfg(test)]
mod packing_tests {
    use super::*;

    #[test]
    fn the_window_is_kept_within_a_sixteenth_on_a_log_scale() {
        let mut r = Retained::default();
        for w in [0u32, 2, 3, 7, 8, 9, 1_448, 16_384, 65_535, 85_000, 6_291_456, u32::MAX] {
            r.set_snd_wnd(w);
            let back = f64::from(r.snd_wnd());
            assert!((back - f64::from(w)).abs() <= f64::from(w) * 0.0625 + 1.0, "{w} → {back}");
        }
        r.set_snd_wnd(1);
        assert_eq!(r.snd_wnd(), 0, "a closed window reads closed");
    }

    #[test]
    fn rates_keep_40_bits_absent_stays_absent_and_more_saturates() {
        let mut r = Retained::default();
        for v in [0, 1, u64::from(u32::MAX) + 7, RATE_BITS_MAX - 1] {
            r.set_pacing_rate(v);
            r.set_delivery_rate(v / 2);
            assert_eq!((r.pacing_rate(), r.delivery_rate()), (v, v / 2));
        }
        r.set_pacing_rate(ABSENT_U64);
        assert_eq!(r.pacing_rate(), ABSENT_U64);
        r.set_pacing_rate(RATE_BITS_MAX + 5);
        assert_eq!(r.pacing_rate(), RATE_BITS_MAX - 1, "too fast for 40 bits: the largest kept");
        r.set_ssthresh(INFINITE_SSTHRESH);
        assert_eq!(r.ssthresh_bytes(), None);
        r.set_ssthresh(20);
        r.snd_mss = 1448;
        r.set_snd_cwnd(u32::MAX);
        assert_eq!(r.ssthresh_bytes(), Some(28_960));
        // The window saturates at 24 bits, and its bytes still do not wrap in u32 (B9).
        assert_eq!(r.snd_cwnd(), (1 << 24) - 2);
        assert_eq!(r.cwnd_bytes(), ((1 << 24) - 2) * 1448);
        assert!(r.cwnd_bytes() > u64::from(u32::MAX));
        // The three share a word and do not disturb each other.
        r.set_unacked(70_000);
        assert_eq!((r.snd_cwnd(), r.ssthresh(), r.unacked()), ((1 << 24) - 2, 20, 0xffff));
        r.set_snd_cwnd(10);
        r.set_ssthresh(u32::MAX);
        r.set_unacked(7);
        assert_eq!((r.snd_cwnd(), r.ssthresh(), r.unacked()), (10, INFINITE_SSTHRESH, 7));
        assert_eq!(Retained::from_words(r.to_words()), r);
    }

    #[test]
    fn chrono_counters_unwrap_across_16_bit_wraps() {
        // Busy time 65,000 → 66,000 → 200,000 ms: the low 16 bits wrap twice.
        let full = [[65_000u32, 10, 0], [66_000, 10, 0], [200_000, 70_000, 5]];
        let s: Vec<Retained> = full
            .iter()
            .map(|c| Retained { chrono16: c.map(|v| v as u16), ..Retained::default() })
            .collect();
        // From the newest back, every step under 65.5 s is recovered; the last step grew
        // busy time by 134 s and rwnd-limited time by 70 s between two samples, which 16
        // bits cannot hold (they come back short by multiples of 65,536 ms).
        let got = unwrap_chrono(&s, full[2]);
        assert_eq!(got[1], [200_000 - 134_000 % 65_536, 70_000 - 69_990 % 65_536, 0]);
        assert_eq!(unwrap_chrono(&s[..2], full[1]), full[..2].to_vec());
    }
}
