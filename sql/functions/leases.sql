-- sql/functions/leases.sql — agent state, claims, leases, release and reaping.
--
-- The current definition of each function in this area, one definition
-- each. `holdfast migrate` re-applies this file (after the numbered
-- migrations) whenever its text changes; the numbered migrations are the
-- applied history of tables, indexes, triggers and views. See docs/sql.md.

-- Lock an agent row, or raise HF404.
CREATE OR REPLACE FUNCTION holdfast.lock_agent(p_agent uuid)
RETURNS holdfast.agents LANGUAGE plpgsql AS $$
DECLARE
    v_agent holdfast.agents;
BEGIN
    SELECT * INTO v_agent FROM holdfast.agents WHERE id = p_agent FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('agent %s not found', p_agent));
    END IF;
    RETURN v_agent;
END
$$;

-- Lock an agent row and check the caller still holds its lease at p_epoch;
-- raise HF001 otherwise. Every worker write starts here.
CREATE OR REPLACE FUNCTION holdfast.lock_leased_agent(p_agent uuid, p_epoch bigint)
RETURNS holdfast.agents LANGUAGE plpgsql AS $$
DECLARE
    v_agent holdfast.agents;
BEGIN
    v_agent := holdfast.lock_agent(p_agent);
    IF v_agent.state <> 'running' OR v_agent.lease_epoch <> p_epoch
       OR v_agent.lease_expires_at <= holdfast.now() THEN
        PERFORM holdfast.raise('HF001', format('lease lost on agent %s at epoch %s', p_agent, p_epoch));
    END IF;
    RETURN v_agent;
END
$$;

-- The state settle_agent gives an unleased, unarchived agent, decided before
-- the caller's own writes land: p_turn_open is the turn flag after them,
-- p_new_runnable / p_new_waiting say whether tool calls the caller is about
-- to insert are pending / waiting, p_consumed lists inputs it is about to
-- consume. Returns 'ready', 'waiting', 'idle', or 'new_turn' (ready, and a
-- turn opens for waiting inputs: the caller appends turn.started and sets
-- turn_open, model_attempts = 0). Same precedence as 0001's settle_agent.
-- Reads only; the caller holds the agent's row lock.
CREATE OR REPLACE FUNCTION holdfast.decide_state(
    p_agent uuid, p_turn_open boolean, p_new_runnable boolean, p_new_waiting boolean, p_consumed uuid[])
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_runnable boolean;
    v_waiting boolean;
BEGIN
    SELECT coalesce(bool_or(t.status IN ('pending', 'running')), false),
           coalesce(bool_or(t.status IN ('awaiting_approval', 'waiting')), false)
      INTO v_runnable, v_waiting
      FROM holdfast.tool_calls t
     WHERE t.agent_id = p_agent AND t.status NOT IN ('completed', 'cancelled');
    IF v_runnable OR p_new_runnable THEN
        RETURN 'ready';
    ELSIF v_waiting OR p_new_waiting THEN
        RETURN 'waiting';
    ELSIF p_turn_open THEN
        RETURN 'ready';
    ELSIF EXISTS (SELECT 1 FROM holdfast.inputs i
                   WHERE i.agent_id = p_agent AND i.consumed_at IS NULL
                     AND NOT (i.id = ANY (coalesce(p_consumed, '{}')))) THEN
        RETURN 'new_turn';
    END IF;
    RETURN 'idle';
END
$$;

-- settle_agent_with: the settle's one agent-row UPDATE, also resetting
-- step_failures: every way a
-- step ends well goes through it (commits, releases, retries, turn ends).
-- fail_step sets the count again after its settle.
-- The caller holds the agent's row lock.
CREATE OR REPLACE FUNCTION holdfast.settle_agent_with(
    p_agent uuid, p_types text[], p_data jsonb[], p_run_after timestamptz)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_state text;
    v_turn_open boolean;
    v_types text[] := coalesce(p_types, '{}');
    v_data jsonb[] := coalesce(p_data, '{}');
    v_open_turn boolean := false;
    v_last_seq bigint;
BEGIN
    SELECT state, turn_open INTO v_state, v_turn_open FROM holdfast.agents WHERE id = p_agent;
    IF v_state = 'archived' THEN
        IF cardinality(v_types) > 0 OR p_run_after IS NOT NULL THEN
            UPDATE holdfast.agents
               SET run_after = coalesce(p_run_after, run_after),
                   last_event_seq = last_event_seq + cardinality(v_types),
                   last_event_at = CASE WHEN cardinality(v_types) > 0 THEN holdfast.now() ELSE last_event_at END
             WHERE id = p_agent
            RETURNING last_event_seq INTO v_last_seq;
            PERFORM holdfast.insert_reserved_events(p_agent, v_last_seq, v_types, v_data);
        END IF;
        RETURN 'archived';
    END IF;
    v_state := holdfast.decide_state(p_agent, v_turn_open, false, false, '{}');
    IF v_state = 'new_turn' THEN
        v_state := 'ready';
        v_open_turn := true;
        v_types := array_append(v_types, 'turn.started');
        v_data := array_append(v_data, '{}'::jsonb);
    END IF;
    UPDATE holdfast.agents
       SET state = v_state,
           lease_owner = NULL, lease_expires_at = NULL, lease_pid = NULL, lease_backend_start = NULL,
           updated_at = holdfast.now(),
           turn_open = turn_open OR v_open_turn,
           model_attempts = CASE WHEN v_open_turn THEN 0 ELSE model_attempts END,
           step_failures = 0,
           run_after = coalesce(p_run_after, run_after),
           last_event_seq = last_event_seq + cardinality(v_types),
           last_event_at = CASE WHEN cardinality(v_types) > 0 THEN holdfast.now() ELSE last_event_at END
     WHERE id = p_agent
    RETURNING last_event_seq INTO v_last_seq;
    PERFORM holdfast.insert_reserved_events(p_agent, v_last_seq, v_types, v_data);
    RETURN v_state;
END
$$;

-- Decide an unleased agent's state from its saved facts (decide_state), open
-- a new turn when inputs are waiting, and write the state, in one agent-row
-- UPDATE (settle_agent_with). The caller holds the row lock. Precedence:
-- archived; runnable tool calls (ready); tool calls waiting on the outside
-- (waiting); an open turn (ready: the model must answer); unconsumed inputs
-- (a new turn, ready); otherwise idle.
CREATE OR REPLACE FUNCTION holdfast.settle_agent(p_agent uuid)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    RETURN holdfast.settle_agent_with(p_agent, '{}', '{}', NULL);
END
$$;

-- Keep state_changed_at true for the DBA views (stuck_agents).
CREATE OR REPLACE FUNCTION holdfast.tg_agents_state_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IS DISTINCT FROM OLD.state THEN
        NEW.state_changed_at := holdfast.now();
    END IF;
    RETURN NEW;
END
$$;

-- Wake workers when an agent becomes claimable. The payload is empty on
-- purpose: Postgres folds identical notifications within a transaction, so a
-- transaction that readies 1,000 agents sends one hint, not 1,000. Workers
-- claim whatever is ready; they do not need the id. Agents readied with a
-- future run_after are woken by maintenance_tick when the time comes.
CREATE OR REPLACE FUNCTION holdfast.tg_agents_notify_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.run_after <= holdfast.now() THEN
        PERFORM pg_notify('holdfast_ready', '');
    END IF;
    RETURN NULL;
END
$$;

-- Claim up to p_max ready agents for p_worker. Bounded, SKIP LOCKED: claimers
-- never wait on each other and never get the same agent. Each claim bumps the
-- epoch, sets the expiry from the database clock, and records the claiming
-- session (pid, and its start time from pg_stat_get_activity(own pid), not a
-- scan of every backend) so maintenance can release the agents of a dead
-- session at once. Call it on the worker's long-lived session, not a pooled one.
CREATE OR REPLACE FUNCTION holdfast.claim_agents(p_worker text, p_max integer, p_ttl interval)
RETURNS TABLE (agent_id uuid, epoch bigint) LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := holdfast.now();
    v_backend_start timestamptz;
BEGIN
    IF p_worker IS NULL OR p_worker = '' THEN
        PERFORM holdfast.raise('HF422', 'worker name must not be empty', 'worker');
    END IF;
    IF p_ttl IS NULL OR p_ttl <= '0'::interval THEN
        PERFORM holdfast.raise('HF422', 'ttl must be positive', 'ttl');
    END IF;
    SELECT s.backend_start INTO v_backend_start FROM pg_stat_get_activity(pg_backend_pid()) s;
    RETURN QUERY
    WITH candidates AS (
        SELECT a.id FROM holdfast.agents a
         WHERE a.state = 'ready' AND a.run_after <= v_now
         ORDER BY a.run_after, a.id
         LIMIT greatest(p_max, 0)
           FOR UPDATE SKIP LOCKED
    )
    UPDATE holdfast.agents a
       SET state = 'running',
           lease_owner = p_worker,
           lease_epoch = a.lease_epoch + 1,
           lease_expires_at = v_now + p_ttl,
           lease_pid = pg_backend_pid(),
           lease_backend_start = v_backend_start,
           updated_at = v_now
      FROM candidates c
     WHERE a.id = c.id
    RETURNING a.id, a.lease_epoch;
END
$$;

-- Renew p_worker's leases in one call. For each (agent, epoch) pair: renewed =
-- true when the lease was still held and is now extended by p_ttl; false when it
-- was lost (released, reaped, expired or re-claimed) — the worker must stop that
-- step. cancel_requested tells the worker a cancel is pending (the fallback for
-- a lost cancel notification). The session's start time comes from
-- pg_stat_get_activity(own pid), as in claim_agents. Locks agents in id order.
CREATE OR REPLACE FUNCTION holdfast.renew_leases(p_worker text, p_agents uuid[], p_epochs bigint[], p_ttl interval)
RETURNS TABLE (agent_id uuid, renewed boolean, cancel_requested boolean) LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := holdfast.now();
    v_backend_start timestamptz;
BEGIN
    IF coalesce(array_length(p_agents, 1), 0) <> coalesce(array_length(p_epochs, 1), 0) THEN
        PERFORM holdfast.raise('HF422', 'agents and epochs must have the same length', 'epochs');
    END IF;
    SELECT s.backend_start INTO v_backend_start FROM pg_stat_get_activity(pg_backend_pid()) s;
    RETURN QUERY
    WITH wanted AS (
        SELECT w.agent_id, w.epoch FROM unnest(p_agents, p_epochs) AS w (agent_id, epoch)
    ), locked AS (
        SELECT a.id FROM holdfast.agents a JOIN wanted w ON w.agent_id = a.id
         WHERE a.state = 'running' AND a.lease_owner = p_worker
           AND a.lease_epoch = w.epoch AND a.lease_expires_at > v_now
         ORDER BY a.id
           FOR UPDATE OF a
    ), renewed AS (
        UPDATE holdfast.agents a
           SET lease_expires_at = v_now + p_ttl,
               lease_pid = pg_backend_pid(),
               lease_backend_start = v_backend_start
          FROM locked l
         WHERE a.id = l.id
           -- Re-checked after the lock: a reaper may have won the race.
           AND a.state = 'running' AND a.lease_owner = p_worker AND a.lease_expires_at > v_now
        RETURNING a.id, a.cancel_requested_at IS NOT NULL AS cancel_requested
    )
    SELECT w.agent_id, r.id IS NOT NULL, coalesce(r.cancel_requested, false)
      FROM wanted w LEFT JOIN renewed r ON r.id = w.agent_id;
END
$$;

-- Give up a lease: the agent's state is settled from its saved facts (ready
-- again if there is work, waiting, or idle). A worker that gives up a lease
-- mid-call (drain past its timeout, a cancelled step) cannot know whether the
-- IO happened, so its running calls are interrupted exactly as a reap would.
-- p_run_after delays the next claim (a durable backoff: no worker waits); it
-- is written by the settle's UPDATE. Fenced (HF001).
CREATE OR REPLACE FUNCTION holdfast.release_agent(p_agent uuid, p_epoch bigint, p_run_after timestamptz DEFAULT NULL)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    PERFORM holdfast.interrupt_running_calls(p_agent);
    RETURN holdfast.settle_agent_with(p_agent, '{}', '{}', p_run_after);
END
$$;

-- Release one agent whose holder is gone (lease expired, or its session died):
-- bump the epoch so the old holder's writes fail HF001, and resolve what it left.
-- An in-flight model call needs nothing: it is retried from saved state. An
-- external tool call marked running might have happened: it is completed as
-- interrupted (interrupt_running_calls), never rerun. Waiting calls are
-- untouched. The caller holds the agent's row lock.
-- p_reason: 'lease_expired' | 'session_gone' | 'released'.
CREATE OR REPLACE FUNCTION holdfast.reap_agent(p_agent uuid, p_reason text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM holdfast.interrupt_running_calls(p_agent);
    UPDATE holdfast.agents SET lease_epoch = lease_epoch + 1 WHERE id = p_agent;
    PERFORM holdfast.settle_agent(p_agent);
    RAISE LOG 'holdfast: released agent % (%)', p_agent, p_reason;
END
$$;

-- One maintenance pass. Safe to run from several processes at once: each sweep
-- takes its rows with SKIP LOCKED and is bounded per call (p_batch).
--   1. release leases past expiry;
--   2. release leases whose claiming session is gone from pg_stat_activity
--      (a crashed worker's agents run again in seconds, not a lease TTL);
--   3. wake workers when delayed agents (run_after) have come due.
-- Returns counts as JSON, e.g. {"expired": 1, "session_gone": 0, "woken": 0}.
CREATE OR REPLACE FUNCTION holdfast.maintenance_tick(p_batch integer DEFAULT 1000)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := holdfast.now();
    v_id uuid;
    v_expired integer := 0;
    v_gone integer := 0;
    v_due integer := 0;
BEGIN
    FOR v_id IN
        SELECT a.id FROM holdfast.agents a
         WHERE a.state = 'running' AND a.lease_expires_at <= v_now
         ORDER BY a.lease_expires_at LIMIT p_batch
           FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM holdfast.reap_agent(v_id, 'lease_expired');
        v_expired := v_expired + 1;
    END LOOP;

    -- A session is gone when its pid is not in pg_stat_activity, or the pid was
    -- reused by a newer backend. backend_start is only compared when visible
    -- (another role's sessions hide it), so a permission gap never reaps a live
    -- worker; such agents fall back to lease expiry.
    FOR v_id IN
        SELECT a.id FROM holdfast.agents a
         WHERE a.state = 'running' AND a.lease_pid IS NOT NULL
           AND NOT EXISTS (
               SELECT 1 FROM pg_stat_activity s
                WHERE s.pid = a.lease_pid
                  AND (s.backend_start IS NULL OR a.lease_backend_start IS NULL
                       OR s.backend_start = a.lease_backend_start))
         ORDER BY a.id LIMIT p_batch
           FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM holdfast.reap_agent(v_id, 'session_gone');
        v_gone := v_gone + 1;
    END LOOP;

    -- Delayed agents whose time has come: one hint for all of them. The
    -- window is the last few seconds, so each delayed agent is hinted by
    -- the ticks around its due time; workers also poll, so a missed hint
    -- only costs a poll interval.
    SELECT count(*) INTO v_due FROM holdfast.agents
     WHERE state = 'ready' AND run_after <= v_now AND run_after > v_now - interval '3 seconds'
       AND run_after > state_changed_at;
    IF v_due > 0 THEN
        PERFORM pg_notify('holdfast_ready', '');
    END IF;

    RETURN jsonb_build_object('expired', v_expired, 'session_gone', v_gone, 'woken', v_due);
END
$$;
