//! The namespaces benchmark (issue targets; figures in benches/RESULTS.md). Needs root.
//!
//! ```text
//! sudo cargo bench --bench netns -- [ROUNDS] [SECS]
//! (It does nothing under `cargo test`, which runs bench targets too.)
//! ```
//! 1. CPU per tick: 10 namespaces × 2,000 idle sockets (`--netns` naming the ten) against
//!    one namespace × 20,000 (`--netns own`), both loads held at once, the two monitors run
//!    in turn, every tick a full dump (`--cpu-budget 0`, `-run-interval 100ms`); whole-process
//!    CPU from /proc over the steady state, divided by the ticks. Beside them, an empty
//!    eleventh namespace alone: what one namespace's walk of the shared TCP table costs
//!    before any socket is reported (the kernel's floor per namespace).
//! 2. The same two with the default budget, where a full dump leaves out namespaces in which
//!    nothing moved: CPU per tick, the full-dump interval achieved and the walks left out.
//!    `OLD=path/to/an/older/cgmon-rs` runs that binary beside this one, in turn.
//! 3. What reading a namespace's TCP counters costs (`Activity::read`), best and median of
//!    1,000.
//! 4. A rescan of 1,000 processes' namespaces (`netns::scan`, as the scanner runs it once
//!    the namespaces are known), best and median of 20; `-- rescan` runs only this.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cgmon_rs::netns::{self, Roots, Which};
use cgmon_rs::testkit::ConnHolder;

#[path = "common/procstat.rs"]
mod procstat;
use procstat::proc_cpu_s;

/// CPU ms per tick of the monitor run with `args` for `secs`.
fn per_tick(args: &[String], secs: u64) -> f64 {
    run_monitor(env!("CARGO_BIN_EXE_cgmon-rs"), args, "0", secs).0
}

/// Runs `bin` with `args` and `budget` for `secs` (100 ms ticks): CPU ms per tick, and
/// `/metrics` read just before the end.
fn run_monitor(bin: &str, args: &[String], budget: &str, secs: u64) -> (f64, String) {
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut child = Command::new(bin)
        .args(args)
        .args(["-run-interval", "100ms", "--cpu-budget", budget])
        .args(["-run-duration", &format!("{secs}s"), "-run-http-server", &http.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let (c0, t0) = (proc_cpu_s(child.id()).expect("the monitor's /proc/PID/stat"), Instant::now());
    std::thread::sleep(Duration::from_secs(secs - 3));
    let (c1, dt) =
        (proc_cpu_s(child.id()).expect("the monitor's /proc/PID/stat"), t0.elapsed().as_secs_f64());
    let metrics = get_metrics(http);
    child.wait().unwrap();
    ((c1 - c0) * 1000.0 / (dt / 0.1), metrics)
}

fn get_metrics(at: SocketAddr) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(at) else { return String::new() };
    let _ = write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}

/// An unlabelled series' value in a /metrics text, or NaN.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// A process that enters the namespace at `path` and holds `n` idle connections there
/// until its stdin closes (a process each, so that no one process needs more than 20,000
/// file descriptors, this machine's hard limit).
fn hold(path: &str, n: usize) {
    if path != "own" {
        let f = std::fs::File::open(path).unwrap();
        // SAFETY: setns on a valid namespace fd, before any thread exists.
        assert_eq!(
            unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&f), libc::CLONE_NEWNET) },
            0
        );
    }
    let _h = ConnHolder::start("127.0.0.1:0".parse::<SocketAddr>().unwrap(), n).unwrap();
    println!("ready");
    let mut buf = String::new();
    let _ = std::io::stdin().read_line(&mut buf);
}

fn holder(path: &str, n: usize) -> std::process::Child {
    use std::io::BufRead;
    let mut c = Command::new(std::env::current_exe().unwrap())
        .args(["hold", path, &n.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(c.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    c
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    if args.first().is_some_and(|a| a == "hold") {
        return hold(&args[1], args[2].parse().unwrap());
    }
    if !std::env::args().any(|a| a == "--bench") {
        return; // `cargo test --all-targets`: a benchmark that needs root, not a test
    }
    if args.first().is_some_and(|a| a == "rescan") {
        return rescan();
    }
    let mut a = args.into_iter();
    let rounds: usize = a.next().map_or(2, |v| v.parse().unwrap());
    let secs: u64 = a.next().map_or(10, |v| v.parse().unwrap());
    let tag = std::process::id();
    let names: Vec<String> = (0..10).map(|i| format!("cgrs-bench-{tag}-{i}")).collect();
    // CHILD_EHASH=N gives each new namespace a TCP hash table of its own (Linux 6.1+,
    // net.ipv4.tcp_child_ehash_entries); by default they share the host's.
    let child_ehash = std::env::var("CHILD_EHASH").unwrap_or_else(|_| "0".into());
    let key = "/proc/sys/net/ipv4/tcp_child_ehash_entries";
    let before = std::fs::read_to_string(key).unwrap_or_default();
    std::fs::write(key, &child_ehash).unwrap();
    println!("tcp_child_ehash_entries = {child_ehash}");
    let mut holders = Vec::new();
    for n in &names {
        Command::new("ip").args(["netns", "add", n]).status().unwrap();
        Command::new("ip").args(["-n", n, "link", "set", "lo", "up"]).status().unwrap();
        holders.push(holder(&format!("/run/netns/{n}"), 1000));
    }
    holders.push(holder("own", 10_000));
    let empty = format!("cgrs-bench-{tag}-empty");
    Command::new("ip").args(["netns", "add", &empty]).status().unwrap();
    let ten = vec!["--netns".to_string(), names.join(",")];
    let one = vec!["--netns".to_string(), "own".to_string()];
    let alone = vec!["--netns".to_string(), empty.clone()];
    println!("every tick a full dump (--cpu-budget 0):");
    println!("round | 10 × 2,000: CPU ms per tick | 1 × 20,000 | ratio | an empty namespace");
    for r in 1..=rounds {
        let (x, y) = if r % 2 == 1 {
            let x = per_tick(&ten, secs);
            (x, per_tick(&one, secs))
        } else {
            let y = per_tick(&one, secs);
            (per_tick(&ten, secs), y)
        };
        let e = per_tick(&alone, secs);
        println!("{r} | {x:.2} | {y:.2} | {:.3} | {e:.2}", x / y);
    }
    println!("default budget (2 %): CPU ms per tick, full-dump interval achieved, walks left out");
    println!("round | binary | 10 × 2,000 | 1 × 20,000 | ratio");
    let old = std::env::var("OLD").ok();
    let bins: Vec<&str> =
        [env!("CARGO_BIN_EXE_cgmon-rs")].into_iter().chain(old.as_deref()).collect();
    for r in 1..=rounds {
        for bin in &bins {
            let (x, mx) = run_monitor(bin, &ten, "2", secs);
            let (y, my) = run_monitor(bin, &one, "2", secs);
            let iv = |m: &str| metric(m, "cgmon_full_dump_interval_seconds");
            let sk = |m: &str| metric(m, "cgmon_netns_walks_skipped_total");
            let bin = if old.as_deref() == Some(*bin) { "old" } else { "new" };
            println!(
                "{r} | {bin} | {x:.2} ms, {:.2} s, {} | {y:.2} ms, {:.2} s, {} | {:.3}",
                iv(&mx),
                sk(&mx),
                iv(&my),
                sk(&my),
                x / y
            );
        }
    }
    let mut a = cgmon_rs::sampler::activity::Activity::open_here().unwrap();
    let mut reads: Vec<f64> = (0..1000)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(a.read().unwrap());
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    reads.sort_by(f64::total_cmp);
    println!(
        "reading a namespace's TCP counters: best {:.1} µs, median {:.1} µs",
        reads[0], reads[500]
    );
    Command::new("ip").args(["netns", "del", &empty]).status().unwrap();
    for mut h in holders {
        drop(h.stdin.take());
        h.wait().unwrap();
    }
    for n in &names {
        Command::new("ip").args(["netns", "del", n]).status().unwrap();
    }
    std::fs::write(key, before.trim()).unwrap();
    rescan();
}

/// Rescans of 1,000 processes (`rescan` as the only argument runs just this).
fn rescan() {
    // Rescans of 1,000 processes.
    let mut kids: Vec<std::process::Child> = (0..1000)
        .map(|_| Command::new("sleep").arg("60").stdin(Stdio::null()).spawn().unwrap())
        .collect();
    // Let the thousand forks and execs finish first: the scan is measured, not them.
    std::thread::sleep(Duration::from_secs(2));
    let first = netns::scan(&Which::All, &Roots::default(), &HashMap::new());
    let known: HashMap<_, _> = first.found.iter().map(|n| (n.id, n.clone())).collect();
    let mut times: Vec<f64> = (0..20)
        .map(|_| {
            let t = Instant::now();
            let s = netns::scan(&Which::All, &Roots::default(), &known);
            assert!(s.processes >= 1000);
            t.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    times.sort_by(f64::total_cmp);
    println!(
        "rescan of {} processes: best {:.2} ms, median {:.2} ms (first scan, cgroups read: see above)",
        first.processes, times[0], times[10]
    );
    for k in &mut kids {
        let _ = k.kill();
        let _ = k.wait();
    }
}
