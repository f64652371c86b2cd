//! The parts the program wires together ([`super::run`]): the namespaces polled, the
//! tracker with its namers, the web view, and the outputs. Each returns the exit status
//! when it cannot be made, having said why in one line.

use std::sync::Arc;

use super::{
    EXIT_FAILURE, EXIT_USAGE, HttpSettings, IpfixThread, Settings, SinkThread, Sources,
    WriterThread,
};
use crate::locks::Locked;
use crate::metrics::Metrics;
use crate::poll;
use crate::sampler::Sampler;
use crate::sampler::source::Source;
use crate::tracker::{Tracker, TrackerConfig};
use crate::who::namer::RecordNamer;
use crate::writer::{self, Writer};

/// What the web view, the writer and the poll task share: the traffic accounts, the cgroup
/// → service names (one cache for the records, `/metrics` and the pages) and the
/// destination names.
pub(super) struct Views {
    pub(super) accounts: Arc<std::sync::Mutex<Vec<crate::tracker::accounts::Account>>>,
    pub(super) services: Arc<std::sync::Mutex<crate::who::services::Services>>,
    pub(super) dests: Arc<std::sync::Mutex<crate::who::dests::Dests>>,
}

/// What the poll task polls.
pub(super) struct Polled {
    /// The namespaces, the first (the monitor's own) with the user's filter.
    pub(super) spaces: Vec<poll::Space<Source, Source>>,
    /// With `--netns`: namespaces found later, and those gone.
    pub(super) updates: Option<tokio::sync::mpsc::Receiver<poll::SpaceUpdate<Source, Source>>>,
    /// With `--netns`: each namespace's name by index.
    pub(super) names: Option<Arc<std::sync::Mutex<Vec<String>>>>,
}

/// [`Polled`] from the opened `sources`. Err: the filter does not compile (said).
pub(super) fn polled(s: &Settings, sources: Sources) -> Result<Polled, ()> {
    let sampler = Sampler::new(sources.dump, s.sampler.clone());
    let sampler = sampler.map_err(|e| eprintln!("cgmon-rs: filter: {e}"))?;
    let (first_label, mut spaces, updates, names) = match sources.netns {
        Some(n) => (Some(n.first), n.others, Some(n.updates), Some(n.names)),
        None => (None, Vec::new(), None, None),
    };
    let first = poll::Space::new(0, first_label, sampler, sources.destroy);
    spaces.insert(0, first.with_activity(sources.activity));
    Ok(Polled { spaces, updates, names })
}

/// The tracker's settings: without destroy events in any namespace, nothing would end a
/// waiting flow but the grace period, so there is none.
pub(super) fn tracker_config(
    s: &Settings,
    spaces: &[poll::Space<Source, Source>],
) -> TrackerConfig {
    let no_events = spaces.iter().all(|sp| sp.destroy.is_none());
    TrackerConfig {
        destroy_grace_ns: if no_events { 0 } else { s.tracker.destroy_grace_ns },
        ..s.tracker
    }
}

/// The HTTP server with `--http`, and the ring of recently ended flows it shows (the
/// analysis then keeps chart points for them). Err: the exit status.
pub(super) fn web(
    s: &Settings,
    acfg: &mut crate::analysis::stage::StageConfig,
    names: Option<Arc<std::sync::Mutex<Vec<String>>>>,
    queries: tokio::sync::mpsc::Sender<crate::tracker::views::Query>,
    views: &Views,
    metrics: &Arc<Metrics>,
) -> Result<(Option<crate::http::Server>, Option<Arc<crate::recent::Recent>>), u8> {
    let Some(h) = s.http else { return Ok((None, None)) };
    let recent = Arc::new(crate::recent::Recent::new(h.recent_flows));
    let ring = recent.enabled().then(|| recent.clone());
    if ring.is_some() {
        acfg.chart_points = h.recent_flows;
    }
    let served = crate::http::Served {
        metrics: metrics.clone(),
        registry: Default::default(),
        queries,
        interval: s.task.interval,
        netns: names,
        accounts: views.accounts.clone(),
        services: views.services.clone(),
        dests: views.dests.clone(),
        recent,
        analysis: acfg.analysis,
        token: s.http_token.clone(),
    };
    Ok((Some(start_http(h, served)?), ring))
}

/// The writer's thread, reading `wrx`, with its naming and its consumers: the web view's
/// ring, and the fleet sink's and IPFIX exporter's threads beside it (the writer hands them
/// each batch without waiting). Half the shutdown budget is for retrying a failing output;
/// the rest is for the stages. Err: the exit status.
pub(super) fn outputs(
    s: &Settings,
    writer: Writer,
    views: &Views,
    ring: Option<Arc<crate::recent::Recent>>,
    wrx: std::sync::mpsc::Receiver<writer::Msg>,
    reopen: &writer::ReopenRequest,
    metrics: &Arc<Metrics>,
) -> Result<(WriterThread, Option<SinkThread>, Option<IpfixThread>), u8> {
    let namer = RecordNamer::new(views.services.clone(), views.dests.clone());
    let mut writer = writer.with_naming(Box::new(namer));
    if let Some(r) = ring {
        writer = writer.with_consumer(Box::new(crate::recent::Ring(r)));
    }
    let (writer, sink) = start_sink(s, writer, metrics)?;
    let (writer, ipfix) = start_ipfix(s, writer, metrics)?;
    match writer::spawn(writer, wrx, reopen.clone(), s.shutdown_timeout / 2) {
        Ok(t) => Ok((t, sink, ipfix)),
        Err(e) => {
            eprintln!("cgmon-rs: cannot start the writer thread: {e}");
            Err(EXIT_FAILURE)
        }
    }
}

/// The analyzer's settings for this run: records turn CLOCK_MONOTONIC into wall-clock time
/// with the offset of the run's start (as cgmon does), not of the moment the options were
/// read.
pub(super) fn analyzer_config(s: &Settings) -> crate::analysis::stage::StageConfig {
    let mut acfg = s.analyzer.clone();
    acfg.analysis.realtime_offset_ns = crate::clock::realtime_offset_ns();
    acfg
}

/// The ClickHouse sink's thread, when `--clickhouse` asks for it, and the writer that
/// hands it records (its consumer [`crate::sink::handoff::Handoff`]).
pub(super) fn start_sink(
    s: &Settings,
    writer: Writer,
    metrics: &Arc<Metrics>,
) -> Result<(Writer, Option<SinkThread>), u8> {
    let Some(cfg) = s.sink.clone() else { return Ok((writer, None)) };
    let (tx, rx) = std::sync::mpsc::sync_channel(crate::sink::SINK_CHANNEL_CAPACITY);
    match crate::sink::spawn(cfg, rx, metrics.clone(), s.shutdown_timeout / 4) {
        Ok(t) => {
            let h = crate::sink::handoff::Handoff::new(tx, metrics.clone());
            Ok((writer.with_consumer(Box::new(h)), Some(t)))
        }
        Err(e) => {
            eprintln!("cgmon-rs: --spool-dir: cannot open the spool: {e}");
            Err(EXIT_USAGE)
        }
    }
}

/// The IPFIX exporter's thread, when `--ipfix` asks for it, and the writer that encodes
/// records for it.
pub(super) fn start_ipfix(
    s: &Settings,
    writer: Writer,
    metrics: &Arc<Metrics>,
) -> Result<(Writer, Option<IpfixThread>), u8> {
    let Some(cfg) = s.ipfix.clone() else { return Ok((writer, None)) };
    let (tx, rx) = std::sync::mpsc::sync_channel(crate::ipfix::CHANNEL_CAPACITY);
    let enc = crate::ipfix::encode::EncodeConfig {
        pen: cfg.pen,
        message_size: cfg.message_size,
        realtime_offset_ns: cfg.realtime_offset_ns,
    };
    let n = cfg.collectors.len();
    match crate::ipfix::export::spawn(cfg, rx, metrics.clone()) {
        Ok(t) => {
            let h = crate::ipfix::Handoff::new(enc, tx, metrics.clone(), n);
            Ok((writer.with_consumer(Box::new(h)), Some(t)))
        }
        Err(e) => {
            eprintln!("cgmon-rs: cannot start the IPFIX exporter's thread: {e}");
            Err(EXIT_FAILURE)
        }
    }
}

/// The destination map (`--dest-map`, or the fallbacks alone): one for the tracker, the
/// records and the web view. A bad file is a usage error, reported here.
pub(super) fn destinations(
    s: &Settings,
) -> Result<Arc<std::sync::Mutex<crate::who::dests::Dests>>, ()> {
    match s.dest_map.clone().map(crate::who::dests::Dests::load).transpose() {
        Ok(d) => Ok(Arc::new(std::sync::Mutex::new(
            d.unwrap_or_else(crate::who::dests::Dests::fallbacks),
        ))),
        Err(e) => {
            eprintln!("cgmon-rs: --dest-map: {e}");
            Err(())
        }
    }
}

/// The tracker with its flows' processes looked for (unless `--no-process`) and their
/// remote ends named by the map the writer uses.
pub(super) fn attributed(
    mut tracker: Tracker,
    process: bool,
    dests: &Arc<std::sync::Mutex<crate::who::dests::Dests>>,
    metrics: &Arc<Metrics>,
) -> Tracker {
    let link = process
        .then(|| {
            crate::who::processes::spawn(crate::who::processes::RealProcfs::new(), metrics.clone())
        })
        .and_then(|r| {
            r.map_err(|e| tracing::warn!("cannot start the process walker ({e}): no Comm, Pid"))
                .ok()
        });
    let d = dests.clone();
    let namer: crate::tracker::DestNamer = Box::new(move |ip, port| d.locked().lookup(ip, port));
    tracker.attribute(link, Some(namer));
    tracker
}

/// Binds and starts the HTTP server, with the `/metrics` exporter of `served`'s counters
/// and accounts.
pub(super) fn start_http(
    h: HttpSettings,
    mut served: crate::http::Served,
) -> Result<crate::http::Server, u8> {
    let l = crate::http::bind(h.addr, served.token.is_some()).map_err(|e| {
        eprintln!("cgmon-rs: -run-http-server: cannot listen on {}: {e}", h.addr);
        EXIT_FAILURE
    })?;
    served.metrics.verdicts.set_top(h.top_services, h.top_destinations);
    let mut exporter = crate::http::prom::Exporter::new(
        served.metrics.clone(),
        served.accounts.clone(),
        served.services.clone(),
        h.top_services,
    )
    .with_attribution(h.top_destinations, h.top_programs, h.kernsnoopd);
    if let Some(n) = &served.netns {
        exporter = exporter.with_netns(n.clone());
    }
    served.registry = Arc::new(exporter).registry();
    crate::http::spawn(l, served, h.limits).map_err(|e| {
        eprintln!("cgmon-rs: cannot start the HTTP server: {e}");
        EXIT_FAILURE
    })
}
