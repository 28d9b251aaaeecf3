//! The error body every failed request answers with.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The error body (for the OpenAPI document).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Machine-readable: `invalid_request`, `invalid_json`, `unauthorized`,
    /// `not_found`, `conflict`, `idempotency_key_reused`, `model_not_permitted`,
    /// `unsupported_content`, `attachment_quota_exceeded`, `request_too_large`,
    /// `payload_too_large`, `rate_limited`, `unavailable`, `internal`, ...
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    /// The offending field, for `invalid_request`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}
