//! What the daemon keeps in its state directory besides the journal: a lock (one daemon
//! per state dir; `placer restore` refuses to race a running daemon) and its latest
//! per-process decisions (`decisions.json`, read by `placer explain` and `placer top`), and
//! what the policies learned about the machine (`learned.json`, kept across daemons).

use crate::{AgentError, Result};
use placer_core::engine::CycleReport;
use placer_core::plan::Outcome;
use placer_core::policies::PolicyKind;
use placer_core::CpuSet;
use placer_linux::sys;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

pub const LOCK_FILE: &str = "daemon.lock";
pub const DECISIONS_FILE: &str = "decisions.json";
/// What the policies learned about this machine ([`placer_core::learned`]), kept across
/// daemons: written by the agent when it changes, given back at the next start.
pub const LEARNED_FILE: &str = "learned.json";

/// The exclusive lock of a state directory, held for the daemon's life (released by the
/// kernel when the daemon dies, even by SIGKILL).
pub struct StateLock {
    _file: std::fs::File,
}

/// Who holds the lock, if anyone.
pub fn lock_holder(state_dir: &Path) -> Option<u32> {
    // Opened, never created: asking must not change the directory (nor one that fails
    // the checks).
    let dir = placer_linux::state_dir::StateDir::open(state_dir).ok()?;
    let f = dir.open_existing(LOCK_FILE).ok()??;
    if sys::try_flock(&f, sys::Lock::Shared).unwrap_or(false) {
        let _ = sys::unflock(&f);
        return None;
    }
    dir.read(LOCK_FILE)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .or(Some(0))
}

impl StateLock {
    pub fn acquire(state_dir: &Path) -> Result<StateLock> {
        let dir = placer_linux::state_dir::StateDir::prepare(state_dir)?;
        let path = state_dir.join(LOCK_FILE);
        let mut file = dir.open_file(LOCK_FILE)?;
        if !sys::try_flock(&file, sys::Lock::Exclusive)
            .map_err(|e| AgentError::io(format!("locking {}", path.display()), e))?
        {
            let holder = dir.read(LOCK_FILE).unwrap_or_default();
            return Err(AgentError::Locked {
                holder: holder.trim().to_string(),
                state_dir: state_dir.to_path_buf(),
            });
        }
        file.set_len(0).ok();
        use std::io::Write;
        writeln!(file, "{}", std::process::id())
            .map_err(|e| AgentError::io(format!("writing {}", path.display()), e))?;
        Ok(StateLock { _file: file })
    }
}

/// One action as `explain` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ActionRecord {
    pub kind: String,
    pub policy: PolicyKind,
    pub reason: String,
    pub outcome: String,
    pub detail: String,
    /// Unix time of the cycle, seconds.
    pub at_unix_s: f64,
}

/// What the daemon knows about one process.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct ProcDecision {
    pub pid: u32,
    pub start_time_ticks: u64,
    pub comm: String,
    pub allowed_cpus: CpuSet,
    pub last_cpu: Option<u32>,
    pub cpu_share: f64,
    pub rx_bytes_per_s: f64,
    pub tx_bytes_per_s: f64,
    /// Policy holding it and the CPUs it pinned it to.
    pub held_by: Option<PolicyKind>,
    pub held_cpus: Option<CpuSet>,
    pub held_for_s: Option<f64>,
    /// This cycle's notes: (policy, text).
    pub notes: Vec<(PolicyKind, String)>,
    /// The latest action on it (kept across cycles).
    pub last_action: Option<ActionRecord>,
    /// The latest verdict on a move of it: "[net-affinity] CPU per byte -27% (...): kept".
    #[serde(default)]
    pub last_verdict: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Decisions {
    pub daemon_pid: u32,
    pub at_unix_s: f64,
    pub interval_ms: u64,
    pub dry_run: bool,
    /// Enabled policies, and disabled ones with their reason.
    pub policies: Vec<(PolicyKind, Option<String>)>,
    /// Per-CPU utilisation over the latest interval.
    pub cpu_util: BTreeMap<u32, f64>,
    /// Keyed by pid (as a string in JSON).
    pub procs: BTreeMap<u32, ProcDecision>,
    /// With `--nri`: the containers the runtime reported, with placer's view of each.
    #[serde(default)]
    pub containers: Vec<placer_nri::placement::ContainerView>,
}

pub fn unix_now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn outcome_detail(o: &Outcome) -> String {
    match o {
        Outcome::Done => String::new(),
        Outcome::Skipped(s) | Outcome::Transient(s) | Outcome::Permanent(s) => s.clone(),
    }
}

impl Decisions {
    /// Folds one cycle in: notes replace the last cycle's, actions update `last_action`,
    /// processes that exited leave.
    pub fn update(
        &mut self,
        r: &CycleReport,
        held: &[(
            PolicyKind,
            placer_core::sample::ProcKey,
            &placer_core::policy::Held,
        )],
        now_s: f64,
    ) {
        let Some(obs) = &r.observation else {
            return;
        };
        self.at_unix_s = unix_now_s();
        self.cpu_util = obs.cpus.iter().map(|c| (c.cpu, c.util)).collect();
        let mut next: BTreeMap<u32, ProcDecision> = BTreeMap::new();
        let interesting: std::collections::BTreeSet<u32> = r
            .plan
            .notes
            .iter()
            .filter_map(|n| n.proc.map(|k| k.pid))
            .chain(
                r.reports
                    .iter()
                    .filter_map(|a| a.planned.action.proc().map(|k| k.pid)),
            )
            .chain(held.iter().map(|h| h.1.pid))
            .chain(r.verdicts.iter().map(|v| v.proc.pid))
            .chain(self.procs.keys().copied())
            .collect();
        for p in obs.procs.iter().filter(|p| interesting.contains(&p.pid)) {
            let mut d = self
                .procs
                .remove(&p.pid)
                .filter(|d| d.start_time_ticks == p.start_time_ticks)
                .unwrap_or_default();
            d.pid = p.pid;
            d.start_time_ticks = p.start_time_ticks;
            d.comm = p.comm.to_string();
            d.allowed_cpus = p.allowed_cpus.clone();
            d.last_cpu = p.last_cpu;
            d.cpu_share = p.cpu_share;
            d.rx_bytes_per_s = p.rx_bytes_per_s;
            d.tx_bytes_per_s = p.tx_bytes_per_s;
            d.notes.clear();
            d.held_by = None;
            d.held_cpus = None;
            d.held_for_s = None;
            if let Some((pol, _, h)) = held.iter().find(|h| h.1 == p.key()) {
                d.held_by = Some(*pol);
                d.held_cpus = Some(h.cpus.clone());
                d.held_for_s = Some(now_s - h.since_s);
            }
            next.insert(p.pid, d);
        }
        for n in &r.plan.notes {
            if let Some(d) = n.proc.and_then(|k| next.get_mut(&k.pid)) {
                d.notes.push((n.policy, n.text.clone()));
            }
        }
        for a in &r.reports {
            if let Some(d) = a.planned.action.proc().and_then(|k| next.get_mut(&k.pid)) {
                d.last_action = Some(ActionRecord {
                    kind: a.planned.action.kind().to_string(),
                    policy: a.planned.policy,
                    reason: a.planned.reason.clone(),
                    outcome: a.outcome.kind().to_string(),
                    detail: outcome_detail(&a.outcome),
                    at_unix_s: self.at_unix_s,
                });
            }
        }
        for v in &r.verdicts {
            if let Some(d) = next.get_mut(&v.proc.pid) {
                d.last_verdict = Some(format!("[{}] {}", v.policy, v.judgement.why));
            }
        }
        // Forget processes nobody says anything about any more (no note, not held).
        next.retain(|_, d| !d.notes.is_empty() || d.held_by.is_some() || d.last_action.is_some());
        self.procs = next;
    }

    /// Replaces the file atomically (rename), without fsync: it is rewritten every cycle
    /// and only informative, unlike the journal.
    pub fn write(&self, state_dir: &Path) -> Result<()> {
        let text = serde_json::to_string(self)?;
        placer_linux::state_dir::StateDir::open(state_dir)?
            .write_replace(DECISIONS_FILE, text.as_bytes())?;
        Ok(())
    }

    pub fn read(state_dir: &Path) -> Option<Decisions> {
        let dir = placer_linux::state_dir::StateDir::open(state_dir).ok()?;
        let text = dir.read(DECISIONS_FILE).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Those of a daemon still running and acting (not in dry run), else None.
    pub fn read_live(state_dir: &Path) -> Option<Decisions> {
        Decisions::read(state_dir).filter(|d| pid_alive(d.daemon_pid) && !d.dry_run)
    }
}

/// Whether a process with this pid exists (signal 0).
pub fn pid_alive(pid: u32) -> bool {
    sys::process_alive(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_is_exclusive_and_names_the_holder() {
        let d = std::env::temp_dir().join(format!("placer-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        assert_eq!(lock_holder(&d), None);
        let l = StateLock::acquire(&d).expect("first");
        // flock locks belong to the open file description: a second open conflicts even in
        // the same process.
        let e = StateLock::acquire(&d).err().expect("second must fail");
        assert!(e.to_string().contains("another placer daemon"), "{e}");
        assert_eq!(lock_holder(&d), Some(std::process::id()));
        drop(l);
        assert_eq!(lock_holder(&d), None);
        let _ = std::fs::remove_dir_all(&d);
    }
}
