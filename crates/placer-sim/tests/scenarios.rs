//! Scenario files, the oracle, the report and the plot.

use placer_core::policy_kind::PolicyKind;
use placer_sim::oracle;
use placer_sim::report::Report;
use placer_sim::scenario::{self, OracleSpec, Scenario, BUILTIN};

#[test]
fn every_builtin_scenario_parses_and_validates() {
    assert!(BUILTIN.iter().any(|(n, _)| *n == "seed-002"));
    for (name, text) in BUILTIN {
        let s = Scenario::from_toml(name, text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(&s.name, name, "file name and `name` differ");
        assert!(!s.description.is_empty(), "{name}: no description");
    }
}

#[test]
fn scenario_files_reject_unknown_keys_and_bad_values() {
    let ok = "name = \"t\"\nmachine = \"dell-c6100\"\nduration_s = 1.0\n\
              [[workloads]]\nkind = \"cpu\"\nname = \"j\"\n";
    assert!(Scenario::from_toml("t", ok).is_ok());
    let typo = ok.replace("duration_s", "duration");
    assert!(Scenario::from_toml("t", &typo).is_err());
    let bad_param = format!("{ok}[params.power]\nidle_w = 1.0\n");
    let e = Scenario::from_toml("t", &bad_param)
        .unwrap_err()
        .to_string();
    assert!(e.contains("params.power.idle_w"), "{e}");
    // `machine` and `policies` are typed at load; an error names the bad value.
    let policies = |p: &str| {
        ok.replace(
            "duration_s = 1.0",
            &format!("duration_s = 1.0\npolicies = [{p}]"),
        )
    };
    for (list, bad) in [
        ("\"nope\"", "nope"),
        ("\"eas\", \"eas+net-afinity\"", "net-afinity"),
    ] {
        let e = Scenario::from_toml("t", &policies(list))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("{bad:?}")), "{e}");
    }
    let sc = Scenario::from_toml("t", &policies("\"eas+energy-qos\", \"net-affinity\"")).unwrap();
    assert_eq!(
        sc.policies[0].baseline(),
        placer_sim::baselines::Baseline::Eas
    );
    assert_eq!(sc.policies[0].placer, vec![PolicyKind::EnergyQos]);
    assert_eq!(
        sc.policies[1].baseline(),
        placer_sim::baselines::Baseline::LinuxDefault
    );
    // Printed (reports, JSON) as written.
    let names: Vec<String> = sc.policies.iter().map(|p| p.to_string()).collect();
    assert_eq!(names, ["eas+energy-qos", "net-affinity"]);
    assert_eq!(
        serde_json::to_string(&sc.policies).unwrap(),
        r#"["eas+energy-qos","net-affinity"]"#
    );
    let bad_class = format!("{ok}class = \"nope\"\n");
    assert!(Scenario::from_toml("t", &bad_class).is_err());
    for bad in ["no-such-machine", "pkg:0 core:2"] {
        let e = Scenario::from_toml("t", &ok.replace("dell-c6100", bad))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("{bad:?}")), "{e}");
    }
    let sc = Scenario::from_toml("t", &ok.replace("dell-c6100", "pkg:1 core:2 pu:2")).unwrap();
    assert_eq!(sc.machine.builtin(), None);
    assert_eq!(sc.machine.to_string(), "pkg:1 core:2 pu:2");
    // Parameters a report shows or sweeps must exist.
    let show = |k: &str| {
        ok.replace(
            "duration_s = 1.0",
            &format!("duration_s = 1.0\nshow_params = [\"{k}\"]"),
        )
    };
    assert!(Scenario::from_toml("t", &show("power.node_idle_w")).is_ok());
    let e = Scenario::from_toml("t", &show("power.idle"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("power.idle"), "{e}");
    let sweep = format!(
        "{ok}[sensitivity]\nparam = \"power.nope\"\nvalues = [1.0]\nmetrics = [\"energy_saving\"]\n"
    );
    assert!(Scenario::from_toml("t", &sweep).is_err());
}

#[test]
fn oracle_finds_the_best_static_placement_of_a_small_case() {
    // Two endless compute jobs on one package of 2 cores x 2 threads: the best placement
    // puts them on different cores (work rate ~2), the worst on one CPU (1).
    let sc = Scenario::from_toml(
        "t",
        r#"name = "t"
machine = "pkg:1 core:2 pu:2"
duration_s = 1.0
policies = ["linux-default"]
[[workloads]]
kind = "cpu"
name = "a"
[[workloads]]
kind = "cpu"
name = "b"
"#,
    )
    .unwrap();
    let spec = OracleSpec {
        duration_s: 0.2,
        warmup_s: 0.05,
        max_placements: 100,
    };
    let r = oracle::search(&sc, None, &spec);
    assert!(r.skipped.is_none(), "{:?}", r.skipped);
    // 4 CPUs each, different workload entries: 16 placements.
    assert_eq!((r.placements, r.evaluated), (16, 16));
    let best = r.best_value.unwrap();
    assert!(best > 1.95 && best <= 2.0, "best {best}");
    assert!((r.worst_value.unwrap() - 1.0).abs() < 0.01);
    let topo = placer_core::machines::machine("pkg:1 core:2 pu:2").unwrap();
    let cores: Vec<_> = r
        .best
        .iter()
        .map(|(_, _, c)| topo.cpu(*c).unwrap().core)
        .collect();
    assert_ne!(
        cores[0], cores[1],
        "best placement shares a core: {:?}",
        r.best
    );
    // Over the budget: skipped, with the count.
    let tight = OracleSpec {
        max_placements: 10,
        ..spec
    };
    let r = oracle::search(&sc, None, &tight);
    assert!(r
        .skipped
        .as_deref()
        .is_some_and(|s| s.contains("16 placements")));
}

#[test]
fn report_puts_paper_figures_beside_simulated_ones_and_plots() {
    let mut sc = Scenario::load("seed-002").unwrap();
    sc.duration_s = 1.0;
    sc.warmup_s = 0.3;
    sc.seeds = vec![1];
    sc.policies = vec!["linux-default".parse().unwrap()];
    // Compare the baseline with itself: every paired figure is exactly 0%.
    for p in &mut sc.paper {
        p.policy = "linux-default".into();
    }
    let rows = scenario::run(&sc, &scenario::default_factory);
    let report = Report::new(&sc, rows, Vec::new());
    assert_eq!(report.paper.len(), sc.paper.len());
    for p in &report.paper {
        assert_eq!(p.simulated_pct, Some(0.0), "{p:?}");
    }
    let text = report.to_text();
    assert!(
        text.contains("+4..+21") && text.contains("linux-default"),
        "{text}"
    );
    let json = serde_json::to_string(&report).unwrap();
    assert!(json.contains("\"paper_low_pct\":4.0"));
    let tmp = placer_testkit::TempDir::new("sim-plot");
    let dir = tmp.path();
    let svg = dir.join("r.svg");
    placer_sim::plot::draw(&report, &svg).unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("<svg") && text.contains("linux-default"));
    let png = dir.join("r.png");
    placer_sim::plot::draw(&report, &png).unwrap();
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
    assert!(placer_sim::plot::draw(&report, &dir.join("r.gif")).is_err());
}

/// Issue 18: every built-in scenario's plot is readable: a legend naming the policies,
/// titles with units, and no two x labels drawn over each other (boxes measured with the
/// font). Each scenario runs shortened (1 seed, 2 simulated seconds): the layout, not the
/// numbers, is under test.
#[test]
fn every_scenario_plot_is_readable() {
    let tmp = placer_testkit::TempDir::new("sim-plots");
    let dir = tmp.path();
    for (name, _) in placer_sim::scenario::BUILTIN {
        let mut sc = placer_sim::scenario::Scenario::load(name).unwrap();
        sc.seeds = vec![1];
        sc.duration_s = sc.duration_s.min(2.0);
        sc.warmup_s = sc.warmup_s.min(sc.duration_s / 4.0);
        let rows = placer_sim::scenario::run(&sc, &placer_sim::scenario::default_factory);
        let report = placer_sim::report::Report::new(&sc, rows, Vec::new());
        let png = dir.join(format!("{name}.png"));
        let s = placer_sim::plot::draw(&report, &png).unwrap();
        assert!(!s.legend.is_empty(), "{name}: no legend");
        assert!(
            s.titles.iter().all(|t| t.contains('(')),
            "{name}: a title without its unit: {:?}",
            s.titles
        );
        assert!(!s.label_boxes.is_empty(), "{name}: no labels");
        assert_eq!(
            s.overlapping_labels(),
            Vec::<(usize, usize)>::new(),
            "{name}: labels overlap: {:?}",
            s.label_boxes
        );
    }
}

/// Issue 51: the simulator reads what a user measured. A fit of `bench contention --app`
/// replaces the named archetypes' pressure and sensitivity (an unknown name is refused), and
/// a `power calibrate` table reaches the energy-qos policy's config.
#[test]
fn measured_harm_and_power_table_reach_the_scenario() {
    let mut sc = Scenario::load("seed-003-6").unwrap();
    sc.set_archetype_harm(&[("lbm".into(), 0.123, 0.456)])
        .unwrap();
    let (_, p) = sc.topology_and_params(None).unwrap();
    let a = p.archetype("lbm").unwrap();
    assert_eq!((a.pressure, a.sensitivity), (0.123, 0.456));
    // The others keep the scenario's estimates.
    assert_eq!(p.archetype("omnetpp").unwrap().sensitivity, 0.9);
    assert!(sc
        .set_archetype_harm(&[("no-such-app".into(), 0.1, 0.1)])
        .is_err());
    // The LLC the matrix was measured on becomes the reference size.
    assert_eq!(p.contention.llc_reference_bytes, 8.0 * 1024.0 * 1024.0);
    sc.set_llc_reference_bytes(12 << 20).unwrap();
    let (_, p) = sc.topology_and_params(None).unwrap();
    assert_eq!(p.contention.llc_reference_bytes, f64::from(12u32 << 20));
    assert_eq!(p.archetype("lbm").unwrap().pressure, 0.123);

    let mut sc = Scenario::load("seed-000").unwrap();
    assert!(sc
        .placer_config()
        .unwrap()
        .energy_qos
        .power_table_model
        .is_none());
    let topo = sc.machine.topology();
    let t = placer_core::power_table::StatePowerTable::for_topology(&topo);
    sc.power_table_model = Some(t.clone());
    assert_eq!(
        sc.placer_config().unwrap().energy_qos.power_table_model,
        Some(t)
    );
}

/// Issue 51: with a measured power table the simulated watts are the table's. The same run
/// with every watt of the table doubled draws twice the power (energy-qos chooses the same
/// states: doubling every state's watts keeps their order), where the model's watts would
/// not move at all; a table without rows for one of the machine's clusters is refused.
#[test]
fn a_measured_power_table_sets_the_simulated_watts() {
    let mut sc = Scenario::load("seed-000").unwrap();
    sc.seeds.truncate(1);
    let t = placer_core::power_table::StatePowerTable::for_topology(&sc.machine.topology());
    let mut doubled = t.clone();
    doubled.base_w *= 2.0;
    for p in doubled.domains.iter_mut().flat_map(|d| d.points.iter_mut()) {
        p.busy_cpu_w *= 2.0;
        p.cluster_active_w *= 2.0;
    }
    let mut power_w = |t: &placer_core::power_table::StatePowerTable| -> Vec<f64> {
        sc.power_table_model = Some(t.clone());
        scenario::run(&sc, &scenario::default_factory)
            .iter()
            .map(|r| r.mean.power_w)
            .collect()
    };
    let (once, twice) = (power_w(&t), power_w(&doubled));
    assert!(!once.is_empty());
    for (a, b) in once.iter().zip(&twice) {
        assert!(
            *a > 0.0 && (b / a - 2.0).abs() < 1e-9,
            "{a} W, doubled {b} W"
        );
    }
    let mut short = t.clone();
    short.domains.pop();
    sc.power_table_model = Some(short);
    let e = sc.topology_and_params(None).unwrap_err().to_string();
    assert!(e.contains("has no rows for cluster"), "{e}");
}
