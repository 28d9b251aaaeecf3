-- 0042_security_data.sql — the operator's opt-in for a provider's server
-- tools.
--
-- projects.allow_server_tools: Anthropic's server tools (web search, web
-- fetch) run inside the model call on the operator's key and are billed to
-- it, so a project may configure them only once the operator allows it
-- (`holdfast projects allow-server-tools NAME`; set_project_server_tools,
-- check_server_tools). Existing projects start without it.

ALTER TABLE holdfast.projects
    ADD COLUMN allow_server_tools boolean NOT NULL DEFAULT false;
