//! Decode cost per socket on a real 20,000-socket dump captured on this kernel
//! (tests/fixtures/dump20k.bin.gz), with no kernel involved:
//! - `index`: framing plus attribute indexing, the sampler's whole per-socket work;
//! - `index+read`: the same plus reading the fields a tracker reads;
//! - `netlink-packet-sock-diag`: the crate's parser on the same bytes, for scale.

use std::hint::black_box;
use std::io::Read;

use cgmon_rs::sampler::source::parse_datagrams;
use cgmon_rs::sampler::{Dump, scan_datagram};
use cgmon_rs::wire::nlmsg::NlMsgIter;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use netlink_packet_core::NetlinkMessage;
use netlink_packet_sock_diag::SockDiagMessage;

fn load() -> Vec<Vec<u8>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/dump20k.bin.gz");
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap()).read_to_end(&mut raw).unwrap();
    parse_datagrams(&raw).unwrap().into_iter().map(|d| d.bytes).collect()
}

fn bench(c: &mut Criterion) {
    let dgs = load();
    let mut probe = Dump::default();
    for (i, d) in dgs.iter().enumerate() {
        scan_datagram(d, 1, i as u32, "bench", &mut probe).unwrap();
    }
    let n = probe.batch.index.len();
    assert_eq!(n, 20_000);

    let mut g = c.benchmark_group("decode_20k");
    g.throughput(Throughput::Elements(n as u64));
    let mut dump = Dump::default();
    dump.batch.index.reserve(n);
    g.bench_function("index", |b| {
        b.iter(|| {
            dump.batch.index.clear();
            for (i, d) in dgs.iter().enumerate() {
                scan_datagram(black_box(d), 1, i as u32, "bench", &mut dump).unwrap();
            }
            black_box(dump.batch.index.len())
        })
    });
    // As in the sampler, each datagram is scanned right after recv(2) copied it into our
    // buffer, so it is hot in cache. `copy` is that copy alone; `copy+index` minus `copy` is
    // the decode cost on a just-received datagram. (`index` above walks the 10 MB dump cold.)
    let mut rbuf = vec![0u8; 64 * 1024];
    g.bench_function("copy", |b| {
        b.iter(|| {
            let mut acc = 0usize;
            for d in &dgs {
                rbuf[..d.len()].copy_from_slice(black_box(d));
                acc += black_box(&rbuf)[0] as usize;
            }
            black_box(acc)
        })
    });
    g.bench_function("copy+index", |b| {
        b.iter(|| {
            dump.batch.index.clear();
            for (i, d) in dgs.iter().enumerate() {
                rbuf[..d.len()].copy_from_slice(black_box(d));
                scan_datagram(&rbuf[..d.len()], 1, i as u32, "bench", &mut dump).unwrap();
            }
            black_box(dump.batch.index.len())
        })
    });
    // Reading needs the datagrams in the batch; clone them once outside the loop.
    let mut owned = probe.clone();
    owned.batch.datagrams =
        dgs.iter().map(|b| cgmon_rs::wire::sock::Datagram { ts_ns: 0, bytes: b.clone() }).collect();
    g.bench_function("index+read", |b| {
        b.iter(|| {
            // Scan and read the same buffers, as the pipeline does.
            owned.batch.index.clear();
            let dgrams = std::mem::take(&mut owned.batch.datagrams);
            for (i, d) in dgrams.iter().enumerate() {
                scan_datagram(black_box(&d.bytes), 1, i as u32, "bench", &mut owned).unwrap();
            }
            owned.batch.datagrams = dgrams;
            let mut acc = 0u64;
            for s in owned.batch.iter() {
                let k = s.key();
                let t = s.tcp_info().unwrap();
                acc = acc
                    .wrapping_add(k.cookie)
                    .wrapping_add(u64::from(t.rtt().unwrap_or(0)))
                    .wrapping_add(t.snd_cwnd_bytes().unwrap_or(0))
                    .wrapping_add(t.bytes_acked().unwrap_or(0))
                    .wrapping_add(t.pacing_rate().unwrap_or(0));
            }
            black_box(acc)
        })
    });
    g.sample_size(10);
    g.bench_function("netlink-packet-sock-diag", |b| {
        b.iter(|| {
            let mut count = 0usize;
            for d in &dgs {
                for m in NlMsgIter::new(d).flatten() {
                    if m.kind != 18 {
                        continue;
                    }
                    let start = m.payload_offset - 16;
                    let mut owned = d[start..m.payload_offset + m.payload.len()].to_vec();
                    owned[4..6].copy_from_slice(&20u16.to_ne_bytes());
                    let msg = NetlinkMessage::<SockDiagMessage>::deserialize(&owned).unwrap();
                    count += black_box(&msg).header.length as usize;
                }
            }
            black_box(count)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
