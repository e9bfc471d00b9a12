-- Disputes whose books do not depend on the order events arrive in (docs/disputes.md, "Any
-- order, the same books"). Only the two routines that change are here (the others' current
-- bodies are migration 000040's):
--   * payment_disputes_write, still the one writer of payment_disputes, records for a reversal
--     that names no dispute (Paddle's) the reversal's own id on the dispute it gave back
--     (reinstated_by, migration 000046); and when a refund the provider made takes what
--     disputes hold back too (a refund that arrives after the chargeback of money refunded
--     before it), it notes the payment's disputes that hold funds `exceeds_remaining`, as a
--     withdrawal larger than what remains is noted, so finance sees it whichever came first;
--   * payment_apply passes both on (for a refund, with no dispute row of its own to write).
-- Both new parameters are last and have defaults: a gateway of the previous version, calling
-- with the parameters it knows, keeps working against this schema during a rolling deploy.

DROP FUNCTION payment_disputes_write(BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, TEXT,
    TEXT, BIGINT, BIGINT, BIGINT, TEXT, TEXT);
CREATE FUNCTION payment_disputes_write(
    p_merchant_id BIGINT, p_provider TEXT, p_dispute_id TEXT, p_payment_id TEXT, p_order_id BIGINT,
    p_funds_from TEXT, p_outcome_from TEXT, p_funds_to TEXT, p_outcome_to TEXT, p_currency TEXT,
    p_withdrawn_minor BIGINT, p_fee_minor BIGINT, p_reinstated_minor BIGINT, p_account TEXT,
    p_note TEXT, p_reinstated_by TEXT DEFAULT NULL, p_payment_exceeded BOOLEAN DEFAULT false
) RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
    -- The payment's refunds and what its disputes hold back exceed what was captured (its plan
    -- decided it): each dispute still holding funds is in front of finance.
    IF p_payment_exceeded THEN
        UPDATE payment_disputes SET note = 'exceeds_remaining', updated_at = now()
        WHERE merchant_id = p_merchant_id AND provider = p_provider
          AND payment_id = p_payment_id AND withdrawn_minor > reinstated_minor
          AND note IS DISTINCT FROM 'exceeds_remaining';
    END IF;
    -- A dispute's own row (none to write for a refund).
    IF p_funds_to IS NULL THEN
        RETURN;
    END IF;
    IF p_funds_from IS NULL THEN
        INSERT INTO payment_disputes
            (merchant_id, provider, dispute_id, payment_id, order_id, funds, outcome, currency,
             withdrawn_minor, fee_minor, reinstated_minor, account, note, reinstated_by)
        VALUES (p_merchant_id, p_provider, p_dispute_id, p_payment_id, p_order_id, p_funds_to,
                p_outcome_to, p_currency, p_withdrawn_minor, p_fee_minor, p_reinstated_minor,
                p_account, p_note, p_reinstated_by)
        ON CONFLICT ON CONSTRAINT uq_payment_disputes DO NOTHING;
    ELSE
        UPDATE payment_disputes
        SET order_id = p_order_id, funds = p_funds_to, outcome = p_outcome_to,
            currency = p_currency, withdrawn_minor = p_withdrawn_minor, fee_minor = p_fee_minor,
            reinstated_minor = p_reinstated_minor, account = p_account, note = p_note,
            reinstated_by = coalesce(p_reinstated_by, reinstated_by), updated_at = now()
        WHERE merchant_id = p_merchant_id AND provider = p_provider AND dispute_id = p_dispute_id
          AND funds = p_funds_from AND outcome = p_outcome_from;
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'dispute not in the planned state';
    END IF;
END
$$;

DROP FUNCTION payment_apply(BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT,
    BIGINT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, TEXT, BIGINT, BIGINT, TEXT, TEXT,
    BIGINT, TEXT, TEXT, TEXT, TEXT, BIGINT, BIGINT, BIGINT, TEXT, TEXT, BOOLEAN, TEXT);
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
    p_notify BOOLEAN DEFAULT false, p_reason TEXT DEFAULT NULL,
    p_dispute_reinstated_by TEXT DEFAULT NULL, p_disputes_exceeded BOOLEAN DEFAULT false,
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
            CASE WHEN p_account_c IS NOT NULL THEN ARRAY[p_amount_c] END,
            ARRAY[p_notify], ARRAY[p_reason]))[1];
        IF p_dispute_funds_to IS NOT NULL OR p_disputes_exceeded THEN
            PERFORM payment_disputes_write(p_merchant_id, p_provider, p_dispute_id, p_payment_id,
                p_order_id, p_dispute_funds_from, p_dispute_outcome_from, p_dispute_funds_to,
                p_dispute_outcome_to, p_currency, p_dispute_withdrawn, p_dispute_fee,
                p_dispute_reinstated, p_dispute_account, p_dispute_note, p_dispute_reinstated_by,
                p_disputes_exceeded);
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
