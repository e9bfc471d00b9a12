-- Replaced by idx_merchant_notifications_merchant_finished together with the due index (the
-- pending rows), so a staged notification no longer writes an entry here.
DROP INDEX CONCURRENTLY idx_merchant_notifications_merchant;
