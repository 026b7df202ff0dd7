//! The placement cycle, host-agnostic: the daemon (on a `LinuxHost`) and the simulator (on a
//! `SimHost`) both drive [`Engine::step`].
//!
//! One step: sample (the union of what the enabled policies want) -> derive the
//! [`Observation`] from the previous and the current sample -> check leases -> each enabled
//! policy plans, in config order -> the host applies the combined plan -> each policy's
//! [`PolicyState`] learns what it now holds from the outcomes.
//!
//! Invariants, each tested below (a test's name starts with the ones it checks):
//! - E1: a disabled policy never plans; its reason is reported once (first step);
//! - E2: a later policy never acts on a process an earlier policy holds or acted on this
//!   cycle (its actions are dropped with a note);
//!   memory actions (`BindMemory`, `RestoreMemory`) are the exception: they touch another
//!   knob, so numa-local can move the pages of a process net-affinity pinned;
//! - E3: nothing is ever pinned outside the configured scope (kernel threads, placer's own pid,
//!   `scope` exclusions): the engine drops such actions whatever a policy asked;
//! - E4: leases: a held process whose observed affinity differs from what it was pinned to, and
//!   that this cycle's actions did not change, was changed by someone else: the engine logs
//!   it in the report, forgets the hold and adds the process to `released`, so the policy
//!   never touches it again;
//!   a held process missing from an observation keeps its hold until it has been missing
//!   from [`MAX_ABSENT_OBSERVATIONS`] in a row (a sample that missed it once does not cost
//!   its restore); then its hold ends and its restore is planned, so that a process the
//!   samples missed while it ran is not left pinned (the host puts back only a process
//!   that still has its start time);
//!   except when a CPU it was pinned to went offline (absent from the observation): that is
//!   the kernel's hotplug fallback, so the hold ends without a release and the policy may
//!   place the process again on the CPUs left;
//! - E5: a pin that failed permanently (task exited, CPUs outside its cpuset, no permission)
//!   releases the process too; a transient failure is simply planned again next cycle;
//! - E6: in a dry run nothing is held (nothing changed), so the next cycle plans the same again;
//! - E7: verdicts (the judge is [`crate::verifier`], its types [`crate::verdict`]): a pin that
//!   succeeded is judged by paired probing (the engine plans the verifier's on/off switches
//!   as the policy's, without changing what the policy holds, and drops the policy's own
//!   moves of a process on trial); an undone one is restored in that cycle's plan and the
//!   policy may not move that process again (its CPUs or its memory) before its back-off
//!   (doubling per failure) ends; nothing is judged in a dry run. A policy whose pins are
//!   judged together (contention) has one cycle's pins judged as one plan: all kept or all
//!   undone. A process in its off arm is no lease break (V8). A trial that the policy's own
//!   action ends (its restore, a pin elsewhere) plans no arm in that cycle: the arm would
//!   follow the restore and pin the process again with nobody holding it.

use crate::config::Config;
use crate::host::Host;
use crate::observation::Observation;
use crate::plan::{Action, ActionReport, Outcome, Plan};
use crate::policies::PolicyKind;
use crate::policy::{boxed, AnyPolicy, Held, Shared};
use crate::sample::{ProcKey, Sample, SampleRequest, SourceStatus};
use crate::scope::Scope;
use crate::topology::Topology;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Builds the policies the config names, in its order: an exhaustive match on the kind, so
/// a kind without a policy does not compile (unknown names never get past the config).
pub fn policies_from_config(config: &Config, self_pid: u32) -> Vec<Box<dyn AnyPolicy>> {
    use crate::policies::{self, PolicyKind};
    config
        .policies
        .iter()
        .map(|kind| -> Box<dyn AnyPolicy> {
            match kind {
                PolicyKind::NetAffinity => boxed(policies::net_affinity::NetAffinity::new(
                    config.net_affinity.clone(),
                    config.scope.clone(),
                    self_pid,
                )),
                PolicyKind::SmtEnergy => boxed(policies::smt_energy::SmtEnergy::new(
                    config.smt_energy.clone(),
                )),
                PolicyKind::Contention => boxed(
                    policies::contention::Contention::new(config.contention.clone())
                        .with_scope(config.scope.clone(), self_pid),
                ),
                PolicyKind::EnergyQos => boxed(
                    policies::energy_qos::EnergyQos::new(config.energy_qos.clone())
                        .with_scope(config.scope.clone(), self_pid),
                ),
                PolicyKind::NumaLocal => boxed(policies::numa_local::NumaLocal::new(
                    config.numa_local.clone(),
                )),
            }
        })
        .collect()
}

struct Slot {
    /// The policy with its state (`shared()` is what the engine maintains).
    policy: Box<dyn AnyPolicy>,
    disabled: Option<String>,
}

pub use crate::verdict::Verdict;

/// The placement loop's state between cycles.
pub struct Engine {
    /// The judge: trials of moves and back-offs.
    verifier: crate::verifier::Verifier,
    /// Held processes missing from consecutive observations (E4): a process a sample
    /// missed once (a read raced its exit or failed) keeps its hold, so that its pin is
    /// still given back when it shows up again.
    absent: BTreeMap<(PolicyKind, ProcKey), u32>,
    /// Holds this cycle's lease check ended for absence (E4), each given back this cycle.
    unseen: Vec<(PolicyKind, ProcKey, String)>,
    slots: Vec<Slot>,
    config: Config,
    self_pid: u32,
    topo: Option<Topology>,
    topo_read_ns: u64,
    prev: Option<Sample>,
    /// The last observation's processes, for the next to share ([`Observation::after`]).
    last_procs: Vec<std::sync::Arc<crate::observation::ProcObs>>,
    sources: Option<SourceStatus>,
    cycles: u64,
    /// The other agents last reported ([`CycleReport::coexistence`]).
    coexistence_said: crate::coexist::Coexistence,
}

/// Observations in a row a held process may be missing from before its hold ends (E4).
pub const MAX_ABSENT_OBSERVATIONS: u32 = 3;

/// A lease broken by someone else changing a held process's affinity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseBreak {
    pub policy: PolicyKind,
    pub proc: ProcKey,
    pub comm: String,
    pub pinned: crate::CpuSet,
    pub observed: crate::CpuSet,
}

/// What one step did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CycleReport {
    /// Number of this step (0 = first).
    pub cycle: u64,
    pub time_ns: u64,
    /// True on the first step(s): only one sample yet, nothing derived or planned.
    pub warming_up: bool,
    /// Policies that do not run, with the reason (filled on the first step only, so the
    /// caller says it once).
    pub disabled: Vec<(PolicyKind, String)>,
    /// What each running policy cannot act on here (first step only, like `disabled`).
    #[serde(default)]
    pub lacking: Vec<(PolicyKind, String)>,
    /// Sources the host lacks, with the reason (first step only).
    pub missing_sources: Vec<(crate::sample::SourceKind, String)>,
    /// The observation the policies planned on (None while warming up or on error).
    pub observation: Option<Observation>,
    pub plan: Plan,
    pub reports: Vec<ActionReport>,
    pub lease_breaks: Vec<LeaseBreak>,
    /// Moves judged this step.
    pub verdicts: Vec<Verdict>,
    /// Processes held by any policy after this step.
    pub managed: usize,
    /// Topology or sample failure: the step did nothing else.
    pub error: Option<String>,
    /// When the other agents managing IRQ affinity or cpufreq changed (first found, gone,
    /// restarted): what placer does next to each, one line per agent (empty: none left),
    /// so that the caller says it once ([`crate::coexist`]).
    #[serde(default)]
    pub coexistence: Option<Vec<String>>,
}

impl CycleReport {
    /// Actions by (kind, outcome) for metrics.
    pub fn action_counts(&self) -> BTreeMap<(&'static str, &'static str), u64> {
        let mut m = BTreeMap::new();
        for r in &self.reports {
            *m.entry((r.planned.action.kind(), r.outcome.kind()))
                .or_default() += 1;
        }
        m
    }
}

impl Engine {
    /// The engine of the policies `config` names; `self_pid` is placer's own pid (never
    /// placed), passed in so that the engine stays a pure function of its inputs.
    pub fn from_config(config: Config, self_pid: u32) -> Engine {
        Engine::new(policies_from_config(&config, self_pid), config, self_pid)
    }

    /// An engine of the given policies (tests, the simulator's factories).
    pub fn new(policies: Vec<Box<dyn AnyPolicy>>, config: Config, self_pid: u32) -> Engine {
        Engine {
            slots: policies
                .into_iter()
                .map(|policy| Slot {
                    policy,
                    disabled: None,
                })
                .collect(),
            config,
            verifier: crate::verifier::Verifier::new(),
            absent: BTreeMap::new(),
            unseen: Vec::new(),
            self_pid,
            topo: None,
            topo_read_ns: 0,
            prev: None,
            last_procs: Vec::new(),
            sources: None,
            cycles: 0,
            coexistence_said: Default::default(),
        }
    }

    /// Takes a reloaded config without losing what stays valid: a policy still configured
    /// keeps its state (what it holds, its hysteresis, its verdicts pending) and runs with
    /// its new settings; a policy no longer listed is dropped and returned (with the
    /// processes it held), so that the caller puts back the knobs it set; a newly listed
    /// one starts fresh, and which policies can run here is decided again at the next step.
    pub fn reconfigure(&mut self, config: Config) -> Vec<(PolicyKind, Vec<ProcKey>)> {
        let mut old: Vec<Slot> = std::mem::take(&mut self.slots);
        for policy in policies_from_config(&config, self.self_pid) {
            let kind = policy.kind();
            let slot = match old.iter().position(|s| s.policy.kind() == kind) {
                Some(i) => {
                    let mut slot = old.remove(i);
                    let adopted = slot.policy.adopt_config(policy);
                    debug_assert!(adopted, "the same kind is the same policy type");
                    slot
                }
                None => Slot {
                    policy,
                    disabled: None,
                },
            };
            self.slots.push(slot);
        }
        let removed: Vec<(PolicyKind, Vec<ProcKey>)> = old
            .iter()
            .map(|s| {
                (
                    s.policy.kind(),
                    s.policy.shared().held.keys().copied().collect(),
                )
            })
            .collect();
        // Their pins wait for no verdict, and no back-off keeps a later policy off them.
        for (kind, _) in &removed {
            self.verifier.forget_policy(*kind);
        }
        self.config = config;
        // What placer does next to other agents depends on the config: say it again.
        self.coexistence_said = Default::default();
        // Re-decide which policies can run here (a new one may lack its source).
        self.topo = None;
        self.topo_read_ns = 0;
        removed
    }

    /// The pid never to touch (placer's own; in the simulator, whatever it likes).
    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn topology(&self) -> Option<&Topology> {
        self.topo.as_ref()
    }

    /// Forces the topology to be read again next step (hotplug, IRQ affinity changes).
    pub fn invalidate_topology(&mut self) {
        self.topo = None;
    }

    /// The policies, with their disabled reason if any.
    pub fn policies(&self) -> Vec<(PolicyKind, Option<&str>)> {
        self.slots
            .iter()
            .map(|s| (s.policy.kind(), s.disabled.as_deref()))
            .collect()
    }

    /// A policy's state (for tests, `explain`, the simulator's reports).
    pub fn state(&self, policy: PolicyKind) -> Option<&Shared> {
        self.slots
            .iter()
            .find(|s| s.policy.kind() == policy)
            .map(|s| s.policy.shared())
    }

    /// What the policies learned about this machine, to keep across restarts
    /// ([`crate::learned`]).
    pub fn learned(&self) -> Vec<crate::learned::Learned> {
        self.slots
            .iter()
            .filter_map(|s| s.policy.learned())
            .collect()
    }

    /// Gives each policy what a previous daemon learned on this machine (every policy
    /// takes the kinds of record it keeps and ignores the others).
    pub fn relearn(&mut self, learned: &[crate::learned::Learned]) {
        for s in &mut self.slots {
            for l in learned {
                s.policy.relearn(l);
            }
        }
    }

    /// Every process held by any policy, with the policy.
    pub fn held(&self) -> Vec<(PolicyKind, ProcKey, &Held)> {
        self.slots
            .iter()
            .flat_map(|s| {
                s.policy
                    .shared()
                    .held
                    .iter()
                    .map(move |(k, h)| (s.policy.kind(), *k, h))
            })
            .collect()
    }

    fn scope(&self) -> &Scope {
        &self.config.scope
    }

    /// One cycle. See the module doc.
    pub fn step<H: Host + ?Sized>(&mut self, host: &mut H, dry_run: bool) -> CycleReport {
        let mut report = CycleReport {
            cycle: self.cycles,
            ..Default::default()
        };
        self.cycles += 1;

        if self.sources.is_none() {
            let sources = host.sources();
            report.missing_sources = sources
                .sources
                .iter()
                .filter(|s| !s.available)
                .map(|s| (s.name, s.detail.clone()))
                .collect();
            self.sources = Some(sources);
        }
        let refresh_ns = self.config.topology_refresh_ms.saturating_mul(1_000_000);
        let topo_stale = match (&self.topo, &self.prev) {
            (None, _) => true,
            (Some(_), Some(p)) => refresh_ns > 0 && p.time_ns >= self.topo_read_ns + refresh_ns,
            _ => false,
        };
        if topo_stale {
            match host.topology() {
                Ok(t) => {
                    let first = self.topo.is_none() && self.topo_read_ns == 0;
                    self.topo_read_ns = self.prev.as_ref().map_or(0, |p| p.time_ns);
                    if t.coexistence != self.coexistence_said {
                        report.coexistence =
                            Some(t.coexistence.statements(&self.config.coexist_stance()));
                        self.coexistence_said = t.coexistence.clone();
                    }
                    self.topo = Some(t);
                    if first {
                        self.decide_disabled(&mut report);
                    }
                }
                Err(e) if self.topo.is_none() => {
                    report.error = Some(format!("reading the topology: {e}"));
                    return report;
                }
                // Keep the old picture; a transient read failure is not worth stopping for.
                Err(_) => {}
            }
        }
        let req = self
            .slots
            .iter()
            .filter(|s| s.disabled.is_none())
            .fold(SampleRequest::default(), |r, s| r.union(s.policy.wants()));
        let cur = match host.sample(req) {
            Ok(s) => s,
            Err(e) => {
                report.error = Some(format!("sampling: {e}"));
                return report;
            }
        };
        report.time_ns = cur.time_ns;
        let Some(prev) = self.prev.replace(cur) else {
            report.warming_up = true;
            report.managed = self.managed();
            return report;
        };
        let cur = self.prev.as_ref().expect("just stored");
        let obs = Observation::after(&prev, cur, &self.last_procs);
        self.last_procs.clone_from(&obs.procs);
        let topo = self.topo.clone().expect("topology read above");

        self.check_leases(&obs, &mut report);
        let judged = self.judge(&obs, &mut report, dry_run);
        let undo = judged.undo;
        let observed_cpus: crate::cpuset::CpuSet = obs.cpus.iter().map(|c| c.cpu).collect();

        let now_s = obs.time_ns as f64 / 1e9;
        let mut plan = Plan::default();
        let mut taken: BTreeSet<ProcKey> = BTreeSet::new();
        // The judge's switches planned this cycle: their outcomes are the judge's, not the
        // policy's holds.
        let mut probes: BTreeSet<(PolicyKind, ProcKey)> = BTreeSet::new();
        let admitted: BTreeMap<ProcKey, bool> = obs
            .procs
            .iter()
            .map(|p| (p.key(), self.scope().admits(p, self.self_pid)))
            .collect();
        for slot in self.slots.iter_mut() {
            if slot.disabled.is_some() {
                continue;
            }
            let kind = slot.policy.kind();
            slot.policy.shared_mut().now_s = now_s;
            slot.policy.shared_mut().taken = taken.clone();
            let mine = slot.policy.plan(&topo, &obs);
            // Trials this policy's own actions end this cycle.
            let mut ended: BTreeSet<ProcKey> = BTreeSet::new();
            plan.notes.extend(mine.notes);
            for pa in mine.actions {
                let Some(k) = pa.action.proc() else {
                    plan.actions.push(pa);
                    continue;
                };
                // Memory placement is a different knob from CPU placement: numa-local moves
                // the pages of a process net-affinity pinned (memory follows its CPUs).
                let memory_only = matches!(
                    pa.action,
                    Action::BindMemory { .. } | Action::RestoreMemory { .. }
                );
                // Backing off, a process is not moved by that policy: neither its CPUs nor
                // its memory.
                let moves = matches!(
                    pa.action,
                    Action::PinProcess { .. } | Action::BindMemory { .. }
                );
                if let (Some((n, left)), true) =
                    (self.verifier.backing_off(kind, k, self.cycles), moves)
                {
                    plan.note(
                        kind,
                        Some(k),
                        format!("not moved: backing off after {n} undone move(s), {left} more interval(s)"),
                    );
                    continue;
                }
                // On trial, the judge places it (its on/off arms): the policy's pin to the
                // CPUs on trial is the judge's to apply; a pin elsewhere is a new move (a
                // new trial), and the policy giving it back ends the trial (V9).
                if self.verifier.on_trial(kind, k) {
                    match &pa.action {
                        Action::PinProcess { cpus, .. }
                            if slot
                                .policy
                                .shared()
                                .held
                                .get(&k)
                                .is_some_and(|h| &h.cpus == cpus) =>
                        {
                            continue;
                        }
                        Action::PinProcess { .. } | Action::RestoreProcess { .. } => {
                            self.verifier.end(kind, k);
                            ended.insert(k);
                        }
                        _ => {}
                    }
                }
                if undo.iter().any(|(p, u)| *p == kind && *u == k) {
                    continue;
                }
                if taken.contains(&k) && !memory_only {
                    plan.note(
                        kind,
                        Some(k),
                        format!(
                            "dropped {}: an earlier policy holds this process",
                            pa.action.kind()
                        ),
                    );
                    continue;
                }
                let is_restore = matches!(
                    pa.action,
                    Action::RestoreProcess { .. } | Action::RestoreMemory { .. }
                );
                if !is_restore && !admitted.get(&k).copied().unwrap_or(false) {
                    plan.note(
                        kind,
                        Some(k),
                        format!("dropped {}: process outside the scope", pa.action.kind()),
                    );
                    continue;
                }
                // A CPU absent from this interval's /proc/stat went offline after the
                // topology was read: the pin would fail for good and release the process.
                // The next topology refresh gives the policy the CPUs left.
                if let Action::PinProcess { cpus, .. } = &pa.action {
                    let offline = cpus.difference(&observed_cpus);
                    if !observed_cpus.is_empty() && !offline.is_empty() {
                        plan.note(
                            kind,
                            Some(k),
                            format!("dropped {}: CPUs {offline} are offline", pa.action.kind()),
                        );
                        continue;
                    }
                }
                plan.actions.push(pa);
            }
            // Missing from MAX_ABSENT_OBSERVATIONS in a row: given back, not forgotten
            // pinned. A sample can miss a process that still runs (a read that failed);
            // the host puts back only a process that still has its start time.
            for (_, k, comm) in self.unseen.iter().filter(|(p, ..)| *p == kind) {
                plan.push(
                    kind,
                    Action::RestoreProcess {
                        proc: *k,
                        comm: comm.clone(),
                        via: None,
                    },
                    format!(
                        "missing from {MAX_ABSENT_OBSERVATIONS} observations in a row: given back in case it still runs"
                    ),
                );
            }
            // Undone moves: the policy's process goes back.
            for (_, k) in undo.iter().filter(|(p, _)| *p == kind) {
                let comm = slot
                    .policy
                    .shared()
                    .held
                    .get(k)
                    .map_or_else(String::new, |h| h.comm.clone());
                plan.push(
                    kind,
                    Action::RestoreProcess {
                        proc: *k,
                        comm,
                        via: None,
                    },
                    "verdict: the move made things worse; undone".to_string(),
                );
            }
            // The judge's arms: the policy's pin or the process's own affinity, for one
            // interval, without changing what the policy holds.
            // A trial the policy ended this cycle (its restore, or a pin elsewhere) plans no
            // more arms: an arm applied after the policy's restore would pin the process
            // again with nobody holding it, and the pin would outlive the stream.
            for sw in judged
                .switches
                .iter()
                .filter(|s| s.policy == kind && !ended.contains(&s.proc))
            {
                let (action, why) = match sw.arm {
                    crate::verifier::Arm::On => (
                        Action::PinProcess {
                            proc: sw.proc,
                            comm: sw.comm.clone(),
                            cpus: sw.cpus.clone(),
                        },
                        "judge: probing the pin (on arm)",
                    ),
                    crate::verifier::Arm::Off => (
                        Action::RestoreProcess {
                            proc: sw.proc,
                            comm: sw.comm.clone(),
                            via: sw.via.clone(),
                        },
                        "judge: probing the pin (off arm: its own affinity for an interval)",
                    ),
                };
                probes.insert((kind, sw.proc));
                plan.push(kind, action, why.to_string());
            }
            // What this policy holds or acts on is off limits to the next ones.
            taken.extend(slot.policy.shared_mut().held.keys().copied());
            taken.extend(
                plan.actions
                    .iter()
                    .filter(|a| a.policy == kind)
                    .filter_map(|a| a.action.proc()),
            );
        }

        let reports = host.apply(&plan, dry_run);
        let is_probe = |r: &ActionReport| {
            r.planned
                .action
                .proc()
                .is_some_and(|k| probes.contains(&(r.planned.policy, k)))
        };
        if !dry_run {
            self.verifier.applied(|policy, k| {
                reports.iter().any(|r| {
                    r.planned.policy == policy
                        && r.planned.action.proc() == Some(k)
                        && matches!(r.outcome, Outcome::Done | Outcome::Skipped(_))
                })
            });
            self.start_judging(&reports, &obs, &is_probe);
        }
        for slot in self.slots.iter_mut() {
            let kind = slot.policy.kind();
            // A probe's switch that went through changes nothing the policy holds; one that
            // failed for good (the process exited, its cpuset shrank) counts as the policy's.
            let mine: Vec<ActionReport> = reports
                .iter()
                .filter(|r| r.planned.policy == kind)
                .filter(|r| {
                    !(is_probe(r) && matches!(r.outcome, Outcome::Done | Outcome::Skipped(_)))
                })
                .cloned()
                .collect();
            update_state(slot.policy.shared_mut(), &mine, now_s, dry_run);
            slot.policy.shared_mut().last_reports = mine;
        }
        report.plan = plan;
        report.reports = reports;
        report.observation = Some(obs);
        report.managed = self.managed();
        report
    }

    /// Feeds the judge this interval: verdicts into the report, what to undo and which arms
    /// to set. Processes whose affinity someone else changed in an off arm are released
    /// (V8) here.
    fn judge(
        &mut self,
        obs: &Observation,
        report: &mut CycleReport,
        dry_run: bool,
    ) -> crate::verifier::VerifierStep {
        use crate::verdict::Point;
        if dry_run || self.verifier.trials() == 0 && !self.verifier.remembers_processes() {
            return Default::default();
        }
        let slots = &self.slots;
        self.verifier.retain_held(|policy, k| {
            slots
                .iter()
                .any(|s| s.policy.kind() == policy && s.policy.shared().held.contains_key(&k))
        });
        let index = obs.index();
        let verify = &self.config.verify;
        let topo = self.topo.as_ref();
        let step = self.verifier.observe(
            |k| {
                let p = index.get(&k)?;
                let instructions_per_s = p
                    .counters
                    .as_ref()
                    .and_then(|c| c.per_s.get(crate::classify::INSTRUCTIONS))
                    .copied();
                Some(crate::verifier::Seen {
                    point: Point {
                        cpu_share: p.cpu_share,
                        bytes_per_s: p.net_bytes_per_s(),
                        instructions_per_s,
                    },
                    affinity: &p.allowed_cpus,
                    qos_ratio: topo.and_then(|topo| {
                        let s = slots
                            .iter()
                            .find(|s| s.policy.shared().held.contains_key(&k))?;
                        s.policy.qos_ratio(topo, obs, p)
                    }),
                })
            },
            self.cycles,
            &|policy| verify.probe(policy),
            verify.backoff_intervals,
        );
        for &(policy, k) in &step.released {
            let Some(slot) = self.slots.iter_mut().find(|s| s.policy.kind() == policy) else {
                continue;
            };
            let shared = slot.policy.shared_mut();
            if let (Some(h), Some(p)) = (shared.held.remove(&k), index.get(&k)) {
                report.lease_breaks.push(LeaseBreak {
                    policy,
                    proc: k,
                    comm: h.comm,
                    pinned: h.cpus,
                    observed: p.allowed_cpus.clone(),
                });
            }
            shared.released.insert(k);
        }
        report.verdicts.extend(step.verdicts.iter().cloned());
        step
    }

    /// Starts judging the pins that took effect (a policy that judges its moves), each
    /// with the affinity it had before (its off arm).
    fn start_judging(
        &mut self,
        reports: &[ActionReport],
        obs: &Observation,
        is_probe: &dyn Fn(&ActionReport) -> bool,
    ) {
        let index = obs.index();
        let mut pins = Vec::new();
        for r in reports {
            let (Action::PinProcess { proc, comm, cpus }, Outcome::Done) =
                (&r.planned.action, &r.outcome)
            else {
                continue;
            };
            let policy = r.planned.policy;
            if is_probe(r) || !self.slots.iter().any(|s| s.policy.kind() == policy) {
                continue;
            }
            let (on, _, _) = self.config.verify.for_policy(policy);
            let Some(seen) = index.get(proc) else {
                continue;
            };
            if on {
                pins.push(crate::verifier::NewPin {
                    policy,
                    proc: *proc,
                    comm: comm.clone(),
                    cpus: cpus.clone(),
                    own: seen.allowed_cpus.clone(),
                    ran_on: seen.last_cpu,
                });
            }
        }
        if !pins.is_empty() {
            let verify = &self.config.verify;
            self.verifier.start(pins, &|policy| verify.probe(policy));
        }
    }

    fn managed(&self) -> usize {
        self.slots
            .iter()
            .flat_map(|s| s.policy.shared().held.keys())
            .collect::<BTreeSet<_>>()
            .len()
    }

    fn decide_disabled(&mut self, report: &mut CycleReport) {
        let topo = self.topo.as_ref().expect("set by caller");
        let sources = self.sources.clone().unwrap_or_default();
        for slot in self.slots.iter_mut() {
            slot.disabled = slot.policy.disabled_reason(topo, &sources);
            match &slot.disabled {
                Some(why) => report.disabled.push((slot.policy.kind(), why.clone())),
                None => report.lacking.extend(
                    slot.policy
                        .lacks(topo, &sources)
                        .into_iter()
                        .map(|l| (slot.policy.kind(), l)),
                ),
            }
        }
    }

    /// Forgets holds on processes that exited, and breaks leases on processes whose
    /// affinity someone else changed since we pinned them.
    fn check_leases(&mut self, obs: &Observation, report: &mut CycleReport) {
        let by_key = obs.index();
        // CPUs this interval observed running (an offline CPU has no line in /proc/stat).
        let observed_cpus: crate::cpuset::CpuSet = obs.cpus.iter().map(|c| c.cpu).collect();
        self.unseen.clear();
        for slot in self.slots.iter_mut() {
            let kind = slot.policy.kind();
            let mut broken = Vec::new();
            let verifier = &self.verifier;
            let absent = &mut self.absent;
            let unseen = &mut self.unseen;
            slot.policy
                .shared_mut()
                .held
                .retain(|k, h| match by_key.get(k) {
                    // Gone: after MAX_ABSENT observations in a row (it exited), not at one
                    // that missed it.
                    None => {
                        let n = absent.entry((kind, *k)).or_insert(0);
                        *n += 1;
                        let keep = *n < MAX_ABSENT_OBSERVATIONS;
                        if !keep {
                            unseen.push((kind, *k, h.comm.clone()));
                        }
                        keep
                    }
                    // Its own affinity for an interval: the judge's off arm (V8).
                    Some(_) if verifier.in_off_arm(kind, *k) => true,
                    // A pinned CPU went offline: the kernel moved the process off it (its
                    // fallback affinity), nobody chose another placement. The hold ends but
                    // the process stays the policy's to place again (on the CPUs left).
                    Some(p)
                        if p.allowed_cpus != h.cpus
                            && !observed_cpus.is_empty()
                            && !h.cpus.is_subset(&observed_cpus) =>
                    {
                        false
                    }
                    Some(p) if p.allowed_cpus != h.cpus => {
                        broken.push(LeaseBreak {
                            policy: kind,
                            proc: *k,
                            comm: h.comm.clone(),
                            pinned: h.cpus.clone(),
                            observed: p.allowed_cpus.clone(),
                        });
                        false
                    }
                    Some(_) => true,
                });
            // Seen again (or no longer held): its count starts over.
            let held = &slot.policy.shared().held;
            self.absent
                .retain(|(p, k), _| *p != kind || (held.contains_key(k) && !by_key.contains(k)));
            // Forget released processes that exited (their pid may be reused; the key
            // carries the start time, so this is only memory hygiene).
            slot.policy
                .shared_mut()
                .released
                .retain(|k| by_key.contains(k));
            for b in &broken {
                slot.policy.shared_mut().released.insert(b.proc);
            }
            report.lease_breaks.extend(broken);
        }
    }
}

/// Learns holds from outcomes. Pins that are done become held; restores that are done (or
/// whose task is gone) end the hold; permanent pin failures release the process.
fn update_state(state: &mut Shared, reports: &[ActionReport], now_s: f64, dry_run: bool) {
    if dry_run {
        return;
    }
    for r in reports {
        match (&r.planned.action, &r.outcome) {
            (Action::PinProcess { proc, comm, cpus }, Outcome::Done | Outcome::Skipped(_)) => {
                let since_s = match state.held.get(proc) {
                    Some(h) if &h.cpus == cpus => h.since_s,
                    _ => now_s,
                };
                state.held.insert(
                    *proc,
                    Held {
                        cpus: cpus.clone(),
                        since_s,
                        comm: comm.clone(),
                    },
                );
            }
            (Action::PinProcess { proc, .. }, Outcome::Permanent(_)) => {
                state.held.remove(proc);
                state.released.insert(*proc);
            }
            (Action::RestoreProcess { proc, .. }, Outcome::Done | Outcome::Skipped(_))
            | (Action::RestoreProcess { proc, .. }, Outcome::Permanent(_)) => {
                state.held.remove(proc);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::HostError;
    use crate::plan::PlannedAction;
    use crate::policy::{Policy, PolicyState};
    use crate::sample::{CpuTimes, ProcSample};
    use crate::CpuSet;
    use std::sync::{Arc, Mutex};

    type Seen = Arc<Mutex<Vec<BTreeSet<ProcKey>>>>;

    // The test doubles' identities: real kinds (no policy is named by a string), each
    // standing for a policy of its own in a test.
    const A: PolicyKind = PolicyKind::NetAffinity;
    const B: PolicyKind = PolicyKind::SmtEnergy;
    const MEM: PolicyKind = PolicyKind::NumaLocal;
    const OFF: PolicyKind = PolicyKind::Contention;

    /// A host whose processes' affinities change only through `apply` or the test.
    struct FakeHost {
        time_ns: u64,
        procs: Vec<ProcSample>,
        applied: Vec<PlannedAction>,
        fail_pins: Option<Outcome>,
        /// CPUs left out of the samples, as /proc/stat leaves out offline ones.
        offline: CpuSet,
        /// Answers a dry run's pins Done, as if it had applied them (the engine's own
        /// dry-run rules then are all that keeps it from treating them as applied).
        dry_run_answers_done: bool,
        /// Other agents the topology reports.
        coexistence: crate::coexist::Coexistence,
    }

    fn proc_sample(pid: u32, comm: &str) -> ProcSample {
        ProcSample {
            last_cpu: Some(0),
            ..ProcSample::bare(pid, 100 + pid as u64, comm, CpuSet::first_n(4))
        }
    }

    impl FakeHost {
        fn new(procs: Vec<ProcSample>) -> Self {
            FakeHost {
                time_ns: 1_000_000_000,
                procs,
                applied: vec![],
                fail_pins: None,
                offline: CpuSet::new(),
                dry_run_answers_done: false,
                coexistence: Default::default(),
            }
        }
    }

    impl Host for FakeHost {
        fn topology(&mut self) -> Result<Topology, HostError> {
            let mut t = crate::machines::machine("pkg:1 core:4 pu:1").expect("synthetic");
            t.coexistence = self.coexistence.clone();
            Ok(t)
        }
        fn sources(&mut self) -> SourceStatus {
            SourceStatus {
                sources: vec![crate::sample::Source {
                    name: crate::sample::SourceKind::PerfHw,
                    available: false,
                    detail: "no PMU".into(),
                }],
            }
        }
        fn sample(&mut self, _req: SampleRequest) -> Result<Sample, HostError> {
            self.time_ns += 1_000_000_000;
            Ok(Sample {
                time_ns: self.time_ns,
                clk_tck: 100,
                cpus: (0..4)
                    .filter(|c| !self.offline.contains(*c))
                    .map(|cpu| CpuTimes {
                        cpu,
                        idle: self.time_ns / 10_000_000,
                        ..Default::default()
                    })
                    .collect(),
                procs: self
                    .procs
                    .iter()
                    .cloned()
                    .map(std::sync::Arc::new)
                    .collect(),
                ..Default::default()
            })
        }
        fn apply(&mut self, plan: &Plan, dry_run: bool) -> Vec<ActionReport> {
            plan.actions
                .iter()
                .map(|pa| {
                    self.applied.push(pa.clone());
                    let mut outcome = Outcome::Done;
                    if dry_run && !self.dry_run_answers_done {
                        outcome = Outcome::Skipped("dry run".into());
                    } else if let Action::PinProcess { proc, cpus, .. } = &pa.action {
                        if let Some(o) = &self.fail_pins {
                            outcome = o.clone();
                        } else if let Some(p) = self.procs.iter_mut().find(|p| p.pid == proc.pid) {
                            p.allowed = cpus.clone();
                        }
                    } else if let Action::RestoreProcess { proc, .. } = &pa.action {
                        if let Some(p) = self.procs.iter_mut().find(|p| p.pid == proc.pid) {
                            p.allowed = CpuSet::first_n(4);
                        }
                    }
                    ActionReport {
                        planned: pa.clone(),
                        outcome,
                    }
                })
                .collect()
        }
        fn journal(&mut self) -> Result<Vec<crate::journal::Entry>, HostError> {
            Ok(Vec::new())
        }
        fn restore_all(
            &mut self,
        ) -> Result<Vec<(crate::journal::Entry, crate::journal::Restored)>, HostError> {
            Ok(Vec::new())
        }
        fn restore_where(
            &mut self,
            _which: &dyn Fn(&crate::journal::Entry) -> bool,
        ) -> Result<Vec<(crate::journal::Entry, crate::journal::Restored)>, HostError> {
            Ok(Vec::new())
        }
    }

    /// A policy that pins every process it sees to `cpu` (unless held or taken), and
    /// records what it saw.
    struct PinAll {
        kind: PolicyKind,
        cpu: u32,
        disabled: Option<String>,
        seen_taken: Seen,
    }

    impl Policy for PinAll {
        type State = ();

        fn kind(&self) -> PolicyKind {
            self.kind
        }
        fn disabled_reason(&self, _t: &Topology, _s: &SourceStatus) -> Option<String> {
            self.disabled.clone()
        }
        fn lacks(&self, _t: &Topology, _s: &SourceStatus) -> Vec<String> {
            vec![format!("nothing but cpu {}", self.cpu)]
        }
        fn plan(&self, _topo: &Topology, obs: &Observation, state: &mut PolicyState) -> Plan {
            self.seen_taken
                .lock()
                .expect("lock")
                .push(state.taken.clone());
            let mut plan = Plan::default();
            for p in &obs.procs {
                let k = p.key();
                if state.held.contains_key(&k) || state.released.contains(&k) {
                    continue;
                }
                plan.push(
                    self.kind,
                    Action::PinProcess {
                        proc: k,
                        comm: p.comm.to_string(),
                        cpus: CpuSet::single(self.cpu),
                    },
                    "test",
                );
            }
            plan
        }
    }

    fn pin_all(kind: PolicyKind, cpu: u32) -> (Box<dyn AnyPolicy>, Seen) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        (
            boxed(PinAll {
                kind,
                cpu,
                disabled: None,
                seen_taken: seen.clone(),
            }),
            seen,
        )
    }

    #[test]
    fn first_step_warms_up_then_plans_and_holds() {
        let (p, _) = pin_all(A, 2);
        let mut e = Engine::new(vec![p], Config::default(), 1);
        let mut h = FakeHost::new(vec![proc_sample(10, "x")]);
        let r0 = e.step(&mut h, false);
        assert!(r0.warming_up);
        assert!(r0.reports.is_empty());
        assert_eq!(
            r0.missing_sources,
            vec![(crate::sample::SourceKind::PerfHw, "no PMU".into())]
        );
        let r1 = e.step(&mut h, false);
        assert_eq!(r1.reports.len(), 1);
        assert_eq!(r1.managed, 1);
        assert_eq!(r1.action_counts().get(&("pin_process", "done")), Some(&1));
        let held = &e.state(A).expect("state").held;
        assert_eq!(held.values().next().expect("held").cpus, CpuSet::single(2));
        // Held and unchanged: no new action, still held.
        let r2 = e.step(&mut h, false);
        assert!(r2.reports.is_empty());
        assert!(r2.lease_breaks.is_empty());
        assert_eq!(r2.managed, 1);
        assert!(r2.missing_sources.is_empty(), "sources reported once");
    }

    #[test]
    fn other_agents_are_said_when_they_change_and_again_after_a_reload() {
        use crate::coexist::{Agent, AgentKind};
        let cfg = Config {
            topology_refresh_ms: 1000,
            ..Config::default()
        };
        let mut e = Engine::new(Vec::new(), cfg.clone(), 1);
        let mut h = FakeHost::new(vec![proc_sample(10, "x")]);
        assert_eq!(e.step(&mut h, false).coexistence, None, "nobody else");
        h.coexistence.agents.push(Agent {
            kind: AgentKind::Irqbalance,
            pid: 77,
        });
        let said: Vec<Option<Vec<String>>> =
            (0..3).map(|_| e.step(&mut h, false).coexistence).collect();
        let first = said.iter().position(Option::is_some).expect("said");
        let lines = said[first].clone().expect("said");
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].starts_with("irqbalance (pid 77) moves IRQs"),
            "{lines:?}"
        );
        assert_eq!(
            said.iter().filter(|s| s.is_some()).count(),
            1,
            "said once: {said:?}"
        );
        e.reconfigure(cfg);
        let again: Vec<Option<Vec<String>>> =
            (0..2).map(|_| e.step(&mut h, false).coexistence).collect();
        assert_eq!(
            again.iter().flatten().count(),
            1,
            "said again after a reload"
        );
        h.coexistence.agents.clear();
        let gone: Vec<Option<Vec<String>>> =
            (0..3).map(|_| e.step(&mut h, false).coexistence).collect();
        assert_eq!(
            gone.into_iter().flatten().collect::<Vec<_>>(),
            vec![Vec::<String>::new()]
        );
    }

    #[test]
    fn e4_lease_broken_when_someone_else_changes_affinity() {
        let (p, _) = pin_all(A, 2);
        let mut e = Engine::new(vec![p], Config::default(), 1);
        let mut h = FakeHost::new(vec![proc_sample(10, "x")]);
        e.step(&mut h, false);
        e.step(&mut h, false);
        // Another tool moves it.
        h.procs[0].allowed = CpuSet::single(3);
        let r = e.step(&mut h, false);
        assert_eq!(r.lease_breaks.len(), 1);
        assert_eq!(r.lease_breaks[0].observed, CpuSet::single(3));
        assert!(r.reports.is_empty(), "never fights back");
        let st = e.state(A).expect("state");
        assert!(st.held.is_empty());
        assert!(st.released.contains(&h.procs[0].key()));
        // And never again.
        for _ in 0..3 {
            assert!(e.step(&mut h, false).reports.is_empty());
        }
        assert_eq!(h.procs[0].allowed, CpuSet::single(3));
    }

    #[test]
    fn e4_a_held_process_missing_from_one_sample_keeps_its_hold() {
        let (p, _) = pin_all(A, 2);
        let mut e = Engine::new(vec![p], Config::default(), 1);
        let mut h = FakeHost::new(vec![proc_sample(10, "x")]);
        e.step(&mut h, false);
        e.step(&mut h, false);
        assert_eq!(e.state(A).expect("state").held.len(), 1);
        // One sample misses it, then it is back: still held.
        let gone = h.procs.remove(0);
        e.step(&mut h, false);
        assert_eq!(
            e.state(A).expect("state").held.len(),
            1,
            "kept over one miss"
        );
        h.procs.push(gone.clone());
        e.step(&mut h, false);
        assert_eq!(e.state(A).expect("state").held.len(), 1);
        // Missing for MAX_ABSENT_OBSERVATIONS in a row: it exited, the hold ends.
        h.procs.clear();
        for _ in 0..MAX_ABSENT_OBSERVATIONS {
            e.step(&mut h, false);
        }
        assert!(e.state(A).expect("state").held.is_empty());
        assert!(e.absent.is_empty(), "nothing left to count");
    }

    #[test]
    fn e4_a_pin_lost_to_cpu_hotplug_is_no_lease_break() {
        let (p, _) = pin_all(A, 2);
        let mut e = Engine::new(vec![p], Config::default(), 1);
        let mut h = FakeHost::new(vec![proc_sample(10, "x")]);
        e.step(&mut h, false);
        e.step(&mut h, false);
        assert_eq!(h.procs[0].allowed, CpuSet::single(2));
        // CPU 2 goes offline: the kernel gives the process its fallback affinity.
        h.offline = CpuSet::single(2);
        h.procs[0].allowed = CpuSet::first_n(4);
        let r = e.step(&mut h, false);
        assert!(r.lease_breaks.is_empty(), "{:?}", r.lease_breaks);
        let st = e.state(A).expect("state");
        assert!(!st.released.contains(&h.procs[0].key()));
        // Its policy's topology still has CPU 2: that pin is dropped, not failed (a
        // failure would release it); once CPU 2 is back, it is placed again.
        assert!(r.reports.is_empty(), "{:?}", r.reports);
        h.offline = CpuSet::new();
        let r = e.step(&mut h, false);
        assert_eq!(r.action_counts().get(&("pin_process", "done")), Some(&1));
    }

    #[test]
    fn e2_later_policy_does_not_touch_what_earlier_holds() {
        let (a, _) = pin_all(A, 1);
        let (b, seen_b) = pin_all(B, 3);
        let mut e = Engine::new(vec![a, b], Config::default(), 1);
        let mut h = FakeHost::new(vec![proc_sample(10, "x")]);
        e.step(&mut h, false);
        let r = e.step(&mut h, false);
        assert_eq!(r.reports.len(), 1, "{:?}", r.reports);
        assert_eq!(r.reports[0].planned.policy, A);
        assert!(r.plan.notes.iter().any(|n| n.policy == B));
        assert_eq!(h.procs[0].allowed, CpuSet::single(1));
        e.step(&mut h, false);
        let seen = seen_b.lock().expect("lock");
        assert!(seen.last().expect("planned").contains(&h.procs[0].key()));
    }

    /// Binds every process's memory to node 0 (numa-local's kind of action).
    struct MemAll;

    impl Policy for MemAll {
        type State = ();

        fn kind(&self) -> PolicyKind {
            MEM
        }
        fn plan(&self, _topo: &Topology, obs: &Observation, _state: &mut PolicyState) -> Plan {
            let mut plan = Plan::default();
            for p in &obs.procs {
                plan.push(
                    MEM,
                    Action::BindMemory {
                        proc: p.key(),
                        nodes: vec![0],
                        migrate_max_bytes: 4096,
                    },
                    "test",
                );
            }
            plan
        }
    }

    #[test]
    fn e2_memory_actions_pass_an_earlier_cpu_hold() {
        let (a, _) = pin_all(A, 1);
        let (b, _) = pin_all(B, 3);
        let mut e = Engine::new(vec![a, boxed(MemAll), b], Config::default(), 1);
        let mut h = FakeHost::new(vec![proc_sample(10, "x")]);
        e.step(&mut h, false);
        let r = e.step(&mut h, false);
        let kinds: Vec<(PolicyKind, &str)> = r
            .reports
            .iter()
            .map(|r| (r.planned.policy, r.planned.action.kind()))
            .collect();
        assert_eq!(kinds, vec![(A, "pin_process"), (MEM, "bind_memory")]);
        assert_eq!(h.procs[0].allowed, CpuSet::single(1), "b's pin was dropped");
    }

    #[test]
    fn e1_disabled_policy_reported_once_and_never_plans() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let p = boxed(PinAll {
            kind: OFF,
            cpu: 1,
            disabled: Some("no counters".into()),
            seen_taken: seen.clone(),
        });
        let mut e = Engine::new(vec![p], Config::default(), 1);
        let mut h = FakeHost::new(vec![proc_sample(10, "x")]);
        let r0 = e.step(&mut h, false);
        assert_eq!(r0.disabled, vec![(OFF, "no counters".into())]);
        let r1 = e.step(&mut h, false);
        assert!(r1.disabled.is_empty());
        assert!(r1.reports.is_empty());
        assert!(seen.lock().expect("lock").is_empty());
    }

    /// E1's companion: what a running policy lacks is said on the first step only, and a
    /// disabled policy says why it is off, not what it lacks.
    #[test]
    fn e1_lacks_of_running_policies_reported_once() {
        let (on, _) = pin_all(A, 2);
        let off = boxed(PinAll {
            kind: OFF,
            cpu: 1,
            disabled: Some("no counters".into()),
            seen_taken: Arc::new(Mutex::new(Vec::new())),
        });
        let mut e = Engine::new(vec![on, off], Config::default(), 1);
        let mut h = FakeHost::new(vec![proc_sample(10, "x")]);
        let r0 = e.step(&mut h, false);
        assert_eq!(r0.lacking, vec![(A, "nothing but cpu 2".into())]);
        assert_eq!(r0.disabled, vec![(OFF, "no counters".into())]);
        let r1 = e.step(&mut h, false);
        assert!(r1.lacking.is_empty() && r1.disabled.is_empty());
    }

    #[test]
    fn e3_scope_enforced_whatever_the_policy_asks() {
        let (p, _) = pin_all(A, 2);
        let mut cfg = Config::default();
        cfg.scope.exclude_comm = vec!["sshd".into()];
        let mut e = Engine::new(vec![p], cfg, 11);
        let mut kt = proc_sample(12, "kworker/0:1");
        kt.kernel_thread = true;
        let mut h = FakeHost::new(vec![
            proc_sample(10, "sshd"),
            proc_sample(11, "placer"),
            kt,
            proc_sample(13, "app"),
        ]);
        e.step(&mut h, false);
        let r = e.step(&mut h, false);
        let pids: Vec<u32> = r
            .reports
            .iter()
            .filter_map(|r| r.planned.action.proc())
            .map(|k| k.pid)
            .collect();
        assert_eq!(pids, vec![13]);
        assert_eq!(r.plan.notes.len(), 3);
    }

    #[test]
    fn e6_dry_run_holds_nothing() {
        let (p, _) = pin_all(A, 2);
        let mut e = Engine::new(vec![p], Config::default(), 1);
        let mut h = FakeHost::new(vec![proc_sample(10, "x")]);
        e.step(&mut h, true);
        let r1 = e.step(&mut h, true);
        assert_eq!(r1.reports.len(), 1);
        assert_eq!(r1.managed, 0);
        let r2 = e.step(&mut h, true);
        assert_eq!(r2.reports.len(), 1, "planned again");
        assert!(r2.lease_breaks.is_empty());
        assert_eq!(h.procs[0].allowed, CpuSet::first_n(4));
    }

    #[test]
    fn e5_permanent_failure_releases_transient_retries() {
        let (p, _) = pin_all(A, 2);
        let mut e = Engine::new(vec![p], Config::default(), 1);
        let mut h = FakeHost::new(vec![proc_sample(10, "x")]);
        h.fail_pins = Some(Outcome::Transient("EBUSY".into()));
        e.step(&mut h, false);
        e.step(&mut h, false);
        assert_eq!(e.step(&mut h, false).reports.len(), 1, "retried");
        h.fail_pins = Some(Outcome::Permanent("EINVAL".into()));
        e.step(&mut h, false);
        assert!(e
            .state(A)
            .expect("state")
            .released
            .contains(&h.procs[0].key()));
        assert!(e.step(&mut h, false).reports.is_empty());
    }

    #[test]
    fn exited_process_is_forgotten() {
        let (p, _) = pin_all(A, 2);
        let mut e = Engine::new(vec![p], Config::default(), 1);
        let mut h = FakeHost::new(vec![proc_sample(10, "x")]);
        e.step(&mut h, false);
        e.step(&mut h, false);
        assert_eq!(e.held().len(), 1);
        h.procs.clear();
        // Gone from MAX_ABSENT_OBSERVATIONS samples in a row (E4): forgotten, no lease break.
        let rs: Vec<CycleReport> = (0..MAX_ABSENT_OBSERVATIONS)
            .map(|_| e.step(&mut h, false))
            .collect();
        assert_eq!(rs[0].managed, 1);
        assert_eq!(rs.last().expect("steps").managed, 0);
        assert!(rs.iter().all(|r| r.lease_breaks.is_empty()));
        // Issue 48: given back at the last one, in case a sample missed it while it ran.
        let restores = |r: &CycleReport| {
            r.plan
                .actions
                .iter()
                .filter(|a| matches!(a.action, Action::RestoreProcess { .. }))
                .count()
        };
        assert_eq!(rs.iter().map(restores).collect::<Vec<_>>(), vec![0, 0, 1]);
        assert!(
            e.step(&mut h, false).plan.actions.is_empty(),
            "given back once"
        );
    }

    #[test]
    fn registry_builds_configured_policies() {
        let cfg = Config::default();
        let ps = policies_from_config(&cfg, 1);
        assert_eq!(
            ps.iter().map(|p| p.kind()).collect::<Vec<_>>(),
            vec![PolicyKind::NetAffinity]
        );
    }

    /// Pins every process to `cpu` once the clock reaches `from_s` (so verdicts have a
    /// before-window) and until `until_s`, as policy `kind` (whose expectation judges the
    /// pins).
    struct PinLater {
        kind: PolicyKind,
        cpu: u32,
        from_s: f64,
        until_s: f64,
        /// Also move each pinned process's memory (to node 0).
        bind: bool,
    }

    impl Policy for PinLater {
        type State = ();

        fn kind(&self) -> PolicyKind {
            self.kind
        }
        fn plan(&self, _topo: &Topology, obs: &Observation, state: &mut PolicyState) -> Plan {
            let mut plan = Plan::default();
            if state.now_s < self.from_s || state.now_s >= self.until_s {
                return plan;
            }
            for p in &obs.procs {
                let k = p.key();
                if !state.held.contains_key(&k) {
                    plan.push(
                        self.kind,
                        Action::PinProcess {
                            proc: k,
                            comm: p.comm.to_string(),
                            cpus: CpuSet::single(self.cpu),
                        },
                        "test",
                    );
                    if self.bind {
                        plan.push(
                            self.kind,
                            Action::BindMemory {
                                proc: k,
                                nodes: vec![0],
                                migrate_max_bytes: 1 << 20,
                            },
                            "test",
                        );
                    }
                }
            }
            plan
        }
    }

    /// The judge's settings of these tests: a short trial (1 settling interval, looks at 8
    /// and 12 pairs), back-off 3.
    fn judged_config() -> Config {
        let mut cfg = Config::default();
        cfg.verify.settle_intervals = 1;
        cfg.verify.first_look_pairs = 8;
        cfg.verify.probe_pairs = 12;
        cfg.verify.backoff_intervals = 3;
        cfg
    }

    /// Runs PinLater (as smt-energy: judged by CPU share) over one process that gets `on`
    /// ticks per step while on CPU 2 (pinned) and `off` otherwise (+1 every third step, so
    /// the arms are not constant), for `steps` steps; returns every report, the engine and
    /// the host.
    fn run_verdict_dry(
        on: u64,
        off: u64,
        steps: usize,
        dry_run: bool,
    ) -> (Vec<CycleReport>, Engine, FakeHost) {
        let p: Box<dyn AnyPolicy> = boxed(PinLater {
            kind: PolicyKind::SmtEnergy,
            cpu: 2,
            from_s: 5.0,
            until_s: if dry_run { 5.5 } else { f64::INFINITY },
            bind: false,
        });
        let mut e = Engine::new(vec![p], judged_config(), 1);
        let mut h = FakeHost::new(vec![proc_sample(10, "x")]);
        h.dry_run_answers_done = dry_run;
        let mut out = vec![e.step(&mut h, dry_run)];
        for i in 0..steps {
            let pinned = h.procs[0].allowed == CpuSet::single(2);
            h.procs[0].utime_ticks += if pinned { on } else { off } + u64::from(i % 3 == 0);
            out.push(e.step(&mut h, dry_run));
        }
        (out, e, h)
    }

    fn run_verdict(on: u64, off: u64) -> (Vec<CycleReport>, Engine, FakeHost) {
        run_verdict_dry(on, off, 60, false)
    }

    fn verdicts(rs: &[CycleReport]) -> Vec<crate::verdict::VerdictKind> {
        rs.iter()
            .flat_map(|r| r.verdicts.iter().map(|v| v.judgement.kind))
            .collect()
    }

    fn probes(r: &CycleReport) -> usize {
        r.plan
            .actions
            .iter()
            .filter(|a| a.reason.starts_with("judge: probing"))
            .count()
    }

    #[test]
    fn e7_a_move_that_worsens_is_undone_and_backed_off() {
        use crate::verdict::VerdictKind;
        let (rs, e, _) = run_verdict(50, 90);
        let kinds = verdicts(&rs);
        assert_eq!(kinds[0], VerdictKind::Undone, "{kinds:?}");
        let undone = rs
            .iter()
            .position(|r| !r.verdicts.is_empty())
            .expect("verdict");
        let r = &rs[undone];
        assert!(r
            .plan
            .actions
            .iter()
            .any(|a| matches!(a.action, Action::RestoreProcess { .. })
                && a.reason.starts_with("verdict")));
        assert_eq!(r.verdicts[0].backoff_intervals, Some(3));
        // Backing off: the next cycles' pins are dropped with a note, then allowed again.
        let next = &rs[undone + 1];
        assert!(next.plan.actions.is_empty(), "{:?}", next.plan.actions);
        assert!(next
            .plan
            .notes
            .iter()
            .any(|n| n.text.contains("backing off")));
        assert!(rs[undone + 1..].iter().any(|r| r
            .plan
            .actions
            .iter()
            .any(|a| matches!(a.action, Action::PinProcess { .. }))));
        // V8: the off arms broke no lease.
        assert!(rs.iter().all(|r| r.lease_breaks.is_empty()));
        let _ = e;
    }

    /// E7: the judge's switches are not the policy's: while probing, the policy holds its
    /// process all along (its pins of it are not planned again), and the arms alternate.
    #[test]
    fn e7_probe_switches_leave_the_policys_hold_alone() {
        let (rs, e, h) = run_verdict(90, 50);
        let first = rs.iter().position(|r| probes(r) > 0).expect("probed");
        let judged = rs
            .iter()
            .position(|r| !r.verdicts.is_empty())
            .expect("verdict");
        assert!(first < judged);
        let restores = rs[first..=judged]
            .iter()
            .flat_map(|r| &r.plan.actions)
            .filter(|a| matches!(a.action, Action::RestoreProcess { .. }))
            .count();
        assert!(restores >= 2, "off arms planned: {restores}");
        assert_eq!(e.state(PolicyKind::SmtEnergy).expect("state").held.len(), 1);
        // Kept ends on the pin (V3).
        assert_eq!(h.procs[0].allowed, CpuSet::single(2));
        assert_eq!(verdicts(&rs), vec![crate::verdict::VerdictKind::Kept]);
        // After the verdict, no more probing.
        assert!(rs[judged + 1..].iter().all(|r| probes(r) == 0));
    }

    /// E7: nothing is judged in a dry run (nothing was changed): the worsening run above,
    /// dry, plans its pin once and gets no verdict and no restore, even from a host that
    /// answers the dry run's pins Done.
    #[test]
    fn e7_nothing_is_judged_in_a_dry_run() {
        let (rs, _, _) = run_verdict_dry(50, 90, 60, true);
        assert!(verdicts(&rs).is_empty());
        let planned = |r: &CycleReport, pin: bool| {
            r.plan.actions.iter().any(|a| match a.action {
                Action::PinProcess { .. } => pin,
                Action::RestoreProcess { .. } => !pin,
                _ => false,
            })
        };
        assert_eq!(rs.iter().filter(|r| planned(r, true)).count(), 1);
        assert!(!rs.iter().any(|r| planned(r, false)));
    }

    #[test]
    fn e7_no_effect_is_inconclusive_and_stays_pinned() {
        use crate::verdict::VerdictKind;
        let (rs, e, h) = run_verdict(50, 50);
        assert_eq!(verdicts(&rs), vec![VerdictKind::Inconclusive]);
        assert_eq!(e.state(PolicyKind::SmtEnergy).expect("state").held.len(), 1);
        assert_eq!(h.procs[0].allowed, CpuSet::single(2));
    }

    /// Runs PinLater as `contention` (judged together, by instructions per CPU-second) over
    /// processes whose instructions per step are `off[i]` off the pin and `on[i]` on it,
    /// each busy on a full CPU; returns every report.
    fn run_together(off: &[u64], on: &[u64]) -> (Vec<CycleReport>, Engine) {
        use crate::sample::{CounterEvent, CounterValue};
        let p: Box<dyn AnyPolicy> = boxed(PinLater {
            kind: PolicyKind::Contention,
            cpu: 2,
            from_s: 6.0,
            until_s: f64::INFINITY,
            bind: true,
        });
        let mut e = Engine::new(vec![p], judged_config(), 1);
        let procs = (0..off.len() as u32)
            .map(|i| proc_sample(10 + i, &format!("app{i}")))
            .collect();
        let mut h = FakeHost::new(procs);
        let mut out = vec![e.step(&mut h, false)];
        let mut instructions = vec![0u64; off.len()];
        for step in 0..40 {
            for (i, p) in h.procs.iter_mut().enumerate() {
                let pinned = p.allowed == CpuSet::single(2);
                // +-1% alternating noise, so the pairs differ.
                let base = if pinned { on[i] } else { off[i] };
                instructions[i] += base + if step % 2 == 0 { base / 100 } else { 0 };
                p.utime_ticks += 100;
                p.counters = vec![CounterValue {
                    event: CounterEvent::Instructions,
                    value: instructions[i],
                    time_enabled_ns: (step + 1) * 1_000_000_000,
                    time_running_ns: (step + 1) * 1_000_000_000,
                }];
            }
            out.push(e.step(&mut h, false));
        }
        (out, e)
    }

    #[test]
    fn e7_one_cycles_pins_judged_together_stand_or_fall_as_one() {
        use crate::verdict::VerdictKind;
        // Two moved processes lose 5%, two protected ones gain 25%: all four kept.
        let (rs, e) = run_together(&[2000, 2000, 1000, 1000], &[1900, 1900, 1250, 1250]);
        let v: Vec<&Verdict> = rs.iter().flat_map(|r| &r.verdicts).collect();
        assert_eq!(v.len(), 4, "{v:?}");
        assert!(
            v.iter().all(|v| v.judgement.kind == VerdictKind::Kept),
            "{v:?}"
        );
        assert!(v[0].judgement.why.contains("4 processes judged together"));
        assert!(v.iter().all(|x| x.trial.is_some() && x.trial == v[0].trial));
        assert_eq!(
            e.state(PolicyKind::Contention).expect("state").held.len(),
            4
        );
        // Everyone loses 10%: all four undone in one cycle, each backed off.
        let (rs, _) = run_together(&[2000, 2000, 1000, 1000], &[1800, 1800, 900, 900]);
        let at = rs
            .iter()
            .position(|r| !r.verdicts.is_empty())
            .expect("verdicts");
        let r = &rs[at];
        assert_eq!(r.verdicts.len(), 4);
        assert!(r
            .verdicts
            .iter()
            .all(|v| v.judgement.kind == VerdictKind::Undone && v.backoff_intervals == Some(3)));
        let restores = r
            .plan
            .actions
            .iter()
            .filter(|a| matches!(a.action, Action::RestoreProcess { .. }))
            .count();
        assert_eq!(restores, 4);
        assert!(rs[at + 1..].iter().all(|r| r.verdicts.is_empty()));
        // Backing off, neither their CPUs nor their memory are moved.
        let next = &rs[at + 1];
        assert!(next.plan.actions.is_empty(), "{:?}", next.plan.actions);
        assert_eq!(
            next.plan
                .notes
                .iter()
                .filter(|n| n.text.contains("backing off"))
                .count(),
            8
        );
    }

    /// Pins every process once (at `pin_s`) and gives each back at `restore_s`, as a
    /// policy whose process went quiet does.
    struct PinThenRestore {
        pin_s: f64,
        restore_s: f64,
    }

    impl Policy for PinThenRestore {
        type State = ();

        fn kind(&self) -> PolicyKind {
            PolicyKind::SmtEnergy
        }
        fn plan(&self, _topo: &Topology, obs: &Observation, state: &mut PolicyState) -> Plan {
            let mut plan = Plan::default();
            for p in &obs.procs {
                let (k, comm) = (p.key(), p.comm.to_string());
                let held = state.held.contains_key(&k);
                if !held && (self.pin_s..self.pin_s + 1.0).contains(&state.now_s) {
                    let cpus = CpuSet::single(2);
                    plan.push(
                        self.kind(),
                        Action::PinProcess {
                            proc: k,
                            comm,
                            cpus,
                        },
                        "test",
                    );
                } else if held && state.now_s >= self.restore_s {
                    plan.push(
                        self.kind(),
                        Action::RestoreProcess {
                            proc: k,
                            comm,
                            via: None,
                        },
                        "quiet",
                    );
                }
            }
            plan
        }
    }

    /// Issue 48: a policy giving a process back while the judge probes its pin ends the
    /// trial: no arm of the judge follows the restore in its plan (in either arm, at every
    /// point of the trial), so the process keeps its own affinity, the policy holds nothing
    /// and breaks no lease (an arm's report taken for the policy's kept the hold, and the
    /// next cycle read the restored process as moved by someone else).
    #[test]
    fn e7_a_restore_during_a_trial_is_not_undone_by_the_judges_next_arm() {
        let own = CpuSet::first_n(4);
        let mut arms = BTreeSet::new();
        for restore_s in 8..24 {
            let p: Box<dyn AnyPolicy> = boxed(PinThenRestore {
                pin_s: 5.0,
                restore_s: restore_s as f64,
            });
            let mut e = Engine::new(vec![p], judged_config(), 1);
            let mut h = FakeHost::new(vec![proc_sample(10, "x")]);
            let mut restored_at = None;
            for i in 0..40u64 {
                let pinned = h.procs[0].allowed == CpuSet::single(2);
                h.procs[0].utime_ticks += 50 + u64::from(i % 3 == 0 && pinned);
                let r = e.step(&mut h, false);
                // Its own restore is no lease break (as it was when the policy's report
                // was taken for the judge's and the hold outlived the restore).
                assert!(
                    r.lease_breaks.is_empty(),
                    "restore at {restore_s} s, step {i}"
                );
                let restore = r.plan.actions.iter().position(|a| a.reason == "quiet");
                if let (Some(at), None) = (restore, restored_at) {
                    restored_at = Some(i);
                    arms.insert(pinned);
                    assert!(
                        r.plan.actions[at + 1..]
                            .iter()
                            .all(|a| a.action.proc() != Some(h.procs[0].key())),
                        "restore at {restore_s} s followed by {:?}",
                        r.plan.actions
                    );
                }
                if restored_at.is_some() {
                    assert_eq!(
                        h.procs[0].allowed, own,
                        "restore at {restore_s} s, step {i}"
                    );
                }
            }
            assert!(restored_at.is_some(), "restore at {restore_s} s planned");
            let st = e.state(PolicyKind::SmtEnergy).expect("state");
            assert!(
                st.held.is_empty() && st.released.is_empty(),
                "restore at {restore_s} s"
            );
            assert_eq!(e.verifier.trials(), 0);
        }
        assert_eq!(arms.len(), 2, "restores met both arms: {arms:?}");
    }

    #[test]
    fn e7_verify_off_judges_nothing() {
        let mut cfg = judged_config();
        cfg.verify.enabled = false;
        let p: Box<dyn AnyPolicy> = boxed(PinLater {
            kind: PolicyKind::SmtEnergy,
            cpu: 2,
            from_s: 4.0,
            until_s: f64::INFINITY,
            bind: false,
        });
        let mut e = Engine::new(vec![p], cfg.clone(), 1);
        let mut h = FakeHost::new(vec![proc_sample(10, "x")]);
        for i in 0..40u64 {
            h.procs[0].utime_ticks += if i < 3 { 90 } else { 10 };
            let r = e.step(&mut h, false);
            assert!(r.verdicts.is_empty());
            assert_eq!(probes(&r), 0);
        }
        assert_eq!(e.verifier.trials(), 0);
    }
}
