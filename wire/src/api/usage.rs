//! `GET /v1/agents/{id}/usage` and `GET /v1/usage`: an agent's and a
//! project's model usage. The types are the
//! domain's own ([`crate::domain`]), read from the database as
//! the API sends them, so the two cannot drift.

pub use crate::domain::{AgentUsage, DayUsage, ProjectUsage, TokenUsage, TurnUsage};
