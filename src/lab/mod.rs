//! A lab: two network namespaces ("hosts" A and B) joined by an emulated path with a known
//! one-way delay, random loss (each direction) and a bottleneck rate with a queue limit.
//!
//! ```text
//!  netns A                                                        netns B
//!  192.0.2.1, 2001:db8::1                                         192.0.2.2, 2001:db8::2
//!  lab0 (TUN) ─ tbf ─→ [forwarder A→B: delay, loss] ─→ lab0 (TUN)
//!  lab0       ←─ [forwarder B→A: delay, loss] ←─ tbf ─ lab0
//! ```
//!
//! This kernel has no netem, so the delay and the loss are made in user space: a forwarder
//! thread per direction reads IP packets from one namespace's TUN device and writes them into
//! the other's after the delay, dropping each with the configured probability. The rate and
//! the queue depth come from tbf on the sending side's TUN egress. Traffic can only move
//! between the two TUN devices: nothing leaves the namespaces.
//!
//! Needs root (namespaces, TUN, tc). [`Lab::up`] builds it; dropping the [`Lab`] (also
//! while a failing test unwinds) stops the forwarders and deletes both namespaces. Stale
//! namespaces of dead processes are removed at the next start.

pub mod forwarder;
pub mod traffic;

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use forwarder::{Direction, PathStats};

/// One end of the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Host A (the sender in the tests).
    A,
    /// Host B.
    B,
}

/// The emulated path.
#[derive(Debug, Clone, PartialEq)]
pub struct LabConfig {
    /// One-way delay A → B.
    pub delay_ab: Duration,
    /// One-way delay B → A.
    pub delay_ba: Duration,
    /// Probability that a packet A → B is dropped, 0 to 1.
    pub loss_ab: f64,
    /// Probability that a packet B → A is dropped.
    pub loss_ba: f64,
    /// Bottleneck A → B in bits/s (tbf on A's egress); `None` is unlimited.
    pub rate_ab: Option<u64>,
    /// Bottleneck B → A in bits/s.
    pub rate_ba: Option<u64>,
    /// tbf queue limit in bytes (the bottleneck buffer).
    pub queue_bytes: u64,
    /// Seed of the loss pattern, so a run can be repeated.
    pub seed: u64,
}

impl Default for LabConfig {
    fn default() -> Self {
        Self {
            delay_ab: Duration::from_millis(10),
            delay_ba: Duration::from_millis(10),
            loss_ab: 0.0,
            loss_ba: 0.0,
            rate_ab: None,
            rate_ba: None,
            queue_bytes: 256 << 10,
            seed: 1,
        }
    }
}

impl LabConfig {
    /// The same delay both ways.
    pub fn delay(mut self, d: Duration) -> Self {
        self.delay_ab = d;
        self.delay_ba = d;
        self
    }
    /// The same loss both ways.
    pub fn loss(mut self, p: f64) -> Self {
        self.loss_ab = p;
        self.loss_ba = p;
        self
    }
    /// A bottleneck A → B of `bits_per_s` with a queue of `queue_bytes`.
    pub fn rate(mut self, bits_per_s: u64, queue_bytes: u64) -> Self {
        self.rate_ab = Some(bits_per_s);
        self.queue_bytes = queue_bytes;
        self
    }
}

/// A running lab.
pub struct Lab {
    names: [String; 2],
    ns: [OwnedFd; 2],
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    stats: [Arc<PathStats>; 2],
    cfg: LabConfig,
}

/// The interface name inside each namespace.
pub const IFACE: &str = "lab0";

static SERIAL: AtomicU32 = AtomicU32::new(0);

fn run(cmd: &mut Command) -> io::Result<()> {
    let out = cmd.output()?;
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "{:?} failed: {}",
        cmd,
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

/// Deletes lab namespaces left behind by processes that no longer exist.
fn remove_stale() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else { return };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("cglab-") else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = run(Command::new("ip").args(["netns", "del", &name]));
        }
    }
}

/// Runs `f` on a thread that has entered the namespace `ns`, so sockets and devices it
/// creates belong there (a socket keeps its namespace for life, whichever thread uses it).
pub fn in_netns<T: Send>(ns: &OwnedFd, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    let fd = ns.as_raw_fd();
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: setns on a valid namespace fd affects only this (scoped) thread.
            if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("lab thread panicked")))
    })
}

impl Lab {
    /// Builds the lab.
    ///
    /// # Errors
    /// Not root, no TUN, or a command (`ip`, `tc`) failed; what was built is torn down.
    pub fn up(cfg: LabConfig) -> io::Result<Lab> {
        remove_stale();
        let n = SERIAL.fetch_add(1, Ordering::Relaxed);
        let base = format!("cglab-{}-{n}", std::process::id());
        let names = [format!("{base}-a"), format!("{base}-b")];
        for name in &names {
            run(Command::new("ip").args(["netns", "add", name]))?;
        }
        // From here on, a failure drops `guard`, which deletes the namespaces.
        let guard = NsGuard(names.clone());
        let open = |name: &str| -> io::Result<OwnedFd> {
            Ok(std::fs::File::open(format!("/run/netns/{name}"))?.into())
        };
        let ns = [open(&names[0])?, open(&names[1])?];
        let tun_a = in_netns(&ns[0], || forwarder::open_tun(IFACE))?;
        let tun_b = in_netns(&ns[1], || forwarder::open_tun(IFACE))?;
        let addrs = [(addr_v4(Side::A), addr_v4(Side::B)), (addr_v4(Side::B), addr_v4(Side::A))];
        let v6 = [addr_v6(Side::A), addr_v6(Side::B)];
        for (i, name) in names.iter().enumerate() {
            let ip = |args: &[&str]| run(Command::new("ip").args(["-n", name]).args(args));
            ip(&["link", "set", "lo", "up"])?;
            ip(&["link", "set", IFACE, "up"])?;
            let (me, peer) = addrs[i];
            ip(&["addr", "add", &me.to_string(), "peer", &peer.to_string(), "dev", IFACE])?;
            ip(&["-6", "addr", "add", &format!("{}/64", v6[i]), "dev", IFACE, "nodad"])?;
            let rate = if i == 0 { cfg.rate_ab } else { cfg.rate_ba };
            if let Some(bits) = rate {
                // The bucket must hold at least a few packets, and a timer tick's worth of
                // the rate (HZ may be 100).
                let burst = (bits / 8 / 100).max(16 << 10);
                run(Command::new("tc").args(["-n", name, "qdisc", "replace", "dev", IFACE]).args(
                    [
                        "root",
                        "tbf",
                        "rate",
                        &format!("{bits}bit"),
                        "burst",
                        &burst.to_string(),
                        "limit",
                        &cfg.queue_bytes.to_string(),
                    ],
                ))?;
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stats = [Arc::new(PathStats::default()), Arc::new(PathStats::default())];
        let (tun_a, tun_b) = (Arc::new(tun_a), Arc::new(tun_b));
        let dirs = [
            Direction {
                from: tun_a.clone(),
                to: tun_b.clone(),
                delay: cfg.delay_ab,
                loss: cfg.loss_ab,
                seed: cfg.seed,
                stats: stats[0].clone(),
            },
            Direction {
                from: tun_b,
                to: tun_a,
                delay: cfg.delay_ba,
                loss: cfg.loss_ba,
                seed: cfg.seed ^ 0x9e37_79b9_7f4a_7c15,
                stats: stats[1].clone(),
            },
        ];
        let mut threads = Vec::new();
        for (i, d) in dirs.into_iter().enumerate() {
            let stop = stop.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("lab-fwd-{}", ["ab", "ba"][i]))
                    .spawn(move || forwarder::run(&d, &stop))?,
            );
        }
        std::mem::forget(guard);
        Ok(Lab { names, ns, stop, threads, stats, cfg })
    }

    /// The namespace's name (for `ip netns exec NAME …`).
    pub fn ns_name(&self, side: Side) -> &str {
        &self.names[side as usize]
    }

    /// The namespace, for [`in_netns`].
    pub fn ns(&self, side: Side) -> &OwnedFd {
        &self.ns[side as usize]
    }

    /// The path's settings.
    pub fn config(&self) -> &LabConfig {
        &self.cfg
    }

    /// Packets forwarded and dropped, A → B.
    pub fn stats_ab(&self) -> &PathStats {
        &self.stats[0]
    }

    /// Packets forwarded and dropped, B → A.
    pub fn stats_ba(&self) -> &PathStats {
        &self.stats[1]
    }

    /// A command that runs `program` inside `side`'s namespace, as a user would with
    /// `ip netns exec`.
    pub fn command(&self, side: Side, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.ns_name(side)]).arg(program);
        c
    }

    /// Sets a sysctl inside `side`'s namespace (e.g. `net.ipv4.tcp_ecn`).
    ///
    /// # Errors
    /// The sysctl does not exist or cannot be set.
    pub fn sysctl(&self, side: Side, key: &str, value: &str) -> io::Result<()> {
        run(self.command(side, "sysctl").args(["-q", "-w", &format!("{key}={value}")]))
    }
}

/// `side`'s IPv4 address.
pub fn addr_v4(side: Side) -> Ipv4Addr {
    match side {
        Side::A => Ipv4Addr::new(192, 0, 2, 1),
        Side::B => Ipv4Addr::new(192, 0, 2, 2),
    }
}

/// `side`'s IPv6 address.
pub fn addr_v6(side: Side) -> Ipv6Addr {
    match side {
        Side::A => Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
        Side::B => Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2),
    }
}

/// `side`'s address in the family asked for.
pub fn addr(side: Side, v6: bool) -> IpAddr {
    if v6 { IpAddr::V6(addr_v6(side)) } else { IpAddr::V4(addr_v4(side)) }
}

struct NsGuard([String; 2]);

impl Drop for NsGuard {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = run(Command::new("ip").args(["netns", "del", n]));
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        drop(NsGuard(self.names.clone()));
    }
}
