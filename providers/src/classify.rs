//! Failures, classified: an HTTP status with its headers and body, an error
//! event inside a stream, or a transport error becomes a [`ModelError`] the
//! worker can act on (retry later, compact, or fail the turn).
//!
//! Both providers send error bodies as `{"error": {"type", "message", ...}}`
//! (Anthropic adds a top-level `"type": "error"` and a `request_id`; OpenAI
//! adds `code` and `param`). Gateways in front of them wrap these bodies in
//! their own, sometimes with a 5xx status, so "the context is too long" is
//! recognised by what the body says, whatever the status.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;
use serde_json::Value;

use super::ModelError;

/// Phrases providers and gateways use when the prompt does not fit the
/// model's context window. Anthropic: "prompt is too long: 208310 tokens >
/// 200000 maximum"; OpenAI: code `context_length_exceeded`, "This model's
/// maximum context length is 128000 tokens".
const CONTEXT_TOO_LONG_MARKERS: [&str; 5] = [
    "context_length_exceeded",
    "prompt is too long",
    "maximum context length",
    "context length exceeded",
    "exceeds the context window",
];

/// Error bodies are read up to this size; the rest is not needed to classify.
pub(crate) const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// How much of an error's message is kept (it ends up in events and history).
const MESSAGE_LIMIT: usize = 1000;

/// Classify a non-2xx response.
pub(crate) fn classify_status(status: u16, headers: &HeaderMap, body: &str) -> ModelError {
    let error = parse_error_body(body);
    let message = truncate(&format!("HTTP {status}: {}", error.message));
    if status == 413 || says_context_too_long(body) {
        return ModelError::ContextTooLong { message };
    }
    let fatal = |error_type: &str| ModelError::Fatal {
        error_type: error_type.to_owned(),
        message: message.clone(),
    };
    match status {
        401 | 403 => fatal("authentication_error"),
        402 => fatal("billing_error"),
        // A 429 that is an exhausted quota or spend limit does not clear by
        // waiting minutes: OpenAI `insufficient_quota`, Anthropic
        // `enforced_spend_limit_reached`.
        429 if error.quota_exhausted => fatal("billing_error"),
        408 | 409 | 425 | 429 | 500..=599 => {
            let kind = if error.error_type.as_deref() == Some("overloaded_error") || status == 529 {
                "overloaded_error"
            } else {
                match status {
                    429 => "rate_limit_error",
                    408 | 504 => "timeout_error",
                    _ => "api_error",
                }
            };
            ModelError::Retryable {
                kind: kind.to_owned(),
                message,
                retry_after: retry_hint(status, headers, SystemTime::now()),
            }
        }
        _ => fatal("invalid_request_error"),
    }
}

/// Classify an error delivered inside a 200 stream (Anthropic's `error`
/// event, an OpenAI chunk carrying `error`). `error` is the inner object.
pub(crate) fn classify_stream_error(error: &Value) -> ModelError {
    let error_type = error
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("api_error");
    let text = error
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| error.to_string());
    let message = truncate(&format!("stream error {error_type}: {text}"));
    if says_context_too_long(&error.to_string()) {
        return ModelError::ContextTooLong { message };
    }
    let fatal = |error_type: &str| ModelError::Fatal {
        error_type: error_type.to_owned(),
        message: message.clone(),
    };
    match error_type {
        "authentication_error" | "permission_error" => fatal("authentication_error"),
        "billing_error" | "insufficient_quota" => fatal("billing_error"),
        "invalid_request_error" => fatal("invalid_request_error"),
        // overloaded_error, api_error, rate_limit_error, server_error, and
        // anything new: the request was accepted, so trying again is sound.
        other => ModelError::Retryable {
            kind: other.to_owned(),
            message,
            retry_after: None,
        },
    }
}

/// Classify a failure to connect, send, or read.
pub(crate) fn transport_error(error: &reqwest::Error) -> ModelError {
    if let Some(refused) = crate::egress::refusal_in(error) {
        return egress_refused(refused);
    }
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    let message = truncate(&message);
    if error.is_builder() {
        // A malformed base URL: trying again cannot help.
        return ModelError::Fatal {
            error_type: "invalid_request_error".into(),
            message,
        };
    }
    let kind = if error.is_timeout() {
        "timeout_error"
    } else {
        "connection_error"
    };
    ModelError::Retryable {
        kind: kind.into(),
        message,
        retry_after: None,
    }
}

/// An agent's base URL the egress policy refuses: trying again cannot help
/// (the operator must allow the range, or the agent use another URL).
pub(crate) fn egress_refused(refused: &crate::egress::EgressRefused) -> ModelError {
    ModelError::Fatal {
        error_type: "invalid_request_error".into(),
        message: refused.to_string(),
    }
}

/// The stream ended (cleanly or not) before the provider said it was done.
pub(crate) fn incomplete_stream(what: &str) -> ModelError {
    ModelError::Retryable {
        kind: "incomplete_stream_error".into(),
        message: format!("the response stream ended before {what}"),
        retry_after: None,
    }
}

/// No bytes for the idle timeout, or no response headers within it.
pub(crate) fn idle_timeout(waiting_for: &str, timeout: Duration) -> ModelError {
    ModelError::Retryable {
        kind: "timeout_error".into(),
        message: format!("no {waiting_for} within {} ms", timeout.as_millis()),
        retry_after: None,
    }
}

/// The provider sent something we cannot use (e.g. tool input that is not
/// JSON). Models produce such glitches rarely and not twice in a row, so
/// the call is retried rather than the turn failed.
pub(crate) fn invalid_response(message: String) -> ModelError {
    ModelError::Retryable {
        kind: "invalid_response_error".into(),
        message: truncate(&message),
        retry_after: None,
    }
}

struct ErrorBody {
    error_type: Option<String>,
    message: String,
    quota_exhausted: bool,
}

fn parse_error_body(body: &str) -> ErrorBody {
    let json: Option<Value> = serde_json::from_str(body).ok();
    let error = json.as_ref().and_then(|v| v.get("error"));
    let text = |field: &str| {
        error
            .and_then(|e| e.get(field))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let error_type = text("type");
    let code = text("code");
    let spend_limit = error
        .and_then(|e| e.pointer("/details/error_code"))
        .and_then(Value::as_str);
    let message = match (text("message"), error) {
        (Some(message), _) => message,
        (None, Some(Value::String(message))) => message.clone(),
        _ if body.trim().is_empty() => "(empty body)".to_owned(),
        _ => body.trim().to_owned(),
    };
    ErrorBody {
        quota_exhausted: code.as_deref() == Some("insufficient_quota")
            || error_type.as_deref() == Some("insufficient_quota")
            || spend_limit == Some("enforced_spend_limit_reached"),
        error_type,
        message,
    }
}

pub(crate) fn says_context_too_long(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    CONTEXT_TOO_LONG_MARKERS.iter().any(|m| text.contains(m))
}

pub(crate) fn truncate(text: &str) -> String {
    match text.char_indices().nth(MESSAGE_LIMIT) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// The longest wait a provider's hint can ask for. A longer one (a broken
/// or hostile server, `Retry-After: 99999999999`) is cut to this: the retry
/// still counts toward the retry budget, and no interval overflows.
pub(crate) const RETRY_HINT_MAX: Duration = Duration::from_secs(3600);

/// When the provider says to come back, at most [`RETRY_HINT_MAX`].
pub(crate) fn retry_hint(status: u16, headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    requested_delay(status, headers, now).map(|delay| delay.min(RETRY_HINT_MAX))
}

/// When the provider says to come back: `retry-after-ms`, then
/// `Retry-After` (delta-seconds or HTTP-date), then, for a 429, the rate
/// limit reset headers (Anthropic `anthropic-ratelimit-*-reset`, RFC 3339
/// instants; OpenAI `x-ratelimit-reset-*`, durations like `6m0s`): the
/// latest reset among the buckets reported empty, or among all when none is.
fn requested_delay(status: u16, headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok()) {
        // A finite delay too long for a Duration is as good as forever (the
        // caller caps it); a negative or NaN one is no hint.
        if ms.is_finite() && ms >= 0.0 {
            return Some(Duration::try_from_secs_f64(ms / 1000.0).unwrap_or(Duration::MAX));
        }
    }
    if let Some(delay) = header("retry-after").and_then(|v| parse_retry_after(v, now)) {
        return Some(delay);
    }
    if status != 429 {
        return None;
    }
    // (reset, remaining) per bucket.
    let mut buckets: Vec<(Duration, Option<u64>)> = Vec::new();
    for bucket in ["requests", "tokens", "input-tokens", "output-tokens"] {
        let reset = header(&format!("anthropic-ratelimit-{bucket}-reset"))
            .and_then(|v| parse_rfc3339_after(v, now));
        if let Some(reset) = reset {
            let remaining = header(&format!("anthropic-ratelimit-{bucket}-remaining"))
                .and_then(|v| v.trim().parse().ok());
            buckets.push((reset, remaining));
        }
    }
    for bucket in ["requests", "tokens"] {
        let reset = header(&format!("x-ratelimit-reset-{bucket}")).and_then(parse_go_duration);
        if let Some(reset) = reset {
            let remaining = header(&format!("x-ratelimit-remaining-{bucket}"))
                .and_then(|v| v.trim().parse().ok());
            buckets.push((reset, remaining));
        }
    }
    let exhausted = buckets
        .iter()
        .filter(|(_, remaining)| *remaining == Some(0))
        .map(|(reset, _)| *reset)
        .max();
    exhausted.or_else(|| buckets.iter().map(|(reset, _)| *reset).max())
}

/// `Retry-After`: delta-seconds, or an HTTP-date (in the past: zero).
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

fn parse_rfc3339_after(value: &str, now: SystemTime) -> Option<Duration> {
    let at = chrono::DateTime::parse_from_rfc3339(value.trim()).ok()?;
    Some(
        SystemTime::from(at)
            .duration_since(now)
            .unwrap_or(Duration::ZERO),
    )
}

/// A Go-style duration as OpenAI writes its reset headers: `1s`, `6m0s`,
/// `12ms`, `1h2m3.5s`.
pub(crate) fn parse_go_duration(value: &str) -> Option<Duration> {
    let mut rest = value.trim();
    if rest.is_empty() {
        return None;
    }
    let mut seconds = 0.0_f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        seconds += number * scale;
    }
    Duration::try_from_secs_f64(seconds).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_go_duration("1s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_go_duration("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(parse_go_duration("12ms"), Some(Duration::from_millis(12)));
        assert_eq!(
            parse_go_duration("1h2m3.5s"),
            Some(Duration::from_millis(3_723_500))
        );
        assert_eq!(parse_go_duration(""), None);
        assert_eq!(parse_go_duration("5 minutes"), None);
    }

    #[test]
    fn a_huge_retry_hint_is_cut_to_the_maximum() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        for (name, value) in [
            ("retry-after", "99999999999"),
            ("retry-after-ms", "1e300"),
            ("retry-after", "Fri, 31 Dec 9999 23:59:59 GMT"),
        ] {
            let h = headers(&[(name, value)]);
            assert_eq!(
                retry_hint(503, &h, now),
                Some(RETRY_HINT_MAX),
                "{name}: {value}"
            );
        }
        let h = headers(&[("retry-after", "3")]);
        assert_eq!(retry_hint(503, &h, now), Some(Duration::from_secs(3)));
    }

    #[test]
    fn retry_after_takes_seconds_and_http_dates() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(parse_retry_after("2", now), Some(Duration::from_secs(2)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }

    #[test]
    fn reset_headers_pick_the_latest_exhausted_bucket() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        let h = headers(&[
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", "2015-10-21T07:28:20Z"),
            ("anthropic-ratelimit-tokens-remaining", "5000"),
            ("anthropic-ratelimit-tokens-reset", "2015-10-21T07:29:00Z"),
        ]);
        assert_eq!(retry_hint(429, &h, now), Some(Duration::from_secs(20)));
        let h = headers(&[
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]);
        assert_eq!(retry_hint(429, &h, now), Some(Duration::from_secs(360)));
        // Reset headers describe rate limits, not a 503.
        assert_eq!(retry_hint(503, &h, now), None);
        // Retry-After wins over reset headers.
        let h = headers(&[("retry-after", "3"), ("x-ratelimit-reset-tokens", "6m0s")]);
        assert_eq!(retry_hint(429, &h, now), Some(Duration::from_secs(3)));
    }

    #[test]
    fn exhausted_quota_is_billing_not_a_rate_limit() {
        let body = r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
        assert!(matches!(
            classify_status(429, &HeaderMap::new(), body),
            ModelError::Fatal { error_type, .. } if error_type == "billing_error"
        ));
    }

    #[test]
    fn unrelated_mentions_of_the_context_window_are_not_context_errors() {
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"`max_tokens` must be greater than `thinking.budget_tokens`. See https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size"}}"#;
        assert!(matches!(
            classify_status(400, &HeaderMap::new(), body),
            ModelError::Fatal { error_type, .. } if error_type == "invalid_request_error"
        ));
    }
}
