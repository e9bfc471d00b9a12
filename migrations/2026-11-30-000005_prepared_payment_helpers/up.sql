-- Prepared calls for the callback path's writes (see 000004 for why: diesel never prepares
-- UPDATE or ON CONFLICT DO UPDATE statements). The decisions stay in Rust; these only write.

-- A transfer and its two entries in one call. Returns the transfer id, or NULL when this event
-- was posted before (nothing is written then). The caller passes the signed entries; they are
-- derived in Rust from one amount and sum to zero.
CREATE FUNCTION ledger_post_transfer(
    p_merchant_id BIGINT,
    p_provider TEXT,
    p_event_id TEXT,
    p_kind TEXT,
    p_order_id BIGINT,
    p_payment_id TEXT,
    p_currency TEXT,
    p_account_a TEXT,
    p_amount_a BIGINT,
    p_account_b TEXT,
    p_amount_b BIGINT
) RETURNS BIGINT LANGUAGE plpgsql AS $$
DECLARE
    v_id BIGINT;
BEGIN
    INSERT INTO ledger_transfers (merchant_id, provider, event_id, kind, order_id, payment_id)
    VALUES (p_merchant_id, p_provider, p_event_id, p_kind, p_order_id, p_payment_id)
    ON CONFLICT ON CONSTRAINT uq_ledger_transfers_event DO NOTHING
    RETURNING id INTO v_id;
    IF v_id IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor)
    VALUES (v_id, p_merchant_id, p_account_a, p_currency, p_amount_a),
           (v_id, p_merchant_id, p_account_b, p_currency, p_amount_b);
    RETURN v_id;
END
$$;

-- Creates or moves a payment to a status with its captured amount. Returns the rows written.
CREATE FUNCTION payments_upsert(
    p_merchant_id BIGINT,
    p_provider TEXT,
    p_payment_id TEXT,
    p_order_id BIGINT,
    p_status TEXT,
    p_amount_minor BIGINT,
    p_currency TEXT
) RETURNS INTEGER LANGUAGE plpgsql AS $$
DECLARE
    v_rows INTEGER;
BEGIN
    INSERT INTO payments (merchant_id, provider, payment_id, order_id, status, amount_minor, currency)
    VALUES (p_merchant_id, p_provider, p_payment_id, p_order_id, p_status, p_amount_minor, p_currency)
    ON CONFLICT (merchant_id, provider, payment_id) DO UPDATE
    SET order_id = EXCLUDED.order_id, status = EXCLUDED.status, amount_minor = EXCLUDED.amount_minor,
        currency = EXCLUDED.currency, updated_at = now();
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN v_rows;
END
$$;

-- Records a refund total and the payment's new status. Returns the rows updated.
CREATE FUNCTION payments_record_refund(
    p_merchant_id BIGINT,
    p_provider TEXT,
    p_payment_id TEXT,
    p_refunded_minor BIGINT,
    p_status TEXT
) RETURNS INTEGER LANGUAGE plpgsql AS $$
DECLARE
    v_rows INTEGER;
BEGIN
    UPDATE payments
    SET refunded_minor = p_refunded_minor, status = p_status, updated_at = now()
    WHERE merchant_id = p_merchant_id AND provider = p_provider AND payment_id = p_payment_id;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN v_rows;
END
$$;

-- Moves an order to a status. Returns the rows updated.
CREATE FUNCTION orders_set_status(p_order_id BIGINT, p_status TEXT) RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    v_rows INTEGER;
BEGIN
    UPDATE orders SET status = p_status WHERE id = p_order_id;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN v_rows;
END
$$;
