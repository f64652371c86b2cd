//! A two-host lab with a long, lossy, narrow path, to watch what latency, loss and buffer
//! sizes do to TCP (and what cgmon-rs reports about it). Needs root.
//!
//! ```text
//! cargo run --example lab -- [--delay 25ms] [--loss 0.01] [--rate 20M] [--queue 256K]
//!                            [--b 'CMD'] [--a 'CMD'] [--bulk SECONDS]
//! ```
//! - Host A is 192.0.2.1 / 2001:db8:a::1, host B 198.51.100.2 / 2001:db8:b::2. `--delay` and
//!   `--loss` apply to each direction; `--rate` (bits/s, K/M/G ×1000) and `--queue` (bytes)
//!   shape A → B.
//! - `--b CMD` runs in B in the background (a server), `--a CMD` in A in the foreground;
//!   when A's command ends, everything is torn down. Without `--a`, the lab stays up until
//!   Ctrl-C, and prints how to enter it (`ip netns exec NAME …`).
//! - `--bulk S` runs the built-in bulk sender A → B for S seconds and prints its goodput.
//!
//! Example: watch a bulk flow through a 20 Mbit/s, 50 ms RTT path with cgmon-rs:
//! ```text
//! cargo build --release --all-targets
//! sudo target/release/examples/lab --delay 25ms --rate 20M \
//!     --a 'target/release/cgmon-rs -run-interval 100ms --pretty' --bulk 10
//! ```

use std::process::{Command, ExitCode};
use std::time::Duration;

use cgmon_rs::lab::traffic::{Bulk, Sink, send};
use cgmon_rs::lab::{Lab, LabConfig, Side, addr_v4};
use cgmon_rs::units::{parse_duration, parse_size};

fn rate(s: &str) -> Result<u64, String> {
    let (num, mul) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1e3),
        Some('M' | 'm') => (&s[..s.len() - 1], 1e6),
        Some('G' | 'g') => (&s[..s.len() - 1], 1e9),
        _ => (s, 1.0),
    };
    num.parse::<f64>()
        .ok()
        .filter(|v| *v > 0.0)
        .map(|v| (v * mul) as u64)
        .ok_or_else(|| format!("invalid rate {s:?} (bits/s, e.g. 20M)"))
}

/// The options: the path, A's and B's commands, and the bulk sender's seconds.
struct Args {
    cfg: LabConfig,
    a: Option<String>,
    b: Option<String>,
    bulk: Option<f64>,
}

fn parse() -> Result<Args, String> {
    let mut cfg = LabConfig::default();
    let (mut a, mut b, mut bulk) = (None, None, None);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--delay" => cfg = cfg.delay(parse_duration(&val()?).map_err(|e| e.to_string())?),
            "--loss" => {
                let v = val()?;
                let p: f64 = v.parse().map_err(|_| format!("invalid loss {v:?}"))?;
                if !(0.0..1.0).contains(&p) {
                    return Err(format!("invalid loss {v:?}: a probability below 1"));
                }
                cfg = cfg.loss(p);
            }
            "--rate" => cfg.rate_ab = Some(rate(&val()?)?),
            "--queue" => cfg.queue_bytes = parse_size(&val()?).map_err(|e| e.to_string())?,
            "--a" => a = Some(val()?),
            "--b" => b = Some(val()?),
            "--bulk" => {
                let v = val()?;
                bulk = Some(v.parse().map_err(|_| format!("invalid seconds {v:?}"))?);
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(Args { cfg, a, b, bulk })
}

extern "C" fn on_sigint(_: libc::c_int) {}

fn main() -> ExitCode {
    // Ctrl-C goes to the whole foreground group: the commands in the lab stop on it, and we
    // live on to tear the lab down. (A handler, unlike SIG_IGN, is not inherited by exec.)
    // SAFETY: installing an async-signal-safe no-op handler.
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
    let Args { cfg, a, b, bulk } = match parse() {
        Ok(v) => v,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("lab: {e}");
            }
            eprintln!(
                "usage: lab [--delay D] [--loss P] [--rate BITS] [--queue BYTES] [--b CMD] [--a CMD] [--bulk SECONDS]"
            );
            return ExitCode::from(2);
        }
    };
    let lab = match Lab::up(cfg.clone()) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("lab: cannot build the lab (root needed): {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "lab up: A = {} ({}), B = {} ({}); delay {:?} each way, loss {}, rate {:?} bit/s, queue {} B",
        lab.ns_name(Side::A),
        addr_v4(Side::A),
        lab.ns_name(Side::B),
        addr_v4(Side::B),
        cfg.delay_ab,
        cfg.loss_ab,
        cfg.rate_ab,
        cfg.queue_bytes
    );
    let sh = |side: Side, cmd: &str| {
        // `exec`, so a signal to the child reaches the command itself.
        let mut c = lab.command(side, "sh");
        c.args(["-c", &format!("exec {cmd}")]);
        c
    };
    let mut server = b.map(|cmd| sh(Side::B, &cmd).spawn());
    let mut code = ExitCode::SUCCESS;
    let mut fg = a.map(|cmd| sh(Side::A, &cmd).spawn());
    if let Some(secs) = bulk {
        std::thread::sleep(Duration::from_millis(500));
        let r = Sink::start(&lab, Side::B, 0, None).and_then(|sink| {
            let to = (addr_v4(Side::B), sink.port).into();
            send(&lab, Side::A, to, &Bulk::for_duration(Duration::from_secs_f64(secs)))
        });
        match r {
            Ok(s) => eprintln!(
                "bulk A → B: {} bytes in {:?}: {:.2} Mbit/s",
                s.bytes,
                s.elapsed,
                s.mbps()
            ),
            Err(e) => eprintln!("bulk: {e}"),
        }
        std::thread::sleep(Duration::from_millis(500));
        // A monitor in A gets SIGINT, so it writes its records and exits.
        if let Some(Ok(c)) = &fg {
            // SAFETY: kill(2) on our own child (the `ip netns exec` parent, which execs).
            unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
        }
    }
    match fg.as_mut() {
        Some(Ok(c)) => {
            let ok = c.wait().is_ok_and(|s| s.success());
            code = if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE };
        }
        Some(Err(e)) => {
            eprintln!("lab: A's command: {e}");
            code = ExitCode::FAILURE;
        }
        None if bulk.is_none() => {
            eprintln!(
                "enter with: ip netns exec {} bash   (or {}); Ctrl-C tears the lab down",
                lab.ns_name(Side::A),
                lab.ns_name(Side::B)
            );
            let _ = Command::new("sleep").arg("infinity").status();
        }
        None => {}
    }
    if let Some(Ok(s)) = server.as_mut() {
        let _ = s.kill();
        let _ = s.wait();
    }
    drop(lab);
    code
}
