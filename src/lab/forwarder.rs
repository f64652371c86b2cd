//! The lab's path emulator: moves IP packets from one TUN device to another after a fixed
//! delay, dropping each with a given probability.
//!
//! Packets keep their order (a fixed delay cannot reorder them). Release times are kept to
//! the microsecond with `ppoll`. The loss pattern comes from a seeded SplitMix64 generator,
//! so a run can be repeated exactly; a five-line generator is all a Bernoulli draw needs.

use std::collections::VecDeque;
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

/// Forwards until `stop` is set.
pub fn run(d: &Direction, stop: &AtomicBool) {
    let mut rng = Rng(d.seed);
    let mut queue: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut free: Vec<Vec<u8>> = Vec::new();
    let (rfd, wfd) = (d.from.as_raw_fd(), d.to.as_raw_fd());
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        // Release what is due.
        while queue.front().is_some_and(|(t, _)| *t <= now) {
            let (due, pkt) = queue.pop_front().expect("front exists");
            let late = now.duration_since(due).as_micros() as u64;
            d.stats.late_max_us.fetch_max(late, Ordering::Relaxed);
            // SAFETY: writing an initialised buffer to an open descriptor.
            let r = unsafe { libc::write(wfd, pkt.as_ptr().cast(), pkt.len()) };
            if r < 0 {
                d.stats.refused.fetch_add(1, Ordering::Relaxed);
            } else {
                d.stats.forwarded.fetch_add(1, Ordering::Relaxed);
            }
            free.push(pkt);
        }
        // Sleep until the next release, a packet, or 50 ms (to notice `stop`).
        let wait = queue
            .front()
            .map_or(Duration::from_millis(50), |(t, _)| t.saturating_duration_since(now))
            .min(Duration::from_millis(50));
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
            if d.loss > 0.0 && rng.next_f64() < d.loss {
                d.stats.dropped.fetch_add(1, Ordering::Relaxed);
                free.push(buf);
                continue;
            }
            queue.push_back((Instant::now() + d.delay, buf));
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
}
