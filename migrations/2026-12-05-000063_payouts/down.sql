DROP FUNCTION payout_apply(BIGINT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, TEXT, TEXT, TEXT, TEXT);
-- Payout transfers are part of the append-only books: the older check cannot hold with them.
ALTER TABLE ledger_transfers DROP CONSTRAINT ledger_transfers_kind_check;
ALTER TABLE ledger_transfers ADD CONSTRAINT ledger_transfers_kind_check
    CHECK (kind = ANY (ARRAY['payment'::text, 'refund'::text, 'chargeback'::text,
                             'chargeback_reversal'::text, 'refund_reversal'::text])) NOT VALID;
DROP TABLE payouts;
