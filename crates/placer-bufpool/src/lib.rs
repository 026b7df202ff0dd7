//! placer-bufpool: fixed-size network buffers on a chosen NUMA node, reused LIFO.
//!
//! Seed 004 (docs/seeds.md, Konkuk Univ. 2015) measured a ttcp
//! receiver on a 4-package Magny-Cours: reusing one buffer gave 8.1 Gbit/s, allocating a
//! fresh one per message 5.8 Gbit/s (LLC hit ratio above 80 % with reuse, whatever the
//! buffer's node); with fresh buffers, a remote node cost ~15 % against the adjacent one.
//! Its advice: keep buffers cache-hot by reuse, and when you cannot, allocate them on the
//! local node. This crate does both:
//!
//! - every buffer is an anonymous mapping `mbind`-ed to the node you choose
//!   ([`Placement::Bind`] or [`Placement::Preferred`]) and faulted in at once (first
//!   touch), so its pages really are there before the first `recv`;
//! - [`BufPool::get`] hands out the buffer most recently returned with [`BufPool::put`]
//!   (a LIFO stack): the one most likely still in the cache;
//! - [`BufPool::stats`] counts allocations, reuses, misses and the high-water mark of
//!   buffers in use, so a program can see whether its pool is sized right.
//!
//! Invariants (tested): a buffer handed out has every page on the pool's node when the
//! placement is `Bind`; `get` after `put` returns that same buffer; every mapping is
//! unmapped once the pool and all its buffers are gone.
//!
//! ```no_run
//! use placer_bufpool::{BufPool, PoolConfig, Placement};
//! use std::io::Read;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let mut sock = std::net::TcpStream::connect("127.0.0.1:5001")?;
//! let mut pool = BufPool::new(PoolConfig::new(64 << 10, Placement::Bind(0)))?;
//! let mut buf = pool.get()?;              // node-0 memory, pages already allocated
//! let n = sock.read(buf.as_mut_slice())?; // receive into it
//! pool.put(buf);                          // back on top: the next get() reuses it
//! println!("{n} bytes, {:?}", pool.stats());
//! # Ok(()) }
//! ```
//!
//! The pool is not `Sync`: give each thread its own (buffers are best local to the thread
//! that fills them anyway), or wrap it in a `Mutex`. Buffers are `Send`.

pub mod numa;
mod region;

pub use numa::Placement;
pub use region::{map_counts, Region};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("buffer size must be above zero")]
    ZeroSize,
    #[error("mmap of {bytes} bytes: {source}")]
    Map {
        bytes: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("mbind to NUMA node {node}: {source} (EINVAL: no such node or no memory on it)")]
    Bind {
        node: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("pool exhausted: all {max} buffers are in use")]
    Exhausted { max: usize },
}

/// How a pool allocates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Bytes per buffer (rounded up to whole pages).
    pub buf_bytes: usize,
    /// Which node the buffers' pages come from.
    pub placement: Placement,
    /// Fault every page in when a buffer is mapped (first touch under the policy). Default
    /// true: without it the pages are allocated during the first receive, in the kernel's
    /// copy, which is slower and, with `Preferred`, may land elsewhere.
    pub prefault: bool,
    /// Buffers mapped when the pool is created.
    pub initial: usize,
    /// Most buffers alive at once (in use + free); 0 = no limit. `get` beyond it fails
    /// with [`Error::Exhausted`].
    pub max_buffers: usize,
}

impl PoolConfig {
    pub fn new(buf_bytes: usize, placement: Placement) -> PoolConfig {
        PoolConfig {
            buf_bytes,
            placement,
            prefault: true,
            initial: 0,
            max_buffers: 0,
        }
    }
}

/// What a pool did so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// Calls to `get` (successful or not).
    pub gets: u64,
    /// Buffers mapped (including `initial`).
    pub allocations: u64,
    /// `get`s served from the free stack.
    pub reuses: u64,
    /// `get`s that found the free stack empty (each then mapped a new buffer, or failed).
    pub misses: u64,
    /// `get`s that failed (exhausted, mmap or mbind error).
    pub failures: u64,
    /// Buffers given back with `put`.
    pub puts: u64,
    /// Buffers unmapped by the pool (`trim`, drop) or dropped by the user instead of `put`.
    pub unmaps: u64,
    /// Buffers handed out and not yet returned or dropped.
    pub in_use: usize,
    /// Most buffers in use at once.
    pub high_water: usize,
    /// Buffers on the free stack.
    pub free: usize,
}

#[derive(Debug, Default)]
struct Shared {
    in_use: AtomicUsize,
    dropped: AtomicUsize,
}

/// A buffer from a pool. Give it back with [`BufPool::put`]; dropping it instead unmaps
/// its memory (no leak, but no reuse either).
#[derive(Debug)]
pub struct Buf {
    region: Option<Region>,
    shared: Arc<Shared>,
}

impl Buf {
    fn region(&self) -> &Region {
        self.region
            .as_ref()
            .expect("a live Buf always holds its region")
    }
    pub fn len(&self) -> usize {
        self.region().len()
    }
    pub fn is_empty(&self) -> bool {
        self.region().is_empty()
    }
    pub fn as_ptr(&self) -> *const u8 {
        self.region().as_ptr()
    }
    pub fn as_slice(&self) -> &[u8] {
        self.region().as_slice()
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.region
            .as_mut()
            .expect("a live Buf always holds its region")
            .as_mut_slice()
    }
    /// The address of each page (for `numa::page_nodes`).
    pub fn page_addrs(&self) -> Vec<*const u8> {
        self.region().page_addrs()
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        if self.region.take().is_some() {
            self.shared.in_use.fetch_sub(1, Ordering::Relaxed);
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A LIFO pool of equal buffers on one node.
#[derive(Debug)]
pub struct BufPool {
    cfg: PoolConfig,
    free: Vec<Region>,
    shared: Arc<Shared>,
    stats: PoolStats,
}

impl BufPool {
    /// Creates a pool and maps `cfg.initial` buffers. Fails at once when the node cannot
    /// be bound (so a wrong node is found at start, not at the first `get`).
    pub fn new(cfg: PoolConfig) -> Result<BufPool, Error> {
        if cfg.buf_bytes == 0 {
            return Err(Error::ZeroSize);
        }
        let mut pool = BufPool {
            cfg,
            free: Vec::new(),
            shared: Arc::default(),
            stats: PoolStats::default(),
        };
        let n = if pool.cfg.max_buffers > 0 {
            pool.cfg.initial.min(pool.cfg.max_buffers)
        } else {
            pool.cfg.initial
        };
        for _ in 0..n {
            let r = pool.map_one()?;
            pool.free.push(r);
        }
        Ok(pool)
    }

    pub fn config(&self) -> &PoolConfig {
        &self.cfg
    }

    fn map_one(&mut self) -> Result<Region, Error> {
        let r = Region::map(self.cfg.buf_bytes, self.cfg.placement, self.cfg.prefault)?;
        self.stats.allocations += 1;
        Ok(r)
    }

    fn alive(&self) -> usize {
        self.free.len() + self.shared.in_use.load(Ordering::Relaxed)
    }

    /// The most recently returned buffer, or a new one when none is free.
    pub fn get(&mut self) -> Result<Buf, Error> {
        self.stats.gets += 1;
        let region = match self.free.pop() {
            Some(r) => {
                self.stats.reuses += 1;
                r
            }
            None => {
                self.stats.misses += 1;
                if self.cfg.max_buffers > 0 && self.alive() >= self.cfg.max_buffers {
                    self.stats.failures += 1;
                    return Err(Error::Exhausted {
                        max: self.cfg.max_buffers,
                    });
                }
                match self.map_one() {
                    Ok(r) => r,
                    Err(e) => {
                        self.stats.failures += 1;
                        return Err(e);
                    }
                }
            }
        };
        let in_use = self.shared.in_use.fetch_add(1, Ordering::Relaxed) + 1;
        self.stats.high_water = self.stats.high_water.max(in_use);
        Ok(Buf {
            region: Some(region),
            shared: Arc::clone(&self.shared),
        })
    }

    /// Gives a buffer back; it is the next one `get` returns. A buffer from another pool
    /// (other size or node) is unmapped instead of kept.
    pub fn put(&mut self, mut buf: Buf) {
        let Some(region) = buf.region.take() else {
            return;
        };
        buf.shared.in_use.fetch_sub(1, Ordering::Relaxed);
        self.stats.puts += 1;
        let ours = Arc::ptr_eq(&buf.shared, &self.shared);
        if ours {
            self.free.push(region);
        } else {
            self.stats.unmaps += 1;
            drop(region);
        }
    }

    /// Unmaps free buffers until at most `keep` remain, coldest (bottom of the stack) first.
    pub fn trim(&mut self, keep: usize) {
        if self.free.len() > keep {
            let n = self.free.len() - keep;
            self.free.drain(..n);
            self.stats.unmaps += n as u64;
        }
    }

    pub fn stats(&self) -> PoolStats {
        let mut s = self.stats;
        s.in_use = self.shared.in_use.load(Ordering::Relaxed);
        s.free = self.free.len();
        s.unmaps += self.shared.dropped.load(Ordering::Relaxed) as u64;
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifo_reuse_returns_the_last_buffer_put() {
        let mut pool = BufPool::new(PoolConfig::new(8192, Placement::FirstTouch)).unwrap();
        let a = pool.get().unwrap();
        let b = pool.get().unwrap();
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        assert_ne!(pa, pb);
        pool.put(a);
        pool.put(b);
        // b went back last, so it comes out first, then a.
        let x = pool.get().unwrap();
        assert_eq!(x.as_ptr(), pb);
        let y = pool.get().unwrap();
        assert_eq!(y.as_ptr(), pa);
        let s = pool.stats();
        assert_eq!((s.gets, s.allocations, s.reuses, s.misses), (4, 2, 2, 2));
        assert_eq!((s.in_use, s.high_water, s.free), (2, 2, 0));
        pool.put(x);
        pool.put(y);
        assert_eq!(pool.stats().in_use, 0);
    }

    #[test]
    fn steady_state_reuses_one_buffer() {
        let mut pool = BufPool::new(PoolConfig::new(4096, Placement::FirstTouch)).unwrap();
        let mut first = None;
        for _ in 0..100 {
            let b = pool.get().unwrap();
            let p = *first.get_or_insert(b.as_ptr());
            assert_eq!(b.as_ptr(), p);
            pool.put(b);
        }
        let s = pool.stats();
        assert_eq!(
            (s.allocations, s.reuses, s.misses, s.high_water),
            (1, 99, 1, 1)
        );
    }

    #[test]
    fn size_is_rounded_to_pages_and_zero_is_refused() {
        let page = numa::page_bytes();
        let mut pool = BufPool::new(PoolConfig::new(page + 1, Placement::FirstTouch)).unwrap();
        assert_eq!(pool.get().unwrap().len(), 2 * page);
        assert!(matches!(
            BufPool::new(PoolConfig::new(0, Placement::FirstTouch)),
            Err(Error::ZeroSize)
        ));
    }

    #[test]
    fn max_buffers_bounds_the_pool() {
        let mut cfg = PoolConfig::new(4096, Placement::FirstTouch);
        cfg.max_buffers = 2;
        cfg.initial = 5;
        let mut pool = BufPool::new(cfg).unwrap();
        assert_eq!(pool.stats().allocations, 2);
        let a = pool.get().unwrap();
        let _b = pool.get().unwrap();
        assert!(matches!(pool.get(), Err(Error::Exhausted { max: 2 })));
        let s = pool.stats();
        assert_eq!((s.misses, s.failures), (1, 1));
        pool.put(a);
        assert!(pool.get().is_ok());
    }

    #[test]
    fn dropped_buffer_counts_and_trim_keeps_the_hottest() {
        let mut cfg = PoolConfig::new(4096, Placement::FirstTouch);
        cfg.initial = 3;
        let mut pool = BufPool::new(cfg).unwrap();
        let a = pool.get().unwrap();
        drop(a);
        let s = pool.stats();
        assert_eq!((s.in_use, s.unmaps, s.free), (0, 1, 2));
        let top = pool.get().unwrap();
        let top_ptr = top.as_ptr();
        pool.put(top);
        pool.trim(1);
        assert_eq!(pool.stats().free, 1);
        assert_eq!(pool.get().unwrap().as_ptr(), top_ptr);
    }

    #[test]
    fn a_foreign_buffer_is_not_kept() {
        let mut p1 = BufPool::new(PoolConfig::new(4096, Placement::FirstTouch)).unwrap();
        let mut p2 = BufPool::new(PoolConfig::new(8192, Placement::FirstTouch)).unwrap();
        let b = p2.get().unwrap();
        p1.put(b);
        assert_eq!(p1.stats().free, 0);
        assert_eq!(p2.stats().in_use, 0);
    }

    #[test]
    fn writes_land_in_the_buffer() {
        let mut pool = BufPool::new(PoolConfig::new(4096, Placement::FirstTouch)).unwrap();
        let mut b = pool.get().unwrap();
        b.as_mut_slice()[100] = 7;
        pool.put(b);
        let b = pool.get().unwrap();
        assert_eq!(b.as_slice()[100], 7);
    }
}
