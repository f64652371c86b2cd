//! The lab's path emulator: moves IP packets from one TUN device to another after a fixed
//! delay, dropping each with a given probability, and makes on purpose what this kernel's
//! qdiscs cannot (it has no netem, codel or red): reordering, a user-space bottleneck that
//! marks ECN CE on packets that queued too long, and, armed at run time, a blackout, a
//! stall (a delay spike) and dropped SYNs ([`Impair`], [`Live`]).
//!
//! Packets keep their order unless reordering is asked for. Release times are kept to the
//! microsecond with `ppoll`. The loss and reordering draws come from a seeded SplitMix64
//! generator, so a run can be repeated exactly; a five-line generator is all a Bernoulli
//! draw needs.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Counters of one direction.
#[derive(Debug, Default)]
pub struct PathStats {
    /// Packets delivered.
    pub forwarded: AtomicU64,
    /// Packets dropped by the loss setting.
    pub dropped: AtomicU64,
    /// Packets the far TUN device refused (its queue was full).
    pub refused: AtomicU64,
    /// Packets held back to arrive after later ones ([`Impair::reorder`]).
    pub reordered: AtomicU64,
    /// Packets marked CE by the user-space bottleneck ([`Impair::ce_after`]).
    pub ce_marked: AtomicU64,
    /// Packets dropped by the user-space bottleneck's full queue.
    pub queue_dropped: AtomicU64,
    /// Packets dropped by a blackout ([`Live::blackout`]).
    pub blacked_out: AtomicU64,
    /// SYNs dropped ([`Live::drop_syns`]).
    pub syns_dropped: AtomicU64,
    /// The most a packet left after its due time, or the thread woke after its timeout, µs,
    /// since [`PathStats::take_late_max`].
    /// The thread is an ordinary one: on a busy machine it can be kept off the CPU, and the
    /// path is then slower than configured. Tests use this to tell a slow emulator from a
    /// wrong monitor.
    pub late_max_us: AtomicU64,
}

impl PathStats {
    /// The most a packet left late since the last call.
    pub fn take_late_max(&self) -> Duration {
        Duration::from_micros(self.late_max_us.swap(0, Ordering::Relaxed))
    }
}

/// What a direction does to packets besides delay and loss, fixed for the lab's life.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Impair {
    /// Probability that a packet is held back [`Impair::reorder_by`] longer than the rest,
    /// so that packets sent after it arrive first.
    pub reorder: f64,
    /// How much longer a reordered packet takes.
    pub reorder_by: Duration,
    /// A bottleneck in the emulator itself, bits/s: packets leave one at a time at this
    /// rate, so the time each waited is known (tbf's queue is the kernel's and cannot mark).
    pub rate_bps: Option<u64>,
    /// With `rate_bps`: the most the bottleneck's queue holds, bytes; a packet that would
    /// wait longer than the queue takes to drain is dropped.
    pub queue_bytes: u64,
    /// With `rate_bps`: a packet of an ECN-capable transport (ECT(0) or ECT(1)) that waited
    /// longer than this is marked CE, as a step-marking AQM does (DCTCP's K, codel's target).
    pub ce_after: Option<Duration>,
}

/// What a test switches on while traffic flows, shared by a direction's thread. Times are
/// ns since [`Live::epoch`]; 0 means off.
#[derive(Debug)]
pub struct Live {
    /// The clock the deadlines count from.
    pub epoch: Instant,
    blackout_until: AtomicU64,
    stall_until: AtomicU64,
    drop_syns_until: AtomicU64,
}

impl Default for Live {
    fn default() -> Self {
        Live {
            epoch: Instant::now(),
            blackout_until: AtomicU64::new(0),
            stall_until: AtomicU64::new(0),
            drop_syns_until: AtomicU64::new(0),
        }
    }
}

impl Live {
    fn deadline(&self, d: Duration) -> u64 {
        (self.epoch.elapsed() + d).as_nanos() as u64
    }
    fn active(&self, until: &AtomicU64, now: Instant) -> bool {
        (now.duration_since(self.epoch).as_nanos() as u64) < until.load(Ordering::Relaxed)
    }
    /// Drops every packet for `d` from now: a link that goes dark, so the sender's
    /// retransmission timer fires, backing off, until it comes back.
    pub fn blackout(&self, d: Duration) {
        self.blackout_until.store(self.deadline(d), Ordering::Relaxed);
    }
    /// Releases no packet for `d` from now, then all of them in order: a delay spike of up
    /// to `d` with no loss (a route change, a stalled link layer). Longer than the RTO, it
    /// makes the sender time out and retransmit what was only late: spurious retransmits.
    pub fn stall(&self, d: Duration) {
        self.stall_until.store(self.deadline(d), Ordering::Relaxed);
    }
    /// Drops every SYN (a TCP segment with SYN set and ACK clear) for `d` from now,
    /// `Duration::MAX` for good: a firewall, or a listener's host that is down.
    pub fn drop_syns(&self, d: Duration) {
        let until = if d == Duration::MAX { u64::MAX } else { self.deadline(d) };
        self.drop_syns_until.store(until, Ordering::Relaxed);
    }
}

/// One direction of the path.
pub struct Direction {
    /// Read packets here.
    pub from: Arc<OwnedFd>,
    /// Write them here.
    pub to: Arc<OwnedFd>,
    /// One-way delay.
    pub delay: Duration,
    /// Drop probability.
    pub loss: f64,
    /// Loss pattern seed.
    pub seed: u64,
    /// Counters.
    pub stats: Arc<PathStats>,
    /// Reordering and the marking bottleneck.
    pub impair: Impair,
    /// What a test arms while traffic flows.
    pub live: Arc<Live>,
}

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// Largest packet a TUN device hands over (64 KiB IP datagram).
const MAX_PACKET: usize = 65536;

/// Creates TUN device `name` (IP packets, no packet-info header) in the calling thread's
/// network namespace, non-blocking.
///
/// # Errors
/// No /dev/net/tun, or no permission.
pub fn open_tun(name: &str) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated path; open returns a new descriptor or -1.
    let fd = unsafe {
        libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC)
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is owned by nobody else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = IfReq { name: [0; libc::IFNAMSIZ], flags: 0, _pad: [0; 22] };
    let n = name.len().min(libc::IFNAMSIZ - 1);
    req.name[..n].copy_from_slice(&name.as_bytes()[..n]);
    req.flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes a struct ifreq, which IfReq lays out.
    if unsafe { libc::ioctl(owned.as_raw_fd(), TUNSETIFF, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(owned)
}

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A packet waiting for its release time; the heap orders by time, then arrival.
struct Pending {
    due: Instant,
    seq: u64,
    pkt: Vec<u8>,
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(o.due, o.seq))
    }
}

/// The IP version and where the TCP header starts, for a TCP packet (IPv6 without
/// extension headers, which the lab never sends).
fn tcp_offset(p: &[u8]) -> Option<usize> {
    match p.first()? >> 4 {
        4 if p.len() >= 20 && p[9] == 6 => Some(usize::from(p[0] & 0x0f) * 4),
        6 if p.len() >= 40 && p[6] == 6 => Some(40),
        _ => None,
    }
}

/// Whether `p` is a SYN (SYN set, ACK clear): a connection's first segment.
pub fn is_syn(p: &[u8]) -> bool {
    tcp_offset(p).and_then(|o| p.get(o + 13)).is_some_and(|f| f & 0x12 == 0x02)
}

/// Marks `p` CE if it is ECN-capable (ECT(0) or ECT(1)); true if it did. An IPv4 header's
/// checksum is computed again.
pub fn mark_ce(p: &mut [u8]) -> bool {
    match p.first().map(|b| b >> 4) {
        Some(4) if p.len() >= 20 => {
            if matches!(p[1] & 3, 0 | 3) {
                return false;
            }
            p[1] |= 3;
            let ihl = usize::from(p[0] & 0x0f) * 4;
            p[10] = 0;
            p[11] = 0;
            let mut sum: u32 = p[..ihl.min(p.len())]
                .chunks(2)
                .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
                .sum();
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            p[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
            true
        }
        // Traffic class: the low nibble of byte 0 and the high one of byte 1; ECN is its
        // low two bits, bits 4–5 of byte 1.
        Some(6) if p.len() >= 40 => {
            if matches!((p[1] >> 4) & 3, 0 | 3) {
                return false;
            }
            p[1] |= 0x30;
            true
        }
        _ => false,
    }
}

/// The user-space bottleneck's state: when it is next free.
struct Bottleneck {
    next_free: Option<Instant>,
}

impl Bottleneck {
    /// When `pkt`, arriving `now`, has left the bottleneck, and how long it waited there;
    /// `None` when the queue is full.
    fn admit(
        &mut self,
        i: &Impair,
        rate: u64,
        now: Instant,
        len: usize,
    ) -> Option<(Instant, Duration)> {
        let start = self.next_free.map_or(now, |t| t.max(now));
        let waited = start - now;
        let capacity = Duration::from_secs_f64(i.queue_bytes as f64 * 8.0 / rate as f64);
        if waited > capacity {
            return None;
        }
        let done = start + Duration::from_secs_f64(len as f64 * 8.0 / rate as f64);
        self.next_free = Some(done);
        Some((done, waited))
    }
}

/// The counter of why packet `buf` is dropped at `now`, if it is: a blackout, a SYN while
/// SYNs are dropped, or random loss.
fn dropped<'a>(d: &'a Direction, rng: &mut Rng, buf: &[u8], now: Instant) -> Option<&'a AtomicU64> {
    let live = &d.live;
    if live.active(&live.blackout_until, now) {
        Some(&d.stats.blacked_out)
    } else if live.active(&live.drop_syns_until, now) && is_syn(buf) {
        Some(&d.stats.syns_dropped)
    } else if d.loss > 0.0 && rng.next_f64() < d.loss {
        Some(&d.stats.dropped)
    } else {
        None
    }
}

/// Writes the packets due by `now` out to `wfd`, their buffers back to `free`.
fn release_due(
    queue: &mut BinaryHeap<Reverse<Pending>>,
    free: &mut Vec<Vec<u8>>,
    wfd: std::os::fd::RawFd,
    stats: &PathStats,
    now: Instant,
) {
    while queue.peek().is_some_and(|p| p.0.due <= now) {
        let Reverse(p) = queue.pop().expect("peeked");
        let late = now.duration_since(p.due).as_micros() as u64;
        stats.late_max_us.fetch_max(late, Ordering::Relaxed);
        // SAFETY: writing an initialised buffer to an open descriptor.
        let r = unsafe { libc::write(wfd, p.pkt.as_ptr().cast(), p.pkt.len()) };
        if r < 0 {
            stats.refused.fetch_add(1, Ordering::Relaxed);
        } else {
            stats.forwarded.fetch_add(1, Ordering::Relaxed);
        }
        free.push(p.pkt);
    }
}

/// Forwards until `stop` is set.
pub fn run(d: &Direction, stop: &AtomicBool) {
    let mut rng = Rng(d.seed);
    let mut queue: BinaryHeap<Reverse<Pending>> = BinaryHeap::new();
    let mut free: Vec<Vec<u8>> = Vec::new();
    let mut seq = 0u64;
    let mut neck = Bottleneck { next_free: None };
    let (rfd, wfd) = (d.from.as_raw_fd(), d.to.as_raw_fd());
    let live = &d.live;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        // Release what is due, unless the path is stalled.
        let stalled = live.active(&live.stall_until, now);
        if !stalled {
            release_due(&mut queue, &mut free, wfd, &d.stats, now);
        }
        // Sleep until the next release, a packet, or 5 ms (to notice `stop` and the end of
        // a stall).
        let tick = Duration::from_millis(if stalled { 1 } else { 50 });
        let wait = queue.peek().map_or(tick, |p| p.0.due.saturating_duration_since(now)).min(tick);
        let ts = libc::timespec {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(wait.subsec_nanos() as i32),
        };
        let mut pfd = libc::pollfd { fd: rfd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, a valid timespec, no signal mask.
        let n = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        if n <= 0 {
            // Woken by the timeout: how late shows the thread was kept waiting even when
            // no packet was due (a packet then waits unread in the device, unmeasured).
            let late = now.elapsed().saturating_sub(wait).as_micros() as u64;
            d.stats.late_max_us.fetch_max(late, Ordering::Relaxed);
            continue;
        }
        loop {
            let mut buf = free.pop().unwrap_or_else(|| Vec::with_capacity(MAX_PACKET));
            buf.clear();
            let spare = buf.spare_capacity_mut();
            // SAFETY: reading into the vector's spare capacity, of the given length.
            let r = unsafe { libc::read(rfd, spare.as_mut_ptr().cast(), spare.len()) };
            if r <= 0 {
                free.push(buf);
                break;
            }
            // SAFETY: read(2) initialised the first r bytes.
            unsafe { buf.set_len(r as usize) };
            let now = Instant::now();
            if let Some(counter) = dropped(d, &mut rng, &buf, now) {
                counter.fetch_add(1, Ordering::Relaxed);
                free.push(buf);
                continue;
            }
            let mut due = now + d.delay;
            if let Some(rate) = d.impair.rate_bps {
                let Some((left, waited)) = neck.admit(&d.impair, rate, now, buf.len()) else {
                    d.stats.queue_dropped.fetch_add(1, Ordering::Relaxed);
                    free.push(buf);
                    continue;
                };
                if d.impair.ce_after.is_some_and(|k| waited > k) && mark_ce(&mut buf) {
                    d.stats.ce_marked.fetch_add(1, Ordering::Relaxed);
                }
                due = left + d.delay;
            }
            if d.impair.reorder > 0.0 && rng.next_f64() < d.impair.reorder {
                d.stats.reordered.fetch_add(1, Ordering::Relaxed);
                due += d.impair.reorder_by;
            }
            seq += 1;
            queue.push(Reverse(Pending { due, seq, pkt: buf }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loss_draw_has_the_asked_rate() {
        let mut r = Rng(7);
        let n = 200_000;
        let hits = (0..n).filter(|_| r.next_f64() < 0.05).count();
        // Binomial sd is sqrt(n p (1-p)) = 97; allow 5 sd.
        assert!((hits as i64 - 10_000).abs() < 500, "{hits}");
    }

    /// An IPv4 TCP packet: a 20-byte header with `tos`, then a TCP header with `flags`.
    fn v4(tos: u8, flags: u8) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[1] = tos;
        p[9] = 6;
        p[33] = flags;
        p
    }

    fn v4_checksum_ok(p: &[u8]) -> bool {
        let mut sum: u32 =
            p[..20].chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum == 0xffff
    }

    #[test]
    fn only_ect_packets_are_marked_and_the_header_stays_valid() {
        let mut ect0 = v4(0x02, 0x10);
        assert!(mark_ce(&mut ect0));
        assert_eq!(ect0[1] & 3, 3);
        assert!(v4_checksum_ok(&ect0));
        let mut not_ect = v4(0x00, 0x10);
        assert!(!mark_ce(&mut not_ect));
        assert_eq!(not_ect[1], 0);
        let mut v6 = vec![0u8; 60];
        v6[0] = 0x60;
        v6[1] = 0x10; // traffic class 0x01: ECT(1)
        v6[6] = 6;
        assert!(mark_ce(&mut v6));
        assert_eq!((v6[1] >> 4) & 3, 3);
    }

    #[test]
    fn a_syn_is_told_from_a_syn_ack_and_data() {
        assert!(is_syn(&v4(0, 0x02)));
        assert!(!is_syn(&v4(0, 0x12)), "SYN-ACK");
        assert!(!is_syn(&v4(0, 0x18)), "data");
        let mut v6 = vec![0u8; 60];
        v6[0] = 0x60;
        v6[6] = 6;
        v6[53] = 0x02;
        assert!(is_syn(&v6));
    }

    #[test]
    fn the_bottleneck_spaces_packets_at_its_rate_and_drops_past_its_queue() {
        let i = Impair { rate_bps: Some(8_000_000), queue_bytes: 3_000, ..Impair::default() };
        let mut b = Bottleneck { next_free: None };
        let t = Instant::now();
        // 1,000 bytes at 8 Mbit/s: 1 ms each.
        let (a, w) = b.admit(&i, 8_000_000, t, 1000).unwrap();
        assert_eq!((a - t, w), (Duration::from_millis(1), Duration::ZERO));
        let (c, w) = b.admit(&i, 8_000_000, t, 1000).unwrap();
        assert_eq!((c - t, w), (Duration::from_millis(2), Duration::from_millis(1)));
        b.admit(&i, 8_000_000, t, 1000).unwrap();
        b.admit(&i, 8_000_000, t, 1000).unwrap();
        assert!(b.admit(&i, 8_000_000, t, 1000).is_none(), "4 ms of wait holds more than 3 KB");
    }
}
