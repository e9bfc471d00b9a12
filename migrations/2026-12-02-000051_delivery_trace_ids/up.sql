-- Each delivery in the event log keeps the id of the trace it was received in (issue 42),
-- so the console and /admin/events link an event to its trace. NULL when tracing is off.
-- Adding a nullable column without a default rewrites nothing: a brief ACCESS EXCLUSIVE lock.
ALTER TABLE callback_deliveries ADD COLUMN trace_id text;

-- The writers take the trace id as a last parameter with a NULL default, so a gateway of the
-- previous release (which does not pass it) keeps calling them during a rolling upgrade. A
-- parameter cannot be added by CREATE OR REPLACE: each old signature is dropped first, in this
-- transaction, so no caller ever finds none.
DROP FUNCTION callback_record_deliveries(bigint[], text[], text[], bytea[], text[], text[], text[], integer[], bigint[]);
DROP FUNCTION callback_record_delivery(bigint, text, text, bytea, text, text, text, integer, bigint);
DROP FUNCTION callback_first_delivery(text, text, text, timestamp with time zone, bytea, bigint, text, text, text, bigint, text, text, text, bigint, text, bigint, bigint, text, text, text, bigint, text, bigint, text, text, text, text, boolean);
DROP FUNCTION callback_first_delivery_batch(text, text, text[], text[], timestamp with time zone[], bytea[], bigint[], text[], text[], text[], bigint[], text[], text[], text[], bigint[], text[], bigint[], bigint[], text[], text[], text[], bigint[], text[], bigint[], text[], text[], text[], text[], boolean[]);

CREATE OR REPLACE FUNCTION public.callback_record_deliveries(p_merchant_id bigint[], p_provider text[], p_event_id text[], p_body bytea[], p_event_type text[], p_outcome text[], p_reason text[], p_ack_status integer[], p_transfer_id bigint[], p_trace_id text[] DEFAULT NULL::text[]) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_count INT;
BEGIN
    INSERT INTO callback_deliveries
        (merchant_id, provider, event_id, body, event_type, outcome, reason, ack_status, transfer_id,
         trace_id)
    SELECT * FROM unnest(p_merchant_id, p_provider, p_event_id, p_body, p_event_type, p_outcome,
                         p_reason, p_ack_status, p_transfer_id,
                         -- unnest pads a shorter (or NULL) array with NULLs.
                         p_trace_id)
    ON CONFLICT ON CONSTRAINT uq_callback_deliveries_event DO NOTHING;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;

CREATE OR REPLACE FUNCTION public.callback_record_delivery(p_merchant_id bigint, p_provider text, p_event_id text, p_body bytea, p_event_type text, p_outcome text, p_reason text, p_ack_status integer, p_transfer_id bigint, p_trace_id text DEFAULT NULL::text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN callback_record_deliveries(ARRAY[p_merchant_id], ARRAY[p_provider], ARRAY[p_event_id],
        ARRAY[p_body], ARRAY[p_event_type], ARRAY[p_outcome], ARRAY[p_reason], ARRAY[p_ack_status],
        ARRAY[p_transfer_id], ARRAY[p_trace_id]) = 1;
END
$$;

CREATE OR REPLACE FUNCTION public.callback_first_delivery(p_op text, p_idem_key text, p_request_hash text, p_expires_at timestamp with time zone, p_body bytea, p_merchant_id bigint, p_provider text, p_event_id text, p_payment_id text, p_order_id bigint, p_order_from text, p_order_to text, p_payment_status text, p_amount_minor bigint, p_currency text, p_refunded_from bigint, p_refunded_to bigint, p_kind text, p_refund_id text, p_account_a text, p_amount_a bigint, p_account_b text, p_amount_b bigint, p_ack text, p_event_type text, p_outcome text, p_reason text, p_notify boolean DEFAULT false, p_trace_id text DEFAULT NULL::text, OUT result public.first_delivery_result, OUT status text, OUT response_status integer, OUT response_body text, OUT request_hash text) RETURNS record
    LANGUAGE plpgsql
    AS $$
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
            p_event_type, p_outcome, p_reason, 200, v_transfer_id, p_trace_id);
        v_transfer_id := payment_apply_strict(v_transfer_id, p_merchant_id, p_provider, p_event_id, p_payment_id,
            p_order_id, p_order_from, p_order_to, p_payment_status, p_amount_minor, p_currency,
            p_refunded_from, p_refunded_to, p_kind, p_refund_id,
            p_account_a, p_amount_a, p_account_b, p_amount_b, p_notify, p_reason);
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

CREATE OR REPLACE FUNCTION public.callback_first_delivery_batch(p_op text, p_lock_timeout text, p_idem_key text[], p_request_hash text[], p_expires_at timestamp with time zone[], p_body bytea[], p_merchant_id bigint[], p_provider text[], p_event_id text[], p_payment_id text[], p_order_id bigint[], p_order_from text[], p_order_to text[], p_payment_status text[], p_amount_minor bigint[], p_currency text[], p_refunded_from bigint[], p_refunded_to bigint[], p_kind text[], p_refund_id text[], p_account_a text[], p_amount_a bigint[], p_account_b text[], p_amount_b bigint[], p_ack text[], p_event_type text[], p_outcome text[], p_reason text[], p_notify boolean[] DEFAULT NULL::boolean[], p_trace_id text[] DEFAULT NULL::text[]) RETURNS TABLE(item integer, result public.first_delivery_result, status text, response_status integer, response_body text, request_hash text)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    v_item RECORD;
    v_new INT[] := '{}';
    v_n INT;
    v_i INT;
    v_independent BOOLEAN;
    v_written BOOLEAN := false;
    v_recorded INT;
    v_transfer_id BIGINT[];
    v_ack JSONB[];
    v_ack_status INT[];
    -- The new items' values, in the order of v_new.
    v_idem_key TEXT[]; v_request_hash TEXT[]; v_expires_at TIMESTAMPTZ[]; v_body BYTEA[];
    v_merchant_id BIGINT[]; v_provider TEXT[]; v_event_id TEXT[]; v_payment_id TEXT[];
    v_order_id BIGINT[]; v_order_from TEXT[]; v_order_to TEXT[];
    v_payment_status TEXT[]; v_amount_minor BIGINT[]; v_currency TEXT[];
    v_refunded_from BIGINT[]; v_refunded_to BIGINT[]; v_kind TEXT[]; v_refund_id TEXT[];
    v_account_a TEXT[]; v_amount_a BIGINT[]; v_account_b TEXT[]; v_amount_b BIGINT[];
    v_ack_text TEXT[]; v_event_type TEXT[]; v_outcome TEXT[]; v_reason TEXT[]; v_notify BOOLEAN[];
    v_trace_id TEXT[];
BEGIN
    -- Transaction-local: the session's own lock_timeout is back after this statement.
    PERFORM set_config('lock_timeout', p_lock_timeout, true);

    -- A key with a record is a redelivery: its answer is the record. One read per item: a
    -- lookup by the full key is cheap, and a join over the batch would leave the choice of index
    -- to statistics that lag behind a growing table.
    FOR v_i IN 1 .. coalesce(array_length(p_merchant_id, 1), 0) LOOP
        item := v_i;
        SELECT 'existing', r.status, r.response_status, r.response_body, r.request_hash
        INTO result, status, response_status, response_body, request_hash
        FROM idempotency_record(p_merchant_id[v_i], p_op, p_idem_key[v_i]) r;
        IF FOUND THEN
            RETURN NEXT;
        ELSE
            v_new := v_new || v_i;
        END IF;
    END LOOP;
    v_n := cardinality(v_new);
    IF v_n = 0 THEN
        RETURN;
    END IF;

    SELECT array_agg(p_idem_key[i] ORDER BY n), array_agg(p_request_hash[i] ORDER BY n),
           array_agg(p_expires_at[i] ORDER BY n), array_agg(p_body[i] ORDER BY n),
           array_agg(p_merchant_id[i] ORDER BY n), array_agg(p_provider[i] ORDER BY n),
           array_agg(p_event_id[i] ORDER BY n), array_agg(p_payment_id[i] ORDER BY n),
           array_agg(p_order_id[i] ORDER BY n), array_agg(p_order_from[i] ORDER BY n),
           array_agg(p_order_to[i] ORDER BY n), array_agg(p_payment_status[i] ORDER BY n),
           array_agg(p_amount_minor[i] ORDER BY n), array_agg(p_currency[i] ORDER BY n),
           array_agg(p_refunded_from[i] ORDER BY n), array_agg(p_refunded_to[i] ORDER BY n),
           array_agg(p_kind[i] ORDER BY n), array_agg(p_refund_id[i] ORDER BY n),
           array_agg(p_account_a[i] ORDER BY n), array_agg(p_amount_a[i] ORDER BY n),
           array_agg(p_account_b[i] ORDER BY n), array_agg(p_amount_b[i] ORDER BY n),
           array_agg(p_ack[i] ORDER BY n), array_agg(p_event_type[i] ORDER BY n),
           array_agg(p_outcome[i] ORDER BY n), array_agg(p_reason[i] ORDER BY n),
           array_agg(p_notify[i] ORDER BY n), array_agg(p_trace_id[i] ORDER BY n),
           array_agg(CASE WHEN p_kind[i] IS NOT NULL THEN nextval('ledger_transfers_id_seq') END ORDER BY n),
           -- Independent items: written together, they write what they would one by one.
           count(DISTINCT (p_merchant_id[i], p_idem_key[i])) = v_n
             AND count(DISTINCT (p_merchant_id[i], p_provider[i], p_event_id[i])) = v_n
             AND count(DISTINCT (p_merchant_id[i], p_provider[i], p_payment_id[i])) = v_n
             AND count(DISTINCT p_order_id[i]) = count(p_order_id[i])
    INTO v_idem_key, v_request_hash, v_expires_at, v_body, v_merchant_id, v_provider, v_event_id,
         v_payment_id, v_order_id, v_order_from, v_order_to, v_payment_status, v_amount_minor,
         v_currency, v_refunded_from, v_refunded_to, v_kind, v_refund_id, v_account_a, v_amount_a,
         v_account_b, v_amount_b, v_ack_text, v_event_type, v_outcome, v_reason, v_notify, v_trace_id,
         v_transfer_id, v_independent
    FROM unnest(v_new) WITH ORDINALITY AS t(i, n);

    IF v_independent THEN
        -- The transfer ids are drawn first so the records are claimed finished, each ack
        -- holding its id, in one write.
        v_ack := ARRAY(
            SELECT CASE WHEN t.id IS NULL THEN t.ack::JSONB
                        ELSE t.ack::JSONB || jsonb_build_object('transfer_id', t.id) END
            FROM unnest(v_ack_text, v_transfer_id) WITH ORDINALITY AS t(ack, id, n)
            ORDER BY t.n);
        v_ack_status := array_fill(200, ARRAY[v_n]);
        -- The block is a subtransaction: any failure undoes every item's writes, and the items
        -- run one by one below instead.
        BEGIN
            IF cardinality(idempotency_claim_all(v_merchant_id, p_op, v_idem_key, v_request_hash,
                    v_expires_at, 'succeeded', v_ack_status, v_ack)) <> v_n THEN
                RAISE EXCEPTION USING ERRCODE = 'CGD01', MESSAGE = 'a key was claimed meanwhile';
            END IF;
            -- Assignments, not PERFORM: plpgsql evaluates a lone call without starting a query.
            -- An event already recorded (its idempotency record expired) is not recorded again.
            v_recorded := callback_record_deliveries(v_merchant_id, v_provider, v_event_id, v_body,
                v_event_type, v_outcome, v_reason, v_ack_status, v_transfer_id, v_trace_id);
            v_transfer_id := payment_apply_all(v_transfer_id, v_merchant_id, v_provider, v_event_id,
                v_payment_id, v_order_id, v_order_from, v_order_to, v_payment_status,
                v_amount_minor, v_currency, v_refunded_from, v_refunded_to, v_kind, v_refund_id,
                v_account_a, v_amount_a, v_account_b, v_amount_b,
                p_notify => v_notify, p_reason => v_reason);
            v_written := true;
        EXCEPTION
            WHEN SQLSTATE 'CGD01' OR SQLSTATE 'CGD02' OR lock_not_available OR deadlock_detected
                 OR cardinality_violation THEN
                v_written := false;
        END;
    END IF;

    IF v_written THEN
        FOR j IN 1 .. v_n LOOP
            item := v_new[j];
            result := 'finished';
            status := 'succeeded';
            response_status := 200;
            response_body := v_ack[j]::TEXT;
            request_hash := v_request_hash[j];
            RETURN NEXT;
        END LOOP;
        RETURN;
    END IF;

    -- One by one, each in its own subtransaction, answered on its own.
    FOREACH v_i IN ARRAY v_new LOOP
        item := v_i;
        SELECT 'existing', r.status, r.response_status, r.response_body, r.request_hash
        INTO result, status, response_status, response_body, request_hash
        FROM idempotency_record(p_merchant_id[v_i], p_op, p_idem_key[v_i]) r;
        IF NOT FOUND THEN
            v_item := callback_first_delivery(p_op, p_idem_key[v_i], p_request_hash[v_i], p_expires_at[v_i],
                p_body[v_i], p_merchant_id[v_i], p_provider[v_i], p_event_id[v_i], p_payment_id[v_i],
                p_order_id[v_i], p_order_from[v_i], p_order_to[v_i], p_payment_status[v_i],
                p_amount_minor[v_i], p_currency[v_i], p_refunded_from[v_i], p_refunded_to[v_i],
                p_kind[v_i], p_refund_id[v_i], p_account_a[v_i], p_amount_a[v_i], p_account_b[v_i],
                p_amount_b[v_i], p_ack[v_i], p_event_type[v_i], p_outcome[v_i], p_reason[v_i],
                coalesce(p_notify[v_i], false), p_trace_id[v_i]);
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

