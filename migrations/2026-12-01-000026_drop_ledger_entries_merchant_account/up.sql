-- Replaced by idx_ledger_entries_merchant_tail, which serves a whole sum as well as a tail.
DROP INDEX CONCURRENTLY idx_ledger_entries_merchant_account;
