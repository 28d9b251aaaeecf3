//! The webhook dispatcher: claims due deliveries (sql/schema/webhooks.sql),
//! POSTs them concurrently, signed per Standard Webhooks, and records each
//! outcome.
//!
//! The loop claims only as many deliveries as it has free request slots, and
//! claims again as soon as any request finishes, so a slow or dead endpoint
//! holds its own slots and nothing else (the SQL also caps the requests in
//! flight per endpoint). Work arrives by `LISTEN holdfast_webhooks` (the
//! outbox trigger's hint), and by polling for retries that come due.
//!
//! Delivery is at least once: the claim is committed before the request, and
//! a dispatcher that dies mid-request leaves claims that come due again when
//! their lease ends; the delivery id (`webhook-id`) is the same on every
//! attempt, so receivers can drop duplicates.

pub mod signature;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use chrono::Utc;
use deadpool_postgres::Pool;
use holdfast_db::{connect, store};
use holdfast_outbound::backoff::Backoff;
use holdfast_providers::egress::{refusal_in, EgressKind, EgressPolicy};
use holdfast_telemetry::outbound_headers_of;
use holdfast_wire::domain::{ClaimedWebhookDelivery, RecordedAttempt};
use reqwest::header::{HeaderMap, CONTENT_TYPE, RETRY_AFTER};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use crate::maintenance::{DB_CALL_TIMEOUT, DB_RETRY};
use crate::spans;

/// The channel the outbox trigger notifies when it writes deliveries.
const CHANNEL: &str = "holdfast_webhooks";

/// How the dispatcher delivers.
#[derive(Clone, Debug)]
pub struct DispatcherSettings {
    /// Retry a delivery until this long after its event, then mark it failed
    /// (`HOLDFAST_WEBHOOK_RETRY_WINDOW`).
    pub retry_window: Duration,
    /// Give up on one request after this long (a timeout is a failed attempt).
    pub request_timeout: Duration,
    /// Requests in flight at once, in this process.
    pub concurrency: usize,
    /// Requests in flight at once per endpoint, across all dispatchers.
    pub max_per_endpoint: i32,
    /// The first retry's delay; each further retry doubles it, up to `backoff_max`.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// Which addresses requests may reach (kind `webhook`): public ones,
    /// plus what the operator allows with `HOLDFAST_EGRESS_ALLOW`.
    pub egress: Arc<EgressPolicy>,
    /// How often to look for due retries when no notification comes.
    pub poll_interval: Duration,
}

impl Default for DispatcherSettings {
    fn default() -> Self {
        DispatcherSettings {
            retry_window: Duration::from_secs(600),
            request_timeout: Duration::from_secs(15),
            concurrency: 64,
            max_per_endpoint: 16,
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(120),
            egress: Arc::default(),
            poll_interval: Duration::from_secs(1),
        }
    }
}

impl DispatcherSettings {
    /// How long a claim is held: the request's timeout plus time to record its
    /// outcome (half the timeout, at least a second). After that the delivery
    /// comes due again for any dispatcher.
    pub fn lease(&self) -> Duration {
        self.request_timeout + (self.request_timeout / 2).max(Duration::from_secs(1))
    }

    /// The delay before retrying after failed attempt number `attempt`:
    /// exponential with jitter, or the receiver's `Retry-After` when longer,
    /// but never past the retry window: a receiver's number is range-checked
    /// here (a huge `Retry-After` once made the attempt unrecordable, and the
    /// delivery retried past its window); the SQL ends the delivery `failed`
    /// when the window is over.
    fn retry_delay(&self, attempt: i32, retry_after: Option<Duration>) -> Duration {
        Backoff {
            base: self.backoff_base,
            cap: self.backoff_max,
        }
        .delay(attempt.max(1).unsigned_abs(), retry_after)
        .min(self.retry_window)
    }
}

/// What the dispatcher's tasks share.
struct Context {
    settings: DispatcherSettings,
    pool: Pool,
    http: reqwest::Client,
    shutdown: CancellationToken,
    /// Signalled when a request finishes: a slot is free, and the next event
    /// of the same agent may now be claimable.
    progress: Notify,
}

/// Deliver webhooks until `shutdown` is cancelled. On shutdown, requests in
/// flight are abandoned and their claims released (due again at once, for
/// any dispatcher); returns when every task has stopped.
pub async fn run(
    settings: DispatcherSettings,
    pool: Pool,
    db: connect::ConnectConfig,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let http = http_client(&settings)?;
    let lease = settings.lease();
    let concurrency = settings.concurrency.max(1);
    let ctx = Arc::new(Context {
        settings,
        pool,
        http,
        shutdown: shutdown.clone(),
        progress: Notify::new(),
    });
    let wake = Arc::new(Notify::new());
    let listener = tokio::spawn(listen(db, wake.clone(), shutdown.clone()));
    let slots = Arc::new(Semaphore::new(concurrency));
    let mut requests: JoinSet<Option<(Uuid, i32)>> = JoinSet::new();
    let mut failures: u32 = 0;

    while !shutdown.is_cancelled() {
        while let Some(done) = requests.try_join_next() {
            report_panic(done);
        }
        let free = slots.available_permits();
        let mut maybe_more = false;
        if free > 0 {
            let want = i32::try_from(free).unwrap_or(i32::MAX);
            match claim(&ctx, want, lease).await {
                Ok(batch) => {
                    failures = 0;
                    maybe_more = batch.len() == free;
                    for delivery in batch {
                        let Ok(slot) = slots.clone().try_acquire_owned() else {
                            break;
                        };
                        let span = tracing::info_span!(
                            "webhook_delivery",
                            delivery_id = %delivery.delivery_id,
                            endpoint_id = %delivery.endpoint_id,
                            agent_id = %delivery.event.agent_id,
                            seq = delivery.event.seq,
                            attempt = delivery.attempt,
                        );
                        requests.spawn(deliver(ctx.clone(), delivery, slot).instrument(span));
                    }
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let wait = DB_RETRY.delay(failures, None);
                    tracing::warn!(error = %e, retry_in = ?wait, "claiming webhook deliveries failed");
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep(wait) => continue,
                    }
                }
            }
        }
        if maybe_more {
            continue;
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = wake.notified() => {}
            _ = ctx.progress.notified() => {}
            _ = tokio::time::sleep(ctx.settings.poll_interval) => {}
        }
    }

    // Every request task sees the token: it abandons its request and hands
    // back its claim, or finishes recording an answer it already has.
    let mut unfinished = Vec::new();
    while let Some(done) = requests.join_next().await {
        match done {
            Ok(Some(claim)) => unfinished.push(claim),
            Ok(None) => {}
            Err(e) => report_panic(Err(e)),
        }
    }
    release(&ctx.pool, &unfinished).await;
    if let Err(e) = listener.await {
        tracing::error!(error = %e, "webhook listener task failed");
    }
    Ok(())
}

fn report_panic(done: Result<Option<(Uuid, i32)>, tokio::task::JoinError>) {
    if let Err(e) = done {
        tracing::error!(error = %e, "webhook delivery task failed");
    }
}

fn http_client(settings: &DispatcherSettings) -> anyhow::Result<reqwest::Client> {
    let builder = settings
        .egress
        .client_builder(EgressKind::Webhook)
        .timeout(settings.request_timeout)
        .connect_timeout(settings.request_timeout.min(Duration::from_secs(10)))
        // Standard Webhooks: a 3xx is a failure; following it would let an
        // endpoint bounce requests to where it likes.
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("holdfast-webhooks/", env!("CARGO_PKG_VERSION")));
    Ok(builder.build()?)
}

async fn claim(
    ctx: &Context,
    max: i32,
    lease: Duration,
) -> anyhow::Result<Vec<ClaimedWebhookDelivery>> {
    let work = async {
        let client = ctx.pool.get().await?;
        store::claim_webhook_deliveries(&client, max, lease, ctx.settings.max_per_endpoint).await
    };
    Ok(tokio::time::timeout(DB_CALL_TIMEOUT, work).await??)
}

/// Keep a `LISTEN holdfast_webhooks` session open (reconnecting with backoff)
/// and turn its notifications into wake-ups. A reconnect wakes the loop too:
/// hints sent while disconnected are lost.
async fn listen(db: connect::ConnectConfig, wake: Arc<Notify>, shutdown: CancellationToken) {
    loop {
        let Some(mut session) =
            connect::listen_retrying(&db, &[CHANNEL], &DB_RETRY, &shutdown, "webhooks").await
        else {
            return;
        };
        wake.notify_one();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                hint = session.notifications.recv() => match hint {
                    Some(_) => wake.notify_one(),
                    None => break,
                },
            }
        }
        tracing::warn!("webhook LISTEN connection lost; reconnecting");
    }
}

/// What one request came to.
struct Attempt {
    /// The receiver's HTTP status, when it answered.
    status: Option<u16>,
    /// Why it is not a success (None for a 2xx).
    error: Option<String>,
    /// The receiver's `Retry-After`, if any.
    retry_after: Option<Duration>,
}

impl Attempt {
    /// An attempt that got no answer (or was never sent), for `error`.
    fn failed(error: String) -> Attempt {
        Attempt {
            status: None,
            error: Some(error),
            retry_after: None,
        }
    }
}

/// One attempt of one delivery: the request, then its outcome recorded.
/// Returns the claim when shutdown interrupted the request (to be released).
async fn deliver(
    ctx: Arc<Context>,
    delivery: ClaimedWebhookDelivery,
    slot: OwnedSemaphorePermit,
) -> Option<(Uuid, i32)> {
    let lag = (Utc::now() - delivery.due_at).num_milliseconds().max(0) as f64 / 1000.0;
    metrics::histogram!("holdfast_webhook_queue_lag_seconds").record(lag);
    let started = Instant::now();
    let attempt = tokio::select! {
        attempt = send(&ctx, &delivery) => attempt,
        _ = ctx.shutdown.cancelled() => {
            tracing::debug!("shutdown interrupted the request");
            drop(slot);
            ctx.progress.notify_one();
            return Some((delivery.delivery_id, delivery.attempt));
        }
    };
    let class = match attempt.status {
        Some(code) => format!("{}xx", code / 100),
        None => "error".to_owned(),
    };
    metrics::counter!("holdfast_webhook_attempts_total", "result" => class).increment(1);
    metrics::histogram!("holdfast_webhook_attempt_seconds").record(started.elapsed().as_secs_f64());
    record(&ctx, &delivery, &attempt).await;
    // Free the slot before waking the loop, so it finds the slot free.
    drop(slot);
    ctx.progress.notify_one();
    None
}

async fn send(ctx: &Context, delivery: &ClaimedWebhookDelivery) -> Attempt {
    let url = match reqwest::Url::parse(&delivery.url) {
        Ok(url) => url,
        Err(e) => return Attempt::failed(format!("invalid url: {e}")),
    };
    if let Err(refused) = ctx.settings.egress.check_url(EgressKind::Webhook, &url) {
        return Attempt::failed(refused.to_string());
    }
    let body = match serde_json::to_vec(&delivery.event) {
        Ok(body) => body,
        Err(e) => return Attempt::failed(format!("could not serialize the event: {e}")),
    };
    let id = delivery.delivery_id.to_string();
    let timestamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let signature = match signature::sign(&delivery.secret, &id, timestamp, &body) {
        Ok(signature) => signature,
        Err(e) => return Attempt::failed(e.to_string()),
    };
    let span = spans::start_webhook_delivery(delivery, &url);
    let mut request = ctx
        .http
        .post(url)
        .header("webhook-id", &id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .header(CONTENT_TYPE, "application/json");
    // The receiver's work joins the trace as a child of this attempt.
    for (name, value) in outbound_headers_of(&span) {
        request = request.header(name, value);
    }
    let attempt = answer(ctx, request.body(body).send().await);
    spans::end_webhook_delivery(&span, attempt.status, attempt.error.as_deref());
    attempt
}

/// What a request's response (or its failure) comes to.
fn answer(ctx: &Context, response: reqwest::Result<reqwest::Response>) -> Attempt {
    match response {
        Ok(response) => {
            let status = response.status();
            Attempt {
                status: Some(status.as_u16()),
                error: (!status.is_success()).then(|| format!("HTTP {status}")),
                retry_after: retry_after(response.headers()),
            }
        }
        Err(e) if e.is_timeout() => Attempt::failed(format!(
            "no answer within {:?}",
            ctx.settings.request_timeout
        )),
        Err(e) => Attempt::failed(error_chain(&e)),
    }
}

/// `Retry-After` in seconds or as an HTTP date.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    (at.with_timezone(&Utc) - Utc::now()).to_std().ok()
}

/// An error with its causes ("error sending request: connection refused").
fn error_chain(e: &reqwest::Error) -> String {
    if let Some(refused) = refusal_in(e) {
        return refused.to_string();
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text.chars().take(500).collect()
}

/// Save an attempt's outcome, retrying while Postgres is unreachable, for as
/// long as the claim lasts (after that the delivery comes due again anyway).
async fn record(ctx: &Context, delivery: &ClaimedWebhookDelivery, attempt: &Attempt) {
    let delay = ctx
        .settings
        .retry_delay(delivery.attempt, attempt.retry_after);
    let status = attempt.status.map(i32::from);
    let deadline = Instant::now() + ctx.settings.lease();
    let mut failures: u32 = 0;
    loop {
        let work = async {
            let client = ctx.pool.get().await?;
            store::record_webhook_attempt(
                &client,
                delivery,
                status,
                attempt.error.as_deref(),
                delay,
                ctx.settings.retry_window,
            )
            .await
        };
        let result = match tokio::time::timeout(DB_CALL_TIMEOUT, work).await {
            Ok(result) => result.map_err(anyhow::Error::from),
            Err(elapsed) => Err(elapsed.into()),
        };
        match result {
            Ok(outcome) => {
                let label = match outcome {
                    RecordedAttempt::Delivered => "delivered",
                    RecordedAttempt::RetryScheduled => "retry",
                    RecordedAttempt::Failed => "failed",
                    RecordedAttempt::Superseded => "superseded",
                };
                metrics::counter!("holdfast_webhook_deliveries_total", "outcome" => label)
                    .increment(1);
                match outcome {
                    RecordedAttempt::Failed => tracing::warn!(
                        error = attempt.error.as_deref(),
                        "webhook delivery failed: retry window is over"
                    ),
                    RecordedAttempt::RetryScheduled => tracing::info!(
                        error = attempt.error.as_deref(),
                        retry_in = ?delay,
                        "webhook attempt failed; retrying"
                    ),
                    _ => tracing::debug!(outcome = label, "webhook attempt recorded"),
                }
                return;
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                if ctx.shutdown.is_cancelled() || Instant::now() >= deadline {
                    tracing::warn!(
                        error = %e,
                        "could not record a webhook attempt; the delivery comes due again when its claim ends"
                    );
                    return;
                }
                let wait = Backoff {
                    base: Duration::from_millis(50),
                    cap: Duration::from_secs(5),
                }
                .delay(failures, None);
                tracing::warn!(error = %e, retry_in = ?wait, "recording a webhook attempt failed");
                tokio::select! {
                    _ = ctx.shutdown.cancelled() => {}
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}

/// Hand back claims whose request was abandoned, so another dispatcher can
/// send them at once (best effort: unreleased claims come due when they end).
async fn release(pool: &Pool, claims: &[(Uuid, i32)]) {
    if claims.is_empty() {
        return;
    }
    let work = async {
        let client = pool.get().await?;
        store::release_webhook_deliveries(&client, claims).await
    };
    match tokio::time::timeout(Duration::from_secs(5), work).await {
        Ok(Ok(released)) => tracing::info!(released, "released webhook deliveries in flight"),
        Ok(Err(e)) => tracing::warn!(error = %e, "could not release webhook deliveries in flight"),
        Err(_) => tracing::warn!("releasing webhook deliveries in flight timed out"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_retry_after_never_reaches_past_the_window() {
        let settings = DispatcherSettings::default();
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, "99999999999".parse().unwrap());
        let delay = settings.retry_delay(3, retry_after(&headers));
        assert_eq!(delay, settings.retry_window);
        assert!(settings.retry_delay(1, None) <= settings.backoff_base);
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, "120".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(120)));
        let later = (Utc::now() + chrono::Duration::seconds(60)).to_rfc2822();
        headers.insert(RETRY_AFTER, later.parse().unwrap());
        let parsed = retry_after(&headers).unwrap();
        assert!(parsed > Duration::from_secs(55) && parsed <= Duration::from_secs(60));
        headers.insert(RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn retry_delay_honours_a_longer_retry_after() {
        let settings = DispatcherSettings::default();
        let delay = settings.retry_delay(1, Some(Duration::from_secs(90)));
        assert_eq!(delay, Duration::from_secs(90));
        let delay = settings.retry_delay(1, Some(Duration::ZERO));
        assert!(delay <= settings.backoff_base);
    }
}
