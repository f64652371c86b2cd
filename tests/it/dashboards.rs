//! The dashboards and alert rules that ship in `examples/grafana/` and `examples/prometheus/`:
//! - the rules pass `promtool check rules` and `promtool test rules` (every alert fires on
//!   its own series and stays quiet on others);
//! - a real Prometheus, loading the rules, scrapes a real cgmon-rs that watches real
//!   loopback traffic (a bulk flow, a flow held by a slow reader, short connections) and
//!   a ClickHouse sink that fails (its metrics then exist): every PromQL expression of the
//!   host dashboard (its variables and `$__rate_interval` fixed) and both sides of every
//!   alert's comparison return series;
//! - the dashboards type-check against Grafana's own schema (npm's `@grafana/schema`, with
//!   TypeScript's `satisfies`), and name only data sources and variables that exist.
//!
//! The fleet dashboard's SQL runs in `tests/it/sink.rs` (chdb). promtool and prometheus
//! come from Debian's `prometheus`, npm with Node.js; under `CI=true` a missing tool fails.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::program::{body, http_addr, listener, monitor, own_address, port_filter};

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// Whether `tool` runs; if not, fails under CI and otherwise says why the test skips.
fn have(tool: &str, package: &str) -> bool {
    if Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success()) {
        return true;
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    assert!(!ci, "CI=true: {tool} is missing ({package})");
    eprintln!("skipped: {tool} is missing ({package})");
    false
}

fn dashboard(name: &str) -> Value {
    let text = std::fs::read_to_string(examples().join("grafana").join(name)).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Every query text of a dashboard: its panels' targets (`expr` or `rawSql`) and its query
/// variables.
fn queries(d: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for v in d["templating"]["list"].as_array().unwrap() {
        if v["type"] == "query" {
            let q = v["query"]["query"].as_str().or(v["query"].as_str()).unwrap();
            out.push((format!("variable {}", v["name"]), q.to_string()));
        }
    }
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            let q = t["expr"].as_str().or(t["rawSql"].as_str()).unwrap();
            out.push((format!("panel {:?} {}", p["title"], t["refId"]), q.to_string()));
        }
    }
    out
}

/// The `$name` and `${name...}` references of `q`, Grafana's and the plugins' own
/// (`$__…`) left out.
fn variables(q: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let b = q.as_bytes();
    for (i, _) in q.match_indices('$') {
        let rest = &q[i + 1..];
        let rest = rest.strip_prefix('{').unwrap_or(rest);
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if !name.is_empty() && !name.starts_with("__") && b.get(i + 1) != Some(&b'$') {
            out.insert(name);
        }
    }
    out
}

#[test]
fn the_dashboards_name_only_data_sources_and_variables_that_exist() {
    let provisioned =
        std::fs::read_to_string(examples().join("grafana/provisioning/datasources/cgmon-rs.yaml"))
            .unwrap();
    for (file, ds_var, plugin) in [
        ("cgmon-host.json", "datasource", "prometheus"),
        ("cgmon-fleet.json", "clickhouse", "grafana-clickhouse-datasource"),
    ] {
        let d = dashboard(file);
        let vars: Vec<&Value> = d["templating"]["list"].as_array().unwrap().iter().collect();
        let names: BTreeSet<String> =
            vars.iter().map(|v| v["name"].as_str().unwrap().to_string()).collect();
        // The data source variable is of the plugin's type, and that type is provisioned.
        let ds = vars.iter().find(|v| v["name"] == ds_var).expect("a data source variable");
        assert_eq!((ds["type"].as_str(), ds["query"].as_str()), (Some("datasource"), Some(plugin)));
        assert!(provisioned.contains(&format!("type: {plugin}")), "{plugin} is not provisioned");
        // Every panel, target and query variable uses that data source.
        let want = serde_json::json!({"type": plugin, "uid": format!("${{{ds_var}}}")});
        for p in d["panels"].as_array().unwrap().iter().filter(|p| p["type"] != "row") {
            assert_eq!(p["datasource"], want, "{file}: {}", p["title"]);
            for t in p["targets"].as_array().unwrap() {
                assert_eq!(t["datasource"], want, "{file}: {}", p["title"]);
            }
        }
        // Every variable a query names is defined, and each defined one is used.
        let qs = queries(&d);
        let mut used = BTreeSet::new();
        for (what, q) in &qs {
            for v in variables(q) {
                assert!(names.contains(&v), "{file}: {what} names ${v}, which is not defined");
                used.insert(v);
            }
        }
        for n in names.iter().filter(|n| *n != ds_var) {
            assert!(used.contains(n), "{file}: the variable {n} is used by no query");
        }
        // Panel ids are unique, and no two panels overlap on the grid.
        let mut ids = BTreeSet::new();
        let mut cells = BTreeSet::new();
        for p in d["panels"].as_array().unwrap() {
            assert!(ids.insert(p["id"].as_u64().unwrap()), "{file}: id {} twice", p["id"]);
            let g = &p["gridPos"];
            let (x, y, w, h) = ["x", "y", "w", "h"].map(|k| g[k].as_u64().unwrap()).into();
            assert!(x + w <= 24, "{file}: {} is wider than the grid", p["title"]);
            for cx in x..x + w {
                for cy in y..y + h {
                    assert!(
                        cells.insert((cx, cy)),
                        "{file}: {} overlaps another panel",
                        p["title"]
                    );
                }
            }
        }
    }
}

#[test]
fn the_dashboards_type_check_against_grafanas_schema() {
    if !have("npm", "Node.js's npm") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The schema package Grafana publishes, and TypeScript to check against it; versions
    // pinned, from the npm registry.
    let out = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--silent", "typescript@5.9.3"])
        .arg("@grafana/schema@13.2.3")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "npm install: {}", String::from_utf8_lossy(&out.stderr));
    let mut ts = String::from("import type { Dashboard } from '@grafana/schema';\n");
    for (name, file) in [("host", "cgmon-host.json"), ("fleet", "cgmon-fleet.json")] {
        let text = std::fs::read_to_string(examples().join("grafana").join(file)).unwrap();
        // `satisfies` checks the literal as it is: a misspelt or unknown field is an error.
        // Trimmed: a newline before `satisfies` would end the statement there.
        let text = text.trim_end();
        ts.push_str(&format!("export const {name} = {text} satisfies Dashboard;\n"));
    }
    std::fs::write(dir.path().join("check.ts"), ts).unwrap();
    let tsc = dir.path().join("node_modules/.bin/tsc");
    let out = Command::new(tsc)
        .args(["--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext"])
        .args(["--target", "es2022", "check.ts"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the dashboards do not match @grafana/schema's Dashboard: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_alert_rules_pass_promtool_and_every_alert_fires_and_stays_quiet_on_its_series() {
    if !have("promtool", "Debian package prometheus") {
        return;
    }
    let dir = examples().join("prometheus");
    for args in
        [&["check", "rules", "cgmon-rules.yml"][..], &["test", "rules", "cgmon-rules.test.yml"]]
    {
        let out = Command::new("promtool").args(args).current_dir(&dir).output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "promtool {}: {text}", args.join(" "));
        assert!(text.contains("SUCCESS"), "{text}");
    }
    // Every alert has its test.
    let rules = std::fs::read_to_string(dir.join("cgmon-rules.yml")).unwrap();
    let tests = std::fs::read_to_string(dir.join("cgmon-rules.test.yml")).unwrap();
    for line in rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")) {
        assert!(tests.contains(&format!("alertname: {line}")), "no test for {line}");
    }
}

/// The sides of each top-level comparison in `expr` that are not plain numbers, with the
/// `and`/`or`/`unless` operands taken apart: what an alert compares, without its
/// threshold. A number times an expression is the expression.
fn compared(expr: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut depth = 0i32;
    let mut quoted = false;
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' {
            quoted = !quoted;
        }
        if !quoted {
            if "([{".contains(c) {
                depth += 1;
            } else if ")]}".contains(c) {
                depth -= 1;
            }
        }
        let rest: String = chars[i..].iter().collect();
        let at_word = |w: &str| {
            depth == 0
                && !quoted
                && rest.starts_with(w)
                && (i == 0 || chars[i - 1].is_whitespace())
                && rest[w.len()..].starts_with(char::is_whitespace)
        };
        if let Some(w) = ["and", "or", "unless"].into_iter().find(|w| at_word(w)) {
            parts.push(String::new());
            i += w.len();
            continue;
        }
        let op = ["==", "!=", ">=", "<=", ">", "<"]
            .into_iter()
            .find(|o| depth == 0 && !quoted && rest.starts_with(o));
        if let Some(o) = op {
            parts.push(String::new());
            i += o.len();
            continue;
        }
        parts.last_mut().unwrap().push(c);
        i += 1;
    }
    parts
        .into_iter()
        .map(|p| {
            let p = p.trim().to_string();
            // `on (...)`/`ignoring (...)` belong to the operator before them.
            let p = match p.strip_prefix("on").or(p.strip_prefix("ignoring")) {
                Some(r) if r.trim_start().starts_with('(') => {
                    let r = r.trim_start();
                    r[r.find(')').unwrap() + 1..].trim().to_string()
                }
                _ => p,
            };
            // A number times an expression is the expression.
            match p.split_once('*') {
                Some((n, e)) if n.trim().parse::<f64>().is_ok() => e.trim().to_string(),
                _ => p,
            }
        })
        .filter(|p| !p.is_empty() && p.parse::<f64>().is_err())
        .collect()
}

#[test]
fn comparisons_are_taken_apart_into_what_they_compare() {
    assert_eq!(compared("up{job=\"cgmon\"} == 0"), ["up{job=\"cgmon\"}"]);
    assert_eq!(compared("rate(a[15m]) > 1.5 * b\n  and b > 0"), ["rate(a[15m])", "b", "b"]);
    assert_eq!(
        compared("x{limit=\"network\"} > 0.5\n  and on (service, dest_service)\nr > 1"),
        ["x{limit=\"network\"}", "r"]
    );
    assert_eq!(
        compared("sum without (limit) (y{l=~\"a|b\"}) > 0.5"),
        ["sum without (limit) (y{l=~\"a|b\"})"]
    );
}

/// A Prometheus server on a free loopback port, scraping `target` (job `cgmon`) every
/// second, with `rules` loaded when given; killed when dropped.
pub struct Prometheus {
    child: std::process::Child,
    listen: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    pub fn start(target: &str, rules: Option<&std::path::Path>) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let rules = rules.map(|r| format!("rule_files: ['{}']\n", r.display())).unwrap_or_default();
        let cfg = dir.path().join("prometheus.yml");
        std::fs::write(
            &cfg,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 {rules}scrape_configs:\n  - job_name: cgmon\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let listen = format!("127.0.0.1:{port}");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={listen}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Prometheus { child, listen, _dir: dir }
    }

    /// The series `expr` returns now (an instant query), or the error.
    pub fn query(&self, expr: &str) -> Result<usize, String> {
        Ok(self.series(expr)?.len())
    }

    /// The series `expr` returns now, as Prometheus's API gives them, or the error.
    pub fn series(&self, expr: &str) -> Result<Vec<Value>, String> {
        let mut s = std::net::TcpStream::connect(&self.listen).map_err(|e| e.to_string())?;
        let form = format!("query={}", cgmon_rs::units::url_escape(expr));
        let _ = write!(
            s,
            "POST /api/v1/query HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
            form.len()
        );
        let mut r = String::new();
        let _ = s.read_to_string(&mut r);
        let v: Value = serde_json::from_str(body(&r)).map_err(|e| format!("{e}: {r}"))?;
        if v["status"] != "success" {
            return Err(v["error"].to_string());
        }
        Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
    }
}

/// Loopback traffic that gives every family series: a bulk flow (network time), a flow
/// held by a reader that reads slowly through a small buffer (receiver-window time), and
/// short connections, all to the listener of `l`, and refused connects from
/// `refused_from`; all ended by the time this returns.
fn traffic(l: &std::net::TcpListener, a: std::net::SocketAddr, refused_from: std::net::IpAddr) {
    use cgmon_rs::testkit::Pair;
    let mut bulk = Pair::connect(l, a).unwrap();
    bulk.exchange(64 << 20).unwrap();
    drop(bulk);
    // The slow reader: the server writes all it can, the client reads 16 KB every 20 ms
    // through a 16 KiB buffer.
    let client = {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.set_recv_buffer_size(16 << 10).unwrap();
        s.connect(&a.into()).unwrap();
        std::net::TcpStream::from(s)
    };
    let (mut server, _) = l.accept().unwrap();
    server.set_write_timeout(Some(Duration::from_millis(100))).unwrap();
    let writer = std::thread::spawn(move || {
        let chunk = vec![1u8; 64 << 10];
        let end = Instant::now() + Duration::from_secs(3);
        while Instant::now() < end {
            let _ = server.write(&chunk);
        }
    });
    let mut c = client;
    c.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut buf = vec![0u8; 16 << 10];
    let end = Instant::now() + Duration::from_secs(3);
    while Instant::now() < end {
        let _ = c.read(&mut buf);
        std::thread::sleep(Duration::from_millis(20));
    }
    writer.join().unwrap();
    drop(c);
    for _ in 0..20 {
        let mut p = Pair::connect(l, a).unwrap();
        p.exchange(2_000).unwrap();
    }
    // Connects refused, from `refused_from` (which the monitor's filter names),
    // non-blocking so that the kernel keeps their port: the failed-connect panel and
    // alert have their series.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    for _ in 0..3 {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        let from = std::net::SocketAddr::new(refused_from, 0);
        s.bind(&from.into()).unwrap();
        s.set_nonblocking(true).unwrap();
        let _ = s.connect(&closed.into());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn every_dashboard_and_alert_query_returns_series_from_a_real_prometheus() {
    if !have("prometheus", "Debian package prometheus") {
        return;
    }
    let (l, a) = listener();
    let refused_from = own_address();
    let filter = format!("{} or src {refused_from}", port_filter(a));
    // A sink to a port where nothing listens: its metrics exist (and say it fails).
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let spool = tempfile::tempdir().unwrap();
    let m = monitor(&[
        "-run-interval",
        "50ms",
        "-run-http-server",
        "127.0.0.1:0",
        "--clickhouse",
        &format!("http://{dead}"),
        "--spool-dir",
        spool.path().to_str().unwrap(),
        "--filter",
        &filter,
    ]);
    let target = http_addr(&m);
    let prom = Prometheus::start(&target, Some(&examples().join("prometheus/cgmon-rules.yml")));
    // Rates need a scrape before the traffic: wait for the first.
    let end = Instant::now() + Duration::from_secs(60);
    while prom.query("up{job=\"cgmon\"} == 1") != Ok(1) {
        assert!(Instant::now() < end, "Prometheus did not scrape the monitor in 60 s");
        std::thread::sleep(Duration::from_millis(500));
    }
    traffic(&l, a, refused_from);
    // The queries: the host dashboard's, with its variables and intervals fixed, and the
    // sides of each alert's comparisons (a day-long baseline read over what this server
    // holds: `offset 1h` dropped).
    let d = dashboard("cgmon-host.json");
    let mut todo: Vec<(String, String)> = queries(&d)
        .into_iter()
        .map(|(what, q)| {
            let q = q
                .replace("$__rate_interval", "1m")
                .replace("$instance", ".*")
                .replace("$service", ".*");
            // Grafana's `label_values(SELECTOR, LABEL)` asks for the selector's series and
            // takes the label's values: the selector must have series with the label.
            let q = match q.strip_prefix("label_values(").and_then(|r| r.strip_suffix(')')) {
                Some(inner) => {
                    let (sel, label) = inner.rsplit_once(',').unwrap();
                    format!("count by ({}) ({})", label.trim(), sel.trim())
                }
                None => q,
            };
            (what, q)
        })
        .collect();
    let rules: rules_file::Rules = rules_file::read(&examples().join("prometheus/cgmon-rules.yml"));
    for (alert, expr) in rules.alerts {
        for (i, side) in compared(&expr).into_iter().enumerate() {
            todo.push((format!("alert {alert} side {i}"), side.replace(" offset 1h", "")));
        }
    }
    assert!(todo.len() >= 40, "{}", todo.len());
    // Each must return series within 90 s (rates need two scrapes; the recording rules an
    // evaluation after that).
    let end = Instant::now() + Duration::from_secs(90);
    let mut last = Vec::new();
    while !todo.is_empty() && Instant::now() < end {
        std::thread::sleep(Duration::from_secs(2));
        last.clear();
        todo.retain(|(what, q)| match prom.query(q) {
            Ok(n) if n > 0 => false,
            Ok(_) => {
                last.push(format!("{what}: no series: {q}"));
                true
            }
            Err(e) => panic!("{what}: Prometheus refused {q}: {e}"),
        });
    }
    assert!(todo.is_empty(), "queries that returned nothing in 90 s:\n{}", last.join("\n"));
    m.signal(libc::SIGTERM);
    m.wait(Duration::from_secs(10));
}

/// The rules file's alerts, read with the YAML parser the tests already have.
mod rules_file {
    use std::path::Path;

    pub struct Rules {
        pub alerts: Vec<(String, String)>,
    }

    pub fn read(path: &Path) -> Rules {
        let text = std::fs::read_to_string(path).unwrap();
        let docs = yaml_rust2::YamlLoader::load_from_str(&text).unwrap();
        let mut alerts = Vec::new();
        for g in docs[0]["groups"].as_vec().unwrap() {
            for r in g["rules"].as_vec().unwrap() {
                if let (Some(a), Some(e)) = (r["alert"].as_str(), r["expr"].as_str()) {
                    alerts.push((a.to_string(), e.to_string()));
                }
            }
        }
        Rules { alerts }
    }
}
