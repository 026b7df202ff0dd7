//! The CPUs this process may use: its cpuset cgroup (v1, including the old `cpuset`
//! filesystem at /dev/cpuset, or v2's `cpuset.cpus.effective`) intersected with
//! `Cpus_allowed_list` of `proc/self/status`. All files are read under the root, so a
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

pub fn allowed_cpus(files: &Files) -> Result<Option<CpuSet>> {
    let cg = cgroup_set(files, &CPUS)?;
    let status = files
        .parse("proc/self/status", parse::status_cpus_allowed)?
        .flatten();
    Ok(combine(cg, status))
}

/// The NUMA nodes this process may allocate on: the cpuset cgroup's mems intersected with
/// `Mems_allowed_list` of `proc/self/status` (the same search as for CPUs).
pub fn allowed_mems(files: &Files) -> Result<Option<CpuSet>> {
    let cg = cgroup_set(files, &MEMS)?;
    let status = files
        .parse("proc/self/status", parse::status_mems_allowed)?
        .flatten();
    Ok(combine(cg, status))
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

fn cgroup_set(files: &Files, which: &SetFiles) -> Result<Option<CpuSet>> {
    // (is_v1: Some(true)/Some(false)/None=unknown, path)
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
            _ => path.clone(),
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
