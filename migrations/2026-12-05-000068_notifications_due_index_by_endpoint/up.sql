-- The sender claims per endpoint (migration 000067): its due index by endpoint, built beside the
-- old one without blocking writes; it takes the old one's name in 000072.
CREATE INDEX CONCURRENTLY idx_merchant_notifications_due_by_endpoint
    ON merchant_notifications (merchant_id, endpoint_id, next_attempt_at, id)
    WHERE status = 'pending';
