-- A refund the provider reported and then gave back (it failed after it was booked, or it was
-- cancelled or returned): a transfer of its own, `refund_reversal`, the refund's exact inverse
-- (docs/callbacks.md). NOT VALID, then validated: the check is added without holding writers
-- back while the existing rows are read.
ALTER TABLE ledger_transfers DROP CONSTRAINT ledger_transfers_kind_check;
ALTER TABLE ledger_transfers ADD CONSTRAINT ledger_transfers_kind_check
    CHECK (kind = ANY (ARRAY['payment'::text, 'refund'::text, 'chargeback'::text,
                             'chargeback_reversal'::text, 'refund_reversal'::text])) NOT VALID;
ALTER TABLE ledger_transfers VALIDATE CONSTRAINT ledger_transfers_kind_check;
