//! The flow index: a flow's cookie → its slot in the table.
//!
//! A `FxHashMap<u64, u32>` keeps each cookie beside its slot: 16 bytes a bucket and a
//! control byte, a sixth of all the monitor held at a million flows (benches/RESULTS.md,
//! D14). Each slot's cookie is already in its hot entry,
//! so this table keeps the slot alone, 4 bytes, and compares and rehashes through the hot
//! array: hashbrown's `HashTable`, the engine of the standard map, made for such tables.
//!
//! The one rule: every slot the table holds names the hot entry of the cookie it was
//! inserted under when the table is searched or grows. Callers move slots by removing
//! and inserting again, or by [`Index::set`] just before the move.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use super::FlowHead;

#[derive(Debug, Default)]
pub(super) struct Index(HashTable<u32>);

fn hash(cookie: u64) -> u64 {
    FxBuildHasher.hash_one(cookie)
}

/// Whether `slot` holds `cookie`'s entry.
fn at(hot: &[FlowHead], cookie: u64) -> impl Fn(&u32) -> bool + '_ {
    move |&s| hot.get(s as usize).is_some_and(|h| h.cookie == cookie)
}

impl Index {
    /// `cookie`'s slot.
    pub(super) fn get(&self, cookie: u64, hot: &[FlowHead]) -> Option<usize> {
        self.0.find(hash(cookie), at(hot, cookie)).map(|&s| s as usize)
    }

    /// Whether `cookie` has a slot.
    pub(super) fn contains(&self, cookie: u64, hot: &[FlowHead]) -> bool {
        self.get(cookie, hot).is_some()
    }

    /// Files `cookie` under `slot`, whose hot entry it already is.
    pub(super) fn insert(&mut self, cookie: u64, slot: usize, hot: &[FlowHead]) {
        let rehash = |&s: &u32| hash(hot[s as usize].cookie);
        self.0.insert_unique(hash(cookie), slot as u32, rehash);
    }

    /// Takes `cookie` out; its slot.
    pub(super) fn remove(&mut self, cookie: u64, hot: &[FlowHead]) -> Option<usize> {
        let e = self.0.find_entry(hash(cookie), at(hot, cookie)).ok()?;
        Some(e.remove().0 as usize)
    }

    /// `cookie`'s entry now names `slot` (the caller moves its hot entry there next).
    pub(super) fn set(&mut self, cookie: u64, slot: usize, hot: &[FlowHead]) {
        if let Some(s) = self.0.find_mut(hash(cookie), at(hot, cookie)) {
            *s = slot as u32;
        }
    }

    /// Bytes its buckets take.
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        self.0.allocation_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(cookie: u64) -> FlowHead {
        FlowHead {
            cookie,
            fp: 0,
            last_ts_ns: 0,
            seen_gen: 0,
            deduped: 0,
            tuple: 0,
            options: 0,
            changed: false,
            marks: 0,
            tiered: false,
            max_gap_us: 0,
            exact: 0,
        }
    }

    #[test]
    fn slots_follow_their_cookies_through_moves_and_removals() {
        let mut hot: Vec<FlowHead> = Vec::new();
        let mut ix = Index::default();
        for c in 0..100_000u64 {
            hot.push(head(c * 7 + 1));
            ix.insert(c * 7 + 1, hot.len() - 1, &hot);
        }
        // 4 bytes a bucket and a control byte: 131,072 buckets, under 700 KB (the map
        // took 16 and one: 2.2 MB).
        assert!(ix.bytes() < 700_000, "{} bytes", ix.bytes());
        // A removal moves the last slot into the hole, as the tracker's does.
        for c in [8u64, 1, 700_000 - 6] {
            let slot = ix.remove(c, &hot).unwrap();
            let last = hot.len() - 1;
            if slot != last {
                ix.set(hot[last].cookie, slot, &hot);
            }
            hot.swap_remove(slot);
            assert_eq!(ix.get(c, &hot), None);
        }
        for (i, h) in hot.iter().enumerate() {
            assert_eq!(ix.get(h.cookie, &hot), Some(i));
        }
        assert!(!ix.contains(2, &hot) && ix.contains(15, &hot));
    }
}
