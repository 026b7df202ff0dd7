//! Allocation orders: in which order to hand a job's hardware threads out, over any
//! topology (seed 001, sections 1.1 and 2.2).
//!
//! An order is a list of the allowed online CPUs; a job of `n` units gets the first `n`.
//! Four orders:
//!
//! - `speedup` (the seed's policy 1, "strongest units first"): every unit gets a value,
//!   `capacity` for the first hardware thread of a core and `sigma * capacity` (0.3 in the
//!   paper) for each further thread (a shared sibling); units are handed out by decreasing
//!   value. On a homogeneous SMT machine that is one thread per physical core, cores
//!   package by package (a package is filled before the next is opened: the paper's Table 3
//!   says the second package starts "when the 5th core is put to work" under Linux's
//!   default order, and its policy-1 power at 3 units, about 130 W, is that of one
//!   package), then the second threads in the same core order, then third ones (SMT4).
//!   On hybrid/big.LITTLE machines big/P cores come first (higher capacity), then
//!   LITTLE/E cores, then SMT siblings: an E core (capacity about 0.6 when the kernel does
//!   not say) is worth more than a shared P-core sibling (0.3).
//! - `efficiency` (policy 2, maximise SPN = speedup / power / physical cores): fill all
//!   threads of a core before opening another core, fill a package's cores before opening
//!   another package (a new package costs the most power, Ps). Within a package, the
//!   most efficient cores come first: lower capacity first, so LITTLE/E cores before
//!   big/P cores; on a homogeneous machine this is the same as `compact`.
//! - `compact` (hwloc/likwid/OpenMP `close` on threads): depth-first over the tree
//!   package > die > NUMA node > cluster > core > thread, children ordered by their ids
//!   (threads by CPU id); core types are ignored.
//! - `scatter` (hwloc `scatter`, OpenMP `spread` over threads): round robin at every
//!   level of the same tree, so consecutive units land in different packages, then
//!   different nodes, then different cores; siblings last. This is also the order a
//!   modern Linux load balancer converges to when it spreads busy tasks across packages.
//!
//! Invariants (tested one by one, on machine models, synthetic specs and fixtures):
//! 1. every allowed online CPU appears exactly once;
//! 2. no CPU outside the allowed online set appears;
//! 3. prefix property: the allocation for `n` is the allocation for `n + 1` minus its
//!    last CPU (allocations are prefixes of one order);
//! 4. `speedup`: no shared sibling before every core that has an allowed CPU has one
//!    (on machines where every thread has the same capacity);
//! 5. `efficiency`: at every prefix, at most one core is partially used and at most one
//!    package is partially used (a new core/package only when the previous is full).
//!
//! Thread rank: a CPU's position among the allowed online CPUs of its core, by id. A
//! sibling whose first thread is not allowed therefore counts as a full-resource unit.

use crate::power_model::{PowerModel, Usage};
use crate::topology::{CoreType, Topology};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The seed's compute of a shared SMT sibling relative to a full core.
pub const DEFAULT_SIGMA: f64 = 0.3;

/// Capacity assumed for a LITTLE/E core when the kernel gives a core type but no
/// `cpu_capacity` (x86 hybrid): an Intel E-core runs at roughly 0.6 of a P-core.
pub const LITTLE_CAPACITY_DEFAULT: f64 = 0.6;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AllocPolicy {
    Speedup,
    Efficiency,
    Compact,
    Scatter,
}

impl AllocPolicy {
    pub const ALL: [AllocPolicy; 4] = [
        AllocPolicy::Speedup,
        AllocPolicy::Efficiency,
        AllocPolicy::Compact,
        AllocPolicy::Scatter,
    ];

    pub fn name(self) -> &'static str {
        match self {
            AllocPolicy::Speedup => "speedup",
            AllocPolicy::Efficiency => "efficiency",
            AllocPolicy::Compact => "compact",
            AllocPolicy::Scatter => "scatter",
        }
    }
}

impl std::fmt::Display for AllocPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for AllocPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        AllocPolicy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown order {s:?}: speedup, efficiency, compact or scatter"))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AllocOptions {
    /// Compute of a shared sibling relative to its core's first thread (0 < sigma < 1/2
    /// in the paper; 0.3 by default).
    pub sigma: f64,
}

impl Default for AllocOptions {
    fn default() -> Self {
        AllocOptions {
            sigma: DEFAULT_SIGMA,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    #[error("no allowed online CPUs in the topology")]
    NoCpus,
    #[error("asked for {asked} units but only {available} allowed online CPUs exist")]
    TooMany { asked: usize, available: usize },
    #[error("asked for 0 units")]
    Zero,
}

/// An allowed online CPU with its place in the machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unit {
    pub cpu: u32,
    pub package: Option<u32>,
    /// Machine-wide core index (the CPU id when the topology does not say).
    pub core: u32,
    /// Position among the allowed online CPUs of its core (0 = the full-resource thread).
    pub thread_rank: u32,
    /// Relative capacity of its core, 0 < c <= 1.
    pub capacity: f64,
    pub core_type: Option<CoreType>,
}

/// The allowed online CPUs as units, sorted by CPU id.
pub fn units(topo: &Topology) -> Vec<Unit> {
    let allowed = topo.allowed();
    let cpus: Vec<_> = topo
        .cpus
        .iter()
        .filter(|c| allowed.contains(c.id))
        .collect();
    let max_cap = cpus.iter().filter_map(|c| c.capacity).max().map(f64::from);
    let core_key = |c: &crate::topology::Cpu| -> (bool, u32) {
        match c.core {
            Some(k) => (false, k),
            None => (true, c.id),
        }
    };
    let mut by_core: BTreeMap<(bool, u32), Vec<u32>> = BTreeMap::new();
    for c in &cpus {
        by_core.entry(core_key(c)).or_default().push(c.id);
    }
    cpus.iter()
        .map(|c| {
            let key = core_key(c);
            let rank = by_core[&key].iter().position(|&id| id == c.id).unwrap_or(0);
            let capacity = match (c.capacity, max_cap, c.core_type) {
                (Some(cap), Some(max), _) if max > 0.0 => (f64::from(cap) / max).clamp(1e-3, 1.0),
                (_, _, Some(CoreType::Little)) => LITTLE_CAPACITY_DEFAULT,
                _ => 1.0,
            };
            Unit {
                cpu: c.id,
                package: c.package,
                core: c.core.unwrap_or(c.id),
                thread_rank: rank as u32,
                capacity,
                core_type: c.core_type,
            }
        })
        .collect()
}

/// The tree package > die > node > cluster > core > thread over the units.
enum Tree {
    Leaf(u32),
    Inner(Vec<Tree>),
}

const LEVELS: usize = 5;

fn level_key(topo: &Topology, u: &Unit, level: usize) -> (bool, u32) {
    let cpu = topo.cpu(u.cpu);
    let opt = |v: Option<u32>| (v.is_none(), v.unwrap_or(0));
    match level {
        0 => opt(u.package),
        1 => opt(cpu.and_then(|c| c.die)),
        2 => opt(cpu.and_then(|c| c.node)),
        3 => opt(cpu.and_then(|c| c.cluster)),
        _ => (false, u.core),
    }
}

fn build_tree(topo: &Topology, units: &[&Unit], level: usize) -> Tree {
    if level == LEVELS {
        let mut v: Vec<&&Unit> = units.iter().collect();
        v.sort_by_key(|u| u.cpu);
        return Tree::Inner(v.into_iter().map(|u| Tree::Leaf(u.cpu)).collect());
    }
    let mut groups: BTreeMap<(bool, u32), Vec<&Unit>> = BTreeMap::new();
    for u in units {
        groups.entry(level_key(topo, u, level)).or_default().push(u);
    }
    // Children in the order of their ids (package 0 before 1, whatever CPUs are
    // allowed); the BTreeMap already iterates so, unknown ids last.
    Tree::Inner(
        groups
            .into_values()
            .map(|g| build_tree(topo, &g, level + 1))
            .collect(),
    )
}

fn depth_first(t: &Tree, out: &mut Vec<u32>) {
    match t {
        Tree::Leaf(c) => out.push(*c),
        Tree::Inner(ch) => ch.iter().for_each(|c| depth_first(c, out)),
    }
}

fn round_robin(t: &Tree) -> Vec<u32> {
    match t {
        Tree::Leaf(c) => vec![*c],
        Tree::Inner(ch) => {
            let lists: Vec<Vec<u32>> = ch.iter().map(round_robin).collect();
            let longest = lists.iter().map(Vec::len).max().unwrap_or(0);
            (0..longest)
                .flat_map(|i| lists.iter().filter_map(move |l| l.get(i).copied()))
                .collect()
        }
    }
}

/// The full order of `policy` over the allowed online CPUs.
pub fn order(topo: &Topology, policy: AllocPolicy, opts: &AllocOptions) -> Vec<u32> {
    let us = units(topo);
    let refs: Vec<&Unit> = us.iter().collect();
    let tree = build_tree(topo, &refs, 0);
    let mut compact = Vec::with_capacity(us.len());
    depth_first(&tree, &mut compact);
    let pos: BTreeMap<u32, usize> = compact.iter().enumerate().map(|(i, c)| (*c, i)).collect();
    let unit_of: BTreeMap<u32, &Unit> = us.iter().map(|u| (u.cpu, u)).collect();
    match policy {
        AllocPolicy::Compact => compact,
        AllocPolicy::Scatter => round_robin(&tree),
        AllocPolicy::Speedup => {
            // Core position = compact position of its first unit. Keys are computed once
            // per CPU and sorted as tuples (the sort is then cheap even unoptimised).
            let core_pos = first_pos_by(&compact, &unit_of, |u| (u.core, 0));
            let mut keyed: Vec<(std::cmp::Reverse<u64>, u32, usize, u32)> = compact
                .iter()
                .map(|c| {
                    let u = unit_of[c];
                    let value = u.capacity * if u.thread_rank == 0 { 1.0 } else { opts.sigma };
                    // Values are positive and finite: their bit patterns order like them.
                    (
                        std::cmp::Reverse(value.to_bits()),
                        u.thread_rank,
                        core_pos[&(u.core, 0)],
                        *c,
                    )
                })
                .collect();
            keyed.sort_unstable();
            keyed.into_iter().map(|k| k.3).collect()
        }
        AllocPolicy::Efficiency => {
            let pkg_pos = first_pos_by(&compact, &unit_of, |u| (u.package.unwrap_or(u32::MAX), 0));
            let core_pos = first_pos_by(&compact, &unit_of, |u| (u.core, 0));
            // Capacity classes are compared coarsely so measurement noise in
            // cpu_capacity does not split one core type.
            let mut keyed: Vec<(usize, i64, usize, usize, u32)> = compact
                .iter()
                .map(|c| {
                    let u = unit_of[c];
                    (
                        pkg_pos[&(u.package.unwrap_or(u32::MAX), 0)],
                        (u.capacity * 64.0).round() as i64,
                        core_pos[&(u.core, 0)],
                        pos[c],
                        *c,
                    )
                })
                .collect();
            keyed.sort_unstable();
            keyed.into_iter().map(|k| k.4).collect()
        }
    }
}

/// Position in `compact` of the first unit with each key.
fn first_pos_by(
    compact: &[u32],
    unit_of: &BTreeMap<u32, &Unit>,
    key: impl Fn(&Unit) -> (u32, u32),
) -> BTreeMap<(u32, u32), usize> {
    let mut m = BTreeMap::new();
    for (i, c) in compact.iter().enumerate() {
        m.entry(key(unit_of[c])).or_insert(i);
    }
    m
}

/// The first `n` CPUs of `policy`'s order.
pub fn allocate(
    topo: &Topology,
    policy: AllocPolicy,
    n: usize,
    opts: &AllocOptions,
) -> Result<Vec<u32>, AllocError> {
    if n == 0 {
        return Err(AllocError::Zero);
    }
    let mut o = order(topo, policy, opts);
    if o.is_empty() {
        return Err(AllocError::NoCpus);
    }
    if n > o.len() {
        return Err(AllocError::TooMany {
            asked: n,
            available: o.len(),
        });
    }
    o.truncate(n);
    Ok(o)
}

/// Busy packages, cores and siblings, and the compute, of running one unit on each of
/// `cpus`. Thread ranks here are within the set: the first CPU of a core in `cpus` is its
/// full thread, later ones are shared siblings.
pub fn usage_of(topo: &Topology, cpus: &[u32], opts: &AllocOptions) -> (Usage, f64) {
    let us = units(topo);
    let unit_of: BTreeMap<u32, &Unit> = us.iter().map(|u| (u.cpu, u)).collect();
    let mut packages = std::collections::BTreeSet::new();
    let mut cores: BTreeMap<u32, u32> = BTreeMap::new();
    let mut compute = 0.0;
    for c in cpus {
        let Some(u) = unit_of.get(c) else { continue };
        packages.insert(u.package);
        let k = cores.entry(u.core).or_insert(0);
        compute += u.capacity * if *k == 0 { 1.0 } else { opts.sigma };
        *k += 1;
    }
    let ncores = cores.len() as u32;
    let threads: u32 = cores.values().sum();
    (
        Usage {
            packages: packages.len() as u32,
            cores: ncores,
            siblings: threads - ncores,
        },
        compute,
    )
}

/// One line of `placer plan`: the state after the first `n` CPUs of an order are busy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrefixStats {
    pub n: usize,
    pub cpu: u32,
    pub package: Option<u32>,
    pub core: u32,
    /// `full` when this CPU's core was idle before it, `shared` otherwise.
    pub role: String,
    pub packages: u32,
    pub cores: u32,
    pub siblings: u32,
    /// Compute in full-core units (a shared sibling adds sigma).
    pub compute: f64,
    /// Amdahl speedup over one full core.
    pub speedup: f64,
    pub power_w: f64,
    /// The seed's SPN = speedup / power / physical cores * 1000.
    pub spn: f64,
    /// Energy relative to one full core running the whole job alone: power * time, where
    /// time is relative to one full core (joules per second of single-core run time).
    pub energy_rel: f64,
}

/// Stats of every prefix of `order`.
pub fn prefix_stats(
    topo: &Topology,
    order: &[u32],
    model: &PowerModel,
    serial_fraction: f64,
    opts: &AllocOptions,
) -> Vec<PrefixStats> {
    let unit_of: BTreeMap<u32, Unit> = units(topo).into_iter().map(|u| (u.cpu, u)).collect();
    let mut out = Vec::with_capacity(order.len());
    let mut seen_cores = std::collections::BTreeSet::new();
    for (i, &cpu) in order.iter().enumerate() {
        let (usage, compute) = usage_of(topo, &order[..=i], opts);
        let u = unit_of.get(&cpu);
        let core = u.map_or(cpu, |u| u.core);
        let role = if seen_cores.insert(core) {
            "full"
        } else {
            "shared"
        };
        let speedup = crate::amdahl::speedup(serial_fraction, compute);
        let power_w = model.power_w(usage);
        out.push(PrefixStats {
            n: i + 1,
            cpu,
            package: u.and_then(|u| u.package),
            core,
            role: role.into(),
            packages: usage.packages,
            cores: usage.cores,
            siblings: usage.siblings,
            compute,
            speedup,
            power_w,
            spn: speedup / power_w / f64::from(usage.cores.max(1)) * 1000.0,
            energy_rel: power_w * crate::amdahl::relative_time(serial_fraction, compute),
        });
    }
    out
}

/// Checks invariants 1, 2 and (for `policy`) 4 or 5 of the module doc on an order `o` of
/// `topo`; the error says which invariant broke and where. [`verify_policy`] adds the
/// prefix property. Used by the unit tests and the fixture tests of real topologies.
pub fn verify_order(topo: &Topology, policy: AllocPolicy, o: &[u32]) -> Result<(), String> {
    let set: crate::CpuSet = o.iter().copied().collect();
    if set.len() != o.len() {
        return Err(format!("{policy}: a CPU appears twice in {o:?}"));
    }
    let allowed = topo.allowed();
    if set != allowed {
        return Err(format!(
            "{policy}: order covers {} but the allowed online CPUs are {}",
            set.to_list_string(),
            allowed.to_list_string()
        ));
    }
    let us = units(topo);
    let unit_of: BTreeMap<u32, &Unit> = us.iter().map(|u| (u.cpu, u)).collect();
    let homogeneous = us.iter().all(|u| (u.capacity - 1.0).abs() < 1e-9);
    if policy == AllocPolicy::Speedup && homogeneous {
        let cores: std::collections::BTreeSet<u32> = us.iter().map(|u| u.core).collect();
        let first_shared = o
            .iter()
            .position(|c| unit_of[c].thread_rank > 0)
            .unwrap_or(o.len());
        if first_shared != cores.len() {
            return Err(format!(
                "speedup: first shared sibling at position {first_shared}, before all {} cores \
                 have a thread",
                cores.len()
            ));
        }
    }
    if policy == AllocPolicy::Efficiency {
        let mut core_size: BTreeMap<u32, usize> = BTreeMap::new();
        let mut pkg_size: BTreeMap<Option<u32>, usize> = BTreeMap::new();
        for u in &us {
            *core_size.entry(u.core).or_default() += 1;
            *pkg_size.entry(u.package).or_default() += 1;
        }
        let mut cores: BTreeMap<u32, usize> = BTreeMap::new();
        let mut pkgs: BTreeMap<Option<u32>, usize> = BTreeMap::new();
        for (i, c) in o.iter().enumerate() {
            let u = unit_of[c];
            *cores.entry(u.core).or_default() += 1;
            *pkgs.entry(u.package).or_default() += 1;
            let partial_cores = cores.iter().filter(|(k, n)| **n < core_size[*k]).count();
            let partial_pkgs = pkgs.iter().filter(|(k, n)| **n < pkg_size[*k]).count();
            if partial_cores > 1 || partial_pkgs > 1 {
                return Err(format!(
                    "efficiency: after {} units {partial_cores} cores and {partial_pkgs} \
                     packages are partly used",
                    i + 1
                ));
            }
        }
    }
    Ok(())
}

/// [`verify_order`] on `policy`'s own order, plus invariant 3 (prefix property) through
/// [`allocate`].
pub fn verify_policy(
    topo: &Topology,
    policy: AllocPolicy,
    opts: &AllocOptions,
) -> Result<(), String> {
    let o = order(topo, policy, opts);
    verify_order(topo, policy, &o)?;
    // Every n on small machines; about 64 evenly spread n on large ones (each allocate
    // recomputes the order).
    let step = (o.len() / 64).max(1);
    for n in (1..o.len()).step_by(step) {
        let a = allocate(topo, policy, n, opts).map_err(|e| e.to_string())?;
        let b = allocate(topo, policy, n + 1, opts).map_err(|e| e.to_string())?;
        if a[..] != b[..n] {
            return Err(format!(
                "{policy}: allocation for {n} is not a prefix of {}",
                n + 1
            ));
        }
    }
    Ok(())
}

/// How many units of an order a job is worth, from its prefix stats (see
/// [`crate::amdahl`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Caps {
    pub serial_fraction: f64,
    /// The paper's `1/S + 1` in compute units (parallel efficiency 1/2); null when
    /// S = 0.
    pub efficiency_limit_compute: Option<f64>,
    /// Longest prefix whose compute is within that limit.
    pub efficiency_n: usize,
    /// Longest prefix where every added unit paid off in energy (the marginal rule).
    pub energy_n: usize,
    /// Prefix with the least energy over the whole order.
    pub energy_optimum_n: usize,
}

impl Caps {
    /// The cap `placer run --auto` and `smt-energy` apply: the smaller of the efficiency
    /// cap and the least-energy prefix, at least 1. The least-energy prefix rather than
    /// the marginal rule, because opening a package costs Ps at once: the marginal rule
    /// stops before the step even when the units behind it pay it back.
    pub fn cap(&self) -> usize {
        self.efficiency_n.min(self.energy_optimum_n).max(1)
    }
}

pub fn caps(stats: &[PrefixStats], serial_fraction: f64) -> Caps {
    let s = serial_fraction;
    let limit = crate::amdahl::efficiency_limit(s);
    let pre: Vec<(f64, f64)> = stats.iter().map(|p| (p.compute, p.power_w)).collect();
    Caps {
        serial_fraction: s,
        efficiency_limit_compute: limit.is_finite().then_some(limit),
        efficiency_n: stats
            .iter()
            .take_while(|p| p.compute <= limit + 1e-9)
            .count(),
        energy_n: crate::amdahl::energy_cap(s, &pre),
        energy_optimum_n: crate::amdahl::energy_optimum(s, &pre),
    }
}

/// The seed's Table 7 view: at equal physical cores, order `b` (policy 2, all threads of
/// each core) against order `a` (policy 1, one thread per core).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerCore {
    pub cores: u32,
    /// Units of `a`: the first prefix reaching `cores` cores.
    pub n_a: usize,
    /// Units of `b`: the last prefix with `cores` cores.
    pub n_b: usize,
    pub speedup_a: f64,
    pub speedup_b: f64,
    /// speedup_b / speedup_a - 1.
    pub gain: f64,
    pub power_a_w: f64,
    pub power_b_w: f64,
}

pub fn per_core_comparison(a: &[PrefixStats], b: &[PrefixStats]) -> Vec<PerCore> {
    let max = a.iter().map(|p| p.cores).max().unwrap_or(0);
    (1..=max)
        .filter_map(|k| {
            let pa = a.iter().find(|p| p.cores == k)?;
            let pb = b.iter().rev().find(|p| p.cores == k)?;
            Some(PerCore {
                cores: k,
                n_a: pa.n,
                n_b: pb.n,
                speedup_a: pa.speedup,
                speedup_b: pb.speedup,
                gain: pb.speedup / pa.speedup - 1.0,
                power_a_w: pa.power_w,
                power_b_w: pb.power_w,
            })
        })
        .collect()
}

/// For each prefix of `b`, the smallest prefix of `a` at least as fast (the seed's "10
/// units of policy 2 run like 7 of policy 1 at 3 W less"): `(n_b, n_a, power_b - power_a)`.
pub fn equal_speed_matches(a: &[PrefixStats], b: &[PrefixStats]) -> Vec<(usize, usize, f64)> {
    b.iter()
        .filter_map(|pb| {
            let pa = a.iter().find(|p| p.speedup >= pb.speedup - 1e-9)?;
            Some((pb.n, pa.n, pb.power_w - pa.power_w))
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::machines::{machine, synthetic};
    use crate::topology::Cpu;
    use crate::CpuSet;

    /// Intel hybrid like the 20em64t-hybrid fixture: 6 P-cores with 2 threads (CPUs
    /// 0-11, siblings adjacent) and 2 clusters of 4 single-thread E-cores (12-19); no
    /// cpu_capacity, core types known.
    pub(crate) fn hybrid() -> Topology {
        let mut cpus = Vec::new();
        for id in 0..20u32 {
            let p = id < 12;
            let core = if p { id / 2 } else { 6 + (id - 12) };
            let siblings = if p {
                CpuSet::from_iter([id & !1, id | 1])
            } else {
                CpuSet::single(id)
            };
            let mut c = Cpu::bare(id, true);
            c.package = Some(0);
            c.node = Some(0);
            c.core = Some(core);
            c.cluster = Some(if p { core } else { 6 + (id - 12) / 4 });
            c.siblings = siblings;
            c.core_type = Some(if p { CoreType::Big } else { CoreType::Little });
            cpus.push(c);
        }
        Topology {
            cpus,
            source: "test:hybrid".into(),
            ..Default::default()
        }
    }

    /// big.LITTLE like the odroid (capacities 377/1024), no SMT.
    fn big_little() -> Topology {
        machine("odroid-xu4").unwrap()
    }

    pub(crate) fn test_topologies() -> Vec<Topology> {
        let mut v: Vec<Topology> = [
            "dell-c6100",
            "hp-dk388p",
            "odroid-xu4",
            "opteron-magny-cours-4p",
        ]
        .iter()
        .map(|m| machine(m).unwrap())
        .collect();
        for spec in [
            "pkg:4 core:2 pu:2 numbering:smt-last",
            "pkg:2 node:2 core:4 pu:4",
            "pkg:1 core:1 pu:1",
            "pkg:3 core:3 pu:2 numbering:interleaved",
        ] {
            v.push(synthetic(spec).unwrap());
        }
        v.push(hybrid());
        // Some CPUs offline or disallowed.
        let mut t = machine("dell-c6100").unwrap();
        t.cpus[0].allowed = false;
        t.cpus[5].online = false;
        t.cpus[9].allowed = false;
        v.push(t);
        v
    }

    fn check_invariants(t: &Topology) {
        for p in AllocPolicy::ALL {
            if let Err(e) = verify_policy(t, p, &AllocOptions::default()) {
                panic!("{}: {e}", t.source);
            }
        }
    }

    #[test]
    fn invariants_hold_on_every_test_topology() {
        for t in test_topologies() {
            check_invariants(&t);
        }
    }

    #[test]
    fn allocate_refuses_zero_and_too_many() {
        let t = machine("dell-c6100").unwrap();
        let o = AllocOptions::default();
        assert_eq!(
            allocate(&t, AllocPolicy::Speedup, 0, &o),
            Err(AllocError::Zero)
        );
        assert_eq!(
            allocate(&t, AllocPolicy::Speedup, 17, &o),
            Err(AllocError::TooMany {
                asked: 17,
                available: 16
            })
        );
        let mut none = t.clone();
        none.cpus.iter_mut().for_each(|c| c.allowed = false);
        assert_eq!(
            allocate(&none, AllocPolicy::Compact, 1, &o),
            Err(AllocError::NoCpus)
        );
    }

    /// (package, core_id, thread rank) of each CPU of an order, the paper's Table 1 form.
    fn triples(t: &Topology, o: &[u32]) -> Vec<(u32, u32, u32)> {
        let us = units(t);
        o.iter()
            .map(|c| {
                let u = us.iter().find(|u| u.cpu == *c).unwrap();
                let cpu = t.cpu(*c).unwrap();
                (cpu.package.unwrap(), cpu.core_id.unwrap(), u.thread_rank)
            })
            .collect()
    }

    #[test]
    fn speedup_on_dell_c6100_is_table_1() {
        // The order reconstructed from the paper's text: full threads (thread 0) of
        // package 0's cores 0-3, then package 1's, then the shared threads in the same
        // order. With the model's interleaved numbering that is CPUs 0,2,4,6,1,3,5,7 then
        // 8,10,12,14,9,11,13,15.
        let t = machine("dell-c6100").unwrap();
        let o = order(&t, AllocPolicy::Speedup, &AllocOptions::default());
        let mut want = Vec::new();
        for th in 0..2 {
            for p in 0..2 {
                for c in 0..4 {
                    want.push((p, c, th));
                }
            }
        }
        assert_eq!(triples(&t, &o), want);
        assert_eq!(
            o,
            vec![0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15]
        );
    }

    #[test]
    fn efficiency_on_dell_c6100_fills_siblings_first() {
        let t = machine("dell-c6100").unwrap();
        let o = order(&t, AllocPolicy::Efficiency, &AllocOptions::default());
        let mut want = Vec::new();
        for p in 0..2 {
            for c in 0..4 {
                for th in 0..2 {
                    want.push((p, c, th));
                }
            }
        }
        assert_eq!(triples(&t, &o), want);
        assert_eq!(&o[..4], &[0, 8, 2, 10]);
    }

    #[test]
    fn scatter_alternates_packages_and_compact_is_depth_first() {
        let t = machine("dell-c6100").unwrap();
        let opts = AllocOptions::default();
        // Interleaved numbering: CPU id order is already the spread order.
        assert_eq!(
            order(&t, AllocPolicy::Scatter, &opts),
            (0..16).collect::<Vec<_>>()
        );
        assert_eq!(
            order(&t, AllocPolicy::Compact, &opts),
            order(&t, AllocPolicy::Efficiency, &opts)
        );
        let s = synthetic("pkg:2 node:2 core:2 pu:2").unwrap();
        // Linear numbering: pkg0 = 0-7 (node0 = 0-3), pkg1 = 8-15.
        assert_eq!(
            &order(&s, AllocPolicy::Scatter, &opts)[..8],
            &[0, 8, 4, 12, 2, 10, 6, 14]
        );
        assert_eq!(
            order(&s, AllocPolicy::Compact, &opts),
            (0..16).collect::<Vec<_>>()
        );
    }

    #[test]
    fn verify_order_catches_broken_orders() {
        let t = machine("dell-c6100").unwrap();
        let opts = AllocOptions::default();
        let sc = order(&t, AllocPolicy::Scatter, &opts);
        let ef = order(&t, AllocPolicy::Efficiency, &opts);
        // Scatter opens both packages at once: not an efficiency order (invariant 5).
        let e = verify_order(&t, AllocPolicy::Efficiency, &sc).unwrap_err();
        assert!(e.contains("partly used"), "{e}");
        // Efficiency shares a core at unit 2: not a speedup order (invariant 4).
        let e = verify_order(&t, AllocPolicy::Speedup, &ef).unwrap_err();
        assert!(e.contains("first shared sibling at position 1"), "{e}");
        // Missing, extra or repeated CPUs (invariants 1 and 2).
        assert!(verify_order(&t, AllocPolicy::Compact, &ef[..15]).is_err());
        let mut dup = ef.clone();
        dup[15] = dup[0];
        assert!(verify_order(&t, AllocPolicy::Compact, &dup)
            .unwrap_err()
            .contains("twice"));
        let mut off = t.clone();
        off.cpus[3].online = false;
        assert!(verify_order(&off, AllocPolicy::Compact, &ef).is_err());
        verify_order(&t, AllocPolicy::Efficiency, &ef).unwrap();
    }

    #[test]
    fn hybrid_speedup_puts_p_cores_first_then_e_cores_then_siblings() {
        let t = hybrid();
        let o = order(&t, AllocPolicy::Speedup, &AllocOptions::default());
        assert_eq!(&o[..6], &[0, 2, 4, 6, 8, 10], "P-core first threads");
        assert_eq!(&o[6..14], &(12..20).collect::<Vec<_>>()[..], "then E-cores");
        assert_eq!(&o[14..], &[1, 3, 5, 7, 9, 11], "then P-core siblings");
    }

    #[test]
    fn hybrid_efficiency_puts_e_cores_first_then_packs_p_cores() {
        let t = hybrid();
        let o = order(&t, AllocPolicy::Efficiency, &AllocOptions::default());
        assert_eq!(&o[..8], &(12..20).collect::<Vec<_>>()[..]);
        assert_eq!(&o[8..], &(0..12).collect::<Vec<_>>()[..]);
        // compact ignores core types.
        let c = order(&t, AllocPolicy::Compact, &AllocOptions::default());
        assert_eq!(c, (0..20).collect::<Vec<_>>());
    }

    #[test]
    fn big_little_orders_by_capacity() {
        let t = big_little();
        let opts = AllocOptions::default();
        assert_eq!(
            order(&t, AllocPolicy::Speedup, &opts),
            vec![4, 5, 6, 7, 0, 1, 2, 3]
        );
        assert_eq!(
            order(&t, AllocPolicy::Efficiency, &opts),
            (0..8).collect::<Vec<_>>()
        );
    }

    #[test]
    fn smt4_speedup_goes_round_the_cores_per_thread_rank() {
        let t = synthetic("pkg:1 core:2 pu:4").unwrap();
        let o = order(&t, AllocPolicy::Speedup, &AllocOptions::default());
        assert_eq!(o, vec![0, 4, 1, 5, 2, 6, 3, 7]);
        let e = order(&t, AllocPolicy::Efficiency, &AllocOptions::default());
        assert_eq!(e, (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn disallowed_first_thread_makes_the_sibling_full() {
        let mut t = machine("dell-c6100").unwrap();
        t.cpus[0].allowed = false; // CPU 8 is now alone on its core.
        let us = units(&t);
        assert_eq!(us.iter().find(|u| u.cpu == 8).unwrap().thread_rank, 0);
        let o = order(&t, AllocPolicy::Speedup, &AllocOptions::default());
        assert_eq!(&o[..4], &[8, 2, 4, 6]);
    }

    #[test]
    fn usage_and_prefix_stats_follow_the_power_model() {
        let t = machine("dell-c6100").unwrap();
        let opts = AllocOptions::default();
        let m = crate::power_model::builtin("dell-c6100").unwrap();
        let sp = order(&t, AllocPolicy::Speedup, &opts);
        let ef = order(&t, AllocPolicy::Efficiency, &opts);
        let s1 = prefix_stats(&t, &sp, &m, 0.0, &opts);
        let s2 = prefix_stats(&t, &ef, &m, 0.0, &opts);
        // Policy 1 at 3 units: 1 package, 3 cores: 76.11 + 25.19 + 3 * 9.68 = 130.34 W
        // (the paper measured 130.13 W for policy 2's 4 units and calls it comparable).
        assert!((s1[2].power_w - 130.34).abs() < 1e-9);
        // Policy 2 at 4 units: 1 package, 2 cores, 2 siblings.
        assert_eq!((s2[3].packages, s2[3].cores, s2[3].siblings), (1, 2, 2));
        assert!((s2[3].compute - 2.6).abs() < 1e-12);
        assert_eq!(s2[1].role, "shared");
        // Policy 1 opens the second package at the 5th unit.
        assert_eq!((s1[3].packages, s1[4].packages), (1, 2));
        // At equal physical cores, policy 2's SPN is higher (same cores, more compute,
        // little more power) whenever it uses both threads of each core.
        for k in 1..=8 {
            assert!(s2[2 * k - 1].spn > s1[k - 1].spn, "k={k}");
        }
        // S = 0.1 on policy 1: efficiency limit 11 compute units is beyond all 16 CPUs
        // (10.4 compute), so only the energy rule can cap.
        let c = caps(&prefix_stats(&t, &sp, &m, 0.1, &opts), 0.1);
        assert_eq!(c.efficiency_n, 16);
        assert!(c.energy_n >= 1 && c.energy_n <= 16);
        // Speedup order, S = 0.1: the marginal rule stops before package 1 opens (unit
        // 5 adds Ps + Pc), yet the least energy is further on.
        assert_eq!(c.energy_n, 4);
        assert!(c.energy_optimum_n > 4);
        assert_eq!(c.cap(), c.energy_optimum_n);
        let c = caps(&prefix_stats(&t, &ef, &m, 0.5, &opts), 0.5);
        assert_eq!(c.efficiency_limit_compute, Some(3.0));
        // 3.0 compute: 2 full cores with siblings is 2.6, a third core makes 3.6.
        assert_eq!(c.efficiency_n, 4);
        // Per physical core, policy 2 gains sigma = 30% of compute, less with S > 0.
        let cmp = per_core_comparison(&s1, &s2);
        assert_eq!(cmp.len(), 8);
        assert!(cmp
            .iter()
            .all(|c| (c.gain - 0.3).abs() < 1e-9 && c.n_b == 2 * c.n_a));
        let m1 = prefix_stats(&t, &sp, &m, 0.077, &opts);
        let m2 = prefix_stats(&t, &ef, &m, 0.077, &opts);
        let cmp = per_core_comparison(&m1, &m2);
        assert!(cmp.iter().all(|c| c.gain > 0.0 && c.gain < 0.3));
        let eq = equal_speed_matches(&m1, &m2);
        assert!(eq.iter().all(|(nb, na, _)| na <= nb));
        // Everything busy: both orders end in the same state.
        assert_eq!(s1[15].power_w, s2[15].power_w);
        assert!((s1[15].compute - 8.0 * 1.3).abs() < 1e-9);
    }
}
