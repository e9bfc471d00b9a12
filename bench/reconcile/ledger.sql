-- The ledger side of the 1M-line report: the same movements posted 2 s after the provider's
-- time, except 9 payments never posted (g % 100000 = 7), 9 posted one cent more
-- (g % 100000 = 13), and 10 payments only in the ledger.
CREATE TEMP TABLE staging AS
SELECT 'p' || g AS event_id, 'payment' AS kind, 'pay_' || g AS payment_id,
       1000 + g % 5000 + (CASE WHEN g % 100000 = 13 THEN 1 ELSE 0 END) AS amount,
       timestamptz '2026-03-01' + g * interval '86 milliseconds' + interval '2 seconds' AS created_at
FROM generate_series(0, 899999) g WHERE g % 100000 <> 7
UNION ALL
SELECT 'r' || j, 'refund', 'pay_' || (j * 9), 100 + j % 50,
       timestamptz '2026-03-01' + (j * 9) * interval '86 milliseconds' + interval '3 seconds'
FROM generate_series(0, 99999) j
UNION ALL
SELECT 'x' || k, 'payment', 'pay_extra_' || k, 777, timestamptz '2026-03-01 12:00' + k * interval '1 minute'
FROM generate_series(1, 10) k;

INSERT INTO ledger_transfers (merchant_id, provider, event_id, kind, order_id, payment_id, created_at)
SELECT 42, 'acme', event_id, kind, 1, payment_id, created_at FROM staging ORDER BY created_at;

INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor)
SELECT t.id, 42, e.account, 'EUR', e.amount
FROM staging s JOIN ledger_transfers t ON t.merchant_id = 42 AND t.provider = 'acme' AND t.event_id = s.event_id,
LATERAL (VALUES ('psp_clearing:acme', CASE WHEN s.kind = 'payment' THEN s.amount ELSE -s.amount END),
                ('merchant_payable', CASE WHEN s.kind = 'payment' THEN -s.amount ELSE s.amount END)) AS e(account, amount);
ANALYZE ledger_transfers;
ANALYZE ledger_entries;
