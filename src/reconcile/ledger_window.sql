-- One pass over a merchant's transfers from one provider created in [$4, $5), a range scan of
-- idx_ledger_transfers_reconcile. Each transfer comes with its clearing entry ($3 =
-- 'psp_clearing:<provider>': its amount and currency are what the provider moved) and the
-- account of its other entry (merchant_payable, or unapplied_funds when the money is held).
-- The amount's sign and the held rule are read in Rust (src/reconcile/ledger.rs).
SELECT t.payment_id,
       t.kind,
       t.created_at,
       c.currency,
       c.amount_minor,
       o.account AS other_account
FROM ledger_transfers t
JOIN ledger_entries c ON c.transfer_id = t.id AND c.account = $3
JOIN ledger_entries o ON o.transfer_id = t.id AND o.id <> c.id
WHERE t.merchant_id = $1
  AND t.provider = $2
  AND t.created_at >= $4
  AND t.created_at < $5
