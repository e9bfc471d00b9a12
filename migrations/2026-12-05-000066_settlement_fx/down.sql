DROP FUNCTION settlement_fx_post(BIGINT, TEXT, TEXT[], TEXT[], TEXT[], BIGINT[], TEXT[], BIGINT[]);
ALTER TABLE ledger_transfers DROP CONSTRAINT ledger_transfers_kind_check;
ALTER TABLE ledger_transfers ADD CONSTRAINT ledger_transfers_kind_check
    CHECK (kind = ANY (ARRAY['payment'::text, 'refund'::text, 'chargeback'::text,
                             'chargeback_reversal'::text, 'refund_reversal'::text,
                             'payout'::text, 'payout_reversal'::text, 'fee'::text])) NOT VALID;
