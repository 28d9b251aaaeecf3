-- Candidate fix: the webhook outbox trigger runs (and plans: a custom plan
-- per event, ~0.25 ms) an INSERT ... SELECT for every event written, even
-- when no webhook endpoint exists. Return first when there is none.
-- Same semantics: with no live endpoint the INSERT inserts nothing.
CREATE OR REPLACE FUNCTION holdfast.tg_events_webhook_outbox() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_inserted integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM holdfast.webhook_endpoints WHERE deleted_at IS NULL) THEN
        RETURN NULL;
    END IF;
    INSERT INTO holdfast.webhook_deliveries (endpoint_id, agent_id, event_seq, event_id, event_type, next_attempt_at)
    SELECT e.id, NEW.agent_id, NEW.seq, NEW.id, NEW.type, holdfast.now()
      FROM holdfast.webhook_endpoints e
     WHERE e.project_id = (SELECT a.project_id FROM holdfast.agents a WHERE a.id = NEW.agent_id)
       AND e.deleted_at IS NULL
       AND ('*' = ANY (e.events) OR NEW.type = ANY (e.events));
    GET DIAGNOSTICS v_inserted = ROW_COUNT;
    IF v_inserted > 0 THEN
        PERFORM pg_notify('holdfast_webhooks', '');
    END IF;
    RETURN NULL;
END
$$;
