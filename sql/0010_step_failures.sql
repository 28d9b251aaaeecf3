-- 0010: contained step failures (issue 16).
--
-- A step that fails with anything but a lost lease (a panic in the worker, a
-- config the worker can't represent, a database error) used to release its
-- agent ready at once, so the next claim failed the same way: a hot loop,
-- each pass possibly a billed model call. Now such a failure is counted on
-- the agent and the agent is released with a durable delay (run_after, the
-- worker's jittered backoff); after p_max_attempts failures in a row the
-- turn ends with `turn.failed` {"type": "internal_error"} and the cause in
-- history. The count survives crashes (it is a column) and is reset whenever
-- the agent settles any other way (a step committed, a retry recorded, a
-- turn ended or cancelled).

ALTER TABLE holdfast.agents
    ADD COLUMN step_failures integer NOT NULL DEFAULT 0 CHECK (step_failures >= 0);

-- settle_agent_with (0009), now also resetting step_failures: every way a
-- step ends well goes through it (commits, releases, retries, turn ends).
-- fail_step sets the count again after its settle. Unchanged otherwise.
-- The caller holds the agent's row lock.
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
           step_failures = 0,
           run_after = coalesce(p_run_after, run_after),
           last_event_seq = last_event_seq + cardinality(v_types),
           last_event_at = CASE WHEN cardinality(v_types) > 0 THEN holdfast.now() ELSE last_event_at END
     WHERE id = p_agent
    RETURNING last_event_seq INTO v_last_seq;
    PERFORM holdfast.insert_reserved_events(p_agent, v_last_seq, v_types, v_data);
    RETURN v_state;
END
$$;

-- A step failed with something other than a lost lease (p_message says
-- what). Counts the failure; below p_max_attempts the agent is released
-- (running external calls interrupted, as in release_agent) until
-- now() + p_delay and 'retrying' is returned; at p_max_attempts the turn
-- ends with `turn.failed` {"type": "internal_error", "message": ...}, the
-- cause in history, and 'failed' is returned; the inputs still pending become
-- history with it (a new turn from them would fail the same way).
-- Locks the agent row (fenced: HF001 when the lease is not p_epoch's).
-- Raises HF422 for a negative delay or a max below 1.
CREATE FUNCTION holdfast.fail_step(
    p_agent uuid, p_epoch bigint, p_message text, p_delay interval, p_max_attempts integer)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_failures integer;
BEGIN
    IF p_delay IS NULL OR p_delay < '0'::interval THEN
        PERFORM holdfast.raise('HF422', 'delay must not be negative', 'delay');
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        PERFORM holdfast.raise('HF422', 'max attempts must be at least 1', 'max_attempts');
    END IF;
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    SELECT step_failures + 1 INTO v_failures FROM holdfast.agents WHERE id = p_agent;
    PERFORM holdfast.interrupt_running_calls(p_agent);
    IF v_failures >= p_max_attempts THEN
        PERFORM holdfast.end_turn_with_error(p_agent, 'internal_error',
            format('a step failed %s times in a row; last error: %s', v_failures, p_message),
            ARRAY(SELECT id FROM holdfast.inputs WHERE agent_id = p_agent AND consumed_at IS NULL));
        RETURN 'failed';
    END IF;
    PERFORM holdfast.settle_agent_with(p_agent, '{}', '{}', holdfast.now() + p_delay);
    UPDATE holdfast.agents SET step_failures = v_failures WHERE id = p_agent;
    RETURN 'retrying';
END
$$;
