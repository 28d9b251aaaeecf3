-- 0002_api.sql — the client write API behind the HTTP API.
--
-- Adds: API keys (create_api_key, authenticate_api_key, revoke_api_key; only
-- SHA-256 hashes are stored), config changes (update_agent_config,
-- patch_agent_config → config.updated), archive_agent (→ agent.archived),
-- cancellation (request_cancel, and cancel_turn, which the worker's
-- complete_cancel shares so that both paths end a turn the same way), and
-- submit_tool_result for custom tools (first result wins).
--
-- Why in SQL: the HTTP API is a shell over these functions. A script or an
-- integration with a SQL connection gets the same rules (first result wins,
-- only an idle agent is archived, a cancel is recorded once) by calling them.
--
-- Lock order, as in 0001: an agent row first, then its tool calls.

-- ---------------------------------------------------------------------------
-- API keys
-- ---------------------------------------------------------------------------

-- A key's hash: SHA-256 of its UTF-8 text. Keys are long and random, so a
-- plain hash (no salt, no stretching) is enough and lets lookups use the
-- unique index on key_hash.
CREATE FUNCTION holdfast.api_key_hash(p_key text) RETURNS bytea
LANGUAGE sql STABLE STRICT AS $$
    SELECT sha256(convert_to(p_key, 'UTF8'))
$$;

-- Create an API key for a project, creating the project if it has no row yet.
-- The key is `hf_` and 64 hex digits from two gen_random_uuid() values (244
-- random bits from the server's strong random source); it is returned here
-- once and stored only as its hash. `prefix` (the first 11 characters) is
-- stored in clear so a person can tell keys apart and revoke one by it.
-- Raises HF422 (bad project name).
CREATE FUNCTION holdfast.create_api_key(p_project_name text)
RETURNS TABLE (key_id uuid, project_id uuid, prefix text, key text) LANGUAGE plpgsql AS $$
DECLARE
    v_project uuid;
    v_key text;
    v_id uuid;
BEGIN
    v_project := holdfast.ensure_project(p_project_name);
    v_key := 'hf_' || encode(uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()), 'hex');
    INSERT INTO holdfast.api_keys (project_id, key_hash, prefix)
    VALUES (v_project, holdfast.api_key_hash(v_key), left(v_key, 11))
    RETURNING id INTO v_id;
    RETURN QUERY SELECT v_id, v_project, left(v_key, 11), v_key;
END
$$;

-- The project a key belongs to; no row when the key is unknown or revoked.
-- Reads only (no lock): every API request calls it.
CREATE FUNCTION holdfast.authenticate_api_key(p_key text)
RETURNS TABLE (key_id uuid, project_id uuid) LANGUAGE sql STABLE AS $$
    SELECT k.id, k.project_id
      FROM holdfast.api_keys k
     WHERE k.key_hash = holdfast.api_key_hash(p_key) AND k.revoked_at IS NULL
$$;

-- Revoke a key named by its id, its displayed prefix, or its full text.
-- Idempotent: a key already revoked is returned unchanged. Locks the key row.
-- Raises HF404 (no such key), HF422 (a prefix shared by several keys: name
-- the key by id instead).
CREATE FUNCTION holdfast.revoke_api_key(p_key_ref text)
RETURNS TABLE (key_id uuid, project_id uuid, prefix text, revoked_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
BEGIN
    IF p_key_ref ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        v_ids := ARRAY(SELECT k.id FROM holdfast.api_keys k WHERE k.id = p_key_ref::uuid);
    ELSE
        v_ids := ARRAY(SELECT k.id FROM holdfast.api_keys k
                        WHERE k.prefix = p_key_ref OR k.key_hash = holdfast.api_key_hash(p_key_ref));
    END IF;
    IF cardinality(v_ids) = 0 THEN
        PERFORM holdfast.raise('HF404', format('API key %s not found', p_key_ref));
    END IF;
    IF cardinality(v_ids) > 1 THEN
        PERFORM holdfast.raise('HF422', format('prefix %s names %s keys; revoke by id', p_key_ref, cardinality(v_ids)), 'key');
    END IF;
    RETURN QUERY
    UPDATE holdfast.api_keys k
       SET revoked_at = coalesce(k.revoked_at, holdfast.now())
     WHERE k.id = v_ids[1]
    RETURNING k.id, k.project_id, k.prefix, k.revoked_at;
END
$$;

-- ---------------------------------------------------------------------------
-- Agent configuration
-- ---------------------------------------------------------------------------

-- RFC 7396 JSON merge patch: objects merge key by key, null removes a key,
-- anything else (arrays included) replaces. Pure.
CREATE FUNCTION holdfast.jsonb_merge_patch(p_target jsonb, p_patch jsonb)
RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_result jsonb;
    v_key text;
    v_value jsonb;
BEGIN
    IF jsonb_typeof(p_patch) IS DISTINCT FROM 'object' THEN
        RETURN p_patch;
    END IF;
    v_result := CASE WHEN jsonb_typeof(p_target) = 'object' THEN p_target ELSE '{}' END;
    FOR v_key, v_value IN SELECT e.key, e.value FROM jsonb_each(p_patch) e LOOP
        IF jsonb_typeof(v_value) = 'null' THEN
            v_result := v_result - v_key;
        ELSE
            v_result := jsonb_set(v_result, ARRAY[v_key], holdfast.jsonb_merge_patch(v_result -> v_key, v_value));
        END IF;
    END LOOP;
    RETURN v_result;
END
$$;

-- Replace an agent's config and record config.updated (data: {"config"}).
-- Workers rebuild each model request from the database at every attempt, so
-- the change applies to the next model call, retries included. A config equal
-- to the current one changes nothing and records nothing. Locks the agent
-- row. Raises HF404, HF409 (archived), HF422 (invalid config, field named).
-- Returns the config now in force.
CREATE FUNCTION holdfast.update_agent_config(p_agent uuid, p_config jsonb)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_agent holdfast.agents;
BEGIN
    PERFORM holdfast.validate_config(p_config);
    v_agent := holdfast.lock_agent(p_agent);
    IF v_agent.state = 'archived' THEN
        PERFORM holdfast.raise('HF409', format('agent %s is archived', p_agent));
    END IF;
    IF v_agent.config = p_config THEN
        RETURN p_config;
    END IF;
    UPDATE holdfast.agents SET config = p_config, updated_at = holdfast.now() WHERE id = p_agent;
    PERFORM holdfast.append_event(p_agent, 'config.updated', jsonb_build_object('config', p_config));
    RETURN p_config;
END
$$;

-- Change an agent's config by a merge patch (jsonb_merge_patch) applied to
-- the config read under the agent's row lock, so two concurrent patches of
-- different fields both take effect. Then as update_agent_config. Raises
-- HF404, HF409 (archived), HF422 (the patch is not an object, or the result
-- is invalid). Returns the config now in force.
CREATE FUNCTION holdfast.patch_agent_config(p_agent uuid, p_patch jsonb)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_agent holdfast.agents;
BEGIN
    IF jsonb_typeof(p_patch) IS DISTINCT FROM 'object' THEN
        PERFORM holdfast.raise('HF422', 'a config patch must be a JSON object', 'config');
    END IF;
    v_agent := holdfast.lock_agent(p_agent);
    RETURN holdfast.update_agent_config(p_agent, holdfast.jsonb_merge_patch(v_agent.config, p_patch));
END
$$;

-- ---------------------------------------------------------------------------
-- Archive and cancel
-- ---------------------------------------------------------------------------

-- Archive an idle agent: it then refuses new inputs (create_input raises
-- HF409) and config changes; its history stays readable. Idempotent on an
-- archived agent. Locks the agent row. Raises HF404, HF409 (a turn or tool
-- calls are open: cancel first).
CREATE FUNCTION holdfast.archive_agent(p_agent uuid)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_agent holdfast.agents;
BEGIN
    v_agent := holdfast.lock_agent(p_agent);
    IF v_agent.state = 'archived' THEN
        RETURN;
    END IF;
    IF v_agent.state <> 'idle' THEN
        PERFORM holdfast.raise('HF409', format('agent %s is %s; only an idle agent can be archived', p_agent, v_agent.state));
    END IF;
    UPDATE holdfast.agents SET state = 'archived', updated_at = holdfast.now() WHERE id = p_agent;
    PERFORM holdfast.append_event(p_agent, 'agent.archived', '{}');
END
$$;

-- End an agent's open turn as cancelled: every tool call not yet finished
-- (pending, awaiting_approval, waiting, running) becomes cancelled, so later
-- answers to them get HF409; the turn closes; a pending cancel request is
-- cleared; turn.cancelled is appended with the cancelled calls' ids.
-- Unconsumed inputs are left alone: they start the next turn when the agent
-- is settled. The caller holds the agent's row lock and settles the agent
-- afterwards (request_cancel here; the worker's complete_cancel after its
-- step has stopped). Returns the turn.cancelled event's seq.
CREATE FUNCTION holdfast.cancel_turn(p_agent uuid)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_cancelled jsonb;
BEGIN
    WITH open AS (
        SELECT t.id FROM holdfast.tool_calls t
         WHERE t.agent_id = p_agent AND t.status NOT IN ('completed', 'cancelled')
         ORDER BY t.id
           FOR UPDATE
    ), cancelled AS (
        UPDATE holdfast.tool_calls t
           SET status = 'cancelled', running_epoch = NULL, completed_at = holdfast.now()
          FROM open o
         WHERE t.id = o.id
        RETURNING t.id, t.created_at, t.position
    )
    SELECT coalesce(jsonb_agg(c.id ORDER BY c.created_at, c.position), '[]') INTO v_cancelled FROM cancelled c;
    UPDATE holdfast.agents
       SET turn_open = false, cancel_requested_at = NULL, updated_at = holdfast.now()
     WHERE id = p_agent;
    RETURN holdfast.append_event(p_agent, 'turn.cancelled', jsonb_build_object('cancelled_tool_calls', v_cancelled));
END
$$;

-- Cancel an agent's current turn. Locks the agent row (cancel_turn then locks
-- its tool calls).
--   running: a worker holds the agent mid-step. The request is recorded
--     (cancel_requested_at; renew_leases reports it too) and holdfast_cancel
--     is notified with the agent id; the holder stops its step and calls
--     complete_cancel. Asking again re-sends the hint. Returns 'requested'.
--   ready, waiting: no worker is mid-step, so the turn ends at once
--     (cancel_turn, then settle_agent). Returns 'cancelled'.
-- Raises HF404, HF409 (idle or archived: no turn to cancel).
CREATE FUNCTION holdfast.request_cancel(p_agent uuid)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_agent holdfast.agents;
BEGIN
    v_agent := holdfast.lock_agent(p_agent);
    IF v_agent.state IN ('idle', 'archived') THEN
        PERFORM holdfast.raise('HF409', format('agent %s is %s: no turn to cancel', p_agent, v_agent.state));
    END IF;
    IF v_agent.state = 'running' THEN
        UPDATE holdfast.agents SET cancel_requested_at = coalesce(cancel_requested_at, holdfast.now())
         WHERE id = p_agent;
        PERFORM pg_notify('holdfast_cancel', p_agent::text);
        RETURN 'requested';
    END IF;
    PERFORM holdfast.cancel_turn(p_agent);
    PERFORM holdfast.settle_agent(p_agent);
    RETURN 'cancelled';
END
$$;

-- ---------------------------------------------------------------------------
-- Custom tool results
-- ---------------------------------------------------------------------------

-- Record the result of a custom tool call, posted by the client's backend
-- (DESIGN §4: first result wins). Locks the agent row, then the call. Only a
-- call of kind 'custom' in status 'waiting' accepts a result: it becomes
-- completed with tool_call.completed. An unleased agent is settled (ready
-- once nothing else waits); a leased one (its worker is running other calls
-- of the batch) is settled by its release. No step row is written: a step
-- is a worker's unit of work, and no worker took part.
-- Raises HF404 (no such call), HF409 (the call already has a result, was
-- cancelled, or is not a custom call waiting for one; identical payloads
-- included), HF422 (output is SQL NULL; JSON null is a valid output).
-- Returns the completed call.
CREATE FUNCTION holdfast.submit_tool_result(p_tool_call uuid, p_output jsonb, p_is_error boolean)
RETURNS holdfast.tool_calls LANGUAGE plpgsql AS $$
DECLARE
    v_agent holdfast.agents;
    v_call holdfast.tool_calls;
BEGIN
    IF p_output IS NULL THEN
        PERFORM holdfast.raise('HF422', 'output must not be null', 'output');
    END IF;
    SELECT * INTO v_call FROM holdfast.tool_calls WHERE id = p_tool_call;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('tool call %s not found', p_tool_call));
    END IF;
    v_agent := holdfast.lock_agent(v_call.agent_id);
    SELECT * INTO v_call FROM holdfast.tool_calls WHERE id = p_tool_call FOR UPDATE;
    IF v_call.kind <> 'custom' THEN
        PERFORM holdfast.raise('HF409', format('tool call %s is a %s call, not a custom one', p_tool_call, v_call.kind));
    END IF;
    IF v_call.status <> 'waiting' THEN
        PERFORM holdfast.raise('HF409', format('tool call %s is %s', p_tool_call, v_call.status));
    END IF;
    UPDATE holdfast.tool_calls
       SET status = 'completed', output = p_output, is_error = coalesce(p_is_error, false),
           completed_at = holdfast.now()
     WHERE id = p_tool_call
    RETURNING * INTO v_call;
    PERFORM holdfast.append_event(v_call.agent_id, 'tool_call.completed', jsonb_build_object(
        'tool_call_id', p_tool_call, 'name', v_call.name, 'output', p_output,
        'is_error', v_call.is_error));
    IF v_agent.state <> 'running' THEN
        PERFORM holdfast.settle_agent(v_call.agent_id);
    END IF;
    RETURN v_call;
END
$$;
