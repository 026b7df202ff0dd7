//! No leak: every mapping the pool makes is unmapped once the pool and its buffers are
//! gone. Checked with the crate's map/unmap counters and, independently, with
//! /proc/self/maps. One test in this binary, so no other test maps memory meanwhile.

use placer_bufpool::{map_counts, BufPool, Placement, PoolConfig};

fn mapped(addr: usize) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    maps.lines().any(|l| {
        let range = l.split_whitespace().next().unwrap_or("");
        let Some((a, b)) = range.split_once('-') else {
            return false;
        };
        let (a, b) = (
            usize::from_str_radix(a, 16).unwrap_or(0),
            usize::from_str_radix(b, 16).unwrap_or(0),
        );
        (a..b).contains(&addr)
    })
}

#[test]
fn every_mapping_is_unmapped() {
    let (maps0, unmaps0) = map_counts();
    let mut addrs = Vec::new();
    {
        let mut cfg = PoolConfig::new(128 << 10, Placement::FirstTouch);
        cfg.initial = 3;
        let mut pool = BufPool::new(cfg).unwrap();
        let mut held = Vec::new();
        for _ in 0..10 {
            let b = pool.get().unwrap();
            addrs.push(b.as_ptr() as usize);
            held.push(b);
        }
        for b in held.drain(..5) {
            pool.put(b);
        }
        // Dropped without put: must still be unmapped.
        drop(held.pop());
        pool.trim(2);
        for b in held {
            pool.put(b);
        }
        for _ in 0..1000 {
            let b = pool.get().unwrap();
            pool.put(b);
        }
        // 10 mapped, 1 dropped without put, 3 trimmed: 6 still mapped, in the pool.
        let live = addrs.iter().filter(|&&a| mapped(a)).count();
        assert_eq!(live, 6, "buffers still mapped while the pool lives");
        assert_eq!(pool.stats().free, 6);
        let (m, u) = map_counts();
        assert_eq!(m - maps0, 10, "3 initial + 7 misses");
        assert!(u - unmaps0 >= 1);
    }
    let (maps1, unmaps1) = map_counts();
    assert_eq!(maps1 - maps0, unmaps1 - unmaps0, "maps and unmaps balance");
    for a in addrs {
        assert!(!mapped(a), "{a:#x} still mapped after the pool is gone");
    }
}
