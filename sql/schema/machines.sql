-- sql/schema/machines.sql — machines and their commands.
--
-- This area's current schema: its tables, indexes and views first, then,
-- after the line below, its functions and triggers.
-- Each object is defined here once, as it is now. See docs/sql.md for how
-- a fresh install applies these files and how a change is added.

-- A machine a project's agents run commands on. Its daemon authenticates
-- with a token shown once at registration (`hfm_` + 64 hex) and stored as
-- its SHA-256. The daemon identifies each of its process starts with a
-- session id: the latest start owns the machine (claims and heartbeats of
-- an older session are refused), and the commands its journal held at
-- start say which accepted commands survived the restart.
CREATE TABLE holdfast.machines (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    project_id uuid NOT NULL,
    name text NOT NULL,
    token_hash bytea NOT NULL,
    -- The token's first characters, in clear, to tell tokens apart.
    token_prefix text NOT NULL,
    -- POSTed by the API when a wake attempt starts (a Wake-on-LAN relay, a
    -- cloud API behind a small proxy, ...).
    wake_url text,
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    last_heartbeat_at timestamptz,
    -- The daemon's last report: [{"id", "state": accepted|running|finished, "pid"?}].
    reported_commands jsonb DEFAULT '[]'::jsonb NOT NULL,
    -- The daemon process serving the machine, when it started, and the
    -- commands its journal held then.
    daemon_session uuid,
    daemon_started_at timestamptz,
    daemon_known_commands uuid[] DEFAULT '{}'::uuid[] NOT NULL,
    -- A wake attempt is in progress until wake_until (cleared by a heartbeat:
    -- the machine is up).
    wake_requested_at timestamptz,
    wake_until timestamptz,
    deleted_at timestamptz,
    daemon_sandboxed boolean,
    daemon_single_session boolean DEFAULT false NOT NULL,
    CONSTRAINT machines_name_check CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$'),
    CONSTRAINT machines_reported_commands_check CHECK (jsonb_typeof(reported_commands) = 'array'),
    CONSTRAINT machines_session_has_start CHECK ((daemon_session IS NULL) = (daemon_started_at IS NULL)),
    CONSTRAINT machines_wake_was_requested CHECK ((wake_until IS NULL) OR (wake_requested_at IS NOT NULL)),
    CONSTRAINT machines_pkey PRIMARY KEY (id),
    CONSTRAINT machines_token_hash_key UNIQUE (token_hash),
    CONSTRAINT machines_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id)
);

CREATE INDEX machines_project_idx ON holdfast.machines (project_id, id);

CREATE UNIQUE INDEX machines_live_name_unique ON holdfast.machines (project_id, name) WHERE (deleted_at IS NULL);

-- One command per run_command tool call. `reason` says why the server
-- decided an outcome without the machine's result (failed, unreachable,
-- unknown after a daemon restart, cancelled); it stays when a late result
-- arrives, as the record of what the agent was given. A cancelled command
-- may have been accepted (accepted_at): its daemon then stops its process
-- and reports the result. The result columns hold what the
-- machine reported, whenever it arrived.
CREATE TABLE holdfast.commands (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    tool_call_id uuid NOT NULL,
    agent_id uuid NOT NULL,
    machine_id uuid NOT NULL,
    command text NOT NULL,
    timeout_secs integer NOT NULL,
    state text DEFAULT 'queued' NOT NULL,
    reason text,
    queued_at timestamptz DEFAULT holdfast.now() NOT NULL,
    accepted_at timestamptz,
    -- What the agent was told when the machine went offline.
    last_known_state jsonb,
    result_state text,
    exit_code integer,
    signal integer,
    timed_out boolean,
    stdout text,
    stderr text,
    stdout_truncated boolean,
    stderr_truncated boolean,
    result_at timestamptz,
    -- When the command left queued/accepted.
    resolved_at timestamptz,
    trace_parent text,
    trace_state text,
    workspace text DEFAULT 'machine' NOT NULL,
    limit_reached text,
    -- The output bytes the daemon relayed while the command runs
    -- (command_output, never saved: the result stays the record) and when it
    -- last did, so live output is bounded in bytes and in rate.
    live_output_bytes integer DEFAULT 0 NOT NULL,
    live_output_at timestamptz,
    CONSTRAINT commands_live_output_bytes_check CHECK (live_output_bytes >= 0),
    CONSTRAINT commands_accepted_iff_handed_out CHECK ((state = 'cancelled') OR ((state IN ('queued', 'failed')) = (accepted_at IS NULL))),
    CONSTRAINT commands_command_check CHECK (command <> ''),
    CONSTRAINT commands_finished_has_result CHECK ((state <> 'finished') OR (result_state = 'finished')),
    CONSTRAINT commands_limit_has_result CHECK ((limit_reached IS NULL) OR (result_state = 'finished')),
    CONSTRAINT commands_limit_reached_check CHECK (limit_reached IN ('cpu_time', 'memory', 'processes')),
    CONSTRAINT commands_resolved_iff_done CHECK ((state IN ('queued', 'accepted')) = (resolved_at IS NULL)),
    CONSTRAINT commands_result_is_whole CHECK (((result_state IS NULL) = (result_at IS NULL)) AND ((result_state IS NULL) = (timed_out IS NULL)) AND ((result_state IS NULL) = (stdout_truncated IS NULL)) AND ((result_state IS NULL) = (stderr_truncated IS NULL))),
    CONSTRAINT commands_result_state_check CHECK (result_state IN ('finished', 'unknown')),
    CONSTRAINT commands_result_state_matches CHECK ((state <> ALL (ARRAY['finished', 'unknown'])) OR (result_state IS NULL) OR (result_state = state)),
    CONSTRAINT commands_state_check CHECK (state IN ('queued', 'accepted', 'finished', 'unknown', 'failed', 'unreachable', 'cancelled')),
    CONSTRAINT commands_timeout_secs_check CHECK ((timeout_secs >= 1) AND (timeout_secs <= 86400)),
    CONSTRAINT commands_unreachable_has_last_known CHECK ((state <> 'unreachable') OR (last_known_state IS NOT NULL)),
    CONSTRAINT commands_workspace_check CHECK (workspace IN ('machine', 'agent')),
    CONSTRAINT commands_pkey PRIMARY KEY (id),
    CONSTRAINT commands_tool_call_id_key UNIQUE (tool_call_id),
    CONSTRAINT commands_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES holdfast.agents(id),
    CONSTRAINT commands_machine_id_fkey FOREIGN KEY (machine_id) REFERENCES holdfast.machines(id),
    CONSTRAINT commands_tool_call_id_fkey FOREIGN KEY (tool_call_id) REFERENCES holdfast.tool_calls(id)
);

-- The offline and restart sweeps, and GET /v1/machines, read accepted ones.
CREATE INDEX commands_accepted_idx ON holdfast.commands (machine_id, accepted_at) WHERE (state = 'accepted');

CREATE INDEX commands_agent_idx ON holdfast.commands (agent_id, id);

-- Claims read a machine's queued commands in order; the accept-timeout
-- sweep reads all queued ones (few at any time).
CREATE INDEX commands_queued_idx ON holdfast.commands (machine_id, queued_at, id) WHERE (state = 'queued');

-- The machine and command timeouts the maintenance process enforces
-- (machine_tick writes its settings here); claim_commands and list_machines
-- read them, so the API needs no copy of the settings. One row.
CREATE TABLE holdfast.machine_settings (
    singleton boolean DEFAULT true NOT NULL,
    -- HOLDFAST_COMMAND_ACCEPT_TIMEOUT: a command not accepted by then fails.
    accept_timeout interval DEFAULT '00:05:00'::interval NOT NULL,
    -- HOLDFAST_MACHINE_OFFLINE_AFTER: a machine silent this long is offline.
    offline_after interval DEFAULT '00:00:30'::interval NOT NULL,
    updated_at timestamptz DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT machine_settings_accept_timeout_check CHECK (accept_timeout > '00:00:00'::interval),
    CONSTRAINT machine_settings_offline_after_check CHECK (offline_after > '00:00:00'::interval),
    CONSTRAINT machine_settings_singleton_check CHECK (singleton),
    CONSTRAINT machine_settings_pkey PRIMARY KEY (singleton)
);

INSERT INTO holdfast.machine_settings DEFAULT VALUES;

-- ==== functions and triggers ====

-- The tool output for a command that ended without running (or without the
-- machine's result): {"state", "reason", "message", "retryable", ...p_extra}.
CREATE OR REPLACE FUNCTION holdfast.command_outcome_output(
    p_state text, p_reason text, p_message text, p_retryable boolean, p_extra jsonb DEFAULT '{}')
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object('state', p_state, 'reason', p_reason, 'message', p_message,
                              'retryable', p_retryable) || coalesce(p_extra, '{}')
$$;

-- The tool output for a machine's result, from the command row's result columns.
CREATE OR REPLACE FUNCTION holdfast.command_result_output(p_command holdfast.commands)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object(
        'state', p_command.result_state,
        'exit_code', p_command.exit_code,
        'signal', p_command.signal,
        'timed_out', p_command.timed_out,
        'stdout', coalesce(p_command.stdout, ''),
        'stderr', coalesce(p_command.stderr, ''),
        'stdout_truncated', p_command.stdout_truncated,
        'stderr_truncated', p_command.stderr_truncated)
        || CASE WHEN p_command.result_state = 'unknown' THEN jsonb_build_object(
               'message', 'The machine lost the command''s process before it could report an '
                          || 'exit status: the command may or may not have run to completion. '
                          || 'It was not run again.')
           WHEN p_command.limit_reached IS NOT NULL THEN jsonb_build_object(
               'state', 'failed',
               'reason', CASE p_command.limit_reached WHEN 'processes' THEN 'process_limit'
                              ELSE p_command.limit_reached || '_limit' END,
               'message', format('The command reached the machine''s %s limit for commands (%s) and '
                                 || 'was ended with everything it started. Its output up to then is '
                                 || 'kept. It was not run again.',
                                 CASE p_command.limit_reached WHEN 'cpu_time' THEN 'CPU time'
                                      WHEN 'memory' THEN 'memory' ELSE 'process' END,
                                 CASE p_command.limit_reached WHEN 'cpu_time' THEN '--command-cpu-secs'
                                      WHEN 'memory' THEN '--command-memory-mib'
                                      ELSE '--command-processes' END))
           ELSE '{}'::jsonb END
$$;

-- Give a command's tool call its output with p_event, if the call still
-- waits; returns false (and records nothing) when the turn has moved on
-- (the call was cancelled). The caller holds the agent's row lock; the
-- call is locked here.
CREATE OR REPLACE FUNCTION holdfast.answer_command_call(
    p_command holdfast.commands, p_output jsonb, p_is_error boolean, p_event text, p_event_data jsonb)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_call holdfast.tool_calls;
BEGIN
    SELECT * INTO v_call FROM holdfast.tool_calls WHERE id = p_command.tool_call_id FOR UPDATE;
    IF v_call.status <> 'waiting' THEN
        RETURN false;
    END IF;
    PERFORM holdfast.complete_waiting_call(v_call, p_output, p_is_error, p_event, p_event_data);
    RETURN true;
END
$$;

-- What is known of an accepted command: the daemon's last report of it
-- ({"state", "pid"?, "reported_at"}) when that report came after the
-- command was accepted, else {"state": "accepted", "at": accepted_at}.
CREATE OR REPLACE FUNCTION holdfast.command_last_known_state(p_command holdfast.commands, p_machine holdfast.machines)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT coalesce(
        (SELECT jsonb_build_object('state', r.value ->> 'state', 'reported_at', p_machine.last_heartbeat_at)
                || CASE WHEN jsonb_typeof(r.value -> 'pid') = 'number'
                        THEN jsonb_build_object('pid', r.value -> 'pid') ELSE '{}'::jsonb END
           FROM jsonb_array_elements(p_machine.reported_commands) r
          WHERE r.value ->> 'id' = p_command.id::text
            AND p_machine.last_heartbeat_at >= p_command.accepted_at
          LIMIT 1),
        jsonb_build_object('state', 'accepted', 'at', p_command.accepted_at))
$$;

-- Fail a queued command that was never handed out (p_reason: accept_timeout
-- | machine_offline) and give its waiting call a retryable error with
-- `command.failed`. The caller holds the agent's row lock and the command's.
CREATE OR REPLACE FUNCTION holdfast.fail_queued_command(p_command holdfast.commands, p_reason text, p_message text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_command holdfast.commands;
BEGIN
    UPDATE holdfast.commands SET state = 'failed', reason = p_reason, resolved_at = holdfast.now()
     WHERE id = p_command.id RETURNING * INTO v_command;
    PERFORM holdfast.answer_command_call(v_command,
        holdfast.command_outcome_output('failed', p_reason, p_message, true,
                                        jsonb_build_object('command_id', v_command.id)),
        true, 'command.failed',
        jsonb_build_object('command_id', v_command.id, 'tool_call_id', v_command.tool_call_id,
                           'machine_id', v_command.machine_id, 'reason', p_reason, 'message', p_message));
END
$$;

-- Complete a run_command call that cannot be queued (no machine configured,
-- a machine the project does not have, invalid input) with an error the
-- model sees, and `command.failed`, so the turn goes on. The caller holds
-- the agent's row lock.
CREATE OR REPLACE FUNCTION holdfast.refuse_command_call(p_call holdfast.tool_calls, p_reason text, p_message text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM holdfast.complete_waiting_call(p_call,
        holdfast.command_outcome_output('failed', p_reason, p_message, false), true,
        'command.failed', jsonb_build_object('tool_call_id', p_call.id, 'reason', p_reason,
                                             'message', p_message));
END
$$;

-- Queue the command a waiting run_command call asks for, on the live
-- machine the agent's config names (`tools: [{"type": "run_command",
-- "machine": <id or name>, "workspace"?: "machine"|"agent"}]`, a machine of
-- the agent's own project), with
-- `command.queued` (and, by trigger, a NOTIFY for the machine's claims).
-- Input: {"command": text, "timeout_secs"?: 1..86400 (default 600)}. A
-- config without a machine, an unknown or deleted machine or invalid input
-- completes the call at once with an error instead. Idempotent (unique
-- tool_call_id). The caller holds the agent's row lock and the call is
-- `waiting`.
CREATE OR REPLACE FUNCTION holdfast.queue_command(p_call holdfast.tool_calls)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_agent holdfast.agents;
    v_ref text;
    v_machine holdfast.machines;
    v_command text;
    v_timeout jsonb;
    v_timeout_secs integer := 600;
    v_workspace text;
    v_id uuid;
BEGIN
    IF EXISTS (SELECT 1 FROM holdfast.commands WHERE tool_call_id = p_call.id) THEN
        RETURN;
    END IF;
    SELECT * INTO v_agent FROM holdfast.agents WHERE id = p_call.agent_id;
    SELECT nullif(btrim(t.value ->> 'machine'), ''), coalesce(t.value ->> 'workspace', 'machine')
      INTO v_ref, v_workspace
      FROM jsonb_array_elements(CASE WHEN jsonb_typeof(v_agent.config -> 'tools') = 'array'
                                     THEN v_agent.config -> 'tools' ELSE '[]' END) t
     WHERE jsonb_typeof(t.value) = 'object' AND t.value ->> 'type' = 'run_command'
     LIMIT 1;
    IF v_ref IS NULL THEN
        PERFORM holdfast.refuse_command_call(p_call, 'machine_not_configured',
            'run_command has no machine: set "machine" (a machine id or name) in the agent''s run_command tool entry.');
        RETURN;
    END IF;
    IF v_ref ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        SELECT * INTO v_machine FROM holdfast.machines
         WHERE id = v_ref::uuid AND project_id = v_agent.project_id AND deleted_at IS NULL;
    ELSE
        SELECT * INTO v_machine FROM holdfast.machines
         WHERE name = v_ref AND project_id = v_agent.project_id AND deleted_at IS NULL;
    END IF;
    IF v_machine.id IS NULL THEN
        PERFORM holdfast.refuse_command_call(p_call, 'unknown_machine',
            format('run_command names machine %s, which this project does not have.', v_ref));
        RETURN;
    END IF;
    IF jsonb_typeof(p_call.input -> 'command') = 'string' THEN
        v_command := p_call.input ->> 'command';
    END IF;
    v_timeout := p_call.input -> 'timeout_secs';
    IF v_command IS NULL OR v_command = ''
       OR (v_timeout IS NOT NULL AND NOT (jsonb_typeof(v_timeout) = 'number'
                                          AND (v_timeout #>> '{}')::numeric = trunc((v_timeout #>> '{}')::numeric)
                                          AND (v_timeout #>> '{}')::numeric BETWEEN 1 AND 86400)) THEN
        PERFORM holdfast.refuse_command_call(p_call, 'invalid_input',
            'run_command takes {"command": a non-empty string, "timeout_secs"?: an integer from 1 to 86400}.');
        RETURN;
    END IF;
    IF v_timeout IS NOT NULL THEN
        v_timeout_secs := (v_timeout #>> '{}')::integer;
    END IF;
    INSERT INTO holdfast.commands (tool_call_id, agent_id, machine_id, command, timeout_secs,
                                   trace_parent, trace_state, workspace)
    VALUES (p_call.id, p_call.agent_id, v_machine.id, v_command, v_timeout_secs,
            v_agent.turn_trace_parent, v_agent.turn_trace_state, v_workspace)
    RETURNING id INTO v_id;
    PERFORM holdfast.append_event(p_call.agent_id, 'command.queued', jsonb_build_object(
        'command_id', v_id, 'tool_call_id', p_call.id, 'machine_id', v_machine.id,
        'machine', v_machine.name, 'command', v_command, 'timeout_secs', v_timeout_secs));
END
$$;

-- A command whose tool call is cancelled (its turn was cancelled or
-- failed) is cancelled with it: a queued one is never handed out; an
-- accepted one is named in its daemon's next heartbeat answer
-- (commands_to_stop), and the daemon stops its process and reports what it
-- came to, recorded with late: true and reason `cancelled`
-- (submit_command_result). Neither is ever handed out again.
CREATE OR REPLACE FUNCTION holdfast.tg_tool_calls_cancel_command() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE holdfast.commands SET state = 'cancelled', reason = 'cancelled', resolved_at = holdfast.now()
     WHERE tool_call_id = NEW.id AND state IN ('queued', 'accepted');
    RETURN NULL;
END
$$;
CREATE TRIGGER _300_cancel_command AFTER UPDATE OF status ON holdfast.tool_calls
    FOR EACH ROW WHEN (NEW.status = 'cancelled' AND OLD.status <> 'cancelled' AND NEW.kind = 'command')
    EXECUTE FUNCTION holdfast.tg_tool_calls_cancel_command();

-- The commands of a daemon's report (p_commands, as machine_heartbeat takes
-- it) that its machine must stop: cancelled after they were accepted, with
-- no result yet. The heartbeat's answer names them; the daemon ends their
-- processes and reports their results. Reads only.
CREATE OR REPLACE FUNCTION holdfast.commands_to_stop(p_machine uuid, p_commands jsonb)
RETURNS uuid[] LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(c.id ORDER BY c.id), '{}')
      FROM holdfast.commands c
     WHERE c.machine_id = p_machine
       AND c.id IN (SELECT (e.value ->> 'id')::uuid
                      FROM jsonb_array_elements(coalesce(p_commands, '[]')) e
                     WHERE e.value ->> 'state' IN ('accepted', 'running'))
       AND c.state = 'cancelled' AND c.accepted_at IS NOT NULL AND c.result_state IS NULL
$$;

-- Register a machine in a project. The token (new_machine_token) is
-- returned here once and stored only as its SHA-256 (holdfast.api_key_hash:
-- tokens are long and random, so a plain hash suffices). The name must be
-- unique among the project's live machines (a deleted machine's name may be
-- reused). Raises HF404 (project), HF409 (the project has a machine of that
-- name), HF422 (name, wake_url).
CREATE OR REPLACE FUNCTION holdfast.register_machine(p_project uuid, p_name text, p_wake_url text DEFAULT NULL)
RETURNS TABLE (machine_id uuid, name text, wake_url text, token_prefix text, token text,
               created_at timestamptz)
LANGUAGE plpgsql AS $$
-- The conflict target names columns that share names with the output.
#variable_conflict use_column
DECLARE
    v_token text;
BEGIN
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$' THEN
        PERFORM holdfast.raise('HF422', 'name must be 1 to 100 letters, digits, ".", "_" or "-", starting with a letter or digit', 'name');
    END IF;
    IF p_wake_url IS NOT NULL
       AND (length(p_wake_url) > 2048 OR p_wake_url !~* '^https?://[^/?#[:space:]]+([/?#][^[:space:]]*)?$') THEN
        PERFORM holdfast.raise('HF422', 'wake_url must be an absolute http:// or https:// URL', 'wake_url');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM holdfast.projects p WHERE p.id = p_project) THEN
        PERFORM holdfast.raise('HF404', format('project %s not found', p_project));
    END IF;
    v_token := holdfast.new_machine_token();
    RETURN QUERY
    INSERT INTO holdfast.machines AS m (project_id, name, token_hash, token_prefix, wake_url)
    VALUES (p_project, p_name, holdfast.api_key_hash(v_token), left(v_token, 12), p_wake_url)
    ON CONFLICT (project_id, name) WHERE deleted_at IS NULL DO NOTHING
    RETURNING m.id, m.name, m.wake_url, m.token_prefix, v_token, m.created_at;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF409', format('this project already has a machine named %s', p_name));
    END IF;
END
$$;

-- The live machine a token belongs to; no row for an unknown token or a
-- deleted machine's. Reads only.
CREATE OR REPLACE FUNCTION holdfast.authenticate_machine(p_token text)
RETURNS TABLE (machine_id uuid, project_id uuid) LANGUAGE sql STABLE AS $$
    SELECT m.id, m.project_id FROM holdfast.machines m
     WHERE m.token_hash = holdfast.api_key_hash(p_token) AND m.deleted_at IS NULL
$$;

-- Record a heartbeat: the machine is online (and a wake attempt, if any,
-- has succeeded). p_commands is every command the daemon's journal holds:
-- [{"id": uuid, "state": "accepted"|"running"|"finished", "pid"?: integer}]
-- (at most 1000); it is kept as the commands' last known state.
--
-- p_session names the daemon process. With p_started (the first heartbeat
-- of a process start), that session takes the machine over, and every
-- command accepted before now that is not in p_commands is one the daemon
-- has no record of: machine_tick resolves it as unknown. Without
-- p_started, a session other than the current one is refused (HF409:
-- another daemon process has taken the machine over).
--
-- A start that replaces another session still alive (a heartbeat within
-- machine_settings.offline_after) is a takeover: it is refused (HF409) when
-- that session asked for p_single_session; otherwise each agent with a
-- command queued or accepted on the machine gets `machine.session_replaced`
-- (both sessions, p_peer: the new daemon's address), and the replaced
-- session is returned. p_sandboxed (sent with p_started) records whether
-- the daemon sandboxes its commands.
--
-- Locks the machine row, then those agents' rows in id order. Raises HF404,
-- HF409, HF422 (commands). Returns the heartbeat's time and the session it
-- replaced while alive (or NULL).
CREATE OR REPLACE FUNCTION holdfast.machine_heartbeat(
    p_machine uuid, p_commands jsonb DEFAULT '[]', p_session uuid DEFAULT NULL,
    p_started boolean DEFAULT false, p_sandboxed boolean DEFAULT NULL,
    p_single_session boolean DEFAULT false, p_peer text DEFAULT NULL)
RETURNS TABLE (heartbeat_at timestamptz, replaced_session uuid) LANGUAGE plpgsql AS $$
DECLARE
    v_machine holdfast.machines;
    v_now timestamptz;
    v_entry jsonb;
    v_i integer := 0;
    v_replaced uuid;
    v_agent uuid;
BEGIN
    p_commands := coalesce(p_commands, '[]');
    IF jsonb_typeof(p_commands) <> 'array' OR jsonb_array_length(p_commands) > 1000 THEN
        PERFORM holdfast.raise('HF422', 'commands must be an array of at most 1000 entries', 'commands');
    END IF;
    FOR v_entry IN SELECT value FROM jsonb_array_elements(p_commands) LOOP
        IF jsonb_typeof(v_entry) <> 'object'
           OR NOT coalesce(v_entry ->> 'id' ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$', false)
           OR NOT coalesce(v_entry ->> 'state' IN ('accepted', 'running', 'finished'), false)
           OR (v_entry ? 'pid' AND jsonb_typeof(v_entry -> 'pid') NOT IN ('number', 'null')) THEN
            PERFORM holdfast.raise('HF422',
                'each command is {"id": uuid, "state": "accepted"|"running"|"finished", "pid"?: integer}',
                format('commands[%s]', v_i));
        END IF;
        v_i := v_i + 1;
    END LOOP;
    IF p_started AND p_session IS NULL THEN
        PERFORM holdfast.raise('HF422', 'a daemon start must name its session', 'session');
    END IF;
    SELECT * INTO v_machine FROM holdfast.machines WHERE id = p_machine FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('machine %s not found', p_machine));
    END IF;
    IF NOT p_started AND v_machine.daemon_session IS DISTINCT FROM p_session THEN
        PERFORM holdfast.raise('HF409', format(
            'daemon session %s does not serve machine %s: another daemon process started since',
            coalesce(p_session::text, '(none)'), p_machine));
    END IF;
    -- Taken after the lock: a claim that held the machine row before this
    -- restart has accepted its commands strictly earlier.
    v_now := holdfast.now();
    IF p_started AND v_machine.daemon_session IS DISTINCT FROM p_session
       AND v_machine.last_heartbeat_at > v_now - (SELECT s.offline_after FROM holdfast.machine_settings s) THEN
        IF v_machine.daemon_single_session THEN
            PERFORM holdfast.raise('HF409', format(
                'machine %s is served by daemon session %s, started with --single-session, whose last '
                'heartbeat was at %s: another session is refused while it is alive',
                p_machine, v_machine.daemon_session, v_machine.last_heartbeat_at));
        END IF;
        v_replaced := v_machine.daemon_session;
        FOR v_agent IN
            SELECT DISTINCT c.agent_id FROM holdfast.commands c
             WHERE c.machine_id = p_machine AND c.state IN ('queued', 'accepted')
             ORDER BY c.agent_id
        LOOP
            PERFORM holdfast.lock_agent(v_agent);
            PERFORM holdfast.append_event(v_agent, 'machine.session_replaced', jsonb_build_object(
                'machine_id', p_machine, 'machine', v_machine.name,
                'previous_session', v_replaced, 'session', p_session,
                'previous_heartbeat_at', v_machine.last_heartbeat_at, 'peer', p_peer));
        END LOOP;
    END IF;
    UPDATE holdfast.machines
       SET last_heartbeat_at = v_now,
           wake_until = NULL,
           reported_commands = p_commands,
           daemon_session = CASE WHEN p_started THEN p_session ELSE daemon_session END,
           daemon_started_at = CASE WHEN p_started THEN v_now ELSE daemon_started_at END,
           daemon_known_commands = CASE WHEN p_started
               THEN ARRAY(SELECT (e.value ->> 'id')::uuid FROM jsonb_array_elements(p_commands) e)
               ELSE daemon_known_commands END,
           daemon_sandboxed = CASE WHEN p_started THEN p_sandboxed ELSE daemon_sandboxed END,
           daemon_single_session = CASE WHEN p_started THEN coalesce(p_single_session, false)
                                        ELSE daemon_single_session END
     WHERE id = p_machine;
    heartbeat_at := v_now;
    replaced_session := v_replaced;
    RETURN NEXT;
END
$$;

-- Online machines whose daemon runs its commands unsandboxed
-- (`--sandbox none`), for `holdfast status`. Reads only.
CREATE OR REPLACE FUNCTION holdfast.unsandboxed_machines()
RETURNS TABLE (machine_id uuid, project_id uuid, name text, last_heartbeat_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT m.id, m.project_id, m.name, m.last_heartbeat_at
      FROM holdfast.machines m CROSS JOIN holdfast.machine_settings s
     WHERE m.deleted_at IS NULL AND m.daemon_sandboxed IS FALSE
       AND m.last_heartbeat_at > holdfast.now() - s.offline_after
     ORDER BY m.project_id, m.name
$$;

-- Hand up to p_max (1..100) of a machine's queued commands to its daemon,
-- oldest first: each becomes accepted with `command.accepted` and is
-- returned by this call and never again. A command past its accept
-- deadline (machine_settings.accept_timeout after it was queued) is never
-- returned, even before maintenance has failed it. p_session, when given,
-- must be the machine's current daemon session (HF409 otherwise), so a
-- long-poll left over from a dead daemon process cannot take commands that
-- its successor would never learn of.
--
-- Locks: the machine row FOR SHARE; then the candidates' agent rows with
-- SKIP LOCKED (an agent busy in another transaction is skipped, and its
-- command is claimed by a later call); then each command. Raises HF404
-- (machine), HF409 (session), HF422 (max).
CREATE OR REPLACE FUNCTION holdfast.claim_commands(p_machine uuid, p_max integer, p_session uuid DEFAULT NULL)
RETURNS TABLE (command_id uuid, tool_call_id uuid, agent_id uuid, command text, timeout_secs integer,
               accepted_at timestamptz, trace_parent text, trace_state text, workspace text)
LANGUAGE plpgsql AS $$
DECLARE
    v_machine holdfast.machines;
    v_accept_timeout interval;
    v_id uuid;
    v_command holdfast.commands;
BEGIN
    IF p_max IS NULL OR p_max NOT BETWEEN 1 AND 100 THEN
        PERFORM holdfast.raise('HF422', 'max must be between 1 and 100', 'max');
    END IF;
    SELECT * INTO v_machine FROM holdfast.machines m WHERE m.id = p_machine FOR SHARE;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('machine %s not found', p_machine));
    END IF;
    IF p_session IS NOT NULL AND v_machine.daemon_session IS DISTINCT FROM p_session THEN
        PERFORM holdfast.raise('HF409', format(
            'daemon session %s does not serve machine %s: send a heartbeat with started = true first',
            p_session, p_machine));
    END IF;
    SELECT s.accept_timeout INTO v_accept_timeout FROM holdfast.machine_settings s;
    FOR v_id IN
        SELECT c.id FROM holdfast.commands c
          JOIN holdfast.agents a ON a.id = c.agent_id
         WHERE c.machine_id = p_machine AND c.state = 'queued'
           AND c.queued_at > holdfast.now() - v_accept_timeout
         ORDER BY c.queued_at, c.id
         LIMIT p_max
           FOR UPDATE OF a SKIP LOCKED
    LOOP
        SELECT * INTO v_command FROM holdfast.commands c WHERE c.id = v_id FOR UPDATE;
        IF v_command.state <> 'queued' OR v_command.queued_at <= holdfast.now() - v_accept_timeout THEN
            CONTINUE;
        END IF;
        UPDATE holdfast.commands c SET state = 'accepted', accepted_at = holdfast.now()
         WHERE c.id = v_id RETURNING * INTO v_command;
        PERFORM holdfast.append_event(v_command.agent_id, 'command.accepted', jsonb_build_object(
            'command_id', v_command.id, 'tool_call_id', v_command.tool_call_id,
            'machine_id', v_command.machine_id, 'accepted_at', v_command.accepted_at));
        command_id := v_command.id;
        tool_call_id := v_command.tool_call_id;
        agent_id := v_command.agent_id;
        command := v_command.command;
        timeout_secs := v_command.timeout_secs;
        accepted_at := v_command.accepted_at;
        trace_parent := v_command.trace_parent;
        trace_state := v_command.trace_state;
        workspace := v_command.workspace;
        RETURN NEXT;
    END LOOP;
END
$$;

-- Record the result a machine reports for one of its commands. p_state:
-- 'finished' (the process exited, or was killed at its timeout:
-- p_timed_out) or 'unknown' (the daemon lost the process without an exit
-- status). Output is the captured text (the caller bounds it; truncation
-- flags say so).
--
--   The call still waits: it is completed with the result
--     (`command.finished` or `command.unknown`) and the agent goes on.
--     Returns 'delivered'.
--   The agent already moved on (machine_unreachable, unknown after a daemon
--     restart, a cancelled turn): the result is kept on the command and
--     recorded as the same event with late: true; the tool call keeps what
--     it has. A cancelled command stays cancelled, and its event says so
--     (reason `cancelled`): the daemon stopped it. Returns 'late'.
--   The same result again (a daemon resending after a restart): nothing
--     changes, no event. Returns 'duplicate'. A different result: HF409.
--
-- Locks: the agent, its tool call, the command. Raises HF404 (no such
-- command on this machine: another machine's command is not found), HF409
-- (another result was recorded; the command was never accepted), HF422.
CREATE OR REPLACE FUNCTION holdfast.submit_command_result(
    p_machine uuid, p_command uuid, p_state text, p_exit_code integer, p_stdout text, p_stderr text,
    p_stdout_truncated boolean DEFAULT false, p_stderr_truncated boolean DEFAULT false,
    p_timed_out boolean DEFAULT false, p_signal integer DEFAULT NULL, p_limit text DEFAULT NULL)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_command holdfast.commands;
    v_call holdfast.tool_calls;
    v_event text;
    v_data jsonb;
    v_output jsonb;
    v_is_error boolean;
BEGIN
    IF p_state IS NULL OR p_state NOT IN ('finished', 'unknown') THEN
        PERFORM holdfast.raise('HF422', 'state must be "finished" or "unknown"', 'state');
    END IF;
    IF p_limit IS NOT NULL AND (p_limit NOT IN ('cpu_time', 'memory', 'processes') OR p_state <> 'finished') THEN
        PERFORM holdfast.raise('HF422',
            'limit is "cpu_time", "memory" or "processes", with state "finished"', 'limit');
    END IF;
    SELECT * INTO v_command FROM holdfast.commands WHERE id = p_command;
    IF NOT FOUND OR v_command.machine_id IS DISTINCT FROM p_machine THEN
        PERFORM holdfast.raise('HF404', format('command %s not found', p_command));
    END IF;
    PERFORM holdfast.lock_agent(v_command.agent_id);
    SELECT * INTO v_call FROM holdfast.tool_calls WHERE id = v_command.tool_call_id FOR UPDATE;
    SELECT * INTO v_command FROM holdfast.commands WHERE id = p_command FOR UPDATE;
    IF v_command.result_state IS NOT NULL THEN
        IF (v_command.result_state, v_command.exit_code, v_command.signal, v_command.timed_out,
            coalesce(v_command.stdout, ''), coalesce(v_command.stderr, ''),
            v_command.stdout_truncated, v_command.stderr_truncated, v_command.limit_reached)
           IS NOT DISTINCT FROM
           (p_state, p_exit_code, p_signal, coalesce(p_timed_out, false),
            coalesce(p_stdout, ''), coalesce(p_stderr, ''),
            coalesce(p_stdout_truncated, false), coalesce(p_stderr_truncated, false), p_limit) THEN
            RETURN 'duplicate';
        END IF;
        PERFORM holdfast.raise('HF409', format('command %s already has a different result (%s)',
                                               p_command, v_command.result_state));
    END IF;
    IF v_command.accepted_at IS NULL THEN
        PERFORM holdfast.raise('HF409', format('command %s was never accepted (it is %s)', p_command, v_command.state));
    END IF;
    UPDATE holdfast.commands
       SET state = CASE WHEN state = 'cancelled' THEN state ELSE p_state END,
           result_state = p_state, exit_code = p_exit_code, signal = p_signal,
           timed_out = coalesce(p_timed_out, false), stdout = coalesce(p_stdout, ''),
           stderr = coalesce(p_stderr, ''), stdout_truncated = coalesce(p_stdout_truncated, false),
           stderr_truncated = coalesce(p_stderr_truncated, false), result_at = holdfast.now(),
           resolved_at = coalesce(resolved_at, holdfast.now()), limit_reached = p_limit
     WHERE id = p_command
    RETURNING * INTO v_command;
    v_event := CASE WHEN p_limit IS NOT NULL THEN 'command.failed'
                    WHEN p_state = 'finished' THEN 'command.finished' ELSE 'command.unknown' END;
    v_output := holdfast.command_result_output(v_command);
    v_is_error := p_state = 'unknown' OR v_command.timed_out OR p_limit IS NOT NULL;
    v_data := jsonb_build_object('command_id', v_command.id, 'tool_call_id', v_command.tool_call_id,
                                 'machine_id', v_command.machine_id) || v_output;
    IF v_command.state = 'cancelled' THEN
        v_data := v_data || jsonb_build_object('reason', 'cancelled', 'message',
            'The tool call was cancelled while the command ran: the machine stopped it '
            || '(SIGTERM to its process group, then SIGKILL). It was not run again.');
    END IF;
    IF v_call.status = 'waiting' THEN
        PERFORM holdfast.complete_waiting_call(v_call, v_output, v_is_error, v_event,
                                               v_data || jsonb_build_object('late', false));
        RETURN 'delivered';
    END IF;
    PERFORM holdfast.append_event(v_command.agent_id, v_event, v_data || jsonb_build_object('late', true));
    RETURN 'late';
END
$$;

-- The project's live machines, oldest first: online (a heartbeat within
-- machine_settings.offline_after), a wake attempt in progress, how many
-- commands wait to be claimed, and the accepted ones with their last known
-- state ({"state", "pid"?, "reported_at"} from the daemon's last report, or
-- {"state": "accepted", "at"} before it reported them). Reads only.
CREATE OR REPLACE FUNCTION holdfast.list_machines(p_project uuid)
RETURNS TABLE (id uuid, name text, wake_url text, created_at timestamptz,
               last_heartbeat_at timestamptz, online boolean, wake_until timestamptz,
               queued_commands bigint, running_commands jsonb)
LANGUAGE sql STABLE AS $$
    SELECT m.id, m.name, m.wake_url, m.created_at, m.last_heartbeat_at,
           coalesce(m.last_heartbeat_at > holdfast.now() - s.offline_after, false),
           CASE WHEN m.wake_until > holdfast.now() THEN m.wake_until END,
           (SELECT count(*) FROM holdfast.commands q WHERE q.machine_id = m.id AND q.state = 'queued'),
           coalesce((SELECT jsonb_agg(jsonb_build_object(
                                 'id', c.id, 'agent_id', c.agent_id, 'tool_call_id', c.tool_call_id,
                                 'command', c.command, 'accepted_at', c.accepted_at,
                                 'last_known_state', holdfast.command_last_known_state(c, m))
                             ORDER BY c.accepted_at, c.id)
                       FROM holdfast.commands c WHERE c.machine_id = m.id AND c.state = 'accepted'), '[]')
      FROM holdfast.machines m CROSS JOIN holdfast.machine_settings s
     WHERE m.project_id = p_project AND m.deleted_at IS NULL
     ORDER BY m.id
$$;

-- Start a wake attempt on a live machine of p_project: for p_window (1
-- second to 1 day) its queued commands wait instead of failing as offline.
-- The API then POSTs the machine's wake_url, if it has one. A later start
-- replaces the window. Locks the machine row. Raises HF404 (not in the
-- project, or deleted), HF422 (window).
CREATE OR REPLACE FUNCTION holdfast.start_machine_wake(p_project uuid, p_machine uuid, p_window interval)
RETURNS TABLE (machine_id uuid, name text, wake_url text, wake_until timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_window IS NULL OR p_window < '1 second' OR p_window > '1 day' THEN
        PERFORM holdfast.raise('HF422', 'the wake window must be between 1 second and 1 day', 'window_secs');
    END IF;
    RETURN QUERY
    UPDATE holdfast.machines m
       SET wake_requested_at = holdfast.now(), wake_until = holdfast.now() + p_window
     WHERE m.id = p_machine AND m.project_id = p_project AND m.deleted_at IS NULL
    RETURNING m.id, m.name, m.wake_url, m.wake_until;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('machine %s not found', p_machine));
    END IF;
END
$$;

-- One machine sweep; safe to run from several maintenance processes (agent
-- rows are taken with SKIP LOCKED; each command is re-read under its
-- agent's lock before it changes). Each sweep is bounded by p_batch.
-- Records p_accept_timeout and p_offline_after in machine_settings (claims
-- and listings read them there), then:
--   1. lost: accepted commands of a machine whose daemon restarted after
--      accepting them and did not list them in its first heartbeat become
--      unknown (`command.unknown`, reason daemon_lost_record): never rerun;
--   2. accept timeout: queued commands older than p_accept_timeout fail
--      (`command.failed`, reason accept_timeout);
--   3. offline: queued commands of a machine with no heartbeat for
--      p_offline_after (since registration, if it never sent one) fail
--      (reason machine_offline), unless a wake attempt is in progress;
--   4. unreachable: accepted commands of a machine silent for
--      p_offline_after (since its last heartbeat or the acceptance,
--      whichever is later) give the agent a retryable machine_unreachable
--      result with the command's last known state (`machine.unreachable`).
-- A call that no longer waits (cancelled turn) gets nothing; the command's
-- state still changes. Returns counts, e.g. {"lost": 0, "accept_timeout":
-- 1, "machine_offline": 0, "unreachable": 0}. Raises HF422 (intervals).
CREATE OR REPLACE FUNCTION holdfast.machine_tick(p_accept_timeout interval, p_offline_after interval,
                                      p_batch integer DEFAULT 1000)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := holdfast.now();
    v_id uuid;
    v_command holdfast.commands;
    v_machine holdfast.machines;
    v_known jsonb;
    v_message text;
    v_lost integer := 0;
    v_accept integer := 0;
    v_offline integer := 0;
    v_unreachable integer := 0;
BEGIN
    IF p_accept_timeout IS NULL OR p_accept_timeout <= '0'::interval THEN
        PERFORM holdfast.raise('HF422', 'accept timeout must be positive', 'accept_timeout');
    END IF;
    IF p_offline_after IS NULL OR p_offline_after <= '0'::interval THEN
        PERFORM holdfast.raise('HF422', 'offline_after must be positive', 'offline_after');
    END IF;
    UPDATE holdfast.machine_settings
       SET accept_timeout = p_accept_timeout, offline_after = p_offline_after, updated_at = v_now
     WHERE accept_timeout IS DISTINCT FROM p_accept_timeout OR offline_after IS DISTINCT FROM p_offline_after;

    -- 1. Accepted before the daemon's restart and absent from its journal.
    FOR v_id IN
        SELECT c.id FROM holdfast.commands c
          JOIN holdfast.machines m ON m.id = c.machine_id
          JOIN holdfast.agents a ON a.id = c.agent_id
         WHERE c.state = 'accepted' AND c.accepted_at < m.daemon_started_at
           AND c.id <> ALL (m.daemon_known_commands)
         ORDER BY c.id LIMIT p_batch
           FOR UPDATE OF a SKIP LOCKED
    LOOP
        SELECT * INTO v_command FROM holdfast.commands WHERE id = v_id FOR UPDATE;
        SELECT * INTO v_machine FROM holdfast.machines WHERE id = v_command.machine_id;
        CONTINUE WHEN v_command.state <> 'accepted'
                   OR NOT coalesce(v_command.accepted_at < v_machine.daemon_started_at, false)
                   OR v_command.id = ANY (v_machine.daemon_known_commands);
        UPDATE holdfast.commands SET state = 'unknown', reason = 'daemon_lost_record', resolved_at = v_now
         WHERE id = v_id RETURNING * INTO v_command;
        v_message := format('The daemon on machine %s restarted without a record of this command (its '
                            'state directory was lost): the command may or may not have run. It was '
                            'not run again.', v_machine.name);
        PERFORM holdfast.answer_command_call(v_command,
            holdfast.command_outcome_output('unknown', 'daemon_lost_record', v_message, false,
                                            jsonb_build_object('exit_code', NULL)),
            true, 'command.unknown',
            jsonb_build_object('command_id', v_id, 'tool_call_id', v_command.tool_call_id,
                               'machine_id', v_command.machine_id, 'reason', 'daemon_lost_record',
                               'message', v_message, 'late', false));
        v_lost := v_lost + 1;
    END LOOP;

    -- 2. Not accepted in time: fails, and can no longer be claimed.
    FOR v_id IN
        SELECT c.id FROM holdfast.commands c
          JOIN holdfast.agents a ON a.id = c.agent_id
         WHERE c.state = 'queued' AND c.queued_at <= v_now - p_accept_timeout
         ORDER BY c.id LIMIT p_batch
           FOR UPDATE OF a SKIP LOCKED
    LOOP
        SELECT * INTO v_command FROM holdfast.commands WHERE id = v_id FOR UPDATE;
        CONTINUE WHEN v_command.state <> 'queued';
        SELECT * INTO v_machine FROM holdfast.machines WHERE id = v_command.machine_id;
        v_message := format('Machine %s did not accept the command within %s; it was not run.',
                            v_machine.name, p_accept_timeout);
        PERFORM holdfast.fail_queued_command(v_command, 'accept_timeout', v_message);
        v_accept := v_accept + 1;
    END LOOP;

    -- 3. Queued on a machine that is offline, with no wake attempt in progress.
    FOR v_id IN
        SELECT c.id FROM holdfast.commands c
          JOIN holdfast.machines m ON m.id = c.machine_id
          JOIN holdfast.agents a ON a.id = c.agent_id
         WHERE c.state = 'queued'
           AND coalesce(m.last_heartbeat_at, m.created_at) <= v_now - p_offline_after
           AND NOT coalesce(m.wake_until > v_now, false)
         ORDER BY c.id LIMIT p_batch
           FOR UPDATE OF a SKIP LOCKED
    LOOP
        SELECT * INTO v_command FROM holdfast.commands WHERE id = v_id FOR UPDATE;
        SELECT * INTO v_machine FROM holdfast.machines WHERE id = v_command.machine_id;
        CONTINUE WHEN v_command.state <> 'queued'
                   OR coalesce(v_machine.last_heartbeat_at, v_machine.created_at) > v_now - p_offline_after
                   OR coalesce(v_machine.wake_until > v_now, false);
        v_message := format('Machine %s is offline (%s); the command was not run.', v_machine.name,
                            coalesce('no heartbeat since ' || v_machine.last_heartbeat_at, 'it never sent a heartbeat'));
        PERFORM holdfast.fail_queued_command(v_command, 'machine_offline', v_message);
        v_offline := v_offline + 1;
    END LOOP;

    -- 4. Accepted on a machine that has gone silent: the agent moves on.
    FOR v_id IN
        SELECT c.id FROM holdfast.commands c
          JOIN holdfast.machines m ON m.id = c.machine_id
          JOIN holdfast.agents a ON a.id = c.agent_id
         WHERE c.state = 'accepted'
           AND greatest(m.last_heartbeat_at, c.accepted_at) <= v_now - p_offline_after
         ORDER BY c.id LIMIT p_batch
           FOR UPDATE OF a SKIP LOCKED
    LOOP
        SELECT * INTO v_command FROM holdfast.commands WHERE id = v_id FOR UPDATE;
        SELECT * INTO v_machine FROM holdfast.machines WHERE id = v_command.machine_id;
        CONTINUE WHEN v_command.state <> 'accepted'
                   OR greatest(v_machine.last_heartbeat_at, v_command.accepted_at) > v_now - p_offline_after;
        v_known := holdfast.command_last_known_state(v_command, v_machine);
        UPDATE holdfast.commands
           SET state = 'unreachable', reason = 'machine_unreachable', last_known_state = v_known,
               resolved_at = v_now
         WHERE id = v_id RETURNING * INTO v_command;
        v_message := format('Machine %s has sent no heartbeat since %s. The command was handed to it '
                            'and may still be running or may have finished; its last known state is '
                            '%s. It will not be run again by Holdfast; you may retry it, e.g. on '
                            'another machine.', v_machine.name,
                            coalesce(v_machine.last_heartbeat_at::text, 'it was registered'),
                            v_known ->> 'state');
        PERFORM holdfast.answer_command_call(v_command,
            holdfast.command_outcome_output('unreachable', 'machine_unreachable', v_message, true,
                jsonb_build_object('error', 'machine_unreachable', 'command_id', v_id,
                                   'machine_id', v_machine.id, 'machine', v_machine.name,
                                   'last_heartbeat_at', v_machine.last_heartbeat_at,
                                   'last_known_state', v_known)),
            true, 'machine.unreachable',
            jsonb_build_object('command_id', v_id, 'tool_call_id', v_command.tool_call_id,
                               'machine_id', v_machine.id, 'machine', v_machine.name,
                               'last_heartbeat_at', v_machine.last_heartbeat_at,
                               'last_known_state', v_known));
        v_unreachable := v_unreachable + 1;
    END LOOP;

    RETURN jsonb_build_object('lost', v_lost, 'accept_timeout', v_accept,
                              'machine_offline', v_offline, 'unreachable', v_unreachable);
END
$$;


-- A new machine token: `hfm_` + 64 hex digits from two gen_random_uuid()
-- values (244 strong random bits). Stored only as holdfast.api_key_hash.
CREATE OR REPLACE FUNCTION holdfast.new_machine_token()
RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT 'hfm_' || encode(uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()), 'hex')
$$;

-- Delete a live machine of p_project. Its token authenticates nothing from
-- this commit on (authenticate_machine), its daemon session ends, any wake
-- attempt ends, and every command it has not finished ends now:
--   queued   → failed (`command.failed`, reason machine_deleted; it never ran);
--   accepted → unknown (`command.unknown`, reason machine_deleted): it was
--              handed to the machine and may be running there or have
--              finished; it will not be run again, and a result it sends
--              later is refused with the token.
-- The waiting tool calls get that output and their agents go on. A NOTIFY on
-- holdfast_commands wakes the machine's claim long-polls, which then find
-- the token refused.
--
-- Locks: the machine row FOR NO KEY UPDATE (waiting for a claim in flight,
-- which holds it FOR SHARE); then, per open command, its agent row (waited
-- for, not skipped: every command must end) and the command. Raises HF404
-- (not in the project, or already deleted). Returns how many commands it
-- ended.
CREATE OR REPLACE FUNCTION holdfast.delete_machine(p_project uuid, p_machine uuid)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_machine holdfast.machines;
    v_now timestamptz;
    v_command holdfast.commands;
    v_id uuid;
    v_agent uuid;
    v_message text;
    v_ended integer := 0;
BEGIN
    SELECT * INTO v_machine FROM holdfast.machines m
     WHERE m.id = p_machine AND m.project_id = p_project AND m.deleted_at IS NULL
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('machine %s not found', p_machine));
    END IF;
    v_now := holdfast.now();
    UPDATE holdfast.machines
       SET deleted_at = v_now, daemon_session = NULL, daemon_started_at = NULL, wake_until = NULL
     WHERE id = p_machine;
    FOR v_id, v_agent IN
        SELECT c.id, c.agent_id FROM holdfast.commands c
         WHERE c.machine_id = p_machine AND c.state IN ('queued', 'accepted')
         ORDER BY c.agent_id, c.id
    LOOP
        PERFORM holdfast.lock_agent(v_agent);
        SELECT * INTO v_command FROM holdfast.commands WHERE id = v_id FOR UPDATE;
        IF v_command.state = 'queued' THEN
            PERFORM holdfast.fail_queued_command(v_command, 'machine_deleted',
                format('Machine %s was deleted; the command was not run.', v_machine.name));
        ELSIF v_command.state = 'accepted' THEN
            UPDATE holdfast.commands SET state = 'unknown', reason = 'machine_deleted', resolved_at = v_now
             WHERE id = v_id RETURNING * INTO v_command;
            v_message := format('Machine %s was deleted after it accepted this command: the command '
                                'may still be running there or may have finished; its result will '
                                'not be received. It was not run again.', v_machine.name);
            PERFORM holdfast.answer_command_call(v_command,
                holdfast.command_outcome_output('unknown', 'machine_deleted', v_message, false,
                                                jsonb_build_object('exit_code', NULL, 'command_id', v_id)),
                true, 'command.unknown',
                jsonb_build_object('command_id', v_id, 'tool_call_id', v_command.tool_call_id,
                                   'machine_id', p_machine, 'reason', 'machine_deleted',
                                   'message', v_message, 'late', false));
        ELSE
            CONTINUE;
        END IF;
        v_ended := v_ended + 1;
    END LOOP;
    PERFORM pg_notify('holdfast_commands', p_machine::text);
    RETURN v_ended;
END
$$;

-- Give a live machine of p_project a new token, returned here once (the
-- same shape as register_machine). The old token is refused from this
-- commit on, and the daemon session it served ends (a claim naming it gets
-- HF409): the daemon must start again with the new token. Accepted commands
-- are untouched: a daemon restarted with the new token and the same state
-- directory reports them. A NOTIFY on holdfast_commands wakes the machine's
-- claim long-polls, which then find the old token refused.
--
-- Locks the machine row (FOR UPDATE: the token hash is a key). Raises HF404
-- (not in the project, or deleted).
CREATE OR REPLACE FUNCTION holdfast.rotate_machine_token(p_project uuid, p_machine uuid)
RETURNS TABLE (machine_id uuid, name text, wake_url text, token_prefix text, token text,
               created_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_token text := holdfast.new_machine_token();
BEGIN
    RETURN QUERY
    UPDATE holdfast.machines m
       SET token_hash = holdfast.api_key_hash(v_token), token_prefix = left(v_token, 12),
           daemon_session = NULL, daemon_started_at = NULL
     WHERE m.id = p_machine AND m.project_id = p_project AND m.deleted_at IS NULL
    RETURNING m.id, m.name, m.wake_url, m.token_prefix, v_token, m.created_at;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('machine %s not found', p_machine));
    END IF;
    PERFORM pg_notify('holdfast_commands', p_machine::text);
END
$$;

-- A command was queued: NOTIFY holdfast_commands with its machine's id, so
-- the API wakes that machine's claim long-polls. Postgres folds identical
-- notifications of one transaction into one, so a transaction queueing
-- several commands for a machine notifies it once. A hint: claims still
-- poll at a low rate.
CREATE OR REPLACE FUNCTION holdfast.tg_commands_notify_queued() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('holdfast_commands', NEW.machine_id::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER _900_notify_queued AFTER INSERT ON holdfast.commands
    FOR EACH ROW WHEN (NEW.state = 'queued')
    EXECUTE FUNCTION holdfast.tg_commands_notify_queued();

-- Relay what a running command printed since the last call (p_stdout,
-- p_stderr; either may be empty) to the agent's stream listeners: NOTIFY
-- holdfast_stream with {"agent_id", "kind": "command_output",
-- "command_id", "tool_call_id", "stream", "text"} per stream, never saved
-- (the command's result is the record). Bounded per command: p_max_bytes
-- in all (commands.live_output_bytes) and one call per p_min_interval
-- (live_output_at). Returns 'relayed'; 'not_running' (not accepted:
-- finished, or never handed out); 'too_soon'; or 'limit' (past
-- p_max_bytes: the first refusal tells the listeners, with
-- "limit_reached": true, and nothing more is relayed). A command not on
-- p_machine is HF404.
CREATE OR REPLACE FUNCTION holdfast.command_output(
    p_machine uuid, p_command uuid, p_stdout text, p_stderr text, p_max_bytes integer,
    p_min_interval interval)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_command holdfast.commands;
    v_bytes integer := octet_length(coalesce(p_stdout, '')) + octet_length(coalesce(p_stderr, ''));
    v_base jsonb;
    v_stream text;
    v_text text;
    v_at integer;
BEGIN
    SELECT * INTO v_command FROM holdfast.commands WHERE id = p_command FOR UPDATE;
    IF NOT FOUND OR v_command.machine_id IS DISTINCT FROM p_machine THEN
        PERFORM holdfast.raise('HF404', format('command %s not found', p_command));
    END IF;
    IF v_command.state <> 'accepted' THEN
        RETURN 'not_running';
    END IF;
    IF v_command.live_output_bytes >= p_max_bytes THEN
        RETURN 'limit';
    END IF;
    IF v_command.live_output_at > holdfast.now() - p_min_interval THEN
        RETURN 'too_soon';
    END IF;
    v_base := jsonb_build_object('agent_id', v_command.agent_id, 'kind', 'command_output',
                                 'command_id', v_command.id, 'tool_call_id', v_command.tool_call_id);
    IF v_command.live_output_bytes + v_bytes > p_max_bytes THEN
        UPDATE holdfast.commands SET live_output_bytes = p_max_bytes, live_output_at = holdfast.now()
         WHERE id = p_command;
        PERFORM pg_notify('holdfast_stream', (v_base || jsonb_build_object(
            'stream', 'stdout', 'text', '', 'limit_reached', true))::text);
        RETURN 'limit';
    END IF;
    UPDATE holdfast.commands
       SET live_output_bytes = live_output_bytes + v_bytes, live_output_at = holdfast.now()
     WHERE id = p_command;
    FOREACH v_stream IN ARRAY ARRAY['stdout', 'stderr'] LOOP
        v_text := coalesce(CASE v_stream WHEN 'stdout' THEN p_stdout ELSE p_stderr END, '');
        v_at := 1;
        -- Pieces of 1,000 characters: a NOTIFY payload stays under 8,000
        -- bytes (a character is at most 4 bytes, or 6 once JSON escapes a
        -- control character).
        WHILE v_at <= length(v_text) LOOP
            PERFORM pg_notify('holdfast_stream', (v_base || jsonb_build_object(
                'stream', v_stream, 'text', substr(v_text, v_at, 1000)))::text);
            v_at := v_at + 1000;
        END LOOP;
    END LOOP;
    RETURN 'relayed';
END
$$;
