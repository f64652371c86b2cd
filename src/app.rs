//! The program: wires the stages together, handles signals and systemd, and decides the exit
//! status.
//!
//! ```text
//! poll task ──(tokio mpsc, 256 batches, try_send)──→ analysis task
//!   ──(std sync_channel, 1024 batches)──→ writer thread ──→ stdout | files
//!                                              └─(sync_channel, 256 batches, try_send)─→ sink thread ──→ ClickHouse
//! ```
//!
//! Shutdown (SIGINT/SIGTERM or `-run-duration`): the tracker stops sampling and hands every
//! active flow on as partial; the analyzer and then the writer drain; files are closed as
//! valid gzip. All of it must finish within `-run-shutdown-timeout`, else exit 1; a second
//! signal exits at once.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::analysis::stage as analyzer;
use crate::cli::{self, Config, Parsed};
pub use crate::cli::{HttpSettings, Settings};
use crate::metrics::Metrics;
use crate::poll::namespaces;
use crate::poll::{self, DumpOutcome, ENDED_CHANNEL_CAPACITY};
use crate::sampler::activity::Activity;
use crate::sampler::destroy::DestroyListener;
use crate::sampler::source::{BufferRefused, NetlinkSource, Source};
use crate::sampler::space::open_space;
use crate::samples_out::SamplesOut;
use crate::tracker::Tracker;
use crate::units::format_duration;
use crate::writer::{self, Msg, RECORDS_CHANNEL_CAPACITY, Target, Writer, WriterError};
use parts::{
    Polled, Views, analyzer_config, attributed, destinations, outputs, polled, tracker_config, web,
};

mod parts;
pub mod stop;

pub use crate::cli::EXIT_USAGE;
/// Exit status for a run-time failure.
pub const EXIT_FAILURE: u8 = 1;

/// Parses `args` (without the program name) and runs; the process's exit status.
pub fn main(args: Vec<String>) -> ExitCode {
    let mut cfg = match cli::parse(args) {
        Ok(Parsed::Run(c)) => c,
        Ok(Parsed::Print(s)) => {
            print!("{s}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("cgmon-rs: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // The process is the monitor alone: its whole CPU is in the budget's accounts. An
    // unoptimised build's upkeep is 0.9 % of a core at idle, twenty times a release
    // build's: charged (even capped at a tenth of the budget) it kept the ledger in debt,
    // names waited, and the dumps the kernel tests are written for came at half the pace.
    // Such a build measures it and charges none.
    cfg.settings.task.whole_process = true;
    if cfg!(debug_assertions) {
        cfg.settings.task.upkeep_cap = 0.0;
    }
    for w in crate::logging::init(&cfg.log) {
        tracing::warn!("{w}");
    }
    // Blocking work (a send to a stalled writer, malloc_trim, joining threads) is rare and
    // short: a few threads do, where tokio's default allows 512 (the unit's TasksMax).
    let rt = if cfg.serial {
        tokio::runtime::Builder::new_current_thread().max_blocking_threads(4).enable_all().build()
    } else {
        // Two workers: sampling never shares its thread with analysis of a large batch.
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(4)
            .enable_all()
            .build()
    };
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cgmon-rs: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let code = rt.block_on(run_main(*cfg));
    // The writer thread and blocking sends are done or abandoned; do not wait for them.
    rt.shutdown_timeout(Duration::from_millis(100));
    ExitCode::from(code)
}

/// What SIGUSR2 does in place of cgmon's `runtime.GC()`: hands the heap's free memory back
/// to the OS (glibc keeps freed memory for reuse, so RSS stays at its high-water mark after
/// a burst of flows), and says what RSS that saved.
fn release_free_memory() -> String {
    let before = crate::metrics::rss_bytes();
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks the allocator's own free lists, under its lock.
    unsafe {
        libc::malloc_trim(0);
    }
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    match (before, crate::metrics::rss_bytes()) {
        (Some(b), Some(a)) => format!(
            "free heap memory returned to the OS: RSS {:.1} MiB -> {:.1} MiB",
            mib(b),
            mib(a)
        ),
        _ => "free heap memory returned to the OS".into(),
    }
}

/// What the running program is told from outside (signals, in the program itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Stop (SIGINT, SIGTERM); a second one during the shutdown exits at once.
    Stop(&'static str),
    /// Stop because the caller has what it came for (`diagnose`: every flow it watched
    /// ended). Not a signal: one that comes while the program already stops (its
    /// `-run-duration` ran out first) is ignored, and the shutdown finishes.
    Finished(&'static str),
    /// Rotate and reopen the output (SIGHUP).
    Reopen,
    /// Log the internal metrics (SIGUSR1).
    Report,
    /// Give free heap memory back to the OS, then report (SIGUSR2).
    Trim,
}

/// Where the program's sockets come from: the dump source, and the destroy listener when
/// one could be opened, of the first namespace sampled; the others with `--netns`.
pub struct Sources {
    /// Dumps.
    pub dump: Source,
    /// Destroy events.
    pub destroy: Option<DestroyListener<Source>>,
    /// More network namespaces, and those that come and go (`--netns`).
    pub netns: Option<namespaces::Namespaces>,
    /// The first namespace's TCP segment counters, when read (see `sampler::activity`).
    pub activity: Option<Activity>,
}

/// Why the kernel's sockets could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The kernel refused a receive buffer size a flag asked for (a usage error).
    #[error("{0}")]
    Buffer(std::io::Error),
    /// A namespace `--netns` names does not exist (a usage error).
    #[error("--netns: {0}")]
    Netns(crate::units::ValueError),
    /// No sock_diag socket could be made.
    #[error("cannot open a sock_diag netlink socket: {0}")]
    Socket(std::io::Error),
    /// The first scan of the namespaces failed.
    #[error("{0}")]
    Scan(namespaces::ScanError),
}

impl OpenError {
    fn of_socket(e: std::io::Error) -> Self {
        if BufferRefused::of(&e).is_some() { Self::Buffer(e) } else { Self::Socket(e) }
    }

    /// The exit status it gives: a usage error's, or a failure's.
    pub fn exit_status(&self) -> u8 {
        match self {
            Self::Buffer(_) | Self::Netns(_) => EXIT_USAGE,
            Self::Socket(_) | Self::Scan(_) => EXIT_FAILURE,
        }
    }

    /// The settings behind it, as `CGMON_*` variables may have given them.
    pub fn flags(&self) -> &'static [&'static str] {
        match self {
            Self::Buffer(_) => &["receive_bufsize", "receive_bufsize_force"],
            Self::Netns(_) => &["netns"],
            Self::Socket(_) | Self::Scan(_) => &[],
        }
    }
}

impl Sources {
    /// The kernel's sockets the settings ask for: the monitor's own namespace's, or with
    /// `--netns` the first scan's and a scanner for those that come and go. The monitor and
    /// `diagnose` both start here. Call within a tokio runtime.
    ///
    /// # Errors
    /// See [`OpenError`]; each names the bad value.
    pub fn open(s: &Settings, metrics: &Arc<Metrics>) -> Result<Self, OpenError> {
        crate::netns::check_listed(&s.netns, &crate::netns::Roots::default())
            .map_err(OpenError::Netns)?;
        if s.netns != crate::netns::Which::Own {
            // The receive-buffer flags are checked once here, so that a refusal is the
            // usage error it is rather than one per namespace.
            drop(NetlinkSource::open(s.socket).map_err(OpenError::of_socket)?);
            return namespaces_from_start(s, metrics).map_err(OpenError::Scan);
        }
        let own = open_space(None, "host", s.socket, s.sampler.filter.clone())
            .map_err(OpenError::of_socket)?;
        Ok(Sources { activity: own.activity, ..Sources::own(own.dump, own.destroy) })
    }

    /// The monitor's own namespace only, walked by every full dump (no counters: a replayed
    /// source's namespace has none).
    pub fn own(dump: Source, destroy: Option<DestroyListener<Source>>) -> Self {
        Self { dump, destroy, netns: None, activity: None }
    }
}

/// Opens the kernel's sockets, turns signals into events, and runs; the exit status.
async fn run_main(cfg: Config) -> u8 {
    let s = cfg.settings;
    let metrics = Arc::new(Metrics::new(s.task.interval));
    // Before any stage starts: the process walker, spawned before the poll task, spends the
    // budget from its first batch. (The poll task sets the same share again, for the tests
    // that start it alone.)
    metrics.budget.set_share(s.task.cpu_budget);
    // The spool before the files: a --spool-dir that cannot be had is a usage error that
    // has not yet moved the last run's output aside.
    if let Some(d) = s.sink.as_ref().and_then(|c| c.spool_dir.as_ref())
        && let Err(e) = crate::sink::spool::prepare(d)
    {
        let from = cfg.env.suffix(&["spool_dir"]);
        eprintln!("cgmon-rs: --spool-dir {}: {e}{from}", d.display());
        return EXIT_USAGE;
    }
    // Outputs first: a bad -writer-dir is a usage error, found before anything is sampled.
    // The samples file's directory is checked before the records' file opens, so that a bad
    // one does not move an earlier run's records aside for a run that never starts.
    let samples_from = || cfg.env.suffix(&["samples_out"]);
    if let Some(fc) = &s.samples_out
        && let Err(e) = crate::samples_out::check(fc)
    {
        eprintln!("cgmon-rs: --samples-out: {e}{}", samples_from());
        return EXIT_USAGE;
    }
    let w = match Writer::open(s.writer.clone(), metrics.clone()) {
        Ok(w) => w,
        Err(e) => {
            // The error names the path; which flag gave it, and whether a CGMON_* variable
            // gave that, only the configuration knows.
            let (flag, from) = match s.writer.target {
                Target::File(_) => ("-writer-dir", cfg.env.suffix(&["dir", "file"])),
                Target::Stdout => ("stdout", String::new()),
            };
            eprintln!("cgmon-rs: {flag}: {e}{from}");
            return EXIT_USAGE;
        }
    };
    let w = match s.samples_out.clone().map(|fc| SamplesOut::open(fc, metrics.clone())) {
        None => w,
        Some(Ok(samples)) => w.with_consumer(Box::new(samples)),
        Some(Err(e)) => {
            eprintln!("cgmon-rs: --samples-out: {e}{}", samples_from());
            return EXIT_USAGE;
        }
    };
    let events = match signal_events() {
        Ok(ev) => ev,
        Err(e) => {
            eprintln!("cgmon-rs: cannot install signal handlers: {e}");
            return EXIT_FAILURE;
        }
    };
    let sources = match Sources::open(&s, &metrics) {
        Ok(src) => src,
        Err(e) => {
            eprintln!("cgmon-rs: {e}{}", cfg.env.suffix(e.flags()));
            return e.exit_status();
        }
    };
    run(s, sources, w, events, metrics).await
}

/// With `--netns`: the first scan's namespaces, and the rescans from then on.
fn namespaces_from_start(
    s: &Settings,
    metrics: &Arc<Metrics>,
) -> Result<Sources, namespaces::ScanError> {
    let mut scanner =
        namespaces::Scanner::new(s.netns.clone(), s.socket, s.sampler.clone(), metrics.clone());
    let start = scanner.start()?;
    let (tx, updates) = tokio::sync::mpsc::channel(64);
    tokio::spawn(scanner.run(s.netns_rescan, tx));
    let namespaces::Start { first, others, names } = start;
    let netns = namespaces::Namespaces { first: first.label, others, updates, names };
    Ok(Sources {
        dump: first.dump,
        destroy: first.destroy,
        netns: Some(netns),
        activity: first.activity,
    })
}

/// The signals the program answers, as events. SIGUSR2 too: cgmon answers it (with a GC and
/// the metrics), so scripts send it; left at its default action it would kill us.
fn signal_events() -> std::io::Result<tokio::sync::mpsc::Receiver<Event>> {
    let mut sigs = [
        (signal(SignalKind::interrupt())?, Event::Stop("SIGINT")),
        (signal(SignalKind::terminate())?, Event::Stop("SIGTERM")),
        (signal(SignalKind::hangup())?, Event::Reopen),
        (signal(SignalKind::user_defined1())?, Event::Report),
        (signal(SignalKind::user_defined2())?, Event::Trim),
    ];
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let [a, b, c, d, e] = &mut sigs;
            let ev = tokio::select! {
                _ = a.0.recv() => a.1,
                _ = b.0.recv() => b.1,
                _ = c.0.recv() => c.1,
                _ = d.0.recv() => d.1,
                _ = e.0.recv() => e.1,
            };
            // A full queue (a storm) loses nothing that matters: a reopen is remembered by
            // the writer, and one stop is enough.
            if tx.try_send(ev).is_err() && tx.is_closed() {
                break;
            }
        }
    });
    Ok(rx)
}

/// Runs the pipeline on `sources` into `writer` until a [`Event::Stop`], `-run-duration`,
/// or a fatal error; returns the exit status. Tests run it in-process on a replayed source.
/// The wiring only: each part is made in `app/parts.rs`.
pub async fn run(
    mut s: Settings,
    sources: Sources,
    writer: Writer,
    mut events: tokio::sync::mpsc::Receiver<Event>,
    metrics: Arc<Metrics>,
) -> u8 {
    let Ok(Polled { spaces, updates, names }) = polled(&s, sources) else { return EXIT_USAGE };
    let mut acfg = analyzer_config(&s);
    if let Some(x) = &mut s.ipfix {
        x.realtime_offset_ns = acfg.analysis.realtime_offset_ns;
    }
    let Ok(dests) = destinations(&s) else { return EXIT_USAGE };
    let views = Views { accounts: Arc::default(), services: Arc::default(), dests };
    let tracker =
        attributed(Tracker::new(tracker_config(&s, &spaces)), s.process, &views.dests, &metrics);
    let (query_tx, query_rx) = tokio::sync::mpsc::channel(16);
    let (http, ring) = match web(&s, &mut acfg, names, query_tx, &views, &metrics) {
        Ok(w) => w,
        Err(code) => return code,
    };
    let (ended_tx, ended_rx) = tokio::sync::mpsc::channel(ENDED_CHANNEL_CAPACITY);
    let (wtx, wrx) = std::sync::mpsc::sync_channel(RECORDS_CHANNEL_CAPACITY);
    let reopen = writer::ReopenRequest::default();
    let (writer, sink, ipfix) = match outputs(&s, writer, &views, ring, wrx, &reopen, &metrics) {
        Ok(w) => w,
        Err(code) => return code,
    };
    let (stop, stop_rx) = watch::channel(false);
    let wiring = poll::Wiring {
        stop: stop_rx,
        ended_tx,
        metrics: metrics.clone(),
        accounts: http.is_some().then(|| views.accounts.clone()),
        queries: http.is_some().then_some(query_rx),
    };
    let polled =
        poll::run_spaces(tracker, spaces, updates, s.task.clone(), wiring, systemd_hooks());
    let poll = tokio::spawn(polled);
    let analyzer = tokio::spawn(analyzer::run(acfg, ended_rx, wtx.clone(), metrics.clone()));
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "{}", s.summary);
    for w in &s.warnings {
        tracing::warn!("{w}");
    }
    let stage = Running { poll, analyzer, writer, sink, ipfix, stop, http };
    let (code, stage) = until_stop(&s, &mut events, stage, &reopen, &wtx, &metrics).await;
    drop(wtx); // the analyzer's sender is the writer's last one
    let code = shut_down(&s, &mut events, stage, code).await;
    exit_status(code, &metrics)
}

/// The writer's thread.
type WriterThread = std::thread::JoinHandle<Result<(), WriterError>>;

/// The sink's thread, which says at the end whether records were dropped.
type SinkThread = std::thread::JoinHandle<Result<(), crate::sink::SinkError>>;

/// The IPFIX exporter's thread.
type IpfixThread = std::thread::JoinHandle<()>;

/// The running stages.
struct Running {
    /// The poll task, which owns the tracker.
    poll: tokio::task::JoinHandle<Result<crate::tracker::TrackerStats, crate::edges::StageError>>,
    analyzer: tokio::task::JoinHandle<Result<(), crate::edges::StageError>>,
    writer: std::thread::JoinHandle<Result<(), WriterError>>,
    /// The ClickHouse sink's thread: it ends after the writer, which holds its sender.
    sink: Option<SinkThread>,
    /// The IPFIX exporter's thread: it ends after the writer too.
    ipfix: Option<IpfixThread>,
    stop: watch::Sender<bool>,
    http: Option<crate::http::Server>,
}

/// Answers events until a stop, `-run-duration`, or the sampling stage's end; returns the
/// status so far (1 when sampling failed) and the stages, the sampling one taken when it
/// ended.
async fn until_stop(
    s: &Settings,
    events: &mut tokio::sync::mpsc::Receiver<Event>,
    mut stage: Running,
    reopen: &writer::ReopenRequest,
    wtx: &std::sync::mpsc::SyncSender<Msg>,
    metrics: &Metrics,
) -> (u8, (Running, bool)) {
    let duration = async {
        if s.run_duration.is_zero() {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(s.run_duration).await;
    };
    tokio::pin!(duration);
    loop {
        tokio::select! {
            ev = events.recv() => match ev {
                Some(Event::Stop(why) | Event::Finished(why)) => {
                    tracing::info!("{why}: stopping");
                    break;
                }
                None => { tracing::info!("no more events: stopping"); break; }
                Some(Event::Reopen) => {
                    tracing::info!("SIGHUP: rotating and reopening the output");
                    // Remembered even when the channel is full: the writer reopens once
                    // it has caught up. The message only wakes it sooner.
                    reopen.request();
                    let _ = wtx.try_send(Msg::Reopen);
                }
                Some(Event::Report) => {
                    tracing::info!("received SIGUSR1; internal metrics:\n{}", metrics.report());
                }
                Some(Event::Trim) => {
                    let freed = release_free_memory();
                    tracing::info!("received SIGUSR2; {freed}; internal metrics:\n{}",
                        metrics.report());
                }
            },
            () = &mut duration => { tracing::info!("-run-duration reached: stopping"); break; }
            r = &mut stage.poll => {
                let code = if stage_ok("sampling", r.map(|r| r.map(drop))) { 0 } else { EXIT_FAILURE };
                return (code, (stage, true));
            }
        }
    }
    (0, (stage, false))
}

/// Stops sampling and drains the analyzer and the writer within `-run-shutdown-timeout`; a
/// second stop exits at once. Returns the status.
async fn shut_down(
    s: &Settings,
    events: &mut tokio::sync::mpsc::Receiver<Event>,
    (stage, tracker_done): (Running, bool),
    code: u8,
) -> u8 {
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    if let Some(h) = stage.http {
        // Its thread joins at once: the stop closes the listener and every connection.
        tokio::task::spawn_blocking(move || h.stop()).await.ok();
    }
    let _ = stage.stop.send(true);
    let (poll, analyzer, writer_thread) = (stage.poll, stage.analyzer, stage.writer);
    let (sink_thread, ipfix_thread) = (stage.sink, stage.ipfix);
    let drain = async {
        let mut ok = code == 0;
        if !tracker_done {
            ok &= stage_ok("sampling", poll.await.map(|r| r.map(drop)));
        }
        ok &= stage_ok("analyzer", analyzer.await);
        let writer = tokio::task::spawn_blocking(move || writer_thread.join()).await;
        ok &= match writer {
            Ok(Ok(r)) => stage_ok("writer", Ok::<_, &str>(r)),
            _ => stage_ok::<WriterError>("writer", Err("the thread panicked")),
        };
        if let Some(t) = ipfix_thread {
            // Its sends never block: it ends as soon as it has sent what it holds.
            ok &= match tokio::task::spawn_blocking(move || t.join()).await {
                Ok(Ok(())) => true,
                _ => stage_ok::<&str>("IPFIX exporter", Err("the thread panicked")),
            };
        }
        if let Some(t) = sink_thread {
            ok &= match tokio::task::spawn_blocking(move || t.join()).await {
                Ok(Ok(r)) => stage_ok("ClickHouse sink", Ok::<_, &str>(r)),
                _ => stage_ok::<crate::sink::SinkError>(
                    "ClickHouse sink",
                    Err("the thread panicked"),
                ),
            };
        }
        if ok { 0 } else { EXIT_FAILURE }
    };
    let second_stop = async {
        while let Some(ev) = events.recv().await {
            if matches!(ev, Event::Stop(_)) {
                return;
            }
        }
        std::future::pending::<()>().await;
    };
    tokio::select! {
        code = drain => code,
        () = tokio::time::sleep(s.shutdown_timeout) => {
            tracing::error!("shutdown did not finish within -run-shutdown-timeout {}; records may be lost",
                format_duration(s.shutdown_timeout));
            EXIT_FAILURE
        }
        () = second_stop => { tracing::warn!("second signal: exiting at once"); EXIT_FAILURE }
    }
}

/// The status after a drain that gave `code`: records lost along the way (pushed out of a
/// full backlog, or dropped while the analyzer was behind) fail the run as surely as
/// records left unwritten at the end, so that a wrapper script or systemd does not take an
/// incomplete output for a complete one.
fn exit_status(code: u8, metrics: &Metrics) -> u8 {
    let f = stop::StopFigures::of(metrics);
    tracing::debug!("{}", metrics.report());
    tracing::info!(
        written = f.written,
        lost = f.lost,
        dropped = f.dropped,
        sink_dropped = f.sink_dropped,
        destroy_lost = f.destroy_lost,
        "{}",
        f.line()
    );
    let code = if code == 0 && f.missing() > 0 {
        tracing::error!(
            missing = f.missing(),
            "records were lost during the run (or connection ends, to full destroy buffers): \
             exit status 1"
        );
        EXIT_FAILURE
    } else {
        code
    };
    if code == 0 {
        tracing::info!("successful termination");
    }
    code
}

/// systemd's hooks after each dump: READY=1 after the first good one, WATCHDOG=1 at a
/// quarter of the watchdog's period.
fn systemd_hooks() -> impl FnMut(DumpOutcome) + Send {
    let watchdog = sd_notify::watchdog_enabled();
    let mut ready = false;
    let mut last_ping = Instant::now();
    move |o: DumpOutcome| {
        if o == DumpOutcome::Ok && !ready {
            ready = true;
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
        }
        if let Some(wd) = watchdog
            && last_ping.elapsed() >= wd / 4
        {
            last_ping = Instant::now();
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
        }
    }
}

/// Logs how a stage ended; true when it ended well. `outer` is the task's own failure
/// (a panic), the inner result the stage's.
fn stage_ok<E: std::fmt::Display>(
    stage: &str,
    outer: Result<Result<(), E>, impl std::fmt::Display>,
) -> bool {
    match outer {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::error!("{stage} stopped with an error: {e}");
            false
        }
        Err(e) => {
            tracing::error!("{stage} failed: {e}");
            false
        }
    }
}
