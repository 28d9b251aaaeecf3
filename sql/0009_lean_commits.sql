-- 0009_lean_commits.sql — fewer statements and agent-row versions per step.
--
-- Changes no behaviour: the same events with the same gap-free seqs in the
-- same order, the same states, NOTIFYs, webhook outbox rows and tool waits,
-- the same fencing (HF001) and errors. What changes is the cost.
--
-- Why: a durable step cost about 26 `pgbench -N` transactions of machine
-- time (BENCHMARKS.md). A model step's commit updated the agent row six
-- times (step, message and event counters, attempts, turn, settle); every
-- update after the first writes another row version and re-runs the foreign
-- key check on project_id (the version was written by this transaction).
--
-- How:
--   * insert_reserved_events: the hot paths reserve their event seqs in
--     the one agent-row UPDATE they make anyway (last_event_seq + n ...
--     RETURNING) and insert the events in one statement. append_event stays
--     for everything else (and for events whose triggers write more events).
--   * decide_state: settle_agent's decision, readable before the caller's
--     writes, so a commit can write its counters and the agent's next state
--     in one UPDATE.
--   * settle_agent (0001) now takes one UPDATE for state, turn and the
--     turn.started event's seq (was up to three), via settle_agent_with,
--     which release_agent (0003; run_after folded in) and
--     submit_tool_result (0002; its event folded in) call directly.
--   * commit_model_step (0001): one agent UPDATE (counters, attempts, turn,
--     state, lease) instead of six, one INSERT each for messages, tool calls
--     and events. When a tool call opens a wait (approval, question,
--     command), its tool_call.created events are appended one by one as
--     before, so each wait's events follow its call's, and the agent is
--     settled afterwards (queue_command may complete a call at once).
--   * commit_tool_result (0001): step and event seqs in one UPDATE.
--   * claim_agents, renew_leases (0001): read this backend's start time from
--     pg_stat_get_activity(pid) instead of scanning pg_stat_activity.
--   * tool_calls_agent_idx: the worker's context load reads an agent's tool
--     calls (`WHERE agent_id = $1 ORDER BY created_at, step_id, position`)
--     at every step; only open calls were indexed by agent, so that read
--     scanned the whole table and its cost grew with every agent's history.
--   * The tool-wait trigger (0005) fires only for tool_call.created events of
--     calls that open a wait (the event carries the call's status and kind),
--     instead of running open_tool_wait for every call to find nothing.

-- An agent's tool calls in the order the context load reads them.
CREATE INDEX tool_calls_agent_idx ON holdfast.tool_calls (agent_id, created_at, step_id, position);

-- Insert events whose seqs the caller has reserved: p_types[i] / p_data[i]
-- becomes seq p_last_seq - n + i (n = cardinality(p_types)), in order. The
-- caller holds the agent's row lock and has advanced last_event_seq by n in
-- the same transaction (its own agents UPDATE ... RETURNING last_event_seq).
-- The events' triggers (NOTIFY, webhook outbox, subagent hand-back) fire per
-- row as for append_event.
CREATE FUNCTION holdfast.insert_reserved_events(
    p_agent uuid, p_last_seq bigint, p_types text[], p_data jsonb[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(cardinality(p_types), 0) = 0 THEN
        RETURN;
    END IF;
    INSERT INTO holdfast.events (agent_id, seq, type, data)
    SELECT p_agent, p_last_seq - cardinality(p_types) + e.ord, e.type, coalesce(e.data, '{}')
      FROM unnest(p_types, p_data) WITH ORDINALITY AS e (type, data, ord)
     ORDER BY e.ord;
END
$$;

-- The state settle_agent gives an unleased, unarchived agent, decided before
-- the caller's own writes land: p_turn_open is the turn flag after them,
-- p_new_runnable / p_new_waiting say whether tool calls the caller is about
-- to insert are pending / waiting, p_consumed lists inputs it is about to
-- consume. Returns 'ready', 'waiting', 'idle', or 'new_turn' (ready, and a
-- turn opens for waiting inputs: the caller appends turn.started and sets
-- turn_open, model_attempts = 0). Same precedence as 0001's settle_agent.
-- Reads only; the caller holds the agent's row lock.
CREATE FUNCTION holdfast.decide_state(
    p_agent uuid, p_turn_open boolean, p_new_runnable boolean, p_new_waiting boolean, p_consumed uuid[])
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_runnable boolean;
    v_waiting boolean;
BEGIN
    SELECT coalesce(bool_or(t.status IN ('pending', 'running')), false),
           coalesce(bool_or(t.status IN ('awaiting_approval', 'waiting')), false)
      INTO v_runnable, v_waiting
      FROM holdfast.tool_calls t
     WHERE t.agent_id = p_agent AND t.status NOT IN ('completed', 'cancelled');
    IF v_runnable OR p_new_runnable THEN
        RETURN 'ready';
    ELSIF v_waiting OR p_new_waiting THEN
        RETURN 'waiting';
    ELSIF p_turn_open THEN
        RETURN 'ready';
    ELSIF EXISTS (SELECT 1 FROM holdfast.inputs i
                   WHERE i.agent_id = p_agent AND i.consumed_at IS NULL
                     AND NOT (i.id = ANY (coalesce(p_consumed, '{}')))) THEN
        RETURN 'new_turn';
    END IF;
    RETURN 'idle';
END
$$;

-- settle_agent with the caller's events and delay folded into its one
-- agent-row UPDATE: appends p_types / p_data (then turn.started when a turn
-- opens), sets run_after when p_run_after is given, and writes the state
-- settle_agent decides (clearing the lease). An archived agent keeps its
-- state; only the events and run_after are written. Returns the state.
-- The caller holds the agent's row lock.
CREATE FUNCTION holdfast.settle_agent_with(
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
           run_after = coalesce(p_run_after, run_after),
           last_event_seq = last_event_seq + cardinality(v_types),
           last_event_at = CASE WHEN cardinality(v_types) > 0 THEN holdfast.now() ELSE last_event_at END
     WHERE id = p_agent
    RETURNING last_event_seq INTO v_last_seq;
    PERFORM holdfast.insert_reserved_events(p_agent, v_last_seq, v_types, v_data);
    RETURN v_state;
END
$$;

-- settle_agent (0001): the same decision, now one agent-row UPDATE.
CREATE OR REPLACE FUNCTION holdfast.settle_agent(p_agent uuid)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    RETURN holdfast.settle_agent_with(p_agent, '{}', '{}', NULL);
END
$$;

-- release_agent (0003): run_after is written by the settle's UPDATE.
-- Fenced (HF001).
CREATE OR REPLACE FUNCTION holdfast.release_agent(p_agent uuid, p_epoch bigint, p_run_after timestamptz DEFAULT NULL)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    PERFORM holdfast.interrupt_running_calls(p_agent);
    RETURN holdfast.settle_agent_with(p_agent, '{}', '{}', p_run_after);
END
$$;

-- submit_tool_result (0002): the tool_call.completed event of an unleased
-- agent is written with its settle (one agent UPDATE). Locks: the agent,
-- then the call. Raises HF404, HF409, HF422 as before.
CREATE OR REPLACE FUNCTION holdfast.submit_tool_result(p_tool_call uuid, p_output jsonb, p_is_error boolean)
RETURNS holdfast.tool_calls LANGUAGE plpgsql AS $$
DECLARE
    v_agent holdfast.agents;
    v_call holdfast.tool_calls;
    v_data jsonb;
BEGIN
    IF p_output IS NULL THEN
        PERFORM holdfast.raise('HF422', 'output must not be null', 'output');
    END IF;
    SELECT * INTO v_call FROM holdfast.tool_calls WHERE id = p_tool_call;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('tool call %s not found', p_tool_call));
    END IF;
    v_agent := holdfast.lock_agent(v_call.agent_id);
    SELECT * INTO v_call FROM holdfast.tool_calls WHERE id = p_tool_call FOR UPDATE;
    IF v_call.kind <> 'custom' THEN
        PERFORM holdfast.raise('HF409', format('tool call %s is a %s call, not a custom one', p_tool_call, v_call.kind));
    END IF;
    IF v_call.status <> 'waiting' THEN
        PERFORM holdfast.raise('HF409', format('tool call %s is %s', p_tool_call, v_call.status));
    END IF;
    UPDATE holdfast.tool_calls
       SET status = 'completed', output = p_output, is_error = coalesce(p_is_error, false),
           completed_at = holdfast.now()
     WHERE id = p_tool_call
    RETURNING * INTO v_call;
    v_data := jsonb_build_object('tool_call_id', p_tool_call, 'name', v_call.name, 'output', p_output,
                                 'is_error', v_call.is_error);
    IF v_agent.state <> 'running' THEN
        PERFORM holdfast.settle_agent_with(v_call.agent_id, ARRAY['tool_call.completed'], ARRAY[v_data], NULL);
    ELSE
        PERFORM holdfast.append_event(v_call.agent_id, 'tool_call.completed', v_data);
    END IF;
    RETURN v_call;
END
$$;

-- commit_tool_result (0001): the step's and the event's seqs come from one
-- agent UPDATE. Fenced (HF001); raises HF404, HF409, HF422 as before.
CREATE OR REPLACE FUNCTION holdfast.commit_tool_result(
    p_agent uuid, p_epoch bigint, p_tool_call uuid, p_output jsonb, p_is_error boolean)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_call holdfast.tool_calls;
    v_step_id uuid;
    v_step_seq bigint;
    v_event_seq bigint;
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
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
    UPDATE holdfast.agents
       SET last_step_seq = last_step_seq + 1,
           last_event_seq = last_event_seq + 1, last_event_at = holdfast.now()
     WHERE id = p_agent
    RETURNING last_step_seq, last_event_seq INTO v_step_seq, v_event_seq;
    INSERT INTO holdfast.steps (agent_id, step_seq, kind, epoch)
    VALUES (p_agent, v_step_seq, 'tool', p_epoch) RETURNING id INTO v_step_id;
    UPDATE holdfast.tool_calls
       SET status = 'completed', running_epoch = NULL, output = p_output,
           is_error = coalesce(p_is_error, false), result_step_id = v_step_id,
           completed_at = holdfast.now()
     WHERE id = p_tool_call;
    PERFORM holdfast.insert_reserved_events(p_agent, v_event_seq, ARRAY['tool_call.completed'],
        ARRAY[jsonb_build_object('tool_call_id', p_tool_call, 'name', v_call.name, 'output', p_output,
                                 'is_error', coalesce(p_is_error, false))]);
    RETURN v_step_id;
END
$$;

-- commit_model_step (0001), same contract: save a model response (the
-- inputs it saw become history in arrival order, the assistant message, its
-- tool calls, their events) and release the agent, in one transaction.
-- Fenced (HF001); HF422 for a malformed message or tool call (the first
-- offending call named, as before).
--
-- Statements: lock; the inputs (only when some were named); the open tool
-- calls and waiting inputs (decide_state); one agent UPDATE reserving the
-- step, message and event seqs and writing attempts, turn, state and lease;
-- one INSERT each for the step, the messages, the tool calls and the events.
-- When a call opens a wait, its tool_call.created events go through
-- append_event one by one (the wait's own events follow each call's, as
-- before) and settle_agent runs last.
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
    IF v_opens_waits THEN
        UPDATE holdfast.agents
           SET last_step_seq = last_step_seq + 1,
               last_message_seq = last_message_seq + v_n_inputs + 1,
               last_event_seq = last_event_seq + 1, last_event_at = holdfast.now(),
               model_attempts = 0
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
    IF NOT v_opens_waits THEN
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

    IF v_opens_waits THEN
        FOR v_call IN SELECT c.value FROM jsonb_array_elements(v_calls) WITH ORDINALITY AS c (value, ord)
                       ORDER BY c.ord LOOP
            PERFORM holdfast.append_event(p_agent, 'tool_call.created', v_call);
        END LOOP;
        PERFORM holdfast.settle_agent(p_agent);
    END IF;
    RETURN v_step_id;
END
$$;

-- claim_agents (0001): the claiming session's start time comes from
-- pg_stat_get_activity(own pid), not a scan of every backend's status.
CREATE OR REPLACE FUNCTION holdfast.claim_agents(p_worker text, p_max integer, p_ttl interval)
RETURNS TABLE (agent_id uuid, epoch bigint) LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := holdfast.now();
    v_backend_start timestamptz;
BEGIN
    IF p_worker IS NULL OR p_worker = '' THEN
        PERFORM holdfast.raise('HF422', 'worker name must not be empty', 'worker');
    END IF;
    IF p_ttl IS NULL OR p_ttl <= '0'::interval THEN
        PERFORM holdfast.raise('HF422', 'ttl must be positive', 'ttl');
    END IF;
    SELECT s.backend_start INTO v_backend_start FROM pg_stat_get_activity(pg_backend_pid()) s;
    RETURN QUERY
    WITH candidates AS (
        SELECT a.id FROM holdfast.agents a
         WHERE a.state = 'ready' AND a.run_after <= v_now
         ORDER BY a.run_after, a.id
         LIMIT greatest(p_max, 0)
           FOR UPDATE SKIP LOCKED
    )
    UPDATE holdfast.agents a
       SET state = 'running',
           lease_owner = p_worker,
           lease_epoch = a.lease_epoch + 1,
           lease_expires_at = v_now + p_ttl,
           lease_pid = pg_backend_pid(),
           lease_backend_start = v_backend_start,
           updated_at = v_now
      FROM candidates c
     WHERE a.id = c.id
    RETURNING a.id, a.lease_epoch;
END
$$;

-- renew_leases (0001): as claim_agents, the session's start time from
-- pg_stat_get_activity(own pid). Locks agents in id order.
CREATE OR REPLACE FUNCTION holdfast.renew_leases(p_worker text, p_agents uuid[], p_epochs bigint[], p_ttl interval)
RETURNS TABLE (agent_id uuid, renewed boolean, cancel_requested boolean) LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := holdfast.now();
    v_backend_start timestamptz;
BEGIN
    IF coalesce(array_length(p_agents, 1), 0) <> coalesce(array_length(p_epochs, 1), 0) THEN
        PERFORM holdfast.raise('HF422', 'agents and epochs must have the same length', 'epochs');
    END IF;
    SELECT s.backend_start INTO v_backend_start FROM pg_stat_get_activity(pg_backend_pid()) s;
    RETURN QUERY
    WITH wanted AS (
        SELECT w.agent_id, w.epoch FROM unnest(p_agents, p_epochs) AS w (agent_id, epoch)
    ), locked AS (
        SELECT a.id FROM holdfast.agents a JOIN wanted w ON w.agent_id = a.id
         WHERE a.state = 'running' AND a.lease_owner = p_worker
           AND a.lease_epoch = w.epoch AND a.lease_expires_at > v_now
         ORDER BY a.id
           FOR UPDATE OF a
    ), renewed AS (
        UPDATE holdfast.agents a
           SET lease_expires_at = v_now + p_ttl,
               lease_pid = pg_backend_pid(),
               lease_backend_start = v_backend_start
          FROM locked l
         WHERE a.id = l.id
           -- Re-checked after the lock: a reaper may have won the race.
           AND a.state = 'running' AND a.lease_owner = p_worker AND a.lease_expires_at > v_now
        RETURNING a.id, a.cancel_requested_at IS NOT NULL AS cancel_requested
    )
    SELECT w.agent_id, r.id IS NOT NULL, coalesce(r.cancel_requested, false)
      FROM wanted w LEFT JOIN renewed r ON r.id = w.agent_id;
END
$$;

-- Open waits only for the calls that have one (0005 ran open_tool_wait for
-- every tool_call.created event; it does nothing unless the call is
-- awaiting_approval, or a waiting question or command call, which the event
-- data says).
DROP TRIGGER _200_open_tool_wait ON holdfast.events;
CREATE TRIGGER _200_open_tool_wait AFTER INSERT ON holdfast.events
    FOR EACH ROW WHEN (NEW.type = 'tool_call.created'
                       AND (NEW.data ->> 'status' = 'awaiting_approval'
                            OR (NEW.data ->> 'status' = 'waiting'
                                AND NEW.data ->> 'kind' IN ('question', 'command'))))
    EXECUTE FUNCTION holdfast.tg_events_open_tool_wait();
