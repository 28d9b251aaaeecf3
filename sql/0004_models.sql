-- 0004_models.sql — context compaction.
--
-- Adds: a per-agent summary of older history and the point from which the
-- history is sent verbatim. When a context grows too long for its model, the
-- worker summarises the older part with a model call (itself a durable step,
-- retried like any other) and commits the summary here; later requests are
-- built from the summary plus the messages from context_start_seq on. The
-- old messages stay in the table (nothing a DBA can audit is deleted).

ALTER TABLE holdfast.agents
    ADD COLUMN context_summary text,
    ADD COLUMN context_start_seq bigint NOT NULL DEFAULT 0;

-- Save a compaction: the summary (which covers every message before
-- p_keep_from_seq, including any earlier summary) and a `context.compacted`
-- event, in one transaction; then release the agent (its turn is still
-- open, so it is ready for the model call at once). Fenced (HF001).
-- Raises HF422 when p_keep_from_seq does not move the start forward.
CREATE FUNCTION holdfast.commit_compaction(
    p_agent uuid, p_epoch bigint, p_summary text, p_keep_from_seq bigint, p_usage jsonb)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_agent holdfast.agents;
    v_replaced bigint;
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
    UPDATE holdfast.agents
       SET context_summary = p_summary, context_start_seq = p_keep_from_seq, model_attempts = 0
     WHERE id = p_agent;
    PERFORM holdfast.append_event(p_agent, 'context.compacted', jsonb_build_object(
        'summary', p_summary, 'replaced_messages', v_replaced,
        'keep_from_seq', p_keep_from_seq, 'usage', coalesce(p_usage, '{}')));
    PERFORM holdfast.settle_agent(p_agent);
END
$$;

-- commit_model_retry, now told which inputs the failed call saw: when the
-- budget is exhausted those inputs become history with the error (as with
-- any failed turn), instead of staying pending and starting a new turn that
-- would fail the same way. (Replaces the 0003 signature.)
DROP FUNCTION holdfast.commit_model_retry(uuid, bigint, jsonb, interval, integer);
CREATE FUNCTION holdfast.commit_model_retry(
    p_agent uuid, p_epoch bigint, p_error jsonb, p_delay interval, p_max_retries integer,
    p_input_ids uuid[])
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
            p_input_ids, p_error);
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
