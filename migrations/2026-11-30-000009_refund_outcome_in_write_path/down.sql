-- payment_apply as migration 000007 made it.
-- A plan's effect, all or nothing: the order's move (when p_order_to is set), the payment's
-- write, the transfer (when p_kind is set). Locks are taken order first, then payment, on every
-- path. Returns 'applied' with the transfer id, or 'state_changed' / 'already_posted' with
-- nothing written (a subtransaction), so the caller can decide again.
CREATE OR REPLACE FUNCTION payment_apply(
    p_merchant_id BIGINT, p_provider TEXT, p_event_id TEXT, p_payment_id TEXT,
    p_order_id BIGINT, p_order_from TEXT, p_order_to TEXT,
    p_payment_status TEXT, p_amount_minor BIGINT, p_currency TEXT,
    p_refunded_from BIGINT, p_refunded_to BIGINT,
    p_kind TEXT, p_refund_id TEXT,
    p_account_a TEXT, p_amount_a BIGINT, p_account_b TEXT, p_amount_b BIGINT,
    OUT result payment_apply_result, OUT transfer_id BIGINT
) LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        IF p_order_to IS NOT NULL THEN
            PERFORM orders_move_status(p_merchant_id, p_order_id, p_order_from, p_order_to,
                CASE WHEN p_order_from = 'pending_payment' THEN p_amount_minor END,
                CASE WHEN p_order_from = 'pending_payment' THEN p_currency END);
        END IF;
        PERFORM payments_write(p_merchant_id, p_provider, p_payment_id, p_order_id, p_payment_status,
            p_amount_minor, p_currency, p_refunded_from, p_refunded_to);
        IF p_kind IS NOT NULL THEN
            transfer_id := ledger_post_transfer(p_merchant_id, p_provider, p_event_id, p_kind, p_order_id,
                p_payment_id, p_refund_id, p_currency, p_account_a, p_amount_a, p_account_b, p_amount_b);
        END IF;
        result := 'applied';
    EXCEPTION
        WHEN SQLSTATE 'CGD01' THEN
            result := 'state_changed';
            transfer_id := NULL;
        WHEN SQLSTATE 'CGD02' THEN
            result := 'already_posted';
            transfer_id := NULL;
    END;
END
$$;

DROP FUNCTION refund_request_accepted(BIGINT, TEXT);
DROP FUNCTION refund_requests_settle(BIGINT, TEXT, TEXT, TEXT, BIGINT);
