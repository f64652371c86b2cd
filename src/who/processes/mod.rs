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
//! - the walks run on a thread of their own and spend the monitor's one CPU budget
//!   (`crate::budget`): while it is in debt a walk rests, taking in new batches; requests
//!   past `MAX_WAITING`, or a batch that finds the queue full, are answered "skipped";
//! - a later walk of a process reads only the links of descriptors new since its last
//!   walk, highest first, and stops once every socket asked for is found
//!   (docs/processes.md, "What it costs").
//!
//! The tracker sends [`Request`]s and takes [`Answer`]s through a [`Link`]; the walking
//! is behind [`Procfs`], so a test can give it processes without /proc.

pub mod naming;
mod procfs;

use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::Duration;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::metrics::Metrics;

pub use naming::program_name;
pub use procfs::{Procfs, RealProcfs};

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
    metrics: Arc<Metrics>,
}

impl Link {
    /// Hands a batch to the walker; gives it back when the walker's queue is full (or the
    /// walker is gone).
    ///
    /// # Errors
    /// The batch, not sent.
    pub fn send(&self, batch: Vec<Request>) -> Result<(), Vec<Request>> {
        self.tx.try_send(batch).map_err(|e| match e {
            TrySendError::Full(b) | TrySendError::Disconnected(b) => {
                skipped(&self.metrics, b.len());
                b
            }
        })
    }

    /// A new flow named without a walk, from its listener: counted as named.
    pub fn inherited(&self) {
        self.metrics.naming_named.inc();
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

/// Starts the walker on a thread of its own, over `fs`, spending the CPU budget in
/// `metrics` (`Metrics::budget`: what sampling leaves; with none set, as fast as it goes),
/// and counting what it named, did not find and skipped there. It stops when the link is
/// dropped.
///
/// # Errors
/// The thread could not be started.
pub fn spawn(fs: impl Procfs + Send + 'static, metrics: Arc<Metrics>) -> std::io::Result<Link> {
    let (tx, requests) = std::sync::mpsc::sync_channel::<Vec<Request>>(QUEUED_BATCHES);
    let (answers, rx) = std::sync::mpsc::channel();
    let m = metrics.clone();
    std::thread::Builder::new().name("cgmon-procs".into()).spawn(move || {
        let mut r = Resolver::new(fs);
        let mut waiting: Vec<Request> = Vec::new();
        loop {
            if waiting.is_empty() {
                match requests.recv() {
                    Ok(b) => waiting = b,
                    Err(_) => return,
                }
            }
            // What queued meanwhile is walked together: each process once.
            waiting.extend(requests.try_iter().flatten());
            if let Some(skipped) = skip_past(&mut waiting, &m)
                && answers.send(skipped).is_err()
            {
                return;
            }
            let batch = std::mem::take(&mut waiting);
            m.budget.set_waiting(batch.len());
            let mut cpu = crate::clock::thread_cpu_ns();
            // Between steps of a walk: the CPU spent so far is charged, and while the
            // budget is in debt the walk rests, taking in what the tracker sends meanwhile
            // (so that its queue never fills while a large first walk is spread).
            let mut pace = || {
                let now = crate::clock::thread_cpu_ns();
                let spent = now.saturating_sub(cpu);
                cpu = now;
                m.naming_cpu_ns.add(spent);
                m.budget.spend(spent);
                loop {
                    let rest = m.budget.wait();
                    if rest.is_zero() {
                        break;
                    }
                    waiting.extend(requests.try_iter().flatten());
                    m.budget.set_waiting(batch.len() + waiting.len());
                    std::thread::sleep(rest.min(PACE_REST));
                }
            };
            let out = r.resolve(&batch, &mut pace);
            pace();
            for a in &out {
                match a.owner.how {
                    How::Socket => m.naming_named.inc(),
                    _ => m.naming_not_found.inc(),
                }
            }
            m.budget.set_waiting(waiting.len());
            if answers.send(out).is_err() {
                return;
            }
            if batch.len() >= TRIM_AFTER {
                drop(batch);
                give_back_freed_memory();
            }
        }
    })?;
    Ok(Link { tx, rx, metrics })
}

/// The longest a walk rests at once while the budget is in debt before it looks at its
/// queue again.
const PACE_REST: Duration = Duration::from_millis(50);

/// Most requests that may wait for the budget; those past it are answered as skipped.
pub const MAX_WAITING: usize = 1 << 17;

/// The requests past [`MAX_WAITING`] in `waiting`, answered as skipped (and counted).
fn skip_past(waiting: &mut Vec<Request>, m: &Metrics) -> Option<Vec<Answer>> {
    if waiting.len() <= MAX_WAITING {
        return None;
    }
    let skipped: Vec<Answer> = waiting
        .drain(MAX_WAITING..)
        .map(|r| Answer { target: r.target, owner: Owner::none(How::Skipped) })
        .collect();
    self::skipped(m, skipped.len());
    Some(skipped)
}

/// `n` flows not looked for: counted, and the first time said in the log.
fn skipped(m: &Metrics, n: usize) {
    m.naming_skipped.add(n as u64);
    if m.budget.first_skip() {
        // The target it had before the module moved under `who`, which users may name in
        // RUST_LOG.
        tracing::warn!(
            target: "cgmon_rs::processes",
            skipped = n,
            "the CPU budget ({:.2} % of a core) does not cover naming every new flow's \
             program: flows not looked for are marked skipped (cgmon_naming_skipped_total; \
             --cpu-budget raises the budget, --no-process names none)",
            m.budget.share() * 100.0
        );
    }
}

/// Requests in one batch past which freed memory is handed back to the system.
pub const TRIM_AFTER: usize = 4096;

/// Hands freed heap memory back to the system. A large batch (the first dump's, on a host
/// of many sockets) allocates requests, answers and the walker's inode table on two
/// threads; glibc keeps what they free in each thread's arena, resident (benches/RESULTS.md,
/// D19). Called only after such a batch: it walks the
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
    /// Socket inode → pid, from earlier walks; an answered socket leaves it.
    cache: FxHashMap<u64, u32>,
    /// Each walked process's descriptors as last read: fd → socket inode (0: not a
    /// socket). A later walk reads the links of new descriptor numbers only, and of the
    /// others only when a socket is still missing (a number closed and reused since).
    held: FxHashMap<u32, FxHashMap<u32, Read>>,
    /// The batch being answered, counted from 1: a link read in it is not read again.
    batch: u32,
    /// Processes whose descriptor listing changed in this batch's walk.
    changed: FxHashSet<u32>,
    /// Processes that held a socket asked for lately, most recent first: walked first.
    recent: Vec<u32>,
    names: FxHashMap<Arc<str>, u32>,
    by_id: Vec<Arc<str>>,
}

/// What a descriptor's link named when it was read: the socket inode (0: not a socket),
/// and in which batch.
#[derive(Debug, Clone, Copy)]
struct Read {
    inode: u64,
    batch: u32,
}

/// Links read between two calls of a walk's `pace`.
const PACE_EVERY: usize = 256;

/// Processes kept in [`Resolver::recent`].
const RECENT: usize = 8;

/// Most descriptors [`Resolver::held`] keeps, over all processes, before it starts again.
const HELD_FDS: usize = 1 << 20;

impl<P: Procfs> Resolver<P> {
    /// A resolver over `fs`.
    pub fn new(fs: P) -> Self {
        let unknown: Arc<str> = Arc::from("unknown");
        let mut names = FxHashMap::default();
        names.insert(unknown.clone(), UNKNOWN);
        Resolver {
            fs,
            cache: FxHashMap::default(),
            held: FxHashMap::default(),
            batch: 0,
            changed: FxHashSet::default(),
            recent: Vec::new(),
            names,
            by_id: vec![unknown],
        }
    }

    /// Answers every request: the cache first, then walks of the processes of each
    /// cgroup that has misses, stopping once none is missing: first the descriptors new
    /// since a process's last walk, then, for what is still missing, the others (a
    /// number may have been closed and reused). `pace` is called every `PACE_EVERY`
    /// links read: it charges the budget and rests while it is spent.
    pub fn resolve(&mut self, batch: &[Request], pace: &mut dyn FnMut()) -> Vec<Answer> {
        self.batch = self.batch.wrapping_add(1);
        self.changed.clear();
        let mut missing: FxHashSet<u64> =
            batch.iter().map(|r| r.inode).filter(|i| !self.cache.contains_key(i)).collect();
        let mut cgroups: Vec<u64> =
            batch.iter().filter(|r| missing.contains(&r.inode)).map(|r| r.cgroup_id).collect();
        cgroups.sort_unstable();
        cgroups.dedup();
        let mut read = 0usize;
        let mut walked = FxHashSet::default();
        for cg in cgroups {
            if missing.is_empty() {
                break;
            }
            let mut pids = self.fs.cgroup_pids(cg).unwrap_or_else(|| self.fs.all_pids());
            // The processes that held sockets asked for lately first.
            let rank = |p: &u32| self.recent.iter().position(|r| r == p).unwrap_or(RECENT);
            pids.sort_by_key(rank);
            for fresh_only in [true, false] {
                for &pid in &pids {
                    if missing.is_empty() {
                        break;
                    }
                    // The known links again only where the listing changed since the last
                    // walk: a process whose descriptors are as they were (a server holding
                    // 10,000 idle connections) is not read again for a socket that closed
                    // before the walk, which would cost a read of every link it holds.
                    if fresh_only && !walked.insert(pid)
                        || !fresh_only && !self.changed.contains(&pid)
                    {
                        continue;
                    }
                    self.walk(pid, fresh_only, &mut missing, &mut read, pace);
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
                        if let Some(i) = self.recent.iter().position(|&p| p == pid) {
                            self.recent.remove(i);
                        }
                        self.recent.insert(0, pid);
                        self.recent.truncate(RECENT);
                        let (name_id, name) =
                            named.entry(pid).or_insert_with(|| self.name_of(pid)).clone();
                        Owner { pid, name_id, name, how: How::Socket }
                    }
                    None => Owner::none(How::NotFound),
                };
                Answer { target: r.target, owner }
            })
            .collect();
        self.trim();
        answers
    }

    /// Reads `pid`'s descriptors: with `fresh_only`, the links of the numbers not seen at
    /// its last walk (and forgets those closed since); else the links of the others.
    /// Every socket found goes to the cache; each one missing that is found is struck off.
    fn walk(
        &mut self,
        pid: u32,
        fresh_only: bool,
        missing: &mut FxHashSet<u64>,
        read: &mut usize,
        pace: &mut dyn FnMut(),
    ) {
        let mut held = self.held.remove(&pid).unwrap_or_default();
        let todo: Vec<u32> = if fresh_only {
            let Some(fds) = self.fs.fds(pid) else {
                self.forget(pid, held.values().map(|l| l.inode));
                return;
            };
            let now: FxHashSet<u32> = fds.iter().copied().collect();
            let closed: Vec<u64> =
                held.iter().filter(|(fd, _)| !now.contains(fd)).map(|(_, l)| l.inode).collect();
            held.retain(|fd, _| now.contains(fd));
            // Highest numbers first: a process whose descriptors are stable gets its
            // newest socket at the next number up.
            let mut fresh: Vec<u32> = fds.into_iter().filter(|fd| !held.contains_key(fd)).collect();
            fresh.sort_unstable_by(|a, b| b.cmp(a));
            if !closed.is_empty() || !fresh.is_empty() {
                self.changed.insert(pid);
            }
            self.forget(pid, closed.into_iter());
            fresh
        } else {
            // Those read in an earlier batch only: one read in this one is current.
            held.iter().filter(|(_, l)| l.batch != self.batch).map(|(&fd, _)| fd).collect()
        };
        // Stops once nothing is missing: numbers not read stay new for the next walk.
        for fd in todo {
            if missing.is_empty() {
                break;
            }
            let inode = self.fs.fd_socket(pid, fd).unwrap_or(0);
            if let Some(old) = held.insert(fd, Read { inode, batch: self.batch })
                && old.inode != inode
                && old.inode != 0
                && self.cache.get(&old.inode) == Some(&pid)
            {
                self.cache.remove(&old.inode);
            }
            if inode != 0 {
                self.cache.insert(inode, pid);
                missing.remove(&inode);
            }
            *read += 1;
            if (*read).is_multiple_of(PACE_EVERY) {
                pace();
            }
        }
        self.held.insert(pid, held);
    }

    /// The sockets of `pid` that closed leave the cache.
    fn forget(&mut self, pid: u32, inodes: impl Iterator<Item = u64>) {
        for i in inodes {
            if self.cache.get(&i) == Some(&pid) {
                self.cache.remove(&i);
            }
        }
    }

    /// Keeps the tables within bounds: a walk caches every socket of the processes it
    /// reads, most of which (UDP, unix sockets) are never asked for.
    fn trim(&mut self) {
        if self.cache.len() > CACHE_INODES {
            // Dropped, not cleared: a walk of a host of many sockets grows the table to
            // hundreds of thousands of entries, and a cleared table keeps its room. The
            // descriptors go with it, to be read again.
            self.cache = FxHashMap::default();
            self.held = FxHashMap::default();
        } else if self.cache.capacity() > 2 * CACHE_INODES {
            // The answered left it: at a million sockets 33 MB of room for a few entries.
            self.cache.shrink_to_fit();
        }
        if self.held.values().map(FxHashMap::len).sum::<usize>() > HELD_FDS {
            // Read again from scratch at the next walk of each.
            self.held = FxHashMap::default();
        }
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
