//! Forks and replays: `POST /v1/agents/{id}/fork`, `POST|GET
//! /v1/agents/{id}/replays`, `GET /v1/replays/{id}`.

use crate::domain::TokenUsage;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use super::events::RecordedCall;

/// Where to fork: one of the source's events (`seq`), or the end of its
/// `turn`-th turn (from 1). Neither: its last event.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkAt {
    pub seq: Option<i64>,
    pub turn: Option<i64>,
}

/// `POST /v1/agents/{id}/fork`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// Default: the source's last saved step.
    pub at: Option<ForkAt>,
    /// A merge patch of the source's config for the fork, checked as
    /// `PATCH /v1/agents/{id}` checks one.
    #[schema(value_type = Option<Object>)]
    pub config: Option<Value>,
    /// Start from this config version of the source
    /// (`GET /v1/agents/{id}/versions`) instead of its current config; the
    /// patch applies to it. Default: the current config.
    pub version: Option<i32>,
}

/// The source's turns to replay (from 1; both ends included).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnRange {
    /// Default: the first.
    pub from: Option<i64>,
    /// Default: the last.
    pub to: Option<i64>,
}

/// `POST /v1/agents/{id}/replays`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// A merge patch of the source's config for the replay (model, system
    /// prompt, tools' descriptions, thinking ...), checked as `PATCH
    /// /v1/agents/{id}` checks one.
    #[schema(value_type = Option<Object>)]
    pub config: Option<Value>,
    /// Default: every recorded turn.
    pub turns: Option<TurnRange>,
    /// Replay with this config version of the source
    /// (`GET /v1/agents/{id}/versions`) instead of its current config; the
    /// patch applies to it. Default: the current config.
    pub version: Option<i32>,
}

/// Where a replay stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReplayStatus {
    /// Turns are being replayed.
    Running,
    /// Every turn was replayed.
    Completed,
    /// A replayed turn failed or was cancelled (`error` says how).
    Failed,
}

/// A replay without its turns.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ReplaySummary {
    pub id: Uuid,
    /// The hidden agent the turns are replayed on (its timeline and
    /// stream work as any agent's).
    pub agent_id: Uuid,
    pub status: ReplayStatus,
    #[schema(value_type = Option<Object>)]
    pub error: Option<Value>,
    /// Secrets masked as `"***"`.
    #[schema(value_type = Object)]
    pub config_patch: Value,
    pub turns_total: i64,
    pub turns_replayed: i64,
    pub created_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
}

/// `GET /v1/agents/{id}/replays`: oldest first.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ReplayList {
    pub replays: Vec<ReplaySummary>,
}

/// A tool call of a turn, with its result.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct TurnToolCall {
    pub name: String,
    #[schema(value_type = Object)]
    pub input: Value,
    #[schema(value_type = Option<Object>)]
    pub output: Option<Value>,
    pub is_error: Option<bool>,
}

/// One side of a replayed turn: the source's or the replay's.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct TurnSide {
    /// The text of the turn's last model response (null: none).
    pub answer: Option<String>,
    pub tool_calls: Vec<TurnToolCall>,
    pub usage: TokenUsage,
}

/// The first point where the replay's calls differ from the recording's.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct Divergence {
    /// Among the turn's calls, from 0.
    pub position: i64,
    /// The call each made there (null: none).
    pub source: Option<RecordedCall>,
    pub replay: Option<RecordedCall>,
}

/// One replayed turn.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ReplayTurn {
    /// The replay's turn (from 1) and the source's turn it replays.
    pub turn: i64,
    pub source_turn: i64,
    pub source: TurnSide,
    pub replay: TurnSide,
    pub diverged: bool,
    pub first_divergence: Option<Divergence>,
    /// The final answers are the same text.
    pub answer_equal: bool,
}

/// The sums over the replayed turns.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ReplayTotals {
    /// Turns with the same calls and the same final answer.
    pub turns_equal: i64,
    pub turns_diverged: i64,
    pub source: TokenUsage,
    pub replay: TokenUsage,
}

/// `GET /v1/replays/{id}`: the replay beside its source, turn by turn.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ReplayReport {
    pub id: Uuid,
    pub source_agent_id: Uuid,
    pub agent_id: Uuid,
    pub status: ReplayStatus,
    #[schema(value_type = Option<Object>)]
    pub error: Option<Value>,
    #[schema(value_type = Object)]
    pub config_patch: Value,
    pub created_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    pub turns_total: i64,
    pub turns_replayed: i64,
    /// The turns sent so far (a running replay's last one may be under way).
    pub turns: Vec<ReplayTurn>,
    pub totals: ReplayTotals,
}
