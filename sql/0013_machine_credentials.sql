-- 0013_machine_credentials.sql — deleting machines, rotating their tokens,
-- and a NOTIFY when a command is queued for a machine.
--
-- Adds: machines.deleted_at (a deleted machine keeps its row, so its
-- commands keep their history, but its token authenticates nothing and its
-- name is free again: the per-project name constraint becomes a unique
-- index over live machines); delete_machine (its queued and accepted
-- commands end at once, and the agents waiting on them get a clear result);
-- rotate_machine_token (a new token; the old one is refused at once and the
-- daemon session it served ends); new_machine_token (the one token
-- generator, for registration and rotation); and the trigger
-- _900_notify_queued, which NOTIFYs `holdfast_commands` with the machine id
-- when a command is queued, so a daemon's claim long-poll wakes at once
-- instead of polling.
--
-- Redefined (from 0008): register_machine (the token from
-- new_machine_token; the name conflict is over live machines),
-- authenticate_machine, list_machines, start_machine_wake and
-- queue_command (a deleted machine is not found), and the
-- machine_overview view (a deleted_at column).
--
-- Why in SQL: "the token stops working at once" and "the waiting agents move
-- on" are one transaction: the row that authenticates the daemon and the
-- commands its agents wait on change together, under the same locks a claim
-- takes.
--
-- Lock order, as in 0008: a machine row before agent rows. delete_machine
-- takes its machine FOR NO KEY UPDATE (deleted_at is not a key column), which
-- does not conflict with the FOR KEY SHARE a concurrent INSERT of a command
-- takes through its foreign key while holding its agent's lock: the two
-- cannot deadlock. Such a command, queued by a transaction that read the
-- machine as live just before the delete committed, stays queued on a
-- deleted machine; nothing can claim it (the token is refused) and
-- machine_tick fails it as machine_offline once the offline window has
-- passed (the delete ends any wake attempt).

ALTER TABLE holdfast.machines ADD COLUMN deleted_at timestamptz;
ALTER TABLE holdfast.machines DROP CONSTRAINT machines_name_unique;
CREATE UNIQUE INDEX machines_live_name_unique ON holdfast.machines (project_id, name)
    WHERE deleted_at IS NULL;

-- A new machine token: `hfm_` + 64 hex digits from two gen_random_uuid()
-- values (244 strong random bits). Stored only as holdfast.api_key_hash.
CREATE FUNCTION holdfast.new_machine_token()
RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT 'hfm_' || encode(uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()), 'hex')
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

-- Queue the command a waiting run_command call asks for, on the live
-- machine the agent's config names (`tools: [{"type": "run_command",
-- "machine": <id or name>}]`, a machine of the agent's own project), with
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
    v_id uuid;
BEGIN
    IF EXISTS (SELECT 1 FROM holdfast.commands WHERE tool_call_id = p_call.id) THEN
        RETURN;
    END IF;
    SELECT * INTO v_agent FROM holdfast.agents WHERE id = p_call.agent_id;
    SELECT nullif(btrim(t.value ->> 'machine'), '') INTO v_ref
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
    INSERT INTO holdfast.commands (tool_call_id, agent_id, machine_id, command, timeout_secs)
    VALUES (p_call.id, p_call.agent_id, v_machine.id, v_command, v_timeout_secs)
    RETURNING id INTO v_id;
    PERFORM holdfast.append_event(p_call.agent_id, 'command.queued', jsonb_build_object(
        'command_id', v_id, 'tool_call_id', p_call.id, 'machine_id', v_machine.id,
        'machine', v_machine.name, 'command', v_command, 'timeout_secs', v_timeout_secs));
END
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
CREATE FUNCTION holdfast.delete_machine(p_project uuid, p_machine uuid)
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
CREATE FUNCTION holdfast.rotate_machine_token(p_project uuid, p_machine uuid)
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
CREATE FUNCTION holdfast.tg_commands_notify_queued() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('holdfast_commands', NEW.machine_id::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER _900_notify_queued AFTER INSERT ON holdfast.commands
    FOR EACH ROW WHEN (NEW.state = 'queued')
    EXECUTE FUNCTION holdfast.tg_commands_notify_queued();

-- Machines and their commands, for DBAs: online state, the daemon serving
-- each, commands waiting and running, and when it was deleted.
CREATE OR REPLACE VIEW holdfast.machine_overview AS
SELECT m.id AS machine_id,
       m.project_id,
       m.name,
       m.last_heartbeat_at,
       coalesce(m.last_heartbeat_at > holdfast.now() - s.offline_after, false) AS online,
       m.daemon_session,
       m.daemon_started_at,
       CASE WHEN m.wake_until > holdfast.now() THEN m.wake_until END AS waking_until,
       (SELECT count(*) FROM holdfast.commands c WHERE c.machine_id = m.id AND c.state = 'queued') AS queued,
       (SELECT count(*) FROM holdfast.commands c WHERE c.machine_id = m.id AND c.state = 'accepted') AS accepted,
       (SELECT min(c.queued_at) FROM holdfast.commands c WHERE c.machine_id = m.id AND c.state = 'queued') AS oldest_queued_at,
       m.deleted_at
  FROM holdfast.machines m CROSS JOIN holdfast.machine_settings s;
