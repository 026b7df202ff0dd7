//! Memory hints for the walks over every process that a cycle makes even when nothing
//! moved: at 32,000 processes each one's sample and observation is a cache miss, and the
//! walks wait on them one at a time unless told what comes next.

/// How many items ahead a walk asks for: far enough that a miss (~100 ns) is hidden by
/// the work on the items between, near enough that they are still cached when reached.
pub const AHEAD: usize = 8;

/// Asks the CPU to bring the `Arc`'s shared value, count and all, into its caches: its
/// fields lie on several lines. A hint only: it reads nothing and changes nothing.
#[inline(always)]
pub fn prefetch<T>(a: &std::sync::Arc<T>) {
    // The count sits just before the value; a line at each 64 bytes covers both.
    let start = std::sync::Arc::as_ptr(a).cast::<u8>().wrapping_sub(16);
    let mut off = 0;
    while off < std::mem::size_of::<T>() + 16 {
        line(start.wrapping_add(off));
        off += 64;
    }
}

#[inline(always)]
fn line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint; it does not fault on any address (SSE is part of the
    // x86-64 baseline).
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A hint leaves what it is given as it was: the value, and the count (no reference
    /// taken or dropped), for a value of no size, of one line and of many.
    #[test]
    fn prefetch_changes_nothing_it_is_given() {
        let none = Arc::new(());
        let small = Arc::new(7u32);
        let big = Arc::new([3u8; 1000]);
        prefetch(&none);
        prefetch(&small);
        prefetch(&big);
        assert_eq!(Arc::strong_count(&none), 1);
        assert_eq!((*small, Arc::strong_count(&small)), (7, 1));
        assert!(big.iter().all(|&b| b == 3) && Arc::strong_count(&big) == 1);
    }
}
