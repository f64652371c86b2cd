//! Live dumps of 20,000 loopback sockets (10,000 connections held by this process and a
//! forked child), measured side by side in one run:
//! - `bare_recv_discard`: a loop that sends the same request and receives and discards every
//!   datagram until NLMSG_DONE: the floor, nearly all of it kernel time;
//! - `sampler`: `Sampler::dump_with` and its default single-walk request (type 18), which
//!   also timestamps and indexes every socket, with a visitor reading what a tracker reads;
//! - `sampler_keep_whole_dump`: `Sampler::dump`, which keeps every datagram (buffers recycled);
//! - `two_family_dumps`: `sampler` with one request per family, the fallback;
//! - `filter_1pct` vs `filter_none`: a kernel filter that passes 200 of the 20,000 sockets
//!   against one of the same shape that passes none.
//!
//! Run: `cargo bench --bench dump` (takes about two minutes).

use std::hint::black_box;
use std::time::Instant;

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
/// Interleaved pairs per comparison after the criterion runs.
const PAIRS: usize = 100;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn sampler(cfg: SamplerConfig) -> Sampler<NetlinkSource> {
    Sampler::new(NetlinkSource::open(SocketOptions::default()).unwrap(), cfg).unwrap()
}

/// The sampler's own single-walk request for `cfg`, unfiltered, for the bare loop.
fn bare_request(cfg: &SamplerConfig) -> Vec<u8> {
    DumpRequest {
        kind: RequestKind::SingleWalk,
        states: cfg.states.0,
        ext: cfg.ext,
        bytecode: None,
    }
    .emit(1)
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

/// One dump through `Sampler::dump_with`, reading per socket what a tracker reads.
async fn visit_dump(s: &mut Sampler<NetlinkSource>) -> u64 {
    let mut acc = 0u64;
    s.dump_with(|x| {
        let t = x.tcp_info();
        acc = acc
            .wrapping_add(x.key().cookie)
            .wrapping_add(t.and_then(|t| t.rtt()).unwrap_or(0).into())
            .wrapping_add(t.and_then(|t| t.snd_cwnd_bytes()).unwrap_or(0))
            .wrapping_add(t.and_then(|t| t.bytes_acked()).unwrap_or(0));
    })
    .await
    .unwrap();
    acc
}

/// Benchmarks `Sampler::dump_with` with `cfg`.
fn bench_dumps(g: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, name: &str, cfg: SamplerConfig) {
    let mut s = sampler(cfg);
    g.bench_function(name, |b| b.iter(|| black_box(rt.block_on(visit_dump(&mut s)))));
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
    // The held connections are counted by their port, so that sockets other processes hold
    // on the host (another benchmark, another test) do not fail the check.
    let ours = SamplerConfig {
        filter: Some(cgmon_rs::filter::parse(&format!("sport {port} or dport {port}")).unwrap()),
        ..base.clone()
    };
    let held = rt.block_on(sampler(ours).dump()).unwrap().sockets as usize;
    assert_eq!(held, 2 * CONNS, "the dump sees every held connection's two ends");
    let count = rt.block_on(sampler(base.clone()).dump()).unwrap().sockets as usize;
    eprintln!("sockets per unfiltered dump: {count}");

    let mut g = c.benchmark_group("dump_20k");
    g.throughput(Throughput::Elements(count as u64));
    {
        let mut src = NetlinkSource::open(SocketOptions::default()).unwrap();
        let req = bare_request(&base);
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
    let mut keep = sampler(SamplerConfig { mode: DumpMode::SingleWalk, ..base.clone() });
    g.bench_function("sampler_keep_whole_dump", |b| {
        b.iter(|| {
            let d = rt.block_on(keep.dump()).unwrap();
            let n = black_box(d.batch.len());
            keep.recycle(d.batch);
            n
        })
    });
    g.finish();

    // 1 %: the 200 lowest client ports' sockets on the client side (dport = listener).
    let mut ports = holder.client_ports.clone();
    ports.sort_unstable();
    let (lo, hi) = (ports[0], ports[199]);
    let pass = filter::parse(&format!("dport {port} and sport {lo}-{hi}")).unwrap();
    // Same shape, but a source range no socket of ours uses.
    let none = filter::parse(&format!("dport {port} and sport 1-2")).unwrap();
    let mut g = c.benchmark_group("filter_20k");
    let (pass_f, none_f) = (pass.clone(), none.clone());
    for (name, f) in [("filter_1pct", pass), ("filter_none", none)] {
        let cfg = SamplerConfig { filter: Some(f), ..base.clone() };
        let n = rt.block_on(sampler(cfg.clone()).dump()).unwrap().sockets;
        eprintln!("{name}: {n} sockets pass");
        bench_dumps(&mut g, &rt, name, cfg);
    }
    g.finish();
    c.final_summary();

    if !std::env::args().any(|a| a == "--bench") {
        return; // `cargo test --benches` runs each benchmark once; skip the long pairing.
    }
    // The same comparisons as interleaved pairs: A then B, back to back, many times, so that
    // the machine's load drifts equally over both; the median of per-pair ratios is robust to
    // the shared machine's noise in a way two sequential criterion runs are not.
    let mut bare_src = NetlinkSource::open(SocketOptions::default()).unwrap();
    let mut buf = Vec::with_capacity(DEFAULT_READ_BUFSIZE);
    let bare_req = bare_request(&base);
    let mut single = sampler(SamplerConfig { mode: DumpMode::SingleWalk, ..base.clone() });
    let mut two = sampler(SamplerConfig { mode: DumpMode::PerFamily, ..base.clone() });
    let mut pass_s = sampler(SamplerConfig { filter: Some(pass_f), ..base.clone() });
    let mut none_s = sampler(SamplerConfig { filter: Some(none_f), ..base.clone() });
    let timed = |s: &mut Sampler<NetlinkSource>| {
        let t = Instant::now();
        black_box(rt.block_on(visit_dump(s)));
        t.elapsed()
    };
    let mut pairs = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..PAIRS {
        let t = Instant::now();
        rt.block_on(bare(&mut bare_src, &bare_req, &mut buf));
        let bare_t = t.elapsed();
        pairs[0].push((timed(&mut single), bare_t));
        pairs[1].push((timed(&mut single), timed(&mut two)));
        pairs[2].push((timed(&mut pass_s), timed(&mut none_s)));
        let t = Instant::now();
        let d = rt.block_on(keep.dump()).unwrap();
        let keep_t = t.elapsed();
        keep.recycle(d.batch);
        let t = Instant::now();
        rt.block_on(bare(&mut bare_src, &bare_req, &mut buf));
        pairs[3].push((keep_t, t.elapsed()));
    }
    for (label, p) in [
        ("sampler / bare_recv_discard", &pairs[0]),
        ("single_walk / two_family_dumps", &pairs[1]),
        ("filter_1pct / filter_none", &pairs[2]),
        ("sampler_keep_whole_dump / bare_recv_discard", &pairs[3]),
    ] {
        eprintln!(
            "paired x{PAIRS}: {label}: median {:.3} ms / {:.3} ms, median ratio {:.3}",
            median(p.iter().map(|x| x.0.as_secs_f64() * 1e3).collect()),
            median(p.iter().map(|x| x.1.as_secs_f64() * 1e3).collect()),
            median(p.iter().map(|x| x.0.as_secs_f64() / x.1.as_secs_f64()).collect()),
        );
    }
    drop(holder);
}
