//! The cache hints the tracker's changed path uses: what to fetch ahead of need, and
//! the hint itself, the tracker's only `unsafe` (a prefetch, which cannot fault).

use super::{Body, Flow, FlowHead, PREFETCH_AHEAD, Retained, STAGED, StagePool};

/// Asks the CPU to fetch the cache line holding `at` (nothing on other architectures). Any
/// address will do: the callers compute addresses past a table's end, or from a flow with no
/// stage, rather than branch.
#[inline(always)]
pub(super) fn prefetch_line(at: *const i8) {
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
    // SAFETY: a prefetch is a hint; it never faults and has no effect on memory, whatever
    // the address.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at)
    };
}

/// Asks the CPU to fetch, ahead of need, the memory the changed path touches: the flow at
/// `slot + 2 × PREFETCH_AHEAD` (the lines a changed sample writes: account, latest values,
/// stage reference), and the lines of the stage pool that the flow at
/// `slot + PREFETCH_AHEAD` (fetched `PREFETCH_AHEAD` sockets ago) stages its next sample in,
/// with, when that sample fills the stage, the end of the flow's list of blocks.
/// Flows are kept in walk order, so those are likely the sockets due then. Without this,
/// each changed socket waited on cache misses in a row (the flow, then where its sample
/// goes), most of its cost.
///
/// Only for flows whose last sample changed ([`FlowHead::changed`]): a flow that changed is
/// likely to change again (a transfer goes on), and an idle one not. Every socket looks
/// ahead, busy or not, so a host where a tenth of the flows are busy still gets the busy ones
/// fetched (looking ahead only from the changed path, as before, missed almost every busy
/// flow when few were busy); but only in dumps after one where enough samples changed
/// ([`LOOKAHEAD_SHARE`]), so a host of idle flows pays nothing.
#[inline]
pub(super) fn prefetch_ahead(slab: &[Body], hot: &[FlowHead], stages: &StagePool, slot: usize) {
    let changed = |i: usize| hot.get(i).is_some_and(|h| h.changed);
    if changed(slot + 2 * PREFETCH_AHEAD) {
        prefetch_flow(slab, slot + 2 * PREFETCH_AHEAD);
    }
    let ahead = slab.get(slot + PREFETCH_AHEAD).filter(|_| changed(slot + PREFETCH_AHEAD));
    if let Some(f) = ahead.and_then(Body::live) {
        // Where its next sample goes (anywhere for a flow with no stage yet). A sample is 48
        // bytes: it may span two lines.
        let at = stages.slots.addr(f.stage.idx);
        let at = at.wrapping_add(usize::from(f.stage.staged) * size_of::<Retained>());
        prefetch_line(at);
        prefetch_line(at.wrapping_add(size_of::<Retained>() - 1));
        // A sample that fills the stage also writes the number of the block it moves to
        // into the flow's list of blocks, a heap allocation of its own, cold by then
        // (`cargo bench --bench tracker`; benches/RESULTS.md, D3). Fetching the stage's
        // older lines too, to be copied with it, gained nothing more.
        if usize::from(f.stage.staged) == STAGED - 1
            && let Some(room) = f.stage.room.as_deref()
        {
            prefetch_line(room.as_ptr().wrapping_add(f.stage.full_len as usize).cast::<i8>());
        }
    }
}

/// Asks the CPU to fetch the lines of the flow at `slot` that a changed sample writes
/// (see [`Flow`]'s layout), when it is whole; `slot` may be past the end.
#[inline]
pub(super) fn prefetch_flow(slab: &[Body], slot: usize) {
    let Some(f) = slab.get(slot).and_then(Body::live) else { return };
    let at = std::ptr::from_ref(f).cast::<i8>();
    for line in (0..std::mem::offset_of!(Flow, samples)).step_by(64) {
        prefetch_line(at.wrapping_add(line));
    }
}
