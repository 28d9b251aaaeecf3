-- 0012_model_endpoints.sql — operator-owned model endpoints, project provider
-- keys, and secrets masked wherever an agent's config is shown.
--
-- Why: an agent's `config.model.base_url` used to accept any http(s) URL, and
-- the worker attached the operator's ANTHROPIC_API_KEY / OPENAI_API_KEY to
-- whatever host that was: one POST /v1/agents aimed at a tenant's own server
-- handed it the operator's key (issue 15, item 1). And MCP header values
-- (usually credentials) appeared in GET /v1/agents, config.updated events and
-- webhooks (item 6).
--
-- Adds:
--   model_endpoints          named endpoints the operator owns (provider kind,
--                            base URL, the env var the worker reads the
--                            credential from, optional project scope and
--                            model allow-list); managed by
--                            add_model_endpoint / list_model_endpoints /
--                            remove_model_endpoint (`holdfast endpoints`),
--                            never through the tenant API. The name
--                            `default` is reserved: it is the worker's
--                            environment pair of the agent's provider
--                            (ANTHROPIC_BASE_URL/_API_KEY for anthropic
--                            agents, OPENAI_BASE_URL/_API_KEY for openai).
--   projects.allow_custom_model_urls
--                            the operator's switch for tenant-set
--                            model.base_url (set_project_custom_model_urls);
--                            such requests never carry an operator
--                            credential, only the project's own key.
--   project_provider_keys    a project's own provider key, sealed with
--                            AES-256-GCM under HOLDFAST_SECRET_KEY by the
--                            API (the database never sees the clear key);
--                            opened only by the worker when calling.
--   check_model_access       one rule for create, PATCH and every model call
--                            (validate_model_access raises it; the worker's
--                            resolve_model_endpoint reports it).
--   mask_config_secrets / keep_masked_secrets
--                            MCP header values shown as "***"; a config
--                            sent back with "***" keeps the stored value.
--
-- The functions (sql/functions/endpoints.sql; create_agent and
-- update_agent_config in agents.sql) check model access, keep masked secrets, and record config.updated with the
-- config masked. Agents created before this migration: no model.endpoint
-- means `default`, so they keep working; one with a base_url is refused at
-- its next model call (turn.failed, invalid_request_error naming
-- model.base_url) until the operator allows custom URLs for its project or
-- the agent is PATCHed to an endpoint. Nothing is granted automatically: the
-- old behaviour was the leak.

ALTER TABLE holdfast.projects
    ADD COLUMN allow_custom_model_urls boolean NOT NULL DEFAULT false;

-- Named model endpoints, owned by the operator. `project_id` NULL: every
-- project may use it; `models` NULL: any model name.
CREATE TABLE holdfast.model_endpoints (
    id             uuid PRIMARY KEY DEFAULT holdfast.uuid_v7(),
    name           text NOT NULL UNIQUE
                   CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$' AND name <> 'default'),
    kind           text NOT NULL CHECK (kind IN ('anthropic', 'openai')),
    base_url       text NOT NULL CHECK (base_url ~ '^https?://[^/?#]+'),
    -- The worker's environment variable holding the credential; NULL sends
    -- none. HOLDFAST_* are refused: those hold the database URL and the
    -- secret key, which must never leave the worker.
    credential_env text CHECK (credential_env ~ '^[A-Z_][A-Z0-9_]{0,127}$'
                               AND credential_env NOT LIKE 'HOLDFAST\_%'),
    project_id     uuid REFERENCES holdfast.projects (id),
    models         text[] CHECK (models IS NULL OR (cardinality(models) > 0 AND array_position(models, NULL) IS NULL)),
    created_at     timestamptz NOT NULL DEFAULT holdfast.now()
);

-- A project's own provider key. `sealed` is version byte 1, a 12-byte nonce,
-- then the AES-256-GCM ciphertext and tag of the key, with the project id
-- and provider as associated data (a row copied to another project does not
-- open). `key_fingerprint` names the HOLDFAST_SECRET_KEY that sealed it, so
-- a worker with another key says so instead of failing obscurely.
CREATE TABLE holdfast.project_provider_keys (
    project_id      uuid NOT NULL REFERENCES holdfast.projects (id),
    provider        text NOT NULL CHECK (provider IN ('anthropic', 'openai')),
    sealed          bytea NOT NULL CHECK (length(sealed) > 29),
    key_fingerprint text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT holdfast.now(),
    updated_at      timestamptz NOT NULL DEFAULT holdfast.now(),
    PRIMARY KEY (project_id, provider)
);
