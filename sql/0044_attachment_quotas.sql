-- 0044_attachment_quotas.sql — bounded attachments, and retention that
-- covers them and inputs.
--
-- Adds:
--   * attachment_quotas: the operator's totals of attachment bytes per
--     agent and per project (one row; every API process writes its
--     HOLDFAST_MAX_ATTACHMENT_BYTES_PER_* settings here at start,
--     set_attachment_quotas). An input or tool result whose new files would
--     pass either is refused (attachment_quota_problem).
--   * agents.attachment_bytes and project_attachment_bytes: the bytes each
--     agent and each project has stored, kept by triggers on attachments
--     (insert and delete; created with their function in
--     sql/functions/content.sql), which also refuse an insert that passes a
--     quota (a concurrent writer got there between the check and the
--     insert).
--   * inputs.content_pruned_at: retention replaces an old input's content
--     with JSON null, as it does a tool output's; the row stays (its
--     idempotency key, its place in history).
--   * hydrate_content goes: the worker loads an attachment's bytes once per
--     model call, for the messages it sends (engine/src/store/steps.rs).

CREATE TABLE holdfast.attachment_quotas (
    singleton         boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    max_agent_bytes   bigint NOT NULL DEFAULT 268435456 CHECK (max_agent_bytes > 0),
    max_project_bytes bigint NOT NULL DEFAULT 10737418240 CHECK (max_project_bytes > 0),
    updated_at        timestamptz NOT NULL DEFAULT holdfast.now()
);
INSERT INTO holdfast.attachment_quotas DEFAULT VALUES;

ALTER TABLE holdfast.agents
    ADD COLUMN attachment_bytes bigint NOT NULL DEFAULT 0 CHECK (attachment_bytes >= 0);

-- A project's row exists once it has stored a file. Nothing but the
-- attachment triggers locks it. No CHECK (bytes >= 0): the trigger's
-- upsert proposes a row of the change alone, a negative one for a delete,
-- and Postgres checks the proposed row before it finds the conflict.
CREATE TABLE holdfast.project_attachment_bytes (
    project_id uuid PRIMARY KEY REFERENCES holdfast.projects (id),
    bytes      bigint NOT NULL
);

UPDATE holdfast.agents a SET attachment_bytes = s.bytes
  FROM (SELECT agent_id, sum(size_bytes) AS bytes FROM holdfast.attachments GROUP BY agent_id) s
 WHERE a.id = s.agent_id;
INSERT INTO holdfast.project_attachment_bytes (project_id, bytes)
SELECT a.project_id, sum(t.size_bytes)
  FROM holdfast.attachments t JOIN holdfast.agents a ON a.id = t.agent_id
 GROUP BY a.project_id;

ALTER TABLE holdfast.inputs ADD COLUMN content_pruned_at timestamptz;

DROP FUNCTION IF EXISTS holdfast.hydrate_content(uuid, jsonb);
-- Their results gained columns (inputs_pruned, attachments_deleted); IF
-- EXISTS: a new database gets its functions from the function files, after
-- the migrations.
DROP FUNCTION IF EXISTS holdfast.retention_tick(integer);
DROP FUNCTION IF EXISTS holdfast.prune_retention_rows(integer);
