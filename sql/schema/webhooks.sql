-- sql/schema/webhooks.sql — webhook endpoints and the delivery outbox.
--
-- This area's current schema: its tables, indexes and views first, then,
-- after the line below, its functions and triggers.
-- Each object is defined here once, as it is now. See docs/sql.md for how
-- a fresh install applies these files and how a change is added.

-- An endpoint receives the events of its project's agents whose type is in
-- `events` ('*' = all). The secret is `whsec_` + base64 of 32 random bytes
-- (Standard Webhooks: at least 24); it is needed in clear to sign, and the
-- API shows it once, at creation. Deleting sets deleted_at (the deliveries
-- keep their history).
CREATE TABLE holdfast.webhook_endpoints (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    project_id uuid NOT NULL,
    url text NOT NULL,
    events text[] NOT NULL,
    description text,
    secret text NOT NULL,
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    deleted_at timestamptz,
    CONSTRAINT webhook_endpoints_events_check CHECK (cardinality(events) > 0),
    CONSTRAINT webhook_endpoints_secret_check CHECK (secret ~~ 'whsec\_%'),
    CONSTRAINT webhook_endpoints_pkey PRIMARY KEY (id),
    CONSTRAINT webhook_endpoints_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id)
);

-- The outbox trigger looks endpoints up by project on every event insert.
CREATE INDEX webhook_endpoints_project_idx ON holdfast.webhook_endpoints (project_id, id) WHERE (deleted_at IS NULL);

-- The outbox: one row per event and endpoint whose filter matches it,
-- inserted by trigger in the event's transaction.
CREATE TABLE holdfast.webhook_deliveries (
    -- The `webhook-id` header: stable across every attempt of this delivery.
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    endpoint_id uuid NOT NULL,
    -- The event (its JSON is the request body, built from the events row).
    agent_id uuid NOT NULL,
    event_seq bigint NOT NULL,
    event_id uuid NOT NULL,
    event_type text NOT NULL,
    status text DEFAULT 'pending' NOT NULL,
    -- Attempts started (a claim counts one). Also the fence of an attempt's
    -- outcome: only the latest attempt reschedules a delivery.
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamptz,
    -- Set while a dispatcher holds the delivery (its HTTP request is in flight).
    claimed_until timestamptz,
    last_attempt_at timestamptz,
    last_status_code integer,
    last_error text,
    -- The retry window runs from here (the event's transaction).
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    delivered_at timestamptz,
    failed_at timestamptz,
    event_created_at timestamptz NOT NULL,
    trace_parent text,
    trace_state text,
    CONSTRAINT webhook_deliveries_claimed_is_pending CHECK ((claimed_until IS NULL) OR (status = 'pending')),
    CONSTRAINT webhook_deliveries_delivered_has_time CHECK ((status = 'delivered') = (delivered_at IS NOT NULL)),
    CONSTRAINT webhook_deliveries_failed_has_time CHECK ((status = 'failed') = (failed_at IS NOT NULL)),
    CONSTRAINT webhook_deliveries_pending_is_scheduled CHECK ((status = 'pending') = (next_attempt_at IS NOT NULL)),
    CONSTRAINT webhook_deliveries_status_check CHECK (status IN ('pending', 'delivered', 'failed')),
    CONSTRAINT webhook_deliveries_pkey PRIMARY KEY (id),
    CONSTRAINT webhook_deliveries_endpoint_id_agent_id_event_seq_key UNIQUE (endpoint_id, agent_id, event_seq),
    CONSTRAINT webhook_deliveries_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES holdfast.webhook_endpoints(id),
    CONSTRAINT webhook_deliveries_event_fkey FOREIGN KEY (agent_id, event_seq, event_created_at) REFERENCES holdfast.events(agent_id, seq, created_at)
);

-- In-flight counts per endpoint (the per-endpoint concurrency cap).
CREATE INDEX webhook_deliveries_claimed_idx ON holdfast.webhook_deliveries (endpoint_id) WHERE (claimed_until IS NOT NULL);

-- Claim reads only due pending deliveries: cost stays flat as delivered rows pile up.
CREATE INDEX webhook_deliveries_due_idx ON holdfast.webhook_deliveries (next_attempt_at, id) WHERE (status = 'pending');

-- Listing an endpoint's deliveries, newest first (ids are UUIDv7).
CREATE INDEX webhook_deliveries_endpoint_idx ON holdfast.webhook_deliveries (endpoint_id, id);

-- Deleting events checks this key; pruning finds an agent's deliveries by it.
CREATE INDEX webhook_deliveries_event_idx ON holdfast.webhook_deliveries (agent_id, event_seq);

-- The per-(endpoint, agent) order check reads only pending rows.
CREATE INDEX webhook_deliveries_queue_idx ON holdfast.webhook_deliveries (endpoint_id, agent_id, event_seq) WHERE (status = 'pending');

-- ==== functions and triggers ====

-- Validate a webhook URL; raise HF422 (field url) unless it is an absolute
-- http(s) URL with a host, and, when p_allow_private is false, the host is
-- not a private or loopback address (is_private_host).
CREATE OR REPLACE FUNCTION holdfast.validate_webhook_url(p_url text, p_allow_private boolean)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_authority text;
    v_host text;
BEGIN
    IF p_url IS NULL OR length(p_url) > 2048 OR p_url !~* '^https?://[^/?#[:space:]]+([/?#][^[:space:]]*)?$' THEN
        PERFORM holdfast.raise('HF422', 'url must be an absolute http:// or https:// URL', 'url');
    END IF;
    v_authority := substring(p_url FROM '^[A-Za-z]+://([^/?#]*)');
    v_host := regexp_replace(v_authority, '^.*@', '');
    IF v_host LIKE '[%' THEN
        v_host := substring(v_host FROM '^\[([^]]*)\]');
    ELSE
        v_host := regexp_replace(v_host, ':[0-9]*$', '');
    END IF;
    v_host := rtrim(lower(coalesce(v_host, '')), '.');
    IF v_host = '' THEN
        PERFORM holdfast.raise('HF422', 'url must name a host', 'url');
    END IF;
    IF NOT coalesce(p_allow_private, false) AND holdfast.is_private_host(v_host) THEN
        PERFORM holdfast.raise('HF422',
            format('url host %s is a private or loopback address, which this deployment does not allow', v_host), 'url');
    END IF;
END
$$;

-- Validate an endpoint's event filter: a non-empty JSON array of "*" or known
-- event types (event_types()). Returns it as a deduplicated text[]; raises
-- HF422 (field events) naming the offending element.
CREATE OR REPLACE FUNCTION holdfast.validate_webhook_events(p_events jsonb)
RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    v_element jsonb;
    v_i integer := 0;
    v_types text[] := '{}';
BEGIN
    IF jsonb_typeof(p_events) IS DISTINCT FROM 'array' OR jsonb_array_length(p_events) = 0 THEN
        PERFORM holdfast.raise('HF422', 'events must be a non-empty array of event types or "*"', 'events');
    END IF;
    FOR v_element IN SELECT value FROM jsonb_array_elements(p_events) LOOP
        IF jsonb_typeof(v_element) <> 'string'
           OR NOT (v_element #>> '{}' = '*' OR v_element #>> '{}' = ANY (holdfast.event_types())) THEN
            PERFORM holdfast.raise('HF422',
                format('events[%s] is %s, not "*" or a known event type', v_i, v_element), 'events');
        END IF;
        IF NOT v_element #>> '{}' = ANY (v_types) THEN
            v_types := v_types || (v_element #>> '{}');
        END IF;
        v_i := v_i + 1;
    END LOOP;
    RETURN v_types;
END
$$;

-- Create an endpoint; returns it with its secret (shown once by the API).
-- p_allow_private is the deployment's setting (the API passes its config;
-- default false, so a plain SQL call cannot point webhooks at internal
-- addresses). Raises HF404 (project), HF422 (url, events, description).
CREATE OR REPLACE FUNCTION holdfast.create_webhook_endpoint(
    p_project uuid, p_url text, p_events jsonb, p_description text DEFAULT NULL,
    p_allow_private boolean DEFAULT false)
RETURNS TABLE (id uuid, url text, events text[], description text, secret text, created_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_events text[];
BEGIN
    PERFORM holdfast.validate_webhook_url(p_url, p_allow_private);
    v_events := holdfast.validate_webhook_events(p_events);
    IF p_description IS NOT NULL AND length(p_description) > 1000 THEN
        PERFORM holdfast.raise('HF422', 'description must be at most 1000 characters', 'description');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM holdfast.projects p WHERE p.id = p_project) THEN
        PERFORM holdfast.raise('HF404', format('project %s not found', p_project));
    END IF;
    -- 32 bytes from three v4 UUIDs (366 strong random bits, from
    -- pg_strong_random), hashed so every output bit is uniform.
    RETURN QUERY
    INSERT INTO holdfast.webhook_endpoints AS e (project_id, url, events, description, secret)
    VALUES (p_project, p_url, v_events, p_description,
            'whsec_' || encode(sha256(uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid())
                                      || uuid_send(gen_random_uuid())), 'base64'))
    RETURNING e.id, e.url, e.events, e.description, e.secret, e.created_at;
END
$$;

-- Delete an endpoint: no new deliveries, and its pending ones end as failed
-- ('endpoint deleted'). Locks the endpoint row, then its pending deliveries
-- (SKIP LOCKED is not used: a delivery being claimed right now is waited
-- for). Raises HF404 when the endpoint is not in the project or already deleted.
CREATE OR REPLACE FUNCTION holdfast.delete_webhook_endpoint(p_project uuid, p_id uuid)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := holdfast.now();
BEGIN
    UPDATE holdfast.webhook_endpoints SET deleted_at = v_now
     WHERE id = p_id AND project_id = p_project AND deleted_at IS NULL;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('webhook endpoint %s not found', p_id));
    END IF;
    UPDATE holdfast.webhook_deliveries
       SET status = 'failed', failed_at = v_now, next_attempt_at = NULL, claimed_until = NULL,
           last_error = 'endpoint deleted'
     WHERE endpoint_id = p_id AND status = 'pending';
END
$$;

-- The project's endpoints (never their secrets), oldest first.
CREATE OR REPLACE FUNCTION holdfast.list_webhook_endpoints(p_project uuid)
RETURNS TABLE (id uuid, url text, events text[], description text, created_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT e.id, e.url, e.events, e.description, e.created_at
      FROM holdfast.webhook_endpoints e
     WHERE e.project_id = p_project AND e.deleted_at IS NULL
     ORDER BY e.id
$$;

-- An endpoint's deliveries, newest first: at most p_limit (1..1000), those
-- older than p_before (a delivery id, for paging) when given, of one status
-- when p_status is given. Raises HF404 (endpoint not in project, or deleted),
-- HF422 (status, limit).
CREATE OR REPLACE FUNCTION holdfast.list_webhook_deliveries(
    p_project uuid, p_endpoint uuid, p_status text DEFAULT NULL,
    p_limit integer DEFAULT 100, p_before uuid DEFAULT NULL)
RETURNS TABLE (id uuid, endpoint_id uuid, agent_id uuid, event_seq bigint, event_id uuid,
               event_type text, status text, attempts integer, last_status_code integer,
               last_error text, next_attempt_at timestamptz, last_attempt_at timestamptz,
               created_at timestamptz, delivered_at timestamptz, failed_at timestamptz)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM holdfast.webhook_endpoints e
                    WHERE e.id = p_endpoint AND e.project_id = p_project AND e.deleted_at IS NULL) THEN
        PERFORM holdfast.raise('HF404', format('webhook endpoint %s not found', p_endpoint));
    END IF;
    IF p_status IS NOT NULL AND p_status NOT IN ('pending', 'delivered', 'failed') THEN
        PERFORM holdfast.raise('HF422', 'status must be pending, delivered or failed', 'status');
    END IF;
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000 THEN
        PERFORM holdfast.raise('HF422', 'limit must be between 1 and 1000', 'limit');
    END IF;
    RETURN QUERY
    SELECT d.id, d.endpoint_id, d.agent_id, d.event_seq, d.event_id, d.event_type, d.status,
           d.attempts, d.last_status_code, d.last_error, d.next_attempt_at, d.last_attempt_at,
           d.created_at, d.delivered_at, d.failed_at
      FROM holdfast.webhook_deliveries d
     WHERE d.endpoint_id = p_endpoint
       AND (p_status IS NULL OR d.status = p_status)
       AND (p_before IS NULL OR d.id < p_before)
     ORDER BY d.id DESC
     LIMIT p_limit;
END
$$;

-- One pending delivery per live endpoint of the agent's project whose filter
-- matches the event, in the event's own transaction; then one wake-up hint
-- for dispatchers (identical notifications fold within a transaction).
-- Statement-level, over the statement's new events: one INSERT per
-- statement that writes events, not one per event row. Each delivery keeps
-- the trace context of the agent's turn, for the dispatcher's span.
-- Reads endpoints
-- without locking them: an endpoint deleted concurrently may still get this
-- delivery, and claim_webhook_deliveries fails it instead of sending.
-- Events of projects without a live endpoint (most, for most projects)
-- stop at a read-only probe: an INSERT opens webhook_deliveries and locks
-- each of its indexes whether it writes a row or not, and the probe costs
-- a few index lookups. An install without any live endpoint stops before
-- that, at one read of the endpoints table, without joining the
-- statement's events with their agents.
CREATE OR REPLACE FUNCTION holdfast.tg_events_webhook_outbox() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_inserted integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM holdfast.webhook_endpoints e WHERE e.deleted_at IS NULL) THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM holdfast.webhook_endpoints e
                    WHERE e.deleted_at IS NULL
                      AND e.project_id IN (SELECT a.project_id FROM new_events n
                                             JOIN holdfast.agents a ON a.id = n.agent_id)) THEN
        RETURN NULL;
    END IF;
    INSERT INTO holdfast.webhook_deliveries
           (endpoint_id, agent_id, event_seq, event_created_at, event_id, event_type, next_attempt_at,
            trace_parent, trace_state)
    SELECT e.id, n.agent_id, n.seq, n.created_at, n.id, n.type, holdfast.now(),
           a.turn_trace_parent, a.turn_trace_state
      FROM new_events n
      JOIN holdfast.agents a ON a.id = n.agent_id
      JOIN holdfast.webhook_endpoints e ON e.project_id = a.project_id
     WHERE e.deleted_at IS NULL
       AND ('*' = ANY (e.events) OR n.type = ANY (e.events))
     ORDER BY n.agent_id, n.seq, e.id;
    GET DIAGNOSTICS v_inserted = ROW_COUNT;
    IF v_inserted > 0 THEN
        PERFORM pg_notify('holdfast_webhooks', '');
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER _500_webhook_outbox AFTER INSERT ON holdfast.events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION holdfast.tg_events_webhook_outbox();

-- Claim up to p_max due deliveries for one dispatcher. Bounded, SKIP LOCKED:
-- dispatchers never wait on each other and never share a claim. Each claim
-- counts an attempt, marks the delivery in flight until now + p_lease, and
-- makes it due again at that time, so a dispatcher that dies mid-request
-- loses nothing: its claims come back by themselves.
--
-- Order: a delivery is claimable only when no earlier event of the same agent
-- for the same endpoint is still pending and either never attempted or in
-- flight. So when the receiver answers in time, each endpoint sees each
-- agent's events in order; an earlier delivery that failed and waits for its
-- retry does not hold the later ones back.
--
-- Fairness: an endpoint with p_max_per_endpoint requests in flight (across
-- all dispatchers) gets no more, so a slow endpoint cannot take every slot.
-- Deliveries of deleted endpoints met on the way end as failed.
--
-- Locks: the chosen delivery rows (FOR UPDATE SKIP LOCKED). Returns what the
-- request needs: the delivery (its id is the webhook-id), the attempt number
-- (pass it back to record_webhook_attempt), the endpoint's url and secret,
-- the event, when the delivery was due (queue lag metrics), and the trace
-- context of the event's turn.
CREATE OR REPLACE FUNCTION holdfast.claim_webhook_deliveries(
    p_max integer, p_lease interval, p_max_per_endpoint integer DEFAULT 16)
RETURNS TABLE (delivery_id uuid, attempt integer, endpoint_id uuid, url text, secret text,
               due_at timestamptz, event_seq bigint, event_id uuid, agent_id uuid,
               event_type text, event_data jsonb, event_created_at timestamptz,
               trace_parent text, trace_state text)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := holdfast.now();
    v_full uuid[];
    v_batch_endpoints uuid[] := '{}';
    v_in_flight bigint;
    v_claimed uuid[] := '{}';
    v_row record;
BEGIN
    IF p_lease IS NULL OR p_lease <= '0'::interval THEN
        PERFORM holdfast.raise('HF422', 'lease must be positive', 'lease');
    END IF;
    IF p_max_per_endpoint IS NULL OR p_max_per_endpoint < 1 THEN
        PERFORM holdfast.raise('HF422', 'max_per_endpoint must be at least 1', 'max_per_endpoint');
    END IF;
    SELECT coalesce(array_agg(f.endpoint_id), '{}') INTO v_full FROM (
        SELECT c.endpoint_id FROM holdfast.webhook_deliveries c
         WHERE c.claimed_until > v_now
         GROUP BY c.endpoint_id HAVING count(*) >= p_max_per_endpoint) f;

    FOR v_row IN
        SELECT d.id, d.endpoint_id, d.next_attempt_at, e.deleted_at IS NOT NULL AS endpoint_deleted
          FROM holdfast.webhook_deliveries d
          JOIN holdfast.webhook_endpoints e ON e.id = d.endpoint_id
         WHERE d.status = 'pending' AND d.next_attempt_at <= v_now
           AND d.endpoint_id <> ALL (v_full)
           AND NOT EXISTS (
               SELECT 1 FROM holdfast.webhook_deliveries p
                WHERE p.endpoint_id = d.endpoint_id AND p.agent_id = d.agent_id
                  AND p.status = 'pending' AND p.event_seq < d.event_seq
                  AND (p.attempts = 0 OR p.claimed_until IS NOT NULL))
         ORDER BY d.next_attempt_at, d.id
         LIMIT greatest(p_max, 0)
           FOR UPDATE OF d SKIP LOCKED
    LOOP
        IF v_row.endpoint_deleted THEN
            UPDATE holdfast.webhook_deliveries
               SET status = 'failed', failed_at = v_now, next_attempt_at = NULL, claimed_until = NULL,
                   last_error = 'endpoint deleted'
             WHERE id = v_row.id;
            CONTINUE;
        END IF;
        SELECT count(*) INTO v_in_flight FROM holdfast.webhook_deliveries c
         WHERE c.endpoint_id = v_row.endpoint_id AND c.claimed_until > v_now;
        IF v_in_flight + coalesce(array_length(array_positions(v_batch_endpoints, v_row.endpoint_id), 1), 0)
           >= p_max_per_endpoint THEN
            CONTINUE;
        END IF;
        v_batch_endpoints := v_batch_endpoints || v_row.endpoint_id;
        v_claimed := v_claimed || v_row.id;
    END LOOP;

    RETURN QUERY
    WITH due AS (
        SELECT d.id, d.next_attempt_at FROM holdfast.webhook_deliveries d WHERE d.id = ANY (v_claimed)
    ), claimed AS (
        UPDATE holdfast.webhook_deliveries d
           SET attempts = d.attempts + 1, claimed_until = v_now + p_lease,
               next_attempt_at = v_now + p_lease, last_attempt_at = v_now
          FROM due
         WHERE d.id = due.id
        RETURNING d.id, d.attempts, d.endpoint_id, d.agent_id, d.event_seq, d.event_created_at,
                  due.next_attempt_at AS due_at, d.trace_parent, d.trace_state
    )
    SELECT c.id, c.attempts, c.endpoint_id, e.url, e.secret, c.due_at,
           ev.seq, ev.id, ev.agent_id, ev.type, ev.data, ev.created_at, c.trace_parent, c.trace_state
      FROM claimed c
      JOIN holdfast.webhook_endpoints e ON e.id = c.endpoint_id
      -- created_at (the partition key) lets the lookup skip the other partitions.
      JOIN holdfast.events ev ON ev.agent_id = c.agent_id AND ev.seq = c.event_seq
                             AND ev.created_at = c.event_created_at
     ORDER BY c.due_at, c.id;
END
$$;

-- Record the outcome of attempt p_attempt of delivery p_delivery of agent
-- p_agent's event (the agent names the row's shard: docs/scaling.md). A 2xx status marks
-- it delivered, whenever it arrives (the receiver has it). Otherwise, if this
-- is still the delivery's latest attempt: past the retry window
-- (created_at + p_retry_window) it is failed; else it is due again after
-- p_retry_delay, but no later than the end of the window, so the last attempt
-- lands at the window's end. An older attempt (its claim expired and another
-- dispatcher took over) changes nothing.
--
-- Locks the delivery row. Returns 'delivered', 'pending' (a retry is
-- scheduled), 'failed', or 'superseded' (an older attempt; nothing changed).
-- Raises HF404 (no such delivery), HF422 (delay, window).
CREATE OR REPLACE FUNCTION holdfast.record_webhook_attempt(
    p_agent uuid, p_delivery uuid, p_attempt integer, p_status_code integer, p_error text,
    p_retry_delay interval, p_retry_window interval)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := holdfast.now();
    v_delivery holdfast.webhook_deliveries;
    v_deadline timestamptz;
BEGIN
    IF p_retry_delay IS NULL OR p_retry_delay < '0'::interval THEN
        PERFORM holdfast.raise('HF422', 'retry delay must not be negative', 'retry_delay');
    END IF;
    IF p_retry_window IS NULL OR p_retry_window < '0'::interval THEN
        PERFORM holdfast.raise('HF422', 'retry window must not be negative', 'retry_window');
    END IF;
    SELECT * INTO v_delivery FROM holdfast.webhook_deliveries
     WHERE agent_id = p_agent AND id = p_delivery FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('webhook delivery %s not found', p_delivery));
    END IF;
    IF p_status_code BETWEEN 200 AND 299 THEN
        IF v_delivery.status <> 'delivered' THEN
            UPDATE holdfast.webhook_deliveries
               SET status = 'delivered', delivered_at = v_now, failed_at = NULL,
                   next_attempt_at = NULL, claimed_until = NULL,
                   last_status_code = p_status_code, last_error = NULL
             WHERE agent_id = p_agent AND id = p_delivery;
        END IF;
        RETURN 'delivered';
    END IF;
    IF v_delivery.status <> 'pending' OR v_delivery.attempts <> p_attempt THEN
        RETURN 'superseded';
    END IF;
    v_deadline := v_delivery.created_at + p_retry_window;
    IF v_now >= v_deadline THEN
        UPDATE holdfast.webhook_deliveries
           SET status = 'failed', failed_at = v_now, next_attempt_at = NULL, claimed_until = NULL,
               last_status_code = p_status_code, last_error = p_error
         WHERE agent_id = p_agent AND id = p_delivery;
        RETURN 'failed';
    END IF;
    UPDATE holdfast.webhook_deliveries
       SET next_attempt_at = least(v_now + p_retry_delay, v_deadline), claimed_until = NULL,
           last_status_code = p_status_code, last_error = p_error
     WHERE agent_id = p_agent AND id = p_delivery;
    RETURN 'pending';
END
$$;

-- Give back claims without an outcome (a dispatcher shutting down mid-request):
-- each (delivery, attempt) pair still in flight at that attempt becomes due
-- now, for any dispatcher. The attempt stays counted: the request may have
-- reached the receiver. Locks the deliveries in id order. Returns how many
-- were released.
CREATE OR REPLACE FUNCTION holdfast.release_webhook_deliveries(p_deliveries uuid[], p_attempts integer[])
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_released integer;
BEGIN
    IF coalesce(array_length(p_deliveries, 1), 0) <> coalesce(array_length(p_attempts, 1), 0) THEN
        PERFORM holdfast.raise('HF422', 'deliveries and attempts must have the same length', 'attempts');
    END IF;
    WITH wanted AS (
        SELECT w.id, w.attempt FROM unnest(p_deliveries, p_attempts) AS w (id, attempt)
    ), locked AS (
        SELECT d.id FROM holdfast.webhook_deliveries d JOIN wanted w ON w.id = d.id
         WHERE d.status = 'pending' AND d.attempts = w.attempt AND d.claimed_until IS NOT NULL
         ORDER BY d.id
           FOR UPDATE OF d
    )
    UPDATE holdfast.webhook_deliveries d
       SET claimed_until = NULL, next_attempt_at = holdfast.now()
      FROM locked l
     WHERE d.id = l.id;
    GET DIAGNOSTICS v_released = ROW_COUNT;
    RETURN v_released;
END
$$;
