CREATE INDEX CONCURRENTLY idx_idempotency_keys_leases ON idempotency_keys (op, locked_until)
    WHERE status = 'processing';
