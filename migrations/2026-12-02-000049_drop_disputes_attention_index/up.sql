-- Replaced by idx_payment_disputes_attention_v2 (previous migration).
DROP INDEX CONCURRENTLY idx_payment_disputes_attention;
