-- A merchant's finished (delivered or failed) notifications, newest first: with the due index
-- (a merchant's pending rows) it serves the admin list and a redelivery of a time range, and
-- it replaces idx_merchant_notifications_merchant (next migration), which held every row from
-- the moment it was staged. Staging then writes three index entries instead of four, and the
-- claim (which moves next_attempt_at, so its update is never HOT) three instead of four; a
-- row's entry here is written when it finishes, as the old index's second entry was. Built
-- CONCURRENTLY (hence metadata.toml: no transaction): every staged notification inserts here.
CREATE INDEX CONCURRENTLY idx_merchant_notifications_merchant_finished
    ON merchant_notifications (merchant_id, id) WHERE status <> 'pending';
