//! Allocation orders on real machines' topologies (hwloc's sysfs snapshots in
//! placer-linux/tests/fixtures/hwloc, read by the topology reader): the invariants of
//! `placer_core::alloc` on every snapshot, and the shape-specific rules on SMT2, SMT4
//! (POWER7), Intel hybrid and Arm big.LITTLE (NVIDIA GB10).

#[path = "../../placer-linux/tests/topology_util/mod.rs"]
mod topology_util;

use placer_core::alloc::{order, units, verify_policy, AllocOptions, AllocPolicy, Unit};
use placer_core::Topology;
use std::collections::BTreeMap;

fn read(name: &str) -> (topology_util::Unpacked, Topology) {
    // topology_util::fixtures_dir() is relative to the crate that includes it.
    let tarball = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../placer-linux/tests/fixtures/hwloc")
        .join(format!("{name}.tar.bz2"));
    let u = topology_util::unpack(&tarball);
    let t = placer_linux::topology::read(&u.root).unwrap_or_else(|e| panic!("{name}: {e}"));
    (u, t)
}

fn unit_map(t: &Topology) -> BTreeMap<u32, Unit> {
    units(t).into_iter().map(|u| (u.cpu, u)).collect()
}

const ALL: &[&str] = &[
    "128arm-2pa2n8cluster4co",
    "16amd64-8n2c-cpusets",
    "16em64t-4s2c2t-offlines",
    "16em64t-4s2c2t",
    "20em64t-hybrid-1p6c2t+2ca4co1t",
    "256ppc-8n8s4t",
    "32amd64-4s2n4c-cgroup2",
    "48amd64-4pa2n6c-sparse",
    "64amd64-4s2n4ca2co",
    "fakecpuid1f-64intel64-2p4d2n2c2t",
    "memorysidecaches",
    "nvidia-dgx-gb10",
    "offline-cpu0-node0",
];

#[test]
fn invariants_hold_on_every_snapshot() {
    for name in ALL {
        let (_u, t) = read(name);
        assert!(!t.allowed().is_empty(), "{name}: no allowed CPUs");
        for p in AllocPolicy::ALL {
            if let Err(e) = verify_policy(&t, p, &AllocOptions::default()) {
                panic!("{name}: {e}");
            }
        }
    }
}

#[test]
fn smt2_four_socket_xeon() {
    // 4 packages x 2 cores x 2 threads.
    let (_u, t) = read("16em64t-4s2c2t");
    let us = unit_map(&t);
    let opts = AllocOptions::default();
    let sp = order(&t, AllocPolicy::Speedup, &opts);
    assert!(sp[..8].iter().all(|c| us[c].thread_rank == 0));
    assert!(sp[8..].iter().all(|c| us[c].thread_rank == 1));
    // Speedup fills a package's cores before the next package (Table 1's rule).
    let pk: Vec<Option<u32>> = sp[..8].iter().map(|c| us[c].package).collect();
    assert!(pk.windows(2).all(|w| w[0] <= w[1]), "{pk:?}");
    let ef = order(&t, AllocPolicy::Efficiency, &opts);
    for pair in ef.chunks(2) {
        assert_eq!(us[&pair[0]].core, us[&pair[1]].core, "{ef:?}");
    }
    // Scatter: the first 4 units on 4 different packages.
    let sc = order(&t, AllocPolicy::Scatter, &opts);
    let mut first: Vec<Option<u32>> = sc[..4].iter().map(|c| us[c].package).collect();
    first.dedup();
    assert_eq!(first.len(), 4, "{sc:?}");
}

#[test]
fn smt4_power7() {
    let (_u, t) = read("256ppc-8n8s4t");
    let us = unit_map(&t);
    let cores = us
        .values()
        .map(|u| u.core)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    assert!(us.values().any(|u| u.thread_rank == 3), "expected SMT4");
    let opts = AllocOptions::default();
    let sp = order(&t, AllocPolicy::Speedup, &opts);
    // Rank by rank: all first threads, then all second threads, ...
    let ranks: Vec<u32> = sp.iter().map(|c| us[c].thread_rank).collect();
    assert!(ranks.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(ranks.iter().filter(|r| **r == 0).count(), cores);
    let ef = order(&t, AllocPolicy::Efficiency, &opts);
    for quad in ef.chunks(4) {
        assert!(
            quad.iter().all(|c| us[c].core == us[&quad[0]].core),
            "{quad:?}"
        );
    }
}

#[test]
fn intel_hybrid() {
    // 1 package: 6 P-cores x 2 threads + 2 clusters of 4 single-thread E-cores.
    let (_u, t) = read("20em64t-hybrid-1p6c2t+2ca4co1t");
    let us = unit_map(&t);
    let opts = AllocOptions::default();
    let is_e = |c: &u32| us[c].capacity < 1.0;
    let sp = order(&t, AllocPolicy::Speedup, &opts);
    let n_e = us.keys().filter(|c| is_e(c)).count();
    assert_eq!(
        n_e,
        8,
        "E-cores detected: {:?}",
        us.values().collect::<Vec<_>>()
    );
    // P-core first threads, then E-cores, then P-core siblings.
    assert!(sp[..6].iter().all(|c| !is_e(c) && us[c].thread_rank == 0));
    assert!(sp[6..14].iter().all(is_e));
    assert!(sp[14..].iter().all(|c| !is_e(c) && us[c].thread_rank == 1));
    let ef = order(&t, AllocPolicy::Efficiency, &opts);
    assert!(ef[..8].iter().all(is_e), "{ef:?}");
    for pair in ef[8..].chunks(2) {
        assert_eq!(us[&pair[0]].core, us[&pair[1]].core);
    }
}

#[test]
fn arm_big_little_gb10() {
    let (_u, t) = read("nvidia-dgx-gb10");
    let us = unit_map(&t);
    let opts = AllocOptions::default();
    let cap = |c: &u32| us[c].capacity;
    let sp = order(&t, AllocPolicy::Speedup, &opts);
    assert!(
        sp.windows(2).all(|w| cap(&w[0]) >= cap(&w[1])),
        "speedup not by capacity"
    );
    let ef = order(&t, AllocPolicy::Efficiency, &opts);
    // LITTLE (lower capacity) cores first.
    let littles = us.values().filter(|u| u.capacity < 0.8).count();
    assert!(littles > 0);
    assert!(ef[..littles].iter().all(|c| cap(c) < 0.8), "{ef:?}");
}
