//! Offline views of recorded runs: `cgmon-rs plot` (one flow's charts as an SVG, from a
//! `--samples-out` file) and `cgmon-rs report` (one self-contained HTML file for a run,
//! from its record files and optionally its samples). Both read JSON lines, gzipped or
//! not, and draw with the same charts as the web view ([`crate::chart`]).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use serde_json::Value;

use crate::chart::flow::{charts, standalone};
use crate::record::Point;

/// A file a report or a plot reads that cannot be used: the message names the file, and
/// the line when one is bad.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ReadError(pub String);

/// Reads JSON lines from `path` (gzip when it starts with gzip's magic bytes), calling
/// `each` with every object; `progress` reports on stderr every two seconds.
///
/// # Errors
/// The file cannot be read, or a line that is not the last is not JSON: one line naming
/// the file and line. A last line cut short (a run that was killed) is skipped with a
/// warning.
pub fn read_lines(
    path: &Path,
    progress: bool,
    mut each: impl FnMut(Value),
) -> Result<usize, ReadError> {
    let name = path.display();
    let f = std::fs::File::open(path).map_err(|e| ReadError(format!("cannot read {name}: {e}")))?;
    let mut raw = BufReader::with_capacity(1 << 16, f);
    let head = raw.fill_buf().map_err(|e| ReadError(format!("cannot read {name}: {e}")))?;
    let r: Box<dyn Read> = if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::MultiGzDecoder::new(raw))
    } else {
        Box::new(raw)
    };
    let mut r = BufReader::with_capacity(1 << 16, r);
    let (start, mut told) = (Instant::now(), Instant::now());
    let (mut count, mut line_no, mut pending): (usize, usize, Option<(usize, String)>) =
        (0, 0, None);
    let mut buf = String::new();
    let mut ended_early = false;
    loop {
        buf.clear();
        match r.read_line(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                // A gzip file still being written ends inside its member, after its last
                // flush: everything up to there is read, and that is no corruption.
                eprintln!(
                    "cgmon-rs: {name}: read to its last flush ({line_no} lines); the rest \
                     is not written yet (a file still being written), or the file was cut short"
                );
                ended_early = true;
                break;
            }
            Err(e) => {
                return Err(ReadError(format!("cannot read {name} after line {line_no}: {e}")));
            }
        }
        line_no += 1;
        // A bad line is only an error when another follows it.
        if let Some((at, err)) = pending.take() {
            return Err(ReadError(format!("{name}:{at}: not a JSON object: {err}")));
        }
        let text = buf.trim();
        if text.is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) => {
                count += 1;
                each(v);
            }
            Ok(_) => pending = Some((line_no, "not an object".into())),
            Err(e) => pending = Some((line_no, e.to_string())),
        }
        if progress && line_no % 8192 == 0 && told.elapsed().as_secs() >= 2 {
            told = Instant::now();
            eprintln!(
                "cgmon-rs: reading {name}: {line_no} lines, {:.0} s",
                start.elapsed().as_secs_f64()
            );
        }
    }
    match pending {
        // The line the last flush cut: expected, said above.
        Some(_) if ended_early => {}
        Some((at, err)) => {
            eprintln!("cgmon-rs: warning: {name}:{at}: last line skipped (cut short?): {err}");
        }
        None => {}
    }
    Ok(count)
}

/// A sample line as a chart point.
pub fn point_of(v: &Value) -> Option<Point> {
    let f = |k: &str| v.get(k).and_then(Value::as_f64);
    let unix_s = match v.get("UnixNs").and_then(Value::as_i64) {
        Some(ns) => ns as f64 / 1e9,
        None => f("TstampNs")? / 1e9, // lines from before UnixNs: monotonic time
    };
    let chrono = match (f("BusyMs"), f("RwndLimitedMs"), f("SndbufLimitedMs")) {
        (Some(b), Some(r), Some(s)) => Some([b, r, s]),
        _ => None,
    };
    Some(Point {
        unix_s,
        rtt_ms: f("RTTms"),
        cwnd_bytes: f("CwndBytes"),
        ssthresh_bytes: f("SsthreshBytes"),
        pacing_mbps: f("PacingRateMbps"),
        delivery_mbps: f("DeliveryRateMbps"),
        retrans: f("TotalRetransmits"),
        chrono_ms: chrono,
        after_pause: v.get("AfterPause").and_then(Value::as_bool).unwrap_or(false),
    })
}

/// A flow's title from a sample or record line: `src:port → dst:port`.
pub(crate) fn tuple_of(v: &Value) -> String {
    let id = v.get("ID").unwrap_or(v);
    let end = |ip: &str, port: &str| {
        let port = u16::try_from(id[port].as_u64().unwrap_or(0)).unwrap_or(0);
        crate::record::endpoint_text(id[ip].as_str().unwrap_or("?"), port)
    };
    format!("{} → {}", end("SrcIP", "SrcPort"), end("DstIP", "DstPort"))
}

/// `cgmon-rs plot` options.
#[derive(Debug, Parser)]
#[command(
    name = "cgmon-rs plot",
    bin_name = "cgmon-rs plot",
    about = "Draw one flow's charts (RTT, cwnd, rates, retransmits, time shares) as an SVG, \
             from a --samples-out file.",
    after_help = "EXAMPLE:\n  cgmon-rs plot --samples samples.ndjson.gz --cookie 12345 -o flow.svg",
    color = clap::ColorChoice::Never
)]
pub struct PlotCli {
    /// The samples file (JSON lines, gzip or not)
    #[arg(long, value_name = "FILE")]
    pub samples: PathBuf,
    /// The flow's socket cookie (its records' and samples' `Cookie`)
    #[arg(long, value_name = "C")]
    pub cookie: u64,
    /// Write the SVG here (default: stdout)
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

fn write_out(what: &str, path: Option<&Path>, text: &str) -> ExitCode {
    let r = match path {
        Some(p) => {
            std::fs::write(p, text).map_err(|e| format!("cannot write {}: {e}", p.display()))
        }
        None => {
            use std::io::Write as _;
            std::io::stdout().write_all(text.as_bytes()).map_err(|e| format!("cannot write: {e}"))
        }
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cgmon-rs {what}: {e}");
            ExitCode::from(1)
        }
    }
}

/// The SVG `plot` writes for flow `cookie` of the samples in `path`.
///
/// # Errors
/// The file cannot be read, or holds no sample of that flow.
pub fn plot_svg(path: &Path, cookie: u64) -> Result<String, ReadError> {
    let mut points = Vec::new();
    let mut title = None;
    read_lines(path, true, |v| {
        if v.get("Cookie").and_then(Value::as_u64) == Some(cookie) {
            if title.is_none() {
                title = Some(tuple_of(&v));
            }
            points.extend(point_of(&v));
        }
    })?;
    if points.is_empty() {
        return Err(ReadError(format!(
            "{} holds no sample of the flow with cookie {cookie}",
            path.display()
        )));
    }
    points.sort_by(|a, b| a.unix_s.total_cmp(&b.unix_s));
    let title =
        format!("{} (cookie {cookie}): {} samples", title.unwrap_or_default(), points.len());
    // Sample lines carry no tcpi_min_rtt: the lowest smoothed RTT sampled stands in (at
    // or above the kernel's minimum), as the line the web page draws.
    let lowest = points.iter().filter_map(|p| p.rtt_ms).reduce(f64::min);
    Ok(standalone(&title, &charts("", &points, lowest, None)))
}

/// Runs `cgmon-rs plot ARGS`.
pub fn plot_main(args: Vec<String>) -> ExitCode {
    let cli: PlotCli = match crate::cli::parse_subcommand("plot", args) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match plot_svg(&cli.samples, cli.cookie) {
        Ok(svg) => write_out("plot", cli.output.as_deref(), &svg),
        Err(e) => {
            eprintln!("cgmon-rs plot: {e}");
            ExitCode::from(1)
        }
    }
}

/// `cgmon-rs report` options.
#[derive(Debug, Parser)]
#[command(
    name = "cgmon-rs report",
    bin_name = "cgmon-rs report",
    about = "Write one self-contained HTML report of a run: throughput and RTT distributions \
             (log axes), verdicts per service and port, and the slowest flows (limited by a \
             window, a buffer or the network) with their findings and, from a samples file, \
             their charts.",
    after_help = "EXAMPLE:\n  cgmon-rs report /var/log/cgmon/*.json.gz --samples samples.ndjson.gz -o report.html",
    color = clap::ColorChoice::Never
)]
pub struct ReportCli {
    /// Record files (JSON lines, gzip or not)
    #[arg(value_name = "RECORDS", required = true)]
    pub records: Vec<PathBuf>,
    /// A --samples-out file of the same run, for per-flow charts
    #[arg(long, value_name = "FILE")]
    pub samples: Option<PathBuf>,
    /// Write the report here
    #[arg(short = 'o', long = "output", value_name = "FILE", required = true)]
    pub output: PathBuf,
    /// Flows listed and charted as the slowest: those limited by a window, a buffer or the
    /// network, lowest throughput first (the report of 100,000 records stays under 10 MB
    /// with 20)
    #[arg(long, value_name = "N", default_value = "20")]
    pub slowest: usize,
    /// Least a flow must have sent to be listed as slow (K, M, G: ×1024)
    #[arg(long = "min-bytes", value_name = "SIZE", default_value = "1M")]
    pub min_bytes: String,
}

/// Runs `cgmon-rs report ARGS`.
pub fn report_main(args: Vec<String>) -> ExitCode {
    let cli: ReportCli = match crate::cli::parse_subcommand("report", args) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let fail = |e: String| {
        eprintln!("cgmon-rs report: {e}");
        ExitCode::from(1)
    };
    let min_bytes = match crate::units::parse_size(&cli.min_bytes) {
        Ok(b) => b,
        Err(e) => return fail(format!("--min-bytes: {e}")),
    };
    // Each record is cut down to what the report uses as it is read: 100,000 records
    // held as JSON values would take a gigabyte.
    let mut records = Vec::new();
    for p in &cli.records {
        if let Err(e) = read_lines(p, true, |v| records.push(Rec::of(&v))) {
            return fail(e.0);
        }
    }
    // Samples only of the flows the report lists: the others are not charted.
    let listed: std::collections::BTreeSet<u64> =
        html::slowest(&records, cli.slowest, min_bytes).iter().map(|r| r.cookie).collect();
    let mut samples: BTreeMap<u64, Vec<Point>> = BTreeMap::new();
    if let Some(p) = &cli.samples {
        let r = read_lines(p, true, |v| {
            if let Some(c) = v.get("Cookie").and_then(Value::as_u64).filter(|c| listed.contains(c))
                && let Some(pt) = point_of(&v)
            {
                samples.entry(c).or_default().push(pt);
            }
        });
        if let Err(e) = r {
            return fail(e.0);
        }
        for v in samples.values_mut() {
            v.sort_by(|a, b| a.unix_s.total_cmp(&b.unix_s));
        }
    }
    let names: Vec<String> = cli.records.iter().map(|p| p.display().to_string()).collect();
    eprintln!(
        "cgmon-rs report: {} records; {} flows listed, {} of them with samples",
        records.len(),
        listed.len(),
        samples.len()
    );
    let src = html::Sources {
        records: names.join(", "),
        samples: cli.samples.as_ref().map(|p| p.display().to_string()),
        slowest: cli.slowest,
        min_bytes,
    };
    write_out("report", Some(&cli.output), &report_html(&records, &samples, &src))
}

mod html;
pub use html::{Rec, Sources, cdf, report_html, slowest};

#[cfg(test)]
mod tests {
    use std::io::Write;

    #[test]
    fn a_gzip_file_still_being_written_is_read_to_its_last_flush() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("live.json.gz");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        for i in 0..3 {
            writeln!(gz, "{{\"Cookie\": {i}}}").unwrap();
        }
        gz.flush().unwrap(); // the writer's flush: a sync point, the member not finished
        write!(gz, "{{\"Cookie\": 3, \"Sam").unwrap(); // a line the next flush would end
        std::fs::write(&path, gz.get_ref()).unwrap();
        let mut cookies = Vec::new();
        let n = super::read_lines(&path, false, |v| cookies.push(v["Cookie"].as_u64().unwrap()));
        assert_eq!(n.unwrap(), 3, "read to the last flush, not an error");
        assert_eq!(cookies, vec![0, 1, 2]);
    }
}
