-- 0059_step_context_type.sql — a step's context is one composite type,
-- holdfast.step_context: what load_step_context returns, what
-- claim_agents_with_context returns for each agent it claims, and what a
-- step's commit that keeps the lease returns for the agent's next step
-- (commit_model_step_batch, end_tool_batch).

CREATE TYPE holdfast.step_context AS (
	config jsonb,
	config_version integer,
	turn_open boolean,
	model_attempts integer,
	cancel_requested boolean,
	context_summary text,
	turn_model_steps integer,
	over_budget boolean,
	turn_trace_parent text,
	turn_trace_state text,
	first_attempt_epoch bigint,
	lost_attempt_epoch bigint,
	lost_attempt_started_at timestamptz,
	lost_attempt_ended_at timestamptz,
	messages jsonb,
	tool_calls jsonb,
	pending_inputs jsonb,
	refused_field text,
	refused_message text,
	endpoint text,
	custom_url text,
	base_url text,
	credential_env text,
	sealed_key bytea,
	key_fingerprint text,
	project_id uuid,
	replay boolean
);

-- These return the type now; a function's result type cannot be replaced
-- in place, so the old ones go here and the area's code (steps.sql)
-- defines them again.
DROP FUNCTION IF EXISTS holdfast.load_step_context(uuid);
DROP FUNCTION IF EXISTS holdfast.commit_model_step_batch(holdfast.model_step[], interval);
DROP FUNCTION IF EXISTS holdfast.end_tool_batch(uuid, bigint, uuid, jsonb, boolean, interval);
