//! Model tests, each from first principles or a calibration figure (docs/simulator.md).

use placer_core::host::Host;
use placer_core::plan::{Action, Plan};
use placer_core::policy::{boxed, AnyPolicy};
use placer_core::sample::SampleRequest;
use placer_core::{Observation, Policy, PolicyState, Topology};
use placer_sim::machine;
use placer_sim::scenario::{self, metrics_of, Scenario};
use placer_sim::{Baseline, SimHost};

fn scenario(text: &str) -> Scenario {
    Scenario::from_toml("test", text).unwrap_or_else(|e| panic!("{e}"))
}

fn host(text: &str) -> SimHost {
    scenario(text)
        .host(None, Baseline::LinuxDefault, 1)
        .unwrap()
}

/// Completion time of the job(s) of process `name`.
fn completion(h: &SimHost, name: &str) -> f64 {
    let p = h.procs().iter().find(|p| p.comm == name).unwrap();
    assert_eq!(
        p.result.completions_s.len(),
        1,
        "{name} did not finish once"
    );
    p.result.completions_s[0]
}

fn set_governor(h: &mut SimHost, domain: u32, gov: &str, khz: Option<u64>) {
    let mut plan = Plan::default();
    plan.push(
        placer_core::policies::PolicyKind::EnergyQos,
        Action::SetGovernor {
            domain,
            governor: gov.into(),
            speed_khz: khz,
        },
        "test",
    );
    let r = h.apply(&plan, false);
    assert_eq!(r[0].outcome.kind(), "done");
}

const TICK_S: f64 = 0.001;

#[test]
fn one_task_on_an_idle_core_runs_at_the_modelled_speed() {
    // Big core type at full speed: speed 1.0 by definition.
    let mut h = host(
        r#"name = "t"
machine = "dell-c6100"
duration_s = 2.0
[[workloads]]
kind = "cpu"
name = "job"
work_s = 0.5
"#,
    );
    h.run_until(2_000_000_000, true);
    assert!(
        (completion(&h, "job") - 0.5).abs() <= TICK_S,
        "{}",
        completion(&h, "job")
    );

    // A Cortex-A7 at 1.4 GHz: 1.9x slower per MHz for compute (CAL A5) and 1.4/2.0 of the
    // frequency: 0.5 s * 1.9 / 0.7.
    let mut h = host(
        r#"name = "t"
machine = "odroid-xu4"
duration_s = 3.0
[[workloads]]
kind = "cpu"
name = "job"
work_s = 0.5
class = "compute-int"
cpus = [0]
"#,
    );
    set_governor(&mut h, 0, "performance", None);
    h.run_until(3_000_000_000, true);
    let want = 0.5 * 1.9 / 0.7;
    assert!(
        (completion(&h, "job") - want).abs() <= 2.0 * TICK_S,
        "{} vs {want}",
        completion(&h, "job")
    );
}

#[test]
fn two_smt_threads_on_one_core_get_the_modelled_gain() {
    // dell-c6100: CPUs 0 and 8 are the two threads of core 0. compute-int gain 25% (CAL C):
    // each thread runs at (1 + 0.25) / 2 = 0.625, and the sibling also shares the LLC:
    // x 1 / (1 + 2.0 * S(0.1) * (1 - exp(-P(0.05)))).
    let mut h = host(
        r#"name = "t"
machine = "dell-c6100"
duration_s = 3.0
[[workloads]]
kind = "cpu"
name = "a"
work_s = 0.5
class = "compute-int"
cpus = [0]
[[workloads]]
kind = "cpu"
name = "b"
work_s = 0.5
class = "compute-int"
cpus = [8]
"#,
    );
    h.run_until(3_000_000_000, true);
    let llc = 1.0 + 2.0 * 0.1 * (1.0 - (-0.05f64).exp());
    let want = 0.5 / (0.625 / llc);
    for n in ["a", "b"] {
        let got = completion(&h, n);
        assert!((got - want).abs() <= 3.0 * TICK_S, "{n}: {got} vs {want}");
    }
    // Two threads on separate cores: no sharing.
    let mut h = host(
        r#"name = "t"
machine = "dell-c6100"
duration_s = 3.0
[[workloads]]
kind = "cpu"
name = "a"
work_s = 0.5
cpus = [0]
[[workloads]]
kind = "cpu"
name = "b"
work_s = 0.5
cpus = [1]
"#,
    );
    h.run_until(3_000_000_000, true);
    assert!((completion(&h, "b") - 0.5).abs() <= TICK_S);
}

/// Runs a compute job pinned to big CPU 4 of the odroid at `khz`; returns (completion s,
/// mean power W over the job).
fn odroid_at(khz: u64) -> (f64, f64) {
    let mut h = host(
        r#"name = "t"
machine = "odroid-xu4"
duration_s = 5.0
[[workloads]]
kind = "cpu"
name = "job"
work_s = 0.4
class = "compute-fp"
cpus = [4]
"#,
    );
    set_governor(&mut h, 4, "userspace", Some(khz));
    set_governor(&mut h, 0, "powersave", None);
    h.open_window();
    h.run_until(5_000_000_000, true);
    let t = completion(&h, "job");
    (t, h.window().energy_j / h.time_s())
}

#[test]
fn frequency_scaling_changes_time_proportionally_and_power_by_v2f() {
    let (t2, p2) = odroid_at(2_000_000);
    let (t1, p1) = odroid_at(1_000_000);
    assert!((t1 / t2 - 2.0).abs() < 0.02, "time ratio {}", t1 / t2);
    // Core power above idle: 1.888 W * (V^2 f) / (Vmax^2 fmax), CAL A1/A3, plus the
    // active cluster's static power V * 0.0856 A (CAL A7).
    let idle = 3.89;
    let leak = |v: f64| v * 0.0856;
    let want = (1.0f64 * 1.0 * 1000.0) / (1.3125 * 1.3125 * 2000.0);
    let got = (p1 - idle - leak(1.0)) / (p2 - idle - leak(1.3125));
    assert!((got - want).abs() < 0.02, "power ratio {got} vs {want}");
    assert!(
        (p2 - idle - leak(1.3125) - 1.888).abs() < 0.05,
        "full-speed core power {}",
        p2 - idle
    );
}

#[test]
fn a_remote_node_memory_job_runs_slower_by_the_modelled_factor() {
    // Flat loaded-latency curve so only the NUMA factor acts: streaming m = 8/10 = 0.8,
    // dell-c6100 nodes at distance 20 -> ratio 1.7 (CAL D): time x (1 + 0.8 * 0.7) over
    // the local time x 1.
    let text = |node: u32| {
        format!(
            r#"name = "t"
machine = "dell-c6100"
duration_s = 5.0
[params.contention]
loaded_latency = [[0.0, 1.0], [1.0, 1.0]]
[[workloads]]
kind = "cpu"
name = "job"
work_s = 0.5
class = "streaming"
cpus = [0]
mem_node = {node}
"#
        )
    };
    let mut local = host(&text(0));
    local.run_until(5_000_000_000, true);
    let mut remote = host(&text(1));
    remote.run_until(5_000_000_000, true);
    let (tl, tr) = (completion(&local, "job"), completion(&remote, "job"));
    assert!((tl - 0.5).abs() <= TICK_S, "local {tl}");
    let want = 1.0 + 0.8 * (1.7 - 1.0);
    assert!(
        (tr / tl - want).abs() < 0.01,
        "remote/local {} vs {want}",
        tr / tl
    );
}

fn corun(victim: &str, neighbour: &str) -> f64 {
    corun_on("xeon-x5570x2", victim, neighbour)
}

/// The victim's slowdown beside one neighbour on CPUs 0 and 1 (one LLC) of `machine`.
fn corun_on(machine: &str, victim: &str, neighbour: &str) -> f64 {
    let mut h = host(&format!(
        r#"name = "t"
machine = "{machine}"
duration_s = 5.0
[params.contention]
loaded_latency = [[0.0, 1.0], [1.0, 1.0]]
[[workloads]]
kind = "cpu"
name = "victim"
work_s = 0.5
class = "{victim}"
cpus = [0]
mem_node = 0
[[workloads]]
kind = "cpu"
name = "other"
class = "{neighbour}"
cpus = [1]
mem_node = 0
"#
    ));
    h.run_until(5_000_000_000, true);
    completion(&h, "victim") / 0.5
}

#[test]
fn contention_slows_a_sensitive_job_next_to_an_aggressive_one_only() {
    // CPUs 0 and 1 share package 0's L3. Slowdown 1 + 2.0 * S * (1 - exp(-P)) (CAL C).
    let f = |s: f64, p: f64| 1.0 + 2.0 * s * (1.0 - (-p).exp());
    let hurt = corun("cache-sensitive", "streaming");
    assert!(
        (hurt - f(0.9, 0.9)).abs() < 0.01,
        "sensitive next to streaming: {hurt}"
    );
    assert!(hurt > 1.5);
    let calm = corun("cache-sensitive", "compute-fp");
    assert!(
        (calm - f(0.9, 0.05)).abs() < 0.01,
        "sensitive next to compute: {calm}"
    );
    assert!(calm < 1.1);
    // An insensitive job barely notices the aggressive neighbour.
    let insens = corun("compute-fp", "streaming");
    assert!(insens < 1.1, "insensitive next to streaming: {insens}");
    // The memory-bound victims are slowed by the mem fraction on their own node too:
    // mem fraction of cache-sensitive = 2/10.
    let p =
        placer_sim::Params::for_machine(Some(placer_core::catalogue::Machine::XeonX5570x2), None);
    assert!(
        (machine::mem_fraction(&p, p.archetype("cache-sensitive").unwrap()) - 0.2).abs() < 1e-9
    );
}

#[test]
fn energy_is_the_integral_of_power() {
    let mut h = host(
        r#"name = "t"
machine = "dell-c6100"
duration_s = 1.0
[[workloads]]
kind = "cpu"
name = "job"
work_s = 0.3
start_s = 0.2
"#,
    );
    let mut integral = 0.0;
    for _ in 0..1000 {
        h.tick();
        integral += h.power_w() * TICK_S;
    }
    let s = h.build_sample(SampleRequest::default());
    let e = s.energy[0].energy_uj as f64 / 1e6;
    assert!((e - integral).abs() < 1e-3, "{e} vs {integral}");
    // Closed form (seed 001 model): 1 s idle at Pn plus 0.3 s with one package and one core
    // busy: Pn + 0.3 * (Ps + Pc).
    let want = 76.11 + 0.3 * (25.19 + 9.68);
    assert!((e - want).abs() < 0.1, "{e} vs {want}");
}

#[test]
fn receiving_away_from_the_irq_cache_costs_the_seed_002_extra() {
    // One flow, IRQ on CPU 0; the receiver on CPU 1 (shares the L2) or CPU 2 (does not).
    // Seed 002 Fig. 2: up to 27% more CPU. Wake-up IPIs off: the cache term alone.
    let no_ipi = "[params.net]\nwake_ipi_cycles = 0.0\nwake_ipi_remote_package_cycles = 0.0";
    let near = receiver_on("xeon-5355x2", 1, 500.0, no_ipi).0;
    let far = receiver_on("xeon-5355x2", 2, 500.0, no_ipi).0;
    assert!((far / near - 1.27).abs() < 0.01, "far/near {}", far / near);
    // 8 cycles/byte in all (CAL D): 62.5 MB/s * 8 / 2.66 GHz.
    assert!((near - 62.5e6 * 8.0 / 2.66e9).abs() < 0.005, "near {near}");
}

#[test]
fn same_seed_same_result() {
    let sc = Scenario::load("seed-002").unwrap();
    let sc = Scenario {
        duration_s: 1.0,
        warmup_s: 0.2,
        ..sc
    };
    let a = scenario::run_one(
        &sc,
        Some(&sc.variants[0]),
        &"linux-default".parse().unwrap(),
        7,
        &scenario::default_factory,
    )
    .unwrap();
    let b = scenario::run_one(
        &sc,
        Some(&sc.variants[0]),
        &"linux-default".parse().unwrap(),
        7,
        &scenario::default_factory,
    )
    .unwrap();
    assert_eq!(a, b);
}

/// A test policy (as net-affinity, a kind it stands in for): pins every process with a receive flow to its NIC's receive CPU.
struct PinToIrq;

impl Policy for PinToIrq {
    type State = ();

    fn kind(&self) -> placer_core::policies::PolicyKind {
        placer_core::policies::PolicyKind::NetAffinity
    }
    fn plan(&self, topo: &Topology, obs: &Observation, _st: &mut PolicyState) -> Plan {
        let mut plan = Plan::default();
        for p in &obs.procs {
            let Some(f) = p.flows.first() else { continue };
            let Some(nic) = topo.nic_for_addr(&f.local.ip()) else {
                continue;
            };
            if p.allowed_cpus != nic.rx_cpus && p.rx_bytes_per_s > 0.0 {
                plan.push(
                    placer_core::policies::PolicyKind::NetAffinity,
                    Action::PinProcess {
                        proc: p.key(),
                        comm: p.comm.to_string(),
                        cpus: nic.rx_cpus.clone(),
                    },
                    "test",
                );
            }
        }
        plan
    }
}

/// A test policy judged alone by CPU share (as smt-energy): crowds every process onto CPU 0
/// from 4 s on.
struct CrowdLater;

impl Policy for CrowdLater {
    type State = ();

    fn kind(&self) -> placer_core::policies::PolicyKind {
        placer_core::policies::PolicyKind::SmtEnergy
    }
    fn plan(&self, _topo: &Topology, obs: &Observation, st: &mut PolicyState) -> Plan {
        let mut plan = Plan::default();
        if st.now_s < 4.0 {
            return plan;
        }
        for p in obs.procs.iter().filter(|p| !st.held.contains_key(&p.key())) {
            plan.push(
                placer_core::policies::PolicyKind::SmtEnergy,
                Action::PinProcess {
                    proc: p.key(),
                    comm: p.comm.to_string(),
                    cpus: placer_core::CpuSet::single(0),
                },
                "test",
            );
        }
        plan
    }
}

#[test]
fn the_simulator_counts_moves_undone_on_their_verdict() {
    let text = r#"name = "t"
machine = "xeon-x5570x2"
duration_s = 40.0
policies = ["linux-default", "smt-energy"]
policy_interval_ms = 500
[[workloads]]
kind = "cpu"
name = "busy{i}"
count = 2
work_s = 100.0
"#;
    let sc = scenario(text);
    let factory = |_: &placer_core::config::Config| -> Result<Vec<Box<dyn AnyPolicy>>, String> {
        Ok(vec![boxed(CrowdLater)])
    };
    let rows = scenario::run(&sc, &factory);
    let (base, pol) = (&rows[0].mean, &rows[1].mean);
    assert_eq!(base.undone, 0);
    // Two busy processes on one CPU halve their CPU share: both pins undone (the two
    // trials interfere: a process's on arm is only worse while the other's is on too, so
    // it takes the second look, at 24 pairs, 29 s after the pins at 4 s).
    assert_eq!(pol.undone, 2, "{pol:?}");
}

#[test]
fn placer_policies_run_through_the_sample_observe_apply_loop() {
    let text = r#"name = "t"
machine = "xeon-5355x2"
duration_s = 3.0
warmup_s = 1.5
policies = ["linux-default", "net-affinity"]
policy_interval_ms = 500
[[variants]]
name = "v"
irq = { eth0 = "0", eth1 = "1" }
# The pins alone (no judge's probe switches among the actions counted).
[config.verify]
enabled = false
[[workloads]]
kind = "rx"
name = "recv{i}"
count = 2
nic = "eth{i}"
rate_mbps = 300.0
"#;
    let sc = scenario(text);
    let factory = |_: &placer_core::config::Config| -> Result<Vec<Box<dyn AnyPolicy>>, String> {
        Ok(vec![boxed(PinToIrq)])
    };
    let rows = scenario::run(&sc, &factory);
    let (base, pol) = (&rows[0].mean, &rows[1].mean);
    assert_eq!(pol.actions, 2, "one pin per receiver");
    assert!((pol.net_gbps - 0.6).abs() < 0.01 && (base.net_gbps - 0.6).abs() < 0.01);
    // Receivers next to their IRQ: no remote-cache extra, so less CPU than the baseline
    // whenever the baseline put one receiver away from its IRQ's cache.
    assert!(pol.cpu_busy_cpus <= base.cpu_busy_cpus + 1e-9);
}

#[test]
fn samples_observe_like_proc() {
    let mut h = host(
        r#"name = "t"
machine = "dell-c6100"
duration_s = 3.0
[[workloads]]
kind = "cpu"
name = "job"
threads = 2
"#,
    );
    let req = SampleRequest {
        threads: true,
        counters: true,
        numa_pages: true,
        sockets: true,
        nics: true,
        irqs: true,
    };
    h.run_until(100_000_000, false);
    let a = h.sample(req).unwrap();
    h.run_until(1_100_000_000, false);
    let b = h.sample(req).unwrap();
    let obs = Observation::new(&a, &b);
    let p = obs.procs.iter().find(|p| &*p.comm == "job").unwrap();
    assert!(
        (p.cpu_share - 2.0).abs() < 0.02,
        "cpu share {}",
        p.cpu_share
    );
    assert_eq!(p.threads.len(), 2);
    let busy: f64 = obs.cpus.iter().map(|c| c.util).sum();
    assert!((busy - 2.0).abs() < 0.05, "busy {busy}");
    let c = p.counters.as_ref().unwrap();
    assert!(c.per_s["instructions"] > 0.0);
    // Seed 003's memory bandwidth: compute-int's 0.1 GB/s per thread, two threads.
    let bw = c.per_s["mem_bandwidth_bytes"];
    assert!((bw - 2.0 * 0.1e9).abs() < 0.05e9, "mem bandwidth {bw}");
    assert!(c.per_s["offcore_requests_buffer_full"] > 0.0 && c.per_s["llc_references"] > 0.0);
    assert!(obs.power_w.unwrap() > 76.0);
    // linux-default spreads two threads over two packages (seed 001 Table 1).
    let cpus: Vec<u32> = p.threads.iter().filter_map(|t| t.last_cpu).collect();
    let t = h.current_topology();
    assert_ne!(
        t.cpu(cpus[0]).unwrap().package,
        t.cpu(cpus[1]).unwrap().package
    );
}

#[test]
fn eas_puts_a_light_task_on_a_little_core_and_saves_energy() {
    // A periodic task using ~10% of an A15: EAS (CAL E) finds the A7 cluster cheaper;
    // linux-default takes the highest-capacity idle CPU (an A15).
    let sc = scenario(
        r#"name = "t"
machine = "odroid-xu4"
duration_s = 3.0
[[workloads]]
kind = "periodic"
name = "light"
period_ms = 10.0
work_ms = 1.0
"#,
    );
    let run = |b: Baseline| {
        let mut h = sc.host(None, b, 1).unwrap();
        h.run_until(1_000_000_000, false);
        h.open_window();
        h.run_until(3_000_000_000, false);
        let t = &h.tasks()[0];
        (h.machine().cpus[t.cpu].little, metrics_of(&h, 0))
    };
    let (little_eas, m_eas) = run(Baseline::Eas);
    let (little_cfs, m_cfs) = run(Baseline::LinuxDefault);
    assert!(little_eas, "eas left the light task on a big core");
    assert!(!little_cfs, "linux-default should prefer the big idle core");
    assert!(
        m_eas.energy_j < m_cfs.energy_j,
        "{} vs {}",
        m_eas.energy_j,
        m_cfs.energy_j
    );
    assert_eq!(m_eas.deadline_misses, 0);
}

#[test]
fn softirq_runs_ahead_of_tasks_and_makes_a_periodic_task_miss() {
    // Seed 000: receive processing in softirq context starves a task on the same CPU, even a
    // real-time one. Three 1 Gbit/s ports' interrupts on CPU 0 of the Xeon (receivers
    // elsewhere) and a periodic task needing 60% of CPU 0: it cannot fit, deadlines are
    // missed; alone it meets them all.
    let text = |irq_cpu: u32| {
        format!(
            r#"name = "t"
machine = "xeon-5355x2"
duration_s = 2.0
[[variants]]
name = "v"
irq = {{ eth0 = "{irq_cpu}", eth1 = "{irq_cpu}", eth2 = "{irq_cpu}" }}
[[workloads]]
kind = "periodic"
name = "rt"
period_ms = 10.0
work_ms = 6.0
rt = true
cpus = [0]
[[workloads]]
kind = "rx"
name = "recv{{i}}"
count = 3
nic = "eth{{i}}"
rate_mbps = 1000.0
cpus = [4, 5, 6, 7]
"#
        )
    };
    let misses = |irq_cpu: u32| {
        let sc = scenario(&text(irq_cpu));
        let mut h = sc
            .host(Some(&sc.variants[0]), Baseline::LinuxDefault, 1)
            .unwrap();
        h.open_window();
        h.run_until(2_000_000_000, false);
        let m = metrics_of(&h, 0);
        (m.deadline_misses, m.periodic_jobs)
    };
    // Interrupts on CPU 3: CPU 0 is the task's alone.
    let (quiet, jobs) = misses(3);
    assert_eq!(quiet, 0);
    assert!(jobs >= 199);
    // 3 ports: softirq = 3 x 125 MB/s x 4 c/B / 2.66 GHz = 56% of CPU 0, leaving 44% < 60%.
    let (loud, _) = misses(0);
    assert!(loud as f64 > 0.9 * jobs as f64, "{loud} misses of {jobs}");
}

#[test]
fn a_saturated_memory_controller_carries_the_fixed_point_bandwidth_not_the_solo_demand() {
    // 14 streaming jobs (8 GB/s alone each, memory-bound fraction 0.8) on one 60 GB/s
    // node of the 2x14 Xeon ask 112 GB/s. The controller's load is the bandwidth they
    // move, which slows them through the loaded-latency curve: the load must settle at
    // the fixed point u = n bw s(u) / cap, below the node's peak, and stay there (no
    // tick-to-tick oscillation on the curve's steep segment). LLC term off.
    let mut h = host(
        r#"name = "t"
machine = "xeon-e5-2697x2"
duration_s = 10.0
[params.contention]
llc_scale = 0.0
[[workloads]]
kind = "cpu"
name = "s"
class = "streaming"
count = 14
cpus = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]
mem_node = 0
"#,
    );
    assert!((0..14).all(|c| h.machine().cpus[c].node == h.machine().node_ids[0]));
    let streaming = h.params().archetypes["streaming"].clone();
    let mf = machine::mem_fraction(h.params(), &streaming);
    let (bw, cap) = (streaming.bw_gbps, h.params().contention.node_bw_gbps);
    // Fixed point by bisection: moved(u) - u * cap is decreasing in u.
    let speed = |u: f64| 1.0 / (1.0 + mf * (machine::loaded_latency(h.params(), u) - 1.0));
    let (mut lo, mut hi) = (0.0f64, 2.0f64);
    for _ in 0..60 {
        let mid = (lo + hi) / 2.0;
        if 14.0 * bw * speed(mid) > mid * cap {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let u_star = (lo + hi) / 2.0;
    assert!(u_star < 1.0, "fixed point {u_star}");
    let moved = |h: &SimHost| h.tasks().iter().map(|t| t.mem_bytes).sum::<f64>();
    h.run_until(1_000_000_000, false);
    let mut rates = Vec::new();
    for k in 3..=6u64 {
        let before = moved(&h);
        h.run_until(k * 500_000_000, false);
        rates.push((moved(&h) - before) / 0.5 / 1e9);
    }
    for r in &rates {
        assert!(*r <= cap, "moved {r:.1} GB/s above the node's {cap} GB/s");
        assert!(
            (r / (u_star * cap) - 1.0).abs() < 0.02,
            "moved {r:.2} GB/s, fixed point {:.2} GB/s (rates {rates:?})",
            u_star * cap
        );
    }
}

/// One receiver of a flow at `rate_mbps` whose interrupts go to CPU 0 of `machine`, pinned
/// to `cpu`; `params` overrides. Returns the machine's busy CPUs (softirq included) over
/// one simulated second, and the host.
fn receiver_on(machine: &str, cpu: u32, rate_mbps: f64, params: &str) -> (f64, SimHost) {
    let sc = scenario(&format!(
        r#"name = "t"
machine = "{machine}"
duration_s = 1.0
{params}
[[variants]]
name = "v"
irq = {{ eth0 = "0" }}
[[workloads]]
kind = "rx"
name = "recv"
nic = "eth0"
rate_mbps = {rate_mbps}
cpus = [{cpu}]
"#
    ));
    let mut h = sc
        .host(Some(&sc.variants[0]), Baseline::LinuxDefault, 1)
        .unwrap();
    h.run_until(200_000_000, false);
    h.open_window();
    h.run_until(1_200_000_000, false);
    let m = metrics_of(&h, 0);
    assert!(
        (m.net_gbps - rate_mbps / 1000.0).abs() < 0.01,
        "throughput {}",
        m.net_gbps
    );
    (m.cpu_busy_cpus, h)
}

/// Private L2 per core, an L3 per package, SMT: every cache distance occurs.
const HP: &str = "hp-dk388p";

#[test]
fn a_blocked_receiver_uses_no_cpu_and_a_reader_that_keeps_up_sleeps() {
    // No data: the reader blocks in recv() from the start and is never runnable.
    let (busy, h) = receiver_on(HP, 2, 0.0, "");
    let reader = &h.tasks()[h.procs()[0].threads[0]];
    assert_eq!(busy, 0.0);
    assert!(!reader.runnable);
    assert_eq!(reader.utime_ns + reader.stime_ns, 0.0);
    // A reader that keeps up with 500 Mbit/s empties its buffer each tick: asleep between
    // batches, busy a small share of its CPU.
    let (_, h) = receiver_on(HP, 2, 500.0, "");
    assert!(h.flows()[0].reader_slept);
    let reader = &h.tasks()[h.procs()[0].threads[0]];
    let share = reader.stime_ns / 1.2e9;
    assert!(share > 0.0 && share < 0.5, "reader share {share}");
}

#[test]
fn a_wake_up_costs_by_cache_distance_between_the_receive_cpu_and_the_reader() {
    let probe = receiver_on(HP, 0, 500.0, "").1;
    let m = &probe.machine();
    let sibling = m.cpus[0].siblings[0];
    let same_pkg_other_core = (1..m.cpus.len())
        .find(|&c| m.cpus[c].package == 0 && m.cpus[c].core != m.cpus[0].core)
        .unwrap();
    let other_pkg = (1..m.cpus.len()).find(|&c| m.cpus[c].package != 0).unwrap();
    use placer_sim::machine::CacheDistance as D;
    assert_eq!(m.cache_distance(0, 0), D::SameCpu);
    assert_eq!(m.cache_distance(0, sibling), D::SharedL2);
    assert_eq!(m.cache_distance(0, same_pkg_other_core), D::SharedLlc);
    assert_eq!(m.cache_distance(0, other_pkg), D::None);
    let id = |c: usize| m.cpus[c].id;
    let llc_extra = "[params.net]\nrx_llc_only_extra = 0.1";
    let busy = |c: usize| receiver_on(HP, id(c), 500.0, llc_extra).0;
    let (same, l2, llc, far) = (
        busy(0),
        busy(sibling),
        busy(same_pkg_other_core),
        busy(other_pkg),
    );
    assert!(
        same < l2 && l2 < llc && llc < far,
        "{same} {l2} {llc} {far}"
    );
    // Same CPU to its SMT sibling: the wake-up IPIs alone, one per receive batch.
    let bytes_per_s = 500e6 / 8.0;
    let wakeups_per_s = bytes_per_s / (1448.0 * 8.0);
    let ghz = m.cpus[0].max_khz as f64 * 1e3;
    let ipi = (l2 - same) * ghz / wakeups_per_s;
    assert!((ipi - 1600.0).abs() < 50.0, "IPI {ipi} cycles");
    // Across packages the IPI costs more than within one (no cache term).
    let no_cache = "[params.net]\nrx_remote_cache_extra = 0.0";
    let near = receiver_on(HP, id(same_pkg_other_core), 500.0, no_cache).0;
    let across = receiver_on(HP, id(other_pkg), 500.0, no_cache).0;
    assert!(across > near, "{across} vs {near}");
    // Without IPIs or cache terms every placement costs the same.
    let flat = "[params.net]\nwake_ipi_cycles = 0.0\nwake_ipi_remote_package_cycles = 0.0\nrx_remote_cache_extra = 0.0";
    let a = receiver_on(HP, id(0), 500.0, flat).0;
    let b = receiver_on(HP, id(other_pkg), 500.0, flat).0;
    assert!((a - b).abs() < 1e-6, "{a} vs {b}");
}

#[test]
fn the_same_co_runner_harms_less_on_a_larger_llc() {
    // CPUs 0 and 1 share one L3 on both: 8 MB on the X5570 (the reference size the
    // pressures are stated for), 35 MB on the E5-2697 v3.
    let f = |s: f64, p: f64| 1.0 + 2.0 * s * (1.0 - (-p).exp());
    let small = corun_on("xeon-x5570x2", "cache-sensitive", "streaming");
    let large = corun_on("xeon-e5-2697x2", "cache-sensitive", "streaming");
    assert!((small - f(0.9, 0.9)).abs() < 0.01, "8 MB: {small}");
    assert!(
        (large - f(0.9, 0.9 * 8.0 / 35.0)).abs() < 0.01,
        "35 MB: {large}"
    );
    assert!(large < small);
}
