//! Approvals and questions: the waits a person answers. List an agent's
//! (re-read them after a stream reconnects), and answer one. The first
//! answer wins; the same answer again by the same person is accepted again
//! (a retried request is harmless); a different one gets 409 with the
//! approval or question as it stands.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use holdfast_engine::domain::{Approval, ApprovalStatus, Question, QuestionStatus};
use holdfast_engine::{store, Error};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::agents::page_limit;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::observe::record_agent;
use crate::state::AppState;

/// An approval's status.
#[derive(Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalStatusName {
    Pending,
    Approved,
    Denied,
    /// Its turn was cancelled before anyone decided.
    Cancelled,
}

impl From<ApprovalStatus> for ApprovalStatusName {
    fn from(status: ApprovalStatus) -> Self {
        match status {
            ApprovalStatus::Pending => ApprovalStatusName::Pending,
            ApprovalStatus::Approved => ApprovalStatusName::Approved,
            ApprovalStatus::Denied => ApprovalStatusName::Denied,
            ApprovalStatus::Cancelled => ApprovalStatusName::Cancelled,
        }
    }
}

impl From<ApprovalStatusName> for ApprovalStatus {
    fn from(status: ApprovalStatusName) -> Self {
        match status {
            ApprovalStatusName::Pending => ApprovalStatus::Pending,
            ApprovalStatusName::Approved => ApprovalStatus::Approved,
            ApprovalStatusName::Denied => ApprovalStatus::Denied,
            ApprovalStatusName::Cancelled => ApprovalStatus::Cancelled,
        }
    }
}

/// A tool call waiting for approve or deny.
#[derive(Serialize, ToSchema)]
pub struct ApprovalView {
    id: Uuid,
    agent_id: Uuid,
    tool_call_id: Uuid,
    /// The tool the model wants to call.
    tool_name: String,
    /// What it wants to call it with.
    #[schema(value_type = Object)]
    tool_input: Value,
    status: ApprovalStatusName,
    decided_by: Option<String>,
    reason: Option<String>,
    created_at: DateTime<Utc>,
    decided_at: Option<DateTime<Utc>>,
}

impl From<Approval> for ApprovalView {
    fn from(approval: Approval) -> Self {
        ApprovalView {
            id: approval.id,
            agent_id: approval.agent_id,
            tool_call_id: approval.tool_call_id,
            tool_name: approval.tool_name,
            tool_input: approval.tool_input,
            status: approval.status.into(),
            decided_by: approval.decided_by,
            reason: approval.reason,
            created_at: approval.created_at,
            decided_at: approval.decided_at,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct ApprovalList {
    approvals: Vec<ApprovalView>,
}

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
    if !store::agent_in_project(&**db, caller.project_id, id).await? {
        return Err(ApiError::agent_not_found(id));
    }
    let approvals = store::list_approvals(&**db, id, query.status.map(Into::into), limit).await?;
    Ok(Json(ApprovalList {
        approvals: approvals.into_iter().map(ApprovalView::from).collect(),
    }))
}

/// Approve or deny.
#[derive(Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// The call runs (or waits for its outside party, e.g. a custom tool).
    Approve,
    /// The call completes with an error the model sees.
    Deny,
}

impl Decision {
    fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Deny => "deny",
        }
    }
}

/// A decision on an approval.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    decision: Decision,
    /// Who decides (kept with the decision; the same person sending the
    /// same decision again gets 200).
    by: String,
    /// Why; shown to the model on a denial.
    reason: Option<String>,
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
    let approval = store::get_approval(&**db, caller.project_id, id)
        .await?
        .ok_or_else(|| approval_not_found(id))?;
    record_agent(approval.agent_id);
    let decided = store::answer_approval(
        &**db,
        id,
        request.decision.as_str(),
        &request.by,
        request.reason.as_deref(),
    )
    .await;
    let current = || async {
        store::get_approval(&**db, caller.project_id, id)
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

/// A question's status.
#[derive(Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum QuestionStatusName {
    Pending,
    Answered,
    /// Its turn was cancelled before anyone answered.
    Cancelled,
}

impl From<QuestionStatus> for QuestionStatusName {
    fn from(status: QuestionStatus) -> Self {
        match status {
            QuestionStatus::Pending => QuestionStatusName::Pending,
            QuestionStatus::Answered => QuestionStatusName::Answered,
            QuestionStatus::Cancelled => QuestionStatusName::Cancelled,
        }
    }
}

impl From<QuestionStatusName> for QuestionStatus {
    fn from(status: QuestionStatusName) -> Self {
        match status {
            QuestionStatusName::Pending => QuestionStatus::Pending,
            QuestionStatusName::Answered => QuestionStatus::Answered,
            QuestionStatusName::Cancelled => QuestionStatus::Cancelled,
        }
    }
}

/// A question an agent asked (`ask_user`).
#[derive(Serialize, ToSchema)]
pub struct QuestionView {
    id: Uuid,
    agent_id: Uuid,
    tool_call_id: Uuid,
    question: String,
    status: QuestionStatusName,
    answer: Option<String>,
    answered_by: Option<String>,
    created_at: DateTime<Utc>,
    answered_at: Option<DateTime<Utc>>,
}

impl From<Question> for QuestionView {
    fn from(question: Question) -> Self {
        QuestionView {
            id: question.id,
            agent_id: question.agent_id,
            tool_call_id: question.tool_call_id,
            question: question.question,
            status: question.status.into(),
            answer: question.answer,
            answered_by: question.answered_by,
            created_at: question.created_at,
            answered_at: question.answered_at,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct QuestionList {
    questions: Vec<QuestionView>,
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
    if !store::agent_in_project(&**db, caller.project_id, id).await? {
        return Err(ApiError::agent_not_found(id));
    }
    let questions = store::list_questions(&**db, id, query.status.map(Into::into), limit).await?;
    Ok(Json(QuestionList {
        questions: questions.into_iter().map(QuestionView::from).collect(),
    }))
}

/// An answer to a question.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerRequest {
    /// Sent to the model as the `ask_user` call's result.
    answer: String,
    /// Who answers (the same person sending the same answer again gets 200).
    by: String,
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
    let question = store::get_question(&**db, caller.project_id, id)
        .await?
        .ok_or_else(|| question_not_found(id))?;
    record_agent(question.agent_id);
    let answered = store::answer_question(&**db, id, &request.answer, &request.by).await;
    let current = || async {
        store::get_question(&**db, caller.project_id, id)
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
