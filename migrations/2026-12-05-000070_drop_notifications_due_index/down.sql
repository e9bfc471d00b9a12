CREATE INDEX CONCURRENTLY idx_merchant_notifications_due
    ON merchant_notifications (merchant_id, next_attempt_at, id) WHERE status = 'pending';
