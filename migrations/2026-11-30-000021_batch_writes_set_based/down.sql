-- Back to one row per statement: the scalar writers of 000007/000009/000010 (copied verbatim)
-- write again, and the batch runs its items one by one.
CREATE OR REPLACE FUNCTION idempotency_claim(
    p_user_id BIGINT, p_op TEXT, p_idem_key TEXT, p_request_hash TEXT, p_expires_at TIMESTAMPTZ,
    p_status TEXT DEFAULT 'processing', p_response_status INT DEFAULT NULL,
    p_response_body JSONB DEFAULT NULL
) RETURNS BIGINT LANGUAGE plpgsql AS $$
-- plpgsql, not sql: a plpgsql function keeps its statement's plan for the session, while a
-- sql function that writes is planned again on every call (before PostgreSQL 18).
DECLARE
    v_id BIGINT;
BEGIN
    INSERT INTO idempotency_keys
        (user_id, op, idem_key, request_hash, status, response_status, response_body, expires_at)
    VALUES (p_user_id, p_op, p_idem_key, p_request_hash, p_status, p_response_status,
            p_response_body, p_expires_at)
    ON CONFLICT (user_id, op, idem_key) DO NOTHING
    RETURNING id INTO v_id;
    RETURN v_id;
END
$$;

CREATE OR REPLACE FUNCTION callback_record_delivery(
    p_merchant_id BIGINT, p_provider TEXT, p_event_id TEXT, p_body BYTEA,
    p_event_type TEXT, p_outcome TEXT, p_reason TEXT, p_ack_status INT, p_transfer_id BIGINT
) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
-- plpgsql for its cached plan (see idempotency_claim in 000007).
BEGIN
    INSERT INTO callback_deliveries
        (merchant_id, provider, event_id, body, event_type, outcome, reason, ack_status, transfer_id)
    VALUES (p_merchant_id, p_provider, p_event_id, p_body, p_event_type, p_outcome, p_reason,
            p_ack_status, p_transfer_id)
    ON CONFLICT ON CONSTRAINT uq_callback_deliveries_event DO NOTHING;
    RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION payment_apply_strict(
    p_transfer_id BIGINT,
    p_merchant_id BIGINT, p_provider TEXT, p_event_id TEXT, p_payment_id TEXT,
    p_order_id BIGINT, p_order_from TEXT, p_order_to TEXT,
    p_payment_status TEXT, p_amount_minor BIGINT, p_currency TEXT,
    p_refunded_from BIGINT, p_refunded_to BIGINT,
    p_kind TEXT, p_refund_id TEXT,
    p_account_a TEXT, p_amount_a BIGINT, p_account_b TEXT, p_amount_b BIGINT
) RETURNS BIGINT LANGUAGE plpgsql AS $$
DECLARE
    v_id BIGINT;
BEGIN
    IF p_order_to IS NOT NULL THEN
        UPDATE orders SET status = p_order_to
        WHERE id = p_order_id AND user_id = p_merchant_id AND status = p_order_from
          AND (p_order_from <> 'pending_payment'
               OR (amount_minor = p_amount_minor AND currency = p_currency));
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'order not in the planned state';
        END IF;
    END IF;

    IF p_refunded_to IS NULL THEN
        INSERT INTO payments (merchant_id, provider, payment_id, order_id, status, amount_minor, currency)
        VALUES (p_merchant_id, p_provider, p_payment_id, p_order_id, p_payment_status, p_amount_minor, p_currency)
        ON CONFLICT (merchant_id, provider, payment_id) DO UPDATE
        SET order_id = EXCLUDED.order_id, status = EXCLUDED.status, amount_minor = EXCLUDED.amount_minor,
            currency = EXCLUDED.currency, updated_at = now()
        WHERE payments.status IN ('pending', 'failed');
    ELSE
        UPDATE payments SET refunded_minor = p_refunded_to, status = p_payment_status, updated_at = now()
        WHERE merchant_id = p_merchant_id AND provider = p_provider AND payment_id = p_payment_id
          AND refunded_minor = p_refunded_from
          AND status IN ('succeeded', 'partially_refunded', 'held');
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'payment not in the planned state';
    END IF;

    IF p_kind IS NOT NULL THEN
        INSERT INTO ledger_transfers (id, merchant_id, provider, event_id, kind, order_id, payment_id, refund_id)
        VALUES (COALESCE(p_transfer_id, nextval('ledger_transfers_id_seq')), p_merchant_id, p_provider,
                p_event_id, p_kind, p_order_id, p_payment_id, p_refund_id)
        ON CONFLICT DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'CGD02', MESSAGE = 'event or refund already posted';
        END IF;
        INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor)
        VALUES (v_id, p_merchant_id, p_account_a, p_currency, p_amount_a),
               (v_id, p_merchant_id, p_account_b, p_currency, p_amount_b);
    END IF;
    -- A posted refund settles the merchant's refund request it answers, in this transaction.
    IF p_kind = 'refund' THEN
        PERFORM refund_requests_settle(p_merchant_id, p_provider, p_payment_id, p_refund_id, p_refunded_to);
    END IF;
    RETURN v_id;
END
$$;

CREATE OR REPLACE FUNCTION callback_first_delivery_batch(
    p_op TEXT, p_lock_timeout TEXT,
    p_idem_key TEXT[], p_request_hash TEXT[], p_expires_at TIMESTAMPTZ[], p_body BYTEA[],
    p_merchant_id BIGINT[], p_provider TEXT[], p_event_id TEXT[], p_payment_id TEXT[],
    p_order_id BIGINT[], p_order_from TEXT[], p_order_to TEXT[],
    p_payment_status TEXT[], p_amount_minor BIGINT[], p_currency TEXT[],
    p_refunded_from BIGINT[], p_refunded_to BIGINT[],
    p_kind TEXT[], p_refund_id TEXT[],
    p_account_a TEXT[], p_amount_a BIGINT[], p_account_b TEXT[], p_amount_b BIGINT[],
    p_ack TEXT[], p_event_type TEXT[], p_outcome TEXT[], p_reason TEXT[]
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
                p_amount_b[i], p_ack[i], p_event_type[i], p_outcome[i], p_reason[i]);
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

DROP FUNCTION payment_apply_all(BIGINT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[]);
DROP FUNCTION callback_record_deliveries(BIGINT[], TEXT[], TEXT[], BYTEA[], TEXT[], TEXT[], TEXT[], INT[], BIGINT[]);
DROP FUNCTION idempotency_claim_all(BIGINT[], TEXT, TEXT[], TEXT[], TIMESTAMPTZ[], TEXT, INT[], JSONB[]);
