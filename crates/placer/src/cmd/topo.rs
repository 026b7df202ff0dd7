//! `placer topo`: the machine's topology as a tree or JSON.
//!
//! The tree nests packages > dies (where a package has several) > NUMA nodes > caches
//! (largest level first) > cores > caches smaller than a core > CPUs, and
//! annotates CPUs with capacity, core type, maximum frequency, allowed state and the NIC
//! queues whose IRQs or RPS land on them; frequency domains, the NUMA distance matrix and
//! the NICs follow. `--json` prints [`placer_core::Topology`]'s serde form, the contract
//! of docs/topology.md.

use crate::common::MachineArgs;
use anyhow::Result;
use placer_core::topology::{CacheKind, CoreType};
use placer_core::{CpuSet, Topology};
use std::collections::BTreeMap;
use std::fmt::Write;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub machine: MachineArgs,
    /// Print JSON (the documented contract) instead of a tree.
    #[arg(long)]
    pub json: bool,
    /// List the built-in machine models.
    #[arg(long)]
    pub list_machines: bool,
}

pub fn run(args: Args) -> Result<()> {
    if args.list_machines {
        if args.json {
            let list: Vec<serde_json::Value> = placer_core::machines::Machine::ALL
                .iter()
                .map(|m| serde_json::json!({"name": m.name(), "description": m.description()}))
                .collect();
            outln!("{}", serde_json::to_string_pretty(&list)?);
            return Ok(());
        }
        for m in placer_core::machines::Machine::ALL {
            outln!("{:24} {}", m.name(), m.description());
        }
        return Ok(());
    }
    let topo = args.machine.topology()?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&topo)?);
    } else {
        out!("{}", render_tree(&topo));
    }
    Ok(())
}

fn size(bytes: Option<u64>) -> String {
    match bytes {
        None => "size ?".into(),
        Some(b) if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        Some(b) if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        Some(b) if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        Some(b) if b >= 1 << 10 => format!("{} KiB", b >> 10),
        Some(b) => format!("{b} B"),
    }
}

fn khz(k: u64) -> String {
    format!("{:.2} GHz", k as f64 / 1e6)
}

fn kind_letter(k: CacheKind) -> &'static str {
    match k {
        CacheKind::Data => "d",
        CacheKind::Instruction => "i",
        CacheKind::Unified => "",
    }
}

/// What a CPU receives: `eth0 virtio2-input.0 (irq 38)` and `eth0 rx-1 (rps)` labels.
fn nic_notes(topo: &Topology) -> BTreeMap<u32, Vec<String>> {
    let mut m: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for nic in &topo.nics {
        for q in &nic.queues {
            if let Some(irq) = q.irq {
                for c in q.irq_cpus.iter() {
                    m.entry(c)
                        .or_default()
                        .push(format!("{} {} (irq {irq})", nic.name, q.name));
                }
            }
            for c in q.rps_cpus.iter() {
                m.entry(c)
                    .or_default()
                    .push(format!("{} {} (rps)", nic.name, q.name));
            }
        }
    }
    m
}

struct Tree<'a> {
    topo: &'a Topology,
    /// Cache levels shared by whole cores, largest first: drawn above the cores.
    levels: Vec<u8>,
    /// Cache levels some of whose caches are smaller than a core (an L1 per SMT thread, as
    /// qemu's emulated CPUs report): drawn inside the cores, above their CPUs.
    inner_levels: Vec<u8>,
    notes: BTreeMap<u32, Vec<String>>,
    out: String,
}

/// What [`Tree::caches`] draws below the last cache level.
#[derive(Clone, Copy)]
enum Leaf {
    Cores,
    Cpus,
}

impl Tree<'_> {
    fn line(&mut self, depth: usize, text: &str) {
        let _ = writeln!(self.out, "{}{}", "  ".repeat(depth), text);
    }

    /// Caches of level `levels[li]` over `cpus`, then deeper levels, then `leaf`.
    fn caches(&mut self, cpus: &CpuSet, levels: &[u8], li: usize, depth: usize, leaf: Leaf) {
        let Some(&level) = levels.get(li) else {
            match leaf {
                Leaf::Cores => self.cores(cpus, depth),
                Leaf::Cpus => {
                    for id in cpus.iter() {
                        let text = self.cpu_text(id);
                        self.line(depth, &text);
                    }
                }
            }
            return;
        };
        let topo = self.topo;
        let mut rest = cpus.clone();
        let mut groups = Vec::new();
        for c in topo.caches.iter().filter(|c| {
            c.level == level && c.kind != CacheKind::Instruction && c.cpus.intersects(cpus)
        }) {
            let part = c.cpus.intersection(&rest);
            if part.is_empty() {
                continue;
            }
            rest = rest.difference(&part);
            let icache = topo
                .caches
                .iter()
                .find(|i| i.level == level && i.kind == CacheKind::Instruction && i.cpus == c.cpus)
                .map(|i| format!(" + L{level}i {}", size(i.size_bytes)))
                .unwrap_or_default();
            let label = format!(
                "L{level}{} {}{icache} (cpus {})",
                kind_letter(c.kind),
                size(c.size_bytes),
                c.cpus
            );
            groups.push((label, part));
        }
        for (label, part) in groups {
            self.line(depth, &label);
            self.caches(&part, levels, li + 1, depth + 1, leaf);
        }
        if !rest.is_empty() {
            self.caches(&rest, levels, li + 1, depth, leaf);
        }
    }

    /// Cores are numbered by the kernel's core_id (unique within a package, as lscpu and
    /// the JSON's `core_id` number them); without one, by placer's machine-wide index.
    fn cores(&mut self, cpus: &CpuSet, depth: usize) {
        let topo = self.topo;
        for core in topo.cores() {
            let part = core.intersection(cpus);
            let Some(first) = part.first() else { continue };
            let c = topo.cpu(first).expect("core CPU");
            let head = match (c.core_id, c.core) {
                (Some(id), _) => format!("Core {id}"),
                (None, Some(k)) => format!("Core (index {k})"),
                (None, None) => "Core ?".to_string(),
            };
            self.line(depth, &head);
            let inner = std::mem::take(&mut self.inner_levels);
            self.caches(&part, &inner, 0, depth + 1, Leaf::Cpus);
            self.inner_levels = inner;
        }
    }

    /// Packages with more than one die show each die; then nodes, caches, cores.
    fn package(&mut self, cpus: &CpuSet, depth: usize) {
        let topo = self.topo;
        let mut by_die: BTreeMap<Option<u32>, CpuSet> = BTreeMap::new();
        for id in cpus.iter() {
            by_die
                .entry(topo.cpu(id).and_then(|c| c.die))
                .or_default()
                .insert(id);
        }
        if by_die.len() < 2 {
            self.nodes(cpus, depth);
            return;
        }
        for (die, dcpus) in by_die {
            let label = match die {
                Some(d) => format!("Die {d} (cpus {dcpus})"),
                None => format!("Die ? (cpus {dcpus})"),
            };
            self.line(depth, &label);
            self.nodes(&dcpus, depth + 1);
        }
    }

    fn nodes(&mut self, cpus: &CpuSet, depth: usize) {
        let topo = self.topo;
        let mut by_node: BTreeMap<Option<u32>, CpuSet> = BTreeMap::new();
        for id in cpus.iter() {
            by_node.entry(topo.node_of(id)).or_default().insert(id);
        }
        let one_unknown = by_node.len() == 1 && by_node.contains_key(&None);
        let levels = std::mem::take(&mut self.levels);
        for (node, ncpus) in by_node {
            let inner = if one_unknown {
                depth
            } else {
                let label = match node.and_then(|n| topo.node(n)) {
                    Some(n) => format!(
                        "NUMA node {} ({} memory, cpus {})",
                        n.id,
                        size(n.memory_bytes),
                        n.cpus
                    ),
                    None => "NUMA node ?".to_string(),
                };
                self.line(depth, &label);
                depth + 1
            };
            self.caches(&ncpus, &levels, 0, inner, Leaf::Cores);
        }
        self.levels = levels;
    }

    fn cpu_text(&self, id: u32) -> String {
        let c = self.topo.cpu(id).expect("listed CPU");
        let mut notes = Vec::new();
        if let Some(cap) = c.capacity {
            notes.push(format!("capacity {cap}"));
        }
        match c.core_type {
            Some(CoreType::Big) => notes.push("big".into()),
            Some(CoreType::Little) => notes.push("little".into()),
            None => {}
        }
        if let Some(k) = c.max_khz {
            notes.push(format!("max {}", khz(k)));
        }
        if let Some(k) = c.base_khz {
            notes.push(format!("base {}", khz(k)));
        }
        if !c.allowed {
            notes.push("not allowed".into());
        }
        if let Some(n) = self.notes.get(&id) {
            notes.push(format!("rx: {}", n.join(", ")));
        }
        if notes.is_empty() {
            format!("CPU {id}")
        } else {
            format!("CPU {id}  [{}]", notes.join("; "))
        }
    }
}

/// The human-readable tree (see the module doc).
pub fn render_tree(topo: &Topology) -> String {
    let mut levels: Vec<u8> = topo
        .caches
        .iter()
        .filter(|c| c.kind != CacheKind::Instruction)
        .map(|c| c.level)
        .collect();
    levels.sort_unstable_by(|a, b| b.cmp(a));
    levels.dedup();
    let cores = topo.cores();
    let inner_levels: Vec<u8> = levels
        .iter()
        .copied()
        .filter(|&l| {
            topo.caches.iter().any(|c| {
                c.level == l
                    && c.kind != CacheKind::Instruction
                    && cores
                        .iter()
                        .any(|k| c.cpus.intersects(k) && !k.difference(&c.cpus).is_empty())
            })
        })
        .collect();
    levels.retain(|l| !inner_levels.contains(l));
    let mut t = Tree {
        topo,
        levels,
        inner_levels,
        notes: nic_notes(topo),
        out: String::new(),
    };
    let online = topo.online();
    let offline = topo.present().difference(&online);
    let mut head = format!(
        "Machine ({}): {} CPUs present, {} online, {} allowed",
        topo.source,
        topo.cpus.len(),
        online.len(),
        topo.allowed().len()
    );
    if !offline.is_empty() {
        let _ = write!(head, "; offline {offline}");
    }
    t.line(0, &head);
    for (pkg, cpus) in topo.packages() {
        let label = match pkg {
            Some(p) => format!("Package {p} (cpus {cpus})"),
            None => format!("Package ? (cpus {cpus})"),
        };
        t.line(1, &label);
        t.package(&cpus, 2);
    }
    let cpuless: Vec<String> = topo
        .nodes
        .iter()
        .filter(|n| !n.cpus.intersects(&online))
        .map(|n| format!("{} ({})", n.id, size(n.memory_bytes)))
        .collect();
    let disallowed: Vec<String> = topo
        .nodes
        .iter()
        .filter(|n| !n.allowed)
        .map(|n| n.id.to_string())
        .collect();
    if !disallowed.is_empty() {
        t.line(
            1,
            &format!(
                "NUMA nodes outside this process's cpuset mems (not used): {}",
                disallowed.join(", ")
            ),
        );
    }
    if !cpuless.is_empty() {
        t.line(
            1,
            &format!("NUMA nodes without online CPUs: {}", cpuless.join(", ")),
        );
    }
    if !topo.freq_domains.is_empty() {
        t.line(0, "Frequency domains:");
        for d in &topo.freq_domains {
            let mut s = format!("policy{} cpus {}", d.id, d.cpus);
            if let (Some(lo), Some(hi)) = (d.min_khz, d.max_khz) {
                let _ = write!(s, ": {} - {}", khz(lo), khz(hi));
            }
            if let Some(g) = &d.governor {
                let _ = write!(s, ", governor {g}");
            }
            if let Some(m) = d
                .scaling_max_khz
                .filter(|&m| d.max_khz.is_some_and(|x| m < x))
            {
                let _ = write!(s, ", capped at {}", khz(m));
            }
            if !d.available_khz.is_empty() {
                let _ = write!(s, ", {} steps", d.available_khz.len());
            }
            t.line(1, &s);
        }
    }
    if topo.nodes.iter().any(|n| !n.distances.is_empty()) && topo.nodes.len() > 1 {
        t.line(0, "NUMA distances:");
        let ids: Vec<u32> = topo.nodes.iter().map(|n| n.id).collect();
        let mut head = "node".to_string();
        for id in &ids {
            let _ = write!(head, "{id:>5}");
        }
        t.line(1, &head);
        for n in &topo.nodes {
            let mut row = format!("{:>4}", n.id);
            for id in &ids {
                match n.distances.get(id) {
                    Some(d) => {
                        let _ = write!(row, "{d:>5}");
                    }
                    None => row.push_str("    ?"),
                }
            }
            t.line(1, &row);
        }
    }
    if !topo.nics.is_empty() {
        t.line(0, "NICs:");
        for nic in &topo.nics {
            let mut s = nic.name.clone();
            if let Some(n) = nic.node {
                let _ = write!(s, " node {n}");
            }
            if let Some(sp) = nic.speed_mbps {
                let _ = write!(s, " {sp} Mb/s");
            }
            if nic.rx_cpus.is_empty() {
                s.push_str(", receive on the sending CPU (no IRQ, RPS off)");
            } else {
                let _ = write!(s, ", receive on cpus {}", nic.rx_cpus);
            }
            if !nic.addrs.is_empty() {
                let a: Vec<String> = nic.addrs.iter().map(|a| a.to_string()).collect();
                let _ = write!(s, ", addrs {}", a.join(" "));
            }
            t.line(1, &s);
            for q in &nic.queues {
                if q.irq.is_none() && q.rps_cpus.is_empty() {
                    continue;
                }
                let mut s = q.name.clone();
                if let Some(irq) = q.irq {
                    let _ = write!(s, ": irq {irq} -> cpus {}", q.irq_cpus);
                }
                if !q.rps_cpus.is_empty() {
                    let _ = write!(s, "; rps cpus {}", q.rps_cpus);
                }
                t.line(2, &s);
            }
        }
    }
    t.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_prints_and_round_trips_through_json() {
        let mut names: Vec<&str> = placer_core::machines::Machine::ALL
            .map(|m| m.name())
            .to_vec();
        names.push("pkg:2 node:2 core:4 pu:2");
        for name in names {
            let topo = placer_core::machines::machine(name).unwrap();
            let tree = render_tree(&topo);
            for c in topo.online().iter() {
                assert!(
                    tree.contains(&format!("CPU {c}")),
                    "{name}: CPU {c} missing"
                );
            }
            let json = serde_json::to_string(&topo).unwrap();
            let back: Topology = serde_json::from_str(&json).unwrap();
            assert_eq!(back, topo, "{name}");
        }
    }

    /// Dies are drawn where a package has several, cores are numbered by their kernel
    /// core_id, and a cache smaller than a core (qemu's L1 per SMT thread) is drawn inside
    /// its core, each CPU under its own.
    #[test]
    fn tree_draws_dies_core_ids_and_per_thread_caches() {
        let mut topo = placer_core::machines::machine("pkg:2 die:2 core:2 pu:2").unwrap();
        let tree = render_tree(&topo);
        let dies: Vec<&str> = tree
            .lines()
            .map(str::trim_start)
            .filter(|l| l.starts_with("Die "))
            .collect();
        assert_eq!(dies.len(), 4, "{tree}");
        assert!(dies[1].starts_with("Die 1 (cpus 4-7)"), "{tree}");
        for c in &topo.cpus {
            let at = tree.find(&format!("CPU {}\n", c.id)).unwrap();
            let core = tree[..at].rfind("Core ").unwrap();
            let label = tree[core..].lines().next().unwrap();
            assert_eq!(label, format!("Core {}", c.core_id.unwrap()), "{tree}");
        }
        // L1 per thread: the core holds two L1s, each one CPU.
        let l1: Vec<_> = topo
            .caches
            .iter()
            .filter(|c| c.level == 1)
            .cloned()
            .collect();
        topo.caches.retain(|c| c.level != 1);
        for c in l1 {
            for cpu in c.cpus.iter() {
                let mut one = c.clone();
                one.cpus = [cpu].into_iter().collect();
                topo.caches.push(one);
            }
        }
        let tree = render_tree(&topo);
        let lines: Vec<&str> = tree.lines().collect();
        let core0 = lines.iter().position(|l| l.trim() == "Core 0").unwrap();
        let indent = |l: &str| l.len() - l.trim_start().len();
        assert!(
            lines[core0 + 1]
                .trim()
                .starts_with("L1d 32 KiB + L1i 32 KiB (cpus 0)"),
            "{tree}"
        );
        assert!(indent(lines[core0 + 1]) > indent(lines[core0]), "{tree}");
        assert_eq!(lines[core0 + 2].trim(), "CPU 0", "{tree}");
        assert!(
            lines[core0 + 3]
                .trim()
                .starts_with("L1d 32 KiB + L1i 32 KiB (cpus 1)"),
            "{tree}"
        );
        assert_eq!(
            tree.matches("Core 0\n").count(),
            2,
            "one per package: {tree}"
        );
    }

    /// The JSON field names and types of the `placer topo --json` contract.
    #[test]
    fn json_shape_matches_contract() {
        let topo = placer_core::machines::machine("odroid-xu4").unwrap();
        let v: serde_json::Value = serde_json::to_value(&topo).unwrap();
        let has = |o: &serde_json::Value, keys: &[&str]| {
            for k in keys {
                assert!(o.get(k).is_some(), "missing {k} in {o}");
            }
        };
        has(&v, &["cpus", "caches", "nodes", "freq_domains", "nics"]);
        let cpu = &v["cpus"][0];
        has(
            cpu,
            &[
                "id", "online", "allowed", "package", "die", "cluster", "core", "node", "siblings",
                "capacity", "max_khz",
            ],
        );
        assert!(cpu["siblings"].as_array().unwrap()[0].is_u64());
        let cache = &v["caches"][0];
        has(cache, &["level", "kind", "size_bytes", "cpus"]);
        assert!(["data", "instruction", "unified"].contains(&cache["kind"].as_str().unwrap()));
        let node = &v["nodes"][0];
        has(node, &["id", "cpus", "memory_bytes", "distances"]);
        let d = node["distances"].as_object().unwrap();
        assert!(d.keys().all(|k| k.parse::<u32>().is_ok()));
        let f = &v["freq_domains"][0];
        has(
            f,
            &["cpus", "min_khz", "max_khz", "available_khz", "governor"],
        );
        assert!(f["available_khz"].is_array());
        let nic = &v["nics"][0];
        has(nic, &["name", "node", "rx_cpus", "queues"]);
        has(&nic["queues"][0], &["name", "irq", "irq_cpus", "rps_cpus"]);
        // unknown values are null
        let mut bare = Topology::default();
        bare.cpus.push(placer_core::topology::Cpu::bare(0, true));
        let v = serde_json::to_value(&bare).unwrap();
        assert!(v["cpus"][0]["package"].is_null() && v["cpus"][0]["capacity"].is_null());
    }

    /// On this machine (skipped elsewhere): the NIC queue IRQs in the JSON are the
    /// device's receive IRQs as /proc/interrupts lists them.
    #[test]
    fn live_nic_irqs_match_proc_interrupts() {
        let Ok(topo) = placer_linux::topology::read(std::path::Path::new("/")) else {
            placer_testkit::skip("cannot read / topology");
            return;
        };
        let Ok(ints) = std::fs::read_to_string("/proc/interrupts") else {
            placer_testkit::skip("no /proc/interrupts");
            return;
        };
        assert!(!topo.online().is_empty());
        render_tree(&topo);
        let mut checked = 0;
        for nic in &topo.nics {
            for q in nic.queues.iter().filter(|q| q.irq.is_some()) {
                let irq = q.irq.unwrap();
                let line = ints
                    .lines()
                    .find(|l| l.trim_start().starts_with(&format!("{irq}:")))
                    .unwrap_or_else(|| panic!("irq {irq} of {} not in /proc/interrupts", nic.name));
                assert!(line.trim_end().ends_with(&q.name), "{line} vs {}", q.name);
                assert!(placer_linux::topology::is_rx_irq_name(&q.name));
                checked += 1;
            }
        }
        eprintln!("checked {checked} NIC queue IRQs against /proc/interrupts");
    }
}
