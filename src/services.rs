//! Which service a socket belongs to: its `INET_DIAG_CGROUP_ID` is the inode number of its
//! cgroup2 directory, so walking the cgroup2 tree maps ids to paths, and a path names the
//! systemd unit or container (`/system.slice/nginx.service` → `nginx.service`,
//! `/system.slice/docker-0123…scope` → `docker:0123456789ab`).
//!
//! The cgroup2 mount is found in /proc/self/mountinfo (it may be /sys/fs/cgroup or, in the
//! hybrid layout, /sys/fs/cgroup/unified). The tree is walked again on an unknown id, at
//! most once every [`REWALK_EVERY`]; this runs at scrape time, never while sampling.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

/// Least time between two walks of the cgroup tree.
pub const REWALK_EVERY: Duration = Duration::from_secs(5);

/// The cgroup2 mount point, from a mountinfo text.
pub fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        (post.split_whitespace().next()? == "cgroup2")
            .then(|| pre.split_whitespace().nth(4).map(PathBuf::from))?
    })
}

/// The service a cgroup path (relative to the cgroup2 root, starting with '/') names.
pub fn service_name(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let Some(&last) = parts.last() else { return "root".into() };
    let short = |id: &str| id.chars().take(12).collect::<String>();
    // Container runtimes: docker-<id>.scope, cri-containerd-<id>.scope, crio-<id>.scope,
    // libpod-<id>.scope, or cgroupfs-style /docker/<id>.
    for (prefix, runtime) in [
        ("docker-", "docker"),
        ("cri-containerd-", "containerd"),
        ("crio-", "crio"),
        ("libpod-", "podman"),
    ] {
        if let Some(id) = last.strip_prefix(prefix).and_then(|r| r.strip_suffix(".scope")) {
            return format!("{runtime}:{}", short(id));
        }
    }
    if parts.len() >= 2 && parts[parts.len() - 2] == "docker" {
        return format!("docker:{}", short(last));
    }
    last.to_string()
}

/// Cached id → service resolution.
#[derive(Debug)]
pub struct Services {
    root: Option<PathBuf>,
    names: FxHashMap<u64, String>,
    walked: Option<Instant>,
}

impl Services {
    /// Resolution under this process's cgroup2 mount (none: every id is reported by
    /// number).
    pub fn new() -> Self {
        let root =
            std::fs::read_to_string("/proc/self/mountinfo").ok().and_then(|m| cgroup2_mount(&m));
        Self::with_root(root)
    }

    /// Resolution under `root`.
    pub fn with_root(root: Option<PathBuf>) -> Self {
        Self { root, names: FxHashMap::default(), walked: None }
    }

    /// The service of cgroup `id`.
    pub fn name(&mut self, id: u64) -> String {
        if id == 0 {
            return "unknown".into();
        }
        if let Some(n) = self.names.get(&id) {
            return n.clone();
        }
        if self.walked.is_none_or(|t| t.elapsed() >= REWALK_EVERY) {
            self.walk();
        }
        self.names.get(&id).cloned().unwrap_or_else(|| format!("cgroup-{id}"))
    }

    fn walk(&mut self) {
        self.walked = Some(Instant::now());
        let Some(root) = self.root.clone() else { return };
        let mut stack = vec![(root.clone(), 0u32)];
        while let Some((dir, depth)) = stack.pop() {
            let Ok(meta) = std::fs::metadata(&dir) else { continue };
            let rel = dir.strip_prefix(&root).unwrap_or(Path::new(""));
            let rel = format!("/{}", rel.display());
            self.names.insert(meta.ino(), service_name(&rel));
            if depth >= 32 {
                continue;
            }
            let Ok(rd) = std::fs::read_dir(&dir) else { continue };
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push((e.path(), depth + 1));
                }
            }
        }
    }
}

impl Default for Services {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cgroup2_mount_in_either_layout() {
        let hybrid = "35 24 0:30 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
                      41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(cgroup2_mount(hybrid), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        let unified = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(cgroup2_mount(unified), Some(PathBuf::from("/sys/fs/cgroup")));
        assert_eq!(cgroup2_mount("1 2 0:1 / / rw - ext4 /dev/sda rw\n"), None);
    }

    #[test]
    fn names_units_and_containers() {
        assert_eq!(service_name("/system.slice/nginx.service"), "nginx.service");
        assert_eq!(service_name("/user.slice/user-1000.slice/session-3.scope"), "session-3.scope");
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        assert_eq!(
            service_name(&format!("/system.slice/docker-{id}.scope")),
            "docker:0123456789ab"
        );
        assert_eq!(service_name(&format!("/docker/{id}")), "docker:0123456789ab");
        assert_eq!(
            service_name(&format!("/kubepods.slice/kubepods-pod1.slice/cri-containerd-{id}.scope")),
            "containerd:0123456789ab"
        );
        assert_eq!(service_name("/"), "root");
    }

    #[test]
    fn resolves_ids_by_directory_inode() {
        let dir = tempfile::tempdir().unwrap();
        let unit = dir.path().join("system.slice/web.service");
        std::fs::create_dir_all(&unit).unwrap();
        let id = std::fs::metadata(&unit).unwrap().ino();
        let mut s = Services::with_root(Some(dir.path().to_path_buf()));
        assert_eq!(s.name(id), "web.service");
        assert_eq!(s.name(0), "unknown");
        assert_eq!(s.name(u64::MAX - 1), format!("cgroup-{}", u64::MAX - 1));
    }
}
