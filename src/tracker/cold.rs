//! Idle flows, packed: what a flow that has not changed for [`COLD_AFTER_NS`] keeps.
//!
//! A tracked flow is a 320-byte [`Flow`] with a sample stage, its owner in a map beside it:
//! about 600 bytes a flow in all, most of the memory of a host of idle keep-alive sockets
//! (benches/RESULTS.md, D15). An idle flow needs none of that room. Its
//! window holds one retained sample (a flow that goes idle with more writes them first, as
//! an interim record: `Tracker::freeze_idle`), so what it keeps is its identity, its latest
//! counters, that one sample and its owner, about 90 bytes once each number is written in
//! as few bytes as it needs (LEB128: seven bits a byte). Those bytes sit end to end in one
//! arena, so an idle flow costs no allocation of its own. The first sample that changes, an
//! ending or a view reads the flow back whole ([`ColdStore::get`]); nothing is lost or
//! rounded.
//!
//! No crate does this: serde formats (bincode, postcard) would encode the same varints but
//! need derives on `Flow`, `Last` and `Retained`, whose packing is tuned by hand, and give
//! no arena. The format is private to this process and never leaves it.
//!
//! Freed entries are marked dead and their bytes reclaimed by sliding the live ones down
//! when the dead take more than a quarter of the arena ([`ColdStore::compact`]), so the
//! arena stays within 4/3 of what its flows need, and a compaction moves less than three
//! times the bytes freed since the last.

use std::borrow::Cow;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::accounts::Counted;
use super::decode::l_busy;
use super::flow::{CcName, Flow, Last};
use super::pool::StageRef;
use super::{EndedFlow, Rest, Tracker, label_of, sync};
use crate::record::Retained;
use crate::who::processes::{How, Owner};
use crate::wire::sock::SockKey;

/// A flow with no retained sample for this long (and not in the hot set) is packed by a
/// complete dump (they look every 10 s). A minute: a connection used every few seconds (a
/// pool to a database, a keep-alive client) stays whole and writes no extra record; one
/// idle for a minute has likely stopped (docs/records.md, "Idle flows").
pub const COLD_AFTER_NS: u64 = 60_000_000_000;

/// How often complete dumps look for whole flows to pack: a flow is packed between one and
/// about 1 1/6 minutes after its last change.
const FREEZE_EVERY_NS: u64 = 10_000_000_000;

/// Where a tracked flow's data is: whole, or packed in the cold store at an offset.
#[derive(Debug)]
pub(super) enum Body {
    Live(Box<Flow>),
    Cold(u32),
}

impl Body {
    /// The flow, when whole.
    pub(super) fn live(&self) -> Option<&Flow> {
        match self {
            Body::Live(f) => Some(f),
            Body::Cold(_) => None,
        }
    }

    /// The flow, when whole.
    pub(super) fn live_mut(&mut self) -> Option<&mut Flow> {
        match self {
            Body::Live(f) => Some(f),
            Body::Cold(_) => None,
        }
    }
}

/// The packed idle flows, end to end.
#[derive(Debug, Default)]
pub(super) struct ColdStore {
    bytes: Vec<u8>,
    /// Bytes of freed entries still in `bytes`.
    dead: usize,
    /// Entries live.
    live: usize,
    /// Congestion-control names, by the index entries give.
    cc: Vec<CcName>,
    /// Process names by id (every process of a name shares one).
    names: FxHashMap<u32, Arc<str>>,
}

/// Flag bits of an entry.
const PARTIAL_START: u8 = 1;
const PREEXISTING: u8 = 2;
const PASSIVE_OPEN: u8 = 4;
const PENDING: u8 = 8;
const V6: u8 = 16;
const OWNED: u8 = 32;
/// All 16 bytes of each address are written (IPv6, or an IPv4 key with bytes past the
/// fourth, which the kernel zeroes).
const WIDE: u8 = 64;

fn put_u(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads entries back; entries are written by this process only, so a short read is a bug,
/// not input (it yields zeros rather than panicking).
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn u(&mut self) -> u64 {
        let mut v = 0u64;
        let mut shift = 0;
        while let Some(&byte) = self.b.get(self.at) {
            self.at += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 || shift >= 63 {
                break;
            }
            shift += 7;
        }
        v
    }

    fn u32(&mut self) -> u32 {
        self.u() as u32
    }

    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        if let Some(src) = self.b.get(self.at..self.at + N) {
            a.copy_from_slice(src);
        }
        self.at += N;
        a
    }
}

/// The numbers of [`Last`] in a fixed order. Those whose absence is the type's largest value
/// are written one up, so that absent takes one byte.
fn last_words(l: &Last) -> [u64; 24] {
    [
        l.state.into(),
        l.min_rtt_us.wrapping_add(1).into(),
        l.total_retrans.into(),
        l.delivered.into(),
        l.delivered_ce.into(),
        l.snd_mss.into(),
        l.max_pacing_rate.wrapping_add(1),
        l.bytes_acked,
        l.bytes_received,
        l.bytes_sent,
        l.bytes_retrans,
        l.busy_ms.wrapping_add(1).into(),
        l.rwnd_limited_ms.into(),
        l.sndbuf_limited_ms.into(),
        l.segs_out.into(),
        l.reord_seen.into(),
        l.dsack_dups.into(),
        l.snd_wnd.into(),
        l.snd_wnd_max.wrapping_sub(l.snd_wnd).into(),
        l.sndbuf.into(),
        l.total_rto.into(),
        l.recent_bps.to_bits().into(),
        l.total_rto_time_ms.wrapping_add(1).into(),
        l.segs_in.into(),
    ]
}

fn last_from(w: [u64; 24]) -> Last {
    Last {
        state: w[0] as u8,
        min_rtt_us: (w[1] as u32).wrapping_sub(1),
        total_retrans: w[2] as u32,
        delivered: w[3] as u32,
        delivered_ce: w[4] as u32,
        snd_mss: w[5] as u16,
        max_pacing_rate: w[6].wrapping_sub(1),
        bytes_acked: w[7],
        bytes_received: w[8],
        bytes_sent: w[9],
        bytes_retrans: w[10],
        busy_ms: (w[11] as u32).wrapping_sub(1),
        rwnd_limited_ms: w[12] as u32,
        sndbuf_limited_ms: w[13] as u32,
        segs_out: w[14] as u32,
        reord_seen: w[15] as u32,
        dsack_dups: w[16] as u32,
        snd_wnd: w[17] as u32,
        snd_wnd_max: (w[18] as u32).wrapping_add(w[17] as u32),
        sndbuf: w[19] as u32,
        total_rto: w[20] as u16,
        recent_bps: f32::from_bits(w[21] as u32),
        total_rto_time_ms: (w[22] as u16).wrapping_sub(1),
        segs_in: w[23] as u32,
    }
}

/// What the edge sample shares with the latest counters, taken from the same socket
/// reply (retransmits, MSS, the chrono counters' low bits, state): written as their
/// difference (XOR), 0 and one byte when equal, as they are unless the flow was in
/// TIME-WAIT since.
fn edge_words(edge: &Retained, l: &Last) -> [u64; 13] {
    let mut w = edge.to_words();
    for (i, v) in shared_with(l) {
        w[i] ^= v;
    }
    w
}

fn edge_from(mut w: [u64; 13], l: &Last) -> Retained {
    for (i, v) in shared_with(l) {
        w[i] ^= v;
    }
    Retained::from_words(w)
}

/// The words of [`Retained::to_words`] that `l` predicts, by index.
fn shared_with(l: &Last) -> [(usize, u64); 6] {
    let ms16 = |v: u32| u64::from(v & 0xffff);
    [
        (3, l.total_retrans.into()),
        (8, l.snd_mss.into()),
        (9, ms16(l.busy_ms)),
        (10, ms16(l.rwnd_limited_ms)),
        (11, ms16(l.sndbuf_limited_ms)),
        (12, l.state.into()),
    ]
}

impl ColdStore {
    /// Packs `f`, whose window holds the one retained sample `edge`, with its owner; the
    /// entry's offset. The flow's per-window fields (deduped count, option flags, last
    /// sample time) stay in the tracker's hot entry, and its window's first values are
    /// `edge`'s.
    pub(super) fn put(&mut self, f: &Flow, edge: &Retained, owner: Option<&Owner>) -> u32 {
        let mut e = Self::encode(&mut self.cc, &mut self.names, f, edge, owner);
        if f.counted.pending && owner.is_none() {
            // Room for the owner its answer brings (pid, name, how: up to 11 bytes, 5 for
            // the usual pid under 2^21), so that [`ColdStore::replace`] writes it in place.
            e.resize(e.len() + 6, 0);
        }
        let at = self.bytes.len();
        // The entry's length, doubled, with the low bit set once it is freed.
        put_u(&mut self.bytes, (e.len() as u64) << 1);
        self.bytes.extend_from_slice(&e);
        self.live += 1;
        u32::try_from(at).expect("the cold store stays under 4 GiB (about 40 million flows)")
    }

    /// Packs `f` over the entry at `at` when it fits there (trailing bytes are never read),
    /// else frees that entry and packs it anew; the entry's offset.
    pub(super) fn replace(
        &mut self,
        at: u32,
        f: &Flow,
        edge: &Retained,
        owner: Option<&Owner>,
    ) -> u32 {
        let e = Self::encode(&mut self.cc, &mut self.names, f, edge, owner);
        let mut r = Reader { b: &self.bytes, at: at as usize };
        let word = r.u();
        let (room, start) = ((word >> 1) as usize, r.at);
        if word & 1 == 0 && e.len() <= room {
            self.bytes[start..start + e.len()].copy_from_slice(&e);
            return at;
        }
        self.free(at);
        self.put(f, edge, owner)
    }

    fn encode(
        cc_names: &mut Vec<CcName>,
        names: &mut FxHashMap<u32, Arc<str>>,
        f: &Flow,
        edge: &Retained,
        owner: Option<&Owner>,
    ) -> Vec<u8> {
        let mut e = Vec::with_capacity(128);
        put_u(&mut e, f.key.cookie);
        let v6 = f.key.family != libc::AF_INET as u8;
        let wide = v6 || f.key.src[4..] != [0; 12] || f.key.dst[4..] != [0; 12];
        let bits = [
            (f.partial_start, PARTIAL_START),
            (f.preexisting, PREEXISTING),
            (f.passive_open, PASSIVE_OPEN),
            (f.counted.pending, PENDING),
            (v6, V6),
            (owner.is_some(), OWNED),
            (wide, WIDE),
        ];
        let flags = bits.iter().filter(|b| b.0).fold(0, |acc, b| acc | b.1);
        e.push(flags);
        let n = if wide { 16 } else { 4 };
        e.extend_from_slice(&f.key.src[..n]);
        e.extend_from_slice(&f.key.dst[..n]);
        for v in [f.key.sport.into(), f.key.dport.into(), f.cgroup_id, f.seq.into()] {
            put_u(&mut e, v);
        }
        let c = &f.counted;
        for v in [c.slot.into(), c.acked, c.received, c.retrans] {
            put_u(&mut e, v);
        }
        if let Some(o) = owner {
            let how = How::ALL.iter().position(|&h| h == o.how).unwrap_or(0);
            for v in [o.pid.into(), o.name_id.into(), how as u64] {
                put_u(&mut e, v);
            }
            names.entry(o.name_id).or_insert_with(|| o.name.clone());
        }
        let cc = match cc_names.iter().position(|&c| c == f.cc) {
            Some(i) => i,
            None => {
                cc_names.push(f.cc);
                cc_names.len() - 1
            }
        };
        put_u(&mut e, cc as u64);
        for v in last_words(&f.last).into_iter().chain(edge_words(edge, &f.last)) {
            put_u(&mut e, v);
        }
        e
    }

    /// The flow packed at `at`, whole again (its window: the one sample), with its owner.
    pub(super) fn get(&self, at: u32) -> (Flow, Option<Owner>) {
        let mut r = Reader { b: &self.bytes, at: at as usize };
        let _len = r.u();
        let cookie = r.u();
        let flags = r.bytes::<1>()[0];
        let family = if flags & V6 != 0 { libc::AF_INET6 } else { libc::AF_INET } as u8;
        let mut key = SockKey { family, src: [0; 16], dst: [0; 16], sport: 0, dport: 0, cookie };
        if flags & WIDE != 0 {
            key.src = r.bytes::<16>();
            key.dst = r.bytes::<16>();
        } else {
            key.src[..4].copy_from_slice(&r.bytes::<4>());
            key.dst[..4].copy_from_slice(&r.bytes::<4>());
        }
        (key.sport, key.dport) = (r.u() as u16, r.u() as u16);
        let (cgroup_id, seq) = (r.u(), r.u32());
        let counted = Counted {
            slot: r.u32(),
            pending: flags & PENDING != 0,
            acked: r.u(),
            received: r.u(),
            retrans: r.u(),
        };
        let owner = (flags & OWNED != 0).then(|| {
            let (pid, name_id, how) = (r.u32(), r.u32(), r.u() as usize);
            let how = How::ALL.get(how).copied().unwrap_or(How::None);
            match self.names.get(&name_id) {
                Some(name) if pid != 0 => Owner { pid, name_id, name: name.clone(), how },
                _ => Owner::none(how),
            }
        });
        let cc = self.cc.get(r.u() as usize).copied().unwrap_or_default();
        let last = last_from(std::array::from_fn(|_| r.u()));
        let edge = edge_from(std::array::from_fn(|_| r.u()), &last);
        let f = Flow {
            counted,
            last,
            cc,
            stage: StageRef { window: 1, ..StageRef::NONE },
            samples: vec![edge],
            key,
            cgroup_id,
            first_ts_ns: edge.ts_ns,
            last_ts_ns: edge.ts_ns,
            first_bytes_acked: last.bytes_acked,
            first_bytes_received: last.bytes_received,
            first_chrono: [l_busy(&last), last.rwnd_limited_ms, last.sndbuf_limited_ms],
            seq,
            deduped: 0,
            options: 0,
            partial_start: flags & PARTIAL_START != 0,
            preexisting: flags & PREEXISTING != 0,
            passive_open: flags & PASSIVE_OPEN != 0,
        };
        (f, owner)
    }

    /// Frees the entry at `at`.
    pub(super) fn free(&mut self, at: u32) {
        let mut r = Reader { b: &self.bytes, at: at as usize };
        let word = r.u();
        let end = r.at;
        let head = end - at as usize;
        if word & 1 == 0 {
            // Rewritten in place, the same number of bytes: the low bit only.
            let mut w = Vec::with_capacity(head);
            put_u(&mut w, word | 1);
            self.bytes[at as usize..end].copy_from_slice(&w);
            self.dead += head + (word >> 1) as usize;
            self.live -= 1;
        }
    }

    /// Entries live.
    pub(super) fn len(&self) -> usize {
        self.live
    }

    /// Bytes held (live entries and dead ones not yet reclaimed).
    pub(super) fn bytes_held(&self) -> usize {
        self.bytes.len()
    }

    /// Whether dead entries take more than a quarter of the arena (and 4 KiB), or all of it.
    pub(super) fn compact_due(&self) -> bool {
        (self.dead > 4096 && self.dead * 4 > self.bytes.len()) || (self.live == 0 && self.dead > 0)
    }

    /// Slides the live entries down over the dead, in order; `moved(cookie, at)` learns each
    /// moved entry's new offset.
    pub(super) fn compact(&mut self, mut moved: impl FnMut(u64, u32)) {
        let (mut from, mut to) = (0usize, 0usize);
        while from < self.bytes.len() {
            let mut r = Reader { b: &self.bytes, at: from };
            let word = r.u();
            let end = r.at + (word >> 1) as usize;
            if word & 1 == 0 {
                let cookie = r.u();
                if from != to {
                    self.bytes.copy_within(from..end, to);
                    moved(cookie, to as u32);
                }
                to += end - from;
            }
            from = end;
        }
        self.bytes.truncate(to);
        self.dead = 0;
    }
}

impl Tracker {
    /// The flow packed at `at`, whole, freed from the store; its owner goes back to the
    /// owners' map, where whole flows keep it.
    pub(super) fn unpack(&mut self, at: u32) -> Flow {
        let (f, owner) = self.cold.get(at);
        self.cold.free(at);
        if let Some(o) = owner {
            self.attr.owners.insert(f.key.cookie, o);
        }
        f
    }

    /// The flow in `slot`, made whole first if it was packed.
    pub(super) fn wake(&mut self, slot: usize) -> &mut Flow {
        if let Body::Cold(at) = self.slab[slot] {
            let mut f = self.unpack(at);
            sync(&mut f, &self.hot[slot]);
            self.slab[slot] = Body::Live(Box::new(f));
        }
        match &mut self.slab[slot] {
            Body::Live(f) => f,
            Body::Cold(_) => unreachable!("made whole just above"),
        }
    }

    /// The flow in `slot` to read: in place when whole, else a copy read back from the store.
    pub(super) fn flow_at(&self, slot: usize) -> Cow<'_, Flow> {
        match &self.slab[slot] {
            Body::Live(f) => Cow::Borrowed(f),
            Body::Cold(at) => {
                let mut f = self.cold.get(*at).0;
                sync(&mut f, &self.hot[slot]);
                Cow::Owned(f)
            }
        }
    }

    /// Packs a flow just opened, `f`, whose one sample is its first.
    pub(super) fn born_cold(&mut self, f: &Flow) -> Body {
        let owner = self.attr.owners.remove(&f.key.cookie);
        Body::Cold(self.cold.put(f, &f.samples[0], owner.as_ref()))
    }

    /// Packs the whole flows that are not hot and have retained no sample for
    /// [`COLD_AFTER_NS`] (by their latest sample, retained or not). One whose window holds
    /// more than its newest sample hands it on first, as an interim record to `out`, so
    /// every record's summaries stay exact. Then reclaims the store's dead entries if due.
    pub(super) fn freeze_idle(&mut self, dump_ts_ns: u64, out: &mut Vec<EndedFlow>) {
        // At most every FREEZE_EVERY_NS: the pass reads every whole flow that is not moving,
        // too dear at every dump (benches/RESULTS.md, D15).
        if self.froze_ns.is_some_and(|t| dump_ts_ns.saturating_sub(t) < FREEZE_EVERY_NS) {
            return;
        }
        self.froze_ns = Some(dump_ts_ns);
        for slot in 0..self.slab.len() {
            let h = &self.hot[slot];
            // Hot, or its last sample changed: moving, known without reading the flow.
            if h.tiered || h.changed {
                continue;
            }
            let Body::Live(f) = &self.slab[slot] else { continue };
            let moved = self.stages.latest(&f.stage, &f.samples).map_or(f.first_ts_ns, |r| r.ts_ns);
            if h.last_ts_ns.saturating_sub(moved) < COLD_AFTER_NS {
                continue;
            }
            if f.stage.window >= 2 {
                out.extend(self.cut_at_edge(slot));
            }
            let Body::Live(f) = &mut self.slab[slot] else { continue };
            let Some(edge) = self.stages.latest(&f.stage, &f.samples) else { continue };
            drop(self.stages.release(&mut f.stage, &mut f.samples)); // no blocks in a window of one
            let owner = self.attr.owners.remove(&f.key.cookie);
            self.slab[slot] = Body::Cold(self.cold.put(f, &edge, owner.as_ref()));
        }
        if self.cold.compact_due() {
            let (index, hot, slab) = (&self.index, &self.hot, &mut self.slab);
            self.cold.compact(|cookie, at| {
                if let Some(i) = index.get(cookie, hot) {
                    slab[i] = Body::Cold(at);
                }
            });
        }
    }

    /// Hands on the window of the whole flow in `slot` up to its newest retained sample,
    /// which stays held: it also begins the next window (as at the window cap).
    pub(super) fn cut_at_edge(&mut self, slot: usize) -> Option<EndedFlow> {
        let (Body::Live(f), h) = (&mut self.slab[slot], &mut self.hot[slot]) else { return None };
        let edge = self.stages.latest(&f.stage, &f.samples)?;
        let held = self.stages.detach(&mut f.stage, &mut f.samples);
        sync(f, h);
        let mut e = Self::cut_window(
            f,
            edge,
            Rest { held, sampling: h.sampling(), unresolved: None, attempt: None },
        );
        e.netns = label_of(&self.labels, &self.flow_netns, h.cookie);
        e.owner = self.attr.owner_now(h.cookie);
        h.deduped = 0;
        (h.max_gap_us, h.exact) = (0, 0);
        self.stats.samples_handed_on += e.sample_count() as u64 - 1;
        self.stats.flows_ended += 1;
        Some(e)
    }

    /// Flows kept packed, and the bytes their store holds.
    pub fn packed(&self) -> (usize, usize) {
        (self.cold.len(), self.cold.bytes_held())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(v6: bool, cookie: u64) -> (Flow, Retained) {
        let mut edge = Retained::default();
        (edge.ts_ns, edge.rtt_us, edge.rttvar_us) = (123_456_789_012_345, 1_234, 56);
        (edge.total_retrans, edge.snd_mss) = (3, 1448);
        edge.set_snd_cwnd(10);
        edge.set_ssthresh(crate::record::INFINITE_SSTHRESH);
        edge.chrono16 = [65_000, 7, 0];
        edge.set_state(1);
        edge.set_after_pause(true);
        edge.set_pacing_rate(crate::record::ABSENT_U64);
        edge.set_delivery_rate(9_000_000_000_000);
        edge.set_snd_wnd(65_535);
        let last = Last {
            state: 1,
            min_rtt_us: u32::MAX,
            total_retrans: 3,
            delivered: 100,
            snd_mss: 1448,
            max_pacing_rate: crate::record::ABSENT_U64,
            bytes_acked: 1 << 40,
            bytes_received: 5,
            bytes_sent: (1 << 40) + 99,
            busy_ms: u32::MAX,
            snd_wnd: 65_535,
            snd_wnd_max: 70_000,
            sndbuf: 87_380,
            total_rto: 2,
            recent_bps: 1234.5,
            ..Last::default()
        };
        let mut key = SockKey {
            family: libc::AF_INET as u8,
            src: [0; 16],
            dst: [0; 16],
            sport: 443,
            dport: 50_000,
            cookie,
        };
        if v6 {
            key.family = libc::AF_INET6 as u8;
            key.src = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
            key.dst = [0xfe; 16];
        } else {
            key.src[..4].copy_from_slice(&[127, 0, 0, 1]);
            key.dst[..4].copy_from_slice(&[10, 1, 2, 3]);
        }
        let mut cc = CcName::default();
        cc.0[..5].copy_from_slice(b"cubic");
        let f = Flow {
            counted: Counted { slot: 7, pending: true, acked: 1 << 40, received: 5, retrans: 0 },
            last,
            cc,
            stage: StageRef { window: 1, ..StageRef::NONE },
            samples: vec![edge],
            key,
            cgroup_id: 0x1_0000_2345,
            first_ts_ns: edge.ts_ns,
            last_ts_ns: edge.ts_ns,
            first_bytes_acked: last.bytes_acked,
            first_bytes_received: last.bytes_received,
            first_chrono: [l_busy(&last), 0, 0],
            seq: 4,
            deduped: 0,
            options: 0,
            partial_start: true,
            preexisting: false,
            passive_open: true,
        };
        (f, edge)
    }

    #[test]
    fn a_packed_flow_reads_back_whole() {
        let mut s = ColdStore::default();
        let owner = Owner { pid: 4242, name_id: 9, name: Arc::from("nginx"), how: How::ALL[1] };
        for v6 in [false, true] {
            let (f, edge) = flow(v6, 77);
            let at = s.put(&f, &edge, Some(&owner));
            let (back, o) = s.get(at);
            assert_eq!(back, f, "v6 {v6}");
            assert!(back.samples[0].after_pause());
            assert_eq!(
                o.as_ref().map(|o| (o.pid, o.name_id, &*o.name, o.how)),
                Some((4242, 9, "nginx", How::ALL[1]))
            );
            let bare = s.put(&f, &edge, None);
            let (_, none) = s.get(bare);
            assert!(none.is_none());
            // A pending flow's owner is written in the room kept for it, in place.
            let held = s.bytes_held();
            assert_eq!(s.replace(bare, &f, &edge, Some(&owner)), bare);
            assert_eq!(s.bytes_held(), held);
            assert_eq!(s.get(bare).1.map(|o| o.pid), Some(4242));
            assert_eq!(s.get(bare).0, f);
            // What does not fit moves.
            let mut big = f.clone();
            big.last.bytes_sent = u64::MAX;
            let moved = s.replace(bare, &big, &edge, Some(&owner));
            assert!(moved > bare && s.get(moved).0 == big);
        }
        assert_eq!(s.len(), 4);
    }

    #[test]
    fn an_idle_ipv4_flow_takes_under_a_hundred_bytes() {
        let mut s = ColdStore::default();
        // A keep-alive connection that carried a few requests.
        let (mut f, edge) = flow(false, 1_000_000);
        f.last.bytes_acked = 12_000;
        f.last.bytes_sent = 12_000;
        f.last.bytes_received = 3_000;
        f.last.recent_bps = 0.0;
        f.counted = Counted { slot: 7, pending: false, acked: 12_000, received: 3_000, retrans: 0 };
        s.put(&f, &edge, None);
        assert!(s.bytes_held() < 100, "{} bytes", s.bytes_held());
    }

    #[test]
    fn compaction_keeps_the_live_and_says_where_they_went() {
        let mut s = ColdStore::default();
        let mut at = Vec::new();
        for c in 0..1000u64 {
            let (f, edge) = flow(c % 3 == 0, c + 1);
            at.push(s.put(&f, &edge, None));
        }
        let before = s.bytes_held();
        for c in (0..1000).filter(|c| c % 2 == 0) {
            s.free(at[c]);
            s.free(at[c]); // twice is once
        }
        assert_eq!(s.len(), 500);
        assert!(s.compact_due());
        let mut moves = FxHashMap::default();
        s.compact(|cookie, to| {
            moves.insert(cookie, to);
        });
        assert!(!s.compact_due() && s.bytes_held() < before * 6 / 10);
        for c in (0..1000u64).filter(|c| c % 2 == 1) {
            let to = moves.get(&(c + 1)).copied().unwrap_or(at[c as usize]);
            let (f, _) = s.get(to);
            assert_eq!(f, flow(c % 3 == 0, c + 1).0);
        }
    }
}
