//! API keys.

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

/// A new API key, in clear: shown once, stored only as a hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiKeyCreated {
    pub key_id: Uuid,
    pub project_id: Uuid,
    /// The first characters of the key, kept in clear to tell keys apart.
    pub prefix: String,
    pub key: String,
}

/// Who an API key speaks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiKeyOwner {
    pub key_id: Uuid,
    pub project_id: Uuid,
}

/// A revoked API key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiKeyRevoked {
    pub key_id: Uuid,
    pub project_id: Uuid,
    pub prefix: String,
    pub revoked_at: DateTime<Utc>,
}

/// An API key as `holdfast keys list` shows it: never the key itself (only
/// its hash is stored), its prefix to tell it apart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ApiKeyListed {
    pub key_id: Uuid,
    pub project: String,
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}
