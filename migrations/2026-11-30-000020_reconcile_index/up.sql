-- Serves `callback-gateway reconcile`: one range scan over a merchant's transfers from one
-- provider in a time window. Built CONCURRENTLY (hence metadata.toml: no transaction) because
-- every capture inserts into ledger_transfers, and a plain CREATE INDEX would block them for
-- as long as the build takes on a large ledger. No IF NOT EXISTS: a build that failed leaves
-- an INVALID index behind, and the next run should stop on it rather than skip it.
CREATE INDEX CONCURRENTLY idx_ledger_transfers_reconcile
    ON ledger_transfers (merchant_id, provider, created_at);
