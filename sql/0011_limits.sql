-- 0011_limits.sql — limits on runaway agents, cascading cancel, fair claims.
--
-- Issue 16, items 4 and 5: nothing bounded a runaway agent (model steps per
-- turn, tool calls per response, subagent depth and fan-out), subagents kept
-- running after their parent's turn ended, and claims served the oldest
-- *created* agents first (run_after stayed at creation), so busy old agents
-- and big projects starved everyone else.
--
-- Adds:
--   * limit_settings: the operator's maxima (one row; every worker writes
--     its HOLDFAST_MAX_* settings here at start, set_limit_maxima). An
--     agent's `config.limits` may only lower them (validate_config);
--     agent_limit() is the effective value, least(agent's, operator's).
--   * agents.turn_model_steps (model steps committed in the open turn),
--     agents.subagent_depth and agents.root_agent_id (a subagent tree's
--     shape, written by spawn_subagent).
--   * commit_model_step enforces max_model_steps_per_turn and
--     max_tool_calls_per_response at commit: the response that reaches the
--     step limit while asking for tools, or that asks for too many tools, is
--     saved with its tool calls cancelled (none runs) and the turn fails with
--     `turn.failed {"error": {"type": "limit_exceeded", "limit", "value"}}`,
--     so no model call past the limit is ever made, and the model reads the
--     cause in its history next turn.
--   * spawn_subagent enforces max_subagent_depth, max_live_children and
--     max_descendants: an over-limit spawn creates no agent; its call
--     completes with an error result naming the limit (the turn goes on, so
--     the model can do the work itself).
--   * Cascading cancel: a trigger on tool calls cancels the child's turn
--     whenever a waiting spawn_subagent call is cancelled — which every way
--     a turn ends early does (cancel_turn, complete_cancel,
--     end_turn_with_error) — and so on down the tree. The child is locked
--     with SKIP LOCKED (its own turn-ending transaction locks child, then
--     parent; waiting here would deadlock); a child that is busy is queued
--     in subagent_cancels and maintenance_tick cancels it.
--   * Fair claims: an agent's ready time is greatest(run_after,
--     state_changed_at) — when it last became ready, or its durable delay
--     ended, whichever is later — indexed per project. claim_agents takes
--     each project's oldest-ready agent before any project's second, and
--     honours projects.max_running (NULL: no cap; set_project_max_running).
--
-- Lock order, unchanged: an agent row before its tool calls; ancestors
-- after descendants (spawn_subagent locks the tree's root after the parent;
-- the subagent hand-back locks the parent after the child); downward locks
-- (cascading cancel) never wait. claim_agents locks capped project rows
-- (FOR NO KEY UPDATE, in id order, which foreign-key checks do not
-- conflict with) before agent rows; nothing locks a project after an agent.

-- ---------------------------------------------------------------------------
-- Limits
-- ---------------------------------------------------------------------------

-- The operator's maxima (DESIGN §8 style: each an env var of the worker,
-- HOLDFAST_MAX_<NAME>). An agent's config.limits may set lower values;
-- these are also the defaults. One row.
CREATE TABLE holdfast.limit_settings (
    singleton                   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    max_model_steps_per_turn    integer NOT NULL DEFAULT 100 CHECK (max_model_steps_per_turn > 0),
    max_tool_calls_per_response integer NOT NULL DEFAULT 64 CHECK (max_tool_calls_per_response > 0),
    max_subagent_depth          integer NOT NULL DEFAULT 4 CHECK (max_subagent_depth > 0),
    max_live_children           integer NOT NULL DEFAULT 16 CHECK (max_live_children > 0),
    max_descendants             integer NOT NULL DEFAULT 64 CHECK (max_descendants > 0),
    updated_at                  timestamptz NOT NULL DEFAULT holdfast.now()
);
INSERT INTO holdfast.limit_settings DEFAULT VALUES;

-- Model steps committed in the open turn (reset when a turn opens), and a
-- subagent's place in its tree: depth 0 and no root for an agent created
-- by a client; a subagent has its parent's depth + 1 and the tree's root.
ALTER TABLE holdfast.agents
    ADD COLUMN turn_model_steps integer NOT NULL DEFAULT 0,
    ADD COLUMN subagent_depth   integer NOT NULL DEFAULT 0,
    ADD COLUMN root_agent_id    uuid REFERENCES holdfast.agents (id);
-- max_descendants counts a root's tree.
CREATE INDEX agents_root_idx ON holdfast.agents (root_agent_id) WHERE root_agent_id IS NOT NULL;

-- Children whose parent's spawn_subagent call was cancelled while their row
-- was locked by someone else: maintenance_tick cancels their turns. No
-- foreign keys on purpose: a key check would take a share lock on the
-- busy child's row, the very wait this table exists to avoid.
CREATE TABLE holdfast.subagent_cancels (
    tool_call_id   uuid PRIMARY KEY,
    child_agent_id uuid NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT holdfast.now()
);

-- end_turn_with_error (0003), with p_error_fields merged into the
-- turn.failed event's `error` object (limit_exceeded's `limit` and
-- `value`); otherwise unchanged. The caller holds the agent's row lock.
DROP FUNCTION holdfast.end_turn_with_error(uuid, text, text, uuid[], jsonb);

-- ---------------------------------------------------------------------------
-- Subagents: limits at spawn time, cancel down the tree
-- ---------------------------------------------------------------------------


-- ---------------------------------------------------------------------------
-- Fair claims
-- ---------------------------------------------------------------------------

-- When a ready agent became claimable: greatest(run_after,
-- state_changed_at) — the moment it last turned ready, or its durable
-- delay ended, whichever is later. Per project for the fair pass, and
-- overall for the contended leftovers and the delayed-agent wake-up
-- (replacing agents_ready_idx on run_after, which kept creation order).
CREATE INDEX agents_ready_project_idx ON holdfast.agents
    (project_id, greatest(run_after, state_changed_at), id) WHERE state = 'ready';
CREATE INDEX agents_ready_at_idx ON holdfast.agents
    (greatest(run_after, state_changed_at), id) WHERE state = 'ready';
DROP INDEX holdfast.agents_ready_idx;
-- A capped project's running agents are counted at each claim.
CREATE INDEX agents_running_project_idx ON holdfast.agents (project_id) WHERE state = 'running';

-- At most this many of the project's agents run at once (NULL: no cap).
ALTER TABLE holdfast.projects ADD COLUMN max_running integer CHECK (max_running >= 0);
