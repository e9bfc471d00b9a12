-- One write path. Rust decides (src/payments/state.rs plans an event against the state it read,
-- or, on the one-statement path, against the state a capture expects); each write below exists
-- once, carries its guard in its WHERE, and is used by the general path, the one-statement
-- capture and the batched capture alike. A guard that finds another state raises, so nothing
-- of a stale plan is written; the caller decides again from what it then reads.

-- Money reported captured that cannot be applied to its order is held in unapplied funds: the
-- payment is stored 'held', possibly without a known order, and so is its transfer.
ALTER TABLE payments ALTER COLUMN order_id DROP NOT NULL;
ALTER TABLE payments DROP CONSTRAINT payments_status_check;
ALTER TABLE payments ADD CONSTRAINT payments_status_check
    CHECK (status IN ('pending', 'succeeded', 'failed', 'partially_refunded', 'refunded', 'held'));
ALTER TABLE ledger_transfers ALTER COLUMN order_id DROP NOT NULL;

-- A provider's refund id posts at most once per (merchant, provider), whatever event carries it.
ALTER TABLE ledger_transfers ADD COLUMN refund_id TEXT;
CREATE UNIQUE INDEX uq_ledger_transfers_refund ON ledger_transfers (merchant_id, provider, refund_id)
    WHERE refund_id IS NOT NULL;

-- What applying an effect found; src/payments/apply.rs maps it to a Rust enum.
CREATE TYPE payment_apply_result AS ENUM ('applied', 'state_changed', 'already_posted');
-- What a one-statement first delivery did; src/payments/capture.rs maps it to a Rust enum.
CREATE TYPE first_delivery_result AS ENUM ('finished', 'existing', 'in_flight', 'declined');

-- The one read of a key's record. A plain SQL function, so the planner inlines it: callers pay
-- nothing for sharing it (the replay path reads through it on every redelivery).
CREATE FUNCTION idempotency_record(p_user_id BIGINT, p_op TEXT, p_idem_key TEXT)
RETURNS TABLE (status TEXT, response_status INT, response_body TEXT, request_hash TEXT)
LANGUAGE sql STABLE AS $$
    SELECT k.status, k.response_status, k.response_body::TEXT, k.request_hash
    FROM idempotency_keys k
    WHERE k.user_id = p_user_id AND k.op = p_op AND k.idem_key = p_idem_key
$$;

-- The one claim of a key: the record id, or NULL when the key exists (a concurrent claim of
-- the same key waits here for the first transaction, bounded by lock_timeout). The general path
-- claims 'processing' and finishes the record later in its transaction; the one-statement path,
-- which knows its answer before it writes, claims the record already finished (one write
-- instead of an insert and an update).
CREATE FUNCTION idempotency_claim(
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

-- Acquire for the general path, now built from the claim and the read above.
CREATE OR REPLACE FUNCTION idempotency_acquire(
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
            v_id := idempotency_claim(p_user_id, p_op, p_idem_key, p_request_hash, p_expires_at);
        EXCEPTION WHEN lock_not_available THEN
            RETURN QUERY SELECT NULL::BIGINT, false, true, NULL::TEXT, NULL::INT, NULL::TEXT, NULL::TEXT;
            RETURN;
        END;
        IF v_id IS NOT NULL THEN
            RETURN QUERY SELECT v_id, true, false, 'processing'::TEXT, NULL::INT, NULL::TEXT, p_request_hash;
            RETURN;
        END IF;
        -- The read is its own statement, so it sees a record committed while the claim waited.
        RETURN QUERY
            SELECT NULL::BIGINT, false, false, r.status, r.response_status, r.response_body, r.request_hash
            FROM idempotency_record(p_user_id, p_op, p_idem_key) r;
        IF FOUND THEN
            RETURN;
        END IF;
        -- The record vanished in between (the cleaner removed an expired one): claim again.
    END LOOP;
    RAISE EXCEPTION 'idempotency record % % % vanished three times during acquire', p_user_id, p_op, p_idem_key;
END
$$;

-- The one write of callback_deliveries: the raw verified body of an event's first delivery.
-- Returns whether this call stored the body (a later first delivery of an event whose record
-- expired keeps the original).
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

-- The one write of an order's status, of payments, and of ledger_transfers with their
-- ledger_entries: a plan's effect, all or nothing. Each statement carries its guard:
--   * the order moves only from the status the plan saw (a capture also checks the amount and
--     currency it pays); p_order_to NULL leaves it alone;
--   * a capture, hold or failure (p_refunded_to NULL) creates the payment or moves it from
--     pending or failed, never from a captured state: one provider payment moves money once; a
--     refund moves refunded_minor from the total the plan read;
--   * the transfer (p_kind NULL: none) with its two entries, derived in Rust from one amount so
--     they sum to zero; an event id or refund id posted before posts nothing.
-- Locks are taken order first, then payment, on every path. Raises CGD01 when a row is not in
-- the planned state and CGD02 when the transfer was posted before; the caller's subtransaction
-- then undoes what was written. Returns the transfer id (p_transfer_id when the caller drew it
-- already, to put it in an ack written before the transfer).
CREATE FUNCTION payment_apply_strict(
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

-- The general path's call: the effect in a subtransaction, answering what it found as a typed
-- result ('applied' with the transfer id, or 'state_changed' / 'already_posted' with nothing
-- written), so the caller can decide again.
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

-- The first delivery of an event whose plan Rust made against the state it expects (a capture
-- of a pending order), in one statement: claim the key, record the body, apply the effect and
-- finish the record with the ack, through the same routines as the general path. Any other
-- state rolls all of it back and answers 'declined'; the general path then decides from what it
-- reads. A record committed meanwhile is 'existing'; a key held past lock_timeout 'in_flight'.
-- Callers call it only after their own read found no record (COALESCE in one statement).
DROP FUNCTION payment_capture_batch(TEXT, TEXT, BIGINT[], TEXT[], TEXT[], TEXT[], TEXT[], TIMESTAMPTZ[], BYTEA[], TEXT[], BIGINT[], TEXT[], BIGINT[], TEXT[], BIGINT[], TEXT[], BIGINT[], TEXT[]);
DROP FUNCTION payment_capture_first_delivery(BIGINT, TEXT, TEXT, TEXT, TEXT, TIMESTAMPTZ, BYTEA, TEXT, BIGINT, TEXT, BIGINT, TEXT, BIGINT, TEXT, BIGINT, TEXT);
DROP FUNCTION ledger_post_transfer(BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT);
DROP FUNCTION payments_upsert(BIGINT, TEXT, TEXT, BIGINT, TEXT, BIGINT, TEXT);
DROP FUNCTION payments_record_refund(BIGINT, TEXT, TEXT, BIGINT, TEXT);
DROP FUNCTION orders_set_status(BIGINT, TEXT);

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

-- Several concurrent first deliveries in one statement and one commit. Each item is answered as
-- above, in its own subtransaction, and its redelivery by the read first. Every lock wait is
-- short here (p_lock_timeout): an item that would wait longer is answered 'in_flight' or
-- 'declined' and the gateway runs it alone with the full acquire timeout.
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
