//! One integration-test binary: fixtures decoded without a kernel, a differential test
//! against netlink-packet-sock-diag, robustness over mutated input, and live-kernel tests on
//! loopback sockets the tests open themselves.

mod browser;
#[path = "../common/clickhouse.rs"]
mod clickhouse;
mod dashboards;
mod differential;
mod docs;
mod exact;
mod fixtures;
mod http;
mod inprocess;
mod ipfix;
mod kernel;
mod lifecycle;
mod load;
mod metrics;
#[path = "../common/monitor.rs"]
mod monitor;
mod pipeline;
mod processes;
mod program;
mod robustness;
mod sink;
mod sink_defects;

use std::io::Read;
use std::path::PathBuf;

use cgmon_rs::sampler::fakes::ReplaySource;
use cgmon_rs::sampler::source::parse_datagrams;
use cgmon_rs::sampler::{Dump, DumpMode, Sampler, SamplerConfig};
use cgmon_rs::wire::sock::Datagram;

/// Reads a fixture from tests/fixtures, un-gzipping `.gz` files.
pub fn fixture(name: &str) -> Vec<Datagram> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    let raw = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let bytes = if name.ends_with(".gz") {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&raw[..]).read_to_end(&mut out).unwrap();
        out
    } else {
        raw
    };
    parse_datagrams(&bytes).unwrap()
}

/// Replays fixture files through the sampler as one dump.
pub async fn replay(files: &[&str], mode: DumpMode) -> Dump {
    let datagrams: Vec<_> = files.iter().flat_map(|f| fixture(f)).collect();
    let cfg = SamplerConfig { mode, ..SamplerConfig::default() };
    let mut s = Sampler::new(ReplaySource::new(datagrams), cfg).unwrap();
    s.dump().await.unwrap()
}
