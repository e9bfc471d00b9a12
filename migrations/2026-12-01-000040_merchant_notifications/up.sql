-- Merchant notifications (docs/notifications.md): every change of an order's status, every
-- held payment and every end of a merchant refund request stages one row here, in the
-- transaction that makes the change, written by the routine that makes it. A sender inside
-- `serve` drains the table (FOR UPDATE SKIP LOCKED) and posts each row to the merchant's
-- endpoint, signed as Standard Webhooks, until it answers 2xx.
--
-- Whether a merchant wants notifications is the gateway's configuration ([[merchants]] with a
-- notify_url), so it reaches SQL as a parameter of each write (p_notify), decided in Rust per
-- item: nothing to read on the hot path, and nothing staged at all (one test of a parameter)
-- when no item's merchant has an endpoint. Every new parameter is last and has a default, so a
-- gateway of the previous version keeps working against this schema during a rolling deploy
-- (it stages nothing, as its configuration knows no endpoints).

CREATE TABLE merchant_notifications (
    id BIGSERIAL PRIMARY KEY,
    merchant_id BIGINT NOT NULL,
    -- The notification's type: order.<new status>, payment.held, refund_request.<status>.
    kind TEXT NOT NULL,
    -- Notifications of one order are delivered in the order they were staged (by id).
    order_id BIGINT,
    -- What the body says (its `data`), fixed when staged so every attempt sends the same bytes.
    object_status TEXT NOT NULL,
    reference TEXT,
    amount_minor BIGINT,
    currency TEXT,
    provider TEXT,
    event_id TEXT,
    transfer_id BIGINT,
    payment_id TEXT,
    refund_request_id BIGINT,
    -- The reason of a held payment, or the message of a failed refund request.
    detail TEXT,
    -- The provider's dispute id of a dispute's change (order.disputed, order.charged_back, the
    -- order's way back), so the merchant can answer that dispute at its provider.
    dispute_id TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Delivery: pending until a 2xx (delivered) or the last attempt of the schedule (failed).
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts INT NOT NULL DEFAULT 0,
    -- When the next attempt is due. A claim pushes it forward by the claim's lease, so a row
    -- whose sender died is due again once the lease has passed.
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_attempt_at TIMESTAMPTZ,
    last_status INT,
    last_error TEXT,
    delivered_at TIMESTAMPTZ
);

-- The sender's claim: a merchant's due rows, oldest due first.
CREATE INDEX idx_merchant_notifications_due ON merchant_notifications (merchant_id, next_attempt_at, id)
    WHERE status = 'pending';
-- Per-order order: a row waits while an earlier row of its order is pending.
CREATE INDEX idx_merchant_notifications_order ON merchant_notifications (order_id, id)
    WHERE status = 'pending' AND order_id IS NOT NULL;
-- A merchant's notifications, newest first (admin list, redelivery of a time range).
CREATE INDEX idx_merchant_notifications_merchant ON merchant_notifications (merchant_id, id);
-- The retention pass: delivered rows, oldest delivery first.
CREATE INDEX idx_merchant_notifications_retention ON merchant_notifications (delivered_at)
    WHERE status = 'delivered';
-- The console's failing and failed notifications. Empty when a row is staged, so staging
-- never writes it.
CREATE INDEX idx_merchant_notifications_attention ON merchant_notifications (id)
    WHERE status = 'failed' OR (status = 'pending' AND last_error IS NOT NULL);

-- Each merchant's endpoint as the senders found it. A row appears with the first attempt's
-- result; only the senders and the admin's enable write it.
CREATE TABLE notification_endpoints (
    merchant_id BIGINT PRIMARY KEY,
    -- Set: nothing is sent to this merchant until an admin enables it again.
    disabled_at TIMESTAMPTZ,
    -- gone (the endpoint answered 410) or no_success (failing for 5 days).
    disabled_reason TEXT,
    -- The first failed attempt since the last success.
    failing_since TIMESTAMPTZ,
    last_success_at TIMESTAMPTZ,
    last_failure_at TIMESTAMPTZ,
    last_error TEXT
);

-- The one write of merchant_notifications' rows: stages the items whose kind is not NULL, in
-- item order, with the order's reference as it is now. Returns how many it staged.
-- p_dispute_id may be NULL (no item is a dispute's): unnest pads it with NULLs.
CREATE FUNCTION notifications_stage(
    p_merchant_id BIGINT[], p_kind TEXT[], p_order_id BIGINT[], p_object_status TEXT[],
    p_amount_minor BIGINT[], p_currency TEXT[], p_provider TEXT[], p_event_id TEXT[],
    p_transfer_id BIGINT[], p_payment_id TEXT[], p_refund_request_id BIGINT[], p_detail TEXT[],
    p_dispute_id TEXT[] DEFAULT NULL
) RETURNS INT LANGUAGE plpgsql
-- The reference is read by the order's key; no plan may scan orders for it (a plpgsql plan
-- made while the table was young would keep the scan for the session). One generic plan: left
-- to choose, PostgreSQL planned this statement again on every call (its estimate of a
-- parameter array's length makes the generic plan look dearer than a custom one), about
-- 490,000 instructions a staged capture (callgrind, docs/notifications.md).
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_count INT;
BEGIN
    INSERT INTO merchant_notifications
        (merchant_id, kind, order_id, object_status, reference, amount_minor, currency, provider,
         event_id, transfer_id, payment_id, refund_request_id, detail, dispute_id)
    SELECT t.merchant_id, t.kind, t.order_id, t.object_status, o.reference, t.amount_minor,
           t.currency, t.provider, t.event_id, t.transfer_id, t.payment_id, t.refund_request_id,
           t.detail, t.dispute_id
    FROM unnest(p_merchant_id, p_kind, p_order_id, p_object_status, p_amount_minor, p_currency,
                p_provider, p_event_id, p_transfer_id, p_payment_id, p_refund_request_id, p_detail,
                p_dispute_id)
         WITH ORDINALITY AS t(merchant_id, kind, order_id, object_status, amount_minor, currency,
                              provider, event_id, transfer_id, payment_id, refund_request_id,
                              detail, dispute_id, n)
    LEFT JOIN orders o ON o.id = t.order_id AND o.user_id = t.merchant_id
    WHERE t.kind IS NOT NULL
    ORDER BY t.n;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;

-- The notifications of refund requests that just ended (succeeded or failed), in id order;
-- `p_event_id` and `p_transfer_id` name the refund's posting when one settled them.
CREATE FUNCTION refund_requests_stage_notifications(
    p_request_id BIGINT[], p_event_id TEXT, p_transfer_id BIGINT
) RETURNS INT LANGUAGE plpgsql AS $$
DECLARE
    v_merchant_id BIGINT[]; v_kind TEXT[]; v_order_id BIGINT[]; v_status TEXT[];
    v_amount_minor BIGINT[]; v_currency TEXT[]; v_provider TEXT[]; v_payment_id TEXT[];
    v_id BIGINT[]; v_detail TEXT[];
BEGIN
    SELECT array_agg(r.merchant_id ORDER BY r.id), array_agg('refund_request.' || r.status ORDER BY r.id),
           array_agg(r.order_id ORDER BY r.id), array_agg(r.status ORDER BY r.id),
           array_agg(r.amount_minor ORDER BY r.id), array_agg(r.currency ORDER BY r.id),
           array_agg(r.provider ORDER BY r.id), array_agg(r.payment_id ORDER BY r.id),
           array_agg(r.id ORDER BY r.id), array_agg(r.failure_message ORDER BY r.id)
    INTO v_merchant_id, v_kind, v_order_id, v_status, v_amount_minor, v_currency, v_provider,
         v_payment_id, v_id, v_detail
    FROM refund_requests r
    WHERE r.id = ANY(p_request_id) AND r.status IN ('succeeded', 'failed');
    IF v_id IS NULL THEN
        RETURN 0;
    END IF;
    RETURN notifications_stage(v_merchant_id, v_kind, v_order_id, v_status, v_amount_minor,
        v_currency, v_provider, array_fill(p_event_id, ARRAY[cardinality(v_id)]),
        array_fill(p_transfer_id, ARRAY[cardinality(v_id)]), v_payment_id, v_id, v_detail);
END
$$;

-- Settling refund requests (migration 000009) now also stages `refund_request.succeeded` for
-- each request it settles, when the merchant has an endpoint (p_notify).
DROP FUNCTION refund_requests_settle(BIGINT, TEXT, TEXT, TEXT, BIGINT);
CREATE FUNCTION refund_requests_settle(
    p_merchant_id BIGINT, p_provider TEXT, p_payment_id TEXT, p_refund_id TEXT,
    p_refunded_total BIGINT,
    p_notify BOOLEAN DEFAULT false, p_event_id TEXT DEFAULT NULL, p_transfer_id BIGINT DEFAULT NULL
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_covered BIGINT;
    v_request RECORD;
    v_settled BIGINT[] := '{}';
    v_staged INT;
BEGIN
    IF p_refund_id IS NOT NULL THEN
        WITH settled AS (
            UPDATE refund_requests SET status = 'succeeded', updated_at = now()
            WHERE merchant_id = p_merchant_id AND provider = p_provider
              AND provider_refund_id = p_refund_id AND status = 'pending'
            RETURNING id)
        SELECT coalesce(array_agg(id), '{}') INTO v_settled FROM settled;
    ELSIF p_refunded_total IS NOT NULL THEN
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
            v_settled := v_settled || v_request.id;
        END LOOP;
    END IF;
    IF p_notify AND cardinality(v_settled) > 0 THEN
        v_staged := refund_requests_stage_notifications(v_settled, p_event_id, p_transfer_id);
    END IF;
END
$$;

-- Phase 3's write when the provider accepted (migration 000009), passing the merchant's
-- p_notify on to the settling of a request whose refund the ledger already holds.
DROP FUNCTION refund_request_accepted(BIGINT, TEXT);
CREATE FUNCTION refund_request_accepted(
    p_request_id BIGINT, p_refund_id TEXT, p_notify BOOLEAN DEFAULT false
) RETURNS TEXT LANGUAGE plpgsql AS $$
DECLARE
    v_request refund_requests%ROWTYPE;
    v_refunded BIGINT;
    v_transfer_id BIGINT;
    v_event_id TEXT;
BEGIN
    UPDATE refund_requests SET status = 'pending', provider_refund_id = p_refund_id, updated_at = now()
    WHERE id = p_request_id AND status = 'processing'
    RETURNING * INTO v_request;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT t.id, t.event_id INTO v_transfer_id, v_event_id FROM ledger_transfers t
    WHERE t.merchant_id = v_request.merchant_id AND t.provider = v_request.provider
      AND t.refund_id = p_refund_id;
    IF FOUND THEN
        PERFORM refund_requests_settle(v_request.merchant_id, v_request.provider,
            v_request.payment_id, p_refund_id, NULL, p_notify, v_event_id, v_transfer_id);
    ELSIF EXISTS (SELECT 1 FROM ledger_transfers t
                  WHERE t.merchant_id = v_request.merchant_id AND t.provider = v_request.provider
                    AND t.payment_id = v_request.payment_id AND t.kind = 'refund'
                    AND t.refund_id IS NULL) THEN
        -- This payment's refunds post without ids (cumulative): the total decides.
        SELECT p.refunded_minor INTO v_refunded FROM payments p
        WHERE p.merchant_id = v_request.merchant_id AND p.provider = v_request.provider
          AND p.payment_id = v_request.payment_id;
        PERFORM refund_requests_settle(v_request.merchant_id, v_request.provider,
            v_request.payment_id, NULL, v_refunded, p_notify);
    END IF;
    SELECT status INTO v_request.status FROM refund_requests WHERE id = p_request_id;
    RETURN v_request.status;
END
$$;

-- A refund request fails (the provider declined it, or an operator withdrew it): from `p_from`
-- to failed with its message, and `refund_request.failed` staged when the merchant has an
-- endpoint. False when the request was not `p_from`.
CREATE FUNCTION refund_request_fail(
    p_request_id BIGINT, p_from TEXT, p_message TEXT, p_notify BOOLEAN DEFAULT false
) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
DECLARE
    v_staged INT;
BEGIN
    UPDATE refund_requests SET status = 'failed', failure_message = p_message, updated_at = now()
    WHERE id = p_request_id AND status = p_from;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF p_notify THEN
        v_staged := refund_requests_stage_notifications(ARRAY[p_request_id], NULL, NULL);
    END IF;
    RETURN true;
END
$$;

-- The payment writer (migrations 000021, 000032) stages, for each item whose merchant has an
-- endpoint (p_notify), `order.<new status>` when the order moved (a capture, a refund, a
-- dispute's withdrawal, loss or reinstatement: `order.disputed`, `order.charged_back`, and the
-- status it returns to) and `payment.held` when a capture was held (p_reason: why), after its
-- ledger writes and before the refund requests a refund settles (which stage their own), so one
-- order's notifications are staged in the order of the changes. The dispute's row is written
-- after this routine, in the same subtransaction (payment_apply), so a dispute's notification
-- commits or rolls back with its transfer and its row. Built from 000032's text (its 25
-- parameters, the six dispute ones defaulting to NULL) with the two notification parameters
-- after them, so the capture paths name them (`p_notify =>`) and still bind no dispute array.
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
    p_account_a TEXT[], p_amount_a BIGINT[], p_account_b TEXT[], p_amount_b BIGINT[],
    p_payment_from TEXT[] DEFAULT NULL, p_disputed_from BIGINT[] DEFAULT NULL,
    p_disputed_to BIGINT[] DEFAULT NULL, p_dispute_id TEXT[] DEFAULT NULL,
    p_account_c TEXT[] DEFAULT NULL, p_amount_c BIGINT[] DEFAULT NULL,
    p_notify BOOLEAN[] DEFAULT NULL, p_reason TEXT[] DEFAULT NULL
) RETURNS BIGINT[] LANGUAGE plpgsql
-- Each update names its rows by key (`= ANY` on the key's index as well as the join), and no
-- plan may scan a whole table for them: the planner would otherwise pick a scan from the stale
-- size estimate of a young table, and a plpgsql plan keeps it for the session. Generic plans
-- only: with plan_cache_mode left to choose, its statements were planned again on every call
-- (a parameter array's default length estimate makes the generic plan look dearer), about
-- 340,000 of a lone capture's 2,250,000 PostgreSQL instructions (callgrind,
-- docs/notifications.md); the generic plans are the same index plans.
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_transfer_id BIGINT[];
    v_expected INT;
    v_count INT;
    v_kind TEXT[];
    v_status TEXT[];
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

    -- The merchants that have an endpoint hear of it: the order's new status, or the held
    -- capture. NULL (no item notifies, the common case without [[merchants]]) skips it all.
    -- A dispute's item carries its dispute id (NULL for a capture's or a refund's).
    IF true = ANY(p_notify) THEN
        SELECT array_agg(CASE WHEN NOT coalesce(t.notify, false) THEN NULL
                              WHEN t.order_to IS NOT NULL THEN 'order.' || t.order_to
                              WHEN t.payment_status = 'held' AND t.refunded_to IS NULL THEN 'payment.held'
                         END ORDER BY t.n),
               array_agg(coalesce(t.order_to, t.payment_status) ORDER BY t.n)
        INTO v_kind, v_status
        FROM unnest(p_notify, p_order_to, p_payment_status, p_refunded_to)
             WITH ORDINALITY AS t(notify, order_to, payment_status, refunded_to, n);
        v_count := notifications_stage(p_merchant_id, v_kind, p_order_id, v_status, p_amount_minor,
            p_currency, p_provider, p_event_id, v_transfer_id, p_payment_id, NULL, p_reason,
            p_dispute_id);
    END IF;

    -- A posted refund settles the merchant's refund request it answers, in this transaction.
    FOR i IN 1 .. cardinality(p_kind) LOOP
        IF p_kind[i] = 'refund' THEN
            PERFORM refund_requests_settle(p_merchant_id[i], p_provider[i], p_payment_id[i],
                                           p_refund_id[i], p_refunded_to[i],
                                           coalesce(p_notify[i], false), p_event_id[i], v_transfer_id[i]);
        END IF;
    END LOOP;
    RETURN v_transfer_id;
END
$$;

-- The one-statement capture's writer (migration 000021), passing its notification's parameters
-- on by name (after payment_apply_all's dispute parameters, which a capture leaves NULL).
DROP FUNCTION payment_apply_strict(BIGINT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT);
CREATE FUNCTION payment_apply_strict(
    p_transfer_id BIGINT,
    p_merchant_id BIGINT, p_provider TEXT, p_event_id TEXT, p_payment_id TEXT,
    p_order_id BIGINT, p_order_from TEXT, p_order_to TEXT,
    p_payment_status TEXT, p_amount_minor BIGINT, p_currency TEXT,
    p_refunded_from BIGINT, p_refunded_to BIGINT,
    p_kind TEXT, p_refund_id TEXT,
    p_account_a TEXT, p_amount_a BIGINT, p_account_b TEXT, p_amount_b BIGINT,
    p_notify BOOLEAN DEFAULT false, p_reason TEXT DEFAULT NULL
) RETURNS BIGINT LANGUAGE plpgsql AS $$
BEGIN
    RETURN (payment_apply_all(ARRAY[p_transfer_id], ARRAY[p_merchant_id], ARRAY[p_provider],
        ARRAY[p_event_id], ARRAY[p_payment_id], ARRAY[p_order_id], ARRAY[p_order_from],
        ARRAY[p_order_to], ARRAY[p_payment_status], ARRAY[p_amount_minor], ARRAY[p_currency],
        ARRAY[p_refunded_from], ARRAY[p_refunded_to], ARRAY[p_kind], ARRAY[p_refund_id],
        ARRAY[p_account_a], ARRAY[p_amount_a], ARRAY[p_account_b], ARRAY[p_amount_b],
        p_notify => ARRAY[p_notify], p_reason => ARRAY[p_reason]))[1];
END
$$;

-- The general path's call (migration 000032: an effect and its dispute's row in one
-- subtransaction), with the notification's parameters last.
DROP FUNCTION payment_apply(BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT,
    BIGINT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, TEXT, BIGINT, BIGINT, TEXT, TEXT,
    BIGINT, TEXT, TEXT, TEXT, TEXT, BIGINT, BIGINT, BIGINT, TEXT, TEXT);
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

DROP FUNCTION callback_first_delivery(TEXT, TEXT, TEXT, TIMESTAMPTZ, BYTEA, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, BIGINT, TEXT, TEXT, TEXT, BIGINT, TEXT, BIGINT, TEXT, TEXT, TEXT, TEXT);
CREATE FUNCTION callback_first_delivery(
    p_op TEXT, p_idem_key TEXT, p_request_hash TEXT, p_expires_at TIMESTAMPTZ, p_body BYTEA,
    p_merchant_id BIGINT, p_provider TEXT, p_event_id TEXT, p_payment_id TEXT,
    p_order_id BIGINT, p_order_from TEXT, p_order_to TEXT,
    p_payment_status TEXT, p_amount_minor BIGINT, p_currency TEXT,
    p_refunded_from BIGINT, p_refunded_to BIGINT,
    p_kind TEXT, p_refund_id TEXT,
    p_account_a TEXT, p_amount_a BIGINT, p_account_b TEXT, p_amount_b BIGINT,
    p_ack TEXT, p_event_type TEXT, p_outcome TEXT, p_reason TEXT,
    p_notify BOOLEAN DEFAULT false,
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

DROP FUNCTION callback_first_delivery_batch(TEXT, TEXT, TEXT[], TEXT[], TIMESTAMPTZ[], BYTEA[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[], BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[], TEXT[], TEXT[], TEXT[], TEXT[]);
CREATE FUNCTION callback_first_delivery_batch(
    p_op TEXT, p_lock_timeout TEXT,
    p_idem_key TEXT[], p_request_hash TEXT[], p_expires_at TIMESTAMPTZ[], p_body BYTEA[],
    p_merchant_id BIGINT[], p_provider TEXT[], p_event_id TEXT[], p_payment_id TEXT[],
    p_order_id BIGINT[], p_order_from TEXT[], p_order_to TEXT[],
    p_payment_status TEXT[], p_amount_minor BIGINT[], p_currency TEXT[],
    p_refunded_from BIGINT[], p_refunded_to BIGINT[],
    p_kind TEXT[], p_refund_id TEXT[],
    p_account_a TEXT[], p_amount_a BIGINT[], p_account_b TEXT[], p_amount_b BIGINT[],
    p_ack TEXT[], p_event_type TEXT[], p_outcome TEXT[], p_reason TEXT[],
    p_notify BOOLEAN[] DEFAULT NULL
) RETURNS TABLE (
    item INT,
    result first_delivery_result,
    status TEXT,
    response_status INT,
    response_body TEXT,
    request_hash TEXT
) LANGUAGE plpgsql
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
           array_agg(p_notify[i] ORDER BY n),
           array_agg(CASE WHEN p_kind[i] IS NOT NULL THEN nextval('ledger_transfers_id_seq') END ORDER BY n),
           -- Independent items: written together, they write what they would one by one.
           count(DISTINCT (p_merchant_id[i], p_idem_key[i])) = v_n
             AND count(DISTINCT (p_merchant_id[i], p_provider[i], p_event_id[i])) = v_n
             AND count(DISTINCT (p_merchant_id[i], p_provider[i], p_payment_id[i])) = v_n
             AND count(DISTINCT p_order_id[i]) = count(p_order_id[i])
    INTO v_idem_key, v_request_hash, v_expires_at, v_body, v_merchant_id, v_provider, v_event_id,
         v_payment_id, v_order_id, v_order_from, v_order_to, v_payment_status, v_amount_minor,
         v_currency, v_refunded_from, v_refunded_to, v_kind, v_refund_id, v_account_a, v_amount_a,
         v_account_b, v_amount_b, v_ack_text, v_event_type, v_outcome, v_reason, v_notify,
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
                v_event_type, v_outcome, v_reason, v_ack_status, v_transfer_id);
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
                coalesce(p_notify[v_i], false));
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
