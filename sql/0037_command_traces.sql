-- 0037_command_traces.sql — a machine command belongs to its turn's trace.
--
-- Adds commands.trace_parent / trace_state: the trace context of the
-- agent's turn when the run_command call was queued (queue_command, in the
-- step's or the approval's transaction). claim_commands hands it to the
-- machine daemon, whose span for the run is a child of it (docs/api.md,
-- "Tracing").

ALTER TABLE holdfast.commands
    ADD COLUMN trace_parent text,
    ADD COLUMN trace_state text;

-- claim_commands returns the two columns as well.
DROP FUNCTION IF EXISTS holdfast.claim_commands(uuid, integer, uuid);
