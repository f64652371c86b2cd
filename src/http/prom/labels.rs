//! Label values for the flow families: services, ports and namespaces, each bounded (the
//! first ones keep their own value, later ones share `other`).

use std::sync::{Arc, Mutex};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::locks::Locked;
use crate::tracker::accounts::{NO_UID, OVERFLOW_CGROUP};
use crate::who::services::Services;

/// Distinct `port` label values before the rest share `other`.
pub const MAX_PORT_LABELS: usize = 64;

/// Default distinct `service` label values (`--metrics-top-services`).
pub const DEFAULT_TOP_SERVICES: usize = 20;

/// The service an account's owner belongs to: its cgroup's, or with none, its sockets'
/// uid's; the overflow account is `other`. (`/metrics` and the web view name services
/// alike.)
pub(crate) fn owner_name(services: &mut Services, cgroup_id: u64, uid: u32) -> String {
    if cgroup_id == OVERFLOW_CGROUP {
        "other".into()
    } else if cgroup_id == 0 && uid != NO_UID {
        services.name_of_uid(uid)
    } else {
        services.name(cgroup_id)
    }
}

/// The `listen_port` of a flow's connecting end.
pub(super) const CLIENT: &str = "client";

/// Decides label values, once per cgroup and port.
#[derive(Debug)]
pub(super) struct Labeler {
    services: Arc<Mutex<Services>>,
    by_owner: FxHashMap<(u64, u32), String>,
    given: FxHashSet<String>,
    top: usize,
    ports: FxHashSet<u16>,
    netns_given: FxHashSet<String>,
    /// `dest_service` values given, and how many may be.
    dests: (FxHashSet<String>, usize),
    /// `comm` values given, and how many may be.
    comms: (FxHashSet<String>, usize),
}

/// `name` while it was given before or fewer than `top` were, else `other`.
fn bounded((given, top): &mut (FxHashSet<String>, usize), name: &str) -> String {
    if given.contains(name) || given.len() < *top {
        given.insert(name.to_string());
        name.to_string()
    } else {
        "other".into()
    }
}

impl Labeler {
    /// Gives no label yet; the first `top` services keep their own.
    pub(super) fn new(services: Arc<Mutex<Services>>, top: usize) -> Self {
        Self {
            services,
            by_owner: FxHashMap::default(),
            given: FxHashSet::default(),
            top,
            ports: FxHashSet::default(),
            netns_given: FxHashSet::default(),
            dests: (FxHashSet::default(), DEFAULT_TOP_SERVICES),
            comms: (FxHashSet::default(), DEFAULT_TOP_SERVICES),
        }
    }

    /// Keeps the first `dests` destination names and `comms` program names.
    pub(super) fn set_tops(&mut self, dests: usize, comms: usize) {
        (self.dests.1, self.comms.1) = (dests, comms);
    }

    /// A `dest_service` label (`unknown` for an account with no name).
    pub(super) fn dest(&mut self, name: Option<&str>) -> String {
        bounded(&mut self.dests, name.unwrap_or("unknown"))
    }

    /// A `comm` label (`unknown` for an account with no program).
    pub(super) fn comm(&mut self, name: Option<&str>) -> String {
        bounded(&mut self.comms, name.unwrap_or("unknown"))
    }

    /// The label of an account's owner: its cgroup, or with none, its sockets' uid.
    pub(super) fn service(&mut self, cgroup_id: u64, uid: u32) -> String {
        if let Some(s) = self.by_owner.get(&(cgroup_id, uid)) {
            return s.clone();
        }
        let name = {
            let mut s = self.services.locked();
            owner_name(&mut s, cgroup_id, uid)
        };
        let label = if self.given.contains(&name) || self.given.len() < self.top {
            self.given.insert(name.clone());
            name
        } else {
            "other".into()
        };
        self.by_owner.insert((cgroup_id, uid), label.clone());
        label
    }

    /// A namespace's label: its name while fewer than `top` names were given, else `other`;
    /// a name given keeps its label.
    pub(super) fn netns(&mut self, name: &str) -> String {
        let mut given = (std::mem::take(&mut self.netns_given), self.top);
        let label = bounded(&mut given, name);
        self.netns_given = given.0;
        label
    }

    /// The `listen_port` label: the listening port a flow's server end accepted it on, or
    /// `client` for the connecting end (whose own port is an ephemeral one, which would only
    /// grow the series).
    pub(super) fn port(&mut self, p: u16) -> String {
        if p == 0 {
            return CLIENT.into();
        }
        if self.ports.contains(&p) || self.ports.len() < MAX_PORT_LABELS {
            self.ports.insert(p);
            p.to_string()
        } else {
            "other".into()
        }
    }
}

/// A flow aggregate's labels: `netns` only when namespaces are told apart.
pub(super) fn labels<'a>(ns: &'a str, svc: &'a str, port: &'a str) -> Vec<(&'static str, &'a str)> {
    let mut v = Vec::with_capacity(3);
    if !ns.is_empty() {
        v.push(("netns", ns));
    }
    v.push(("service", svc));
    v.push(("listen_port", port));
    v
}
