-- Replaced by uq_ledger_transfers_refund_kind (000056): a refund's reversal carries its id.
DROP INDEX CONCURRENTLY uq_ledger_transfers_refund;
