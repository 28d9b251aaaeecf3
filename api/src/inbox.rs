//! `GET /v1/inbox`: everything across the project that waits on a person
//! or a client (approvals, budget approvals, questions, custom tool calls,
//! commands no machine has accepted), oldest first, from one SQL function
//! (`holdfast.inbox`, sql/schema/tools.sql).

use axum::extract::State;
use axum::Json;
use holdfast_db::store::console;
use holdfast_wire::api::error::ErrorBody;
use holdfast_wire::api::inbox::{Inbox, InboxItem, InboxKind};
use serde::Deserialize;
use serde_json::Value;
use utoipa::IntoParams;

use crate::agents::{format_cursor, page_limit, parse_cursor};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::ApiQuery;
use crate::state::AppState;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct InboxQuery {
    /// Only items of this kind.
    #[param(inline)]
    kind: Option<InboxKind>,
    /// Only items of agents whose `config.metadata` contains this JSON
    /// object, e.g. `{"team":"billing"}`.
    metadata: Option<String>,
    /// At most this many (default 100, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
    /// The `next_cursor` of the previous page.
    cursor: Option<String>,
}

/// The document `holdfast.inbox` returns.
#[derive(Deserialize)]
struct InboxDocument {
    items: Vec<InboxItem>,
    total: i64,
}

/// List what waits on a person or a client, oldest first.
#[utoipa::path(
    get,
    path = "/v1/inbox",
    tag = "approvals",
    params(InboxQuery),
    responses(
        (status = 200, body = Inbox),
        (status = 400, description = "`field` names the bad parameter (kind, metadata, limit, cursor)", body = ErrorBody),
        (status = 401, body = ErrorBody),
    )
)]
pub async fn get_inbox(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<InboxQuery>,
) -> Result<Json<Inbox>, ApiError> {
    let limit = page_limit(query.limit)?;
    let metadata = query.metadata.as_deref().map(parse_metadata).transpose()?;
    let after = query
        .cursor
        .as_deref()
        .map(parse_cursor)
        .transpose()?
        .map(|(created_at, id)| console::InboxCursor { created_at, id });
    let filter = console::InboxFilter {
        kind: query.kind.map(InboxKind::as_str),
        metadata: metadata.as_ref(),
    };
    let db = state.db().await?;
    let document = console::inbox(&db, caller.project_id, &filter, after, limit + 1).await?;
    let InboxDocument { mut items, total } = serde_json::from_value(document).map_err(|e| {
        tracing::error!(error = %e, "holdfast.inbox returned a document the API cannot read");
        ApiError::internal()
    })?;
    let has_more = items.len() as i64 > limit;
    items.truncate(limit as usize);
    let next_cursor = items
        .last()
        .filter(|_| has_more)
        .map(|last| format_cursor(last.created_at, last.id));
    Ok(Json(Inbox {
        items,
        total,
        has_more,
        next_cursor,
    }))
}

fn parse_metadata(text: &str) -> Result<Value, ApiError> {
    match serde_json::from_str::<Value>(text) {
        Ok(object @ Value::Object(_)) => Ok(object),
        _ => Err(ApiError::invalid(
            "metadata",
            "metadata must be a JSON object, e.g. {\"team\":\"billing\"}",
        )),
    }
}
