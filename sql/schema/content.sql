-- Images and documents in inputs and tool results (docs/api.md, "Content
-- blocks"): their validation, their bytes stored once in
-- holdfast.attachments, and the bytes put back for a model request.
--
-- A block is Anthropic's shape: {"type": "image" | "document", "source":
-- {"type": "base64", "media_type", "data"} | {"type": "url", "url"}}. Once
-- stored, a base64 source becomes {"type": "attachment", "attachment_id",
-- "media_type", "size_bytes"}: that is what inputs, messages, tool calls
-- and events hold.

-- A file (image, PDF) an agent was sent, stored once: inputs, messages,
-- tool calls and events reference it ({"type": "attachment",
-- "attachment_id", ...} as a block's source) instead of carrying base64.
-- A file sent again reuses its row (unique per agent by sha256 and media
-- type); data is stored uncompressed, out of line.
CREATE TABLE holdfast.attachments (
    agent_id uuid NOT NULL,
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    media_type text NOT NULL,
    sha256 bytea NOT NULL,
    size_bytes integer NOT NULL,
    data bytea NOT NULL,
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT attachments_media_type_check CHECK (media_type IN ('image/jpeg', 'image/png', 'image/gif', 'image/webp', 'application/pdf')),
    CONSTRAINT attachments_sha256_check CHECK (octet_length(sha256) = 32),
    CONSTRAINT attachments_size_bytes_check CHECK (size_bytes > 0),
    CONSTRAINT attachments_size_matches CHECK (size_bytes = octet_length(data)),
    CONSTRAINT attachments_pkey PRIMARY KEY (agent_id, id),
    CONSTRAINT attachments_agent_id_sha256_media_type_key UNIQUE (agent_id, sha256, media_type),
    CONSTRAINT attachments_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES holdfast.agents(id)
);
ALTER TABLE holdfast.attachments ALTER COLUMN data SET STORAGE EXTERNAL;

-- The operator's limits on stored files, per agent and per project (every
-- API process writes its HOLDFAST_MAX_ATTACHMENT_BYTES_PER_* here at start,
-- set_attachment_quotas). One row.
CREATE TABLE holdfast.attachment_quotas (
    singleton boolean DEFAULT true NOT NULL,
    max_agent_bytes bigint DEFAULT 268435456 NOT NULL,
    max_project_bytes bigint DEFAULT '10737418240'::bigint NOT NULL,
    updated_at timestamptz DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT attachment_quotas_max_agent_bytes_check CHECK (max_agent_bytes > 0),
    CONSTRAINT attachment_quotas_max_project_bytes_check CHECK (max_project_bytes > 0),
    CONSTRAINT attachment_quotas_singleton_check CHECK (singleton),
    CONSTRAINT attachment_quotas_pkey PRIMARY KEY (singleton)
);

-- A project's row exists once it has stored a file. Nothing but the
-- attachment triggers locks it. No CHECK (bytes >= 0): the trigger's
-- upsert proposes a row of the change alone, a negative one for a delete,
-- and Postgres checks the proposed row before it finds the conflict.
CREATE TABLE holdfast.project_attachment_bytes (
    project_id uuid NOT NULL,
    bytes bigint NOT NULL,
    CONSTRAINT project_attachment_bytes_pkey PRIMARY KEY (project_id),
    CONSTRAINT project_attachment_bytes_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id)
);

INSERT INTO holdfast.attachment_quotas DEFAULT VALUES;

-- ==== functions and triggers ====

-- The largest file a block may carry, by block type: Anthropic's documented
-- limits (5 MiB an image, 32 MiB a PDF request). Pure.
CREATE OR REPLACE FUNCTION holdfast.content_max_bytes(p_block_type text)
RETURNS integer LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_block_type WHEN 'image' THEN 5 * 1024 * 1024 WHEN 'document' THEN 32 * 1024 * 1024 END
$$;

-- The media types a block type may carry. Pure.
CREATE OR REPLACE FUNCTION holdfast.content_media_types(p_block_type text)
RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_block_type
        WHEN 'image' THEN ARRAY['image/jpeg', 'image/png', 'image/gif', 'image/webp']
        WHEN 'document' THEN ARRAY['application/pdf'] END
$$;

-- Whether p_head, the first bytes of a file, starts with the signature
-- ("magic number") of p_media_type, one of content_media_types: a file is
-- stored, sent to models and served back only as what it is, so that (say)
-- an HTML page declared image/gif is refused, not served. Pure.
CREATE OR REPLACE FUNCTION holdfast.media_signature_matches(p_media_type text, p_head bytea)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(CASE p_media_type
        WHEN 'image/png' THEN substring(p_head FROM 1 FOR 8) = '\x89504e470d0a1a0a'::bytea
        WHEN 'image/jpeg' THEN substring(p_head FROM 1 FOR 3) = '\xffd8ff'::bytea
        WHEN 'image/gif' THEN substring(p_head FROM 1 FOR 6) IN ('GIF87a'::bytea, 'GIF89a'::bytea)
        WHEN 'image/webp' THEN substring(p_head FROM 1 FOR 4) = 'RIFF'::bytea
                           AND substring(p_head FROM 9 FOR 4) = 'WEBP'::bytea
        WHEN 'application/pdf' THEN substring(p_head FROM 1 FOR 5) = '%PDF-'::bytea
        END, false)
$$;

-- Whether a tool's output is content blocks (and not any JSON to be sent as
-- its text): an array of objects typed text, image or document with at
-- least one image or document. The worker's rule is the same
-- (ContentBlock::media_blocks in providers/src/lib.rs). Pure.
-- PL/pgSQL: called on every tool result, most of them not arrays.
CREATE OR REPLACE FUNCTION holdfast.is_media_blocks(p_output jsonb)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
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

-- The bytes the base64 text p_data decodes to, from its length and
-- padding alone (nothing is decoded), for the size checks. Pure.
CREATE OR REPLACE FUNCTION holdfast.base64_decoded_length(p_data text)
RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT length(p_data)::bigint / 4 * 3
           - CASE WHEN p_data LIKE '%==' THEN 2 WHEN p_data LIKE '%=' THEN 1 ELSE 0 END
$$;

-- What is wrong with one image or document block, if anything: message and
-- field (p_field is the block's, e.g. content[2]) are NULL for a good block.
-- A malformed block (unknown field, media type not allowed, base64 not
-- well-formed, a file over content_max_bytes, a URL that is not http(s)) is
-- told as is; a block the agent's provider cannot take (p_provider
-- 'openai', Chat Completions: a document by URL) with the message starting
-- unsupported_content, and data that is not of its media type
-- (media_signature_matches, on its first 12 bytes) with the message
-- starting media_type_mismatch, so the API answers 422 rather than 400. The size is
-- computed from the base64 length, so an oversize file is refused before
-- its text is scanned. Reads nothing.
CREATE OR REPLACE FUNCTION holdfast.content_block_problem(
    p_block jsonb, p_field text, p_provider text, OUT message text, OUT field text)
LANGUAGE plpgsql IMMUTABLE AS $$
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
$$;

-- The first problem (content_block_problem) of the image and document
-- blocks of p_blocks, fields named p_field[i]...; NULLs when there is none
-- or p_blocks is not an array. Reads nothing.
CREATE OR REPLACE FUNCTION holdfast.content_problem(
    p_blocks jsonb, p_field text, p_provider text, OUT message text, OUT field text)
LANGUAGE plpgsql IMMUTABLE AS $$
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

-- The file a content block carries: the decoded data of a base64 image or
-- document source, NULL for any other block. The one test of which blocks
-- are files to store.
CREATE OR REPLACE FUNCTION holdfast.block_file_data(p_block jsonb) RETURNS bytea
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_block ->> 'type' IN ('image', 'document') AND p_block #>> '{source,type}' = 'base64'
                THEN decode(p_block #>> '{source,data}', 'base64') END
$$;

-- p_blocks with each file block (p_hashes[i], the sha256 of block i's
-- block_file_data, not NULL) replaced by a reference to its row in
-- holdfast.attachments: the one definition of that reference. Any other
-- block as it was. NULL when a file is not stored for p_agent yet. The
-- hashes come from the caller so that a file is decoded and hashed once
-- (store_attachments hashes it for its INSERT).
CREATE OR REPLACE FUNCTION holdfast.referenced_content(p_agent uuid, p_blocks jsonb, p_hashes bytea[])
RETURNS jsonb LANGUAGE sql STABLE AS $$
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

-- p_blocks as they are saved for p_agent (referenced_content); anything
-- but an array with a base64 source as it is. Reads only, so a check (is
-- this a replay of a saved input?) can compare saved content before
-- anything is written.
CREATE OR REPLACE FUNCTION holdfast.stored_content(p_agent uuid, p_blocks jsonb)
RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
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
$$;

-- Store the base64 files of p_blocks' image and document blocks (already
-- checked by content_problem) as p_agent's attachments, one row per
-- distinct file (a file sent again reuses its row), and return the blocks
-- as stored_content references them. Each file is decoded and hashed once.
-- Inserts into holdfast.attachments (ON CONFLICT on the agent's sha256 and
-- media type: concurrent senders of one file share a row; the references
-- are read by a later statement, which sees the row either way).
CREATE OR REPLACE FUNCTION holdfast.store_attachments(p_agent uuid, p_blocks jsonb)
RETURNS jsonb LANGUAGE plpgsql AS $$
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
$$;

-- The base64 files of p_blocks' image and document blocks, one row per
-- block, with their sizes from the base64 length (nothing decoded) and
-- their declared media types. Anything but an array has none. Pure.
CREATE OR REPLACE FUNCTION holdfast.content_file_sizes(p_blocks jsonb)
RETURNS TABLE (ordinality bigint, size_bytes bigint, media_type text) LANGUAGE sql IMMUTABLE AS $$
    SELECT b.ordinality, holdfast.base64_decoded_length(b.value #>> '{source,data}'),
           b.value #>> '{source,media_type}'
      FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_blocks) = 'array' THEN p_blocks END)
           WITH ORDINALITY b
     WHERE b.value ->> 'type' IN ('image', 'document') AND b.value #>> '{source,type}' = 'base64'
$$;

-- Set the operator's attachment quotas: the most bytes of files one agent,
-- and one project, may have stored (every API process calls this at start
-- with its HOLDFAST_MAX_ATTACHMENT_BYTES_PER_* settings; a DBA may too).
-- Lowering one below what is stored refuses new files, never deletes any.
-- Raises HF422 for a value that is not positive.
CREATE OR REPLACE FUNCTION holdfast.set_attachment_quotas(p_per_agent bigint, p_per_project bigint)
RETURNS void LANGUAGE plpgsql AS $$
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

-- What storing p_blocks' files for p_agent would break of the attachment
-- quotas, if anything: message (starting attachment_quota_exceeded, naming
-- the quota and the bytes) and field (p_field), NULLs when the files fit. A
-- file the agent has stored already costs nothing (it is stored once). The
-- cheap bound (every file new, sizes from the base64 length) is tried
-- first; only a file set near a quota is decoded and hashed to find which
-- files are new. Reads only; p_agent's attachment_bytes must be current
-- (the caller holds its row lock).
CREATE OR REPLACE FUNCTION holdfast.attachment_quota_problem(
    p_agent holdfast.agents, p_blocks jsonb, p_field text, OUT message text, OUT field text)
LANGUAGE plpgsql STABLE AS $$
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

-- Lock the attachment counters (project_attachment_bytes) of p_projects in
-- project id order, creating missing ones at 0: a transaction that stores
-- files for several projects takes their counters in this one order before
-- its first file (tg_attachments_count locks a file's project counter until
-- commit). The caller holds the agents' row locks: agents before counters,
-- as everywhere.
CREATE OR REPLACE FUNCTION holdfast.lock_attachment_counters(p_projects uuid[])
RETURNS void LANGUAGE sql AS $$
    INSERT INTO holdfast.project_attachment_bytes AS t (project_id, bytes)
    SELECT DISTINCT u.id, 0 FROM unnest(p_projects) AS u (id) WHERE u.id IS NOT NULL ORDER BY u.id
    ON CONFLICT (project_id) DO UPDATE SET bytes = t.bytes
$$;

-- Keep agents.attachment_bytes and project_attachment_bytes equal to the
-- bytes stored, on every insert (TG_ARGV[0] = 1) and delete (-1) of
-- attachments, and refuse an insert that takes either past its quota (HF422,
-- as attachment_quota_problem words it): the callers check first, so this
-- only fires for a concurrent writer that got there in between. Locks the
-- project's counter row until commit (writers of one project's files take
-- turns), after the agent rows the callers hold.
CREATE OR REPLACE FUNCTION holdfast.tg_attachments_count() RETURNS trigger
LANGUAGE plpgsql AS $$
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
-- Statement triggers: a statement storing several files updates each
-- agent's and project's total once.
CREATE TRIGGER _100_count_inserted AFTER INSERT ON holdfast.attachments
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT
    EXECUTE FUNCTION holdfast.tg_attachments_count('1');
CREATE TRIGGER _100_count_deleted AFTER DELETE ON holdfast.attachments
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT
    EXECUTE FUNCTION holdfast.tg_attachments_count('-1');

-- The most a model request of p_provider may carry of files, and what one
-- file of p_size_bytes counts towards it, from the providers' documented
-- limits: Anthropic's Messages API takes a request of at most 32 MB (the
-- base64 of its files counts); OpenAI takes at most 50 MB of image and
-- file bytes per request (counted decoded). Pure.
CREATE OR REPLACE FUNCTION holdfast.request_file_limit(p_provider text)
RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_provider WHEN 'anthropic' THEN 32000000 ELSE 50000000 END::bigint
$$;

-- The most a model request of p_provider may carry of PDFs, within
-- request_file_limit, or NULL when PDFs have no limit of their own there.
-- OpenAI: "up to 100 pages and 32MB of total content in a single request
-- to the API, across multiple file inputs" (OpenAI's PDF file inputs
-- guide, platform.openai.com/docs/guides/pdf-files, "File size
-- limitations"); counted decoded, as its files are. Anthropic's PDFs count
-- towards its 32 MB request like any file. Pure.
CREATE OR REPLACE FUNCTION holdfast.request_pdf_limit(p_provider text)
RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_provider WHEN 'anthropic' THEN NULL ELSE 32000000 END::bigint
$$;

CREATE OR REPLACE FUNCTION holdfast.request_file_cost(p_provider text, p_size_bytes bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_provider WHEN 'anthropic' THEN (p_size_bytes + 2) / 3 * 4 ELSE p_size_bytes END
$$;

-- The files already in p_agent's next model request, one row per
-- reference (each is sent once per reference), with its size and media
-- type: every attachment reference of the messages from context_start_seq
-- on, of the tool results answering them, and of the inputs still waiting.
-- Reads messages, tool calls and inputs.
CREATE OR REPLACE FUNCTION holdfast.context_files(p_agent holdfast.agents)
RETURNS TABLE (size_bytes bigint, media_type text) LANGUAGE sql STABLE AS $$
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
$$;

-- Whether p_blocks' files, added to p_agent's next model request
-- (context_files), would take it past its provider's limit on files
-- (request_file_limit) or on PDFs (request_pdf_limit): message (starting
-- request_too_large) and field (p_field), NULLs when they fit or p_blocks
-- has no base64 file. Reads only.
CREATE OR REPLACE FUNCTION holdfast.request_size_problem(
    p_agent holdfast.agents, p_blocks jsonb, p_field text, OUT message text, OUT field text)
LANGUAGE plpgsql STABLE AS $$
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

-- The first of the problems a file set may have once its blocks are well
-- formed (content_problem): the attachment quotas, then the provider's
-- request size. Reads only.
CREATE OR REPLACE FUNCTION holdfast.file_set_problem(
    p_agent holdfast.agents, p_blocks jsonb, p_field text, OUT message text, OUT field text)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    SELECT * INTO message, field FROM holdfast.attachment_quota_problem(p_agent, p_blocks, p_field);
    IF message IS NULL THEN
        SELECT * INTO message, field FROM holdfast.request_size_problem(p_agent, p_blocks, p_field);
    END IF;
END
$$;

-- A tool's output checked and stored as an input's content is, when it
-- is content blocks (is_media_blocks; any other output is returned as it
-- is), but without raising: a problem comes back in message and field
-- (output[i]...) with output NULL, for the caller to refuse the result.
-- The caller holds the agent's row lock.
CREATE OR REPLACE FUNCTION holdfast.store_tool_output(
    p_agent holdfast.agents, p_output jsonb, OUT output jsonb, OUT message text, OUT field text)
LANGUAGE plpgsql AS $$
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

-- A tool's output as a worker hands it over (an MCP server's images), kept
-- rather than refused, since the result is already in hand: each image or
-- document block with a problem (content_block_problem) becomes a text
-- block saying why it was left out, the rest is stored as
-- store_tool_output stores it. Output left with no image or document is the
-- text of its blocks, one a line. The caller holds the agent's row lock.
CREATE OR REPLACE FUNCTION holdfast.keep_tool_output(p_agent holdfast.agents, p_output jsonb)
RETURNS jsonb LANGUAGE plpgsql AS $$
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
