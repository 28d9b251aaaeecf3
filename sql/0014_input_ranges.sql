-- 0014_input_ranges.sql — numbers a worker can run, and a key check for streams.
--
-- Adds:
--   * validate_config (0001) refuses a model.max_tokens the worker cannot
--     represent: it must be a JSON integer (written without a fraction or an
--     exponent that leaves one, so 1.0 is refused) from 1 to 4294967295, the
--     range of the worker's u32. Before, 1.0 and 5000000000 passed this check
--     and every model call of the agent then failed to parse its config.
--   * api_key_active: whether a key id still authenticates, for the API's
--     open streams to re-check while they run (a revoked key's stream ends).
--
-- Why in SQL: a SQL client creating or patching an agent gets the same rule
-- as an HTTP client (the HTTP API maps HF422 to 400 naming the field).

-- Validate an agent config; raise HF422 naming the field. The HTTP API maps
-- this to 400 with the same field, so SQL clients and HTTP clients get one rule.
-- Locks nothing. Raises HF422 (the field in COLUMN).
-- Changed from 0001: model.max_tokens must be an integer in 1..4294967295.
CREATE OR REPLACE FUNCTION holdfast.validate_config(p_config jsonb)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_tool jsonb;
    v_i integer := 0;
    v_names text[] := '{}';
    v_name text;
BEGIN
    IF p_config IS NULL OR jsonb_typeof(p_config) <> 'object' THEN
        PERFORM holdfast.raise('HF422', 'config must be a JSON object', 'config');
    END IF;
    IF jsonb_typeof(p_config -> 'model') IS DISTINCT FROM 'object' THEN
        PERFORM holdfast.raise('HF422', 'model must be an object', 'model');
    END IF;
    IF NOT coalesce(p_config #>> '{model,provider}' IN ('anthropic', 'openai'), false)
       OR jsonb_typeof(p_config #> '{model,provider}') <> 'string' THEN
        PERFORM holdfast.raise('HF422', 'model.provider must be "anthropic" or "openai"', 'model.provider');
    END IF;
    IF jsonb_typeof(p_config #> '{model,name}') IS DISTINCT FROM 'string'
       OR p_config #>> '{model,name}' = '' THEN
        PERFORM holdfast.raise('HF422', 'model.name must be a non-empty string', 'model.name');
    END IF;
    IF p_config #> '{model,base_url}' IS NOT NULL
       AND (jsonb_typeof(p_config #> '{model,base_url}') <> 'string'
            OR p_config #>> '{model,base_url}' !~ '^https?://') THEN
        PERFORM holdfast.raise('HF422', 'model.base_url must be an http(s) URL', 'model.base_url');
    END IF;
    -- The text of a jsonb number keeps its fraction (1.0 stays "1.0"), so a
    -- digits-only text is a JSON integer; the range is the worker's u32.
    IF p_config #> '{model,max_tokens}' IS NOT NULL
       AND (jsonb_typeof(p_config #> '{model,max_tokens}') <> 'number'
            OR p_config #>> '{model,max_tokens}' !~ '^[0-9]{1,10}$'
            OR (p_config #>> '{model,max_tokens}')::bigint NOT BETWEEN 1 AND 4294967295) THEN
        PERFORM holdfast.raise('HF422', 'model.max_tokens must be an integer from 1 to 4294967295', 'model.max_tokens');
    END IF;
    IF p_config ? 'system' AND jsonb_typeof(p_config -> 'system') <> 'string' THEN
        PERFORM holdfast.raise('HF422', 'system must be a string', 'system');
    END IF;
    IF p_config ? 'tools' THEN
        IF jsonb_typeof(p_config -> 'tools') <> 'array' THEN
            PERFORM holdfast.raise('HF422', 'tools must be an array', 'tools');
        END IF;
        FOR v_tool IN SELECT value FROM jsonb_array_elements(p_config -> 'tools') LOOP
            IF jsonb_typeof(v_tool) <> 'object' THEN
                PERFORM holdfast.raise('HF422', 'each tool must be an object', format('tools[%s]', v_i));
            END IF;
            IF jsonb_typeof(v_tool -> 'type') IS DISTINCT FROM 'string' THEN
                PERFORM holdfast.raise('HF422', 'tool type must be a string', format('tools[%s].type', v_i));
            END IF;
            v_name := coalesce(v_tool ->> 'name', v_tool ->> 'type');
            IF v_tool ? 'name' AND (jsonb_typeof(v_tool -> 'name') <> 'string'
                                   OR v_name !~ '^[a-zA-Z0-9_-]{1,64}$') THEN
                PERFORM holdfast.raise('HF422', 'tool name must match ^[a-zA-Z0-9_-]{1,64}$', format('tools[%s].name', v_i));
            END IF;
            IF v_name = ANY (v_names) THEN
                PERFORM holdfast.raise('HF422', format('duplicate tool name "%s"', v_name), format('tools[%s].name', v_i));
            END IF;
            v_names := v_names || v_name;
            v_i := v_i + 1;
        END LOOP;
    END IF;
    IF p_config ? 'approvals' THEN
        IF jsonb_typeof(p_config -> 'approvals') <> 'object'
           OR (p_config -> 'approvals' ? 'require_for'
               AND jsonb_typeof(p_config #> '{approvals,require_for}') <> 'array') THEN
            PERFORM holdfast.raise('HF422', 'approvals.require_for must be an array of tool names', 'approvals.require_for');
        END IF;
        IF EXISTS (SELECT 1 FROM jsonb_array_elements(coalesce(p_config #> '{approvals,require_for}', '[]')) e
                    WHERE jsonb_typeof(e.value) <> 'string') THEN
            PERFORM holdfast.raise('HF422', 'approvals.require_for must be an array of tool names', 'approvals.require_for');
        END IF;
    END IF;
    IF p_config ? 'metadata' AND jsonb_typeof(p_config -> 'metadata') <> 'object' THEN
        PERFORM holdfast.raise('HF422', 'metadata must be an object', 'metadata');
    END IF;
END
$$;

-- Whether the key with this id exists and is not revoked. An open stream
-- re-checks its key with this every few seconds and ends once it is false.
-- Locks nothing (a plain read of the key row by primary key). Raises nothing.
CREATE FUNCTION holdfast.api_key_active(p_key_id uuid)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM holdfast.api_keys k
                    WHERE k.id = p_key_id AND k.revoked_at IS NULL)
$$;
