//! The one clock the pipeline reads: CLOCK_MONOTONIC in nanoseconds, the same base `ss`,
//! cgmon (`TstampStartNs`) and the kernel's own timers use. Sample times come from the sampler
//! alone; the poll task reads it to end a namespace's flows, and the program once for the
//! wall-clock offset of records.
//!
//! Also the CPU clock of the calling thread, with which the poll task and the walker measure
//! what their own work costs ([`CpuTimed`]): the CPU budget (`budget`) paces them on measured
//! cost, not on a model of it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// CLOCK_MONOTONIC now, in ns.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux, so
    // the call cannot fail (it returns EINVAL only for an unknown clock id).
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0);
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC in ns, to turn sample times into wall-clock times. Read
/// once at startup: later NTP steps then move no record's times relative to one another.
pub fn realtime_offset_ns() -> i128 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: as in monotonic_ns; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    let real = i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec);
    real - i128::from(monotonic_ns())
}

/// CPU time the calling thread has used, in ns (user and system: the kernel's work for a
/// sock_diag request is done in the requesting thread's system calls).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: as in monotonic_ns; CLOCK_THREAD_CPUTIME_ID always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    debug_assert_eq!(rc, 0);
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time the whole process has used, in ns: every thread's, the ended ones' included,
/// user and system. What `top` shows, and what the budget covers (`budget`).
pub fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: as in monotonic_ns; CLOCK_PROCESS_CPUTIME_ID always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    debug_assert_eq!(rc, 0);
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// The CPU clock of one thread, readable from any thread of the process while it lives:
/// the budget reads the clocks of the threads whose whole work is pushed at us (the writer,
/// the sinks, the HTTP server) to leave their CPU out of what it charges.
#[derive(Debug, Clone, Copy)]
pub struct ThreadClock {
    id: libc::clockid_t,
    /// The last reading: once the thread has ended its clock reads no more, and its CPU
    /// stays what it was.
    last_ns: u64,
}

impl ThreadClock {
    /// The calling thread's clock; `None` if the kernel gives none (it always does on
    /// Linux).
    pub fn current() -> Option<Self> {
        let mut id: libc::clockid_t = 0;
        // SAFETY: pthread_self() is the calling thread, alive; `id` is a valid out-pointer.
        let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut id) };
        (rc == 0).then_some(Self { id, last_ns: 0 })
    }

    /// Whether `other` is the same thread's clock.
    pub fn same(&self, other: &ThreadClock) -> bool {
        self.id == other.id
    }

    /// The thread's CPU time now, in ns; its last reading once it has ended (its clock is
    /// gone then; take the reading before it ends, as `budget`'s `PushedThread` does).
    pub fn read(&mut self) -> u64 {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid, writable timespec; a clock id of a thread that has ended
        // makes the call fail (EINVAL), which is handled.
        let rc = unsafe { libc::clock_gettime(self.id, &mut ts) };
        if rc == 0 {
            self.last_ns = (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64;
        }
        self.last_ns
    }
}

/// A future that adds the CPU time spent polling it to a counter.
///
/// Each poll runs on one thread, start to end, so the thread's CPU clock read before and
/// after it measures that poll exactly, even when a multi-threaded runtime moves the task
/// between threads across its awaits; the time it spends waiting costs nothing and counts
/// nothing.
pub struct CpuTimed<'a, F> {
    inner: F,
    spent_ns: &'a mut u64,
}

impl<'a, F: Future + Unpin> CpuTimed<'a, F> {
    /// Times `inner`, adding to `spent_ns`.
    pub fn new(inner: F, spent_ns: &'a mut u64) -> Self {
        Self { inner, spent_ns }
    }
}

impl<F: Future + Unpin> Future for CpuTimed<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let t0 = thread_cpu_ns();
        let r = Pin::new(&mut self.inner).poll(cx);
        *self.spent_ns += thread_cpu_ns().saturating_sub(t0);
        r
    }
}

/// Runs `fut` and returns its output with the CPU time its polls took, in ns. Pinned on
/// the stack: the poll loop times a wait every turn, and a box each time was an allocation
/// on the sampling path.
pub async fn cpu_timed<F: Future>(fut: F) -> (F::Output, u64) {
    let mut spent = 0;
    let out = CpuTimed::new(std::pin::pin!(fut), &mut spent).await;
    (out, spent)
}

/// Runs `f` and returns its result with the CPU it took on this thread, in ns: the
/// synchronous twin of [`cpu_timed`].
pub fn cpu_timed_sync<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let t0 = thread_cpu_ns();
    let r = f();
    (r, thread_cpu_ns().saturating_sub(t0))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_timed_future_counts_its_work_and_not_its_waits() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let ((), spent) = rt.block_on(super::cpu_timed(async {
            let t = super::thread_cpu_ns();
            while super::thread_cpu_ns() - t < 30_000_000 {
                std::hint::spin_loop();
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }));
        // 30 ms of CPU spinning, and none of the 100 ms asleep.
        assert!((30_000_000..90_000_000).contains(&spent), "{spent} ns");
    }

    #[test]
    fn another_threads_clock_reads_its_cpu() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            let t = super::thread_cpu_ns();
            while super::thread_cpu_ns() - t < 20_000_000 {
                std::hint::spin_loop();
            }
            tx.send((super::ThreadClock::current().unwrap(), super::thread_cpu_ns())).unwrap();
            go_rx.recv().unwrap(); // asleep while read
        });
        let (mut c, own) = rx.recv().unwrap();
        let read = c.read();
        // Its own reading, and what it spent sending: a little more at most.
        assert!((own..own + 5_000_000).contains(&read), "{read} ns read, {own} its own");
        go_tx.send(()).unwrap();
        h.join().unwrap();
        assert!(super::process_cpu_ns() >= read);
    }

    #[test]
    fn monotonic_never_goes_back() {
        let a = super::monotonic_ns();
        let b = super::monotonic_ns();
        assert!(a > 0 && b >= a);
    }
}
