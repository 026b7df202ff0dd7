//! One anonymous mapping placed on a NUMA node: `mmap`, then `mbind`, then (optionally)
//! first-touch fault-in so its pages are allocated now, under the policy, rather than at
//! the first `recv` into it. Dropping a region unmaps it.

use crate::numa::{self, Placement};
use crate::Error;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

static MAPS: AtomicU64 = AtomicU64::new(0);
static UNMAPS: AtomicU64 = AtomicU64::new(0);

/// Process-wide count of regions mapped and unmapped by this crate so far (for leak
/// checks: after every pool and buffer is gone the two are equal).
pub fn map_counts() -> (u64, u64) {
    (MAPS.load(Ordering::Relaxed), UNMAPS.load(Ordering::Relaxed))
}

/// Page-aligned anonymous memory owned by this value.
#[derive(Debug)]
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
    placement: Placement,
}

// SAFETY: a Region is plain owned memory; nothing in it is tied to a thread.
unsafe impl Send for Region {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for Region {}

impl Region {
    /// Maps `len` bytes (rounded up to whole pages) placed by `placement`; with `prefault`
    /// every page is written once so it is allocated now, on the chosen node.
    pub fn map(len: usize, placement: Placement, prefault: bool) -> Result<Region, Error> {
        if len == 0 {
            return Err(Error::ZeroSize);
        }
        let page = numa::page_bytes();
        let len = len.div_ceil(page) * page;
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::Map {
                bytes: len,
                source: std::io::Error::last_os_error(),
            });
        }
        MAPS.fetch_add(1, Ordering::Relaxed);
        let region = Region {
            ptr: NonNull::new(p.cast::<u8>()).expect("mmap succeeded, so not null"),
            len,
            placement,
        };
        if placement != Placement::FirstTouch {
            // On failure `region` drops here and unmaps.
            numa::mbind(region.ptr.as_ptr(), len, placement).map_err(|source| Error::Bind {
                node: placement.node().unwrap_or(0),
                source,
            })?;
        }
        if prefault {
            region.fault_in(page);
        }
        Ok(region)
    }

    /// Writes one byte per page so the kernel allocates every page now.
    fn fault_in(&self, page: usize) {
        let base = self.ptr.as_ptr();
        for off in (0..self.len).step_by(page) {
            // SAFETY: off < len, inside our mapping; volatile so the store is not elided.
            unsafe { base.add(off).write_volatile(0) };
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn placement(&self) -> Placement {
        self.placement
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr..ptr+len is our mapping, readable, initialised (zero-filled).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The address of each page of the region (for `move_pages` queries).
    pub fn page_addrs(&self) -> Vec<*const u8> {
        let page = numa::page_bytes();
        (0..self.len)
            .step_by(page)
            .map(|off| self.ptr.as_ptr().wrapping_add(off) as *const u8)
            .collect()
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: we own exactly this mapping and nobody can use it after drop.
        let r = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        if r == 0 {
            UNMAPS.fetch_add(1, Ordering::Relaxed);
        }
    }
}
