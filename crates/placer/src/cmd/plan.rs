//! `placer plan`: the CPU allocation order of a policy (seed 001), with the expected
//! speedup, power, SPN and energy of each prefix, and how many units the job is worth.

use crate::common::MachineArgs;
use anyhow::{bail, Context, Result};
use placer_core::alloc::{self, AllocOptions, AllocPolicy, Caps, PrefixStats};
use placer_core::power_model::{self, PowerModel};
use placer_core::Topology;
use serde::Serialize;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub job: JobArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Compare speedup (policy 1) with efficiency (policy 2) per physical core and at
    /// equal speed, as the seed's Tables 6 and 7 do.
    #[arg(long)]
    pub compare: bool,
    /// Sweep 1..=all units of speedup and efficiency in a simulator scenario (its first
    /// workload gets `n` threads confined to the order's first `n` CPUs) and compare them
    /// as --compare does, with simulated times and power: `--simulate seed-001`.
    #[arg(long, value_name = "SCENARIO")]
    pub simulate: Option<String>,
}

/// What `plan` and `run` share: the order, the unit count, the machine and the models.
#[derive(clap::Args, Debug, Clone)]
pub struct JobArgs {
    /// Allocation order: speedup (policy 1), efficiency (policy 2), compact, scatter
    /// (default: speedup for `plan`, efficiency for `run`).
    #[arg(long, value_parser = crate::common::alloc_policy_arg())]
    pub policy: Option<AllocPolicy>,
    /// Units (hardware threads) the job gets (default: every allowed CPU).
    #[arg(short = 'n', long = "units")]
    pub n: Option<usize>,
    #[command(flatten)]
    pub machine: MachineArgs,
    #[command(flatten)]
    pub model: ModelArgs,
}

impl JobArgs {
    pub fn policy(&self, default: AllocPolicy) -> AllocPolicy {
        self.policy.unwrap_or(default)
    }
}

/// The options shared by `plan` and `run` for estimating speedup and power.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// Power model: dell-c6100, hp-dk388p, or a JSON file written by
    /// `placer power fit --json` (default: the machine's own when built in, else
    /// dell-c6100).
    #[arg(long)]
    pub power_model: Option<String>,
    /// The job's serial fraction S for Amdahl's law (0 = perfectly parallel).
    #[arg(long)]
    pub serial_fraction: Option<f64>,
    /// Compute of a shared SMT sibling relative to a full core (the seed's 0.3).
    #[arg(long, default_value_t = alloc::DEFAULT_SIGMA)]
    pub sigma: f64,
}

impl ModelArgs {
    pub fn opts(&self) -> Result<AllocOptions> {
        if !(self.sigma > 0.0 && self.sigma < 1.0) {
            bail!("--sigma {} is not in (0, 1)", self.sigma);
        }
        Ok(AllocOptions { sigma: self.sigma })
    }

    pub fn serial_fraction(&self) -> Result<f64> {
        let s = self.serial_fraction.unwrap_or(0.0);
        if !(0.0..=1.0).contains(&s) {
            bail!("--serial-fraction {s} is not in [0, 1]");
        }
        Ok(s)
    }

    /// The power model to use, and a note when it was chosen by default.
    pub fn power_model(&self, machine: Option<&str>) -> Result<(PowerModel, Option<String>)> {
        match &self.power_model {
            Some(spec) => Ok((load_power_model(spec)?, None)),
            None => match machine.and_then(power_model::builtin) {
                Some(m) => Ok((m, None)),
                None => Ok((
                    power_model::builtin("dell-c6100").expect("built in"),
                    Some(
                        "power model: the seed's Dell C6100 (not this machine's; fit yours \
                         with `placer power fit` and pass --power-model FILE)"
                            .into(),
                    ),
                )),
            },
        }
    }
}

/// A built-in model name, or a JSON file holding a model or a `placer power fit --json`
/// report (its `model` field).
pub fn load_power_model(spec: &str) -> Result<PowerModel> {
    if let Some(m) = power_model::builtin(spec) {
        return Ok(m);
    }
    let text = crate::common::read_input(std::path::Path::new(spec)).with_context(|| {
        format!(
            "power model {spec:?} is neither built in ({}) nor a readable file",
            power_model::builtin_names().join(", ")
        )
    })?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{spec}: not JSON"))?;
    let v = v.get("model").cloned().unwrap_or(v);
    serde_json::from_value(v).with_context(|| {
        format!("{spec}: not a power model (fields name, node_w, package_w, core_w, thread_w)")
    })
}

#[derive(Serialize)]
pub struct PlanReport {
    pub policy: AllocPolicy,
    pub topology: String,
    pub power_model: PowerModel,
    pub serial_fraction: f64,
    pub sigma: f64,
    /// The CPUs the job gets, in order.
    pub cpus: Vec<u32>,
    /// Every prefix of the full order.
    pub prefixes: Vec<PrefixStats>,
    pub caps: Caps,
}

pub fn build_report(
    topo: &Topology,
    policy: AllocPolicy,
    n: Option<usize>,
    model: PowerModel,
    s: f64,
    opts: &AllocOptions,
) -> Result<PlanReport> {
    let order = alloc::order(topo, policy, opts);
    let n = n.unwrap_or(order.len());
    let cpus = alloc::allocate(topo, policy, n, opts)?;
    let prefixes = alloc::prefix_stats(topo, &order, &model, s, opts);
    let caps = alloc::caps(&prefixes, s);
    Ok(PlanReport {
        policy,
        topology: topo.source.clone(),
        power_model: model,
        serial_fraction: s,
        sigma: opts.sigma,
        cpus,
        prefixes,
        caps,
    })
}

pub fn run(args: Args) -> Result<()> {
    if let Some(name) = &args.simulate {
        return simulate(name, args.json, &args.job.model.opts()?);
    }
    let j = &args.job;
    let topo = j.machine.topology()?;
    let opts = j.model.opts()?;
    let s = j.model.serial_fraction()?;
    let (model, note) = j.model.power_model(j.machine.machine.as_deref())?;
    if args.compare {
        let a = build_report(&topo, AllocPolicy::Speedup, None, model.clone(), s, &opts)?;
        let b = build_report(&topo, AllocPolicy::Efficiency, None, model, s, &opts)?;
        let per_core = alloc::per_core_comparison(&a.prefixes, &b.prefixes);
        let equal = alloc::equal_speed_matches(&a.prefixes, &b.prefixes);
        if args.json {
            let v = serde_json::json!({
                "speedup": a, "efficiency": b, "per_core": per_core,
                "equal_speed": equal.iter().map(|(nb, na, dp)| serde_json::json!({
                    "n_efficiency": nb, "n_speedup": na, "power_difference_w": dp
                })).collect::<Vec<_>>(),
            });
            outln!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            out!("{}", render_compare(&per_core, &equal, s));
        }
        return Ok(());
    }
    let policy = j.policy(AllocPolicy::Speedup);
    let report = build_report(&topo, policy, j.n, model, s, &opts)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    if let Some(note) = note {
        eprintln!("placer plan: {note}");
    }
    out!("{}", render(&report));
    Ok(())
}

fn simulate(name: &str, json: bool, opts: &AllocOptions) -> Result<()> {
    let sc = crate::cmd::sim::load_scenario(name)?;
    let progress = crate::common::Progress::start(
        &format!("plan --simulate {name}"),
        "simulating every prefix of both orders",
    );
    let (points, a, b) = placer_sim::alloc_sweep::sweep_scenario(name, sc, opts)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    drop(progress);
    let per_core = alloc::per_core_comparison(&a, &b);
    let equal = alloc::equal_speed_matches(&a, &b);
    if json {
        let v = serde_json::json!({ "scenario": name, "runs": points, "per_core": per_core,
            "equal_speed": equal.iter().map(|(nb, na, dp)| serde_json::json!({
                "n_efficiency": nb, "n_speedup": na, "power_difference_w": dp
            })).collect::<Vec<_>>() });
        outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "simulated: scenario {name}, job threads = units, confined to each order's first units"
    );
    let _ = writeln!(
        o,
        "{:>3} {:>12} {:>9} {:>12} {:>9}",
        "n", "speedup_s", "power_W", "efficiency_s", "power_W"
    );
    let n = a.len();
    for i in 1..=n {
        let get = |pol| points.iter().find(|p| p.policy == pol && p.n == i);
        if let (Some(x), Some(y)) = (get(AllocPolicy::Speedup), get(AllocPolicy::Efficiency)) {
            let _ = writeln!(
                o,
                "{:>3} {:>12.2} {:>9.2} {:>12.2} {:>9.2}",
                i, x.makespan_s, x.power_w, y.makespan_s, y.power_w
            );
        }
    }
    o.push_str(&render_compare(&per_core, &equal, f64::NAN));
    let _ = writeln!(
        o,
        "paper (measured, Dell C6100): 4 units of policy 2 at 130.13 W ~ power of 3 units of \
         policy 1, and faster; 10 units of policy 2 (171.18 s) ~ 7 of policy 1 at 3 W less; \
         12 of policy 2 ~ 9 of policy 1 at 7.82 W less"
    );
    out!("{o}");
    Ok(())
}

pub fn render_compare(
    per_core: &[alloc::PerCore],
    equal: &[(usize, usize, f64)],
    s: f64,
) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "per physical core{}: speedup (policy 1, one thread per core) vs efficiency \
         (policy 2, all threads of each core)",
        if s.is_nan() {
            String::new()
        } else {
            format!(", S = {s}")
        }
    );
    let _ = writeln!(
        o,
        "{:>5} {:>4} {:>9} {:>9} {:>4} {:>9} {:>9} {:>7}",
        "cores", "n_1", "speedup_1", "power_1", "n_2", "speedup_2", "power_2", "gain"
    );
    for c in per_core {
        let _ = writeln!(
            o,
            "{:>5} {:>4} {:>9.2} {:>9.2} {:>4} {:>9.2} {:>9.2} {:>6.1}%",
            c.cores,
            c.n_a,
            c.speedup_a,
            c.power_a_w,
            c.n_b,
            c.speedup_b,
            c.power_b_w,
            100.0 * c.gain
        );
    }
    if !per_core.is_empty() {
        let avg = per_core.iter().map(|c| c.gain).sum::<f64>() / per_core.len() as f64;
        let max = per_core.iter().map(|c| c.gain).fold(f64::MIN, f64::max);
        let _ = writeln!(
            o,
            "gain per physical core: average {:.1}%, max {:.1}% (seed 001 measured: average 21%, \
             up to 33%)",
            100.0 * avg,
            100.0 * max
        );
    }
    let _ = writeln!(
        o,
        "equal speed: policy 2 units -> fewest policy 1 units at least as fast"
    );
    for (nb, na, dp) in equal {
        let _ = writeln!(
            o,
            "  {nb:>3} units of policy 2 ~ {na:>3} of policy 1, power {dp:+.2} W"
        );
    }
    o
}

pub fn render(r: &PlanReport) -> String {
    use std::fmt::Write;
    let m = &r.power_model;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "order `{}` on {} ({} allowed CPUs); power model {}: Pn {:.2} W, Ps {:.2} W, \
         Pc {:.2} W, Pt {:.2} W; S = {}, shared sibling = {} core",
        r.policy,
        r.topology,
        r.prefixes.len(),
        m.name,
        m.node_w,
        m.package_w,
        m.core_w,
        m.thread_w,
        r.serial_fraction,
        r.sigma
    );
    let _ = writeln!(
        o,
        "{:>3} {:>4} {:>4} {:>4} {:>6}  {:>4} {:>5} {:>4} {:>7} {:>7} {:>8} {:>7} {:>8}",
        "n",
        "cpu",
        "pkg",
        "core",
        "role",
        "pkgs",
        "cores",
        "sibs",
        "compute",
        "speedup",
        "power_W",
        "SPN",
        "energy"
    );
    for p in &r.prefixes {
        let mark = if p.n == r.cpus.len() { " <- -n" } else { "" };
        let _ = writeln!(
            o,
            "{:>3} {:>4} {:>4} {:>4} {:>6}  {:>4} {:>5} {:>4} {:>7.2} {:>7.2} {:>8.2} {:>7.3} {:>8.2}{}",
            p.n,
            p.cpu,
            p.package.map_or("-".to_string(), |x| x.to_string()),
            p.core,
            p.role,
            p.packages,
            p.cores,
            p.siblings,
            p.compute,
            p.speedup,
            p.power_w,
            p.spn,
            p.energy_rel,
            mark
        );
    }
    let c = &r.caps;
    let _ = writeln!(
        o,
        "SPN = speedup / power / physical cores x 1000; energy = power x time relative to \
         one full core (W x s per second of single-core run)"
    );
    match c.efficiency_limit_compute {
        Some(l) => {
            let _ = writeln!(
                o,
                "efficiency: parallel efficiency falls below 1/2 beyond {l:.2} compute units \
                 (1/S + 1): up to n = {}",
                c.efficiency_n
            );
        }
        None => {
            let _ = writeln!(o, "efficiency: S = 0, no Amdahl limit");
        }
    }
    let _ = writeln!(
        o,
        "energy: every unit up to n = {} pays off ((P0 + dP)(t0 - dt) < P0 t0); least \
         energy at n = {}",
        c.energy_n, c.energy_optimum_n
    );
    let set: placer_core::CpuSet = r.cpus.iter().copied().collect();
    let _ = writeln!(
        o,
        "cpus for n = {}: {} (in order: {})",
        r.cpus.len(),
        set.to_list_string(),
        r.cpus
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_on_dell_c6100_has_table_1_order_and_paper_power() {
        let topo = placer_core::machines::machine("dell-c6100").unwrap();
        let m = power_model::builtin("dell-c6100").unwrap();
        let r = build_report(
            &topo,
            AllocPolicy::Speedup,
            Some(8),
            m,
            0.0,
            &AllocOptions::default(),
        )
        .unwrap();
        assert_eq!(r.cpus, vec![0, 2, 4, 6, 1, 3, 5, 7]);
        assert_eq!(r.prefixes.len(), 16);
        let text = render(&r);
        assert!(text.contains("130.34"), "{text}");
        assert!(text.contains("cpus for n = 8: 0-7"), "{text}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["policy"], "speedup");
        assert_eq!(json["prefixes"][0]["role"], "full");
    }

    #[test]
    fn power_model_files_load_plain_or_from_a_fit_report() {
        let dir = std::env::temp_dir().join(format!("placer-plan-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let m = power_model::builtin("hp-dk388p").unwrap();
        let plain = dir.join("plain.json");
        std::fs::write(&plain, serde_json::to_string(&m).unwrap()).unwrap();
        let wrapped = dir.join("fit.json");
        std::fs::write(
            &wrapped,
            serde_json::json!({ "model": m, "stderr_w": null }).to_string(),
        )
        .unwrap();
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{\"x\": 1}").unwrap();
        let r1 = load_power_model(plain.to_str().unwrap());
        let r2 = load_power_model(wrapped.to_str().unwrap());
        let r3 = load_power_model(bad.to_str().unwrap());
        let r4 = load_power_model("/nonexistent/model.json");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(r1.unwrap(), m);
        assert_eq!(r2.unwrap(), m);
        assert!(r3.unwrap_err().to_string().contains("not a power model"));
        assert!(r4.unwrap_err().to_string().contains("neither built in"));
        assert_eq!(load_power_model("dell-c6100").unwrap().node_w, 76.11);
    }
}
