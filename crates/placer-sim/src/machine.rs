//! The machine model: per-CPU facts precomputed from the [`Topology`] (core, package,
//! node, LLC domain, frequency domain, core type) and the performance model built on
//! [`Params`]: compute speed per core type, frequency and workload class; SMT sharing;
//! LLC and memory-bandwidth contention; NUMA remote-access penalty.
//!
//! Speeds are relative: 1.0 is one thread alone on a big (or the only) core type at that
//! type's maximum frequency, so a CPU-bound job of `work_s` seconds takes `work_s` seconds
//! alone on an idle machine. Every factor is a documented function of named parameters:
//!
//! - core type and frequency: `f / big_max` on big cores, `f / big_max / ratio(class)` on
//!   little cores (CAL A5: class-dependent big/little ratio);
//! - SMT: with the sibling busy a fraction `u` of the time, a thread runs at
//!   `1 - u * (1 - (1 + g) / 2)` where `g` is the mean SMT gain of the two classes;
//! - LLC contention: time x `1 + llc_scale * S * (1 - exp(-sum P))` over co-runners in the
//!   LLC domain, each weighted by its busy fraction (CAL C);
//! - memory bandwidth: the memory-bound fraction `m = min(1, bw / core_bw)` of the time is
//!   stretched by the loaded-latency multiplier at the node's bandwidth utilisation;
//! - NUMA: `m` is also stretched by the remote/local latency ratio for the share of pages
//!   on each remote node (CAL D).

use crate::params::{Archetype, Params};
use placer_core::topology::{CoreType, Topology};

/// Facts of one CPU, by index into [`Machine::cpus`] (index = position in the topology's
/// online CPU list).
#[derive(Debug, Clone)]
pub struct CpuInfo {
    pub id: u32,
    pub core: usize,
    pub package: usize,
    pub node: u32,
    pub llc: usize,
    /// Index into the topology's caches of this CPU's L2, where it has one.
    pub l2: Option<usize>,
    /// Index into the topology's freq_domains, if the CPU has one.
    pub freq_domain: Option<usize>,
    pub little: bool,
    /// Indices of the other SMT threads of this core.
    pub siblings: Vec<usize>,
    /// Maximum frequency of this CPU, kHz.
    pub max_khz: u64,
}

#[derive(Debug, Clone)]
pub struct Machine {
    pub name: String,
    pub cpus: Vec<CpuInfo>,
    pub n_cores: usize,
    pub n_packages: usize,
    pub n_llc: usize,
    /// Size of each LLC domain's cache, bytes (by `CpuInfo::llc`; 0 where unknown).
    pub llc_bytes: Vec<f64>,
    /// Node ids present, and SLIT distances as a dense matrix by position in `node_ids`.
    pub node_ids: Vec<u32>,
    pub distance: Vec<Vec<u32>>,
    /// CPU index by CPU id (None for ids not simulated).
    pub index_of_id: Vec<Option<usize>>,
}

impl Machine {
    pub fn new(name: &str, topo: &Topology, params: &Params) -> Machine {
        let online: Vec<&placer_core::topology::Cpu> =
            topo.cpus.iter().filter(|c| c.online).collect();
        let max_id = online.iter().map(|c| c.id).max().unwrap_or(0) as usize;
        let mut index_of_id = vec![None; max_id + 1];
        for (i, c) in online.iter().enumerate() {
            index_of_id[c.id as usize] = Some(i);
        }
        let mut core_ids: Vec<u32> = Vec::new();
        let mut pkg_ids: Vec<Option<u32>> = Vec::new();
        let llcs = topo.llc_domains();
        let mut node_ids: Vec<u32> = topo.nodes.iter().map(|n| n.id).collect();
        if node_ids.is_empty() {
            node_ids.push(0);
        }
        let cpus = online
            .iter()
            .map(|c| {
                let core_key = c.core.unwrap_or(100_000 + c.id);
                let core = match core_ids.iter().position(|&k| k == core_key) {
                    Some(i) => i,
                    None => {
                        core_ids.push(core_key);
                        core_ids.len() - 1
                    }
                };
                let package = match pkg_ids.iter().position(|&k| k == c.package) {
                    Some(i) => i,
                    None => {
                        pkg_ids.push(c.package);
                        pkg_ids.len() - 1
                    }
                };
                let little = c.core_type == Some(CoreType::Little);
                let max_khz = if little {
                    params.cpu.little_max_khz
                } else {
                    params.cpu.big_max_khz
                };
                CpuInfo {
                    id: c.id,
                    core,
                    package,
                    node: topo.node_of(c.id).unwrap_or(0),
                    llc: llcs.iter().position(|d| d.contains(c.id)).unwrap_or(0),
                    l2: topo.caches.iter().position(|k| {
                        k.level == 2
                            && k.kind != placer_core::topology::CacheKind::Instruction
                            && k.cpus.contains(c.id)
                    }),
                    freq_domain: topo.freq_domains.iter().position(|d| d.cpus.contains(c.id)),
                    little,
                    siblings: Vec::new(),
                    max_khz,
                }
            })
            .collect::<Vec<_>>();
        let mut cpus = cpus;
        for i in 0..cpus.len() {
            let sibs = (0..cpus.len())
                .filter(|&j| j != i && cpus[j].core == cpus[i].core)
                .collect();
            cpus[i].siblings = sibs;
        }
        let distance = node_ids
            .iter()
            .map(|a| {
                node_ids
                    .iter()
                    .map(|b| {
                        topo.node(*a)
                            .and_then(|n| n.distances.get(b).copied())
                            .unwrap_or(if a == b { 10 } else { 20 })
                    })
                    .collect()
            })
            .collect();
        Machine {
            name: name.to_string(),
            n_cores: core_ids.len(),
            n_packages: pkg_ids.len(),
            n_llc: llcs.len().max(1),
            llc_bytes: llcs
                .iter()
                .map(|d| {
                    d.first()
                        .and_then(|c| topo.llc_of(c))
                        .and_then(|k| k.size_bytes)
                        .unwrap_or(0) as f64
                })
                .collect(),
            cpus,
            node_ids,
            distance,
            index_of_id,
        }
    }

    pub fn idx(&self, cpu_id: u32) -> Option<usize> {
        self.index_of_id.get(cpu_id as usize).copied().flatten()
    }

    pub fn node_pos(&self, node: u32) -> usize {
        self.node_ids.iter().position(|&n| n == node).unwrap_or(0)
    }

    /// Whether CPUs `a` and `b` (indices) share a cache (same CPU or same LLC domain).
    pub fn share_cache(&self, a: usize, b: usize) -> bool {
        a == b || self.cpus[a].llc == self.cpus[b].llc
    }

    /// The nearest cache CPUs `a` and `b` share (a cache line written on one is read on
    /// the other from there).
    pub fn cache_distance(&self, a: usize, b: usize) -> CacheDistance {
        let (x, y) = (&self.cpus[a], &self.cpus[b]);
        if a == b {
            CacheDistance::SameCpu
        } else if x.core == y.core || (x.l2.is_some() && x.l2 == y.l2) {
            CacheDistance::SharedL2
        } else if x.llc == y.llc {
            CacheDistance::SharedLlc
        } else {
            CacheDistance::None
        }
    }
}

/// How far apart two CPUs are in the cache hierarchy ([`Machine::cache_distance`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheDistance {
    SameCpu,
    /// SMT siblings, or cores sharing an L2 (which may be the LLC, as on the Xeon 5355).
    SharedL2,
    /// Only the last-level cache is shared.
    SharedLlc,
    /// No cache is shared (another LLC domain or package).
    None,
}

/// Capacity of a CPU at its maximum frequency relative to the big core at its maximum
/// (1.0), as the kernel's capacity-dmips-mhz x f_max (CAL E).
pub fn capacity(p: &Params, c: &CpuInfo) -> f64 {
    let dm = if c.little {
        p.cpu.little_dmips_per_mhz / p.cpu.big_dmips_per_mhz.max(1e-9)
    } else {
        1.0
    };
    dm * c.max_khz as f64 / p.cpu.big_max_khz.max(1) as f64
}

/// Speed of a thread of class `a` alone on CPU `c` at `khz`, relative to the big core at
/// its maximum frequency.
pub fn base_speed(p: &Params, c: &CpuInfo, a: &Archetype, khz: u64) -> f64 {
    let f = khz as f64 / p.cpu.big_max_khz as f64;
    if c.little {
        f / a.big_little_ratio.max(1e-9)
    } else {
        f
    }
}

/// SMT factor for a thread whose sibling is busy a fraction `sib_busy` of the time, with
/// `gain` the mean SMT gain of the two threads' classes.
pub fn smt_factor(sib_busy: f64, gain: f64) -> f64 {
    1.0 - sib_busy.clamp(0.0, 1.0) * (1.0 - (1.0 + gain) / 2.0)
}

/// Co-runners' pressure `sum_p` as it weighs on an LLC of `llc_bytes`: scaled by the share
/// of the cache it takes relative to the reference LLC the pressures are stated for
/// (`contention.llc_reference_bytes`; unscaled when that or the size is unknown).
pub fn llc_share_pressure(p: &Params, sum_p: f64, llc_bytes: f64) -> f64 {
    let r = p.contention.llc_reference_bytes;
    if r > 0.0 && llc_bytes > 0.0 {
        sum_p * r / llc_bytes
    } else {
        sum_p
    }
}

/// Time multiplier from LLC co-runners with busy-weighted pressure sum `sum_p`.
pub fn llc_slowdown(p: &Params, a: &Archetype, sum_p: f64) -> f64 {
    let c = &p.contention;
    let harm = if c.llc_shape == crate::params::LlcShape::Additive {
        c.llc_additive_per_pressure * sum_p.max(0.0)
    } else {
        c.llc_scale * (1.0 - (-sum_p.max(0.0)).exp())
    };
    (1.0 + a.sensitivity * harm).max(0.5)
}

/// Loaded-latency multiplier at node bandwidth utilisation `u` (linear interpolation;
/// beyond the last point, the last value).
pub fn loaded_latency(p: &Params, u: f64) -> f64 {
    let pts = &p.contention.loaded_latency;
    if pts.is_empty() {
        return 1.0;
    }
    if u <= pts[0][0] {
        return pts[0][1];
    }
    for w in pts.windows(2) {
        let ([x0, y0], [x1, y1]) = (w[0], w[1]);
        if u <= x1 {
            let t = if x1 > x0 { (u - x0) / (x1 - x0) } else { 1.0 };
            return y0 + t * (y1 - y0);
        }
    }
    pts[pts.len() - 1][1]
}

/// Memory-bound fraction of a class's time.
pub fn mem_fraction(p: &Params, a: &Archetype) -> f64 {
    (a.bw_gbps / p.contention.core_bw_gbps.max(1e-9)).clamp(0.0, 1.0)
}

/// Voltage at `mhz` from an OPP table (the lowest point at or above `mhz`; the last point
/// beyond it). None when the table is empty.
pub fn volts_at(opp: &[[f64; 2]], mhz: f64) -> Option<f64> {
    if opp.is_empty() {
        return None;
    }
    opp.iter()
        .find(|[f, _]| *f >= mhz - 1e-6)
        .or(opp.last())
        .map(|[_, v]| *v)
}

/// Power of one core busy all the time at `khz`: `core_w_at_max * (V^2 f) / (V_max^2 f_max)`
/// on DVFS machines; `core_w_at_max` without an OPP table.
pub fn core_power_w(core_w_at_max: f64, opp: &[[f64; 2]], khz: u64, max_khz: u64) -> f64 {
    let (mhz, max_mhz) = (khz as f64 / 1000.0, max_khz as f64 / 1000.0);
    match (volts_at(opp, mhz), volts_at(opp, max_mhz)) {
        (Some(v), Some(vm)) if max_mhz > 0.0 => core_w_at_max * (v * v * mhz) / (vm * vm * max_mhz),
        _ => core_w_at_max,
    }
}
