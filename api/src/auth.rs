//! Bearer API keys. Every `/v1` route takes a [`Caller`]: the project the
//! key belongs to, which then scopes every read and write of the request.
//! Taking a `Caller` also takes one request from the key's rate limit
//! (`crate::rate_limit`), so no route can skip it. A key that matches
//! nothing counts against its client address ([`look_up`]).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use holdfast_db::store;
use uuid::Uuid;

use crate::error::ApiError;
use crate::rate_limit::BeforeLookup;
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
        let owner = look_up(state, client_address(parts), key, |key| async move {
            let db = state.db().await?;
            Ok(store::authenticate_api_key(&db, &key).await?)
        })
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

/// The client's address, when the server was started with it
/// ([`crate::serve`] is): the peer of the connection, so behind a reverse
/// proxy, the proxy's.
pub fn client_address(parts: &Parts) -> Option<IpAddr> {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip())
}

/// Look `key` up with `lookup`, unless it matched nothing moments ago
/// (`Ok(None)` without a lookup) or `address` has run out of failed
/// lookups (429 before any); a key that matches nothing is recorded
/// against `address` ([`crate::rate_limit::FailedLookups`]).
pub async fn look_up<T, F, Fut>(
    state: &AppState,
    address: Option<IpAddr>,
    key: &str,
    lookup: F,
) -> Result<Option<T>, ApiError>
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Result<Option<T>, ApiError>>,
{
    let Some(failures) = state.failed_lookups() else {
        return lookup(key.to_owned()).await;
    };
    if let BeforeLookup::Unknown = failures.before_lookup(address, key)? {
        return Ok(None);
    }
    let found = lookup(key.to_owned()).await?;
    if found.is_none() {
        failures.failed(address, key)?;
    }
    Ok(found)
}
