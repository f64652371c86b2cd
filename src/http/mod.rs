//! `-run-http-server`: the monitor's own state over HTTP (cgmon's status page), Prometheus
//! metrics, and the active flows. Read-only: no endpoint changes state. Handlers read
//! atomics, or ask the poll task (which answers between dumps), so serving never blocks
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
//! - `GET /flows?order=busy&offset=N&idle=0`: the same, busiest first (or by RTT,
//!   retransmits, age) at an offset, idle flows left out with `idle=0`.
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

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query as Query_, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, oneshot};

use crate::locks::Locked;
use crate::metrics::Metrics;

pub mod auth;
mod conn;
pub mod flows;
mod gather;
pub mod prom;
pub mod status;
pub mod web;

use crate::tracker::views::{DEFAULT_PAGE, MAX_PAGE, Query, RECENT_SAMPLES};
use conn::serve_app;
pub use conn::{Limits, bind};
use flows::view;
pub use status::status_page;

#[derive(Clone)]
struct Ctx {
    metrics: Arc<Metrics>,
    healthy_within: Duration,
    registry: Arc<Registry>,
    queries: mpsc::Sender<Query>,
    netns: Option<Arc<std::sync::Mutex<Vec<String>>>>,
    accounts: Arc<std::sync::Mutex<Vec<crate::tracker::accounts::Account>>>,
    services: Arc<std::sync::Mutex<crate::who::services::Services>>,
    dests: Arc<std::sync::Mutex<crate::who::dests::Dests>>,
    recent: Arc<crate::recent::Recent>,
    analysis: Arc<crate::analysis::AnalyzerConfig>,
}

impl Ctx {
    /// The index of the sampled namespace `name` (`?netns=`).
    ///
    /// # Errors
    /// None is so named: the message for a 400.
    fn netns_index(&self, name: Option<&str>) -> Result<Option<u32>, BadRequest> {
        let Some(name) = name else { return Ok(None) };
        let found = self.netns.as_ref().and_then(|n| {
            let names = n.locked();
            names.iter().position(|x| x == name)
        });
        match found {
            Some(i) => Ok(Some(i as u32)),
            None => Err(BadRequest(format!("no sampled network namespace named {name:?}"))),
        }
    }

    /// The name of namespace `ns`, when several are sampled.
    fn netns_name(&self, ns: u32) -> Option<String> {
        let names = self.netns.as_ref()?.locked();
        names.get(ns as usize).cloned()
    }
}

/// What the server serves.
pub struct Served {
    /// The monitor's counters.
    pub metrics: Arc<Metrics>,
    /// The Prometheus registry.
    pub registry: Registry,
    /// Questions to the poll task.
    pub queries: mpsc::Sender<Query>,
    /// The sampling interval (for `/healthz`).
    pub interval: Duration,
    /// Network namespace names by index, when several are sampled (`--netns`).
    pub netns: Option<Arc<std::sync::Mutex<Vec<String>>>>,
    /// The per-service accounts the tracker publishes after every dump.
    pub accounts: Arc<std::sync::Mutex<Vec<crate::tracker::accounts::Account>>>,
    /// Service names of cgroups, for `/metrics` and the web view alike, and shared with the
    /// writer's records (one cache, one walk of the cgroup tree).
    pub services: Arc<std::sync::Mutex<crate::who::services::Services>>,
    /// Destination names, shared with the writer (`--dest-map`).
    pub dests: Arc<std::sync::Mutex<crate::who::dests::Dests>>,
    /// The recently ended flows the analyzer keeps.
    pub recent: Arc<crate::recent::Recent>,
    /// How records are computed (for a live flow's provisional record, and the clock
    /// offset of its charts).
    pub analysis: crate::analysis::AnalyzerConfig,
    /// `--http-token-file`: every request but /healthz must carry it ([`auth`]).
    pub token: Option<crate::units::Secret>,
}

async fn flow_durations(State(c): State<Ctx>) -> String {
    c.metrics.flow_durations.render()
}

async fn health(State(c): State<Ctx>) -> Html<String> {
    let names = c.netns.as_ref().map(|n| n.locked().clone());
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

/// A request the server cannot answer as asked: the client's error. Its message, one line
/// naming the bad value, is the 400's body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadRequest(pub String);

impl IntoResponse for BadRequest {
    fn into_response(self) -> Response {
        (StatusCode::BAD_REQUEST, self.0 + "\n").into_response()
    }
}

/// `/flows`' query string.
#[derive(Debug, serde::Deserialize)]
struct PageQuery {
    limit: Option<usize>,
    after: Option<u64>,
    netns: Option<String>,
    order: Option<String>,
    offset: Option<usize>,
    idle: Option<u8>,
}

async fn flows(State(c): State<Ctx>, q: Result<Query_<PageQuery>, QueryRejection>) -> Response {
    let bad = |msg: String| BadRequest(msg).into_response();
    let q = match q {
        Ok(Query_(q)) => q,
        Err(e) => return bad(e.to_string()),
    };
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 || limit > MAX_PAGE {
        return bad(format!("invalid limit {limit}: 1 to {MAX_PAGE}"));
    }
    let netns = match c.netns_index(q.netns.as_deref()) {
        Ok(ns) => ns,
        Err(e) => return e.into_response(),
    };
    match flows::Paging::of(q.order.as_deref(), q.idle, q.after, q.offset) {
        Ok(flows::Paging::Cursor) => {}
        Ok(flows::Paging::Ordered { order, idle }) => {
            let offset = q.offset.unwrap_or(0);
            let p = flows::Ordered { order, idle, offset, limit, netns };
            return ordered_flows(&c, p, q.netns.as_deref()).await;
        }
        Err(e) => return e.into_response(),
    }
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
    let filter = flows::netns_param(q.netns.as_deref());
    if let Some(Some(last)) = next
        && let Ok(v) = format!("</flows?limit={limit}&after={last}{filter}>; rel=\"next\"").parse()
    {
        h.insert(header::LINK, v);
    }
    r
}

/// The host view of the poll task's flows: `offset..offset + limit` in `order` (`page`),
/// each with its `keep` newest samples, judged so far as the host page judges them.
async fn overview(
    c: &Ctx,
    (order, offset, limit): (crate::tracker::views::Order, usize, usize),
    keep: usize,
    filter: crate::tracker::views::Filter,
) -> Result<crate::tracker::views::Overview, Response> {
    let judge = crate::analysis::diagnosis::so_far_index;
    ask(c, |tx| Query::Overview { order, offset, limit, keep, filter, judge, tx }).await
}

/// `/flows` in an order of the host page's (`?order=`), or without idle flows
/// (`?idle=0`): a page at an offset, the next one in the `Link` header.
async fn ordered_flows(c: &Ctx, p: flows::Ordered, netns_name: Option<&str>) -> Response {
    let filter =
        crate::tracker::views::Filter { slots: None, verdict: None, idle: p.idle, netns: p.netns };
    let ov = match overview(c, (p.order, p.offset, p.limit), 1, filter).await {
        Ok(ov) => ov,
        Err(r) => return r,
    };
    let offset_ns = c.analysis.realtime_offset_ns;
    let body: Vec<_> = (ov.page.iter().zip(&ov.netns))
        .map(|(f, &ns)| view(f, false, c.netns_name(ns).as_deref(), offset_ns))
        .collect();
    let listed = if p.idle { ov.matched } else { ov.matched - ov.idle };
    let mut r = Json(body).into_response();
    let h = r.headers_mut();
    h.insert("x-total-count", ov.matched.into());
    h.insert("x-idle-count", ov.idle.into());
    if let Some(link) = p.next(listed, netns_name)
        && let Ok(v) = link.parse()
    {
        h.insert(header::LINK, v);
    }
    r
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

/// How long `/healthz` stays degraded after destroy events were lost.
const DESTROY_LOSS_DEGRADES: Duration = Duration::from_secs(60);

/// Whether destroy events were lost within [`DESTROY_LOSS_DEGRADES`].
fn destroy_loss_recent(m: &Metrics) -> bool {
    let at = m.destroy_lost_at_ns.get();
    at != 0
        && crate::clock::monotonic_ns().saturating_sub(at) < DESTROY_LOSS_DEGRADES.as_nanos() as u64
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
        // Destroy events lost lately: connections end unrecorded or without their final
        // counters while it lasts; degraded, not down (sampling works).
        Some(age) if age <= c.healthy_within && destroy_loss_recent(&c.metrics) => (
            StatusCode::OK,
            format!(
                "degraded: last dump {} ms ago; destroy events being lost ({} so far, \
                 cgmon_destroy_events_lost_total): raise --destroy-buffer\n",
                age.as_millis(),
                c.metrics.destroy_events_lost.get()
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

/// Accepts until `stop` fires (or its sender goes), within `limits`.
async fn serve(l: tokio::net::TcpListener, s: Served, limits: Limits, stop: oneshot::Receiver<()>) {
    let metrics = s.metrics.clone();
    serve_app(l, router(s), metrics, limits, stop).await;
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
        // Requests are pushed at us (scrapes, pages): out of the CPU budget's upkeep.
        let m = Arc::clone(&s.metrics);
        let _pushed = m.budget.pushed_thread();
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
        dests: s.dests,
        recent: s.recent,
        analysis: Arc::new(s.analysis),
    };
    let [root, health_, flow_page, flow_live, asset, metrics_, flows_, flow_, healthz_, durations] =
        PATHS;
    let token = s.token.map(|t| Arc::<str>::from(t.0));
    let app = Router::new()
        .route(root, get(gather::host))
        .route(health_, get(health))
        .route(flow_page, get(gather::flow_page))
        .route(flow_live, get(gather::flow_live))
        .route(asset, get(gather::asset))
        .route(metrics_, get(metrics))
        .route(flows_, get(flows))
        .route(flow_, get(flow))
        .route(healthz_, get(healthz))
        .route(durations, get(flow_durations))
        .with_state(ctx);
    match token {
        None => app,
        Some(t) => app.layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let refused = auth::check(&t, &req);
                async move {
                    match refused {
                        Some(r) => r,
                        None => next.run(req).await,
                    }
                }
            },
        )),
    }
}

/// Every path the server answers; `--help` lists them all (checked in the CLI's tests).
pub const PATHS: [&str; 10] = [
    "/",
    "/health",
    "/flow/{cookie}",
    "/flow/{cookie}/live",
    "/static/{file}",
    "/metrics",
    "/flows",
    "/flows/{cookie}",
    "/healthz",
    "/flow-duration-histogram",
];

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
        assert_eq!(m.http.refused.get(), 1);
        assert_eq!(m.http.evicted.get(), 0);
        // The write timeout ends the slow response: the client gets less than the whole.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (n, closed) = read_to_close(&mut slow, Duration::from_secs(10)).await;
        assert!(closed && n < 64 << 20, "cut after {n} bytes");
        assert_eq!(m.http.timeouts.get(), 1);
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
        assert_eq!(m.http.evicted.get(), 1);
        assert_eq!(m.http.refused.get(), 1);
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
