//! Which process owns a socket (`--no-process` turns it off).
//!
//! No sock_diag reply carries a pid: it carries the socket's inode and its cgroup id. A
//! process owns the socket whose inode one of its `/proc/PID/fd` links names
//! (`socket:[INODE]`). Walking every process's descriptors costs 0.2 s on a host with
//! 100,000 of them, so the walk is narrow and lazy (docs/processes.md):
//! - only sockets the tracker follows ask, once each, when a full dump first holds them
//!   (a listener when first seen, so that connections it accepted, seen only in their
//!   destroy event, inherit its process);
//! - only the processes of the socket's cgroup (`cgroup.procs`) are walked, each at most
//!   once per batch, and what a walk finds is cached by inode;
//! - the walks run on a thread of their own, paced to [`WALK_SHARE`] of a core: a batch
//!   that arrives while the walker rests waits, and one that finds the queue full is
//!   answered "skipped" at once by the tracker.
//!
//! The tracker sends [`Request`]s and takes [`Answer`]s through a [`Link`]; the walking
//! is behind [`Procfs`], so a test can give it processes without /proc.

pub mod naming;
mod procfs;

use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::Duration;

use rustc_hash::{FxHashMap, FxHashSet};

pub use naming::program_name;
pub use procfs::{Procfs, RealProcfs};

/// Share of one core the walks may take on average. With 20,000 sockets in 50 processes
/// the first walk took 80–120 ms, once (`cargo bench --bench attribution -- flows`); after
/// that only new sockets are looked for.
pub const WALK_SHARE: f64 = 0.02;

/// Batches that may wait for the walker; a batch past them is answered as skipped.
const QUEUED_BATCHES: usize = 16;

/// Most inodes the cache keeps before it starts again: a walk caches every socket of the
/// processes it reads, most of which (UDP, unix sockets) are never asked for.
const CACHE_INODES: usize = 1 << 16;

/// Most distinct program names; later ones are all called `other`.
const MAX_NAMES: usize = 4096;

/// The id of the name `unknown`.
pub const UNKNOWN: u32 = 0;

/// How a flow's owner was found, or why not (the `how` label of
/// `cgmon_flow_owners_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum How {
    /// Its own socket's inode, in a process's descriptors.
    Socket,
    /// Its listener's process: an accepted socket seen only in its destroy event.
    Listener,
    /// No readable process held the socket: it closed first, or the process is another
    /// user's and the monitor lacks CAP_SYS_PTRACE.
    NotFound,
    /// The walker was behind (its queue full): not looked for.
    Skipped,
    /// Nothing to look for: seen only in its destroy event (which carries no inode) on the
    /// connecting side, or attribution is off.
    None,
}

impl How {
    /// Every value, in label order.
    pub const ALL: [How; 5] = [How::Socket, How::Listener, How::NotFound, How::Skipped, How::None];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            How::Socket => "socket",
            How::Listener => "listener",
            How::NotFound => "not_found",
            How::Skipped => "skipped",
            How::None => "none",
        }
    }
}

/// A flow's process: pid 0 and name id [`UNKNOWN`] when none was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Its pid (in the monitor's pid namespace), 0 when unknown.
    pub pid: u32,
    /// Its name's id, shared by every process of that name.
    pub name_id: u32,
    /// Its name ([`program_name`]).
    pub name: Arc<str>,
    /// How it was found.
    pub how: How,
}

impl Owner {
    /// No owner found, for this reason.
    pub fn none(how: How) -> Self {
        Owner { pid: 0, name_id: UNKNOWN, name: Arc::from("unknown"), how }
    }

    /// Whether a process was found.
    pub fn found(&self) -> bool {
        self.pid != 0
    }
}

/// What an answer is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// A flow, by socket cookie.
    Flow(u64),
    /// A listener, by the tracker's key for its (namespace, port).
    Listener(u64),
}

/// A socket to find the owner of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// What asks.
    pub target: Target,
    /// The socket's inode.
    pub inode: u64,
    /// Its cgroup id (0: the kernel sent none; every process is then walked).
    pub cgroup_id: u64,
}

/// A request's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// What asked.
    pub target: Target,
    /// Its owner, or why none.
    pub owner: Owner,
}

/// The tracker's end of the walker.
#[derive(Debug)]
pub struct Link {
    tx: SyncSender<Vec<Request>>,
    rx: Receiver<Vec<Answer>>,
}

impl Link {
    /// Hands a batch to the walker; gives it back when the walker's queue is full (or the
    /// walker is gone).
    ///
    /// # Errors
    /// The batch, not sent.
    pub fn send(&self, batch: Vec<Request>) -> Result<(), Vec<Request>> {
        self.tx.try_send(batch).map_err(|e| match e {
            TrySendError::Full(b) | TrySendError::Disconnected(b) => b,
        })
    }

    /// The answers ready now, without waiting, in the walker's batches.
    pub fn ready(&self) -> impl Iterator<Item = Vec<Answer>> + '_ {
        self.rx.try_iter()
    }

    /// Waits up to `timeout` for the next batch of answers (tests).
    pub fn wait(&self, timeout: Duration) -> Option<Vec<Answer>> {
        self.rx.recv_timeout(timeout).ok()
    }
}

/// Starts the walker on a thread of its own, over `fs`, paced to `share` of a core (0: no
/// pacing). It stops when the link is dropped.
///
/// # Errors
/// The thread could not be started.
pub fn spawn(fs: impl Procfs + Send + 'static, share: f64) -> std::io::Result<Link> {
    let (tx, requests) = std::sync::mpsc::sync_channel::<Vec<Request>>(QUEUED_BATCHES);
    let (answers, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new().name("cgmon-procs".into()).spawn(move || {
        let mut r = Resolver::new(fs);
        while let Ok(mut batch) = requests.recv() {
            // What queued meanwhile is walked together: each process once.
            batch.extend(requests.try_iter().flatten());
            let cpu = crate::clock::thread_cpu_ns();
            let out = r.resolve(&batch);
            if answers.send(out).is_err() {
                return;
            }
            if batch.len() >= TRIM_AFTER {
                drop(batch);
                give_back_freed_memory();
            }
            if share > 0.0 {
                let spent = crate::clock::thread_cpu_ns().saturating_sub(cpu) as f64;
                std::thread::sleep(Duration::from_nanos((spent / share - spent) as u64));
            }
        }
    })?;
    Ok(Link { tx, rx })
}

/// Requests in one batch past which freed memory is handed back to the system.
pub const TRIM_AFTER: usize = 4096;

/// Hands freed heap memory back to the system. A large batch (the first dump's, on a host
/// of many sockets) allocates requests, answers and the walker's inode table on two
/// threads; glibc keeps what they free in each thread's arena, resident: 70 MB at a million
/// sockets (benches/RESULTS.md, issue 40). Called only after such a batch: it walks the
/// arenas.
pub fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions; it only releases free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Finds owners, keeping what it learns between batches.
pub struct Resolver<P> {
    fs: P,
    /// Socket inode → pid, from earlier walks.
    cache: FxHashMap<u64, u32>,
    names: FxHashMap<Arc<str>, u32>,
    by_id: Vec<Arc<str>>,
}

impl<P: Procfs> Resolver<P> {
    /// A resolver over `fs`.
    pub fn new(fs: P) -> Self {
        let unknown: Arc<str> = Arc::from("unknown");
        let mut names = FxHashMap::default();
        names.insert(unknown.clone(), UNKNOWN);
        Resolver { fs, cache: FxHashMap::default(), names, by_id: vec![unknown] }
    }

    /// Answers every request: the cache first, then a walk of each cgroup that has misses
    /// (each process once).
    pub fn resolve(&mut self, batch: &[Request]) -> Vec<Answer> {
        let mut walked = FxHashSet::default();
        let mut missing: Vec<u64> = batch
            .iter()
            .filter(|r| !self.cache.contains_key(&r.inode))
            .map(|r| r.cgroup_id)
            .collect();
        missing.sort_unstable();
        missing.dedup();
        for cg in missing {
            let pids = self.fs.cgroup_pids(cg).unwrap_or_else(|| self.fs.all_pids());
            for pid in pids {
                if walked.insert(pid) {
                    for inode in self.fs.socket_inodes(pid) {
                        self.cache.insert(inode, pid);
                    }
                }
            }
        }
        let mut named: FxHashMap<u32, (u32, Arc<str>)> = FxHashMap::default();
        let answers = batch
            .iter()
            .map(|r| {
                // Asked once per socket: what is answered leaves the cache.
                let owner = match self.cache.remove(&r.inode) {
                    Some(pid) => {
                        let (name_id, name) =
                            named.entry(pid).or_insert_with(|| self.name_of(pid)).clone();
                        Owner { pid, name_id, name, how: How::Socket }
                    }
                    None => Owner::none(How::NotFound),
                };
                Answer { target: r.target, owner }
            })
            .collect();
        if self.cache.len() > CACHE_INODES {
            // Dropped, not cleared: a walk of a host of many sockets grows the table to
            // hundreds of thousands of entries, and a cleared table keeps its room.
            self.cache = FxHashMap::default();
        } else if self.cache.capacity() > 2 * CACHE_INODES {
            // The answered left it: at a million sockets 33 MB of room for a few entries.
            self.cache.shrink_to_fit();
        }
        answers
    }

    /// The id and name of `pid`'s program.
    fn name_of(&mut self, pid: u32) -> (u32, Arc<str>) {
        let Some(comm) = self.fs.comm(pid) else {
            return (UNKNOWN, self.by_id[0].clone());
        };
        let cmdline = self.fs.cmdline(pid).unwrap_or_default();
        let name: Arc<str> = Arc::from(program_name(&comm, &cmdline));
        if let Some(&id) = self.names.get(&name) {
            return (id, name);
        }
        if self.by_id.len() >= MAX_NAMES {
            let other: Arc<str> = Arc::from("other");
            let id = *self.names.entry(other.clone()).or_insert(MAX_NAMES as u32);
            return (id, other);
        }
        let id = self.by_id.len() as u32;
        self.by_id.push(name.clone());
        self.names.insert(name.clone(), id);
        (id, name)
    }
}

#[cfg(test)]
mod tests;
