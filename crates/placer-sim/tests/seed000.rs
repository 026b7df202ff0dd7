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
    scenario::run_one(&sc, None, policy, 1, &scenario::default_factory)
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
    // Unlimited, eas gives each app far more than it needs, at more power.
    assert!(rx_rates(&eas).iter().all(|r| *r > 2.0 * TARGET_BPS));
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
