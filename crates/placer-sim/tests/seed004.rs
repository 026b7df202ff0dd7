//! Scenario seed-004 (network buffers on a NUMA Magny-Cours): the shape of the paper's
//! result holds in the model, and numa-local repairs a remote placement.

use placer_sim::scenario::{self, Scenario};

fn gbps(sc: &Scenario, variant: &str, policy: &str) -> f64 {
    let v = sc.variants.iter().find(|v| v.name == variant).unwrap();
    let r = scenario::run_one(
        sc,
        Some(v),
        &policy.parse().unwrap(),
        1,
        &scenario::default_factory,
    )
    .unwrap();
    r.metrics.net_gbps
}

#[test]
fn reuse_ignores_the_node_fresh_pays_distance_and_numa_local_repairs_it() {
    let sc = Scenario::load("seed-004").unwrap();
    let sc = Scenario {
        duration_s: 6.0,
        warmup_s: 3.0,
        ..sc
    };
    let reuse: Vec<f64> = ["reuse-local", "reuse-adjacent", "reuse-remote"]
        .iter()
        .map(|v| gbps(&sc, v, "linux-default"))
        .collect();
    let fresh: Vec<f64> = ["fresh-local", "fresh-adjacent", "fresh-remote"]
        .iter()
        .map(|v| gbps(&sc, v, "linux-default"))
        .collect();
    // Paper: with reuse the buffer's node does not matter.
    assert!(
        reuse
            .iter()
            .all(|&g| (g - reuse[0]).abs() < 1e-6 * reuse[0]),
        "{reuse:?}"
    );
    // Reuse beats every fresh case; fresh falls with distance.
    assert!(
        fresh.iter().all(|&f| f < reuse[0]),
        "{fresh:?} vs {reuse:?}"
    );
    assert!(fresh[0] > fresh[1] && fresh[1] > fresh[2], "{fresh:?}");
    // Remote below adjacent by 5-30% (paper: ~15%).
    let drop = 1.0 - fresh[2] / fresh[1];
    assert!((0.05..0.30).contains(&drop), "remote vs adjacent {drop}");
    // numa-local (migration on) brings the remote case back to local.
    let fixed = gbps(&sc, "fresh-remote", "numa-local");
    assert!(fixed > fresh[2] * 1.1, "{fixed} vs {}", fresh[2]);
    assert!(
        (fixed - fresh[0]).abs() < 0.05 * fresh[0],
        "{fixed} vs local {}",
        fresh[0]
    );
}
