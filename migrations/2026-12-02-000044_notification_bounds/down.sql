ALTER TABLE notification_endpoints
    DROP COLUMN dropped,
    DROP COLUMN last_dropped_at;
