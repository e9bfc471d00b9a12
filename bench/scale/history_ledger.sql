-- History, part 1 of 2 for events :c0 .. :c1 (scripts/bench --scale): the order (paid), the
-- payment (succeeded) and the transfer with its two entries, as the gateway's one-statement
-- capture (callback_first_delivery, payment_apply_strict) writes them. Then, once part 2
-- (history_deliveries.sql) has stored the chunk's deliveries, history_records.sql adds their
-- idempotency records. The two parts run side by side in two sessions: each table is written
-- by one session only, in ascending key order as traffic appends, so no index gets the
-- half-full pages of two interleaved insert streams.
--
-- Run after `loadgen --emit-sql` in the same psql session: it defines the pg_temp functions that
-- build event n's values (exactly as the load generator builds its requests) and the psql
-- variables holding the gateway's own values (merchant, provider, statuses, accounts, signs).
-- Variables of the caller: c0, c1, a, b, epoch, span_secs, tid0. The phase a .. b is received
-- evenly over the span_secs before epoch (unix seconds), oldest first:
--   received(n) = epoch - span_secs * (b - n) / (b - a + 1),
-- and event n's transfer id is tid0 + (n - a) (the caller reserved the phase's ids).
--
-- Nothing of the schema is disabled: every index, constraint and trigger is maintained row by
-- row. Each statement computes what it needs from n again (two SHA-256 blocks).
\set ON_ERROR_STOP on
BEGIN;

INSERT INTO orders (id, user_id, amount_minor, currency, reference, status, created_at)
SELECT n, :merchant_id, pg_temp.scale_amount(n, hb), pg_temp.scale_currency(n, hb),
       pg_temp.scale_reference(n, hb), :'order_paid',
       -- The order was placed a few minutes before it was paid.
       at - make_interval(secs => 30 + n % 900)
FROM generate_series(:c0::bigint, :c1::bigint) AS n,
     LATERAL (SELECT pg_temp.scale_hb_head(n) AS hb OFFSET 0) AS h,
     LATERAL (SELECT to_timestamp(:epoch - :span_secs * (:b - n)::float8 / (:b - :a + 1)) AS at) AS t;

INSERT INTO payments (merchant_id, provider, payment_id, order_id, status, amount_minor, currency,
                      created_at, updated_at)
SELECT :merchant_id, :'provider', pg_temp.scale_payment_id(n, hb), n, :'payment_status',
       pg_temp.scale_amount(n, hb), pg_temp.scale_currency(n, hb), at, at
FROM generate_series(:c0::bigint, :c1::bigint) AS n,
     LATERAL (SELECT pg_temp.scale_hb_head(n) AS hb OFFSET 0) AS h,
     LATERAL (SELECT to_timestamp(:epoch - :span_secs * (:b - n)::float8 / (:b - :a + 1)) AS at) AS t;

INSERT INTO ledger_transfers (id, merchant_id, provider, event_id, kind, order_id, payment_id,
                              created_at)
SELECT :tid0 + (n - :a), :merchant_id, :'provider', pg_temp.scale_event_id(n, hb), :'kind', n,
       pg_temp.scale_payment_id(n, hb), at
FROM generate_series(:c0::bigint, :c1::bigint) AS n,
     LATERAL (SELECT pg_temp.scale_hb_head(n) AS hb OFFSET 0) AS h,
     LATERAL (SELECT to_timestamp(:epoch - :span_secs * (:b - n)::float8 / (:b - :a + 1)) AS at) AS t;

-- Entry a, then entry b, of each transfer, as payment_apply_strict inserts them.
INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor)
SELECT :tid0 + (n - :a), :merchant_id, e.account, pg_temp.scale_currency(n, hb),
       e.sign * pg_temp.scale_amount(n, hb)
FROM generate_series(:c0::bigint, :c1::bigint) AS n,
     LATERAL (SELECT pg_temp.scale_hb_head(n) AS hb OFFSET 0) AS h,
     LATERAL (VALUES (1, :'account_a', :sign_a), (2, :'account_b', :sign_b)) AS e (k, account, sign);

COMMIT;
