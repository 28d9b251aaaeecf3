//! How long to wait before retrying a model call.

use std::time::Duration;

use rand::Rng;

/// Exponential backoff with full jitter. The defaults (1 s doubling to a
/// 60 s cap) suit real providers; operators and tests may shorten them
/// (`HOLDFAST_MODEL_BACKOFF_BASE`, `HOLDFAST_MODEL_BACKOFF_MAX`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The ceiling of the first retry's delay; it doubles with each attempt.
    pub base: Duration,
    /// No computed delay exceeds this (a provider's `Retry-After` may).
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// The delay before retry number `attempt` (1 for the first retry; 0 is
    /// treated as 1): a uniformly random delay in
    /// `[0, min(cap, base * 2^(attempt-1))]`, so that many agents failing
    /// together do not retry together. Never earlier than `retry_after`,
    /// the provider's own hint, when given.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let ceiling = self.ceiling(attempt);
        let jittered =
            Duration::from_millis(rand::rng().random_range(0..=ceiling.as_millis() as u64));
        jittered.max(retry_after.unwrap_or(Duration::ZERO))
    }

    /// The upper bound of [`Backoff::delay`]'s jitter for `attempt`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let doublings = attempt.max(1) - 1;
        let factor = 1u32.checked_shl(doublings).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_stay_within_the_exponential_ceiling() {
        let backoff = Backoff::default();
        for attempt in 0..=40 {
            let ceiling = backoff.ceiling(attempt);
            for _ in 0..50 {
                assert!(backoff.delay(attempt, None) <= ceiling, "attempt {attempt}");
            }
        }
        assert_eq!(backoff.ceiling(1), Duration::from_secs(1));
        assert_eq!(backoff.ceiling(3), Duration::from_secs(4));
        assert_eq!(backoff.ceiling(7), backoff.cap);
        assert_eq!(backoff.ceiling(u32::MAX), backoff.cap);
    }

    #[test]
    fn a_shorter_base_and_cap_scale_the_delays() {
        let backoff = Backoff {
            base: Duration::from_millis(10),
            cap: Duration::from_millis(40),
        };
        assert_eq!(backoff.ceiling(2), Duration::from_millis(20));
        assert_eq!(backoff.ceiling(9), Duration::from_millis(40));
        assert!(backoff.delay(9, None) <= Duration::from_millis(40));
    }

    #[test]
    fn delays_are_jittered() {
        let backoff = Backoff::default();
        let samples: std::collections::HashSet<Duration> =
            (0..100).map(|_| backoff.delay(8, None)).collect();
        assert!(
            samples.len() > 10,
            "full jitter spreads retries: {samples:?}"
        );
    }

    #[test]
    fn never_earlier_than_retry_after() {
        let backoff = Backoff::default();
        for attempt in 1..=10 {
            let hint = Duration::from_secs(2);
            assert!(backoff.delay(attempt, Some(hint)) >= hint);
        }
        // Even a hint beyond the cap is honoured.
        let long = Duration::from_secs(600);
        assert_eq!(backoff.delay(3, Some(long)), long);
    }
}
