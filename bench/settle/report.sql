-- The report of bench/settle: Stripe's itemized payout reconciliation report (the columns of
-- tests/api/settlement.rs, payment_intent_id asked for) of the payments bench/settle/ledger.sql
-- books, one `charge` line each, amounts in major units, Stripe's fee 2.9 % + 0.30 (rounded
-- down, as ledger.sql's payouts count it), 10,000 lines a payout.
COPY (
    SELECT 'po_bench_' || g / 10000 AS automatic_payout_id,
           to_char(timestamptz '2026-03-02' + g * interval '1 second', 'YYYY-MM-DD HH24:MI:SS') AS automatic_payout_effective_at,
           'txn_bench_' || g AS balance_transaction_id,
           to_char(timestamptz '2026-03-01' + g * interval '1 second', 'YYYY-MM-DD HH24:MI:SS') AS created_utc,
           to_char(timestamptz '2026-03-01' + g * interval '1 second', 'YYYY-MM-DD HH24:MI:SS') AS created,
           to_char(timestamptz '2026-03-02' + g * interval '1 second', 'YYYY-MM-DD HH24:MI:SS') AS available_on_utc,
           to_char(timestamptz '2026-03-02' + g * interval '1 second', 'YYYY-MM-DD HH24:MI:SS') AS available_on,
           'eur' AS currency,
           to_char((1000 + g % 5000) / 100.0, 'FM999990.00') AS gross,
           to_char((30 + (1000 + g % 5000) * 29 / 1000) / 100.0, 'FM999990.00') AS fee,
           to_char((1000 + g % 5000 - (30 + (1000 + g % 5000) * 29 / 1000)) / 100.0, 'FM999990.00') AS net,
           'charge' AS reporting_category,
           'ch_bench_' || g AS source_id,
           '' AS description,
           to_char(timestamptz '2026-03-02' + g * interval '1 second', 'YYYY-MM-DD HH24:MI:SS') AS automatic_payout_effective_at_utc,
           'pi_bench_' || g AS payment_intent_id
    FROM generate_series(0, :rows - 1) g
) TO STDOUT WITH (FORMAT csv, HEADER);
