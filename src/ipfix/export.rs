//! The export thread: each chunk the writer encoded goes to every collector as one IPFIX
//! message over UDP, with the templates before it when they are due.
//!
//! Nothing here waits on a collector: sockets are non-blocking, and a message a socket
//! cannot take is dropped and counted. A collector that is down (the kernel reports the
//! ICMP port unreachable as a refused send) or a name that does not resolve is counted,
//! logged once until it recovers, and tried again; the others and the writer go on. The
//! sequence number of a message is that of its first record over all the records the
//! writer encoded, so a collector sees every record lost on the way (here or on the
//! network) as a gap.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant, SystemTime};

use super::encode::{Chunk, HEADER_LEN};
use super::{CollectorAddr, IpfixConfig, template};
use crate::metrics::Metrics;

/// Templates go out again after this long (RFC 7011 §8.4: over UDP they are re-sent
/// periodically, so that a collector that restarted learns them again)…
pub const TEMPLATE_EVERY: Duration = Duration::from_secs(30);

/// …and after this many messages, whichever comes first.
pub const TEMPLATE_EVERY_MESSAGES: u32 = 100;

/// Messages sent in a row before [`PACE_REST`].
pub const PACE_BURST: u32 = 32;

/// The rest between bursts.
pub const PACE_REST: Duration = Duration::from_millis(1);

/// A failing collector is back after this long without a failed send.
pub const RECOVER_AFTER: Duration = Duration::from_secs(10);

/// How soon a name that did not resolve is looked up again.
pub const RESOLVE_RETRY: Duration = Duration::from_secs(10);

/// One collector's transport session.
struct Collector {
    addr: CollectorAddr,
    sock: Option<UdpSocket>,
    next_resolve: Instant,
    /// A name's lookup under way, and whether its answer has not been waited for yet.
    lookup: Option<(std::sync::mpsc::Receiver<Result<SocketAddr, String>>, bool)>,
    /// When templates last went out, and messages since.
    templates: Option<(Instant, u32)>,
    /// While it fails: why (logged when it starts), and when it last failed.
    failing: Option<(String, Instant)>,
}

/// Why a message did not go.
enum Failure {
    Unresolved(String),
    Refused,
    Full,
    Other(io::Error),
}

impl Collector {
    fn new(addr: CollectorAddr) -> Self {
        Collector {
            addr,
            sock: None,
            next_resolve: Instant::now(),
            lookup: None,
            templates: None,
            failing: None,
        }
    }

    /// Its socket, resolving (again) when due.
    fn socket(&mut self) -> Result<&UdpSocket, Failure> {
        if self.sock.is_none() {
            let to = self.address()?;
            let bind: SocketAddr =
                if to.is_ipv4() { "0.0.0.0:0".parse() } else { "[::]:0".parse() }
                    .map_err(|_| Failure::Unresolved("bad bind address".into()))?;
            let s = UdpSocket::bind(bind).map_err(Failure::Other)?;
            s.connect(to).map_err(Failure::Other)?;
            s.set_nonblocking(true).map_err(Failure::Other)?;
            self.sock = Some(s);
            self.templates = None;
        }
        self.sock.as_ref().ok_or(Failure::Unresolved("no socket".into()))
    }

    /// The collector's address: an address as given, or a name looked up on a thread of its
    /// own, so that a resolver that takes seconds to fail never holds up the other
    /// collectors. The answer is waited for briefly when asked (a name in /etc/hosts or a
    /// local cache answers at once), then looked for at each later send.
    fn address(&mut self) -> Result<SocketAddr, Failure> {
        if let Ok(ip) = self.addr.host.parse::<std::net::IpAddr>() {
            return Ok(SocketAddr::new(ip, self.addr.port));
        }
        if self.lookup.is_none() {
            if Instant::now() < self.next_resolve {
                return Err(Failure::Unresolved("waiting to look the name up again".into()));
            }
            self.next_resolve = Instant::now() + RESOLVE_RETRY;
            let (tx, rx) = std::sync::mpsc::channel();
            let addr = self.addr.clone();
            std::thread::Builder::new()
                .name("cgmon-ipfix-dns".into())
                .spawn(move || {
                    let _ = tx.send(resolve(&addr).map_err(|e| e.to_string()));
                })
                .map_err(Failure::Other)?;
            self.lookup = Some((rx, true));
        }
        let Some((rx, first)) = &mut self.lookup else { unreachable!("set above") };
        let answer = if std::mem::take(first) {
            rx.recv_timeout(Duration::from_millis(50)).map_err(|e| match e {
                RecvTimeoutError::Timeout => TryRecvError::Empty,
                RecvTimeoutError::Disconnected => TryRecvError::Disconnected,
            })
        } else {
            rx.try_recv()
        };
        match answer {
            Err(TryRecvError::Empty) => {
                Err(Failure::Unresolved(format!("looking up {}", self.addr.host)))
            }
            Err(TryRecvError::Disconnected) => {
                self.lookup = None;
                Err(Failure::Unresolved("the lookup ended without an answer".into()))
            }
            Ok(r) => {
                self.lookup = None;
                r.map_err(Failure::Unresolved)
            }
        }
    }

    fn send(&mut self, msg: &[u8]) -> Result<(), Failure> {
        let s = self.socket()?;
        match s.send(msg) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(Failure::Full),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Err(Failure::Refused),
            Err(e) => Err(Failure::Other(e)),
        }
    }

    fn templates_due(&self, now: Instant) -> bool {
        self.templates.is_none_or(|(at, n)| {
            now.duration_since(at) >= TEMPLATE_EVERY || n >= TEMPLATE_EVERY_MESSAGES
        })
    }
}

fn resolve(a: &CollectorAddr) -> Result<SocketAddr, super::AddrError> {
    (a.host.as_str(), a.port)
        .to_socket_addrs()
        .map_err(|e| super::AddrError::Resolve { host: a.host.clone(), why: e.to_string() })?
        .next()
        .ok_or_else(|| super::AddrError::NoAddress(a.host.clone()))
}

/// The exporter's state across chunks.
pub struct Exporter {
    collectors: Vec<Collector>,
    domain: u32,
    templates: Vec<u8>,
    max: usize,
    next_seq: u32,
    msg: Vec<u8>,
    metrics: Arc<Metrics>,
    /// How long a failing collector must go without a failure to count as back.
    pub(super) recover_after: Duration,
    /// Messages since the last rest ([`Exporter::pace`]).
    since_rest: u32,
}

impl Exporter {
    /// An exporter to `cfg`'s collectors.
    pub fn new(cfg: &IpfixConfig, metrics: Arc<Metrics>) -> Self {
        let mut templates = Vec::new();
        template::template_set(&mut templates, cfg.pen);
        Exporter {
            collectors: cfg.collectors.iter().cloned().map(Collector::new).collect(),
            domain: cfg.domain,
            templates,
            max: cfg.message_size,
            next_seq: 0,
            msg: Vec::with_capacity(cfg.message_size),
            metrics,
            recover_after: RECOVER_AFTER,
            since_rest: 0,
        }
    }

    /// Sends `c` to every collector.
    pub fn chunk(&mut self, c: &Chunk) {
        self.next_seq = c.first_seq.wrapping_add(c.records);
        if c.oversize {
            self.metrics.ipfix.oversize.inc();
        }
        let now = Instant::now();
        for i in 0..self.collectors.len() {
            // Templates ride in front of the data when both fit; else alone, first.
            if self.collectors[i].templates_due(now)
                && HEADER_LEN + self.templates.len() + c.sets.len() > self.max
            {
                self.templates_to(i, c.first_seq, now);
            }
            let with_templates = self.collectors[i].templates_due(now);
            self.build(c.first_seq, with_templates.then_some(&[][..]), &c.sets);
            let msg = std::mem::take(&mut self.msg);
            let r = self.collectors[i].send(&msg);
            self.msg = msg;
            self.outcome(i, r, u64::from(c.records), with_templates, now);
        }
        self.pace();
    }

    /// A short rest every [`PACE_BURST`] messages: a batch of records leaves as a burst,
    /// and a collector's socket with Linux's default buffer holds only about 90 of them.
    /// Spread over a few milliseconds, a collector that reads as fast as nfcapd keeps up.
    /// The ceiling it sets, ~32,000 messages a second, is far above what the monitor
    /// makes (~500 a second at 2,000 connections a second).
    fn pace(&mut self) {
        self.since_rest += 1;
        if self.since_rest >= PACE_BURST {
            self.since_rest = 0;
            std::thread::sleep(PACE_REST);
        }
    }

    /// Sends the templates to every collector that is due (the timer, between chunks).
    pub fn refresh(&mut self) {
        let now = Instant::now();
        for i in 0..self.collectors.len() {
            if self.collectors[i].templates_due(now) {
                self.templates_to(i, self.next_seq, now);
            }
        }
    }

    fn templates_to(&mut self, i: usize, seq: u32, now: Instant) {
        self.build(seq, Some(&[]), &[]);
        let msg = std::mem::take(&mut self.msg);
        let r = self.collectors[i].send(&msg);
        self.msg = msg;
        self.outcome(i, r, 0, true, now);
    }

    /// The message: header, the templates when `templates` is given, then `sets`.
    fn build(&mut self, seq: u32, templates: Option<&[u8]>, sets: &[u8]) {
        let m = &mut self.msg;
        m.clear();
        let export = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as u32);
        m.extend_from_slice(&10u16.to_be_bytes());
        m.extend_from_slice(&[0, 0]);
        m.extend_from_slice(&export.to_be_bytes());
        m.extend_from_slice(&seq.to_be_bytes());
        m.extend_from_slice(&self.domain.to_be_bytes());
        if templates.is_some() {
            m.extend_from_slice(&self.templates);
        }
        m.extend_from_slice(sets);
        let len = m.len().min(usize::from(u16::MAX)) as u16;
        m[2..4].copy_from_slice(&len.to_be_bytes());
    }

    fn outcome(
        &mut self,
        i: usize,
        r: Result<(), Failure>,
        records: u64,
        templates: bool,
        now: Instant,
    ) {
        let m = &self.metrics.ipfix;
        let c = &mut self.collectors[i];
        let why = match r {
            Ok(()) => {
                m.messages.inc();
                m.sent.add(records);
                if templates {
                    c.templates = Some((now, 0));
                } else if let Some((_, n)) = &mut c.templates {
                    *n += 1;
                }
                // Over UDP a send to a closed port succeeds; the ICMP answer fails the next
                // one. So a collector is back only after `recover_after` without a failure.
                if c.failing
                    .as_ref()
                    .is_some_and(|(_, at)| now.duration_since(*at) >= self.recover_after)
                {
                    c.failing = None;
                    m.failing.set(m.failing.get().saturating_sub(1));
                    tracing::info!(target: "cgmon_rs::ipfix", collector = %c.addr, "IPFIX collector reachable again");
                }
                return;
            }
            Err(Failure::Full) => {
                m.full.inc();
                m.dropped.add(records);
                // A full socket buffer is the host's, not the collector's: not "failing".
                return;
            }
            Err(Failure::Unresolved(e)) => {
                m.unresolved.inc();
                e
            }
            Err(Failure::Refused) => {
                m.refused.inc();
                "refused (ICMP port unreachable: nothing listens there)".to_string()
            }
            Err(Failure::Other(e)) => {
                m.other.inc();
                // A socket that failed otherwise is opened (and the name resolved) again.
                c.sock = None;
                e.to_string()
            }
        };
        m.dropped.add(records);
        match &mut c.failing {
            Some((_, at)) => *at = now,
            None => {
                m.failing.set(m.failing.get() + 1);
                tracing::warn!(target: "cgmon_rs::ipfix", collector = %c.addr, error = %why,
                    "IPFIX collector failing; its records are dropped and counted until it answers");
                c.failing = Some((why, now));
            }
        }
    }
}

/// Runs the export thread until the writer's side of `rx` closes.
///
/// # Errors
/// The thread cannot be started.
pub fn spawn(
    cfg: IpfixConfig,
    rx: Receiver<Vec<Chunk>>,
    metrics: Arc<Metrics>,
) -> io::Result<std::thread::JoinHandle<()>> {
    metrics.ipfix.enabled.set(1);
    std::thread::Builder::new().name("cgmon-ipfix".into()).spawn(move || {
        // Records to export are pushed at us: out of the CPU budget's upkeep.
        let m = Arc::clone(&metrics);
        let _pushed = m.budget.pushed_thread();
        let mut x = Exporter::new(&cfg, metrics);
        x.refresh();
        loop {
            match rx.recv_timeout(Duration::from_secs(1)) {
                Ok(chunks) => chunks.iter().for_each(|c| x.chunk(c)),
                Err(RecvTimeoutError::Timeout) => x.refresh(),
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
    })
}
