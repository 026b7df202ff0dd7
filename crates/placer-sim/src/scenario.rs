//! Scenarios: TOML files naming a machine, workloads, the policies to compare, the seeds
//! to average over and the paper's figures to print beside the simulated ones; and the
//! runner that plays each (variant, policy, seed).
//!
//! A policy is a baseline (`linux-default`, `eas`) or a baseline plus placer policies
//! (`net-affinity` = `linux-default+net-affinity`, `eas+energy-qos`). Placer policies run
//! through placer-core's `Engine` (the daemon's sample -> observe -> plan -> apply cycle)
//! every `policy_interval_ms` of simulated time, built by a policy factory (the real
//! policies from placer-core by default; tests may inject their own).
//!
//! The file format is in docs/simulator.md; built-in scenarios live in `scenarios/` at the
//! repository root and are embedded in the binary ([`BUILTIN`]).

use crate::baselines::Baseline;
use crate::host::{Proc, SimHost};
use crate::params::Params;
use crate::workload::{Kind, ProcResult, WorkloadSpec};
use placer_core::config::Config;
use placer_core::engine::Engine;
use placer_core::machines::MachineSpec;
use placer_core::plan::Outcome;
use placer_core::policy::AnyPolicy;
use placer_core::policy_kind::PolicyKind;
use placer_core::verdict::VerdictKind;
use placer_core::CpuSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Built-in scenarios: (name, TOML text). Other areas add their seed scenarios here.
pub const BUILTIN: &[(&str, &str)] = &[
    ("seed-002", include_str!("../../../scenarios/seed-002.toml")),
    ("seed-001", include_str!("../../../scenarios/seed-001.toml")),
    ("seed-000", include_str!("../../../scenarios/seed-000.toml")),
    (
        "seed-000-mix50",
        include_str!("../../../scenarios/seed-000-mix50.toml"),
    ),
    (
        "seed-000-mix75",
        include_str!("../../../scenarios/seed-000-mix75.toml"),
    ),
    (
        "seed-002-small",
        include_str!("../../../scenarios/seed-002-small.toml"),
    ),
    ("seed-003", include_str!("../../../scenarios/seed-003.toml")),
    (
        "seed-003-6",
        include_str!("../../../scenarios/seed-003-6.toml"),
    ),
    (
        "seed-003-g1g3",
        include_str!("../../../scenarios/seed-003-g1g3.toml"),
    ),
    (
        "seed-003-18",
        include_str!("../../../scenarios/seed-003-18.toml"),
    ),
    (
        "seed-003-24",
        include_str!("../../../scenarios/seed-003-24.toml"),
    ),
    (
        "seed-003-28",
        include_str!("../../../scenarios/seed-003-28.toml"),
    ),
    ("seed-004", include_str!("../../../scenarios/seed-004.toml")),
    (
        "device-16c-loopback",
        include_str!("../../../scenarios/device-16c-loopback.toml"),
    ),
];

fn default_seeds() -> Vec<u64> {
    vec![1, 2, 3]
}
fn default_interval() -> u64 {
    1000
}
fn default_policies() -> Vec<PolicySpec> {
    vec![PolicySpec::new(Baseline::LinuxDefault, Vec::new())]
}

/// One policy a scenario compares, parsed once at load: a baseline (`linux-default`,
/// `eas`) and the placer policies run on it (`eas+energy-qos`; a spec that does not start
/// with a baseline, `net-affinity`, runs on `linux-default`). Read and written as that text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PolicySpec {
    /// The baseline as written; None when the spec starts with a placer policy.
    baseline: Option<Baseline>,
    pub placer: Vec<PolicyKind>,
}

impl PolicySpec {
    /// `placer` on `baseline`, written with it (`eas+energy-qos`, `linux-default`).
    pub fn new(baseline: Baseline, placer: Vec<PolicyKind>) -> PolicySpec {
        PolicySpec {
            baseline: Some(baseline),
            placer,
        }
    }

    /// `placer` on linux-default, written without it (`contention`).
    pub fn placer_only(placer: Vec<PolicyKind>) -> PolicySpec {
        PolicySpec {
            baseline: None,
            placer,
        }
    }

    /// The kernel scheduler the run models.
    pub fn baseline(&self) -> Baseline {
        self.baseline.unwrap_or(Baseline::LinuxDefault)
    }
}

impl std::str::FromStr for PolicySpec {
    type Err = String;
    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let mut parts = spec
            .split('+')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .peekable();
        let first = parts
            .peek()
            .ok_or("an empty policy (baselines: linux-default, eas)")?;
        let baseline = Baseline::parse(first);
        if baseline.is_some() {
            parts.next();
        }
        let placer = parts
            .map(|q| {
                q.parse().map_err(|_| {
                    format!(
                        "unknown policy {q:?} in {spec:?}; baselines: linux-default, eas; placer \
                         policies: {}",
                        placer_core::config::POLICY_NAMES.join(", ")
                    )
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(PolicySpec { baseline, placer })
    }
}

impl TryFrom<String> for PolicySpec {
    type Error = String;
    fn try_from(spec: String) -> Result<Self, Self::Error> {
        spec.parse()
    }
}

impl std::fmt::Display for PolicySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = self.baseline.iter().map(Baseline::name);
        let names: Vec<&str> = names.chain(self.placer.iter().map(|k| k.name())).collect();
        f.write_str(&names.join("+"))
    }
}

impl From<PolicySpec> for String {
    fn from(p: PolicySpec) -> String {
        p.to_string()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// A built-in machine or a synthetic spec (`pkg:2 core:4 pu:2`).
    pub machine: MachineSpec,
    /// Simulated seconds per run (a run also stops when every finite job is done, when
    /// `stop_when_done`).
    pub duration_s: f64,
    /// Seconds before the measurement window opens.
    #[serde(default)]
    pub warmup_s: f64,
    #[serde(default)]
    pub stop_when_done: bool,
    #[serde(default = "default_seeds")]
    pub seeds: Vec<u64>,
    #[serde(default = "default_policies")]
    pub policies: Vec<PolicySpec>,
    #[serde(default = "default_interval")]
    pub policy_interval_ms: u64,
    /// The scenario's objective for the oracle and the headline column:
    /// `throughput` (network Gbit/s, else work rate), `makespan`, `energy`,
    /// `perf_per_watt`, `cpu_efficiency` (throughput per busy CPU), `qos_per_watt` (QoS
    /// satisfaction per watt; workloads declare targets).
    #[serde(default)]
    pub objective: Objective,
    /// A placer config fragment (TOML) for the placer policies.
    #[serde(default)]
    pub config: Option<toml::Value>,
    /// Model parameter overrides (see `placer sim --params MACHINE`).
    #[serde(default)]
    pub params: Option<toml::Value>,
    /// Machine setups compared separately (IRQ affinity, frequency, parameters); none =
    /// one unnamed setup.
    #[serde(default)]
    pub variants: Vec<Variant>,
    pub workloads: Vec<WorkloadSpec>,
    /// The paper's figures, printed beside the simulated ones.
    #[serde(default)]
    pub paper: Vec<PaperFigure>,
    #[serde(default)]
    pub oracle: Option<OracleSpec>,
    /// Re-run the paper comparisons with one model parameter at other values (the
    /// report's sensitivity table).
    #[serde(default)]
    pub sensitivity: Option<Sensitivity>,
    /// Model parameters printed with their values and sources under the results (the
    /// figures a metric depends on: idle power for QoS met per watt).
    #[serde(default)]
    pub show_params: Vec<String>,
    /// A measured power table (`placer power calibrate --out FILE`, given to `placer sim
    /// --power-table FILE`): the energy-qos policy decides with it, as the daemon does with
    /// `energy_qos.power_table`, and the simulated watts are the table's
    /// (`power::table_power_w`).
    #[serde(skip)]
    pub power_table_model: Option<placer_core::power_table::StatePowerTable>,
}

/// `[sensitivity]`: the paper comparisons re-run for each value of one parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sensitivity {
    /// Dotted parameter key (`power.cluster_leak_a`).
    pub param: String,
    pub values: Vec<f64>,
    /// Metrics compared for each (policy, versus) pair of the paper rows.
    pub metrics: Vec<String>,
    /// What the values mean (printed with the table).
    #[serde(default)]
    pub note: String,
}

/// One value of a sensitivity parameter: (metric, policy, versus, mean simulated %).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SensitivityRow {
    pub value: f64,
    pub comparisons: Vec<(String, String, String, Option<f64>)>,
}

/// `over` laid over `base`, table by table (keys absent from `base` are added).
/// `value` nested at a dotted path: `a.b` = `{ a = { b = value } }`.
pub(crate) fn dotted(path: &str, value: toml::Value) -> toml::Value {
    let mut tree = value;
    for key in path.rsplit('.') {
        let mut t = toml::map::Map::new();
        t.insert(key.to_string(), tree);
        tree = toml::Value::Table(t);
    }
    tree
}

/// `over` laid over an optional table (`[params]`, `[config]`), which it creates if absent.
pub(crate) fn overlay_into(slot: &mut Option<toml::Value>, over: &toml::Value) {
    let mut merged = slot
        .take()
        .unwrap_or(toml::Value::Table(Default::default()));
    overlay(&mut merged, over);
    *slot = Some(merged);
}

pub(crate) fn overlay(base: &mut toml::Value, over: &toml::Value) {
    match (base, over) {
        (toml::Value::Table(b), toml::Value::Table(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(slot) => overlay(slot, v),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (slot, v) => *slot = v.clone(),
    }
}

/// Runs the scenario again for each value of its `[sensitivity]` parameter.
pub fn sensitivity(sc: &Scenario, factory: PolicyFactory) -> Result<Vec<SensitivityRow>, String> {
    let Some(spec) = &sc.sensitivity else {
        return Ok(Vec::new());
    };
    let mut pairs: Vec<&PaperFigure> = Vec::new();
    for f in &sc.paper {
        if !pairs
            .iter()
            .any(|p| (&p.policy, &p.versus) == (&f.policy, &f.versus))
        {
            pairs.push(f);
        }
    }
    let mut out = Vec::new();
    for &value in &spec.values {
        let mut s2 = sc.clone();
        s2.sensitivity = None;
        overlay_into(
            &mut s2.params,
            &dotted(&spec.param, toml::Value::Float(value)),
        );
        // An unknown parameter is an error here, not a silently ignored row.
        s2.topology_and_params(None).map_err(|e| e.to_string())?;
        let rows = run(&s2, factory);
        let mut comparisons = Vec::new();
        for f in &pairs {
            for m in &spec.metrics {
                let vals = f
                    .policies()
                    .map_or_else(Vec::new, |(p, v)| paired_pct(&rows, None, &p, &v, m));
                let mean = (!vals.is_empty()).then(|| vals.iter().sum::<f64>() / vals.len() as f64);
                comparisons.push((m.clone(), f.policy.clone(), f.versus.clone(), mean));
            }
        }
        out.push(SensitivityRow { value, comparisons });
    }
    Ok(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Objective {
    #[default]
    Throughput,
    Makespan,
    Energy,
    PerfPerWatt,
    /// Network Gbit/s (else work rate) per busy CPU.
    CpuEfficiency,
    /// QoS satisfaction (mean of min(achieved / target, 1)) per watt.
    QosPerWatt,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// NIC name -> CPU list of every queue's IRQ (e.g. `eth0 = "0"`).
    #[serde(default)]
    pub irq: BTreeMap<String, String>,
    /// NIC name -> RPS CPU list of every queue.
    #[serde(default)]
    pub rps: BTreeMap<String, String>,
    /// Parameter overrides on top of the scenario's.
    #[serde(default)]
    pub params: Option<toml::Value>,
    /// Workloads replacing the scenario's in this variant (seed 004 compares buffer
    /// habits and memory nodes of one receiver).
    #[serde(default)]
    pub workloads: Option<Vec<WorkloadSpec>>,
}

/// One figure from the paper: `metric` of `policy` against `versus`, in percent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaperFigure {
    #[serde(default)]
    pub variant: Option<String>,
    /// `throughput`, `cpu_saving`, `cpu_efficiency`, `energy_saving`, `perf_per_watt`,
    /// `completion_speedup`, `work_rate`, `deadline_miss_reduction`, `qos_satisfaction`,
    /// `qos_per_watt`, `qos_per_dyn_watt`.
    pub metric: String,
    /// The paper's labels: policies of the scenario, or what the paper compares instead
    /// (seed 001's allocation orders, which `placer plan --simulate` prints).
    pub policy: String,
    pub versus: String,
    pub low_pct: f64,
    pub high_pct: f64,
    #[serde(default)]
    pub source: String,
}

impl PaperFigure {
    /// The two policies compared, when both labels are policies.
    pub fn policies(&self) -> Option<(PolicySpec, PolicySpec)> {
        Some((self.policy.parse().ok()?, self.versus.parse().ok()?))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OracleSpec {
    /// Simulated seconds per evaluated placement (after `warmup_s` of it).
    #[serde(default = "oracle_duration")]
    pub duration_s: f64,
    #[serde(default = "oracle_warmup")]
    pub warmup_s: f64,
    /// Give up when there are more placements than this.
    #[serde(default = "oracle_budget")]
    pub max_placements: u64,
}

fn oracle_duration() -> f64 {
    0.5
}
fn oracle_warmup() -> f64 {
    0.1
}
fn oracle_budget() -> u64 {
    20_000
}

/// What one run measured, over its measurement window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Metrics {
    pub window_s: f64,
    /// Network bytes received + sent by the workloads, Gbit/s.
    pub net_gbps: f64,
    /// Work done per second (seconds of full-speed work per second).
    pub work_rate: f64,
    /// Completion time of finished jobs (cpu kind), mean and max, seconds.
    pub completion_mean_s: Option<f64>,
    pub makespan_s: Option<f64>,
    pub jobs_done: u64,
    /// Busy CPU time over all CPUs: percent of the machine, and in CPUs.
    pub cpu_util_pct: f64,
    pub cpu_busy_cpus: f64,
    pub energy_j: f64,
    pub power_w: f64,
    /// Primary performance (net Gbit/s if any network workload, else work rate) per watt.
    pub perf_per_watt: f64,
    /// Mean over the workloads with a QoS target of min(achieved / target, 1); none when no
    /// workload declares a target.
    #[serde(default)]
    pub qos_satisfaction: Option<f64>,
    /// `qos_satisfaction` per watt of mean node power.
    #[serde(default)]
    pub qos_per_watt: Option<f64>,
    /// `qos_satisfaction` per watt above the node's idle power (`power.node_idle_w`).
    #[serde(default)]
    pub qos_per_dyn_watt: Option<f64>,
    pub periodic_jobs: u64,
    pub deadline_misses: u64,
    /// Placer actions applied (done).
    pub actions: u64,
    /// Moves the engine undid on their verdict (one per process; a plan judged together
    /// counts each of its processes).
    #[serde(default)]
    pub undone: u64,
    /// Moves kept on their verdict (better beyond noise and `min_effect`; counted alike).
    #[serde(default)]
    pub kept: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub seed: u64,
    pub metrics: Metrics,
    pub procs: Vec<ProcResult>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyResult {
    pub variant: Option<String>,
    pub policy: PolicySpec,
    pub mean: Metrics,
    /// Smallest and largest value across seeds of the objective's headline metric.
    pub spread: (f64, f64),
    pub runs: Vec<RunResult>,
    /// Why the policy could not run, if so.
    #[serde(default)]
    pub error: Option<String>,
}

/// Builds the placer policies a config names (`config.policies`), in order.
pub type PolicyFactory<'a> = &'a dyn Fn(&Config) -> Result<Vec<Box<dyn AnyPolicy>>, String>;

/// The real policies of placer-core, as the daemon builds them.
pub fn default_factory(cfg: &Config) -> Result<Vec<Box<dyn AnyPolicy>>, String> {
    Ok(placer_core::engine::policies_from_config(cfg, 0))
}

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("scenario {0:?}: {1}")]
    Parse(String, String),
    #[error("scenario {0:?}: {1}")]
    Invalid(String, String),
    #[error("reading {0}: {1}")]
    Io(String, String),
}

impl Scenario {
    pub fn from_toml(name: &str, text: &str) -> Result<Scenario, ScenarioError> {
        let s: Scenario =
            toml::from_str(text).map_err(|e| ScenarioError::Parse(name.into(), e.to_string()))?;
        s.validate()?;
        Ok(s)
    }

    /// A built-in scenario by name, or a file path.
    pub fn load(name_or_path: &str) -> Result<Scenario, ScenarioError> {
        Scenario::load_with(name_or_path, |p| {
            std::fs::read_to_string(p).map_err(|e| e.to_string())
        })
    }

    /// A built-in scenario by name, or a file path read by `read` (the CLI's reader refuses
    /// FIFOs, devices and files too big at once; this crate does no system calls).
    pub fn load_with(
        name_or_path: &str,
        read: impl FnOnce(&std::path::Path) -> Result<String, String>,
    ) -> Result<Scenario, ScenarioError> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Scenario::from_toml(name_or_path, text);
        }
        let text = read(std::path::Path::new(name_or_path)).map_err(|e| {
            ScenarioError::Io(
                name_or_path.into(),
                format!(
                    "{e} (built-in scenarios: {})",
                    BUILTIN
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })?;
        Scenario::from_toml(name_or_path, &text)
    }

    pub fn validate(&self) -> Result<(), ScenarioError> {
        let bad = |m: String| Err(ScenarioError::Invalid(self.name.clone(), m));
        if self.duration_s.is_nan()
            || self.duration_s <= 0.0
            || self.warmup_s < 0.0
            || self.warmup_s >= self.duration_s
        {
            return bad("need duration_s > warmup_s >= 0".into());
        }
        if self.seeds.is_empty() {
            return bad("seeds must not be empty".into());
        }
        if self.workloads.is_empty() {
            return bad("no workloads".into());
        }
        for w in &self.workloads {
            w.validate()
                .map_err(|e| ScenarioError::Invalid(self.name.clone(), e))?;
        }
        if !self.show_params.is_empty() || self.sensitivity.is_some() {
            let known: Vec<String> = Params::for_machine(self.machine.builtin(), None)
                .describe()
                .into_iter()
                .map(|(k, _, _)| k)
                .collect();
            let named = self
                .show_params
                .iter()
                .chain(self.sensitivity.as_ref().map(|s| &s.param));
            for k in named {
                if !known.contains(k) {
                    return bad(format!(
                        "unknown parameter {k:?} (placer sim --params {} lists them)",
                        self.machine
                    ));
                }
            }
        }
        self.placer_config()?;
        let mut setups = vec![self.topology_and_params(None)?];
        for v in &self.variants {
            setups.push(self.topology_and_params(Some(v))?);
            for w in v.workloads.iter().flatten() {
                w.validate()
                    .map_err(|e| ScenarioError::Invalid(self.name.clone(), e))?;
            }
        }
        for (_, params) in &setups {
            for w in &self.workloads {
                params.archetype(&w.class_name()).map_err(|e| {
                    ScenarioError::Invalid(self.name.clone(), format!("workload {:?}: {e}", w.name))
                })?;
            }
        }
        Ok(())
    }

    /// The placer config for the policies: defaults with the `[config]` fragment.
    pub fn placer_config(&self) -> Result<Config, ScenarioError> {
        match &self.config {
            None => Ok(Config::default()),
            Some(v) => {
                let text = toml::to_string(v)
                    .map_err(|e| ScenarioError::Invalid(self.name.clone(), e.to_string()))?;
                Config::from_toml(&text).map_err(|e| {
                    ScenarioError::Invalid(self.name.clone(), format!("[config]: {e}"))
                })
            }
        }
        .map(|mut c| {
            if let Some(t) = &self.power_table_model {
                c.energy_qos.power_table_model = Some(t.clone());
            }
            c
        })
    }

    /// Sets each named archetype's pressure and sensitivity (a fit of `placer bench
    /// contention --app`'s matrix), in place of the scenario's estimates. A name that is
    /// not one of the scenario's archetypes is an error.
    pub fn set_archetype_harm(
        &mut self,
        fitted: &[(String, f64, f64)],
    ) -> Result<(), ScenarioError> {
        let (_, params) = self.topology_and_params(None)?;
        let mut over = toml::map::Map::new();
        for (name, pressure, sensitivity) in fitted {
            if params.archetype(name).is_err() {
                return Err(ScenarioError::Invalid(
                    self.name.clone(),
                    format!("{name:?} is not a known archetype (placer sim --params MACHINE lists them)"),
                ));
            }
            let mut t = toml::map::Map::new();
            t.insert("pressure".into(), toml::Value::Float(*pressure));
            t.insert("sensitivity".into(), toml::Value::Float(*sensitivity));
            over.insert(name.clone(), toml::Value::Table(t));
        }
        overlay_into(
            &mut self.params,
            &dotted("archetypes", toml::Value::Table(over)),
        );
        self.validate()
    }

    /// Sets the LLC size the archetypes' pressures are stated for
    /// (`contention.llc_reference_bytes`): the LLC a measured matrix was run on, whose
    /// fitted pressures hold for that size, in place of the 8 MiB estimate.
    pub fn set_llc_reference_bytes(&mut self, bytes: u64) -> Result<(), ScenarioError> {
        overlay_into(
            &mut self.params,
            &dotted(
                "contention.llc_reference_bytes",
                toml::Value::Float(bytes as f64),
            ),
        );
        self.validate()
    }

    /// The machine's topology and parameters for a variant (IRQ/RPS affinities and
    /// parameter overrides applied).
    pub fn topology_and_params(
        &self,
        variant: Option<&Variant>,
    ) -> Result<(placer_core::Topology, Params), ScenarioError> {
        let bad = |m: String| ScenarioError::Invalid(self.name.clone(), m);
        let mut topo = self.machine.topology();
        let max_khz = topo.cpus.iter().filter_map(|c| c.max_khz).max();
        add_loopback_if_used(&mut topo, &self.workloads, &self.variants);
        let mut params = Params::for_machine(self.machine.builtin(), max_khz);
        if let Some(o) = &self.params {
            params = params.with_overrides(o).map_err(bad)?;
        }
        if let Some(v) = variant {
            if let Some(o) = &v.params {
                params = params.with_overrides(o).map_err(bad)?;
            }
            for (table, rps) in [(&v.irq, false), (&v.rps, true)] {
                for (nic, list) in table {
                    let cpus = CpuSet::parse_list(list).map_err(|e| bad(e.to_string()))?;
                    let n = topo
                        .nics
                        .iter_mut()
                        .find(|n| &n.name == nic)
                        .ok_or_else(|| bad(format!("variant {}: no NIC {nic}", v.name)))?;
                    for q in &mut n.queues {
                        if rps {
                            q.rps_cpus = cpus.clone();
                        } else {
                            q.irq_cpus = cpus.clone();
                        }
                    }
                    n.rx_cpus = n.queues.iter().fold(CpuSet::new(), |a, q| {
                        a.union(&q.irq_cpus).union(&q.rps_cpus)
                    });
                }
            }
        }
        if let Some(t) = &self.power_table_model {
            // Every cluster of the machine needs its rows: a table measured on another
            // machine would leave some of its watts out.
            for c in placer_core::power_table::clusters_of(&topo) {
                if !t.domains.iter().any(|d| d.domain == c.domain) {
                    return Err(bad(format!(
                        "the power table ({}) has no rows for cluster {} (CPUs {}) of this machine",
                        t.source, c.domain, c.cpus
                    )));
                }
            }
            params.power_table = Some(t.clone());
        }
        Ok((topo, params))
    }

    /// Variants to run (one unnamed when the file has none).
    pub fn variant_list(&self) -> Vec<Option<&Variant>> {
        if self.variants.is_empty() {
            vec![None]
        } else {
            self.variants.iter().map(Some).collect()
        }
    }

    /// Builds the host for one run.
    pub fn host(
        &self,
        variant: Option<&Variant>,
        baseline: Baseline,
        seed: u64,
    ) -> Result<SimHost, ScenarioError> {
        let (topo, params) = self.topology_and_params(variant)?;
        SimHost::new(
            &self.machine.to_string(),
            topo,
            params,
            variant
                .and_then(|v| v.workloads.clone())
                .unwrap_or_else(|| self.workloads.clone()),
            baseline,
            seed,
        )
        .map_err(|e| ScenarioError::Invalid(self.name.clone(), e.to_string()))
    }
}

/// Gives the machine a loopback device, `lo` (one queue, no IRQ, no line rate, 127.0.0.1),
/// when a workload of the scenario or of a variant uses it and the model has none.
fn add_loopback_if_used(
    topo: &mut placer_core::Topology,
    workloads: &[WorkloadSpec],
    variants: &[Variant],
) {
    let uses_lo = workloads
        .iter()
        .chain(variants.iter().flat_map(|v| v.workloads.iter().flatten()))
        .any(|w| w.nic.as_deref() == Some("lo"));
    if !uses_lo || topo.nic("lo").is_some() {
        return;
    }
    topo.nics.push(placer_core::topology::Nic {
        name: "lo".into(),
        node: None,
        rx_cpus: CpuSet::new(),
        queues: vec![placer_core::topology::NicQueue {
            name: "lo".into(),
            irq: None,
            irq_cpus: CpuSet::new(),
            rps_cpus: CpuSet::new(),
        }],
        speed_mbps: None,
        addrs: vec![std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)],
    });
}

/// Runs one (variant, policy, seed).
pub fn run_one(
    sc: &Scenario,
    variant: Option<&Variant>,
    policy: &PolicySpec,
    seed: u64,
    factory: PolicyFactory,
) -> Result<RunResult, String> {
    let mut cfg = sc.placer_config().map_err(|e| e.to_string())?;
    cfg.policies.clone_from(&policy.placer);
    let mut host = sc
        .host(variant, policy.baseline(), seed)
        .map_err(|e| e.to_string())?;
    // The daemon's loop, on the simulated machine (no simulated pid is placer's own).
    let mut engine = if cfg.policies.is_empty() {
        None
    } else {
        Some(Engine::new(factory(&cfg)?, cfg, 0))
    };
    let mut actions = 0u64;
    let mut undone = 0u64;
    let mut kept = 0u64;
    let mut cycle = |host: &mut SimHost, engine: &mut Option<Engine>| {
        if let Some(e) = engine.as_mut() {
            let rep = e.step(host, false);
            for n in &rep.plan.notes {
                tracing::debug!(time_s = host.time_s(), policy = %n.policy, "{}", n.text);
            }
            for g in placer_core::verdict::same_judgement(&rep.verdicts) {
                let v = g[0];
                tracing::debug!(time_s = host.time_s(), policy = %v.policy,
                    "verdict on {}: {}", placer_core::verdict::who(&g), v.judgement.why);
            }
            undone += rep
                .verdicts
                .iter()
                .filter(|v| v.judgement.kind == VerdictKind::Undone)
                .count() as u64;
            kept += rep
                .verdicts
                .iter()
                .filter(|v| v.judgement.kind == VerdictKind::Kept)
                .count() as u64;
            actions += rep
                .reports
                .iter()
                .filter(|r| matches!(r.outcome, Outcome::Done))
                .count() as u64;
        }
    };
    let end_ns = (sc.duration_s * 1e9) as u64;
    let warm_ns = (sc.warmup_s * 1e9) as u64;
    let mut window_open = warm_ns == 0;
    if window_open {
        host.open_window();
    }
    let step = if engine.is_some() {
        sc.policy_interval_ms.max(1) * 1_000_000
    } else {
        end_ns.max(1)
    };
    cycle(&mut host, &mut engine);
    while host.time_ns() < end_ns {
        let mut next = (host.time_ns() / step + 1) * step;
        if !window_open && warm_ns < next {
            next = warm_ns;
        }
        host.run_until(next.min(end_ns), sc.stop_when_done);
        if !window_open && host.time_ns() >= warm_ns {
            host.open_window();
            window_open = true;
        }
        if sc.stop_when_done && host.all_done() {
            break;
        }
        if host.time_ns() % step == 0 {
            cycle(&mut host, &mut engine);
        }
    }
    Ok(RunResult {
        seed,
        metrics: Metrics {
            undone,
            kept,
            ..metrics_of(&host, actions)
        },
        procs: host
            .procs()
            .iter()
            .map(|p| ProcResult {
                qos_satisfaction: qos_satisfaction_of(&host, p),
                ..p.result.clone()
            })
            .collect(),
    })
}

/// min(achieved / target, 1) of one process over the measurement window, if its workload
/// declares a QoS target: bytes/s received (rx) or sent (tx), work rate (cpu).
pub fn qos_satisfaction_of(host: &SimHost, p: &Proc) -> Option<f64> {
    let target = host.specs().get(p.spec)?.qos_target()?;
    let window_s = host.window_s();
    let achieved = match p.kind {
        Kind::Rx => p.result.rx_bytes / window_s,
        Kind::Tx => p.result.tx_bytes / window_s,
        Kind::Cpu => p.result.work_done_s / window_s,
        Kind::Periodic => return None,
    };
    Some((achieved / target).min(1.0))
}

/// Metrics of a finished run.
pub fn metrics_of(host: &SimHost, actions: u64) -> Metrics {
    let window_s = host.window_s();
    let sats: Vec<f64> = host
        .procs()
        .iter()
        .filter_map(|p| qos_satisfaction_of(host, p))
        .collect();
    let (mut rx, mut tx, mut work) = (0.0, 0.0, 0.0);
    let (mut completions, mut jobs, mut misses) = (Vec::new(), 0, 0);
    let mut has_net = false;
    for p in host.procs() {
        rx += p.result.rx_bytes;
        // A loopback sender's bytes are its receiver's: counted once.
        if p.flow.is_none_or(|f| host.flows()[f].peer.is_none()) {
            tx += p.result.tx_bytes;
        }
        work += p.result.work_done_s;
        match p.kind {
            Kind::Cpu => completions.extend(p.result.completions_s.iter().copied()),
            Kind::Periodic => {
                jobs += p.result.jobs;
                misses += p.result.deadline_misses;
            }
            Kind::Rx | Kind::Tx => has_net = true,
        }
    }
    let n = host.machine().cpus.len() as f64;
    let busy_cpus = host.window().busy_ns / 1e9 / window_s;
    let power_w = host.window().energy_j / window_s;
    let net_gbps = (rx + tx) * 8.0 / window_s / 1e9;
    let work_rate = work / window_s;
    let perf = if has_net { net_gbps } else { work_rate };
    let qos_satisfaction = (!sats.is_empty()).then(|| sats.iter().sum::<f64>() / sats.len() as f64);
    let dyn_w = power_w - host.params().power.node_idle_w;
    Metrics {
        window_s,
        net_gbps,
        work_rate,
        completion_mean_s: (!completions.is_empty())
            .then(|| completions.iter().sum::<f64>() / completions.len() as f64),
        makespan_s: completions
            .iter()
            .copied()
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x)))),
        jobs_done: completions.len() as u64,
        cpu_util_pct: busy_cpus / n * 100.0,
        cpu_busy_cpus: busy_cpus,
        energy_j: host.window().energy_j,
        power_w,
        perf_per_watt: if power_w > 0.0 { perf / power_w } else { 0.0 },
        qos_satisfaction,
        qos_per_watt: qos_satisfaction.map(|q| if power_w > 0.0 { q / power_w } else { 0.0 }),
        qos_per_dyn_watt: qos_satisfaction.map(|q| if dyn_w > 0.0 { q / dyn_w } else { 0.0 }),
        periodic_jobs: jobs,
        deadline_misses: misses,
        actions,
        undone: 0,
        kept: 0,
    }
}

/// The headline value of an objective (bigger is better for all but makespan/energy).
pub fn headline(obj: Objective, m: &Metrics) -> f64 {
    match obj {
        Objective::Throughput => {
            if m.net_gbps > 0.0 {
                m.net_gbps
            } else {
                m.work_rate
            }
        }
        Objective::Makespan => m.makespan_s.unwrap_or(f64::INFINITY),
        Objective::Energy => m.energy_j,
        Objective::PerfPerWatt => m.perf_per_watt,
        Objective::QosPerWatt => m.qos_per_watt.unwrap_or(0.0),
        Objective::CpuEfficiency => {
            let perf = if m.net_gbps > 0.0 {
                m.net_gbps
            } else {
                m.work_rate
            };
            perf / m.cpu_busy_cpus.max(1e-9)
        }
    }
}

/// Whether a larger headline value is better.
pub fn bigger_is_better(obj: Objective) -> bool {
    matches!(
        obj,
        Objective::Throughput
            | Objective::PerfPerWatt
            | Objective::CpuEfficiency
            | Objective::QosPerWatt
    )
}

fn mean_metrics(runs: &[RunResult]) -> Metrics {
    let n = runs.len().max(1) as f64;
    let avg = |f: &dyn Fn(&Metrics) -> f64| runs.iter().map(|r| f(&r.metrics)).sum::<f64>() / n;
    let avg_opt = |f: &dyn Fn(&Metrics) -> Option<f64>| {
        let v: Vec<f64> = runs.iter().filter_map(|r| f(&r.metrics)).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    Metrics {
        window_s: avg(&|m| m.window_s),
        net_gbps: avg(&|m| m.net_gbps),
        work_rate: avg(&|m| m.work_rate),
        completion_mean_s: avg_opt(&|m| m.completion_mean_s),
        makespan_s: avg_opt(&|m| m.makespan_s),
        jobs_done: (avg(&|m| m.jobs_done as f64)).round() as u64,
        cpu_util_pct: avg(&|m| m.cpu_util_pct),
        cpu_busy_cpus: avg(&|m| m.cpu_busy_cpus),
        energy_j: avg(&|m| m.energy_j),
        power_w: avg(&|m| m.power_w),
        perf_per_watt: avg(&|m| m.perf_per_watt),
        qos_satisfaction: avg_opt(&|m| m.qos_satisfaction),
        qos_per_watt: avg_opt(&|m| m.qos_per_watt),
        qos_per_dyn_watt: avg_opt(&|m| m.qos_per_dyn_watt),
        periodic_jobs: (avg(&|m| m.periodic_jobs as f64)).round() as u64,
        deadline_misses: (avg(&|m| m.deadline_misses as f64)).round() as u64,
        actions: (avg(&|m| m.actions as f64)).round() as u64,
        undone: (avg(&|m| m.undone as f64)).round() as u64,
        kept: (avg(&|m| m.kept as f64)).round() as u64,
    }
}

/// Runs every (variant, policy, seed) of a scenario.
pub fn run(sc: &Scenario, factory: PolicyFactory) -> Vec<PolicyResult> {
    let mut out = Vec::new();
    for v in sc.variant_list() {
        for pol in &sc.policies {
            let mut runs = Vec::new();
            let mut error = None;
            for &seed in &sc.seeds {
                match run_one(sc, v, pol, seed, factory) {
                    Ok(r) => runs.push(r),
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                }
            }
            let heads: Vec<f64> = runs
                .iter()
                .map(|r| headline(sc.objective, &r.metrics))
                .collect();
            let spread = (
                heads.iter().copied().fold(f64::INFINITY, f64::min),
                heads.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            );
            out.push(PolicyResult {
                variant: v.map(|v| v.name.clone()),
                policy: pol.clone(),
                mean: mean_metrics(&runs),
                spread: if runs.is_empty() { (0.0, 0.0) } else { spread },
                runs,
                error,
            });
        }
    }
    out
}

/// `metric` of `policy` against `versus` in `variant`, in percent, one value per seed both
/// ran ([`compare_runs`] of the runs with the same seed); empty when either is missing.
pub fn paired_pct(
    rows: &[PolicyResult],
    variant: Option<&str>,
    policy: &PolicySpec,
    versus: &PolicySpec,
    metric: &str,
) -> Vec<f64> {
    let find = |p: &PolicySpec| {
        rows.iter()
            .find(|r| &r.policy == p && r.variant.as_deref() == variant)
    };
    match (find(policy), find(versus)) {
        (Some(p), Some(b)) => p
            .runs
            .iter()
            .filter_map(|pr| {
                let br = b.runs.iter().find(|br| br.seed == pr.seed)?;
                compare_runs(metric, pr, br)
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The simulated value, in percent, of a paper metric of run `p` against run `b` (same
/// seed): the per-app metrics need the runs, the others their metrics ([`compare`]).
/// - `mean_app_speedup`: the mean over apps of `T_b / T_p - 1` (first completion, apps
///   paired by position, the same scenario listing them in the same order);
/// - `completion_sum_speedup`: `sum T_b / sum T_p - 1` over the apps both finished.
pub fn compare_runs(metric: &str, p: &RunResult, b: &RunResult) -> Option<f64> {
    let pairs = || {
        p.procs
            .iter()
            .zip(&b.procs)
            .filter(|(x, y)| x.name == y.name)
            .filter_map(|(x, y)| Some((*x.completions_s.first()?, *y.completions_s.first()?)))
            .filter(|(tp, _)| *tp > 0.0)
    };
    match metric {
        "mean_app_speedup" => {
            let v: Vec<f64> = pairs().map(|(tp, tb)| tb / tp - 1.0).collect();
            (!v.is_empty()).then(|| 100.0 * v.iter().sum::<f64>() / v.len() as f64)
        }
        "completion_sum_speedup" => {
            let (sp, sb) = pairs().fold((0.0, 0.0), |(a, b), (tp, tb)| (a + tp, b + tb));
            (sp > 0.0).then(|| 100.0 * (sb / sp - 1.0))
        }
        _ => compare(metric, &p.metrics, &b.metrics),
    }
}

/// The simulated value, in percent, of a paper metric of `p` against `b`.
pub fn compare(metric: &str, p: &Metrics, b: &Metrics) -> Option<f64> {
    let gain = |x: f64, y: f64| (y > 0.0).then(|| (x / y - 1.0) * 100.0);
    let saving = |x: f64, y: f64| (y > 0.0).then(|| (1.0 - x / y) * 100.0);
    let perf = |m: &Metrics| {
        if m.net_gbps > 0.0 {
            m.net_gbps
        } else {
            m.work_rate
        }
    };
    match metric {
        "throughput" => gain(perf(p), perf(b)),
        "work_rate" => gain(p.work_rate, b.work_rate),
        "cpu_saving" => saving(p.cpu_busy_cpus, b.cpu_busy_cpus),
        "cpu_efficiency" => {
            let e = |m: &Metrics| perf(m) / m.cpu_busy_cpus.max(1e-9);
            gain(e(p), e(b))
        }
        "energy_saving" => saving(p.energy_j, b.energy_j),
        "perf_per_watt" => gain(p.perf_per_watt, b.perf_per_watt),
        "qos_satisfaction" => gain(p.qos_satisfaction?, b.qos_satisfaction?),
        "qos_per_watt" => gain(p.qos_per_watt?, b.qos_per_watt?),
        "qos_per_dyn_watt" => gain(p.qos_per_dyn_watt?, b.qos_per_dyn_watt?),
        "completion_speedup" => match (p.makespan_s, b.makespan_s) {
            (Some(x), Some(y)) if x > 0.0 => Some((y / x - 1.0) * 100.0),
            _ => None,
        },
        "deadline_miss_reduction" => {
            let r = |m: &Metrics| m.deadline_misses as f64 / m.periodic_jobs.max(1) as f64;
            saving(r(p), r(b))
        }
        _ => None,
    }
}
