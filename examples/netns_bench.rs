//! The namespaces benchmark (issue targets; figures in benches/RESULTS.md). Needs root.
//!
//! ```text
//! cargo build --release && cargo run --release --example netns_bench -- [ROUNDS] [SECS]
//! ```
//! 1. CPU per tick: 10 namespaces × 2,000 idle sockets (`--netns` naming the ten) against
//!    one namespace × 20,000 (`--netns own`), both loads held at once, the two monitors run
//!    in turn, every tick a full dump (`--cpu-budget 0`, `-run-interval 100ms`); whole-process
//!    CPU from /proc over the steady state, divided by the ticks.
//! 2. A rescan of 1,000 processes' namespaces (`netns::scan`, as the scanner runs it once
//!    the namespaces are known), best and median of 20.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cgmon_rs::netns::{self, Roots, Which};
use cgmon_rs::testkit::ConnHolder;

fn proc_cpu_s(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = s[s.rfind(')').unwrap() + 2..].split(' ').collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / hz
}

/// CPU ms per tick of the monitor run with `args` for `secs`.
fn per_tick(args: &[String], secs: u64) -> f64 {
    let mut child = Command::new("target/release/cgmon-rs")
        .args(args)
        .args(["-run-interval", "100ms", "--cpu-budget", "0", "-run-duration", &format!("{secs}s")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let (c0, t0) = (proc_cpu_s(child.id()), Instant::now());
    std::thread::sleep(Duration::from_secs(secs - 3));
    let (c1, dt) = (proc_cpu_s(child.id()), t0.elapsed().as_secs_f64());
    child.wait().unwrap();
    (c1 - c0) * 1000.0 / (dt / 0.1)
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
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "hold") {
        return hold(&args[1], args[2].parse().unwrap());
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
    let ten = vec!["--netns".to_string(), names.join(",")];
    let one = vec!["--netns".to_string(), "own".to_string()];
    println!("round | 10 × 2,000: CPU ms per tick | 1 × 20,000: CPU ms per tick | ratio");
    for r in 1..=rounds {
        let (x, y) = if r % 2 == 1 {
            let x = per_tick(&ten, secs);
            (x, per_tick(&one, secs))
        } else {
            let y = per_tick(&one, secs);
            (per_tick(&ten, secs), y)
        };
        println!("{r} | {x:.2} | {y:.2} | {:.3}", x / y);
    }
    for mut h in holders {
        drop(h.stdin.take());
        h.wait().unwrap();
    }
    for n in &names {
        Command::new("ip").args(["netns", "del", n]).status().unwrap();
    }
    std::fs::write(key, before.trim()).unwrap();
    // Rescans of 1,000 processes.
    let mut kids: Vec<std::process::Child> = (0..1000)
        .map(|_| Command::new("sleep").arg("60").stdin(Stdio::null()).spawn().unwrap())
        .collect();
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
