-- The recoverer used to scan idempotency_keys for abandoned refund.create leases through this
-- index; since migration 000023 it reads its due requests from refund_requests
-- (idx_refund_requests_due) and joins the record by its key, so nothing reads this any more.
DROP INDEX CONCURRENTLY idx_idempotency_keys_leases;
