//! Recorded datagrams played back: a fixture file's dumps, destroy events at set times,
//! receive errors (an overrun's `ENOBUFS`) where a test puts them.

use std::collections::VecDeque;
use std::io;
use std::time::Duration;

use crate::sampler::dump_source::{DumpSource, Received};
use crate::wire::sock::Datagram;

/// One thing to play back: a datagram or an error, due at once or at a time.
#[derive(Debug)]
struct Entry {
    due: Option<Duration>,
    item: Result<Datagram, i32>,
}

/// Plays datagrams back in order and records the requests it is sent. By default every
/// entry is ready at once and an exhausted replay answers `UnexpectedEof`; entries added
/// with [`at`](Self::at) wait for their time (tokio's clock, from the replay's making), and
/// [`then_silent`](Self::then_silent) makes an exhausted replay wait forever, as a quiet
/// destroy listener does.
#[derive(Debug, Default)]
pub struct ReplaySource {
    queue: VecDeque<Entry>,
    t0: Option<tokio::time::Instant>,
    silent_when_done: bool,
    only_when_polled: bool,
    /// Every request sent, for tests to inspect.
    pub sent: Vec<Vec<u8>>,
    /// Counts the waits for a datagram (`recv` calls: for the kernel, waits in epoll).
    waits: Option<std::sync::Arc<std::sync::atomic::AtomicU32>>,
}

impl ReplaySource {
    /// A source that will return `datagrams` one per `recv`.
    pub fn new(datagrams: impl IntoIterator<Item = Datagram>) -> Self {
        let queue = datagrams.into_iter().map(|d| Entry { due: None, item: Ok(d) }).collect();
        Self { queue, ..Self::default() }
    }

    /// Then the message `bytes`.
    #[must_use]
    pub fn message(mut self, bytes: Vec<u8>) -> Self {
        self.queue.push_back(Entry { due: None, item: Ok(Datagram { ts_ns: 5, bytes }) });
        self
    }

    /// Then a receive error `errno` (e.g. `ENOBUFS`, an overrun).
    #[must_use]
    pub fn error(mut self, errno: i32) -> Self {
        self.queue.push_back(Entry { due: None, item: Err(errno) });
        self
    }

    /// Then the message `bytes`, `after` the replay was made (call within a tokio runtime;
    /// with its clock paused, no real waiting).
    #[must_use]
    pub fn at(mut self, after: Duration, bytes: Vec<u8>) -> Self {
        self.t0.get_or_insert_with(tokio::time::Instant::now);
        // Stamped when it is received, as the kernel's datagrams are.
        self.queue.push_back(Entry { due: Some(after), item: Ok(Datagram { ts_ns: 0, bytes }) });
        self
    }

    /// Counts each wait for a datagram (each `recv`) in `n`.
    #[must_use]
    pub fn counting_waits(mut self, n: std::sync::Arc<std::sync::atomic::AtomicU32>) -> Self {
        self.waits = Some(n);
        self
    }

    /// Once exhausted, `recv` waits forever instead of failing.
    #[must_use]
    pub fn then_silent(mut self) -> Self {
        self.silent_when_done = true;
        self
    }

    /// Entries are found only by `try_recv` (the owner polls), never woken up for: as when
    /// the stop comes before the task has read an event.
    #[must_use]
    pub fn only_when_polled(mut self) -> Self {
        self.only_when_polled = true;
        self.silent_when_done = true;
        self
    }

    fn due(&self, e: &Entry) -> Option<tokio::time::Instant> {
        Some(self.t0? + e.due?)
    }
}

impl DumpSource for ReplaySource {
    async fn send(&mut self, request: &[u8]) -> io::Result<()> {
        self.sent.push(request.to_vec());
        Ok(())
    }

    async fn recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Received> {
        if let Some(n) = &self.waits {
            n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        match self.queue.front() {
            None if self.silent_when_done => std::future::pending().await,
            None => {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "replay exhausted"));
            }
            Some(_) if self.only_when_polled => std::future::pending().await,
            Some(e) => {
                if let Some(t) = self.due(e) {
                    tokio::time::sleep_until(t).await;
                }
            }
        }
        Ok(self.try_recv(buf)?.expect("an entry is due"))
    }

    fn try_recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<Received>> {
        let Some(e) = self.queue.front() else { return Ok(None) };
        if self.due(e).is_some_and(|t| tokio::time::Instant::now() < t) {
            return Ok(None);
        }
        let e = self.queue.pop_front().expect("checked non-empty");
        let mut d = e.item.map_err(io::Error::from_raw_os_error)?;
        if e.due.is_some() {
            d.ts_ns = crate::clock::monotonic_ns();
        }
        buf.clear();
        let keep = d.bytes.len().min(buf.capacity().max(1));
        buf.extend_from_slice(&d.bytes[..keep]);
        Ok(Some(Received { len: d.bytes.len(), ts_ns: d.ts_ns }))
    }

    fn reset(&mut self) -> io::Result<()> {
        Ok(())
    }
}
