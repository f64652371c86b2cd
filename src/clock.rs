//! The one clock the pipeline reads: CLOCK_MONOTONIC in nanoseconds, the same base `ss`,
//! cgmon (`TstampStartNs`) and the kernel's own timers use. Only the sampler calls it.

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

#[cfg(test)]
mod tests {
    #[test]
    fn monotonic_never_goes_back() {
        let a = super::monotonic_ns();
        let b = super::monotonic_ns();
        assert!(a > 0 && b >= a);
    }
}
