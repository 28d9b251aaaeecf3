//! Machine tokens: every `/v1/machine/...` route takes a [`MachineCaller`],
//! the machine the bearer token belongs to. API keys are refused here, and
//! machine tokens are refused on the API-key routes (they are not keys).
//! Each machine's requests are rate limited like an API key's, and a token
//! that matches nothing counts against its client address, as a key does.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use holdfast_db::store;
use holdfast_db::store::Prepared;
use uuid::Uuid;

use crate::auth::{client_address, look_up};
use crate::error::ApiError;
use crate::state::AppState;

/// Longer than any token Holdfast issues; refused without a database lookup.
const MAX_TOKEN_LEN: usize = 256;

/// The machine whose daemon makes the request.
#[derive(Clone)]
pub struct MachineCaller {
    pub machine_id: Uuid,
    pub project_id: Uuid,
    /// Kept so a long request can check the token again ([`Self::revalidate`]).
    token: String,
}

impl MachineCaller {
    /// 401 unless the token still belongs to this machine: a long-poll
    /// outlives the check made when it began, and the token may have been
    /// rotated or the machine deleted meanwhile.
    pub async fn revalidate(&self, client: &impl Prepared) -> Result<(), ApiError> {
        match store::authenticate_machine(client, &self.token).await? {
            Some(machine) if machine.machine_id == self.machine_id => Ok(()),
            _ => Err(revoked()),
        }
    }
}

impl std::fmt::Debug for MachineCaller {
    // The token stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MachineCaller")
            .field("machine_id", &self.machine_id)
            .field("project_id", &self.project_id)
            .finish_non_exhaustive()
    }
}

fn revoked() -> ApiError {
    ApiError::unauthorized("invalid machine token (unknown, rotated, or its machine was deleted)")
}

impl FromRequestParts<AppState> for MachineCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let header = parts.headers.get(AUTHORIZATION).ok_or_else(|| {
            ApiError::unauthorized("missing Authorization: Bearer <machine token>")
        })?;
        let token = header
            .to_str()
            .ok()
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .filter(|token| !token.is_empty() && token.len() <= MAX_TOKEN_LEN)
            .ok_or_else(|| {
                ApiError::unauthorized("expected Authorization: Bearer <machine token>")
            })?;
        if token.starts_with("hf_") {
            return Err(ApiError::unauthorized(
                "an API key cannot call machine routes; use the machine's token (hfm_…)",
            ));
        }
        let machine = look_up(state, client_address(parts), token, |token| async move {
            let db = state.db().await?;
            Ok(store::authenticate_machine(&db, &token).await?)
        })
        .await?
        .ok_or_else(revoked)?;
        state.check_machine_rate(machine.machine_id)?;
        Ok(MachineCaller {
            machine_id: machine.machine_id,
            project_id: machine.project_id,
            token: token.to_owned(),
        })
    }
}
