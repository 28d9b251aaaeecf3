-- 0034_budget_approvals.sql — a budget that asks a person before it ends a
-- turn (config.budget.on_exceeded = "ask").
--
-- Adds: approvals of kind 'budget' beside the tool-call ones (no tool call;
-- `budget` holds the {"budget", "limit", "value"} that was reached), at
-- most one pending per agent; and agents.budget_grants, the extra
-- allowances people granted: {"<budget>": {"grants": n, "turn_seq": t}}.
-- Each grant adds one more maximum to that budget's limit; a per-turn
-- budget's grants count only in the turn they were given (turn_seq).
--
-- Why a kind of approval rather than a new table: the people who answer
-- approvals already list and answer them (GET /v1/agents/{id}/approvals,
-- POST /v1/approvals/{id}, approval.requested/answered), and an agent
-- waiting for a decision is the same state whatever the question is.

ALTER TABLE holdfast.approvals
    ADD COLUMN kind text NOT NULL DEFAULT 'tool_call' CHECK (kind IN ('tool_call', 'budget')),
    ADD COLUMN budget jsonb,
    ALTER COLUMN tool_call_id DROP NOT NULL,
    ADD CONSTRAINT approvals_kind_has_subject CHECK (
        CASE kind WHEN 'tool_call' THEN tool_call_id IS NOT NULL AND budget IS NULL
                  ELSE tool_call_id IS NULL AND budget IS NOT NULL END);

CREATE UNIQUE INDEX approvals_one_pending_budget_idx ON holdfast.approvals (agent_id)
    WHERE kind = 'budget' AND status = 'pending';

ALTER TABLE holdfast.agents ADD COLUMN budget_grants jsonb NOT NULL DEFAULT '{}';

-- end_turn_over_budget now says what it did ('failed' | 'asked' |
-- 'released') instead of whether the turn ended.
DROP FUNCTION IF EXISTS holdfast.end_turn_over_budget(uuid, bigint, uuid[]);
