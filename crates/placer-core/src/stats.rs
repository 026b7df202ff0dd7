//! Small statistics over measurement series: the one median of placer, the one bounded
//! window of the last N samples, Student's t quantile and the small-n interval of a ratio.

use std::collections::VecDeque;

/// The median of the finite values of `values` (mean of the middle two for an even count);
/// `None` when there are none. Non-finite values (a failed trial reads NaN) are ignored.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// Appends `x` to the window `q`, dropping the oldest samples beyond the last `window`
/// (at least one is kept).
pub fn push_bounded<T>(q: &mut VecDeque<T>, x: T, window: usize) {
    q.push_back(x);
    while q.len() > window.max(1) {
        q.pop_front();
    }
}

/// Two-sided 5% critical value of Student's t (its 97.5% quantile) for `df` degrees of
/// freedom. A fractional df (Welch-Satterthwaite) takes the value of the whole df below it,
/// the wider one, so the test never claims more than its df allow.
pub fn t_critical_95(df: f64) -> f64 {
    // Exact for 1..=30, then 40, 60, 120; the normal's 1.96 beyond.
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    if df.is_nan() || df < 1.0 {
        return f64::INFINITY;
    }
    let whole = df.floor();
    if whole <= 30.0 {
        TABLE[whole as usize - 1]
    } else if whole < 40.0 {
        2.042
    } else if whole < 60.0 {
        2.021
    } else if whole < 120.0 {
        2.000
    } else {
        1.980
    }
}

/// The geometric mean of paired ratios with its 95% interval from a one-sample t on their
/// logarithms (df = n - 1): valid at small n when the log ratios are about normal, where a
/// bootstrap over a handful of values is not.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogRatioInterval {
    pub n: usize,
    pub geo_mean: f64,
    pub ci95: (f64, f64),
    /// Standard deviation of the log ratios.
    pub sd_log: f64,
}

/// [`LogRatioInterval`] of `ratios` (each > 0 and finite); None with fewer than 2.
pub fn log_ratio_interval(ratios: &[f64]) -> Option<LogRatioInterval> {
    let logs: Vec<f64> = ratios
        .iter()
        .filter(|r| r.is_finite() && **r > 0.0)
        .map(|r| r.ln())
        .collect();
    let n = logs.len();
    if n < 2 {
        return None;
    }
    let mean = logs.iter().sum::<f64>() / n as f64;
    let var = logs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let half = t_critical_95((n - 1) as f64) * (var / n as f64).sqrt();
    Some(LogRatioInterval {
        n,
        geo_mean: mean.exp(),
        ci95: ((mean - half).exp(), (mean + half).exp()),
        sd_log: var.sqrt(),
    })
}

/// P(X <= k) for X ~ Binomial(n, p), summed in logs so that large n do not underflow.
fn binomial_cdf(k: usize, n: usize, p: f64) -> f64 {
    if p <= 0.0 {
        return 1.0;
    }
    if p >= 1.0 {
        return if k >= n { 1.0 } else { 0.0 };
    }
    let (lp, lq) = (p.ln(), (1.0 - p).ln());
    // ln C(n, i) built up term by term.
    let mut ln_c = 0.0;
    let mut terms = Vec::with_capacity(k.min(n) + 1);
    for i in 0..=k.min(n) {
        if i > 0 {
            ln_c += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        terms.push(ln_c + i as f64 * lp + (n - i) as f64 * lq);
    }
    let max = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (max + terms.iter().map(|t| (t - max).exp()).sum::<f64>().ln())
        .exp()
        .min(1.0)
}

/// The exact (Clopper-Pearson) 95% interval of a binomial proportion: `k` successes in `n`
/// trials; (0, 1) with no trials.
pub fn clopper_pearson_95(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let k = k.min(n);
    // Bisection for the p at which a CDF (falling in p) equals `target`.
    let solve = |at: usize, target: f64| -> f64 {
        let (mut lo, mut hi) = (0.0f64, 1.0f64);
        for _ in 0..60 {
            let mid = 0.5 * (lo + hi);
            if binomial_cdf(at, n, mid) > target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        0.5 * (lo + hi)
    };
    // Lower: P(X >= k) = 0.025, i.e. P(X <= k - 1) = 0.975; upper: P(X <= k) = 0.025.
    let lower = if k == 0 { 0.0 } else { solve(k - 1, 0.975) };
    let upper = if k == n { 1.0 } else { solve(k, 0.025) };
    (lower, upper)
}

#[cfg(test)]
mod tests {
    #[test]
    fn clopper_pearson_matches_known_intervals() {
        // R: binom.test(7, 114)$conf.int = 0.0250..0.1224; binom.test(0, 20) = 0..0.1684.
        let (lo, hi) = super::clopper_pearson_95(7, 114);
        assert!(
            (lo - 0.0250).abs() < 5e-4 && (hi - 0.1224).abs() < 5e-4,
            "{lo} {hi}"
        );
        let (lo, hi) = super::clopper_pearson_95(0, 20);
        assert!(lo == 0.0 && (hi - 0.1684).abs() < 5e-4, "{hi}");
        let (lo, hi) = super::clopper_pearson_95(3, 34);
        assert!(
            (lo - 0.0186).abs() < 5e-4 && (hi - 0.2368).abs() < 5e-4,
            "{lo} {hi}"
        );
    }

    use super::*;

    #[test]
    fn bounded_window_keeps_the_newest() {
        let mut q = std::collections::VecDeque::new();
        for x in 1..=5 {
            push_bounded(&mut q, x, 3);
        }
        assert_eq!(q, [3, 4, 5]);
        push_bounded(&mut q, 6, 0);
        assert_eq!(q, [6]);
    }

    #[test]
    fn odd_even_empty() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn non_finite_values_are_ignored() {
        assert_eq!(median(&[1.0, f64::NAN, 2.0]), Some(1.5));
        assert_eq!(median(&[f64::INFINITY]), None);
    }

    #[test]
    fn t_quantiles_are_monotone_and_conservative_between_rows() {
        assert_eq!(t_critical_95(4.0), 2.776);
        // Welch's 4.7 takes df 4's wider value.
        assert_eq!(t_critical_95(4.7), 2.776);
        let mut last = f64::INFINITY;
        for df in 1..200 {
            let t = t_critical_95(df as f64);
            assert!(t <= last && t > 1.959, "df {df}");
            last = t;
        }
        assert!(t_critical_95(0.5).is_infinite());
    }

    #[test]
    fn a_log_ratio_interval_is_a_t_interval_on_logs() {
        // Logs +-0.1 around 0: mean 0, sd 0.1095 (n = 5), half-width 2.776 * sd / sqrt(5).
        let r: Vec<f64> = [0.1f64, -0.1, 0.1, -0.1, 0.0]
            .iter()
            .map(|x| x.exp())
            .collect();
        let i = log_ratio_interval(&r).unwrap();
        assert_eq!(i.n, 5);
        assert!((i.geo_mean - 1.0).abs() < 1e-12);
        let half = 2.776 * (0.04f64 / 4.0).sqrt() / 5f64.sqrt();
        assert!((i.ci95.1.ln() - half).abs() < 1e-9, "{i:?}");
        assert!((i.ci95.0.ln() + half).abs() < 1e-9, "{i:?}");
        assert!(log_ratio_interval(&[1.2]).is_none());
        assert!(log_ratio_interval(&[1.2, -1.0, 0.0]).is_none());
    }
}
