-- The shape of event :n's stored rows: every value that does not differ from one captured event
-- to the next (statuses, accounts, signs, the ack's fields, the retention), and whether the
-- values that do differ hang together (the transfer the delivery and the ack name, the hash of
-- the body). scripts/bench --scale compares a history event's shape with a gateway-written one's.
-- Needs the session of `loadgen --emit-sql` (pg_temp functions, psql variables).
\set ON_ERROR_STOP on
SELECT jsonb_pretty(jsonb_build_object(
    'order', jsonb_build_object(
        'user_id', o.user_id, 'status', o.status, 'amount_is_the_payment', o.amount_minor = p.amount_minor,
        'currency_is_the_payment', o.currency = p.currency),
    'payment', jsonb_build_object(
        'status', p.status, 'refunded_minor', p.refunded_minor, 'order_is_the_order', p.order_id = o.id),
    'transfer', jsonb_build_object(
        'kind', t.kind, 'refund_id', t.refund_id, 'payment_is_the_payment', t.payment_id = p.payment_id),
    'entries', (SELECT jsonb_agg(jsonb_build_object(
                    'account', e.account, 'merchant_id', e.merchant_id, 'sign', sign(e.amount_minor),
                    'amount_is_the_payment', abs(e.amount_minor) = p.amount_minor,
                    'currency_is_the_payment', e.currency = p.currency) ORDER BY e.id)
                FROM ledger_entries e WHERE e.transfer_id = t.id),
    'delivery', jsonb_build_object(
        'event_type', d.event_type, 'outcome', d.outcome, 'reason', d.reason, 'ack_status', d.ack_status,
        'transfer_is_the_transfer', d.transfer_id = t.id,
        'body_is_the_template', d.body = pg_temp.scale_body(:n, pg_temp.scale_hb(:n))),
    'record', jsonb_build_object(
        'status', k.status, 'response_status', k.response_status,
        'hash_is_the_body_sha256', k.request_hash = encode(sha256(d.body), 'hex'),
        'ack_without_ids', k.response_body - 'event_id' - 'transfer_id',
        'ack_event_is_the_event', k.response_body ->> 'event_id' = d.event_id,
        'ack_transfer_is_the_transfer', (k.response_body ->> 'transfer_id')::bigint = t.id,
        'retention_minutes', round(extract(epoch FROM k.expires_at - k.created_at) / 60),
        'no_lease', k.locked_until IS NULL AND k.lease_token IS NULL)
))
FROM (SELECT pg_temp.scale_event_id(:n, pg_temp.scale_hb_head(:n)) AS event_id) AS ev
JOIN callback_deliveries d ON d.merchant_id = :merchant_id AND d.provider = :'provider' AND d.event_id = ev.event_id
JOIN ledger_transfers t ON t.merchant_id = d.merchant_id AND t.provider = d.provider AND t.event_id = d.event_id
JOIN payments p ON p.merchant_id = t.merchant_id AND p.provider = t.provider AND p.payment_id = t.payment_id
JOIN orders o ON o.id = t.order_id
LEFT JOIN idempotency_keys k ON k.user_id = d.merchant_id AND k.op = :'op'
                             AND k.idem_key = :'idem_key_prefix' || d.event_id;
