//! Whole-machine power as a function of how many packages, cores and SMT siblings are busy
//! (seed 001, section 2.1):
//!
//! ```text
//! P = Pn + Ps * packages + Pc * cores + Pt * siblings
//! ```
//!
//! `packages` is the number of packages with at least one busy CPU, `cores` the number of
//! physical cores with at least one busy hardware thread, `siblings` the number of busy
//! hardware threads beyond the first on their core (a core running both of its threads
//! counts 1 core + 1 sibling). `Pn` is the idle machine.
//!
//! The seed's two servers are built in ([`builtin`]): Dell C6100 (2x Xeon L5520) and
//! HP DK388P (2x Xeon E5-2667). Their `Ps` is the paper's average of the first and second
//! package's increments (35.61/14.77 W and 43.90/35.58 W).
//!
//! [`fit`] estimates the four coefficients from measurements by ordinary least squares,
//! after the paper's sampling rule ([`reduce_samples`]): all samples taken at one
//! (packages, cores, siblings) point are reduced to one value by dropping the largest and
//! the smallest and averaging the rest. Invariants (tested):
//! - data generated from a model is fitted back to that model (within noise);
//! - data that cannot determine a coefficient (its column is a linear combination of the
//!   others, e.g. every row has one package so `Ps` and `Pn` cannot be told apart) is
//!   refused with a message naming the coefficient and what measurement is missing;
//! - standard errors are reported when there are more points than coefficients, and are
//!   `None` (not zero) when the fit is exactly determined.

use serde::{Deserialize, Serialize};

/// Busy units, the power model's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Usage {
    pub packages: u32,
    pub cores: u32,
    /// Busy hardware threads beyond the first on their core.
    pub siblings: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerModel {
    /// `dell-c6100`, `hp-dk388p`, `fit:FILE`.
    pub name: String,
    /// Pn: the idle machine.
    pub node_w: f64,
    /// Ps: each package with a busy CPU.
    pub package_w: f64,
    /// Pc: each busy physical core.
    pub core_w: f64,
    /// Pt: each busy SMT sibling beyond a core's first thread.
    pub thread_w: f64,
    /// Where the numbers come from.
    #[serde(default)]
    pub source: String,
}

/// Names of the built-in models (the machines with
/// [`crate::catalogue::Machine::measured_power_model`]).
pub fn builtin_names() -> Vec<&'static str> {
    crate::catalogue::Machine::ALL
        .into_iter()
        .filter(|m| m.measured_power_model().is_some())
        .map(|m| m.name())
        .collect()
}

/// The seed's measured coefficients, by machine name (the numbers live in the catalogue:
/// [`crate::catalogue::Machine::measured_power_model`]).
pub fn builtin(name: &str) -> Option<PowerModel> {
    let m = crate::catalogue::Machine::parse(name)?.measured_power_model()?;
    Some(PowerModel {
        name: name.to_string(),
        node_w: m.node_w,
        package_w: m.package_w,
        core_w: m.core_w,
        thread_w: m.thread_w,
        source: m.source.to_string(),
    })
}

impl PowerModel {
    pub fn power_w(&self, u: Usage) -> f64 {
        self.node_w
            + self.package_w * f64::from(u.packages)
            + self.core_w * f64::from(u.cores)
            + self.thread_w * f64::from(u.siblings)
    }

    /// Coefficients in the order of [`COEFFICIENTS`].
    pub fn coefficients(&self) -> [f64; 4] {
        [self.node_w, self.package_w, self.core_w, self.thread_w]
    }
}

/// Names of the coefficients, in the order of the design matrix columns.
pub const COEFFICIENTS: [&str; 4] = ["Pn", "Ps", "Pc", "Pt"];

/// One power reading at one usage point.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    pub usage: Usage,
    pub watts: f64,
}

/// The paper's rule: drop the largest and the smallest sample, average the rest. With
/// fewer than three samples there is nothing to drop and the plain mean is returned.
/// `None` for no samples or a non-finite one.
pub fn reduce_samples(samples: &[f64]) -> Option<f64> {
    if samples.is_empty() || samples.iter().any(|x| !x.is_finite()) {
        return None;
    }
    if samples.len() < 3 {
        return Some(samples.iter().sum::<f64>() / samples.len() as f64);
    }
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let inner = &v[1..v.len() - 1];
    Some(inner.iter().sum::<f64>() / inner.len() as f64)
}

/// A fitted model with its uncertainty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    pub model: PowerModel,
    /// Standard error of Pn, Ps, Pc, Pt; `None` when the fit is exactly determined
    /// (as many distinct points as coefficients).
    pub stderr_w: Option<[f64; 4]>,
    /// The points after the sampling rule, with their residual (measured - model).
    pub points: Vec<FitPoint>,
    /// Root mean square of the residuals, watts.
    pub rms_residual_w: f64,
    /// Raw samples read.
    pub samples: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitPoint {
    pub usage: Usage,
    pub samples: usize,
    pub watts: f64,
    pub residual_w: f64,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FitError {
    #[error("no measurements")]
    Empty,
    #[error("measurement {0} is not a finite number of watts")]
    NotFinite(usize),
    #[error("the measurements cannot determine {}: {}", .coefficients.join(", "), .why)]
    Undetermined {
        coefficients: Vec<&'static str>,
        why: String,
    },
}

/// Least-squares fit of the model to `data` (several samples per usage point allowed;
/// they are reduced by [`reduce_samples`] first).
pub fn fit(name: &str, data: &[Measurement]) -> Result<Fit, FitError> {
    if data.is_empty() {
        return Err(FitError::Empty);
    }
    if let Some(i) = data.iter().position(|m| !m.watts.is_finite()) {
        return Err(FitError::NotFinite(i));
    }
    let mut groups: std::collections::BTreeMap<Usage, Vec<f64>> = Default::default();
    for m in data {
        groups.entry(m.usage).or_default().push(m.watts);
    }
    let rows: Vec<(Usage, usize, f64)> = groups
        .iter()
        .map(|(u, s)| (*u, s.len(), reduce_samples(s).unwrap_or(f64::NAN)))
        .collect();
    let x: Vec<[f64; 4]> = rows.iter().map(|(u, _, _)| design_row(*u)).collect();
    let y: Vec<f64> = rows.iter().map(|r| r.2).collect();
    check_determined(&rows.iter().map(|r| r.0).collect::<Vec<_>>(), &x)?;
    // Normal equations; columns are scaled to unit norm first so the 4x4 solve is well
    // conditioned whatever the magnitudes of the counts.
    let scale: [f64; 4] = std::array::from_fn(|j| {
        let s = x.iter().map(|r| r[j] * r[j]).sum::<f64>().sqrt();
        if s > 0.0 {
            s
        } else {
            1.0
        }
    });
    let xs: Vec<[f64; 4]> = x
        .iter()
        .map(|r| std::array::from_fn(|j| r[j] / scale[j]))
        .collect();
    let mut xtx = [[0.0; 4]; 4];
    let mut xty = [0.0; 4];
    for (r, yi) in xs.iter().zip(&y) {
        for i in 0..4 {
            xty[i] += r[i] * yi;
            for j in 0..4 {
                xtx[i][j] += r[i] * r[j];
            }
        }
    }
    let inv = invert4(&xtx).ok_or_else(|| FitError::Undetermined {
        coefficients: COEFFICIENTS.to_vec(),
        why: "the design matrix is singular".into(),
    })?;
    let beta: [f64; 4] =
        std::array::from_fn(|i| (0..4).map(|j| inv[i][j] * xty[j]).sum::<f64>() / scale[i]);
    let model = PowerModel {
        name: name.to_string(),
        node_w: beta[0],
        package_w: beta[1],
        core_w: beta[2],
        thread_w: beta[3],
        source: format!("least-squares fit of {} points", rows.len()),
    };
    let points: Vec<FitPoint> = rows
        .iter()
        .map(|(u, n, w)| FitPoint {
            usage: *u,
            samples: *n,
            watts: *w,
            residual_w: w - model.power_w(*u),
        })
        .collect();
    let rss: f64 = points.iter().map(|p| p.residual_w * p.residual_w).sum();
    let m = points.len();
    let stderr_w = (m > 4).then(|| {
        let s2 = rss / (m - 4) as f64;
        std::array::from_fn(|i| (s2 * inv[i][i]).sqrt() / scale[i])
    });
    Ok(Fit {
        model,
        stderr_w,
        rms_residual_w: (rss / m as f64).sqrt(),
        points,
        samples: data.len(),
    })
}

fn design_row(u: Usage) -> [f64; 4] {
    [
        1.0,
        f64::from(u.packages),
        f64::from(u.cores),
        f64::from(u.siblings),
    ]
}

/// Refuses a rank-deficient design, naming each coefficient whose column lies in the span
/// of the others and what would separate it.
fn check_determined(usages: &[Usage], x: &[[f64; 4]]) -> Result<(), FitError> {
    let mut undetermined = Vec::new();
    for j in 0..4 {
        let others: Vec<usize> = (0..4).filter(|&k| k != j).collect();
        if residual_norm_ratio(x, j, &others) < 1e-9 {
            undetermined.push(j);
        }
    }
    if undetermined.is_empty() {
        return Ok(());
    }
    let distinct = |f: fn(&Usage) -> u32| {
        let mut v: Vec<u32> = usages.iter().map(f).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let (pk, co, si) = (
        distinct(|u| u.packages),
        distinct(|u| u.cores),
        distinct(|u| u.siblings),
    );
    let mut why = Vec::new();
    if usages.len() < 4 {
        why.push(format!(
            "only {} distinct (packages, cores, siblings) point(s); at least 4 are needed",
            usages.len()
        ));
    }
    if pk.len() < 2 {
        why.push(format!(
            "every point has {} busy package(s): add points with another package count \
             (an idle point, 0 packages, or one with a second package busy)",
            pk[0]
        ));
    }
    if co.len() < 2 {
        why.push(format!(
            "every point has {} busy core(s): add points with another core count",
            co[0]
        ));
    }
    if si.len() < 2 {
        why.push(format!(
            "every point has {} busy SMT sibling(s): add points with both threads of a \
             core busy (and some without)",
            si[0]
        ));
    }
    if why.is_empty() {
        why.push(
            "the package, core and sibling counts move together (a linear combination): \
             add points that vary one count while keeping the others"
                .into(),
        );
    }
    Err(FitError::Undetermined {
        coefficients: undetermined.iter().map(|&j| COEFFICIENTS[j]).collect(),
        why: why.join("; "),
    })
}

/// |residual of column j after projecting on columns `others`| / |column j| (1 when the
/// column is zero so that a zero column counts as undetermined only through its span).
fn residual_norm_ratio(x: &[[f64; 4]], j: usize, others: &[usize]) -> f64 {
    // Gram-Schmidt on the other columns, then project column j.
    let col = |k: usize| -> Vec<f64> { x.iter().map(|r| r[k]).collect() };
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
    let mut basis: Vec<Vec<f64>> = Vec::new();
    for &k in others {
        let mut v = col(k);
        for b in &basis {
            let d = dot(&v, b);
            v.iter_mut().zip(b).for_each(|(vi, bi)| *vi -= d * bi);
        }
        let n = dot(&v, &v).sqrt();
        let orig = dot(&col(k), &col(k)).sqrt();
        if n > 1e-9 * orig.max(1e-300) {
            v.iter_mut().for_each(|vi| *vi /= n);
            basis.push(v);
        }
    }
    let target = col(j);
    let norm = dot(&target, &target).sqrt();
    if norm == 0.0 {
        return 0.0;
    }
    let mut v = target;
    for b in &basis {
        let d = dot(&v, b);
        v.iter_mut().zip(b).for_each(|(vi, bi)| *vi -= d * bi);
    }
    dot(&v, &v).sqrt() / norm
}

/// Inverse of a symmetric 4x4 matrix by Gauss-Jordan with partial pivoting.
fn invert4(a: &[[f64; 4]; 4]) -> Option<[[f64; 4]; 4]> {
    let mut m = *a;
    let mut inv = [[0.0; 4]; 4];
    for (i, row) in inv.iter_mut().enumerate() {
        row[i] = 1.0;
    }
    for c in 0..4 {
        let p = (c..4).max_by(|&i, &j| m[i][c].abs().total_cmp(&m[j][c].abs()))?;
        if m[p][c].abs() < 1e-12 {
            return None;
        }
        m.swap(c, p);
        inv.swap(c, p);
        let d = m[c][c];
        for k in 0..4 {
            m[c][k] /= d;
            inv[c][k] /= d;
        }
        for r in 0..4 {
            if r != c {
                let f = m[r][c];
                for k in 0..4 {
                    m[r][k] -= f * m[c][k];
                    inv[r][k] -= f * inv[c][k];
                }
            }
        }
    }
    Some(inv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(packages: u32, cores: u32, siblings: u32) -> Usage {
        Usage {
            packages,
            cores,
            siblings,
        }
    }

    /// One exact measurement per point.
    fn exact(m: &PowerModel, pts: &[Usage]) -> Vec<Measurement> {
        pts.iter()
            .map(|p| Measurement {
                usage: *p,
                watts: m.power_w(*p),
            })
            .collect()
    }

    /// The usage points of two sweeps on a 2x4x2 machine, 0..=16 busy threads: the
    /// paper's Table 3 sweep (cores package by package, then siblings) and a policy-2
    /// sweep (both threads of a core, package by package).
    fn sweep_points() -> Vec<Usage> {
        let mut v = vec![u(0, 0, 0)];
        for n in 1..=16u32 {
            let cores = n.min(8);
            v.push(u(cores.div_ceil(4), cores, n.saturating_sub(8)));
            let cores2 = n.div_ceil(2);
            v.push(u(cores2.div_ceil(4), cores2, n / 2));
        }
        v
    }

    fn noisy_data(model: &PowerModel, sd_w: f64, per_point: usize, seed: u64) -> Vec<Measurement> {
        let mut rng = crate::rng::Rng::new(seed);
        let mut out = Vec::new();
        for p in sweep_points() {
            for _ in 0..per_point {
                out.push(Measurement {
                    usage: p,
                    watts: model.power_w(p) + sd_w * rng.normal(),
                });
            }
        }
        out
    }

    #[test]
    fn builtin_models_hold_the_seed_numbers() {
        let d = builtin("dell-c6100").unwrap();
        assert_eq!(d.coefficients(), [76.11, 25.19, 9.68, 2.61]);
        let h = builtin("hp-dk388p").unwrap();
        assert_eq!(h.coefficients(), [106.41, 39.74, 11.13, 2.83]);
        assert!(builtin("nope").is_none());
        // One package, one core: 76.11 + 25.19 + 9.68.
        assert!((d.power_w(u(1, 1, 0)) - 110.98).abs() < 1e-9);
    }

    #[test]
    fn sampling_rule_drops_max_and_min() {
        assert_eq!(reduce_samples(&[1.0, 100.0, 2.0, 3.0, -50.0]), Some(2.0));
        assert_eq!(reduce_samples(&[4.0, 6.0]), Some(5.0));
        assert_eq!(reduce_samples(&[]), None);
        assert_eq!(reduce_samples(&[1.0, f64::NAN, 2.0]), None);
        // Only one of several equal extremes is dropped.
        assert_eq!(reduce_samples(&[5.0, 5.0, 5.0, 1.0]), Some(5.0));
    }

    #[test]
    fn exact_data_is_fitted_exactly() {
        for name in builtin_names() {
            let m = builtin(name).unwrap();
            let data = exact(&m, &sweep_points());
            let f = fit("t", &data).unwrap();
            for (got, want) in f.model.coefficients().iter().zip(m.coefficients()) {
                assert!((got - want).abs() < 1e-6, "{name}: {got} vs {want}");
            }
            assert!(f.rms_residual_w < 1e-6);
            assert!(f.stderr_w.unwrap().iter().all(|s| *s < 1e-6));
        }
    }

    #[test]
    fn noisy_data_recovers_coefficients_within_two_percent() {
        // 8 one-second samples per point as in the paper, noise sd 0.5 W plus an
        // occasional 10 W spike that the sampling rule must remove.
        for (name, seed) in [("dell-c6100", 1u64), ("hp-dk388p", 2)] {
            let m = builtin(name).unwrap();
            let mut data = noisy_data(&m, 0.5, 8, seed);
            for (i, d) in data.iter_mut().enumerate() {
                if i % 8 == 3 {
                    d.watts += 10.0;
                }
            }
            let f = fit("t", &data).unwrap();
            let se = f.stderr_w.unwrap();
            for i in 0..4 {
                let (got, want) = (f.model.coefficients()[i], m.coefficients()[i]);
                let rel = (got - want).abs() / want;
                assert!(
                    rel < 0.02,
                    "{name} {}: {got:.3} vs {want} ({rel:.4})",
                    COEFFICIENTS[i]
                );
                assert!(
                    (got - want).abs() < 4.0 * se[i] + 1e-9,
                    "{name} {}: error beyond 4 standard errors ({})",
                    COEFFICIENTS[i],
                    se[i]
                );
            }
        }
    }

    #[test]
    fn spikes_without_the_sampling_rule_would_bias_the_fit() {
        // Guards that the rule is applied: a single 40 W spike per point shifts a plain
        // mean by 5 W at 8 samples; after the rule the fit stays within 2%.
        let m = builtin("dell-c6100").unwrap();
        let mut data = noisy_data(&m, 0.0, 8, 9);
        for d in data.iter_mut().step_by(8) {
            d.watts += 40.0;
        }
        let f = fit("t", &data).unwrap();
        assert!((f.model.node_w - m.node_w).abs() < 0.02 * m.node_w);
    }

    #[test]
    fn refuses_one_package_data() {
        let m = builtin("dell-c6100").unwrap();
        let data: Vec<Measurement> = (1..=8)
            .map(|n: u32| {
                let p = u(1, n.div_ceil(2), n / 2);
                Measurement {
                    usage: p,
                    watts: m.power_w(p),
                }
            })
            .collect();
        let e = fit("t", &data).unwrap_err();
        let msg = e.to_string();
        match &e {
            FitError::Undetermined { coefficients, .. } => {
                assert!(
                    coefficients.contains(&"Pn") && coefficients.contains(&"Ps"),
                    "{msg}"
                );
                assert!(!coefficients.contains(&"Pc"), "{msg}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(msg.contains("1 busy package"), "{msg}");
    }

    #[test]
    fn refuses_data_without_siblings_and_too_few_points() {
        let m = builtin("dell-c6100").unwrap();
        let pts = [u(0, 0, 0), u(1, 1, 0), u(1, 2, 0), u(2, 5, 0), u(2, 8, 0)];
        let data = exact(&m, &pts);
        let e = fit("t", &data).unwrap_err();
        assert!(e.to_string().contains("Pt"), "{e}");
        assert!(e.to_string().contains("SMT sibling"), "{e}");
        let e = fit("t", &data[..2]).unwrap_err();
        assert!(e.to_string().contains("at least 4"), "{e}");
        assert_eq!(fit("t", &[]).unwrap_err(), FitError::Empty);
    }

    #[test]
    fn refuses_collinear_counts() {
        // Cores always equal siblings (both threads of every core, always): Pc and Pt are
        // a linear combination.
        let pts = [u(0, 0, 0), u(1, 1, 1), u(1, 2, 2), u(2, 5, 5), u(2, 8, 8)];
        let data: Vec<Measurement> = pts
            .iter()
            .map(|p| Measurement {
                usage: *p,
                watts: 100.0 + f64::from(p.cores),
            })
            .collect();
        match fit("t", &data).unwrap_err() {
            FitError::Undetermined { coefficients, why } => {
                assert_eq!(coefficients, vec!["Pc", "Pt"]);
                assert!(why.contains("move together"), "{why}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn exactly_determined_fit_has_no_stderr() {
        let m = builtin("hp-dk388p").unwrap();
        let pts = [u(0, 0, 0), u(1, 1, 0), u(1, 1, 1), u(1, 2, 0)];
        let data = exact(&m, &pts);
        let f = fit("t", &data).unwrap();
        assert!(f.stderr_w.is_none());
        assert!((f.model.thread_w - 2.83).abs() < 1e-9);
    }
}
