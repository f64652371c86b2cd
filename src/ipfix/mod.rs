//! IPFIX export (`--ipfix HOST:PORT`): flow records to the flow collectors operators
//! already run (nfdump's nfcapd, pmacct's nfacctd, GoFlow2, ipfixcol2), over UDP
//! (RFC 7011). What goes out, element by element, and what each collector keeps, is in
//! docs/ipfix.md.
//!
//! A stage beside the writer, in two parts, each testable without a network:
//! - [`encode`], on the writer's thread: records into data records, cut into message
//!   bodies of at most `--ipfix-message-size` bytes (a few hundred nanoseconds a record,
//!   and no system call);
//! - [`export`], on a thread of its own: each body to every collector with its header and,
//!   when due, the templates ([`template`]). The writer hands bodies over without waiting;
//!   a full hand-off drops them, counted, and the collectors see the gap in the sequence
//!   numbers.

pub mod encode;
pub mod export;
pub mod template;

use std::fmt;
use std::sync::Arc;
use std::sync::mpsc::SyncSender;

use crate::metrics::Metrics;
use crate::record::FlowStats;

/// Batches of bodies in the writer-to-exporter hand-off.
pub const CHANNEL_CAPACITY: usize = 256;

/// The default `--ipfix-message-size`: under a 1,500-byte Ethernet MTU with IPv6 and UDP
/// headers, so that no message is fragmented on the usual paths.
pub const DEFAULT_MESSAGE_SIZE: usize = 1400;

/// A collector, as given: a host name or address, and a UDP port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectorAddr {
    /// A name, an IPv4 address or an IPv6 address (without brackets).
    pub host: String,
    /// The UDP port.
    pub port: u16,
}

/// Why a collector's address is not one: each names the part that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddrError {
    /// No port.
    #[error("expected HOST:PORT (an IPv6 address as [::1]:4739)")]
    NoPort,
    /// A port that is not 1 to 65535.
    #[error("port {0:?} is not a number from 1 to 65535")]
    Port(String),
    /// `[` without `]`.
    #[error("an opening [ without its closing ]")]
    Unclosed,
    /// Brackets around something that is not an IPv6 address.
    #[error("{0:?} is not an IPv6 address")]
    NotIpv6(String),
    /// An IPv6 address without brackets.
    #[error("an IPv6 address goes in brackets: [::1]:4739")]
    Unbracketed,
    /// No host.
    #[error("the host is empty")]
    EmptyHost,
    /// Spaces or control characters in the host.
    #[error("{0:?} is not a host name")]
    BadHost(String),
    /// The name could not be looked up (at run time).
    #[error("cannot resolve {host}: {why}")]
    Resolve {
        /// The name.
        host: String,
        /// The resolver's answer.
        why: String,
    },
    /// The name has no address.
    #[error("{0} has no address")]
    NoAddress(String),
}

impl CollectorAddr {
    /// `HOST:PORT`, `A.B.C.D:PORT` or `[IPV6]:PORT`.
    ///
    /// # Errors
    /// What is wrong with it.
    pub fn parse(s: &str) -> Result<Self, AddrError> {
        // `[::1]` alone: its last colon is inside the brackets, so it has no port.
        if s.starts_with('[') && s.ends_with(']') {
            return Err(AddrError::NoPort);
        }
        let Some((host, port)) = s.rsplit_once(':') else {
            return Err(AddrError::NoPort);
        };
        let port: u16 = port
            .parse()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| AddrError::Port(port.to_string()))?;
        let host = match host.strip_prefix('[') {
            Some(h) => {
                let h = h.strip_suffix(']').ok_or(AddrError::Unclosed)?;
                h.parse::<std::net::Ipv6Addr>().map_err(|_| AddrError::NotIpv6(h.to_string()))?;
                h
            }
            None if host.contains(':') => return Err(AddrError::Unbracketed),
            None if host.is_empty() => return Err(AddrError::EmptyHost),
            None => host,
        };
        if host.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(AddrError::BadHost(host.to_string()));
        }
        Ok(CollectorAddr { host: host.to_string(), port })
    }
}

impl fmt::Display for CollectorAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// The exporter's settings.
#[derive(Debug, Clone)]
pub struct IpfixConfig {
    /// `--ipfix`, in order.
    pub collectors: Vec<CollectorAddr>,
    /// `--ipfix-domain`, or [`default_domain`].
    pub domain: u32,
    /// `--ipfix-pen`.
    pub pen: Option<u32>,
    /// `--ipfix-message-size`.
    pub message_size: usize,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC, ns: the analyzer's, so that a record's times and
    /// its IPFIX times agree to the nanosecond (set when the run starts).
    pub realtime_offset_ns: i128,
}

/// The observation domain when `--ipfix-domain` is not given: the FNV-1a hash (32 bits)
/// of `/etc/machine-id` (systemd's stable id of the installation, the same across
/// restarts and reboots), else of `host_name`. Collectors key sequence numbers
/// and templates by exporter address and domain, so two monitors behind one NAT address
/// still differ.
pub fn default_domain(host_name: &str) -> u32 {
    let id = std::fs::read_to_string("/etc/machine-id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| host_name.to_string());
    fnv1a32(id.as_bytes())
}

/// FNV-1a, 32 bits.
pub fn fnv1a32(b: &[u8]) -> u32 {
    b.iter().fold(0x811c_9dc5u32, |h, &x| (h ^ u32::from(x)).wrapping_mul(0x0100_0193))
}

/// The writer's end, a consumer of its batches: encodes each batch's records on the
/// writer's thread and hands the bodies to the export thread.
pub struct Handoff {
    encoder: encode::Encoder,
    tx: SyncSender<Vec<encode::Chunk>>,
    metrics: Arc<Metrics>,
    full_logged: Option<std::time::Instant>,
    /// Collectors the export thread sends to: a dropped record counts once for each.
    collectors: usize,
}

impl Handoff {
    /// A hand-off into `tx`, encoding with `cfg`, for `collectors` collectors.
    pub fn new(
        cfg: encode::EncodeConfig,
        tx: SyncSender<Vec<encode::Chunk>>,
        metrics: Arc<Metrics>,
        collectors: usize,
    ) -> Self {
        Handoff { encoder: encode::Encoder::new(cfg), tx, metrics, full_logged: None, collectors }
    }

    /// Encodes `records` and hands them to the export thread, without waiting: a full
    /// hand-off drops them (counted once per collector, as the sequence numbers skip them).
    pub fn export(&mut self, records: &[FlowStats]) {
        let collectors = self.collectors;
        let mut chunks = Vec::new();
        self.encoder.encode(records, &mut chunks);
        if chunks.is_empty() {
            return;
        }
        let n: u64 = chunks.iter().map(|c| u64::from(c.records)).sum();
        if self.tx.try_send(chunks).is_err() {
            self.metrics.ipfix.dropped.add(n * collectors as u64);
            self.metrics.ipfix.handoff_full.inc();
            let now = std::time::Instant::now();
            if self.full_logged.is_none_or(|t| now.duration_since(t).as_secs() >= 10) {
                self.full_logged = Some(now);
                tracing::error!(target: "cgmon_rs::ipfix", dropped = n,
                    "the IPFIX exporter's hand-off is full: records dropped for it");
            }
        }
    }
}

impl crate::edges::Consumer for Handoff {
    fn take(&mut self, batch: &mut crate::edges::Written<'_>) {
        self.export(batch.records());
    }
}

#[cfg(test)]
mod tests;
