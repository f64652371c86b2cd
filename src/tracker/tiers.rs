//! The hot set: the flows whose samples move, which the sampling task polls every tick by
//! exact requests, while full dumps, at a pace the CPU budget sets, find new flows and
//! refresh the still ones (docs/running.md, "Sampling tiers").
//!
//! A flow joins when a sample of it is retained (something the analysis keeps changed:
//! bytes, segments, retransmits, state, RTT, window...), which includes its first, and
//! leaves once it has been still for `hot_linger_ns`. A still flow is seen again at the next
//! full dump; if it moved meanwhile, that dump puts it back. Kept off the dump's hot path:
//! a flow is added when its sample changes (one flag test), and the set is swept after
//! each tick, not during it.

use super::{EndedFlow, Tracker, fingerprint, same_socket};
use crate::wire::inet_diag::SocketTarget;
use crate::wire::sock::Sample;

/// The hot flows, in the order they joined: what to ask for (`targets`) and, beside it,
/// each one's cookie and when it last moved.
#[derive(Debug, Default)]
pub(super) struct HotSet {
    targets: Vec<SocketTarget>,
    /// Cookie and CLOCK_MONOTONIC ns of its last move.
    meta: Vec<(u64, u64)>,
    /// Its network namespace's index.
    netns: Vec<u32>,
}

impl HotSet {
    pub(super) fn add(&mut self, cookie: u64, target: SocketTarget, ts_ns: u64, netns: u32) {
        self.targets.push(target);
        self.meta.push((cookie, ts_ns));
        self.netns.push(netns);
    }

    /// Keeps the entries `keep` accepts (given cookie and last move), in order.
    fn retain(&mut self, mut keep: impl FnMut(u64, &mut u64) -> bool) {
        let mut j = 0;
        for i in 0..self.meta.len() {
            let (cookie, mut moved) = self.meta[i];
            if keep(cookie, &mut moved) {
                self.meta[j] = (cookie, moved);
                self.targets[j] = self.targets[i];
                self.netns[j] = self.netns[i];
                j += 1;
            }
        }
        self.meta.truncate(j);
        self.targets.truncate(j);
        self.netns.truncate(j);
    }
}

/// Whether a socket that has carried data sent or received some, or had an
/// acknowledgement, within `ns` of its sample (`tcpi_last_data_sent`, `tcpi_last_data_recv`,
/// `tcpi_last_ack_recv`, in ms). How a flow of the first dump, which has no earlier sample
/// to compare with, tells that it moves: idle connections read seconds or more there. A
/// connection that has carried nothing yet (its handshake alone: one byte acknowledged,
/// none received) is left out: the kernel sets those times at the handshake, and 20,000
/// connections made just before the start all read as moving (a kernel test's host, whose
/// first seconds then went to full dumps of every flow).
pub(super) fn active_within(t: &crate::wire::tcp_info::TcpInfo<'_>, ns: u64) -> bool {
    let carried = t.bytes_acked().unwrap_or(0) > 1 || t.bytes_received().unwrap_or(0) > 0;
    let ms = ns / 1_000_000;
    carried
        && [t.last_data_sent(), t.last_data_recv(), t.last_ack_recv()]
            .into_iter()
            .any(|v| v.is_some_and(|v| u64::from(v) < ms))
}

impl Tracker {
    /// The hot flows' identities, for the next exact poll; their indexes are the `k` of
    /// [`observe_exact`](Self::observe_exact) and [`exact_gone`](Self::exact_gone).
    pub fn hot_targets(&self) -> &[SocketTarget] {
        &self.hot_set.targets
    }

    /// The hot flows' identities, taken out for an exact poll (which must not hold the
    /// tracker borrowed); give them back with [`put_hot_targets`](Self::put_hot_targets).
    pub fn take_hot_targets(&mut self) -> Vec<SocketTarget> {
        std::mem::take(&mut self.hot_set.targets)
    }

    /// Gives back what [`take_hot_targets`](Self::take_hot_targets) took; flows that joined
    /// meanwhile stay after them, in the order they joined.
    pub fn put_hot_targets(&mut self, mut targets: Vec<SocketTarget>) {
        targets.append(&mut self.hot_set.targets);
        self.hot_set.targets = targets;
    }

    /// Each hot flow's network namespace (index), beside [`hot_targets`](Self::hot_targets).
    pub fn hot_netns(&self) -> &[u32] {
        &self.hot_set.netns
    }

    /// Flows in the hot set.
    pub fn hot_len(&self) -> usize {
        self.hot_set.targets.len()
    }

    /// The answer to an exact poll for hot flow `k`. Window cuts go to `out`.
    pub fn observe_exact(&mut self, k: usize, s: &Sample<'_>, out: &mut Vec<EndedFlow>) {
        let Some(&(cookie, _)) = self.hot_set.meta.get(k) else { return };
        let Some(slot) = self.index.get(cookie, &self.hot) else { return };
        if s.msg().cookie() != cookie || !same_socket(&self.wake(slot).key, s) {
            return;
        }
        let (retained, deduped) = (self.stats.samples_retained, self.stats.samples_deduped);
        self.hot[slot].exact += 1;
        match s.tcp_info() {
            Some(t) => {
                let fp = fingerprint(s, &t);
                self.sampled(slot, s, &t, fp, out);
                if self.hot[slot].changed {
                    self.hot_set.meta[k].1 = s.ts_ns;
                }
            }
            None => {
                // A TIME-WAIT minisocket: the connection closed; its state is all it tells.
                let h = &mut self.hot[slot];
                h.max_gap_us = h.max_gap_us.max(super::gap_us(h.last_ts_ns, s.ts_ns));
                h.last_ts_ns = s.ts_ns;
                self.wake(slot).last.state = s.msg().state();
            }
        }
        // The next full dump's prefetch choice counts only what dumps changed.
        self.at_begin.0 += self.stats.samples_retained - retained;
        self.at_begin.1 += self.stats.samples_deduped - deduped;
    }

    /// Hot flow `k`'s socket is gone (the kernel answered `ENOENT` or `ESTALE`, or it is in
    /// a state the dumps leave out) at `ts_ns`: as if a complete dump had missed it.
    pub fn exact_gone(&mut self, k: usize, ts_ns: u64, out: &mut Vec<EndedFlow>) {
        let Some(&(cookie, _)) = self.hot_set.meta.get(k) else { return };
        if self.index.contains(cookie, &self.hot) {
            self.missed(cookie, ts_ns, out);
        }
    }

    /// After an exact poll at `now_ns`: still flows leave the hot set, and flows waiting
    /// for their destroy event past the grace period end.
    pub fn end_exact(&mut self, now_ns: u64, out: &mut Vec<EndedFlow>) {
        self.sweep_hot_set(now_ns, false);
        self.expire_waits(now_ns, out);
        self.bound_samples(out);
    }

    /// After a complete dump at `dump_ts_ns`: hot flows it saw move are marked, and the set
    /// swept.
    pub(super) fn refresh_hot_set(&mut self, dump_ts_ns: u64) {
        self.sweep_hot_set(dump_ts_ns, true);
    }

    fn sweep_hot_set(&mut self, now_ns: u64, after_dump: bool) {
        let linger = self.cfg.hot_linger_ns;
        let generation = self.generation;
        let (index, hot) = (&self.index, &mut self.hot);
        self.hot_set.retain(|cookie, moved| {
            let Some(slot) = index.get(cookie, hot) else { return false };
            let h = &mut hot[slot];
            if after_dump && h.seen_gen == generation && h.changed {
                *moved = (*moved).max(now_ns);
            }
            let keep = now_ns.saturating_sub(*moved) < linger;
            h.tiered = keep;
            keep
        });
    }
}
