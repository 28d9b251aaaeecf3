-- 0029_attachments.sql — the bytes of images and documents, stored once.
--
-- Adds: holdfast.attachments, one row per distinct file (by SHA-256 and
-- media type) an agent was sent in an input or a tool result. The content
-- saved in inputs, messages, tool calls and events references the row
-- ({"type": "attachment", "attachment_id", "media_type", "size_bytes"} as
-- a block's source) instead of carrying the base64: those rows are read on
-- every step and events feed webhooks, so megabytes must not be copied into
-- each. The worker's step load puts the bytes back (hydrate_content) for
-- the model request only.
--
-- The functions (validate_content_blocks, store_attachments,
-- hydrate_content, ...) are in sql/functions/content.sql.

CREATE TABLE holdfast.attachments (
    agent_id   uuid NOT NULL REFERENCES holdfast.agents (id),
    id         uuid NOT NULL DEFAULT holdfast.uuid_v7(),
    media_type text NOT NULL
        CHECK (media_type IN ('image/jpeg', 'image/png', 'image/gif', 'image/webp', 'application/pdf')),
    sha256     bytea NOT NULL CHECK (octet_length(sha256) = 32),
    size_bytes integer NOT NULL CHECK (size_bytes > 0),
    data       bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT holdfast.now(),
    PRIMARY KEY (agent_id, id),
    -- The same file sent again (a replayed input, a second tool result)
    -- reuses its row.
    UNIQUE (agent_id, sha256, media_type),
    CONSTRAINT attachments_size_matches CHECK (size_bytes = octet_length(data))
);
-- Images and PDFs are compressed already: storing them out of line without
-- pglz saves the CPU of a compression attempt that gains nothing.
ALTER TABLE holdfast.attachments ALTER COLUMN data SET STORAGE EXTERNAL;
