-- sql/schema/schedules.sql — agents that run on a schedule.
--
-- This area's current schema: its tables, indexes and views first, then,
-- after the line below, its functions and triggers.
-- Each object is defined here once, as it is now. See docs/sql.md for how
-- a fresh install applies these files and how a change is added.
--
-- A schedule sends its agent an input (content and mode) at each slot: the
-- instants a cron expression names in an IANA time zone, or start_at (else
-- creation + every) and every interval after it, from start_at until
-- end_at. Cron and time zones are computed in Rust (wire/src/schedule.rs,
-- the croner and chrono-tz crates): the caller of create_schedule, and
-- maintenance after each slot, hand SQL the next slot (next_fire_at). SQL
-- keeps the fence: maintenance claims due schedules FOR UPDATE SKIP LOCKED
-- (claim_due_schedules) and advance_schedule moves next_fire_at on only
-- from the slot it claimed, creating the slot's one input with an
-- idempotency key made of the schedule and the slot, in the same
-- transaction; so several maintenance processes, a crash or a Postgres
-- restart never fire a slot twice.

-- One schedule of an agent. Its state: paused (paused_at set), ended
-- (ended_at set: no slot left before end_at, or its agent was archived),
-- else active.
CREATE TABLE holdfast.schedules (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    project_id uuid NOT NULL,
    agent_id uuid NOT NULL,
    -- A cron expression (5 fields, or 6 with seconds first) read in
    -- `timezone`, or a fixed interval: one of the two.
    cron text,
    timezone text DEFAULT 'UTC' NOT NULL,
    every interval,
    -- The input each fire sends (input_refusal's rules).
    content jsonb NOT NULL,
    mode text DEFAULT 'queue' NOT NULL,
    start_at timestamptz,
    end_at timestamptz,
    -- After maintenance was away past a slot: 'skip' the late slots (a slot
    -- still on time fires), or fire 'once' for all of them.
    missed text DEFAULT 'skip' NOT NULL,
    paused_at timestamptz,
    -- The next slot to fire (NULL once ended).
    next_fire_at timestamptz,
    ended_at timestamptz,
    -- The slot of its latest fire, and how many it has fired.
    last_fired_at timestamptz,
    fire_count bigint DEFAULT 0 NOT NULL,
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    updated_at timestamptz DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT schedules_cron_or_every CHECK ((cron IS NULL) <> (every IS NULL)),
    CONSTRAINT schedules_cron_check CHECK (cron <> '' AND length(cron) <= 256),
    CONSTRAINT schedules_every_check CHECK (every >= '00:00:01'::interval),
    CONSTRAINT schedules_end_after_start CHECK (end_at > start_at),
    CONSTRAINT schedules_mode_check CHECK (mode IN ('steer', 'queue')),
    CONSTRAINT schedules_missed_check CHECK (missed IN ('skip', 'once')),
    CONSTRAINT schedules_next_unless_ended CHECK ((ended_at IS NULL) OR (next_fire_at IS NULL)),
    CONSTRAINT schedules_pkey PRIMARY KEY (id),
    CONSTRAINT schedules_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES holdfast.agents(id),
    CONSTRAINT schedules_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id)
);

-- An agent's schedules, oldest first.
CREATE INDEX schedules_agent_idx ON holdfast.schedules (agent_id, id);

-- The due ones (claim_due_schedules).
CREATE INDEX schedules_due_idx ON holdfast.schedules (next_fire_at) WHERE (paused_at IS NULL);

-- ==== functions and triggers ====

-- Create a schedule for an agent of p_project; p_next_fire_at is its first
-- slot, computed by the caller (wire/src/schedule.rs; NULL: no slot
-- before end_at, so it is ended from the start). Checks what SQL can: the
-- agent (HF404; HF409 archived), cron or every and not both, every at
-- least a second, a time zone Postgres knows, end_at after start_at, the
-- mode (steer or queue), the missed-fire policy and the input's content
-- (input_refusal); HF422 names the field. Returns the schedule.
CREATE OR REPLACE FUNCTION holdfast.create_schedule(
    p_project uuid, p_agent uuid, p_cron text, p_timezone text, p_every interval,
    p_content jsonb, p_mode text, p_start_at timestamptz, p_end_at timestamptz,
    p_missed text, p_next_fire_at timestamptz)
RETURNS holdfast.schedules LANGUAGE plpgsql AS $$
DECLARE
    v_refusal record;
    v_schedule holdfast.schedules;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM holdfast.agents a WHERE a.id = p_agent AND a.project_id = p_project) THEN
        PERFORM holdfast.raise('HF404', format('agent %s not found', p_agent));
    END IF;
    IF (p_cron IS NULL) = (p_every IS NULL) THEN
        PERFORM holdfast.raise('HF422', 'give either cron or every', 'cron');
    END IF;
    IF p_cron = '' OR length(p_cron) > 256 THEN
        PERFORM holdfast.raise('HF422', 'cron must be 1 to 256 characters', 'cron');
    END IF;
    IF p_every < interval '1 second' THEN
        PERFORM holdfast.raise('HF422', 'every must be at least 1s', 'every');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_timezone_names WHERE name = coalesce(p_timezone, 'UTC')) THEN
        PERFORM holdfast.raise('HF422', format('unknown time zone %s', p_timezone), 'timezone');
    END IF;
    IF p_end_at <= p_start_at THEN
        PERFORM holdfast.raise('HF422', 'end_at must be after start_at', 'end_at');
    END IF;
    IF coalesce(p_mode, 'queue') NOT IN ('steer', 'queue') THEN
        PERFORM holdfast.raise('HF422', 'a scheduled input''s mode must be steer or queue', 'input.mode');
    END IF;
    IF coalesce(p_missed, 'skip') NOT IN ('skip', 'once') THEN
        PERFORM holdfast.raise('HF422', 'missed must be skip or once', 'missed');
    END IF;
    SELECT * INTO v_refusal FROM holdfast.input_refusal(p_agent, p_content, NULL, coalesce(p_mode, 'queue'));
    IF v_refusal.code IS NOT NULL THEN
        PERFORM holdfast.raise(v_refusal.code, v_refusal.message,
                               CASE WHEN v_refusal.field IS NOT NULL THEN 'input.' || v_refusal.field END);
    END IF;
    INSERT INTO holdfast.schedules (project_id, agent_id, cron, timezone, every, content, mode,
                                    start_at, end_at, missed, next_fire_at, ended_at)
    VALUES (p_project, p_agent, p_cron, coalesce(p_timezone, 'UTC'), p_every, p_content,
            coalesce(p_mode, 'queue'), p_start_at, p_end_at, coalesce(p_missed, 'skip'), p_next_fire_at,
            CASE WHEN p_next_fire_at IS NULL THEN holdfast.now() END)
    RETURNING * INTO v_schedule;
    RETURN v_schedule;
END
$$;

-- Pause or resume a schedule of p_project. Resuming takes p_next_fire_at,
-- the first slot from now on (computed by the caller): slots that passed
-- while it was paused are not fired. Pausing a paused schedule, or
-- resuming an active one, changes nothing; an ended schedule stays ended.
-- Raises HF404. Returns the schedule.
CREATE OR REPLACE FUNCTION holdfast.set_schedule_paused(
    p_project uuid, p_schedule uuid, p_paused boolean, p_next_fire_at timestamptz)
RETURNS holdfast.schedules LANGUAGE plpgsql AS $$
DECLARE
    v_schedule holdfast.schedules;
BEGIN
    SELECT * INTO v_schedule FROM holdfast.schedules
     WHERE id = p_schedule AND project_id = p_project FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('schedule %s not found', p_schedule));
    END IF;
    IF v_schedule.ended_at IS NOT NULL OR p_paused = (v_schedule.paused_at IS NOT NULL) THEN
        RETURN v_schedule;
    END IF;
    UPDATE holdfast.schedules
       SET paused_at = CASE WHEN p_paused THEN holdfast.now() END,
           next_fire_at = CASE WHEN p_paused THEN next_fire_at ELSE p_next_fire_at END,
           ended_at = CASE WHEN NOT p_paused AND p_next_fire_at IS NULL THEN holdfast.now() END,
           updated_at = holdfast.now()
     WHERE id = p_schedule
    RETURNING * INTO v_schedule;
    RETURN v_schedule;
END
$$;

-- Delete a schedule of p_project (its fired inputs stay). Raises HF404.
CREATE OR REPLACE FUNCTION holdfast.delete_schedule(p_project uuid, p_schedule uuid)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM holdfast.schedules WHERE id = p_schedule AND project_id = p_project;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('schedule %s not found', p_schedule));
    END IF;
END
$$;

-- Up to p_batch due schedules (active, next_fire_at passed), earliest
-- first, locked FOR UPDATE SKIP LOCKED: another maintenance process
-- takes the others. The caller computes each one's slots and calls
-- advance_schedule in the same transaction. `now` is the clock the
-- slots are judged by (holdfast.now()).
CREATE OR REPLACE FUNCTION holdfast.claim_due_schedules(p_batch integer)
RETURNS TABLE (id uuid, cron text, timezone text, every_ms bigint, start_at timestamptz,
               end_at timestamptz, missed text, next_fire_at timestamptz, created_at timestamptz,
               now timestamptz)
LANGUAGE sql AS $$
    WITH clock AS MATERIALIZED (SELECT holdfast.now() AS now)
    SELECT s.id, s.cron, s.timezone, (extract(epoch FROM s.every) * 1000)::bigint, s.start_at,
           s.end_at, s.missed, s.next_fire_at, s.created_at, c.now
      FROM holdfast.schedules s CROSS JOIN clock c
     WHERE s.paused_at IS NULL AND s.next_fire_at <= c.now
     ORDER BY s.next_fire_at
     LIMIT p_batch
       FOR UPDATE OF s SKIP LOCKED
$$;

-- The idempotency key of a schedule's input for one slot: the same for
-- every attempt at that slot, unique across schedules and slots.
CREATE OR REPLACE FUNCTION holdfast.schedule_input_key(p_schedule uuid, p_slot timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT format('schedule:%s:%s', p_schedule,
                  (extract(epoch FROM p_slot) * 1000000)::bigint)
$$;

-- Move a claimed schedule on from the slot p_due (its next_fire_at when
-- claimed; the fence: a schedule whose next_fire_at is no longer p_due was
-- moved on by another process, and this call changes nothing and returns
-- 'stale'). Late slots not fired, from p_missed_from up to (not including)
-- p_missed_until: schedule.skipped {"schedule_id", "reason": "missed",
-- "from", "until"}; p_fire_slot: the slot fired now
-- (NULL: none), p_late when it is past its time (the 'once' policy);
-- p_next_fire_at: the slot after (NULL: none before end_at, the schedule
-- ends). A fire creates the slot's input (schedule_input_key; a replay of
-- the key creates nothing), then schedule.fired {"schedule_id", "slot",
-- "input_id", "late"}; an input the agent refuses (archived, quotas) is
-- schedule.skipped, reason 'refused' with the message, and an archived
-- agent's schedule ends. Locks the schedule (the caller's claim), then the
-- agent row. Returns 'fired', 'replayed' (the slot's input exists),
-- 'skipped', 'refused' or 'stale'.
CREATE OR REPLACE FUNCTION holdfast.advance_schedule(
    p_schedule uuid, p_due timestamptz, p_missed_from timestamptz, p_missed_until timestamptz,
    p_fire_slot timestamptz, p_late boolean, p_next_fire_at timestamptz)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_schedule holdfast.schedules;
    v_agent holdfast.agents;
    v_key text;
    v_refusal record;
    v_input_id uuid;
    v_outcome text := 'skipped';
    v_archived boolean := false;
BEGIN
    SELECT * INTO v_schedule FROM holdfast.schedules WHERE id = p_schedule FOR UPDATE;
    IF NOT FOUND OR v_schedule.paused_at IS NOT NULL
       OR v_schedule.next_fire_at IS DISTINCT FROM p_due THEN
        RETURN 'stale';
    END IF;
    v_agent := holdfast.lock_agent(v_schedule.agent_id);
    IF p_missed_from IS NOT NULL THEN
        PERFORM holdfast.append_event(v_agent.id, 'schedule.skipped', jsonb_build_object(
            'schedule_id', p_schedule, 'reason', 'missed',
            'from', p_missed_from, 'until', p_missed_until));
    END IF;
    IF p_fire_slot IS NOT NULL THEN
        v_key := holdfast.schedule_input_key(p_schedule, p_fire_slot);
        SELECT * INTO v_refusal
          FROM holdfast.input_refusal(v_agent.id, v_schedule.content, v_key, v_schedule.mode);
        IF v_refusal.code IS NOT NULL THEN
            v_outcome := 'refused';
            v_archived := v_agent.state = 'archived';
            PERFORM holdfast.append_event(v_agent.id, 'schedule.skipped', jsonb_build_object(
                'schedule_id', p_schedule, 'reason', 'refused', 'from', p_fire_slot, 'until', coalesce(p_next_fire_at, holdfast.now()),
                'message', v_refusal.message));
        ELSIF v_refusal.replay_of IS NOT NULL THEN
            v_outcome := 'replayed';
        ELSE
            v_outcome := 'fired';
            v_input_id := holdfast.insert_input(v_agent, v_schedule.content, v_key, NULL, NULL,
                                                v_schedule.mode);
            PERFORM holdfast.append_event(v_agent.id, 'schedule.fired', jsonb_build_object(
                'schedule_id', p_schedule, 'slot', p_fire_slot, 'input_id', v_input_id,
                'late', coalesce(p_late, false)));
        END IF;
    END IF;
    UPDATE holdfast.schedules
       SET next_fire_at = CASE WHEN v_archived THEN NULL ELSE p_next_fire_at END,
           ended_at = CASE WHEN v_archived OR p_next_fire_at IS NULL THEN holdfast.now() END,
           last_fired_at = CASE WHEN v_outcome = 'fired' THEN p_fire_slot ELSE last_fired_at END,
           fire_count = fire_count + CASE WHEN v_outcome = 'fired' THEN 1 ELSE 0 END,
           updated_at = holdfast.now()
     WHERE id = p_schedule;
    RETURN v_outcome;
END
$$;
