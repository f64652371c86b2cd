//! The cache hint the tracker's changed path uses: its only `unsafe` (a prefetch, which
//! cannot fault). Where and when to prefetch is decided in `tracker.rs` (`prefetch_ahead`).

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
