//! Who is behind each flow: the process that owns its socket (asked of the `processes`
//! walker, which answers between dumps) and the name of its remote end (`--dest-map`),
//! both parts of its traffic account.
//!
//! A flow first seen in a full dump asks for its socket's owner and counts no bytes until
//! the answer ([`Counted::pending`]); a listener asks once, so that a connection it
//! accepted and that is seen only in its destroy event (which carries no inode) inherits
//! its process. A flow seen only in its destroy event on the connecting side has no owner:
//! never a guess. How each flow's owner was found is counted at its end.

use std::net::IpAddr;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::accounts::{Counted, Names, listen_key};
use super::{Body, EndedFlow, Flow, Seen, Tracker};
use crate::who::processes::{Answer, How, Link, Owner, Request, Target};
use crate::wire::sock::SockKey;

/// Names a remote end: address and port → name.
pub type DestNamer = Box<dyn FnMut(IpAddr, u16) -> Arc<str> + Send>;

/// What the tracker keeps to attribute flows.
#[derive(Default)]
pub struct Attribution {
    link: Option<Link>,
    namer: Option<DestNamer>,
    /// Requests of this tick, sent at [`Tracker::ask_owners`].
    requests: Vec<Request>,
    /// Owners of whole flows being followed, by cookie (found or not); a packed flow keeps
    /// its own (`cold.rs`).
    pub(super) owners: FxHashMap<u64, Owner>,
    /// Listeners' owners, by listen key.
    listeners: FxHashMap<u64, Owner>,
    /// Listen keys already asked for, with the listener's inode then: a listener asks
    /// again only when it is another socket (restarted), not because it was not found
    /// (one that cannot be found, another user's or another pid namespace's, would cost a
    /// walk at every listeners' dump).
    asked: FxHashMap<u64, u32>,
    /// Flows ended, by how their owner was found ([`How::ALL`] order).
    pub counts: [u64; How::ALL.len()],
}

impl std::fmt::Debug for Attribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attribution")
            .field("processes", &self.link.is_some())
            .field("destinations", &self.namer.is_some())
            .field("owners", &self.owners.len())
            .finish()
    }
}

impl Attribution {
    fn count(&mut self, how: How) {
        let i = How::ALL.iter().position(|&h| h == how).expect("every How is listed");
        self.counts[i] += 1;
    }

    /// A window cut from a flow that goes on: its owner so far.
    pub(super) fn owner_now(&self, cookie: u64) -> Option<Owner> {
        self.owners.get(&cookie).filter(|o| o.found()).cloned()
    }

    /// The name of a flow's remote end, when a namer is set.
    pub(super) fn dest(&mut self, key: &SockKey) -> Option<Arc<str>> {
        self.namer.as_mut().map(|n| n(key.remote_ip(), key.dport))
    }
}

impl Tracker {
    /// Attributes flows to processes through `link` (None: `--no-process`) and names their
    /// remote ends with `namer` (None: not named).
    pub fn attribute(&mut self, link: Option<Link>, namer: Option<DestNamer>) {
        self.attr.link = link;
        self.attr.namer = namer;
    }

    /// Flows ended so far by how their owner was found, in [`How::ALL`] order.
    pub fn owner_counts(&self) -> [u64; How::ALL.len()] {
        self.attr.counts
    }

    /// The account of a flow being opened, and whether its bytes wait for its owner.
    pub(super) fn open_account(
        &mut self,
        f: &Flow,
        inode: u32,
        seen: Seen,
        uid: Option<u32>,
    ) -> Counted {
        let dest = self.attr.dest(&f.key);
        let key = listen_key(self.netns, f.key.sport);
        let mut owner = None;
        let mut pending = false;
        if let Some(link) = self.attr.link.as_ref() {
            // An accepted connection is its listener's process's, once that is known: no
            // walk for it (docs/processes.md, "What naming costs").
            let inherited = f
                .passive_open
                .then(|| self.attr.listeners.get(&key))
                .flatten()
                .map(|o| Owner { how: How::Listener, ..o.clone() });
            if inherited.is_some() {
                link.inherited();
                owner = inherited;
            } else if seen == Seen::Dump && inode != 0 {
                let r = Request {
                    target: Target::Flow(f.key.cookie),
                    inode: inode.into(),
                    cgroup_id: f.cgroup_id,
                };
                self.attr.requests.push(r);
                pending = true;
            }
        }
        let names = Names {
            dest: dest.as_ref(),
            comm: owner.as_ref().map(|o: &Owner| (o.name_id, &o.name)),
        };
        let slot = self.accounts.slot_named(self.netns, f.cgroup_id, f.key.sport, uid, names);
        if let Some(o) = owner {
            self.attr.owners.insert(f.key.cookie, o);
        }
        Counted { slot, pending, ..Counted::default() }
    }

    /// A listener seen in a dump: its owner is asked for once.
    pub(super) fn listener_seen(&mut self, port: u16, inode: u32, cgroup_id: u64) {
        let key = listen_key(self.netns, port);
        if self.attr.link.is_none()
            || inode == 0
            || self.attr.asked.insert(key, inode) == Some(inode)
        {
            return;
        }
        let r = Request { target: Target::Listener(key), inode: inode.into(), cgroup_id };
        self.attr.requests.push(r);
    }

    /// Sends the requests of flows opened since the last call to the walker, leaving out
    /// the flows that have ended since: a connection that lived less than a tick costs no
    /// walk (its owner would not be found anyway: the walk looks for open sockets). Call it
    /// once per tick.
    pub fn ask_owners(&mut self) {
        let Some(link) = self.attr.link.as_ref() else { return };
        let (index, hot, waiting) = (&self.index, &self.hot, &self.waiting);
        let mut batch = std::mem::take(&mut self.attr.requests);
        // (A flow gone first was counted as not found at its end.)
        batch.retain(|r| match r.target {
            Target::Flow(c) => index.contains(c, hot) || waiting.contains_key(&c),
            Target::Listener(_) => true,
        });
        if batch.is_empty() {
            return;
        }
        if let Err(batch) = link.send(batch) {
            // The walker is behind: these are not looked for.
            for r in batch {
                self.apply(Answer { target: r.target, owner: Owner::none(How::Skipped) });
            }
        }
    }

    /// Applies the walker's answers ready now: a flow whose owner is now known moves to
    /// its program's account, with the bytes it has carried so far. Cheap when there is
    /// nothing to do; call it before destroy events too.
    pub fn settle_owners(&mut self) {
        let Some(link) = self.attr.link.as_ref() else { return };
        let batches: Vec<Vec<Answer>> = link.ready().collect();
        let mut many = false;
        for batch in batches {
            many |= batch.len() >= crate::who::processes::TRIM_AFTER;
            for a in batch {
                self.apply(a);
            }
        }
        if many {
            crate::who::processes::give_back_freed_memory();
        }
    }

    fn apply(&mut self, a: Answer) {
        let cookie = match a.target {
            Target::Listener(key) => {
                if a.owner.found() {
                    self.attr.listeners.insert(key, a.owner);
                } else {
                    self.attr.listeners.remove(&key); // a restarted listener not found
                }
                return;
            }
            Target::Flow(c) => c,
        };
        let f = match self.index.get(cookie, &self.hot) {
            Some(i) => match &mut self.slab[i] {
                Body::Live(f) => f,
                &mut Body::Cold(at) => {
                    // Packed (idle since the first dump, usually): settled and packed
                    // again, with its owner, rather than made whole.
                    let (mut f, _) = self.cold.get(at);
                    settle(&mut self.accounts, &mut f, &a.owner);
                    let edge = f.samples[0];
                    self.slab[i] = Body::Cold(self.cold.replace(at, &f, &edge, Some(&a.owner)));
                    return;
                }
            },
            None => match self.waiting.get_mut(&cookie) {
                Some(w) => &mut w.flow,
                None => return, // it ended first: counted as not found at its end
            },
        };
        settle(&mut self.accounts, f, &a.owner);
        self.attr.owners.insert(cookie, a.owner);
    }

    /// A flow leaving for good: its waiting bytes are counted, and how its owner was found
    /// (unless which side it was is still undecided: [`Tracker::resolve_sides`] counts it).
    pub(super) fn owner_at_end(&mut self, f: &mut Flow, side_known: bool) -> Option<Owner> {
        // Still waiting for its answer: it closed before the walker found it.
        let unanswered = if f.counted.pending { How::NotFound } else { How::None };
        release(&mut self.accounts, f);
        let owner = self.attr.owners.remove(&f.key.cookie);
        if side_known {
            self.attr.count(owner.as_ref().map_or(unanswered, |o| o.how));
        }
        owner.filter(Owner::found)
    }

    /// A flow seen only in its destroy event whose side was just decided: the accepted
    /// side inherits its listener's process.
    pub(super) fn owner_of_side(&mut self, e: &mut EndedFlow, ns: u32) {
        if let Some(link) = self.attr.link.as_ref().filter(|_| e.flow.passive_open) {
            let key = listen_key(ns, e.flow.key.sport);
            e.owner =
                self.attr.listeners.get(&key).map(|o| Owner { how: How::Listener, ..o.clone() });
            if e.owner.is_some() {
                link.inherited();
            }
        }
        let how = e.owner.as_ref().map_or(How::None, |o| o.how);
        self.attr.count(how);
    }
}

/// A flow's owner is known: its account is its program's when one was found, and its
/// waiting bytes are counted.
fn settle(accounts: &mut super::accounts::Accounts, f: &mut Flow, owner: &Owner) {
    if owner.found() {
        f.counted.slot = accounts.reslot(f.counted.slot, (owner.name_id, &owner.name));
    }
    release(accounts, f);
}

/// Counts a flow's waiting bytes, if they wait, into its account as it now is.
fn release(accounts: &mut super::accounts::Accounts, f: &mut Flow) {
    if f.counted.pending {
        f.counted.pending = false;
        let l = &f.last;
        accounts.count(&mut f.counted, l.bytes_acked, l.bytes_received, l.bytes_retrans);
    }
}

#[cfg(test)]
#[path = "owners_tests.rs"]
mod tests;
