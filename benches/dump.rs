//! Live dumps of 20,000 loopback sockets (10,000 connections held by this process and a
//! forked child), measured side by side in one run:
//! - `bare_recv_discard`: a loop that sends the same request and receives and discards every
//!   datagram until NLMSG_DONE: the floor, nearly all of it kernel time;
//! - `sampler`: `Sampler::dump` with its default single-walk request (type 18), which also
//!   timestamps, indexes and keeps every socket;
//! - `two_family_dumps`: the same with one request per family, the fallback;
//! - `filter_1pct` vs `filter_none`: a kernel filter that passes 200 of the 20,000 sockets
//!   against one of the same shape that passes none.
//!
//! Run: `cargo bench --bench dump` (takes about two minutes).

use std::hint::black_box;

use cgmon_rs::filter;
use cgmon_rs::sampler::source::{DumpSource, NetlinkSource, SocketOptions};
use cgmon_rs::sampler::{DEFAULT_READ_BUFSIZE, DumpMode, Sampler, SamplerConfig};
use cgmon_rs::testkit::ConnHolder;
use cgmon_rs::wire::inet_diag::{DumpRequest, RequestKind};
use cgmon_rs::wire::nlmsg::{NLMSG_DONE, NLMSG_ERROR, NlMsgIter};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput};
use tokio::runtime::Runtime;

const CONNS: usize = 10_000;

fn sampler(cfg: SamplerConfig) -> Sampler<NetlinkSource> {
    Sampler::new(NetlinkSource::open(SocketOptions::default()).unwrap(), cfg).unwrap()
}

/// Receives a whole dump and throws it away; returns the datagram count.
async fn bare(src: &mut NetlinkSource, req: &[u8], buf: &mut Vec<u8>) -> usize {
    src.send(req).await.unwrap();
    let mut n = 0;
    loop {
        src.recv(buf).await.unwrap();
        n += 1;
        // The end is the last message of its datagram; look only there.
        let last = NlMsgIter::new(buf).flatten().last();
        if last.is_some_and(|m| m.kind == NLMSG_DONE || m.kind == NLMSG_ERROR) {
            return n;
        }
    }
}

/// Benchmarks `Sampler::dump` with `cfg`, recycling each dump's buffers as the pipeline does.
fn bench_dumps(g: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, name: &str, cfg: SamplerConfig) {
    let mut s = sampler(cfg);
    g.bench_function(name, |b| {
        b.iter(|| {
            let d = rt.block_on(s.dump()).unwrap();
            let n = black_box(d.batch.len());
            s.recycle(d.batch);
            n
        })
    });
}

fn main() {
    // Fork the connection holder before criterion or tokio start threads.
    let holder =
        ConnHolder::start("127.0.0.1:0".parse().unwrap(), CONNS).expect("holding connections");
    let port = holder.addr.port();
    let rt = Runtime::new().unwrap();
    let _enter = rt.enter();
    let mut c = Criterion::default().configure_from_args().sample_size(20);

    // ESTABLISHED only: the sockets held here, not the TIME-WAITs earlier runs leave behind.
    let base = SamplerConfig {
        states: cgmon_rs::states::StateSet::parse("established").unwrap(),
        ..SamplerConfig::default()
    };
    let count = rt.block_on(sampler(base.clone()).dump()).unwrap().batch.len();
    assert!((2 * CONNS..2 * CONNS + 100).contains(&count), "dump sees {count} sockets");
    eprintln!("sockets per unfiltered dump: {count}");

    let mut g = c.benchmark_group("dump_20k");
    g.throughput(Throughput::Elements(count as u64));
    {
        let mut src = NetlinkSource::open(SocketOptions::default()).unwrap();
        let req = DumpRequest {
            kind: RequestKind::SingleWalk,
            states: base.states.0,
            ext: base.ext,
            bytecode: None,
        }
        .emit(1);
        let mut buf = Vec::with_capacity(DEFAULT_READ_BUFSIZE);
        g.bench_function("bare_recv_discard", |b| {
            b.iter(|| black_box(rt.block_on(bare(&mut src, &req, &mut buf))))
        });
    }
    // The sampler's own default request is the single walk; the second line is the fallback.
    bench_dumps(
        &mut g,
        &rt,
        "sampler",
        SamplerConfig { mode: DumpMode::SingleWalk, ..base.clone() },
    );
    bench_dumps(
        &mut g,
        &rt,
        "two_family_dumps",
        SamplerConfig { mode: DumpMode::PerFamily, ..base.clone() },
    );
    g.finish();

    // 1 %: the 200 lowest client ports' sockets on the client side (dport = listener).
    let mut ports = holder.client_ports.clone();
    ports.sort_unstable();
    let (lo, hi) = (ports[0], ports[199]);
    let pass = filter::parse(&format!("dport {port} and sport {lo}-{hi}")).unwrap();
    // Same shape, but a source range no socket of ours uses.
    let none = filter::parse(&format!("dport {port} and sport 1-2")).unwrap();
    let mut g = c.benchmark_group("filter_20k");
    for (name, f) in [("filter_1pct", pass), ("filter_none", none)] {
        let cfg = SamplerConfig { filter: Some(f), ..base.clone() };
        let n = rt.block_on(sampler(cfg.clone()).dump()).unwrap().batch.len();
        eprintln!("{name}: {n} sockets pass");
        bench_dumps(&mut g, &rt, name, cfg);
    }
    g.finish();
    c.final_summary();
    drop(holder);
}
