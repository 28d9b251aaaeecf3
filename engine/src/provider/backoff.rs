//! How long to wait before retrying a model call.

use std::time::Duration;

use rand::Rng;

/// The ceiling of the first retry's delay; it doubles with each attempt.
pub const BACKOFF_BASE: Duration = Duration::from_secs(1);
/// No computed delay exceeds this (a provider's `Retry-After` may).
pub const BACKOFF_CAP: Duration = Duration::from_secs(60);

/// The delay before retry number `attempt` (1 for the first retry; 0 is
/// treated as 1): exponential backoff with full jitter, a uniformly random
/// delay in `[0, min(BACKOFF_CAP, BACKOFF_BASE * 2^(attempt-1))]`, so that
/// many agents failing together do not retry together. Never earlier than
/// `retry_after`, the provider's own hint, when given.
pub fn backoff_delay(attempt: u32, retry_after: Option<Duration>) -> Duration {
    let ceiling = backoff_ceiling(attempt);
    let jittered = Duration::from_millis(rand::rng().random_range(0..=ceiling.as_millis() as u64));
    jittered.max(retry_after.unwrap_or(Duration::ZERO))
}

/// The upper bound of [`backoff_delay`]'s jitter for `attempt`.
pub fn backoff_ceiling(attempt: u32) -> Duration {
    let doublings = attempt.max(1) - 1;
    let factor = 1u32.checked_shl(doublings).unwrap_or(u32::MAX);
    BACKOFF_BASE.saturating_mul(factor).min(BACKOFF_CAP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_stay_within_the_exponential_ceiling() {
        for attempt in 0..=40 {
            let ceiling = backoff_ceiling(attempt);
            for _ in 0..50 {
                assert!(backoff_delay(attempt, None) <= ceiling, "attempt {attempt}");
            }
        }
        assert_eq!(backoff_ceiling(1), Duration::from_secs(1));
        assert_eq!(backoff_ceiling(3), Duration::from_secs(4));
        assert_eq!(backoff_ceiling(7), BACKOFF_CAP);
        assert_eq!(backoff_ceiling(u32::MAX), BACKOFF_CAP);
    }

    #[test]
    fn delays_are_jittered() {
        let samples: std::collections::HashSet<Duration> =
            (0..100).map(|_| backoff_delay(8, None)).collect();
        assert!(
            samples.len() > 10,
            "full jitter spreads retries: {samples:?}"
        );
    }

    #[test]
    fn never_earlier_than_retry_after() {
        for attempt in 1..=10 {
            let hint = Duration::from_secs(2);
            assert!(backoff_delay(attempt, Some(hint)) >= hint);
        }
        // Even a hint beyond the cap is honoured.
        let long = Duration::from_secs(600);
        assert_eq!(backoff_delay(3, Some(long)), long);
    }
}
