//! Helpers shared by the topology fixture tests: unpacking snapshots into temporary
//! directories (removed on drop) and grouping CPUs into partitions.

#![allow(dead_code)]

use placer_core::topology::CacheKind;
use placer_core::{CpuSet, Topology};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A snapshot unpacked into a fresh temporary directory, removed on drop.
pub struct Unpacked {
    dir: PathBuf,
    /// The snapshot's single top-level directory: the fake filesystem root.
    pub root: PathBuf,
}

impl Drop for Unpacked {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Unpacks `tarball` (`.tar.bz2` or `.tar.gz`) with the `tar` command.
pub fn unpack(tarball: &Path) -> Unpacked {
    unpack_all(&[tarball.to_path_buf()]).pop().unwrap()
}

/// Unpacks several tarballs with concurrent `tar` processes (the fixture tests' main
/// cost is creating the snapshots' files).
pub fn unpack_all(tarballs: &[PathBuf]) -> Vec<Unpacked> {
    let mut jobs = Vec::new();
    for tarball in tarballs {
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!(
            "placer-topo-test-{}-{}-{}",
            std::process::id(),
            n,
            tarball.file_name().unwrap().to_string_lossy()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let guard = Unpacked {
            dir: dir.clone(),
            root: dir.clone(),
        };
        let flag = if tarball.to_string_lossy().ends_with(".bz2") {
            "-xjf"
        } else {
            "-xzf"
        };
        let child = Command::new("tar")
            .arg("--no-same-owner")
            .arg(flag)
            .arg(tarball)
            .arg("-C")
            .arg(&dir)
            .spawn()
            .expect("running tar");
        jobs.push((tarball, guard, child));
    }
    let mut out = Vec::new();
    for (tarball, mut guard, mut child) in jobs {
        let st = child.wait().expect("waiting for tar");
        assert!(st.success(), "tar failed on {}", tarball.display());
        let tops: Vec<PathBuf> = std::fs::read_dir(&guard.dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        assert_eq!(tops.len(), 1, "{}: expected one top dir", tarball.display());
        guard.root = tops[0].clone();
        out.push(guard);
    }
    out
}

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hwloc")
}

/// `shared/topologies/<sub>` in an ancestor of the crate (the project's shared data),
/// or `None` when it is not on this machine.
pub fn shared_dir(sub: &str) -> Option<PathBuf> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .map(|a| a.join("shared/topologies").join(sub))
        .find(|p| p.is_dir())
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
