-- Per-order order holds per endpoint (migration 000067): a row waits for an earlier pending row
-- of its order and endpoint. Built concurrently; it takes the old one's name in 000072.
CREATE INDEX CONCURRENTLY idx_merchant_notifications_order_by_endpoint
    ON merchant_notifications (order_id, endpoint_id, id)
    WHERE status = 'pending' AND order_id IS NOT NULL;
