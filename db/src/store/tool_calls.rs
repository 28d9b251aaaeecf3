//! Tool calls, and the approvals and questions that wait on people, as
//! clients read and answer them (sql/schema/tools.sql).

use postgres_types::ToSql;
use serde_json::Value;

use uuid::Uuid;

use super::prepared::{query_one_prepared, query_prepared, with_wake_after_commit, Prepared};
use super::{batch_outcomes, parse_text};
use crate::error::{Error, Result};
use holdfast_wire::domain::{Approval, ApprovalStatus, ApprovalSubject, Question, QuestionStatus};
use holdfast_wire::domain::{ToolCall, ToolCallStatus, ToolKind};

/// The columns [`tool_call_from_row`] reads, as a literal (a macro, so that
/// statements built from it stay `&'static str` and can be prepared once).
macro_rules! tool_call_columns {
    () => {
        "id, agent_id, step_id, position, provider_id, name, input, kind, \
         status, output, is_error, created_at, completed_at"
    };
}

const TOOL_CALL_COLUMNS: &str = tool_call_columns!();

fn tool_call_from_row(row: &tokio_postgres::Row) -> Result<ToolCall> {
    tool_call_from_row_at(row, 0)
}

/// A [`ToolCall`] from the [`tool_call_columns`] of `row` that start at
/// column `first`.
fn tool_call_from_row_at(row: &tokio_postgres::Row, first: usize) -> Result<ToolCall> {
    Ok(ToolCall {
        id: row.get(first),
        agent_id: row.get(first + 1),
        step_id: row.get(first + 2),
        position: row.get(first + 3),
        provider_id: row.get(first + 4),
        name: row.get(first + 5),
        input: row.get(first + 6),
        kind: parse_text(row.get(first + 7), "kind")?,
        status: parse_text(row.get(first + 8), "status")?,
        output: row.get(first + 9),
        is_error: row.get(first + 10),
        created_at: row.get(first + 11),
        completed_at: row.get(first + 12),
    })
}

/// `a, b` → `t.a, t.b`.
fn qualified(columns: &str, alias: &str) -> String {
    columns
        .split(',')
        .map(|c| format!("{alias}.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Post a custom tool call's result (first result wins: a later one is
/// [`Error::Conflict`]); returns the completed call.
pub async fn submit_tool_result(
    client: &impl Prepared,
    tool_call: Uuid,
    output: &Value,
    is_error: bool,
) -> Result<ToolCall> {
    let row = with_wake_after_commit(
        client,
        query_one_prepared(
            client,
            concat!(
                "SELECT ",
                tool_call_columns!(),
                " FROM holdfast.submit_tool_result($1, $2, $3)"
            ),
            &[&tool_call, output, &is_error],
        ),
    )
    .await?;
    tool_call_from_row(&row)
}

/// One posted tool result, a row of `holdfast.tool_result[]`.
#[derive(Clone, Debug, ToSql)]
#[postgres(name = "tool_result")]
pub struct ToolResult {
    pub tool_call_id: Uuid,
    pub output: Value,
    pub is_error: bool,
}

/// Post several custom tool calls' results in one transaction (the API's
/// group commit, `holdfast.submit_tool_results`), each call checked on its
/// own. Returns each result's outcome in `results`' order: the completed
/// call, or the error [`submit_tool_result`] would have returned for it
/// alone ([`Error::Conflict`], [`Error::NotFound`], [`Error::Invalid`]).
/// `Err` only when the whole batch failed (nothing of it was saved when
/// `client` commits nothing else).
pub async fn submit_tool_results(
    client: &impl Prepared,
    results: &[ToolResult],
) -> Result<Vec<Result<ToolCall>>> {
    let rows = with_wake_after_commit(
        client,
        query_prepared(
            client,
            concat!(
                "SELECT r.ord, r.outcome, r.message, r.field, c.* \
                   FROM holdfast.submit_tool_results($1) r \
                   LEFT JOIN LATERAL (SELECT ",
                tool_call_columns!(),
                " FROM (SELECT (r.tool_call).*) t) c ON r.outcome = 'completed'"
            ),
            &[&results],
        ),
    )
    .await?;
    Ok(batch_outcomes(&rows, results.len(), |outcome, row| {
        (outcome == "completed").then(|| tool_call_from_row_at(row, 4))
    }))
}

/// A tool call of `project`'s agents; `None` when missing or another project's.
pub async fn get_tool_call(
    client: &impl Prepared,
    project: Uuid,
    tool_call: Uuid,
) -> Result<Option<ToolCall>> {
    let row = client
        .query_opt(
            &format!(
                "SELECT {} FROM holdfast.tool_calls t JOIN holdfast.agents a ON a.id = t.agent_id \
                  WHERE t.id = $1 AND a.project_id = $2",
                qualified(TOOL_CALL_COLUMNS, "t")
            ),
            &[&tool_call, &project],
        )
        .await?;
    row.as_ref().map(tool_call_from_row).transpose()
}

/// An agent's tool calls in `statuses` (all when empty), of `kind` when
/// given, in the order the model asked for them.
pub async fn list_tool_calls(
    client: &impl Prepared,
    agent: Uuid,
    statuses: &[ToolCallStatus],
    kind: Option<ToolKind>,
    limit: i64,
) -> Result<Vec<ToolCall>> {
    let statuses: Vec<&str> = statuses.iter().map(<&str>::from).collect();
    let kind = kind.map(<&str>::from);
    let rows = client
        .query(
            &format!(
                "SELECT {TOOL_CALL_COLUMNS} FROM holdfast.tool_calls \
                  WHERE agent_id = $1 AND (cardinality($2::text[]) = 0 OR status = ANY ($2)) \
                    AND ($3::text IS NULL OR kind = $3) \
                  ORDER BY created_at, step_id, position LIMIT $4"
            ),
            &[&agent, &statuses, &kind, &limit],
        )
        .await?;
    rows.iter().map(tool_call_from_row).collect()
}

/// Decide an approval (`approve` | `deny`): first decision wins; the same
/// decision again by the same person is accepted again. Returns the
/// approval's status after the call.
pub async fn answer_approval(
    client: &impl Prepared,
    approval: Uuid,
    decision: &str,
    by: &str,
    reason: Option<&str>,
) -> Result<String> {
    let row = client
        .query_one(
            "SELECT (holdfast.answer_approval($1, $2, $3, $4)).status",
            &[&approval, &decision, &by, &reason],
        )
        .await?;
    Ok(row.get(0))
}

/// Answer a question: first answer wins; the same answer again by the same
/// person is accepted again.
pub async fn answer_question(
    client: &impl Prepared,
    question: Uuid,
    answer: &str,
    by: &str,
) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.answer_question($1, $2, $3)",
            &[&question, &answer, &by],
        )
        .await?;
    Ok(())
}

/// The columns [`approval_from_row`] reads, by these names, of
/// `holdfast.approvals p` and its tool call `t`.
const APPROVAL_COLUMNS: &str =
    "p.id, p.agent_id, p.kind, p.tool_call_id, t.name AS tool_name, t.input AS tool_input, \
     p.budget, p.status, p.decided_by, p.reason, p.created_at, p.decided_at";

fn approval_from_row(row: &tokio_postgres::Row) -> Result<Approval> {
    let kind: &str = row.get("kind");
    let subject = match kind {
        "tool_call" => ApprovalSubject::ToolCall {
            tool_call_id: row.get("tool_call_id"),
            tool_name: row.get("tool_name"),
            tool_input: row.get("tool_input"),
        },
        "budget" => ApprovalSubject::Budget(row.get("budget")),
        other => {
            return Err(Error::Invalid {
                field: Some("kind".into()),
                message: format!("unknown approval kind {other:?}"),
            })
        }
    };
    Ok(Approval {
        id: row.get("id"),
        agent_id: row.get("agent_id"),
        subject,
        status: parse_text(row.get("status"), "status")?,
        decided_by: row.get("decided_by"),
        reason: row.get("reason"),
        created_at: row.get("created_at"),
        decided_at: row.get("decided_at"),
    })
}

/// An approval of `project`'s agents; `None` when missing or another project's.
pub async fn get_approval(
    client: &impl Prepared,
    project: Uuid,
    approval: Uuid,
) -> Result<Option<Approval>> {
    let row = client
        .query_opt(
            &format!(
                "SELECT {APPROVAL_COLUMNS} FROM holdfast.approvals p \
                   LEFT JOIN holdfast.tool_calls t ON t.id = p.tool_call_id \
                   JOIN holdfast.agents a ON a.id = p.agent_id \
                  WHERE p.id = $1 AND a.project_id = $2"
            ),
            &[&approval, &project],
        )
        .await?;
    row.as_ref().map(approval_from_row).transpose()
}

/// An agent's approvals in `status` (all when `None`), oldest first.
pub async fn list_approvals(
    client: &impl Prepared,
    agent: Uuid,
    status: Option<ApprovalStatus>,
    limit: i64,
) -> Result<Vec<Approval>> {
    let status = status.map(<&str>::from);
    let rows = client
        .query(
            &format!(
                "SELECT {APPROVAL_COLUMNS} FROM holdfast.approvals p \
                   LEFT JOIN holdfast.tool_calls t ON t.id = p.tool_call_id \
                  WHERE p.agent_id = $1 AND ($2::text IS NULL OR p.status = $2) \
                  ORDER BY p.created_at, p.id LIMIT $3"
            ),
            &[&agent, &status, &limit],
        )
        .await?;
    rows.iter().map(approval_from_row).collect()
}

/// The columns [`question_from_row`] reads, by these names, of
/// `holdfast.questions q`.
const QUESTION_COLUMNS: &str = "q.id, q.agent_id, q.tool_call_id, q.question, q.status, q.answer, \
                                q.answered_by, q.created_at, q.answered_at";

fn question_from_row(row: &tokio_postgres::Row) -> Result<Question> {
    Ok(Question {
        id: row.get("id"),
        agent_id: row.get("agent_id"),
        tool_call_id: row.get("tool_call_id"),
        question: row.get("question"),
        status: parse_text(row.get("status"), "status")?,
        answer: row.get("answer"),
        answered_by: row.get("answered_by"),
        created_at: row.get("created_at"),
        answered_at: row.get("answered_at"),
    })
}

/// A question of `project`'s agents; `None` when missing or another project's.
pub async fn get_question(
    client: &impl Prepared,
    project: Uuid,
    question: Uuid,
) -> Result<Option<Question>> {
    let row = client
        .query_opt(
            &format!(
                "SELECT {QUESTION_COLUMNS} FROM holdfast.questions q \
                   JOIN holdfast.agents a ON a.id = q.agent_id \
                  WHERE q.id = $1 AND a.project_id = $2"
            ),
            &[&question, &project],
        )
        .await?;
    row.as_ref().map(question_from_row).transpose()
}

/// An agent's questions in `status` (all when `None`), oldest first.
pub async fn list_questions(
    client: &impl Prepared,
    agent: Uuid,
    status: Option<QuestionStatus>,
    limit: i64,
) -> Result<Vec<Question>> {
    let status = status.map(<&str>::from);
    let rows = client
        .query(
            &format!(
                "SELECT {QUESTION_COLUMNS} FROM holdfast.questions q \
                  WHERE q.agent_id = $1 AND ($2::text IS NULL OR q.status = $2) \
                  ORDER BY q.created_at, q.id LIMIT $3"
            ),
            &[&agent, &status, &limit],
        )
        .await?;
    rows.iter().map(question_from_row).collect()
}
