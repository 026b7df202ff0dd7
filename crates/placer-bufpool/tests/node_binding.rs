//! The pages a pool hands out really are on its node: checked two independent ways, with
//! get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR) and with a move_pages status query. Node 0 is
//! the one node every NUMA kernel has; a node that does not exist must be refused.

use placer_bufpool::numa::{node_of_addr, page_nodes, policy_of_addr};
use placer_bufpool::{BufPool, Error, Placement, PoolConfig};

/// Skips (with the reason) when the kernel has no NUMA policy calls (CONFIG_NUMA off).
fn numa_syscalls_work() -> bool {
    let x = 0u8;
    match node_of_addr(&x) {
        Ok(_) => true,
        Err(e) => {
            placer_testkit::skip(&format!("get_mempolicy unavailable here: {e}"));
            false
        }
    }
}

#[test]
fn bound_buffers_are_on_node_0() {
    if !numa_syscalls_work() {
        return;
    }
    let mut pool = BufPool::new(PoolConfig::new(256 << 10, Placement::Bind(0))).unwrap();
    let bufs: Vec<_> = (0..4).map(|_| pool.get().unwrap()).collect();
    for b in &bufs {
        let (mode, nodes) = policy_of_addr(b.as_ptr()).unwrap();
        assert_eq!(mode, libc::MPOL_BIND, "policy of the buffer's range");
        assert_eq!(nodes, vec![0]);
        let pages = b.page_addrs();
        assert_eq!(
            pages.len(),
            (256 << 10) / placer_bufpool::numa::page_bytes()
        );
        // Prefaulted: every page is present (a status of -ENOENT would mean not yet).
        let status = page_nodes(&pages).unwrap();
        assert!(
            status.iter().all(|s| *s == Ok(0)),
            "move_pages status {status:?}"
        );
        for p in pages {
            assert_eq!(node_of_addr(p).unwrap(), 0);
        }
    }
    for b in bufs {
        pool.put(b);
    }
    // A reused buffer is still there.
    let b = pool.get().unwrap();
    assert!(page_nodes(&b.page_addrs())
        .unwrap()
        .iter()
        .all(|s| *s == Ok(0)));
}

#[test]
fn preferred_node_0_is_honoured() {
    if !numa_syscalls_work() {
        return;
    }
    let mut pool = BufPool::new(PoolConfig::new(64 << 10, Placement::Preferred(0))).unwrap();
    let b = pool.get().unwrap();
    let (mode, nodes) = policy_of_addr(b.as_ptr()).unwrap();
    assert_eq!((mode, nodes), (libc::MPOL_PREFERRED, vec![0]));
    assert!(page_nodes(&b.page_addrs())
        .unwrap()
        .iter()
        .all(|s| *s == Ok(0)));
}

#[test]
fn without_prefault_pages_are_absent_until_touched() {
    if !numa_syscalls_work() {
        return;
    }
    let mut cfg = PoolConfig::new(16 << 10, Placement::Bind(0));
    cfg.prefault = false;
    let mut pool = BufPool::new(cfg).unwrap();
    let mut b = pool.get().unwrap();
    let status = page_nodes(&b.page_addrs()).unwrap();
    assert!(
        status.iter().all(|s| *s == Err(-libc::ENOENT)),
        "untouched pages should be absent: {status:?}"
    );
    b.as_mut_slice().fill(1);
    assert!(page_nodes(&b.page_addrs())
        .unwrap()
        .iter()
        .all(|s| *s == Ok(0)));
}

#[test]
fn a_missing_node_is_refused_at_creation() {
    if !numa_syscalls_work() {
        return;
    }
    // The highest node id the kernel could have plus one never exists.
    let mut cfg = PoolConfig::new(4096, Placement::Bind(1023));
    cfg.initial = 1;
    let online = std::fs::read_to_string("/sys/devices/system/node/online").unwrap_or_default();
    if online.contains("1023") {
        placer_testkit::skip("node 1023 exists here");
        return;
    }
    match BufPool::new(cfg) {
        Err(Error::Bind { node: 1023, source }) => {
            assert_eq!(source.raw_os_error(), Some(libc::EINVAL))
        }
        other => panic!("expected a bind error, got {other:?}"),
    }
}
