//! Amdahl's law and the seed's caps on how many units a job is worth (seed 001, sections
//! 1.2 and 2.3).
//!
//! With serial fraction `S` and `C` units of compute, the speedup over one full core is
//! `S_C = 1 / (S + (1 - S) / C)` ([`speedup`]). `C` is compute, not CPUs: a shared SMT
//! sibling counts `sigma` (0.3 in the paper) of a core, so a busy core with both threads
//! is 1.3 (see [`crate::alloc`]).
//!
//! Estimating `S`:
//! - from one measured speedup at `N` units: `S = (N - S_N) / (S_N (N - 1))`
//!   ([`serial_fraction_from_speedup`], the paper's formula);
//! - from run times at two or more unit counts: `t(N) = t1 S + t1 (1 - S) / N` is linear in
//!   `1/N`, so ordinary least squares of `t` on `1/N` gives `a = t1 S`, `b = t1 (1 - S)` and
//!   `S = a / (a + b)` ([`fit_serial_fraction`]). No run on one unit is needed.
//!
//! Caps:
//! - energy ([`energy_cap`]): adding a unit that adds `dP` watts and saves `dt` seconds
//!   pays off only if `(P0 + dP)(t0 - dt) < P0 t0` ([`energy_pays`]); the cap is the first
//!   prefix of an allocation order after which the next unit does not pay. Because power
//!   jumps when a new package opens, a later unit may pay again; [`energy_optimum`] gives
//!   the prefix with the least energy over the whole order.
//! - parallel efficiency ([`efficiency_limit`]): the paper's `N > 1/S + 1`. At
//!   `N = 1/S + 1` the efficiency `S_N / N = 1 / (N S + 1 - S)` is exactly 1/2, so the
//!   threshold chosen here is "efficiency below one half". It is in compute units.

use serde::{Deserialize, Serialize};

/// Speedup over one full core of `compute` units of compute at serial fraction `s`.
pub fn speedup(s: f64, compute: f64) -> f64 {
    if compute <= 0.0 {
        return 0.0;
    }
    1.0 / (s + (1.0 - s) / compute)
}

/// Run time relative to one full core.
pub fn relative_time(s: f64, compute: f64) -> f64 {
    if compute <= 0.0 {
        return f64::INFINITY;
    }
    s + (1.0 - s) / compute
}

/// Parallel efficiency `S_N / N`.
pub fn efficiency(s: f64, compute: f64) -> f64 {
    speedup(s, compute) / compute
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AmdahlError {
    #[error("a speedup needs more than one unit (got N = {0})")]
    OneUnit(f64),
    #[error("speedup {speedup} at N = {n} is outside (0, N]: not an Amdahl job")]
    SpeedupOutOfRange { n: f64, speedup: f64 },
    #[error("need run times at two or more distinct unit counts (got {0})")]
    TooFewCounts(usize),
    #[error("bad measurement {0}: unit counts and times must be positive and finite")]
    BadPoint(usize),
    #[error("the times do not fall as units are added (fitted parallel part {0:.3} s <= 0)")]
    NoParallelPart(f64),
}

/// The paper's `S = (N - S_N) / (S_N (N - 1))`.
pub fn serial_fraction_from_speedup(n: f64, speedup: f64) -> Result<f64, AmdahlError> {
    if n.is_nan() || n <= 1.0 || !n.is_finite() {
        return Err(AmdahlError::OneUnit(n));
    }
    if !(speedup > 0.0 && speedup <= n) {
        return Err(AmdahlError::SpeedupOutOfRange { n, speedup });
    }
    Ok((n - speedup) / (speedup * (n - 1.0)))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SerialFit {
    /// S, clamped to [0, 1].
    pub serial_fraction: f64,
    /// Fitted time on one full unit, seconds.
    pub t1_s: f64,
    /// RMS of (measured - fitted) times, seconds.
    pub rms_residual_s: f64,
    pub points: usize,
}

/// Least squares of `t = a + b / N` over `(units, seconds)` points.
pub fn fit_serial_fraction(points: &[(f64, f64)]) -> Result<SerialFit, AmdahlError> {
    for (i, (n, t)) in points.iter().enumerate() {
        if !(n.is_finite() && *n > 0.0 && t.is_finite() && *t > 0.0) {
            return Err(AmdahlError::BadPoint(i));
        }
    }
    let mut counts: Vec<f64> = points.iter().map(|p| p.0).collect();
    counts.sort_by(f64::total_cmp);
    counts.dedup();
    if counts.len() < 2 {
        return Err(AmdahlError::TooFewCounts(counts.len()));
    }
    let m = points.len() as f64;
    let xs: Vec<f64> = points.iter().map(|p| 1.0 / p.0).collect();
    let mx = xs.iter().sum::<f64>() / m;
    let my = points.iter().map(|p| p.1).sum::<f64>() / m;
    let sxx: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    let sxy: f64 = xs
        .iter()
        .zip(points)
        .map(|(x, p)| (x - mx) * (p.1 - my))
        .sum();
    let b = sxy / sxx;
    let a = my - b * mx;
    if b <= 0.0 {
        return Err(AmdahlError::NoParallelPart(b));
    }
    let t1 = a + b;
    let rss: f64 = xs
        .iter()
        .zip(points)
        .map(|(x, p)| (p.1 - a - b * x).powi(2))
        .sum();
    Ok(SerialFit {
        serial_fraction: (a / t1).clamp(0.0, 1.0),
        t1_s: t1,
        rms_residual_s: (rss / m).sqrt(),
        points: points.len(),
    })
}

/// The paper's energy test: does adding `dp_w` watts that saves `dt` of `t0` pay off?
pub fn energy_pays(p0_w: f64, dp_w: f64, t0: f64, dt: f64) -> bool {
    (p0_w + dp_w) * (t0 - dt) < p0_w * t0
}

/// The paper's `1/S + 1`: beyond this many compute units parallel efficiency is below 1/2.
/// Infinite for a perfectly parallel job.
pub fn efficiency_limit(s: f64) -> f64 {
    if s <= 0.0 {
        f64::INFINITY
    } else {
        1.0 / s + 1.0
    }
}

/// For prefixes 1..=len of an order, given `(compute, power_w)` of each prefix: the
/// largest `n` such that every step up to `n` paid off in energy (the marginal rule).
/// Returns 0 for an empty input.
pub fn energy_cap(s: f64, prefixes: &[(f64, f64)]) -> usize {
    if prefixes.is_empty() {
        return 0;
    }
    for k in 1..prefixes.len() {
        let (c0, p0) = prefixes[k - 1];
        let (c1, p1) = prefixes[k];
        let (t0, t1) = (relative_time(s, c0), relative_time(s, c1));
        if !energy_pays(p0, p1 - p0, t0, t0 - t1) {
            return k;
        }
    }
    prefixes.len()
}

/// The prefix length (1-based) with the least energy `P * t` over the whole order.
pub fn energy_optimum(s: f64, prefixes: &[(f64, f64)]) -> usize {
    prefixes
        .iter()
        .enumerate()
        .map(|(i, (c, p))| (i + 1, p * relative_time(s, *c)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map_or(0, |x| x.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speedup_is_amdahl() {
        assert!((speedup(0.0, 8.0) - 8.0).abs() < 1e-12);
        assert!((speedup(1.0, 8.0) - 1.0).abs() < 1e-12);
        assert!((speedup(0.1, 10.0) - 1.0 / (0.1 + 0.09)).abs() < 1e-12);
        assert_eq!(speedup(0.1, 0.0), 0.0);
        // Monotone in compute.
        let mut last = 0.0;
        for c in 1..64 {
            let s = speedup(0.05, f64::from(c));
            assert!(s > last);
            last = s;
        }
    }

    #[test]
    fn serial_fraction_inverts_speedup() {
        for s in [0.0, 0.01, 0.077, 0.3, 0.9] {
            for n in [2.0, 7.0, 12.0] {
                let got = serial_fraction_from_speedup(n, speedup(s, n)).unwrap();
                assert!((got - s).abs() < 1e-12, "{s} {n} {got}");
            }
        }
        // The seed's Table 2: at 12 units S_N/N = 0.54 and 0.63.
        let s1 = serial_fraction_from_speedup(12.0, 0.54 * 12.0).unwrap();
        let s2 = serial_fraction_from_speedup(12.0, 0.63 * 12.0).unwrap();
        assert!(
            (s1 - 0.0774).abs() < 1e-3 && (s2 - 0.0534).abs() < 1e-3,
            "{s1} {s2}"
        );
        assert!(serial_fraction_from_speedup(1.0, 1.0).is_err());
        assert!(serial_fraction_from_speedup(4.0, 5.0).is_err());
        assert!(serial_fraction_from_speedup(4.0, 0.0).is_err());
    }

    #[test]
    fn least_squares_recovers_s_and_t1() {
        let (s, t1) = (0.08, 400.0);
        let pts: Vec<(f64, f64)> = [2.0, 4.0, 8.0, 12.0]
            .iter()
            .map(|&n| (n, t1 * relative_time(s, n)))
            .collect();
        let f = fit_serial_fraction(&pts).unwrap();
        assert!((f.serial_fraction - s).abs() < 1e-9);
        assert!((f.t1_s - t1).abs() < 1e-6);
        assert!(f.rms_residual_s < 1e-9);
        assert_eq!(
            fit_serial_fraction(&[(4.0, 1.0), (4.0, 1.1)]),
            Err(AmdahlError::TooFewCounts(1))
        );
        assert_eq!(
            fit_serial_fraction(&[(4.0, 1.0), (-1.0, 1.1)]),
            Err(AmdahlError::BadPoint(1))
        );
        assert!(matches!(
            fit_serial_fraction(&[(2.0, 1.0), (4.0, 2.0)]),
            Err(AmdahlError::NoParallelPart(_))
        ));
    }

    #[test]
    fn efficiency_limit_is_where_efficiency_halves() {
        for s in [0.01, 0.05, 0.1, 0.25] {
            let n = efficiency_limit(s);
            assert!((efficiency(s, n) - 0.5).abs() < 1e-12);
            assert!(efficiency(s, n + 1.0) < 0.5);
        }
        // The paper's example: S = 0.1 -> N > 11.
        assert!((efficiency_limit(0.1) - 11.0).abs() < 1e-12);
        assert!(efficiency_limit(0.0).is_infinite());
    }

    #[test]
    fn energy_rule_matches_its_definition() {
        // 100 W for 10 s = 1000 J; +10 W saving 1 s -> 990 J: pays.
        assert!(energy_pays(100.0, 10.0, 10.0, 1.0));
        // +20 W saving 1 s -> 1080 J: does not.
        assert!(!energy_pays(100.0, 20.0, 10.0, 1.0));
    }

    #[test]
    fn energy_cap_stops_at_first_unprofitable_unit() {
        // Fully serial job: no unit after the first pays.
        let pre: Vec<(f64, f64)> = (1..=8)
            .map(|c| (f64::from(c), 100.0 + 10.0 * f64::from(c)))
            .collect();
        assert_eq!(energy_cap(1.0, &pre), 1);
        // Perfectly parallel job with a large idle power: every unit pays.
        assert_eq!(energy_cap(0.0, &pre), 8);
        assert_eq!(energy_optimum(0.0, &pre), 8);
        // The cap is a prefix where energy still fell at every step.
        let s = 0.3;
        let k = energy_cap(s, &pre);
        for i in 1..k {
            let e = |j: usize| pre[j].1 * relative_time(s, pre[j].0);
            assert!(e(i) < e(i - 1));
        }
        assert_eq!(energy_cap(0.5, &[]), 0);
    }
}
