-- History, after both parts for events :c0 .. :c1 (see history_ledger.sql): each event's
-- finished idempotency record, read off its stored delivery: the key as the gateway builds it
-- (provider-prefixed event id), the request hash as it computes it (hex SHA-256 of the raw
-- body), the ack it stored (callback_first_delivery: p_ack::JSONB || the transfer id), created
-- when the delivery was received and expiring the provider's retention later.
\set ON_ERROR_STOP on
-- One indexed lookup per event, in event order: the deliveries' statistics lag behind the load,
-- and a hash join or a scan would read every stored delivery.
SET enable_hashjoin = off;
SET enable_mergejoin = off;
SET enable_seqscan = off;
WITH inserted AS (
    INSERT INTO idempotency_keys (user_id, op, idem_key, request_hash, status, response_status,
                                  response_body, created_at, expires_at)
    SELECT d.merchant_id, :'op', :'idem_key_prefix' || d.event_id, encode(sha256(d.body), 'hex'),
           :'record_status', :ack_status,
           :'ack'::jsonb || jsonb_build_object('event_id', d.event_id, 'transfer_id', d.transfer_id),
           d.received_at, d.received_at + make_interval(secs => :ttl_secs)
    FROM generate_series(:c0::bigint, :c1::bigint) AS n
    CROSS JOIN LATERAL (SELECT pg_temp.scale_event_id(n, pg_temp.scale_hb_head(n)) AS event_id OFFSET 0) AS e
    JOIN callback_deliveries d
      ON d.merchant_id = :merchant_id AND d.provider = :'provider' AND d.event_id = e.event_id
    RETURNING 1
)
-- The caller checks that every event of the chunk got its record.
SELECT count(*) FROM inserted;
