//! Small statistics over measurement series: the one median of placer.

/// The median of `values` (mean of the middle two for an even count); `None` when empty.
/// NaNs sort last (total order), so a stray NaN cannot panic a benchmark report.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn odd_even_empty() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn nan_does_not_panic() {
        assert_eq!(median(&[1.0, f64::NAN, 2.0]), Some(2.0));
    }
}
