//! The exporter's tests: messages decoded by a small IPFIX reader of their own (RFC 7011
//! §3), independent of the encoder, and sent to sockets on loopback.

use std::collections::HashMap;
use std::net::UdpSocket;
use std::sync::Arc;
use std::time::Duration;

use super::encode::{Chunk, EncodeConfig, Encoder, HEADER_LEN};
use super::export::Exporter;
use super::template::{NTOP_PEN, OUR_NAMES};
use super::*;
use crate::analysis::{AnalyzerConfig, analyze};
use crate::record::text_in;
use crate::testkit::SockBuilder;

const PEN: u32 = 4_294_000_001;

type Key = (u16, Option<u32>);

/// A decoded data record: template id and (element, enterprise) → value bytes.
#[derive(Debug)]
struct Rec {
    template: u16,
    values: HashMap<Key, Vec<u8>>,
}

impl Rec {
    fn u(&self, id: u16, pen: Option<u32>) -> u64 {
        let b = self.values.get(&(id, pen)).unwrap_or_else(|| panic!("no {id}/{pen:?}: {self:?}"));
        b.iter().fold(0u64, |a, &x| (a << 8) | u64::from(x))
    }
    fn s(&self, own: u16) -> String {
        String::from_utf8(self.values[&(own, Some(PEN))].clone()).unwrap()
    }
    fn has(&self, id: u16, pen: Option<u32>) -> bool {
        self.values.contains_key(&(id, pen))
    }
}

/// A message: its header's sequence number and domain, and its data records, with the
/// templates it held added to `templates`.
fn decode(m: &[u8], templates: &mut HashMap<u16, Vec<(Key, u16)>>) -> (u32, u32, Vec<Rec>) {
    let be16 = |b: &[u8], i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
    let be32 = |b: &[u8], i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap());
    assert_eq!(be16(m, 0), 10, "version");
    assert_eq!(usize::from(be16(m, 2)), m.len(), "length");
    let (seq, domain) = (be32(m, 8), be32(m, 12));
    let mut out = Vec::new();
    let mut i = HEADER_LEN;
    while i < m.len() {
        let (id, len) = (be16(m, i), usize::from(be16(m, i + 2)));
        let set = &m[i + 4..i + len];
        i += len;
        if id == 2 {
            let mut j = 0;
            while j < set.len() {
                let (tid, n) = (be16(set, j), be16(set, j + 2));
                j += 4;
                let mut fields = Vec::new();
                for _ in 0..n {
                    let (e, flen) = (be16(set, j), be16(set, j + 2));
                    j += 4;
                    let pen = (e & 0x8000 != 0).then(|| {
                        j += 4;
                        be32(set, j - 4)
                    });
                    fields.push(((e & 0x7fff, pen), flen));
                }
                templates.insert(tid, fields);
            }
            continue;
        }
        let t = templates.get(&id).unwrap_or_else(|| panic!("data set {id} before its template"));
        let mut j = 0;
        while j < set.len() {
            let mut values = HashMap::new();
            for (k, flen) in t {
                let mut len = usize::from(*flen);
                if *flen == 65535 {
                    len = usize::from(set[j]);
                    j += 1;
                    if len == 255 {
                        len = usize::from(be16(set, j));
                        j += 2;
                    }
                }
                values.insert(*k, set[j..j + len].to_vec());
                j += len;
            }
            out.push(Rec { template: id, values });
        }
    }
    (seq, domain, out)
}

fn record(cookie: u64) -> FlowStats {
    let s = SockBuilder::new(cookie, 40000, 443).rtt_us(1500).min_rtt_us(1200).cwnd(10);
    let mut r = analyze(
        &mut crate::tracker::testing::ended_flow(&[(1_000_000_000, s)]),
        &AnalyzerConfig::default(),
    );
    // The text is what the encoder reads when the kernel's addresses are not kept beside it.
    r.id.addrs = None;
    r.id.src_ip = text_in("10.0.0.1");
    r.id.dst_ip = text_in("192.0.2.7");
    r.id.src_port = 40000;
    r.id.dst_port = 443;
    r.id.tstamp_start_ns = 5_000_000_000;
    r.duration = 2_500_000_000;
    r.bytes_acked = 1_000_001;
    r.bytes_received = 5_001;
    r.segs_out = 700;
    r.segs_in = 350;
    r.total_retransmits = 3;
    r.comm = Some("curl".into());
    r.dest_service = Some("external".into());
    r
}

fn cfg(pen: Option<u32>) -> EncodeConfig {
    EncodeConfig { pen, message_size: 1400, realtime_offset_ns: 1_700_000_000_000_000_000 }
}

/// The exporter's settings for one collector at `addr`.
fn collector_config(addr: &str, domain: u32, pen: Option<u32>) -> IpfixConfig {
    IpfixConfig {
        collectors: vec![CollectorAddr::parse(addr).unwrap()],
        domain,
        pen,
        message_size: 1400,
        realtime_offset_ns: 0,
    }
}

fn messages(chunks: &[Chunk], pen: Option<u32>) -> Vec<Vec<u8>> {
    // An exporter's messages for these chunks, read from a loopback socket.
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let port = rx.local_addr().unwrap().port();
    let c = collector_config(&format!("127.0.0.1:{port}"), 77, pen);
    let m = Arc::new(Metrics::default());
    let mut x = Exporter::new(&c, m.clone());
    let mut out = Vec::new();
    let mut buf = vec![0u8; 70_000];
    // Read after each send, so that the socket's buffer never overflows.
    let mut read = |out: &mut Vec<Vec<u8>>| {
        while out.len() < m.ipfix.messages.get() as usize {
            let n = rx.recv(&mut buf).unwrap();
            out.push(buf[..n].to_vec());
        }
    };
    x.refresh();
    read(&mut out);
    for c in chunks {
        x.chunk(c);
        read(&mut out);
    }
    out
}

fn all_records(msgs: &[Vec<u8>]) -> Vec<(u32, Vec<Rec>)> {
    let mut t = HashMap::new();
    msgs.iter()
        .map(|m| {
            let (seq, domain, recs) = decode(m, &mut t);
            assert_eq!(domain, 77);
            (seq, recs)
        })
        .collect()
}

#[test]
fn a_record_becomes_one_data_record_per_direction_with_its_values() {
    let mut e = Encoder::new(cfg(Some(PEN)));
    let mut r = record(1);
    r.accepted = false;
    let mut chunks = Vec::new();
    e.encode(&[r.clone()], &mut chunks);
    let msgs = messages(&chunks, Some(PEN));
    let recs: Vec<Rec> = all_records(&msgs).into_iter().flat_map(|(_, r)| r).collect();
    assert_eq!(recs.len(), 2);
    let (out, inn) = (&recs[0], &recs[1]);
    assert_eq!((out.template, inn.template), (256, 257));
    // Egress: this host's end is the source; bytes acked and segments out.
    assert_eq!(out.u(8, None), u64::from(u32::from_be_bytes([10, 0, 0, 1])));
    assert_eq!(out.u(12, None), u64::from(u32::from_be_bytes([192, 0, 2, 7])));
    assert_eq!((out.u(7, None), out.u(11, None)), (40000, 443));
    assert_eq!((out.u(1, None), out.u(2, None), out.u(61, None)), (1_000_001, 700, 1));
    // Ingress: the remote end is the source; bytes received and segments in.
    assert_eq!((inn.u(7, None), inn.u(11, None)), (443, 40000));
    assert_eq!((inn.u(1, None), inn.u(2, None), inn.u(61, None)), (5_001, 350, 0));
    assert_eq!(inn.u(8, None), u64::from(u32::from_be_bytes([192, 0, 2, 7])));
    for x in [out, inn] {
        assert_eq!(x.u(4, None), 6);
        // Start: the realtime offset plus the monotonic start, in ms; end: plus Duration.
        assert_eq!(x.u(152, None), 1_700_000_005_000);
        assert_eq!(x.u(153, None), 1_700_000_007_500);
        assert_eq!(x.u(136, None), 3, "a destroyed socket: end of flow detected");
        // The connecting side: the server is min RTT / 2 away (ntop's "RTT/2"), the client
        // here.
        assert_eq!((x.u(123, Some(NTOP_PEN)), x.u(124, Some(NTOP_PEN))), (0, 1));
        assert_eq!(x.u(3, Some(PEN)), 1200, "min RTT, µs");
        assert_eq!(x.u(4, Some(PEN)), 3, "retransmits");
        assert_eq!((x.s(5), x.s(6), x.s(7)), ("curl".into(), "external".into(), "unknown".into()));
        assert_eq!(x.s(1), r.diagnosis.as_ref().unwrap().verdict);
        assert_eq!(x.u(13, Some(PEN)), (r.rtt_summary.unwrap()[3] * 1000.0).round() as u64);
    }
    // Our retransmits ride in ntop's element for their direction in each.
    assert_eq!(out.u(109, Some(NTOP_PEN)), 3);
    assert!(!out.has(110, Some(NTOP_PEN)));
    assert_eq!(inn.u(110, Some(NTOP_PEN)), 3);
    // The accepting side: the client is the one away.
    r.accepted = true;
    let mut chunks = Vec::new();
    Encoder::new(cfg(None)).encode(&[r], &mut chunks);
    let recs: Vec<Rec> =
        all_records(&messages(&chunks, None)).into_iter().flat_map(|(_, r)| r).collect();
    assert_eq!((recs[0].u(123, Some(NTOP_PEN)), recs[0].u(124, Some(NTOP_PEN))), (1, 0));
    // Without an enterprise number of the user's, none of ours goes out.
    assert!(recs.iter().all(|x| x.values.keys().all(|(_, p)| *p != Some(PEN))));
    assert_eq!(recs[0].values.len(), 14);
}

#[test]
fn ipv6_and_v4_mapped_ends_take_their_templates() {
    let mut a = record(1);
    a.id.src_ip = text_in("2001:db8::1");
    a.id.dst_ip = text_in("2001:db8::2");
    let mut b = record(2);
    b.id.src_ip = text_in("::ffff:127.0.0.1");
    b.id.dst_ip = text_in("::ffff:127.0.0.2");
    let mut chunks = Vec::new();
    Encoder::new(cfg(None)).encode(&[a, b], &mut chunks);
    let recs: Vec<Rec> =
        all_records(&messages(&chunks, None)).into_iter().flat_map(|(_, r)| r).collect();
    let t: Vec<u16> = recs.iter().map(|r| r.template).collect();
    assert_eq!(t, [258, 259, 256, 257], "IPv6 both ways, then the mapped pair as IPv4");
    assert_eq!(
        recs[0].values[&(27, None)],
        "2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap().octets()
    );
    assert_eq!(recs[2].u(8, None), u64::from(u32::from_be_bytes([127, 0, 0, 1])));
}

#[test]
fn interim_records_carry_the_change_so_a_collector_sums_to_the_total() {
    let mut w0 = record(9);
    w0.end_reason = "window";
    (w0.bytes_acked, w0.bytes_received, w0.segs_out, w0.segs_in) = (600, 60, 10, 5);
    let mut w1 = w0.clone();
    w1.seq = 1;
    (w1.bytes_acked, w1.bytes_received, w1.segs_out, w1.segs_in) = (1_000, 60, 17, 5);
    let mut end = w1.clone();
    end.seq = 2;
    end.end_reason = "destroyed";
    (end.bytes_acked, end.bytes_received, end.segs_out, end.segs_in) = (1_500, 90, 20, 9);
    let mut chunks = Vec::new();
    let mut e = Encoder::new(cfg(None));
    e.encode(&[w0, w1], &mut chunks);
    e.encode(&[end], &mut chunks);
    let recs: Vec<Rec> =
        all_records(&messages(&chunks, None)).into_iter().flat_map(|(_, r)| r).collect();
    let sum = |dir: u64, id: u16| -> u64 {
        recs.iter().filter(|r| r.u(61, None) == dir).map(|r| r.u(id, None)).sum()
    };
    assert_eq!((sum(1, 1), sum(1, 2)), (1_500, 20));
    assert_eq!((sum(0, 1), sum(0, 2)), (90, 9));
    // The middle window received nothing: it has no ingress record.
    let reasons: Vec<(u64, u64)> = recs.iter().map(|r| (r.u(136, None), r.u(61, None))).collect();
    assert_eq!(reasons, [(2, 1), (2, 0), (2, 1), (3, 1), (3, 0)]);
}

#[test]
fn messages_stay_within_the_size_and_number_every_data_record() {
    let records: Vec<FlowStats> = (0..500).map(record).collect();
    let mut chunks = Vec::new();
    let mut e = Encoder::new(cfg(Some(PEN)));
    e.encode(&records[..300], &mut chunks);
    e.encode(&records[300..], &mut chunks);
    assert_eq!(e.next_seq(), 1000);
    let msgs = messages(&chunks, Some(PEN));
    assert!(msgs.iter().all(|m| m.len() <= 1400), "{:?}", msgs.iter().map(Vec::len).max());
    let got = all_records(&msgs);
    // Contiguous: each message's number is the count of data records before it (the
    // template-only ones carry the next).
    let mut next = 0;
    for (seq, recs) in &got {
        assert_eq!(*seq, next);
        next += recs.len() as u32;
    }
    assert_eq!(next, 1000);
}

#[test]
fn the_kernels_addresses_kept_beside_the_text_give_the_same_records() {
    let mut a = record(1);
    a.id.addrs = Some(("10.0.0.1".parse().unwrap(), "192.0.2.7".parse().unwrap()));
    let (mut x, mut y) = (Vec::new(), Vec::new());
    Encoder::new(cfg(Some(PEN))).encode(&[a.clone()], &mut x);
    a.id.addrs = None;
    Encoder::new(cfg(Some(PEN))).encode(&[a], &mut y);
    assert_eq!(x, y);
}

#[test]
fn a_connect_that_never_got_an_answer_still_gives_its_egress_record() {
    let mut r = record(3);
    (r.bytes_acked, r.bytes_received, r.segs_out, r.segs_in) = (0, 0, 0, 0);
    let mut chunks = Vec::new();
    Encoder::new(cfg(Some(PEN))).encode(&[r], &mut chunks);
    let recs: Vec<Rec> =
        all_records(&messages(&chunks, Some(PEN))).into_iter().flat_map(|(_, r)| r).collect();
    assert_eq!(recs.len(), 1);
    assert_eq!((recs[0].u(61, None), recs[0].u(1, None)), (1, 0));
}

#[test]
fn long_strings_use_the_three_byte_length() {
    let mut r = record(4);
    r.dest_service = Some("d".repeat(300));
    let mut chunks = Vec::new();
    Encoder::new(cfg(Some(PEN))).encode(&[r], &mut chunks);
    let recs: Vec<Rec> =
        all_records(&messages(&chunks, Some(PEN))).into_iter().flat_map(|(_, r)| r).collect();
    assert_eq!(recs[0].s(6), "d".repeat(300));
    assert_eq!(recs[1].s(6), "d".repeat(300));
}

#[test]
fn a_collector_that_is_down_is_counted_and_logged_once_and_recovers() {
    // A port nothing listens on: the kernel answers ICMP port unreachable, and the next
    // send on the connected socket is refused.
    let port = {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().port()
    };
    let c = collector_config(&format!("127.0.0.1:{port}"), 1, None);
    let m = Arc::new(Metrics::default());
    let mut x = Exporter::new(&c, m.clone());
    let mut e = Encoder::new(cfg(None));
    for i in 0..20 {
        let mut chunks = Vec::new();
        e.encode(&[record(i)], &mut chunks);
        chunks.iter().for_each(|c| x.chunk(c));
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(m.ipfix.refused.get() >= 5, "refused {}", m.ipfix.refused.get());
    assert_eq!(m.ipfix.failing.get(), 1);
    assert!(m.ipfix.dropped.get() >= 5);
    // It comes up: the next sends go, and once they have gone without a failure for
    // `recover_after` it is no longer failing.
    let rx = UdpSocket::bind(("127.0.0.1", port)).unwrap();
    x.recover_after = Duration::from_millis(100);
    // A send every 20 ms: the first may still meet the ICMP answer to one before the bind.
    for i in 0..100 {
        let mut chunks = Vec::new();
        e.encode(&[record(100 + i)], &mut chunks);
        chunks.iter().for_each(|c| x.chunk(c));
        if m.ipfix.failing.get() == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(m.ipfix.failing.get(), 0, "back within 2 s of sends that all went");
    let mut buf = [0u8; 2000];
    rx.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    assert!(rx.recv(&mut buf).is_ok());
}

#[test]
fn a_name_that_does_not_resolve_is_counted_and_retried_later() {
    let c = collector_config("no-such-collector.invalid:4739", 1, None);
    let m = Arc::new(Metrics::default());
    let mut x = Exporter::new(&c, m.clone());
    let mut chunks = Vec::new();
    Encoder::new(cfg(None)).encode(&[record(1), record(2)], &mut chunks);
    chunks.iter().for_each(|c| x.chunk(c));
    chunks.iter().for_each(|c| x.chunk(c));
    assert_eq!(m.ipfix.unresolved.get(), 2);
    assert_eq!(m.ipfix.dropped.get(), 8, "two records, both ways, twice");
    assert_eq!(m.ipfix.failing.get(), 1);
}

#[test]
fn a_collector_that_does_not_read_never_holds_up_the_sender() {
    // Bound, never read: its buffer fills and the kernel drops the rest there. The sends
    // all return at once; the exporter counts them sent (the loss is the receiver's).
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let c = collector_config(&rx.local_addr().unwrap().to_string(), 1, Some(PEN));
    let m = Arc::new(Metrics::default());
    let (tx, chan) = std::sync::mpsc::sync_channel(CHANNEL_CAPACITY);
    let t = export::spawn(c, chan, m.clone()).unwrap();
    let mut h = Handoff::new(cfg(Some(PEN)), tx, m.clone(), 1);
    let records: Vec<FlowStats> = (0..100).map(record).collect();
    for _ in 0..200 {
        h.export(&records);
    }
    drop(h);
    t.join().unwrap();
    // 20,000 records, two data records each: every one taken by the socket or, if the
    // hand-off filled, dropped and counted; none waited for.
    assert_eq!(m.ipfix.sent.get() + m.ipfix.dropped.get(), 40_000);
    assert!(m.ipfix.sent.get() > 0);
}

/// A batch of records leaves paced: a rest of [`export::PACE_REST`] after every
/// [`export::PACE_BURST`] messages, so a burst reaches a collector spread over
/// milliseconds rather than at once (a collector socket with Linux's default buffer holds
/// about 90 messages; unpaced, nfcapd lost part of such a burst). Judged by the least time
/// the rests take, which no machine's speed shortens.
#[test]
fn a_burst_of_messages_is_spread_by_the_pacing() {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let c = collector_config(&rx.local_addr().unwrap().to_string(), 1, Some(PEN));
    let m = Arc::new(Metrics::default());
    let mut x = Exporter::new(&c, m.clone());
    let records: Vec<FlowStats> = (0..40).map(record).collect();
    let mut chunks = Vec::new();
    Encoder::new(cfg(Some(PEN))).encode(&records, &mut chunks);
    let sends = 20 * export::PACE_BURST as usize;
    let t = std::time::Instant::now();
    for i in 0..sends {
        x.chunk(&chunks[i % chunks.len()]);
    }
    let took = t.elapsed();
    assert!(m.ipfix.messages.get() as usize >= sends, "a message a chunk, templates aside");
    assert!(took >= export::PACE_REST * 20, "{sends} messages in {took:?}: not paced");
}

#[test]
fn collectors_parse_and_bad_ones_say_why() {
    let ok = |s: &str| CollectorAddr::parse(s).unwrap().to_string();
    assert_eq!(ok("collector.example:4739"), "collector.example:4739");
    assert_eq!(ok("10.1.2.3:2055"), "10.1.2.3:2055");
    assert_eq!(ok("[::1]:4739"), "[::1]:4739");
    for (bad, says) in [
        ("collector", "HOST:PORT"),
        ("::1:4739", "brackets"),
        ("[::1:4739", "closing ]"),
        ("[zz]:4739", "not an IPv6 address"),
        ("host:0", "1 to 65535"),
        ("host:70000", "1 to 65535"),
        (":4739", "empty"),
        ("a b:4739", "not a host name"),
        ("[::1]", "HOST:PORT"),
    ] {
        let e = CollectorAddr::parse(bad).unwrap_err().to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn the_default_domain_is_stable_and_the_names_are_numbered_in_order() {
    assert_eq!(default_domain("h"), default_domain("h"));
    assert_eq!(fnv1a32(b""), 0x811c_9dc5);
    assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
    assert_eq!(OUR_NAMES.len(), template::OURS.len());
    for (i, o) in template::OURS.iter().enumerate() {
        assert_eq!(usize::from(o.id()), i + 1);
    }
}
