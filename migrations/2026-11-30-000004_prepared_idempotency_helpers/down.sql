DROP FUNCTION idempotency_finish(BIGINT, TEXT, INT, JSONB);
DROP FUNCTION idempotency_response_text(JSONB);
