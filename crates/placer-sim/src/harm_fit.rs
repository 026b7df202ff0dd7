//! The harm model fitted to measurements: how much a latency-bound victim (a pointer chase)
//! slows down next to `x` streaming co-runners, or next to `x` GB/s of their traffic
//! (`placer bench contention` measures such curves; `calibration/contention.toml` keeps the
//! data sets and their fits).
//!
//! Three shapes, each through the origin (no co-runner, no harm):
//! - **additive** `s = a x` (every co-runner costs the same);
//! - **saturating** `s = a (1 - exp(-x / b))` (the shared resource fills up; the simulator's
//!   LLC term has this shape in the summed pressure);
//! - **power** `s = a x^b` (`b > 1` convex: harm grows faster once the memory controller
//!   queues; `b < 1` concave).
//!
//! Each is fitted by least squares: `a` in closed form for every `b` of a log-spaced grid,
//! then refined around the best `b`. The shape reported is the one with the lowest AICc
//! (`n ln(RSS/n) + 2k + 2k(k+1)/(n-k-1)`, `k` parameters), so a second parameter must
//! earn its keep; with fewer points than `k + 2` the small-sample term rules it out.
//!
//! Invariants (tested): a curve generated from a shape is recovered (parameters within a
//! few percent, and that shape chosen, or additive for a power curve with `b` = 1); the fit
//! is independent of the order of the points; residuals are reported per point.

use crate::params::LlcShape;
use serde::{Deserialize, Serialize};

/// Smallest per-point RMS residual a fit is credited with: 0.1 point of slowdown, below what
/// a few seconds of pointer chasing resolve.
pub const RESOLUTION: f64 = 1e-3;

/// One measured point: co-runners (or their bandwidth) and the victim's slowdown
/// (0.14 = 14% slower than alone).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HarmPoint {
    pub x: f64,
    pub slowdown: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    Additive,
    Saturating,
    Power,
}

impl Shape {
    pub fn params(self) -> usize {
        match self {
            Shape::Additive => 1,
            Shape::Saturating | Shape::Power => 2,
        }
    }

    /// The shape's value at `x` for unit amplitude.
    fn unit(self, x: f64, b: f64) -> f64 {
        match self {
            Shape::Additive => x,
            Shape::Saturating => 1.0 - (-x / b).exp(),
            Shape::Power => x.powf(b),
        }
    }
}

/// One fitted shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShapeFit {
    pub shape: Shape,
    pub a: f64,
    /// Scale (saturating) or exponent (power); unused (1) for additive.
    pub b: f64,
    pub rss: f64,
    pub aicc: f64,
    /// Measured minus fitted slowdown, per point (in the points' order).
    pub residuals: Vec<f64>,
}

impl ShapeFit {
    pub fn predict(&self, x: f64) -> f64 {
        self.a * self.shape.unit(x, self.b)
    }
}

/// All three fits, best (lowest AICc) first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarmFit {
    pub fits: Vec<ShapeFit>,
}

impl HarmFit {
    pub fn best(&self) -> &ShapeFit {
        &self.fits[0]
    }
}

/// `a` and the RSS of `s = a f(x)` for fixed `b`.
fn amplitude(points: &[HarmPoint], shape: Shape, b: f64) -> (f64, f64) {
    let (sff, sfs) = points.iter().fold((0.0, 0.0), |(ff, fs), p| {
        let f = shape.unit(p.x, b);
        (ff + f * f, fs + f * p.slowdown)
    });
    let a = if sff > 0.0 { sfs / sff } else { 0.0 };
    let rss = points
        .iter()
        .map(|p| (p.slowdown - a * shape.unit(p.x, b)).powi(2))
        .sum();
    (a, rss)
}

fn fit_shape(points: &[HarmPoint], shape: Shape) -> ShapeFit {
    let b = match shape {
        Shape::Additive => 1.0,
        _ => {
            let xmax = points.iter().map(|p| p.x).fold(0.0f64, f64::max).max(1e-9);
            // Grid: scale from xmax/100 to 100 xmax, or exponent from 0.1 to 5.
            let (lo, hi): (f64, f64) = match shape {
                Shape::Saturating => (xmax / 100.0, xmax * 100.0),
                _ => (0.1, 5.0),
            };
            let grid = |lo: f64, hi: f64, n: usize| -> f64 {
                let mut best = (f64::INFINITY, lo);
                for i in 0..=n {
                    let b = lo * (hi / lo).powf(i as f64 / n as f64);
                    let (_, rss) = amplitude(points, shape, b);
                    if rss < best.0 {
                        best = (rss, b);
                    }
                }
                best.1
            };
            let b0 = grid(lo, hi, 400);
            let step = (hi / lo).powf(1.0 / 400.0);
            grid(b0 / step, b0 * step, 200)
        }
    };
    let (a, rss) = amplitude(points, shape, b);
    let n = points.len() as f64;
    let k = shape.params() as f64;
    let small = if n - k - 1.0 > 0.0 {
        2.0 * k * (k + 1.0) / (n - k - 1.0)
    } else {
        f64::INFINITY
    };
    // No fit is better than the measurement resolves: a two-parameter shape through three
    // points fits "perfectly" and must not win on that.
    let aicc = n * (rss / n).max(RESOLUTION * RESOLUTION).ln() + 2.0 * k + small;
    ShapeFit {
        shape,
        a,
        b,
        rss,
        aicc,
        residuals: points
            .iter()
            .map(|p| p.slowdown - a * shape.unit(p.x, b))
            .collect(),
    }
}

/// Fits the three shapes; the best first.
pub fn fit(points: &[HarmPoint]) -> HarmFit {
    let mut fits: Vec<ShapeFit> = [Shape::Additive, Shape::Saturating, Shape::Power]
        .into_iter()
        .map(|s| fit_shape(points, s))
        .collect();
    fits.sort_by(|x, y| {
        x.aicc
            .total_cmp(&y.aicc)
            .then(x.shape.params().cmp(&y.shape.params()))
    });
    HarmFit { fits }
}

/// A measured curve kept in `calibration/contention.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataSet {
    pub name: String,
    pub source: String,
    /// Co-runner counts, the victim's slowdown at each, and the co-runners' total
    /// bandwidth in GB/s (`nan` where it was not measured).
    pub co_runners: Vec<f64>,
    pub slowdown: Vec<f64>,
    #[serde(default)]
    pub bandwidth_gbps: Vec<f64>,
    /// The best fits, recorded (a test recomputes them, so they cannot go stale).
    #[serde(default)]
    pub fit_by_count: Option<RecordedFit>,
    #[serde(default)]
    pub fit_by_bandwidth: Option<RecordedFit>,
}

/// A fit as the calibration file records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedFit {
    pub shape: Shape,
    pub a: f64,
    #[serde(default = "one")]
    pub b: f64,
    /// Largest |residual| over the points, slowdown.
    pub max_residual: f64,
}

fn one() -> f64 {
    1.0
}

/// The calibration file: measured curves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    #[serde(rename = "dataset")]
    pub datasets: Vec<DataSet>,
}

/// The data sets shipped with placer (`calibration/contention.toml`).
pub fn calibration() -> Calibration {
    toml::from_str(include_str!("../../../calibration/contention.toml"))
        .expect("calibration/contention.toml parses (tested)")
}

impl DataSet {
    /// Slowdown against co-runner count.
    pub fn by_count(&self) -> Vec<HarmPoint> {
        self.co_runners
            .iter()
            .zip(&self.slowdown)
            .map(|(&x, &s)| HarmPoint { x, slowdown: s })
            .collect()
    }

    /// Slowdown against bandwidth, where it was measured.
    pub fn by_bandwidth(&self) -> Vec<HarmPoint> {
        self.bandwidth_gbps
            .iter()
            .zip(&self.slowdown)
            .filter(|(b, _)| b.is_finite())
            .map(|(&x, &s)| HarmPoint { x, slowdown: s })
            .collect()
    }
}

/// A pairwise slowdown matrix, as seed 003's Fig. 1 measures one: `slowdown[i][j]` is how
/// much slower app `i` ran beside app `j` than alone (0.25 = 25%), `None` where not measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairMatrix {
    pub names: Vec<String>,
    pub slowdown: Vec<Vec<Option<f64>>>,
}

/// Pressure (harm caused) and sensitivity (harm suffered) per app, fitted to a
/// [`PairMatrix`] for one LLC shape of the simulator (`params.contention`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairFit {
    pub shape: LlcShape,
    pub names: Vec<String>,
    pub pressure: Vec<f64>,
    pub sensitivity: Vec<f64>,
    /// measured - predicted per cell (`None` where not measured).
    pub residuals: Vec<Vec<Option<f64>>>,
    pub rms_residual: f64,
    /// Apps whose pressure hit the saturating shape's ceiling (their pairs ask for more harm
    /// than `llc_scale` allows at the most sensitive app's S = 1).
    pub clamped: Vec<String>,
}

/// Largest `1 - exp(-P)` a saturating fit may reach: P = ln(1000) = 6.9.
const MAX_SATURATION: f64 = 0.999;

/// The non-negative `f` minimising `sum (x_k - f other_k)^2` over the measured `(k, x_k)`.
fn least_squares_factor(measured: impl Iterator<Item = (usize, f64)>, other: &[f64]) -> f64 {
    let (num, den) = measured.fold((0.0, 0.0), |(a, b), (k, x)| {
        (a + x * other[k], b + other[k] * other[k])
    });
    if den > 0.0 {
        (num / den).max(0.0)
    } else {
        0.0
    }
}

/// Fits the simulator's pairwise harm to a measured matrix.
///
/// Both LLC shapes predict a pair's slowdown as a product: additive
/// `s_ij = a S_i P_j` (`a` = `llc_additive_per_pressure`), saturating
/// `s_ij = A S_i (1 - exp(-P_j))` (`A` = `llc_scale`). So the matrix is fitted by the
/// best non-negative rank-one product `u_i v_j` (alternating least squares over the
/// measured cells), then split into S and P. A pairwise matrix fixes only the products:
/// the split takes the most sensitive app's S as 1. For the additive shape that is no loss
/// (its predictions for any set of co-runners, `a S_i sum P_j`, are products too); for the
/// saturating shape it is a convention that a sweep over co-runner counts would decide.
///
/// Invariants (tested): a matrix generated from known S and P (either shape, S normalised
/// as above) is recovered, with or without a missing cell; noise shows in the residuals.
pub fn fit_pairs(m: &PairMatrix, shape: LlcShape, scale: f64) -> PairFit {
    let n = m.names.len();
    let cell = |i: usize, j: usize| m.slowdown.get(i).and_then(|r| r.get(j)).copied().flatten();
    // Start from each victim's mean slowdown and equal aggressors.
    let mut u: Vec<f64> = (0..n)
        .map(|i| {
            let row: Vec<f64> = (0..n).filter_map(|j| cell(i, j)).collect();
            (row.iter().sum::<f64>() / row.len().max(1) as f64).max(1e-6)
        })
        .collect();
    let mut v = vec![1.0; n];
    // Each half-step is the exact least-squares answer given the other side, so the
    // residual never grows; 500 rounds are far past convergence for a dozen apps.
    for _ in 0..500 {
        v = (0..n)
            .map(|j| least_squares_factor((0..n).filter_map(|i| Some((i, cell(i, j)?))), &u))
            .collect();
        u = (0..n)
            .map(|i| least_squares_factor((0..n).filter_map(|j| Some((j, cell(i, j)?))), &v))
            .collect();
    }
    let top = u.iter().copied().fold(0.0f64, f64::max);
    let sensitivity: Vec<f64> = u
        .iter()
        .map(|x| if top > 0.0 { x / top } else { 0.0 })
        .collect();
    // What one unit-sensitive victim suffers beside app j.
    let harm: Vec<f64> = v.iter().map(|x| x * top).collect();
    let mut clamped = Vec::new();
    let pressure: Vec<f64> = harm
        .iter()
        .enumerate()
        .map(|(j, &h)| match shape {
            LlcShape::Saturating => {
                let g = h / scale;
                if g > MAX_SATURATION {
                    clamped.push(m.names[j].clone());
                }
                -(1.0 - g.min(MAX_SATURATION)).ln()
            }
            LlcShape::Additive => h / scale,
        })
        .collect();
    // What the fitted S and P predict (a clamped pressure predicts less than was measured).
    let harm: Vec<f64> = pressure
        .iter()
        .map(|&p| match shape {
            LlcShape::Saturating => scale * (1.0 - (-p).exp()),
            LlcShape::Additive => scale * p,
        })
        .collect();
    let (mut sq, mut cells) = (0.0, 0usize);
    let residuals: Vec<Vec<Option<f64>>> = (0..n)
        .map(|i| {
            (0..n)
                .map(|j| {
                    cell(i, j).map(|x| {
                        let r = x - sensitivity[i] * harm[j];
                        sq += r * r;
                        cells += 1;
                        r
                    })
                })
                .collect()
        })
        .collect();
    PairFit {
        shape,
        names: m.names.clone(),
        pressure,
        sensitivity,
        residuals,
        rms_residual: (sq / cells.max(1) as f64).sqrt(),
        clamped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(shape: Shape, a: f64, b: f64, xs: &[f64], noise: f64) -> Vec<HarmPoint> {
        xs.iter()
            .enumerate()
            .map(|(i, &x)| HarmPoint {
                x,
                // Deterministic +-noise alternating.
                slowdown: a * shape.unit(x, b) * (1.0 + if i % 2 == 0 { noise } else { -noise }),
            })
            .collect()
    }

    const XS: [f64; 8] = [0.0, 1.0, 2.0, 4.0, 6.0, 8.0, 12.0, 15.0];

    #[test]
    fn recovers_known_parameters_and_shapes() {
        for (shape, a, b) in [
            (Shape::Additive, 0.027, 1.0),
            (Shape::Saturating, 0.5, 4.0),
            (Shape::Power, 0.01, 1.6),
            (Shape::Power, 0.12, 0.5),
        ] {
            for noise in [0.0, 0.01] {
                let f = fit(&curve(shape, a, b, &XS, noise));
                let best = f.best();
                assert_eq!(best.shape, shape, "{shape:?} noise {noise}: {f:?}");
                let tol = 0.03 + 3.0 * noise;
                assert!(
                    (best.a - a).abs() <= tol * a,
                    "{shape:?}: a {} vs {a}",
                    best.a
                );
                if shape != Shape::Additive {
                    assert!(
                        (best.b - b).abs() <= tol * b,
                        "{shape:?}: b {} vs {b}",
                        best.b
                    );
                }
                assert_eq!(best.residuals.len(), XS.len());
            }
        }
    }

    fn matrix(shape: LlcShape, scale: f64, s: &[f64], p: &[f64], noise: f64) -> PairMatrix {
        let n = s.len();
        PairMatrix {
            names: (0..n).map(|i| format!("app{i}")).collect(),
            slowdown: (0..n)
                .map(|i| {
                    (0..n)
                        .map(|j| {
                            let unit = match shape {
                                LlcShape::Saturating => 1.0 - (-p[j]).exp(),
                                LlcShape::Additive => p[j],
                            };
                            let wobble = if (i + j) % 2 == 0 { noise } else { -noise };
                            Some(scale * s[i] * unit + wobble)
                        })
                        .collect()
                })
                .collect(),
        }
    }

    #[test]
    fn a_pairwise_matrix_gives_back_its_pressures_and_sensitivities() {
        let close = |f: &PairFit, s: &[f64], p: &[f64], tol_s: f64, tol_p: f64| {
            let ok = |got: &[f64], want: &[f64], tol: f64| {
                got.iter().zip(want).all(|(g, w)| (g - w).abs() < tol)
            };
            ok(&f.sensitivity, s, tol_s) && ok(&f.pressure, p, tol_p)
        };
        // The seed-003 estimates' orders of magnitude: aggressive, sensitive, insensitive.
        let s = [0.5, 1.0, 0.15, 0.05];
        let p = [0.9, 0.1, 0.5, 0.05];
        for (shape, scale) in [(LlcShape::Additive, 0.031), (LlcShape::Saturating, 2.0)] {
            let mut m = matrix(shape, scale, &s, &p, 0.0);
            let f = fit_pairs(&m, shape, scale);
            assert!(close(&f, &s, &p, 1e-6, 1e-6), "{shape:?} {f:?}");
            assert!(f.rms_residual < 1e-9 && f.clamped.is_empty());
            // A cell not measured: the rest still determine every S and P.
            m.slowdown[1][0] = None;
            let f = fit_pairs(&m, shape, scale);
            assert!(f.residuals[1][0].is_none());
            for (got, want) in f.pressure.iter().zip(p) {
                assert!((got - want).abs() < 1e-4, "{shape:?} {f:?}");
            }
        }
        // Noise of +-0.5 point: recovered within a few hundredths, and it shows.
        let m = matrix(LlcShape::Saturating, 2.0, &s, &p, 0.005);
        let f = fit_pairs(&m, LlcShape::Saturating, 2.0);
        assert!(close(&f, &s, &p, 0.03, 0.05), "{f:?}");
        assert!(f.rms_residual > 0.001 && f.rms_residual < 0.006, "{f:?}");
    }

    #[test]
    fn harm_beyond_the_saturating_ceiling_is_said() {
        // A pair at +250% cannot come from A = 2 with S <= 1: P is clamped and named.
        let m = PairMatrix {
            names: vec!["victim".into(), "bully".into()],
            slowdown: vec![vec![Some(0.0), Some(2.5)], vec![Some(0.0), Some(0.0)]],
        };
        let f = fit_pairs(&m, LlcShape::Saturating, 2.0);
        assert_eq!(f.clamped, ["bully"]);
        assert!(f.pressure[1].is_finite() && f.residuals[0][1].unwrap() > 0.4);
    }

    #[test]
    fn order_of_points_does_not_matter() {
        let pts = curve(Shape::Saturating, 0.4, 5.0, &XS, 0.02);
        let mut rev = pts.clone();
        rev.reverse();
        let (f1, f2) = (fit(&pts), fit(&rev));
        assert_eq!(f1.best().shape, f2.best().shape);
        assert!((f1.best().a - f2.best().a).abs() < 1e-9);
    }

    #[test]
    fn shipped_calibration_parses_and_fits() {
        let c = calibration();
        let d = c
            .datasets
            .iter()
            .find(|d| d.name == "x86-16core-llc")
            .expect("the 16-core curve of issue 14");
        assert_eq!(d.co_runners.len(), d.slowdown.len());
        let f = fit(&d.by_count());
        // Every fit stays within 5 points of slowdown of every measurement.
        for r in &f.best().residuals {
            assert!(r.abs() < 0.05, "{f:?}");
        }
        let fb = fit(&d.by_bandwidth());
        assert!(fb.best().predict(87.7) > 0.3, "{fb:?}");
        // The recorded fits are the computed ones.
        for c in calibration().datasets {
            for (rec, f) in [
                (&c.fit_by_count, fit(&c.by_count())),
                (&c.fit_by_bandwidth, fit(&c.by_bandwidth())),
            ] {
                let rec = rec.as_ref().expect("a recorded fit");
                let best = f.best();
                assert_eq!(rec.shape, best.shape, "{}", c.name);
                assert!(
                    (rec.a - best.a).abs() <= 1e-3 * best.a.abs().max(1e-9),
                    "{}",
                    c.name
                );
                assert!((rec.b - best.b).abs() <= 1e-2 * best.b.abs(), "{}", c.name);
                let worst = best.residuals.iter().fold(0.0f64, |m, r| m.max(r.abs()));
                assert!(
                    (rec.max_residual - worst).abs() < 1e-3,
                    "{}: {worst}",
                    c.name
                );
            }
        }
    }
}
