//! The one duration grammar of placer, for every CLI flag and config key:
//! `250ms`, `1.5s`, `2m`, `1h`, `100us`, or a bare number meaning seconds.
//!
//! Invariants (each tested below):
//! 1. A bare number is seconds: `"5"` == `"5s"`.
//! 2. Negative, NaN, infinite and unknown-unit inputs are errors, never clamped.
//! 3. A value that does not fit a `Duration` is an error, never a wrap-around or saturation.
//! 4. Zero parses (callers that need a positive period use [`parse_positive_duration`]).

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("bad duration {0:?}: expected a number with a unit, e.g. 250ms, 1s, 2m (a bare number is seconds)")]
    Syntax(String),
    #[error("unknown unit {unit:?} in duration {input:?} (use us, ms, s, m or h)")]
    Unit { input: String, unit: String },
    #[error("duration {0:?} is too large")]
    Overflow(String),
    #[error("duration {0:?} must be greater than zero")]
    Zero(String),
}

/// Parses a duration in placer's grammar (see the module doc).
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let s = input.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    if num.is_empty() {
        return Err(DurationError::Syntax(input.to_string()));
    }
    let value: f64 = num
        .parse()
        .map_err(|_| DurationError::Syntax(input.to_string()))?;
    let secs_per_unit = match unit.trim() {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "us" => 1e-6,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        u => {
            return Err(DurationError::Unit {
                input: input.to_string(),
                unit: u.to_string(),
            })
        }
    };
    let secs = value * secs_per_unit;
    Duration::try_from_secs_f64(secs).map_err(|_| DurationError::Overflow(input.to_string()))
}

/// [`parse_duration`], refusing zero (intervals, periods, phases).
pub fn parse_positive_duration(input: &str) -> Result<Duration, DurationError> {
    let d = parse_duration(input)?;
    if d.is_zero() {
        return Err(DurationError::Zero(input.to_string()));
    }
    Ok(d)
}

/// Writes `d` in the grammar, in the largest unit that represents it exactly (`1s`, `250ms`,
/// `2m`, `0`); `parse_duration(format_duration(d)) == d` for whole microseconds.
pub fn format_duration(d: Duration) -> String {
    let us = d.as_micros();
    if us == 0 {
        return "0".into();
    }
    for (unit, per) in [
        ("h", 3_600_000_000u128),
        ("m", 60_000_000),
        ("s", 1_000_000),
        ("ms", 1_000),
    ] {
        if us.is_multiple_of(per) {
            return format!("{}{unit}", us / per);
        }
    }
    format!("{us}us")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_round_trips() {
        for (d, text) in [
            (Duration::from_secs(1), "1s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_secs(120), "2m"),
            (Duration::from_millis(1500), "1500ms"),
            (Duration::from_micros(10), "10us"),
            (Duration::ZERO, "0"),
        ] {
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(text).unwrap(), d);
        }
    }

    #[test]
    fn bare_number_is_seconds() {
        assert_eq!(parse_duration("5"), parse_duration("5s"));
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
    }

    #[test]
    fn units() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("100us").unwrap(), Duration::from_micros(100));
        assert_eq!(parse_duration(" 3s ").unwrap(), Duration::from_secs(3));
    }

    #[test]
    fn bad_inputs_are_errors() {
        for bad in ["", "s", "-1s", "abc", "1.2.3s", "nan", "inf", "1 parsec"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
        assert!(matches!(
            parse_duration("3w"),
            Err(DurationError::Unit { .. })
        ));
    }

    #[test]
    fn overflow_is_an_error_not_a_wrap() {
        assert!(matches!(
            parse_duration("100000000000000000000s"),
            Err(DurationError::Overflow(_))
        ));
        // 18446744073709551615 ms is about 584 million years: still representable, and it
        // must come back as that, not as a wrapped small value.
        let d = parse_duration("18446744073709551615ms").unwrap();
        assert!(d.as_secs() > 18_000_000_000_000_000);
    }

    #[test]
    fn zero() {
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(matches!(
            parse_positive_duration("0ms"),
            Err(DurationError::Zero(_))
        ));
    }
}
