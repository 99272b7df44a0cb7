//! Sizes and durations as command lines and `SYMMEM_*` variables write them.

use std::time::Duration;

/// Parses `4096`, `64K`, `512M`, `4G` (binary units; an optional trailing `B`/`iB`).
pub fn parse_bytes(text: &str) -> Option<u64> {
    let t = text.trim().to_ascii_uppercase();
    let t = t
        .strip_suffix("IB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(&t);
    let (digits, shift) = match t.chars().last()? {
        'K' => (&t[..t.len() - 1], 10),
        'M' => (&t[..t.len() - 1], 20),
        'G' => (&t[..t.len() - 1], 30),
        'T' => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    digits.trim().parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// Parses a duration as the command lines and `SYMMEM_*` variables take it: a whole number
/// with an optional unit, `90`, `90s`, `500ms` or `2m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let bad = || {
        format!(
            "invalid duration `{text}`: write a whole number with an optional unit (`ms`, \
             `s` or `m`), e.g. `90`, `90s`, `500ms` or `2m`"
        )
    };
    let value: u64 = number.parse().map_err(|_| bad())?;
    let duration = match unit {
        "" | "s" => Duration::from_secs(value),
        "ms" => Duration::from_millis(value),
        "m" => Duration::from_secs(value.checked_mul(60).ok_or_else(bad)?),
        _ => return Err(bad()),
    };
    // Deadlines are computed as now + duration: keep them far from overflow.
    if duration > MAX_DURATION {
        return Err(format!(
            "duration `{text}` is longer than the most accepted, 7 days (`10080m`)"
        ));
    }
    Ok(duration)
}

/// Writes a duration the way [`parse_duration`] reads it: `90s` for whole seconds, `1500ms`
/// for whole milliseconds (finer durations, which no setting takes, in Rust's debug form).
/// Configured durations (timeouts, defaults) print through it, so a message shows what to type.
pub fn format_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{d:?}")
    }
}

/// A measured time for progress and reports: `85ms` under a second, else seconds with one
/// decimal, `1.2s`.
pub fn format_elapsed(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// Writes a size the way [`parse_bytes`] reads it, in the largest binary unit that divides
/// it: `1G`, `512M`, `4097`.
pub fn format_bytes(bytes: u64) -> String {
    for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if bytes != 0 && bytes.trailing_zeros() >= shift {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// The longest duration [`parse_duration`] accepts.
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Parses a timeout as [`parse_duration`] does, and refuses zero: a timeout of 0 would end every
/// run the moment it starts, which nobody means.
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    let timeout = parse_duration(text)?;
    if timeout.is_zero() {
        return Err(format!(
            "a timeout of `{}` would stop the run the moment it starts; give how long a run \
             may take, e.g. `90s` or `10m` (at most `10080m`, 7 days)",
            text.trim()
        ));
    }
    Ok(timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("64k"), Some(64 << 10));
        assert_eq!(parse_bytes("512M"), Some(512 << 20));
        assert_eq!(parse_bytes("4GiB"), Some(4 << 30));
        assert_eq!(parse_bytes("1GB"), Some(1 << 30));
        assert_eq!(parse_bytes("lots"), None);
        assert_eq!(parse_bytes(""), None);
        assert_eq!(parse_bytes("99999999999T"), None);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(
            parse_duration("18446744073709551615")
                .unwrap_err()
                .contains("7 days")
        );
        for bad in ["", "s", "1.5s", "10h", "-3", "5 s", "7d"] {
            let err = parse_duration(bad).unwrap_err();
            assert!(err.contains("e.g. `90`"), "{bad}: {err}");
            assert!(err.contains("(`ms`, `s` or `m`)"), "{bad}: {err}");
        }
        // Issue 24 (D13): the limit is said in a unit that parses.
        let err = parse_duration("10081m").unwrap_err();
        assert!(err.contains("`10080m`"), "{err}");
        assert_eq!(parse_duration("10080m"), Ok(MAX_DURATION));
    }

    #[test]
    fn formatted_durations_parse_back() {
        for (d, text) in [
            (Duration::from_secs(60), "60s"),
            (Duration::ZERO, "0s"),
            (Duration::from_millis(1500), "1500ms"),
            (Duration::from_millis(5), "5ms"),
        ] {
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(text), Ok(d));
        }
        assert_eq!(format_duration(Duration::from_micros(1500)), "1.5ms");
    }

    #[test]
    fn elapsed_times() {
        assert_eq!(format_elapsed(Duration::from_millis(85)), "85ms");
        assert_eq!(format_elapsed(Duration::from_millis(1249)), "1.2s");
        assert_eq!(format_elapsed(Duration::from_secs(2)), "2.0s");
    }

    #[test]
    fn formatted_sizes_parse_back() {
        for (bytes, text) in [
            (1u64 << 30, "1G"),
            (512 << 20, "512M"),
            (3 << 10, "3K"),
            (4097, "4097"),
            (0, "0"),
            (5 << 40, "5T"),
        ] {
            assert_eq!(format_bytes(bytes), text);
            assert_eq!(parse_bytes(text), Some(bytes));
        }
    }

    #[test]
    fn timeouts_are_never_zero() {
        assert_eq!(parse_timeout("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_timeout("1ms"), Ok(Duration::from_millis(1)));
        for zero in ["0", "0s", "0ms", "0m", " 0 "] {
            let err = parse_timeout(zero).unwrap_err();
            assert!(err.contains("the moment it starts"), "{zero}: {err}");
            assert!(err.contains("e.g. `90s`"), "{zero}: {err}");
        }
        // Other mistakes keep parse_duration's message.
        assert!(parse_timeout("1.5h").unwrap_err().contains("e.g. `90`"));
    }
}
