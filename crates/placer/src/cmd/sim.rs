//! `placer sim`: runs a simulator scenario (built-in name or TOML path) comparing policies
//! on a modelled machine, and prints a table (or `--json`, or a plot with `--plot`).
//! `placer sim --list` shows the built-in scenarios; `--params MACHINE` every model
//! parameter with its value and source.

use anyhow::{bail, Context, Result};
use placer_sim::oracle;
use placer_sim::report::Report;
use placer_sim::scenario::{self, Scenario, BUILTIN};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A built-in scenario (see --list) or a scenario TOML file.
    #[arg(value_parser = crate::common::Offered(scenario_names))]
    pub scenario: Option<String>,
    /// List the built-in scenarios.
    #[arg(long)]
    pub list: bool,
    /// Print every model parameter of MACHINE with its value and source.
    #[arg(long, value_name = "MACHINE")]
    pub params: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Draw the comparison to FILE (.svg, or .png).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<std::path::PathBuf>,
    /// Override the scenario's seeds (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub seeds: Vec<u64>,
    /// Override the simulated duration (2s, 1m, or seconds).
    #[arg(long, value_parser = crate::common::duration_arg)]
    pub duration: Option<std::time::Duration>,
    /// Run only these policies (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub policy: Vec<placer_sim::scenario::PolicySpec>,
    /// Decide energy-qos with this measured power table (`placer power calibrate --out
    /// FILE`) instead of the machine's model, and take the simulated watts from it.
    #[arg(long, value_name = "FILE")]
    pub power_table: Option<std::path::PathBuf>,
    /// Take each app's pressure and sensitivity from a saved `placer bench contention --app
    /// ... --json` report (fitted with the scenario's LLC shape), in place of the estimates.
    #[arg(long, value_name = "FILE")]
    pub pairs: Option<std::path::PathBuf>,
    /// Also run the exhaustive oracle (always on when the scenario has an [oracle] table).
    #[arg(long)]
    pub oracle: bool,
}

fn scenario_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(n, _)| *n).collect()
}

pub fn run(args: Args) -> Result<()> {
    if args.list {
        let width = BUILTIN.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
        for (name, text) in BUILTIN {
            let desc = Scenario::from_toml(name, text)
                .map(|s| format!("{} ({})", s.description, s.machine))
                .unwrap_or_else(|e| format!("(does not parse: {e})"));
            outln!("{name:width$}  {desc}");
        }
        return Ok(());
    }
    if let Some(m) = &args.params {
        let m: placer_core::machines::MachineSpec = m.parse()?;
        let max_khz = m.topology().cpus.iter().filter_map(|c| c.max_khz).max();
        let p = placer_sim::Params::for_machine(m.builtin(), max_khz);
        let mut last = "";
        for (k, v, src) in p.describe() {
            if src != last {
                outln!("# {src}");
                last = src;
            }
            outln!("{k} = {v}");
        }
        return Ok(());
    }
    let Some(name) = &args.scenario else {
        bail!("name a scenario (placer sim --list shows the built-in ones) or a TOML file");
    };
    if let Some(path) = &args.plot {
        placer_sim::plot::PlotFormat::of(path)?;
    }
    let mut sc = load_scenario(name)?;
    if !args.seeds.is_empty() {
        sc.seeds = args.seeds.clone();
    }
    if let Some(d) = args.duration.map(|d| d.as_secs_f64()) {
        if d <= sc.warmup_s {
            sc.warmup_s = d / 4.0;
        }
        sc.duration_s = d;
    }
    if !args.policy.is_empty() {
        sc.policies = args.policy.clone();
    }
    if let Some(p) = &args.power_table {
        sc.power_table_model = Some(crate::cmd::config::load_power_table(p)?);
    }
    if let Some(p) = &args.pairs {
        let (m, llc_bytes) = placer::bench::contention_pairs::read_pairs(p)?;
        let shape = sc.topology_and_params(None)?.1.contention.llc_shape;
        let fit = placer::bench::contention_pairs::fits(&m)
            .into_iter()
            .find(|f| f.shape == shape)
            .context("no fit of the scenario's LLC shape")?;
        let fitted: Vec<(String, f64, f64)> = fit
            .names
            .iter()
            .enumerate()
            // The archetype names the fit prints: `lu.B` is `lu_B`.
            .map(|(k, n)| (n.replace('.', "_"), fit.pressure[k], fit.sensitivity[k]))
            .collect();
        sc.set_archetype_harm(&fitted)?;
        // The fitted pressures hold for the LLC the matrix was run on: that is the
        // reference size, measured, in place of the estimate.
        match llc_bytes {
            Some(b) if b > 0 => {
                sc.set_llc_reference_bytes(b)?;
                eprintln!(
                    "LLC reference size: {:.1} MiB, the LLC {} was measured on",
                    b as f64 / (1024.0 * 1024.0),
                    p.display()
                );
            }
            _ => eprintln!(
                "LLC reference size: the scenario's ({} does not say which LLC it was measured on)",
                p.display()
            ),
        }
    }
    sc.validate()?;
    let progress = crate::common::Progress::start(&format!("sim {name}"), "simulating each policy");
    let rows = scenario::run(&sc, &placer_sim::scenario::default_factory);
    let mut oracles = Vec::new();
    if args.oracle || sc.oracle.is_some() {
        let spec = sc.oracle.clone().unwrap_or(scenario::OracleSpec {
            duration_s: 0.5,
            warmup_s: 0.1,
            max_placements: 20_000,
        });
        progress.phase("searching the oracle's placements");
        for v in sc.variant_list() {
            oracles.push(oracle::search(&sc, v, &spec));
        }
    }
    progress.phase("sensitivity runs");
    let sens = scenario::sensitivity(&sc, &placer_sim::scenario::default_factory)
        .map_err(|e| anyhow::anyhow!("sensitivity: {e}"))?;
    drop(progress);
    let report = Report::new(&sc, rows, oracles).with_sensitivity(sens);
    if let Some(path) = &args.plot {
        placer_sim::plot::draw(&report, path)
            .with_context(|| format!("drawing {}", path.display()))?;
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        out!("{}", report.to_text());
        if let Some(path) = &args.plot {
            outln!("\nplot written to {}", path.display());
        }
        if sc.policies.len() < 2 {
            // One bar per panel: say so, and where a comparison is.
            outln!(
                "\none policy ran ({}): nothing is compared here{}",
                sc.policies
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                if sc.name == "seed-001" {
                    "; the seed's effect (its two allocation orders, 1-16 units): \
                     `placer plan --simulate seed-001`"
                } else {
                    "; `--policy A,B` compares policies"
                }
            );
        }
    }
    Ok(())
}

/// A built-in scenario, or a TOML file read as every file argument is
/// ([`crate::common::read_input`]: a regular file, bounded).
pub fn load_scenario(name: &str) -> Result<Scenario> {
    Scenario::load_with(name, |p| {
        crate::common::read_input(p).map_err(|e| format!("{e:#}"))
    })
    .with_context(|| format!("loading scenario {name}"))
}
