//! The captured 20,000-socket dump the tracker benches replay, and changed copies of it.

use std::io::Read;

use cgmon_rs::analysis::{AnalyzerConfig, FlowStats, analyze};
use cgmon_rs::sampler::source::parse_datagrams;
use cgmon_rs::sampler::{Dump, scan_datagram};
use cgmon_rs::tracker::{Tracker, TrackerConfig};
use cgmon_rs::wire::sock::Datagram;

/// `tests/fixtures/dump20k.bin.gz`, scanned as the sampler does.
pub fn load_dump() -> Dump {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/dump20k.bin.gz");
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap()).read_to_end(&mut raw).unwrap();
    let mut d = Dump::default();
    for (i, dg) in parse_datagrams(&raw).unwrap().into_iter().enumerate() {
        scan_datagram(&dg.bytes, 1, i as u32, "bench", &mut d).unwrap();
        d.batch.datagrams.push(dg);
    }
    d
}

/// The same dump with the RTT of every `every`-th socket one µs higher.
pub fn bumped(d: &Dump, every: usize) -> Dump {
    bumped_where(d, |i| i % every == 0)
}

/// The same dump with the RTT of socket `i` (in dump order) one µs higher where `bump(i)`.
pub fn bumped_where(d: &Dump, bump: impl Fn(usize) -> bool) -> Dump {
    let mut e = d.clone();
    let index = e.batch.index.clone();
    for idx in index.iter().enumerate().filter(|(i, _)| bump(*i)).map(|(_, idx)| idx) {
        let dg: &mut Datagram = &mut e.batch.datagrams[idx.dgram as usize];
        let start = idx.payload_off as usize;
        let payload = &dg.bytes[start..start + usize::from(idx.payload_len)];
        let view = cgmon_rs::wire::sock::Sample::new(0, payload, idx);
        let info = view.tcp_info().unwrap();
        let off = info.as_bytes().as_ptr() as usize - dg.bytes.as_ptr() as usize + 68; // tcpi_rtt
        let rtt = u32::from_ne_bytes(dg.bytes[off..off + 4].try_into().unwrap());
        dg.bytes[off..off + 4].copy_from_slice(&(rtt + 1).to_ne_bytes());
    }
    e
}

/// The fixture's flows as records: three dumps (the RTT of every other socket moved in the
/// second), then every flow ended, analysed, and serialised.
#[allow(dead_code)] // the sink and fleet benches'
pub fn records() -> Vec<(Vec<u8>, FlowStats)> {
    let a = load_dump();
    let b = bumped(&a, 2);
    let mut t = Tracker::new(TrackerConfig::default());
    let mut out = Vec::new();
    for (k, d) in [&a, &b, &a].into_iter().enumerate() {
        t.begin_dump();
        for s in d.batch.iter() {
            t.observe(&s, &mut out);
        }
        t.end_dump(true, 1 + k as u64 * 1_000_000_000, &mut out);
    }
    t.finish(&mut out);
    let cfg = AnalyzerConfig::default();
    out.iter_mut()
        .map(|e| {
            let r = analyze(e, &cfg);
            (serde_json::to_vec(&r).unwrap(), r)
        })
        .collect()
}
