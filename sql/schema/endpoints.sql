-- sql/schema/endpoints.sql — operator-owned model endpoints, projects' own provider keys, and masking config secrets.
--
-- This area's current schema: its tables, indexes and views first, then,
-- after the line below, its functions and triggers.
-- Each object is defined here once, as it is now. See docs/sql.md for how
-- a fresh install applies these files and how a change is added.

-- Named model endpoints, owned by the operator. `project_id` NULL: every
-- project may use it; `models` NULL: any model name.
CREATE TABLE holdfast.model_endpoints (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    name text NOT NULL,
    kind text NOT NULL,
    base_url text NOT NULL,
    -- The worker's environment variable holding the credential; NULL sends
    -- none. HOLDFAST_* are refused: those hold the database URL and the
    -- secret key, which must never leave the worker.
    credential_env text,
    project_id uuid,
    models text[],
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT model_endpoints_base_url_check CHECK (base_url ~ '^https?://[^/?#]+'),
    CONSTRAINT model_endpoints_credential_env_check CHECK ((credential_env ~ '^[A-Z_][A-Z0-9_]{0,127}$') AND (credential_env !~~ 'HOLDFAST\_%')),
    CONSTRAINT model_endpoints_kind_check CHECK (kind IN ('anthropic', 'openai')),
    CONSTRAINT model_endpoints_models_check CHECK ((models IS NULL) OR ((cardinality(models) > 0) AND (array_position(models, NULL::text) IS NULL))),
    CONSTRAINT model_endpoints_name_check CHECK ((name ~ '^[a-z0-9][a-z0-9._-]{0,62}$') AND (name <> 'default')),
    CONSTRAINT model_endpoints_pkey PRIMARY KEY (id),
    CONSTRAINT model_endpoints_name_key UNIQUE (name),
    CONSTRAINT model_endpoints_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id)
);

-- A project's own provider key. `sealed` is version byte 1, a 12-byte nonce,
-- then the AES-256-GCM ciphertext and tag of the key, with the project id
-- and provider as associated data (a row copied to another project does not
-- open). `key_fingerprint` names the HOLDFAST_SECRET_KEY that sealed it, so
-- a worker with another key says so instead of failing obscurely.
CREATE TABLE holdfast.project_provider_keys (
    project_id uuid NOT NULL,
    provider text NOT NULL,
    sealed bytea NOT NULL,
    key_fingerprint text NOT NULL,
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    updated_at timestamptz DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT project_provider_keys_provider_check CHECK (provider IN ('anthropic', 'openai')),
    CONSTRAINT project_provider_keys_sealed_check CHECK (length(sealed) > 29),
    CONSTRAINT project_provider_keys_pkey PRIMARY KEY (project_id, provider),
    CONSTRAINT project_provider_keys_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id)
);

-- ==== functions and triggers ====

-- The id of an existing project named p_name. Raises HF404: operator
-- settings for a misspelt project must not create one silently.
CREATE OR REPLACE FUNCTION holdfast.project_by_name(p_name text)
RETURNS uuid LANGUAGE plpgsql STABLE AS $$
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

-- Add a model endpoint. p_project_name NULL: for every project; p_models
-- NULL or empty: any model. Takes no lock beyond the insert (the unique name
-- serialises concurrent adds). Raises HF404 (project), HF409 (name taken),
-- HF422 (a field is invalid; the field is named).
CREATE OR REPLACE FUNCTION holdfast.add_model_endpoint(
    p_name text, p_kind text, p_base_url text, p_credential_env text,
    p_project_name text, p_models text[])
RETURNS holdfast.model_endpoints LANGUAGE plpgsql AS $$
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
$$;

-- Every model endpoint with its project's name and how many agents (not
-- archived) name it. Reads only.
CREATE OR REPLACE FUNCTION holdfast.list_model_endpoints()
RETURNS TABLE (name text, kind text, base_url text, credential_env text,
               project_name text, models text[], agents bigint, created_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT e.name, e.kind, e.base_url, e.credential_env, p.name, e.models,
           (SELECT count(*) FROM holdfast.agents a
             WHERE a.config #>> '{model,endpoint}' = e.name AND a.state <> 'archived'
               AND (e.project_id IS NULL OR a.project_id = e.project_id)),
           e.created_at
      FROM holdfast.model_endpoints e
      LEFT JOIN holdfast.projects p ON p.id = e.project_id
     ORDER BY e.name
$$;

-- Remove a model endpoint. Agents that still name it keep their config; their
-- next model call fails the turn (invalid_request_error naming
-- model.endpoint) until they are PATCHed. Returns how many agents (not
-- archived) name it. Raises HF404.
CREATE OR REPLACE FUNCTION holdfast.remove_model_endpoint(p_name text)
RETURNS bigint LANGUAGE plpgsql AS $$
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

-- Allow (or forbid again) tenant-set model.base_url for a project. Requests
-- to such URLs never carry an operator credential. Forbidding takes effect
-- at the next model call of every agent of the project. Locks the project
-- row. Raises HF404.
CREATE OR REPLACE FUNCTION holdfast.set_project_custom_model_urls(p_project_name text, p_allowed boolean)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE holdfast.projects SET allow_custom_model_urls = p_allowed
     WHERE id = holdfast.project_by_name(p_project_name);
    RETURN p_allowed;
END
$$;

-- Allow (or forbid) a project's agents Anthropic's server tools
-- (anthropic_web_search, anthropic_web_fetch): they run inside the model
-- call on the operator's credential and are billed to it. Forbidding takes
-- effect at the next model call of every agent of the project (the turn
-- fails naming the tool). Raises HF404.
CREATE OR REPLACE FUNCTION holdfast.set_project_server_tools(p_project_name text, p_allowed boolean)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE holdfast.projects SET allow_server_tools = p_allowed
     WHERE id = holdfast.project_by_name(p_project_name);
    RETURN p_allowed;
END
$$;

-- Why p_project may not use the provider server tools of agent config
-- p_config: no row when it may (the operator allowed them, or the config
-- has none), else one row naming the first such tool (`tools[i]`) and the
-- reason, starting `server_tools_not_allowed` (a 422). Reads projects.
CREATE OR REPLACE FUNCTION holdfast.check_server_tools(p_project uuid, p_config jsonb)
RETURNS TABLE (field text, message text) LANGUAGE sql STABLE AS $$
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

-- Whose model endpoints and project keys an agent of provider p_provider
-- uses: `openai` for both OpenAI APIs (`openai`, Chat Completions, and
-- `openai_responses`), else the provider itself. Endpoint kinds and project
-- keys are per vendor. Reads nothing, raises nothing.
CREATE OR REPLACE FUNCTION holdfast.provider_vendor(p_provider text)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_provider = 'openai_responses' THEN 'openai' ELSE p_provider END
$$;

-- Why p_project may not use the model settings p_model (an agent's
-- config.model): no row when it may, else one row naming the field and the
-- reason. The one rule behind create, PATCH and every model call:
--   base_url   only where the operator allowed custom URLs for the project,
--              and not together with an endpoint other than `default`;
--   endpoint   `default` (or absent), or a model_endpoints row of that name
--              scoped to every project or to this one (another project's
--              endpoint is reported exactly like an unknown one), whose kind
--              is the agent's provider's vendor, and whose allow-list (if any) has
--              model.name.
-- Reads only. Expects the shape validate_config checks.
CREATE OR REPLACE FUNCTION holdfast.check_model_access(p_project uuid, p_model jsonb)
RETURNS TABLE (field text, message text) LANGUAGE plpgsql STABLE AS $$
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

-- Raise what check_model_access reports for an agent config of p_project:
-- HF422 with the field named, the message starting `model_not_permitted:`
-- (the API answers 422: the config is well-formed but not permitted), and
-- HF422 plainly for a model.endpoint that is not a name; then what
-- check_server_tools reports (`server_tools_not_allowed:`, also a 422).
-- Reads only.
CREATE OR REPLACE FUNCTION holdfast.validate_model_access(p_project uuid, p_config jsonb)
RETURNS void LANGUAGE plpgsql STABLE AS $$
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

-- Where agent p_agent's model call with settings p_model (the config.model
-- the worker loaded for this attempt) goes, resolved at every call so that a
-- removed endpoint, a changed allow-list, a withdrawn custom-URL permission
-- or withdrawn server tools (check_server_tools, on the agent's stored config)
-- applies at once. One row:
--   refused_field/refused_message  set when check_model_access or
--                                  check_server_tools refuses (the worker
--                                  fails the turn with them);
--   endpoint                       the endpoint's name (`default` included);
--   custom_url                     model.base_url when custom (the worker
--                                  then attaches no operator credential);
--   base_url, credential_env       the named endpoint's (NULL for default);
--   sealed_key, key_fingerprint    the project's own key for the provider's
--                                  vendor (provider_vendor);
--   project_id                     the agent's project (the key is bound to it).
-- Reads only. Raises HF404 (agent).
CREATE OR REPLACE FUNCTION holdfast.resolve_model_endpoint(p_agent uuid, p_model jsonb)
RETURNS TABLE (refused_field text, refused_message text, endpoint text, custom_url text,
               base_url text, credential_env text, sealed_key bytea, key_fingerprint text,
               project_id uuid)
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $$
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

-- Set (or replace) a project's own key for a provider. Upserts the one row.
-- Raises HF422 (provider). Returns the row's timestamps.
CREATE OR REPLACE FUNCTION holdfast.set_project_provider_key(
    p_project uuid, p_provider text, p_sealed bytea, p_key_fingerprint text)
RETURNS TABLE (provider text, created_at timestamptz, updated_at timestamptz) LANGUAGE plpgsql AS $$
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

-- The providers a project has its own key for, and since when. Never the
-- key, sealed or not. Reads only.
CREATE OR REPLACE FUNCTION holdfast.list_project_provider_keys(p_project uuid)
RETURNS TABLE (provider text, created_at timestamptz, updated_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT k.provider, k.created_at, k.updated_at FROM holdfast.project_provider_keys k
     WHERE k.project_id = p_project ORDER BY k.provider
$$;

-- Delete a project's own key for a provider; its agents use the endpoint's
-- credential again from their next model call. Raises HF404 (none set).
CREATE OR REPLACE FUNCTION holdfast.delete_project_provider_key(p_project uuid, p_provider text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM holdfast.project_provider_keys k WHERE k.project_id = p_project AND k.provider = p_provider;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('no %s key is set for this project', p_provider));
    END IF;
END
$$;

-- p_config with every header value of every MCP tool entry replaced by "***",
-- at any depth: the MCP entries of a spawn_subagent tool's config (and of
-- its own spawn_subagent's, ...) too. What GET /v1/agents, listings and
-- config.updated events (and so webhooks) show. The worker reads the stored
-- config, unmasked. Pure. PL/pgSQL: it calls itself for a nested config.
CREATE OR REPLACE FUNCTION holdfast.mask_config_secrets(p_config jsonb)
RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
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

-- p_new with each MCP header value "***" replaced by the value stored in
-- p_old (the config in force) for the same header of the MCP tool with the
-- same name and the same url, so that a read-modify-write round trip of a
-- masked config keeps its secrets. The same rule holds at every depth: the
-- config of p_new's spawn_subagent tool is matched against the config of
-- p_old's (keep_masked_secrets_at). A stored value is never carried to
-- another url (that would hand it to a new server unseen). Raises HF422 for
-- a "***" with no stored value to keep (the field named). Pure.
CREATE OR REPLACE FUNCTION holdfast.keep_masked_secrets(p_old jsonb, p_new jsonb)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT holdfast.keep_masked_secrets_at(p_old, p_new, '')
$$;

-- keep_masked_secrets for a config found at p_at in the agent's config
-- ('' for the agent's own, 'tools[2].config.' for its subagents'): fields
-- in errors are named from there. Pure; calls itself for a nested config.
CREATE OR REPLACE FUNCTION holdfast.keep_masked_secrets_at(p_old jsonb, p_new jsonb, p_at text)
RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
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
$$;
