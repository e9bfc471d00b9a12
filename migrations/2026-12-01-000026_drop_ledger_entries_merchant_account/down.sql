CREATE INDEX CONCURRENTLY idx_ledger_entries_merchant_account
    ON ledger_entries (merchant_id, account, currency);
