//! Durations as operators write them: `500ms`, `30s`, `5m`, `1h`.

use std::time::Duration;

/// Parse `500ms`, `30s`, `5m`, `1h` (a whole number and a unit).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("duration {text:?} needs a unit: ms, s, m or h"))?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("duration {text:?} must start with a whole number"))?;
    let millis = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => {
            return Err(format!(
                "duration {text:?} has unknown unit {unit:?}: use ms, s, m or h"
            ))
        }
    }
    .ok_or_else(|| format!("duration {text:?} is too large"))?;
    Ok(Duration::from_millis(millis))
}

/// A duration as a Postgres interval literal, for `$n::text::interval`.
pub fn to_interval(d: Duration) -> String {
    format!("{} microseconds", d.as_micros())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
    }

    #[test]
    fn rejects_missing_or_unknown_units() {
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("30d").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("99999999999999999999h").is_err());
    }
}
