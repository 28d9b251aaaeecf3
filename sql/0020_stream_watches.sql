-- 0020_stream_watches.sql — NOTIFY holdfast_events only for agents someone streams.
--
-- Every commit that sends a NOTIFY holds the notify queue's lock across its
-- WAL flush, so such commits run one at a time (on a durable cluster most of
-- the workers' in-statement time was that wait). An events hint is only
-- worth sending when a listener follows the agent, so the API registers the
-- agents it streams here, and the events trigger notifies only those.
--
-- Adds:
-- - holdfast.stream_watches: one row per agent feed of an API process
--   (`id` chosen by the API), with the pid and start time of the API's
--   LISTEN session, which is where the hints go. Unlogged: it holds no
--   history, and after a crash every LISTEN session is new anyway (the API
--   re-registers its feeds when its LISTEN session reconnects).
--   Registered by watch_agent_events, dropped by unwatch_agent_events, and
--   swept by maintenance_tick once the LISTEN session is gone.
-- - The events NOTIFY trigger and the webhook outbox trigger become
--   statement-level, over the statement's new rows (a transition table):
--   one check (hint) and one outbox INSERT per statement that writes
--   events, instead of a trigger call of each per event row.
-- The functions are in sql/functions/events.sql (maintenance_tick in
-- leases.sql, the outbox trigger's in webhooks.sql).

CREATE UNLOGGED TABLE holdfast.stream_watches (
    id uuid PRIMARY KEY,
    agent_id uuid NOT NULL,
    listener_pid integer NOT NULL,
    listener_backend_start timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX stream_watches_agent_idx ON holdfast.stream_watches (agent_id);

DROP TRIGGER _900_notify_events ON holdfast.events;
CREATE TRIGGER _900_notify_events AFTER INSERT ON holdfast.events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION holdfast.tg_events_notify();

DROP TRIGGER _500_webhook_outbox ON holdfast.events;
CREATE TRIGGER _500_webhook_outbox AFTER INSERT ON holdfast.events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION holdfast.tg_events_webhook_outbox();
