//! Policy `energy-qos` (seed 000, EANeM: energy-aware network-stack management on
//! big.LITTLE): choose, for each frequency domain (cluster) a frequency cap and for each
//! QoS app a cluster, so that every app's target is met at the least predicted power; cap
//! each network app's bandwidth at its target, which bounds the softirq load it causes.
//!
//! # Model (pure; shared by the daemon and the simulator)
//! - A cluster is a cpufreq domain: `K` CPUs of capacity `cap_max` (the kernel's
//!   `cpu_capacity`, 1024 = the biggest CPU at its top frequency); at frequency `f` a CPU
//!   offers `cap(f) = cap_max * f / f_max` capacity units (CALIBRATION E). A machine without
//!   cpufreq is one cluster of its allowed CPUs with one "frequency".
//! - Network app with target bandwidth `B` (bytes/s), limited to `B * (1 + limit_headroom)`:
//!   its thread needs `B * app_ns_per_byte` seconds of a 1024 CPU per second; receive
//!   processing (net_rx softirq, which preempts every thread) needs
//!   `B/seg * softirq_ns_per_packet + B * softirq_ns_per_byte` on the NIC's
//!   receive-processing CPU, whose cluster the app does not choose. `seg` is the flow's
//!   average received segment size from the observation (small segments = more packets =
//!   more softirq: the paper's point that EAS mispredicts network apps). Egress-only apps
//!   pay their per-packet cost in their own thread instead.
//! - Real-time app (period, deadline, `work_us` at capacity 1024): runs above CFS threads
//!   but below softirq. When its cluster holds the receive CPU and another CPU, it is pinned
//!   away from the receive CPU; its response time is `work * 1024 / cap(f)` (divided by
//!   `1 - softirq share` when it must share the receive CPU) and must be <= deadline.
//! - Other apps (target share `s` of maximum performance) are CPU-bound: their threads take
//!   what is left of the cluster, shared fairly (water-filling, at most one CPU per thread);
//!   performance = capacity units received; maximum = `min(threads, largest cluster) * 1024`.
//! - Power (W) = `base_w` + for each cluster with any load: leakage(V(f)) +
//!   busy CPUs * per-busy-CPU power at `f` ([`StatePowerTable`]; from a calibration table when
//!   measured, else the machine's model: CALIBRATION A3 IPA table for watts, A1 voltages and
//!   `V^2 f` between table points).
//!
//! # Search and invariants
//! Exhaustive over (cluster per app): for each assignment every cluster's load is fixed, and
//! both targets and power are sums over clusters, so each domain's frequency is chosen
//! independently (the lowest power among those meeting that cluster's targets) -- exactly the
//! optimum of the full product space (tested against brute force). Invariants (a test's
//! name starts with the ones it checks):
//! - Q1: the chosen state meets every target when any state does, with the least power;
//! - Q2: otherwise it misses the fewest targets (then least power) and `Plan.notes` names
//!   each missed target with the numbers that make it miss;
//! - Q3: network apps are always limited (the limit is what bounds their softirq load);
//! - Q4: the plan is the same for the same inputs; actions are emitted when the chosen
//!   state changes (new state, new process), notes every cycle;
//! - Q5: the QoS an app achieved, told to the judge (`Policy::qos_ratio`), is measured as
//!   the model counts its target (so the judge's V10 stops probing a pin whose off arm
//!   costs it).

use crate::cpuset::CpuSet;
use crate::observation::Observation;
use crate::plan::{Action, Direction, FlowMatch, Outcome, Plan};
use crate::policy::{Policy, PolicyState};
use crate::power_table::{clusters_of, StatePowerTable};
use crate::scope::AppMatch;
use crate::topology::Topology;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod solver;
pub use solver::*;

pub const NAME: &str = KIND.name();
/// This policy's identity in plans, notes, verdicts and back-off keys.
const KIND: crate::policies::PolicyKind = crate::policies::PolicyKind::EnergyQos;

/// `[energy_qos]` in the daemon config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnergyQosConfig {
    /// The apps with QoS targets (`[[energy_qos.apps]]`). Processes matching none are not
    /// touched by this policy.
    pub apps: Vec<QosApp>,
    /// Receive softirq cost per packet, nanoseconds on a CPU of capacity 1024. [E]
    pub softirq_ns_per_packet: f64,
    /// Receive softirq cost per byte (checksum, copy into the socket), ns at capacity 1024.
    pub softirq_ns_per_byte: f64,
    /// The app thread's own cost per byte (copy to user space, file I/O), ns at 1024.
    pub app_ns_per_byte: f64,
    /// Segment size assumed before a flow has been observed, bytes (1448 = Ethernet MSS).
    pub default_segment_bytes: f64,
    /// Highest fraction of a CPU the receive processing may use, and of the CPUs the
    /// bounded loads (network apps, real-time apps) may fill, 0 < x <= 1.
    pub max_util: f64,
    /// The limiter's rate is the target times (1 + headroom): TCP rarely reaches a policed
    /// rate exactly.
    pub limit_headroom: f64,
    /// A CPU-bound app is planned for its target share times (1 + headroom) (at most its
    /// maximum): a CPU-bound app gets somewhat less than its capacity share (migrations,
    /// interrupts, cache misses), and a state that just meets the target on paper misses
    /// it by that much.
    pub perf_headroom: f64,
    /// Keep the current state while it still meets every target and its predicted power
    /// is within this fraction of the best state's: costs learned from noisy counters
    /// would otherwise flip a cluster between two neighbouring frequencies.
    pub switch_margin: f64,
    /// Pin real-time apps away from the receive-processing CPU when their cluster has
    /// another CPU.
    pub rt_avoid_rx_cpu: bool,
    /// Upper bound on evaluated states (assignments x frequencies); beyond it only the
    /// first apps are searched and the rest go to the largest cluster (noted).
    pub max_search_states: u64,
    /// Learn the three cost constants above from observation (softirq time of the receive
    /// CPUs against the interface's packet and byte counters; the apps' CPU time against
    /// their bytes); each falls back to its configured value while its confidence is low.
    pub learn_costs: bool,
    /// Intervals the learned costs are fitted over (the most recent ones).
    pub learn_window_intervals: u32,
    /// Fewest intervals with traffic before a learned cost is used.
    pub learn_min_samples: u32,
    /// Lowest confidence (1 - relative standard error) of a learned cost that is used.
    pub learn_min_confidence: f64,
    /// Power table written by `placer power calibrate` (power per cluster and frequency);
    /// when set, it replaces the built-in model. A malformed table stops the daemon with
    /// the line at fault.
    pub power_table: Option<std::path::PathBuf>,
    /// Cap frequencies even where another agent manages cpufreq (tuned,
    /// power-profiles-daemon, a governor placer did not set: [`crate::coexist`]); by
    /// default the caps are left to it and the plan says so.
    pub take_over_cpufreq: bool,
    /// The table read from `power_table` (by the daemon: the policy does no I/O).
    #[serde(skip)]
    pub power_table_model: Option<StatePowerTable>,
}

impl Default for EnergyQosConfig {
    fn default() -> Self {
        EnergyQosConfig {
            apps: Vec::new(),
            softirq_ns_per_packet: 5000.0,
            softirq_ns_per_byte: 1.0,
            app_ns_per_byte: 2.0,
            default_segment_bytes: 1448.0,
            max_util: 0.9,
            limit_headroom: 0.05,
            perf_headroom: 0.05,
            switch_margin: 0.05,
            rt_avoid_rx_cpu: true,
            max_search_states: 2_000_000,
            learn_costs: true,
            learn_window_intervals: 30,
            learn_min_samples: 5,
            learn_min_confidence: 0.8,
            power_table: None,
            take_over_cpufreq: false,
            power_table_model: None,
        }
    }
}

/// One app with a QoS target. Exactly one kind of target: `target_bytes_per_s` (network
/// app), `target_perf_share` (other app), or `period_us` + `deadline_us` + `work_us`
/// (real-time app).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct QosApp {
    /// Name used in plans and notes.
    pub name: String,
    /// Which processes form the app (comm, cgroup prefix, user; all given must match).
    #[serde(rename = "match")]
    pub matches: AppMatch,
    /// Network app: bandwidth it needs, bytes/s; it is limited to this (plus headroom).
    pub target_bytes_per_s: Option<u64>,
    /// Which direction to limit (`ingress`, `egress`, `both`).
    pub direction: Option<Direction>,
    /// Device to limit on; default: the NIC carrying the app's flows' local address.
    pub dev: Option<String>,
    /// Other app: fraction of its maximum performance it needs, 0 < x <= 1 (0.5, 0.75).
    pub target_perf_share: Option<f64>,
    /// Threads of a CPU-bound app; default: observed thread count.
    pub threads: Option<u32>,
    /// Real-time app: period, deadline (<= period) and work per period at capacity 1024.
    pub period_us: Option<u64>,
    pub deadline_us: Option<u64>,
    pub work_us: Option<u64>,
}

impl EnergyQosConfig {
    /// The configured costs and learning thresholds, as the cost learner takes them.
    pub fn cost_fallback(&self) -> crate::net_costs::Fallback {
        crate::net_costs::Fallback {
            softirq_ns_per_packet: self.softirq_ns_per_packet,
            softirq_ns_per_byte: self.softirq_ns_per_byte,
            app_ns_per_byte: self.app_ns_per_byte,
            min_samples: self.learn_min_samples as usize,
            min_confidence: self.learn_min_confidence,
        }
    }

    /// Checks values; Err((field, message)).
    pub fn validate(&self) -> Result<(), (String, String)> {
        let pos = |f: &str, v: f64| -> Result<(), (String, String)> {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err((f.to_string(), format!("{v} must be a finite number >= 0")))
            }
        };
        pos("softirq_ns_per_packet", self.softirq_ns_per_packet)?;
        pos("softirq_ns_per_byte", self.softirq_ns_per_byte)?;
        pos("app_ns_per_byte", self.app_ns_per_byte)?;
        pos("limit_headroom", self.limit_headroom)?;
        pos("perf_headroom", self.perf_headroom)?;
        pos("switch_margin", self.switch_margin)?;
        if !(self.default_segment_bytes >= 1.0 && self.default_segment_bytes <= 65536.0) {
            return Err((
                "default_segment_bytes".into(),
                format!("{} is outside 1..=65536", self.default_segment_bytes),
            ));
        }
        if !(self.max_util > 0.0 && self.max_util <= 1.0) {
            return Err((
                "max_util".into(),
                format!("{} is outside (0, 1]", self.max_util),
            ));
        }
        if !(2..=3600).contains(&self.learn_window_intervals) {
            return Err((
                "learn_window_intervals".into(),
                format!("{} is outside 2..=3600", self.learn_window_intervals),
            ));
        }
        if !(2..=self.learn_window_intervals).contains(&self.learn_min_samples) {
            return Err((
                "learn_min_samples".into(),
                format!(
                    "{} is outside 2..=learn_window_intervals ({})",
                    self.learn_min_samples, self.learn_window_intervals
                ),
            ));
        }
        if !(0.0..=1.0).contains(&self.learn_min_confidence) {
            return Err((
                "learn_min_confidence".into(),
                format!("{} is outside 0..=1", self.learn_min_confidence),
            ));
        }
        if self.max_search_states == 0 || self.max_search_states > 100_000_000 {
            return Err((
                "max_search_states".into(),
                format!("{} is outside 1..=100000000", self.max_search_states),
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, a) in self.apps.iter().enumerate() {
            let f = |k: &str| format!("apps[{i}].{k}");
            if a.name.is_empty() {
                return Err((f("name"), "must not be empty".into()));
            }
            if !names.insert(a.name.as_str()) {
                return Err((f("name"), format!("{:?} is used twice", a.name)));
            }
            let m = &a.matches;
            if m.comm.is_none() && m.cgroup.is_none() && m.user.is_none() {
                return Err((f("match"), "give at least one of comm, cgroup, user".into()));
            }
            let rt = a.period_us.is_some() || a.deadline_us.is_some() || a.work_us.is_some();
            let kinds = usize::from(a.target_bytes_per_s.is_some())
                + usize::from(a.target_perf_share.is_some())
                + usize::from(rt);
            if kinds != 1 {
                return Err((
                    f("target"),
                    "give exactly one of target_bytes_per_s, target_perf_share, or \
                     period_us + deadline_us + work_us"
                        .into(),
                ));
            }
            if a.target_bytes_per_s == Some(0) {
                return Err((f("target_bytes_per_s"), "must be > 0".into()));
            }
            if let Some(s) = a.target_perf_share {
                if !(s > 0.0 && s <= 1.0) {
                    return Err((f("target_perf_share"), format!("{s} is outside (0, 1]")));
                }
            }
            if rt {
                match (a.period_us, a.deadline_us, a.work_us) {
                    (Some(p), Some(d), Some(w)) if p > 0 && d > 0 && w > 0 => {
                        if d > p {
                            return Err((
                                f("deadline_us"),
                                format!("{d} is longer than the period {p}"),
                            ));
                        }
                        if w > d {
                            return Err((
                                f("work_us"),
                                format!("{w} is longer than the deadline {d}"),
                            ));
                        }
                    }
                    _ => {
                        return Err((
                            f("period_us"),
                            "a real-time app needs period_us, deadline_us and work_us, all > 0"
                                .into(),
                        ))
                    }
                }
            }
            // Threads are counted into per-thread tables: bound them by the largest machines.
            if let Some(t) = a.threads {
                if t == 0 || t > 4096 {
                    return Err((f("threads"), format!("{t} is outside 1..=4096")));
                }
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// The policy

/// The `energy-qos` policy.
pub struct EnergyQos {
    pub cfg: EnergyQosConfig,
    /// Measured power table; None = the topology's model.
    pub power: Option<StatePowerTable>,
    /// Which processes placer may touch at all, and placer's own pid.
    pub scope: crate::scope::Scope,
    pub self_pid: u32,
}

#[derive(Default)]
/// This policy's own state between cycles (`Policy::State`).
pub struct Private {
    /// The actions of the last emitted plan, to emit only on change.
    last: Option<Vec<Action>>,
    /// Cycles to wait before the next retry of a transient failure, and the wait that
    /// doubles after each failed retry (1, 2, 4, ... up to [`MAX_RETRY_WAIT`]).
    retry_in: u32,
    retry_wait: u32,
    /// A transient failure waits for its retry.
    pending: bool,
    /// The state chosen last cycle (kept while it stays good enough: `switch_margin`).
    last_state: Option<State>,
    /// Learned cost constants (None until the first cycle with `learn_costs`).
    learner: Option<crate::net_costs::Learner>,
    /// Each network app's own CPU cost per byte, by app name.
    app_learners: BTreeMap<String, crate::net_costs::Learner>,
}

/// The longest back-off between retries of a plan that failed transiently, in cycles.
const MAX_RETRY_WAIT: u32 = 32;

/// A configured app's running processes and what the observation says about them.
struct Running<'a> {
    app: &'a QosApp,
    procs: Vec<&'a crate::observation::ProcObs>,
}

impl EnergyQos {
    pub fn new(cfg: EnergyQosConfig) -> Self {
        EnergyQos {
            cfg,
            power: None,
            scope: Default::default(),
            self_pid: 0,
        }
    }

    pub fn with_scope(mut self, scope: crate::scope::Scope, self_pid: u32) -> Self {
        self.scope = scope;
        self.self_pid = self_pid;
        self
    }

    pub fn with_power_model(mut self, power: StatePowerTable) -> Self {
        self.power = Some(power);
        self
    }

    /// The interface whose receive costs are learned, and its receive CPUs: the first
    /// receiving network app's `dev` (or the interface of its flows), else the machine's
    /// first NIC with receive CPUs other than `lo`.
    fn rx_interface(&self, topo: &Topology, running: &[Running]) -> Option<(String, CpuSet)> {
        let nic_of = |name: &str| {
            topo.nics
                .iter()
                .find(|n| n.name == name)
                .map(|n| (n.name.clone(), n.rx_cpus.clone()))
        };
        running
            .iter()
            .filter(|r| {
                r.app.target_bytes_per_s.is_some()
                    && r.app.direction.unwrap_or(Direction::Both) != Direction::Egress
            })
            .find_map(|r| match &r.app.dev {
                Some(d) => nic_of(d),
                None => r
                    .procs
                    .iter()
                    .flat_map(|p| &p.flows)
                    .find_map(|f| topo.nic_for_addr(&f.local.ip()))
                    .and_then(|n| nic_of(&n.name)),
            })
            .or_else(|| {
                topo.nics
                    .iter()
                    .find(|n| n.name != "lo" && !n.rx_cpus.is_empty())
                    .map(|n| (n.name.clone(), n.rx_cpus.clone()))
            })
            .filter(|(_, cpus)| !cpus.is_empty())
    }

    /// Feeds this interval to the learners and returns the constants to use
    /// ([`crate::net_costs`]) and, per network app, its own CPU cost per byte when learned
    /// for it (else the pooled one of all network apps, else the configured one).
    fn learn(
        &self,
        topo: &Topology,
        obs: &Observation,
        running: &[Running],
        state: &mut PolicyState<Private>,
    ) -> (
        crate::net_costs::Costs,
        BTreeMap<String, crate::net_costs::Estimate>,
    ) {
        use crate::net_costs::{app_sample, rx_sample, Learner};
        let rx = self
            .rx_interface(topo, running)
            .and_then(|(nic, cpus)| rx_sample(topo, obs, &nic, &cpus));
        // Processes first seen this interval have no CPU time to count yet.
        let app_samples: Vec<(String, crate::net_costs::AppSample)> = running
            .iter()
            .filter(|r| r.app.target_bytes_per_s.is_some())
            .filter_map(|r| {
                let procs: Vec<&crate::observation::ProcObs> =
                    r.procs.iter().copied().filter(|p| !p.new).collect();
                (!procs.is_empty()).then(|| (r.app.name.clone(), app_sample(topo, obs, &procs)))
            })
            .collect();
        let fb = self.cfg.cost_fallback();
        let priv_state: &mut Private = &mut state.private;
        let window = self.cfg.learn_window_intervals as usize;
        let learner = priv_state
            .learner
            .get_or_insert_with(|| Learner::new(window));
        if let Some(s) = rx {
            learner.push_rx(s);
        }
        if !app_samples.is_empty() {
            let pooled = app_samples.iter().fold(
                crate::net_costs::AppSample {
                    cpu_s: 0.0,
                    bytes: 0.0,
                },
                |a, (_, s)| crate::net_costs::AppSample {
                    cpu_s: a.cpu_s + s.cpu_s,
                    bytes: a.bytes + s.bytes,
                },
            );
            learner.push_app(pooled);
        }
        let costs = learner.estimate(&fb);
        let mut per_app = BTreeMap::new();
        for (name, s) in app_samples {
            let l = priv_state
                .app_learners
                .entry(name.clone())
                .or_insert_with(|| Learner::new(window));
            l.push_app(s);
            let e = l.estimate(&fb).app_ns_per_byte;
            per_app.insert(name, if e.learned { e } else { costs.app_ns_per_byte });
        }
        // Apps that stopped running are forgotten.
        priv_state
            .app_learners
            .retain(|n, _| running.iter().any(|r| &r.app.name == n));
        (costs, per_app)
    }

    fn demand_of(&self, r: &Running) -> AppDemand {
        let a = r.app;
        let target = if let Some(b) = a.target_bytes_per_s {
            // Average received segment size weighted by received bytes.
            let (bytes, segs) = r
                .procs
                .iter()
                .flat_map(|p| &p.flows)
                .filter_map(|f| Some((f.rx_bytes_per_s, f.avg_rx_seg_bytes?)))
                .fold((0.0, 0.0), |(b, s), (fb, seg)| {
                    (b + fb, s + if seg > 0.0 { fb / seg } else { 0.0 })
                });
            let seg = if bytes > 0.0 && segs > 0.0 {
                bytes / segs
            } else {
                self.cfg.default_segment_bytes
            };
            Target::Bandwidth {
                bytes_per_s: b as f64,
                segment_bytes: seg,
                receive: a.direction.unwrap_or(Direction::Both) != Direction::Egress,
            }
        } else if let Some(share) = a.target_perf_share {
            let observed: u32 = r.procs.iter().map(|p| p.num_threads.max(1)).sum();
            Target::PerfShare {
                share: (share * (1.0 + self.cfg.perf_headroom)).min(1.0),
                threads: a.threads.unwrap_or(observed.max(1)),
            }
        } else {
            Target::RealTime {
                period_us: a.period_us.unwrap_or(1) as f64,
                deadline_us: a.deadline_us.unwrap_or(1) as f64,
                work_us: a.work_us.unwrap_or(1) as f64,
            }
        };
        AppDemand {
            app_ns_per_byte: None,
            name: a.name.clone(),
            target,
        }
    }
}

impl Policy for EnergyQos {
    type State = Private;

    fn kind(&self) -> crate::policies::PolicyKind {
        KIND
    }

    fn lacks(&self, topo: &Topology, _sources: &crate::sample::SourceStatus) -> Vec<String> {
        let mut v = Vec::new();
        if self.cfg.apps.is_empty() {
            v.push("energy_qos.apps is empty: no process is matched, nothing is placed".into());
        }
        if !clusters_of(topo).iter().any(|c| c.has_cpufreq) {
            v.push(
                "no cpufreq: the allowed CPUs are one cluster at one frequency, so no \
                 frequency is capped; only placement and the rate limits act"
                    .into(),
            );
        }
        v
    }

    fn wants(&self) -> crate::sample::SampleRequest {
        crate::sample::SampleRequest {
            sockets: true,
            nics: self.cfg.learn_costs,
            ..Default::default()
        }
    }

    /// Q5: what the app achieved this interval over its target, as the model counts it: a
    /// network app's bytes/s in its direction over `target_bytes_per_s`; a CPU-bound app's
    /// capacity received (each thread's CPU share times its CPU's capacity at its current
    /// frequency; without threads sampled, the CPU share times the mean capacity of the
    /// CPUs it may use) over `target_perf_share` of its maximum; a real-time app's
    /// deadline is not in the observation (None).
    fn qos_ratio(
        &self,
        topo: &Topology,
        obs: &Observation,
        p: &crate::observation::ProcObs,
    ) -> Option<f64> {
        let a = self.cfg.apps.iter().find(|a| a.matches.matches(p))?;
        if let Some(b) = a.target_bytes_per_s {
            let got = match a.direction.unwrap_or(Direction::Both) {
                Direction::Ingress => p.rx_bytes_per_s,
                Direction::Egress => p.tx_bytes_per_s,
                Direction::Both => p.rx_bytes_per_s + p.tx_bytes_per_s,
            };
            return Some(got / (b as f64).max(1.0));
        }
        let share = a.target_perf_share?;
        let cap = |cpu: u32| crate::net_costs::capacity_now(topo, obs, cpu);
        let got_1024 = if p.threads.is_empty() {
            // Which CPUs its threads ran on is not observed (threads not sampled): its CPU
            // time at the mean capacity of the CPUs it may use, the pessimistic reading
            // for a pin to the big CPUs (what V10 wants: stop rather than cost QoS).
            let allowed: Vec<f64> = p.allowed_cpus.iter().map(cap).collect();
            p.cpu_share * allowed.iter().sum::<f64>() / (allowed.len().max(1) as f64)
        } else {
            p.threads
                .iter()
                .map(|t| t.cpu_share * t.last_cpu.map_or(1.0, cap))
                .sum()
        } * 1024.0;
        let threads = a.threads.unwrap_or(p.num_threads).max(1);
        let need = share * max_perf(&clusters_of(topo), threads);
        Some(got_1024 / need.max(1e-9))
    }

    fn plan(&self, topo: &Topology, obs: &Observation, state: &mut PolicyState<Private>) -> Plan {
        let mut plan = Plan::default();
        let running: Vec<Running> = self
            .cfg
            .apps
            .iter()
            .map(|app| Running {
                app,
                procs: obs
                    .iter_procs()
                    .filter(|p| app.matches.matches(p) && self.scope.admits(p, self.self_pid))
                    .collect(),
            })
            .filter(|r| !r.procs.is_empty())
            .collect();
        if running.is_empty() {
            return plan;
        }
        let power = self
            .power
            .clone()
            .or_else(|| self.cfg.power_table_model.clone())
            .unwrap_or_else(|| StatePowerTable::for_topology(topo));
        let machine = Machine::for_topology(topo, power);
        let mut apps: Vec<AppDemand> = running.iter().map(|r| self.demand_of(r)).collect();
        let mut cfg = self.cfg.clone();
        if cfg.learn_costs {
            let (costs, per_app) = self.learn(topo, obs, &running, state);
            cfg.softirq_ns_per_packet = costs.softirq_ns_per_packet.ns;
            cfg.softirq_ns_per_byte = costs.softirq_ns_per_byte.ns;
            cfg.app_ns_per_byte = costs.app_ns_per_byte.ns;
            for a in apps.iter_mut() {
                a.app_ns_per_byte = per_app.get(&a.name).map(|e| e.ns);
            }
            let mut text = describe_costs(&costs);
            for (name, e) in &per_app {
                text.push_str(&format!("; app {name}: {} per byte", e.describe()));
            }
            // Also on each network app's processes, so `explain PID` shows what its plan
            // rests on.
            for r in running
                .iter()
                .filter(|r| r.app.target_bytes_per_s.is_some())
            {
                for p in &r.procs {
                    plan.note(KIND, Some(p.key()), text.clone());
                }
            }
            plan.note(KIND, None, text);
        }
        let Some(mut sol) = solve(&cfg, &machine, &apps) else {
            plan.note(KIND, None, "no usable CPUs: nothing to plan");
            return plan;
        };
        // Hysteresis: stay in the current state while it meets every target at nearly
        // the least power.
        let priv_state: &mut Private = &mut state.private;
        if let Some(prev) = priv_state.last_state.as_ref().filter(|p| {
            p.cluster_of_app.len() == apps.len() && p.freq_khz.len() == machine.clusters.len()
        }) {
            if *prev != sol.state && sol.eval.misses.is_empty() {
                let e = evaluate(&cfg, &machine, &apps, prev);
                if e.misses.is_empty() && e.power_w <= sol.eval.power_w * (1.0 + cfg.switch_margin)
                {
                    sol.state = prev.clone();
                    sol.eval = e;
                }
            }
        }
        priv_state.last_state = Some(sol.state.clone());
        let summary = describe_state(&machine, &sol);
        if sol.eval.misses.is_empty() {
            plan.note(
                KIND,
                None,
                format!(
                    "every target met: {summary} (source {})",
                    machine.power.source
                ),
            );
        } else {
            for miss in &sol.eval.misses {
                plan.note(
                    KIND,
                    None,
                    format!(
                        "no state meets every target; {} misses its target: {} (best state: {summary})",
                        miss.what, miss.why
                    ),
                );
            }
        }
        if !sol.unsearched.is_empty() {
            plan.note(
                KIND,
                None,
                format!(
                    "search bound max_search_states reached: {} placed on the largest cluster",
                    sol.unsearched.join(", ")
                ),
            );
        }
        let mut actions: Vec<(Action, String)> = Vec::new();
        let may_cap = topo
            .coexistence
            .may_cap_frequency(self.cfg.take_over_cpufreq);
        if let (false, Some(who)) = (may_cap, topo.coexistence.cpufreq_owner()) {
            let text = format!(
                "cpufreq is managed by {who}: frequency caps left alone, the frequencies above \
                 are not applied (energy_qos.take_over_cpufreq = true takes over)"
            );
            for p in running.iter().flat_map(|r| &r.procs) {
                plan.note(KIND, Some(p.key()), text.clone());
            }
            plan.note(KIND, None, text);
        }
        for (ci, c) in machine.clusters.iter().enumerate() {
            if c.has_cpufreq && may_cap {
                let khz = sol.state.freq_khz[ci];
                actions.push((
                    Action::CapFrequency {
                        domain: c.domain,
                        max_khz: khz,
                    },
                    format!(
                        "cheapest frequency of cluster {} meeting its apps' targets: {} MHz, \
                         predicted {:.2} W total",
                        c.domain,
                        khz / 1000,
                        sol.eval.power_w
                    ),
                ));
            }
        }
        for (i, r) in running.iter().enumerate() {
            let ci = sol.state.cluster_of_app[i];
            let c = &machine.clusters[ci];
            let mut cpus = c.cpus.clone();
            if matches!(apps[i].target, Target::RealTime { .. }) && self.cfg.rt_avoid_rx_cpu {
                if let Some(rx) = machine
                    .rx_cpu
                    .filter(|&rx| cpus.contains(rx) && cpus.len() > 1)
                {
                    cpus.remove(rx);
                }
            }
            if machine.clusters.len() > 1 || cpus != topo.allowed() {
                for p in &r.procs {
                    actions.push((
                        Action::PinProcess {
                            proc: p.key(),
                            comm: p.comm.to_string(),
                            cpus: cpus.clone(),
                        },
                        format!(
                            "app {} on cluster {} (CPUs {}): {:.0}% of its target predicted",
                            r.app.name,
                            c.domain,
                            cpus,
                            100.0 * sol.eval.achieved[i].min(9.99)
                        ),
                    ));
                }
            }
            if let Some(b) = r.app.target_bytes_per_s {
                let flows: Vec<FlowMatch> = r
                    .procs
                    .iter()
                    .flat_map(|p| &p.flows)
                    .map(|f| FlowMatch {
                        local: f.local,
                        remote: f.remote,
                    })
                    .collect();
                let dev = r.app.dev.clone().or_else(|| {
                    flows
                        .iter()
                        .find_map(|f| topo.nic_for_addr(&f.local.ip()).map(|n| n.name.clone()))
                });
                let Some(dev) = dev else {
                    plan.note(
                        KIND,
                        None,
                        format!(
                            "app {}: no flows observed and no `dev` configured: not limited yet",
                            r.app.name
                        ),
                    );
                    continue;
                };
                if flows.is_empty() {
                    plan.note(
                        KIND,
                        None,
                        format!("app {}: no flows observed yet: not limited", r.app.name),
                    );
                    continue;
                }
                let rate = (b as f64 * (1.0 + self.cfg.limit_headroom)).round() as u64;
                actions.push((
                    Action::LimitBandwidth {
                        app: r.app.name.clone(),
                        dev,
                        rate_bytes_per_s: rate,
                        flows,
                        direction: r.app.direction.unwrap_or(Direction::Both),
                    },
                    format!(
                        "target {:.2} MB/s (+{:.0}% headroom) bounds its softirq load",
                        b as f64 / 1e6,
                        100.0 * self.cfg.limit_headroom
                    ),
                ));
            }
        }
        let ours = |r: &&crate::plan::ActionReport| r.planned.policy == KIND;
        let failed = state
            .last_reports
            .iter()
            .filter(ours)
            .any(|r| matches!(r.outcome, Outcome::Transient(_)));
        let worked = !failed && state.last_reports.iter().any(|r| ours(&r));
        let priv_state: &mut Private = &mut state.private;
        // A plan emitted once is not repeated while unchanged; one whose actions failed
        // transiently (EBUSY, a journal that could not be written) is emitted again after
        // a back-off that doubles while it keeps failing (1, 2, 4, ... cycles).
        if failed {
            priv_state.pending = true;
            priv_state.retry_wait = (priv_state.retry_wait * 2).clamp(1, MAX_RETRY_WAIT);
            priv_state.retry_in = priv_state.retry_wait;
        } else if worked {
            priv_state.pending = false;
            priv_state.retry_wait = 0;
        }
        if priv_state.pending {
            if priv_state.retry_in <= 1 {
                priv_state.last = None;
                priv_state.pending = false;
            } else {
                priv_state.retry_in -= 1;
            }
        }
        let now: Vec<Action> = actions.iter().map(|(a, _)| a.clone()).collect();
        if priv_state.last.as_ref() != Some(&now) {
            for (a, why) in actions {
                plan.push(KIND, a, why);
            }
            priv_state.last = Some(now);
        }
        plan
    }
}

/// "costs at capacity 1024: softirq 2310.0 ns (learned, ...) per packet + ...".
pub fn describe_costs(c: &crate::net_costs::Costs) -> String {
    format!(
        "costs at capacity 1024: receive softirq {} per packet + {} per byte; app {} per byte",
        c.softirq_ns_per_packet.describe(),
        c.softirq_ns_per_byte.describe(),
        c.app_ns_per_byte.describe()
    )
}

/// "cluster 0 @ 600 MHz [ftp1], cluster 4 @ 1000 MHz [x264]; predicted 1.23 W".
pub fn describe_state(m: &Machine, sol: &Solution) -> String {
    let parts: Vec<String> = m
        .clusters
        .iter()
        .enumerate()
        .map(|(ci, c)| {
            let names: Vec<String> = sol
                .state
                .cluster_of_app
                .iter()
                .enumerate()
                .filter(|(_, &k)| k == ci)
                .map(|(i, _)| i.to_string())
                .collect();
            if c.has_cpufreq {
                format!(
                    "cluster {} @ {} MHz [apps {}]",
                    c.domain,
                    sol.state.freq_khz[ci] / 1000,
                    names.join(",")
                )
            } else {
                format!("CPUs {} [apps {}]", c.cpus, names.join(","))
            }
        })
        .collect();
    format!("{}; predicted {:.2} W", parts.join(", "), sol.eval.power_w)
}

#[cfg(test)]
mod tests {
    use super::solver::{eval_cluster, net_costs, softirq_load};
    use super::*;
    use crate::machines::machine;
    use crate::observation::{FlowObs, ProcObs, ThreadObs};
    use crate::plan::ActionReport;

    fn xu4() -> (Topology, Machine) {
        let t = machine("odroid-xu4").unwrap();
        let m = Machine::for_topology(&t, StatePowerTable::for_topology(&t));
        (t, m)
    }

    fn net(name: &str, mb: f64, seg: f64) -> AppDemand {
        AppDemand {
            app_ns_per_byte: None,
            name: name.into(),
            target: Target::Bandwidth {
                bytes_per_s: mb * 1e6,
                segment_bytes: seg,
                receive: true,
            },
        }
    }
    fn cpu(name: &str, share: f64, threads: u32) -> AppDemand {
        AppDemand {
            app_ns_per_byte: None,
            name: name.into(),
            target: Target::PerfShare { share, threads },
        }
    }
    fn rt(name: &str, period: f64, deadline: f64, work: f64) -> AppDemand {
        AppDemand {
            app_ns_per_byte: None,
            name: name.into(),
            target: Target::RealTime {
                period_us: period,
                deadline_us: deadline,
                work_us: work,
            },
        }
    }

    /// Every state of the product space, evaluated in full.
    fn brute_force(cfg: &EnergyQosConfig, m: &Machine, apps: &[AppDemand]) -> Option<Eval> {
        let nc = m.clusters.len();
        let mut best: Option<Eval> = None;
        let n_assign = nc.pow(apps.len() as u32);
        let mut freq_idx = vec![0usize; nc];
        loop {
            let freq_khz: Vec<u64> = (0..nc)
                .map(|c| m.clusters[c].freqs_khz[freq_idx[c]])
                .collect();
            for a in 0..n_assign {
                let mut x = a;
                let cluster_of_app = (0..apps.len())
                    .map(|_| {
                        let c = x % nc;
                        x /= nc;
                        c
                    })
                    .collect();
                let s = State {
                    freq_khz: freq_khz.clone(),
                    cluster_of_app,
                };
                let e = evaluate(cfg, m, apps, &s);
                if e.misses.is_empty() && best.as_ref().is_none_or(|b| e.power_w < b.power_w) {
                    best = Some(e);
                }
            }
            let mut i = 0;
            while i < nc {
                freq_idx[i] += 1;
                if freq_idx[i] < m.clusters[i].freqs_khz.len() {
                    break;
                }
                freq_idx[i] = 0;
                i += 1;
            }
            if i == nc {
                return best;
            }
        }
    }

    fn check_optimal(apps: &[AppDemand]) -> Solution {
        let cfg = EnergyQosConfig::default();
        let (_, m) = xu4();
        let sol = solve(&cfg, &m, apps).unwrap();
        let bf = brute_force(&cfg, &m, apps).expect("a feasible state exists");
        assert!(sol.eval.misses.is_empty(), "misses: {:?}", sol.eval.misses);
        for (i, r) in sol.eval.achieved.iter().enumerate() {
            assert!(*r >= 1.0 - 1e-9, "app {i} achieves {r}");
        }
        assert!(
            (sol.eval.power_w - bf.power_w).abs() < 1e-9,
            "solver {} W vs brute force {} W",
            sol.eval.power_w,
            bf.power_w
        );
        sol
    }

    #[test]
    fn power_model_matches_calibration_tables() {
        let (t, _) = xu4();
        let p = StatePowerTable::for_topology(&t);
        assert!(p.source.contains("exynos5422"));
        // IPA table points are exact.
        assert!((p.point(4, 2_000_000).unwrap().busy_cpu_w - 1.888).abs() < 1e-9);
        assert!((p.point(0, 1_400_000).unwrap().busy_cpu_w - 0.250).abs() < 1e-9);
        // V^2 f below the table: monotone, positive.
        let a15: Vec<f64> = (2..=20)
            .map(|m| p.point(4, m * 100_000).unwrap().busy_cpu_w)
            .collect();
        assert!(a15.windows(2).all(|w| w[0] < w[1]), "{a15:?}");
        assert!(a15[0] > 0.0 && a15[0] < 0.2);
        // A7 at top costs less per capacity unit than A15 at top (CALIBRATION A2).
        let a7_per_cap = 0.250 / 377.0;
        let a15_per_cap = 1.888 / 1024.0;
        assert!(a7_per_cap < a15_per_cap);
        // Idle cluster costs nothing beyond the base.
        assert_eq!(p.cluster_w(4, 2_000_000, 0.0), 0.0);
    }

    #[test]
    fn q1_one_ftp_app_optimal_against_brute_force() {
        let sol = check_optimal(&[net("ftp1", 10.0, 1448.0)]);
        // A 10 MB/s download fits the LITTLE cluster: big stays idle.
        assert_eq!(sol.state.cluster_of_app, vec![0]);
    }

    #[test]
    fn q1_mixes_optimal_against_brute_force() {
        check_optimal(&[net("ftp1", 5.0, 1448.0), cpu("parsec", 0.5, 4)]);
        check_optimal(&[net("ftp1", 5.0, 1448.0), cpu("parsec", 0.75, 4)]);
        check_optimal(&[
            net("a", 4.0, 1448.0),
            net("b", 4.0, 1448.0),
            net("c", 2.0, 536.0),
            cpu("p", 0.25, 2),
        ]);
        check_optimal(&[
            net("ftp", 3.0, 1448.0),
            rt("rt", 10_000.0, 10_000.0, 2_000.0),
        ]);
    }

    #[test]
    fn higher_target_never_costs_less() {
        let cfg = EnergyQosConfig::default();
        let (_, m) = xu4();
        let mut last = 0.0;
        for share in [0.1, 0.25, 0.5, 0.75, 1.0] {
            let s = solve(&cfg, &m, &[cpu("p", share, 4)]).unwrap();
            assert!(s.eval.misses.is_empty(), "{share}: {:?}", s.eval.misses);
            assert!(s.eval.power_w >= last - 1e-12, "{share}");
            last = s.eval.power_w;
        }
    }

    #[test]
    fn small_segments_cost_more_softirq() {
        let cfg = EnergyQosConfig::default();
        let (big_seg, _) = net_costs(&cfg, &net("a", 10.0, 1448.0), 10e6, 1448.0, true);
        let (small_seg, _) = net_costs(&cfg, &net("a", 10.0, 128.0), 10e6, 128.0, true);
        assert!(small_seg > 5.0 * big_seg);
        // And the solver needs a higher LITTLE frequency for them.
        let (_, m) = xu4();
        let a = solve(&cfg, &m, &[net("f", 2.0, 1448.0)]).unwrap();
        let b = solve(&cfg, &m, &[net("f", 2.0, 128.0)]).unwrap();
        assert!(b.state.freq_khz[0] > a.state.freq_khz[0]);
        assert!(b.eval.power_w > a.eval.power_w);
    }

    #[test]
    fn q2_infeasible_targets_are_named() {
        let cfg = EnergyQosConfig::default();
        let (_, m) = xu4();
        // 400 MB/s of 64-byte segments: the receive CPU (an A7) cannot keep up.
        let s = solve(&cfg, &m, &[net("flood", 400.0, 64.0)]).unwrap();
        assert!(s
            .eval
            .misses
            .iter()
            .any(|x| x.what == "receive processing" && x.why.contains("receive CPU 0")));
        // Two CPU-bound apps at 100% each cannot both have the big cluster.
        let s = solve(&cfg, &m, &[cpu("a", 1.0, 4), cpu("b", 1.0, 4)]).unwrap();
        assert!(!s.eval.misses.is_empty());
        assert!(s.eval.misses.iter().all(|x| x.what == "a" || x.what == "b"));
        // Only one misses: the state that meets the most targets was chosen.
        assert_eq!(s.eval.misses.len(), 1, "{:?}", s.eval.misses);
    }

    #[test]
    fn rt_app_avoids_the_receive_cpu() {
        let cfg = EnergyQosConfig::default();
        let (_, m) = xu4();
        let apps = [
            net("ftp", 20.0, 1448.0),
            rt("rt", 10_000.0, 10_000.0, 1_500.0),
        ];
        let s = solve(&cfg, &m, &apps).unwrap();
        assert!(s.eval.misses.is_empty(), "{:?}", s.eval.misses);
        // Without avoidance and a single-CPU LITTLE cluster, the softirq share lengthens the
        // response: checked through eval_cluster directly.
        let mut m1 = m.clone();
        m1.clusters[0].cpus = CpuSet::single(0);
        let cfg1 = EnergyQosConfig::default();
        let sirq = softirq_load(&cfg1, &apps);
        let shared = eval_cluster(&cfg1, &m1, 0, 1_400_000, &apps, &[1], sirq);
        let alone = eval_cluster(&cfg1, &m1, 0, 1_400_000, &apps, &[1], 0.0);
        assert!(shared.apps[0].1 < alone.apps[0].1);
    }

    #[test]
    fn no_cpufreq_machine_is_one_cluster_without_caps() {
        let t = machine("pkg:1 core:2 pu:1").unwrap();
        let m = Machine::for_topology(&t, StatePowerTable::for_topology(&t));
        assert_eq!(m.clusters.len(), 1);
        assert!(!m.clusters[0].has_cpufreq);
        let s = solve(&EnergyQosConfig::default(), &m, &[net("f", 1.0, 1448.0)]).unwrap();
        assert_eq!(s.state.freq_khz, vec![0]);
    }

    #[test]
    fn lacks_says_no_cpufreq_and_no_apps() {
        let sources = crate::sample::SourceStatus::default();
        let with_apps = EnergyQos::new(EnergyQosConfig {
            apps: vec![app("f", "ftp")],
            ..Default::default()
        });
        assert!(with_apps
            .lacks(&machine("odroid-xu4").unwrap(), &sources)
            .is_empty());
        let flat = machine("pkg:1 core:2 pu:1").unwrap();
        let lacks = with_apps.lacks(&flat, &sources);
        assert!(
            lacks.len() == 1 && lacks[0].starts_with("no cpufreq"),
            "{lacks:?}"
        );
        let lacks = EnergyQos::new(EnergyQosConfig::default()).lacks(&flat, &sources);
        assert!(
            lacks.len() == 2 && lacks[0].contains("apps is empty"),
            "{lacks:?}"
        );
    }

    fn proc_obs(pid: u32, comm: &str, threads: u32) -> ProcObs {
        ProcObs {
            state: 'R',
            uid: Some(1000),
            cpu_share: 1.0,
            last_cpu: Some(4),
            num_threads: threads,
            ..ProcObs::bare(pid, 100, comm, CpuSet::first_n(8))
        }
    }

    fn app(name: &str, comm: &str) -> QosApp {
        QosApp {
            name: name.into(),
            matches: AppMatch {
                comm: Some(comm.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn q5_the_qos_told_to_the_judge_is_the_target_as_the_model_counts_it() {
        let (topo, _) = xu4();
        let obs = Observation::default();
        let big: CpuSet = topo
            .cpus
            .iter()
            .filter(|c| c.capacity == Some(1024))
            .map(|c| c.id)
            .collect();
        assert_eq!(big.len(), 4, "the XU4's A15s");
        let mut ftp = app("ftp", "ftp0");
        ftp.target_bytes_per_s = Some(5_000_000);
        ftp.direction = Some(Direction::Ingress);
        let mut par = app("parsec", "parsec");
        par.target_perf_share = Some(0.75);
        par.threads = Some(4);
        let mut rt = app("rt", "rt");
        (rt.period_us, rt.deadline_us, rt.work_us) = (Some(10_000), Some(5_000), Some(1_000));
        let p = EnergyQos::new(EnergyQosConfig {
            apps: vec![ftp, par, rt],
            ..Default::default()
        });
        let q = |proc: &ProcObs| Policy::qos_ratio(&p, &topo, &obs, proc);
        // A network app: its bytes in its direction over the target.
        let mut f = proc_obs(10, "ftp0", 1);
        f.rx_bytes_per_s = 6e6;
        f.tx_bytes_per_s = 9e9;
        assert!((q(&f).unwrap() - 1.2).abs() < 1e-9);
        // A CPU-bound app on the big CPUs: 3 of its 4-CPU maximum is its 75% target.
        let mut c = proc_obs(11, "parsec", 4);
        c.cpu_share = 3.0;
        c.allowed_cpus = big.clone();
        assert!((q(&c).unwrap() - 1.0).abs() < 1e-9, "{:?}", q(&c));
        // The same CPU time where it may run on the LITTLE CPUs too is less capacity.
        c.allowed_cpus = CpuSet::first_n(8);
        assert!(q(&c).unwrap() < 0.99, "{:?}", q(&c));
        // Threads seen: each at its own CPU's capacity (all four on big CPUs: the target).
        c.threads = big
            .iter()
            .map(|cpu| ThreadObs {
                tid: 100 + cpu,
                comm: "parsec".into(),
                cpu_share: 0.75,
                last_cpu: Some(cpu),
                allowed_cpus: CpuSet::first_n(8),
            })
            .collect();
        assert!((q(&c).unwrap() - 1.0).abs() < 1e-9, "{:?}", q(&c));
        // A deadline is not observed; a process of no app has no target.
        assert_eq!(q(&proc_obs(12, "rt", 1)), None);
        assert_eq!(q(&proc_obs(13, "other", 1)), None);
    }

    #[test]
    fn caps_left_to_another_cpufreq_owner_unless_taking_over() {
        use crate::coexist::{Agent, AgentKind, Coexistence, ForeignGovernor};
        let mut par = app("parsec", "blackscholes");
        par.target_perf_share = Some(0.5);
        let obs = Observation {
            procs: vec![std::sync::Arc::new(proc_obs(11, "blackscholes", 4))],
            ..Default::default()
        };
        let caps = |t: &Topology, take_over: bool| {
            let pol = EnergyQos::new(EnergyQosConfig {
                apps: vec![par.clone()],
                take_over_cpufreq: take_over,
                ..Default::default()
            });
            let plan = pol.plan(t, &obs, &mut PolicyState::default());
            let n = plan
                .actions
                .iter()
                .filter(|a| matches!(a.action, Action::CapFrequency { .. }))
                .count();
            let pins = plan
                .actions
                .iter()
                .filter(|a| matches!(a.action, Action::PinProcess { .. }))
                .count();
            let note = plan
                .notes
                .iter()
                .find(|n| n.proc.is_some_and(|k| k.pid == 11) && n.text.contains("left alone"))
                .map(|n| n.text.clone());
            (n, pins, note)
        };
        let mut t = machine("odroid-xu4").unwrap();
        assert_eq!(caps(&t, false), (2, 1, None), "nobody else: caps");
        t.coexistence = Coexistence {
            agents: vec![Agent {
                kind: AgentKind::Irqbalance,
                pid: 5,
            }],
            foreign_governors: Vec::new(),
        };
        assert_eq!(caps(&t, false).0, 2, "irqbalance owns no cpufreq");
        t.coexistence.agents.push(Agent {
            kind: AgentKind::PowerProfilesDaemon,
            pid: 812,
        });
        let (n, pins, note) = caps(&t, false);
        assert_eq!(
            (n, pins),
            (0, 1),
            "caps left alone, placement still planned"
        );
        assert!(
            note.as_deref().is_some_and(|n| n.starts_with(
                "cpufreq is managed by power-profiles-daemon (pid 812): frequency caps left alone"
            )),
            "{note:?}"
        );
        assert_eq!(caps(&t, true).0, 2, "take_over_cpufreq caps anyway");
        t.coexistence.agents.clear();
        t.coexistence.foreign_governors.push(ForeignGovernor {
            domain: 4,
            governor: "performance".into(),
            default: "schedutil".into(),
        });
        assert_eq!(caps(&t, false).0, 0, "a governor someone else set");
    }

    #[test]
    fn q3_q4_policy_emits_caps_pins_and_limits() {
        let mut t = machine("odroid-xu4").unwrap();
        t.nics[0].addrs = vec!["10.0.0.2".parse().unwrap()];
        let mut ftp = app("ftp", "wget");
        ftp.target_bytes_per_s = Some(5_000_000);
        ftp.direction = Some(Direction::Ingress);
        let mut par = app("parsec", "blackscholes");
        par.target_perf_share = Some(0.5);
        let cfg = EnergyQosConfig {
            apps: vec![ftp, par],
            ..Default::default()
        };
        cfg.validate().unwrap();
        let mut w = proc_obs(10, "wget", 1);
        w.flows.push(FlowObs {
            local: "10.0.0.2:40000".parse().unwrap(),
            remote: "10.0.0.1:21".parse().unwrap(),
            state: 1,
            inode: 1,
            rx_bytes_per_s: 4e6,
            tx_bytes_per_s: 0.0,
            avg_rx_seg_bytes: Some(1448.0),
            avg_tx_seg_bytes: None,
            segs_in_per_s: 4e6 / 1448.0,
            segs_out_per_s: 0.0,
            new: false,
        });
        let obs = Observation {
            procs: vec![
                std::sync::Arc::new(w),
                std::sync::Arc::new(proc_obs(11, "blackscholes", 4)),
                std::sync::Arc::new(proc_obs(12, "bash", 1)),
            ],
            ..Default::default()
        };
        let pol = EnergyQos::new(cfg);
        let mut st = PolicyState::default();
        let plan = pol.plan(&t, &obs, &mut st);
        let kinds: Vec<&str> = plan.actions.iter().map(|a| a.action.kind()).collect();
        assert_eq!(kinds.iter().filter(|k| **k == "cap_frequency").count(), 2);
        assert_eq!(kinds.iter().filter(|k| **k == "pin_process").count(), 2);
        let lim = plan
            .actions
            .iter()
            .find_map(|a| match &a.action {
                Action::LimitBandwidth {
                    dev,
                    rate_bytes_per_s,
                    flows,
                    ..
                } => Some((dev.clone(), *rate_bytes_per_s, flows.len())),
                _ => None,
            })
            .unwrap();
        assert_eq!(lim, ("eth0".to_string(), 5_250_000, 1));
        // bash is nobody's app: never pinned.
        assert!(plan
            .actions
            .iter()
            .all(|a| a.action.proc().is_none_or(|p| p.pid != 12)));
        assert!(plan
            .notes
            .iter()
            .any(|n| n.text.contains("every target met")));
        // Same inputs again: nothing new to do, still explained.
        let again = pol.plan(&t, &obs, &mut st);
        assert!(again.actions.is_empty());
        assert!(!again.notes.is_empty());
        // A transient failure is retried, with a back-off that doubles. The engine's view:
        // a cycle's reports are those of the previous cycle's actions (none if it had none).
        let reports = |plan: &Plan| -> Vec<ActionReport> {
            plan.actions
                .iter()
                .map(|a| ActionReport {
                    planned: a.clone(),
                    outcome: Outcome::Transient("EBUSY".into()),
                })
                .collect()
        };
        st.last_reports = reports(&plan);
        let mut emitted_at = Vec::new();
        for cycle in 1..=20 {
            let p = pol.plan(&t, &obs, &mut st);
            st.last_reports = reports(&p);
            if !p.actions.is_empty() {
                emitted_at.push(cycle);
            }
        }
        let gaps: Vec<i32> = emitted_at.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(emitted_at.len() >= 3, "{emitted_at:?}");
        assert!(
            gaps.windows(2).all(|g| g[1] > g[0]),
            "not doubling: {emitted_at:?}"
        );
        // Once a retry works, the plan is not repeated.
        let mut retried = None;
        for _ in 0..80 {
            let p = pol.plan(&t, &obs, &mut st);
            if !p.actions.is_empty() {
                retried = Some(p);
                break;
            }
            st.last_reports.clear();
        }
        let p = retried.expect("retried within the back-off");
        st.last_reports = p
            .actions
            .iter()
            .map(|a| ActionReport {
                planned: a.clone(),
                outcome: Outcome::Done,
            })
            .collect();
        for _ in 0..80 {
            assert!(pol.plan(&t, &obs, &mut st).actions.is_empty());
            st.last_reports.clear();
        }
    }

    /// Four downloads of 25 MB/s: infeasible with the configured 5000 ns per packet (the
    /// receive CPU, an A7, would need ~94%), feasible with the ~1500 ns the counters show.
    /// The policy learns it within `learn_min_samples` intervals and then meets every
    /// target; without traffic it keeps the configured values.
    #[test]
    fn policy_learns_its_costs_from_the_counters_and_plans_with_them() {
        use crate::observation::{CpuObs, NicObs};
        let mut t = machine("odroid-xu4").unwrap();
        t.nics[0].addrs = vec!["10.0.0.2".parse().unwrap()];
        let rx_cpu = t.nics[0].rx_cpus.first().unwrap();
        let cap0 = t.cpu(rx_cpu).unwrap().capacity.unwrap() as f64 / 1024.0;
        let mut apps = Vec::new();
        let mut procs = Vec::new();
        for i in 0..4u32 {
            let mut a = app(&format!("ftp{i}"), &format!("ftp{i}"));
            a.target_bytes_per_s = Some(25_000_000);
            a.direction = Some(Direction::Ingress);
            apps.push(a);
            let mut p = proc_obs(10 + i, &format!("ftp{i}"), 1);
            // ftp0 spends twice the CPU per byte of the others (8 vs 4 ns on an A15).
            p.cpu_share = if i == 0 { 0.2 } else { 0.1 };
            p.rx_bytes_per_s = 25e6;
            p.flows.push(FlowObs {
                local: format!("10.0.0.2:{}", 40000 + i).parse().unwrap(),
                remote: "10.0.0.1:21".parse().unwrap(),
                state: 1,
                inode: 1 + u64::from(i),
                rx_bytes_per_s: 25e6,
                tx_bytes_per_s: 0.0,
                avg_rx_seg_bytes: Some(1448.0),
                avg_tx_seg_bytes: None,
                segs_in_per_s: 25e6 / 1448.0,
                segs_out_per_s: 0.0,
                new: false,
            });
            procs.push(p);
        }
        let cfg = EnergyQosConfig {
            apps,
            ..Default::default()
        };
        cfg.validate().unwrap();
        let pol = EnergyQos::new(cfg);
        let mut st = PolicyState::default();
        let obs_at = |cycle: u32| {
            // Traffic and segment sizes vary a little, as on a real link.
            let seg = 1000.0 + 40.0 * f64::from(cycle % 7);
            let bytes = 1e8 * (0.9 + 0.03 * f64::from(cycle % 5));
            let pkts = bytes / seg;
            Observation {
                interval_s: 1.0,
                cpus: vec![CpuObs {
                    cpu: rx_cpu,
                    softirq: pkts * 1500e-9 / cap0,
                    ..Default::default()
                }],
                nics: vec![NicObs {
                    name: "eth0".into(),
                    rx_packets_per_s: pkts,
                    rx_bytes_per_s: bytes,
                    ..Default::default()
                }],
                procs: procs.iter().cloned().map(std::sync::Arc::new).collect(),
                ..Default::default()
            }
        };
        let first = pol.plan(&t, &obs_at(0), &mut st);
        let text = |p: &Plan| {
            p.notes
                .iter()
                .map(|n| n.text.clone())
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert!(
            text(&first).contains("misses its target"),
            "{}",
            text(&first)
        );
        assert!(
            text(&first).contains("5000.0 ns (configured"),
            "{}",
            text(&first)
        );
        let mut last = first;
        for cycle in 1..8 {
            last = pol.plan(&t, &obs_at(cycle), &mut st);
        }
        let notes = text(&last);
        assert!(notes.contains("every target met"), "{notes}");
        assert!(notes.contains("(learned, confidence"), "{notes}");
        // The per-packet cost it learned is the one behind the counters.
        let learned: f64 = notes
            .split("receive softirq ")
            .nth(1)
            .and_then(|r| r.split(" ns").next())
            .and_then(|v| v.parse().ok())
            .unwrap();
        assert!((learned - 1500.0).abs() < 150.0, "{learned}: {notes}");
        // Each app's own CPU cost per byte is learned for it.
        assert!(notes.contains("app ftp0: 8.0 ns (learned"), "{notes}");
        assert!(notes.contains("app ftp1: 4.0 ns (learned"), "{notes}");
        // learn_costs = false: the configured values, and the targets stay infeasible.
        let mut off = pol.cfg.clone();
        off.learn_costs = false;
        let pol = EnergyQos::new(off);
        let mut st = PolicyState::default();
        for cycle in 0..8 {
            last = pol.plan(&t, &obs_at(cycle), &mut st);
        }
        assert!(text(&last).contains("misses its target"));
        assert!(!text(&last).contains("learned"));
    }

    /// The current state is kept while it meets every target within `switch_margin` of
    /// the best power; beyond the margin the policy moves.
    #[test]
    fn hysteresis_keeps_a_good_enough_state() {
        let t = machine("odroid-xu4").unwrap();
        let mut a = app("a", "a");
        a.target_perf_share = Some(0.3);
        let cfg = EnergyQosConfig {
            apps: vec![a],
            learn_costs: false,
            ..Default::default()
        };
        let obs = Observation {
            procs: vec![std::sync::Arc::new(proc_obs(1, "a", 4))],
            ..Default::default()
        };
        let pol = EnergyQos::new(cfg.clone());
        let mut st = PolicyState::default();
        let best = pol.plan(&t, &obs, &mut st);
        assert!(!best.actions.is_empty());
        let m = Machine::for_topology(&t, StatePowerTable::for_topology(&t));
        let apps = vec![pol.demand_of(&Running {
            app: &pol.cfg.apps[0],
            procs: obs.iter_procs().collect(),
        })];
        let sol = solve(&cfg, &m, &apps).unwrap();
        // A neighbouring state one step up in frequency on the app's cluster: it meets the
        // target too, at more power.
        let ci = sol.state.cluster_of_app[0];
        let mut up = sol.state.clone();
        let freqs = &m.clusters[ci].freqs_khz;
        let k = freqs.iter().position(|&f| f == up.freq_khz[ci]).unwrap();
        up.freq_khz[ci] = freqs[k + 1];
        let e = evaluate(&cfg, &m, &apps, &up);
        assert!(e.misses.is_empty() && e.power_w > sol.eval.power_w);
        let over = e.power_w / sol.eval.power_w - 1.0;
        for (margin, kept) in [(over + 0.01, true), (over - 0.01, false)] {
            let pol = EnergyQos::new(EnergyQosConfig {
                switch_margin: margin.max(0.0),
                ..cfg.clone()
            });
            let mut st: PolicyState<Private> = PolicyState::default();
            st.private.last_state = Some(up.clone());
            let plan = pol.plan(&t, &obs, &mut st);
            let cap = plan.actions.iter().find_map(|a| match a.action {
                Action::CapFrequency { domain, max_khz } if domain == m.clusters[ci].domain => {
                    Some(max_khz)
                }
                _ => None,
            });
            let want = if kept {
                up.freq_khz[ci]
            } else {
                sol.state.freq_khz[ci]
            };
            assert_eq!(cap, Some(want), "margin {margin}, over {over}");
        }
    }

    #[test]
    fn q2_policy_reports_infeasible_targets_in_notes() {
        let t = machine("odroid-xu4").unwrap();
        let mut a = app("a", "a");
        a.target_perf_share = Some(1.0);
        let mut b = app("b", "b");
        b.target_perf_share = Some(1.0);
        let pol = EnergyQos::new(EnergyQosConfig {
            apps: vec![a, b],
            ..Default::default()
        });
        let obs = Observation {
            procs: vec![
                std::sync::Arc::new(proc_obs(1, "a", 4)),
                std::sync::Arc::new(proc_obs(2, "b", 4)),
            ],
            ..Default::default()
        };
        let plan = pol.plan(&t, &obs, &mut PolicyState::default());
        assert!(plan.notes.iter().any(
            |n| n.text.contains("misses its target") && n.text.contains("maximum performance")
        ));
    }

    /// Q4: the same inputs give the same plan, actions and notes alike.
    #[test]
    fn q4_the_same_inputs_give_the_same_plan() {
        let t = machine("odroid-xu4").unwrap();
        let mut a = app("a", "a");
        a.target_perf_share = Some(0.3);
        let mut b = app("b", "b");
        b.target_perf_share = Some(0.6);
        let cfg = EnergyQosConfig {
            apps: vec![a, b],
            learn_costs: false,
            ..Default::default()
        };
        let obs = Observation {
            procs: vec![
                std::sync::Arc::new(proc_obs(1, "a", 4)),
                std::sync::Arc::new(proc_obs(2, "b", 2)),
            ],
            ..Default::default()
        };
        let first = EnergyQos::new(cfg.clone()).plan(&t, &obs, &mut PolicyState::default());
        let again = EnergyQos::new(cfg).plan(&t, &obs, &mut PolicyState::default());
        assert!(!first.actions.is_empty() && !first.notes.is_empty());
        assert_eq!(first, again);
    }

    #[test]
    fn config_validation() {
        let ok = |c: &EnergyQosConfig| c.validate();
        let mut c = EnergyQosConfig::default();
        assert!(ok(&c).is_ok());
        c.apps.push(app("x", "x"));
        assert_eq!(ok(&c).unwrap_err().0, "apps[0].target");
        c.apps[0].target_perf_share = Some(1.5);
        assert_eq!(ok(&c).unwrap_err().0, "apps[0].target_perf_share");
        c.apps[0].target_perf_share = None;
        c.apps[0].period_us = Some(10_000);
        c.apps[0].deadline_us = Some(20_000);
        c.apps[0].work_us = Some(5_000);
        assert_eq!(ok(&c).unwrap_err().0, "apps[0].deadline_us");
        c.apps[0].deadline_us = Some(10_000);
        assert!(ok(&c).is_ok());
        c.apps.push(app("x", "y"));
        c.apps[1].target_bytes_per_s = Some(1);
        assert_eq!(ok(&c).unwrap_err().0, "apps[1].name");
        c.apps[1].name = "y".into();
        c.apps[1].matches = AppMatch::default();
        assert_eq!(ok(&c).unwrap_err().0, "apps[1].match");
        c = EnergyQosConfig {
            max_util: 0.0,
            ..Default::default()
        };
        assert_eq!(ok(&c).unwrap_err().0, "max_util");
    }

    #[test]
    fn config_from_toml() {
        let text = r#"
            softirq_ns_per_packet = 4000.0
            [[apps]]
            name = "ftp"
            match = { comm = "vsftpd" }
            target_bytes_per_s = 10000000
            direction = "ingress"
            [[apps]]
            name = "x264"
            match = { cgroup = "/parsec" }
            target_perf_share = 0.75
            [[apps]]
            name = "ctl"
            match = { user = 1001 }
            period_us = 10000
            deadline_us = 10000
            work_us = 5000
        "#;
        let c: EnergyQosConfig = toml::from_str(text).unwrap();
        c.validate().unwrap();
        assert_eq!(c.apps.len(), 3);
        assert_eq!(c.apps[0].direction, Some(Direction::Ingress));
        assert_eq!(c.max_util, 0.9);
        assert!(toml::from_str::<EnergyQosConfig>("bogus = 1").is_err());
    }
}
