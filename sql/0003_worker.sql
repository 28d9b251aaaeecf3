-- 0003_worker.sql — what the worker's step cycle needs beyond the core.
--
-- Adds: durable model retries (commit_model_retry: the attempt count and the
-- next time live here, so a released worker holds nothing while waiting and a
-- crash resets nothing); turn failure (fail_turn); the worker half of cancel
-- (complete_cancel); live text deltas (stream_delta, never saved); a fresh
-- retry budget for each new input; and interruption of in-flight external
-- calls on an explicit release (drain), not only on a reap.

-- Complete every `running` (external, in-flight) tool call of an agent as
-- interrupted: its IO may or may not have happened, so it is never rerun and
-- the model is told. The caller holds the agent's row lock; the calls are
-- locked here in (step, position) order.
CREATE FUNCTION holdfast.interrupt_running_calls(p_agent uuid)
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

-- Reap (maintenance): as in 0001, now sharing interrupt_running_calls.
CREATE OR REPLACE FUNCTION holdfast.reap_agent(p_agent uuid, p_reason text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM holdfast.interrupt_running_calls(p_agent);
    UPDATE holdfast.agents SET lease_epoch = lease_epoch + 1 WHERE id = p_agent;
    PERFORM holdfast.settle_agent(p_agent);
    RAISE LOG 'holdfast: released agent % (%)', p_agent, p_reason;
END
$$;

-- Release (worker): a worker that gives up a lease mid-call (drain past its
-- timeout, a cancelled step) cannot know whether the IO happened either, so
-- its running calls are interrupted exactly as a reap would. Fenced (HF001).
CREATE OR REPLACE FUNCTION holdfast.release_agent(p_agent uuid, p_epoch bigint, p_run_after timestamptz DEFAULT NULL)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    PERFORM holdfast.interrupt_running_calls(p_agent);
    IF p_run_after IS NOT NULL THEN
        UPDATE holdfast.agents SET run_after = p_run_after WHERE id = p_agent;
    END IF;
    RETURN holdfast.settle_agent(p_agent);
END
$$;

-- A retryable model failure (429, 529, 5xx, timeout, cut stream): count the
-- attempt, record `model.retry`, and release the agent until now() + p_delay.
-- When the attempt would exceed p_max_retries, the turn fails instead
-- (`turn.failed`, error type retries_exhausted). Fenced (HF001).
-- Returns 'retrying' or 'exhausted'.
CREATE FUNCTION holdfast.commit_model_retry(
    p_agent uuid, p_epoch bigint, p_error jsonb, p_delay interval, p_max_retries integer)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_attempt integer;
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    UPDATE holdfast.agents SET model_attempts = model_attempts + 1 WHERE id = p_agent
    RETURNING model_attempts INTO v_attempt;
    IF v_attempt > p_max_retries THEN
        PERFORM holdfast.end_turn_with_error(p_agent, 'retries_exhausted',
            format('gave up after %s retries; last error: %s', p_max_retries, p_error ->> 'message'),
            '{}', p_error);
        RETURN 'exhausted';
    END IF;
    PERFORM holdfast.append_event(p_agent, 'model.retry', jsonb_build_object(
        'attempt', v_attempt,
        'delay_ms', floor(extract(epoch FROM p_delay) * 1000)::bigint,
        'error', p_error));
    UPDATE holdfast.agents SET run_after = holdfast.now() + p_delay WHERE id = p_agent;
    PERFORM holdfast.settle_agent(p_agent);
    RETURN 'retrying';
END
$$;

-- End the current turn with an error: the inputs the failed call saw become
-- history (so nothing the user said is lost), the error is recorded in the
-- history as an assistant note and as `turn.failed`, open tool calls are
-- cancelled, and the agent settles (idle, or a new turn for later inputs).
-- The caller holds the agent's row lock.
CREATE FUNCTION holdfast.end_turn_with_error(
    p_agent uuid, p_error_type text, p_message text, p_input_ids uuid[], p_detail jsonb DEFAULT NULL)
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
                 || CASE WHEN p_detail IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('detail', p_detail) END));
    PERFORM holdfast.settle_agent(p_agent);
END
$$;

-- Move one input into history as a user message. The caller holds the
-- agent's row lock.
CREATE FUNCTION holdfast.append_input_message(p_input holdfast.inputs, p_step uuid)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE holdfast.agents SET last_message_seq = last_message_seq + 1 WHERE id = p_input.agent_id;
    INSERT INTO holdfast.messages (agent_id, seq, role, content, step_id, input_id)
    SELECT p_input.agent_id, a.last_message_seq, 'user',
           CASE WHEN jsonb_typeof(p_input.content) = 'string'
                THEN jsonb_build_array(jsonb_build_object('type', 'text', 'text', p_input.content #>> '{}'))
                ELSE p_input.content END,
           p_step, p_input.id
      FROM holdfast.agents a WHERE a.id = p_input.agent_id;
    UPDATE holdfast.inputs SET consumed_at = holdfast.now() WHERE id = p_input.id;
END
$$;

-- A fatal model error (authentication_error, billing_error,
-- invalid_request_error, ...): end the turn at once, no retry. Fenced (HF001).
CREATE FUNCTION holdfast.fail_turn(
    p_agent uuid, p_epoch bigint, p_error_type text, p_message text, p_input_ids uuid[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    PERFORM holdfast.interrupt_running_calls(p_agent);
    PERFORM holdfast.end_turn_with_error(p_agent, p_error_type, p_message, p_input_ids);
END
$$;

-- The worker half of cancel: the step has stopped and saved nothing; cancel
-- the turn's open tool calls (later answers get HF409), close the turn with
-- `turn.cancelled`, and release. In-flight external calls are interrupted
-- first (their IO may have happened). Inputs that arrived meanwhile stay
-- pending and start a new turn. Fenced (HF001).
CREATE FUNCTION holdfast.complete_cancel(p_agent uuid, p_epoch bigint)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    PERFORM holdfast.interrupt_running_calls(p_agent);
    UPDATE holdfast.tool_calls SET status = 'cancelled'
     WHERE agent_id = p_agent AND status IN ('pending', 'awaiting_approval', 'waiting');
    UPDATE holdfast.agents
       SET turn_open = false, model_attempts = 0, cancel_requested_at = NULL
     WHERE id = p_agent;
    PERFORM holdfast.append_event(p_agent, 'turn.cancelled', '{}');
    RETURN holdfast.settle_agent(p_agent);
END
$$;

-- Send a live text delta to stream listeners (the API's SSE). Never saved:
-- a client that reconnects reads the finished response from the event log.
-- The payload stays under Postgres' 8000-byte NOTIFY limit: callers send at
-- most a few KiB of text per call, and longer text is refused (HF422).
CREATE FUNCTION holdfast.stream_delta(p_agent uuid, p_epoch bigint, p_text text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_payload text := jsonb_build_object('agent_id', p_agent, 'epoch', p_epoch, 'text', p_text)::text;
BEGIN
    IF octet_length(v_payload) >= 8000 THEN
        PERFORM holdfast.raise('HF422', 'delta too large for one notification', 'text');
    END IF;
    PERFORM pg_notify('holdfast_stream', v_payload);
END
$$;

-- Each new input starts a fresh model retry budget: a user who steers a
-- failing turn gets the full budget for the new attempt.
CREATE FUNCTION holdfast.tg_inputs_reset_retry_budget() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE holdfast.agents SET model_attempts = 0 WHERE id = NEW.agent_id AND model_attempts <> 0;
    RETURN NULL;
END
$$;
CREATE TRIGGER _100_reset_retry_budget AFTER INSERT ON holdfast.inputs
    FOR EACH ROW EXECUTE FUNCTION holdfast.tg_inputs_reset_retry_budget();
