//! Helpers shared by the topology fixture tests: unpacking snapshots into temporary
//! directories (removed on drop) and grouping CPUs into partitions.

#![allow(dead_code)]

use placer_core::topology::CacheKind;
use placer_core::{CpuSet, Topology};
use placer_testkit::FakeRoot;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A snapshot unpacked into a fake root of its own, removed on drop.
pub struct Unpacked {
    _dir: FakeRoot,
    /// The snapshot's single top-level directory: the fake filesystem root.
    pub root: PathBuf,
}

/// Unpacks `tarball` (`.tar.bz2` or `.tar.gz`) with the `tar` command.
pub fn unpack(tarball: &Path) -> Unpacked {
    unpack_all(&[tarball.to_path_buf()]).pop().unwrap()
}

/// Unpacks several tarballs with concurrent `tar` processes.
pub fn unpack_all(tarballs: &[PathBuf]) -> Vec<Unpacked> {
    FakeRoot::unpack_each("topo-test", tarballs)
        .into_iter()
        .map(|(dir, root)| Unpacked { _dir: dir, root })
        .collect()
}

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hwloc")
}

/// util-linux's lscpu dumps and their expected outputs (GPL-2.0-or-later test data, see
/// its README).
pub fn lscpu_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lscpu")
}

pub type Partition = BTreeSet<CpuSet>;

/// Groups `cpus` by `key`; CPUs whose key is `None` are left out.
pub fn group_by<K: Ord>(cpus: &CpuSet, key: impl Fn(u32) -> Option<K>) -> Partition {
    let mut m: BTreeMap<K, CpuSet> = BTreeMap::new();
    for c in cpus.iter() {
        if let Some(k) = key(c) {
            m.entry(k).or_default().insert(c);
        }
    }
    m.into_values().collect()
}

/// Our partition of `shown` by a CPU field.
pub fn ours_by(
    topo: &Topology,
    shown: &CpuSet,
    f: impl Fn(&placer_core::topology::Cpu) -> Option<u32>,
) -> Partition {
    group_by(shown, |id| topo.cpu(id).and_then(&f))
}

/// Our cache instances of `level` and `kind` (None = unified or data), restricted to
/// `shown`, empty ones dropped.
pub fn ours_caches(
    topo: &Topology,
    shown: &CpuSet,
    level: u8,
    kind: Option<CacheKind>,
) -> Partition {
    topo.caches
        .iter()
        .filter(|c| c.level == level)
        .filter(|c| match kind {
            Some(k) => c.kind == k,
            None => c.kind != CacheKind::Instruction,
        })
        .map(|c| c.cpus.intersection(shown))
        .filter(|s| !s.is_empty())
        .collect()
}

/// Restricts every set of `p` to `to`, dropping empty sets.
pub fn restrict(p: &Partition, to: &CpuSet) -> Partition {
    p.iter()
        .map(|s| s.intersection(to))
        .filter(|s| !s.is_empty())
        .collect()
}

pub fn union_of(p: &Partition) -> CpuSet {
    p.iter().fold(CpuSet::new(), |a, s| a.union(s))
}

pub fn show(p: &Partition) -> String {
    p.iter()
        .map(|s| format!("{{{s}}}"))
        .collect::<Vec<_>>()
        .join(" ")
}
