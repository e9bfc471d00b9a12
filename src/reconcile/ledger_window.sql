-- One pass over a merchant's transfers from one provider created in [$4, $5), a range scan of
-- idx_ledger_transfers_reconcile. Each transfer comes with its entries other than its clearing
-- entry ($3 = 'psp_clearing:<provider>'): the merchant's side, whose size is what the provider
-- moved for the payment (merchant_payable, or unapplied_funds when the money is held), and for
-- a chargeback with a fee its dispute_fees entry, the fee (the clearing entry is their sum).
-- The amount's sign, the held rule and the kind of a fee entry are read in Rust
-- (src/reconcile/ledger.rs).
SELECT t.payment_id,
       t.kind,
       t.created_at,
       e.currency,
       e.amount_minor,
       e.account
FROM ledger_transfers t
JOIN ledger_entries e ON e.transfer_id = t.id AND e.account <> $3
WHERE t.merchant_id = $1
  AND t.provider = $2
  AND t.created_at >= $4
  AND t.created_at < $5
