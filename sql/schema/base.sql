-- sql/schema/base.sql — the clock, ids, errors and small JSON and URL helpers every other file uses.
--
-- This area's current schema: its tables, indexes and views first, then,
-- after the line below, its functions and triggers.
-- Each object is defined here once, as it is now. See docs/sql.md for how
-- a fresh install applies these files and how a change is added.

-- Model usage: tokens, cost (NULL when unpriced) and the provider's server
-- tool requests (of them, web searches), as one step, turn or agent summed
-- them; a NULL count reads as 0 (usage.sql).
CREATE TYPE holdfast.token_usage AS (
	input_tokens bigint,
	output_tokens bigint,
	cache_read_tokens bigint,
	cache_write_tokens bigint,
	reasoning_tokens bigint,
	cost_usd numeric,
	server_tool_requests bigint,
	web_search_requests bigint
);

-- ==== functions and triggers ====

-- The one clock. clock_timestamp(), not now(): now() is frozen for a whole
-- transaction. Tests shift it with `SET holdfast.clock_offset = '2 minutes'`
-- (session-local) to move past lease expiry without sleeping.
CREATE OR REPLACE FUNCTION holdfast.now() RETURNS timestamptz
LANGUAGE sql VOLATILE AS $$
    SELECT clock_timestamp()
         + coalesce(nullif(current_setting('holdfast.clock_offset', true), ''), '0')::interval
$$;

-- UUIDv7 (RFC 9562): 48-bit Unix milliseconds, then random bits, so ids sort by
-- creation time and index inserts stay append-mostly.
CREATE OR REPLACE FUNCTION holdfast.uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;

-- Raise one of Holdfast's SQLSTATEs; p_column names the offending field.
CREATE OR REPLACE FUNCTION holdfast.raise(p_code text, p_message text, p_column text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_column IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = p_code, MESSAGE = p_message;
    END IF;
    RAISE EXCEPTION USING ERRCODE = p_code, MESSAGE = p_message, COLUMN = p_column;
END
$$;

-- RFC 7396 JSON merge patch: objects merge key by key, null removes a key,
-- anything else (arrays included) replaces. Pure.
CREATE OR REPLACE FUNCTION holdfast.jsonb_merge_patch(p_target jsonb, p_patch jsonb)
RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_result jsonb;
    v_key text;
    v_value jsonb;
BEGIN
    IF jsonb_typeof(p_patch) IS DISTINCT FROM 'object' THEN
        RETURN p_patch;
    END IF;
    v_result := CASE WHEN jsonb_typeof(p_target) = 'object' THEN p_target ELSE '{}' END;
    FOR v_key, v_value IN SELECT e.key, e.value FROM jsonb_each(p_patch) e LOOP
        IF jsonb_typeof(v_value) = 'null' THEN
            v_result := v_result - v_key;
        ELSE
            v_result := jsonb_set(v_result, ARRAY[v_key], holdfast.jsonb_merge_patch(v_result -> v_key, v_value));
        END IF;
    END LOOP;
    RETURN v_result;
END
$$;

-- The RFC 7396 merge patch that turns p_old into p_new (jsonb_merge_patch(
-- p_old, jsonb_merge_diff(p_old, p_new)) = p_new for objects without JSON
-- nulls): changed members with their new values, removed ones as null,
-- objects compared member by member, anything else replaced whole.
CREATE OR REPLACE FUNCTION holdfast.jsonb_merge_diff(p_old jsonb, p_new jsonb)
RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF jsonb_typeof(p_old) IS DISTINCT FROM 'object' OR jsonb_typeof(p_new) IS DISTINCT FROM 'object' THEN
        RETURN p_new;
    END IF;
    RETURN (SELECT coalesce(jsonb_object_agg(k.key, CASE
                                WHEN NOT p_new ? k.key THEN 'null'::jsonb
                                ELSE holdfast.jsonb_merge_diff(p_old -> k.key, p_new -> k.key) END), '{}')
              FROM (SELECT jsonb_object_keys(p_old) AS key
                    UNION SELECT jsonb_object_keys(p_new)) k
             WHERE (p_old -> k.key) IS DISTINCT FROM (p_new -> k.key));
END
$$;

-- True when a URL host names a special-purpose (non-public) address: the
-- local names (`localhost`, `*.localhost`, `.local`, `.internal`,
-- `.home.arpa`), IP literals in the refused ranges of providers/src/egress.rs,
-- and numeric hosts that are not a plain dotted quad (URL parsers read
-- `127.1` or `2130706433` as 127.0.0.1). p_host is lower case, without
-- brackets or port. A DNS name that resolves to a private address is not
-- caught here: the dispatcher checks resolved addresses before it connects.
-- The ranges are providers/src/egress.rs's table (the IANA special-purpose
-- registries' not-globally-reachable blocks, with their globally reachable
-- exceptions). SQL checks a webhook URL's *literal* at registration, so a
-- plain SQL call cannot register http://169.254.169.254/; Rust checks every
-- *resolved* address at send time. One deliberate difference: literals of
-- the IPv4-embedding forms (::ffff:0:0/96, ::/96, 64:ff9b::/96, 2002::/16)
-- are refused here whatever IPv4 address they carry (nobody writes them by
-- hand), while a resolved NAT64 or 6to4 address is judged by its IPv4 part.
-- Locks nothing; raises nothing.
CREATE OR REPLACE FUNCTION holdfast.is_private_host(p_host text)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_ip inet;
BEGIN
    IF p_host = 'localhost' OR p_host ~ '\.(localhost|local|internal|home\.arpa)$' THEN
        RETURN true;
    END IF;
    IF substring(p_host FROM '[^.]*$') ~ '^([0-9]+|0x[0-9a-f]*)$' THEN
        -- The last label is a number: URL parsers read the host as IPv4.
        IF p_host !~ '^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$' THEN
            RETURN true;
        END IF;
        v_ip := p_host::inet;
    ELSIF position(':' IN p_host) > 0 THEN
        BEGIN
            v_ip := p_host::inet;
        EXCEPTION WHEN invalid_text_representation THEN
            RETURN true;
        END;
    ELSE
        RETURN false;
    END IF;
    IF EXISTS (
        SELECT 1 FROM unnest(ARRAY[
            '192.0.0.9/32', '192.0.0.10/32', '2001:1::1/128', '2001:1::2/128', '2001:1::3/128',
            '2001:3::/32', '2001:4:112::/48', '2001:20::/28', '2001:30::/28']::inet[]) AS r (range)
         WHERE r.range >>= v_ip) THEN
        RETURN false;
    END IF;
    RETURN EXISTS (
        SELECT 1 FROM unnest(ARRAY[
            '0.0.0.0/8', '10.0.0.0/8', '100.64.0.0/10', '127.0.0.0/8', '169.254.0.0/16',
            '172.16.0.0/12', '192.0.0.0/24', '192.0.2.0/24', '192.88.99.0/24',
            '192.168.0.0/16', '198.18.0.0/15', '198.51.100.0/24', '203.0.113.0/24',
            '224.0.0.0/4', '240.0.0.0/4',
            '::/96', '::ffff:0:0/96', '64:ff9b::/96', '64:ff9b:1::/48', '100::/64', '100:0:0:1::/64',
            '2001::/23', '2001:db8::/32', '2002::/16', '3fff::/20', '5f00::/16',
            'fc00::/7', 'fe80::/10', 'fec0::/10', 'ff00::/8']::inet[]) AS r (range)
         WHERE r.range >>= v_ip);
END
$$;
