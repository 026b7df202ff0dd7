//! The QoS-normalised report metric: `qos_satisfaction` is the mean over workloads with a
//! QoS target of min(achieved / target, 1), and `qos_per_watt` is that per watt.

use placer_sim::report::Report;
use placer_sim::scenario::{self, Metrics, RunResult, Scenario};

/// One receiver offered `rate_mbps` with a target of `target_bps`, and one 2-thread compute
/// job pinned on one big core with a target of `share` of its solo maximum (2 work/s).
fn tiny(rate_mbps: f64, target_bps: f64, share: f64) -> Scenario {
    let text = format!(
        "name = \"qos-tiny\"\nmachine = \"odroid-xu4\"\nduration_s = 3.0\nwarmup_s = 1.0\n\
         seeds = [1]\npolicies = [\"linux-default\"]\nobjective = \"qos_per_watt\"\n\
         [[workloads]]\nkind = \"rx\"\nname = \"dl\"\nnic = \"eth0\"\nrate_mbps = {rate_mbps:?}\n\
         qos_target_bytes_per_s = {target_bps:?}\n\
         [[workloads]]\nkind = \"cpu\"\nname = \"job\"\nthreads = 2\ncpus = \"4\"\n\
         qos_target_work_share = {share:?}\n"
    );
    Scenario::from_toml("qos-tiny", &text).unwrap_or_else(|e| panic!("{e}"))
}

fn run(sc: &Scenario) -> RunResult {
    scenario::run_one(
        sc,
        None,
        &"linux-default".parse().unwrap(),
        1,
        &scenario::default_factory,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn sat(r: &RunResult, name: &str) -> f64 {
    r.procs
        .iter()
        .find(|p| p.name == name)
        .and_then(|p| p.qos_satisfaction)
        .unwrap_or_else(|| panic!("{name}: no qos_satisfaction"))
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn receiver_at_half_its_target_is_half_satisfied() {
    // 40 Mbit/s offered = 5 MB/s achieved against a 10 MB/s target.
    let r = run(&tiny(40.0, 10e6, 0.25));
    let dl = sat(&r, "dl");
    assert!(close(dl, 0.5, 0.03), "receiver satisfaction {dl}");
    // The job gets one core of its 2-thread solo maximum, 1 work/s of 2: above a 25%
    // target, so capped at 1.
    assert_eq!(sat(&r, "job"), 1.0);
    let m = &r.metrics;
    let q = m.qos_satisfaction.expect("satisfaction");
    assert!(close(q, (dl + 1.0) / 2.0, 1e-12), "mean {q}");
    let qpw = m.qos_per_watt.expect("qos_per_watt");
    assert!(m.power_w > 0.0);
    assert!(
        close(qpw, q / m.power_w, 1e-12),
        "{qpw} vs {q} / {}",
        m.power_w
    );
    assert!(m.qos_per_dyn_watt.expect("dyn") > qpw);
}

#[test]
fn satisfaction_falls_below_one_when_targets_are_missed() {
    // Both met: satisfaction 1.
    let met = run(&tiny(40.0, 4e6, 0.25));
    assert_eq!(met.metrics.qos_satisfaction, Some(1.0));
    // The job pinned on one core reaches about half of its solo maximum (2 work/s), so a
    // full-share target is half met; the receiver misses its target by 4x.
    let missed = run(&tiny(40.0, 20e6, 1.0));
    let job = sat(&missed, "job");
    assert!(job > 0.3 && job < 0.55, "job satisfaction {job}");
    let dl = sat(&missed, "dl");
    assert!(close(dl, 0.25, 0.02), "receiver satisfaction {dl}");
    let q = missed.metrics.qos_satisfaction.unwrap();
    assert!(q < 0.5, "{q}");
    // Paper rows on qos_per_watt compare the two, paired by seed.
    let pct = scenario::compare("qos_per_watt", &missed.metrics, &met.metrics).unwrap();
    assert!(pct < -40.0, "{pct}");
}

#[test]
fn no_target_means_no_qos_metric_and_no_comparison() {
    let text = "name = \"t\"\nmachine = \"odroid-xu4\"\nduration_s = 2.0\nwarmup_s = 1.0\n\
                seeds = [1]\n[[workloads]]\nkind = \"cpu\"\nname = \"j\"\n";
    let sc = Scenario::from_toml("t", text).unwrap();
    let r = run(&sc);
    assert_eq!(r.metrics.qos_satisfaction, None);
    assert_eq!(r.metrics.qos_per_watt, None);
    assert_eq!(
        scenario::compare("qos_per_watt", &r.metrics, &r.metrics),
        None
    );
    assert_eq!(
        scenario::compare("qos_per_watt", &r.metrics, &Metrics::default()),
        None
    );
}

#[test]
fn targets_are_checked_by_kind_and_range() {
    let base = "name = \"t\"\nmachine = \"odroid-xu4\"\nduration_s = 1.0\n[[workloads]]\n";
    let cpu = format!("{base}kind = \"cpu\"\nname = \"j\"\n");
    let rx = format!("{base}kind = \"rx\"\nname = \"r\"\nnic = \"eth0\"\n");
    assert!(Scenario::from_toml("t", &format!("{cpu}qos_target_work_share = 0.5\n")).is_ok());
    assert!(Scenario::from_toml("t", &format!("{cpu}qos_target_work_share = 1.5\n")).is_err());
    assert!(Scenario::from_toml("t", &format!("{cpu}qos_target_bytes_per_s = 1.0\n")).is_err());
    assert!(Scenario::from_toml("t", &format!("{rx}qos_target_bytes_per_s = 5e6\n")).is_ok());
    assert!(Scenario::from_toml("t", &format!("{rx}qos_target_bytes_per_s = 0.0\n")).is_err());
    assert!(Scenario::from_toml("t", &format!("{rx}qos_target_work_share = 0.5\n")).is_err());
}

#[test]
fn seed000_paper_rows_use_qos_per_watt_and_keep_raw_perf_per_watt() {
    for name in ["seed-000", "seed-000-mix50", "seed-000-mix75"] {
        let sc = Scenario::load(name).unwrap();
        let metrics: Vec<&str> = sc.paper.iter().map(|p| p.metric.as_str()).collect();
        assert_eq!(
            metrics,
            ["qos_per_watt", "perf_per_watt", "qos_per_dyn_watt"],
            "{name}"
        );
        // A short run: the report fills both rows.
        let sc = Scenario {
            duration_s: 4.0,
            warmup_s: 3.0,
            seeds: vec![1],
            ..sc
        };
        let rows = scenario::run(&sc, &scenario::default_factory);
        let rep = Report::new(&sc, rows, Vec::new());
        for p in &rep.paper {
            assert!(p.simulated_pct.is_some(), "{name} {}", p.metric);
        }
        assert!(rep.to_text().contains("QoS/W"));
    }
}
