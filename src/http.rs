//! `-run-http-server`: the monitor's own state over HTTP (cgmon's status page), Prometheus
//! metrics, and the active flows. Read-only: no endpoint changes state. Handlers read
//! atomics, or ask the tracker task (which answers between dumps), so serving never blocks
//! sampling.
//!
//! - `GET /`: an HTML page (no JavaScript): pipeline stages with calls and min/mean/max/stddev
//!   time, flows, churn, records, destroy events, memory.
//! - `GET /metrics`: Prometheus text format ([`crate::prom`]).
//! - `GET /flows`: active flows with their latest sample, as JSON.
//! - `GET /flows/{cookie}`: one active flow with its recent samples (404 when not active).
//! - `GET /healthz`: 200 when the last dump succeeded within three intervals (or 10 s) and
//!   the output is not failing, 503 otherwise.
//! - `GET /flow-duration-histogram`: cgmon's plain-text histogram of flow durations
//!   ([`crate::metrics::durations`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, oneshot};

use crate::metrics::Metrics;
use crate::tracker::views::{Query, view};

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
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

async fn flow_durations(State(c): State<Ctx>) -> String {
    c.metrics.flow_durations.render()
}

async fn index(State(c): State<Ctx>) -> Html<String> {
    Html(status_page(&c.metrics))
}

/// The status page.
pub fn status_page(m: &Metrics) -> String {
    use std::fmt::Write as _;
    let up = m.uptime().as_secs_f64().max(1e-9);
    let (churn_n, churn_ns) = *m.last_churn.lock().unwrap_or_else(|e| e.into_inner());
    let inst = if churn_ns > 0 { churn_n as f64 / (churn_ns as f64 / 1e9) } else { 0.0 };
    let mut p = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>cgmon-rs</title>\
         <style>td,th{{padding:2px 10px;text-align:right}}th:first-child,td:first-child{{text-align:left}}</style>\
         </head><body><h2>cgmon-rs version {}</h2>\n",
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(
        p,
        "<p>Uptime {up:.1} s. Tracking <b>{}</b> flows; churn {inst:.2} flows/s now, {:.2} flows/s \
         mean ({} opened, {} ended, {} refused by -tracker-max-flows).</p>",
        m.flows_active.get(),
        m.flows_ended.get() as f64 / up,
        m.flows_opened.get(),
        m.flows_ended.get(),
        m.flows_refused.get()
    );
    p.push_str("<h3>Pipeline stage times (µs)</h3>\n<table><tr><th>stage</th><th>calls</th><th>min</th><th>mean</th><th>max</th><th>stddev</th></tr>\n");
    for (st, t) in crate::metrics::Stage::ALL.iter().zip(m.stage_times()) {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let _ = writeln!(
            p,
            "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td></tr>",
            escape(st.name()),
            t.calls,
            us(t.min),
            us(t.mean()),
            us(t.max),
            us(t.stddev())
        );
    }
    p.push_str("</table>\n<h3>Counters</h3>\n<table>\n");
    let rows: [(&str, String); 13] = [
        ("dumps", m.dumps.get().to_string()),
        ("failed dumps (netlink errors)", m.dump_errors.get().to_string()),
        ("incomplete dumps", m.dumps_incomplete.get().to_string()),
        ("ticks overrun", m.ticks_overrun.get().to_string()),
        ("sockets in the last dump", m.sockets_last_dump.get().to_string()),
        (
            "destroy events (overruns)",
            format!("{} ({})", m.destroy_events.get(), m.destroy_overruns.get()),
        ),
        (
            "flows awaiting their destroy event (completed / gone / late events)",
            format!(
                "{} ({} / {} / {})",
                m.flows_awaiting_destroy.get(),
                m.destroy_awaited.get(),
                m.destroy_wait_expired.get(),
                m.destroy_late.get()
            ),
        ),
        ("records written", m.records_written.get().to_string()),
        ("records dropped (channel full)", m.records_dropped.get().to_string()),
        ("records lost (output failed)", m.records_lost.get().to_string()),
        ("partial records not written", m.records_partial_skipped.get().to_string()),
        ("write errors / rotations", format!("{} / {}", m.write_errors.get(), m.rotations.get())),
        (
            "resident memory",
            crate::metrics::rss_bytes()
                .map_or("unknown".into(), |b| format!("{:.1} MiB", b as f64 / (1 << 20) as f64)),
        ),
    ];
    for (k, v) in rows {
        let _ = writeln!(p, "<tr><td>{}</td><td>{}</td></tr>", escape(k), escape(&v));
    }
    p.push_str("</table>\n<p><a href=\"/\">Refresh</a> · <a href=\"/metrics\">/metrics</a> · \
                <a href=\"/flows\">/flows</a> · <a href=\"/flow-duration-histogram\">flow-duration histogram</a> · \
                <a href=\"/healthz\">/healthz</a></p></body></html>\n");
    p
}

/// OpenMetrics when the client asks for it (Prometheus does), else text format 0.0.4.
async fn metrics(State(c): State<Ctx>, headers: HeaderMap) -> Response {
    let Ok(text) = crate::prom::render(&c.registry) else {
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
            crate::prom::to_prometheus_text(&text),
        )
            .into_response()
    }
}

async fn ask<T>(c: &Ctx, q: impl FnOnce(oneshot::Sender<T>) -> Query) -> Result<T, Response> {
    let (tx, rx) = oneshot::channel();
    let unavailable =
        || (StatusCode::SERVICE_UNAVAILABLE, "sampling has stopped\n").into_response();
    c.queries.try_send(q(tx)).map_err(|_| unavailable())?;
    rx.await.map_err(|_| unavailable())
}

async fn flows(State(c): State<Ctx>) -> Response {
    match ask(&c, Query::List).await {
        Ok(v) => Json(v.iter().map(|f| view(f, false)).collect::<Vec<_>>()).into_response(),
        Err(r) => r,
    }
}

async fn flow(State(c): State<Ctx>, Path(cookie): Path<u64>) -> Response {
    match ask(&c, |tx| Query::Flow(cookie, tx)).await {
        Ok(Some(f)) => Json(view(&f, true)).into_response(),
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
    match c.metrics.since_last_good_dump() {
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

/// Binds `addr` (warning when it is not loopback: there is no authentication).
///
/// # Errors
/// The address cannot be bound.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    if !addr.ip().is_loopback() {
        tracing::warn!(%addr, "the HTTP server listens beyond loopback, without authentication");
    }
    let l = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(addr = %l.local_addr()?, "HTTP server listening");
    Ok(l)
}

/// Serves until the task is dropped.
pub async fn serve(l: tokio::net::TcpListener, s: Served) {
    let healthy_within = (s.interval * 3).max(Duration::from_secs(10));
    let ctx = Ctx {
        metrics: s.metrics,
        healthy_within,
        registry: Arc::new(s.registry),
        queries: s.queries,
    };
    let app = Router::new()
        .route("/", get(index))
        .route("/metrics", get(metrics))
        .route("/flows", get(flows))
        .route("/flows/{cookie}", get(flow))
        .route("/healthz", get(healthz))
        .route("/flow-duration-histogram", get(flow_durations))
        .with_state(ctx);
    if let Err(e) = axum::serve(l, app).await {
        tracing::error!(error = %e, "HTTP server stopped");
    }
}
