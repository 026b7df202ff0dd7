//! Who a pid is: its start time (the identity that survives pid reuse) and its threads,
//! read under a root.

use std::path::Path;

/// Start time (field 22 of /proc/PID/stat) of a process under `root`; None if gone.
pub fn start_time_ticks(root: &Path, pid: u32) -> Option<u64> {
    let text = crate::attr::read(&root.join(format!("proc/{pid}/stat")))?;
    parse_start_time(&text)
}

/// A thread's start time in clock ticks since boot (field 22 of its own stat).
pub fn thread_start_ticks(root: &Path, pid: u32, tid: u32) -> Option<u64> {
    let text = crate::attr::read(&root.join(format!("proc/{pid}/task/{tid}/stat")))?;
    parse_start_time(&text)
}

/// Now, in the clock ticks since boot that start times count.
pub fn now_ticks() -> u64 {
    let ns = crate::sys::clock_ns(crate::sys::Clock::Boottime);
    ns / (1_000_000_000 / u64::from(crate::sys::clock_ticks_per_s()))
}

/// Field 22 of a stat line (the one stat parser, `procfs::parse_pid_stat`, reads it).
pub fn parse_start_time(stat: &str) -> Option<u64> {
    crate::procfs::parse_pid_stat(stat).map(|s| s.start_time_ticks)
}

/// The `process_*` figures of process `pid` under `root` (`None` when its files are
/// gone or unreadable, as under a snapshot root).
pub fn process_stats(root: &Path, pid: u32) -> Option<crate::procfs::ProcessStats> {
    let dir = root.join(format!("proc/{pid}"));
    let stat = crate::procfs::parse_pid_stat(&crate::attr::read(&dir.join("stat"))?)?;
    let status = crate::attr::read(&dir.join("status"))?;
    let limits = crate::attr::read(&dir.join("limits")).unwrap_or_default();
    // /proc/stat grows with the CPUs and interrupts: more than an attribute's cap.
    let proc_stat = crate::attr::read_capped(&root.join("proc/stat"), 16 << 20).ok()?;
    let btime = crate::procfs::parse_btime(&proc_stat)?;
    let fds = std::fs::read_dir(dir.join("fd")).ok()?.count() as u64;
    Some(crate::procfs::process_stats(
        &stat,
        &status,
        &limits,
        btime,
        fds,
        crate::sys::clock_ticks_per_s(),
    ))
}

/// Thread ids of a process under `root`, sorted.
pub fn task_ids(root: &Path, pid: u32) -> std::io::Result<Vec<u32>> {
    numeric_names(&root.join(format!("proc/{pid}/task")))
}

/// Process ids under `root` (`ROOT/proc`'s numeric entries), sorted.
pub fn process_ids(root: &Path) -> std::io::Result<Vec<u32>> {
    numeric_names(&root.join("proc"))
}

fn numeric_names(dir: &Path) -> std::io::Result<Vec<u32>> {
    let mut v: Vec<u32> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    Ok(v)
}

/// A hasher for pid and tid keys: one multiply instead of SipHash. Keys are small
/// integers chosen by the kernel, not by an adversary, and a sample of 8,000 processes
/// hashes each several times (the cache, the sets of what ran, what is alive).
///
/// The table places a key by its hash's low bits and tells keys in a group apart by its
/// top 7: a pid's hash is the pid itself in the low bits (consecutive pids sit in
/// consecutive buckets, so a walk over sorted pids reads the table in order instead of
/// missing the cache at each, which at 32,000 processes was most of a cycle) and a mix of
/// it in the top 7. Pids that differ by a multiple of the table's size share a home
/// bucket and probe on: the kernel hands pids out in increasing order, so that takes a
/// machine with many more processes than buckets, which the table's growth prevents.
#[derive(Default, Clone, Copy)]
pub struct PidHasher(u64);

/// The hash's top 7 bits, which the table compares within a group of buckets.
const TAG_BITS: u64 = 0xFE00_0000_0000_0000;

impl std::hash::Hasher for PidHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u32(&mut self, n: u32) {
        let mixed = (self.0 ^ u64::from(n)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = (mixed & TAG_BITS) | u64::from(n);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type PidBuild = std::hash::BuildHasherDefault<PidHasher>;
/// A map keyed by pid (or tid).
pub type PidMap<V> = std::collections::HashMap<u32, V, PidBuild>;
/// A set of pids (or tids).
pub type PidSet = std::collections::HashSet<u32, PidBuild>;

#[cfg(test)]
mod hasher_tests {
    use super::{PidHasher, PidMap, PidSet, TAG_BITS};
    use std::hash::Hasher;

    fn hash(pid: u32) -> u64 {
        let mut h = PidHasher::default();
        h.write_u32(pid);
        h.finish()
    }

    /// Consecutive pids land in consecutive buckets (the low bits are the pid), and the
    /// tags that tell a group's keys apart still differ between neighbours.
    #[test]
    fn a_pid_hash_keeps_pid_order_in_its_low_bits_and_mixes_its_tag() {
        for pid in [0, 1, 2, 300, 4_194_303, u32::MAX] {
            assert_eq!(hash(pid) & !TAG_BITS, u64::from(pid));
        }
        let tags: std::collections::HashSet<u64> =
            (1..=1_000u32).map(|p| hash(p) & TAG_BITS).collect();
        assert!(tags.len() >= 100, "{} tags of 128", tags.len());
    }

    #[test]
    fn pid_maps_and_sets_behave_as_maps_and_sets() {
        let mut m: PidMap<u32> = PidMap::default();
        for pid in 1..=10_000u32 {
            m.insert(pid, pid * 2);
        }
        assert_eq!(m.len(), 10_000);
        assert!((1..=10_000u32).all(|p| m[&p] == p * 2));
        let s: PidSet = (0..64u32).map(|i| i << 16).collect();
        assert_eq!(s.len(), 64);
        assert!(s.contains(&(5 << 16)) && !s.contains(&5));
    }
}
