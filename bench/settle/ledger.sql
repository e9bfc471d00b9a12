-- The books of bench/settle: :rows captured Stripe payments (merchant 42), payment intent
-- pi_bench_<g>, 10.00 to 59.99 EUR, one a second from 2026-03-01, each a `payment` transfer
-- (psp_clearing:stripe +amount, merchant_payable -amount) as the callback path posts it; and
-- per 10,000 of them the payout po_bench_<g / 10000> of what they leave after Stripe's fee
-- (bench/settle/report.sql's), a `payout` transfer (bank:stripe:EUR +net, psp_clearing:stripe
-- -net). The amounts are computed here and in report.sql by the same expressions.
CREATE TEMP TABLE staging AS
SELECT 'evt_bench_' || g AS event_id, 'payment' AS kind, 'pi_bench_' || g AS payment_id,
       1000 + g % 5000 AS amount,
       timestamptz '2026-03-01' + g * interval '1 second' AS created_at
FROM generate_series(0, :rows - 1) g;
INSERT INTO staging
SELECT 'evt_bench_po_' || g / 10000, 'payout', 'po_bench_' || g / 10000,
       sum(1000 + g % 5000 - (30 + (1000 + g % 5000) * 29 / 1000)),
       max(timestamptz '2026-03-01' + g * interval '1 second') + interval '1 day'
FROM generate_series(0, :rows - 1) g GROUP BY g / 10000;

INSERT INTO ledger_transfers (merchant_id, provider, event_id, kind, payment_id, created_at)
SELECT 42, 'stripe', event_id, kind, payment_id, created_at FROM staging ORDER BY created_at;

INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor)
SELECT t.id, 42, e.account, 'EUR', e.amount
FROM staging s JOIN ledger_transfers t ON t.merchant_id = 42 AND t.provider = 'stripe' AND t.event_id = s.event_id,
LATERAL (VALUES ('psp_clearing:stripe', CASE WHEN s.kind = 'payment' THEN s.amount ELSE -s.amount END),
                (CASE WHEN s.kind = 'payment' THEN 'merchant_payable' ELSE 'bank:stripe:EUR' END,
                 CASE WHEN s.kind = 'payment' THEN -s.amount ELSE s.amount END)) AS e(account, amount);
ANALYZE ledger_transfers;
ANALYZE ledger_entries;
