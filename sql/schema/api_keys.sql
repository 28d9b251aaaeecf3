-- sql/schema/api_keys.sql — API keys: hashing, creation, authentication, revocation.
--
-- This area's current schema: its tables, indexes and views first, then,
-- after the line below, its functions and triggers.
-- Each object is defined here once, as it is now. See docs/sql.md for how
-- a fresh install applies these files and how a change is added.

-- API keys are stored as SHA-256 hashes; the clear key is shown once at creation.
CREATE TABLE holdfast.api_keys (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    project_id uuid NOT NULL,
    key_hash bytea NOT NULL,
    prefix text NOT NULL,
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    revoked_at timestamptz,
    CONSTRAINT api_keys_pkey PRIMARY KEY (id),
    CONSTRAINT api_keys_key_hash_key UNIQUE (key_hash),
    CONSTRAINT api_keys_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id)
);

-- ==== functions and triggers ====

-- A key's hash: SHA-256 of its UTF-8 text. Keys are long and random, so a
-- plain hash (no salt, no stretching) is enough and lets lookups use the
-- unique index on key_hash.
CREATE OR REPLACE FUNCTION holdfast.api_key_hash(p_key text) RETURNS bytea
LANGUAGE sql STABLE STRICT AS $$
    SELECT sha256(convert_to(p_key, 'UTF8'))
$$;

-- Create an API key for a project, creating the project if it has no row yet.
-- The key is `hf_` and 64 hex digits from two gen_random_uuid() values (244
-- random bits from the server's strong random source); it is returned here
-- once and stored only as its hash. `prefix` (the first 11 characters) is
-- stored in clear so a person can tell keys apart and revoke one by it.
-- Raises HF422 (bad project name).
CREATE OR REPLACE FUNCTION holdfast.create_api_key(p_project_name text)
RETURNS TABLE (key_id uuid, project_id uuid, prefix text, key text) LANGUAGE plpgsql AS $$
DECLARE
    v_project uuid;
    v_key text;
    v_id uuid;
BEGIN
    v_project := holdfast.ensure_project(p_project_name);
    v_key := 'hf_' || encode(uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()), 'hex');
    INSERT INTO holdfast.api_keys (project_id, key_hash, prefix)
    VALUES (v_project, holdfast.api_key_hash(v_key), left(v_key, 11))
    RETURNING id INTO v_id;
    RETURN QUERY SELECT v_id, v_project, left(v_key, 11), v_key;
END
$$;

-- The project a key belongs to; no row when the key is unknown or revoked.
-- Reads only (no lock): every API request calls it.
CREATE OR REPLACE FUNCTION holdfast.authenticate_api_key(p_key text)
RETURNS TABLE (key_id uuid, project_id uuid) LANGUAGE sql STABLE AS $$
    SELECT k.id, k.project_id
      FROM holdfast.api_keys k
     WHERE k.key_hash = holdfast.api_key_hash(p_key) AND k.revoked_at IS NULL
$$;

-- Revoke a key named by its id, its displayed prefix, or its full text.
-- Idempotent: a key already revoked is returned unchanged. Locks the key row.
-- Raises HF404 (no such key), HF422 (a prefix shared by several keys: name
-- the key by id instead).
CREATE OR REPLACE FUNCTION holdfast.revoke_api_key(p_key_ref text)
RETURNS TABLE (key_id uuid, project_id uuid, prefix text, revoked_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
BEGIN
    IF p_key_ref ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        v_ids := ARRAY(SELECT k.id FROM holdfast.api_keys k WHERE k.id = p_key_ref::uuid);
    ELSE
        v_ids := ARRAY(SELECT k.id FROM holdfast.api_keys k
                        WHERE k.prefix = p_key_ref OR k.key_hash = holdfast.api_key_hash(p_key_ref));
    END IF;
    IF cardinality(v_ids) = 0 THEN
        PERFORM holdfast.raise('HF404', format('API key %s not found', p_key_ref));
    END IF;
    IF cardinality(v_ids) > 1 THEN
        PERFORM holdfast.raise('HF422', format('prefix %s names %s keys; revoke by id', p_key_ref, cardinality(v_ids)), 'key');
    END IF;
    RETURN QUERY
    UPDATE holdfast.api_keys k
       SET revoked_at = coalesce(k.revoked_at, holdfast.now())
     WHERE k.id = v_ids[1]
    RETURNING k.id, k.project_id, k.prefix, k.revoked_at;
END
$$;

-- Whether the key with this id exists and is not revoked. An open stream
-- re-checks its key with this every few seconds and ends once it is false.
-- Locks nothing (a plain read of the key row by primary key). Raises nothing.
CREATE OR REPLACE FUNCTION holdfast.api_key_active(p_key_id uuid)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM holdfast.api_keys k
                    WHERE k.id = p_key_id AND k.revoked_at IS NULL)
$$;
