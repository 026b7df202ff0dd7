//! cpufreq actuation (seed 000's DVFS knob): cap a policy's `scaling_max_freq`, or switch
//! it to the `userspace` governor at a fixed `scaling_setspeed`; every change returns the
//! previous values ([`CpufreqPrev`]) for the journal, and [`restore`] writes them back.
//!
//! Files live under `ROOT/sys/devices/system/cpu/cpufreq/policyN` (or, on old kernels,
//! `ROOT/sys/devices/system/cpu/cpuN/cpufreq`), so tests run on a writable temporary tree.
//! Requested frequencies are snapped down to an available one (`scaling_available_
//! frequencies`), never below `cpuinfo_min_freq`, so a cap never asks the driver for an
//! OPP it lacks.

use crate::error::{LinuxError, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What a cpufreq policy looked like before placer changed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpufreqPrev {
    pub domain: u32,
    pub scaling_max_khz: Option<u64>,
    pub governor: Option<String>,
    /// `scaling_setspeed` when the governor was `userspace`.
    pub setspeed_khz: Option<u64>,
}

/// A policy's current settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpufreqState {
    pub domain: u32,
    pub dir: PathBuf,
    pub available_khz: Vec<u64>,
    pub min_khz: Option<u64>,
    pub max_khz: Option<u64>,
    pub scaling_max_khz: Option<u64>,
    pub governor: Option<String>,
    pub available_governors: Vec<String>,
}

/// The directory of cpufreq policy `domain` under `root`, if present.
pub fn policy_dir(root: &Path, domain: u32) -> Option<PathBuf> {
    let base = root.join("sys/devices/system/cpu");
    [
        base.join(format!("cpufreq/policy{domain}")),
        base.join(format!("cpu{domain}/cpufreq")),
    ]
    .into_iter()
    .find(|p| p.join("scaling_max_freq").exists())
}

/// Why cpufreq cannot be used under `root`, if so.
pub fn unavailable_reason(root: &Path) -> Option<String> {
    let dir = root.join("sys/devices/system/cpu/cpufreq");
    let has_policy = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("policy"))
        })
        .unwrap_or(false);
    if has_policy {
        None
    } else {
        Some(format!(
            "no cpufreq policies under {} (no cpufreq driver: virtual machine or DVFS \
             disabled)",
            dir.display()
        ))
    }
}

fn read_opt(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn read_khz(path: &Path) -> Result<Option<u64>> {
    match read_opt(path) {
        None => Ok(None),
        Some(s) if s.is_empty() || s.starts_with('<') => Ok(None),
        Some(s) => s
            .parse()
            .map(Some)
            .map_err(|e| LinuxError::parse(path, format!("{s:?}: {e}"))),
    }
}

fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).map_err(|e| LinuxError::io(path, e))
}

/// Parses `scaling_available_frequencies` ("200000 300000 ...").
pub fn parse_khz_list(text: &str) -> Vec<u64> {
    let mut v: Vec<u64> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

pub fn read_state(root: &Path, domain: u32) -> Result<CpufreqState> {
    let dir = policy_dir(root, domain).ok_or_else(|| {
        LinuxError::Other(format!(
            "cpufreq policy {domain}: not found under {}",
            root.join("sys/devices/system/cpu/cpufreq").display()
        ))
    })?;
    Ok(CpufreqState {
        domain,
        available_khz: read_opt(&dir.join("scaling_available_frequencies"))
            .map(|s| parse_khz_list(&s))
            .unwrap_or_default(),
        min_khz: read_khz(&dir.join("cpuinfo_min_freq"))?,
        max_khz: read_khz(&dir.join("cpuinfo_max_freq"))?,
        scaling_max_khz: read_khz(&dir.join("scaling_max_freq"))?,
        governor: read_opt(&dir.join("scaling_governor")),
        available_governors: read_opt(&dir.join("scaling_available_governors"))
            .map(|s| s.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default(),
        dir,
    })
}

/// The highest available frequency <= `khz` (the lowest available one when `khz` is below
/// all), clamped to cpuinfo min/max when no list is given.
pub fn snap_khz(st: &CpufreqState, khz: u64) -> u64 {
    if !st.available_khz.is_empty() {
        return st
            .available_khz
            .iter()
            .rev()
            .find(|&&f| f <= khz)
            .or(st.available_khz.first())
            .copied()
            .unwrap_or(khz);
    }
    let lo = st.min_khz.unwrap_or(0);
    let hi = st.max_khz.unwrap_or(u64::MAX);
    khz.clamp(lo, hi.max(lo))
}

fn prev_of(st: &CpufreqState) -> CpufreqPrev {
    let setspeed = if st.governor.as_deref() == Some("userspace") {
        read_khz(&st.dir.join("scaling_setspeed")).ok().flatten()
    } else {
        None
    };
    CpufreqPrev {
        domain: st.domain,
        scaling_max_khz: st.scaling_max_khz,
        governor: st.governor.clone(),
        setspeed_khz: setspeed,
    }
}

/// Caps policy `domain` at `khz` (snapped to an available frequency). Returns the previous
/// settings (to journal before anything else changes) and the frequency written.
pub fn cap_max(root: &Path, domain: u32, khz: u64) -> Result<(CpufreqPrev, u64)> {
    let st = read_state(root, domain)?;
    let prev = prev_of(&st);
    let f = snap_khz(&st, khz);
    write(&st.dir.join("scaling_max_freq"), &f.to_string())?;
    Ok((prev, f))
}

/// Sets the governor and, for `userspace`, `scaling_setspeed` (snapped). The governor must
/// be listed in `scaling_available_governors` when that file exists.
pub fn set_governor(
    root: &Path,
    domain: u32,
    governor: &str,
    speed_khz: Option<u64>,
) -> Result<CpufreqPrev> {
    let st = read_state(root, domain)?;
    if !st.available_governors.is_empty() && !st.available_governors.iter().any(|g| g == governor) {
        return Err(LinuxError::Other(format!(
            "cpufreq policy {domain}: governor {governor:?} not available (have: {})",
            st.available_governors.join(" ")
        )));
    }
    let prev = prev_of(&st);
    write(&st.dir.join("scaling_governor"), governor)?;
    if let Some(s) = speed_khz {
        write(
            &st.dir.join("scaling_setspeed"),
            &snap_khz(&st, s).to_string(),
        )?;
    }
    Ok(prev)
}

/// Puts back what [`cap_max`]/[`set_governor`] returned: governor first (a governor
/// change may reset limits on some drivers), then `scaling_setspeed` for userspace, then
/// `scaling_max_freq`.
pub fn restore(root: &Path, prev: &CpufreqPrev) -> Result<()> {
    let st = read_state(root, prev.domain)?;
    if let Some(g) = &prev.governor {
        if st.governor.as_ref() != Some(g) {
            write(&st.dir.join("scaling_governor"), g)?;
        }
        if g == "userspace" {
            if let Some(s) = prev.setspeed_khz {
                write(&st.dir.join("scaling_setspeed"), &s.to_string())?;
            }
        }
    }
    if let Some(m) = prev.scaling_max_khz {
        write(&st.dir.join("scaling_max_freq"), &m.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A writable fake cpufreq tree: policy0 (A7-like) and policy4 (A15-like).
    pub(crate) struct FakeSysfs {
        pub root: PathBuf,
    }

    impl FakeSysfs {
        pub fn new(tag: &str) -> FakeSysfs {
            let root = std::env::temp_dir().join(format!(
                "placer-cpufreq-{tag}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = std::fs::remove_dir_all(&root);
            for (id, top) in [(0u32, 14u64), (4, 20)] {
                let d = root.join(format!("sys/devices/system/cpu/cpufreq/policy{id}"));
                std::fs::create_dir_all(&d).unwrap();
                let freqs: Vec<String> = (2..=top).map(|m| (m * 100_000).to_string()).collect();
                let files = [
                    ("scaling_available_frequencies", freqs.join(" ")),
                    ("cpuinfo_min_freq", "200000".into()),
                    ("cpuinfo_max_freq", (top * 100_000).to_string()),
                    ("scaling_max_freq", (top * 100_000).to_string()),
                    ("scaling_min_freq", "200000".into()),
                    ("scaling_governor", "schedutil".into()),
                    (
                        "scaling_available_governors",
                        "performance powersave schedutil userspace".into(),
                    ),
                    ("scaling_setspeed", "<unsupported>".into()),
                ];
                for (f, v) in files {
                    std::fs::write(d.join(f), format!("{v}\n")).unwrap();
                }
            }
            FakeSysfs { root }
        }
        pub fn read(&self, domain: u32, file: &str) -> String {
            std::fs::read_to_string(self.root.join(format!(
                "sys/devices/system/cpu/cpufreq/policy{domain}/{file}"
            )))
            .unwrap()
            .trim()
            .to_string()
        }
    }

    impl Drop for FakeSysfs {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    #[test]
    fn cap_snaps_and_restores() {
        let fs = FakeSysfs::new("cap");
        let (prev, f) = cap_max(&fs.root, 4, 1_250_000).unwrap();
        assert_eq!(f, 1_200_000);
        assert_eq!(fs.read(4, "scaling_max_freq"), "1200000");
        assert_eq!(prev.scaling_max_khz, Some(2_000_000));
        assert_eq!(prev.governor.as_deref(), Some("schedutil"));
        // Below the lowest OPP: the lowest.
        let (_, f) = cap_max(&fs.root, 0, 50_000).unwrap();
        assert_eq!(f, 200_000);
        restore(&fs.root, &prev).unwrap();
        assert_eq!(fs.read(4, "scaling_max_freq"), "2000000");
        // Policy 0 untouched by restoring policy 4.
        assert_eq!(fs.read(0, "scaling_max_freq"), "200000");
    }

    #[test]
    fn userspace_governor_and_restore() {
        let fs = FakeSysfs::new("gov");
        let prev = set_governor(&fs.root, 0, "userspace", Some(999_000)).unwrap();
        assert_eq!(fs.read(0, "scaling_governor"), "userspace");
        assert_eq!(fs.read(0, "scaling_setspeed"), "900000");
        assert_eq!(prev.governor.as_deref(), Some("schedutil"));
        assert_eq!(prev.setspeed_khz, None);
        // A second change journals the userspace state, and restoring it brings it back.
        let prev2 = set_governor(&fs.root, 0, "powersave", None).unwrap();
        assert_eq!(prev2.setspeed_khz, Some(900_000));
        restore(&fs.root, &prev2).unwrap();
        assert_eq!(fs.read(0, "scaling_governor"), "userspace");
        restore(&fs.root, &prev).unwrap();
        assert_eq!(fs.read(0, "scaling_governor"), "schedutil");
        assert!(set_governor(&fs.root, 0, "ondemand", None).is_err());
    }

    #[test]
    fn missing_policy_is_an_error_with_the_path() {
        let fs = FakeSysfs::new("miss");
        let e = cap_max(&fs.root, 2, 1_000_000).unwrap_err().to_string();
        assert!(e.contains("policy 2") && e.contains("cpufreq"), "{e}");
        assert!(unavailable_reason(&fs.root).is_none());
        assert!(unavailable_reason(Path::new("/nonexistent-placer-root")).is_some());
    }

    #[test]
    fn parses_frequency_lists() {
        assert_eq!(
            parse_khz_list("300000 200000 x 300000\n"),
            vec![200_000, 300_000]
        );
        assert!(parse_khz_list("").is_empty());
    }
}
