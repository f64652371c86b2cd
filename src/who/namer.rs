//! Names a record before it is written: its service from its cgroup (`services`) and its
//! remote end from the destination map (`dests`). The writer calls it through
//! [`Naming`], which `app` gives it; the web view names the flows it shows with [`name`], so a page
//! shows a record as it is written.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::dests::Dests;
use super::services::Services;
use crate::locks::Locked;
use crate::record::FlowStats;

/// Names each record before it is serialised (its service and destination), on the
/// writer's thread, the one stage that may block on the file system.
pub trait Naming: Send {
    /// Sets the names of `records`.
    fn name(&mut self, records: &mut [FlowStats]);
    /// The writer's periodic tick: reread what changed.
    fn tick(&mut self, _now: Instant) {}
    /// SIGHUP: reread what it names from.
    fn reopen(&mut self) {}
}

/// Sets `r`'s service (unless it has one) and its destination's name.
pub fn name(services: &mut Services, dests: &Dests, r: &mut FlowStats) {
    if r.service.is_none() {
        r.service = r.cgroup_id.and_then(|id| services.lookup(id));
    }
    if let Some(ip) = r.remote_ip() {
        r.dest_service = Some(dests.name(ip, r.id.dst_port).to_string());
    }
}

/// The names the writer gives records: one cache of services and one destination map,
/// shared with the web view.
pub struct RecordNamer {
    services: Arc<Mutex<Services>>,
    dests: Arc<Mutex<Dests>>,
}

impl RecordNamer {
    /// Names from `services` and `dests`.
    pub fn new(services: Arc<Mutex<Services>>, dests: Arc<Mutex<Dests>>) -> Self {
        RecordNamer { services, dests }
    }
}

impl Naming for RecordNamer {
    fn name(&mut self, records: &mut [FlowStats]) {
        if records.is_empty() {
            return;
        }
        let mut s = self.services.locked();
        let d = self.dests.locked();
        for r in records {
            name(&mut s, &d, r);
        }
    }

    fn tick(&mut self, now: Instant) {
        self.dests.locked().tick(now);
    }

    fn reopen(&mut self) {
        self.dests.locked().reload();
    }
}
