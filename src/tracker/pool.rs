//! Where a tracked flow's retained samples wait: its *stage*, and the *blocks* of a pool that
//! full stages move to. A flow's blocks are not copied out when the flow (or a window of it)
//! is handed on: they go with it ([`Held`]), and whoever analyses it gathers them, on its own
//! thread, then gives the blocks back ([`EndedFlow::gather`](super::EndedFlow::gather)).
//!
//! Why not gather in the tracker: flows that open together and change at every poll fill
//! their windows together, and copying every window into fresh memory in one dump stalled
//! sampling: a dump that ended thousands of windows at once took most of a second, and
//! their memory briefly doubled (`SECS=8 WINDOW=900 cargo bench --bench kept`;
//! benches/RESULTS.md, D5).

use std::ptr::NonNull;
use std::sync::{Arc, Mutex, PoisonError};

use super::prefetch::prefetch_line;
use crate::locks::Locked;
use crate::record::Retained;

/// Retained samples per stage and per block (see [`Stage`]).
pub(super) const STAGED: usize = 4;

/// Blocks per segment of the block pool: 1,024 blocks are 192 KiB.
const SEGMENT_BLOCKS: usize = 1024;

/// Free blocks kept fetched ahead of need (see [`BlockPool::take`]).
const READY_BLOCKS: usize = 16;

/// Four retained samples of one flow. As a *stage*, it holds a changing flow's newest
/// samples; as a *block*, four older ones, in the block pool.
///
/// Stages sit together in one small pool (192 bytes a changing flow, mostly taken in walk
/// order), so a dump writes its samples within a few megabytes rather than across every
/// flow's storage. Appending each sample straight to its flow's own `Vec` cost a TLB miss
/// and a cache miss per socket once the vectors outgrew a page (benches/RESULTS.md, D6). A
/// flow takes a stage at its second retained sample, so idle flows cost nothing.
///
/// A full stage is copied, three whole cache lines at once, to a block of the block pool,
/// and the flow notes the block's number. Blocks never move: a flow's samples are gathered
/// into one `Vec` once, after it is handed on. (Each flow's own `Vec` doubled as it grew, so
/// every sample was copied about once more by `realloc`, and all flows that change every dump
/// doubled in the same dump. Writing samples straight into pool blocks, with no stage, was
/// slower once blocks were reused, as reused blocks no longer lie in walk order.
/// `cargo bench --bench kept` and `--bench tracker`; benches/RESULTS.md, D7.)
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Stage([Retained; STAGED]);

/// Where a flow's samples wait besides its `samples` (full blocks and a stage), and how
/// many samples its window holds in all.
///
/// The list of full blocks is a boxed slice and a `u32` length, rather than a `Vec<u32>`
/// (24 bytes): with a `Vec`, a flow took six cache lines instead of five, and what a
/// changed sample touches took four instead of three (both asserted below [`Flow`](super::Flow)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageRef {
    /// Its slot in the stage pool; `u32::MAX` when it has none.
    pub(super) idx: u32,
    /// Samples in the stage.
    pub(super) staged: u8,
    /// Retained samples in the window: in `samples`, blocks and stage. Kept here, not
    /// summed, so that the window check reads no line of the flow beyond this one.
    pub(super) window: u32,
    /// How many of `room`'s entries are its full blocks.
    pub(super) full_len: u32,
    /// Its full blocks in the block pool, oldest first, then spare room (none before the
    /// first block).
    pub(super) room: Option<Box<[u32]>>,
}

impl StageRef {
    /// No stage and no blocks: a flow handed on (or one not yet counted).
    pub const NONE: StageRef =
        StageRef { idx: u32::MAX, staged: 0, window: 0, full_len: 0, room: None };

    /// Retained samples in the flow's current window.
    pub fn window(&self) -> usize {
        self.window as usize
    }

    /// Its full blocks, oldest first.
    fn full(&self) -> &[u32] {
        self.room.as_deref().map_or(&[], |r| &r[..self.full_len as usize])
    }

    /// Appends a full block, doubling the room when there is none left (from 8 entries).
    fn push_full(&mut self, b: u32) {
        let n = self.full_len as usize;
        let room = self.room.as_deref().map_or(0, <[u32]>::len);
        if n == room {
            let mut grown = vec![0u32; (2 * room).max(8)].into_boxed_slice();
            grown[..n].copy_from_slice(self.full());
            self.room = Some(grown);
        }
        if let Some(r) = self.room.as_deref_mut() {
            r[n] = b;
            self.full_len += 1;
        }
    }
}

impl Default for StageRef {
    fn default() -> Self {
        Self::NONE
    }
}

/// One segment: 1,024 slots of four samples.
type Segment = [Stage; SEGMENT_BLOCKS];

/// A segment's address. A segment is allocated once and freed only with its [`Store`].
#[derive(Debug, Clone, Copy)]
struct SegPtr(NonNull<Segment>);

// SAFETY: a segment is plain memory. Which thread may touch which of its slots is settled
// by their ownership (see `Store`), not by where the pointer is.
unsafe impl Send for SegPtr {}
// SAFETY: as above.
unsafe impl Sync for SegPtr {}

/// The address of slot `b`; `b` must lie in one of `segments`.
#[inline]
fn slot_ptr(segments: &[SegPtr], b: u32) -> *mut Stage {
    let i = b as usize;
    segments[i / SEGMENT_BLOCKS].0.as_ptr().cast::<Stage>().wrapping_add(i % SEGMENT_BLOCKS)
}

/// The memory of a pool's segments, owned jointly by the pool and by the windows handed on
/// with blocks in it ([`Held`]), so that it outlives both.
///
/// Who may touch a slot: while the pool has it (free, ready, a stage, or a block of a flow
/// being tracked), only the tracker, on its thread; while a [`Held`] has it, only that
/// holder, which only reads it, on whatever thread it went to, and gives it back through
/// `returned`. A block goes to its holder with the window that owns it (through a channel,
/// or whatever else moves a value to another thread) and comes back through `returned`'s
/// mutex; both order memory between the threads.
#[derive(Debug, Default)]
struct Store {
    /// Every segment, in order. The pool appends, once per 1,024 slots; a gather reads.
    segments: Mutex<Vec<SegPtr>>,
    /// Blocks given back by windows handed on, for the pool to reuse.
    returned: Mutex<Vec<u32>>,
}

impl Drop for Store {
    fn drop(&mut self) {
        let segments = self.segments.get_mut().unwrap_or_else(PoisonError::into_inner);
        for s in segments.drain(..) {
            // SAFETY: `Segments::zeroed` allocated it as a `Box<Segment>`'s memory would
            // be; nothing else frees it, and with the store gone no pool or holder is left
            // to use it.
            drop(unsafe { Box::from_raw(s.0.as_ptr()) });
        }
    }
}

/// Slots of four samples, numbered from 0, in segments of fixed size: growing never moves a
/// slot (one `Vec` of them would copy every sample each time it doubled) and leaves at most
/// one segment unused (a doubling `Vec` of stages held 1.6 times the stages of 20,000 flows:
/// 315 bytes a flow where 192 were used).
#[derive(Debug, Default)]
pub(super) struct Segments {
    /// The store's segments, read here without its lock: only this pool adds to them.
    local: Vec<SegPtr>,
    store: Arc<Store>,
    /// Slots handed out so far.
    used: usize,
}

impl Segments {
    /// A segment of zeroed blocks, from zeroed memory: the allocator gets it from the
    /// kernel as untouched pages, rather than this code writing 192 KiB of zeros that samples
    /// then overwrite. (`Box::new([...; N])` wrote every block first: 12 % of the time of a
    /// growing pool in a profile.)
    fn zeroed() -> SegPtr {
        let layout = std::alloc::Layout::new::<Segment>();
        // SAFETY: the layout is not zero-sized. All-zero bytes are a valid `Stage` (plain
        // integers). `Store::drop` frees it with this layout, as a `Box<Segment>`.
        let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Segment>();
        SegPtr(NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout)))
    }

    /// A slot never handed out before.
    fn grow(&mut self) -> u32 {
        if self.used == self.local.len() * SEGMENT_BLOCKS {
            let s = Self::zeroed();
            self.store.segments.locked().push(s);
            self.local.push(s);
        }
        self.used += 1;
        (self.used - 1) as u32
    }

    #[inline]
    fn get(&self, b: u32) -> &Stage {
        // SAFETY: `slot_ptr` checks that `b`'s segment exists, and the store keeps every
        // segment alive at least as long as `self`. The callers pass only slots the pool
        // has (see `Store`), which no other thread touches meanwhile.
        unsafe { &*slot_ptr(&self.local, b) }
    }

    #[inline]
    fn get_mut(&mut self, b: u32) -> &mut Stage {
        // SAFETY: as in `get`; `&mut self` keeps this pool from lending the slot twice.
        unsafe { &mut *slot_ptr(&self.local, b) }
    }

    /// Where slot `b` lies, for a prefetch; any address when `b` is not a slot.
    #[inline]
    pub(super) fn addr(&self, b: u32) -> *const i8 {
        let i = b as usize;
        if i / SEGMENT_BLOCKS >= self.local.len() {
            return std::ptr::null();
        }
        slot_ptr(&self.local, b).cast::<i8>()
    }
}

/// The blocks of full stages. Freed blocks are reused, last freed first: the pool keeps its
/// largest size, as an allocator would.
#[derive(Debug, Default)]
pub(super) struct BlockPool {
    slots: Segments,
    free: Vec<u32>,
    /// The next blocks [`take`](Self::take) gives, fetched when they joined.
    ready: std::collections::VecDeque<u32>,
}

impl BlockPool {
    /// A free block. Which block a flow gets is known well before it needs one, so the
    /// block is fetched into cache then: it joins `ready` [`READY_BLOCKS`] takes earlier.
    #[inline]
    fn take(&mut self) -> u32 {
        while self.ready.len() <= READY_BLOCKS {
            let b = match self.free.pop() {
                Some(b) => b,
                None => self.slots.grow(),
            };
            self.prefetch(b);
            self.ready.push_back(b);
        }
        self.ready.pop_front().expect("filled just above")
    }

    #[inline]
    fn prefetch(&self, b: u32) {
        prefetch_stage(self.slots.addr(b));
    }

    /// Takes back the blocks that windows handed on have given back since the last call.
    pub(super) fn reclaim(&mut self) {
        let mut returned = self.slots.store.returned.locked();
        self.free.append(&mut returned);
    }
}

/// Fetches the lines of the four samples at `at`.
#[inline]
fn prefetch_stage(at: *const i8) {
    for line in (0..size_of::<Stage>()).step_by(64) {
        prefetch_line(at.wrapping_add(line));
    }
}

/// The stages of the changing flows, with the free slots of flows that ended, and the
/// blocks their full stages went to.
#[derive(Debug, Default)]
pub(super) struct StagePool {
    pub(super) slots: Segments,
    free: Vec<u32>,
    pub(super) blocks: BlockPool,
}

impl StagePool {
    fn take(&mut self) -> u32 {
        match self.free.pop() {
            Some(i) => i,
            None => self.slots.grow(),
        }
    }

    /// Where the flow's next sample goes: the sample is decoded straight into its stage,
    /// then [`commit`](Self::commit)ted. (Built first and copied in, its fields were stored
    /// one by one and read back as whole lines, which was slower: benches/RESULTS.md, D8.)
    #[inline]
    pub(super) fn next_slot(&mut self, st: &mut StageRef) -> &mut Retained {
        if st.idx == u32::MAX {
            st.idx = self.take();
        }
        &mut self.slots.get_mut(st.idx).0[usize::from(st.staged)]
    }

    /// Counts the sample [`next_slot`](Self::next_slot) gave as staged; a full stage moves
    /// to a block.
    #[inline]
    pub(super) fn commit(&mut self, st: &mut StageRef) {
        st.window += 1;
        st.staged += 1;
        if usize::from(st.staged) == STAGED {
            let b = self.blocks.take();
            *self.blocks.slots.get_mut(b) = *self.slots.get(st.idx);
            st.push_full(b);
            st.staged = 0;
        }
    }

    /// Moves the flow's blocks and staged samples, in order, to the end of `f.samples`, for
    /// a view of a flow still tracked; the blocks go back to the pool, the stage stays the
    /// flow's.
    pub(super) fn flush(&mut self, st: &mut StageRef, samples: &mut Vec<Retained>) {
        if let Some(h) = self.detach(st, samples) {
            *samples = h.gather(samples, Vec::new());
        }
    }

    /// The flow's newest retained sample, read in place.
    pub(super) fn latest(&self, st: &StageRef, samples: &[Retained]) -> Option<Retained> {
        if st.idx != u32::MAX {
            if st.staged > 0 {
                return Some(self.slots.get(st.idx).0[usize::from(st.staged) - 1]);
            }
            if let Some(&b) = st.room.as_deref().and_then(|r| r[..st.full_len as usize].last()) {
                return self.blocks.slots.get(b).0.last().copied();
            }
        }
        samples.last().copied()
    }

    /// The flow's `n` newest retained samples, oldest first, read in place: a view of one
    /// flow copies only what it shows, and the flow's blocks and stage stay as they are.
    pub(super) fn newest(&self, st: &StageRef, samples: &[Retained], n: usize) -> Vec<Retained> {
        let mut parts: Vec<&[Retained]> = Vec::new();
        let mut have = 0;
        if st.idx != u32::MAX {
            let staged = &self.slots.get(st.idx).0[..usize::from(st.staged)];
            have += staged.len();
            parts.push(staged);
            if let Some(room) = st.room.as_deref() {
                for &b in room[..st.full_len as usize].iter().rev() {
                    if have >= n {
                        break;
                    }
                    let block = &self.blocks.slots.get(b).0[..];
                    have += block.len();
                    parts.push(block);
                }
            }
        }
        if have < n {
            parts.push(samples);
        }
        let mut out: Vec<Retained> = parts.iter().rev().flat_map(|p| p.iter().copied()).collect();
        let extra = out.len().saturating_sub(n);
        out.drain(..extra);
        out
    }

    /// Takes the flow's blocks and staged samples out, to go on with it when it is handed
    /// on (or to be gathered at once, for a view): its older samples (`samples`) and its blocks go into the [`Held`], and its staged
    /// samples into `samples`, where a sample added later follows them. Without blocks, no
    /// [`Held`]: the staged samples join `samples`. The stage stays the flow's.
    pub(super) fn detach(
        &mut self,
        st: &mut StageRef,
        samples: &mut Vec<Retained>,
    ) -> Option<Held> {
        if st.idx == u32::MAX {
            return None;
        }
        let staged = &self.slots.get(st.idx).0[..usize::from(st.staged)];
        st.staged = 0;
        let room = match st.room.take() {
            Some(room) if st.full_len > 0 => room,
            _ => {
                samples.extend_from_slice(staged);
                return None;
            }
        };
        let held = Held {
            head: std::mem::replace(samples, staged.to_vec()),
            room,
            blocks: st.full_len,
            store: Arc::clone(&self.blocks.slots.store),
        };
        st.full_len = 0;
        Some(held)
    }

    /// Blocks the pool has made so far.
    #[cfg(test)]
    pub(super) fn blocks_made(&self) -> usize {
        self.blocks.slots.used
    }

    /// Detaches the flow's samples (see [`detach`](Self::detach)) and gives its stage back.
    pub(super) fn release(
        &mut self,
        st: &mut StageRef,
        samples: &mut Vec<Retained>,
    ) -> Option<Held> {
        let held = self.detach(st, samples);
        if st.idx != u32::MAX {
            self.free.push(st.idx);
        }
        *st = StageRef::NONE;
        held
    }
}

/// The samples of a flow handed on that still lie in pool blocks, with the blocks, which go
/// back to the pool when this is gathered or dropped.
pub struct Held {
    /// Samples older than the blocks': the flow's `samples` when it was handed on.
    head: Vec<Retained>,
    /// The blocks, oldest first, then spare room.
    room: Box<[u32]>,
    /// How many of `room`'s entries are blocks.
    blocks: u32,
    store: Arc<Store>,
}

impl Held {
    /// Samples held.
    pub(super) fn len(&self) -> usize {
        self.head.len() + self.blocks as usize * STAGED
    }

    /// The held samples in order, then `tail`'s, in `v`'s memory (what it held is dropped);
    /// the blocks go back to the pool.
    pub(super) fn gather(mut self, tail: &[Retained], mut v: Vec<Retained>) -> Vec<Retained> {
        if v.capacity() == 0 {
            v = std::mem::take(&mut self.head);
        } else {
            v.clear();
            v.extend_from_slice(&self.head);
        }
        // Amortized, not exact: a view of a tracked flow gathers into the same vector
        // each time it is read.
        v.reserve(self.blocks as usize * STAGED + tail.len());
        // The segment list is locked only to find where the next 64 blocks lie: a long
        // window copied under the lock would hold up the tracker when its pool grows.
        for group in self.room[..self.blocks as usize].chunks(64) {
            let mut at = [std::ptr::null::<Stage>(); 64];
            {
                let segments = self.store.segments.locked();
                for (p, &b) in at.iter_mut().zip(group) {
                    *p = slot_ptr(&segments, b);
                }
            }
            let at = &at[..group.len()];
            for (i, &p) in at.iter().enumerate() {
                // The blocks are cold, and each copy would wait for its block.
                if let Some(&ahead) = at.get(i + 4) {
                    prefetch_stage(ahead.cast::<i8>());
                }
                // SAFETY: the block was the pool's, so it lies in a segment of the list,
                // which the store keeps alive; it is this holder's now, and only read (see
                // `Store`).
                v.extend_from_slice(&unsafe { &*p }.0);
            }
        }
        v.extend_from_slice(tail);
        v
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let blocks = &self.room[..self.blocks as usize];
        self.store.returned.locked().extend_from_slice(blocks);
    }
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held").field("samples", &self.len()).finish_non_exhaustive()
    }
}
