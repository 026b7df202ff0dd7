//! `placer bench verdicts`: how often the verdicts act on nothing, and how often they find a
//! real effect. For each noise model (the log of a metric per interval as an AR(1) process:
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
    #[arg(long, default_value_t = 2000)]
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
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
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

pub fn run(args: Args) -> Result<()> {
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
