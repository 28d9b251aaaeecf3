--
-- PostgreSQL database dump
--



SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: holdfast; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA holdfast;


--
-- Name: model_step; Type: TYPE; Schema: holdfast; Owner: -
--

CREATE TYPE holdfast.model_step AS (
	agent_id uuid,
	epoch bigint,
	input_ids uuid[],
	message jsonb,
	tool_calls jsonb,
	usage jsonb,
	stop_reason text,
	config_version integer
);


--
-- Name: new_input; Type: TYPE; Schema: holdfast; Owner: -
--

CREATE TYPE holdfast.new_input AS (
	project_id uuid,
	agent_id uuid,
	content jsonb,
	idempotency_key text,
	trace_parent text,
	trace_state text,
	mode text
);


--
-- Name: step_context; Type: TYPE; Schema: holdfast; Owner: -
--

CREATE TYPE holdfast.step_context AS (
	config jsonb,
	config_version integer,
	turn_open boolean,
	model_attempts integer,
	cancel_requested boolean,
	context_summary text,
	turn_model_steps integer,
	over_budget boolean,
	turn_trace_parent text,
	turn_trace_state text,
	first_attempt_epoch bigint,
	lost_attempt_epoch bigint,
	lost_attempt_started_at timestamp with time zone,
	lost_attempt_ended_at timestamp with time zone,
	messages json,
	tool_calls json,
	pending_inputs json,
	refused_field text,
	refused_message text,
	endpoint text,
	custom_url text,
	base_url text,
	credential_env text,
	sealed_key bytea,
	key_fingerprint text,
	project_id uuid,
	replay boolean
);


--
-- Name: token_usage; Type: TYPE; Schema: holdfast; Owner: -
--

CREATE TYPE holdfast.token_usage AS (
	input_tokens bigint,
	output_tokens bigint,
	cache_read_tokens bigint,
	cache_write_tokens bigint,
	reasoning_tokens bigint,
	cost_usd numeric,
	server_tool_requests bigint,
	web_search_requests bigint
);


--
-- Name: tool_result; Type: TYPE; Schema: holdfast; Owner: -
--

CREATE TYPE holdfast.tool_result AS (
	tool_call_id uuid,
	output jsonb,
	is_error boolean
);


--
-- Name: now(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.now() RETURNS timestamp with time zone
    LANGUAGE sql
    AS $$
    SELECT clock_timestamp()
         + coalesce(nullif(current_setting('holdfast.clock_offset', true), ''), '0')::interval
$$;


--
-- Name: uuid_v7(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.uuid_v7() RETURNS uuid
    LANGUAGE sql
    AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: model_endpoints; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.model_endpoints (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    name text NOT NULL,
    kind text NOT NULL,
    base_url text NOT NULL,
    credential_env text,
    project_id uuid,
    models text[],
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT model_endpoints_base_url_check CHECK ((base_url ~ '^https?://[^/?#]+'::text)),
    CONSTRAINT model_endpoints_credential_env_check CHECK (((credential_env ~ '^[A-Z_][A-Z0-9_]{0,127}$'::text) AND (credential_env !~~ 'HOLDFAST\_%'::text))),
    CONSTRAINT model_endpoints_kind_check CHECK ((kind = ANY (ARRAY['anthropic'::text, 'openai'::text]))),
    CONSTRAINT model_endpoints_models_check CHECK (((models IS NULL) OR ((cardinality(models) > 0) AND (array_position(models, NULL::text) IS NULL)))),
    CONSTRAINT model_endpoints_name_check CHECK (((name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'::text) AND (name <> 'default'::text)))
);


--
-- Name: add_model_endpoint(text, text, text, text, text, text[]); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.add_model_endpoint(p_name text, p_kind text, p_base_url text, p_credential_env text, p_project_name text, p_models text[]) RETURNS holdfast.model_endpoints
    LANGUAGE plpgsql
    AS $_$
DECLARE
    v_row holdfast.model_endpoints;
BEGIN
    IF p_name IS NULL OR p_name !~ '^[a-z0-9][a-z0-9._-]{0,62}$' THEN
        PERFORM holdfast.raise('HF422', 'name must be 1 to 63 lowercase letters, digits, ".", "_" or "-"', 'name');
    END IF;
    IF p_name = 'default' THEN
        PERFORM holdfast.raise('HF422', 'the name "default" is reserved: it is the worker''s ANTHROPIC_*/OPENAI_* environment', 'name');
    END IF;
    IF p_kind IS NULL OR p_kind NOT IN ('anthropic', 'openai') THEN
        PERFORM holdfast.raise('HF422', 'kind must be "anthropic" or "openai"', 'kind');
    END IF;
    IF p_base_url IS NULL OR p_base_url !~ '^https?://[^/?#]+' THEN
        PERFORM holdfast.raise('HF422', 'base_url must be an http(s) URL', 'base_url');
    END IF;
    IF p_credential_env IS NOT NULL AND p_credential_env !~ '^[A-Z_][A-Z0-9_]{0,127}$' THEN
        PERFORM holdfast.raise('HF422', 'credential_env must be an environment variable name (A-Z, 0-9, _)', 'credential_env');
    END IF;
    IF p_credential_env LIKE 'HOLDFAST\_%' THEN
        PERFORM holdfast.raise('HF422', 'credential_env must not be a HOLDFAST_* variable (they hold the database URL and the secret key)', 'credential_env');
    END IF;
    IF array_position(p_models, NULL) IS NOT NULL OR array_position(p_models, '') IS NOT NULL THEN
        PERFORM holdfast.raise('HF422', 'models must be non-empty model names', 'models');
    END IF;
    IF EXISTS (SELECT 1 FROM holdfast.model_endpoints WHERE name = p_name) THEN
        PERFORM holdfast.raise('HF409', format('model endpoint %s already exists; remove it first', p_name));
    END IF;
    INSERT INTO holdfast.model_endpoints (name, kind, base_url, credential_env, project_id, models)
    VALUES (p_name, p_kind, p_base_url, p_credential_env,
            CASE WHEN p_project_name IS NOT NULL THEN holdfast.project_by_name(p_project_name) END,
            nullif(p_models, '{}'))
    RETURNING * INTO v_row;
    RETURN v_row;
END
$_$;


--
-- Name: add_server_tool_cost(holdfast.token_usage, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.add_server_tool_cost(p_usage holdfast.token_usage, p_provider text) RETURNS holdfast.token_usage
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
    v_searches bigint := coalesce((p_usage).web_search_requests, 0);
BEGIN
    IF v_searches = 0 OR p_provider IS DISTINCT FROM 'anthropic' THEN
        RETURN p_usage;
    END IF;
    p_usage.cost_usd := coalesce(p_usage.cost_usd, 0) + v_searches * holdfast.web_search_usd_per_request();
    RETURN p_usage;
END
$$;


--
-- Name: add_usage(holdfast.token_usage, holdfast.token_usage); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.add_usage(p_a holdfast.token_usage, p_b holdfast.token_usage) RETURNS holdfast.token_usage
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT ROW((p_a).input_tokens + (p_b).input_tokens,
               (p_a).output_tokens + (p_b).output_tokens,
               (p_a).cache_read_tokens + (p_b).cache_read_tokens,
               (p_a).cache_write_tokens + (p_b).cache_write_tokens,
               (p_a).reasoning_tokens + (p_b).reasoning_tokens,
               CASE WHEN (p_a).cost_usd IS NULL THEN (p_b).cost_usd
                    WHEN (p_b).cost_usd IS NULL THEN (p_a).cost_usd
                    ELSE (p_a).cost_usd + (p_b).cost_usd END,
               coalesce((p_a).server_tool_requests, 0) + coalesce((p_b).server_tool_requests, 0),
               coalesce((p_a).web_search_requests, 0) + coalesce((p_b).web_search_requests, 0)
              )::holdfast.token_usage
$$;


--
-- Name: admit_queued_input(uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.admit_queued_input(p_agent uuid) RETURNS uuid
    LANGUAGE sql
    AS $$
    UPDATE holdfast.inputs SET admitted_at = holdfast.now()
     WHERE id = (SELECT i.id FROM holdfast.inputs i
                  WHERE i.agent_id = p_agent AND i.admitted_at IS NULL AND i.removed_at IS NULL
                  ORDER BY i.queue_position, i.created_at, i.id LIMIT 1)
    RETURNING id
$$;


--
-- Name: advance_schedule(uuid, timestamp with time zone, timestamp with time zone, timestamp with time zone, timestamp with time zone, boolean, timestamp with time zone); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.advance_schedule(p_schedule uuid, p_due timestamp with time zone, p_missed_from timestamp with time zone, p_missed_until timestamp with time zone, p_fire_slot timestamp with time zone, p_late boolean, p_next_fire_at timestamp with time zone) RETURNS text
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: agents; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.agents (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    project_id uuid NOT NULL,
    config jsonb NOT NULL,
    state text DEFAULT 'idle'::text NOT NULL,
    turn_open boolean DEFAULT false NOT NULL,
    model_attempts integer DEFAULT 0 NOT NULL,
    run_after timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    lease_owner text,
    lease_epoch bigint DEFAULT 0 NOT NULL,
    lease_expires_at timestamp with time zone,
    lease_pid integer,
    lease_backend_start timestamp with time zone,
    cancel_requested_at timestamp with time zone,
    last_event_seq bigint DEFAULT 0 NOT NULL,
    last_message_seq bigint DEFAULT 0 NOT NULL,
    last_step_seq bigint DEFAULT 0 NOT NULL,
    last_event_at timestamp with time zone,
    state_changed_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    updated_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    context_summary text,
    context_start_seq bigint DEFAULT 0 NOT NULL,
    parent_tool_call_id uuid,
    step_failures integer DEFAULT 0 NOT NULL,
    turn_model_steps integer DEFAULT 0 NOT NULL,
    subagent_depth integer DEFAULT 0 NOT NULL,
    root_agent_id uuid,
    turn_seq bigint DEFAULT 0 NOT NULL,
    turn_usage holdfast.token_usage DEFAULT ROW((0)::bigint, (0)::bigint, (0)::bigint, (0)::bigint, (0)::bigint, NULL::numeric, (0)::bigint, (0)::bigint) NOT NULL,
    usage holdfast.token_usage DEFAULT ROW((0)::bigint, (0)::bigint, (0)::bigint, (0)::bigint, (0)::bigint, NULL::numeric, (0)::bigint, (0)::bigint) NOT NULL,
    turn_trace_parent text,
    turn_trace_state text,
    first_attempt_epoch bigint,
    lost_attempt_epoch bigint,
    lost_attempt_started_at timestamp with time zone,
    lost_attempt_ended_at timestamp with time zone,
    events_pruned_before timestamp with time zone,
    budget_grants jsonb DEFAULT '{}'::jsonb NOT NULL,
    attachment_bytes bigint DEFAULT 0 NOT NULL,
    last_turn_started_at timestamp with time zone,
    last_turn_ended_at timestamp with time zone,
    last_turn_outcome text,
    last_turn_error jsonb,
    lease_session_locked boolean DEFAULT false NOT NULL,
    forked_from_agent_id uuid,
    forked_from_seq bigint,
    attachment_sources uuid[] DEFAULT '{}'::uuid[] NOT NULL,
    replay_id uuid,
    config_version integer DEFAULT 1 NOT NULL,
    next_turn_config_version integer,
    CONSTRAINT agents_attachment_bytes_check CHECK ((attachment_bytes >= 0)),
    CONSTRAINT agents_forked_from_complete CHECK (((forked_from_agent_id IS NULL) = (forked_from_seq IS NULL))),
    CONSTRAINT agents_last_turn_outcome_check CHECK ((last_turn_outcome = ANY (ARRAY['completed'::text, 'failed'::text, 'cancelled'::text, 'limit'::text]))),
    CONSTRAINT agents_last_turn_outcome_iff_ended CHECK (((last_turn_outcome IS NULL) = (last_turn_ended_at IS NULL))),
    CONSTRAINT agents_lease_iff_running CHECK (((state = 'running'::text) = ((lease_owner IS NOT NULL) AND (lease_expires_at IS NOT NULL)))),
    CONSTRAINT agents_lost_attempt_complete CHECK ((((lost_attempt_epoch IS NULL) = (first_attempt_epoch IS NULL)) AND ((lost_attempt_epoch IS NULL) = (lost_attempt_started_at IS NULL)) AND ((lost_attempt_epoch IS NULL) = (lost_attempt_ended_at IS NULL)))),
    CONSTRAINT agents_next_turn_config_version_check CHECK ((next_turn_config_version > config_version)),
    CONSTRAINT agents_state_check CHECK ((state = ANY (ARRAY['idle'::text, 'ready'::text, 'running'::text, 'waiting'::text, 'archived'::text]))),
    CONSTRAINT agents_step_failures_check CHECK ((step_failures >= 0)),
    CONSTRAINT agents_turn_trace_parent_check CHECK ((turn_trace_parent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'::text))
);


--
-- Name: agent_last_turn(holdfast.agents); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.agent_last_turn(p_agent holdfast.agents) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE WHEN (p_agent).last_turn_started_at IS NOT NULL THEN jsonb_build_object(
        'turn', (p_agent).turn_seq,
        'outcome', (p_agent).last_turn_outcome,
        'error', (p_agent).last_turn_error,
        'started_at', (p_agent).last_turn_started_at,
        'ended_at', (p_agent).last_turn_ended_at,
        'usage', holdfast.usage_json((p_agent).turn_usage))
    END
$$;


--
-- Name: agent_limit(jsonb, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.agent_limit(p_config jsonb, p_name text) RETURNS integer
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_max integer := holdfast.limit_maximum(p_name);
BEGIN
    RETURN least(coalesce((p_config #>> ARRAY['limits', p_name])::numeric, v_max), v_max)::integer;
END
$$;


--
-- Name: agent_usage(uuid, uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.agent_usage(p_project uuid, p_agent uuid) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    SELECT jsonb_build_object(
        'agent_id', a.id,
        'usage', holdfast.usage_json(a.usage),
        'turns', coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                       'turn', t.turn_seq, 'model_steps', t.model_steps,
                       'started_at', t.started_at, 'usage', holdfast.usage_json(t.usage))
                   ORDER BY t.turn_seq)
              FROM (SELECT s.turn_seq, count(*) AS model_steps, min(s.created_at) AS started_at,
                           ROW(sum((s.usage).input_tokens), sum((s.usage).output_tokens),
                               sum((s.usage).cache_read_tokens), sum((s.usage).cache_write_tokens),
                               sum((s.usage).reasoning_tokens), sum((s.usage).cost_usd),
                               sum((s.usage).server_tool_requests), sum((s.usage).web_search_requests)
                              )::holdfast.token_usage AS usage
                      FROM holdfast.steps s
                     WHERE s.agent_id = a.id AND s.kind IN ('model', 'compaction') AND s.turn_seq IS NOT NULL
                     GROUP BY s.turn_seq) t), '[]'))
      FROM holdfast.agents a
     WHERE a.id = p_agent AND a.project_id = p_project
$$;


--
-- Name: approvals; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.approvals (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    agent_id uuid NOT NULL,
    tool_call_id uuid,
    status text DEFAULT 'pending'::text NOT NULL,
    decided_by text,
    reason text,
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    decided_at timestamp with time zone,
    kind text DEFAULT 'tool_call'::text NOT NULL,
    budget jsonb,
    CONSTRAINT approvals_decided_has_decider CHECK (((status = ANY (ARRAY['approved'::text, 'denied'::text])) = ((decided_by IS NOT NULL) AND (decided_at IS NOT NULL)))),
    CONSTRAINT approvals_kind_check CHECK ((kind = ANY (ARRAY['tool_call'::text, 'budget'::text]))),
    CONSTRAINT approvals_kind_has_subject CHECK (
CASE kind
    WHEN 'tool_call'::text THEN ((tool_call_id IS NOT NULL) AND (budget IS NULL))
    ELSE ((tool_call_id IS NULL) AND (budget IS NOT NULL))
END),
    CONSTRAINT approvals_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'approved'::text, 'denied'::text, 'cancelled'::text])))
);


--
-- Name: answer_approval(uuid, text, text, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.answer_approval(p_approval uuid, p_decision text, p_by text, p_reason text DEFAULT NULL::text) RETURNS holdfast.approvals
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_approval holdfast.approvals;
    v_call holdfast.tool_calls;
    v_status text;
BEGIN
    IF p_decision IS NULL OR p_decision NOT IN ('approve', 'deny') THEN
        PERFORM holdfast.raise('HF422', 'decision must be "approve" or "deny"', 'decision');
    END IF;
    IF p_by IS NULL OR btrim(p_by) = '' THEN
        PERFORM holdfast.raise('HF422', 'by must name who decides', 'by');
    END IF;
    SELECT * INTO v_approval FROM holdfast.approvals WHERE id = p_approval;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('approval %s not found', p_approval));
    END IF;
    PERFORM holdfast.lock_agent(v_approval.agent_id);
    IF v_approval.kind = 'tool_call' THEN
        SELECT * INTO v_call FROM holdfast.tool_calls WHERE id = v_approval.tool_call_id FOR UPDATE;
    END IF;
    SELECT * INTO v_approval FROM holdfast.approvals WHERE id = p_approval FOR UPDATE;
    v_status := CASE p_decision WHEN 'approve' THEN 'approved' ELSE 'denied' END;
    IF v_approval.status <> 'pending' THEN
        IF v_approval.status = v_status AND v_approval.decided_by = p_by THEN
            RETURN v_approval;
        END IF;
        PERFORM holdfast.raise('HF409', format('approval %s is already %s', p_approval, v_approval.status));
    END IF;
    UPDATE holdfast.approvals
       SET status = v_status, decided_by = p_by, reason = p_reason, decided_at = holdfast.now()
     WHERE id = p_approval RETURNING * INTO v_approval;
    PERFORM holdfast.append_event(v_approval.agent_id, 'approval.answered', jsonb_build_object(
        'approval_id', p_approval, 'kind', v_approval.kind, 'tool_call_id', v_approval.tool_call_id,
        'decision', p_decision, 'by', p_by, 'reason', p_reason));
    IF v_approval.kind = 'budget' THEN
        PERFORM holdfast.answer_budget_approval(v_approval);
    ELSIF v_status = 'denied' THEN
        PERFORM holdfast.complete_waiting_call(v_call,
            to_jsonb(format('The user denied this tool call.%s',
                            coalesce(' Reason: ' || p_reason, ''))),
            true, NULL, NULL);
    ELSE
        UPDATE holdfast.tool_calls
           SET status = CASE WHEN kind IN ('custom', 'question', 'command') THEN 'waiting' ELSE 'pending' END
         WHERE id = v_call.id;
        PERFORM holdfast.open_tool_wait(v_call.id);
        IF (SELECT state FROM holdfast.agents WHERE id = v_call.agent_id) <> 'running' THEN
            PERFORM holdfast.settle_agent(v_call.agent_id);
        END IF;
    END IF;
    RETURN v_approval;
END
$$;


--
-- Name: answer_budget_approval(holdfast.approvals); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.answer_budget_approval(p_approval holdfast.approvals) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_agent holdfast.agents;
    v_name text := p_approval.budget ->> 'budget';
BEGIN
    SELECT * INTO v_agent FROM holdfast.agents WHERE id = p_approval.agent_id;
    IF p_approval.status = 'approved' THEN
        UPDATE holdfast.agents
           SET budget_grants = budget_grants || jsonb_build_object(v_name, jsonb_build_object(
                   'grants', holdfast.budget_grants_in_force(v_agent, v_name) + 1,
                   'turn_seq', v_agent.turn_seq))
         WHERE id = v_agent.id;
        PERFORM holdfast.settle_agent(v_agent.id);
    ELSE
        PERFORM holdfast.end_turn_budget_exceeded(v_agent.id, p_approval.budget,
            ARRAY(SELECT i.id FROM holdfast.turn_inputs(v_agent.id) i));
    END IF;
END
$$;


--
-- Name: commands; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.commands (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    tool_call_id uuid NOT NULL,
    agent_id uuid NOT NULL,
    machine_id uuid NOT NULL,
    command text NOT NULL,
    timeout_secs integer NOT NULL,
    state text DEFAULT 'queued'::text NOT NULL,
    reason text,
    queued_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    accepted_at timestamp with time zone,
    last_known_state jsonb,
    result_state text,
    exit_code integer,
    signal integer,
    timed_out boolean,
    stdout text,
    stderr text,
    stdout_truncated boolean,
    stderr_truncated boolean,
    result_at timestamp with time zone,
    resolved_at timestamp with time zone,
    trace_parent text,
    trace_state text,
    workspace text DEFAULT 'machine'::text NOT NULL,
    limit_reached text,
    live_output_bytes integer DEFAULT 0 NOT NULL,
    live_output_at timestamp with time zone,
    CONSTRAINT commands_accepted_iff_handed_out CHECK (((state = 'cancelled'::text) OR ((state = ANY (ARRAY['queued'::text, 'failed'::text])) = (accepted_at IS NULL)))),
    CONSTRAINT commands_command_check CHECK ((command <> ''::text)),
    CONSTRAINT commands_finished_has_result CHECK (((state <> 'finished'::text) OR (result_state = 'finished'::text))),
    CONSTRAINT commands_limit_has_result CHECK (((limit_reached IS NULL) OR (result_state = 'finished'::text))),
    CONSTRAINT commands_limit_reached_check CHECK ((limit_reached = ANY (ARRAY['cpu_time'::text, 'memory'::text, 'processes'::text]))),
    CONSTRAINT commands_live_output_bytes_check CHECK ((live_output_bytes >= 0)),
    CONSTRAINT commands_resolved_iff_done CHECK (((state = ANY (ARRAY['queued'::text, 'accepted'::text])) = (resolved_at IS NULL))),
    CONSTRAINT commands_result_is_whole CHECK ((((result_state IS NULL) = (result_at IS NULL)) AND ((result_state IS NULL) = (timed_out IS NULL)) AND ((result_state IS NULL) = (stdout_truncated IS NULL)) AND ((result_state IS NULL) = (stderr_truncated IS NULL)))),
    CONSTRAINT commands_result_state_check CHECK ((result_state = ANY (ARRAY['finished'::text, 'unknown'::text]))),
    CONSTRAINT commands_result_state_matches CHECK (((state <> ALL (ARRAY['finished'::text, 'unknown'::text])) OR (result_state IS NULL) OR (result_state = state))),
    CONSTRAINT commands_state_check CHECK ((state = ANY (ARRAY['queued'::text, 'accepted'::text, 'finished'::text, 'unknown'::text, 'failed'::text, 'unreachable'::text, 'cancelled'::text]))),
    CONSTRAINT commands_timeout_secs_check CHECK (((timeout_secs >= 1) AND (timeout_secs <= 86400))),
    CONSTRAINT commands_unreachable_has_last_known CHECK (((state <> 'unreachable'::text) OR (last_known_state IS NOT NULL))),
    CONSTRAINT commands_workspace_check CHECK ((workspace = ANY (ARRAY['machine'::text, 'agent'::text])))
);


--
-- Name: answer_command_call(holdfast.commands, jsonb, boolean, text, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.answer_command_call(p_command holdfast.commands, p_output jsonb, p_is_error boolean, p_event text, p_event_data jsonb) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: questions; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.questions (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    agent_id uuid NOT NULL,
    tool_call_id uuid NOT NULL,
    question text NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    answer text,
    answered_by text,
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    answered_at timestamp with time zone,
    CONSTRAINT questions_answered_has_answer CHECK (((status = 'answered'::text) = ((answer IS NOT NULL) AND (answered_by IS NOT NULL) AND (answered_at IS NOT NULL)))),
    CONSTRAINT questions_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'answered'::text, 'cancelled'::text])))
);


--
-- Name: answer_question(uuid, text, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.answer_question(p_question uuid, p_answer text, p_by text) RETURNS holdfast.questions
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_question holdfast.questions;
    v_call holdfast.tool_calls;
BEGIN
    IF p_answer IS NULL THEN
        PERFORM holdfast.raise('HF422', 'answer must be a string', 'answer');
    END IF;
    IF p_by IS NULL OR btrim(p_by) = '' THEN
        PERFORM holdfast.raise('HF422', 'by must name who answers', 'by');
    END IF;
    SELECT * INTO v_question FROM holdfast.questions WHERE id = p_question;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('question %s not found', p_question));
    END IF;
    PERFORM holdfast.lock_agent(v_question.agent_id);
    SELECT * INTO v_call FROM holdfast.tool_calls WHERE id = v_question.tool_call_id FOR UPDATE;
    SELECT * INTO v_question FROM holdfast.questions WHERE id = p_question FOR UPDATE;
    IF v_question.status <> 'pending' THEN
        IF v_question.status = 'answered' AND v_question.answer = p_answer AND v_question.answered_by = p_by THEN
            RETURN v_question;
        END IF;
        PERFORM holdfast.raise('HF409', format('question %s is already %s', p_question, v_question.status));
    END IF;
    UPDATE holdfast.questions
       SET status = 'answered', answer = p_answer, answered_by = p_by, answered_at = holdfast.now()
     WHERE id = p_question RETURNING * INTO v_question;
    PERFORM holdfast.complete_waiting_call(v_call, to_jsonb(p_answer), false, 'question.answered',
        jsonb_build_object('question_id', p_question, 'tool_call_id', v_call.id,
                           'answer', p_answer, 'by', p_by));
    RETURN v_question;
END
$$;


--
-- Name: answer_replay_calls(uuid, bigint); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.answer_replay_calls(p_agent uuid, p_epoch bigint) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_agent holdfast.agents;
    v_replay holdfast.replays;
    v_call record;
    v_recorded jsonb;
    v_source_turn bigint;
    v_count integer := 0;
BEGIN
    v_agent := holdfast.lock_leased_agent(p_agent, p_epoch);
    SELECT * INTO v_replay FROM holdfast.replays WHERE id = v_agent.replay_id;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('agent %s is not a replay''s', p_agent));
    END IF;
    FOR v_call IN
        SELECT c.* FROM (
            SELECT t.id, t.name, t.input, t.status, s.turn_seq,
                   (row_number() OVER (PARTITION BY s.turn_seq ORDER BY s.step_seq, t.position) - 1)::integer AS turn_position
              FROM holdfast.tool_calls t JOIN holdfast.steps s ON s.id = t.step_id
             WHERE t.agent_id = p_agent AND s.agent_id = p_agent AND s.turn_seq = v_agent.turn_seq) c
         WHERE c.status = 'pending'
         ORDER BY c.turn_position
    LOOP
        v_source_turn := v_replay.source_turns[v_call.turn_seq];
        v_recorded := holdfast.turn_tool_calls(v_replay.source_agent_id, v_source_turn) -> v_call.turn_position;
        IF v_recorded IS NOT NULL AND v_recorded ->> 'name' = v_call.name AND v_recorded -> 'input' = v_call.input
           AND v_recorded ->> 'status' = 'completed' THEN
            PERFORM holdfast.commit_tool_result(p_agent, p_epoch, v_call.id, v_recorded -> 'output',
                                                (v_recorded ->> 'is_error')::boolean);
        ELSE
            PERFORM holdfast.commit_tool_result(p_agent, p_epoch, v_call.id,
                                                holdfast.not_in_recording_output(v_recorded), true);
            PERFORM holdfast.append_event(p_agent, 'replay.diverged', jsonb_build_object(
                'replay_id', v_replay.id, 'turn', v_call.turn_seq, 'source_turn', v_source_turn,
                'position', v_call.turn_position, 'tool_call_id', v_call.id, 'name', v_call.name,
                'input', v_call.input,
                'recorded', CASE WHEN v_recorded IS NULL THEN NULL
                                 ELSE jsonb_build_object('name', v_recorded -> 'name', 'input', v_recorded -> 'input') END));
        END IF;
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$$;


--
-- Name: api_key_active(uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.api_key_active(p_key_id uuid) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT EXISTS (SELECT 1 FROM holdfast.api_keys k
                    WHERE k.id = p_key_id AND k.revoked_at IS NULL)
$$;


--
-- Name: api_key_hash(text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.api_key_hash(p_key text) RETURNS bytea
    LANGUAGE sql STABLE STRICT
    AS $$
    SELECT sha256(convert_to(p_key, 'UTF8'))
$$;


--
-- Name: append_event(uuid, text, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.append_event(p_agent uuid, p_type text, p_data jsonb) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: inputs; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.inputs (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    project_id uuid NOT NULL,
    agent_id uuid NOT NULL,
    content jsonb NOT NULL,
    idempotency_key text,
    consumed_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    trace_parent text,
    trace_state text,
    mode text DEFAULT 'steer'::text NOT NULL,
    admitted_at timestamp with time zone DEFAULT holdfast.now(),
    removed_at timestamp with time zone,
    content_pruned_at timestamp with time zone,
    queue_position integer,
    CONSTRAINT inputs_admitted_unless_queued CHECK (((mode = 'queue'::text) OR (admitted_at IS NOT NULL))),
    CONSTRAINT inputs_idempotency_key_check CHECK (((length(idempotency_key) >= 1) AND (length(idempotency_key) <= 255))),
    CONSTRAINT inputs_mode_check CHECK ((mode = ANY (ARRAY['steer'::text, 'queue'::text, 'interrupt'::text]))),
    CONSTRAINT inputs_removed_not_admitted CHECK (((removed_at IS NULL) OR ((admitted_at IS NULL) AND (consumed_at IS NULL)))),
    CONSTRAINT inputs_trace_parent_check CHECK ((trace_parent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'::text)),
    CONSTRAINT inputs_trace_state_check CHECK ((length(trace_state) <= 512)),
    CONSTRAINT inputs_trace_state_needs_parent CHECK (((trace_state IS NULL) OR (trace_parent IS NOT NULL)))
);


--
-- Name: append_input_message(holdfast.inputs, uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.append_input_message(p_input holdfast.inputs, p_step uuid) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE holdfast.agents SET last_message_seq = last_message_seq + 1 WHERE id = p_input.agent_id;
    INSERT INTO holdfast.messages (agent_id, seq, role, content, step_id, input_id)
    SELECT p_input.agent_id, a.last_message_seq, 'user',
           CASE WHEN jsonb_typeof(p_input.content) = 'string'
                THEN jsonb_build_array(jsonb_build_object('type', 'text', 'text', p_input.content #>> '{}'))
                ELSE p_input.content END,
           p_step, p_input.id
      FROM holdfast.agents a WHERE a.id = p_input.agent_id;
    UPDATE holdfast.inputs SET consumed_at = holdfast.now() WHERE id = p_input.id;
END
$$;


--
-- Name: apply_model_step(uuid, bigint, uuid[], jsonb, jsonb, jsonb, text, integer, interval); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.apply_model_step(p_agent uuid, p_epoch bigint, p_input_ids uuid[], p_message jsonb, p_tool_calls jsonb, p_usage jsonb, p_stop_reason text, p_config_version integer, p_lease_ttl interval, OUT step_id uuid, OUT lease_kept boolean) RETURNS record
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_agent holdfast.agents;
    v_tool_calls jsonb := coalesce(p_tool_calls, '[]');
    v_n_calls integer;
    v_call jsonb;
    v_require text[] := '{}';
    v_statuses text[] := '{}';
    v_status text;
    v_opens_waits boolean := false;
    v_limit text;
    v_limit_value integer;
    v_input_ids uuid[] := '{}';
    v_input_contents jsonb[] := '{}';
    v_n_inputs integer := 0;
    v_turn_open boolean;
    v_new_turn boolean := false;
    v_step_id uuid;
    v_step_seq bigint;
    v_message_seq bigint;
    v_event_seq bigint;
    v_calls jsonb := '[]';
    v_types text[];
    v_data jsonb[];
    -- Anthropic paused a long turn (server tools): it goes on with another
    -- model call that sends this response back as the last message.
    v_paused boolean := jsonb_array_length(coalesce(p_tool_calls, '[]')) = 0
                        AND p_stop_reason IS NOT DISTINCT FROM 'pause_turn';
    v_provider text;
    v_model text;
    v_usage holdfast.token_usage;
    v_turn_usage holdfast.token_usage;
    v_config_version integer;
    v_model_config jsonb;
BEGIN
    SELECT * INTO STRICT v_agent FROM holdfast.agents WHERE id = p_agent;

    -- What the response used (the config version its request was built
    -- from, which an "apply": "now" change during the call has since
    -- replaced), priced now, and the turn's sum with it.
    v_config_version := coalesce(p_config_version, v_agent.config_version);
    v_model_config := v_agent.config -> 'model';
    IF v_config_version <> v_agent.config_version THEN
        SELECT v.config -> 'model' INTO v_model_config FROM holdfast.agent_config_versions v
         WHERE v.agent_id = p_agent AND v.version = v_config_version;
    END IF;
    v_provider := v_model_config ->> 'provider';
    v_model := v_model_config ->> 'name';
    v_usage := holdfast.add_server_tool_cost(
        holdfast.price_usage(holdfast.usage_from_json(p_usage), v_provider, v_model), v_provider);
    v_turn_usage := holdfast.add_usage(v_agent.turn_usage, v_usage);

    -- Decide the calls' statuses before writing anything.
    v_n_calls := jsonb_array_length(v_tool_calls);
    IF v_n_calls > 0 THEN
        v_require := ARRAY(SELECT jsonb_array_elements_text(coalesce(v_agent.config #> '{approvals,require_for}', '[]')));
    END IF;
    FOR v_pos IN 0 .. v_n_calls - 1 LOOP
        v_call := v_tool_calls -> v_pos;
        v_status := CASE
            -- A replay's calls are answered from the recording, never
            -- waited on (answer_replay_calls, time_travel.sql).
            WHEN v_agent.replay_id IS NOT NULL THEN 'pending'
            WHEN v_call ->> 'name' = ANY (v_require) THEN 'awaiting_approval'
            WHEN v_call ->> 'kind' IN ('custom', 'question', 'command') THEN 'waiting'
            ELSE 'pending' END;
        v_statuses := array_append(v_statuses, v_status);
        IF v_status = 'awaiting_approval'
           OR (v_status = 'waiting' AND v_call ->> 'kind' IN ('question', 'command')) THEN
            v_opens_waits := true;
        END IF;
    END LOOP;

    -- The limits: a response whose calls (or pause) would need a model call
    -- past the step limit, or with too many calls, keeps its calls only as
    -- cancelled.
    IF v_n_calls > 0 OR v_paused THEN
        IF v_n_calls > holdfast.agent_limit(v_agent.config, 'max_tool_calls_per_response') THEN
            v_limit := 'max_tool_calls_per_response';
        ELSIF v_agent.turn_model_steps + 1 >= holdfast.agent_limit(v_agent.config, 'max_model_steps_per_turn') THEN
            v_limit := 'max_model_steps_per_turn';
        END IF;
        IF v_limit IS NOT NULL THEN
            v_limit_value := holdfast.agent_limit(v_agent.config, v_limit);
            v_statuses := array_fill('cancelled'::text, ARRAY[v_n_calls]);
            v_opens_waits := false;
        END IF;
    END IF;

    -- The inputs the call saw (still unconsumed), in arrival order.
    IF coalesce(cardinality(p_input_ids), 0) > 0 THEN
        SELECT coalesce(array_agg(i.id ORDER BY i.created_at, i.id), '{}'),
               coalesce(array_agg(i.content ORDER BY i.created_at, i.id), '{}')
          INTO v_input_ids, v_input_contents
          FROM holdfast.inputs i
         WHERE i.agent_id = p_agent AND i.id = ANY (p_input_ids) AND i.consumed_at IS NULL;
        v_n_inputs := cardinality(v_input_ids);
    END IF;

    -- No tool calls: the model has answered; the turn is complete (unless
    -- the provider paused it).
    v_turn_open := CASE WHEN v_n_calls = 0 AND NOT v_paused THEN false ELSE v_agent.turn_open END;
    v_types := ARRAY['model.response'];
    IF v_opens_waits OR v_limit IS NOT NULL THEN
        -- Calls that open waits (their events, appended one by one below,
        -- open them) or that a limit cancels: the step's own counters now,
        -- and the agent settles once the waits are open (settle_agent) or
        -- the turn has ended (end_turn_with_error).
        UPDATE holdfast.agents
           SET last_step_seq = last_step_seq + 1,
               last_message_seq = last_message_seq + v_n_inputs + 1,
               last_event_seq = last_event_seq + 1, last_event_at = holdfast.now(),
               model_attempts = 0,
               turn_model_steps = turn_model_steps + 1,
               turn_usage = v_turn_usage,
               usage = holdfast.add_usage(usage, v_usage)
         WHERE id = p_agent
        RETURNING last_step_seq, last_message_seq, last_event_seq
             INTO v_step_seq, v_message_seq, v_event_seq;
    ELSE
        -- The step ends here: settle_agent decides the state (with the
        -- calls and inputs this step is about to write), releases the agent
        -- and reserves the step's, messages' and events' seqs (turn.started
        -- added when the commit opens the next turn, for the inputs that came
        -- during the call), all in its one agent UPDATE; the events follow
        -- once the rows they name exist.
        v_types := v_types || array_fill('tool_call.created'::text, ARRAY[v_n_calls]);
        IF v_n_calls = 0 AND NOT v_paused THEN
            v_types := array_append(v_types, 'turn.completed');
        END IF;
        SELECT s.types, s.last_step_seq, s.last_message_seq, s.last_event_seq, s.state = 'running'
          INTO v_types, v_step_seq, v_message_seq, v_event_seq, lease_kept
          FROM holdfast.settle_agent(p_agent, v_types, NULL, NULL,
                   p_turn_open => v_turn_open,
                   p_new_runnable => 'pending' = ANY (v_statuses),
                   p_new_waiting => 'waiting' = ANY (v_statuses) OR 'awaiting_approval' = ANY (v_statuses),
                   p_consumed => v_input_ids,
                   p_new_steps => 1, p_new_messages => v_n_inputs + 1,
                   p_model_step => true, p_usage => v_usage, p_lease_ttl => p_lease_ttl) s;
        v_new_turn := v_types[cardinality(v_types)] = 'turn.started';
    END IF;

    INSERT INTO holdfast.steps (agent_id, step_seq, kind, epoch, turn_seq, provider, model, usage)
    VALUES (p_agent, v_step_seq, 'model', p_epoch, v_agent.turn_seq, v_provider, v_model, v_usage)
    RETURNING id INTO v_step_id;

    -- The inputs become user messages, then the assistant's message.
    INSERT INTO holdfast.messages (agent_id, seq, role, content, step_id, input_id)
    SELECT p_agent, v_message_seq - v_n_inputs - 1 + m.ord, m.role, m.content, v_step_id, m.input_id
      FROM (SELECT i.ord, 'user' AS role,
                   CASE WHEN jsonb_typeof(i.content) = 'string'
                        THEN jsonb_build_array(jsonb_build_object('type', 'text', 'text', i.content #>> '{}'))
                        ELSE i.content END AS content,
                   i.id AS input_id
              FROM unnest(v_input_ids, v_input_contents) WITH ORDINALITY AS i (id, content, ord)
            UNION ALL
            SELECT v_n_inputs + 1, 'assistant', p_message, NULL) m
     ORDER BY m.ord;
    IF v_n_inputs > 0 THEN
        -- consumed_at IS NULL (true of v_input_ids) lets the plan read the
        -- agent's pending inputs (inputs_pending_idx), whatever the
        -- table's statistics were when it was made.
        UPDATE holdfast.inputs SET consumed_at = holdfast.now()
         WHERE agent_id = p_agent AND id = ANY (v_input_ids) AND consumed_at IS NULL;
    END IF;

    IF v_n_calls > 0 THEN
        WITH inserted AS (
            INSERT INTO holdfast.tool_calls (agent_id, step_id, position, provider_id, name, input, kind, status)
            SELECT p_agent, v_step_id, (c.ord - 1)::integer, c.value ->> 'provider_id', c.value ->> 'name',
                   coalesce(c.value -> 'input', '{}'), c.value ->> 'kind', v_statuses[c.ord]
              FROM jsonb_array_elements(v_tool_calls) WITH ORDINALITY AS c (value, ord)
             ORDER BY c.ord
            RETURNING id, position, provider_id, name, input, kind, status
        )
        SELECT jsonb_agg(jsonb_build_object('id', t.id, 'provider_id', t.provider_id, 'name', t.name,
                                            'input', t.input, 'kind', t.kind, 'status', t.status)
                         ORDER BY t.position)
          INTO v_calls
          FROM inserted t;
    END IF;

    v_data := ARRAY[jsonb_build_object(
        'step_id', v_step_id, 'message', p_message, 'tool_calls', v_calls,
        'usage', coalesce(p_usage, '{}'), 'stop_reason', p_stop_reason,
        'config_version', v_config_version)];
    IF NOT (v_opens_waits OR v_limit IS NOT NULL) THEN
        v_data := v_data || ARRAY(SELECT c.value FROM jsonb_array_elements(v_calls) WITH ORDINALITY AS c (value, ord)
                                   ORDER BY c.ord);
        IF v_n_calls = 0 AND NOT v_paused THEN
            v_data := array_append(v_data, jsonb_build_object('step_id', v_step_id, 'stop_reason', p_stop_reason,
                                                              'usage', holdfast.usage_json(v_turn_usage)));
        END IF;
        IF v_new_turn THEN
            -- turn.started: the version settle_agent opened the turn on.
            v_data := array_append(v_data, jsonb_build_object('config_version',
                (SELECT a.config_version FROM holdfast.agents a WHERE a.id = p_agent)));
        END IF;
    END IF;
    PERFORM holdfast.insert_reserved_events(p_agent, v_event_seq, v_types, v_data);

    IF v_opens_waits OR v_limit IS NOT NULL THEN
        FOR v_call IN SELECT c.value FROM jsonb_array_elements(v_calls) WITH ORDINALITY AS c (value, ord)
                       ORDER BY c.ord LOOP
            PERFORM holdfast.append_event(p_agent, 'tool_call.created', v_call);
        END LOOP;
        IF v_limit IS NULL THEN
            PERFORM holdfast.settle_agent(p_agent);
        ELSE
            PERFORM holdfast.end_turn_with_error(p_agent, 'limit_exceeded',
                CASE
                    WHEN v_limit = 'max_tool_calls_per_response' THEN format(
                        'the response asked for %s tool calls; this agent may make at most %s per response (limits.%s). None of them ran.',
                        v_n_calls, v_limit_value, v_limit)
                    WHEN v_paused THEN format(
                        'this turn reached %s model steps, the most this agent may take in one turn (limits.%s); the paused response was not continued.',
                        v_limit_value, v_limit)
                    ELSE format(
                        'this turn reached %s model steps, the most this agent may take in one turn (limits.%s); the tool calls of the last response did not run.',
                        v_limit_value, v_limit) END,
                NULL, NULL, jsonb_build_object('limit', v_limit, 'value', v_limit_value));
        END IF;
    END IF;
    step_id := v_step_id;
    lease_kept := coalesce(lease_kept, false);
END
$$;


--
-- Name: archive_agent(uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.archive_agent(p_agent uuid) RETURNS void
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: attachment_quota_problem(holdfast.agents, jsonb, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.attachment_quota_problem(p_agent holdfast.agents, p_blocks jsonb, p_field text, OUT message text, OUT field text) RETURNS record
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_quota holdfast.attachment_quotas;
    v_new bigint;
    v_project bigint;
BEGIN
    SELECT sum(f.size_bytes) INTO v_new FROM holdfast.content_file_sizes(p_blocks) f;
    IF v_new IS NULL THEN
        RETURN;
    END IF;
    SELECT * INTO v_quota FROM holdfast.attachment_quotas;
    v_project := coalesce((SELECT p.bytes FROM holdfast.project_attachment_bytes p
                            WHERE p.project_id = p_agent.project_id), 0);
    IF p_agent.attachment_bytes + v_new <= v_quota.max_agent_bytes
       AND v_project + v_new <= v_quota.max_project_bytes THEN
        RETURN;
    END IF;
    SELECT coalesce(sum(octet_length(n.data)), 0) INTO v_new
      FROM (SELECT DISTINCT ON (sha256(f.data), f.media_type) f.data
              FROM (SELECT holdfast.block_file_data(b.value) AS data, b.value #>> '{source,media_type}' AS media_type
                      FROM jsonb_array_elements(p_blocks) b) f
             WHERE f.data IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM holdfast.attachments a
                                WHERE a.agent_id = p_agent.id AND a.sha256 = sha256(f.data)
                                  AND a.media_type = f.media_type)) n;
    IF p_agent.attachment_bytes + v_new > v_quota.max_agent_bytes THEN
        message := format('attachment_quota_exceeded: the agent''s files would total %s bytes (%s stored, %s new); '
                          'max_attachment_bytes_per_agent is %s', p_agent.attachment_bytes + v_new,
                          p_agent.attachment_bytes, v_new, v_quota.max_agent_bytes);
        field := p_field;
    ELSIF v_project + v_new > v_quota.max_project_bytes THEN
        message := format('attachment_quota_exceeded: the project''s files would total %s bytes (%s stored, %s new); '
                          'max_attachment_bytes_per_project is %s', v_project + v_new, v_project, v_new,
                          v_quota.max_project_bytes);
        field := p_field;
    END IF;
END
$$;


--
-- Name: authenticate_api_key(text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.authenticate_api_key(p_key text) RETURNS TABLE(key_id uuid, project_id uuid)
    LANGUAGE sql STABLE
    AS $$
    SELECT k.id, k.project_id
      FROM holdfast.api_keys k
     WHERE k.key_hash = holdfast.api_key_hash(p_key) AND k.revoked_at IS NULL
$$;


--
-- Name: authenticate_machine(text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.authenticate_machine(p_token text) RETURNS TABLE(machine_id uuid, project_id uuid)
    LANGUAGE sql STABLE
    AS $$
    SELECT m.id, m.project_id FROM holdfast.machines m
     WHERE m.token_hash = holdfast.api_key_hash(p_token) AND m.deleted_at IS NULL
$$;


--
-- Name: base64_decoded_length(text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.base64_decoded_length(p_data text) RETURNS bigint
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT length(p_data)::bigint / 4 * 3
           - CASE WHEN p_data LIKE '%==' THEN 2 WHEN p_data LIKE '%=' THEN 1 ELSE 0 END
$$;


--
-- Name: block_file_data(jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.block_file_data(p_block jsonb) RETURNS bytea
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE WHEN p_block ->> 'type' IN ('image', 'document') AND p_block #>> '{source,type}' = 'base64'
                THEN decode(p_block #>> '{source,data}', 'base64') END
$$;


--
-- Name: budget_exceeded(holdfast.agents); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.budget_exceeded(p_agent holdfast.agents) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    IF (p_agent).config -> 'budget' IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN (
    SELECT jsonb_build_object('budget', b.name, 'limit', b.max * (1 + b.granted), 'value', b.used,
                              'granted', b.granted)
      FROM (VALUES
          (1, 'max_tokens_per_turn',
           ((p_agent).turn_usage).input_tokens + ((p_agent).turn_usage).output_tokens::numeric),
          (2, 'max_cost_usd_per_turn', coalesce(((p_agent).turn_usage).cost_usd, 0)),
          (3, 'max_tokens_per_agent',
           ((p_agent).usage).input_tokens + ((p_agent).usage).output_tokens::numeric),
          (4, 'max_cost_usd_per_agent', coalesce(((p_agent).usage).cost_usd, 0))
      ) AS b0 (ord, name, used)
      CROSS JOIN LATERAL (SELECT b0.name, b0.used,
                                 ((p_agent).config #>> ARRAY['budget', b0.name])::numeric AS max,
                                 holdfast.budget_grants_in_force(p_agent, b0.name) AS granted) b
     WHERE b.max IS NOT NULL AND b.used >= b.max * (1 + b.granted)
     ORDER BY b0.ord
     LIMIT 1);
END
$$;


--
-- Name: budget_grants_in_force(holdfast.agents, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.budget_grants_in_force(p_agent holdfast.agents, p_name text) RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE WHEN p_name LIKE '%per_agent'
                  OR ((p_agent).budget_grants #>> ARRAY[p_name, 'turn_seq'])::bigint = (p_agent).turn_seq
                THEN coalesce(((p_agent).budget_grants #>> ARRAY[p_name, 'grants'])::integer, 0)
                ELSE 0 END
$$;


--
-- Name: cancel_locked_turn(holdfast.agents); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.cancel_locked_turn(p_agent holdfast.agents) RETURNS text
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF p_agent.state IN ('idle', 'archived') THEN
        RETURN NULL;
    END IF;
    IF p_agent.state = 'running' THEN
        UPDATE holdfast.agents SET cancel_requested_at = coalesce(cancel_requested_at, holdfast.now())
         WHERE id = p_agent.id;
        PERFORM pg_notify('holdfast_cancel', p_agent.id::text);
        RETURN 'requested';
    END IF;
    PERFORM holdfast.cancel_turn(p_agent.id);
    RETURN 'cancelled';
END
$$;


--
-- Name: cancel_turn(uuid, integer); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.cancel_turn(p_agent uuid, p_model_attempts integer DEFAULT NULL::integer) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_cancelled jsonb;
    v_cutoff timestamptz;
    v_input holdfast.inputs;
BEGIN
    SELECT coalesce(cancel_requested_at, holdfast.now()) INTO v_cutoff
      FROM holdfast.agents WHERE id = p_agent;
    FOR v_input IN
        SELECT * FROM holdfast.turn_inputs(p_agent) i WHERE i.created_at <= v_cutoff
    LOOP
        PERFORM holdfast.append_input_message(v_input, NULL);
    END LOOP;
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
    UPDATE holdfast.approvals SET status = 'cancelled'
     WHERE agent_id = p_agent AND kind = 'budget' AND status = 'pending';
    UPDATE holdfast.agents SET cancel_requested_at = NULL WHERE id = p_agent AND cancel_requested_at IS NOT NULL;
    RETURN (holdfast.settle_agent(p_agent, ARRAY['turn.cancelled'],
        ARRAY[jsonb_build_object('cancelled_tool_calls', v_cancelled)], NULL,
        p_turn_open => false, p_model_attempts => p_model_attempts)).state;
END
$$;


--
-- Name: check_model_access(uuid, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.check_model_access(p_project uuid, p_model jsonb) RETURNS TABLE(field text, message text)
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_endpoint text := coalesce(p_model ->> 'endpoint', 'default');
    v_row holdfast.model_endpoints;
BEGIN
    IF p_model ? 'base_url' THEN
        IF v_endpoint <> 'default' THEN
            RETURN QUERY SELECT 'model.base_url', format(
                'model.base_url and model.endpoint (%s) exclude each other', v_endpoint);
        ELSIF NOT (SELECT p.allow_custom_model_urls FROM holdfast.projects p WHERE p.id = p_project) THEN
            RETURN QUERY SELECT 'model.base_url',
                'custom model URLs are not allowed for this project; name an endpoint of the operator in model.endpoint'::text;
        END IF;
        RETURN;
    END IF;
    IF v_endpoint = 'default' THEN
        RETURN;
    END IF;
    SELECT * INTO v_row FROM holdfast.model_endpoints e
     WHERE e.name = v_endpoint AND (e.project_id IS NULL OR e.project_id = p_project);
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'model.endpoint', format('no model endpoint named %s is available to this project', v_endpoint);
    ELSIF v_row.kind <> holdfast.provider_vendor(p_model ->> 'provider') THEN
        RETURN QUERY SELECT 'model.endpoint', format(
            'model endpoint %s serves provider %s, not %s', v_endpoint, v_row.kind, p_model ->> 'provider');
    ELSIF v_row.models IS NOT NULL AND NOT (p_model ->> 'name') = ANY (v_row.models) THEN
        RETURN QUERY SELECT 'model.name', format(
            'model %s is not allowed on endpoint %s (allowed: %s)', p_model ->> 'name', v_endpoint,
            array_to_string(v_row.models, ', '));
    END IF;
END
$$;


--
-- Name: check_server_tools(uuid, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.check_server_tools(p_project uuid, p_config jsonb) RETURNS TABLE(field text, message text)
    LANGUAGE sql STABLE
    AS $$
    SELECT format('tools[%s]', t.ord - 1),
           format('server_tools_not_allowed: %s runs on the operator''s provider account and is off until the operator allows it for this project (holdfast projects allow-server-tools NAME)',
                  t.tool ->> 'type')
      FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_config -> 'tools') = 'array'
                                     THEN p_config -> 'tools' ELSE '[]' END) WITH ORDINALITY t (tool, ord)
     WHERE t.tool ->> 'type' IN ('anthropic_web_search', 'anthropic_web_fetch')
       AND NOT coalesce((SELECT p.allow_server_tools FROM holdfast.projects p WHERE p.id = p_project), false)
     ORDER BY t.ord
     LIMIT 1
$$;


--
-- Name: claim_agents(text, integer, interval); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.claim_agents(p_worker text, p_max integer, p_ttl interval) RETURNS TABLE(agent_id uuid, epoch bigint)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
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


--
-- Name: claim_agents_with_context(text, integer, interval); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.claim_agents_with_context(p_worker text, p_max integer, p_ttl interval) RETURNS TABLE(agent_id uuid, epoch bigint, context holdfast.step_context)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_ids uuid[];
    v_epochs bigint[];
BEGIN
    SELECT coalesce(array_agg(c.agent_id), '{}'), coalesce(array_agg(c.epoch), '{}')
      INTO v_ids, v_epochs
      FROM holdfast.claim_agents(p_worker, p_max, p_ttl) c;
    RETURN QUERY
    SELECT u.id, u.epoch, x
      FROM unnest(v_ids, v_epochs) AS u (id, epoch)
      LEFT JOIN LATERAL holdfast.load_step_context(u.id) x ON true;
END
$$;


--
-- Name: claim_commands(uuid, integer, uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.claim_commands(p_machine uuid, p_max integer, p_session uuid DEFAULT NULL::uuid) RETURNS TABLE(command_id uuid, tool_call_id uuid, agent_id uuid, command text, timeout_secs integer, accepted_at timestamp with time zone, trace_parent text, trace_state text, workspace text)
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: claim_due_schedules(integer); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.claim_due_schedules(p_batch integer) RETURNS TABLE(id uuid, cron text, timezone text, every_ms bigint, start_at timestamp with time zone, end_at timestamp with time zone, missed text, next_fire_at timestamp with time zone, created_at timestamp with time zone, now timestamp with time zone)
    LANGUAGE sql
    AS $$
    WITH clock AS MATERIALIZED (SELECT holdfast.now() AS now)
    SELECT s.id, s.cron, s.timezone, (extract(epoch FROM s.every) * 1000)::bigint, s.start_at,
           s.end_at, s.missed, s.next_fire_at, s.created_at, c.now
      FROM holdfast.schedules s CROSS JOIN clock c
     WHERE s.paused_at IS NULL AND s.next_fire_at <= c.now
     ORDER BY s.next_fire_at
     LIMIT p_batch
       FOR UPDATE OF s SKIP LOCKED
$$;


--
-- Name: claim_webhook_deliveries(integer, interval, integer); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.claim_webhook_deliveries(p_max integer, p_lease interval, p_max_per_endpoint integer DEFAULT 16) RETURNS TABLE(delivery_id uuid, attempt integer, endpoint_id uuid, url text, secret text, due_at timestamp with time zone, event_seq bigint, event_id uuid, agent_id uuid, event_type text, event_data jsonb, event_created_at timestamp with time zone, trace_parent text, trace_state text)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_now timestamptz := holdfast.now();
    v_full uuid[];
    v_batch_endpoints uuid[] := '{}';
    v_in_flight bigint;
    v_claimed uuid[] := '{}';
    v_row record;
BEGIN
    IF p_lease IS NULL OR p_lease <= '0'::interval THEN
        PERFORM holdfast.raise('HF422', 'lease must be positive', 'lease');
    END IF;
    IF p_max_per_endpoint IS NULL OR p_max_per_endpoint < 1 THEN
        PERFORM holdfast.raise('HF422', 'max_per_endpoint must be at least 1', 'max_per_endpoint');
    END IF;
    SELECT coalesce(array_agg(f.endpoint_id), '{}') INTO v_full FROM (
        SELECT c.endpoint_id FROM holdfast.webhook_deliveries c
         WHERE c.claimed_until > v_now
         GROUP BY c.endpoint_id HAVING count(*) >= p_max_per_endpoint) f;

    FOR v_row IN
        SELECT d.id, d.endpoint_id, d.next_attempt_at, e.deleted_at IS NOT NULL AS endpoint_deleted
          FROM holdfast.webhook_deliveries d
          JOIN holdfast.webhook_endpoints e ON e.id = d.endpoint_id
         WHERE d.status = 'pending' AND d.next_attempt_at <= v_now
           AND d.endpoint_id <> ALL (v_full)
           AND NOT EXISTS (
               SELECT 1 FROM holdfast.webhook_deliveries p
                WHERE p.endpoint_id = d.endpoint_id AND p.agent_id = d.agent_id
                  AND p.status = 'pending' AND p.event_seq < d.event_seq
                  AND (p.attempts = 0 OR p.claimed_until IS NOT NULL))
         ORDER BY d.next_attempt_at, d.id
         LIMIT greatest(p_max, 0)
           FOR UPDATE OF d SKIP LOCKED
    LOOP
        IF v_row.endpoint_deleted THEN
            UPDATE holdfast.webhook_deliveries
               SET status = 'failed', failed_at = v_now, next_attempt_at = NULL, claimed_until = NULL,
                   last_error = 'endpoint deleted'
             WHERE id = v_row.id;
            CONTINUE;
        END IF;
        SELECT count(*) INTO v_in_flight FROM holdfast.webhook_deliveries c
         WHERE c.endpoint_id = v_row.endpoint_id AND c.claimed_until > v_now;
        IF v_in_flight + coalesce(array_length(array_positions(v_batch_endpoints, v_row.endpoint_id), 1), 0)
           >= p_max_per_endpoint THEN
            CONTINUE;
        END IF;
        v_batch_endpoints := v_batch_endpoints || v_row.endpoint_id;
        v_claimed := v_claimed || v_row.id;
    END LOOP;

    RETURN QUERY
    WITH due AS (
        SELECT d.id, d.next_attempt_at FROM holdfast.webhook_deliveries d WHERE d.id = ANY (v_claimed)
    ), claimed AS (
        UPDATE holdfast.webhook_deliveries d
           SET attempts = d.attempts + 1, claimed_until = v_now + p_lease,
               next_attempt_at = v_now + p_lease, last_attempt_at = v_now
          FROM due
         WHERE d.id = due.id
        RETURNING d.id, d.attempts, d.endpoint_id, d.agent_id, d.event_seq, d.event_created_at,
                  due.next_attempt_at AS due_at, d.trace_parent, d.trace_state
    )
    SELECT c.id, c.attempts, c.endpoint_id, e.url, e.secret, c.due_at,
           ev.seq, ev.id, ev.agent_id, ev.type, ev.data, ev.created_at, c.trace_parent, c.trace_state
      FROM claimed c
      JOIN holdfast.webhook_endpoints e ON e.id = c.endpoint_id
      -- created_at (the partition key) lets the lookup skip the other partitions.
      JOIN holdfast.events ev ON ev.agent_id = c.agent_id AND ev.seq = c.event_seq
                             AND ev.created_at = c.event_created_at
     ORDER BY c.due_at, c.id;
END
$$;


--
-- Name: machines; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.machines (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    project_id uuid NOT NULL,
    name text NOT NULL,
    token_hash bytea NOT NULL,
    token_prefix text NOT NULL,
    wake_url text,
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    last_heartbeat_at timestamp with time zone,
    reported_commands jsonb DEFAULT '[]'::jsonb NOT NULL,
    daemon_session uuid,
    daemon_started_at timestamp with time zone,
    daemon_known_commands uuid[] DEFAULT '{}'::uuid[] NOT NULL,
    wake_requested_at timestamp with time zone,
    wake_until timestamp with time zone,
    deleted_at timestamp with time zone,
    daemon_sandboxed boolean,
    daemon_single_session boolean DEFAULT false NOT NULL,
    CONSTRAINT machines_name_check CHECK ((name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$'::text)),
    CONSTRAINT machines_reported_commands_check CHECK ((jsonb_typeof(reported_commands) = 'array'::text)),
    CONSTRAINT machines_session_has_start CHECK (((daemon_session IS NULL) = (daemon_started_at IS NULL))),
    CONSTRAINT machines_wake_was_requested CHECK (((wake_until IS NULL) OR (wake_requested_at IS NOT NULL)))
);


--
-- Name: command_last_known_state(holdfast.commands, holdfast.machines); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.command_last_known_state(p_command holdfast.commands, p_machine holdfast.machines) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
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


--
-- Name: command_outcome_output(text, text, text, boolean, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.command_outcome_output(p_state text, p_reason text, p_message text, p_retryable boolean, p_extra jsonb DEFAULT '{}'::jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT jsonb_build_object('state', p_state, 'reason', p_reason, 'message', p_message,
                              'retryable', p_retryable) || coalesce(p_extra, '{}')
$$;


--
-- Name: command_output(uuid, uuid, text, text, integer, interval); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.command_output(p_machine uuid, p_command uuid, p_stdout text, p_stderr text, p_max_bytes integer, p_min_interval interval) RETURNS text
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: command_result_output(holdfast.commands); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.command_result_output(p_command holdfast.commands) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    AS $$
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


--
-- Name: commands_to_stop(uuid, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.commands_to_stop(p_machine uuid, p_commands jsonb) RETURNS uuid[]
    LANGUAGE sql STABLE
    AS $$
    SELECT coalesce(array_agg(c.id ORDER BY c.id), '{}')
      FROM holdfast.commands c
     WHERE c.machine_id = p_machine
       AND c.id IN (SELECT (e.value ->> 'id')::uuid
                      FROM jsonb_array_elements(coalesce(p_commands, '[]')) e
                     WHERE e.value ->> 'state' IN ('accepted', 'running'))
       AND c.state = 'cancelled' AND c.accepted_at IS NOT NULL AND c.result_state IS NULL
$$;


--
-- Name: commit_compaction(uuid, bigint, text, bigint, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.commit_compaction(p_agent uuid, p_epoch bigint, p_summary text, p_keep_from_seq bigint, p_usage jsonb) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_agent holdfast.agents;
    v_replaced bigint;
    v_provider text;
    v_model text;
    v_usage holdfast.token_usage;
    v_step_seq bigint;
BEGIN
    v_agent := holdfast.lock_leased_agent(p_agent, p_epoch);
    IF p_summary IS NULL OR btrim(p_summary) = '' THEN
        PERFORM holdfast.raise('HF422', 'summary must not be empty', 'summary');
    END IF;
    IF p_keep_from_seq <= v_agent.context_start_seq OR p_keep_from_seq > v_agent.last_message_seq + 1 THEN
        PERFORM holdfast.raise('HF422', format('keep_from_seq %s must be in (%s, %s]',
            p_keep_from_seq, v_agent.context_start_seq, v_agent.last_message_seq + 1), 'keep_from_seq');
    END IF;
    SELECT count(*) INTO v_replaced FROM holdfast.messages
     WHERE agent_id = p_agent AND seq >= v_agent.context_start_seq AND seq < p_keep_from_seq;
    v_provider := v_agent.config #>> '{model,provider}';
    v_model := v_agent.config #>> '{model,name}';
    v_usage := holdfast.add_server_tool_cost(
        holdfast.price_usage(holdfast.usage_from_json(p_usage), v_provider, v_model), v_provider);
    UPDATE holdfast.agents
       SET context_summary = p_summary, context_start_seq = p_keep_from_seq, model_attempts = 0,
           last_step_seq = last_step_seq + 1,
           turn_usage = holdfast.add_usage(turn_usage, v_usage),
           usage = holdfast.add_usage(usage, v_usage)
     WHERE id = p_agent
    RETURNING last_step_seq INTO v_step_seq;
    INSERT INTO holdfast.steps (agent_id, step_seq, kind, epoch, turn_seq, provider, model, usage)
    VALUES (p_agent, v_step_seq, 'compaction', p_epoch, v_agent.turn_seq, v_provider, v_model, v_usage);
    PERFORM holdfast.append_event(p_agent, 'context.compacted', jsonb_build_object(
        'summary', p_summary, 'replaced_messages', v_replaced,
        'keep_from_seq', p_keep_from_seq, 'usage', coalesce(p_usage, '{}')));
    PERFORM holdfast.settle_agent(p_agent);
END
$$;


--
-- Name: commit_model_interrupt(uuid, bigint, uuid[]); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.commit_model_interrupt(p_agent uuid, p_epoch bigint, p_input_ids uuid[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    PERFORM holdfast.settle_agent(p_agent, ARRAY['model.interrupted'],
        ARRAY[jsonb_build_object('input_ids', to_jsonb(coalesce(p_input_ids, '{}')))], NULL);
END
$$;


--
-- Name: commit_model_retry(uuid, bigint, jsonb, interval, integer, uuid[]); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.commit_model_retry(p_agent uuid, p_epoch bigint, p_error jsonb, p_delay interval, p_max_retries integer, p_input_ids uuid[]) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_attempt integer;
BEGIN
    v_attempt := (holdfast.lock_leased_agent(p_agent, p_epoch)).model_attempts + 1;
    IF v_attempt > p_max_retries THEN
        PERFORM holdfast.end_turn_with_error(p_agent, 'retries_exhausted',
            format('gave up after %s retries; last error: %s', p_max_retries, p_error ->> 'message'),
            p_input_ids, p_error);
        RETURN 'exhausted';
    END IF;
    PERFORM holdfast.settle_agent(p_agent, ARRAY['model.retry'],
        ARRAY[jsonb_build_object(
            'attempt', v_attempt,
            'delay_ms', floor(extract(epoch FROM p_delay) * 1000)::bigint,
            'error', p_error)],
        holdfast.now() + p_delay, p_model_attempts => v_attempt);
    RETURN 'retrying';
END
$$;


--
-- Name: commit_model_step(uuid, bigint, uuid[], jsonb, jsonb, jsonb, text, integer); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.commit_model_step(p_agent uuid, p_epoch bigint, p_input_ids uuid[], p_message jsonb, p_tool_calls jsonb, p_usage jsonb, p_stop_reason text, p_config_version integer DEFAULT NULL::integer) RETURNS uuid
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_result record;
BEGIN
    SELECT r.outcome, r.step_id, r.message, r.field INTO v_result
      FROM holdfast.commit_model_step_batch(ARRAY[ROW(p_agent, p_epoch, p_input_ids, p_message,
               p_tool_calls, p_usage, p_stop_reason, p_config_version)::holdfast.model_step]) r;
    IF v_result.outcome = 'committed' THEN
        RETURN v_result.step_id;
    END IF;
    PERFORM holdfast.raise(CASE v_result.outcome WHEN 'lease_lost' THEN 'HF001'
                                                 WHEN 'not_found' THEN 'HF404'
                                                 ELSE 'HF422' END,
                           v_result.message, v_result.field);
    RETURN NULL;
END
$$;


--
-- Name: commit_model_step_batch(holdfast.model_step[], interval); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.commit_model_step_batch(p_steps holdfast.model_step[], p_lease_ttl interval DEFAULT NULL::interval) RETURNS TABLE(agent_id uuid, outcome text, step_id uuid, message text, field text, lease_kept boolean, next_context holdfast.step_context)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_row record;
BEGIN
    FOR v_row IN
        WITH batch AS (
            SELECT s.agent_id AS id, s.epoch, s.input_ids, s.message AS content, s.tool_calls,
                   s.usage, s.stop_reason, s.config_version, count(*) OVER (PARTITION BY s.agent_id) AS copies
              FROM unnest(p_steps) AS s
        ), locked AS MATERIALIZED (
            SELECT a.id, a.state, a.lease_epoch, a.lease_expires_at
              FROM holdfast.lock_agents(ARRAY(SELECT b.id FROM batch b)) a
        )
        -- holdfast.now() is read per row, after the locks were granted
        -- (as lock_leased_agent reads it): a lease that ran out while the
        -- batch waited for a lock is lost.
        SELECT b.*, l.id IS NOT NULL AS found,
               coalesce(l.state = 'running' AND l.lease_epoch = b.epoch
                        AND l.lease_expires_at > holdfast.now(), false) AS leased
          FROM batch b LEFT JOIN locked l ON l.id = b.id
         ORDER BY b.id
    LOOP
        agent_id := v_row.id;
        step_id := NULL;
        message := NULL;
        field := NULL;
        lease_kept := false;
        next_context := NULL;
        IF NOT v_row.found THEN
            outcome := 'not_found';
            message := format('agent %s not found', v_row.id);
        ELSIF NOT v_row.leased THEN
            outcome := 'lease_lost';
            message := format('lease lost on agent %s at epoch %s', v_row.id, v_row.epoch);
        ELSIF v_row.copies > 1 THEN
            outcome := 'invalid';
            message := 'the batch holds more than one step for this agent';
            field := 'agent_id';
        ELSE
            SELECT c.message, c.field INTO message, field
              FROM holdfast.model_step_refusal(v_row.content, v_row.tool_calls) c;
            IF message IS NOT NULL THEN
                outcome := 'invalid';
            ELSE
                outcome := 'committed';
                SELECT w.step_id, w.lease_kept INTO step_id, lease_kept
                  FROM holdfast.apply_model_step(v_row.id, v_row.epoch, v_row.input_ids,
                           v_row.content, v_row.tool_calls, v_row.usage, v_row.stop_reason,
                           v_row.config_version, p_lease_ttl) w;
                IF lease_kept THEN
                    SELECT * INTO next_context FROM holdfast.load_step_context(v_row.id);
                END IF;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;


--
-- Name: commit_tool_result(uuid, bigint, uuid, jsonb, boolean); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.commit_tool_result(p_agent uuid, p_epoch bigint, p_tool_call uuid, p_output jsonb, p_is_error boolean) RETURNS uuid
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN (holdfast.save_tool_result(p_agent, p_epoch, p_tool_call, p_output, p_is_error,
                                      false, NULL)).step_id;
END
$$;


--
-- Name: complete_cancel(uuid, bigint); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.complete_cancel(p_agent uuid, p_epoch bigint) RETURNS text
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    PERFORM holdfast.interrupt_running_calls(p_agent);
    RETURN holdfast.cancel_turn(p_agent, p_model_attempts => 0);
END
$$;


--
-- Name: tool_calls; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.tool_calls (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    agent_id uuid NOT NULL,
    step_id uuid NOT NULL,
    "position" integer NOT NULL,
    provider_id text NOT NULL,
    name text NOT NULL,
    input jsonb NOT NULL,
    kind text NOT NULL,
    status text NOT NULL,
    running_epoch bigint,
    output jsonb,
    is_error boolean,
    result_step_id uuid,
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    completed_at timestamp with time zone,
    child_agent_id uuid,
    output_pruned_at timestamp with time zone,
    CONSTRAINT tool_calls_completed_has_output CHECK (((status = 'completed'::text) = ((output IS NOT NULL) AND (is_error IS NOT NULL) AND (completed_at IS NOT NULL)))),
    CONSTRAINT tool_calls_kind_check CHECK ((kind = ANY (ARRAY['external'::text, 'internal'::text, 'custom'::text, 'question'::text, 'command'::text]))),
    CONSTRAINT tool_calls_running_has_epoch CHECK (((status = 'running'::text) = (running_epoch IS NOT NULL))),
    CONSTRAINT tool_calls_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'awaiting_approval'::text, 'waiting'::text, 'running'::text, 'completed'::text, 'cancelled'::text])))
);


--
-- Name: complete_waiting_call(holdfast.tool_calls, jsonb, boolean, text, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.complete_waiting_call(p_call holdfast.tool_calls, p_output jsonb, p_is_error boolean, p_event text, p_event_data jsonb) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE holdfast.tool_calls
       SET status = 'completed', output = p_output, is_error = p_is_error, completed_at = holdfast.now()
     WHERE id = p_call.id;
    IF p_event IS NOT NULL THEN
        PERFORM holdfast.append_event(p_call.agent_id, p_event, p_event_data);
    END IF;
    PERFORM holdfast.append_event(p_call.agent_id, 'tool_call.completed',
        holdfast.tool_call_completed_data(p_call.id, p_call.name, p_output, p_is_error));
    IF (SELECT state FROM holdfast.agents WHERE id = p_call.agent_id) <> 'running' THEN
        PERFORM holdfast.settle_agent(p_call.agent_id);
    END IF;
END
$$;


--
-- Name: content_block_problem(jsonb, text, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.content_block_problem(p_block jsonb, p_field text, p_provider text, OUT message text, OUT field text) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
DECLARE
    v_type text := p_block ->> 'type';
    v_source jsonb := p_block -> 'source';
    v_key text;
    v_data text;
    v_size bigint;
BEGIN
    SELECT k INTO v_key FROM jsonb_object_keys(p_block) k WHERE k NOT IN ('type', 'source') LIMIT 1;
    IF v_key IS NOT NULL THEN
        message := format('an %s block has no field %s', v_type, v_key);
        field := p_field || '.' || v_key;
        RETURN;
    END IF;
    IF jsonb_typeof(v_source) IS DISTINCT FROM 'object' THEN
        message := format('an %s block needs a source object', v_type);
        field := p_field || '.source';
        RETURN;
    END IF;
    CASE v_source ->> 'type'
    WHEN 'base64' THEN
        SELECT k INTO v_key FROM jsonb_object_keys(v_source) k
         WHERE k NOT IN ('type', 'media_type', 'data') LIMIT 1;
        IF v_key IS NOT NULL THEN
            message := format('a base64 source has no field %s', v_key);
            field := p_field || '.source.' || v_key;
        ELSIF NOT coalesce(v_source ->> 'media_type' = ANY (holdfast.content_media_types(v_type)), false)
              OR jsonb_typeof(v_source -> 'media_type') <> 'string' THEN
            message := format('media_type of an %s must be one of %s', v_type,
                              array_to_string(holdfast.content_media_types(v_type), ', '));
            field := p_field || '.source.media_type';
        ELSIF jsonb_typeof(v_source -> 'data') IS DISTINCT FROM 'string' THEN
            message := 'data must be a base64 string';
            field := p_field || '.source.data';
        ELSE
            v_data := v_source ->> 'data';
            v_size := holdfast.base64_decoded_length(v_data);
            field := p_field || '.source.data';
            IF v_size > holdfast.content_max_bytes(v_type) THEN
                message := format('the %s is %s bytes; the limit is %s', v_type, v_size,
                                  holdfast.content_max_bytes(v_type));
            ELSIF v_data = '' OR length(v_data) % 4 <> 0 OR v_data !~ '^[A-Za-z0-9+/]*={0,2}$' THEN
                message := 'data must be non-empty standard base64 (RFC 4648, padded, no line breaks)';
            -- 16 characters of well-formed base64 decode alone (padding only
            -- ends the whole text): the first 12 bytes.
            ELSIF NOT holdfast.media_signature_matches(v_source ->> 'media_type', decode(left(v_data, 16), 'base64')) THEN
                message := format('media_type_mismatch: the data is not %s (it does not start with that format''s signature)',
                                  v_source ->> 'media_type');
            ELSE
                field := NULL;
            END IF;
        END IF;
    WHEN 'url' THEN
        SELECT k INTO v_key FROM jsonb_object_keys(v_source) k WHERE k NOT IN ('type', 'url') LIMIT 1;
        IF v_key IS NOT NULL THEN
            message := format('a url source has no field %s', v_key);
            field := p_field || '.source.' || v_key;
        ELSIF jsonb_typeof(v_source -> 'url') IS DISTINCT FROM 'string'
              OR v_source ->> 'url' !~ '^https?://[^[:space:]/?#]+[^[:space:]]*$'
              OR length(v_source ->> 'url') > 2048 THEN
            message := 'url must be an http or https URL of at most 2048 characters';
            field := p_field || '.source.url';
        ELSIF v_type = 'document' AND p_provider = 'openai' THEN
            message := 'unsupported_content: OpenAI Chat Completions takes no document by URL; send it as base64';
            field := p_field || '.source';
        END IF;
    ELSE
        message := 'source.type must be "base64" or "url"';
        field := p_field || '.source.type';
    END CASE;
END
$_$;


--
-- Name: content_file_sizes(jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.content_file_sizes(p_blocks jsonb) RETURNS TABLE(ordinality bigint, size_bytes bigint, media_type text)
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT b.ordinality, holdfast.base64_decoded_length(b.value #>> '{source,data}'),
           b.value #>> '{source,media_type}'
      FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_blocks) = 'array' THEN p_blocks END)
           WITH ORDINALITY b
     WHERE b.value ->> 'type' IN ('image', 'document') AND b.value #>> '{source,type}' = 'base64'
$$;


--
-- Name: content_max_bytes(text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.content_max_bytes(p_block_type text) RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE p_block_type WHEN 'image' THEN 5 * 1024 * 1024 WHEN 'document' THEN 32 * 1024 * 1024 END
$$;


--
-- Name: content_media_types(text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.content_media_types(p_block_type text) RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE p_block_type
        WHEN 'image' THEN ARRAY['image/jpeg', 'image/png', 'image/gif', 'image/webp']
        WHEN 'document' THEN ARRAY['application/pdf'] END
$$;


--
-- Name: content_problem(jsonb, text, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.content_problem(p_blocks jsonb, p_field text, p_provider text, OUT message text, OUT field text) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
    v_block record;
BEGIN
    IF jsonb_typeof(p_blocks) IS DISTINCT FROM 'array' THEN
        RETURN;
    END IF;
    FOR v_block IN
        SELECT b.value, b.ordinality - 1 AS i FROM jsonb_array_elements(p_blocks) WITH ORDINALITY b
         WHERE b.value ->> 'type' IN ('image', 'document')
    LOOP
        SELECT * INTO message, field
          FROM holdfast.content_block_problem(v_block.value, format('%s[%s]', p_field, v_block.i), p_provider);
        IF message IS NOT NULL THEN
            RETURN;
        END IF;
    END LOOP;
END
$$;


--
-- Name: context_files(holdfast.agents); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.context_files(p_agent holdfast.agents) RETURNS TABLE(size_bytes bigint, media_type text)
    LANGUAGE sql STABLE
    AS $_$
    SELECT (r.ref ->> 'size_bytes')::bigint, r.ref ->> 'media_type'
      FROM (SELECT m.content AS content FROM holdfast.messages m
             WHERE m.agent_id = p_agent.id AND m.seq >= p_agent.context_start_seq
            UNION ALL
            SELECT t.output FROM holdfast.tool_calls t
             WHERE t.agent_id = p_agent.id AND t.status = 'completed' AND t.output_pruned_at IS NULL
               AND t.step_id IN (SELECT m.step_id FROM holdfast.messages m
                                  WHERE m.agent_id = p_agent.id AND m.seq >= p_agent.context_start_seq
                                    AND m.role = 'assistant')
            UNION ALL
            SELECT i.content FROM holdfast.inputs i
             WHERE i.agent_id = p_agent.id AND i.consumed_at IS NULL AND i.removed_at IS NULL) s
     CROSS JOIN LATERAL jsonb_path_query(s.content, '$[*].source ? (@.type == "attachment")') r(ref)
     WHERE jsonb_typeof(s.content) = 'array'
$_$;


--
-- Name: create_agent(uuid, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.create_agent(p_project uuid, p_config jsonb) RETURNS uuid
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_id uuid;
    v_config jsonb;
BEGIN
    PERFORM holdfast.validate_config(p_config);
    IF NOT EXISTS (SELECT 1 FROM holdfast.projects WHERE id = p_project) THEN
        PERFORM holdfast.raise('HF404', format('project %s not found', p_project));
    END IF;
    v_config := holdfast.keep_masked_secrets(NULL, p_config);
    PERFORM holdfast.validate_model_access(p_project, v_config);
    INSERT INTO holdfast.agents (project_id, config) VALUES (p_project, v_config)
    RETURNING id INTO v_id;
    INSERT INTO holdfast.agent_config_versions (agent_id, version, config) VALUES (v_id, 1, v_config);
    RETURN v_id;
END
$$;


--
-- Name: create_api_key(text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.create_api_key(p_project_name text) RETURNS TABLE(key_id uuid, project_id uuid, prefix text, key text)
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: create_input(uuid, jsonb, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.create_input(p_agent uuid, p_content jsonb, p_idempotency_key text DEFAULT NULL::text) RETURNS uuid
    LANGUAGE sql
    AS $$
    SELECT input_id FROM holdfast.create_input_or_replay(p_agent, p_content, p_idempotency_key)
$$;


--
-- Name: create_input_or_replay(uuid, jsonb, text, text, text, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.create_input_or_replay(p_agent uuid, p_content jsonb, p_idempotency_key text, p_trace_parent text DEFAULT NULL::text, p_trace_state text DEFAULT NULL::text, p_mode text DEFAULT 'steer'::text) RETURNS TABLE(input_id uuid, replayed boolean)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_agent holdfast.agents;
    v_refusal record;
BEGIN
    SELECT * INTO v_agent FROM holdfast.agents WHERE id = p_agent FOR UPDATE;
    SELECT * INTO v_refusal FROM holdfast.input_refusal(p_agent, p_content, p_idempotency_key, p_mode);
    IF v_refusal.code IS NOT NULL THEN
        PERFORM holdfast.raise(v_refusal.code, v_refusal.message, v_refusal.field);
    END IF;
    IF v_refusal.replay_of IS NOT NULL THEN
        RETURN QUERY SELECT v_refusal.replay_of, true;
        RETURN;
    END IF;
    RETURN QUERY SELECT holdfast.insert_input(v_agent, p_content, p_idempotency_key, p_trace_parent,
                                              p_trace_state, p_mode), false;
END
$$;


--
-- Name: create_inputs(holdfast.new_input[]); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.create_inputs(p_inputs holdfast.new_input[]) RETURNS TABLE(ord integer, outcome text, message text, field text, input holdfast.inputs)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $_$
DECLARE
    v_row record;
    v_agent holdfast.agents;
    v_refusal record;
    v_input_id uuid;
BEGIN
    PERFORM 1 FROM holdfast.lock_agents(ARRAY(SELECT n.agent_id FROM unnest(p_inputs) n));
    PERFORM holdfast.lock_attachment_counters(ARRAY(
        SELECT a.project_id FROM unnest(p_inputs) n JOIN holdfast.agents a ON a.id = n.agent_id
         WHERE n.content @? '$[*].source ? (@.type == "base64")'));
    FOR v_row IN
        SELECT n.ordinality::integer AS ord, n.project_id, n.agent_id, n.content, n.idempotency_key,
               n.trace_parent, n.trace_state, n.mode
          FROM unnest(p_inputs) WITH ORDINALITY
               AS n(project_id, agent_id, content, idempotency_key, trace_parent, trace_state, mode, ordinality)
         ORDER BY n.agent_id, n.ordinality
    LOOP
        ord := v_row.ord;
        message := NULL;
        field := NULL;
        input := NULL;
        SELECT * INTO v_agent FROM holdfast.agents a WHERE a.id = v_row.agent_id;
        IF v_agent.project_id IS DISTINCT FROM v_row.project_id THEN
            outcome := 'not_found';
            message := format('agent %s not found', v_row.agent_id);
            RETURN NEXT;
            CONTINUE;
        END IF;
        SELECT * INTO v_refusal
          FROM holdfast.input_refusal(v_row.agent_id, v_row.content, v_row.idempotency_key, v_row.mode);
        IF v_refusal.code IS NOT NULL THEN
            outcome := CASE v_refusal.code WHEN 'HF404' THEN 'not_found' WHEN 'HF409' THEN 'conflict'
                                           ELSE 'invalid' END;
            message := v_refusal.message;
            field := v_refusal.field;
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF v_refusal.replay_of IS NOT NULL THEN
            outcome := 'replayed';
            v_input_id := v_refusal.replay_of;
        ELSE
            outcome := 'created';
            v_input_id := holdfast.insert_input(v_agent, v_row.content, v_row.idempotency_key,
                                                v_row.trace_parent, v_row.trace_state, v_row.mode);
        END IF;
        SELECT * INTO input FROM holdfast.inputs i WHERE i.agent_id = v_row.agent_id AND i.id = v_input_id;
        RETURN NEXT;
    END LOOP;
END
$_$;


--
-- Name: create_replay(uuid, uuid, jsonb, bigint, bigint, integer); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.create_replay(p_project uuid, p_agent uuid, p_patch jsonb, p_from_turn bigint DEFAULT NULL::bigint, p_to_turn bigint DEFAULT NULL::bigint, p_version integer DEFAULT NULL::integer) RETURNS uuid
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_source holdfast.agents;
    v_turns bigint[];
    v_child uuid;
    v_replay holdfast.replays;
BEGIN
    SELECT * INTO v_source FROM holdfast.agents WHERE id = p_agent AND project_id = p_project FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('agent %s not found', p_agent));
    END IF;
    IF p_from_turn < 1 THEN
        PERFORM holdfast.raise('HF422', 'turns.from must be at least 1', 'turns.from');
    END IF;
    IF p_to_turn < coalesce(p_from_turn, 1) THEN
        PERFORM holdfast.raise('HF422', 'turns.to must not be before turns.from', 'turns.to');
    END IF;
    -- The turns whose inputs were recorded (a turn's first model step
    -- saved them), in order.
    SELECT coalesce(array_agg(DISTINCT s.turn_seq ORDER BY s.turn_seq), '{}') INTO v_turns
      FROM holdfast.messages m JOIN holdfast.steps s ON s.id = m.step_id
     WHERE m.agent_id = p_agent AND s.agent_id = p_agent AND m.role = 'user'
       AND s.turn_seq BETWEEN coalesce(p_from_turn, 1) AND coalesce(p_to_turn, v_source.turn_seq);
    IF cardinality(v_turns) = 0 THEN
        PERFORM holdfast.raise('HF422', format('agent %s has no recorded turn to replay in that range', p_agent),
                               'turns');
    END IF;
    v_child := holdfast.create_agent(p_project, holdfast.patched_config(holdfast.source_config(v_source, p_version), p_patch, 'config'));
    INSERT INTO holdfast.replays (project_id, source_agent_id, agent_id, config_patch, source_turns)
    VALUES (p_project, p_agent, v_child, coalesce(p_patch, '{}'), v_turns)
    RETURNING * INTO v_replay;
    PERFORM holdfast.lock_agent(v_child);
    UPDATE holdfast.agents
       SET replay_id = v_replay.id, attachment_sources = v_source.attachment_sources || p_agent
     WHERE id = v_child;
    PERFORM holdfast.send_replay_turn(v_replay);
    RETURN v_replay.id;
END
$$;


--
-- Name: schedules; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.schedules (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    project_id uuid NOT NULL,
    agent_id uuid NOT NULL,
    cron text,
    timezone text DEFAULT 'UTC'::text NOT NULL,
    every interval,
    content jsonb NOT NULL,
    mode text DEFAULT 'queue'::text NOT NULL,
    start_at timestamp with time zone,
    end_at timestamp with time zone,
    missed text DEFAULT 'skip'::text NOT NULL,
    paused_at timestamp with time zone,
    next_fire_at timestamp with time zone,
    ended_at timestamp with time zone,
    last_fired_at timestamp with time zone,
    fire_count bigint DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    updated_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT schedules_cron_check CHECK (((cron <> ''::text) AND (length(cron) <= 256))),
    CONSTRAINT schedules_cron_or_every CHECK (((cron IS NULL) <> (every IS NULL))),
    CONSTRAINT schedules_end_after_start CHECK ((end_at > start_at)),
    CONSTRAINT schedules_every_check CHECK ((every >= '00:00:01'::interval)),
    CONSTRAINT schedules_missed_check CHECK ((missed = ANY (ARRAY['skip'::text, 'once'::text]))),
    CONSTRAINT schedules_mode_check CHECK ((mode = ANY (ARRAY['steer'::text, 'queue'::text]))),
    CONSTRAINT schedules_next_unless_ended CHECK (((ended_at IS NULL) OR (next_fire_at IS NULL)))
);


--
-- Name: create_schedule(uuid, uuid, text, text, interval, jsonb, text, timestamp with time zone, timestamp with time zone, text, timestamp with time zone); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.create_schedule(p_project uuid, p_agent uuid, p_cron text, p_timezone text, p_every interval, p_content jsonb, p_mode text, p_start_at timestamp with time zone, p_end_at timestamp with time zone, p_missed text, p_next_fire_at timestamp with time zone) RETURNS holdfast.schedules
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: create_webhook_endpoint(uuid, text, jsonb, text, boolean); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.create_webhook_endpoint(p_project uuid, p_url text, p_events jsonb, p_description text DEFAULT NULL::text, p_allow_private boolean DEFAULT false) RETURNS TABLE(id uuid, url text, events text[], description text, secret text, created_at timestamp with time zone)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_events text[];
BEGIN
    PERFORM holdfast.validate_webhook_url(p_url, p_allow_private);
    v_events := holdfast.validate_webhook_events(p_events);
    IF p_description IS NOT NULL AND length(p_description) > 1000 THEN
        PERFORM holdfast.raise('HF422', 'description must be at most 1000 characters', 'description');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM holdfast.projects p WHERE p.id = p_project) THEN
        PERFORM holdfast.raise('HF404', format('project %s not found', p_project));
    END IF;
    -- 32 bytes from three v4 UUIDs (366 strong random bits, from
    -- pg_strong_random), hashed so every output bit is uniform.
    RETURN QUERY
    INSERT INTO holdfast.webhook_endpoints AS e (project_id, url, events, description, secret)
    VALUES (p_project, p_url, v_events, p_description,
            'whsec_' || encode(sha256(uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid())
                                      || uuid_send(gen_random_uuid())), 'base64'))
    RETURNING e.id, e.url, e.events, e.description, e.secret, e.created_at;
END
$$;


--
-- Name: decide_next_state(uuid, boolean, boolean, boolean, uuid[]); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.decide_next_state(p_agent uuid, p_turn_open boolean, p_new_runnable boolean, p_new_waiting boolean, p_consumed uuid[], OUT state text, OUT opens_turn boolean) RETURNS record
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: delete_machine(uuid, uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.delete_machine(p_project uuid, p_machine uuid) RETURNS integer
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: delete_project_provider_key(uuid, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.delete_project_provider_key(p_project uuid, p_provider text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM holdfast.project_provider_keys k WHERE k.project_id = p_project AND k.provider = p_provider;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('no %s key is set for this project', p_provider));
    END IF;
END
$$;


--
-- Name: delete_schedule(uuid, uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.delete_schedule(p_project uuid, p_schedule uuid) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM holdfast.schedules WHERE id = p_schedule AND project_id = p_project;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('schedule %s not found', p_schedule));
    END IF;
END
$$;


--
-- Name: delete_webhook_endpoint(uuid, uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.delete_webhook_endpoint(p_project uuid, p_id uuid) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_now timestamptz := holdfast.now();
BEGIN
    UPDATE holdfast.webhook_endpoints SET deleted_at = v_now
     WHERE id = p_id AND project_id = p_project AND deleted_at IS NULL;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('webhook endpoint %s not found', p_id));
    END IF;
    UPDATE holdfast.webhook_deliveries
       SET status = 'failed', failed_at = v_now, next_attempt_at = NULL, claimed_until = NULL,
           last_error = 'endpoint deleted'
     WHERE endpoint_id = p_id AND status = 'pending';
END
$$;


--
-- Name: drop_expired_event_partitions(interval); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.drop_expired_event_partitions(p_lock_timeout interval DEFAULT '00:00:00.5'::interval) RETURNS integer
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: end_tool_batch(uuid, bigint, uuid, jsonb, boolean, interval); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.end_tool_batch(p_agent uuid, p_epoch bigint, p_tool_call uuid, p_output jsonb, p_is_error boolean, p_lease_ttl interval DEFAULT NULL::interval, OUT state text, OUT next_context holdfast.step_context) RETURNS record
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
BEGIN
    state := (holdfast.save_tool_result(p_agent, p_epoch, p_tool_call, p_output, p_is_error,
                                        true, p_lease_ttl)).state;
    IF state = 'running' THEN
        SELECT * INTO next_context FROM holdfast.load_step_context(p_agent);
    END IF;
END
$$;


--
-- Name: end_turn_budget_exceeded(uuid, jsonb, uuid[]); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.end_turn_budget_exceeded(p_agent uuid, p_exceeded jsonb, p_input_ids uuid[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM holdfast.end_turn_with_error(p_agent, 'budget_exceeded',
        format('this %s has used %s of its budget.%s of %s; no further model call was made.',
            CASE WHEN p_exceeded ->> 'budget' LIKE '%per_turn' THEN 'turn' ELSE 'agent' END,
            p_exceeded ->> 'value', p_exceeded ->> 'budget', p_exceeded ->> 'limit'),
        p_input_ids, NULL, p_exceeded);
END
$$;


--
-- Name: end_turn_over_budget(uuid, bigint, uuid[]); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.end_turn_over_budget(p_agent uuid, p_epoch bigint, p_input_ids uuid[]) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_agent holdfast.agents;
    v_exceeded jsonb;
    v_approval uuid;
BEGIN
    v_agent := holdfast.lock_leased_agent(p_agent, p_epoch);
    v_exceeded := holdfast.budget_exceeded(v_agent);
    IF v_exceeded IS NULL THEN
        PERFORM holdfast.settle_agent(p_agent);
        RETURN 'released';
    END IF;
    IF v_agent.config #>> '{budget,on_exceeded}' = 'ask' THEN
        INSERT INTO holdfast.approvals (agent_id, kind, budget) VALUES (p_agent, 'budget', v_exceeded)
        RETURNING id INTO v_approval;
        PERFORM holdfast.settle_agent(p_agent, ARRAY['approval.requested'],
            ARRAY[jsonb_build_object('approval_id', v_approval, 'kind', 'budget', 'budget', v_exceeded)], NULL);
        RETURN 'asked';
    END IF;
    PERFORM holdfast.interrupt_running_calls(p_agent);
    PERFORM holdfast.end_turn_budget_exceeded(p_agent, v_exceeded, p_input_ids);
    RETURN 'failed';
END
$$;


--
-- Name: end_turn_with_error(uuid, text, text, uuid[], jsonb, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.end_turn_with_error(p_agent uuid, p_error_type text, p_message text, p_input_ids uuid[], p_detail jsonb DEFAULT NULL::jsonb, p_error_fields jsonb DEFAULT NULL::jsonb) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_input holdfast.inputs;
BEGIN
    FOR v_input IN
        SELECT * FROM holdfast.inputs
         WHERE agent_id = p_agent AND id = ANY (coalesce(p_input_ids, '{}')) AND consumed_at IS NULL
         ORDER BY created_at, id
    LOOP
        PERFORM holdfast.append_input_message(v_input, NULL);
    END LOOP;
    -- The cause, as the next message of the history: its seq is the
    -- agent's next (the row lock is held), counted by the settle below.
    INSERT INTO holdfast.messages (agent_id, seq, role, content)
    SELECT p_agent, a.last_message_seq + 1, 'assistant',
           jsonb_build_array(jsonb_build_object('type', 'text',
               'text', format('[holdfast] The turn failed: %s: %s', p_error_type, p_message)))
      FROM holdfast.agents a WHERE a.id = p_agent;
    UPDATE holdfast.tool_calls SET status = 'cancelled'
     WHERE agent_id = p_agent AND status IN ('pending', 'awaiting_approval', 'waiting');
    PERFORM holdfast.settle_agent(p_agent, ARRAY['turn.failed'],
        ARRAY[jsonb_build_object(
            'error', jsonb_build_object('type', p_error_type, 'message', p_message)
                     || coalesce(p_error_fields, '{}')
                     || CASE WHEN p_detail IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('detail', p_detail) END)],
        NULL, p_turn_open => false, p_new_messages => 1, p_model_attempts => 0);
END
$$;


--
-- Name: ensure_event_partitions(timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.ensure_event_partitions(p_from timestamp with time zone, p_until timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: ensure_project(text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.ensure_project(p_name text) RETURNS uuid
    LANGUAGE plpgsql
    AS $_$
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
$_$;


--
-- Name: event_partitions(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.event_partitions() RETURNS TABLE(name text, starts_at timestamp with time zone, ends_at timestamp with time zone, estimated_rows bigint)
    LANGUAGE sql STABLE
    AS $_$
    SELECT c.relname::text,
           to_date(substr(c.relname, 9), 'YYYYMMDD')::timestamp AT TIME ZONE 'UTC',
           (to_date(substr(c.relname, 9), 'YYYYMMDD') + 7)::timestamp AT TIME ZONE 'UTC',
           greatest(c.reltuples, 0)::bigint
      FROM pg_inherits i
      JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'holdfast.events'::regclass
       AND c.relname ~ '^events_w[0-9]{8}$'
     ORDER BY c.relname
$_$;


--
-- Name: event_types(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.event_types() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$
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


--
-- Name: fail_queued_command(holdfast.commands, text, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.fail_queued_command(p_command holdfast.commands, p_reason text, p_message text) RETURNS void
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: fail_step(uuid, bigint, text, interval, integer); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.fail_step(p_agent uuid, p_epoch bigint, p_message text, p_delay interval, p_max_attempts integer) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_failures integer;
    v_retry_at timestamptz;
BEGIN
    IF p_delay IS NULL OR p_delay < '0'::interval THEN
        PERFORM holdfast.raise('HF422', 'delay must not be negative', 'delay');
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        PERFORM holdfast.raise('HF422', 'max attempts must be at least 1', 'max_attempts');
    END IF;
    v_failures := (holdfast.lock_leased_agent(p_agent, p_epoch)).step_failures + 1;
    PERFORM holdfast.interrupt_running_calls(p_agent);
    IF v_failures >= p_max_attempts THEN
        PERFORM holdfast.end_turn_with_error(p_agent, 'internal_error',
            format('a step failed %s times in a row; last error: %s', v_failures, p_message),
            ARRAY(SELECT id FROM holdfast.turn_inputs(p_agent)));
        RETURN 'failed';
    END IF;
    v_retry_at := holdfast.now() + p_delay;
    PERFORM holdfast.settle_agent(p_agent, ARRAY['step.retry'], ARRAY[jsonb_build_object(
        'attempt', v_failures, 'max_attempts', p_max_attempts,
        'delay_ms', floor(extract(epoch FROM p_delay) * 1000)::bigint, 'retry_at', v_retry_at,
        'error', jsonb_build_object('type', 'internal_error', 'message', p_message))], v_retry_at,
        p_step_failures => v_failures);
    RETURN 'retrying';
END
$$;


--
-- Name: fail_turn(uuid, bigint, text, text, uuid[]); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.fail_turn(p_agent uuid, p_epoch bigint, p_error_type text, p_message text, p_input_ids uuid[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    PERFORM holdfast.interrupt_running_calls(p_agent);
    PERFORM holdfast.end_turn_with_error(p_agent, p_error_type, p_message, p_input_ids);
END
$$;


--
-- Name: file_set_problem(holdfast.agents, jsonb, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.file_set_problem(p_agent holdfast.agents, p_blocks jsonb, p_field text, OUT message text, OUT field text) RETURNS record
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    SELECT * INTO message, field FROM holdfast.attachment_quota_problem(p_agent, p_blocks, p_field);
    IF message IS NULL THEN
        SELECT * INTO message, field FROM holdfast.request_size_problem(p_agent, p_blocks, p_field);
    END IF;
END
$$;


--
-- Name: file_sharers(uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.file_sharers(p_agent uuid) RETURNS TABLE(id uuid, done boolean, context_start_seq bigint)
    LANGUAGE plpgsql STABLE
    AS $$
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


--
-- Name: fork_agent(uuid, uuid, bigint, bigint, jsonb, integer); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.fork_agent(p_project uuid, p_agent uuid, p_seq bigint DEFAULT NULL::bigint, p_turn bigint DEFAULT NULL::bigint, p_patch jsonb DEFAULT NULL::jsonb, p_version integer DEFAULT NULL::integer) RETURNS uuid
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_source holdfast.agents;
    v_seq bigint;
    v_cut timestamptz;
    v_fork uuid;
    v_steps jsonb;
    v_compacted jsonb;
    v_turns bigint;
    v_messages bigint;
    v_calls bigint;
    v_call holdfast.tool_calls;
    v_interrupted integer := 0;
BEGIN
    SELECT * INTO v_source FROM holdfast.agents WHERE id = p_agent AND project_id = p_project FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('agent %s not found', p_agent));
    END IF;
    IF p_seq IS NOT NULL AND p_turn IS NOT NULL THEN
        PERFORM holdfast.raise('HF422', 'give at.seq or at.turn, not both', 'at');
    END IF;
    IF p_seq IS NOT NULL THEN
        IF p_seq < 1 OR p_seq > v_source.last_event_seq THEN
            PERFORM holdfast.raise('HF422', format('at.seq %s is not on the timeline of agent %s (its events are 1 to %s)', p_seq, p_agent, v_source.last_event_seq), 'at.seq');
        END IF;
        v_seq := p_seq;
    ELSIF p_turn IS NOT NULL THEN
        IF p_turn < 1 THEN
            PERFORM holdfast.raise('HF422', 'at.turn must be at least 1', 'at.turn');
        END IF;
        SELECT e.seq INTO v_seq FROM holdfast.events e
         WHERE e.agent_id = p_agent AND e.type IN ('turn.completed', 'turn.failed', 'turn.cancelled')
         ORDER BY e.seq OFFSET p_turn - 1 LIMIT 1;
        IF NOT FOUND THEN
            PERFORM holdfast.raise('HF422', format('agent %s has no finished turn %s', p_agent, p_turn), 'at.turn');
        END IF;
    ELSE
        v_seq := v_source.last_event_seq;
    END IF;

    IF v_seq > 0 THEN
        SELECT e.created_at INTO v_cut FROM holdfast.events e WHERE e.agent_id = p_agent AND e.seq = v_seq;
        IF NOT FOUND THEN
            PERFORM holdfast.raise('HF422', format('event %s of agent %s was removed by retention', v_seq, p_agent), CASE WHEN p_turn IS NULL THEN 'at.seq' ELSE 'at.turn' END);
        END IF;
    ELSE
        v_cut := '-infinity';
    END IF;

    v_fork := holdfast.create_agent(p_project, holdfast.patched_config(holdfast.source_config(v_source, p_version), p_patch, 'config'));

    -- Everything saved up to the cut: a row written in the event's
    -- transaction was written before the event, and every write of the
    -- source is serialized by its row lock, so created_at orders them.
    SELECT coalesce(jsonb_object_agg(s.id, holdfast.uuid_v7()), '{}') INTO v_steps
      FROM holdfast.steps s WHERE s.agent_id = p_agent AND s.created_at <= v_cut;
    INSERT INTO holdfast.steps (id, agent_id, step_seq, kind, epoch, created_at, turn_seq, provider, model, usage)
    SELECT (v_steps ->> s.id::text)::uuid, v_fork, s.step_seq, s.kind, s.epoch, s.created_at, s.turn_seq,
           s.provider, s.model, s.usage
      FROM holdfast.steps s WHERE s.agent_id = p_agent AND s.created_at <= v_cut;
    INSERT INTO holdfast.messages (agent_id, seq, role, content, step_id, created_at)
    SELECT v_fork, m.seq, m.role, m.content, (v_steps ->> m.step_id::text)::uuid, m.created_at
      FROM holdfast.messages m WHERE m.agent_id = p_agent AND m.created_at <= v_cut;
    GET DIAGNOSTICS v_messages = ROW_COUNT;
    INSERT INTO holdfast.tool_calls (agent_id, step_id, position, provider_id, name, input, kind, status,
                                     output, is_error, result_step_id, created_at, completed_at, child_agent_id)
    SELECT v_fork, (v_steps ->> t.step_id::text)::uuid, t.position, t.provider_id, t.name, t.input, t.kind,
           CASE WHEN t.status = 'cancelled' THEN 'cancelled'
                WHEN t.completed_at <= v_cut THEN 'completed' ELSE 'pending' END,
           CASE WHEN t.completed_at <= v_cut THEN t.output END,
           CASE WHEN t.completed_at <= v_cut THEN t.is_error END,
           CASE WHEN t.completed_at <= v_cut THEN (v_steps ->> t.result_step_id::text)::uuid END,
           t.created_at,
           CASE WHEN t.completed_at <= v_cut THEN t.completed_at END,
           t.child_agent_id
      FROM holdfast.tool_calls t WHERE t.agent_id = p_agent AND t.created_at <= v_cut;
    GET DIAGNOSTICS v_calls = ROW_COUNT;

    -- The summary in force at the cut: the last compaction before it.
    SELECT e.data INTO v_compacted FROM holdfast.events e
     WHERE e.agent_id = p_agent AND e.type = 'context.compacted' AND e.seq <= v_seq
     ORDER BY e.seq DESC LIMIT 1;
    SELECT count(*) INTO v_turns FROM holdfast.events e
     WHERE e.agent_id = p_agent AND e.type = 'turn.started' AND e.seq <= v_seq;

    UPDATE holdfast.agents a
       SET forked_from_agent_id = p_agent, forked_from_seq = v_seq,
           attachment_sources = v_source.attachment_sources || p_agent,
           -- Copied model steps keep their epochs (unique per agent): the
           -- fork's own claims come after them.
           lease_epoch = v_source.lease_epoch,
           turn_seq = v_turns,
           last_step_seq = coalesce((SELECT max(s.step_seq) FROM holdfast.steps s WHERE s.agent_id = v_fork), 0),
           last_message_seq = coalesce((SELECT max(m.seq) FROM holdfast.messages m WHERE m.agent_id = v_fork), 0),
           context_summary = v_compacted ->> 'summary',
           context_start_seq = coalesce((v_compacted ->> 'keep_from_seq')::bigint, 0)
     WHERE a.id = v_fork;

    SELECT count(*) INTO v_interrupted FROM holdfast.tool_calls WHERE agent_id = v_fork AND status = 'pending';
    PERFORM holdfast.append_event(v_fork, 'agent.forked', jsonb_build_object(
        'forked_from', jsonb_build_object('agent_id', p_agent, 'seq', v_seq),
        'turn', v_turns, 'messages', v_messages, 'tool_calls', v_calls,
        'interrupted_tool_calls', v_interrupted,
        'config_patch', holdfast.mask_config_secrets(coalesce(p_patch, '{}'))));
    -- Calls open at the cut: for the fork, their outcome is unknown.
    FOR v_call IN SELECT * FROM holdfast.tool_calls WHERE agent_id = v_fork AND status = 'pending'
                   ORDER BY created_at, step_id, position LOOP
        UPDATE holdfast.tool_calls
           SET status = 'completed', output = holdfast.interrupted_output(), is_error = true,
               completed_at = holdfast.now()
         WHERE id = v_call.id;
        PERFORM holdfast.append_event(v_fork, 'tool_call.interrupted', jsonb_build_object(
            'tool_call_id', v_call.id, 'name', v_call.name,
            'output', holdfast.interrupted_output(), 'is_error', true));
    END LOOP;
    RETURN v_fork;
END
$$;


--
-- Name: hold_lease_session_lock(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.hold_lease_session_lock() RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF current_setting('holdfast.lease_session_lock', true) IS DISTINCT FROM 'held' THEN
        PERFORM pg_try_advisory_lock(holdfast.lease_lock_class(), pg_backend_pid());
        PERFORM set_config('holdfast.lease_session_lock', 'held', false);
    END IF;
END
$$;


--
-- Name: inbox(uuid, text, jsonb, timestamp with time zone, uuid, integer); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.inbox(p_project uuid, p_kind text, p_metadata jsonb, p_after_at timestamp with time zone, p_after_id uuid, p_limit integer) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    WITH project_agents AS MATERIALIZED (
        SELECT a.id, a.config -> 'metadata' AS metadata
          FROM holdfast.agents a
         WHERE a.project_id = p_project
           AND (p_metadata IS NULL OR a.config -> 'metadata' @> p_metadata)),
    waiting AS (
        SELECT CASE ap.kind WHEN 'budget' THEN 'budget_approval' ELSE 'approval' END AS kind,
               ap.id, ap.agent_id,
               CASE ap.kind
                   WHEN 'budget' THEN format('Continue past %s (%s of %s)?', ap.budget ->> 'budget',
                                             ap.budget ->> 'value', ap.budget ->> 'limit')
                   ELSE format('Approve %s %s?', tc.name, tc.input::text) END AS summary,
               CASE ap.kind
                   WHEN 'budget' THEN jsonb_build_object('budget', ap.budget)
                   ELSE jsonb_build_object('tool_call_id', tc.id, 'name', tc.name, 'input', tc.input) END
                   AS detail,
               ap.created_at
          FROM project_agents a
          JOIN holdfast.approvals ap ON ap.agent_id = a.id AND ap.status = 'pending'
          LEFT JOIN holdfast.tool_calls tc ON tc.id = ap.tool_call_id
         WHERE p_kind IS NULL OR p_kind IN ('approval', 'budget_approval')
        UNION ALL
        SELECT 'question', q.id, q.agent_id, q.question,
               jsonb_build_object('tool_call_id', q.tool_call_id, 'question', q.question), q.created_at
          FROM project_agents a
          JOIN holdfast.questions q ON q.agent_id = a.id AND q.status = 'pending'
         WHERE p_kind IS NULL OR p_kind = 'question'
        UNION ALL
        SELECT 'tool_call', tc.id, tc.agent_id, format('Result for %s %s', tc.name, tc.input::text),
               jsonb_build_object('name', tc.name, 'input', tc.input), tc.created_at
          FROM project_agents a
          JOIN holdfast.tool_calls tc
            ON tc.agent_id = a.id AND tc.status NOT IN ('completed', 'cancelled')
         WHERE tc.status = 'waiting' AND tc.kind = 'custom'
           AND (p_kind IS NULL OR p_kind = 'tool_call')
        UNION ALL
        SELECT 'command', c.id, c.agent_id, format('Run %s on %s', c.command, m.name),
               jsonb_build_object('tool_call_id', c.tool_call_id, 'command', c.command,
                                  'machine', m.name, 'machine_online',
                                  coalesce(m.last_heartbeat_at > holdfast.now() - s.offline_after, false)),
               c.queued_at
          FROM holdfast.machines m
          JOIN holdfast.commands c ON c.machine_id = m.id AND c.state = 'queued'
          JOIN project_agents a ON a.id = c.agent_id
          CROSS JOIN holdfast.machine_settings s
         WHERE m.project_id = p_project
           AND (p_kind IS NULL OR p_kind = 'command')),
    matching AS (
        SELECT w.*, a.metadata AS agent_metadata
          FROM waiting w
          JOIN project_agents a ON a.id = w.agent_id
         WHERE p_kind IS NULL OR w.kind = p_kind),
    page AS (
        SELECT * FROM matching m
         WHERE p_after_at IS NULL OR (m.created_at, m.id) > (p_after_at, p_after_id)
         ORDER BY m.created_at, m.id
         LIMIT p_limit)
    SELECT jsonb_build_object(
        'items', coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                       'kind', p.kind, 'id', p.id, 'agent_id', p.agent_id,
                       'agent_metadata', coalesce(p.agent_metadata, '{}'),
                       -- One line: whitespace runs (newlines too) become one space.
                       'summary', left(regexp_replace(p.summary, '\s+', ' ', 'g'), 200),
                       'detail', p.detail, 'created_at', p.created_at,
                       'age_seconds', extract(epoch FROM holdfast.now() - p.created_at)::float8)
                   ORDER BY p.created_at, p.id)
              FROM page p), '[]'),
        'total', (SELECT count(*) FROM matching))
$$;


--
-- Name: input_refusal(uuid, jsonb, text, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.input_refusal(p_agent uuid, p_content jsonb, p_idempotency_key text, p_mode text, OUT code text, OUT message text, OUT field text, OUT replay_of uuid) RETURNS record
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_agent holdfast.agents;
    v_input holdfast.inputs;
    v_mode text := coalesce(p_mode, 'steer');
    v_problem record;
BEGIN
    IF p_content IS NULL
       OR NOT (   (jsonb_typeof(p_content) = 'string' AND p_content #>> '{}' <> '')
               OR (jsonb_typeof(p_content) = 'array' AND jsonb_array_length(p_content) > 0
                   AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_content) b
                                    WHERE jsonb_typeof(b.value) <> 'object'
                                       OR jsonb_typeof(b.value -> 'type') IS DISTINCT FROM 'string'))) THEN
        code := 'HF422';
        message := 'content must be a non-empty string or a non-empty array of content blocks';
        field := 'content';
        RETURN;
    END IF;
    IF v_mode NOT IN ('steer', 'queue', 'interrupt') THEN
        code := 'HF422';
        message := 'mode must be steer, queue or interrupt';
        field := 'mode';
        RETURN;
    END IF;
    IF p_idempotency_key IS NOT NULL AND length(p_idempotency_key) NOT BETWEEN 1 AND 255 THEN
        code := 'HF422';
        message := 'idempotency key must be 1 to 255 characters';
        field := 'idempotency_key';
        RETURN;
    END IF;
    SELECT * INTO v_agent FROM holdfast.agents WHERE id = p_agent;
    IF NOT FOUND THEN
        code := 'HF404';
        message := format('agent %s not found', p_agent);
        RETURN;
    END IF;
    -- Images and documents checked for the agent's provider.
    SELECT * INTO v_problem FROM holdfast.content_problem(p_content, 'content', v_agent.config #>> '{model,provider}');
    IF v_problem.message IS NOT NULL THEN
        code := 'HF422';
        message := v_problem.message;
        field := v_problem.field;
        RETURN;
    END IF;
    IF p_idempotency_key IS NOT NULL THEN
        SELECT * INTO v_input FROM holdfast.inputs
         WHERE project_id = v_agent.project_id AND idempotency_key = p_idempotency_key;
        IF FOUND THEN
            -- The saved content references its files; so does this one once
            -- stored (the same file gets the same id; a file not stored yet
            -- is not the saved input's).
            -- Content that retention pruned can no longer be compared:
            -- the key, agent and mode decide.
            IF v_input.agent_id <> p_agent OR v_input.mode <> v_mode
               OR (v_input.content_pruned_at IS NULL
                   AND holdfast.stored_content(p_agent, p_content) IS DISTINCT FROM v_input.content) THEN
                code := 'HF422';
                message := 'idempotency_key_reused: this key was used with another request';
                field := 'idempotency_key';
                RETURN;
            END IF;
            replay_of := v_input.id;
            RETURN;
        END IF;
    END IF;
    -- The attachment quotas and the provider's request size (a replay,
    -- above, stores nothing new).
    SELECT * INTO v_problem FROM holdfast.file_set_problem(v_agent, p_content, 'content');
    IF v_problem.message IS NOT NULL THEN
        code := 'HF422';
        message := v_problem.message;
        field := v_problem.field;
        RETURN;
    END IF;
    IF v_agent.state = 'archived' THEN
        code := 'HF409';
        message := format('agent %s is archived', p_agent);
    END IF;
END
$$;


--
-- Name: insert_input(holdfast.agents, jsonb, text, text, text, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.insert_input(p_agent holdfast.agents, p_content jsonb, p_idempotency_key text, p_trace_parent text, p_trace_state text, p_mode text) RETURNS uuid
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_input holdfast.inputs;
    v_mode text := coalesce(p_mode, 'steer');
    v_content jsonb := holdfast.store_attachments(p_agent.id, p_content);
BEGIN
    INSERT INTO holdfast.inputs (project_id, agent_id, content, idempotency_key, trace_parent, trace_state,
                                 mode, admitted_at)
    VALUES (p_agent.project_id, p_agent.id, v_content, p_idempotency_key, p_trace_parent, p_trace_state,
            v_mode, CASE WHEN v_mode = 'queue' THEN NULL ELSE holdfast.now() END)
    RETURNING * INTO v_input;
    PERFORM holdfast.append_event(p_agent.id, 'input.received',
        jsonb_build_object('input_id', v_input.id, 'content', v_content, 'mode', v_mode));
    IF p_agent.state = 'idle' THEN
        PERFORM holdfast.settle_agent(p_agent.id);
    ELSIF v_mode = 'interrupt' AND p_agent.state = 'running' THEN
        PERFORM pg_notify('holdfast_interrupt', p_agent.id::text || ' ' || v_input.id::text);
    END IF;
    RETURN v_input.id;
END
$$;


--
-- Name: insert_reserved_events(uuid, bigint, text[], jsonb[]); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.insert_reserved_events(p_agent uuid, p_last_seq bigint, p_types text[], p_data jsonb[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: interrupt_running_calls(uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.interrupt_running_calls(p_agent uuid) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_call holdfast.tool_calls;
    v_count integer := 0;
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
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$$;


--
-- Name: interrupted_output(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.interrupted_output() RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT to_jsonb('Tool call was interrupted; its external outcome is unknown.'::text)
$$;


--
-- Name: is_integer_between(jsonb, bigint, bigint); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.is_integer_between(p_value jsonb, p_min bigint, p_max bigint) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $_$
    SELECT CASE WHEN jsonb_typeof(p_value) = 'number' AND p_value #>> '{}' ~ '^[0-9]{1,10}$'
                THEN (p_value #>> '{}')::bigint BETWEEN p_min AND p_max
                ELSE false END;
$_$;


--
-- Name: is_media_blocks(jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.is_media_blocks(p_output jsonb) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF jsonb_typeof(p_output) IS DISTINCT FROM 'array' THEN
        RETURN false;
    END IF;
    RETURN EXISTS (SELECT 1 FROM jsonb_array_elements(p_output) b
                    WHERE b.value ->> 'type' IN ('image', 'document'))
       AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_output) b
                        WHERE jsonb_typeof(b.value) <> 'object'
                           OR coalesce(b.value ->> 'type' NOT IN ('text', 'image', 'document'), true));
END
$$;


--
-- Name: is_private_host(text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.is_private_host(p_host text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
DECLARE
    v_ip inet;
BEGIN
    IF p_host = 'localhost' OR p_host ~ '\.(localhost|local|internal|home\.arpa)$' THEN
        RETURN true;
    END IF;
    IF substring(p_host FROM '[^.]*$') ~ '^([0-9]+|0x[0-9a-f]*)$' THEN
        -- The last label is a number: URL parsers read the host as IPv4.
        IF p_host !~ '^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$' THEN
            RETURN true;
        END IF;
        v_ip := p_host::inet;
    ELSIF position(':' IN p_host) > 0 THEN
        BEGIN
            v_ip := p_host::inet;
        EXCEPTION WHEN invalid_text_representation THEN
            RETURN true;
        END;
    ELSE
        RETURN false;
    END IF;
    IF EXISTS (
        SELECT 1 FROM unnest(ARRAY[
            '192.0.0.9/32', '192.0.0.10/32', '2001:1::1/128', '2001:1::2/128', '2001:1::3/128',
            '2001:3::/32', '2001:4:112::/48', '2001:20::/28', '2001:30::/28']::inet[]) AS r (range)
         WHERE r.range >>= v_ip) THEN
        RETURN false;
    END IF;
    RETURN EXISTS (
        SELECT 1 FROM unnest(ARRAY[
            '0.0.0.0/8', '10.0.0.0/8', '100.64.0.0/10', '127.0.0.0/8', '169.254.0.0/16',
            '172.16.0.0/12', '192.0.0.0/24', '192.0.2.0/24', '192.88.99.0/24',
            '192.168.0.0/16', '198.18.0.0/15', '198.51.100.0/24', '203.0.113.0/24',
            '224.0.0.0/4', '240.0.0.0/4',
            '::/96', '::ffff:0:0/96', '64:ff9b::/96', '64:ff9b:1::/48', '100::/64', '100:0:0:1::/64',
            '2001::/23', '2001:db8::/32', '2002::/16', '3fff::/20', '5f00::/16',
            'fc00::/7', 'fe80::/10', 'fec0::/10', 'ff00::/8']::inet[]) AS r (range)
         WHERE r.range >>= v_ip);
END
$_$;


--
-- Name: jsonb_merge_diff(jsonb, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.jsonb_merge_diff(p_old jsonb, p_new jsonb) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF jsonb_typeof(p_old) IS DISTINCT FROM 'object' OR jsonb_typeof(p_new) IS DISTINCT FROM 'object' THEN
        RETURN p_new;
    END IF;
    RETURN (SELECT coalesce(jsonb_object_agg(k.key, CASE
                                WHEN NOT p_new ? k.key THEN 'null'::jsonb
                                ELSE holdfast.jsonb_merge_diff(p_old -> k.key, p_new -> k.key) END), '{}')
              FROM (SELECT jsonb_object_keys(p_old) AS key
                    UNION SELECT jsonb_object_keys(p_new)) k
             WHERE (p_old -> k.key) IS DISTINCT FROM (p_new -> k.key));
END
$$;


--
-- Name: jsonb_merge_patch(jsonb, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.jsonb_merge_patch(p_target jsonb, p_patch jsonb) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE
    AS $$
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


--
-- Name: keep_masked_secrets(jsonb, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.keep_masked_secrets(p_old jsonb, p_new jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT holdfast.keep_masked_secrets_at(p_old, p_new, '')
$$;


--
-- Name: keep_masked_secrets_at(jsonb, jsonb, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.keep_masked_secrets_at(p_old jsonb, p_new jsonb, p_at text) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
DECLARE
    v_tools jsonb := '[]';
    v_old_tools jsonb := CASE WHEN jsonb_typeof(p_old -> 'tools') = 'array' THEN p_old -> 'tools' ELSE '[]' END;
    v_tool jsonb;
    v_i integer := 0;
    v_header record;
    v_kept jsonb;
BEGIN
    IF jsonb_typeof(p_new -> 'tools') IS DISTINCT FROM 'array'
       OR NOT jsonb_path_exists(p_new -> 'tools', '$.** ? (@ == "***")') THEN
        RETURN p_new;
    END IF;
    FOR v_tool IN SELECT value FROM jsonb_array_elements(p_new -> 'tools') LOOP
        IF v_tool ->> 'type' = 'mcp' AND jsonb_typeof(v_tool -> 'headers') = 'object' THEN
            FOR v_header IN SELECT key, value FROM jsonb_each(v_tool -> 'headers') WHERE value = '"***"' LOOP
                SELECT o.value -> 'headers' -> v_header.key INTO v_kept
                  FROM jsonb_array_elements(v_old_tools) o
                 WHERE o.value ->> 'type' = 'mcp'
                   AND o.value -> 'name' IS NOT DISTINCT FROM v_tool -> 'name'
                   AND o.value -> 'url' IS NOT DISTINCT FROM v_tool -> 'url'
                 LIMIT 1;
                IF v_kept IS NULL OR v_kept = '"***"' THEN
                    PERFORM holdfast.raise('HF422', format(
                        '"***" keeps a stored header value, and this MCP tool (same name and url) has none for %s: send the value',
                        v_header.key), format('%stools[%s].headers.%s', p_at, v_i, v_header.key));
                END IF;
                v_tool := jsonb_set(v_tool, ARRAY['headers', v_header.key], v_kept);
            END LOOP;
        ELSIF v_tool ->> 'type' = 'spawn_subagent' AND jsonb_typeof(v_tool -> 'config') = 'object' THEN
            -- Tool types are unique in a config: at most one spawn_subagent.
            v_tool := jsonb_set(v_tool, '{config}', holdfast.keep_masked_secrets_at(
                (SELECT o.value -> 'config' FROM jsonb_array_elements(v_old_tools) o
                  WHERE o.value ->> 'type' = 'spawn_subagent' LIMIT 1),
                v_tool -> 'config', format('%stools[%s].config.', p_at, v_i)));
        END IF;
        v_tools := v_tools || jsonb_build_array(v_tool);
        v_i := v_i + 1;
    END LOOP;
    RETURN jsonb_set(p_new, '{tools}', v_tools);
END
$_$;


--
-- Name: keep_tool_output(holdfast.agents, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.keep_tool_output(p_agent holdfast.agents, p_output jsonb) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_kept jsonb;
    v_problem record;
BEGIN
    IF NOT holdfast.is_media_blocks(p_output) THEN
        RETURN p_output;
    END IF;
    SELECT jsonb_agg(CASE WHEN p.message IS NULL THEN b.value
                          ELSE jsonb_build_object('type', 'text', 'text',
                                   format('[%s left out: %s]', b.value ->> 'type', p.message)) END
                     ORDER BY b.ordinality)
      INTO v_kept
      FROM jsonb_array_elements(p_output) WITH ORDINALITY b
      LEFT JOIN LATERAL holdfast.content_block_problem(b.value, 'output', p_agent.config #>> '{model,provider}') p
             ON b.value ->> 'type' IN ('image', 'document');
    -- Files past a quota or the request size are all left out, saying why.
    SELECT * INTO v_problem FROM holdfast.file_set_problem(p_agent, v_kept, 'output');
    IF v_problem.message IS NOT NULL THEN
        SELECT jsonb_agg(CASE WHEN holdfast.block_file_data(b.value) IS NULL THEN b.value
                              ELSE jsonb_build_object('type', 'text', 'text',
                                       format('[%s left out: %s]', b.value ->> 'type', v_problem.message)) END
                         ORDER BY b.ordinality)
          INTO v_kept
          FROM jsonb_array_elements(v_kept) WITH ORDINALITY b;
    END IF;
    IF NOT holdfast.is_media_blocks(v_kept) THEN
        RETURN to_jsonb((SELECT string_agg(b.value ->> 'text', E'\n' ORDER BY b.ordinality)
                           FROM jsonb_array_elements(v_kept) WITH ORDINALITY b));
    END IF;
    RETURN holdfast.store_attachments(p_agent.id, v_kept);
END
$$;


--
-- Name: kept_lease_grace(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.kept_lease_grace() RETURNS interval
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT interval '50 milliseconds' $$;


--
-- Name: latest_config_version(holdfast.agents); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.latest_config_version(p_agent holdfast.agents, OUT version integer, OUT config jsonb) RETURNS record
    LANGUAGE sql STABLE
    AS $$
    SELECT v.version, v.config FROM holdfast.agent_config_versions v
     WHERE v.agent_id = p_agent.id
       AND v.version = coalesce(p_agent.next_turn_config_version, p_agent.config_version)
$$;


--
-- Name: lease_lock_class(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.lease_lock_class() RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT 1215261796 $$;


--
-- Name: limit_maximum(text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.limit_maximum(p_name text) RETURNS integer
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_max integer;
BEGIN
    IF NOT coalesce(p_name = ANY (holdfast.limit_names()), false) THEN
        PERFORM holdfast.raise('HF422', format('unknown limit %s', p_name), 'limits');
    END IF;
    SELECT CASE p_name
               WHEN 'max_model_steps_per_turn' THEN s.max_model_steps_per_turn
               WHEN 'max_tool_calls_per_response' THEN s.max_tool_calls_per_response
               WHEN 'max_subagent_depth' THEN s.max_subagent_depth
               WHEN 'max_live_children' THEN s.max_live_children
               WHEN 'max_descendants' THEN s.max_descendants END
      INTO v_max FROM holdfast.limit_settings s;
    RETURN v_max;
END
$$;


--
-- Name: limit_names(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.limit_names() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT ARRAY['max_model_steps_per_turn', 'max_tool_calls_per_response', 'max_subagent_depth',
                 'max_live_children', 'max_descendants']
$$;


--
-- Name: list_machines(uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.list_machines(p_project uuid) RETURNS TABLE(id uuid, name text, wake_url text, created_at timestamp with time zone, last_heartbeat_at timestamp with time zone, online boolean, wake_until timestamp with time zone, queued_commands bigint, running_commands jsonb)
    LANGUAGE sql STABLE
    AS $$
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


--
-- Name: list_model_endpoints(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.list_model_endpoints() RETURNS TABLE(name text, kind text, base_url text, credential_env text, project_name text, models text[], agents bigint, created_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT e.name, e.kind, e.base_url, e.credential_env, p.name, e.models,
           (SELECT count(*) FROM holdfast.agents a
             WHERE a.config #>> '{model,endpoint}' = e.name AND a.state <> 'archived'
               AND (e.project_id IS NULL OR a.project_id = e.project_id)),
           e.created_at
      FROM holdfast.model_endpoints e
      LEFT JOIN holdfast.projects p ON p.id = e.project_id
     ORDER BY e.name
$$;


--
-- Name: model_prices; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.model_prices (
    provider text NOT NULL,
    model text NOT NULL,
    input_usd_per_mtok numeric NOT NULL,
    output_usd_per_mtok numeric NOT NULL,
    cache_read_usd_per_mtok numeric,
    cache_write_usd_per_mtok numeric,
    updated_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT model_prices_cache_read_usd_per_mtok_check CHECK ((cache_read_usd_per_mtok >= (0)::numeric)),
    CONSTRAINT model_prices_cache_write_usd_per_mtok_check CHECK ((cache_write_usd_per_mtok >= (0)::numeric)),
    CONSTRAINT model_prices_input_usd_per_mtok_check CHECK ((input_usd_per_mtok >= (0)::numeric)),
    CONSTRAINT model_prices_model_check CHECK (((length(model) >= 1) AND (length(model) <= 200))),
    CONSTRAINT model_prices_output_usd_per_mtok_check CHECK ((output_usd_per_mtok >= (0)::numeric)),
    CONSTRAINT model_prices_provider_check CHECK (((length(provider) >= 1) AND (length(provider) <= 100)))
);


--
-- Name: list_model_prices(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.list_model_prices() RETURNS SETOF holdfast.model_prices
    LANGUAGE sql STABLE
    AS $$
    SELECT * FROM holdfast.model_prices ORDER BY provider, model
$$;


--
-- Name: list_project_provider_keys(uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.list_project_provider_keys(p_project uuid) RETURNS TABLE(provider text, created_at timestamp with time zone, updated_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT k.provider, k.created_at, k.updated_at FROM holdfast.project_provider_keys k
     WHERE k.project_id = p_project ORDER BY k.provider
$$;


--
-- Name: list_replays(uuid, uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.list_replays(p_project uuid, p_agent uuid) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    SELECT jsonb_build_object('replays', coalesce((
        SELECT jsonb_agg(jsonb_build_object(
                   'id', r.id, 'agent_id', r.agent_id, 'status', r.status, 'error', r.error,
                   'config_patch', holdfast.mask_config_secrets(r.config_patch),
                   'turns_total', cardinality(r.source_turns), 'turns_replayed', r.turns_sent,
                   'created_at', r.created_at, 'completed_at', r.completed_at) ORDER BY r.id)
          FROM holdfast.replays r WHERE r.source_agent_id = a.id), '[]'))
      FROM holdfast.agents a WHERE a.id = p_agent AND a.project_id = p_project
$$;


--
-- Name: list_webhook_deliveries(uuid, uuid, text, integer, uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.list_webhook_deliveries(p_project uuid, p_endpoint uuid, p_status text DEFAULT NULL::text, p_limit integer DEFAULT 100, p_before uuid DEFAULT NULL::uuid) RETURNS TABLE(id uuid, endpoint_id uuid, agent_id uuid, event_seq bigint, event_id uuid, event_type text, status text, attempts integer, last_status_code integer, last_error text, next_attempt_at timestamp with time zone, last_attempt_at timestamp with time zone, created_at timestamp with time zone, delivered_at timestamp with time zone, failed_at timestamp with time zone)
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM holdfast.webhook_endpoints e
                    WHERE e.id = p_endpoint AND e.project_id = p_project AND e.deleted_at IS NULL) THEN
        PERFORM holdfast.raise('HF404', format('webhook endpoint %s not found', p_endpoint));
    END IF;
    IF p_status IS NOT NULL AND p_status NOT IN ('pending', 'delivered', 'failed') THEN
        PERFORM holdfast.raise('HF422', 'status must be pending, delivered or failed', 'status');
    END IF;
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000 THEN
        PERFORM holdfast.raise('HF422', 'limit must be between 1 and 1000', 'limit');
    END IF;
    RETURN QUERY
    SELECT d.id, d.endpoint_id, d.agent_id, d.event_seq, d.event_id, d.event_type, d.status,
           d.attempts, d.last_status_code, d.last_error, d.next_attempt_at, d.last_attempt_at,
           d.created_at, d.delivered_at, d.failed_at
      FROM holdfast.webhook_deliveries d
     WHERE d.endpoint_id = p_endpoint
       AND (p_status IS NULL OR d.status = p_status)
       AND (p_before IS NULL OR d.id < p_before)
     ORDER BY d.id DESC
     LIMIT p_limit;
END
$$;


--
-- Name: list_webhook_endpoints(uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.list_webhook_endpoints(p_project uuid) RETURNS TABLE(id uuid, url text, events text[], description text, created_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT e.id, e.url, e.events, e.description, e.created_at
      FROM holdfast.webhook_endpoints e
     WHERE e.project_id = p_project AND e.deleted_at IS NULL
     ORDER BY e.id
$$;


--
-- Name: load_step_context(uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.load_step_context(p_agent uuid) RETURNS SETOF holdfast.step_context
    LANGUAGE plpgsql STABLE
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_agent holdfast.agents;
    v_model boolean;
    v_route record;
BEGIN
    SELECT * INTO v_agent FROM holdfast.agents a WHERE a.id = p_agent;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_model := NOT EXISTS (SELECT 1 FROM holdfast.tool_calls t
                            WHERE t.agent_id = p_agent AND t.status = 'pending');
    -- Without v_model the filter is constant false and resolves nothing:
    -- the route's columns are NULL.
    SELECT * INTO v_route
      FROM holdfast.resolve_model_endpoint(p_agent, jsonb_strip_nulls(v_agent.config -> 'model')) r
     WHERE v_model;
    RETURN QUERY
    SELECT v_agent.config, v_agent.config_version, v_agent.turn_open, v_agent.model_attempts,
           v_agent.cancel_requested_at IS NOT NULL,
           CASE WHEN v_model THEN v_agent.context_summary END,
           v_agent.turn_model_steps,
           CASE WHEN v_model THEN holdfast.budget_exceeded(v_agent) IS NOT NULL END,
           v_agent.turn_trace_parent, v_agent.turn_trace_state, v_agent.first_attempt_epoch,
           v_agent.lost_attempt_epoch, v_agent.lost_attempt_started_at, v_agent.lost_attempt_ended_at,
           CASE WHEN v_model THEN
               (SELECT coalesce(json_agg(json_build_object('seq', m.seq, 'role', m.role,
                                                            'content', m.content, 'step_id', m.step_id)
                                         ORDER BY m.seq), '[]')
                  FROM holdfast.messages m
                 WHERE m.agent_id = p_agent AND m.seq >= v_agent.context_start_seq)
           END,
           (SELECT coalesce(json_agg(json_build_object('id', t.id, 'step_id', t.step_id,
                                                        'position', t.position, 'provider_id', t.provider_id,
                                                        'name', t.name, 'input', t.input, 'kind', t.kind,
                                                        'status', t.status, 'output', t.output,
                                                        'is_error', t.is_error)
                                     ORDER BY t.created_at, t.step_id, t.position), '[]')
              FROM holdfast.tool_calls t
             WHERE t.agent_id = p_agent
               AND (t.status NOT IN ('completed', 'cancelled')
                    OR v_model AND (v_agent.context_start_seq = 0
                                    OR t.step_id IN (SELECT m.step_id FROM holdfast.messages m
                                                      WHERE m.agent_id = p_agent
                                                        AND m.seq >= v_agent.context_start_seq)))),
           CASE WHEN v_model THEN
               (SELECT coalesce(json_agg(json_build_object('id', i.id, 'content', i.content)
                                         ORDER BY i.created_at, i.id), '[]')
                  FROM holdfast.turn_inputs(p_agent) i)
           END,
           v_route.refused_field, v_route.refused_message, v_route.endpoint, v_route.custom_url,
           v_route.base_url, v_route.credential_env, v_route.sealed_key, v_route.key_fingerprint,
           v_agent.project_id, v_agent.replay_id IS NOT NULL;
END
$$;


--
-- Name: lock_agent(uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.lock_agent(p_agent uuid) RETURNS holdfast.agents
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: lock_agents(uuid[]); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.lock_agents(p_ids uuid[]) RETURNS SETOF holdfast.agents
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN QUERY
    SELECT a.*
      FROM (SELECT DISTINCT u.id FROM unnest(p_ids) AS u (id) WHERE u.id IS NOT NULL ORDER BY u.id) ids
     CROSS JOIN LATERAL (SELECT * FROM holdfast.agents x WHERE x.id = ids.id FOR UPDATE) a;
END
$$;


--
-- Name: lock_attachment_counters(uuid[]); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.lock_attachment_counters(p_projects uuid[]) RETURNS void
    LANGUAGE sql
    AS $$
    INSERT INTO holdfast.project_attachment_bytes AS t (project_id, bytes)
    SELECT DISTINCT u.id, 0 FROM unnest(p_projects) AS u (id) WHERE u.id IS NOT NULL ORDER BY u.id
    ON CONFLICT (project_id) DO UPDATE SET bytes = t.bytes
$$;


--
-- Name: lock_leased_agent(uuid, bigint); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.lock_leased_agent(p_agent uuid, p_epoch bigint) RETURNS holdfast.agents
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: machine_heartbeat(uuid, jsonb, uuid, boolean, boolean, boolean, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.machine_heartbeat(p_machine uuid, p_commands jsonb DEFAULT '[]'::jsonb, p_session uuid DEFAULT NULL::uuid, p_started boolean DEFAULT false, p_sandboxed boolean DEFAULT NULL::boolean, p_single_session boolean DEFAULT false, p_peer text DEFAULT NULL::text) RETURNS TABLE(heartbeat_at timestamp with time zone, replaced_session uuid)
    LANGUAGE plpgsql
    AS $_$
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
$_$;


--
-- Name: machine_tick(interval, interval, integer); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.machine_tick(p_accept_timeout interval, p_offline_after interval, p_batch integer DEFAULT 1000) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: maintain_event_partitions(interval); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.maintain_event_partitions(p_lock_timeout interval DEFAULT '00:00:00.5'::interval, OUT partitions_created integer, OUT partitions_dropped integer) RETURNS record
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_old_timeout text := current_setting('lock_timeout');
BEGIN
    PERFORM set_config('lock_timeout', (extract(epoch FROM p_lock_timeout) * 1000)::bigint::text, true);
    partitions_created := holdfast.ensure_event_partitions(holdfast.now(), holdfast.now() + interval '14 days');
    partitions_dropped := holdfast.drop_expired_event_partitions(p_lock_timeout);
    PERFORM set_config('lock_timeout', v_old_timeout, true);
END
$$;


--
-- Name: maintenance_tick(integer); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.maintenance_tick(p_batch integer DEFAULT 1000) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: mask_config_secrets(jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.mask_config_secrets(p_config jsonb) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF jsonb_typeof(p_config -> 'tools') IS DISTINCT FROM 'array' THEN
        RETURN p_config;
    END IF;
    RETURN jsonb_set(p_config, '{tools}', (
        SELECT coalesce(jsonb_agg(
                   CASE WHEN t.tool ->> 'type' = 'mcp' AND jsonb_typeof(t.tool -> 'headers') = 'object'
                        THEN jsonb_set(t.tool, '{headers}', coalesce(
                                 (SELECT jsonb_object_agg(h.key, '***') FROM jsonb_each(t.tool -> 'headers') h),
                                 '{}'))
                        WHEN t.tool ->> 'type' = 'spawn_subagent' AND jsonb_typeof(t.tool -> 'config') = 'object'
                        THEN jsonb_set(t.tool, '{config}', holdfast.mask_config_secrets(t.tool -> 'config'))
                        ELSE t.tool END
                   ORDER BY t.ord), '[]')
          FROM jsonb_array_elements(p_config -> 'tools') WITH ORDINALITY AS t (tool, ord)));
END
$$;


--
-- Name: media_signature_matches(text, bytea); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.media_signature_matches(p_media_type text, p_head bytea) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT coalesce(CASE p_media_type
        WHEN 'image/png' THEN substring(p_head FROM 1 FOR 8) = '\x89504e470d0a1a0a'::bytea
        WHEN 'image/jpeg' THEN substring(p_head FROM 1 FOR 3) = '\xffd8ff'::bytea
        WHEN 'image/gif' THEN substring(p_head FROM 1 FOR 6) IN ('GIF87a'::bytea, 'GIF89a'::bytea)
        WHEN 'image/webp' THEN substring(p_head FROM 1 FOR 4) = 'RIFF'::bytea
                           AND substring(p_head FROM 9 FOR 4) = 'WEBP'::bytea
        WHEN 'application/pdf' THEN substring(p_head FROM 1 FOR 5) = '%PDF-'::bytea
        END, false)
$$;


--
-- Name: model_step_refusal(jsonb, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.model_step_refusal(p_message jsonb, p_tool_calls jsonb, OUT message text, OUT field text) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
    v_tool_calls jsonb := coalesce(p_tool_calls, '[]');
    v_call jsonb;
BEGIN
    IF jsonb_typeof(p_message) IS DISTINCT FROM 'array' THEN
        message := 'message must be an array of content blocks';
        field := 'message';
        RETURN;
    END IF;
    IF jsonb_typeof(v_tool_calls) <> 'array' THEN
        message := 'tool_calls must be an array';
        field := 'tool_calls';
        RETURN;
    END IF;
    FOR v_pos IN 0 .. jsonb_array_length(v_tool_calls) - 1 LOOP
        v_call := v_tool_calls -> v_pos;
        IF jsonb_typeof(v_call -> 'name') IS DISTINCT FROM 'string'
           OR jsonb_typeof(v_call -> 'provider_id') IS DISTINCT FROM 'string' THEN
            message := 'each tool call needs string name and provider_id';
            field := format('tool_calls[%s]', v_pos);
            RETURN;
        END IF;
        IF NOT coalesce(v_call ->> 'kind' IN ('external', 'internal', 'custom', 'question', 'command'), false) THEN
            message := 'tool call kind must be external, internal, custom, question or command';
            field := format('tool_calls[%s].kind', v_pos);
            RETURN;
        END IF;
    END LOOP;
END
$$;


--
-- Name: new_machine_token(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.new_machine_token() RETURNS text
    LANGUAGE sql
    AS $$
    SELECT 'hfm_' || encode(uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()), 'hex')
$$;


--
-- Name: next_turn_trace_context(uuid, uuid[]); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.next_turn_trace_context(p_agent uuid, p_taken uuid[], OUT parent text, OUT state text) RETURNS record
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: not_in_recording_output(jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.not_in_recording_output(p_recorded jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT to_jsonb(CASE WHEN p_recorded IS NULL
        THEN 'Tool call not in the recording: the recorded turn made no call at this point. This is a replay; nothing was run.'
        ELSE format('Tool call not in the recording: the recorded call at this point was %s with input %s. This is a replay; nothing was run.',
                    p_recorded ->> 'name', p_recorded -> 'input') END)
$$;


--
-- Name: open_tool_wait(uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.open_tool_wait(p_call_id uuid) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_call holdfast.tool_calls;
    v_id uuid;
    v_question text;
BEGIN
    SELECT * INTO v_call FROM holdfast.tool_calls WHERE id = p_call_id;
    IF v_call.status = 'awaiting_approval' THEN
        INSERT INTO holdfast.approvals (agent_id, tool_call_id) VALUES (v_call.agent_id, v_call.id)
        ON CONFLICT (tool_call_id) DO NOTHING RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            PERFORM holdfast.append_event(v_call.agent_id, 'approval.requested', jsonb_build_object(
                'approval_id', v_id, 'kind', 'tool_call', 'tool_call_id', v_call.id, 'name', v_call.name,
                'input', v_call.input));
        END IF;
    ELSIF v_call.status = 'waiting' AND v_call.kind = 'question' THEN
        v_question := coalesce(v_call.input ->> 'question', v_call.input #>> '{}', v_call.input::text);
        INSERT INTO holdfast.questions (agent_id, tool_call_id, question)
        VALUES (v_call.agent_id, v_call.id, v_question)
        ON CONFLICT (tool_call_id) DO NOTHING RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            PERFORM holdfast.append_event(v_call.agent_id, 'question.asked', jsonb_build_object(
                'question_id', v_id, 'tool_call_id', v_call.id, 'question', v_question));
        END IF;
    ELSIF v_call.status = 'waiting' AND v_call.kind = 'command' THEN
        PERFORM holdfast.queue_command(v_call);
    END IF;
END
$$;


--
-- Name: patch_agent_config(uuid, jsonb, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.patch_agent_config(p_agent uuid, p_patch jsonb, p_apply text DEFAULT 'now'::text) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_agent holdfast.agents;
BEGIN
    IF jsonb_typeof(p_patch) IS DISTINCT FROM 'object' THEN
        PERFORM holdfast.raise('HF422', 'a config patch must be a JSON object', 'config');
    END IF;
    v_agent := holdfast.lock_agent(p_agent);
    RETURN holdfast.update_agent_config(
        p_agent, holdfast.jsonb_merge_patch((holdfast.latest_config_version(v_agent)).config, p_patch), p_apply);
END
$$;


--
-- Name: patched_config(jsonb, jsonb, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.patched_config(p_config jsonb, p_patch jsonb, p_field text) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF p_patch IS NULL THEN
        RETURN p_config;
    END IF;
    IF jsonb_typeof(p_patch) <> 'object' THEN
        PERFORM holdfast.raise('HF422', format('%s must be a JSON object (a merge patch of the config)', p_field),
                               p_field);
    END IF;
    RETURN holdfast.jsonb_merge_patch(p_config, p_patch);
END
$$;


--
-- Name: price_usage(holdfast.token_usage, text, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.price_usage(p_usage holdfast.token_usage, p_provider text, p_model text) RETURNS holdfast.token_usage
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_cost numeric;
BEGIN
    SELECT (greatest((p_usage).input_tokens - (p_usage).cache_read_tokens
                     - (p_usage).cache_write_tokens, 0) * p.input_usd_per_mtok
            + (p_usage).cache_read_tokens * coalesce(p.cache_read_usd_per_mtok, p.input_usd_per_mtok)
            + (p_usage).cache_write_tokens * coalesce(p.cache_write_usd_per_mtok, p.input_usd_per_mtok)
            + (p_usage).output_tokens * p.output_usd_per_mtok) / 1000000
      INTO v_cost
      FROM holdfast.model_prices p
     WHERE p.provider = p_provider AND p.model = p_model;
    p_usage.cost_usd := v_cost;
    RETURN p_usage;
END
$$;


--
-- Name: project_by_name(text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.project_by_name(p_name text) RETURNS uuid
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_id uuid;
BEGIN
    SELECT id INTO v_id FROM holdfast.projects WHERE name = p_name;
    IF v_id IS NULL THEN
        PERFORM holdfast.raise('HF404', format('project %s not found', p_name));
    END IF;
    RETURN v_id;
END
$$;


--
-- Name: project_usage(uuid, date); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.project_usage(p_project uuid, p_since date) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    WITH rows AS (
        SELECT u.day, u.provider, u.model, u.model_steps,
               jsonb_build_object(
                   'input_tokens', u.input_tokens, 'output_tokens', u.output_tokens,
                   'cache_read_tokens', u.cache_read_tokens, 'cache_write_tokens', u.cache_write_tokens,
                   'reasoning_tokens', u.reasoning_tokens, 'cost_usd', u.cost_usd,
                   'server_tool_requests', u.server_tool_requests,
                   'web_search_requests', u.web_search_requests) AS usage,
               u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens,
               u.reasoning_tokens, u.cost_usd, u.server_tool_requests, u.web_search_requests
          FROM holdfast.usage_by_project u
         WHERE u.project_id = p_project AND u.day >= p_since)
    SELECT jsonb_build_object(
        'since', p_since,
        'days', coalesce((SELECT jsonb_agg(jsonb_build_object(
                                 'day', r.day, 'provider', r.provider, 'model', r.model,
                                 'model_steps', r.model_steps, 'usage', r.usage)
                             ORDER BY r.day DESC, r.provider, r.model)
                            FROM rows r), '[]'),
        'usage', jsonb_build_object(
            'input_tokens', coalesce(sum(input_tokens), 0), 'output_tokens', coalesce(sum(output_tokens), 0),
            'cache_read_tokens', coalesce(sum(cache_read_tokens), 0),
            'cache_write_tokens', coalesce(sum(cache_write_tokens), 0),
            'reasoning_tokens', coalesce(sum(reasoning_tokens), 0), 'cost_usd', sum(cost_usd),
            'server_tool_requests', coalesce(sum(server_tool_requests), 0),
            'web_search_requests', coalesce(sum(web_search_requests), 0)))
      FROM rows
$$;


--
-- Name: provider_vendor(text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.provider_vendor(p_provider text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE WHEN p_provider = 'openai_responses' THEN 'openai' ELSE p_provider END
$$;


--
-- Name: prunable_attachments(uuid, boolean, bigint, timestamp with time zone); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.prunable_attachments(p_agent uuid, p_archived boolean, p_context_start_seq bigint, p_cutoff timestamp with time zone) RETURNS TABLE(id uuid)
    LANGUAGE sql STABLE
    AS $_$
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
$_$;


--
-- Name: prune_retention_rows(integer); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.prune_retention_rows(p_batch integer DEFAULT 10000) RETURNS TABLE(events_deleted bigint, deliveries_deleted bigint, tool_outputs_pruned bigint, inputs_pruned bigint, attachments_deleted bigint)
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: queue_command(holdfast.tool_calls); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.queue_command(p_call holdfast.tool_calls) RETURNS void
    LANGUAGE plpgsql
    AS $_$
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
$_$;


--
-- Name: raise(text, text, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.raise(p_code text, p_message text, p_column text DEFAULT NULL::text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF p_column IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = p_code, MESSAGE = p_message;
    END IF;
    RAISE EXCEPTION USING ERRCODE = p_code, MESSAGE = p_message, COLUMN = p_column;
END
$$;


--
-- Name: reap_agent(uuid, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.reap_agent(p_agent uuid, p_reason text) RETURNS void
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: record_content_left_out(uuid, bigint, text[], text[]); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.record_content_left_out(p_agent uuid, p_epoch bigint, p_urls text[], p_reasons text[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    PERFORM holdfast.append_event(p_agent, 'content.left_out', jsonb_build_object('url', u.url, 'reason', u.reason))
       FROM unnest(p_urls, p_reasons) WITH ORDINALITY AS u (url, reason, ord)
      ORDER BY u.ord;
END
$$;


--
-- Name: record_tools_unavailable(uuid, bigint, text[], text[], text[]); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.record_tools_unavailable(p_agent uuid, p_epoch bigint, p_servers text[], p_tools text[], p_reasons text[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    PERFORM holdfast.append_event(p_agent, 'tool.unavailable', jsonb_strip_nulls(
               jsonb_build_object('server', u.server, 'tool', u.tool, 'reason', u.reason)))
       FROM unnest(p_servers, p_tools, p_reasons) WITH ORDINALITY AS u (server, tool, reason, ord)
      ORDER BY u.ord;
END
$$;


--
-- Name: record_webhook_attempt(uuid, uuid, integer, integer, text, interval, interval); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.record_webhook_attempt(p_agent uuid, p_delivery uuid, p_attempt integer, p_status_code integer, p_error text, p_retry_delay interval, p_retry_window interval) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_now timestamptz := holdfast.now();
    v_delivery holdfast.webhook_deliveries;
    v_deadline timestamptz;
BEGIN
    IF p_retry_delay IS NULL OR p_retry_delay < '0'::interval THEN
        PERFORM holdfast.raise('HF422', 'retry delay must not be negative', 'retry_delay');
    END IF;
    IF p_retry_window IS NULL OR p_retry_window < '0'::interval THEN
        PERFORM holdfast.raise('HF422', 'retry window must not be negative', 'retry_window');
    END IF;
    SELECT * INTO v_delivery FROM holdfast.webhook_deliveries
     WHERE agent_id = p_agent AND id = p_delivery FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('webhook delivery %s not found', p_delivery));
    END IF;
    IF p_status_code BETWEEN 200 AND 299 THEN
        IF v_delivery.status <> 'delivered' THEN
            UPDATE holdfast.webhook_deliveries
               SET status = 'delivered', delivered_at = v_now, failed_at = NULL,
                   next_attempt_at = NULL, claimed_until = NULL,
                   last_status_code = p_status_code, last_error = NULL
             WHERE agent_id = p_agent AND id = p_delivery;
        END IF;
        RETURN 'delivered';
    END IF;
    IF v_delivery.status <> 'pending' OR v_delivery.attempts <> p_attempt THEN
        RETURN 'superseded';
    END IF;
    v_deadline := v_delivery.created_at + p_retry_window;
    IF v_now >= v_deadline THEN
        UPDATE holdfast.webhook_deliveries
           SET status = 'failed', failed_at = v_now, next_attempt_at = NULL, claimed_until = NULL,
               last_status_code = p_status_code, last_error = p_error
         WHERE agent_id = p_agent AND id = p_delivery;
        RETURN 'failed';
    END IF;
    UPDATE holdfast.webhook_deliveries
       SET next_attempt_at = least(v_now + p_retry_delay, v_deadline), claimed_until = NULL,
           last_status_code = p_status_code, last_error = p_error
     WHERE agent_id = p_agent AND id = p_delivery;
    RETURN 'pending';
END
$$;


--
-- Name: referenced_content(uuid, jsonb, bytea[]); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.referenced_content(p_agent uuid, p_blocks jsonb, p_hashes bytea[]) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE WHEN bool_and(p_hashes[b.ordinality] IS NULL OR a.id IS NOT NULL) THEN
               jsonb_agg(CASE WHEN p_hashes[b.ordinality] IS NOT NULL
                              THEN jsonb_set(b.value, '{source}',
                                   jsonb_build_object('type', 'attachment', 'attachment_id', a.id,
                                                      'media_type', a.media_type,
                                                      'size_bytes', a.size_bytes))
                              ELSE b.value END
                         ORDER BY b.ordinality)
           END
      FROM jsonb_array_elements(p_blocks) WITH ORDINALITY b
      LEFT JOIN holdfast.attachments a
             ON p_hashes[b.ordinality] IS NOT NULL AND a.agent_id = p_agent
            AND a.sha256 = p_hashes[b.ordinality]
            AND a.media_type = b.value #>> '{source,media_type}'
$$;


--
-- Name: refuse_command_call(holdfast.tool_calls, text, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.refuse_command_call(p_call holdfast.tool_calls, p_reason text, p_message text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM holdfast.complete_waiting_call(p_call,
        holdfast.command_outcome_output('failed', p_reason, p_message, false), true,
        'command.failed', jsonb_build_object('tool_call_id', p_call.id, 'reason', p_reason,
                                             'message', p_message));
END
$$;


--
-- Name: refuse_unknown_keys(jsonb, text[], text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.refuse_unknown_keys(p_object jsonb, p_known text[], p_prefix text) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_key text;
BEGIN
    SELECT k INTO v_key FROM jsonb_object_keys(p_object) k WHERE NOT k = ANY (p_known) ORDER BY k LIMIT 1;
    IF v_key IS NOT NULL THEN
        PERFORM holdfast.raise('HF422', format('unknown field %s%s; expected one of: %s',
            p_prefix, v_key, array_to_string(p_known, ', ')), p_prefix || v_key);
    END IF;
END
$$;


--
-- Name: register_machine(uuid, text, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.register_machine(p_project uuid, p_name text, p_wake_url text DEFAULT NULL::text) RETURNS TABLE(machine_id uuid, name text, wake_url text, token_prefix text, token text, created_at timestamp with time zone)
    LANGUAGE plpgsql
    AS $_$
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
$_$;


--
-- Name: release_agent(uuid, bigint, timestamp with time zone, interval); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.release_agent(p_agent uuid, p_epoch bigint, p_run_after timestamp with time zone DEFAULT NULL::timestamp with time zone, p_lease_ttl interval DEFAULT NULL::interval) RETURNS text
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    PERFORM holdfast.interrupt_running_calls(p_agent);
    RETURN (holdfast.settle_agent(p_agent, p_run_after => p_run_after, p_lease_ttl => p_lease_ttl)).state;
END
$$;


--
-- Name: release_webhook_deliveries(uuid[], integer[]); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.release_webhook_deliveries(p_deliveries uuid[], p_attempts integer[]) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_released integer;
BEGIN
    IF coalesce(array_length(p_deliveries, 1), 0) <> coalesce(array_length(p_attempts, 1), 0) THEN
        PERFORM holdfast.raise('HF422', 'deliveries and attempts must have the same length', 'attempts');
    END IF;
    WITH wanted AS (
        SELECT w.id, w.attempt FROM unnest(p_deliveries, p_attempts) AS w (id, attempt)
    ), locked AS (
        SELECT d.id FROM holdfast.webhook_deliveries d JOIN wanted w ON w.id = d.id
         WHERE d.status = 'pending' AND d.attempts = w.attempt AND d.claimed_until IS NOT NULL
         ORDER BY d.id
           FOR UPDATE OF d
    )
    UPDATE holdfast.webhook_deliveries d
       SET claimed_until = NULL, next_attempt_at = holdfast.now()
      FROM locked l
     WHERE d.id = l.id;
    GET DIAGNOSTICS v_released = ROW_COUNT;
    RETURN v_released;
END
$$;


--
-- Name: remove_input(uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.remove_input(p_input uuid) RETURNS uuid
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_input holdfast.inputs;
BEGIN
    SELECT * INTO v_input FROM holdfast.inputs WHERE id = p_input;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('input %s not found', p_input));
    END IF;
    PERFORM holdfast.lock_agent(v_input.agent_id);
    SELECT * INTO v_input FROM holdfast.inputs WHERE id = p_input FOR UPDATE;
    IF v_input.removed_at IS NOT NULL THEN
        PERFORM holdfast.raise('HF409', format('input %s was removed already', p_input));
    END IF;
    IF v_input.admitted_at IS NOT NULL THEN
        PERFORM holdfast.raise('HF409', format('input %s is not queued: a turn has taken it', p_input));
    END IF;
    UPDATE holdfast.inputs SET removed_at = holdfast.now() WHERE id = p_input;
    PERFORM holdfast.append_event(v_input.agent_id, 'input.removed', jsonb_build_object('input_id', p_input));
    RETURN v_input.agent_id;
END
$$;


--
-- Name: remove_model_endpoint(text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.remove_model_endpoint(p_name text) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_agents bigint;
BEGIN
    SELECT l.agents INTO v_agents FROM holdfast.list_model_endpoints() l WHERE l.name = p_name;
    DELETE FROM holdfast.model_endpoints WHERE name = p_name;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('model endpoint %s not found', p_name));
    END IF;
    RETURN v_agents;
END
$$;


--
-- Name: remove_model_price(text, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.remove_model_price(p_provider text, p_model text) RETURNS boolean
    LANGUAGE sql
    AS $$
    WITH removed AS (
        DELETE FROM holdfast.model_prices WHERE provider = p_provider AND model = p_model RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM removed)
$$;


--
-- Name: renew_leases(text, uuid[], bigint[], interval); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.renew_leases(p_worker text, p_agents uuid[], p_epochs bigint[], p_ttl interval) RETURNS TABLE(agent_id uuid, renewed boolean, cancel_requested boolean, interrupt_input uuid)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
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


--
-- Name: replay_report(uuid, uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.replay_report(p_project uuid, p_replay uuid) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_replay holdfast.replays;
    v_turns jsonb := '[]';
    v_source_usage holdfast.token_usage := holdfast.zero_usage();
    v_replay_usage holdfast.token_usage := holdfast.zero_usage();
    v_equal integer := 0;
    v_diverged integer := 0;
    v_turn jsonb;
BEGIN
    SELECT * INTO v_replay FROM holdfast.replays WHERE id = p_replay AND project_id = p_project;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    FOR v_k IN 1 .. v_replay.turns_sent LOOP
        v_turn := holdfast.replay_turn_report(v_replay, v_k);
        v_turns := v_turns || jsonb_build_array(v_turn);
        v_source_usage := holdfast.add_usage(v_source_usage,
            holdfast.turn_model_usage(v_replay.source_agent_id, v_replay.source_turns[v_k]));
        v_replay_usage := holdfast.add_usage(v_replay_usage, holdfast.turn_model_usage(v_replay.agent_id, v_k));
        IF (v_turn ->> 'diverged')::boolean THEN
            v_diverged := v_diverged + 1;
        ELSIF (v_turn ->> 'answer_equal')::boolean THEN
            v_equal := v_equal + 1;
        END IF;
    END LOOP;
    RETURN jsonb_build_object(
        'id', v_replay.id, 'source_agent_id', v_replay.source_agent_id, 'agent_id', v_replay.agent_id,
        'status', v_replay.status, 'error', v_replay.error,
        'config_patch', holdfast.mask_config_secrets(v_replay.config_patch),
        'created_at', v_replay.created_at, 'completed_at', v_replay.completed_at,
        'turns_total', cardinality(v_replay.source_turns), 'turns_replayed', v_replay.turns_sent,
        'turns', v_turns,
        'totals', jsonb_build_object('turns_equal', v_equal, 'turns_diverged', v_diverged,
                                     'source', holdfast.usage_json(v_source_usage),
                                     'replay', holdfast.usage_json(v_replay_usage)));
END
$$;


--
-- Name: replays; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.replays (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    project_id uuid NOT NULL,
    source_agent_id uuid NOT NULL,
    agent_id uuid NOT NULL,
    config_patch jsonb NOT NULL,
    source_turns bigint[] NOT NULL,
    turns_sent integer DEFAULT 0 NOT NULL,
    status text DEFAULT 'running'::text NOT NULL,
    error jsonb,
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    completed_at timestamp with time zone,
    CONSTRAINT replays_completed_iff_ended CHECK (((status = 'running'::text) = (completed_at IS NULL))),
    CONSTRAINT replays_status_check CHECK ((status = ANY (ARRAY['running'::text, 'completed'::text, 'failed'::text]))),
    CONSTRAINT replays_turns_sent_check CHECK (((turns_sent >= 0) AND (turns_sent <= cardinality(source_turns))))
);


--
-- Name: replay_turn_report(holdfast.replays, integer); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.replay_turn_report(p_replay holdfast.replays, p_turn integer) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_source_turn bigint := p_replay.source_turns[p_turn];
    v_source_calls jsonb := holdfast.turn_tool_calls(p_replay.source_agent_id, v_source_turn);
    v_replay_calls jsonb := holdfast.turn_tool_calls(p_replay.agent_id, p_turn);
    v_source_answer text := holdfast.turn_answer(p_replay.source_agent_id, v_source_turn);
    v_replay_answer text := holdfast.turn_answer(p_replay.agent_id, p_turn);
    v_divergence jsonb;
    v_source jsonb;
    v_replayed jsonb;
BEGIN
    FOR v_position IN 0 .. greatest(jsonb_array_length(v_source_calls), jsonb_array_length(v_replay_calls)) - 1 LOOP
        v_source := v_source_calls -> v_position;
        v_replayed := v_replay_calls -> v_position;
        IF v_source IS NULL OR v_replayed IS NULL OR v_source -> 'name' <> v_replayed -> 'name'
           OR v_source -> 'input' <> v_replayed -> 'input' THEN
            v_divergence := jsonb_build_object(
                'position', v_position,
                'source', CASE WHEN v_source IS NULL THEN NULL
                               ELSE jsonb_build_object('name', v_source -> 'name', 'input', v_source -> 'input') END,
                'replay', CASE WHEN v_replayed IS NULL THEN NULL
                               ELSE jsonb_build_object('name', v_replayed -> 'name', 'input', v_replayed -> 'input') END);
            EXIT;
        END IF;
    END LOOP;
    RETURN jsonb_build_object(
        'turn', p_turn, 'source_turn', v_source_turn,
        'source', jsonb_build_object(
            'answer', v_source_answer,
            'tool_calls', (SELECT coalesce(jsonb_agg(jsonb_build_object('name', c -> 'name', 'input', c -> 'input',
                                                                        'output', c -> 'output', 'is_error', c -> 'is_error')), '[]')
                             FROM jsonb_array_elements(v_source_calls) c),
            'usage', holdfast.usage_json(holdfast.turn_model_usage(p_replay.source_agent_id, v_source_turn))),
        'replay', jsonb_build_object(
            'answer', v_replay_answer,
            'tool_calls', (SELECT coalesce(jsonb_agg(jsonb_build_object('name', c -> 'name', 'input', c -> 'input',
                                                                        'output', c -> 'output', 'is_error', c -> 'is_error')), '[]')
                             FROM jsonb_array_elements(v_replay_calls) c),
            'usage', holdfast.usage_json(holdfast.turn_model_usage(p_replay.agent_id, p_turn))),
        'diverged', v_divergence IS NOT NULL,
        'first_divergence', v_divergence,
        'answer_equal', v_source_answer IS NOT DISTINCT FROM v_replay_answer);
END
$$;


--
-- Name: request_cancel(uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.request_cancel(p_agent uuid) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_agent holdfast.agents;
BEGIN
    v_agent := holdfast.lock_agent(p_agent);
    IF v_agent.state IN ('idle', 'archived') THEN
        PERFORM holdfast.raise('HF409', format('agent %s is %s: no turn to cancel', p_agent, v_agent.state));
    END IF;
    RETURN holdfast.cancel_locked_turn(v_agent);
END
$$;


--
-- Name: request_file_cost(text, bigint); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.request_file_cost(p_provider text, p_size_bytes bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE p_provider WHEN 'anthropic' THEN (p_size_bytes + 2) / 3 * 4 ELSE p_size_bytes END
$$;


--
-- Name: request_file_limit(text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.request_file_limit(p_provider text) RETURNS bigint
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE p_provider WHEN 'anthropic' THEN 32000000 ELSE 50000000 END::bigint
$$;


--
-- Name: request_pdf_limit(text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.request_pdf_limit(p_provider text) RETURNS bigint
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE p_provider WHEN 'anthropic' THEN NULL ELSE 32000000 END::bigint
$$;


--
-- Name: request_size_problem(holdfast.agents, jsonb, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.request_size_problem(p_agent holdfast.agents, p_blocks jsonb, p_field text, OUT message text, OUT field text) RETURNS record
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_provider text := p_agent.config #>> '{model,provider}';
    v_new bigint;
    v_new_pdf bigint;
    v_total bigint;
    v_pdf bigint;
BEGIN
    SELECT sum(holdfast.request_file_cost(v_provider, f.size_bytes)),
           coalesce(sum(f.size_bytes) FILTER (WHERE f.media_type = 'application/pdf'), 0)
      INTO v_new, v_new_pdf
      FROM holdfast.content_file_sizes(p_blocks) f;
    IF v_new IS NULL THEN
        RETURN;
    END IF;
    SELECT v_new + coalesce(sum(holdfast.request_file_cost(v_provider, c.size_bytes)), 0),
           v_new_pdf + coalesce(sum(c.size_bytes) FILTER (WHERE c.media_type = 'application/pdf'), 0)
      INTO v_total, v_pdf
      FROM holdfast.context_files(p_agent) c;
    IF v_total > holdfast.request_file_limit(v_provider) THEN
        message := format('request_too_large: the files of the agent''s next %s request would take %s bytes '
                          '(%s of them new); the provider takes at most %s per request',
                          v_provider, v_total, v_new, holdfast.request_file_limit(v_provider));
        field := p_field;
    ELSIF v_new_pdf > 0 AND v_pdf > holdfast.request_pdf_limit(v_provider) THEN
        message := format('request_too_large: the PDFs of the agent''s next %s request would take %s bytes '
                          '(%s of them new); the provider takes at most %s of PDFs per request',
                          v_provider, v_pdf, v_new_pdf, holdfast.request_pdf_limit(v_provider));
        field := p_field;
    END IF;
END
$$;


--
-- Name: resolve_model_endpoint(uuid, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.resolve_model_endpoint(p_agent uuid, p_model jsonb) RETURNS TABLE(refused_field text, refused_message text, endpoint text, custom_url text, base_url text, credential_env text, sealed_key bytea, key_fingerprint text, project_id uuid)
    LANGUAGE plpgsql STABLE
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_project uuid;
    v_config jsonb;
    v_refusal record;
    v_endpoint holdfast.model_endpoints;
    v_key holdfast.project_provider_keys;
BEGIN
    SELECT a.project_id, a.config INTO v_project, v_config FROM holdfast.agents a WHERE a.id = p_agent;
    IF v_project IS NULL THEN
        PERFORM holdfast.raise('HF404', format('agent %s not found', p_agent));
    END IF;
    SELECT * INTO v_refusal FROM holdfast.check_model_access(v_project, p_model);
    IF NOT FOUND THEN
        -- A plain variable as the argument: with a sub-select there, the
        -- SQL function could not be inlined and was planned at every call.
        SELECT * INTO v_refusal FROM holdfast.check_server_tools(v_project, v_config);
    END IF;
    IF FOUND THEN
        RETURN QUERY SELECT v_refusal.field, v_refusal.message, NULL::text, NULL::text,
                            NULL::text, NULL::text, NULL::bytea, NULL::text, v_project;
        RETURN;
    END IF;
    SELECT * INTO v_endpoint FROM holdfast.model_endpoints e
     WHERE e.name = p_model ->> 'endpoint' AND (e.project_id IS NULL OR e.project_id = v_project);
    SELECT * INTO v_key FROM holdfast.project_provider_keys k
     WHERE k.project_id = v_project AND k.provider = holdfast.provider_vendor(p_model ->> 'provider');
    RETURN QUERY SELECT NULL::text, NULL::text, coalesce(p_model ->> 'endpoint', 'default'),
                        p_model ->> 'base_url', v_endpoint.base_url, v_endpoint.credential_env,
                        v_key.sealed, v_key.key_fingerprint, v_project;
END
$$;


--
-- Name: revoke_api_key(text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.revoke_api_key(p_key_ref text) RETURNS TABLE(key_id uuid, project_id uuid, prefix text, revoked_at timestamp with time zone)
    LANGUAGE plpgsql
    AS $_$
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
$_$;


--
-- Name: rotate_machine_token(uuid, uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.rotate_machine_token(p_project uuid, p_machine uuid) RETURNS TABLE(machine_id uuid, name text, wake_url text, token_prefix text, token text, created_at timestamp with time zone)
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: save_tool_result(uuid, bigint, uuid, jsonb, boolean, boolean, interval); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.save_tool_result(p_agent uuid, p_epoch bigint, p_tool_call uuid, p_output jsonb, p_is_error boolean, p_end_batch boolean, p_lease_ttl interval, OUT state text, OUT step_id uuid) RETURNS record
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_agent holdfast.agents;
    v_call holdfast.tool_calls;
    v_data jsonb;
    v_step_id uuid := holdfast.uuid_v7();
    v_step_seq bigint;
    v_event_seq bigint;
BEGIN
    v_agent := holdfast.lock_leased_agent(p_agent, p_epoch);
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
    -- Images and documents (an MCP server's): their files stored once.
    p_output := holdfast.keep_tool_output(v_agent, p_output);
    UPDATE holdfast.tool_calls
       SET status = 'completed', running_epoch = NULL, output = p_output,
           is_error = coalesce(p_is_error, false), result_step_id = v_step_id,
           completed_at = holdfast.now()
     WHERE id = p_tool_call;
    v_data := holdfast.tool_call_completed_data(p_tool_call, v_call.name, p_output, coalesce(p_is_error, false));
    IF p_end_batch THEN
        PERFORM holdfast.interrupt_running_calls(p_agent);
        SELECT s.state, s.last_step_seq INTO state, v_step_seq
          FROM holdfast.settle_agent(p_agent, ARRAY['tool_call.completed'], ARRAY[v_data],
                                     p_new_steps => 1, p_lease_ttl => p_lease_ttl) s;
    ELSE
        UPDATE holdfast.agents
           SET last_step_seq = last_step_seq + 1,
               last_event_seq = last_event_seq + 1, last_event_at = holdfast.now()
         WHERE id = p_agent
        RETURNING last_step_seq, last_event_seq INTO v_step_seq, v_event_seq;
        PERFORM holdfast.insert_reserved_events(p_agent, v_event_seq, ARRAY['tool_call.completed'],
                                                ARRAY[v_data]);
        state := 'running';
    END IF;
    INSERT INTO holdfast.steps (id, agent_id, step_seq, kind, epoch)
    VALUES (v_step_id, p_agent, v_step_seq, 'tool', p_epoch);
    step_id := v_step_id;
END
$$;


--
-- Name: schedule_input_key(uuid, timestamp with time zone); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.schedule_input_key(p_schedule uuid, p_slot timestamp with time zone) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT format('schedule:%s:%s', p_schedule,
                  (extract(epoch FROM p_slot) * 1000000)::bigint)
$$;


--
-- Name: send_pending_wake(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.send_pending_wake() RETURNS boolean
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: send_replay_turn(holdfast.replays); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.send_replay_turn(p_replay holdfast.replays) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_content jsonb;
BEGIN
    FOR v_content IN
        SELECT m.content FROM holdfast.messages m JOIN holdfast.steps s ON s.id = m.step_id
         WHERE m.agent_id = p_replay.source_agent_id AND s.agent_id = p_replay.source_agent_id
           AND s.turn_seq = p_replay.source_turns[p_replay.turns_sent + 1] AND m.role = 'user'
         ORDER BY m.seq
    LOOP
        PERFORM holdfast.insert_input((SELECT a FROM holdfast.agents a WHERE a.id = p_replay.agent_id),
                                      v_content, NULL, NULL, NULL, 'steer');
    END LOOP;
    UPDATE holdfast.replays SET turns_sent = turns_sent + 1 WHERE id = p_replay.id;
END
$$;


--
-- Name: set_attachment_quotas(bigint, bigint); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.set_attachment_quotas(p_per_agent bigint, p_per_project bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF coalesce(p_per_agent, 0) <= 0 THEN
        PERFORM holdfast.raise('HF422', 'max_attachment_bytes_per_agent must be a positive number of bytes',
                               'max_attachment_bytes_per_agent');
    END IF;
    IF coalesce(p_per_project, 0) <= 0 THEN
        PERFORM holdfast.raise('HF422', 'max_attachment_bytes_per_project must be a positive number of bytes',
                               'max_attachment_bytes_per_project');
    END IF;
    UPDATE holdfast.attachment_quotas
       SET max_agent_bytes = p_per_agent, max_project_bytes = p_per_project, updated_at = holdfast.now()
     WHERE (max_agent_bytes, max_project_bytes) IS DISTINCT FROM (p_per_agent, p_per_project);
END
$$;


--
-- Name: set_limit_maxima(integer, integer, integer, integer, integer); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.set_limit_maxima(p_max_model_steps_per_turn integer, p_max_tool_calls_per_response integer, p_max_subagent_depth integer, p_max_live_children integer, p_max_descendants integer) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF least(p_max_model_steps_per_turn, p_max_tool_calls_per_response, p_max_subagent_depth,
             p_max_live_children, p_max_descendants) <= 0
       OR num_nulls(p_max_model_steps_per_turn, p_max_tool_calls_per_response, p_max_subagent_depth,
                    p_max_live_children, p_max_descendants) > 0 THEN
        PERFORM holdfast.raise('HF422', 'every limit maximum must be a positive integer', 'limits');
    END IF;
    UPDATE holdfast.limit_settings
       SET max_model_steps_per_turn = p_max_model_steps_per_turn,
           max_tool_calls_per_response = p_max_tool_calls_per_response,
           max_subagent_depth = p_max_subagent_depth,
           max_live_children = p_max_live_children,
           max_descendants = p_max_descendants,
           updated_at = holdfast.now()
     WHERE (max_model_steps_per_turn, max_tool_calls_per_response, max_subagent_depth,
            max_live_children, max_descendants)
           IS DISTINCT FROM (p_max_model_steps_per_turn, p_max_tool_calls_per_response,
                             p_max_subagent_depth, p_max_live_children, p_max_descendants);
END
$$;


--
-- Name: set_model_price(text, text, numeric, numeric, numeric, numeric); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.set_model_price(p_provider text, p_model text, p_input numeric, p_output numeric, p_cache_read numeric, p_cache_write numeric) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF coalesce(length(p_provider), 0) NOT BETWEEN 1 AND 100 THEN
        PERFORM holdfast.raise('HF422', 'provider must be 1 to 100 characters', 'provider');
    END IF;
    IF coalesce(length(p_model), 0) NOT BETWEEN 1 AND 200 THEN
        PERFORM holdfast.raise('HF422', 'model must be 1 to 200 characters', 'model');
    END IF;
    IF p_input IS NULL OR p_input < 0 THEN
        PERFORM holdfast.raise('HF422', 'the input price must be a number of USD, at least 0', 'input_usd_per_mtok');
    END IF;
    IF p_output IS NULL OR p_output < 0 THEN
        PERFORM holdfast.raise('HF422', 'the output price must be a number of USD, at least 0', 'output_usd_per_mtok');
    END IF;
    IF p_cache_read < 0 THEN
        PERFORM holdfast.raise('HF422', 'the cache read price must be at least 0', 'cache_read_usd_per_mtok');
    END IF;
    IF p_cache_write < 0 THEN
        PERFORM holdfast.raise('HF422', 'the cache write price must be at least 0', 'cache_write_usd_per_mtok');
    END IF;
    INSERT INTO holdfast.model_prices AS p (provider, model, input_usd_per_mtok, output_usd_per_mtok,
                                            cache_read_usd_per_mtok, cache_write_usd_per_mtok)
    VALUES (p_provider, p_model, p_input, p_output, p_cache_read, p_cache_write)
    ON CONFLICT (provider, model) DO UPDATE
       SET input_usd_per_mtok = EXCLUDED.input_usd_per_mtok,
           output_usd_per_mtok = EXCLUDED.output_usd_per_mtok,
           cache_read_usd_per_mtok = EXCLUDED.cache_read_usd_per_mtok,
           cache_write_usd_per_mtok = EXCLUDED.cache_write_usd_per_mtok,
           updated_at = holdfast.now();
END
$$;


--
-- Name: set_project_custom_model_urls(text, boolean); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.set_project_custom_model_urls(p_project_name text, p_allowed boolean) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE holdfast.projects SET allow_custom_model_urls = p_allowed
     WHERE id = holdfast.project_by_name(p_project_name);
    RETURN p_allowed;
END
$$;


--
-- Name: set_project_max_running(text, integer); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.set_project_max_running(p_project_name text, p_max_running integer) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF p_max_running < 0 THEN
        PERFORM holdfast.raise('HF422', 'max_running must be 0 or more (NULL: no cap)', 'max_running');
    END IF;
    UPDATE holdfast.projects SET max_running = p_max_running WHERE name = p_project_name;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('project %s not found', p_project_name));
    END IF;
END
$$;


--
-- Name: set_project_provider_key(uuid, text, bytea, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.set_project_provider_key(p_project uuid, p_provider text, p_sealed bytea, p_key_fingerprint text) RETURNS TABLE(provider text, created_at timestamp with time zone, updated_at timestamp with time zone)
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF p_provider IS NULL OR p_provider NOT IN ('anthropic', 'openai') THEN
        PERFORM holdfast.raise('HF422', 'provider must be "anthropic" or "openai"', 'provider');
    END IF;
    RETURN QUERY
    INSERT INTO holdfast.project_provider_keys AS k (project_id, provider, sealed, key_fingerprint)
    VALUES (p_project, p_provider, p_sealed, p_key_fingerprint)
    ON CONFLICT ON CONSTRAINT project_provider_keys_pkey DO UPDATE
       SET sealed = excluded.sealed, key_fingerprint = excluded.key_fingerprint,
           updated_at = holdfast.now()
    RETURNING k.provider, k.created_at, k.updated_at;
END
$$;


--
-- Name: set_project_retention(text, interval); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.set_project_retention(p_project_name text, p_events interval) RETURNS void
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: set_project_server_tools(text, boolean); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.set_project_server_tools(p_project_name text, p_allowed boolean) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE holdfast.projects SET allow_server_tools = p_allowed
     WHERE id = holdfast.project_by_name(p_project_name);
    RETURN p_allowed;
END
$$;


--
-- Name: set_schedule_paused(uuid, uuid, boolean, timestamp with time zone); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.set_schedule_paused(p_project uuid, p_schedule uuid, p_paused boolean, p_next_fire_at timestamp with time zone) RETURNS holdfast.schedules
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: settle_agent(uuid, text[], jsonb[], timestamp with time zone, boolean, boolean, boolean, uuid[], integer, integer, boolean, holdfast.token_usage, integer, integer, interval); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.settle_agent(p_agent uuid, p_types text[] DEFAULT '{}'::text[], p_data jsonb[] DEFAULT '{}'::jsonb[], p_run_after timestamp with time zone DEFAULT NULL::timestamp with time zone, p_turn_open boolean DEFAULT NULL::boolean, p_new_runnable boolean DEFAULT false, p_new_waiting boolean DEFAULT false, p_consumed uuid[] DEFAULT '{}'::uuid[], p_new_steps integer DEFAULT 0, p_new_messages integer DEFAULT 0, p_model_step boolean DEFAULT false, p_usage holdfast.token_usage DEFAULT NULL::holdfast.token_usage, p_model_attempts integer DEFAULT NULL::integer, p_step_failures integer DEFAULT 0, p_lease_ttl interval DEFAULT NULL::interval, OUT state text, OUT types text[], OUT last_step_seq bigint, OUT last_message_seq bigint, OUT last_event_seq bigint) RETURNS record
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: source_config(holdfast.agents, integer); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.source_config(p_source holdfast.agents, p_version integer) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_config jsonb;
BEGIN
    IF p_version IS NULL THEN
        RETURN p_source.config;
    END IF;
    SELECT v.config INTO v_config FROM holdfast.agent_config_versions v
     WHERE v.agent_id = p_source.id AND v.version = p_version;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF422', format('agent %s has no config version %s', p_source.id, p_version),
                               'version');
    END IF;
    RETURN v_config;
END
$$;


--
-- Name: spawn_subagent(uuid, bigint, uuid, jsonb, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.spawn_subagent(p_agent uuid, p_epoch bigint, p_tool_call uuid, p_config jsonb, p_prompt text) RETURNS uuid
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_parent holdfast.agents;
    v_root holdfast.agents;
    v_call holdfast.tool_calls;
    v_child uuid;
    v_limit text;
    v_value integer;
    v_message text;
BEGIN
    v_parent := holdfast.lock_leased_agent(p_agent, p_epoch);
    SELECT * INTO v_call FROM holdfast.tool_calls WHERE id = p_tool_call AND agent_id = p_agent FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('tool call %s not found', p_tool_call));
    END IF;
    IF v_call.status <> 'pending' THEN
        PERFORM holdfast.raise('HF409', format('tool call %s is %s', p_tool_call, v_call.status));
    END IF;
    IF p_prompt IS NULL OR btrim(p_prompt) = '' THEN
        PERFORM holdfast.raise('HF422', 'prompt must be a non-empty string', 'prompt');
    END IF;
    IF v_parent.root_agent_id IS NULL THEN
        v_root := v_parent;
    ELSE
        v_root := holdfast.lock_agent(v_parent.root_agent_id);
    END IF;

    v_value := holdfast.agent_limit(v_root.config, 'max_subagent_depth');
    IF v_parent.subagent_depth + 1 > v_value THEN
        v_limit := 'max_subagent_depth';
        v_message := format('this agent is at subagent depth %s; its tree may be at most %s deep',
                            v_parent.subagent_depth, v_value);
    END IF;
    IF v_limit IS NULL THEN
        v_value := holdfast.agent_limit(v_parent.config, 'max_live_children');
        IF (SELECT count(*) FROM holdfast.tool_calls t
             WHERE t.agent_id = p_agent AND t.status = 'waiting' AND t.child_agent_id IS NOT NULL) >= v_value THEN
            v_limit := 'max_live_children';
            v_message := format('this agent already has %s subagents running, the most it may have at once', v_value);
        END IF;
    END IF;
    IF v_limit IS NULL THEN
        v_value := holdfast.agent_limit(v_root.config, 'max_descendants');
        IF (SELECT count(*) FROM holdfast.agents d WHERE d.root_agent_id = v_root.id) >= v_value THEN
            v_limit := 'max_descendants';
            v_message := format('this agent''s tree already has %s subagents, the most it may have', v_value);
        END IF;
    END IF;
    IF v_limit IS NOT NULL THEN
        PERFORM holdfast.commit_tool_result(p_agent, p_epoch, p_tool_call, jsonb_build_object(
            'type', 'limit_exceeded', 'limit', v_limit, 'value', v_value,
            'message', format('The subagent was not started: %s (limits.%s).', v_message, v_limit)), true);
        RETURN NULL;
    END IF;

    v_child := holdfast.create_agent(v_parent.project_id, p_config);
    UPDATE holdfast.agents
       SET parent_tool_call_id = p_tool_call, subagent_depth = v_parent.subagent_depth + 1,
           root_agent_id = v_root.id
     WHERE id = v_child;
    UPDATE holdfast.tool_calls SET status = 'waiting', child_agent_id = v_child WHERE id = p_tool_call;
    PERFORM holdfast.append_event(p_agent, 'subagent.started', jsonb_build_object(
        'tool_call_id', p_tool_call, 'child_agent_id', v_child, 'prompt', p_prompt));
    PERFORM holdfast.create_input(v_child, to_jsonb(p_prompt), NULL);
    RETURN v_child;
END
$$;


--
-- Name: start_machine_wake(uuid, uuid, interval); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.start_machine_wake(p_project uuid, p_machine uuid, p_window interval) RETURNS TABLE(machine_id uuid, name text, wake_url text, wake_until timestamp with time zone)
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: start_tool_call(uuid, bigint, uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.start_tool_call(p_agent uuid, p_epoch bigint, p_tool_call uuid) RETURNS void
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
BEGIN
    PERFORM holdfast.lock_leased_agent(p_agent, p_epoch);
    UPDATE holdfast.tool_calls SET status = 'running', running_epoch = p_epoch
     WHERE id = p_tool_call AND agent_id = p_agent AND status = 'pending';
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF409', format('tool call %s is not pending', p_tool_call));
    END IF;
END
$$;


--
-- Name: store_attachments(uuid, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.store_attachments(p_agent uuid, p_blocks jsonb) RETURNS jsonb
    LANGUAGE plpgsql
    AS $_$
DECLARE
    v_hashes bytea[];
BEGIN
    IF jsonb_typeof(p_blocks) IS DISTINCT FROM 'array'
       OR NOT p_blocks @? '$[*].source ? (@.type == "base64")' THEN
        RETURN p_blocks;
    END IF;
    WITH files AS MATERIALIZED (
        SELECT b.ordinality, b.value #>> '{source,media_type}' AS media_type, f.data, sha256(f.data) AS sha256
          FROM jsonb_array_elements(p_blocks) WITH ORDINALITY b
         CROSS JOIN LATERAL (SELECT holdfast.block_file_data(b.value) AS data) f
    ), inserted AS (
        INSERT INTO holdfast.attachments (agent_id, media_type, sha256, size_bytes, data)
        SELECT p_agent, f.media_type, f.sha256, octet_length(f.data), f.data
          FROM files f
         WHERE f.data IS NOT NULL
        ON CONFLICT (agent_id, sha256, media_type) DO NOTHING
    )
    SELECT array_agg(f.sha256 ORDER BY f.ordinality) INTO v_hashes FROM files f;
    RETURN holdfast.referenced_content(p_agent, p_blocks, v_hashes);
END
$_$;


--
-- Name: store_tool_output(holdfast.agents, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.store_tool_output(p_agent holdfast.agents, p_output jsonb, OUT output jsonb, OUT message text, OUT field text) RETURNS record
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NOT holdfast.is_media_blocks(p_output) THEN
        output := p_output;
        RETURN;
    END IF;
    SELECT * INTO message, field FROM holdfast.content_problem(p_output, 'output', p_agent.config #>> '{model,provider}');
    IF message IS NULL THEN
        SELECT * INTO message, field FROM holdfast.file_set_problem(p_agent, p_output, 'output');
    END IF;
    IF message IS NULL THEN
        output := holdfast.store_attachments(p_agent.id, p_output);
    END IF;
END
$$;


--
-- Name: stored_content(uuid, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.stored_content(p_agent uuid, p_blocks jsonb) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    AS $_$
BEGIN
    IF jsonb_typeof(p_blocks) IS DISTINCT FROM 'array'
       OR NOT p_blocks @? '$[*].source ? (@.type == "base64")' THEN
        RETURN p_blocks;
    END IF;
    RETURN holdfast.referenced_content(p_agent, p_blocks,
        ARRAY(SELECT sha256(holdfast.block_file_data(b.value))
                FROM jsonb_array_elements(p_blocks) WITH ORDINALITY b
               ORDER BY b.ordinality));
END
$_$;


--
-- Name: stream_delta(uuid, bigint, text, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.stream_delta(p_agent uuid, p_epoch bigint, p_kind text, p_text text) RETURNS void
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: submit_command_result(uuid, uuid, text, integer, text, text, boolean, boolean, boolean, integer, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.submit_command_result(p_machine uuid, p_command uuid, p_state text, p_exit_code integer, p_stdout text, p_stderr text, p_stdout_truncated boolean DEFAULT false, p_stderr_truncated boolean DEFAULT false, p_timed_out boolean DEFAULT false, p_signal integer DEFAULT NULL::integer, p_limit text DEFAULT NULL::text) RETURNS text
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: submit_tool_result(uuid, jsonb, boolean); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.submit_tool_result(p_tool_call uuid, p_output jsonb, p_is_error boolean) RETURNS holdfast.tool_calls
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_result record;
BEGIN
    SELECT * INTO v_result
      FROM holdfast.submit_tool_results(ARRAY[ROW(p_tool_call, p_output, p_is_error)::holdfast.tool_result]);
    CASE v_result.outcome
        WHEN 'completed' THEN RETURN v_result.tool_call;
        WHEN 'not_found' THEN PERFORM holdfast.raise('HF404', v_result.message);
        WHEN 'conflict' THEN PERFORM holdfast.raise('HF409', v_result.message);
        ELSE PERFORM holdfast.raise('HF422', v_result.message, v_result.field);
    END CASE;
    RETURN NULL;
END
$$;


--
-- Name: submit_tool_results(holdfast.tool_result[]); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.submit_tool_results(p_results holdfast.tool_result[]) RETURNS TABLE(ord integer, outcome text, message text, field text, tool_call holdfast.tool_calls)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_row record;
    v_agent holdfast.agents;
    v_data jsonb;
    v_stored record;
    v_agents uuid[];
BEGIN
    -- Each result's agent (NULL for no such call), in p_results' order,
    -- looked up once by the call's key: a scalar subquery per result,
    -- never a join whose plan the session's first call fixed (see
    -- lock_agents). A call's agent never changes, so it holds after the lock.
    v_agents := ARRAY(
        SELECT (SELECT t.agent_id FROM holdfast.tool_calls t WHERE t.id = r.tool_call_id)
          FROM unnest(p_results) WITH ORDINALITY AS r(tool_call_id, output, is_error, ord)
         ORDER BY r.ord);
    PERFORM 1 FROM holdfast.lock_agents(v_agents);
    FOR v_row IN
        SELECT u.ord::integer AS ord, u.tool_call_id, u.output, u.is_error, u.agent_id
          FROM unnest(p_results, v_agents) WITH ORDINALITY AS u(tool_call_id, output, is_error, agent_id, ord)
         ORDER BY u.agent_id, u.ord
    LOOP
        ord := v_row.ord;
        message := NULL;
        field := NULL;
        tool_call := NULL;
        IF v_row.output IS NULL THEN
            outcome := 'invalid';
            message := 'output must not be null';
            field := 'output';
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF v_row.agent_id IS NULL THEN
            outcome := 'not_found';
            message := format('tool call %s not found', v_row.tool_call_id);
            RETURN NEXT;
            CONTINUE;
        END IF;
        SELECT * INTO tool_call FROM holdfast.tool_calls
         WHERE agent_id = v_row.agent_id AND id = v_row.tool_call_id FOR UPDATE;
        IF tool_call.kind <> 'custom' THEN
            outcome := 'conflict';
            message := format('tool call %s is a %s call, not a custom one', tool_call.id, tool_call.kind);
        ELSIF tool_call.status <> 'waiting' THEN
            outcome := 'conflict';
            message := format('tool call %s is %s', tool_call.id, tool_call.status);
        ELSE
            -- Image and document blocks: checked, their files stored once.
            SELECT * INTO v_agent FROM holdfast.agents WHERE id = tool_call.agent_id;
            SELECT * INTO v_stored FROM holdfast.store_tool_output(v_agent, v_row.output);
            outcome := CASE WHEN v_stored.message IS NULL THEN 'completed' ELSE 'invalid' END;
            message := v_stored.message;
            field := v_stored.field;
        END IF;
        IF outcome = 'completed' THEN
            UPDATE holdfast.tool_calls
               SET status = 'completed', output = v_stored.output,
                   is_error = coalesce(v_row.is_error, false), completed_at = holdfast.now()
             WHERE agent_id = tool_call.agent_id AND id = tool_call.id
            RETURNING * INTO tool_call;
            v_data := holdfast.tool_call_completed_data(tool_call.id, tool_call.name, v_stored.output,
                                                        tool_call.is_error);
            -- v_agent was read for store_tool_output above; nothing since
            -- has written the agent row.
            IF v_agent.state <> 'running' THEN
                PERFORM holdfast.settle_agent(tool_call.agent_id, ARRAY['tool_call.completed'], ARRAY[v_data], NULL);
            ELSE
                PERFORM holdfast.append_event(tool_call.agent_id, 'tool_call.completed', v_data);
            END IF;
        END IF;
        IF outcome <> 'completed' THEN
            tool_call := NULL;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;


--
-- Name: tg_agents_send_wake(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.tg_agents_send_wake() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: tg_agents_state_changed(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.tg_agents_state_changed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.state IS DISTINCT FROM OLD.state THEN
        NEW.state_changed_at := holdfast.now();
    END IF;
    RETURN NEW;
END
$$;


--
-- Name: tg_attachments_count(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.tg_attachments_count() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_sign integer := TG_ARGV[0]::integer;
    v_quota holdfast.attachment_quotas;
    v_over record;
BEGIN
    WITH per_agent AS (
        SELECT c.agent_id, v_sign * sum(c.size_bytes) AS bytes FROM changed c GROUP BY c.agent_id
    ), updated_agents AS (
        UPDATE holdfast.agents a SET attachment_bytes = a.attachment_bytes + p.bytes
          FROM per_agent p WHERE a.id = p.agent_id
        RETURNING a.id, a.project_id, a.attachment_bytes, p.bytes
    ), updated_projects AS (
        INSERT INTO holdfast.project_attachment_bytes AS t (project_id, bytes)
        SELECT g.project_id, sum(g.bytes) FROM updated_agents g GROUP BY g.project_id ORDER BY g.project_id
        ON CONFLICT (project_id) DO UPDATE SET bytes = t.bytes + EXCLUDED.bytes
        RETURNING t.project_id, t.bytes
    )
    SELECT (SELECT max(g.attachment_bytes) FROM updated_agents g WHERE g.attachment_bytes > q.max_agent_bytes)
               AS agent_bytes,
           (SELECT max(p.bytes) FROM updated_projects p WHERE p.bytes > q.max_project_bytes) AS project_bytes,
           q.max_agent_bytes, q.max_project_bytes
      INTO v_over
      FROM holdfast.attachment_quotas q;
    IF v_sign > 0 AND v_over.agent_bytes IS NOT NULL THEN
        PERFORM holdfast.raise('HF422', format('attachment_quota_exceeded: the agent''s files would total %s bytes; '
                                               'max_attachment_bytes_per_agent is %s',
                                               v_over.agent_bytes, v_over.max_agent_bytes), 'content');
    ELSIF v_sign > 0 AND v_over.project_bytes IS NOT NULL THEN
        PERFORM holdfast.raise('HF422', format('attachment_quota_exceeded: the project''s files would total %s bytes; '
                                               'max_attachment_bytes_per_project is %s',
                                               v_over.project_bytes, v_over.max_project_bytes), 'content');
    END IF;
    RETURN NULL;
END
$$;


--
-- Name: tg_commands_notify_queued(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.tg_commands_notify_queued() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('holdfast_commands', NEW.machine_id::text);
    RETURN NULL;
END
$$;


--
-- Name: tg_events_advance_replay(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.tg_events_advance_replay() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_replay holdfast.replays;
BEGIN
    SELECT r.* INTO v_replay FROM holdfast.replays r
     WHERE r.agent_id = NEW.agent_id AND r.status = 'running' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF NEW.type = 'turn.completed' AND v_replay.turns_sent < cardinality(v_replay.source_turns) THEN
        PERFORM holdfast.send_replay_turn(v_replay);
        RETURN NULL;
    END IF;
    UPDATE holdfast.replays
       SET status = CASE WHEN NEW.type = 'turn.completed' THEN 'completed' ELSE 'failed' END,
           error = CASE WHEN NEW.type = 'turn.completed' THEN NULL
                        ELSE coalesce(NEW.data -> 'error', jsonb_build_object('type', NEW.type)) END,
           completed_at = holdfast.now()
     WHERE id = v_replay.id
    RETURNING * INTO v_replay;
    PERFORM holdfast.append_event(NEW.agent_id, 'replay.completed', jsonb_build_object(
        'replay_id', v_replay.id, 'source_agent_id', v_replay.source_agent_id, 'status', v_replay.status,
        'error', v_replay.error, 'turns_replayed', v_replay.turns_sent,
        'turns_total', cardinality(v_replay.source_turns)));
    RETURN NULL;
END
$$;


--
-- Name: tg_events_finish_subagent(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.tg_events_finish_subagent() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_call holdfast.tool_calls;
    v_answer text;
    v_is_error boolean := NEW.type <> 'turn.completed';
BEGIN
    SELECT t.* INTO v_call FROM holdfast.tool_calls t
      JOIN holdfast.agents c ON c.parent_tool_call_id = t.id
     WHERE c.id = NEW.agent_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM holdfast.lock_agent(v_call.agent_id);
    SELECT * INTO v_call FROM holdfast.tool_calls WHERE id = v_call.id FOR UPDATE;
    IF v_call.status <> 'waiting' THEN
        RETURN NULL;  -- the parent's turn moved on (cancelled): nothing to deliver
    END IF;
    SELECT string_agg(b.value ->> 'text', E'\n' ORDER BY b.ordinality) INTO v_answer
      FROM (SELECT content FROM holdfast.messages
             WHERE agent_id = NEW.agent_id AND role = 'assistant' ORDER BY seq DESC LIMIT 1) m,
           jsonb_array_elements(m.content) WITH ORDINALITY b
     WHERE b.value ->> 'type' = 'text';
    IF v_is_error THEN
        v_answer := format('The subagent''s turn ended with %s: %s', NEW.type,
                           coalesce(NEW.data #>> '{error,message}', 'no answer'));
    END IF;
    PERFORM holdfast.complete_waiting_call(v_call, to_jsonb(coalesce(v_answer, '')), v_is_error,
        'subagent.finished', jsonb_build_object('tool_call_id', v_call.id, 'child_agent_id', NEW.agent_id,
                                                'outcome', NEW.type));
    RETURN NULL;
END
$$;


--
-- Name: tg_events_notify(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.tg_events_notify() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('holdfast_events', n.agent_id::text)
       FROM (SELECT DISTINCT e.agent_id FROM new_events e) n
      WHERE current_setting('transaction_isolation') <> 'read committed'
         OR EXISTS (SELECT 1 FROM holdfast.stream_watches w WHERE w.agent_id = n.agent_id);
    RETURN NULL;
END
$$;


--
-- Name: tg_events_open_tool_wait(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.tg_events_open_tool_wait() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM holdfast.open_tool_wait((NEW.data ->> 'id')::uuid);
    RETURN NULL;
END
$$;


--
-- Name: tg_events_webhook_outbox(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.tg_events_webhook_outbox() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_inserted integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM holdfast.webhook_endpoints e WHERE e.deleted_at IS NULL) THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM holdfast.webhook_endpoints e
                    WHERE e.deleted_at IS NULL
                      AND e.project_id IN (SELECT a.project_id FROM new_events n
                                             JOIN holdfast.agents a ON a.id = n.agent_id)) THEN
        RETURN NULL;
    END IF;
    INSERT INTO holdfast.webhook_deliveries
           (endpoint_id, agent_id, event_seq, event_created_at, event_id, event_type, next_attempt_at,
            trace_parent, trace_state)
    SELECT e.id, n.agent_id, n.seq, n.created_at, n.id, n.type, holdfast.now(),
           a.turn_trace_parent, a.turn_trace_state
      FROM new_events n
      JOIN holdfast.agents a ON a.id = n.agent_id
      JOIN holdfast.webhook_endpoints e ON e.project_id = a.project_id
     WHERE e.deleted_at IS NULL
       AND ('*' = ANY (e.events) OR n.type = ANY (e.events))
     ORDER BY n.agent_id, n.seq, e.id;
    GET DIAGNOSTICS v_inserted = ROW_COUNT;
    IF v_inserted > 0 THEN
        PERFORM pg_notify('holdfast_webhooks', '');
    END IF;
    RETURN NULL;
END
$$;


--
-- Name: tg_inputs_reset_retry_budget(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.tg_inputs_reset_retry_budget() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.admitted_at IS NULL THEN
        RETURN NULL;
    END IF;
    UPDATE holdfast.agents SET model_attempts = 0 WHERE id = NEW.agent_id AND model_attempts <> 0;
    RETURN NULL;
END
$$;


--
-- Name: tg_tool_calls_cancel_command(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.tg_tool_calls_cancel_command() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE holdfast.commands SET state = 'cancelled', reason = 'cancelled', resolved_at = holdfast.now()
     WHERE tool_call_id = NEW.id AND state IN ('queued', 'accepted');
    RETURN NULL;
END
$$;


--
-- Name: tg_tool_calls_cancel_subagent(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.tg_tool_calls_cancel_subagent() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_child holdfast.agents;
BEGIN
    SELECT * INTO v_child FROM holdfast.agents WHERE id = NEW.child_agent_id FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        INSERT INTO holdfast.subagent_cancels (tool_call_id, child_agent_id)
        VALUES (NEW.id, NEW.child_agent_id) ON CONFLICT DO NOTHING;
        RETURN NULL;
    END IF;
    PERFORM holdfast.cancel_locked_turn(v_child);
    RETURN NULL;
END
$$;


--
-- Name: tg_tool_calls_cancel_waits(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.tg_tool_calls_cancel_waits() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE holdfast.approvals SET status = 'cancelled' WHERE tool_call_id = NEW.id AND status = 'pending';
    UPDATE holdfast.questions SET status = 'cancelled' WHERE tool_call_id = NEW.id AND status = 'pending';
    RETURN NULL;
END
$$;


--
-- Name: token_count(jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.token_count(p_value jsonb) RETURNS bigint
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE WHEN jsonb_typeof(p_value) = 'number'
                THEN least(greatest(trunc(p_value::numeric), 0), 1000000000000)::bigint
                ELSE 0 END
$$;


--
-- Name: tool_call_completed_data(uuid, text, jsonb, boolean); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.tool_call_completed_data(p_call_id uuid, p_name text, p_output jsonb, p_is_error boolean) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE
        WHEN octet_length(p_output::text) <= 16384 THEN
            jsonb_build_object('tool_call_id', p_call_id, 'name', p_name, 'output', p_output,
                               'is_error', p_is_error)
        ELSE
            jsonb_build_object('tool_call_id', p_call_id, 'name', p_name, 'is_error', p_is_error,
                               'output_omitted', true, 'output_bytes', octet_length(p_output::text),
                               'output_preview', left(p_output #>> '{}', 1024))
    END
$$;


--
-- Name: turn_answer(uuid, bigint); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.turn_answer(p_agent uuid, p_turn bigint) RETURNS text
    LANGUAGE sql STABLE
    AS $$
    SELECT string_agg(b.value ->> 'text', E'\n' ORDER BY b.ordinality)
      FROM (SELECT m.content FROM holdfast.messages m JOIN holdfast.steps s ON s.id = m.step_id
             WHERE m.agent_id = p_agent AND s.agent_id = p_agent AND s.turn_seq = p_turn AND m.role = 'assistant'
             ORDER BY m.seq DESC LIMIT 1) m,
           jsonb_array_elements(m.content) WITH ORDINALITY b
     WHERE b.value ->> 'type' = 'text'
$$;


--
-- Name: turn_inputs(uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.turn_inputs(p_agent uuid) RETURNS SETOF holdfast.inputs
    LANGUAGE sql STABLE
    AS $$
    SELECT * FROM holdfast.inputs i
     WHERE i.agent_id = p_agent AND i.consumed_at IS NULL
       AND i.admitted_at IS NOT NULL AND i.removed_at IS NULL
     ORDER BY i.created_at, i.id
$$;


--
-- Name: turn_model_usage(uuid, bigint); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.turn_model_usage(p_agent uuid, p_turn bigint) RETURNS holdfast.token_usage
    LANGUAGE sql STABLE
    AS $$
    SELECT ROW(coalesce(sum((s.usage).input_tokens), 0), coalesce(sum((s.usage).output_tokens), 0),
               coalesce(sum((s.usage).cache_read_tokens), 0), coalesce(sum((s.usage).cache_write_tokens), 0),
               coalesce(sum((s.usage).reasoning_tokens), 0), sum((s.usage).cost_usd),
               coalesce(sum((s.usage).server_tool_requests), 0), coalesce(sum((s.usage).web_search_requests), 0)
              )::holdfast.token_usage
      FROM holdfast.steps s
     WHERE s.agent_id = p_agent AND s.kind IN ('model', 'compaction') AND s.turn_seq = p_turn
$$;


--
-- Name: turn_outcome(text, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.turn_outcome(p_type text, p_data jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE p_type
        WHEN 'turn.completed' THEN 'completed'
        WHEN 'turn.cancelled' THEN 'cancelled'
        WHEN 'turn.failed' THEN
            CASE WHEN p_data #>> '{error,type}' IN ('limit_exceeded', 'budget_exceeded')
                 THEN 'limit' ELSE 'failed' END
    END
$$;


--
-- Name: turn_tool_calls(uuid, bigint); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.turn_tool_calls(p_agent uuid, p_turn bigint) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'tool_call_id', t.id, 'name', t.name, 'input', t.input, 'status', t.status,
               'output', t.output, 'is_error', t.is_error) ORDER BY s.step_seq, t.position), '[]')
      FROM holdfast.tool_calls t JOIN holdfast.steps s ON s.id = t.step_id
     WHERE t.agent_id = p_agent AND s.agent_id = p_agent AND s.turn_seq = p_turn
$$;


--
-- Name: turn_trace_context(uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.turn_trace_context(p_agent uuid, OUT parent text, OUT state text) RETURNS record
    LANGUAGE sql
    AS $$
    SELECT t.parent, t.state FROM holdfast.next_turn_trace_context(p_agent, '{}') t;
$$;


--
-- Name: unsandboxed_machines(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.unsandboxed_machines() RETURNS TABLE(machine_id uuid, project_id uuid, name text, last_heartbeat_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT m.id, m.project_id, m.name, m.last_heartbeat_at
      FROM holdfast.machines m CROSS JOIN holdfast.machine_settings s
     WHERE m.deleted_at IS NULL AND m.daemon_sandboxed IS FALSE
       AND m.last_heartbeat_at > holdfast.now() - s.offline_after
     ORDER BY m.project_id, m.name
$$;


--
-- Name: unwatch_agent_events(uuid); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.unwatch_agent_events(p_watch uuid) RETURNS void
    LANGUAGE sql
    AS $$
    DELETE FROM holdfast.stream_watches WHERE id = p_watch;
$$;


--
-- Name: update_agent_config(uuid, jsonb, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.update_agent_config(p_agent uuid, p_config jsonb, p_apply text DEFAULT 'now'::text) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_agent holdfast.agents;
    v_latest record;
    v_config jsonb;
    v_version integer;
BEGIN
    IF p_apply IS NULL OR p_apply NOT IN ('now', 'next_turn') THEN
        PERFORM holdfast.raise('HF422', 'apply must be now or next_turn', 'apply');
    END IF;
    PERFORM holdfast.validate_config(p_config);
    v_agent := holdfast.lock_agent(p_agent);
    IF v_agent.state = 'archived' THEN
        PERFORM holdfast.raise('HF409', format('agent %s is archived', p_agent));
    END IF;
    v_latest := holdfast.latest_config_version(v_agent);
    v_config := holdfast.keep_masked_secrets(v_latest.config, p_config);
    IF v_latest.config = v_config THEN
        RETURN holdfast.mask_config_secrets(v_config);
    END IF;
    PERFORM holdfast.validate_model_access(v_agent.project_id, v_config);
    v_version := v_latest.version + 1;
    INSERT INTO holdfast.agent_config_versions (agent_id, version, config)
    VALUES (p_agent, v_version, v_config);
    IF p_apply = 'next_turn' AND v_agent.turn_open THEN
        UPDATE holdfast.agents SET next_turn_config_version = v_version, updated_at = holdfast.now()
         WHERE id = p_agent;
    ELSE
        UPDATE holdfast.agents
           SET config = v_config, config_version = v_version, next_turn_config_version = NULL,
               updated_at = holdfast.now()
         WHERE id = p_agent;
    END IF;
    PERFORM holdfast.append_event(p_agent, 'config.updated', jsonb_build_object(
        'config', holdfast.mask_config_secrets(v_config),
        'version', v_version,
        'apply', p_apply,
        'diff', holdfast.jsonb_merge_diff(holdfast.mask_config_secrets(v_latest.config),
                                          holdfast.mask_config_secrets(v_config))));
    RETURN holdfast.mask_config_secrets(v_config);
END
$$;


--
-- Name: update_input(uuid, text, integer); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.update_input(p_input uuid, p_mode text DEFAULT NULL::text, p_position integer DEFAULT NULL::integer) RETURNS holdfast.inputs
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_input holdfast.inputs;
    v_agent holdfast.agents;
    v_place integer;
BEGIN
    IF p_mode IS NOT NULL AND p_mode NOT IN ('steer', 'queue') THEN
        PERFORM holdfast.raise('HF422', 'mode must be steer or queue', 'mode');
    END IF;
    IF p_position < 1 THEN
        PERFORM holdfast.raise('HF422', 'position counts from 1', 'position');
    END IF;
    SELECT * INTO v_input FROM holdfast.inputs WHERE id = p_input;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('input %s not found', p_input));
    END IF;
    v_agent := holdfast.lock_agent(v_input.agent_id);
    SELECT * INTO v_input FROM holdfast.inputs WHERE id = p_input FOR UPDATE;
    IF v_input.removed_at IS NOT NULL OR v_input.consumed_at IS NOT NULL THEN
        PERFORM holdfast.raise('HF409', format('input %s no longer waits: it was %s', p_input,
                               CASE WHEN v_input.removed_at IS NOT NULL THEN 'removed' ELSE 'consumed' END));
    END IF;
    IF v_agent.state = 'archived' THEN
        PERFORM holdfast.raise('HF409', format('agent %s is archived', v_agent.id));
    END IF;
    IF p_mode = 'steer' AND v_input.admitted_at IS NULL THEN
        UPDATE holdfast.inputs SET mode = 'steer', admitted_at = holdfast.now(), queue_position = NULL
         WHERE id = p_input RETURNING * INTO v_input;
    ELSIF p_mode = 'queue' AND v_input.admitted_at IS NOT NULL THEN
        IF v_agent.turn_model_steps = 0 AND NOT EXISTS (
               SELECT 1 FROM holdfast.turn_inputs(v_agent.id) t WHERE t.id <> p_input) THEN
            PERFORM holdfast.raise('HF409', format(
                'input %s alone opened the turn, which has not called the model yet: it cannot go back to the queue',
                p_input), 'mode');
        END IF;
        UPDATE holdfast.inputs SET mode = 'queue', admitted_at = NULL
         WHERE id = p_input RETURNING * INTO v_input;
    END IF;
    IF p_position IS NOT NULL THEN
        IF v_input.admitted_at IS NOT NULL THEN
            PERFORM holdfast.raise('HF409', format('input %s is not queued: only a queued input has a position', p_input), 'position');
        END IF;
        SELECT least(p_position, count(*)) INTO v_place FROM holdfast.inputs i
         WHERE i.agent_id = v_agent.id AND i.admitted_at IS NULL AND i.removed_at IS NULL;
        UPDATE holdfast.inputs i
           SET queue_position = CASE WHEN i.id = p_input THEN v_place
                                     ELSE o.n + (o.n >= v_place)::integer END
          FROM (SELECT q.id, (row_number() OVER (ORDER BY q.queue_position, q.created_at, q.id))::integer AS n
                  FROM holdfast.inputs q
                 WHERE q.agent_id = v_agent.id AND q.admitted_at IS NULL AND q.removed_at IS NULL
                   AND q.id <> p_input
                 UNION ALL
                SELECT p_input, NULL) o
         WHERE i.id = o.id;
        SELECT * INTO v_input FROM holdfast.inputs WHERE id = p_input;
    END IF;
    PERFORM holdfast.append_event(v_agent.id, 'input.updated', jsonb_build_object(
        'input_id', p_input, 'mode', v_input.mode,
        'position', (SELECT q.n FROM (
                        SELECT i.id, row_number() OVER (ORDER BY i.queue_position, i.created_at, i.id) AS n
                          FROM holdfast.inputs i
                         WHERE i.agent_id = v_agent.id AND i.admitted_at IS NULL AND i.removed_at IS NULL) q
                      WHERE q.id = p_input)));
    -- As for a new input (insert_input): an idle agent opens a turn for it.
    IF v_agent.state = 'idle' THEN
        PERFORM holdfast.settle_agent(v_agent.id);
    END IF;
    RETURN v_input;
END
$$;


--
-- Name: usage_from_json(jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.usage_from_json(p_usage jsonb) RETURNS holdfast.token_usage
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT ROW(holdfast.token_count(p_usage -> 'input_tokens'),
               holdfast.token_count(p_usage -> 'output_tokens'),
               holdfast.token_count(p_usage -> 'cache_read_tokens'),
               holdfast.token_count(p_usage -> 'cache_write_tokens'),
               holdfast.token_count(p_usage -> 'reasoning_tokens'),
               NULL,
               holdfast.token_count(p_usage -> 'server_tool_requests'),
               holdfast.token_count(p_usage -> 'web_search_requests'))::holdfast.token_usage
$$;


--
-- Name: usage_json(holdfast.token_usage); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.usage_json(p_usage holdfast.token_usage) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    SELECT jsonb_build_object(
        'input_tokens', (p_usage).input_tokens,
        'output_tokens', (p_usage).output_tokens,
        'cache_read_tokens', (p_usage).cache_read_tokens,
        'cache_write_tokens', (p_usage).cache_write_tokens,
        'reasoning_tokens', (p_usage).reasoning_tokens,
        'cost_usd', (p_usage).cost_usd,
        'server_tool_requests', coalesce((p_usage).server_tool_requests, 0),
        'web_search_requests', coalesce((p_usage).web_search_requests, 0))
$$;


--
-- Name: validate_config(jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.validate_config(p_config jsonb) RETURNS void
    LANGUAGE plpgsql
    AS $_$
DECLARE
    v_tool jsonb;
    v_i integer := 0;
    v_names text[] := '{}';
    v_name text;
    v_type text;
    v_at text;
    v_known text[];
    v_value jsonb;
    v_max integer;
    v_thinks boolean;
    v_bound numeric;
    v_owner text;
    v_choice jsonb;
    v_server_tools text[] := '{}';
BEGIN
    IF p_config IS NULL OR jsonb_typeof(p_config) <> 'object' THEN
        PERFORM holdfast.raise('HF422', 'config must be a JSON object', 'config');
    END IF;
    PERFORM holdfast.refuse_unknown_keys(p_config,
        '{model,system,tools,approvals,metadata,limits,budget}', '');
    IF jsonb_typeof(p_config -> 'model') IS DISTINCT FROM 'object' THEN
        PERFORM holdfast.raise('HF422', 'model must be an object', 'model');
    END IF;
    PERFORM holdfast.refuse_unknown_keys(p_config -> 'model',
        '{provider,name,endpoint,base_url,max_tokens,thinking,cache,temperature,top_p,top_k,stop_sequences,stop,seed,user,service_tier,reasoning_effort,parallel_tool_calls,tool_choice}',
        'model.');
    IF NOT coalesce(p_config #>> '{model,provider}' IN ('anthropic', 'openai', 'openai_responses'), false)
       OR jsonb_typeof(p_config #> '{model,provider}') <> 'string' THEN
        PERFORM holdfast.raise('HF422', 'model.provider must be "anthropic", "openai" or "openai_responses"', 'model.provider');
    END IF;
    IF jsonb_typeof(p_config #> '{model,name}') IS DISTINCT FROM 'string'
       OR p_config #>> '{model,name}' = '' THEN
        PERFORM holdfast.raise('HF422', 'model.name must be a non-empty string', 'model.name');
    END IF;
    -- MAX_MODEL_NAME_CHARS in wire/src/config.rs: the name is a metrics
    -- label, which a tenant must not make arbitrarily large.
    IF char_length(p_config #>> '{model,name}') > 256 THEN
        PERFORM holdfast.raise('HF422', 'model.name must be at most 256 characters', 'model.name');
    END IF;
    IF p_config #> '{model,endpoint}' IS NOT NULL
       AND jsonb_typeof(p_config #> '{model,endpoint}') <> 'string' THEN
        PERFORM holdfast.raise('HF422', 'model.endpoint must be a string (an endpoint name)', 'model.endpoint');
    END IF;
    IF p_config #> '{model,base_url}' IS NOT NULL
       AND (jsonb_typeof(p_config #> '{model,base_url}') <> 'string'
            OR p_config #>> '{model,base_url}' !~ '^https?://') THEN
        PERFORM holdfast.raise('HF422', 'model.base_url must be an http(s) URL', 'model.base_url');
    END IF;
    -- The integer ranges are the worker's u32.
    IF p_config #> '{model,max_tokens}' IS NOT NULL
       AND NOT holdfast.is_integer_between(p_config #> '{model,max_tokens}', 1, 4294967295) THEN
        PERFORM holdfast.raise('HF422', 'model.max_tokens must be an integer from 1 to 4294967295', 'model.max_tokens');
    END IF;
    -- The sampling and provider settings (ModelConfig::check in
    -- wire/src/config.rs): first each one's type, then which
    -- provider has it, then its range.
    v_value := p_config #> '{model,thinking}';
    IF v_value IS NOT NULL THEN
        IF jsonb_typeof(v_value) <> 'object' OR jsonb_typeof(v_value -> 'type') IS DISTINCT FROM 'string'
           OR v_value ->> 'type' NOT IN ('enabled', 'adaptive', 'disabled') THEN
            PERFORM holdfast.raise('HF422', 'model.thinking must be {"type": "enabled", "budget_tokens": n}, {"type": "adaptive"} or {"type": "disabled"}', 'model.thinking');
        END IF;
        PERFORM holdfast.refuse_unknown_keys(v_value,
            CASE WHEN v_value ->> 'type' = 'enabled' THEN '{type,budget_tokens}' ELSE '{type}' END::text[],
            'model.thinking.');
        IF v_value ->> 'type' = 'enabled'
           AND NOT holdfast.is_integer_between(v_value -> 'budget_tokens', 0, 4294967295) THEN
            PERFORM holdfast.raise('HF422', 'model.thinking.budget_tokens must be an integer', 'model.thinking.budget_tokens');
        END IF;
    END IF;
    FOREACH v_name IN ARRAY '{temperature,top_p}'::text[] LOOP
        IF p_config -> 'model' ? v_name AND jsonb_typeof(p_config -> 'model' -> v_name) <> 'number' THEN
            PERFORM holdfast.raise('HF422', format('model.%s must be a number', v_name), 'model.' || v_name);
        END IF;
    END LOOP;
    FOREACH v_name IN ARRAY '{cache,parallel_tool_calls}'::text[] LOOP
        IF p_config -> 'model' ? v_name AND jsonb_typeof(p_config -> 'model' -> v_name) <> 'boolean' THEN
            PERFORM holdfast.raise('HF422', format('model.%s must be true or false', v_name), 'model.' || v_name);
        END IF;
    END LOOP;
    FOREACH v_name IN ARRAY '{stop_sequences,stop}'::text[] LOOP
        IF p_config -> 'model' ? v_name
           AND (jsonb_typeof(p_config -> 'model' -> v_name) <> 'array'
                OR EXISTS (SELECT FROM jsonb_array_elements(p_config -> 'model' -> v_name) e
                            WHERE jsonb_typeof(e) <> 'string')) THEN
            PERFORM holdfast.raise('HF422', format('model.%s must be an array of strings', v_name), 'model.' || v_name);
        END IF;
    END LOOP;
    IF p_config #> '{model,top_k}' IS NOT NULL
       AND NOT holdfast.is_integer_between(p_config #> '{model,top_k}', 0, 4294967295) THEN
        PERFORM holdfast.raise('HF422', 'model.top_k must be an integer from 0 to 4294967295', 'model.top_k');
    END IF;
    -- Within i64 (the worker's type) by being at most 18 digits.
    IF p_config #> '{model,seed}' IS NOT NULL
       AND (jsonb_typeof(p_config #> '{model,seed}') <> 'number'
            OR p_config #>> '{model,seed}' !~ '^-?[0-9]{1,18}$') THEN
        PERFORM holdfast.raise('HF422', 'model.seed must be an integer of at most 18 digits', 'model.seed');
    END IF;
    IF p_config #> '{model,user}' IS NOT NULL AND jsonb_typeof(p_config #> '{model,user}') <> 'string' THEN
        PERFORM holdfast.raise('HF422', 'model.user must be a string', 'model.user');
    END IF;
    IF p_config #> '{model,service_tier}' IS NOT NULL
       AND (jsonb_typeof(p_config #> '{model,service_tier}') <> 'string'
            OR p_config #>> '{model,service_tier}' NOT IN ('auto', 'standard_only')) THEN
        PERFORM holdfast.raise('HF422', 'model.service_tier must be "auto" or "standard_only"', 'model.service_tier');
    END IF;
    IF p_config #> '{model,reasoning_effort}' IS NOT NULL
       AND (jsonb_typeof(p_config #> '{model,reasoning_effort}') <> 'string'
            OR p_config #>> '{model,reasoning_effort}' NOT IN ('none', 'minimal', 'low', 'medium', 'high', 'xhigh')) THEN
        PERFORM holdfast.raise('HF422', 'model.reasoning_effort must be "none", "minimal", "low", "medium", "high" or "xhigh"', 'model.reasoning_effort');
    END IF;
    v_choice := p_config #> '{model,tool_choice}';
    IF v_choice IS NOT NULL THEN
        IF jsonb_typeof(v_choice) <> 'object' OR jsonb_typeof(v_choice -> 'type') IS DISTINCT FROM 'string'
           OR v_choice ->> 'type' NOT IN ('auto', 'any', 'none', 'tool') THEN
            PERFORM holdfast.raise('HF422', 'model.tool_choice must be {"type": "auto"}, {"type": "any"}, {"type": "none"} or {"type": "tool", "name": ...}', 'model.tool_choice');
        END IF;
        PERFORM holdfast.refuse_unknown_keys(v_choice,
            CASE WHEN v_choice ->> 'type' = 'tool' THEN '{type,name}' ELSE '{type}' END::text[],
            'model.tool_choice.');
        IF v_choice ->> 'type' = 'tool' AND jsonb_typeof(v_choice -> 'name') IS DISTINCT FROM 'string' THEN
            PERFORM holdfast.raise('HF422', 'model.tool_choice.name must be a string', 'model.tool_choice.name');
        END IF;
    END IF;
    -- Each setting with the providers that have it, the first its owner.
    SELECT f.setting, f.owners[1] INTO v_name, v_owner
      FROM (VALUES (1, 'thinking', '{anthropic}'::text[]), (2, 'cache', '{anthropic}'),
                   (3, 'top_k', '{anthropic}'), (4, 'stop_sequences', '{anthropic}'),
                   (5, 'service_tier', '{anthropic}'), (6, 'stop', '{openai}'), (7, 'seed', '{openai}'),
                   (8, 'reasoning_effort', '{openai,openai_responses}')) AS f(n, setting, owners)
     WHERE p_config -> 'model' ? f.setting
       AND NOT p_config #>> '{model,provider}' = ANY (f.owners)
     ORDER BY f.n LIMIT 1;
    IF v_name IS NOT NULL THEN
        PERFORM holdfast.raise('HF422', format('%s is an %s setting (provider "%s")', v_name, CASE WHEN v_owner = 'anthropic' THEN 'Anthropic' ELSE 'OpenAI' END, v_owner), 'model.' || v_name);
    END IF;
    -- The budget is below the output limit: max_tokens, else the worker's
    -- default 4096 (DEFAULT_MAX_TOKENS in providers/src/anthropic.rs).
    IF v_value ->> 'type' = 'enabled'
       AND (v_value ->> 'budget_tokens')::bigint NOT BETWEEN 1024
           AND coalesce((p_config #>> '{model,max_tokens}')::bigint, 4096) - 1 THEN
        PERFORM holdfast.raise('HF422', format('thinking.budget_tokens must be at least 1024 and less than max_tokens (%s)', coalesce((p_config #>> '{model,max_tokens}')::bigint, 4096)), 'model.thinking.budget_tokens');
    END IF;
    -- (An IF's condition ends at its first THEN: bounds go in variables.)
    v_thinks := coalesce(v_value ->> 'type' IN ('enabled', 'adaptive'), false);
    IF p_config #> '{model,temperature}' IS NOT NULL THEN
        IF v_thinks THEN
            PERFORM holdfast.raise('HF422', 'temperature cannot be set with thinking', 'model.temperature');
        END IF;
        v_bound := CASE WHEN p_config #>> '{model,provider}' = 'anthropic' THEN 1 ELSE 2 END;
        IF (p_config #>> '{model,temperature}')::numeric NOT BETWEEN 0 AND v_bound THEN
            PERFORM holdfast.raise('HF422', format('temperature must be from 0 to %s', v_bound), 'model.temperature');
        END IF;
    END IF;
    v_bound := CASE WHEN v_thinks THEN 0.95 ELSE 0 END;
    IF (p_config #>> '{model,top_p}')::numeric NOT BETWEEN v_bound AND 1 THEN
        PERFORM holdfast.raise('HF422', format('top_p must be from %s to 1', v_bound), 'model.top_p');
    END IF;
    IF v_choice ->> 'type' = 'tool' AND v_choice ->> 'name' = '' THEN
        PERFORM holdfast.raise('HF422', 'tool_choice.name must be a tool''s name', 'model.tool_choice.name');
    END IF;
    IF v_thinks AND v_choice ->> 'type' IN ('any', 'tool') THEN
        PERFORM holdfast.raise('HF422', 'tool_choice any or tool cannot be set with thinking', 'model.tool_choice');
    END IF;
    IF p_config #> '{model,top_k}' IS NOT NULL AND v_thinks THEN
        PERFORM holdfast.raise('HF422', 'top_k cannot be set with thinking', 'model.top_k');
    END IF;
    IF EXISTS (SELECT FROM jsonb_array_elements_text(coalesce(p_config #> '{model,stop_sequences}', '[]')) e WHERE e = '') THEN
        PERFORM holdfast.raise('HF422', 'stop_sequences must be non-empty strings', 'model.stop_sequences');
    END IF;
    IF p_config #> '{model,stop}' IS NOT NULL
       AND (jsonb_array_length(p_config #> '{model,stop}') NOT BETWEEN 1 AND 4
            OR EXISTS (SELECT FROM jsonb_array_elements_text(p_config #> '{model,stop}') e WHERE e = '')) THEN
        PERFORM holdfast.raise('HF422', 'stop must be 1 to 4 non-empty strings', 'model.stop');
    END IF;
    IF char_length(p_config #>> '{model,user}') NOT BETWEEN 1 AND 256 THEN
        PERFORM holdfast.raise('HF422', 'user must be 1 to 256 characters', 'model.user');
    END IF;
    IF p_config ? 'system' AND jsonb_typeof(p_config -> 'system') <> 'string' THEN
        PERFORM holdfast.raise('HF422', 'system must be a string', 'system');
    END IF;
    IF p_config ? 'tools' THEN
        IF jsonb_typeof(p_config -> 'tools') <> 'array' THEN
            PERFORM holdfast.raise('HF422', 'tools must be an array', 'tools');
        END IF;
        FOR v_tool IN SELECT value FROM jsonb_array_elements(p_config -> 'tools') LOOP
            v_at := format('tools[%s]', v_i);
            IF jsonb_typeof(v_tool) <> 'object' THEN
                PERFORM holdfast.raise('HF422', 'each tool must be an object', v_at);
            END IF;
            v_type := CASE WHEN jsonb_typeof(v_tool -> 'type') = 'string' THEN v_tool ->> 'type' END;
            v_known := CASE v_type
                WHEN 'custom' THEN '{type,name,description,input_schema}'
                WHEN 'web_fetch' THEN '{type}'
                WHEN 'web_search' THEN '{type}'
                WHEN 'mcp' THEN '{type,name,url,headers}'
                WHEN 'ask_user' THEN '{type}'
                WHEN 'spawn_subagent' THEN '{type,config}'
                WHEN 'run_command' THEN '{type,machine,workspace}'
                WHEN 'anthropic_web_search' THEN '{type,max_uses,allowed_domains,blocked_domains,user_location}'
                WHEN 'anthropic_web_fetch' THEN '{type,max_uses,allowed_domains,blocked_domains,citations,max_content_tokens}'
            END;
            IF v_known IS NULL THEN
                PERFORM holdfast.raise('HF422', 'tool type must be one of: custom, web_fetch, web_search, mcp, ask_user, spawn_subagent, run_command, anthropic_web_search, anthropic_web_fetch',
                    v_at || '.type');
            END IF;
            PERFORM holdfast.refuse_unknown_keys(v_tool, v_known, v_at || '.');
            IF v_type IN ('anthropic_web_search', 'anthropic_web_fetch') THEN
                PERFORM holdfast.validate_server_tool(v_tool, p_config #>> '{model,provider}', v_at);
                v_server_tools := v_server_tools || (CASE v_type WHEN 'anthropic_web_search' THEN 'web_search' ELSE 'web_fetch' END);
            END IF;
            IF v_type IN ('custom', 'mcp') THEN
                IF jsonb_typeof(v_tool -> 'name') IS DISTINCT FROM 'string'
                   OR v_tool ->> 'name' !~ '^[a-zA-Z0-9_-]{1,64}$' THEN
                    PERFORM holdfast.raise('HF422', 'tool name must match ^[a-zA-Z0-9_-]{1,64}$', v_at || '.name');
                END IF;
            END IF;
            IF v_tool ? 'description' AND jsonb_typeof(v_tool -> 'description') <> 'string' THEN
                PERFORM holdfast.raise('HF422', 'description must be a string', v_at || '.description');
            END IF;
            IF v_type = 'mcp' THEN
                IF jsonb_typeof(v_tool -> 'url') IS DISTINCT FROM 'string' THEN
                    PERFORM holdfast.raise('HF422', 'url must be a string (the MCP server''s URL)', v_at || '.url');
                END IF;
                IF v_tool ? 'headers' AND (jsonb_typeof(v_tool -> 'headers') <> 'object'
                   OR EXISTS (SELECT 1 FROM jsonb_each(v_tool -> 'headers') h WHERE jsonb_typeof(h.value) <> 'string')) THEN
                    PERFORM holdfast.raise('HF422', 'headers must be an object of strings', v_at || '.headers');
                END IF;
            END IF;
            IF v_tool ? 'machine' AND jsonb_typeof(v_tool -> 'machine') <> 'string' THEN
                PERFORM holdfast.raise('HF422', 'machine must be a string (a machine id or name)', v_at || '.machine');
            END IF;
            IF v_tool ? 'workspace' AND NOT coalesce(v_tool -> 'workspace' IN ('"machine"', '"agent"'), false) THEN
                PERFORM holdfast.raise('HF422',
                    'workspace must be "machine" (the machine''s work directory) or "agent" (a directory of this agent''s own)',
                    v_at || '.workspace');
            END IF;
            v_name := CASE v_type
                WHEN 'anthropic_web_search' THEN 'web_search'
                WHEN 'anthropic_web_fetch' THEN 'web_fetch'
                ELSE coalesce(v_tool ->> 'name', v_type) END;
            IF v_name = ANY (v_names) THEN
                PERFORM holdfast.raise('HF422', format('duplicate tool name "%s"', v_name), v_at || '.name');
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
        PERFORM holdfast.refuse_unknown_keys(p_config -> 'approvals', '{require_for}', 'approvals.');
        IF EXISTS (SELECT 1 FROM jsonb_array_elements(coalesce(p_config #> '{approvals,require_for}', '[]')) e
                    WHERE jsonb_typeof(e.value) <> 'string') THEN
            PERFORM holdfast.raise('HF422', 'approvals.require_for must be an array of tool names', 'approvals.require_for');
        END IF;
        SELECT e.value #>> '{}' INTO v_name
          FROM jsonb_array_elements(coalesce(p_config #> '{approvals,require_for}', '[]')) e
         WHERE e.value #>> '{}' = ANY (v_server_tools) LIMIT 1;
        IF v_name IS NOT NULL THEN
            PERFORM holdfast.raise('HF422', format('%s runs at the provider inside the model call; it cannot wait for an approval', v_name), 'approvals.require_for');
        END IF;
    END IF;
    IF p_config ? 'metadata' AND jsonb_typeof(p_config -> 'metadata') <> 'object' THEN
        PERFORM holdfast.raise('HF422', 'metadata must be an object', 'metadata');
    END IF;
    IF p_config ? 'limits' THEN
        IF jsonb_typeof(p_config -> 'limits') <> 'object' THEN
            PERFORM holdfast.raise('HF422', 'limits must be an object', 'limits');
        END IF;
        FOR v_name, v_value IN SELECT key, value FROM jsonb_each(p_config -> 'limits') ORDER BY key LOOP
            IF NOT v_name = ANY (holdfast.limit_names()) THEN
                PERFORM holdfast.raise('HF422', format('unknown limit; expected one of: %s',
                    array_to_string(holdfast.limit_names(), ', ')), 'limits.' || v_name);
            END IF;
            -- An integer, as for max_tokens (1.0 is not one).
            IF NOT holdfast.is_integer_between(v_value, 1, 9999999999) THEN
                PERFORM holdfast.raise('HF422', format('limits.%s must be a positive integer', v_name),
                    'limits.' || v_name);
            END IF;
            v_max := holdfast.limit_maximum(v_name);
            IF (v_value #>> '{}')::bigint > v_max THEN
                PERFORM holdfast.raise('HF422', format('limits.%s must be at most %s (the operator''s maximum)',
                    v_name, v_max), 'limits.' || v_name);
            END IF;
        END LOOP;
    END IF;
    IF p_config ? 'budget' THEN
        IF jsonb_typeof(p_config -> 'budget') <> 'object' THEN
            PERFORM holdfast.raise('HF422', 'budget must be an object', 'budget');
        END IF;
        PERFORM holdfast.refuse_unknown_keys(p_config -> 'budget',
            '{max_tokens_per_turn,max_tokens_per_agent,max_cost_usd_per_turn,max_cost_usd_per_agent,on_exceeded}', 'budget.');
        IF p_config -> 'budget' ? 'on_exceeded'
           AND coalesce(p_config #>> '{budget,on_exceeded}' NOT IN ('fail', 'ask')
                        OR jsonb_typeof(p_config #> '{budget,on_exceeded}') <> 'string', true) THEN
            PERFORM holdfast.raise('HF422', 'budget.on_exceeded must be "fail" or "ask"', 'budget.on_exceeded');
        END IF;
        FOR v_name IN SELECT unnest(ARRAY['max_tokens_per_turn', 'max_tokens_per_agent']) LOOP
            IF p_config -> 'budget' ? v_name
               AND NOT holdfast.is_integer_between(p_config #> ARRAY['budget', v_name], 1, 9999999999) THEN
                PERFORM holdfast.raise('HF422', format('budget.%s must be an integer from 1 to 9999999999', v_name), 'budget.' || v_name);
            END IF;
        END LOOP;
        FOR v_name IN SELECT unnest(ARRAY['max_cost_usd_per_turn', 'max_cost_usd_per_agent']) LOOP
            IF p_config -> 'budget' ? v_name
               AND NOT coalesce(jsonb_typeof(p_config #> ARRAY['budget', v_name]) = 'number'
                                AND (p_config #>> ARRAY['budget', v_name])::numeric > 0, false) THEN
                PERFORM holdfast.raise('HF422', format('budget.%s must be a number of USD above 0', v_name), 'budget.' || v_name);
            END IF;
        END LOOP;
    END IF;
END
$_$;


--
-- Name: validate_model_access(uuid, jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.validate_model_access(p_project uuid, p_config jsonb) RETURNS void
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_refusal record;
BEGIN
    IF p_config #> '{model,endpoint}' IS NOT NULL
       AND (jsonb_typeof(p_config #> '{model,endpoint}') <> 'string' OR p_config #>> '{model,endpoint}' = '') THEN
        PERFORM holdfast.raise('HF422', 'model.endpoint must be a non-empty string', 'model.endpoint');
    END IF;
    SELECT * INTO v_refusal FROM holdfast.check_model_access(p_project, p_config -> 'model');
    IF FOUND THEN
        PERFORM holdfast.raise('HF422', 'model_not_permitted: ' || v_refusal.message, v_refusal.field);
    END IF;
    SELECT * INTO v_refusal FROM holdfast.check_server_tools(p_project, p_config);
    IF FOUND THEN
        PERFORM holdfast.raise('HF422', v_refusal.message, v_refusal.field);
    END IF;
END
$$;


--
-- Name: validate_server_tool(jsonb, text, text); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.validate_server_tool(p_tool jsonb, p_provider text, p_at text) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_key text;
BEGIN
    IF p_provider IS DISTINCT FROM 'anthropic' THEN
        PERFORM holdfast.raise('HF422', format(
            '%s is run by Anthropic: only an agent whose model.provider is "anthropic" can have it',
            p_tool ->> 'type'), p_at || '.type');
    END IF;
    FOREACH v_key IN ARRAY ARRAY['max_uses', 'max_content_tokens'] LOOP
        IF p_tool ? v_key AND NOT holdfast.is_integer_between(p_tool -> v_key, 1, 4294967295) THEN
            PERFORM holdfast.raise('HF422', format('%s must be an integer from 1 to 4294967295', v_key),
                p_at || '.' || v_key);
        END IF;
    END LOOP;
    FOREACH v_key IN ARRAY ARRAY['allowed_domains', 'blocked_domains'] LOOP
        IF p_tool ? v_key AND (jsonb_typeof(p_tool -> v_key) <> 'array'
               OR EXISTS (SELECT 1 FROM jsonb_array_elements(p_tool -> v_key) d
                           WHERE jsonb_typeof(d.value) <> 'string' OR d.value #>> '{}' = '')) THEN
            PERFORM holdfast.raise('HF422', format('%s must be an array of domain names', v_key),
                p_at || '.' || v_key);
        END IF;
    END LOOP;
    IF p_tool ? 'allowed_domains' AND p_tool ? 'blocked_domains' THEN
        PERFORM holdfast.raise('HF422', 'allowed_domains and blocked_domains cannot both be set',
            p_at || '.blocked_domains');
    END IF;
    IF p_tool ? 'user_location' THEN
        IF jsonb_typeof(p_tool -> 'user_location') <> 'object'
           OR p_tool #>> '{user_location,type}' IS DISTINCT FROM 'approximate'
           OR jsonb_typeof(p_tool #> '{user_location,type}') <> 'string' THEN
            PERFORM holdfast.raise('HF422', 'user_location must be an object with "type": "approximate"',
                p_at || '.user_location');
        END IF;
        PERFORM holdfast.refuse_unknown_keys(p_tool -> 'user_location',
            '{type,city,region,country,timezone}', p_at || '.user_location.');
        SELECT k INTO v_key FROM jsonb_each(p_tool -> 'user_location') e (k, v)
         WHERE jsonb_typeof(v) <> 'string' ORDER BY k LIMIT 1;
        IF v_key IS NOT NULL THEN
            PERFORM holdfast.raise('HF422', format('user_location.%s must be a string', v_key),
                p_at || '.user_location.' || v_key);
        END IF;
    END IF;
    IF p_tool ? 'citations' THEN
        IF jsonb_typeof(p_tool -> 'citations') <> 'object'
           OR jsonb_typeof(p_tool #> '{citations,enabled}') IS DISTINCT FROM 'boolean' THEN
            PERFORM holdfast.raise('HF422', 'citations must be {"enabled": true|false}', p_at || '.citations');
        END IF;
        PERFORM holdfast.refuse_unknown_keys(p_tool -> 'citations', '{enabled}', p_at || '.citations.');
    END IF;
END
$$;


--
-- Name: validate_webhook_events(jsonb); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.validate_webhook_events(p_events jsonb) RETURNS text[]
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_element jsonb;
    v_i integer := 0;
    v_types text[] := '{}';
BEGIN
    IF jsonb_typeof(p_events) IS DISTINCT FROM 'array' OR jsonb_array_length(p_events) = 0 THEN
        PERFORM holdfast.raise('HF422', 'events must be a non-empty array of event types or "*"', 'events');
    END IF;
    FOR v_element IN SELECT value FROM jsonb_array_elements(p_events) LOOP
        IF jsonb_typeof(v_element) <> 'string'
           OR NOT (v_element #>> '{}' = '*' OR v_element #>> '{}' = ANY (holdfast.event_types())) THEN
            PERFORM holdfast.raise('HF422',
                format('events[%s] is %s, not "*" or a known event type', v_i, v_element), 'events');
        END IF;
        IF NOT v_element #>> '{}' = ANY (v_types) THEN
            v_types := v_types || (v_element #>> '{}');
        END IF;
        v_i := v_i + 1;
    END LOOP;
    RETURN v_types;
END
$$;


--
-- Name: validate_webhook_url(text, boolean); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.validate_webhook_url(p_url text, p_allow_private boolean) RETURNS void
    LANGUAGE plpgsql
    AS $_$
DECLARE
    v_authority text;
    v_host text;
BEGIN
    IF p_url IS NULL OR length(p_url) > 2048 OR p_url !~* '^https?://[^/?#[:space:]]+([/?#][^[:space:]]*)?$' THEN
        PERFORM holdfast.raise('HF422', 'url must be an absolute http:// or https:// URL', 'url');
    END IF;
    v_authority := substring(p_url FROM '^[A-Za-z]+://([^/?#]*)');
    v_host := regexp_replace(v_authority, '^.*@', '');
    IF v_host LIKE '[%' THEN
        v_host := substring(v_host FROM '^\[([^]]*)\]');
    ELSE
        v_host := regexp_replace(v_host, ':[0-9]*$', '');
    END IF;
    v_host := rtrim(lower(coalesce(v_host, '')), '.');
    IF v_host = '' THEN
        PERFORM holdfast.raise('HF422', 'url must name a host', 'url');
    END IF;
    IF NOT coalesce(p_allow_private, false) AND holdfast.is_private_host(v_host) THEN
        PERFORM holdfast.raise('HF422',
            format('url host %s is a private or loopback address, which this deployment does not allow', v_host), 'url');
    END IF;
END
$_$;


--
-- Name: watch_agent_events(uuid, uuid, integer); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.watch_agent_events(p_watch uuid, p_agent uuid, p_listener_pid integer) RETURNS void
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: web_search_usd_per_request(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.web_search_usd_per_request() RETURNS numeric
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT 0.01::numeric
$$;


--
-- Name: zero_usage(); Type: FUNCTION; Schema: holdfast; Owner: -
--

CREATE FUNCTION holdfast.zero_usage() RETURNS holdfast.token_usage
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT ROW(0, 0, 0, 0, 0, NULL, 0, 0)::holdfast.token_usage
$$;


--
-- Name: events; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.events (
    agent_id uuid NOT NULL,
    seq bigint NOT NULL,
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    type text NOT NULL,
    data jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT events_seq_check1 CHECK ((seq > 0))
)
PARTITION BY RANGE (created_at);


--
-- Name: messages; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.messages (
    agent_id uuid NOT NULL,
    seq bigint NOT NULL,
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    role text NOT NULL,
    content jsonb NOT NULL,
    step_id uuid,
    input_id uuid,
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT messages_content_check CHECK ((jsonb_typeof(content) = 'array'::text)),
    CONSTRAINT messages_role_check CHECK ((role = ANY (ARRAY['user'::text, 'assistant'::text])))
);


--
-- Name: steps; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.steps (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    agent_id uuid NOT NULL,
    step_seq bigint NOT NULL,
    kind text NOT NULL,
    epoch bigint NOT NULL,
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    turn_seq bigint,
    provider text,
    model text,
    usage holdfast.token_usage,
    CONSTRAINT steps_kind_check CHECK ((kind = ANY (ARRAY['model'::text, 'tool'::text, 'compaction'::text])))
);


--
-- Name: agent_audit; Type: VIEW; Schema: holdfast; Owner: -
--

CREATE VIEW holdfast.agent_audit AS
 SELECT a.id AS agent_id,
    e.events,
    e.last_seq,
    (e.events = e.last_seq) AS gap_free,
    e.turns_completed,
    e.turns_failed,
    e.turns_cancelled,
    ( SELECT count(*) AS count
           FROM holdfast.steps s
          WHERE ((s.agent_id = a.id) AND (s.kind = 'model'::text))) AS model_steps,
    e.model_responses,
    ( SELECT count(*) AS count
           FROM holdfast.inputs i
          WHERE (i.agent_id = a.id)) AS inputs,
    ( SELECT count(*) AS count
           FROM holdfast.messages m
          WHERE ((m.agent_id = a.id) AND (m.input_id IS NOT NULL))) AS inputs_in_history,
    ( SELECT count(*) AS count
           FROM holdfast.tool_calls t
          WHERE (t.agent_id = a.id)) AS tool_calls,
    e.tool_calls_completed,
    e.tool_calls_interrupted,
    e.approvals_answered,
    ( SELECT count(*) AS count
           FROM holdfast.commands c
          WHERE (c.agent_id = a.id)) AS commands,
    ( SELECT count(*) AS count
           FROM holdfast.commands c
          WHERE ((c.agent_id = a.id) AND (c.state <> 'finished'::text))) AS commands_unfinished
   FROM (holdfast.agents a
     CROSS JOIN LATERAL ( SELECT count(*) AS events,
            COALESCE(max(ev.seq), (0)::bigint) AS last_seq,
            count(*) FILTER (WHERE (ev.type = 'turn.completed'::text)) AS turns_completed,
            count(*) FILTER (WHERE (ev.type = 'turn.failed'::text)) AS turns_failed,
            count(*) FILTER (WHERE (ev.type = 'turn.cancelled'::text)) AS turns_cancelled,
            count(*) FILTER (WHERE (ev.type = 'model.response'::text)) AS model_responses,
            count(*) FILTER (WHERE (ev.type = 'tool_call.completed'::text)) AS tool_calls_completed,
            count(*) FILTER (WHERE (ev.type = 'tool_call.interrupted'::text)) AS tool_calls_interrupted,
            count(*) FILTER (WHERE (ev.type = 'approval.answered'::text)) AS approvals_answered
           FROM holdfast.events ev
          WHERE (ev.agent_id = a.id)) e);


--
-- Name: agent_config_versions; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.agent_config_versions (
    agent_id uuid NOT NULL,
    version integer NOT NULL,
    config jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT agent_config_versions_version_check CHECK ((version >= 1))
);


--
-- Name: agent_overview; Type: VIEW; Schema: holdfast; Owner: -
--

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
    ( SELECT count(*) AS count
           FROM holdfast.tool_calls t
          WHERE ((t.agent_id = a.id) AND (t.status <> ALL (ARRAY['completed'::text, 'cancelled'::text])))) AS pending_tool_calls,
    ( SELECT count(*) AS count
           FROM holdfast.inputs i
          WHERE ((i.agent_id = a.id) AND (i.consumed_at IS NULL) AND (i.removed_at IS NULL))) AS pending_inputs,
    a.last_event_seq,
    a.last_event_at,
    a.state_changed_at,
    a.created_at
   FROM holdfast.agents a;


--
-- Name: api_keys; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.api_keys (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    project_id uuid NOT NULL,
    key_hash bytea NOT NULL,
    prefix text NOT NULL,
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    revoked_at timestamp with time zone
);


--
-- Name: attachment_quotas; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.attachment_quotas (
    singleton boolean DEFAULT true NOT NULL,
    max_agent_bytes bigint DEFAULT 268435456 NOT NULL,
    max_project_bytes bigint DEFAULT '10737418240'::bigint NOT NULL,
    updated_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT attachment_quotas_max_agent_bytes_check CHECK ((max_agent_bytes > 0)),
    CONSTRAINT attachment_quotas_max_project_bytes_check CHECK ((max_project_bytes > 0)),
    CONSTRAINT attachment_quotas_singleton_check CHECK (singleton)
);


--
-- Name: attachments; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.attachments (
    agent_id uuid NOT NULL,
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    media_type text NOT NULL,
    sha256 bytea NOT NULL,
    size_bytes integer NOT NULL,
    data bytea NOT NULL,
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT attachments_media_type_check CHECK ((media_type = ANY (ARRAY['image/jpeg'::text, 'image/png'::text, 'image/gif'::text, 'image/webp'::text, 'application/pdf'::text]))),
    CONSTRAINT attachments_sha256_check CHECK ((octet_length(sha256) = 32)),
    CONSTRAINT attachments_size_bytes_check CHECK ((size_bytes > 0)),
    CONSTRAINT attachments_size_matches CHECK ((size_bytes = octet_length(data)))
);
ALTER TABLE ONLY holdfast.attachments ALTER COLUMN data SET STORAGE EXTERNAL;


--
-- Name: events_default; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.events_default (
    agent_id uuid NOT NULL,
    seq bigint NOT NULL,
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    type text NOT NULL,
    data jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT events_seq_check1 CHECK ((seq > 0))
);


--
-- Name: limit_settings; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.limit_settings (
    singleton boolean DEFAULT true NOT NULL,
    max_model_steps_per_turn integer DEFAULT 100 NOT NULL,
    max_tool_calls_per_response integer DEFAULT 64 NOT NULL,
    max_subagent_depth integer DEFAULT 4 NOT NULL,
    max_live_children integer DEFAULT 16 NOT NULL,
    max_descendants integer DEFAULT 64 NOT NULL,
    updated_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT limit_settings_max_descendants_check CHECK ((max_descendants > 0)),
    CONSTRAINT limit_settings_max_live_children_check CHECK ((max_live_children > 0)),
    CONSTRAINT limit_settings_max_model_steps_per_turn_check CHECK ((max_model_steps_per_turn > 0)),
    CONSTRAINT limit_settings_max_subagent_depth_check CHECK ((max_subagent_depth > 0)),
    CONSTRAINT limit_settings_max_tool_calls_per_response_check CHECK ((max_tool_calls_per_response > 0)),
    CONSTRAINT limit_settings_singleton_check CHECK (singleton)
);


--
-- Name: machine_settings; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.machine_settings (
    singleton boolean DEFAULT true NOT NULL,
    accept_timeout interval DEFAULT '00:05:00'::interval NOT NULL,
    offline_after interval DEFAULT '00:00:30'::interval NOT NULL,
    updated_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT machine_settings_accept_timeout_check CHECK ((accept_timeout > '00:00:00'::interval)),
    CONSTRAINT machine_settings_offline_after_check CHECK ((offline_after > '00:00:00'::interval)),
    CONSTRAINT machine_settings_singleton_check CHECK (singleton)
);


--
-- Name: machine_overview; Type: VIEW; Schema: holdfast; Owner: -
--

CREATE VIEW holdfast.machine_overview AS
 SELECT m.id AS machine_id,
    m.project_id,
    m.name,
    m.last_heartbeat_at,
    COALESCE((m.last_heartbeat_at > (holdfast.now() - s.offline_after)), false) AS online,
    m.daemon_session,
    m.daemon_started_at,
        CASE
            WHEN (m.wake_until > holdfast.now()) THEN m.wake_until
            ELSE NULL::timestamp with time zone
        END AS waking_until,
    ( SELECT count(*) AS count
           FROM holdfast.commands c
          WHERE ((c.machine_id = m.id) AND (c.state = 'queued'::text))) AS queued,
    ( SELECT count(*) AS count
           FROM holdfast.commands c
          WHERE ((c.machine_id = m.id) AND (c.state = 'accepted'::text))) AS accepted,
    ( SELECT min(c.queued_at) AS min
           FROM holdfast.commands c
          WHERE ((c.machine_id = m.id) AND (c.state = 'queued'::text))) AS oldest_queued_at,
    m.deleted_at
   FROM (holdfast.machines m
     CROSS JOIN holdfast.machine_settings s);


--
-- Name: project_attachment_bytes; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.project_attachment_bytes (
    project_id uuid NOT NULL,
    bytes bigint NOT NULL
);


--
-- Name: project_provider_keys; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.project_provider_keys (
    project_id uuid NOT NULL,
    provider text NOT NULL,
    sealed bytea NOT NULL,
    key_fingerprint text NOT NULL,
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    updated_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT project_provider_keys_provider_check CHECK ((provider = ANY (ARRAY['anthropic'::text, 'openai'::text]))),
    CONSTRAINT project_provider_keys_sealed_check CHECK ((length(sealed) > 29))
);


--
-- Name: projects; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.projects (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    name text NOT NULL,
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    max_running integer,
    allow_custom_model_urls boolean DEFAULT false NOT NULL,
    retention_events interval,
    allow_server_tools boolean DEFAULT false NOT NULL,
    CONSTRAINT projects_max_running_check CHECK ((max_running >= 0)),
    CONSTRAINT projects_name_check CHECK ((name <> ''::text)),
    CONSTRAINT projects_retention_events_check CHECK ((retention_events > '00:00:00'::interval))
);


--
-- Name: queue_depth; Type: VIEW; Schema: holdfast; Owner: -
--

CREATE VIEW holdfast.queue_depth AS
 SELECT s.state,
    count(a.id) AS agents
   FROM (unnest(ARRAY['idle'::text, 'ready'::text, 'running'::text, 'waiting'::text, 'archived'::text]) s(state)
     LEFT JOIN holdfast.agents a ON ((a.state = s.state)))
  GROUP BY s.state;


--
-- Name: schema_functions; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.schema_functions (
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);


--
-- Name: schema_migrations; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);


--
-- Name: stream_watches; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE UNLOGGED TABLE holdfast.stream_watches (
    id uuid NOT NULL,
    agent_id uuid NOT NULL,
    listener_pid integer NOT NULL,
    listener_backend_start timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: stuck_agents; Type: VIEW; Schema: holdfast; Owner: -
--

CREATE VIEW holdfast.stuck_agents AS
 SELECT a.id AS agent_id,
    a.state,
    a.lease_owner,
    a.lease_expires_at,
    a.state_changed_at,
        CASE
            WHEN (a.state = 'ready'::text) THEN ('ready but unclaimed since '::text || a.state_changed_at)
            WHEN (a.lease_expires_at <= holdfast.now()) THEN ('lease expired at '::text || a.lease_expires_at)
            ELSE (('claiming session '::text || a.lease_pid) || ' is gone'::text)
        END AS reason
   FROM holdfast.agents a
  WHERE (((a.state = 'ready'::text) AND (a.run_after < (holdfast.now() - '00:01:00'::interval)) AND (a.state_changed_at < (holdfast.now() - '00:01:00'::interval))) OR ((a.state = 'running'::text) AND (a.lease_expires_at <= holdfast.now())) OR ((a.state = 'running'::text) AND (a.lease_pid IS NOT NULL) AND (NOT (EXISTS ( SELECT 1
           FROM pg_stat_activity s
          WHERE (s.pid = a.lease_pid))))));


--
-- Name: subagent_cancels; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.subagent_cancels (
    tool_call_id uuid NOT NULL,
    child_agent_id uuid NOT NULL,
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL
);


--
-- Name: tool_call_audit; Type: VIEW; Schema: holdfast; Owner: -
--

CREATE VIEW holdfast.tool_call_audit AS
 SELECT t.id AS tool_call_id,
    t.agent_id,
    t.name,
    t.kind,
    t.status,
    t.created_at,
    t."position",
    e.results_saved,
    e.interrupted,
    e.commands_accepted,
    c.state AS command_state
   FROM ((holdfast.tool_calls t
     CROSS JOIN LATERAL ( SELECT count(*) FILTER (WHERE (ev.type = 'tool_call.completed'::text)) AS results_saved,
            count(*) FILTER (WHERE (ev.type = 'tool_call.interrupted'::text)) AS interrupted,
            count(*) FILTER (WHERE (ev.type = 'command.accepted'::text)) AS commands_accepted
           FROM holdfast.events ev
          WHERE ((ev.agent_id = t.agent_id) AND (ev.type = ANY (ARRAY['tool_call.completed'::text, 'tool_call.interrupted'::text, 'command.accepted'::text])) AND ((ev.data ->> 'tool_call_id'::text) = (t.id)::text))) e)
     LEFT JOIN holdfast.commands c ON ((c.tool_call_id = t.id)));


--
-- Name: usage_by_project; Type: VIEW; Schema: holdfast; Owner: -
--

CREATE VIEW holdfast.usage_by_project AS
 SELECT a.project_id,
    ((s.created_at AT TIME ZONE 'UTC'::text))::date AS day,
    s.provider,
    s.model,
    count(*) AS model_steps,
    (sum((s.usage).input_tokens))::bigint AS input_tokens,
    (sum((s.usage).output_tokens))::bigint AS output_tokens,
    (sum((s.usage).cache_read_tokens))::bigint AS cache_read_tokens,
    (sum((s.usage).cache_write_tokens))::bigint AS cache_write_tokens,
    (sum((s.usage).reasoning_tokens))::bigint AS reasoning_tokens,
    sum((s.usage).cost_usd) AS cost_usd,
    (COALESCE(sum((s.usage).server_tool_requests), (0)::numeric))::bigint AS server_tool_requests,
    (COALESCE(sum((s.usage).web_search_requests), (0)::numeric))::bigint AS web_search_requests
   FROM (holdfast.steps s
     JOIN holdfast.agents a ON ((a.id = s.agent_id)))
  WHERE ((s.kind = ANY (ARRAY['model'::text, 'compaction'::text])) AND (s.turn_seq IS NOT NULL))
  GROUP BY a.project_id, (((s.created_at AT TIME ZONE 'UTC'::text))::date), s.provider, s.model;


--
-- Name: webhook_deliveries; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.webhook_deliveries (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    endpoint_id uuid NOT NULL,
    agent_id uuid NOT NULL,
    event_seq bigint NOT NULL,
    event_id uuid NOT NULL,
    event_type text NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone,
    claimed_until timestamp with time zone,
    last_attempt_at timestamp with time zone,
    last_status_code integer,
    last_error text,
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    delivered_at timestamp with time zone,
    failed_at timestamp with time zone,
    event_created_at timestamp with time zone NOT NULL,
    trace_parent text,
    trace_state text,
    CONSTRAINT webhook_deliveries_claimed_is_pending CHECK (((claimed_until IS NULL) OR (status = 'pending'::text))),
    CONSTRAINT webhook_deliveries_delivered_has_time CHECK (((status = 'delivered'::text) = (delivered_at IS NOT NULL))),
    CONSTRAINT webhook_deliveries_failed_has_time CHECK (((status = 'failed'::text) = (failed_at IS NOT NULL))),
    CONSTRAINT webhook_deliveries_pending_is_scheduled CHECK (((status = 'pending'::text) = (next_attempt_at IS NOT NULL))),
    CONSTRAINT webhook_deliveries_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'delivered'::text, 'failed'::text])))
);


--
-- Name: webhook_endpoints; Type: TABLE; Schema: holdfast; Owner: -
--

CREATE TABLE holdfast.webhook_endpoints (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    project_id uuid NOT NULL,
    url text NOT NULL,
    events text[] NOT NULL,
    description text,
    secret text NOT NULL,
    created_at timestamp with time zone DEFAULT holdfast.now() NOT NULL,
    deleted_at timestamp with time zone,
    CONSTRAINT webhook_endpoints_events_check CHECK ((cardinality(events) > 0)),
    CONSTRAINT webhook_endpoints_secret_check CHECK ((secret ~~ 'whsec\_%'::text))
);


--
-- Name: webhook_queue; Type: VIEW; Schema: holdfast; Owner: -
--

CREATE VIEW holdfast.webhook_queue AS
 SELECT e.id AS endpoint_id,
    e.project_id,
    e.url,
    count(d.id) FILTER (WHERE (d.status = 'pending'::text)) AS pending,
    count(d.id) FILTER (WHERE ((d.status = 'pending'::text) AND (d.next_attempt_at <= holdfast.now()))) AS due,
    count(d.id) FILTER (WHERE (d.claimed_until > holdfast.now())) AS in_flight,
    count(d.id) FILTER (WHERE (d.status = 'failed'::text)) AS failed,
    min(d.next_attempt_at) FILTER (WHERE ((d.status = 'pending'::text) AND (d.next_attempt_at <= holdfast.now()))) AS oldest_due_at
   FROM (holdfast.webhook_endpoints e
     LEFT JOIN holdfast.webhook_deliveries d ON ((d.endpoint_id = e.id)))
  WHERE (e.deleted_at IS NULL)
  GROUP BY e.id, e.project_id, e.url;


--
-- Name: worker_leases; Type: VIEW; Schema: holdfast; Owner: -
--

CREATE VIEW holdfast.worker_leases AS
 SELECT a.lease_owner AS worker,
    count(*) AS agents_held,
    min(a.lease_expires_at) AS oldest_lease_expires_at,
    max(a.state_changed_at) AS last_claim_at,
    array_agg(DISTINCT a.lease_pid) AS backend_pids
   FROM holdfast.agents a
  WHERE (a.state = 'running'::text)
  GROUP BY a.lease_owner;


--
-- Name: events_default; Type: TABLE ATTACH; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.events ATTACH PARTITION holdfast.events_default DEFAULT;


--
-- Name: agent_config_versions agent_config_versions_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.agent_config_versions
    ADD CONSTRAINT agent_config_versions_pkey PRIMARY KEY (agent_id, version);


--
-- Name: agents agents_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.agents
    ADD CONSTRAINT agents_pkey PRIMARY KEY (id);


--
-- Name: api_keys api_keys_key_hash_key; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.api_keys
    ADD CONSTRAINT api_keys_key_hash_key UNIQUE (key_hash);


--
-- Name: api_keys api_keys_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.api_keys
    ADD CONSTRAINT api_keys_pkey PRIMARY KEY (id);


--
-- Name: approvals approvals_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.approvals
    ADD CONSTRAINT approvals_pkey PRIMARY KEY (id);


--
-- Name: approvals approvals_tool_call_id_key; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.approvals
    ADD CONSTRAINT approvals_tool_call_id_key UNIQUE (tool_call_id);


--
-- Name: attachment_quotas attachment_quotas_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.attachment_quotas
    ADD CONSTRAINT attachment_quotas_pkey PRIMARY KEY (singleton);


--
-- Name: attachments attachments_agent_id_sha256_media_type_key; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.attachments
    ADD CONSTRAINT attachments_agent_id_sha256_media_type_key UNIQUE (agent_id, sha256, media_type);


--
-- Name: attachments attachments_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.attachments
    ADD CONSTRAINT attachments_pkey PRIMARY KEY (agent_id, id);


--
-- Name: commands commands_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.commands
    ADD CONSTRAINT commands_pkey PRIMARY KEY (id);


--
-- Name: commands commands_tool_call_id_key; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.commands
    ADD CONSTRAINT commands_tool_call_id_key UNIQUE (tool_call_id);


--
-- Name: events events_id_created_at_key; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.events
    ADD CONSTRAINT events_id_created_at_key UNIQUE (id, created_at);


--
-- Name: events_default events_default_id_created_at_key; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.events_default
    ADD CONSTRAINT events_default_id_created_at_key UNIQUE (id, created_at);


--
-- Name: events events_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (agent_id, seq, created_at);


--
-- Name: events_default events_default_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.events_default
    ADD CONSTRAINT events_default_pkey PRIMARY KEY (agent_id, seq, created_at);


--
-- Name: inputs inputs_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.inputs
    ADD CONSTRAINT inputs_pkey PRIMARY KEY (id);


--
-- Name: limit_settings limit_settings_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.limit_settings
    ADD CONSTRAINT limit_settings_pkey PRIMARY KEY (singleton);


--
-- Name: machine_settings machine_settings_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.machine_settings
    ADD CONSTRAINT machine_settings_pkey PRIMARY KEY (singleton);


--
-- Name: machines machines_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.machines
    ADD CONSTRAINT machines_pkey PRIMARY KEY (id);


--
-- Name: machines machines_token_hash_key; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.machines
    ADD CONSTRAINT machines_token_hash_key UNIQUE (token_hash);


--
-- Name: messages messages_id_key; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.messages
    ADD CONSTRAINT messages_id_key UNIQUE (id);


--
-- Name: messages messages_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.messages
    ADD CONSTRAINT messages_pkey PRIMARY KEY (agent_id, seq);


--
-- Name: model_endpoints model_endpoints_name_key; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.model_endpoints
    ADD CONSTRAINT model_endpoints_name_key UNIQUE (name);


--
-- Name: model_endpoints model_endpoints_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.model_endpoints
    ADD CONSTRAINT model_endpoints_pkey PRIMARY KEY (id);


--
-- Name: model_prices model_prices_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.model_prices
    ADD CONSTRAINT model_prices_pkey PRIMARY KEY (provider, model);


--
-- Name: project_attachment_bytes project_attachment_bytes_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.project_attachment_bytes
    ADD CONSTRAINT project_attachment_bytes_pkey PRIMARY KEY (project_id);


--
-- Name: project_provider_keys project_provider_keys_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.project_provider_keys
    ADD CONSTRAINT project_provider_keys_pkey PRIMARY KEY (project_id, provider);


--
-- Name: projects projects_name_key; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.projects
    ADD CONSTRAINT projects_name_key UNIQUE (name);


--
-- Name: projects projects_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.projects
    ADD CONSTRAINT projects_pkey PRIMARY KEY (id);


--
-- Name: questions questions_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.questions
    ADD CONSTRAINT questions_pkey PRIMARY KEY (id);


--
-- Name: questions questions_tool_call_id_key; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.questions
    ADD CONSTRAINT questions_tool_call_id_key UNIQUE (tool_call_id);


--
-- Name: replays replays_agent_id_key; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.replays
    ADD CONSTRAINT replays_agent_id_key UNIQUE (agent_id);


--
-- Name: replays replays_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.replays
    ADD CONSTRAINT replays_pkey PRIMARY KEY (id);


--
-- Name: schedules schedules_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.schedules
    ADD CONSTRAINT schedules_pkey PRIMARY KEY (id);


--
-- Name: schema_functions schema_functions_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.schema_functions
    ADD CONSTRAINT schema_functions_pkey PRIMARY KEY (name);


--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);


--
-- Name: steps steps_agent_id_step_seq_key; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.steps
    ADD CONSTRAINT steps_agent_id_step_seq_key UNIQUE (agent_id, step_seq);


--
-- Name: steps steps_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.steps
    ADD CONSTRAINT steps_pkey PRIMARY KEY (id);


--
-- Name: stream_watches stream_watches_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.stream_watches
    ADD CONSTRAINT stream_watches_pkey PRIMARY KEY (id);


--
-- Name: subagent_cancels subagent_cancels_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.subagent_cancels
    ADD CONSTRAINT subagent_cancels_pkey PRIMARY KEY (tool_call_id);


--
-- Name: tool_calls tool_calls_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.tool_calls
    ADD CONSTRAINT tool_calls_pkey PRIMARY KEY (id);


--
-- Name: tool_calls tool_calls_step_id_position_key; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.tool_calls
    ADD CONSTRAINT tool_calls_step_id_position_key UNIQUE (step_id, "position");


--
-- Name: webhook_deliveries webhook_deliveries_endpoint_id_agent_id_event_seq_key; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_endpoint_id_agent_id_event_seq_key UNIQUE (endpoint_id, agent_id, event_seq);


--
-- Name: webhook_deliveries webhook_deliveries_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_pkey PRIMARY KEY (id);


--
-- Name: webhook_endpoints webhook_endpoints_pkey; Type: CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.webhook_endpoints
    ADD CONSTRAINT webhook_endpoints_pkey PRIMARY KEY (id);


--
-- Name: agents_attachment_sources_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX agents_attachment_sources_idx ON holdfast.agents USING gin (attachment_sources) WHERE (attachment_sources <> '{}'::uuid[]);


--
-- Name: agents_parent_tool_call_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE UNIQUE INDEX agents_parent_tool_call_idx ON holdfast.agents USING btree (parent_tool_call_id) WHERE (parent_tool_call_id IS NOT NULL);


--
-- Name: agents_project_activity_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX agents_project_activity_idx ON holdfast.agents USING btree (project_id, COALESCE(last_event_at, created_at) DESC, id DESC);


--
-- Name: agents_project_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX agents_project_idx ON holdfast.agents USING btree (project_id, id);


--
-- Name: agents_project_state_activity_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX agents_project_state_activity_idx ON holdfast.agents USING btree (project_id, state, COALESCE(last_event_at, created_at) DESC, id DESC);


--
-- Name: agents_ready_at_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX agents_ready_at_idx ON holdfast.agents USING btree (GREATEST(run_after, state_changed_at), id) WHERE (state = 'ready'::text);


--
-- Name: agents_ready_project_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX agents_ready_project_idx ON holdfast.agents USING btree (project_id, GREATEST(run_after, state_changed_at), id) WHERE (state = 'ready'::text);


--
-- Name: agents_root_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX agents_root_idx ON holdfast.agents USING btree (root_agent_id) WHERE (root_agent_id IS NOT NULL);


--
-- Name: agents_running_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX agents_running_idx ON holdfast.agents USING btree (lease_expires_at) WHERE (state = 'running'::text);


--
-- Name: approvals_one_pending_budget_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE UNIQUE INDEX approvals_one_pending_budget_idx ON holdfast.approvals USING btree (agent_id) WHERE ((kind = 'budget'::text) AND (status = 'pending'::text));


--
-- Name: approvals_pending_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX approvals_pending_idx ON holdfast.approvals USING btree (agent_id, created_at) WHERE (status = 'pending'::text);


--
-- Name: commands_accepted_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX commands_accepted_idx ON holdfast.commands USING btree (machine_id, accepted_at) WHERE (state = 'accepted'::text);


--
-- Name: commands_agent_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX commands_agent_idx ON holdfast.commands USING btree (agent_id, id);


--
-- Name: commands_queued_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX commands_queued_idx ON holdfast.commands USING btree (machine_id, queued_at, id) WHERE (state = 'queued'::text);


--
-- Name: inputs_idempotency_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE UNIQUE INDEX inputs_idempotency_idx ON holdfast.inputs USING btree (project_id, idempotency_key) WHERE (idempotency_key IS NOT NULL);


--
-- Name: inputs_pending_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX inputs_pending_idx ON holdfast.inputs USING btree (agent_id, created_at, id) WHERE (consumed_at IS NULL);


--
-- Name: inputs_queued_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX inputs_queued_idx ON holdfast.inputs USING btree (agent_id, created_at, id) WHERE ((admitted_at IS NULL) AND (removed_at IS NULL));


--
-- Name: inputs_search_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX inputs_search_idx ON holdfast.inputs USING gin (to_tsvector('simple'::regconfig, (jsonb_path_query_array(content, 'strict $.**."text"'::jsonpath) || jsonb_path_query_array(content, 'strict $?(@.type() == "string")'::jsonpath)))) WITH (fastupdate=off) WHERE (octet_length((content)::text) <= 262144);


--
-- Name: machines_live_name_unique; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE UNIQUE INDEX machines_live_name_unique ON holdfast.machines USING btree (project_id, name) WHERE (deleted_at IS NULL);


--
-- Name: machines_project_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX machines_project_idx ON holdfast.machines USING btree (project_id, id);


--
-- Name: messages_input_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE UNIQUE INDEX messages_input_idx ON holdfast.messages USING btree (input_id) WHERE (input_id IS NOT NULL);


--
-- Name: messages_search_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX messages_search_idx ON holdfast.messages USING gin (to_tsvector('simple'::regconfig, jsonb_path_query_array(content, 'strict $.**."text"'::jsonpath))) WITH (fastupdate=off) WHERE (octet_length((content)::text) <= 262144);


--
-- Name: questions_pending_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX questions_pending_idx ON holdfast.questions USING btree (agent_id, created_at) WHERE (status = 'pending'::text);


--
-- Name: replays_source_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX replays_source_idx ON holdfast.replays USING btree (source_agent_id, id);


--
-- Name: schedules_agent_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX schedules_agent_idx ON holdfast.schedules USING btree (agent_id, id);


--
-- Name: schedules_due_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX schedules_due_idx ON holdfast.schedules USING btree (next_fire_at) WHERE (paused_at IS NULL);


--
-- Name: steps_model_epoch_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE UNIQUE INDEX steps_model_epoch_idx ON holdfast.steps USING btree (agent_id, epoch) WHERE (kind = 'model'::text);


--
-- Name: stream_watches_agent_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX stream_watches_agent_idx ON holdfast.stream_watches USING btree (agent_id);


--
-- Name: tool_calls_agent_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX tool_calls_agent_idx ON holdfast.tool_calls USING btree (agent_id, created_at, step_id, "position");


--
-- Name: tool_calls_open_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX tool_calls_open_idx ON holdfast.tool_calls USING btree (agent_id, status) WHERE (status <> ALL (ARRAY['completed'::text, 'cancelled'::text]));


--
-- Name: webhook_deliveries_claimed_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX webhook_deliveries_claimed_idx ON holdfast.webhook_deliveries USING btree (endpoint_id) WHERE (claimed_until IS NOT NULL);


--
-- Name: webhook_deliveries_due_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX webhook_deliveries_due_idx ON holdfast.webhook_deliveries USING btree (next_attempt_at, id) WHERE (status = 'pending'::text);


--
-- Name: webhook_deliveries_endpoint_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX webhook_deliveries_endpoint_idx ON holdfast.webhook_deliveries USING btree (endpoint_id, id);


--
-- Name: webhook_deliveries_event_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX webhook_deliveries_event_idx ON holdfast.webhook_deliveries USING btree (agent_id, event_seq);


--
-- Name: webhook_deliveries_queue_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX webhook_deliveries_queue_idx ON holdfast.webhook_deliveries USING btree (endpoint_id, agent_id, event_seq) WHERE (status = 'pending'::text);


--
-- Name: webhook_endpoints_project_idx; Type: INDEX; Schema: holdfast; Owner: -
--

CREATE INDEX webhook_endpoints_project_idx ON holdfast.webhook_endpoints USING btree (project_id, id) WHERE (deleted_at IS NULL);


--
-- Name: events_default_id_created_at_key; Type: INDEX ATTACH; Schema: holdfast; Owner: -
--

ALTER INDEX holdfast.events_id_created_at_key ATTACH PARTITION holdfast.events_default_id_created_at_key;


--
-- Name: events_default_pkey; Type: INDEX ATTACH; Schema: holdfast; Owner: -
--

ALTER INDEX holdfast.events_pkey ATTACH PARTITION holdfast.events_default_pkey;


--
-- Name: attachments _100_count_deleted; Type: TRIGGER; Schema: holdfast; Owner: -
--

CREATE TRIGGER _100_count_deleted AFTER DELETE ON holdfast.attachments REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION holdfast.tg_attachments_count('-1');


--
-- Name: attachments _100_count_inserted; Type: TRIGGER; Schema: holdfast; Owner: -
--

CREATE TRIGGER _100_count_inserted AFTER INSERT ON holdfast.attachments REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION holdfast.tg_attachments_count('1');


--
-- Name: inputs _100_reset_retry_budget; Type: TRIGGER; Schema: holdfast; Owner: -
--

CREATE TRIGGER _100_reset_retry_budget AFTER INSERT ON holdfast.inputs FOR EACH ROW EXECUTE FUNCTION holdfast.tg_inputs_reset_retry_budget();


--
-- Name: agents _100_state_changed; Type: TRIGGER; Schema: holdfast; Owner: -
--

CREATE TRIGGER _100_state_changed BEFORE UPDATE OF state ON holdfast.agents FOR EACH ROW EXECUTE FUNCTION holdfast.tg_agents_state_changed();


--
-- Name: tool_calls _200_cancel_waits; Type: TRIGGER; Schema: holdfast; Owner: -
--

CREATE TRIGGER _200_cancel_waits AFTER UPDATE OF status ON holdfast.tool_calls FOR EACH ROW WHEN (((new.status = 'cancelled'::text) AND (old.status <> 'cancelled'::text))) EXECUTE FUNCTION holdfast.tg_tool_calls_cancel_waits();


--
-- Name: events _200_open_tool_wait; Type: TRIGGER; Schema: holdfast; Owner: -
--

CREATE TRIGGER _200_open_tool_wait AFTER INSERT ON holdfast.events FOR EACH ROW WHEN (((new.type = 'tool_call.created'::text) AND (((new.data ->> 'status'::text) = 'awaiting_approval'::text) OR (((new.data ->> 'status'::text) = 'waiting'::text) AND ((new.data ->> 'kind'::text) = ANY (ARRAY['question'::text, 'command'::text])))))) EXECUTE FUNCTION holdfast.tg_events_open_tool_wait();


--
-- Name: tool_calls _300_cancel_command; Type: TRIGGER; Schema: holdfast; Owner: -
--

CREATE TRIGGER _300_cancel_command AFTER UPDATE OF status ON holdfast.tool_calls FOR EACH ROW WHEN (((new.status = 'cancelled'::text) AND (old.status <> 'cancelled'::text) AND (new.kind = 'command'::text))) EXECUTE FUNCTION holdfast.tg_tool_calls_cancel_command();


--
-- Name: events _300_finish_subagent; Type: TRIGGER; Schema: holdfast; Owner: -
--

CREATE TRIGGER _300_finish_subagent AFTER INSERT ON holdfast.events FOR EACH ROW WHEN ((new.type = ANY (ARRAY['turn.completed'::text, 'turn.failed'::text, 'turn.cancelled'::text]))) EXECUTE FUNCTION holdfast.tg_events_finish_subagent();


--
-- Name: events _310_advance_replay; Type: TRIGGER; Schema: holdfast; Owner: -
--

CREATE TRIGGER _310_advance_replay AFTER INSERT ON holdfast.events FOR EACH ROW WHEN ((new.type = ANY (ARRAY['turn.completed'::text, 'turn.failed'::text, 'turn.cancelled'::text]))) EXECUTE FUNCTION holdfast.tg_events_advance_replay();


--
-- Name: tool_calls _400_cancel_subagent; Type: TRIGGER; Schema: holdfast; Owner: -
--

CREATE TRIGGER _400_cancel_subagent AFTER UPDATE OF status ON holdfast.tool_calls FOR EACH ROW WHEN (((new.status = 'cancelled'::text) AND (old.status = 'waiting'::text) AND (new.child_agent_id IS NOT NULL))) EXECUTE FUNCTION holdfast.tg_tool_calls_cancel_subagent();


--
-- Name: events _500_webhook_outbox; Type: TRIGGER; Schema: holdfast; Owner: -
--

CREATE TRIGGER _500_webhook_outbox AFTER INSERT ON holdfast.events REFERENCING NEW TABLE AS new_events FOR EACH STATEMENT EXECUTE FUNCTION holdfast.tg_events_webhook_outbox();


--
-- Name: events _900_notify_events; Type: TRIGGER; Schema: holdfast; Owner: -
--

CREATE TRIGGER _900_notify_events AFTER INSERT ON holdfast.events REFERENCING NEW TABLE AS new_events FOR EACH STATEMENT EXECUTE FUNCTION holdfast.tg_events_notify();


--
-- Name: commands _900_notify_queued; Type: TRIGGER; Schema: holdfast; Owner: -
--

CREATE TRIGGER _900_notify_queued AFTER INSERT ON holdfast.commands FOR EACH ROW WHEN ((new.state = 'queued'::text)) EXECUTE FUNCTION holdfast.tg_commands_notify_queued();


--
-- Name: agents _900_send_wake; Type: TRIGGER; Schema: holdfast; Owner: -
--

CREATE TRIGGER _900_send_wake AFTER INSERT OR UPDATE OF state ON holdfast.agents FOR EACH ROW WHEN ((new.state = 'ready'::text)) EXECUTE FUNCTION holdfast.tg_agents_send_wake();


--
-- Name: agent_config_versions agent_config_versions_agent_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.agent_config_versions
    ADD CONSTRAINT agent_config_versions_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES holdfast.agents(id);


--
-- Name: agents agents_forked_from_agent_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.agents
    ADD CONSTRAINT agents_forked_from_agent_id_fkey FOREIGN KEY (forked_from_agent_id) REFERENCES holdfast.agents(id);


--
-- Name: agents agents_parent_tool_call_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.agents
    ADD CONSTRAINT agents_parent_tool_call_id_fkey FOREIGN KEY (parent_tool_call_id) REFERENCES holdfast.tool_calls(id);


--
-- Name: agents agents_project_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.agents
    ADD CONSTRAINT agents_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id);


--
-- Name: agents agents_replay_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.agents
    ADD CONSTRAINT agents_replay_id_fkey FOREIGN KEY (replay_id) REFERENCES holdfast.replays(id);


--
-- Name: agents agents_root_agent_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.agents
    ADD CONSTRAINT agents_root_agent_id_fkey FOREIGN KEY (root_agent_id) REFERENCES holdfast.agents(id);


--
-- Name: api_keys api_keys_project_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.api_keys
    ADD CONSTRAINT api_keys_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id);


--
-- Name: approvals approvals_agent_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.approvals
    ADD CONSTRAINT approvals_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES holdfast.agents(id);


--
-- Name: approvals approvals_tool_call_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.approvals
    ADD CONSTRAINT approvals_tool_call_id_fkey FOREIGN KEY (tool_call_id) REFERENCES holdfast.tool_calls(id);


--
-- Name: attachments attachments_agent_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.attachments
    ADD CONSTRAINT attachments_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES holdfast.agents(id);


--
-- Name: commands commands_agent_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.commands
    ADD CONSTRAINT commands_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES holdfast.agents(id);


--
-- Name: commands commands_machine_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.commands
    ADD CONSTRAINT commands_machine_id_fkey FOREIGN KEY (machine_id) REFERENCES holdfast.machines(id);


--
-- Name: commands commands_tool_call_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.commands
    ADD CONSTRAINT commands_tool_call_id_fkey FOREIGN KEY (tool_call_id) REFERENCES holdfast.tool_calls(id);


--
-- Name: inputs inputs_agent_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.inputs
    ADD CONSTRAINT inputs_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES holdfast.agents(id);


--
-- Name: inputs inputs_project_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.inputs
    ADD CONSTRAINT inputs_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id);


--
-- Name: machines machines_project_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.machines
    ADD CONSTRAINT machines_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id);


--
-- Name: model_endpoints model_endpoints_project_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.model_endpoints
    ADD CONSTRAINT model_endpoints_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id);


--
-- Name: project_attachment_bytes project_attachment_bytes_project_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.project_attachment_bytes
    ADD CONSTRAINT project_attachment_bytes_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id);


--
-- Name: project_provider_keys project_provider_keys_project_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.project_provider_keys
    ADD CONSTRAINT project_provider_keys_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id);


--
-- Name: questions questions_agent_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.questions
    ADD CONSTRAINT questions_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES holdfast.agents(id);


--
-- Name: questions questions_tool_call_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.questions
    ADD CONSTRAINT questions_tool_call_id_fkey FOREIGN KEY (tool_call_id) REFERENCES holdfast.tool_calls(id);


--
-- Name: replays replays_agent_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.replays
    ADD CONSTRAINT replays_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES holdfast.agents(id);


--
-- Name: replays replays_project_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.replays
    ADD CONSTRAINT replays_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id);


--
-- Name: replays replays_source_agent_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.replays
    ADD CONSTRAINT replays_source_agent_id_fkey FOREIGN KEY (source_agent_id) REFERENCES holdfast.agents(id);


--
-- Name: schedules schedules_agent_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.schedules
    ADD CONSTRAINT schedules_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES holdfast.agents(id);


--
-- Name: schedules schedules_project_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.schedules
    ADD CONSTRAINT schedules_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id);


--
-- Name: tool_calls tool_calls_child_agent_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.tool_calls
    ADD CONSTRAINT tool_calls_child_agent_id_fkey FOREIGN KEY (child_agent_id) REFERENCES holdfast.agents(id);


--
-- Name: webhook_deliveries webhook_deliveries_endpoint_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES holdfast.webhook_endpoints(id);


--
-- Name: webhook_deliveries webhook_deliveries_event_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_event_fkey FOREIGN KEY (agent_id, event_seq, event_created_at) REFERENCES holdfast.events(agent_id, seq, created_at);


--
-- Name: webhook_endpoints webhook_endpoints_project_id_fkey; Type: FK CONSTRAINT; Schema: holdfast; Owner: -
--

ALTER TABLE ONLY holdfast.webhook_endpoints
    ADD CONSTRAINT webhook_endpoints_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id);


--
-- PostgreSQL database dump complete
--


