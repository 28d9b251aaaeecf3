//! `/v1/provider-keys`: the project's own model provider keys (write-only).

use crate::config::Provider;
use crate::domain::ProviderKeyStatus;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The key to set (`PUT`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderKeyBody {
    /// The provider's API key; stored sealed, never shown again.
    pub key: String,
}

/// That a key is set (never the key).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ProviderKeyView {
    #[schema(value_type = Provider)]
    pub provider: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

impl From<ProviderKeyStatus> for ProviderKeyView {
    fn from(status: ProviderKeyStatus) -> ProviderKeyView {
        ProviderKeyView {
            provider: status.provider,
            created_at: status.created_at,
            updated_at: status.updated_at,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ProviderKeyList {
    pub provider_keys: Vec<ProviderKeyView>,
}
