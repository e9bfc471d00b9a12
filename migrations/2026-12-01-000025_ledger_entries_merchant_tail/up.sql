-- A balance read adds a merchant's entries after its checkpoint: (merchant_id, id) is that range,
-- and the included columns make it an index-only scan. It replaces
-- idx_ledger_entries_merchant_account (next migration), so each entry still costs one
-- index insertion here. Built CONCURRENTLY (captures insert entries all the time).
CREATE INDEX CONCURRENTLY idx_ledger_entries_merchant_tail
    ON ledger_entries (merchant_id, id) INCLUDE (account, currency, amount_minor);
