-- Back to migration 000033's routines (their bodies as PostgreSQL kept them): 000032's
-- payment_apply_all and payment_apply (disputes), the others as 000028 left them; without the
-- notifications' parameters, tables and writers.
DROP FUNCTION callback_first_delivery_batch(TEXT, TEXT, TEXT[], TEXT[], TIMESTAMPTZ[], BYTEA[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[], TEXT[], TEXT[], TEXT[], TEXT[], BOOLEAN[]);
DROP FUNCTION callback_first_delivery(TEXT, TEXT, TEXT, TIMESTAMPTZ, BYTEA, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, TEXT, TEXT, TEXT, TEXT, BOOLEAN);
DROP FUNCTION payment_apply(BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, TEXT, BIGINT, BIGINT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, TEXT, BIGINT, BIGINT, BIGINT, TEXT, TEXT, BOOLEAN, TEXT);
DROP FUNCTION payment_apply_strict(BIGINT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, BOOLEAN, TEXT);
DROP FUNCTION payment_apply_all(BIGINT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[], TEXT[], BIGINT[], BIGINT[], TEXT[], TEXT[], BIGINT[], BOOLEAN[], TEXT[]);
DROP FUNCTION refund_request_fail(BIGINT, TEXT, TEXT, BOOLEAN);
DROP FUNCTION refund_request_accepted(BIGINT, TEXT, BOOLEAN);
DROP FUNCTION refund_requests_settle(BIGINT, TEXT, TEXT, TEXT, BIGINT, BOOLEAN, TEXT, BIGINT);
DROP FUNCTION refund_requests_stage_notifications(BIGINT[], TEXT, BIGINT);
DROP FUNCTION notifications_stage(BIGINT[], TEXT[], BIGINT[], TEXT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[], TEXT[], TEXT[]);
DROP TABLE notification_endpoints;
DROP TABLE merchant_notifications;

CREATE FUNCTION payment_apply_all(p_transfer_id bigint[], p_merchant_id bigint[], p_provider text[], p_event_id text[], p_payment_id text[], p_order_id bigint[], p_order_from text[], p_order_to text[], p_payment_status text[], p_amount_minor bigint[], p_currency text[], p_refunded_from bigint[], p_refunded_to bigint[], p_kind text[], p_refund_id text[], p_account_a text[], p_amount_a bigint[], p_account_b text[], p_amount_b bigint[], p_payment_from text[] DEFAULT NULL::text[], p_disputed_from bigint[] DEFAULT NULL::bigint[], p_disputed_to bigint[] DEFAULT NULL::bigint[], p_dispute_id text[] DEFAULT NULL::text[], p_account_c text[] DEFAULT NULL::text[], p_amount_c bigint[] DEFAULT NULL::bigint[])
 RETURNS bigint[]
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
AS $function$
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
$function$
;

CREATE FUNCTION payment_apply_strict(p_transfer_id bigint, p_merchant_id bigint, p_provider text, p_event_id text, p_payment_id text, p_order_id bigint, p_order_from text, p_order_to text, p_payment_status text, p_amount_minor bigint, p_currency text, p_refunded_from bigint, p_refunded_to bigint, p_kind text, p_refund_id text, p_account_a text, p_amount_a bigint, p_account_b text, p_amount_b bigint)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
BEGIN
    RETURN (payment_apply_all(ARRAY[p_transfer_id], ARRAY[p_merchant_id], ARRAY[p_provider],
        ARRAY[p_event_id], ARRAY[p_payment_id], ARRAY[p_order_id], ARRAY[p_order_from],
        ARRAY[p_order_to], ARRAY[p_payment_status], ARRAY[p_amount_minor], ARRAY[p_currency],
        ARRAY[p_refunded_from], ARRAY[p_refunded_to], ARRAY[p_kind], ARRAY[p_refund_id],
        ARRAY[p_account_a], ARRAY[p_amount_a], ARRAY[p_account_b], ARRAY[p_amount_b]))[1];
END
$function$
;

CREATE FUNCTION payment_apply(p_merchant_id bigint, p_provider text, p_event_id text, p_payment_id text, p_order_id bigint, p_order_from text, p_order_to text, p_payment_status text, p_amount_minor bigint, p_currency text, p_refunded_from bigint, p_refunded_to bigint, p_kind text, p_refund_id text, p_account_a text, p_amount_a bigint, p_account_b text, p_amount_b bigint, p_payment_from text, p_disputed_from bigint, p_disputed_to bigint, p_dispute_id text, p_account_c text, p_amount_c bigint, p_dispute_funds_from text, p_dispute_outcome_from text, p_dispute_funds_to text, p_dispute_outcome_to text, p_dispute_withdrawn bigint, p_dispute_fee bigint, p_dispute_reinstated bigint, p_dispute_account text, p_dispute_note text, OUT result payment_apply_result, OUT transfer_id bigint)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
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
$function$
;

CREATE FUNCTION callback_first_delivery(p_op text, p_idem_key text, p_request_hash text, p_expires_at timestamp with time zone, p_body bytea, p_merchant_id bigint, p_provider text, p_event_id text, p_payment_id text, p_order_id bigint, p_order_from text, p_order_to text, p_payment_status text, p_amount_minor bigint, p_currency text, p_refunded_from bigint, p_refunded_to bigint, p_kind text, p_refund_id text, p_account_a text, p_amount_a bigint, p_account_b text, p_amount_b bigint, p_ack text, p_event_type text, p_outcome text, p_reason text, OUT result first_delivery_result, OUT status text, OUT response_status integer, OUT response_body text, OUT request_hash text)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
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
$function$
;

CREATE FUNCTION callback_first_delivery_batch(p_op text, p_lock_timeout text, p_idem_key text[], p_request_hash text[], p_expires_at timestamp with time zone[], p_body bytea[], p_merchant_id bigint[], p_provider text[], p_event_id text[], p_payment_id text[], p_order_id bigint[], p_order_from text[], p_order_to text[], p_payment_status text[], p_amount_minor bigint[], p_currency text[], p_refunded_from bigint[], p_refunded_to bigint[], p_kind text[], p_refund_id text[], p_account_a text[], p_amount_a bigint[], p_account_b text[], p_amount_b bigint[], p_ack text[], p_event_type text[], p_outcome text[], p_reason text[])
 RETURNS TABLE(item integer, result first_delivery_result, status text, response_status integer, response_body text, request_hash text)
 LANGUAGE plpgsql
AS $function$
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
    v_ack_text TEXT[]; v_event_type TEXT[]; v_outcome TEXT[]; v_reason TEXT[];
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
           array_agg(CASE WHEN p_kind[i] IS NOT NULL THEN nextval('ledger_transfers_id_seq') END ORDER BY n),
           -- Independent items: written together, they write what they would one by one.
           count(DISTINCT (p_merchant_id[i], p_idem_key[i])) = v_n
             AND count(DISTINCT (p_merchant_id[i], p_provider[i], p_event_id[i])) = v_n
             AND count(DISTINCT (p_merchant_id[i], p_provider[i], p_payment_id[i])) = v_n
             AND count(DISTINCT p_order_id[i]) = count(p_order_id[i])
    INTO v_idem_key, v_request_hash, v_expires_at, v_body, v_merchant_id, v_provider, v_event_id,
         v_payment_id, v_order_id, v_order_from, v_order_to, v_payment_status, v_amount_minor,
         v_currency, v_refunded_from, v_refunded_to, v_kind, v_refund_id, v_account_a, v_amount_a,
         v_account_b, v_amount_b, v_ack_text, v_event_type, v_outcome, v_reason, v_transfer_id,
         v_independent
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
                v_event_type, v_outcome, v_reason, v_ack_status, v_transfer_id);
            v_transfer_id := payment_apply_all(v_transfer_id, v_merchant_id, v_provider, v_event_id,
                v_payment_id, v_order_id, v_order_from, v_order_to, v_payment_status,
                v_amount_minor, v_currency, v_refunded_from, v_refunded_to, v_kind, v_refund_id,
                v_account_a, v_amount_a, v_account_b, v_amount_b);
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
                p_amount_b[v_i], p_ack[v_i], p_event_type[v_i], p_outcome[v_i], p_reason[v_i]);
            result := v_item.result;
            status := v_item.status;
            response_status := v_item.response_status;
            response_body := v_item.response_body;
            request_hash := v_item.request_hash;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$function$
;

CREATE FUNCTION refund_requests_settle(p_merchant_id bigint, p_provider text, p_payment_id text, p_refund_id text, p_refunded_total bigint)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
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
$function$
;

CREATE FUNCTION refund_request_accepted(p_request_id bigint, p_refund_id text)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
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
$function$
;
