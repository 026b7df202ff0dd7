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

fn read_khz(path: &Path) -> Result<Option<u64>> {
    match crate::attr::read(path) {
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
        available_khz: crate::attr::read(&dir.join("scaling_available_frequencies"))
            .map(|s| parse_khz_list(&s))
            .unwrap_or_default(),
        min_khz: read_khz(&dir.join("cpuinfo_min_freq"))?,
        max_khz: read_khz(&dir.join("cpuinfo_max_freq"))?,
        scaling_max_khz: read_khz(&dir.join("scaling_max_freq"))?,
        governor: crate::attr::read(&dir.join("scaling_governor")),
        available_governors: crate::attr::read(&dir.join("scaling_available_governors"))
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

// ---------------------------------------------------------------------------------------
// Actuator handler: CapFrequency, SetGovernor, RestoreFrequency; restores the journal's
// `cpufreq_max` and `cpufreq_governor` knobs.

use crate::journal::{Entry, Knob};
use crate::knob::{classify, Ctx, KnobHandler, Restored};
use placer_core::plan::{Action, Outcome};
use placer_core::policy_kind::PolicyKind;

/// Journal value of a governor knob: `name`, or `userspace:KHZ`.
fn governor_value(st: &CpufreqState) -> String {
    let g = st.governor.clone().unwrap_or_default();
    match (
        g.as_str(),
        read_khz(&st.dir.join("scaling_setspeed")).ok().flatten(),
    ) {
        ("userspace", Some(k)) => format!("userspace:{k}"),
        _ => g,
    }
}

fn outcome_of(e: &LinuxError, what: &str) -> Outcome {
    match e {
        LinuxError::Io { source, .. } => classify(source, what),
        other => Outcome::Permanent(format!("{what}: {other}")),
    }
}

/// The cpufreq knob handler (the actuator's for `cpufreq_max` and `cpufreq_governor`).
#[derive(Debug, Default)]
pub struct CpufreqHandler;

impl CpufreqHandler {
    /// Journals `knob` (previous -> applied) then runs `write`; drops a new entry again
    /// when the write fails.
    fn journaled(
        ctx: &mut Ctx<'_>,
        knob: Knob,
        previous: &str,
        applied: &str,
        policy: PolicyKind,
        write: impl FnOnce() -> Result<()>,
    ) -> Outcome {
        let Some(journal) = ctx.journal.as_deref_mut() else {
            return Outcome::Transient("no journal".into());
        };
        let new = match journal.record(knob.clone(), previous, applied, policy.name()) {
            Ok(n) => n,
            Err(e) => return Outcome::Transient(format!("journal: {e}")),
        };
        match write() {
            Ok(()) => Outcome::Done,
            Err(e) => {
                if new {
                    let _ = journal.remove(&knob);
                }
                outcome_of(&e, &format!("{knob}"))
            }
        }
    }

    fn cap(ctx: &mut Ctx<'_>, domain: u32, khz: u64, policy: PolicyKind, dry_run: bool) -> Outcome {
        let st = match read_state(ctx.root, domain) {
            Ok(s) => s,
            Err(e) => return Outcome::Permanent(e.to_string()),
        };
        let f = snap_khz(&st, khz);
        let knob = Knob::CpufreqMax { domain };
        if st.scaling_max_khz == Some(f) {
            return Outcome::Skipped(format!("{knob} already {f} kHz"));
        }
        if dry_run {
            return Outcome::Skipped(format!("dry run: would set {knob} to {f} kHz"));
        }
        let prev = st
            .scaling_max_khz
            .map(|k| k.to_string())
            .unwrap_or_default();
        let root = ctx.root.to_path_buf();
        Self::journaled(ctx, knob, &prev, &f.to_string(), policy, || {
            cap_max(&root, domain, f).map(|_| ())
        })
    }

    fn governor(
        ctx: &mut Ctx<'_>,
        domain: u32,
        governor: &str,
        speed: Option<u64>,
        policy: PolicyKind,
        dry_run: bool,
    ) -> Outcome {
        let st = match read_state(ctx.root, domain) {
            Ok(s) => s,
            Err(e) => return Outcome::Permanent(e.to_string()),
        };
        let applied = match speed {
            Some(k) if governor == "userspace" => format!("userspace:{}", snap_khz(&st, k)),
            _ => governor.to_string(),
        };
        let knob = Knob::CpufreqGovernor { domain };
        let prev = governor_value(&st);
        if prev == applied {
            return Outcome::Skipped(format!("{knob} already {applied}"));
        }
        if dry_run {
            return Outcome::Skipped(format!("dry run: would set {knob} to {applied}"));
        }
        let root = ctx.root.to_path_buf();
        let g = governor.to_string();
        Self::journaled(ctx, knob, &prev, &applied, policy, || {
            set_governor(&root, domain, &g, speed).map(|_| ())
        })
    }
}

impl KnobHandler for CpufreqHandler {
    fn apply(&mut self, ctx: &mut Ctx<'_>, action: &Action, policy: PolicyKind) -> Outcome {
        let dry_run = ctx.dry_run();
        match action {
            Action::CapFrequency { domain, max_khz } => {
                Self::cap(ctx, *domain, *max_khz, policy, dry_run)
            }
            Action::SetGovernor {
                domain,
                governor,
                speed_khz,
            } => Self::governor(ctx, *domain, governor, *speed_khz, policy, dry_run),
            Action::RestoreFrequency { domain } => {
                let mut out = Outcome::Skipped(format!("policy{domain}: placer did not change it"));
                // Governor first, then the cap (see `restore`).
                for knob in [
                    Knob::CpufreqGovernor { domain: *domain },
                    Knob::CpufreqMax { domain: *domain },
                ] {
                    let Some(e) = ctx.entry(&knob) else { continue };
                    if dry_run {
                        out = Outcome::Skipped(format!("dry run: would restore {knob}"));
                        continue;
                    }
                    let r = self.restore(ctx.root, &e);
                    out = crate::knob::settle(ctx, &knob, r);
                }
                out
            }
            _ => crate::knob::not_mine("cpufreq", action),
        }
    }

    fn restore(&mut self, root: &Path, entry: &Entry) -> Restored {
        let (domain, is_max) = match entry.knob {
            Knob::CpufreqMax { domain } => (domain, true),
            Knob::CpufreqGovernor { domain } => (domain, false),
            _ => return Restored::Failed("not a cpufreq knob".into()),
        };
        let st = match read_state(root, domain) {
            Ok(s) => s,
            Err(e) => return Restored::Gone(e.to_string()),
        };
        let now = if is_max {
            st.scaling_max_khz
                .map(|k| k.to_string())
                .unwrap_or_default()
        } else {
            governor_value(&st)
        };
        if now != entry.applied {
            return Restored::ChangedElsewhere(format!(
                "{} is {now} now, not the {} placer set: left as is",
                entry.knob, entry.applied
            ));
        }
        let prev = if is_max {
            CpufreqPrev {
                domain,
                scaling_max_khz: entry.previous.parse().ok(),
                governor: None,
                setspeed_khz: None,
            }
        } else {
            let (g, speed) = match entry.previous.split_once(':') {
                Some((g, k)) => (g.to_string(), k.parse().ok()),
                None => (entry.previous.clone(), None),
            };
            CpufreqPrev {
                domain,
                scaling_max_khz: None,
                governor: Some(g),
                setspeed_khz: speed,
            }
        };
        match restore(root, &prev) {
            Ok(()) => Restored::Restored,
            Err(e) => Restored::Failed(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use placer_testkit::FakeRoot;

    /// A fake root with a writable cpufreq tree: policy0 (A7-like) and policy4 (A15-like).
    fn cpufreq_root(tag: &str) -> FakeRoot {
        let root = FakeRoot::new(&format!("cpufreq-{tag}"));
        for (id, top) in [(0u32, 14u64), (4, 20)] {
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
                root.sys(&format!("devices/system/cpu/cpufreq/policy{id}/{f}"), &v);
            }
        }
        root
    }

    /// A policy's file in [`cpufreq_root`]'s tree, trimmed.
    fn policy_file(root: &FakeRoot, domain: u32, file: &str) -> String {
        root.read(format!(
            "sys/devices/system/cpu/cpufreq/policy{domain}/{file}"
        ))
    }

    #[test]
    fn cap_snaps_and_restores() {
        let fs = cpufreq_root("cap");
        let (prev, f) = cap_max(fs.path(), 4, 1_250_000).unwrap();
        assert_eq!(f, 1_200_000);
        assert_eq!(policy_file(&fs, 4, "scaling_max_freq"), "1200000");
        assert_eq!(prev.scaling_max_khz, Some(2_000_000));
        assert_eq!(prev.governor.as_deref(), Some("schedutil"));
        // Below the lowest OPP: the lowest.
        let (_, f) = cap_max(fs.path(), 0, 50_000).unwrap();
        assert_eq!(f, 200_000);
        restore(fs.path(), &prev).unwrap();
        assert_eq!(policy_file(&fs, 4, "scaling_max_freq"), "2000000");
        // Policy 0 untouched by restoring policy 4.
        assert_eq!(policy_file(&fs, 0, "scaling_max_freq"), "200000");
    }

    #[test]
    fn userspace_governor_and_restore() {
        let fs = cpufreq_root("gov");
        let prev = set_governor(fs.path(), 0, "userspace", Some(999_000)).unwrap();
        assert_eq!(policy_file(&fs, 0, "scaling_governor"), "userspace");
        assert_eq!(policy_file(&fs, 0, "scaling_setspeed"), "900000");
        assert_eq!(prev.governor.as_deref(), Some("schedutil"));
        assert_eq!(prev.setspeed_khz, None);
        // A second change journals the userspace state, and restoring it brings it back.
        let prev2 = set_governor(fs.path(), 0, "powersave", None).unwrap();
        assert_eq!(prev2.setspeed_khz, Some(900_000));
        restore(fs.path(), &prev2).unwrap();
        assert_eq!(policy_file(&fs, 0, "scaling_governor"), "userspace");
        restore(fs.path(), &prev).unwrap();
        assert_eq!(policy_file(&fs, 0, "scaling_governor"), "schedutil");
        assert!(set_governor(fs.path(), 0, "ondemand", None).is_err());
    }

    #[test]
    fn missing_policy_is_an_error_with_the_path() {
        let fs = cpufreq_root("miss");
        let e = cap_max(fs.path(), 2, 1_000_000).unwrap_err().to_string();
        assert!(e.contains("policy 2") && e.contains("cpufreq"), "{e}");
        assert!(unavailable_reason(fs.path()).is_none());
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

    #[test]
    fn handler_journals_caps_and_restores() {
        use crate::actuator::Actuator;
        use placer_core::plan::Plan;
        let fs = cpufreq_root("handler");
        let state = fs.join("state");
        let mut act = Actuator::new(fs.path(), &state);
        let mut plan = Plan::default();
        plan.push(
            placer_core::policy_kind::PolicyKind::EnergyQos,
            Action::CapFrequency {
                domain: 4,
                max_khz: 1_000_000,
            },
            "test",
        );
        plan.push(
            placer_core::policy_kind::PolicyKind::EnergyQos,
            Action::SetGovernor {
                domain: 0,
                governor: "userspace".into(),
                speed_khz: Some(600_000),
            },
            "test",
        );
        // Dry run changes nothing.
        let r = act.apply(&plan, true);
        assert!(r.iter().all(|r| r.outcome.kind() == "skipped"), "{r:?}");
        assert_eq!(policy_file(&fs, 4, "scaling_max_freq"), "2000000");
        let r = act.apply(&plan, false);
        assert!(r.iter().all(|r| r.outcome == Outcome::Done), "{r:?}");
        assert_eq!(policy_file(&fs, 4, "scaling_max_freq"), "1000000");
        assert_eq!(policy_file(&fs, 0, "scaling_governor"), "userspace");
        assert_eq!(policy_file(&fs, 0, "scaling_setspeed"), "600000");
        let j = crate::journal::Journal::load(&state).unwrap();
        let e = j.get(&Knob::CpufreqMax { domain: 4 }).unwrap();
        assert_eq!(
            (e.previous.as_str(), e.applied.as_str()),
            ("2000000", "1000000")
        );
        // Labelled with the policy that planned it.
        assert_eq!(e.label, "energy-qos");
        let e = j.get(&Knob::CpufreqGovernor { domain: 0 }).unwrap();
        assert_eq!(
            (e.previous.as_str(), e.applied.as_str()),
            ("schedutil", "userspace:600000")
        );
        // Same plan again: already so.
        let r = act.apply(&plan, false);
        assert!(r.iter().all(|r| r.outcome.kind() == "skipped"), "{r:?}");
        // Restore everything from the journal (as `placer restore` does).
        let restored = act.restore_all().unwrap();
        assert!(
            restored.iter().all(|(_, r)| *r == Restored::Restored),
            "{restored:?}"
        );
        assert_eq!(policy_file(&fs, 4, "scaling_max_freq"), "2000000");
        assert_eq!(policy_file(&fs, 0, "scaling_governor"), "schedutil");
        assert!(crate::journal::Journal::load(&state).unwrap().is_empty());
    }

    #[test]
    fn handler_leaves_a_cap_someone_else_changed() {
        use crate::actuator::Actuator;
        use placer_core::plan::Plan;
        let fs = cpufreq_root("lease");
        let state = fs.join("state");
        let mut act = Actuator::new(fs.path(), &state);
        let mut plan = Plan::default();
        plan.push(
            placer_core::policy_kind::PolicyKind::EnergyQos,
            Action::CapFrequency {
                domain: 0,
                max_khz: 800_000,
            },
            "test",
        );
        assert_eq!(act.apply(&plan, false)[0].outcome, Outcome::Done);
        fs.sys(
            "devices/system/cpu/cpufreq/policy0/scaling_max_freq",
            "1000000",
        );
        let mut plan = Plan::default();
        plan.push(
            placer_core::policy_kind::PolicyKind::EnergyQos,
            Action::RestoreFrequency { domain: 0 },
            "test",
        );
        assert_eq!(act.apply(&plan, false)[0].outcome.kind(), "skipped");
        assert_eq!(policy_file(&fs, 0, "scaling_max_freq"), "1000000");
    }
}
