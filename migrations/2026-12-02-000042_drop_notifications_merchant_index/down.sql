CREATE INDEX CONCURRENTLY idx_merchant_notifications_merchant ON merchant_notifications (merchant_id, id);
