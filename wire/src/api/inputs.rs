//! `/v1/agents/{id}/inputs` and `/v1/inputs/{id}`: messages for an agent,
//! how each joins its turns (the steering mode), and the saved inputs.

use crate::domain::{Input, InputMode, InputStatus};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

/// A message for the agent. Mid-turn, by its `mode`: it steers the next
/// model call (`steer`, the default), waits for the turn to end and opens
/// the next (`queue`), or aborts the model call in flight, which is made
/// again with it (`interrupt`; a running tool call is never interrupted).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InputRequest {
    /// A non-empty string, or a non-empty array of content blocks (objects
    /// with a string `type`, e.g. `{"type": "text", "text": "..."}`,
    /// `{"type": "image", "source": {"type": "base64", "media_type":
    /// "image/png", "data": "..."}}` or `{"type": "document", "source":
    /// {"type": "url", "url": "https://..."}}`).
    #[schema(value_type = Value)]
    pub content: Value,
    #[serde(default)]
    pub mode: InputMode,
}

/// A change to a waiting input (`PATCH /v1/inputs/{id}`); an absent field
/// stays as it is.
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateInputRequest {
    /// `steer` takes a queued input into the open turn (or opens one for
    /// it); `queue` takes a steering input the turn has not consumed back
    /// into the queue. `interrupt` is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<InputMode>,
    /// The queued input's place among its agent's queued inputs, from 1
    /// (past the end: last); the others keep their order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub position: Option<i32>,
}

/// A saved input.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct InputView {
    pub id: Uuid,
    pub agent_id: Uuid,
    /// As sent, but each base64 source of an image or document is its
    /// stored attachment: `{"type": "attachment", "attachment_id",
    /// "media_type", "size_bytes"}`.
    #[schema(value_type = Value)]
    pub content: Value,
    pub mode: InputMode,
    pub status: InputStatus,
    pub created_at: DateTime<Utc>,
}

impl From<Input> for InputView {
    fn from(input: Input) -> InputView {
        InputView {
            id: input.id,
            agent_id: input.agent_id,
            content: input.content,
            mode: input.mode,
            status: input.status,
            created_at: input.created_at,
        }
    }
}

/// An agent's waiting inputs: queued ones in the order turns will take them
/// (their place, then oldest first), pending ones oldest first.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct InputList {
    pub inputs: Vec<InputView>,
}
