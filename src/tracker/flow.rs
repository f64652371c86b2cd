//! A flow as the tracker keeps it ([`Flow`]: identity, latest values, samples) and what it
//! ends as ([`EndedFlow`]: why and how it ended, with its samples still in pool blocks).

use super::accounts;
use super::pool::{Held, StageRef};
use crate::record::Retained;
use crate::wire::sock::SockKey;

/// The newest sample's flow-level values: the flow's final counters. Together with
/// [`Retained`] they are what dedup compares (option flags aside, which are OR'd).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Last {
    /// State.
    pub state: u8,
    /// tcpi_min_rtt, µs; u32::MAX when absent.
    pub min_rtt_us: u32,
    /// tcpi_total_retrans.
    pub total_retrans: u32,
    /// tcpi_delivered.
    pub delivered: u32,
    /// tcpi_delivered_ce.
    pub delivered_ce: u32,
    /// tcpi_snd_mss, saturating (TCP's MSS option is 16 bits wide; a u32 here took the
    /// bytes `total_rto_time_ms` needs in the flow's cache lines).
    pub snd_mss: u16,
    /// tcpi_max_pacing_rate, bytes/s; ABSENT_U64 when unlimited.
    pub max_pacing_rate: u64,
    /// tcpi_bytes_acked.
    pub bytes_acked: u64,
    /// tcpi_bytes_received.
    pub bytes_received: u64,
    /// tcpi_bytes_sent.
    pub bytes_sent: u64,
    /// tcpi_bytes_retrans.
    pub bytes_retrans: u64,
    /// tcpi_busy_time, ms (busy + rwnd-limited + sndbuf-limited, since the connection
    /// began); u32::MAX when the kernel does not report it.
    pub busy_ms: u32,
    /// tcpi_rwnd_limited, ms.
    pub rwnd_limited_ms: u32,
    /// tcpi_sndbuf_limited, ms.
    pub sndbuf_limited_ms: u32,
    /// tcpi_segs_out.
    pub segs_out: u32,
    /// tcpi_segs_in: the reverse direction's packets in an IPFIX record.
    pub segs_in: u32,
    /// tcpi_reord_seen.
    pub reord_seen: u32,
    /// tcpi_dsack_dups.
    pub dsack_dups: u32,
    /// tcpi_snd_wnd: the peer's advertised receive window, bytes.
    pub snd_wnd: u32,
    /// Largest tcpi_snd_wnd seen in any retained sample.
    pub snd_wnd_max: u32,
    /// SO_SNDBUF from SKMEMINFO, bytes; 0 when not sent.
    pub sndbuf: u32,
    /// tcpi_total_rto (Linux 6.7+; 0 before).
    pub total_rto: u16,
    /// tcpi_total_rto_time, ms: the time spent recovering from RTOs, the recovery under way
    /// included, saturating at [`RTO_TIME_SATURATED`]; [`RTO_TIME_ABSENT`] when the kernel
    /// does not report it (before 6.7). 16 bits: the flow's cache lines are full.
    pub total_rto_time_ms: u16,
    /// Bytes acked and received per second, recently: an exponentially weighted average
    /// of the rates between retained samples, over about [`RECENT_TAU_S`] as of the newest
    /// retained sample ([`Last::recent_rate_at`] decays it to a later time). What the host
    /// page ranks flows by; the kernel's delivery rate is one burst's. (Fills the padding.)
    pub recent_bps: f32,
}

/// [`Last::total_rto_time_ms`] of a kernel that does not report it.
pub const RTO_TIME_ABSENT: u16 = u16::MAX;

/// The most [`Last::total_rto_time_ms`] holds: 65.5 s of RTO recovery (a flow past it is
/// reported at it, "at least").
pub const RTO_TIME_SATURATED: u16 = u16::MAX - 1;

/// The time constant of [`Last::recent_bps`], s.
pub const RECENT_TAU_S: f64 = 2.0;

impl Last {
    /// Folds in the bytes acked and received since the previous retained sample, `dt_ns`
    /// earlier (`prev`: the counters then).
    pub fn fold_rate(&mut self, prev_bytes: u64, dt_ns: u64) {
        if dt_ns == 0 {
            return;
        }
        // On every changed sample, so a division and no `exp`: the weight Δt/(τ + Δt) is
        // 1 − e^(−Δt/τ)'s first-order form. Any weight reads a steady rate exactly; the
        // form only sets how fast a change shows.
        let now = self.bytes_acked.saturating_add(self.bytes_received);
        let dt = dt_ns as f32 / 1e9;
        let rate = now.saturating_sub(prev_bytes) as f32 / dt;
        let alpha = dt / (RECENT_TAU_S as f32 + dt);
        self.recent_bps += alpha * (rate - self.recent_bps);
    }

    /// [`Last::recent_bps`] at `now_ns`, `since_ns` after the retained sample it is of: a
    /// flow that sent nothing since decays towards 0.
    pub fn recent_rate_at(&self, since_ns: u64) -> f64 {
        f64::from(self.recent_bps) * (-(since_ns as f64 / 1e9) / RECENT_TAU_S).exp()
    }
}

#[cfg(test)]
mod rate_tests {
    use super::*;

    #[test]
    fn a_steady_rate_is_found_and_an_idle_flow_decays() {
        let mut l = Last::default();
        let mut bytes = 0u64;
        for _ in 0..20 {
            let prev = bytes;
            bytes += 1_000_000; // 1 MB a second, sampled every second
            l.bytes_acked = bytes;
            l.fold_rate(prev, 1_000_000_000);
        }
        assert!((f64::from(l.recent_bps) - 1e6).abs() < 1e4, "{}", l.recent_bps);
        // Sampled ten times as often, the same rate reads the same.
        let mut m = Last::default();
        for i in 0..200u64 {
            m.bytes_received = (i + 1) * 100_000;
            m.fold_rate(i * 100_000, 100_000_000);
        }
        assert!((f64::from(m.recent_bps) - 1e6).abs() < 1e4, "{}", m.recent_bps);
        // Ten seconds without a byte: under 1 % of it.
        assert!(l.recent_rate_at(10_000_000_000) < 1e4);
        assert_eq!(l.recent_rate_at(0), f64::from(l.recent_bps));
    }
}

/// Why a flow (or a window of it) was handed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// Its destroy event arrived: final counters are exact.
    Destroyed,
    /// A complete dump no longer held it.
    Gone,
    /// The monitor stopped while it was open.
    Shutdown,
    /// It reached the window cap; it goes on in the next window.
    Window,
}

/// How a connection that ended was closed, as far as the kernel lets us tell
/// (docs/records.md, "How a connection closed").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Close {
    /// An orderly close: this side's FIN was sent and acknowledged.
    Clean,
    /// No orderly close: a RST was sent or received, or the kernel gave up on the
    /// connection (a refused connect, a timeout, an abortive close such as `SO_LINGER` 0).
    Reset,
}

impl Close {
    /// From a socket's final counters. `bytes_acked` counts sequence space: the data, plus
    /// one for this side's SYN when it opened the connection, plus one for its FIN once
    /// that is acknowledged; `bytes_sent − bytes_retrans` is the data sent once. So the FIN
    /// was acknowledged exactly when `bytes_acked` exceeds the data (and the SYN) by one.
    pub fn from_final(l: &Last, passive_open: bool) -> Close {
        let data = l.bytes_sent.saturating_sub(l.bytes_retrans);
        let syn = u64::from(!passive_open);
        if l.bytes_acked > data + syn { Close::Clean } else { Close::Reset }
    }

    /// From a socket's final counters when it is not known which side opened: the SYN's
    /// one unit of sequence space is in `bytes_acked` for the connecting side only, so
    /// data + 1 reads as a clean close on the accepted side and as a reset on the
    /// connecting one. That case is `None`: unknown, not a guess.
    pub fn from_final_either_side(l: &Last) -> Option<Close> {
        let data = l.bytes_sent.saturating_sub(l.bytes_retrans);
        match l.bytes_acked.saturating_sub(data) {
            0 => Some(Close::Reset),
            1 => None,
            _ => Some(Close::Clean),
        }
    }

    /// The record's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Close::Clean => "clean",
            Close::Reset => "reset",
        }
    }
}

/// A congestion-control algorithm name, stored inline and padded with NUL
/// (TCP_CA_NAME_MAX is 16), as [`crate::wire::sock::Sample::cong_word`] gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CcName(pub(super) [u8; 16]);

impl CcName {
    /// The name's bytes, up to the first NUL.
    pub fn as_bytes(&self) -> &[u8] {
        let len = self.0.iter().position(|&b| b == 0).unwrap_or(16);
        &self.0[..len]
    }

    /// The name, or "" when unknown or not UTF-8.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or("")
    }
}

/// A tracked flow (or one window of it).
///
/// Laid out in C order, aligned to a cache line, with what a changed sample reads and writes
/// (account, latest values, congestion control, stage reference and window length) first: a
/// changed socket then touches three cache lines of its flow, not all six. The changed path
/// is bound by memory traffic (see `prefetch_ahead`).
#[derive(Debug, Clone, PartialEq)]
#[repr(C, align(64))]
pub struct Flow {
    /// Its traffic account and what was counted into it.
    pub counted: accounts::Counted,
    /// The newest sample's values.
    pub last: Last,
    /// Congestion control, from the last dump that named it.
    pub cc: CcName,
    /// Where its newer samples wait (stage and pool blocks), and how many the window holds;
    /// [`StageRef::NONE`] in a flow handed on (its samples are all in `samples` then).
    pub stage: StageRef,
    /// Retained samples, oldest first (in a flow being tracked: the older ones; see
    /// `stage`).
    pub samples: Vec<Retained>,
    /// Family, 4-tuple, cookie.
    pub key: SockKey,
    /// cgroup2 id, 0 when the kernel sent none. Read when the flow opens: a socket keeps
    /// the cgroup it was created in.
    pub cgroup_id: u64,
    /// Timestamp of the window's first sample.
    pub first_ts_ns: u64,
    /// Timestamp of the last sample seen, retained or not.
    pub last_ts_ns: u64,
    /// bytes_acked at the window's first sample.
    pub first_bytes_acked: u64,
    /// bytes_received at the window's first sample.
    pub first_bytes_received: u64,
    /// busy_time, rwnd_limited and sndbuf_limited (ms) at the window's first sample: the
    /// diagnosis uses their growth over the sampled span.
    pub first_chrono: [u32; 3],
    /// Window sequence number, from 0.
    pub seq: u32,
    /// Samples not retained because nothing the analysis uses changed.
    pub deduped: u32,
    /// Option flags OR'd over every sample of the window.
    pub options: u8,
    /// This window's start was not seen: the flow was open before the monitor started, or
    /// the window continues an earlier one (`seq > 0`).
    pub partial_start: bool,
    /// The flow was open before the monitor started, whichever window this is.
    pub preexisting: bool,
    /// Its local port was listening when it opened: the accepted (server) side, which did
    /// not send the SYN.
    pub passive_open: bool,
}

/// How a flow's window was sampled: by which requests, and how evenly. The samples full
/// dumps gave are the rest: see [`EndedFlow::dump_samples`]. Kept beside the flow (in the
/// tracker's per-flow hot entry), not in [`Flow`], which fills its cache lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sampling {
    /// Samples (retained or deduped) that exact polls gave.
    pub exact: u32,
    /// The longest time between two of its samples, µs (saturating).
    pub max_gap_us: u32,
    /// Its last sample is a destroy event's final counters.
    pub event: bool,
}

// What a changed sample touches fits three cache lines, and a flow six. It was five until
// tcpi_segs_in joined `Last` (the reverse direction's packets in an IPFIX record): the
// sixth line is read only when the flow is handed on, and a flow idle long enough is
// packed (cold.rs), so it costs 64 bytes per flow in motion and no memory traffic.
const _: () = assert!(std::mem::offset_of!(Flow, samples) <= 3 * 64);
const _: () = assert!(size_of::<Flow>() <= 6 * 64);

/// A flow handed on for analysis.
///
/// As the tracker hands it on, most of its samples may still lie in the tracker's pool
/// blocks: [`gather`](Self::gather) brings them into `flow.samples`, on the thread that
/// analyses it, rather than on the tracker's (see `tracker/pool.rs`).
#[derive(Debug)]
pub struct EndedFlow {
    /// The flow's (window's) data. Its `samples` are complete once gathered.
    pub flow: Flow,
    /// Why it ended.
    pub reason: EndReason,
    /// When: the destroy event's time, or the first datagram of the dump that missed it, or
    /// the last sample's time at shutdown and window ends.
    pub end_ts_ns: u64,
    /// How the connection closed, when its end was seen and the kernel tells.
    pub close: Option<Close>,
    /// How it was sampled.
    pub sampling: Sampling,
    /// Its network namespace, when more than one is sampled (`--netns`).
    pub netns: Option<std::sync::Arc<crate::record::NetnsLabel>>,
    /// Its samples still in pool blocks, which come before `flow.samples`.
    pub(super) held: Option<Held>,
    /// Seen only in its destroy event with a local port not known to listen (in this
    /// namespace index): which side it was, so its close and its listener's cgroup, waits
    /// for [`Tracker::resolve_sides`] after a listeners' dump.
    pub(crate) unresolved: Option<u32>,
    /// The process that owned its socket, when one was found (`processes`).
    pub owner: Option<crate::who::processes::Owner>,
    /// A connect that never established: how it ended.
    pub attempt: Option<super::attempts::Attempt>,
}

/// What leaves the table with a flow besides the flow itself.
#[derive(Debug, Default)]
pub(super) struct Rest {
    pub(super) held: Option<Held>,
    pub(super) sampling: Sampling,
    /// Seen only in its destroy event on a port not known to listen: its namespace, until
    /// [`Tracker::resolve_sides`] decides its side.
    pub(super) unresolved: Option<u32>,
    /// A connect that never established (from its destroy event).
    pub(super) attempt: Option<super::attempts::Attempt>,
}

impl EndedFlow {
    /// A flow whose samples are all in `flow.samples`.
    pub fn new(flow: Flow, reason: EndReason, end_ts_ns: u64) -> Self {
        Self {
            flow,
            reason,
            end_ts_ns,
            close: None,
            sampling: Sampling::default(),
            netns: None,
            held: None,
            unresolved: None,
            owner: None,
            attempt: None,
        }
    }

    /// Samples (retained or deduped) that full dumps gave this window: all but the exact
    /// polls', the destroy event's, and the window's first when it is the edge it shares
    /// with the window before.
    pub fn dump_samples(&self) -> u64 {
        let seen = self.sample_count() as u64 + u64::from(self.flow.deduped);
        let other = u64::from(self.sampling.exact)
            + u64::from(self.sampling.event)
            + u64::from(self.flow.seq > 0);
        seen.saturating_sub(other)
    }

    /// Brings every sample into `flow.samples`, in order, and gives the pool blocks they
    /// were in back to the tracker. Idempotent; a flow dropped ungathered gives its blocks
    /// back too.
    pub fn gather(&mut self) {
        self.gather_into(Vec::new());
    }

    /// As [`gather`](Self::gather), into `buf`'s memory (what it held is dropped). The
    /// analyzer passes the previous flow's samples: a long window's copy into fresh memory
    /// faults in every page (a 3,600-sample window is 172 KB, mapped anew by glibc).
    pub fn gather_into(&mut self, buf: Vec<Retained>) {
        if let Some(h) = self.held.take() {
            self.flow.samples = h.gather(&self.flow.samples, buf);
        }
    }

    /// Whether every sample is in `flow.samples`.
    pub fn gathered(&self) -> bool {
        self.held.is_none()
    }

    /// Retained samples, gathered or not.
    pub fn sample_count(&self) -> usize {
        self.flow.samples.len() + self.held.as_ref().map_or(0, Held::len)
    }

    /// True when the end was not seen: shutdown, or a window cut.
    pub fn partial_end(&self) -> bool {
        matches!(self.reason, EndReason::Shutdown | EndReason::Window)
    }
}

impl Flow {
    /// Its samples, and each one's chrono counters (busy, rwnd-limited, sndbuf-limited; ms
    /// since the connection began), or `None` for them when the kernel sends none (before
    /// Linux 4.10).
    pub fn chrono(&self) -> (&[Retained], Option<Vec<[u32; 3]>>) {
        let s = &self.samples;
        let l = &self.last;
        let chrono = (l.busy_ms != u32::MAX).then(|| {
            crate::record::unwrap_chrono(s, [l.busy_ms, l.rwnd_limited_ms, l.sndbuf_limited_ms])
        });
        (s, chrono)
    }

    /// The span sampled, first sample to last seen (retained or not), ns: the record's
    /// `Duration`, and the time base of its throughputs and of the diagnosis.
    pub fn span_ns(&self) -> u64 {
        self.last_ts_ns.saturating_sub(self.first_ts_ns)
    }

    /// A copy of the identity and latest values, without samples (and without copying them).
    pub(super) fn clone_header(&mut self) -> Flow {
        let samples = std::mem::take(&mut self.samples);
        let header = self.clone();
        self.samples = samples;
        header
    }
}
