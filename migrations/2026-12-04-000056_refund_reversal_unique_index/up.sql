-- A refund id posts at most once as a refund and at most once as its reversal, whatever events
-- carry them: unique per kind, as a dispute's transfers are. Built CONCURRENTLY (captures insert
-- transfers all the time); the index it replaces (unique over every kind) is dropped by the
-- next migration, once this one stands. No IF NOT EXISTS: a failed build leaves an INVALID
-- index, and the next run should stop on it rather than skip it.
CREATE UNIQUE INDEX CONCURRENTLY uq_ledger_transfers_refund_kind
    ON ledger_transfers (merchant_id, provider, refund_id, kind) WHERE refund_id IS NOT NULL;
