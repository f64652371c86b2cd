//! A lab: two network namespaces ("hosts" A and B) joined by an emulated path with a known
//! one-way delay, random loss (each direction) and a bottleneck rate with a queue limit.
//!
//! ```text
//!  netns A                      netns M (the path)                     netns B
//!  192.0.2.1                                                           198.51.100.2
//!  2001:db8:a::1                                                       2001:db8:b::2
//!  lab0 ⇄ [forwarder: delay, loss] ⇄ lab0 ─ route ─ lab1 ⇄ [forwarder] ⇄ lab0
//!                                ←tbf─┘               └─tbf→
//! ```
//! Every link is a pair of TUN devices joined by a forwarder thread (so no neighbour
//! resolution, and packets keep their order).
//!
//! This kernel has no netem, so the delay and the loss are made in user space: a forwarder
//! thread per direction reads IP packets from one TUN device and writes them into the other
//! after the delay, dropping each with the configured probability. The rate and the queue
//! depth come from tbf on the path namespace's egress towards each host. The bottleneck
//! queue must sit outside the sender: in the sender's own qdisc, TCP Small Queues would
//! hold it to about a millisecond of data and no queue would ever build. Traffic moves only
//! between the lab's devices: nothing leaves the namespaces.
//!
//! Needs root (namespaces, TUN, tc). [`Lab::up`] builds it; dropping the [`Lab`] (also
//! while a failing test unwinds) stops the forwarders and deletes both namespaces. Stale
//! namespaces of dead processes are removed at the next start.

pub mod forwarder;
pub mod traffic;

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use forwarder::{Direction, PathStats};
pub use forwarder::{Impair, Live};

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
    /// Reordering and the marking bottleneck, A → B (the emulator's, [`Impair`]).
    pub impair_ab: Impair,
    /// The same, B → A.
    pub impair_ba: Impair,
    /// The MTU of every link, bytes; `None` keeps the TUN default (1500). Under 1,280 the
    /// lab is IPv4 only (IPv6's minimum MTU).
    pub mtu: Option<u32>,
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
            impair_ab: Impair::default(),
            impair_ba: Impair::default(),
            mtu: None,
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
    /// A, B, and the path M.
    names: [String; 3],
    ns: [OwnedFd; 3],
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    stats: [Arc<PathStats>; 2],
    live: [Arc<Live>; 2],
    cfg: LabConfig,
}

/// The TUN device in each host, and M's end towards A.
pub const IFACE: &str = "lab0";
/// M's TUN device towards B.
pub const IFACE_B: &str = "lab1";

/// Packets a TUN device holds for its reader. The default 500 overflowed in bursts (a
/// forwarder thread injecting a batch of ACKs makes the sender emit a burst within that one
/// write call); the lab's queues are meant to be tbf's alone.
const TUN_QUEUE: &str = "10000";

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

/// The bottlenecks: M's egress towards B (A → B) and towards A (B → A), token buckets of
/// the configured rates and queue.
fn bottlenecks(m: &str, cfg: &LabConfig) -> io::Result<()> {
    for (rate, dev) in [(cfg.rate_ab, IFACE_B), (cfg.rate_ba, IFACE)] {
        let Some(bits) = rate else { continue };
        // The bucket must hold at least a few packets, and a timer tick's worth of the
        // rate (HZ may be 100).
        let burst = (bits / 8 / 100).max(16 << 10);
        let (rate, burst, limit) =
            (format!("{bits}bit"), burst.to_string(), cfg.queue_bytes.to_string());
        run(Command::new("tc")
            .args(["-n", m, "qdisc", "replace", "dev", dev, "root", "tbf"])
            .args(["rate", rate.as_str(), "burst", burst.as_str(), "limit", limit.as_str()]))?;
    }
    Ok(())
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

/// Runs `f` on a thread that has entered the namespace `ns` (see [`crate::netns::in_netns`]).
pub use crate::netns::in_netns;

/// Brings the links up in namespaces `names` (A, B, M) and gives them addresses and
/// routes: each host its address on its TUN end and every route through it; M routes
/// between its two TUN ends. TUN links need no neighbour resolution.
fn addresses(names: &[String; 3], cfg: &LabConfig) -> io::Result<()> {
    let sh = |name: &str, tool: &str, args: &[&str]| {
        run(Command::new(tool).args(["-n", name]).args(args))
    };
    let (a, b, m) = (names[0].as_str(), names[1].as_str(), names[2].as_str());
    for name in [a, b, m] {
        sh(name, "ip", &["link", "set", "lo", "up"])?;
    }
    run(Command::new("ip")
        .args(["netns", "exec", m, "sysctl", "-q", "-w"])
        .args(["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"]))?;
    let links = [
        (a, IFACE, "192.0.2.1/32", "2001:db8:a::1/128", "198.51.100.0/24", "2001:db8:b::/64"),
        (b, IFACE, "198.51.100.2/32", "2001:db8:b::2/128", "192.0.2.0/24", "2001:db8:a::/64"),
    ];
    for (ns, dev, v4, v6, to4, to6) in links {
        sh(ns, "ip", &["link", "set", dev, "up", "txqueuelen", TUN_QUEUE])?;
        sh(ns, "ip", &["addr", "add", v4, "dev", dev])?;
        sh(ns, "ip", &["-6", "addr", "add", v6, "dev", dev, "nodad"])?;
        sh(ns, "ip", &["route", "add", to4, "dev", dev])?;
        sh(ns, "ip", &["-6", "route", "add", to6, "dev", dev])?;
    }
    for (dev, v4, v6) in [
        (IFACE, "192.0.2.1/32", "2001:db8:a::1/128"),
        (IFACE_B, "198.51.100.2/32", "2001:db8:b::2/128"),
    ] {
        sh(m, "ip", &["link", "set", dev, "up", "txqueuelen", TUN_QUEUE])?;
        sh(m, "ip", &["route", "add", v4, "dev", dev])?;
        sh(m, "ip", &["-6", "route", "add", v6, "dev", dev])?;
    }
    // Last: under 1,280 bytes IPv6 leaves the device, which must have its addresses
    // and routes by then.
    if let Some(mtu) = cfg.mtu {
        let mtu = mtu.to_string();
        for (ns, dev) in [(a, IFACE), (b, IFACE), (m, IFACE), (m, IFACE_B)] {
            sh(ns, "ip", &["link", "set", dev, "mtu", &mtu])?;
        }
    }
    Ok(())
}

/// The four forwarding directions between the TUN ends `[A, B, M's to A, M's to B]`: A ⇄ M
/// with the configured delay, loss and impairments (counted in `stats`, `live`), M ⇄ B
/// plain wires (a TUN pair keeps packet order, which a veth pair fed from several CPUs does
/// not: reordering made spurious retransmits).
fn directions(
    [tun_a, tun_b, tun_ma, tun_mb]: [Arc<OwnedFd>; 4],
    cfg: &LabConfig,
    stats: &[Arc<PathStats>; 2],
    live: &[Arc<Live>; 2],
) -> [(&'static str, Direction); 4] {
    let shaped = |from: &Arc<OwnedFd>, to: &Arc<OwnedFd>, (delay, loss), seed, i: usize, impair| {
        let (stats, live) = (stats[i].clone(), live[i].clone());
        Direction { from: from.clone(), to: to.clone(), delay, loss, seed, stats, impair, live }
    };
    let plain = |from: &Arc<OwnedFd>, to: &Arc<OwnedFd>| Direction {
        from: from.clone(),
        to: to.clone(),
        delay: Duration::ZERO,
        loss: 0.0,
        seed: 0,
        stats: Arc::default(),
        impair: Impair::default(),
        live: Arc::default(),
    };
    [
        ("ab", shaped(&tun_a, &tun_ma, (cfg.delay_ab, cfg.loss_ab), cfg.seed, 0, cfg.impair_ab)),
        ("ba", shaped(&tun_ma, &tun_a, (cfg.delay_ba, cfg.loss_ba), !cfg.seed, 1, cfg.impair_ba)),
        ("mb", plain(&tun_mb, &tun_b)),
        ("bm", plain(&tun_b, &tun_mb)),
    ]
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
        let names = [format!("{base}-a"), format!("{base}-b"), format!("{base}-m")];
        // From here on, a failure drops `guard`, which deletes the namespaces made so far.
        let mut guard = NsGuard(Vec::new());
        for name in &names {
            run(Command::new("ip").args(["netns", "add", name]))?;
            guard.0.push(name.clone());
        }
        let open = |name: &str| -> io::Result<OwnedFd> {
            Ok(std::fs::File::open(format!("/run/netns/{name}"))?.into())
        };
        let ns = [open(&names[0])?, open(&names[1])?, open(&names[2])?];
        let tuns = [
            in_netns(&ns[0], || forwarder::open_tun(IFACE))?,
            in_netns(&ns[1], || forwarder::open_tun(IFACE))?,
            in_netns(&ns[2], || forwarder::open_tun(IFACE))?,
            in_netns(&ns[2], || forwarder::open_tun(IFACE_B))?,
        ];
        addresses(&names, &cfg)?;
        bottlenecks(&names[2], &cfg)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stats = [Arc::new(PathStats::default()), Arc::new(PathStats::default())];
        let live = [Arc::new(Live::default()), Arc::new(Live::default())];
        let mut threads = Vec::new();
        for (name, d) in directions(tuns.map(Arc::new), &cfg, &stats, &live) {
            let stop = stop.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("lab-fwd-{name}"))
                    .spawn(move || forwarder::run(&d, &stop))?,
            );
        }
        guard.0.clear();
        let lab = Lab { names, ns, stop, threads, stats, live, cfg };
        lab.warm_up()?;
        Ok(lab)
    }

    /// Checks the path both ways and in both families before any test traffic, and so
    /// resolves the neighbours on the veth link: a connection to a closed port on B must be
    /// refused (SYN out, RST back). Without this the first SYN of a test could wait on
    /// neighbour resolution and start the flow with a timeout.
    fn warm_up(&self) -> io::Result<()> {
        let v6_too = self.cfg.mtu.is_none_or(|m| m >= 1280);
        for v6 in [false, true].into_iter().filter(|&v6| !v6 || v6_too) {
            let to = SocketAddr::new(addr(Side::B, v6), 9);
            let timeout = self.cfg.delay_ab + self.cfg.delay_ba + Duration::from_secs(3);
            let r = in_netns(self.ns(Side::A), || {
                Ok(std::net::TcpStream::connect_timeout(&to, timeout))
            })?;
            match r {
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
                other => {
                    return Err(io::Error::other(format!(
                        "the lab path does not work: connecting to {to} gave {other:?}"
                    )));
                }
            }
        }
        Ok(())
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

    /// The most any packet, either way, left the emulator after its due time since the last
    /// call (see [`PathStats::late_max_us`]).
    pub fn take_late_max(&self) -> Duration {
        self.stats.iter().map(|s| s.take_late_max()).max().unwrap_or_default()
    }

    /// Packets forwarded and dropped, A → B.
    pub fn stats_ab(&self) -> &PathStats {
        &self.stats[0]
    }

    /// Packets forwarded and dropped, B → A.
    pub fn stats_ba(&self) -> &PathStats {
        &self.stats[1]
    }

    /// What a test arms on the path A → B while traffic flows ([`Live`]).
    pub fn live_ab(&self) -> &Live {
        &self.live[0]
    }

    /// The same, B → A.
    pub fn live_ba(&self) -> &Live {
        &self.live[1]
    }

    /// The kernel's own TCP counters in `side`'s namespace, as `nstat -az` prints them
    /// (`TcpExtTCPTimeouts`, `TcpExtTCPDSACKRecv`, …): the ground truth that a lab case was
    /// built. A namespace's counters start at zero, so they count the lab's traffic alone.
    ///
    /// # Errors
    /// `nstat` is missing or failed.
    pub fn nstat(&self, side: Side) -> io::Result<std::collections::BTreeMap<String, u64>> {
        // -s: leave nstat's history file alone; -a: absolute values; -z: zeros too.
        let out = self.command(side, "nstat").args(["-saz"]).output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "nstat in {}: {}",
                self.ns_name(side),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                Some((w.next()?.to_string(), w.next()?.parse().ok()?))
            })
            .collect())
    }

    /// Packets the bottleneck queues dropped so far (tbf's counters in the path namespace),
    /// A → B and B → A.
    ///
    /// # Errors
    /// `tc` failed.
    pub fn queue_drops(&self) -> io::Result<(u64, u64)> {
        let drops = |dev: &str| -> io::Result<u64> {
            let out = Command::new("tc")
                .args(["-n", &self.names[2], "-s", "qdisc", "show", "dev", dev])
                .output()?;
            let text = String::from_utf8_lossy(&out.stdout);
            // "Sent 123 bytes 4 pkt (dropped 5, overlimits 6 requeues 0)", per qdisc.
            Ok(text
                .split("dropped ")
                .skip(1)
                .filter_map(|t| t.split(',').next()?.trim().parse::<u64>().ok())
                .sum())
        };
        Ok((drops(IFACE_B)?, drops(IFACE)?))
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

/// `side`'s IPv4 address (documentation ranges: TEST-NET-1 for A, TEST-NET-2 for B).
pub fn addr_v4(side: Side) -> Ipv4Addr {
    match side {
        Side::A => Ipv4Addr::new(192, 0, 2, 1),
        Side::B => Ipv4Addr::new(198, 51, 100, 2),
    }
}

/// `side`'s IPv6 address (2001:db8::/32).
pub fn addr_v6(side: Side) -> Ipv6Addr {
    match side {
        Side::A => Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 1),
        Side::B => Ipv6Addr::new(0x2001, 0xdb8, 0xb, 0, 0, 0, 0, 2),
    }
}

/// `side`'s address in the family asked for.
pub fn addr(side: Side, v6: bool) -> IpAddr {
    if v6 { IpAddr::V6(addr_v6(side)) } else { IpAddr::V4(addr_v4(side)) }
}

struct NsGuard(Vec<String>);

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
        drop(NsGuard(self.names.to_vec()));
    }
}
