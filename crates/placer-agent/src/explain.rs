//! The explanation of one process (`placer explain PID`): its affinity now, what placer
//! changed (the journal, with the original affinity), the latest action with its reason and
//! numbers, and what each policy thinks of it. From the running daemon's `decisions.json`;
//! with no daemon running, from one observation over one interval and the configured
//! policies in dry-run. The binary renders it.

use crate::state::{Decisions, ProcDecision};
use crate::{AgentError, Result};
use placer_core::engine::Engine;
use placer_core::policies::PolicyKind;
use placer_linux::journal::{Entry, Journal, Knob};
use placer_linux::LinuxHost;
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Serialize)]
pub struct Explanation {
    pub pid: u32,
    pub comm: String,
    pub start_time_ticks: u64,
    pub allowed_cpus_now: String,
    /// `daemon` (its latest cycle) or `dry_run` (one observation now, no daemon).
    pub source: &'static str,
    pub journal: Option<Entry>,
    pub decision: Option<ProcDecision>,
    /// Policies that do not run, with why.
    pub disabled_policies: Vec<(PolicyKind, String)>,
    /// Whether its sockets can be seen (/proc/PID/fd readable): false for another user's
    /// process when not root, where its traffic would read as none.
    pub sockets_visible: bool,
    /// Resident pages (4 KiB units on x86-64) per NUMA node, from /proc/PID/numa_maps.
    #[serde(default)]
    pub numa_pages: std::collections::BTreeMap<u32, u64>,
    /// What placer's memory placement changed (numa-local), with the pages per node before.
    #[serde(default)]
    pub memory_journal: Option<Entry>,
    /// With `placer daemon --nri`: the Kubernetes container it runs in, as the plugin sees it.
    #[serde(default)]
    pub container: Option<placer_nri::placement::ContainerView>,
    /// Other agents managing IRQ affinity or cpufreq now, and what placer does next to
    /// each (`placer_core::coexist`).
    #[serde(default)]
    pub coexistence: Vec<String>,
}

/// Disabled policies with their reason.
type Disabled = Vec<(PolicyKind, String)>;

fn one_shot(
    root: &Path,
    cfg: &placer_core::config::Config,
    pid: u32,
    interval: std::time::Duration,
) -> Result<(Option<ProcDecision>, Disabled)> {
    let dir = Path::new(&cfg.state_dir);
    let mut host = LinuxHost::new(root, dir);
    let mut engine = Engine::from_config(cfg.clone(), std::process::id());
    let first = engine.step(&mut host, true);
    if let Some(e) = first.error {
        return Err(AgentError::Observing(e));
    }
    std::thread::sleep(interval);
    let r = engine.step(&mut host, true);
    if let Some(e) = &r.error {
        return Err(AgentError::Observing(e.clone()));
    }
    let mut d = Decisions::default();
    d.update(&r, &[], 0.0);
    Ok((d.procs.remove(&pid), first.disabled))
}

/// Gathers the explanation of `pid`: from the running daemon's `decisions.json` in the
/// config's state dir, else from one dry-run observation over `interval`.
pub fn gather(
    root: &Path,
    cfg: &placer_core::config::Config,
    pid: u32,
    interval: std::time::Duration,
) -> Result<Explanation> {
    let dir = PathBuf::from(&cfg.state_dir);
    let start =
        placer_linux::actuator::start_time_ticks(root, pid).ok_or(AgentError::NoProcess { pid })?;
    // A name is any bytes: shown lossily, never a reason to fail.
    let comm = placer_linux::attr::read(&root.join(format!("proc/{pid}/comm"))).unwrap_or_default();
    let allowed = placer_linux::attr::read(&root.join(format!("proc/{pid}/status")))
        .and_then(|t| placer_linux::procfs::parse_status(&t).cpus_allowed)
        .map(|c| c.to_string())
        .unwrap_or_default();
    let journal = Journal::load(&dir).ok().and_then(|j| {
        j.get(&Knob::ProcAffinity {
            pid,
            start_time_ticks: start,
        })
        .cloned()
    });
    let daemon = Decisions::read_live(&dir);
    let container = daemon.as_ref().and_then(|d| {
        let id = placer_nri::plugin::container_of_pid(root, pid)?;
        d.containers.iter().find(|c| c.container_id == id).cloned()
    });
    let from_daemon = daemon.map(|d| {
        let disabled = d
            .policies
            .iter()
            .filter_map(|(k, w)| w.clone().map(|w| (*k, w)))
            .collect::<Vec<_>>();
        let p = d
            .procs
            .get(&pid)
            .filter(|p| p.start_time_ticks == start)
            .cloned();
        (p, disabled)
    });
    let page_bytes = placer_bufpool::numa::page_bytes() as u64;
    let numa_pages = placer_linux::numa_maps::read(root, pid, page_bytes)
        .ok()
        .flatten()
        .unwrap_or_default();
    let memory_journal = Journal::load(&dir).ok().and_then(|j| {
        j.get(&Knob::MemPolicy {
            pid,
            start_time_ticks: start,
        })
        .cloned()
    });
    let (source, (decision, disabled)) = match from_daemon {
        Some(x) => ("daemon", x),
        None => ("dry_run", one_shot(root, cfg, pid, interval)?),
    };
    Ok(Explanation {
        pid,
        comm,
        start_time_ticks: start,
        allowed_cpus_now: allowed,
        source,
        journal,
        decision,
        disabled_policies: disabled,
        numa_pages,
        memory_journal,
        container,
        coexistence: placer_linux::coexist::detect_beside(root, &dir)
            .statements(&cfg.coexist_stance()),
        sockets_visible: std::fs::read_dir(root.join(format!("proc/{pid}/fd"))).is_ok(),
    })
}
