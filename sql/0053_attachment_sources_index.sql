-- 0053_attachment_sources_index.sql — retention finds the forks and replays
-- that read an agent's stored files (prunable_attachments) by this index.

CREATE INDEX agents_attachment_sources_idx ON holdfast.agents USING gin (attachment_sources)
    WHERE (attachment_sources <> '{}'::uuid[]);
