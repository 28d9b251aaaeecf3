-- 0026_traces.sql — W3C trace context for OpenTelemetry traces (docs/api.md,
-- "Tracing"): one trace per turn, whose steps are children of the trace
-- context the turn's first input brought.
--
-- Adds:
--   inputs.trace_parent, inputs.trace_state   the traceparent/tracestate
--       headers the input was posted with (checked and canonical; the API
--       refuses malformed ones), NULL without;
--   agents.turn_trace_parent, agents.turn_trace_state   the parent of the
--       open turn's spans: the first input's, or one made up when it brought
--       none, so every step of a turn is in one trace. Set by
--       settle_agent_with when it opens a turn;
--   agents.lost_attempt_epoch, lost_attempt_started_at, lost_attempt_ended_at,
--   agents.first_attempt_epoch   the step attempt whose holder died (set by
--       reap_agent, cleared by every settle): the next attempt emits the lost
--       attempt's span (span ids derive from agent and epoch, so nothing else
--       is stored) and links to the first attempt of the step.
-- create_input_or_replay takes the trace context (two trailing parameters);
-- the old three-parameter form is dropped.

ALTER TABLE holdfast.inputs
    ADD COLUMN trace_parent text
        CHECK (trace_parent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'),
    ADD COLUMN trace_state text CHECK (length(trace_state) <= 512),
    ADD CONSTRAINT inputs_trace_state_needs_parent
        CHECK (trace_state IS NULL OR trace_parent IS NOT NULL);

ALTER TABLE holdfast.agents
    ADD COLUMN turn_trace_parent text
        CHECK (turn_trace_parent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'),
    ADD COLUMN turn_trace_state text,
    ADD COLUMN first_attempt_epoch bigint,
    ADD COLUMN lost_attempt_epoch bigint,
    ADD COLUMN lost_attempt_started_at timestamptz,
    ADD COLUMN lost_attempt_ended_at timestamptz,
    ADD CONSTRAINT agents_lost_attempt_complete CHECK (
        (lost_attempt_epoch IS NULL) = (first_attempt_epoch IS NULL)
        AND (lost_attempt_epoch IS NULL) = (lost_attempt_started_at IS NULL)
        AND (lost_attempt_epoch IS NULL) = (lost_attempt_ended_at IS NULL));

DROP FUNCTION holdfast.create_input_or_replay(uuid, jsonb, text);
