CREATE UNIQUE INDEX CONCURRENTLY uq_ledger_transfers_refund
    ON ledger_transfers (merchant_id, provider, refund_id) WHERE refund_id IS NOT NULL;
