-- Experiment (sql_steps only): the hot tables without their CHECK
-- constraints, and events and agents without the triggers that a
-- `sql_steps` cycle does not need (no webhook endpoint, no stream watch,
-- no wait-opening call, no subagent, no LISTENing worker). An upper bound
-- of what the per-statement setup of CHECKs and triggers costs a step end
-- to end; never for a real database: it drops integrity checks.
-- `_100_state_changed` stays: the claim orders by state_changed_at.
DO $$
DECLARE
    v record;
BEGIN
    FOR v IN SELECT c.conrelid::regclass AS rel, c.conname
               FROM pg_constraint c
              WHERE c.contype = 'c' AND c.conparentid = 0
                AND c.conrelid IN ('holdfast.agents'::regclass, 'holdfast.steps'::regclass,
                                   'holdfast.messages'::regclass, 'holdfast.tool_calls'::regclass,
                                   'holdfast.events'::regclass, 'holdfast.inputs'::regclass) LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', v.rel, v.conname);
    END LOOP;
END
$$;
DROP TRIGGER _200_open_tool_wait ON holdfast.events;
DROP TRIGGER _300_finish_subagent ON holdfast.events;
DROP TRIGGER _500_webhook_outbox ON holdfast.events;
DROP TRIGGER _900_notify_events ON holdfast.events;
DROP TRIGGER _900_notify_ready ON holdfast.agents;
