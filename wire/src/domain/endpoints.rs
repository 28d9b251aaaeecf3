//! Model endpoints (operator), provider keys (project) and where a model
//! call goes (sql/schema/endpoints.sql).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// An operator-owned model endpoint (`holdfast.model_endpoints`), as listed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelEndpoint {
    pub name: String,
    /// The provider protocol it speaks: `anthropic` or `openai`.
    pub kind: String,
    pub base_url: String,
    /// The worker's environment variable holding its credential (none: no
    /// credential is sent).
    pub credential_env: Option<String>,
    /// The one project that may use it; `None`: every project.
    pub project: Option<String>,
    /// The model names allowed on it; `None`: any.
    pub models: Option<Vec<String>>,
    /// Agents (not archived) whose config names it.
    pub agents: i64,
    pub created_at: DateTime<Utc>,
}

/// An endpoint to add (`holdfast endpoints add`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NewModelEndpoint {
    pub name: String,
    pub kind: String,
    pub base_url: String,
    pub credential_env: Option<String>,
    pub project: Option<String>,
    /// Empty: any model.
    pub models: Vec<String>,
}

/// That a project has its own key for a provider (never the key itself).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProviderKeyStatus {
    pub provider: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Where one model call goes, as `holdfast.resolve_model_endpoint` reads it
/// for the worker at every call.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRoute {
    /// The agent's project (a sealed key is bound to it).
    pub project_id: Uuid,
    pub destination: ModelDestination,
    /// The project's own key for the agent's provider, if it set one.
    pub project_key: Option<SealedKey>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ModelDestination {
    /// The project may not use these model settings (any more): fail the
    /// turn with `field` and `message`.
    Refused { field: String, message: String },
    /// A tenant-set `model.base_url`, allowed for the project: no operator
    /// credential goes there, only the project's own key (if any).
    CustomUrl { base_url: String },
    /// An operator endpoint: `default` (the worker's environment pair, both
    /// fields `None`) or a named one with its base URL and credential
    /// variable.
    Operator {
        endpoint: String,
        base_url: Option<String>,
        credential_env: Option<String>,
    },
}

/// A project's provider key as stored: sealed under `HOLDFAST_SECRET_KEY`.
#[derive(Clone, PartialEq)]
pub struct SealedKey {
    pub sealed: Vec<u8>,
    /// Which secret key sealed it ([`crate::secrets::SecretKey::fingerprint`]).
    pub key_fingerprint: String,
}

impl std::fmt::Debug for SealedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedKey")
            .field("key_fingerprint", &self.key_fingerprint)
            .finish_non_exhaustive()
    }
}
