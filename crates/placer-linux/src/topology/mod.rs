//! Reads the machine's [`Topology`] from a filesystem root (`/` or a fixture tree holding
//! `sys/` and `proc/`). What comes from where, and every fallback, is in docs/topology.md;
//! in short:
//!
//! - present CPUs: `cpu/present`, else the `cpuN` directories; online: `cpu/online`, else
//!   each CPU's `online` file (missing = online, as for cpu0 on x86). Offline CPUs are
//!   listed with everything else unknown: the kernel removes most of their files.
//! - allowed: [`allowed`] (cgroup cpuset v1/v2 and `Cpus_allowed_list`).
//! - package: `physical_package_id`; when it is -1 or missing, the groups of
//!   `package_cpus`/`core_siblings` (masks, else lists) numbered by first CPU; else
//!   `proc/cpuinfo` `physical id`.
//! - core: union-find over `core_cpus`/`thread_siblings` (masks, else lists; so a
//!   one-sided sibling list cannot make the groups inconsistent), split by `core_id`
//!   (AMD modules), numbered 0.. by first CPU; else (package, die, `core_id`) with
//!   cpuinfo's `core id` when the file is missing.
//! - caches: `cpuN/cache/indexM/{level,type,size,shared_cpu_map|shared_cpu_list,id}` of
//!   online CPUs, one entry per distinct (level, kind, CPU set). A CPU already covered by
//!   an instance read through the same `indexM` is not read again (the kernel numbers
//!   a CPU's cache leaves identically for all CPUs sharing them); this keeps a 256-CPU
//!   read fast.
//! - nodes: `node/nodeN/{cpumap|cpulist (else cpuM links), meminfo, distance}`; a
//!   distance row maps to the node directories in id order, or to `node/possible` when
//!   its length matches that (hand-edited snapshots with an offline node); any other
//!   length is an error.
//! - capacity `cpuN/cpu_capacity`; core type from `devices/cpu_core|cpu_atom/cpus`
//!   (Intel hybrid), else from capacities (above the midpoint of min and max = big),
//!   else from cpufreq `base_frequency` when it takes exactly two values (Intel hybrid
//!   without capacities: P-cores have the higher base).
//! - frequency domains: `cpufreq/policyN`, else per-CPU `cpuN/cpufreq` (old kernels).
//! - NICs: [`nic`].
//!
//! Missing files give `None`/empty; unreadable or malformed files give an error that
//! names the file. Nothing here panics on any input.

mod allowed;
pub(crate) mod fs;
pub mod links;
mod nic;
pub mod parse;

pub use nic::is_rx_irq_name;

use crate::error::{LinuxError, Result};
use fs::Files;
use placer_core::topology::{Cache, CacheKind, CoreType, Cpu, FreqDomain, Node};
use placer_core::{CpuSet, Topology};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

const CPU: &str = "sys/devices/system/cpu";
const NODE: &str = "sys/devices/system/node";

/// Reads the topology under `root`.
pub fn read(root: &Path) -> Result<Topology> {
    Reader::new(root).read()
}

/// A full read every this many [`Reader::read`]s (counted from the last full one),
/// whatever the key says: what changes without a CPU or node coming or going (a capacity
/// updated, a node's memory grown) is seen within this many refreshes.
pub const FULL_READ_EVERY: u64 = 6;

/// What says whether the machine part (CPUs, their ids and capacities, caches, nodes) may
/// have changed since the last read: the texts of the present and online
/// CPU lists and of the online and memory-holding node lists, which hotplug rewrites.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MachineKey([Option<String>; 4]);

impl MachineKey {
    fn read(files: &Files) -> Result<MachineKey> {
        let text = |rel: String| files.parse(&rel, |t| Ok(t.to_string()));
        Ok(MachineKey([
            text(format!("{CPU}/present"))?,
            text(format!("{CPU}/online"))?,
            text(format!("{NODE}/online"))?,
            text(format!("{NODE}/has_memory"))?,
        ]))
    }
}

/// The part of a topology read only when its [`MachineKey`] changes: every CPU (each
/// `allowed`; no frequency or core type), the caches and the nodes (each `allowed`;
/// `nodes_read`: from sysfs, not the one node made up without NUMA).
#[derive(Clone)]
struct Machine {
    cpus: Vec<Cpu>,
    online: CpuSet,
    caches: Vec<Cache>,
    nodes: Vec<Node>,
    nodes_read: bool,
}

/// Reads a root's topology again and again, as the daemon does at each refresh: the
/// machine part is read again only when hotplug changed its key, the NICs (names, queues,
/// IRQs, addresses, speed) only when their [`links::LinkWatch`] saw a change (or each
/// time without one: a fixture root, a kernel that refuses the socket); both in full
/// every [`FULL_READ_EVERY`]th read. What moves without either (the cpuset's CPUs and
/// memory nodes, frequency domains, each NIC queue's IRQ affinity and RPS CPUs) is read
/// each time. Each read gives what [`read`] would.
pub struct Reader {
    root: std::path::PathBuf,
    machine: Option<(MachineKey, Machine)>,
    nics: Option<(Vec<placer_core::topology::Nic>, nic::RxDirs)>,
    links: Links,
    /// Told of a link change ([`Reader::links_changed`]): the NICs are read in full next.
    nics_stale: bool,
    nic_reads: u64,
    /// Reads that took the machine part from the last one that read it.
    reused: u64,
    machine_reads: u64,
}

/// How a [`Reader`] learns that the NICs changed.
enum Links {
    /// It does not: they are read in full each time.
    Unwatched,
    Watch(links::LinkWatch),
    /// Only through [`Reader::links_changed`] (a fixture root whose test says so).
    Told,
}

impl Reader {
    /// On this machine's root, with a [`links::LinkWatch`] of the calling thread's network
    /// namespace (opened before the first read, so no change escapes it).
    pub fn new(root: &Path) -> Reader {
        let links = match root == Path::new("/") {
            true => links::LinkWatch::open()
                .map(Links::Watch)
                .map_err(|e| tracing::debug!("rtnetlink link watch: {e}"))
                .unwrap_or(Links::Unwatched),
            false => Links::Unwatched,
        };
        Self::with_links(root, links)
    }

    /// A reader that re-reads the NICs in full only when told ([`Reader::links_changed`])
    /// or at a full read: tests of the refresh on fixture roots.
    pub fn told_of_link_changes(root: &Path) -> Reader {
        Self::with_links(root, Links::Told)
    }

    /// The NICs changed: the next read reads them in full.
    pub fn links_changed(&mut self) {
        self.nics_stale = true;
    }

    /// How many reads read the NICs in full (for tests and the bench).
    pub fn nic_reads(&self) -> u64 {
        self.nic_reads
    }

    fn with_links(root: &Path, links: Links) -> Reader {
        Reader {
            root: root.to_path_buf(),
            nics: None,
            links,
            nics_stale: false,
            nic_reads: 0,
            machine: None,
            reused: 0,
            machine_reads: 0,
        }
    }

    /// How many reads read the machine part (for tests and the bench).
    pub fn machine_reads(&self) -> u64 {
        self.machine_reads
    }

    pub fn read(&mut self) -> Result<Topology> {
        let files = Files::new(&self.root);
        let key = MachineKey::read(&files)?;
        // Every FULL_READ_EVERYth read since the machine part was last read is full.
        let full = self.reused + 1 >= FULL_READ_EVERY;
        let mut m = match &self.machine {
            Some((k, m)) if !full && *k == key => {
                self.reused += 1;
                m.clone()
            }
            _ => {
                // Dropped first: a failed read leaves no stale part behind.
                self.machine = None;
                self.machine_reads += 1;
                self.reused = 0;
                let m = read_machine(&files)?;
                self.machine = Some((key, m.clone()));
                m
            }
        };
        let allowed = allowed::allowed(&files)?;
        for c in &mut m.cpus {
            c.allowed = allowed.cpus.as_ref().is_none_or(|a| a.contains(c.id));
        }
        // As hwloc: nodes the process may not allocate on (its cpuset's mems) are marked,
        // and left out of what commands show and of the policies' targets.
        if let Some(mems) = allowed.mems {
            if m.nodes_read && m.nodes.iter().any(|n| mems.contains(n.id)) {
                for n in &mut m.nodes {
                    n.allowed = mems.contains(n.id);
                }
            }
        }
        // Governors and frequency limits move at run time (placer's energy-qos sets
        // them); the core types may follow from the base frequencies.
        let freq_domains = read_freq(&files, &m.online, &mut m.cpus)?;
        assign_core_types(&files, &mut m.cpus)?;
        // Drained before the NICs are read: a change during the read shows next time.
        let changed = match &mut self.links {
            Links::Unwatched => true,
            Links::Watch(w) => w.changed(),
            Links::Told => false,
        };
        let stale = std::mem::take(&mut self.nics_stale) || changed || full;
        let nics = match self.nics.take() {
            Some((mut nics, rx)) if !stale => match nic::refresh(&files, &mut nics, &rx) {
                Ok(()) => {
                    self.nics = Some((nics.clone(), rx));
                    nics
                }
                // A NIC gone before its event came: read them all.
                Err(_) => self.read_nics(&files)?,
            },
            _ => self.read_nics(&files)?,
        };
        let topo = Topology {
            cpus: m.cpus,
            caches: m.caches,
            nodes: m.nodes,
            freq_domains,
            nics,
            source: format!("root:{}", self.root.display()),
            coexistence: Default::default(),
        };
        topo.validate()
            .map_err(|e| LinuxError::Other(format!("{}: {e}", self.root.display())))?;
        Ok(topo)
    }

    fn read_nics(&mut self, files: &Files) -> Result<Vec<placer_core::topology::Nic>> {
        self.nic_reads += 1;
        let (nics, rx) = nic::read_nics(files, self.root == Path::new("/"))?;
        self.nics = Some((nics.clone(), rx));
        Ok(nics)
    }
}

/// The machine part under `files`' root, every CPU and node allowed.
fn read_machine(files: &Files) -> Result<Machine> {
    let present = match files.parse(&format!("{CPU}/present"), parse::cpuset_list)? {
        Some(p) if !p.is_empty() => p,
        _ => files.numbered(CPU, "cpu")?.into_iter().collect(),
    };
    let online = match files.parse(&format!("{CPU}/online"), parse::cpuset_list)? {
        Some(o) if !o.is_empty() => o.intersection(&present),
        _ => {
            let mut o = CpuSet::new();
            for id in present.iter() {
                let v = files.parse(&format!("{CPU}/cpu{id}/online"), parse::uint)?;
                if v != Some(0) {
                    o.insert(id);
                }
            }
            o
        }
    };

    let mut cpus: Vec<Cpu> = present
        .iter()
        .map(|id| Cpu::bare(id, online.contains(id)))
        .collect();

    let smt_source = read_cpu_ids(files, &mut cpus, &online)?;
    let caches = read_caches(files, &online, &present, &smt_source)?;
    let mut nodes = read_nodes(files, &present)?;
    let nodes_read = !nodes.is_empty();
    // A kernel without NUMA support has no node directory: like hwloc, one node holds
    // every CPU and all memory.
    if nodes.is_empty() && !present.is_empty() && !files.exists(NODE) {
        nodes.push(Node {
            id: 0,
            cpus: present.clone(),
            memory_bytes: files
                .parse("proc/meminfo", parse::meminfo_total_bytes)?
                .flatten(),
            distances: BTreeMap::from([(0, 10)]),
            allowed: true,
        });
    }
    for n in &nodes {
        for id in n.cpus.iter() {
            if let Some(c) = cpu_mut(&mut cpus, id) {
                c.node.get_or_insert(n.id);
            }
        }
    }
    // Whether a kernel has `cpu_capacity` (or `die_id`, a cache `id`, ...) is a property
    // of the kernel, not of the CPU: when the first CPU lacks it, the others are not
    // probed (a 256-CPU read stays well under 20 ms).
    for c in cpus.iter_mut().filter(|c| c.online) {
        let cap = files.parse(&format!("{CPU}/cpu{}/cpu_capacity", c.id), parse::uint)?;
        match cap {
            Some(v) => {
                c.capacity = Some(u32::try_from(v).map_err(|_| {
                    LinuxError::parse(
                        files.path(&format!("{CPU}/cpu{}/cpu_capacity", c.id)),
                        "capacity out of range",
                    )
                })?)
            }
            None => break,
        }
    }
    Ok(Machine {
        cpus,
        online,
        caches,
        nodes,
        nodes_read,
    })
}

fn cpu_mut(cpus: &mut [Cpu], id: u32) -> Option<&mut Cpu> {
    cpus.binary_search_by_key(&id, |c| c.id)
        .ok()
        .map(move |i| &mut cpus[i])
}

/// Per-CPU raw ids read from `cpuN/topology`.
#[derive(Default)]
struct RawIds {
    package: Option<u32>,
    package_cpus: Option<CpuSet>,
    siblings: Option<CpuSet>,
}

/// Sibling files, best first: masks before lists (see [`Files::cpuset_pair`]).
const SIBLING_FILES: &[(&str, bool)] = &[
    ("core_cpus", true),
    ("core_cpus_list", false),
    ("thread_siblings", true),
    ("thread_siblings_list", false),
];
const PACKAGE_FILES: &[(&str, bool)] = &[
    ("package_cpus", true),
    ("package_cpus_list", false),
    ("core_siblings", true),
    ("core_siblings_list", false),
];

/// The first of `names` present in `dir`, trying `*hint` (the one found for the
/// previous CPU) first so that a 256-CPU read does not probe missing names each time.
fn first_cpuset(
    files: &Files,
    dir: &str,
    names: &[(&str, bool)],
    hint: &mut usize,
) -> Result<Option<CpuSet>> {
    let order = std::iter::once(*hint).chain((0..names.len()).filter(|i| i != hint));
    for i in order {
        let (name, mask) = names[i];
        let f: fn(&str) -> std::result::Result<CpuSet, String> = if mask {
            parse::cpuset_mask
        } else {
            parse::cpuset_list
        };
        if let Some(s) = files.parse(&format!("{dir}/{name}"), f)? {
            *hint = i;
            return Ok(Some(s));
        }
    }
    Ok(None)
}

/// Fills package, die, cluster, core and siblings of the online CPUs. Returns, for each
/// SMT sibling that was not read but copied, the CPU it was copied from.
fn read_cpu_ids(files: &Files, cpus: &mut [Cpu], online: &CpuSet) -> Result<HashMap<u32, u32>> {
    let mut raw: BTreeMap<u32, RawIds> = BTreeMap::new();
    // SMT siblings share package, die, cluster and sibling set: read them once per core
    // (from its first CPU) and copy; `core_id` is read for every CPU (see
    // split_by_core_id).
    let mut read_by: HashMap<u32, u32> = HashMap::new();
    let (mut sib_hint, mut pkg_hint) = (0, 0);
    let (mut has_die, mut has_cluster): (Option<bool>, Option<bool>) = (None, None);
    for i in 0..cpus.len() {
        if !cpus[i].online {
            continue;
        }
        let id = cpus[i].id;
        let t = format!("{CPU}/cpu{id}/topology");
        let read_id = |name: &str| files.parse(&format!("{t}/{name}"), parse::opt_id);
        cpus[i].core_id = read_id("core_id")?.flatten();
        if let Some(&src) = read_by.get(&id) {
            let j = cpus.binary_search_by_key(&src, |c| c.id).unwrap();
            (cpus[i].die, cpus[i].cluster) = (cpus[j].die, cpus[j].cluster);
            let r = &raw[&src];
            let copy = RawIds {
                package: r.package,
                package_cpus: r.package_cpus.clone(),
                siblings: r.siblings.clone(),
            };
            raw.insert(id, copy);
            continue;
        }
        let package = read_id("physical_package_id")?.flatten();
        if has_die != Some(false) {
            let v = read_id("die_id")?;
            has_die = Some(v.is_some());
            cpus[i].die = v.flatten();
        }
        if has_cluster != Some(false) {
            let v = read_id("cluster_id")?;
            has_cluster = Some(v.is_some());
            // An x86 kernel that knows no cluster writes 65535 (its BAD_APICID): unknown.
            cpus[i].cluster = v.flatten().filter(|&c| c != u32::from(u16::MAX));
        }
        let sibs = first_cpuset(files, &t, SIBLING_FILES, &mut sib_hint)?;
        let pkg = first_cpuset(files, &t, PACKAGE_FILES, &mut pkg_hint)?;
        if let Some(s) = &sibs {
            for other in s.iter().filter(|&o| o > id && online.contains(o)) {
                read_by.entry(other).or_insert(id);
            }
        }
        raw.insert(
            id,
            RawIds {
                package,
                package_cpus: pkg,
                siblings: sibs,
            },
        );
    }
    let on: Vec<u32> = online.iter().collect();
    let mut cpuinfo: Option<HashMap<u32, parse::CpuinfoEntry>> = None;
    let mut load_cpuinfo = |files: &Files| -> Result<HashMap<u32, parse::CpuinfoEntry>> {
        if cpuinfo.is_none() {
            let v = files
                .parse("proc/cpuinfo", parse::cpuinfo)?
                .unwrap_or_default();
            cpuinfo = Some(v.into_iter().map(|e| (e.processor, e)).collect());
        }
        Ok(cpuinfo.clone().unwrap_or_default())
    };

    // Packages.
    if on.iter().all(|id| raw[id].package.is_some()) {
        for id in &on {
            cpu_mut(cpus, *id).unwrap().package = raw[id].package;
        }
    } else if on.iter().all(|id| raw[id].package_cpus.is_some()) {
        let groups = components(&on, |id| raw[&id].package_cpus.clone().unwrap_or_default());
        for (k, g) in groups.iter().enumerate() {
            for id in g.iter() {
                cpu_mut(cpus, id).unwrap().package = Some(k as u32);
            }
        }
    } else {
        let info = load_cpuinfo(files)?;
        for id in &on {
            let c = cpu_mut(cpus, *id).unwrap();
            c.package = raw[id]
                .package
                .or_else(|| info.get(id).and_then(|e| e.physical_id));
        }
    }

    // Cores.
    let groups: Vec<CpuSet> = if on.iter().all(|id| raw[id].siblings.is_some()) {
        let comps = components(&on, |id| raw[&id].siblings.clone().unwrap_or_default());
        split_by_core_id(comps, cpus)
    } else {
        let info = load_cpuinfo(files)?;
        let mut by_key: BTreeMap<(Option<u32>, Option<u32>, u32), CpuSet> = BTreeMap::new();
        let mut ok = true;
        for id in &on {
            let c = cpu_mut(cpus, *id).unwrap();
            let core_id = c.core_id.or_else(|| info.get(id).and_then(|e| e.core_id));
            match core_id {
                Some(k) => by_key.entry((c.package, c.die, k)).or_default().insert(*id),
                None => ok = false,
            }
        }
        if ok {
            let mut v: Vec<CpuSet> = by_key.into_values().collect();
            v.sort_by_key(|s| s.first());
            v
        } else {
            Vec::new()
        }
    };
    for (k, g) in groups.iter().enumerate() {
        for id in g.iter() {
            let c = cpu_mut(cpus, id).unwrap();
            c.core = Some(k as u32);
            c.siblings = g.clone();
        }
    }
    Ok(read_by)
}

/// Splits sibling groups whose CPUs carry different `core_id`s (AMD Bulldozer/Piledriver
/// kernels report a module's two integer cores as thread siblings; each has its own L1d
/// and `core_id`, and hwloc shows them as two cores). Groups with any unknown `core_id`
/// are kept whole.
fn split_by_core_id(groups: Vec<CpuSet>, cpus: &[Cpu]) -> Vec<CpuSet> {
    let core_id = |id: u32| {
        cpus.binary_search_by_key(&id, |c| c.id)
            .ok()
            .and_then(|i| cpus[i].core_id)
    };
    let mut out = Vec::new();
    for g in groups {
        let ids: Option<Vec<u32>> = g.iter().map(core_id).collect();
        match ids {
            Some(ids) => {
                let mut by: BTreeMap<u32, CpuSet> = BTreeMap::new();
                for (cpu, k) in g.iter().zip(ids) {
                    by.entry(k).or_default().insert(cpu);
                }
                out.extend(by.into_values());
            }
            None => out.push(g),
        }
    }
    out.sort_by_key(|s| s.first());
    out
}

/// Connected components of "lists" over `ids` (each id joined with every listed id that
/// is in `ids`), ordered by first CPU.
fn components(ids: &[u32], lists: impl Fn(u32) -> CpuSet) -> Vec<CpuSet> {
    let index: HashMap<u32, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    let mut parent: Vec<usize> = (0..ids.len()).collect();
    fn find(p: &mut [usize], mut x: usize) -> usize {
        while p[x] != x {
            p[x] = p[p[x]];
            x = p[x];
        }
        x
    }
    for (i, id) in ids.iter().enumerate() {
        for other in lists(*id).iter() {
            if let Some(&j) = index.get(&other) {
                let (a, b) = (find(&mut parent, i), find(&mut parent, j));
                if a != b {
                    parent[a.max(b)] = a.min(b);
                }
            }
        }
    }
    let mut groups: BTreeMap<usize, CpuSet> = BTreeMap::new();
    for (i, id) in ids.iter().enumerate() {
        let r = find(&mut parent, i);
        groups.entry(r).or_default().insert(*id);
    }
    let mut v: Vec<CpuSet> = groups.into_values().collect();
    v.sort_by_key(|s| s.first());
    v
}

fn read_caches(
    files: &Files,
    online: &CpuSet,
    present: &CpuSet,
    smt_source: &HashMap<u32, u32>,
) -> Result<Vec<Cache>> {
    let mut caches: Vec<Cache> = Vec::new();
    // index number -> caches found through it, to skip CPUs already covered.
    let mut by_index: HashMap<u32, Vec<usize>> = HashMap::new();
    let mut has_id: Option<bool> = None;
    let mut seen: HashMap<(u8, CacheKind, CpuSet), usize> = HashMap::new();
    // Number of cache leaves of each CPU read: an SMT sibling covered by all of its
    // source's leaves has no other (they share the core), so it is not probed further.
    let mut leaves: HashMap<u32, u32> = HashMap::new();
    for cpu in online.iter() {
        let source_leaves = smt_source.get(&cpu).and_then(|s| leaves.get(s)).copied();
        for idx in 0u32.. {
            if source_leaves == Some(idx) {
                break;
            }
            if by_index
                .get(&idx)
                .is_some_and(|v| v.iter().any(|&i| caches[i].cpus.contains(cpu)))
            {
                continue;
            }
            let d = format!("{CPU}/cpu{cpu}/cache/index{idx}");
            let Some(level) = files.parse(&format!("{d}/level"), parse::uint)? else {
                if idx == 0 {
                    caches.extend(sparc_caches(files, cpu)?);
                }
                leaves.insert(cpu, idx);
                break;
            };
            let level = u8::try_from(level).map_err(|_| {
                LinuxError::parse(files.path(&format!("{d}/level")), "level out of range")
            })?;
            let Some(Some(kind)) = files.parse(&format!("{d}/type"), parse::cache_kind)? else {
                continue;
            };
            let size_bytes = files.parse(&format!("{d}/size"), parse::cache_size)?;
            let mut shared = files
                .cpuset_pair(
                    &format!("{d}/shared_cpu_list"),
                    &format!("{d}/shared_cpu_map"),
                )?
                .unwrap_or_default()
                .intersection(present);
            shared.insert(cpu);
            let id = if has_id != Some(false) {
                let v = files.parse(&format!("{d}/id"), parse::opt_id)?;
                has_id = Some(v.is_some());
                v.flatten()
            } else {
                None
            };
            let key = (level, kind, shared.clone());
            let pos = match seen.get(&key) {
                Some(&p) => p,
                None => {
                    seen.insert(key, caches.len());
                    caches.push(Cache {
                        level,
                        kind,
                        size_bytes,
                        cpus: shared,
                        id,
                    });
                    caches.len() - 1
                }
            };
            by_index.entry(idx).or_default().push(pos);
        }
    }
    caches.sort_by_key(|c| (c.level, c.kind, c.cpus.first()));
    Ok(caches)
}

/// SPARC kernels have no `cache/` directory but per-CPU `l1_dcache_size`,
/// `l1_icache_size` and `l2_cache_size` files, without sharing information: each is
/// taken as private to its CPU (as lscpu does).
fn sparc_caches(files: &Files, cpu: u32) -> Result<Vec<Cache>> {
    let mut out = Vec::new();
    for (name, level, kind) in [
        ("l1_dcache_size", 1, CacheKind::Data),
        ("l1_icache_size", 1, CacheKind::Instruction),
        ("l2_cache_size", 2, CacheKind::Unified),
    ] {
        if let Some(size) = files.parse(&format!("{CPU}/cpu{cpu}/{name}"), parse::cache_size)? {
            out.push(Cache {
                level,
                kind,
                size_bytes: Some(size),
                cpus: CpuSet::single(cpu),
                id: None,
            });
        }
    }
    Ok(out)
}

fn read_nodes(files: &Files, present: &CpuSet) -> Result<Vec<Node>> {
    let ids = files.numbered(NODE, "node")?;
    if let Some(on) = files.parse(&format!("{NODE}/online"), parse::cpuset_list)? {
        for n in on.iter() {
            if ids.binary_search(&n).is_err() {
                return Err(LinuxError::parse(
                    files.path(&format!("{NODE}/node{n}")),
                    format!("node {n} is online (node/online = {on}) but its directory is missing"),
                ));
            }
        }
    }
    let possible = files.parse(&format!("{NODE}/possible"), parse::cpuset_list)?;
    let mut nodes = Vec::new();
    for &id in &ids {
        let d = format!("{NODE}/node{id}");
        // Very old kernels have neither file, only `nodeN/cpuM` links.
        let cpus = match files.cpuset_pair(&format!("{d}/cpulist"), &format!("{d}/cpumap"))? {
            Some(c) => c,
            None => files.numbered(&d, "cpu")?.into_iter().collect(),
        }
        .intersection(present);
        let memory_bytes = files
            .parse(&format!("{d}/meminfo"), parse::meminfo_total_bytes)?
            .flatten();
        let mut distances = BTreeMap::new();
        if let Some(row) = files.parse(&format!("{d}/distance"), parse::distance_row)? {
            let targets: Vec<u32> = if row.len() == ids.len() {
                ids.clone()
            } else if let Some(p) = possible.as_ref().filter(|p| p.len() == row.len()) {
                p.iter().collect()
            } else {
                return Err(LinuxError::parse(
                    files.path(&format!("{d}/distance")),
                    format!(
                        "{} distances for {} nodes ({})",
                        row.len(),
                        ids.len(),
                        ids.iter()
                            .map(|i| i.to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    ),
                ));
            };
            for (t, dist) in targets.into_iter().zip(row) {
                if ids.binary_search(&t).is_ok() {
                    distances.insert(t, dist);
                }
            }
        }
        nodes.push(Node {
            id,
            cpus,
            memory_bytes,
            distances,
            allowed: true,
        });
    }
    Ok(nodes)
}

/// A cpufreq CPU list: `related_cpus` is space-separated (`0 1 2 3`).
fn cpu_words(text: &str) -> std::result::Result<CpuSet, String> {
    parse::cpuset_list(&text.split_whitespace().collect::<Vec<_>>().join(","))
}

fn khz_words(text: &str) -> std::result::Result<Vec<u64>, String> {
    text.split_whitespace()
        .map(|w| w.parse::<u64>().map_err(|_| format!("bad frequency {w:?}")))
        .collect()
}

fn read_freq(files: &Files, online: &CpuSet, cpus: &mut [Cpu]) -> Result<Vec<FreqDomain>> {
    let mut dirs: Vec<(u32, String)> = files
        .numbered(&format!("{CPU}/cpufreq"), "policy")?
        .into_iter()
        .map(|p| (p, format!("{CPU}/cpufreq/policy{p}")))
        .collect();
    // Old kernels: per-CPU cpufreq directories (probed only if the first CPU has one).
    let first_has = online
        .first()
        .is_some_and(|c| files.exists(&format!("{CPU}/cpu{c}/cpufreq")));
    if dirs.is_empty() && first_has {
        for cpu in online.iter() {
            let d = format!("{CPU}/cpu{cpu}/cpufreq");
            if files.exists(&d) {
                dirs.push((cpu, d));
            }
        }
    }
    let mut out: Vec<FreqDomain> = Vec::new();
    for (id, d) in dirs {
        let f = |n: &str| format!("{d}/{n}");
        let Some(dcpus) = files
            .parse(&f("related_cpus"), cpu_words)?
            .or(files.parse(&f("affected_cpus"), cpu_words)?)
        else {
            continue;
        };
        if dcpus.is_empty() || out.iter().any(|o| o.cpus == dcpus) {
            continue;
        }
        let word = |n: &str| -> Result<Option<String>> {
            Ok(files
                .text(&f(n))?
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty()))
        };
        let dom = FreqDomain {
            id,
            min_khz: files.parse(&f("cpuinfo_min_freq"), parse::uint)?,
            max_khz: files.parse(&f("cpuinfo_max_freq"), parse::uint)?,
            available_khz: files
                .parse(&f("scaling_available_frequencies"), khz_words)?
                .unwrap_or_default(),
            governor: word("scaling_governor")?,
            scaling_max_khz: files.parse(&f("scaling_max_freq"), parse::uint)?,
            scaling_min_khz: files.parse(&f("scaling_min_freq"), parse::uint)?,
            available_governors: word("scaling_available_governors")?
                .map(|t| t.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default(),
            cpus: dcpus,
        };
        let base = files.parse(&f("base_frequency"), parse::uint)?;
        for cpu in dom.cpus.iter() {
            if let Some(c) = cpu_mut(cpus, cpu) {
                c.max_khz = dom.max_khz;
                c.base_khz = base;
            }
        }
        out.push(dom);
    }
    Ok(out)
}

fn assign_core_types(files: &Files, cpus: &mut [Cpu]) -> Result<()> {
    let core = files.parse("sys/devices/cpu_core/cpus", parse::cpuset_list)?;
    let atom = files.parse("sys/devices/cpu_atom/cpus", parse::cpuset_list)?;
    if let (Some(core), Some(atom)) = (core, atom) {
        for c in cpus.iter_mut() {
            c.core_type = if core.contains(c.id) {
                Some(CoreType::Big)
            } else if atom.contains(c.id) {
                Some(CoreType::Little)
            } else {
                None
            };
        }
        return Ok(());
    }
    let online: Vec<&Cpu> = cpus.iter().filter(|c| c.online).collect();
    let caps: Vec<u32> = online.iter().filter_map(|c| c.capacity).collect();
    if caps.len() == online.len() && !caps.is_empty() {
        let (lo, hi) = (*caps.iter().min().unwrap(), *caps.iter().max().unwrap());
        if lo != hi {
            let mid = (u64::from(lo) + u64::from(hi)) / 2;
            for c in cpus.iter_mut().filter(|c| c.online) {
                c.core_type = c.capacity.map(|v| {
                    if u64::from(v) > mid {
                        CoreType::Big
                    } else {
                        CoreType::Little
                    }
                });
            }
        }
        return Ok(());
    }
    let bases: Vec<u64> = online.iter().filter_map(|c| c.base_khz).collect();
    if bases.len() == online.len() && !bases.is_empty() {
        let mut distinct = bases.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() == 2 {
            for c in cpus.iter_mut().filter(|c| c.online) {
                c.core_type = c.base_khz.map(|b| {
                    if b == distinct[1] {
                        CoreType::Big
                    } else {
                        CoreType::Little
                    }
                });
            }
        }
    }
    Ok(())
}

/// CPU set of one cache kind and level (a helper for tests and `placer topo`).
pub fn cache_partition(topo: &Topology, level: u8, kind: CacheKind) -> Vec<CpuSet> {
    topo.caches
        .iter()
        .filter(|c| c.level == level && c.kind == kind)
        .map(|c| c.cpus.clone())
        .collect()
}
