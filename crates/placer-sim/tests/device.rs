//! Scenario device-16c-loopback: the simulator against the real multi-core A/B of
//! net-affinity (a 16-core machine, loopback with RPS on CPU 3). A calibration against a
//! measurement: the bounds are the device's measured intervals
//! (calibration/loopback-16c.toml); no model parameter is set from them.

use placer_sim::scenario::{self, Metrics, Scenario};

/// Mean over the scenario's seeds of (Gbit/s, busy CPUs per Gbit/s) for `policy`.
fn mean(sc: &Scenario, variant: &str, policy: &str) -> (f64, f64) {
    let v = sc.variants.iter().find(|v| v.name == variant).unwrap();
    let runs: Vec<Metrics> = sc
        .seeds
        .iter()
        .map(|&seed| {
            scenario::run_one(
                sc,
                Some(v),
                &policy.parse().unwrap(),
                seed,
                &scenario::default_factory,
            )
            .unwrap()
            .metrics
        })
        .collect();
    let n = runs.len() as f64;
    let gbps = runs.iter().map(|m| m.net_gbps).sum::<f64>() / n;
    let cpu_per_gbit = runs
        .iter()
        .map(|m| m.cpu_busy_cpus / m.net_gbps)
        .sum::<f64>()
        / n;
    (gbps, cpu_per_gbit)
}

/// (throughput change, CPU-per-GB change) of net-affinity against linux-default, percent.
fn ab(sc: &Scenario, variant: &str) -> (f64, f64) {
    let (g0, c0) = mean(sc, variant, "linux-default");
    let (g1, c1) = mean(sc, variant, "net-affinity");
    ((g1 / g0 - 1.0) * 100.0, (c1 / c0 - 1.0) * 100.0)
}

#[test]
fn a_loopback_sender_feeds_its_receiver_and_waits_for_its_window() {
    let sc = Scenario::load("device-16c-loopback").unwrap();
    let v = sc.variants.iter().find(|v| v.name == "1-stream").unwrap();
    let mut h = sc
        .host(Some(v), placer_sim::Baseline::LinuxDefault, 1)
        .unwrap();
    h.run_until(500_000_000, false);
    h.open_window();
    h.run_until(1_500_000_000, false);
    let m = scenario::metrics_of(&h, 0);
    let by_name = |n: &str| h.procs().iter().find(|p| p.comm == n).unwrap();
    let (send, recv) = (by_name("send0"), by_name("recv0"));
    let (sent, received) = (send.result.tx_bytes, recv.result.rx_bytes);
    assert!(received > 0.0, "nothing received");
    // What was sent is received (less what is in flight), and counted once.
    assert!(
        (sent - received).abs() < 0.01 * sent,
        "{sent} vs {received}"
    );
    assert!((m.net_gbps - received * 8.0 / 1e9).abs() < 1e-6 * m.net_gbps);
    // The reader's copy (4 cycles/byte) is slower than the send (2 + 1000 per packet):
    // the reader runs flat out and the sender, waiting on the closed window, uses only
    // the CPU its bytes cost, not a whole CPU.
    let hz = h.machine().cpus[0].max_khz as f64 * 1e3;
    let cpu_s = |p: &placer_sim::world::Proc| {
        let t = &h.tasks()[p.threads[0]];
        (t.utime_ns + t.stime_ns) / 1e9
    };
    let sent_all = h.flows()[send.flow.unwrap()].bytes;
    let send_cost = sent_all * (2.0 + 1000.0 / 65483.0) / hz;
    let run_s = 1.5;
    assert!(
        (cpu_s(send) - send_cost).abs() < 0.05 * send_cost,
        "sender CPU {} s vs its bytes' cost {send_cost} s",
        cpu_s(send)
    );
    assert!(
        cpu_s(send) < 0.7 * run_s,
        "the sender spun: {} s",
        cpu_s(send)
    );
    assert!(
        cpu_s(recv) > 0.9 * run_s,
        "the reader waited: {} s",
        cpu_s(recv)
    );
}

/// The device's measured 95% interval of with/without for `metric` ("gbit_per_s",
/// "cpu_s_per_gb") and `streams`, from calibration/loopback-16c.toml.
fn measured(streams: u32, metric: &str) -> (f64, f64) {
    let cal: toml::Value =
        toml::from_str(include_str!("../../../calibration/loopback-16c.toml")).unwrap();
    let ci = cal["ab"][format!("streams{streams}")][format!("{metric}_ci95")]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_float().unwrap())
        .collect::<Vec<_>>();
    ((ci[0] - 1.0) * 100.0, (ci[1] - 1.0) * 100.0)
}

/// The model, with every parameter at its default, lands inside the device's measured
/// 95% intervals for both metrics and both stream counts. Issue 33's bounds (one stream
/// +5..+20% throughput, -15..-40% CPU per GB) came from issue 13's two rounds; the device's
/// ten rounds of 2026-11-26 exclude the CPU bound (docs/simulator.md, "The 16-core device").
#[test]
fn the_16_core_loopback_ab_falls_within_the_devices_measured_intervals() {
    let sc = Scenario::load("device-16c-loopback").unwrap();
    for (streams, variant) in [(1, "1-stream"), (4, "4-streams")] {
        let (tput, cpu) = ab(&sc, variant);
        eprintln!("{variant}: throughput {tput:+.1}%, CPU per GB {cpu:+.1}%");
        for (metric, model) in [("gbit_per_s", tput), ("cpu_s_per_gb", cpu)] {
            let (lo, hi) = measured(streams, metric);
            assert!(
                (lo..=hi).contains(&model),
                "{variant} {metric}: model {model:+.1}%, device {lo:+.1}..{hi:+.1}%"
            );
        }
    }
}
