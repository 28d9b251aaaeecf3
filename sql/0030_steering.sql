-- 0030_steering.sql — steering modes per input (issue 19).
--
-- Adds to holdfast.inputs:
--   mode         'steer' (the default, the behaviour before: the next model
--                call of the open turn sees it), 'queue' (waits for the
--                open turn to end, then opens the next turn by itself) or
--                'interrupt' (as steer, and an in-flight model call of the
--                turn is aborted and made again with it; a running tool
--                call is never interrupted);
--   admitted_at  when the input joined a turn: at once for steer and
--                interrupt, when a turn opens for it for queue (NULL while
--                it waits); only admitted inputs are a turn's inputs
--                (holdfast.turn_inputs);
--   removed_at   when a queued input was taken back (remove_input) before
--                a turn admitted it: it is never consumed.
-- Existing inputs are steer inputs, admitted when they were created.
--
-- The functions (turn_inputs, admit_queued_input, remove_input,
-- commit_model_interrupt, and create_input_or_replay with p_mode,
-- renew_leases with interrupt_input) are in
-- sql/functions/*.sql. Here: the columns, an index of queued inputs,
-- agent_overview not counting removed inputs, and the old signatures dropped.

ALTER TABLE holdfast.inputs
    ADD COLUMN mode text NOT NULL DEFAULT 'steer' CHECK (mode IN ('steer', 'queue', 'interrupt')),
    ADD COLUMN admitted_at timestamptz,
    ADD COLUMN removed_at timestamptz;
UPDATE holdfast.inputs SET admitted_at = created_at;
ALTER TABLE holdfast.inputs
    ALTER COLUMN admitted_at SET DEFAULT holdfast.now(),
    -- Only a queued input waits to be admitted, and only a waiting one
    -- can be removed.
    ADD CONSTRAINT inputs_admitted_unless_queued CHECK (mode = 'queue' OR admitted_at IS NOT NULL),
    ADD CONSTRAINT inputs_removed_not_admitted CHECK (removed_at IS NULL OR (admitted_at IS NULL AND consumed_at IS NULL));

-- The queued inputs of an agent, oldest first (admit_queued_input, the API's list).
CREATE INDEX inputs_queued_idx ON holdfast.inputs (agent_id, created_at, id)
    WHERE admitted_at IS NULL AND removed_at IS NULL;

DROP FUNCTION IF EXISTS holdfast.create_input_or_replay(uuid, jsonb, text, text, text);
DROP FUNCTION IF EXISTS holdfast.renew_leases(text, uuid[], bigint[], interval);

-- agent_overview (0001) with pending_inputs leaving out removed inputs
-- (queued ones count: they are waiting work).
CREATE OR REPLACE VIEW holdfast.agent_overview AS
SELECT a.id AS agent_id,
       a.project_id,
       a.state,
       a.turn_open,
       a.lease_owner,
       a.lease_epoch,
       a.lease_expires_at,
       a.lease_pid,
       a.run_after,
       (SELECT count(*) FROM holdfast.tool_calls t
         WHERE t.agent_id = a.id AND t.status NOT IN ('completed', 'cancelled')) AS pending_tool_calls,
       (SELECT count(*) FROM holdfast.inputs i
         WHERE i.agent_id = a.id AND i.consumed_at IS NULL AND i.removed_at IS NULL) AS pending_inputs,
       a.last_event_seq,
       a.last_event_at,
       a.state_changed_at,
       a.created_at
  FROM holdfast.agents a;
