-- Disputes in the one write path. The planner (src/payments/state/dispute.rs) decides what a
-- withdrawal, a reinstatement or a close does; the same writers as every other effect write it,
-- each guarded in its WHERE by the state the plan read:
--   * payment_apply_all (one writer of orders' status, payments and the ledger) learns a
--     payment's dispute amount (disputed_minor) and a guard on the status the plan read, a
--     transfer's dispute id, and a third entry (the dispute fee);
--   * payment_disputes_write (new) is the one writer of payment_disputes;
--   * payment_apply, the general path's call, runs both in one subtransaction.
--
-- The capture paths (callback_first_delivery, callback_first_delivery_batch and
-- payment_apply_strict, all unchanged) call payment_apply_all with the 19 arguments they always
-- passed: the new parameters default to NULL, so a capture builds no extra array, its payments
-- insert is the same statement, its transfer insert carries one more NULL column, and the third
-- entry costs it one NULL test.

DROP FUNCTION payment_apply(BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT,
    BIGINT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT);
DROP FUNCTION payment_apply_all(BIGINT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[],
    TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[],
    TEXT[], BIGINT[]);

-- Applies effects: orders' status, payments, transfers with their entries, and the refund
-- requests a posted refund settles. Every guard must hold for every item, or it raises
-- (CGD01: a row is not in the planned state; CGD02: an event, refund or dispute transfer is
-- already posted) and the caller's subtransaction undoes all of it. Items with a kind get a
-- transfer; its id is the one given (drawn by the caller, who needs it before writing), or a
-- new one. Returns the transfer ids, item by item (NULL for an item without a transfer).
--
-- An item that changes a captured payment (a refund, a dispute; p_refunded_to not NULL) moves
-- it from the status, refunded total and dispute amount its plan read (p_payment_from,
-- p_refunded_from, p_disputed_from) to the new ones; what may be refunded is decided by the
-- plan from those three, so a refund can never pass a withdrawal it did not see.
CREATE FUNCTION payment_apply_all(
    p_transfer_id BIGINT[],
    p_merchant_id BIGINT[], p_provider TEXT[], p_event_id TEXT[], p_payment_id TEXT[],
    p_order_id BIGINT[], p_order_from TEXT[], p_order_to TEXT[],
    p_payment_status TEXT[], p_amount_minor BIGINT[], p_currency TEXT[],
    p_refunded_from BIGINT[], p_refunded_to BIGINT[],
    p_kind TEXT[], p_refund_id TEXT[],
    p_account_a TEXT[], p_amount_a BIGINT[], p_account_b TEXT[], p_amount_b BIGINT[],
    p_payment_from TEXT[] DEFAULT NULL, p_disputed_from BIGINT[] DEFAULT NULL,
    p_disputed_to BIGINT[] DEFAULT NULL, p_dispute_id TEXT[] DEFAULT NULL,
    p_account_c TEXT[] DEFAULT NULL, p_amount_c BIGINT[] DEFAULT NULL
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

    -- A capture or a failure takes a new payment id or a pending/failed one; a refund or a
    -- dispute moves a captured payment on from the state its plan read.
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
        UPDATE payments p
        SET refunded_minor = t.refunded_to, disputed_minor = t.disputed_to, status = t.status,
            updated_at = now()
        FROM unnest(p_merchant_id, p_provider, p_payment_id, p_payment_status, p_refunded_from,
                    p_refunded_to, p_payment_from, p_disputed_from, p_disputed_to)
             AS t(merchant_id, provider, payment_id, status, refunded_from, refunded_to,
                  status_from, disputed_from, disputed_to)
        WHERE t.refunded_to IS NOT NULL
          AND p.merchant_id = ANY(p_merchant_id) AND p.provider = ANY(p_provider)
          AND p.payment_id = ANY(p_payment_id)
          AND p.merchant_id = t.merchant_id AND p.provider = t.provider AND p.payment_id = t.payment_id
          AND p.status = t.status_from
          AND p.refunded_minor = t.refunded_from
          AND p.disputed_minor = t.disputed_from;
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
        INSERT INTO ledger_transfers
            (id, merchant_id, provider, event_id, kind, order_id, payment_id, refund_id, dispute_id)
        SELECT t.id, t.merchant_id, t.provider, t.event_id, t.kind, t.order_id, t.payment_id,
               t.refund_id, t.dispute_id
        FROM unnest(v_transfer_id, p_merchant_id, p_provider, p_event_id, p_kind, p_order_id,
                    p_payment_id, p_refund_id, p_dispute_id)
             AS t(id, merchant_id, provider, event_id, kind, order_id, payment_id, refund_id, dispute_id)
        WHERE t.id IS NOT NULL
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        IF v_count <> v_expected THEN
            RAISE EXCEPTION USING ERRCODE = 'CGD02', MESSAGE = 'event, refund or dispute already posted';
        END IF;
        INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor)
        SELECT t.id, t.merchant_id, e.account, t.currency, e.amount_minor
        FROM unnest(v_transfer_id, p_merchant_id, p_currency, p_account_a, p_amount_a, p_account_b, p_amount_b)
             AS t(id, merchant_id, currency, account_a, amount_a, account_b, amount_b)
        CROSS JOIN LATERAL (VALUES (t.account_a, t.amount_a), (t.account_b, t.amount_b))
             AS e(account, amount_minor)
        WHERE t.id IS NOT NULL;
        -- A chargeback's fee is its third entry. Its own statement, so a capture (no third
        -- entry, p_account_c NULL) pays one NULL test for it rather than a wider insert.
        IF p_account_c IS NOT NULL THEN
            INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor)
            SELECT t.id, t.merchant_id, t.account_c, t.currency, t.amount_c
            FROM unnest(v_transfer_id, p_merchant_id, p_currency, p_account_c, p_amount_c)
                 AS t(id, merchant_id, currency, account_c, amount_c)
            WHERE t.id IS NOT NULL AND t.account_c IS NOT NULL;
        END IF;
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

-- The one write of payment_disputes: a dispute's row moves from the funds and outcome its plan
-- read (p_funds_from NULL: the plan saw no row) to the values the plan computed. Raises CGD01
-- when the row is not in that state (another event of the dispute committed first).
CREATE FUNCTION payment_disputes_write(
    p_merchant_id BIGINT, p_provider TEXT, p_dispute_id TEXT, p_payment_id TEXT, p_order_id BIGINT,
    p_funds_from TEXT, p_outcome_from TEXT, p_funds_to TEXT, p_outcome_to TEXT, p_currency TEXT,
    p_withdrawn_minor BIGINT, p_fee_minor BIGINT, p_reinstated_minor BIGINT, p_account TEXT,
    p_note TEXT
) RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
    IF p_funds_from IS NULL THEN
        INSERT INTO payment_disputes
            (merchant_id, provider, dispute_id, payment_id, order_id, funds, outcome, currency,
             withdrawn_minor, fee_minor, reinstated_minor, account, note)
        VALUES (p_merchant_id, p_provider, p_dispute_id, p_payment_id, p_order_id, p_funds_to,
                p_outcome_to, p_currency, p_withdrawn_minor, p_fee_minor, p_reinstated_minor,
                p_account, p_note)
        ON CONFLICT ON CONSTRAINT uq_payment_disputes DO NOTHING;
    ELSE
        UPDATE payment_disputes
        SET order_id = p_order_id, funds = p_funds_to, outcome = p_outcome_to,
            currency = p_currency, withdrawn_minor = p_withdrawn_minor, fee_minor = p_fee_minor,
            reinstated_minor = p_reinstated_minor, account = p_account, note = p_note,
            updated_at = now()
        WHERE merchant_id = p_merchant_id AND provider = p_provider AND dispute_id = p_dispute_id
          AND funds = p_funds_from AND outcome = p_outcome_from;
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'dispute not in the planned state';
    END IF;
END
$$;

-- The general path's call: an effect in a subtransaction, answering what it found as a typed
-- result ('applied' with the transfer id, or 'state_changed' / 'already_posted' with nothing
-- written), so the caller can decide again. A dispute's row (p_dispute_funds_to not NULL) is
-- written in the same subtransaction, after the order, the payment and the ledger (the lock
-- order of every path: order, payment, then the dispute).
CREATE FUNCTION payment_apply(
    p_merchant_id BIGINT, p_provider TEXT, p_event_id TEXT, p_payment_id TEXT,
    p_order_id BIGINT, p_order_from TEXT, p_order_to TEXT,
    p_payment_status TEXT, p_amount_minor BIGINT, p_currency TEXT,
    p_refunded_from BIGINT, p_refunded_to BIGINT,
    p_kind TEXT, p_refund_id TEXT,
    p_account_a TEXT, p_amount_a BIGINT, p_account_b TEXT, p_amount_b BIGINT,
    p_payment_from TEXT, p_disputed_from BIGINT, p_disputed_to BIGINT,
    p_dispute_id TEXT, p_account_c TEXT, p_amount_c BIGINT,
    p_dispute_funds_from TEXT, p_dispute_outcome_from TEXT,
    p_dispute_funds_to TEXT, p_dispute_outcome_to TEXT,
    p_dispute_withdrawn BIGINT, p_dispute_fee BIGINT, p_dispute_reinstated BIGINT,
    p_dispute_account TEXT, p_dispute_note TEXT,
    OUT result payment_apply_result, OUT transfer_id BIGINT
) LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        transfer_id := (payment_apply_all(ARRAY[NULL::BIGINT], ARRAY[p_merchant_id],
            ARRAY[p_provider], ARRAY[p_event_id], ARRAY[p_payment_id], ARRAY[p_order_id],
            ARRAY[p_order_from], ARRAY[p_order_to], ARRAY[p_payment_status], ARRAY[p_amount_minor],
            ARRAY[p_currency], ARRAY[p_refunded_from], ARRAY[p_refunded_to], ARRAY[p_kind],
            ARRAY[p_refund_id], ARRAY[p_account_a], ARRAY[p_amount_a], ARRAY[p_account_b],
            ARRAY[p_amount_b], ARRAY[p_payment_from], ARRAY[p_disputed_from],
            ARRAY[p_disputed_to], ARRAY[p_dispute_id],
            CASE WHEN p_account_c IS NOT NULL THEN ARRAY[p_account_c] END,
            CASE WHEN p_account_c IS NOT NULL THEN ARRAY[p_amount_c] END))[1];
        IF p_dispute_funds_to IS NOT NULL THEN
            PERFORM payment_disputes_write(p_merchant_id, p_provider, p_dispute_id, p_payment_id,
                p_order_id, p_dispute_funds_from, p_dispute_outcome_from, p_dispute_funds_to,
                p_dispute_outcome_to, p_currency, p_dispute_withdrawn, p_dispute_fee,
                p_dispute_reinstated, p_dispute_account, p_dispute_note);
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
