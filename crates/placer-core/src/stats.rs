//! Small statistics over measurement series: the one median of placer, and the one
//! bounded window of the last N samples.

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

#[cfg(test)]
mod tests {
    use super::{median, push_bounded};

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
}
