//! Flow records into IPFIX data records, cut into message bodies ([`Chunk`]s) that fit a
//! message. Runs on the writer's thread, so it allocates nothing per record once warm and
//! never blocks; the export thread adds each message's header (and templates) per
//! collector.
//!
//! One data record per direction that carried anything: the egress one (source = the
//! record's local end) with bytes acked and segments out, the ingress one (source = the
//! remote end) with bytes received and segments in. A record with neither (a connect that
//! never got an answer) still gives its egress one, so that failed attempts reach the
//! collectors. An interim record (`EndReason` `window`) carries the change since the
//! flow's previous record, so that a collector's sum over a flow equals its total.

use std::net::IpAddr;

use rustc_hash::FxHashMap;

use super::template::{Field, Own, Shape, Way};
use crate::record::FlowStats;

/// Bytes of an IPFIX message header (RFC 7011 §3.1).
pub const HEADER_LEN: usize = 16;

/// Open long flows whose counters are kept for the next interim record's change. Past it
/// a new long flow's next record carries its totals (logged once): about 40 MB of entries.
pub const MAX_OPEN: usize = 1 << 20;

/// A message body: data sets holding `records` data records, the first of them numbered
/// `first_seq` (the sequence number its message carries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The sets, each with its header.
    pub sets: Vec<u8>,
    /// Data records in them.
    pub records: u32,
    /// Sequence number of the first.
    pub first_seq: u32,
    /// The chunk is over the message size: one record too large to share a message.
    pub oversize: bool,
}

/// A record's times and ntop latencies (client, server), the same in both directions.
struct Times {
    start_ms: u64,
    end_ms: u64,
    lat: (u32, u32),
    /// Our elements' µs: the min RTT and the RTT summary.
    min_rtt_us: u32,
    rtt_us: [u32; 7],
}

/// A flow's counters at its previous record.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    acked: u64,
    received: u64,
    segs_out: u32,
    segs_in: u32,
    retrans: u32,
}

impl Counters {
    fn of(r: &FlowStats) -> Self {
        Counters {
            acked: r.bytes_acked,
            received: r.bytes_received,
            segs_out: r.segs_out,
            segs_in: r.segs_in,
            retrans: r.total_retransmits,
        }
    }
}

/// The encoder's settings.
#[derive(Debug, Clone, Copy)]
pub struct EncodeConfig {
    /// `--ipfix-pen`: our elements go out under it; without it only IANA's and ntop's.
    pub pen: Option<u32>,
    /// `--ipfix-message-size`: the largest message, header included.
    pub message_size: usize,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC, ns: the records' times are monotonic.
    pub realtime_offset_ns: i128,
}

/// Records into chunks.
#[derive(Debug)]
pub struct Encoder {
    cfg: EncodeConfig,
    fields: [Vec<Field>; 4],
    /// Data records numbered so far (the next one's sequence number).
    seq: u32,
    prev: FxHashMap<u64, Counters>,
    open_full_logged: bool,
    chunk: Chunk,
    /// The template of the set being filled, and where its header is.
    set: Option<(u16, usize)>,
    scratch: Vec<u8>,
    /// Records whose addresses did not parse (none should: the monitor writes them).
    pub skipped: u64,
}

impl Encoder {
    /// An encoder with `cfg`.
    pub fn new(cfg: EncodeConfig) -> Self {
        let with = cfg.pen.is_some();
        Encoder {
            cfg,
            fields: Shape::ALL.map(|s| s.fields(with)),
            seq: 0,
            prev: FxHashMap::default(),
            open_full_logged: false,
            chunk: Chunk { sets: Vec::new(), records: 0, first_seq: 0, oversize: false },
            set: None,
            scratch: Vec::with_capacity(512),
            skipped: 0,
        }
    }

    /// The next data record's sequence number.
    pub fn next_seq(&self) -> u32 {
        self.seq
    }

    /// Encodes `records`, appending every chunk it completes to `out`; the last, partly
    /// filled one too (a batch's records are not held back for the next).
    pub fn encode(&mut self, records: &[FlowStats], out: &mut Vec<Chunk>) {
        for r in records {
            self.record(r, out);
        }
        self.finish(out);
    }

    fn record(&mut self, r: &FlowStats, out: &mut Vec<Chunk>) {
        let parsed = || Some((r.id.src_ip.parse::<IpAddr>().ok()?, r.id.dst_ip.parse().ok()?));
        let Some((local, remote)) = r.id.addrs.or_else(parsed) else {
            self.skipped += 1;
            return;
        };
        let (local, remote) = (local.to_canonical(), remote.to_canonical());
        let now = Counters::of(r);
        let base = if r.seq > 0 { self.prev.get(&r.cookie) } else { None };
        let base = base.copied().unwrap_or_default();
        self.remember(r, now);
        let d = Counters {
            acked: now.acked.saturating_sub(base.acked),
            received: now.received.saturating_sub(base.received),
            segs_out: now.segs_out.saturating_sub(base.segs_out),
            segs_in: now.segs_in.saturating_sub(base.segs_in),
            retrans: now.retrans.saturating_sub(base.retrans),
        };
        let v6 = local.is_ipv6() || remote.is_ipv6();
        // Once a record, not once a direction: the times (an i128 division) and latencies.
        let start_ms = ms(i128::from(r.id.tstamp_start_ns) + self.cfg.realtime_offset_ns);
        let end_ms = start_ms + (r.duration.max(0) as u64) / 1_000_000;
        let min_rtt = min_rtt_us(r);
        let half_rtt_ms = min_rtt.map_or(0, |us| (us / 2 + 500) / 1000);
        let lat = if r.accepted { (half_rtt_ms, 0) } else { (0, half_rtt_ms) };
        let rtt_us = r.rtt_summary.map_or([0; 7], |s| s.map(|v| (v * 1000.0).round() as u32));
        let times = Times { start_ms, end_ms, lat, min_rtt_us: min_rtt.unwrap_or(0), rtt_us };
        let ingress = d.received > 0 || d.segs_in > 0;
        let egress = d.acked > 0 || d.segs_out > 0 || !ingress;
        for (on, way) in [(egress, Way::Egress), (ingress, Way::Ingress)] {
            if on {
                let ends = match way {
                    Way::Egress => ((local, r.id.src_port), (remote, r.id.dst_port)),
                    Way::Ingress => ((remote, r.id.dst_port), (local, r.id.src_port)),
                };
                self.data_record(r, (Shape { v6, way }, &times), ends, &d, out);
            }
        }
    }

    /// Keeps an open flow's counters for its next record; forgets an ended one.
    fn remember(&mut self, r: &FlowStats, now: Counters) {
        let key = r.cookie;
        if r.end_reason != "window" {
            self.prev.remove(&key);
        } else if self.prev.len() < MAX_OPEN || self.prev.contains_key(&key) {
            self.prev.insert(key, now);
        } else if !self.open_full_logged {
            self.open_full_logged = true;
            tracing::warn!(target: "cgmon_rs::ipfix", open = MAX_OPEN,
                "IPFIX: too many open long flows to remember; a new one's next record carries its totals");
        }
    }

    fn data_record(
        &mut self,
        r: &FlowStats,
        (shape, t): (Shape, &Times),
        ((src, sport), (dst, dport)): ((IpAddr, u16), (IpAddr, u16)),
        d: &Counters,
        out: &mut Vec<Chunk>,
    ) {
        let id = shape.id();
        // Written straight into the chunk; moved to the next one in the rare case it does
        // not fit (a copy of every record was a twentieth of the cost).
        let (mark, set_before) = (self.chunk.sets.len(), self.set);
        if self.set.is_none_or(|(t, _)| t != id) {
            self.open_set(id);
        }
        let at = self.chunk.sets.len();
        let (start_ms, end_ms, (client_ms, server_ms)) = (t.start_ms, t.end_ms, t.lat);
        let b = &mut self.chunk.sets;
        for f in &self.fields[usize::from(id - 256)] {
            match *f {
                Field::SrcV4 | Field::SrcV6 => addr(b, src, shape.v6),
                Field::DstV4 | Field::DstV6 => addr(b, dst, shape.v6),
                Field::SrcPort => b.extend_from_slice(&sport.to_be_bytes()),
                Field::DstPort => b.extend_from_slice(&dport.to_be_bytes()),
                Field::Protocol => b.push(6),
                Field::Direction => b.push(u8::from(shape.way == Way::Egress)),
                Field::StartMs => b.extend_from_slice(&start_ms.to_be_bytes()),
                Field::EndMs => b.extend_from_slice(&end_ms.to_be_bytes()),
                Field::Octets => b.extend_from_slice(
                    &(if shape.way == Way::Egress { d.acked } else { d.received }).to_be_bytes(),
                ),
                Field::Packets => b.extend_from_slice(
                    &u64::from(if shape.way == Way::Egress { d.segs_out } else { d.segs_in })
                        .to_be_bytes(),
                ),
                Field::EndReason => b.push(end_reason(r.end_reason)),
                Field::ClientLatencyMs => b.extend_from_slice(&client_ms.to_be_bytes()),
                Field::ServerLatencyMs => b.extend_from_slice(&server_ms.to_be_bytes()),
                Field::RetransSrcToDst | Field::RetransDstToSrc => {
                    b.extend_from_slice(&d.retrans.to_be_bytes());
                }
                Field::Ours(o) => own(b, o, r, (d, t)),
            }
        }
        let budget = self.cfg.message_size.saturating_sub(HEADER_LEN);
        if self.chunk.records > 0 && self.chunk.sets.len() > budget {
            let mut rec = std::mem::take(&mut self.scratch);
            rec.clear();
            rec.extend_from_slice(&self.chunk.sets[at..]);
            self.chunk.sets.truncate(mark);
            self.set = set_before;
            self.finish(out);
            self.open_set(id);
            self.chunk.sets.extend_from_slice(&rec);
            self.scratch = rec;
        }
        if self.chunk.records == 0 {
            self.chunk.first_seq = self.seq;
        }
        self.chunk.records += 1;
        self.seq = self.seq.wrapping_add(1);
        if self.chunk.sets.len() > budget {
            self.chunk.oversize = true;
        }
    }

    /// Starts a set of template `id` in the chunk, closing the one before.
    fn open_set(&mut self, id: u16) {
        self.close_set();
        self.set = Some((id, self.chunk.sets.len()));
        self.chunk.sets.extend_from_slice(&id.to_be_bytes());
        self.chunk.sets.extend_from_slice(&[0, 0]);
    }

    fn close_set(&mut self) {
        if let Some((_, at)) = self.set.take() {
            let len = (self.chunk.sets.len() - at) as u16;
            self.chunk.sets[at + 2..at + 4].copy_from_slice(&len.to_be_bytes());
        }
    }

    /// Completes the chunk being filled, if it holds a record.
    fn finish(&mut self, out: &mut Vec<Chunk>) {
        self.close_set();
        if self.chunk.records > 0 {
            let cap = self.cfg.message_size;
            let next =
                Chunk { sets: Vec::with_capacity(cap), records: 0, first_seq: 0, oversize: false };
            out.push(std::mem::replace(&mut self.chunk, next));
        }
    }
}

fn ms(realtime_ns: i128) -> u64 {
    (realtime_ns.max(0) / 1_000_000) as u64
}

/// The record's minimum RTT, µs: the kernel's, else the smallest observed.
fn min_rtt_us(r: &FlowStats) -> Option<u32> {
    r.min_rtt_kernel_ms.or(r.min_rtt_observed_ms).map(|ms| (ms * 1000.0).round() as u32)
}

/// flowEndReason (RFC 5102): 2 active timeout (an interim window), 3 end of flow detected
/// (the socket went, with or without its destroy event), 4 forced end (the monitor stopped).
fn end_reason(r: &str) -> u8 {
    match r {
        "window" => 2,
        "shutdown" => 4,
        _ => 3,
    }
}

fn addr(b: &mut Vec<u8>, a: IpAddr, v6: bool) {
    match (a, v6) {
        (IpAddr::V4(a), false) => b.extend_from_slice(&a.octets()),
        (IpAddr::V4(a), true) => b.extend_from_slice(&a.to_ipv6_mapped().octets()),
        (IpAddr::V6(a), _) => b.extend_from_slice(&a.octets()),
    }
}

fn own(b: &mut Vec<u8>, o: Own, r: &FlowStats, (d, t): (&Counters, &Times)) {
    let u32_ = |b: &mut Vec<u8>, v: u32| b.extend_from_slice(&v.to_be_bytes());
    let diag = r.diagnosis.as_ref();
    match o {
        Own::Verdict => string(b, diag.map_or("unknown", |d| d.verdict)),
        Own::Cause => string(b, diag.and_then(|d| d.cause).unwrap_or("none")),
        Own::MinRttUs => u32_(b, t.min_rtt_us),
        Own::Retransmits => u32_(b, d.retrans),
        Own::Program => string(b, r.comm.as_deref().unwrap_or("unknown")),
        Own::Destination => string(b, r.dest_service.as_deref().unwrap_or("unknown")),
        Own::Service => string(b, r.service.as_deref().unwrap_or("unknown")),
        Own::Pid => u32_(b, r.pid.unwrap_or(0)),
        Own::SynRetransmits => {
            u32_(b, r.diagnosis.as_ref().map_or(0, |d| d.signals.syn_retransmits));
        }
        Own::Rtt(i) => u32_(b, t.rtt_us[usize::from(i)]),
    }
}

/// A variable-length string (RFC 7011 §7): one length byte under 255, else 255 and two.
/// Names longer than 65,535 bytes cannot occur (a program's, a service's, a map's).
fn string(b: &mut Vec<u8>, s: &str) {
    let s = &s.as_bytes()[..s.len().min(usize::from(u16::MAX))];
    if s.len() < 255 {
        b.push(s.len() as u8);
    } else {
        b.push(255);
        b.extend_from_slice(&(s.len() as u16).to_be_bytes());
    }
    b.extend_from_slice(s);
}
