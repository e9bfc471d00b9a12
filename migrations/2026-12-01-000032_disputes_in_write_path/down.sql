-- Back to the writers of 000021 (payment_apply_all) and 000007 (payment_apply), copied
-- verbatim; payment_disputes goes with 000030's down.sql.
DROP FUNCTION payment_apply(BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT,
    BIGINT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, TEXT, BIGINT, BIGINT, TEXT, TEXT,
    BIGINT, TEXT, TEXT, TEXT, TEXT, BIGINT, BIGINT, BIGINT, TEXT, TEXT);
DROP FUNCTION payment_disputes_write(BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, TEXT,
    TEXT, BIGINT, BIGINT, BIGINT, TEXT, TEXT);
DROP FUNCTION payment_apply_all(BIGINT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[],
    TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[],
    TEXT[], BIGINT[], TEXT[], BIGINT[], BIGINT[], TEXT[], TEXT[], BIGINT[]);

CREATE FUNCTION payment_apply_all(
    p_transfer_id BIGINT[],
    p_merchant_id BIGINT[], p_provider TEXT[], p_event_id TEXT[], p_payment_id TEXT[],
    p_order_id BIGINT[], p_order_from TEXT[], p_order_to TEXT[],
    p_payment_status TEXT[], p_amount_minor BIGINT[], p_currency TEXT[],
    p_refunded_from BIGINT[], p_refunded_to BIGINT[],
    p_kind TEXT[], p_refund_id TEXT[],
    p_account_a TEXT[], p_amount_a BIGINT[], p_account_b TEXT[], p_amount_b BIGINT[]
) RETURNS BIGINT[] LANGUAGE plpgsql
-- Each update names its rows by key (`= ANY` on the key's index as well as the join), and no
-- plan may scan a whole table for them: the planner would otherwise pick a scan from the stale
-- size estimate of a young table, and a plpgsql plan keeps it for the session.
SET enable_seqscan = off
AS $$
DECLARE
    v_transfer_id BIGINT[];
    v_expected INT;
    v_count INT;
BEGIN
    v_expected := cardinality(array_remove(p_order_to, NULL));
    IF v_expected > 0 THEN
        UPDATE orders o SET status = t.order_to
        FROM unnest(p_order_id, p_merchant_id, p_order_from, p_order_to, p_amount_minor, p_currency)
             AS t(order_id, merchant_id, order_from, order_to, amount_minor, currency)
        WHERE t.order_to IS NOT NULL AND o.id = ANY(p_order_id)
          AND o.id = t.order_id AND o.user_id = t.merchant_id AND o.status = t.order_from
          AND (t.order_from <> 'pending_payment'
               OR (o.amount_minor = t.amount_minor AND o.currency = t.currency));
        GET DIAGNOSTICS v_count = ROW_COUNT;
        IF v_count <> v_expected THEN
            RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'order not in the planned state';
        END IF;
    END IF;

    -- A capture or a failure takes a new payment id or a pending/failed one; a refund moves a
    -- captured payment's refunded total on from the amount the plan read.
    v_expected := cardinality(p_refunded_to) - cardinality(array_remove(p_refunded_to, NULL));
    IF v_expected > 0 THEN
        INSERT INTO payments (merchant_id, provider, payment_id, order_id, status, amount_minor, currency)
        SELECT t.merchant_id, t.provider, t.payment_id, t.order_id, t.status, t.amount_minor, t.currency
        FROM unnest(p_merchant_id, p_provider, p_payment_id, p_order_id, p_payment_status,
                    p_amount_minor, p_currency, p_refunded_to)
             AS t(merchant_id, provider, payment_id, order_id, status, amount_minor, currency, refunded_to)
        WHERE t.refunded_to IS NULL
        ON CONFLICT (merchant_id, provider, payment_id) DO UPDATE
        SET order_id = EXCLUDED.order_id, status = EXCLUDED.status, amount_minor = EXCLUDED.amount_minor,
            currency = EXCLUDED.currency, updated_at = now()
        WHERE payments.status IN ('pending', 'failed');
        GET DIAGNOSTICS v_count = ROW_COUNT;
        IF v_count <> v_expected THEN
            RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'payment not in the planned state';
        END IF;
    END IF;
    IF v_expected < cardinality(p_merchant_id) THEN
        v_expected := cardinality(p_merchant_id) - v_expected;
        UPDATE payments p SET refunded_minor = t.refunded_to, status = t.status, updated_at = now()
        FROM unnest(p_merchant_id, p_provider, p_payment_id, p_payment_status, p_refunded_from, p_refunded_to)
             AS t(merchant_id, provider, payment_id, status, refunded_from, refunded_to)
        WHERE t.refunded_to IS NOT NULL
          AND p.merchant_id = ANY(p_merchant_id) AND p.provider = ANY(p_provider)
          AND p.payment_id = ANY(p_payment_id)
          AND p.merchant_id = t.merchant_id AND p.provider = t.provider AND p.payment_id = t.payment_id
          AND p.refunded_minor = t.refunded_from
          AND p.status IN ('succeeded', 'partially_refunded', 'held');
        GET DIAGNOSTICS v_count = ROW_COUNT;
        IF v_count <> v_expected THEN
            RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'payment not in the planned state';
        END IF;
    END IF;

    v_transfer_id := ARRAY(
        SELECT CASE WHEN t.kind IS NOT NULL THEN coalesce(t.id, nextval('ledger_transfers_id_seq')) END
        FROM unnest(p_kind, p_transfer_id) WITH ORDINALITY AS t(kind, id, item)
        ORDER BY t.item);
    v_expected := cardinality(array_remove(v_transfer_id, NULL));
    IF v_expected > 0 THEN
        INSERT INTO ledger_transfers (id, merchant_id, provider, event_id, kind, order_id, payment_id, refund_id)
        SELECT t.id, t.merchant_id, t.provider, t.event_id, t.kind, t.order_id, t.payment_id, t.refund_id
        FROM unnest(v_transfer_id, p_merchant_id, p_provider, p_event_id, p_kind, p_order_id,
                    p_payment_id, p_refund_id)
             AS t(id, merchant_id, provider, event_id, kind, order_id, payment_id, refund_id)
        WHERE t.id IS NOT NULL
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        IF v_count <> v_expected THEN
            RAISE EXCEPTION USING ERRCODE = 'CGD02', MESSAGE = 'event or refund already posted';
        END IF;
        INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor)
        SELECT t.id, t.merchant_id, e.account, t.currency, e.amount_minor
        FROM unnest(v_transfer_id, p_merchant_id, p_currency, p_account_a, p_amount_a, p_account_b, p_amount_b)
             AS t(id, merchant_id, currency, account_a, amount_a, account_b, amount_b)
        CROSS JOIN LATERAL (VALUES (t.account_a, t.amount_a), (t.account_b, t.amount_b))
             AS e(account, amount_minor)
        WHERE t.id IS NOT NULL;
    END IF;

    -- A posted refund settles the merchant's refund request it answers, in this transaction.
    FOR i IN 1 .. cardinality(p_kind) LOOP
        IF p_kind[i] = 'refund' THEN
            PERFORM refund_requests_settle(p_merchant_id[i], p_provider[i], p_payment_id[i],
                                           p_refund_id[i], p_refunded_to[i]);
        END IF;
    END LOOP;
    RETURN v_transfer_id;
END
$$;

CREATE FUNCTION payment_apply(
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
        transfer_id := payment_apply_strict(NULL, p_merchant_id, p_provider, p_event_id, p_payment_id,
            p_order_id, p_order_from, p_order_to, p_payment_status, p_amount_minor, p_currency,
            p_refunded_from, p_refunded_to, p_kind, p_refund_id,
            p_account_a, p_amount_a, p_account_b, p_amount_b);
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
