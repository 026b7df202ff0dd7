//! seed 001's allocation orders run on the simulator (`placer plan --simulate SCENARIO`):
//! the scenario's first workload with 1..=N threads confined to the first N units of the
//! speedup order and of the efficiency order, one simulated run each; the prefix stats of
//! both orders get the simulated speedups and power.

use crate::baselines::Baseline;
use crate::scenario::{default_factory, run_one, PolicySpec, Scenario};
use placer_core::alloc::{self, AllocOptions, AllocPolicy, PrefixStats};
use placer_core::power_model;
use serde::Serialize;

/// The runs, then the speedup order's and the efficiency order's prefix stats.
pub type Sweep = (Vec<SimPoint>, Vec<PrefixStats>, Vec<PrefixStats>);

/// One simulated run of the sweep.
#[derive(Debug, Clone, Serialize)]
pub struct SimPoint {
    pub policy: AllocPolicy,
    pub n: usize,
    pub cpus: Vec<u32>,
    pub makespan_s: f64,
    pub power_w: f64,
    pub energy_j: f64,
}

/// Runs the sweep; returns the points and, per order, prefix stats whose speedup and
/// power are the simulated ones (speedup relative to one unit of `speedup`).
pub fn sweep(name: &str, opts: &AllocOptions) -> Result<Sweep, String> {
    sweep_scenario(name, Scenario::load(name).map_err(|e| e.to_string())?, opts)
}

/// [`sweep`] of a scenario already loaded (`name` for messages).
pub fn sweep_scenario(name: &str, sc: Scenario, opts: &AllocOptions) -> Result<Sweep, String> {
    if sc.workloads.is_empty() {
        return Err(format!("scenario {name} has no workload"));
    }
    let (topo, _) = sc.topology_and_params(None).map_err(|e| e.to_string())?;
    let seed = sc.seeds.first().copied().unwrap_or(1);
    let mut points = Vec::new();
    let mut stats = Vec::new();
    for policy in [AllocPolicy::Speedup, AllocPolicy::Efficiency] {
        let order = alloc::order(&topo, policy, opts);
        let mut st = alloc::prefix_stats(
            &topo,
            &order,
            &power_model::builtin("dell-c6100").expect("built in"),
            0.0,
            opts,
        );
        for n in 1..=order.len() {
            let mut s = sc.clone();
            s.workloads[0].threads = n as u32;
            s.workloads[0].cpus = Some(order[..n].iter().copied().collect());
            let linux = PolicySpec::new(Baseline::LinuxDefault, Vec::new());
            let r = run_one(&s, None, &linux, seed, &default_factory)
                .map_err(|e| format!("{name}, {policy} n = {n}: {e}"))?;
            let m = &r.metrics;
            let makespan_s = m
                .makespan_s
                .ok_or_else(|| format!("{name}: the job did not finish within duration_s"))?;
            points.push(SimPoint {
                policy,
                n,
                cpus: order[..n].to_vec(),
                makespan_s,
                power_w: m.power_w,
                energy_j: m.energy_j,
            });
            st[n - 1].power_w = m.power_w;
        }
        stats.push(st);
    }
    let t1 = points[0].makespan_s;
    for (st, pol) in stats
        .iter_mut()
        .zip([AllocPolicy::Speedup, AllocPolicy::Efficiency])
    {
        for p in st.iter_mut() {
            let sim = points
                .iter()
                .find(|q| q.policy == pol && q.n == p.n)
                .expect("every n was run");
            p.speedup = t1 / sim.makespan_s;
            p.spn = p.speedup / p.power_w / f64::from(p.cores.max(1)) * 1000.0;
        }
    }
    let eff = stats.pop().expect("two orders");
    let spd = stats.pop().expect("two orders");
    Ok((points, spd, eff))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulated_sweep_runs_both_orders_at_every_unit_count() {
        // A small machine and a short job so the sweep takes well under a second of
        // simulated time per run: 1 package x 2 cores x 2 threads.
        let dir = std::env::temp_dir().join(format!("placer-plan-sim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("small.toml");
        std::fs::write(
            &path,
            "name = \"small\"\nmachine = \"pkg:1 core:2 pu:2\"\nduration_s = 20.0\n\
             stop_when_done = true\nseeds = [1]\nobjective = \"makespan\"\n\
             [[workloads]]\nkind = \"cpu\"\nname = \"wc\"\nthreads = 4\n\
             serial_fraction = 0.0\nwork_s = 2.0\n",
        )
        .unwrap();
        let r = sweep(path.to_str().unwrap(), &AllocOptions::default());
        let _ = std::fs::remove_dir_all(&dir);
        let (points, a, b) = r.unwrap();
        assert_eq!(points.len(), 8);
        assert_eq!((a.len(), b.len()), (4, 4));
        let t = |pol, n| {
            points
                .iter()
                .find(|p| p.policy == pol && p.n == n)
                .unwrap()
                .makespan_s
        };
        // Two units: two cores (speedup) beat two threads of one core (efficiency).
        assert!(t(AllocPolicy::Speedup, 2) < t(AllocPolicy::Efficiency, 2));
        // ... but the shared core is faster than one thread alone.
        assert!(t(AllocPolicy::Efficiency, 2) < t(AllocPolicy::Speedup, 1));
        // All four units: the same CPUs, the same time.
        assert!((t(AllocPolicy::Speedup, 4) - t(AllocPolicy::Efficiency, 4)).abs() < 1e-6);
        assert!((a[0].speedup - 1.0).abs() < 1e-12);
    }
}
