//! `cgmon-rs diagnose`: a one-shot look at why flows are slow, for people at a terminal.
//!
//! It watches the current flows (or those a filter names) for a while, or until every one
//! of them has ended, then prints a table: rate, RTT, retransmits, the limit and the finding
//! (`--json`: the full records, one per line). It runs the monitor's own stages: sampler,
//! tracker and analysis, with every flow written (partial ones included).

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;

use crate::analyzer::{AnalyzerConfig, FlowStats, analyze};
use crate::filter::{self, Expr};
use crate::metrics::Metrics;
use crate::sampler::destroy::DestroyListener;
use crate::sampler::source::{NetlinkSource, SocketOptions};
use crate::sampler::{Sampler, SamplerConfig};
use crate::tracker::task::{self, TaskConfig, Wiring};
use crate::tracker::{Tracker, TrackerConfig};
use crate::units::parse_duration;

/// The longest `--seconds`: ten years, far below where a deadline would overflow.
const MAX_SECONDS: u64 = 10 * 365 * 86_400;

/// `cgmon-rs diagnose` options.
#[derive(Debug, Parser)]
#[command(
    name = "cgmon-rs diagnose",
    bin_name = "cgmon-rs diagnose",
    about = "Watch TCP flows for a while and say what limited each: the receiver's window, the \
             send buffer, the network, or the application.",
    after_help = "EXAMPLES:\n  cgmon-rs diagnose                      every flow, 10 s\n  \
                  cgmon-rs diagnose --seconds 30 dport 443\n  cgmon-rs diagnose --json sport 22\n\n\
                  EXIT STATUS:\n  0 done, 1 sampling failed, 2 a usage error",
    color = clap::ColorChoice::Never
)]
pub struct DiagnoseCli {
    /// Watch this long (seconds, at most ten years), or until every watched flow has ended
    #[arg(long, value_name = "N", default_value = "10",
          value_parser = clap::value_parser!(u64).range(0..=MAX_SECONDS))]
    pub seconds: u64,
    /// Sampling interval
    #[arg(long, value_name = "DURATION", default_value = "100ms",
          value_parser = |s: &str| parse_duration(s).and_then(|d| if d.is_zero() {
              Err(crate::units::ValueError(format!("invalid duration {s:?}: must be greater than 0")))
          } else { Ok(d) }))]
    pub interval: Duration,
    /// Print the records as JSON lines instead of a table
    #[arg(long)]
    pub json: bool,
    /// Filter expression (ss syntax), before or after the flags, e.g. dport 443 or sport 22
    #[arg(value_name = "FILTER", trailing_var_arg = true)]
    pub filter: Vec<String>,
}

/// Runs `cgmon-rs diagnose ARGS`.
pub fn main(args: Vec<String>) -> ExitCode {
    // Flags may follow the filter words, as in the program itself.
    let args = crate::cli::normalize_for(&<DiagnoseCli as clap::CommandFactory>::command(), args);
    let cli = match DiagnoseCli::try_parse_from(std::iter::once("diagnose".to_string()).chain(args))
    {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                print!("{e}");
                return ExitCode::SUCCESS;
            }
            eprintln!("cgmon-rs diagnose: {}", crate::cli::one_line(&e.to_string()));
            return ExitCode::from(2);
        }
    };
    let filter = if cli.filter.is_empty() {
        None
    } else {
        let text = cli.filter.join(" ");
        match filter::parse(&text) {
            Ok(e) => Some(e),
            Err(e) => {
                eprintln!("cgmon-rs diagnose: filter {text:?}: {e}");
                return ExitCode::from(2);
            }
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cgmon-rs diagnose: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(watch(&cli, filter)) {
        Ok(records) => {
            let mut out = std::io::stdout().lock();
            let r = if cli.json {
                print_json(&records, &mut out)
            } else {
                print_table(&records, &mut out)
            };
            if r.is_err() { ExitCode::FAILURE } else { ExitCode::SUCCESS }
        }
        Err(e) => {
            eprintln!("cgmon-rs diagnose: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Samples until the time is up or every flow seen has ended; returns their records.
///
/// # Errors
/// The sock_diag socket cannot be opened, or sampling failed.
pub async fn watch(cli: &DiagnoseCli, filter: Option<Expr>) -> Result<Vec<FlowStats>, String> {
    let source = NetlinkSource::open(SocketOptions::default()).map_err(|e| e.to_string())?;
    let cfg = SamplerConfig { filter: filter.clone(), ..SamplerConfig::default() };
    let sampler = Sampler::new(source, cfg).map_err(|e| e.to_string())?;
    let destroy = DestroyListener::open(filter).ok();
    let metrics = Arc::new(Metrics::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (tx, mut rx) = tokio::sync::mpsc::channel(task::ENDED_CHANNEL_CAPACITY);
    // A reset flow leaves the dumps before its destroy event: wait for it, as the monitor
    // does, so that it gives one line with its final counters.
    let grace =
        if destroy.is_some() { crate::tracker::DEFAULT_DESTROY_GRACE } else { Duration::ZERO };
    let tracker = Tracker::new(TrackerConfig {
        window_samples: usize::MAX / 2,
        destroy_grace_ns: grace.as_nanos() as u64,
        ..TrackerConfig::default()
    });
    let stage = tokio::spawn(task::run(
        tracker,
        sampler,
        destroy,
        TaskConfig::every(cli.interval),
        Wiring::new(stop_rx, tx, metrics.clone()),
        |_| {},
    ));
    let acfg = AnalyzerConfig {
        realtime_offset_ns: crate::clock::realtime_offset_ns(),
        ..AnalyzerConfig::default()
    };
    let record = |mut e: crate::tracker::EndedFlow| analyze(&mut e, &acfg);
    let mut records = Vec::new();
    let end = Instant::now() + Duration::from_secs(cli.seconds);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            Some(batch) = rx.recv() => records.extend(batch.into_iter().map(record)),
            _ = tick.tick() => {
                let all_ended = metrics.dumps.get() > 0
                    && metrics.flows_opened.get() > 0
                    && metrics.flows_active.get() == 0
                    && metrics.flows_awaiting_destroy.get() == 0;
                if Instant::now() >= end || all_ended {
                    break;
                }
            }
        }
    }
    let _ = stop_tx.send(true);
    while let Some(batch) = rx.recv().await {
        records.extend(batch.into_iter().map(record));
    }
    stage.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
    records.sort_by_key(|r| std::cmp::Reverse(r.bytes_acked));
    Ok(records)
}

fn print_json(records: &[FlowStats], out: &mut impl Write) -> std::io::Result<()> {
    for r in records {
        serde_json::to_writer(&mut *out, r)?;
        writeln!(out)?;
    }
    Ok(())
}

/// The table: one line per flow, busiest first.
pub fn print_table(records: &[FlowStats], out: &mut impl Write) -> std::io::Result<()> {
    if records.is_empty() {
        return writeln!(out, "no flows seen");
    }
    writeln!(
        out,
        "{:<47} {:>9} {:>8} {:>7} {:<15} FINDING",
        "FLOW", "Mbit/s", "RTT ms", "RETRANS", "LIMIT"
    )?;
    for r in records {
        let flow = format!("{}:{} > {}:{}", r.id.src_ip, r.id.src_port, r.id.dst_ip, r.id.dst_port);
        // The diagnosis's rate: for a flow seen only once, its rate while busy (its record's
        // throughput over a zero span is 0).
        let (rate, limit, finding) = r.diagnosis.as_ref().map_or(
            (r.send_throughput_mbps, "-", "no busy-time counters on this kernel".to_string()),
            |d| (d.achieved_mbps, d.verdict, d.finding.clone()),
        );
        writeln!(
            out,
            "{flow:<47} {rate:>9.2} {:>8} {:>7} {limit:<15} {finding}",
            r.rtt_summary.map_or_else(|| "-".into(), |x| crate::analyzer::diagnosis::ms_text(x[3])),
            r.total_retransmits
        )?;
    }
    Ok(())
}
