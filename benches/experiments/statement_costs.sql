-- benches/experiments/statement_costs.sql — what one hot-path statement
-- costs in CPU, and which part of the table's setup that cost comes from.
--
-- Not a scenario: a psql script against a migrated database, timed inside
-- one transaction (no commit, so no WAL flush: CPU only), rolled back at
-- the end. Each variant is a copy of a Holdfast table with less of its
-- setup (constraints, triggers, indexes); each statement is the shape the
-- hot path runs (a keyed agent UPDATE that changes state; a two-row events
-- INSERT, as a tool result's settle writes). Two rounds, in opposite
-- orders; compare variants within a run, not across machines.
--
--   holdfast migrate --database-url URL
--   psql URL -v ON_ERROR_STOP=1 -q -f benches/experiments/statement_costs.sql

BEGIN;
SET LOCAL client_min_messages = warning;

CREATE SCHEMA statement_costs;
-- Ordinary tables (temporary ones would skip the WAL the real ones write).
SET LOCAL search_path = statement_costs, public;
CREATE TEMP TABLE cost_results (round int, statement text, variant text, us_per_statement numeric);

SELECT holdfast.ensure_project('statement-costs') AS project \gset
SELECT count(holdfast.create_agent(:'project',
                                   '{"model": {"provider": "anthropic", "name": "claude-x"}}')) AS agents
  FROM generate_series(1, 4000) \gset

-- The agent row: as shipped (5 CHECKs, 2 state triggers, 9 indexes), then
-- without the triggers, without the CHECKs as well, and with only its key.
CREATE TABLE agents_checks_indexes (LIKE holdfast.agents INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES);
CREATE TABLE agents_indexes (LIKE holdfast.agents INCLUDING DEFAULTS INCLUDING INDEXES);
CREATE TABLE agents_key (LIKE holdfast.agents INCLUDING DEFAULTS);
ALTER TABLE agents_key ADD PRIMARY KEY (id);
INSERT INTO agents_checks_indexes SELECT * FROM holdfast.agents;
INSERT INTO agents_indexes SELECT * FROM holdfast.agents;
INSERT INTO agents_key SELECT * FROM holdfast.agents;

-- The events table: as shipped (partitioned; two row triggers with WHEN
-- clauses, two statement triggers with a transition table, a foreign key),
-- an unpartitioned copy with the same four triggers, the same copy with the
-- four folded into one statement trigger, and a copy with the key and the
-- foreign key only.
CREATE TABLE events_four_triggers (LIKE holdfast.events INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE events_four_triggers ADD PRIMARY KEY (agent_id, seq, created_at),
    ADD UNIQUE (id, created_at), ADD FOREIGN KEY (agent_id) REFERENCES holdfast.agents (id);
CREATE TRIGGER _200_open_tool_wait AFTER INSERT ON events_four_triggers
    FOR EACH ROW WHEN (NEW.type = 'tool_call.created'
                       AND (NEW.data ->> 'status' = 'awaiting_approval'
                            OR (NEW.data ->> 'status' = 'waiting'
                                AND NEW.data ->> 'kind' IN ('question', 'command'))))
    EXECUTE FUNCTION holdfast.tg_events_open_tool_wait();
CREATE TRIGGER _300_finish_subagent AFTER INSERT ON events_four_triggers
    FOR EACH ROW WHEN (NEW.type IN ('turn.completed', 'turn.failed', 'turn.cancelled'))
    EXECUTE FUNCTION holdfast.tg_events_finish_subagent();
CREATE TRIGGER _500_webhook_outbox AFTER INSERT ON events_four_triggers
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION holdfast.tg_events_webhook_outbox();
CREATE TRIGGER _900_notify_events AFTER INSERT ON events_four_triggers
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION holdfast.tg_events_notify();

CREATE TABLE events_one_trigger (LIKE holdfast.events INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE events_one_trigger ADD PRIMARY KEY (agent_id, seq, created_at),
    ADD UNIQUE (id, created_at), ADD FOREIGN KEY (agent_id) REFERENCES holdfast.agents (id);
-- The four duties in one statement trigger, each query run as the four
-- triggers run theirs (the rows that open waits or end turns are looked
-- for, not acted on: none of the timed rows is such a row).
CREATE FUNCTION pg_temp.tg_events_one() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_row record;
BEGIN
    FOR v_row IN SELECT n.type, n.data FROM new_events n
                  WHERE n.type IN ('tool_call.created', 'turn.completed', 'turn.failed', 'turn.cancelled')
                  ORDER BY n.agent_id, n.seq LOOP
        RAISE EXCEPTION 'statement_costs.sql times rows that open no waits and end no turns';
    END LOOP;
    IF EXISTS (SELECT 1 FROM holdfast.webhook_endpoints e
                WHERE e.deleted_at IS NULL
                  AND e.project_id IN (SELECT a.project_id FROM new_events n
                                         JOIN holdfast.agents a ON a.id = n.agent_id)) THEN
        RAISE EXCEPTION 'statement_costs.sql times a database without webhook endpoints';
    END IF;
    PERFORM pg_notify('holdfast_events', n.agent_id::text)
       FROM (SELECT DISTINCT e.agent_id FROM new_events e) n
      WHERE current_setting('transaction_isolation') <> 'read committed'
         OR EXISTS (SELECT 1 FROM holdfast.stream_watches w WHERE w.agent_id = n.agent_id);
    RETURN NULL;
END
$$;
CREATE TRIGGER _500_events_inserted AFTER INSERT ON events_one_trigger
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.tg_events_one();

CREATE TABLE events_key (LIKE holdfast.events INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE events_key ADD PRIMARY KEY (agent_id, seq, created_at),
    ADD FOREIGN KEY (agent_id) REFERENCES holdfast.agents (id);

-- One agent UPDATE per row of the round's half of the agents (each row
-- once: a row updated again in one transaction walks its versions).
-- Static statements, so each is planned once and its plan kept, as on the
-- hot path (EXECUTE would plan every statement, and planning grows with
-- the table's indexes).
CREATE FUNCTION pg_temp.time_agent_updates(p_variant text, p_round int) RETURNS numeric
LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[] := ARRAY(SELECT id FROM holdfast.agents ORDER BY id
                           OFFSET (p_round - 1) * 2000 LIMIT 2000);
    v_state text := CASE WHEN p_round = 1 THEN 'waiting' ELSE 'idle' END;
    v_id uuid;
    v_started timestamptz := clock_timestamp();
BEGIN
    FOREACH v_id IN ARRAY v_ids LOOP
        CASE p_variant
            WHEN 'holdfast.agents' THEN
                UPDATE holdfast.agents SET state = v_state, updated_at = clock_timestamp() WHERE id = v_id;
            WHEN 'agents_checks_indexes' THEN
                UPDATE agents_checks_indexes SET state = v_state, updated_at = clock_timestamp() WHERE id = v_id;
            WHEN 'agents_indexes' THEN
                UPDATE agents_indexes SET state = v_state, updated_at = clock_timestamp() WHERE id = v_id;
            WHEN 'agents_key' THEN
                UPDATE agents_key SET state = v_state, updated_at = clock_timestamp() WHERE id = v_id;
        END CASE;
    END LOOP;
    RETURN round(extract(epoch FROM clock_timestamp() - v_started) * 1e6 / cardinality(v_ids), 1);
END
$$;

-- 3,000 two-row inserts for one agent (a tool result's settle:
-- tool_call.completed, then turn.started).
CREATE FUNCTION pg_temp.time_event_inserts(p_variant text, p_round int) RETURNS numeric
LANGUAGE plpgsql AS $$
DECLARE
    v_agent uuid := (SELECT id FROM holdfast.agents ORDER BY id LIMIT 1);
    v_types text[] := ARRAY['tool_call.completed', 'turn.started'];
    v_data jsonb := '{"tool_call_id": "x"}';
    v_seq bigint;
    v_started timestamptz := clock_timestamp();
BEGIN
    FOR v_i IN 1 .. 3000 LOOP
        v_seq := 1000000 * p_round + 2 * v_i;
        CASE p_variant
            WHEN 'holdfast.events' THEN
                INSERT INTO holdfast.events (agent_id, seq, type, data)
                SELECT v_agent, v_seq + e.ord, e.type, v_data FROM unnest(v_types) WITH ORDINALITY AS e (type, ord);
            WHEN 'events_four_triggers' THEN
                INSERT INTO events_four_triggers (agent_id, seq, type, data)
                SELECT v_agent, v_seq + e.ord, e.type, v_data FROM unnest(v_types) WITH ORDINALITY AS e (type, ord);
            WHEN 'events_one_trigger' THEN
                INSERT INTO events_one_trigger (agent_id, seq, type, data)
                SELECT v_agent, v_seq + e.ord, e.type, v_data FROM unnest(v_types) WITH ORDINALITY AS e (type, ord);
            WHEN 'events_key' THEN
                INSERT INTO events_key (agent_id, seq, type, data)
                SELECT v_agent, v_seq + e.ord, e.type, v_data FROM unnest(v_types) WITH ORDINALITY AS e (type, ord);
        END CASE;
    END LOOP;
    RETURN round(extract(epoch FROM clock_timestamp() - v_started) * 1e6 / 3000, 1);
END
$$;

INSERT INTO cost_results
SELECT 1, 'agent UPDATE', v, pg_temp.time_agent_updates(v, 1)
  FROM unnest(ARRAY['holdfast.agents', 'agents_checks_indexes', 'agents_indexes', 'agents_key']) AS v;
INSERT INTO cost_results
SELECT 2, 'agent UPDATE', v, pg_temp.time_agent_updates(v, 2)
  FROM unnest(ARRAY['agents_key', 'agents_indexes', 'agents_checks_indexes', 'holdfast.agents']) AS v;
INSERT INTO cost_results
SELECT 1, 'events INSERT (2 rows)', v, pg_temp.time_event_inserts(v, 1)
  FROM unnest(ARRAY['holdfast.events', 'events_four_triggers', 'events_one_trigger', 'events_key']) AS v;
INSERT INTO cost_results
SELECT 2, 'events INSERT (2 rows)', v, pg_temp.time_event_inserts(v, 2)
  FROM unnest(ARRAY['events_key', 'events_one_trigger', 'events_four_triggers', 'holdfast.events']) AS v;

\pset format aligned
SELECT statement, variant,
       max(us_per_statement) FILTER (WHERE round = 1) AS "round 1 µs",
       max(us_per_statement) FILTER (WHERE round = 2) AS "round 2 µs"
  FROM cost_results
 GROUP BY statement, variant
 ORDER BY statement, max(us_per_statement) DESC;

ROLLBACK;
