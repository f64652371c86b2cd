//! `-run-http-server`: the monitor's own state over HTTP (cgmon's status page). Read-only:
//! no endpoint changes state, and handlers only read atomics, so serving never blocks
//! sampling.
//!
//! - `GET /`: an HTML page (no JavaScript) with the same figures as SIGUSR1.
//! - `GET /healthz`: 200 when the last dump succeeded within three intervals (or 10 s),
//!   503 otherwise.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse};
use axum::routing::get;

use crate::metrics::Metrics;

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
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

async fn index(State(c): State<Ctx>) -> Html<String> {
    Html(format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>cgmon-rs</title></head>\
         <body><h2>cgmon-rs version {}</h2><pre>{}</pre>\
         <p><a href=\"/\">Refresh</a> · <a href=\"/healthz\">/healthz</a></p></body></html>\n",
        env!("CARGO_PKG_VERSION"),
        escape(&c.metrics.report())
    ))
}

async fn healthz(State(c): State<Ctx>) -> impl IntoResponse {
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
pub async fn serve(l: tokio::net::TcpListener, metrics: Arc<Metrics>, interval: Duration) {
    let healthy_within = (interval * 3).max(Duration::from_secs(10));
    let app = Router::new()
        .route("/", get(index))
        .route("/healthz", get(healthz))
        .with_state(Ctx { metrics, healthy_within });
    if let Err(e) = axum::serve(l, app).await {
        tracing::error!(error = %e, "HTTP server stopped");
    }
}
