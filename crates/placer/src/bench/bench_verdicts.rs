//! `placer bench verdicts`: how often the judge acts on nothing, and how often it finds a
//! real effect. By default it stages simulated moves through the daemon's judge
//! (`placer_core::verifier::calibrate`: paired probing) for each staged move of
//! `verifier::staged_grid` (placebo moves timed on a trigger and not, harmful ones of -10,
//! -20 and -40%, a +20% one; alone, with net-affinity's guard, and judged together) at the
//! noise measured on this VM, beside the before/after rule it replaced on the same series;
//! `--real` stages real moves on this machine (`bench_verdicts_real`). `--rule before-after`
//! prints the old rule's grid: for each noise model (the log of a metric per interval as an AR(1) process:
//! sd `sigma`, lag-1 autocorrelation `rho`) and each true effect (0, +-3, +-5, +-10%), it
//! judges `--trials` moves with `placer_core::verdict::calibrate` (the engine's own test, its
//! default window, horizon and `min_effect` unless given) and prints the rates of kept,
//! undone and beyond noise, beside plain Welch's (the test before). At effect 0, kept +
//! undone is the false-positive rate; at +-10%, kept (undone) is the power. The default
//! noise models are a grid from none to strong correlation and the two metrics measured on
//! this VM by `traces/verdict_noise.py` (docs/daemon.md says how).

use anyhow::{bail, Context, Result};
use placer_core::verdict::{calibrate, CalibrationRow, NoiseModel, CALIBRATION_EFFECTS};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Moves judged per noise model and effect.
    #[arg(long, default_value_t = 1000)]
    pub trials: usize,
    /// Noise models as SIGMA:RHO (repeatable; default: the grid and this VM's measurement).
    #[arg(long, value_name = "SIGMA:RHO")]
    pub noise: Vec<String>,
    /// Intervals before the move (default: `[verify] window_intervals`' default).
    #[arg(long)]
    pub window: Option<usize>,
    /// Intervals after it (default: `[verify] horizon_intervals`' default).
    #[arg(long)]
    pub horizon: Option<usize>,
    /// The least relative change acted on (default: `[verify] min_effect`'s default).
    #[arg(long)]
    pub min_effect: Option<f64>,
    /// Seed of the series.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Which rule: `probe` (the judge) or `before-after` (the rule before it).
    #[arg(long, value_enum, default_value_t = Rule::Probe)]
    pub rule: Rule,
    /// Stage real moves on this machine instead (bench_verdicts_real: a worker pinned next
    /// to a hog, or not), judged by the daemon's judge from the daemon's sampler.
    #[arg(long)]
    pub real: bool,
    /// With --real: moves per class.
    #[arg(long, default_value_t = 100)]
    pub moves: usize,
    /// With --real: the interval between samples.
    #[arg(long, default_value = "500ms", value_parser = crate::common::duration_arg)]
    pub interval: std::time::Duration,
    /// With --real: stop after this long, reporting what was measured.
    #[arg(long, default_value = "2h", value_parser = crate::common::duration_arg)]
    pub max_duration: std::time::Duration,
    /// With --real: also keep the result in this state dir for `placer report`.
    #[arg(long, value_name = "STATE_DIR", num_args = 0..=1, default_missing_value = "/run/placer")]
    pub save: Option<std::path::PathBuf>,
    /// With --real: write the JSON to this file too (again after each class, so a run cut
    /// off keeps the classes it finished).
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// With --real: the classes, in order (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub classes: Vec<super::bench_verdicts_real::Class>,
    /// With --real: the nice value of the worker, the hog and the judging thread (-20 so
    /// that the staged effect survives other load; below 0 needs root).
    #[arg(long, default_value_t = -20, allow_hyphen_values = true)]
    pub nice: i32,
    /// Internal: spin at this duty cycle (the staged moves' worker and hog).
    #[arg(long, hide = true)]
    pub spin: Option<f64>,
    /// Internal: the spinner's time bound.
    #[arg(long, hide = true, default_value_t = 600)]
    pub spin_seconds: u64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `--real`: the staged moves, printed and kept where asked.
fn run_real(args: &Args) -> Result<()> {
    use super::bench_verdicts_real as real;
    if args.moves == 0 {
        bail!("--moves must be at least 1");
    }
    let mut settings =
        placer_core::config::Verify::default().probe(placer_core::policies::PolicyKind::SmtEnergy);
    if let Some(m) = args.min_effect {
        settings.min_effect = m;
    }
    let run = real::RealRun {
        moves: args.moves,
        classes: if args.classes.is_empty() {
            real::Class::ALL.to_vec()
        } else {
            args.classes.clone()
        },
        interval: args.interval,
        max_duration: args.max_duration,
        nice: args.nice,
        settings,
    };
    let write_out = |saved: &real::Saved| -> Result<()> {
        let Some(path) = &args.out else { return Ok(()) };
        let json = serde_json::to_string_pretty(saved)?;
        std::fs::write(path, format!("{json}\n"))
            .with_context(|| format!("writing {}", path.display()))
    };
    let mut failed = None;
    let saved = real::run_real(&run, &mut |s| {
        if let Err(e) = write_out(s) {
            failed.get_or_insert(e);
        }
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    write_out(&saved)?;
    let json = serde_json::to_string_pretty(&saved)?;
    if let Some(dir) = &args.save {
        let path = dir.join(real::SAVED);
        std::fs::write(&path, format!("{json}\n"))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        outln!("{json}");
        return Ok(());
    }
    outln!(
        "staged real moves, {} ms intervals, at nice {}, judged by the daemon's judge (settle {}, looks at {} and {} pairs, alpha {}){}",
        saved.interval_ms,
        saved.nice,
        settings.settle_intervals,
        settings.first_look_pairs,
        settings.probe_pairs,
        settings.alpha,
        if saved.cut_short { "; cut short by --max-duration" } else { "" }
    );
    for c in &saved.classes {
        outln!(
            "  {:<8} intended on/off {:.3}, measured {:.3}: {} moves, kept {} ({:.0}..{:.0}%), undone {} ({:.0}..{:.0}%), inconclusive {}, acted {:.0}..{:.0}%, median {:.1} s to the verdict (longest {:.1})",
            format!("{:?}", c.class),
            c.intended_ratio,
            c.median_measured_ratio,
            c.moves,
            c.kept,
            100.0 * c.kept_ci95.0,
            100.0 * c.kept_ci95.1,
            c.undone,
            100.0 * c.undone_ci95.0,
            100.0 * c.undone_ci95.1,
            c.inconclusive,
            100.0 * c.acted_ci95.0,
            100.0 * c.acted_ci95.1,
            c.median_s_to_verdict,
            c.max_s_to_verdict
        );
    }
    Ok(())
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    Probe,
    BeforeAfter,
}

/// The grid around it: no correlation, moderate, strong.
const GRID: [(f64, f64); 5] = [
    (0.05, 0.0),
    (0.05, 0.5),
    (0.05, 0.8),
    (0.10, 0.5),
    (0.02, 0.8),
];

#[derive(Debug, serde::Serialize)]
struct Model {
    name: String,
    noise: NoiseModel,
    rows: Vec<CalibrationRow>,
}

fn parse_noise(s: &str) -> Result<NoiseModel> {
    let (a, b) = s
        .split_once(':')
        .with_context(|| format!("--noise {s:?}: SIGMA:RHO"))?;
    let sigma_log: f64 = a.parse().with_context(|| format!("--noise {s:?}: sigma"))?;
    let rho: f64 = b.parse().with_context(|| format!("--noise {s:?}: rho"))?;
    if sigma_log <= 0.0 || sigma_log >= 5.0 || sigma_log.is_nan() || !(0.0..1.0).contains(&rho) {
        bail!("--noise {s:?}: sigma in (0, 5), rho in [0, 1)");
    }
    Ok(NoiseModel { sigma_log, rho })
}

/// The staged grid through the judge, at each noise model.
fn run_probe(args: &Args, models: Vec<(String, NoiseModel)>) -> Result<()> {
    use placer_core::verifier::{calibrate as probe, staged_grid};
    let d = placer_core::config::Verify::default();
    let mut settings = d.probe(placer_core::policies::PolicyKind::SmtEnergy);
    if let Some(m) = args.min_effect {
        settings.min_effect = m;
    }
    let mut out = Vec::new();
    for (i, (name, noise)) in models.iter().enumerate() {
        let rows: Vec<_> = staged_grid()
            .into_iter()
            .enumerate()
            .map(|(j, staged)| {
                let seed = args.seed ^ ((i as u64) << 32) ^ j as u64;
                probe(*noise, staged, args.trials, &settings, seed)
            })
            .collect();
        out.push((name.clone(), *noise, rows));
    }
    if args.json {
        let models: Vec<_> = out
            .iter()
            .map(|(name, noise, rows)| {
                serde_json::json!({
                    "name": name,
                    "noise": noise,
                    "rows": rows.iter().map(|r| serde_json::json!({
                        "calibration": r,
                        "acted_ci95": super::bench_verdicts_real::ci95(r.acted(), r.trials),
                        "undone_ci95": super::bench_verdicts_real::ci95(r.undone, r.trials),
                        "kept_ci95": super::bench_verdicts_real::ci95(r.kept, r.trials),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "rule": "probe",
                "trials": args.trials,
                "settings": settings,
                "seed": args.seed,
                "models": models,
            }))?
        );
        return Ok(());
    }
    outln!(
        "{} simulated moves per row through the judge (paired probe: settle {}, looks at {} and {} pairs, alpha {}, min_effect {}); \
         kept / undone / inconclusive in %, acted with its 95% Clopper-Pearson interval, median intervals to the verdict; \
         after the bar, the before/after rule on the same series (kept / undone %)",
        args.trials,
        settings.settle_intervals,
        settings.first_look_pairs,
        settings.probe_pairs,
        settings.alpha,
        settings.min_effect
    );
    let pct = |n: usize| 100.0 * n as f64 / args.trials as f64;
    for (name, noise, rows) in &out {
        outln!(
            "{name} (sigma {:.3}, rho {:.2})",
            noise.sigma_log,
            noise.rho
        );
        for r in rows {
            let (lo, hi) = super::bench_verdicts_real::ci95(r.acted(), r.trials);
            outln!(
                "  {:<12} x{} effect {:+4.0}%{:<8}: kept {:5.1} undone {:5.1} inconclusive {:5.1} acted {:5.1} ({:.1}..{:.1}) in {:>4.0} intervals | before/after kept {:5.1} undone {:5.1}",
                r.staged.policy.to_string(),
                r.staged.members,
                r.staged.effect * 100.0,
                if r.staged.trigger { " trigger" } else { "" },
                pct(r.kept),
                pct(r.undone),
                pct(r.inconclusive),
                pct(r.acted()),
                100.0 * lo,
                100.0 * hi,
                r.median_intervals_to_verdict,
                pct(r.before_after_kept),
                pct(r.before_after_undone),
            );
        }
    }
    Ok(())
}

pub fn run(args: Args) -> Result<()> {
    if let Some(duty) = args.spin {
        return super::bench_verdicts_real::spin(
            duty,
            args.nice,
            std::time::Duration::from_secs(args.spin_seconds),
        );
    }
    if args.real {
        return run_real(&args);
    }
    if args.trials == 0 {
        bail!("--trials must be at least 1");
    }
    let d = placer_core::config::Verify::default();
    let window = args.window.unwrap_or(d.window_intervals as usize);
    let horizon = args.horizon.unwrap_or(d.horizon_intervals as usize);
    let min_effect = args.min_effect.unwrap_or(d.min_effect);
    if window < 2 || horizon < 2 {
        bail!("--window and --horizon: at least 2");
    }
    let models: Vec<(String, NoiseModel)> = if args.noise.is_empty() {
        GRID.iter()
            .map(|&(sigma_log, rho)| {
                (
                    format!("grid sigma {sigma_log} rho {rho}"),
                    NoiseModel { sigma_log, rho },
                )
            })
            .chain(
                placer_core::verdict::VM_NOISE
                    .iter()
                    .map(|&(n, sigma_log, rho)| (n.to_string(), NoiseModel { sigma_log, rho })),
            )
            .collect()
    } else {
        args.noise
            .iter()
            .map(|s| Ok((s.clone(), parse_noise(s)?)))
            .collect::<Result<_>>()?
    };
    if args.rule == Rule::Probe {
        let models = if args.noise.is_empty() {
            // The judge's rows at this VM's measured noise (the grid is the old rule's).
            models
                .into_iter()
                .filter(|(n, _)| n.starts_with("vm "))
                .collect()
        } else {
            models
        };
        return run_probe(&args, models);
    }
    let out: Vec<Model> = models
        .into_iter()
        .enumerate()
        .map(|(i, (name, noise))| Model {
            rows: CALIBRATION_EFFECTS
                .iter()
                .enumerate()
                .map(|(j, &e)| {
                    let seed = args.seed ^ ((i as u64) << 32) ^ j as u64;
                    calibrate(noise, e, args.trials, window, horizon, min_effect, seed)
                })
                .collect(),
            name,
            noise,
        })
        .collect();
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "trials": args.trials,
                "window": window,
                "horizon": horizon,
                "min_effect": min_effect,
                "seed": args.seed,
                "models": out,
            }))?
        );
        return Ok(());
    }
    outln!(
        "{} trials per cell; window {window}, horizon {horizon} intervals, min_effect {min_effect}; \
         kept/undone/beyond noise in %, plain Welch's acted/beyond noise after the bar",
        args.trials
    );
    let pct = |n: usize| 100.0 * n as f64 / args.trials as f64;
    for m in &out {
        outln!(
            "{} (sigma {:.3}, rho {:.2})",
            m.name,
            m.noise.sigma_log,
            m.noise.rho
        );
        for r in &m.rows {
            outln!(
                "  effect {:+4.0}%: kept {:5.1} undone {:5.1} beyond noise {:5.1} | Welch acted {:5.1} beyond noise {:5.1}",
                r.effect * 100.0,
                pct(r.kept),
                pct(r.undone),
                pct(r.beyond_noise),
                pct(r.welch_acted),
                pct(r.welch_beyond_noise)
            );
        }
    }
    Ok(())
}
