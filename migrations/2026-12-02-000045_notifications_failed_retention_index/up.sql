-- The retention pass of failed notifications (every attempt failed): oldest last attempt
-- first, as idx_merchant_notifications_retention serves the delivered ones. A row enters it
-- only when it fails for good, so staging and the claim never write it. Built CONCURRENTLY
-- (hence metadata.toml: no transaction): the sender writes the table all the time.
CREATE INDEX CONCURRENTLY idx_merchant_notifications_failed_retention
    ON merchant_notifications (last_attempt_at) WHERE status = 'failed';
