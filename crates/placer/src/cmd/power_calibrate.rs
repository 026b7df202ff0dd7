//! `placer power calibrate` (seed 000's power meter): step through every system state
//! (cluster, frequency) with one and with all CPUs of the cluster busy, record watts from
//! the machine's power sensors, and write the table the energy-qos policy uses instead of
//! the model.
//!
//! It needs cpufreq (to set each state) and a power sensor (RAPL, hwmon power, a board
//! sensor). When either is missing it explains what is missing, what placer uses instead
//! (the machine's model, CALIBRATION A), and exits non-zero: no table was produced, and a
//! script must not mistake that for a calibration.

use anyhow::{bail, Context, Result};
use placer_linux::power_meter::{self, RealDriver, SensorMeter, Step};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Filesystem root holding sys/ (/ for this machine).
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// Time measured per state (the first 0.3 s of each are settling time).
    #[arg(long, alias = "seconds", default_value = "2s", value_parser = crate::common::duration_arg)]
    pub duration: Duration,
    /// Write the table here (the format `energy_qos.power_table` reads); default: standard
    /// output.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Puts cpufreq back when calibration ends, with an error or not.
struct RestoreCaps<'a> {
    root: &'a std::path::Path,
    prev: Vec<placer_linux::knobs::cpufreq::CpufreqPrev>,
}

impl Drop for RestoreCaps<'_> {
    fn drop(&mut self) {
        for p in &self.prev {
            if let Err(e) = placer_linux::knobs::cpufreq::restore(self.root, p) {
                eprintln!("placer: restoring cpufreq policy{}: {e}", p.domain);
            }
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    let mut missing = Vec::new();
    if let Some(why) = placer_linux::knobs::cpufreq::unavailable_reason(&args.root) {
        missing.push(why);
    }
    let sensors = power_meter::discover(&args.root);
    if let Some(why) = power_meter::unavailable_reason(&args.root) {
        missing.push(why);
    }
    if !missing.is_empty() {
        bail!(
            "cannot calibrate on this machine:\n  - {}\nplacer's energy-qos policy uses the \
             machine's power model instead (Exynos 5422 tables for an Odroid-XU4-like \
             topology, else a generic V^2 f curve; see docs/energy-qos.md). Calibrate on the \
             hardware itself (e.g. an Odroid-XU3 with its INA231 sensors, or a machine with \
             RAPL and cpufreq).",
            missing.join("\n  - ")
        );
    }
    let topo = placer_linux::topology::read(&args.root)
        .with_context(|| format!("reading the topology under {}", args.root.display()))?;
    if args.duration.as_secs_f64() <= 0.3 {
        bail!("--duration must be above 300ms");
    }
    eprintln!(
        "calibrating with {} sensor(s): {}",
        sensors.len(),
        sensors
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut drv = RealDriver {
        root: args.root.clone(),
        meter: SensorMeter { sensors },
        prev: Vec::new(),
    };
    let result = power_meter::calibrate(
        &topo,
        &mut drv,
        args.duration - Duration::from_millis(300),
        &mut |s: &Step| {
            if s.busy_cpus == 0 {
                eprintln!("idle: {:.3} W", s.watts);
            } else {
                eprintln!(
                    "policy{} @ {} MHz, {} busy: {:.3} W",
                    s.domain,
                    s.khz / 1000,
                    s.busy_cpus,
                    s.watts
                );
            }
        },
    );
    drop(RestoreCaps {
        root: &args.root,
        prev: std::mem::take(&mut drv.prev),
    });
    let (model, _steps) = result.context("calibration")?;
    let text = model.to_table();
    match &args.out {
        Some(p) => {
            std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?;
            eprintln!("wrote {}", p.display());
        }
        None => outln!("{text}"),
    }
    Ok(())
}
