//! The reads behind the web console: a project's name and agent counts, its
//! agents newest activity first with keyset paging and search, and the
//! operations overview (queue, workers, stuck agents, webhooks, machines),
//! every one scoped to one project. Reads only: the console's writes go
//! through the same wrappers as every other client's.
//!
//! Queries here run as one-off statements (not
//! [`super::Prepared::statement`]s), so each is planned with its parameters: the `$n IS NULL OR …` filters fold
//! away and the keyset condition becomes an index condition.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::Value;
use strum::VariantArray;

use uuid::Uuid;

use super::agents::agent_from_row;
use super::prepared::Prepared;
use crate::error::Result;
use holdfast_wire::domain::{Agent, AgentState, TurnOutcome};

/// A project as its own keys see it.
#[derive(Clone, Debug)]
pub struct Project {
    pub id: Uuid,
    pub name: String,
    /// Agents per state; every state is present (0 when none).
    pub agents_by_state: BTreeMap<String, i64>,
    /// Agents per outcome of their last turn (`agents.last_turn_outcome`);
    /// every outcome is present (0 when none). Agents with a turn open, or
    /// none yet, are in no count.
    pub agents_by_last_turn_outcome: BTreeMap<String, i64>,
}

/// Where a page of the activity-ordered list starts: below this row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActivityCursor {
    pub activity: DateTime<Utc>,
    pub id: Uuid,
}

/// What to narrow the agent list to; every part is optional and they add up.
#[derive(Clone, Debug, Default)]
pub struct AgentFilter {
    pub state: Option<AgentState>,
    /// Its last turn ended so.
    pub outcome: Option<TurnOutcome>,
    /// Exactly this agent.
    pub id: Option<Uuid>,
    /// `config.metadata` contains this object (`@>`).
    pub metadata: Option<Value>,
    /// `config.metadata`'s JSON text, or the agent's id, contains this,
    /// case-insensitively (so a part of an id finds the agent); or the text
    /// of one of its inputs or saved messages holds its words (full text,
    /// `websearch_to_tsquery` with the `simple` configuration, through
    /// `inputs_search_idx` and `messages_search_idx`; content over 256 KiB
    /// is not searched).
    pub text: Option<String>,
}

/// An agent with the time the activity order sorts by.
#[derive(Clone, Debug)]
pub struct AgentActivity {
    pub agent: Agent,
    /// Its latest event's time, or its creation before it has events.
    pub activity: DateTime<Utc>,
}

/// The project `project` with its agent counts; `None` if it does not exist.
pub async fn project(client: &impl Prepared, project: Uuid) -> Result<Option<Project>> {
    let Some(row) = client
        .query_opt(
            "SELECT name FROM holdfast.projects WHERE id = $1",
            &[&project],
        )
        .await?
    else {
        return Ok(None);
    };
    let mut agents_by_state: BTreeMap<String, i64> = AgentState::VARIANTS
        .iter()
        .map(|s| (s.to_string(), 0))
        .collect();
    let counts = client
        .query(
            "SELECT state, count(*) AS agents FROM holdfast.agents WHERE project_id = $1 \
              GROUP BY state",
            &[&project],
        )
        .await?;
    for row in counts {
        let state: AgentState = super::parse_text(row.get("state"), "state")?;
        agents_by_state.insert(state.to_string(), row.get("agents"));
    }
    let mut agents_by_last_turn_outcome: BTreeMap<String, i64> = TurnOutcome::VARIANTS
        .iter()
        .map(|o| (o.to_string(), 0))
        .collect();
    let counts = client
        .query(
            "SELECT last_turn_outcome, count(*) AS agents FROM holdfast.agents \
              WHERE project_id = $1 AND last_turn_outcome IS NOT NULL GROUP BY last_turn_outcome",
            &[&project],
        )
        .await?;
    for row in counts {
        let outcome: TurnOutcome =
            super::parse_text(row.get("last_turn_outcome"), "last_turn_outcome")?;
        agents_by_last_turn_outcome.insert(outcome.to_string(), row.get("agents"));
    }
    Ok(Some(Project {
        id: project,
        name: row.get("name"),
        agents_by_state,
        agents_by_last_turn_outcome,
    }))
}

/// The activity-ordered agent list's statement (the columns of
/// `AGENT_COLUMNS` by the same names, the config masked by
/// `mask_config_secrets` as there, then the `activity`). Public so a test can EXPLAIN
/// exactly what runs. `coalesce(last_event_at, created_at)` is the
/// expression the activity indexes are built on, and the text searches
/// repeat the text indexes' expressions and size predicate
/// (sql/schema/agents.sql, sql/schema/steps.sql) so the planner uses them.
pub const AGENTS_BY_ACTIVITY_SQL: &str = "\
SELECT id, project_id, holdfast.mask_config_secrets(config) AS config, state, turn_open, \
       cancel_requested_at, last_event_seq, created_at, updated_at, state_changed_at, \
       holdfast.agent_last_turn(agents) AS last_turn, config_version, next_turn_config_version, \
       forked_from_agent_id, forked_from_seq, coalesce(last_event_at, created_at) AS activity \
  FROM holdfast.agents \
 WHERE project_id = $1 AND replay_id IS NULL \
   AND ($2::text IS NULL OR state = $2) \
   AND ($9::text IS NULL OR last_turn_outcome = $9) \
   AND ($3::timestamptz IS NULL OR (coalesce(last_event_at, created_at), id) < ($3, $4::uuid)) \
   AND ($5::uuid IS NULL OR id = $5) \
   AND ($6::jsonb IS NULL OR config -> 'metadata' @> $6) \
   AND ($7::text IS NULL OR strpos(lower((config -> 'metadata')::text), lower($7)) > 0 \
        OR strpos(id::text, lower($7)) > 0 \
        OR id IN (SELECT i.agent_id FROM holdfast.inputs i \
                   WHERE i.project_id = $1 AND octet_length(i.content::text) <= 262144 \
                     AND to_tsvector('simple'::regconfig, \
                             jsonb_path_query_array(i.content, 'strict $.**.text') \
                             || jsonb_path_query_array(i.content, 'strict $ ? (@.type() == \"string\")')) \
                         @@ websearch_to_tsquery('simple'::regconfig, $7)) \
        OR id IN (SELECT m.agent_id FROM holdfast.messages m \
                   WHERE octet_length(m.content::text) <= 262144 \
                     AND to_tsvector('simple'::regconfig, \
                             jsonb_path_query_array(m.content, 'strict $.**.text')) \
                         @@ websearch_to_tsquery('simple'::regconfig, $7))) \
 ORDER BY coalesce(last_event_at, created_at) DESC, id DESC \
 LIMIT $8";

/// Agents of `project` matching `filter`, newest activity first, below
/// `before` when given, at most `limit`.
pub async fn agents_by_activity(
    client: &impl Prepared,
    project: Uuid,
    filter: &AgentFilter,
    before: Option<ActivityCursor>,
    limit: i64,
) -> Result<Vec<AgentActivity>> {
    let state = filter.state.map(<&str>::from);
    let outcome = filter.outcome.map(<&str>::from);
    let before_activity = before.map(|c| c.activity);
    let before_id = before.map(|c| c.id);
    let rows = client
        .query(
            AGENTS_BY_ACTIVITY_SQL,
            &[
                &project,
                &state,
                &before_activity,
                &before_id,
                &filter.id,
                &filter.metadata,
                &filter.text,
                &limit,
                &outcome,
            ],
        )
        .await?;
    rows.iter()
        .map(|row| {
            Ok(AgentActivity {
                agent: agent_from_row(row)?,
                activity: row.get("activity"),
            })
        })
        .collect()
}

/// A worker holding leases on the project's agents.
#[derive(Clone, Debug)]
pub struct WorkerHolding {
    pub worker: String,
    pub agents_held: i64,
    /// The lease that runs out first.
    pub soonest_lease_expiry: Option<DateTime<Utc>>,
    /// The agents it holds (at most 20 listed).
    pub agents: Vec<Uuid>,
}

/// A stuck agent of the project, with why (`holdfast.stuck_agents`).
#[derive(Clone, Debug)]
pub struct StuckAgentRow {
    pub agent_id: Uuid,
    pub state: String,
    pub reason: String,
    pub since: DateTime<Utc>,
}

/// A webhook endpoint with its backlog and its latest failures.
#[derive(Clone, Debug)]
pub struct WebhookBacklog {
    pub endpoint_id: Uuid,
    pub url: String,
    pub pending: i64,
    pub due: i64,
    pub in_flight: i64,
    pub failed: i64,
    pub oldest_due_at: Option<DateTime<Utc>>,
    /// Up to five deliveries whose latest attempt failed, newest first.
    pub recent_failures: Vec<DeliveryFailure>,
}

#[derive(Clone, Debug)]
pub struct DeliveryFailure {
    pub delivery_id: Uuid,
    pub event_type: String,
    pub status: String,
    pub attempts: i32,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    pub last_attempt_at: Option<DateTime<Utc>>,
}

/// A machine, online or not, with its commands under way.
#[derive(Clone, Debug)]
pub struct MachineActivity {
    pub machine_id: Uuid,
    pub name: String,
    pub online: bool,
    pub last_heartbeat_at: Option<DateTime<Utc>>,
    pub queued: i64,
    /// Commands accepted and not yet finished.
    pub running: Vec<RunningCommand>,
}

#[derive(Clone, Debug)]
pub struct RunningCommand {
    pub command_id: Uuid,
    pub agent_id: Uuid,
    pub command: String,
    pub accepted_at: Option<DateTime<Utc>>,
}

/// The operations overview of one project.
#[derive(Clone, Debug)]
pub struct Operations {
    pub agents_by_state: BTreeMap<String, i64>,
    pub workers: Vec<WorkerHolding>,
    pub stuck: Vec<StuckAgentRow>,
    pub webhooks: Vec<WebhookBacklog>,
    pub machines: Vec<MachineActivity>,
}

/// Rows per section of the overview.
const SECTION_LIMIT: i64 = 100;

/// The operations overview of `project` (from the DBA views, narrowed to
/// the project).
pub async fn operations(client: &impl Prepared, project_id: Uuid) -> Result<Operations> {
    let agents_by_state = project(client, project_id)
        .await?
        .map(|p| p.agents_by_state)
        .unwrap_or_default();
    let workers = client
        .query(
            "SELECT lease_owner, count(*) AS agents_held, \
                    min(lease_expires_at) AS soonest_lease_expiry, \
                    (array_agg(id ORDER BY id))[1:20] AS agents \
               FROM holdfast.agents \
              WHERE project_id = $1 AND state = 'running' \
              GROUP BY lease_owner ORDER BY lease_owner LIMIT $2",
            &[&project_id, &SECTION_LIMIT],
        )
        .await?
        .iter()
        .map(|r| WorkerHolding {
            worker: r.get("lease_owner"),
            agents_held: r.get("agents_held"),
            soonest_lease_expiry: r.get("soonest_lease_expiry"),
            agents: r.get("agents"),
        })
        .collect();
    let stuck = client
        .query(
            "SELECT s.agent_id, s.state, s.reason, s.state_changed_at AS since \
               FROM holdfast.stuck_agents s JOIN holdfast.agents a ON a.id = s.agent_id \
              WHERE a.project_id = $1 ORDER BY s.state_changed_at, s.agent_id LIMIT $2",
            &[&project_id, &SECTION_LIMIT],
        )
        .await?
        .iter()
        .map(|r| StuckAgentRow {
            agent_id: r.get("agent_id"),
            state: r.get("state"),
            reason: r.get("reason"),
            since: r.get("since"),
        })
        .collect();
    let mut webhooks: Vec<WebhookBacklog> = client
        .query(
            "SELECT endpoint_id, url, pending, due, in_flight, failed, oldest_due_at \
               FROM holdfast.webhook_queue WHERE project_id = $1 ORDER BY url, endpoint_id LIMIT $2",
            &[&project_id, &SECTION_LIMIT],
        )
        .await?
        .iter()
        .map(|r| WebhookBacklog {
            endpoint_id: r.get("endpoint_id"),
            url: r.get("url"),
            pending: r.get("pending"),
            due: r.get("due"),
            in_flight: r.get("in_flight"),
            failed: r.get("failed"),
            oldest_due_at: r.get("oldest_due_at"),
            recent_failures: Vec::new(),
        })
        .collect();
    for endpoint in &mut webhooks {
        endpoint.recent_failures = client
            .query(
                "SELECT id AS delivery_id, event_type, status, attempts, last_status_code, \
                        last_error, last_attempt_at \
                   FROM holdfast.webhook_deliveries \
                  WHERE endpoint_id = $1 AND status <> 'delivered' AND last_attempt_at IS NOT NULL \
                    AND (last_error IS NOT NULL OR last_status_code IS NOT NULL) \
                  ORDER BY last_attempt_at DESC LIMIT 5",
                &[&endpoint.endpoint_id],
            )
            .await?
            .iter()
            .map(|r| DeliveryFailure {
                delivery_id: r.get("delivery_id"),
                event_type: r.get("event_type"),
                status: r.get("status"),
                attempts: r.get("attempts"),
                last_status_code: r.get("last_status_code"),
                last_error: r.get("last_error"),
                last_attempt_at: r.get("last_attempt_at"),
            })
            .collect();
    }
    let mut machines: Vec<MachineActivity> = client
        .query(
            "SELECT machine_id, name, online, last_heartbeat_at, queued \
               FROM holdfast.machine_overview WHERE project_id = $1 ORDER BY name LIMIT $2",
            &[&project_id, &SECTION_LIMIT],
        )
        .await?
        .iter()
        .map(|r| MachineActivity {
            machine_id: r.get("machine_id"),
            name: r.get("name"),
            online: r.get("online"),
            last_heartbeat_at: r.get("last_heartbeat_at"),
            queued: r.get("queued"),
            running: Vec::new(),
        })
        .collect();
    for machine in &mut machines {
        machine.running = client
            .query(
                "SELECT id AS command_id, agent_id, command, accepted_at FROM holdfast.commands \
                  WHERE machine_id = $1 AND state = 'accepted' ORDER BY accepted_at LIMIT 20",
                &[&machine.machine_id],
            )
            .await?
            .iter()
            .map(|r| RunningCommand {
                command_id: r.get("command_id"),
                agent_id: r.get("agent_id"),
                command: r.get("command"),
                accepted_at: r.get("accepted_at"),
            })
            .collect();
    }
    Ok(Operations {
        agents_by_state,
        workers,
        stuck,
        webhooks,
        machines,
    })
}

/// What to narrow the inbox to; every part is optional and they add up.
#[derive(Clone, Debug, Default)]
pub struct InboxFilter<'a> {
    /// One kind (`approval`, `budget_approval`, `question`, `tool_call`,
    /// `command`).
    pub kind: Option<&'a str>,
    /// The agent's `config.metadata` contains this object (`@>`).
    pub metadata: Option<&'a Value>,
}

/// Where a page of the inbox starts: after this item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InboxCursor {
    pub created_at: DateTime<Utc>,
    pub id: Uuid,
}

/// What waits on a person or a client in `project`, oldest first, after
/// `after`, at most `limit` (`holdfast.inbox`): the document
/// `{"items": [...], "total": n}`.
pub async fn inbox(
    client: &impl Prepared,
    project: Uuid,
    filter: &InboxFilter<'_>,
    after: Option<InboxCursor>,
    limit: i64,
) -> Result<Value> {
    let after_at = after.map(|c| c.created_at);
    let after_id = after.map(|c| c.id);
    let limit = i32::try_from(limit).unwrap_or(i32::MAX);
    let row = client
        .query_one(
            "SELECT holdfast.inbox($1, $2, $3, $4, $5, $6)",
            &[
                &project,
                &filter.kind,
                &filter.metadata,
                &after_at,
                &after_id,
                &limit,
            ],
        )
        .await?;
    Ok(row.get(0))
}
