//! The standard `process_*` metrics every Prometheus client library exports (CPU seconds,
//! memory, file descriptors, start time), which dashboards and alerts on an exporter's own
//! cost and restarts expect. prometheus-client has no process collector, and the crates
//! that read /proc whole (procfs) are far more than six numbers need, so they are read here.

/// The process's figures, as Prometheus names them.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessStats {
    /// User and system CPU time, seconds (`process_cpu_seconds_total`).
    pub cpu_seconds: f64,
    /// Virtual memory size, bytes.
    pub virtual_bytes: u64,
    /// Resident set size, bytes.
    pub resident_bytes: u64,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit on open file descriptors (`RLIMIT_NOFILE`).
    pub max_fds: u64,
}

/// The figures of `/proc/self/stat` that matter here, and their units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    /// utime + stime, clock ticks.
    cpu_ticks: u64,
    /// Start, clock ticks after boot.
    start_ticks: u64,
    vsize: u64,
    /// Pages.
    rss: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) is in parentheses and may hold
/// spaces and parentheses itself, so the fields are counted from the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    // Field 3 (state) is at index 0 of `f`: proc_pid_stat(5) numbers from 1.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |field: usize| f.get(field - 3)?.parse::<u64>().ok();
    Some(Stat {
        cpu_ticks: n(14)?.checked_add(n(15)?)?,
        start_ticks: n(22)?,
        vsize: n(23)?,
        rss: n(24)?,
    })
}

/// `btime` of `/proc/stat`: boot time, seconds since the epoch.
fn parse_btime(text: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())
}

/// Boot time, seconds since the epoch: CLOCK_REALTIME − CLOCK_BOOTTIME (no /proc needed).
fn boot_time_from_clocks() -> Option<f64> {
    let read = |clock| {
        let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `t` is a valid timespec for the call to fill.
        (unsafe { libc::clock_gettime(clock, &mut t) } == 0)
            .then(|| t.tv_sec as f64 + t.tv_nsec as f64 / 1e9)
    };
    Some(read(libc::CLOCK_REALTIME)? - read(libc::CLOCK_BOOTTIME)?)
}

/// Reads the process's figures; `None` where /proc is not mounted.
pub fn read() -> Option<ProcessStats> {
    let st = parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    // SAFETY: sysconf has no memory-safety preconditions.
    let (tck, page) =
        unsafe { (libc::sysconf(libc::_SC_CLK_TCK), libc::sysconf(libc::_SC_PAGESIZE)) };
    let (tck, page) = (u64::try_from(tck).ok().filter(|&t| t > 0)?, u64::try_from(page).ok()?);
    // Boot time plus ticks after boot. btime is read once: it moves only when the wall
    // clock is stepped, and /proc/stat (a line per CPU and per interrupt) is the costliest
    // file here. The directory read counts its own descriptor, as other clients' do.
    // Under systemd's ProcSubset=pid (the shipped unit), /proc/stat is hidden: the boot
    // time then comes from the clocks, wall time less time since boot.
    static BTIME: std::sync::OnceLock<Option<f64>> = std::sync::OnceLock::new();
    let btime = (*BTIME.get_or_init(|| {
        std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|t| parse_btime(&t))
            .map(|b| b as f64)
            .or_else(boot_time_from_clocks)
    }))?;
    let open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a valid rlimit for the call to fill.
    let max_fds = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        0
    };
    Some(ProcessStats {
        cpu_seconds: st.cpu_ticks as f64 / tck as f64,
        virtual_bytes: st.vsize,
        resident_bytes: st.rss.saturating_mul(page),
        start_time_seconds: btime + st.start_ticks as f64 / tck as f64,
        open_fds,
        max_fds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clocks_give_the_boot_time_that_proc_stat_gives() {
        let Some(proc_btime) =
            std::fs::read_to_string("/proc/stat").ok().and_then(|t| parse_btime(&t))
        else {
            return; // no /proc/stat to compare with
        };
        let clocks = boot_time_from_clocks().unwrap();
        // btime is whole seconds; the clocks drift apart slowly while the host runs.
        assert!((clocks - proc_btime as f64).abs() < 5.0, "{clocks} vs {proc_btime}");
    }

    #[test]
    fn fields_are_counted_from_the_last_parenthesis() {
        // A command name with a space and a ") (" in it, as a process may name itself.
        let line = "6734 (a) (b c) R 6728 6728 1532 0 -1 4194304 97 0 0 0 150 25 0 0 20 0 1 0 \
                    172693 3133440 382 18446744073709551615 94680833425408 0\n";
        let st = parse_stat(line).unwrap();
        assert_eq!(st, Stat { cpu_ticks: 175, start_ticks: 172_693, vsize: 3_133_440, rss: 382 });
        assert_eq!(parse_stat("6734 (x R 1 2"), None, "no closing parenthesis");
        assert_eq!(parse_stat("6734 (x) R 1 2 3"), None, "cut short");
        assert_eq!(parse_btime("cpu  1 2 3\nbtime 1795454358\nprocesses 9\n"), Some(1_795_454_358));
        assert_eq!(parse_btime("cpu  1 2 3\n"), None);
    }

    #[test]
    fn this_process_reads_sensibly() {
        use std::time::{Duration, SystemTime, UNIX_EPOCH};
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_millis(30) {} // some CPU time to show
        let p = read().expect("/proc is mounted here");
        assert!(p.cpu_seconds > 0.0, "{p:?}");
        assert!(p.resident_bytes > 0 && p.virtual_bytes >= p.resident_bytes, "{p:?}");
        assert!(p.open_fds >= 3 && p.max_fds >= p.open_fds, "{p:?}");
        // Started before now, and not before this test binary could have been built.
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(p.start_time_seconds <= now + 1.0 && p.start_time_seconds > now - 3600.0, "{p:?}");
    }
}
