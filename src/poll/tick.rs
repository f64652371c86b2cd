//! One tick's polls: a full dump of every namespace or exact requests for the hot flows,
//! and what the loop does with the outcome (the dump's figures, a failure's back-off,
//! missed ticks). The loop itself is in `mod.rs`.

use super::*;

/// What one tick works on, borrowed from the poll loop ([`Poll::tick_parts`]).
pub(super) struct Tick<'a, S, D> {
    pub(super) tracker: &'a mut Tracker,
    pub(super) spaces: &'a mut [Space<S, D>],
    pub(super) out: &'a mut Vec<EndedFlow>,
    pub(super) metrics: &'a Metrics,
    pub(super) pacer: &'a mut Pacer,
}

/// A full dump: every socket of the namespaces it walks (all of them, unless the budget
/// lets it leave out those where nothing moved) goes through the tracker; its CPU cost
/// paces the next.
/// `Ok(Some(dump))` for [`dump_done`] to finish.
pub(super) async fn full_dump<S: DumpSource, D: DumpSource>(
    tk: Tick<'_, S, D>,
    now_ns: u64,
    why: Why,
) -> Result<Option<crate::sampler::Dump>, SampleError> {
    let Tick { tracker, spaces, out, metrics, pacer } = tk;
    let opened = tracker.stats().flows_opened;
    let walk = match why {
        Why::Always => Walk::Every,
        Why::First => Walk::All(now_ns),
        Why::Due | Why::Cheaper => Walk::Moved(now_ns),
    };
    // Nothing moved anywhere: no dump (the next tick asks again, for a file read).
    let (moved, cpu) = cpu_timed(async { spaces::any_to_walk(spaces, walk) }).await;
    if !moved {
        metrics.sampling_cpu_ns.add(cpu);
        metrics.budget.spend(cpu);
        metrics.netns_walks_skipped.add(spaces.len() as u64);
        return Ok(None);
    }
    tracker.begin_dump();
    let (r, cpu) = cpu_timed(spaces::dump_all(spaces, tracker, out, metrics, walk)).await;
    metrics.dumps.inc();
    metrics.sampling_cpu_ns.add(cpu);
    metrics.budget.spend(cpu);
    if why == Why::Cheaper {
        metrics.full_dumps_cheaper.inc();
    }
    let d = r?;
    if let Some(last) = pacer.last_full_ns() {
        let gap = now_ns.saturating_sub(last);
        metrics.full_dump_interval_ns.set(gap);
        // New flows since a full dump more than a tick ago may have begun unseen for up
        // to that long (the first dump's flows were open before we started).
        let found = tracker.stats().flows_opened - opened;
        if gap > pacer.interval_ns() * 3 / 2 && found > 0 {
            metrics.flows_discovered_late.add(found);
            metrics.discovery_delay.observe_n(Duration::from_nanos(gap), found);
        }
    }
    pacer.full_done(now_ns, cpu, u64::from(d.sockets));
    Ok(Some(d))
}

/// An exact poll of the hot flows: each is asked for by identity; an answer goes through
/// the tracker like a dump's, a socket gone (or in a state the dumps leave out) ends its
/// flow as a dump's miss would.
/// Flows seen only in their destroy event on a port not known to listen wait in `out` to
/// learn which side they were: one listeners' dump of each namespace they belong to (the
/// kernel walks only its listener table for it) tells whether the port listens now, as it
/// does when the listener started after the last full dump. At most once a tick, and only
/// when such flows wait; client sides of short connections, on ephemeral ports, are the
/// usual ones. A failed listeners' dump leaves their side unknown, never guessed.
pub(super) async fn resolve_sides<S: DumpSource, D>(
    tracker: &mut Tracker,
    spaces: &mut [spaces::Space<S, D>],
    out: &mut [EndedFlow],
) {
    if !Tracker::any_unresolved(out) {
        return;
    }
    for sp in spaces.iter_mut() {
        if !out.iter().any(|e| e.unresolved == Some(sp.ns)) {
            continue;
        }
        tracker.set_netns(sp.ns);
        if let Err(e) = sp.sampler.listeners_with(|s| tracker.observe_listener(&s)).await {
            tracing::debug!(netns = sp.ns, error = %e, "listeners' dump failed");
        }
    }
    tracker.resolve_sides(out);
}

pub(super) async fn exact_poll<S: DumpSource, D: DumpSource>(
    tk: Tick<'_, S, D>,
) -> Result<Option<crate::sampler::Dump>, SampleError> {
    let Tick { tracker, spaces, out, metrics, pacer } = tk;
    let mut p = ExactPoll::default();
    let (r, cpu) = cpu_timed(spaces::poll_all(spaces, tracker, out, &mut p)).await;
    metrics.sampling_cpu_ns.add(cpu);
    metrics.budget.spend(cpu);
    let asked = r?;
    pacer.exact_done(cpu, asked);
    metrics.exact_polls.inc();
    metrics.exact_requests.add(u64::from(p.asked));
    metrics.exact_gone.add(u64::from(p.gone));
    metrics.exact_unanswered.add(u64::from(p.unanswered));
    if p.last_ts_ns > 0 {
        tracker.end_exact(p.last_ts_ns, out);
    }
    Ok(None)
}

/// A dump that completed: the tracker ends what it missed (when complete), and the figures.
pub(super) fn dump_done(
    d: &crate::sampler::Dump,
    tracker: &mut Tracker,
    out: &mut Vec<EndedFlow>,
    metrics: &Metrics,
    start: tokio::time::Instant,
) {
    metrics.dump_ok();
    let complete = d.is_complete();
    tracker.end_dump(complete, d.span_ns.0, out);
    if !complete {
        metrics.dumps_incomplete.inc();
        tracing::warn!(
            interrupted = d.interrupted,
            truncated = d.truncated,
            malformed = d.malformed,
            "incomplete dump; no flow ends on it"
        );
    }
    metrics.decode_ns.add(d.process_ns);
    tracing::debug!(target: "cgmon_rs::sampler", time_us = start.elapsed().as_micros() as u64,
        sockets = d.sockets, datagrams = d.datagrams, bytes = d.bytes,
        requests = d.requests, "netlink dump");
}

/// The `errors`-th failed dump in a row: the back-off before the next, or the end.
///
/// # Errors
/// `max_errors` dumps failed in a row.
pub(super) fn dump_failed(
    e: SampleError,
    errors: u32,
    cfg: &TaskConfig,
    metrics: &Metrics,
) -> Result<Duration, StageError> {
    metrics.dump_errors.inc();
    if cfg.max_errors > 0 && errors >= cfg.max_errors {
        return Err(StageError::TooManyErrors { count: errors, last: e });
    }
    let shift = (errors - 1).min(20);
    let delay = cfg.error_delay.saturating_mul(1 << shift).min(MAX_ERROR_DELAY);
    tracing::warn!(error = %e, consecutive = errors, retry_in_ms = delay.as_millis() as u64,
        "dump failed; no flow ends on it");
    Ok(delay)
}

/// A dump outlasted the interval: tokio would still fire the missed tick at once; move it
/// to the next point of the grid instead, so an overrun never turns into back-to-back
/// dumps. Counted, and warned about at most once a minute.
pub(super) fn skip_missed_ticks(
    tick: &mut tokio::time::Interval,
    grid0: tokio::time::Instant,
    cfg: &TaskConfig,
    took: Duration,
    metrics: &Metrics,
    warn: &mut RateLimited,
) {
    let now = tokio::time::Instant::now();
    let iv = cfg.interval.as_nanos().max(1);
    let k = (now.duration_since(grid0).as_nanos() / iv + 1) as u64;
    tick.reset_at(grid0 + Duration::from_nanos(k.saturating_mul(iv as u64)));
    metrics.ticks_overrun.inc();
    if let Some(more) = warn.hit() {
        tracing::warn!(
            took_ms = took.as_millis() as u64,
            interval_ms = cfg.interval.as_millis() as u64,
            overruns_since_last_warning = more,
            "a dump took longer than the interval; skipping the missed ticks"
        );
    }
}
