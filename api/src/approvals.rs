//! Approvals and questions: the waits a person answers. List an agent's
//! (re-read them after a stream reconnects), and answer one. The first
//! answer wins; the same answer again by the same person is accepted again
//! (a retried request is harmless); a different one gets 409 with the
//! approval or question as it stands.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use holdfast_db::{store, Error};
use holdfast_wire::api::approvals::{
    AnswerRequest, ApprovalList, ApprovalStatusName, ApprovalView, DecisionRequest, QuestionList,
    QuestionStatusName, QuestionView,
};
use holdfast_wire::api::error::ErrorBody;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::IntoParams;
use uuid::Uuid;

use crate::agents::page_limit;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::observe::record_agent;
use crate::state::AppState;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ApprovalsQuery {
    /// Only approvals in this status (`pending`: still to decide). Absent: all.
    #[param(inline)]
    status: Option<ApprovalStatusName>,
    /// At most this many (default 100, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// List an agent's approvals, oldest first.
#[utoipa::path(
    get,
    path = "/v1/agents/{id}/approvals",
    tag = "approvals",
    params(("id" = Uuid, Path, description = "agent id"), ApprovalsQuery),
    responses((status = 200, body = ApprovalList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody))
)]
pub async fn list_approvals(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<ApprovalsQuery>,
) -> Result<Json<ApprovalList>, ApiError> {
    record_agent(id);
    let limit = page_limit(query.limit)?;
    let db = state.db().await?;
    if !store::agent_in_project(&db, caller.project_id, id).await? {
        return Err(ApiError::agent_not_found(id));
    }
    let approvals = store::list_approvals(&db, id, query.status.map(Into::into), limit).await?;
    Ok(Json(ApprovalList {
        approvals: approvals.into_iter().map(ApprovalView::from).collect(),
    }))
}

/// Decide an approval. The first decision wins.
#[utoipa::path(
    post,
    path = "/v1/approvals/{id}",
    tag = "approvals",
    params(("id" = Uuid, Path, description = "approval id")),
    request_body = DecisionRequest,
    responses(
        (status = 200, description = "decided (or the same decision by the same person again)", body = ApprovalView),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "already decided otherwise, or cancelled; `approval` is the approval as it stands", body = ErrorBody),
    )
)]
pub async fn decide_approval(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(request): ApiJson<DecisionRequest>,
) -> Result<Json<ApprovalView>, ApiError> {
    let db = state.db().await?;
    let approval = store::get_approval(&db, caller.project_id, id)
        .await?
        .ok_or_else(|| approval_not_found(id))?;
    record_agent(approval.agent_id);
    let decided = store::answer_approval(
        &db,
        id,
        request.decision.as_str(),
        &request.by,
        request.reason.as_deref(),
    )
    .await;
    let current = || async {
        store::get_approval(&db, caller.project_id, id)
            .await?
            .map(ApprovalView::from)
            .ok_or_else(|| approval_not_found(id))
    };
    match decided {
        Ok(_) => Ok(Json(current().await?)),
        Err(Error::Conflict(message)) => Err(conflict(message, "approval", &current().await?)),
        Err(e) => Err(e.into()),
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct QuestionsQuery {
    /// Only questions in this status (`pending`: still to answer). Absent: all.
    #[param(inline)]
    status: Option<QuestionStatusName>,
    /// At most this many (default 100, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// List an agent's questions, oldest first.
#[utoipa::path(
    get,
    path = "/v1/agents/{id}/questions",
    tag = "approvals",
    params(("id" = Uuid, Path, description = "agent id"), QuestionsQuery),
    responses((status = 200, body = QuestionList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody))
)]
pub async fn list_questions(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<QuestionsQuery>,
) -> Result<Json<QuestionList>, ApiError> {
    record_agent(id);
    let limit = page_limit(query.limit)?;
    let db = state.db().await?;
    if !store::agent_in_project(&db, caller.project_id, id).await? {
        return Err(ApiError::agent_not_found(id));
    }
    let questions = store::list_questions(&db, id, query.status.map(Into::into), limit).await?;
    Ok(Json(QuestionList {
        questions: questions.into_iter().map(QuestionView::from).collect(),
    }))
}

/// Answer a question. The first answer wins.
#[utoipa::path(
    post,
    path = "/v1/questions/{id}/answer",
    tag = "approvals",
    params(("id" = Uuid, Path, description = "question id")),
    request_body = AnswerRequest,
    responses(
        (status = 200, description = "answered (or the same answer by the same person again)", body = QuestionView),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "already answered otherwise, or cancelled; `question` is the question as it stands", body = ErrorBody),
    )
)]
pub async fn answer_question(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(request): ApiJson<AnswerRequest>,
) -> Result<Json<QuestionView>, ApiError> {
    let db = state.db().await?;
    let question = store::get_question(&db, caller.project_id, id)
        .await?
        .ok_or_else(|| question_not_found(id))?;
    record_agent(question.agent_id);
    let answered = store::answer_question(&db, id, &request.answer, &request.by).await;
    let current = || async {
        store::get_question(&db, caller.project_id, id)
            .await?
            .map(QuestionView::from)
            .ok_or_else(|| question_not_found(id))
    };
    match answered {
        Ok(()) => Ok(Json(current().await?)),
        Err(Error::Conflict(message)) => Err(conflict(message, "question", &current().await?)),
        Err(e) => Err(e.into()),
    }
}

fn approval_not_found(id: Uuid) -> ApiError {
    ApiError::not_found(format!("approval {id} not found"))
}

fn question_not_found(id: Uuid) -> ApiError {
    ApiError::not_found(format!("question {id} not found"))
}

/// 409 with the object as it stands, so the client sees what won.
fn conflict(message: String, name: &'static str, current: &impl Serialize) -> ApiError {
    let current = serde_json::to_value(current).unwrap_or(Value::Null);
    ApiError::new(StatusCode::CONFLICT, "conflict", message).with_context(name, current)
}
