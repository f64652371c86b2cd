//! `--netns`: which network namespaces the program samples, their sockets, and a scanner
//! that finds the namespaces that come and go while it runs (`--netns-rescan`).
//!
//! Each namespace gets a dump socket and a destroy listener of its own, made by a thread
//! that enters it (`netns::in_netns`). The monitor's own namespace needs no privilege;
//! others need `CAP_SYS_ADMIN`, and finding other users' processes' namespaces
//! `CAP_SYS_PTRACE`. A namespace that cannot be read or entered is reported (once, by
//! path) and counted (`cgmon_netns_unreachable`), and the rest are sampled.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use super::{Space, SpaceUpdate};
use crate::locks::Locked;
use crate::metrics::Metrics;
use crate::netns::{self, Netns, NsId, Roots, Which};
use crate::record::NetnsLabel;
use crate::sampler::activity::Activity;
use crate::sampler::destroy::DestroyListener;
use crate::sampler::source::{SocketOptions, Source};
use crate::sampler::space::{SpaceSockets, open_space};
use crate::sampler::{Sampler, SamplerConfig};

/// What records say about a namespace.
pub fn label(n: &Netns) -> NetnsLabel {
    NetnsLabel {
        inode: n.id.inode,
        name: n.label(),
        runtime: n.container.as_ref().map(|c| c.runtime),
        container: n.container.as_ref().map(|c| c.id.clone()),
        pod: n.container.as_ref().and_then(|c| c.pod_uid.clone()),
    }
}

/// The program's namespaces beyond the first: their sources, labels, and the stream of
/// those that come and go.
pub struct Namespaces {
    /// The first namespace's label (its sources are `Sources::dump` and `::destroy`).
    pub first: Arc<NetnsLabel>,
    /// The others sampled from the start.
    pub others: Vec<Space<Source, Source>>,
    /// Namespaces found later, and those gone.
    pub updates: mpsc::Receiver<SpaceUpdate<Source, Source>>,
    /// Each namespace's name by index, for the metrics' `netns` label.
    pub names: Arc<Mutex<Vec<String>>>,
}

/// Opens a namespace's sockets (from threads that enter it, unless it is the monitor's
/// own). Blocking: threads are made and joined.
fn open(
    n: &Netns,
    opts: SocketOptions,
    filter: Option<crate::filter::Expr>,
) -> io::Result<SpaceSockets> {
    let fd = if n.own { None } else { Some(Arc::new(n.open()?)) };
    open_space(fd, &n.label(), opts, filter)
}

/// Why the namespaces `--netns` names could not be sampled; the message names them.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ScanError(pub String);

/// Finds the namespaces, keeps their indexes, and opens the new ones.
pub struct Scanner {
    which: Which,
    roots: Roots,
    opts: SocketOptions,
    sampler: SamplerConfig,
    /// Namespaces sampled: their index and what was found about them.
    known: HashMap<NsId, (u32, Netns)>,
    next: u32,
    /// Paths already reported as unreachable.
    reported: HashSet<PathBuf>,
    /// Namespaces sampled that share the host's TCP hash table.
    shared_hash: HashSet<NsId>,
    /// Whether the advice about shared tables was logged.
    advised: bool,
    names: Arc<Mutex<Vec<String>>>,
    metrics: Arc<Metrics>,
}

/// A namespace just opened.
pub struct Opened {
    /// Its index.
    pub ns: u32,
    /// Its dump socket.
    pub dump: Source,
    /// Its destroy listener, when it could be subscribed.
    pub destroy: Option<DestroyListener<Source>>,
    /// What its records say.
    pub label: Arc<NetnsLabel>,
    /// Its TCP segment counters, when they can be read.
    pub activity: Option<Activity>,
}

/// What the first scan gives the program.
pub struct Start {
    /// The first namespace.
    pub first: Opened,
    /// The others, ready to sample.
    pub others: Vec<Space<Source, Source>>,
    /// Every namespace's name by index (kept up to date by the scanner).
    pub names: Arc<Mutex<Vec<String>>>,
}

impl Scanner {
    /// A scanner of `which`, opening sockets with `opts` and making samplers with
    /// `sampler`.
    pub fn new(
        which: Which,
        opts: SocketOptions,
        sampler: SamplerConfig,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            which,
            roots: Roots::default(),
            opts,
            sampler,
            known: HashMap::new(),
            next: 0,
            reported: HashSet::new(),
            shared_hash: HashSet::new(),
            advised: false,
            names: Arc::default(),
            metrics,
        }
    }

    /// The first scan: every namespace `--netns` names that can be entered, opened.
    ///
    /// # Errors
    /// Not one namespace could be sampled; the message names what was tried.
    pub fn start(&mut self) -> Result<Start, ScanError> {
        let mut opened = self.scan_and_open();
        if opened.is_empty() {
            return Err(ScanError(format!(
                "--netns: no network namespace could be sampled ({})",
                self.reported
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let first = opened.remove(0);
        let others = opened.into_iter().map(|o| self.space(o)).collect::<Result<Vec<_>, _>>()?;
        Ok(Start { first, others, names: self.names.clone() })
    }

    fn space(&self, o: Opened) -> Result<Space<Source, Source>, ScanError> {
        let sampler = Sampler::new(o.dump, self.sampler.clone())
            .map_err(|e| ScanError(format!("filter: {e}")))?;
        Ok(Space::new(o.ns, Some(o.label), sampler, o.destroy).with_activity(o.activity))
    }

    /// Scans, and opens the namespaces not seen before: each with its index, sources and
    /// label, in the scan's order. Namespaces seen before and now gone leave `known`.
    fn scan_and_open(&mut self) -> Vec<Opened> {
        let known: HashMap<NsId, Netns> =
            self.known.iter().map(|(id, (_, n))| (*id, n.clone())).collect();
        let scan = netns::scan(&self.which, &self.roots, &known);
        let present: HashSet<NsId> = scan.found.iter().map(|n| n.id).collect();
        let mut unreachable = scan.unreadable.len() as u64;
        for (path, e) in &scan.unreadable {
            if self.reported.insert(path.clone()) {
                tracing::warn!(path = %path.display(), error = %e, "cannot read a network namespace; not sampled");
            }
        }
        let mut opened = Vec::new();
        for n in scan.found {
            if self.known.contains_key(&n.id) {
                continue;
            }
            match open(&n, self.opts, self.sampler.filter.clone()) {
                Ok(SpaceSockets { dump, destroy, activity, shared_hash }) => {
                    let ns = self.next;
                    self.next += 1;
                    let l = Arc::new(label(&n));
                    {
                        let mut names = self.names.locked();
                        if names.len() <= ns as usize {
                            names.resize(ns as usize + 1, String::new());
                        }
                        names[ns as usize] = l.name.clone();
                    }
                    tracing::info!(netns = %l.name, inode = n.id.inode, "sampling network namespace");
                    if shared_hash == Some(true) {
                        self.shared_hash.insert(n.id);
                    }
                    self.known.insert(n.id, (ns, n));
                    opened.push(Opened { ns, dump, destroy, label: l, activity });
                }
                Err(e) => {
                    unreachable += 1;
                    if self.reported.insert(n.path.clone()) {
                        tracing::warn!(netns = %n.label(), path = %n.path.display(), error = %e,
                            "cannot enter a network namespace (CAP_SYS_ADMIN?); not sampled");
                    }
                }
            }
        }
        self.metrics.netns_unreachable.set(unreachable);
        self.prune(&present);
        self.advise();
        opened
    }

    /// Forgets the namespaces the scan no longer finds (the caller ends their flows).
    fn prune(&mut self, present: &HashSet<NsId>) {
        self.known.retain(|id, _| present.contains(id));
        self.shared_hash.retain(|id| present.contains(id));
    }

    /// Counts the namespaces sampled that share the host's TCP hash table, and says once
    /// what that costs and what avoids it.
    fn advise(&mut self) {
        let shared = self.shared_hash.len();
        self.metrics.netns_shared_tcp_hash.set(shared as u64);
        if shared > 0 && !self.advised {
            self.advised = true;
            tracing::info!(
                namespaces = shared,
                "these namespaces share the host's TCP hash table: each full dump walks every TCP socket of the host once per namespace that moved; `sysctl net.ipv4.tcp_child_ehash_entries=4096` (Linux 6.1+) gives namespaces made after it a table of their own"
            );
        }
    }

    /// Rescans every `every` until the program stops (the updates' receiver goes), sending
    /// the namespaces that came and went.
    pub async fn run(mut self, every: Duration, tx: mpsc::Sender<SpaceUpdate<Source, Source>>) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // the first scan was `start`
        loop {
            tick.tick().await;
            if tx.is_closed() {
                return;
            }
            let before: HashSet<u32> = self.known.values().map(|(ns, _)| *ns).collect();
            // Scanning /proc and entering namespaces block: off the runtime's workers.
            let (me, opened) = match tokio::task::spawn_blocking(move || {
                let opened = self.scan_and_open();
                (self, opened)
            })
            .await
            {
                Ok(v) => v,
                Err(e) => {
                    tracing::error!(error = %e, "the namespace scan failed; no more rescans");
                    return;
                }
            };
            self = me;
            let now: HashSet<u32> = self.known.values().map(|(ns, _)| *ns).collect();
            for ns in before.difference(&now) {
                if tx.send(SpaceUpdate::Remove(*ns)).await.is_err() {
                    return;
                }
            }
            for o in opened {
                let sp = match self.space(o) {
                    Ok(sp) => sp,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot sample a new namespace");
                        continue;
                    }
                };
                if tx.send(SpaceUpdate::Add(Box::new(sp))).await.is_err() {
                    return;
                }
            }
        }
    }
}
