//! The exact path's own cost, no kernel: building the requests for 256 sockets, and a whole
//! exact poll of 256 sockets (requests built, answers read, indexed and shown to a visitor
//! that reads what the tracker reads) against canned answers: the first 256 sockets of the
//! 20,000-socket dump captured on this kernel (tests/fixtures/dump20k.bin.gz).

use std::hint::black_box;
use std::io::Read;

use cgmon_rs::sampler::exact::Answer;
use cgmon_rs::sampler::fakes::CannedAnswers;
use cgmon_rs::sampler::source::parse_datagrams;
use cgmon_rs::sampler::{Sampler, SamplerConfig};
use cgmon_rs::wire::inet_diag::{InetDiagMsg, SocketTarget, default_extensions};
use cgmon_rs::wire::nlmsg::NlMsgIter;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const N: usize = 256;

/// The first `N` socket messages of the fixture, whole.
fn messages() -> Vec<Vec<u8>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/dump20k.bin.gz");
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap()).read_to_end(&mut raw).unwrap();
    let mut out = Vec::new();
    for d in parse_datagrams(&raw).unwrap() {
        let mut at = 0;
        for m in NlMsgIter::new(&d.bytes).flatten() {
            let len = 16 + m.payload.len();
            if m.kind == 18 || m.kind == 20 {
                let mut msg = d.bytes[at..at + len].to_vec();
                msg[4..6].copy_from_slice(&20u16.to_ne_bytes());
                out.push(msg);
            }
            at += len.next_multiple_of(4);
        }
        if out.len() >= N {
            break;
        }
    }
    out.truncate(N);
    out
}

fn bench(c: &mut Criterion) {
    let msgs = messages();
    let targets: Vec<SocketTarget> = msgs
        .iter()
        .map(|m| SocketTarget::of(&InetDiagMsg::new_checked(&m[16..]).unwrap()))
        .collect();
    let mut g = c.benchmark_group("exact_256");
    g.throughput(Throughput::Elements(N as u64));
    let mut buf = Vec::with_capacity(N * 72);
    g.bench_function("build_requests", |b| {
        b.iter(|| {
            buf.clear();
            for (i, t) in targets.iter().enumerate() {
                t.emit(default_extensions(), i as u32, &mut buf);
            }
            black_box(buf.len())
        })
    });
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut s = Sampler::new(CannedAnswers::new(msgs), SamplerConfig::default()).unwrap();
    g.bench_function("poll_canned_answers", |b| {
        b.iter(|| {
            let mut acked = 0u64;
            let p = rt
                .block_on(s.exact_with(&targets, |_, a| {
                    if let Answer::Found(x) = a {
                        acked += x.tcp_info().and_then(|t| t.bytes_acked()).unwrap_or(0);
                        acked += u64::from(x.msg().state());
                    }
                }))
                .unwrap();
            assert_eq!(p.found as usize, N);
            black_box(acked)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
