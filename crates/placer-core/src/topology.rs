//! The machine as placer sees it: CPUs, cores, packages, caches, NUMA nodes, frequency
//! domains and NICs. Built by `placer_linux::topology` from a filesystem root, or by
//! [`crate::machines`] for modelled machines; consumed by every policy.
//!
//! The serde form is the `placer topo --json` contract (see docs/topology.md): field names
//! are stable, unknown values are `null`, CPU sets are arrays of ids.
//!
//! Invariants the readers and models guarantee (checked by [`Topology::validate`]):
//! - `cpus` is sorted by id, ids unique; offline CPUs are listed with `online == false`
//!   and may have every other field unknown;
//! - `core` is a machine-wide core index: CPUs with equal `core` are exactly the SMT
//!   siblings of one core, and `siblings` of each online CPU is that group;
//! - every cache's `cpus` and every node's `cpus` are subsets of the present CPUs.

use crate::cpuset::CpuSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Topology {
    pub cpus: Vec<Cpu>,
    pub caches: Vec<Cache>,
    pub nodes: Vec<Node>,
    pub freq_domains: Vec<FreqDomain>,
    pub nics: Vec<Nic>,
    /// Where this picture came from: `root:/`, `root:/tmp/x`, `machine:dell-c6100`.
    #[serde(default)]
    pub source: String,
    /// Other agents managing IRQ affinity or cpufreq here ([`crate::coexist`]): filled by
    /// the daemon's host at each topology refresh, not by the topology reader (absent from
    /// `placer topo --json`).
    #[serde(default, skip_serializing_if = "crate::coexist::Coexistence::is_empty")]
    pub coexistence: crate::coexist::Coexistence,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cpu {
    pub id: u32,
    pub online: bool,
    /// In this process's cpuset and `Cpus_allowed_list`.
    pub allowed: bool,
    /// `physical_package_id` as the kernel gives it (may be sparse, e.g. 36).
    pub package: Option<u32>,
    pub die: Option<u32>,
    pub cluster: Option<u32>,
    /// Machine-wide core index (0..n_cores), equal for SMT siblings.
    pub core: Option<u32>,
    /// The kernel's `core_id` (only unique within a package).
    pub core_id: Option<u32>,
    pub node: Option<u32>,
    pub siblings: CpuSet,
    /// `cpu_capacity` (1024 = the biggest CPU) where the kernel exposes it.
    pub capacity: Option<u32>,
    pub core_type: Option<CoreType>,
    pub max_khz: Option<u64>,
    pub base_khz: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum CoreType {
    /// big.LITTLE / hybrid: the faster kind (Arm big, Intel P-core).
    Big,
    /// The slower, more efficient kind (Arm LITTLE, Intel E-core).
    Little,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum CacheKind {
    Data,
    Instruction,
    Unified,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cache {
    pub level: u8,
    pub kind: CacheKind,
    pub size_bytes: Option<u64>,
    pub cpus: CpuSet,
    /// The kernel's cache `id` where present.
    #[serde(default)]
    pub id: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub id: u32,
    pub cpus: CpuSet,
    pub memory_bytes: Option<u64>,
    /// SLIT distance to each node, keyed by node id (10 = local).
    pub distances: BTreeMap<u32, u32>,
    /// In this process's cpuset mems and `Mems_allowed_list` (hwloc hides the others).
    #[serde(default = "yes")]
    pub allowed: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FreqDomain {
    /// cpufreq policy number (`policyN`).
    pub id: u32,
    pub cpus: CpuSet,
    pub min_khz: Option<u64>,
    pub max_khz: Option<u64>,
    pub available_khz: Vec<u64>,
    pub governor: Option<String>,
    /// Current `scaling_max_freq` (a cap placer may have set).
    #[serde(default)]
    pub scaling_max_khz: Option<u64>,
    #[serde(default)]
    pub scaling_min_khz: Option<u64>,
    #[serde(default)]
    pub available_governors: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Nic {
    pub name: String,
    pub node: Option<u32>,
    /// CPUs that do receive processing: union of the queues' IRQ affinities and RPS CPUs.
    pub rx_cpus: CpuSet,
    pub queues: Vec<NicQueue>,
    #[serde(default)]
    pub speed_mbps: Option<u64>,
    /// Addresses configured on the interface (to map a flow's local address to its NIC).
    #[serde(default)]
    pub addrs: Vec<std::net::IpAddr>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NicQueue {
    /// `rx-0`, or the IRQ's name from /proc/interrupts (`virtio2-input.0`, `eth0-TxRx-3`).
    pub name: String,
    pub irq: Option<u32>,
    pub irq_cpus: CpuSet,
    pub rps_cpus: CpuSet,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("inconsistent topology: {0}")]
pub struct TopologyInvalid(pub String);

impl Topology {
    pub fn cpu(&self, id: u32) -> Option<&Cpu> {
        self.cpus
            .binary_search_by_key(&id, |c| c.id)
            .ok()
            .map(|i| &self.cpus[i])
    }

    pub fn present(&self) -> CpuSet {
        self.cpus.iter().map(|c| c.id).collect()
    }

    pub fn online(&self) -> CpuSet {
        self.cpus
            .iter()
            .filter(|c| c.online)
            .map(|c| c.id)
            .collect()
    }

    /// Online CPUs this process may use.
    pub fn allowed(&self) -> CpuSet {
        self.cpus
            .iter()
            .filter(|c| c.online && c.allowed)
            .map(|c| c.id)
            .collect()
    }

    /// SMT siblings of `cpu` including itself (just `{cpu}` when unknown).
    pub fn siblings(&self, cpu: u32) -> CpuSet {
        match self.cpu(cpu) {
            Some(c) if !c.siblings.is_empty() => c.siblings.clone(),
            _ => CpuSet::single(cpu),
        }
    }

    /// Physical cores of the online CPUs, each as its set of SMT siblings, ordered by
    /// their first CPU.
    pub fn cores(&self) -> Vec<CpuSet> {
        let mut by_core: BTreeMap<u32, CpuSet> = BTreeMap::new();
        let mut lone = Vec::new();
        for c in self.cpus.iter().filter(|c| c.online) {
            match c.core {
                Some(k) => by_core.entry(k).or_default().insert(c.id),
                None => lone.push(CpuSet::single(c.id)),
            }
        }
        let mut v: Vec<CpuSet> = by_core.into_values().chain(lone).collect();
        v.sort_by_key(|s| s.first());
        v
    }

    /// Online CPUs grouped by package (unknown package: one group per CPU's `None`).
    pub fn packages(&self) -> BTreeMap<Option<u32>, CpuSet> {
        let mut m: BTreeMap<Option<u32>, CpuSet> = BTreeMap::new();
        for c in self.cpus.iter().filter(|c| c.online) {
            m.entry(c.package).or_default().insert(c.id);
        }
        m
    }

    /// The online CPUs of `cpu`'s package (of the CPUs with no known package, when its
    /// is unknown): its group in [`Topology::packages`], without building the others.
    pub fn package_cpus(&self, cpu: u32) -> CpuSet {
        let package = self.cpu(cpu).and_then(|c| c.package);
        self.cpus
            .iter()
            .filter(|c| c.online && c.package == package)
            .map(|c| c.id)
            .collect()
    }

    pub fn node(&self, id: u32) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    pub fn node_of(&self, cpu: u32) -> Option<u32> {
        self.cpu(cpu).and_then(|c| c.node).or_else(|| {
            self.nodes
                .iter()
                .find(|n| n.cpus.contains(cpu))
                .map(|n| n.id)
        })
    }

    /// Caches of `cpu`, smallest level first (data before instruction on equal level).
    pub fn caches_of(&self, cpu: u32) -> Vec<&Cache> {
        let mut v: Vec<&Cache> = self
            .caches
            .iter()
            .filter(|c| c.cpus.contains(cpu))
            .collect();
        v.sort_by_key(|c| (c.level, c.kind));
        v
    }

    /// The last-level cache of `cpu` (highest level; unified or data).
    pub fn llc_of(&self, cpu: u32) -> Option<&Cache> {
        self.caches_of(cpu)
            .into_iter()
            .filter(|c| c.kind != CacheKind::Instruction)
            .max_by_key(|c| c.level)
    }

    /// The CPUs sharing with `cpu` the lowest cache level that `cpu` shares with any other
    /// online CPU, excluding `cpu` itself. Seed 002's "core that shares cache". Empty when
    /// no cache is shared.
    pub fn cache_neighbours(&self, cpu: u32) -> CpuSet {
        let online = self.online();
        for c in self.caches_of(cpu) {
            if c.kind == CacheKind::Instruction {
                continue;
            }
            let others = c
                .cpus
                .intersection(&online)
                .difference(&CpuSet::single(cpu));
            if !others.is_empty() {
                return others;
            }
        }
        CpuSet::new()
    }

    /// The distinct last-level-cache domains over the online CPUs; CPUs with no known
    /// cache form one domain each.
    pub fn llc_domains(&self) -> Vec<CpuSet> {
        let online = self.online();
        let mut doms: Vec<CpuSet> = Vec::new();
        for cpu in online.iter() {
            let d = match self.llc_of(cpu) {
                Some(c) => c.cpus.intersection(&online),
                None => CpuSet::single(cpu),
            };
            if !doms.contains(&d) {
                doms.push(d);
            }
        }
        doms.sort_by_key(|d| d.first());
        doms
    }

    pub fn nic(&self, name: &str) -> Option<&Nic> {
        self.nics.iter().find(|n| n.name == name)
    }

    /// The NIC carrying local address `addr` (loopback addresses map to `lo`).
    pub fn nic_for_addr(&self, addr: &std::net::IpAddr) -> Option<&Nic> {
        self.nics
            .iter()
            .find(|n| n.addrs.contains(addr))
            .or_else(|| {
                if addr.is_loopback() {
                    self.nic("lo")
                } else {
                    None
                }
            })
    }

    pub fn freq_domain_of(&self, cpu: u32) -> Option<&FreqDomain> {
        self.freq_domains.iter().find(|d| d.cpus.contains(cpu))
    }

    /// Checks the invariants in the module doc.
    pub fn validate(&self) -> Result<(), TopologyInvalid> {
        let bad = |m: String| Err(TopologyInvalid(m));
        for w in self.cpus.windows(2) {
            if w[0].id >= w[1].id {
                return bad(format!("cpus not sorted/unique at {}", w[1].id));
            }
        }
        let present = self.present();
        let mut core_groups: BTreeMap<u32, CpuSet> = BTreeMap::new();
        for c in self.cpus.iter().filter(|c| c.online) {
            if let Some(k) = c.core {
                core_groups.entry(k).or_default().insert(c.id);
            }
        }
        for c in self.cpus.iter().filter(|c| c.online) {
            if let Some(k) = c.core {
                let group = &core_groups[&k];
                let online_sibs = c.siblings.intersection(&self.online());
                if !c.siblings.is_empty() && &online_sibs != group {
                    return bad(format!(
                        "cpu {}: siblings {} but core {} holds {}",
                        c.id, c.siblings, k, group
                    ));
                }
            }
        }
        for cache in &self.caches {
            if !cache.cpus.is_subset(&present) {
                return bad(format!(
                    "L{} cache {} outside present CPUs",
                    cache.level, cache.cpus
                ));
            }
        }
        for n in &self.nodes {
            if !n.cpus.is_subset(&present) {
                return bad(format!(
                    "node {} cpus {} outside present CPUs",
                    n.id, n.cpus
                ));
            }
        }
        Ok(())
    }
}

impl Cpu {
    /// A CPU with only its id and online state known.
    pub fn bare(id: u32, online: bool) -> Cpu {
        Cpu {
            id,
            online,
            allowed: online,
            package: None,
            die: None,
            cluster: None,
            core: None,
            core_id: None,
            node: None,
            siblings: CpuSet::new(),
            capacity: None,
            core_type: None,
            max_khz: None,
            base_khz: None,
        }
    }
}
