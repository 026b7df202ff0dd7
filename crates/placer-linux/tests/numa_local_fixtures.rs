//! The `numa-local` policy on real multi-node topologies read from snapshots in
//! tests/fixtures: a 4-package Magny-Cours with sparse node ids (hwloc
//! 48amd64-4pa2n6c-sparse), a dual Xeon with sub-NUMA clustering (hwloc
//! memorysidecaches) and a dual EPYC 7451 (util-linux lscpu dump, no distances). The
//! snapshots have no NICs, so each test adds one on a chosen node.

mod topology_util;

use placer_core::machines::nic;
use placer_core::observation::{Observation, ProcObs};
use placer_core::plan::Action;
use placer_core::policies::numa_local::{related_node, NumaLocal, NumaLocalConfig, Relation};
use placer_core::{CpuSet, Policy, PolicyState, Topology};
use std::collections::BTreeMap;
use topology_util::{fixtures_dir, lscpu_dir, unpack};

/// The snapshots' topologies, read once for all tests (unpacking is slow).
fn snapshots() -> Vec<(String, Topology)> {
    static ONCE: std::sync::OnceLock<Vec<(String, Topology)>> = std::sync::OnceLock::new();
    ONCE.get_or_init(read_snapshots).clone()
}

fn read_snapshots() -> Vec<(String, Topology)> {
    let mut out = Vec::new();
    for (dir, file) in [
        (fixtures_dir(), "48amd64-4pa2n6c-sparse.tar.bz2"),
        (fixtures_dir(), "memorysidecaches.tar.bz2"),
        (lscpu_dir(), "x86_64-epyc_7451.tar.gz"),
    ] {
        let u = unpack(&dir.join(file));
        let t = placer_linux::topology::read(&u.root).expect("topology of the snapshot");
        out.push((file.to_string(), t));
    }
    out
}

fn proc_obs(pid: u32, rx: f64, cpus: &CpuSet, pages: BTreeMap<u32, u64>) -> ProcObs {
    let mut p = ProcObs::bare(pid, 1000 + pid as u64, &format!("rx{pid}"), cpus.clone());
    p.rx_bytes_per_s = rx;
    p.numa_pages = pages;
    p
}

fn package_of_node(t: &Topology, n: u32) -> Option<u32> {
    t.node(n)?
        .cpus
        .iter()
        .find_map(|c| t.cpu(c).and_then(|c| c.package))
}

fn migrating() -> NumaLocalConfig {
    NumaLocalConfig {
        migrate: true,
        ..NumaLocalConfig::default()
    }
}

fn obs(procs: Vec<ProcObs>) -> Observation {
    Observation {
        interval_s: 1.0,
        procs: procs.into_iter().map(std::sync::Arc::new).collect(),
        ..Observation::default()
    }
}

#[test]
fn target_from_nic_cpus_and_pages_on_real_snapshots() {
    for (name, mut topo) in snapshots() {
        assert!(topo.nodes.len() >= 4, "{name}: {} nodes", topo.nodes.len());
        let ids: Vec<u32> = topo.nodes.iter().map(|n| n.id).collect();
        let (nic_node, other) = (ids[1], ids[ids.len() - 1]);
        let first_cpu = topo.node(nic_node).unwrap().cpus.first().unwrap();
        topo.nics
            .push(nic("eth0", Some(nic_node), 10_000, 90, 1, |_| {
                CpuSet::single(first_cpu)
            }));
        let all = topo.allowed();
        let pol = NumaLocal::new(migrating());

        // NIC evidence: an unpinned app with its pages elsewhere goes to the NIC's node.
        let pages = BTreeMap::from([(other, 1000u64)]);
        let plan = pol.plan(
            &topo,
            &obs(vec![proc_obs(1, 50e6, &all, pages.clone())]),
            &mut PolicyState::default(),
        );
        let node_cpus = topo.node(nic_node).unwrap().cpus.intersection(&all);
        let kinds: Vec<&Action> = plan.actions.iter().map(|a| &a.action).collect();
        assert!(
            matches!(kinds.as_slice(), [Action::PinProcess { cpus, .. }, Action::BindMemory { nodes, migrate_max_bytes, .. }]
                if *cpus == node_cpus && *nodes == vec![nic_node] && *migrate_max_bytes == 1000 * 4096),
            "{name}: {kinds:?}"
        );

        // CPU evidence: pinned (by net-affinity) inside `other`: memory follows the CPUs.
        let cpu = topo.node(other).unwrap().cpus.first().unwrap();
        let plan = pol.plan(
            &topo,
            &obs(vec![proc_obs(
                2,
                50e6,
                &CpuSet::single(cpu),
                BTreeMap::from([(nic_node, 500)]),
            )]),
            &mut PolicyState::default(),
        );
        let binds: Vec<Vec<u32>> = plan
            .actions
            .iter()
            .filter_map(|a| match &a.action {
                Action::BindMemory { nodes, .. } => Some(nodes.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(binds, vec![vec![other]], "{name}");
        assert!(plan
            .actions
            .iter()
            .all(|a| !matches!(a.action, Action::PinProcess { .. })));

        // Page evidence: without NIC evidence (two NICs, no flows) the main page node wins.
        topo.nics.push(nic("eth1", Some(other), 10_000, 99, 1, |_| {
            CpuSet::single(cpu)
        }));
        let third = ids[2];
        let plan = pol.plan(
            &topo,
            &obs(vec![proc_obs(
                3,
                50e6,
                &all,
                BTreeMap::from([(third, 800), (nic_node, 200)]),
            )]),
            &mut PolicyState::default(),
        );
        let pinned: Vec<CpuSet> = plan
            .actions
            .iter()
            .filter_map(|a| match &a.action {
                Action::PinProcess { cpus, .. } => Some(cpus.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            pinned,
            vec![topo.node(third).unwrap().cpus.intersection(&all)],
            "{name}"
        );
    }
}

#[test]
fn adjacent_is_same_package_and_remote_another_on_real_snapshots() {
    for (name, topo) in snapshots() {
        for n in topo.nodes.iter().map(|n| n.id) {
            let me = package_of_node(&topo, n);
            let adj = related_node(&topo, n, Relation::Adjacent);
            let rem = related_node(&topo, n, Relation::Remote);
            let rem = rem.unwrap_or_else(|| panic!("{name}: node {n} has no remote node"));
            assert_ne!(package_of_node(&topo, rem), me, "{name}: remote of {n}");
            if let Some(a) = adj {
                assert_ne!(a, n);
                assert_eq!(package_of_node(&topo, a), me, "{name}: adjacent of {n}");
                // Where distances are known, adjacent is nearer than remote.
                let d = &topo.node(n).unwrap().distances;
                if let (Some(da), Some(dr)) = (d.get(&a), d.get(&rem)) {
                    assert!(
                        da <= dr,
                        "{name}: node {n}: adjacent {a} at {da}, remote {rem} at {dr}"
                    );
                }
            }
        }
    }
}

#[test]
fn migration_budget_holds_on_real_snapshots() {
    for (name, topo) in snapshots() {
        let rate = 4u64 << 20;
        let pol = NumaLocal::new(NumaLocalConfig {
            migrate_max_bytes_per_s: rate,
            ..migrating()
        });
        let far = topo.nodes.last().unwrap().id;
        let cpus = topo.nodes[0].cpus.clone();
        let procs: Vec<ProcObs> = (0..6)
            .map(|i| proc_obs(10 + i, 30e6, &cpus, BTreeMap::from([(far, 100_000)])))
            .collect();
        let mut state = PolicyState::default();
        let (mut total, mut elapsed) = (0u64, 0.0);
        for cycle in 0..10 {
            let dt = [0.25, 1.0, 3.0][cycle % 3];
            elapsed += dt;
            state.now_s = elapsed;
            let mut o = obs(procs.clone());
            o.interval_s = dt;
            let plan = pol.plan(&topo, &o, &mut state);
            let sum: u64 = plan
                .actions
                .iter()
                .filter_map(|a| match &a.action {
                    Action::BindMemory {
                        migrate_max_bytes, ..
                    } => Some(*migrate_max_bytes),
                    _ => None,
                })
                .sum();
            assert!(sum as f64 <= rate as f64 * dt, "{name}: cycle {cycle}");
            total += sum;
        }
        assert!(total > 0 && total as f64 <= rate as f64 * elapsed, "{name}");
    }
}
