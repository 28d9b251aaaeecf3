//! Webhook endpoints and the delivery outbox (sql/schema/webhooks.sql).

use std::time::Duration;

use serde_json::Value;

use uuid::Uuid;

use super::parse_text;
use super::prepared::Prepared;
use crate::error::Result;
use holdfast_wire::domain::Event;
use holdfast_wire::domain::{
    ClaimedWebhookDelivery, CreatedWebhookEndpoint, RecordedAttempt, WebhookDelivery,
    WebhookDeliveryFilter, WebhookDeliveryStatus, WebhookEndpoint, WebhookQueueStats,
};
use holdfast_wire::duration::to_interval;

/// Create a webhook endpoint in `project`; the answer carries the signing
/// secret (show it once). `allow_private` is the deployment's setting
/// ([`holdfast_providers::egress::EgressPolicy::allows_any_special`] for webhooks). A bad url or event
/// list is [`Error::Invalid`] naming `url` or `events`.
pub async fn create_webhook_endpoint(
    client: &impl Prepared,
    project: Uuid,
    url: &str,
    events: &Value,
    description: Option<&str>,
    allow_private: bool,
) -> Result<CreatedWebhookEndpoint> {
    let row = client
        .query_one(
            "SELECT id, url, events, description, secret, created_at \
               FROM holdfast.create_webhook_endpoint($1, $2, $3, $4, $5)",
            &[&project, &url, events, &description, &allow_private],
        )
        .await?;
    Ok(CreatedWebhookEndpoint {
        endpoint: WebhookEndpoint {
            id: row.get("id"),
            url: row.get("url"),
            events: row.get("events"),
            description: row.get("description"),
            created_at: row.get("created_at"),
        },
        secret: row.get("secret"),
    })
}

/// Delete an endpoint of `project` (its pending deliveries end as failed);
/// [`Error::NotFound`] when it is not there.
pub async fn delete_webhook_endpoint(
    client: &impl Prepared,
    project: Uuid,
    endpoint: Uuid,
) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.delete_webhook_endpoint($1, $2)",
            &[&project, &endpoint],
        )
        .await?;
    Ok(())
}

/// The live endpoints of `project`, oldest first, without secrets.
pub async fn list_webhook_endpoints(
    client: &impl Prepared,
    project: Uuid,
) -> Result<Vec<WebhookEndpoint>> {
    let rows = client
        .query(
            "SELECT id, url, events, description, created_at \
               FROM holdfast.list_webhook_endpoints($1)",
            &[&project],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| WebhookEndpoint {
            id: r.get("id"),
            url: r.get("url"),
            events: r.get("events"),
            description: r.get("description"),
            created_at: r.get("created_at"),
        })
        .collect())
}

/// Deliveries of an endpoint of `project`, newest first;
/// [`Error::NotFound`] when the endpoint is not there.
pub async fn list_webhook_deliveries(
    client: &impl Prepared,
    project: Uuid,
    endpoint: Uuid,
    filter: WebhookDeliveryFilter,
) -> Result<Vec<WebhookDelivery>> {
    let status = filter.status.map(|s| match s {
        WebhookDeliveryStatus::Pending => "pending",
        WebhookDeliveryStatus::Delivered => "delivered",
        WebhookDeliveryStatus::Failed => "failed",
    });
    let rows = client
        .query(
            "SELECT id, endpoint_id, agent_id, event_seq, event_id, event_type, status, attempts, \
                    last_status_code, last_error, next_attempt_at, last_attempt_at, created_at, \
                    delivered_at, failed_at \
               FROM holdfast.list_webhook_deliveries($1, $2, $3, $4, $5)",
            &[&project, &endpoint, &status, &filter.limit, &filter.before],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok(WebhookDelivery {
                id: r.get("id"),
                endpoint_id: r.get("endpoint_id"),
                agent_id: r.get("agent_id"),
                event_seq: r.get("event_seq"),
                event_id: r.get("event_id"),
                event_type: r.get("event_type"),
                status: parse_text(r.get("status"), "status")?,
                attempts: r.get("attempts"),
                last_status_code: r.get("last_status_code"),
                last_error: r.get("last_error"),
                next_attempt_at: r.get("next_attempt_at"),
                last_attempt_at: r.get("last_attempt_at"),
                created_at: r.get("created_at"),
                delivered_at: r.get("delivered_at"),
                failed_at: r.get("failed_at"),
            })
        })
        .collect()
}

/// Claim up to `max` due webhook deliveries for one dispatcher, each held for
/// `lease` (then it comes due again by itself), at most `max_per_endpoint`
/// in flight per endpoint across all dispatchers.
pub async fn claim_webhook_deliveries(
    client: &impl Prepared,
    max: i32,
    lease: Duration,
    max_per_endpoint: i32,
) -> Result<Vec<ClaimedWebhookDelivery>> {
    let rows = client
        .query(
            "SELECT delivery_id, attempt, endpoint_id, url, secret, due_at, \
                    event_seq, event_id, agent_id, event_type, event_data, event_created_at, \
                    trace_parent, trace_state \
               FROM holdfast.claim_webhook_deliveries($1, $2::text::interval, $3)",
            &[&max, &to_interval(lease), &max_per_endpoint],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| ClaimedWebhookDelivery {
            delivery_id: r.get("delivery_id"),
            attempt: r.get("attempt"),
            endpoint_id: r.get("endpoint_id"),
            url: r.get("url"),
            secret: r.get("secret"),
            due_at: r.get("due_at"),
            event: Event {
                seq: r.get("event_seq"),
                id: r.get("event_id"),
                agent_id: r.get("agent_id"),
                kind: r.get("event_type"),
                data: r.get("event_data"),
                created_at: r.get("event_created_at"),
            },
            trace_parent: r.get("trace_parent"),
            trace_state: r.get("trace_state"),
        })
        .collect())
}

/// Record the outcome of one attempt: `status_code` when the receiver
/// answered, `error` otherwise (or with a non-2xx answer). Not a 2xx: retry
/// after `retry_delay`, but not past `retry_window` after the event.
pub async fn record_webhook_attempt(
    client: &impl Prepared,
    delivery: &ClaimedWebhookDelivery,
    status_code: Option<i32>,
    error: Option<&str>,
    retry_delay: Duration,
    retry_window: Duration,
) -> Result<RecordedAttempt> {
    let row = client
        .query_one(
            "SELECT holdfast.record_webhook_attempt($1, $2, $3, $4, $5, $6::text::interval, $7::text::interval)",
            &[
                &delivery.event.agent_id,
                &delivery.delivery_id,
                &delivery.attempt,
                &status_code,
                &error,
                &to_interval(retry_delay),
                &to_interval(retry_window),
            ],
        )
        .await?;
    parse_text(row.get(0), "record_webhook_attempt")
}

/// Give back claims whose attempt has no outcome (shutdown mid-request): they
/// are due again at once, for any dispatcher. Returns how many were released.
pub async fn release_webhook_deliveries(
    client: &impl Prepared,
    claims: &[(Uuid, i32)],
) -> Result<i32> {
    let ids: Vec<Uuid> = claims.iter().map(|c| c.0).collect();
    let attempts: Vec<i32> = claims.iter().map(|c| c.1).collect();
    let row = client
        .query_one(
            "SELECT holdfast.release_webhook_deliveries($1, $2)",
            &[&ids, &attempts],
        )
        .await?;
    Ok(row.get(0))
}

/// The dispatchers' backlog: the oldest due delivery's wait, requests in flight.
pub async fn webhook_queue_stats(client: &impl Prepared) -> Result<WebhookQueueStats> {
    let row = client
        .query_one(
            "SELECT coalesce((SELECT extract(epoch FROM holdfast.now() - min(next_attempt_at))::float8 \
                                FROM holdfast.webhook_deliveries \
                               WHERE status = 'pending' AND next_attempt_at <= holdfast.now()), 0) \
                      AS oldest_due_seconds, \
                    (SELECT count(*) FROM holdfast.webhook_deliveries \
                      WHERE claimed_until IS NOT NULL AND claimed_until > holdfast.now()) \
                      AS in_flight",
            &[],
        )
        .await?;
    Ok(WebhookQueueStats {
        oldest_due_seconds: row.get("oldest_due_seconds"),
        in_flight: row.get("in_flight"),
    })
}
