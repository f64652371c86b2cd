//! The host's network namespaces: finding them, naming them, and entering one to open a
//! socket there (`--netns`).
//!
//! sock_diag answers for the namespace its socket was created in, so each namespace gets
//! sockets of its own, made by a short-lived thread that has entered it ([`in_netns`]); the
//! socket keeps its namespace for life, whichever thread then uses it.
//!
//! Namespaces are found through the named ones (`/run/netns/NAME`, what `ip netns` makes)
//! and those of running processes (`/proc/PID/ns/net`), each counted once by its inode. A
//! namespace is named by its `ip netns` name, else by the container of a process in it
//! (`container.rs`). Reading another user's `/proc/PID/ns/net` needs `CAP_SYS_PTRACE`, and
//! entering a namespace `CAP_SYS_ADMIN`: what cannot be read or entered is reported, never
//! fatal.

pub mod container;

use crate::units::ValueError;
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub use container::Container;

/// Which namespaces to sample (`--netns`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Which {
    /// The monitor's own (the default, cgmon's behaviour).
    #[default]
    Own,
    /// Every namespace on the host.
    All,
    /// These, by `ip netns` name or by path (`/proc/PID/ns/net`, a bind mount); `own` among
    /// them is the monitor's own (a namespace named "own" is `/run/netns/own`).
    Listed(Vec<String>),
}

impl Which {
    /// Parses `own`, `all`, or a comma list of names and paths.
    ///
    /// # Errors
    /// An empty list item.
    pub fn parse(s: &str) -> Result<Which, ValueError> {
        match s.trim() {
            "" => Err(ValueError(
                "empty: give own, all, or a comma list of namespace names or paths".into(),
            )),
            "own" | "self" => Ok(Which::Own),
            "all" => Ok(Which::All),
            list => {
                let items: Vec<String> = list.split(',').map(|x| x.trim().to_string()).collect();
                if let Some(bad) = items.iter().find(|x| x.is_empty() || x.contains('\0')) {
                    return Err(ValueError(format!("invalid namespace {bad:?} in {s:?}")));
                }
                Ok(Which::Listed(items))
            }
        }
    }
}

/// A namespace's identity: the device and inode of its nsfs file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NsId {
    /// `st_dev` of the namespace file.
    pub dev: u64,
    /// `st_ino`: the number `ip netns identify` and `lsns` show.
    pub inode: u64,
}

/// One namespace found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Netns {
    /// Its identity.
    pub id: NsId,
    /// A path that opens it.
    pub path: PathBuf,
    /// Its `ip netns` name, when it has one.
    pub name: Option<String>,
    /// The container of a process in it, when one is recognised.
    pub container: Option<Container>,
    /// It is the monitor's own.
    pub own: bool,
}

impl Netns {
    /// The name records and metrics show: the `ip netns` name, else the pod or container,
    /// else `host` for the monitor's own, else `netns:<inode>`.
    pub fn label(&self) -> String {
        if let Some(n) = &self.name {
            return n.clone();
        }
        match &self.container {
            Some(c) => match &c.pod_uid {
                Some(pod) => format!("pod:{pod}"),
                None => format!("{}:{}", c.runtime, &c.id[..c.id.len().min(12)]),
            },
            None if self.own => "host".into(),
            None => format!("netns:{}", self.id.inode),
        }
    }

    /// Opens it (a file descriptor to `setns` into).
    ///
    /// # Errors
    /// It no longer exists, or may not be opened.
    pub fn open(&self) -> io::Result<OwnedFd> {
        Ok(OwnedFd::from(File::open(&self.path)?))
    }
}

/// What a scan found.
#[derive(Debug, Default)]
pub struct Scan {
    /// The namespaces, each once: the monitor's own first (with `--netns` a list, only
    /// those listed, in order).
    pub found: Vec<Netns>,
    /// Paths that could not be read (typically other users' processes without
    /// `CAP_SYS_PTRACE`), with why; one per namespace at most is not knowable, so this counts
    /// paths.
    pub unreadable: Vec<(PathBuf, io::Error)>,
    /// Processes looked at.
    pub processes: usize,
}

fn ns_id(path: &Path) -> io::Result<NsId> {
    let m = std::fs::metadata(path)?;
    Ok(NsId { dev: m.dev(), inode: m.ino() })
}

/// The namespace inode of process `pid` (its directory name under the open `/proc`), from
/// its `ns/net` link, `net:[INODE]`. `readlinkat` relative to `/proc`, into buffers on the
/// stack: half what a `stat` of the path costs, and no allocation (a rescan reads one link
/// per process).
fn pid_ns_inode(proc_dir: &File, pid: &[u8]) -> io::Result<u64> {
    const REL: &[u8] = b"/ns/net\0";
    let mut name = [0u8; 40];
    if pid.len() + REL.len() > name.len() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    name[..pid.len()].copy_from_slice(pid);
    name[pid.len()..pid.len() + REL.len()].copy_from_slice(REL);
    let mut buf = [0u8; 64];
    // SAFETY: a NUL-terminated relative name and a buffer valid for its length, on an open
    // directory fd.
    let n = unsafe {
        libc::readlinkat(
            proc_dir.as_raw_fd(),
            name.as_ptr().cast(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    std::str::from_utf8(&buf[..n as usize])
        .ok()
        .and_then(|l| l.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok())
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))
}

/// Where to look: `/proc` and `/run/netns` (tests point them elsewhere).
#[derive(Debug, Clone)]
pub struct Roots {
    /// The proc file system.
    pub proc: PathBuf,
    /// The directory `ip netns` keeps its names in.
    pub run_netns: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Self { proc: "/proc".into(), run_netns: "/run/netns".into() }
    }
}

/// At start-up: every namespace a list names must exist, so that a typo is a usage error
/// (exit 2) rather than a namespace reported unreachable for the whole run. (One that
/// exists but goes away later is the run's business: it is reported, and rescans look
/// for it again.)
///
/// # Errors
/// The first listed name or path that does not exist, with the path looked at.
pub fn check_listed(which: &Which, roots: &Roots) -> Result<(), ValueError> {
    let Which::Listed(items) = which else { return Ok(()) };
    for item in items.iter().filter(|i| *i != "own") {
        let path =
            if item.contains('/') { PathBuf::from(item) } else { roots.run_netns.join(item) };
        // Permission is the run's business (a unit without the capability is reported
        // as such); a name that cannot exist is the user's.
        if let Err(e) = std::fs::metadata(&path)
            && e.kind() != std::io::ErrorKind::PermissionDenied
        {
            return Err(ValueError(format!(
                "no network namespace {:?} ({}: {e})",
                crate::units::clip(item),
                crate::units::clip(&path.display().to_string())
            )));
        }
    }
    Ok(())
}

/// Finds the namespaces `which` names. `known` are namespaces found before, whose container
/// need not be looked up again (a scan of 1,000 processes then costs one `stat` each).
pub fn scan(which: &Which, roots: &Roots, known: &HashMap<NsId, Netns>) -> Scan {
    let own_path = roots.proc.join("self/ns/net");
    let own = match ns_id(&own_path) {
        Ok(id) => id,
        Err(e) => {
            let mut out = Scan::default();
            out.unreadable.push((own_path, e));
            return out;
        }
    };
    let mut f = Found { out: Scan::default(), seen: HashMap::new(), own };
    // A list names exactly what to sample; otherwise the own namespace comes first.
    if !matches!(which, Which::Listed(_)) {
        f.add(own, own_path.clone(), None);
    }
    match which {
        Which::Own => {}
        Which::Listed(items) => f.listed(items, roots, &own_path),
        Which::All => {
            f.named(roots);
            f.processes(roots, known);
        }
    }
    f.out
}

/// A scan under way: what it found, by id.
struct Found {
    out: Scan,
    seen: HashMap<NsId, usize>,
    own: NsId,
}

impl Found {
    /// Adds a namespace not seen yet (its index), or names one seen (None).
    fn add(&mut self, id: NsId, path: PathBuf, name: Option<String>) -> Option<usize> {
        if let Some(&i) = self.seen.get(&id) {
            let n = &mut self.out.found[i];
            if n.name.is_none() {
                n.name = name;
            }
            return None;
        }
        self.seen.insert(id, self.out.found.len());
        let own = id == self.own;
        self.out.found.push(Netns { id, path, name, container: None, own });
        Some(self.out.found.len() - 1)
    }

    /// `--netns` as a list: names under /run/netns, paths, and `own`.
    fn listed(&mut self, items: &[String], roots: &Roots, own_path: &Path) {
        for item in items {
            if item == "own" {
                self.add(self.own, own_path.to_path_buf(), None);
                continue;
            }
            let path =
                if item.contains('/') { PathBuf::from(item) } else { roots.run_netns.join(item) };
            match ns_id(&path) {
                Ok(id) => {
                    let name = (!item.contains('/')).then(|| item.clone());
                    self.add(id, path, name);
                }
                Err(e) => self.out.unreadable.push((path, e)),
            }
        }
    }

    /// The named namespaces (`ip netns`).
    fn named(&mut self, roots: &Roots) {
        if let Ok(dir) = std::fs::read_dir(&roots.run_netns) {
            for e in dir.flatten() {
                let path = e.path();
                let name = e.file_name().to_string_lossy().into_owned();
                match ns_id(&path) {
                    Ok(id) => {
                        self.add(id, path, Some(name));
                    }
                    Err(err) => self.out.unreadable.push((path, err)),
                }
            }
        }
    }

    /// The namespaces of every process, each new one named by the first process in it that
    /// names a container.
    fn processes(&mut self, roots: &Roots, known: &HashMap<NsId, Netns>) {
        let (Ok(dir), Ok(proc_dir)) = (std::fs::read_dir(&roots.proc), File::open(&roots.proc))
        else {
            return;
        };
        for e in dir.flatten() {
            let pid = e.file_name();
            let pid = pid.as_encoded_bytes();
            if !pid.iter().all(u8::is_ascii_digit) {
                continue;
            }
            self.out.processes += 1;
            // Every namespace file is on the one nsfs: the device is the own one's.
            let id = match pid_ns_inode(&proc_dir, pid) {
                Ok(inode) => NsId { dev: self.own.dev, inode },
                // A process that exited meanwhile is no news.
                Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
                Err(err) => {
                    self.out.unreadable.push((e.path().join("ns/net"), err));
                    continue;
                }
            };
            if self.seen.contains_key(&id)
                && (known.contains_key(&id) || self.out.found[self.seen[&id]].container.is_some())
            {
                continue; // the common case on a rescan: nothing to learn
            }
            let fresh = self.add(id, e.path().join("ns/net"), None);
            let i = match fresh {
                Some(i) => i,
                None => match self.seen.get(&id) {
                    Some(&i)
                        if self.out.found[i].container.is_none() && !known.contains_key(&id) =>
                    {
                        i
                    }
                    _ => continue,
                },
            };
            if let Some(k) = known.get(&id) {
                self.out.found[i].container.clone_from(&k.container);
                continue;
            }
            if let Ok(text) = std::fs::read_to_string(e.path().join("cgroup")) {
                self.out.found[i].container = container::from_proc_cgroup(&text);
            }
        }
    }
}

/// Runs `f` on a thread that has entered the namespace `ns`, so that sockets it creates
/// belong there.
///
/// # Errors
/// `setns` failed (without `CAP_SYS_ADMIN`: `EPERM`), or `f` did.
pub fn in_netns<T: Send>(ns: &OwnedFd, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    let fd = ns.as_raw_fd();
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: setns on a valid namespace fd affects only this (scoped) thread.
            if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("namespace thread panicked")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_parses_own_all_and_lists() {
        assert_eq!(Which::parse("own"), Ok(Which::Own));
        assert_eq!(Which::parse("all"), Ok(Which::All));
        assert_eq!(
            Which::parse("blue, /proc/1/ns/net"),
            Ok(Which::Listed(vec!["blue".into(), "/proc/1/ns/net".into()]))
        );
        assert!(Which::parse("blue,,red").unwrap_err().0.contains("\"\""));
    }

    #[test]
    fn own_namespace_first_and_every_process_namespace_once() {
        let s = scan(&Which::All, &Roots::default(), &HashMap::new());
        assert!(s.found[0].own && s.found[0].label() == "host", "{:?}", s.found[0]);
        let mut ids: Vec<NsId> = s.found.iter().map(|n| n.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), s.found.len(), "each namespace once");
        assert!(s.processes > 0);
        let own = scan(&Which::Own, &Roots::default(), &HashMap::new());
        assert_eq!(own.found.len(), 1);
        // `own` in a list is the monitor's own, once however often it is named.
        let listed = Which::parse("own, /proc/self/ns/net").unwrap();
        let l = scan(&listed, &Roots::default(), &HashMap::new());
        assert!(l.unreadable.is_empty(), "{:?}", l.unreadable);
        assert_eq!(l.found.len(), 1);
        assert!(l.found[0].own && l.found[0].label() == "host", "{:?}", l.found[0]);
        // A list is exactly what it names: the own namespace only when listed (by path,
        // here), and what does not exist is unreadable, not found.
        let listed = Which::Listed(vec!["/nonexistent/ns".into(), "/proc/self/ns/net".into()]);
        let l = scan(&listed, &Roots::default(), &HashMap::new());
        assert_eq!(l.found.len(), 1);
        assert!(l.found[0].own && l.found[0].path == Path::new("/proc/self/ns/net"));
        assert_eq!(l.unreadable.len(), 1);
        let none = scan(
            &Which::Listed(vec!["/nonexistent/ns".into()]),
            &Roots::default(),
            &HashMap::new(),
        );
        assert!(none.found.is_empty());
    }

    #[test]
    fn labels_prefer_the_ip_netns_name_then_the_pod_then_the_container() {
        let id = NsId { dev: 4, inode: 4026532000 };
        let mut n = Netns { id, path: "/x".into(), name: None, container: None, own: false };
        assert_eq!(n.label(), "netns:4026532000");
        n.container =
            Some(Container { runtime: "docker", id: "0123456789abcdef".into(), pod_uid: None });
        assert_eq!(n.label(), "docker:0123456789ab");
        n.container.as_mut().unwrap().pod_uid = Some("5c9f".into());
        assert_eq!(n.label(), "pod:5c9f");
        n.name = Some("blue".into());
        assert_eq!(n.label(), "blue");
    }
}
