-- sql/schema/agents.sql — projects, agent config validation and changes, inputs.
--
-- This area's current schema: its tables, indexes and views first, then,
-- after the line below, its functions and triggers.
-- Each object is defined here once, as it is now. See docs/sql.md for how
-- a fresh install applies these files and how a change is added.

CREATE TYPE holdfast.new_input AS (
	project_id uuid,
	agent_id uuid,
	content jsonb,
	idempotency_key text,
	trace_parent text,
	trace_state text,
	mode text
);

-- A tenant: every API key, agent, machine and webhook belongs to one.
CREATE TABLE holdfast.projects (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    name text NOT NULL,
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    -- Most agents of the project running at once (NULL: no cap;
    -- set_project_max_running).
    max_running integer,
    -- The operator's switch for tenant-set model.base_url.
    allow_custom_model_urls boolean DEFAULT false NOT NULL,
    -- How long its finished agents' events, deliveries, tool outputs, input
    -- contents and unreferenced attachments are kept (NULL: forever;
    -- set_project_retention, retention.sql).
    retention_events interval,
    -- The operator's switch for provider-run server tools
    -- (set_project_server_tools).
    allow_server_tools boolean DEFAULT false NOT NULL,
    CONSTRAINT projects_max_running_check CHECK (max_running >= 0),
    CONSTRAINT projects_name_check CHECK (name <> ''),
    CONSTRAINT projects_retention_events_check CHECK (retention_events > '00:00:00'::interval),
    CONSTRAINT projects_pkey PRIMARY KEY (id),
    CONSTRAINT projects_name_key UNIQUE (name)
);

-- One row per agent. `state` is derived by settle_agent() from the facts below
-- and never set by hand elsewhere, except running (claim) and archived:
--   idle      nothing to do until an input arrives
--   ready     a worker should claim it once run_after has passed
--   running   a worker holds the lease (lease_* columns set)
--   waiting   tool calls wait on someone outside (client, person, machine)
--   archived  takes no new inputs
CREATE TABLE holdfast.agents (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    project_id uuid NOT NULL,
    -- The agent config (validate_config): model, system prompt, tools,
    -- limits, budget.
    config jsonb NOT NULL,
    state text DEFAULT 'idle' NOT NULL,
    -- A turn runs from the input that starts it to turn.completed/failed/cancelled.
    turn_open boolean DEFAULT false NOT NULL,
    -- Model-call retry budget (durable: a crash does not reset it).
    model_attempts integer DEFAULT 0 NOT NULL,
    -- A ready agent is not claimed before this (durable backoff and delays).
    run_after timestamptz DEFAULT holdfast.now() NOT NULL,
    -- Lease. The epoch only grows; every worker write names the epoch it claimed.
    lease_owner text,
    lease_epoch bigint DEFAULT 0 NOT NULL,
    lease_expires_at timestamptz,
    lease_pid integer,
    lease_backend_start timestamptz,
    -- A cancel asked of the worker holding the turn (request_cancel).
    cancel_requested_at timestamptz,
    -- Counters for gap-free per-agent sequences, advanced under the row lock.
    last_event_seq bigint DEFAULT 0 NOT NULL,
    last_message_seq bigint DEFAULT 0 NOT NULL,
    last_step_seq bigint DEFAULT 0 NOT NULL,
    -- When its latest event was appended (the agent list sorts by it).
    last_event_at timestamptz,
    -- Set by the _100_state_changed trigger; with run_after, when a ready
    -- agent became claimable.
    state_changed_at timestamptz DEFAULT holdfast.now() NOT NULL,
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    updated_at timestamptz DEFAULT holdfast.now() NOT NULL,
    -- Compaction: the summary that stands for the messages before
    -- context_start_seq.
    context_summary text,
    context_start_seq bigint DEFAULT 0 NOT NULL,
    -- A subagent's spawn_subagent call in its parent (unique where set).
    parent_tool_call_id uuid,
    -- Failed steps in a row (fail_step backs off, then fails the turn); a
    -- step that commits resets it.
    step_failures integer DEFAULT 0 NOT NULL,
    -- Model steps in the open turn, for limits.max_model_steps_per_turn.
    turn_model_steps integer DEFAULT 0 NOT NULL,
    -- 0 for a root agent, the parent's + 1 for a subagent.
    subagent_depth integer DEFAULT 0 NOT NULL,
    -- A subagent's tree root (NULL on a root).
    root_agent_id uuid,
    -- The open or last turn's number.
    turn_seq bigint DEFAULT 0 NOT NULL,
    -- The open or last turn's model usage and the agent's whole life's,
    -- summed by each model step's commit.
    turn_usage holdfast.token_usage DEFAULT ROW(0, 0, 0, 0, 0, NULL, 0, 0) NOT NULL,
    usage holdfast.token_usage DEFAULT ROW(0, 0, 0, 0, 0, NULL, 0, 0) NOT NULL,
    -- The W3C trace context the open turn's spans are children of: its first
    -- input's, or one made up when it brought none. Set when a turn opens.
    turn_trace_parent text,
    turn_trace_state text,
    -- The step attempt whose holder died (set by reap_agent, cleared by every
    -- settle): the next attempt emits the lost attempt's span and links to
    -- the step's first attempt.
    first_attempt_epoch bigint,
    lost_attempt_epoch bigint,
    lost_attempt_started_at timestamptz,
    lost_attempt_ended_at timestamptz,
    -- Retention removed its events older than this.
    events_pruned_before timestamptz,
    -- Extra allowances people granted past a reached budget: {"<budget>":
    -- {"grants": n, "turn_seq": t}}; a per-turn budget's grants count only in
    -- the turn they were given.
    budget_grants jsonb DEFAULT '{}'::jsonb NOT NULL,
    -- The bytes of its stored files, kept by the attachments triggers.
    attachment_bytes bigint DEFAULT 0 NOT NULL,
    -- The latest turn and how it ended (AgentView.last_turn); outcome and end
    -- time are NULL while it runs. Written by settle_agent with the turn
    -- events.
    last_turn_started_at timestamptz,
    last_turn_ended_at timestamptz,
    last_turn_outcome text,
    last_turn_error jsonb,
    -- The claim or last renewal took the lease session lock
    -- (hold_lease_session_lock): without it, the lease's session is gone.
    lease_session_locked boolean DEFAULT false NOT NULL,
    -- A fork's source and the event of the source's timeline it was forked
    -- at (fork_agent, time_travel.sql).
    forked_from_agent_id uuid,
    forked_from_seq bigint,
    -- The agents whose stored files this one reads as its own: a fork
    -- shares its source's files (and the source's sources') instead of
    -- copying them.
    attachment_sources uuid[] DEFAULT '{}'::uuid[] NOT NULL,
    -- Set on a replay's hidden child agent (holdfast.replays): its tool
    -- calls are answered from the recording, never run.
    replay_id uuid,
    -- The config version in force (agent_config_versions), and a newer one
    -- saved with apply = next_turn that waits for the open turn to end.
    config_version integer DEFAULT 1 NOT NULL,
    next_turn_config_version integer,
    CONSTRAINT agents_attachment_bytes_check CHECK (attachment_bytes >= 0),
    CONSTRAINT agents_last_turn_outcome_check CHECK (last_turn_outcome IN ('completed', 'failed', 'cancelled', 'limit')),
    CONSTRAINT agents_last_turn_outcome_iff_ended CHECK ((last_turn_outcome IS NULL) = (last_turn_ended_at IS NULL)),
    CONSTRAINT agents_lease_iff_running CHECK ((state = 'running') = ((lease_owner IS NOT NULL) AND (lease_expires_at IS NOT NULL))),
    CONSTRAINT agents_next_turn_config_version_check CHECK (next_turn_config_version > config_version),
    CONSTRAINT agents_forked_from_complete CHECK ((forked_from_agent_id IS NULL) = (forked_from_seq IS NULL)),
    CONSTRAINT agents_lost_attempt_complete CHECK (((lost_attempt_epoch IS NULL) = (first_attempt_epoch IS NULL)) AND ((lost_attempt_epoch IS NULL) = (lost_attempt_started_at IS NULL)) AND ((lost_attempt_epoch IS NULL) = (lost_attempt_ended_at IS NULL))),
    CONSTRAINT agents_state_check CHECK (state IN ('idle', 'ready', 'running', 'waiting', 'archived')),
    CONSTRAINT agents_step_failures_check CHECK (step_failures >= 0),
    CONSTRAINT agents_turn_trace_parent_check CHECK (turn_trace_parent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'),
    CONSTRAINT agents_pkey PRIMARY KEY (id),
    CONSTRAINT agents_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id),
    CONSTRAINT agents_root_agent_id_fkey FOREIGN KEY (root_agent_id) REFERENCES holdfast.agents(id),
    CONSTRAINT agents_forked_from_agent_id_fkey FOREIGN KEY (forked_from_agent_id) REFERENCES holdfast.agents(id)
);

-- The forks and replays that read an agent's stored files (retention's
-- prunable_attachments).
CREATE INDEX agents_attachment_sources_idx ON holdfast.agents USING gin (attachment_sources)
    WHERE (attachment_sources <> '{}'::uuid[]);

-- Every agent of a project, newest activity first.
CREATE INDEX agents_project_activity_idx ON holdfast.agents (project_id, COALESCE(last_event_at, created_at) DESC, id DESC);

CREATE INDEX agents_project_idx ON holdfast.agents (project_id, id);

-- The same within one state (the console's state filter), and the counts by
-- state (an index-only scan on project_id, state).
CREATE INDEX agents_project_state_activity_idx ON holdfast.agents (project_id, state, COALESCE(last_event_at, created_at) DESC, id DESC);

CREATE INDEX agents_ready_at_idx ON holdfast.agents (GREATEST(run_after, state_changed_at), id) WHERE (state = 'ready');

-- When a ready agent became claimable: greatest(run_after,
-- state_changed_at) — the moment it last turned ready, or its durable
-- delay ended, whichever is later. Per project for the fair pass, and
-- overall for the contended leftovers and the delayed-agent wake-up.
CREATE INDEX agents_ready_project_idx ON holdfast.agents (project_id, GREATEST(run_after, state_changed_at), id) WHERE (state = 'ready');

-- max_descendants counts a root's tree.
CREATE INDEX agents_root_idx ON holdfast.agents (root_agent_id) WHERE (root_agent_id IS NOT NULL);

-- The reaper reads only running agents.
CREATE INDEX agents_running_idx ON holdfast.agents (lease_expires_at) WHERE (state = 'running');

CREATE UNIQUE INDEX agents_parent_tool_call_idx ON holdfast.agents (parent_tool_call_id) WHERE (parent_tool_call_id IS NOT NULL);

-- Every config an agent had, numbered from 1 and never changed: create and
-- each config change (update_agent_config) add one. agents.config is a copy
-- of the version in force.
CREATE TABLE holdfast.agent_config_versions (
    agent_id uuid NOT NULL,
    version integer NOT NULL,
    config jsonb NOT NULL,
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT agent_config_versions_version_check CHECK (version >= 1),
    CONSTRAINT agent_config_versions_pkey PRIMARY KEY (agent_id, version),
    CONSTRAINT agent_config_versions_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES holdfast.agents(id)
);

-- A message sent to an agent. A turn's inputs are turn_inputs: admitted,
-- not consumed, not removed.
CREATE TABLE holdfast.inputs (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    project_id uuid NOT NULL,
    agent_id uuid NOT NULL,
    -- Content blocks (a base64 file is stored in attachments and referenced).
    content jsonb NOT NULL,
    -- A replay with the same key returns the first input (unique per
    -- project).
    idempotency_key text,
    -- Set when a model call that included this input was committed.
    consumed_at timestamptz,
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    -- The traceparent/tracestate headers the input was posted with
    -- (canonical), NULL without.
    trace_parent text,
    trace_state text,
    -- steer (joins the open turn), queue (waits for its own turn), interrupt
    -- (stops the running model call); docs/api.md.
    mode text DEFAULT 'steer' NOT NULL,
    -- When it joined a turn: at once, except a queued input
    -- (admit_queued_input).
    admitted_at timestamptz DEFAULT holdfast.now(),
    -- A queued input taken back (remove_input).
    removed_at timestamptz,
    -- When retention replaced its content with JSON null.
    content_pruned_at timestamptz,
    -- Its place among the agent's queued inputs, set by a move (move_input);
    -- NULL until then: unplaced inputs follow the placed ones, oldest first.
    queue_position integer,
    CONSTRAINT inputs_admitted_unless_queued CHECK ((mode = 'queue') OR (admitted_at IS NOT NULL)),
    CONSTRAINT inputs_idempotency_key_check CHECK ((length(idempotency_key) >= 1) AND (length(idempotency_key) <= 255)),
    CONSTRAINT inputs_mode_check CHECK (mode IN ('steer', 'queue', 'interrupt')),
    CONSTRAINT inputs_removed_not_admitted CHECK ((removed_at IS NULL) OR ((admitted_at IS NULL) AND (consumed_at IS NULL))),
    CONSTRAINT inputs_trace_parent_check CHECK (trace_parent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'),
    CONSTRAINT inputs_trace_state_check CHECK (length(trace_state) <= 512),
    CONSTRAINT inputs_trace_state_needs_parent CHECK ((trace_state IS NULL) OR (trace_parent IS NOT NULL)),
    CONSTRAINT inputs_pkey PRIMARY KEY (id),
    CONSTRAINT inputs_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES holdfast.agents(id),
    CONSTRAINT inputs_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id)
);

CREATE INDEX inputs_pending_idx ON holdfast.inputs (agent_id, created_at, id) WHERE (consumed_at IS NULL);

-- The queued inputs of an agent, oldest first (admit_queued_input, the API's list).
CREATE INDEX inputs_queued_idx ON holdfast.inputs (agent_id, created_at, id) WHERE ((admitted_at IS NULL) AND (removed_at IS NULL));

CREATE UNIQUE INDEX inputs_idempotency_idx ON holdfast.inputs (project_id, idempotency_key) WHERE (idempotency_key IS NOT NULL);

-- Full-text search of what was said (the agent list's search,
-- agents_by_activity): the built-in `simple` configuration (words as
-- written, no stemming, no extension) over a string content and every
-- "text" member of its blocks, for content up to 256 KiB of JSON text.
-- Without fastupdate: each insert updates the index itself, so a search
-- never walks a pending list of recent rows.
CREATE INDEX inputs_search_idx ON holdfast.inputs USING gin (
    to_tsvector('simple'::regconfig,
                jsonb_path_query_array(content, 'strict $.**.text')
                || jsonb_path_query_array(content, 'strict $ ? (@.type() == "string")')))
    WITH (fastupdate = off)
    WHERE octet_length(content::text) <= 262144;

-- The operator's maxima for agents' config.limits (HOLDFAST_MAX_<NAME>,
-- written by each worker at start; set_limit_maxima). An agent's
-- config.limits may set lower values; these are also the defaults. One row.
CREATE TABLE holdfast.limit_settings (
    singleton boolean DEFAULT true NOT NULL,
    max_model_steps_per_turn integer DEFAULT 100 NOT NULL,
    max_tool_calls_per_response integer DEFAULT 64 NOT NULL,
    max_subagent_depth integer DEFAULT 4 NOT NULL,
    max_live_children integer DEFAULT 16 NOT NULL,
    max_descendants integer DEFAULT 64 NOT NULL,
    updated_at timestamptz DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT limit_settings_max_descendants_check CHECK (max_descendants > 0),
    CONSTRAINT limit_settings_max_live_children_check CHECK (max_live_children > 0),
    CONSTRAINT limit_settings_max_model_steps_per_turn_check CHECK (max_model_steps_per_turn > 0),
    CONSTRAINT limit_settings_max_subagent_depth_check CHECK (max_subagent_depth > 0),
    CONSTRAINT limit_settings_max_tool_calls_per_response_check CHECK (max_tool_calls_per_response > 0),
    CONSTRAINT limit_settings_singleton_check CHECK (singleton),
    CONSTRAINT limit_settings_pkey PRIMARY KEY (singleton)
);

INSERT INTO holdfast.limit_settings DEFAULT VALUES;

-- ==== functions and triggers ====

-- Create a project if none has this name; return its id.
CREATE OR REPLACE FUNCTION holdfast.ensure_project(p_name text)
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

-- Refuse a key of `p_object` that is not in `p_known`: HF422 naming it
-- (`p_prefix` || key), the known keys listed.
CREATE OR REPLACE FUNCTION holdfast.refuse_unknown_keys(p_object jsonb, p_known text[], p_prefix text)
RETURNS void LANGUAGE plpgsql AS $$
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

-- Whether p_value is a JSON integer from p_min to p_max. The text of a
-- jsonb number keeps its fraction (1.0 stays "1.0"), so a digits-only text
-- is a JSON integer; ten digits at most fit a bigint for the range check
-- (the CASE keeps the cast from text that is not digits).
CREATE OR REPLACE FUNCTION holdfast.is_integer_between(p_value jsonb, p_min bigint, p_max bigint)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN jsonb_typeof(p_value) = 'number' AND p_value #>> '{}' ~ '^[0-9]{1,10}$'
                THEN (p_value #>> '{}')::bigint BETWEEN p_min AND p_max
                ELSE false END;
$$;

-- Validate an agent config: the rule of the API's typed config
-- (wire/src/config.rs, `AgentConfig`) for SQL clients — the same fields
-- and tool types, no others — plus what only the database knows: limits
-- within the operator's maxima. Whatever passes here the worker can parse
-- (tests/tests/config_rules.rs). Raises HF422 naming the field.
CREATE OR REPLACE FUNCTION holdfast.validate_config(p_config jsonb)
RETURNS void LANGUAGE plpgsql AS $$
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
$$;

-- Validate one of Anthropic's server tool entries (anthropic_web_search,
-- anthropic_web_fetch; unknown keys already refused) of an agent whose
-- model.provider is p_provider, at config path p_at: Anthropic agents only,
-- and the settings in the types and ranges of the typed config
-- (wire/src/config.rs) and the combinations Anthropic accepts.
CREATE OR REPLACE FUNCTION holdfast.validate_server_tool(p_tool jsonb, p_provider text, p_at text)
RETURNS void LANGUAGE plpgsql AS $$
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

-- Create an agent in a project, its config saved as version 1. Validates the
-- config (validate_config), then that the project may use its model
-- settings (validate_model_access); a header value "***" has nothing to
-- keep here and is refused. Raises HF404
-- for an unknown project, HF422 for an invalid or not permitted config
-- (field named).
CREATE OR REPLACE FUNCTION holdfast.create_agent(p_project uuid, p_config jsonb)
RETURNS uuid LANGUAGE plpgsql AS $$
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

-- An agent's newest config version and its config: the one a next_turn
-- change left waiting for the open turn to end, or else the one in force.
-- Config changes start from it.
CREATE OR REPLACE FUNCTION holdfast.latest_config_version(p_agent holdfast.agents,
                                                          OUT version integer, OUT config jsonb)
LANGUAGE sql STABLE AS $$
    SELECT v.version, v.config FROM holdfast.agent_config_versions v
     WHERE v.agent_id = p_agent.id
       AND v.version = coalesce(p_agent.next_turn_config_version, p_agent.config_version)
$$;

-- Replace an agent's config: saved as its next version (agent_config_versions,
-- numbered after the newest) and recorded as config.updated (data:
-- {"config", "version", "apply", "diff"}, config and diff masked by
-- mask_config_secrets: events feed webhooks; diff is the merge patch,
-- jsonb_merge_diff, from the newest version before it to this one). Header
-- values "***" keep the values stored (keep_masked_secrets).
--
-- p_apply 'now': the version is in force at once: workers rebuild each model
-- request from the database at every attempt, so it applies to the next
-- model call, retries included. 'next_turn': while a turn is open, the turn
-- finishes on the version it runs, and the next turn opens on this one
-- (settle_agent); with no turn open, the same as 'now'.
--
-- A config equal to the newest changes nothing and records nothing. Locks
-- the agent row. Raises HF404, HF409 (archived), HF422 (invalid or not
-- permitted config, or apply, field named). Returns the config saved,
-- masked.
CREATE OR REPLACE FUNCTION holdfast.update_agent_config(p_agent uuid, p_config jsonb,
                                                        p_apply text DEFAULT 'now')
RETURNS jsonb LANGUAGE plpgsql AS $$
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

-- Change an agent's config by a merge patch (jsonb_merge_patch) applied to
-- its newest config (latest_config_version) read under the agent's row
-- lock, so two concurrent patches of different fields both take effect.
-- Then as update_agent_config. Raises HF404, HF409 (archived), HF422 (the
-- patch is not an object, or the result is invalid). Returns the config
-- saved.
CREATE OR REPLACE FUNCTION holdfast.patch_agent_config(p_agent uuid, p_patch jsonb,
                                                       p_apply text DEFAULT 'now')
RETURNS jsonb LANGUAGE plpgsql AS $$
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

-- Archive an idle agent: it then refuses new inputs (create_input raises
-- HF409) and config changes; its history stays readable. Idempotent on an
-- archived agent. Locks the agent row. Raises HF404, HF409 (a turn or tool
-- calls are open: cancel first).
CREATE OR REPLACE FUNCTION holdfast.archive_agent(p_agent uuid)
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

-- The contract form of create_input_or_replay: returns the input id.
CREATE OR REPLACE FUNCTION holdfast.create_input(p_agent uuid, p_content jsonb, p_idempotency_key text DEFAULT NULL)
RETURNS uuid LANGUAGE sql AS $$
    SELECT input_id FROM holdfast.create_input_or_replay(p_agent, p_content, p_idempotency_key)
$$;

-- Add an input to an agent, idempotently. With an idempotency key, the first
-- call creates the input and every later call with the same key and the same
-- agent, content and mode returns it with replayed = true; the same key with
-- another agent, content or mode raises HF422 (idempotency_key_reused).
-- Concurrent callers with one key serialize on the unique index: exactly one
-- input is created.
--
-- p_trace_parent/p_trace_state: the W3C trace context the input was posted
-- with (checked by the API; the columns' CHECKs guard the form), stored
-- with it; a replay keeps the first request's.
--
-- p_mode (docs/api.md, steering): 'steer' joins the open turn (its next
-- model call sees it); 'queue' waits, unadmitted, until the open turn ends
-- and a turn opens for it (at once when the agent is idle); 'interrupt'
-- joins like steer and, when a worker holds the agent, notifies
-- holdfast_interrupt ('agent_id input_id') so a model call in flight that
-- did not include it is aborted and made again (renew_leases reports it
-- too). A queued input does not reset the retry budget
-- (tg_inputs_reset_retry_budget): it is not part of the turn.
-- Image and document blocks (content_problem, store_attachments) are saved
-- with their files in holdfast.attachments and referenced by id; the
-- replay check compares the content so stored (the same file gets the same
-- id); files past the operator's attachment quotas or the provider's
-- request size are refused (file_set_problem). Checks first
-- (input_refusal), then writes (insert_input): a refused input has written
-- nothing.
--
-- Locks: the agent row (so the input, its event and the state change are one
-- step in the agent's history). Raises HF404 (agent), HF409 (archived), HF422.
CREATE OR REPLACE FUNCTION holdfast.create_input_or_replay(
    p_agent uuid, p_content jsonb, p_idempotency_key text,
    p_trace_parent text DEFAULT NULL, p_trace_state text DEFAULT NULL, p_mode text DEFAULT 'steer')
RETURNS TABLE (input_id uuid, replayed boolean) LANGUAGE plpgsql AS $$
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

-- Why p_agent (the caller holds its row lock) refuses this input, checked
-- in create_input_or_replay's order and reading only: code (HF404, HF409,
-- HF422), message and field, all NULL when it takes it; replay_of, the
-- input an earlier call with this idempotency key created, when this is a
-- replay of it. Nothing of an input is written before this has said yes,
-- so a batch (create_inputs) refuses one input without a savepoint.
CREATE OR REPLACE FUNCTION holdfast.input_refusal(
    p_agent uuid, p_content jsonb, p_idempotency_key text, p_mode text,
    OUT code text, OUT message text, OUT field text, OUT replay_of uuid)
LANGUAGE plpgsql STABLE AS $$
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

-- Write an input that input_refusal took (not a replay): its files stored,
-- the row, input.received, and the agent settled (idle: its turn opens) or
-- its worker interrupted. The caller holds the agent's row lock. Returns
-- the input's id.
CREATE OR REPLACE FUNCTION holdfast.insert_input(
    p_agent holdfast.agents, p_content jsonb, p_idempotency_key text,
    p_trace_parent text, p_trace_state text, p_mode text)
RETURNS uuid LANGUAGE plpgsql AS $$
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

-- Create several inputs in one transaction (the API's group commit of
-- POST /v1/agents/{id}/inputs), each checked on its own. Returns a row per
-- input: ord (its place in p_inputs, from 1), outcome ('created',
-- 'replayed', 'not_found': no such agent in the input's project,
-- 'conflict': HF409, 'invalid': HF422 with message and field) and the saved
-- input (on a replay, the first one; NULL when refused).
--
-- Each input is checked (input_refusal) before anything of it is written
-- (insert_input), so a refused one leaves nothing and needs no savepoint;
-- inputs are handled in agent order, and a later input sees an earlier one
-- of the batch as a later request sees a committed one (its idempotency
-- key, its agent's state). The agents are locked first, in id order, as the
-- worker's batches lock them, then the attachment counters of the
-- projects whose inputs carry files, in project order
-- (lock_attachment_counters: an input's files lock its project's counter
-- until commit, and inputs go in agent order, so two batches storing files
-- for two projects would otherwise each hold one counter and wait for the
-- other's); so two batches never deadlock on each other.
-- Raises nothing of its own; any other error aborts the whole batch, and
-- the API then creates its inputs one by one.
CREATE OR REPLACE FUNCTION holdfast.create_inputs(p_inputs holdfast.new_input[])
RETURNS TABLE (ord integer, outcome text, message text, field text, input holdfast.inputs)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
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
$$;

-- Take back a queued input before a turn admits it: it is marked removed
-- (never consumed, never in history) and `input.removed {"input_id"}` is
-- appended. Locks the agent row, then the input. Raises HF404 (no such
-- input), HF409 (the input is not queued: a turn took it, or it was removed
-- already). Returns the input's agent.
CREATE OR REPLACE FUNCTION holdfast.remove_input(p_input uuid)
RETURNS uuid LANGUAGE plpgsql AS $$
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

-- Change a waiting input (PATCH /v1/inputs/{id}): its mode and its place
-- in its agent's queue. p_mode 'steer' takes a queued input into the open
-- turn (or, on an idle agent, opens one for it, as a new input does);
-- 'queue' takes a steering input the turn has not consumed back into the
-- queue, unless it alone opened the turn and no model call ran yet (the
-- turn would have nothing to answer). p_position (from 1; past the end is
-- the end) places a queued input among its agent's queued inputs, the
-- others keeping their order (inputs.queue_position, renumbered 1..n).
-- NULL leaves either as it is. Appends input.updated {"input_id", "mode",
-- "position"} (position NULL unless queued). Locks the agent row, so the
-- changes of one agent's inputs serialize and a concurrent move never loses
-- or repeats an input. Raises HF404, HF409 (the input no longer waits, the
-- agent is archived, or the change does not apply), HF422 (mode or
-- position, field named). Returns the input.
CREATE OR REPLACE FUNCTION holdfast.update_input(p_input uuid, p_mode text DEFAULT NULL,
                                                 p_position integer DEFAULT NULL)
RETURNS holdfast.inputs LANGUAGE plpgsql AS $$
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

-- Move one input into history as a user message. The caller holds the
-- agent's row lock.
CREATE OR REPLACE FUNCTION holdfast.append_input_message(p_input holdfast.inputs, p_step uuid)
RETURNS void LANGUAGE plpgsql AS $$
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

-- Each new input of the turn starts a fresh model retry budget: a user who
-- steers a failing turn gets the full budget for the new attempt. A queued
-- input waits for its own turn, whose opening resets the budget.
CREATE OR REPLACE FUNCTION holdfast.tg_inputs_reset_retry_budget() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.admitted_at IS NULL THEN
        RETURN NULL;
    END IF;
    UPDATE holdfast.agents SET model_attempts = 0 WHERE id = NEW.agent_id AND model_attempts <> 0;
    RETURN NULL;
END
$$;
CREATE TRIGGER _100_reset_retry_budget AFTER INSERT ON holdfast.inputs
    FOR EACH ROW EXECUTE FUNCTION holdfast.tg_inputs_reset_retry_budget();


-- The names of the limits, in the order they are documented.
CREATE OR REPLACE FUNCTION holdfast.limit_names() RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT ARRAY['max_model_steps_per_turn', 'max_tool_calls_per_response', 'max_subagent_depth',
                 'max_live_children', 'max_descendants']
$$;

-- The operator's maximum for one limit (raises HF422 for an unknown name).
-- The column by name, not the row as jsonb: a model step reads two limits.
CREATE OR REPLACE FUNCTION holdfast.limit_maximum(p_name text)
RETURNS integer LANGUAGE plpgsql STABLE AS $$
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

-- The limit an agent with config p_config runs under: its config.limits
-- value, capped by the operator's maximum, or that maximum. Reads only.
-- PL/pgSQL (a step reads two limits; as SQL with a FROM this was parsed
-- and planned on every call).
CREATE OR REPLACE FUNCTION holdfast.agent_limit(p_config jsonb, p_name text)
RETURNS integer LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_max integer := holdfast.limit_maximum(p_name);
BEGIN
    RETURN least(coalesce((p_config #>> ARRAY['limits', p_name])::numeric, v_max), v_max)::integer;
END
$$;

-- Write the operator's maxima (workers call this at start with their
-- HOLDFAST_MAX_* settings; a DBA may too). Locks the settings row. Agents
-- configured above a lowered maximum run at the maximum. Raises HF422 for
-- a value that is not positive.
CREATE OR REPLACE FUNCTION holdfast.set_limit_maxima(
    p_max_model_steps_per_turn integer, p_max_tool_calls_per_response integer,
    p_max_subagent_depth integer, p_max_live_children integer, p_max_descendants integer)
RETURNS void LANGUAGE plpgsql AS $$
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

-- Set (or, with NULL, clear) a project's cap on agents running at once.
-- Agents already running keep their leases; the cap applies to claims.
-- Raises HF404 (no such project), HF422 (negative cap).
CREATE OR REPLACE FUNCTION holdfast.set_project_max_running(p_project_name text, p_max_running integer)
RETURNS void LANGUAGE plpgsql AS $$
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

-- The outcome a turn-ending event gives its turn (agents.last_turn_outcome):
-- `limit` for a turn.failed of a limit or budget, `failed` for any other.
CREATE OR REPLACE FUNCTION holdfast.turn_outcome(p_type text, p_data jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_type
        WHEN 'turn.completed' THEN 'completed'
        WHEN 'turn.cancelled' THEN 'cancelled'
        WHEN 'turn.failed' THEN
            CASE WHEN p_data #>> '{error,type}' IN ('limit_exceeded', 'budget_exceeded')
                 THEN 'limit' ELSE 'failed' END
    END
$$;

-- An agent's latest turn as the API shows it (AgentView.last_turn): its
-- number, outcome (NULL while open), error, start and end, and its usage
-- (agents.turn_usage, the sum of the open or last turn). NULL before the
-- agent's first turn.
CREATE OR REPLACE FUNCTION holdfast.agent_last_turn(p_agent holdfast.agents) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN (p_agent).last_turn_started_at IS NOT NULL THEN jsonb_build_object(
        'turn', (p_agent).turn_seq,
        'outcome', (p_agent).last_turn_outcome,
        'error', (p_agent).last_turn_error,
        'started_at', (p_agent).last_turn_started_at,
        'ended_at', (p_agent).last_turn_ended_at,
        'usage', holdfast.usage_json((p_agent).turn_usage))
    END
$$;
