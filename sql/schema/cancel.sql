-- sql/schema/cancel.sql — cancelling a turn, from the API and from the worker.
--
-- This area's current schema: its tables, indexes and views first, then,
-- after the line below, its functions and triggers.
-- Each object is defined here once, as it is now. See docs/sql.md for how
-- a fresh install applies these files and how a change is added.

-- Children whose parent's spawn_subagent call was cancelled while their row
-- was locked by someone else: maintenance_tick cancels their turns. No
-- foreign keys on purpose: a key check would take a share lock on the
-- busy child's row, the very wait this table exists to avoid.
CREATE TABLE holdfast.subagent_cancels (
    tool_call_id uuid NOT NULL,
    child_agent_id uuid NOT NULL,
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT subagent_cancels_pkey PRIMARY KEY (tool_call_id)
);

-- ==== functions and triggers ====

-- Cancel an agent's turn from the API: the work is cancel_locked_turn
-- (shared with the cascade). Locks the agent row. Raises HF404, HF409 (idle
-- or archived: no turn to cancel). Returns 'requested' (a worker holds the
-- turn and will stop it) or 'cancelled' (done here).
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

-- End an agent's open turn as cancelled: every tool call not yet finished
-- (pending, awaiting_approval, waiting, running) becomes cancelled, so later
-- answers to them get HF409, and so does a pending budget approval; the turn closes; a pending cancel request is
-- cleared; turn.cancelled is appended with the cancelled calls' ids. Every
-- input that arrived before the cancel was requested (before now, for an
-- immediate cancel) becomes history, so the cancelled turn does not start
-- again by itself; inputs sent after the request, and queued inputs (not the
-- turn's: turn_inputs), start the next turn. The agent is settled with
-- turn.cancelled (settle_agent; p_model_attempts as it takes it). The
-- caller holds the agent's row lock (request_cancel; the worker's
-- complete_cancel after its step has stopped). Returns the settled state.
CREATE OR REPLACE FUNCTION holdfast.cancel_turn(p_agent uuid, p_model_attempts integer DEFAULT NULL)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_cancelled jsonb;
    v_cutoff timestamptz;
    v_input holdfast.inputs;
BEGIN
    SELECT coalesce(cancel_requested_at, holdfast.now()) INTO v_cutoff
      FROM holdfast.agents WHERE id = p_agent;
    FOR v_input IN
        SELECT * FROM holdfast.turn_inputs(p_agent) i WHERE i.created_at <= v_cutoff
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
    UPDATE holdfast.approvals SET status = 'cancelled'
     WHERE agent_id = p_agent AND kind = 'budget' AND status = 'pending';
    UPDATE holdfast.agents SET cancel_requested_at = NULL WHERE id = p_agent AND cancel_requested_at IS NOT NULL;
    RETURN (holdfast.settle_agent(p_agent, ARRAY['turn.cancelled'],
        ARRAY[jsonb_build_object('cancelled_tool_calls', v_cancelled)], NULL,
        p_turn_open => false, p_model_attempts => p_model_attempts)).state;
END
$$;

-- The worker half of cancel: the step has stopped and saved nothing. Its
-- in-flight external calls are interrupted first (their IO may have
-- happened, which `tool_call.interrupted` says and a bare `cancelled` would
-- hide), then the turn ends through cancel_turn, so a cancelled turn looks
-- the same in the timeline whichever side finished it, and the agent is
-- released. Fenced (HF001).
CREATE OR REPLACE FUNCTION holdfast.complete_cancel(p_agent uuid, p_epoch bigint)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    PERFORM holdfast.interrupt_running_calls(p_agent);
    RETURN holdfast.cancel_turn(p_agent, p_model_attempts => 0);
END
$$;

-- End a locked agent's current turn the way a client's cancel does: a
-- running agent gets a cancel request (its worker stops the step and calls
-- complete_cancel; holdfast_cancel is notified), a ready or waiting one is
-- cancelled at once (cancel_turn). Returns 'requested',
-- 'cancelled', or NULL for an idle or archived agent (no turn). The caller
-- holds the agent's row lock.
CREATE OR REPLACE FUNCTION holdfast.cancel_locked_turn(p_agent holdfast.agents)
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
    RETURN 'cancelled';
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
CREATE OR REPLACE FUNCTION holdfast.tg_tool_calls_cancel_subagent() RETURNS trigger
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
