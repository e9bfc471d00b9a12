-- The indexes by endpoint take the names the code and the docs know (a rename takes a lock that
-- lets reads and writes go on).
ALTER INDEX idx_merchant_notifications_due_by_endpoint RENAME TO idx_merchant_notifications_due;
ALTER INDEX idx_merchant_notifications_order_by_endpoint RENAME TO idx_merchant_notifications_order;
