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

-- The names of the limits, in the order they are documented.
CREATE FUNCTION holdfast.limit_names() RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT ARRAY['max_model_steps_per_turn', 'max_tool_calls_per_response', 'max_subagent_depth',
                 'max_live_children', 'max_descendants']
$$;

-- The operator's maximum for one limit (raises HF422 for an unknown name).
CREATE FUNCTION holdfast.limit_maximum(p_name text)
RETURNS integer LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_max integer;
BEGIN
    IF NOT coalesce(p_name = ANY (holdfast.limit_names()), false) THEN
        PERFORM holdfast.raise('HF422', format('unknown limit %s', p_name), 'limits');
    END IF;
    SELECT (to_jsonb(s) ->> p_name)::integer INTO v_max FROM holdfast.limit_settings s;
    RETURN v_max;
END
$$;

-- The limit an agent with config p_config runs under: its config.limits
-- value, capped by the operator's maximum, or that maximum. Reads only.
CREATE FUNCTION holdfast.agent_limit(p_config jsonb, p_name text)
RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT least(coalesce((p_config #>> ARRAY['limits', p_name])::numeric, m.max), m.max)::integer
      FROM (SELECT holdfast.limit_maximum(p_name) AS max) m
$$;

-- Write the operator's maxima (workers call this at start with their
-- HOLDFAST_MAX_* settings; a DBA may too). Locks the settings row. Agents
-- configured above a lowered maximum run at the maximum. Raises HF422 for
-- a value that is not positive.
CREATE FUNCTION holdfast.set_limit_maxima(
    p_max_model_steps_per_turn integer, p_max_tool_calls_per_response integer,
    p_max_subagent_depth integer, p_max_live_children integer, p_max_descendants integer)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF least(p_max_model_steps_per_turn, p_max_tool_calls_per_response, p_max_subagent_depth,
             p_max_live_children, p_max_descendants) <= 0
       OR num_nulls(p_max_model_steps_per_turn, p_max_tool_calls_per_response, p_max_subagent_depth,
                    p_max_live_children, p_max_descendants) > 0 THEN
        PERFORM holdfast.raise('HF422', 'every limit maximum must be a positive integer', 'limits');
    END IF;
    UPDATE holdfast.limit_settings
       SET max_model_steps_per_turn = p_max_model_steps_per_turn,
           max_tool_calls_per_response = p_max_tool_calls_per_response,
           max_subagent_depth = p_max_subagent_depth,
           max_live_children = p_max_live_children,
           max_descendants = p_max_descendants,
           updated_at = holdfast.now()
     WHERE (max_model_steps_per_turn, max_tool_calls_per_response, max_subagent_depth,
            max_live_children, max_descendants)
           IS DISTINCT FROM (p_max_model_steps_per_turn, p_max_tool_calls_per_response,
                             p_max_subagent_depth, p_max_live_children, p_max_descendants);
END
$$;

-- validate_config (0001) with `limits`: an object whose keys are limit
-- names and whose values are positive integers no larger than the
-- operator's maximum. Raises HF422 naming the field (`limits.<name>`).
CREATE OR REPLACE FUNCTION holdfast.validate_config(p_config jsonb)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_tool jsonb;
    v_i integer := 0;
    v_names text[] := '{}';
    v_name text;
    v_value jsonb;
    v_max integer;
BEGIN
    IF p_config IS NULL OR jsonb_typeof(p_config) <> 'object' THEN
        PERFORM holdfast.raise('HF422', 'config must be a JSON object', 'config');
    END IF;
    IF jsonb_typeof(p_config -> 'model') IS DISTINCT FROM 'object' THEN
        PERFORM holdfast.raise('HF422', 'model must be an object', 'model');
    END IF;
    IF NOT coalesce(p_config #>> '{model,provider}' IN ('anthropic', 'openai'), false)
       OR jsonb_typeof(p_config #> '{model,provider}') <> 'string' THEN
        PERFORM holdfast.raise('HF422', 'model.provider must be "anthropic" or "openai"', 'model.provider');
    END IF;
    IF jsonb_typeof(p_config #> '{model,name}') IS DISTINCT FROM 'string'
       OR p_config #>> '{model,name}' = '' THEN
        PERFORM holdfast.raise('HF422', 'model.name must be a non-empty string', 'model.name');
    END IF;
    IF p_config #> '{model,base_url}' IS NOT NULL
       AND (jsonb_typeof(p_config #> '{model,base_url}') <> 'string'
            OR p_config #>> '{model,base_url}' !~ '^https?://') THEN
        PERFORM holdfast.raise('HF422', 'model.base_url must be an http(s) URL', 'model.base_url');
    END IF;
    IF p_config #> '{model,max_tokens}' IS NOT NULL
       AND (jsonb_typeof(p_config #> '{model,max_tokens}') <> 'number'
            OR (p_config #>> '{model,max_tokens}')::numeric <= 0
            OR (p_config #>> '{model,max_tokens}')::numeric <> trunc((p_config #>> '{model,max_tokens}')::numeric)) THEN
        PERFORM holdfast.raise('HF422', 'model.max_tokens must be a positive integer', 'model.max_tokens');
    END IF;
    IF p_config ? 'system' AND jsonb_typeof(p_config -> 'system') <> 'string' THEN
        PERFORM holdfast.raise('HF422', 'system must be a string', 'system');
    END IF;
    IF p_config ? 'tools' THEN
        IF jsonb_typeof(p_config -> 'tools') <> 'array' THEN
            PERFORM holdfast.raise('HF422', 'tools must be an array', 'tools');
        END IF;
        FOR v_tool IN SELECT value FROM jsonb_array_elements(p_config -> 'tools') LOOP
            IF jsonb_typeof(v_tool) <> 'object' THEN
                PERFORM holdfast.raise('HF422', 'each tool must be an object', format('tools[%s]', v_i));
            END IF;
            IF jsonb_typeof(v_tool -> 'type') IS DISTINCT FROM 'string' THEN
                PERFORM holdfast.raise('HF422', 'tool type must be a string', format('tools[%s].type', v_i));
            END IF;
            v_name := coalesce(v_tool ->> 'name', v_tool ->> 'type');
            IF v_tool ? 'name' AND (jsonb_typeof(v_tool -> 'name') <> 'string'
                                   OR v_name !~ '^[a-zA-Z0-9_-]{1,64}$') THEN
                PERFORM holdfast.raise('HF422', 'tool name must match ^[a-zA-Z0-9_-]{1,64}$', format('tools[%s].name', v_i));
            END IF;
            IF v_name = ANY (v_names) THEN
                PERFORM holdfast.raise('HF422', format('duplicate tool name "%s"', v_name), format('tools[%s].name', v_i));
            END IF;
            v_names := v_names || v_name;
            v_i := v_i + 1;
        END LOOP;
    END IF;
    IF p_config ? 'approvals' THEN
        IF jsonb_typeof(p_config -> 'approvals') <> 'object'
           OR (p_config -> 'approvals' ? 'require_for'
               AND jsonb_typeof(p_config #> '{approvals,require_for}') <> 'array') THEN
            PERFORM holdfast.raise('HF422', 'approvals.require_for must be an array of tool names', 'approvals.require_for');
        END IF;
        IF EXISTS (SELECT 1 FROM jsonb_array_elements(coalesce(p_config #> '{approvals,require_for}', '[]')) e
                    WHERE jsonb_typeof(e.value) <> 'string') THEN
            PERFORM holdfast.raise('HF422', 'approvals.require_for must be an array of tool names', 'approvals.require_for');
        END IF;
    END IF;
    IF p_config ? 'metadata' AND jsonb_typeof(p_config -> 'metadata') <> 'object' THEN
        PERFORM holdfast.raise('HF422', 'metadata must be an object', 'metadata');
    END IF;
    IF p_config ? 'limits' THEN
        IF jsonb_typeof(p_config -> 'limits') <> 'object' THEN
            PERFORM holdfast.raise('HF422', 'limits must be an object', 'limits');
        END IF;
        FOR v_name, v_value IN SELECT key, value FROM jsonb_each(p_config -> 'limits') ORDER BY key LOOP
            IF NOT v_name = ANY (holdfast.limit_names()) THEN
                PERFORM holdfast.raise('HF422', format('unknown limit; expected one of: %s',
                    array_to_string(holdfast.limit_names(), ', ')), 'limits.' || v_name);
            END IF;
            IF jsonb_typeof(v_value) <> 'number' OR (v_value #>> '{}')::numeric <= 0
               OR (v_value #>> '{}')::numeric <> trunc((v_value #>> '{}')::numeric) THEN
                PERFORM holdfast.raise('HF422', format('limits.%s must be a positive integer', v_name),
                    'limits.' || v_name);
            END IF;
            v_max := holdfast.limit_maximum(v_name);
            IF (v_value #>> '{}')::numeric > v_max THEN
                PERFORM holdfast.raise('HF422', format('limits.%s must be at most %s (the operator''s maximum)',
                    v_name, v_max), 'limits.' || v_name);
            END IF;
        END LOOP;
    END IF;
END
$$;

-- end_turn_with_error (0003), with p_error_fields merged into the
-- turn.failed event's `error` object (limit_exceeded's `limit` and
-- `value`); otherwise unchanged. The caller holds the agent's row lock.
DROP FUNCTION holdfast.end_turn_with_error(uuid, text, text, uuid[], jsonb);
CREATE FUNCTION holdfast.end_turn_with_error(
    p_agent uuid, p_error_type text, p_message text, p_input_ids uuid[], p_detail jsonb DEFAULT NULL,
    p_error_fields jsonb DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_input holdfast.inputs;
BEGIN
    FOR v_input IN
        SELECT * FROM holdfast.inputs
         WHERE agent_id = p_agent AND id = ANY (coalesce(p_input_ids, '{}')) AND consumed_at IS NULL
         ORDER BY created_at, id
    LOOP
        PERFORM holdfast.append_input_message(v_input, NULL);
    END LOOP;
    UPDATE holdfast.agents SET last_message_seq = last_message_seq + 1 WHERE id = p_agent;
    INSERT INTO holdfast.messages (agent_id, seq, role, content)
    SELECT p_agent, a.last_message_seq, 'assistant',
           jsonb_build_array(jsonb_build_object('type', 'text',
               'text', format('[holdfast] The turn failed: %s: %s', p_error_type, p_message)))
      FROM holdfast.agents a WHERE a.id = p_agent;
    UPDATE holdfast.tool_calls SET status = 'cancelled'
     WHERE agent_id = p_agent AND status IN ('pending', 'awaiting_approval', 'waiting');
    UPDATE holdfast.agents SET turn_open = false, model_attempts = 0 WHERE id = p_agent;
    PERFORM holdfast.append_event(p_agent, 'turn.failed', jsonb_build_object(
        'error', jsonb_build_object('type', p_error_type, 'message', p_message)
                 || coalesce(p_error_fields, '{}')
                 || CASE WHEN p_detail IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('detail', p_detail) END));
    PERFORM holdfast.settle_agent(p_agent);
END
$$;

-- settle_agent_with (0009), now also resetting turn_model_steps when it
-- opens a turn (as it resets model_attempts). Otherwise unchanged.
CREATE OR REPLACE FUNCTION holdfast.settle_agent_with(
    p_agent uuid, p_types text[], p_data jsonb[], p_run_after timestamptz)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_state text;
    v_turn_open boolean;
    v_types text[] := coalesce(p_types, '{}');
    v_data jsonb[] := coalesce(p_data, '{}');
    v_open_turn boolean := false;
    v_last_seq bigint;
BEGIN
    SELECT state, turn_open INTO v_state, v_turn_open FROM holdfast.agents WHERE id = p_agent;
    IF v_state = 'archived' THEN
        IF cardinality(v_types) > 0 OR p_run_after IS NOT NULL THEN
            UPDATE holdfast.agents
               SET run_after = coalesce(p_run_after, run_after),
                   last_event_seq = last_event_seq + cardinality(v_types),
                   last_event_at = CASE WHEN cardinality(v_types) > 0 THEN holdfast.now() ELSE last_event_at END
             WHERE id = p_agent
            RETURNING last_event_seq INTO v_last_seq;
            PERFORM holdfast.insert_reserved_events(p_agent, v_last_seq, v_types, v_data);
        END IF;
        RETURN 'archived';
    END IF;
    v_state := holdfast.decide_state(p_agent, v_turn_open, false, false, '{}');
    IF v_state = 'new_turn' THEN
        v_state := 'ready';
        v_open_turn := true;
        v_types := array_append(v_types, 'turn.started');
        v_data := array_append(v_data, '{}'::jsonb);
    END IF;
    UPDATE holdfast.agents
       SET state = v_state,
           lease_owner = NULL, lease_expires_at = NULL, lease_pid = NULL, lease_backend_start = NULL,
           updated_at = holdfast.now(),
           turn_open = turn_open OR v_open_turn,
           model_attempts = CASE WHEN v_open_turn THEN 0 ELSE model_attempts END,
           turn_model_steps = CASE WHEN v_open_turn THEN 0 ELSE turn_model_steps END,
           run_after = coalesce(p_run_after, run_after),
           last_event_seq = last_event_seq + cardinality(v_types),
           last_event_at = CASE WHEN cardinality(v_types) > 0 THEN holdfast.now() ELSE last_event_at END
     WHERE id = p_agent
    RETURNING last_event_seq INTO v_last_seq;
    PERFORM holdfast.insert_reserved_events(p_agent, v_last_seq, v_types, v_data);
    RETURN v_state;
END
$$;

-- commit_model_step (0009), now enforcing the agent's model limits. It
-- counts the step in turn_model_steps (reset when the commit opens a new
-- turn). A response with tool calls that is the turn's
-- max_model_steps_per_turn-th step (its results would need one more model
-- call), or that has more than max_tool_calls_per_response calls, is saved
-- with every call `cancelled` (none runs, no wait opens) and the turn ends
-- with limit_exceeded (end_turn_with_error: the cause goes into the
-- history, `turn.failed {"error": {"type", "message", "limit", "value"}}`).
-- Otherwise unchanged. Fenced (HF001); HF422 for a malformed message or
-- tool call.
CREATE OR REPLACE FUNCTION holdfast.commit_model_step(
    p_agent uuid, p_epoch bigint, p_input_ids uuid[], p_message jsonb,
    p_tool_calls jsonb, p_usage jsonb, p_stop_reason text)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_agent holdfast.agents;
    v_tool_calls jsonb := coalesce(p_tool_calls, '[]');
    v_n_calls integer;
    v_call jsonb;
    v_require text[] := '{}';
    v_statuses text[] := '{}';
    v_status text;
    v_opens_waits boolean := false;
    v_limit text;
    v_limit_value integer;
    v_input_ids uuid[] := '{}';
    v_input_contents jsonb[] := '{}';
    v_n_inputs integer := 0;
    v_turn_open boolean;
    v_state text;
    v_new_turn boolean := false;
    v_step_id uuid;
    v_step_seq bigint;
    v_message_seq bigint;
    v_event_seq bigint;
    v_calls jsonb := '[]';
    v_types text[];
    v_data jsonb[];
BEGIN
    v_agent := holdfast.lock_leased_agent(p_agent, p_epoch);
    IF jsonb_typeof(p_message) IS DISTINCT FROM 'array' THEN
        PERFORM holdfast.raise('HF422', 'message must be an array of content blocks', 'message');
    END IF;
    IF jsonb_typeof(v_tool_calls) <> 'array' THEN
        PERFORM holdfast.raise('HF422', 'tool_calls must be an array', 'tool_calls');
    END IF;

    -- Validate the calls and decide their statuses before writing anything.
    v_n_calls := jsonb_array_length(v_tool_calls);
    IF v_n_calls > 0 THEN
        v_require := ARRAY(SELECT jsonb_array_elements_text(coalesce(v_agent.config #> '{approvals,require_for}', '[]')));
    END IF;
    FOR v_pos IN 0 .. v_n_calls - 1 LOOP
        v_call := v_tool_calls -> v_pos;
        IF jsonb_typeof(v_call -> 'name') IS DISTINCT FROM 'string'
           OR jsonb_typeof(v_call -> 'provider_id') IS DISTINCT FROM 'string' THEN
            PERFORM holdfast.raise('HF422', 'each tool call needs string name and provider_id', format('tool_calls[%s]', v_pos));
        END IF;
        IF NOT coalesce(v_call ->> 'kind' IN ('external', 'internal', 'custom', 'question', 'command'), false) THEN
            PERFORM holdfast.raise('HF422', 'tool call kind must be external, internal, custom, question or command', format('tool_calls[%s].kind', v_pos));
        END IF;
        v_status := CASE
            WHEN v_call ->> 'name' = ANY (v_require) THEN 'awaiting_approval'
            WHEN v_call ->> 'kind' IN ('custom', 'question', 'command') THEN 'waiting'
            ELSE 'pending' END;
        v_statuses := array_append(v_statuses, v_status);
        IF v_status = 'awaiting_approval'
           OR (v_status = 'waiting' AND v_call ->> 'kind' IN ('question', 'command')) THEN
            v_opens_waits := true;
        END IF;
    END LOOP;

    -- The limits: a response whose calls would need a model call past the
    -- step limit, or with too many calls, keeps its calls only as cancelled.
    IF v_n_calls > 0 THEN
        IF v_n_calls > holdfast.agent_limit(v_agent.config, 'max_tool_calls_per_response') THEN
            v_limit := 'max_tool_calls_per_response';
        ELSIF v_agent.turn_model_steps + 1 >= holdfast.agent_limit(v_agent.config, 'max_model_steps_per_turn') THEN
            v_limit := 'max_model_steps_per_turn';
        END IF;
        IF v_limit IS NOT NULL THEN
            v_limit_value := holdfast.agent_limit(v_agent.config, v_limit);
            v_statuses := array_fill('cancelled'::text, ARRAY[v_n_calls]);
            v_opens_waits := false;
        END IF;
    END IF;

    -- The inputs the call saw (still unconsumed), in arrival order.
    IF coalesce(cardinality(p_input_ids), 0) > 0 THEN
        SELECT coalesce(array_agg(i.id ORDER BY i.created_at, i.id), '{}'),
               coalesce(array_agg(i.content ORDER BY i.created_at, i.id), '{}')
          INTO v_input_ids, v_input_contents
          FROM holdfast.inputs i
         WHERE i.agent_id = p_agent AND i.id = ANY (p_input_ids) AND i.consumed_at IS NULL;
        v_n_inputs := cardinality(v_input_ids);
    END IF;

    -- No tool calls: the model has answered; the turn is complete.
    v_turn_open := CASE WHEN v_n_calls = 0 THEN false ELSE v_agent.turn_open END;
    v_types := ARRAY['model.response'];
    IF v_opens_waits OR v_limit IS NOT NULL THEN
        UPDATE holdfast.agents
           SET last_step_seq = last_step_seq + 1,
               last_message_seq = last_message_seq + v_n_inputs + 1,
               last_event_seq = last_event_seq + 1, last_event_at = holdfast.now(),
               model_attempts = 0,
               turn_model_steps = turn_model_steps + 1
         WHERE id = p_agent
        RETURNING last_step_seq, last_message_seq, last_event_seq
             INTO v_step_seq, v_message_seq, v_event_seq;
    ELSE
        v_state := holdfast.decide_state(p_agent, v_turn_open,
            'pending' = ANY (v_statuses),
            'waiting' = ANY (v_statuses) OR 'awaiting_approval' = ANY (v_statuses),
            v_input_ids);
        IF v_state = 'new_turn' THEN
            v_state := 'ready';
            v_new_turn := true;
        END IF;
        v_types := v_types || array_fill('tool_call.created'::text, ARRAY[v_n_calls]);
        IF v_n_calls = 0 THEN
            v_types := array_append(v_types, 'turn.completed');
        END IF;
        IF v_new_turn THEN
            v_types := array_append(v_types, 'turn.started');
        END IF;
        UPDATE holdfast.agents
           SET last_step_seq = last_step_seq + 1,
               last_message_seq = last_message_seq + v_n_inputs + 1,
               last_event_seq = last_event_seq + cardinality(v_types), last_event_at = holdfast.now(),
               model_attempts = 0,
               turn_model_steps = CASE WHEN v_new_turn THEN 0 ELSE turn_model_steps + 1 END,
               turn_open = v_turn_open OR v_new_turn,
               state = v_state,
               lease_owner = NULL, lease_expires_at = NULL, lease_pid = NULL, lease_backend_start = NULL,
               updated_at = holdfast.now()
         WHERE id = p_agent
        RETURNING last_step_seq, last_message_seq, last_event_seq
             INTO v_step_seq, v_message_seq, v_event_seq;
    END IF;

    INSERT INTO holdfast.steps (agent_id, step_seq, kind, epoch)
    VALUES (p_agent, v_step_seq, 'model', p_epoch) RETURNING id INTO v_step_id;

    -- The inputs become user messages, then the assistant's message.
    INSERT INTO holdfast.messages (agent_id, seq, role, content, step_id, input_id)
    SELECT p_agent, v_message_seq - v_n_inputs - 1 + m.ord, m.role, m.content, v_step_id, m.input_id
      FROM (SELECT i.ord, 'user' AS role,
                   CASE WHEN jsonb_typeof(i.content) = 'string'
                        THEN jsonb_build_array(jsonb_build_object('type', 'text', 'text', i.content #>> '{}'))
                        ELSE i.content END AS content,
                   i.id AS input_id
              FROM unnest(v_input_ids, v_input_contents) WITH ORDINALITY AS i (id, content, ord)
            UNION ALL
            SELECT v_n_inputs + 1, 'assistant', p_message, NULL) m
     ORDER BY m.ord;
    IF v_n_inputs > 0 THEN
        UPDATE holdfast.inputs SET consumed_at = holdfast.now() WHERE id = ANY (v_input_ids);
    END IF;

    IF v_n_calls > 0 THEN
        WITH inserted AS (
            INSERT INTO holdfast.tool_calls (agent_id, step_id, position, provider_id, name, input, kind, status)
            SELECT p_agent, v_step_id, (c.ord - 1)::integer, c.value ->> 'provider_id', c.value ->> 'name',
                   coalesce(c.value -> 'input', '{}'), c.value ->> 'kind', v_statuses[c.ord]
              FROM jsonb_array_elements(v_tool_calls) WITH ORDINALITY AS c (value, ord)
             ORDER BY c.ord
            RETURNING id, position, provider_id, name, input, kind, status
        )
        SELECT jsonb_agg(jsonb_build_object('id', t.id, 'provider_id', t.provider_id, 'name', t.name,
                                            'input', t.input, 'kind', t.kind, 'status', t.status)
                         ORDER BY t.position)
          INTO v_calls
          FROM inserted t;
    END IF;

    v_data := ARRAY[jsonb_build_object(
        'step_id', v_step_id, 'message', p_message, 'tool_calls', v_calls,
        'usage', coalesce(p_usage, '{}'), 'stop_reason', p_stop_reason)];
    IF NOT (v_opens_waits OR v_limit IS NOT NULL) THEN
        v_data := v_data || ARRAY(SELECT c.value FROM jsonb_array_elements(v_calls) WITH ORDINALITY AS c (value, ord)
                                   ORDER BY c.ord);
        IF v_n_calls = 0 THEN
            v_data := array_append(v_data, jsonb_build_object('step_id', v_step_id, 'stop_reason', p_stop_reason));
        END IF;
        IF v_new_turn THEN
            v_data := array_append(v_data, '{}'::jsonb);
        END IF;
    END IF;
    PERFORM holdfast.insert_reserved_events(p_agent, v_event_seq, v_types, v_data);

    IF v_opens_waits OR v_limit IS NOT NULL THEN
        FOR v_call IN SELECT c.value FROM jsonb_array_elements(v_calls) WITH ORDINALITY AS c (value, ord)
                       ORDER BY c.ord LOOP
            PERFORM holdfast.append_event(p_agent, 'tool_call.created', v_call);
        END LOOP;
        IF v_limit IS NULL THEN
            PERFORM holdfast.settle_agent(p_agent);
        ELSE
            PERFORM holdfast.end_turn_with_error(p_agent, 'limit_exceeded',
                CASE v_limit
                    WHEN 'max_tool_calls_per_response' THEN format(
                        'the response asked for %s tool calls; this agent may make at most %s per response (limits.%s). None of them ran.',
                        v_n_calls, v_limit_value, v_limit)
                    ELSE format(
                        'this turn reached %s model steps, the most this agent may take in one turn (limits.%s); the tool calls of the last response did not run.',
                        v_limit_value, v_limit) END,
                NULL, NULL, jsonb_build_object('limit', v_limit, 'value', v_limit_value));
        END IF;
    END IF;
    RETURN v_step_id;
END
$$;

-- ---------------------------------------------------------------------------
-- Subagents: limits at spawn time, cancel down the tree
-- ---------------------------------------------------------------------------

-- spawn_subagent (0005), now within the tree's limits: the child's depth
-- (parent's + 1) at most the root's max_subagent_depth; the parent's live
-- children (its spawn calls still waiting on a child) fewer than its
-- max_live_children; the root's tree smaller than its max_descendants. An
-- over-limit spawn creates nothing: the call completes with an error result
-- (commit_tool_result) `{"type": "limit_exceeded", "limit", "value",
-- "message"}` and NULL is returned. Otherwise as before: the child, its
-- first input and the parent's waiting call in one transaction; returns the
-- child's id. Locks the parent (fenced, HF001), its call, then the tree's
-- root (descendants are counted under the root's lock, so concurrent spawns
-- in one tree cannot overshoot). Raises HF404, HF409, HF422 as before.
CREATE OR REPLACE FUNCTION holdfast.spawn_subagent(
    p_agent uuid, p_epoch bigint, p_tool_call uuid, p_config jsonb, p_prompt text)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_parent holdfast.agents;
    v_root holdfast.agents;
    v_call holdfast.tool_calls;
    v_child uuid;
    v_limit text;
    v_value integer;
    v_message text;
BEGIN
    v_parent := holdfast.lock_leased_agent(p_agent, p_epoch);
    SELECT * INTO v_call FROM holdfast.tool_calls WHERE id = p_tool_call AND agent_id = p_agent FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('tool call %s not found', p_tool_call));
    END IF;
    IF v_call.status <> 'pending' THEN
        PERFORM holdfast.raise('HF409', format('tool call %s is %s', p_tool_call, v_call.status));
    END IF;
    IF p_prompt IS NULL OR btrim(p_prompt) = '' THEN
        PERFORM holdfast.raise('HF422', 'prompt must be a non-empty string', 'prompt');
    END IF;
    IF v_parent.root_agent_id IS NULL THEN
        v_root := v_parent;
    ELSE
        v_root := holdfast.lock_agent(v_parent.root_agent_id);
    END IF;

    v_value := holdfast.agent_limit(v_root.config, 'max_subagent_depth');
    IF v_parent.subagent_depth + 1 > v_value THEN
        v_limit := 'max_subagent_depth';
        v_message := format('this agent is at subagent depth %s; its tree may be at most %s deep',
                            v_parent.subagent_depth, v_value);
    END IF;
    IF v_limit IS NULL THEN
        v_value := holdfast.agent_limit(v_parent.config, 'max_live_children');
        IF (SELECT count(*) FROM holdfast.tool_calls t
             WHERE t.agent_id = p_agent AND t.status = 'waiting' AND t.child_agent_id IS NOT NULL) >= v_value THEN
            v_limit := 'max_live_children';
            v_message := format('this agent already has %s subagents running, the most it may have at once', v_value);
        END IF;
    END IF;
    IF v_limit IS NULL THEN
        v_value := holdfast.agent_limit(v_root.config, 'max_descendants');
        IF (SELECT count(*) FROM holdfast.agents d WHERE d.root_agent_id = v_root.id) >= v_value THEN
            v_limit := 'max_descendants';
            v_message := format('this agent''s tree already has %s subagents, the most it may have', v_value);
        END IF;
    END IF;
    IF v_limit IS NOT NULL THEN
        PERFORM holdfast.commit_tool_result(p_agent, p_epoch, p_tool_call, jsonb_build_object(
            'type', 'limit_exceeded', 'limit', v_limit, 'value', v_value,
            'message', format('The subagent was not started: %s (limits.%s).', v_message, v_limit)), true);
        RETURN NULL;
    END IF;

    v_child := holdfast.create_agent(v_parent.project_id, p_config);
    UPDATE holdfast.agents
       SET parent_tool_call_id = p_tool_call, subagent_depth = v_parent.subagent_depth + 1,
           root_agent_id = v_root.id
     WHERE id = v_child;
    UPDATE holdfast.tool_calls SET status = 'waiting', child_agent_id = v_child WHERE id = p_tool_call;
    PERFORM holdfast.append_event(p_agent, 'subagent.started', jsonb_build_object(
        'tool_call_id', p_tool_call, 'child_agent_id', v_child, 'prompt', p_prompt));
    PERFORM holdfast.create_input(v_child, to_jsonb(p_prompt), NULL);
    RETURN v_child;
END
$$;

-- End a locked agent's current turn the way a client's cancel does: a
-- running agent gets a cancel request (its worker stops the step and calls
-- complete_cancel; holdfast_cancel is notified), a ready or waiting one is
-- cancelled at once (cancel_turn, settle_agent). Returns 'requested',
-- 'cancelled', or NULL for an idle or archived agent (no turn). The caller
-- holds the agent's row lock.
CREATE FUNCTION holdfast.cancel_locked_turn(p_agent holdfast.agents)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    IF p_agent.state IN ('idle', 'archived') THEN
        RETURN NULL;
    END IF;
    IF p_agent.state = 'running' THEN
        UPDATE holdfast.agents SET cancel_requested_at = coalesce(cancel_requested_at, holdfast.now())
         WHERE id = p_agent.id;
        PERFORM pg_notify('holdfast_cancel', p_agent.id::text);
        RETURN 'requested';
    END IF;
    PERFORM holdfast.cancel_turn(p_agent.id);
    PERFORM holdfast.settle_agent(p_agent.id);
    RETURN 'cancelled';
END
$$;

-- request_cancel (0002), its body now cancel_locked_turn (shared with the
-- cascade). Locks the agent row. Raises HF404, HF409 (idle or archived: no
-- turn to cancel). Returns 'requested' or 'cancelled' as before.
CREATE OR REPLACE FUNCTION holdfast.request_cancel(p_agent uuid)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_agent holdfast.agents;
BEGIN
    v_agent := holdfast.lock_agent(p_agent);
    IF v_agent.state IN ('idle', 'archived') THEN
        PERFORM holdfast.raise('HF409', format('agent %s is %s: no turn to cancel', p_agent, v_agent.state));
    END IF;
    RETURN holdfast.cancel_locked_turn(v_agent);
END
$$;

-- A spawn_subagent call was cancelled (its parent's turn was cancelled or
-- failed): cancel the child's turn too, and through the child's own
-- cancelled calls, its children's. The child's row is taken with SKIP
-- LOCKED: its holder may be the child's own turn-ending transaction, which
-- waits for this parent's lock (a wait here would deadlock); a busy child
-- is queued in subagent_cancels and maintenance_tick finishes the job.
-- The child's turn.cancelled finds its parent's call already cancelled, so
-- nothing is handed back.
CREATE FUNCTION holdfast.tg_tool_calls_cancel_subagent() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_child holdfast.agents;
BEGIN
    SELECT * INTO v_child FROM holdfast.agents WHERE id = NEW.child_agent_id FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        INSERT INTO holdfast.subagent_cancels (tool_call_id, child_agent_id)
        VALUES (NEW.id, NEW.child_agent_id) ON CONFLICT DO NOTHING;
        RETURN NULL;
    END IF;
    PERFORM holdfast.cancel_locked_turn(v_child);
    RETURN NULL;
END
$$;
CREATE TRIGGER _400_cancel_subagent AFTER UPDATE OF status ON holdfast.tool_calls
    FOR EACH ROW WHEN (NEW.status = 'cancelled' AND OLD.status = 'waiting' AND NEW.child_agent_id IS NOT NULL)
    EXECUTE FUNCTION holdfast.tg_tool_calls_cancel_subagent();

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

-- Set (or, with NULL, clear) a project's cap on agents running at once.
-- Agents already running keep their leases; the cap applies to claims.
-- Raises HF404 (no such project), HF422 (negative cap).
CREATE FUNCTION holdfast.set_project_max_running(p_project_name text, p_max_running integer)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_max_running < 0 THEN
        PERFORM holdfast.raise('HF422', 'max_running must be 0 or more (NULL: no cap)', 'max_running');
    END IF;
    UPDATE holdfast.projects SET max_running = p_max_running WHERE name = p_project_name;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('project %s not found', p_project_name));
    END IF;
END
$$;

-- claim_agents (0009), fair: up to p_max due ready agents, round-robin over
-- projects — each project's oldest-ready agent (by ready time, above)
-- before any project's second, and so on — within each project's
-- max_running. Same contract and lease writes as before.
--   1. The projects with due agents, oldest head first: a skip scan of
--      agents_ready_project_idx, one index probe per project with ready
--      agents; at most p_max of them can take part in one batch.
--   2. Capped projects among them are locked (FOR NO KEY UPDATE, id order),
--      so two claimers cannot both fill a project's last slot; their
--      running agents are counted after the lock.
--   3. Per project, its oldest due agents (up to p_max, or what its cap
--      leaves), ranked; taken in (rank, ready time) order, SKIP LOCKED.
--   4. When concurrent claimers held some of those, the rest of the batch
--      comes from the overall oldest-ready uncapped agents (SKIP LOCKED
--      scans past held rows, as the pre-0011 claim did), so claimers never
--      starve each other.
-- Cost: an index probe per project with ready agents plus p_max rows per
-- chosen project; flat in idle and archived agents.
CREATE OR REPLACE FUNCTION holdfast.claim_agents(p_worker text, p_max integer, p_ttl interval)
RETURNS TABLE (agent_id uuid, epoch bigint) LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := holdfast.now();
    v_max integer := greatest(coalesce(p_max, 0), 0);
    v_backend_start timestamptz;
    v_projects uuid[];
    v_ids uuid[];
BEGIN
    IF p_worker IS NULL OR p_worker = '' THEN
        PERFORM holdfast.raise('HF422', 'worker name must not be empty', 'worker');
    END IF;
    IF p_ttl IS NULL OR p_ttl <= '0'::interval THEN
        PERFORM holdfast.raise('HF422', 'ttl must be positive', 'ttl');
    END IF;
    IF v_max = 0 THEN
        RETURN;
    END IF;
    SELECT s.backend_start INTO v_backend_start FROM pg_stat_get_activity(pg_backend_pid()) s;

    WITH RECURSIVE heads (project_id, ready_at) AS (
        (SELECT a.project_id, greatest(a.run_after, a.state_changed_at)
           FROM holdfast.agents a
          WHERE a.state = 'ready'
          ORDER BY a.project_id, greatest(a.run_after, a.state_changed_at), a.id
          LIMIT 1)
        UNION ALL
        SELECT n.project_id, n.ready_at
          FROM heads h
          CROSS JOIN LATERAL (
              SELECT a.project_id, greatest(a.run_after, a.state_changed_at) AS ready_at
                FROM holdfast.agents a
               WHERE a.state = 'ready' AND a.project_id > h.project_id
               ORDER BY a.project_id, greatest(a.run_after, a.state_changed_at), a.id
               LIMIT 1) n
    )
    SELECT array_agg(d.project_id ORDER BY d.ready_at, d.project_id) INTO v_projects
      FROM (SELECT h.project_id, h.ready_at FROM heads h
             WHERE h.ready_at <= v_now
             ORDER BY h.ready_at, h.project_id
             LIMIT v_max) d;
    IF v_projects IS NULL THEN
        RETURN;
    END IF;

    PERFORM 1 FROM holdfast.projects p
      WHERE p.id = ANY (v_projects) AND p.max_running IS NOT NULL
      ORDER BY p.id
        FOR NO KEY UPDATE;

    WITH quotas AS (
        SELECT p.id AS project_id,
               CASE WHEN p.max_running IS NULL THEN v_max
                    ELSE greatest(0, least(v_max, p.max_running - (
                        SELECT count(*) FROM holdfast.agents r
                         WHERE r.project_id = p.id AND r.state = 'running')))::integer
               END AS quota
          FROM holdfast.projects p
         WHERE p.id = ANY (v_projects)
    ), ranked AS (
        SELECT c.id, c.ready_at, c.rank
          FROM quotas q
          CROSS JOIN LATERAL (
              SELECT a.id, greatest(a.run_after, a.state_changed_at) AS ready_at,
                     row_number() OVER (ORDER BY greatest(a.run_after, a.state_changed_at), a.id) AS rank
                FROM holdfast.agents a
               WHERE a.project_id = q.project_id AND a.state = 'ready'
                 AND greatest(a.run_after, a.state_changed_at) <= v_now
               ORDER BY greatest(a.run_after, a.state_changed_at), a.id
               LIMIT q.quota) c
    ), locked AS (
        SELECT a.id FROM ranked r JOIN holdfast.agents a ON a.id = r.id
         WHERE a.state = 'ready' AND greatest(a.run_after, a.state_changed_at) <= v_now
         ORDER BY r.rank, r.ready_at, r.id
         LIMIT v_max
           FOR UPDATE OF a SKIP LOCKED
    )
    SELECT coalesce(array_agg(l.id), '{}') INTO v_ids FROM locked l;

    IF cardinality(v_ids) < v_max THEN
        v_ids := v_ids || ARRAY(
            SELECT a.id FROM holdfast.agents a
             WHERE a.state = 'ready' AND greatest(a.run_after, a.state_changed_at) <= v_now
               AND a.id <> ALL (v_ids)
               AND NOT EXISTS (SELECT 1 FROM holdfast.projects p
                                WHERE p.id = a.project_id AND p.max_running IS NOT NULL)
             ORDER BY greatest(a.run_after, a.state_changed_at), a.id
             LIMIT v_max - cardinality(v_ids)
               FOR UPDATE OF a SKIP LOCKED);
    END IF;

    RETURN QUERY
    UPDATE holdfast.agents a
       SET state = 'running',
           lease_owner = p_worker,
           lease_epoch = a.lease_epoch + 1,
           lease_expires_at = v_now + p_ttl,
           lease_pid = pg_backend_pid(),
           lease_backend_start = v_backend_start,
           updated_at = v_now
     WHERE a.id = ANY (v_ids)
    RETURNING a.id, a.lease_epoch;
END
$$;

-- maintenance_tick (0001) with a fourth sweep, and the delayed-agent
-- wake-up reading agents_ready_at_idx (agents_ready_idx is gone):
--   1. release leases past expiry;
--   2. release leases whose claiming session is gone;
--   3. wake workers when delayed agents (run_after) have come due;
--   4. cancel the turns of subagents whose parent's call was cancelled
--      while they were busy (subagent_cancels; child rows SKIP LOCKED).
-- Returns counts as JSON, e.g. {"expired": 1, "session_gone": 0, "woken": 0,
-- "subagents_cancelled": 0}. Safe to run from several processes at once.
CREATE OR REPLACE FUNCTION holdfast.maintenance_tick(p_batch integer DEFAULT 1000)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := holdfast.now();
    v_id uuid;
    v_call uuid;
    v_expired integer := 0;
    v_gone integer := 0;
    v_due integer := 0;
    v_children integer := 0;
BEGIN
    FOR v_id IN
        SELECT a.id FROM holdfast.agents a
         WHERE a.state = 'running' AND a.lease_expires_at <= v_now
         ORDER BY a.lease_expires_at LIMIT p_batch
           FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM holdfast.reap_agent(v_id, 'lease_expired');
        v_expired := v_expired + 1;
    END LOOP;

    -- A session is gone when its pid is not in pg_stat_activity, or the pid was
    -- reused by a newer backend. backend_start is only compared when visible
    -- (another role's sessions hide it), so a permission gap never reaps a live
    -- worker; such agents fall back to lease expiry.
    FOR v_id IN
        SELECT a.id FROM holdfast.agents a
         WHERE a.state = 'running' AND a.lease_pid IS NOT NULL
           AND NOT EXISTS (
               SELECT 1 FROM pg_stat_activity s
                WHERE s.pid = a.lease_pid
                  AND (s.backend_start IS NULL OR a.lease_backend_start IS NULL
                       OR s.backend_start = a.lease_backend_start))
         ORDER BY a.id LIMIT p_batch
           FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM holdfast.reap_agent(v_id, 'session_gone');
        v_gone := v_gone + 1;
    END LOOP;

    -- Delayed agents whose time has come (their ready time is their
    -- run_after): one hint for all of them. The window is the last few
    -- seconds, so each delayed agent is hinted by the ticks around its due
    -- time; workers also poll, so a missed hint only costs a poll interval.
    SELECT count(*) INTO v_due FROM holdfast.agents
     WHERE state = 'ready'
       AND greatest(run_after, state_changed_at) <= v_now
       AND greatest(run_after, state_changed_at) > v_now - interval '3 seconds'
       AND run_after > state_changed_at;
    IF v_due > 0 THEN
        PERFORM pg_notify('holdfast_ready', '');
    END IF;

    FOR v_call, v_id IN
        SELECT c.tool_call_id, c.child_agent_id FROM holdfast.subagent_cancels c
          JOIN holdfast.agents a ON a.id = c.child_agent_id
         ORDER BY c.created_at, c.tool_call_id LIMIT p_batch
           FOR UPDATE OF a SKIP LOCKED
    LOOP
        PERFORM holdfast.cancel_locked_turn(holdfast.lock_agent(v_id));
        DELETE FROM holdfast.subagent_cancels WHERE tool_call_id = v_call;
        v_children := v_children + 1;
    END LOOP;

    RETURN jsonb_build_object('expired', v_expired, 'session_gone', v_gone, 'woken', v_due,
                              'subagents_cancelled', v_children);
END
$$;
