//! The request rate limits, in this process (GCRA, by the `governor`
//! crate), so that no one holds the API's connection pool:
//! - a token bucket per API key and one per machine (its token's
//!   requests), so one tenant or one daemon cannot flood the API; a request
//!   over the limit gets 429 with `Retry-After`, others are unaffected; a
//!   stream counts once, when it opens;
//! - failed key and token lookups per client address ([`FailedLookups`]):
//!   a presented key that matched nothing is remembered for a while and
//!   answered 401 without a lookup, and an address that keeps presenting
//!   new unknown keys gets 429 before any lookup, so a flood of bogus keys
//!   costs no database work.
//!
//! Several API instances each enforce the limits on their own.

use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use lru::LruCache;
use sha2::{Digest, Sha256};

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

/// The buckets of every key (an API key's id, a machine's id, a client
/// address) that made a request recently.
pub struct KeyRateLimiter<K: Hash + Eq + Clone> {
    limiter: DefaultKeyedRateLimiter<K>,
    checks: AtomicU64,
}

impl<K: Hash + Eq + Clone> KeyRateLimiter<K> {
    pub fn new(limit: RateLimit) -> KeyRateLimiter<K> {
        KeyRateLimiter {
            limiter: DefaultKeyedRateLimiter::keyed(limit.quota()),
            checks: AtomicU64::new(0),
        }
    }

    /// Take one request from `key`'s bucket, or how long until it has one.
    pub fn take(&self, key: &K) -> Result<(), Duration> {
        if self.checks.fetch_add(1, Ordering::Relaxed) % FORGET_IDLE_EVERY == FORGET_IDLE_EVERY - 1
        {
            self.forget_idle();
        }
        self.limiter
            .check_key(key)
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }

    /// Take one request from `key`'s bucket, or the 429 saying when to retry.
    pub fn check(&self, key: &K) -> Result<(), ApiError> {
        self.take(key).map_err(ApiError::rate_limited)
    }

    /// Forget keys whose buckets are full again (they behave as new), so
    /// memory follows the keys in use, not every key ever seen.
    fn forget_idle(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }
}

/// The failed key lookups an address may make in a burst, and how often it
/// may make one more: enough for a person fixing a pasted key, far too few
/// to make guessing or flooding cost the database anything.
pub const FAILED_LOOKUPS: RateLimit = RateLimit {
    requests: NonZeroU32::new(10).unwrap(),
    per: Duration::from_secs(60),
    burst: NonZeroU32::new(10).unwrap(),
};

/// How long a key or token that matched nothing is answered 401 without a
/// lookup. Keys are random, so none is created that was tried before; a
/// revoked key stays revoked.
pub const UNKNOWN_KEY_MEMORY: Duration = Duration::from_secs(60);

/// The most unknown keys and refused addresses remembered (the oldest are
/// forgotten first): a bound on this process's memory, whatever is sent.
const REMEMBERED: NonZeroUsize = NonZeroUsize::new(10_000).unwrap();

/// Failed API-key and machine-token lookups, by client address.
pub struct FailedLookups {
    per_address: KeyRateLimiter<IpAddr>,
    /// Addresses out of failed lookups, until when.
    refused_until: Mutex<LruCache<IpAddr, Instant>>,
    /// SHA-256 digests of keys that matched nothing, until when.
    unknown_keys: Mutex<LruCache<[u8; 32], Instant>>,
}

/// What to do with a presented key before looking it up.
pub enum BeforeLookup {
    /// Look it up.
    LookUp,
    /// It matched nothing moments ago: 401 without a lookup.
    Unknown,
}

impl FailedLookups {
    pub fn new(limit: RateLimit) -> FailedLookups {
        FailedLookups {
            per_address: KeyRateLimiter::new(limit),
            refused_until: Mutex::new(LruCache::new(REMEMBERED)),
            unknown_keys: Mutex::new(LruCache::new(REMEMBERED)),
        }
    }

    /// Whether `key`, presented from `address` (when known), is worth a
    /// database lookup; 429 when the address is out of failed lookups.
    pub fn before_lookup(
        &self,
        address: Option<IpAddr>,
        key: &str,
    ) -> Result<BeforeLookup, ApiError> {
        let now = Instant::now();
        if let Some(address) = address {
            let mut refused = self
                .refused_until
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match refused.get(&address) {
                Some(until) if *until > now => {
                    return Err(ApiError::rate_limited(*until - now));
                }
                Some(_) => {
                    refused.pop(&address);
                }
                None => {}
            }
        }
        let mut unknown = self
            .unknown_keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let digest: [u8; 32] = Sha256::digest(key).into();
        match unknown.get(&digest) {
            Some(until) if *until > now => Ok(BeforeLookup::Unknown),
            Some(_) => {
                unknown.pop(&digest);
                Ok(BeforeLookup::LookUp)
            }
            None => Ok(BeforeLookup::LookUp),
        }
    }

    /// Record that `key`, presented from `address`, matched nothing: it is
    /// answered without a lookup for [`UNKNOWN_KEY_MEMORY`], and the
    /// address spends one failed lookup; 429 when that was its last.
    pub fn failed(&self, address: Option<IpAddr>, key: &str) -> Result<(), ApiError> {
        let now = Instant::now();
        let digest: [u8; 32] = Sha256::digest(key).into();
        self.unknown_keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .put(digest, now + UNKNOWN_KEY_MEMORY);
        let Some(address) = address else {
            return Ok(());
        };
        self.per_address.take(&address).map_err(|wait| {
            self.refused_until
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .put(address, now + wait);
            ApiError::rate_limited(wait)
        })
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
        let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        for _ in 0..3 {
            limiter.check(&a).unwrap();
        }
        let refused = limiter.check(&a).unwrap_err();
        assert_eq!(refused.status(), axum::http::StatusCode::TOO_MANY_REQUESTS);
        limiter.check(&b).unwrap();
    }
}
