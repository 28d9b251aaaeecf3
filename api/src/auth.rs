//! Bearer API keys. Every `/v1` route takes a [`Caller`]: the project the
//! key belongs to, which then scopes every read and write of the request.
//! Taking a `Caller` also takes one request from the key's rate limit
//! (`crate::rate_limit`), so no route can skip it.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use holdfast_engine::store;
use uuid::Uuid;

use crate::error::ApiError;
use crate::replica::Writer;
use crate::state::AppState;

/// Longer than any key Holdfast issues; refused without a database lookup.
const MAX_KEY_LEN: usize = 256;

/// The authenticated caller of a request.
#[derive(Clone, Copy, Debug)]
pub struct Caller {
    pub project_id: Uuid,
    pub key_id: Uuid,
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let header = parts
            .headers
            .get(AUTHORIZATION)
            .ok_or_else(|| ApiError::unauthorized("missing Authorization: Bearer <api key>"))?;
        let key = header
            .to_str()
            .ok()
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, key)| key.trim())
            .filter(|key| !key.is_empty() && key.len() <= MAX_KEY_LEN)
            .ok_or_else(|| ApiError::unauthorized("expected Authorization: Bearer <api key>"))?;
        let db = state.db().await?;
        let owner = store::authenticate_api_key(&**db, key)
            .await?
            .ok_or_else(|| ApiError::unauthorized("invalid or revoked API key"))?;
        state.check_rate(owner.key_id)?;
        if let Some(writer) = parts.extensions.get::<Writer>() {
            writer.set(owner.key_id);
        }
        Ok(Caller {
            project_id: owner.project_id,
            key_id: owner.key_id,
        })
    }
}
