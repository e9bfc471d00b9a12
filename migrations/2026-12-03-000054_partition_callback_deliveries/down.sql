-- Back to one table: the legacy partition is detached and renamed back, and the rows of every
-- monthly partition are moved into it (a copy: the way back is slow on a large log, and rows
-- already archived and dropped stay in their archives).
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
    ON CONFLICT ON CONSTRAINT uq_callback_deliveries_event DO NOTHING;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;

DO $$
DECLARE
    v_part text;
BEGIN
    IF to_regclass('callback_deliveries_legacy') IS NULL THEN
        -- Archived and dropped: an empty table takes its place.
        CREATE TABLE callback_deliveries_legacy (LIKE callback_deliveries INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
        ALTER TABLE callback_deliveries_legacy
            ADD CONSTRAINT callback_deliveries_legacy_pkey PRIMARY KEY (id),
            ADD CONSTRAINT callback_deliveries_legacy_event_key UNIQUE (merchant_id, provider, event_id);
    ELSE
        ALTER TABLE callback_deliveries DETACH PARTITION callback_deliveries_legacy;
    END IF;
    FOR v_part IN
        SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'callback_deliveries'::regclass
    LOOP
        EXECUTE format('INSERT INTO callback_deliveries_legacy SELECT * FROM %I', v_part);
        EXECUTE format('DROP TABLE %I', v_part);
    END LOOP;
    -- Detached and never dropped (a pass stopped between its steps): their rows come back too.
    FOR v_part IN
        SELECT relname FROM pg_class
        WHERE relname ~ '^callback_deliveries_y[0-9]{4}m[0-9]{2}$' AND relkind = 'r'
    LOOP
        EXECUTE format('INSERT INTO callback_deliveries_legacy SELECT * FROM %I ON CONFLICT DO NOTHING', v_part);
        EXECUTE format('DROP TABLE %I', v_part);
    END LOOP;
END
$$;

ALTER SEQUENCE callback_deliveries_id_seq OWNED BY callback_deliveries_legacy.id;
DROP TABLE callback_deliveries;
DROP FUNCTION callback_deliveries_add_ahead(integer);
DROP FUNCTION callback_deliveries_add_month(timestamptz);
DROP FUNCTION callback_deliveries_month_start(timestamptz);

ALTER TABLE callback_deliveries_legacy RENAME TO callback_deliveries;
ALTER TABLE callback_deliveries RENAME CONSTRAINT callback_deliveries_legacy_pkey TO callback_deliveries_pkey;
ALTER TABLE callback_deliveries RENAME CONSTRAINT callback_deliveries_legacy_event_key TO uq_callback_deliveries_event;
CREATE INDEX IF NOT EXISTS callback_deliveries_legacy_export_idx ON callback_deliveries (provider, received_at, id);
CREATE INDEX IF NOT EXISTS callback_deliveries_legacy_received_idx ON callback_deliveries (received_at, id);
CREATE INDEX IF NOT EXISTS callback_deliveries_legacy_merchant_idx ON callback_deliveries (merchant_id, received_at, id);
CREATE INDEX IF NOT EXISTS callback_deliveries_legacy_type_idx ON callback_deliveries (event_type, received_at, id);
CREATE INDEX IF NOT EXISTS callback_deliveries_legacy_event_id_idx ON callback_deliveries (event_id);
CREATE INDEX IF NOT EXISTS callback_deliveries_legacy_attention_idx ON callback_deliveries (outcome, received_at, id)
    WHERE outcome <> 'applied';
ALTER INDEX callback_deliveries_legacy_export_idx RENAME TO idx_callback_deliveries_export;
ALTER INDEX callback_deliveries_legacy_received_idx RENAME TO idx_callback_deliveries_received;
ALTER INDEX callback_deliveries_legacy_merchant_idx RENAME TO idx_callback_deliveries_merchant;
ALTER INDEX callback_deliveries_legacy_type_idx RENAME TO idx_callback_deliveries_type;
ALTER INDEX callback_deliveries_legacy_event_id_idx RENAME TO idx_callback_deliveries_event_id;
ALTER INDEX callback_deliveries_legacy_attention_idx RENAME TO idx_callback_deliveries_attention;
