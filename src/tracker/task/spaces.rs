//! The sampling task over several network namespaces (`--netns`): each has its own
//! sampler and destroy listener, a tick dumps (or polls) them all, and namespaces come and
//! go while it runs. With one namespace, all of this reduces to what it was.

use std::sync::Arc;

use super::{EndedFlow, Metrics, SampleError, Tracker, apply_destroyed};
use crate::record::NetnsLabel;
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
}

/// A namespace that came or went while the task runs.
pub enum SpaceUpdate<S, D> {
    /// A new namespace, sampled from the next tick.
    Add(Box<Space<S, D>>),
    /// The namespace of this index is gone: its flows end.
    Remove(u32),
}

/// One dump of every namespace, counted as one: complete only when each part was. A
/// namespace whose dump failed makes the tick incomplete (no flow ends on it); only when
/// every namespace failed is the tick a failure.
pub(super) async fn dump_all<S: DumpSource, D: DumpSource>(
    spaces: &mut [Space<S, D>],
    tracker: &mut Tracker,
    out: &mut Vec<EndedFlow>,
    metrics: &Metrics,
) -> Result<Dump, SampleError> {
    let mut all = Dump::default();
    let (mut failed, mut first): (u64, Option<SampleError>) = (0, None);
    for sp in spaces.iter_mut() {
        tracker.set_netns(sp.ns);
        match sp.sampler.dump_with(|s| tracker.observe(&s, out)).await {
            Ok(d) => merge(&mut all, &d),
            Err(e) => {
                tracing::warn!(netns = sp.ns, error = %e, "a namespace's dump failed; no flow ends on this tick");
                all.interrupted = true;
                failed += 1;
                first.get_or_insert(e);
            }
        }
    }
    match first {
        // Every namespace failed: the tick failed (counted, and backed off, by the caller).
        Some(e) if failed == spaces.len() as u64 => Err(e),
        _ => {
            metrics.dump_errors.add(failed);
            Ok(all)
        }
    }
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

/// Applies the destroy events already queued in every namespace, without waiting.
pub(super) fn drain_all<S, D: DumpSource>(
    spaces: &mut [Space<S, D>],
    tracker: &mut Tracker,
    out: &mut Vec<EndedFlow>,
    metrics: &Metrics,
) {
    for sp in spaces.iter_mut() {
        if let Some(d) = sp.destroy.as_mut() {
            tracker.set_netns(sp.ns);
            match d.drain() {
                Ok(b) => apply_destroyed(tracker, &b, out, metrics),
                Err(e) => tracing::warn!(netns = sp.ns, error = %e, "reading destroy events"),
            }
        }
    }
}

/// Applies a namespace update.
pub(super) fn update<S, D>(
    spaces: &mut Vec<Space<S, D>>,
    u: SpaceUpdate<S, D>,
    tracker: &mut Tracker,
    out: &mut Vec<EndedFlow>,
) {
    match u {
        SpaceUpdate::Add(sp) => {
            if let Some(l) = &sp.label {
                tracker.set_label(sp.ns, l.clone());
            }
            tracing::info!(netns = sp.ns, label = ?sp.label.as_ref().map(|l| &l.name), "sampling a new network namespace");
            spaces.push(*sp);
        }
        SpaceUpdate::Remove(ns) => {
            spaces.retain(|sp| sp.ns != ns);
            tracker.end_netns(ns, crate::clock::monotonic_ns(), out);
            tracing::info!(netns = ns, "a network namespace is gone; its flows end");
        }
    }
}
