-- 0036_delivery_traces.sql — a webhook delivery belongs to its event's trace.
--
-- Adds webhook_deliveries.trace_parent / trace_state: the trace context of
-- the agent's turn when the event was written (agents.turn_trace_parent,
-- 0026), copied by the outbox trigger in the event's own transaction. The
-- dispatcher's span for each attempt is a child of it, and the request
-- carries that span as its `traceparent`, so a receiver's work joins the
-- trace of the turn that caused it. Copied, not joined at claim time: a
-- retry hours later must name the turn of its event, not the agent's
-- current one.

ALTER TABLE holdfast.webhook_deliveries
    ADD COLUMN trace_parent text,
    ADD COLUMN trace_state text;

-- claim_webhook_deliveries returns the two columns as well.
DROP FUNCTION IF EXISTS holdfast.claim_webhook_deliveries(integer, interval, integer);
