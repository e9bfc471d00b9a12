-- History, part 2 of 2 for events :c0 .. :c1 (see history_ledger.sql for the variables): each
-- event's delivery as callback_record_delivery stores it, with the raw body exactly as the load
-- generator sends it (built once, here; PostgreSQL compresses and TOASTs it as it does the
-- gateway's), the event's type, its outcome and the transfer it posted.
\set ON_ERROR_STOP on
INSERT INTO callback_deliveries (merchant_id, provider, event_id, body, received_at, event_type,
                                 outcome, reason, ack_status, transfer_id)
SELECT :merchant_id, :'provider', pg_temp.scale_event_id(n, hb), pg_temp.scale_body(n, hb), at,
       :'event_type', :'outcome', NULL, :ack_status, :tid0 + (n - :a)
FROM generate_series(:c0::bigint, :c1::bigint) AS n,
     LATERAL (SELECT pg_temp.scale_hb(n) AS hb OFFSET 0) AS h,
     LATERAL (SELECT to_timestamp(:epoch - :span_secs * (:b - n)::float8 / (:b - :a + 1)) AS at) AS t;
