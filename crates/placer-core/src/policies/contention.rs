//! Policy `contention` (seed 003, docs/seeds.md, "Application
//! Characteristic-based Divided Scheduling", KSCI 2017): keep aggressive applications away
//! from sensitive ones across last-level-cache domains, from hardware counters.
//!
//! # Algorithm (each interval)
//!
//! 1. Classify the CPU-bound processes with counters into Group 1 aggressive, Group 2
//!    sensitive, Group 3 insensitive ([`crate::classify`]: thresholds or relative ranking,
//!    majority-of-K smoothing).
//! 2. Domains are the LLC domains of the allowed CPUs (a package on the paper's Xeons, a
//!    die on Magny-Cours). A domain's capacity is its number of physical cores (one app per
//!    core, as in the paper's runs); with more apps than cores the capacities are scaled up
//!    proportionally.
//! 3. The target placement follows the three cases of the paper's Fig. 7:
//!    - **Group 1 and Group 2 present (cases 1 and 3)**: Group 2 goes to the fewest domains
//!      that hold it (`k2`), the "protected side", shared only with Group 3; Group 1 goes to
//!      the other `D - k2` domains, spread evenly (counts differ by at most one); Group 3
//!      fills free cores anywhere. This is "separate Group 1 from Group 2" and "protect
//!      Group 2 together with Group 3".
//!    - **Only Group 1 (case 2)**: Group 1 spread evenly over all domains, Group 3 fills
//!      the free cores.
//!    - **No Group 1**: nothing contends; no action.
//!
//!    A separation exists when Group 1 fits in the `D - k2` other domains; when it does not,
//!    the policy falls back to case 2 (spread Group 1) and says so.
//! 4. **Only act when contention is real.** The paper's Basic 8 (2 Group 1 + 6 Group 3 on
//!    the 8-core machine) gained nothing or lost: gathering two aggressive apps created the
//!    contention it meant to avoid. So the policy acts only when the *current* placement has
//!    (a) a domain where a Group 1 shares the LLC with a Group 2 while a separation exists,
//!    or (b) a domain with at least `min_group1_sharing` (default 2) Group 1 apps where the
//!    target has fewer in every domain; and, when per-process memory bandwidth is measured
//!    and `min_domain_bandwidth_bytes_per_s > 0`, that domain's summed bandwidth reaches it
//!    in a strict majority of the last K intervals (K = `smoothing_intervals`, as for the
//!    classes: [`hold_domain_bandwidth`]), so one interval's spike does not move anything.
//! 5. **Move as few processes as possible.** Among all placements satisfying the rule of
//!    step 3, the planner picks one that keeps the most processes in their current domain:
//!    it enumerates the protected side (all `C(D, k2)` choices up to 5,000, else the `k2`
//!    domains holding the most Group 2), gives the uneven Group 1 slots to the domains that
//!    already hold the most Group 1, keeps Group 2 and Group 3 where they are up to the
//!    residual capacity, and moves only the rest (a Group 3 is evicted from the protected
//!    side only when a moving Group 2 needs its core).
//!
//! # Invariants (tested)
//! - I1 separation: when a separation exists, no Group 2 shares an LLC domain with a Group 1
//!   in the target.
//! - I2 spread: Group 1 counts over the Group 1 side differ by at most one.
//! - I3 capacity: no domain holds more managed apps than its (scaled) capacity.
//! - I4 minimal moves: the number of processes whose domain changes equals the minimum over
//!   all placements satisfying I1-I3 with the same `k2` (checked by brute force on the
//!   fixture machines 2x4, 2x14 and Magny-Cours).
//! - I5 stability: a placement that already satisfies the rule moves nothing; no action
//!   is planned unless contention is real (step 4).
//!
//! Processes are pinned to their target domain's CPUs (not to one core): the LLC and the
//! memory controller are the contended resources, and the kernel balances within a domain.
//! Memory is left to the kernel's local-first policy, as in the paper.

use crate::catalogue;
use crate::classify::{self, Classified, Classifier, ClassifyConfig, Group};
use crate::cpuset::CpuSet;
use crate::observation::Observation;
use crate::plan::{Action, Outcome, Plan};
use crate::policy::{Policy, PolicyState};
use crate::sample::{ProcKey, SampleRequest, SourceKind, SourceStatus};
use crate::scope::Scope;
use crate::topology::Topology;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

pub const NAME: &str = KIND.name();
/// This policy's identity in plans, notes, verdicts and back-off keys.
const KIND: crate::policies::PolicyKind = crate::policies::PolicyKind::Contention;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContentionConfig {
    /// Classifier settings (`[contention.classify]`).
    pub classify: ClassifyConfig,
    /// Machine model whose per-machine thresholds apply (`xeon-x5570x2`); empty = use the
    /// topology's `machine:NAME` source when it has one, else the default thresholds.
    pub machine: String,
    /// This many Group 1 apps in one LLC domain count as contention (when spreading them
    /// lowers the count).
    pub min_group1_sharing: usize,
    /// Sufficient contention (the paper's Fig. 7 discussion: isolating pays only under
    /// enough contention): when memory bandwidth is measured per process, a contended
    /// domain must also move at least this many bytes/s (summed over its apps) in a strict
    /// majority of the last `smoothing_intervals` intervals before the policy acts, in
    /// every case of Fig. 7: `"machine"` (the default) takes the machine's own threshold
    /// from the catalogue ([`catalogue::sufficient_contention_bytes_per_s`]), else
    /// [`DEFAULT_MIN_DOMAIN_BANDWIDTH`]; a number of bytes/s overrides both; 0 = off.
    pub min_domain_bandwidth_bytes_per_s: DomainBandwidth,
    /// A process moved to another NUMA node has its memory follow it: `BindMemory` to the
    /// new node each interval until its pages are there (bounded by
    /// `migrate_max_bytes_per_s`), journaled and restored like every knob.
    pub memory_follows: bool,
    /// Most bytes migrated per second, over all processes (numa-local's mechanism).
    pub migrate_max_bytes_per_s: u64,
}

/// The sufficient-contention threshold as configured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DomainBandwidth {
    /// `"machine"`: the machine's own threshold.
    Machine(MachineOwn),
    /// Bytes/s of a domain; 0 = off.
    BytesPerS(f64),
}

/// The word `"machine"` of [`DomainBandwidth::Machine`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MachineOwn {
    Machine,
}

/// Sufficient-contention threshold, bytes/s of a domain, on a machine the catalogue has no
/// memory facts for: 8 GB/s. On the 16-core
/// x86 measurement of issue 14 (docs/contention.md, "Harm model"), a pointer chase slowed 4%
/// beside ~16 GB/s of streaming co-runners and barely at all below; on the paper's X5570
/// (25 GB/s per node, CAL D) 8 GB/s is a third of the node, where the loaded-latency curve
/// starts to rise.
pub const DEFAULT_MIN_DOMAIN_BANDWIDTH: f64 = 8e9;

impl Default for ContentionConfig {
    fn default() -> Self {
        ContentionConfig {
            classify: ClassifyConfig::default(),
            machine: String::new(),
            min_group1_sharing: 2,
            min_domain_bandwidth_bytes_per_s: DomainBandwidth::Machine(MachineOwn::Machine),
            memory_follows: true,
            migrate_max_bytes_per_s: 64 << 20,
        }
    }
}

impl ContentionConfig {
    /// Checks values; Err((field, message)).
    pub fn validate(&self) -> Result<(), (String, String)> {
        self.classify
            .validate()
            .map_err(|(f, m)| (format!("classify.{f}"), m))?;
        if self.min_group1_sharing < 2 {
            return Err((
                "min_group1_sharing".into(),
                "must be at least 2 (one app alone does not contend with itself)".into(),
            ));
        }
        let b = match self.min_domain_bandwidth_bytes_per_s {
            DomainBandwidth::BytesPerS(b) => b,
            DomainBandwidth::Machine(_) => 0.0,
        };
        if b.is_nan() || b < 0.0 {
            return Err((
                "min_domain_bandwidth_bytes_per_s".into(),
                "must be >= 0".into(),
            ));
        }
        Ok(())
    }
}

/// Which case of Fig. 7 the target follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Case {
    /// Cases 1 and 3: Group 1 apart from Group 2 (which shares with Group 3).
    Separate,
    /// Case 2: only Group 1 (or no separation possible): spread Group 1.
    Spread,
    /// No Group 1: nothing to do.
    NoAggressor,
}

/// One app to place: its class and its current domain (None: unknown or spanning).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item {
    pub group: Group,
    pub current: Option<usize>,
}

/// The planner's answer: a target domain per item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub target: Vec<usize>,
    pub case: Case,
    /// For `Separate`: the protected side (domains allowed to hold Group 2).
    pub protected: Vec<usize>,
    /// True when Group 1 and Group 2 were both present but could not be separated.
    pub separation_impossible: bool,
}

impl Assignment {
    /// Items whose domain changes (an unknown current domain counts as a move).
    pub fn moves(&self, items: &[Item]) -> usize {
        items
            .iter()
            .zip(&self.target)
            .filter(|(it, &t)| it.current != Some(t))
            .count()
    }
}

/// Capacities scaled up when there are more apps than cores (proportionally, rounding up).
pub fn scaled_caps(caps: &[usize], n: usize) -> Vec<usize> {
    let total: usize = caps.iter().sum();
    if total == 0 || n <= total {
        return caps.to_vec();
    }
    caps.iter().map(|&c| (c * n).div_ceil(total)).collect()
}

/// Fewest domains whose capacities hold `n` (largest first).
pub fn min_domains_for(caps: &[usize], n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let mut c: Vec<usize> = caps.to_vec();
    c.sort_unstable_by(|a, b| b.cmp(a));
    let mut sum = 0;
    for (i, x) in c.iter().enumerate() {
        sum += x;
        if sum >= n {
            return i + 1;
        }
    }
    c.len() + 1
}

fn counts(items: &[Item], d: usize) -> Vec<[usize; 3]> {
    let mut v = vec![[0usize; 3]; d];
    for it in items {
        if let Some(c) = it.current {
            if c < d {
                v[c][it.group.number() as usize - 1] += 1;
            }
        }
    }
    v
}

/// Even spread of `n` Group 1 apps over `side` (counts differ by at most one, within
/// capacity), the extra ones going where Group 1 already is.
fn spread_g1(n: usize, side: &[usize], caps: &[usize], cur: &[[usize; 3]]) -> Option<Vec<usize>> {
    let mut t = vec![0usize; caps.len()];
    for _ in 0..n {
        let best = side
            .iter()
            .copied()
            .filter(|&d| t[d] < caps[d])
            .min_by(|&a, &b| {
                t[a].cmp(&t[b])
                    .then((cur[b][0] as i64 - t[b] as i64).cmp(&(cur[a][0] as i64 - t[a] as i64)))
                    .then(a.cmp(&b))
            })?;
        t[best] += 1;
    }
    Some(t)
}

/// Count-level evaluation of one choice: (stays, t1, s2, s3, evictions).
struct Eval {
    stays: usize,
    t1: Vec<usize>,
    keep2: Vec<usize>,
    keep3: Vec<usize>,
}

#[allow(clippy::needless_range_loop)]
fn evaluate(
    protected: &[bool],
    t1: Vec<usize>,
    caps: &[usize],
    cur: &[[usize; 3]],
    g2: usize,
) -> Option<Eval> {
    let d = caps.len();
    let mut keep2 = vec![0; d];
    let mut keep3 = vec![0; d];
    let mut stays = 0;
    let mut free_prot = 0;
    for i in 0..d {
        let r = caps[i] - t1[i];
        stays += cur[i][0].min(t1[i]);
        if protected[i] {
            keep2[i] = cur[i][1].min(r);
        }
        keep3[i] = cur[i][2].min(r - keep2[i]);
        if protected[i] {
            free_prot += r - keep2[i] - keep3[i];
        }
    }
    let prot_cap: usize = (0..d)
        .filter(|&i| protected[i])
        .map(|i| caps[i] - t1[i])
        .sum();
    if prot_cap < g2 {
        return None;
    }
    let movers2 = g2 - keep2.iter().sum::<usize>();
    // Evict Group 3 stayers from the protected side when moving Group 2 needs their cores.
    let mut need = movers2.saturating_sub(free_prot);
    for i in 0..d {
        if need == 0 {
            break;
        }
        if protected[i] {
            let e = keep3[i].min(need);
            keep3[i] -= e;
            need -= e;
        }
    }
    stays += keep2.iter().sum::<usize>() + keep3.iter().sum::<usize>();
    Some(Eval {
        stays,
        t1,
        keep2,
        keep3,
    })
}

fn combinations(n: usize, k: usize, limit: usize) -> Option<Vec<Vec<usize>>> {
    let mut out = Vec::new();
    let mut c: Vec<usize> = (0..k).collect();
    if k > n {
        return Some(out);
    }
    loop {
        out.push(c.clone());
        if out.len() > limit {
            return None;
        }
        let mut i = k;
        loop {
            if i == 0 {
                return Some(out);
            }
            i -= 1;
            if c[i] < n - k + i {
                break;
            }
        }
        c[i] += 1;
        for j in i + 1..k {
            c[j] = c[j - 1] + 1;
        }
    }
}

/// The minimal-move target (see the module doc). `caps` are per-domain core counts.
pub fn assign(caps: &[usize], items: &[Item]) -> Assignment {
    let d = caps.len();
    let caps = scaled_caps(caps, items.len());
    let cur = counts(items, d);
    let n = |g: Group| items.iter().filter(|i| i.group == g).count();
    let (g1, g2) = (n(Group::Aggressive), n(Group::Sensitive));
    let keep_all = || Assignment {
        target: items.iter().map(|i| i.current.unwrap_or(0)).collect(),
        case: Case::NoAggressor,
        protected: vec![],
        separation_impossible: false,
    };
    if g1 == 0 || d == 0 {
        return keep_all();
    }
    let all: Vec<usize> = (0..d).collect();
    let mut best: Option<(Eval, Vec<usize>)> = None;
    let mut separation_impossible = false;
    if g2 > 0 {
        let k2 = min_domains_for(&caps, g2);
        let sets = combinations(d, k2, 5000).unwrap_or_else(|| {
            let mut by: Vec<usize> = all.clone();
            by.sort_by(|&a, &b| cur[b][1].cmp(&cur[a][1]).then(a.cmp(&b)));
            let mut s: Vec<usize> = by[..k2.min(d)].to_vec();
            s.sort_unstable();
            vec![s]
        });
        for s in sets {
            let prot: Vec<bool> = (0..d).map(|i| s.contains(&i)).collect();
            let side: Vec<usize> = all.iter().copied().filter(|&i| !prot[i]).collect();
            let Some(t1) = spread_g1(g1, &side, &caps, &cur) else {
                continue;
            };
            if let Some(e) = evaluate(&prot, t1, &caps, &cur, g2) {
                if best.as_ref().is_none_or(|(b, _)| e.stays > b.stays) {
                    best = Some((e, s));
                }
            }
        }
        separation_impossible = best.is_none();
    }
    let (eval, protected, case) = match best {
        Some((e, s)) => (e, s, Case::Separate),
        None => {
            // Case 2 (or no separation): spread Group 1 over every domain; Group 2 is
            // treated like Group 3.
            let t1 = spread_g1(g1, &all, &caps, &cur).unwrap_or_else(|| vec![0; d]);
            let prot = vec![true; d];
            let e = evaluate(&prot, t1, &caps, &cur, g2).expect("capacity covers all apps");
            (e, vec![], Case::Spread)
        }
    };
    let prot: Vec<bool> = (0..d)
        .map(|i| case == Case::Spread || protected.contains(&i))
        .collect();
    build(
        items,
        &caps,
        &eval,
        &prot,
        case,
        protected,
        separation_impossible,
    )
}

fn build(
    items: &[Item],
    caps: &[usize],
    e: &Eval,
    prot: &[bool],
    case: Case,
    protected: Vec<usize>,
    separation_impossible: bool,
) -> Assignment {
    let d = caps.len();
    let mut target: Vec<Option<usize>> = vec![None; items.len()];
    let mut load = vec![0usize; d];
    let mut kept = [vec![0usize; d], vec![0usize; d], vec![0usize; d]];
    let quota = [&e.t1, &e.keep2, &e.keep3];
    // Keep stayers first, in item order.
    for (i, it) in items.iter().enumerate() {
        let g = it.group.number() as usize - 1;
        if let Some(c) = it.current.filter(|&c| c < d) {
            if kept[g][c] < quota[g][c] {
                kept[g][c] += 1;
                load[c] += 1;
                target[i] = Some(c);
            }
        }
    }
    // Movers: Group 1 to its remaining slots, Group 2 to protected free cores, Group 3 to
    // any free core (protected side first, beside Group 2, as in Fig. 7 case 3).
    let mut g1_left: Vec<usize> = (0..d).map(|c| e.t1[c] - kept[0][c]).collect();
    for g in [Group::Aggressive, Group::Sensitive, Group::Insensitive] {
        for (i, it) in items.iter().enumerate() {
            if it.group != g || target[i].is_some() {
                continue;
            }
            let pick = match g {
                Group::Aggressive => (0..d).find(|&c| g1_left[c] > 0),
                Group::Sensitive => (0..d)
                    .filter(|&c| prot[c] && load[c] + g1_left[c] < caps[c])
                    .max_by_key(|&c| (caps[c] - load[c] - g1_left[c], std::cmp::Reverse(c))),
                Group::Insensitive => (0..d)
                    .filter(|&c| load[c] + g1_left[c] < caps[c])
                    .max_by_key(|&c| {
                        (
                            prot[c],
                            caps[c] - load[c] - g1_left[c],
                            std::cmp::Reverse(c),
                        )
                    }),
            };
            let c = pick.unwrap_or(0);
            if g == Group::Aggressive {
                g1_left[c] = g1_left[c].saturating_sub(1);
            }
            load[c] += 1;
            target[i] = Some(c);
        }
    }
    Assignment {
        target: target.into_iter().map(|t| t.unwrap_or(0)).collect(),
        case,
        protected,
        separation_impossible,
    }
}

#[allow(clippy::needless_range_loop)] // indices name domains in several arrays
/// Whether the current placement has real contention (module doc, step 4); the reason.
pub fn contention_reason(
    caps: &[usize],
    items: &[Item],
    target: &Assignment,
    min_group1_sharing: usize,
    domain_bw: Option<&[f64]>,
    min_bw: f64,
) -> Option<String> {
    let d = caps.len();
    let cur = counts(items, d);
    let mut tgt = vec![[0usize; 3]; d];
    for (it, &t) in items.iter().zip(&target.target) {
        tgt[t][it.group.number() as usize - 1] += 1;
    }
    let bw_ok = |i: usize| match domain_bw {
        Some(bw) if min_bw > 0.0 => bw.get(i).copied().unwrap_or(0.0) >= min_bw,
        _ => true,
    };
    let max_t1 = tgt.iter().map(|c| c[0]).max().unwrap_or(0);
    for i in 0..d {
        if target.case == Case::Separate && cur[i][0] > 0 && cur[i][1] > 0 && bw_ok(i) {
            return Some(format!(
                "domain {i} holds {} Group 1 and {} Group 2 apps sharing its LLC",
                cur[i][0], cur[i][1]
            ));
        }
        if cur[i][0] >= min_group1_sharing && cur[i][0] > max_t1 && bw_ok(i) {
            return Some(format!(
                "domain {i} holds {} Group 1 apps; spreading leaves at most {max_t1} per domain",
                cur[i][0]
            ));
        }
    }
    None
}

/// The private state: the classifier and the last classification (for top/explain).
#[derive(Debug, Default)]
pub struct ContentionState {
    pub classifier: Classifier,
    pub last: Vec<Classified>,
    /// Processes moved to another node whose memory is following them.
    pub following: BTreeMap<ProcKey, Follow>,
    /// Processes whose memory this policy moved (a `BindMemory` planned): when the engine
    /// undoes a move on its verdict, their memory goes back too.
    pub moved_memory: std::collections::BTreeSet<ProcKey>,
    /// Per LLC domain, its measured memory bandwidth over the last K intervals (newest
    /// last; K = the classifier's `smoothing_intervals`), for the held value of step 4.
    pub domain_bw: Vec<VecDeque<f64>>,
}

/// Step 4's bandwidth, held like the classes: per domain, the bandwidth it reached in a
/// strict majority of the last `k` intervals (the `floor(k/2) + 1`-th largest of them,
/// intervals not yet seen counting as 0). A domain passes the threshold only when a
/// majority of the last `k` intervals did, so a one-interval spike cannot trigger a
/// separation and a one-interval dip cannot end one; a real change counts after
/// `floor(k/2) + 1` intervals. `history` is reset when the number of domains changes.
pub fn hold_domain_bandwidth(history: &mut Vec<VecDeque<f64>>, bw: &[f64], k: usize) -> Vec<f64> {
    let k = k.max(1);
    if history.len() != bw.len() {
        *history = vec![VecDeque::with_capacity(k); bw.len()];
    }
    history
        .iter_mut()
        .zip(bw)
        .map(|(h, &b)| {
            crate::stats::push_bounded(h, b, k);
            let mut v: Vec<f64> = h.iter().copied().collect();
            v.resize(k, 0.0);
            v.sort_by(|a, b| b.total_cmp(a));
            v[k / 2]
        })
        .collect()
}

/// Intervals a process's memory is followed when its pages per node are not measured.
pub const FOLLOW_BLIND_INTERVALS: u32 = 10;

/// The policy object.
#[derive(Debug, Clone, Default)]
pub struct Contention {
    pub cfg: ContentionConfig,
    /// Which processes may be classified and placed (the engine also drops out-of-scope
    /// actions; filtering here keeps them out of the counts too).
    pub scope: Scope,
    pub self_pid: u32,
    /// Some process's memory is being followed: only then are pages per node sampled
    /// (reading every process's numa_maps is most of a cycle's cost).
    following: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Contention {
    pub fn new(cfg: ContentionConfig) -> Self {
        Contention {
            cfg,
            ..Default::default()
        }
    }

    pub fn with_scope(mut self, scope: Scope, self_pid: u32) -> Self {
        self.scope = scope;
        self.self_pid = self_pid;
        self
    }

    fn machine<'a>(&'a self, topo: &'a Topology) -> Option<&'a str> {
        if !self.cfg.machine.is_empty() {
            Some(self.cfg.machine.as_str())
        } else {
            topo.source.strip_prefix("machine:")
        }
    }

    /// The sufficient-contention threshold in force on `topo`, bytes/s: the config's
    /// override, else the machine's own (the traffic at which its loaded-latency curve
    /// costs the verdicts' default minimum effect), else [`DEFAULT_MIN_DOMAIN_BANDWIDTH`].
    pub fn min_domain_bandwidth(&self, topo: &Topology) -> f64 {
        match self.cfg.min_domain_bandwidth_bytes_per_s {
            DomainBandwidth::BytesPerS(b) => b,
            DomainBandwidth::Machine(_) => self
                .machine(topo)
                .and_then(catalogue::Machine::parse)
                .and_then(|m| {
                    catalogue::sufficient_contention_bytes_per_s(
                        m,
                        crate::catalogue::DEFAULT_MIN_EFFECT,
                    )
                })
                .unwrap_or(DEFAULT_MIN_DOMAIN_BANDWIDTH),
        }
    }

    /// LLC domains restricted to the allowed CPUs, with their core counts.
    pub fn domains(topo: &Topology) -> Vec<(CpuSet, usize)> {
        let allowed = topo.allowed();
        let cores = topo.cores();
        topo.llc_domains()
            .into_iter()
            .map(|d| d.intersection(&allowed))
            .filter(|d| !d.is_empty())
            .map(|d| {
                let n = cores.iter().filter(|c| c.intersects(&d)).count().max(1);
                (d, n)
            })
            .collect()
    }

    /// The last classification (for `placer top` / `placer explain`).
    pub fn last_classes(state: &mut PolicyState<ContentionState>) -> &[Classified] {
        &state.private.last
    }
}

/// `p`'s resident pages on nodes other than `node`.
fn off_node_pages(p: &crate::observation::ProcObs, node: u32) -> u64 {
    p.numa_pages
        .iter()
        .filter(|(n, _)| **n != node)
        .map(|(_, c)| *c)
        .sum()
}

/// A process whose memory is following it to another node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Follow {
    /// The node its memory goes to.
    pub node: u32,
    /// Intervals spent following without page counts.
    pub blind: u32,
    /// Its pages off `node` when it last took the migration budget (`None`: it did not
    /// take it last interval, or its pages were not counted). Pages the kernel will not
    /// move (shared, pinned, unmapped by the NUMA balancer) would otherwise hold the
    /// budget for ever, and every process behind it in line would wait for ever.
    pub off_pages_at_take: Option<u64>,
}

/// Starts following `key`'s memory to `node`; `off_pages`: its pages elsewhere, where
/// counted, when this interval's budget went to it.
fn st_following(
    state: &mut PolicyState<ContentionState>,
    key: ProcKey,
    node: u32,
    off_pages: Option<u64>,
) {
    state.private.following.insert(
        key,
        Follow {
            node,
            blind: 0,
            off_pages_at_take: off_pages,
        },
    );
    state.private.moved_memory.insert(key);
}

fn domain_of(doms: &[(CpuSet, usize)], allowed: &CpuSet, last_cpu: Option<u32>) -> Option<usize> {
    if let Some(i) = doms
        .iter()
        .position(|(d, _)| !allowed.is_empty() && allowed.is_subset(d))
    {
        return Some(i);
    }
    let c = last_cpu?;
    doms.iter().position(|(d, _)| d.contains(c))
}

impl Policy for Contention {
    type State = ContentionState;

    fn kind(&self) -> crate::policies::PolicyKind {
        KIND
    }

    fn wants(&self) -> SampleRequest {
        SampleRequest {
            counters: true,
            // Where each moved process's pages are, to migrate them until they are home;
            // only while some are followed.
            numa_pages: self.cfg.memory_follows
                && self.following.load(std::sync::atomic::Ordering::Relaxed),
            ..Default::default()
        }
    }

    fn disabled_reason(&self, topo: &Topology, sources: &SourceStatus) -> Option<String> {
        if !sources.has(SourceKind::PerfHw) {
            let why = sources
                .why_missing(SourceKind::PerfHw)
                .unwrap_or("the host reports no perf_hw source");
            return Some(format!("no hardware performance counters ({why})"));
        }
        if Self::domains(topo).len() < 2 {
            return Some("fewer than two LLC domains: nothing to separate".into());
        }
        None
    }

    fn plan(
        &self,
        topo: &Topology,
        obs: &Observation,
        state: &mut PolicyState<ContentionState>,
    ) -> Plan {
        let mut plan = Plan::default();
        let machine = self.machine(topo).map(str::to_string);
        let min_bw = self.min_domain_bandwidth(topo);
        // Processes released (lease broken) or held by an earlier policy are not ours.
        let skip: std::collections::BTreeSet<ProcKey> =
            state.released.union(&state.taken).copied().collect();
        // Step 0: a move the engine undid on its verdict (the mix's progress fell; this
        // policy never restores a process itself) is undone whole: the memory that followed
        // goes back too, and is followed no more.
        let (shared, st) = (&state.shared, &mut state.private);
        for r in &shared.last_reports {
            let (Action::RestoreProcess { proc, comm, .. }, Outcome::Done) =
                (&r.planned.action, &r.outcome)
            else {
                continue;
            };
            st.following.remove(proc);
            if st.moved_memory.remove(proc) {
                plan.push(
                    KIND,
                    Action::RestoreMemory { proc: *proc },
                    format!("{comm}'s memory goes back: its move was undone on the verdict"),
                );
            }
        }
        let procs = obs
            .iter_procs()
            .filter(|p| !skip.contains(&p.key()) && self.scope.admits(p, self.self_pid));
        let classes = st
            .classifier
            .update(procs, &self.cfg.classify, machine.as_deref());
        st.last = classes.clone();
        let by_key = obs.index();
        // Step 6: memory follows the processes moved across nodes, within the interval's
        // migration budget.
        let mut budget =
            (self.cfg.migrate_max_bytes_per_s as f64 * obs.interval_s.max(0.0)).round() as u64;
        let mut follow_actions = Vec::new();
        st.following.retain(|key, f| {
            // Only a process still pinned here is followed (a failed pin, a broken lease).
            let (Some(p), true) = (by_key.get(key), shared.held.contains_key(key)) else {
                return false;
            };
            let off_pages = off_node_pages(p, f.node);
            if !p.numa_pages.is_empty() && off_pages == 0 {
                return false;
            }
            // It had the budget last interval and not one page more reached its node: what
            // is left will not move. Stop, so the next in line gets the budget.
            if let (Some(before), false) = (f.off_pages_at_take, p.numa_pages.is_empty()) {
                if off_pages >= before {
                    plan.note(
                        KIND,
                        Some(*key),
                        format!(
                            "{}'s memory follows no more: {off_pages} pages stay off node {}                              (the kernel moved none of them last interval)",
                            p.comm, f.node
                        ),
                    );
                    return false;
                }
            }
            if p.numa_pages.is_empty() {
                f.blind += 1;
                if f.blind > FOLLOW_BLIND_INTERVALS {
                    return false;
                }
            }
            f.off_pages_at_take = None;
            follow_actions.push((*key, p.comm.clone(), f.node, off_pages));
            true
        });
        self.following.store(
            !st.following.is_empty(),
            std::sync::atomic::Ordering::Relaxed,
        );
        for (key, comm, node, off_pages) in follow_actions {
            // The budget is a rate: the first in line takes what is left of it, the others
            // wait for the next interval.
            let take = budget;
            if take == 0 {
                break;
            }
            budget = 0;
            if off_pages > 0 {
                if let Some(f) = st.following.get_mut(&key) {
                    f.off_pages_at_take = Some(off_pages);
                }
            }
            plan.push(
                KIND,
                Action::BindMemory {
                    proc: key,
                    nodes: vec![node],
                    migrate_max_bytes: take,
                },
                format!(
                    "{comm}'s memory follows it to node {node} ({}; at most {} MiB this \
                     interval)",
                    if off_pages > 0 {
                        format!("{off_pages} pages still elsewhere")
                    } else {
                        "pages per node not measured".to_string()
                    },
                    take >> 20
                ),
            );
        }
        let doms = Self::domains(topo);
        if doms.len() < 2 || classes.is_empty() {
            return plan;
        }
        let items: Vec<Item> = classes
            .iter()
            .map(|c| {
                let p = by_key
                    .get(&c.key)
                    .expect("classified from this observation");
                Item {
                    group: c.class,
                    current: domain_of(&doms, &p.allowed_cpus, p.last_cpu),
                }
            })
            .collect();
        let caps: Vec<usize> = doms.iter().map(|d| d.1).collect();
        let a = assign(&caps, &items);
        let mut bw = vec![0.0; doms.len()];
        for (c, it) in classes.iter().zip(&items) {
            if let (Some(d), Some(b)) = (it.current, c.signals.mem_bandwidth_bytes_per_s) {
                bw[d] += b;
            }
        }
        let measured = classes
            .iter()
            .any(|c| c.signals.mem_bandwidth_bytes_per_s.is_some());
        let k = self.cfg.classify.smoothing_intervals.max(1);
        let held = if measured {
            Some(hold_domain_bandwidth(&mut st.domain_bw, &bw, k))
        } else {
            st.domain_bw.clear();
            None
        };
        if !measured && min_bw > 0.0 {
            plan.note(
                KIND,
                None,
                "memory bandwidth is not measured here: the sufficient-contention check \
                 (min_domain_bandwidth_bytes_per_s) cannot run, the group rule alone decides",
            );
        }
        let why = contention_reason(
            &caps,
            &items,
            &a,
            self.cfg.min_group1_sharing,
            held.as_deref(),
            min_bw,
        );
        let why = match (why, &held) {
            (Some(why), Some(h)) if min_bw > 0.0 => Some(format!(
                "{why}; domains moved {} GB/s in a majority of the last {k} intervals \
                 (threshold {:.1})",
                h.iter()
                    .map(|b| format!("{:.1}", b / 1e9))
                    .collect::<Vec<_>>()
                    .join(" / "),
                min_bw / 1e9
            )),
            (why, _) => why,
        };
        for c in &classes {
            plan.note(
                KIND,
                Some(c.key),
                classify::explain_rule(c, &self.cfg.classify, machine.as_deref()),
            );
        }
        let Some(why) = why else {
            plan.note(KIND, None, "no contention to resolve: placement left as is");
            return plan;
        };
        if a.separation_impossible {
            plan.note(
                KIND,
                None,
                "Group 1 and Group 2 cannot be separated on these domains: spreading Group 1",
            );
        }
        for ((c, it), &t) in classes.iter().zip(&items).zip(&a.target) {
            let p = by_key
                .get(&c.key)
                .expect("classified from this observation");
            let cpus = &doms[t].0;
            if it.current == Some(t) && p.allowed_cpus.is_subset(cpus) {
                continue;
            }
            let what = match (a.case, c.class) {
                (Case::Separate, Group::Aggressive) => "apart from Group 2 (Fig. 7 case 1)",
                (Case::Separate, Group::Sensitive) => {
                    "protected with Group 3, away from Group 1 (Fig. 7 case 3)"
                }
                (Case::Spread, Group::Aggressive) => "Group 1 spread (Fig. 7 case 2)",
                _ => "fills a free core",
            };
            let moved = if it.current == Some(t) {
                "kept in".to_string()
            } else {
                "moved to".to_string()
            };
            plan.push(
                KIND,
                Action::PinProcess {
                    proc: c.key,
                    comm: c.comm.clone(),
                    cpus: cpus.clone(),
                },
                format!(
                    "{}; {moved} LLC domain {t} (CPUs {}) {what}; because {why}",
                    classify::describe(c, self.cfg.classify.basis),
                    cpus
                ),
            );
            // A move to another node: the memory follows, or the note says why not.
            let node_of = |d: usize| doms[d].0.first().and_then(|cpu| topo.node_of(cpu));
            let (from, to) = (it.current.and_then(node_of), node_of(t));
            if let (Some(from), Some(to)) = (from, to) {
                if from != to {
                    if !self.cfg.memory_follows {
                        plan.note(
                            KIND,
                            Some(c.key),
                            format!(
                                "memory left on node {from} (memory_follows = false): \
                                 remote until the kernel's NUMA balancing moves it"
                            ),
                        );
                    } else if budget == 0 {
                        plan.note(
                            KIND,
                            Some(c.key),
                            format!(
                                "memory to follow to node {to} from the next interval \
                                 (this interval's migration budget is spent)"
                            ),
                        );
                        st_following(state, c.key, to, None);
                    } else {
                        let take = budget;
                        budget = 0;
                        plan.push(
                            KIND,
                            Action::BindMemory {
                                proc: c.key,
                                nodes: vec![to],
                                migrate_max_bytes: take,
                            },
                            format!(
                                "{}'s memory follows it from node {from} to node {to} (at \
                                 most {} MiB this interval)",
                                c.comm,
                                take >> 20
                            ),
                        );
                        let p = by_key
                            .get(&c.key)
                            .expect("classified from this observation");
                        let off = off_node_pages(p, to);
                        st_following(
                            state,
                            c.key,
                            to,
                            (!p.numa_pages.is_empty() && off > 0).then_some(off),
                        );
                    }
                }
            }
        }
        let following = !state.private.following.is_empty();
        self.following
            .store(following, std::sync::atomic::Ordering::Relaxed);
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::tests::{group_of, proc_with, PAPER};
    use crate::machines::machine;
    use crate::sample::Source;

    fn g(n: u8) -> Group {
        group_of(n)
    }

    /// The rule of step 3 as a predicate, written independently of the planner.
    fn valid(caps: &[usize], items: &[Item], t: &[usize]) -> bool {
        let d = caps.len();
        let caps = scaled_caps(caps, items.len());
        let mut c = vec![[0usize; 3]; d];
        for (it, &x) in items.iter().zip(t) {
            c[x][it.group.number() as usize - 1] += 1;
        }
        if (0..d).any(|i| c[i].iter().sum::<usize>() > caps[i]) {
            return false;
        }
        let g1: usize = c.iter().map(|x| x[0]).sum();
        let g2: usize = c.iter().map(|x| x[1]).sum();
        if g1 == 0 {
            return true;
        }
        let even = |side: &[usize]| {
            let v: Vec<usize> = side.iter().map(|&i| c[i][0]).collect();
            v.iter().max().unwrap_or(&0) <= &(v.iter().min().unwrap_or(&0) + 1)
        };
        if g2 > 0 {
            let k2 = min_domains_for(&caps, g2);
            let sets = combinations(d, k2, usize::MAX).unwrap();
            let ok = sets.iter().any(|s| {
                let side: Vec<usize> = (0..d).filter(|i| !s.contains(i)).collect();
                (0..d).all(|i| s.contains(&i) || c[i][1] == 0)
                    && s.iter().all(|&i| c[i][0] == 0)
                    && even(&side)
            });
            if ok {
                return true;
            }
            // Separation impossible: then spreading over all is the rule.
            let any_sep = sets.iter().any(|s| {
                let side_cap: usize = (0..d).filter(|i| !s.contains(i)).map(|i| caps[i]).sum();
                side_cap >= g1
            });
            if any_sep {
                return false;
            }
        }
        let all: Vec<usize> = (0..d).collect();
        even(&all)
    }

    fn brute_min_moves(caps: &[usize], items: &[Item]) -> Option<usize> {
        let d = caps.len();
        let n = items.len();
        let mut t = vec![0usize; n];
        let mut best: Option<usize> = None;
        loop {
            if valid(caps, items, &t) {
                let m = items
                    .iter()
                    .zip(&t)
                    .filter(|(it, &x)| it.current != Some(x))
                    .count();
                best = Some(best.map_or(m, |b: usize| b.min(m)));
            }
            let mut i = 0;
            loop {
                if i == n {
                    return best;
                }
                t[i] += 1;
                if t[i] < d {
                    break;
                }
                t[i] = 0;
                i += 1;
            }
        }
    }

    fn random_items(r: &mut crate::rng::Rng, n: usize, caps: &[usize]) -> Vec<Item> {
        let mut load = vec![0; caps.len()];
        (0..n)
            .map(|_| {
                let group = g(1 + r.below(3) as u8);
                // Linux-like: somewhere with a free core, else anywhere.
                let mut c = r.below(caps.len());
                for _ in 0..caps.len() {
                    if load[c] < caps[c] {
                        break;
                    }
                    c = (c + 1) % caps.len();
                }
                load[c] += 1;
                Item {
                    group,
                    current: Some(c),
                }
            })
            .collect()
    }

    /// Items from (group number, current domain) pairs.
    fn mk(v: &[(u8, usize)]) -> Vec<Item> {
        v.iter()
            .map(|&(grp, c)| Item {
                group: g(grp),
                current: Some(c),
            })
            .collect()
    }

    fn caps_of(name: &str) -> Vec<usize> {
        Contention::domains(&machine(name).unwrap())
            .iter()
            .map(|d| d.1)
            .collect()
    }

    fn check_invariants(caps: &[usize], items: &[Item], brute: bool) {
        let a = assign(caps, items);
        assert!(
            valid(caps, items, &a.target),
            "invalid target {:?} for {items:?} on {caps:?}",
            a.target
        );
        if brute {
            let min = brute_min_moves(caps, items).expect("a valid placement exists");
            assert_eq!(
                a.moves(items),
                min,
                "not minimal: {items:?} -> {:?} on {caps:?}",
                a.target
            );
        }
    }

    #[test]
    fn fixture_domains() {
        assert_eq!(caps_of("xeon-x5570x2"), vec![4, 4]);
        assert_eq!(caps_of("xeon-e5-2697x2"), vec![14, 14]);
        assert_eq!(caps_of("opteron-magny-cours-4p"), vec![4; 8]);
    }

    /// Random Linux-like placements on a fixture machine: `(n, cases)` checked against
    /// brute force, then larger `n` checked for I1-I3 only.
    fn run_invariants(name: &str, seed: u64, brute: &[(usize, usize)], big: &[usize]) {
        let caps = caps_of(name);
        let mut r = crate::rng::Rng::new(seed);
        for &(n, cases) in brute {
            for _ in 0..cases {
                check_invariants(&caps, &random_items(&mut r, n, &caps), true);
            }
        }
        for &n in big {
            for _ in 0..10 {
                check_invariants(&caps, &random_items(&mut r, n, &caps), false);
            }
        }
    }

    #[test]
    fn invariants_2x4_exhaustive_against_brute_force() {
        let all: Vec<(usize, usize)> = (2..=8).map(|n| (n, 40)).collect();
        run_invariants("xeon-x5570x2", 3, &all, &[12, 16]);
    }

    #[test]
    fn invariants_2x14_against_brute_force() {
        // The paper's big mixes (18, 24, 28 apps) and an oversubscribed one.
        run_invariants(
            "xeon-e5-2697x2",
            14,
            &[(6, 8), (10, 8), (12, 8)],
            &[18, 24, 28, 40],
        );
    }

    #[test]
    fn invariants_magny_cours_against_brute_force() {
        run_invariants(
            "opteron-magny-cours-4p",
            8,
            &[(3, 4), (5, 4), (6, 4)],
            &[12, 20, 32],
        );
    }

    #[test]
    fn no_group2_shares_with_group1_when_separable() {
        // 3 G1 + 3 G2 + 2 G3 on 2x4, mixed by Linux: after, every domain is pure.
        let caps = vec![4, 4];
        let items = mk(&[
            (1, 0),
            (2, 0),
            (1, 0),
            (3, 0),
            (2, 1),
            (1, 1),
            (2, 1),
            (3, 1),
        ]);
        let a = assign(&caps, &items);
        assert_eq!(a.case, Case::Separate);
        for d in 0..2 {
            let has = |grp| {
                items
                    .iter()
                    .zip(&a.target)
                    .any(|(i, &t)| t == d && i.group == g(grp))
            };
            assert!(!(has(1) && has(2)), "domain {d} mixes G1 and G2");
        }
        // Minimal: G1 side = domain 0 (2 G1 stay), so 1 G1 moves in, 2 G2 + ... move out.
        assert_eq!(a.moves(&items), brute_min_moves(&caps, &items).unwrap());
        assert!(contention_reason(&caps, &items, &a, 2, None, 0.0).is_some());
    }

    #[test]
    fn settled_placement_moves_nothing_and_is_not_contention() {
        let caps = vec![4, 4];
        let items = mk(&[
            (1, 0),
            (1, 0),
            (1, 0),
            (3, 0),
            (2, 1),
            (2, 1),
            (2, 1),
            (3, 1),
        ]);
        let a = assign(&caps, &items);
        assert_eq!(a.moves(&items), 0);
        assert!(contention_reason(&caps, &items, &a, 2, None, 0.0).is_none());
    }

    #[test]
    fn basic8_two_g1_six_g3_spread_only_when_sharing() {
        // The paper's losing mix: 2 G1 + 6 G3 on 8 cores.
        let caps = vec![4, 4];
        // Already apart: no contention, no action.
        let apart = mk(&[
            (1, 0),
            (1, 1),
            (3, 0),
            (3, 0),
            (3, 0),
            (3, 1),
            (3, 1),
            (3, 1),
        ]);
        let a = assign(&caps, &apart);
        assert_eq!(a.case, Case::Spread);
        assert_eq!(a.moves(&apart), 0);
        assert!(contention_reason(&caps, &apart, &a, 2, None, 0.0).is_none());
        // Sharing a package: spread them, with a swap of one G3 (2 moves).
        let shared = mk(&[
            (1, 0),
            (1, 0),
            (3, 0),
            (3, 0),
            (3, 1),
            (3, 1),
            (3, 1),
            (3, 1),
        ]);
        let a = assign(&caps, &shared);
        assert!(contention_reason(&caps, &shared, &a, 2, None, 0.0).is_some());
        assert_eq!(a.moves(&shared), 2);
        // The bandwidth gate: below the floor, two G1 sharing is not contention.
        assert!(contention_reason(&caps, &shared, &a, 2, Some(&[1e9, 1e9]), 5e9).is_none());
        assert!(contention_reason(&caps, &shared, &a, 2, Some(&[9e9, 1e9]), 5e9).is_some());
    }

    #[test]
    fn disabled_without_pmu() {
        let topo = machine("xeon-x5570x2").unwrap();
        let p = Contention::default();
        let none = SourceStatus {
            sources: vec![Source {
                name: SourceKind::PerfHw,
                available: false,
                detail: "perf_event_open(PERF_TYPE_HARDWARE) failed: ENOENT".into(),
            }],
        };
        let r = p.disabled_reason(&topo, &none).expect("disabled");
        assert!(
            r.contains("no hardware performance counters") && r.contains("ENOENT"),
            "{r}"
        );
        assert!(p.disabled_reason(&topo, &SourceStatus::default()).is_some());
        let yes = SourceStatus {
            sources: vec![Source {
                name: SourceKind::PerfHw,
                available: true,
                detail: "intel nehalem".into(),
            }],
        };
        assert_eq!(p.disabled_reason(&topo, &yes), None);
        let one = machine("pkg:1 node:1 core:4 pu:1").unwrap();
        assert!(p.disabled_reason(&one, &yes).is_some());
    }

    /// A Basic-like 8-app mix on xeon-x5570x2 with Linux's interleaving: lbm, sphinx, ...
    fn paper_mix() -> Observation {
        let pick = [
            "lbm",
            "sphinx",
            "libquantum",
            "omnetpp",
            "lu.B",
            "streamcluster",
            "gromacs",
            "ferret",
        ];
        let procs: Vec<_> = pick
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let w = PAPER.iter().find(|w| w.0 == *name).unwrap();
                let mut p = proc_with(100 + i as u32, name, w.2, w.3);
                p.last_cpu = Some(i as u32); // cpus 0-3 package 0, 4-7 package 1
                p
            })
            .collect();
        Observation {
            procs: procs.into_iter().map(std::sync::Arc::new).collect(),
            interval_s: 10.0,
            ..Default::default()
        }
    }

    #[test]
    fn plan_on_paper_mix_separates_and_explains() {
        let topo = machine("xeon-x5570x2").unwrap();
        let obs = paper_mix();
        let pol = Contention::default();
        let mut st = PolicyState::default();
        let plan = pol.plan(&topo, &obs, &mut st);
        assert!(!plan.actions.is_empty());
        let doms = Contention::domains(&topo);
        let mut final_dom: BTreeMap<u32, usize> = obs
            .procs
            .iter()
            .map(|p| {
                (
                    p.pid,
                    domain_of(&doms, &p.allowed_cpus, p.last_cpu).unwrap(),
                )
            })
            .collect();
        for a in &plan.actions {
            if let Action::PinProcess { proc, cpus, .. } = &a.action {
                let d = doms.iter().position(|(c, _)| c == cpus).unwrap();
                final_dom.insert(proc.pid, d);
                assert!(a.reason.contains("because"), "{}", a.reason);
            }
        }
        let grp = |pid: u32| {
            let p = obs.procs.iter().find(|p| p.pid == pid).unwrap();
            g(PAPER.iter().find(|w| *w.0 == *p.comm).unwrap().1)
        };
        for d in 0..2 {
            let gs: Vec<Group> = final_dom
                .iter()
                .filter(|(_, &x)| x == d)
                .map(|(&pid, _)| grp(pid))
                .collect();
            assert!(
                !(gs.contains(&Group::Aggressive) && gs.contains(&Group::Sensitive)),
                "domain {d}: {gs:?}"
            );
        }
        assert_eq!(Contention::last_classes(&mut st).len(), 8);
        assert!(plan.notes.iter().any(|n| n.text.contains("Group 1")));
        hold_pins(&mut st, &plan);
        // Applying the plan and planning again moves nothing (stability).
        let mut obs2 = obs.clone();
        for p in &mut obs2.procs {
            let p = std::sync::Arc::make_mut(p);
            let d = final_dom[&p.pid];
            p.allowed_cpus = doms[d].0.clone();
            p.last_cpu = doms[d].0.first();
        }
        let plan2 = pol.plan(&topo, &obs2, &mut st);
        // No move; only the memory of the processes that changed node keeps following
        // them, within the interval's budget.
        let budget = (pol.cfg.migrate_max_bytes_per_s as f64 * obs2.interval_s) as u64;
        let mut spent = 0;
        for a in &plan2.actions {
            match &a.action {
                Action::BindMemory {
                    migrate_max_bytes, ..
                } => {
                    assert!(*migrate_max_bytes > 0);
                    spent += migrate_max_bytes;
                }
                other => panic!("a move after settling: {other:?}"),
            }
        }
        assert!(spent <= budget);
        // Once the pages are measured on their new node, the following stops.
        for p in &mut obs2.procs {
            let p = std::sync::Arc::make_mut(p);
            let node = topo.node_of(p.last_cpu.unwrap()).unwrap();
            p.numa_pages = [(node, 1000)].into();
        }
        assert!(
            pol.wants().numa_pages,
            "pages are sampled while memory follows"
        );
        assert!(pol.plan(&topo, &obs2, &mut st).actions.is_empty());
        assert!(st.private.following.is_empty());
        assert!(!pol.wants().numa_pages, "and not once it is home");
    }

    /// Restore puts both back: when the engine undoes a separation on its verdict (a
    /// `RestoreProcess` this policy never plans itself), the memory that followed a moved
    /// process goes back (`RestoreMemory`) and is followed no more; a process whose memory
    /// was not moved gets no memory action.
    #[test]
    fn a_move_undone_on_its_verdict_gives_its_memory_back() {
        let topo = machine("xeon-x5570x2").unwrap();
        let obs = paper_mix();
        let pol = Contention::default();
        let mut st = PolicyState::default();
        let plan = pol.plan(&topo, &obs, &mut st);
        hold_pins(&mut st, &plan);
        let moved: Vec<ProcKey> = st.private.moved_memory.iter().copied().collect();
        assert!(!moved.is_empty(), "a cross-node move: {:?}", plan.actions);
        // The engine undoes every pin (verdict: the mix's progress fell).
        let mut restored = Vec::new();
        for a in &plan.actions {
            if let Action::PinProcess { proc, comm, .. } = &a.action {
                restored.push(crate::plan::ActionReport {
                    planned: crate::plan::PlannedAction {
                        policy: KIND,
                        action: Action::RestoreProcess {
                            proc: *proc,
                            comm: comm.clone(),
                            via: None,
                        },
                        reason: "verdict".into(),
                    },
                    outcome: Outcome::Done,
                });
                st.held.remove(proc);
            }
        }
        st.last_reports = restored;
        let plan2 = pol.plan(&topo, &obs, &mut st);
        let mut given_back: Vec<ProcKey> = plan2
            .actions
            .iter()
            .filter_map(|a| match &a.action {
                Action::RestoreMemory { proc } => Some(*proc),
                _ => None,
            })
            .collect();
        given_back.sort();
        assert_eq!(given_back, moved);
        // The memory goes back before anything else is planned for the process (the
        // policy plans the separation again; the engine drops it while backing off).
        for k in &given_back {
            let first = plan2
                .actions
                .iter()
                .position(|a| a.action.proc() == Some(*k))
                .unwrap();
            assert!(matches!(
                plan2.actions[first].action,
                Action::RestoreMemory { .. }
            ));
        }
        // Without a verdict's restore, nothing goes back.
        st.last_reports.clear();
        let plan3 = pol.plan(&topo, &obs, &mut st);
        assert!(!plan3
            .actions
            .iter()
            .any(|a| matches!(a.action, Action::RestoreMemory { .. })));
    }

    /// Memory following is a queue for one budget: a process whose remaining pages the
    /// kernel will not move (it had the budget and none arrived) is followed no more, with
    /// a note, and the next in line gets the budget. Before this, the first in line held
    /// the budget for ever and the others' memory never followed (found in the lab).
    #[test]
    fn a_follower_whose_pages_do_not_move_gives_up_the_budget() {
        let topo = machine("xeon-x5570x2").unwrap();
        let mut obs = paper_mix();
        let pol = Contention::default();
        let mut st: PolicyState<ContentionState> = PolicyState::default();
        // Two processes, idle now (not classified, so no separation is planned): only their
        // memory's following is.
        obs.procs.truncate(2);
        let keys: Vec<ProcKey> = obs.procs.iter().map(|p| p.key()).collect();
        for p in obs.procs.iter_mut() {
            let p = std::sync::Arc::make_mut(p);
            p.cpu_share = 0.0;
            // Pinned to node 1's domain, every page still on node 0.
            p.numa_pages = [(0, 500)].into();
            st.held.insert(
                p.key(),
                crate::policy::Held {
                    cpus: p.allowed_cpus.clone(),
                    since_s: 0.0,
                    comm: p.comm.to_string(),
                },
            );
        }
        for k in &keys {
            st.private.following.insert(
                *k,
                Follow {
                    node: 1,
                    ..Default::default()
                },
            );
        }
        let binds = |plan: &Plan| -> Vec<ProcKey> {
            plan.actions
                .iter()
                .filter_map(|a| match a.action {
                    Action::BindMemory { proc, .. } => Some(proc),
                    _ => None,
                })
                .collect()
        };
        let first = pol.plan(&topo, &obs, &mut st);
        assert_eq!(
            binds(&first),
            vec![keys[0]],
            "the first in line takes the budget"
        );
        // Nothing moved: the first is followed no more, the second takes the budget.
        let second = pol.plan(&topo, &obs, &mut st);
        assert_eq!(binds(&second), vec![keys[1]]);
        assert!(second
            .notes
            .iter()
            .any(|n| n.proc == Some(keys[0]) && n.text.contains("follows no more")));
        assert!(!st.private.following.contains_key(&keys[0]));
        // Progress keeps a follower in line.
        std::sync::Arc::make_mut(&mut obs.procs[1]).numa_pages = [(0, 200), (1, 300)].into();
        let third = pol.plan(&topo, &obs, &mut st);
        assert_eq!(binds(&third), vec![keys[1]]);
    }

    /// What the engine does once a plan's pins are done: the policy holds them.
    fn hold_pins(st: &mut PolicyState<ContentionState>, plan: &Plan) {
        for a in &plan.actions {
            if let Action::PinProcess { proc, comm, cpus } = &a.action {
                st.held.insert(
                    *proc,
                    crate::policy::Held {
                        cpus: cpus.clone(),
                        since_s: 0.0,
                        comm: comm.clone(),
                    },
                );
            }
        }
    }

    /// Sufficient contention: a single aggressive app beside a sensitive one in a domain
    /// that moves little memory bandwidth is left alone; the same pair in a busy domain is
    /// separated, and a move across nodes carries a bounded memory migration.
    #[test]
    fn single_aggressive_app_under_low_bandwidth_is_left_alone() {
        let topo = machine("xeon-x5570x2").unwrap();
        let doms = Contention::domains(&topo);
        // lbm (G1) and sphinx (G2) on package 0, ferret (G3) on package 1.
        let mk = |bw: f64| paper_apps_on(&[("lbm", 0), ("sphinx", 1), ("ferret", 4)], 200, bw);
        let pol = Contention::default();
        let mut st = PolicyState::default();
        let quiet = mk(0.5e9);
        let plan = pol.plan(&topo, &quiet, &mut st);
        assert!(plan.actions.is_empty(), "{:?}", plan.actions);
        assert!(plan.notes.iter().any(|n| n.text.contains("no contention")));
        let mut st = PolicyState::default();
        let busy = mk(6e9);
        // The bandwidth is held over a majority of the last 3 intervals: the first busy
        // interval is one vote, the second makes the majority.
        let first = pol.plan(&topo, &busy, &mut st);
        assert!(!has_pin(&first), "{:?}", first.actions);
        let plan = pol.plan(&topo, &busy, &mut st);
        assert!(has_pin(&plan), "{:?}", plan.notes);
        assert!(
            plan.actions
                .iter()
                .any(|a| a.reason.contains("domains moved 12.0 / 6.0 GB/s")),
            "{:?}",
            plan.actions
        );
        let budget = (pol.cfg.migrate_max_bytes_per_s as f64 * busy.interval_s) as u64;
        for a in &plan.actions {
            if let Action::PinProcess { proc, cpus, .. } = &a.action {
                let p = busy.procs.iter().find(|p| p.key() == *proc).unwrap();
                let from = topo.node_of(p.last_cpu.unwrap()).unwrap();
                let to = topo.node_of(cpus.first().unwrap()).unwrap();
                let bind = plan.actions.iter().find_map(|b| match &b.action {
                    Action::BindMemory {
                        proc: q,
                        nodes,
                        migrate_max_bytes,
                    } if q == proc => Some((nodes.clone(), *migrate_max_bytes)),
                    _ => None,
                });
                if from != to {
                    let (nodes, max) = bind.expect("memory follows a cross-node move");
                    assert_eq!(nodes, vec![to]);
                    assert!(max > 0 && max <= budget);
                } else {
                    assert!(bind.is_none());
                }
            }
        }
        let _ = doms;
    }

    /// Paper workloads by name on the given CPUs (pids from `first_pid`), each reporting
    /// `bw_each` bytes/s of memory bandwidth as the counters would.
    fn paper_apps_on(apps: &[(&str, u32)], first_pid: u32, bw_each: f64) -> Observation {
        let procs = apps
            .iter()
            .zip(first_pid..)
            .map(|(&(name, cpu), pid)| {
                let w = PAPER.iter().find(|w| w.0 == name).unwrap();
                let mut p = proc_with(pid, name, w.2, w.3);
                p.last_cpu = Some(cpu);
                if let Some(c) = p.counters.as_mut() {
                    c.per_s
                        .insert(classify::MEM_BANDWIDTH_BYTES.into(), bw_each);
                }
                p
            })
            .map(std::sync::Arc::new)
            .collect();
        Observation {
            procs,
            interval_s: 2.0,
            ..Default::default()
        }
    }

    fn has_pin(plan: &Plan) -> bool {
        plan.actions
            .iter()
            .any(|a| matches!(a.action, Action::PinProcess { .. }))
    }

    #[test]
    fn domain_bandwidth_is_held_over_a_majority_of_intervals() {
        let mut h = Vec::new();
        // k = 3: the second largest of the last 3, unseen intervals counting as 0.
        assert_eq!(
            hold_domain_bandwidth(&mut h, &[9.0, 1.0], 3),
            vec![0.0, 0.0]
        );
        assert_eq!(
            hold_domain_bandwidth(&mut h, &[9.0, 2.0], 3),
            vec![9.0, 1.0]
        );
        assert_eq!(
            hold_domain_bandwidth(&mut h, &[1.0, 3.0], 3),
            vec![9.0, 2.0]
        );
        assert_eq!(
            hold_domain_bandwidth(&mut h, &[1.0, 3.0], 3),
            vec![1.0, 3.0]
        );
        assert!(h.iter().all(|d| d.len() == 3));
        // A different domain count starts over.
        assert_eq!(hold_domain_bandwidth(&mut h, &[5.0], 3), vec![0.0]);
        // k = 1 (smoothing off): the interval's own value.
        let mut h = Vec::new();
        assert_eq!(hold_domain_bandwidth(&mut h, &[4.0], 1), vec![4.0]);
        assert_eq!(hold_domain_bandwidth(&mut h, &[2.0], 1), vec![2.0]);
        // k = 4: a strict majority is 3 of 4, the third largest.
        let mut h = Vec::new();
        for b in [8.0, 9.0, 1.0] {
            hold_domain_bandwidth(&mut h, &[b], 4);
        }
        assert_eq!(hold_domain_bandwidth(&mut h, &[7.0], 4), vec![7.0]);
    }

    #[test]
    fn a_one_interval_bandwidth_spike_moves_nothing() {
        let topo = machine("xeon-x5570x2").unwrap();
        // lbm, libquantum (G1) with sphinx, omnetpp (G2) on package 0: real contention by
        // the group rule, the bandwidth deciding.
        let apps = [("lbm", 0), ("libquantum", 1), ("sphinx", 2), ("omnetpp", 3)];
        let mk = |bw_each: f64| paper_apps_on(&apps, 300, bw_each);
        // An 8 GB/s threshold set in the config (the machine's own is lower).
        let cfg = ContentionConfig {
            min_domain_bandwidth_bytes_per_s: DomainBandwidth::BytesPerS(8e9),
            ..Default::default()
        };
        let pol = Contention::new(cfg.clone());
        let mut st = PolicyState::default();
        // 1.5 GB/s each (6 in the domain), one interval at 4 GB/s each (16), then quiet.
        for (i, bw) in [1.5e9, 4e9, 1.5e9, 1.5e9, 1.5e9].into_iter().enumerate() {
            let plan = pol.plan(&topo, &mk(bw), &mut st);
            assert!(!has_pin(&plan), "interval {i}: {:?}", plan.actions);
        }
        // Two busy intervals in three: now it is contention.
        let plan = pol.plan(&topo, &mk(4e9), &mut st);
        assert!(!has_pin(&plan), "{:?}", plan.actions);
        let plan = pol.plan(&topo, &mk(4e9), &mut st);
        assert!(has_pin(&plan), "{:?}", plan.notes);
        // With smoothing off (K = 1) the spike alone acts, as before.
        let mut pol1 = Contention::new(cfg);
        pol1.cfg.classify.smoothing_intervals = 1;
        let mut st = PolicyState::default();
        assert!(!has_pin(&pol1.plan(&topo, &mk(1.5e9), &mut st)));
        assert!(has_pin(&pol1.plan(&topo, &mk(4e9), &mut st)));
    }

    #[test]
    fn the_sufficient_contention_threshold_is_the_machines_unless_configured() {
        let x5570 = machine("xeon-x5570x2").unwrap();
        let e5 = machine("xeon-e5-2697x2").unwrap();
        let synthetic = machine("pkg:2 node:2 core:4 pu:1").unwrap();
        let pol = Contention::default();
        let own = |m: &str| {
            catalogue::sufficient_contention_bytes_per_s(
                catalogue::Machine::parse(m).unwrap(),
                crate::catalogue::DEFAULT_MIN_EFFECT,
            )
            .unwrap()
        };
        assert_eq!(pol.min_domain_bandwidth(&x5570), own("xeon-x5570x2"));
        assert_eq!(pol.min_domain_bandwidth(&e5), own("xeon-e5-2697x2"));
        assert!(pol.min_domain_bandwidth(&x5570) < pol.min_domain_bandwidth(&e5));
        assert_eq!(
            pol.min_domain_bandwidth(&synthetic),
            DEFAULT_MIN_DOMAIN_BANDWIDTH
        );
        // The config's machine name picks the facts; a set value overrides them all.
        let named = ContentionConfig {
            machine: "xeon-e5-2697x2".into(),
            ..Default::default()
        };
        assert_eq!(
            Contention::new(named).min_domain_bandwidth(&x5570),
            own("xeon-e5-2697x2")
        );
        let set = Contention::new(ContentionConfig {
            min_domain_bandwidth_bytes_per_s: DomainBandwidth::BytesPerS(0.0),
            ..Default::default()
        });
        assert_eq!(set.min_domain_bandwidth(&x5570), 0.0);
        // In the TOML: "machine" or a number; another word or a negative number is refused.
        let parse = |v: &str| {
            crate::config::Config::from_toml(&format!(
                "[contention]\nmin_domain_bandwidth_bytes_per_s = {v}\n"
            ))
            .map(|c| c.contention.min_domain_bandwidth_bytes_per_s)
        };
        assert_eq!(
            parse("\"machine\"").unwrap(),
            DomainBandwidth::Machine(MachineOwn::Machine)
        );
        assert_eq!(parse("4e9").unwrap(), DomainBandwidth::BytesPerS(4e9));
        assert!(parse("\"auto\"").is_err());
        assert!(parse("-1.0").is_err());
        // It decides: 6 GB/s in a contended X5570 domain passes its 3.1 GB/s threshold
        // (it did not pass the old global 8 GB/s).
        let apps = [("lbm", 0), ("libquantum", 1), ("sphinx", 2), ("omnetpp", 3)];
        let mut st = PolicyState::default();
        let mut acted = false;
        for _ in 0..3 {
            acted |= has_pin(&pol.plan(&x5570, &paper_apps_on(&apps, 300, 1.5e9), &mut st));
        }
        assert!(acted);
    }

    /// A host without a PMU: the registry builds `contention`, the engine reports it
    /// disabled with the reason on the first step and keeps running the other policies.
    #[test]
    fn engine_reports_disabled_without_pmu_and_runs_others() {
        use crate::config::Config;
        use crate::engine::{policies_from_config, Engine};
        use crate::host::{Host, HostError};
        use crate::plan::ActionReport;
        use crate::sample::Sample;
        struct NoPmu {
            t: u64,
        }
        impl Host for NoPmu {
            fn topology(&mut self) -> Result<Topology, HostError> {
                // Two LLC domains and a NIC, so net-affinity has something to run on.
                Ok(machine("dell-c6100").unwrap())
            }
            fn sources(&mut self) -> SourceStatus {
                SourceStatus {
                    sources: vec![Source {
                        name: SourceKind::PerfHw,
                        available: false,
                        detail: "no hardware counters: ENOENT".into(),
                    }],
                }
            }
            fn sample(&mut self, req: SampleRequest) -> Result<Sample, HostError> {
                assert!(!req.counters, "a disabled policy's wants are not sampled");
                self.t += 1_000_000_000;
                Ok(Sample {
                    time_ns: self.t,
                    clk_tck: 100,
                    ..Default::default()
                })
            }
            fn apply(&mut self, _p: &Plan, _dry: bool) -> Vec<ActionReport> {
                vec![]
            }
            fn journal(&mut self) -> Result<Vec<crate::journal::Entry>, HostError> {
                Ok(Vec::new())
            }
            fn restore_all(
                &mut self,
            ) -> Result<Vec<(crate::journal::Entry, crate::journal::Restored)>, HostError>
            {
                Ok(Vec::new())
            }
            fn restore_where(
                &mut self,
                _which: &dyn Fn(&crate::journal::Entry) -> bool,
            ) -> Result<Vec<(crate::journal::Entry, crate::journal::Restored)>, HostError>
            {
                Ok(Vec::new())
            }
        }
        let cfg = Config {
            policies: vec![
                crate::policies::PolicyKind::Contention,
                crate::policies::PolicyKind::NetAffinity,
            ],
            ..Default::default()
        };
        let pols = policies_from_config(&cfg, 1);
        assert_eq!(
            pols.iter().map(|p| p.kind()).collect::<Vec<_>>(),
            vec![
                crate::policies::PolicyKind::Contention,
                crate::policies::PolicyKind::NetAffinity
            ]
        );
        let mut e = Engine::new(pols, cfg, 1);
        let mut h = NoPmu { t: 0 };
        let r0 = e.step(&mut h, true);
        assert_eq!(r0.disabled.len(), 1, "{:?}", r0.disabled);
        assert_eq!(r0.disabled[0].0, crate::policies::PolicyKind::Contention);
        assert!(r0.disabled[0].1.contains("ENOENT"), "{}", r0.disabled[0].1);
        let r1 = e.step(&mut h, true);
        assert!(r1.error.is_none() && r1.disabled.is_empty());
        let running: Vec<_> = e
            .policies()
            .into_iter()
            .filter(|(_, d)| d.is_none())
            .map(|(n, _)| n)
            .collect();
        assert_eq!(running, vec![crate::policies::PolicyKind::NetAffinity]);
    }

    #[test]
    fn documented_config_parses() {
        let doc = include_str!("../../../../docs/contention.md");
        let start = doc.find("```toml\n").expect("toml block") + 8;
        let end = start + doc[start..].find("```").unwrap();
        let cfg = crate::config::Config::from_toml(&doc[start..end]).unwrap();
        assert_eq!(cfg.policies, vec![crate::policies::PolicyKind::Contention]);
        assert_eq!(
            cfg.contention,
            ContentionConfig {
                classify: ClassifyConfig {
                    per_machine: [(
                        "xeon-e5-2697x2".to_string(),
                        classify::Thresholds::default()
                    )]
                    .into(),
                    ..Default::default()
                },
                ..Default::default()
            }
        );
    }

    #[test]
    fn config_validates() {
        assert!(ContentionConfig::default().validate().is_ok());
        let bad = ContentionConfig {
            min_group1_sharing: 1,
            ..Default::default()
        };
        assert!(bad.validate().is_err());
        let t: ContentionConfig = toml::from_str(
            "machine = \"xeon-x5570x2\"\n[classify]\nmode = \"relative\"\nsmoothing_intervals = 5\n[classify.per_machine.xeon-x5570x2]\nbuffer_full = 1e7\n",
        )
        .unwrap();
        assert_eq!(t.classify.smoothing_intervals, 5);
        assert_eq!(t.classify.per_machine["xeon-x5570x2"].buffer_full, 1e7);
    }
}
