//! `-run-http-server`: the monitor's own state over HTTP (cgmon's status page), Prometheus
//! metrics, and the active flows. Read-only: no endpoint changes state. Handlers read
//! atomics, or ask the tracker task (which answers between dumps), so serving never blocks
//! sampling.
//!
//! The server runs on a thread and a single-threaded runtime of its own ([`spawn`]), so
//! parsing requests and serialising large responses never take a worker from the sampling
//! runtime. It holds under abuse: a header-read timeout, an idle timeout, a write timeout
//! and a cap on concurrent connections ([`Limits`]). At the cap a newcomer takes the slot
//! of the oldest connection that is idle or has not finished sending its request head, so
//! that clients which connect and stall (or park idle keep-alives) cannot lock scrapers
//! out; a connection in the middle of a response is never closed for a newcomer, and a
//! response that the client reads too slowly is ended by the write timeout, so slow
//! readers cannot hold the slots either. Only when every slot is mid-response is a
//! newcomer closed at once (counted). Accept errors are logged (rate-limited) and
//! counted.
//!
//! - `GET /`: an HTML page (no JavaScript): pipeline stages with calls and min/mean/max/stddev
//!   time, flows, churn, records, destroy events, memory.
//! - `GET /metrics`: Prometheus text format ([`prom`]).
//! - `GET /flows?limit=N&after=COOKIE`: active flows with their latest sample, as JSON, a
//!   page at a time in cookie order (default 1,000, at most 10,000); a `Link: rel="next"`
//!   header names the next page and `X-Total-Count` the active flows. 429 with
//!   `Retry-After` when too many questions wait for the tracker; 503 only when sampling
//!   has stopped.
//! - `GET /flows/{cookie}`: one active flow with its recent samples (404 when not active).
//! - `GET /healthz`: 200 when the last dump succeeded within three intervals (or 10 s) and
//!   the output is not failing, 503 otherwise.
//! - `GET /flow-duration-histogram`: cgmon's plain-text histogram of flow durations
//!   ([`crate::metrics::durations`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query as Query_, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, oneshot};

use crate::metrics::Metrics;

pub mod flows;
mod gather;
pub mod prom;
pub mod status;
pub mod web;

use crate::tracker::views::{DEFAULT_PAGE, MAX_PAGE, Query, RECENT_SAMPLES};
use flows::view;
pub use status::status_page;

/// Parses a listen address: `host:port`, `[v6]:port`, or Go's `:port` (every interface).
///
/// # Errors
/// The text is not an address with a port.
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let full = if s.starts_with(':') { format!("[::]{s}") } else { s.to_string() };
    full.parse().map_err(|_| {
        format!("invalid value {s:?} for '--run-http-server': want host:port, e.g. 127.0.0.1:9090")
    })
}

#[derive(Clone)]
struct Ctx {
    metrics: Arc<Metrics>,
    healthy_within: Duration,
    registry: Arc<Registry>,
    queries: mpsc::Sender<Query>,
    netns: Option<Arc<std::sync::Mutex<Vec<String>>>>,
    accounts: Arc<std::sync::Mutex<Vec<crate::tracker::accounts::Account>>>,
    services: Arc<std::sync::Mutex<crate::services::Services>>,
    recent: Arc<crate::recent::Recent>,
    analysis: Arc<crate::analyzer::AnalyzerConfig>,
}

impl Ctx {
    /// The index of the sampled namespace `name` (`?netns=`).
    ///
    /// # Errors
    /// None is so named: the message for a 400.
    fn netns_index(&self, name: Option<&str>) -> Result<Option<u32>, String> {
        let Some(name) = name else { return Ok(None) };
        let found = self.netns.as_ref().and_then(|n| {
            let names = n.lock().unwrap_or_else(|e| e.into_inner());
            names.iter().position(|x| x == name)
        });
        match found {
            Some(i) => Ok(Some(i as u32)),
            None => Err(format!("no sampled network namespace named {name:?}\n")),
        }
    }

    /// The name of namespace `ns`, when several are sampled.
    fn netns_name(&self, ns: u32) -> Option<String> {
        let names = self.netns.as_ref()?.lock().unwrap_or_else(|e| e.into_inner());
        names.get(ns as usize).cloned()
    }
}

/// What the server serves.
pub struct Served {
    /// The monitor's counters.
    pub metrics: Arc<Metrics>,
    /// The Prometheus registry.
    pub registry: Registry,
    /// Questions to the tracker task.
    pub queries: mpsc::Sender<Query>,
    /// The sampling interval (for `/healthz`).
    pub interval: Duration,
    /// Network namespace names by index, when several are sampled (`--netns`).
    pub netns: Option<Arc<std::sync::Mutex<Vec<String>>>>,
    /// The per-service accounts the tracker publishes after every dump.
    pub accounts: Arc<std::sync::Mutex<Vec<crate::tracker::accounts::Account>>>,
    /// Service names of cgroups, for `/metrics` and the web view alike, and shared with the
    /// writer's records (one cache, one walk of the cgroup tree).
    pub services: Arc<std::sync::Mutex<crate::services::Services>>,
    /// The recently ended flows the analyzer keeps.
    pub recent: Arc<crate::recent::Recent>,
    /// How records are computed (for a live flow's provisional record, and the clock
    /// offset of its charts).
    pub analysis: crate::analyzer::AnalyzerConfig,
}

async fn flow_durations(State(c): State<Ctx>) -> String {
    c.metrics.flow_durations.render()
}

async fn health(State(c): State<Ctx>) -> Html<String> {
    let names = c.netns.as_ref().map(|n| n.lock().unwrap_or_else(|e| e.into_inner()).clone());
    Html(status_page(&c.metrics, names.as_deref()))
}

/// OpenMetrics when the client asks for it (Prometheus does), else text format 0.0.4.
async fn metrics(State(c): State<Ctx>, headers: HeaderMap) -> Response {
    let Ok(text) = prom::render(&c.registry) else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    if accept.contains("application/openmetrics-text") {
        (
            [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
            text,
        )
            .into_response()
    } else {
        (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
            prom::to_prometheus_text(&text),
        )
            .into_response()
    }
}

/// Why a question to the tracker got no answer.
fn refused(e: &mpsc::error::TrySendError<Query>) -> Response {
    match e {
        // The queue of questions is full: sampling is fine, only busy answering.
        mpsc::error::TrySendError::Full(_) => (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "1")],
            "too many /flows requests waiting; retry shortly\n",
        )
            .into_response(),
        mpsc::error::TrySendError::Closed(_) => stopped(),
    }
}

fn stopped() -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, "sampling has stopped\n").into_response()
}

async fn ask<T>(c: &Ctx, q: impl FnOnce(oneshot::Sender<T>) -> Query) -> Result<T, Response> {
    let (tx, rx) = oneshot::channel();
    c.queries.try_send(q(tx)).map_err(|e| refused(&e))?;
    rx.await.map_err(|_| stopped())
}

/// `/flows`' query string.
#[derive(Debug, serde::Deserialize)]
struct PageQuery {
    limit: Option<usize>,
    after: Option<u64>,
    netns: Option<String>,
}

async fn flows(State(c): State<Ctx>, q: Result<Query_<PageQuery>, QueryRejection>) -> Response {
    let q = match q {
        Ok(Query_(q)) => q,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 || limit > MAX_PAGE {
        let msg = format!("invalid limit {limit}: 1 to {MAX_PAGE}\n");
        return (StatusCode::BAD_REQUEST, msg).into_response();
    }
    let netns = match c.netns_index(q.netns.as_deref()) {
        Ok(ns) => ns,
        Err(msg) => return (StatusCode::BAD_REQUEST, msg).into_response(),
    };
    let page = match ask(&c, |tx| Query::List { after: q.after, limit, netns, tx }).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let next = (page.flows.len() == limit).then(|| page.flows.last().map(|f| f.key.cookie));
    let body: Vec<_> = page
        .flows
        .iter()
        .zip(&page.netns)
        .map(|(f, &ns)| view(f, false, c.netns_name(ns).as_deref(), c.analysis.realtime_offset_ns))
        .collect();
    let mut r = Json(body).into_response();
    let h = r.headers_mut();
    h.insert("x-total-count", page.total.into());
    let filter = q.netns.as_ref().map_or(String::new(), |n| format!("&netns={}", url_escape(n)));
    if let Some(Some(last)) = next
        && let Ok(v) = format!("</flows?limit={limit}&after={last}{filter}>; rel=\"next\"").parse()
    {
        h.insert(header::LINK, v);
    }
    r
}

/// A query value, percent-encoded where a URL needs it.
pub(crate) fn url_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn flow(State(c): State<Ctx>, Path(cookie): Path<u64>) -> Response {
    let keep = RECENT_SAMPLES;
    match ask(&c, |tx| Query::Flow { cookie, keep, tx }).await {
        Ok(Some((f, ns))) => {
            let offset = c.analysis.realtime_offset_ns;
            Json(view(&f, true, c.netns_name(ns).as_deref(), offset)).into_response()
        }
        Ok(None) => (StatusCode::NOT_FOUND, format!("no active flow with cookie {cookie}\n"))
            .into_response(),
        Err(r) => r,
    }
}

async fn healthz(State(c): State<Ctx>) -> impl IntoResponse {
    if c.metrics.output_failing.get() != 0 {
        // Records wait in the backlog, and past it are lost: not healthy, though sampling
        // goes on.
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "output failing: {} write errors so far, {} records waiting\n",
                c.metrics.write_errors.get(),
                c.metrics.writer_backlog.get()
            ),
        );
    }
    let sink = &c.metrics.sink;
    if sink.enabled.get() != 0 && sink.dropped.get() > 0 && sink.failing.get() != 0 {
        // Records are being dropped for the fleet: not healthy.
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "ClickHouse sink dropping records: {} dropped, {} waiting\n",
                sink.dropped.get(),
                sink.waiting_records.get()
            ),
        );
    }
    match c.metrics.since_last_good_dump() {
        // Records waiting for ClickHouse make the monitor degraded, not unhealthy: they
        // are kept (and spooled) and go out when it answers again.
        Some(age) if age <= c.healthy_within && sink.failing.get() != 0 => (
            StatusCode::OK,
            format!(
                "degraded: last dump {} ms ago; ClickHouse sink failing, {} records waiting\n",
                age.as_millis(),
                sink.waiting_records.get()
            ),
        ),
        Some(age) if age <= c.healthy_within => {
            (StatusCode::OK, format!("ok: last dump {} ms ago\n", age.as_millis()))
        }
        Some(age) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("stale: last good dump {} ms ago\n", age.as_millis()),
        ),
        None => (StatusCode::SERVICE_UNAVAILABLE, "no successful dump yet\n".to_string()),
    }
}

/// The server's bounds (`--http-header-timeout`, `--http-idle-timeout`,
/// `--http-max-connections`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest time a client may take to send a request's headers.
    pub header_timeout: Duration,
    /// A connection that sends and receives nothing for this long is closed.
    pub idle_timeout: Duration,
    /// Most connections served at once (see the module's doc for who gives way).
    pub max_connections: usize,
    /// Longest time a response may take, from its request's head to its last byte
    /// written: a client that reads too slowly loses the connection.
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        // A scraper sends its headers at once and reuses its connection every scrape
        // interval (15-60 s); 60 s idle keeps that, and 64 connections leave room for a few
        // Prometheus servers and browsers while bounding fds and memory.
        Self {
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
            max_connections: 64,
            // The largest response (`/flows?limit=10000`, a few MB) takes well under a
            // second on any link a scraper uses; 30 s is generous for a person's browser
            // and still frees a slot held by a reader that reads a byte a second.
            write_timeout: Duration::from_secs(30),
        }
    }
}

/// Binds `addr` (warning when it is not loopback: there is no authentication).
///
/// # Errors
/// The address cannot be bound.
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    if !addr.ip().is_loopback() {
        tracing::warn!(%addr, "the HTTP server listens beyond loopback, without authentication");
    }
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    // As std's bind does: a restarted monitor rebinds at once over TIME-WAIT connections.
    sock.set_reuse_address(true)?;
    sock.bind(&addr.into())?;
    sock.listen(LISTEN_BACKLOG)?;
    let l: std::net::TcpListener = sock.into();
    l.set_nonblocking(true)?;
    tracing::info!(addr = %l.local_addr()?, "HTTP server listening");
    Ok(l)
}

/// The running server; dropping it (or [`Server::stop`]) stops it.
pub struct Server {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Stops accepting, closes the connections, and waits for the thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Serves on a thread of its own, with its own single-threaded runtime.
///
/// # Errors
/// The thread or its runtime cannot be started.
pub fn spawn(l: std::net::TcpListener, s: Served, limits: Limits) -> std::io::Result<Server> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (stop_tx, stop_rx) = oneshot::channel();
    let thread = std::thread::Builder::new().name("cgmon-http".into()).spawn(move || {
        rt.block_on(async move {
            match tokio::net::TcpListener::from_std(l) {
                Ok(l) => serve(l, s, limits, stop_rx).await,
                Err(e) => tracing::error!(error = %e, "HTTP server cannot start"),
            }
        });
    })?;
    Ok(Server { stop: Some(stop_tx), thread: Some(thread) })
}

fn router(s: Served) -> Router {
    let healthy_within = s.interval.saturating_mul(3).max(Duration::from_secs(10));
    let ctx = Ctx {
        metrics: s.metrics,
        healthy_within,
        registry: Arc::new(s.registry),
        queries: s.queries,
        netns: s.netns,
        accounts: s.accounts,
        services: s.services,
        recent: s.recent,
        analysis: Arc::new(s.analysis),
    };
    Router::new()
        .route("/", get(gather::host))
        .route("/health", get(health))
        .route("/flow/{cookie}", get(gather::flow_page))
        .route("/flow/{cookie}/live", get(gather::flow_live))
        .route("/static/{file}", get(gather::asset))
        .route("/metrics", get(metrics))
        .route("/flows", get(flows))
        .route("/flows/{cookie}", get(flow))
        .route("/healthz", get(healthz))
        .route("/flow-duration-histogram", get(flow_durations))
        .with_state(ctx)
}

/// Connections told to give way that may still be closing while newcomers are accepted.
const EVICTING: usize = 8;

/// A listen(2) backlog for bursts of connections: with std's 128, a burst of a few hundred
/// clients overflowed the accept queue, and a scraper's SYN dropped there waits a second
/// for its retransmission. The kernel caps it at `net.core.somaxconn` (4096 by default).
const LISTEN_BACKLOG: i32 = 1024;

/// The open connections, oldest first, as the accept loop sees them.
#[derive(Default)]
struct Slots {
    open: std::collections::BTreeMap<u64, Arc<Clock>>,
    next: u64,
}

impl Slots {
    /// Connections that hold a slot: open ones not already told to give theirs up.
    fn held(&self) -> usize {
        self.open.values().filter(|c| !c.evicted.load(std::sync::atomic::Ordering::Relaxed)).count()
    }

    /// Tells the oldest connection that is idle or still sending its head to close, and
    /// returns whether one was found.
    fn evict_one(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let victim =
            self.open.values().find(|c| c.busy.load(Relaxed) == 0 && !c.evicted.load(Relaxed));
        match victim {
            Some(c) => {
                c.evicted.store(true, Relaxed);
                c.evict.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Accepts until `stop` fires (or its sender goes), within `limits`.
async fn serve(l: tokio::net::TcpListener, s: Served, limits: Limits, stop: oneshot::Receiver<()>) {
    let metrics = s.metrics.clone();
    serve_app(l, router(s), metrics, limits, stop).await;
}

/// [`serve`] for any router (tests give their own).
async fn serve_app(
    l: tokio::net::TcpListener,
    app: Router,
    metrics: Arc<Metrics>,
    limits: Limits,
    mut stop: oneshot::Receiver<()>,
) {
    let slots = Arc::new(std::sync::Mutex::new(Slots::default()));
    let lock = |s: &std::sync::Mutex<Slots>| {
        // No invariant spans the lock: a poisoned one is still usable.
        s.lock().unwrap_or_else(std::sync::PoisonError::into_inner).held()
    };
    let mut conns = tokio::task::JoinSet::new();
    let mut last_warning: Option<std::time::Instant> = None;
    loop {
        // While connections told to give way have not closed yet (they close within a
        // turn of this runtime), at most EVICTING more are accepted: file descriptors stay
        // within the cap plus that, and a burst of newcomers still drains quickly.
        let room = slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner).open.len()
            < limits.max_connections + EVICTING;
        let accepted = tokio::select! {
            _ = &mut stop => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            r = l.accept(), if room => r,
        };
        match accepted {
            Ok((stream, _)) => {
                let (id, clock) = {
                    let mut sl = slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    if sl.held() >= limits.max_connections && !sl.evict_one() {
                        // Every slot is mid-response: closed at once, before reading a byte.
                        drop(sl);
                        metrics.http_refused.inc();
                        drop(stream);
                        continue;
                    }
                    let clock = Arc::new(Clock::new());
                    let id = sl.next;
                    sl.next += 1;
                    sl.open.insert(id, clock.clone());
                    (id, clock)
                };
                metrics.http_connections.set(lock(&slots) as u64);
                let (app, m, slots) = (app.clone(), metrics.clone(), slots.clone());
                conns.spawn(async move {
                    connection(stream, app, limits, &m, clock).await;
                    let held = {
                        let mut sl =
                            slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        sl.open.remove(&id);
                        sl.held()
                    };
                    m.http_connections.set(held as u64);
                });
            }
            Err(e) => {
                metrics.http_accept_errors.inc();
                if last_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                    last_warning = Some(std::time::Instant::now());
                    tracing::warn!(error = %e, "HTTP server: accept failed");
                }
                // Out of fds (EMFILE) fails every accept until one closes: do not spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    conns.shutdown().await;
}

/// Serves one connection: HTTP/1.1 with keep-alive, under three timeouts kept by a
/// watchdog over the socket's reads and writes (hyper's own header timeout also runs
/// between kept-alive requests, which would close every idle scraper's connection at it):
/// - a request's head must arrive within `header_timeout` of its first byte (the first
///   request, within that of the connection's start), else the connection is dropped;
/// - a response must be written within `write_timeout` of its request's head, else the
///   connection is dropped;
/// - between requests, a connection that sends and receives nothing for `idle_timeout` is
///   closed.
///
/// The accept loop may also tell it to give up its slot ([`Slots::evict_one`]) while it
/// is idle or receiving a head.
async fn connection(
    stream: tokio::net::TcpStream,
    app: Router,
    limits: Limits,
    m: &Metrics,
    clock: Arc<Clock>,
) {
    use hyper_util::rt::TokioIo;
    use std::sync::atomic::Ordering::Relaxed;
    use tower_service::Service as _;
    let io = TokioIo::new(Watched { inner: stream, clock: clock.clone() });
    let on_request = clock.clone();
    let svc = hyper::service::service_fn(move |req| {
        // The head is in: no header timeout until the next request's first byte, and the
        // connection is busy (not to be evicted) until its response's body is dropped.
        on_request.busy.fetch_add(1, Relaxed);
        on_request.response_since.store(on_request.now(), Relaxed);
        on_request.head_since.store(0, Relaxed);
        // The watchdog re-arms for the write timeout.
        on_request.changed.notify_one();
        let guard = Busy(on_request.clone());
        let fut = app.clone().call(req);
        async move {
            let r = fut.await?;
            Ok::<_, std::convert::Infallible>(
                r.map(|b| Body::new(Guarded { inner: b, _guard: guard })),
            )
        }
    });
    let conn = hyper::server::conn::http1::Builder::new().serve_connection(io, svc);
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        let head = clock.head_since.load(Relaxed);
        let busy = clock.busy.load(Relaxed) > 0;
        let deadline = if busy {
            clock.at(clock.response_since.load(Relaxed)) + limits.write_timeout
        } else if head != 0 {
            clock.at(head) + limits.header_timeout
        } else {
            clock.at(clock.activity.load(Relaxed)) + limits.idle_timeout
        };
        tokio::select! {
            _ = conn.as_mut() => break,
            () = clock.changed.notified() => {}
            () = clock.evict.notified() => {
                if clock.busy.load(Relaxed) == 0 {
                    m.http_evicted.inc();
                    break; // a newcomer takes the slot
                }
                // A request's head came in meanwhile: it is served, and the slot stays.
                clock.evicted.store(false, Relaxed);
            }
            () = tokio::time::sleep_until(deadline) => {
                let head = clock.head_since.load(Relaxed);
                let now = tokio::time::Instant::now();
                if clock.busy.load(Relaxed) > 0 {
                    if clock.at(clock.response_since.load(Relaxed)) + limits.write_timeout <= now {
                        m.http_timeouts.inc();
                        break; // read too slowly: dropped
                    }
                    continue;
                }
                if head != 0 && clock.at(head) + limits.header_timeout <= now {
                    m.http_timeouts.inc();
                    break; // half a request: dropped
                }
                let idle = clock.at(clock.activity.load(Relaxed)) + limits.idle_timeout <= now;
                if head == 0 && idle {
                    if closing {
                        break; // the close did not finish: dropped
                    }
                    m.http_timeouts.inc();
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
        }
    }
}

/// Marks its connection busy while a response is being made and written.
///
/// hyper drops a body once it has taken its last frame, which may still sit in hyper's
/// write queue (a whole `Bytes` body is one frame). So the drop only marks the body done,
/// and the connection stops being busy at the next flush of the socket that follows it:
/// hyper flushes the socket only after writing out all it queued.
struct Busy(Arc<Clock>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.body_done.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// A response body that holds its connection's [`Busy`] until hyper has taken all of it
/// (hyper drops the body then, or when the connection goes).
struct Guarded {
    inner: Body,
    _guard: Busy,
}

impl http_body::Body for Guarded {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// When a connection last read or wrote, and since when a request head has been arriving
/// (0: none is), in ns since its start (plus one, so that 0 stays "none").
struct Clock {
    started: tokio::time::Instant,
    activity: std::sync::atomic::AtomicU64,
    head_since: std::sync::atomic::AtomicU64,
    /// When the response being made or written began (its request's head came in).
    response_since: std::sync::atomic::AtomicU64,
    /// Requests whose response is being made or written (0 or 1 with HTTP/1.1).
    busy: std::sync::atomic::AtomicU32,
    /// The response's body is all taken; the next flush ends `busy` (see [`Busy`]).
    body_done: std::sync::atomic::AtomicBool,
    /// Told to give up its slot; not counted as holding one.
    evicted: std::sync::atomic::AtomicBool,
    evict: tokio::sync::Notify,
    /// A request's head came in: the watchdog's deadline changes.
    changed: tokio::sync::Notify,
}

impl Clock {
    fn new() -> Self {
        Self {
            started: tokio::time::Instant::now(),
            activity: std::sync::atomic::AtomicU64::new(0),
            head_since: std::sync::atomic::AtomicU64::new(1),
            response_since: std::sync::atomic::AtomicU64::new(0),
            busy: std::sync::atomic::AtomicU32::new(0),
            body_done: std::sync::atomic::AtomicBool::new(false),
            evicted: std::sync::atomic::AtomicBool::new(false),
            evict: tokio::sync::Notify::new(),
            changed: tokio::sync::Notify::new(),
        }
    }

    fn now(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64 + 1
    }

    fn at(&self, t: u64) -> tokio::time::Instant {
        self.started + Duration::from_nanos(t.saturating_sub(1))
    }
}

/// A socket that keeps its connection's [`Clock`].
struct Watched {
    inner: tokio::net::TcpStream,
    clock: Arc<Clock>,
}

impl tokio::io::AsyncRead for Watched {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::sync::atomic::Ordering::Relaxed;
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            let now = self.clock.now();
            self.clock.activity.store(now, Relaxed);
            // The first bytes since the last request: a new head begins.
            let _ = self.clock.head_since.compare_exchange(0, now, Relaxed, Relaxed);
        }
        r
    }
}

impl tokio::io::AsyncWrite for Watched {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        b: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, b);
        if matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.clock.activity.store(self.clock.now(), std::sync::atomic::Ordering::Relaxed);
        }
        r
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::sync::atomic::Ordering::{AcqRel, Relaxed};
        let r = std::pin::Pin::new(&mut self.inner).poll_flush(cx);
        if matches!(r, std::task::Poll::Ready(Ok(()))) && self.clock.body_done.swap(false, AcqRel) {
            self.clock.busy.fetch_sub(1, Relaxed);
            self.clock.activity.store(self.clock.now(), Relaxed);
        }
        r
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Reads until EOF or an error; returns the bytes read and whether it ended within
    /// `within`.
    async fn read_to_close(s: &mut tokio::net::TcpStream, within: Duration) -> (usize, bool) {
        let mut n = 0;
        let mut b = vec![0u8; 1 << 16];
        let r = tokio::time::timeout(within, async {
            loop {
                match s.read(&mut b).await {
                    Ok(0) | Err(_) => break,
                    Ok(k) => n += k,
                }
            }
        })
        .await;
        (n, r.is_ok())
    }

    #[tokio::test]
    async fn issue_32_a_slot_mid_response_is_kept_a_slow_reader_is_cut_an_idle_one_gives_way() {
        // 64 MB: far more than the kernel's socket buffers hold, so the response stays
        // mid-write while its client does not read.
        let app = Router::new()
            .route("/big", get(|| async { vec![b'x'; 64 << 20] }))
            .route("/small", get(|| async { "ok" }));
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let m = Arc::new(Metrics::default());
        let limits = Limits {
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1,
            write_timeout: Duration::from_millis(1500),
        };
        let (_stop, stop_rx) = oneshot::channel();
        tokio::spawn(serve_app(l, app, m.clone(), limits, stop_rx));
        let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes();
        // A slow reader holds the one slot mid-response: a newcomer is refused, not it.
        let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
        slow.write_all(&get("/big")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut late = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _ = late.write_all(&get("/small")).await;
        let (n, closed) = read_to_close(&mut late, Duration::from_secs(1)).await;
        assert!(closed && n == 0, "refused at once ({n} bytes)");
        assert_eq!(m.http_refused.get(), 1);
        assert_eq!(m.http_evicted.get(), 0);
        // The write timeout ends the slow response: the client gets less than the whole.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (n, closed) = read_to_close(&mut slow, Duration::from_secs(10)).await;
        assert!(closed && n < 64 << 20, "cut after {n} bytes");
        assert_eq!(m.http_timeouts.get(), 1);
        // An idle kept-alive connection gives its slot to a newcomer.
        let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
        idle.write_all(&get("/small")).await.unwrap();
        let mut b = [0u8; 512];
        assert!(idle.read(&mut b).await.unwrap() > 0);
        let mut next = tokio::net::TcpStream::connect(addr).await.unwrap();
        next.write_all(&get("/small")).await.unwrap();
        let k = tokio::time::timeout(Duration::from_secs(1), next.read(&mut b)).await.unwrap();
        assert!(String::from_utf8_lossy(&b[..k.unwrap()]).starts_with("HTTP/1.1 200"));
        let (_, closed) = read_to_close(&mut idle, Duration::from_secs(1)).await;
        assert!(closed, "the idle connection gave way");
        assert_eq!(m.http_evicted.get(), 1);
        assert_eq!(m.http_refused.get(), 1);
    }

    #[test]
    fn a_full_queue_is_busy_and_only_a_closed_one_is_stopped() {
        let (tx, rx) = mpsc::channel::<Query>(1);
        let (otx, _orx) = oneshot::channel();
        tx.try_send(Query::Flow { cookie: 1, keep: 1, tx: otx }).unwrap();
        let (otx, _orx) = oneshot::channel();
        let e = tx.try_send(Query::Flow { cookie: 2, keep: 1, tx: otx }).unwrap_err();
        let r = refused(&e);
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers().get(header::RETRY_AFTER).unwrap(), "1");
        drop(rx);
        let (otx, _orx) = oneshot::channel();
        let e = tx.try_send(Query::Flow { cookie: 3, keep: 1, tx: otx }).unwrap_err();
        assert_eq!(refused(&e).status(), StatusCode::SERVICE_UNAVAILABLE);
    }
}
