//! The seeds' simulated figures as README.md, docs/seeds.md and docs/smt.md quote them
//! (issue 51): each figure is computed here, rendered as the markdown block the docs carry
//! between `<!-- NAME:begin -->` / `<!-- NAME:end -->` markers, and labelled with what it
//! rests on. `placer bench seeds` prints or rewrites the blocks; a test recomputes them (seed
//! 003: one seed per row against the per-seed file, every summary from that file) so a stale
//! number fails.

use crate::alloc_sweep;
use crate::baselines::Baseline;
use crate::scenario::{
    default_factory, dotted, overlay_into, run_one, PolicySpec, RunResult, Scenario,
};
use placer_core::alloc::{self, AllocOptions};
use placer_core::policy_kind::PolicyKind;
use serde::Serialize;
use std::fmt::Write;

/// What a simulated figure rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RestsOn {
    /// A modelled cause with sourced inputs.
    Mechanism,
    /// The figure is an input, or a closed form of inputs.
    RestatedInput,
    /// Its sign or size depends on an input nobody measured.
    UnmeasuredEstimate,
}

impl RestsOn {
    pub fn label(self) -> &'static str {
        match self {
            RestsOn::Mechanism => "mechanism",
            RestsOn::RestatedInput => "restated input",
            RestsOn::UnmeasuredEstimate => "unmeasured estimate",
        }
    }
}

/// Where an override goes: the model's parameters or the placer config.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Override {
    None,
    Param(&'static str, f64),
    Config(&'static str, f64),
}

/// A scenario with `value` set at the dotted `path` of its params or config.
pub fn with_override(sc: &Scenario, o: Override) -> Scenario {
    let (path, value, params) = match o {
        Override::None => return sc.clone(),
        Override::Param(p, v) => (p, v, true),
        Override::Config(p, v) => (p, v, false),
    };
    let mut s = sc.clone();
    let slot = if params { &mut s.params } else { &mut s.config };
    overlay_into(slot, &dotted(path, toml::Value::Float(value)));
    s
}

fn load(name: &str) -> Result<Scenario, String> {
    Scenario::load(name).map_err(|e| e.to_string())
}

fn run(
    sc: &Scenario,
    variant: Option<&str>,
    policy: &PolicySpec,
    seed: u64,
) -> Result<RunResult, String> {
    let v = match variant {
        Some(n) => Some(
            sc.variants
                .iter()
                .find(|v| v.name == n)
                .ok_or_else(|| format!("{}: no variant {n}", sc.name))?,
        ),
        None => None,
    };
    run_one(sc, v, policy, seed, &default_factory)
}

// ---------------------------------------------------------------------------------------
// Seed 003

/// One row of seed 003's table: a shipped mix, or the 8-app mix with one input moved.
#[derive(Debug, Clone)]
pub struct Case003 {
    pub label: &'static str,
    pub mix: &'static str,
    pub variant: Option<&'static str>,
    pub input: Override,
    pub rests_on: RestsOn,
}

const MIB: f64 = 1024.0 * 1024.0;

/// The shipped mixes (as estimated), then the sensitivity rows of the unmeasured inputs on
/// the 8-app mix: the LLC reference size (8 MiB estimated), the sufficient-contention
/// threshold (3.1 GB/s derived for the X5570 from a curve interpolated below its first
/// point; 0 = off, 8 GB/s = the default for machines without a curve), and the archetype
/// variants the scenario ships.
pub fn cases_003() -> Vec<Case003> {
    let u = RestsOn::UnmeasuredEstimate;
    let mix = |label, mix, variant| Case003 {
        label,
        mix,
        variant,
        input: Override::None,
        rests_on: u,
    };
    let on8 = |label, input| Case003 {
        label,
        mix: "seed-003",
        variant: Some("as-estimated"),
        input,
        rests_on: u,
    };
    let var = |label, v| Case003 {
        label,
        mix: "seed-003",
        variant: Some(v),
        input: Override::None,
        rests_on: u,
    };
    vec![
        mix("seed-003 (2x4, 8 apps)", "seed-003", Some("as-estimated")),
        mix("seed-003-6 (2x4, 6 apps)", "seed-003-6", None),
        mix("seed-003-g1g3 (2x4, G1+G3 only)", "seed-003-g1g3", None),
        mix("seed-003-18 (2x14, 18 apps)", "seed-003-18", None),
        mix("seed-003-24 (2x14, 24 apps)", "seed-003-24", None),
        mix("seed-003-28 (2x14, 28 apps)", "seed-003-28", None),
        on8(
            "8 apps, LLC reference 4 MiB",
            Override::Param("contention.llc_reference_bytes", 4.0 * MIB),
        ),
        on8(
            "8 apps, LLC reference 16 MiB",
            Override::Param("contention.llc_reference_bytes", 16.0 * MIB),
        ),
        on8(
            "8 apps, LLC reference 32 MiB",
            Override::Param("contention.llc_reference_bytes", 32.0 * MIB),
        ),
        on8(
            "8 apps, bandwidth threshold off",
            Override::Config("contention.min_domain_bandwidth_bytes_per_s", 0.0),
        ),
        on8(
            "8 apps, bandwidth threshold 8 GB/s",
            Override::Config("contention.min_domain_bandwidth_bytes_per_s", 8e9),
        ),
        var("8 apps, Group 2 light (g2-light)", "g2-light"),
        var("8 apps, additive harm (fitted-additive)", "fitted-additive"),
        var("8 apps, G1 insensitive (g1-insensitive)", "g1-insensitive"),
    ]
}

/// Rounds a percentage to the per-seed file's precision (0.001 points), so summaries
/// computed from the file and from a fresh run agree exactly.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// One seed of a case: (per-app speedup %, makespan gain %) of `contention` over
/// `linux-default`. Per-app: the mean over apps (paired by name) of T_linux / T_contention
/// - 1; makespan: makespan_linux / makespan_contention - 1.
pub fn gains_003(case: &Case003, seed: u64) -> Result<(f64, f64), String> {
    let sc = with_override(&load(case.mix)?, case.input);
    let base = run(
        &sc,
        case.variant,
        &PolicySpec::new(Baseline::LinuxDefault, vec![]),
        seed,
    )?;
    let contention = PolicySpec::placer_only(vec![PolicyKind::Contention]);
    let pol = run(&sc, case.variant, &contention, seed)?;
    let done = |r: &RunResult| -> Vec<(String, f64)> {
        r.procs
            .iter()
            .filter_map(|p| p.completions_s.first().map(|c| (p.name.clone(), *c)))
            .collect()
    };
    let (b, p) = (done(&base), done(&pol));
    let ratios: Vec<f64> = p
        .iter()
        .filter_map(|(n, tp)| {
            let tb = b.iter().find(|(m, _)| m == n)?.1;
            (*tp > 0.0).then(|| tb / tp - 1.0)
        })
        .collect();
    if ratios.is_empty() {
        return Err(format!("{}: no app finished in both runs", case.label));
    }
    let mk = |r: &RunResult| {
        r.metrics
            .makespan_s
            .ok_or_else(|| format!("{}: a run did not finish", case.label))
    };
    let per_app = 100.0 * ratios.iter().sum::<f64>() / ratios.len() as f64;
    let makespan = 100.0 * (mk(&base)? / mk(&pol)? - 1.0);
    Ok((round3(per_app), round3(makespan)))
}

/// Seeds 1..=n of a case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PerSeed003 {
    pub label: String,
    pub rests_on: RestsOn,
    pub per_app_pct: Vec<f64>,
    pub makespan_pct: Vec<f64>,
}

/// Every case over seeds 1..=n, on `threads` threads (cases split between them; each
/// run is deterministic, so the split does not change a figure).
pub fn run_003(
    n: u64,
    threads: usize,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Vec<PerSeed003>, String> {
    let cases = cases_003();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<Result<PerSeed003, String>>>> =
        cases.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(c) = cases.get(i) else { break };
                progress(c.label);
                let r = (1..=n)
                    .map(|seed| gains_003(c, seed))
                    .collect::<Result<Vec<_>, _>>()
                    .map(|v| PerSeed003 {
                        label: c.label.to_string(),
                        rests_on: c.rests_on,
                        per_app_pct: v.iter().map(|x| x.0).collect(),
                        makespan_pct: v.iter().map(|x| x.1).collect(),
                    });
                *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            });
        }
    });
    slots
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or_else(|| Err("a case was not run".into()))
        })
        .collect()
}

/// Mean, standard deviation, range and share of seeds with a gain.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GainStats {
    pub seeds: usize,
    pub mean: f64,
    pub sd: f64,
    pub min: f64,
    pub max: f64,
    pub with_gain: usize,
}

pub fn gain_stats(v: &[f64]) -> GainStats {
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    GainStats {
        seeds: v.len(),
        mean,
        sd: var.sqrt(),
        min: v.iter().copied().fold(f64::INFINITY, f64::min),
        max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        with_gain: v.iter().filter(|x| **x > 0.0).count(),
    }
}

fn stats_cells(s: &GainStats) -> String {
    format!(
        "{:+.2}% | {:.2} | {:+.1}..{:+.1}% | {}/{}",
        s.mean, s.sd, s.min, s.max, s.with_gain, s.seeds
    )
}

/// The table docs/seeds.md quotes: per case, both metrics over the seeds.
pub fn render_003_table(rows: &[PerSeed003]) -> String {
    let mut o = String::new();
    let seeds = rows.first().map_or(0, |r| r.per_app_pct.len());
    let _ = writeln!(
        o,
        "Seeds 1-{seeds} of each row, contention vs linux-default (`placer bench seeds --seeds \
         {seeds}`; per seed: docs/seed-003-seeds.md). sd = standard deviation over the seeds; \
         \"gain\" = seeds where contention is ahead."
    );
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "| mix or input | rests on | per-app mean | sd | min..max | seeds with a gain | \
         makespan mean | sd | min..max | seeds with a gain |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} |",
            r.label,
            r.rests_on.label(),
            stats_cells(&gain_stats(&r.per_app_pct)),
            stats_cells(&gain_stats(&r.makespan_pct))
        );
    }
    o
}

/// The per-seed file (docs/seed-003-seeds.md): per case, the per-app and makespan gains of
/// seeds 1..=n, in %, to 0.001.
pub fn render_003_per_seed(rows: &[PerSeed003]) -> String {
    let mut o = String::new();
    for r in rows {
        let _ = writeln!(o, "- {} ({})", r.label, r.rests_on.label());
        let join = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.3}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let _ = writeln!(o, "  - per-app: {}", join(&r.per_app_pct));
        let _ = writeln!(o, "  - makespan: {}", join(&r.makespan_pct));
    }
    o
}

/// Reads [`render_003_per_seed`]'s text back (labels matched against [`cases_003`]).
pub fn parse_003_per_seed(text: &str) -> Result<Vec<PerSeed003>, String> {
    let cases = cases_003();
    let mut out: Vec<PerSeed003> = Vec::new();
    let nums = |s: &str| -> Result<Vec<f64>, String> {
        s.split_whitespace()
            .map(|x| x.parse::<f64>().map_err(|e| format!("{x:?}: {e}")))
            .collect()
    };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("- ") {
            let c = cases
                .iter()
                .find(|c| rest == format!("{} ({})", c.label, c.rests_on.label()))
                .ok_or_else(|| format!("unknown row {rest:?}"))?;
            out.push(PerSeed003 {
                label: c.label.to_string(),
                rests_on: c.rests_on,
                per_app_pct: Vec::new(),
                makespan_pct: Vec::new(),
            });
        } else if let Some(v) = line.strip_prefix("  - per-app: ") {
            out.last_mut().ok_or("values before a row")?.per_app_pct = nums(v)?;
        } else if let Some(v) = line.strip_prefix("  - makespan: ") {
            out.last_mut().ok_or("values before a row")?.makespan_pct = nums(v)?;
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Seed 000

/// One row of seed 000's table: energy-qos on eas against eas, QoS met per watt.
#[derive(Debug, Clone, Serialize)]
pub struct Row000 {
    pub label: String,
    /// At the wall (the board's own reading, idle included): ratio.
    pub wall_x: f64,
    /// Above idle (idle power subtracted): ratio.
    pub above_idle_x: f64,
    /// With every sender capped at its app's target rate (no limiter needed): at the wall.
    pub capped_wall_x: f64,
    pub capped_above_idle_x: f64,
    /// Above idle with the leakage current per active cluster at each of [`LEAK_RANGE_A`].
    pub leak_above_idle_x: Vec<f64>,
}

/// The plausible range of the static (leakage) current per active cluster, A: 0 to 0.23 A
/// (0 to 0.3 W at 1.3 V; the model's 0.0856 A is CAL A7's fit at 330 K).
pub const LEAK_RANGE_A: [f64; 2] = [0.0, 0.23];

/// Seed 000's cases: 1-4 FTP apps, and the PARSEC-like mixes.
pub fn cases_000() -> Vec<(String, &'static str, Option<u32>)> {
    let mut v: Vec<(String, &'static str, Option<u32>)> = (1..=4)
        .map(|n| {
            (
                format!("{n} FTP app{}", if n > 1 { "s" } else { "" }),
                "seed-000",
                Some(n),
            )
        })
        .collect();
    v.push(("2 FTP + PARSEC-like at 50%".into(), "seed-000-mix50", None));
    v.push(("2 FTP + PARSEC-like at 75%".into(), "seed-000-mix75", None));
    v
}

/// Both readings of one scenario (seed 1; the scenarios' seeds give one figure: the model
/// has no random input on this board), as eas+energy-qos / eas.
fn ratios_000(sc: &Scenario) -> Result<(f64, f64), String> {
    let eas = run(sc, None, &PolicySpec::new(Baseline::Eas, vec![]), 1)?;
    let eq = run(
        sc,
        None,
        &PolicySpec::new(Baseline::Eas, vec![PolicyKind::EnergyQos]),
        1,
    )?;
    let get = |r: &RunResult, dyn_w: bool| {
        if dyn_w {
            r.metrics.qos_per_dyn_watt
        } else {
            r.metrics.qos_per_watt
        }
        .ok_or_else(|| format!("{}: no QoS target", sc.name))
    };
    Ok((
        get(&eq, false)? / get(&eas, false)?,
        get(&eq, true)? / get(&eas, true)?,
    ))
}

/// Every sender of a receive flow with a QoS target sends at that target: the limiter has
/// nothing left to do, so what energy-qos still gains is its choice of cluster and cap.
pub fn capped_senders(sc: &Scenario) -> Scenario {
    let mut s = sc.clone();
    for w in &mut s.workloads {
        if let Some(t) = w.qos_target_bytes_per_s {
            if w.rate_mbps.is_some() {
                w.rate_mbps = Some(t * 8.0 / 1e6);
            }
        }
    }
    s
}

pub fn run_000() -> Result<Vec<Row000>, String> {
    let mut out = Vec::new();
    for (label, name, count) in cases_000() {
        let mut sc = load(name)?;
        if let Some(n) = count {
            sc.workloads[0].count = n;
        }
        let (wall_x, above_idle_x) = ratios_000(&sc)?;
        let (capped_wall_x, capped_above_idle_x) = ratios_000(&capped_senders(&sc))?;
        let leak_above_idle_x = LEAK_RANGE_A
            .iter()
            .map(|a| {
                ratios_000(&with_override(
                    &sc,
                    Override::Param("power.cluster_leak_a", *a),
                ))
                .map(|r| r.1)
            })
            .collect::<Result<_, _>>()?;
        out.push(Row000 {
            label,
            wall_x,
            above_idle_x,
            capped_wall_x,
            capped_above_idle_x,
            leak_above_idle_x,
        });
    }
    Ok(out)
}

pub fn render_000(rows: &[Row000]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "QoS met per watt, eas+energy-qos over eas, seed 1 (`placer bench seeds --only 000`). \
         **At the wall** is the board's own reading (idle power included) and the headline; \
         *above idle* subtracts the board's idle power (`power.node_idle_w`) and so divides small differences by \
         small numbers. \"Senders capped\": every sender sends at its app's target, so the \
         limiter has nothing to do and what is left is the choice of cluster and cap."
    );
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "| apps | at the wall | above idle (labelled, not the headline) | above idle, leakage {} / {} A per cluster | senders capped: at the wall | senders capped: above idle | rests on |",
        LEAK_RANGE_A[0], LEAK_RANGE_A[1]
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|");
    let rests = format!(
        "{} (wall); {} (above idle: the idle and leakage terms)",
        RestsOn::Mechanism.label(),
        RestsOn::UnmeasuredEstimate.label()
    );
    for r in rows {
        let cells = [
            r.label.clone(),
            format!("**{:.2}x**", r.wall_x),
            format!("{:.2}x", r.above_idle_x),
            r.leak_above_idle_x
                .iter()
                .map(|x| format!("{x:.2}x"))
                .collect::<Vec<_>>()
                .join(" / "),
            format!("{:.2}x", r.capped_wall_x),
            format!("{:.2}x", r.capped_above_idle_x),
            rests.clone(),
        ];
        let _ = writeln!(o, "| {} |", cells.join(" | "));
    }
    o
}

// ---------------------------------------------------------------------------------------
// Seed 001

/// One physical-core count: policy 1's and policy 2's units on that many cores, each with
/// its time in s (simulated) or its speedup (the model), and its power.
#[derive(Debug, Clone, Serialize)]
pub struct CoreRow {
    pub cores: u32,
    pub n_1: usize,
    pub value_1: f64,
    pub power_1_w: f64,
    pub n_2: usize,
    pub value_2: f64,
    pub power_2_w: f64,
    /// Speedup of policy 2 over policy 1, minus 1.
    pub gain: f64,
}

/// `placer plan --simulate seed-001`'s figures.
#[derive(Debug, Clone, Serialize)]
pub struct Fig001 {
    pub per_core: Vec<CoreRow>,
    pub avg_gain_pct: f64,
    pub max_gain_pct: f64,
    /// For 10 and 12 units of policy 2.
    pub equal: Vec<EqualSpeed>,
    /// Policy 1 at 8 and 9 units (9: one core shared), s: the load imbalance.
    pub speedup_8_9_s: (f64, f64),
}

pub fn run_001(name: &str) -> Result<Fig001, String> {
    let (points, a, b) = alloc_sweep::sweep(name, &AllocOptions::default())?;
    let t = |pol, n| {
        points
            .iter()
            .find(|p| p.policy == pol && p.n == n)
            .map(|p| (p.makespan_s, p.power_w))
            .ok_or("missing point")
    };
    let mut per_core = Vec::new();
    for c in alloc::per_core_comparison(&a, &b) {
        let (ta, pa) = t(alloc::AllocPolicy::Speedup, c.n_a)?;
        let (tb, pb) = t(alloc::AllocPolicy::Efficiency, c.n_b)?;
        per_core.push(CoreRow {
            cores: c.cores,
            n_1: c.n_a,
            value_1: ta,
            power_1_w: pa,
            n_2: c.n_b,
            value_2: tb,
            power_2_w: pb,
            gain: c.gain,
        });
    }
    let (avg_gain_pct, max_gain_pct) = mean_max_pct(&per_core);
    Ok(Fig001 {
        avg_gain_pct,
        max_gain_pct,
        equal: alloc::equal_speed_matches(&a, &b)
            .into_iter()
            .filter(|(nb, _, _)| [10, 12].contains(nb))
            .collect(),
        per_core,
        speedup_8_9_s: (
            t(alloc::AllocPolicy::Speedup, 8)?.0,
            t(alloc::AllocPolicy::Speedup, 9)?.0,
        ),
    })
}

/// (policy 2 units, the fewest policy 1 units as fast, power difference W).
pub type EqualSpeed = (usize, usize, f64);

/// The per-core table, `what` naming the value column (time s, speedup).
fn core_table(what: &str, rows: &[CoreRow]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "| cores | policy 1 units | {what} | power W | policy 2 units | {what} | power W | gain per core |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|");
    for r in rows {
        let cells = [
            r.cores.to_string(),
            r.n_1.to_string(),
            format!("{:.2}", r.value_1),
            format!("{:.2}", r.power_1_w),
            r.n_2.to_string(),
            format!("{:.2}", r.value_2),
            format!("{:.2}", r.power_2_w),
            format!("{:.1}%", 100.0 * r.gain),
        ];
        let _ = writeln!(o, "| {} |", cells.join(" | "));
    }
    o
}

fn mean_max_pct(rows: &[CoreRow]) -> (f64, f64) {
    let gains: Vec<f64> = rows.iter().map(|c| 100.0 * c.gain).collect();
    (
        gains.iter().sum::<f64>() / gains.len().max(1) as f64,
        gains.iter().copied().fold(f64::MIN, f64::max),
    )
}

/// `placer plan --machine MACHINE --compare --serial-fraction S`: the model's orders side
/// by side (Amdahl with sigma and the machine's measured power model), no simulation.
pub fn model_001(machine: &str, s: f64) -> Result<(Vec<CoreRow>, Vec<EqualSpeed>), String> {
    let topo = placer_core::machines::machine(machine).map_err(|e| e.to_string())?;
    let model = placer_core::power_model::builtin(machine)
        .ok_or_else(|| format!("{machine}: no measured power model"))?;
    let opts = AllocOptions::default();
    let stats = |pol| {
        let order = alloc::order(&topo, pol, &opts);
        alloc::prefix_stats(&topo, &order, &model, s, &opts)
    };
    let (a, b) = (
        stats(alloc::AllocPolicy::Speedup),
        stats(alloc::AllocPolicy::Efficiency),
    );
    let rows = alloc::per_core_comparison(&a, &b)
        .into_iter()
        .map(|c| CoreRow {
            cores: c.cores,
            n_1: c.n_a,
            value_1: c.speedup_a,
            power_1_w: c.power_a_w,
            n_2: c.n_b,
            value_2: c.speedup_b,
            power_2_w: c.power_b_w,
            gain: c.gain,
        })
        .collect();
    Ok((rows, alloc::equal_speed_matches(&a, &b)))
}

/// docs/smt.md's model block: the Dell C6100 at the seed's S = 0.077 in full, the HP
/// DK388P at S = 0.053 in summary.
pub fn render_001_model() -> Result<String, String> {
    let (dell, equal) = model_001("dell-c6100", 0.077)?;
    let (hp, _) = model_001("hp-dk388p", 0.053)?;
    let mut o = core_table("speedup", &dell);
    let (avg, max) = mean_max_pct(&dell);
    let (hp_avg, hp_max) = mean_max_pct(&hp);
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "Model (`placer plan --machine dell-c6100 --compare --serial-fraction 0.077`; rests on: \
         {}): average gain per physical core {avg:.1}%, max {max:.1}%.",
        RestsOn::RestatedInput.label()
    );
    for (nb, na, dp) in equal.iter().filter(|(nb, _, _)| [10, 12].contains(nb)) {
        let _ = writeln!(o, "At equal speed, {}.", equal_line(*nb, *na, *dp));
    }
    let _ = writeln!(
        o,
        "HP DK388P (`placer plan --machine hp-dk388p --compare --serial-fraction 0.053`): \
         average {hp_avg:.1}%, max {hp_max:.1}%."
    );
    Ok(o)
}

fn equal_line(nb: usize, na: usize, dp: f64) -> String {
    format!(
        "{nb} units of policy 2 run like {na} units of policy 1 at {:.2} W {}",
        dp.abs(),
        if dp <= 0.0 { "less" } else { "more" }
    )
}

pub fn render_001(f: &Fig001) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "`placer plan --simulate seed-001` (and `placer bench seeds --only 001`); rests on: {} \
         (Amdahl's law with the paper's sigma = 0.3 and S = 0.077, plus the load imbalance the \
         simulator adds).",
        RestsOn::RestatedInput.label()
    );
    let _ = writeln!(o);
    o.push_str(&core_table("time s", &f.per_core));
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "Gain per physical core: average {:.1}%, max {:.1}%.",
        f.avg_gain_pct, f.max_gain_pct
    );
    for (nb, na, dp) in &f.equal {
        let _ = writeln!(o, "{}.", equal_line(*nb, *na, *dp));
    }
    let _ = writeln!(
        o,
        "Load imbalance: 9 units of policy 1 (one core shared) take {:.2} s, 8 units {:.2} s.",
        f.speedup_8_9_s.1, f.speedup_8_9_s.0
    );
    o
}

// ---------------------------------------------------------------------------------------
// The docs' blocks

/// What the seeds' figures were computed from: any part left out is not rendered.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Figures {
    pub s000: Option<Vec<Row000>>,
    pub s001: Option<Fig001>,
    pub s003: Option<Vec<PerSeed003>>,
}

/// The share of a gain (ratio `x` over 1) that goes when the senders are capped.
pub fn limiter_share_pct(x: f64, capped_x: f64) -> Option<f64> {
    (x > 1.0).then(|| 100.0 * (x - capped_x) / (x - 1.0))
}

/// README.md's seed table: the simulated figure, what it rests on, the paper's.
pub fn render_readme(s000: &[Row000], s001: &Fig001, s003: &[PerSeed003]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "| seed | simulated (`placer bench seeds`; the rows in full: docs/seeds.md) | rests on | paper |"
    );
    let _ = writeln!(o, "|---|---|---|---|");
    if let Some(r) = s000.iter().find(|r| r.label == "4 FTP apps") {
        let share = limiter_share_pct(r.wall_x, r.capped_wall_x)
            .map(|s| format!("; the limiter carries {s:.0}% of that gain"))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "| 000 QoS | `placer sim seed-000` (4 FTP apps, XU4): QoS met per watt over EAS **{:.2}x \
             at the wall** (the board's own reading); above idle, labelled as such: {:.2}x; with \
             every sender capped at its target {:.2}x at the wall{share} | {} (at the wall); {} \
             (above idle: the idle and leakage terms) | 4.79x / 3.11x / 2.35x perf/W over EAS (the \
             thesis does not say what it measured) |",
            r.wall_x,
            r.above_idle_x,
            r.capped_wall_x,
            RestsOn::Mechanism.label(),
            RestsOn::UnmeasuredEstimate.label()
        );
    }
    let eq: Vec<String> = s001
        .equal
        .iter()
        .map(|(nb, na, dp)| equal_line(*nb, *na, *dp))
        .collect();
    let _ = writeln!(
        o,
        "| 001 SMT | `placer plan --simulate seed-001`: per physical core, policy 2 {:+.1}% \
         average, {:+.1}% max; {} | {} (Amdahl's law with the paper's sigma = 0.3 and S = \
         0.077; the simulator adds load imbalance) | +21% average, up to +33%; 3 W less |",
        s001.avg_gain_pct,
        s001.max_gain_pct,
        eq.join("; "),
        RestsOn::RestatedInput.label()
    );
    let _ = writeln!(
        o,
        "| 002 net | `placer sim seed-002`, `device-16c-loopback` (docs/simulator.md) | {} (the \
         only placement-dependent cost is the paper's +27% CPU, so at most 21% CPU can be saved) \
         | 2N: +20..32% throughput, CPU better by 39..43%; 2S: +4..21%, 59..63% |",
        RestsOn::RestatedInput.label()
    );
    let row = |label: &str| s003.iter().find(|r| r.label.starts_with(label));
    let mean = |r: &PerSeed003, m: bool| {
        let v = if m { &r.makespan_pct } else { &r.per_app_pct };
        gain_stats(v)
    };
    if let (Some(r8), Some(r18), Some(r24), Some(r28)) = (
        row("seed-003 ("),
        row("seed-003-18"),
        row("seed-003-24"),
        row("seed-003-28"),
    ) {
        let a = mean(r8, false);
        let m = mean(r8, true);
        let llc: Vec<String> = [
            "LLC reference 4 MiB",
            "seed-003 (",
            "LLC reference 16 MiB",
            "LLC reference 32 MiB",
        ]
        .iter()
        .filter_map(|l| {
            s003.iter()
                .find(|r| r.label.contains(l) || r.label.starts_with(l))
                .map(|r| format!("{:+.1}", mean(r, false).mean))
        })
        .collect();
        let _ = writeln!(
            o,
            "| 003 contention | `seed-003` (8 apps, 2x4) over {} seeds: per app {:+.2}% (ahead on \
             {}/{} seeds), makespan {:+.2}% ({}/{}); per app with the LLC reference size at \
             4/8/16/32 MiB: {}%; 2x14 with 18/24/28 apps: per app {:+.2} / {:+.2} / {:+.2}% | \
             {} (the LLC reference size, the archetypes' pressure and sensitivity and the \
             bandwidth threshold were not measured) | +5-6% average, up to 12% (2x4); up to 25%, \
             growing with load (2x14) |",
            a.seeds,
            a.mean,
            a.with_gain,
            a.seeds,
            m.mean,
            m.with_gain,
            m.seeds,
            llc.join(" / "),
            mean(r18, false).mean,
            mean(r24, false).mean,
            mean(r28, false).mean,
            r8.rests_on.label()
        );
    }
    let _ = writeln!(
        o,
        "| 004 buffers | `placer sim seed-004` (docs/numa.md) | {} (reuse = 2.4 GHz / 4 cycles \
         per byte; remote = a latency ratio, where the paper blames link speed) | 8.1 vs 5.8 \
         Gbit/s = 1.40x; remote ~15% below adjacent |",
        RestsOn::RestatedInput.label()
    );
    o
}

/// Every block the docs carry: (file under the repository root, block name, text).
pub fn doc_blocks(f: &Figures) -> Result<Vec<(&'static str, &'static str, String)>, String> {
    let mut v = Vec::new();
    if let Some(r) = &f.s000 {
        v.push(("docs/seeds.md", "seed-000", render_000(r)));
    }
    if let Some(r) = &f.s003 {
        v.push(("docs/seeds.md", "seed-003", render_003_table(r)));
        v.push((
            "docs/seed-003-seeds.md",
            "seed-003-seeds",
            render_003_per_seed(r),
        ));
    }
    if let Some(r) = &f.s001 {
        v.push(("docs/smt.md", "seed-001", render_001(r)));
        // The model needs no simulation: it goes with seed 001's part.
        v.push(("docs/smt.md", "seed-001-model", render_001_model()?));
    }
    if let (Some(a), Some(b), Some(c)) = (&f.s000, &f.s001, &f.s003) {
        v.push(("README.md", "seeds", render_readme(a, b, c)));
    }
    Ok(v)
}

/// The text between `<!-- NAME:begin -->` and `<!-- NAME:end -->` in `doc`.
pub fn block<'a>(doc: &'a str, name: &str) -> Option<&'a str> {
    let begin = format!("<!-- {name}:begin -->\n");
    let end = format!("<!-- {name}:end -->");
    let s = doc.find(&begin)? + begin.len();
    let e = s + doc[s..].find(&end)?;
    Some(&doc[s..e])
}

/// `doc` with the block `name` replaced by `text`.
pub fn replace_block(doc: &str, name: &str, text: &str) -> Result<String, String> {
    let old = block(doc, name).ok_or_else(|| format!("no block {name} in the document"))?;
    let start = old.as_ptr() as usize - doc.as_ptr() as usize;
    Ok(format!(
        "{}{}{}",
        &doc[..start],
        text,
        &doc[start + old.len()..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_and_blocks() {
        let s = gain_stats(&[1.0, -1.0, 3.0]);
        assert_eq!((s.seeds, s.with_gain), (3, 2));
        assert!((s.mean - 1.0).abs() < 1e-12 && (s.sd - 2.0).abs() < 1e-12);
        let doc = "a\n<!-- x:begin -->\nold\n<!-- x:end -->\nb";
        assert_eq!(block(doc, "x"), Some("old\n"));
        let new = replace_block(doc, "x", "new\n").unwrap();
        assert_eq!(new, "a\n<!-- x:begin -->\nnew\n<!-- x:end -->\nb");
        assert!(replace_block(doc, "y", "").is_err());
    }

    #[test]
    fn per_seed_file_reads_back() {
        let rows = vec![PerSeed003 {
            label: cases_003()[1].label.into(),
            rests_on: RestsOn::UnmeasuredEstimate,
            per_app_pct: vec![1.5, -0.25],
            makespan_pct: vec![0.0, 2.125],
        }];
        assert_eq!(
            parse_003_per_seed(&render_003_per_seed(&rows)).unwrap(),
            rows
        );
        assert!(parse_003_per_seed("- nothing (mechanism)\n").is_err());
    }
}
