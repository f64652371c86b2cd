//! Several network namespaces in one table (`--netns`): the sampling task tells the
//! tracker which namespace the sockets it now shows are in, and what records should say
//! about each. Cookies are unique host-wide, so flows stay keyed by cookie; a flow's
//! namespace is kept beside it (only for namespaces other than the first, index 0).

use std::sync::Arc;

use super::{EndReason, EndedFlow, Tracker};
use crate::record::NetnsLabel;

impl Tracker {
    /// The sockets observed from now on (dumps, exact answers, destroy events) are in the
    /// namespace of index `ns`.
    pub fn set_netns(&mut self, ns: u32) {
        self.netns = ns;
    }

    /// What records of namespace `ns` carry as `Netns`.
    pub fn set_label(&mut self, ns: u32, label: Arc<NetnsLabel>) {
        let i = ns as usize;
        if self.labels.len() <= i {
            self.labels.resize(i + 1, None);
        }
        self.labels[i] = Some(label);
    }

    /// Whether records are labelled with namespaces (several are sampled).
    pub fn several_netns(&self) -> bool {
        !self.labels.is_empty()
    }

    /// Active flows per namespace index (the first's are those in no other).
    pub fn flows_per_netns(&self) -> Vec<u64> {
        let mut v = vec![0u64; self.labels.len().max(1)];
        for &ns in self.flow_netns.values() {
            if let Some(c) = v.get_mut(ns as usize) {
                *c += 1;
            }
        }
        let others: u64 = v[1..].iter().sum();
        v[0] = (self.active() as u64).saturating_sub(others);
        v
    }

    /// The namespace of the flow with `cookie` (0 when unknown or the first).
    pub fn netns_of(&self, cookie: u64) -> u32 {
        self.flow_netns.get(&cookie).copied().unwrap_or(0)
    }

    /// Namespace `ns` is gone (no process and no name holds it any more, or it may no
    /// longer be entered): its flows end as gone at `ts_ns`, those waiting for a destroy
    /// event too, since its events can no longer be read.
    pub fn end_netns(&mut self, ns: u32, ts_ns: u64, out: &mut Vec<EndedFlow>) {
        let cookies: Vec<u64> =
            self.flow_netns.iter().filter(|&(_, &n)| n == ns).map(|(&c, _)| c).collect();
        for c in cookies {
            if let Some((f, rest)) = self.remove(c) {
                self.hand_on(f, rest, EndReason::Gone, ts_ns, None, out);
            } else if let Some(w) = self.waiting.remove(&c) {
                self.hand_on(w.flow, w.rest, EndReason::Gone, w.missed_ns, None, out);
            }
        }
        if let Some(l) = self.labels.get_mut(ns as usize) {
            *l = None;
        }
    }
}
