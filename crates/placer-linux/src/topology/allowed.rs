//! The CPUs and memory nodes this process may use: its cpuset cgroup (v1, including the
//! old `cpuset` filesystem at /dev/cpuset, or v2's `cpuset.cpus.effective` and
//! `cpuset.mems.effective`) intersected with `Cpus_allowed_list` and `Mems_allowed_list`
//! of `proc/self/status`. All files are read under the root, so a
//! fixture describes the process that captured it.
//!
//! Finding the cgroup: `proc/self/cgroup` (the v1 line whose controllers include
//! `cpuset`, else the v2 `0::` line), else the legacy `proc/self/cpuset` (a path of
//! unknown version: v1 mounts are tried first). The mount comes from
//! `proc/self/mountinfo`, else `proc/mounts`. When the cgroup directory lacks the file
//! (v2 with the controller not enabled there, or a partial snapshot), the nearest
//! ancestor up to the mount point that has it gives the value. Nothing found = no limit.

use super::fs::Files;
use super::parse::{self, Mount};
use crate::error::Result;
use placer_core::CpuSet;

/// What this process may use (`None`: no limit found).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    pub cpus: Option<CpuSet>,
    /// The NUMA nodes it may allocate on.
    pub mems: Option<CpuSet>,
}

/// Its cpuset cgroup's CPUs and memory nodes (the cgroup found once for both), each
/// intersected with `Cpus_allowed_list` / `Mems_allowed_list` of `proc/self/status` (read
/// once).
pub fn allowed(files: &Files) -> Result<Allowed> {
    let cg = Cgroup::find(files)?;
    let set = |which: &SetFiles| match &cg {
        Some(cg) => cg.set(files, which),
        None => Ok(None),
    };
    let cpus = set(&CPUS)?;
    let status = files
        .parse("proc/self/status", |t| {
            Ok((
                parse::status_cpus_allowed(t)?,
                parse::status_mems_allowed(t)?,
            ))
        })?
        .unwrap_or((None, None));
    let mems = set(&MEMS)?;
    Ok(Allowed {
        cpus: combine(cpus, status.0),
        mems: combine(mems, status.1),
    })
}

fn combine(a: Option<CpuSet>, b: Option<CpuSet>) -> Option<CpuSet> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.intersection(&b)),
        (a, b) => a.or(b),
    }
}

/// The cpuset files holding one set, by cgroup version.
struct SetFiles {
    v1: &'static [&'static str],
    v2: &'static [&'static str],
}

const CPUS: SetFiles = SetFiles {
    v1: &["cpuset.effective_cpus", "cpuset.cpus", "cpus"],
    v2: &["cpuset.cpus.effective"],
};
const MEMS: SetFiles = SetFiles {
    v1: &["cpuset.effective_mems", "cpuset.mems", "mems"],
    v2: &["cpuset.mems.effective"],
};

/// The process's cpuset cgroup: its path and the mounts it may live under.
struct Cgroup {
    /// `Some(true)`: v1, `Some(false)`: v2, `None`: unknown (the legacy file).
    version: Option<bool>,
    path: String,
    mounts: Vec<Mount>,
}

impl Cgroup {
    fn find(files: &Files) -> Result<Option<Cgroup>> {
        let (version, path) = match files.parse("proc/self/cgroup", parse::cgroup_cpuset)? {
            Some(Some((v1, p))) => (Some(v1), p),
            _ => match files.text("proc/self/cpuset")? {
                Some(p) if !p.trim().is_empty() => (None, p.trim().to_string()),
                _ => return Ok(None),
            },
        };
        let mounts = match files.parse("proc/self/mountinfo", parse::mountinfo)? {
            Some(m) => m,
            None => match files.parse("proc/mounts", parse::mounts)? {
                Some(m) => m,
                None => return Ok(None),
            },
        };
        Ok(Some(Cgroup {
            version,
            path,
            mounts,
        }))
    }

    /// One of its sets, from the cgroup's directory or the nearest ancestor that has it.
    fn set(&self, files: &Files, which: &SetFiles) -> Result<Option<CpuSet>> {
        let (version, path, mounts) = (self.version, &self.path, &self.mounts);
        let is_v1 = |m: &Mount| {
            m.fs_type == "cpuset"
                || (m.fs_type == "cgroup" && m.options.split(',').any(|o| o == "cpuset"))
        };
        let is_v2 = |m: &Mount| m.fs_type == "cgroup2";
        let mut tries: Vec<(&Mount, &[&str])> = Vec::new();
        let (v1_files, v2_files) = (which.v1, which.v2);
        if version != Some(false) {
            tries.extend(mounts.iter().filter(|m| is_v1(m)).map(|m| (m, v1_files)));
        }
        if version != Some(true) {
            tries.extend(mounts.iter().filter(|m| is_v2(m)).map(|m| (m, v2_files)));
        }
        for (m, names) in tries {
            // The cgroup path is relative to the root of the mounted hierarchy.
            let rel = match path.strip_prefix(m.root.trim_end_matches('/')) {
                Some(r) if m.root != "/" => r.to_string(),
                _ => path.to_string(),
            };
            let mut dir = format!(
                "{}/{}",
                m.mount_point.trim_end_matches('/'),
                rel.trim_matches('/')
            );
            loop {
                for name in names {
                    let file = format!("{}/{}", dir.trim_end_matches('/'), name);
                    if let Some(s) = files.parse(&file, parse::cpuset_list)? {
                        return Ok(Some(s));
                    }
                }
                // Walk up to the mount point.
                let base = m.mount_point.trim_end_matches('/');
                let trimmed = dir.trim_end_matches('/');
                if trimmed.len() <= base.len() {
                    break;
                }
                match trimmed.rfind('/') {
                    Some(i) if i >= base.len() => dir = trimmed[..i].to_string(),
                    _ => break,
                }
            }
        }
        Ok(None)
    }
}
