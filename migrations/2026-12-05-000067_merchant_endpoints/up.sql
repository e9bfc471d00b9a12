-- Several endpoints per merchant (docs/notifications.md, "Several endpoints"): each endpoint
-- made by API names the event types it receives (`filter_types`, empty: every type) and how
-- many notifications a second it takes (`rate_limit_per_sec`, NULL: as fast as the sender
-- goes). A notification is staged once per subscribed endpoint, by the same one writer in the
-- same transaction as before, so each endpoint has its own row, attempts, order and health.
-- The endpoint of the configuration file (`[[merchants]] notify_url`) is the endpoint `file`:
-- it receives a merchant's notifications while the merchant has no endpoint made by API.

ALTER TABLE webhook_endpoints DROP CONSTRAINT uq_webhook_endpoints_merchant;
ALTER TABLE webhook_endpoints
    ADD COLUMN filter_types TEXT[] NOT NULL DEFAULT '{}'
        CHECK (cardinality(filter_types) <= 32 AND array_position(filter_types, NULL) IS NULL),
    ADD COLUMN rate_limit_per_sec INT CHECK (rate_limit_per_sec BETWEEN 1 AND 1000);
-- Staging reads a merchant's endpoints by this index on every staged change.
CREATE INDEX idx_webhook_endpoints_merchant ON webhook_endpoints (merchant_id);

-- Each row is for one endpoint: `file` or the id of an endpoint made by API. A merchant had at
-- most one endpoint made by API until now, and it received all of the merchant's notifications.
-- The column with a constant default is a change of the catalog alone (no rewrite); only the
-- pending rows are moved here, by the due index (few: they are being delivered, at most
-- disabled_keep of a disabled endpoint). The finished ones follow in batches (000073), and the
-- per-endpoint indexes are built concurrently (000068 to 000072): nothing here holds the table
-- locked for longer than the pending rows take.
ALTER TABLE merchant_notifications ADD COLUMN endpoint_id TEXT NOT NULL DEFAULT 'file';
UPDATE merchant_notifications n SET endpoint_id = w.id
FROM webhook_endpoints w WHERE w.merchant_id = n.merchant_id AND n.status = 'pending';
ALTER TABLE notification_endpoints ADD COLUMN endpoint_id TEXT NOT NULL DEFAULT 'file';
UPDATE notification_endpoints e SET endpoint_id = w.id
FROM webhook_endpoints w WHERE w.merchant_id = e.merchant_id;
ALTER TABLE notification_endpoints DROP CONSTRAINT notification_endpoints_pkey;
ALTER TABLE notification_endpoints ADD PRIMARY KEY (merchant_id, endpoint_id);

-- The one writer, fanned out: each item goes to every endpoint of its merchant made by API
-- whose filter names its type (or has none), or, for a merchant with no such endpoint at all,
-- to its file endpoint. A `ping` goes to the endpoint it names (its detail) alone.
CREATE OR REPLACE FUNCTION notifications_stage(
    p_merchant_id BIGINT[], p_kind TEXT[], p_order_id BIGINT[], p_object_status TEXT[],
    p_amount_minor BIGINT[], p_currency TEXT[], p_provider TEXT[], p_event_id TEXT[],
    p_transfer_id BIGINT[], p_payment_id TEXT[], p_refund_request_id BIGINT[], p_detail TEXT[],
    p_dispute_id TEXT[] DEFAULT NULL
) RETURNS INT LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_count INT;
BEGIN
    INSERT INTO merchant_notifications
        (merchant_id, endpoint_id, kind, order_id, object_status, reference, amount_minor,
         currency, provider, event_id, transfer_id, payment_id, refund_request_id, detail,
         dispute_id)
    SELECT t.merchant_id, e.endpoint_id, t.kind, t.order_id, t.object_status, o.reference,
           t.amount_minor, t.currency, t.provider, t.event_id, t.transfer_id, t.payment_id,
           t.refund_request_id, t.detail, t.dispute_id
    FROM unnest(p_merchant_id, p_kind, p_order_id, p_object_status, p_amount_minor, p_currency,
                p_provider, p_event_id, p_transfer_id, p_payment_id, p_refund_request_id, p_detail,
                p_dispute_id)
         WITH ORDINALITY AS t(merchant_id, kind, order_id, object_status, amount_minor, currency,
                              provider, event_id, transfer_id, payment_id, refund_request_id,
                              detail, dispute_id, n)
    CROSS JOIN LATERAL (
        SELECT w.id FROM webhook_endpoints w
        WHERE w.merchant_id = t.merchant_id
          AND CASE WHEN t.kind = 'ping' THEN w.id = t.detail
                   ELSE cardinality(w.filter_types) = 0 OR t.kind = ANY (w.filter_types) END
        UNION ALL
        SELECT 'file'
        WHERE NOT EXISTS (SELECT 1 FROM webhook_endpoints w WHERE w.merchant_id = t.merchant_id)
    ) AS e(endpoint_id)
    LEFT JOIN orders o ON o.id = t.order_id AND o.user_id = t.merchant_id
    WHERE t.kind IS NOT NULL
    ORDER BY t.n, e.endpoint_id;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
