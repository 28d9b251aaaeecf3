//! `/v1/webhooks`: endpoints and their deliveries.

use crate::domain::{WebhookDelivery, WebhookDeliveryStatus, WebhookEndpoint};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// A new endpoint.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhookRequest {
    /// An http(s) URL. Private, loopback and other special-purpose
    /// addresses are refused unless the deployment allows them
    /// (`HOLDFAST_EGRESS_ALLOW=webhook=…`).
    pub url: String,
    /// `["*"]` for every event, or event types (docs/events.md).
    pub events: Vec<String>,
    pub description: Option<String>,
}

/// An endpoint as listed (never with its secret).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct WebhookView {
    pub id: Uuid,
    pub url: String,
    pub events: Vec<String>,
    pub description: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// A new endpoint with the secret receivers verify signatures with
/// (`whsec_…`, Standard Webhooks). Shown only in this response.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct CreatedWebhookView {
    #[serde(flatten)]
    pub endpoint: WebhookView,
    pub secret: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct WebhookList {
    pub webhooks: Vec<WebhookView>,
}

impl From<WebhookEndpoint> for WebhookView {
    fn from(e: WebhookEndpoint) -> WebhookView {
        WebhookView {
            id: e.id,
            url: e.url,
            events: e.events,
            description: e.description,
            created_at: e.created_at,
        }
    }
}

/// A delivery's state.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatusName {
    Pending,
    Delivered,
    Failed,
}

impl From<DeliveryStatusName> for WebhookDeliveryStatus {
    fn from(s: DeliveryStatusName) -> Self {
        match s {
            DeliveryStatusName::Pending => WebhookDeliveryStatus::Pending,
            DeliveryStatusName::Delivered => WebhookDeliveryStatus::Delivered,
            DeliveryStatusName::Failed => WebhookDeliveryStatus::Failed,
        }
    }
}

impl From<WebhookDeliveryStatus> for DeliveryStatusName {
    fn from(s: WebhookDeliveryStatus) -> Self {
        match s {
            WebhookDeliveryStatus::Pending => DeliveryStatusName::Pending,
            WebhookDeliveryStatus::Delivered => DeliveryStatusName::Delivered,
            WebhookDeliveryStatus::Failed => DeliveryStatusName::Failed,
        }
    }
}

/// One delivery of one event to one endpoint.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct DeliveryView {
    /// Also the `webhook-id` header of every attempt (dedupe on it).
    pub id: Uuid,
    pub agent_id: Uuid,
    pub event_seq: i64,
    pub event_id: Uuid,
    pub event_type: String,
    pub status: DeliveryStatusName,
    pub attempts: i32,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub failed_at: Option<DateTime<Utc>>,
}

impl From<WebhookDelivery> for DeliveryView {
    fn from(d: WebhookDelivery) -> DeliveryView {
        DeliveryView {
            id: d.id,
            agent_id: d.agent_id,
            event_seq: d.event_seq,
            event_id: d.event_id,
            event_type: d.event_type,
            status: d.status.into(),
            attempts: d.attempts,
            last_status_code: d.last_status_code,
            last_error: d.last_error,
            next_attempt_at: d.next_attempt_at,
            last_attempt_at: d.last_attempt_at,
            created_at: d.created_at,
            delivered_at: d.delivered_at,
            failed_at: d.failed_at,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct DeliveryList {
    pub deliveries: Vec<DeliveryView>,
}
