//! Classifying running applications into the three contention groups of seed 003
//! (docs/seeds.md, section III.3 and III.3.5), from hardware
//! counter rates.
//!
//! - **Group 1, aggressive** (lbm, libquantum, lu.B in the paper): hurt others and are hurt.
//!   Signal: offcore request buffer full (Nehalem `OFFCORE_REQUESTS_SQ_FULL`, "super queue
//!   full"), which the paper found splits aggressive apps from the rest "extremely".
//! - **Group 2, sensitive** (sphinx, omnetpp, streamcluster): little pressure, hurt by Group 1.
//!   Signal: LLC references (hits + misses). The paper rejects the LLC hit *ratio*: it
//!   collapses to ~0 for everyone under contention, while references are a property of
//!   the app and keep their order.
//! - **Group 3, insensitive** (sp.B, ua.B, canneal, ferret, gromacs): everything else.
//!
//! Two modes, as in the paper:
//! - [`Mode::Threshold`]: buffer-full >= `buffer_full` -> Group 1; else LLC references >=
//!   `llc_references` -> Group 2; else Group 3. Thresholds depend on the machine (clock,
//!   core count, queue sizes), so [`Thresholds`] can be set per machine model.
//! - [`Mode::Relative`]: with `n` candidates and `k = floor(n / 3)`: the `k` highest by
//!   buffer-full are Group 1, the `k` highest of the rest by LLC references are Group 2, the
//!   rest Group 3 (the paper's example: 9 apps -> 3/3/3; its 11 workloads -> 3/3/5). Ties
//!   break by pid so the result is deterministic.
//!
//! Signals are taken per second (the paper: event counts per monitoring period) or, with
//! [`Basis::PerKiloCycle`], per 1,000 cycles, which does not drop when a process shares a
//! CPU with another (useful when the machine is oversubscribed).
//!
//! **Smoothing** (majority of the last K, K = `smoothing_intervals`, default 3): each
//! interval gives every process a *raw* group; its *class* changes only when another group
//! holds a strict majority of the last K raw groups. A one-interval spike is one vote of K,
//! so it cannot flip a class (for K >= 2); a real phase change flips it after
//! `floor(K/2) + 1` intervals. A new process takes its first raw group at once. Majority of
//! votes was chosen over an EWMA of rates because an EWMA lets a large enough spike cross a
//! threshold in one interval; votes bound the effect of any spike, whatever its size.
//!
//! Processes without counters (no PMU, or the counter could not be opened for them), or
//! using less than `min_cpu_share` of a CPU, are not classified: the paper's apps are
//! CPU-bound, and an idle process's rates say nothing about its behaviour.

use crate::observation::{CounterRates, Observation, ProcObs};
use crate::sample::ProcKey;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;

/// Rate-map name of the offcore-request-buffer-full (super queue full) signal.
pub const BUFFER_FULL: &str = "offcore_requests_buffer_full";
/// Rate-map name of LLC references (hits + misses).
pub const LLC_REFERENCES: &str = "llc_references";
/// Rate-map name of L2 hardware prefetch requests (explanatory; not used to classify).
pub const L2_PREFETCH: &str = "l2_prefetch_requests";
/// Rate-map name of memory bandwidth in bytes (per second = bytes/s), where measured.
pub const MEM_BANDWIDTH_BYTES: &str = "mem_bandwidth_bytes";
/// Rate-map name of LLC misses: the aggressiveness proxy when no buffer-full event exists
/// (generic fallback, see placer-linux's pmu_events).
pub const LLC_MISSES: &str = "llc_misses";
pub const CYCLES: &str = "cycles";
pub const INSTRUCTIONS: &str = "instructions";

/// The paper's three application groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    /// Group 1: aggressive (and itself hurt by contention).
    Aggressive,
    /// Group 2: sensitive, little pressure on others.
    Sensitive,
    /// Group 3: insensitive.
    Insensitive,
}

impl Group {
    pub fn number(self) -> u8 {
        match self {
            Group::Aggressive => 1,
            Group::Sensitive => 2,
            Group::Insensitive => 3,
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            Group::Aggressive => "aggressive",
            Group::Sensitive => "sensitive",
            Group::Insensitive => "insensitive",
        }
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "G{} {}", self.number(), self.label())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Absolute thresholds (configurable per machine).
    #[default]
    Threshold,
    /// Ranking among the running apps (top third / top third of the rest).
    Relative,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// Events per second (the paper's counts per period).
    #[default]
    PerS,
    /// Events per 1,000 cycles of the process.
    PerKiloCycle,
    /// Events per 1,000 instructions: unchanged when contention slows the process down
    /// (the paper: LLC references are a property of the app), at the price of
    /// per-machine thresholds in these units.
    PerKiloInstruction,
}

impl Basis {
    pub fn unit(self) -> &'static str {
        match self {
            Basis::PerS => "/s",
            Basis::PerKiloCycle => "/kcycle",
            Basis::PerKiloInstruction => "/kinstr",
        }
    }
}

/// Threshold-mode limits, in the unit of the configured [`Basis`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Thresholds {
    /// Buffer-full events at or above this -> Group 1.
    pub buffer_full: f64,
    /// LLC references at or above this (and not Group 1) -> Group 2.
    pub llc_references: f64,
}

impl Default for Thresholds {
    /// Defaults for the paper's 2.93 GHz Xeon X5570 in events per second: between the
    /// highest non-aggressive and the lowest aggressive buffer-full rate, and between
    /// Group 3's and Group 2's LLC reference rates, of the shipped traces
    /// (traces/seed003-*.jsonl, built in the paper's proportions; see docs/contention.md).
    fn default() -> Self {
        Thresholds {
            buffer_full: 2.0e7,
            llc_references: 1.0e8,
        }
    }
}

/// Classifier settings (part of `[contention]` in the config).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClassifyConfig {
    pub mode: Mode,
    pub basis: Basis,
    /// Thresholds when no per-machine entry applies.
    pub thresholds: Thresholds,
    /// Thresholds per machine model (`xeon-x5570x2`), chosen by [`ClassifyConfig::thresholds_for`].
    pub per_machine: BTreeMap<String, Thresholds>,
    /// Majority window K (>= 1; 1 = no smoothing).
    pub smoothing_intervals: usize,
    /// Processes using less CPU than this (in CPUs) are not classified.
    pub min_cpu_share: f64,
}

impl Default for ClassifyConfig {
    fn default() -> Self {
        ClassifyConfig {
            mode: Mode::Threshold,
            basis: Basis::PerS,
            thresholds: Thresholds::default(),
            per_machine: BTreeMap::new(),
            smoothing_intervals: 3,
            min_cpu_share: 0.5,
        }
    }
}

impl ClassifyConfig {
    /// The thresholds for `machine` (a model name, or a topology source `machine:NAME`).
    pub fn thresholds_for(&self, machine: Option<&str>) -> Thresholds {
        let name = machine.map(|m| m.strip_prefix("machine:").unwrap_or(m));
        name.and_then(|n| self.per_machine.get(n))
            .copied()
            .unwrap_or(self.thresholds)
    }

    pub fn validate(&self) -> Result<(), (String, String)> {
        if !(1..=1000).contains(&self.smoothing_intervals) {
            return Err((
                "smoothing_intervals".into(),
                "must be within 1..=1000".into(),
            ));
        }
        if !self.min_cpu_share.is_finite() || self.min_cpu_share < 0.0 {
            return Err(("min_cpu_share".into(), "must be >= 0".into()));
        }
        for (name, t) in std::iter::once(("thresholds".to_string(), &self.thresholds)).chain(
            self.per_machine
                .iter()
                .map(|(k, v)| (format!("per_machine.{k}"), v)),
        ) {
            if [t.buffer_full, t.llc_references]
                .iter()
                .any(|v| v.is_nan() || *v < 0.0)
            {
                return Err((name, "thresholds must be >= 0".into()));
            }
        }
        Ok(())
    }
}

/// The two classifying signals of one process in one interval (in the basis' unit), and
/// the explanatory ones where counted.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Signals {
    pub buffer_full: f64,
    pub llc_references: f64,
    pub l2_prefetch: Option<f64>,
    pub mem_bandwidth_bytes_per_s: Option<f64>,
    /// True when `buffer_full` holds LLC misses (no buffer-full event on this CPU).
    #[serde(default)]
    pub proxy: bool,
}

/// Extracts the signals from counter rates; None when the classifying counters are absent.
/// Without a buffer-full count, LLC misses stand in for it (`proxy`).
pub fn signals(rates: &CounterRates, basis: Basis) -> Option<Signals> {
    let (bf, proxy) = match rates.per_s.get(BUFFER_FULL) {
        Some(&v) => (v, false),
        None => (*rates.per_s.get(LLC_MISSES)?, true),
    };
    let llc = *rates.per_s.get(LLC_REFERENCES)?;
    let scale = match basis {
        Basis::PerS => 1.0,
        Basis::PerKiloCycle | Basis::PerKiloInstruction => {
            let by = if basis == Basis::PerKiloCycle {
                CYCLES
            } else {
                INSTRUCTIONS
            };
            let d = *rates.per_s.get(by)?;
            if d <= 0.0 {
                return None;
            }
            1000.0 / d
        }
    };
    Some(Signals {
        buffer_full: bf * scale,
        llc_references: llc * scale,
        l2_prefetch: rates.per_s.get(L2_PREFETCH).map(|v| v * scale),
        mem_bandwidth_bytes_per_s: rates.per_s.get(MEM_BANDWIDTH_BYTES).copied(),
        proxy,
    })
}

/// Threshold mode for one process.
pub fn classify_threshold(s: &Signals, t: &Thresholds) -> Group {
    if s.buffer_full >= t.buffer_full {
        Group::Aggressive
    } else if s.llc_references >= t.llc_references {
        Group::Sensitive
    } else {
        Group::Insensitive
    }
}

/// Relative mode over a set of processes: k = floor(n/3) highest buffer-full -> Group 1,
/// k highest LLC references of the rest -> Group 2, rest Group 3. Deterministic (ties by
/// key). Returns groups in the input order.
pub fn classify_relative<K: Ord + Copy>(items: &[(K, Signals)]) -> Vec<Group> {
    let n = items.len();
    let k = n / 3;
    let mut groups = vec![Group::Insensitive; n];
    let mut idx: Vec<usize> = (0..n).collect();
    idx.sort_by(|&a, &b| {
        items[b]
            .1
            .buffer_full
            .total_cmp(&items[a].1.buffer_full)
            .then(items[a].0.cmp(&items[b].0))
    });
    for &i in &idx[..k] {
        groups[i] = Group::Aggressive;
    }
    let mut rest: Vec<usize> = idx[k..].to_vec();
    rest.sort_by(|&a, &b| {
        items[b]
            .1
            .llc_references
            .total_cmp(&items[a].1.llc_references)
            .then(items[a].0.cmp(&items[b].0))
    });
    for &i in rest.iter().take(k) {
        groups[i] = Group::Sensitive;
    }
    groups
}

/// Majority-of-K smoothing of one process's raw groups (see the module doc).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Smoother {
    votes: VecDeque<Group>,
    class: Option<Group>,
}

impl Smoother {
    /// Adds this interval's raw group; returns the (possibly unchanged) class.
    pub fn push(&mut self, raw: Group, k: usize) -> Group {
        let k = k.max(1);
        crate::stats::push_bounded(&mut self.votes, raw, k);
        let current = match self.class {
            None => {
                self.class = Some(raw);
                return raw;
            }
            Some(c) => c,
        };
        for g in [Group::Aggressive, Group::Sensitive, Group::Insensitive] {
            if g == current {
                continue;
            }
            let n = self.votes.iter().filter(|&&v| v == g).count();
            if 2 * n > k {
                self.class = Some(g);
                return g;
            }
        }
        current
    }

    pub fn class(&self) -> Option<Group> {
        self.class
    }
}

/// One process's classification this interval, with the numbers behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Classified {
    pub key: ProcKey,
    pub comm: String,
    /// The smoothed class (what placement uses).
    pub class: Group,
    /// This interval's raw group.
    pub raw: Group,
    pub signals: Signals,
}

/// The classifier's memory between intervals: one smoother per live process.
#[derive(Debug, Clone, Default)]
pub struct Classifier {
    smoothers: BTreeMap<ProcKey, Smoother>,
}

impl Classifier {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `p` is a candidate (enough CPU, counters with both signals).
    pub fn candidate(p: &ProcObs, cfg: &ClassifyConfig) -> Option<Signals> {
        if p.kernel_thread || p.cpu_share < cfg.min_cpu_share {
            return None;
        }
        signals(p.counters.as_ref()?, cfg.basis)
    }

    /// Classifies the candidates among `procs` (already scope-filtered by the caller),
    /// updating the smoothers; processes not seen this interval are forgotten.
    pub fn update<'a>(
        &mut self,
        procs: impl IntoIterator<Item = &'a ProcObs>,
        cfg: &ClassifyConfig,
        machine: Option<&str>,
    ) -> Vec<Classified> {
        let cands: Vec<(&ProcObs, Signals)> = procs
            .into_iter()
            .filter_map(|p| Self::candidate(p, cfg).map(|s| (p, s)))
            .collect();
        let raws: Vec<Group> = match cfg.mode {
            Mode::Threshold => {
                let t = cfg.thresholds_for(machine);
                cands
                    .iter()
                    .map(|(_, s)| classify_threshold(s, &t))
                    .collect()
            }
            Mode::Relative => {
                let items: Vec<(ProcKey, Signals)> =
                    cands.iter().map(|(p, s)| (p.key(), *s)).collect();
                classify_relative(&items)
            }
        };
        let mut next: BTreeMap<ProcKey, Smoother> = BTreeMap::new();
        let mut out = Vec::with_capacity(cands.len());
        for ((p, s), raw) in cands.into_iter().zip(raws) {
            let key = p.key();
            let mut sm = self.smoothers.remove(&key).unwrap_or_default();
            let class = sm.push(raw, cfg.smoothing_intervals);
            next.insert(key, sm);
            out.push(Classified {
                key,
                comm: p.comm.to_string(),
                class,
                raw,
                signals: s,
            });
        }
        self.smoothers = next;
        out
    }

    /// Convenience: classify every process of an observation.
    pub fn update_obs(
        &mut self,
        obs: &Observation,
        cfg: &ClassifyConfig,
        machine: Option<&str>,
    ) -> Vec<Classified> {
        self.update(obs.iter_procs(), cfg, machine)
    }
}

fn si(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.1}")
    }
}

/// One line for `placer top`: the class and the rates behind it.
pub fn describe(c: &Classified, basis: Basis) -> String {
    let u = basis.unit();
    let bf = if c.signals.proxy {
        "LLC misses (buffer-full proxy)"
    } else {
        "buffer-full"
    };
    let mut s = format!(
        "{} (raw {}): {bf} {}{u}, LLC refs {}{u}",
        c.class,
        c.raw.number(),
        si(c.signals.buffer_full),
        si(c.signals.llc_references)
    );
    if let Some(p) = c.signals.l2_prefetch {
        s.push_str(&format!(", L2 prefetch {}{u}", si(p)));
    }
    if let Some(b) = c.signals.mem_bandwidth_bytes_per_s {
        s.push_str(&format!(", mem {}B/s", si(b)));
    }
    s
}

/// One interval's classes for a CLI (`placer top`): (pid, comm, [`describe`] line) of every
/// classifiable process, without smoothing history. Empty without counters.
pub fn class_lines(
    obs: &Observation,
    cfg: &ClassifyConfig,
    machine: Option<&str>,
) -> Vec<(u32, String, String)> {
    Classifier::new()
        .update_obs(obs, cfg, machine)
        .into_iter()
        .map(|c| (c.key.pid, c.comm.clone(), describe(&c, cfg.basis)))
        .collect()
}

/// The rule that gave `c` its class, for `placer explain`.
pub fn explain_rule(c: &Classified, cfg: &ClassifyConfig, machine: Option<&str>) -> String {
    let u = cfg.basis.unit();
    let s = &c.signals;
    let rule = match cfg.mode {
        Mode::Threshold => {
            let t = cfg.thresholds_for(machine);
            match c.raw {
                Group::Aggressive => format!(
                    "buffer-full {}{u} >= threshold {}{u} -> Group 1",
                    si(s.buffer_full),
                    si(t.buffer_full)
                ),
                Group::Sensitive => format!(
                    "buffer-full {}{u} < {}{u} and LLC refs {}{u} >= {}{u} -> Group 2",
                    si(s.buffer_full),
                    si(t.buffer_full),
                    si(s.llc_references),
                    si(t.llc_references)
                ),
                Group::Insensitive => format!(
                    "buffer-full {}{u} < {}{u} and LLC refs {}{u} < {}{u} -> Group 3",
                    si(s.buffer_full),
                    si(t.buffer_full),
                    si(s.llc_references),
                    si(t.llc_references)
                ),
            }
        }
        Mode::Relative => match c.raw {
            Group::Aggressive => format!(
                "buffer-full {}{u} is in the top third of running apps -> Group 1",
                si(s.buffer_full)
            ),
            Group::Sensitive => format!(
                "not top third by buffer-full; LLC refs {}{u} in the top third of the rest -> Group 2",
                si(s.llc_references)
            ),
            Group::Insensitive => "neither top third by buffer-full nor by LLC references -> Group 3".to_string(),
        },
    };
    if c.class == c.raw {
        format!("{rule}; class {}", c.class)
    } else {
        format!(
            "{rule}; class held at {} (majority of the last {} intervals)",
            c.class, cfg.smoothing_intervals
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cpuset::CpuSet;

    /// The paper's 11 workloads with their group, and rates built in the paper's
    /// proportions (the same numbers as traces/seed003-paper-groups.jsonl):
    /// (name, group, buffer_full/s, llc_references/s, l2_prefetch/s, mem bytes/s).
    pub(crate) const PAPER: &[(&str, u8, f64, f64, f64, f64)] = &[
        ("lbm", 1, 9.0e7, 1.0e8, 6.0e7, 5.5e9),
        ("libquantum", 1, 7.5e7, 9.0e7, 5.2e7, 4.8e9),
        ("lu.B", 1, 6.0e7, 8.0e7, 4.5e7, 4.2e9),
        ("sphinx", 2, 2.0e6, 1.8e8, 2.0e7, 1.2e9),
        ("omnetpp", 2, 1.2e6, 2.1e8, 6.0e6, 0.9e9),
        ("streamcluster", 2, 1.5e6, 1.6e8, 8.0e6, 1.5e9),
        ("sp.B", 3, 4.0e6, 6.0e7, 3.5e7, 3.2e9),
        ("ua.B", 3, 3.5e6, 5.5e7, 3.0e7, 2.8e9),
        ("canneal", 3, 0.8e6, 2.5e7, 3.0e6, 1.1e9),
        ("ferret", 3, 0.3e6, 1.2e7, 2.0e6, 0.5e9),
        ("gromacs", 3, 0.1e6, 5.0e6, 1.0e6, 0.2e9),
    ];

    pub(crate) fn group_of(n: u8) -> Group {
        match n {
            1 => Group::Aggressive,
            2 => Group::Sensitive,
            _ => Group::Insensitive,
        }
    }

    pub(crate) fn proc_with(pid: u32, comm: &str, bf: f64, llc: f64) -> ProcObs {
        let mut rates = CounterRates {
            coverage: 1.0,
            ..Default::default()
        };
        rates.per_s.insert(BUFFER_FULL.into(), bf);
        rates.per_s.insert(LLC_REFERENCES.into(), llc);
        rates.per_s.insert(CYCLES.into(), 2.93e9);
        let mut p = crate::counter_trace::trace_proc(
            pid,
            comm,
            1.0,
            CpuSet::first_n(8),
            Some(0),
            Some(rates),
        );
        p.start_time_ticks = 100 + pid as u64;
        p
    }

    fn paper_procs() -> Vec<ProcObs> {
        PAPER
            .iter()
            .enumerate()
            .map(|(i, w)| proc_with(1000 + i as u32, w.0, w.2, w.3))
            .collect()
    }

    #[test]
    fn paper_workloads_threshold_mode() {
        let mut c = Classifier::new();
        let out = c.update(paper_procs().iter(), &ClassifyConfig::default(), None);
        assert_eq!(out.len(), 11);
        for (o, w) in out.iter().zip(PAPER) {
            assert_eq!(o.class, group_of(w.1), "{} landed in {}", w.0, o.class);
        }
    }

    #[test]
    fn paper_workloads_relative_mode() {
        let cfg = ClassifyConfig {
            mode: Mode::Relative,
            ..Default::default()
        };
        let mut c = Classifier::new();
        let out = c.update(paper_procs().iter(), &cfg, None);
        for (o, w) in out.iter().zip(PAPER) {
            assert_eq!(o.class, group_of(w.1), "{} landed in {}", w.0, o.class);
        }
        // Per-kcycle basis gives the same groups (all run at full clock here).
        let cfg = ClassifyConfig {
            mode: Mode::Relative,
            basis: Basis::PerKiloCycle,
            ..Default::default()
        };
        let out = Classifier::new().update(paper_procs().iter(), &cfg, None);
        for (o, w) in out.iter().zip(PAPER) {
            assert_eq!(o.class, group_of(w.1), "{} (per kcycle)", w.0);
        }
        // Per kilo-instruction: a process without an instruction count is not classified;
        // with one, the signal is divided by it.
        let cfg = ClassifyConfig {
            basis: Basis::PerKiloInstruction,
            ..Default::default()
        };
        assert!(Classifier::new()
            .update(paper_procs().iter(), &cfg, None)
            .is_empty());
        let mut p = proc_with(1, "lbm", 9.0e7, 1.0e8);
        p.counters
            .as_mut()
            .unwrap()
            .per_s
            .insert(INSTRUCTIONS.into(), 1.8e9);
        let c = &Classifier::new().update([&p], &cfg, None)[0];
        assert_eq!(c.signals.buffer_full, 50.0);
    }

    #[test]
    fn relative_nine_apps_three_each() {
        // Drop sp.B and ferret: 9 apps; any 9 distinct rates must split 3/3/3.
        let procs: Vec<ProcObs> = paper_procs()
            .into_iter()
            .filter(|p| &*p.comm != "sp.B" && &*p.comm != "ferret")
            .collect();
        assert_eq!(procs.len(), 9);
        let cfg = ClassifyConfig {
            mode: Mode::Relative,
            ..Default::default()
        };
        let out = Classifier::new().update(procs.iter(), &cfg, None);
        let count = |g| out.iter().filter(|c| c.class == g).count();
        assert_eq!(count(Group::Aggressive), 3);
        assert_eq!(count(Group::Sensitive), 3);
        assert_eq!(count(Group::Insensitive), 3);
        // And the same 3/3/3 when every app has identical rates (ties by pid).
        let same: Vec<ProcObs> = (0..9).map(|i| proc_with(i, "x", 1e6, 1e6)).collect();
        let out = Classifier::new().update(same.iter(), &cfg, None);
        let count = |g| out.iter().filter(|c| c.class == g).count();
        assert_eq!(
            (
                count(Group::Aggressive),
                count(Group::Sensitive),
                count(Group::Insensitive)
            ),
            (3, 3, 3)
        );
    }

    #[test]
    fn smoothing_holds_through_one_interval_spike() {
        let cfg = ClassifyConfig::default();
        let mut c = Classifier::new();
        let calm = proc_with(7, "canneal", 0.8e6, 2.5e7);
        let spike = proc_with(7, "canneal", 5.0e8, 2.5e7);
        for _ in 0..3 {
            assert_eq!(c.update([&calm], &cfg, None)[0].class, Group::Insensitive);
        }
        let during = &c.update([&spike], &cfg, None)[0];
        assert_eq!(during.raw, Group::Aggressive, "the spike is seen");
        assert_eq!(
            during.class,
            Group::Insensitive,
            "but does not flip the class"
        );
        for _ in 0..2 {
            assert_eq!(c.update([&calm], &cfg, None)[0].class, Group::Insensitive);
        }
        // A lasting phase change does flip it, after floor(K/2)+1 = 2 intervals.
        assert_eq!(c.update([&spike], &cfg, None)[0].class, Group::Insensitive);
        assert_eq!(c.update([&spike], &cfg, None)[0].class, Group::Aggressive);
        // Without smoothing (K = 1) the spike flips it at once.
        let k1 = ClassifyConfig {
            smoothing_intervals: 1,
            ..Default::default()
        };
        let mut c = Classifier::new();
        c.update([&calm], &k1, None);
        assert_eq!(c.update([&spike], &k1, None)[0].class, Group::Aggressive);
    }

    #[test]
    fn llc_misses_stand_in_for_buffer_full() {
        let mut p = proc_with(1, "lbm", 0.0, 1.0e8);
        let r = p.counters.as_mut().unwrap();
        r.per_s.remove(BUFFER_FULL);
        r.per_s.insert(LLC_MISSES.into(), 8.6e7);
        let c = &Classifier::new().update([&p], &ClassifyConfig::default(), None)[0];
        assert!(c.signals.proxy);
        assert_eq!(c.class, Group::Aggressive);
        assert!(describe(c, Basis::PerS).contains("proxy"));
    }

    #[test]
    fn processes_without_counters_or_cpu_are_not_classified() {
        let mut idle = proc_with(1, "idle", 9e9, 9e9);
        idle.cpu_share = 0.1;
        let mut blind = proc_with(2, "blind", 0.0, 0.0);
        blind.counters = None;
        let out = Classifier::new().update([&idle, &blind], &ClassifyConfig::default(), None);
        assert!(out.is_empty());
    }

    #[test]
    fn per_machine_thresholds_apply() {
        let mut cfg = ClassifyConfig::default();
        cfg.per_machine.insert(
            "xeon-e5-2697x2".into(),
            Thresholds {
                buffer_full: 1e9,
                llc_references: 1e9,
            },
        );
        let p = proc_with(1, "lbm", 9.0e7, 1.0e8);
        let a = Classifier::new().update([&p], &cfg, Some("machine:xeon-x5570x2"));
        assert_eq!(a[0].class, Group::Aggressive);
        let b = Classifier::new().update([&p], &cfg, Some("machine:xeon-e5-2697x2"));
        assert_eq!(b[0].class, Group::Insensitive);
        assert!(cfg.validate().is_ok());
        let bad = ClassifyConfig {
            smoothing_intervals: 0,
            ..Default::default()
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn describe_and_explain_name_the_numbers() {
        let cfg = ClassifyConfig::default();
        let p = proc_with(1, "lbm", 9.0e7, 1.0e8);
        let c = &Classifier::new().update([&p], &cfg, None)[0];
        let d = describe(c, cfg.basis);
        assert!(d.contains("G1 aggressive") && d.contains("90.00M/s"), "{d}");
        let e = explain_rule(c, &cfg, None);
        assert!(e.contains(">= threshold 20.00M/s"), "{e}");
        let obs = Observation {
            procs: vec![
                std::sync::Arc::new(p.clone()),
                std::sync::Arc::new(proc_with(2, "gromacs", 1e5, 5e6)),
            ],
            ..Default::default()
        };
        let lines = class_lines(&obs, &cfg, None);
        assert_eq!(lines.len(), 2);
        assert!(lines[1].2.starts_with("G3 insensitive"), "{:?}", lines[1]);
    }
}
