//! The per-key request rate limit: a token bucket per API key, in this
//! process (GCRA, by the `governor` crate), so that one tenant cannot hold
//! the API's connection pool. A request over the limit gets 429 with
//! `Retry-After`; other keys are unaffected. A stream counts once, when it
//! opens. Several API instances each enforce the limit on their own.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use uuid::Uuid;

use crate::error::ApiError;

/// A rate: `requests` per `per`, with bursts of up to `burst` requests.
/// Written `50/s`, `600/m` or `100/s,burst=300` (the burst defaults to twice
/// the rate); `off` or `0` for no limit (see [`parse_rate_limit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    pub requests: NonZeroU32,
    pub per: Duration,
    pub burst: NonZeroU32,
}

impl RateLimit {
    /// The default: generous for one client's interactive and backend use,
    /// low enough that one key cannot take every pooled connection for long.
    pub const DEFAULT: RateLimit = RateLimit {
        requests: NonZeroU32::new(100).unwrap(),
        per: Duration::from_secs(1),
        burst: NonZeroU32::new(200).unwrap(),
    };

    fn quota(&self) -> Quota {
        // `per / requests` is at least a nanosecond for any u32 count per
        // second or longer, so the quota always exists.
        Quota::with_period(self.per / self.requests.get())
            .unwrap_or_else(|| Quota::per_second(self.requests))
            .allow_burst(self.burst)
    }
}

/// [`RateLimit::DEFAULT`] as written in `HOLDFAST_API_RATE_LIMIT`.
pub const DEFAULT_RATE_LIMIT: &str = "100/s,burst=200";

/// Parse `HOLDFAST_API_RATE_LIMIT`: `N/s`, `N/m` or `N/h`, optionally
/// `,burst=B`; `off` or `0` is `None` (no limit).
pub fn parse_rate_limit(text: &str) -> Result<Option<RateLimit>, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("off") || text == "0" {
        return Ok(None);
    }
    let expected =
        || format!("expected N/s, N/m or N/h, optionally ,burst=B, or off; got {text:?}");
    let (rate, burst) = match text.split_once(',') {
        Some((rate, burst)) => (rate, Some(burst)),
        None => (text, None),
    };
    let (count, unit) = rate.trim().split_once('/').ok_or_else(expected)?;
    let requests: NonZeroU32 = count.trim().parse().map_err(|_| expected())?;
    let per = match unit.trim() {
        "s" => Duration::from_secs(1),
        "m" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        _ => return Err(expected()),
    };
    let burst = match burst {
        None => requests.saturating_mul(NonZeroU32::new(2).unwrap()),
        Some(burst) => burst
            .trim()
            .strip_prefix("burst=")
            .and_then(|b| b.trim().parse().ok())
            .ok_or_else(expected)?,
    };
    Ok(Some(RateLimit {
        requests,
        per,
        burst,
    }))
}

/// Every this many checks, the buckets of idle keys are dropped.
const FORGET_IDLE_EVERY: u64 = 4096;

/// The buckets of every key that made a request recently.
pub struct KeyRateLimiter {
    limiter: DefaultKeyedRateLimiter<Uuid>,
    checks: AtomicU64,
}

impl KeyRateLimiter {
    pub fn new(limit: RateLimit) -> KeyRateLimiter {
        KeyRateLimiter {
            limiter: DefaultKeyedRateLimiter::keyed(limit.quota()),
            checks: AtomicU64::new(0),
        }
    }

    /// Take one request from `key`'s bucket, or the 429 saying when to retry.
    pub fn check(&self, key: Uuid) -> Result<(), ApiError> {
        if self.checks.fetch_add(1, Ordering::Relaxed) % FORGET_IDLE_EVERY == FORGET_IDLE_EVERY - 1
        {
            self.forget_idle();
        }
        self.limiter.check_key(&key).map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            ApiError::rate_limited(wait)
        })
    }

    /// Forget keys whose buckets are full again (they behave as new), so
    /// memory follows the keys in use, not every key ever seen.
    fn forget_idle(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rates_bursts_and_off() {
        assert_eq!(parse_rate_limit("off"), Ok(None));
        assert_eq!(parse_rate_limit("0"), Ok(None));
        let limit = parse_rate_limit("50/s").unwrap().unwrap();
        assert_eq!(
            (limit.requests.get(), limit.per, limit.burst.get()),
            (50, Duration::from_secs(1), 100)
        );
        let limit = parse_rate_limit("600/m,burst=30").unwrap().unwrap();
        assert_eq!(
            (limit.requests.get(), limit.per, limit.burst.get()),
            (600, Duration::from_secs(60), 30)
        );
        for bad in ["", "50", "50/d", "x/s", "50/s,30", "50/s,burst=0", "-1/s"] {
            assert!(parse_rate_limit(bad).is_err(), "{bad:?} parsed");
        }
        assert_eq!(
            parse_rate_limit(DEFAULT_RATE_LIMIT),
            Ok(Some(RateLimit::DEFAULT))
        );
    }

    #[test]
    fn a_burst_past_the_limit_is_refused_per_key() {
        let limiter = KeyRateLimiter::new(RateLimit {
            requests: NonZeroU32::new(1).unwrap(),
            per: Duration::from_secs(3600),
            burst: NonZeroU32::new(3).unwrap(),
        });
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        for _ in 0..3 {
            limiter.check(a).unwrap();
        }
        let refused = limiter.check(a).unwrap_err();
        assert_eq!(refused.status(), axum::http::StatusCode::TOO_MANY_REQUESTS);
        limiter.check(b).unwrap();
    }
}
