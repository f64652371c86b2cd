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

/// This process's cgroup2 mount, from /proc/self/mountinfo.
pub fn cgroup2_root() -> Option<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo").ok().and_then(|m| cgroup2_mount(&m))
}

/// The service of the root cgroup: the host's own processes (kernel threads, and
/// anything not in a unit or container).
pub const HOST: &str = "host";

/// The root cgroup's id: the cgroup2 hierarchy's root is always 1, also on a host with the
/// hybrid layout, where cgroup2 is mounted at `unified` with no process in it and the walk
/// may not find it.
const ROOT_CGROUP_ID: u64 = 1;

/// The service a cgroup path (relative to the cgroup2 root, starting with '/') names.
pub fn service_name(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let Some(&last) = parts.last() else { return HOST.into() };
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

/// The service of sockets known only by their owner's uid (a flow seen only in its destroy
/// event, which carries no cgroup id): the one systemd unit or container whose processes
/// run as that uid, when exactly one does; otherwise `user:<name>` (or `user:<uid>` with no
/// name). `procs` gives each running process's effective uid and cgroup2 path.
pub fn uid_service(
    uid: u32,
    procs: impl IntoIterator<Item = (u32, String)>,
    user_name: Option<&str>,
) -> String {
    let mut units: Vec<String> =
        procs.into_iter().filter(|(u, _)| *u == uid).map(|(_, path)| service_name(&path)).collect();
    units.sort_unstable();
    units.dedup();
    if let [only] = units.as_slice()
        && (only.ends_with(".service") || only.contains(':'))
    {
        return only.clone();
    }
    match user_name {
        Some(n) => format!("user:{n}"),
        None => format!("user:{uid}"),
    }
}

/// Every running process's effective uid and cgroup2 path, from /proc.
fn processes() -> Vec<(u32, String)> {
    let Ok(rd) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name();
        if !name.to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())) {
            continue;
        }
        let dir = e.path();
        let (Ok(status), Ok(cgroup)) = (
            std::fs::read_to_string(dir.join("status")),
            std::fs::read_to_string(dir.join("cgroup")),
        ) else {
            continue; // it exited meanwhile
        };
        let euid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|u| u.parse().ok());
        let path = cgroup.lines().find_map(|l| l.strip_prefix("0::"));
        if let (Some(euid), Some(path)) = (euid, path) {
            out.push((euid, path.to_string()));
        }
    }
    out
}

/// The user name of `uid` (through NSS, as `ls -l` finds it), if it has one.
fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: an all-zero passwd is a valid value for getpwuid_r to fill.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call, and buf's length is passed with it.
    let rc =
        unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pw.pw_name.is_null() {
        return None;
    }
    // SAFETY: on success pw_name points at a NUL-terminated string inside buf.
    let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
    name.to_str().ok().map(str::to_string)
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
        Self::with_root(cgroup2_root())
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
        self.lookup(id).unwrap_or_else(|| format!("cgroup-{id}"))
    }

    /// The service of cgroup `id`, if the tree has that cgroup (0 never).
    pub fn lookup(&mut self, id: u64) -> Option<String> {
        if id == 0 {
            return None;
        }
        if let Some(n) = self.names.get(&id) {
            return Some(n.clone());
        }
        if self.walked.is_none_or(|t| t.elapsed() >= REWALK_EVERY) {
            self.walk();
        }
        self.names.get(&id).cloned().or_else(|| (id == ROOT_CGROUP_ID).then(|| HOST.into()))
    }

    /// The service of sockets known only by `uid` ([`uid_service`]). Reads /proc once per
    /// call; the caller keeps what it gets, so a label never moves.
    pub fn name_of_uid(&mut self, uid: u32) -> String {
        uid_service(uid, processes(), user_name(uid).as_deref())
    }

    /// Maps every cgroup directory's inode to its service, afresh: cgroups that are gone
    /// (containers come and go) leave the map, so it holds no more than the tree does.
    fn walk(&mut self) {
        self.walked = Some(Instant::now());
        self.names.clear();
        let Some(root) = self.root.clone() else { return };
        let names = &mut self.names;
        walk_tree(&root, |ino, rel| {
            names.insert(ino, service_name(rel));
        });
    }
}

/// Calls `f` with every cgroup directory's inode (the id sock_diag reports) and its path
/// relative to `root` (starting with '/'), down to 32 levels.
pub fn walk_tree(root: &Path, mut f: impl FnMut(u64, &str)) {
    let mut stack = vec![(root.to_path_buf(), 0u32)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(meta) = std::fs::metadata(&dir) else { continue };
        let rel = dir.strip_prefix(root).unwrap_or(Path::new(""));
        f(meta.ino(), &format!("/{}", rel.display()));
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
        assert_eq!(service_name("/"), "host");
    }

    #[test]
    fn a_uid_names_its_one_unit_or_else_the_user() {
        let procs = || {
            vec![
                (33, "/system.slice/nginx.service".to_string()),
                (33, "/system.slice/nginx.service".to_string()),
                (0, "/system.slice/sshd.service".to_string()),
                (0, "/init.scope".to_string()),
                (1000, "/user.slice/user-1000.slice/session-2.scope".to_string()),
                (1000, "/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope".into()),
                (999, "/system.slice/docker-0123456789abcdef0123.scope".to_string()),
                (998, "/user.slice/user-998.slice/session-9.scope".to_string()),
            ]
        };
        assert_eq!(uid_service(33, procs(), Some("www-data")), "nginx.service");
        assert_eq!(uid_service(999, procs(), None), "docker:0123456789ab");
        // Many units (root), a login session (not a service), or none running: the user.
        assert_eq!(uid_service(0, procs(), Some("root")), "user:root");
        assert_eq!(uid_service(1000, procs(), Some("alice")), "user:alice");
        assert_eq!(uid_service(998, procs(), Some("bob")), "user:bob");
        assert_eq!(uid_service(4242, procs(), None), "user:4242");
    }

    #[test]
    fn this_process_is_found_under_its_own_uid() {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        assert!(processes().iter().any(|(u, _)| *u == me));
        assert_eq!(user_name(0).as_deref(), Some("root"));
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
        // The cgroup2 root is the host's own, found by the walk or not (the hybrid layout).
        assert_eq!(s.name(1), "host");
        assert_eq!(Services::with_root(None).name(1), "host");
        // A walk forgets cgroups that are gone.
        let gone = dir.path().join("system.slice/old.service");
        std::fs::create_dir_all(&gone).unwrap();
        s.walked = None;
        s.walk();
        let n = s.names.len();
        std::fs::remove_dir(&gone).unwrap();
        s.walk();
        assert_eq!(s.names.len(), n - 1);
    }
}
