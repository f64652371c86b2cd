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
//! - **Bounded memory.** A retained sample is a 48-byte [`Retained`]. At `window_samples`
//!   retained samples a flow emits an interim record and goes on in a fresh window, with the
//!   next sequence number.
//! - **Limits.** `max_flows` caps the flows being recorded. It counts recorded flows only, and
//!   a flow refused for the limit is counted and stays refused for its life (cgmon: B13).
//!   `min_samples` drops short flows, counted.

use rustc_hash::FxHashMap;

use crate::wire::sock::{Sample, SockKey};
use crate::wire::tcp_info::TcpInfo;

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
        Self { max_flows: 0, min_samples: 0, window_samples: 3600 }
    }
}

/// One retained sample: what the analysis needs of one poll, in 48 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Retained {
    /// CLOCK_MONOTONIC ns the sample's datagram arrived.
    pub ts_ns: u64,
    /// `snd_cwnd × snd_mss`, bytes, computed in u64 (cgmon wrapped it in u32: B9).
    pub cwnd_bytes: u64,
    /// Pacing rate, bytes/s; [`ABSENT_U64`] when unlimited or not sent.
    pub pacing_rate: u64,
    /// Delivery rate, bytes/s; [`ABSENT_U64`] when not sent.
    pub delivery_rate: u64,
    /// Smoothed RTT, µs.
    pub rtt_us: u32,
    /// RTT variance, µs.
    pub rttvar_us: u32,
    /// Cumulative retransmitted segments.
    pub total_retrans: u32,
    /// TCP state.
    pub state: u8,
}

/// Marks a rate the kernel did not give.
pub const ABSENT_U64: u64 = u64::MAX;

/// Values of the newest sample (retained or not): the flow's final counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Last {
    /// State.
    pub state: u8,
    /// tcpi_options.
    pub options: u8,
    /// `tcp_info` length the kernel sent (0 = none yet).
    pub info_len: u16,
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

/// A congestion-control algorithm name, stored inline (TCP_CA_NAME_MAX is 16).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CcName {
    len: u8,
    bytes: [u8; 15],
}

impl CcName {
    fn new(s: &str) -> Self {
        let b = s.as_bytes();
        let len = b.len().min(15);
        let mut bytes = [0u8; 15];
        bytes[..len].copy_from_slice(&b[..len]);
        Self { len: len as u8, bytes }
    }

    /// The name, or "" when unknown.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }
}

/// A tracked flow (or one window of it).
#[derive(Debug, Clone, PartialEq)]
pub struct Flow {
    /// Family, 4-tuple, cookie.
    pub key: SockKey,
    /// Congestion control, from the last dump that named it.
    pub cc: CcName,
    /// cgroup2 id, 0 when the kernel sent none.
    pub cgroup_id: u64,
    /// Window sequence number, from 0.
    pub seq: u32,
    /// Open before the monitor started (its start was not seen).
    pub partial_start: bool,
    /// Timestamp of the window's first sample.
    pub first_ts_ns: u64,
    /// Timestamp of the last sample seen, retained or not.
    pub last_ts_ns: u64,
    /// bytes_acked at the window's first sample.
    pub first_bytes_acked: u64,
    /// bytes_received at the window's first sample.
    pub first_bytes_received: u64,
    /// Option flags OR'd over every sample of the window.
    pub options: u8,
    /// Samples not retained because nothing the analysis uses changed.
    pub deduped: u32,
    /// The newest sample's values.
    pub last: Last,
    /// Retained samples, oldest first.
    pub samples: Vec<Retained>,
    /// Counters of the last retained sample that are compared but not retained.
    last_kept: (u64, u64, u64),
    seen_gen: u32,
}

/// A flow handed on for analysis.
#[derive(Debug, Clone, PartialEq)]
pub struct EndedFlow {
    /// The flow's (window's) data.
    pub flow: Flow,
    /// Why it ended.
    pub reason: EndReason,
    /// When: the destroy event's time, or the first datagram of the dump that missed it, or
    /// the last sample's time at shutdown and window ends.
    pub end_ts_ns: u64,
}

impl EndedFlow {
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
}

/// The flow table.
#[derive(Debug)]
pub struct Tracker {
    cfg: TrackerConfig,
    flows: FxHashMap<u64, Flow>,
    /// Cookies refused for `max_flows`, with the generation they were last seen in.
    refused: FxHashMap<u64, u32>,
    /// Cookies of flows ended by their destroy event, with that generation. A dump that was
    /// walking while the socket closed can still hold it; such samples must not reopen it.
    destroyed: FxHashMap<u64, u32>,
    generation: u32,
    dumps_done: u32,
    stats: TrackerStats,
}

/// Everything read from one sample, once.
struct Snap {
    retained: Retained,
    last: Last,
    cc: Option<CcName>,
    cgroup_id: Option<u64>,
}

fn snap(s: &Sample<'_>, t: &TcpInfo<'_>) -> Snap {
    let state = s.msg().state();
    let retained = Retained {
        ts_ns: s.ts_ns,
        cwnd_bytes: t.snd_cwnd_bytes().unwrap_or(0),
        pacing_rate: t.pacing_rate().unwrap_or(ABSENT_U64),
        delivery_rate: t.delivery_rate().unwrap_or(ABSENT_U64),
        rtt_us: t.rtt().unwrap_or(0),
        rttvar_us: t.rttvar().unwrap_or(0),
        total_retrans: t.total_retrans().unwrap_or(0),
        state,
    };
    let last = Last {
        state,
        options: t.options().unwrap_or(0),
        info_len: t.len().min(usize::from(u16::MAX)) as u16,
        min_rtt_us: t.min_rtt().unwrap_or(u32::MAX),
        total_retrans: retained.total_retrans,
        delivered: t.delivered().unwrap_or(0),
        delivered_ce: t.delivered_ce().unwrap_or(0),
        snd_mss: t.snd_mss().unwrap_or(0),
        max_pacing_rate: t.max_pacing_rate().unwrap_or(ABSENT_U64),
        bytes_acked: t.bytes_acked().unwrap_or(0),
        bytes_received: t.bytes_received().unwrap_or(0),
        bytes_sent: t.bytes_sent().unwrap_or(0),
        bytes_retrans: t.bytes_retrans().unwrap_or(0),
    };
    Snap { retained, last, cc: s.cong().map(CcName::new), cgroup_id: s.cgroup_id() }
}

impl Tracker {
    /// An empty table.
    pub fn new(cfg: TrackerConfig) -> Self {
        let cfg = TrackerConfig { window_samples: cfg.window_samples.max(2), ..cfg };
        Self {
            cfg,
            flows: FxHashMap::default(),
            refused: FxHashMap::default(),
            destroyed: FxHashMap::default(),
            generation: 0,
            dumps_done: 0,
            stats: TrackerStats::default(),
        }
    }

    /// Flows being recorded now.
    pub fn active(&self) -> usize {
        self.flows.len()
    }

    /// Counters.
    pub fn stats(&self) -> TrackerStats {
        self.stats
    }

    /// The active flows.
    pub fn flows(&self) -> impl Iterator<Item = &Flow> {
        self.flows.values()
    }

    /// Starts a dump: sockets observed until [`end_dump`](Self::end_dump) belong to it.
    pub fn begin_dump(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }

    /// One socket of the current dump. Interim records (window cuts) go to `out`.
    pub fn observe(&mut self, s: &Sample<'_>, out: &mut Vec<EndedFlow>) {
        let key = s.key();
        let generation = self.generation;
        let Some(t) = s.tcp_info() else {
            // TIME-WAIT and SYN-RECV minisockets carry no tcp_info: they keep a known
            // flow alive but never start one.
            if let Some(f) = self.flows.get_mut(&key.cookie).filter(|f| f.key == key) {
                f.seen_gen = generation;
                f.last_ts_ns = s.ts_ns;
                f.last.state = s.msg().state();
            }
            return;
        };
        match self.flows.get_mut(&key.cookie) {
            Some(f) if f.key == key => {
                f.seen_gen = generation;
                let sn = snap(s, &t);
                if Self::apply(f, &sn, &mut self.stats)
                    && f.samples.len() >= self.cfg.window_samples
                {
                    out.push(Self::cut_window(f, sn.retained));
                    self.stats.flows_ended += 1;
                }
            }
            Some(_) => {
                // Same cookie, other tuple: cookies are unique per network namespace, so
                // this is another namespace's socket. Keep the first; count the other.
                self.stats.flows_refused += 1;
            }
            None => {
                if let Some(g) = self.refused.get_mut(&key.cookie) {
                    *g = generation;
                    return;
                }
                if self.destroyed.contains_key(&key.cookie) {
                    return;
                }
                if self.cfg.max_flows > 0 && self.flows.len() >= self.cfg.max_flows {
                    self.refused.insert(key.cookie, generation);
                    self.stats.flows_refused += 1;
                    return;
                }
                let f = self.open(key, &snap(s, &t), self.dumps_done == 0);
                self.flows.insert(key.cookie, f);
            }
        }
    }

    fn open(&mut self, key: SockKey, sn: &Snap, partial_start: bool) -> Flow {
        self.stats.flows_opened += 1;
        self.stats.samples_retained += 1;
        Flow {
            key,
            cc: sn.cc.unwrap_or_default(),
            cgroup_id: sn.cgroup_id.unwrap_or(0),
            seq: 0,
            partial_start,
            first_ts_ns: sn.retained.ts_ns,
            last_ts_ns: sn.retained.ts_ns,
            first_bytes_acked: sn.last.bytes_acked,
            first_bytes_received: sn.last.bytes_received,
            options: sn.last.options,
            deduped: 0,
            last: sn.last,
            samples: vec![sn.retained],
            last_kept: (sn.last.bytes_acked, sn.last.bytes_received, sn.last.bytes_sent),
            seen_gen: self.generation,
        }
    }

    /// Applies a sample to a flow; returns true when it was retained.
    fn apply(f: &mut Flow, sn: &Snap, stats: &mut TrackerStats) -> bool {
        f.last_ts_ns = sn.retained.ts_ns;
        f.options |= sn.last.options;
        f.last = sn.last;
        if let Some(cc) = sn.cc {
            f.cc = cc;
        }
        if let Some(id) = sn.cgroup_id {
            f.cgroup_id = id;
        }
        let kept = (sn.last.bytes_acked, sn.last.bytes_received, sn.last.bytes_sent);
        let prev = f.samples.last().copied().unwrap_or_default();
        let same = Retained { ts_ns: prev.ts_ns, ..sn.retained } == prev && kept == f.last_kept;
        if same {
            f.deduped += 1;
            stats.samples_deduped += 1;
            return false;
        }
        f.samples.push(sn.retained);
        f.last_kept = kept;
        stats.samples_retained += 1;
        true
    }

    /// Hands on the current window and starts the next with the sample that filled it, so
    /// consecutive windows share an edge and no interval is lost.
    fn cut_window(f: &mut Flow, edge: Retained) -> EndedFlow {
        let next = Flow {
            seq: f.seq + 1,
            partial_start: true,
            first_ts_ns: edge.ts_ns,
            first_bytes_acked: f.last.bytes_acked,
            first_bytes_received: f.last.bytes_received,
            options: f.last.options,
            deduped: 0,
            samples: vec![edge],
            ..f.clone_header()
        };
        let done = std::mem::replace(f, next);
        EndedFlow { end_ts_ns: edge.ts_ns, flow: done, reason: EndReason::Window }
    }

    /// Ends the current dump. When `complete`, flows it did not hold end (reason Gone, at
    /// `dump_ts_ns`); otherwise nothing ends and the dump is counted as incomplete.
    pub fn end_dump(&mut self, complete: bool, dump_ts_ns: u64, out: &mut Vec<EndedFlow>) {
        self.dumps_done = self.dumps_done.saturating_add(1);
        let generation = self.generation;
        if !complete {
            self.stats.incomplete_dumps += 1;
            return;
        }
        let gone: Vec<u64> =
            self.flows.iter().filter(|(_, f)| f.seen_gen != generation).map(|(&c, _)| c).collect();
        for cookie in gone {
            if let Some(f) = self.flows.remove(&cookie) {
                self.hand_on(f, EndReason::Gone, dump_ts_ns, out);
            }
        }
        self.refused.retain(|_, g| *g == generation);
        // A dump that started after a destroy cannot hold that socket any more.
        self.destroyed.retain(|_, g| generation.wrapping_sub(*g) < 2);
    }

    /// A destroy event: the socket's final state. Ends its flow, or records a flow that
    /// lived entirely between two polls.
    pub fn destroyed(&mut self, s: &Sample<'_>, out: &mut Vec<EndedFlow>) {
        let key = s.key();
        self.stats.destroy_events += 1;
        if self.refused.remove(&key.cookie).is_some() {
            return;
        }
        self.destroyed.insert(key.cookie, self.generation);
        let Some(t) = s.tcp_info() else { return };
        let sn = snap(s, &t);
        let f = match self.flows.remove(&key.cookie) {
            Some(mut f) if f.key == key => {
                Self::apply(&mut f, &sn, &mut self.stats);
                f
            }
            other => {
                if let Some(f) = other {
                    self.flows.insert(f.key.cookie, f); // another namespace's; keep it
                }
                if self.cfg.max_flows > 0 && self.flows.len() >= self.cfg.max_flows {
                    self.stats.flows_refused += 1;
                    return;
                }
                // Seen only in its destroy event. Before the first dump it may have been
                // open before we started.
                self.open(key, &sn, self.dumps_done == 0)
            }
        };
        self.hand_on(f, EndReason::Destroyed, s.ts_ns, out);
    }

    /// Shutdown: every active flow is handed on as partial (end not seen).
    pub fn finish(&mut self, out: &mut Vec<EndedFlow>) {
        let flows: Vec<Flow> = self.flows.drain().map(|(_, f)| f).collect();
        for f in flows {
            let ts = f.last_ts_ns;
            self.hand_on(f, EndReason::Shutdown, ts, out);
        }
    }

    fn hand_on(&mut self, f: Flow, reason: EndReason, end_ts_ns: u64, out: &mut Vec<EndedFlow>) {
        if self.cfg.min_samples > 0 && f.samples.len() < self.cfg.min_samples {
            self.stats.flows_too_short += 1;
            return;
        }
        self.stats.flows_ended += 1;
        out.push(EndedFlow { flow: f, reason, end_ts_ns });
    }
}

impl Flow {
    /// A copy of the identity and latest values, without samples (and without copying them).
    fn clone_header(&mut self) -> Flow {
        let samples = std::mem::take(&mut self.samples);
        let header = self.clone();
        self.samples = samples;
        header
    }
}

pub mod task;

#[cfg(test)]
mod tests;
