//! One dump as JSON lines: a machine-readable `ss -tni`, with cgmon-rs's filter syntax.
//!
//! ```text
//! cargo run --example dump -- [--states LIST] [--mode auto|single|per-family] [FILTER...]
//! cargo run --example dump -- dport 443 or sport 22
//! cargo run --example dump -- --states established src 127.0.0.0/8
//! ```
//! Each line is one socket: the `inet_diag_msg` fields, the attributes the kernel sent and
//! every `tcp_info` field present (kernel member names, no `tcpi_` prefix).

use std::io::Write;
use std::process::ExitCode;

use cgmon_rs::filter;
use cgmon_rs::sampler::source::{NetlinkSource, SocketOptions};
use cgmon_rs::sampler::{DumpMode, Sampler, SamplerConfig};
use cgmon_rs::states::StateSet;

fn usage() -> ExitCode {
    eprintln!("usage: dump [--states LIST] [--mode auto|single|per-family] [FILTER...]");
    ExitCode::from(2)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut cfg = SamplerConfig::default();
    let mut filter_words = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--states" => match args.next().map(|s| StateSet::parse(&s)) {
                Some(Ok(s)) => cfg.states = s,
                Some(Err(e)) => {
                    eprintln!("dump: --states: {e}");
                    return ExitCode::from(2);
                }
                None => return usage(),
            },
            "--mode" => {
                cfg.mode = match args.next().as_deref() {
                    Some("auto") => DumpMode::Auto,
                    Some("single") => DumpMode::SingleWalk,
                    Some("per-family") => DumpMode::PerFamily,
                    Some(other) => {
                        eprintln!("dump: --mode: unknown mode {other:?}");
                        return ExitCode::from(2);
                    }
                    None => return usage(),
                }
            }
            "-h" | "--help" => {
                let _ = usage();
                return ExitCode::SUCCESS;
            }
            _ => filter_words.push(a),
        }
    }
    if !filter_words.is_empty() {
        match filter::parse(&filter_words.join(" ")) {
            Ok(e) => cfg.filter = Some(e),
            Err(e) => {
                eprintln!("dump: filter: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let source = match NetlinkSource::open(SocketOptions::default()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("dump: opening sock_diag socket: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut sampler = match Sampler::new(source, cfg) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("dump: filter: {e}");
            return ExitCode::from(2);
        }
    };
    let dump = match sampler.dump().await {
        Ok(d) => d,
        Err(e) => {
            eprintln!("dump: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for s in dump.batch.iter() {
        let line = serde_json::to_string(&s).expect("a sample always serialises");
        if writeln!(out, "{line}").is_err() {
            return ExitCode::FAILURE; // stdout closed, e.g. piped into head
        }
    }
    if out.flush().is_err() {
        return ExitCode::FAILURE;
    }
    if !dump.is_complete() {
        eprintln!(
            "dump: incomplete dump (interrupted={}, truncated datagrams={}, malformed={})",
            dump.interrupted, dump.truncated, dump.malformed
        );
    }
    ExitCode::SUCCESS
}
