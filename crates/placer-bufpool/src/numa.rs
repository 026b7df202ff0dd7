//! The NUMA memory-policy system calls the pool needs, through `libc::syscall` (no libnuma):
//! `mbind` to place a range, `set_mempolicy` for the calling thread, and two ways to ask
//! where a page really is: `get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR)` and `move_pages` with
//! no target nodes (a status query that moves nothing).

use std::io;

/// `get_mempolicy` flags (include/uapi/linux/mempolicy.h); libc does not export them.
const MPOL_F_NODE: libc::c_ulong = 1 << 0;
const MPOL_F_ADDR: libc::c_ulong = 1 << 1;

/// Bits in the node masks passed to the kernel. Linux's MAX_NUMNODES is at most 1024
/// (CONFIG_NODES_SHIFT = 10), so a 1024-bit mask covers every kernel.
const MASK_BITS: usize = 1024;
const MASK_WORDS: usize = MASK_BITS / 64;
/// `maxnode` as libnuma passes it: the mask's bit count plus one (the kernel drops one).
const MAXNODE: libc::c_ulong = MASK_BITS as libc::c_ulong + 1;

/// Where a buffer's pages may come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// No policy: the kernel's default, the node of the CPU that first touches each page.
    FirstTouch,
    /// `MPOL_BIND`: only this node; allocation fails rather than spill elsewhere.
    Bind(u32),
    /// `MPOL_PREFERRED`: this node when it has free memory, another one otherwise.
    Preferred(u32),
}

impl Placement {
    /// The node asked for, if any.
    pub fn node(&self) -> Option<u32> {
        match self {
            Placement::FirstTouch => None,
            Placement::Bind(n) | Placement::Preferred(n) => Some(*n),
        }
    }

    fn mode_and_mask(&self) -> io::Result<(libc::c_int, Option<[u64; MASK_WORDS]>)> {
        match *self {
            Placement::FirstTouch => Ok((libc::MPOL_DEFAULT, None)),
            Placement::Bind(n) => Ok((libc::MPOL_BIND, Some(mask_of(n)?))),
            Placement::Preferred(n) => Ok((libc::MPOL_PREFERRED, Some(mask_of(n)?))),
        }
    }
}

fn mask_of(node: u32) -> io::Result<[u64; MASK_WORDS]> {
    let n = node as usize;
    if n >= MASK_BITS {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut m = [0u64; MASK_WORDS];
    m[n / 64] |= 1 << (n % 64);
    Ok(m)
}

fn nodes_of(mask: &[u64; MASK_WORDS]) -> Vec<u32> {
    (0..MASK_BITS)
        .filter(|&i| mask[i / 64] & (1 << (i % 64)) != 0)
        .map(|i| i as u32)
        .collect()
}

/// Applies `placement` to `[addr, addr + len)` with `mbind`. `addr` must be page-aligned.
/// A node that does not exist (or has no memory) gives `EINVAL`.
pub fn mbind(addr: *mut u8, len: usize, placement: Placement) -> io::Result<()> {
    let (mode, mask) = placement.mode_and_mask()?;
    let (mask_ptr, maxnode) = match &mask {
        Some(m) => (m.as_ptr(), MAXNODE),
        None => (std::ptr::null(), 0),
    };
    // SAFETY: mbind only reads `maxnode` bits from the mask; the range is the caller's
    // own mapping and no pages are moved (flags 0).
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr as libc::c_ulong,
            len as libc::c_ulong,
            mode as libc::c_ulong,
            mask_ptr,
            maxnode,
            0 as libc::c_ulong,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets the calling thread's memory policy (`set_mempolicy`): every later allocation by
/// this thread (malloc, stacks, page-cache reads) follows it. `FirstTouch` resets to the
/// default. Used for `malloc`-backed buffers, which `mbind` cannot place safely (they
/// share pages with other allocations).
pub fn set_thread_policy(placement: Placement) -> io::Result<()> {
    let (mode, mask) = placement.mode_and_mask()?;
    let (mask_ptr, maxnode) = match &mask {
        Some(m) => (m.as_ptr(), MAXNODE),
        None => (std::ptr::null(), 0),
    };
    // SAFETY: reads at most `maxnode` bits from a mask we own.
    let r = unsafe { libc::syscall(libc::SYS_set_mempolicy, mode, mask_ptr, maxnode) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The node holding the page at `addr` (`get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR)`). The
/// kernel faults the page in if it is not present yet.
pub fn node_of_addr(addr: *const u8) -> io::Result<u32> {
    let mut node: libc::c_int = -1;
    // SAFETY: the kernel writes one int to `node`; no mask is passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut node as *mut libc::c_int,
            std::ptr::null_mut::<u64>(),
            0 as libc::c_ulong,
            addr as libc::c_ulong,
            MPOL_F_NODE | MPOL_F_ADDR,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(node).map_err(|_| io::Error::other(format!("kernel returned node {node}")))
}

/// The policy governing `addr`: its mode (`libc::MPOL_BIND`, ...) and node mask.
pub fn policy_of_addr(addr: *const u8) -> io::Result<(libc::c_int, Vec<u32>)> {
    let mut mode: libc::c_int = -1;
    let mut mask = [0u64; MASK_WORDS];
    // SAFETY: the kernel writes one int and at most MAXNODE bits into buffers we own.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            mask.as_mut_ptr(),
            MAXNODE,
            addr as libc::c_ulong,
            MPOL_F_ADDR,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((mode, nodes_of(&mask)))
}

/// Where each page is, by `move_pages(0, n, pages, NULL, status, 0)`: a query that moves
/// nothing. Each entry is the node, or the negative errno the kernel put in its status
/// (`-ENOENT`: page not present; `-EFAULT`: not mapped).
pub fn page_nodes(pages: &[*const u8]) -> io::Result<Vec<Result<u32, i32>>> {
    page_nodes_of(0, pages)
}

/// [`page_nodes`] for another process (`pid`, 0 = self); needs ptrace-level access to it.
pub fn page_nodes_of(pid: u32, pages: &[*const u8]) -> io::Result<Vec<Result<u32, i32>>> {
    move_pages_raw(pid, pages, None)
}

/// `move_pages` flag: move pages mapped only by this process (MPOL_MF_MOVE).
const MPOL_MF_MOVE: libc::c_int = 1 << 1;

/// Moves the given pages of process `pid` (0 = self) to `node` with
/// `move_pages(pid, n, pages, nodes, status, MPOL_MF_MOVE)`. Another process needs
/// CAP_SYS_NICE (and ptrace access). Each entry is the node the page is on afterwards, or
/// the negative errno for that page (`-ENOENT` absent, `-EBUSY` pinned, `-EACCES` shared).
pub fn move_pages_to(
    pid: u32,
    pages: &[*const u8],
    node: u32,
) -> io::Result<Vec<Result<u32, i32>>> {
    let node =
        libc::c_int::try_from(node).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    move_pages_raw(pid, pages, Some(node))
}

/// `move_pages` to `node`, or a status query when `node` is None.
fn move_pages_raw(
    pid: u32,
    pages: &[*const u8],
    node: Option<libc::c_int>,
) -> io::Result<Vec<Result<u32, i32>>> {
    if pages.is_empty() {
        return Ok(Vec::new());
    }
    let nodes = node.map(|n| vec![n; pages.len()]);
    let (nodes_ptr, flags) = match &nodes {
        Some(v) => (v.as_ptr(), MPOL_MF_MOVE),
        None => (std::ptr::null(), 0),
    };
    let mut status = vec![i32::MIN; pages.len()];
    // SAFETY: pages, status and (when given) nodes all hold pages.len() entries.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            pid as libc::c_ulong,
            pages.len() as libc::c_ulong,
            pages.as_ptr(),
            nodes_ptr,
            status.as_mut_ptr(),
            flags,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(status
        .into_iter()
        .map(|s| u32::try_from(s).map_err(|_| s))
        .collect())
}

/// Moves every page of process `pid` that is on a node of `from` to the node at the same
/// position in `to` (`migrate_pages(2)`; both lists sorted, equal length works best).
/// Returns the number of pages that could not be moved. Unbounded: the whole process's
/// memory may move in one call, stalling it meanwhile.
pub fn migrate_pages(pid: u32, from: &[u32], to: &[u32]) -> io::Result<u64> {
    let mut old = [0u64; MASK_WORDS];
    let mut new = [0u64; MASK_WORDS];
    for (list, mask) in [(from, &mut old), (to, &mut new)] {
        for &n in list {
            let m = mask_of(n)?;
            for (w, b) in mask.iter_mut().zip(m) {
                *w |= b;
            }
        }
    }
    // SAFETY: both masks hold MAXNODE - 1 bits and are only read.
    let r = unsafe {
        libc::syscall(
            libc::SYS_migrate_pages,
            pid as libc::c_ulong,
            MAXNODE,
            old.as_ptr(),
            new.as_ptr(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as u64)
}

/// The host's page size in bytes (`sysconf(_SC_PAGESIZE)`).
pub fn page_bytes() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_round_trip() {
        for n in [0u32, 1, 63, 64, 1023] {
            assert_eq!(nodes_of(&mask_of(n).unwrap()), vec![n]);
        }
        assert!(mask_of(1024).is_err());
    }

    #[test]
    fn self_migration_to_node_0_moves_nothing_off_node() {
        let v = vec![1u8; 1 << 16];
        let pages: Vec<*const u8> = (0..v.len())
            .step_by(page_bytes())
            .map(|o| &v[o] as *const u8)
            .collect();
        match move_pages_to(0, &pages, 0) {
            Ok(st) => assert!(st.iter().all(|s| *s == Ok(0)), "{st:?}"),
            Err(e) => placer_testkit::skip(&format!("move_pages: {e}")),
        }
        match migrate_pages(std::process::id(), &[0], &[0]) {
            Ok(left) => assert_eq!(left, 0),
            Err(e) => placer_testkit::skip(&format!("migrate_pages: {e}")),
        }
        assert!(
            migrate_pages(0, &[2000], &[0]).is_err(),
            "node beyond the mask"
        );
    }

    #[test]
    fn placement_node() {
        assert_eq!(Placement::FirstTouch.node(), None);
        assert_eq!(Placement::Bind(3).node(), Some(3));
        assert_eq!(Placement::Preferred(2).node(), Some(2));
    }
}
