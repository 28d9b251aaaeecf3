-- 0006_cancel.sql — one way to end a cancelled turn.
--
-- The API's request_cancel (0002) ends the turn of an unleased agent with
-- cancel_turn; the worker's complete_cancel (0003) ended it on its own.
-- Now both go through cancel_turn, so a cancelled turn looks the same in
-- the timeline (`turn.cancelled {cancelled_tool_calls}`) whichever side
-- finished it. The worker first interrupts its in-flight external calls:
-- their IO may have happened, which `tool_call.interrupted` says and a bare
-- `cancelled` would hide.
CREATE OR REPLACE FUNCTION holdfast.complete_cancel(p_agent uuid, p_epoch bigint)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    PERFORM holdfast.interrupt_running_calls(p_agent);
    PERFORM holdfast.cancel_turn(p_agent);
    UPDATE holdfast.agents SET model_attempts = 0 WHERE id = p_agent;
    RETURN holdfast.settle_agent(p_agent);
END
$$;

-- cancel_turn, now also retiring the inputs of the cancelled turn: every
-- input that arrived before the cancel was requested (before now, for an
-- immediate cancel) becomes history, so the cancelled turn does not start
-- again by itself. Inputs sent after the cancel request start the next turn.
-- (Replaces 0002's body; same signature and events.) The caller holds the
-- agent's row lock.
CREATE OR REPLACE FUNCTION holdfast.cancel_turn(p_agent uuid)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_cancelled jsonb;
    v_cutoff timestamptz;
    v_input holdfast.inputs;
BEGIN
    SELECT coalesce(cancel_requested_at, holdfast.now()) INTO v_cutoff
      FROM holdfast.agents WHERE id = p_agent;
    FOR v_input IN
        SELECT * FROM holdfast.inputs
         WHERE agent_id = p_agent AND consumed_at IS NULL AND created_at <= v_cutoff
         ORDER BY created_at, id
    LOOP
        PERFORM holdfast.append_input_message(v_input, NULL);
    END LOOP;
    WITH open AS (
        SELECT t.id FROM holdfast.tool_calls t
         WHERE t.agent_id = p_agent AND t.status NOT IN ('completed', 'cancelled')
         ORDER BY t.id
           FOR UPDATE
    ), cancelled AS (
        UPDATE holdfast.tool_calls t
           SET status = 'cancelled', running_epoch = NULL, completed_at = holdfast.now()
          FROM open o
         WHERE t.id = o.id
        RETURNING t.id, t.created_at, t.position
    )
    SELECT coalesce(jsonb_agg(c.id ORDER BY c.created_at, c.position), '[]') INTO v_cancelled FROM cancelled c;
    UPDATE holdfast.agents
       SET turn_open = false, cancel_requested_at = NULL, updated_at = holdfast.now()
     WHERE id = p_agent;
    RETURN holdfast.append_event(p_agent, 'turn.cancelled', jsonb_build_object('cancelled_tool_calls', v_cancelled));
END
$$;
