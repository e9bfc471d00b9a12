DROP TABLE refund_requests;
DROP INDEX idx_idempotency_keys_leases;
ALTER TABLE idempotency_keys
    DROP COLUMN lease_token,
    DROP COLUMN locked_until;
