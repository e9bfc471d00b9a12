-- payment_apply_strict as migration 000007 made it.
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
    RETURN v_id;
END
$$;

DROP FUNCTION refund_request_accepted(BIGINT, TEXT);
DROP FUNCTION refund_requests_settle(BIGINT, TEXT, TEXT, TEXT, BIGINT);
