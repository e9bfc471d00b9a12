DROP FUNCTION idempotency_acquire(BIGINT, TEXT, TEXT, TEXT, TIMESTAMPTZ);
DROP TABLE idempotency_keys;
