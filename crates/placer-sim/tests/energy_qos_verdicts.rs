//! energy-qos's pins are judged (issue 32; by paired probing since issue 44): in
//! scenarios/energy-qos-replan.toml a re-plan moves a QoS app onto the LITTLE cluster, where
//! background jobs the policy's model does not see take CPU time from it: the probe (the
//! app's own affinity against the pin) sees it, and the pin is undone. With the background
//! jobs on the big CPUs instead, the pin is no worse than the kernel's own placement (which
//! also keeps the app off the busy CPUs): never undone; without them it changes nothing.

use placer_sim::scenario::{self, Metrics, Scenario};

const SCENARIO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../scenarios/energy-qos-replan.toml"
);

/// The scenario's energy-qos run with the background jobs confined to `background` (None:
/// no background jobs).
fn run(background: Option<&str>) -> Metrics {
    let mut sc = Scenario::load(SCENARIO).unwrap_or_else(|e| panic!("{e}"));
    let at = sc
        .workloads
        .iter()
        .position(|w| w.name.starts_with("background"))
        .expect("the background jobs");
    match background {
        Some(cpus) => sc.workloads[at].cpus = Some(placer_core::CpuSet::parse_list(cpus).unwrap()),
        None => {
            sc.workloads.remove(at);
        }
    }
    scenario::run_one(
        &sc,
        None,
        &"eas+energy-qos".parse().unwrap(),
        1,
        &scenario::default_factory,
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .metrics
}

#[test]
fn an_energy_qos_pin_beside_unseen_background_work_is_undone() {
    // The scenario as written: background jobs on the LITTLE CPUs.
    let m = run(Some("0-3"));
    assert_eq!((m.kept, m.undone), (0, 1), "{m:?}");
}

#[test]
fn the_same_pin_away_from_background_work_is_not_undone() {
    let m = run(Some("4-7"));
    assert!(m.actions > 0, "{m:?}");
    assert_eq!(m.undone, 0, "{m:?}");
}

#[test]
fn the_same_pin_on_an_idle_machine_is_neither() {
    // The re-plan happens and is judged, but a CPU-bound app alone on either cluster has
    // a whole CPU: its CPU share does not move.
    let m = run(None);
    assert!(m.actions > 0, "{m:?}");
    assert_eq!((m.kept, m.undone), (0, 0), "{m:?}");
}
