//! `POST /v1/agents/{id}/inputs`: a message for an agent and the saved input.

use chrono::{DateTime, Utc};
use holdfast_engine::domain::Input;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

/// A message for the agent. Mid-turn, it steers the next model call.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InputRequest {
    /// A non-empty string, or a non-empty array of content blocks (objects
    /// with a string `type`, e.g. `{"type": "text", "text": "..."}`,
    /// `{"type": "image", "source": {"type": "base64", "media_type":
    /// "image/png", "data": "..."}}` or `{"type": "document", "source":
    /// {"type": "url", "url": "https://..."}}`).
    #[schema(value_type = Object)]
    pub content: Value,
}

/// A saved input.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct InputView {
    pub id: Uuid,
    pub agent_id: Uuid,
    /// As sent, but each base64 source of an image or document is its
    /// stored attachment: `{"type": "attachment", "attachment_id",
    /// "media_type", "size_bytes"}`.
    #[schema(value_type = Object)]
    pub content: Value,
    pub created_at: DateTime<Utc>,
}

impl From<Input> for InputView {
    fn from(input: Input) -> InputView {
        InputView {
            id: input.id,
            agent_id: input.agent_id,
            content: input.content,
            created_at: input.created_at,
        }
    }
}
