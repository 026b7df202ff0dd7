//! Policy `smt-energy` (seed 001 at the operating-system layer): confine each matched
//! process to the CPUs an allocation order ([`crate::alloc`]) gives for its observed
//! parallelism, so a job that uses 4 CPUs' worth of time runs on 2 cores x 2 threads
//! (`efficiency`) or on 4 separate cores (`speedup`) instead of wherever the kernel puts it.
//!
//! Algorithm, each cycle:
//! 1. Candidates: processes matched by one of `apps` (comm / cgroup / user, see
//!    [`AppMatch`]), not kernel threads, not released, using at least `min_cpu_share`.
//!    Processes are handled oldest first (by start time, then pid) so earlier jobs keep
//!    their CPUs.
//! 2. Wanted units: `ceil(cpu_share / busy_fraction)`, at least 1, at most `num_threads`
//!    and `max_units`. A process held on `k` CPUs that keeps them at least
//!    `busy_fraction` busy per CPU (`cpu_share >= busy_fraction * k`) and has more threads
//!    than `k` is saturated: it cannot show more demand than its CPUs allow, so it is
//!    offered `k + grow_step` (bounded as above). With `serial_fraction` set, the wanted
//!    units are also capped at the order's least-energy prefix or where parallel
//!    efficiency falls below one half ([`crate::alloc::Caps::cap`]).
//! 3. Hysteresis: a held process keeps its CPUs while the wanted count is within
//!    `hysteresis_units` of what it holds; it grows at once when saturated; it shrinks
//!    only after wanting fewer units for `shrink_after_s` seconds.
//! 4. CPUs: walk the order, skipping CPUs kept by processes of step 3; take the first
//!    `wanted` free ones. If fewer are free, take what is free (at least one: when nothing
//!    is free the process shares the order's first CPUs, and a note says so).
//! 5. Held processes that no longer match, or went idle below `min_cpu_share` for
//!    `shrink_after_s`, are restored.
//!
//! Invariants (each tested; a test's name starts with the ones it checks):
//! - S1: only allowed online CPUs are used;
//! - S2: a lone matched process gets a prefix of the order;
//! - S3: processes that fit get disjoint CPU sets;
//! - S4: unmatched processes are never touched;
//! - S5: with unchanged observations a second cycle plans nothing;
//! - S6: the number of CPUs given never exceeds `max_units`, `num_threads` or the Amdahl cap.

use crate::alloc::{self, AllocOptions, AllocPolicy};
use crate::cpuset::CpuSet;
use crate::observation::{Observation, ProcObs};
use crate::plan::{Action, Plan};
use crate::policy::{Policy, PolicyState};
use crate::sample::ProcKey;
use crate::scope::AppMatch;
use crate::topology::Topology;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const NAME: &str = KIND.name();
/// This policy's identity in plans, notes, verdicts and back-off keys.
const KIND: crate::policies::PolicyKind = crate::policies::PolicyKind::SmtEnergy;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SmtEnergyConfig {
    /// Allocation order: `efficiency` (fill SMT siblings first, seed 001 policy 2),
    /// `speedup` (one thread per core first, policy 1), `compact` or `scatter`.
    pub order: AllocPolicy,
    /// Which processes to manage; empty = none (the policy does nothing).
    pub apps: Vec<AppMatch>,
    /// Compute of a shared SMT sibling relative to a full core (the paper's 0.3).
    pub sigma: f64,
    /// Ignore processes using less CPU than this (in CPUs).
    pub min_cpu_share: f64,
    /// A CPU counts as used by the process when it is this busy (0..1]; also the
    /// saturation threshold.
    pub busy_fraction: f64,
    /// CPUs added at once to a saturated process.
    pub grow_step: u32,
    /// Keep a process's CPUs while the wanted count differs by at most this many.
    pub hysteresis_units: u32,
    /// Shrink (or restore an idle process) only after this long wanting less.
    pub shrink_after_s: f64,
    /// Never give one process more CPUs than this (0 = no limit).
    pub max_units: u32,
    /// When set, cap each process at the Amdahl/energy limit for this serial fraction.
    pub serial_fraction: Option<f64>,
    /// Power model for the energy cap: `dell-c6100` or `hp-dk388p`.
    pub power_model: String,
}

impl Default for SmtEnergyConfig {
    fn default() -> Self {
        SmtEnergyConfig {
            order: AllocPolicy::Efficiency,
            apps: Vec::new(),
            sigma: alloc::DEFAULT_SIGMA,
            min_cpu_share: 0.5,
            busy_fraction: 0.8,
            grow_step: 2,
            hysteresis_units: 1,
            shrink_after_s: 10.0,
            max_units: 0,
            serial_fraction: None,
            power_model: "dell-c6100".into(),
        }
    }
}

impl SmtEnergyConfig {
    /// Checks values; the error names the field.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let bad = |f: &str, m: String| Err((f.to_string(), m));
        if !(self.sigma > 0.0 && self.sigma < 1.0) {
            return bad("sigma", format!("{} is not in (0, 1)", self.sigma));
        }
        if !(self.busy_fraction > 0.0 && self.busy_fraction <= 1.0) {
            return bad(
                "busy_fraction",
                format!("{} is not in (0, 1]", self.busy_fraction),
            );
        }
        if self.min_cpu_share < 0.0 || !self.min_cpu_share.is_finite() {
            return bad(
                "min_cpu_share",
                format!("{} is negative", self.min_cpu_share),
            );
        }
        if self.grow_step == 0 {
            return bad("grow_step", "must be at least 1".into());
        }
        if self.grow_step > 4096 || self.max_units > 65_536 || self.hysteresis_units > 4096 {
            return bad(
                "grow_step",
                "grow_step, hysteresis_units (<= 4096) and max_units (<= 65536) are bounded by the largest machines".into(),
            );
        }
        if !self.shrink_after_s.is_finite()
            || self.shrink_after_s > 86_400.0
            || self.shrink_after_s < 0.0
        {
            return bad(
                "shrink_after_s",
                format!("{} is negative", self.shrink_after_s),
            );
        }
        if let Some(s) = self.serial_fraction {
            if !(0.0..=1.0).contains(&s) {
                return bad("serial_fraction", format!("{s} is not in [0, 1]"));
            }
        }
        if crate::power_model::builtin(&self.power_model).is_none() {
            return bad(
                "power_model",
                format!(
                    "unknown model {:?}; built in: {}",
                    self.power_model,
                    crate::power_model::builtin_names().join(", ")
                ),
            );
        }
        Ok(())
    }
}

pub struct SmtEnergy {
    pub cfg: SmtEnergyConfig,
}

impl SmtEnergy {
    pub fn new(cfg: SmtEnergyConfig) -> Self {
        SmtEnergy { cfg }
    }

    fn matches(&self, p: &ProcObs) -> bool {
        !p.kernel_thread && self.cfg.apps.iter().any(|a| a.matches(p))
    }

    /// The Amdahl/energy cap in CPUs along `order`, if a serial fraction is configured.
    fn amdahl_cap(&self, topo: &Topology, order: &[u32]) -> Option<usize> {
        let s = self.cfg.serial_fraction?;
        let model = crate::power_model::builtin(&self.cfg.power_model)?;
        let opts = AllocOptions {
            sigma: self.cfg.sigma,
        };
        let stats = alloc::prefix_stats(topo, order, &model, s, &opts);
        Some(alloc::caps(&stats, s).cap())
    }
}

/// Per-process memory: since when it has wanted fewer units than it holds.
#[derive(Default)]
/// This policy's own state between cycles (`Policy::State`).
pub struct Private {
    wants_less_since_s: BTreeMap<ProcKey, f64>,
}

impl Policy for SmtEnergy {
    type State = Private;

    fn kind(&self) -> crate::policies::PolicyKind {
        KIND
    }

    fn lacks(&self, topo: &Topology, _sources: &crate::sample::SourceStatus) -> Vec<String> {
        let mut v = Vec::new();
        if self.cfg.apps.is_empty() {
            v.push("smt_energy.apps is empty: no process is matched, nothing is placed".into());
        }
        if topo.cores().iter().all(|c| c.len() < 2) {
            v.push(
                "no SMT (one CPU per core): the efficiency and speedup orders coincide; only \
                 the number of cores given is chosen"
                    .into(),
            );
        }
        v
    }

    fn plan(&self, topo: &Topology, obs: &Observation, state: &mut PolicyState<Private>) -> Plan {
        let mut plan = Plan::default();
        let cfg = &self.cfg;
        let now = state.now_s;
        // No rules, nothing to place: the order is not worked out.
        if cfg.apps.is_empty() {
            return plan;
        }
        let opts = AllocOptions { sigma: cfg.sigma };
        let order = alloc::order(topo, cfg.order, &opts);
        if order.is_empty() {
            return plan;
        }
        let allowed = topo.allowed();
        let cap = self.amdahl_cap(topo, &order);
        let held = state.held.clone();
        let released = state.released.clone();
        let private: &mut Private = &mut state.private;
        private
            .wants_less_since_s
            .retain(|k, _| held.contains_key(k));

        // The processes the rules match, oldest first.
        let mut procs: Vec<&ProcObs> = obs.iter_procs().filter(|p| self.matches(p)).collect();
        procs.sort_by_key(|p| (p.start_time_ticks, p.pid));

        // Held processes that no longer match: restore.
        let live = obs.index();
        for (key, h) in &held {
            if let Some(p) = live.get(key) {
                if !self.matches(p) {
                    plan.push(
                        KIND,
                        Action::RestoreProcess {
                            proc: *key,
                            comm: h.comm.clone(),
                            via: None,
                        },
                        format!("{} no longer matches any smt_energy.apps rule", p.comm),
                    );
                }
            }
        }

        // Decide wanted counts; keep CPUs of held processes within hysteresis.
        let mut used = CpuSet::new();
        let mut to_place: Vec<(&ProcObs, usize, String)> = Vec::new();
        for p in procs.iter().filter(|p| !released.contains(&p.key())) {
            let key = p.key();
            let held_cpus = held.get(&key).map(|h| h.cpus.intersection(&allowed));
            let k = held_cpus.as_ref().map_or(0, |c| c.len());
            let limit = |n: usize| -> usize {
                let mut n = n.min(p.num_threads.max(1) as usize).min(order.len());
                if cfg.max_units > 0 {
                    n = n.min(cfg.max_units as usize);
                }
                if let Some(c) = cap {
                    n = n.min(c);
                }
                n.max(1)
            };
            if p.cpu_share < cfg.min_cpu_share {
                if k > 0 {
                    let since = *private.wants_less_since_s.entry(key).or_insert(now);
                    if now - since >= cfg.shrink_after_s {
                        plan.push(
                            KIND,
                            Action::RestoreProcess {
                                proc: key,
                                comm: p.comm.to_string(),
                                via: None,
                            },
                            format!(
                                "{} idle ({:.2} CPUs < {}) for {:.0} s",
                                p.comm,
                                p.cpu_share,
                                cfg.min_cpu_share,
                                now - since
                            ),
                        );
                        private.wants_less_since_s.remove(&key);
                    } else {
                        used = used.union(held_cpus.as_ref().expect("k > 0"));
                    }
                }
                continue;
            }
            let demand = (p.cpu_share / cfg.busy_fraction - 1e-9).ceil().max(1.0) as usize;
            let saturated = k > 0
                && p.cpu_share >= cfg.busy_fraction * k as f64
                && (p.num_threads as usize) > k;
            let wanted = if saturated {
                limit(demand.max(k + cfg.grow_step as usize))
            } else {
                limit(demand)
            };
            let why = format!(
                "{}: {:.2} CPUs busy, {} threads{} -> {} units of `{}` order{}",
                p.comm,
                p.cpu_share,
                p.num_threads,
                if saturated {
                    format!(", saturating its {k} CPUs")
                } else {
                    String::new()
                },
                wanted,
                cfg.order,
                cap.map_or(String::new(), |c| format!(
                    " (Amdahl/energy cap {c} at S = {})",
                    cfg.serial_fraction.unwrap_or(0.0)
                )),
            );
            if k > 0 {
                let within = wanted.abs_diff(k) <= cfg.hysteresis_units as usize;
                let grow = wanted > k && saturated;
                let shrink_due = if wanted < k {
                    let since = *private.wants_less_since_s.entry(key).or_insert(now);
                    now - since >= cfg.shrink_after_s
                } else {
                    private.wants_less_since_s.remove(&key);
                    false
                };
                let change = wanted != k && (grow || (!within && wanted > k) || shrink_due);
                if !change {
                    used = used.union(held_cpus.as_ref().expect("k > 0"));
                    continue;
                }
                private.wants_less_since_s.remove(&key);
            }
            to_place.push((p, wanted, why));
        }

        for (p, wanted, why) in to_place {
            let mut cpus: Vec<u32> = order
                .iter()
                .copied()
                .filter(|c| !used.contains(*c))
                .take(wanted)
                .collect();
            let mut why = why;
            if cpus.len() < wanted {
                if cpus.is_empty() {
                    cpus = order.iter().copied().take(wanted).collect();
                    why.push_str("; no free CPU: sharing the order's first CPUs");
                } else {
                    why.push_str(&format!("; only {} free", cpus.len()));
                }
            }
            let set: CpuSet = cpus.iter().copied().collect();
            used = used.union(&set);
            if held.get(&p.key()).is_some_and(|h| h.cpus == set) {
                continue;
            }
            plan.push(
                KIND,
                Action::PinProcess {
                    proc: p.key(),
                    comm: p.comm.to_string(),
                    cpus: set,
                },
                why,
            );
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machines::machine;
    use crate::policy::Held;

    fn proc_obs(pid: u32, comm: &str, cpu_share: f64, threads: u32) -> ProcObs {
        ProcObs {
            state: 'R',
            uid: Some(1000),
            cgroup: "/user.slice".into(),
            cpu_share,
            num_threads: threads,
            ..ProcObs::bare(pid, u64::from(pid) * 10, comm, CpuSet::first_n(16))
        }
    }

    #[test]
    fn lacks_says_no_smt_and_no_apps() {
        let sources = crate::sample::SourceStatus::default();
        let p = SmtEnergy::new(cfg_for("x"));
        assert!(p
            .lacks(&machine("dell-c6100").unwrap(), &sources)
            .is_empty());
        let flat = machine("pkg:1 core:4 pu:1").unwrap();
        let lacks = p.lacks(&flat, &sources);
        assert!(
            lacks.len() == 1 && lacks[0].starts_with("no SMT"),
            "{lacks:?}"
        );
        let lacks = SmtEnergy::new(SmtEnergyConfig::default()).lacks(&flat, &sources);
        assert!(
            lacks.len() == 2 && lacks[0].contains("apps is empty"),
            "{lacks:?}"
        );
    }

    fn cfg_for(comm: &str) -> SmtEnergyConfig {
        SmtEnergyConfig {
            apps: vec![AppMatch {
                comm: Some(comm.into()),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn obs(procs: Vec<ProcObs>) -> Observation {
        Observation {
            interval_s: 1.0,
            procs: procs.into_iter().map(std::sync::Arc::new).collect(),
            ..Default::default()
        }
    }

    fn pins(plan: &Plan) -> Vec<(u32, Vec<u32>)> {
        plan.actions
            .iter()
            .filter_map(|a| match &a.action {
                Action::PinProcess { proc, cpus, .. } => Some((proc.pid, cpus.to_vec())),
                _ => None,
            })
            .collect()
    }

    /// What the engine does after a successful pin.
    fn apply(state: &mut PolicyState<Private>, plan: &Plan) {
        for a in &plan.actions {
            match &a.action {
                Action::PinProcess { proc, comm, cpus } => {
                    state.shared.held.insert(
                        *proc,
                        Held {
                            cpus: cpus.clone(),
                            since_s: state.shared.now_s,
                            comm: comm.clone(),
                        },
                    );
                }
                Action::RestoreProcess { proc, .. } => {
                    state.held.remove(proc);
                }
                _ => {}
            }
        }
    }

    #[test]
    fn default_config_validates_and_round_trips() {
        let c = SmtEnergyConfig::default();
        c.validate().unwrap();
        let t = toml::to_string(&c).unwrap();
        let back: SmtEnergyConfig = toml::from_str(&t).unwrap();
        assert_eq!(back, c);
        let bad = SmtEnergyConfig {
            sigma: 0.0,
            ..Default::default()
        };
        assert_eq!(bad.validate().unwrap_err().0, "sigma");
        let bad = SmtEnergyConfig {
            power_model: "x".into(),
            ..Default::default()
        };
        assert_eq!(bad.validate().unwrap_err().0, "power_model");
        assert!(toml::from_str::<SmtEnergyConfig>("order = \"fastest\"").is_err());
    }

    #[test]
    fn s2_lone_process_gets_a_prefix_of_the_efficiency_order() {
        let t = machine("dell-c6100").unwrap();
        let pol = SmtEnergy::new(cfg_for("wc"));
        let mut st = PolicyState::default();
        let plan = pol.plan(&t, &obs(vec![proc_obs(100, "wc", 3.5, 8)]), &mut st);
        // 3.5 / 0.8 -> 5 units: cores 0 and 1 of package 0 both threads, and core 2.
        assert_eq!(pins(&plan), vec![(100, vec![0, 2, 4, 8, 10])]);
        let order = alloc::order(&t, AllocPolicy::Efficiency, &AllocOptions::default());
        let mut prefix = order[..5].to_vec();
        prefix.sort_unstable();
        assert_eq!(pins(&plan)[0].1, prefix);
    }

    #[test]
    fn speedup_order_spreads_over_cores() {
        let t = machine("dell-c6100").unwrap();
        let mut cfg = cfg_for("wc");
        cfg.order = AllocPolicy::Speedup;
        let pol = SmtEnergy::new(cfg);
        let plan = pol.plan(
            &t,
            &obs(vec![proc_obs(100, "wc", 3.9, 8)]),
            &mut PolicyState::default(),
        );
        assert_eq!(pins(&plan), vec![(100, vec![0, 1, 2, 4, 6])]);
    }

    #[test]
    fn s4_unmatched_kernel_and_idle_processes_are_not_touched() {
        let t = machine("dell-c6100").unwrap();
        let pol = SmtEnergy::new(cfg_for("wc"));
        let mut k = proc_obs(3, "wc", 4.0, 4);
        k.kernel_thread = true;
        let procs = vec![proc_obs(1, "other", 4.0, 4), k, proc_obs(5, "wc", 0.1, 4)];
        let plan = pol.plan(&t, &obs(procs), &mut PolicyState::default());
        assert!(plan.actions.is_empty(), "{plan:?}");
        // No apps configured: nothing at all.
        let pol = SmtEnergy::new(SmtEnergyConfig::default());
        let plan = pol.plan(
            &t,
            &obs(vec![proc_obs(5, "wc", 4.0, 4)]),
            &mut PolicyState::default(),
        );
        assert!(plan.actions.is_empty());
    }

    #[test]
    fn s3_two_processes_get_disjoint_sets_oldest_first() {
        let t = machine("dell-c6100").unwrap();
        let pol = SmtEnergy::new(cfg_for("wc"));
        let plan = pol.plan(
            &t,
            &obs(vec![
                proc_obs(200, "wc", 1.5, 4),
                proc_obs(100, "wc", 2.4, 4),
            ]),
            &mut PolicyState::default(),
        );
        let p = pins(&plan);
        assert_eq!(p[0], (100, vec![0, 2, 8]));
        assert_eq!(p[1], (200, vec![4, 10]));
    }

    #[test]
    fn s1_s6_only_allowed_cpus_and_threads_bound_the_units() {
        let mut t = machine("dell-c6100").unwrap();
        t.cpus[8].allowed = false;
        let pol = SmtEnergy::new(cfg_for("wc"));
        let plan = pol.plan(
            &t,
            &obs(vec![proc_obs(100, "wc", 6.0, 2)]),
            &mut PolicyState::default(),
        );
        let p = pins(&plan);
        assert_eq!(p, vec![(100, vec![0, 2])]);
        assert!(p[0].1.iter().all(|c| t.allowed().contains(*c)));
    }

    #[test]
    fn s5_steady_state_plans_nothing_and_small_changes_are_absorbed() {
        let t = machine("dell-c6100").unwrap();
        let pol = SmtEnergy::new(cfg_for("wc"));
        let mut st = PolicyState::default();
        let plan = pol.plan(&t, &obs(vec![proc_obs(100, "wc", 2.0, 8)]), &mut st);
        assert_eq!(pins(&plan), vec![(100, vec![0, 2, 8])]);
        apply(&mut st, &plan);
        st.now_s = 1.0;
        assert!(pol
            .plan(&t, &obs(vec![proc_obs(100, "wc", 2.0, 8)]), &mut st)
            .actions
            .is_empty());
        // Wants 2 (1.5 / 0.8 -> 2) instead of 3: within hysteresis, nothing.
        st.now_s = 2.0;
        assert!(pol
            .plan(&t, &obs(vec![proc_obs(100, "wc", 1.5, 8)]), &mut st)
            .actions
            .is_empty());
    }

    #[test]
    fn saturated_process_grows_at_once_and_shrinks_only_after_a_while() {
        let t = machine("dell-c6100").unwrap();
        let pol = SmtEnergy::new(cfg_for("wc"));
        let mut st = PolicyState::default();
        let plan = pol.plan(&t, &obs(vec![proc_obs(100, "wc", 1.6, 8)]), &mut st);
        apply(&mut st, &plan);
        assert_eq!(st.held.values().next().unwrap().cpus.len(), 2);
        // Saturating 2 CPUs with 8 threads: +grow_step at once.
        st.now_s = 1.0;
        let plan = pol.plan(&t, &obs(vec![proc_obs(100, "wc", 1.9, 8)]), &mut st);
        assert_eq!(pins(&plan), vec![(100, vec![0, 2, 8, 10])]);
        apply(&mut st, &plan);
        // Now wants 1: not before shrink_after_s.
        for s in [2.0, 5.0, 11.0] {
            st.now_s = s;
            let plan = pol.plan(&t, &obs(vec![proc_obs(100, "wc", 0.6, 8)]), &mut st);
            assert!(plan.actions.is_empty(), "at {s}: {plan:?}");
        }
        st.now_s = 12.5;
        let plan = pol.plan(&t, &obs(vec![proc_obs(100, "wc", 0.6, 8)]), &mut st);
        assert_eq!(pins(&plan), vec![(100, vec![0])]);
    }

    #[test]
    fn idle_and_unmatched_held_processes_are_restored() {
        let t = machine("dell-c6100").unwrap();
        let pol = SmtEnergy::new(cfg_for("wc"));
        let mut st = PolicyState::default();
        let plan = pol.plan(
            &t,
            &obs(vec![
                proc_obs(100, "wc", 2.0, 8),
                proc_obs(101, "wc", 2.0, 8),
            ]),
            &mut st,
        );
        apply(&mut st, &plan);
        // 101 changed its name (exec): restored at once. 100 idles: restored later.
        let mut renamed = proc_obs(101, "sh", 2.0, 8);
        renamed.start_time_ticks = 1010;
        st.now_s = 1.0;
        let plan = pol.plan(
            &t,
            &obs(vec![proc_obs(100, "wc", 0.0, 8), renamed.clone()]),
            &mut st,
        );
        assert_eq!(plan.actions.len(), 1);
        assert!(
            matches!(plan.actions[0].action, Action::RestoreProcess { proc, .. } if proc.pid == 101)
        );
        apply(&mut st, &plan);
        st.now_s = 20.0;
        let plan = pol.plan(
            &t,
            &obs(vec![proc_obs(100, "wc", 0.0, 8), renamed]),
            &mut st,
        );
        assert!(
            matches!(plan.actions[0].action, Action::RestoreProcess { proc, .. } if proc.pid == 100)
        );
    }

    #[test]
    fn s6_amdahl_cap_limits_units() {
        let t = machine("dell-c6100").unwrap();
        let mut cfg = cfg_for("wc");
        cfg.serial_fraction = Some(0.5);
        let pol = SmtEnergy::new(cfg);
        let plan = pol.plan(
            &t,
            &obs(vec![proc_obs(100, "wc", 12.0, 16)]),
            &mut PolicyState::default(),
        );
        let n = pins(&plan)[0].1.len();
        // S = 0.5: efficiency falls below 1/2 beyond 3 compute units.
        let order = alloc::order(&t, AllocPolicy::Efficiency, &AllocOptions::default());
        let (_, compute) = alloc::usage_of(&t, &order[..n], &AllocOptions::default());
        assert!(compute <= 3.0 + 1e-9, "{n} units, compute {compute}");
        assert!((1..16).contains(&n));
    }

    #[test]
    fn the_engine_builds_it_from_the_config() {
        let cfg = crate::config::Config::from_toml(
            "policies = [\"smt-energy\"]\n[smt_energy]\norder = \"speedup\"\n\
             apps = [{ comm = \"wc*\" }]\nserial_fraction = 0.077\n",
        )
        .unwrap();
        assert_eq!(cfg.smt_energy.order, AllocPolicy::Speedup);
        let ps = crate::engine::policies_from_config(&cfg, 1);
        assert_eq!(ps.iter().map(|p| p.kind()).collect::<Vec<_>>(), vec![KIND]);
        let bad = crate::config::Config::from_toml("[smt_energy]\nsigma = 2.0\n");
        assert!(bad.unwrap_err().to_string().contains("smt_energy.sigma"));
    }

    #[test]
    fn released_processes_are_left_alone() {
        let t = machine("dell-c6100").unwrap();
        let pol = SmtEnergy::new(cfg_for("wc"));
        let mut st = PolicyState::default();
        let p = proc_obs(100, "wc", 2.0, 8);
        st.released.insert(p.key());
        assert!(pol.plan(&t, &obs(vec![p]), &mut st).actions.is_empty());
    }
}
