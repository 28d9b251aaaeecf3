-- 0001_core.sql — the durability core.
--
-- Adds: projects and API keys, agents with their lease columns, inputs, steps,
-- messages, events and tool calls; the clock and id functions; the agent state
-- machine (settle_agent); the worker's fenced write API (claim_agents,
-- renew_leases, release_agent, commit_model_step, commit_tool_result); the
-- client write API (create_agent, create_input); the first maintenance_tick; the
-- NOTIFY triggers.
--
-- Why in SQL: every guarantee Holdfast makes (one holder per agent, fenced
-- writes, gap-free event sequences, nothing half-written) is enforced here, under
-- row locks, so that any client — the Rust processes, psql, an integration —
-- gets the same guarantees by calling the same functions.
--
-- Errors are SQLSTATEs a client can branch on:
--   HF001 lease lost    HF404 not found    HF409 already decided / wrong state
--   HF422 invalid input (the offending field is in the error's COLUMN field)
--
-- Lock order, everywhere: an agent row first, then its tool calls. Functions
-- that touch several agents lock them in id order.

-- ---------------------------------------------------------------------------
-- Clock and ids
-- ---------------------------------------------------------------------------

-- The one clock. clock_timestamp(), not now(): now() is frozen for a whole
-- transaction. Tests shift it with `SET holdfast.clock_offset = '2 minutes'`
-- (session-local) to move past lease expiry without sleeping.
CREATE FUNCTION holdfast.now() RETURNS timestamptz
LANGUAGE sql VOLATILE AS $$
    SELECT clock_timestamp()
         + coalesce(nullif(current_setting('holdfast.clock_offset', true), ''), '0')::interval
$$;

-- UUIDv7 (RFC 9562): 48-bit Unix milliseconds, then random bits, so ids sort by
-- creation time and index inserts stay append-mostly.
CREATE FUNCTION holdfast.uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;

-- Raise one of Holdfast's SQLSTATEs; p_column names the offending field.
CREATE FUNCTION holdfast.raise(p_code text, p_message text, p_column text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_column IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = p_code, MESSAGE = p_message;
    END IF;
    RAISE EXCEPTION USING ERRCODE = p_code, MESSAGE = p_message, COLUMN = p_column;
END
$$;

-- ---------------------------------------------------------------------------
-- Tables
-- ---------------------------------------------------------------------------

CREATE TABLE holdfast.projects (
    id         uuid PRIMARY KEY DEFAULT holdfast.uuid_v7(),
    name       text NOT NULL UNIQUE CHECK (name <> ''),
    created_at timestamptz NOT NULL DEFAULT holdfast.now()
);

-- API keys are stored as SHA-256 hashes; the clear key is shown once at creation.
CREATE TABLE holdfast.api_keys (
    id         uuid PRIMARY KEY DEFAULT holdfast.uuid_v7(),
    project_id uuid NOT NULL REFERENCES holdfast.projects (id),
    key_hash   bytea NOT NULL UNIQUE,
    prefix     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT holdfast.now(),
    revoked_at timestamptz
);

-- One row per agent. `state` is derived by settle_agent() from the facts below
-- and never set by hand elsewhere, except running (claim) and archived:
--   idle      nothing to do until an input arrives
--   ready     a worker should claim it once run_after has passed
--   running   a worker holds the lease (lease_* columns set)
--   waiting   tool calls wait on someone outside (client, person, machine)
--   archived  takes no new inputs
CREATE TABLE holdfast.agents (
    id                  uuid PRIMARY KEY DEFAULT holdfast.uuid_v7(),
    project_id          uuid NOT NULL REFERENCES holdfast.projects (id),
    config              jsonb NOT NULL,
    state               text NOT NULL DEFAULT 'idle'
                        CHECK (state IN ('idle', 'ready', 'running', 'waiting', 'archived')),
    -- A turn runs from the input that starts it to turn.completed/failed/cancelled.
    turn_open           boolean NOT NULL DEFAULT false,
    -- Model-call retry budget (durable: a crash does not reset it).
    model_attempts      integer NOT NULL DEFAULT 0,
    run_after           timestamptz NOT NULL DEFAULT holdfast.now(),
    -- Lease. The epoch only grows; every worker write names the epoch it claimed.
    lease_owner         text,
    lease_epoch         bigint NOT NULL DEFAULT 0,
    lease_expires_at    timestamptz,
    lease_pid           integer,
    lease_backend_start timestamptz,
    cancel_requested_at timestamptz,
    -- Counters for gap-free per-agent sequences, advanced under the row lock.
    last_event_seq      bigint NOT NULL DEFAULT 0,
    last_message_seq    bigint NOT NULL DEFAULT 0,
    last_step_seq       bigint NOT NULL DEFAULT 0,
    last_event_at       timestamptz,
    state_changed_at    timestamptz NOT NULL DEFAULT holdfast.now(),
    created_at          timestamptz NOT NULL DEFAULT holdfast.now(),
    updated_at          timestamptz NOT NULL DEFAULT holdfast.now(),
    CONSTRAINT agents_lease_iff_running CHECK (
        (state = 'running') = (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL))
);

-- Claim reads only ready agents: this partial index keeps claim cost flat no
-- matter how many idle or archived agents pile up.
CREATE INDEX agents_ready_idx ON holdfast.agents (run_after, id) WHERE state = 'ready';
-- The reaper reads only running agents.
CREATE INDEX agents_running_idx ON holdfast.agents (lease_expires_at) WHERE state = 'running';
CREATE INDEX agents_project_idx ON holdfast.agents (project_id, id);

CREATE TABLE holdfast.inputs (
    id              uuid PRIMARY KEY DEFAULT holdfast.uuid_v7(),
    project_id      uuid NOT NULL REFERENCES holdfast.projects (id),
    agent_id        uuid NOT NULL REFERENCES holdfast.agents (id),
    content         jsonb NOT NULL,
    idempotency_key text CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    -- Set when a model call that included this input was committed.
    consumed_at     timestamptz,
    created_at      timestamptz NOT NULL DEFAULT holdfast.now()
);
CREATE UNIQUE INDEX inputs_idempotency_idx ON holdfast.inputs (project_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX inputs_pending_idx ON holdfast.inputs (agent_id, created_at, id) WHERE consumed_at IS NULL;

-- One row per committed step. A model step is one claim's work, so
-- (agent_id, epoch) is unique for model steps: a replayed commit conflicts.
CREATE TABLE holdfast.steps (
    id         uuid PRIMARY KEY DEFAULT holdfast.uuid_v7(),
    agent_id   uuid NOT NULL REFERENCES holdfast.agents (id),
    step_seq   bigint NOT NULL,
    kind       text NOT NULL CHECK (kind IN ('model', 'tool')),
    epoch      bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT holdfast.now(),
    UNIQUE (agent_id, step_seq)
);
CREATE UNIQUE INDEX steps_model_epoch_idx ON holdfast.steps (agent_id, epoch) WHERE kind = 'model';

-- The history a model call is built from (provider-neutral content blocks).
CREATE TABLE holdfast.messages (
    agent_id   uuid NOT NULL REFERENCES holdfast.agents (id),
    seq        bigint NOT NULL,
    id         uuid NOT NULL UNIQUE DEFAULT holdfast.uuid_v7(),
    role       text NOT NULL CHECK (role IN ('user', 'assistant')),
    content    jsonb NOT NULL CHECK (jsonb_typeof(content) = 'array'),
    step_id    uuid REFERENCES holdfast.steps (id),
    input_id   uuid UNIQUE REFERENCES holdfast.inputs (id),
    created_at timestamptz NOT NULL DEFAULT holdfast.now(),
    PRIMARY KEY (agent_id, seq)
);

-- The timeline. seq is gap-free per agent: it comes from agents.last_event_seq,
-- advanced under the agent's row lock in the writing transaction.
CREATE TABLE holdfast.events (
    agent_id   uuid NOT NULL REFERENCES holdfast.agents (id),
    seq        bigint NOT NULL CHECK (seq > 0),
    id         uuid NOT NULL UNIQUE DEFAULT holdfast.uuid_v7(),
    type       text NOT NULL,
    data       jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT holdfast.now(),
    PRIMARY KEY (agent_id, seq)
);

-- Tool calls, with their state machine (docs/state-machines.md):
--   pending            a worker may run it (external, internal)
--   awaiting_approval  waits for approve/deny
--   waiting            waits for a client result, an answer or a machine
--   running            an external call is in flight under lease epoch running_epoch
--   completed          has output
--   cancelled          its turn was cancelled
CREATE TABLE holdfast.tool_calls (
    id            uuid PRIMARY KEY DEFAULT holdfast.uuid_v7(),
    agent_id      uuid NOT NULL REFERENCES holdfast.agents (id),
    step_id       uuid NOT NULL REFERENCES holdfast.steps (id),
    position      integer NOT NULL,
    provider_id   text NOT NULL,
    name          text NOT NULL,
    input         jsonb NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('external', 'internal', 'custom', 'question', 'command')),
    status        text NOT NULL CHECK (status IN ('pending', 'awaiting_approval', 'waiting', 'running', 'completed', 'cancelled')),
    running_epoch bigint,
    output        jsonb,
    is_error      boolean,
    result_step_id uuid REFERENCES holdfast.steps (id),
    created_at    timestamptz NOT NULL DEFAULT holdfast.now(),
    completed_at  timestamptz,
    UNIQUE (step_id, position),
    CONSTRAINT tool_calls_running_has_epoch CHECK ((status = 'running') = (running_epoch IS NOT NULL)),
    CONSTRAINT tool_calls_completed_has_output CHECK (
        (status = 'completed') = (output IS NOT NULL AND is_error IS NOT NULL AND completed_at IS NOT NULL))
);
CREATE INDEX tool_calls_open_idx ON holdfast.tool_calls (agent_id, status)
    WHERE status NOT IN ('completed', 'cancelled');
CREATE INDEX tool_calls_step_idx ON holdfast.tool_calls (step_id, position);

-- ---------------------------------------------------------------------------
-- Internals
-- ---------------------------------------------------------------------------

-- Append one event to an agent's timeline. The caller must hold the agent's row
-- lock (every public function locks the agent first); the counter update
-- re-locks it anyway, so a forgotten lock costs a wait, never a gap.
CREATE FUNCTION holdfast.append_event(p_agent uuid, p_type text, p_data jsonb)
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

-- Lock an agent row, or raise HF404.
CREATE FUNCTION holdfast.lock_agent(p_agent uuid)
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
CREATE FUNCTION holdfast.lock_leased_agent(p_agent uuid, p_epoch bigint)
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

-- Decide an unleased agent's state from its saved facts, open a new turn when
-- inputs are waiting, and write the state. The caller holds the row lock.
-- Order of precedence: archived; runnable tool calls (ready); tool calls waiting
-- on the outside (waiting); an open turn (ready: the model must answer);
-- unconsumed inputs (a new turn, ready); otherwise idle.
CREATE FUNCTION holdfast.settle_agent(p_agent uuid)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_agent holdfast.agents;
    v_state text;
BEGIN
    SELECT * INTO v_agent FROM holdfast.agents WHERE id = p_agent;
    IF v_agent.state = 'archived' THEN
        RETURN 'archived';
    END IF;
    IF EXISTS (SELECT 1 FROM holdfast.tool_calls
                WHERE agent_id = p_agent AND status IN ('pending', 'running')) THEN
        v_state := 'ready';
    ELSIF EXISTS (SELECT 1 FROM holdfast.tool_calls
                   WHERE agent_id = p_agent AND status IN ('awaiting_approval', 'waiting')) THEN
        v_state := 'waiting';
    ELSIF v_agent.turn_open THEN
        v_state := 'ready';
    ELSIF EXISTS (SELECT 1 FROM holdfast.inputs WHERE agent_id = p_agent AND consumed_at IS NULL) THEN
        PERFORM holdfast.append_event(p_agent, 'turn.started', '{}');
        UPDATE holdfast.agents SET turn_open = true, model_attempts = 0 WHERE id = p_agent;
        v_state := 'ready';
    ELSE
        v_state := 'idle';
    END IF;
    UPDATE holdfast.agents
       SET state = v_state,
           lease_owner = NULL, lease_expires_at = NULL, lease_pid = NULL, lease_backend_start = NULL,
           updated_at = holdfast.now()
     WHERE id = p_agent;
    RETURN v_state;
END
$$;

-- Keep state_changed_at true for the DBA views (stuck_agents).
CREATE FUNCTION holdfast.tg_agents_state_changed() RETURNS trigger
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

-- Wake workers when an agent becomes claimable. The payload is empty on
-- purpose: Postgres folds identical notifications within a transaction, so a
-- transaction that readies 1,000 agents sends one hint, not 1,000. Workers
-- claim whatever is ready; they do not need the id. Agents readied with a
-- future run_after are woken by maintenance_tick when the time comes.
CREATE FUNCTION holdfast.tg_agents_notify_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.run_after <= holdfast.now() THEN
        PERFORM pg_notify('holdfast_ready', '');
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER _900_notify_ready AFTER INSERT OR UPDATE OF state ON holdfast.agents
    FOR EACH ROW WHEN (NEW.state = 'ready')
    EXECUTE FUNCTION holdfast.tg_agents_notify_ready();

-- Tell stream listeners (the API's SSE fan-out) which agent has new events:
-- one notification per agent per transaction (identical payloads fold).
CREATE FUNCTION holdfast.tg_events_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('holdfast_events', NEW.agent_id::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER _900_notify_events AFTER INSERT ON holdfast.events
    FOR EACH ROW EXECUTE FUNCTION holdfast.tg_events_notify();

-- ---------------------------------------------------------------------------
-- Validation
-- ---------------------------------------------------------------------------

-- Validate an agent config; raise HF422 naming the field. The HTTP API maps
-- this to 400 with the same field, so SQL clients and HTTP clients get one rule.
CREATE FUNCTION holdfast.validate_config(p_config jsonb)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_tool jsonb;
    v_i integer := 0;
    v_names text[] := '{}';
    v_name text;
BEGIN
    IF p_config IS NULL OR jsonb_typeof(p_config) <> 'object' THEN
        PERFORM holdfast.raise('HF422', 'config must be a JSON object', 'config');
    END IF;
    IF jsonb_typeof(p_config -> 'model') IS DISTINCT FROM 'object' THEN
        PERFORM holdfast.raise('HF422', 'model must be an object', 'model');
    END IF;
    IF NOT coalesce(p_config #>> '{model,provider}' IN ('anthropic', 'openai'), false)
       OR jsonb_typeof(p_config #> '{model,provider}') <> 'string' THEN
        PERFORM holdfast.raise('HF422', 'model.provider must be "anthropic" or "openai"', 'model.provider');
    END IF;
    IF jsonb_typeof(p_config #> '{model,name}') IS DISTINCT FROM 'string'
       OR p_config #>> '{model,name}' = '' THEN
        PERFORM holdfast.raise('HF422', 'model.name must be a non-empty string', 'model.name');
    END IF;
    IF p_config #> '{model,base_url}' IS NOT NULL
       AND (jsonb_typeof(p_config #> '{model,base_url}') <> 'string'
            OR p_config #>> '{model,base_url}' !~ '^https?://') THEN
        PERFORM holdfast.raise('HF422', 'model.base_url must be an http(s) URL', 'model.base_url');
    END IF;
    IF p_config #> '{model,max_tokens}' IS NOT NULL
       AND (jsonb_typeof(p_config #> '{model,max_tokens}') <> 'number'
            OR (p_config #>> '{model,max_tokens}')::numeric <= 0
            OR (p_config #>> '{model,max_tokens}')::numeric <> trunc((p_config #>> '{model,max_tokens}')::numeric)) THEN
        PERFORM holdfast.raise('HF422', 'model.max_tokens must be a positive integer', 'model.max_tokens');
    END IF;
    IF p_config ? 'system' AND jsonb_typeof(p_config -> 'system') <> 'string' THEN
        PERFORM holdfast.raise('HF422', 'system must be a string', 'system');
    END IF;
    IF p_config ? 'tools' THEN
        IF jsonb_typeof(p_config -> 'tools') <> 'array' THEN
            PERFORM holdfast.raise('HF422', 'tools must be an array', 'tools');
        END IF;
        FOR v_tool IN SELECT value FROM jsonb_array_elements(p_config -> 'tools') LOOP
            IF jsonb_typeof(v_tool) <> 'object' THEN
                PERFORM holdfast.raise('HF422', 'each tool must be an object', format('tools[%s]', v_i));
            END IF;
            IF jsonb_typeof(v_tool -> 'type') IS DISTINCT FROM 'string' THEN
                PERFORM holdfast.raise('HF422', 'tool type must be a string', format('tools[%s].type', v_i));
            END IF;
            v_name := coalesce(v_tool ->> 'name', v_tool ->> 'type');
            IF v_tool ? 'name' AND (jsonb_typeof(v_tool -> 'name') <> 'string'
                                   OR v_name !~ '^[a-zA-Z0-9_-]{1,64}$') THEN
                PERFORM holdfast.raise('HF422', 'tool name must match ^[a-zA-Z0-9_-]{1,64}$', format('tools[%s].name', v_i));
            END IF;
            IF v_name = ANY (v_names) THEN
                PERFORM holdfast.raise('HF422', format('duplicate tool name "%s"', v_name), format('tools[%s].name', v_i));
            END IF;
            v_names := v_names || v_name;
            v_i := v_i + 1;
        END LOOP;
    END IF;
    IF p_config ? 'approvals' THEN
        IF jsonb_typeof(p_config -> 'approvals') <> 'object'
           OR (p_config -> 'approvals' ? 'require_for'
               AND jsonb_typeof(p_config #> '{approvals,require_for}') <> 'array') THEN
            PERFORM holdfast.raise('HF422', 'approvals.require_for must be an array of tool names', 'approvals.require_for');
        END IF;
        IF EXISTS (SELECT 1 FROM jsonb_array_elements(coalesce(p_config #> '{approvals,require_for}', '[]')) e
                    WHERE jsonb_typeof(e.value) <> 'string') THEN
            PERFORM holdfast.raise('HF422', 'approvals.require_for must be an array of tool names', 'approvals.require_for');
        END IF;
    END IF;
    IF p_config ? 'metadata' AND jsonb_typeof(p_config -> 'metadata') <> 'object' THEN
        PERFORM holdfast.raise('HF422', 'metadata must be an object', 'metadata');
    END IF;
END
$$;

-- Validate input content: a non-empty string, or a non-empty array of blocks.
CREATE FUNCTION holdfast.validate_content(p_content jsonb)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_content IS NULL
       OR NOT (   (jsonb_typeof(p_content) = 'string' AND p_content #>> '{}' <> '')
               OR (jsonb_typeof(p_content) = 'array' AND jsonb_array_length(p_content) > 0
                   AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_content) b
                                    WHERE jsonb_typeof(b.value) <> 'object'
                                       OR jsonb_typeof(b.value -> 'type') IS DISTINCT FROM 'string'))) THEN
        PERFORM holdfast.raise('HF422', 'content must be a non-empty string or a non-empty array of content blocks', 'content');
    END IF;
END
$$;

-- ---------------------------------------------------------------------------
-- Client write API
-- ---------------------------------------------------------------------------

-- Create a project if none has this name; return its id.
CREATE FUNCTION holdfast.ensure_project(p_name text)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
BEGIN
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$' THEN
        PERFORM holdfast.raise('HF422', 'project name must be 1 to 100 letters, digits, ".", "_" or "-"', 'project');
    END IF;
    INSERT INTO holdfast.projects (name) VALUES (p_name) ON CONFLICT (name) DO NOTHING RETURNING id INTO v_id;
    IF v_id IS NULL THEN
        SELECT id INTO v_id FROM holdfast.projects WHERE name = p_name;
    END IF;
    RETURN v_id;
END
$$;

-- Create an agent in a project. Raises HF404 for an unknown project, HF422 for
-- an invalid config (field named).
CREATE FUNCTION holdfast.create_agent(p_project uuid, p_config jsonb)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
BEGIN
    PERFORM holdfast.validate_config(p_config);
    IF NOT EXISTS (SELECT 1 FROM holdfast.projects WHERE id = p_project) THEN
        PERFORM holdfast.raise('HF404', format('project %s not found', p_project));
    END IF;
    INSERT INTO holdfast.agents (project_id, config) VALUES (p_project, p_config)
    RETURNING id INTO v_id;
    RETURN v_id;
END
$$;

-- Add an input to an agent, idempotently. With an idempotency key, the first
-- call creates the input and every later call with the same key and the same
-- agent and content returns it with replayed = true; the same key with another
-- agent or content raises HF422 (idempotency_key_reused). Concurrent callers
-- with one key serialize on the unique index: exactly one input is created.
--
-- Locks: the agent row (so the input, its event and the state change are one
-- step in the agent's history). Raises HF404 (agent), HF409 (archived), HF422.
CREATE FUNCTION holdfast.create_input_or_replay(p_agent uuid, p_content jsonb, p_idempotency_key text)
RETURNS TABLE (input_id uuid, replayed boolean) LANGUAGE plpgsql AS $$
DECLARE
    v_agent holdfast.agents;
    v_input holdfast.inputs;
BEGIN
    PERFORM holdfast.validate_content(p_content);
    IF p_idempotency_key IS NOT NULL AND length(p_idempotency_key) NOT BETWEEN 1 AND 255 THEN
        PERFORM holdfast.raise('HF422', 'idempotency key must be 1 to 255 characters', 'idempotency_key');
    END IF;
    v_agent := holdfast.lock_agent(p_agent);
    IF p_idempotency_key IS NOT NULL THEN
        SELECT * INTO v_input FROM holdfast.inputs
         WHERE project_id = v_agent.project_id AND idempotency_key = p_idempotency_key;
        IF FOUND THEN
            IF v_input.agent_id <> p_agent OR v_input.content <> p_content THEN
                PERFORM holdfast.raise('HF422', 'idempotency_key_reused: this key was used with another request', 'idempotency_key');
            END IF;
            RETURN QUERY SELECT v_input.id, true;
            RETURN;
        END IF;
    END IF;
    IF v_agent.state = 'archived' THEN
        PERFORM holdfast.raise('HF409', format('agent %s is archived', p_agent));
    END IF;
    INSERT INTO holdfast.inputs (project_id, agent_id, content, idempotency_key)
    VALUES (v_agent.project_id, p_agent, p_content, p_idempotency_key)
    RETURNING * INTO v_input;
    PERFORM holdfast.append_event(p_agent, 'input.received',
        jsonb_build_object('input_id', v_input.id, 'content', p_content));
    IF v_agent.state = 'idle' THEN
        PERFORM holdfast.settle_agent(p_agent);
    END IF;
    RETURN QUERY SELECT v_input.id, false;
END
$$;

-- The contract form of create_input_or_replay: returns the input id.
CREATE FUNCTION holdfast.create_input(p_agent uuid, p_content jsonb, p_idempotency_key text DEFAULT NULL)
RETURNS uuid LANGUAGE sql AS $$
    SELECT input_id FROM holdfast.create_input_or_replay(p_agent, p_content, p_idempotency_key)
$$;

-- ---------------------------------------------------------------------------
-- Worker write API (every write fenced by the claim's epoch)
-- ---------------------------------------------------------------------------

-- Claim up to p_max ready agents for p_worker. Bounded, SKIP LOCKED: claimers
-- never wait on each other and never get the same agent. Each claim bumps the
-- epoch, sets the expiry from the database clock, and records the claiming
-- session (pid, backend start) so maintenance can release the agents of a dead
-- session at once. Call it on the worker's long-lived session, not a pooled one.
CREATE FUNCTION holdfast.claim_agents(p_worker text, p_max integer, p_ttl interval)
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
    SELECT backend_start INTO v_backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid();
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
-- a lost cancel notification). Locks agents in id order.
CREATE FUNCTION holdfast.renew_leases(p_worker text, p_agents uuid[], p_epochs bigint[], p_ttl interval)
RETURNS TABLE (agent_id uuid, renewed boolean, cancel_requested boolean) LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := holdfast.now();
BEGIN
    IF coalesce(array_length(p_agents, 1), 0) <> coalesce(array_length(p_epochs, 1), 0) THEN
        PERFORM holdfast.raise('HF422', 'agents and epochs must have the same length', 'epochs');
    END IF;
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
               lease_backend_start = (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid())
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
-- again if there is work, waiting, or idle). p_run_after delays the next claim
-- (a durable backoff: no worker waits). Raises HF001 if the lease was lost.
CREATE FUNCTION holdfast.release_agent(p_agent uuid, p_epoch bigint, p_run_after timestamptz DEFAULT NULL)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    IF p_run_after IS NOT NULL THEN
        UPDATE holdfast.agents SET run_after = p_run_after WHERE id = p_agent;
    END IF;
    RETURN holdfast.settle_agent(p_agent);
END
$$;

-- Mark an external tool call as running before its IO starts (committed first,
-- so that after a crash the call is known to have maybe happened and is never
-- rerun). Fenced. Raises HF409 when the call is not pending.
CREATE FUNCTION holdfast.start_tool_call(p_agent uuid, p_epoch bigint, p_tool_call uuid)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    UPDATE holdfast.tool_calls SET status = 'running', running_epoch = p_epoch
     WHERE id = p_tool_call AND agent_id = p_agent AND status = 'pending';
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF409', format('tool call %s is not pending', p_tool_call));
    END IF;
END
$$;

-- Save a model response: the inputs it was built from (now part of history, in
-- arrival order), the assistant message, its tool calls, and their events, in
-- one transaction; then release the agent. Fenced (HF001).
--
-- p_input_ids: the unconsumed inputs the request included (inputs that arrived
--   after the request was built stay pending for the next call).
-- p_message: the assistant content blocks (array).
-- p_tool_calls: [{"provider_id", "name", "input", "kind"}], kind one of
--   external | internal | custom | question | command. A tool named in
--   config.approvals.require_for starts as awaiting_approval; custom, question
--   and command calls start as waiting; the rest as pending.
-- p_usage, p_stop_reason: as the provider reported them.
-- Returns the new step's id.
CREATE FUNCTION holdfast.commit_model_step(
    p_agent uuid, p_epoch bigint, p_input_ids uuid[], p_message jsonb,
    p_tool_calls jsonb, p_usage jsonb, p_stop_reason text)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_agent holdfast.agents;
    v_step_id uuid;
    v_step_seq bigint;
    v_input holdfast.inputs;
    v_call jsonb;
    v_pos integer := 0;
    v_status text;
    v_call_id uuid;
    v_calls jsonb := '[]';
    v_require text[];
BEGIN
    v_agent := holdfast.lock_leased_agent(p_agent, p_epoch);
    IF jsonb_typeof(p_message) IS DISTINCT FROM 'array' THEN
        PERFORM holdfast.raise('HF422', 'message must be an array of content blocks', 'message');
    END IF;
    IF jsonb_typeof(coalesce(p_tool_calls, '[]')) <> 'array' THEN
        PERFORM holdfast.raise('HF422', 'tool_calls must be an array', 'tool_calls');
    END IF;

    UPDATE holdfast.agents SET last_step_seq = last_step_seq + 1 WHERE id = p_agent
    RETURNING last_step_seq INTO v_step_seq;
    INSERT INTO holdfast.steps (agent_id, step_seq, kind, epoch)
    VALUES (p_agent, v_step_seq, 'model', p_epoch) RETURNING id INTO v_step_id;

    -- The inputs the call saw become history, in arrival order.
    FOR v_input IN
        SELECT * FROM holdfast.inputs
         WHERE agent_id = p_agent AND id = ANY (coalesce(p_input_ids, '{}')) AND consumed_at IS NULL
         ORDER BY created_at, id
    LOOP
        UPDATE holdfast.agents SET last_message_seq = last_message_seq + 1 WHERE id = p_agent;
        INSERT INTO holdfast.messages (agent_id, seq, role, content, step_id, input_id)
        SELECT p_agent, a.last_message_seq, 'user',
               CASE WHEN jsonb_typeof(v_input.content) = 'string'
                    THEN jsonb_build_array(jsonb_build_object('type', 'text', 'text', v_input.content #>> '{}'))
                    ELSE v_input.content END,
               v_step_id, v_input.id
          FROM holdfast.agents a WHERE a.id = p_agent;
        UPDATE holdfast.inputs SET consumed_at = holdfast.now() WHERE id = v_input.id;
    END LOOP;

    UPDATE holdfast.agents SET last_message_seq = last_message_seq + 1 WHERE id = p_agent;
    INSERT INTO holdfast.messages (agent_id, seq, role, content, step_id)
    SELECT p_agent, a.last_message_seq, 'assistant', p_message, v_step_id
      FROM holdfast.agents a WHERE a.id = p_agent;

    v_require := ARRAY(SELECT jsonb_array_elements_text(coalesce(v_agent.config #> '{approvals,require_for}', '[]')));
    FOR v_call IN SELECT value FROM jsonb_array_elements(coalesce(p_tool_calls, '[]')) LOOP
        IF jsonb_typeof(v_call -> 'name') IS DISTINCT FROM 'string'
           OR jsonb_typeof(v_call -> 'provider_id') IS DISTINCT FROM 'string' THEN
            PERFORM holdfast.raise('HF422', 'each tool call needs string name and provider_id', format('tool_calls[%s]', v_pos));
        END IF;
        IF NOT coalesce(v_call ->> 'kind' IN ('external', 'internal', 'custom', 'question', 'command'), false) THEN
            PERFORM holdfast.raise('HF422', 'tool call kind must be external, internal, custom, question or command', format('tool_calls[%s].kind', v_pos));
        END IF;
        v_status := CASE
            WHEN v_call ->> 'name' = ANY (v_require) THEN 'awaiting_approval'
            WHEN v_call ->> 'kind' IN ('custom', 'question', 'command') THEN 'waiting'
            ELSE 'pending' END;
        INSERT INTO holdfast.tool_calls (agent_id, step_id, position, provider_id, name, input, kind, status)
        VALUES (p_agent, v_step_id, v_pos, v_call ->> 'provider_id', v_call ->> 'name',
                coalesce(v_call -> 'input', '{}'), v_call ->> 'kind', v_status)
        RETURNING id INTO v_call_id;
        v_calls := v_calls || jsonb_build_object('id', v_call_id, 'provider_id', v_call ->> 'provider_id',
                                                 'name', v_call ->> 'name', 'input', coalesce(v_call -> 'input', '{}'),
                                                 'kind', v_call ->> 'kind', 'status', v_status);
        v_pos := v_pos + 1;
    END LOOP;

    PERFORM holdfast.append_event(p_agent, 'model.response', jsonb_build_object(
        'step_id', v_step_id, 'message', p_message, 'tool_calls', v_calls,
        'usage', coalesce(p_usage, '{}'), 'stop_reason', p_stop_reason));
    FOR v_call IN SELECT value FROM jsonb_array_elements(v_calls) LOOP
        PERFORM holdfast.append_event(p_agent, 'tool_call.created', v_call);
    END LOOP;

    UPDATE holdfast.agents SET model_attempts = 0 WHERE id = p_agent;
    IF v_pos = 0 THEN
        -- No tool calls: the model has answered; the turn is complete.
        UPDATE holdfast.agents SET turn_open = false WHERE id = p_agent;
        PERFORM holdfast.append_event(p_agent, 'turn.completed',
            jsonb_build_object('step_id', v_step_id, 'stop_reason', p_stop_reason));
    END IF;
    PERFORM holdfast.settle_agent(p_agent);
    RETURN v_step_id;
END
$$;

-- Save one tool call's result with its event, fenced by the worker's lease.
-- The agent stays leased (a batch may hold more calls); the worker releases it
-- with release_agent when its batch is done. Raises HF001 (lease lost), HF404
-- (no such call on this agent), HF409 (the call already has a result).
CREATE FUNCTION holdfast.commit_tool_result(
    p_agent uuid, p_epoch bigint, p_tool_call uuid, p_output jsonb, p_is_error boolean)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_call holdfast.tool_calls;
    v_step_id uuid;
    v_step_seq bigint;
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    SELECT * INTO v_call FROM holdfast.tool_calls WHERE id = p_tool_call AND agent_id = p_agent FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('tool call %s not found', p_tool_call));
    END IF;
    IF v_call.status NOT IN ('pending', 'running') THEN
        PERFORM holdfast.raise('HF409', format('tool call %s is %s', p_tool_call, v_call.status));
    END IF;
    IF p_output IS NULL THEN
        PERFORM holdfast.raise('HF422', 'output must not be null', 'output');
    END IF;
    UPDATE holdfast.agents SET last_step_seq = last_step_seq + 1 WHERE id = p_agent
    RETURNING last_step_seq INTO v_step_seq;
    INSERT INTO holdfast.steps (agent_id, step_seq, kind, epoch)
    VALUES (p_agent, v_step_seq, 'tool', p_epoch) RETURNING id INTO v_step_id;
    UPDATE holdfast.tool_calls
       SET status = 'completed', running_epoch = NULL, output = p_output,
           is_error = coalesce(p_is_error, false), result_step_id = v_step_id,
           completed_at = holdfast.now()
     WHERE id = p_tool_call;
    PERFORM holdfast.append_event(p_agent, 'tool_call.completed', jsonb_build_object(
        'tool_call_id', p_tool_call, 'name', v_call.name, 'output', p_output,
        'is_error', coalesce(p_is_error, false)));
    RETURN v_step_id;
END
$$;

-- ---------------------------------------------------------------------------
-- Maintenance
-- ---------------------------------------------------------------------------

-- The message an interrupted external call returns to the model.
CREATE FUNCTION holdfast.interrupted_output() RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT to_jsonb('Tool call was interrupted; its external outcome is unknown.'::text)
$$;

-- Release one agent whose holder is gone (lease expired, or its session died):
-- bump the epoch so the old holder's writes fail HF001, and resolve what it left.
-- An in-flight model call needs nothing: it is retried from saved state. An
-- external tool call marked running might have happened: it is completed as
-- interrupted, never rerun. Waiting calls are untouched. The caller holds the
-- agent's row lock. p_reason: 'lease_expired' | 'session_gone' | 'released'.
CREATE FUNCTION holdfast.reap_agent(p_agent uuid, p_reason text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_call holdfast.tool_calls;
BEGIN
    FOR v_call IN
        SELECT * FROM holdfast.tool_calls WHERE agent_id = p_agent AND status = 'running'
         ORDER BY step_id, position FOR UPDATE
    LOOP
        UPDATE holdfast.tool_calls
           SET status = 'completed', running_epoch = NULL, output = holdfast.interrupted_output(),
               is_error = true, completed_at = holdfast.now()
         WHERE id = v_call.id;
        PERFORM holdfast.append_event(p_agent, 'tool_call.interrupted', jsonb_build_object(
            'tool_call_id', v_call.id, 'name', v_call.name,
            'output', holdfast.interrupted_output(), 'is_error', true));
    END LOOP;
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
CREATE FUNCTION holdfast.maintenance_tick(p_batch integer DEFAULT 1000)
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

-- ---------------------------------------------------------------------------
-- Views for DBAs
-- ---------------------------------------------------------------------------

CREATE VIEW holdfast.agent_overview AS
SELECT a.id AS agent_id,
       a.project_id,
       a.state,
       a.turn_open,
       a.lease_owner,
       a.lease_epoch,
       a.lease_expires_at,
       a.lease_pid,
       a.run_after,
       (SELECT count(*) FROM holdfast.tool_calls t
         WHERE t.agent_id = a.id AND t.status NOT IN ('completed', 'cancelled')) AS pending_tool_calls,
       (SELECT count(*) FROM holdfast.inputs i
         WHERE i.agent_id = a.id AND i.consumed_at IS NULL) AS pending_inputs,
       a.last_event_seq,
       a.last_event_at,
       a.state_changed_at,
       a.created_at
  FROM holdfast.agents a;

CREATE VIEW holdfast.queue_depth AS
SELECT s.state, count(a.id) AS agents
  FROM unnest(ARRAY['idle', 'ready', 'running', 'waiting', 'archived']) AS s (state)
  LEFT JOIN holdfast.agents a ON a.state = s.state
 GROUP BY s.state;

CREATE VIEW holdfast.worker_leases AS
SELECT a.lease_owner AS worker,
       count(*) AS agents_held,
       min(a.lease_expires_at) AS oldest_lease_expires_at,
       max(a.state_changed_at) AS last_claim_at,
       array_agg(DISTINCT a.lease_pid) AS backend_pids
  FROM holdfast.agents a
 WHERE a.state = 'running'
 GROUP BY a.lease_owner;

-- Agents that need a look: ready but unclaimed for over a minute, leases past
-- expiry (maintenance is not running?), running on a session that is gone.
CREATE VIEW holdfast.stuck_agents AS
SELECT a.id AS agent_id, a.state, a.lease_owner, a.lease_expires_at, a.state_changed_at,
       CASE
           WHEN a.state = 'ready' THEN 'ready but unclaimed since ' || a.state_changed_at
           WHEN a.lease_expires_at <= holdfast.now() THEN 'lease expired at ' || a.lease_expires_at
           ELSE 'claiming session ' || a.lease_pid || ' is gone'
       END AS reason
  FROM holdfast.agents a
 WHERE (a.state = 'ready' AND a.run_after < holdfast.now() - interval '1 minute'
        AND a.state_changed_at < holdfast.now() - interval '1 minute')
    OR (a.state = 'running' AND a.lease_expires_at <= holdfast.now())
    OR (a.state = 'running' AND a.lease_pid IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM pg_stat_activity s WHERE s.pid = a.lease_pid));
