//! Built-in machine models: the seeds' servers and boards, and a synthetic form for tests
//! (`pkg:2 node:1 core:4 pu:2`). Usable anywhere a root is accepted (`--machine NAME`).
//!
//! A model gives only what the papers and data sheets say of the machine: shape, caches,
//! NUMA distances, capacities, frequency domains and NICs. Performance and power models of
//! the same machines live in placer-sim (with their calibration sources).
//!
//! CPU numbering follows what Linux does on such machines: `smt-last` (first threads of all
//! cores, package by package, then the second threads: modern Intel/AMD x86), `interleaved`
//! (first threads alternating across packages, then siblings: many Nehalem-era 2-socket
//! BIOSes), `linear` (siblings adjacent: POWER, synthetic). The numbering of a given
//! physical box depends on its firmware; the models document their choice.

use crate::cpuset::CpuSet;
use crate::topology::*;
use std::collections::BTreeMap;

/// The built-in machines (in the catalogue, with their other facts).
pub use crate::catalogue::Machine;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MachineError {
    #[error("unknown machine {0:?}; built-in machines: {1}")]
    Unknown(String, String),
    #[error("bad synthetic spec {spec:?}: {why}")]
    BadSpec { spec: String, why: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numbering {
    SmtLast,
    Interleaved,
    Linear,
}

/// Where a cache level is shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    Core,
    Cluster,
    Node,
    Die,
    Package,
}

#[derive(Debug, Clone)]
pub struct CacheSpec {
    pub level: u8,
    pub kind: CacheKind,
    pub size_bytes: u64,
    pub share: Share,
}

/// A regular machine: packages x dies x nodes x clusters x cores x threads.
#[derive(Debug, Clone)]
pub struct Shape {
    pub packages: u32,
    pub dies_per_package: u32,
    pub nodes_per_die: u32,
    pub clusters_per_node: u32,
    pub cores_per_cluster: u32,
    pub threads_per_core: u32,
    pub numbering: Numbering,
    pub caches: Vec<CacheSpec>,
    pub memory_bytes_per_node: u64,
    /// Distance between distinct nodes of one package, and across packages.
    pub distance_same_package: u32,
    pub distance_other_package: u32,
    pub max_khz: Option<u64>,
}

impl Shape {
    pub fn new(packages: u32, cores_per_package: u32, threads_per_core: u32) -> Shape {
        Shape {
            packages,
            dies_per_package: 1,
            nodes_per_die: 1,
            clusters_per_node: 1,
            cores_per_cluster: cores_per_package,
            threads_per_core,
            numbering: Numbering::SmtLast,
            caches: vec![
                CacheSpec {
                    level: 1,
                    kind: CacheKind::Data,
                    size_bytes: 32 << 10,
                    share: Share::Core,
                },
                CacheSpec {
                    level: 1,
                    kind: CacheKind::Instruction,
                    size_bytes: 32 << 10,
                    share: Share::Core,
                },
                CacheSpec {
                    level: 2,
                    kind: CacheKind::Unified,
                    size_bytes: 256 << 10,
                    share: Share::Core,
                },
                CacheSpec {
                    level: 3,
                    kind: CacheKind::Unified,
                    size_bytes: 8 << 20,
                    share: Share::Package,
                },
            ],
            memory_bytes_per_node: 16 << 30,
            distance_same_package: 16,
            distance_other_package: 21,
            max_khz: None,
        }
    }

    fn total_cores(&self) -> u32 {
        self.packages
            * self.dies_per_package
            * self.nodes_per_die
            * self.clusters_per_node
            * self.cores_per_cluster
    }

    /// Builds the topology. Every CPU is online and allowed.
    pub fn build(&self, source: &str) -> Topology {
        let ncores = self.total_cores();
        let t = self.threads_per_core;
        let cores_per_pkg = ncores / self.packages;
        // Hierarchy position of each core (pkg, die, node, cluster) in pkg-major order.
        let per_cluster = self.cores_per_cluster;
        let per_node = per_cluster * self.clusters_per_node;
        let per_die = per_node * self.nodes_per_die;
        let cpu_id = |core: u32, thread: u32| -> u32 {
            match self.numbering {
                Numbering::Linear => core * t + thread,
                Numbering::SmtLast => thread * ncores + core,
                Numbering::Interleaved => {
                    let (pkg, k) = (core / cores_per_pkg, core % cores_per_pkg);
                    thread * ncores + k * self.packages + pkg
                }
            }
        };
        let mut cpus = Vec::new();
        let mut core_sets = Vec::new();
        for core in 0..ncores {
            let sibs: CpuSet = (0..t).map(|th| cpu_id(core, th)).collect();
            core_sets.push(sibs.clone());
            let pkg = core / cores_per_pkg;
            let die = core / per_die;
            let node = core / per_node;
            let cluster = core / per_cluster;
            for th in 0..t {
                cpus.push(Cpu {
                    id: cpu_id(core, th),
                    online: true,
                    allowed: true,
                    package: Some(pkg),
                    die: Some(die % self.dies_per_package),
                    cluster: Some(cluster),
                    core: Some(core),
                    core_id: Some(core % cores_per_pkg),
                    node: Some(node),
                    siblings: sibs.clone(),
                    capacity: None,
                    core_type: None,
                    max_khz: self.max_khz,
                    base_khz: self.max_khz,
                });
            }
        }
        cpus.sort_by_key(|c| c.id);
        let group = |cores_per: u32| -> Vec<CpuSet> {
            core_sets
                .chunks(cores_per as usize)
                .map(|ch| ch.iter().fold(CpuSet::new(), |a, s| a.union(s)))
                .collect()
        };
        let mut caches = Vec::new();
        for spec in &self.caches {
            let per = match spec.share {
                Share::Core => 1,
                Share::Cluster => per_cluster,
                Share::Node => per_node,
                Share::Die => per_die,
                Share::Package => cores_per_pkg,
            };
            for (i, set) in group(per).into_iter().enumerate() {
                caches.push(Cache {
                    level: spec.level,
                    kind: spec.kind,
                    size_bytes: Some(spec.size_bytes),
                    cpus: set,
                    id: Some(i as u32),
                });
            }
        }
        let node_sets = group(per_node);
        let nodes_per_pkg = self.dies_per_package * self.nodes_per_die;
        let nodes = node_sets
            .iter()
            .enumerate()
            .map(|(i, set)| {
                let i = i as u32;
                let distances = (0..node_sets.len() as u32)
                    .map(|j| {
                        let d = if i == j {
                            10
                        } else if i / nodes_per_pkg == j / nodes_per_pkg {
                            self.distance_same_package
                        } else {
                            self.distance_other_package
                        };
                        (j, d)
                    })
                    .collect();
                Node {
                    id: i,
                    cpus: set.clone(),
                    memory_bytes: Some(self.memory_bytes_per_node),
                    distances,
                    allowed: true,
                }
            })
            .collect();
        Topology {
            cpus,
            caches,
            nodes,
            freq_domains: Vec::new(),
            nics: Vec::new(),
            source: source.to_string(),
            coexistence: Default::default(),
        }
    }
}

/// One NIC with `queues` queues whose IRQs are numbered from `first_irq`, each queue's IRQ
/// affinity given by `irq_cpus(queue)`.
pub fn nic(
    name: &str,
    node: Option<u32>,
    speed_mbps: u64,
    first_irq: u32,
    queues: u32,
    irq_cpus: impl Fn(u32) -> CpuSet,
) -> Nic {
    let queues: Vec<NicQueue> = (0..queues)
        .map(|q| NicQueue {
            name: format!("{name}-TxRx-{q}"),
            irq: Some(first_irq + q),
            irq_cpus: irq_cpus(q),
            rps_cpus: CpuSet::new(),
        })
        .collect();
    let rx_cpus = queues
        .iter()
        .fold(CpuSet::new(), |a, q| a.union(&q.irq_cpus));
    Nic {
        name: name.to_string(),
        node,
        rx_cpus,
        queues,
        speed_mbps: Some(speed_mbps),
        addrs: Vec::new(),
    }
}

fn freq_domain(id: u32, cpus: CpuSet, available_khz: Vec<u64>) -> FreqDomain {
    FreqDomain {
        id,
        cpus,
        min_khz: available_khz.first().copied(),
        max_khz: available_khz.last().copied(),
        scaling_max_khz: available_khz.last().copied(),
        scaling_min_khz: available_khz.first().copied(),
        available_khz,
        governor: Some("schedutil".into()),
        available_governors: vec![
            "performance".into(),
            "powersave".into(),
            "schedutil".into(),
            "userspace".into(),
        ],
    }
}

fn ghz(g: f64) -> Option<u64> {
    Some((g * 1e6).round() as u64)
}

/// The built-in machine `name`, or a synthetic spec (`pkg:2 node:1 core:4 pu:2`).
pub fn machine(name: &str) -> Result<Topology, MachineError> {
    Ok(name.parse::<MachineSpec>()?.topology())
}

/// A machine named by a scenario or a flag, parsed once: a built-in machine, or a synthetic
/// spec whose topology is built (and its spec checked) when it is parsed. Read and written
/// as its name or spec (`odroid-xu4`, `pkg:2 core:4 pu:2`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum MachineSpec {
    Builtin(Machine),
    Synthetic {
        /// As written: how the machine is named in reports.
        spec: String,
        topology: Box<Topology>,
    },
}

impl MachineSpec {
    pub fn topology(&self) -> Topology {
        match self {
            MachineSpec::Builtin(m) => build(*m),
            MachineSpec::Synthetic { topology, .. } => (**topology).clone(),
        }
    }

    /// The built-in machine, whose catalogue facts apply; None for a synthetic one.
    pub fn builtin(&self) -> Option<Machine> {
        match self {
            MachineSpec::Builtin(m) => Some(*m),
            MachineSpec::Synthetic { .. } => None,
        }
    }
}

impl std::str::FromStr for MachineSpec {
    type Err = MachineError;
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        if name.contains(':') {
            return Ok(MachineSpec::Synthetic {
                spec: name.to_string(),
                topology: Box::new(synthetic(name)?),
            });
        }
        Machine::parse(name)
            .map(MachineSpec::Builtin)
            .ok_or_else(|| {
                MachineError::Unknown(name.to_string(), Machine::ALL.map(Machine::name).join(", "))
            })
    }
}

impl TryFrom<String> for MachineSpec {
    type Error = MachineError;
    fn try_from(name: String) -> Result<Self, Self::Error> {
        name.parse()
    }
}

impl std::fmt::Display for MachineSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MachineSpec::Builtin(m) => f.write_str(m.name()),
            MachineSpec::Synthetic { spec, .. } => f.write_str(spec),
        }
    }
}

impl From<MachineSpec> for String {
    fn from(m: MachineSpec) -> String {
        m.to_string()
    }
}

/// The topology of a built-in machine.
pub fn build(m: Machine) -> Topology {
    let src = format!("machine:{m}");
    match m {
        Machine::OdroidXu4 => odroid_xu4(&src),
        Machine::DellC6100 => {
            let mut s = Shape::new(2, 4, 2);
            s.numbering = Numbering::Interleaved;
            s.max_khz = ghz(2.26);
            s.distance_other_package = 20;
            s.memory_bytes_per_node = 12 << 30;
            let mut t = s.build(&src);
            t.nics
                .push(nic("eth0", Some(0), 1000, 48, 4, |q| CpuSet::single(q * 2)));
            t
        }
        Machine::HpDk388p => {
            let mut s = Shape::new(2, 6, 2);
            s.max_khz = ghz(2.9);
            s.caches[3].size_bytes = 15 << 20;
            s.distance_other_package = 20;
            s.memory_bytes_per_node = 32 << 30;
            let mut t = s.build(&src);
            t.nics
                .push(nic("eth0", Some(0), 1000, 64, 4, CpuSet::single));
            t
        }
        Machine::Xeon5355x2 => {
            let mut s = Shape::new(2, 4, 1);
            s.clusters_per_node = 2;
            s.cores_per_cluster = 2;
            s.max_khz = ghz(2.66);
            // Core 2: no L3; the 4 MiB L2 is shared by each pair of cores.
            s.caches.truncate(3);
            s.caches[2].size_bytes = 4 << 20;
            s.caches[2].share = Share::Cluster;
            s.memory_bytes_per_node = 16 << 30;
            // Front-side bus: one memory node for both packages.
            let mut t = s.build(&src);
            for c in &mut t.cpus {
                c.node = Some(0);
            }
            t.nodes = vec![Node {
                id: 0,
                cpus: CpuSet::first_n(8),
                memory_bytes: Some(16 << 30),
                distances: BTreeMap::from([(0, 10)]),
                allowed: true,
            }];
            // Two 4-port GbE NICs, one queue each; IRQs on CPUs 0 and 1 (sharing L2),
            // the seed's "2S" configuration. Scenarios override this.
            for p in 0..8u32 {
                t.nics
                    .push(nic(&format!("eth{p}"), Some(0), 1000, 40 + p, 1, |_| {
                        CpuSet::single(p % 2)
                    }));
            }
            t
        }
        Machine::XeonX5570x2 => {
            let mut s = Shape::new(2, 4, 1);
            s.max_khz = ghz(2.93);
            s.distance_other_package = 21;
            s.memory_bytes_per_node = 12 << 30;
            s.build(&src)
        }
        Machine::XeonE52697x2 => {
            let mut s = Shape::new(2, 14, 1);
            s.max_khz = ghz(2.6);
            s.caches[3].size_bytes = 35 << 20;
            s.memory_bytes_per_node = 64 << 30;
            s.build(&src)
        }
        Machine::OpteronMagnyCours4p => {
            let mut s = Shape::new(4, 8, 1);
            s.dies_per_package = 2;
            s.cores_per_cluster = 4;
            s.max_khz = ghz(2.4);
            s.caches = vec![
                CacheSpec {
                    level: 1,
                    kind: CacheKind::Data,
                    size_bytes: 64 << 10,
                    share: Share::Core,
                },
                CacheSpec {
                    level: 1,
                    kind: CacheKind::Instruction,
                    size_bytes: 64 << 10,
                    share: Share::Core,
                },
                CacheSpec {
                    level: 2,
                    kind: CacheKind::Unified,
                    size_bytes: 512 << 10,
                    share: Share::Core,
                },
                CacheSpec {
                    level: 3,
                    kind: CacheKind::Unified,
                    size_bytes: 6 << 20,
                    share: Share::Die,
                },
            ];
            s.distance_same_package = 16;
            s.distance_other_package = 22;
            s.memory_bytes_per_node = 8 << 30;
            let mut t = s.build(&src);
            t.nics.push(nic("eth0", Some(0), 10_000, 80, 8, |q| {
                CpuSet::single(q % 4)
            }));
            t
        }
    }
}

fn odroid_xu4(src: &str) -> Topology {
    let little = CpuSet::parse_list("0-3").unwrap_or_default();
    let big = CpuSet::parse_list("4-7").unwrap_or_default();
    let cpus = (0..8)
        .map(|id| {
            let is_big = id >= 4;
            Cpu {
                id,
                online: true,
                allowed: true,
                package: Some(0),
                die: None,
                cluster: Some(u32::from(is_big)),
                core: Some(id),
                core_id: Some(id % 4),
                node: Some(0),
                siblings: CpuSet::single(id),
                // capacity-dmips-mhz x fmax, normalised so A15@2 GHz = 1024 (CALIBRATION E).
                capacity: Some(if is_big { 1024 } else { 377 }),
                core_type: Some(if is_big {
                    CoreType::Big
                } else {
                    CoreType::Little
                }),
                max_khz: Some(if is_big { 2_000_000 } else { 1_400_000 }),
                base_khz: None,
            }
        })
        .collect();
    let mut caches = Vec::new();
    for id in 0..8u32 {
        for kind in [CacheKind::Data, CacheKind::Instruction] {
            caches.push(Cache {
                level: 1,
                kind,
                size_bytes: Some(32 << 10),
                cpus: CpuSet::single(id),
                id: None,
            });
        }
    }
    caches.push(Cache {
        level: 2,
        kind: CacheKind::Unified,
        size_bytes: Some(512 << 10),
        cpus: little.clone(),
        id: Some(0),
    });
    caches.push(Cache {
        level: 2,
        kind: CacheKind::Unified,
        size_bytes: Some(2 << 20),
        cpus: big.clone(),
        id: Some(1),
    });
    // OPPs from exynos5800.dtsi (CALIBRATION A1): A7 200-1400 MHz, A15 200-2000 MHz.
    let a7: Vec<u64> = (2..=14).map(|m| m * 100_000).collect();
    let a15: Vec<u64> = (2..=20).map(|m| m * 100_000).collect();
    Topology {
        cpus,
        caches,
        nodes: vec![Node {
            id: 0,
            cpus: CpuSet::first_n(8),
            memory_bytes: Some(2 << 30),
            distances: BTreeMap::from([(0, 10)]),
            allowed: true,
        }],
        freq_domains: vec![freq_domain(0, little, a7), freq_domain(4, big, a15)],
        // The GbE (r8153 on USB3) interrupt lands on CPU 0 (an A7) by default (CALIBRATION A6).
        nics: vec![nic("eth0", None, 1000, 103, 1, |_| CpuSet::single(0))],
        source: src.to_string(),
        coexistence: Default::default(),
    }
}

/// Parses `pkg:2 die:1 node:1 cluster:1 core:4 pu:2` (any subset, in any order; counts are
/// per parent level; `numbering:linear|smt-last|interleaved`; `l3:package|die|node`).
pub fn synthetic(spec: &str) -> Result<Topology, MachineError> {
    let bad = |why: String| MachineError::BadSpec {
        spec: spec.to_string(),
        why,
    };
    let mut s = Shape::new(1, 1, 1);
    s.numbering = Numbering::Linear;
    let mut l3 = Share::Node;
    for tok in spec.split_whitespace() {
        let (k, v) = tok
            .split_once(':')
            .ok_or_else(|| bad(format!("{tok:?} is not key:value")))?;
        let n = || -> Result<u32, MachineError> {
            match v.parse::<u32>() {
                Ok(n) if (1..=1024).contains(&n) => Ok(n),
                _ => Err(bad(format!("{k}: {v:?} is not a count from 1 to 1024"))),
            }
        };
        match k {
            "pkg" | "package" => s.packages = n()?,
            "die" => s.dies_per_package = n()?,
            "node" | "numa" => s.nodes_per_die = n()?,
            "cluster" => s.clusters_per_node = n()?,
            "core" => s.cores_per_cluster = n()?,
            "pu" | "thread" => s.threads_per_core = n()?,
            "numbering" => {
                s.numbering = match v {
                    "linear" => Numbering::Linear,
                    "smt-last" => Numbering::SmtLast,
                    "interleaved" => Numbering::Interleaved,
                    _ => {
                        return Err(bad(format!(
                            "numbering {v:?}: linear, smt-last or interleaved"
                        )))
                    }
                }
            }
            "l3" => {
                l3 = match v {
                    "package" | "pkg" => Share::Package,
                    "die" => Share::Die,
                    "node" => Share::Node,
                    _ => return Err(bad(format!("l3 {v:?}: package, die or node"))),
                }
            }
            _ => return Err(bad(format!("unknown key {k:?}"))),
        }
    }
    if s.total_cores() * s.threads_per_core > 16384 {
        return Err(bad("more than 16384 CPUs".into()));
    }
    if s.clusters_per_node > 1 {
        s.caches[2].share = Share::Cluster;
    }
    s.caches[3].share = l3;
    Ok(s.build(&format!("synthetic:{spec}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_machine_builds_and_validates() {
        for m in Machine::ALL {
            let name = m.name();
            let t = machine(name).unwrap();
            t.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
            let json = serde_json::to_string(&t).unwrap();
            let back: Topology = serde_json::from_str(&json).unwrap();
            assert_eq!(back, t, "{name} does not round-trip through JSON");
        }
    }

    /// A CPU's package group is the one `packages` gives it, on every built-in machine.
    #[test]
    fn package_cpus_is_the_cpus_group_in_packages() {
        for m in Machine::ALL {
            let t = machine(m.name()).unwrap();
            let groups = t.packages();
            for c in t.online().iter() {
                let package = t.cpu(c).and_then(|x| x.package);
                assert_eq!(t.package_cpus(c), groups[&package], "{} CPU {c}", m.name());
            }
        }
    }

    #[test]
    fn shapes() {
        let c = machine("dell-c6100").unwrap();
        assert_eq!(c.cpus.len(), 16);
        assert_eq!(c.cores().len(), 8);
        assert_eq!(c.packages().len(), 2);
        assert_eq!(c.siblings(0).to_vec(), vec![0, 8]);
        assert_eq!(c.cpu(1).unwrap().package, Some(1));
        let h = machine("hp-dk388p").unwrap();
        assert_eq!((h.cpus.len(), h.cores().len()), (24, 12));
        let m = machine("opteron-magny-cours-4p").unwrap();
        assert_eq!(
            (m.cpus.len(), m.nodes.len(), m.llc_domains().len()),
            (32, 8, 8)
        );
        assert_eq!(m.nodes[0].distances[&1], 16);
        assert_eq!(m.nodes[0].distances[&2], 22);
        let x = machine("xeon-5355x2").unwrap();
        assert_eq!(x.cache_neighbours(0).to_vec(), vec![1]);
        assert_eq!(x.nics.len(), 8);
        let o = machine("odroid-xu4").unwrap();
        assert_eq!(o.freq_domains.len(), 2);
        assert_eq!(o.cpu(5).unwrap().core_type, Some(CoreType::Big));
    }

    #[test]
    fn machine_specs_parse_once_and_print_as_written() {
        let m: MachineSpec = "dell-c6100".parse().unwrap();
        assert_eq!(m, MachineSpec::Builtin(Machine::DellC6100));
        assert_eq!(m.to_string(), "dell-c6100");
        let s: MachineSpec = "pkg:2 core:2 pu:2".parse().unwrap();
        assert_eq!(s.builtin(), None);
        assert_eq!(s.to_string(), "pkg:2 core:2 pu:2");
        assert_eq!(s.topology().cpus.len(), 8);
        let e = "pkg:0".parse::<MachineSpec>().unwrap_err().to_string();
        assert!(e.contains("\"pkg:0\""), "{e}");
        let e = "dell".parse::<MachineSpec>().unwrap_err().to_string();
        assert!(e.contains("\"dell\"") && e.contains("dell-c6100"), "{e}");
    }

    #[test]
    fn synthetic_specs() {
        let t = machine("pkg:2 node:1 core:4 pu:2").unwrap();
        assert_eq!(t.cpus.len(), 16);
        assert_eq!(t.siblings(0).to_vec(), vec![0, 1]);
        let t = synthetic("pkg:2 core:2 pu:2 numbering:smt-last").unwrap();
        assert_eq!(t.siblings(0).to_vec(), vec![0, 4]);
        assert!(synthetic("pkg:0").is_err());
        assert!(synthetic("bogus:1").is_err());
        assert!(synthetic("pkg").is_err());
        assert!(machine("nope").is_err());
    }
}
