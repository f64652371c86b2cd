//! How flows end: a complete dump that no longer holds them (then the wait for their
//! destroy event, and its expiry), their destroy event with the final counters, the
//! monitor's stop, and windows cut to bound memory.

use super::attempts;
use super::decode::{decode_into, refresh_attrs, snap};
use super::fingerprint::{fingerprint, same_socket_or_port_released};
use super::{
    Body, Close, EndReason, EndedFlow, Flow, LATE_COOKIES, Rest, Seen, Tracker, Waiting, label_of,
    sync,
};
use crate::record::Retained;
use crate::states::tcp;
use crate::wire::sock::Sample;
use crate::wire::tcp_info::TcpInfo;

impl Tracker {
    /// Takes a flow out of the table, brought up to date, with its samples still in pool
    /// blocks (see [`StagePool::detach`]).
    pub(super) fn remove(&mut self, cookie: u64) -> Option<(Flow, Rest)> {
        let slot = self.index.remove(cookie, &self.hot)?;
        let last = self.hot.len() - 1;
        if slot != last {
            // The last flow moves into the slot: its entry first, while the index can
            // still find it where it was.
            self.index.set(self.hot[last].cookie, slot, &self.hot);
        }
        let body = self.slab.swap_remove(slot);
        let h = self.hot.swap_remove(slot);
        if h.seen_gen == self.generation {
            self.seen_now -= 1;
        }
        let mut f = match body {
            Body::Live(f) => *f,
            Body::Cold(at) => self.unpack(at),
        };
        let held = self.stages.release(&mut f.stage, &mut f.samples);
        sync(&mut f, &h);
        Some((f, Rest { held, sampling: h.sampling(), unresolved: None, attempt: None }))
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
        self.freeze_idle(dump_ts_ns, out);
        let carried = &self.carried;
        self.refused.retain(|_, (g, ns)| *g == generation || carried.contains(ns));
        // A dump that started after a destroy cannot hold that socket any more.
        self.destroyed.retain(|_, (g, _)| generation.wrapping_sub(*g) < 2);
    }

    /// The flow of `cookie` is no longer in the kernel's tables (a complete dump missed it,
    /// or an exact poll found it gone at `ts_ns`): it ends as Gone, or waits for its destroy
    /// event.
    pub(super) fn missed(&mut self, cookie: u64, ts_ns: u64, out: &mut Vec<EndedFlow>) {
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
    pub(super) fn expire_waits(&mut self, now_ns: u64, out: &mut Vec<EndedFlow>) {
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
    pub(super) fn remember_gone(&mut self, cookie: u64) {
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
        let Some(t) = s.tcp_info() else {
            if key.dport == 0 {
                self.disconnected(s, None, out);
            }
            return;
        };
        // A connect that never set up, told from its final counters.
        let attempt = attempts::classify(s, &t, self.cfg.syn_retries)
            .filter(|_| self.never_established(key.cookie));
        if key.dport == 0 {
            self.disconnected(s, attempt, out);
            return;
        }
        if self.destroyed.contains_key(&key.cookie) {
            self.stats.destroy_late += 1; // its flow already ended on an event
            return;
        }
        // By cookie alone: a socket's cookie is unique and stable, while its 4-tuple is
        // reused at once after a reset. Matching by 4-tuple merged a new connection's event
        // into an old waiting flow (2 of 39,752 sockets in the churn test), which then came
        // back as a second record.
        if let Some(w) = self.waiting.remove(&key.cookie) {
            return self.destroyed_waiting(w, s, &t, attempt, out);
        }
        let (f, mut rest, fresh) = match self.index.get(key.cookie, &self.hot) {
            Some(slot) if same_socket_or_port_released(&self.wake(slot).key, s) => {
                let same = fingerprint(s, &t) == self.hot[slot].fp;
                let (mut f, rest) = self.remove(key.cookie).expect("indexed just above");
                // The port the dump could not read is the event's.
                f.key.sport = key.sport;
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
        self.destroyed.insert(key.cookie, (self.generation, None));
        rest.sampling.event = true;
        rest.unresolved = unresolved.filter(|_| attempt.is_none());
        rest.attempt = attempt;
        // An attempt connected out: it is the connecting side, and it was reset.
        let close = if attempt.is_some() { Some(Close::Reset) } else { close };
        self.hand_on(f, rest, EndReason::Destroyed, s.ts_ns, close, out);
    }

    /// The destroy event of a flow that waited for it (a complete dump no longer held
    /// it): its final counters complete it.
    fn destroyed_waiting(
        &mut self,
        mut w: Waiting,
        s: &Sample<'_>,
        t: &TcpInfo<'_>,
        attempt: Option<attempts::Attempt>,
        out: &mut Vec<EndedFlow>,
    ) {
        let cookie = w.flow.key.cookie;
        self.stats.destroy_awaited += 1;
        if w.flow.key.sport == 0 {
            w.flow.key.sport = s.key().sport; // read while its port was released
        }
        // The connection ended before the dump that missed it; the socket only lingered
        // until its owner closed it. Its final counters belong to that time, so the
        // sampled span (and the throughputs) do not take in the lingering.
        let end = w.missed_ns.min(s.ts_ns);
        self.final_sample(&mut w.flow, s, t, end);
        w.rest.sampling.event = true;
        let close = Some(Close::from_final(&w.flow.last, w.flow.passive_open));
        self.destroyed.insert(cookie, (self.generation, None));
        w.rest.attempt = attempt;
        self.hand_on(w.flow, w.rest, EndReason::Destroyed, end, close, out);
    }

    /// Whether the flow of `cookie`, if followed, never had a sample past its handshake
    /// (a socket never seen counts as never established: its counters decide).
    fn never_established(&mut self, cookie: u64) -> bool {
        // CLOSE too: a dump collects the sockets of a hash bucket under its lock and reads
        // them after, so a connect refused in between is read closed, its port still set
        // (1 in 40,000 refused connects under load).
        let unset = |st: u8| matches!(st, tcp::SYN_SENT | tcp::SYN_RECV | tcp::CLOSE);
        let connecting =
            |f: &super::Flow| f.samples.iter().all(|r| unset(r.state())) && unset(f.last.state);
        if let Some(w) = self.waiting.get(&cookie) {
            return connecting(&w.flow);
        }
        match self.index.get(cookie, &self.hot) {
            Some(slot) => {
                let f = self.flow_at(slot);
                let latest = self.stages.latest(&f.stage, &f.samples).map(|r| r.state());
                connecting(&f) && latest.is_none_or(unset)
            }
            None => true,
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
            let (port, cgroup) = (s.msg().sport(), s.cgroup_id().unwrap_or(0));
            self.accounts.saw_listener(self.netns, port, cgroup);
            self.listener_seen(port, s.msg().inode(), cgroup);
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
            self.owner_of_side(e, ns);
        }
    }

    /// A destroy event with remote port 0: a listener, or a socket the kernel disconnected
    /// before destroying it, which clears its peer and its counters (a failed blocking
    /// connect; on 6.18 an abortive close with `SO_LINGER` 0 keeps both: `attempts`). A flow
    /// already followed by that cookie ends on it, as reset, with the counters of its last
    /// sample; a listener's, or any other socket's, starts nothing.
    ///
    /// A connect that failed in a blocking `connect()` reads so too (`attempt`): followed
    /// or not, it is recorded, with the port a dump saw or, never seen, with none (then
    /// only when no filter was set, since none could be applied to it).
    pub(super) fn disconnected(
        &mut self,
        s: &Sample<'_>,
        attempt: Option<attempts::Attempt>,
        out: &mut Vec<EndedFlow>,
    ) {
        let (cookie, ts_ns) = (s.key().cookie, s.ts_ns);
        let (f, mut rest, end) = if let Some(w) = self.waiting.remove(&cookie) {
            self.stats.destroy_awaited += 1;
            (w.flow, w.rest, w.missed_ns)
        } else if self.index.contains(cookie, &self.hot) {
            let (f, rest) = self.remove(cookie).expect("indexed just above");
            (f, rest, ts_ns)
        } else if let (Some(a), Some(t)) = (attempt, s.tcp_info()) {
            if !self.cfg.unported_attempts {
                // No filter can be applied to it now. A dump that was walking while it
                // connected may still hold it, with its port: then it is recorded
                // (`attempt_seen_late`). Under 10,000 refused connects a second, 1 in
                // 300,000 connects had been refused within `connect()` (port cleared)
                // while a dump caught it connecting, and that dump's sample reopened it as
                // a flow that ended `gone`, unclassified, 5 s later.
                self.stats.attempts_unported_filtered += 1;
                self.destroyed.insert(cookie, (self.generation, Some((a, ts_ns))));
                return;
            }
            if self.full() || self.gone.contains(&cookie) {
                return;
            }
            let f = self.open(s, &snap(s, &t), false, Seen::Destroy);
            let rest = Rest { attempt: Some(a), ..Rest::default() };
            (f, rest, ts_ns)
        } else {
            // Nothing followed, nothing recorded; a dump still walking must not reopen it.
            self.destroyed.insert(cookie, (self.generation, None));
            return;
        };
        // A followed attempt keeps the port its dumps saw.
        rest.attempt = attempt.map(|a| attempts::Attempt { port_known: f.key.dport != 0, ..a });
        rest.sampling.event |= rest.attempt.is_some();
        self.destroyed.insert(cookie, (self.generation, None));
        self.hand_on(f, rest, EndReason::Destroyed, end, Some(Close::Reset), out);
    }

    /// A dump's sample of a socket whose destroy event came first. When that event was a
    /// connect's with its port cleared while a filter was set (`disconnected`; `late` its
    /// attempt and time), the dump, which the filter selected, supplies the port, and the
    /// attempt is recorded as it would have been had the dump come first; else nothing.
    pub(super) fn attempt_seen_late(
        &mut self,
        s: &Sample<'_>,
        t: &TcpInfo<'_>,
        late: Option<(attempts::Attempt, u64)>,
        out: &mut Vec<EndedFlow>,
    ) {
        let Some((a, destroyed_ns)) = late else { return };
        let cookie = s.key().cookie;
        self.destroyed.insert(cookie, (self.generation, None));
        if self.full() {
            return; // counted as filtered, as before
        }
        self.stats.attempts_unported_filtered -= 1;
        let f = self.open(s, &snap(s, t), false, Seen::Dump);
        let mut rest = Rest {
            attempt: Some(attempts::Attempt { port_known: s.key().dport != 0, ..a }),
            ..Rest::default()
        };
        rest.sampling.event = true;
        // It ended at its destroy event; the dump's sample arrived after that.
        let end = destroyed_ns.max(f.first_ts_ns);
        self.hand_on(f, rest, EndReason::Destroyed, end, Some(Close::Reset), out);
    }

    /// Appends a destroy event's values to a flow taken out of the table, as its last
    /// sample at `ts_ns` (off the dump's hot path: straight into the flow's samples, after
    /// those still held in blocks).
    pub(super) fn final_sample(
        &mut self,
        f: &mut Flow,
        s: &Sample<'_>,
        t: &TcpInfo<'_>,
        ts_ns: u64,
    ) {
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

    pub(super) fn hand_on(
        &mut self,
        mut flow: Flow,
        rest: Rest,
        reason: EndReason,
        end_ts_ns: u64,
        close: Option<Close>,
        out: &mut Vec<EndedFlow>,
    ) {
        if reason != EndReason::Shutdown {
            self.accounts.get_mut(flow.counted.slot).closed += 1;
        }
        let Rest { held, sampling, unresolved, attempt } = rest;
        if attempt.is_some() {
            self.stats.attempts += 1;
        }
        let owner = self.owner_at_end(&mut flow, unresolved.is_none());
        let netns = label_of(&self.labels, &self.flow_netns, flow.key.cookie);
        self.flow_netns.remove(&flow.key.cookie);
        let e = EndedFlow {
            flow,
            reason,
            end_ts_ns,
            close,
            sampling,
            netns,
            held,
            unresolved,
            owner,
            attempt,
        };
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
    pub(super) fn bound_samples(&mut self, out: &mut Vec<EndedFlow>) {
        let max = self.cfg.max_samples;
        if max == 0 || self.samples_held() <= max {
            return;
        }
        let mut by_len: Vec<(u32, usize)> = (self.slab.iter().enumerate())
            .filter_map(|(i, b)| b.live().map(|f| (f.stage.window, i)))
            .collect();
        by_len.sort_unstable_by(|a, b| b.cmp(a));
        let goal = max - max / 10;
        for (len, slot) in by_len {
            if self.samples_held() <= goal || len < 2 {
                break;
            }
            let Some(e) = self.cut_at_edge(slot) else { continue };
            self.stats.windows_cut_for_memory += 1;
            out.push(e);
        }
    }
}

/// How a flow that left the dumps without a destroy event closed: only a TIME-WAIT last
/// seen tells (both FINs were exchanged); anything else is unknown.
pub(super) fn gone_close(f: &Flow) -> Option<Close> {
    (f.last.state == tcp::TIME_WAIT).then_some(Close::Clean)
}
