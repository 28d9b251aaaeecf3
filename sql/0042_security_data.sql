-- 0042_security_data.sql — what a tenant may spend and keep: the operator's
-- opt-in for a provider's server tools, attachment quotas, and retention of
-- attachments and inputs.
--
-- - projects.allow_server_tools: Anthropic's server tools (web search, web
--   fetch) run inside the model call on the operator's key and are billed to
--   it, so a project may configure them only once the operator allows it
--   (`holdfast projects allow-server-tools NAME`; set_project_server_tools).
--   Existing projects start without it.
-- - limit_settings.max_attachment_bytes_per_agent / _per_project: the most
--   bytes of attachments (images, documents) an agent and a project may
--   store (HOLDFAST_MAX_ATTACHMENT_BYTES_PER_AGENT / _PER_PROJECT, written
--   by each worker at start like the other maxima).
-- - inputs.content_pruned_at: when retention replaced a consumed input's
--   content with JSON null (its text lives on in the agent's messages).
-- - prune_retention_rows and retention_tick report attachments and inputs
--   too: their result types change, so the old definitions are dropped
--   (sql/functions/retention.sql defines them again).

ALTER TABLE holdfast.projects
    ADD COLUMN allow_server_tools boolean NOT NULL DEFAULT false;

ALTER TABLE holdfast.limit_settings
    ADD COLUMN max_attachment_bytes_per_agent bigint NOT NULL DEFAULT 268435456
        CHECK (max_attachment_bytes_per_agent > 0),
    ADD COLUMN max_attachment_bytes_per_project bigint NOT NULL DEFAULT 10737418240
        CHECK (max_attachment_bytes_per_project > 0);

ALTER TABLE holdfast.inputs
    ADD COLUMN content_pruned_at timestamptz;

DROP FUNCTION IF EXISTS holdfast.retention_tick(integer);
DROP FUNCTION IF EXISTS holdfast.prune_retention_rows(integer);
