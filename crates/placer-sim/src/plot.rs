//! `placer sim --plot FILE.svg|png`: three bar panels per report (the objective's headline
//! with the seeds' min..max as a whisker, busy CPUs, power), one bar per (variant,
//! policy). Text is laid out with the bundled DejaVu Sans Mono for both SVG and PNG.

use crate::report::Report;
use crate::scenario::headline;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");

#[derive(Debug, thiserror::Error)]
#[error("plot: {0}")]
pub struct PlotError(pub String);

fn err<E: std::fmt::Display>(e: E) -> PlotError {
    PlotError(e.to_string())
}

/// Draws `report` to `path` (format from the extension).
pub fn draw(report: &Report, path: &Path) -> Result<(), PlotError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let size = (1200u32, 480u32);
    // Both backends lay text out with ab_glyph; the font is bundled, so this cannot miss.
    // Registering twice is harmless.
    plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
        .map_err(|_| PlotError("bundled font does not load".into()))?;
    match ext.as_str() {
        "svg" => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            panels(report, &root)?;
            root.present().map_err(err)
        }
        "png" => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            panels(report, &root)?;
            root.present().map_err(err)
        }
        other => Err(PlotError(format!(
            "unknown plot format {other:?}: use a .svg or .png file name"
        ))),
    }
}

fn panels<DB: DrawingBackend>(
    report: &Report,
    root: &DrawingArea<DB, Shift>,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let root = root
        .titled(
            &format!("placer sim {} on {}", report.scenario, report.machine),
            ("sans-serif", 20),
        )
        .map_err(err)?;
    let rows: Vec<_> = report.rows.iter().filter(|r| r.error.is_none()).collect();
    let labels: Vec<String> = rows
        .iter()
        .map(|r| match &r.variant {
            Some(v) => format!("{v} {}", r.policy),
            None => r.policy.clone(),
        })
        .collect();
    let head: Vec<(f64, f64, f64)> = rows
        .iter()
        .map(|r| (headline(report.objective, &r.mean), r.spread.0, r.spread.1))
        .collect();
    let cpus: Vec<(f64, f64, f64)> = rows
        .iter()
        .map(|r| {
            (
                r.mean.cpu_busy_cpus,
                r.mean.cpu_busy_cpus,
                r.mean.cpu_busy_cpus,
            )
        })
        .collect();
    let power: Vec<(f64, f64, f64)> = rows
        .iter()
        .map(|r| (r.mean.power_w, r.mean.power_w, r.mean.power_w))
        .collect();
    let areas = root.split_evenly((1, 3));
    let head_name = format!("{:?}", report.objective);
    bars(&areas[0], &head_name, &labels, &head)?;
    bars(&areas[1], "busy CPUs", &labels, &cpus)?;
    bars(&areas[2], "power W", &labels, &power)?;
    Ok(())
}

fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    labels: &[String],
    vals: &[(f64, f64, f64)],
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    let top = vals
        .iter()
        .map(|v| v.0.max(v.2))
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.15;
    let n = labels.len().max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..n as f64, 0.0..top)
        .map_err(err)?;
    let lbl = labels.to_vec();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&move |x: &f64| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.26 && i < lbl.len() {
                lbl[i].clone()
            } else {
                String::new()
            }
        })
        .x_label_style(("sans-serif", 10))
        .draw()
        .map_err(err)?;
    let palette = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
    chart
        .draw_series(vals.iter().enumerate().map(|(i, v)| {
            let c = palette[i % palette.len()].mix(0.6);
            Rectangle::new([(i as f64 + 0.15, 0.0), (i as f64 + 0.85, v.0)], c.filled())
        }))
        .map_err(err)?;
    chart
        .draw_series(
            vals.iter()
                .enumerate()
                .filter(|(_, v)| v.2 > v.1)
                .map(|(i, v)| {
                    PathElement::new(
                        vec![(i as f64 + 0.5, v.1), (i as f64 + 0.5, v.2)],
                        BLACK.stroke_width(2),
                    )
                }),
        )
        .map_err(err)?;
    Ok(())
}
