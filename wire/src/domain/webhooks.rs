//! Webhook endpoints and deliveries (sql/schema/webhooks.sql).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use strum::{Display, EnumString, IntoStaticStr, VariantArray};
use uuid::Uuid;

use super::Event;

/// A webhook endpoint as clients see it (its secret is shown only at creation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookEndpoint {
    pub id: Uuid,
    pub url: String,
    /// Event types it receives; `"*"` means all.
    pub events: Vec<String>,
    pub description: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// A new endpoint with its signing secret (`whsec_` + base64), shown once.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedWebhookEndpoint {
    #[serde(flatten)]
    pub endpoint: WebhookEndpoint,
    pub secret: String,
}

impl std::fmt::Debug for CreatedWebhookEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedWebhookEndpoint")
            .field("endpoint", &self.endpoint)
            .field("secret", &"whsec_…")
            .finish()
    }
}

/// Where a webhook delivery stands (see docs/state-machines.md).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    EnumString,
    IntoStaticStr,
    Display,
    VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum WebhookDeliveryStatus {
    /// Not delivered yet: due at `next_attempt_at` (or in flight).
    Pending,
    /// A 2xx answer was received.
    Delivered,
    /// No 2xx within the retry window, or the endpoint was deleted.
    Failed,
}

/// One delivery of one event to one endpoint, as `GET /v1/webhooks/{id}/deliveries` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookDelivery {
    /// Also the `webhook-id` header of every attempt.
    pub id: Uuid,
    pub endpoint_id: Uuid,
    pub agent_id: Uuid,
    pub event_seq: i64,
    pub event_id: Uuid,
    pub event_type: String,
    pub status: WebhookDeliveryStatus,
    /// Attempts started so far.
    pub attempts: i32,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    /// When the next attempt is due (pending deliveries only).
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub failed_at: Option<DateTime<Utc>>,
}

/// Which deliveries to list: newest first, `limit` (1..=1000) of them, older
/// than the delivery `before` when paging, of one status when given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WebhookDeliveryFilter {
    pub status: Option<WebhookDeliveryStatus>,
    pub limit: i32,
    pub before: Option<Uuid>,
}

impl Default for WebhookDeliveryFilter {
    fn default() -> Self {
        WebhookDeliveryFilter {
            status: None,
            limit: 100,
            before: None,
        }
    }
}

/// A delivery a dispatcher has claimed: POST `event` to `url`, signed with
/// `secret`, and record the outcome under `attempt`.
#[derive(Clone, PartialEq)]
pub struct ClaimedWebhookDelivery {
    pub delivery_id: Uuid,
    /// The attempt number this claim started; it fences the outcome.
    pub attempt: i32,
    pub endpoint_id: Uuid,
    pub url: String,
    pub secret: String,
    /// When the delivery was due (its queue lag is the claim time minus this).
    pub due_at: DateTime<Utc>,
    pub event: Event,
    /// The W3C trace context of the event's turn (`traceparent`,
    /// `tracestate`), when it had one: the parent of the attempt's span.
    pub trace_parent: Option<String>,
    pub trace_state: Option<String>,
}

impl std::fmt::Debug for ClaimedWebhookDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimedWebhookDelivery")
            .field("delivery_id", &self.delivery_id)
            .field("attempt", &self.attempt)
            .field("endpoint_id", &self.endpoint_id)
            .field("url", &self.url)
            .field("due_at", &self.due_at)
            .field("event", &self.event)
            .finish_non_exhaustive()
    }
}

/// What `record_webhook_attempt` did with an attempt's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, EnumString, IntoStaticStr, Display, VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum RecordedAttempt {
    /// A 2xx: the delivery is done.
    Delivered,
    /// Not a 2xx, inside the retry window: another attempt is scheduled
    /// (the delivery is `pending` again).
    #[strum(serialize = "pending")]
    RetryScheduled,
    /// Not a 2xx, and the retry window is over.
    Failed,
    /// A newer attempt owns the delivery's schedule; nothing changed.
    Superseded,
}

/// The dispatchers' backlog, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WebhookQueueStats {
    /// How long the oldest due delivery has waited (0 when none is due).
    pub oldest_due_seconds: f64,
    /// Requests in flight across all dispatchers.
    pub in_flight: i64,
}
