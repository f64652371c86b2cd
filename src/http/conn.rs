//! Connections: the accept loop within `--http-max-connections` (who gives way at the
//! cap), the header, idle and write timeouts, and the bind. The routes are in `mod.rs`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use tokio::sync::oneshot;

use crate::locks::Locked;
use crate::metrics::Metrics;

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

/// Binds `addr` (warning when it is not loopback and no token guards it: every local
/// user's programs and peers would be anyone's).
///
/// # Errors
/// The address cannot be bound.
pub fn bind(addr: SocketAddr, guarded: bool) -> std::io::Result<std::net::TcpListener> {
    if !addr.ip().is_loopback() && !guarded {
        tracing::warn!(%addr, "the HTTP server listens beyond loopback, without \
            authentication (--http-token-file)");
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

/// Connections told to give way that may still be closing while newcomers are accepted.
pub(super) const EVICTING: usize = 8;

/// A listen(2) backlog for bursts of connections: with std's 128, a burst of a few hundred
/// clients overflowed the accept queue, and a scraper's SYN dropped there waits a second
/// for its retransmission. The kernel caps it at `net.core.somaxconn` (4096 by default).
pub(super) const LISTEN_BACKLOG: i32 = 1024;

/// The open connections, oldest first, as the accept loop sees them.
#[derive(Default)]
pub(super) struct Slots {
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

/// [`serve`] for any router (tests give their own).
pub(super) async fn serve_app(
    l: tokio::net::TcpListener,
    app: Router,
    metrics: Arc<Metrics>,
    limits: Limits,
    mut stop: oneshot::Receiver<()>,
) {
    let slots = Arc::new(std::sync::Mutex::new(Slots::default()));
    let lock = |s: &std::sync::Mutex<Slots>| {
        // No invariant spans the lock: a poisoned one is still usable.
        s.locked().held()
    };
    let mut conns = tokio::task::JoinSet::new();
    let mut last_warning: Option<std::time::Instant> = None;
    loop {
        // While connections told to give way have not closed yet (they close within a
        // turn of this runtime), at most EVICTING more are accepted: file descriptors stay
        // within the cap plus that, and a burst of newcomers still drains quickly.
        let room = slots.locked().open.len() < limits.max_connections + EVICTING;
        let accepted = tokio::select! {
            _ = &mut stop => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            r = l.accept(), if room => r,
        };
        match accepted {
            Ok((stream, _)) => {
                let (id, clock) = {
                    let mut sl = slots.locked();
                    if sl.held() >= limits.max_connections && !sl.evict_one() {
                        // Every slot is mid-response: closed at once, before reading a byte.
                        drop(sl);
                        metrics.http.refused.inc();
                        drop(stream);
                        continue;
                    }
                    let clock = Arc::new(Clock::new());
                    let id = sl.next;
                    sl.next += 1;
                    sl.open.insert(id, clock.clone());
                    (id, clock)
                };
                metrics.http.connections.set(lock(&slots) as u64);
                let (app, m, slots) = (app.clone(), metrics.clone(), slots.clone());
                conns.spawn(async move {
                    connection(stream, app, limits, &m, clock).await;
                    let held = {
                        let mut sl = slots.locked();
                        sl.open.remove(&id);
                        sl.held()
                    };
                    m.http.connections.set(held as u64);
                });
            }
            Err(e) => {
                metrics.http.accept_errors.inc();
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
pub(super) async fn connection(
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
                    m.http.evicted.inc();
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
                        m.http.timeouts.inc();
                        break; // read too slowly: dropped
                    }
                    continue;
                }
                if head != 0 && clock.at(head) + limits.header_timeout <= now {
                    m.http.timeouts.inc();
                    break; // half a request: dropped
                }
                let idle = clock.at(clock.activity.load(Relaxed)) + limits.idle_timeout <= now;
                if head == 0 && idle {
                    if closing {
                        break; // the close did not finish: dropped
                    }
                    m.http.timeouts.inc();
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
pub(super) struct Busy(Arc<Clock>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.body_done.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// A response body that holds its connection's [`Busy`] until hyper has taken all of it
/// (hyper drops the body then, or when the connection goes).
pub(super) struct Guarded {
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
pub(super) struct Clock {
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
pub(super) struct Watched {
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
