//! `--dest-map` at scale: loading 100,000 port ranges on one prefix (27.7 s before the
//! ranges were indexed once instead of kept sorted line by line) and a lookup among them.
//!
//! ```text
//! cargo bench --bench destmap
//! ```

use std::hint::black_box;
use std::net::IpAddr;

use cgmon_rs::who::destinations::DestMap;
use criterion::{Criterion, criterion_group, criterion_main};

/// 100,000 ranges on 10.0.0.0/8: disjoint narrow ones and nested wide ones.
fn map_text() -> String {
    let mut t = String::with_capacity(4 << 20);
    for i in 0..100_000u32 {
        let (lo, hi) = if i % 2 == 0 {
            let p = (i / 2 % 65_000) as u16;
            (p, p)
        } else {
            let p = (i % 30_000) as u16;
            (p, p + (i % 5_000) as u16)
        };
        t.push_str(&format!("10.0.0.0/8:{lo}-{hi} svc{i}\n"));
    }
    t
}

fn bench(c: &mut Criterion) {
    let text = map_text();
    let mut g = c.benchmark_group("destmap");
    g.sample_size(10);
    g.bench_function("load 100k ranges on one prefix", |b| {
        b.iter(|| DestMap::parse(black_box(&text), vec![]).unwrap())
    });
    let m = DestMap::parse(&text, vec![]).unwrap();
    let addr: IpAddr = "10.1.2.3".parse().unwrap();
    let mut port = 0u16;
    g.bench_function("lookup among 100k ranges", |b| {
        b.iter(|| {
            port = port.wrapping_add(7919);
            black_box(m.name_str(addr, port).len())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
