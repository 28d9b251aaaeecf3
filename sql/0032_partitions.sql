-- 0032_partitions.sql — time partitions for the timeline, and retention.
--
-- Adds: `events` re-created as a table range-partitioned by `created_at`
-- (one partition per UTC week, `events_wYYYYMMDD` named after its Monday,
-- plus `events_default` for rows outside every week); the keys widened to
-- carry `created_at` (a unique key of a partitioned table must contain the
-- partition key): primary key (agent_id, seq, created_at), unique
-- (id, created_at); `webhook_deliveries.event_created_at`, so the outbox
-- keeps its foreign key to the event it delivers; `projects.retention_events`
-- (NULL: keep forever); `tool_calls.output_pruned_at`. The triggers on
-- events and the audit views that read it are created again on the new
-- table, as they were.
--
-- Why the keys may widen: seq stays gap-free and unique per agent because
-- it comes from agents.last_event_seq under the agent's row lock (0001), not
-- from the index; the index only has to find rows by (agent_id, seq), which
-- its prefix still does. Event ids are UUIDv7, unique by construction.
--
-- Runs in the migration's transaction: the copy holds events exclusively
-- until it commits, so run it (like every migration) with the workers
-- stopped or expect them to wait for it.

-- The views read events; they go and come back below, unchanged.
DROP VIEW holdfast.agent_audit;
DROP VIEW holdfast.tool_call_audit;

ALTER TABLE holdfast.webhook_deliveries
    DROP CONSTRAINT webhook_deliveries_agent_id_event_seq_fkey,
    ADD COLUMN event_created_at timestamptz;

ALTER TABLE holdfast.events RENAME TO events_unpartitioned;

CREATE TABLE holdfast.events (
    agent_id   uuid NOT NULL REFERENCES holdfast.agents (id),
    seq        bigint NOT NULL CHECK (seq > 0),
    id         uuid NOT NULL DEFAULT holdfast.uuid_v7(),
    type       text NOT NULL,
    data       jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT holdfast.now()
) PARTITION BY RANGE (created_at);

CREATE TABLE holdfast.events_default PARTITION OF holdfast.events DEFAULT;

-- The weekly partitions for the rows being copied and the next two weeks,
-- named as holdfast.ensure_event_partitions (sql/functions/retention.sql)
-- names them; that function keeps creating them ahead from here on, and is
-- not defined yet while migrations run.
DO $$
DECLARE
    v_week timestamp := date_trunc('week',
        coalesce((SELECT min(created_at) FROM holdfast.events_unpartitioned), holdfast.now()) AT TIME ZONE 'UTC');
BEGIN
    WHILE v_week AT TIME ZONE 'UTC' < holdfast.now() + interval '14 days' LOOP
        EXECUTE format('CREATE TABLE holdfast.%I PARTITION OF holdfast.events FOR VALUES FROM (%L) TO (%L)',
                       'events_w' || to_char(v_week, 'YYYYMMDD'),
                       v_week AT TIME ZONE 'UTC', (v_week + interval '7 days') AT TIME ZONE 'UTC');
        v_week := v_week + interval '7 days';
    END LOOP;
END
$$;

INSERT INTO holdfast.events (agent_id, seq, id, type, data, created_at)
SELECT agent_id, seq, id, type, data, created_at FROM holdfast.events_unpartitioned;

DROP TABLE holdfast.events_unpartitioned;

ALTER TABLE holdfast.events ADD PRIMARY KEY (agent_id, seq, created_at);
ALTER TABLE holdfast.events ADD UNIQUE (id, created_at);

UPDATE holdfast.webhook_deliveries d
   SET event_created_at = e.created_at
  FROM holdfast.events e
 WHERE e.agent_id = d.agent_id AND e.seq = d.event_seq;
ALTER TABLE holdfast.webhook_deliveries
    ALTER COLUMN event_created_at SET NOT NULL,
    ADD CONSTRAINT webhook_deliveries_event_fkey FOREIGN KEY (agent_id, event_seq, event_created_at)
        REFERENCES holdfast.events (agent_id, seq, created_at);
-- Deleting events checks this key; pruning finds an agent's deliveries by it.
CREATE INDEX webhook_deliveries_event_idx ON holdfast.webhook_deliveries (agent_id, event_seq);

-- The triggers on events, as 0009 and 0020 left them.
CREATE TRIGGER _200_open_tool_wait AFTER INSERT ON holdfast.events
    FOR EACH ROW WHEN (NEW.type = 'tool_call.created'
                       AND (NEW.data ->> 'status' = 'awaiting_approval'
                            OR (NEW.data ->> 'status' = 'waiting'
                                AND NEW.data ->> 'kind' IN ('question', 'command'))))
    EXECUTE FUNCTION holdfast.tg_events_open_tool_wait();
CREATE TRIGGER _300_finish_subagent AFTER INSERT ON holdfast.events
    FOR EACH ROW WHEN (NEW.type IN ('turn.completed', 'turn.failed', 'turn.cancelled'))
    EXECUTE FUNCTION holdfast.tg_events_finish_subagent();
CREATE TRIGGER _500_webhook_outbox AFTER INSERT ON holdfast.events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION holdfast.tg_events_webhook_outbox();
CREATE TRIGGER _900_notify_events AFTER INSERT ON holdfast.events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION holdfast.tg_events_notify();

-- Retention: how long a project keeps the events, webhook deliveries and
-- tool outputs of its finished agents (NULL: forever). See
-- holdfast.prune_retention in sql/functions/retention.sql.
ALTER TABLE holdfast.projects
    ADD COLUMN retention_events interval CHECK (retention_events > interval '0');

-- A pruned tool output is JSON null, with the time it was pruned (the
-- row, its status and is_error stay).
ALTER TABLE holdfast.tool_calls ADD COLUMN output_pruned_at timestamptz;
-- How far retention has pruned an agent: nothing of it older than this is
-- left to prune, so passes skip it until it has events after this time.
ALTER TABLE holdfast.agents ADD COLUMN events_pruned_before timestamptz;

-- The audit views of 0021, unchanged.
CREATE VIEW holdfast.agent_audit AS
SELECT a.id AS agent_id,
       e.events,
       e.last_seq,
       e.events = e.last_seq AS gap_free,
       e.turns_completed,
       e.turns_failed,
       e.turns_cancelled,
       (SELECT count(*) FROM holdfast.steps s
         WHERE s.agent_id = a.id AND s.kind = 'model') AS model_steps,
       e.model_responses,
       (SELECT count(*) FROM holdfast.inputs i WHERE i.agent_id = a.id) AS inputs,
       (SELECT count(*) FROM holdfast.messages m
         WHERE m.agent_id = a.id AND m.input_id IS NOT NULL) AS inputs_in_history,
       (SELECT count(*) FROM holdfast.tool_calls t WHERE t.agent_id = a.id) AS tool_calls,
       e.tool_calls_completed,
       e.tool_calls_interrupted,
       e.approvals_answered,
       (SELECT count(*) FROM holdfast.commands c WHERE c.agent_id = a.id) AS commands,
       (SELECT count(*) FROM holdfast.commands c
         WHERE c.agent_id = a.id AND c.state <> 'finished') AS commands_unfinished
  FROM holdfast.agents a
 CROSS JOIN LATERAL (
       SELECT count(*) AS events,
              coalesce(max(ev.seq), 0) AS last_seq,
              count(*) FILTER (WHERE ev.type = 'turn.completed') AS turns_completed,
              count(*) FILTER (WHERE ev.type = 'turn.failed') AS turns_failed,
              count(*) FILTER (WHERE ev.type = 'turn.cancelled') AS turns_cancelled,
              count(*) FILTER (WHERE ev.type = 'model.response') AS model_responses,
              count(*) FILTER (WHERE ev.type = 'tool_call.completed') AS tool_calls_completed,
              count(*) FILTER (WHERE ev.type = 'tool_call.interrupted') AS tool_calls_interrupted,
              count(*) FILTER (WHERE ev.type = 'approval.answered') AS approvals_answered
         FROM holdfast.events ev
        WHERE ev.agent_id = a.id) e;

CREATE VIEW holdfast.tool_call_audit AS
SELECT t.id AS tool_call_id,
       t.agent_id,
       t.name,
       t.kind,
       t.status,
       t.created_at,
       t.position,
       e.results_saved,
       e.interrupted,
       e.commands_accepted,
       c.state AS command_state
  FROM holdfast.tool_calls t
 CROSS JOIN LATERAL (
       SELECT count(*) FILTER (WHERE ev.type = 'tool_call.completed') AS results_saved,
              count(*) FILTER (WHERE ev.type = 'tool_call.interrupted') AS interrupted,
              count(*) FILTER (WHERE ev.type = 'command.accepted') AS commands_accepted
         FROM holdfast.events ev
        WHERE ev.agent_id = t.agent_id
          AND ev.type IN ('tool_call.completed', 'tool_call.interrupted', 'command.accepted')
          AND ev.data ->> 'tool_call_id' = t.id::text) e
  LEFT JOIN holdfast.commands c ON c.tool_call_id = t.id;
