-- Replaced by idx_merchant_notifications_due_by_endpoint (000068).
DROP INDEX CONCURRENTLY idx_merchant_notifications_due;
