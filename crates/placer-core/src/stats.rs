//! Small statistics over measurement series: the one median of placer, the one bounded
//! window of the last N samples, Student's t distribution (its 5% critical values, its CDF
//! and quantiles for whole degrees of freedom), the small-n interval of a ratio, the
//! minimum detectable effect of a paired t test, Holm's family-wise correction, Pearson's
//! correlation and the Clopper-Pearson interval of a binomial proportion.

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

/// P(|T| < t) for Student's t with `df` (whole, >= 1) degrees of freedom: the closed
/// finite series in θ = atan(t / √df) (Abramowitz & Stegun 26.7.3-4), exact for whole df,
/// which is all a paired test over rounds needs. NaN for df 0.
pub fn t_central_prob(t: f64, df: u32) -> f64 {
    if df == 0 || t.is_nan() {
        return f64::NAN;
    }
    let theta = (t.abs() / f64::from(df).sqrt()).atan();
    let (s, c) = theta.sin_cos();
    let c2 = c * c;
    // The series' terms: each is the last times cos²θ · (k - 1) / k, k stepping by 2.
    let sum = |first_k: u32| {
        let (mut term, mut acc, mut k) = (1.0, 1.0, first_k);
        while k < df {
            term *= c2 * f64::from(k - 1) / f64::from(k);
            acc += term;
            k += 2;
        }
        acc
    };
    let a = if df % 2 == 1 {
        let series = if df == 1 { 0.0 } else { s * c * sum(3) };
        2.0 / std::f64::consts::PI * (theta + series)
    } else {
        s * sum(2)
    };
    a.clamp(0.0, 1.0)
}

/// Two-sided p-value of a t statistic with `df` (whole) degrees of freedom.
pub fn t_two_sided_p(t: f64, df: u32) -> f64 {
    1.0 - t_central_prob(t, df)
}

/// The `p` quantile (0.5 < p < 1) of Student's t with `df` (whole, >= 1) degrees of freedom,
/// by bisection on [`t_central_prob`] (to 1e-9): e.g. 0.975 for a two-sided 5% test, 0.8
/// for 80% power. NaN outside that range.
pub fn t_quantile(p: f64, df: u32) -> f64 {
    if df == 0 || p.is_nan() || p <= 0.5 || p >= 1.0 {
        return f64::NAN;
    }
    let want = 2.0 * p - 1.0;
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    // df 1 at p = 0.9999 is about 3183: the bracket doubles until it holds the quantile.
    while t_central_prob(hi, df) < want && hi < 1e12 {
        hi *= 2.0;
    }
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if t_central_prob(mid, df) < want {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo < 1e-9 {
            break;
        }
    }
    (lo + hi) / 2.0
}

/// The smallest true mean of `n` paired differences whose standard deviation is `sd` that a
/// two-sided one-sample t test at level `alpha` detects with probability `power` (the usual
/// approximation (t_{1-α/2} + t_{power}) · sd / √n, df = n - 1); None below 2 pairs. On
/// log ratios, its exp is the smallest ratio (or its inverse) a run of `n` rounds can see.
pub fn min_detectable_effect(sd: f64, n: usize, alpha: f64, power: f64) -> Option<f64> {
    if n < 2 || !sd.is_finite() || sd < 0.0 {
        return None;
    }
    let df = (n - 1) as u32;
    let z = t_quantile(1.0 - alpha / 2.0, df) + t_quantile(power, df);
    Some(z * sd / (n as f64).sqrt())
}

/// Holm's step-down correction: which of the hypotheses with these p-values are rejected
/// with the family-wise error rate held at `alpha` (the smallest p against α/m, the next
/// against α/(m-1), ... until one fails). NaN p-values are never rejected.
pub fn holm(p_values: &[f64], alpha: f64) -> Vec<bool> {
    let mut order: Vec<usize> = (0..p_values.len()).collect();
    order.sort_by(|a, b| p_values[*a].total_cmp(&p_values[*b]));
    let m = p_values.len();
    let mut rejected = vec![false; m];
    for (rank, &i) in order.iter().enumerate() {
        let p = p_values[i];
        if p.is_nan() || p > alpha / (m - rank) as f64 {
            break;
        }
        rejected[i] = true;
    }
    rejected
}

/// Pearson's correlation of two series of equal length (>= 3); None when either is constant.
pub fn correlation(x: &[f64], y: &[f64]) -> Option<f64> {
    let n = x.len();
    if n != y.len() || n < 3 {
        return None;
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / n as f64;
    let (mx, my) = (mean(x), mean(y));
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx).powi(2);
        syy += (b - my).powi(2);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

/// P(X <= k) for X ~ Binomial(n, p), summed in logs (n up to a few thousand).
pub fn binomial_cdf(k: u64, n: u64, p: f64) -> f64 {
    if k >= n {
        return 1.0;
    }
    if p <= 0.0 {
        return 1.0;
    }
    if p >= 1.0 {
        return 0.0;
    }
    let (lp, lq) = (p.ln(), (1.0 - p).ln());
    // ln C(n, i) built up term by term.
    let mut ln_choose = 0.0;
    let mut total = 0.0;
    for i in 0..=k {
        if i > 0 {
            ln_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        total += (ln_choose + i as f64 * lp + (n - i) as f64 * lq).exp();
    }
    total.min(1.0)
}

/// The exact (Clopper-Pearson) two-sided 95% interval of a proportion of `k` in `n`: the
/// p whose binomial tails at k are 2.5% each, by bisection. (0, 1) when n is 0.
pub fn clopper_pearson_95(k: u64, n: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let k = k.min(n);
    // The p where P(X <= j; p), which falls as p grows, crosses `target`, by bisection.
    let solve = |j: u64, target: f64| {
        let (mut lo, mut hi) = (0.0f64, 1.0f64);
        for _ in 0..100 {
            let mid = (lo + hi) / 2.0;
            if binomial_cdf(j, n, mid) > target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        (lo + hi) / 2.0
    };
    // Lower: P(X >= k) = 2.5%, i.e. P(X <= k - 1) = 97.5%; upper: P(X <= k) = 2.5%.
    let lower = if k == 0 { 0.0 } else { solve(k - 1, 0.975) };
    let upper = if k == n { 1.0 } else { solve(k, 0.025) };
    (lower, upper)
}

#[cfg(test)]
mod tests {
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
    #[test]
    fn t_quantiles_agree_with_the_table() {
        for df in 1..=30u32 {
            let q = t_quantile(0.975, df);
            assert!(
                (q - t_critical_95(f64::from(df))).abs() < 6e-4,
                "df {df}: {q}"
            );
        }
        // One-sided 80% (power) quantiles from the standard table.
        for (df, want) in [(1, 1.376), (4, 0.941), (9, 0.883), (29, 0.854)] {
            assert!((t_quantile(0.8, df) - want).abs() < 6e-4, "df {df}");
        }
        assert!((t_two_sided_p(2.776, 4) - 0.05).abs() < 1e-4);
        assert!((t_two_sided_p(0.0, 7) - 1.0).abs() < 1e-12);
        assert!(t_quantile(0.3, 4).is_nan() && t_quantile(0.9, 0).is_nan());
    }

    #[test]
    fn the_min_detectable_effect_shrinks_with_rounds_as_t_says() {
        // sd 0.2 of log ratios: 5 rounds see (2.776 + 0.941) * 0.2 / sqrt(5).
        let m5 = min_detectable_effect(0.2, 5, 0.05, 0.8).unwrap();
        assert!((m5 - 3.717 * 0.2 / 5f64.sqrt()).abs() < 1e-3, "{m5}");
        let m20 = min_detectable_effect(0.2, 20, 0.05, 0.8).unwrap();
        assert!(m20 < m5 / 2.0, "{m20} vs {m5}");
        assert_eq!(min_detectable_effect(0.2, 1, 0.05, 0.8), None);
        assert_eq!(min_detectable_effect(0.0, 5, 0.05, 0.8), Some(0.0));
    }

    #[test]
    fn holm_steps_down_and_stops_at_the_first_failure() {
        // m = 3: 0.01 <= 0.05/3, 0.02 <= 0.05/2, 0.04 <= 0.05/1: all three.
        assert_eq!(holm(&[0.04, 0.01, 0.02], 0.05), vec![true, true, true]);
        // 0.03 > 0.05/2 stops it: only the smallest.
        assert_eq!(holm(&[0.03, 0.01, 0.04], 0.05), vec![false, true, false]);
        // Each would pass alone at 5%, none as a family of three.
        assert_eq!(holm(&[0.02, 0.03, 0.04], 0.05), vec![false; 3]);
        assert_eq!(holm(&[f64::NAN, 0.001], 0.05), vec![false, true]);
        assert!(holm(&[], 0.05).is_empty());
    }

    #[test]
    fn correlation_is_pearsons() {
        let x = [1.0, 2.0, 3.0, 4.0];
        assert!((correlation(&x, &[2.0, 4.0, 6.0, 8.0]).unwrap() - 1.0).abs() < 1e-12);
        assert!((correlation(&x, &[-1.0, -2.0, -3.0, -4.0]).unwrap() + 1.0).abs() < 1e-12);
        assert!(correlation(&x, &[1.0, 1.0, 1.0, 1.0]).is_none());
        assert!(correlation(&[1.0, 2.0], &[1.0, 2.0]).is_none());
        let r = correlation(&x, &[1.0, 3.0, 2.0, 4.0]).unwrap();
        assert!((r - 0.8).abs() < 1e-12, "{r}");
    }

    #[test]
    fn clopper_pearson_matches_published_intervals() {
        // The figures: 3 of 34 runs, 1.9..23.7%; 7 of 114, 2.5..12.2%.
        let (lo, hi) = clopper_pearson_95(3, 34);
        assert!(
            (lo - 0.0186).abs() < 2e-4 && (hi - 0.2368).abs() < 2e-4,
            "{lo} {hi}"
        );
        let (lo, hi) = clopper_pearson_95(7, 114);
        assert!(
            (lo - 0.0250).abs() < 2e-4 && (hi - 0.1224).abs() < 2e-4,
            "{lo} {hi}"
        );
        // 0 of 30: upper 1 - 0.025^(1/30) = 0.1157.
        let (lo, hi) = clopper_pearson_95(0, 30);
        assert!(lo == 0.0 && (hi - 0.1157).abs() < 5e-4, "{hi}");
        assert_eq!(clopper_pearson_95(5, 5).1, 1.0);
        assert_eq!(clopper_pearson_95(0, 0), (0.0, 1.0));
        assert!((binomial_cdf(1, 2, 0.5) - 0.75).abs() < 1e-12);
    }
}
