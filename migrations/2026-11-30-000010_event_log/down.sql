-- Back to migration 000007: its three routines (copied verbatim) return, the event log's
-- indexes and columns go.
DROP FUNCTION callback_first_delivery_batch(TEXT, TEXT, TEXT[], TEXT[], TIMESTAMPTZ[], BYTEA[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[], TEXT[], TEXT[], TEXT[], TEXT[]);
DROP FUNCTION callback_first_delivery(TEXT, TEXT, TEXT, TIMESTAMPTZ, BYTEA, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, TEXT, TEXT, TEXT, TEXT);
DROP FUNCTION callback_record_delivery(BIGINT, TEXT, TEXT, BYTEA, TEXT, TEXT, TEXT, INT, BIGINT);
DROP INDEX idx_callback_deliveries_received;
DROP INDEX idx_callback_deliveries_merchant;
DROP INDEX idx_callback_deliveries_type;
DROP INDEX idx_callback_deliveries_event_id;
DROP INDEX idx_callback_deliveries_attention;
ALTER TABLE callback_deliveries
    DROP COLUMN event_type, DROP COLUMN outcome, DROP COLUMN reason,
    DROP COLUMN ack_status, DROP COLUMN transfer_id;

CREATE FUNCTION callback_record_delivery(
    p_merchant_id BIGINT, p_provider TEXT, p_event_id TEXT, p_body BYTEA
) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
-- plpgsql for its cached plan, as idempotency_claim.
BEGIN
    INSERT INTO callback_deliveries (merchant_id, provider, event_id, body)
    VALUES (p_merchant_id, p_provider, p_event_id, p_body)
    ON CONFLICT ON CONSTRAINT uq_callback_deliveries_event DO NOTHING;
    RETURN FOUND;
END
$$;

CREATE FUNCTION callback_first_delivery(
    p_op TEXT, p_idem_key TEXT, p_request_hash TEXT, p_expires_at TIMESTAMPTZ, p_body BYTEA,
    p_merchant_id BIGINT, p_provider TEXT, p_event_id TEXT, p_payment_id TEXT,
    p_order_id BIGINT, p_order_from TEXT, p_order_to TEXT,
    p_payment_status TEXT, p_amount_minor BIGINT, p_currency TEXT,
    p_refunded_from BIGINT, p_refunded_to BIGINT,
    p_kind TEXT, p_refund_id TEXT,
    p_account_a TEXT, p_amount_a BIGINT, p_account_b TEXT, p_amount_b BIGINT,
    p_ack TEXT,
    -- One row, not a set: a set-returning function would cost every call a tuplestore.
    OUT result first_delivery_result,
    OUT status TEXT,
    OUT response_status INT,
    OUT response_body TEXT,
    OUT request_hash TEXT
) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_record_id BIGINT;
    v_transfer_id BIGINT;
    v_ack JSONB;
    v_recorded BOOLEAN;
    v_claimed BOOLEAN := false;
BEGIN
    -- The block is a subtransaction: 'declined' rolls back every write below.
    BEGIN
        -- The transfer id is drawn first so the record can be claimed finished, its ack holding
        -- the id, in one write.
        IF p_kind IS NOT NULL THEN
            v_transfer_id := nextval('ledger_transfers_id_seq');
            v_ack := p_ack::JSONB || jsonb_build_object('transfer_id', v_transfer_id);
        ELSE
            v_ack := p_ack::JSONB;
        END IF;
        v_record_id := idempotency_claim(p_merchant_id, p_op, p_idem_key, p_request_hash, p_expires_at,
                                         'succeeded', 200, v_ack);
        v_claimed := true;
        IF v_record_id IS NULL THEN
            -- A concurrent delivery committed the key after the caller's read.
            SELECT 'existing', r.status, r.response_status, r.response_body, r.request_hash
            INTO result, status, response_status, response_body, request_hash
            FROM idempotency_record(p_merchant_id, p_op, p_idem_key) r;
            IF NOT FOUND THEN
                RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'record vanished during claim';
            END IF;
            RETURN;
        END IF;
        -- Assignments, not PERFORM: plpgsql evaluates a lone function call as a simple
        -- expression, without starting an executor for a query.
        v_recorded := callback_record_delivery(p_merchant_id, p_provider, p_event_id, p_body);
        v_transfer_id := payment_apply_strict(v_transfer_id, p_merchant_id, p_provider, p_event_id, p_payment_id,
            p_order_id, p_order_from, p_order_to, p_payment_status, p_amount_minor, p_currency,
            p_refunded_from, p_refunded_to, p_kind, p_refund_id,
            p_account_a, p_amount_a, p_account_b, p_amount_b);
    EXCEPTION
        WHEN SQLSTATE 'CGD01' OR SQLSTATE 'CGD02' OR deadlock_detected THEN
            -- A deadlock can only be with a batch (below) that locks other orders first.
            result := 'declined';
            response_body := NULL;
            RETURN;
        WHEN lock_not_available THEN
            -- Waiting for the key means another delivery of this event is in flight; waiting
            -- for the order or the payment sends the event down the general path, which waits
            -- with the full timeout and decides from what it then finds.
            result := CASE WHEN v_claimed THEN 'declined' ELSE 'in_flight' END;
            response_body := NULL;
            RETURN;
    END;
    result := 'finished';
    status := 'succeeded';
    response_status := 200;
    response_body := v_ack::TEXT;
    request_hash := p_request_hash;
END
$$;

CREATE FUNCTION callback_first_delivery_batch(
    p_op TEXT, p_lock_timeout TEXT,
    p_idem_key TEXT[], p_request_hash TEXT[], p_expires_at TIMESTAMPTZ[], p_body BYTEA[],
    p_merchant_id BIGINT[], p_provider TEXT[], p_event_id TEXT[], p_payment_id TEXT[],
    p_order_id BIGINT[], p_order_from TEXT[], p_order_to TEXT[],
    p_payment_status TEXT[], p_amount_minor BIGINT[], p_currency TEXT[],
    p_refunded_from BIGINT[], p_refunded_to BIGINT[],
    p_kind TEXT[], p_refund_id TEXT[],
    p_account_a TEXT[], p_amount_a BIGINT[], p_account_b TEXT[], p_amount_b BIGINT[],
    p_ack TEXT[]
) RETURNS TABLE (
    item INT,
    result first_delivery_result,
    status TEXT,
    response_status INT,
    response_body TEXT,
    request_hash TEXT
) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_item RECORD;
BEGIN
    -- Transaction-local: the session's own lock_timeout is back after this statement.
    PERFORM set_config('lock_timeout', p_lock_timeout, true);
    FOR i IN 1 .. coalesce(array_length(p_merchant_id, 1), 0) LOOP
        item := i;
        SELECT 'existing', r.status, r.response_status, r.response_body, r.request_hash
        INTO result, status, response_status, response_body, request_hash
        FROM idempotency_record(p_merchant_id[i], p_op, p_idem_key[i]) r;
        IF NOT FOUND THEN
            v_item := callback_first_delivery(p_op, p_idem_key[i], p_request_hash[i], p_expires_at[i],
                p_body[i], p_merchant_id[i], p_provider[i], p_event_id[i], p_payment_id[i],
                p_order_id[i], p_order_from[i], p_order_to[i], p_payment_status[i],
                p_amount_minor[i], p_currency[i], p_refunded_from[i], p_refunded_to[i],
                p_kind[i], p_refund_id[i], p_account_a[i], p_amount_a[i], p_account_b[i],
                p_amount_b[i], p_ack[i]);
            result := v_item.result;
            status := v_item.status;
            response_status := v_item.response_status;
            response_body := v_item.response_body;
            request_hash := v_item.request_hash;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
