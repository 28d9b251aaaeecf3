-- sql/schema/retention.sql — time partitions of events and per-project retention: creating upcoming partitions, dropping expired ones, bounded deletes of the rest.
--
-- This area's current schema: its tables, indexes and views first, then,
-- after the line below, its functions and triggers.
-- Each object is defined here once, as it is now. See docs/sql.md for how
-- a fresh install applies these files and how a change is added.
--
-- What retention may remove, per project with retention_events set: the
-- events older than now - retention_events of its *finished* agents (no
-- open turn, state idle or archived), their delivered or failed webhook
-- deliveries, the outputs of their tool calls completed before then, the
-- content of their inputs consumed or removed before then, and their
-- attachments stored before then that nothing kept references (no
-- unpruned input or tool output, and, for an agent that may run again —
-- not archived — no message of its context).
-- Never: anything of an agent with an open turn (or one about to run), a
-- pending delivery (the outbox) or the event it delivers, the agent row,
-- its messages (what the next model call is built from, including a
-- compaction's summary in agents.context_summary), its tool call and input
-- rows, a file its next model call would send.

-- ==== functions and triggers ====

-- Create the weekly partitions covering [p_from, p_until) that are missing
-- (`events_wYYYYMMDD`, named after the week's Monday, UTC). A week whose
-- rows already sit in the default partition is left there (Postgres
-- refuses the new partition; the week is skipped, not an error), as is one
-- another session created at the same time, and, under a lock_timeout, one
-- whose locks were not granted in time. Returns how many partitions it
-- created.
CREATE OR REPLACE FUNCTION holdfast.ensure_event_partitions(p_from timestamptz, p_until timestamptz)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_week timestamp := date_trunc('week', p_from AT TIME ZONE 'UTC');
    v_name text;
    v_created integer := 0;
BEGIN
    WHILE v_week AT TIME ZONE 'UTC' < p_until LOOP
        v_name := 'events_w' || to_char(v_week, 'YYYYMMDD');
        IF to_regclass('holdfast.' || v_name) IS NULL THEN
            BEGIN
                EXECUTE format('CREATE TABLE holdfast.%I PARTITION OF holdfast.events FOR VALUES FROM (%L) TO (%L)',
                               v_name, v_week AT TIME ZONE 'UTC', (v_week + interval '7 days') AT TIME ZONE 'UTC');
                v_created := v_created + 1;
            EXCEPTION
                WHEN check_violation THEN
                    RAISE NOTICE 'events of the week of % stay in events_default', v_week::date;
                -- Another maintenance process created it first (a race on
                -- the catalog's unique index when both were in flight).
                WHEN duplicate_table OR unique_violation THEN
                    NULL;
                -- Under a caller's lock_timeout (maintain_event_partitions):
                -- a busy events table; the next pass creates it.
                WHEN lock_not_available THEN
                    RAISE NOTICE 'events is busy; the week of % is created next time', v_week::date;
            END;
        END IF;
        v_week := v_week + interval '7 days';
    END LOOP;
    RETURN v_created;
END
$$;

-- The weekly partitions of events, oldest first, with their ranges and
-- (estimated, from the planner's statistics) row counts.
CREATE OR REPLACE FUNCTION holdfast.event_partitions()
RETURNS TABLE (name text, starts_at timestamptz, ends_at timestamptz, estimated_rows bigint)
LANGUAGE sql STABLE AS $$
    SELECT c.relname::text,
           to_date(substr(c.relname, 9), 'YYYYMMDD')::timestamp AT TIME ZONE 'UTC',
           (to_date(substr(c.relname, 9), 'YYYYMMDD') + 7)::timestamp AT TIME ZONE 'UTC',
           greatest(c.reltuples, 0)::bigint
      FROM pg_inherits i
      JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'holdfast.events'::regclass
       AND c.relname ~ '^events_w[0-9]{8}$'
     ORDER BY c.relname
$$;

-- Set how long a project keeps its finished agents' events, deliveries,
-- tool outputs, input contents and attachments (NULL: forever). Raises HF404 (project), HF422 (not positive).
CREATE OR REPLACE FUNCTION holdfast.set_project_retention(p_project_name text, p_events interval)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_events <= interval '0' THEN
        PERFORM holdfast.raise('HF422', 'retention must be positive (NULL: forever)', 'retention_events');
    END IF;
    UPDATE holdfast.projects SET retention_events = p_events WHERE name = p_project_name;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('project %s not found', p_project_name));
    END IF;
END
$$;

-- Drop the weekly partitions in which every row may go: each of its agents
-- is finished and in a project whose retention ends after the partition
-- does, and none of its events has a pending delivery. The agents are
-- locked (FOR SHARE) before the last check, so none opens a turn until the
-- drop commits; their delivered and failed deliveries go first. Every
-- partition is checked before any is detached: once a detach holds the
-- ACCESS EXCLUSIVE lock of events, nothing but the other detaches and
-- drops waits on a lock. A check or drop that cannot get its locks within
-- p_lock_timeout skips that partition (retried next pass) rather than
-- making every writer of events queue behind it. Returns how many
-- partitions it dropped.
CREATE OR REPLACE FUNCTION holdfast.drop_expired_event_partitions(p_lock_timeout interval DEFAULT '500 milliseconds')
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := holdfast.now();
    v_part record;
    v_agents uuid[];
    v_blocked boolean;
    v_droppable text[] := '{}';
    v_dropped integer := 0;
    v_old_timeout text := current_setting('lock_timeout');
BEGIN
    PERFORM set_config('lock_timeout', (extract(epoch FROM p_lock_timeout) * 1000)::bigint::text, true);
    FOR v_part IN
        SELECT p.name, p.starts_at, p.ends_at FROM holdfast.event_partitions() p
         WHERE p.ends_at <= v_now - (SELECT min(retention_events) FROM holdfast.projects)
         ORDER BY p.starts_at
    LOOP
        BEGIN
            EXECUTE format('SELECT coalesce(array_agg(DISTINCT agent_id), ''{}'') FROM holdfast.%I', v_part.name)
               INTO v_agents;
            PERFORM 1 FROM holdfast.agents a WHERE a.id = ANY (v_agents) ORDER BY a.id FOR SHARE;
            SELECT EXISTS (
                       SELECT 1 FROM holdfast.agents a
                         JOIN holdfast.projects p ON p.id = a.project_id
                        WHERE a.id = ANY (v_agents)
                          AND (a.turn_open OR a.state NOT IN ('idle', 'archived')
                               OR p.retention_events IS NULL
                               OR v_part.ends_at > v_now - p.retention_events))
                OR EXISTS (
                       SELECT 1 FROM holdfast.webhook_deliveries d
                        WHERE d.agent_id = ANY (v_agents) AND d.status = 'pending'
                          AND d.event_created_at >= v_part.starts_at AND d.event_created_at < v_part.ends_at)
              INTO v_blocked;
            IF NOT v_blocked THEN
                DELETE FROM holdfast.webhook_deliveries d
                 WHERE d.agent_id = ANY (v_agents)
                   AND d.event_created_at >= v_part.starts_at AND d.event_created_at < v_part.ends_at;
                v_droppable := v_droppable || v_part.name;
            END IF;
        EXCEPTION WHEN lock_not_available THEN
            RAISE NOTICE 'partition % is busy; dropping it next time', v_part.name;
        END;
    END LOOP;
    FOR i IN 1 .. cardinality(v_droppable) LOOP
        BEGIN
            -- Detached first: the outbox's foreign key references the
            -- partition, and DETACH checks that nothing still does.
            EXECUTE format('ALTER TABLE holdfast.events DETACH PARTITION holdfast.%I', v_droppable[i]);
            EXECUTE format('DROP TABLE holdfast.%I', v_droppable[i]);
            v_dropped := v_dropped + 1;
        EXCEPTION WHEN lock_not_available THEN
            RAISE NOTICE 'partition % is busy; dropping it next time', v_droppable[i];
        END;
    END LOOP;
    PERFORM set_config('lock_timeout', v_old_timeout, true);
    RETURN v_dropped;
END
$$;

-- The partition half of a retention pass: create the partitions of the
-- next two weeks (ensure_event_partitions) and drop the expired ones
-- (drop_expired_event_partitions), every lock wait at most p_lock_timeout
-- (a week that cannot get its locks in time is left for the next pass).
-- Commit it before pruning rows (prune_retention_rows): a transaction
-- holding the ACCESS EXCLUSIVE lock of events that a new or dropped
-- partition takes must wait on nothing else, or a writer holding a row it
-- needs (an attachment counter, an agent) that then appends an event waits
-- on it in turn: a deadlock.
CREATE OR REPLACE FUNCTION holdfast.maintain_event_partitions(
    p_lock_timeout interval DEFAULT '500 milliseconds',
    OUT partitions_created integer, OUT partitions_dropped integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_old_timeout text := current_setting('lock_timeout');
BEGIN
    PERFORM set_config('lock_timeout', (extract(epoch FROM p_lock_timeout) * 1000)::bigint::text, true);
    partitions_created := holdfast.ensure_event_partitions(holdfast.now(), holdfast.now() + interval '14 days');
    partitions_dropped := holdfast.drop_expired_event_partitions(p_lock_timeout);
    PERFORM set_config('lock_timeout', v_old_timeout, true);
END
$$;

-- Prune what retention allows in rows rather than partitions (the default
-- partition, partitions shared with agents still in use): for finished
-- agents, taken FOR UPDATE SKIP LOCKED (an agent being written to is left
-- for the next pass), delete their delivered/failed deliveries and events
-- older than the project's retention (an event with a pending delivery
-- stays), set their older tool outputs and the content of their older
-- consumed or removed inputs to JSON null, then delete their older
-- attachments that nothing kept references (prunable_attachments). At most
-- p_batch rows of each kind per call. agents.events_pruned_before records
-- how far an agent is done, so later passes skip it until it has newer
-- events (every input and tool result brings one); an agent whose files a
-- running fork or replay shares is never done.
CREATE OR REPLACE FUNCTION holdfast.prune_retention_rows(p_batch integer DEFAULT 10000)
RETURNS TABLE (events_deleted bigint, deliveries_deleted bigint, tool_outputs_pruned bigint,
               inputs_pruned bigint, attachments_deleted bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := holdfast.now();
    v_agent record;
    v_cutoff timestamptz;
    v_n bigint;
    v_done boolean;
BEGIN
    events_deleted := 0;
    deliveries_deleted := 0;
    tool_outputs_pruned := 0;
    inputs_pruned := 0;
    attachments_deleted := 0;
    FOR v_agent IN
        SELECT a.id, a.state, a.context_start_seq, p.retention_events
          FROM holdfast.agents a
          JOIN holdfast.projects p ON p.id = a.project_id
         WHERE p.retention_events IS NOT NULL
           AND NOT a.turn_open AND a.state IN ('idle', 'archived')
           AND a.created_at < v_now - p.retention_events
           AND (a.events_pruned_before IS NULL OR a.last_event_at >= a.events_pruned_before)
         ORDER BY a.id
           FOR UPDATE OF a SKIP LOCKED
    LOOP
        EXIT WHEN events_deleted >= p_batch OR deliveries_deleted >= p_batch
               OR tool_outputs_pruned >= p_batch OR inputs_pruned >= p_batch
               OR attachments_deleted >= p_batch;
        v_cutoff := v_now - v_agent.retention_events;
        v_done := true;

        DELETE FROM holdfast.webhook_deliveries d
         WHERE d.id IN (SELECT x.id FROM holdfast.webhook_deliveries x
                         WHERE x.agent_id = v_agent.id AND x.status <> 'pending'
                           AND x.event_created_at < v_cutoff
                         LIMIT p_batch - deliveries_deleted);
        GET DIAGNOSTICS v_n = ROW_COUNT;
        deliveries_deleted := deliveries_deleted + v_n;
        v_done := v_done AND deliveries_deleted < p_batch;

        DELETE FROM holdfast.events e
         WHERE (e.agent_id, e.seq, e.created_at) IN (
                   SELECT x.agent_id, x.seq, x.created_at FROM holdfast.events x
                    WHERE x.agent_id = v_agent.id AND x.created_at < v_cutoff
                      AND NOT EXISTS (SELECT 1 FROM holdfast.webhook_deliveries d
                                       WHERE d.agent_id = x.agent_id AND d.event_seq = x.seq)
                    LIMIT p_batch - events_deleted);
        GET DIAGNOSTICS v_n = ROW_COUNT;
        events_deleted := events_deleted + v_n;
        v_done := v_done AND events_deleted < p_batch
              AND NOT EXISTS (SELECT 1 FROM holdfast.webhook_deliveries d
                               WHERE d.agent_id = v_agent.id AND d.status = 'pending'
                                 AND d.event_created_at < v_cutoff);

        UPDATE holdfast.tool_calls t
           SET output = 'null'::jsonb, output_pruned_at = v_now
         WHERE t.id IN (SELECT x.id FROM holdfast.tool_calls x
                         WHERE x.agent_id = v_agent.id AND x.status = 'completed'
                           AND x.completed_at < v_cutoff AND x.output_pruned_at IS NULL
                         LIMIT p_batch - tool_outputs_pruned);
        GET DIAGNOSTICS v_n = ROW_COUNT;
        tool_outputs_pruned := tool_outputs_pruned + v_n;
        v_done := v_done AND tool_outputs_pruned < p_batch;

        -- Consumed inputs are found through their messages, removed ones
        -- through the index of unconsumed inputs: no scan of inputs.
        UPDATE holdfast.inputs i
           SET content = 'null'::jsonb, content_pruned_at = v_now
         WHERE i.id IN (SELECT x.id FROM holdfast.inputs x
                         WHERE x.id IN (SELECT m.input_id FROM holdfast.messages m
                                         WHERE m.agent_id = v_agent.id AND m.input_id IS NOT NULL)
                           AND x.consumed_at < v_cutoff AND x.content_pruned_at IS NULL
                        UNION ALL
                        SELECT x.id FROM holdfast.inputs x
                         WHERE x.agent_id = v_agent.id AND x.consumed_at IS NULL
                           AND x.removed_at < v_cutoff AND x.content_pruned_at IS NULL
                         LIMIT p_batch - inputs_pruned);
        GET DIAGNOSTICS v_n = ROW_COUNT;
        inputs_pruned := inputs_pruned + v_n;
        v_done := v_done AND inputs_pruned < p_batch;

        DELETE FROM holdfast.attachments t
         WHERE t.agent_id = v_agent.id
           AND t.id IN (SELECT x.id FROM holdfast.prunable_attachments(v_agent.id, v_agent.state = 'archived',
                                                                       v_agent.context_start_seq, v_cutoff) x
                         LIMIT p_batch - attachments_deleted);
        GET DIAGNOSTICS v_n = ROW_COUNT;
        attachments_deleted := attachments_deleted + v_n;
        v_done := v_done AND attachments_deleted < p_batch;

        -- A source whose files a fork or a replay may still send is visited
        -- again: its files go once those sharers never run again.
        v_done := v_done AND NOT EXISTS (
            SELECT 1 FROM holdfast.file_sharers(v_agent.id) f WHERE NOT f.done);
        IF v_done THEN
            UPDATE holdfast.agents SET events_pruned_before = v_cutoff WHERE id = v_agent.id;
        END IF;
    END LOOP;
    RETURN NEXT;
END
$$;

-- The agents that read p_agent's stored files as their own (forks and
-- replays: attachment_sources), each with whether it never runs again
-- (archived, or the child of a replay that has ended) and where its
-- context starts. plpgsql: holdfast.replays is defined by a later area file.
CREATE OR REPLACE FUNCTION holdfast.file_sharers(p_agent uuid)
RETURNS TABLE (id uuid, done boolean, context_start_seq bigint) LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
    SELECT f.id,
           f.state = 'archived'
               OR EXISTS (SELECT 1 FROM holdfast.replays r
                           WHERE r.id = f.replay_id AND r.status <> 'running'),
           f.context_start_seq
      FROM holdfast.agents f
     WHERE f.attachment_sources @> ARRAY[p_agent];
END
$$;

-- The attachments of p_agent stored before p_cutoff that nothing retention
-- keeps references: no input content and no tool output not yet pruned,
-- and, unless the holder never runs again, no message from its context
-- start on (its next model call sends those). The holders are p_agent and
-- its file_sharers, so a source's retention never removes a file a fork
-- still sends. A file
-- sent again later reuses its row, so the references decide, not the age
-- alone. Reads inputs (through messages and the unconsumed-input index),
-- tool calls and messages of the holders.
CREATE OR REPLACE FUNCTION holdfast.prunable_attachments(
    p_agent uuid, p_archived boolean, p_context_start_seq bigint, p_cutoff timestamptz)
RETURNS TABLE (id uuid) LANGUAGE sql STABLE AS $$
    WITH holders AS (
        SELECT p_agent AS id, p_archived AS done, p_context_start_seq AS context_start_seq
        UNION ALL
        SELECT f.id, f.done, f.context_start_seq FROM holdfast.file_sharers(p_agent) f
    ), kept AS (
        SELECT i.content FROM holders h
          JOIN holdfast.messages m ON m.agent_id = h.id AND m.input_id IS NOT NULL
          JOIN holdfast.inputs i ON i.id = m.input_id
         WHERE i.content_pruned_at IS NULL
        UNION ALL
        SELECT i.content FROM holders h
          JOIN holdfast.inputs i ON i.agent_id = h.id
         WHERE i.consumed_at IS NULL AND i.content_pruned_at IS NULL
        UNION ALL
        SELECT t.output FROM holders h
          JOIN holdfast.tool_calls t ON t.agent_id = h.id
         WHERE t.output_pruned_at IS NULL AND t.output IS NOT NULL
        UNION ALL
        SELECT m.content FROM holders h
          JOIN holdfast.messages m ON m.agent_id = h.id
         WHERE m.seq >= h.context_start_seq AND NOT h.done
    ), referenced AS (
        SELECT DISTINCT (r.ref ->> 'attachment_id')::uuid AS id
          FROM kept k
         CROSS JOIN LATERAL jsonb_path_query(k.content, '$[*].source ? (@.type == "attachment")') r(ref)
         WHERE jsonb_typeof(k.content) = 'array'
    )
    SELECT a.id FROM holdfast.attachments a
     WHERE a.agent_id = p_agent AND a.created_at < p_cutoff
       AND a.id NOT IN (SELECT r.id FROM referenced r WHERE r.id IS NOT NULL)
$$;

