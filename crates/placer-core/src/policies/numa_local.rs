//! Policy `numa-local` (seed 004, docs/seeds.md): a network
//! app's CPUs and memory on one NUMA node, the one next to its network traffic.
//!
//! The seed measured a ttcp receiver on a 4-package Magny-Cours (8 nodes): with fresh
//! buffers, bandwidth falls with the buffer's distance from the receiving core (remote
//! ~15 % below adjacent), and it advises allocating network buffers on the local node
//! when they cannot be kept cache-hot by reuse. A daemon cannot change how an app
//! allocates, but it can make "local" the right node: run the app on the node that does
//! its packet processing and move its memory there.
//!
//! Algorithm, each cycle, for every process whose network rate (rx + tx) is at least
//! `min_net_bytes_per_s` (communication-intensive, as in seed 002):
//! 1. Target node, first evidence in `target_order` that exists:
//!    - `cpus`: the process is already confined to the CPUs of one node (net-affinity
//!      pinned it next to its NIC's receive CPU, or the user did): memory follows CPUs;
//!    - `nic`: the NUMA node of the NIC carrying most of its flows (by local address),
//!      or of that NIC's receive CPUs when the NIC's node is unknown, or of the machine's
//!      only NIC when the flows are unknown;
//!    - `pages`: the node already holding most of its resident pages (least to move).
//! 2. CPUs: when `place_cpus` and it may run outside the target node, pin it to the
//!    target node's allowed CPUs, unless an earlier policy holds its CPUs (then only its
//!    memory is placed; the engine lets memory actions pass a CPU hold).
//! 3. Memory: when `migrate` and less than `min_local_fraction` of its resident pages are
//!    on the target node, `BindMemory` to that node, migrating at most what is left of this
//!    interval's budget: `migrate_max_bytes_per_s * interval_s`, shared by all processes
//!    (fullest first: the most off-node bytes first).
//! 4. A process this policy pinned that stays below the threshold for `quiet_s` gets its
//!    CPUs back (`RestoreProcess`); its pages stay where they are (moving them back would
//!    cost another migration for nothing: `placer restore` does it on request).
//!
//! Invariants (each tested; a test's name starts with the ones it checks):
//! - M1: on a single-node machine no action, one note saying why;
//! - M2: the sum of `migrate_max_bytes` over one plan never exceeds the interval's budget,
//!   so over any run it never exceeds `migrate_max_bytes_per_s` times the time elapsed;
//! - M3: a process already local enough gets no memory action;
//! - M4: pins are only to CPUs of the target node that this placer may use;
//! - M5: quiet processes are never touched except to restore what was pinned.

use crate::cpuset::CpuSet;
use crate::observation::{Observation, ProcObs};
use crate::plan::{Action, Plan};
use crate::policy::{Policy, PolicyState};
use crate::sample::{main_page_node, ProcKey, SampleRequest};
use crate::topology::Topology;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const NAME: &str = KIND.name();
/// This policy's identity in plans, notes, verdicts and back-off keys.
const KIND: crate::policies::PolicyKind = crate::policies::PolicyKind::NumaLocal;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NumaLocalConfig {
    /// A process is communication-intensive when it sends + receives at least this many
    /// bytes per second.
    pub min_net_bytes_per_s: f64,
    /// Evidence for the target node, first that exists wins: `cpus` (already confined to
    /// one node's CPUs), `nic` (its NIC's node), `pages` (where most of its pages are).
    pub target_order: Vec<String>,
    /// Pin the process to the target node's CPUs when it may run elsewhere.
    pub place_cpus: bool,
    /// Migrate existing pages to the target node (off by default: migration stalls the
    /// process while its pages are copied).
    pub migrate: bool,
    /// Most bytes migrated per second, summed over all processes.
    pub migrate_max_bytes_per_s: u64,
    /// Migrate only while less than this fraction of resident pages is on the target.
    pub min_local_fraction: f64,
    /// Deprecated: the sample carries the observed machine's page size. Used only for
    /// observations that do not (recordings made before it was recorded).
    pub page_bytes: u64,
    /// Seconds below the threshold before a pinned process gets its CPUs back.
    pub quiet_s: f64,
}

impl Default for NumaLocalConfig {
    fn default() -> Self {
        NumaLocalConfig {
            min_net_bytes_per_s: 10e6,
            target_order: vec!["cpus".into(), "nic".into(), "pages".into()],
            place_cpus: true,
            migrate: false,
            migrate_max_bytes_per_s: 64 << 20,
            min_local_fraction: 0.9,
            page_bytes: 4096,
            quiet_s: 10.0,
        }
    }
}

impl NumaLocalConfig {
    /// Checks values; Err((field, message)).
    pub fn validate(&self) -> Result<(), (String, String)> {
        let err = |f: &str, m: String| Err((f.to_string(), m));
        for t in &self.target_order {
            if !matches!(t.as_str(), "cpus" | "nic" | "pages") {
                return err(
                    "target_order",
                    format!("{t:?}: expected cpus, nic or pages"),
                );
            }
        }
        if !(0.0..=1.0).contains(&self.min_local_fraction) {
            return err(
                "min_local_fraction",
                format!("{} is not within 0..=1", self.min_local_fraction),
            );
        }
        if self.page_bytes == 0 || !self.page_bytes.is_power_of_two() {
            return err(
                "page_bytes",
                format!("{} is not a power of two", self.page_bytes),
            );
        }
        if !(self.quiet_s.is_finite() && (0.0..=86_400.0).contains(&self.quiet_s)) {
            return err(
                "quiet_s",
                format!("{} is not a time between 0 and a day", self.quiet_s),
            );
        }
        if self.page_bytes > 1 << 30 {
            return err(
                "page_bytes",
                format!("{} is larger than 1 GiB", self.page_bytes),
            );
        }
        if !self.min_net_bytes_per_s.is_finite() || self.min_net_bytes_per_s < 0.0 {
            return err("min_net_bytes_per_s", "must be >= 0".into());
        }
        Ok(())
    }
}

/// Why a node was chosen.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub node: u32,
    pub why: String,
}

/// The node all of `cpus` belong to, if they are on exactly one node and not every CPU of
/// the machine (a process allowed everywhere is not "confined").
pub fn confined_node(topo: &Topology, cpus: &CpuSet) -> Option<u32> {
    if cpus.is_empty() || topo.nodes.len() < 2 {
        return None;
    }
    let mut node = None;
    for c in cpus.iter() {
        let n = topo.node_of(c)?;
        if *node.get_or_insert(n) != n {
            return None;
        }
    }
    node
}

/// The node most of `cpus` are on (lowest id on a tie).
fn majority_node(topo: &Topology, cpus: &CpuSet) -> Option<u32> {
    let mut count: BTreeMap<u32, usize> = BTreeMap::new();
    for c in cpus.iter() {
        if let Some(n) = topo.node_of(c) {
            *count.entry(n).or_default() += 1;
        }
    }
    count
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(n, _)| n)
}

/// The NIC-based target: the NIC carrying most of the process's bytes (by the local
/// address of each flow), else the machine's only non-loopback NIC.
fn nic_node(topo: &Topology, p: &ProcObs) -> Option<Target> {
    let mut by_nic: BTreeMap<&str, f64> = BTreeMap::new();
    for f in &p.flows {
        if let Some(nic) = topo.nic_for_addr(&f.local.ip()) {
            *by_nic.entry(nic.name.as_str()).or_default() += f.rx_bytes_per_s + f.tx_bytes_per_s;
        }
    }
    let (nic, how) = match by_nic
        .into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(a.0)))
    {
        Some((name, _)) => (topo.nic(name)?, "carries its flows"),
        None => {
            let mut real = topo.nics.iter().filter(|n| n.name != "lo");
            let only = real.next()?;
            if real.next().is_some() {
                return None;
            }
            (only, "is the machine's only NIC")
        }
    };
    if let Some(n) = nic.node {
        return Some(Target {
            node: n,
            why: format!("NIC {} {how}, on node {n}", nic.name),
        });
    }
    let n = majority_node(topo, &nic.rx_cpus)?;
    Some(Target {
        node: n,
        why: format!(
            "NIC {} {how}; its receive CPUs {} are on node {n}",
            nic.name, nic.rx_cpus
        ),
    })
}

/// Chooses the target node for `p` by the evidence in `order` (see the module doc).
pub fn target_node(topo: &Topology, p: &ProcObs, order: &[String]) -> Option<Target> {
    for what in order {
        let t = match what.as_str() {
            "cpus" => confined_node(topo, &p.allowed_cpus).map(|n| Target {
                node: n,
                why: format!("it runs on CPUs {} of node {n}", p.allowed_cpus),
            }),
            "nic" => nic_node(topo, p),
            "pages" => main_page_node(&p.numa_pages).map(|n| Target {
                node: n,
                why: format!("node {n} already holds most of its pages"),
            }),
            _ => None,
        };
        // A node outside the process's cpuset mems cannot receive its pages.
        let t = t.filter(|t| topo.node(t.node).is_none_or(|n| n.allowed));
        if t.is_some() {
            return t;
        }
    }
    None
}

/// How a node relates to another, as seed 004 names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    /// Another node in the same package (Magny-Cours: the other die).
    Adjacent,
    /// A node in another package (the farthest by distance).
    Remote,
}

fn package_of_node(topo: &Topology, node: u32) -> Option<u32> {
    let n = topo.node(node)?;
    n.cpus
        .iter()
        .find_map(|c| topo.cpu(c).and_then(|c| c.package))
}

/// The node that is `rel` to `local`: adjacent = nearest other node of the same package;
/// remote = farthest node of another package. Without package information, the nearest
/// and the farthest other node by distance (when they differ). None when the machine has
/// no such node (a single-node machine has neither).
pub fn related_node(topo: &Topology, local: u32, rel: Relation) -> Option<u32> {
    let me = topo.node(local)?;
    let dist = |n: u32| me.distances.get(&n).copied().unwrap_or(u32::MAX);
    let my_pkg = package_of_node(topo, local);
    let others: Vec<u32> = topo
        .nodes
        .iter()
        .map(|n| n.id)
        .filter(|&n| n != local)
        .collect();
    if others.is_empty() {
        return None;
    }
    let pkgs_known = my_pkg.is_some() && others.iter().all(|&n| package_of_node(topo, n).is_some());
    let (cands, farthest): (Vec<u32>, bool) = match (rel, pkgs_known) {
        (Relation::Adjacent, true) => (
            others
                .iter()
                .copied()
                .filter(|&n| package_of_node(topo, n) == my_pkg)
                .collect(),
            false,
        ),
        (Relation::Remote, true) => (
            others
                .iter()
                .copied()
                .filter(|&n| package_of_node(topo, n) != my_pkg)
                .collect(),
            true,
        ),
        (r, false) => {
            let dmin = others.iter().map(|&n| dist(n)).min()?;
            let dmax = others.iter().map(|&n| dist(n)).max()?;
            if dmin == dmax {
                return None;
            }
            (others.clone(), r == Relation::Remote)
        }
    };
    // Nearest (or farthest) candidate; lowest id on a tie.
    cands.into_iter().min_by_key(|&n| {
        let d = dist(n);
        (if farthest { u32::MAX - d } else { d }, n)
    })
}

/// Bytes per node, for notes: "node 0: 12.0 MiB, node 1: 3.2 MiB".
pub fn format_pages(pages: &BTreeMap<u32, u64>, page_bytes: u64) -> String {
    if pages.is_empty() {
        return "pages per node unknown".into();
    }
    pages
        .iter()
        .map(|(n, p)| {
            format!(
                "node {n}: {:.1} MiB",
                (p * page_bytes) as f64 / (1 << 20) as f64
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(Debug, Default)]
/// This policy's own state between cycles (`Policy::State`).
pub struct Private {
    /// Last time each pinned process was communication-intensive.
    last_active_s: BTreeMap<ProcKey, f64>,
    /// Bytes of migration granted so far (for reports and the rate invariant's test).
    granted_bytes: u64,
}

pub struct NumaLocal {
    pub cfg: NumaLocalConfig,
}

impl NumaLocal {
    pub fn new(cfg: NumaLocalConfig) -> Self {
        NumaLocal { cfg }
    }
}

impl Policy for NumaLocal {
    type State = Private;

    fn kind(&self) -> crate::policies::PolicyKind {
        KIND
    }

    fn wants(&self) -> SampleRequest {
        SampleRequest {
            sockets: true,
            numa_pages: true,
            ..SampleRequest::default()
        }
    }

    /// One node (or one the process may use): nothing to place, so nothing is sampled for
    /// it (numa_maps of every process was most of placer's cost on such machines).
    fn disabled_reason(
        &self,
        topo: &Topology,
        _sources: &crate::sample::SourceStatus,
    ) -> Option<String> {
        let usable = topo.nodes.iter().filter(|n| n.allowed).count();
        (usable < 2).then(|| {
            format!(
                "{} usable NUMA node: all memory is local, nothing to place",
                usable.max(1)
            )
        })
    }

    fn plan(&self, topo: &Topology, obs: &Observation, state: &mut PolicyState<Private>) -> Plan {
        let cfg = &self.cfg;
        let page = obs.page_bytes_or(cfg.page_bytes);
        let mut plan = Plan::default();
        if topo.nodes.len() < 2 {
            plan.note(
                KIND,
                None,
                format!(
                    "{} NUMA node: all memory is local, nothing to place",
                    topo.nodes.len().max(1)
                ),
            );
            return plan;
        }
        let now = state.now_s;
        let allowed = topo.allowed();
        let mut budget = (cfg.migrate_max_bytes_per_s as f64 * obs.interval_s.max(0.0)) as u64;
        let mut wants_memory: Vec<(u64, ProcKey, u32, String)> = Vec::new();
        let mut active_now = Vec::new();

        for p in obs.procs.iter().filter(|p| !p.kernel_thread) {
            let rate = p.net_bytes_per_s();
            if rate < cfg.min_net_bytes_per_s {
                continue;
            }
            let key = p.key();
            if state.released.contains(&key) {
                continue;
            }
            active_now.push(key);
            let Some(t) = target_node(topo, p, &cfg.target_order) else {
                plan.note(
                    KIND,
                    Some(key),
                    format!(
                        "net {:.1} MB/s but no evidence for a node (no confining CPUs, NIC node or page counts); {}",
                        rate / 1e6,
                        format_pages(&p.numa_pages, page)
                    ),
                );
                continue;
            };
            let node_cpus = topo
                .node(t.node)
                .map(|n| n.cpus.intersection(&allowed))
                .unwrap_or_default();
            let head = format!(
                "net {:.1} MB/s >= {:.1} MB/s; target node {} because {}",
                rate / 1e6,
                cfg.min_net_bytes_per_s / 1e6,
                t.node,
                t.why
            );
            if cfg.place_cpus && !p.allowed_cpus.is_subset(&node_cpus) {
                if state.taken.contains(&key) {
                    plan.note(
                        KIND,
                        Some(key),
                        format!("{head}; its CPUs are held by an earlier policy, left alone"),
                    );
                } else if node_cpus.is_empty() {
                    plan.note(
                        KIND,
                        Some(key),
                        format!(
                            "{head}; no CPU of node {} is usable, CPUs left alone",
                            t.node
                        ),
                    );
                } else {
                    plan.push(
                        KIND,
                        Action::PinProcess {
                            proc: key,
                            comm: p.comm.to_string(),
                            cpus: node_cpus.clone(),
                        },
                        format!("{head}; runs on {} outside it", p.allowed_cpus),
                    );
                }
            }
            let total: u64 = p.numa_pages.values().sum();
            let local = p.numa_pages.get(&t.node).copied().unwrap_or(0);
            let pages_txt = format_pages(&p.numa_pages, page);
            if total == 0 {
                plan.note(KIND, Some(key), format!("{head}; {pages_txt}"));
                continue;
            }
            let frac = local as f64 / total as f64;
            if frac >= cfg.min_local_fraction {
                plan.note(
                    KIND,
                    Some(key),
                    format!(
                        "{head}; {:.0}% of its pages already there ({pages_txt})",
                        frac * 100.0
                    ),
                );
                continue;
            }
            if !cfg.migrate {
                plan.note(
                    KIND,
                    Some(key),
                    format!(
                        "{head}; only {:.0}% of its pages there ({pages_txt}); migration is off (numa_local.migrate)",
                        frac * 100.0
                    ),
                );
                continue;
            }
            let off_bytes = (total - local) * page;
            wants_memory.push((
                off_bytes,
                key,
                t.node,
                format!(
                    "{head}; only {:.0}% of its pages there ({pages_txt})",
                    frac * 100.0
                ),
            ));
        }

        // Share the interval's budget, most off-node bytes first.
        wants_memory.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let held: Vec<(ProcKey, f64, String)> = state
            .held
            .iter()
            .map(|(k, h)| (*k, h.since_s, h.comm.clone()))
            .collect();
        let private = &mut state.private;
        for (off_bytes, key, node, why) in wants_memory {
            let grant = off_bytes.min(budget);
            if grant < page {
                plan.note(
                    KIND,
                    Some(key),
                    format!(
                        "{why}; migration budget of this interval used up ({} MiB/s)",
                        cfg.migrate_max_bytes_per_s >> 20
                    ),
                );
                continue;
            }
            budget -= grant;
            private.granted_bytes += grant;
            plan.push(
                KIND,
                Action::BindMemory {
                    proc: key,
                    nodes: vec![node],
                    migrate_max_bytes: grant,
                },
                format!(
                    "{why}; migrate up to {:.1} MiB of {:.1} MiB off-node this interval",
                    grant as f64 / (1 << 20) as f64,
                    off_bytes as f64 / (1 << 20) as f64
                ),
            );
        }

        // Give pinned processes their CPUs back once quiet long enough.
        for k in &active_now {
            private.last_active_s.insert(*k, now);
        }
        let present: std::collections::BTreeSet<ProcKey> =
            obs.procs.iter().map(|p| p.key()).collect();
        private.last_active_s.retain(|k, _| present.contains(k));
        for (key, since_s, comm) in held {
            if !present.contains(&key) {
                continue;
            }
            let last = *private.last_active_s.entry(key).or_insert(since_s);
            if now - last >= cfg.quiet_s {
                plan.push(
                    KIND,
                    Action::RestoreProcess {
                        proc: key,
                        comm,
                        via: None,
                    },
                    format!(
                        "quiet for {:.0} s >= {:.0} s: original CPUs back (pages stay)",
                        now - last,
                        cfg.quiet_s
                    ),
                );
            }
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machines::machine;
    use crate::observation::FlowObs;
    use crate::policy::Held;

    fn proc(pid: u32, rx: f64, cpus: &str, pages: &[(u32, u64)]) -> ProcObs {
        let mut p = ProcObs::bare(
            pid,
            100 + pid as u64,
            &format!("app{pid}"),
            CpuSet::parse_list(cpus).unwrap(),
        );
        p.rx_bytes_per_s = rx;
        p.numa_pages = pages.iter().copied().collect();
        p
    }

    fn obs(procs: Vec<ProcObs>) -> Observation {
        Observation {
            interval_s: 1.0,
            procs: procs.into_iter().map(std::sync::Arc::new).collect(),
            ..Observation::default()
        }
    }

    fn migrating() -> NumaLocalConfig {
        NumaLocalConfig {
            migrate: true,
            ..NumaLocalConfig::default()
        }
    }

    fn binds(plan: &Plan) -> Vec<(u32, Vec<u32>, u64)> {
        plan.actions
            .iter()
            .filter_map(|a| match &a.action {
                Action::BindMemory {
                    proc,
                    nodes,
                    migrate_max_bytes,
                } => Some((proc.pid, nodes.clone(), *migrate_max_bytes)),
                _ => None,
            })
            .collect()
    }

    fn pins(plan: &Plan) -> Vec<(u32, CpuSet)> {
        plan.actions
            .iter()
            .filter_map(|a| match &a.action {
                Action::PinProcess { proc, cpus, .. } => Some((proc.pid, cpus.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn m1_single_node_does_nothing_and_says_so() {
        let topo = machine("pkg:1 node:1 core:4").unwrap();
        let pol = NumaLocal::new(migrating());
        let plan = pol.plan(
            &topo,
            &obs(vec![proc(1, 1e9, "0-3", &[(0, 100)])]),
            &mut PolicyState::default(),
        );
        assert!(plan.actions.is_empty());
        assert_eq!(plan.notes.len(), 1);
        assert!(
            plan.notes[0].text.contains("1 NUMA node"),
            "{}",
            plan.notes[0].text
        );
    }

    #[test]
    fn magny_cours_nic_node_wins_for_an_unpinned_app() {
        // eth0 on node 0; the app runs anywhere with its pages on node 5.
        let topo = machine("opteron-magny-cours-4p").unwrap();
        let pol = NumaLocal::new(migrating());
        let plan = pol.plan(
            &topo,
            &obs(vec![proc(7, 50e6, "0-31", &[(5, 1000), (0, 10)])]),
            &mut PolicyState::default(),
        );
        let node0 = topo.node(0).unwrap().cpus.clone();
        assert_eq!(pins(&plan), vec![(7, node0)]);
        let b = binds(&plan);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].1, vec![0]);
        assert_eq!(b[0].2, 1000 * 4096, "all off-node bytes fit the budget");
        assert!(
            plan.actions[0].reason.contains("NIC eth0"),
            "{}",
            plan.actions[0].reason
        );
    }

    #[test]
    fn flows_pick_their_nic_and_unknown_nic_node_uses_its_rx_cpus() {
        let mut topo = machine("opteron-magny-cours-4p").unwrap();
        // A second NIC with no known node whose IRQs go to CPUs of node 6 (24-27).
        let mut eth1 =
            crate::machines::nic("eth1", None, 10_000, 120, 2, |q| CpuSet::single(24 + q));
        eth1.addrs = vec!["10.1.0.2".parse().unwrap()];
        topo.nics.push(eth1);
        let mut p = proc(3, 80e6, "0-31", &[]);
        p.flows.push(FlowObs {
            local: "10.1.0.2:5001".parse().unwrap(),
            remote: "10.1.0.1:40000".parse().unwrap(),
            state: 1,
            inode: 1,
            rx_bytes_per_s: 80e6,
            tx_bytes_per_s: 0.0,
            avg_rx_seg_bytes: None,
            avg_tx_seg_bytes: None,
            segs_in_per_s: 0.0,
            segs_out_per_s: 0.0,
            new: false,
        });
        let t = target_node(&topo, &p, &NumaLocalConfig::default().target_order).unwrap();
        assert_eq!(t.node, 6, "{}", t.why);
        assert!(t.why.contains("eth1"));
        // With two NICs and no flows there is no NIC evidence: pages decide.
        p.flows.clear();
        p.numa_pages = BTreeMap::from([(3, 10), (4, 50)]);
        assert_eq!(
            target_node(&topo, &p, &NumaLocalConfig::default().target_order)
                .unwrap()
                .node,
            4
        );
    }

    #[test]
    fn cpus_chosen_by_net_affinity_decide_before_the_nic() {
        // net-affinity pinned the app to CPU 9 (node 2); memory follows it, no new pin.
        let topo = machine("opteron-magny-cours-4p").unwrap();
        let pol = NumaLocal::new(migrating());
        let plan = pol.plan(
            &topo,
            &obs(vec![proc(4, 50e6, "9", &[(0, 300), (2, 100)])]),
            &mut PolicyState::default(),
        );
        assert!(pins(&plan).is_empty());
        assert_eq!(binds(&plan), vec![(4, vec![2], 300 * 4096)]);
        // With "nic" first the NIC's node wins instead.
        let cfg = NumaLocalConfig {
            target_order: vec!["nic".into(), "cpus".into()],
            ..migrating()
        };
        let p = proc(4, 50e6, "9", &[]);
        assert_eq!(target_node(&topo, &p, &cfg.target_order).unwrap().node, 0);
    }

    #[test]
    fn synthetic_two_packages_two_nodes_pages_decide_without_nic() {
        let topo = machine("pkg:2 node:2 core:4").unwrap();
        assert_eq!(topo.nodes.len(), 4);
        let pol = NumaLocal::new(migrating());
        let plan = pol.plan(
            &topo,
            &obs(vec![proc(5, 20e6, "0-15", &[(1, 100), (3, 700), (2, 50)])]),
            &mut PolicyState::default(),
        );
        assert_eq!(pins(&plan), vec![(5, CpuSet::parse_list("12-15").unwrap())]);
        assert_eq!(binds(&plan), vec![(5, vec![3], 150 * 4096)]);
    }

    #[test]
    fn m3_m5_local_enough_quiet_and_migration_off_give_no_memory_action() {
        let topo = machine("pkg:2 node:2 core:4").unwrap();
        let pol = NumaLocal::new(migrating());
        let procs = vec![
            proc(1, 50e6, "4-7", &[(1, 95), (0, 5)]), // 95% on node 1: enough
            proc(2, 1e3, "0-15", &[(0, 10), (3, 900)]), // quiet
        ];
        let plan = pol.plan(&topo, &obs(procs.clone()), &mut PolicyState::default());
        assert!(plan.actions.is_empty(), "{:?}", plan.actions);
        assert!(plan
            .notes
            .iter()
            .any(|n| n.text.contains("95% of its pages already there")));
        let off = NumaLocal::new(NumaLocalConfig::default());
        let plan = off.plan(
            &topo,
            &obs(vec![proc(3, 50e6, "4-7", &[(0, 100)])]),
            &mut PolicyState::default(),
        );
        assert!(binds(&plan).is_empty());
        assert!(plan
            .notes
            .iter()
            .any(|n| n.text.contains("migration is off")));
    }

    #[test]
    fn m2_migration_rate_bound_holds_over_many_cycles() {
        let topo = machine("opteron-magny-cours-4p").unwrap();
        let rate = 8u64 << 20;
        let pol = NumaLocal::new(NumaLocalConfig {
            migrate_max_bytes_per_s: rate,
            ..migrating()
        });
        // Ten apps pinned to node 0 CPUs, each with 16 MiB on node 7.
        let procs: Vec<ProcObs> = (0..10)
            .map(|i| proc(10 + i, 40e6, "0-3", &[(7, 4096)]))
            .collect();
        let mut state = PolicyState::default();
        let mut total = 0u64;
        let mut elapsed = 0.0;
        for cycle in 0..20 {
            let interval = [0.5, 1.0, 2.0][cycle % 3];
            elapsed += interval;
            state.now_s = elapsed;
            let mut o = obs(procs.clone());
            o.interval_s = interval;
            let plan = pol.plan(&topo, &o, &mut state);
            let sum: u64 = binds(&plan).iter().map(|b| b.2).sum();
            assert!(
                sum as f64 <= rate as f64 * interval,
                "cycle {cycle}: {sum} > budget"
            );
            assert!(binds(&plan).iter().all(|b| b.1 == vec![0]));
            total += sum;
        }
        assert!(total as f64 <= rate as f64 * elapsed);
        assert!(total > 0, "the bound must still allow progress");
        assert_eq!(state.private.granted_bytes, total);
        // A budget smaller than a page grants nothing and says why.
        let tiny = NumaLocal::new(NumaLocalConfig {
            migrate_max_bytes_per_s: 100,
            ..migrating()
        });
        let plan = tiny.plan(
            &topo,
            &obs(procs[..1].to_vec()),
            &mut PolicyState::default(),
        );
        assert!(binds(&plan).is_empty());
        assert!(plan.notes.iter().any(|n| n.text.contains("budget")));
    }

    #[test]
    fn m4_pins_only_usable_cpus_of_the_target() {
        let mut topo = machine("pkg:2 node:2 core:4").unwrap();
        for c in topo.cpus.iter_mut().filter(|c| c.id == 1 || c.id == 2) {
            c.allowed = false;
        }
        let pol = NumaLocal::new(NumaLocalConfig::default());
        let plan = pol.plan(
            &topo,
            &obs(vec![proc(8, 50e6, "0-15", &[(0, 10)])]),
            &mut PolicyState::default(),
        );
        assert_eq!(pins(&plan), vec![(8, CpuSet::parse_list("0,3").unwrap())]);
    }

    #[test]
    fn m5_quiet_pinned_process_gets_cpus_back_after_quiet_s() {
        let topo = machine("pkg:2 node:2 core:4").unwrap();
        let pol = NumaLocal::new(NumaLocalConfig::default());
        let mut state = PolicyState::default();
        let p = proc(9, 50e6, "0-3", &[(0, 10)]);
        state.now_s = 1.0;
        pol.plan(&topo, &obs(vec![p.clone()]), &mut state);
        state.held.insert(
            p.key(),
            Held {
                cpus: CpuSet::parse_list("0-3").unwrap(),
                since_s: 1.0,
                comm: p.comm.to_string(),
            },
        );
        let mut quiet = p.clone();
        quiet.rx_bytes_per_s = 0.0;
        state.now_s = 5.0;
        let plan = pol.plan(&topo, &obs(vec![quiet.clone()]), &mut state);
        assert!(plan.actions.is_empty(), "quiet for 4 s < 10 s");
        state.now_s = 11.5;
        let plan = pol.plan(&topo, &obs(vec![quiet]), &mut state);
        assert!(
            matches!(plan.actions.as_slice(), [a] if matches!(a.action, Action::RestoreProcess { .. }))
        );
    }

    #[test]
    fn cpus_held_by_an_earlier_policy_are_not_pinned_again() {
        // net-affinity holds the app on CPUs 0 and 4 (two nodes); with "nic" first the
        // target is node 0: memory moves, CPUs stay as the earlier policy set them.
        let topo = machine("opteron-magny-cours-4p").unwrap();
        let cfg = NumaLocalConfig {
            target_order: vec!["nic".into()],
            ..migrating()
        };
        let pol = NumaLocal::new(cfg);
        let p = proc(6, 50e6, "0,4", &[(1, 100)]);
        let mut state = PolicyState::default();
        state.taken.insert(p.key());
        let plan = pol.plan(&topo, &obs(vec![p]), &mut state);
        assert!(pins(&plan).is_empty());
        assert_eq!(binds(&plan), vec![(6, vec![0], 100 * 4096)]);
        assert!(plan
            .notes
            .iter()
            .any(|n| n.text.contains("held by an earlier policy")));
    }

    #[test]
    fn adjacent_and_remote_nodes() {
        let m = machine("opteron-magny-cours-4p").unwrap();
        assert_eq!(related_node(&m, 0, Relation::Adjacent), Some(1));
        assert_eq!(related_node(&m, 1, Relation::Adjacent), Some(0));
        assert_eq!(related_node(&m, 0, Relation::Remote), Some(2));
        assert_eq!(related_node(&m, 5, Relation::Adjacent), Some(4));
        let r = related_node(&m, 5, Relation::Remote).unwrap();
        assert_ne!(
            m.node(r)
                .unwrap()
                .cpus
                .first()
                .and_then(|c| m.cpu(c))
                .unwrap()
                .package,
            Some(2)
        );
        let s = machine("pkg:2 node:2 core:4").unwrap();
        assert_eq!(related_node(&s, 2, Relation::Adjacent), Some(3));
        assert_eq!(related_node(&s, 2, Relation::Remote), Some(0));
        // One package with one node per die: adjacent exists, remote does not.
        let one = machine("pkg:1 die:2 core:2").unwrap();
        assert_eq!(related_node(&one, 0, Relation::Adjacent), Some(1));
        assert_eq!(related_node(&one, 0, Relation::Remote), None);
        let single = machine("pkg:1 core:2").unwrap();
        assert_eq!(related_node(&single, 0, Relation::Adjacent), None);
        assert_eq!(related_node(&single, 0, Relation::Remote), None);
    }

    #[test]
    fn config_defaults_round_trip_and_validate() {
        let c = NumaLocalConfig::default();
        assert!(c.validate().is_ok());
        let t = toml::to_string(&c).unwrap();
        assert_eq!(toml::from_str::<NumaLocalConfig>(&t).unwrap(), c);
        assert!(NumaLocalConfig {
            target_order: vec!["disk".into()],
            ..c.clone()
        }
        .validate()
        .is_err());
        assert!(NumaLocalConfig {
            page_bytes: 3000,
            ..c.clone()
        }
        .validate()
        .is_err());
        assert!(NumaLocalConfig {
            min_local_fraction: 1.5,
            ..c
        }
        .validate()
        .is_err());
        assert!(toml::from_str::<NumaLocalConfig>("bogus = 1").is_err());
    }

    /// Issue 16: on a machine with one usable node numa-local is disabled, so the engine
    /// samples no numa_maps for it; with two it runs.
    #[test]
    fn disabled_with_one_usable_node() {
        let pol = NumaLocal::new(NumaLocalConfig::default());
        let src = crate::sample::SourceStatus::default();
        let one = crate::machines::machine("pkg:1 node:1 core:4 pu:1").unwrap();
        assert!(pol.disabled_reason(&one, &src).is_some());
        let two = crate::machines::machine("opteron-magny-cours-4p").unwrap();
        assert!(pol.disabled_reason(&two, &src).is_none());
        let mut only_one_allowed = two.clone();
        for n in only_one_allowed.nodes.iter_mut().skip(1) {
            n.allowed = false;
        }
        assert!(pol.disabled_reason(&only_one_allowed, &src).is_some());
    }
}
