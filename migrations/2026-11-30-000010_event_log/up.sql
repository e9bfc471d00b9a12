-- The event log: each delivery's outcome kept with its body, permanently (idempotency records
-- expire; this row does not). Written by the ONE writer, callback_record_delivery, at the
-- point both paths know the outcome: inside callback_first_delivery on the one-statement path,
-- from src/payments/callback.rs in the same transaction on the general path.
-- IF NOT EXISTS: an operator may have run this statement ahead (docs/console.md, "Upgrading").
ALTER TABLE callback_deliveries
    ADD COLUMN IF NOT EXISTS event_type TEXT,
    ADD COLUMN IF NOT EXISTS outcome TEXT CHECK (outcome IN ('applied', 'held', 'ignored', 'rejected')),
    ADD COLUMN IF NOT EXISTS reason TEXT,
    ADD COLUMN IF NOT EXISTS ack_status INT,
    ADD COLUMN IF NOT EXISTS transfer_id BIGINT;

-- Rows recorded before this migration: their outcome from the idempotency record, while it
-- still exists (an expired one leaves the outcome NULL: recorded before the event log).
UPDATE callback_deliveries d
SET outcome = k.response_body->>'outcome',
    reason = k.response_body->>'reason',
    ack_status = k.response_status,
    transfer_id = (k.response_body->>'transfer_id')::BIGINT
FROM idempotency_keys k
WHERE k.user_id = d.merchant_id AND k.op = 'payment.callback'
  AND k.idem_key = d.provider || ':' || d.event_id
  AND k.status <> 'processing'
  AND k.response_body->>'outcome' IN ('applied', 'held', 'ignored', 'rejected');

-- Newest first, keyset on (received_at, id), one index per filter of GET /admin/events, so no
-- page reads more rows than it shows (plus the rows its other filters skip). The provider
-- filter uses idx_callback_deliveries_export (provider, received_at, id) from 000003.
-- This migration runs in one transaction (it swaps the write routines atomically), so these
-- builds hold callback_deliveries' lock until it commits. On a large table, build them first
-- with CREATE INDEX CONCURRENTLY under the same names (docs/console.md, "Upgrading"); IF NOT
-- EXISTS then skips them here. Check such an index is valid: a failed concurrent build leaves
-- an INVALID index that would be skipped too.
CREATE INDEX IF NOT EXISTS idx_callback_deliveries_received ON callback_deliveries (received_at, id);
CREATE INDEX IF NOT EXISTS idx_callback_deliveries_merchant ON callback_deliveries (merchant_id, received_at, id);
CREATE INDEX IF NOT EXISTS idx_callback_deliveries_type ON callback_deliveries (event_type, received_at, id);
CREATE INDEX IF NOT EXISTS idx_callback_deliveries_event_id ON callback_deliveries (event_id);
-- Only the rare outcomes: `applied` is the bulk, and the time index finds its rows at once.
-- This one also serves GET /admin/attention (held, rejected).
CREATE INDEX IF NOT EXISTS idx_callback_deliveries_attention ON callback_deliveries (outcome, received_at, id)
    WHERE outcome <> 'applied';

-- The ONE writer, now with the outcome. A new parameter list is a new function in PostgreSQL,
-- so the old one goes (plpgsql callers resolve it by name at run time).
DROP FUNCTION callback_record_delivery(BIGINT, TEXT, TEXT, BYTEA);
CREATE FUNCTION callback_record_delivery(
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

-- As in 000007, with the event's type and its outcome (as Rust planned it) as parameters. The
-- transfer id is drawn before anything is written, so the delivery is recorded with it.
DROP FUNCTION callback_first_delivery_batch(TEXT, TEXT, TEXT[], TEXT[], TIMESTAMPTZ[], BYTEA[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[], TEXT[]);
DROP FUNCTION callback_first_delivery(TEXT, TEXT, TEXT, TIMESTAMPTZ, BYTEA, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, TEXT);

CREATE FUNCTION callback_first_delivery(
    p_op TEXT, p_idem_key TEXT, p_request_hash TEXT, p_expires_at TIMESTAMPTZ, p_body BYTEA,
    p_merchant_id BIGINT, p_provider TEXT, p_event_id TEXT, p_payment_id TEXT,
    p_order_id BIGINT, p_order_from TEXT, p_order_to TEXT,
    p_payment_status TEXT, p_amount_minor BIGINT, p_currency TEXT,
    p_refunded_from BIGINT, p_refunded_to BIGINT,
    p_kind TEXT, p_refund_id TEXT,
    p_account_a TEXT, p_amount_a BIGINT, p_account_b TEXT, p_amount_b BIGINT,
    p_ack TEXT, p_event_type TEXT, p_outcome TEXT, p_reason TEXT,
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
        v_recorded := callback_record_delivery(p_merchant_id, p_provider, p_event_id, p_body,
            p_event_type, p_outcome, p_reason, 200, v_transfer_id);
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

CREATE FUNCTION callback_first_delivery_batch(
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
