//! `placer power fit FILE`: fit P = Pn + Ps*packages + Pc*cores + Pt*siblings (seed 001)
//! from power measurements, by least squares after the paper's sampling rule (per point:
//! drop the largest and smallest sample, average the rest).
//!
//! Input: CSV, one sample per line, `#` comments allowed, with a header naming the columns:
//! - `packages,cores,siblings,watts`: busy packages, busy physical cores, busy SMT
//!   siblings beyond a core's first thread;
//! - `units,watts`: busy hardware threads, turned into (packages, cores, siblings) by
//!   taking the first `units` CPUs of `--policy` (default `speedup`, the Linux default
//!   order the paper measured under) on `--machine`/`--root`.
//!
//! Without a header, 4 columns are read as the first form and 2 as the second.
//!
//! Or a `placer record` file (JSON lines): each interval with a whole-machine power
//! reading (RAPL or another power source) is one sample; its usage is the set of CPUs at
//! least `--busy` busy over the interval, counted as packages, cores and siblings on the
//! topology of `--machine`/`--root` (the recorded machine's).

use crate::common::MachineArgs;
use anyhow::{bail, Context, Result};
use placer_core::alloc::{self, AllocOptions, AllocPolicy};
use placer_core::observation::Observation;
use placer_core::power_model::{self, Measurement, Usage, COEFFICIENTS};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Measurements: CSV, one sample per line, `#` comments allowed, header
    /// `packages,cores,siblings,watts` (busy packages, busy physical cores, busy SMT siblings
    /// beyond a core's first thread) or `units,watts` (busy hardware threads, taken in
    /// --policy's order on --machine/--root); without a header 4 columns are the first form
    /// and 2 the second. Or a `placer record` file (JSON lines with power readings).
    pub file: std::path::PathBuf,
    /// For `units,watts` rows: the order the units were taken in.
    #[arg(long, default_value = "speedup", value_parser = crate::common::alloc_policy_arg())]
    pub policy: AllocPolicy,
    #[command(flatten)]
    pub machine: MachineArgs,
    /// Record files: a CPU counts as busy in an interval at this busy fraction.
    #[arg(long, default_value_t = 0.5)]
    pub busy: f64,
    /// Name given to the fitted model.
    #[arg(long, default_value = "fit")]
    pub name: String,
    /// Print JSON (usable as `--power-model FILE` by plan and run).
    #[arg(long)]
    pub json: bool,
}

/// Rows of a measurement file: either full usage or unit counts.
#[derive(Debug, Clone, PartialEq)]
pub enum Rows {
    Usage(Vec<Measurement>),
    Units(Vec<(usize, f64)>),
}

/// Parses the CSV text (pure).
pub fn parse_csv(text: &str) -> Result<Rows> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .peekable();
    let Some(&(_, first)) = lines.peek() else {
        bail!("no measurements in the file");
    };
    let cells = |l: &str| {
        l.split(',')
            .map(|c| c.trim().to_ascii_lowercase())
            .collect::<Vec<_>>()
    };
    let head = cells(first);
    let has_header = head.iter().any(|c| c.parse::<f64>().is_err());
    let cols: Vec<String> = if has_header {
        lines.next();
        head
    } else if head.len() == 4 {
        ["packages", "cores", "siblings", "watts"]
            .map(String::from)
            .to_vec()
    } else if head.len() == 2 {
        ["units", "watts"].map(String::from).to_vec()
    } else {
        bail!(
            "line 1 has {} columns and no header: expected packages,cores,siblings,watts or \
             units,watts",
            head.len()
        );
    };
    let idx = |name: &str| {
        cols.iter()
            .position(|c| c == name || c == &format!("{name}_w"))
    };
    let watts = idx("watts")
        .or_else(|| idx("power"))
        .context("no `watts` column in the header")?;
    let usage_cols = (idx("packages"), idx("cores"), idx("siblings"));
    let units_col = idx("units");
    let mut usage = Vec::new();
    let mut units = Vec::new();
    for (no, l) in lines {
        let c = cells(l);
        let num = |i: usize| -> Result<f64> {
            let s = c
                .get(i)
                .with_context(|| format!("line {no}: missing column {}", i + 1))?;
            s.parse::<f64>()
                .with_context(|| format!("line {no}: {s:?} is not a number"))
        };
        let count = |i: usize| -> Result<u32> {
            let v = num(i)?;
            if v < 0.0 || v.fract() != 0.0 || v > f64::from(u32::MAX) {
                bail!("line {no}: {v} is not a count");
            }
            Ok(v as u32)
        };
        let w = num(watts)?;
        match (usage_cols, units_col) {
            ((Some(p), Some(k), Some(s)), _) => usage.push(Measurement {
                usage: Usage {
                    packages: count(p)?,
                    cores: count(k)?,
                    siblings: count(s)?,
                },
                watts: w,
            }),
            (_, Some(u)) => units.push((count(u)? as usize, w)),
            _ => bail!(
                "the header needs packages,cores,siblings,watts or units,watts (got {})",
                cols.join(",")
            ),
        }
    }
    if usage.is_empty() && units.is_empty() {
        bail!("no measurements in the file");
    }
    Ok(if units.is_empty() {
        Rows::Usage(usage)
    } else {
        Rows::Units(units)
    })
}

pub fn run(args: Args) -> Result<()> {
    let text = crate::common::read_input(&args.file)?;
    let t = text.trim_start();
    let data = if t.starts_with('{') {
        let mut r = placer_linux::record::open(&args.file)
            .with_context(|| format!("opening {} as a record file", args.file.display()))?;
        let samples = r.read_all()?;
        let obs: Vec<Observation> = samples
            .windows(2)
            .map(|w| Observation::new(&w[0], &w[1]))
            .collect();
        let topo = args.machine.topology()?;
        let (data, without) = measurements_from_observations(&topo, &obs, args.busy);
        if without > 0 {
            let power_sources: Vec<String> = r
                .header
                .sources
                .sources
                .iter()
                .filter(|s| {
                    matches!(
                        s.name,
                        placer_core::sample::SourceKind::Rapl
                            | placer_core::sample::SourceKind::Hwmon
                    )
                })
                .map(|s| format!("{}: {}", s.name, s.detail))
                .collect();
            eprintln!(
                "placer power fit: {without} of {} intervals have no power reading ({})",
                obs.len(),
                power_sources.join("; ")
            );
        }
        if data.is_empty() {
            bail!(
                "{}: no interval with a power reading; record on a machine with RAPL or a \
                 power meter, or give a CSV",
                args.file.display()
            );
        }
        data
    } else {
        csv_measurements(&args, &text)?
    };
    let fit = power_model::fit(&args.name, &data)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&fit)?);
        return Ok(());
    }
    out!("{}", render(&fit));
    Ok(())
}

/// One measurement per observation with a power reading: the busy CPUs' usage and the
/// watts. Also returns how many observations had no power reading.
pub fn measurements_from_observations(
    topo: &placer_core::Topology,
    obs: &[Observation],
    busy: f64,
) -> (Vec<Measurement>, usize) {
    let opts = AllocOptions::default();
    let mut out = Vec::new();
    let mut without = 0;
    for o in obs {
        let Some(w) = o.power_w else {
            without += 1;
            continue;
        };
        let cpus: Vec<u32> = o
            .cpus
            .iter()
            .filter(|c| c.util >= busy)
            .map(|c| c.cpu)
            .collect();
        let (usage, _) = alloc::usage_of(topo, &cpus, &opts);
        out.push(Measurement { usage, watts: w });
    }
    (out, without)
}

fn csv_measurements(args: &Args, text: &str) -> Result<Vec<Measurement>> {
    let data = match parse_csv(text).with_context(|| args.file.display().to_string())? {
        Rows::Usage(v) => v,
        Rows::Units(v) => {
            let topo = args.machine.topology()?;
            let opts = AllocOptions::default();
            let order = alloc::order(&topo, args.policy, &opts);
            v.into_iter()
                .map(|(n, w)| {
                    if n > order.len() {
                        bail!("{n} units but {} has {} CPUs", topo.source, order.len());
                    }
                    let (usage, _) = alloc::usage_of(&topo, &order[..n], &opts);
                    Ok(Measurement { usage, watts: w })
                })
                .collect::<Result<Vec<_>>>()?
        }
    };
    Ok(data)
}

pub fn render(f: &power_model::Fit) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "P = Pn + Ps*packages + Pc*cores + Pt*siblings, from {} samples at {} points \
         (per point: max and min dropped, rest averaged)",
        f.samples,
        f.points.len()
    );
    for (i, v) in f.model.coefficients().iter().enumerate() {
        match &f.stderr_w {
            Some(se) => {
                let _ = writeln!(
                    o,
                    "  {} = {:8.2} W  +/- {:.2} W (1 s.e.)",
                    COEFFICIENTS[i], v, se[i]
                );
            }
            None => {
                let _ = writeln!(
                    o,
                    "  {} = {:8.2} W  (exactly determined: no uncertainty)",
                    COEFFICIENTS[i], v
                );
            }
        }
    }
    let _ = writeln!(o, "rms residual {:.2} W", f.rms_residual_w);
    let _ = writeln!(
        o,
        "{:>4} {:>5} {:>4} {:>7} {:>9} {:>9}",
        "pkgs", "cores", "sibs", "samples", "watts", "residual"
    );
    for p in &f.points {
        let _ = writeln!(
            o,
            "{:>4} {:>5} {:>4} {:>7} {:>9.2} {:>9.2}",
            p.usage.packages, p.usage.cores, p.usage.siblings, p.samples, p.watts, p.residual_w
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_forms_with_and_without_header() {
        let r = parse_csv("# Table 3\npackages,cores,siblings,watts\n0,0,0,76.1\n1,1,0,110.9\n")
            .unwrap();
        match r {
            Rows::Usage(v) => {
                assert_eq!(v.len(), 2);
                assert_eq!(v[1].usage.cores, 1);
                assert_eq!(v[1].watts, 110.9);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            parse_csv("units, watts_w\n1, 111\n2,120.5").unwrap(),
            Rows::Units(vec![(1, 111.0), (2, 120.5)])
        );
        assert_eq!(parse_csv("1,111\n").unwrap(), Rows::Units(vec![(1, 111.0)]));
        assert!(matches!(parse_csv("1,1,0,110\n").unwrap(), Rows::Usage(_)));
    }

    #[test]
    fn record_intervals_become_usage_points() {
        use placer_core::observation::CpuObs;
        let topo = placer_core::machines::machine("dell-c6100").unwrap();
        let busy = |cpus: &[u32], power: Option<f64>| Observation {
            interval_s: 1.0,
            cpus: (0..16)
                .map(|c| CpuObs {
                    cpu: c,
                    util: if cpus.contains(&c) { 0.97 } else { 0.02 },
                    ..Default::default()
                })
                .collect(),
            power_w: power,
            ..Default::default()
        };
        let obs = vec![
            busy(&[], Some(76.0)),
            busy(&[0, 8], Some(113.6)),
            busy(&[0, 1], Some(145.0)),
            busy(&[0], None),
        ];
        let (m, without) = measurements_from_observations(&topo, &obs, 0.5);
        assert_eq!(without, 1);
        let u: Vec<(u32, u32, u32)> = m
            .iter()
            .map(|x| (x.usage.packages, x.usage.cores, x.usage.siblings))
            .collect();
        // CPUs 0 and 8 are one core's two threads; 0 and 1 are two packages.
        assert_eq!(u, vec![(0, 0, 0), (1, 1, 1), (2, 2, 0)]);
        assert_eq!(m[1].watts, 113.6);
    }

    #[test]
    fn rejects_bad_input_with_the_line() {
        let e = parse_csv("units,watts\n1,abc\n").unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
        let e = parse_csv("units,watts\n1.5,100\n").unwrap_err().to_string();
        assert!(e.contains("not a count"), "{e}");
        assert!(parse_csv("").is_err());
        assert!(parse_csv("a,b,c\n1,2,3\n").is_err());
        assert!(parse_csv("1,2,3\n").is_err());
    }
}
