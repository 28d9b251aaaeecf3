-- sql/schema/events.sql — the timeline: appending events with gap-free seqs, the event-type list, NOTIFY of new events, live deltas.
--
-- This area's current schema: its tables, indexes and views first, then,
-- after the line below, its functions and triggers.
-- Each object is defined here once, as it is now. See docs/sql.md for how
-- a fresh install applies these files and how a change is added.

-- The timeline. seq is gap-free per agent: it comes from agents.last_event_seq,
-- advanced under the agent's row lock in the writing transaction. agent_id
-- has no foreign key (a per-row check on the hottest insert): no seq comes
-- from an agent that does not exist, and agents are never deleted.
CREATE TABLE holdfast.events (
    agent_id uuid NOT NULL,
    seq bigint NOT NULL,
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    type text NOT NULL,
    data jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT events_seq_check1 CHECK (seq > 0),
    CONSTRAINT events_pkey PRIMARY KEY (agent_id, seq, created_at),
    CONSTRAINT events_id_created_at_key UNIQUE (id, created_at)
) PARTITION BY RANGE (created_at);

-- Rows no weekly partition covers (ensure_event_partitions creates the
-- weeks ahead; retention.sql).
CREATE TABLE holdfast.events_default PARTITION OF holdfast.events DEFAULT;

-- An agent followed by an API feed: the pid (and start time) of the API's
-- LISTEN session that hears its hints. holdfast_events is sent only for
-- agents with a row here; maintenance_tick drops the rows of sessions that
-- are gone. Unlogged: after a crash every feed reconnects anyway.
CREATE UNLOGGED TABLE holdfast.stream_watches (
    id uuid NOT NULL,
    agent_id uuid NOT NULL,
    listener_pid integer NOT NULL,
    listener_backend_start timestamptz,
    created_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT stream_watches_pkey PRIMARY KEY (id)
);

CREATE INDEX stream_watches_agent_idx ON holdfast.stream_watches (agent_id);

-- ==== functions and triggers ====

-- Append one event to an agent's timeline. The caller must hold the agent's row
-- lock (every public function locks the agent first); the counter update
-- re-locks it anyway, so a forgotten lock costs a wait, never a gap.
CREATE OR REPLACE FUNCTION holdfast.append_event(p_agent uuid, p_type text, p_data jsonb)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_seq bigint;
BEGIN
    UPDATE holdfast.agents
       SET last_event_seq = last_event_seq + 1, last_event_at = holdfast.now()
     WHERE id = p_agent
    RETURNING last_event_seq INTO v_seq;
    INSERT INTO holdfast.events (agent_id, seq, type, data)
    VALUES (p_agent, v_seq, p_type, coalesce(p_data, '{}'));
    RETURN v_seq;
END
$$;

-- Insert events whose seqs the caller has reserved: p_types[i] / p_data[i]
-- becomes seq p_last_seq - n + i (n = cardinality(p_types)), in order. The
-- caller holds the agent's row lock and has advanced last_event_seq by n in
-- the same transaction (its own agents UPDATE ... RETURNING last_event_seq).
-- The events' triggers (NOTIFY, webhook outbox, subagent hand-back) fire per
-- row as for append_event.
CREATE OR REPLACE FUNCTION holdfast.insert_reserved_events(
    p_agent uuid, p_last_seq bigint, p_types text[], p_data jsonb[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(cardinality(p_types), 0) = 0 THEN
        RETURN;
    END IF;
    INSERT INTO holdfast.events (agent_id, seq, type, data)
    SELECT p_agent, p_last_seq - cardinality(p_types) + e.ord, e.type, coalesce(e.data, '{}')
      FROM unnest(p_types, p_data) WITH ORDINALITY AS e (type, data, ord)
     ORDER BY e.ord;
END
$$;

-- Every event type Holdfast writes (docs/events.md). An endpoint may subscribe to
-- these or to '*'. A new event type is added here (tests/tests/sql_schema.rs
-- checks that every type these functions emit is listed).
CREATE OR REPLACE FUNCTION holdfast.event_types() RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT ARRAY[
        'input.received', 'input.removed', 'turn.started', 'model.response', 'model.retry',
        'model.interrupted', 'step.retry', 'worker.lost',
        'tool_call.created', 'tool_call.completed', 'tool_call.interrupted', 'tool.unavailable',
        'content.left_out',
        'approval.requested', 'approval.answered', 'question.asked', 'question.answered',
        'command.queued', 'command.accepted', 'command.finished', 'command.failed',
        'command.unknown', 'machine.unreachable', 'machine.session_replaced', 'subagent.started', 'subagent.finished',
        'context.compacted', 'config.updated', 'turn.completed', 'turn.cancelled',
        'turn.failed', 'agent.archived', 'input.updated', 'schedule.fired', 'schedule.skipped',
        'agent.forked', 'replay.diverged', 'replay.completed']
$$;

-- Tell stream listeners (the API's SSE fan-out) which agents have new
-- events: statement-level, over the statement's new rows, at most one hint
-- per agent (identical payloads also fold within a transaction), and only
-- for agents with a stream watch (watch_agent_events). A commit that sends
-- a NOTIFY holds the notify queue's lock across its WAL flush, so hints
-- nobody hears would make the workers' commits wait on each other.
-- The watch check sees watches committed before the statement's row locks
-- were granted only under READ COMMITTED (each query takes a new
-- snapshot); under a stronger isolation level the transaction's snapshot
-- may predate a watch, so such transactions hint every agent.
CREATE OR REPLACE FUNCTION holdfast.tg_events_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('holdfast_events', n.agent_id::text)
       FROM (SELECT DISTINCT e.agent_id FROM new_events e) n
      WHERE current_setting('transaction_isolation') <> 'read committed'
         OR EXISTS (SELECT 1 FROM holdfast.stream_watches w WHERE w.agent_id = n.agent_id);
    RETURN NULL;
END
$$;
CREATE TRIGGER _900_notify_events AFTER INSERT ON holdfast.events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION holdfast.tg_events_notify();

-- Register a feed's watch on an agent (or move it to a new LISTEN session:
-- p_listener_pid is the pid of the session that LISTENs on holdfast_events
-- for it), so that the agent's events are hinted from now on. The API calls
-- it, in a transaction of its own, before it reads the agent's events.
-- Why nothing is missed: the agent's row is locked FOR SHARE, which waits
-- for every transaction writing the agent's events (they all hold the row
-- lock, see append_event) and makes later writers wait for this one. So a
-- writer either committed before the watch did, and the reader, which reads
-- after it, sees its events; or its trigger runs after the watch committed,
-- sees it (tg_events_notify) and hints.
CREATE OR REPLACE FUNCTION holdfast.watch_agent_events(p_watch uuid, p_agent uuid, p_listener_pid integer)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM holdfast.agents WHERE id = p_agent FOR SHARE;
    INSERT INTO holdfast.stream_watches (id, agent_id, listener_pid, listener_backend_start)
    SELECT p_watch, p_agent, p_listener_pid, s.backend_start
      FROM (SELECT 1) one LEFT JOIN pg_stat_get_activity(p_listener_pid) s ON true
    ON CONFLICT (id) DO UPDATE
       SET agent_id = EXCLUDED.agent_id, listener_pid = EXCLUDED.listener_pid,
           listener_backend_start = EXCLUDED.listener_backend_start;
END
$$;

-- Drop a feed's watch (its last stream ended). Unknown ids are ignored.
CREATE OR REPLACE FUNCTION holdfast.unwatch_agent_events(p_watch uuid)
RETURNS void LANGUAGE sql AS $$
    DELETE FROM holdfast.stream_watches WHERE id = p_watch;
$$;

-- Send a live delta to stream listeners (the API's SSE): `p_kind` 'text'
-- (answer text) or 'thinking' (extended thinking). Never saved: a client
-- that reconnects reads the finished response from the event log. The
-- payload stays under Postgres' 8000-byte NOTIFY limit: callers send at most
-- a few KiB of text per call, and longer text is refused (HF422).
CREATE OR REPLACE FUNCTION holdfast.stream_delta(p_agent uuid, p_epoch bigint, p_kind text, p_text text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_payload text := jsonb_build_object('agent_id', p_agent, 'epoch', p_epoch,
                                         'kind', p_kind, 'text', p_text)::text;
BEGIN
    IF p_kind IS NULL OR p_kind NOT IN ('text', 'thinking') THEN
        PERFORM holdfast.raise('HF422', 'kind must be "text" or "thinking"', 'kind');
    END IF;
    IF octet_length(v_payload) >= 8000 THEN
        PERFORM holdfast.raise('HF422', 'delta too large for one notification', 'text');
    END IF;
    PERFORM pg_notify('holdfast_stream', v_payload);
END
$$;
