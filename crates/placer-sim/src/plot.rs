//! `placer sim --plot FILE.svg|png`: three bar panels per report (the objective's headline
//! with the seeds' min..max as a whisker, busy CPUs, power). Bars are grouped by variant
//! and coloured by policy, with a legend naming the policies; panel titles say what is
//! plotted and in which unit. Text is laid out with the bundled DejaVu Sans Mono for both
//! SVG and PNG.
//!
//! The x labels are placed by this module, not by the chart's mesh: each label's extent is
//! measured with the font, labels too wide for their slot are turned vertical, and the boxes
//! actually drawn are returned in [`PlotSummary`] so that a test can check that none overlap.

use crate::report::Report;
use crate::scenario::{headline, Objective};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

mod glyphs;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");

/// Ten colours that stay distinct next to each other (the Tableau 10 palette's values).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

const LABEL_FONT_PX: u32 = 12;

#[derive(Debug, thiserror::Error)]
#[error("plot: {0}")]
pub struct PlotError(pub String);

fn err<E: std::fmt::Display>(e: E) -> PlotError {
    PlotError(e.to_string())
}

/// What was drawn, for checks: panel titles, the legend's entries and every x label's box
/// in image pixels `[x0, y0, x1, y1]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlotSummary {
    pub titles: Vec<String>,
    pub legend: Vec<String>,
    pub label_boxes: Vec<[i32; 4]>,
}

impl PlotSummary {
    /// Pairs of x labels whose boxes intersect (none in a readable plot).
    pub fn overlapping_labels(&self) -> Vec<(usize, usize)> {
        let b = &self.label_boxes;
        let mut out = Vec::new();
        for i in 0..b.len() {
            for j in i + 1..b.len() {
                let (p, q) = (b[i], b[j]);
                if p[0] < q[2] && q[0] < p[2] && p[1] < q[3] && q[1] < p[3] {
                    out.push((i, j));
                }
            }
        }
        out
    }
}

/// The headline panel's title, with its unit and direction.
pub fn objective_title(obj: Objective) -> &'static str {
    match obj {
        Objective::Throughput => "throughput (Gbit/s, or work/s), higher is better",
        Objective::Makespan => "makespan (s), lower is better",
        Objective::Energy => "energy (J), lower is better",
        Objective::PerfPerWatt => "performance per watt (work/J), higher is better",
        Objective::CpuEfficiency => "throughput per busy CPU (Gbit/s per CPU), higher is better",
        Objective::QosPerWatt => "QoS met per watt (1/W), higher is better",
    }
}

/// The image formats a plot can be written in, by file extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlotFormat {
    Svg,
    Png,
}

impl PlotFormat {
    /// The format of `path` from its extension, or why it cannot be a plot's file: an
    /// unknown extension, or a directory that does not exist. Cheap: commands call it
    /// before their work, so a typo does not cost a whole run.
    pub fn of(path: &Path) -> Result<PlotFormat, PlotError> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        let format = match ext.as_str() {
            "svg" => PlotFormat::Svg,
            "png" => PlotFormat::Png,
            other => {
                return Err(PlotError(format!(
                    "unknown plot format {other:?} of {}: use a .svg or .png file name",
                    path.display()
                )))
            }
        };
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if !dir.is_dir() {
            return Err(PlotError(format!(
                "cannot write {}: no directory {}",
                path.display(),
                dir.display()
            )));
        }
        Ok(format)
    }
}

/// Draws `report` to `path` (format from the extension).
pub fn draw(report: &Report, path: &Path) -> Result<PlotSummary, PlotError> {
    let format = PlotFormat::of(path)?;
    let size = (1500u32, 560u32);
    // Both backends lay text out with ab_glyph; the font is bundled, so this cannot miss.
    // Registering twice is harmless.
    plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
        .map_err(|_| PlotError("bundled font does not load".into()))?;
    match format {
        PlotFormat::Svg => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            let s = panels(report, &root)?;
            root.present().map_err(err)?;
            Ok(s)
        }
        PlotFormat::Png => {
            let font = ab_glyph::FontRef::try_from_slice(FONT)
                .map_err(|_| PlotError("bundled font does not load".into()))?;
            let root = glyphs::FixedText {
                inner: BitMapBackend::new(path, size),
                font,
            }
            .into_drawing_area();
            let s = panels(report, &root)?;
            root.present().map_err(err)?;
            Ok(s)
        }
    }
}

/// One bar: its group (variant), its policy (colour) and (value, low, high).
struct Bar {
    group: usize,
    policy: usize,
    v: (f64, f64, f64),
}

fn panels<DB: DrawingBackend>(
    report: &Report,
    root: &DrawingArea<DB, Shift>,
) -> Result<PlotSummary, PlotError>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let root = root
        .titled(
            &format!("placer sim {}: {}", report.scenario, report.machine),
            ("sans-serif", 20),
        )
        .map_err(err)?;
    let rows: Vec<_> = report.rows.iter().filter(|r| r.error.is_none()).collect();
    let mut groups: Vec<String> = Vec::new();
    let mut policies: Vec<String> = Vec::new();
    let mut idx = Vec::new();
    for r in &rows {
        let g = r.variant.clone().unwrap_or_default();
        let gi = groups.iter().position(|x| *x == g).unwrap_or_else(|| {
            groups.push(g);
            groups.len() - 1
        });
        let pi = policies
            .iter()
            .position(|x| *x == r.policy.to_string())
            .unwrap_or_else(|| {
                policies.push(r.policy.to_string());
                policies.len() - 1
            });
        idx.push((gi, pi));
    }
    let make = |f: &dyn Fn(&crate::scenario::PolicyResult) -> (f64, f64, f64)| -> Vec<Bar> {
        rows.iter()
            .zip(&idx)
            .map(|(r, &(group, policy))| Bar {
                group,
                policy,
                v: f(r),
            })
            .collect()
    };
    let head = make(&|r| (headline(report.objective, &r.mean), r.spread.0, r.spread.1));
    let cpus = make(&|r| {
        (
            r.mean.cpu_busy_cpus,
            r.mean.cpu_busy_cpus,
            r.mean.cpu_busy_cpus,
        )
    });
    let power = make(&|r| (r.mean.power_w, r.mean.power_w, r.mean.power_w));
    // Without variants, each bar is labelled with its policy; with them, each group with
    // its variant (the legend names the policies).
    let labels: Vec<String> = if groups.len() == 1 && groups[0].is_empty() {
        policies.clone()
    } else {
        groups.clone()
    };
    let areas = root.split_evenly((1, 3));
    let titles = [
        objective_title(report.objective).to_string(),
        "busy CPUs (CPUs)".to_string(),
        "power (W)".to_string(),
    ];
    let mut summary = PlotSummary {
        titles: titles.to_vec(),
        legend: policies.clone(),
        ..Default::default()
    };
    for (k, (area, bars_k)) in areas.iter().zip([&head, &cpus, &power]).enumerate() {
        let boxes = panel(
            area,
            &titles[k],
            &labels,
            groups.len(),
            &policies,
            bars_k,
            k == 0,
        )?;
        summary.label_boxes.extend(boxes);
    }
    Ok(summary)
}

/// A tick value without a useless ".0" and with at most 3 decimals.
fn fmt_tick(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

#[allow(clippy::too_many_arguments)]
fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    labels: &[String],
    n_groups: usize,
    policies: &[String],
    bars: &[Bar],
    with_legend: bool,
) -> Result<Vec<[i32; 4]>, PlotError>
where
    DB::ErrorType: 'static,
{
    let top = bars
        .iter()
        .map(|b| b.v.0.max(b.v.2))
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * if with_legend {
            1.2 + 0.12 * policies.len() as f64
        } else {
            1.15
        };
    let font: TextStyle = ("sans-serif", LABEL_FONT_PX).into_font().into();
    let (panel_w, _) = area.dim_in_pixel();
    let y_area = 60u32;
    // Measure the labels: a label wider than its slot is drawn vertically.
    let slot_px = (panel_w.saturating_sub(y_area + 20)) as f64 / labels.len().max(1) as f64;
    let sizes: Vec<(u32, u32)> = labels
        .iter()
        .map(|l| area.estimate_text_size(l, &font).unwrap_or((0, 0)))
        .collect();
    let vertical = sizes.iter().any(|&(w, _)| w as f64 > slot_px * 0.9);
    let max_w = sizes.iter().map(|s| s.0).max().unwrap_or(0);
    let x_area = if vertical {
        (max_w + 16).clamp(40, 220)
    } else {
        40
    };
    let n_x = n_groups.max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 15))
        .margin(10)
        .x_label_area_size(x_area)
        .y_label_area_size(y_area)
        .build_cartesian_2d(0.0..n_x, 0.0..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_labels(6)
        .y_label_formatter(&|v: &f64| fmt_tick(*v))
        .y_label_style(("sans-serif", LABEL_FONT_PX))
        .draw()
        .map_err(err)?;
    let per_group = policies.len().max(1) as f64;
    let bar_x = |b: &Bar| -> (f64, f64) {
        let w = 0.8 / per_group;
        let x0 = b.group as f64 + 0.1 + w * b.policy as f64;
        (x0, x0 + w)
    };
    for (pi, name) in policies.iter().enumerate() {
        let colour = PALETTE[pi % PALETTE.len()];
        let series = chart
            .draw_series(bars.iter().filter(|b| b.policy == pi).map(|b| {
                let (x0, x1) = bar_x(b);
                Rectangle::new([(x0, 0.0), (x1, b.v.0)], colour.filled())
            }))
            .map_err(err)?;
        if with_legend {
            series.label(name.as_str()).legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled())
            });
        }
    }
    chart
        .draw_series(bars.iter().filter(|b| b.v.2 > b.v.1).map(|b| {
            let (x0, x1) = bar_x(b);
            let xm = (x0 + x1) / 2.0;
            PathElement::new(vec![(xm, b.v.1), (xm, b.v.2)], BLACK.stroke_width(2))
        }))
        .map_err(err)?;
    if with_legend {
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    }
    // The labels, under their bar (no variants) or group centre.
    let one_group = n_groups <= 1 && labels.len() == policies.len() && labels.len() > 1;
    let (base_x, base_y) = area.get_base_pixel();
    let mut boxes = Vec::new();
    for (i, (label, &(w, h))) in labels.iter().zip(&sizes).enumerate() {
        let x = if one_group {
            let b = Bar {
                group: 0,
                policy: i,
                v: (0.0, 0.0, 0.0),
            };
            let (x0, x1) = bar_x(&b);
            (x0 + x1) / 2.0
        } else {
            i as f64 + 0.5
        };
        let (px, py) = chart.backend_coord(&(x, 0.0));
        let (px, py) = (px - base_x, py - base_y + 6);
        let (w, h) = (w as i32, h as i32);
        if vertical {
            let style = font
                .clone()
                .transform(FontTransform::Rotate90)
                .pos(Pos::new(HPos::Left, VPos::Center));
            area.draw_text(label, &style, (px, py)).map_err(err)?;
            boxes.push([
                px - h / 2 + base_x,
                py + base_y,
                px + h / 2 + base_x,
                py + w + base_y,
            ]);
        } else {
            let style = font.clone().pos(Pos::new(HPos::Center, VPos::Top));
            area.draw_text(label, &style, (px, py)).map_err(err)?;
            boxes.push([
                px - w / 2 + base_x,
                py + base_y,
                px + w / 2 + base_x,
                py + h + base_y,
            ]);
        }
    }
    Ok(boxes)
}

/// One panel of `placer ab --plot`: a metric's value per phase in run order (true: daemon
/// on), its axis label and a title (the verdict).
#[derive(Debug, Clone)]
pub struct PhasePanel {
    pub title: String,
    pub y_label: String,
    pub values: Vec<(bool, f64)>,
}

/// `placer ab --plot`: one panel per metric, stacked.
pub fn phases(path: &Path, title: &str, panels: &[PhasePanel]) -> Result<(), PlotError> {
    struct Bars<'a>(&'a str, &'a [PhasePanel]);
    impl Draw for Bars<'_> {
        fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), PlotError>
        where
            DB::ErrorType: 'static,
        {
            root.fill(&WHITE).map_err(err)?;
            let root = root.titled(self.0, ("sans-serif", 18)).map_err(err)?;
            let areas = root.split_evenly((self.1.len().max(1), 1));
            for (panel, area) in self.1.iter().zip(areas.iter()) {
                phase_bars(area, panel)?;
            }
            Ok(())
        }
    }
    let height = 60 + 330 * panels.len().max(1) as u32;
    with_backend(path, (900, height), &Bars(title, panels))
}

/// `placer bench contention --plot`: one line with points per series (x, y).
pub fn curves(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<(), PlotError> {
    struct Lines<'a>(&'a str, &'a str, &'a str, &'a [(String, Vec<(f64, f64)>)]);
    impl Draw for Lines<'_> {
        fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), PlotError>
        where
            DB::ErrorType: 'static,
        {
            curve_lines(root, self.0, self.1, self.2, self.3)
        }
    }
    with_backend(path, (900, 500), &Lines(title, x_label, y_label, series))
}

/// Something drawn on any backend.
trait Draw {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), PlotError>
    where
        DB::ErrorType: 'static;
}

/// The series' legend in the house style, at `pos`.
fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    pos: SeriesLabelPosition,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(pos)
        .label_font(("sans-serif", LABEL_FONT_PX))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(err)
}

/// Draws with an SVG or PNG backend chosen by the file's extension.
fn with_backend(path: &Path, size: (u32, u32), what: &impl Draw) -> Result<(), PlotError> {
    let format = PlotFormat::of(path)?;
    plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
        .map_err(|_| PlotError("bundled font does not load".into()))?;
    match format {
        PlotFormat::Svg => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            what.draw(&root)?;
            root.present().map_err(err)
        }
        PlotFormat::Png => {
            let font = ab_glyph::FontRef::try_from_slice(FONT)
                .map_err(|_| PlotError("bundled font does not load".into()))?;
            let root = glyphs::FixedText {
                inner: BitMapBackend::new(path, size),
                font,
            }
            .into_drawing_area();
            what.draw(&root)?;
            root.present().map_err(err)
        }
    }
}

fn curve_lines<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let pts = || {
        series
            .iter()
            .flat_map(|s| s.1.iter())
            .filter(|p| p.0.is_finite() && p.1.is_finite())
    };
    let xmax = pts().map(|p| p.0).fold(0.0f64, f64::max).max(1.0) * 1.05;
    let ymin = pts().map(|p| p.1).fold(0.0f64, f64::min);
    let ymax = pts().map(|p| p.1).fold(0.0f64, f64::max).max(1e-9) * 1.2;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..xmax, ymin..ymax)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .y_label_formatter(&|v: &f64| fmt_tick(*v))
        .label_style(("sans-serif", LABEL_FONT_PX))
        .draw()
        .map_err(err)?;
    for (i, (name, v)) in series.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(std::iter::once(PathElement::new(
                v.clone(),
                colour.stroke_width(2),
            )))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 14, y)], colour.stroke_width(2))
            });
        chart
            .draw_series(v.iter().map(|&p| Circle::new(p, 4, colour.filled())))
            .map_err(err)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    Ok(())
}

fn phase_bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    panel: &PhasePanel,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    let values = &panel.values;
    let top = values
        .iter()
        .map(|v| v.1)
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.3;
    let n = values.len().max(1) as f64;
    let mut chart = ChartBuilder::on(root)
        .caption(&panel.title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..n - 0.5, 0.0..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc("phase, in run order")
        .y_desc(&panel.y_label)
        .x_labels(values.len().min(20))
        .x_label_formatter(&|x: &f64| {
            if (x - x.round()).abs() < 1e-6 && *x >= 0.0 {
                format!("{}", x.round() as usize + 1)
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|v: &f64| fmt_tick(*v))
        .label_style(("sans-serif", LABEL_FONT_PX))
        .draw()
        .map_err(err)?;
    for (on, name, colour) in [
        (false, "daemon off", PALETTE[7]),
        (true, "daemon on", PALETTE[0]),
    ] {
        chart
            .draw_series(
                values
                    .iter()
                    .enumerate()
                    .filter(|(_, v)| v.0 == on)
                    .map(|(i, v)| {
                        Rectangle::new(
                            [(i as f64 - 0.35, 0.0), (i as f64 + 0.35, v.1)],
                            colour.filled(),
                        )
                    }),
            )
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_have_no_useless_zeros() {
        assert_eq!(fmt_tick(9.0), "9");
        assert_eq!(fmt_tick(0.25), "0.25");
        assert_eq!(fmt_tick(1.23456), "1.235");
        assert_eq!(fmt_tick(-0.0), "0");
    }

    #[test]
    fn overlap_detection() {
        let s = PlotSummary {
            label_boxes: vec![[0, 0, 10, 10], [5, 5, 15, 15], [20, 0, 30, 10]],
            ..Default::default()
        };
        assert_eq!(s.overlapping_labels(), vec![(0, 1)]);
    }
}
