-- Back to migration 000006: the new routines go, the previous ones (copied verbatim from
-- 000001, 000005 and 000006) come back, and the columns return to their old shape.
DROP FUNCTION callback_first_delivery_batch(TEXT, TEXT, TEXT[], TEXT[], TIMESTAMPTZ[], BYTEA[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[], TEXT[]);
DROP FUNCTION callback_first_delivery(TEXT, TEXT, TEXT, TIMESTAMPTZ, BYTEA, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, TEXT);
DROP FUNCTION payment_apply(BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT);
DROP FUNCTION payment_apply_strict(BIGINT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT);
DROP FUNCTION callback_record_delivery(BIGINT, TEXT, TEXT, BYTEA);
DROP FUNCTION idempotency_acquire(BIGINT, TEXT, TEXT, TEXT, TIMESTAMPTZ);
DROP FUNCTION idempotency_claim(BIGINT, TEXT, TEXT, TEXT, TIMESTAMPTZ, TEXT, INT, JSONB);
DROP FUNCTION idempotency_record(BIGINT, TEXT, TEXT);
DROP TYPE first_delivery_result;
DROP TYPE payment_apply_result;
DROP INDEX uq_ledger_transfers_refund;
ALTER TABLE ledger_transfers DROP COLUMN refund_id;
ALTER TABLE ledger_transfers ALTER COLUMN order_id SET NOT NULL;
ALTER TABLE payments DROP CONSTRAINT payments_status_check;
ALTER TABLE payments ADD CONSTRAINT payments_status_check
    CHECK (status IN ('pending', 'succeeded', 'failed', 'partially_refunded', 'refunded'));
ALTER TABLE payments ALTER COLUMN order_id SET NOT NULL;

CREATE FUNCTION idempotency_acquire(
    p_user_id BIGINT,
    p_op TEXT,
    p_idem_key TEXT,
    p_request_hash TEXT,
    p_expires_at TIMESTAMPTZ
) RETURNS TABLE (
    record_id BIGINT,
    acquired BOOLEAN,
    in_flight BOOLEAN,
    status TEXT,
    response_status INT,
    response_body TEXT,
    request_hash TEXT
) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_id BIGINT;
BEGIN
    FOR attempt IN 1..3 LOOP
        BEGIN
            INSERT INTO idempotency_keys (user_id, op, idem_key, request_hash, expires_at)
            VALUES (p_user_id, p_op, p_idem_key, p_request_hash, p_expires_at)
            ON CONFLICT (user_id, op, idem_key) DO NOTHING
            RETURNING id INTO v_id;
        EXCEPTION WHEN lock_not_available THEN
            RETURN QUERY SELECT NULL::BIGINT, false, true, NULL::TEXT, NULL::INT, NULL::TEXT, NULL::TEXT;
            RETURN;
        END;
        IF v_id IS NOT NULL THEN
            RETURN QUERY SELECT v_id, true, false, 'processing'::TEXT, NULL::INT, NULL::TEXT, p_request_hash;
            RETURN;
        END IF;
        RETURN QUERY
            SELECT k.id, false, false, k.status, k.response_status, k.response_body::TEXT, k.request_hash
            FROM idempotency_keys k
            WHERE k.user_id = p_user_id AND k.op = p_op AND k.idem_key = p_idem_key;
        IF FOUND THEN
            RETURN;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'idempotency record % % % vanished three times during acquire', p_user_id, p_op, p_idem_key;
END
$$;

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

-- A first delivery of a payment capture in one statement (one round trip, its own
-- transaction). The gateway's general path reads the state, decides in Rust, then writes in
-- 7 round trips; this is the same work for the one case that dominates traffic: a
-- payment.succeeded for a pending order. Rust still decides: it computes the capture plan
-- (ack, entries) for the state it expects, and this function only checks that the rows are in
-- that state while writing them. When they are not (unknown order, other amount or currency,
-- order already paid, payment already captured, transfer already posted), everything it did is
-- rolled back and it answers 'declined': the caller then runs the general path, which decides
-- from the real state. A record committed meanwhile is answered as 'existing'; a concurrent
-- first delivery that holds the key past lock_timeout as 'in_flight'.
--
-- The caller calls it only when its own read found no committed record for the key (see
-- src/payments/capture.rs: COALESCE(the read, this call) in one prepared statement), so a
-- redelivery costs one indexed read and no function call. Its records are always op
-- 'payment.callback' (p_idem_key is the scope's key, '{provider}:{event id}').
CREATE FUNCTION payment_capture_first_delivery(
    p_merchant_id BIGINT,
    p_idem_key TEXT,
    p_provider TEXT,
    p_event_id TEXT,
    p_request_hash TEXT,
    p_expires_at TIMESTAMPTZ,
    p_body BYTEA,
    p_payment_id TEXT,
    p_order_id BIGINT,
    p_currency TEXT,
    p_amount_minor BIGINT,
    p_account_a TEXT,
    p_amount_a BIGINT,
    p_account_b TEXT,
    p_amount_b BIGINT,
    p_ack TEXT,
    -- One row, not a set: a set-returning function would cost every call a tuplestore.
    OUT result TEXT,
    OUT status TEXT,
    OUT response_status INT,
    OUT response_body TEXT,
    OUT request_hash TEXT
) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_transfer_id BIGINT;
    v_record_id BIGINT;
    v_stage TEXT := 'acquire';
BEGIN
    -- The block is a subtransaction: 'declined' rolls back every write below.
    BEGIN
        -- The transfer id is drawn first so the record can be written finished, ack included,
        -- in its one INSERT (the general path inserts 'processing' and updates it).
        v_transfer_id := nextval('ledger_transfers_id_seq');
        INSERT INTO idempotency_keys
            (user_id, op, idem_key, request_hash, status, response_status, response_body, expires_at)
        VALUES (p_merchant_id, 'payment.callback', p_idem_key, p_request_hash, 'succeeded', 200,
                p_ack::JSONB || jsonb_build_object('transfer_id', v_transfer_id), p_expires_at)
        ON CONFLICT (user_id, op, idem_key) DO NOTHING
        RETURNING id, response_body::TEXT INTO v_record_id, response_body;
        IF v_record_id IS NULL THEN
            -- A concurrent delivery committed the key after the caller's read (this one may
            -- have waited for it).
            SELECT 'existing', k.status, k.response_status, k.response_body::TEXT, k.request_hash
            INTO result, status, response_status, response_body, request_hash
            FROM idempotency_keys k
            WHERE k.user_id = p_merchant_id AND k.op = 'payment.callback' AND k.idem_key = p_idem_key;
            IF NOT FOUND THEN
                RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'record vanished during acquire';
            END IF;
            RETURN;
        END IF;
        v_stage := 'apply';

        INSERT INTO callback_deliveries (merchant_id, provider, event_id, body)
        VALUES (p_merchant_id, p_provider, p_event_id, p_body)
        ON CONFLICT ON CONSTRAINT uq_callback_deliveries_event DO NOTHING;

        -- Order before payment, as on the general path: the two paths lock in one order.
        -- Each write carries the expected state in its WHERE; under READ COMMITTED a row
        -- changed concurrently is re-checked after its lock is granted.
        UPDATE orders SET status = 'paid'
        WHERE id = p_order_id AND user_id = p_merchant_id AND amount_minor = p_amount_minor
          AND currency = p_currency AND status = 'pending_payment';
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'order not as expected';
        END IF;

        INSERT INTO payments (merchant_id, provider, payment_id, order_id, status, amount_minor, currency)
        VALUES (p_merchant_id, p_provider, p_payment_id, p_order_id, 'succeeded', p_amount_minor, p_currency)
        ON CONFLICT (merchant_id, provider, payment_id) DO UPDATE
        SET order_id = EXCLUDED.order_id, status = EXCLUDED.status, amount_minor = EXCLUDED.amount_minor,
            currency = EXCLUDED.currency, updated_at = now()
        WHERE payments.status IN ('pending', 'failed');
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'payment already captured';
        END IF;

        INSERT INTO ledger_transfers (id, merchant_id, provider, event_id, kind, order_id, payment_id)
        VALUES (v_transfer_id, p_merchant_id, p_provider, p_event_id, 'payment', p_order_id, p_payment_id)
        ON CONFLICT ON CONSTRAINT uq_ledger_transfers_event DO NOTHING;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'event already posted';
        END IF;
        INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor)
        VALUES (v_transfer_id, p_merchant_id, p_account_a, p_currency, p_amount_a),
               (v_transfer_id, p_merchant_id, p_account_b, p_currency, p_amount_b);
    EXCEPTION
        WHEN SQLSTATE 'CGD01' OR deadlock_detected THEN
            -- A deadlock can only be with a batch (below) that locks other orders first.
            result := 'declined';
            response_body := NULL;
            RETURN;
        WHEN lock_not_available THEN
            -- Waiting for the key means another delivery of this event is in flight; waiting
            -- for the order or the payment sends the event down the general path, which
            -- waits with the full timeout and decides from what it then finds.
            result := CASE WHEN v_stage = 'acquire' THEN 'in_flight' ELSE 'declined' END;
            response_body := NULL;
            RETURN;
    END;
    result := 'applied';
    status := 'succeeded';
    response_status := 200;
    request_hash := p_request_hash;
END
$$;

-- Several concurrent captures in one statement: one round trip and one commit for all of them
-- (the gateway batches the captures that arrive while its connections are busy). Each item is
-- answered as above, in its own subtransaction, and its redelivery by the read first, so items
-- stay independent apart from sharing the commit. Every lock wait is short here
-- (p_lock_timeout): an item that would wait longer is answered 'in_flight' or 'declined' and the
-- gateway runs it alone with the full acquire timeout, so one waiting item cannot hold up the
-- others for long.
CREATE FUNCTION payment_capture_batch(
    p_op TEXT,
    p_lock_timeout TEXT,
    p_merchant_id BIGINT[],
    p_idem_key TEXT[],
    p_provider TEXT[],
    p_event_id TEXT[],
    p_request_hash TEXT[],
    p_expires_at TIMESTAMPTZ[],
    p_body BYTEA[],
    p_payment_id TEXT[],
    p_order_id BIGINT[],
    p_currency TEXT[],
    p_amount_minor BIGINT[],
    p_account_a TEXT[],
    p_amount_a BIGINT[],
    p_account_b TEXT[],
    p_amount_b BIGINT[],
    p_ack TEXT[]
) RETURNS TABLE (
    item INT,
    result TEXT,
    status TEXT,
    response_status INT,
    response_body TEXT,
    request_hash TEXT
) LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    -- Transaction-local: the session's own lock_timeout is back after this statement.
    PERFORM set_config('lock_timeout', p_lock_timeout, true);
    FOR i IN 1 .. coalesce(array_length(p_merchant_id, 1), 0) LOOP
        item := i;
        SELECT 'existing', k.status, k.response_status, k.response_body::TEXT, k.request_hash
        INTO result, status, response_status, response_body, request_hash
        FROM idempotency_keys k
        WHERE k.op = p_op AND k.user_id = p_merchant_id[i] AND k.idem_key = p_idem_key[i];
        IF NOT FOUND THEN
            SELECT c.result, c.status, c.response_status, c.response_body, c.request_hash
            INTO result, status, response_status, response_body, request_hash
            FROM payment_capture_first_delivery(
                p_merchant_id[i], p_idem_key[i], p_provider[i], p_event_id[i], p_request_hash[i],
                p_expires_at[i], p_body[i], p_payment_id[i], p_order_id[i], p_currency[i],
                p_amount_minor[i], p_account_a[i], p_amount_a[i], p_account_b[i], p_amount_b[i],
                p_ack[i]) c;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
