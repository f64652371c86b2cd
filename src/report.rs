//! Offline views of recorded runs: `cgmon-rs plot` (one flow's charts as an SVG, from a
//! `--samples-out` file) and `cgmon-rs report` (one self-contained HTML file for a run,
//! from its record files and optionally its samples). Both read JSON lines, gzipped or
//! not, and draw with the same charts as the web view ([`crate::chart`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use serde_json::Value;

use crate::chart::flow::{STYLE, charts, num, standalone};
use crate::chart::{Axis, Chart, Series, Unit, esc, value_axis};
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
    loop {
        buf.clear();
        match r.read_line(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                eprintln!("cgmon-rs: warning: {name} ends early (cut short?): {e}");
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
    if let Some((at, err)) = pending {
        eprintln!("cgmon-rs: warning: {name}:{at}: last line skipped (cut short?): {err}");
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
    })
}

/// A flow's title from a sample or record line: `src:port → dst:port`.
fn tuple_of(v: &Value) -> String {
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
    Ok(standalone(&title, &charts("", &points, None, None)))
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
    about = "Write one self-contained HTML report of a run: throughput and RTT distributions, \
             verdicts per service, the slowest flows with their findings, and per-flow charts \
             where samples exist.",
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
    /// Flows listed (and charted) as the slowest
    #[arg(long, value_name = "N", default_value = "20")]
    pub slowest: usize,
}

/// A cumulative distribution chart of `values` (in `unit`).
pub fn cdf(id: &str, title: &str, name: &str, unit: Unit, mut values: Vec<f64>) -> Chart {
    values.retain(|v| v.is_finite());
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let max = values.last().copied().unwrap_or(0.0);
    let (x, div) = value_axis(name, unit, 0.0, max);
    let (y, _) = value_axis("flows", Unit::Percent, 0.0, 100.0);
    // A step at each value: the share of flows at or below it rises there.
    let mut pts: Vec<(f64, f64)> = Vec::with_capacity(2 * n);
    for (i, v) in values.iter().enumerate() {
        pts.push((v / div, 100.0 * i as f64 / n as f64));
        pts.push((v / div, 100.0 * (i + 1) as f64 / n as f64));
    }
    let pct = |p: f64| {
        crate::stats::summary::percentile(&values, p).map_or("–".into(), |v| num(v / div))
    };
    let unit_text = unit.scale(max).1;
    Chart {
        id: id.into(),
        title: title.into(),
        desc: format!(
            "Cumulative distribution of {name} over {n} flows: median {} {unit_text}, 90th percentile {} {unit_text}, largest {} {unit_text}.",
            pct(50.0),
            pct(90.0),
            num(max / div)
        ),
        x: Axis { title: x.title.clone(), ..x },
        y: Axis { title: "flows at or below (%)".into(), ..y },
        y_div: 1.0,
        series: vec![Series {
            name: "flows",
            key: "rtt",
            runs: if pts.is_empty() { Vec::new() } else { vec![pts] },
            dashed: false,
        }],
        marks: Vec::new(),
    }
}

/// The report of `records` (record lines) with `samples` (sample points by cookie).
pub fn report_html(
    records: &[Value],
    samples: &BTreeMap<u64, Vec<Point>>,
    slowest: usize,
    sources: &str,
) -> String {
    let thr: Vec<f64> = records.iter().filter_map(|r| r["SendThroughputMbps"].as_f64()).collect();
    let rtt: Vec<f64> = records.iter().filter_map(|r| r["RTTSummary"][3].as_f64()).collect();
    let mut b = String::with_capacity(1 << 20);
    let first = records.iter().filter_map(|r| r["StartTime"].as_str()).min().unwrap_or("");
    let last = records.iter().filter_map(|r| r["EndTime"].as_str()).max().unwrap_or("");
    let _ = write!(
        b,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>cgmon-rs report</title><style>{}{STYLE}</style></head><body><main>\
         <h1>cgmon-rs report</h1><p>{} records from {}; flows from {} to {}.</p>",
        crate::chart::page::STYLE_CSS,
        records.len(),
        esc(sources),
        esc(first),
        esc(last)
    );
    b.push_str("<h2>Distributions</h2><div class=\"charts\">");
    b.push_str(
        &cdf("cdf-throughput", "Send throughput per flow", "send throughput", Unit::Mbps, thr)
            .svg(),
    );
    b.push_str(&cdf("cdf-rtt", "Median RTT per flow", "median RTT", Unit::Ms, rtt).svg());
    b.push_str("</div>");
    verdicts_per_service(&mut b, records);
    slowest_flows(&mut b, records, slowest);
    every_flow(&mut b, records, samples);
    b.push_str("</main></body></html>\n");
    b
}

/// Verdicts per service: by service (or cgroup id, in records written before they named
/// services), namespace and port as the records name them.
fn verdicts_per_service(b: &mut String, records: &[Value]) {
    let mut per: BTreeMap<String, [usize; 5]> = BTreeMap::new();
    for r in records {
        let cgroup = match (r["Service"].as_str(), r["CgroupID"].as_u64()) {
            (Some(s), _) => Some(s.to_string()),
            (None, Some(c)) => Some(format!("cgroup {c}")),
            (None, None) => None,
        };
        let svc = match (r["Netns"]["Name"].as_str(), cgroup) {
            (Some(ns), Some(c)) => format!("{ns} / {c}"),
            (Some(ns), None) => ns.to_string(),
            (None, Some(c)) => c,
            (None, None) => "unknown".into(),
        };
        // The lower port is taken as the service's: the server's own, as the client's
        // is from the ephemeral range above it.
        let port = |k: &str| r["ID"][k].as_u64().unwrap_or(0);
        let (sp, dp) = (port("SrcPort"), port("DstPort"));
        let svc =
            if sp <= dp { format!("{svc}, serving :{sp}") } else { format!("{svc}, to :{dp}") };
        let v = crate::analysis::diagnosis::verdict_index(r["Diagnosis"]["Verdict"].as_str());
        per.entry(svc).or_default()[v] += 1;
    }
    b.push_str(
        "<h2>Verdicts per service and port</h2><table class=\"num\"><thead><tr><th>service</th>",
    );
    for v in crate::analysis::diagnosis::VERDICTS {
        let _ = write!(b, "<th>{v}</th>");
    }
    b.push_str("</tr></thead><tbody>");
    for (svc, v) in &per {
        let _ = write!(b, "<tr><td>{}</td>", esc(svc));
        for c in v {
            let _ = write!(b, "<td>{c}</td>");
        }
        b.push_str("</tr>");
    }
    b.push_str("</tbody></table>");
}

/// The slowest flows: those that sent, by throughput, lowest first.
fn slowest_flows(b: &mut String, records: &[Value], slowest: usize) {
    let mut order: Vec<&Value> =
        records.iter().filter(|r| r["BytesAcked"].as_u64().unwrap_or(0) > 1).collect();
    order.sort_by(|a, b| {
        let t = |r: &Value| r["SendThroughputMbps"].as_f64().unwrap_or(0.0);
        t(a).total_cmp(&t(b))
    });
    let _ = write!(
        b,
        "<h2>The slowest flows that sent data</h2><table id=\"slowest\"><thead><tr><th>flow</th><th>cookie</th><th>throughput (Mbit/s)</th><th>median RTT (ms)</th><th>limited by</th><th>finding</th></tr></thead><tbody>"
    );
    for r in order.iter().take(slowest) {
        let _ = write!(
            b,
            "<tr><td><a href=\"#flow-{}-{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            r["Cookie"],
            r["Seq"],
            esc(&tuple_of(r)),
            r["Cookie"],
            r["SendThroughputMbps"].as_f64().map_or("–".into(), num),
            r["RTTSummary"][3].as_f64().map_or("–".into(), num),
            esc(r["Diagnosis"]["Verdict"].as_str().unwrap_or("–")),
            esc(r["Diagnosis"]["Finding"].as_str().unwrap_or(""))
        );
    }
    b.push_str("</tbody></table>");
}

/// Every flow, with charts where samples exist.
fn every_flow(b: &mut String, records: &[Value], samples: &BTreeMap<u64, Vec<Point>>) {
    b.push_str("<h2>Every flow</h2>");
    for r in records {
        let cookie = r["Cookie"].as_u64().unwrap_or(0);
        let seq = r["Seq"].as_u64().unwrap_or(0);
        let _ = write!(
            b,
            "<section class=\"flow\" id=\"flow-{cookie}-{seq}\"><h3>{} <small>cookie {cookie} · {} · {} Mbit/s</small></h3><p>{}</p>",
            esc(&tuple_of(r)),
            esc(r["Diagnosis"]["Verdict"].as_str().unwrap_or("no diagnosis")),
            r["SendThroughputMbps"].as_f64().map_or("–".into(), num),
            esc(r["Diagnosis"]["Finding"].as_str().unwrap_or(""))
        );
        if let Some(points) = samples.get(&cookie) {
            let min = r["MinRTTKernelms"].as_f64().or(r["MinRTTObservedms"].as_f64());
            b.push_str("<details><summary>charts</summary><div class=\"charts\">");
            for c in charts(&format!("f{cookie}-{seq}-"), points, min, None) {
                b.push_str(&c.svg());
            }
            b.push_str("</div></details>");
        }
        b.push_str("</section>");
    }
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
    let mut records = Vec::new();
    for p in &cli.records {
        if let Err(e) = read_lines(p, true, |v| records.push(v)) {
            return fail(e.0);
        }
    }
    let mut samples: BTreeMap<u64, Vec<Point>> = BTreeMap::new();
    if let Some(p) = &cli.samples {
        let r = read_lines(p, true, |v| {
            if let (Some(c), Some(pt)) = (v.get("Cookie").and_then(Value::as_u64), point_of(&v)) {
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
    eprintln!("cgmon-rs report: {} records, {} flows with samples", records.len(), samples.len());
    write_out(
        "report",
        Some(&cli.output),
        &report_html(&records, &samples, cli.slowest, &names.join(", ")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_are_grouped_by_the_records_service_name() {
        let rec = |service: Option<&str>, cgroup: u64, sport: u16, dport: u16| {
            let mut r = serde_json::json!({
                "ID": {"SrcIP": "10.0.0.1", "SrcPort": sport, "DstIP": "10.0.0.2", "DstPort": dport},
                "Cookie": u64::from(sport) * 100_000 + u64::from(dport),
                "CgroupID": cgroup,
                "SendThroughputMbps": 10.0,
                "Diagnosis": {"Verdict": "network"},
            });
            if let Some(s) = service {
                r["Service"] = s.into();
            }
            r
        };
        let records = [
            rec(Some("nginx.service"), 7, 443, 50_001),
            rec(Some("nginx.service"), 7, 443, 50_002),
            // A record from before records named services: its cgroup id stands in.
            rec(None, 77, 80, 50_003),
        ];
        let html = report_html(&records, &BTreeMap::new(), 10, "test");
        let row = |name: &str| {
            let t =
                html.split(&format!("<td>{name}</td>")).nth(1).unwrap_or_else(|| panic!("{name}"));
            t[..t.find("</tr>").unwrap()].to_string()
        };
        // Verdict counts: receiver window, send buffer, network, application, unknown.
        let counts = |n: usize| format!("<td>0</td><td>0</td><td>{n}</td><td>0</td><td>0</td>");
        assert_eq!(row("nginx.service, serving :443"), counts(2));
        assert_eq!(row("cgroup 77, serving :80"), counts(1));
        assert!(!html.contains("cgroup 7,"), "the name replaces the id");
    }
}
