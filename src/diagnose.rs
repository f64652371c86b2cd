//! `cgmon-rs diagnose`: a one-shot look at why flows are slow, for people at a terminal.
//!
//! It watches the current flows (or those a filter names) for a while, or until every one
//! of them has ended, then prints a table: rate, RTT, retransmits, the limit and the finding
//! (`--json`: the full records, one per line). It is the monitor itself ([`app::run`]),
//! with every flow written (partial ones included) into memory instead of stdout.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use serde_json::Value;

use crate::app::{self, EXIT_FAILURE, EXIT_USAGE, Event, Settings, Sources};
use crate::cli::UsageError;
use crate::metrics::Metrics;
use crate::units::parse_duration;
use crate::writer::{MemoryOut, Writer};

/// The longest `--seconds`: ten years, far below where a deadline would overflow.
const MAX_SECONDS: u64 = 10 * 365 * 86_400;

/// `--seconds`: a number of seconds, whole or not (`1.5`), from 0 to ten years.
fn parse_seconds(s: &str) -> Result<Duration, crate::units::ValueError> {
    let bad = |why: &str| crate::units::ValueError(why.to_string());
    let v: f64 = s.trim().parse().map_err(|_| bad("not a number of seconds (e.g. 10 or 1.5)"))?;
    if !(0.0..=MAX_SECONDS as f64).contains(&v) {
        return Err(bad("must be from 0 to 315360000 (ten years)"));
    }
    Ok(Duration::from_secs_f64(v))
}

/// `cgmon-rs diagnose` options.
#[derive(Debug, Parser)]
#[command(
    name = "cgmon-rs diagnose",
    bin_name = "cgmon-rs diagnose",
    about = "Watch TCP flows for a while and say what limited each: the receiver's window, the \
             send buffer, the network, or the application.",
    after_help = "EXAMPLES:\n  cgmon-rs diagnose                      every flow, 10 s\n  \
                  cgmon-rs diagnose --seconds 30 dport 443\n  cgmon-rs diagnose --json sport 22\n  \
                  cgmon-rs diagnose --netns all       flows in every namespace (root)\n\n\
                  EXIT STATUS:\n  0 done, 1 sampling failed or records were lost, 2 a usage error",
    color = clap::ColorChoice::Never
)]
pub struct DiagnoseCli {
    /// Watch this long (seconds, fractions allowed, at most ten years), or until every
    /// watched flow has ended; 0: until every flow seen has ended, or Ctrl-C
    #[arg(long, value_name = "N", default_value = "10", value_parser = parse_seconds)]
    pub seconds: Duration,
    /// Sampling interval
    #[arg(long, value_name = "DURATION", default_value = "100ms",
          value_parser = |s: &str| parse_duration(s).and_then(|d| if d.is_zero() {
              Err(crate::units::ValueError(format!("invalid duration {s:?}: must be greater than 0")))
          } else { Ok(d) }))]
    pub interval: Duration,
    /// Print the records as JSON lines instead of a table
    #[arg(long)]
    pub json: bool,
    /// Network namespaces to watch, as the monitor's --netns: own, all, or a comma list of
    /// `ip netns` names, paths and own (a flow of another namespace is shown with its name)
    #[arg(long, value_name = "WHICH", value_parser = crate::cli::netns_which, default_value = "own")]
    pub netns: crate::netns::Which,
    /// Filter expression (ss syntax), before or after the flags, e.g. dport 443 or sport 22
    #[arg(value_name = "FILTER", trailing_var_arg = true)]
    pub filter: Vec<String>,
}

/// Runs `cgmon-rs diagnose ARGS`.
pub fn main(args: Vec<String>) -> ExitCode {
    // Flags may follow the filter words, as in the program itself.
    let args = crate::cli::normalize_for(&<DiagnoseCli as clap::CommandFactory>::command(), args);
    let cli: DiagnoseCli = match crate::cli::parse_subcommand("diagnose", args) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let settings = match settings(&cli) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cgmon-rs diagnose: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    if cli.seconds.is_zero() {
        // Said, not left to look like a hang: a look with no end but its flows'.
        eprintln!(
            "cgmon-rs diagnose: --seconds 0: watching until every flow seen has ended (Ctrl-C stops)"
        );
    }
    // Warnings and errors only, on stderr: the table is the output, but a failed or
    // incomplete look (records lost under a storm, a namespace that could not be read)
    // must say why, in one line, rather than leave a bare exit status.
    let log = crate::logging::LogSettings {
        directives: "warn".into(),
        format: crate::logging::LogFormat::Text,
        syslog: false,
    };
    for w in crate::logging::init(&log) {
        tracing::warn!("{w}");
    }
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cgmon-rs diagnose: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let (code, records) = rt.block_on(watch(settings));
    if code != 0 {
        return ExitCode::from(code);
    }
    let mut out = std::io::stdout().lock();
    let r = if cli.json { print_json(&records, &mut out) } else { print_table(&records, &mut out) };
    if r.is_err() { ExitCode::from(EXIT_FAILURE) } else { ExitCode::SUCCESS }
}

/// The monitor's settings for a look: the monitor itself, as
/// `cgmon-rs -run-interval I -run-duration S -writer-partial -tracker-window-samples MAX FILTER`
/// would run, so that `diagnose` says what the monitor's records would say. Every flow is
/// written, open ones as partial; no window cuts a flow in two.
///
/// # Errors
/// The filter does not parse or compile (the monitor's own message).
pub fn settings(cli: &DiagnoseCli) -> Result<Settings, UsageError> {
    crate::cli::settings_with(|c| {
        c.interval = cli.interval;
        c.run_duration = cli.seconds;
        c.partial = true;
        c.window_samples = Some(WHOLE_FLOW);
        c.filter = (!cli.filter.is_empty()).then(|| cli.filter.join(" "));
        c.netns = cli.netns.clone();
    })
}

/// No window: one record per flow, however long the look.
const WHOLE_FLOW: usize = 1 << 40;

/// Runs the monitor ([`app::run`]) on the kernel's sockets until the time is up or every
/// flow seen has ended; its exit status and its records, busiest first, as it wrote them.
pub async fn watch(s: Settings) -> (u8, Vec<Value>) {
    let metrics = Arc::new(Metrics::new(s.task.interval));
    let out = MemoryOut::default();
    let writer = match Writer::to_stream(s.writer.clone(), Box::new(out.clone()), metrics.clone()) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("cgmon-rs diagnose: {e}");
            return (EXIT_FAILURE, Vec::new());
        }
    };
    // With the destroy listener, a reset flow, which leaves the dumps before its destroy
    // event, gives one line with its final counters, as in the monitor.
    let sources = match Sources::open(&s, &metrics) {
        Ok(src) => src,
        Err(e) => {
            eprintln!("cgmon-rs diagnose: {e}");
            return (e.exit_status(), Vec::new());
        }
    };
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let m = metrics.clone();
    // Stop once every flow seen has ended (the monitor stops itself at -run-duration).
    let ender = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tick.tick().await;
            let all_ended = m.dumps.get() > 0
                && m.flows_opened.get() > 0
                && m.flows_active.get() == 0
                && m.flows_awaiting_destroy.get() == 0;
            if all_ended {
                let _ = tx.send(Event::Finished("every flow ended")).await;
                return;
            }
        }
    });
    let code = app::run(s, sources, writer, rx, metrics).await;
    ender.abort();
    let mut records = records(&out);
    records.sort_by_key(|r| std::cmp::Reverse(r["BytesAcked"].as_u64().unwrap_or(0)));
    (code, records)
}

/// The writer's output, kept in memory.
/// The records `out` holds. The writer wrote them; a line that does not parse cannot
/// occur, and would be left out.
fn records(out: &MemoryOut) -> Vec<Value> {
    let text = out.contents();
    serde_json::Deserializer::from_slice(&text).into_iter::<Value>().flatten().collect()
}

fn print_json(records: &[Value], out: &mut impl Write) -> std::io::Result<()> {
    for r in records {
        serde_json::to_writer(&mut *out, r)?;
        writeln!(out)?;
    }
    Ok(())
}

/// The table: one line per flow, busiest first, read from the records as written.
pub fn print_table(records: &[Value], out: &mut impl Write) -> std::io::Result<()> {
    if records.is_empty() {
        return writeln!(out, "no flows seen");
    }
    writeln!(
        out,
        "{:<47} {:>9} {:>8} {:>7} {:<15} FINDING",
        "FLOW", "Mbit/s", "RTT ms", "RETRANS", "LIMIT"
    )?;
    for r in records {
        let id = &r["ID"];
        // With --netns, a flow of another namespace than the monitor's says which.
        let ns = match r["Netns"]["Name"].as_str() {
            Some(n) if n != "host" => format!("{n} "),
            _ => String::new(),
        };
        let flow = format!(
            "{ns}{}:{} > {}:{}",
            id["SrcIP"].as_str().unwrap_or("?"),
            id["SrcPort"],
            id["DstIP"].as_str().unwrap_or("?"),
            id["DstPort"]
        );
        // The diagnosis's rate: for a flow seen only once, its rate while busy (its record's
        // throughput over a zero span is 0).
        let d = &r["Diagnosis"];
        let (rate, limit, finding) = if d.is_object() {
            (
                d["AchievedMbps"].as_f64().unwrap_or(0.0),
                d["Verdict"].as_str().unwrap_or("-"),
                d["Finding"].as_str().unwrap_or(""),
            )
        } else {
            (
                r["SendThroughputMbps"].as_f64().unwrap_or(0.0),
                "-",
                "no busy-time counters on this kernel",
            )
        };
        let rtt = r["RTTSummary"][3]
            .as_f64()
            .map_or_else(|| "-".into(), crate::analysis::diagnosis::ms_text);
        writeln!(
            out,
            "{flow:<47} {rate:>9.2} {rtt:>8} {:>7} {limit:<15} {finding}",
            r["TotalRetransmits"]
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> DiagnoseCli {
        DiagnoseCli::try_parse_from(std::iter::once("diagnose").chain(args.iter().copied()))
            .unwrap()
    }

    #[test]
    fn a_look_is_the_monitor_writing_every_flow_whole() {
        let s = settings(&cli(&["--seconds", "7", "--interval", "50ms", "dport", "443"])).unwrap();
        assert_eq!(s.task.interval, Duration::from_millis(50));
        assert_eq!(s.run_duration, Duration::from_secs(7));
        assert!(s.analyzer.write_partial);
        assert_eq!(s.tracker.window_samples, WHOLE_FLOW);
        let f = s.sampler.filter.as_ref().unwrap();
        let with_listeners = f.clone().or_listeners();
        assert_eq!(s.sampler.bytecode, Some(crate::filter::compile(&with_listeners).unwrap()));
        let e = settings(&cli(&["dport", "="])).unwrap_err();
        assert!(e.0.contains("filter \"dport =\""), "{}", e.0);
    }

    #[test]
    fn seconds_take_fractions_and_refuse_what_is_not_a_time_in_one_line() {
        assert_eq!(cli(&["--seconds", "1.5"]).seconds, Duration::from_millis(1500));
        assert_eq!(cli(&["--seconds", "0"]).seconds, Duration::ZERO);
        for (bad, why) in
            [("1.5x", "not a number of seconds"), ("-1", "from 0 to"), ("1e12", "ten years")]
        {
            let flag = format!("--seconds={bad}");
            let e = DiagnoseCli::try_parse_from(["diagnose", flag.as_str()]).unwrap_err();
            let line = crate::cli::one_line(&e.to_string());
            assert!(line.contains(&format!("'{bad}'")) && line.contains(why), "{line}");
            assert!(!line.contains('\n'), "{line}");
        }
    }

    #[test]
    fn the_table_reads_the_records_as_written() {
        let r = serde_json::json!({
            "ID": {"SrcIP": "10.0.0.1", "SrcPort": 5000, "DstIP": "10.0.0.2", "DstPort": 443},
            "RTTSummary": [1.0, 1.0, 1.0, 2.5, 3.0, 4.0, 5.0],
            "TotalRetransmits": 3,
            "SendThroughputMbps": 1.0,
            "Diagnosis": {"AchievedMbps": 12.5, "Verdict": "network", "Finding": "lost packets"},
        });
        let mut out = Vec::new();
        print_table(&[r], &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let line = text.lines().nth(1).unwrap();
        assert!(line.starts_with("10.0.0.1:5000 > 10.0.0.2:443"), "{line}");
        for want in ["12.50", "2.5", " 3 ", "network", "lost packets"] {
            assert!(line.contains(want), "{want} in {line}");
        }
    }
}
