//! What benches read of a process in /proc: its CPU time, its threads' CPU time, its
//! memory. (Shared by the benches that run the monitor as a child, through `#[path]`.)

#![allow(dead_code)] // each bench uses part of it

/// Clock ticks a second.
fn ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as f64 }
}

/// User + system seconds from a `stat` file's text.
fn stat_cpu_s(stat: &str) -> Option<f64> {
    let f: Vec<&str> = stat[stat.rfind(')')? + 2..].split_whitespace().collect();
    Some((f[11].parse::<f64>().ok()? + f[12].parse::<f64>().ok()?) / ticks())
}

/// CPU seconds (user + system) of a process, from /proc/PID/stat.
pub fn proc_cpu_s(pid: u32) -> Option<f64> {
    stat_cpu_s(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// CPU seconds of a process's threads named `name` (as /proc/PID/task/TID/comm says).
pub fn thread_cpu_s(pid: u32, name: &str) -> f64 {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0.0 };
    rd.flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
        .filter_map(|t| stat_cpu_s(&std::fs::read_to_string(t.path().join("stat")).ok()?))
        .sum()
}

/// A memory figure of a process from /proc/PID/status (`VmRSS:` now, `VmHWM:` the peak),
/// MiB.
pub fn status_mib(pid: u32, key: &str) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}
