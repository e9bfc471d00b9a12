-- Replaced by idx_merchant_notifications_order_by_endpoint (000069).
DROP INDEX CONCURRENTLY idx_merchant_notifications_order;
