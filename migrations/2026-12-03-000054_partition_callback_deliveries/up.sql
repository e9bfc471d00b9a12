-- The event log partitioned by month of receipt (issue 40): a month past `[history] keep_days`
-- is archived, then detached and dropped as a whole, never deleted row by row.
--
-- A live database keeps its rows where they are: today's table becomes the partition
-- `callback_deliveries_legacy` for everything received before the next month, attached without
-- copying a row. Its indexes are renamed and then matched to the partitioned indexes of the
-- same definition, so none is rebuilt. The one scan is the validation of the upper bound's
-- CHECK (ATTACH skips its own scan when such a constraint proves the bound). Every step runs in
-- the migration's transaction, so the renamed table holds an ACCESS EXCLUSIVE lock until the
-- commit: callbacks wait (they are not refused) for as long as that scan takes, measured in
-- docs/history.md.
--
-- Uniqueness of (merchant, provider, event id) is kept per partition: a partitioned table's
-- unique index must hold the partition key, and received_at differs between two deliveries of
-- one event. The writers' ON CONFLICT DO NOTHING (no target) checks the unique indexes of the
-- partition a row is routed to; the idempotency claim before it already serialises deliveries
-- of one event, and ledger_transfers stays unique per event over all time.

ALTER TABLE callback_deliveries RENAME TO callback_deliveries_legacy;
ALTER TABLE callback_deliveries_legacy RENAME CONSTRAINT callback_deliveries_pkey TO callback_deliveries_legacy_pkey;
ALTER TABLE callback_deliveries_legacy RENAME CONSTRAINT uq_callback_deliveries_event TO callback_deliveries_legacy_event_key;
ALTER INDEX idx_callback_deliveries_export RENAME TO callback_deliveries_legacy_export_idx;
ALTER INDEX idx_callback_deliveries_received RENAME TO callback_deliveries_legacy_received_idx;
ALTER INDEX idx_callback_deliveries_merchant RENAME TO callback_deliveries_legacy_merchant_idx;
ALTER INDEX idx_callback_deliveries_type RENAME TO callback_deliveries_legacy_type_idx;
ALTER INDEX idx_callback_deliveries_event_id RENAME TO callback_deliveries_legacy_event_id_idx;
ALTER INDEX idx_callback_deliveries_attention RENAME TO callback_deliveries_legacy_attention_idx;

CREATE TABLE callback_deliveries (
    id bigint NOT NULL DEFAULT nextval('callback_deliveries_id_seq'),
    merchant_id bigint NOT NULL,
    provider text NOT NULL,
    event_id text NOT NULL,
    body bytea NOT NULL,
    received_at timestamp with time zone NOT NULL DEFAULT now(),
    event_type text,
    outcome text,
    reason text,
    ack_status integer,
    transfer_id bigint,
    trace_id text,
    CONSTRAINT callback_deliveries_outcome_check
        CHECK (outcome = ANY (ARRAY['applied'::text, 'held'::text, 'ignored'::text, 'rejected'::text]))
) PARTITION BY RANGE (received_at);
ALTER SEQUENCE callback_deliveries_id_seq OWNED BY callback_deliveries.id;

CREATE INDEX idx_callback_deliveries_export ON callback_deliveries (provider, received_at, id);
CREATE INDEX idx_callback_deliveries_received ON callback_deliveries (received_at, id);
CREATE INDEX idx_callback_deliveries_merchant ON callback_deliveries (merchant_id, received_at, id);
CREATE INDEX idx_callback_deliveries_type ON callback_deliveries (event_type, received_at, id);
CREATE INDEX idx_callback_deliveries_event_id ON callback_deliveries (event_id);
CREATE INDEX idx_callback_deliveries_attention ON callback_deliveries (outcome, received_at, id)
    WHERE outcome <> 'applied';

-- The first instant of the UTC month holding `p_at`.
CREATE FUNCTION callback_deliveries_month_start(p_at timestamptz) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT date_trunc('month', p_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' $$;

DO $$
DECLARE
    v_upper timestamptz := callback_deliveries_month_start(
        greatest(now(), (SELECT max(received_at) FROM callback_deliveries_legacy))) + interval '1 month';
BEGIN
    EXECUTE format('ALTER TABLE callback_deliveries_legacy ADD CONSTRAINT callback_deliveries_legacy_bound '
                   'CHECK (received_at < %L)', v_upper);
    EXECUTE format('ALTER TABLE callback_deliveries ATTACH PARTITION callback_deliveries_legacy '
                   'FOR VALUES FROM (MINVALUE) TO (%L)', v_upper);
    -- The partition bound says it now; a CHECK would cost every insert an evaluation.
    ALTER TABLE callback_deliveries_legacy DROP CONSTRAINT callback_deliveries_legacy_bound;
END
$$;

-- Adds the partition for the UTC month holding `p_month` (NULL when it exists, attached or
-- waiting for its drop). The table is made and indexed on its own and then attached: ATTACH
-- takes SHARE UPDATE EXCLUSIVE on callback_deliveries, so callbacks keep writing meanwhile,
-- where CREATE TABLE .. PARTITION OF would take ACCESS EXCLUSIVE.
CREATE FUNCTION callback_deliveries_add_month(p_month timestamptz) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_from timestamptz := callback_deliveries_month_start(p_month);
    v_to timestamptz := callback_deliveries_month_start(p_month) + interval '1 month';
    v_name text := 'callback_deliveries_' || to_char(v_from AT TIME ZONE 'UTC', '"y"YYYY"m"MM');
BEGIN
    IF to_regclass(v_name) IS NOT NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE callback_deliveries INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', v_name);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY (id), '
                   'ADD CONSTRAINT %I UNIQUE (merchant_id, provider, event_id), '
                   'ADD CONSTRAINT %I CHECK (received_at >= %L AND received_at < %L)',
                   v_name, v_name || '_pkey', v_name || '_event_key', v_name || '_bound', v_from, v_to);
    EXECUTE format('ALTER TABLE callback_deliveries ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                   v_name, v_from, v_to);
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', v_name, v_name || '_bound');
    RETURN v_name;
END
$$;

-- Adds the monthly partitions missing from the current month through `p_months` after it;
-- returns the names added. A month that a partition already covers (the legacy one) is left.
CREATE FUNCTION callback_deliveries_add_ahead(p_months integer) RETURNS SETOF text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_month timestamptz;
    v_name text;
BEGIN
    FOR v_month IN
        SELECT m FROM generate_series(callback_deliveries_month_start(now()),
                                      callback_deliveries_month_start(now()) + make_interval(months => p_months),
                                      interval '1 month') m
        WHERE NOT EXISTS (
            SELECT 1
            FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
                 LATERAL (SELECT (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz AS lo,
                                 (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz AS hi) b
            WHERE i.inhparent = 'callback_deliveries'::regclass
              AND (b.lo IS NULL OR b.lo <= m) AND b.hi > m)
    LOOP
        v_name := callback_deliveries_add_month(v_month);
        IF v_name IS NOT NULL THEN
            RETURN NEXT v_name;
        END IF;
    END LOOP;
END
$$;

SELECT callback_deliveries_add_ahead(3);

-- The writer: ON CONFLICT without a target, so the routed partition's unique index decides.
CREATE OR REPLACE FUNCTION public.callback_record_deliveries(p_merchant_id bigint[], p_provider text[], p_event_id text[], p_body bytea[], p_event_type text[], p_outcome text[], p_reason text[], p_ack_status integer[], p_transfer_id bigint[], p_trace_id text[] DEFAULT NULL::text[]) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_count INT;
BEGIN
    INSERT INTO callback_deliveries
        (merchant_id, provider, event_id, body, event_type, outcome, reason, ack_status, transfer_id,
         trace_id)
    SELECT * FROM unnest(p_merchant_id, p_provider, p_event_id, p_body, p_event_type, p_outcome,
                         p_reason, p_ack_status, p_transfer_id,
                         -- unnest pads a shorter (or NULL) array with NULLs.
                         p_trace_id)
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
