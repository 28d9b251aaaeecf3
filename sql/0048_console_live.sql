-- 0048_console_live.sql — what the console needs to follow a command as it
-- runs and to find agents by what was said to and by them.
--
-- Adds:
--   * commands.live_output_bytes, live_output_at: the output bytes a
--     command's daemon has relayed while it runs (command_output in
--     sql/functions/machines.sql, never saved: the result stays the record)
--     and when it last did, so each command's live output is bounded in
--     bytes and in rate.
--   * inputs_search_idx, messages_search_idx: full-text indexes (the
--     built-in `simple` configuration: words as written, no stemming, no
--     extension) of the text an input or a saved message holds: a string
--     content, and every "text" member of its blocks. Content over 256 KiB
--     (its JSON text) is not indexed; the agent list's search
--     (agents_by_activity) says the same, so it can use these indexes.
--     Without fastupdate: each insert updates the index itself, so a search
--     never walks a pending list of recent rows (which also makes the
--     planner price the index above a sequential scan).

ALTER TABLE holdfast.commands
    ADD COLUMN live_output_bytes integer NOT NULL DEFAULT 0 CHECK (live_output_bytes >= 0),
    ADD COLUMN live_output_at timestamptz;

CREATE INDEX inputs_search_idx ON holdfast.inputs USING gin (
    to_tsvector('simple'::regconfig,
                jsonb_path_query_array(content, 'strict $.**.text')
                || jsonb_path_query_array(content, 'strict $ ? (@.type() == "string")')))
    WITH (fastupdate = off)
    WHERE octet_length(content::text) <= 262144;

CREATE INDEX messages_search_idx ON holdfast.messages USING gin (
    to_tsvector('simple'::regconfig, jsonb_path_query_array(content, 'strict $.**.text')))
    WITH (fastupdate = off)
    WHERE octet_length(content::text) <= 262144;
