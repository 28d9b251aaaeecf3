-- sql/schema/leases.sql — agent state, claims, leases, release and reaping.
--
-- This area's current schema: its tables, indexes and views first, then,
-- after the line below, its functions and triggers.
-- Each object is defined here once, as it is now. See docs/sql.md for how
-- a fresh install applies these files and how a change is added.

-- ==== functions and triggers ====

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

-- Lock the agents p_ids names (FOR UPDATE), in id order, so that two
-- batches cannot deadlock on each other: the batch functions' first
-- statement (create_inputs, commit_model_step_batch, submit_tool_results).
-- Returns the locked rows; ids of no agent (or NULL) are skipped. Each
-- agent is read by its key, one index probe per id, never as a join: those
-- functions run with force_generic_plan, so a session keeps the plan of
-- its first call, made on the statistics of that moment, and on a new
-- install's empty tables a join's plan is a sequential scan, kept while
-- the table grows (until autovacuum's ANALYZE). The LATERAL subquery with
-- FOR UPDATE is never flattened into a join.
CREATE OR REPLACE FUNCTION holdfast.lock_agents(p_ids uuid[])
RETURNS SETOF holdfast.agents LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    SELECT a.*
      FROM (SELECT DISTINCT u.id FROM unnest(p_ids) AS u (id) WHERE u.id IS NOT NULL ORDER BY u.id) ids
     CROSS JOIN LATERAL (SELECT * FROM holdfast.agents x WHERE x.id = ids.id FOR UPDATE) a;
END
$$;

-- The inputs of an agent's open (or opening) turn that no step has consumed
-- yet, in arrival order: admitted (steer and interrupt inputs at once, a
-- queued one when a turn opens for it, admit_queued_input), not consumed,
-- not removed. The one definition of what the next model call sees and
-- what a turn that ends early takes into history. Reads only.
CREATE OR REPLACE FUNCTION holdfast.turn_inputs(p_agent uuid)
RETURNS SETOF holdfast.inputs LANGUAGE sql STABLE AS $$
    SELECT * FROM holdfast.inputs i
     WHERE i.agent_id = p_agent AND i.consumed_at IS NULL
       AND i.admitted_at IS NOT NULL AND i.removed_at IS NULL
     ORDER BY i.created_at, i.id
$$;

-- A turn is opening: admit the agent's first queued input into it (by the
-- place a person gave it, update_input, then oldest first: the queue's next
-- turn; the rest stay queued for the turns after). Returns its
-- id, or NULL when nothing is queued. The caller holds the agent's row lock.
CREATE OR REPLACE FUNCTION holdfast.admit_queued_input(p_agent uuid)
RETURNS uuid LANGUAGE sql AS $$
    UPDATE holdfast.inputs SET admitted_at = holdfast.now()
     WHERE id = (SELECT i.id FROM holdfast.inputs i
                  WHERE i.agent_id = p_agent AND i.admitted_at IS NULL AND i.removed_at IS NULL
                  ORDER BY i.queue_position, i.created_at, i.id LIMIT 1)
    RETURNING id
$$;

-- The state settle_agent gives an unleased, unarchived agent, decided before
-- the caller's own writes land: p_turn_open is the turn flag after them,
-- p_new_runnable / p_new_waiting say whether tool calls the caller is about
-- to insert are pending / waiting, p_consumed lists inputs it is about to
-- consume. An open turn waits while a budget approval of it is pending
-- (end_turn_over_budget). `state` is 'ready', 'waiting' or 'idle';
-- `opens_turn` says a turn opens for waiting inputs, queued ones included
-- (the state is then 'ready'; the caller appends turn.started, sets
-- turn_open, model_attempts = 0, and admits the oldest queued input,
-- admit_queued_input).
-- Reads only; the caller holds the agent's row lock.
CREATE OR REPLACE FUNCTION holdfast.decide_next_state(
    p_agent uuid, p_turn_open boolean, p_new_runnable boolean, p_new_waiting boolean, p_consumed uuid[],
    OUT state text, OUT opens_turn boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_runnable boolean;
    v_waiting boolean;
BEGIN
    SELECT coalesce(bool_or(t.status IN ('pending', 'running')), false),
           coalesce(bool_or(t.status IN ('awaiting_approval', 'waiting')), false)
      INTO v_runnable, v_waiting
      FROM holdfast.tool_calls t
     WHERE t.agent_id = p_agent AND t.status NOT IN ('completed', 'cancelled');
    opens_turn := false;
    IF v_runnable OR p_new_runnable THEN
        state := 'ready';
    ELSIF v_waiting OR p_new_waiting THEN
        state := 'waiting';
    ELSIF p_turn_open AND EXISTS (SELECT 1 FROM holdfast.approvals p
                                   WHERE p.agent_id = p_agent AND p.kind = 'budget' AND p.status = 'pending') THEN
        state := 'waiting';
    ELSIF p_turn_open THEN
        state := 'ready';
    ELSIF EXISTS (SELECT 1 FROM holdfast.inputs i
                   WHERE i.agent_id = p_agent AND i.consumed_at IS NULL AND i.removed_at IS NULL
                     AND NOT (i.id = ANY (coalesce(p_consumed, '{}')))) THEN
        state := 'ready';
        opens_turn := true;
    ELSE
        state := 'idle';
    END IF;
END
$$;

-- The trace context of a turn that opens now: the traceparent/tracestate of
-- the earliest unconsumed input (the one that opens it), or, when that input
-- brought none, a new trace whose parent span id names the turn (no span is
-- exported with that id: the turn's steps are the trace's top spans).
-- Reads the agent's pending inputs; locks nothing (the caller holds the
-- agent's row lock). Raises nothing.
CREATE OR REPLACE FUNCTION holdfast.turn_trace_context(p_agent uuid, OUT parent text, OUT state text)
LANGUAGE sql AS $$
    SELECT t.parent, t.state FROM holdfast.next_turn_trace_context(p_agent, '{}') t;
$$;

-- turn_trace_context, leaving out the inputs in p_taken: those a step is
-- consuming in the same transaction (apply_model_step, whose commit ends a
-- turn and opens the next for the inputs that came during its call).
CREATE OR REPLACE FUNCTION holdfast.next_turn_trace_context(
    p_agent uuid, p_taken uuid[], OUT parent text, OUT state text)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT i.trace_parent, i.trace_state INTO parent, state
      FROM holdfast.inputs i
     WHERE i.agent_id = p_agent AND i.consumed_at IS NULL AND i.removed_at IS NULL
       AND NOT (i.id = ANY (coalesce(p_taken, '{}')))
     ORDER BY i.created_at, i.id LIMIT 1;
    IF parent IS NULL THEN
        parent := '00-' || replace(gen_random_uuid()::text, '-', '') || '-'
                  || left(replace(gen_random_uuid()::text, '-', ''), 16) || '-01';
        state := NULL;
    END IF;
END
$$;

-- How long an agent may wait for a claim, ready and due, before the end of
-- another agent's step gives up its kept lease for it (settle_agent's
-- p_lease_ttl). Without it, one agent released ready made every other
-- step's end release too, each release readied another, and the workers
-- stayed at a release and a claim per step for as long as the load
-- lasted. An agent released ready is claimed well inside it (the wake
-- hint, then one claim); one that waits longer has a real queue ahead.
CREATE OR REPLACE FUNCTION holdfast.kept_lease_grace()
RETURNS interval LANGUAGE sql IMMUTABLE AS $$ SELECT interval '50 milliseconds' $$;

-- The one way a step ends: decide the agent's next state (decide_next_state)
-- and write it, the lease's release, the events' seqs, the turn and what
-- the step itself changed on the agent, in one agent-row UPDATE. Every
-- ending goes through it: a committed model step (apply_model_step), a
-- compaction, a release after tool results (release_agent), a retry, an
-- interrupt, a failure (fail_step), a failed or cancelled turn, and with
-- only p_agent (every default: no events, nothing of a step's own) an
-- agent whose facts changed outside a step (a tool result, an approval, an
-- unarchive). Precedence of the states: archived; runnable tool calls
-- (ready); tool calls waiting on the outside (waiting); an open turn
-- (ready: the model must answer); unconsumed inputs (a new turn, ready);
-- otherwise idle.
--
-- p_types / p_data are the events of the ending, appended after the seqs
-- are reserved; p_data NULL reserves the seqs only (the returned `types`,
-- ending at `last_event_seq`), for a caller whose events name rows it
-- writes afterwards (apply_model_step, insert_reserved_events). When a turn
-- opens, turn.started is added to them (and the turn's trace context set,
-- turn_trace_context, and the oldest queued input admitted,
-- admit_queued_input). Turn events keep the agent's last_turn_* columns:
-- the last of them says whether the latest turn runs (turn.started) or how
-- it ended (turn_outcome; `error` from its data).
--
-- What the step wrote, all optional: p_turn_open the turn flag after it
-- (NULL: unchanged); p_new_runnable / p_new_waiting whether tool calls it
-- is about to insert are pending / waiting and p_consumed the inputs it is
-- about to consume (for decide_next_state); p_new_steps / p_new_messages the
-- step and message seqs it reserves (returned as last_step_seq,
-- last_message_seq); p_model_step a model response, counted in
-- turn_model_steps; p_usage what it cost, added to turn_usage (after it,
-- for the turn.completed it may carry) and usage; p_model_attempts the
-- retry count after it (NULL: unchanged; 0 whenever a turn opens or a model
-- step commits); p_step_failures the run of failed steps after it (0 for
-- every ending but a failure). The lost attempt (reap_agent) is cleared.
--
-- p_lease_ttl, from the lease holder (the caller has checked its lease):
-- keep the lease when the agent stays ready, so its holder takes the next
-- step at once, without a release and a re-claim. Only when the next step
-- is due (run_after) and no other agent has waited to be claimed, ready
-- and due, for longer than kept_lease_grace() (claims stay fair); then the
-- agent stays `running`, under the same holder and session, at epoch + 1
-- (each step its own epoch: a write of the step before is refused, HF001,
-- and a model step's epoch stays unique), until now + p_lease_ttl, and the
-- returned state is 'running'. No wake hint is sent for it.
-- The caller holds the agent's row lock. Returns the state and the seqs.
CREATE OR REPLACE FUNCTION holdfast.settle_agent(
    p_agent uuid, p_types text[] DEFAULT '{}', p_data jsonb[] DEFAULT '{}', p_run_after timestamptz DEFAULT NULL,
    p_turn_open boolean DEFAULT NULL,
    p_new_runnable boolean DEFAULT false, p_new_waiting boolean DEFAULT false,
    p_consumed uuid[] DEFAULT '{}',
    p_new_steps integer DEFAULT 0, p_new_messages integer DEFAULT 0,
    p_model_step boolean DEFAULT false, p_usage holdfast.token_usage DEFAULT NULL,
    p_model_attempts integer DEFAULT NULL, p_step_failures integer DEFAULT 0,
    p_lease_ttl interval DEFAULT NULL,
    OUT state text, OUT types text[], OUT last_step_seq bigint, OUT last_message_seq bigint,
    OUT last_event_seq bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_agent_state text;
    v_turn_open boolean;
    v_data jsonb[] := p_data;
    v_open_turn boolean := false;
    v_trace_parent text;
    v_trace_state text;
    v_turn_event text;
    v_turn_data jsonb;
    v_now timestamptz := holdfast.now();
    -- A turn opens on the config version a next_turn change left waiting,
    -- or else on the one in force (update_agent_config).
    v_next_config_version integer;
    v_turn_config_version integer;
    v_run_after timestamptz;
    v_keep_lease boolean := false;
    v_turn_types CONSTANT text[] := ARRAY['turn.started', 'turn.completed', 'turn.failed', 'turn.cancelled'];
BEGIN
    types := coalesce(p_types, '{}');
    SELECT a.state, coalesce(p_turn_open, a.turn_open), a.next_turn_config_version,
           coalesce(a.next_turn_config_version, a.config_version), coalesce(p_run_after, a.run_after)
      INTO v_agent_state, v_turn_open, v_next_config_version, v_turn_config_version, v_run_after
      FROM holdfast.agents a WHERE a.id = p_agent;
    IF v_agent_state = 'archived' THEN
        state := 'archived';
        UPDATE holdfast.agents a
           SET run_after = coalesce(p_run_after, a.run_after),
               last_step_seq = a.last_step_seq + p_new_steps,
               last_message_seq = a.last_message_seq + p_new_messages,
               last_event_seq = a.last_event_seq + cardinality(types),
               last_event_at = CASE WHEN cardinality(types) > 0 THEN v_now ELSE a.last_event_at END
         WHERE a.id = p_agent
        RETURNING a.last_step_seq, a.last_message_seq, a.last_event_seq
             INTO last_step_seq, last_message_seq, last_event_seq;
    ELSE
        SELECT d.state, d.opens_turn INTO state, v_open_turn
          FROM holdfast.decide_next_state(p_agent, v_turn_open, p_new_runnable, p_new_waiting, p_consumed) d;
        IF v_open_turn THEN
            types := array_append(types, 'turn.started');
            IF p_data IS NOT NULL THEN
                v_data := array_append(v_data, jsonb_build_object('config_version', v_turn_config_version));
            END IF;
            SELECT t.parent, t.state INTO v_trace_parent, v_trace_state
              FROM holdfast.next_turn_trace_context(p_agent, p_consumed) t;
            PERFORM holdfast.admit_queued_input(p_agent);
        END IF;
        IF p_lease_ttl IS NOT NULL AND state = 'ready' AND v_agent_state = 'running'
           AND v_run_after <= v_now
           AND NOT EXISTS (SELECT 1 FROM holdfast.agents o
                            WHERE o.state = 'ready'
                              AND greatest(o.run_after, o.state_changed_at) <= v_now - holdfast.kept_lease_grace()) THEN
            v_keep_lease := true;
            state := 'running';
        END IF;
        -- Most endings have no turn event: the array test is an
        -- expression, the search a statement.
        IF types && v_turn_types THEN
            SELECT u.type, u.data INTO v_turn_event, v_turn_data
              FROM unnest(types, coalesce(v_data, '{}')) WITH ORDINALITY AS u (type, data, ord)
             WHERE u.type = ANY (v_turn_types)
             ORDER BY u.ord DESC LIMIT 1;
        END IF;
        UPDATE holdfast.agents a
           SET state = settle_agent.state,
               lease_owner = CASE WHEN v_keep_lease THEN a.lease_owner END,
               lease_expires_at = CASE WHEN v_keep_lease THEN v_now + p_lease_ttl END,
               lease_pid = CASE WHEN v_keep_lease THEN a.lease_pid END,
               lease_backend_start = CASE WHEN v_keep_lease THEN a.lease_backend_start END,
               lease_epoch = a.lease_epoch + CASE WHEN v_keep_lease THEN 1 ELSE 0 END,
               updated_at = v_now,
               turn_open = v_turn_open OR v_open_turn,
               config = CASE WHEN v_open_turn AND v_next_config_version IS NOT NULL
                             THEN (SELECT v.config FROM holdfast.agent_config_versions v
                                    WHERE v.agent_id = p_agent AND v.version = v_next_config_version)
                             ELSE a.config END,
               config_version = CASE WHEN v_open_turn THEN v_turn_config_version ELSE a.config_version END,
               next_turn_config_version = CASE WHEN v_open_turn THEN NULL ELSE a.next_turn_config_version END,
               model_attempts = CASE WHEN v_open_turn OR p_model_step THEN 0
                                     ELSE coalesce(p_model_attempts, a.model_attempts) END,
               turn_model_steps = CASE WHEN v_open_turn THEN 0
                                       WHEN p_model_step THEN a.turn_model_steps + 1
                                       ELSE a.turn_model_steps END,
               turn_trace_parent = CASE WHEN v_open_turn THEN v_trace_parent ELSE a.turn_trace_parent END,
               turn_trace_state = CASE WHEN v_open_turn THEN v_trace_state ELSE a.turn_trace_state END,
               turn_seq = a.turn_seq + CASE WHEN v_open_turn THEN 1 ELSE 0 END,
               turn_usage = CASE WHEN v_open_turn THEN holdfast.zero_usage()
                                 WHEN p_usage IS NULL THEN a.turn_usage
                                 ELSE holdfast.add_usage(a.turn_usage, p_usage) END,
               usage = CASE WHEN p_usage IS NULL THEN a.usage ELSE holdfast.add_usage(a.usage, p_usage) END,
               step_failures = p_step_failures,
               first_attempt_epoch = NULL, lost_attempt_epoch = NULL,
               lost_attempt_started_at = NULL, lost_attempt_ended_at = NULL,
               run_after = v_run_after,
               last_step_seq = a.last_step_seq + p_new_steps,
               last_message_seq = a.last_message_seq + p_new_messages,
               last_event_seq = a.last_event_seq + cardinality(types),
               last_event_at = CASE WHEN cardinality(types) > 0 THEN v_now ELSE a.last_event_at END,
               last_turn_started_at = CASE WHEN v_turn_event = 'turn.started' THEN v_now ELSE a.last_turn_started_at END,
               last_turn_ended_at = CASE WHEN v_turn_event IS NULL THEN a.last_turn_ended_at
                                         WHEN v_turn_event = 'turn.started' THEN NULL ELSE v_now END,
               last_turn_outcome = CASE WHEN v_turn_event IS NULL THEN a.last_turn_outcome
                                        ELSE holdfast.turn_outcome(v_turn_event, v_turn_data) END,
               last_turn_error = CASE WHEN v_turn_event IS NULL THEN a.last_turn_error
                                      ELSE v_turn_data -> 'error' END
         WHERE a.id = p_agent
        RETURNING a.last_step_seq, a.last_message_seq, a.last_event_seq
             INTO last_step_seq, last_message_seq, last_event_seq;
    END IF;
    IF p_data IS NOT NULL THEN
        PERFORM holdfast.insert_reserved_events(p_agent, last_event_seq, types, v_data);
    END IF;
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
CREATE TRIGGER _100_state_changed BEFORE UPDATE OF state ON holdfast.agents
    FOR EACH ROW EXECUTE FUNCTION holdfast.tg_agents_state_changed();

-- The wake hint: NOTIFY holdfast_ready when an agent becomes claimable, so
-- idle workers claim at once. The payload is empty on purpose: Postgres
-- folds identical notifications within a transaction, so a transaction
-- that readies 1,000 agents sends one hint, not 1,000. Workers
-- claim whatever is ready; they do not need the id. Agents readied with a
-- future run_after are woken by maintenance_tick when the time comes.
-- A session that set holdfast.wake_after_commit (send_pending_wake's
-- caller) gets the hint noted instead, in a session setting that the
-- transaction's commit keeps and its rollback drops, and sends it after
-- the commit: see send_pending_wake.
CREATE OR REPLACE FUNCTION holdfast.tg_agents_send_wake() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.run_after <= holdfast.now() THEN
        IF current_setting('holdfast.wake_after_commit', true) = 'on' THEN
            PERFORM set_config('holdfast.wake_pending', 'on', false);
        ELSE
            PERFORM pg_notify('holdfast_ready', '');
        END IF;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER _900_send_wake AFTER INSERT OR UPDATE OF state ON holdfast.agents
    FOR EACH ROW WHEN (NEW.state = 'ready')
    EXECUTE FUNCTION holdfast.tg_agents_send_wake();

-- The wake hint of the session's last writes, sent after their commit.
-- A transaction that NOTIFYs holds Postgres's notify queue lock from its
-- pre-commit through its WAL flush, so concurrent writers that each hint
-- wait on each other's flushes (`Lock: object`), one commit at a time. A
-- writer that sets holdfast.wake_after_commit to 'on' (session level)
-- before its write gets its hint noted by tg_agents_send_wake, and
-- calls this right after the commit, as a statement of its own: this
-- transaction writes no WAL, so it holds the lock for an instant. It
-- turns wake_after_commit off again and sends holdfast_ready when the
-- write readied an agent. Called inside the writer's own transaction, it
-- sends the hint at that transaction's commit, as the trigger would have.
-- The hint is advisory: a writer that dies between its commit and this
-- call costs a wake, and workers also claim every poll interval. Returns
-- whether a hint was sent.
CREATE OR REPLACE FUNCTION holdfast.send_pending_wake() RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_pending boolean := coalesce(current_setting('holdfast.wake_pending', true) = 'on', false);
BEGIN
    PERFORM set_config('holdfast.wake_after_commit', 'off', false);
    IF v_pending THEN
        PERFORM set_config('holdfast.wake_pending', 'off', false);
        PERFORM pg_notify('holdfast_ready', '');
    END IF;
    RETURN v_pending;
END
$$;

-- The first key of the lease session lock (the second is the holder's
-- backend pid): 'Hold' in ASCII, apart from the single-key advisory locks
-- (migrations') by its two-key form.
CREATE OR REPLACE FUNCTION holdfast.lease_lock_class()
RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT 1215261796 $$;

-- Take this session's lease lock, once per session: a session-level
-- advisory lock (lease_lock_class(), pg_backend_pid()). It ends with the
-- session, and also when a session-mode pooler hands the backend to
-- another client (its reset, DISCARD ALL, releases advisory locks), which
-- the pid alone would not show; maintenance_tick then releases the
-- session's leases. A session setting remembers the lock is held (DISCARD
-- ALL resets it too). Never waits: the key is this backend's own pid.
CREATE OR REPLACE FUNCTION holdfast.hold_lease_session_lock()
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('holdfast.lease_session_lock', true) IS DISTINCT FROM 'held' THEN
        PERFORM pg_try_advisory_lock(holdfast.lease_lock_class(), pg_backend_pid());
        PERFORM set_config('holdfast.lease_session_lock', 'held', false);
    END IF;
END
$$;

-- Claim up to p_max due ready agents, fairly: round-robin over
-- projects — each project's oldest-ready agent (by ready time, above)
-- before any project's second, and so on — within each project's
-- max_running. Each claimed agent turns running under a new lease (epoch + 1)
-- held by p_owner for p_ttl.
--   1. The projects with due agents, oldest head first: a skip scan of
--      agents_ready_project_idx, one index probe per project with ready
--      agents; at most p_max of them can take part in one batch.
--   2. Capped projects among them are locked (FOR NO KEY UPDATE, id order),
--      so two claimers cannot both fill a project's last slot; their
--      running agents are counted after the lock.
--   3. Per project, its oldest due agents (up to p_max, or what its cap
--      leaves), ranked; taken in (rank, ready time) order, SKIP LOCKED.
--   4. When concurrent claimers held some of those, the rest of the batch
--      comes from the overall oldest-ready uncapped agents (SKIP LOCKED
--      scans past held rows), so claimers never
--      starve each other.
-- Cost: an index probe per project with ready agents plus p_max rows per
-- chosen project; flat in idle and archived agents.
CREATE OR REPLACE FUNCTION holdfast.claim_agents(p_worker text, p_max integer, p_ttl interval)
RETURNS TABLE (agent_id uuid, epoch bigint) LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_now timestamptz := holdfast.now();
    v_max integer := greatest(coalesce(p_max, 0), 0);
    v_backend_start timestamptz;
    v_projects uuid[];
    v_ids uuid[];
    v_id uuid;
    v_candidate uuid;
    v_due boolean;
BEGIN
    IF p_worker IS NULL OR p_worker = '' THEN
        PERFORM holdfast.raise('HF422', 'worker name must not be empty', 'worker');
    END IF;
    IF p_ttl IS NULL OR p_ttl <= '0'::interval THEN
        PERFORM holdfast.raise('HF422', 'ttl must be positive', 'ttl');
    END IF;
    IF v_max = 0 THEN
        RETURN;
    END IF;
    WITH RECURSIVE heads (project_id, ready_at) AS (
        (SELECT a.project_id, greatest(a.run_after, a.state_changed_at)
           FROM holdfast.agents a
          WHERE a.state = 'ready'
          ORDER BY a.project_id, greatest(a.run_after, a.state_changed_at), a.id
          LIMIT 1)
        UNION ALL
        SELECT n.project_id, n.ready_at
          FROM heads h
          CROSS JOIN LATERAL (
              SELECT a.project_id, greatest(a.run_after, a.state_changed_at) AS ready_at
                FROM holdfast.agents a
               WHERE a.state = 'ready' AND a.project_id > h.project_id
               ORDER BY a.project_id, greatest(a.run_after, a.state_changed_at), a.id
               LIMIT 1) n
    )
    SELECT array_agg(d.project_id ORDER BY d.ready_at, d.project_id) INTO v_projects
      FROM (SELECT h.project_id, h.ready_at FROM heads h
             WHERE h.ready_at <= v_now
             ORDER BY h.ready_at, h.project_id
             LIMIT v_max) d;
    IF v_projects IS NULL THEN
        RETURN;
    END IF;

    PERFORM 1 FROM holdfast.projects p
      WHERE p.id = ANY (v_projects) AND p.max_running IS NOT NULL
      ORDER BY p.id
        FOR NO KEY UPDATE;

    -- The candidates in claim order; each is then locked by its key, one
    -- probe per candidate, until the batch is full. Not one join of the
    -- candidates with agents under FOR UPDATE: the generic plan of that,
    -- made on a new install's empty statistics (see lock_agents), was a
    -- nested loop over every ready agent that redid the per-project
    -- candidate search for each, so a claim's cost grew with the square
    -- of the ready agents' index entries (dead ones included, piling up
    -- between vacuums).
    v_ids := '{}';
    FOR v_candidate IN
        WITH quotas AS (
            SELECT p.id AS project_id,
                   CASE WHEN p.max_running IS NULL THEN v_max
                        ELSE greatest(0, least(v_max, p.max_running - (
                            SELECT count(*) FROM holdfast.agents r
                             WHERE r.project_id = p.id AND r.state = 'running')))::integer
                   END AS quota
              FROM holdfast.projects p
             WHERE p.id = ANY (v_projects)
        )
        SELECT c.id
          FROM quotas q
          CROSS JOIN LATERAL (
              SELECT a.id, greatest(a.run_after, a.state_changed_at) AS ready_at,
                     row_number() OVER (ORDER BY greatest(a.run_after, a.state_changed_at), a.id) AS rank
                FROM holdfast.agents a
               WHERE a.project_id = q.project_id AND a.state = 'ready'
                 AND greatest(a.run_after, a.state_changed_at) <= v_now
               ORDER BY greatest(a.run_after, a.state_changed_at), a.id
               LIMIT q.quota) c
         ORDER BY c.rank, c.ready_at, c.id
    LOOP
        -- By the key alone, the state checked on the locked row: a
        -- predicate on state here lets the plan probe a ready index for
        -- the id, reading its entries up to the match. A candidate another
        -- claimer took meanwhile stays locked until this claim commits.
        SELECT a.state = 'ready' AND greatest(a.run_after, a.state_changed_at) <= v_now
          INTO v_due
          FROM holdfast.agents a
         WHERE a.id = v_candidate
           FOR UPDATE SKIP LOCKED;
        IF v_due THEN
            v_ids := v_ids || v_candidate;
            EXIT WHEN cardinality(v_ids) >= v_max;
        END IF;
    END LOOP;

    IF cardinality(v_ids) < v_max THEN
        v_ids := v_ids || ARRAY(
            SELECT a.id FROM holdfast.agents a
             WHERE a.state = 'ready' AND greatest(a.run_after, a.state_changed_at) <= v_now
               AND a.id <> ALL (v_ids)
               AND NOT EXISTS (SELECT 1 FROM holdfast.projects p
                                WHERE p.id = a.project_id AND p.max_running IS NOT NULL)
             ORDER BY greatest(a.run_after, a.state_changed_at), a.id
             LIMIT v_max - cardinality(v_ids)
               FOR UPDATE OF a SKIP LOCKED);
    END IF;

    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    -- Read only for a claim that leases something: pg_stat_get_activity
    -- copies every backend's status, and most claims of a busy worker
    -- that find nothing are the ones woken with another worker.
    SELECT s.backend_start INTO v_backend_start FROM pg_stat_get_activity(pg_backend_pid()) s;
    PERFORM holdfast.hold_lease_session_lock();

    -- One keyed UPDATE per agent, not one by `id = ANY (v_ids)`: the
    -- generic plan of that was a sequential scan when the session's first
    -- claim found the table without statistics (see lock_agents).
    FOREACH v_id IN ARRAY v_ids LOOP
        UPDATE holdfast.agents a
           SET state = 'running',
               lease_owner = p_worker,
               lease_epoch = a.lease_epoch + 1,
               lease_expires_at = v_now + p_ttl,
               lease_pid = pg_backend_pid(),
               lease_backend_start = v_backend_start,
               lease_session_locked = true,
               updated_at = v_now
         WHERE a.id = v_id
        RETURNING a.id, a.lease_epoch INTO agent_id, epoch;
        RETURN NEXT;
    END LOOP;
END
$$;

-- Renew p_worker's leases in one call. For each (agent, epoch) pair: renewed =
-- true when the lease was still held and is now extended by p_ttl; false when it
-- was lost (released, reaped, expired or re-claimed) — the worker must stop that
-- step. cancel_requested tells the worker a cancel is pending (the fallback for
-- a lost cancel notification); interrupt_input is the newest interrupt input
-- of the turn not yet consumed (the fallback for a lost holdfast_interrupt
-- notification: the worker aborts its model call when that call did not
-- include it). The session's start time comes from
-- pg_stat_get_activity(own pid), as in claim_agents. Locks agents in id order.
CREATE OR REPLACE FUNCTION holdfast.renew_leases(p_worker text, p_agents uuid[], p_epochs bigint[], p_ttl interval)
RETURNS TABLE (agent_id uuid, renewed boolean, cancel_requested boolean, interrupt_input uuid)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_now timestamptz := holdfast.now();
    v_backend_start timestamptz;
BEGIN
    IF coalesce(array_length(p_agents, 1), 0) <> coalesce(array_length(p_epochs, 1), 0) THEN
        PERFORM holdfast.raise('HF422', 'agents and epochs must have the same length', 'epochs');
    END IF;
    SELECT s.backend_start INTO v_backend_start FROM pg_stat_get_activity(pg_backend_pid()) s;
    PERFORM holdfast.hold_lease_session_lock();
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
               lease_backend_start = v_backend_start,
               lease_session_locked = true
          FROM locked l
         WHERE a.id = l.id
           -- Re-checked after the lock: a reaper may have won the race.
           AND a.state = 'running' AND a.lease_owner = p_worker AND a.lease_expires_at > v_now
        RETURNING a.id, a.cancel_requested_at IS NOT NULL AS cancel_requested
    )
    SELECT w.agent_id, r.id IS NOT NULL, coalesce(r.cancel_requested, false),
           (SELECT i.id FROM holdfast.turn_inputs(r.id) i
             WHERE i.mode = 'interrupt' ORDER BY i.created_at DESC, i.id DESC LIMIT 1)
      FROM wanted w LEFT JOIN renewed r ON r.id = w.agent_id;
END
$$;

-- Give up a lease: the agent's state is settled from its saved facts (ready
-- again if there is work, waiting, or idle). A worker that gives up a lease
-- mid-call (drain past its timeout, a cancelled step) cannot know whether the
-- IO happened, so its running calls are interrupted exactly as a reap would.
-- p_run_after delays the next claim (a durable backoff: no worker waits); it
-- is written by the settle's UPDATE. p_lease_ttl keeps the lease instead
-- when the agent stays ready (settle_agent): the state returned is
-- then 'running', and the caller holds the lease at p_epoch + 1. Fenced
-- (HF001).
CREATE OR REPLACE FUNCTION holdfast.release_agent(p_agent uuid, p_epoch bigint, p_run_after timestamptz DEFAULT NULL,
                                                  p_lease_ttl interval DEFAULT NULL)
RETURNS text LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    PERFORM holdfast.interrupt_running_calls(p_agent);
    RETURN (holdfast.settle_agent(p_agent, p_run_after => p_run_after, p_lease_ttl => p_lease_ttl)).state;
END
$$;

-- Release one agent whose holder is gone (lease expired, or its session died):
-- bump the epoch so the old holder's writes fail HF001, and resolve what it left.
-- An in-flight model call needs nothing: it is retried from saved state. An
-- external tool call marked running might have happened: it is completed as
-- interrupted (interrupt_running_calls), never rerun. Waiting calls are
-- untouched. The dead attempt is recorded (lost_attempt_*, and the step's
-- first_attempt_epoch) for the traces, and `worker.lost` {"reason", "worker",
-- "epoch"} goes on the timeline. The caller holds the agent's row lock.
-- p_reason: 'lease_expired' | 'session_gone' | 'released'.
CREATE OR REPLACE FUNCTION holdfast.reap_agent(p_agent uuid, p_reason text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_lost holdfast.agents;
BEGIN
    PERFORM holdfast.interrupt_running_calls(p_agent);
    UPDATE holdfast.agents SET lease_epoch = lease_epoch + 1 WHERE id = p_agent
    RETURNING * INTO v_lost;
    -- The timeline says why the step stopped and will run again: without it a
    -- lost model call leaves no trace but the time that passed.
    PERFORM holdfast.settle_agent(p_agent, ARRAY['worker.lost'], ARRAY[jsonb_build_object(
        'reason', p_reason, 'worker', v_lost.lease_owner, 'epoch', v_lost.lease_epoch - 1)], NULL);
    -- The dead holder's attempt, for its span (emitted by the next attempt,
    -- which links to the step's first attempt). Its start is the claim's
    -- time, or of its last saved write within the lease (updated_at).
    UPDATE holdfast.agents
       SET lost_attempt_epoch = v_lost.lease_epoch - 1,
           lost_attempt_started_at = v_lost.updated_at,
           lost_attempt_ended_at = holdfast.now(),
           first_attempt_epoch = coalesce(v_lost.first_attempt_epoch, v_lost.lease_epoch - 1)
     WHERE id = p_agent;
    RAISE LOG 'holdfast: released agent % (%)', p_agent, p_reason;
END
$$;

-- One maintenance pass over agents:
--   1. release leases past expiry;
--   2. release leases whose claiming session is gone;
--   3. wake workers when delayed agents (run_after) have come due;
--   4. cancel the turns of subagents whose parent's call was cancelled
--      while they were busy (subagent_cancels; child rows SKIP LOCKED);
--   5. drop stream watches whose LISTEN session is gone (an API process
--      that died or reconnected: nobody hears their hints).
-- Returns counts as JSON, e.g. {"expired": 1, "session_gone": 0, "woken": 0,
-- "subagents_cancelled": 0, "watches_dropped": 0}. Safe to run from several processes at once.
CREATE OR REPLACE FUNCTION holdfast.maintenance_tick(p_batch integer DEFAULT 1000)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := holdfast.now();
    v_id uuid;
    v_call uuid;
    v_expired integer := 0;
    v_gone integer := 0;
    v_due integer := 0;
    v_children integer := 0;
    v_watches integer := 0;
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
    -- worker; such agents fall back to lease expiry. It is gone too when the
    -- backend lives on without the lease's session lock: a session-mode
    -- pooler reset it for another client (hold_lease_session_lock).
    FOR v_id IN
        SELECT a.id FROM holdfast.agents a
         WHERE a.state = 'running' AND a.lease_pid IS NOT NULL
           AND (NOT EXISTS (
                    SELECT 1 FROM pg_stat_activity s
                     WHERE s.pid = a.lease_pid
                       AND (s.backend_start IS NULL OR a.lease_backend_start IS NULL
                            OR s.backend_start = a.lease_backend_start))
                OR (a.lease_session_locked AND NOT EXISTS (
                    SELECT 1 FROM pg_locks l
                     WHERE l.locktype = 'advisory' AND l.granted AND l.pid = a.lease_pid
                       AND l.classid = holdfast.lease_lock_class()::oid
                       AND l.objid = a.lease_pid::oid AND l.objsubid = 2)))
         ORDER BY a.id LIMIT p_batch
           FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM holdfast.reap_agent(v_id, 'session_gone');
        v_gone := v_gone + 1;
    END LOOP;

    -- Delayed agents whose time has come (their ready time is their
    -- run_after): one hint for all of them. The window is the last few
    -- seconds, so each delayed agent is hinted by the ticks around its due
    -- time; workers also poll, so a missed hint only costs a poll interval.
    SELECT count(*) INTO v_due FROM holdfast.agents
     WHERE state = 'ready'
       AND greatest(run_after, state_changed_at) <= v_now
       AND greatest(run_after, state_changed_at) > v_now - interval '3 seconds'
       AND run_after > state_changed_at;
    IF v_due > 0 THEN
        PERFORM pg_notify('holdfast_ready', '');
    END IF;

    FOR v_call, v_id IN
        SELECT c.tool_call_id, c.child_agent_id FROM holdfast.subagent_cancels c
          JOIN holdfast.agents a ON a.id = c.child_agent_id
         ORDER BY c.created_at, c.tool_call_id LIMIT p_batch
           FOR UPDATE OF a SKIP LOCKED
    LOOP
        PERFORM holdfast.cancel_locked_turn(holdfast.lock_agent(v_id));
        DELETE FROM holdfast.subagent_cancels WHERE tool_call_id = v_call;
        v_children := v_children + 1;
    END LOOP;

    -- The same liveness test as for leases above.
    DELETE FROM holdfast.stream_watches w
     WHERE NOT EXISTS (
         SELECT 1 FROM pg_stat_activity s
          WHERE s.pid = w.listener_pid
            AND (s.backend_start IS NULL OR w.listener_backend_start IS NULL
                 OR s.backend_start = w.listener_backend_start));
    GET DIAGNOSTICS v_watches = ROW_COUNT;

    RETURN jsonb_build_object('expired', v_expired, 'session_gone', v_gone, 'woken', v_due,
                              'subagents_cancelled', v_children, 'watches_dropped', v_watches);
END
$$;
