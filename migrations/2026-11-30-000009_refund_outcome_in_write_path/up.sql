-- A refund request learns its outcome in the one write path: payment_apply_strict, when it posts
-- a refund, settles the matching refund request in the same transaction, so a request is
-- 'succeeded' exactly when its money moved in the ledger.

-- Marks the refund requests a posted refund answers as succeeded:
-- * with a refund id (canonical `refund.succeeded` with `data.refund_id`): the pending request
--   whose provider_refund_id is that id;
-- * without one (Stripe `charge.refunded` is cumulative and names no refund): the payment's
--   pending requests, oldest first, while the amounts of its succeeded requests plus theirs fit
--   in the payment's refunded total after this posting. A request is never marked before the
--   provider's total covers it; a refund made outside the gateway (the provider's dashboard) can
--   make the provider's total cover a request early, which docs/refunds.md states.
CREATE FUNCTION refund_requests_settle(
    p_merchant_id BIGINT, p_provider TEXT, p_payment_id TEXT, p_refund_id TEXT, p_refunded_total BIGINT
) RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    v_covered BIGINT;
    v_request RECORD;
BEGIN
    IF p_refund_id IS NOT NULL THEN
        UPDATE refund_requests SET status = 'succeeded', updated_at = now()
        WHERE merchant_id = p_merchant_id AND provider = p_provider
          AND provider_refund_id = p_refund_id AND status = 'pending';
        RETURN;
    END IF;
    IF p_refunded_total IS NULL THEN
        RETURN;
    END IF;
    SELECT coalesce(sum(amount_minor), 0) INTO v_covered
    FROM refund_requests
    WHERE merchant_id = p_merchant_id AND provider = p_provider AND payment_id = p_payment_id
      AND status = 'succeeded';
    FOR v_request IN
        SELECT id, amount_minor FROM refund_requests
        WHERE merchant_id = p_merchant_id AND provider = p_provider AND payment_id = p_payment_id
          AND status = 'pending'
        ORDER BY id
        FOR UPDATE
    LOOP
        EXIT WHEN v_covered + v_request.amount_minor > p_refunded_total;
        v_covered := v_covered + v_request.amount_minor;
        UPDATE refund_requests SET status = 'succeeded', updated_at = now() WHERE id = v_request.id;
    END LOOP;
END
$$;

-- Phase 3 of refund.create when the provider accepted: store its refund id and make the request
-- 'pending'; then, if the refund webhook already posted (it can overtake the provider's HTTP
-- answer), settle it at once by the same rule. The caller holds the order's row lock, which the
-- callback path also takes before it posts a refund, so one of the two always sees the other.
-- Returns the request's status afterwards ('pending' or 'succeeded'); NULL if it was not
-- 'processing' (nothing written).
CREATE FUNCTION refund_request_accepted(p_request_id BIGINT, p_refund_id TEXT)
RETURNS TEXT LANGUAGE plpgsql AS $$
DECLARE
    v_request refund_requests%ROWTYPE;
    v_refunded BIGINT;
BEGIN
    UPDATE refund_requests SET status = 'pending', provider_refund_id = p_refund_id, updated_at = now()
    WHERE id = p_request_id AND status = 'processing'
    RETURNING * INTO v_request;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF EXISTS (SELECT 1 FROM ledger_transfers t
               WHERE t.merchant_id = v_request.merchant_id AND t.provider = v_request.provider
                 AND t.refund_id = p_refund_id) THEN
        PERFORM refund_requests_settle(v_request.merchant_id, v_request.provider,
            v_request.payment_id, p_refund_id, NULL);
    ELSIF EXISTS (SELECT 1 FROM ledger_transfers t
                  WHERE t.merchant_id = v_request.merchant_id AND t.provider = v_request.provider
                    AND t.payment_id = v_request.payment_id AND t.kind = 'refund'
                    AND t.refund_id IS NULL) THEN
        -- This payment's refunds post without ids (cumulative): the total decides.
        SELECT p.refunded_minor INTO v_refunded FROM payments p
        WHERE p.merchant_id = v_request.merchant_id AND p.provider = v_request.provider
          AND p.payment_id = v_request.payment_id;
        PERFORM refund_requests_settle(v_request.merchant_id, v_request.provider,
            v_request.payment_id, NULL, v_refunded);
    END IF;
    SELECT status INTO v_request.status FROM refund_requests WHERE id = p_request_id;
    RETURN v_request.status;
END
$$;

-- The one writer of orders' status, payments and the ledger (migration 000007), now also
-- settling the refund request a posted refund answers.
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
