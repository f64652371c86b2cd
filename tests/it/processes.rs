//! The process behind each flow, on the kernel: real sockets of child programs, looked
//! for through /proc by the monitor (docs/processes.md).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::monitor::Monitor;
use crate::program::{http_addr, http_get};

const BIN: &str = env!("CARGO_BIN_EXE_cgmon-rs");

/// A sender in Python that renames its task (prctl PR_SET_NAME, what `ps -o comm` then
/// shows), connects to each port given, says READY, waits for a line, sends N bytes to
/// each, says SENT and closes when its stdin does.
const SENDER: &str = r#"
import ctypes, socket, sys
name = sys.argv[1]
if name:
    ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)
n = int(sys.argv[2])
socks = [socket.create_connection(("127.0.0.1", int(p))) for p in sys.argv[3:]]
print("READY", flush=True)
sys.stdin.readline()
for s in socks:
    s.sendall(b"x" * n)
print("SENT", flush=True)
sys.stdin.read()
for s in socks:
    s.close()
"#;

fn python() -> bool {
    let ok = Command::new("python3").arg("-V").stdout(Stdio::null()).status().is_ok();
    if !ok {
        assert!(std::env::var("CI").map_or(true, |v| v != "true"), "CI=true: no python3");
        eprintln!("skipped: python3 is not installed");
    }
    ok
}

/// Listeners that read everything each connection sends, and the byte count per port.
fn sinks(k: usize) -> (Vec<u16>, Vec<std::thread::JoinHandle<u64>>) {
    (0..k)
        .map(|_| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            let h = std::thread::spawn(move || {
                let (mut c, _) = l.accept().unwrap();
                let mut buf = vec![0u8; 1 << 16];
                let mut n = 0u64;
                while let Ok(k @ 1..) = c.read(&mut buf) {
                    n += k as u64;
                }
                n
            });
            (port, h)
        })
        .unzip()
}

fn line(r: &mut impl BufRead, want: &str) {
    let mut s = String::new();
    r.read_line(&mut s).unwrap();
    assert_eq!(s.trim(), want);
}

/// Runs the sender (`name`: its new task name, "" to keep python's; `module`: run it as
/// `python3 -m` that module) against `ports`, N bytes each, with the monitor watching;
/// returns the records of its connecting sockets, the sender's pid and `/metrics`.
fn run(
    name: &str,
    module: Option<&str>,
    n: usize,
    map: &str,
    extra: &[&str],
) -> (Vec<Value>, u32, String) {
    let (ports, sinks) = sinks(2);
    let dir = tempfile::tempdir().unwrap();
    let map_file = dir.path().join("dests.map");
    std::fs::write(
        &map_file,
        map.replace("P0", &ports[0].to_string()).replace("P1", &ports[1].to_string()),
    )
    .unwrap();
    let filter = format!("dport {} or dport {}", ports[0], ports[1]);
    let mut c = Command::new(BIN);
    c.args(["-run-interval", "50ms", "-run-http-server", "127.0.0.1:0", "--metrics-kernsnoopd"]);
    c.args(["--dest-map", map_file.to_str().unwrap(), "--filter", &filter]).args(extra);
    let m = Monitor::spawn(c);
    let addr = http_addr(&m);
    let mut cmd = Command::new("python3");
    match module {
        Some(module) => {
            std::fs::write(dir.path().join(format!("{module}.py")), SENDER).unwrap();
            cmd.env("PYTHONPATH", dir.path()).args(["-m", module]);
        }
        None => {
            cmd.args(["-c", SENDER]);
        }
    }
    cmd.arg(name).arg(n.to_string()).args(ports.iter().map(u16::to_string));
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    line(&mut out, "READY");
    // Let full dumps hold the connections (and the walker find them) before any byte.
    std::thread::sleep(Duration::from_millis(500));
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "GO").unwrap();
    line(&mut out, "SENT");
    drop(stdin);
    assert!(child.wait().unwrap().success());
    let got: u64 = sinks.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(got, 2 * n as u64);
    let records = m.records(2, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    let text = http_get(&addr, "/metrics");
    m.signal(libc::SIGTERM);
    m.wait(Duration::from_secs(10));
    (records, pid, text)
}

/// The value of the series `series` (name and labels, exactly), or 0.
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn a_renamed_process_is_named_with_its_pid_and_both_destinations() {
    if !python() {
        return;
    }
    let n = 3_000_000;
    let (records, pid, text) =
        run("renamed-sender", None, n, "127.0.0.1/32:P0 alpha\n127.0.0.1/32:P1 beta\n", &[]);
    let mut dests: Vec<&str> = records.iter().map(|r| r["DestService"].as_str().unwrap()).collect();
    dests.sort_unstable();
    assert_eq!(dests, ["alpha", "beta"], "{records:#?}");
    for r in &records {
        assert_eq!(r["Comm"], "renamed-sender", "a renamed python is not python: {r:#}");
        assert_eq!(r["Pid"], pid, "{r:#}");
        // The kernel's count takes in the SYN and the FIN.
        let acked = r["BytesAcked"].as_u64().unwrap();
        assert!((n as u64..=n as u64 + 2).contains(&acked), "{r:#}");
    }
    // The byte counters add up to what was sent, to the program and to each destination.
    let comm_bytes: f64 = text
        .lines()
        .filter(|l| {
            l.starts_with("cgmon_flow_acked_bytes_total{") && l.contains("comm=\"renamed-sender\"")
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    let want = 2.0 * n as f64;
    assert!((comm_bytes - want).abs() <= want * 0.001, "{comm_bytes} vs {want}\n{text}");
    // kernsnoopd's names, exactly.
    let binary = value(&text, "linux_bytes_sent_total{binary_name=\"renamed-sender\"}");
    assert!((binary - want).abs() <= want * 0.001, "{binary} vs {want}\n{text}");
    for d in ["alpha", "beta"] {
        let by_pair: f64 = text
            .lines()
            .filter(|l| {
                l.starts_with("magma_bytes_sent_total{service_name=")
                    && l.contains(&format!("dest_service=\"{d}\""))
            })
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum();
        assert!((by_pair - n as f64).abs() <= n as f64 * 0.001, "{d}: {by_pair}\n{text}");
    }
    assert!(value(&text, "cgmon_flow_owners_total{how=\"socket\"}") >= 2.0, "{text}");
}

#[test]
fn a_python_program_is_named_by_its_module() {
    if !python() {
        return;
    }
    let (records, pid, _) = run("", Some("cgmon_probe_mod"), 1000, "", &[]);
    for r in &records {
        assert_eq!(r["Comm"], "cgmon_probe_mod", "not python3: {r:#}");
        assert_eq!(r["Pid"], pid);
        assert_eq!(r["DestService"], "local", "the fallback for loopback");
    }
}

#[test]
fn no_process_leaves_comm_and_pid_out() {
    if !python() {
        return;
    }
    let (records, _, text) = run("renamed-sender", None, 1000, "", &["--no-process"]);
    for r in &records {
        assert!(r.get("Comm").is_none() && r.get("Pid").is_none(), "{r:#}");
    }
    assert!(!text.contains("comm=\"renamed-sender\""), "{text}");
    assert_eq!(value(&text, "cgmon_flow_owners_total{how=\"none\"}"), 2.0, "{text}");
}
