//! Exponential backoff with jitter: one rule for every retry in Holdfast
//! (model calls, failed steps, webhook deliveries, database reconnects,
//! the machine daemon's calls).

use std::time::Duration;

use rand::Rng;

/// Delays that double per attempt from `base` up to `cap`, each a random
/// point in the upper half of that ceiling ("equal jitter"): many agents or
/// processes failing together (a provider outage, a Postgres restart) spread
/// out, and no retry comes sooner than half its ceiling, so the delays grow
/// from one attempt to the next and a failing paid call is never retried in
/// a tight loop. The model defaults (1 s doubling to a 60 s cap) suit real
/// providers; operators and tests may shorten them
/// (`HOLDFAST_MODEL_BACKOFF_BASE`, `HOLDFAST_MODEL_BACKOFF_MAX`, ...).
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
    /// treated as 1): uniformly random in `[ceiling / 2, ceiling]` with
    /// `ceiling = min(cap, base * 2^(attempt-1))`. Never earlier than
    /// `retry_after`, the server's own hint, when given.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let ceiling = self.ceiling(attempt);
        let half = ceiling / 2;
        let jittered = half + rand::rng().random_range(Duration::ZERO..=ceiling - half);
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
    fn delays_stay_in_the_upper_half_of_the_exponential_ceiling() {
        let backoff = Backoff::default();
        for attempt in 0..=40 {
            let ceiling = backoff.ceiling(attempt);
            for _ in 0..50 {
                let delay = backoff.delay(attempt, None);
                assert!(delay <= ceiling, "attempt {attempt}: {delay:?}");
                assert!(delay >= ceiling / 2, "attempt {attempt}: {delay:?}");
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
        assert!(samples.len() > 10, "jitter spreads retries: {samples:?}");
    }

    #[test]
    fn each_delay_is_at_least_the_previous_attempts_until_the_cap() {
        let backoff = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(2),
        };
        for _ in 0..50 {
            let delays: Vec<Duration> = (1..=8).map(|n| backoff.delay(n, None)).collect();
            // Attempt n+1's floor is attempt n's ceiling, until both reach the cap.
            for pair in delays.windows(2).take(4) {
                assert!(pair[1] >= pair[0], "{delays:?}");
            }
        }
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
