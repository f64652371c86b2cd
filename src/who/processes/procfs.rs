//! Reading processes: which ones a cgroup holds, which sockets a process holds, and what
//! it is called. Behind a trait so that the resolver is tested without /proc.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Instant;

use rustc_hash::FxHashMap;

use crate::who::services::{REWALK_EVERY, cgroup2_root, walk_tree};

/// What the resolver reads about processes.
pub trait Procfs {
    /// The pids in cgroup `id`, or None when it is unknown (0, or not in the tree): then
    /// every process is walked.
    fn cgroup_pids(&mut self, id: u64) -> Option<Vec<u32>>;
    /// Every pid.
    fn all_pids(&mut self) -> Vec<u32>;
    /// The descriptor numbers `pid` holds (None when it is gone or not readable): a
    /// directory listing, about a tenth of what reading each link costs.
    fn fds(&mut self, pid: u32) -> Option<Vec<u32>>;
    /// The inode of the socket descriptor `fd` of `pid` names; None when it is not a
    /// socket or is gone.
    fn fd_socket(&mut self, pid: u32, fd: u32) -> Option<u64>;
    /// Its task name (`/proc/PID/comm`).
    fn comm(&mut self, pid: u32) -> Option<String>;
    /// Its command line, NUL-separated.
    fn cmdline(&mut self, pid: u32) -> Option<Vec<u8>>;
}

/// /proc and the cgroup2 tree.
#[derive(Debug)]
pub struct RealProcfs {
    root: Option<PathBuf>,
    /// cgroup id (directory inode) → its directory.
    dirs: FxHashMap<u64, PathBuf>,
    walked: Option<Instant>,
}

impl RealProcfs {
    /// Under this process's cgroup2 mount.
    pub fn new() -> Self {
        RealProcfs { root: cgroup2_root(), dirs: FxHashMap::default(), walked: None }
    }

    fn dir(&mut self, id: u64) -> Option<PathBuf> {
        if id == 0 {
            return None;
        }
        if !self.dirs.contains_key(&id) && self.walked.is_none_or(|t| t.elapsed() >= REWALK_EVERY) {
            self.walked = Some(Instant::now());
            self.dirs.clear();
            let root = self.root.clone()?;
            let dirs = &mut self.dirs;
            walk_tree(&root, |ino, rel| {
                dirs.insert(ino, root.join(rel.trim_start_matches('/')));
            });
        }
        self.dirs.get(&id).cloned()
    }
}

impl Default for RealProcfs {
    fn default() -> Self {
        Self::new()
    }
}

/// The inode a descriptor link names when it is a socket: `socket:[12345]`.
pub fn socket_inode(link: &[u8]) -> Option<u64> {
    let digits = link.strip_prefix(b"socket:[")?.strip_suffix(b"]")?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

impl Procfs for RealProcfs {
    fn cgroup_pids(&mut self, id: u64) -> Option<Vec<u32>> {
        let dir = self.dir(id)?;
        let text = std::fs::read_to_string(dir.join("cgroup.procs")).ok()?;
        Some(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
    }

    fn all_pids(&mut self) -> Vec<u32> {
        let Ok(rd) = std::fs::read_dir("/proc") else { return Vec::new() };
        rd.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect()
    }

    fn fds(&mut self, pid: u32) -> Option<Vec<u32>> {
        let rd = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
        Some(rd.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
    }

    fn fd_socket(&mut self, pid: u32, fd: u32) -> Option<u64> {
        let link = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
        socket_inode(link.as_os_str().as_bytes())
    }

    fn comm(&mut self, pid: u32) -> Option<String> {
        let c = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        Some(c.trim_end_matches('\n').to_string())
    }

    fn cmdline(&mut self, pid: u32) -> Option<Vec<u8>> {
        std::fs::read(format!("/proc/{pid}/cmdline")).ok()
    }
}
