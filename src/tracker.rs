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
//!
//! Its rooms: this file holds the table and the path of an observed sample; `config` its
//! settings; `flow` the flow and what it ends as; `decode` a sample's values; `fingerprint`
//! dedup's hashes; `prefetch` the cache hints; `ending` how flows end; `views` what the HTTP
//! server asks between dumps. "Hot" names the tier of busy flows (`tiers`); a flow's per-sample fields
//! live in its `FlowHead`.

use rustc_hash::FxHashMap;

use cold::Body;
use decode::{Snap, decode_into, l_busy, refresh_attrs, snap};
use fingerprint::{fingerprint, same_socket, tuple_hash};
use flow::Rest;
pub use flow::{
    CcName, Close, EndReason, EndedFlow, Flow, Last, RECENT_TAU_S, RTO_TIME_ABSENT,
    RTO_TIME_SATURATED, Sampling,
};
use pool::STAGED;
use pool::StagePool;
pub use pool::StageRef;
use prefetch::{prefetch_ahead, prefetch_flow};

use crate::wire::inet_diag::SocketTarget;
use crate::wire::sock::Sample;
use crate::wire::tcp_info::TcpInfo;

pub use crate::record::{ABSENT_U64, INFINITE_SSTHRESH, Retained};
use crate::states::tcp;
pub use config::{DEFAULT_DESTROY_GRACE, LATE_COOKIES, MAX_DESTROY_GRACE, TrackerConfig};

/// How many flows ahead the changed path prefetches (see `prefetch_ahead`).
const PREFETCH_AHEAD: usize = 8;

/// A dump prefetches for busy flows when at least one sample in this many changed in the
/// dump before: looking ahead costs every socket a little, and saves a changed socket's
/// cache misses, which cost far more (`cargo bench --bench kept`; benches/RESULTS.md, D1).
const LOOKAHEAD_SHARE: u64 = 64;

/// Counters for the monitor's own metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrackerStats {
    /// Flows recorded.
    pub flows_opened: u64,
    /// Flow records handed on (windows included).
    pub flows_ended: u64,
    /// Flows refused for `max_flows`.
    pub flows_refused: u64,
    /// Connects that never established, recorded.
    pub attempts: u64,
    /// Connects that failed with their port cleared, not recorded: a filter was set.
    pub attempts_unported_filtered: u64,
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

/// The per-flow fields every sample touches, in an array parallel to the flows (48 bytes a
/// flow). A sample whose fingerprint equals the flow's is deduped without reading the flow
/// itself, which would cost a cache miss per socket per dump.
#[derive(Debug, Clone, Copy)]
struct FlowHead {
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
    /// [`PAUSED`] and [`QUEUED`], in one byte so that the head stays 48 bytes.
    marks: u8,
    /// It is in the hot set (`tiers`).
    tiered: bool,
    /// The longest gap between its samples in this window, µs.
    max_gap_us: u32,
    /// Exact polls' samples in this window.
    exact: u32,
}

/// [`FlowHead::marks`]: a pause ([`TrackerConfig::pause_ns`]) since its last retained sample.
const PAUSED: u8 = 1;
/// [`FlowHead::marks`]: its newest sample had bytes unread or unacknowledged
/// (`idiag_rqueue`, `idiag_wqueue`). A flow held by a slow reader or a shut window is not
/// idle however long its counters stand still (`views::IDLE_NS`). Set by every sample,
/// deduped or not.
const QUEUED: u8 = 2;

/// [`QUEUED`] when `s` has bytes waiting in either queue.
fn queued(s: &Sample<'_>) -> u8 {
    if s.msg().rqueue() != 0 || s.msg().wqueue() != 0 { QUEUED } else { 0 }
}

const _: () = assert!(size_of::<FlowHead>() == 48);

impl FlowHead {
    fn queued(&self) -> bool {
        self.marks & QUEUED != 0
    }

    fn sampling(&self) -> Sampling {
        Sampling { exact: self.exact, max_gap_us: self.max_gap_us, event: false }
    }
}

/// The flow table.
#[derive(Debug)]
pub struct Tracker {
    cfg: TrackerConfig,
    /// cookie → slot in `slab` and `hot`.
    index: index::Index,
    /// Each flow, whole or packed in `cold` (idle flows: `tracker/cold.rs`).
    slab: Vec<Body>,
    cold: cold::ColdStore,
    hot: Vec<FlowHead>,
    stages: StagePool,
    /// Where the next socket of the dump is expected. Flows are kept in the kernel's walk
    /// order (the same every dump): a socket is usually the one at the cursor.
    cursor: usize,
    /// Cookies refused for `max_flows`, with the generation they were last seen in and
    /// their namespace.
    refused: FxHashMap<u64, (u32, u32)>,
    /// Namespaces the current dump did not walk (nothing moved in them since their last
    /// walk): their flows, listeners and refusals stand as they were.
    carried: Vec<u32>,
    /// Cookies ended by their destroy event, with that generation: a dump walking while the
    /// socket closed may still hold it, and must not reopen it, only supply the port of a
    /// connect whose event cleared it under a filter (its attempt, time: `attempt_seen_late`).
    destroyed: FxHashMap<u64, (u32, Option<(attempts::Attempt, u64)>)>,
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
    /// Who owns each flow and what its remote end is called.
    attr: owners::Attribution,
    /// The pause in force ([`Tracker::set_pause_ns`]).
    pause_ns: u64,
    /// When the last complete dump looked for idle flows to pack (`cold.rs`).
    froze_ns: Option<u64>,
}

impl Tracker {
    /// An empty table.
    pub fn new(cfg: TrackerConfig) -> Self {
        let cfg = TrackerConfig { window_samples: cfg.window_samples.max(2), ..cfg };
        Self {
            cfg,
            index: index::Index::default(),
            slab: Vec::new(),
            cold: cold::ColdStore::default(),
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
            attr: owners::Attribution::default(),
            pause_ns: cfg.pause_ns,
            froze_ns: None,
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

    /// A gap longer than `ns` (and than [`TrackerConfig::pause_ns`]) is a pause from now on.
    pub fn set_pause_ns(&mut self, ns: u64) {
        self.pause_ns = ns.max(self.cfg.pause_ns);
    }

    /// Whether the flow limit is reached: flows waiting for their destroy event count too.
    fn full(&self) -> bool {
        self.cfg.max_flows > 0 && self.slab.len() + self.waiting.len() >= self.cfg.max_flows
    }

    /// Counters.
    pub fn stats(&self) -> TrackerStats {
        self.stats
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
        let j = self.index.get(cookie, &self.hot)?;
        if j > c {
            self.swap_slots(j, c);
            self.cursor = c + 1;
            return Some(c);
        }
        Some(j)
    }

    fn swap_slots(&mut self, a: usize, b: usize) {
        // Out of the index while their slots change (it compares through `hot`).
        let (ca, cb) = (self.hot[a].cookie, self.hot[b].cookie);
        self.index.remove(ca, &self.hot);
        self.index.remove(cb, &self.hot);
        self.slab.swap(a, b);
        self.hot.swap(a, b);
        self.index.insert(ca, b, &self.hot);
        self.index.insert(cb, a, &self.hot);
    }

    /// One socket of the current dump. Interim records (window cuts) go to `out`.
    pub fn observe(&mut self, s: &Sample<'_>, out: &mut Vec<EndedFlow>) {
        if s.msg().state() == tcp::LISTEN {
            // Listeners start no flow; they name the server side's port in the accounts.
            let (port, cgroup) = (s.msg().sport(), s.cgroup_id().unwrap_or(0));
            self.accounts.saw_listener(self.netns, port, cgroup);
            self.listener_seen(port, s.msg().inode(), cgroup);
            return;
        }
        let cookie = s.msg().cookie();
        let generation = self.generation;
        let Some(t) = s.tcp_info() else {
            // TIME-WAIT and SYN-RECV minisockets carry no tcp_info: they keep a known
            // flow alive but never start one.
            if let Some(slot) = self.find(cookie) {
                let f = self.wake(slot);
                if same_socket(&f.key, s) {
                    f.last.state = s.msg().state();
                    let h = &mut self.hot[slot];
                    self.seen_now += usize::from(h.seen_gen != generation);
                    h.seen_gen = generation;
                    h.max_gap_us = h.max_gap_us.max(gap_us(h.last_ts_ns, s.ts_ns));
                    h.last_ts_ns = s.ts_ns;
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
        if let Some(&(_, late)) = self.destroyed.get(&cookie) {
            return self.attempt_seen_late(s, &t, late, out);
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
        self.start_flow(s, &t, fp);
    }

    /// A socket of the dump that starts a flow: its first sample, its head, and (past the
    /// first dump) its place in the hot set.
    fn start_flow(&mut self, s: &Sample<'_>, t: &TcpInfo<'_>, fp: u64) {
        let (cookie, generation) = (s.msg().cookie(), self.generation);
        let sn = snap(s, t);
        let f = self.open(s, &sn, self.dumps_done == 0, Seen::Dump);
        // A new connection starts hot; it leaves the hot set if it stays still. Flows of the
        // first dump were open before we started: those that sent or received within the
        // hot linger (tcp_info says how long ago) start hot too, so that the hot set is
        // known from the first dump and no second dump is needed at once to tell.
        let tiered = self.cfg.tiers
            && (self.dumps_done > 0 || tiers::active_within(t, self.cfg.hot_linger_ns));
        let hot = FlowHead {
            cookie,
            fp,
            last_ts_ns: s.ts_ns,
            seen_gen: generation,
            deduped: 0,
            tuple: tuple_hash(s),
            options: sn.options,
            changed: true,
            marks: queued(s),
            tiered,
            max_gap_us: 0,
            exact: 0,
        };
        if tiered {
            self.hot_set.add(cookie, SocketTarget::of(&s.msg()), s.ts_ns, self.netns);
        }
        if self.slab.len() == self.slab.capacity() {
            // Grow by a quarter, not Vec's doubling: at 20,000 flows doubling reserved
            // 32,768 slots of 16 + 48 bytes, 12,768 of them unused. Large reallocations
            // are remapped by the allocator, not copied.
            let extra = (self.slab.capacity() / 4).max(64);
            self.slab.reserve_exact(extra);
            self.hot.reserve_exact(extra);
        }
        // The first dump's flows were open before we started, most of them idle on a busy
        // host: they are packed at once, so that the table never holds them whole (no
        // peak of 600 bytes a flow on the first dump); one that moves is made whole by
        // its next changed sample.
        let body = if self.dumps_done == 0 { self.born_cold(&f) } else { Body::Live(Box::new(f)) };
        self.slab.push(body);
        self.hot.push(hot);
        self.index.insert(cookie, self.hot.len() - 1, &self.hot);
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
        // The previous sample's time, and whether it was retained: then it is where the
        // flow's recent rate was last folded, known without reading the sample itself.
        let (prev_ts, prev_retained) = (h.last_ts_ns, h.changed);
        let gap = gap_us(h.last_ts_ns, s.ts_ns);
        h.max_gap_us = h.max_gap_us.max(gap);
        let paused = if u64::from(gap) * 1000 > self.pause_ns { PAUSED } else { 0 };
        h.marks = (h.marks & PAUSED) | paused | queued(s);
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
        if matches!(self.slab[slot], Body::Cold(_)) {
            self.wake(slot);
        }
        let h = &mut self.hot[slot];
        if self.cfg.tiers && !h.tiered {
            // It moves: poll it every tick from now on (tracker/tiers.rs).
            h.tiered = true;
            self.hot_set.add(h.cookie, SocketTarget::of(&s.msg()), s.ts_ns, self.netns);
        }
        let Body::Live(f) = &mut self.slab[slot] else { return };
        // After deduped samples the last retained one is read for its time: a line that is
        // cold by then, so only then (read on every changed sample, with an `exp` in the
        // fold, the changed path cost far more: benches/RESULTS.md, D22).
        let prev_ts = if prev_retained {
            prev_ts
        } else {
            self.stages.latest(&f.stage, &f.samples).map_or(s.ts_ns, |r| r.ts_ns)
        };
        let prev_bytes = f.last.bytes_acked.saturating_add(f.last.bytes_received);
        let at = self.stages.next_slot(&mut f.stage);
        decode_into(at, &mut f.last, s, t);
        f.last.fold_rate(prev_bytes, s.ts_ns.saturating_sub(prev_ts));
        at.set_after_pause(h.marks & PAUSED != 0);
        h.marks &= !PAUSED;
        let edge = *at;
        self.stages.commit(&mut f.stage);
        Self::account(f, edge.rtt_us, &mut self.stats, &mut self.accounts);
        refresh_attrs(f, s);
        if f.stage.window as usize >= self.cfg.window_samples {
            out.extend(self.cut_at_edge(slot));
            self.hot[slot].options = t.options().unwrap_or(0);
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
        f.counted = self.open_account(&f, s.msg().inode(), seen, uid);
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
            owner: None,
            attempt: None,
        }
    }
}

/// Copies the hot fields into the flow.
fn sync(f: &mut Flow, h: &FlowHead) {
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

pub mod accounts;
pub mod attempts;
mod cold;
mod config;
pub use cold::COLD_AFTER_NS;
mod decode;
mod ending;
mod owners;
pub use owners::DestNamer;
mod fingerprint;
mod flow;
mod index;
mod pool;
mod prefetch;
mod spaces;
mod tiers;
pub mod views;

#[cfg(any(test, feature = "testkit"))]
pub mod testing;
#[cfg(test)]
mod tests;
