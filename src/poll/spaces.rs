//! The sampling task over several network namespaces (`--netns`): each has its own
//! sampler and destroy listener, a tick dumps (or polls) them all, and namespaces come and
//! go while it runs. With one namespace, all of this reduces to what it was.

use std::sync::Arc;

use super::{EndedFlow, Metrics, SampleError, Tracker, apply_destroyed};
use crate::record::NetnsLabel;
use crate::sampler::activity::{Activity, Segments};
use crate::sampler::destroy::{DestroyBatch, DestroyListener};
use crate::sampler::exact::Answer;
use crate::sampler::source::DumpSource;
use crate::sampler::{Dump, Sampler};
use crate::wire::inet_diag::SocketTarget;

/// One network namespace's sources.
pub struct Space<S, D> {
    /// Its index: what its flows and accounts are labelled with (0: the first).
    pub ns: u32,
    /// What its records say about it; `None` when it is the only one sampled.
    pub label: Option<Arc<NetnsLabel>>,
    /// Its dumps and exact polls.
    pub sampler: Sampler<S>,
    /// Its destroy events, when they could be subscribed to.
    pub destroy: Option<DestroyListener<D>>,
    /// Its TCP segment counters, when they can be read: with them, a full dump need not
    /// walk it while nothing moves in it (see [`Walk::Moved`]).
    activity: Option<Activity>,
    /// When its last complete walk began (the task's clock, ns) and its counters then.
    walked: Option<(u64, Segments)>,
    /// Its counters as [`any_to_walk`] read them for the walk that follows: read once a
    /// tick, not twice (a read of `/proc/net/snmp` makes the kernel sum every counter of
    /// every CPU).
    read_for_walk: Option<Segments>,
    /// Sockets in its last walk.
    sockets: u32,
}

impl<S, D> Space<S, D> {
    /// Namespace `ns`, walked by every full dump until it is given an [`Activity`].
    pub fn new(
        ns: u32,
        label: Option<Arc<NetnsLabel>>,
        sampler: Sampler<S>,
        destroy: Option<DestroyListener<D>>,
    ) -> Self {
        Self {
            ns,
            label,
            sampler,
            destroy,
            activity: None,
            walked: None,
            read_for_walk: None,
            sockets: 0,
        }
    }

    /// With its segment counters read from `activity`.
    pub fn with_activity(mut self, activity: Option<Activity>) -> Self {
        self.activity = activity;
        self
    }
}

/// Which namespaces a full dump walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// Every one, counters unread: no budget, so every tick is a full dump of everything,
    /// as cgmon's are.
    Every,
    /// Every one, noting each one's counters at the task's time `now_ns`.
    All(u64),
    /// Only those in which a segment was sent or received since their last complete walk,
    /// or whose last walk began long enough before `now_ns` (30 to 60 s by namespace, at
    /// most [`NAMESPACE_REWALK`](crate::poll::pace::NAMESPACE_REWALK)). One not walked
    /// holds no new socket, and none of its sockets sent or received anything since; its
    /// flows stand (`Tracker::carry_netns`).
    Moved(u64),
}

/// A namespace that came or went while the task runs.
pub enum SpaceUpdate<S, D> {
    /// A new namespace, sampled from the next tick.
    Add(Box<Space<S, D>>),
    /// The namespace of this index is gone: its flows end.
    Remove(u32),
}

/// One dump of every namespace `walk` takes, counted as one: complete only when each part
/// was. A namespace whose dump failed makes the tick incomplete (no flow ends on it); only
/// when every namespace walked failed is the tick a failure.
pub(super) async fn dump_all<S: DumpSource, D: DumpSource>(
    spaces: &mut [Space<S, D>],
    tracker: &mut Tracker,
    out: &mut Vec<EndedFlow>,
    metrics: &Metrics,
    walk: Walk,
) -> Result<Dump, SampleError> {
    let mut all = Dump::default();
    let (mut failed, mut first): (u64, Option<SampleError>) = (0, None);
    let mut walked = 0u64;
    let (now_ns, may_skip) = match walk {
        Walk::Every => (None, false),
        Walk::All(t) => (Some(t), false),
        Walk::Moved(t) => (Some(t), true),
    };
    for sp in spaces.iter_mut() {
        // Read before the walk: a segment during it shows as a change at the next.
        let read = sp.read_for_walk.take();
        let segs = now_ns.and_then(|_| read.or_else(|| segments(sp)));
        if may_skip && still(sp.ns, sp.walked, segs, now_ns) {
            tracker.carry_netns(sp.ns);
            metrics.netns_walks_skipped.inc();
            continue;
        }
        walked += 1;
        tracker.set_netns(sp.ns);
        let r = sp.sampler.dump_with(|s| tracker.observe(&s, out)).await;
        sp.walked = match (&r, segs, now_ns) {
            (Ok(d), Some(segs), Some(t)) if d.is_complete() => Some((t, segs)),
            _ => None,
        };
        match r {
            Ok(d) => {
                sp.sockets = d.sockets;
                merge(&mut all, &d);
            }
            Err(e) => {
                tracing::warn!(netns = sp.ns, error = %e, "a namespace's dump failed; no flow ends on this tick");
                all.interrupted = true;
                failed += 1;
                first.get_or_insert(e);
            }
        }
    }
    if walked == 0 {
        // Nothing walked, nothing can end: the time is for the grace periods' expiry.
        let now = crate::clock::monotonic_ns();
        all.span_ns = (now, now);
    }
    match first {
        // Every namespace walked failed: the tick failed (counted, and backed off, by the
        // caller).
        Some(e) if failed == walked => Err(e),
        _ => {
            metrics.dump_errors.add(failed);
            // The host's sockets: those of namespaces left unwalked as at their last walk.
            let covered: u64 = spaces.iter().map(|sp| u64::from(sp.sockets)).sum();
            metrics.sockets_last_dump.set(covered);
            Ok(all)
        }
    }
}

/// A namespace's counters now, if it has them; a reader that fails is dropped (the
/// namespace is then walked by every full dump), with a warning.
/// Whether a full dump of `walk` would walk any namespace: false when it may leave every
/// one unwalked (nothing moved in any since its last walk, none due). Such a dump is not
/// taken at all: a dump that walks nothing still sweeps every flow the tracker follows,
/// and its low cost pulled the pace's estimate down until those empty dumps came every few
/// ticks (benches/RESULTS.md, D26).
pub(super) fn any_to_walk<S, D>(spaces: &mut [Space<S, D>], walk: Walk) -> bool {
    let Walk::Moved(t) = walk else {
        // The walk reads the counters itself (none kept from an earlier tick).
        spaces.iter_mut().for_each(|sp| sp.read_for_walk = None);
        return true;
    };
    let mut any = false;
    for sp in spaces.iter_mut() {
        let segs = segments(sp);
        sp.read_for_walk = segs;
        any |= !still(sp.ns, sp.walked, segs, Some(t));
    }
    any
}

fn segments<S, D>(sp: &mut Space<S, D>) -> Option<Segments> {
    match sp.activity.as_mut()?.read() {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(netns = sp.ns, error = %e,
                "cannot read a namespace's TCP counters; it is walked at every full dump");
            sp.activity = None;
            None
        }
    }
}

/// Whether namespace `ns`, last walked as `walked`, may be left unwalked at `now_ns`, its
/// counters being `now`.
fn still(
    ns: u32,
    walked: Option<(u64, Segments)>,
    now: Option<Segments>,
    now_ns: Option<u64>,
) -> bool {
    match (walked, now, now_ns) {
        (Some((at, then)), Some(now), Some(t)) => {
            then == now && t.saturating_sub(at) < longest_unwalked_ns(ns)
        }
        _ => false,
    }
}

/// How long namespace `ns` may go unwalked while nothing moves in it: between half and all
/// of [`NAMESPACE_REWALK`](crate::poll::pace::NAMESPACE_REWALK), spread by index (the
/// golden ratio's fractions, so any run of indexes spreads evenly). Namespaces first walked
/// together would otherwise all fall due at the same dump, which on a host of a hundred
/// namespaces is a walk of the whole table a hundred times in one tick.
pub(super) fn longest_unwalked_ns(ns: u32) -> u64 {
    let max = crate::poll::pace::NAMESPACE_REWALK.as_nanos() as u64;
    // (ns + 1) × 0.618…, modulo 1, in 32-bit fixed point.
    let frac = u64::from((ns.wrapping_add(1)).wrapping_mul(0x9E37_79B9));
    max / 2 + (((max / 2) as u128 * u128::from(frac)) >> 32) as u64
}

fn merge(all: &mut Dump, d: &Dump) {
    all.interrupted |= d.interrupted;
    all.truncated += d.truncated;
    all.malformed += d.malformed;
    all.sockets += d.sockets;
    all.requests += d.requests;
    all.datagrams += d.datagrams;
    all.bytes += d.bytes;
    all.process_ns += d.process_ns;
    if all.span_ns.0 == 0 || (d.span_ns.0 != 0 && d.span_ns.0 < all.span_ns.0) {
        all.span_ns.0 = d.span_ns.0;
    }
    all.span_ns.1 = all.span_ns.1.max(d.span_ns.1);
}

/// Asks each namespace for its hot flows. Answers go to the tracker under the flows'
/// indexes in the hot set.
pub(super) async fn poll_all<S: DumpSource, D: DumpSource>(
    spaces: &mut [Space<S, D>],
    tracker: &mut Tracker,
    out: &mut Vec<EndedFlow>,
    poll: &mut crate::sampler::exact::ExactPoll,
) -> Result<usize, SampleError> {
    let all = tracker.take_hot_targets();
    let ns_of: Vec<u32> = tracker.hot_netns().to_vec();
    let mut asked = 0;
    let mut r = Ok(());
    let (mut mine, mut idx): (Vec<SocketTarget>, Vec<usize>) = (Vec::new(), Vec::new());
    for sp in spaces.iter_mut() {
        // One namespace (the usual case): every target is its, in place.
        let targets: &[SocketTarget] = if ns_of.iter().all(|&n| n == sp.ns) {
            idx.clear();
            &all
        } else {
            mine.clear();
            idx.clear();
            for (k, (&t, &n)) in all.iter().zip(&ns_of).enumerate() {
                if n == sp.ns {
                    mine.push(t);
                    idx.push(k);
                }
            }
            &mine
        };
        if targets.is_empty() {
            continue;
        }
        tracker.set_netns(sp.ns);
        let states = sp.sampler.config().states;
        let at = |k: usize| if idx.is_empty() { k } else { idx[k] };
        let p = sp
            .sampler
            .exact_with(targets, |k, a| match a {
                Answer::Found(s) if states.contains(s.msg().state()) => {
                    tracker.observe_exact(at(k), &s, out)
                }
                Answer::Found(s) => tracker.exact_gone(at(k), s.ts_ns, out),
                Answer::Gone { ts_ns } => tracker.exact_gone(at(k), ts_ns, out),
            })
            .await;
        asked += targets.len();
        match p {
            Ok(p) => {
                poll.asked += p.asked;
                poll.found += p.found;
                poll.gone += p.gone;
                poll.unanswered += p.unanswered;
                poll.last_ts_ns = poll.last_ts_ns.max(p.last_ts_ns);
            }
            Err(e) => {
                r = Err(e);
                break;
            }
        }
    }
    tracker.put_hot_targets(all);
    r.map(|()| asked)
}

/// The next batch of destroy events from any namespace, and its namespace.
pub(super) async fn next_destroy_any<S, D: DumpSource>(
    spaces: &mut [Space<S, D>],
) -> (u32, Result<DestroyBatch, SampleError>) {
    let mut waiting: Vec<_> = spaces
        .iter_mut()
        .filter_map(|sp| {
            let ns = sp.ns;
            sp.destroy.as_mut().map(|d| Box::pin(async move { (ns, d.next_batch().await) }))
        })
        .collect();
    if waiting.is_empty() {
        return std::future::pending().await;
    }
    std::future::poll_fn(|cx| {
        for f in &mut waiting {
            if let std::task::Poll::Ready(v) = f.as_mut().poll(cx) {
                return std::task::Poll::Ready(v);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// Applies the destroy events already queued in every namespace, without waiting. Returns
/// whether anything came, as a count (datagrams kept, events filtered out or cut short,
/// overruns), and whether a namespace's batch stopped at its cap with more waiting.
pub(super) fn drain_all<S, D: DumpSource>(
    spaces: &mut [Space<S, D>],
    tracker: &mut Tracker,
    out: &mut Vec<EndedFlow>,
    metrics: &Metrics,
) -> (usize, bool) {
    let (mut taken, mut full) = (0, false);
    for sp in spaces.iter_mut() {
        if let Some(d) = sp.destroy.as_mut() {
            tracker.set_netns(sp.ns);
            match d.drain() {
                Ok(b) => {
                    taken += b.batch.datagrams.len() + b.overruns as usize;
                    taken += (b.filtered + b.malformed) as usize;
                    full |= b.full;
                    apply_destroyed(tracker, (&b, sp.ns), out, metrics);
                }
                Err(e) => tracing::warn!(netns = sp.ns, error = %e, "reading destroy events"),
            }
        }
    }
    (taken, full)
}

/// Counts the destroy events the kernel dropped in `sp` since the last count (at a
/// namespace's end and at the stop, so that none goes uncounted).
pub(super) fn count_lost<S, D: DumpSource>(sp: &mut Space<S, D>, metrics: &Metrics) {
    if let Some(d) = sp.destroy.as_mut() {
        super::destroyed::count_lost(metrics, d.take_lost(), sp.ns);
    }
}

/// The destroy sockets' receive buffers, summed over the namespaces, as the kernel holds
/// them (half its accounting: the size set), for `/metrics` and `/health`.
pub(super) fn publish_buffers<S, D: DumpSource>(spaces: &[Space<S, D>], metrics: &Metrics) {
    let sum: u64 = spaces
        .iter()
        .filter_map(|sp| sp.destroy.as_ref()?.meminfo())
        .map(|m| u64::from(m.rcvbuf / 2))
        .sum();
    metrics.destroy_buffer_bytes.set(sum);
}

/// Applies a namespace update.
pub(super) fn update<S, D: DumpSource>(
    spaces: &mut Vec<Space<S, D>>,
    u: SpaceUpdate<S, D>,
    tracker: &mut Tracker,
    out: &mut Vec<EndedFlow>,
    metrics: &Metrics,
) {
    match u {
        SpaceUpdate::Add(sp) => {
            if let Some(l) = &sp.label {
                tracker.set_label(sp.ns, l.clone());
            }
            tracing::info!(netns = sp.ns, label = ?sp.label.as_ref().map(|l| &l.name), "sampling a new network namespace");
            spaces.push(*sp);
            publish_buffers(spaces, metrics);
        }
        SpaceUpdate::Remove(ns) => {
            for sp in spaces.iter_mut().filter(|sp| sp.ns == ns) {
                count_lost(sp, metrics);
            }
            spaces.retain(|sp| sp.ns != ns);
            publish_buffers(spaces, metrics);
            tracker.end_netns(ns, crate::clock::monotonic_ns(), out);
            tracing::info!(netns = ns, "a network namespace is gone; its flows end");
        }
    }
}
