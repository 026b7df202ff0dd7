//! Seed 000 (EANeM) in the simulator: energy-qos on top of eas limits each FTP-like app at
//! its target and gives the compute app its target share, which eas alone does not, at less
//! power for the FTP-only case.

use placer_sim::scenario::{self, RunResult, Scenario};

const TARGET_BPS: f64 = 5e6;

fn run(name: &str, policy: &str) -> RunResult {
    let sc = Scenario::load(name).unwrap_or_else(|e| panic!("{e}"));
    let sc = Scenario {
        duration_s: 6.0,
        warmup_s: 3.0,
        ..sc
    };
    scenario::run_one(
        &sc,
        None,
        &policy.parse().unwrap(),
        1,
        &scenario::default_factory,
    )
    .unwrap_or_else(|e| panic!("{policy}: {e}"))
}

fn rx_rates(r: &RunResult) -> Vec<f64> {
    r.procs
        .iter()
        .filter(|p| p.kind == "rx")
        .map(|p| p.rx_bytes / r.metrics.window_s)
        .collect()
}

#[test]
fn ftp_apps_limited_at_their_target_for_less_power() {
    let eas = run("seed-000", "eas");
    let eqos = run("seed-000", "eas+energy-qos");
    assert!(eqos.metrics.actions > 0);
    let rates = rx_rates(&eqos);
    assert_eq!(rates.len(), 4);
    for r in &rates {
        // Limited at target x (1 + 5% headroom).
        assert!(*r >= TARGET_BPS && *r <= 1.10 * TARGET_BPS, "rate {r}");
    }
    // Unlimited, eas gives each app more than it needs (a quarter of the XU4's ~280 Mbit/s
    // USB-attached port, 1.75x the target), at more power.
    assert!(rx_rates(&eas).iter().all(|r| *r > 1.5 * TARGET_BPS));
    assert!(
        eqos.metrics.power_w < eas.metrics.power_w,
        "{} W vs eas {} W",
        eqos.metrics.power_w,
        eas.metrics.power_w
    );
}

#[test]
fn compute_app_gets_its_75_percent_target_only_with_energy_qos() {
    let share = |r: &RunResult| {
        let p = r.procs.iter().find(|p| p.kind == "cpu").expect("parsec");
        p.work_done_s / r.metrics.window_s / 4.0
    };
    let eas = run("seed-000-mix75", "eas");
    let eqos = run("seed-000-mix75", "eas+energy-qos");
    // Unlimited downloads starve the compute app under eas (the paper's problem).
    assert!(share(&eas) < 0.70, "eas share {}", share(&eas));
    assert!(
        share(&eqos) >= 0.95 * 0.75,
        "energy-qos share {}",
        share(&eqos)
    );
    for r in rx_rates(&eqos) {
        assert!(r >= TARGET_BPS, "rate {r}");
    }
}

/// Every state of the policy's model for the scenario's apps (brute force: a cluster per
/// app, a frequency per cluster), with its evaluation.
fn feasible_by_brute_force(sc: &Scenario) -> bool {
    use placer_core::policies::energy_qos::{evaluate, AppDemand, Machine, State, Target};
    use placer_core::power_table::StatePowerTable;
    let topo = sc.machine.topology();
    let m = Machine::for_topology(&topo, StatePowerTable::for_topology(&topo));
    let cfg = sc.placer_config().unwrap().energy_qos;
    let apps: Vec<AppDemand> = cfg
        .apps
        .iter()
        .map(|a| AppDemand {
            app_ns_per_byte: None,
            name: a.name.clone(),
            target: match (a.target_bytes_per_s, a.target_perf_share) {
                (Some(b), _) => Target::Bandwidth {
                    bytes_per_s: b as f64,
                    segment_bytes: cfg.default_segment_bytes,
                    receive: true,
                },
                (None, Some(share)) => Target::PerfShare {
                    share: (share * (1.0 + cfg.perf_headroom)).min(1.0),
                    threads: a.threads.unwrap_or(4),
                },
                _ => panic!("no real-time apps in seed 000"),
            },
        })
        .collect();
    let nc = m.clusters.len();
    let n_assign = nc.pow(apps.len() as u32);
    let n_freq: usize = m.clusters.iter().map(|c| c.freqs_khz.len()).product();
    for a in 0..n_assign {
        let cluster_of_app: Vec<usize> =
            (0..apps.len()).map(|i| a / nc.pow(i as u32) % nc).collect();
        for f in 0..n_freq {
            let mut rest = f;
            let freq_khz: Vec<u64> = m
                .clusters
                .iter()
                .map(|c| {
                    let k = c.freqs_khz[rest % c.freqs_khz.len()];
                    rest /= c.freqs_khz.len();
                    k
                })
                .collect();
            let st = State {
                freq_khz,
                cluster_of_app: cluster_of_app.clone(),
            };
            if evaluate(&cfg, &m, &apps, &st).misses.is_empty() {
                return true;
            }
        }
    }
    false
}

/// With learned costs, every target is met (QoS 1.0) in every run of every seed-000
/// scenario, each of which has a feasible state on the policy's own model.
#[test]
fn qos_is_met_wherever_a_feasible_state_exists() {
    for name in ["seed-000", "seed-000-mix50", "seed-000-mix75"] {
        let sc = Scenario::load(name).unwrap();
        assert!(sc.placer_config().unwrap().energy_qos.learn_costs);
        assert!(feasible_by_brute_force(&sc), "{name}: no feasible state");
        for seed in sc.seeds.clone() {
            let r = scenario::run_one(
                &sc,
                None,
                &"eas+energy-qos".parse().unwrap(),
                seed,
                &scenario::default_factory,
            )
            .unwrap();
            let q = r.metrics.qos_satisfaction.expect("targets declared");
            assert!(q >= 0.999, "{name} seed {seed}: QoS met {q}");
        }
    }
}

/// The report gives both readings of QoS met per watt, the figures they rest on, and a
/// sensitivity row per static-power value.
#[test]
fn the_report_shows_both_readings_and_their_sensitivity_to_static_power() {
    let sc = Scenario::load("seed-000").unwrap();
    let sc = Scenario {
        duration_s: 5.0,
        seeds: vec![1],
        ..sc
    };
    let rows = scenario::run(&sc, &scenario::default_factory);
    let sens = scenario::sensitivity(&sc, &scenario::default_factory).unwrap();
    assert_eq!(sens.len(), 3);
    // More static power makes the above-idle reading smaller (the policy saves dynamic
    // power; a fixed cost per active cluster dilutes it).
    let dyn_pct = |i: usize| {
        sens[i]
            .comparisons
            .iter()
            .find(|c| c.0 == "qos_per_dyn_watt")
            .and_then(|c| c.3)
            .unwrap()
    };
    assert!(dyn_pct(0) > dyn_pct(2), "{sens:?}");
    let text = placer_sim::report::Report::new(&sc, rows, Vec::new())
        .with_sensitivity(sens)
        .to_text();
    for want in [
        "qos_per_watt",
        "qos_per_dyn_watt",
        "power.node_idle_w = 3.89",
        "power.cluster_leak_a = 0.0856",
        "sensitivity to power.cluster_leak_a",
    ] {
        assert!(text.contains(want), "no {want:?} in\n{text}");
    }
}

/// `sc` with the judge on or off for energy-qos.
fn with_judge(sc: &Scenario, on: bool) -> Scenario {
    let mut sc = sc.clone();
    let mut cfg = sc
        .config
        .take()
        .unwrap_or(toml::Value::Table(Default::default()));
    let table = |v: &mut toml::Value, k: &str| -> toml::Value {
        let t = v.as_table_mut().expect("a table");
        t.entry(k)
            .or_insert_with(|| toml::Value::Table(Default::default()))
            .clone()
    };
    let mut verify = table(&mut cfg, "verify");
    let mut policy = table(&mut verify, "policy");
    let mut eq = table(&mut policy, "energy-qos");
    eq.as_table_mut()
        .unwrap()
        .insert("verify".into(), toml::Value::Boolean(on));
    policy
        .as_table_mut()
        .unwrap()
        .insert("energy-qos".into(), eq);
    verify
        .as_table_mut()
        .unwrap()
        .insert("policy".into(), policy);
    cfg.as_table_mut().unwrap().insert("verify".into(), verify);
    sc.config = Some(cfg);
    sc
}

/// Issue 44 item 2 (verifier V10): with the judge on, energy-qos's QoS is met as with it
/// off, within 0.01 of the mean satisfaction (each trial may cost a QoS app one off
/// interval below its target before probing stops), in every seed-000 scenario over
/// seeds 1-6; and the judge did probe (its switches are applied actions), so this is not
/// the judge doing nothing.
#[test]
fn the_judge_on_keeps_energy_qos_qos_as_with_it_off() {
    let (mut actions_off, mut actions_on) = (0, 0);
    for name in ["seed-000", "seed-000-mix50", "seed-000-mix75"] {
        let sc = Scenario::load(name).unwrap();
        for seed in 1..=6 {
            let qos = |on: bool| {
                let r = scenario::run_one(
                    &with_judge(&sc, on),
                    None,
                    &"eas+energy-qos".parse().unwrap(),
                    seed,
                    &scenario::default_factory,
                )
                .unwrap();
                (r.metrics.qos_satisfaction.unwrap(), r.metrics.actions)
            };
            let ((off, a_off), (on, a_on)) = (qos(false), qos(true));
            eprintln!(
                "{name} seed {seed}: QoS met {off:.4} judge off ({a_off} actions), {on:.4} on ({a_on})"
            );
            assert!(
                on >= off - 0.01,
                "{name} seed {seed}: {on} with the judge, {off} without"
            );
            actions_off += a_off;
            actions_on += a_on;
        }
    }
    assert!(
        actions_on > actions_off,
        "the judge probed: {actions_on} vs {actions_off}"
    );
}
