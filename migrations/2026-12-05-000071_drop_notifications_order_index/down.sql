CREATE INDEX CONCURRENTLY idx_merchant_notifications_order
    ON merchant_notifications (order_id, id) WHERE status = 'pending' AND order_id IS NOT NULL;
