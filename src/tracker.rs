//! The tracker: per-flow state across dumps and destroy events. Pure; never reads the clock
//! (time comes from the samples) and never touches a socket.
//!
//! - **Identity.** A flow is a socket cookie with its family and 4-tuple. Cookies are never
//!   reused, so a new connection on an old 4-tuple is a new flow (cgmon merged them: B14).
//! - **Lifetime.** A flow is followed in every state until its socket is gone. It ends on its
//!   destroy event, which carries the final counters. Otherwise it ends when a *complete*
//!   dump no longer holds it. An incomplete dump (interrupted, truncated or malformed) ends
//!   nothing. A destroy event for a flow never seen yields a one-sample record: a flow that
//!   opened and closed between two polls.
//! - **Dedup.** A sample equal to the last retained one in every value the analysis uses
//!   (and in state, bytes_acked, bytes_received, bytes_sent) is counted, not retained. The
//!   option flags of every sample are OR'd, retained or not (cgmon lost them: B11).
//! - **Bounded memory.** A retained sample is a 48-byte [`Retained`]. A changing flow's
//!   newest samples wait in a 192-byte stage; four at a time they move to a block of a
//!   shared pool (`tracker/pool.rs`). A flow handed on takes its blocks along, and the
//!   analyzer gathers them into the flow's `samples` and gives them back. At
//!   `window_samples` retained samples a flow emits an interim record and goes on in a
//!   fresh window, with the next sequence number.
//! - **Limits.** `max_flows` caps the flows being recorded. It counts recorded flows only, and
//!   a flow refused for the limit is counted and stays refused for its life (cgmon: B13).
//!   `min_samples` drops short flows, counted.

use rustc_hash::FxHashMap;

pub use pool::StageRef;
use pool::{Held, STAGED, StagePool};

use crate::wire::inet_diag::SocketTarget;
use crate::wire::sock::{Sample, SockKey, nul_terminated};
use crate::wire::tcp_info::TcpInfo;

pub use crate::record::{ABSENT_U64, INFINITE_SSTHRESH, Retained};
use crate::states::tcp;

/// How many cookies of flows ended as `gone` while destroy events were awaited are kept, so
/// that a destroy event arriving after the grace period is counted as late rather than
/// written as a second, one-sample flow: 8 bytes a cookie in the set and 8 in the queue,
/// plus the set's table. Past that the oldest are forgotten (docs/records.md).
pub const LATE_COOKIES: usize = 65_536;

/// The program's grace period unless told otherwise (`-tracker-destroy-grace`; why 5 s:
/// docs/records.md).
pub const DEFAULT_DESTROY_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The longest grace period accepted: waiting flows hold their samples and count against
/// `max_flows`, so the wait is capped.
pub const MAX_DESTROY_GRACE: std::time::Duration = std::time::Duration::from_secs(600);

/// How many flows ahead the changed path prefetches (see `prefetch_ahead`).
const PREFETCH_AHEAD: usize = 8;

/// A dump prefetches for busy flows when at least one sample in this many changed in the
/// dump before: looking ahead costs every socket a little, and saves a changed socket's
/// cache misses, which cost far more (`cargo bench --bench kept`; benches/RESULTS.md, D1).
const LOOKAHEAD_SHARE: u64 = 64;

/// Tracker settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrackerConfig {
    /// Most flows recorded at once; 0 = no limit (cgmon's `-tracker-max-flows`).
    pub max_flows: usize,
    /// Fewest retained samples for a flow to be passed on; 0 = no minimum
    /// (`-tracker-min-samples`).
    pub min_samples: usize,
    /// Retained samples per window before an interim record; at least 2.
    pub window_samples: usize,
    /// How long a flow absent from a complete dump waits for its destroy event, ns; 0 ends
    /// it at once (what the program uses when no destroy listener runs).
    pub destroy_grace_ns: u64,
    /// Most retained samples held by the flows being tracked (and those waiting for their
    /// destroy event); past it the longest windows are cut early, as interim records. 0 =
    /// no bound.
    pub max_samples: u64,
    /// Keep the hot set (flows whose samples move) for exact polls between full dumps
    /// (`--cpu-budget` above 0); off, every tick is a full dump and nothing extra is kept.
    pub tiers: bool,
    /// How long a flow stays hot after its samples last moved, ns.
    pub hot_linger_ns: u64,
}

impl TrackerConfig {
    /// Windows of about an hour of samples at the given sampling interval.
    pub fn window_for_interval(interval: std::time::Duration) -> usize {
        let per_hour = 3600.0 / interval.as_secs_f64().max(1e-3);
        (per_hour.ceil() as usize).clamp(2, 100_000_000)
    }
}

impl Default for TrackerConfig {
    fn default() -> Self {
        Self {
            max_flows: 0,
            min_samples: 0,
            window_samples: 3600,
            destroy_grace_ns: 0,
            max_samples: 0,
            tiers: false,
            hot_linger_ns: 1_000_000_000,
        }
    }
}

/// The newest sample's flow-level values: the flow's final counters. Together with
/// [`Retained`] they are what dedup compares (option flags aside, which are OR'd).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
    /// tcpi_snd_mss.
    pub snd_mss: u32,
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
    /// tcpi_total_rto.
    pub total_rto: u16,
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
/// (TCP_CA_NAME_MAX is 16), as [`Sample::cong_word`] gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CcName([u8; 16]);

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
/// changed socket then touches three cache lines of its flow, not all five. The changed path
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
/// tracker's per-flow hot entry), not in [`Flow`], which fills its five cache lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sampling {
    /// Samples (retained or deduped) that exact polls gave.
    pub exact: u32,
    /// The longest time between two of its samples, µs (saturating).
    pub max_gap_us: u32,
    /// Its last sample is a destroy event's final counters.
    pub event: bool,
}

// What a changed sample touches fits three cache lines, and a flow five.
const _: () = assert!(std::mem::offset_of!(Flow, samples) <= 3 * 64);
const _: () = assert!(size_of::<Flow>() <= 5 * 64);

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
    held: Option<Held>,
    /// Seen only in its destroy event with a local port not known to listen (in this
    /// namespace index): which side it was, so its close and its listener's cgroup, waits
    /// for [`Tracker::resolve_sides`] after a listeners' dump.
    pub(crate) unresolved: Option<u32>,
}

/// What leaves the table with a flow besides the flow itself.
#[derive(Debug, Default)]
struct Rest {
    held: Option<Held>,
    sampling: Sampling,
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

/// Counters for the monitor's own metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrackerStats {
    /// Flows recorded.
    pub flows_opened: u64,
    /// Flow records handed on (windows included).
    pub flows_ended: u64,
    /// Flows refused for `max_flows`.
    pub flows_refused: u64,
    /// Samples whose cookie belongs to a flow with another 4-tuple (a socket that
    /// connected again elsewhere); not applied to that flow.
    pub tuple_conflicts: u64,
    /// Flows dropped for `min_samples`.
    pub flows_too_short: u64,
    /// Samples retained.
    pub samples_retained: u64,
    /// Samples deduped.
    pub samples_deduped: u64,
    /// Destroy events applied.
    pub destroy_events: u64,
    /// Dumps that ended no flow because they were incomplete.
    pub incomplete_dumps: u64,
    /// Flows that left the dumps and then got their destroy event within the grace period
    /// (one record, with the final counters).
    pub destroy_awaited: u64,
    /// Flows that left the dumps and got no destroy event within the grace period (ended
    /// as `gone`).
    pub destroy_wait_expired: u64,
    /// Destroy events for flows already written as `gone`: counted, not written again.
    pub destroy_late: u64,
    /// Windows cut early because the tracked flows held `max_samples`.
    pub windows_cut_for_memory: u64,
    /// Retained samples handed on (in ended flows and windows).
    pub samples_handed_on: u64,
}

/// Where a flow was first seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Dump,
    Destroy,
}

/// A flow absent from a complete dump, waiting for its destroy event.
#[derive(Debug)]
struct Waiting {
    flow: Flow,
    rest: Rest,
    /// The first datagram of the dump that missed it: the connection had ended by then.
    missed_ns: u64,
}

/// The per-flow fields every sample touches, in an array parallel to the flows (40 bytes a
/// flow). A sample whose fingerprint equals the flow's is deduped without reading the flow
/// itself, which would cost a cache miss per socket per dump.
#[derive(Debug, Clone, Copy)]
struct Hot {
    cookie: u64,
    /// Hash of everything dedup compares (and the 4-tuple) in the last retained sample.
    fp: u64,
    last_ts_ns: u64,
    seen_gen: u32,
    deduped: u32,
    /// Hash of the family and 4-tuple, so that a changed sample is checked against the
    /// flow's socket without reading the flow's key (a cookie reused by a socket that
    /// connected elsewhere; two different tuples collide with probability 2^-32).
    tuple: u32,
    options: u8,
    /// Its last sample was not deduped: it will likely change again (see `prefetch_ahead`).
    changed: bool,
    /// It is in the hot set (`tiers`).
    tiered: bool,
    /// The longest gap between its samples in this window, µs.
    max_gap_us: u32,
    /// Exact polls' samples in this window.
    exact: u32,
}

impl Hot {
    fn sampling(&self) -> Sampling {
        Sampling { exact: self.exact, max_gap_us: self.max_gap_us, event: false }
    }
}

/// The flow table.
#[derive(Debug)]
pub struct Tracker {
    cfg: TrackerConfig,
    /// cookie → slot in `slab` and `hot`.
    index: FxHashMap<u64, u32>,
    slab: Vec<Flow>,
    hot: Vec<Hot>,
    stages: StagePool,
    /// Where the next socket of the dump is expected. The kernel walks its hash tables in
    /// the same order every dump, so flows are kept in walk order: a socket is usually the
    /// one at the cursor, found without hashing, and the hot array is read sequentially.
    cursor: usize,
    /// Cookies refused for `max_flows`, with the generation they were last seen in and
    /// their namespace.
    refused: FxHashMap<u64, (u32, u32)>,
    /// Namespaces the current dump did not walk (nothing moved in them since their last
    /// walk): their flows, listeners and refusals stand as they were.
    carried: Vec<u32>,
    /// Cookies of flows ended by their destroy event, with that generation. A dump that was
    /// walking while the socket closed can still hold it; such samples must not reopen it.
    destroyed: FxHashMap<u64, u32>,
    /// Flows absent from a complete dump, waiting for their destroy event, by cookie.
    waiting: FxHashMap<u64, Waiting>,
    /// Waiting cookies in the order they began to wait (some may have stopped waiting).
    wait_order: std::collections::VecDeque<u64>,
    /// Cookies of flows ended as `gone` after waiting, oldest first, at most
    /// [`LATE_COOKIES`].
    gone: rustc_hash::FxHashSet<u64>,
    gone_order: std::collections::VecDeque<u64>,
    generation: u32,
    dumps_done: u32,
    /// Whether this dump prefetches for busy flows (see `prefetch_ahead`): enough of the
    /// last dump's samples changed.
    lookahead: bool,
    /// `stats` (retained, deduped) when this dump began.
    at_begin: (u64, u64),
    /// Flows in the table that this dump has held so far.
    seen_now: usize,
    stats: TrackerStats,
    accounts: accounts::Accounts,
    /// The hot set, when `tiers` is on.
    hot_set: tiers::HotSet,
    /// The network namespace the sockets now observed are in (an index into `labels`).
    netns: u32,
    /// Flows in a namespace other than the first (index 0), by cookie.
    flow_netns: FxHashMap<u64, u32>,
    /// What records say about each namespace, by index; empty when only one is sampled.
    labels: Vec<Option<std::sync::Arc<crate::record::NetnsLabel>>>,
}

/// What dedup compares, read from one sample once.
#[derive(Debug, Clone, Copy)]
struct Snap {
    retained: Retained,
    last: Last,
    options: u8,
}

/// busy_time in ms, 0 when absent.
fn l_busy(l: &Last) -> u32 {
    if l.busy_ms == u32::MAX { 0 } else { l.busy_ms }
}

/// µs → ms, saturating below u32::MAX (the "absent" mark).
fn ms(us: u64) -> u32 {
    (us / 1000).min(u64::from(u32::MAX - 1)) as u32
}

/// Bytes of `tcp_info` that hold every field [`decode_into`] reads (kernels since 6.7 send 248 or
/// more).
const DECODE_INFO_LEN: usize = 248;

/// A sample's values, for a flow that has none yet.
fn snap(s: &Sample<'_>, t: &TcpInfo<'_>) -> Snap {
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
fn decode_into(r: &mut Retained, l: &mut Last, s: &Sample<'_>, t: &TcpInfo<'_>) {
    // Read through a view of fixed length when the kernel sent all of it: every offset is
    // then known to be in range and the compiler drops some 30 bounds checks.
    match t.as_bytes().first_chunk::<DECODE_INFO_LEN>() {
        Some(fixed) => decode_from(r, l, s, &TcpInfo::new(fixed)),
        None => decode_from(r, l, s, t),
    }
}

#[inline(always)]
fn decode_from(r: &mut Retained, l: &mut Last, s: &Sample<'_>, t: &TcpInfo<'_>) {
    let state = s.msg().state();
    let total_retrans = t.total_retrans().unwrap_or(0);
    r.ts_ns = s.ts_ns;
    r.snd_cwnd = t.snd_cwnd().unwrap_or(0);
    r.snd_mss = t.snd_mss().map_or(0, |m| m.min(u32::from(u16::MAX)) as u16);
    r.ssthresh = t.snd_ssthresh().unwrap_or(INFINITE_SSTHRESH);
    r.set_pacing_rate(t.pacing_rate().unwrap_or(ABSENT_U64));
    // The kernel leaves tcpi_delivery_rate 0 until it has a rate sample: not measured.
    r.set_delivery_rate(t.delivery_rate().filter(|&v| v != 0).unwrap_or(ABSENT_U64));
    r.rtt_us = t.rtt().unwrap_or(0);
    r.rttvar_us = t.rttvar().unwrap_or(0);
    r.total_retrans = total_retrans;
    r.state = state;
    l.state = state;
    l.min_rtt_us = t.min_rtt().unwrap_or(u32::MAX);
    l.total_retrans = total_retrans;
    l.delivered = t.delivered().unwrap_or(0);
    l.delivered_ce = t.delivered_ce().unwrap_or(0);
    l.snd_mss = t.snd_mss().unwrap_or(0);
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
    l.reord_seen = t.reord_seen().unwrap_or(0);
    l.dsack_dups = t.dsack_dups().unwrap_or(0);
    let wnd = t.snd_wnd().unwrap_or(0);
    l.snd_wnd = wnd;
    l.snd_wnd_max = l.snd_wnd_max.max(wnd);
    let sndbuf = s.skmem().and_then(|m| m.sndbuf()).unwrap_or(0);
    if sndbuf != 0 {
        l.sndbuf = sndbuf;
    }
    l.total_rto = t.total_rto().unwrap_or(0);
}

/// Multiplies and folds the 128-bit product: a 64-bit mix of two words (as in wyhash).
#[inline(always)]
fn mum(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// Odd 64-bit constants, one per mixed word (digits of well-known hash constants).
const K: [u64; 16] = [
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
fn tuple_words(s: &Sample<'_>) -> [u64; 5] {
    let p = s.payload();
    let word = |off: usize| u64::from_ne_bytes(p[off..off + 8].try_into().expect("8 bytes"));
    let tail = u32::from_ne_bytes(p[36..40].try_into().expect("4 bytes"));
    [word(4), word(12), word(20), word(28), u64::from(tail) | u64::from(s.msg().family()) << 32]
}

/// 32-bit hash of the family and 4-tuple ([`Hot::tuple`]).
#[inline(always)]
fn tuple_hash(s: &Sample<'_>) -> u32 {
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
fn fingerprint(s: &Sample<'_>, t: &TcpInfo<'_>) -> u64 {
    let info = t.as_bytes();
    let m = s.msg();
    let head = u64::from(m.family()) << 8 | u64::from(m.state());
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

/// Asks the CPU to fetch, ahead of need, the memory the changed path touches: the flow at
/// `slot + 2 × PREFETCH_AHEAD` (the lines a changed sample writes: account, latest values,
/// stage reference), and the lines of the stage pool that the flow at
/// `slot + PREFETCH_AHEAD` (fetched `PREFETCH_AHEAD` sockets ago) stages its next sample in,
/// with, when that sample fills the stage, the end of the flow's list of blocks.
/// Flows are kept in walk order, so those are likely the sockets due then. Without this,
/// each changed socket waited on cache misses in a row (the flow, then where its sample
/// goes), most of its cost.
///
/// Only for flows whose last sample changed ([`Hot::changed`]): a flow that changed is
/// likely to change again (a transfer goes on), and an idle one not. Every socket looks
/// ahead, busy or not, so a host where a tenth of the flows are busy still gets the busy ones
/// fetched (looking ahead only from the changed path, as before, missed almost every busy
/// flow when few were busy); but only in dumps after one where enough samples changed
/// ([`LOOKAHEAD_SHARE`]), so a host of idle flows pays nothing.
#[inline]
fn prefetch_ahead(slab: &[Flow], hot: &[Hot], stages: &StagePool, slot: usize) {
    let changed = |i: usize| hot.get(i).is_some_and(|h| h.changed);
    if changed(slot + 2 * PREFETCH_AHEAD) {
        prefetch_flow(slab, slot + 2 * PREFETCH_AHEAD);
    }
    if let Some(f) = slab.get(slot + PREFETCH_AHEAD).filter(|_| changed(slot + PREFETCH_AHEAD)) {
        // Where its next sample goes (anywhere for a flow with no stage yet). A sample is 48
        // bytes: it may span two lines.
        let at = stages.slots.addr(f.stage.idx);
        let at = at.wrapping_add(usize::from(f.stage.staged) * size_of::<Retained>());
        prefetch_line(at);
        prefetch_line(at.wrapping_add(size_of::<Retained>() - 1));
        // A sample that fills the stage also writes the number of the block it moves to
        // into the flow's list of blocks, a heap allocation of its own, cold by then
        // (`cargo bench --bench tracker`; benches/RESULTS.md, D3). Fetching the stage's
        // older lines too, to be copied with it, gained nothing more.
        if usize::from(f.stage.staged) == STAGED - 1
            && let Some(room) = f.stage.room.as_deref()
        {
            prefetch_line(room.as_ptr().wrapping_add(f.stage.full_len as usize).cast::<i8>());
        }
    }
}

/// Asks the CPU to fetch the lines of the flow at `slot` that a changed sample writes
/// (see [`Flow`]'s layout); `slot` may be past the end.
#[inline]
fn prefetch_flow(slab: &[Flow], slot: usize) {
    let at = slab.as_ptr().wrapping_add(slot).cast::<i8>();
    for line in (0..std::mem::offset_of!(Flow, samples)).step_by(64) {
        prefetch_line(at.wrapping_add(line));
    }
}

/// Asks the CPU to fetch the cache line holding `at` (nothing on other architectures). Any
/// address will do: the callers compute addresses past a table's end, or from a flow with no
/// stage, rather than branch.
#[inline(always)]
fn prefetch_line(at: *const i8) {
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
    // SAFETY: a prefetch is a hint; it never faults and has no effect on memory, whatever
    // the address.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at)
    };
}

/// The socket's 4-tuple and family equal the flow's (the cookie already matched).
fn same_socket(k: &SockKey, s: &Sample<'_>) -> bool {
    let m = s.msg();
    k.sport == m.sport()
        && k.dport == m.dport()
        && k.family == m.family()
        && k.src == *m.src_raw()
        && k.dst == *m.dst_raw()
}

/// The congestion control, read only when a sample is retained: it rarely changes, so the
/// raw attribute is compared with the name held first, and the NUL looked for only when they
/// differ, which is cheaper per changed socket (benches/RESULTS.md, D4).
fn refresh_attrs(f: &mut Flow, s: &Sample<'_>) {
    if let Some(raw) = s.cong_raw()
        && raw != u128::from_le_bytes(f.cc.0)
    {
        f.cc = CcName(nul_terminated(raw).to_le_bytes());
    }
}

impl Tracker {
    /// An empty table.
    pub fn new(cfg: TrackerConfig) -> Self {
        let cfg = TrackerConfig { window_samples: cfg.window_samples.max(2), ..cfg };
        Self {
            cfg,
            index: FxHashMap::default(),
            slab: Vec::new(),
            hot: Vec::new(),
            stages: StagePool::default(),
            cursor: 0,
            refused: FxHashMap::default(),
            carried: Vec::new(),
            destroyed: FxHashMap::default(),
            waiting: FxHashMap::default(),
            wait_order: std::collections::VecDeque::new(),
            gone: rustc_hash::FxHashSet::default(),
            gone_order: std::collections::VecDeque::new(),
            generation: 0,
            dumps_done: 0,
            lookahead: false,
            at_begin: (0, 0),
            seen_now: 0,
            stats: TrackerStats::default(),
            accounts: accounts::Accounts::default(),
            hot_set: tiers::HotSet::default(),
            netns: 0,
            flow_netns: FxHashMap::default(),
            labels: Vec::new(),
        }
    }

    /// Traffic per (cgroup, listening port).
    pub fn accounts(&self) -> &accounts::Accounts {
        &self.accounts
    }

    /// Flows being recorded now.
    pub fn active(&self) -> usize {
        self.slab.len()
    }

    /// Flows absent from the dumps that wait for their destroy event.
    pub fn awaiting_destroy(&self) -> usize {
        self.waiting.len()
    }

    /// Whether the flow limit is reached: flows waiting for their destroy event count too.
    fn full(&self) -> bool {
        self.cfg.max_flows > 0 && self.slab.len() + self.waiting.len() >= self.cfg.max_flows
    }

    /// Counters.
    pub fn stats(&self) -> TrackerStats {
        self.stats
    }

    /// The host view ([`views::Overview`]): the flows `offset..offset + limit` in `order`,
    /// largest first, each with its `keep` newest samples, and every flow briefly. Only
    /// the page's flows are copied; the others are read in place.
    pub fn overview(
        &self,
        order: views::Order,
        offset: usize,
        limit: usize,
        keep: usize,
        netns: Option<u32>,
    ) -> views::Overview {
        let mut keyed: Vec<(u64, u32)> = Vec::with_capacity(self.hot.len());
        let mut all = Vec::with_capacity(self.hot.len());
        for (slot, (f, h)) in self.slab.iter().zip(&self.hot).enumerate() {
            if netns.is_some_and(|n| self.netns_of(h.cookie) != n) {
                continue;
            }
            let latest = self.stages.latest(f);
            let l = &f.last;
            let rtt_us = latest.map_or(0, |r| r.rtt_us);
            let key = match order {
                views::Order::Rate => latest.map_or(0, |r| r.delivery_rate().wrapping_add(1)),
                views::Order::Rtt => u64::from(rtt_us),
                views::Order::Retrans => u64::from(l.total_retrans),
                views::Order::Age => u64::MAX - f.first_ts_ns,
            };
            keyed.push((key, slot as u32));
            let [b0, r0, s0] = f.first_chrono;
            all.push(views::Brief {
                slot: f.counted.slot,
                rtt_us,
                chrono_ms: (l.busy_ms != u32::MAX).then(|| {
                    [
                        l.busy_ms.saturating_sub(b0),
                        l.rwnd_limited_ms.saturating_sub(r0),
                        l.sndbuf_limited_ms.saturating_sub(s0),
                    ]
                }),
                span_ms: h.last_ts_ns.saturating_sub(f.first_ts_ns) / 1_000_000,
            });
        }
        // Largest first; ties by slot, so a page is stable between two requests.
        let cmp = |a: &(u64, u32), b: &(u64, u32)| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
        let end = offset.saturating_add(limit).min(keyed.len());
        if end < keyed.len() && end > 0 {
            keyed.select_nth_unstable_by(end - 1, cmp);
        }
        keyed.truncate(end);
        keyed.sort_unstable_by(cmp);
        let page: Vec<Flow> = keyed
            .iter()
            .skip(offset)
            .map(|&(_, slot)| self.view_slot(slot as usize, keep))
            .collect();
        let netns = page.iter().map(|f| self.netns_of(f.key.cookie)).collect();
        views::Overview { page, netns, all }
    }

    /// A copy of the active flow `cookie` with its `keep` newest samples (and its
    /// `Samples` count in `stage.window`), found by its index; nothing else is touched.
    pub fn view_one(&self, cookie: u64, keep: usize) -> Option<Flow> {
        let slot = *self.index.get(&cookie)? as usize;
        Some(self.view_slot(slot, keep))
    }

    /// The active flows with a cookie above `after`, the `limit` smallest in cookie order
    /// (a stable order for paging), each with its `keep` newest samples; and how many flows
    /// are active in all. Only the flows on the page are copied.
    /// With `netns`, only the flows of that namespace count, on the page and in all.
    pub fn view_page(
        &self,
        after: Option<u64>,
        limit: usize,
        keep: usize,
        netns: Option<u32>,
    ) -> (Vec<Flow>, usize) {
        let in_ns = |c: u64| netns.is_none_or(|n| self.netns_of(c) == n);
        let total = match netns {
            Some(_) => self.hot.iter().filter(|h| in_ns(h.cookie)).count(),
            None => self.hot.len(),
        };
        let mut cookies: Vec<u64> = self
            .hot
            .iter()
            .map(|h| h.cookie)
            .filter(|&c| after.is_none_or(|a| c > a) && in_ns(c))
            .collect();
        if cookies.len() > limit {
            cookies.select_nth_unstable(limit);
            cookies.truncate(limit);
        }
        cookies.sort_unstable();
        let page = cookies
            .iter()
            .filter_map(|c| self.index.get(c))
            .map(|&slot| self.view_slot(slot as usize, keep))
            .collect();
        (page, total)
    }

    fn view_slot(&self, slot: usize, keep: usize) -> Flow {
        let (f, h) = (&self.slab[slot], &self.hot[slot]);
        let mut v = views::header(f);
        sync(&mut v, h);
        v.stage.window = f.stage.window.max(f.samples.len() as u32);
        v.samples = self.stages.newest(f, keep);
        v
    }

    /// The active flows, brought up to date with their latest samples.
    pub fn flows(&mut self) -> impl Iterator<Item = &Flow> {
        for (f, h) in self.slab.iter_mut().zip(&self.hot) {
            self.stages.flush(f);
            sync(f, h);
        }
        self.slab.iter()
    }

    /// Starts a dump: sockets observed until [`end_dump`](Self::end_dump) belong to it.
    pub fn begin_dump(&mut self) {
        self.stages.blocks.reclaim();
        let (retained, deduped) = (self.stats.samples_retained, self.stats.samples_deduped);
        let changed = retained - self.at_begin.0;
        let seen = changed + deduped - self.at_begin.1;
        self.lookahead = changed > 0 && changed * LOOKAHEAD_SHARE >= seen;
        self.at_begin = (retained, deduped);
        self.seen_now = 0;
        self.carried.clear();
        self.generation = self.generation.wrapping_add(1);
        self.cursor = 0;
    }

    /// The current dump leaves namespace `ns` unwalked: nothing was sent or received in it
    /// since its last walk, so its flows stand as they were (none ends on this dump), and
    /// so do its listeners and refusals.
    pub fn carry_netns(&mut self, ns: u32) {
        if !self.carried.contains(&ns) {
            self.carried.push(ns);
        }
    }

    /// The slot of `cookie`'s flow, moving it to the cursor when it is found elsewhere ahead,
    /// so that the next dump, walking in the same order, finds it there.
    fn find(&mut self, cookie: u64) -> Option<usize> {
        let c = self.cursor;
        if self.hot.get(c).is_some_and(|h| h.cookie == cookie) {
            self.cursor = c + 1;
            return Some(c);
        }
        let j = *self.index.get(&cookie)? as usize;
        if j > c {
            self.swap_slots(j, c);
            self.cursor = c + 1;
            return Some(c);
        }
        Some(j)
    }

    fn swap_slots(&mut self, a: usize, b: usize) {
        self.slab.swap(a, b);
        self.hot.swap(a, b);
        for i in [a, b] {
            *self.index.get_mut(&self.hot[i].cookie).expect("every slot is indexed") = i as u32;
        }
    }

    /// One socket of the current dump. Interim records (window cuts) go to `out`.
    pub fn observe(&mut self, s: &Sample<'_>, out: &mut Vec<EndedFlow>) {
        if s.msg().state() == tcp::LISTEN {
            // Listeners start no flow; they name the server side's port in the accounts.
            self.accounts.saw_listener(self.netns, s.msg().sport(), s.cgroup_id().unwrap_or(0));
            return;
        }
        let cookie = s.msg().cookie();
        let generation = self.generation;
        let Some(t) = s.tcp_info() else {
            // TIME-WAIT and SYN-RECV minisockets carry no tcp_info: they keep a known
            // flow alive but never start one.
            if let Some(slot) = self.find(cookie) {
                let f = &mut self.slab[slot];
                if same_socket(&f.key, s) {
                    let h = &mut self.hot[slot];
                    self.seen_now += usize::from(h.seen_gen != generation);
                    h.seen_gen = generation;
                    h.max_gap_us = h.max_gap_us.max(gap_us(h.last_ts_ns, s.ts_ns));
                    h.last_ts_ns = s.ts_ns;
                    f.last.state = s.msg().state();
                }
            }
            return;
        };
        let fp = fingerprint(s, &t);
        if let Some(slot) = self.find(cookie) {
            if self.lookahead {
                prefetch_ahead(&self.slab, &self.hot, &self.stages, slot);
            }
            let h = &mut self.hot[slot];
            self.seen_now += usize::from(h.seen_gen != generation);
            h.seen_gen = generation;
            self.sampled(slot, s, &t, fp, out);
            return;
        }
        if let Some((g, _)) = self.refused.get_mut(&cookie) {
            *g = generation;
            return;
        }
        if self.destroyed.contains_key(&cookie) {
            return;
        }
        if let Some(w) = self.waiting.remove(&cookie) {
            // A socket that left the dumps is back: it connected again (after a refused or
            // reset connection). The old connection is over; the new one is a new flow.
            self.hand_on(w.flow, w.rest, EndReason::Gone, w.missed_ns, None, out);
        }
        if self.full() {
            self.refused.insert(cookie, (generation, self.netns));
            self.stats.flows_refused += 1;
            return;
        }
        let sn = snap(s, &t);
        let f = self.open(s, &sn, self.dumps_done == 0, Seen::Dump);
        let hot = Hot {
            cookie,
            fp,
            last_ts_ns: s.ts_ns,
            seen_gen: generation,
            deduped: 0,
            tuple: tuple_hash(s),
            options: sn.options,
            changed: true,
            tiered: self.cfg.tiers && self.dumps_done > 0,
            max_gap_us: 0,
            exact: 0,
        };
        if self.cfg.tiers && self.dumps_done > 0 {
            // A new connection starts hot; it leaves the hot set if it stays still. Flows
            // of the first dump were open before we started: whether they move, the
            // second dump tells.
            self.hot_set.add(cookie, SocketTarget::of(&s.msg()), s.ts_ns, self.netns);
        }
        self.index.insert(cookie, self.slab.len() as u32);
        if self.slab.len() == self.slab.capacity() {
            // Grow by a quarter, not Vec's doubling: at 20,000 flows doubling reserved
            // 32,768 slots of 288 + 32 bytes, 12,768 of them unused. Large reallocations
            // are remapped by the allocator, not copied.
            let extra = (self.slab.capacity() / 4).max(64);
            self.slab.reserve_exact(extra);
            self.hot.reserve_exact(extra);
        }
        self.slab.push(f);
        self.hot.push(hot);
        self.seen_now += 1;
    }

    /// A sample of the flow in `slot` (from a dump or an exact poll): deduped when nothing
    /// the analysis keeps changed, else retained. Interim records (window cuts) go to `out`.
    fn sampled(
        &mut self,
        slot: usize,
        s: &Sample<'_>,
        t: &TcpInfo<'_>,
        fp: u64,
        out: &mut Vec<EndedFlow>,
    ) {
        let h = &mut self.hot[slot];
        h.max_gap_us = h.max_gap_us.max(gap_us(h.last_ts_ns, s.ts_ns));
        h.last_ts_ns = s.ts_ns;
        h.options |= t.options().unwrap_or(0);
        h.changed = fp != h.fp;
        if !h.changed {
            h.deduped += 1;
            self.stats.samples_deduped += 1;
            return;
        }
        // Its flow's lines are needed now; fetch them while the sample is read.
        prefetch_flow(&self.slab, slot);
        if tuple_hash(s) != h.tuple {
            // Same cookie, other tuple: a socket reconnected after a failed connect.
            // Keep the flow as it was; the new destination is not this flow.
            self.stats.tuple_conflicts += 1;
            return;
        }
        h.fp = fp;
        if self.cfg.tiers && !h.tiered {
            // It moves: poll it every tick from now on (tracker/tiers.rs).
            h.tiered = true;
            self.hot_set.add(h.cookie, SocketTarget::of(&s.msg()), s.ts_ns, self.netns);
        }
        let f = &mut self.slab[slot];
        let at = self.stages.next_slot(&mut f.stage);
        decode_into(at, &mut f.last, s, t);
        let edge = *at;
        self.stages.commit(&mut f.stage);
        Self::account(f, edge.rtt_us, &mut self.stats, &mut self.accounts);
        refresh_attrs(f, s);
        if f.stage.window as usize >= self.cfg.window_samples {
            let held = self.stages.detach(f);
            sync(f, h);
            let mut e = Self::cut_window(f, edge, Rest { held, sampling: h.sampling() });
            e.netns = label_of(&self.labels, &self.flow_netns, h.cookie);
            // The edge sample stays held: it also begins the next window.
            self.stats.samples_handed_on += e.sample_count() as u64 - 1;
            out.push(e);
            h.deduped = 0;
            (h.max_gap_us, h.exact) = (0, 0);
            h.options = t.options().unwrap_or(0);
            self.stats.flows_ended += 1;
        }
    }

    fn open(&mut self, s: &Sample<'_>, sn: &Snap, partial_start: bool, seen: Seen) -> Flow {
        self.stats.flows_opened += 1;
        self.stats.samples_retained += 1;
        let passive_open = self.accounts.is_listening(self.netns, s.msg().sport());
        let mut f = Flow {
            passive_open,
            key: s.key(),
            cc: CcName::default(),
            stage: StageRef { window: 1, ..StageRef::NONE },
            cgroup_id: s.cgroup_id().unwrap_or(0),
            seq: 0,
            partial_start,
            preexisting: partial_start,
            first_ts_ns: sn.retained.ts_ns,
            last_ts_ns: sn.retained.ts_ns,
            first_bytes_acked: sn.last.bytes_acked,
            first_bytes_received: sn.last.bytes_received,
            options: sn.options,
            deduped: 0,
            last: sn.last,
            samples: vec![sn.retained],
            counted: accounts::Counted::default(),
            first_chrono: [l_busy(&sn.last), sn.last.rwnd_limited_ms, sn.last.sndbuf_limited_ms],
        };
        refresh_attrs(&mut f, s);
        // Destroy events carry no cgroup id. An accepted socket is in its listener's cgroup
        // (the kernel copies it at accept), so a flow seen only at its end still has one
        // when its local port listens; otherwise its account goes by the socket's uid
        // (docs/records.md, "Which service a flow belongs to").
        if f.cgroup_id == 0 {
            f.cgroup_id = self.accounts.listener_cgroup(self.netns, f.key.sport);
        }
        // A destroy event's uid 0 tells nothing: the kernel reports root for every socket
        // its program has already closed, which is every destroyed one (measured on 6.18).
        let uid =
            (f.cgroup_id == 0).then(|| s.msg().uid()).filter(|&u| u != 0 || seen == Seen::Dump);
        // A flow open before we started counts from here; a new one from its first byte.
        let l = &sn.last;
        f.counted.slot = self.accounts.slot(self.netns, f.cgroup_id, f.key.sport, uid);
        if self.netns != 0 {
            // Kept aside, not in the flow (whose lines are full): a socket cookie is unique
            // host-wide, across namespaces (docs/kernel.md).
            self.flow_netns.insert(f.key.cookie, self.netns);
        }
        if partial_start {
            (f.counted.acked, f.counted.received, f.counted.retrans) =
                (l.bytes_acked, l.bytes_received, l.bytes_retrans);
        }
        self.accounts.count(&mut f.counted, l.bytes_acked, l.bytes_received, l.bytes_retrans);
        let a = self.accounts.get_mut(f.counted.slot);
        a.opened += 1;
        a.observe_rtt(sn.retained.rtt_us);
        f
    }

    /// Counts a retained sample, whose values [`decode_into`] has written over the flow's
    /// latest ones, into the stats and the flow's account.
    fn account(f: &mut Flow, rtt_us: u32, stats: &mut TrackerStats, acc: &mut accounts::Accounts) {
        stats.samples_retained += 1;
        let l = &f.last;
        acc.count_sample(&mut f.counted, l.bytes_acked, l.bytes_received, l.bytes_retrans, rtt_us);
    }

    /// Hands on the current window and starts the next with the sample that filled it, so
    /// consecutive windows share an edge and no interval is lost.
    fn cut_window(f: &mut Flow, edge: Retained, rest: Rest) -> EndedFlow {
        let l = &f.last;
        let first_chrono = [l_busy(l), l.rwnd_limited_ms, l.sndbuf_limited_ms];
        let mut next = Flow {
            first_chrono,
            seq: f.seq + 1,
            partial_start: true,
            first_ts_ns: edge.ts_ns,
            first_bytes_acked: f.last.bytes_acked,
            first_bytes_received: f.last.bytes_received,
            deduped: 0,
            samples: vec![edge],
            ..f.clone_header()
        };
        next.stage.window = 1;
        let mut done = std::mem::replace(f, next);
        done.stage = StageRef::NONE; // detached by the caller; the stage stays with `f`
        EndedFlow {
            end_ts_ns: edge.ts_ns,
            flow: done,
            reason: EndReason::Window,
            close: None,
            sampling: rest.sampling,
            netns: None,
            held: rest.held,
            unresolved: None,
        }
    }

    /// Takes a flow out of the table, brought up to date, with its samples still in pool
    /// blocks (see [`StagePool::detach`]).
    fn remove(&mut self, cookie: u64) -> Option<(Flow, Rest)> {
        let slot = self.index.remove(&cookie)? as usize;
        let mut f = self.slab.swap_remove(slot);
        let h = self.hot.swap_remove(slot);
        if h.seen_gen == self.generation {
            self.seen_now -= 1;
        }
        if let Some(moved) = self.hot.get(slot) {
            *self.index.get_mut(&moved.cookie).expect("every slot is indexed") = slot as u32;
        }
        let held = self.stages.release(&mut f);
        sync(&mut f, &h);
        Some((f, Rest { held, sampling: h.sampling() }))
    }

    /// Ends the current dump. When `complete`, flows it did not hold end (reason Gone, at
    /// `dump_ts_ns`), or, with a destroy grace period, begin to wait for their destroy event;
    /// otherwise nothing ends and the dump is counted as incomplete. Either way, flows that
    /// have waited out the grace period end as Gone.
    pub fn end_dump(&mut self, complete: bool, dump_ts_ns: u64, out: &mut Vec<EndedFlow>) {
        self.dumps_done = self.dumps_done.saturating_add(1);
        let generation = self.generation;
        if !complete {
            self.stats.incomplete_dumps += 1;
            self.expire_waits(dump_ts_ns, out);
            return;
        }
        self.accounts.end_dump(&self.carried);
        self.accounts.mark_rates(dump_ts_ns);
        let all_seen = self.seen_now == self.hot.len();
        debug_assert_eq!(all_seen, self.hot.iter().all(|h| h.seen_gen == generation));
        // Usually every flow was seen: then the table need not be read again.
        let gone: Vec<u64> = if all_seen {
            Vec::new()
        } else {
            let (carried, netns) = (&self.carried, &self.flow_netns);
            let walked =
                |c: &u64| carried.is_empty() || !carried.contains(netns.get(c).unwrap_or(&0));
            self.hot
                .iter()
                .filter(|h| h.seen_gen != generation)
                .map(|h| h.cookie)
                .filter(walked)
                .collect()
        };
        for cookie in gone {
            self.missed(cookie, dump_ts_ns, out);
        }
        if self.cfg.tiers {
            self.refresh_hot_set(dump_ts_ns);
        }
        self.expire_waits(dump_ts_ns, out);
        self.bound_samples(out);
        let carried = &self.carried;
        self.refused.retain(|_, (g, ns)| *g == generation || carried.contains(ns));
        // A dump that started after a destroy cannot hold that socket any more.
        self.destroyed.retain(|_, g| generation.wrapping_sub(*g) < 2);
    }

    /// The flow of `cookie` is no longer in the kernel's tables (a complete dump missed it,
    /// or an exact poll found it gone at `ts_ns`): it ends as Gone, or waits for its destroy
    /// event.
    fn missed(&mut self, cookie: u64, ts_ns: u64, out: &mut Vec<EndedFlow>) {
        let Some((f, rest)) = self.remove(cookie) else { return };
        if self.cfg.destroy_grace_ns == 0 {
            let close = gone_close(&f);
            self.hand_on(f, rest, EndReason::Gone, ts_ns, close, out);
        } else {
            // The kernel unhashes a reset or aborted socket at once, but destroys it (and
            // sends its final counters) only when its owner closes it.
            self.waiting.insert(cookie, Waiting { flow: f, rest, missed_ns: ts_ns });
            self.wait_order.push_back(cookie);
        }
    }

    /// Ends, as Gone, the flows that have waited `destroy_grace_ns` or longer by `now_ns`.
    fn expire_waits(&mut self, now_ns: u64, out: &mut Vec<EndedFlow>) {
        while let Some(&cookie) = self.wait_order.front() {
            let Some(w) = self.waiting.get(&cookie) else {
                self.wait_order.pop_front(); // it stopped waiting
                continue;
            };
            if now_ns.saturating_sub(w.missed_ns) < self.cfg.destroy_grace_ns {
                break;
            }
            self.wait_order.pop_front();
            let w = self.waiting.remove(&cookie).expect("looked up just above");
            self.stats.destroy_wait_expired += 1;
            self.remember_gone(cookie);
            let close = gone_close(&w.flow);
            self.hand_on(w.flow, w.rest, EndReason::Gone, w.missed_ns, close, out);
        }
    }

    /// Keeps `cookie` among the flows written as gone, forgetting the oldest past
    /// [`LATE_COOKIES`].
    fn remember_gone(&mut self, cookie: u64) {
        if self.gone.insert(cookie) {
            self.gone_order.push_back(cookie);
        }
        while self.gone_order.len() > LATE_COOKIES {
            if let Some(old) = self.gone_order.pop_front() {
                self.gone.remove(&old);
            }
        }
    }

    /// A destroy event: the socket's final state. Ends its flow (waiting or active), or
    /// records a flow that lived entirely between two polls. An event for a flow already
    /// written as gone is counted, not written.
    pub fn destroyed(&mut self, s: &Sample<'_>, out: &mut Vec<EndedFlow>) {
        let key = s.key();
        self.stats.destroy_events += 1;
        if self.refused.remove(&key.cookie).is_some() {
            return;
        }
        if key.dport == 0 {
            self.disconnected(key.cookie, s.ts_ns, out);
            return;
        }
        let Some(t) = s.tcp_info() else { return };
        if self.destroyed.contains_key(&key.cookie) {
            self.stats.destroy_late += 1; // its flow already ended on an event
            return;
        }
        // By cookie alone: a socket's cookie is unique and stable, while its 4-tuple is
        // reused at once after a reset. Matching by 4-tuple merged a new connection's event
        // into an old waiting flow (2 of 39,752 sockets in the churn test), which then came
        // back as a second record.
        if let Some(mut w) = self.waiting.remove(&key.cookie) {
            let cookie = key.cookie;
            self.stats.destroy_awaited += 1;
            // The connection ended before the dump that missed it; the socket only lingered
            // until its owner closed it. Its final counters belong to that time, so the
            // sampled span (and the throughputs) do not take in the lingering.
            let end = w.missed_ns.min(s.ts_ns);
            self.final_sample(&mut w.flow, s, &t, end);
            w.rest.sampling.event = true;
            let close = Some(Close::from_final(&w.flow.last, w.flow.passive_open));
            self.destroyed.insert(cookie, self.generation);
            self.hand_on(w.flow, w.rest, EndReason::Destroyed, end, close, out);
            return;
        }
        let (f, mut rest, fresh) = match self.index.get(&key.cookie).map(|&i| i as usize) {
            Some(slot) if same_socket(&self.slab[slot].key, s) => {
                let same = fingerprint(s, &t) == self.hot[slot].fp;
                let (mut f, rest) = self.remove(key.cookie).expect("indexed just above");
                if same {
                    f.last_ts_ns = s.ts_ns;
                    f.options |= t.options().unwrap_or(0);
                    f.deduped += 1;
                    self.stats.samples_deduped += 1;
                } else {
                    self.final_sample(&mut f, s, &t, s.ts_ns);
                }
                (f, rest, false)
            }
            Some(_) => return, // another socket owns the cookie's flow; not ours to end
            None if self.gone.contains(&key.cookie) => {
                self.stats.destroy_late += 1;
                return;
            }
            None => {
                if self.full() {
                    self.stats.flows_refused += 1;
                    return;
                }
                // Seen only in its destroy event. Before the first dump it may have been
                // open before we started.
                let f = self.open(s, &snap(s, &t), self.dumps_done == 0, Seen::Destroy);
                (f, Rest::default(), true)
            }
        };
        // Seen only now, on a port not known to listen: the listener may have started
        // since the last full dump. Which side this was waits for a listeners' dump at the
        // next tick (`resolve_sides`), so neither its close nor its service depends on when
        // the listener was first seen.
        let unresolved = (fresh && !f.passive_open).then_some(self.netns);
        let close = match unresolved {
            Some(_) => None,
            None => Some(Close::from_final(&f.last, f.passive_open)),
        };
        self.destroyed.insert(key.cookie, self.generation);
        rest.sampling.event = true;
        let before = out.len();
        self.hand_on(f, rest, EndReason::Destroyed, s.ts_ns, close, out);
        if out.len() > before
            && let Some(e) = out.last_mut()
        {
            e.unresolved = unresolved;
        }
    }

    /// True when some flow in `out` waits to learn which side it was (see
    /// [`resolve_sides`](Self::resolve_sides)).
    pub fn any_unresolved(out: &[EndedFlow]) -> bool {
        out.iter().any(|e| e.unresolved.is_some())
    }

    /// A listening socket from a listeners' dump ([`crate::sampler::Sampler::listeners_with`])
    /// of the current namespace.
    pub fn observe_listener(&mut self, s: &Sample<'_>) {
        if s.msg().state() == tcp::LISTEN {
            self.accounts.saw_listener(self.netns, s.msg().sport(), s.cgroup_id().unwrap_or(0));
        }
    }

    /// Decides the side of each flow in `out` that was seen only in its destroy event on a
    /// port then unknown to listen, now that a listeners' dump (or none, when it failed)
    /// has been taken: a port that listens makes it the accepted side, with its listener's
    /// cgroup; otherwise the side stays unknown, and so does its close unless its counters
    /// tell it either way ([`Close::from_final_either_side`]).
    pub fn resolve_sides(&mut self, out: &mut [EndedFlow]) {
        for e in out.iter_mut() {
            let Some(ns) = e.unresolved.take() else { continue };
            let f = &mut e.flow;
            if self.accounts.is_listening(ns, f.key.sport) {
                f.passive_open = true;
                if f.cgroup_id == 0 {
                    f.cgroup_id = self.accounts.listener_cgroup(ns, f.key.sport);
                }
                e.close = Some(Close::from_final(&f.last, true));
            } else {
                e.close = Close::from_final_either_side(&f.last);
            }
        }
    }

    /// A destroy event with remote port 0: a listener, or a socket the kernel disconnected
    /// before destroying it (an abortive close with `SO_LINGER` 0, a failed connect), which
    /// clears its peer and its counters. Only a flow already followed by that cookie ends on
    /// it, as reset, with the counters of its last sample; anything else is ignored.
    fn disconnected(&mut self, cookie: u64, ts_ns: u64, out: &mut Vec<EndedFlow>) {
        let (f, rest, end) = if let Some(w) = self.waiting.remove(&cookie) {
            self.stats.destroy_awaited += 1;
            (w.flow, w.rest, w.missed_ns)
        } else if self.index.contains_key(&cookie) {
            let (f, rest) = self.remove(cookie).expect("indexed just above");
            (f, rest, ts_ns)
        } else {
            return;
        };
        self.destroyed.insert(cookie, self.generation);
        self.hand_on(f, rest, EndReason::Destroyed, end, Some(Close::Reset), out);
    }

    /// Appends a destroy event's values to a flow taken out of the table, as its last
    /// sample at `ts_ns` (off the dump's hot path: straight into the flow's samples, after
    /// those still held in blocks).
    fn final_sample(&mut self, f: &mut Flow, s: &Sample<'_>, t: &TcpInfo<'_>, ts_ns: u64) {
        f.last_ts_ns = ts_ns.max(f.last_ts_ns);
        f.options |= t.options().unwrap_or(0);
        let mut r = Retained::default();
        decode_into(&mut r, &mut f.last, s, t);
        r.ts_ns = f.last_ts_ns;
        Self::account(f, r.rtt_us, &mut self.stats, &mut self.accounts);
        f.samples.push(r);
        refresh_attrs(f, s);
    }

    /// Shutdown: every active flow is handed on as partial (end not seen); flows still
    /// waiting for their destroy event end as Gone (their end was seen).
    pub fn finish(&mut self, out: &mut Vec<EndedFlow>) {
        let cookies: Vec<u64> = self.hot.iter().map(|h| h.cookie).collect();
        for c in cookies {
            if let Some((f, rest)) = self.remove(c) {
                let ts = f.last_ts_ns;
                self.hand_on(f, rest, EndReason::Shutdown, ts, None, out);
            }
        }
        while let Some(cookie) = self.wait_order.pop_front() {
            if let Some(w) = self.waiting.remove(&cookie) {
                let close = gone_close(&w.flow);
                self.hand_on(w.flow, w.rest, EndReason::Gone, w.missed_ns, close, out);
            }
        }
    }

    fn hand_on(
        &mut self,
        flow: Flow,
        rest: Rest,
        reason: EndReason,
        end_ts_ns: u64,
        close: Option<Close>,
        out: &mut Vec<EndedFlow>,
    ) {
        if reason != EndReason::Shutdown {
            self.accounts.get_mut(flow.counted.slot).closed += 1;
        }
        let Rest { held, sampling } = rest;
        let netns = label_of(&self.labels, &self.flow_netns, flow.key.cookie);
        self.flow_netns.remove(&flow.key.cookie);
        let e =
            EndedFlow { flow, reason, end_ts_ns, close, sampling, netns, held, unresolved: None };
        // Its samples leave the tracker either way: dropped or handed on.
        self.stats.samples_handed_on += e.sample_count() as u64;
        if self.cfg.min_samples > 0 && e.sample_count() < self.cfg.min_samples {
            self.stats.flows_too_short += 1;
            return; // its blocks go back
        }
        self.stats.flows_ended += 1;
        out.push(e);
    }

    /// Retained samples held now by the flows being tracked and those waiting.
    pub fn samples_held(&self) -> u64 {
        self.stats.samples_retained.saturating_sub(self.stats.samples_handed_on)
    }

    /// Keeps the samples held within `max_samples`: cuts the longest windows (each as an
    /// interim record, as at the window cap) until a tenth of the bound is free again.
    fn bound_samples(&mut self, out: &mut Vec<EndedFlow>) {
        let max = self.cfg.max_samples;
        if max == 0 || self.samples_held() <= max {
            return;
        }
        let mut by_len: Vec<(u32, usize)> =
            self.slab.iter().enumerate().map(|(i, f)| (f.stage.window, i)).collect();
        by_len.sort_unstable_by(|a, b| b.cmp(a));
        let goal = max - max / 10;
        for (len, slot) in by_len {
            if self.samples_held() <= goal || len < 2 {
                break;
            }
            let (f, h) = (&mut self.slab[slot], &mut self.hot[slot]);
            let Some(&edge) = self.stages.newest(f, 1).last() else { continue };
            let held = self.stages.detach(f);
            sync(f, h);
            let mut e = Self::cut_window(f, edge, Rest { held, sampling: h.sampling() });
            e.netns = label_of(&self.labels, &self.flow_netns, h.cookie);
            h.deduped = 0;
            (h.max_gap_us, h.exact) = (0, 0);
            // The edge sample stays held: it also begins the next window.
            self.stats.samples_handed_on += e.sample_count() as u64 - 1;
            self.stats.flows_ended += 1;
            self.stats.windows_cut_for_memory += 1;
            out.push(e);
        }
    }
}

/// How a flow that left the dumps without a destroy event closed: only a TIME-WAIT last
/// seen tells (both FINs were exchanged); anything else is unknown.
fn gone_close(f: &Flow) -> Option<Close> {
    (f.last.state == tcp::TIME_WAIT).then_some(Close::Clean)
}

/// Copies the hot fields into the flow.
fn sync(f: &mut Flow, h: &Hot) {
    f.last_ts_ns = h.last_ts_ns;
    f.deduped = h.deduped;
    f.options = h.options;
}

/// The label of the flow with `cookie`'s namespace, when several are sampled.
fn label_of(
    labels: &[Option<std::sync::Arc<crate::record::NetnsLabel>>],
    flow_netns: &FxHashMap<u64, u32>,
    cookie: u64,
) -> Option<std::sync::Arc<crate::record::NetnsLabel>> {
    labels.get(*flow_netns.get(&cookie).unwrap_or(&0) as usize).cloned().flatten()
}

/// `b − a` in µs, saturating: a gap between two samples.
fn gap_us(a: u64, b: u64) -> u32 {
    u32::try_from(b.saturating_sub(a) / 1000).unwrap_or(u32::MAX)
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
    fn clone_header(&mut self) -> Flow {
        let samples = std::mem::take(&mut self.samples);
        let header = self.clone();
        self.samples = samples;
        header
    }
}

pub mod accounts;
pub mod pace;
mod pool;
mod spaces;
pub mod task;
mod tiers;
pub mod views;

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
