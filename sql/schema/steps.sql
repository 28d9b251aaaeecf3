-- sql/schema/steps.sql — the worker's step commits: model responses, retries, compaction, tool results, failed turns.
--
-- This area's current schema: its tables, indexes and views first, then,
-- after the line below, its functions and triggers.
-- Each object is defined here once, as it is now. See docs/sql.md for how
-- a fresh install applies these files and how a change is added.

-- One model response of a group commit (commit_model_step_batch): the
-- apply_model_step arguments of one agent's step.
CREATE TYPE holdfast.model_step AS (
	agent_id uuid,
	epoch bigint,
	input_ids uuid[],
	message jsonb,
	tool_calls jsonb,
	usage jsonb,
	stop_reason text,
	config_version integer
);

-- Everything a step is decided and built from (load_step_context says
-- what each part is).
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
	messages json,
	tool_calls json,
	pending_inputs json,
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

-- One row per committed step. A model step is one claim's work, so
-- (agent_id, epoch) is unique for model steps: a replayed commit conflicts.
-- Steps and messages carry no foreign keys (per-row checks on the step
-- path): their writers lock the agent first, a message names the step its
-- function has just inserted, and none of these rows is ever deleted.
CREATE TABLE holdfast.steps (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    agent_id uuid NOT NULL,
    step_seq bigint NOT NULL,
    kind text NOT NULL,
    -- The lease epoch it ran under.
    epoch bigint NOT NULL,
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    -- A model or compaction step's turn, provider, model and usage (priced
    -- when it committed).
    turn_seq bigint,
    provider text,
    model text,
    usage holdfast.token_usage,
    CONSTRAINT steps_kind_check CHECK (kind IN ('model', 'tool', 'compaction')),
    CONSTRAINT steps_pkey PRIMARY KEY (id),
    CONSTRAINT steps_agent_id_step_seq_key UNIQUE (agent_id, step_seq)
);

CREATE UNIQUE INDEX steps_model_epoch_idx ON holdfast.steps (agent_id, epoch) WHERE (kind = 'model');

-- The history a model call is built from (provider-neutral content blocks).
CREATE TABLE holdfast.messages (
    agent_id uuid NOT NULL,
    seq bigint NOT NULL,
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    role text NOT NULL,
    content jsonb NOT NULL,
    step_id uuid,
    input_id uuid,
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT messages_content_check CHECK (jsonb_typeof(content) = 'array'),
    CONSTRAINT messages_role_check CHECK (role IN ('user', 'assistant')),
    CONSTRAINT messages_pkey PRIMARY KEY (agent_id, seq),
    CONSTRAINT messages_id_key UNIQUE (id)
);

CREATE UNIQUE INDEX messages_input_idx ON holdfast.messages (input_id) WHERE (input_id IS NOT NULL);

-- Full-text search of saved messages, as inputs_search_idx (agents.sql).
CREATE INDEX messages_search_idx ON holdfast.messages USING gin (
    to_tsvector('simple'::regconfig, jsonb_path_query_array(content, 'strict $.**.text')))
    WITH (fastupdate = off)
    WHERE octet_length(content::text) <= 262144;

-- ==== functions and triggers ====

-- Everything a step is decided and built from, read fresh at every attempt,
-- in one statement: the agent's step fields (its config with the version
-- number it is, which the step's commit records), its history from the
-- context's start (messages, in seq order), the tool calls of those
-- messages and every open one (in creation order; a compacted agent's
-- context does not carry the calls it compacted away), the inputs of its
-- turn not yet seen by a committed model call (turn_inputs), where a model
-- call with its stored config.model would go (resolve_model_endpoint,
-- nulls stripped as the worker's typed config serialises it), whether its
-- budget is used up, and whether it is a replay's child (its tool calls are
-- answered from the recording).
-- A pending call means the step runs tools (they run before the model is
-- asked again): it reads the config and the open calls only, so what only a
-- model call reads is not read and is NULL: messages, pending_inputs,
-- over_budget, context_summary and the model route's columns (project_id
-- stays); tool_calls then holds the open calls only. The next model step's
-- context is read after the batch, by its end (end_tool_batch) or a claim.
-- Content that references stored files keeps the references. One row, or
-- none when the agent does not exist. Reads only.
-- The three lists are json, not jsonb: the worker parses them as text, and
-- json_agg joins the stored values' text where jsonb_agg would decode each
-- into a new binary document only for it to be printed again.
CREATE OR REPLACE FUNCTION holdfast.load_step_context(p_agent uuid)
RETURNS SETOF holdfast.step_context
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_agent holdfast.agents;
    v_model boolean;
    v_route record;
BEGIN
    SELECT * INTO v_agent FROM holdfast.agents a WHERE a.id = p_agent;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_model := NOT EXISTS (SELECT 1 FROM holdfast.tool_calls t
                            WHERE t.agent_id = p_agent AND t.status = 'pending');
    -- Without v_model the filter is constant false and resolves nothing:
    -- the route's columns are NULL.
    SELECT * INTO v_route
      FROM holdfast.resolve_model_endpoint(p_agent, jsonb_strip_nulls(v_agent.config -> 'model')) r
     WHERE v_model;
    RETURN QUERY
    SELECT v_agent.config, v_agent.config_version, v_agent.turn_open, v_agent.model_attempts,
           v_agent.cancel_requested_at IS NOT NULL,
           CASE WHEN v_model THEN v_agent.context_summary END,
           v_agent.turn_model_steps,
           CASE WHEN v_model THEN holdfast.budget_exceeded(v_agent) IS NOT NULL END,
           v_agent.turn_trace_parent, v_agent.turn_trace_state, v_agent.first_attempt_epoch,
           v_agent.lost_attempt_epoch, v_agent.lost_attempt_started_at, v_agent.lost_attempt_ended_at,
           CASE WHEN v_model THEN
               (SELECT coalesce(json_agg(json_build_object('seq', m.seq, 'role', m.role,
                                                            'content', m.content, 'step_id', m.step_id)
                                         ORDER BY m.seq), '[]')
                  FROM holdfast.messages m
                 WHERE m.agent_id = p_agent AND m.seq >= v_agent.context_start_seq)
           END,
           (SELECT coalesce(json_agg(json_build_object('id', t.id, 'step_id', t.step_id,
                                                        'position', t.position, 'provider_id', t.provider_id,
                                                        'name', t.name, 'input', t.input, 'kind', t.kind,
                                                        'status', t.status, 'output', t.output,
                                                        'is_error', t.is_error)
                                     ORDER BY t.created_at, t.step_id, t.position), '[]')
              FROM holdfast.tool_calls t
             WHERE t.agent_id = p_agent
               AND (t.status NOT IN ('completed', 'cancelled')
                    OR v_model AND (v_agent.context_start_seq = 0
                                    OR t.step_id IN (SELECT m.step_id FROM holdfast.messages m
                                                      WHERE m.agent_id = p_agent
                                                        AND m.seq >= v_agent.context_start_seq)))),
           CASE WHEN v_model THEN
               (SELECT coalesce(json_agg(json_build_object('id', i.id, 'content', i.content)
                                         ORDER BY i.created_at, i.id), '[]')
                  FROM holdfast.turn_inputs(p_agent) i)
           END,
           v_route.refused_field, v_route.refused_message, v_route.endpoint, v_route.custom_url,
           v_route.base_url, v_route.credential_env, v_route.sealed_key, v_route.key_fingerprint,
           v_agent.project_id, v_agent.replay_id IS NOT NULL;
END
$$;

-- claim_agents, and each claimed agent's step context (load_step_context),
-- in one call: a worker's claim and its steps' first reads are one round
-- trip and one transaction. The contexts are read after the claim, in a
-- statement of their own, so they see the new leases. One row per claim;
-- `context` is NULL for an agent that does not exist (never: the claim has
-- just locked it).
CREATE OR REPLACE FUNCTION holdfast.claim_agents_with_context(p_worker text, p_max integer, p_ttl interval)
RETURNS TABLE (agent_id uuid, epoch bigint, context holdfast.step_context)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_ids uuid[];
    v_epochs bigint[];
BEGIN
    SELECT coalesce(array_agg(c.agent_id), '{}'), coalesce(array_agg(c.epoch), '{}')
      INTO v_ids, v_epochs
      FROM holdfast.claim_agents(p_worker, p_max, p_ttl) c;
    RETURN QUERY
    SELECT u.id, u.epoch, x
      FROM unnest(v_ids, v_epochs) AS u (id, epoch)
      LEFT JOIN LATERAL holdfast.load_step_context(u.id) x ON true;
END
$$;

-- The message an interrupted external call returns to the model.
CREATE OR REPLACE FUNCTION holdfast.interrupted_output() RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT to_jsonb('Tool call was interrupted; its external outcome is unknown.'::text)
$$;

-- Complete every `running` (external, in-flight) tool call of an agent as
-- interrupted: its IO may or may not have happened, so it is never rerun and
-- the model is told. The caller holds the agent's row lock; the calls are
-- locked here in (step, position) order.
CREATE OR REPLACE FUNCTION holdfast.interrupt_running_calls(p_agent uuid)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_call holdfast.tool_calls;
    v_count integer := 0;
BEGIN
    FOR v_call IN
        SELECT * FROM holdfast.tool_calls WHERE agent_id = p_agent AND status = 'running'
         ORDER BY step_id, position FOR UPDATE
    LOOP
        UPDATE holdfast.tool_calls
           SET status = 'completed', running_epoch = NULL, output = holdfast.interrupted_output(),
               is_error = true, completed_at = holdfast.now()
         WHERE id = v_call.id;
        PERFORM holdfast.append_event(p_agent, 'tool_call.interrupted', jsonb_build_object(
            'tool_call_id', v_call.id, 'name', v_call.name,
            'output', holdfast.interrupted_output(), 'is_error', true));
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$$;

-- Mark an external tool call as running before its IO starts (committed first,
-- so that after a crash the call is known to have maybe happened and is never
-- rerun). Fenced. Raises HF409 when the call is not pending.
CREATE OR REPLACE FUNCTION holdfast.start_tool_call(p_agent uuid, p_epoch bigint, p_tool_call uuid)
RETURNS void LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    UPDATE holdfast.tool_calls SET status = 'running', running_epoch = p_epoch
     WHERE id = p_tool_call AND agent_id = p_agent AND status = 'pending';
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF409', format('tool call %s is not pending', p_tool_call));
    END IF;
END
$$;

-- Why a model response cannot be saved as given: the first malformed part
-- of its message or tool calls (message, and the field it names), or NULLs
-- when it is well formed. Pure: reads, locks and raises nothing, so a group
-- commit can refuse one agent's step without aborting the others'.
CREATE OR REPLACE FUNCTION holdfast.model_step_refusal(
    p_message jsonb, p_tool_calls jsonb, OUT message text, OUT field text)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_tool_calls jsonb := coalesce(p_tool_calls, '[]');
    v_call jsonb;
BEGIN
    IF jsonb_typeof(p_message) IS DISTINCT FROM 'array' THEN
        message := 'message must be an array of content blocks';
        field := 'message';
        RETURN;
    END IF;
    IF jsonb_typeof(v_tool_calls) <> 'array' THEN
        message := 'tool_calls must be an array';
        field := 'tool_calls';
        RETURN;
    END IF;
    FOR v_pos IN 0 .. jsonb_array_length(v_tool_calls) - 1 LOOP
        v_call := v_tool_calls -> v_pos;
        IF jsonb_typeof(v_call -> 'name') IS DISTINCT FROM 'string'
           OR jsonb_typeof(v_call -> 'provider_id') IS DISTINCT FROM 'string' THEN
            message := 'each tool call needs string name and provider_id';
            field := format('tool_calls[%s]', v_pos);
            RETURN;
        END IF;
        IF NOT coalesce(v_call ->> 'kind' IN ('external', 'internal', 'custom', 'question', 'command'), false) THEN
            message := 'tool call kind must be external, internal, custom, question or command';
            field := format('tool_calls[%s].kind', v_pos);
            RETURN;
        END IF;
    END LOOP;
END
$$;

-- Save one model response that model_step_refusal passed, for an agent whose
-- row lock the caller holds and whose lease at p_epoch it has checked
-- (commit_model_step_batch does both): the inputs the call saw become user
-- messages, then the assistant's message, its tool calls and events, and
-- the agent is released. Enforces the agent's model limits: it counts the
-- step in turn_model_steps (reset when the commit opens a new turn). A
-- response with tool calls that is the turn's max_model_steps_per_turn-th
-- step (its results would need one more model call), or that has more than
-- max_tool_calls_per_response calls, is saved with every call `cancelled`
-- (none runs, no wait opens) and the turn ends with limit_exceeded
-- (end_turn_with_error: the cause goes into the history, `turn.failed
-- {"error": {"type", "message", "limit", "value"}}`). A response without
-- tool calls that the provider paused (stop_reason `pause_turn`: Anthropic
-- ending a long server-tool turn early) leaves the turn open and the agent
-- ready: the next model call sends it back and the model goes on; the step
-- limit counts it like a response with calls. The agent row is read
-- here, after the lock, so writes earlier in the same transaction (a
-- subagent's hand-back to its parent in the same batch) are seen. The
-- response's usage (p_usage, priced at the model's price now) is saved on
-- the step and added to the agent's turn_usage and usage in the same agent
-- UPDATE; turn.completed carries the turn's sum. p_config_version is the
-- config version the request was built from (load_step_context; NULL: the
-- one in force): model.response names it, and the step's provider and model
-- are that version's, even when an "apply": "now" change replaced it while
-- the call was in flight. p_lease_ttl keeps the lease when the agent stays
-- ready (settle_agent): lease_kept says so, and the caller then holds
-- it at p_epoch + 1. Reads model_prices. Raises nothing of its own.
-- Returns the step id.
CREATE OR REPLACE FUNCTION holdfast.apply_model_step(
    p_agent uuid, p_epoch bigint, p_input_ids uuid[], p_message jsonb,
    p_tool_calls jsonb, p_usage jsonb, p_stop_reason text, p_config_version integer,
    p_lease_ttl interval, OUT step_id uuid, OUT lease_kept boolean)
LANGUAGE plpgsql AS $$
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
    v_new_turn boolean := false;
    v_step_id uuid;
    v_step_seq bigint;
    v_message_seq bigint;
    v_event_seq bigint;
    v_calls jsonb := '[]';
    v_types text[];
    v_data jsonb[];
    -- Anthropic paused a long turn (server tools): it goes on with another
    -- model call that sends this response back as the last message.
    v_paused boolean := jsonb_array_length(coalesce(p_tool_calls, '[]')) = 0
                        AND p_stop_reason IS NOT DISTINCT FROM 'pause_turn';
    v_provider text;
    v_model text;
    v_usage holdfast.token_usage;
    v_turn_usage holdfast.token_usage;
    v_config_version integer;
    v_model_config jsonb;
BEGIN
    SELECT * INTO STRICT v_agent FROM holdfast.agents WHERE id = p_agent;

    -- What the response used (the config version its request was built
    -- from, which an "apply": "now" change during the call has since
    -- replaced), priced now, and the turn's sum with it.
    v_config_version := coalesce(p_config_version, v_agent.config_version);
    v_model_config := v_agent.config -> 'model';
    IF v_config_version <> v_agent.config_version THEN
        SELECT v.config -> 'model' INTO v_model_config FROM holdfast.agent_config_versions v
         WHERE v.agent_id = p_agent AND v.version = v_config_version;
    END IF;
    v_provider := v_model_config ->> 'provider';
    v_model := v_model_config ->> 'name';
    v_usage := holdfast.add_server_tool_cost(
        holdfast.price_usage(holdfast.usage_from_json(p_usage), v_provider, v_model), v_provider);
    v_turn_usage := holdfast.add_usage(v_agent.turn_usage, v_usage);

    -- Decide the calls' statuses before writing anything.
    v_n_calls := jsonb_array_length(v_tool_calls);
    IF v_n_calls > 0 THEN
        v_require := ARRAY(SELECT jsonb_array_elements_text(coalesce(v_agent.config #> '{approvals,require_for}', '[]')));
    END IF;
    FOR v_pos IN 0 .. v_n_calls - 1 LOOP
        v_call := v_tool_calls -> v_pos;
        v_status := CASE
            -- A replay's calls are answered from the recording, never
            -- waited on (answer_replay_calls, time_travel.sql).
            WHEN v_agent.replay_id IS NOT NULL THEN 'pending'
            WHEN v_call ->> 'name' = ANY (v_require) THEN 'awaiting_approval'
            WHEN v_call ->> 'kind' IN ('custom', 'question', 'command') THEN 'waiting'
            ELSE 'pending' END;
        v_statuses := array_append(v_statuses, v_status);
        IF v_status = 'awaiting_approval'
           OR (v_status = 'waiting' AND v_call ->> 'kind' IN ('question', 'command')) THEN
            v_opens_waits := true;
        END IF;
    END LOOP;

    -- The limits: a response whose calls (or pause) would need a model call
    -- past the step limit, or with too many calls, keeps its calls only as
    -- cancelled.
    IF v_n_calls > 0 OR v_paused THEN
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

    -- No tool calls: the model has answered; the turn is complete (unless
    -- the provider paused it).
    v_turn_open := CASE WHEN v_n_calls = 0 AND NOT v_paused THEN false ELSE v_agent.turn_open END;
    v_types := ARRAY['model.response'];
    IF v_opens_waits OR v_limit IS NOT NULL THEN
        -- Calls that open waits (their events, appended one by one below,
        -- open them) or that a limit cancels: the step's own counters now,
        -- and the agent settles once the waits are open (settle_agent) or
        -- the turn has ended (end_turn_with_error).
        UPDATE holdfast.agents
           SET last_step_seq = last_step_seq + 1,
               last_message_seq = last_message_seq + v_n_inputs + 1,
               last_event_seq = last_event_seq + 1, last_event_at = holdfast.now(),
               model_attempts = 0,
               turn_model_steps = turn_model_steps + 1,
               turn_usage = v_turn_usage,
               usage = holdfast.add_usage(usage, v_usage)
         WHERE id = p_agent
        RETURNING last_step_seq, last_message_seq, last_event_seq
             INTO v_step_seq, v_message_seq, v_event_seq;
    ELSE
        -- The step ends here: settle_agent decides the state (with the
        -- calls and inputs this step is about to write), releases the agent
        -- and reserves the step's, messages' and events' seqs (turn.started
        -- added when the commit opens the next turn, for the inputs that came
        -- during the call), all in its one agent UPDATE; the events follow
        -- once the rows they name exist.
        v_types := v_types || array_fill('tool_call.created'::text, ARRAY[v_n_calls]);
        IF v_n_calls = 0 AND NOT v_paused THEN
            v_types := array_append(v_types, 'turn.completed');
        END IF;
        SELECT s.types, s.last_step_seq, s.last_message_seq, s.last_event_seq, s.state = 'running'
          INTO v_types, v_step_seq, v_message_seq, v_event_seq, lease_kept
          FROM holdfast.settle_agent(p_agent, v_types, NULL, NULL,
                   p_turn_open => v_turn_open,
                   p_new_runnable => 'pending' = ANY (v_statuses),
                   p_new_waiting => 'waiting' = ANY (v_statuses) OR 'awaiting_approval' = ANY (v_statuses),
                   p_consumed => v_input_ids,
                   p_new_steps => 1, p_new_messages => v_n_inputs + 1,
                   p_model_step => true, p_usage => v_usage, p_lease_ttl => p_lease_ttl) s;
        v_new_turn := v_types[cardinality(v_types)] = 'turn.started';
    END IF;

    INSERT INTO holdfast.steps (agent_id, step_seq, kind, epoch, turn_seq, provider, model, usage)
    VALUES (p_agent, v_step_seq, 'model', p_epoch, v_agent.turn_seq, v_provider, v_model, v_usage)
    RETURNING id INTO v_step_id;

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
        -- consumed_at IS NULL (true of v_input_ids) lets the plan read the
        -- agent's pending inputs (inputs_pending_idx), whatever the
        -- table's statistics were when it was made.
        UPDATE holdfast.inputs SET consumed_at = holdfast.now()
         WHERE agent_id = p_agent AND id = ANY (v_input_ids) AND consumed_at IS NULL;
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
        'usage', coalesce(p_usage, '{}'), 'stop_reason', p_stop_reason,
        'config_version', v_config_version)];
    IF NOT (v_opens_waits OR v_limit IS NOT NULL) THEN
        v_data := v_data || ARRAY(SELECT c.value FROM jsonb_array_elements(v_calls) WITH ORDINALITY AS c (value, ord)
                                   ORDER BY c.ord);
        IF v_n_calls = 0 AND NOT v_paused THEN
            v_data := array_append(v_data, jsonb_build_object('step_id', v_step_id, 'stop_reason', p_stop_reason,
                                                              'usage', holdfast.usage_json(v_turn_usage)));
        END IF;
        IF v_new_turn THEN
            -- turn.started: the version settle_agent opened the turn on.
            v_data := array_append(v_data, jsonb_build_object('config_version',
                (SELECT a.config_version FROM holdfast.agents a WHERE a.id = p_agent)));
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
                CASE
                    WHEN v_limit = 'max_tool_calls_per_response' THEN format(
                        'the response asked for %s tool calls; this agent may make at most %s per response (limits.%s). None of them ran.',
                        v_n_calls, v_limit_value, v_limit)
                    WHEN v_paused THEN format(
                        'this turn reached %s model steps, the most this agent may take in one turn (limits.%s); the paused response was not continued.',
                        v_limit_value, v_limit)
                    ELSE format(
                        'this turn reached %s model steps, the most this agent may take in one turn (limits.%s); the tool calls of the last response did not run.',
                        v_limit_value, v_limit) END,
                NULL, NULL, jsonb_build_object('limit', v_limit, 'value', v_limit_value));
        END IF;
    END IF;
    step_id := v_step_id;
    lease_kept := coalesce(lease_kept, false);
END
$$;

-- The worker's group commit: save the model responses in p_steps in one
-- transaction, each agent fenced on its own. One statement locks every
-- agent of the batch (FOR UPDATE, in id order, so two batches cannot
-- deadlock on each other) and checks each lease; then only the rows whose
-- agent was found, is still leased at the row's epoch, appears once in the
-- batch and passes model_step_refusal are written (apply_model_step, in agent
-- id order). A refused row writes nothing and aborts nothing: no savepoint,
-- no exception. Returns one row per step, in agent id order: outcome
-- 'committed' (with step_id), 'lease_lost', 'not_found' or 'invalid' (with
-- message, and field when one part is to blame). An agent with two steps in
-- one batch has both refused as invalid (a lease runs one step at a time).
-- p_lease_ttl (the worker's lease ttl) keeps each committed agent's lease
-- when it stays ready (settle_agent): lease_kept says so, and its
-- holder then takes the agent's next step at the step's epoch + 1, on
-- next_context, the agent's step context read after the commit
-- (load_step_context; NULL when the lease was not kept).
-- Raises nothing of its own; any other error (a deadlock with a
-- non-worker transaction, a lost connection) aborts the whole batch, and
-- the worker then commits its steps one by one.
CREATE OR REPLACE FUNCTION holdfast.commit_model_step_batch(p_steps holdfast.model_step[], p_lease_ttl interval DEFAULT NULL)
RETURNS TABLE (agent_id uuid, outcome text, step_id uuid, message text, field text, lease_kept boolean,
               next_context holdfast.step_context)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_row record;
BEGIN
    FOR v_row IN
        WITH batch AS (
            SELECT s.agent_id AS id, s.epoch, s.input_ids, s.message AS content, s.tool_calls,
                   s.usage, s.stop_reason, s.config_version, count(*) OVER (PARTITION BY s.agent_id) AS copies
              FROM unnest(p_steps) AS s
        ), locked AS MATERIALIZED (
            SELECT a.id, a.state, a.lease_epoch, a.lease_expires_at
              FROM holdfast.lock_agents(ARRAY(SELECT b.id FROM batch b)) a
        )
        -- holdfast.now() is read per row, after the locks were granted
        -- (as lock_leased_agent reads it): a lease that ran out while the
        -- batch waited for a lock is lost.
        SELECT b.*, l.id IS NOT NULL AS found,
               coalesce(l.state = 'running' AND l.lease_epoch = b.epoch
                        AND l.lease_expires_at > holdfast.now(), false) AS leased
          FROM batch b LEFT JOIN locked l ON l.id = b.id
         ORDER BY b.id
    LOOP
        agent_id := v_row.id;
        step_id := NULL;
        message := NULL;
        field := NULL;
        lease_kept := false;
        next_context := NULL;
        IF NOT v_row.found THEN
            outcome := 'not_found';
            message := format('agent %s not found', v_row.id);
        ELSIF NOT v_row.leased THEN
            outcome := 'lease_lost';
            message := format('lease lost on agent %s at epoch %s', v_row.id, v_row.epoch);
        ELSIF v_row.copies > 1 THEN
            outcome := 'invalid';
            message := 'the batch holds more than one step for this agent';
            field := 'agent_id';
        ELSE
            SELECT c.message, c.field INTO message, field
              FROM holdfast.model_step_refusal(v_row.content, v_row.tool_calls) c;
            IF message IS NOT NULL THEN
                outcome := 'invalid';
            ELSE
                outcome := 'committed';
                SELECT w.step_id, w.lease_kept INTO step_id, lease_kept
                  FROM holdfast.apply_model_step(v_row.id, v_row.epoch, v_row.input_ids,
                           v_row.content, v_row.tool_calls, v_row.usage, v_row.stop_reason,
                           v_row.config_version, p_lease_ttl) w;
                IF lease_kept THEN
                    SELECT * INTO next_context FROM holdfast.load_step_context(v_row.id);
                END IF;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

-- Save one model response with its inputs, tool calls and events, and
-- release the agent: the group commit's batch of one, its outcome raised as
-- the single-step callers have always seen it. Locks the agent row. Raises
-- HF001 (lease lost), HF404 (no such agent), HF422 (a malformed message or
-- tool call, the field named). p_config_version as in apply_model_step.
-- Returns the step id.
CREATE OR REPLACE FUNCTION holdfast.commit_model_step(
    p_agent uuid, p_epoch bigint, p_input_ids uuid[], p_message jsonb,
    p_tool_calls jsonb, p_usage jsonb, p_stop_reason text, p_config_version integer DEFAULT NULL)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_result record;
BEGIN
    SELECT r.outcome, r.step_id, r.message, r.field INTO v_result
      FROM holdfast.commit_model_step_batch(ARRAY[ROW(p_agent, p_epoch, p_input_ids, p_message,
               p_tool_calls, p_usage, p_stop_reason, p_config_version)::holdfast.model_step]) r;
    IF v_result.outcome = 'committed' THEN
        RETURN v_result.step_id;
    END IF;
    PERFORM holdfast.raise(CASE v_result.outcome WHEN 'lease_lost' THEN 'HF001'
                                                 WHEN 'not_found' THEN 'HF404'
                                                 ELSE 'HF422' END,
                           v_result.message, v_result.field);
    RETURN NULL;
END
$$;

-- A retryable model failure (429, 529, 5xx, timeout, cut stream): count the
-- attempt, record `model.retry`, and release the agent until now() + p_delay.
-- When the attempt would exceed p_max_retries, the turn fails instead
-- (`turn.failed`, error type retries_exhausted) and the inputs the failed call
-- saw (p_input_ids) become history with the error, as with any failed turn,
-- instead of staying pending and starting a new turn that would fail the same
-- way. Fenced (HF001). Returns 'retrying' or 'exhausted'.
CREATE OR REPLACE FUNCTION holdfast.commit_model_retry(
    p_agent uuid, p_epoch bigint, p_error jsonb, p_delay interval, p_max_retries integer,
    p_input_ids uuid[])
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_attempt integer;
BEGIN
    v_attempt := (holdfast.lock_leased_agent(p_agent, p_epoch)).model_attempts + 1;
    IF v_attempt > p_max_retries THEN
        PERFORM holdfast.end_turn_with_error(p_agent, 'retries_exhausted',
            format('gave up after %s retries; last error: %s', p_max_retries, p_error ->> 'message'),
            p_input_ids, p_error);
        RETURN 'exhausted';
    END IF;
    PERFORM holdfast.settle_agent(p_agent, ARRAY['model.retry'],
        ARRAY[jsonb_build_object(
            'attempt', v_attempt,
            'delay_ms', floor(extract(epoch FROM p_delay) * 1000)::bigint,
            'error', p_error)],
        holdfast.now() + p_delay, p_model_attempts => v_attempt);
    RETURN 'retrying';
END
$$;

-- The model call the worker is about to make goes without the tools of
-- these servers, or one tool of them (p_servers[i] an MCP tool entry's
-- name; p_tools[i] the server's name of the one tool left out, NULL for
-- all its tools; p_reasons[i] why: refused by the egress policy,
-- unreachable, listing failed or timed out, a name no model provider
-- takes): one `tool.unavailable {"server", "tool"?, "reason"}` each, so the
-- timeline says why the model had no such tools. The agent stays leased.
-- Fenced (HF001).
CREATE OR REPLACE FUNCTION holdfast.record_tools_unavailable(
    p_agent uuid, p_epoch bigint, p_servers text[], p_tools text[], p_reasons text[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    PERFORM holdfast.append_event(p_agent, 'tool.unavailable', jsonb_strip_nulls(
               jsonb_build_object('server', u.server, 'tool', u.tool, 'reason', u.reason)))
       FROM unnest(p_servers, p_tools, p_reasons) WITH ORDINALITY AS u (server, tool, reason, ord)
      ORDER BY u.ord;
END
$$;

-- The model call the worker is about to make goes without these image or
-- document URLs (p_urls[i], refused by the egress policy at use: p_reasons[i]):
-- one `content.left_out {"url", "reason"}` each, so the timeline says what
-- the model was not sent (its request carries a text block saying the
-- same). The agent stays leased. Fenced (HF001).
CREATE OR REPLACE FUNCTION holdfast.record_content_left_out(
    p_agent uuid, p_epoch bigint, p_urls text[], p_reasons text[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    PERFORM holdfast.append_event(p_agent, 'content.left_out', jsonb_build_object('url', u.url, 'reason', u.reason))
       FROM unnest(p_urls, p_reasons) WITH ORDINALITY AS u (url, reason, ord)
      ORDER BY u.ord;
END
$$;

-- The worker aborted an in-flight model call for interrupt inputs that
-- call did not include (p_input_ids): nothing of the call is saved;
-- `model.interrupted {"input_ids"}` is recorded and the agent released
-- (its turn is open, so it is ready at once: the next claim makes the call
-- again, with those inputs). Fenced (HF001).
CREATE OR REPLACE FUNCTION holdfast.commit_model_interrupt(p_agent uuid, p_epoch bigint, p_input_ids uuid[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    PERFORM holdfast.settle_agent(p_agent, ARRAY['model.interrupted'],
        ARRAY[jsonb_build_object('input_ids', to_jsonb(coalesce(p_input_ids, '{}')))], NULL);
END
$$;

-- Save a compaction: the summary (which covers every message before
-- p_keep_from_seq, including any earlier summary), a step of kind
-- 'compaction' with the summary call's usage (p_usage, priced at the
-- model's price now, and added to the agent's turn_usage and usage: it is
-- a paid model call, and budgets count it) and a `context.compacted`
-- event, in one transaction; then release the agent (its turn is still
-- open, so it is ready for the model call at once). Fenced (HF001).
-- Raises HF422 when p_keep_from_seq does not move the start forward.
CREATE OR REPLACE FUNCTION holdfast.commit_compaction(
    p_agent uuid, p_epoch bigint, p_summary text, p_keep_from_seq bigint, p_usage jsonb)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_agent holdfast.agents;
    v_replaced bigint;
    v_provider text;
    v_model text;
    v_usage holdfast.token_usage;
    v_step_seq bigint;
BEGIN
    v_agent := holdfast.lock_leased_agent(p_agent, p_epoch);
    IF p_summary IS NULL OR btrim(p_summary) = '' THEN
        PERFORM holdfast.raise('HF422', 'summary must not be empty', 'summary');
    END IF;
    IF p_keep_from_seq <= v_agent.context_start_seq OR p_keep_from_seq > v_agent.last_message_seq + 1 THEN
        PERFORM holdfast.raise('HF422', format('keep_from_seq %s must be in (%s, %s]',
            p_keep_from_seq, v_agent.context_start_seq, v_agent.last_message_seq + 1), 'keep_from_seq');
    END IF;
    SELECT count(*) INTO v_replaced FROM holdfast.messages
     WHERE agent_id = p_agent AND seq >= v_agent.context_start_seq AND seq < p_keep_from_seq;
    v_provider := v_agent.config #>> '{model,provider}';
    v_model := v_agent.config #>> '{model,name}';
    v_usage := holdfast.add_server_tool_cost(
        holdfast.price_usage(holdfast.usage_from_json(p_usage), v_provider, v_model), v_provider);
    UPDATE holdfast.agents
       SET context_summary = p_summary, context_start_seq = p_keep_from_seq, model_attempts = 0,
           last_step_seq = last_step_seq + 1,
           turn_usage = holdfast.add_usage(turn_usage, v_usage),
           usage = holdfast.add_usage(usage, v_usage)
     WHERE id = p_agent
    RETURNING last_step_seq INTO v_step_seq;
    INSERT INTO holdfast.steps (agent_id, step_seq, kind, epoch, turn_seq, provider, model, usage)
    VALUES (p_agent, v_step_seq, 'compaction', p_epoch, v_agent.turn_seq, v_provider, v_model, v_usage);
    PERFORM holdfast.append_event(p_agent, 'context.compacted', jsonb_build_object(
        'summary', p_summary, 'replaced_messages', v_replaced,
        'keep_from_seq', p_keep_from_seq, 'usage', coalesce(p_usage, '{}')));
    PERFORM holdfast.settle_agent(p_agent);
END
$$;

-- Save one tool call's result with its event, fenced by the worker's lease:
-- commit_tool_result and end_tool_batch. The call is completed first, so
-- that the settle below decides the state with it done. Image and document
-- blocks are kept as keep_tool_output keeps them (stored once; a bad one
-- left out with a note). Without p_end_batch the agent stays leased (a batch
-- may hold more calls) and one agent UPDATE reserves the step's and the
-- event's seqs; with it the batch ends in the same write: running calls
-- interrupted (as release_agent does), then one settle_agent that reserves
-- the seqs, writes the event, decides the state and releases the lease or,
-- with p_lease_ttl, keeps it at p_epoch + 1 ('running' returned). A call
-- still running beside the batch's last one (none is, once a batch has run:
-- a reap interrupted those of an earlier attempt) gets its
-- tool_call.interrupted before the last one's tool_call.completed.
-- Raises HF001 (lease lost), HF404 (no such call on this agent), HF409 (the
-- call already has a result), HF422; nothing is saved then.
CREATE OR REPLACE FUNCTION holdfast.save_tool_result(
    p_agent uuid, p_epoch bigint, p_tool_call uuid, p_output jsonb, p_is_error boolean,
    p_end_batch boolean, p_lease_ttl interval,
    OUT state text, OUT step_id uuid)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_agent holdfast.agents;
    v_call holdfast.tool_calls;
    v_data jsonb;
    v_step_id uuid := holdfast.uuid_v7();
    v_step_seq bigint;
    v_event_seq bigint;
BEGIN
    v_agent := holdfast.lock_leased_agent(p_agent, p_epoch);
    SELECT * INTO v_call FROM holdfast.tool_calls WHERE id = p_tool_call AND agent_id = p_agent FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('tool call %s not found', p_tool_call));
    END IF;
    IF v_call.status NOT IN ('pending', 'running') THEN
        PERFORM holdfast.raise('HF409', format('tool call %s is %s', p_tool_call, v_call.status));
    END IF;
    IF p_output IS NULL THEN
        PERFORM holdfast.raise('HF422', 'output must not be null', 'output');
    END IF;
    -- Images and documents (an MCP server's): their files stored once.
    p_output := holdfast.keep_tool_output(v_agent, p_output);
    UPDATE holdfast.tool_calls
       SET status = 'completed', running_epoch = NULL, output = p_output,
           is_error = coalesce(p_is_error, false), result_step_id = v_step_id,
           completed_at = holdfast.now()
     WHERE id = p_tool_call;
    v_data := holdfast.tool_call_completed_data(p_tool_call, v_call.name, p_output, coalesce(p_is_error, false));
    IF p_end_batch THEN
        PERFORM holdfast.interrupt_running_calls(p_agent);
        SELECT s.state, s.last_step_seq INTO state, v_step_seq
          FROM holdfast.settle_agent(p_agent, ARRAY['tool_call.completed'], ARRAY[v_data],
                                     p_new_steps => 1, p_lease_ttl => p_lease_ttl) s;
    ELSE
        UPDATE holdfast.agents
           SET last_step_seq = last_step_seq + 1,
               last_event_seq = last_event_seq + 1, last_event_at = holdfast.now()
         WHERE id = p_agent
        RETURNING last_step_seq, last_event_seq INTO v_step_seq, v_event_seq;
        PERFORM holdfast.insert_reserved_events(p_agent, v_event_seq, ARRAY['tool_call.completed'],
                                                ARRAY[v_data]);
        state := 'running';
    END IF;
    INSERT INTO holdfast.steps (id, agent_id, step_seq, kind, epoch)
    VALUES (v_step_id, p_agent, v_step_seq, 'tool', p_epoch);
    step_id := v_step_id;
END
$$;

-- One tool call's result mid-batch (save_tool_result): the agent stays
-- leased; the worker releases it with release_agent when its batch is done,
-- or saves the batch's last result with end_tool_batch. Raises as
-- save_tool_result does. Returns the tool step's id.
CREATE OR REPLACE FUNCTION holdfast.commit_tool_result(
    p_agent uuid, p_epoch bigint, p_tool_call uuid, p_output jsonb, p_is_error boolean)
RETURNS uuid LANGUAGE plpgsql AS $$
BEGIN
    RETURN (holdfast.save_tool_result(p_agent, p_epoch, p_tool_call, p_output, p_is_error,
                                      false, NULL)).step_id;
END
$$;

-- A tool batch's last result and the batch's end in one transaction
-- (save_tool_result): the state settled after it, and with a kept lease
-- ('running', p_lease_ttl given) next_context, the agent's step context
-- read after the settle, for the step the holder takes next; NULL
-- otherwise. Raises as save_tool_result does; nothing is saved then.
CREATE OR REPLACE FUNCTION holdfast.end_tool_batch(
    p_agent uuid, p_epoch bigint, p_tool_call uuid, p_output jsonb, p_is_error boolean,
    p_lease_ttl interval DEFAULT NULL,
    OUT state text, OUT next_context holdfast.step_context)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    state := (holdfast.save_tool_result(p_agent, p_epoch, p_tool_call, p_output, p_is_error,
                                        true, p_lease_ttl)).state;
    IF state = 'running' THEN
        SELECT * INTO next_context FROM holdfast.load_step_context(p_agent);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION holdfast.end_turn_with_error(
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
    -- The cause, as the next message of the history: its seq is the
    -- agent's next (the row lock is held), counted by the settle below.
    INSERT INTO holdfast.messages (agent_id, seq, role, content)
    SELECT p_agent, a.last_message_seq + 1, 'assistant',
           jsonb_build_array(jsonb_build_object('type', 'text',
               'text', format('[holdfast] The turn failed: %s: %s', p_error_type, p_message)))
      FROM holdfast.agents a WHERE a.id = p_agent;
    UPDATE holdfast.tool_calls SET status = 'cancelled'
     WHERE agent_id = p_agent AND status IN ('pending', 'awaiting_approval', 'waiting');
    PERFORM holdfast.settle_agent(p_agent, ARRAY['turn.failed'],
        ARRAY[jsonb_build_object(
            'error', jsonb_build_object('type', p_error_type, 'message', p_message)
                     || coalesce(p_error_fields, '{}')
                     || CASE WHEN p_detail IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('detail', p_detail) END)],
        NULL, p_turn_open => false, p_new_messages => 1, p_model_attempts => 0);
END
$$;

-- A fatal model error (authentication_error, billing_error,
-- invalid_request_error, ...): end the turn at once, no retry. Fenced (HF001).
CREATE OR REPLACE FUNCTION holdfast.fail_turn(
    p_agent uuid, p_epoch bigint, p_error_type text, p_message text, p_input_ids uuid[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    PERFORM holdfast.interrupt_running_calls(p_agent);
    PERFORM holdfast.end_turn_with_error(p_agent, p_error_type, p_message, p_input_ids);
END
$$;


-- A step failed with something other than a lost lease (p_message says
-- what). Counts the failure; below p_max_attempts the agent is released
-- (running external calls interrupted, as in release_agent) until
-- now() + p_delay with `step.retry` {"attempt", "max_attempts",
-- "delay_ms", "retry_at", "error": {"type": "internal_error", "message"}}
-- on its timeline, and 'retrying' is returned; at p_max_attempts the turn
-- ends with `turn.failed` {"type": "internal_error", "message": ...}, the
-- cause in history, and 'failed' is returned; the turn's inputs still pending
-- (turn_inputs: not the queued ones, which open the next turn) become
-- history with it (a new turn from them would fail the same way).
-- Locks the agent row (fenced: HF001 when the lease is not p_epoch's).
-- Raises HF422 for a negative delay or a max below 1.
CREATE OR REPLACE FUNCTION holdfast.fail_step(
    p_agent uuid, p_epoch bigint, p_message text, p_delay interval, p_max_attempts integer)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_failures integer;
    v_retry_at timestamptz;
BEGIN
    IF p_delay IS NULL OR p_delay < '0'::interval THEN
        PERFORM holdfast.raise('HF422', 'delay must not be negative', 'delay');
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        PERFORM holdfast.raise('HF422', 'max attempts must be at least 1', 'max_attempts');
    END IF;
    v_failures := (holdfast.lock_leased_agent(p_agent, p_epoch)).step_failures + 1;
    PERFORM holdfast.interrupt_running_calls(p_agent);
    IF v_failures >= p_max_attempts THEN
        PERFORM holdfast.end_turn_with_error(p_agent, 'internal_error',
            format('a step failed %s times in a row; last error: %s', v_failures, p_message),
            ARRAY(SELECT id FROM holdfast.turn_inputs(p_agent)));
        RETURN 'failed';
    END IF;
    v_retry_at := holdfast.now() + p_delay;
    PERFORM holdfast.settle_agent(p_agent, ARRAY['step.retry'], ARRAY[jsonb_build_object(
        'attempt', v_failures, 'max_attempts', p_max_attempts,
        'delay_ms', floor(extract(epoch FROM p_delay) * 1000)::bigint, 'retry_at', v_retry_at,
        'error', jsonb_build_object('type', 'internal_error', 'message', p_message))], v_retry_at,
        p_step_failures => v_failures);
    RETURN 'retrying';
END
$$;
